/* test_adapt_prop.c: properties of GraVAC over many random configurations and random
 * observation traces (seeded, reproducible): the CF always lies in [1, theta_max] and matches
 * the level; a level whose smoothed gain is below epsilon (or unmeasured) is never sent after
 * warm-up, and eligibility is maximal (no needless fallback); the gains follow the documented
 * EWMA recursion; window counts follow the configuration; and a controller that is saved and
 * restored at random points decides exactly like one that never stopped. */
#include "harness.h"

#include <math.h>

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static double unif(void)
{
    return (double)(rnd() >> 11) * 0x1.0p-53;
}

static uint64_t below(uint64_t n)
{
    return rnd() % n;
}

static void random_config(struct gv_adapt_config *cfg)
{
    static const double tmins[] = {1, 1.5, 10, 37.3};
    static const double spans[] = {1, 2, 100, 1e4, 3.7};
    gv_adapt_config_default(cfg, GV_ADAPT_GRAVAC);
    struct gv_adapt_gravac_cfg *g = &cfg->gravac;
    g->theta_min = tmins[below(4)];
    g->theta_max = g->theta_min * spans[below(5)];
    g->policy = below(2) ? GV_ADAPT_POLICY_GEOMETRIC : GV_ADAPT_POLICY_EXPONENTIAL;
    g->theta_s0 = below(3) ? 2.0 : 1.1 + 3 * unif();
    g->epsilon = below(8) == 0 ? 1.0 : 0.3 + 0.7 * unif();
    g->omega = below(4) == 0 ? 0.0 : 0.1 * unif();
    g->window = 1 + (uint32_t)below(40);
    g->alpha = below(2) ? 0.0 : 0.01 + 0.99 * unif();
    g->tp_alpha = below(2) ? 0.0 : unif();
    g->warmup_iters = below(2) ? 0 : (uint32_t)below(10);
    g->raise_any_gain = below(2);
    cfg->first_iter = below(2) ? 0 : rnd() >> 20;
}

/* Random but plausible observations, with the corner cases mixed in: ratios exactly at 0, at
 * 1 and above 1, zero gradients, zero times, zero samples, extreme magnitudes. */
static void random_obs(const struct gv_adapt_decision *d, struct gv_adapt_obs *o, double drift)
{
    memset(o, 0, sizeof(*o));
    o->iter = d->iter;
    o->level = d->level;
    o->cf_sent = d->cf_send;
    static const double mags[] = {1.0, 1e-30, 1e30, 3.5e5};
    o->norm2_ef = below(20) == 0 ? 0.0 : mags[below(4)] * (0.5 + unif());
    double r_min = below(10) == 0 ? (double)below(2) : drift + (1 - drift) * unif();
    double r_cand = below(10) == 0 ? 1.2 : r_min * (0.7 + 0.3 * unif());
    o->norm2_min = o->norm2_ef * r_min;
    o->norm2_cand = d->levels == 2 ? o->norm2_ef * r_cand : 0.0;
    o->t_compute = below(30) == 0 ? 0.0 : 0.05 + 0.1 * unif();
    o->t_compress = below(30) == 0 ? 0.0 : 0.01 * unif();
    o->t_comm = below(30) == 0 ? 0.0 : 1.0 / d->cf_send * (0.8 + 0.4 * unif());
    o->samples = below(50) == 0 ? 0 : 32 * (1 + below(64));
    o->num_workers = 1 + (uint32_t)below(300);
    o->lr = 0.1;
}

static bool bits_eq(double a, double b)
{
    return memcmp(&a, &b, sizeof(a)) == 0;
}

struct prev {
    bool min_known, cand_known;
    double gain_min, gain_cand;
    uint64_t windows;
    uint32_t levels;
};

static int check_step(const struct gv_adapt_config *cfg, const struct gv_adapt_decision *d,
                      const struct gv_adapt_info *info, const struct gv_adapt_obs *o,
                      const struct prev *p)
{
    const struct gv_adapt_gravac_cfg *g = &cfg->gravac;
    int bad = 0;
    /* the CF range and the level's CF */
    bad += !(d->cf_send >= 1.0 && d->cf_send <= g->theta_max);
    bad += !(d->theta_min >= g->theta_min && d->theta_min <= d->cf_candidate &&
             d->cf_candidate <= g->theta_max);
    bad += d->level == D && d->cf_send != 1.0;
    bad += d->level == F && d->cf_send != d->theta_min;
    bad += d->level == C && !(d->cf_send == d->cf_candidate && d->cf_candidate > d->theta_min);
    bad += d->levels != (d->cf_candidate > d->theta_min ? 2u : 1u);
    bad += d->iter != o->iter + 1;
    /* epsilon: never below, never needlessly above */
    if (!info->in_warmup) {
        bool cand_ok = d->levels == 2 && info->gain_cand_known && info->gain_cand >= g->epsilon;
        bool floor_ok = info->gain_min_known && info->gain_min >= g->epsilon;
        bad += d->level == C && !cand_ok;
        bad += d->level == F && !(floor_ok && !cand_ok);
        bad += d->level == D && (floor_ok || cand_ok);
    } else {
        bad += d->level != F;
    }
    /* windows */
    uint64_t counted =
        info->observations > g->warmup_iters ? info->observations - g->warmup_iters : 0;
    bad += info->windows != counted / g->window;
    /* the EWMA recursion, between windows (a window may move gains between levels) */
    if (info->windows == p->windows) {
        double a = g->alpha > 0 ? g->alpha : GV_MIN(1.0, o->num_workers / 100.0);
        if (o->norm2_ef > 0) {
            double r = GV_MIN(1.0, o->norm2_min / o->norm2_ef);
            double want = p->min_known ? a * r + (1 - a) * p->gain_min : r;
            bad += !info->gain_min_known || fabs(info->gain_min - want) > 1e-15;
            if (p->levels == 2) {
                double rc = GV_MIN(1.0, o->norm2_cand / o->norm2_ef);
                double wc = p->cand_known ? a * rc + (1 - a) * p->gain_cand : rc;
                bad += !info->gain_cand_known || fabs(info->gain_cand - wc) > 1e-15;
            }
        } else {
            bad += info->gain_min_known != p->min_known || !bits_eq(info->gain_min, p->gain_min);
            bad +=
                info->gain_cand_known != p->cand_known || !bits_eq(info->gain_cand, p->gain_cand);
        }
    }
    for (uint32_t i = 0; i < info->n_tp; i++)
        bad += !(isfinite(info->tp[i].tp) && info->tp[i].tp >= 0 && info->tp[i].cf <= g->theta_max);
    return bad;
}

