/* auto.c: the AUTO controller (gv_adapt.h states its rules; docs/adapt.md section 4 gives the
 * measurements behind them): per-arm iteration times, the loss slope of every block,
 * incumbent-probe-incumbent sandwiches scored per pair of neighbours, phases at lr drops.
 * Pure arithmetic on the controller state; the decision log is built in log.c. */
#include "adapt_internal.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- configuration */

static gv_status_t auto_bad(const char *field, double v, const char *rule)
{
    gv_log(GV_LOG_ERROR, "adapt: config autoc.%s = %g is invalid (%s)", field, v, rule);
    return GV_ERR_INVAL;
}

gv_status_t auto_validate(const struct gv_adapt_auto_cfg *a)
{
    if (a->n_arms < 1 || a->n_arms > GV_ADAPT_AUTO_MAX_ARMS)
        return auto_bad("n_arms", a->n_arms, "must be in 1 .. 16");
    for (uint32_t i = 0; i < a->n_arms; i++) {
        double c = a->cf[i];
        if (!isfinite(c) || !(c == 1.0 || c == 2.0 || c > 2.0))
            return auto_bad("cf", c, "1 (dense), 2 (dense, halves) or a sparse CF > 2");
        if (i > 0 && !(c > a->cf[i - 1]))
            return auto_bad("cf", c, "must be strictly ascending");
    }
    const struct {
        const char *name;
        double v, lo, hi;
        bool lo_open, hi_open;
    } r[] = {
        {"gamma0", a->gamma0, 0, 8, false, false},
        {"block_frac", a->block_frac, 0, 1, true, false},
        {"probe_ratio", a->probe_ratio, 0, 1, true, false},
        {"z_switch", a->z_switch, 0, 100, true, false},
        {"forget", a->forget, 0, 1, false, false},
        {"tie", a->tie, 0, 1, false, true},
        {"probe_budget", a->probe_budget, 0, 1, true, false},
        {"lr_drop", a->lr_drop, 0, 1, true, true},
        {"timing_stop", a->timing_stop, 1, 1e6, true, false},
        {"quality_cf", a->quality_cf, 1, 1e9, false, false},
        {"quality_from", a->quality_from, 0, 1, false, false},
    };
    for (size_t i = 0; i < GV_ARRAY_LEN(r); i++) {
        double v = r[i].v;
        bool ok = isfinite(v) && (r[i].lo_open ? v > r[i].lo : v >= r[i].lo) &&
                  (r[i].hi_open ? v < r[i].hi : v <= r[i].hi);
        if (!ok)
            return auto_bad(r[i].name, v, "out of range (docs/adapt.md)");
    }
    if (a->block_skip > 1000)
        return auto_bad("block_skip", a->block_skip, "must be at most 1000");
    if (a->block_min < a->block_skip + 8 || a->block_min > 100000)
        return auto_bad("block_min", a->block_min, "must be in block_skip + 8 .. 100000");
    if (a->drop_rungs > GV_ADAPT_AUTO_MAX_ARMS)
        return auto_bad("drop_rungs", a->drop_rungs, "must be at most 16");
    if (a->timing_iters < 2 || a->timing_iters > 1000)
        return auto_bad("timing_iters", a->timing_iters, "must be in 2 .. 1000");
    return GV_OK;
}

/* ---------------------------------------------------------------- arms and their times */

/* CF 1 (f32) and 2 (halves) are dense arms: level DENSE, no error feedback. */
static bool arm_dense(const struct gv_adapt *ctl, uint32_t a)
{
    return ctl->cfg.autoc.cf[a] <= 2.0;
}

