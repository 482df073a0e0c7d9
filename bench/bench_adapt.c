/* bench_adapt.c: `gravac-bench adapt`, the cost of the compression-factor controller per
 * iteration (gv_adapt_update) for every controller kind, with the dense controller (validation
 * only) measured in the same run as the baseline, plus the checkpoint size and save/restore
 * time. The controller runs once per training iteration on the coordinator, so the number to
 * compare it with is an iteration time (tens to hundreds of milliseconds). */
#include "bench.h"
#include "gv_adapt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct variant {
    const char *name;
    enum gv_adapt_kind kind;
    bool log;
};

static size_t log_bytes;

static void count_log(const char *line, void *arg)
{
    (void)arg;
    log_bytes += strlen(line);
}

/* A cheap, deterministic observation for the decision in force: gains rising over the run,
 * communication time falling with the CF. */
static void make_obs(const struct gv_adapt_decision *d, struct gv_adapt_obs *o, uint32_t layers,
                     double *norms)
{
    double t = (double)d->iter;
    double rise = 1.0 - 0.3 * exp(-t / 20000.0);
    memset(o, 0, sizeof(*o));
    o->iter = d->iter;
    o->level = d->level;
    o->cf_sent = d->cf_send;
    o->norm2_ef = 1e4;
    o->norm2_min = 1e4 * rise * (0.99 - 0.001 * (double)(d->iter % 7));
    o->norm2_cand = d->levels == 2 ? 1e4 * rise * (0.97 - 0.1 * log10(d->theta_s)) : 0.0;
    o->t_compute = 0.1;
    o->t_compress = 0.005;
    o->t_comm = 0.5 / d->cf_send;
    o->samples = 256;
    o->num_workers = 8;
    o->lr = d->iter < 50000 ? 0.1 : 0.01;
    o->loss = 2.0 / (1.0 + t / 1000.0) + 0.01 * (double)(d->iter % 13); /* AUTO's signal */
    if (layers > 0 && d->iter % 100 == 99) {
        o->epoch_end = true;
        o->num_layers = layers;
        o->layer_norms = norms;
        for (uint32_t l = 0; l < layers; l++)
            norms[l] = 1.0 + 0.3 * sin(t * 0.001 + l);
    }
}

static double run_variant(const struct variant *v, uint64_t iters, uint32_t layers,
                          size_t *state_bytes, double *save_us, double *restore_us)
{
    struct gv_adapt_config cfg;
    gv_adapt_config_default(&cfg, v->kind);
    cfg.gravac.window = 500;
    cfg.accordion.num_layers = layers;
    struct gv_adapt *ctl;
    if (gv_adapt_create(&cfg, &ctl) != GV_OK)
        return -1;
    if (v->log)
        gv_adapt_set_log(ctl, count_log, NULL);
    double *norms = calloc(layers ? layers : 1, sizeof(double));
    double *layer_cf = calloc(layers ? layers : 1, sizeof(double));
    struct gv_adapt_decision d = {.layer_cf = layer_cf, .layer_cap = layers};
    struct gv_adapt_obs o;
    gv_adapt_current(ctl, &d);
    uint32_t obs_layers = v->kind == GV_ADAPT_ACCORDION ? layers : 0;
    uint64_t t0 = gv_now_ns();
    for (uint64_t i = 0; i < iters; i++) {
        make_obs(&d, &o, obs_layers, norms);
        if (gv_adapt_update(ctl, &o, &d) != GV_OK) {
            fprintf(stderr, "adapt bench: update failed at %llu\n", (unsigned long long)i);
            break;
        }
    }
    double ns = (double)(gv_now_ns() - t0) / (double)iters;

    *state_bytes = gv_adapt_state_size(ctl);
    uint8_t *buf = malloc(*state_bytes);
    size_t len = 0;
    enum { REPS = 200 };
    t0 = gv_now_ns();
    for (int r = 0; r < REPS; r++)
        gv_adapt_save(ctl, buf, *state_bytes, &len);
    *save_us = (double)(gv_now_ns() - t0) / REPS / 1e3;
    t0 = gv_now_ns();
    for (int r = 0; r < REPS; r++)
        gv_adapt_restore(ctl, buf, len);
    *restore_us = (double)(gv_now_ns() - t0) / REPS / 1e3;
    free(buf);
    free(norms);
    free(layer_cf);
    gv_adapt_destroy(ctl);
    return ns;
}

int gv_bench_adapt_main(int argc, char **argv)
{
    uint64_t iters = 200000;
    uint32_t layers = 314; /* ResNet-101's parameter tensors */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--layers") == 0 && i + 1 < argc) {
            layers = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else {
            printf("usage: gravac-bench adapt [--iters N (200000)] [--layers L (314)]\n"
                   "Cost of gv_adapt_update per iteration for each controller, relative to the\n"
                   "dense controller (validation only) measured in the same run.\n");
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    if (iters < 1000 || layers < 1 || layers > GV_ADAPT_MAX_LAYERS) {
        fprintf(stderr, "adapt bench: need --iters >= 1000 and 1 <= --layers <= %u\n",
                GV_ADAPT_MAX_LAYERS);
        return 2;
    }
    static const struct variant vs[] = {
        {"dense (baseline)", GV_ADAPT_DENSE, false},
        {"static", GV_ADAPT_STATIC, false},
        {"gravac", GV_ADAPT_GRAVAC, false},
        {"gravac + json log", GV_ADAPT_GRAVAC, true},
        {"accordion", GV_ADAPT_ACCORDION, false},
        {"accordion + json log", GV_ADAPT_ACCORDION, true},
        {"auto", GV_ADAPT_AUTO, false},
        {"auto + json log", GV_ADAPT_AUTO, true},
    };
    printf("# gravac-bench adapt: %llu updates per controller, accordion %u layers (epoch = 100 "
           "iterations), gravac window 500\n",
           (unsigned long long)iters, layers);
    printf("%-22s %12s %10s %12s %10s %11s\n", "controller", "ns/update", "x dense", "state[B]",
           "save[us]", "restore[us]");
    double base = 0;
    for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); i++) {
        size_t bytes;
        double save_us, restore_us;
        log_bytes = 0;
        double ns = run_variant(&vs[i], iters, layers, &bytes, &save_us, &restore_us);
        if (ns < 0) {
            fprintf(stderr, "adapt bench: cannot create %s\n", vs[i].name);
            return 1;
        }
        if (i == 0)
            base = ns;
        printf("%-22s %12.1f %10.2f %12zu %10.2f %11.2f\n", vs[i].name, ns, ns / base, bytes,
               save_us, restore_us);
        if (vs[i].log)
            printf("%-22s %12.1f log bytes per update\n", "", (double)log_bytes / (double)iters);
    }
    return 0;
}
