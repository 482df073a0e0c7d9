/* test_nn_cuda.c: the CUDA backend against the CPU backend (the oracle). For every model: the
 * same seed gives the same parameter bits; one forward+backward on the same batch gives the same
 * loss and gradients within tolerance: |g_cuda - g_cpu| <= 1e-6 + 1e-3 * max|g_cpu| per tensor
 * (cuBLAS sums in another order; everything else is element-wise); the optimizer kernel gives
 * the CPU step's bits exactly, and so does the velocity kernel of --local-momentum. Prints training
 * samples/s on both. Exits 77 (SKIP) without a GPU or without CUDA in the build. */
#include "check.h"
#include "nn_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static struct gv_nn_backend *cpu, *gpu;

struct pair {
    struct gv_nn_model *m[2];
    size_t n;
};

static void make_batch(const struct gv_nn_model_cfg *cfg, int n, float *x, int32_t *tok,
                       int32_t *lab, struct gv_nn_batch *b, uint64_t seed)
{
    int lstm = cfg->kind == GV_NN_LSTM, rows = lstm ? n * cfg->seq_len : n;
    int d = cfg->in_h * cfg->in_w * cfg->in_c;
    for (int i = 0; !lstm && i < n * d; i++)
        x[i] = gv_nn_init_uniform(seed, 1, (uint64_t)i, 1.0f);
    for (int i = 0; i < rows; i++) {
        tok[i] =
            (int32_t)((uint32_t)(gv_nn_init_uniform(seed, 2, (uint64_t)i, 1.0f) * 1e6f + 1e6f) %
                      (uint32_t)cfg->n_classes);
        lab[i] =
            (int32_t)((uint32_t)(gv_nn_init_uniform(seed, 3, (uint64_t)i, 1.0f) * 1e6f + 1e6f) %
                      (uint32_t)cfg->n_classes);
    }
    *b = (struct gv_nn_batch){
        .n = n, .x = lstm ? NULL : x, .tokens = lstm ? tok : NULL, .labels = lab};
}

static void compare_model(const char *name, const struct gv_nn_model_cfg *cfg, int n)
{
    struct gv_nn_model *mc = NULL, *mg = NULL;
    GV_CHECK_OK(gv_nn_model_create(cpu, cfg, &mc));
    GV_CHECK_OK(gv_nn_model_create(gpu, cfg, &mg));
    if (mc == NULL || mg == NULL)
        goto out;
    size_t np = gv_nn_model_numel(mc);
    float *pc = malloc(np * sizeof(float)), *pg = malloc(np * sizeof(float));
    float *gc = malloc(np * sizeof(float)), *gg = malloc(np * sizeof(float));
    size_t rows = (size_t)n * (size_t)(cfg->kind == GV_NN_LSTM ? cfg->seq_len : 1);
    float *x = malloc((size_t)n * (size_t)(cfg->in_h * cfg->in_w * cfg->in_c) * sizeof(float));
    int32_t *tok = malloc(rows * sizeof(int32_t)), *lab = malloc(rows * sizeof(int32_t));
    GV_CHECK_OK(gv_nn_model_init(mc, 5));
    GV_CHECK_OK(gv_nn_model_init(mg, 5));
    GV_CHECK_OK(gv_nn_model_get_params(mc, pc));
    GV_CHECK_OK(gv_nn_model_get_params(mg, pg));
    GV_CHECK_MSG(memcmp(pc, pg, np * sizeof(float)) == 0, "%s: init differs", name);
    struct gv_nn_batch b;
    struct gv_nn_stats sc, sg;
    make_batch(cfg, n, x, tok, lab, &b, 17);
    GV_CHECK_OK(gv_nn_model_train_step(mc, &b, &sc));
    GV_CHECK_OK(gv_nn_model_train_step(mg, &b, &sg));
    GV_CHECK_NEAR(sg.loss_sum, sc.loss_sum, 1e-5, 1e-4);
    GV_CHECK_OK(gv_nn_model_get_grads(mc, gc));
    GV_CHECK_OK(gv_nn_model_get_grads(mg, gg));
    double worst = 0;
    for (int t = 0; t < gv_nn_model_tensor_count(mc); t++) {
        const struct gv_nn_tensor *ten = gv_nn_model_tensor(mc, t);
        double mx = 0, diff = 0;
        for (size_t i = ten->offset; i < ten->offset + ten->numel; i++) {
            mx = fmax(mx, fabs(gc[i]));
            diff = fmax(diff, fabs((double)gg[i] - gc[i]));
        }
        GV_CHECK_MSG(diff <= 1e-6 + 1e-3 * mx, "%s %s: max diff %.3g, max |g| %.3g", name,
                     ten->name, diff, mx);
        worst = fmax(worst, diff / (mx + 1e-30));
    }
    /* evaluation agrees too */
    GV_CHECK_OK(gv_nn_model_eval_batch(mc, &b, &sc));
    GV_CHECK_OK(gv_nn_model_eval_batch(mg, &b, &sg));
    GV_CHECK_NEAR(sg.loss_sum, sc.loss_sum, 1e-5, 1e-4);
    printf("  %-10s %8zu params: loss %.6f (cpu) %.6f (cuda), worst grad diff / max|g| %.2e\n",
           name, np, sc.loss_sum / (double)sc.count, sg.loss_sum / (double)sg.count, worst);
    free(pc), free(pg), free(gc), free(gg), free(x), free(tok), free(lab);
out:
    gv_nn_model_destroy(mc);
    gv_nn_model_destroy(mg);
}

