/* backend_cuda.cu: the GPU backend: cuBLAS for matrix products and one small kernel per
 * element-wise op, all on the default stream. Same contract as backend_cpu.c (the oracle);
 * reductions and scatters are written as gathers with a fixed order, so results are
 * deterministic run to run (no atomics). Built only when the CUDA toolkit is present, into the
 * plugin libgravac_nn_cuda.so (nn_cuda_plugin.h), never into gv_nn itself. */
#include "nn_cuda_plugin.h"

#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

struct cuda_impl {
    cublasHandle_t blas;
};

#define CUDA_THREADS 256

static int cuda_blocks(long long n)
{
    long long b = (n + CUDA_THREADS - 1) / CUDA_THREADS;
    return (int)(b < 1 ? 1 : (b > 8192 ? 8192 : b));
}

#define CUDA_LOOP(i, n)                                                                            \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (long long)(n);       \
         i += (long long)blockDim.x * gridDim.x)

static gv_status_t cuda_check(cudaError_t err, const char *what)
{
    if (err == cudaSuccess)
        return GV_OK;
    gv_log(GV_LOG_ERROR, "nn cuda: %s: %s", what, cudaGetErrorString(err));
    return GV_ERR_CUDA;
}

static gv_status_t cuda_launched(const char *what)
{
    return cuda_check(cudaGetLastError(), what);
}

/* ---------------------------------------------------------------- memory */

static gv_status_t cuda_alloc(struct gv_nn_backend *be, size_t bytes, void **p)
{
    (void)be;
    void *q = NULL;
    GV_NN_TRY(cuda_check(cudaMalloc(&q, bytes ? bytes : 1), "cudaMalloc"));
    gv_status_t status = cuda_check(cudaMemset(q, 0, bytes), "cudaMemset");
    if (status != GV_OK) {
        cudaFree(q);
        return status;
    }
    *p = q;
    return GV_OK;
}

static void cuda_free(struct gv_nn_backend *be, void *p)
{
    (void)be;
    if (p != NULL)
        cudaFree(p);
}

static gv_status_t cuda_upload(struct gv_nn_backend *be, void *dst, const void *host, size_t bytes)
{
    (void)be;
    return cuda_check(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice), "upload");
}

static gv_status_t cuda_download(struct gv_nn_backend *be, void *host, const void *src,
                                 size_t bytes)
{
    (void)be;
    return cuda_check(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost), "download");
}

static gv_status_t cuda_zero(struct gv_nn_backend *be, void *p, size_t bytes)
{
    (void)be;
    return cuda_check(cudaMemsetAsync(p, 0, bytes, 0), "memset");
}

/* ---------------------------------------------------------------- gemm */

static gv_status_t cuda_gemm(struct gv_nn_backend *be, int ta, int tb, int m, int n, int k,
                             float alpha, const float *a, int lda, const float *b, int ldb,
                             float beta, float *c, int ldc)
{
    cublasHandle_t h = ((struct cuda_impl *)be->impl)->blas;
    /* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands. */
    cublasStatus_t st =
        cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                    &alpha, b, ldb, a, lda, &beta, c, ldc);
    if (st != CUBLAS_STATUS_SUCCESS) {
        gv_log(GV_LOG_ERROR, "nn cuda: cublasSgemm(%d, %d, %d) failed: status %d", m, n, k,
               (int)st);
        return GV_ERR_CUDA;
    }
    return GV_OK;
}

/* ---------------------------------------------------------------- element-wise */

__global__ void k_bias_add(float *y, const float *b, long long rows, int cols)
{
    CUDA_LOOP(i, rows * cols) y[i] += b[i % cols];
}

/* One block per column; a fixed-shape tree so the sum is the same every run. */
__global__ void k_bias_grad(float *db, const float *dy, int rows, int cols)
{
    __shared__ float part[CUDA_THREADS];
    int c = blockIdx.x;
    float s = 0.0f;
    for (int r = threadIdx.x; r < rows; r += CUDA_THREADS)
        s += dy[(long long)r * cols + c];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = CUDA_THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w)
            part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        db[c] += part[0];
}

