/* job.c: the job every process agrees on: its option table, resolution into the nn/ and adapt/
 * configurations, the tensor layout without parameter memory, and the fingerprint. The data
 * files' headers are read in job_data.c. */
#include "gv_ps.h"
#include "ps_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const model_choices[] = {"softmax", "mlp", "cnn", "lstm", "external", NULL};
static const char *const data_choices[] = {"auto",    "fashion-mnist", "mnist",     "idx",
                                           "cifar10", "text",          "synthetic", NULL};
static const char *const method_choices[] = {"dense",     "static",     "gravac-exp", "gravac-geo",
                                             "accordion", "dense-fp16", "auto",       NULL};
static const int model_values[] = {GV_NN_SOFTMAX, GV_NN_MLP, GV_NN_CNN, GV_NN_LSTM,
                                   (int)GV_JOB_MODEL_EXTERNAL};
static const char *const optim_choices[] = {"job", "caller", NULL};
static const int optim_values[] = {GV_JOB_OPTIM_JOB, GV_JOB_OPTIM_CALLER};
static const int data_values[] = {GV_JOB_DATA_AUTO,     GV_JOB_DATA_FASHION, GV_JOB_DATA_MNIST,
                                  GV_JOB_DATA_IDX,      GV_JOB_DATA_CIFAR10, GV_JOB_DATA_TEXT,
                                  GV_JOB_DATA_SYNTHETIC};
static const int method_values[] = {GV_JOB_DENSE,      GV_JOB_STATIC,    GV_JOB_GRAVAC_EXP,
                                    GV_JOB_GRAVAC_GEO, GV_JOB_ACCORDION, GV_JOB_DENSE_FP16,
                                    GV_JOB_AUTO};
static const char *const downlink_choices[] = {"topk", "union", NULL};
static const int downlink_values[] = {GV_DOWNLINK_TOPK, GV_DOWNLINK_UNION};
static const char *const scope_choices[] = {"auto", "tensor", "model", NULL};
static const int scope_values[] = {GV_SCOPE_AUTO, GV_SCOPE_TENSOR, GV_SCOPE_MODEL};
/* dense is a method, not a compressor */
static const char *const cmp_choices[] = {"topk", "randomk", "dgc", "redsync", NULL};
static const int cmp_values[] = {GV_CMP_TOPK, GV_CMP_RANDOMK, GV_CMP_DGC, GV_CMP_REDSYNC};

#define J(f) offsetof(struct gv_job, f)

