/* test_adapt_state.c: checkpoints (bit-identical continuation after save and restore, for GraVAC
 * and Accordion; refusal of truncated, corrupt, inconsistent or foreign-version input with the
 * controller unchanged), parameter and observation validation (clear error, state unchanged),
 * and allocation-failure injection. */
#include "adapt_internal.h"
#include "harness.h"

#include <math.h>

/* ---- error-log capture: counts lines and keeps the last one */

struct errcap {
    int n;
    char last[512];
};

static void errcap_cb(enum gv_log_level level, const char *line, void *arg)
{
    struct errcap *c = arg;
    (void)level;
    c->n++;
    snprintf(c->last, sizeof(c->last), "%s", line);
}

/* ---- a deterministic noisy environment in phases, so that the long trace walks through
 * every rule: [0, 400) every gain below epsilon (dense); [400, 1500) gains 0.95 at 10x falling
 * 0.04 per doubling (eligible up to 40x, floor raises within omega 6%); from 1500 gains 0.99
 * falling 0.01 per doubling, with compute-bound throughput (saturation at high CFs). Pure
 * function of (iteration, CF): a restored controller sees the same observations. */

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static double noise(uint64_t iter, double cf, uint64_t salt)
{
    uint64_t bits;
    memcpy(&bits, &cf, sizeof(bits));
    return (double)(mix(iter * 31 + bits * 7 + salt) >> 11) * 0x1.0p-53 - 0.5; /* [-0.5, 0.5) */
}

static double gain_noisy(const struct env *e, double cf, uint64_t iter)
{
    (void)e;
    double a = iter < 150 ? 0.7 : iter < 1500 ? 0.95 : 0.99;
    double b = iter < 1500 ? 0.02 : 0.004;
    double g = a - b * log2(cf / 10.0) + 0.02 * noise(iter, cf, 1);
    return g < 0 ? 0 : g > 1 ? 1 : g;
}

static void noisy_hook(struct env *e, uint64_t iter)
{
    e->t_compute = 0.1 * (1.0 + 0.1 * noise(iter, 0, 2));
    e->comm_dense = 0.5 * (1.0 + 0.1 * noise(iter, 0, 3));
    e->zero_grad = iter % 97 == 13;
}

static struct env env_noisy(void)
{
    struct env e = {.gain = gain_noisy,
                    .t_compress = 0.005,
                    .samples = 256,
                    .workers = 8,
                    .lr = 0.1,
                    .hook = noisy_hook};
    return e;
}

static struct gv_adapt_config cfg_noisy(void)
{
    struct gv_adapt_config cfg;
    gv_adapt_config_default(&cfg, GV_ADAPT_GRAVAC);
    cfg.gravac.window = 100;
    cfg.gravac.epsilon = 0.85;
    cfg.gravac.omega = 0.03;
    cfg.gravac.theta_max = 2000;
    cfg.gravac.policy = GV_ADAPT_POLICY_GEOMETRIC;
    cfg.first_iter = 1;
    return cfg;
}

/* ---- raw log lines, hashed, for comparing two runs (ADAPT_DUMP=1 prints them) */

struct rawlog {
    int n;
    uint64_t hash;
    int reasons[8]; /* floor-raise, saturated, candidate-below-epsilon, floor-below-epsilon */
};

static void rawlog_cb(const char *line, void *arg)
{
    struct rawlog *r = arg;
    if (getenv("ADAPT_DUMP") != NULL)
        printf("%s\n", line);
    r->n++;
    for (const char *p = line; *p; p++)
        r->hash = (r->hash ^ (uint8_t)*p) * 0x100000001b3ull;
    static const char *const keys[] = {"floor-raise", "\"saturated", "candidate-below-epsilon",
                                       "floor-below-epsilon"};
    for (size_t i = 0; i < GV_ARRAY_LEN(keys); i++)
        if (strstr(line, keys[i]) != NULL)
            r->reasons[i]++;
}

