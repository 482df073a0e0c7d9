/* test_adapt_baselines.c: the dense, static and Accordion controllers behind the same API:
 * their decisions every iteration, Accordion's per-layer switching (critical start, heavy when
 * the accumulated-gradient norm settles, light again after an lr decay) and its log. */
#include "harness.h"

static void test_dense_static(void)
{
    struct gv_adapt_config cfg;
    gv_adapt_config_default(&cfg, GV_ADAPT_DENSE);
    struct gv_adapt *dense, *stat;
    GV_CHECK_OK(gv_adapt_create(&cfg, &dense));
    gv_adapt_config_default(&cfg, GV_ADAPT_STATIC);
    cfg.static_cf = 1000;
    GV_CHECK_OK(gv_adapt_create(&cfg, &stat));
    struct logcap cap = {0};
    gv_adapt_set_log(stat, logcap_cb, &cap);
    gv_adapt_set_log(dense, logcap_cb, &cap);

    struct gv_adapt_decision dd = {0}, ds = {0};
    GV_CHECK_OK(gv_adapt_current(dense, &dd));
    GV_CHECK_OK(gv_adapt_current(stat, &ds));
    for (uint64_t i = 0; i < 50; i++) {
        GV_CHECK_EQ(dd.iter, i);
        GV_CHECK_EQ(dd.level, D);
        GV_CHECK_NEAR(dd.cf_send, 1, 0, 0);
        GV_CHECK_EQ(dd.levels, 0);
        GV_CHECK_EQ(dd.num_layers, 0);
        GV_CHECK_EQ(ds.iter, i);
        GV_CHECK_EQ(ds.level, F);
        GV_CHECK_NEAR(ds.cf_send, 1000, 0, 0);
        GV_CHECK_NEAR(ds.theta_min, 1000, 0, 0);
        GV_CHECK_NEAR(ds.cf_candidate, 1000, 0, 0);
        GV_CHECK_EQ(ds.levels, 1);
        /* observations vary wildly; decisions do not */
        struct gv_adapt_obs o = {.iter = i,
                                 .level = D,
                                 .cf_sent = 1,
                                 .norm2_ef = (double)i,
                                 .norm2_min = 0.1 * (double)i,
                                 .t_compute = 0.1,
                                 .t_comm = 1,
                                 .samples = 64,
                                 .num_workers = 2,
                                 .lr = i < 25 ? 0.1 : 0.01};
        GV_CHECK_OK(gv_adapt_update(dense, &o, &dd));
        o.level = F;
        o.cf_sent = 1000;
        GV_CHECK_OK(gv_adapt_update(stat, &o, &ds));
    }
    /* the static controller sends at its CF: a dense report is a wiring error */
    struct gv_adapt_obs bad = {.iter = 50, .level = D, .cf_sent = 1, .num_workers = 1};
    GV_CHECK_STATUS(gv_adapt_update(stat, &bad, &ds), GV_ERR_INVAL);
    bad.level = F;
    bad.cf_sent = 100;
    GV_CHECK_STATUS(gv_adapt_update(stat, &bad, &ds), GV_ERR_INVAL);
    GV_CHECK_EQ(cap.n, 0); /* nothing ever changes: no log line */
    struct gv_adapt_info info;
    gv_adapt_get_info(stat, &info);
    GV_CHECK_EQ(info.observations, 50);
    GV_CHECK_NEAR(info.t_sys, 64 / 1.1, 1e-12, 0);
    gv_adapt_destroy(dense);
    gv_adapt_destroy(stat);
    logcap_free(&cap);
}

/* ---- Accordion: 3 layers, checks every 2 epochs, eta 0.5, light 10x, heavy 100x, epochs of
 * 5 iterations (an epoch ends at iterations 4, 9, 14, ...). lr: 0.05 for 0..1 (warm-up ramp,
 * an increase is no decay), 0.1 from 2, decayed to 0.01 at 27; lr_decayed flag at 52.
 *   epoch 0 ends (4): reference norms [10, 10, 10]; all light (critical start)
 *   epoch 2 ends (14): [10.5, 2, 0] -> changes 5%, 80%, 100% -> heavy, light, light from 15
 *   epoch 4 ends (24): [10.4, 2.1, 0] vs [10.5, 2, 0] -> 1%, 5%, zero reference (critical)
 *                      -> heavy, heavy, light from 25
 *   lr decay at 27 -> all light from 28; epoch 5 (25..29) restarts the count
 *   epoch 5 ends (29): reference [5, 5, 5]
 *   epoch 7 ends (39): [5.1, 1, 5] -> 2%, 80%, 0% -> heavy, light, heavy from 40
 *   epoch 9 ends (49): [5.1, 1.05, 5] -> 0%, 5%, 0% -> all heavy from 50 (cf_send 100)
 *   lr_decayed flag at 52 -> all light from 53; epoch 10 (50..54) ends: reference again */
