/* test_nn_optim.c: the SGD step applied to any split of the flat vector into ranges gives the
 * same bits as one pass over the whole vector (the parameter-server / replica contract); the
 * step matches a written-out reference; learning-rate schedules are pure functions of (cfg, t);
 * schedule strings parse and bad ones are rejected; the backend dispatch is the host step; the
 * momentum half kept apart (a worker's --local-momentum) composes to the whole step. */
#include "check.h"
#include "nn_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N 10007 /* prime, so range ends fall everywhere */

static void fill(float *v, uint64_t seed, float scale)
{
    for (size_t i = 0; i < N; i++)
        v[i] = gv_nn_init_uniform(seed, 0, i, scale);
}

static int same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* Runs `steps` steps over the whole vector and over random ranges; both must agree bitwise. */
static void split_case(const struct gv_optim_cfg *cfg, uint64_t seed)
{
    static float p1[N], v1[N], p2[N], v2[N], g[N];
    fill(p1, seed, 1.0f);
    memcpy(p2, p1, sizeof(p1));
    memset(v1, 0, sizeof(v1));
    memset(v2, 0, sizeof(v2));
    uint64_t st = seed;
    for (int64_t t = 0; t < 25; t++) {
        fill(g, seed + 100 + (uint64_t)t, 0.5f);
        gv_optim_step_range_host(cfg, t, p1, v1, g, 0, N);
        /* a different random partition every step, including empty and 1-element ranges */
        size_t a = 0;
        while (a < N) {
            size_t len = (size_t)(gv_nn_splitmix64(&st) % 700);
            size_t b = GV_MIN(a + len, (size_t)N);
            gv_optim_step_range_host(cfg, t, p2, v2, g, a, b);
            a = b;
        }
    }
    GV_CHECK_MSG(same_bits(p1, p2, N) && same_bits(v1, v2, N),
                 "range-split step differs from the whole-vector step (nesterov %d, wd %g)",
                 cfg->nesterov, (double)cfg->weight_decay);
}

static void test_range_split(void)
{
    struct gv_optim_cfg cfg;
    gv_optim_cfg_default(&cfg);
    split_case(&cfg, 1);
    cfg.nesterov = 1;
    cfg.weight_decay = 5e-4f;
    cfg.warmup = 5;
    GV_CHECK_OK(gv_optim_schedule_parse("cosine:30:0.001", &cfg));
    split_case(&cfg, 2);
    cfg.nesterov = 0;
    cfg.momentum = 0.0f;
    GV_CHECK_OK(gv_optim_schedule_parse("step:3,10@0.5", &cfg));
    split_case(&cfg, 3);
}

/* The step written out in double-free float arithmetic, one statement per rounding. */
static void test_step_semantics(void)
{
    struct gv_optim_cfg cfg;
    gv_optim_cfg_default(&cfg);
    cfg.momentum = 0.9f;
    cfg.weight_decay = 0.01f;
    for (int nest = 0; nest <= 1; nest++) {
        cfg.nesterov = nest;
        float p[3] = {1.0f, -2.0f, 0.5f}, v[3] = {0.1f, 0.0f, -0.3f}, g[3] = {0.25f, 1.0f, -4.0f};
        float pe[3], ve[3];
        for (int i = 0; i < 3; i++) {
            volatile float wdp = cfg.weight_decay * p[i];
            volatile float gi = g[i] + wdp;
            volatile float muv = cfg.momentum * v[i];
            volatile float vi = muv + gi;
            volatile float mvi = cfg.momentum * vi;
            volatile float d = nest ? gi + mvi : vi;
            volatile float step = 0.1f * d;
            ve[i] = vi;
            pe[i] = p[i] - step;
        }
        gv_optim_apply_host(&cfg, 0.1f, p, v, g, 3);
        GV_CHECK(same_bits(p, pe, 3));
        GV_CHECK(same_bits(v, ve, 3));
    }
    /* plain SGD: p -= lr * g exactly */
    cfg.momentum = 0.0f;
    cfg.weight_decay = 0.0f;
    cfg.nesterov = 0;
    float p = 1.0f, v = 0.0f, g = 0.5f;
    gv_optim_apply_host(&cfg, 0.25f, &p, &v, &g, 1);
    GV_CHECK(p == 0.875f);
}

