/* test_nn_grad.c: gradient checks. Every layer's backward pass on the CPU backend (float) is
 * compared with central finite differences of a double-precision reference forward pass written
 * from the definition: dense, ReLU, softmax cross-entropy, convolution (two geometries), max
 * pooling, embedding, the LSTM cell; then whole models (softmax, MLP, CNN, the unrolled LSTM)
 * through the public model API. */
#include "nn_ref.h"

#include <stdlib.h>
#include <string.h>

static struct gv_nn_backend *be;
static uint64_t rng = 42;

static float *fdup(const double *d, size_t n)
{
    float *f = calloc(n ? n : 1, sizeof(float));
    ref_to_float(f, d, n);
    return f;
}

/* ---------------------------------------------------------------- dense */

struct dense_ctx {
    int n, in, out;
    const double *r;
};

static double dense_loss(const double *v, void *arg)
{
    struct dense_ctx *c = arg;
    const double *x = v, *w = x + c->n * c->in, *b = w + c->out * c->in;
    double y[64], l = 0;
    ref_dense(x, w, b, y, c->n, c->in, c->out);
    for (int i = 0; i < c->n * c->out; i++)
        l += c->r[i] * y[i];
    return l;
}

static void test_dense(void)
{
    struct dense_ctx c = {3, 5, 4, NULL};
    size_t nx = 15, nw = 20, nb = 4, nv = nx + nw + nb;
    double v[39], r[12], num[39], yref[12];
    ref_fill(v, nv, &rng, -1, 1);
    ref_fill(r, 12, &rng, -1, 1);
    c.r = r;
    float *fv = fdup(v, nv), *fr = fdup(r, 12), y[12], ana[39] = {0};
    GV_CHECK_OK(gv_nn_dense_fwd(be, fv, fv + nx, fv + nx + nw, y, c.n, c.in, c.out));
    ref_dense(v, v + nx, v + nx + nw, yref, c.n, c.in, c.out);
    for (int i = 0; i < 12; i++)
        GV_CHECK_NEAR(y[i], yref[i], 1e-5, 1e-5);
    GV_CHECK_OK(
        gv_nn_dense_bwd(be, fv, fv + nx, fr, ana, ana + nx, ana + nx + nw, c.n, c.in, c.out));
    ref_numeric_grad(dense_loss, &c, v, nv, num);
    ref_compare("dense dx,dW,db", ana, num, nv);
    /* dW and db accumulate (the LSTM relies on it); dx is overwritten. */
    GV_CHECK_OK(
        gv_nn_dense_bwd(be, fv, fv + nx, fr, ana, ana + nx, ana + nx + nw, c.n, c.in, c.out));
    for (size_t i = 0; i < nv; i++)
        num[i] *= i < nx ? 1.0 : 2.0;
    ref_compare("dense twice (accum)", ana, num, nv);
    free(fv);
    free(fr);
}

/* ---------------------------------------------------------------- relu */

struct vec_ctx {
    size_t n;
    const double *r;
};

static double relu_loss(const double *v, void *arg)
{
    struct vec_ctx *c = arg;
    double l = 0;
    for (size_t i = 0; i < c->n; i++)
        l += c->r[i] * (v[i] > 0 ? v[i] : 0);
    return l;
}

static void test_relu(void)
{
    double v[40], r[40], num[40];
    ref_fill_away(v, 40, &rng, 1e-3);
    ref_fill(r, 40, &rng, -1, 1);
    struct vec_ctx c = {40, r};
    float *fv = fdup(v, 40), *fr = fdup(r, 40), y[40], dx[40];
    GV_CHECK_OK(be->ops->relu_fwd(be, fv, y, 40));
    GV_CHECK_OK(be->ops->relu_bwd(be, y, fr, dx, 40));
    ref_numeric_grad(relu_loss, &c, v, 40, num);
    ref_compare("relu", dx, num, 40);
    free(fv);
    free(fr);
}

/* ---------------------------------------------------------------- softmax cross-entropy */

struct xent_ctx {
    int rows, cols;
    const int32_t *lab;
};

static double xent_loss(const double *v, void *arg)
{
    struct xent_ctx *c = arg;
    return ref_xent(v, c->lab, c->rows, c->cols);
}