static void test_models(void)
{
    struct gv_nn_model_cfg cfg;
    gv_nn_model_cfg_default(GV_NN_SOFTMAX, &cfg);
    compare_model("softmax", &cfg, 64);
    gv_nn_model_cfg_default(GV_NN_MLP, &cfg);
    compare_model("mlp", &cfg, 64);
    gv_nn_model_cfg_default(GV_NN_CNN, &cfg);
    compare_model("cnn", &cfg, 64);
    gv_nn_model_cfg_default(GV_NN_LSTM, &cfg);
    cfg.n_classes = 90, cfg.layers = 2, cfg.max_batch = 32;
    compare_model("lstm x2", &cfg, 32);
}

static void test_optim_bits(void)
{
    float *dp = NULL, *dv = NULL, *dg = NULL;
    struct gv_nn_model_cfg mcfg;
    struct gv_nn_model *m = NULL;
    /* device buffers: borrow a model's arena (params, grads, momentum) of at least N floats */
    gv_nn_model_cfg_default(GV_NN_MLP, &mcfg);
    GV_CHECK_OK(gv_nn_model_create(gpu, &mcfg, &m));
    if (m == NULL)
        goto out;
    dp = gv_nn_model_params(m), dg = gv_nn_model_grads(m), dv = gv_nn_model_momentum(m);
    size_t n = gv_nn_model_numel(m);
    float *hp = malloc(n * sizeof(float)), *hv = calloc(n, sizeof(float));
    float *hg = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        hp[i] = gv_nn_init_uniform(1, 0, i, 1.0f);
        hg[i] = gv_nn_init_uniform(2, 0, i, 0.1f);
    }
    GV_CHECK_OK(gv_nn_model_set_params(m, hp));
    GV_CHECK_OK(gv_nn_model_set_grads(m, hg));
    struct gv_optim_cfg oc;
    gv_optim_cfg_default(&oc);
    oc.nesterov = 1;
    oc.weight_decay = 5e-4f;
    oc.warmup = 2;
    for (int64_t t = 0; t < 4; t++) {
        GV_CHECK_OK(gv_optim_step(gpu, &oc, t, dp, dv, dg, n));
        gv_optim_step_range_host(&oc, t, hp, hv, hg, 0, n);
    }
    float *back = malloc(n * sizeof(float));
    GV_CHECK_OK(gv_nn_model_get_params(m, back));
    GV_CHECK_MSG(memcmp(back, hp, n * sizeof(float)) == 0,
                 "cuda optimizer step differs from the host step");
    free(hp), free(hv), free(hg), free(back);
