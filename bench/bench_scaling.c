/* bench_scaling.c: `gravac-bench scaling`: steps to a validation goal versus the global batch
 * size B (Shallue et al., JMLR 2019; shared/reference/data-parallel-scaling.md), in one
 * process with nn/: steps do not depend on the transport. For every B, a small search over the
 * learning rate and the momentum (quasi-random over log lr and log(1 - momentum), then a
 * refinement around the best); steps to the goal = the first evaluation whose validation error
 * is below the goal, over the trials (the best trial). Then the log2-log2 plot with the
 * perfect-scaling line and the three regimes classified from the measured slopes.
 * The validation set is the end of the training file; the test set is never read. */
#include "bench.h"
#include "bench_progress.h"
#include "bench_train.h"
#include "gv_nn.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SC_MAX_B 24
#define SC_MAX_TRIALS 64

struct sc_opts {
    enum gv_nn_model_kind model;
    char widths[64];
    int batches[SC_MAX_B];
    int n_b;
    int trials, refine;
    bool transfer; /* also try the previous batch size's best (lr, 2 lr) */
    double goal;   /* validation error to get below */
    double max_epochs;
    int val;                           /* validation samples (end of the training file) */
    double lr_lo, lr_hi, om_lo, om_hi; /* lr and 1 - momentum ranges (log scale) */
    bool nesterov;
    uint64_t seed;
    int threads;
    int eval_samples;   /* at least this many training samples between evaluations */
    double eval_growth; /* and at least this relative growth of the step count */
    char data_dir[512];
    char out[512];
    bool plots;
    char plot_fmt[8];
    enum bp_mode progress; /* --progress (--quiet: off) */
    double progress_every; /* --progress-every S (0: the default for the output) */
};

/* diverged: a non-finite or exploding (> 1e3) training loss, or a non-finite validation loss;
 * stalled: still (or again) at chance after a whole epoch and SC_STALL_STEPS steps (validation
 * error >= 1 - 1.5 / classes): a network whose ReLUs died after a blow-up, or a learning rate
 * far too small for that batch size. Both stop at once: they cannot win, and a dead network's
 * steps run several times slower than a healthy one's. */
#define SC_STALL_STEPS 100
enum sc_outcome { SC_REACHED = 0, SC_NOT_REACHED, SC_PRUNED, SC_DIVERGED, SC_STALLED };

static const char *sc_outcome_str(enum sc_outcome o)
{
    return o == SC_REACHED       ? "reached"
           : o == SC_NOT_REACHED ? "not-reached"
           : o == SC_PRUNED      ? "pruned"
           : o == SC_DIVERGED    ? "diverged"
                                 : "stalled";
}

struct sc_trial {
    int b, stage;
    double lr, momentum;
    enum sc_outcome outcome;
    int64_t steps;   /* to the goal (reached), else steps run */
    double best_err; /* lowest validation error seen */
    int evals;
    double seconds;
};

struct sc_best {
    int b;
    int64_t steps; /* -1: no trial reached the goal */
    double lr, momentum;
    int n_trials;
    double seconds;
};

struct sc_data {
    struct gv_nn_dataset *all;
    struct gv_nn_dataset train, val; /* views into all (not owned) */
};

/* Where the study is, for the progress line. */
struct sc_prog {
    struct bp bp;
    int bi, nb; /* the batch size going on (0-based), of */
    int done;   /* batch sizes finished, and their total time */
    double done_s;
    double tb0;            /* gv_now_s() at this batch size's start */
    int stage, running, n; /* the stage, its trials still running, of */
    int64_t at, budget;    /* the step its trials run to next, and the step budget */
    double samples;        /* trained in this batch size so far, over every trial */
};

/* ---------------------------------------------------------------- options */

static void sc_usage(FILE *f)
{
    fprintf(f,
            "usage: gravac-bench scaling [options]\n"
            "Steps to a validation goal vs the global batch size, with a learning-rate and\n"
            "momentum search per batch size (single process, nn/, Fashion-MNIST).\n\n"
            "  --model M            softmax | mlp | cnn (default mlp)\n"
            "  --widths W           MLP hidden widths (default 256,128)\n"
            "  --batches LIST       global batch sizes (default 16,32,...,8192)\n"
            "  --trials N           quasi-random trials per batch size (default 8)\n"
            "  --refine N           then N trials around the best one (default 4)\n"
            "  --no-transfer        do not also try the previous B's best lr and momentum\n"
            "                       (and twice that lr) at the next B\n"
            "  --goal-error E       validation error to reach (default 0.13)\n"
            "  --max-epochs E       step budget per trial, in epochs (default 20)\n"
            "  --val N              validation samples, the end of the training file (5000)\n"
            "  --lr-range A,B       learning rates, log scale (default 0.001,3)\n"
            "  --om-range A,B       1 - momentum, log scale (default 0.01,0.5)\n"
            "  --nesterov           Nesterov momentum (default heavy ball)\n"
            "  --seed N             model initialisation and data order (default 1)\n"
            "  --threads N          OpenBLAS threads (default 1)\n"
            "  --eval-samples N     training samples between evaluations, at least (2048)\n"
            "  --eval-growth X      and at least this relative step growth (default 0.05)\n"
            "  --data-dir DIR       Fashion-MNIST (default " GV_NN_FASHION_MNIST_DIR ")\n"
            "  --out DIR            results (default bench-scaling)\n"
            "  --plot-format F      png | svg (default png); --no-plots\n"
            "  --progress MODE      auto | on | off: where the study is (batch size i of n,\n"
            "                       stage, trials running, step, samples/s, elapsed, estimated\n"
            "                       remaining) on stderr; auto (default): on a terminal only,\n"
            "                       redrawn in place; on: also into a file, one line per update\n"
            "  --progress-every S   seconds between updates (default 0.5 on a terminal, 10\n"
            "                       otherwise)\n"
            "  --quiet              no progress (--progress off)\n");
}

