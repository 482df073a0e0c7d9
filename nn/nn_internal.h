/* nn_internal.h: the backend ops table and the layer functions built on it. Shared by the nn/
 * sources and tests/nn (which check every layer against a double-precision reference).
 * All tensor pointers here are backend memory unless marked host. */
#ifndef GV_NN_INTERNAL_H
#define GV_NN_INTERNAL_H

#include "gv_nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Convolution geometry, NHWC. Column matrix: [n*oh*ow][k*k*c], inner order (ky, kx, c);
 * weights [oc][k*k*c] in the same order. */
struct gv_nn_conv_shape {
    int h, w, c; /* input */
    int k, pad, stride;
    int oh, ow, oc;
};

/* One static table per backend; no slot is NULL. Every op is asynchronous with respect to the
 * host on CUDA (stream order), except download, which returns once the data is on the host. */
struct gv_nn_ops {
    const char *name;
    enum gv_mem mem;
    /* Zeroed memory of this backend's kind. */
    gv_status_t (*alloc)(struct gv_nn_backend *be, size_t bytes, void **p);
    void (*free)(struct gv_nn_backend *be, void *p);
    gv_status_t (*upload)(struct gv_nn_backend *be, void *dst, const void *host, size_t bytes);
    gv_status_t (*download)(struct gv_nn_backend *be, void *host, const void *src, size_t bytes);
    gv_status_t (*zero)(struct gv_nn_backend *be, void *p, size_t bytes);
    /* Row-major C[m][n] = alpha * op(A) op(B) + beta * C, op(A) [m][k], op(B) [k][n]. */
    gv_status_t (*gemm)(struct gv_nn_backend *be, int ta, int tb, int m, int n, int k, float alpha,
                        const float *a, int lda, const float *b, int ldb, float beta, float *c,
                        int ldc);
    /* y[r][c] += b[c] */
    gv_status_t (*bias_add)(struct gv_nn_backend *be, float *y, const float *b, int rows, int cols);
    /* db[c] += sum_r dy[r][c] */
    gv_status_t (*bias_grad)(struct gv_nn_backend *be, float *db, const float *dy, int rows,
                             int cols);
    gv_status_t (*relu_fwd)(struct gv_nn_backend *be, const float *x, float *y, size_t n);
    /* dx = dy * (y > 0); dx may alias dy */
    gv_status_t (*relu_bwd)(struct gv_nn_backend *be, const float *y, const float *dy, float *dx,
                            size_t n);
    /* y += x */
    gv_status_t (*add)(struct gv_nn_backend *be, float *y, const float *x, size_t n);
    /* Softmax cross-entropy per row: loss[r] = logsumexp(row) - row[label]; correct[r] =
     * (first argmax == label); dlogits (may be NULL) = scale * (softmax - onehot). */
    gv_status_t (*xent)(struct gv_nn_backend *be, const float *logits, const int32_t *labels,
                        int rows, int cols, float scale, float *dlogits, float *loss,
                        int32_t *correct);
    gv_status_t (*im2col)(struct gv_nn_backend *be, const float *x,
                          const struct gv_nn_conv_shape *s, int n, float *col);
    /* dx (overwritten) = sum of the column entries that read each input element */
    gv_status_t (*col2im)(struct gv_nn_backend *be, const float *col,
                          const struct gv_nn_conv_shape *s, int n, float *dx);
    /* 2x2 max pooling, stride 2, NHWC; arg[j] = index into x of the max of output j */
    gv_status_t (*pool_fwd)(struct gv_nn_backend *be, const float *x, int n, int h, int w, int c,
                            float *y, int32_t *arg);
    /* dx (overwritten, float[n*h*w*c]) = dy routed to arg */
    gv_status_t (*pool_bwd)(struct gv_nn_backend *be, const float *dy, const int32_t *arg, int n,
                            int h, int w, int c, float *dx);
    /* out[i] = table[ids[i]] (rows of dim) */
    gv_status_t (*embed_fwd)(struct gv_nn_backend *be, const float *table, const int32_t *ids,
                             int n, int dim, float *out);
    /* dtable[ids[i]] += dout[i] (accumulates; deterministic order) */
    gv_status_t (*embed_bwd)(struct gv_nn_backend *be, float *dtable, const int32_t *ids,
                             const float *dout, int n, int dim, int vocab);
    /* gates [n][4*hid] (i, f, g, o pre-activations) become activations in place;
     * c = f*c_prev + i*g; h = o*tanh(c). */
    gv_status_t (*lstm_fwd)(struct gv_nn_backend *be, float *gates, const float *c_prev, float *c,
                            float *h, int n, int hid);
    /* From dh and dc (grad of c from later steps) computes dgates (pre-activation) and
     * overwrites dc with the grad of c_prev. */
    gv_status_t (*lstm_bwd)(struct gv_nn_backend *be, const float *gates, const float *c_prev,
                            const float *c, const float *dh, float *dc, float *dgates, int n,
                            int hid);
    /* The SGD step of gv_optim_apply_host, bit for bit. */
    gv_status_t (*optim)(struct gv_nn_backend *be, const struct gv_optim_cfg *cfg, float lr,
                         float *p, float *v, const float *g, size_t n);
    /* The velocity of gv_optim_velocity_host (u and g updated), bit for bit. */
    gv_status_t (*velocity)(struct gv_nn_backend *be, const struct gv_optim_cfg *cfg,
                            const float *p, float *u, float *g, size_t n);
};