void auto_arm_core(const struct gv_adapt *ctl, uint32_t arm, struct adapt_core *core)
{
    const struct gv_adapt_auto_cfg *c = &ctl->cfg.autoc;
    if (arm_dense(ctl, arm)) {
        /* theta_min names the lowest sparse CF (a compressor's floor); the workers compress
         * there only on the first dense iteration after a sparse one, to send the residual */
        uint32_t s = 0; /* the lowest sparse arm, if any */
        while (s < c->n_arms && c->cf[s] <= 2.0)
            s++;
        core->level = GV_ADAPT_LEVEL_DENSE;
        core->cf_send = c->cf[arm];
        core->theta_min = core->cf_cand = s < c->n_arms ? c->cf[s] : 1.0;
        return;
    }
    core->level = GV_ADAPT_LEVEL_FLOOR;
    core->cf_send = core->theta_min = core->cf_cand = c->cf[arm];
}

/* Payload of an arm relative to dense f32 (a push, and the bounded downlink's update): sparse
 * entries cost a 4-byte value and about 1 byte of delta-coded index (1.25 / CF measured at
 * CF 10, 30 and 100 for the MLP: 115.2, 38.7, 11.9 KiB of 918.7 KiB). */
static double arm_payload(const struct gv_adapt *ctl, uint32_t a)
{
    const struct gv_adapt_auto_cfg *c = &ctl->cfg.autoc;
    if (arm_dense(ctl, a))
        return 1.0 / c->cf[a];
    return GV_MIN(1.0, 1.25 / c->cf[a]);
}

