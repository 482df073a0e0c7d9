/* test_adapt_gravac.c: GraVAC rules on synthetic traces, each asserting the exact sequence of
 * decisions (as runs of identical decisions). Every expected run is derived in the comment next
 * to it from the environment's numbers, not copied from the controller's output. */
#include "harness.h"

#include <math.h>

static struct gv_adapt *make(double tmin, double tmax, enum gv_adapt_policy pol, uint32_t window,
                             double eps, double alpha)
{
    struct gv_adapt_config cfg;
    gv_adapt_config_default(&cfg, GV_ADAPT_GRAVAC);
    cfg.gravac.theta_min = tmin;
    cfg.gravac.theta_max = tmax;
    cfg.gravac.policy = pol;
    cfg.gravac.window = window;
    cfg.gravac.epsilon = eps;
    cfg.gravac.alpha = alpha;
    struct gv_adapt *ctl = NULL;
    GV_CHECK_OK(gv_adapt_create(&cfg, &ctl));
    return ctl;
}

/* Gain falls slowly with the CF: 10x 0.858, 20x 0.822, 40x 0.790, 160x 0.732, 1000x 0.668,
 * 2000x 0.646; consecutive CFs differ by > 1% (no floor raise at omega 1%). */
static double gain_log(const struct env *e, double cf, uint64_t iter)
{
    (void)e, (void)iter;
    return 1.0 / (1.0 + 0.05 * log2(cf));
}

static struct env env_default(void)
{
    struct env e = {.gain = gain_log,
                    .t_compute = 0.01,
                    .t_compress = 0.01,
                    .comm_dense = 1.0,
                    .samples = 128,
                    .workers = 4,
                    .lr = 0.1};
    return e;
}

/* Exponential policy, [10, 1000], window 10, alpha 1 (no smoothing), eps 0.5: every gain is
 * eligible. T = 128 / (0.02 + 1/cf) * gain grows with the CF by > 10% per rung (914, 1503,
 * 2247, 3570, 4069), so neither saturation nor a floor raise fires. Iteration 0 is dense (no
 * gain known); each window's first iteration is at the floor (new candidate unmeasured). */
static void test_exponential_schedule(void)
{
    struct gv_adapt *ctl = make(10, 1000, GV_ADAPT_POLICY_EXPONENTIAL, 10, 0.5, 1.0);
    struct env e = env_default();
    struct step s[60];
    GV_CHECK(replay(ctl, &e, 60, s));
    static const struct run want[] = {
        {0, D, 1, 10, 20},    {1, C, 20, 10, 20},    {10, F, 10, 10, 40},   {11, C, 40, 10, 40},
        {20, F, 10, 10, 160}, {21, C, 160, 10, 160}, {30, F, 10, 10, 1000}, {31, C, 1000, 10, 1000},
    };
    CHECK_RUNS(s, 60, want);
    struct gv_adapt_decision d = {0};
    GV_CHECK_OK(gv_adapt_current(ctl, &d));
    GV_CHECK_EQ(d.levels, 2);
    GV_CHECK_NEAR(d.theta_s, 100.0, 0, 0);
    struct gv_adapt_info info;
    gv_adapt_get_info(ctl, &info);
    GV_CHECK_EQ(info.windows, 6);
    GV_CHECK_EQ(info.top_rung, 4);
    gv_adapt_destroy(ctl);
}

/* Geometric policy, [10, 2000]: 20, 40, 80, ..., 1280, then 2560 capped to 2000. With
 * t = 0.001 + 1/cf the throughput keeps growing by > 10% per rung up to 2000x. */