static int sc_ints(const char *s, int *out, int cap)
{
    int n = 0;
    for (const char *p = s; *p != '\0';) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || n >= cap || v < 1 || v > 65536)
            return -1;
        out[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            return -1;
    }
    return n;
}

static int sc_pair(const char *s, double *a, double *b)
{
    char *end;
    *a = strtod(s, &end);
    if (*end != ',')
        return -1;
    *b = strtod(end + 1, &end);
    return *end == '\0' && *a > 0 && *b > *a ? 0 : -1;
}

static int sc_parse(int argc, char **argv, struct sc_opts *o)
{
    static const struct option lo[] = {{"model", required_argument, NULL, 'm'},
                                       {"widths", required_argument, NULL, 'w'},
                                       {"batches", required_argument, NULL, 'b'},
                                       {"trials", required_argument, NULL, 't'},
                                       {"refine", required_argument, NULL, 'r'},
                                       {"goal-error", required_argument, NULL, 'g'},
                                       {"max-epochs", required_argument, NULL, 'E'},
                                       {"val", required_argument, NULL, 'v'},
                                       {"lr-range", required_argument, NULL, 'l'},
                                       {"om-range", required_argument, NULL, 'M'},
                                       {"nesterov", no_argument, NULL, 'n'},
                                       {"seed", required_argument, NULL, 's'},
                                       {"threads", required_argument, NULL, 'T'},
                                       {"eval-samples", required_argument, NULL, 'e'},
                                       {"eval-growth", required_argument, NULL, 'G'},
                                       {"data-dir", required_argument, NULL, 'd'},
                                       {"out", required_argument, NULL, 'o'},
                                       {"plot-format", required_argument, NULL, 'f'},
                                       {"no-plots", no_argument, NULL, 'P'},
                                       {"help", no_argument, NULL, 'h'},
                                       {"no-transfer", no_argument, NULL, 'X'},
                                       {"progress", required_argument, NULL, 'p'},
                                       {"progress-every", required_argument, NULL, 'U'},
                                       {"quiet", no_argument, NULL, 'q'},
                                       {NULL, 0, NULL, 0}};
    *o = (struct sc_opts){.model = GV_NN_MLP,
                          .trials = 8,
                          .refine = 4,
                          .transfer = true,
                          .goal = 0.13,
                          .max_epochs = 20,
                          .val = 5000,
                          .lr_lo = 0.001,
                          .lr_hi = 3,
                          .om_lo = 0.01,
                          .om_hi = 0.5,
                          .seed = 1,
                          .threads = 1,
                          .eval_samples = 2048,
                          .eval_growth = 0.05,
                          .plots = true};
    snprintf(o->widths, sizeof(o->widths), "256,128");
    snprintf(o->data_dir, sizeof(o->data_dir), "%s", GV_NN_FASHION_MNIST_DIR);
    snprintf(o->out, sizeof(o->out), "bench-scaling");
    snprintf(o->plot_fmt, sizeof(o->plot_fmt), "png");
    o->n_b = sc_ints("16,32,64,128,256,512,1024,2048,4096,8192", o->batches, SC_MAX_B);
    bool bad = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 'm': bad |= gv_nn_model_kind_parse(optarg, &o->model) != GV_OK; break;
        case 'w': bad |= snprintf(o->widths, sizeof(o->widths), "%s", optarg) >= 64; break;
        case 'b': o->n_b = sc_ints(optarg, o->batches, SC_MAX_B); break;
        case 't': o->trials = (int)strtol(optarg, &end, 10); break;
        case 'r': o->refine = (int)strtol(optarg, &end, 10); break;
        case 'g': o->goal = strtod(optarg, &end); break;
        case 'E': o->max_epochs = strtod(optarg, &end); break;
        case 'v': o->val = (int)strtol(optarg, &end, 10); break;
        case 'l': bad |= sc_pair(optarg, &o->lr_lo, &o->lr_hi) != 0; break;
        case 'M': bad |= sc_pair(optarg, &o->om_lo, &o->om_hi) != 0 || o->om_hi >= 1; break;
        case 'n': o->nesterov = true; break;
        case 's': o->seed = strtoull(optarg, &end, 10); break;
        case 'T': o->threads = (int)strtol(optarg, &end, 10); break;
        case 'e': o->eval_samples = (int)strtol(optarg, &end, 10); break;
        case 'G': o->eval_growth = strtod(optarg, &end); break;
        case 'd': bad |= snprintf(o->data_dir, sizeof(o->data_dir), "%s", optarg) >= 512; break;
        case 'o': bad |= snprintf(o->out, sizeof(o->out), "%s", optarg) >= 512; break;
        case 'f':
            bad |= strcmp(optarg, "png") != 0 && strcmp(optarg, "svg") != 0;
            snprintf(o->plot_fmt, sizeof(o->plot_fmt), "%s", optarg);
            break;
        case 'P': o->plots = false; break;
        case 'X': o->transfer = false; break;
        case 'p': bad |= bp_mode_parse(optarg, &o->progress) != GV_OK; break;
        case 'U': o->progress_every = strtod(optarg, &end); break;
        case 'q': o->progress = BP_OFF; break;
        case 'h': sc_usage(stdout); exit(0);
        default: return -1;
        }
        if (end != NULL && (*end != '\0' || end == optarg))
            bad = true;
    }
    if (bad || optind < argc || o->n_b < 1 || o->trials < 1 || o->trials > SC_MAX_TRIALS ||
        o->refine < 0 || o->trials + o->refine + 2 > SC_MAX_TRIALS ||
        !(o->goal > 0 && o->goal < 1) || !(o->max_epochs > 0 && o->max_epochs <= 1000) ||
        o->val < 100 || o->threads < 1 || !(o->progress_every >= 0 && o->progress_every <= 3600) ||
        o->threads > 64 || o->eval_samples < 1 || !(o->eval_growth >= 0 && o->eval_growth < 1) ||
        o->model == GV_NN_LSTM)
        return -1;
    for (int i = 1; i < o->n_b; i++)
        if (o->batches[i] <= o->batches[i - 1])
            return -1; /* ascending: slopes are taken between neighbours */
    return 0;
}