static bool same_decision(const struct gv_adapt_decision *a, const struct gv_adapt_decision *b)
{
    return a->iter == b->iter && a->level == b->level && a->levels == b->levels &&
           memcmp(&a->cf_send, &b->cf_send, sizeof(double)) == 0 &&
           memcmp(&a->theta_min, &b->theta_min, sizeof(double)) == 0 &&
           memcmp(&a->cf_candidate, &b->cf_candidate, sizeof(double)) == 0 &&
           memcmp(&a->theta_s, &b->theta_s, sizeof(double)) == 0;
}

static uint8_t *save_alloc(const struct gv_adapt *ctl, size_t *len_p)
{
    size_t len = gv_adapt_state_size(ctl);
    uint8_t *buf = malloc(len);
    size_t got = 0;
    GV_CHECK_OK(gv_adapt_save(ctl, buf, len, &got));
    GV_CHECK_EQ(got, len);
    *len_p = len;
    return buf;
}

/* Runs the whole trace once straight, and once stopped at `cut`, saved, restored into a
 * controller created with another configuration, and continued. Decisions, log lines and the
 * final saved bytes must be identical. */
#define TRACE_LEN 3000
static void continuation_at(size_t cut, struct rawlog *full_log_out)
{
    struct gv_adapt_config cfg = cfg_noisy();
    struct gv_adapt *a, *b, *c;
    GV_CHECK_OK(gv_adapt_create(&cfg, &a));
    GV_CHECK_OK(gv_adapt_create(&cfg, &b));
    struct gv_adapt_config other;
    gv_adapt_config_default(&other, GV_ADAPT_ACCORDION);
    other.accordion.num_layers = 5; /* restore replaces it wholesale */
    GV_CHECK_OK(gv_adapt_create(&other, &c));
    struct rawlog la = {0, 0xcbf29ce484222325ull, {0}}, lc = la, lb = la;
    gv_adapt_set_log(a, rawlog_cb, &la);
    gv_adapt_set_log(b, rawlog_cb, &lb);
    gv_adapt_set_log(c, rawlog_cb, &lc);

    struct env ea = env_noisy(), eb = env_noisy();
    struct gv_adapt_decision da = {0}, db = {0}, dc = {0};
    GV_CHECK_OK(gv_adapt_current(a, &da));
    GV_CHECK_OK(gv_adapt_current(b, &db));
    struct gv_adapt_obs o;
    for (size_t i = 0; i < cut; i++) {
        env_obs(&ea, &da, &o);
        GV_CHECK_OK(gv_adapt_update(a, &o, &da));
        env_obs(&eb, &db, &o);
        GV_CHECK_OK(gv_adapt_update(b, &o, &db));
    }
    size_t len;
    uint8_t *blob = save_alloc(b, &len);
    gv_adapt_destroy(b);
    GV_CHECK_OK(gv_adapt_restore(c, blob, len));
    free(blob);
    GV_CHECK_OK(gv_adapt_current(c, &dc));
    GV_CHECK(same_decision(&da, &dc));
    la.n = 0;
    la.hash = lc.hash;
    int mismatches = 0;
    for (size_t i = cut; i < TRACE_LEN; i++) {
        env_obs(&ea, &da, &o);
        GV_CHECK_OK(gv_adapt_update(a, &o, &da));
        env_obs(&eb, &dc, &o);
        if (gv_adapt_update(c, &o, &dc) != GV_OK || !same_decision(&da, &dc))
            mismatches++;
    }
    GV_CHECK_MSG(mismatches == 0, "cut %zu: %d decisions differ after restore", cut, mismatches);
    GV_CHECK_EQ(la.n, lc.n);
    GV_CHECK_MSG(la.hash == lc.hash, "cut %zu: decision log differs after restore", cut);
    size_t la_len, lc_len;
    uint8_t *sa = save_alloc(a, &la_len), *sc = save_alloc(c, &lc_len);
    GV_CHECK(la_len == lc_len && memcmp(sa, sc, la_len) == 0);
    free(sa);
    free(sc);
    if (full_log_out != NULL)
        *full_log_out = la;
    gv_adapt_destroy(a);
    gv_adapt_destroy(c);
}