static const double *acc_norms(uint64_t iter)
{
    static const double e0[] = {10, 10, 10}, e2[] = {10.5, 2, 0}, e4[] = {10.4, 2.1, 0},
                        e5[] = {5, 5, 5}, e7[] = {5.1, 1, 5}, e9[] = {5.1, 1.05, 5},
                        other[] = {123, 0.5, 7}; /* never compared */
    switch (iter) {
    case 4: return e0;
    case 14: return e2;
    case 24: return e4;
    case 29: return e5;
    case 39: return e7;
    case 49: return e9;
    }
    return other;
}

static void acc_expected(uint64_t iter, double cf[3])
{
    static const double L = 10, H = 100;
    const double *row;
    static const double light[] = {L, L, L}, a[] = {H, L, L}, b[] = {H, H, L}, c[] = {H, L, H},
                        d[] = {H, H, H};
    if (iter < 15 || (iter >= 28 && iter < 40) || iter >= 53)
        row = light;
    else if (iter < 25)
        row = a;
    else if (iter < 28)
        row = b;
    else if (iter < 50)
        row = c;
    else
        row = d;
    memcpy(cf, row, 3 * sizeof(double));
}

static void test_accordion(void)
{
    struct gv_adapt_config cfg;
    gv_adapt_config_default(&cfg, GV_ADAPT_ACCORDION);
    cfg.accordion.num_layers = 3;
    cfg.accordion.switch_epochs = 2;
    cfg.accordion.cf_light = 10;
    cfg.accordion.cf_heavy = 100;
    struct gv_adapt *ctl;
    GV_CHECK_OK(gv_adapt_create(&cfg, &ctl));
    struct logcap cap = {0};
    gv_adapt_set_log(ctl, logcap_cb, &cap);

    double layer_cf[3];
    struct gv_adapt_decision d = {.layer_cf = layer_cf, .layer_cap = 3};
    GV_CHECK_OK(gv_adapt_current(ctl, &d));
    for (uint64_t i = 0; i < 60; i++) {
        double want[3];
        acc_expected(i, want);
        GV_CHECK_EQ(d.iter, i);
        GV_CHECK_EQ(d.level, F);
        GV_CHECK_EQ(d.levels, 1);
        GV_CHECK_EQ(d.num_layers, 3);
        bool same = memcmp(layer_cf, want, sizeof(want)) == 0;
        GV_CHECK_MSG(same, "iteration %llu: layer CFs %g %g %g, want %g %g %g",
                     (unsigned long long)i, layer_cf[0], layer_cf[1], layer_cf[2], want[0], want[1],
                     want[2]);
        double min = GV_MIN(want[0], GV_MIN(want[1], want[2]));
        GV_CHECK_NEAR(d.cf_send, min, 0, 0);
        struct gv_adapt_obs o = {.iter = i,
                                 .level = F,
                                 .cf_sent = d.cf_send,
                                 .num_workers = 4,
                                 .samples = 128,
                                 .t_compute = 0.1,
                                 .t_comm = 0.2};
        o.lr = i < 2 ? 0.05 : i < 27 ? 0.1 : 0.01;
        o.lr_decayed = i == 52;
        o.epoch_end = i % 5 == 4;
        if (o.epoch_end) {
            o.num_layers = 3;
            o.layer_norms = acc_norms(i);
        }
        GV_CHECK_OK(gv_adapt_update(ctl, &o, &d));
    }
    struct gv_adapt_info info;
    gv_adapt_get_info(ctl, &info);
    GV_CHECK_EQ(info.epochs, 12);
    GV_CHECK_EQ(info.windows, 7); /* checks at the ends of epochs 0, 2, 4, 5, 7, 9, 10 */
    GV_CHECK_EQ(info.heavy_layers, 0);

    static const struct {
        const char *event, *reason;
        double iter;
    } log_want[] = {
        {"window", "reference", 4},   {"window", "norm-check", 14}, {"window", "norm-check", 24},
        {"decision", "lr-decay", 27}, {"window", "reference", 29},  {"window", "norm-check", 39},
        {"window", "norm-check", 49}, {"decision", "lr-decay", 52}, {"window", "reference", 54},
    };
    GV_CHECK_EQ(cap.n, (int)GV_ARRAY_LEN(log_want));
    for (int i = 0; i < cap.n && i < (int)GV_ARRAY_LEN(log_want); i++) {
        GV_CHECK_STREQ(jstr(cap.lines[i], "event"), log_want[i].event);
        GV_CHECK_STREQ(jstr(cap.lines[i], "reason"), log_want[i].reason);
        GV_CHECK_NEAR(jnum(cap.lines[i], "iter"), log_want[i].iter, 0, 0);
        GV_CHECK_STREQ(jstr(cap.lines[i], "controller"), "accordion");
    }
    if (cap.n >= 3) {
        /* epoch 4's check: ratios 1%, 5%, null (zero reference), heavy 1 1 0 */
        const cJSON *r = cJSON_GetObjectItem(cap.lines[2], "ratio");
        const cJSON *h = cJSON_GetObjectItem(cap.lines[2], "heavy");
        GV_CHECK_NEAR(cJSON_GetArrayItem(r, 0)->valuedouble, 0.1 / 10.5, 1e-12, 0);
        GV_CHECK_NEAR(cJSON_GetArrayItem(r, 1)->valuedouble, 0.05, 1e-12, 0);
        GV_CHECK(cJSON_IsNull(cJSON_GetArrayItem(r, 2)));
        GV_CHECK_NEAR(cJSON_GetArrayItem(h, 0)->valuedouble, 1, 0, 0);
        GV_CHECK_NEAR(cJSON_GetArrayItem(h, 2)->valuedouble, 0, 0, 0);
        GV_CHECK_NEAR(jnum(cap.lines[2], "epoch"), 4, 0, 0);
        GV_CHECK_NEAR(jnum(cap.lines[2], "heavy_layers"), 2, 0, 0);
        GV_CHECK_NEAR(jnum(cJSON_GetObjectItem(cap.lines[2], "new"), "cf"), 10, 0, 0);
    }
    logcap_free(&cap);
    gv_adapt_destroy(ctl);
}