/* ---------------------------------------------------------------- data and one trial */

static gv_status_t sc_data_load(const struct sc_opts *o, struct sc_data *d)
{
    char img[700], lab[700];
    snprintf(img, sizeof(img), "%s/train-images-idx3-ubyte.gz", o->data_dir);
    snprintf(lab, sizeof(lab), "%s/train-labels-idx1-ubyte.gz", o->data_dir);
    gv_status_t status = gv_nn_dataset_load_idx(img, lab, 10, &d->all);
    if (status != GV_OK)
        return status;
    if (d->all->n < (size_t)o->val + 1024) {
        gv_log(GV_LOG_ERROR, "scaling: %zu training samples, too few for %d validation ones",
               d->all->n, o->val);
        return GV_ERR_INVAL;
    }
    if (d->all->index != NULL || d->all->n != d->all->n_total) {
        gv_log(GV_LOG_ERROR, "scaling: the training set was loaded as a shard");
        return GV_ERR_INVAL;
    }
    /* two views into the one set: the pixels stay as loaded (uint8, or float when synthetic) */
    size_t per = (size_t)d->all->h * (size_t)d->all->w * (size_t)d->all->c;
    d->train = *d->all;
    d->train.n = d->train.n_total = d->all->n - (size_t)o->val;
    d->val = *d->all;
    d->val.n = d->val.n_total = (size_t)o->val;
    if (d->all->pix != NULL)
        d->val.pix = d->all->pix + d->train.n * per;
    if (d->all->x != NULL)
        d->val.x = d->all->x + d->train.n * per;
    d->val.y = d->all->y + d->train.n;
    snprintf(d->val.name, sizeof(d->val.name), "validation");
    return GV_OK;
}

static int64_t sc_next_eval(const struct sc_opts *o, int b, int64_t prev)
{
    int64_t a = prev + (o->eval_samples + b - 1) / b;
    int64_t g = (int64_t)ceil((double)prev * (1.0 + o->eval_growth));
    return GV_MAX(a, g);
}

struct sc_run {
    struct gv_nn_backend *be;
    struct gv_nn_model *m;
    struct gv_nn_batch_buf buf, ebuf;
    size_t *idx;
    size_t numel;
};

/* A trial between its turns: its parameters, momentum and data order. */
struct sc_state {
    float *params, *mom; /* float[numel], host */
    struct gv_nn_sampler smp;
    bool alive;
};

static gv_status_t sc_run_init(const struct sc_opts *o, const struct sc_data *d, int b,
                               struct sc_run *r)
{
    memset(r, 0, sizeof(*r));
    struct gv_nn_model_cfg cfg;
    gv_nn_model_cfg_default(o->model, &cfg);
    cfg.max_batch = GV_MAX(b, 1000);
    if (o->model == GV_NN_MLP) {
        int n = sc_ints(o->widths, cfg.widths, GV_NN_MAX_WIDTHS);
        if (n < 1) {
            gv_log(GV_LOG_ERROR, "scaling: bad --widths '%s'", o->widths);
            return GV_ERR_INVAL;
        }
        cfg.n_widths = n;
    }
    gv_status_t status = gv_nn_backend_create(GV_NN_CPU, o->threads, &r->be);
    if (status == GV_OK)
        status = gv_nn_model_create(r->be, &cfg, &r->m);
    if (status == GV_OK)
        status = gv_nn_batch_buf_init(&r->buf, &d->train, b);
    if (status == GV_OK)
        status = gv_nn_batch_buf_init(&r->ebuf, &d->val, 1000);
    if (status == GV_OK && (r->idx = gv_malloc((size_t)b * sizeof(size_t))) == NULL)
        status = GV_ERR_NOMEM;
    if (status == GV_OK)
        r->numel = gv_nn_model_numel(r->m);
    return status;
}

static void sc_run_cleanup(struct sc_run *r)
{
    gv_free(r->idx);
    gv_nn_batch_buf_cleanup(&r->buf);
    gv_nn_batch_buf_cleanup(&r->ebuf);
    gv_nn_model_destroy(r->m);
    gv_nn_backend_destroy(r->be);
}

static void sc_state_cleanup(struct sc_state *st)
{
    gv_free(st->params);
    gv_free(st->mom);
    gv_nn_sampler_cleanup(&st->smp);
    memset(st, 0, sizeof(*st));
}

/* Every trial starts from the same initial model and sees the same batches (one seed). */
static gv_status_t sc_state_init(const struct sc_opts *o, const struct sc_data *d, struct sc_run *r,
                                 struct sc_state *st)
{
    memset(st, 0, sizeof(*st));
    st->params = gv_malloc(r->numel * sizeof(float));
    st->mom = gv_calloc(r->numel, sizeof(float));
    if (st->params == NULL || st->mom == NULL)
        return GV_ERR_NOMEM;
    gv_status_t status = gv_nn_model_init(r->m, o->seed);
    if (status == GV_OK)
        status = gv_nn_model_get_params(r->m, st->params);
    if (status == GV_OK)
        status = gv_nn_sampler_init(&st->smp, d->train.n, 0, 1, o->seed);
    st->alive = status == GV_OK;
    return status;
}

/* Advances trial t (state st) from its step count to step `to`, then evaluates it.
 * The model is the run's one model: the trial's state is loaded and saved around the turn
 * (the CPU backend keeps the momentum in host memory, read and written directly). */
