/* ops.cu: the CUDA workspace, memory helpers and the element-wise kernels: error-feedback
 * accumulate (with ||g_ef||^2) and apply, sums of squares, threshold counts, gathers, |x|
 * statistics, fp16 rounding and scatter-add (atomicAdd). The selection kernels are in topk.cu. */
#include "cuda_internal.cuh"

#include <string.h>

gv_status_t gv_cu_check(cudaError_t err, const char *what)
{
    if (err == cudaSuccess)
        return GV_OK;
    gv_log(GV_LOG_ERROR, "compress: cuda: %s: %s", what, cudaGetErrorString(err));
    return GV_ERR_CUDA;
}

gv_status_t gv_cu_sync(const char *what)
{
    gv_status_t status = gv_cu_check(cudaGetLastError(), what);
    if (status == GV_OK)
        status = gv_cu_check(cudaDeviceSynchronize(), what);
    return status;
}

extern "C" gv_status_t gv_cuda_device_count(int *ndev_p)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    *ndev_p = 0;
    if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
        (err == cudaSuccess && n == 0)) {
        (void)cudaGetLastError(); /* clear the sticky-free error */
        gv_log(GV_LOG_INFO, "compress: no CUDA device (%s)",
               err == cudaSuccess ? "0 devices" : cudaGetErrorString(err));
        return GV_ERR_NODEV;
    }
    if (err != cudaSuccess)
        return gv_cu_check(err, "cudaGetDeviceCount");
    *ndev_p = n;
    return GV_OK;
}

extern "C" void gv_cuda_ws_destroy(struct gv_cuda_ws *ws)
{
    if (ws == NULL)
        return;
    cudaFree(ws->hist);
    cudaFree(ws->sel);
    cudaFree(ws->red);
    cudaFree(ws->tile_gt);
    cudaFree(ws->tile_eq);
    cudaFree(ws->pos);
    cudaFree(ws->vals);
    gv_free(ws);
}

extern "C" gv_status_t gv_cuda_ws_create(uint64_t max_n, uint32_t pos_cap, struct gv_cuda_ws **ws_p)
{
    struct gv_cuda_ws *ws = (struct gv_cuda_ws *)gv_calloc(1, sizeof(*ws));
    if (ws == NULL)
        return GV_ERR_NOMEM;
    ws->max_n = max_n;
    ws->pos_cap = pos_cap;
    size_t ntiles = (size_t)((max_n + GV_CU_TILE - 1) / GV_CU_TILE) + 1;
    int dev = 0, sms = 0;
    gv_status_t status = gv_cu_check(cudaGetDevice(&dev), "cudaGetDevice");
    if (status == GV_OK)
        status = gv_cu_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
                             "cudaDeviceGetAttribute");
    ws->grid = sms > 0 ? sms * 8 : 1024;
    if (status == GV_OK)
        status = gv_cu_check(cudaMalloc((void **)&ws->hist, 2048 * sizeof(uint32_t)), "cudaMalloc");
    if (status == GV_OK)
        status = gv_cu_check(cudaMalloc((void **)&ws->sel, sizeof(*ws->sel)), "cudaMalloc");
    if (status == GV_OK)
        status = gv_cu_check(cudaMalloc((void **)&ws->red, sizeof(*ws->red)), "cudaMalloc");
    if (status == GV_OK)
        status = gv_cu_check(cudaMalloc((void **)&ws->tile_gt, ntiles * 4), "cudaMalloc");
    if (status == GV_OK)
        status = gv_cu_check(cudaMalloc((void **)&ws->tile_eq, ntiles * 4), "cudaMalloc");
    if (status == GV_OK)
        status = gv_cu_check(cudaMalloc((void **)&ws->pos, (size_t)pos_cap * 4 + 4), "cudaMalloc");
    if (status == GV_OK)
        status = gv_cu_check(cudaMalloc((void **)&ws->vals, (size_t)pos_cap * 4 + 4), "cudaMalloc");
    if (status == GV_OK)
        status = gv_cu_check(cudaMemset(ws->hist, 0, 2048 * sizeof(uint32_t)), "cudaMemset");
    if (status != GV_OK) {
        gv_cuda_ws_destroy(ws);
        return status;
    }
    *ws_p = ws;
    return GV_OK;
}