static void test_accordion_invalid(void)
{
    struct gv_adapt_config cfg;
    gv_adapt_config_default(&cfg, GV_ADAPT_ACCORDION);
    cfg.accordion.num_layers = 2;
    struct gv_adapt *ctl;
    GV_CHECK_OK(gv_adapt_create(&cfg, &ctl));
    double cf1[1];
    struct gv_adapt_decision d = {.layer_cf = cf1, .layer_cap = 1};
    GV_CHECK_STATUS(gv_adapt_current(ctl, &d), GV_ERR_INVAL); /* storage too small */
    d.layer_cf = NULL;
    GV_CHECK_OK(gv_adapt_current(ctl, &d)); /* no storage: count only */
    GV_CHECK_EQ(d.num_layers, 2);
    double norms[2] = {1, 2}, bad_norms[2] = {1, NAN};
    struct gv_adapt_obs o = {.iter = 0,
                             .level = F,
                             .cf_sent = 10,
                             .num_workers = 1,
                             .epoch_end = true,
                             .num_layers = 2,
                             .layer_norms = NULL};
    GV_CHECK_STATUS(gv_adapt_update(ctl, &o, &d), GV_ERR_INVAL);
    o.layer_norms = norms;
    o.num_layers = 3;
    GV_CHECK_STATUS(gv_adapt_update(ctl, &o, &d), GV_ERR_INVAL);
    o.num_layers = 2;
    o.layer_norms = bad_norms;
    GV_CHECK_STATUS(gv_adapt_update(ctl, &o, &d), GV_ERR_INVAL);
    bad_norms[1] = -1;
    GV_CHECK_STATUS(gv_adapt_update(ctl, &o, &d), GV_ERR_INVAL);
    struct gv_adapt_info info;
    gv_adapt_get_info(ctl, &info);
    GV_CHECK_EQ(info.observations, 0);
    GV_CHECK_EQ(info.epochs, 0);
    o.layer_norms = norms;
    GV_CHECK_OK(gv_adapt_update(ctl, &o, &d));
    gv_adapt_get_info(ctl, &info);
    GV_CHECK_EQ(info.epochs, 1);
    gv_adapt_destroy(ctl);
}

int main(void)
{
    gv_log_set_level(GV_LOG_WARN);
    test_dense_static();
    test_accordion();
    test_accordion_invalid();
    return gv_check_summary();
}