static gv_status_t sc_turn(const struct sc_data *d, struct sc_run *r, struct sc_state *st,
                           struct sc_trial *t, const struct gv_optim_cfg *oc, int64_t to,
                           double *err_p)
{
    double t0 = gv_now_s();
    float *mom = gv_nn_model_momentum(r->m);
    gv_status_t status = gv_nn_model_set_params(r->m, st->params);
    if (status != GV_OK)
        return status;
    memcpy(mom, st->mom, r->numel * sizeof(float));
    *err_p = 1.0;
    while (t->steps < to) {
        if (bt_interrupted)
            return GV_ERR_CLOSED;
        struct gv_nn_batch batch;
        struct gv_nn_stats stats;
        if ((status = gv_nn_sampler_next(&st->smp, t->b, r->idx, NULL)) != GV_OK ||
            (status = gv_nn_batch_gather(&d->train, r->idx, t->b, &r->buf, &batch)) != GV_OK ||
            (status = gv_nn_model_train_step(r->m, &batch, &stats)) != GV_OK)
            return status;
        double loss = stats.loss_sum / (double)stats.count;
        if (!isfinite(loss) || loss > 1e3) {
            t->outcome = SC_DIVERGED;
            break;
        }
        if ((status = gv_nn_model_optim_step(r->m, oc, t->steps)) != GV_OK)
            return status;
        t->steps++;
    }
    if (t->outcome != SC_DIVERGED) {
        struct gv_nn_eval ev;
        status = gv_nn_evaluate(r->m, &d->val, 1000, 0, &r->ebuf, &ev);
        if (status != GV_OK)
            return status;
        t->evals++;
        if (!isfinite(ev.loss))
            t->outcome = SC_DIVERGED;
        else
            *err_p = 1.0 - ev.accuracy;
        t->best_err = GV_MIN(t->best_err, *err_p);
        if (t->outcome != SC_DIVERGED && (size_t)t->steps * (size_t)t->b >= d->train.n &&
            t->steps >= SC_STALL_STEPS && *err_p >= 1.0 - 1.5 / d->train.n_classes)
            t->outcome = SC_STALLED;
    }
    status = gv_nn_model_get_params(r->m, st->params);
    memcpy(st->mom, mom, r->numel * sizeof(float));
    t->seconds += gv_now_s() - t0;
    return status;
}

/* The progress line: batch size i of n, the stage, its trials, the step, samples/s; the time
 * left is the mean time of the finished batch sizes times those left (unknown before the
 * first ends; rough: a larger batch size usually takes longer). */
static void sc_progress(struct sc_prog *pg, int b, bool force)
{
    if (!pg->bp.on)
        return;
    double b_s = gv_now_s() - pg->tb0, mean = pg->done > 0 ? pg->done_s / pg->done : -1;
    double left = mean < 0 ? -1 : GV_MAX(0.0, mean - b_s) + (pg->nb - pg->bi - 1) * mean;
    if (pg->at == 0)
        bp_update(&pg->bp, force, left, "batch size %d/%d (B %d): starting", pg->bi + 1, pg->nb, b);
    else
        bp_update(&pg->bp, force, left,
                  "batch size %d/%d (B %d), stage %d: %d of %d trials "
                  "running, step %lld/%lld, %.0f samples/s",
                  pg->bi + 1, pg->nb, b, pg->stage, pg->running, pg->n, (long long)pg->at,
                  (long long)pg->budget, b_s > 0 ? pg->samples / b_s : 0.0);
}

/* Runs the n trials of one stage in lockstep, one evaluation interval at a time (every
 * trial is evaluated at the same steps): the first evaluation where any trial is below the
 * goal gives the steps to the goal, and the others stop there (pruned: none of them can
 * reach it sooner). Trials also stop when they diverge, at the step budget, and at
 * best_before (a previous stage's result they could not beat). */
static gv_status_t sc_stage(const struct sc_opts *o, const struct sc_data *d, struct sc_run *r,
                            struct sc_trial *t, int n, int64_t best_before, int *winner_p,
                            struct sc_prog *pg)
{
    struct sc_state st[SC_MAX_TRIALS];
    struct gv_optim_cfg oc[SC_MAX_TRIALS];
    gv_status_t status = GV_OK;
    int alive = 0;
    for (int i = 0; i < n; i++) {
        t[i].outcome = SC_NOT_REACHED;
        t[i].best_err = 1.0;
        gv_optim_cfg_default(&oc[i]);
        oc[i].lr = (float)t[i].lr;
        oc[i].momentum = (float)t[i].momentum;
        oc[i].nesterov = o->nesterov;
        memset(&st[i], 0, sizeof(st[i]));
        if (status == GV_OK)
            status = sc_state_init(o, d, r, &st[i]);
        alive += status == GV_OK;
    }
    int b = t[0].b;
    int64_t budget = (int64_t)ceil(o->max_epochs * (double)d->train.n / (double)b);
    int64_t at = 0;
    *winner_p = -1;
    pg->n = n;
    pg->budget = budget;
    while (status == GV_OK && alive > 0) {
        at = GV_MIN(sc_next_eval(o, b, at), budget);
        pg->at = at;
        pg->running = alive;
        sc_progress(pg, b, false);
        if (best_before > 0 && at >= best_before) {
            for (int i = 0; i < n; i++)
                if (st[i].alive)
                    t[i].outcome = SC_PRUNED;
            break;
        }
        double best_err = 2.0;
        for (int i = 0; i < n && status == GV_OK; i++) {
            if (!st[i].alive)
                continue;
            double err;
            int64_t before = t[i].steps;
            status = sc_turn(d, r, &st[i], &t[i], &oc[i], at, &err);
            pg->samples += (double)(t[i].steps - before) * b;
            sc_progress(pg, b, false);
            if (status != GV_OK || t[i].outcome == SC_DIVERGED || t[i].outcome == SC_STALLED) {
                st[i].alive = false;
                alive--;
                continue;
            }
            if (err < o->goal && err < best_err) {
                best_err = err;
                *winner_p = i;
            }
        }
        if (*winner_p >= 0 || at >= budget) {
            for (int i = 0; i < n; i++)
                if (st[i].alive)
                    t[i].outcome = i == *winner_p   ? SC_REACHED
                                   : *winner_p >= 0 ? SC_PRUNED
                                                    : SC_NOT_REACHED;
            break;
        }
    }
    for (int i = 0; i < n; i++)
        sc_state_cleanup(&st[i]);
    return status;
}

