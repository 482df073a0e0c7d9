/* cuda_backend.c: the CUDA backend's ops table, a thin layer over the extern "C" launchers of
 * cuda/ (the .cu files), which live in the plugin libgravac_compress_cuda.so and are reached
 * through its table (cuda_plugin.c loads it at the first probe or create; without CUDA at build
 * time create fails with GV_ERR_UNSUPPORTED). Device memory throughout; host scratch only for
 * positions. */
#include "compress_internal.h"
#include "cuda/gv_compress_cuda.h"

/* The plugin's launchers; set by the first successful cu_init, never unset (the plugin stays
 * loaded), so every op below, reached only through a created compressor, may use it. */
static const struct gv_cuda_api *cu;

gv_status_t gv_cmp_cuda_probe(int *ndev_p)
{
    const struct gv_cuda_api *api;
    int n = 0;
    gv_status_t status = gv_cuda_plugin(1, &api);
    if (status == GV_OK)
        status = api->device_count(&n);
    *ndev_p = status == GV_OK ? n : 0;
    return status;
}

static struct gv_cuda_ws *ws_of(struct gv_cmp *c)
{
    return c->be;
}

static gv_status_t cu_init(struct gv_cmp *c)
{
    int ndev = 0;
    const struct gv_cuda_api *api;
    gv_status_t status = gv_cuda_plugin(0, &api);
    if (status != GV_OK)
        return status; /* logged with the places tried */
    if ((status = api->device_count(&ndev)) != GV_OK)
        return status; /* logged by the launcher */
    cu = api;
    struct gv_cuda_ws *ws;
    status = cu->ws_create(c->cfg.max_numel, c->pos_cap, &ws);
    if (status != GV_OK)
        return status;
    c->be = ws;
    return GV_OK;
}

static void cu_fini(struct gv_cmp *c)
{
    if (c->be != NULL) /* NULL when init failed (cu may then be unset too) */
        cu->ws_destroy(ws_of(c));
    c->be = NULL;
}

static gv_status_t cu_mem_alloc(struct gv_cmp *c, size_t bytes, void **ptr_p)
{
    (void)c;
    return cu->malloc(bytes, ptr_p);
}

static void cu_mem_free(struct gv_cmp *c, void *ptr)
{
    (void)c;
    cu->free(ptr);
}

static gv_status_t cu_to_host(struct gv_cmp *c, void *dst, const void *src, size_t bytes)
{
    (void)c;
    return cu->d2h(dst, src, bytes);
}

static gv_status_t cu_from_host(struct gv_cmp *c, void *dst, const void *src, size_t bytes)
{
    (void)c;
    return cu->h2d(dst, src, bytes);
}

static gv_status_t cu_copy(struct gv_cmp *c, void *dst, const void *src, size_t bytes)
{
    (void)c;
    return cu->d2d(dst, src, bytes);
}

static gv_status_t cu_zero(struct gv_cmp *c, float *x, uint32_t n)
{
    (void)c;
    return cu->zero(x, (size_t)n * sizeof(float));
}

static gv_status_t cu_accumulate(struct gv_cmp *c, float *r, const float *g, uint32_t n,
                                 double *sumsq_p)
{
    return cu->accumulate(ws_of(c), r, g, n, sumsq_p);
}

static gv_status_t cu_ef_apply(struct gv_cmp *c, float *r, const uint32_t *idx, const float *val,
                               uint32_t count)
{
    return cu->ef_apply(ws_of(c), r, idx, val, count);
}

static gv_status_t cu_topk(struct gv_cmp *c, const float *x, uint32_t n, uint32_t k,
                           const uint32_t *map, struct gv_sparse *out)
{
    if (k > n || k > out->cap)
        return GV_ERR_INVAL;
    gv_status_t status = cu->topk(ws_of(c), x, n, k, map, out->idx, out->val);
    if (status == GV_OK)
        out->count = k;
    return status;
}

static gv_status_t cu_count_ge(struct gv_cmp *c, const float *x, uint32_t n, uint32_t key_min,
                               uint64_t *count_p)
{
    return cu->count_ge(ws_of(c), x, n, key_min, count_p);
}

static gv_status_t cu_select_ge(struct gv_cmp *c, const float *x, uint32_t n, uint32_t key_min,
                                const uint32_t *map, struct gv_sparse *out)
{
    return cu->select_ge(ws_of(c), x, n, key_min, map, out->cap, out->idx, out->val, &out->count);
}

static gv_status_t cu_gather(struct gv_cmp *c, const float *x, const uint32_t *pos_host,
                             uint32_t count, const uint32_t *map, struct gv_sparse *out)
{
    gv_status_t status = cu->gather(ws_of(c), x, pos_host, count, map, out->idx, out->val);
    if (status == GV_OK)
        out->count = count;
    return status;
}

static gv_status_t cu_sample(struct gv_cmp *c, const float *x, const uint32_t *pos_host,
                             uint32_t count, float *vals_host)
{
    return cu->sample(ws_of(c), x, pos_host, count, vals_host);
}

static gv_status_t cu_abs_stats(struct gv_cmp *c, const float *x, uint32_t n, double *sum_p,
                                float *max_p, uint64_t *nfinite_p)
{
    return cu->abs_stats(ws_of(c), x, n, sum_p, max_p, nfinite_p);
}

static gv_status_t cu_round_f16(struct gv_cmp *c, float *val, uint32_t count)
{
    return cu->round_f16(ws_of(c), val, count);
}

static gv_status_t cu_sumsq(struct gv_cmp *c, const float *x, uint32_t n, double *sumsq_p)
{
    return cu->sumsq(ws_of(c), x, n, sumsq_p);
}

static gv_status_t cu_scatter_add(struct gv_cmp *c, float *dense, uint32_t n, const uint32_t *idx,
                                  const float *val, uint32_t count)
{
    return cu->scatter_add(ws_of(c), dense, n, idx, val, count);
}

const struct gv_cmp_ops gv_cmp_cuda_ops = {
    .name = "cuda",
    .init = cu_init,
    .fini = cu_fini,
    .mem_alloc = cu_mem_alloc,
    .mem_free = cu_mem_free,
    .to_host = cu_to_host,
    .from_host = cu_from_host,
    .copy = cu_copy,
    .zero = cu_zero,
    .accumulate = cu_accumulate,
    .ef_apply = cu_ef_apply,
    .topk = cu_topk,
    .count_ge = cu_count_ge,
    .select_ge = cu_select_ge,
    .gather = cu_gather,
    .sample = cu_sample,
    .abs_stats = cu_abs_stats,
    .round_f16 = cu_round_f16,
    .sumsq = cu_sumsq,
    .scatter_add = cu_scatter_add,
};
