/* cpu.c: the CPU backend's ops table: error-feedback passes, threshold counting and selection,
 * gathers, sums and scatter-add on host memory, split over the compressor's threads (the top-k
 * itself is in topk_cpu.c). Sums use fixed blocks so results do not depend on the thread count. */
#include "compress_internal.h"

#include <float.h>
#include <stdlib.h>

#define PAR_MIN (1u << 18) /* entries below which one thread does the work */

struct cpu_ws {
    double *part;   /* per GV_SUMSQ_BLOCK partial sums */
    float *pmax;    /* per block max |x| (abs_stats) */
    uint64_t *pcnt; /* per block counts (abs_stats) */
    size_t nblocks;
    uint64_t *cnt; /* per thread counts */
};

static int cpu_nth(const struct gv_cmp *c, uint64_t n)
{
    return n >= PAR_MIN ? c->nthreads : 1;
}

static void range_of(size_t n, int tid, int nth, size_t *b_p, size_t *e_p)
{
    size_t chunk = ((n + (size_t)nth - 1) / (size_t)nth + 31) & ~(size_t)31;
    size_t b = GV_MIN((size_t)tid * chunk, n);
    *b_p = b;
    *e_p = GV_MIN(b + chunk, n);
}

/* Blocks [b, e) of a fixed-block job for thread tid. */
static void blocks_of(size_t nblocks, int tid, int nth, size_t *b_p, size_t *e_p)
{
    *b_p = nblocks * (size_t)tid / (size_t)nth;
    *e_p = nblocks * ((size_t)tid + 1) / (size_t)nth;
}

static gv_status_t cpu_init(struct gv_cmp *c)
{
    gv_status_t status = gv_topk_ws_create(c->cfg.max_numel, c->max_k, c->nthreads, &c->topk_ws);
    if (status != GV_OK)
        return status;
    struct cpu_ws *w = gv_calloc(1, sizeof(*w));
    if (w == NULL)
        return GV_ERR_NOMEM;
    c->be = w;
    w->nblocks = (size_t)((c->cfg.max_numel + GV_SUMSQ_BLOCK - 1) / GV_SUMSQ_BLOCK) + 1;
    w->part = gv_malloc(w->nblocks * sizeof(*w->part));
    w->pmax = gv_malloc(w->nblocks * sizeof(*w->pmax));
    w->pcnt = gv_malloc(w->nblocks * sizeof(*w->pcnt));
    w->cnt = gv_calloc((size_t)c->nthreads, sizeof(*w->cnt));
    if (!w->part || !w->pmax || !w->pcnt || !w->cnt)
        return GV_ERR_NOMEM; /* fini frees what was made */
    return GV_OK;
}

static void cpu_fini(struct gv_cmp *c)
{
    struct cpu_ws *w = c->be;
    gv_topk_ws_destroy(c->topk_ws);
    c->topk_ws = NULL;
    if (w != NULL) {
        gv_free(w->part);
        gv_free(w->pmax);
        gv_free(w->pcnt);
        gv_free(w->cnt);
        gv_free(w);
    }
    c->be = NULL;
}

static gv_status_t cpu_mem_alloc(struct gv_cmp *c, size_t bytes, void **ptr_p)
{
    (void)c;
    void *p = gv_aligned_alloc(64, bytes);
    if (p == NULL) {
        gv_log(GV_LOG_ERROR, "compress: cannot allocate %zu bytes", bytes);
        return GV_ERR_NOMEM;
    }
    memset(p, 0, bytes);
    *ptr_p = p;
    return GV_OK;
}

static void cpu_mem_free(struct gv_cmp *c, void *ptr)
{
    (void)c;
    gv_free(ptr);
}

static gv_status_t cpu_copy(struct gv_cmp *c, void *dst, const void *src, size_t bytes)
{
    (void)c;
    if (bytes > 0)
        memmove(dst, src, bytes);
    return GV_OK;
}

static gv_status_t cpu_zero(struct gv_cmp *c, float *x, uint32_t n)
{
    (void)c;
    memset(x, 0, (size_t)n * sizeof(float));
    return GV_OK;
}

/* ---------------------------------------------------------------- fixed-block sums */

struct blk_job {
    float *r;
    const float *g; /* accumulate: r += g first; NULL: sum of squares of r only */
    size_t n;
    double *part;
};

static void job_blocks(void *arg, int tid, int nth)
{
    struct blk_job *j = arg;
    size_t nb = (j->n + GV_SUMSQ_BLOCK - 1) / GV_SUMSQ_BLOCK, b, e;
    blocks_of(nb, tid, nth, &b, &e);
    for (size_t q = b; q < e; q++) {
        size_t lo = q * GV_SUMSQ_BLOCK, len = GV_MIN((size_t)GV_SUMSQ_BLOCK, j->n - lo);
        float *r = j->r + lo;
        if (j->g != NULL) {
            const float *g = j->g + lo;
            for (size_t i = 0; i < len; i++)
                r[i] += g[i];
        }
        j->part[q] = gv_sumsq_block(r, len);
    }
}