/* ---------------------------------------------------------------- the search */

static double sc_halton(int i, int base)
{
    double f = 1, r = 0;
    for (int k = i; k > 0; k /= base) {
        f /= base;
        r += f * (k % base);
    }
    return r;
}

/* Trial i of a stage over the box [l0, l1] x [m0, m1] (log10 lr, log10 (1 - momentum)). */
static void sc_point(int i, double l0, double l1, double m0, double m1, double *lr, double *mom)
{
    double u = sc_halton(i + 1, 2), v = sc_halton(i + 1, 3);
    *lr = pow(10.0, l0 + u * (l1 - l0));
    *mom = 1.0 - pow(10.0, m0 + v * (m1 - m0));
}

static void sc_print_trial(const struct sc_trial *t)
{
    printf("  B %5d stage %d lr %-9.4g momentum %-7.4f eff-lr %-9.4g %-11s steps %-7lld best "
           "err %.4f (%d evals, %.1f s)\n",
           t->b, t->stage, t->lr, t->momentum, t->lr / (1 - t->momentum),
           sc_outcome_str(t->outcome), (long long)t->steps, t->best_err, t->evals, t->seconds);
    fflush(stdout);
}

/* Every trial of batch size b (appended to trials[]) and the best one. prev: the best of a
 * smaller batch size (NULL: none): its lr and momentum, and the lr doubled (the linear scaling
 * heuristic), join the first stage as "stage 0" trials, so that a point that worked at B/2 is
 * not missed at B by the coarse quasi-random search. */
static gv_status_t sc_batch(const struct sc_opts *o, const struct sc_data *d, int b,
                            const struct sc_best *prev, struct sc_trial *trials, int *n_trials,
                            struct sc_best *best, struct sc_prog *pg)
{
    struct sc_run run;
    gv_status_t status = sc_run_init(o, d, b, &run);
    double l0 = log10(o->lr_lo), l1 = log10(o->lr_hi), m0 = log10(o->om_lo), m1 = log10(o->om_hi);
    *best = (struct sc_best){.b = b, .steps = -1};
    double t0 = gv_now_s(), c_lr = 0, c_mom = 0, c_err = 1.0;
    for (int stage = 1; stage <= 2 && status == GV_OK; stage++) {
        int n_tr = stage == 1 && prev != NULL && o->transfer ? 2 : 0;
        int n = stage == 1 ? o->trials + n_tr : o->refine;
        if (stage == 2) {
            if (best->steps > 0) {
                c_lr = best->lr;
                c_mom = best->momentum;
            }
            if (c_lr <= 0 || n == 0)
                break;
            /* a box a quarter of the range wide on each axis, clipped, around the best trial
             * (none reached the goal: around the lowest validation error) */
            double cl = log10(c_lr), cm = log10(1 - c_mom);
            double hl = (l1 - l0) / 8, hm = (m1 - m0) / 8;
            l0 = GV_MAX(log10(o->lr_lo), cl - hl);
            l1 = GV_MIN(log10(o->lr_hi), cl + hl);
            m0 = GV_MAX(log10(o->om_lo), cm - hm);
            m1 = GV_MIN(log10(o->om_hi), cm + hm);
        }
        struct sc_trial *t = trials + *n_trials;
        for (int i = 0; i < n; i++) {
            memset(&t[i], 0, sizeof(t[i]));
            t[i].b = b;
            t[i].stage = stage;
            if (i >= n - n_tr) { /* transferred from prev */
                t[i].stage = 0;
                t[i].lr = GV_MIN(o->lr_hi, prev->lr * (i == n - 1 ? 2.0 : 1.0));
                t[i].momentum = prev->momentum;
                continue;
            }
            /* stage 2 continues the sequence, so its points differ from stage 1's pattern */
            sc_point(i + (stage == 2 ? o->trials : 0), l0, l1, m0, m1, &t[i].lr, &t[i].momentum);
        }
        int win = -1;
        pg->stage = stage;
        status = sc_stage(o, d, &run, t, n, best->steps, &win, pg);
        bp_clear(&pg->bp);
        for (int i = 0; i < n && status == GV_OK; i++) {
            sc_print_trial(&t[i]);
            if (t[i].outcome != SC_DIVERGED && t[i].outcome != SC_STALLED &&
                t[i].best_err < c_err) {
                c_err = t[i].best_err;
                c_lr = t[i].lr;
                c_mom = t[i].momentum;
            }
        }
        *n_trials += n;
        best->n_trials += n;
        if (status == GV_OK && win >= 0) {
            best->steps = t[win].steps;
            best->lr = t[win].lr;
            best->momentum = t[win].momentum;
        }
    }
    best->seconds = gv_now_s() - t0;
    sc_run_cleanup(&run);
    return status;
}

/* ---------------------------------------------------------------- regimes and outputs */

enum sc_regime { SC_PERFECT = 0, SC_DIMINISHING, SC_MAXIMAL };

static const char *sc_regime_str(enum sc_regime r)
{
    return r == SC_PERFECT       ? "perfect scaling"
           : r == SC_DIMINISHING ? "diminishing returns"
                                 : "maximal data parallelism";
}

/* Slope of segment i (between measured neighbours i and i + 1): halvings of the steps per
 * doubling of B; 1 = perfect scaling, 0 = no gain. */
static double sc_slope(const struct sc_best *a, const struct sc_best *b)
{
    return log2((double)a->steps / (double)b->steps) / log2((double)b->b / (double)a->b);
}

static enum sc_regime sc_classify(double s)
{
    return s >= 0.8 ? SC_PERFECT : s >= 0.2 ? SC_DIMINISHING : SC_MAXIMAL;
}

static int sc_measured(const struct sc_best *best, int n, const struct sc_best **m)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (best[i].steps > 0)
            m[k++] = &best[i];
    return k;
}

