/* gravac.c: the GraVAC rules (gv_adapt.h states them): gain smoothing, the throughput map,
 * per-iteration epsilon eligibility and the window routine (floor raise, scale-up on the
 * ladder, saturation). Pure arithmetic on the controller state; logging goes through log.c. */
#include "adapt_internal.h"

#include <math.h>
#include <stdio.h>

void gravac_init(struct gv_adapt *ctl)
{
    ctl->floor_rung = 0;
    ctl->cand_rung = ctl->top_rung >= 1 ? 1 : 0;
    /* No gain is known before the first observation: dense is the only level whose gain is
     * known (1), unless the user asked for a warm-up at the floor. */
    ctl->level = ctl->cfg.gravac.warmup_iters > 0 ? GV_ADAPT_LEVEL_FLOOR : GV_ADAPT_LEVEL_DENSE;
}

static double ewma(double s, bool known, double a, double r)
{
    return known ? a * r + (1.0 - a) * s : r;
}

static double ratio01(double num, double den)
{
    double r = num / den;
    return r > 1.0 ? 1.0 : r;
}

static void gravac_gains(struct gv_adapt *ctl, const struct gv_adapt_obs *obs)
{
    double a = ctl->cfg.gravac.alpha;
    if (a == 0.0)
        a = GV_MIN(1.0, (double)obs->num_workers / 100.0);
    ctl->alpha = a;
    if (!(obs->norm2_ef > 0.0))
        return; /* a zero gradient says nothing about what the compressor keeps */
    ctl->r_min = ratio01(obs->norm2_min, obs->norm2_ef);
    ctl->s_min = ewma(ctl->s_min, ctl->min_known, a, ctl->r_min);
    ctl->min_known = true;
    if (ctl->cand_rung > ctl->floor_rung) {
        ctl->r_cand = ratio01(obs->norm2_cand, obs->norm2_ef);
        ctl->s_cand = ewma(ctl->s_cand, ctl->cand_known, a, ctl->r_cand);
        ctl->cand_known = true;
    }
}

static void gravac_throughput(struct gv_adapt *ctl, const struct gv_adapt_obs *obs)
{
    double t_sys = adapt_t_sys(obs);
    if (t_sys < 0.0)
        return;
    struct adapt_tp_slot *slot;
    double gain;
    switch (obs->level) {
    case GV_ADAPT_LEVEL_CANDIDATE:
        slot = &ctl->tp[ctl->cand_rung];
        gain = ctl->s_cand;
        if (!ctl->cand_known)
            return;
        break;
    case GV_ADAPT_LEVEL_FLOOR:
        slot = &ctl->tp[ctl->floor_rung];
        gain = ctl->s_min;
        if (!ctl->min_known)
            return; /* warm-up before any non-zero gradient */
        break;
    default:
        slot = &ctl->tp_dense;
        gain = 1.0;
        break;
    }
    double v = t_sys * gain;
    double a = ctl->cfg.gravac.tp_alpha;
    slot->tp = (a > 0.0 && slot->count > 0) ? a * v + (1.0 - a) * slot->tp : v;
    slot->gain = gain;
    slot->iter = obs->iter;
    slot->count++;
}

enum gv_adapt_level gravac_eligible(const struct gv_adapt *ctl, const char **why_p)
{
    double eps = ctl->cfg.gravac.epsilon;
    bool has_cand = ctl->cand_rung > ctl->floor_rung;
    if (has_cand && ctl->cand_known && ctl->s_cand >= eps) {
        *why_p = "candidate-eligible";
        return GV_ADAPT_LEVEL_CANDIDATE;
    }
    if (ctl->min_known && ctl->s_min >= eps) {
        *why_p = !has_cand          ? "no-candidate"
                 : !ctl->cand_known ? "candidate-unmeasured"
                                    : "candidate-below-epsilon";
        return GV_ADAPT_LEVEL_FLOOR;
    }
    *why_p = ctl->min_known ? "floor-below-epsilon" : "gain-unknown";
    return GV_ADAPT_LEVEL_DENSE;
}

/* Saturation: the two largest T among rungs >= the floor; ties rank the smaller CF first so
 * that the result never depends on scan order. Returns the number of entries ranked. */
