/* backend_cpu.c: the CPU backend: cblas_sgemm from OpenBLAS for matrix products and plain C
 * loops with a fixed order for everything else. It is the oracle the CUDA backend is tested
 * against, so it favours clarity over speed outside gemm. */
#include "nn_internal.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

static gv_status_t cpu_alloc(struct gv_nn_backend *be, size_t bytes, void **p)
{
    (void)be;
    void *q = gv_aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (q == NULL) {
        gv_log(GV_LOG_ERROR, "nn cpu: cannot allocate %zu bytes", bytes);
        return GV_ERR_NOMEM;
    }
    memset(q, 0, bytes);
    *p = q;
    return GV_OK;
}

static void cpu_free(struct gv_nn_backend *be, void *p)
{
    (void)be;
    gv_free(p);
}

static gv_status_t cpu_copy(struct gv_nn_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes > 0)
        memmove(dst, src, bytes);
    return GV_OK;
}

static gv_status_t cpu_zero(struct gv_nn_backend *be, void *p, size_t bytes)
{
    (void)be;
    if (bytes > 0)
        memset(p, 0, bytes);
    return GV_OK;
}

static gv_status_t cpu_gemm(struct gv_nn_backend *be, int ta, int tb, int m, int n, int k,
                            float alpha, const float *a, int lda, const float *b, int ldb,
                            float beta, float *c, int ldc)
{
    (void)be;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                k, alpha, a, lda, b, ldb, beta, c, ldc);
    return GV_OK;
}

static gv_status_t cpu_bias_add(struct gv_nn_backend *be, float *y, const float *b, int rows,
                                int cols)
{
    (void)be;
    for (int r = 0; r < rows; r++) {
        float *row = y + (size_t)r * (size_t)cols;
        for (int c = 0; c < cols; c++)
            row[c] += b[c];
    }
    return GV_OK;
}

static gv_status_t cpu_bias_grad(struct gv_nn_backend *be, float *db, const float *dy, int rows,
                                 int cols)
{
    (void)be;
    for (int r = 0; r < rows; r++) {
        const float *row = dy + (size_t)r * (size_t)cols;
        for (int c = 0; c < cols; c++)
            db[c] += row[c];
    }
    return GV_OK;
}

static gv_status_t cpu_relu_fwd(struct gv_nn_backend *be, const float *x, float *y, size_t n)
{
    (void)be;
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    return GV_OK;
}

static gv_status_t cpu_relu_bwd(struct gv_nn_backend *be, const float *y, const float *dy,
                                float *dx, size_t n)
{
    (void)be;
    for (size_t i = 0; i < n; i++)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    return GV_OK;
}

static gv_status_t cpu_add(struct gv_nn_backend *be, float *y, const float *x, size_t n)
{
    (void)be;
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
    return GV_OK;
}

static gv_status_t cpu_xent(struct gv_nn_backend *be, const float *logits, const int32_t *labels,
                            int rows, int cols, float scale, float *dlogits, float *loss,
                            int32_t *correct)
{
    (void)be;
    for (int r = 0; r < rows; r++) {
        const float *z = logits + (size_t)r * (size_t)cols;
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
        if (dlogits != NULL) {
            float *d = dlogits + (size_t)r * (size_t)cols;
            for (int c = 0; c < cols; c++) {
                double p = exp((double)(z[c] - mx)) / sum;
                d[c] = scale * (float)(p - (c == lab ? 1.0 : 0.0));
            }
        }
    }
    return GV_OK;
}

static gv_status_t cpu_im2col(struct gv_nn_backend *be, const float *x,
                              const struct gv_nn_conv_shape *s, int n, float *col)
{
    (void)be;
    size_t kc = (size_t)s->k * (size_t)s->k * (size_t)s->c;
    for (int b = 0; b < n; b++)
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++) {
                float *row =
                    col +
                    (((size_t)b * (size_t)s->oh + (size_t)oy) * (size_t)s->ow + (size_t)ox) * kc;
                for (int ky = 0; ky < s->k; ky++)
                    for (int kx = 0; kx < s->k; kx++) {
                        int iy = oy * s->stride - s->pad + ky, ix = ox * s->stride - s->pad + kx;
                        float *dst = row + ((size_t)ky * (size_t)s->k + (size_t)kx) * (size_t)s->c;
                        if (iy < 0 || iy >= s->h || ix < 0 || ix >= s->w) {
                            memset(dst, 0, (size_t)s->c * sizeof(float));
                            continue;
                        }
                        const float *src =
                            x +
                            (((size_t)b * (size_t)s->h + (size_t)iy) * (size_t)s->w + (size_t)ix) *
                                (size_t)s->c;
                        memcpy(dst, src, (size_t)s->c * sizeof(float));
                    }
            }
    return GV_OK;
}