/* The regimes of the measured batch sizes m[0 .. k-1]: perfect scaling over m[0 ..
 * end_perfect] (the initial run of perfect segments; none when end_perfect = 0), maximal data
 * parallelism over m[start_max .. k-1] (the final run of flat segments; none when start_max =
 * k - 1), diminishing returns between them (none when start_max <= end_perfect). */
struct sc_regimes {
    const struct sc_best *m[SC_MAX_B];
    int k, end_perfect, start_max;
};

static void sc_regimes_of(const struct sc_best *best, int n, struct sc_regimes *g)
{
    g->k = sc_measured(best, n, g->m);
    g->end_perfect = 0;
    g->start_max = GV_MAX(g->k - 1, 0);
    while (g->end_perfect + 1 < g->k &&
           sc_classify(sc_slope(g->m[g->end_perfect], g->m[g->end_perfect + 1])) == SC_PERFECT)
        g->end_perfect++;
    while (g->start_max > 0 &&
           sc_classify(sc_slope(g->m[g->start_max - 1], g->m[g->start_max])) == SC_MAXIMAL)
        g->start_max--;
}

/* The span [*lo, *hi] of batch sizes of regime r; false when the measurements show none. */
static bool sc_regime_span(const struct sc_regimes *g, enum sc_regime r, int *lo, int *hi)
{
    int a = r == SC_PERFECT ? 0 : r == SC_DIMINISHING ? g->end_perfect : g->start_max;
    int b = r == SC_PERFECT ? g->end_perfect : r == SC_DIMINISHING ? g->start_max : g->k - 1;
    if (g->k < 2 || b <= a)
        return false;
    *lo = g->m[a]->b;
    *hi = g->m[b]->b;
    return true;
}

static void sc_print_regimes(const struct sc_best *best, int n, double goal)
{
    const struct sc_best *m[SC_MAX_B];
    int k = sc_measured(best, n, m);
    printf("\n== steps to validation error < %.3f (best trial per batch size)\n", goal);
    printf("%-8s %-10s %-12s %-10s %-10s %-9s %-9s %s\n", "B", "steps", "perfect", "lr", "momentum",
           "trials", "time[s]", "slope to next B (regime)");
    for (int i = 0; i < n; i++) {
        const struct sc_best *b = &best[i];
        if (b->steps < 0) {
            printf("%-8d %-10s %-12s %-10s %-10s %-9d %-9.0f\n", b->b, "not reached", "-", "-", "-",
                   b->n_trials, b->seconds);
            continue;
        }
        double perfect = k > 0 ? (double)m[0]->steps * m[0]->b / b->b : 0;
        char slope[64] = "";
        for (int j = 0; j + 1 < k; j++)
            if (m[j] == b) {
                double s = sc_slope(m[j], m[j + 1]);
                snprintf(slope, sizeof(slope), "%.2f (%s)", s, sc_regime_str(sc_classify(s)));
            }
        printf("%-8d %-10lld %-12.0f %-10.4g %-10.4f %-9d %-9.0f %s\n", b->b, (long long)b->steps,
               perfect, b->lr, b->momentum, b->n_trials, b->seconds, slope);
    }
    if (k < 2) {
        printf("regimes: fewer than two batch sizes reached the goal; none identified\n");
        return;
    }
    struct sc_regimes g;
    sc_regimes_of(best, n, &g);
    int lo, hi;
    printf("regimes (rule: slope >= 0.8 perfect, 0.2..0.8 diminishing, < 0.2 maximal):\n");
    if (sc_regime_span(&g, SC_PERFECT, &lo, &hi))
        printf("  perfect scaling: B %d .. %d\n", lo, hi);
    else
        printf("  perfect scaling: not seen (from B %d the first doubling already gains less)\n",
               m[0]->b);
    if (sc_regime_span(&g, SC_DIMINISHING, &lo, &hi))
        printf("  diminishing returns: B %d .. %d\n", lo, hi);
    else
        printf("  diminishing returns: not seen\n");
    if (sc_regime_span(&g, SC_MAXIMAL, &lo, &hi))
        printf("  maximal data parallelism: B %d .. %d\n", lo, hi);
    else
        printf("  maximal data parallelism: not reached up to B %d\n", m[k - 1]->b);
    fflush(stdout);
}

static gv_status_t sc_write_csv(const struct sc_opts *o, const struct sc_trial *t, int n)
{
    char path[700];
    snprintf(path, sizeof(path), "%s/scaling.csv", o->out);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        gv_log(GV_LOG_ERROR, "scaling: cannot write %s: %s", path, strerror(errno));
        return GV_ERR_IO;
    }
    fprintf(f, "batch,stage,lr,momentum,effective_lr,outcome,steps,best_val_error,evals,seconds\n");
    for (int i = 0; i < n; i++)
        fprintf(f, "%d,%d,%.6g,%.6g,%.6g,%s,%lld,%.5f,%d,%.2f\n", t[i].b, t[i].stage, t[i].lr,
                t[i].momentum, t[i].lr / (1 - t[i].momentum), sc_outcome_str(t[i].outcome),
                (long long)t[i].steps, t[i].best_err, t[i].evals, t[i].seconds);
    return fclose(f) == 0 ? GV_OK : GV_ERR_IO;
}