const struct gv_opt gv_job_options[] = {
    {.name = "model",
     .type = GV_OPT_ENUM,
     .offset = J(model),
     .def = "mlp",
     .help = "model to train (external: the workers' own, e.g. PyTorch through libgravac; its "
             "layout comes from them)",
     .group = "model",
     .choices = model_choices,
     .values = model_values},
    {.name = "widths",
     .type = GV_OPT_STRING,
     .offset = J(widths),
     .def = "256,128",
     .help = "MLP hidden widths, comma-separated",
     .group = "model"},
    {.name = "cnn",
     .type = GV_OPT_STRING,
     .offset = J(cnn),
     .def = "16,32,128",
     .help = "CNN channels of conv1, conv2 and the dense width",
     .group = "model"},
    {.name = "embed",
     .type = GV_OPT_INT,
     .offset = J(embed),
     .def = "32",
     .help = "LSTM embedding width",
     .group = "model",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 4096},
    {.name = "hidden",
     .type = GV_OPT_INT,
     .offset = J(hidden),
     .def = "128",
     .help = "LSTM hidden width",
     .group = "model",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 4096},
    {.name = "layers",
     .type = GV_OPT_INT,
     .offset = J(layers),
     .def = "1",
     .help = "LSTM layers",
     .group = "model",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = GV_NN_MAX_LSTM_LAYERS},
    {.name = "seq-len",
     .type = GV_OPT_INT,
     .offset = J(seq_len),
     .def = "64",
     .help = "LSTM window length",
     .group = "model",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 4096},
    {.name = "dataset",
     .type = GV_OPT_ENUM,
     .offset = J(data),
     .def = "auto",
     .help = "training data (auto: text for the lstm, fashion-mnist otherwise)",
     .group = "data",
     .choices = data_choices,
     .values = data_values},
    {.name = "data-dir",
     .type = GV_OPT_STRING,
     .offset = J(data_dir),
     .def = "",
     .help = "directory of fashion-mnist (default " GV_NN_FASHION_MNIST_DIR "), mnist, cifar10",
     .group = "data"},
    {.name = "train-images",
     .type = GV_OPT_STRING,
     .offset = J(train_images),
     .def = "",
     .help = "idx: training images file",
     .group = "data"},
    {.name = "train-labels",
     .type = GV_OPT_STRING,
     .offset = J(train_labels),
     .def = "",
     .help = "idx: training labels file",
     .group = "data"},
    {.name = "test-images",
     .type = GV_OPT_STRING,
     .offset = J(test_images),
     .def = "",
     .help = "idx: test images file",
     .group = "data"},
    {.name = "test-labels",
     .type = GV_OPT_STRING,
     .offset = J(test_labels),
     .def = "",
     .help = "idx: test labels file",
     .group = "data"},
    {.name = "classes",
     .type = GV_OPT_INT,
     .offset = J(classes),
     .def = "10",
     .help = "idx: number of classes",
     .group = "data",
     .flags = GV_OPT_RANGE,
     .min = 2,
     .max = 256},
    {.name = "text",
     .type = GV_OPT_STRING,
     .offset = J(text),
     .def = "",
     .help = "text corpus files, comma-separated (default: the fortunes package)",
     .group = "data"},
    {.name = "synthetic-n",
     .type = GV_OPT_UINT64,
     .offset = J(synthetic_n),
     .def = "8192",
     .help = "synthetic training samples",
     .group = "data",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 1 << 24},
    {.name = "batch",
     .type = GV_OPT_INT,
     .offset = J(batch),
     .def = "64",
     .help = "samples per iteration and worker",
     .group = "training",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 65536},
    {.name = "epochs",
     .type = GV_OPT_UINT64,
     .offset = J(epochs),
     .def = "1",
     .help = "epochs over each worker's shard",
     .group = "training",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 100000},
    {.name = "steps",
     .type = GV_OPT_UINT64,
     .offset = J(steps),
     .def = "0",
     .help = "iterations to run (0: from --epochs)",
     .group = "training"},
    {.name = "seed",
     .type = GV_OPT_UINT64,
     .offset = J(seed),
     .def = "1",
     .help = "model initialisation, data order, random-k",
     .group = "training"},
    {.name = "lr",
     .type = GV_OPT_DOUBLE,
     .offset = J(lr),
     .def = "0.05",
     .help = "learning rate",
     .group = "optimizer",
     .flags = GV_OPT_RANGE,
     .min = 0,
     .max = 1e6},
    {.name = "momentum",
     .type = GV_OPT_DOUBLE,
     .offset = J(momentum),
     .def = "0.9",
     .help = "SGD momentum",
     .group = "optimizer",
     .flags = GV_OPT_RANGE,
     .min = 0,
     .max = 0.999999},
    {.name = "weight-decay",
     .type = GV_OPT_DOUBLE,
     .offset = J(weight_decay),
     .def = "0",
     .help = "L2 weight decay",
     .group = "optimizer",
     .flags = GV_OPT_RANGE,
     .min = 0,
     .max = 1e6},
    {.name = "nesterov",
     .type = GV_OPT_BOOL,
     .offset = J(nesterov),
     .def = "false",
     .help = "Nesterov momentum",
     .group = "optimizer"},
    {.name = "local-momentum",
     .type = GV_OPT_BOOL,
     .offset = J(local_momentum),
     .def = "false",
     .help = "the workers keep the momentum (and weight decay) of their own gradients and push "
             "the velocity through error feedback (DGC's momentum correction); the servers "
             "step without momentum. Dense methods: the same steps; compressed ones: the "
             "selection sees the velocity",
     .group = "optimizer"},
    {.name = "lr-schedule",
     .type = GV_OPT_STRING,
     .offset = J(lr_schedule),
     .def = "constant",
     .help = "constant | step:IT[,IT...][@GAMMA] | cosine[:TOTAL[:MIN_LR]]",
     .group = "optimizer"},
    {.name = "optimizer",
     .type = GV_OPT_ENUM,
     .offset = J(optimizer),
     .def = "job",
     .help = "job: servers and workers step SGD with the options below; caller: servers only "
             "average, the caller's optimizer (PyTorch's) steps each replica",
     .group = "optimizer",
     .choices = optim_choices,
     .values = optim_values},
    {.name = "warmup",
     .type = GV_OPT_UINT64,
     .offset = J(warmup),
     .def = "0",
     .help = "linear learning-rate warm-up iterations",
     .group = "optimizer"},
    {.name = "method",
     .type = GV_OPT_ENUM,
     .offset = J(method),
     .def = "auto",
     .help = "compression method",
     .group = "compression",
     .choices = method_choices,
     .values = method_values},
    {.name = "cf",
     .type = GV_OPT_DOUBLE,
     .offset = J(cf),
     .def = "10",
     .help = "static: compression factor",
     .group = "compression",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 1e9},
    {.name = "theta-min",
     .type = GV_OPT_DOUBLE,
     .offset = J(theta_min),
     .def = "10",
     .help = "GraVAC floor CF (accordion: the light CF)",
     .group = "compression",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 1e9},
    {.name = "theta-max",
     .type = GV_OPT_DOUBLE,
     .offset = J(theta_max),
     .def = "1000",
     .help = "GraVAC largest CF (accordion: the heavy CF)",
     .group = "compression",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 1e9},
    {.name = "epsilon",
     .type = GV_OPT_DOUBLE,
     .offset = J(epsilon),
     .def = "0.9",
     .help = "GraVAC: smallest compression gain a CF may be sent with",
     .group = "compression",
     .flags = GV_OPT_RANGE,
     .min = 1e-9,
     .max = 1},
    {.name = "omega",
     .type = GV_OPT_DOUBLE,
     .offset = J(omega),
     .def = "0.01",
     .help = "GraVAC: relative tolerance of floor raise and saturation",
     .group = "compression",
     .flags = GV_OPT_RANGE,
     .min = 0,
     .max = 0.999999},
    {.name = "window",
     .type = GV_OPT_UINT64,
     .offset = J(window),
     .def = "500",
     .help = "GraVAC: iterations per candidate evaluation",
     .group = "compression",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 1e9},
    {.name = "gravac-warmup",
     .type = GV_OPT_UINT64,
     .offset = J(gravac_warmup),
     .def = "0",
     .help = "GraVAC: first iterations sent at the floor whatever the gain",
     .group = "compression"},
    {.name = "eta",
     .type = GV_OPT_DOUBLE,
     .offset = J(eta),
     .def = "0.5",
     .help = "accordion: relative norm change that marks a layer critical",
     .group = "compression",
     .flags = GV_OPT_RANGE,
     .min = 1e-9,
     .max = 1e9},
    {.name = "switch-epochs",
     .type = GV_OPT_UINT64,
     .offset = J(switch_epochs),
     .def = "10",
     .help = "accordion: epochs between checks",
     .group = "compression",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 1e6},
    {.name = "compressor",
     .type = GV_OPT_ENUM,
     .offset = J(compressor),
     .def = "topk",
     .help = "sparsifier of the compressed levels",
     .group = "compression",
     .choices = cmp_choices,
     .values = cmp_values},
    {.name = "fp16",
     .type = GV_OPT_BOOL,
     .offset = J(fp16),
     .def = "true",
     .help = "sparse values as fp16 both ways (the residuals keep what rounding drops; dense "
             "pushes and updates stay f32: see method dense-fp16); --no-fp16 sends f32",
     .group = "compression"},
    {.name = "downlink",
     .type = GV_OPT_ENUM,
     .offset = J(downlink),
     .def = "topk",
     .help = "compressed rounds: the update cut to the k of the CF in force with the server's "
             "residual (topk), or every entry some worker pushed (union)",
     .group = "compression",
     .choices = downlink_choices,
     .values = downlink_values},
    {.name = "downlink-mult",
     .type = GV_OPT_DOUBLE,
     .offset = J(downlink_mult),
     .def = "1",
     .help = "the bounded downlink sends this many times one push's k (it cuts at the CF in "
             "force divided by it): more entries to every worker, at most that many whatever "
             "the number of workers",
     .group = "compression",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 1e6},
    {.name = "topk-scope",
     .type = GV_OPT_ENUM,
     .offset = J(topk_scope),
     .def = "auto",
     .help = "top-k per tensor, or one k over the whole model (a server: its whole shard); "
             "auto: model, but tensor for accordion (it decides per layer)",
     .group = "compression",
     .choices = scope_choices,
     .values = scope_values},
    {.name = "arms",
     .type = GV_OPT_STRING,
     .offset = J(arms),
     .def = "dense,fp16,4,10,30,100,300,1000",
     .help = "auto: the arms it chooses from, ascending: dense (f32) and fp16 (dense in "
             "halves) first if at all, then sparse CFs above 2",
     .group = "compression"},
    {.name = "quality-from",
     .type = GV_OPT_DOUBLE,
     .offset = J(quality_from),
     .def = "0.2",
     .help = "auto: from this fraction of the budget no arm above CF 10 (the quality guard, for "
             "the accuracy at the budget; 1: never, for the fastest way to a middle target at "
             "a lower final accuracy; docs/adapt.md 4.1)",
     .group = "compression",
     .flags = GV_OPT_RANGE,
     .min = 0,
     .max = 1},
    {.name = "resync-every",
     .type = GV_OPT_UINT64,
     .offset = J(resync_every),
     .def = "0",
     .help = "full model resync every N iterations (0: on join and after a checksum mismatch)",
     .group = "compression"},
    {.name = "piece-size",
     .type = GV_OPT_SIZE,
     .offset = J(piece_size),
     .def = "512K",
     .help = "dense rounds travel in pieces of about this many bytes per shard, each stepped and "
             "sent back as soon as every worker's piece is in (0: one message per shard)",
     .group = "compression",
     .flags = GV_OPT_RANGE,
     .min = 0,
     .max = 1099511627776.0},
};
const size_t gv_job_options_n = GV_ARRAY_LEN(gv_job_options);