extern "C" gv_status_t gv_cuda_malloc(size_t bytes, void **ptr_p)
{
    void *p = NULL;
    GV_CU(cudaMalloc(&p, bytes ? bytes : 4));
    gv_status_t status = gv_cu_check(cudaMemset(p, 0, bytes), "cudaMemset");
    if (status != GV_OK) {
        cudaFree(p);
        return status;
    }
    *ptr_p = p;
    return GV_OK;
}

extern "C" void gv_cuda_free(void *ptr)
{
    cudaFree(ptr);
}

extern "C" gv_status_t gv_cuda_d2h(void *dst_host, const void *src, size_t bytes)
{
    return bytes ? gv_cu_check(cudaMemcpy(dst_host, src, bytes, cudaMemcpyDeviceToHost),
                               "cudaMemcpy d2h")
                 : GV_OK;
}

extern "C" gv_status_t gv_cuda_h2d(void *dst, const void *src_host, size_t bytes)
{
    return bytes ? gv_cu_check(cudaMemcpy(dst, src_host, bytes, cudaMemcpyHostToDevice),
                               "cudaMemcpy h2d")
                 : GV_OK;
}

extern "C" gv_status_t gv_cuda_d2d(void *dst, const void *src, size_t bytes)
{
    if (bytes == 0)
        return GV_OK;
    /* a device-to-device cudaMemcpy may return before the copy is done */
    GV_CU(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
    return gv_cu_check(cudaDeviceSynchronize(), "cudaMemcpy d2d");
}

extern "C" gv_status_t gv_cuda_zero(void *ptr, size_t bytes)
{
    return bytes ? gv_cu_check(cudaMemset(ptr, 0, bytes), "cudaMemset") : GV_OK;
}

/* ---------------------------------------------------------------- sums */

__global__ void k_accumulate(float *r, const float *g, uint32_t n, struct gv_cu_red *red)
{
    double acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = g != NULL ? r[i] + g[i] : r[i];
        if (g != NULL)
            r[i] = v;
        acc += (double)v * v;
    }
    acc = gv_cu_block_sum(acc);
    if (threadIdx.x == 0)
        atomicAdd(&red->sum, acc);
}

static gv_status_t run_sumsq(struct gv_cuda_ws *ws, float *r, const float *g, uint32_t n,
                             double *sumsq_p)
{
    GV_CU(cudaMemset(ws->red, 0, sizeof(*ws->red)));
    if (n > 0)
        k_accumulate<<<gv_cu_blocks(n, ws->grid), GV_CU_BLOCK>>>(r, g, n, ws->red);
    gv_status_t status = gv_cu_sync("accumulate");
    if (status != GV_OK)
        return status;
    struct gv_cu_red red;
    GV_CU(cudaMemcpy(&red, ws->red, sizeof(red), cudaMemcpyDeviceToHost));
    *sumsq_p = red.sum;
    return GV_OK;
}

extern "C" gv_status_t gv_cuda_accumulate(struct gv_cuda_ws *ws, float *r, const float *g,
                                          uint32_t n, double *sumsq_p)
{
    return run_sumsq(ws, r, g, n, sumsq_p);
}

extern "C" gv_status_t gv_cuda_sumsq(struct gv_cuda_ws *ws, const float *x, uint32_t n,
                                     double *sumsq_p)
{
    return run_sumsq(ws, (float *)x, NULL, n, sumsq_p); /* g == NULL: x is only read */
}

/* ---------------------------------------------------------------- error feedback */

__global__ void k_ef_apply(float *r, const uint32_t *idx, const float *val, uint32_t count)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t p = idx != NULL ? idx[i] : i;
        float d = r[p] - val[i];
        r[p] = d == d ? d : 0.0f; /* a NaN or Inf that went out leaves no residual */
    }
}

extern "C" gv_status_t gv_cuda_ef_apply(struct gv_cuda_ws *ws, float *r, const uint32_t *idx,
                                        const float *val, uint32_t count)
{
    if (count > 0)
        k_ef_apply<<<gv_cu_blocks(count, ws->grid), GV_CU_BLOCK>>>(r, idx, val, count);
    return gv_cu_sync("ef apply");
}

