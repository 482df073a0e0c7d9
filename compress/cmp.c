/* cmp.c: the compressor object and the public entry points: configuration checks, the two
 * levels, the error-feedback state machine (accumulate -> pending -> apply) and the helpers for
 * memory of the compressor's kind. Backend work goes through c->ops; no #ifdef here. */
#include "compress_internal.h"

#include <math.h>
#include <stdio.h>

void gv_cmp_config_init(struct gv_cmp_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->kind = GV_CMP_TOPK;
    cfg->mem = GV_MEM_HOST;
    cfg->val_type = GV_VAL_F32;
    cfg->min_cf = 1.0;
    cfg->nthreads = 1;
}

static gv_status_t config_check(const struct gv_cmp_config *cfg)
{
    if ((unsigned)cfg->kind > GV_CMP_REDSYNC) {
        gv_log(GV_LOG_ERROR, "compress: unknown compressor kind %d", (int)cfg->kind);
        return GV_ERR_INVAL;
    }
    if ((unsigned)cfg->mem > GV_MEM_DEVICE) {
        gv_log(GV_LOG_ERROR, "compress: unknown memory kind %d", (int)cfg->mem);
        return GV_ERR_INVAL;
    }
    if ((unsigned)cfg->val_type > GV_VAL_F16) {
        gv_log(GV_LOG_ERROR, "compress: unknown value type %d", (int)cfg->val_type);
        return GV_ERR_INVAL;
    }
    if (cfg->max_numel == 0 || cfg->max_numel > UINT32_MAX) {
        gv_log(GV_LOG_ERROR, "compress: max_numel %llu must be in 1..%u",
               (unsigned long long)cfg->max_numel, UINT32_MAX);
        return GV_ERR_INVAL;
    }
    if (!isfinite(cfg->min_cf) || cfg->min_cf < 1.0) {
        gv_log(GV_LOG_ERROR, "compress: min_cf %g must be finite and >= 1", cfg->min_cf);
        return GV_ERR_INVAL;
    }
    if (cfg->nthreads < 0 || cfg->nthreads > 256) {
        gv_log(GV_LOG_ERROR, "compress: nthreads %d must be 0 (all) or 1..256", cfg->nthreads);
        return GV_ERR_INVAL;
    }
    return GV_OK;
}

gv_status_t gv_cmp_create(const struct gv_cmp_config *cfg, struct gv_cmp **cmp_p)
{
    gv_status_t status = config_check(cfg);
    if (status != GV_OK)
        return status;
    struct gv_cmp *c = gv_calloc(1, sizeof(*c));
    if (c == NULL)
        return GV_ERR_NOMEM;
    c->cfg = *cfg;
    c->ops = cfg->mem == GV_MEM_DEVICE ? &gv_cmp_cuda_ops : &gv_cmp_cpu_ops;
    c->nthreads = cfg->mem == GV_MEM_DEVICE ? 1
                  : cfg->nthreads == 0      ? gv_online_cpus()
                                            : cfg->nthreads;
    struct gv_scan_kernels kern;
    gv_scan_pick(&kern);
    c->scan = kern.scan;
    if (cfg->mem == GV_MEM_DEVICE)
        snprintf(c->backend, sizeof(c->backend), "%s", c->ops->name);
    else
        snprintf(c->backend, sizeof(c->backend), "%s-%s", c->ops->name, kern.name);
    status = gv_cf_to_k(cfg->max_numel, cfg->min_cf, &c->max_k);
    if (status != GV_OK)
        goto err_free;
    if (c->nthreads > 1) {
        status = gv_pool_create(c->nthreads, &c->pool);
        if (status != GV_OK)
            goto err_free;
    }
    /* host scratch of the random-k and DGC logic, sized once */
    uint32_t dgc_ns = gv_dgc_sample_len((uint32_t)cfg->max_numel);
    c->pos_cap = GV_MAX(c->max_k, dgc_ns) + 1;
    if (cfg->kind == GV_CMP_RANDOMK || cfg->kind == GV_CMP_DGC) {
        c->pos = gv_malloc((size_t)c->pos_cap * sizeof(*c->pos));
        if (c->pos == NULL)
            goto err_nomem;
    }
    if (cfg->kind == GV_CMP_RANDOMK) {
        c->bitmap = gv_calloc((size_t)((cfg->max_numel + 63) / 64), sizeof(*c->bitmap));
        if (c->bitmap == NULL)
            goto err_nomem;
    }
    if (cfg->kind == GV_CMP_DGC) {
        c->samp = gv_malloc((size_t)dgc_ns * sizeof(*c->samp));
        if (c->samp == NULL)
            goto err_nomem;
    }
    status = c->ops->init(c);
    if (status != GV_OK)
        goto err_free;
    *cmp_p = c;
    return GV_OK;

err_nomem:
    gv_log(GV_LOG_ERROR, "compress: cannot allocate the host scratch for %llu entries",
           (unsigned long long)cfg->max_numel);
    status = GV_ERR_NOMEM;
err_free:
    gv_cmp_destroy(c);
    return status;
}