static void test_continuation_gravac(void)
{
    static const size_t cuts[] = {0, 1, 17, 24, 25, 26, 500, 1234, 2999, 3000};
    for (size_t i = 0; i < GV_ARRAY_LEN(cuts); i++)
        continuation_at(cuts[i], NULL);
    /* the trace exercises every rule the state carries */
    struct rawlog full;
    continuation_at(0, &full);
    GV_CHECK(full.reasons[0] > 0); /* floor raise */
    GV_CHECK(full.reasons[1] > 0); /* saturation */
    GV_CHECK(full.reasons[2] > 0); /* candidate below epsilon */
    GV_CHECK(full.reasons[3] > 0); /* floor below epsilon (dense) */
}

/* Accordion: continuation across checks and an lr decay, per-layer decisions identical. */
static void acc_obs(uint64_t i, const struct gv_adapt_decision *d, struct gv_adapt_obs *o,
                    double *norms)
{
    memset(o, 0, sizeof(*o));
    o->iter = i;
    o->level = d->level;
    o->cf_sent = d->cf_send;
    o->num_workers = 2;
    o->lr = i < 300 ? 0.1 : 0.01;
    o->epoch_end = i % 7 == 6;
    o->num_layers = 4;
    o->layer_norms = norms;
    for (int l = 0; l < 4; l++)
        norms[l] = 1.0 + (double)l + 0.8 * noise(i, l, 9) * (l == 0 ? 1.0 : 0.1);
}

static void test_continuation_accordion(void)
{
    struct gv_adapt_config cfg;
    gv_adapt_config_default(&cfg, GV_ADAPT_ACCORDION);
    cfg.accordion.num_layers = 4;
    cfg.accordion.switch_epochs = 3;
    static const uint64_t cuts[] = {0, 6, 7, 50, 299, 300, 301, 499};
    for (size_t k = 0; k < GV_ARRAY_LEN(cuts); k++) {
        struct gv_adapt *a, *b;
        GV_CHECK_OK(gv_adapt_create(&cfg, &a));
        GV_CHECK_OK(gv_adapt_create(&cfg, &b));
        double cfa[4], cfb[4], norms[4];
        struct gv_adapt_decision da = {.layer_cf = cfa, .layer_cap = 4};
        struct gv_adapt_decision db = {.layer_cf = cfb, .layer_cap = 4};
        GV_CHECK_OK(gv_adapt_current(a, &da));
        struct gv_adapt_obs o;
        for (uint64_t i = 0; i < cuts[k]; i++) {
            acc_obs(i, &da, &o, norms);
            GV_CHECK_OK(gv_adapt_update(a, &o, &da));
        }
        size_t len;
        uint8_t *blob = save_alloc(a, &len);
        GV_CHECK_OK(gv_adapt_restore(b, blob, len));
        free(blob);
        GV_CHECK_OK(gv_adapt_current(b, &db));
        int diff = 0, heavy_seen = 0;
        for (uint64_t i = cuts[k]; i < 500; i++) {
            diff += !same_decision(&da, &db) || memcmp(cfa, cfb, sizeof(cfa)) != 0;
            heavy_seen += cfa[1] == cfg.accordion.cf_heavy;
            acc_obs(i, &da, &o, norms);
            GV_CHECK_OK(gv_adapt_update(a, &o, &da));
            GV_CHECK_OK(gv_adapt_update(b, &o, &db));
        }
        GV_CHECK_MSG(diff == 0, "accordion cut %llu: %d decisions differ",
                     (unsigned long long)cuts[k], diff);
        if (cuts[k] == 0)
            GV_CHECK(heavy_seen > 0); /* layer 1's norm settles: it goes heavy at some point */
        gv_adapt_destroy(a);
        gv_adapt_destroy(b);
    }
}

/* ---- corrupt input */

static gv_status_t restore_into(struct gv_adapt *ctl, const uint8_t *buf, size_t len,
                                const uint8_t *ref, size_t ref_len)
{
    gv_status_t st = gv_adapt_restore(ctl, buf, len);
    if (st != GV_OK) {
        /* refused: the controller still saves the same bytes */
        size_t n;
        uint8_t *now = save_alloc(ctl, &n);
        if (n != ref_len || memcmp(now, ref, n) != 0)
            GV_CHECK_FAIL_("controller changed by a refused restore");
        free(now);
    }
    return st;
}