static gv_status_t sc_write_json(const struct sc_opts *o, const struct sc_trial *t, int n,
                                 const struct sc_best *best, int nb, double secs)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "bench", "gravac-bench scaling");
    cJSON *s = cJSON_AddObjectToObject(root, "setup");
    cJSON_AddStringToObject(s, "model", gv_nn_model_kind_str(o->model));
    if (o->model == GV_NN_MLP)
        cJSON_AddStringToObject(s, "widths", o->widths);
    cJSON_AddStringToObject(s, "data",
                            "fashion-mnist training file; validation = its last "
                            "--val samples; test set unused");
    cJSON_AddNumberToObject(s, "validation_samples", o->val);
    cJSON_AddNumberToObject(s, "goal_validation_error", o->goal);
    cJSON_AddNumberToObject(s, "trials", o->trials);
    cJSON_AddNumberToObject(s, "refine", o->refine);
    cJSON_AddBoolToObject(s, "transfer", o->transfer);
    cJSON_AddNumberToObject(s, "max_epochs", o->max_epochs);
    double lr[2] = {o->lr_lo, o->lr_hi}, om[2] = {o->om_lo, o->om_hi};
    cJSON_AddItemToObject(s, "lr_range", cJSON_CreateDoubleArray(lr, 2));
    cJSON_AddItemToObject(s, "one_minus_momentum_range", cJSON_CreateDoubleArray(om, 2));
    cJSON_AddBoolToObject(s, "nesterov", o->nesterov);
    cJSON_AddNumberToObject(s, "seed", (double)o->seed);
    cJSON_AddNumberToObject(s, "eval_samples", o->eval_samples);
    cJSON_AddNumberToObject(s, "eval_growth", o->eval_growth);
    cJSON_AddNumberToObject(s, "seconds", secs);
    cJSON *ta = cJSON_AddArrayToObject(root, "trials");
    for (int i = 0; i < n; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "batch", t[i].b);
        cJSON_AddNumberToObject(x, "stage", t[i].stage);
        cJSON_AddNumberToObject(x, "lr", t[i].lr);
        cJSON_AddNumberToObject(x, "momentum", t[i].momentum);
        cJSON_AddStringToObject(x, "outcome", sc_outcome_str(t[i].outcome));
        cJSON_AddNumberToObject(x, "steps", (double)t[i].steps);
        cJSON_AddNumberToObject(x, "best_val_error", t[i].best_err);
        cJSON_AddNumberToObject(x, "seconds", t[i].seconds);
        cJSON_AddItemToArray(ta, x);
    }
    const struct sc_best *m[SC_MAX_B];
    int k = sc_measured(best, nb, m);
    cJSON *ba = cJSON_AddArrayToObject(root, "batches");
    for (int i = 0; i < nb; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "batch", best[i].b);
        if (best[i].steps > 0) {
            cJSON_AddNumberToObject(x, "steps", (double)best[i].steps);
            cJSON_AddNumberToObject(x, "perfect_scaling_steps",
                                    (double)m[0]->steps * m[0]->b / best[i].b);
            cJSON_AddNumberToObject(x, "lr", best[i].lr);
            cJSON_AddNumberToObject(x, "momentum", best[i].momentum);
        } else {
            cJSON_AddNullToObject(x, "steps");
        }
        for (int j = 0; j + 1 < k; j++)
            if (m[j] == &best[i]) {
                double sl = sc_slope(m[j], m[j + 1]);
                cJSON_AddNumberToObject(x, "slope_to_next", sl);
                cJSON_AddStringToObject(x, "regime_to_next", sc_regime_str(sc_classify(sl)));
            }
        cJSON_AddNumberToObject(x, "trials", best[i].n_trials);
        cJSON_AddItemToArray(ba, x);
    }
    struct sc_regimes g;
    sc_regimes_of(best, nb, &g);
    cJSON *rg = cJSON_AddObjectToObject(root, "regimes");
    for (int r = SC_PERFECT; r <= SC_MAXIMAL; r++) {
        int span[2];
        if (sc_regime_span(&g, (enum sc_regime)r, &span[0], &span[1]))
            cJSON_AddItemToObject(rg, sc_regime_str((enum sc_regime)r),
                                  cJSON_CreateIntArray(span, 2));
        else
            cJSON_AddNullToObject(rg, sc_regime_str((enum sc_regime)r));
    }
    char *str = cJSON_Print(root);
    cJSON_Delete(root);
    if (str == NULL)
        return GV_ERR_NOMEM;
    char path[700];
    snprintf(path, sizeof(path), "%s/scaling.json", o->out);
    FILE *f = fopen(path, "w");
    bool ok = f != NULL && fputs(str, f) >= 0 && fputc('\n', f) != EOF;
    if (f != NULL && fclose(f) != 0)
        ok = false;
    cJSON_free(str);
    if (!ok) {
        gv_log(GV_LOG_ERROR, "scaling: cannot write %s: %s", path, strerror(errno));
        return GV_ERR_IO;
    }
    return GV_OK;
}