const char *gv_job_method_str(enum gv_job_method method)
{
    for (size_t i = 0; i < GV_ARRAY_LEN(method_values); i++)
        if (method_values[i] == (int)method)
            return method_choices[i];
    return "unknown";
}

enum gv_cmp_kind gv_job_cmp_kind(const struct gv_job *job)
{
    return job->compressor;
}

bool gv_job_dense(const struct gv_job *job)
{
    return job->method == GV_JOB_DENSE || job->method == GV_JOB_DENSE_FP16;
}

enum gv_val_type gv_job_sparse_vt(const struct gv_job *job)
{
    return job->fp16 ? GV_VAL_F16 : GV_VAL_F32;
}

double gv_job_down_cf(const struct gv_job *job, double cf)
{
    return GV_MAX(1.0, cf / job->downlink_mult);
}

enum gv_val_type gv_job_dense_vt(const struct gv_job *job)
{
    return job->method == GV_JOB_DENSE_FP16 ? GV_VAL_F16 : GV_VAL_F32;
}

bool gv_job_pieced(const struct gv_job *job)
{
    return gv_job_dense_vt(job) == GV_VAL_F32 && job->optimizer != GV_JOB_OPTIM_CALLER &&
           !gv_job_external(job);
}

void gv_job_pieces(const struct gv_job *job, uint64_t n, struct gv_ps_pieces *pc)
{
    const uint64_t B = GV_PS_CKSUM_BLOCK;
    uint64_t want = job->piece_size / 4;
    pc->n = n;
    pc->np = 1;
    pc->base = n;
    if (!gv_job_pieced(job) || want == 0 || n <= B)
        return;
    uint64_t base = (want + B - 1) / B * B;
    if ((n + base - 1) / base > GV_PS_MAX_PIECES) /* at most that many: larger pieces */
        base = ((n + GV_PS_MAX_PIECES - 1) / GV_PS_MAX_PIECES + B - 1) / B * B;
    if (base >= n)
        return;
    pc->base = base;
    pc->np = (uint32_t)((n + base - 1) / base);
}