struct gv_nn_backend {
    const struct gv_nn_ops *ops;
    enum gv_nn_device dev;
    int threads;
    void *impl; /* backend-private state (cuBLAS handle) */
};

/* Backend constructors (backend_cpu.c; backend_cuda_plugin.c, which loads the CUDA plugin). */
gv_status_t gv_nn_cpu_create(int threads, struct gv_nn_backend **be_p);
gv_status_t gv_nn_cuda_create(struct gv_nn_backend **be_p);
void gv_nn_cuda_destroy(struct gv_nn_backend *be);

#define GV_NN_TRY(expr)                                                                            \
    do {                                                                                           \
        gv_status_t try_status_ = (expr);                                                          \
        if (try_status_ != GV_OK)                                                                  \
            return try_status_;                                                                    \
    } while (0)

/* ---------------------------------------------------------------- layers (layers.c) */

/* y[n][out] = x[n][in] W[out][in]^T + b[out] */
gv_status_t gv_nn_dense_fwd(struct gv_nn_backend *be, const float *x, const float *w,
                            const float *b, float *y, int n, int in, int out);
/* dW += dy^T x, db += colsum(dy), dx (NULL: skipped; overwritten) = dy W */
gv_status_t gv_nn_dense_bwd(struct gv_nn_backend *be, const float *x, const float *w,
                            const float *dy, float *dx, float *dw, float *db, int n, int in,
                            int out);
/* y[n][oh][ow][oc] = conv(x[n][h][w][c], W[oc][k*k*c]) + b; col: scratch [n*oh*ow][k*k*c],
 * left holding x's columns for the backward pass. */
gv_status_t gv_nn_conv_fwd(struct gv_nn_backend *be, const float *x, const float *w, const float *b,
                           float *y, float *col, const struct gv_nn_conv_shape *s, int n);
/* Needs col from the forward pass (destroyed); dx may be NULL. dW, db accumulate. */
gv_status_t gv_nn_conv_bwd(struct gv_nn_backend *be, const float *w, const float *dy, float *dx,
                           float *dw, float *db, float *col, const struct gv_nn_conv_shape *s,
                           int n);
/* Fills s->oh, s->ow from the rest; GV_ERR_INVAL if the geometry is impossible. */
gv_status_t gv_nn_conv_shape_init(struct gv_nn_conv_shape *s);

/* Deterministic uniform in [-bound, bound) for element i of stream (seed, tensor). */
float gv_nn_init_uniform(uint64_t seed, uint64_t tensor, uint64_t i, float bound);
uint64_t gv_nn_splitmix64(uint64_t *state);

#ifdef __cplusplus
}
#endif
#endif /* GV_NN_INTERNAL_H */