static struct gv_adapt *trained(size_t iters)
{
    struct gv_adapt_config cfg = cfg_noisy();
    struct gv_adapt *ctl;
    GV_CHECK_OK(gv_adapt_create(&cfg, &ctl));
    struct env e = env_noisy();
    struct step *s = calloc(iters, sizeof(*s));
    GV_CHECK(replay(ctl, &e, iters, s));
    free(s);
    return ctl;
}

static void test_corrupt(void)
{
    struct errcap ec = {0};
    gv_log_set_cb(errcap_cb, &ec);
    struct gv_adapt *src = trained(700), *dst = trained(100);
    size_t len, ref_len;
    uint8_t *blob = save_alloc(src, &len), *ref = save_alloc(dst, &ref_len);
    uint8_t *mut = malloc(len + 1);

    int accepted = 0;
    for (size_t i = 0; i < len; i++) {
        for (int m = 0; m < 2; m++) {
            memcpy(mut, blob, len);
            mut[i] ^= m == 0 ? 0x01 : 0xff;
            accepted += restore_into(dst, mut, len, ref, ref_len) == GV_OK;
        }
    }
    GV_CHECK_EQ(accepted, 0);
    for (size_t n = 0; n < len; n++)
        GV_CHECK_STATUS(restore_into(dst, blob, n, ref, ref_len), GV_ERR_PROTO);
    memcpy(mut, blob, len);
    mut[len] = 0;
    GV_CHECK_STATUS(restore_into(dst, mut, len + 1, ref, ref_len), GV_ERR_PROTO);
    GV_CHECK_STATUS(restore_into(dst, NULL, len, ref, ref_len), GV_ERR_PROTO);

    /* another format version, well formed otherwise */
    memcpy(mut, blob, len);
    mut[4] = (uint8_t)(ADAPT_STATE_VERSION + 1);
    adapt_state_seal(mut, len);
    GV_CHECK_STATUS(restore_into(dst, mut, len, ref, ref_len), GV_ERR_VERSION);
    /* another kind with this body: the length cannot match */
    memcpy(mut, blob, len);
    mut[6] = GV_ADAPT_STATIC;
    adapt_state_seal(mut, len);
    GV_CHECK_STATUS(restore_into(dst, mut, len, ref, ref_len), GV_ERR_PROTO);
    GV_CHECK(strstr(ec.last, "refusing checkpoint") != NULL);

    /* well formed and checksummed, but inconsistent: forged through the internal state */
    struct gv_adapt saved = *src;
    for (int f = 0; f < 9; f++) {
        *src = saved;
        switch (f) {
        case 0: src->floor_rung = src->cand_rung + 1; break;
        case 1: src->cand_rung = src->top_rung + 1; break;
        case 2: src->s_min = 1.5; break;
        case 3: src->s_cand = NAN; break;
        case 4: src->win_obs = (src->win_obs + 1) % src->cfg.gravac.window; break;
        case 5:
            src->tp[0].iter = src->cfg.first_iter + src->n_obs;
            src->tp[0].count = 1;
            break;
        case 6: src->cfg.gravac.epsilon = 0; break; /* invalid configuration */
        case 7:                                     /* a level that eligibility would not give */
            src->level =
                src->level == GV_ADAPT_LEVEL_DENSE ? GV_ADAPT_LEVEL_FLOOR : GV_ADAPT_LEVEL_DENSE;
            break;
        case 8: src->t_sys = -1; break;
        }
        size_t n = gv_adapt_state_size(src), got;
        uint8_t *forged = malloc(n);
        GV_CHECK_OK(gv_adapt_save(src, forged, n, &got));
        int before = ec.n;
        GV_CHECK_STATUS(restore_into(dst, forged, n, ref, ref_len), GV_ERR_PROTO);
        GV_CHECK(ec.n > before);
        free(forged);
    }
    *src = saved;
    GV_CHECK_OK(restore_into(dst, blob, len, ref, ref_len)); /* the original still restores */
    /* version 1 (before AUTO's state gained a flag) is read for the other kinds */
    memcpy(mut, blob, len);
    mut[4] = 1;
    adapt_state_seal(mut, len);
    GV_CHECK_OK(gv_adapt_restore(dst, mut, len));

    /* save into a short buffer */
    size_t got = 0;
    GV_CHECK_STATUS(gv_adapt_save(src, mut, len - 1, &got), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_adapt_save(src, NULL, len, &got), GV_ERR_INVAL);
    GV_CHECK_EQ(got, 0);

    free(mut);
    free(blob);
    free(ref);
    gv_adapt_destroy(src);
    gv_adapt_destroy(dst);
    gv_log_set_cb(NULL, NULL);
}

