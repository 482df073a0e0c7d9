/* gravac_worker_main.c: the gravac-worker program. For now it offers the standalone mode: one
 * process trains a model locally with the nn/ optimizer (no servers), printing progress and
 * writing a JSON-lines metrics file. Option parsing, data loading and the training loop are
 * separate functions so the distributed mode can reuse them. */
#include "gv_nn.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORKER_TRY(expr)                                                                           \
    do {                                                                                           \
        gv_status_t try_status_ = (expr);                                                          \
        if (try_status_ != GV_OK)                                                                  \
            return try_status_;                                                                    \
    } while (0)

enum data_src { DS_FASHION, DS_MNIST, DS_IDX, DS_CIFAR, DS_TEXT, DS_SYNTH };

struct worker_opts {
    int standalone;
    struct gv_nn_model_cfg model;
    int model_set_widths;
    enum data_src data;
    const char *data_dir;
    const char *train_images, *train_labels, *test_images, *test_labels;
    const char *text;
    long synth_n;
    int classes; /* idx: number of classes (labels must be below) */
    int batch;
    struct gv_optim_cfg optim;
    const char *schedule;
    long epochs, steps;
    long eval_every, eval_limit;
    double target;
    uint64_t seed;
    enum gv_nn_device device;
    int threads;
    int quiet;
    const char *metrics;
    long progress_every;
    int rank, world;
};

static void usage(FILE *f)
{
    fprintf(f,
        "usage: gravac-worker --standalone [options]\n"
        "model:\n"
        "  --model softmax|mlp|cnn|lstm   (default mlp)\n"
        "  --widths W1,W2,...             MLP hidden widths (default 256,128)\n"
        "  --cnn C1,C2,D                  CNN channels and dense width (default 16,32,128)\n"
        "  --embed E --hidden H --layers L --seq-len T   LSTM (default 32, 128, 1, 64)\n"
        "data:\n"
        "  --dataset fashion-mnist|mnist|idx|cifar10|text|synthetic (default fashion-mnist;\n"
        "                                 lstm defaults to text)\n"
        "  --data-dir DIR                 fashion-mnist (default %s), mnist, cifar10\n"
        "  --train-images F --train-labels F --test-images F --test-labels F   (idx)\n"
        "  --classes N                    idx: number of classes (default 10)\n"
        "  --text F1[,F2...]              text corpus (default: the fortunes package's files)\n"
        "  --synthetic-n N                synthetic training samples (default 8192)\n"
        "  --rank R --world W             train on shard R of W (default 0 of 1)\n"
        "training:\n"
        "  --batch N (64)  --lr X (0.05)  --momentum X (0.9)  --nesterov  --weight-decay X (0)\n"
        "  --lr-schedule constant|step:IT[,IT..][@GAMMA]|cosine[:TOTAL[:MIN]]  --warmup N\n"
        "  --epochs N (1) | --steps N     --eval-every N steps (0: each epoch)\n"
        "  --eval-limit N (test samples per evaluation, 0: all)\n"
        "  --target-accuracy A            stop once test accuracy >= A (0..1, or a percentage)\n"
        "  --seed N (1)  --device cpu|cuda (cpu)  --threads N (OpenBLAS threads, 1)\n"
        "output:\n"
        "  --progress-every N (100)  --quiet  --metrics-file FILE (JSON lines)\n",
        GV_NN_FASHION_MNIST_DIR);
}

static int parse_long(const char *s, long lo, long hi, long *v)
{
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || x < lo || x > hi)
        return -1;
    *v = x;
    return 0;
}

static int parse_double(const char *s, double *v)
{
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(x))
        return -1;
    *v = x;
    return 0;
}

/* "a,b,c" of ints in [1, hi] into out[max]; returns the count or -1. */
static int parse_list(const char *s, int *out, int max, long hi)
{
    char buf[256];
    int n = 0;
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        long v;
        if (n == max || parse_long(tok, 1, hi, &v) != 0)
            return -1;
        out[n++] = (int)v;
    }
    return n;
}