/* The momentum half kept apart (--local-momentum): velocity, then a step without momentum and
 * weight decay, gives the parameters of the whole step bit for bit, and the velocity is the
 * whole step's momentum; g comes out as the velocity. */
static void test_velocity_split(void)
{
#define NV 257
    struct gv_optim_cfg cfg, plain;
    gv_optim_cfg_default(&cfg);
    cfg.momentum = 0.815f;
    cfg.weight_decay = 0.003f;
    plain = cfg;
    plain.momentum = plain.weight_decay = 0.0f;
    float p1[NV], v1[NV], g1[NV], p2[NV], u2[NV], g2[NV], v2[NV] = {0};
    for (int i = 0; i < NV; i++) {
        p1[i] = p2[i] = 0.01f * (float)(i - 128);
        v1[i] = u2[i] = 0.003f * (float)((i * 37) % 19 - 9);
    }
    for (int t = 0; t < 5; t++) {
        for (int i = 0; i < NV; i++)
            g1[i] = g2[i] = 0.02f * (float)(((i + 11 * t) * 53) % 29 - 14);
        gv_optim_apply_host(&cfg, 0.1f, p1, v1, g1, NV);
        gv_optim_velocity_host(&cfg, p2, u2, g2, NV);
        GV_CHECK(same_bits(g2, u2, NV));
        gv_optim_apply_host(&plain, 0.1f, p2, v2, g2, NV);
        GV_CHECK_MSG(same_bits(p1, p2, NV), "iteration %d: the split step differs", t);
        GV_CHECK(same_bits(v1, u2, NV));
    }
#undef NV
}

static void test_schedules(void)
{
    struct gv_optim_cfg cfg;
    gv_optim_cfg_default(&cfg);
    cfg.lr = 0.1f;
    GV_CHECK(gv_optim_lr(&cfg, 0) == 0.1f);
    GV_CHECK(gv_optim_lr(&cfg, 123456) == 0.1f);

    cfg.warmup = 4;
    GV_CHECK_NEAR(gv_optim_lr(&cfg, 0), 0.025, 1e-9, 1e-6);
    GV_CHECK_NEAR(gv_optim_lr(&cfg, 3), 0.1, 1e-9, 1e-6);
    GV_CHECK(gv_optim_lr(&cfg, 4) == 0.1f);

    cfg.warmup = 0;
    GV_CHECK_OK(gv_optim_schedule_parse("step:100,200@0.5", &cfg));
    GV_CHECK_EQ(cfg.sched, GV_LR_STEP);
    GV_CHECK_EQ(cfg.n_milestones, 2);
    GV_CHECK_OK(gv_optim_cfg_check(&cfg));
    GV_CHECK(gv_optim_lr(&cfg, 99) == 0.1f);
    GV_CHECK_NEAR(gv_optim_lr(&cfg, 100), 0.05, 1e-9, 1e-6);
    GV_CHECK_NEAR(gv_optim_lr(&cfg, 250), 0.025, 1e-9, 1e-6);
    GV_CHECK_OK(gv_optim_schedule_parse("step:7", &cfg));
    GV_CHECK_NEAR(cfg.gamma, 0.5, 1e-9, 0); /* gamma kept from before */

    cfg.gamma = 0.1f;
    GV_CHECK_OK(gv_optim_schedule_parse("cosine:1000:0.001", &cfg));
    GV_CHECK_OK(gv_optim_cfg_check(&cfg));
    GV_CHECK(gv_optim_lr(&cfg, 0) == 0.1f);
    GV_CHECK_NEAR(gv_optim_lr(&cfg, 500), 0.0505, 1e-7, 1e-5);
    GV_CHECK_NEAR(gv_optim_lr(&cfg, 1000), 0.001, 1e-9, 1e-5);
    GV_CHECK_NEAR(gv_optim_lr(&cfg, 5000), 0.001, 1e-9, 1e-5);
    /* pure: the same t gives the same bits whatever was asked before */
    float a = gv_optim_lr(&cfg, 321);
    (void)gv_optim_lr(&cfg, 999);
    GV_CHECK(a == gv_optim_lr(&cfg, 321));
    float prev = 1.0f;
    int monotone = 1;
    for (int64_t t = 0; t <= 1000; t++) {
        float lr = gv_optim_lr(&cfg, t);
        monotone &= lr <= prev;
        prev = lr;
    }
    GV_CHECK(monotone);

    GV_CHECK_OK(gv_optim_schedule_parse("constant", &cfg));
    GV_CHECK_EQ(cfg.sched, GV_LR_CONSTANT);
}