void gv_cmp_destroy(struct gv_cmp *c)
{
    if (c == NULL)
        return;
    c->ops->fini(c);
    gv_pool_destroy(c->pool);
    gv_free(c->pos);
    gv_free(c->bitmap);
    gv_free(c->samp);
    gv_free(c);
}

const struct gv_cmp_config *gv_cmp_get_config(const struct gv_cmp *c)
{
    return &c->cfg;
}

int gv_cmp_nthreads(const struct gv_cmp *c)
{
    return c->nthreads;
}

const char *gv_cmp_backend(const struct gv_cmp *c)
{
    return c->backend;
}

/* k for (n, cf) within what the workspace was sized for; 0 and no log when out of range. */
static uint32_t cmp_k(const struct gv_cmp *c, uint64_t n, double cf)
{
    if (n == 0 || n > c->cfg.max_numel || !isfinite(cf) || cf < c->cfg.min_cf)
        return 0;
    double q = floor((double)n / cf);
    uint32_t k = q < 1.0 ? 1u : (uint32_t)q;
    return k > n ? (uint32_t)n : k;
}

uint32_t gv_cmp_bound(const struct gv_cmp *c, uint64_t n, double cf)
{
    uint32_t k = cmp_k(c, n, cf);
    if (k == 0)
        return 0;
    switch (c->cfg.kind) {
    case GV_CMP_DENSE: return (uint32_t)n;
    case GV_CMP_TOPK:
    case GV_CMP_RANDOMK: return k;
    case GV_CMP_DGC:
    case GV_CMP_REDSYNC: return (uint32_t)GV_MIN(n, 2ull * k);
    }
    return 0;
}

/* ---------------------------------------------------------------- selection */

static gv_status_t level_select(struct gv_cmp *c, const float *x, uint32_t n, uint32_t k,
                                const uint32_t *map, uint64_t iter, uint32_t tensor_id,
                                uint32_t level, struct gv_sparse *out)
{
    out->dense = 0;
    out->count = 0;
    out->sumsq = 0;
    switch (c->cfg.kind) {
    case GV_CMP_DENSE:
        out->dense = 1;
        out->count = n;
        return c->ops->copy(c, out->val, x, (size_t)n * sizeof(float));
    case GV_CMP_TOPK: return c->ops->topk(c, x, n, k, map, out);
    case GV_CMP_RANDOMK:
        return gv_cmp_randomk(c, x, n, k, map,
                              gv_seed_mix(c->cfg.seed, iter, tensor_id, level, GV_SEED_RANDOMK),
                              out);
    case GV_CMP_DGC:
        return gv_cmp_dgc(c, x, n, k, map,
                          gv_seed_mix(c->cfg.seed, iter, tensor_id, level, GV_SEED_DGC), out);
    case GV_CMP_REDSYNC: return gv_cmp_redsync(c, x, n, k, map, out);
    }
    return GV_ERR_INVAL;
}

/* fp16 rounding of what is sent, then its squared norm (which a backend's top-k may have
 * computed already, for f32 values). */
