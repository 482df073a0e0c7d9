/* model_lstm.c: the recurrent model, a character-level language model: embedding, a stack of
 * LSTM layers, a dense layer to the vocabulary and softmax cross-entropy at every step.
 * Truncated BPTT: each sample is a window of seq_len steps starting from zero state, and the
 * gradient flows back through that window only. Everything is time-major (row t*n + b), so the
 * input projection of all steps is one gemm and each step's recurrent product another. */
#include "nn_model.h"

#include <math.h>
#include <stdio.h>

gv_status_t nn_lstm_define(struct gv_nn_model *m)
{
    const struct gv_nn_model_cfg *c = &m->cfg;
    struct nn_lstm *s = &m->lstm;
    int V = c->n_classes, E = c->embed, H = c->hidden;
    float bound = 1.0f / sqrtf((float)H);
    char name[24];
    m->rows = c->seq_len;
    m->in_dim = 0;
    s->emb = nn_add_tensor(m, "embed.w", V, E, 1.0f, 0.0f);
    for (int l = 0; l < c->layers; l++) {
        struct nn_lstm_layer *y = &s->layer[l];
        y->in = l == 0 ? E : H;
        snprintf(name, sizeof(name), "lstm%d.wx", l);
        y->wx = nn_add_tensor(m, name, 4 * H, y->in, bound, 0.0f);
        snprintf(name, sizeof(name), "lstm%d.wh", l);
        y->wh = nn_add_tensor(m, name, 4 * H, H, bound, 0.0f);
        snprintf(name, sizeof(name), "lstm%d.b", l);
        y->b = nn_add_tensor(m, name, 4 * H, 0, 0.0f, 0.0f);
    }
    s->wo = nn_add_tensor(m, "out.w", V, H, bound, 0.0f);
    s->bo = nn_add_tensor(m, "out.b", V, 0, 0.0f, 0.0f);
    return GV_OK;
}

void nn_lstm_layout(struct gv_nn_model *m)
{
    const struct gv_nn_model_cfg *c = &m->cfg;
    struct nn_lstm *s = &m->lstm;
    size_t N = (size_t)c->max_batch, R = N * (size_t)c->seq_len, f = sizeof(float);
    size_t H = (size_t)c->hidden, E = (size_t)c->embed, V = (size_t)c->n_classes;
    m->tokens = nn_ws_take(m, R * sizeof(int32_t));
    s->x = nn_ws_take(m, R * E * f);
    s->dx = nn_ws_take(m, R * E * f);
    s->dgates = nn_ws_take(m, R * 4 * H * f);
    s->dc = nn_ws_take(m, N * H * f);
    s->dhn = nn_ws_take(m, N * H * f);
    s->zeros = nn_ws_take(m, N * H * f); /* the allocator zeroes; nothing writes it */
    for (int l = 0; l < c->layers; l++) {
        struct nn_lstm_layer *y = &s->layer[l];
        y->gates = nn_ws_take(m, R * 4 * H * f);
        y->c = nn_ws_take(m, R * H * f);
        y->h = nn_ws_take(m, R * H * f);
        y->dh = nn_ws_take(m, R * H * f);
    }
    m->logits = nn_ws_take(m, R * V * f);
    m->dlogits = nn_ws_take(m, R * V * f);
}

static gv_status_t lstm_layer_forward(struct gv_nn_model *m, struct nn_lstm_layer *y,
                                      const float *in, int n)
{
    struct gv_nn_backend *be = m->be;
    int T = m->cfg.seq_len, H = m->cfg.hidden, R = T * n;
    size_t step_h = (size_t)n * (size_t)H, step_g = 4 * step_h;
    GV_NN_TRY(
        gv_nn_dense_fwd(be, in, nn_param(m, y->wx), nn_param(m, y->b), y->gates, R, y->in, 4 * H));
    for (int t = 0; t < T; t++) {
        float *g = y->gates + (size_t)t * step_g;
        const float *hprev = t > 0 ? y->h + (size_t)(t - 1) * step_h : m->lstm.zeros;
        const float *cprev = t > 0 ? y->c + (size_t)(t - 1) * step_h : m->lstm.zeros;
        if (t > 0)
            GV_NN_TRY(be->ops->gemm(be, 0, 1, n, 4 * H, H, 1.0f, hprev, H, nn_param(m, y->wh), H,
                                    1.0f, g, 4 * H));
        GV_NN_TRY(be->ops->lstm_fwd(be, g, cprev, y->c + (size_t)t * step_h,
                                    y->h + (size_t)t * step_h, n, H));
    }
    return GV_OK;
}