static gv_status_t cpu_col2im(struct gv_nn_backend *be, const float *col,
                              const struct gv_nn_conv_shape *s, int n, float *dx)
{
    (void)be;
    size_t kc = (size_t)s->k * (size_t)s->k * (size_t)s->c;
    memset(dx, 0, (size_t)n * (size_t)s->h * (size_t)s->w * (size_t)s->c * sizeof(float));
    for (int b = 0; b < n; b++)
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++) {
                const float *row =
                    col +
                    (((size_t)b * (size_t)s->oh + (size_t)oy) * (size_t)s->ow + (size_t)ox) * kc;
                for (int ky = 0; ky < s->k; ky++)
                    for (int kx = 0; kx < s->k; kx++) {
                        int iy = oy * s->stride - s->pad + ky, ix = ox * s->stride - s->pad + kx;
                        if (iy < 0 || iy >= s->h || ix < 0 || ix >= s->w)
                            continue;
                        const float *src =
                            row + ((size_t)ky * (size_t)s->k + (size_t)kx) * (size_t)s->c;
                        float *dst = dx + (((size_t)b * (size_t)s->h + (size_t)iy) * (size_t)s->w +
                                           (size_t)ix) *
                                              (size_t)s->c;
                        for (int c = 0; c < s->c; c++)
                            dst[c] += src[c];
                    }
            }
    return GV_OK;
}

static gv_status_t cpu_pool_fwd(struct gv_nn_backend *be, const float *x, int n, int h, int w,
                                int c, float *y, int32_t *arg)
{
    (void)be;
    int oh = h / 2, ow = w / 2;
    for (int b = 0; b < n; b++)
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++)
                for (int ch = 0; ch < c; ch++) {
                    size_t best = (((size_t)b * (size_t)h + (size_t)(2 * oy)) * (size_t)w +
                                   (size_t)(2 * ox)) *
                                      (size_t)c +
                                  (size_t)ch;
                    for (int dy = 0; dy < 2; dy++)
                        for (int dx = 0; dx < 2; dx++) {
                            size_t i =
                                (((size_t)b * (size_t)h + (size_t)(2 * oy + dy)) * (size_t)w +
                                 (size_t)(2 * ox + dx)) *
                                    (size_t)c +
                                (size_t)ch;
                            if (x[i] > x[best])
                                best = i;
                        }
                    size_t j = (((size_t)b * (size_t)oh + (size_t)oy) * (size_t)ow + (size_t)ox) *
                                   (size_t)c +
                               (size_t)ch;
                    y[j] = x[best];
                    arg[j] = (int32_t)best;
                }
    return GV_OK;
}

static gv_status_t cpu_pool_bwd(struct gv_nn_backend *be, const float *dy, const int32_t *arg,
                                int n, int h, int w, int c, float *dx)
{
    (void)be;
    size_t nin = (size_t)n * (size_t)h * (size_t)w * (size_t)c;
    size_t nout = (size_t)n * (size_t)(h / 2) * (size_t)(w / 2) * (size_t)c;
    memset(dx, 0, nin * sizeof(float));
    for (size_t j = 0; j < nout; j++)
        dx[arg[j]] += dy[j];
    return GV_OK;
}

static gv_status_t cpu_embed_fwd(struct gv_nn_backend *be, const float *table, const int32_t *ids,
                                 int n, int dim, float *out)
{
    (void)be;
    for (int i = 0; i < n; i++)
        memcpy(out + (size_t)i * (size_t)dim, table + (size_t)ids[i] * (size_t)dim,
               (size_t)dim * sizeof(float));
    return GV_OK;
}

static gv_status_t cpu_embed_bwd(struct gv_nn_backend *be, float *dtable, const int32_t *ids,
                                 const float *dout, int n, int dim, int vocab)
{
    (void)be;
    (void)vocab;
    for (int i = 0; i < n; i++) {
        float *d = dtable + (size_t)ids[i] * (size_t)dim;
        const float *s = dout + (size_t)i * (size_t)dim;
        for (int j = 0; j < dim; j++)
            d[j] += s[j];
    }
    return GV_OK;
}

