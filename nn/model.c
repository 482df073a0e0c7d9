/* model.c: the model object: configuration, the parameter arena (params | grads | momentum, one
 * allocation, tensors as views), deterministic initialisation, the workspace, and the image
 * models (softmax regression, MLP, CNN) as layer lists. The LSTM lives in model_lstm.c. */
#include "nn_model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const kind_names[] = {"softmax", "mlp", "cnn", "lstm"};

const char *gv_nn_model_kind_str(enum gv_nn_model_kind kind)
{
    return (unsigned)kind < GV_ARRAY_LEN(kind_names) ? kind_names[kind] : "unknown";
}

gv_status_t gv_nn_model_kind_parse(const char *s, enum gv_nn_model_kind *kind_p)
{
    for (int i = 0; s != NULL && i < (int)GV_ARRAY_LEN(kind_names); i++)
        if (strcmp(s, kind_names[i]) == 0) {
            *kind_p = (enum gv_nn_model_kind)i;
            return GV_OK;
        }
    return GV_ERR_INVAL;
}

void gv_nn_model_cfg_default(enum gv_nn_model_kind kind, struct gv_nn_model_cfg *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->kind = kind;
    cfg->in_h = 28;
    cfg->in_w = 28;
    cfg->in_c = 1;
    cfg->n_classes = 10;
    cfg->widths[0] = 256;
    cfg->widths[1] = 128;
    cfg->n_widths = 2;
    cfg->conv1 = 16;
    cfg->conv2 = 32;
    cfg->cnn_dense = 128;
    cfg->embed = 32;
    cfg->hidden = 128;
    cfg->layers = 1;
    cfg->seq_len = 64;
    cfg->max_batch = 256;
}

static int in_range(int v, int lo, int hi)
{
    return v >= lo && v <= hi;
}

static gv_status_t model_cfg_check(const struct gv_nn_model_cfg *c)
{
    const char *why = NULL;
    if (!in_range(c->max_batch, 1, 65536))
        why = "max_batch must be in [1, 65536]";
    else if (c->kind == GV_NN_LSTM) {
        if (!in_range(c->n_classes, 2, 256))
            why = "vocabulary size must be in [2, 256]";
        else if (!in_range(c->embed, 1, 4096) || !in_range(c->hidden, 1, 4096))
            why = "embed and hidden must be in [1, 4096]";
        else if (!in_range(c->layers, 1, GV_NN_MAX_LSTM_LAYERS))
            why = "layers must be in [1, 4]";
        else if (!in_range(c->seq_len, 1, 4096))
            why = "seq_len must be in [1, 4096]";
        else if ((int64_t)c->max_batch * c->seq_len > (1 << 22))
            why = "max_batch * seq_len is too large";
    } else if ((unsigned)c->kind > GV_NN_CNN) {
        why = "unknown model kind";
    } else if (!in_range(c->n_classes, 2, 1 << 16)) {
        why = "n_classes must be in [2, 65536]";
    } else if (!in_range(c->in_h, 1, 4096) || !in_range(c->in_w, 1, 4096) ||
               !in_range(c->in_c, 1, 4096) || (int64_t)c->in_h * c->in_w * c->in_c > (1 << 24)) {
        why = "input shape out of range";
    } else if (c->kind == GV_NN_MLP && !in_range(c->n_widths, 0, GV_NN_MAX_WIDTHS)) {
        why = "at most 8 hidden widths";
    } else if (c->kind == GV_NN_CNN &&
               (c->in_h % 4 != 0 || c->in_w % 4 != 0 || !in_range(c->conv1, 1, 1024) ||
                !in_range(c->conv2, 1, 1024) || !in_range(c->cnn_dense, 1, 1 << 16))) {
        why = "cnn needs h, w divisible by 4 and channels in [1, 1024]";
    }
    for (int i = 0; why == NULL && c->kind == GV_NN_MLP && i < c->n_widths; i++)
        if (!in_range(c->widths[i], 1, 1 << 16))
            why = "hidden widths must be in [1, 65536]";
    if (why != NULL) {
        gv_log(GV_LOG_ERROR, "nn: bad %s model config: %s", gv_nn_model_kind_str(c->kind), why);
        return GV_ERR_INVAL;
    }
    return GV_OK;
}

