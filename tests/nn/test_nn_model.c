/* test_nn_model.c: model objects: tensor layout over the flat vectors, deterministic seeded
 * initialisation, host copies, config and batch validation, evaluation leaving gradients alone,
 * bitwise-reproducible training on the CPU, learning on synthetic data for every model, and
 * allocation-failure injection over model creation. */
#include "check.h"
#include "nn_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static struct gv_nn_backend *be;

static void quiet_cb(enum gv_log_level level, const char *line, void *arg)
{
    (void)level, (void)line;
    (*(int *)arg)++;
}

static void test_layout(void)
{
    struct gv_nn_model_cfg cfg;
    struct gv_nn_model *m = NULL;
    gv_nn_model_cfg_default(GV_NN_MLP, &cfg);
    GV_CHECK_OK(gv_nn_model_create(be, &cfg, &m));
    if (m == NULL)
        return;
    /* 784-256-128-10 */
    GV_CHECK_EQ(gv_nn_model_numel(m), 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
    GV_CHECK_EQ(gv_nn_model_tensor_count(m), 6);
    const struct gv_nn_tensor *t0 = gv_nn_model_tensor(m, 0), *t5 = gv_nn_model_tensor(m, 5);
    GV_CHECK_STREQ(t0->name, "fc1.w");
    GV_CHECK_EQ(t0->shape[0], 256);
    GV_CHECK_EQ(t0->shape[1], 784);
    GV_CHECK_STREQ(t5->name, "fc3.b");
    GV_CHECK(gv_nn_model_tensor(m, 6) == NULL && gv_nn_model_tensor(m, -1) == NULL);
    size_t at = 0;
    for (int i = 0; i < gv_nn_model_tensor_count(m); i++) {
        GV_CHECK_EQ(gv_nn_model_tensor(m, i)->offset, at); /* contiguous, in order */
        at += gv_nn_model_tensor(m, i)->numel;
    }
    GV_CHECK_EQ(at, gv_nn_model_numel(m));
    /* one arena: params | grads | momentum */
    GV_CHECK(gv_nn_model_grads(m) == gv_nn_model_params(m) + at);
    GV_CHECK(gv_nn_model_momentum(m) == gv_nn_model_params(m) + 2 * at);
    gv_nn_model_destroy(m);

    gv_nn_model_cfg_default(GV_NN_CNN, &cfg);
    GV_CHECK_OK(gv_nn_model_create(be, &cfg, &m));
    if (m != NULL) {
        GV_CHECK_EQ(gv_nn_model_numel(m),
                    16 * 9 + 16 + 32 * 144 + 32 + 7 * 7 * 32 * 128 + 128 + 128 * 10 + 10);
        GV_CHECK_STREQ(gv_nn_model_tensor(m, 2)->name, "conv2.w");
        gv_nn_model_destroy(m);
    }
    gv_nn_model_cfg_default(GV_NN_LSTM, &cfg);
    cfg.n_classes = 80;
    GV_CHECK_OK(gv_nn_model_create(be, &cfg, &m));
    if (m != NULL) {
        GV_CHECK_EQ(gv_nn_model_numel(m), 80 * 32 + 512 * 32 + 512 * 128 + 512 + 80 * 128 + 80);
        GV_CHECK_STREQ(gv_nn_model_tensor(m, 2)->name, "lstm0.wh");
        gv_nn_model_destroy(m);
    }
}

static void test_init(void)
{
    struct gv_nn_model_cfg cfg;
    struct gv_nn_model *a = NULL, *b = NULL;
    gv_nn_model_cfg_default(GV_NN_LSTM, &cfg);
    cfg.n_classes = 50;
    GV_CHECK_OK(gv_nn_model_create(be, &cfg, &a));
    GV_CHECK_OK(gv_nn_model_create(be, &cfg, &b));
    if (a == NULL || b == NULL)
        goto out;
    size_t n = gv_nn_model_numel(a);
    float *pa = malloc(n * sizeof(float)), *pb = malloc(n * sizeof(float));
    GV_CHECK_OK(gv_nn_model_init(a, 1234));
    GV_CHECK_OK(gv_nn_model_init(b, 1234));
    GV_CHECK_OK(gv_nn_model_get_params(a, pa));
    GV_CHECK_OK(gv_nn_model_get_params(b, pb));
    GV_CHECK(memcmp(pa, pb, n * sizeof(float)) == 0);
    /* a fixed element, so a change to the generator cannot go unnoticed across hosts */
    GV_CHECK(pa[0] == gv_nn_init_uniform(1234, 0, 0, 1.0f));
    /* forget-gate bias 1, other biases 0 */
    const struct gv_nn_tensor *bias = gv_nn_model_tensor(a, 3);
    GV_CHECK_STREQ(bias->name, "lstm0.b");
    GV_CHECK(pa[bias->offset] == 0.0f && pa[bias->offset + 128] == 1.0f &&
             pa[bias->offset + 256] == 0.0f);
    /* bounded by 1/sqrt(H) and not constant */
    const struct gv_nn_tensor *wh = gv_nn_model_tensor(a, 2);
    float lo = 1, hi = -1;
    for (size_t i = 0; i < wh->numel; i++) {
        float v = pa[wh->offset + i];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    GV_CHECK(hi <= 1.0f / sqrtf(128.0f) && lo >= -1.0f / sqrtf(128.0f) && hi - lo > 0.1f);
    GV_CHECK_OK(gv_nn_model_init(b, 1235));
    GV_CHECK_OK(gv_nn_model_get_params(b, pb));
    GV_CHECK(memcmp(pa, pb, n * sizeof(float)) != 0);
    /* set/get round trip, grads too */
    pb[7] = 42.0f;
    GV_CHECK_OK(gv_nn_model_set_params(a, pb));
    GV_CHECK_OK(gv_nn_model_get_params(a, pa));
    GV_CHECK(pa[7] == 42.0f);
    GV_CHECK_OK(gv_nn_model_set_grads(a, pb));
    GV_CHECK_OK(gv_nn_model_get_grads(a, pa));
    GV_CHECK(memcmp(pa, pb, n * sizeof(float)) == 0);
    free(pa);
    free(pb);
out:
    gv_nn_model_destroy(a);
    gv_nn_model_destroy(b);
}

static void test_bad_input(void)
{
    struct gv_nn_model_cfg cfg;
    struct gv_nn_model *m = NULL;
    int logged = 0;
    gv_log_set_cb(quiet_cb, &logged);
    gv_nn_model_cfg_default(GV_NN_CNN, &cfg);
    cfg.in_h = 30; /* not divisible by 4 */
    GV_CHECK_STATUS(gv_nn_model_create(be, &cfg, &m), GV_ERR_INVAL);
    gv_nn_model_cfg_default(GV_NN_MLP, &cfg);
    cfg.max_batch = 0;
    GV_CHECK_STATUS(gv_nn_model_create(be, &cfg, &m), GV_ERR_INVAL);
    gv_nn_model_cfg_default(GV_NN_LSTM, &cfg);
    cfg.n_classes = 300;
    GV_CHECK_STATUS(gv_nn_model_create(be, &cfg, &m), GV_ERR_INVAL);
    GV_CHECK(m == NULL);
    GV_CHECK(logged >= 3);

    gv_nn_model_cfg_default(GV_NN_SOFTMAX, &cfg);
    cfg.in_h = 2, cfg.in_w = 2, cfg.max_batch = 4;
    GV_CHECK_OK(gv_nn_model_create(be, &cfg, &m));
    if (m != NULL) {
        float x[5 * 4] = {0};
        int32_t lab[5] = {1, 2, 3, 4, 5};
        struct gv_nn_batch b = {.n = 2, .x = x, .labels = lab};
        GV_CHECK_OK(gv_nn_model_train_step(m, &b, NULL));
        lab[1] = 10; /* out of range */
        GV_CHECK_STATUS(gv_nn_model_train_step(m, &b, NULL), GV_ERR_INVAL);
        lab[1] = -1;
        GV_CHECK_STATUS(gv_nn_model_eval_batch(m, &b, NULL), GV_ERR_INVAL);
        lab[1] = 2;
        b.n = 5; /* > max_batch */
        GV_CHECK_STATUS(gv_nn_model_train_step(m, &b, NULL), GV_ERR_INVAL);
        b.n = 2;
        b.x = NULL;
        GV_CHECK_STATUS(gv_nn_model_train_step(m, &b, NULL), GV_ERR_INVAL);
        gv_nn_model_destroy(m);
    }
    gv_log_set_cb(NULL, NULL);
}

/* Synthetic data, a few hundred steps: each model must learn, and two runs with the same seed
 * must end with the same bits (CPU). */
static double train_synthetic(enum gv_nn_model_kind kind, float *params_out, size_t *n_out)
{
    struct gv_nn_dataset *tr = NULL, *te = NULL;
    struct gv_nn_model_cfg cfg;
    struct gv_nn_model *m = NULL;
    struct gv_optim_cfg oc;
    struct gv_nn_sampler s;
    struct gv_nn_batch_buf buf, ebuf;
    struct gv_nn_eval ev = {0};
    int h = kind == GV_NN_CNN ? 8 : 1, w = kind == GV_NN_CNN ? 8 : 64;
    GV_CHECK_OK(gv_nn_dataset_synthetic(h, w, 1, 10, 4096, 1024, 1.5f, 5, &tr, &te));
    gv_nn_model_cfg_default(kind, &cfg);
    cfg.in_h = h, cfg.in_w = w, cfg.in_c = 1, cfg.max_batch = 128;
    cfg.widths[0] = 64, cfg.n_widths = 1;
    cfg.conv1 = 8, cfg.conv2 = 8, cfg.cnn_dense = 32;
    gv_optim_cfg_default(&oc);
    oc.lr = 0.02f;
    GV_CHECK_OK(gv_nn_model_create(be, &cfg, &m));
    GV_CHECK_OK(gv_nn_model_init(m, 3));
    GV_CHECK_OK(gv_nn_sampler_init(&s, tr->n, 0, 1, 11));
    GV_CHECK_OK(gv_nn_batch_buf_init(&buf, tr, 32));
    GV_CHECK_OK(gv_nn_batch_buf_init(&ebuf, te, 128));
    size_t idx[32];
    for (int64_t t = 0; t < (kind == GV_NN_CNN ? 600 : 200); t++) {
        struct gv_nn_batch b;
        GV_CHECK_OK(gv_nn_sampler_next(&s, 32, idx, NULL));
        GV_CHECK_OK(gv_nn_batch_gather(tr, idx, 32, &buf, &b));
        GV_CHECK_OK(gv_nn_model_train_step(m, &b, NULL));
        GV_CHECK_OK(gv_nn_model_optim_step(m, &oc, t));
    }
    GV_CHECK_OK(gv_nn_evaluate(m, te, 128, 0, &ebuf, &ev));
    *n_out = gv_nn_model_numel(m);
    GV_CHECK_OK(gv_nn_model_get_params(m, params_out));
    GV_CHECK_EQ(ev.count, 1024);
    gv_nn_batch_buf_cleanup(&buf);
    gv_nn_batch_buf_cleanup(&ebuf);
    gv_nn_sampler_cleanup(&s);
    gv_nn_model_destroy(m);
    gv_nn_dataset_destroy(tr);
    gv_nn_dataset_destroy(te);
    return ev.accuracy;
}

static void test_learns(void)
{
    static float p1[1 << 20], p2[1 << 20];
    enum gv_nn_model_kind kinds[] = {GV_NN_SOFTMAX, GV_NN_MLP, GV_NN_CNN};
    for (size_t k = 0; k < GV_ARRAY_LEN(kinds); k++) {
        size_t n1 = 0, n2 = 0;
        double a1 = train_synthetic(kinds[k], p1, &n1);
        double a2 = train_synthetic(kinds[k], p2, &n2);
        printf("  %-8s synthetic test accuracy %.3f\n", gv_nn_model_kind_str(kinds[k]), a1);
        GV_CHECK_MSG(a1 > 0.9, "%s learns the Gaussian mixture: accuracy %.3f",
                     gv_nn_model_kind_str(kinds[k]), a1);
        GV_CHECK(n1 == n2 && a1 == a2 && memcmp(p1, p2, n1 * sizeof(float)) == 0);
    }
}

/* The LSTM learns a periodic text far below the uniform perplexity. */
static void test_lstm_learns(void)
{
    static const char pattern[] = "the quick brown fox jumps over the lazy dog. ";
    struct gv_nn_dataset ds;
    memset(&ds, 0, sizeof(ds));
    ds.kind = GV_NN_DATA_TEXT;
    ds.seq_len = 16;
    ds.n_tokens = 4000;
    ds.tokens = malloc(ds.n_tokens);
    int vocab = 0, id[256];
    memset(id, -1, sizeof(id));
    for (size_t i = 0; i < ds.n_tokens; i++) {
        unsigned char ch = (unsigned char)pattern[i % (sizeof(pattern) - 1)];
        if (id[ch] < 0)
            id[ch] = vocab++;
        ds.tokens[i] = (uint8_t)id[ch];
    }
    ds.n_classes = vocab;
    ds.n = (ds.n_tokens - 1) / 16;
    struct gv_nn_model_cfg cfg;
    gv_nn_model_cfg_default(GV_NN_LSTM, &cfg);
    cfg.n_classes = vocab, cfg.hidden = 32, cfg.embed = 8, cfg.seq_len = 16, cfg.max_batch = 16;
    struct gv_nn_model *m = NULL;
    struct gv_optim_cfg oc;
    gv_optim_cfg_default(&oc);
    oc.lr = 0.5f;
    oc.momentum = 0.5f;
    struct gv_nn_sampler s;
    struct gv_nn_batch_buf buf;
    struct gv_nn_eval ev = {0};
    GV_CHECK_OK(gv_nn_model_create(be, &cfg, &m));
    GV_CHECK_OK(gv_nn_model_init(m, 1));
    GV_CHECK_OK(gv_nn_sampler_init(&s, ds.n, 0, 1, 2));
    GV_CHECK_OK(gv_nn_batch_buf_init(&buf, &ds, 16));
    size_t idx[16];
    for (int64_t t = 0; t < 300 && m != NULL; t++) {
        struct gv_nn_batch b;
        GV_CHECK_OK(gv_nn_sampler_next(&s, 16, idx, NULL));
        GV_CHECK_OK(gv_nn_batch_gather(&ds, idx, 16, &buf, &b));
        GV_CHECK_OK(gv_nn_model_train_step(m, &b, NULL));
        GV_CHECK_OK(gv_nn_model_optim_step(m, &oc, t));
    }
    if (m != NULL)
        GV_CHECK_OK(gv_nn_evaluate(m, &ds, 16, 0, &buf, &ev));
    printf("  lstm periodic text: perplexity %.3f (uniform %d), accuracy %.3f\n", ev.perplexity,
           vocab, ev.accuracy);
    GV_CHECK(ev.perplexity < 2.0 && ev.accuracy > 0.8);
    gv_nn_batch_buf_cleanup(&buf);
    gv_nn_sampler_cleanup(&s);
    gv_nn_model_destroy(m);
    free(ds.tokens);
}

/* Evaluation leaves the gradients alone (workers evaluate between steps). */
static void test_eval_keeps_grads(void)
{
    struct gv_nn_model_cfg cfg;
    struct gv_nn_model *m = NULL;
    gv_nn_model_cfg_default(GV_NN_MLP, &cfg);
    cfg.in_h = 4, cfg.in_w = 4, cfg.max_batch = 2;
    GV_CHECK_OK(gv_nn_model_create(be, &cfg, &m));
    if (m == NULL)
        return;
    GV_CHECK_OK(gv_nn_model_init(m, 1));
    float x[32], g1[50000], g2[50000];
    for (int i = 0; i < 32; i++)
        x[i] = (float)i / 32.0f;
    int32_t lab[2] = {3, 7};
    struct gv_nn_batch b = {.n = 2, .x = x, .labels = lab};
    struct gv_nn_stats st1, st2;
    size_t n = gv_nn_model_numel(m);
    GV_CHECK(n <= 50000);
    GV_CHECK_OK(gv_nn_model_train_step(m, &b, &st1));
    GV_CHECK_OK(gv_nn_model_get_grads(m, g1));
    lab[0] = 1;
    GV_CHECK_OK(gv_nn_model_eval_batch(m, &b, &st2));
    GV_CHECK_OK(gv_nn_model_get_grads(m, g2));
    GV_CHECK(memcmp(g1, g2, n * sizeof(float)) == 0);
    GV_CHECK(st1.loss_sum != st2.loss_sum);
    gv_nn_model_destroy(m);
}

/* Every allocation in model creation can fail: no leak (ASan), no crash, a clean status. */
static void test_alloc_failures(void)
{
    struct gv_nn_model_cfg cfg;
    gv_nn_model_cfg_default(GV_NN_LSTM, &cfg);
    cfg.n_classes = 20, cfg.hidden = 8, cfg.embed = 4, cfg.seq_len = 4, cfg.max_batch = 2;
    int logged = 0;
    gv_log_set_cb(quiet_cb, &logged);
    gv_alloc_fail_nth(0);
    struct gv_nn_model *m = NULL;
    GV_CHECK_OK(gv_nn_model_create(be, &cfg, &m));
    uint64_t count = gv_alloc_fail_nth(0);
    gv_nn_model_destroy(m);
    GV_CHECK(count >= 4);
    for (uint64_t k = 1; k <= count; k++) {
        m = NULL;
        gv_alloc_fail_nth(k);
        gv_status_t status = gv_nn_model_create(be, &cfg, &m);
        gv_alloc_fail_nth(0);
        GV_CHECK_MSG(status == GV_ERR_NOMEM && m == NULL, "failing allocation %llu: %s",
                     (unsigned long long)k, gv_status_str(status));
        gv_nn_model_destroy(m);
    }
    gv_log_set_cb(NULL, NULL);
}

/* The hooks of a training step (gravac-worker --overlap): a model whose parameters are NaN
 * until the forward pass asks for them (the hook copies them in, as a worker applies an update)
 * and whose reported gradients' parameters are made NaN at once (as an update landing there)
 * computes the same loss and gradients, bit for bit, as the plain step; every reported range is
 * final when reported, and the reports come from the last tensor to the first. */
struct hook_rec {
    const float *params_ref, *grads_ref; /* the plain step's */
    float *params, *grads;               /* the hooked model's */
    size_t n, lo_min, calls_ready, calls_need;
    bool order_ok, final_ok;
};

static gv_status_t rec_need(void *user, size_t lo, size_t hi)
{
    struct hook_rec *r = user;
    r->calls_need++;
    if (lo > hi || hi > r->n)
        return GV_ERR_INVAL;
    memcpy(r->params + lo, r->params_ref + lo, (hi - lo) * sizeof(float));
    return GV_OK;
}

static gv_status_t rec_ready(void *user, size_t lo)
{
    struct hook_rec *r = user;
    r->calls_ready++;
    r->order_ok &= lo <= r->lo_min;
    r->lo_min = lo;
    r->final_ok &= memcmp(r->grads + lo, r->grads_ref + lo, (r->n - lo) * sizeof(float)) == 0;
    for (size_t i = lo; i < r->n; i++)
        r->params[i] = NAN;
    return GV_OK;
}

static void hooks_case(enum gv_nn_model_kind kind, int width)
{
    struct gv_nn_dataset *tr = NULL, *te = NULL;
    struct gv_nn_model_cfg cfg;
    struct gv_nn_model *a = NULL, *b = NULL;
    int h = kind == GV_NN_CNN ? 8 : 1, w = kind == GV_NN_CNN ? 8 : 64;
    GV_CHECK_OK(gv_nn_dataset_synthetic(h, w, 1, 10, 256, 64, 1.5f, 5, &tr, &te));
    gv_nn_model_cfg_default(kind, &cfg);
    cfg.in_h = h, cfg.in_w = w, cfg.in_c = 1, cfg.max_batch = 32;
    cfg.widths[0] = width, cfg.widths[1] = 50, cfg.n_widths = 2;
    cfg.conv1 = 8, cfg.conv2 = 8, cfg.cnn_dense = 32;
    GV_CHECK_OK(gv_nn_model_create(be, &cfg, &a));
    GV_CHECK_OK(gv_nn_model_create(be, &cfg, &b));
    struct gv_nn_batch_buf buf;
    GV_CHECK_OK(gv_nn_batch_buf_init(&buf, tr, 32));
    if (a == NULL || b == NULL || tr == NULL)
        goto out;
    GV_CHECK_OK(gv_nn_model_init(a, 7));
    GV_CHECK_OK(gv_nn_model_init(b, 7));
    size_t n = gv_nn_model_numel(a), idx[32];
    for (int i = 0; i < 32; i++)
        idx[i] = (size_t)i * 3;
    struct gv_nn_batch bt;
    GV_CHECK_OK(gv_nn_batch_gather(tr, idx, 32, &buf, &bt));
    struct gv_nn_stats sa, sb;
    GV_CHECK_OK(gv_nn_model_train_step(a, &bt, &sa));
    float *pb = gv_nn_model_params(b);
    for (size_t i = 0; i < n; i++)
        pb[i] = NAN;
    struct hook_rec r = {.params_ref = gv_nn_model_params(a),
                         .grads_ref = gv_nn_model_grads(a),
                         .params = pb,
                         .grads = gv_nn_model_grads(b),
                         .n = n,
                         .lo_min = n,
                         .order_ok = true,
                         .final_ok = true};
    struct gv_nn_hooks hk = {.params_needed = rec_need, .grads_ready = rec_ready, .user = &r};
    GV_CHECK_OK(gv_nn_model_train_step_hooked(b, &bt, &hk, &sb));
    GV_CHECK_MSG(sa.loss_sum == sb.loss_sum && sa.correct == sb.correct,
                 "%s width %d: loss %.9g vs %.9g", gv_nn_model_kind_str(kind), width, sa.loss_sum,
                 sb.loss_sum);
    size_t first = n;
    for (size_t i = n; i-- > 0;)
        if (memcmp(gv_nn_model_grads(a) + i, gv_nn_model_grads(b) + i, sizeof(float)) != 0)
            first = i;
    GV_CHECK_MSG(first == n, "%s width %d: the gradients differ from element %zu of %zu",
                 gv_nn_model_kind_str(kind), width, first, n);
    GV_CHECK_MSG(r.order_ok && r.final_ok && r.lo_min == 0, "%s width %d: order %d final %d lo %zu",
                 gv_nn_model_kind_str(kind), width, r.order_ok, r.final_ok, r.lo_min);
    /* blocks: more reports than tensors when the first weight is larger than a block */
    if (kind == GV_NN_MLP && width * 64 > 131072)
        GV_CHECK_MSG(r.calls_ready > (size_t)gv_nn_model_tensor_count(a),
                     "%zu reports for %d tensors", r.calls_ready, gv_nn_model_tensor_count(a));
out:
    gv_nn_batch_buf_cleanup(&buf);
    gv_nn_model_destroy(a);
    gv_nn_model_destroy(b);
    gv_nn_dataset_destroy(tr);
    gv_nn_dataset_destroy(te);
}

static void test_hooks(void)
{
    hooks_case(GV_NN_MLP, 200);
    hooks_case(GV_NN_MLP, 4100); /* fc1: two blocks of 2048 rows and one of 4 */
    hooks_case(GV_NN_CNN, 0);
}

int main(void)
{
    GV_CHECK_OK(gv_nn_backend_create(GV_NN_CPU, 1, &be));
    if (be == NULL)
        return gv_check_summary();
    test_layout();
    test_init();
    test_bad_input();
    test_eval_keeps_grads();
    test_hooks();
    test_learns();
    test_lstm_learns();
    test_alloc_failures();
    gv_nn_backend_destroy(be);
    return gv_check_summary();
}
