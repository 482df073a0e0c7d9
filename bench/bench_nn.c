/* bench_nn.c: `gravac-bench nn`: training throughput of the nn/ models per backend. For each
 * model and device it measures forward-only (evaluation) and training (forward + backward +
 * optimizer step) samples/s on a fixed random batch, and reports training relative to two
 * baselines taken in the same run: the same model's forward pass, and the CPU backend. */
#include "bench.h"
#include "gv_nn.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct nn_bench_opts {
    int batch, threads, json;
    double seconds;
    int dev_cpu, dev_cuda;
    char models[128];
};

struct nn_bench_row {
    double fwd, train;
    size_t params;
};

static void nn_bench_batch(const struct gv_nn_model_cfg *cfg, int n, float *x, int32_t *tok,
                           int32_t *lab)
{
    uint64_t st = 1;
    int rows = cfg->kind == GV_NN_LSTM ? n * cfg->seq_len : n;
    for (int i = 0; cfg->kind != GV_NN_LSTM && i < n * cfg->in_h * cfg->in_w * cfg->in_c; i++)
        x[i] = (float)(st = st * 6364136223846793005ULL + 1442695040888963407ULL) / 1.8e19f - 0.5f;
    for (int i = 0; i < rows; i++) {
        tok[i] = (int32_t)((unsigned)(i * 7919) % (unsigned)cfg->n_classes);
        lab[i] = (int32_t)((unsigned)(i * 104729 + 3) % (unsigned)cfg->n_classes);
    }
}

/* Runs fn until `seconds` have passed (at least 3 times); returns samples/s. */
static double nn_bench_time(struct gv_nn_model *m, const struct gv_nn_batch *b, int train,
                            double seconds, gv_status_t *status)
{
    struct gv_optim_cfg oc;
    struct gv_nn_stats st;
    gv_optim_cfg_default(&oc);
    double t0 = gv_now_s(), t = 0;
    long iters = 0;
    while (*status == GV_OK && (iters < 3 || t < seconds)) {
        /* stats: one device-to-host sync per step, as in a real training loop */
        if (train) {
            *status = gv_nn_model_train_step(m, b, &st);
            if (*status == GV_OK)
                *status = gv_nn_model_optim_step(m, &oc, iters);
        } else {
            *status = gv_nn_model_eval_batch(m, b, &st);
        }
        iters++;
        t = gv_now_s() - t0;
    }
    return (double)iters * b->n / t;
}

static gv_status_t nn_bench_model(enum gv_nn_device dev, enum gv_nn_model_kind kind,
                                  const struct nn_bench_opts *o, struct nn_bench_row *row)
{
    struct gv_nn_backend *be = NULL;
    struct gv_nn_model *m = NULL;
    struct gv_nn_model_cfg cfg;
    gv_nn_model_cfg_default(kind, &cfg);
    if (kind == GV_NN_LSTM)
        cfg.n_classes = 108; /* the default corpus' vocabulary */
    cfg.max_batch = o->batch;
    gv_status_t status = gv_nn_backend_create(dev, o->threads, &be);
    if (status == GV_OK)
        status = gv_nn_model_create(be, &cfg, &m);
    if (status == GV_OK)
        status = gv_nn_model_init(m, 1);
    if (status != GV_OK)
        goto out;
    size_t rows = (size_t)o->batch * (size_t)(kind == GV_NN_LSTM ? cfg.seq_len : 1);
    float *x = malloc((size_t)o->batch * 784 * sizeof(float));
    int32_t *tok = malloc(rows * sizeof(int32_t)), *lab = malloc(rows * sizeof(int32_t));
    if (x == NULL || tok == NULL || lab == NULL) {
        status = GV_ERR_NOMEM;
    } else {
        nn_bench_batch(&cfg, o->batch, x, tok, lab);
        struct gv_nn_batch b = {.n = o->batch, .x = x, .tokens = tok, .labels = lab};
        (void)nn_bench_time(m, &b, 1, 0.0, &status); /* warm-up: caches, cuBLAS heuristics */
        row->fwd = nn_bench_time(m, &b, 0, o->seconds, &status);
        row->train = nn_bench_time(m, &b, 1, o->seconds, &status);
        row->params = gv_nn_model_numel(m);
    }
    free(x), free(tok), free(lab);
out:
    gv_nn_model_destroy(m);
    gv_nn_backend_destroy(be);
    return status;
}