static bool same(const struct gv_adapt_decision *a, const struct gv_adapt_decision *b)
{
    return a->iter == b->iter && a->level == b->level && a->levels == b->levels &&
           bits_eq(a->cf_send, b->cf_send) && bits_eq(a->theta_min, b->theta_min) &&
           bits_eq(a->cf_candidate, b->cf_candidate);
}

/* Replaces *ctl by a controller restored from its checkpoint. */
static void reincarnate(struct gv_adapt **ctl)
{
    size_t len = gv_adapt_state_size(*ctl), got;
    uint8_t *buf = malloc(len);
    GV_CHECK_OK(gv_adapt_save(*ctl, buf, len, &got));
    gv_adapt_destroy(*ctl);
    struct gv_adapt_config dflt;
    gv_adapt_config_default(&dflt, GV_ADAPT_DENSE);
    GV_CHECK_OK(gv_adapt_create(&dflt, ctl));
    GV_CHECK_OK(gv_adapt_restore(*ctl, buf, got));
    free(buf);
}

static void run_trace(uint64_t seed, int steps, int *violations, int *diverged, int *levels_seen)
{
    rng_state = seed * 0x9e3779b97f4a7c15ull + 1;
    struct gv_adapt_config cfg;
    random_config(&cfg);
    struct gv_adapt *a, *b;
    GV_CHECK_OK(gv_adapt_create(&cfg, &a));
    GV_CHECK_OK(gv_adapt_create(&cfg, &b));
    struct gv_adapt_decision da = {0}, db = {0};
    GV_CHECK_OK(gv_adapt_current(a, &da));
    GV_CHECK_OK(gv_adapt_current(b, &db));
    struct gv_adapt_info info;
    gv_adapt_get_info(a, &info);
    struct prev p = {false, false, 0, 0, 0, da.levels};
    double drift = unif() * 0.9;
    for (int i = 0; i < steps; i++) {
        struct gv_adapt_obs o;
        random_obs(&da, &o, drift);
        if (below(300) == 0)
            drift = unif() * 0.95; /* a new phase of training */
        uint32_t levels_before = da.levels;
        GV_CHECK_OK(gv_adapt_update(a, &o, &da));
        GV_CHECK_OK(gv_adapt_update(b, &o, &db));
        gv_adapt_get_info(a, &info);
        p.levels = levels_before;
        int bad = check_step(&cfg, &da, &info, &o, &p);
        if (bad && *violations < 5)
            fprintf(stderr, "seed %llu step %d: %d property violations\n", (unsigned long long)seed,
                    i, bad);
        *violations += bad;
        *diverged += !same(&da, &db);
        levels_seen[da.level]++;
        p = (struct prev){info.gain_min_known, info.gain_cand_known, info.gain_min,
                          info.gain_cand,      info.windows,         da.levels};
        if (below(250) == 0)
            reincarnate(&b);
    }
    gv_adapt_destroy(a);
    gv_adapt_destroy(b);
}

int main(int argc, char **argv)
{
    gv_log_set_level(GV_LOG_WARN);
    int traces = argc > 1 ? atoi(argv[1]) : 300;
    int violations = 0, diverged = 0, levels_seen[3] = {0};
    for (int t = 0; t < traces; t++)
        run_trace((uint64_t)t + 1, 1500, &violations, &diverged, levels_seen);
    GV_CHECK_EQ(violations, 0);
    GV_CHECK_EQ(diverged, 0);
    /* the traces are not degenerate: every level is chosen many times */
    for (int l = 0; l < 3; l++)
        GV_CHECK_MSG(levels_seen[l] > 1000, "level %s chosen %d times",
                     gv_adapt_level_str((enum gv_adapt_level)l), levels_seen[l]);
    printf("%d traces: dense %d, floor %d, candidate %d decisions\n", traces, levels_seen[0],
           levels_seen[1], levels_seen[2]);
    return gv_check_summary();
}