static void test_xent(void)
{
    enum { R = 5, C = 7 };
    double v[R * C], num[R * C];
    int32_t lab[R] = {0, 6, 3, 3, 1}, correct[R];
    ref_fill(v, R * C, &rng, -3, 3);
    v[1 * C + 6] = 9.0; /* row 1 predicts its label */
    struct xent_ctx c = {R, C, lab};
    float *fv = fdup(v, R * C), dz[R * C], loss[R];
    GV_CHECK_OK(be->ops->xent(be, fv, lab, R, C, 1.0f / R, dz, loss, correct));
    double sum = 0;
    for (int r = 0; r < R; r++) {
        sum += loss[r];
        int arg = 0;
        for (int k = 1; k < C; k++)
            arg = v[r * C + k] > v[r * C + arg] ? k : arg;
        GV_CHECK_EQ(correct[r], arg == lab[r]);
    }
    GV_CHECK_EQ(correct[1], 1);
    GV_CHECK_NEAR(sum / R, ref_xent(v, lab, R, C), 1e-6, 1e-5);
    ref_numeric_grad(xent_loss, &c, v, R * C, num);
    ref_compare("softmax-xent", dz, num, R * C);
    free(fv);
}

/* ---------------------------------------------------------------- convolution */

struct conv_ctx {
    struct gv_nn_conv_shape s;
    int n;
    const double *r;
};

static double conv_loss(const double *v, void *arg)
{
    struct conv_ctx *c = arg;
    const struct gv_nn_conv_shape *s = &c->s;
    size_t nx = (size_t)(c->n * s->h * s->w * s->c), nw = (size_t)(s->oc * s->k * s->k * s->c);
    size_t ny = (size_t)(c->n * s->oh * s->ow * s->oc);
    double *y = malloc(ny * sizeof(double)), l = 0;
    ref_conv(v, v + nx, v + nx + nw, y, s, c->n);
    for (size_t i = 0; i < ny; i++)
        l += c->r[i] * y[i];
    free(y);
    return l;
}

static void conv_case(const char *name, struct gv_nn_conv_shape s, int n)
{
    GV_CHECK_OK(gv_nn_conv_shape_init(&s));
    struct conv_ctx c = {s, n, NULL};
    size_t nx = (size_t)(n * s.h * s.w * s.c), nw = (size_t)(s.oc * s.k * s.k * s.c);
    size_t nv = nx + nw + (size_t)s.oc, ny = (size_t)(n * s.oh * s.ow * s.oc);
    size_t ncol = (size_t)(n * s.oh * s.ow) * (size_t)(s.k * s.k * s.c);
    double *v = malloc(nv * sizeof(double)), *r = malloc(ny * sizeof(double));
    double *num = malloc(nv * sizeof(double)), *yref = malloc(ny * sizeof(double));
    ref_fill(v, nv, &rng, -1, 1);
    ref_fill(r, ny, &rng, -1, 1);
    c.r = r;
    float *fv = fdup(v, nv), *fr = fdup(r, ny), *y = calloc(ny, sizeof(float));
    float *col = calloc(ncol, sizeof(float)), *ana = calloc(nv, sizeof(float));
    GV_CHECK_OK(gv_nn_conv_fwd(be, fv, fv + nx, fv + nx + nw, y, col, &s, n));
    ref_conv(v, v + nx, v + nx + nw, yref, &s, n);
    int fwd_ok = 1;
    for (size_t i = 0; i < ny; i++)
        fwd_ok &= fabs(y[i] - yref[i]) < 1e-5 + 1e-5 * fabs(yref[i]);
    GV_CHECK_MSG(fwd_ok, "%s forward differs from the direct convolution", name);
    GV_CHECK_OK(gv_nn_conv_bwd(be, fv + nx, fr, ana, ana + nx, ana + nx + nw, col, &s, n));
    ref_numeric_grad(conv_loss, &c, v, nv, num);
    ref_compare(name, ana, num, nv);
    free(v), free(r), free(num), free(yref), free(fv), free(fr), free(y), free(col), free(ana);
}

static void test_conv(void)
{
    conv_case(
        "conv3x3 pad1 stride1",
        (struct gv_nn_conv_shape){.h = 5, .w = 4, .c = 2, .k = 3, .pad = 1, .stride = 1, .oc = 3},
        2);
    conv_case(
        "conv3x3 pad0 stride2",
        (struct gv_nn_conv_shape){.h = 7, .w = 6, .c = 3, .k = 3, .pad = 0, .stride = 2, .oc = 2},
        2);
}

/* ---------------------------------------------------------------- pooling */

struct pool_ctx {
    int n, h, w, c;
    const double *r;
};