static void test_geometric_schedule(void)
{
    struct gv_adapt *ctl = make(10, 2000, GV_ADAPT_POLICY_GEOMETRIC, 10, 0.5, 1.0);
    struct env e = env_default();
    e.t_compute = 0.001;
    e.t_compress = 0.0;
    struct step s[100];
    GV_CHECK(replay(ctl, &e, 100, s));
    static const struct run want[] = {
        {0, D, 1, 10, 20},       {1, C, 20, 10, 20},      {10, F, 10, 10, 40},
        {11, C, 40, 10, 40},     {20, F, 10, 10, 80},     {21, C, 80, 10, 80},
        {30, F, 10, 10, 160},    {31, C, 160, 10, 160},   {40, F, 10, 10, 320},
        {41, C, 320, 10, 320},   {50, F, 10, 10, 640},    {51, C, 640, 10, 640},
        {60, F, 10, 10, 1280},   {61, C, 1280, 10, 1280}, {70, F, 10, 10, 2000},
        {71, C, 2000, 10, 2000},
    };
    CHECK_RUNS(s, 100, want);
    gv_adapt_destroy(ctl);
}

/* The cap: [10, 100] exponential gives 20, 40, then 160 capped to 100, which stays. A first
 * step of 3 gives 30, 90, 810, then 6561 capped to 1000. No CF ever exceeds theta_max.
 * There T[810] = 128 / (0.02 + 1/810) * 0.6742 = 4064 and T[1000] = 128 / 0.021 * 0.6675 = 4069
 * are within 0.2%: the window after 39 saturates and picks 810 (new candidate: one floor
 * iteration, 40); the next window scales up to 1000 and saturation pins 810 again. */
static void test_cap(void)
{
    struct gv_adapt *ctl = make(10, 100, GV_ADAPT_POLICY_EXPONENTIAL, 10, 0.5, 1.0);
    struct env e = env_default();
    struct step s[60];
    GV_CHECK(replay(ctl, &e, 60, s));
    static const struct run want[] = {
        {0, D, 1, 10, 20},   {1, C, 20, 10, 20},   {10, F, 10, 10, 40},
        {11, C, 40, 10, 40}, {20, F, 10, 10, 100}, {21, C, 100, 10, 100},
    };
    CHECK_RUNS(s, 60, want);
    for (int i = 0; i < 60; i++)
        GV_CHECK(s[i].cand <= 100.0 && s[i].cf <= 100.0);
    gv_adapt_destroy(ctl);

    struct gv_adapt_config cfg;
    gv_adapt_config_default(&cfg, GV_ADAPT_GRAVAC);
    cfg.gravac.theta_s0 = 3.0;
    cfg.gravac.window = 10;
    cfg.gravac.epsilon = 0.5;
    cfg.gravac.alpha = 1.0;
    GV_CHECK_OK(gv_adapt_create(&cfg, &ctl));
    GV_CHECK(replay(ctl, &e, 60, s));
    static const struct run want3[] = {
        {0, D, 1, 10, 30},    {1, C, 30, 10, 30},    {10, F, 10, 10, 90},   {11, C, 90, 10, 90},
        {20, F, 10, 10, 810}, {21, C, 810, 10, 810}, {30, F, 10, 10, 1000}, {31, C, 1000, 10, 1000},
        {40, F, 10, 10, 810}, {41, C, 810, 10, 810},
    };
    CHECK_RUNS(s, 60, want3);
    gv_adapt_destroy(ctl);
}

/* Fallback, alpha 1, eps 0.8, no window in range. Gains by phase of the iteration:
 *   [0,15): 10x 0.95, 20x 0.9   -> candidate from 1 (decided after iteration 0)
 *   [15,20): 20x drops to 0.7   -> floor from 16 (one-iteration lag)
 *   [20,25): 10x 0.6, 20x 0.5   -> dense from 21
 *   [25,..): back to 0.95 / 0.9 -> candidate from 26 */
static double gain_phases(const struct env *e, double cf, uint64_t iter)
{
    (void)e;
    if (iter < 15 || iter >= 25)
        return cf == 10 ? 0.95 : 0.9;
    if (iter < 20)
        return cf == 10 ? 0.95 : 0.7;
    return cf == 10 ? 0.6 : 0.5;
}

