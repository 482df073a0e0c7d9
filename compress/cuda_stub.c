/* cuda_stub.c: the CUDA launchers when gravac is built without CUDA (GV_HAVE_CUDA OFF): each
 * returns GV_ERR_UNSUPPORTED, so the CUDA backend fails cleanly at create and callers need no
 * #ifdef. */
#include "cuda/gv_compress_cuda.h"

static gv_status_t unsupported(void)
{
    return GV_ERR_UNSUPPORTED;
}

gv_status_t gv_cuda_device_count(int *ndev_p)
{
    *ndev_p = 0;
    return unsupported();
}

gv_status_t gv_cuda_ws_create(uint64_t max_n, uint32_t pos_cap, struct gv_cuda_ws **ws_p)
{
    (void)max_n, (void)pos_cap, (void)ws_p;
    return unsupported();
}

void gv_cuda_ws_destroy(struct gv_cuda_ws *ws)
{
    (void)ws;
}

gv_status_t gv_cuda_malloc(size_t bytes, void **ptr_p)
{
    (void)bytes, (void)ptr_p;
    return unsupported();
}

void gv_cuda_free(void *ptr)
{
    (void)ptr;
}

gv_status_t gv_cuda_d2h(void *dst_host, const void *src, size_t bytes)
{
    (void)dst_host, (void)src, (void)bytes;
    return unsupported();
}

gv_status_t gv_cuda_h2d(void *dst, const void *src_host, size_t bytes)
{
    (void)dst, (void)src_host, (void)bytes;
    return unsupported();
}

gv_status_t gv_cuda_d2d(void *dst, const void *src, size_t bytes)
{
    (void)dst, (void)src, (void)bytes;
    return unsupported();
}

gv_status_t gv_cuda_zero(void *ptr, size_t bytes)
{
    (void)ptr, (void)bytes;
    return unsupported();
}

gv_status_t gv_cuda_accumulate(struct gv_cuda_ws *ws, float *r, const float *g, uint32_t n,
                               double *sumsq_p)
{
    (void)ws, (void)r, (void)g, (void)n, (void)sumsq_p;
    return unsupported();
}

gv_status_t gv_cuda_sumsq(struct gv_cuda_ws *ws, const float *x, uint32_t n, double *sumsq_p)
{
    (void)ws, (void)x, (void)n, (void)sumsq_p;
    return unsupported();
}

gv_status_t gv_cuda_ef_apply(struct gv_cuda_ws *ws, float *r, const uint32_t *idx,
                             const float *val, uint32_t count)
{
    (void)ws, (void)r, (void)idx, (void)val, (void)count;
    return unsupported();
}

gv_status_t gv_cuda_topk(struct gv_cuda_ws *ws, const float *x, uint32_t n, uint32_t k,
                         const uint32_t *map, uint32_t *idx_out, float *val_out)
{
    (void)ws, (void)x, (void)n, (void)k, (void)map, (void)idx_out, (void)val_out;
    return unsupported();
}

gv_status_t gv_cuda_count_ge(struct gv_cuda_ws *ws, const float *x, uint32_t n, uint32_t key_min,
                             uint64_t *count_p)
{
    (void)ws, (void)x, (void)n, (void)key_min, (void)count_p;
    return unsupported();
}

gv_status_t gv_cuda_select_ge(struct gv_cuda_ws *ws, const float *x, uint32_t n,
                              uint32_t key_min, const uint32_t *map, uint32_t cap,
                              uint32_t *idx_out, float *val_out, uint32_t *count_p)
{
    (void)ws, (void)x, (void)n, (void)key_min, (void)map, (void)cap, (void)idx_out;
    (void)val_out, (void)count_p;
    return unsupported();
}

gv_status_t gv_cuda_gather(struct gv_cuda_ws *ws, const float *x, const uint32_t *pos_host,
                           uint32_t count, const uint32_t *map, uint32_t *idx_out,
                           float *val_out)
{
    (void)ws, (void)x, (void)pos_host, (void)count, (void)map, (void)idx_out, (void)val_out;
    return unsupported();
}

gv_status_t gv_cuda_sample(struct gv_cuda_ws *ws, const float *x, const uint32_t *pos_host,
                           uint32_t count, float *vals_host)
{
    (void)ws, (void)x, (void)pos_host, (void)count, (void)vals_host;
    return unsupported();
}

gv_status_t gv_cuda_abs_stats(struct gv_cuda_ws *ws, const float *x, uint32_t n, double *sum_p,
                              float *max_p, uint64_t *nfinite_p)
{
    (void)ws, (void)x, (void)n, (void)sum_p, (void)max_p, (void)nfinite_p;
    return unsupported();
}

gv_status_t gv_cuda_round_f16(struct gv_cuda_ws *ws, float *val, uint32_t count)
{
    (void)ws, (void)val, (void)count;
    return unsupported();
}

gv_status_t gv_cuda_scatter_add(struct gv_cuda_ws *ws, float *dense, uint32_t n,
                                const uint32_t *idx, const float *val, uint32_t count)
{
    (void)ws, (void)dense, (void)n, (void)idx, (void)val, (void)count;
    return unsupported();
}