static const struct {
    const char *name;
    enum data_src src;
} data_names[] = {{"fashion-mnist", DS_FASHION}, {"mnist", DS_MNIST}, {"idx", DS_IDX},
                  {"cifar10", DS_CIFAR},         {"text", DS_TEXT},   {"synthetic", DS_SYNTH}};

enum {
    OPT_WIDTHS = 256, OPT_CNN, OPT_EMBED, OPT_HIDDEN, OPT_LAYERS, OPT_SEQ, OPT_DATASET,
    OPT_DATADIR, OPT_TRI, OPT_TRL, OPT_TEI, OPT_TEL, OPT_TEXT, OPT_SYNTH, OPT_RANK, OPT_WORLD,
    OPT_BATCH, OPT_LR, OPT_MOM, OPT_NEST, OPT_WD, OPT_SCHED, OPT_WARM, OPT_EPOCHS, OPT_STEPS,
    OPT_EVAL, OPT_EVLIM, OPT_TARGET, OPT_SEED, OPT_DEVICE, OPT_THREADS, OPT_QUIET, OPT_METRICS,
    OPT_PROGRESS, OPT_STANDALONE, OPT_MODEL, OPT_HELP, OPT_CLASSES,
};

static const struct option long_opts[] = {
    {"standalone", no_argument, NULL, OPT_STANDALONE}, {"model", required_argument, NULL, OPT_MODEL},
    {"widths", required_argument, NULL, OPT_WIDTHS},   {"cnn", required_argument, NULL, OPT_CNN},
    {"embed", required_argument, NULL, OPT_EMBED},     {"hidden", required_argument, NULL, OPT_HIDDEN},
    {"layers", required_argument, NULL, OPT_LAYERS},   {"seq-len", required_argument, NULL, OPT_SEQ},
    {"dataset", required_argument, NULL, OPT_DATASET}, {"data-dir", required_argument, NULL, OPT_DATADIR},
    {"train-images", required_argument, NULL, OPT_TRI}, {"train-labels", required_argument, NULL, OPT_TRL},
    {"test-images", required_argument, NULL, OPT_TEI}, {"test-labels", required_argument, NULL, OPT_TEL},
    {"text", required_argument, NULL, OPT_TEXT},       {"synthetic-n", required_argument, NULL, OPT_SYNTH},
    {"rank", required_argument, NULL, OPT_RANK},       {"world", required_argument, NULL, OPT_WORLD},
    {"batch", required_argument, NULL, OPT_BATCH},     {"lr", required_argument, NULL, OPT_LR},
    {"momentum", required_argument, NULL, OPT_MOM},    {"nesterov", no_argument, NULL, OPT_NEST},
    {"weight-decay", required_argument, NULL, OPT_WD}, {"lr-schedule", required_argument, NULL, OPT_SCHED},
    {"warmup", required_argument, NULL, OPT_WARM},     {"epochs", required_argument, NULL, OPT_EPOCHS},
    {"steps", required_argument, NULL, OPT_STEPS},     {"eval-every", required_argument, NULL, OPT_EVAL},
    {"eval-limit", required_argument, NULL, OPT_EVLIM}, {"target-accuracy", required_argument, NULL, OPT_TARGET},
    {"seed", required_argument, NULL, OPT_SEED},       {"device", required_argument, NULL, OPT_DEVICE},
    {"threads", required_argument, NULL, OPT_THREADS}, {"quiet", no_argument, NULL, OPT_QUIET},
    {"metrics-file", required_argument, NULL, OPT_METRICS},
    {"progress-every", required_argument, NULL, OPT_PROGRESS},
    {"classes", required_argument, NULL, OPT_CLASSES},
    {"help", no_argument, NULL, OPT_HELP},             {NULL, 0, NULL, 0},
};

static void opts_default(struct worker_opts *o)
{
    memset(o, 0, sizeof(*o));
    gv_nn_model_cfg_default(GV_NN_MLP, &o->model);
    gv_optim_cfg_default(&o->optim);
    o->synth_n = 8192;
    o->classes = 10;
    o->batch = 64;
    o->epochs = 1;
    o->seed = 1;
    o->threads = 1;
    o->progress_every = 100;
    o->world = 1;
    o->data = (enum data_src)-1; /* chosen from the model unless given */
}