int nn_add_tensor(struct gv_nn_model *m, const char *name, int d0, int d1, float bound, float cval)
{
    GV_ASSERT(m->n_t < NN_MAX_TENSORS);
    int i = m->n_t++;
    struct gv_nn_tensor *t = &m->t[i];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->ndim = d1 > 0 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1 > 0 ? d1 : 0;
    t->numel = (size_t)d0 * (size_t)(d1 > 0 ? d1 : 1);
    t->offset = m->numel;
    m->numel += t->numel;
    m->t_bound[i] = bound;
    m->t_const[i] = cval;
    return i;
}

void *nn_ws_take(struct gv_nn_model *m, size_t bytes)
{
    size_t at = m->ws_bytes;
    m->ws_bytes += (bytes + 255) / 256 * 256; /* 256-byte aligned views for vector loads */
    return m->ws == NULL ? NULL : (char *)m->ws + at;
}

static void model_add_layer(struct gv_nn_model *m, enum nn_layer_kind kind, int in_dim, int out_dim,
                            int wt, int bt)
{
    GV_ASSERT(m->n_l < NN_MAX_LAYERS);
    struct nn_layer *l = &m->l[m->n_l++];
    memset(l, 0, sizeof(*l));
    l->kind = kind;
    l->in_dim = in_dim;
    l->out_dim = out_dim;
    l->wt = wt;
    l->bt = bt;
}

/* dense + (relu unless last): He-uniform before a ReLU, 1/sqrt(fan_in) for the logits. */
static int model_dense(struct gv_nn_model *m, const char *name, int in, int out, int relu)
{
    char wn[24], bn[24];
    snprintf(wn, sizeof(wn), "%s.w", name);
    snprintf(bn, sizeof(bn), "%s.b", name);
    float bound = relu ? sqrtf(6.0f / (float)in) : 1.0f / sqrtf((float)in);
    int wt = nn_add_tensor(m, wn, out, in, bound, 0.0f);
    int bt = nn_add_tensor(m, bn, out, 0, 0.0f, 0.0f);
    model_add_layer(m, NN_L_DENSE, in, out, wt, bt);
    if (relu)
        model_add_layer(m, NN_L_RELU, out, out, -1, -1);
    return out;
}

/* conv3x3 (pad 1) + relu + maxpool2; returns the output shape through h, w. */
static void model_conv_block(struct gv_nn_model *m, const char *name, int *h, int *w, int c, int oc)
{
    char wn[24], bn[24];
    snprintf(wn, sizeof(wn), "%s.w", name);
    snprintf(bn, sizeof(bn), "%s.b", name);
    struct gv_nn_conv_shape cs = {
        .h = *h, .w = *w, .c = c, .k = 3, .pad = 1, .stride = 1, .oc = oc};
    (void)gv_nn_conv_shape_init(&cs); /* valid: cfg checked */
    int kk = 9 * c;
    int wt = nn_add_tensor(m, wn, oc, kk, sqrtf(6.0f / (float)kk), 0.0f);
    int bt = nn_add_tensor(m, bn, oc, 0, 0.0f, 0.0f);
    int out = cs.oh * cs.ow * oc;
    model_add_layer(m, NN_L_CONV, *h * *w * c, out, wt, bt);
    m->l[m->n_l - 1].cs = cs;
    model_add_layer(m, NN_L_RELU, out, out, -1, -1);
    model_add_layer(m, NN_L_POOL, out, out / 4, -1, -1);
    struct gv_nn_conv_shape ps = {.h = cs.oh, .w = cs.ow, .c = oc};
    m->l[m->n_l - 1].cs = ps;
    *h = cs.oh / 2;
    *w = cs.ow / 2;
}