static int gravac_top_two(const struct gv_adapt *ctl, uint32_t top[2])
{
    int n = 0;
    for (uint32_t r = ctl->floor_rung; r <= ctl->top_rung; r++) {
        if (ctl->tp[r].count == 0)
            continue;
        double t = ctl->tp[r].tp;
        if (n == 0) {
            top[0] = r;
        } else if (t > ctl->tp[top[0]].tp) {
            top[1] = top[0];
            top[0] = r;
        } else if (n == 1 || t > ctl->tp[top[1]].tp) {
            top[1] = r;
        }
        n++;
    }
    return n;
}

static void gravac_window(struct gv_adapt *ctl, struct gravac_window_log *w)
{
    const struct gv_adapt_gravac_cfg *g = &ctl->cfg.gravac;
    uint32_t eval = ctl->cand_rung;
    bool raised = false, saturated = false;

    /* 1. floor raise to the CF just evaluated (the paper's text) */
    if (eval > ctl->floor_rung && ctl->cand_known && ctl->min_known && ctl->s_min > 0.0) {
        w->gain_gap = fabs(ctl->s_min - ctl->s_cand) / ctl->s_min;
        if (w->gain_gap <= g->omega && (g->raise_any_gain || ctl->s_cand >= g->epsilon)) {
            ctl->floor_rung = eval;
            ctl->s_min = ctl->s_cand; /* the new floor's gain is the one just measured */
            raised = true;
        }
    }
    /* 2. scale-up one rung, capped at theta_max */
    uint32_t next = eval < ctl->top_rung ? eval + 1 : ctl->top_rung;
    bool scaled = next != eval;
    ctl->cand_rung = next;

    /* 3. saturation: smaller CF of the two best throughputs at or above the floor */
    w->sat_n = gravac_top_two(ctl, w->sat_rung);
    if (w->sat_n >= 2) {
        double t1 = ctl->tp[w->sat_rung[0]].tp, t2 = ctl->tp[w->sat_rung[1]].tp;
        if (t2 > 0.0) {
            w->sat_gap = (t1 - t2) / t2;
            if (w->sat_gap <= g->omega) {
                ctl->cand_rung = GV_MIN(w->sat_rung[0], w->sat_rung[1]);
                saturated = true;
            }
        }
    }
    if (ctl->cand_rung != eval || ctl->cand_rung == ctl->floor_rung) {
        ctl->cand_known = false; /* a new candidate starts unmeasured */
        ctl->s_cand = 0.0;
        ctl->r_cand = 0.0;
    }
    ctl->windows++;

    const char *what = saturated                          ? "saturated"
                       : scaled                           ? "scale-up"
                       : ctl->floor_rung == ctl->top_rung ? "floor-at-cap"
                                                          : "at-cap";
    snprintf(w->reason_buf, sizeof(w->reason_buf), "%s%s", raised ? "floor-raise+" : "", what);
    w->reason = w->reason_buf;
}

void gravac_update(struct gv_adapt *ctl, const struct gv_adapt_obs *obs)
{
    const struct gv_adapt_gravac_cfg *g = &ctl->cfg.gravac;
    struct adapt_core old;
    adapt_core_get(ctl, &old);

    gravac_gains(ctl, obs);
    gravac_throughput(ctl, obs);

    struct gravac_window_log w = {.old_core = &old, .gain_gap = -1.0, .sat_gap = -1.0};
    bool windowed = false;
    if (ctl->n_obs > g->warmup_iters && ++ctl->win_obs >= g->window) {
        ctl->win_obs = 0;
        gravac_window(ctl, &w);
        windowed = true;
    }
    const char *why = "warmup";
    ctl->level = adapt_in_warmup(ctl) ? GV_ADAPT_LEVEL_FLOOR : gravac_eligible(ctl, &why);

    if (ctl->log_cb == NULL)
        return;
    struct adapt_core now;
    adapt_core_get(ctl, &now);
    if (windowed) {
        w.level_reason = why;
        adapt_log_gravac_window(ctl, obs->iter, &w);
    } else if (!adapt_core_eq(&now, &old)) {
        adapt_log_decision(ctl, obs->iter, &old, why);
    }
}