static double pool_loss(const double *v, void *arg)
{
    struct pool_ctx *c = arg;
    double y[256], l = 0;
    ref_pool(v, y, c->n, c->h, c->w, c->c);
    for (int i = 0; i < c->n * (c->h / 2) * (c->w / 2) * c->c; i++)
        l += c->r[i] * y[i];
    return l;
}

static void test_pool(void)
{
    enum { N = 2, H = 4, W = 6, C = 3, NX = N * H * W * C, NY = NX / 4 };
    double v[NX], r[NY], num[NX];
    /* Distinct values 1/NX apart: no ties within a finite-difference step. */
    for (int i = 0; i < NX; i++)
        v[i] = (double)(float)((double)((i * 37) % NX) / NX - 0.5);
    ref_fill(r, NY, &rng, -1, 1);
    struct pool_ctx c = {N, H, W, C, r};
    float *fv = fdup(v, NX), *fr = fdup(r, NY), y[NY], dx[NX];
    int32_t arg[NY];
    GV_CHECK_OK(be->ops->pool_fwd(be, fv, N, H, W, C, y, arg));
    GV_CHECK_OK(be->ops->pool_bwd(be, fr, arg, N, H, W, C, dx));
    ref_numeric_grad(pool_loss, &c, v, NX, num);
    ref_compare("maxpool2", dx, num, NX);
    free(fv);
    free(fr);
}

/* ---------------------------------------------------------------- embedding */

struct embed_ctx {
    int n, dim;
    const int32_t *ids;
    const double *r;
};

static double embed_loss(const double *v, void *arg)
{
    struct embed_ctx *c = arg;
    double l = 0;
    for (int i = 0; i < c->n; i++)
        for (int j = 0; j < c->dim; j++)
            l += c->r[i * c->dim + j] * v[c->ids[i] * c->dim + j];
    return l;
}

static void test_embed(void)
{
    enum { V = 5, E = 3, N = 7 };
    int32_t ids[N] = {4, 0, 2, 4, 4, 1, 0}; /* repeats accumulate; id 3 gets nothing */
    double v[V * E], r[N * E], num[V * E];
    ref_fill(v, V * E, &rng, -1, 1);
    ref_fill(r, N * E, &rng, -1, 1);
    struct embed_ctx c = {N, E, ids, r};
    float *fv = fdup(v, V * E), *fr = fdup(r, N * E), out[N * E], dt[V * E] = {0};
    GV_CHECK_OK(be->ops->embed_fwd(be, fv, ids, N, E, out));
    for (int i = 0; i < N * E; i++)
        GV_CHECK(out[i] == fv[ids[i / E] * E + i % E]);
    GV_CHECK_OK(be->ops->embed_bwd(be, dt, ids, fr, N, E, V));
    ref_numeric_grad(embed_loss, &c, v, V * E, num);
    ref_compare("embedding", dt, num, V * E);
    free(fv);
    free(fr);
}

/* ---------------------------------------------------------------- LSTM cell */

struct cell_ctx {
    int n, hid;
    const double *rh, *rc;
};

static double cell_loss(const double *v, void *arg)
{
    struct cell_ctx *c = arg;
    double h[64], cc[64], l = 0;
    ref_lstm_cell(v, v + c->n * 4 * c->hid, cc, h, c->n, c->hid);
    for (int i = 0; i < c->n * c->hid; i++)
        l += c->rh[i] * h[i] + c->rc[i] * cc[i];
    return l;
}

static void test_lstm_cell(void)
{
    enum { N = 3, H = 4, NG = N * 4 * H, NV = NG + N * H };
    double v[NV], rh[N * H], rc[N * H], num[NV], href[N * H], cref[N * H];
    ref_fill(v, NV, &rng, -2, 2);
    ref_fill(rh, N * H, &rng, -1, 1);
    ref_fill(rc, N * H, &rng, -1, 1);
    struct cell_ctx c = {N, H, rh, rc};
    float *fv = fdup(v, NV), *frh = fdup(rh, N * H), *frc = fdup(rc, N * H);
    float cc[N * H], h[N * H], ana[NV];
    GV_CHECK_OK(be->ops->lstm_fwd(be, fv, fv + NG, cc, h, N, H)); /* gates now activations */
    ref_lstm_cell(v, v + NG, cref, href, N, H);
    for (int i = 0; i < N * H; i++) {
        GV_CHECK_NEAR(h[i], href[i], 1e-6, 1e-5);
        GV_CHECK_NEAR(cc[i], cref[i], 1e-6, 1e-5);
    }
    memcpy(ana + NG, frc, sizeof(float) * N * H); /* dc in: from later steps; out: d c_prev */
    GV_CHECK_OK(be->ops->lstm_bwd(be, fv, fv + NG, cc, frh, ana + NG, ana, N, H));
    ref_numeric_grad(cell_loss, &c, v, NV, num);
    ref_compare("lstm cell", ana, num, NV);
    free(fv);
    free(frh);
    free(frc);
}