static void model_define_images(struct gv_nn_model *m)
{
    const struct gv_nn_model_cfg *c = &m->cfg;
    int d = c->in_h * c->in_w * c->in_c;
    char name[16];
    m->in_dim = d;
    m->rows = 1;
    if (c->kind == GV_NN_SOFTMAX) {
        model_dense(m, "fc1", d, c->n_classes, 0);
    } else if (c->kind == GV_NN_MLP) {
        for (int i = 0; i < c->n_widths; i++) {
            snprintf(name, sizeof(name), "fc%d", i + 1);
            d = model_dense(m, name, d, c->widths[i], 1);
        }
        snprintf(name, sizeof(name), "fc%d", c->n_widths + 1);
        model_dense(m, name, d, c->n_classes, 0);
    } else {
        int h = c->in_h, w = c->in_w;
        model_conv_block(m, "conv1", &h, &w, c->in_c, c->conv1);
        model_conv_block(m, "conv2", &h, &w, c->conv1, c->conv2);
        d = model_dense(m, "fc1", h * w * c->conv2, c->cnn_dense, 1);
        model_dense(m, "fc2", d, c->n_classes, 0);
    }
}

/* Carves the workspace; called twice (sizing pass with ws NULL, then for real). */
static void model_layout(struct gv_nn_model *m)
{
    size_t nb = (size_t)m->cfg.max_batch, f = sizeof(float);
    size_t rows = nb * (size_t)m->rows;
    m->ws_bytes = 0;
    m->labels = nn_ws_take(m, rows * sizeof(int32_t));
    m->loss = nn_ws_take(m, rows * f);
    m->correct = nn_ws_take(m, rows * sizeof(int32_t));
    if (m->cfg.kind == GV_NN_LSTM) {
        nn_lstm_layout(m);
        return;
    }
    m->x = nn_ws_take(m, nb * (size_t)m->in_dim * f);
    for (int i = 0; i < m->n_l; i++) {
        struct nn_layer *l = &m->l[i];
        l->out = nn_ws_take(m, nb * (size_t)l->out_dim * f);
        l->dout = nn_ws_take(m, nb * (size_t)l->out_dim * f);
        if (l->kind == NN_L_CONV)
            l->col = nn_ws_take(m, nb * (size_t)(l->cs.oh * l->cs.ow) *
                                       (size_t)(l->cs.k * l->cs.k * l->cs.c) * f);
        if (l->kind == NN_L_POOL)
            l->arg = nn_ws_take(m, nb * (size_t)l->out_dim * sizeof(int32_t));
    }
    m->logits = m->l[m->n_l - 1].out;
    m->dlogits = m->l[m->n_l - 1].dout;
}

static gv_status_t model_alloc(struct gv_nn_model *m)
{
    struct gv_nn_backend *be = m->be;
    size_t rows = (size_t)m->cfg.max_batch * (size_t)m->rows;
    GV_NN_TRY(be->ops->alloc(be, 3 * m->numel * sizeof(float), (void **)&m->arena));
    model_layout(m);
    GV_NN_TRY(be->ops->alloc(be, m->ws_bytes, &m->ws));
    model_layout(m);
    m->h_loss = gv_calloc(rows, sizeof(float));
    m->h_correct = gv_calloc(rows, sizeof(int32_t));
    m->h_tok = gv_calloc(rows, sizeof(int32_t));
    m->h_lab = gv_calloc(rows, sizeof(int32_t));
    if (!m->h_loss || !m->h_correct || !m->h_tok || !m->h_lab) {
        gv_log(GV_LOG_ERROR, "nn: cannot allocate host staging for %zu predictions", rows);
        return GV_ERR_NOMEM;
    }
    return GV_OK;
}

gv_status_t gv_nn_model_create(struct gv_nn_backend *be, const struct gv_nn_model_cfg *cfg,
                               struct gv_nn_model **model_p)
{
    GV_NN_TRY(model_cfg_check(cfg));
    struct gv_nn_model *m = gv_calloc(1, sizeof(*m));
    if (m == NULL)
        return GV_ERR_NOMEM;
    m->be = be;
    m->cfg = *cfg;
    gv_status_t status;
    if (cfg->kind == GV_NN_LSTM)
        status = nn_lstm_define(m);
    else {
        model_define_images(m);
        status = GV_OK;
    }
    if (status == GV_OK)
        status = model_alloc(m);
    if (status != GV_OK) {
        gv_nn_model_destroy(m);
        return status;
    }
    *model_p = m;
    return GV_OK;
}

