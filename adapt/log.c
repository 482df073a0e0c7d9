/* log.c: the decision log. Builds one JSON object per window and per decision change with cJSON
 * and hands the unformatted line to the caller's sink. Building a string is all it does: no
 * I/O. An allocation failure drops that line with a warning and never affects the decision. */
#include "adapt_internal.h"

#include <cjson/cJSON.h>
#include <math.h>

/* Collects failures so that a line with a missing field is dropped, never emitted. */
struct jb {
    bool fail;
};

static cJSON *j_obj(struct jb *b, cJSON *parent, const char *key)
{
    cJSON *o = parent == NULL ? cJSON_CreateObject() : cJSON_AddObjectToObject(parent, key);
    if (o == NULL)
        b->fail = true;
    return o;
}

static cJSON *j_arr(struct jb *b, cJSON *parent, const char *key)
{
    cJSON *o = cJSON_AddArrayToObject(parent, key);
    if (o == NULL)
        b->fail = true;
    return o;
}

static void j_num(struct jb *b, cJSON *o, const char *key, double v)
{
    if (cJSON_AddNumberToObject(o, key, v) == NULL)
        b->fail = true;
}

/* A number, or null when unknown (cJSON also prints NaN and infinities as null). */
static void j_num_or_null(struct jb *b, cJSON *o, const char *key, double v, bool known)
{
    cJSON *r = known ? cJSON_AddNumberToObject(o, key, v) : cJSON_AddNullToObject(o, key);
    if (r == NULL)
        b->fail = true;
}

static void j_str(struct jb *b, cJSON *o, const char *key, const char *s)
{
    if (cJSON_AddStringToObject(o, key, s) == NULL)
        b->fail = true;
}

static void j_push(struct jb *b, cJSON *arr, double v)
{
    if (!cJSON_AddItemToArray(arr, cJSON_CreateNumber(v)))
        b->fail = true;
}

static void j_core(struct jb *b, cJSON *parent, const char *key, const struct adapt_core *c)
{
    cJSON *o = j_obj(b, parent, key);
    j_str(b, o, "level", gv_adapt_level_str(c->level));
    j_num(b, o, "cf", c->cf_send);
    j_num(b, o, "theta_min", c->theta_min);
    j_num(b, o, "cf_candidate", c->cf_cand);
    j_num(b, o, "theta_s", c->cf_cand / c->theta_min);
}

static cJSON *j_head(struct jb *b, const struct gv_adapt *ctl, const char *event, uint64_t iter,
                     const struct adapt_core *old_core, const char *reason)
{
    cJSON *o = j_obj(b, NULL, NULL);
    struct adapt_core now;
    adapt_core_get(ctl, &now);
    j_str(b, o, "controller", gv_adapt_kind_str(ctl->cfg.kind));
    j_str(b, o, "event", event);
    j_num(b, o, "iter", (double)iter);
    j_num(b, o, "next_iter", (double)(iter + 1));
    j_str(b, o, "reason", reason);
    j_core(b, o, "old", old_core);
    j_core(b, o, "new", &now);
    return o;
}

static void j_tp_entry(struct jb *b, cJSON *arr, double cf, const struct adapt_tp_slot *s)
{
    if (s->count == 0)
        return;
    cJSON *e = cJSON_CreateObject();
    if (!cJSON_AddItemToArray(arr, e)) {
        cJSON_Delete(e);
        b->fail = true;
        return;
    }
    j_num(b, e, "cf", cf);
    j_num(b, e, "tp", s->tp);
    j_num(b, e, "gain", s->gain);
    j_num(b, e, "iter", (double)s->iter);
    j_num(b, e, "n", (double)s->count);
}

static void j_gravac_inputs(struct jb *b, cJSON *o, const struct gv_adapt *ctl)
{
    const struct gv_adapt_gravac_cfg *g = &ctl->cfg.gravac;
    j_num_or_null(b, o, "gain_min", ctl->s_min, ctl->min_known);
    j_num_or_null(b, o, "gain_cand", ctl->s_cand, ctl->cand_known);
    j_num(b, o, "ratio_min", ctl->r_min);
    j_num(b, o, "ratio_cand", ctl->r_cand);
    j_num(b, o, "alpha", ctl->alpha);
    j_num(b, o, "epsilon", g->epsilon);
    j_num(b, o, "omega", g->omega);
    j_num(b, o, "t_sys", ctl->t_sys);
    cJSON *tp = j_arr(b, o, "throughput");
    j_tp_entry(b, tp, 1.0, &ctl->tp_dense);
    for (uint32_t r = 0; r <= ctl->top_rung; r++)
        j_tp_entry(b, tp, ctl->rung_cf[r], &ctl->tp[r]);
}

static void j_emit(struct jb *b, const struct gv_adapt *ctl, cJSON *o)
{
    char *line = b->fail ? NULL : cJSON_PrintUnformatted(o);
    if (line == NULL)
        gv_log(GV_LOG_WARN, "adapt: out of memory building a decision log line; line dropped");
    else
        ctl->log_cb(line, ctl->log_arg);
    cJSON_free(line);
    cJSON_Delete(o);
}

void adapt_log_decision(const struct gv_adapt *ctl, uint64_t iter,
                        const struct adapt_core *old_core, const char *reason)
{
    struct jb b = {false};
    cJSON *o = j_head(&b, ctl, "decision", iter, old_core, reason);
    if (ctl->cfg.kind == GV_ADAPT_GRAVAC)
        j_gravac_inputs(&b, o, ctl);
    if (ctl->cfg.kind == GV_ADAPT_ACCORDION) {
        j_num(&b, o, "heavy_layers", accordion_heavy_count(ctl));
        j_num(&b, o, "layers", ctl->cfg.accordion.num_layers);
    }
    j_emit(&b, ctl, o);
}