/* ---------------------------------------------------------------- counts and statistics */

__global__ void k_count_ge(const float *x, uint32_t n, uint32_t key_min, struct gv_cu_red *red)
{
    unsigned long long c = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        c += gv_cu_key(x[i]) >= key_min;
    c = gv_cu_block_sum(c);
    if (threadIdx.x == 0)
        atomicAdd(&red->cnt, c);
}

extern "C" gv_status_t gv_cuda_count_ge(struct gv_cuda_ws *ws, const float *x, uint32_t n,
                                        uint32_t key_min, uint64_t *count_p)
{
    GV_CU(cudaMemset(ws->red, 0, sizeof(*ws->red)));
    if (n > 0)
        k_count_ge<<<gv_cu_blocks(n, ws->grid), GV_CU_BLOCK>>>(x, n, key_min, ws->red);
    gv_status_t status = gv_cu_sync("count");
    if (status != GV_OK)
        return status;
    struct gv_cu_red red;
    GV_CU(cudaMemcpy(&red, ws->red, sizeof(red), cudaMemcpyDeviceToHost));
    *count_p = red.cnt;
    return GV_OK;
}

__global__ void k_abs_stats(const float *x, uint32_t n, struct gv_cu_red *red)
{
    double s = 0;
    unsigned long long fin = 0;
    unsigned int mx = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t a = __float_as_uint(x[i]) & 0x7FFFFFFFu;
        if (a < 0x7F800000u) { /* finite */
            s += (double)__uint_as_float(a);
            fin++;
            mx = a > mx ? a : mx;
        }
    }
    s = gv_cu_block_sum(s);
    fin = gv_cu_block_sum(fin);
    for (int off = 16; off > 0; off >>= 1) {
        unsigned int o = __shfl_down_sync(0xFFFFFFFFu, mx, off);
        mx = o > mx ? o : mx;
    }
    if ((threadIdx.x & 31) == 0)
        atomicMax(&red->maxbits, mx);
    if (threadIdx.x == 0) {
        atomicAdd(&red->sum, s);
        atomicAdd(&red->cnt, fin);
    }
}

extern "C" gv_status_t gv_cuda_abs_stats(struct gv_cuda_ws *ws, const float *x, uint32_t n,
                                         double *sum_p, float *max_p, uint64_t *nfinite_p)
{
    GV_CU(cudaMemset(ws->red, 0, sizeof(*ws->red)));
    if (n > 0)
        k_abs_stats<<<gv_cu_blocks(n, ws->grid), GV_CU_BLOCK>>>(x, n, ws->red);
    gv_status_t status = gv_cu_sync("abs stats");
    if (status != GV_OK)
        return status;
    struct gv_cu_red red;
    GV_CU(cudaMemcpy(&red, ws->red, sizeof(red), cudaMemcpyDeviceToHost));
    uint32_t mb = red.maxbits;
    float mx;
    memcpy(&mx, &mb, sizeof(mx));
    *sum_p = red.sum;
    *max_p = mx;
    *nfinite_p = red.cnt;
    return GV_OK;
}

/* ---------------------------------------------------------------- gathers */

__global__ void k_gather(const float *x, const uint32_t *pos, uint32_t count, const uint32_t *map,
                         uint32_t *idx_out, float *val_out)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t p = pos[i];
        if (idx_out != NULL)
            idx_out[i] = map != NULL ? map[p] : p;
        val_out[i] = x[p];
    }
}

extern "C" gv_status_t gv_cuda_gather(struct gv_cuda_ws *ws, const float *x,
                                      const uint32_t *pos_host, uint32_t count, const uint32_t *map,
                                      uint32_t *idx_out, float *val_out)
{
    if (count > ws->pos_cap)
        return GV_ERR_INVAL;
    if (count == 0)
        return GV_OK;
    GV_CU(cudaMemcpy(ws->pos, pos_host, (size_t)count * 4, cudaMemcpyHostToDevice));
    k_gather<<<gv_cu_blocks(count, ws->grid), GV_CU_BLOCK>>>(x, ws->pos, count, map, idx_out,
                                                             val_out);
    return gv_cu_sync("gather");
}