void gv_nn_model_destroy(struct gv_nn_model *m)
{
    if (m == NULL)
        return;
    if (m->ws != NULL)
        m->be->ops->free(m->be, m->ws);
    if (m->arena != NULL)
        m->be->ops->free(m->be, m->arena);
    gv_free(m->h_loss);
    gv_free(m->h_correct);
    gv_free(m->h_tok);
    gv_free(m->h_lab);
    gv_free(m);
}

const struct gv_nn_model_cfg *gv_nn_model_cfg(const struct gv_nn_model *m)
{
    return &m->cfg;
}

struct gv_nn_backend *gv_nn_model_backend(const struct gv_nn_model *m)
{
    return m->be;
}

size_t gv_nn_model_workspace_bytes(const struct gv_nn_model *m)
{
    return m->ws_bytes;
}

size_t gv_nn_model_numel(const struct gv_nn_model *m)
{
    return m->numel;
}

int gv_nn_model_tensor_count(const struct gv_nn_model *m)
{
    return m->n_t;
}

const struct gv_nn_tensor *gv_nn_model_tensor(const struct gv_nn_model *m, int i)
{
    return i >= 0 && i < m->n_t ? &m->t[i] : NULL;
}

float *gv_nn_model_params(struct gv_nn_model *m)
{
    return m->arena;
}

float *gv_nn_model_grads(struct gv_nn_model *m)
{
    return m->arena + m->numel;
}

float *gv_nn_model_momentum(struct gv_nn_model *m)
{
    return m->arena + 2 * m->numel;
}

gv_status_t gv_nn_model_init(struct gv_nn_model *m, uint64_t seed)
{
    float *host = gv_malloc(m->numel * sizeof(float));
    if (host == NULL) {
        gv_log(GV_LOG_ERROR, "nn: cannot allocate %zu floats to initialise", m->numel);
        return GV_ERR_NOMEM;
    }
    for (int i = 0; i < m->n_t; i++) {
        float *p = host + m->t[i].offset;
        for (size_t j = 0; j < m->t[i].numel; j++)
            p[j] = m->t_bound[i] > 0.0f ? gv_nn_init_uniform(seed, (uint64_t)i, j, m->t_bound[i])
                                        : m->t_const[i];
    }
    if (m->cfg.kind == GV_NN_LSTM) /* forget-gate bias 1: remember by default */
        for (int l = 0; l < m->cfg.layers; l++) {
            float *b = host + m->t[m->lstm.layer[l].b].offset;
            for (int j = 0; j < m->cfg.hidden; j++)
                b[m->cfg.hidden + j] = 1.0f;
        }
    gv_status_t status = m->be->ops->upload(m->be, m->arena, host, m->numel * sizeof(float));
    gv_free(host);
    if (status != GV_OK)
        return status;
    return m->be->ops->zero(m->be, m->arena + m->numel, 2 * m->numel * sizeof(float));
}

gv_status_t gv_nn_model_get_params(struct gv_nn_model *m, float *host)
{
    return m->be->ops->download(m->be, host, m->arena, m->numel * sizeof(float));
}

gv_status_t gv_nn_model_set_params(struct gv_nn_model *m, const float *host)
{
    return m->be->ops->upload(m->be, m->arena, host, m->numel * sizeof(float));
}

gv_status_t gv_nn_model_get_grads(struct gv_nn_model *m, float *host)
{
    return m->be->ops->download(m->be, host, m->arena + m->numel, m->numel * sizeof(float));
}

gv_status_t gv_nn_model_set_grads(struct gv_nn_model *m, const float *host)
{
    return m->be->ops->upload(m->be, m->arena + m->numel, host, m->numel * sizeof(float));
}

gv_status_t gv_nn_model_optim_step(struct gv_nn_model *m, const struct gv_optim_cfg *cfg, int64_t t)
{
    return gv_optim_step(m->be, cfg, t, m->arena, m->arena + 2 * m->numel, m->arena + m->numel,
                         m->numel);
}