static gv_status_t finish(struct gv_cmp *c, struct gv_sparse *out)
{
    gv_status_t status = GV_OK;
    if (c->cfg.val_type == GV_VAL_F16)
        status = c->ops->round_f16(c, out->val, out->count);
    int have = c->cfg.kind == GV_CMP_TOPK && c->ops->topk_sumsq && c->cfg.val_type == GV_VAL_F32;
    if (status == GV_OK && !have)
        status = c->ops->sumsq(c, out->val, out->count, &out->sumsq);
    return status;
}

static gv_status_t out_check(const struct gv_cmp *c, const struct gv_sparse *out, uint32_t bound,
                             const char *what)
{
    if (out == NULL || out->val == NULL || (c->cfg.kind != GV_CMP_DENSE && out->idx == NULL)) {
        gv_log(GV_LOG_ERROR, "compress: %s output has no arrays", what);
        return GV_ERR_INVAL;
    }
    if (out->cap < bound) {
        gv_log(GV_LOG_ERROR, "compress: %s output cap %u is below the bound %u", what, out->cap,
               bound);
        return GV_ERR_INVAL;
    }
    return GV_OK;
}

static gv_status_t level1(struct gv_cmp *c, const float *x, uint32_t n, double cf, uint64_t iter,
                          uint32_t tensor_id, struct gv_sparse *out)
{
    uint32_t k = cmp_k(c, n, cf);
    if (x == NULL || k == 0) {
        gv_log(GV_LOG_ERROR,
               "compress: cannot select %u entries at cf %g (max_numel %llu, "
               "min_cf %g)",
               n, cf, (unsigned long long)c->cfg.max_numel, c->cfg.min_cf);
        return GV_ERR_INVAL;
    }
    gv_status_t status = out_check(c, out, gv_cmp_bound(c, n, cf), "first-level");
    if (status != GV_OK)
        return status;
    status = level_select(c, x, n, k, NULL, iter, tensor_id, 1, out);
    out->n = n;
    return status;
}

static gv_status_t level2(struct gv_cmp *c, const struct gv_sparse *in, double cf, uint64_t iter,
                          uint32_t tensor_id, struct gv_sparse *out)
{
    uint32_t k = cmp_k(c, in->n, cf);
    if (k == 0) {
        gv_log(GV_LOG_ERROR, "compress: second level at cf %g is invalid for %u entries", cf,
               in->n);
        return GV_ERR_INVAL;
    }
    gv_status_t status = out_check(c, out, gv_cmp_bound(c, in->n, cf), "second-level");
    if (status != GV_OK)
        return status;
    if (in->dense) {
        status = level_select(c, in->val, in->count, in->count, NULL, iter, tensor_id, 2, out);
    } else {
        k = GV_MIN(k, in->count);
        if (k == 0) { /* an empty first level (a threshold selected nothing) */
            out->dense = 0;
            out->count = 0;
            out->sumsq = 0;
        } else {
            status = level_select(c, in->val, in->count, k, in->idx, iter, tensor_id, 2, out);
        }
    }
    out->n = in->n;
    return status;
}

/* Both levels of top-k at once where the backend has it: the same checks, logs and results
 * as level1 then level2 (level 2 is top-k2 of x, k2 capped at k1). */
static gv_status_t levels_topk2(struct gv_cmp *c, const float *x, uint32_t n, double cf_min,
                                double cf_cand, struct gv_sparse *lvl_min,
                                struct gv_sparse *lvl_cand)
{
    uint32_t k1 = cmp_k(c, n, cf_min), k2 = cmp_k(c, n, cf_cand);
    if (x == NULL || k1 == 0) {
        gv_log(GV_LOG_ERROR,
               "compress: cannot select %u entries at cf %g (max_numel %llu, "
               "min_cf %g)",
               n, cf_min, (unsigned long long)c->cfg.max_numel, c->cfg.min_cf);
        return GV_ERR_INVAL;
    }
    if (k2 == 0) {
        gv_log(GV_LOG_ERROR, "compress: second level at cf %g is invalid for %u entries", cf_cand,
               n);
        return GV_ERR_INVAL;
    }
    gv_status_t status = out_check(c, lvl_min, gv_cmp_bound(c, n, cf_min), "first-level");
    if (status == GV_OK)
        status = out_check(c, lvl_cand, gv_cmp_bound(c, n, cf_cand), "second-level");
    if (status != GV_OK)
        return status;
    struct gv_sparse *outs[2] = {lvl_min, lvl_cand};
    for (int l = 0; l < 2; l++) {
        outs[l]->dense = 0;
        outs[l]->count = 0;
        outs[l]->sumsq = 0;
    }
    status = c->ops->topk2(c, x, n, k1, GV_MIN(k2, k1), lvl_min, lvl_cand);
    lvl_min->n = n;
    lvl_cand->n = n;
    return status;
}