/* Accordion-specific inconsistencies. */
static void test_corrupt_accordion(void)
{
    struct errcap ec = {0};
    gv_log_set_cb(errcap_cb, &ec);
    struct gv_adapt_config cfg;
    gv_adapt_config_default(&cfg, GV_ADAPT_ACCORDION);
    cfg.accordion.num_layers = 3;
    struct gv_adapt *src, *dst;
    GV_CHECK_OK(gv_adapt_create(&cfg, &src));
    GV_CHECK_OK(gv_adapt_create(&cfg, &dst));
    size_t ref_len;
    uint8_t *ref = save_alloc(dst, &ref_len);
    for (int f = 0; f < 4; f++) {
        accordion_init(src);
        switch (f) {
        case 0: src->heavy[1] = 2; break;
        case 1: src->heavy[1] = 1; break; /* heavy before any check */
        case 2:
            src->ref_valid = true;
            src->ref_norm[2] = -1;
            break;
        case 3: src->phase_start = 5; break;
        }
        size_t n = gv_adapt_state_size(src), got;
        uint8_t *forged = malloc(n);
        GV_CHECK_OK(gv_adapt_save(src, forged, n, &got));
        GV_CHECK_STATUS(restore_into(dst, forged, n, ref, ref_len), GV_ERR_PROTO);
        free(forged);
    }
    free(ref);
    gv_adapt_destroy(src);
    gv_adapt_destroy(dst);
    gv_log_set_cb(NULL, NULL);
}

/* ---- invalid parameters */