/* ---------------------------------------------------------------- image models */

/* The hooks' calls (none without hooks). */
static gv_status_t hook_need(const struct gv_nn_hooks *h, const struct gv_nn_model *m, int t,
                             size_t a, size_t b)
{
    if (h == NULL || h->params_needed == NULL || t < 0)
        return GV_OK;
    return h->params_needed(h->user, m->t[t].offset + a, m->t[t].offset + b);
}

static gv_status_t hook_ready(const struct gv_nn_hooks *h, const struct gv_nn_model *m, int t,
                              size_t a)
{
    if (h == NULL || h->grads_ready == NULL || t < 0)
        return GV_OK;
    return h->grads_ready(h->user, m->t[t].offset + a);
}

/* Rows of a dense weight per block: whole rows of at least NN_DENSE_BLOCK elements, a multiple
 * of 16, with or without hooks: a BLAS may sum an element of a product of other shapes in
 * another order, so the blocks are the same on both paths and the bits with them. */
#define NN_DENSE_BLOCK ((size_t)131072)

static int dense_rows_per_block(const struct nn_layer *l)
{
    size_t r = (NN_DENSE_BLOCK + (size_t)l->in_dim - 1) / (size_t)l->in_dim;
    r = (r + 15) / 16 * 16;
    return r >= (size_t)l->out_dim ? l->out_dim : (int)r;
}

/* The first row of the block that ends at row hi (> 0). */
static int dense_block_lo(int hi, int rows)
{
    return (hi - 1) / rows * rows;
}

/* y = x W^T + b in blocks of output columns, the last rows of W first (the order in which a
 * worker's updates come back: docs/ps-bench.md section 6), each block once its rows of W are final.
 */
static gv_status_t dense_fwd(struct gv_nn_model *m, const struct gv_nn_hooks *h,
                             const struct nn_layer *l, const float *x, int n)
{
    struct gv_nn_backend *be = m->be;
    int rows = dense_rows_per_block(l), in = l->in_dim, out = l->out_dim;
    const float *w = nn_param(m, l->wt);
    for (int hi = out; hi > 0;) {
        int lo = dense_block_lo(hi, rows);
        GV_NN_TRY(hook_need(h, m, l->wt, (size_t)lo * (size_t)in, (size_t)hi * (size_t)in));
        GV_NN_TRY(be->ops->gemm(be, 0, 1, n, hi - lo, in, 1.0f, x, in, w + (size_t)lo * in, in,
                                0.0f, l->out + lo, out));
        hi = lo;
    }
    GV_NN_TRY(hook_need(h, m, l->bt, 0, (size_t)out));
    return be->ops->bias_add(be, l->out, nn_param(m, l->bt), n, out);
}

/* The input's gradient first (it needs the whole of W, which may change once W's gradient has
 * left), then the bias's, then W's in blocks of rows from the last, each reported when done. */
static gv_status_t dense_bwd(struct gv_nn_model *m, const struct gv_nn_hooks *h,
                             const struct nn_layer *l, const float *x, float *dx, int n)
{
    struct gv_nn_backend *be = m->be;
    int rows = dense_rows_per_block(l), in = l->in_dim, out = l->out_dim;
    const float *dy = l->dout;
    float *dw = nn_grad(m, l->wt);
    if (dx != NULL)
        GV_NN_TRY(be->ops->gemm(be, 0, 0, n, in, out, 1.0f, dy, out, nn_param(m, l->wt), in, 0.0f,
                                dx, in));
    GV_NN_TRY(be->ops->bias_grad(be, nn_grad(m, l->bt), dy, n, out));
    GV_NN_TRY(hook_ready(h, m, l->bt, 0));
    for (int hi = out; hi > 0;) {
        int lo = dense_block_lo(hi, rows);
        GV_NN_TRY(be->ops->gemm(be, 1, 0, hi - lo, in, n, 1.0f, dy + lo, out, x, in, 1.0f,
                                dw + (size_t)lo * in, in));
        GV_NN_TRY(hook_ready(h, m, l->wt, (size_t)lo * (size_t)in));
        hi = lo;
    }
    return GV_OK;
}

