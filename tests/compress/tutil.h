/* tutil.h: data generators and small helpers shared by the compress tests. */
#ifndef GV_TEST_COMPRESS_TUTIL_H
#define GV_TEST_COMPRESS_TUTIL_H

#include "check.h"
#include "compress_internal.h"

#include <math.h>
#include <stdlib.h>

/* Deterministic normal-ish values (sum of uniforms), seeded. */
static inline void tu_fill_normal(float *x, size_t n, uint64_t seed)
{
    struct gv_rng rng;
    gv_rng_seed(&rng, seed);
    for (size_t i = 0; i < n; i++) {
        double s = 0;
        for (int j = 0; j < 4; j++)
            s += (double)(gv_rng_next(&rng) >> 11) * 0x1p-53;
        x[i] = (float)((s - 2.0) * 1.7320508);
    }
}

/* Values from a small set, so that many ties exist. */
static inline void tu_fill_ties(float *x, size_t n, uint64_t seed, uint32_t levels)
{
    struct gv_rng rng;
    gv_rng_seed(&rng, seed);
    for (size_t i = 0; i < n; i++) {
        uint32_t l = gv_rng_below(&rng, levels);
        x[i] = (gv_rng_next(&rng) & 1 ? 1.0f : -1.0f) * (float)l * 0.25f;
    }
}

static inline int tu_u32_eq(const uint32_t *a, const uint32_t *b, size_t n)
{
    return n == 0 || memcmp(a, b, n * sizeof(uint32_t)) == 0;
}

static inline int tu_strictly_ascending(const uint32_t *a, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (a[i] <= a[i - 1])
            return 0;
    return 1;
}

static inline int tu_bits_eq(float a, float b)
{
    return memcmp(&a, &b, sizeof(a)) == 0;
}

/* A host sparse with its own arrays. */
static inline void tu_sparse_alloc(struct gv_sparse *sp, uint32_t cap)
{
    memset(sp, 0, sizeof(*sp));
    sp->idx = calloc((size_t)cap + 1, sizeof(uint32_t));
    sp->val = calloc((size_t)cap + 1, sizeof(float));
    sp->cap = cap;
}

static inline void tu_sparse_free(struct gv_sparse *sp)
{
    free(sp->idx);
    free(sp->val);
    memset(sp, 0, sizeof(*sp));
}

static inline struct gv_cmp *tu_cmp(enum gv_cmp_kind kind, uint64_t max_n, double min_cf,
                                    int nthreads, enum gv_val_type vt, uint64_t seed)
{
    struct gv_cmp_config cfg;
    gv_cmp_config_init(&cfg);
    cfg.kind = kind;
    cfg.max_numel = max_n;
    cfg.min_cf = min_cf;
    cfg.nthreads = nthreads;
    cfg.val_type = vt;
    cfg.seed = seed;
    struct gv_cmp *c = NULL;
    gv_status_t st = gv_cmp_create(&cfg, &c);
    if (st != GV_OK) {
        fprintf(stderr, "gv_cmp_create: %s\n", gv_status_str(st));
        exit(1);
    }
    return c;
}

/* Log capture for checks on error messages. */
struct tu_log {
    int n;
    char line[512];
};

static inline void tu_log_cb(enum gv_log_level level, const char *line, void *arg)
{
    (void)level;
    struct tu_log *l = arg;
    l->n++;
    snprintf(l->line, sizeof(l->line), "%s", line);
}

#endif