extern "C" gv_status_t gv_cuda_sample(struct gv_cuda_ws *ws, const float *x,
                                      const uint32_t *pos_host, uint32_t count, float *vals_host)
{
    if (count > ws->pos_cap)
        return GV_ERR_INVAL;
    if (count == 0)
        return GV_OK;
    GV_CU(cudaMemcpy(ws->pos, pos_host, (size_t)count * 4, cudaMemcpyHostToDevice));
    k_gather<<<gv_cu_blocks(count, ws->grid), GV_CU_BLOCK>>>(x, ws->pos, count, NULL, NULL,
                                                             ws->vals);
    gv_status_t status = gv_cu_sync("sample");
    if (status != GV_OK)
        return status;
    GV_CU(cudaMemcpy(vals_host, ws->vals, (size_t)count * 4, cudaMemcpyDeviceToHost));
    return GV_OK;
}

/* ---------------------------------------------------------------- fp16 */

/* Bit-for-bit the C conversion of util.c (round to nearest even, NaN payload kept), after the
 * saturation of gv_f16_round_sat, and back to float. */
__device__ float d_f16_round_sat(float f)
{
    uint32_t x = __float_as_uint(f);
    uint32_t ax = x & 0x7FFFFFFFu;
    if (ax < 0x7F800000u && ax > 0x477FE000u) /* finite beyond 65504: clamp */
        ax = 0x477FE000u;
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t h;
    if (ax > 0x7F800000u) {
        h = sign | 0x7E00u | ((ax >> 13) & 0x3FFu);
    } else if (ax >= 0x477FF000u) {
        h = sign | 0x7C00u;
    } else if (ax >= 0x38800000u) {
        uint32_t odd = (ax >> 13) & 1u;
        h = sign | ((ax + 0xC8000FFFu + odd) >> 13);
    } else if (ax < 0x33000000u) {
        h = sign;
    } else {
        uint32_t e = ax >> 23, m = (ax & 0x7FFFFFu) | 0x800000u, shift = 126u - e;
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        h = sign | q;
    }
    uint32_t s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1F)
        return __uint_as_float(s | 0x7F800000u | (m << 13));
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-8f; /* 2^-24, exact */
        return s ? -v : v;
    }
    return __uint_as_float(s | ((e + 112u) << 23) | (m << 13));
}

__global__ void k_round_f16(float *val, uint32_t count)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        val[i] = d_f16_round_sat(val[i]);
}

extern "C" gv_status_t gv_cuda_round_f16(struct gv_cuda_ws *ws, float *val, uint32_t count)
{
    if (count > 0)
        k_round_f16<<<gv_cu_blocks(count, ws->grid), GV_CU_BLOCK>>>(val, count);
    return gv_cu_sync("round f16");
}

/* ---------------------------------------------------------------- scatter-add */

__global__ void k_check_idx(const uint32_t *idx, uint32_t count, uint32_t n, struct gv_cu_red *red)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        if (idx[i] >= n)
            atomicMax(&red->err, 1u);
}

__global__ void k_scatter_add(float *dense, const uint32_t *idx, const float *val, uint32_t count)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        atomicAdd(&dense[idx[i]], val[i]);
}

extern "C" gv_status_t gv_cuda_scatter_add(struct gv_cuda_ws *ws, float *dense, uint32_t n,
                                           const uint32_t *idx, const float *val, uint32_t count)
{
    GV_CU(cudaMemset(ws->red, 0, sizeof(*ws->red)));
    int blocks = gv_cu_blocks(count, ws->grid);
    k_check_idx<<<blocks, GV_CU_BLOCK>>>(idx, count, n, ws->red);
    gv_status_t status = gv_cu_sync("scatter-add check");
    if (status != GV_OK)
        return status;
    struct gv_cu_red red;
    GV_CU(cudaMemcpy(&red, ws->red, sizeof(red), cudaMemcpyDeviceToHost));
    if (red.err != 0) {
        gv_log(GV_LOG_ERROR, "compress: scatter-add has an index out of range (n %u)", n);
        return GV_ERR_INVAL;
    }
    k_scatter_add<<<blocks, GV_CU_BLOCK>>>(dense, idx, val, count);
    return gv_cu_sync("scatter-add");
}