static double blk_run(struct gv_cmp *c, float *r, const float *g, size_t n)
{
    struct cpu_ws *w = c->be;
    struct blk_job j = {.r = r, .g = g, .n = n, .part = w->part};
    gv_pool_run(c->pool, cpu_nth(c, n), job_blocks, &j);
    double s = 0;
    for (size_t q = 0; q < (n + GV_SUMSQ_BLOCK - 1) / GV_SUMSQ_BLOCK; q++)
        s += w->part[q];
    return s;
}

static gv_status_t cpu_accumulate(struct gv_cmp *c, float *r, const float *g, uint32_t n,
                                  double *sumsq_p)
{
    *sumsq_p = blk_run(c, r, g, n);
    return GV_OK;
}

static gv_status_t cpu_sumsq(struct gv_cmp *c, const float *x, uint32_t n, double *sumsq_p)
{
    if ((uint64_t)n > c->cfg.max_numel) { /* the second level's input can be anything <= n */
        *sumsq_p = gv_sumsq_f32(x, n);
        return GV_OK;
    }
    *sumsq_p = blk_run(c, (float *)(uintptr_t)x, NULL, n);
    return GV_OK;
}

/* ---------------------------------------------------------------- error feedback */

static inline float ef_left(float r, float sent)
{
    float d = r - sent;
    return d == d ? d : 0.0f; /* NaN - NaN, Inf - Inf: a non-finite value went out whole */
}

static gv_status_t cpu_ef_apply(struct gv_cmp *c, float *r, const uint32_t *idx, const float *val,
                                uint32_t count)
{
    (void)c;
    if (idx == NULL) {
        for (uint32_t i = 0; i < count; i++)
            r[i] = ef_left(r[i], val[i]);
        return GV_OK;
    }
    for (uint32_t i = 0; i < count; i++)
        r[idx[i]] = ef_left(r[idx[i]], val[i]);
    return GV_OK;
}

/* ---------------------------------------------------------------- top-k, thresholds */

static gv_status_t cpu_topk(struct gv_cmp *c, const float *x, uint32_t n, uint32_t k,
                            const uint32_t *map, struct gv_sparse *out)
{
    return gv_topk_cpu(c->topk_ws, c->pool, c->nthreads, c->cfg.seed, x, n, k, map, out);
}

static gv_status_t cpu_topk2(struct gv_cmp *c, const float *x, uint32_t n, uint32_t k1, uint32_t k2,
                             struct gv_sparse *out1, struct gv_sparse *out2)
{
    return gv_topk_cpu2(c->topk_ws, c->pool, c->nthreads, c->cfg.seed, x, n, k1, k2, out1, out2);
}

struct thr_job {
    const float *x;
    size_t n;
    uint32_t key_min;
    uint64_t *cnt;
    const uint32_t *map;
    struct gv_sparse *out;
    gv_scan_fn scan;
};

static void job_count(void *arg, int tid, int nth)
{
    struct thr_job *j = arg;
    size_t b, e;
    range_of(j->n, tid, nth, &b, &e);
    const uint32_t *u = (const uint32_t *)(const void *)j->x;
    const int32_t t = (int32_t)j->key_min;
    uint32_t c = 0;
    uint64_t total = 0;
    for (size_t i = b; i < e;) {
        /* 32-bit counter per 2^20 entries so the loop vectorises */
        size_t stop = GV_MIN(e, i + ((size_t)1 << 20));
        c = 0;
        for (; i < stop; i++)
            c += (int32_t)(u[i] & 0x7FFFFFFFu) >= t;
        total += c;
    }
    j->cnt[tid] = total;
}

static gv_status_t cpu_count_ge(struct gv_cmp *c, const float *x, uint32_t n, uint32_t key_min,
                                uint64_t *count_p)
{
    struct cpu_ws *w = c->be;
    int nth = cpu_nth(c, n);
    struct thr_job j = {.x = x, .n = n, .key_min = key_min, .cnt = w->cnt};
    gv_pool_run(c->pool, nth, job_count, &j);
    uint64_t total = 0;
    for (int t = 0; t < nth; t++)
        total += w->cnt[t];
    *count_p = total;
    return GV_OK;
}

static void job_select(void *arg, int tid, int nth)
{
    struct thr_job *j = arg;
    size_t b, e, off = 0;
    range_of(j->n, tid, nth, &b, &e);
    for (int t = 0; t < tid; t++)
        off += j->cnt[t];
    uint32_t *oi = j->out->idx + off;
    size_t got =
        j->scan(j->x + b, e - b, j->key_min, (uint32_t)b, oi, j->out->val + off, j->cnt[tid]);
    GV_ASSERT(got == j->cnt[tid]);
    if (j->map != NULL)
        for (size_t i = 0; i < got; i++)
            oi[i] = j->map[oi[i]];
}