/* One option; returns 0, or -1 after printing what is wrong. Argument parsing is long by
 * nature: one case per option. */
static int parse_one(struct worker_opts *o, int c, const char *a)
{
    long v;
    double d;
    int list[GV_NN_MAX_WIDTHS], k;
    switch (c) {
    case OPT_STANDALONE: o->standalone = 1; return 0;
    case OPT_MODEL: {
        enum gv_nn_model_kind kind;
        if (gv_nn_model_kind_parse(a, &kind) != GV_OK)
            break;
        o->model.kind = kind;
        return 0;
    }
    case OPT_WIDTHS:
        if ((k = parse_list(a, list, GV_NN_MAX_WIDTHS, 65536)) < 1)
            break;
        memcpy(o->model.widths, list, sizeof(list));
        o->model.n_widths = k;
        return 0;
    case OPT_CNN:
        if (parse_list(a, list, 3, 4096) != 3)
            break;
        o->model.conv1 = list[0];
        o->model.conv2 = list[1];
        o->model.cnn_dense = list[2];
        return 0;
    case OPT_EMBED: if (parse_long(a, 1, 4096, &v)) break; o->model.embed = (int)v; return 0;
    case OPT_HIDDEN: if (parse_long(a, 1, 4096, &v)) break; o->model.hidden = (int)v; return 0;
    case OPT_LAYERS: if (parse_long(a, 1, GV_NN_MAX_LSTM_LAYERS, &v)) break; o->model.layers = (int)v; return 0;
    case OPT_SEQ: if (parse_long(a, 1, 4096, &v)) break; o->model.seq_len = (int)v; return 0;
    case OPT_DATASET:
        for (size_t i = 0; i < GV_ARRAY_LEN(data_names); i++)
            if (strcmp(a, data_names[i].name) == 0) {
                o->data = data_names[i].src;
                return 0;
            }
        break;
    case OPT_DATADIR: o->data_dir = a; return 0;
    case OPT_TRI: o->train_images = a; return 0;
    case OPT_TRL: o->train_labels = a; return 0;
    case OPT_TEI: o->test_images = a; return 0;
    case OPT_TEL: o->test_labels = a; return 0;
    case OPT_TEXT: o->text = a; return 0;
    case OPT_CLASSES: if (parse_long(a, 2, 256, &v)) break; o->classes = (int)v; return 0;
    case OPT_SYNTH: if (parse_long(a, 1, 1 << 24, &o->synth_n)) break; return 0;
    case OPT_RANK: if (parse_long(a, 0, 65535, &v)) break; o->rank = (int)v; return 0;
    case OPT_WORLD: if (parse_long(a, 1, 65536, &v)) break; o->world = (int)v; return 0;
    case OPT_BATCH: if (parse_long(a, 1, 65536, &v)) break; o->batch = (int)v; return 0;
    case OPT_LR: if (parse_double(a, &d) || d < 0) break; o->optim.lr = (float)d; return 0;
    case OPT_MOM: if (parse_double(a, &d) || d < 0 || d >= 1) break; o->optim.momentum = (float)d; return 0;
    case OPT_NEST: o->optim.nesterov = 1; return 0;
    case OPT_WD: if (parse_double(a, &d) || d < 0) break; o->optim.weight_decay = (float)d; return 0;
    case OPT_SCHED:
        if (gv_optim_schedule_parse(a, &o->optim) != GV_OK)
            return -1;
        return 0;
    case OPT_WARM: if (parse_long(a, 0, 1L << 40, &v)) break; o->optim.warmup = v; return 0;
    case OPT_EPOCHS: if (parse_long(a, 1, 100000, &o->epochs)) break; o->steps = 0; return 0;
    case OPT_STEPS: if (parse_long(a, 1, 1L << 40, &o->steps)) break; return 0;
    case OPT_EVAL: if (parse_long(a, 0, 1L << 40, &o->eval_every)) break; return 0;
    case OPT_EVLIM: if (parse_long(a, 0, 1L << 30, &o->eval_limit)) break; return 0;
    case OPT_TARGET:
        if (parse_double(a, &d) || d <= 0 || d > 100)
            break;
        o->target = d > 1.0 ? d / 100.0 : d;
        return 0;
    case OPT_SEED: if (parse_long(a, 0, 0x7fffffffffffffffL, &v)) break; o->seed = (uint64_t)v; return 0;
    case OPT_DEVICE: if (gv_nn_device_parse(a, &o->device) != GV_OK) break; return 0;
    case OPT_THREADS: if (parse_long(a, 1, 256, &v)) break; o->threads = (int)v; return 0;
    case OPT_QUIET: o->quiet = 1; return 0;
    case OPT_METRICS: o->metrics = a; return 0;
    case OPT_PROGRESS: if (parse_long(a, 1, 1L << 40, &o->progress_every)) break; return 0;
    default: return -1;
    }
    for (const struct option *lo = long_opts; lo->name != NULL; lo++)
        if (lo->val == c)
            fprintf(stderr, "gravac-worker: bad value '%s' for --%s\n", a ? a : "", lo->name);
    return -1;
}