__global__ void k_relu_fwd(const float *x, float *y, long long n)
{
    CUDA_LOOP(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void k_relu_bwd(const float *y, const float *dy, float *dx, long long n)
{
    CUDA_LOOP(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ void k_add(float *y, const float *x, long long n)
{
    CUDA_LOOP(i, n) y[i] += x[i];
}

static gv_status_t cuda_bias_add(struct gv_nn_backend *be, float *y, const float *b, int rows,
                                 int cols)
{
    (void)be;
    long long n = (long long)rows * cols;
    k_bias_add<<<cuda_blocks(n), CUDA_THREADS>>>(y, b, rows, cols);
    return cuda_launched("bias_add");
}

static gv_status_t cuda_bias_grad(struct gv_nn_backend *be, float *db, const float *dy, int rows,
                                  int cols)
{
    (void)be;
    k_bias_grad<<<cols, CUDA_THREADS>>>(db, dy, rows, cols);
    return cuda_launched("bias_grad");
}

static gv_status_t cuda_relu_fwd(struct gv_nn_backend *be, const float *x, float *y, size_t n)
{
    (void)be;
    k_relu_fwd<<<cuda_blocks((long long)n), CUDA_THREADS>>>(x, y, (long long)n);
    return cuda_launched("relu_fwd");
}

static gv_status_t cuda_relu_bwd(struct gv_nn_backend *be, const float *y, const float *dy,
                                 float *dx, size_t n)
{
    (void)be;
    k_relu_bwd<<<cuda_blocks((long long)n), CUDA_THREADS>>>(y, dy, dx, (long long)n);
    return cuda_launched("relu_bwd");
}

static gv_status_t cuda_add(struct gv_nn_backend *be, float *y, const float *x, size_t n)
{
    (void)be;
    k_add<<<cuda_blocks((long long)n), CUDA_THREADS>>>(y, x, (long long)n);
    return cuda_launched("add");
}

/* ---------------------------------------------------------------- softmax cross-entropy */

__global__ void k_xent(const float *logits, const int32_t *labels, int rows, int cols, float scale,
                       float *dlogits, float *loss, int32_t *correct)
{
    CUDA_LOOP(r, rows)
    {
        const float *z = logits + r * cols;
        int arg = 0;
        for (int c = 1; c < cols; c++)
            if (z[c] > z[arg])
                arg = c;
        float mx = z[arg];
        double sum = 0.0;
        for (int c = 0; c < cols; c++)
            sum += exp((double)(z[c] - mx));
        int lab = labels[r];
        loss[r] = (float)(log(sum) - (double)(z[lab] - mx));
        correct[r] = arg == lab;
        if (dlogits != NULL)
            for (int c = 0; c < cols; c++) {
                double p = exp((double)(z[c] - mx)) / sum;
                dlogits[r * cols + c] = scale * (float)(p - (c == lab ? 1.0 : 0.0));
            }
    }
}

static gv_status_t cuda_xent(struct gv_nn_backend *be, const float *logits, const int32_t *labels,
                             int rows, int cols, float scale, float *dlogits, float *loss,
                             int32_t *correct)
{
    (void)be;
    k_xent<<<cuda_blocks(rows), CUDA_THREADS>>>(logits, labels, rows, cols, scale, dlogits, loss,
                                                correct);
    return cuda_launched("xent");
}

/* ---------------------------------------------------------------- convolution, pooling */

__global__ void k_im2col(const float *x, gv_nn_conv_shape s, int n, float *col)
{
    long long kc = (long long)s.k * s.k * s.c, total = (long long)n * s.oh * s.ow * kc;
    CUDA_LOOP(i, total)
    {
        long long row = i / kc;
        int e = (int)(i % kc), ch = e % s.c, kx = (e / s.c) % s.k, ky = e / (s.c * s.k);
        int ox = (int)(row % s.ow), oy = (int)((row / s.ow) % s.oh), b = (int)(row / (s.ow * s.oh));
        int iy = oy * s.stride - s.pad + ky, ix = ox * s.stride - s.pad + kx;
        col[i] = (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w)
                     ? 0.0f
                     : x[(((long long)b * s.h + iy) * s.w + ix) * s.c + ch];
    }
}

/* Gather form of col2im: each input element sums the column entries that read it. */
__global__ void k_col2im(const float *col, gv_nn_conv_shape s, int n, float *dx)
{
    long long kc = (long long)s.k * s.k * s.c, total = (long long)n * s.h * s.w * s.c;
    CUDA_LOOP(i, total)
    {
        int ch = (int)(i % s.c), ix = (int)((i / s.c) % s.w), iy = (int)((i / s.c / s.w) % s.h);
        int b = (int)(i / ((long long)s.c * s.w * s.h));
        float acc = 0.0f;
        for (int ky = 0; ky < s.k; ky++) {
            int ty = iy + s.pad - ky;
            if (ty < 0 || ty % s.stride != 0 || ty / s.stride >= s.oh)
                continue;
            for (int kx = 0; kx < s.k; kx++) {
                int tx = ix + s.pad - kx;
                if (tx < 0 || tx % s.stride != 0 || tx / s.stride >= s.ow)
                    continue;
                long long row = ((long long)b * s.oh + ty / s.stride) * s.ow + tx / s.stride;
                acc += col[row * kc + ((long long)ky * s.k + kx) * s.c + ch];
            }
        }
        dx[i] = acc;
    }
}

__global__ void k_pool_fwd(const float *x, int n, int h, int w, int c, float *y, int32_t *arg)
{
    int oh = h / 2, ow = w / 2;
    CUDA_LOOP(j, (long long)n * oh * ow * c)
    {
        int ch = (int)(j % c), ox = (int)((j / c) % ow), oy = (int)((j / c / ow) % oh);
        int b = (int)(j / ((long long)c * ow * oh));
        long long best = (((long long)b * h + 2 * oy) * w + 2 * ox) * c + ch;
        for (int dy = 0; dy < 2; dy++)
            for (int dx = 0; dx < 2; dx++) {
                long long i = (((long long)b * h + 2 * oy + dy) * w + 2 * ox + dx) * c + ch;
                if (x[i] > x[best])
                    best = i;
            }
        y[j] = x[best];
        arg[j] = (int32_t)best;
    }
}

__global__ void k_pool_bwd(const float *dy, const int32_t *arg, int n, int h, int w, int c,
                           float *dx)
{
    int oh = h / 2, ow = w / 2;
    CUDA_LOOP(i, (long long)n * h * w * c)
    {
        int ch = (int)(i % c), ix = (int)((i / c) % w), iy = (int)((i / c / w) % h);
        int b = (int)(i / ((long long)c * w * h));
        float v = 0.0f;
        if (iy / 2 < oh && ix / 2 < ow) {
            long long j = (((long long)b * oh + iy / 2) * ow + ix / 2) * c + ch;
            if (arg[j] == (int32_t)i)
                v = dy[j];
        }
        dx[i] = v;
    }
}

static gv_status_t cuda_im2col(struct gv_nn_backend *be, const float *x,
                               const struct gv_nn_conv_shape *s, int n, float *col)
{
    (void)be;
    long long total = (long long)n * s->oh * s->ow * s->k * s->k * s->c;
    k_im2col<<<cuda_blocks(total), CUDA_THREADS>>>(x, *s, n, col);
    return cuda_launched("im2col");
}

static gv_status_t cuda_col2im(struct gv_nn_backend *be, const float *col,
                               const struct gv_nn_conv_shape *s, int n, float *dx)
{
    (void)be;
    long long total = (long long)n * s->h * s->w * s->c;
    k_col2im<<<cuda_blocks(total), CUDA_THREADS>>>(col, *s, n, dx);
    return cuda_launched("col2im");
}

static gv_status_t cuda_pool_fwd(struct gv_nn_backend *be, const float *x, int n, int h, int w,
                                 int c, float *y, int32_t *arg)
{
    (void)be;
    long long total = (long long)n * (h / 2) * (w / 2) * c;
    k_pool_fwd<<<cuda_blocks(total), CUDA_THREADS>>>(x, n, h, w, c, y, arg);
    return cuda_launched("pool_fwd");
}

static gv_status_t cuda_pool_bwd(struct gv_nn_backend *be, const float *dy, const int32_t *arg,
                                 int n, int h, int w, int c, float *dx)
{
    (void)be;
    long long total = (long long)n * h * w * c;
    k_pool_bwd<<<cuda_blocks(total), CUDA_THREADS>>>(dy, arg, n, h, w, c, dx);
    return cuda_launched("pool_bwd");
}

/* ---------------------------------------------------------------- embedding, LSTM */

__global__ void k_embed_fwd(const float *table, const int32_t *ids, int n, int dim, float *out)
{
    CUDA_LOOP(i, (long long)n * dim) out[i] = table[(long long)ids[i / dim] * dim + i % dim];
}

/* One thread per table element, scanning the ids in order: a gather, so no atomics and the
 * same summation order as the CPU backend. */
__global__ void k_embed_bwd(float *dtable, const int32_t *ids, const float *dout, int n, int dim,
                            int vocab)
{
    CUDA_LOOP(e, (long long)vocab * dim)
    {
        int v = (int)(e / dim), j = (int)(e % dim);
        float acc = dtable[e];
        for (int i = 0; i < n; i++)
            if (ids[i] == v)
                acc += dout[(long long)i * dim + j];
        dtable[e] = acc;
    }
}

__device__ static float d_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

__global__ void k_lstm_fwd(float *gates, const float *c_prev, float *c, float *h, int n, int hid)
{
    CUDA_LOOP(e, (long long)n * hid)
    {
        long long r = e / hid;
        int j = (int)(e % hid);
        float *g = gates + r * 4 * hid;
        float ig = d_sigmoid(g[j]), fg = d_sigmoid(g[hid + j]);
        float gg = tanhf(g[2 * hid + j]), og = d_sigmoid(g[3 * hid + j]);
        g[j] = ig;
        g[hid + j] = fg;
        g[2 * hid + j] = gg;
        g[3 * hid + j] = og;
        float cv = fg * c_prev[e] + ig * gg;
        c[e] = cv;
        h[e] = og * tanhf(cv);
    }
}

__global__ void k_lstm_bwd(const float *gates, const float *c_prev, const float *c, const float *dh,
                           float *dc, float *dgates, int n, int hid)
{
    CUDA_LOOP(e, (long long)n * hid)
    {
        long long r = e / hid;
        int j = (int)(e % hid);
        const float *g = gates + r * 4 * hid;
        float *dg = dgates + r * 4 * hid;
        float ig = g[j], fg = g[hid + j], gg = g[2 * hid + j], og = g[3 * hid + j];
        float tc = tanhf(c[e]);
        float dct = dc[e] + dh[e] * og * (1.0f - tc * tc);
        dg[j] = dct * gg * ig * (1.0f - ig);
        dg[hid + j] = dct * c_prev[e] * fg * (1.0f - fg);
        dg[2 * hid + j] = dct * ig * (1.0f - gg * gg);
        dg[3 * hid + j] = dh[e] * tc * og * (1.0f - og);
        dc[e] = dct * fg;
    }
}

static gv_status_t cuda_embed_fwd(struct gv_nn_backend *be, const float *table, const int32_t *ids,
                                  int n, int dim, float *out)
{
    (void)be;
    k_embed_fwd<<<cuda_blocks((long long)n * dim), CUDA_THREADS>>>(table, ids, n, dim, out);
    return cuda_launched("embed_fwd");
}

static gv_status_t cuda_embed_bwd(struct gv_nn_backend *be, float *dtable, const int32_t *ids,
                                  const float *dout, int n, int dim, int vocab)
{
    (void)be;
    k_embed_bwd<<<cuda_blocks((long long)vocab * dim), CUDA_THREADS>>>(dtable, ids, dout, n, dim,
                                                                       vocab);
    return cuda_launched("embed_bwd");
}

static gv_status_t cuda_lstm_fwd(struct gv_nn_backend *be, float *gates, const float *c_prev,
                                 float *c, float *h, int n, int hid)
{
    (void)be;
    k_lstm_fwd<<<cuda_blocks((long long)n * hid), CUDA_THREADS>>>(gates, c_prev, c, h, n, hid);
    return cuda_launched("lstm_fwd");
}

static gv_status_t cuda_lstm_bwd(struct gv_nn_backend *be, const float *gates, const float *c_prev,
                                 const float *c, const float *dh, float *dc, float *dgates, int n,
                                 int hid)
{
    (void)be;
    k_lstm_bwd<<<cuda_blocks((long long)n * hid), CUDA_THREADS>>>(gates, c_prev, c, dh, dc, dgates,
                                                                  n, hid);
    return cuda_launched("lstm_bwd");
}

/* ---------------------------------------------------------------- optimizer */

/* gv_optim_apply_host with explicit round-to-nearest intrinsics: never contracted into FMA, so
 * the bits match the CPU step. */
__global__ void k_optim(float lr, float mu, float wd, int nesterov, float *p, float *v,
                        const float *g, long long n)
{
    CUDA_LOOP(i, n)
    {
        float pi = p[i];
        float gi = __fadd_rn(g[i], __fmul_rn(wd, pi));
        float vi = __fadd_rn(__fmul_rn(mu, v[i]), gi);
        v[i] = vi;
        float d = nesterov ? __fadd_rn(gi, __fmul_rn(mu, vi)) : vi;
        p[i] = __fsub_rn(pi, __fmul_rn(lr, d));
    }
}

static gv_status_t cuda_optim(struct gv_nn_backend *be, const struct gv_optim_cfg *cfg, float lr,
                              float *p, float *v, const float *g, size_t n)
{
    (void)be;
    k_optim<<<cuda_blocks((long long)n), CUDA_THREADS>>>(lr, cfg->momentum, cfg->weight_decay,
                                                         cfg->nesterov, p, v, g, (long long)n);
    return cuda_launched("optim");
}

/* gv_optim_velocity_host, rounded as the CPU rounds it (no FMA). */
__global__ void k_velocity(float mu, float wd, const float *p, float *u, float *g, long long n)
{
    CUDA_LOOP(i, n)
    {
        float gi = __fadd_rn(g[i], __fmul_rn(wd, p[i]));
        float ui = __fadd_rn(__fmul_rn(mu, u[i]), gi);
        u[i] = ui;
        g[i] = ui;
    }
}

static gv_status_t cuda_velocity(struct gv_nn_backend *be, const struct gv_optim_cfg *cfg,
                                 const float *p, float *u, float *g, size_t n)
{
    (void)be;
    k_velocity<<<cuda_blocks((long long)n), CUDA_THREADS>>>(cfg->momentum, cfg->weight_decay, p, u,
                                                            g, (long long)n);
    return cuda_launched("velocity");
}

static const struct gv_nn_ops cuda_ops = {
    "cuda",         GV_MEM_DEVICE,  cuda_alloc,    cuda_free,      cuda_upload,   cuda_download,
    cuda_zero,      cuda_gemm,      cuda_bias_add, cuda_bias_grad, cuda_relu_fwd, cuda_relu_bwd,
    cuda_add,       cuda_xent,      cuda_im2col,   cuda_col2im,    cuda_pool_fwd, cuda_pool_bwd,
    cuda_embed_fwd, cuda_embed_bwd, cuda_lstm_fwd, cuda_lstm_bwd,  cuda_optim,    cuda_velocity,
};

extern "C" gv_status_t gv_nn_cuda_plugin_create(struct gv_nn_backend **be_p)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        gv_log(GV_LOG_WARN, "nn cuda: no usable GPU: %s",
               err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        return GV_ERR_NODEV;
    }
    struct gv_nn_backend *be = (struct gv_nn_backend *)gv_calloc(1, sizeof(*be));
    struct cuda_impl *impl = (struct cuda_impl *)gv_calloc(1, sizeof(*impl));
    if (be == NULL || impl == NULL) {
        gv_free(be);
        gv_free(impl);
        return GV_ERR_NOMEM;
    }
    cublasStatus_t st = cublasCreate(&impl->blas);
    if (st != CUBLAS_STATUS_SUCCESS) {
        gv_log(GV_LOG_ERROR, "nn cuda: cublasCreate failed: status %d", (int)st);
        gv_free(be);
        gv_free(impl);
        return GV_ERR_CUDA;
    }
    cudaDeviceProp prop;
    int dev = 0;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
        gv_log(GV_LOG_INFO, "nn cuda: device %d %s, compute capability %d.%d, %.1f GiB", dev,
               prop.name, prop.major, prop.minor, (double)prop.totalGlobalMem / (1u << 30));
    be->ops = &cuda_ops;
    be->dev = GV_NN_CUDA;
    be->threads = 0;
    be->impl = impl;
    *be_p = be;
    return GV_OK;
}

extern "C" void gv_nn_cuda_plugin_destroy(struct gv_nn_backend *be)
{
    if (be == NULL)
        return;
    struct cuda_impl *impl = (struct cuda_impl *)be->impl;
    if (impl != NULL) {
        cublasDestroy(impl->blas);
        gv_free(impl);
    }
    gv_free(be);
}

/* ---------------------------------------------------------------- memory for other modules */

extern "C" gv_status_t gv_nn_cuda_pinned_alloc(size_t bytes, void **ptr_p)
{
    void *p = NULL;
    GV_NN_TRY(cuda_check(cudaMallocHost(&p, bytes ? bytes : 1), "cudaMallocHost"));
    memset(p, 0, bytes);
    *ptr_p = p;
    return GV_OK;
}

extern "C" void gv_nn_cuda_pinned_free(void *ptr)
{
    if (ptr != NULL)
        cudaFreeHost(ptr);
}

extern "C" gv_status_t gv_nn_cuda_device_alloc(size_t bytes, void **ptr_p)
{
    return cuda_alloc(NULL, bytes, ptr_p);
}

extern "C" void gv_nn_cuda_device_free(void *ptr)
{
    cuda_free(NULL, ptr);
}