static gv_status_t model_forward(struct gv_nn_model *m, const struct gv_nn_hooks *h, int n)
{
    struct gv_nn_backend *be = m->be;
    const float *in = m->x;
    for (int i = 0; i < m->n_l; i++) {
        struct nn_layer *l = &m->l[i];
        switch (l->kind) {
        case NN_L_DENSE: GV_NN_TRY(dense_fwd(m, h, l, in, n)); break;
        case NN_L_RELU:
            GV_NN_TRY(be->ops->relu_fwd(be, in, l->out, (size_t)n * (size_t)l->out_dim));
            break;
        case NN_L_CONV:
            GV_NN_TRY(hook_need(h, m, l->wt, 0, m->t[l->wt].numel));
            GV_NN_TRY(hook_need(h, m, l->bt, 0, m->t[l->bt].numel));
            GV_NN_TRY(gv_nn_conv_fwd(be, in, nn_param(m, l->wt), nn_param(m, l->bt), l->out, l->col,
                                     &l->cs, n));
            break;
        case NN_L_POOL:
            GV_NN_TRY(be->ops->pool_fwd(be, in, n, l->cs.h, l->cs.w, l->cs.c, l->out, l->arg));
            break;
        }
        in = l->out;
    }
    return GV_OK;
}

static gv_status_t model_backward(struct gv_nn_model *m, const struct gv_nn_hooks *h, int n)
{
    struct gv_nn_backend *be = m->be;
    for (int i = m->n_l - 1; i >= 0; i--) {
        struct nn_layer *l = &m->l[i];
        float *dx = i > 0 ? m->l[i - 1].dout : NULL;
        const float *x = i > 0 ? m->l[i - 1].out : m->x;
        switch (l->kind) {
        case NN_L_DENSE: GV_NN_TRY(dense_bwd(m, h, l, x, dx, n)); break;
        case NN_L_RELU:
            if (dx != NULL)
                GV_NN_TRY(
                    be->ops->relu_bwd(be, l->out, l->dout, dx, (size_t)n * (size_t)l->out_dim));
            break;
        case NN_L_CONV:
            GV_NN_TRY(gv_nn_conv_bwd(be, nn_param(m, l->wt), l->dout, dx, nn_grad(m, l->wt),
                                     nn_grad(m, l->bt), l->col, &l->cs, n));
            GV_NN_TRY(hook_ready(h, m, l->wt, 0));
            break;
        case NN_L_POOL:
            if (dx != NULL)
                GV_NN_TRY(be->ops->pool_bwd(be, l->dout, l->arg, n, l->cs.h, l->cs.w, l->cs.c, dx));
            break;
        }
    }
    return GV_OK;
}

/* ---------------------------------------------------------------- steps */

static gv_status_t model_check_batch(const struct gv_nn_model *m, const struct gv_nn_batch *b)
{
    const struct gv_nn_model_cfg *c = &m->cfg;
    if (b == NULL || b->n < 1 || b->n > c->max_batch || b->labels == NULL ||
        (c->kind == GV_NN_LSTM ? b->tokens == NULL : b->x == NULL)) {
        gv_log(GV_LOG_ERROR, "nn: bad batch (n %d, max_batch %d, or missing arrays)", b ? b->n : -1,
               c->max_batch);
        return GV_ERR_INVAL;
    }
    size_t rows = (size_t)b->n * (size_t)m->rows;
    for (size_t i = 0; i < rows; i++) {
        if (b->labels[i] < 0 || b->labels[i] >= c->n_classes) {
            gv_log(GV_LOG_ERROR, "nn: label %d at %zu out of range [0, %d)", (int)b->labels[i], i,
                   c->n_classes);
            return GV_ERR_INVAL;
        }
        if (c->kind == GV_NN_LSTM && (b->tokens[i] < 0 || b->tokens[i] >= c->n_classes)) {
            gv_log(GV_LOG_ERROR, "nn: token %d at %zu out of range [0, %d)", (int)b->tokens[i], i,
                   c->n_classes);
            return GV_ERR_INVAL;
        }
    }
    return GV_OK;
}