static gv_status_t cpu_select_ge(struct gv_cmp *c, const float *x, uint32_t n, uint32_t key_min,
                                 const uint32_t *map, struct gv_sparse *out)
{
    struct cpu_ws *w = c->be;
    int nth = cpu_nth(c, n);
    struct thr_job j = {
        .x = x, .n = n, .key_min = key_min, .cnt = w->cnt, .map = map, .out = out, .scan = c->scan};
    gv_pool_run(c->pool, nth, job_count, &j);
    uint64_t total = 0;
    for (int t = 0; t < nth; t++)
        total += w->cnt[t];
    if (total > out->cap)
        return GV_ERR_INVAL;
    gv_pool_run(c->pool, nth, job_select, &j);
    out->count = (uint32_t)total;
    return GV_OK;
}

static gv_status_t cpu_gather(struct gv_cmp *c, const float *x, const uint32_t *pos, uint32_t count,
                              const uint32_t *map, struct gv_sparse *out)
{
    (void)c;
    for (uint32_t i = 0; i < count; i++) {
        out->idx[i] = map != NULL ? map[pos[i]] : pos[i];
        out->val[i] = x[pos[i]];
    }
    out->count = count;
    return GV_OK;
}

static gv_status_t cpu_sample(struct gv_cmp *c, const float *x, const uint32_t *pos, uint32_t count,
                              float *vals)
{
    (void)c;
    for (uint32_t i = 0; i < count; i++)
        vals[i] = x[pos[i]];
    return GV_OK;
}

struct stats_job {
    const float *x;
    size_t n;
    struct cpu_ws *w;
};

static void job_stats(void *arg, int tid, int nth)
{
    struct stats_job *j = arg;
    size_t nb = (j->n + GV_SUMSQ_BLOCK - 1) / GV_SUMSQ_BLOCK, b, e;
    blocks_of(nb, tid, nth, &b, &e);
    for (size_t q = b; q < e; q++) {
        size_t lo = q * GV_SUMSQ_BLOCK, len = GV_MIN((size_t)GV_SUMSQ_BLOCK, j->n - lo);
        double s = 0;
        float mx = 0;
        uint32_t fin = 0;
        for (size_t i = lo; i < lo + len; i++) {
            float a = fabsf(j->x[i]);
            int ok = a <= FLT_MAX; /* false for NaN and Inf */
            s += ok ? (double)a : 0.0;
            mx = ok && a > mx ? a : mx;
            fin += (uint32_t)ok;
        }
        j->w->part[q] = s;
        j->w->pmax[q] = mx;
        j->w->pcnt[q] = fin;
    }
}

static gv_status_t cpu_abs_stats(struct gv_cmp *c, const float *x, uint32_t n, double *sum_p,
                                 float *max_p, uint64_t *nfinite_p)
{
    struct cpu_ws *w = c->be;
    struct stats_job j = {.x = x, .n = n, .w = w};
    gv_pool_run(c->pool, cpu_nth(c, n), job_stats, &j);
    double s = 0;
    float mx = 0;
    uint64_t fin = 0;
    for (size_t q = 0; q < (n + GV_SUMSQ_BLOCK - 1) / GV_SUMSQ_BLOCK; q++) {
        s += w->part[q];
        mx = w->pmax[q] > mx ? w->pmax[q] : mx;
        fin += w->pcnt[q];
    }
    *sum_p = s;
    *max_p = mx;
    *nfinite_p = fin;
    return GV_OK;
}

static gv_status_t cpu_round_f16(struct gv_cmp *c, float *val, uint32_t count)
{
    (void)c;
    for (uint32_t i = 0; i < count; i++)
        val[i] = gv_f16_round_sat(val[i]);
    return GV_OK;
}

static gv_status_t cpu_scatter_add(struct gv_cmp *c, float *dense, uint32_t n, const uint32_t *idx,
                                   const float *val, uint32_t count)
{
    (void)c;
    for (uint32_t i = 0; i < count; i++) {
        if (idx[i] >= n) {
            gv_log(GV_LOG_ERROR, "compress: scatter-add index %u at %u is out of range (n %u)",
                   idx[i], i, n);
            return GV_ERR_INVAL;
        }
    }
    for (uint32_t i = 0; i < count; i++)
        dense[idx[i]] += val[i];
    return GV_OK;
}

const struct gv_cmp_ops gv_cmp_cpu_ops = {
    .name = "cpu",
    .init = cpu_init,
    .fini = cpu_fini,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .to_host = cpu_copy,
    .from_host = cpu_copy,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .accumulate = cpu_accumulate,
    .ef_apply = cpu_ef_apply,
    .topk = cpu_topk,
    .topk2 = cpu_topk2,
    .topk_sumsq = 1,
    .count_ge = cpu_count_ge,
    .select_ge = cpu_select_ge,
    .gather = cpu_gather,
    .sample = cpu_sample,
    .abs_stats = cpu_abs_stats,
    .round_f16 = cpu_round_f16,
    .sumsq = cpu_sumsq,
    .scatter_add = cpu_scatter_add,
};
