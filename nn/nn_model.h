/* nn_model.h: the model object shared by model.c (arena, tensors, image models) and
 * model_lstm.c (the recurrent model). Private to nn/. */
#ifndef GV_NN_MODEL_H
#define GV_NN_MODEL_H

#include "nn_internal.h"

#define NN_MAX_TENSORS 32
#define NN_MAX_LAYERS 24

enum nn_layer_kind { NN_L_DENSE, NN_L_RELU, NN_L_CONV, NN_L_POOL };

/* One layer of an image model. Activations are per-sample rows of out_dim floats. */
struct nn_layer {
    enum nn_layer_kind kind;
    int in_dim, out_dim;
    int wt, bt;                 /* tensor indices of weight and bias (-1: none) */
    struct gv_nn_conv_shape cs; /* conv geometry; pool uses cs.h, cs.w, cs.c */
    float *out;                 /* float[max_batch][out_dim], backend */
    float *dout;                /* float[max_batch][out_dim], backend: d loss / d out */
    float *col;                 /* conv: float[max_batch*oh*ow][k*k*c], backend */
    int32_t *arg;               /* pool: int32[max_batch][out_dim], backend */
};

/* One LSTM layer's per-batch state, all time-major (row t*n + b). */
struct nn_lstm_layer {
    int in;        /* input width */
    int wx, wh, b; /* tensor indices: W_x [4H][in], W_h [4H][H], b [4H] */
    float *gates;  /* float[T*N][4H]: activations after the forward pass */
    float *c;      /* float[T*N][H] */
    float *h;      /* float[T*N][H] */
    float *dh;     /* float[T*N][H]: d loss / d h from above */
};

struct nn_lstm {
    struct nn_lstm_layer layer[GV_NN_MAX_LSTM_LAYERS];
    int emb, wo, bo; /* tensor indices: embedding [V][E], output W [V][H], b [V] */
    float *x;        /* float[T*N][E] embedded inputs */
    float *dx;       /* float[T*N][max(E, H)] grad flowing to the layer below */
    float *dgates;   /* float[T*N][4H] */
    float *dc;       /* float[N][H] */
    float *dhn;      /* float[N][H] grad of h(t-1) from step t */
    float *zeros;    /* float[N][H] initial h and c */
};

struct gv_nn_model {
    struct gv_nn_backend *be; /* borrowed */
    struct gv_nn_model_cfg cfg;
    struct gv_nn_tensor t[NN_MAX_TENSORS];
    float t_bound[NN_MAX_TENSORS]; /* init: uniform bound, or ... */
    float t_const[NN_MAX_TENSORS]; /* ... this constant when the bound is 0 */
    int n_t;
    size_t numel;
    float *arena; /* float[3][numel], backend: params, grads, momentum */

    void *ws; /* workspace, one allocation, backend */
    size_t ws_bytes;
    int in_dim;              /* floats per image sample */
    int rows;                /* predictions per sample (1, or seq_len) */
    float *x;                /* float[max_batch][in_dim], backend */
    int32_t *tokens;         /* int32[T*N] time-major, backend */
    int32_t *labels;         /* int32[max_batch*rows], backend (time-major for the LSTM) */
    float *logits, *dlogits; /* [max_batch*rows][n_classes] */
    float *loss;             /* float[max_batch*rows], backend */
    int32_t *correct;        /* int32[max_batch*rows], backend */
    float *h_loss;           /* host staging */
    int32_t *h_correct, *h_tok, *h_lab;

    struct nn_layer l[NN_MAX_LAYERS];
    int n_l;
    struct nn_lstm lstm;
};

/* Workspace carving: in the sizing pass (m->ws == NULL) it only counts and returns NULL. */
void *nn_ws_take(struct gv_nn_model *m, size_t bytes);
int nn_add_tensor(struct gv_nn_model *m, const char *name, int d0, int d1, float bound, float cval);
static inline float *nn_param(struct gv_nn_model *m, int t)
{
    return m->arena + m->t[t].offset;
}
static inline float *nn_grad(struct gv_nn_model *m, int t)
{
    return m->arena + m->numel + m->t[t].offset;
}

/* model_lstm.c */
gv_status_t nn_lstm_define(struct gv_nn_model *m);
void nn_lstm_layout(struct gv_nn_model *m);
gv_status_t nn_lstm_forward(struct gv_nn_model *m, int n);
gv_status_t nn_lstm_backward(struct gv_nn_model *m, int n);

#endif /* GV_NN_MODEL_H */