static int parse_args(int argc, char **argv, struct worker_opts *o)
{
    opts_default(o);
    int c;
    while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
        if (c == 'h' || c == OPT_HELP) {
            usage(stdout);
            exit(0);
        }
        if (c == '?' || parse_one(o, c, optarg) != 0) {
            fprintf(stderr, "gravac-worker: see --help\n");
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gravac-worker: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (!o->standalone) {
        fprintf(stderr, "gravac-worker: only --standalone is available in this build (the "
                        "distributed runtime is not yet part of it)\n");
        return -1;
    }
    if (o->rank >= o->world) {
        fprintf(stderr, "gravac-worker: --rank %d must be < --world %d\n", o->rank, o->world);
        return -1;
    }
    if ((int)o->data == -1)
        o->data = o->model.kind == GV_NN_LSTM ? DS_TEXT : DS_FASHION;
    if ((o->model.kind == GV_NN_LSTM) != (o->data == DS_TEXT)) {
        fprintf(stderr, "gravac-worker: the lstm model trains on --dataset text, and only it\n");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- data */

static void join_path(char *out, size_t len, const char *dir, const char *file)
{
    snprintf(out, len, "%s/%s", dir, file);
}

/* dir/base.gz if it exists, else dir/base (MNIST is shipped both ways). */
static void idx_path(char *out, size_t len, const char *dir, const char *base)
{
    char gz[1024];
    snprintf(gz, sizeof(gz), "%s/%s.gz", dir, base);
    FILE *f = fopen(gz, "rb");
    if (f != NULL) {
        fclose(f);
        snprintf(out, len, "%s", gz);
    } else {
        join_path(out, len, dir, base);
    }
}

static gv_status_t load_idx_dir(const char *dir, struct gv_nn_dataset **tr,
                                struct gv_nn_dataset **te)
{
    char a[1024], b[1024];
    idx_path(a, sizeof(a), dir, "train-images-idx3-ubyte");
    idx_path(b, sizeof(b), dir, "train-labels-idx1-ubyte");
    WORKER_TRY(gv_nn_dataset_load_idx(a, b, 10, tr));
    idx_path(a, sizeof(a), dir, "t10k-images-idx3-ubyte");
    idx_path(b, sizeof(b), dir, "t10k-labels-idx1-ubyte");
    return gv_nn_dataset_load_idx(a, b, 10, te);
}

static gv_status_t load_cifar(const char *dir, struct gv_nn_dataset **tr,
                              struct gv_nn_dataset **te)
{
    char paths[5][1024], test[1024];
    const char *p[5];
    for (int i = 0; i < 5; i++) {
        snprintf(paths[i], sizeof(paths[i]), "%s/data_batch_%d.bin", dir, i + 1);
        p[i] = paths[i];
    }
    join_path(test, sizeof(test), dir, "test_batch.bin");
    const char *tp = test;
    WORKER_TRY(gv_nn_dataset_load_cifar10(p, 5, tr));
    return gv_nn_dataset_load_cifar10(&tp, 1, te);
}

static gv_status_t load_text(const struct worker_opts *o, struct gv_nn_dataset **tr,
                             struct gv_nn_dataset **te)
{
    char buf[4096];
    const char *paths[32];
    int n = 0;
    snprintf(buf, sizeof(buf), "%s", o->text ? o->text : GV_NN_TEXT_DEFAULT);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL && n < 32;
         tok = strtok_r(NULL, ",", &save))
        paths[n++] = tok;
    return gv_nn_dataset_load_text(paths, n, o->model.seq_len, 0.1, tr, te);
}

static gv_status_t load_data(const struct worker_opts *o, struct gv_nn_dataset **tr,
                             struct gv_nn_dataset **te)
{
    *tr = *te = NULL;
    switch (o->data) {
    case DS_FASHION: return load_idx_dir(o->data_dir ? o->data_dir : GV_NN_FASHION_MNIST_DIR, tr, te);
    case DS_MNIST:
    case DS_CIFAR:
        if (o->data_dir == NULL) {
            gv_log(GV_LOG_ERROR, "--dataset %s needs --data-dir", o->data == DS_MNIST ? "mnist" : "cifar10");
            return GV_ERR_INVAL;
        }
        return o->data == DS_MNIST ? load_idx_dir(o->data_dir, tr, te) : load_cifar(o->data_dir, tr, te);
    case DS_IDX:
        if (!o->train_images || !o->train_labels || !o->test_images || !o->test_labels) {
            gv_log(GV_LOG_ERROR, "--dataset idx needs --train-images, --train-labels, "
                                 "--test-images and --test-labels");
            return GV_ERR_INVAL;
        }
        WORKER_TRY(gv_nn_dataset_load_idx(o->train_images, o->train_labels, o->classes, tr));
        return gv_nn_dataset_load_idx(o->test_images, o->test_labels, o->classes, te);
    case DS_TEXT: return load_text(o, tr, te);
    case DS_SYNTH:
        return gv_nn_dataset_synthetic(o->model.kind == GV_NN_CNN ? 8 : 1,
                                       o->model.kind == GV_NN_CNN ? 8 : 64, 1, 10,
                                       (size_t)o->synth_n, 2048, 1.5f, o->seed, tr, te);
    }
    return GV_ERR_INVAL;
}

/* ---------------------------------------------------------------- training */

struct run {
    const struct worker_opts *o;
    struct gv_nn_model *model;
    struct gv_nn_dataset *train, *test;
    struct gv_nn_metrics *mf;
    struct gv_nn_batch_buf eval_buf;
    double t0;
    double eval_s; /* time spent evaluating, left out of samples/s */
    double best_acc, best_ppl;
    int64_t steps_to_target;
    double time_to_target;
    struct gv_nn_eval last;
};

static void emit(struct run *r, const struct gv_nn_record *rec)
{
    if (!r->o->quiet) {
        char line[256];
        gv_nn_progress_format(rec, line, sizeof(line));
        printf("%s\n", line);
        fflush(stdout);
    }
    if (r->mf != NULL && gv_nn_metrics_write(r->mf, rec) != GV_OK)
        r->mf = NULL; /* logged once; keep training */
}

static gv_status_t run_eval(struct run *r, int64_t step, int64_t epoch, int *stop)
{
    struct gv_nn_eval ev;
    int bs = r->model == NULL ? 0 : gv_nn_model_cfg(r->model)->max_batch;
    WORKER_TRY(gv_nn_evaluate(r->model, r->test, bs, (size_t)r->o->eval_limit, &r->eval_buf, &ev));
    int lstm = r->o->model.kind == GV_NN_LSTM;
    struct gv_nn_record rec = {
        .type = "eval", .step = step, .epoch = epoch, .time_s = gv_now_s() - r->t0,
        .loss = ev.loss, .accuracy = ev.accuracy, .perplexity = lstm ? ev.perplexity : -1.0,
        .cf = 1.0, .standalone = 1,
    };
    emit(r, &rec);
    r->last = ev;
    if (ev.accuracy > r->best_acc)
        r->best_acc = ev.accuracy;
    if (r->best_ppl <= 0 || ev.perplexity < r->best_ppl)
        r->best_ppl = ev.perplexity;
    if (r->o->target > 0 && ev.accuracy >= r->o->target && r->steps_to_target < 0) {
        r->steps_to_target = step;
        r->time_to_target = rec.time_s;
        *stop = 1;
    }
    return GV_OK;
}

struct window {
    struct gv_nn_stats st;
    int64_t samples;
    double t;
};

static gv_status_t train_loop(struct run *r, int64_t total, int64_t *done_p)
{
    const struct worker_opts *o = r->o;
    struct gv_nn_sampler smp;
    struct gv_nn_batch_buf buf;
    WORKER_TRY(gv_nn_sampler_init(&smp, r->train->n, o->rank, o->world, o->seed));
    size_t *idx = gv_malloc((size_t)o->batch * sizeof(size_t));
    gv_status_t status = gv_nn_batch_buf_init(&buf, r->train, o->batch);
    if (idx == NULL && status == GV_OK)
        status = GV_ERR_NOMEM;
    struct window w = {.t = gv_now_s()};
    int64_t epoch = 0, step = 0, per_epoch = (int64_t)(gv_nn_sampler_shard_size(&smp) / (size_t)o->batch);
    int stop = 0;
    for (; status == GV_OK && step < total && !stop; step++) {
        struct gv_nn_batch b;
        struct gv_nn_stats st;
        if ((status = gv_nn_sampler_next(&smp, o->batch, idx, &epoch)) != GV_OK ||
            (status = gv_nn_batch_gather(r->train, idx, o->batch, &buf, &b)) != GV_OK ||
            (status = gv_nn_model_train_step(r->model, &b, &st)) != GV_OK ||
            (status = gv_nn_model_optim_step(r->model, &o->optim, step)) != GV_OK)
            break;
        if (!isfinite(st.loss_sum)) {
            gv_log(GV_LOG_ERROR, "training diverged: loss is %g at step %lld (lower --lr?)",
                   st.loss_sum, (long long)step);
            status = GV_ERR_INVAL;
            break;
        }
        w.st.loss_sum += st.loss_sum;
        w.st.correct += st.correct;
        w.st.count += st.count;
        w.samples += o->batch;
        if ((step + 1) % o->progress_every == 0 || step + 1 == total) {
            double now = gv_now_s(), loss = w.st.loss_sum / (double)w.st.count;
            struct gv_nn_record rec = {
                .type = "step", .step = step + 1, .epoch = epoch, .time_s = now - r->t0,
                .loss = loss, .accuracy = (double)w.st.correct / (double)w.st.count,
                .perplexity = o->model.kind == GV_NN_LSTM ? exp(loss) : -1.0,
                .samples_per_s = (double)w.samples / (now - w.t),
                .lr = gv_optim_lr(&o->optim, step), .cf = 1.0, .bytes_sent = 0, .standalone = 1,
            };
            emit(r, &rec);
            w = (struct window){.t = gv_now_s()};
        }
        int epoch_end = per_epoch > 0 && (step + 1) % per_epoch == 0;
        if ((o->eval_every > 0 ? (step + 1) % o->eval_every == 0 : epoch_end) ||
            step + 1 == total) {
            double e0 = gv_now_s();
            status = run_eval(r, step + 1, epoch, &stop);
            double spent = gv_now_s() - e0;
            r->eval_s += spent;
            w.t += spent; /* progress samples/s counts training time only */
        }
    }
    *done_p = step;
    gv_free(idx);
    gv_nn_batch_buf_cleanup(&buf);
    gv_nn_sampler_cleanup(&smp);
    return status;
}

static void print_summary(const struct run *r, int64_t steps, double secs)
{
    const struct worker_opts *o = r->o;
    printf("summary: model %s, %zu parameters, device %s, %lld steps of %d (%.2f epochs of the "
           "shard) in %.1f s (%.1f s of it evaluating), %.0f samples/s training\n",
           gv_nn_model_kind_str(o->model.kind), gv_nn_model_numel(r->model),
           gv_nn_backend_name(gv_nn_model_backend(r->model)), (long long)steps, o->batch,
           (double)steps * o->batch / (double)(r->train->n / (size_t)o->world), secs, r->eval_s,
           (double)steps * o->batch / (secs - r->eval_s));
    printf("summary: final test loss %.4f, accuracy %.2f%%", r->last.loss, 100.0 * r->last.accuracy);
    if (o->model.kind == GV_NN_LSTM)
        printf(", perplexity %.2f (best %.2f)", r->last.perplexity, r->best_ppl);
    printf(", best accuracy %.2f%%\n", 100.0 * r->best_acc);
    if (o->target > 0) {
        if (r->steps_to_target >= 0)
            printf("summary: target %.2f%% reached after %lld steps, %.1f s\n", 100.0 * o->target,
                   (long long)r->steps_to_target, r->time_to_target);
        else
            printf("summary: target %.2f%% not reached\n", 100.0 * o->target);
    }
}

/* Model shape follows the data: image shape and classes, or the text vocabulary. */
static void model_cfg_from_data(struct worker_opts *o, const struct gv_nn_dataset *tr)
{
    o->model.n_classes = tr->n_classes;
    if (tr->kind == GV_NN_DATA_IMAGES) {
        o->model.in_h = tr->h;
        o->model.in_w = tr->w;
        o->model.in_c = tr->c;
        o->model.max_batch = GV_MAX(o->batch, 256);
    } else {
        o->model.max_batch = o->batch;
    }
}

static int run_standalone(struct worker_opts *o)
{
    struct run r = {.o = o, .steps_to_target = -1};
    struct gv_nn_backend *be = NULL;
    int rc = 1;
    if (load_data(o, &r.train, &r.test) != GV_OK)
        goto out;
    model_cfg_from_data(o, r.train);
    size_t shard = r.train->n / (size_t)o->world;
    if (shard < (size_t)o->batch) {
        gv_log(GV_LOG_ERROR, "the shard of %zu samples is smaller than one batch of %d", shard, o->batch);
        goto out;
    }
    int64_t total = o->steps > 0 ? o->steps : o->epochs * (int64_t)(shard / (size_t)o->batch);
    if (o->optim.sched == GV_LR_COSINE && o->optim.total == 0)
        o->optim.total = total;
    if (gv_optim_cfg_check(&o->optim) != GV_OK ||
        gv_nn_backend_create(o->device, o->threads, &be) != GV_OK ||
        gv_nn_model_create(be, &o->model, &r.model) != GV_OK ||
        gv_nn_model_init(r.model, o->seed) != GV_OK ||
        gv_nn_batch_buf_init(&r.eval_buf, r.test, o->model.max_batch) != GV_OK)
        goto out;
    if (o->metrics != NULL && gv_nn_metrics_open(o->metrics, &r.mf) != GV_OK)
        goto out;
    printf("gravac-worker standalone: model %s (%zu parameters in %d tensors), data %s "
           "(%zu train, %zu test, shard %d of %d), device %s, threads %d, batch %d, %lld steps\n",
           gv_nn_model_kind_str(o->model.kind), gv_nn_model_numel(r.model),
           gv_nn_model_tensor_count(r.model), r.train->name, r.train->n, r.test->n, o->rank,
           o->world, gv_nn_backend_name(be), o->threads, o->batch, (long long)total);
    fflush(stdout);
    int64_t done = 0;
    r.t0 = gv_now_s();
    gv_status_t status = train_loop(&r, total, &done);
    double secs = gv_now_s() - r.t0;
    if (status == GV_OK) {
        print_summary(&r, done, secs);
        rc = 0;
    }
out:
    gv_nn_metrics_close(r.mf);
    gv_nn_batch_buf_cleanup(&r.eval_buf);
    gv_nn_model_destroy(r.model);
    gv_nn_backend_destroy(be);
    gv_nn_dataset_destroy(r.train);
    gv_nn_dataset_destroy(r.test);
    return rc;
}

int main(int argc, char **argv)
{
    struct worker_opts o;
    gv_log_set_tag("worker");
    if (parse_args(argc, argv, &o) != 0)
        return 2;
    return run_standalone(&o);
}