static gv_status_t model_upload(struct gv_nn_model *m, const struct gv_nn_batch *b)
{
    struct gv_nn_backend *be = m->be;
    int n = b->n;
    if (m->cfg.kind != GV_NN_LSTM) {
        GV_NN_TRY(be->ops->upload(be, m->x, b->x, (size_t)n * (size_t)m->in_dim * sizeof(float)));
        return be->ops->upload(be, m->labels, b->labels, (size_t)n * sizeof(int32_t));
    }
    /* The LSTM works time-major so that each step is one contiguous [n][.] block. */
    int T = m->cfg.seq_len;
    for (int s = 0; s < n; s++)
        for (int t = 0; t < T; t++) {
            m->h_tok[t * n + s] = b->tokens[s * T + t];
            m->h_lab[t * n + s] = b->labels[s * T + t];
        }
    size_t bytes = (size_t)n * (size_t)T * sizeof(int32_t);
    GV_NN_TRY(be->ops->upload(be, m->tokens, m->h_tok, bytes));
    return be->ops->upload(be, m->labels, m->h_lab, bytes);
}

static gv_status_t model_loss(struct gv_nn_model *m, int n, int train, struct gv_nn_stats *st)
{
    struct gv_nn_backend *be = m->be;
    int rows = n * m->rows;
    GV_NN_TRY(be->ops->xent(be, m->logits, m->labels, rows, m->cfg.n_classes, 1.0f / (float)rows,
                            train ? m->dlogits : NULL, m->loss, m->correct));
    if (st == NULL)
        return GV_OK;
    GV_NN_TRY(be->ops->download(be, m->h_loss, m->loss, (size_t)rows * sizeof(float)));
    GV_NN_TRY(be->ops->download(be, m->h_correct, m->correct, (size_t)rows * sizeof(int32_t)));
    struct gv_nn_stats s = {0.0, 0, rows};
    for (int i = 0; i < rows; i++) {
        s.loss_sum += m->h_loss[i];
        s.correct += m->h_correct[i] != 0;
    }
    *st = s;
    return GV_OK;
}

static gv_status_t model_run(struct gv_nn_model *m, const struct gv_nn_batch *b, int train,
                             const struct gv_nn_hooks *h, struct gv_nn_stats *st)
{
    GV_NN_TRY(model_check_batch(m, b));
    GV_NN_TRY(model_upload(m, b));
    int lstm = m->cfg.kind == GV_NN_LSTM;
    if (lstm && h != NULL && h->params_needed != NULL)
        GV_NN_TRY(h->params_needed(h->user, 0, m->numel));
    GV_NN_TRY(lstm ? nn_lstm_forward(m, b->n) : model_forward(m, h, b->n));
    GV_NN_TRY(model_loss(m, b->n, train, st));
    if (!train)
        return GV_OK;
    GV_NN_TRY(m->be->ops->zero(m->be, m->arena + m->numel, m->numel * sizeof(float)));
    GV_NN_TRY(lstm ? nn_lstm_backward(m, b->n) : model_backward(m, h, b->n));
    if (h != NULL && h->grads_ready != NULL) /* every gradient, whatever the model reported */
        return h->grads_ready(h->user, 0);
    return GV_OK;
}

gv_status_t gv_nn_model_train_step(struct gv_nn_model *m, const struct gv_nn_batch *b,
                                   struct gv_nn_stats *stats_p)
{
    return model_run(m, b, 1, NULL, stats_p);
}

gv_status_t gv_nn_model_train_step_hooked(struct gv_nn_model *m, const struct gv_nn_batch *b,
                                          const struct gv_nn_hooks *hooks,
                                          struct gv_nn_stats *stats_p)
{
    return model_run(m, b, 1, hooks, stats_p);
}

gv_status_t gv_nn_model_eval_batch(struct gv_nn_model *m, const struct gv_nn_batch *b,
                                   struct gv_nn_stats *stats_p)
{
    return model_run(m, b, 0, NULL, stats_p);
}