/* Both levels, unrounded: level 1 from x, level 2 over level 1's entries. For top-k the CPU
 * backend does both in one call, whose first-level write step captures the second level's
 * candidates (see topk_cpu.c); the other compressors and backends run the two levels. */
static gv_status_t levels(struct gv_cmp *c, const float *x, uint32_t n, double cf_min,
                          double cf_cand, uint64_t iter, uint32_t tensor_id,
                          struct gv_sparse *lvl_min, struct gv_sparse *lvl_cand)
{
    if (c->cfg.kind == GV_CMP_TOPK && c->ops->topk2 != NULL)
        return levels_topk2(c, x, n, cf_min, cf_cand, lvl_min, lvl_cand);
    gv_status_t status = level1(c, x, n, cf_min, iter, tensor_id, lvl_min);
    return status == GV_OK ? level2(c, lvl_min, cf_cand, iter, tensor_id, lvl_cand) : status;
}

gv_status_t gv_cmp_select2(struct gv_cmp *c, const float *x, uint32_t n, double cf_min,
                           double cf_cand, uint64_t iter, uint32_t tensor_id,
                           struct gv_sparse *lvl_min, struct gv_sparse *lvl_cand)
{
    if (lvl_min == NULL || lvl_cand == NULL || !(cf_cand >= cf_min)) {
        gv_log(GV_LOG_ERROR, "compress: two levels need two outputs and cf_cand >= cf_min");
        return GV_ERR_INVAL;
    }
    gv_status_t status = levels(c, x, n, cf_min, cf_cand, iter, tensor_id, lvl_min, lvl_cand);
    if (status == GV_OK)
        status = finish(c, lvl_cand);
    return status == GV_OK ? finish(c, lvl_min) : status;
}

gv_status_t gv_cmp_select(struct gv_cmp *c, const float *x, uint32_t n, double cf, uint64_t iter,
                          uint32_t tensor_id, struct gv_sparse *out)
{
    gv_status_t status = level1(c, x, n, cf, iter, tensor_id, out);
    return status == GV_OK ? finish(c, out) : status;
}

gv_status_t gv_cmp_select_sub(struct gv_cmp *c, const struct gv_sparse *in, double cf,
                              uint64_t iter, uint32_t tensor_id, struct gv_sparse *out)
{
    if (in == NULL || in->val == NULL || (!in->dense && in->count > 0 && in->idx == NULL)) {
        gv_log(GV_LOG_ERROR, "compress: second level needs a first-level input");
        return GV_ERR_INVAL;
    }
    gv_status_t status = level2(c, in, cf, iter, tensor_id, out);
    return status == GV_OK ? finish(c, out) : status;
}

/* ---------------------------------------------------------------- error feedback */

gv_status_t gv_ef_create(struct gv_cmp *c, uint32_t n, float *residual, struct gv_ef **ef_p)
{
    if (n == 0 || n > c->cfg.max_numel) {
        gv_log(GV_LOG_ERROR, "compress: residual of %u entries (max_numel %llu)", n,
               (unsigned long long)c->cfg.max_numel);
        return GV_ERR_INVAL;
    }
    struct gv_ef *ef = gv_calloc(1, sizeof(*ef));
    if (ef == NULL)
        return GV_ERR_NOMEM;
    ef->cmp = c;
    ef->n = n;
    gv_status_t status;
    if (residual == NULL) {
        void *p;
        status = c->ops->mem_alloc(c, (size_t)n * sizeof(float), &p);
        if (status != GV_OK)
            goto err_free;
        ef->r = p;
        ef->owned = 1;
    } else {
        ef->r = residual;
        status = c->ops->zero(c, ef->r, n);
        if (status != GV_OK)
            goto err_free;
    }
    *ef_p = ef;
    return GV_OK;

err_free:
    gv_free(ef);
    return status;
}

