/* layers.c: dense and convolution layers composed from backend ops (shared by every model and
 * every backend), and the counter-based generator behind deterministic initialisation. */
#include "nn_internal.h"

gv_status_t gv_nn_dense_fwd(struct gv_nn_backend *be, const float *x, const float *w,
                            const float *b, float *y, int n, int in, int out)
{
    GV_NN_TRY(be->ops->gemm(be, 0, 1, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out));
    return be->ops->bias_add(be, y, b, n, out);
}

gv_status_t gv_nn_dense_bwd(struct gv_nn_backend *be, const float *x, const float *w,
                            const float *dy, float *dx, float *dw, float *db, int n, int in,
                            int out)
{
    GV_NN_TRY(be->ops->gemm(be, 1, 0, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in));
    GV_NN_TRY(be->ops->bias_grad(be, db, dy, n, out));
    if (dx != NULL)
        GV_NN_TRY(be->ops->gemm(be, 0, 0, n, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in));
    return GV_OK;
}

gv_status_t gv_nn_conv_shape_init(struct gv_nn_conv_shape *s)
{
    if (s->h <= 0 || s->w <= 0 || s->c <= 0 || s->k <= 0 || s->stride <= 0 || s->pad < 0 ||
        s->oc <= 0 || s->h + 2 * s->pad < s->k || s->w + 2 * s->pad < s->k)
        return GV_ERR_INVAL;
    s->oh = (s->h + 2 * s->pad - s->k) / s->stride + 1;
    s->ow = (s->w + 2 * s->pad - s->k) / s->stride + 1;
    return GV_OK;
}

gv_status_t gv_nn_conv_fwd(struct gv_nn_backend *be, const float *x, const float *w, const float *b,
                           float *y, float *col, const struct gv_nn_conv_shape *s, int n)
{
    int m = n * s->oh * s->ow, kk = s->k * s->k * s->c;
    GV_NN_TRY(be->ops->im2col(be, x, s, n, col));
    GV_NN_TRY(be->ops->gemm(be, 0, 1, m, s->oc, kk, 1.0f, col, kk, w, kk, 0.0f, y, s->oc));
    return be->ops->bias_add(be, y, b, m, s->oc);
}

gv_status_t gv_nn_conv_bwd(struct gv_nn_backend *be, const float *w, const float *dy, float *dx,
                           float *dw, float *db, float *col, const struct gv_nn_conv_shape *s,
                           int n)
{
    int m = n * s->oh * s->ow, kk = s->k * s->k * s->c;
    GV_NN_TRY(be->ops->gemm(be, 1, 0, s->oc, kk, m, 1.0f, dy, s->oc, col, kk, 1.0f, dw, kk));
    GV_NN_TRY(be->ops->bias_grad(be, db, dy, m, s->oc));
    if (dx == NULL)
        return GV_OK;
    /* The columns are no longer needed: reuse their storage for d(columns). */
    GV_NN_TRY(be->ops->gemm(be, 0, 0, m, kk, s->oc, 1.0f, dy, s->oc, w, kk, 0.0f, col, kk));
    return be->ops->col2im(be, col, s, n, dx);
}

uint64_t gv_nn_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

float gv_nn_init_uniform(uint64_t seed, uint64_t tensor, uint64_t i, float bound)
{
    /* Counter-based: element i's value depends only on (seed, tensor, i), never on the order in
     * which elements are drawn, so every host and backend gets the same bits. */
    uint64_t st = seed ^ (tensor * 0xd1b54a32d192ed03ULL);
    (void)gv_nn_splitmix64(&st);
    st ^= i * 0x9e3779b97f4a7c15ULL;
    uint64_t r = gv_nn_splitmix64(&st);
    float u = (float)(r >> 40) * (1.0f / 16777216.0f); /* exact: 24 bits */
    return (2.0f * u - 1.0f) * bound;
}