enum gv_val_type gv_ps_dense_vt(const struct gv_job *job, const struct gv_ps_decision *d)
{
    if (job->method == GV_JOB_DENSE_FP16)
        return GV_VAL_F16;
    return d->level == GV_ADAPT_LEVEL_DENSE && d->cf_send == 2.0 ? GV_VAL_F16 : GV_VAL_F32;
}

/* --arms "dense,fp16,4,10,..." into job->arm_cf (dense = CF 1, fp16 = CF 2, dense levels). */
static gv_status_t job_parse_arms(struct gv_job *job)
{
    char buf[512];
    if (snprintf(buf, sizeof(buf), "%s", job->arms) >= (int)sizeof(buf))
        goto bad;
    job->n_arms = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t != NULL;
         t = strtok_r(NULL, ",", &save)) {
        if (job->n_arms == GV_ADAPT_AUTO_MAX_ARMS)
            goto bad;
        double cf;
        if (strcmp(t, "dense") == 0 || strcmp(t, "fp16") == 0) {
            cf = t[0] == 'd' ? 1.0 : 2.0;
        } else {
            char *end;
            cf = strtod(t, &end);
            if (end == t || *end != '\0' || !(cf > 2.0 && cf <= 1e9))
                goto bad;
        }
        if (job->n_arms > 0 && !(cf > job->arm_cf[job->n_arms - 1]))
            goto bad;
        job->arm_cf[job->n_arms++] = cf;
    }
    if (job->n_arms == 0)
        goto bad;
    return GV_OK;
bad:
    gv_log(GV_LOG_ERROR,
           "--arms: '%s' is not a list of up to %d arms: dense and fp16 first if at all, then "
           "ascending sparse CFs above 2",
           job->arms, GV_ADAPT_AUTO_MAX_ARMS);
    return GV_ERR_INVAL;
}

/* "a,b,c" of ints in [1, hi] into out[max]; count or -1. */
static int job_parse_list(const char *s, int *out, int max, long hi)
{
    int n = 0;
    const char *p = s;
    while (*p != '\0') {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > hi || n == max)
            return -1;
        out[n++] = (int)v;
        p = end;
        if (*p == ',')
            p++;
        else if (*p != '\0')
            return -1;
    }
    return n;
}