static float cpu_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

static gv_status_t cpu_lstm_fwd(struct gv_nn_backend *be, float *gates, const float *c_prev,
                                float *c, float *h, int n, int hid)
{
    (void)be;
    for (int r = 0; r < n; r++) {
        float *g = gates + (size_t)r * 4 * (size_t)hid;
        size_t o = (size_t)r * (size_t)hid;
        for (int j = 0; j < hid; j++) {
            float ig = cpu_sigmoid(g[j]), fg = cpu_sigmoid(g[hid + j]);
            float gg = tanhf(g[2 * hid + j]), og = cpu_sigmoid(g[3 * hid + j]);
            g[j] = ig;
            g[hid + j] = fg;
            g[2 * hid + j] = gg;
            g[3 * hid + j] = og;
            c[o + j] = fg * c_prev[o + j] + ig * gg;
            h[o + j] = og * tanhf(c[o + j]);
        }
    }
    return GV_OK;
}

static gv_status_t cpu_lstm_bwd(struct gv_nn_backend *be, const float *gates, const float *c_prev,
                                const float *c, const float *dh, float *dc, float *dgates, int n,
                                int hid)
{
    (void)be;
    for (int r = 0; r < n; r++) {
        const float *g = gates + (size_t)r * 4 * (size_t)hid;
        float *dg = dgates + (size_t)r * 4 * (size_t)hid;
        size_t o = (size_t)r * (size_t)hid;
        for (int j = 0; j < hid; j++) {
            float ig = g[j], fg = g[hid + j], gg = g[2 * hid + j], og = g[3 * hid + j];
            float tc = tanhf(c[o + j]);
            float dct = dc[o + j] + dh[o + j] * og * (1.0f - tc * tc);
            dg[j] = dct * gg * ig * (1.0f - ig);
            dg[hid + j] = dct * c_prev[o + j] * fg * (1.0f - fg);
            dg[2 * hid + j] = dct * ig * (1.0f - gg * gg);
            dg[3 * hid + j] = dh[o + j] * tc * og * (1.0f - og);
            dc[o + j] = dct * fg;
        }
    }
    return GV_OK;
}

static gv_status_t cpu_optim(struct gv_nn_backend *be, const struct gv_optim_cfg *cfg, float lr,
                             float *p, float *v, const float *g, size_t n)
{
    (void)be;
    gv_optim_apply_host(cfg, lr, p, v, g, n);
    return GV_OK;
}

static gv_status_t cpu_velocity(struct gv_nn_backend *be, const struct gv_optim_cfg *cfg,
                                const float *p, float *u, float *g, size_t n)
{
    (void)be;
    gv_optim_velocity_host(cfg, p, u, g, n);
    return GV_OK;
}

static const struct gv_nn_ops cpu_ops = {
    .name = "cpu",
    .mem = GV_MEM_HOST,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .zero = cpu_zero,
    .gemm = cpu_gemm,
    .bias_add = cpu_bias_add,
    .bias_grad = cpu_bias_grad,
    .relu_fwd = cpu_relu_fwd,
    .relu_bwd = cpu_relu_bwd,
    .add = cpu_add,
    .xent = cpu_xent,
    .im2col = cpu_im2col,
    .col2im = cpu_col2im,
    .pool_fwd = cpu_pool_fwd,
    .pool_bwd = cpu_pool_bwd,
    .embed_fwd = cpu_embed_fwd,
    .embed_bwd = cpu_embed_bwd,
    .lstm_fwd = cpu_lstm_fwd,
    .lstm_bwd = cpu_lstm_bwd,
    .optim = cpu_optim,
    .velocity = cpu_velocity,
};

gv_status_t gv_nn_cpu_create(int threads, struct gv_nn_backend **be_p)
{
    struct gv_nn_backend *be = gv_calloc(1, sizeof(*be));
    if (be == NULL)
        return GV_ERR_NOMEM;
    be->ops = &cpu_ops;
    be->dev = GV_NN_CPU;
    be->threads = threads > 0 ? threads : 1;
    /* Process-wide in OpenBLAS: several workers share a machine, so the default is 1. */
    openblas_set_num_threads(be->threads);
    *be_p = be;
    return GV_OK;
}