static void test_fallback(void)
{
    struct gv_adapt *ctl = make(10, 1000, GV_ADAPT_POLICY_EXPONENTIAL, 1000, 0.8, 1.0);
    struct env e = env_default();
    e.gain = gain_phases;
    struct step s[40];
    GV_CHECK(replay(ctl, &e, 40, s));
    static const struct run want[] = {
        {0, D, 1, 10, 20},  {1, C, 20, 10, 20},  {16, F, 10, 10, 20},
        {21, D, 1, 10, 20}, {26, C, 20, 10, 20},
    };
    CHECK_RUNS(s, 40, want);
    gv_adapt_destroy(ctl);
}

/* The EWMA with alpha = N/100 = 0.04 (4 workers), seeded with the first sample. The 20x ratio
 * is 0.9 for iterations 0..9, then 0.7. After k samples of 0.7 the smoothed gain is
 * 0.7 + 0.2 * 0.96^k, below eps 0.8 first at k = 17 (0.96^17 = 0.4996 < 0.5 < 0.96^16), i.e.
 * after iteration 26: the floor from iteration 27. */
static double gain_step_down(const struct env *e, double cf, uint64_t iter)
{
    (void)e;
    if (cf == 10)
        return 0.95;
    return iter < 10 ? 0.9 : 0.7;
}

static void test_ewma_crossing(void)
{
    struct gv_adapt *ctl = make(10, 1000, GV_ADAPT_POLICY_EXPONENTIAL, 1000, 0.8, 0.0);
    struct env e = env_default();
    e.gain = gain_step_down;
    struct step s[40];
    GV_CHECK(replay(ctl, &e, 40, s));
    static const struct run want[] = {{0, D, 1, 10, 20}, {1, C, 20, 10, 20}, {27, F, 10, 10, 20}};
    CHECK_RUNS(s, 40, want);
    struct gv_adapt_info info;
    gv_adapt_get_info(ctl, &info);
    GV_CHECK_NEAR(info.alpha, 0.04, 0, 0);
    /* 40 samples: 10 at 0.9 (seed + 9 that keep it at 0.9), then 30 at 0.7 */
    GV_CHECK_NEAR(info.gain_cand, 0.7 + 0.2 * pow(0.96, 30), 1e-12, 0);
    GV_CHECK_NEAR(info.gain_min, 0.95, 1e-12, 0);
    gv_adapt_destroy(ctl);
}

/* Floor raise, alpha 1, eps 0.8, exponential [10, 1000], window 10. Gains: 0.95 up to 40x,
 * 0.6 at 160x, 0.5 at 1000x.
 *   window 1 (after 9): gap |0.95-0.95|/0.95 = 0 <= 1% -> floor 20 (the CF just evaluated);
 *     scale-up to 40 (the ladder does not skip a rung) -> 10 at floor 20, 11.. candidate 40
 *   window 2 (after 19): gap 0 -> floor 40, candidate 160; 160x has gain 0.6 < 0.8 -> the
 *     floor 40 is sent from 20 on (20 unmeasured, then below epsilon)
 *   window 3 (after 29): gap 37% -> no raise; scale-up to 1000 (gain 0.5): floor still
 *   windows 4, 5: at the cap. Saturation never fires: only 40x was sent at or above the floor. */
static double gain_flat_then_drop(const struct env *e, double cf, uint64_t iter)
{
    (void)e, (void)iter;
    return cf <= 40 ? 0.95 : cf == 160 ? 0.6 : 0.5;
}