void gv_ef_destroy(struct gv_ef *ef)
{
    if (ef == NULL)
        return;
    if (ef->owned)
        ef->cmp->ops->mem_free(ef->cmp, ef->r);
    gv_free(ef);
}

float *gv_ef_data(const struct gv_ef *ef)
{
    return ef->r;
}

uint32_t gv_ef_numel(const struct gv_ef *ef)
{
    return ef->n;
}

gv_status_t gv_ef_reset(struct gv_ef *ef)
{
    ef->pending = 0;
    ef->last_min = ef->last_cand = NULL;
    return ef->cmp->ops->zero(ef->cmp, ef->r, ef->n);
}

static gv_status_t req_check(const struct gv_cmp *c, const struct gv_ef *ef, const float *g,
                             const struct gv_cmp_req *req, const struct gv_sparse *lvl_cand)
{
    if (ef == NULL || ef->cmp != c || g == NULL || req == NULL) {
        gv_log(GV_LOG_ERROR, "compress: missing residual, gradient or request (or the residual "
                             "belongs to another compressor)");
        return GV_ERR_INVAL;
    }
    if (ef->pending) {
        gv_log(GV_LOG_ERROR, "compress: the previous step of this tensor was not applied");
        return GV_ERR_INVAL;
    }
    if (!isfinite(req->cf_min) || req->cf_min < c->cfg.min_cf) {
        gv_log(GV_LOG_ERROR, "compress: cf_min %g is below the configured min_cf %g", req->cf_min,
               c->cfg.min_cf);
        return GV_ERR_INVAL;
    }
    if (req->cf_cand != 0 && !(isfinite(req->cf_cand) && req->cf_cand >= req->cf_min)) {
        gv_log(GV_LOG_ERROR, "compress: cf_cand %g must be 0 or >= cf_min %g", req->cf_cand,
               req->cf_min);
        return GV_ERR_INVAL;
    }
    if (req->cf_cand != 0 && lvl_cand == NULL) {
        gv_log(GV_LOG_ERROR, "compress: a candidate CF needs a candidate output");
        return GV_ERR_INVAL;
    }
    return GV_OK;
}

gv_status_t gv_cmp_compress(struct gv_cmp *c, struct gv_ef *ef, const float *g,
                            const struct gv_cmp_req *req, struct gv_sparse *lvl_min,
                            struct gv_sparse *lvl_cand, struct gv_norms *norms_p)
{
    gv_status_t status = req_check(c, ef, g, req, lvl_cand);
    if (status != GV_OK)
        return status;
    uint32_t n = ef->n;
    struct gv_norms norms = {0};
    status = c->ops->accumulate(c, ef->r, g, n, &norms.ef);
    if (status != GV_OK)
        return status;
    /* r now holds g_ef: the step is pending even if a level fails below (apply NOTHING keeps
     * it; nothing of g is lost) */
    ef->pending = 1;
    ef->last_min = lvl_min;
    ef->last_cand = NULL;
    /* the second level ranks the first level's unrounded values, then both are rounded */
    if (req->cf_cand != 0)
        status = levels(c, ef->r, n, req->cf_min, req->cf_cand, req->iter, req->tensor_id, lvl_min,
                        lvl_cand);
    else
        status = level1(c, ef->r, n, req->cf_min, req->iter, req->tensor_id, lvl_min);
    if (status != GV_OK)
        return status;
    if (req->cf_cand != 0) {
        ef->last_cand = lvl_cand;
        status = finish(c, lvl_cand);
        if (status != GV_OK)
            return status;
    }
    status = finish(c, lvl_min);
    if (status != GV_OK)
        return status;
    norms.min = lvl_min->sumsq;
    norms.cand = req->cf_cand != 0 ? lvl_cand->sumsq : lvl_min->sumsq;
    if (norms_p != NULL)
        *norms_p = norms;
    return GV_OK;
}