gv_status_t nn_lstm_forward(struct gv_nn_model *m, int n)
{
    struct gv_nn_backend *be = m->be;
    struct nn_lstm *s = &m->lstm;
    const struct gv_nn_model_cfg *c = &m->cfg;
    int R = c->seq_len * n;
    GV_NN_TRY(be->ops->embed_fwd(be, nn_param(m, s->emb), m->tokens, R, c->embed, s->x));
    const float *in = s->x;
    for (int l = 0; l < c->layers; l++) {
        GV_NN_TRY(lstm_layer_forward(m, &s->layer[l], in, n));
        in = s->layer[l].h;
    }
    return gv_nn_dense_fwd(be, in, nn_param(m, s->wo), nn_param(m, s->bo), m->logits, R, c->hidden,
                           c->n_classes);
}

/* Back through time for one layer; y->dh holds d loss / d h from the layer above (or the output
 * projection) and is consumed. Writes d loss / d input into dx (R x y->in). */
static gv_status_t lstm_layer_backward(struct gv_nn_model *m, struct nn_lstm_layer *y,
                                       const float *in, float *dx, int n)
{
    struct gv_nn_backend *be = m->be;
    struct nn_lstm *s = &m->lstm;
    int T = m->cfg.seq_len, H = m->cfg.hidden, R = T * n;
    size_t step_h = (size_t)n * (size_t)H, step_g = 4 * step_h;
    GV_NN_TRY(be->ops->zero(be, s->dc, step_h * sizeof(float)));
    for (int t = T - 1; t >= 0; t--) {
        float *dh = y->dh + (size_t)t * step_h;
        float *dg = s->dgates + (size_t)t * step_g;
        const float *cprev = t > 0 ? y->c + (size_t)(t - 1) * step_h : s->zeros;
        if (t < T - 1)
            GV_NN_TRY(be->ops->add(be, dh, s->dhn, step_h));
        GV_NN_TRY(be->ops->lstm_bwd(be, y->gates + (size_t)t * step_g, cprev,
                                    y->c + (size_t)t * step_h, dh, s->dc, dg, n, H));
        if (t > 0)
            GV_NN_TRY(be->ops->gemm(be, 0, 0, n, H, 4 * H, 1.0f, dg, 4 * H, nn_param(m, y->wh), H,
                                    0.0f, s->dhn, H));
    }
    /* dW_h = sum over t >= 1 of dgates(t)^T h(t-1): one product over the shifted blocks. */
    if (T > 1)
        GV_NN_TRY(be->ops->gemm(be, 1, 0, 4 * H, H, (T - 1) * n, 1.0f, s->dgates + step_g, 4 * H,
                                y->h, H, 1.0f, nn_grad(m, y->wh), H));
    return gv_nn_dense_bwd(be, in, nn_param(m, y->wx), s->dgates, dx, nn_grad(m, y->wx),
                           nn_grad(m, y->b), R, y->in, 4 * H);
}

gv_status_t nn_lstm_backward(struct gv_nn_model *m, int n)
{
    struct gv_nn_backend *be = m->be;
    struct nn_lstm *s = &m->lstm;
    const struct gv_nn_model_cfg *c = &m->cfg;
    int L = c->layers, R = c->seq_len * n;
    GV_NN_TRY(gv_nn_dense_bwd(be, s->layer[L - 1].h, nn_param(m, s->wo), m->dlogits,
                              s->layer[L - 1].dh, nn_grad(m, s->wo), nn_grad(m, s->bo), R,
                              c->hidden, c->n_classes));
    for (int l = L - 1; l >= 0; l--) {
        const float *in = l > 0 ? s->layer[l - 1].h : s->x;
        float *dx = l > 0 ? s->layer[l - 1].dh : s->dx;
        GV_NN_TRY(lstm_layer_backward(m, &s->layer[l], in, dx, n));
    }
    return be->ops->embed_bwd(be, nn_grad(m, s->emb), m->tokens, s->dx, R, c->embed, c->n_classes);
}