static void test_bad_config(void)
{
    struct gv_optim_cfg cfg;
    gv_optim_cfg_default(&cfg);
    const char *bad[] = {"",
                         "linear",
                         "step:",
                         "step:10,",
                         "step:x",
                         "step:10@",
                         "step:10@abc",
                         "cosine:",
                         "cosine:-5",
                         "cosine:10:",
                         "step:1,2,3,4,5,6,7,8,9"};
    for (size_t i = 0; i < GV_ARRAY_LEN(bad); i++)
        GV_CHECK_STATUS(gv_optim_schedule_parse(bad[i], &cfg), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_optim_schedule_parse(NULL, &cfg), GV_ERR_INVAL);
    GV_CHECK_OK(gv_optim_schedule_parse("step:10,5", &cfg));
    GV_CHECK_STATUS(gv_optim_cfg_check(&cfg), GV_ERR_INVAL); /* not ascending */
    GV_CHECK_OK(gv_optim_schedule_parse("cosine", &cfg));
    GV_CHECK_STATUS(gv_optim_cfg_check(&cfg), GV_ERR_INVAL); /* no total yet */
    cfg.sched = GV_LR_CONSTANT;
    cfg.momentum = 1.0f;
    GV_CHECK_STATUS(gv_optim_cfg_check(&cfg), GV_ERR_INVAL);
    cfg.momentum = 0.9f;
    cfg.lr = -1.0f;
    GV_CHECK_STATUS(gv_optim_cfg_check(&cfg), GV_ERR_INVAL);
    cfg.lr = NAN;
    GV_CHECK_STATUS(gv_optim_cfg_check(&cfg), GV_ERR_INVAL);
}

/* gv_optim_step on the CPU backend is the host step with lr = gv_optim_lr(cfg, t). */
static void test_backend_dispatch(void)
{
    struct gv_nn_backend *be = NULL;
    GV_CHECK_OK(gv_nn_backend_create(GV_NN_CPU, 1, &be));
    if (be == NULL)
        return;
    static float p1[N], v1[N], p2[N], v2[N], g[N];
    struct gv_optim_cfg cfg;
    gv_optim_cfg_default(&cfg);
    cfg.nesterov = 1;
    cfg.warmup = 3;
    fill(p1, 9, 1.0f);
    fill(g, 10, 1.0f);
    memcpy(p2, p1, sizeof(p1));
    for (int64_t t = 0; t < 5; t++) {
        GV_CHECK_OK(gv_optim_step(be, &cfg, t, p1, v1, g, N));
        gv_optim_apply_host(&cfg, gv_optim_lr(&cfg, t), p2, v2, g, N);
    }
    GV_CHECK(same_bits(p1, p2, N) && same_bits(v1, v2, N));
    gv_nn_backend_destroy(be);
}

int main(void)
{
    test_range_split();
    test_step_semantics();
    test_velocity_split();
    test_schedules();
    test_bad_config();
    test_backend_dispatch();
    return gv_check_summary();
}