static void test_floor_raise(void)
{
    struct gv_adapt *ctl = make(10, 1000, GV_ADAPT_POLICY_EXPONENTIAL, 10, 0.8, 1.0);
    struct logcap cap = {0};
    gv_adapt_set_log(ctl, logcap_cb, &cap);
    struct env e = env_default();
    e.gain = gain_flat_then_drop;
    struct step s[50];
    GV_CHECK(replay(ctl, &e, 50, s));
    static const struct run want[] = {
        {0, D, 1, 10, 20},   {1, C, 20, 10, 20},   {10, F, 20, 20, 40},
        {11, C, 40, 20, 40}, {20, F, 40, 40, 160}, {30, F, 40, 40, 1000},
    };
    CHECK_RUNS(s, 50, want);

    /* decision log: iteration 0 (dense -> candidate), windows after 9, 19, 29, 39, 49, and
     * iteration 10 (floor -> candidate); no line when nothing changed */
    static const struct {
        const char *event, *reason;
        double iter;
    } log_want[] = {
        {"decision", "candidate-eligible", 0},
        {"window", "floor-raise+scale-up", 9},
        {"decision", "candidate-eligible", 10},
        {"window", "floor-raise+scale-up", 19},
        {"window", "scale-up", 29},
        {"window", "at-cap", 39},
        {"window", "at-cap", 49},
    };
    GV_CHECK_EQ(cap.n, (int)GV_ARRAY_LEN(log_want));
    for (int i = 0; i < cap.n && i < (int)GV_ARRAY_LEN(log_want); i++) {
        GV_CHECK_STREQ(jstr(cap.lines[i], "event"), log_want[i].event);
        GV_CHECK_STREQ(jstr(cap.lines[i], "reason"), log_want[i].reason);
        GV_CHECK_NEAR(jnum(cap.lines[i], "iter"), log_want[i].iter, 0, 0);
        GV_CHECK_STREQ(jstr(cap.lines[i], "controller"), "gravac");
        GV_CHECK_NEAR(jnum(cap.lines[i], "epsilon"), 0.8, 0, 0);
    }
    if (cap.n >= 2) {
        /* the first window: old decision candidate 20 at floor 10, new floor 20 */
        const cJSON *w = cap.lines[1];
        const cJSON *old = cJSON_GetObjectItem(w, "old"), *now = cJSON_GetObjectItem(w, "new");
        GV_CHECK_STREQ(jstr(old, "level"), "candidate");
        GV_CHECK_NEAR(jnum(old, "cf"), 20, 0, 0);
        GV_CHECK_NEAR(jnum(now, "theta_min"), 20, 0, 0);
        GV_CHECK_NEAR(jnum(now, "cf_candidate"), 40, 0, 0);
        GV_CHECK_STREQ(jstr(now, "level"), "floor");
        GV_CHECK_STREQ(jstr(w, "level_reason"), "candidate-unmeasured");
        const cJSON *win = cJSON_GetObjectItem(w, "window");
        GV_CHECK_NEAR(jnum(win, "gain_gap"), 0, 0, 0);
        GV_CHECK(cJSON_IsNull(cJSON_GetObjectItem(w, "gain_cand")));
        GV_CHECK_NEAR(jnum(w, "gain_min"), 0.95, 0, 0);
        /* T map: dense (iteration 0) and 20x (iterations 1..9) */
        const cJSON *tp = cJSON_GetObjectItem(w, "throughput");
        GV_CHECK_EQ(cJSON_GetArraySize(tp), 2);
        GV_CHECK_NEAR(jnum(cJSON_GetArrayItem(tp, 0), "cf"), 1, 0, 0);
        GV_CHECK_NEAR(jnum(cJSON_GetArrayItem(tp, 0), "tp"), 128 / (0.01 + 1.0), 1e-9, 0);
        GV_CHECK_NEAR(jnum(cJSON_GetArrayItem(tp, 1), "cf"), 20, 0, 0);
        GV_CHECK_NEAR(jnum(cJSON_GetArrayItem(tp, 1), "n"), 9, 0, 0);
        GV_CHECK_NEAR(jnum(cJSON_GetArrayItem(tp, 1), "tp"), 128 / (0.02 + 0.05) * 0.95, 1e-9, 0);
    }
    logcap_free(&cap);
    gv_adapt_destroy(ctl);
}

/* ---- saturation: environments that set the compression throughput of each CF directly */