out:
    gv_nn_model_destroy(m);
}

/* --local-momentum on a CUDA replica: the velocity kernel (u and g updated) over three
 * iterations with weight decay gives the host's bits. */
static void test_velocity_bits(void)
{
    struct gv_nn_model_cfg mcfg;
    struct gv_nn_model *m = NULL;
    gv_nn_model_cfg_default(GV_NN_MLP, &mcfg);
    GV_CHECK_OK(gv_nn_model_create(gpu, &mcfg, &m));
    if (m == NULL)
        return;
    float *dp = gv_nn_model_params(m), *dg = gv_nn_model_grads(m), *du = gv_nn_model_momentum(m);
    size_t n = gv_nn_model_numel(m);
    float *hp = malloc(n * sizeof(float)), *hu = calloc(n, sizeof(float));
    float *hg = malloc(n * sizeof(float)), *back = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        hp[i] = gv_nn_init_uniform(1, 0, i, 1.0f);
    GV_CHECK_OK(gv_nn_model_set_params(m, hp));
    struct gv_optim_cfg oc;
    gv_optim_cfg_default(&oc);
    oc.momentum = 0.9f;
    oc.weight_decay = 5e-4f;
    for (uint64_t t = 0; t < 3; t++) {
        for (size_t i = 0; i < n; i++)
            hg[i] = gv_nn_init_uniform(2 + t, 0, i, 0.1f);
        GV_CHECK_OK(gv_nn_model_set_grads(m, hg));
        GV_CHECK_OK(gv_optim_velocity(gpu, &oc, dp, du, dg, n));
        gv_optim_velocity_host(&oc, hp, hu, hg, n);
    }
    GV_CHECK_OK(gv_nn_backend_download(gpu, back, dg, n * sizeof(float)));
    GV_CHECK_MSG(memcmp(back, hg, n * sizeof(float)) == 0,
                 "cuda velocity: the gradient it leaves differs from the host's");
    GV_CHECK_OK(gv_nn_backend_download(gpu, back, du, n * sizeof(float)));
    GV_CHECK_MSG(memcmp(back, hu, n * sizeof(float)) == 0, "cuda velocity differs from the host's");
    free(hp), free(hu), free(hg), free(back);
    gv_nn_model_destroy(m);
}

/* What the distributed worker does with a CUDA replica: the averaged gradient of a shard,
 * uploaded from pinned memory into a range of the device vector, stepped with the rate a server
 * sent (gv_optim_apply), downloaded: the same bits as the server's host step on that range,
 * denormals included. */
static void test_worker_pieces(void)
{
    const size_t n = 5000, lo = 1234, len = 2500;
    struct gv_buf hb;
    GV_CHECK_OK(gv_buf_alloc(&hb, 3 * n * sizeof(float), GV_MEM_PINNED));
    struct gv_buf db;
    GV_CHECK_OK(gv_buf_alloc(&db, 3 * n * sizeof(float), GV_MEM_DEVICE));
    if (hb.ptr == NULL || db.ptr == NULL)
        goto out;
    float *hp = hb.ptr, *hv = hp + n, *hg = hv + n;
    float *dp = db.ptr, *dv = dp + n, *dg = dv + n;
    for (size_t i = 0; i < n; i++) {
        hp[i] = gv_nn_init_uniform(7, 0, i, 1.0f);
        hv[i] = gv_nn_init_uniform(7, 1, i, 0.01f);
        hg[i] = i % 97 == 0 ? 1e-41f * (float)(i % 5) : gv_nn_init_uniform(7, 2, i, 0.1f);
    }
    hp[lo + 3] = 3e-39f, hg[lo + 3] = -2e-39f; /* a subnormal step */
    GV_CHECK_OK(gv_nn_backend_upload(gpu, dp, hp, 3 * n * sizeof(float)));
    struct gv_optim_cfg oc;
    gv_optim_cfg_default(&oc);
    oc.weight_decay = 1e-4f;
    oc.nesterov = 1;
    float lr = 0.0371f;
    GV_CHECK_OK(gv_optim_apply(gpu, &oc, lr, dp + lo, dv + lo, dg + lo, len));
    gv_optim_apply_host(&oc, lr, hp + lo, hv + lo, hg + lo, len);
    float *back = malloc(2 * n * sizeof(float));
    GV_CHECK_OK(gv_nn_backend_download(gpu, back, dp, 2 * n * sizeof(float)));
    GV_CHECK_MSG(memcmp(back, hp, 2 * n * sizeof(float)) == 0,
                 "params/momentum after a range step differ from the host's");
    free(back);
out:
    gv_buf_free(&db);
    gv_buf_free(&hb);
}