static gv_status_t job_model_cfg(struct gv_job *job)
{
    struct gv_nn_model_cfg *mc = &job->model_cfg;
    int list[GV_NN_MAX_WIDTHS];
    gv_nn_model_cfg_default(job->model, mc);
    int k = job_parse_list(job->widths, list, GV_NN_MAX_WIDTHS, 65536);
    if (k < 1) {
        gv_log(GV_LOG_ERROR, "--widths: '%s' is not a list of 1 to %d widths", job->widths,
               GV_NN_MAX_WIDTHS);
        return GV_ERR_INVAL;
    }
    memcpy(mc->widths, list, sizeof(list));
    mc->n_widths = k;
    if (job_parse_list(job->cnn, list, 3, 4096) != 3) {
        gv_log(GV_LOG_ERROR, "--cnn: '%s' is not C1,C2,D", job->cnn);
        return GV_ERR_INVAL;
    }
    mc->conv1 = list[0];
    mc->conv2 = list[1];
    mc->cnn_dense = list[2];
    mc->embed = job->embed;
    mc->hidden = job->hidden;
    mc->layers = job->layers;
    mc->seq_len = job->seq_len;
    return GV_OK;
}

/* The optimizer from the options; the cosine schedule's total comes later (job_optim_total). */
static gv_status_t job_optim(struct gv_job *job)
{
    struct gv_optim_cfg *o = &job->optim;
    gv_optim_cfg_default(o);
    o->lr = (float)job->lr;
    o->momentum = (float)job->momentum;
    o->weight_decay = (float)job->weight_decay;
    o->nesterov = job->nesterov;
    o->warmup = (int64_t)job->warmup;
    if (gv_optim_schedule_parse(job->lr_schedule, o) != GV_OK)
        return GV_ERR_INVAL;
    return GV_OK;
}

static gv_status_t job_optim_total(struct gv_job *job)
{
    struct gv_optim_cfg *o = &job->optim;
    if (o->sched == GV_LR_COSINE && o->total == 0)
        o->total = job->total_steps;
    job->step_optim = *o;
    if (job->local_momentum) { /* the velocity the workers push already holds both */
        job->step_optim.momentum = 0.0f;
        job->step_optim.weight_decay = 0.0f;
    }
    return gv_optim_cfg_check(o);
}

/* --model external: no data and no nn/ model here; the caller's loop decides the steps (the
 * optimizer's schedule, when the servers step, runs over --steps). */
static gv_status_t job_resolve_external(struct gv_job *job, uint32_t num_workers)
{
    gv_status_t status = job_optim(job);
    if (status != GV_OK)
        return status;
    memset(&job->model_cfg, 0, sizeof(job->model_cfg));
    job->model_cfg.kind = GV_JOB_MODEL_EXTERNAL;
    job->num_workers = num_workers;
    job->n_train = 0;
    job->steps_per_epoch = 0;
    /* without --steps the training script sets the length: no bound here (its first BYE at
     * a round's boundary ends the job) */
    job->total_steps = job->steps > 0 ? (int64_t)job->steps : INT64_MAX;
    return job_optim_total(job);
}