gv_status_t gv_cmp_apply(struct gv_cmp *c, struct gv_ef *ef, enum gv_sent what,
                         const struct gv_sparse *sent)
{
    if (ef == NULL || ef->cmp != c || !ef->pending) {
        gv_log(GV_LOG_ERROR, "compress: apply without a pending step on this residual");
        return GV_ERR_INVAL;
    }
    gv_status_t status;
    switch (what) {
    case GV_SENT_SPARSE:
        if (sent == NULL || (sent != ef->last_min && sent != ef->last_cand)) {
            gv_log(GV_LOG_ERROR, "compress: apply: `sent` is not an output of this step");
            return GV_ERR_INVAL;
        }
        status = c->ops->ef_apply(c, ef->r, sent->dense ? NULL : sent->idx, sent->val, sent->count);
        break;
    case GV_SENT_DENSE: status = c->ops->zero(c, ef->r, ef->n); break;
    case GV_SENT_NOTHING: status = GV_OK; break;
    default:
        gv_log(GV_LOG_ERROR, "compress: apply: unknown decision %d", (int)what);
        return GV_ERR_INVAL;
    }
    if (status == GV_OK) {
        ef->pending = 0;
        ef->last_min = ef->last_cand = NULL;
    }
    return status;
}

/* ---------------------------------------------------------------- memory helpers */

gv_status_t gv_cmp_mem_alloc(struct gv_cmp *c, size_t bytes, void **ptr_p)
{
    return c->ops->mem_alloc(c, bytes, ptr_p);
}

void gv_cmp_mem_free(struct gv_cmp *c, void *ptr)
{
    if (c != NULL && ptr != NULL)
        c->ops->mem_free(c, ptr);
}

gv_status_t gv_cmp_copy_to_host(struct gv_cmp *c, void *host_dst, const void *src, size_t bytes)
{
    return c->ops->to_host(c, host_dst, src, bytes);
}

gv_status_t gv_cmp_copy_from_host(struct gv_cmp *c, void *dst, const void *host_src, size_t bytes)
{
    return c->ops->from_host(c, dst, host_src, bytes);
}

gv_status_t gv_cmp_copy(struct gv_cmp *c, void *dst, const void *src, size_t bytes)
{
    return c->ops->copy(c, dst, src, bytes);
}

gv_status_t gv_cmp_sparse_to_host(struct gv_cmp *c, const struct gv_sparse *src,
                                  struct gv_sparse *host_dst)
{
    if (host_dst->cap < src->count || host_dst->val == NULL ||
        (!src->dense && src->count > 0 && host_dst->idx == NULL)) {
        gv_log(GV_LOG_ERROR, "compress: host copy of %u entries does not fit (cap %u)", src->count,
               host_dst->cap);
        return GV_ERR_INVAL;
    }
    gv_status_t status = GV_OK;
    if (!src->dense && src->count > 0)
        status = c->ops->to_host(c, host_dst->idx, src->idx, (size_t)src->count * 4);
    if (status == GV_OK && src->count > 0)
        status = c->ops->to_host(c, host_dst->val, src->val, (size_t)src->count * 4);
    if (status != GV_OK)
        return status;
    host_dst->count = src->count;
    host_dst->n = src->n;
    host_dst->dense = src->dense;
    host_dst->sumsq = src->sumsq;
    return GV_OK;
}

gv_status_t gv_cmp_scatter_add(struct gv_cmp *c, float *dense, uint32_t n, const uint32_t *idx,
                               const float *val, uint32_t count)
{
    if (count == 0)
        return GV_OK;
    if (dense == NULL || idx == NULL || val == NULL)
        return GV_ERR_INVAL;
    return c->ops->scatter_add(c, dense, n, idx, val, count);
}