void adapt_log_gravac_window(const struct gv_adapt *ctl, uint64_t iter,
                             const struct gravac_window_log *w)
{
    struct jb b = {false};
    cJSON *o = j_head(&b, ctl, "window", iter, w->old_core, w->reason);
    j_str(&b, o, "level_reason", w->level_reason);
    cJSON *win = j_obj(&b, o, "window");
    j_num(&b, win, "index", (double)ctl->windows);
    j_num(&b, win, "floor_rung", ctl->floor_rung);
    j_num(&b, win, "cand_rung", ctl->cand_rung);
    j_num(&b, win, "top_rung", ctl->top_rung);
    j_num_or_null(&b, win, "gain_gap", w->gain_gap, w->gain_gap >= 0.0);
    cJSON *sat = j_obj(&b, win, "saturation");
    j_num(&b, sat, "ranked", w->sat_n);
    if (w->sat_n >= 2) {
        cJSON *top = j_arr(&b, sat, "top_cf");
        j_push(&b, top, ctl->rung_cf[w->sat_rung[0]]);
        j_push(&b, top, ctl->rung_cf[w->sat_rung[1]]);
    }
    j_num_or_null(&b, sat, "gap", w->sat_gap, w->sat_gap >= 0.0);
    j_gravac_inputs(&b, o, ctl);
    j_emit(&b, ctl, o);
}

void adapt_log_accordion_check(const struct gv_adapt *ctl, uint64_t iter, uint64_t epoch,
                               const struct adapt_core *old_core, const char *reason)
{
    const struct gv_adapt_accordion_cfg *a = &ctl->cfg.accordion;
    struct jb b = {false};
    cJSON *o = j_head(&b, ctl, "window", iter, old_core, reason);
    j_num(&b, o, "epoch", (double)epoch);
    j_num(&b, o, "eta", a->eta);
    j_num(&b, o, "heavy_layers", accordion_heavy_count(ctl));
    j_num(&b, o, "layers", a->num_layers);
    cJSON *ratio = j_arr(&b, o, "ratio"); /* null: reference check, or a zero reference norm */
    cJSON *heavy = j_arr(&b, o, "heavy");
    for (uint32_t l = 0; l < a->num_layers && !b.fail; l++) {
        j_push(&b, ratio, ctl->ratio[l]);
        j_push(&b, heavy, ctl->heavy[l]);
    }
    j_emit(&b, ctl, o);
}

static const char *auto_role_str(uint32_t role)
{
    return role == AUTO_PROBE ? "probe" : "incumbent";
}

static void j_auto_block(struct jb *b, cJSON *o, const struct gv_adapt *ctl,
                         const struct auto_block *blk)
{
    cJSON *k = j_obj(b, o, "block");
    j_num(b, k, "cf", ctl->cfg.autoc.cf[blk->arm]);
    j_num(b, k, "iters", (double)blk->iters);
    j_num(b, k, "t_ms", 1e3 * blk->t);
    j_num_or_null(b, k, "slope", blk->slope, blk->valid);
    j_num_or_null(b, k, "slope_se", sqrt(blk->var), blk->valid);
    j_num_or_null(b, k, "rate", blk->rate, blk->valid);
    j_num_or_null(b, k, "rate_se", sqrt(blk->rate_var), blk->valid);
}

void adapt_log_auto(const struct gv_adapt *ctl, uint64_t iter, const struct auto_log *l)
{
    if (ctl->log_cb == NULL)
        return;
    const struct auto_state *au = &ctl->au;
    const struct gv_adapt_auto_cfg *c = &ctl->cfg.autoc;
    struct jb b = {false};
    cJSON *o = j_head(&b, ctl, l->event, iter, l->old_core, l->reason);
    j_num(&b, o, "incumbent", c->cf[au->inc]);
    j_str(&b, o, "next_block", auto_role_str(au->role));
    j_num(&b, o, "next_block_s", au->b_target);
    j_num(&b, o, "phase", (double)au->phases);
    j_num(&b, o, "phase_s", au->phase_time);
    j_num(&b, o, "lr", au->phase_lr);
    if (l->block != NULL)
        j_auto_block(&b, o, ctl, l->block);
    if (l->pair >= 0) {
        uint32_t p = (uint32_t)l->pair;
        cJSON *s = j_obj(&b, o, "sandwich");
        cJSON *pair = j_arr(&b, s, "pair");
        j_push(&b, pair, c->cf[p]);
        j_push(&b, pair, c->cf[p + 1]);
        j_num(&b, s, "diff", l->e); /* > 0: the lower CF made the loss fall faster */
        j_num(&b, s, "diff_se", sqrt(l->e_var));
        j_num(&b, s, "z", au->ev_w[p] > 0 ? au->ev_s[p] / sqrt(au->ev_w[p]) : 0.0);
        j_num(&b, s, "n", (double)au->ev_n[p]);
    }
    cJSON *arms = j_arr(&b, o, "arms");
    for (uint32_t a = 0; a < c->n_arms && !b.fail; a++) {
        cJSON *e = cJSON_CreateObject();
        if (!cJSON_AddItemToArray(arms, e)) {
            cJSON_Delete(e);
            b.fail = true;
            break;
        }
        bool meas;
        double t = auto_arm_time(ctl, a, &meas);
        j_num(&b, e, "cf", c->cf[a]);
        j_num(&b, e, "t_ms", 1e3 * t);
        j_str(&b, e, "t", meas ? "measured" : t > 0 ? "predicted" : "unknown");
        j_num(&b, e, "n", (double)au->arm[a].count);
    }
    j_emit(&b, ctl, o);
}