struct sat_env {
    double t1280, t2000;
    uint64_t rise_at; /* from this iteration 1280x reaches 1100 */
};

static double tput_table(const struct env *e, double cf, uint64_t iter)
{
    const struct sat_env *se = e->user;
    if (cf == 1280)
        return iter >= se->rise_at ? 1100 : se->t1280;
    if (cf == 2000)
        return se->t2000;
    static const double cfs[] = {1, 10, 20, 40, 80, 160, 320, 640};
    static const double tp[] = {100, 500, 600, 700, 800, 850, 900, 950};
    for (size_t i = 0; i < GV_ARRAY_LEN(cfs); i++)
        if (cf == cfs[i])
            return tp[i];
    return 1; /* not reached */
}

static double gain_sat(const struct env *e, double cf, uint64_t iter)
{
    (void)e, (void)iter;
    return cf == 10 ? 0.95 : 0.9; /* gap 5.3%: no floor raise */
}

/* Geometric [10, 2000], window 5, alpha 1. T rises by >= 5% per rung up to 1280x; the paper's
 * example has T[1280] = 1029.9 and T[2000] = 1035.4 (within 1%). Window 7 (after 34) compares
 * 1280 with 640: 8.4% apart, scale-up to 2000. Window 8 (after 39): 2000 and 1280 are within
 * 0.53% -> the smaller CF, 1280 (new candidate: one floor iteration, 40). Window 9 scales up
 * to 2000 but saturation pins 1280 again (unchanged candidate: no floor iteration). The same
 * holds with the two values swapped, where the paper's get(ct[-2]) would pick 2000. */
static void test_saturation_smaller(void)
{
    const double pairs[2][2] = {{1029.9, 1035.4}, {1035.4, 1029.9}};
    for (int p = 0; p < 2; p++) {
        struct gv_adapt *ctl = make(10, 2000, GV_ADAPT_POLICY_GEOMETRIC, 5, 0.5, 1.0);
        struct sat_env se = {pairs[p][0], pairs[p][1], UINT64_MAX};
        struct env e = env_default();
        e.gain = gain_sat;
        e.tput = tput_table;
        e.user = &se;
        struct step s[80];
        GV_CHECK(replay(ctl, &e, 80, s));
        static const struct run want[] = {
            {0, D, 1, 10, 20},       {1, C, 20, 10, 20},      {5, F, 10, 10, 40},
            {6, C, 40, 10, 40},      {10, F, 10, 10, 80},     {11, C, 80, 10, 80},
            {15, F, 10, 10, 160},    {16, C, 160, 10, 160},   {20, F, 10, 10, 320},
            {21, C, 320, 10, 320},   {25, F, 10, 10, 640},    {26, C, 640, 10, 640},
            {30, F, 10, 10, 1280},   {31, C, 1280, 10, 1280}, {35, F, 10, 10, 2000},
            {36, C, 2000, 10, 2000}, {40, F, 10, 10, 1280},   {41, C, 1280, 10, 1280},
        };
        CHECK_RUNS(s, 80, want);
        gv_adapt_destroy(ctl);
    }
}

/* No permanent stop: pinned at 1280 as above; from iteration 60 1280x reaches 1100, so at the
 * window after 64 the top two (1280 fresh 1100, 2000 stale 1035.4) are 6.2% apart: the search
 * resumes with 2000 (65 floor, then candidate), and stays at the cap. */