static void test_invalid_config(void)
{
    struct errcap ec = {0};
    gv_log_set_cb(errcap_cb, &ec);
    for (int c = 0; c < 24; c++) {
        struct gv_adapt_config cfg;
        gv_adapt_config_default(&cfg, GV_ADAPT_GRAVAC);
        const char *field = ""; /* must appear in the error line */
        switch (c) {
        case 0:
            cfg.gravac.epsilon = 0;
            field = "epsilon";
            break;
        case 1:
            cfg.gravac.epsilon = 1.0000001;
            field = "epsilon";
            break;
        case 2:
            cfg.gravac.epsilon = NAN;
            field = "epsilon";
            break;
        case 3:
            cfg.gravac.omega = 1;
            field = "omega";
            break;
        case 4:
            cfg.gravac.omega = -0.01;
            field = "omega";
            break;
        case 5:
            cfg.gravac.theta_min = 0.5;
            field = "theta_min";
            break;
        case 6:
            cfg.gravac.theta_min = 2000;
            field = "theta_max";
            break; /* > theta_max */
        case 7:
            cfg.gravac.theta_max = INFINITY;
            field = "theta_max";
            break;
        case 8:
            cfg.gravac.window = 0;
            field = "window";
            break;
        case 9:
            cfg.gravac.alpha = 1.5;
            field = "alpha";
            break;
        case 10:
            cfg.gravac.alpha = NAN;
            field = "alpha";
            break;
        case 11:
            cfg.gravac.theta_s0 = 1;
            field = "theta_s0";
            break;
        case 12:
            cfg.gravac.tp_alpha = -1;
            field = "tp_alpha";
            break;
        case 13:
            cfg.gravac.policy = (enum gv_adapt_policy)7;
            field = "policy";
            break;
        case 14: /* geometric from 1 to 1e300: about 1000 rungs, far above the limit */
            cfg.gravac.theta_min = 1;
            cfg.gravac.theta_max = 1e300;
            cfg.gravac.policy = GV_ADAPT_POLICY_GEOMETRIC;
            field = "rungs";
            break;
        case 15:
            cfg.gravac.theta_s0 = INFINITY;
            field = "theta_s0";
            break;
        case 16:
            cfg.kind = (enum gv_adapt_kind)9;
            field = "kind";
            break;
        case 17:
            cfg.kind = GV_ADAPT_STATIC;
            cfg.static_cf = 0.9;
            field = "static_cf";
            break;
        case 18:
            cfg.kind = GV_ADAPT_ACCORDION;
            field = "num_layers";
            break; /* 0 layers */
        case 19:
            cfg.kind = GV_ADAPT_ACCORDION;
            cfg.accordion.num_layers = 2;
            cfg.accordion.cf_heavy = 5; /* < cf_light 10 */
            field = "cf_heavy";
            break;
        case 20:
            cfg.kind = GV_ADAPT_ACCORDION;
            cfg.accordion.num_layers = 2;
            cfg.accordion.eta = 0;
            field = "eta";
            break;
        case 21:
            cfg.kind = GV_ADAPT_ACCORDION;
            cfg.accordion.num_layers = 2;
            cfg.accordion.switch_epochs = 0;
            field = "switch_epochs";
            break;
        case 22:
            cfg.kind = GV_ADAPT_ACCORDION;
            cfg.accordion.num_layers = GV_ADAPT_MAX_LAYERS + 1;
            field = "num_layers";
            break;
        case 23:
            cfg.gravac.theta_min = NAN;
            field = "theta_min";
            break;
        }
        struct gv_adapt *ctl = (struct gv_adapt *)&ec; /* must stay untouched */
        int before = ec.n;
        GV_CHECK_STATUS(gv_adapt_create(&cfg, &ctl), GV_ERR_INVAL);
        GV_CHECK(ctl == (struct gv_adapt *)&ec);
        GV_CHECK_EQ(ec.n, before + 1);
        GV_CHECK_MSG(strstr(ec.last, field) != NULL, "case %d: '%s' does not name %s", c, ec.last,
                     field);
    }
    /* the edges of the valid ranges */
    struct gv_adapt_config cfg;
    gv_adapt_config_default(&cfg, GV_ADAPT_GRAVAC);
    cfg.gravac.epsilon = 1;
    cfg.gravac.omega = 0;
    cfg.gravac.alpha = 1;
    cfg.gravac.tp_alpha = 1;
    cfg.gravac.window = 1;
    cfg.gravac.theta_min = 1;
    cfg.gravac.theta_max = 1;
    GV_CHECK_OK(gv_adapt_config_validate(&cfg));
    GV_CHECK_STATUS(gv_adapt_config_validate(NULL), GV_ERR_INVAL);
    gv_log_set_cb(NULL, NULL);
}