static int nn_bench_parse(int argc, char **argv, struct nn_bench_opts *o)
{
    static const struct option lo[] = {
        {"batch", required_argument, NULL, 'b'},   {"threads", required_argument, NULL, 't'},
        {"seconds", required_argument, NULL, 's'}, {"device", required_argument, NULL, 'd'},
        {"models", required_argument, NULL, 'm'},  {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0}};
    *o = (struct nn_bench_opts){
        .batch = 64, .threads = 1, .seconds = 2.0, .dev_cpu = 1, .dev_cuda = 1};
    snprintf(o->models, sizeof(o->models), "softmax,mlp,cnn,lstm");
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'b': o->batch = atoi(optarg); break;
        case 't': o->threads = atoi(optarg); break;
        case 's': o->seconds = atof(optarg); break;
        case 'm': snprintf(o->models, sizeof(o->models), "%s", optarg); break;
        case 'j': o->json = 1; break;
        case 'd':
            o->dev_cpu = strcmp(optarg, "cpu") == 0 || strcmp(optarg, "both") == 0;
            o->dev_cuda = strcmp(optarg, "cuda") == 0 || strcmp(optarg, "both") == 0;
            if (!o->dev_cpu && !o->dev_cuda)
                return -1;
            break;
        default: return -1;
        }
    }
    if (o->batch < 1 || o->batch > 4096 || o->threads < 1 || o->threads > 256 ||
        !(o->seconds > 0 && o->seconds < 600))
        return -1;
    return 0;
}

static void nn_bench_print(const struct nn_bench_opts *o, const char *model, const char *dev,
                           const struct nn_bench_row *r, double cpu_train)
{
    double vs_cpu = cpu_train > 0 ? r->train / cpu_train : 0;
    if (o->json)
        printf("{\"model\":\"%s\",\"device\":\"%s\",\"batch\":%d,\"threads\":%d,\"params\":%zu,"
               "\"fwd_samples_per_s\":%.1f,\"train_samples_per_s\":%.1f,\"train_vs_fwd\":%.3f,"
               "\"train_vs_cpu\":%.3f}\n",
               model, dev, o->batch, o->threads, r->params, r->fwd, r->train, r->train / r->fwd,
               vs_cpu);
    else
        printf("%-8s %-6s %9zu %16.0f %16.0f %10.3f %8.2f\n", model, dev, r->params, r->fwd,
               r->train, r->train / r->fwd, vs_cpu);
    fflush(stdout);
}

int gv_bench_nn_main(int argc, char **argv)
{
    struct nn_bench_opts o;
    if (nn_bench_parse(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: gravac-bench nn [--models softmax,mlp,cnn,lstm] [--device "
                        "cpu|cuda|both] [--batch 64] [--threads 1] [--seconds 2] [--json]\n");
        return 2;
    }
    if (!o.json)
        printf("# gravac-bench nn: batch %d (lstm: %d windows of 64 chars), %d OpenBLAS "
               "thread(s), >= %.1f s per measurement; baselines: forward pass, cpu backend\n"
               "%-8s %-6s %9s %16s %16s %10s %8s\n",
               o.batch, o.batch, o.threads, o.seconds, "model", "device", "params", "fwd samples/s",
               "train samples/s", "train/fwd", "vs cpu");
    if (o.dev_cuda) { /* probe once: without a GPU, say so and measure the CPU only */
        struct gv_nn_backend *be = NULL;
        gv_status_t status = gv_nn_backend_create(GV_NN_CUDA, 0, &be);
        gv_nn_backend_destroy(be);
        if (status != GV_OK) {
            printf("# cuda backend unavailable: %s\n", gv_status_str(status));
            if (!o.dev_cpu)
                return 1;
            o.dev_cuda = 0;
        }
    }
    int rc = 0;
    char list[128];
    snprintf(list, sizeof(list), "%s", o.models);
    for (char *save = NULL, *name = strtok_r(list, ",", &save); name != NULL;
         name = strtok_r(NULL, ",", &save)) {
        enum gv_nn_model_kind kind;
        if (gv_nn_model_kind_parse(name, &kind) != GV_OK) {
            fprintf(stderr, "gravac-bench nn: unknown model '%s'\n", name);
            return 2;
        }
        struct nn_bench_row cpu = {0}, gpu = {0};
        if (o.dev_cpu) {
            if (nn_bench_model(GV_NN_CPU, kind, &o, &cpu) != GV_OK)
                rc = 1;
            else
                nn_bench_print(&o, name, "cpu", &cpu, cpu.train);
        }
        if (o.dev_cuda) {
            gv_status_t status = nn_bench_model(GV_NN_CUDA, kind, &o, &gpu);
            if (status == GV_OK)
                nn_bench_print(&o, name, "cuda", &gpu, cpu.train);
            else
                rc = 1;
        }
    }
    return rc;
}