static void test_saturation_resumes(void)
{
    struct gv_adapt *ctl = make(10, 2000, GV_ADAPT_POLICY_GEOMETRIC, 5, 0.5, 1.0);
    struct logcap cap = {0};
    gv_adapt_set_log(ctl, logcap_cb, &cap);
    struct sat_env se = {1029.9, 1035.4, 60};
    struct env e = env_default();
    e.gain = gain_sat;
    e.tput = tput_table;
    e.user = &se;
    struct step s[90];
    GV_CHECK(replay(ctl, &e, 90, s));
    static const struct run want[] = {
        {0, D, 1, 10, 20},       {1, C, 20, 10, 20},      {5, F, 10, 10, 40},
        {6, C, 40, 10, 40},      {10, F, 10, 10, 80},     {11, C, 80, 10, 80},
        {15, F, 10, 10, 160},    {16, C, 160, 10, 160},   {20, F, 10, 10, 320},
        {21, C, 320, 10, 320},   {25, F, 10, 10, 640},    {26, C, 640, 10, 640},
        {30, F, 10, 10, 1280},   {31, C, 1280, 10, 1280}, {35, F, 10, 10, 2000},
        {36, C, 2000, 10, 2000}, {40, F, 10, 10, 1280},   {41, C, 1280, 10, 1280},
        {65, F, 10, 10, 2000},   {66, C, 2000, 10, 2000},
    };
    CHECK_RUNS(s, 90, want);
    /* the window lines after 39 .. 59 say saturated, with the top two CFs */
    int saturated = 0;
    for (int i = 0; i < cap.n; i++) {
        if (strcmp(jstr(cap.lines[i], "reason"), "saturated") != 0)
            continue;
        saturated++;
        const cJSON *sat =
            cJSON_GetObjectItem(cJSON_GetObjectItem(cap.lines[i], "window"), "saturation");
        const cJSON *top = cJSON_GetObjectItem(sat, "top_cf");
        GV_CHECK_NEAR(cJSON_GetArrayItem(top, 0)->valuedouble, 2000, 0, 0);
        GV_CHECK_NEAR(cJSON_GetArrayItem(top, 1)->valuedouble, 1280, 0, 0);
        GV_CHECK(jnum(sat, "gap") <= 0.01);
    }
    GV_CHECK_EQ(saturated, 5); /* windows after 39, 44, 49, 54, 59 */
    logcap_free(&cap);
    gv_adapt_destroy(ctl);
}

/* Saturation at the floor: T[10] = 1000 and T[20] = 1005 (0.5%), 40x lower (800). Window 1
 * (after 4) ranks only 20x (the floor was never sent). Window 2 (after 9) ranks 20, 10, 40:
 * top two 20 and 10 within 1% -> the smaller is the floor: no candidate, one level to compute.
 * Window 3 scales up to 20 again, but fresh T[10] and stale T[20] are still within 1%. */
static double tput_floor_sat(const struct env *e, double cf, uint64_t iter)
{
    (void)e, (void)iter;
    return cf == 1 ? 100 : cf == 10 ? 1000 : cf == 20 ? 1005 : 800;
}

static void test_saturation_at_floor(void)
{
    struct gv_adapt *ctl = make(10, 1000, GV_ADAPT_POLICY_EXPONENTIAL, 5, 0.5, 1.0);
    struct env e = env_default();
    e.gain = gain_sat;
    e.tput = tput_floor_sat;
    struct step s[30];
    GV_CHECK(replay(ctl, &e, 30, s));
    static const struct run want[] = {
        {0, D, 1, 10, 20},  {1, C, 20, 10, 20},  {5, F, 10, 10, 40},
        {6, C, 40, 10, 40}, {10, F, 10, 10, 10},
    };
    CHECK_RUNS(s, 30, want);
    struct gv_adapt_decision d = {0};
    GV_CHECK_OK(gv_adapt_current(ctl, &d));
    GV_CHECK_EQ(d.levels, 1);
    GV_CHECK_NEAR(d.theta_s, 1.0, 0, 0);
    gv_adapt_destroy(ctl);
}

/* Warm-up: 5 iterations at the floor although 10x has gain 0.5 < eps 0.8 in 0..2; from 5 the
 * candidate (0.9). Windows count after warm-up: the first after 14 (5 + 10 - 1). */
static double gain_warm(const struct env *e, double cf, uint64_t iter)
{
    (void)e;
    if (cf == 10)
        return iter < 3 ? 0.5 : 0.95;
    return 0.9;
}