/* samples/s of train_step + optimizer step, CPU (1 OpenBLAS thread) and CUDA. */
static double throughput(struct gv_nn_backend *be, const struct gv_nn_model_cfg *cfg, int n,
                         int steps)
{
    struct gv_nn_model *m = NULL;
    if (gv_nn_model_create(be, cfg, &m) != GV_OK)
        return 0;
    gv_nn_model_init(m, 1);
    struct gv_optim_cfg oc;
    gv_optim_cfg_default(&oc);
    size_t rows = (size_t)n * (size_t)(cfg->kind == GV_NN_LSTM ? cfg->seq_len : 1);
    float *x = malloc((size_t)n * (size_t)(cfg->in_h * cfg->in_w * cfg->in_c) * sizeof(float));
    int32_t *tok = malloc(rows * sizeof(int32_t)), *lab = malloc(rows * sizeof(int32_t));
    struct gv_nn_batch b;
    struct gv_nn_stats st;
    make_batch(cfg, n, x, tok, lab, &b, 3);
    gv_nn_model_train_step(m, &b, &st); /* warm-up */
    double t0 = gv_now_s();
    for (int i = 0; i < steps; i++) {
        gv_nn_model_train_step(m, &b, &st); /* st: one device sync per step, as in training */
        gv_nn_model_optim_step(m, &oc, i);
    }
    double s = gv_now_s() - t0;
    free(x), free(tok), free(lab);
    gv_nn_model_destroy(m);
    return (double)n * steps / s;
}

static void report_speed(void)
{
    struct gv_nn_model_cfg cfg;
    enum gv_nn_model_kind kinds[] = {GV_NN_MLP, GV_NN_CNN, GV_NN_LSTM};
    printf("  training samples/s, batch 64 (lstm 32 x 64 chars):\n");
    for (size_t k = 0; k < GV_ARRAY_LEN(kinds); k++) {
        gv_nn_model_cfg_default(kinds[k], &cfg);
        int n = kinds[k] == GV_NN_LSTM ? 32 : 64;
        if (kinds[k] == GV_NN_LSTM)
            cfg.n_classes = 90, cfg.max_batch = 32;
        double c = throughput(cpu, &cfg, n, kinds[k] == GV_NN_MLP ? 200 : 20);
        double g = throughput(gpu, &cfg, n, 200);
        printf("  %-6s cpu %10.0f  cuda %10.0f  ratio %.1fx\n", gv_nn_model_kind_str(kinds[k]), c,
               g, g / c);
    }
}

int main(void)
{
    gv_status_t status = gv_nn_backend_create(GV_NN_CUDA, 0, &gpu);
    if (status == GV_ERR_UNSUPPORTED)
        GV_SKIP("CUDA backend unavailable (no CUDA build, or its plugin is missing: see the log)");
    if (status == GV_ERR_NODEV)
        GV_SKIP("no GPU");
    GV_CHECK_OK(status);
    GV_CHECK_OK(gv_nn_backend_create(GV_NN_CPU, 1, &cpu));
    if (gpu == NULL || cpu == NULL)
        return gv_check_summary();
    test_models();
    test_optim_bits();
    test_velocity_bits();
    test_worker_pieces();
    report_speed();
    gv_nn_backend_destroy(gpu);
    gv_nn_backend_destroy(cpu);
    return gv_check_summary();
}