gv_status_t gv_job_resolve(struct gv_job *job, uint32_t num_workers)
{
    gv_status_t status;
    if (num_workers == 0) {
        gv_log(GV_LOG_ERROR, "the job needs at least one worker");
        return GV_ERR_INVAL;
    }
    if (job->optimizer == GV_JOB_OPTIM_CALLER && job->resync_every > 0) {
        gv_log(GV_LOG_ERROR,
               "--resync-every needs the servers to step the model (--optimizer job)");
        return GV_ERR_INVAL;
    }
    if (job->local_momentum && job->optimizer == GV_JOB_OPTIM_CALLER) {
        gv_log(GV_LOG_ERROR, "--local-momentum is the job's SGD (--optimizer job): with "
                             "--optimizer caller the caller's optimizer keeps the momentum");
        return GV_ERR_INVAL;
    }
    if (job->downlink_mult != 1.0 && job->downlink != GV_DOWNLINK_TOPK) {
        gv_log(GV_LOG_ERROR, "--downlink-mult sizes the bounded downlink (--downlink topk); "
                             "--downlink union sends every entry pushed");
        return GV_ERR_INVAL;
    }
    if (job->local_momentum && job->nesterov) {
        gv_log(GV_LOG_ERROR, "--local-momentum keeps plain momentum on the workers: it does "
                             "not do --nesterov");
        return GV_ERR_INVAL;
    }
    if (job->method == GV_JOB_GRAVAC_EXP || job->method == GV_JOB_GRAVAC_GEO ||
        job->method == GV_JOB_ACCORDION) {
        if (job->theta_max < job->theta_min) {
            gv_log(GV_LOG_ERROR, "--theta-max %g is below --theta-min %g", job->theta_max,
                   job->theta_min);
            return GV_ERR_INVAL;
        }
    }
    /* auto (for nn/'s models and --model external alike): one k over the model (per tensor, small
     * tensors get k = 1 at high CFs and, with the bounded downlink, lose most of their gradient:
     * docs/results.md section 10) */
    if (job->topk_scope == GV_SCOPE_AUTO)
        job->topk_scope = job->method == GV_JOB_ACCORDION ? GV_SCOPE_TENSOR : GV_SCOPE_MODEL;
    if (job->method == GV_JOB_ACCORDION && job->topk_scope == GV_SCOPE_MODEL) {
        gv_log(GV_LOG_ERROR, "--method accordion decides per layer: it needs --topk-scope tensor");
        return GV_ERR_INVAL;
    }
    if (job->method == GV_JOB_AUTO && (status = job_parse_arms(job)) != GV_OK)
        return status;
    if (gv_job_external(job))
        return job_resolve_external(job, num_workers);
    if (job->data == GV_JOB_DATA_AUTO)
        job->data = job->model == GV_NN_LSTM ? GV_JOB_DATA_TEXT : GV_JOB_DATA_FASHION;
    if ((job->model == GV_NN_LSTM) != (job->data == GV_JOB_DATA_TEXT)) {
        gv_log(GV_LOG_ERROR, "--model lstm trains on --dataset text, and only it");
        return GV_ERR_INVAL;
    }
    if ((status = job_model_cfg(job)) != GV_OK || (status = job_optim(job)) != GV_OK)
        return status;
    if ((status = job_data_shape(job)) != GV_OK)
        return status;
    job->num_workers = num_workers;
    size_t shard = job->n_train / num_workers;
    if (shard < (size_t)job->batch) {
        gv_log(GV_LOG_ERROR,
               "the shard of %zu samples (%zu over %u workers) is smaller than one "
               "batch of %d",
               shard, job->n_train, num_workers, job->batch);
        return GV_ERR_INVAL;
    }
    job->steps_per_epoch = (int64_t)(shard / (size_t)job->batch);
    job->total_steps =
        job->steps > 0 ? (int64_t)job->steps : (int64_t)job->epochs * job->steps_per_epoch;
    if (job->data_kind == GV_NN_DATA_IMAGES)
        job->model_cfg.max_batch = GV_MAX(job->batch, 256);
    else
        job->model_cfg.max_batch = job->batch;
    return job_optim_total(job);
}

void gv_job_adapt_config(const struct gv_job *job, uint32_t num_layers, struct gv_adapt_config *cfg)
{
    switch (job->method) {
    case GV_JOB_DENSE:
    case GV_JOB_DENSE_FP16: gv_adapt_config_default(cfg, GV_ADAPT_DENSE); break;
    case GV_JOB_STATIC:
        gv_adapt_config_default(cfg, GV_ADAPT_STATIC);
        cfg->static_cf = job->cf;
        break;
    case GV_JOB_AUTO:
        gv_adapt_config_default(cfg, GV_ADAPT_AUTO);
        cfg->autoc.n_arms = job->n_arms;
        memcpy(cfg->autoc.cf, job->arm_cf, sizeof(cfg->autoc.cf));
        /* the budget; 0 (unknown) for --model external without --steps, whose scripts set the
         * length (total_steps is then unbounded): the quality guard waits for the first lr drop */
        cfg->autoc.total_iters =
            job->total_steps > 0 && job->total_steps != INT64_MAX ? (uint64_t)job->total_steps : 0;
        cfg->autoc.quality_from = job->quality_from;
        break;
    case GV_JOB_ACCORDION:
        gv_adapt_config_default(cfg, GV_ADAPT_ACCORDION);
        cfg->accordion.cf_light = job->theta_min;
        cfg->accordion.cf_heavy = job->theta_max;
        cfg->accordion.eta = job->eta;
        cfg->accordion.switch_epochs = (uint32_t)job->switch_epochs;
        cfg->accordion.num_layers = num_layers;
        break;
    default:
        gv_adapt_config_default(cfg, GV_ADAPT_GRAVAC);
        cfg->gravac.theta_min = job->theta_min;
        cfg->gravac.theta_max = job->theta_max;
        cfg->gravac.epsilon = job->epsilon;
        cfg->gravac.omega = job->omega;
        cfg->gravac.window = (uint32_t)job->window;
        cfg->gravac.warmup_iters = (uint32_t)job->gravac_warmup;
        cfg->gravac.policy = job->method == GV_JOB_GRAVAC_GEO ? GV_ADAPT_POLICY_GEOMETRIC
                                                              : GV_ADAPT_POLICY_EXPONENTIAL;
        break;
    }
}