static void test_warmup(void)
{
    struct gv_adapt_config cfg;
    gv_adapt_config_default(&cfg, GV_ADAPT_GRAVAC);
    cfg.gravac.window = 10;
    cfg.gravac.epsilon = 0.8;
    cfg.gravac.alpha = 1.0;
    cfg.gravac.warmup_iters = 5;
    cfg.first_iter = 100;
    struct gv_adapt *ctl;
    GV_CHECK_OK(gv_adapt_create(&cfg, &ctl));
    struct env e = env_default();
    e.gain = gain_warm;
    struct step s[25];
    GV_CHECK(replay(ctl, &e, 25, s));
    static const struct run want[] = {
        {100, F, 10, 10, 20}, {105, C, 20, 10, 20}, {115, F, 10, 10, 40}, {116, C, 40, 10, 40}};
    CHECK_RUNS(s, 25, want);
    gv_adapt_destroy(ctl);
}

/* A zero gradient carries no gain information: iterations 0..2 have norm2_ef = 0, so no gain
 * is known and dense continues until the first real sample (3), candidate from 4. Later zero
 * gradients leave the gains unchanged. */
static void zero_hook(struct env *e, uint64_t iter)
{
    e->zero_grad = iter < 3 || (iter >= 10 && iter < 13);
}

static void test_zero_gradient(void)
{
    struct gv_adapt *ctl = make(10, 1000, GV_ADAPT_POLICY_EXPONENTIAL, 1000, 0.5, 1.0);
    struct env e = env_default();
    e.hook = zero_hook;
    struct step s[20];
    GV_CHECK(replay(ctl, &e, 20, s));
    static const struct run want[] = {{0, D, 1, 10, 20}, {4, C, 20, 10, 20}};
    CHECK_RUNS(s, 20, want);
    struct gv_adapt_info info;
    gv_adapt_get_info(ctl, &info);
    GV_CHECK_NEAR(info.gain_cand, gain_log(NULL, 20, 0), 0, 0);
    gv_adapt_destroy(ctl);
}

/* theta_min == theta_max: a single rung, never a candidate: dense first, then the floor. */
static void test_single_rung(void)
{
    struct gv_adapt *ctl = make(10, 10, GV_ADAPT_POLICY_EXPONENTIAL, 3, 0.5, 1.0);
    struct env e = env_default();
    struct step s[12];
    GV_CHECK(replay(ctl, &e, 12, s));
    static const struct run want[] = {{0, D, 1, 10, 10}, {1, F, 10, 10, 10}};
    CHECK_RUNS(s, 12, want);
    struct gv_adapt_decision d = {0};
    GV_CHECK_OK(gv_adapt_current(ctl, &d));
    GV_CHECK_EQ(d.levels, 1);
    gv_adapt_destroy(ctl);
}

/* Ratios above 1 (a rescaling compressor, rounding in sums) are clamped to 1; dense T uses
 * t_compute + t_comm only, compressed T adds t_compress. */
