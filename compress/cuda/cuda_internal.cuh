/* cuda_internal.cuh: what the .cu files of compress/ share: the device workspace, the error
 * check that maps CUDA errors to GV_ERR_CUDA with cudaGetErrorString logged, the magnitude key
 * (the same as compress_internal.h's gv_key) and block-wide helpers. */
#ifndef GV_COMPRESS_CUDA_INTERNAL_CUH
#define GV_COMPRESS_CUDA_INTERNAL_CUH

#include "gv_compress_cuda.h"

#include <cuda_runtime.h>
#include <stdint.h>

#define GV_CU_BLOCK 256
#define GV_CU_TILE 4096 /* entries per block in the ordered compaction (16 rounds of 256) */

/* Selection parameters, written on the device by the radix passes (top-k) or from the host
 * (thresholds) and read by the compaction kernels: keys >= gt_min are taken, and of the keys
 * equal to eq_key the first need_eq in index order. */
struct gv_cu_sel {
    uint32_t prefix; /* digits of the k-th key found so far */
    uint32_t rank;   /* rank still to find inside the current bucket (1-based) */
    uint32_t gt_min;
    uint32_t eq_key;
    uint32_t need_eq;
    uint32_t total; /* entries the compaction writes */
};

/* Reductions of the small kernels. */
struct gv_cu_red {
    double sum;
    unsigned long long cnt;
    unsigned int maxbits; /* max |x| as bits: non-negative floats order like their bits */
    unsigned int err;
};

struct gv_cuda_ws {
    uint64_t max_n;
    uint32_t pos_cap;
    int grid;              /* blocks for grid-stride kernels */
    uint32_t *hist;        /* [2048] */
    struct gv_cu_sel *sel; /* [1] */
    struct gv_cu_red *red; /* [1] */
    uint32_t *tile_gt;     /* [ntiles max] */
    uint32_t *tile_eq;     /* [ntiles max] */
    uint32_t *pos;         /* [pos_cap] positions uploaded from the host */
    float *vals;           /* [pos_cap] sampled values */
};

gv_status_t gv_cu_check(cudaError_t err, const char *what);
#define GV_CU(call)                                                                                \
    do {                                                                                           \
        gv_status_t st_ = gv_cu_check((call), #call);                                              \
        if (st_ != GV_OK)                                                                          \
            return st_;                                                                            \
    } while (0)
/* After launches: the launch error, then the execution error. */
gv_status_t gv_cu_sync(const char *what);

static inline int gv_cu_blocks(uint64_t n, int cap)
{
    uint64_t b = (n + GV_CU_BLOCK - 1) / GV_CU_BLOCK;
    if (b < 1)
        b = 1;
    return b > (uint64_t)cap ? cap : (int)b;
}

__device__ __forceinline__ uint32_t gv_cu_key(float f)
{
    uint32_t a = __float_as_uint(f) & 0x7FFFFFFFu;
    return a < 0x7F800001u ? a : 0x7F800001u;
}

/* Exclusive block scan (all threads of the block call it); *total_p gets the block sum. */
template <typename T> __device__ __forceinline__ T gv_cu_block_excl_scan(T v, T *total_p)
{
    __shared__ T sh[33];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    T incl = v;
    for (int off = 1; off < 32; off <<= 1) {
        T t = __shfl_up_sync(0xFFFFFFFFu, incl, off);
        if (lane >= off)
            incl += t;
    }
    if (lane == 31)
        sh[w] = incl;
    __syncthreads();
    if (w == 0) {
        T s = lane < nw ? sh[lane] : T(0);
        T inc2 = s;
        for (int off = 1; off < 32; off <<= 1) {
            T t = __shfl_up_sync(0xFFFFFFFFu, inc2, off);
            if (lane >= off)
                inc2 += t;
        }
        if (lane < nw)
            sh[lane] = inc2 - s;
        if (lane == 31)
            sh[32] = inc2;
    }
    __syncthreads();
    T res = sh[w] + incl - v;
    *total_p = sh[32];
    __syncthreads(); /* sh is reused by the next call */
    return res;
}

/* Block sum to thread 0 (others get garbage). */
template <typename T> __device__ __forceinline__ T gv_cu_block_sum(T v)
{
    __shared__ T sh[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_down_sync(0xFFFFFFFFu, v, off);
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    T s = T(0);
    if (w == 0) {
        s = lane < nw ? sh[lane] : T(0);
        for (int off = 16; off > 0; off >>= 1)
            s += __shfl_down_sync(0xFFFFFFFFu, s, off);
    }
    __syncthreads();
    return s;
}

#endif /* GV_COMPRESS_CUDA_INTERNAL_CUH */