double gv_job_min_cf(const struct gv_job *job)
{
    switch (job->method) {
    case GV_JOB_DENSE:
    case GV_JOB_DENSE_FP16: return 0;
    case GV_JOB_STATIC: return job->cf;
    case GV_JOB_AUTO: /* its lowest sparse CF (a dense arm after a sparse one compresses there) */
        for (uint32_t i = 0; i < job->n_arms; i++)
            if (job->arm_cf[i] > 2.0)
                return job->arm_cf[i];
        return 1.0;
    default: return job->theta_min;
    }
}

double gv_job_min_cand_cf(const struct gv_job *job)
{
    if (job->method != GV_JOB_GRAVAC_EXP && job->method != GV_JOB_GRAVAC_GEO)
        return 0;
    if (job->theta_max <= job->theta_min)
        return 0;
    struct gv_adapt_config cfg;
    gv_adapt_config_default(&cfg, GV_ADAPT_GRAVAC);
    return GV_MIN(job->theta_min * cfg.gravac.theta_s0, job->theta_max);
}

/* One tensor of the layout: a [d0][d1] weight (d1 0: a [d0] vector). */
static gv_status_t job_tensor(char (*names)[24], size_t *numel, uint32_t cap, uint32_t *n,
                              const char *name, int d0, int d1)
{
    if (*n >= cap || d0 <= 0 || d1 < 0) {
        gv_log(GV_LOG_ERROR, "model layout: %s: more than %u tensors or a bad shape", name, cap);
        return GV_ERR_INVAL;
    }
    snprintf(names[*n], sizeof(names[*n]), "%s", name);
    numel[*n] = (size_t)d0 * (size_t)(d1 > 0 ? d1 : 1);
    (*n)++;
    return GV_OK;
}

/* The tensors nn/ defines for a model configuration, in its order and with its names
 * (nn/model.c, nn/model_lstm.c): computed here rather than by building the model, whose
 * creation zero-fills the 3 x P-float arena, which a server must not hold even briefly.
 * test_shard checks it against gv_nn_model_create for every model kind. */
gv_status_t gv_job_layout(const struct gv_job *job, char (*names)[24], size_t *numel, uint32_t cap,
                          uint32_t *n_p)
{
    const struct gv_nn_model_cfg *c = &job->model_cfg;
    uint32_t n = 0;
    gv_status_t st = GV_OK;
    if (gv_job_external(job)) {
        gv_log(GV_LOG_ERROR, "model layout: --model external: the layout comes from the workers");
        return GV_ERR_INVAL;
    }
    char a[24], b[24];
#define JT(name, d0, d1)                                                                           \
    do {                                                                                           \
        if (st == GV_OK)                                                                           \
            st = job_tensor(names, numel, cap, &n, name, d0, d1);                                  \
    } while (0)
    if (c->kind == GV_NN_LSTM) {
        JT("embed.w", c->n_classes, c->embed);
        for (int l = 0; l < c->layers; l++) {
            snprintf(a, sizeof(a), "lstm%d.wx", l);
            JT(a, 4 * c->hidden, l == 0 ? c->embed : c->hidden);
            snprintf(a, sizeof(a), "lstm%d.wh", l);
            JT(a, 4 * c->hidden, c->hidden);
            snprintf(a, sizeof(a), "lstm%d.b", l);
            JT(a, 4 * c->hidden, 0);
        }
        JT("out.w", c->n_classes, c->hidden);
        JT("out.b", c->n_classes, 0);
    } else if (c->kind == GV_NN_CNN) {
        if (c->in_h % 4 != 0 || c->in_w % 4 != 0) {
            gv_log(GV_LOG_ERROR,
                   "model layout: the cnn needs an input whose height and width "
                   "are multiples of 4 (%dx%d)",
                   c->in_h, c->in_w);
            return GV_ERR_INVAL;
        }
        JT("conv1.w", c->conv1, 9 * c->in_c);
        JT("conv1.b", c->conv1, 0);
        JT("conv2.w", c->conv2, 9 * c->conv1);
        JT("conv2.b", c->conv2, 0);
        JT("fc1.w", c->cnn_dense, (c->in_h / 4) * (c->in_w / 4) * c->conv2);
        JT("fc1.b", c->cnn_dense, 0);
        JT("fc2.w", c->n_classes, c->cnn_dense);
        JT("fc2.b", c->n_classes, 0);
    } else {
        int d = c->in_h * c->in_w * c->in_c;
        int nh = c->kind == GV_NN_MLP ? c->n_widths : 0;
        for (int i = 0; i <= nh; i++) {
            int out = i < nh ? c->widths[i] : c->n_classes;
            snprintf(a, sizeof(a), "fc%d.w", i + 1);
            snprintf(b, sizeof(b), "fc%d.b", i + 1);
            JT(a, out, d);
            JT(b, out, 0);
            d = out;
        }
    }
#undef JT
    if (st != GV_OK)
        return st;
    *n_p = n;
    return GV_OK;
}