static void test_clamp_and_times(void)
{
    struct gv_adapt *ctl = make(10, 1000, GV_ADAPT_POLICY_EXPONENTIAL, 1000, 0.5, 1.0);
    struct gv_adapt_decision d = {0};
    GV_CHECK_OK(gv_adapt_current(ctl, &d));
    struct gv_adapt_obs o = {.iter = 0,
                             .level = D,
                             .cf_sent = 1,
                             .norm2_ef = 4,
                             .norm2_min = 5,
                             .norm2_cand = 3,
                             .t_compute = 0.5,
                             .t_compress = 7,
                             .t_comm = 1.5,
                             .samples = 100,
                             .num_workers = 8,
                             .lr = 0.1};
    GV_CHECK_OK(gv_adapt_update(ctl, &o, &d));
    struct gv_adapt_info info;
    gv_adapt_get_info(ctl, &info);
    GV_CHECK_NEAR(info.ratio_min, 1.0, 0, 0);
    GV_CHECK_NEAR(info.ratio_cand, 0.75, 0, 0);
    GV_CHECK_NEAR(info.t_sys, 50.0, 0, 0); /* 100 / (0.5 + 1.5): dense excludes t_compress */
    GV_CHECK_EQ(d.level, C);
    o = (struct gv_adapt_obs){.iter = 1,
                              .level = C,
                              .cf_sent = 20,
                              .norm2_ef = 4,
                              .norm2_min = 4,
                              .norm2_cand = 3,
                              .t_compute = 0.5,
                              .t_compress = 2,
                              .t_comm = 1.5,
                              .samples = 100,
                              .num_workers = 8,
                              .lr = 0.1};
    GV_CHECK_OK(gv_adapt_update(ctl, &o, &d));
    gv_adapt_get_info(ctl, &info);
    GV_CHECK_NEAR(info.t_sys, 25.0, 0, 0); /* 100 / (0.5 + 2 + 1.5) */
    GV_CHECK_EQ(info.n_tp, 2);
    GV_CHECK_NEAR(info.tp[1].cf, 20, 0, 0);
    GV_CHECK_NEAR(info.tp[1].tp, 25.0 * 0.75, 0, 0);
    GV_CHECK_NEAR(info.alpha, 1.0, 0, 0);
    gv_adapt_destroy(ctl);
}

/* The epsilon condition on the floor raise. All gains 0.8 < eps 0.9 until iteration 50 (dense),
 * then 0.95 up to 40x and 0.85 at 1000x. Default: the floor stays 10 while the candidate climbs
 * (20, 40, 160, 1000); from 51 the floor 10 is eligible. The paper's rule (raise_any_gain)
 * raises the floor at every window while dense (gap 0): 20, 40, 160, then 1000 with no
 * candidate left, and the floor 1000 (0.85 < 0.9) keeps training dense after 50. */
static double gain_low_then_high(const struct env *e, double cf, uint64_t iter)
{
    (void)e;
    if (iter < 50)
        return 0.8;
    return cf <= 40 ? 0.95 : 0.85;
}

static void test_floor_raise_needs_eligible(void)
{
    for (int paper = 0; paper < 2; paper++) {
        struct gv_adapt_config cfg;
        gv_adapt_config_default(&cfg, GV_ADAPT_GRAVAC);
        cfg.gravac.window = 10;
        cfg.gravac.alpha = 1.0;
        cfg.gravac.raise_any_gain = paper;
        struct gv_adapt *ctl;
        GV_CHECK_OK(gv_adapt_create(&cfg, &ctl));
        struct env e = env_default();
        e.gain = gain_low_then_high;
        struct step s[70];
        GV_CHECK(replay(ctl, &e, 70, s));
        static const struct run ours[] = {
            {0, D, 1, 10, 20},    {10, D, 1, 10, 40},    {20, D, 1, 10, 160},
            {30, D, 1, 10, 1000}, {51, F, 10, 10, 1000},
        };
        static const struct run papers[] = {
            {0, D, 1, 10, 20},     {10, D, 1, 20, 40},     {20, D, 1, 40, 160},
            {30, D, 1, 160, 1000}, {40, D, 1, 1000, 1000},
        };
        if (paper)
            CHECK_RUNS(s, 70, papers);
        else
            CHECK_RUNS(s, 70, ours);
        gv_adapt_destroy(ctl);
    }
}

int main(void)
{
    gv_log_set_level(GV_LOG_WARN);
    test_exponential_schedule();
    test_geometric_schedule();
    test_cap();
    test_fallback();
    test_ewma_crossing();
    test_floor_raise();
    test_floor_raise_needs_eligible();
    test_saturation_smaller();
    test_saturation_resumes();
    test_saturation_at_floor();
    test_warmup();
    test_zero_gradient();
    test_single_rung();
    test_clamp_and_times();
    return gv_check_summary();
}