static gv_status_t sc_plot(const struct sc_opts *o, const struct sc_best *best, int nb)
{
    const struct sc_best *m[SC_MAX_B];
    int k = sc_measured(best, nb, m);
    if (k == 0)
        return GV_OK;
    char dat[700], gp[700], img[700], term[160];
    snprintf(dat, sizeof(dat), "%s/scaling.dat", o->out);
    snprintf(gp, sizeof(gp), "%s/scaling.gp", o->out);
    snprintf(img, sizeof(img), "%s/scaling.%s", o->out, o->plot_fmt);
    FILE *f = fopen(dat, "w");
    if (f == NULL)
        return GV_ERR_IO;
    fprintf(f, "# batch steps perfect lr momentum effective_lr regime_to_next\n");
    for (int i = 0; i < k; i++) {
        int reg = i + 1 < k ? (int)sc_classify(sc_slope(m[i], m[i + 1])) : -1;
        fprintf(f, "%d %lld %.2f %.6g %.6g %.6g %d\n", m[i]->b, (long long)m[i]->steps,
                (double)m[0]->steps * m[0]->b / m[i]->b, m[i]->lr, m[i]->momentum,
                m[i]->lr / (1 - m[i]->momentum), reg);
    }
    if (fclose(f) != 0)
        return GV_ERR_IO;
    f = fopen(gp, "w");
    if (f == NULL)
        return GV_ERR_IO;
    bt_gnuplot_terminal(o->plot_fmt, 1100, 480, term, sizeof(term));
    fprintf(f, "%s\nset output '%s'\nset multiplot layout 1,2\nset grid\n", term, img);
    fprintf(f,
            "set title 'Steps to validation error < %.3f (%s, Fashion-MNIST)'\n"
            "set logscale xy 2\nset format x '2^{%%L}'\nset format y '2^{%%L}'\n"
            "set xlabel 'global batch size B'\nset ylabel 'steps (best trial)'\n"
            "set key bottom left\n",
            o->goal, gv_nn_model_kind_str(o->model));
    /* the regimes, shaded behind the curves and named at the top */
    struct sc_regimes g;
    sc_regimes_of(best, nb, &g);
    static const char *shade[] = {"#d8f0d8", "#f6efcc", "#f6d8d8"};
    for (int r = SC_PERFECT; r <= SC_MAXIMAL; r++) {
        int lo, hi;
        if (!sc_regime_span(&g, (enum sc_regime)r, &lo, &hi))
            continue;
        fprintf(f,
                "set object %d rect from %d, graph 0 to %d, graph 1 behind fc rgb '%s' "
                "fs solid 1.0 noborder\nset label %d '%s' at %g, graph 0.97 center front "
                "font ',9'\n",
                r + 1, lo, hi, shade[r], r + 1, sc_regime_str((enum sc_regime)r),
                sqrt((double)lo * hi));
    }
    fprintf(f,
            "plot '%s' using 1:3 with lines dt 2 lw 2 lc rgb '#808080' title 'perfect "
            "scaling', \\\n     '%s' using 1:2 with linespoints pt 7 ps 1 lw 2 "
            "lc rgb '#1f77b4' title 'measured'\n",
            dat, dat);
    fprintf(f, "unset object 1\nunset object 2\nunset object 3\nunset label 1\n"
               "unset label 2\nunset label 3\n");
    fprintf(f,
            "set title 'Best trial: effective learning rate lr/(1-momentum)'\n"
            "set format y '10^{%%L}'\nset logscale y 10\nset ylabel 'lr / (1 - momentum)'\n"
            "set key top left\n"
            "plot '%s' using 1:6 with linespoints pt 7 lw 2 lc rgb '#d62728' title "
            "'effective lr', '%s' using 1:4 with linespoints pt 5 lw 2 lc rgb '#2ca02c' "
            "title 'lr'\nunset multiplot\n",
            dat, dat);
    if (fclose(f) != 0)
        return GV_ERR_IO;
    return bt_gnuplot(gp);
}

int gv_bench_scaling_main(int argc, char **argv)
{
    struct sc_opts o;
    if (sc_parse(argc, argv, &o) != 0) {
        sc_usage(stderr);
        return 2;
    }
    bt_signals_install();
    if (bt_mkdirs(o.out) != GV_OK)
        return 1;
    struct sc_data d;
    memset(&d, 0, sizeof(d));
    if (sc_data_load(&o, &d) != GV_OK) {
        gv_nn_dataset_destroy(d.all);
        return 1;
    }
    double load[3] = {0, 0, 0};
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf != NULL) {
        if (fscanf(lf, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
            load[0] = 0;
        fclose(lf);
    }
    printf("# gravac-bench scaling: %s%s%s on Fashion-MNIST (%zu train, %zu validation from the "
           "end of the training file), goal validation error < %.3f; per B %d quasi-random%s + %d "
           "refining trials over lr [%g, %g], 1-momentum [%g, %g] (log scales), %s momentum, "
           "constant lr, budget %g epochs; %d OpenBLAS thread(s), load %.2f\n",
           gv_nn_model_kind_str(o.model), o.model == GV_NN_MLP ? " " : "",
           o.model == GV_NN_MLP ? o.widths : "", d.train.n, d.val.n, o.goal, o.trials,
           o.transfer ? " + 2 transferred from the previous B (stage 0)" : "", o.refine, o.lr_lo,
           o.lr_hi, o.om_lo, o.om_hi, o.nesterov ? "Nesterov" : "heavy-ball", o.max_epochs,
           o.threads, load[0]);
    struct sc_trial *trials = gv_calloc((size_t)o.n_b * SC_MAX_TRIALS, sizeof(*trials));
    struct sc_best best[SC_MAX_B];
    int nt = 0, rc = 1;
    double t0 = gv_now_s();
    gv_status_t status = trials == NULL ? GV_ERR_NOMEM : GV_OK;
    int nb = 0;
    const struct sc_best *prev = NULL;
    struct sc_prog pg = {.nb = o.n_b};
    bp_init(&pg.bp, o.progress, o.progress_every, stderr);
    for (int i = 0; i < o.n_b && status == GV_OK; i++) {
        pg.bi = i;
        pg.tb0 = gv_now_s();
        pg.samples = 0;
        pg.stage = 1;
        pg.at = pg.running = 0;
        sc_progress(&pg, o.batches[i], true);
        status = sc_batch(&o, &d, o.batches[i], prev, trials, &nt, &best[i], &pg);
        pg.done++;
        pg.done_s += gv_now_s() - pg.tb0;
        nb = i + 1;
        if (best[i].steps > 0)
            prev = &best[i];
    }
    bp_clear(&pg.bp);
    if (status == GV_ERR_CLOSED) {
        fprintf(stderr, "gravac-bench scaling: interrupted\n");
        rc = 130;
    } else if (status == GV_OK) {
        double secs = gv_now_s() - t0;
        sc_print_regimes(best, nb, o.goal);
        status = sc_write_csv(&o, trials, nt);
        if (status == GV_OK)
            status = sc_write_json(&o, trials, nt, best, nb, secs);
        if (status == GV_OK && o.plots) {
            if (bt_have_gnuplot())
                status = sc_plot(&o, best, nb);
            else
                printf("# gnuplot not found: no plot (Debian package gnuplot-nox)\n");
        }
        printf("# %d trials in %.0f s; results in %s (scaling.csv, scaling.json%s)\n", nt, secs,
               o.out, o.plots ? ", scaling plot" : "");
        rc = status == GV_OK ? 0 : 1;
    }
    gv_free(trials);
    gv_nn_dataset_destroy(d.all);
    return rc;
}