static double median(const double *v, uint32_t n)
{
    double s[AUTO_TRING];
    for (uint32_t i = 0; i < n; i++) { /* insertion sort: at most AUTO_TRING values */
        uint32_t j = i;
        for (; j > 0 && s[j - 1] > v[i]; j--)
            s[j] = s[j - 1];
        s[j] = v[i];
    }
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

double auto_arm_time(const struct gv_adapt *ctl, uint32_t arm, bool *measured_p)
{
    const struct auto_state *au = &ctl->au;
    if (measured_p != NULL)
        *measured_p = au->arm[arm].t_n > 0;
    if (au->arm[arm].t_n > 0)
        return median(au->arm[arm].t, au->arm[arm].t_n);
    /* the two nearest measured arms: the line through them in payload, never below the
     * nearest one's time and never falling with payload (an iteration does not get faster by
     * carrying more); one measured arm: its time scaled by payload when this arm carries more
     * (as if the whole iteration were communication), unchanged when it carries less */
    uint32_t n = ctl->cfg.autoc.n_arms, near[2];
    int k = 0;
    for (uint32_t d = 1; d < n && k < 2; d++)
        for (int side = 0; side < 2 && k < 2; side++) {
            int64_t j = side == 0 ? (int64_t)arm - d : (int64_t)arm + d;
            if (j >= 0 && j < (int64_t)n && au->arm[j].t_n > 0)
                near[k++] = (uint32_t)j;
        }
    if (k == 0)
        return 0.0;
    double x = arm_payload(ctl, arm), x0 = arm_payload(ctl, near[0]);
    double t0 = median(au->arm[near[0]].t, au->arm[near[0]].t_n);
    if (k == 1)
        return t0 * GV_MAX(1.0, x / x0);
    double x1 = arm_payload(ctl, near[1]);
    double t1 = median(au->arm[near[1]].t, au->arm[near[1]].t_n);
    double slope = x1 != x0 ? GV_MAX(0.0, (t1 - t0) / (x1 - x0)) : 0.0;
    return GV_MAX(t0, t0 + slope * (x - x0));
}

static void arm_sample(struct auto_arm *a, double t)
{
    a->t[a->t_pos] = t;
    a->t_pos = (a->t_pos + 1) % AUTO_TRING;
    if (a->t_n < AUTO_TRING)
        a->t_n++;
}

/* The quality guard: on from quality_from of the budget (or, the budget unknown, from the first
 * lr drop). The highest arm allowed: the last one with CF <= quality_cf while it is on. */
static bool guard_on(const struct gv_adapt *ctl)
{
    const struct gv_adapt_auto_cfg *c = &ctl->cfg.autoc;
    if (c->total_iters == 0)
        return ctl->au.phases > 0;
    return (double)ctl->n_obs >= c->quality_from * (double)c->total_iters;
}

static uint32_t arm_top(const struct gv_adapt *ctl)
{
    const struct gv_adapt_auto_cfg *c = &ctl->cfg.autoc;
    if (!guard_on(ctl))
        return c->n_arms - 1;
    uint32_t top = 0;
    while (top + 1 < c->n_arms && c->cf[top + 1] <= c->quality_cf)
        top++;
    return top;
}

/* The start prior: time x CF^gamma0 (dense counts as CF 1). */
static double arm_score(const struct gv_adapt *ctl, uint32_t a)
{
    double cf = arm_dense(ctl, a) ? 1.0 : ctl->cfg.autoc.cf[a];
    return auto_arm_time(ctl, a, NULL) * pow(cf, ctl->cfg.autoc.gamma0);
}

/* ---------------------------------------------------------------- blocks */

static void block_start(struct gv_adapt *ctl, uint32_t role, uint32_t arm)
{
    struct auto_state *au = &ctl->au;
    const struct gv_adapt_auto_cfg *c = &ctl->cfg.autoc;
    if (arm != au->cur)
        au->mixed = true; /* its first time sample carries the previous arm's update */
    au->role = role;
    au->cur = arm;
    au->b_iters = 0;
    au->b_time = au->b_tsum = 0.0;
    au->b_tn = 0;
    au->b_target = c->block_frac * au->phase_time * (role == AUTO_PROBE ? c->probe_ratio : 1.0);
    au->sn = au->sx = au->sy = au->sxx = au->sxy = au->syy = 0.0;
    if (role == AUTO_PROBE)
        au->probes++;
}

/* The slope of the block's loss per iteration, its variance and the rate per second. */
static void block_finish(struct gv_adapt *ctl, struct auto_block *b)
{
    const struct auto_state *au = &ctl->au;
    double n = au->sn;
    double sxx = au->sxx - au->sx * au->sx / n;
    double sxy = au->sxy - au->sx * au->sy / n;
    double syy = au->syy - au->sy * au->sy / n;
    memset(b, 0, sizeof(*b));
    b->arm = au->cur;
    b->iters = au->b_iters;
    /* the block's own time: a rate is compared with the blocks around it, and a change of the
     * machine's load between blocks far apart must not pass for a difference between arms */
    double t = au->b_tn > 0 ? au->b_tsum / (double)au->b_tn : auto_arm_time(ctl, au->cur, NULL);
    b->t = t;
    if (!(n >= 3.0 && sxx > 0.0))
        return;
    b->slope = sxy / sxx;
    double rss = GV_MAX(0.0, syy - b->slope * sxy);
    b->var = rss / (n - 2.0) / sxx;
    if (!(t > 0.0))
        return;
    b->rate = -b->slope / t;
    b->rate_var = b->var / (t * t);
    b->valid = isfinite(b->rate) && isfinite(b->rate_var);
}

/* Scores the sandwich a1 - probe - a2 on the pair of neighbours it spans. Returns the pair
 * (its upper arm - 1: dense in full against the first sparse arm is the pair of dense in
 * halves and that arm), or -1; *e_p and *var_p: the difference of rates, > 0 favouring the lower.
 */
static int sandwich(struct gv_adapt *ctl, const struct auto_block *a2, double *e_p, double *var_p)
{
    struct auto_state *au = &ctl->au;
    const struct auto_block *a1 = &au->a1, *b = &au->probe;
    if (!a1->valid || !b->valid || !a2->valid || a1->arm != a2->arm)
        return -1;
    double e = b->rate - 0.5 * (a1->rate + a2->rate);
    double var = b->rate_var + 0.25 * (a1->rate_var + a2->rate_var);
    if (!(var > 0.0) || !isfinite(e))
        return -1;
    uint32_t p = GV_MAX(b->arm, a2->arm) - 1;
    if (b->arm > a2->arm)
        e = -e; /* the probe above did better: evidence for the higher CF */
    double f = ctl->cfg.autoc.forget;
    au->ev_s[p] = f * au->ev_s[p] + e / var;
    au->ev_w[p] = f * au->ev_w[p] + 1.0 / var;
    au->ev_n[p]++;
    *e_p = e;
    *var_p = var;
    return (int)p;
}

static double pair_z(const struct auto_state *au, uint32_t p)
{
    return au->ev_w[p] > 0.0 ? au->ev_s[p] / sqrt(au->ev_w[p]) : 0.0;
}

/* After an incumbent block: a probe below or above (alternately), or another incumbent
 * block when neither may be probed now. Returns the reason for the log. */
static const char *next_after_inc(struct gv_adapt *ctl)
{
    struct auto_state *au = &ctl->au;
    const struct gv_adapt_auto_cfg *c = &ctl->cfg.autoc;
    double t_inc = auto_arm_time(ctl, au->inc, NULL);
    bool ok[2] = {false, false};
    if (au->inc > 0) { /* below: its least probe must fit the budget */
        double t_dn = auto_arm_time(ctl, au->inc - 1, NULL);
        /* the phase's probes below, this one's least length included, within the budget. Dense
         * in full below dense in halves is probed whatever its recorded time too: that may
         * hold a burst of load which made halves look faster; its probes back off as it keeps
         * losing (side_result) */
        ok[0] = au->probe_time + c->block_min * t_dn <= c->probe_budget * au->phase_time;
    }
    uint32_t up = au->inc + 1;
    if (up <= arm_top(ctl)) { /* above: only if measured to save time */
        bool meas;
        double t_up = auto_arm_time(ctl, up, &meas);
        bool both_dense = arm_dense(ctl, up);
        if (both_dense && !(meas && t_up < (1.0 - 0.5 * c->tie) * t_inc) &&
            up + 1 <= arm_top(ctl)) {
            /* the other dense arm sends the same gradient and saves no time: the rung above
             * the two dense arms is the first sparse one (the pair's evidence is kept on
             * dense in halves and that arm) */
            up++;
            t_up = auto_arm_time(ctl, up, &meas);
            both_dense = false;
        }
        ok[1] = meas && t_up < (1.0 - (both_dense ? 0.5 : 1.0) * c->tie) * t_inc;
    }
    for (int d = 0; d < 2; d++) /* a side that keeps losing waits its turn out */
        if (ok[d] && au->skip[d] > 0) {
            au->skip[d]--;
            ok[d] = false;
        }
    uint32_t d = ok[au->dir] ? au->dir : ok[1 - au->dir] ? 1 - au->dir : 2;
    if (d == 2) {
        block_start(ctl, AUTO_INC, au->inc);
        return "no-probe";
    }
    au->dir = 1 - d;
    block_start(ctl, AUTO_PROBE, d == 0 ? au->inc - 1 : up);
    return d == 0 ? "probe-below" : "probe-above";
}

/* A probe on side d (0 below) lost or not: a side that keeps losing is probed half as often
 * each time it loses again (up to 1 in 8 opportunities); one that does not, at every one. */
static void side_result(struct auto_state *au, uint32_t d, bool lost)
{
    au->lost[d] = lost ? GV_MIN(au->lost[d] + 1, 3u) : 0;
    au->skip[d] = lost ? (1u << au->lost[d]) - 1 : 0;
}

/* A sandwich on side d left the pair's evidence at z: lost when the neighbour is significantly
 * worse. */
static void backoff(struct auto_state *au, uint32_t d, double z, double z_switch)
{
    side_result(au, d, d == 0 ? z <= -z_switch : z >= z_switch);
}

static void switch_to(struct gv_adapt *ctl, uint32_t arm)
{
    struct auto_state *au = &ctl->au;
    au->inc = arm;
    au->switches++;
    au->a1.valid = false;
    au->probe.valid = false;
    memset(au->skip, 0, sizeof(au->skip));
    memset(au->lost, 0, sizeof(au->lost));
}

/* The prior checked again after a sandwich with `other` whose loss evidence is inconclusive
 * (z_inc, the pair's z-score for the incumbent, under half of z_switch): the timing stage's score,
 * time x CF^gamma0, with the times measured since (both arms over a full ring of samples). A
 * neighbour whose score is `tie` below the incumbent's replaces it
 *  - in the first phase while no loss evidence has moved the incumbent, either way: three timed
 *    iterations per arm can misjudge (the MLP at 1 Gbit/s started at CF 4, timed at 1.07x CF 10's
 *    time and then running at 1.3-1.9x it), and noisy losses may never give the evidence a
 *    z-score of z_switch either way;
 *  - at any time when the neighbour is also measured faster: an incumbent that costs more time
 *    per iteration keeps its place only while the evidence holds (one sandwich of noisy rates
 *    can reach z_switch: the MLP at 100 Mbit/s, seed 6, went to CF 4, 3x CF 10's time, at
 *    iteration 367 on one sandwich and stayed there for the 630 iterations left, the evidence
 *    never reaching z_switch the other way; so does an lr drop's step down).
 * An incumbent faster than the neighbour is not overruled by the prior once the evidence has
 * moved it there: evidence discounted by `forget` goes inconclusive, and the prior's quality
 * cost must not take back what the loss showed a faster arm to gain. */
static bool rescore(const struct gv_adapt *ctl, uint32_t other, double z_inc)
{
    const struct auto_state *au = &ctl->au;
    const struct gv_adapt_auto_cfg *c = &ctl->cfg.autoc;
    if (!(z_inc < 0.5 * c->z_switch) || other > arm_top(ctl) || au->arm[other].t_n < AUTO_TRING ||
        au->arm[au->inc].t_n < AUTO_TRING)
        return false;
    bool faster = auto_arm_time(ctl, other, NULL) < auto_arm_time(ctl, au->inc, NULL);
    if (!(au->prior && au->phases == 0) && !faster)
        return false;
    return arm_score(ctl, other) < (1.0 - c->tie) * arm_score(ctl, au->inc);
}

/* The block in force has ended: score it, move the incumbent if the evidence says so, start
 * the next block. */
static void block_end(struct gv_adapt *ctl, uint64_t iter, const struct adapt_core *old)
{
    struct auto_state *au = &ctl->au;
    const struct gv_adapt_auto_cfg *c = &ctl->cfg.autoc;
    struct auto_block b;
    block_finish(ctl, &b);
    struct auto_log l = {.event = "block", .old_core = old, .block = &b, .pair = -1};
    if (au->role == AUTO_PROBE) {
        au->probe = b;
        if (b.arm < au->inc)
            au->probe_time += au->b_time;
        double t_inc = au->a1.t > 0.0 ? au->a1.t : auto_arm_time(ctl, au->inc, NULL);
        bool both_dense = arm_dense(ctl, b.arm) && arm_dense(ctl, au->inc);
        if (!both_dense && b.arm < au->inc && b.t > 0.0 && b.t <= (1.0 + c->tie) * t_inc) {
            switch_to(ctl, b.arm); /* as fast, and compressing less */
            l.reason = "as-fast-below";
            block_start(ctl, AUTO_INC, au->inc);
        } else if (both_dense && b.t > 0.0 && b.t < (1.0 - 0.5 * c->tie) * t_inc) {
            /* dense in halves or in full: the same gradient, only the time tells them apart */
            switch_to(ctl, b.arm);
            l.reason = "faster-dense";
            block_start(ctl, AUTO_INC, au->inc);
        } else {
            if (both_dense && b.arm < au->inc) /* dense in full lost on time */
                side_result(au, 0, true);
            l.reason = "back-to-incumbent";
            block_start(ctl, AUTO_INC, au->inc);
        }
        adapt_log_auto(ctl, iter, &l);
        return;
    }
    l.pair = sandwich(ctl, &b, &l.e, &l.e_var);
    au->probe.valid = false;
    if (l.pair >= 0 && !arm_dense(ctl, (uint32_t)l.pair + 1)) { /* dense pairs: time only */
        double z = pair_z(au, (uint32_t)l.pair);
        uint32_t lo = (uint32_t)l.pair;
        bool inc_low = au->inc <= lo; /* the incumbent is the lower side (or the dense arm below) */
        backoff(au, inc_low ? 1 : 0, z, c->z_switch);
        if (lo + 1 == au->inc && z >= c->z_switch) {
            switch_to(ctl, lo);
            au->prior = false;
            l.reason = "evidence-below";
            block_start(ctl, AUTO_INC, au->inc);
            adapt_log_auto(ctl, iter, &l);
            return;
        }
        if (inc_low && z <= -c->z_switch && lo + 1 <= arm_top(ctl)) {
            switch_to(ctl, lo + 1);
            au->prior = false;
            l.reason = "evidence-above";
            block_start(ctl, AUTO_INC, au->inc);
            adapt_log_auto(ctl, iter, &l);
            return;
        }
        uint32_t other = au->probe.arm;
        if (rescore(ctl, other, inc_low ? z : -z)) {
            l.reason = other > au->inc ? "score-above" : "score-below";
            switch_to(ctl, other);
            block_start(ctl, AUTO_INC, au->inc);
            adapt_log_auto(ctl, iter, &l);
            return;
        }
    }
    au->a1 = b;
    l.reason = next_after_inc(ctl);
    adapt_log_auto(ctl, iter, &l);
}

/* The guard on, and the incumbent or the arm in force above what it allows: both come down to
 * the highest arm allowed, a new incumbent block. */
static void guard_check(struct gv_adapt *ctl, uint64_t iter, const struct adapt_core *old)
{
    struct auto_state *au = &ctl->au;
    uint32_t top = arm_top(ctl);
    if (au->inc <= top && au->cur <= top)
        return;
    if (au->inc > top)
        switch_to(ctl, top);
    block_start(ctl, AUTO_INC, au->inc);
    struct auto_log l = {.event = "guard", .reason = "quality-guard", .old_core = old, .pair = -1};
    adapt_log_auto(ctl, iter, &l);
}

/* ---------------------------------------------------------------- stages */

void auto_init(struct gv_adapt *ctl)
{
    struct auto_state *au = &ctl->au;
    memset(au, 0, sizeof(*au));
    au->stage = AUTO_TIMING;
    au->cur = au->inc = ctl->cfg.autoc.n_arms - 1;
    au->timing_left = ctl->cfg.autoc.timing_iters;
    au->mixed = true; /* the first iteration's time includes the start */
}

/* TIMING: one more iteration at the arm in force; the next arm down, or the start. */
static void timing_step(struct gv_adapt *ctl, uint64_t iter, const struct adapt_core *old)
{
    struct auto_state *au = &ctl->au;
    const struct gv_adapt_auto_cfg *c = &ctl->cfg.autoc;
    if (--au->timing_left > 0)
        return;
    /* down the ladder while the arm timed is not timing_stop times worse than the best score
     * so far: below it, iterations only get slower */
    double best_score = 0.0;
    for (uint32_t a = au->cur; a < c->n_arms; a++) {
        double sc = arm_score(ctl, a);
        if (sc > 0.0 && (best_score == 0.0 || sc < best_score))
            best_score = sc;
    }
    /* the next arm down, sparse and predicted from two measured arms (the line through them in
     * payload), already scoring timing_stop times the best: timing it would cost its iterations
     * and then stop the stage anyway. Dense arms are always timed: a line through sparse arms
     * includes their compression, and one through dense in halves its conversions, which dense
     * in full skips (on a fast link it can be the fastest arm of all) */
    bool skip_next = au->cur > 0 && au->cur + 1 < c->n_arms && !arm_dense(ctl, au->cur - 1) &&
                     arm_score(ctl, au->cur - 1) > c->timing_stop * best_score;
    if (au->cur > 0 && !skip_next && !(arm_score(ctl, au->cur) > c->timing_stop * best_score)) {
        au->inc = --au->cur; /* timing: the arm timed is the incumbent */
        au->timing_left = c->timing_iters;
        return;
    }
    uint32_t best = arm_top(ctl);
    for (uint32_t a = best; a-- > 0;) /* ties go to the lower CF */
        if (arm_score(ctl, a) <= arm_score(ctl, best))
            best = a;
    au->stage = AUTO_RUN;
    au->inc = best;
    au->prior = true;
    block_start(ctl, AUTO_INC, best);
    struct auto_log l = {.event = "timing", .reason = "start", .old_core = old, .pair = -1};
    adapt_log_auto(ctl, iter, &l);
}

/* A learning rate below lr_drop x the phase's: a new phase. */
static bool phase_check(struct gv_adapt *ctl, const struct gv_adapt_obs *obs,
                        const struct adapt_core *old)
{
    struct auto_state *au = &ctl->au;
    const struct gv_adapt_auto_cfg *c = &ctl->cfg.autoc;
    if (ctl->n_obs == 1 || obs->lr > au->phase_lr) {
        au->phase_lr = obs->lr; /* the first, or a warm-up going up */
        return false;
    }
    if (!(obs->lr < c->lr_drop * au->phase_lr))
        return false;
    au->phase_lr = obs->lr;
    au->phase_time = au->probe_time = 0.0;
    au->phases++;
    memset(au->ev_s, 0, sizeof(au->ev_s));
    memset(au->ev_w, 0, sizeof(au->ev_w));
    memset(au->ev_n, 0, sizeof(au->ev_n));
    au->a1.valid = au->probe.valid = false;
    memset(au->skip, 0, sizeof(au->skip));
    memset(au->lost, 0, sizeof(au->lost));
    au->dir = 0; /* the first probe looks below */
    if (au->stage == AUTO_RUN) {
        uint32_t s = 0; /* the lowest sparse arm: a drop never forces a dense arm */
        while (s + 1 < c->n_arms && arm_dense(ctl, s))
            s++;
        uint32_t to = au->inc > c->drop_rungs ? au->inc - c->drop_rungs : 0;
        if (to < s)
            to = GV_MIN(s, au->inc);
        au->inc = to;
        block_start(ctl, AUTO_INC, au->inc);
    }
    struct auto_log l = {.event = "phase", .reason = "lr-drop", .old_core = old, .pair = -1};
    adapt_log_auto(ctl, obs->iter, &l);
    return true;
}

void auto_update(struct gv_adapt *ctl, const struct gv_adapt_obs *obs)
{
    struct auto_state *au = &ctl->au;
    const struct gv_adapt_auto_cfg *c = &ctl->cfg.autoc;
    struct adapt_core old;
    adapt_core_get(ctl, &old);

    double t = obs->t_compute + obs->t_compress + obs->t_comm;
    struct auto_arm *arm = &au->arm[au->cur];
    arm->count++;
    bool clean = !au->mixed && t > 0.0;
    if (clean)
        arm_sample(arm, t);
    au->mixed = false;
    /* the time this iteration counts for: its own, clipped at 3 x the arm's median (worker 0's
     * evaluation pauses a round now and then; the bench and the user do not count them) */
    double t_med = auto_arm_time(ctl, au->cur, NULL);
    double t_est = clean ? GV_MIN(t, 3.0 * t_med) : t_med;
    au->phase_time += t_est;

    if (!phase_check(ctl, obs, &old)) {
        if (au->stage == AUTO_TIMING) {
            timing_step(ctl, obs->iter, &old);
        } else {
            au->b_iters++;
            au->b_time += t_est;
            if (clean) {
                au->b_tsum += t_est;
                au->b_tn++;
            }
            if (au->b_iters > c->block_skip) {
                double x = (double)au->b_iters, y = obs->loss;
                au->sn += 1.0;
                au->sx += x;
                au->sy += y;
                au->sxx += x * x;
                au->sxy += x * y;
                au->syy += y * y;
            }
            if (au->b_iters >= c->block_min && au->b_time >= au->b_target)
                block_end(ctl, obs->iter, &old);
        }
    }
    if (au->stage == AUTO_RUN)
        guard_check(ctl, obs->iter, &old);
    struct adapt_core now;
    auto_arm_core(ctl, au->cur, &now);
    ctl->level = now.level;
}

/* ---------------------------------------------------------------- restore checks */

static bool fin(double v)
{
    return isfinite(v);
}

static bool block_ok(const struct gv_adapt *ctl, const struct auto_block *b)
{
    return b->arm < ctl->cfg.autoc.n_arms && b->iters <= ctl->n_obs && fin(b->t) && b->t >= 0 &&
           fin(b->slope) && fin(b->var) && b->var >= 0 && fin(b->rate) && fin(b->rate_var) &&
           b->rate_var >= 0;
}

const char *auto_state_bad(const struct gv_adapt *ctl)
{
    const struct auto_state *au = &ctl->au;
    const struct gv_adapt_auto_cfg *c = &ctl->cfg.autoc;
    if (au->stage > AUTO_RUN || au->role > AUTO_PROBE || au->dir > 1)
        return "stage";
    if (au->inc >= c->n_arms || au->cur >= c->n_arms)
        return "arms";
    if (au->stage == AUTO_TIMING &&
        (au->cur != au->inc || au->timing_left < 1 || au->timing_left > c->timing_iters))
        return "timing";
    for (int d = 0; d < 2; d++)
        if (au->lost[d] > 3 || au->skip[d] >= (1u << au->lost[d]))
            return "backoff";
    if (au->b_tn > au->b_iters || !fin(au->b_tsum) || au->b_tsum < 0)
        return "block time";
    if (au->b_iters > ctl->n_obs || !fin(au->b_time) || au->b_time < 0 || !fin(au->b_target) ||
        au->b_target < 0 || !fin(au->sn + au->sx + au->sy + au->sxx + au->sxy + au->syy))
        return "block";
    if (!block_ok(ctl, &au->a1) || !block_ok(ctl, &au->probe))
        return "blocks";
    for (uint32_t p = 0; p < GV_ADAPT_AUTO_MAX_ARMS; p++)
        if (!fin(au->ev_s[p]) || !fin(au->ev_w[p]) || au->ev_w[p] < 0 || au->ev_n[p] > ctl->n_obs)
            return "evidence";
    if (!fin(au->phase_lr) || au->phase_lr < 0 || !fin(au->phase_time) || au->phase_time < 0 ||
        !fin(au->probe_time) || au->probe_time < 0 || au->phases > ctl->n_obs ||
        au->switches > ctl->n_obs || au->probes > ctl->n_obs)
        return "phase";
    uint64_t total = 0;
    for (uint32_t a = 0; a < GV_ADAPT_AUTO_MAX_ARMS; a++) {
        const struct auto_arm *r = &au->arm[a];
        if (r->t_n > AUTO_TRING || r->t_pos >= AUTO_TRING || (a >= c->n_arms && r->count > 0))
            return "arm times";
        for (uint32_t i = 0; i < r->t_n; i++)
            if (!fin(r->t[i]) || r->t[i] <= 0)
                return "arm times";
        total += r->count;
    }
    if (total != ctl->n_obs)
        return "arm counts";
    struct adapt_core core;
    auto_arm_core(ctl, au->cur, &core);
    if (ctl->level != core.level)
        return "level";
    return NULL;
}