/* FNV-1a, 64 bit. */
static uint64_t job_fnv(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t job_fingerprint(const struct gv_job *job, const char (*names)[24],
                                const size_t *numel, uint32_t n_tensors, bool steps, char *desc,
                                size_t desc_len)
{
    char buf[4096];
    size_t off = 0;
#define FP_ADD(...)                                                                                \
    do {                                                                                           \
        int n_ = snprintf(buf + off, sizeof(buf) - off, __VA_ARGS__);                              \
        if (n_ > 0)                                                                                \
            off = GV_MIN(off + (size_t)n_, sizeof(buf) - 1);                                       \
    } while (0)
    const struct gv_nn_model_cfg *mc = &job->model_cfg;
    const struct gv_optim_cfg *o = &job->optim;
    if (gv_job_external(job))
        FP_ADD("model external;");
    else
        FP_ADD("model %s in %dx%dx%d classes %d;", gv_nn_model_kind_str(mc->kind), mc->in_h,
               mc->in_w, mc->in_c, mc->n_classes);
    for (uint32_t t = 0; t < n_tensors; t++)
        FP_ADD("%s:%zu,", names[t], numel[t]);
    /* the length of the job: every worker must run the same iterations (a worker with fewer
     * would leave the others at its last one) */
    if (steps)
        FP_ADD(";steps %lld", (long long)job->total_steps);
    FP_ADD(";seed %" PRIu64 ";optim lr %.9g mom %.9g wd %.9g nest %d sched %d warm %lld", job->seed,
           (double)o->lr, (double)o->momentum, (double)o->weight_decay, o->nesterov, (int)o->sched,
           (long long)o->warmup);
    for (int i = 0; i < o->n_milestones; i++)
        FP_ADD(" ms %lld", (long long)o->milestones[i]);
    FP_ADD(" gamma %.9g total %lld min %.9g;", (double)o->gamma, (long long)o->total,
           (double)o->min_lr);
    FP_ADD("method %s cf %.17g theta %.17g-%.17g eps %.17g omega %.17g window %" PRIu64
           " warm %" PRIu64 " eta %.17g switch %" PRIu64 ";cmp %s fp16 %d down %d scope %d arms %s"
           " piece %" PRIu64,
           gv_job_method_str(job->method), job->cf, job->theta_min, job->theta_max, job->epsilon,
           job->omega, job->window, job->gravac_warmup, job->eta, job->switch_epochs,
           gv_cmp_kind_str(gv_job_cmp_kind(job)), (int)job->fp16, (int)job->downlink,
           (int)job->topk_scope, job->method == GV_JOB_AUTO ? job->arms : "-", job->piece_size);
    if (job->method == GV_JOB_AUTO) { /* the guard's default adds nothing: fingerprints as before */
        struct gv_adapt_config dflt;
        gv_adapt_config_default(&dflt, GV_ADAPT_AUTO);
        if (job->quality_from != dflt.autoc.quality_from)
            FP_ADD(";quality from %.17g", job->quality_from);
    }
    if (job->downlink_mult != 1.0) /* the default adds nothing: fingerprints as before */
        FP_ADD(";downlink mult %.17g", job->downlink_mult);
    if (job->optimizer == GV_JOB_OPTIM_CALLER)
        FP_ADD(";optimizer caller");
    if (job->local_momentum) /* the replicas step differently: a worker must agree */
        FP_ADD(";local momentum");
#undef FP_ADD
    if (desc != NULL && desc_len > 0)
        snprintf(desc, desc_len, "%s", buf);
    return job_fnv(buf, off);
}

uint64_t gv_job_fingerprint(const struct gv_job *job, const char (*names)[24], const size_t *numel,
                            uint32_t n_tensors, char *desc, size_t desc_len)
{
    return job_fingerprint(job, names, numel, n_tensors, true, desc, desc_len);
}

uint64_t gv_job_state_fingerprint(const struct gv_job *job, const char (*names)[24],
                                  const size_t *numel, uint32_t n_tensors)
{
    return job_fingerprint(job, names, numel, n_tensors, false, NULL, 0);
}