/* ---------------------------------------------------------------- whole models */

struct model_ctx {
    struct gv_nn_model *m;
    const struct gv_nn_model_cfg *cfg;
    int n;
    const double *x;
    const int32_t *tok, *lab;
};

static const double *tparam(const struct model_ctx *c, const double *v, int i)
{
    return v + gv_nn_model_tensor(c->m, i)->offset;
}

/* Image models, written out from the architecture the documentation describes. */
static double image_model_loss(const double *v, void *arg)
{
    struct model_ctx *c = arg;
    const struct gv_nn_model_cfg *cfg = c->cfg;
    static double a[2][8192];
    int d = cfg->in_h * cfg->in_w * cfg->in_c, t = 0, cur = 0;
    memcpy(a[0], c->x, sizeof(double) * (size_t)(c->n * d));
    if (cfg->kind == GV_NN_CNN) {
        int h = cfg->in_h, w = cfg->in_w, ch = cfg->in_c;
        int oc[2] = {cfg->conv1, cfg->conv2};
        for (int blk = 0; blk < 2; blk++, t += 2) {
            struct gv_nn_conv_shape s = {
                .h = h, .w = w, .c = ch, .k = 3, .pad = 1, .stride = 1, .oc = oc[blk]};
            gv_nn_conv_shape_init(&s);
            ref_conv(a[cur], tparam(c, v, t), tparam(c, v, t + 1), a[!cur], &s, c->n);
            ref_relu(a[!cur], (size_t)(c->n * h * w * oc[blk]));
            ref_pool(a[!cur], a[cur], c->n, h, w, oc[blk]);
            h /= 2, w /= 2, ch = oc[blk];
        }
        d = h * w * ch;
    }
    int widths[GV_NN_MAX_WIDTHS + 1], nl = 0;
    if (cfg->kind == GV_NN_MLP)
        for (int i = 0; i < cfg->n_widths; i++)
            widths[nl++] = cfg->widths[i];
    if (cfg->kind == GV_NN_CNN)
        widths[nl++] = cfg->cnn_dense;
    widths[nl++] = cfg->n_classes;
    for (int i = 0; i < nl; i++, t += 2) {
        ref_dense(a[cur], tparam(c, v, t), tparam(c, v, t + 1), a[!cur], c->n, d, widths[i]);
        cur = !cur;
        d = widths[i];
        if (i + 1 < nl)
            ref_relu(a[cur], (size_t)(c->n * d));
    }
    return ref_xent(a[cur], c->lab, c->n, d);
}

static double lstm_model_loss(const double *v, void *arg)
{
    struct model_ctx *c = arg;
    const struct gv_nn_model_cfg *cfg = c->cfg;
    int V = cfg->n_classes, E = cfg->embed, H = cfg->hidden, L = cfg->layers, T = cfg->seq_len;
    double h[4][16], cs[4][16], x[16], g[64], cn[16], hn[16], z[16], total = 0;
    for (int b = 0; b < c->n; b++) {
        memset(h, 0, sizeof(h));
        memset(cs, 0, sizeof(cs));
        for (int t = 0; t < T; t++) {
            const double *emb = tparam(c, v, 0) + c->tok[b * T + t] * E;
            memcpy(x, emb, sizeof(double) * (size_t)E);
            int in = E;
            for (int l = 0; l < L; l++) {
                const double *wx = tparam(c, v, 1 + 3 * l), *wh = tparam(c, v, 2 + 3 * l);
                const double *bb = tparam(c, v, 3 + 3 * l);
                for (int o = 0; o < 4 * H; o++) {
                    double s = bb[o];
                    for (int k = 0; k < in; k++)
                        s += wx[o * in + k] * x[k];
                    for (int k = 0; k < H; k++)
                        s += wh[o * H + k] * h[l][k];
                    g[o] = s;
                }
                ref_lstm_cell(g, cs[l], cn, hn, 1, H);
                memcpy(cs[l], cn, sizeof(double) * (size_t)H);
                memcpy(h[l], hn, sizeof(double) * (size_t)H);
                memcpy(x, hn, sizeof(double) * (size_t)H);
                in = H;
            }
            ref_dense(x, tparam(c, v, 1 + 3 * L), tparam(c, v, 2 + 3 * L), z, 1, H, V);
            total += ref_xent(z, &c->lab[b * T + t], 1, V);
        }
    }
    return total / (c->n * T);
}