static void test_invalid_obs(void)
{
    struct errcap ec = {0};
    gv_log_set_cb(errcap_cb, &ec);
    struct gv_adapt *ctl = trained(60);
    size_t ref_len;
    uint8_t *ref = save_alloc(ctl, &ref_len);
    struct gv_adapt_decision d0 = {0};
    GV_CHECK_OK(gv_adapt_current(ctl, &d0));
    struct env e = env_noisy();
    struct gv_adapt_obs good;
    env_obs(&e, &d0, &good);
    for (int c = 0; c < 17; c++) {
        struct gv_adapt_obs o = good;
        const char *field = ""; /* must appear in the error line */
        switch (c) {
        case 0:
            o.norm2_ef = NAN;
            field = "norm2_ef";
            break;
        case 1:
            o.norm2_min = -1;
            field = "norm2_min";
            break;
        case 2:
            o.norm2_cand = INFINITY;
            field = "norm2_cand";
            break;
        case 3:
            o.t_compute = NAN;
            field = "t_compute";
            break;
        case 4:
            o.t_compress = -0.5;
            field = "t_compress";
            break;
        case 5:
            o.t_comm = -INFINITY;
            field = "t_comm";
            break;
        case 6:
            o.lr = NAN;
            field = "lr";
            break;
        case 7:
            o.num_workers = 0;
            field = "num_workers";
            break;
        case 8:
            o.iter++;
            field = "out of sequence";
            break;
        case 9:
            o.iter--;
            field = "out of sequence";
            break;
        case 10:
            o.level = o.level == D ? F : D;
            field = "decision was";
            break;
        case 11:
            o.cf_sent *= 2;
            field = "decision was";
            break;
        case 12:
            o.cf_sent = NAN;
            field = "decision was";
            break;
        case 13:
            o.t_compute = 1e308;
            o.t_comm = 1e308;
            field = "t_compute + t_compress";
            break;
        case 14:
            o.norm2_ef = -0.0 - 1e-300;
            field = "norm2_ef";
            break;
        case 15:
            o.t_comm = NAN;
            o.norm2_ef = NAN;
            field = "norm2_ef";
            break;
        case 16:
            o.norm2_min = NAN;
            field = "norm2_min";
            break;
        }
        struct gv_adapt_decision d;
        memset(&d, 0xab, sizeof(d));
        d.layer_cf = NULL;
        struct gv_adapt_decision sentinel = d;
        int before = ec.n;
        GV_CHECK_STATUS(gv_adapt_update(ctl, &o, &d), GV_ERR_INVAL);
        GV_CHECK_MSG(memcmp(&d, &sentinel, sizeof(d)) == 0, "case %d: decision written", c);
        GV_CHECK_EQ(ec.n, before + 1);
        GV_CHECK_MSG(strstr(ec.last, field) != NULL, "case %d: '%s' does not name %s", c, ec.last,
                     field);
        size_t n;
        uint8_t *now = save_alloc(ctl, &n);
        GV_CHECK_MSG(n == ref_len && memcmp(now, ref, n) == 0, "case %d: state changed", c);
        free(now);
    }
    GV_CHECK_STATUS(gv_adapt_update(ctl, NULL, &d0), GV_ERR_INVAL);
    struct gv_adapt_decision d;
    GV_CHECK_OK(gv_adapt_update(ctl, &good, &d)); /* the good one is still accepted */
    GV_CHECK_EQ(d.iter, good.iter + 1);
    free(ref);
    gv_adapt_destroy(ctl);
    gv_log_set_cb(NULL, NULL);
}

/* ---- allocation failures: every failing allocation is reported and leaks nothing */

static void test_alloc_failures(void)
{
    struct errcap ec = {0};
    gv_log_set_cb(errcap_cb, &ec);
    struct gv_adapt_config cfg;
    gv_adapt_config_default(&cfg, GV_ADAPT_ACCORDION);
    cfg.accordion.num_layers = 8;
    gv_alloc_fail_nth(0);
    struct gv_adapt *ctl;
    GV_CHECK_OK(gv_adapt_create(&cfg, &ctl));
    uint64_t allocs = gv_alloc_fail_nth(0);
    GV_CHECK(allocs >= 2);
    gv_adapt_destroy(ctl);
    for (uint64_t n = 1; n <= allocs; n++) {
        gv_alloc_fail_nth(n);
        ctl = NULL;
        GV_CHECK_STATUS(gv_adapt_create(&cfg, &ctl), GV_ERR_NOMEM);
        GV_CHECK(ctl == NULL);
    }
    gv_alloc_fail_nth(0);

    /* restore needs a scratch controller: failing it leaves the target unchanged */
    struct gv_adapt *src = trained(50), *dst = trained(10);
    size_t len, ref_len;
    uint8_t *blob = save_alloc(src, &len), *ref = save_alloc(dst, &ref_len);
    gv_alloc_fail_nth(1);
    GV_CHECK_STATUS(restore_into(dst, blob, len, ref, ref_len), GV_ERR_NOMEM);
    gv_alloc_fail_nth(0);
    GV_CHECK_OK(gv_adapt_restore(dst, blob, len));
    free(blob);
    free(ref);
    gv_adapt_destroy(src);
    gv_adapt_destroy(dst);
    gv_adapt_destroy(NULL);
    gv_log_set_cb(NULL, NULL);
}

int main(void)
{
    gv_log_set_level(GV_LOG_WARN);
    test_continuation_gravac();
    test_continuation_accordion();
    test_corrupt();
    test_corrupt_accordion();
    test_invalid_config();
    test_invalid_obs();
    test_alloc_failures();
    return gv_check_summary();
}