static void model_case(const char *name, const struct gv_nn_model_cfg *cfg, int n)
{
    struct gv_nn_model *m = NULL;
    GV_CHECK_OK(gv_nn_model_create(be, cfg, &m));
    if (m == NULL)
        return;
    GV_CHECK_OK(gv_nn_model_init(m, 7));
    size_t np = gv_nn_model_numel(m);
    int lstm = cfg->kind == GV_NN_LSTM, rows = lstm ? n * cfg->seq_len : n;
    int d = cfg->in_h * cfg->in_w * cfg->in_c;
    float *fp = calloc(np, sizeof(float)), *grad = calloc(np, sizeof(float));
    double *v = malloc(np * sizeof(double)), *num = malloc(np * sizeof(double));
    double x[512];
    float fx[512];
    int32_t tok[64], lab[64];
    GV_CHECK_OK(gv_nn_model_get_params(m, fp));
    for (size_t i = 0; i < np; i++)
        v[i] = fp[i];
    if (!lstm) {
        ref_fill(x, (size_t)(n * d), &rng, -1, 1);
        ref_to_float(fx, x, (size_t)(n * d));
    }
    for (int i = 0; i < rows; i++) {
        tok[i] = (int32_t)(gv_nn_splitmix64(&rng) % (uint64_t)cfg->n_classes);
        lab[i] = (int32_t)(gv_nn_splitmix64(&rng) % (uint64_t)cfg->n_classes);
    }
    struct gv_nn_batch b = {
        .n = n, .x = lstm ? NULL : fx, .tokens = lstm ? tok : NULL, .labels = lab};
    struct gv_nn_stats st;
    struct model_ctx c = {m, cfg, n, x, tok, lab};
    GV_CHECK_OK(gv_nn_model_train_step(m, &b, &st));
    GV_CHECK_OK(gv_nn_model_get_grads(m, grad));
    GV_CHECK_EQ(st.count, rows);
    double ref_loss = lstm ? lstm_model_loss(v, &c) : image_model_loss(v, &c);
    GV_CHECK_NEAR(st.loss_sum / (double)st.count, ref_loss, 1e-5, 1e-4);
    ref_numeric_grad(lstm ? lstm_model_loss : image_model_loss, &c, v, np, num);
    ref_compare(name, grad, num, np);
    free(fp), free(grad), free(v), free(num);
    gv_nn_model_destroy(m);
}

static void test_models(void)
{
    struct gv_nn_model_cfg cfg;
    gv_nn_model_cfg_default(GV_NN_SOFTMAX, &cfg);
    cfg.in_h = 3, cfg.in_w = 4, cfg.in_c = 1, cfg.n_classes = 4, cfg.max_batch = 8;
    model_case("model softmax", &cfg, 3);

    cfg.kind = GV_NN_MLP;
    cfg.widths[0] = 6, cfg.widths[1] = 5, cfg.n_widths = 2;
    model_case("model mlp 6,5", &cfg, 3);

    gv_nn_model_cfg_default(GV_NN_CNN, &cfg);
    cfg.in_h = 8, cfg.in_w = 4, cfg.in_c = 2, cfg.n_classes = 4, cfg.max_batch = 4;
    cfg.conv1 = 2, cfg.conv2 = 3, cfg.cnn_dense = 5;
    model_case("model cnn", &cfg, 2);

    gv_nn_model_cfg_default(GV_NN_LSTM, &cfg);
    cfg.n_classes = 6, cfg.embed = 3, cfg.hidden = 4, cfg.layers = 2, cfg.seq_len = 5;
    cfg.max_batch = 4;
    model_case("model lstm 2 layers", &cfg, 3);
    cfg.layers = 1, cfg.seq_len = 1;
    model_case("model lstm T=1", &cfg, 2);
}

int main(void)
{
    gv_status_t status = gv_nn_backend_create(GV_NN_CPU, 1, &be);
    GV_CHECK_OK(status);
    if (status != GV_OK)
        return gv_check_summary();
    test_dense();
    test_relu();
    test_xent();
    test_conv();
    test_pool();
    test_embed();
    test_lstm_cell();
    test_models();
    gv_nn_backend_destroy(be);
    return gv_check_summary();
}
