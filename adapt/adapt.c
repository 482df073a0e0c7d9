/* adapt.c: the controller object: configuration defaults and validation, creation, the
 * observation checks shared by every controller, dispatch to GraVAC / Accordion, decisions and
 * info. The per-algorithm rules live in gravac.c and baseline.c, checkpoints in state.c. */
#include "adapt_internal.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

const char *gv_adapt_level_str(enum gv_adapt_level level)
{
    switch (level) {
    case GV_ADAPT_LEVEL_DENSE: return "dense";
    case GV_ADAPT_LEVEL_FLOOR: return "floor";
    case GV_ADAPT_LEVEL_CANDIDATE: return "candidate";
    }
    return "unknown";
}

const char *gv_adapt_kind_str(enum gv_adapt_kind kind)
{
    switch (kind) {
    case GV_ADAPT_DENSE: return "dense";
    case GV_ADAPT_STATIC: return "static";
    case GV_ADAPT_GRAVAC: return "gravac";
    case GV_ADAPT_ACCORDION: return "accordion";
    case GV_ADAPT_AUTO: return "auto";
    }
    return "unknown";
}

const char *gv_adapt_policy_str(enum gv_adapt_policy pol)
{
    switch (pol) {
    case GV_ADAPT_POLICY_EXPONENTIAL: return "exponential";
    case GV_ADAPT_POLICY_GEOMETRIC: return "geometric";
    }
    return "unknown";
}

void gv_adapt_config_default(struct gv_adapt_config *cfg, enum gv_adapt_kind kind)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->kind = kind;
    cfg->first_iter = 0;
    cfg->static_cf = 10.0;
    cfg->gravac.theta_min = 10.0;
    cfg->gravac.theta_max = 1000.0;
    cfg->gravac.epsilon = 0.9;
    cfg->gravac.omega = 0.01;
    cfg->gravac.theta_s0 = 2.0;
    cfg->gravac.alpha = 0.0; /* auto: N / 100 */
    cfg->gravac.tp_alpha = 0.0;
    cfg->gravac.window = 500;
    cfg->gravac.warmup_iters = 0;
    cfg->gravac.policy = GV_ADAPT_POLICY_EXPONENTIAL;
    cfg->accordion.cf_light = 10.0;
    cfg->accordion.cf_heavy = 1000.0;
    cfg->accordion.eta = 0.5;
    cfg->accordion.switch_epochs = 10;
    cfg->accordion.num_layers = 0;
    struct gv_adapt_auto_cfg *a = &cfg->autoc;
    static const double arms[] = {1, 2, 4, 10, 30, 100, 300, 1000};
    a->n_arms = GV_ARRAY_LEN(arms);
    memcpy(a->cf, arms, sizeof(arms));
    a->gamma0 = 0.2;
    a->block_frac = 0.1;
    a->probe_ratio = 0.5;
    a->block_min = 20;
    a->block_skip = 5;
    a->z_switch = 2.0;
    a->forget = 0.7;
    a->tie = 0.1;
    a->probe_budget = 0.25;
    a->lr_drop = 0.5;
    a->drop_rungs = 1;
    a->timing_iters = 3;
    a->timing_stop = 1.5;
    a->quality_cf = 10.0;
    a->quality_from = 0.2;
    a->total_iters = 0;
}

static gv_status_t cfg_bad(const char *field, double v, const char *rule)
{
    gv_log(GV_LOG_ERROR, "adapt: config %s = %g is invalid (%s)", field, v, rule);
    return GV_ERR_INVAL;
}

gv_status_t adapt_ladder(const struct gv_adapt_gravac_cfg *g, double *rung_cf, uint32_t *top_p)
{
    uint32_t k = 0;
    double step = g->theta_s0;
    rung_cf[0] = g->theta_min;
    while (rung_cf[k] < g->theta_max) {
        if (k + 1 >= GV_ADAPT_MAX_RUNGS) {
            gv_log(GV_LOG_ERROR,
                   "adapt: config gravac theta_min %g .. theta_max %g with theta_s0 %g (%s) "
                   "needs more than %d ladder rungs",
                   g->theta_min, g->theta_max, g->theta_s0, gv_adapt_policy_str(g->policy),
                   GV_ADAPT_MAX_RUNGS);
            return GV_ERR_INVAL;
        }
        double cf = g->theta_min * step;
        if (!(cf < g->theta_max))
            cf = g->theta_max; /* the cap; also catches an overflowed step */
        if (!(cf > rung_cf[k]))
            return cfg_bad("gravac.theta_s0", g->theta_s0, "too close to 1: CFs do not grow");
        rung_cf[++k] = cf;
        step = g->policy == GV_ADAPT_POLICY_EXPONENTIAL ? step * step : 2.0 * step;
    }
    *top_p = k;
    return GV_OK;
}

static gv_status_t validate_gravac(const struct gv_adapt_gravac_cfg *g)
{
    if (!(g->theta_min >= 1.0) || !isfinite(g->theta_min))
        return cfg_bad("gravac.theta_min", g->theta_min, "must be finite and >= 1");
    if (!(g->theta_max >= g->theta_min) || !isfinite(g->theta_max))
        return cfg_bad("gravac.theta_max", g->theta_max, "must be finite and >= theta_min");
    if (!(g->epsilon > 0.0 && g->epsilon <= 1.0))
        return cfg_bad("gravac.epsilon", g->epsilon, "must be in (0, 1]");
    if (!(g->omega >= 0.0 && g->omega < 1.0))
        return cfg_bad("gravac.omega", g->omega, "must be in [0, 1)");
    if (!(g->theta_s0 > 1.0) || !isfinite(g->theta_s0))
        return cfg_bad("gravac.theta_s0", g->theta_s0, "must be finite and > 1");
    if (!(g->alpha >= 0.0 && g->alpha <= 1.0))
        return cfg_bad("gravac.alpha", g->alpha, "must be in (0, 1], or 0 for N/100");
    if (!(g->tp_alpha >= 0.0 && g->tp_alpha <= 1.0))
        return cfg_bad("gravac.tp_alpha", g->tp_alpha, "must be in [0, 1]");
    if (g->window < 1)
        return cfg_bad("gravac.window", g->window, "must be >= 1");
    if (g->policy != GV_ADAPT_POLICY_EXPONENTIAL && g->policy != GV_ADAPT_POLICY_GEOMETRIC)
        return cfg_bad("gravac.policy", (double)g->policy, "must be exponential or geometric");
    double rungs[GV_ADAPT_MAX_RUNGS];
    uint32_t top;
    return adapt_ladder(g, rungs, &top);
}

static gv_status_t validate_accordion(const struct gv_adapt_accordion_cfg *a)
{
    if (!(a->cf_light >= 1.0) || !isfinite(a->cf_light))
        return cfg_bad("accordion.cf_light", a->cf_light, "must be finite and >= 1");
    if (!(a->cf_heavy >= a->cf_light) || !isfinite(a->cf_heavy))
        return cfg_bad("accordion.cf_heavy", a->cf_heavy, "must be finite and >= cf_light");
    if (!(a->eta > 0.0) || !isfinite(a->eta))
        return cfg_bad("accordion.eta", a->eta, "must be finite and > 0");
    if (a->switch_epochs < 1)
        return cfg_bad("accordion.switch_epochs", a->switch_epochs, "must be >= 1");
    if (a->num_layers < 1 || a->num_layers > GV_ADAPT_MAX_LAYERS)
        return cfg_bad("accordion.num_layers", a->num_layers, "must be in 1 .. 1048576");
    return GV_OK;
}

gv_status_t gv_adapt_config_validate(const struct gv_adapt_config *cfg)
{
    if (cfg == NULL) {
        gv_log(GV_LOG_ERROR, "adapt: config is NULL");
        return GV_ERR_INVAL;
    }
    switch (cfg->kind) {
    case GV_ADAPT_DENSE: return GV_OK;
    case GV_ADAPT_STATIC:
        if (!(cfg->static_cf >= 1.0) || !isfinite(cfg->static_cf))
            return cfg_bad("static_cf", cfg->static_cf, "must be finite and >= 1");
        return GV_OK;
    case GV_ADAPT_GRAVAC: return validate_gravac(&cfg->gravac);
    case GV_ADAPT_ACCORDION: return validate_accordion(&cfg->accordion);
    case GV_ADAPT_AUTO: return auto_validate(&cfg->autoc);
    }
    return cfg_bad("kind", (double)cfg->kind, "must be dense, static, gravac, accordion or auto");
}

gv_status_t adapt_alloc_layers(struct gv_adapt *ctl)
{
    uint32_t n = ctl->cfg.accordion.num_layers;
    ctl->heavy = gv_calloc(n, sizeof(*ctl->heavy));
    ctl->ref_norm = gv_calloc(n, sizeof(*ctl->ref_norm));
    ctl->ratio = gv_calloc(n, sizeof(*ctl->ratio));
    if (ctl->heavy == NULL || ctl->ref_norm == NULL || ctl->ratio == NULL) {
        gv_log(GV_LOG_ERROR, "adapt: out of memory for %" PRIu32 " accordion layers", n);
        adapt_free_layers(ctl);
        return GV_ERR_NOMEM;
    }
    return GV_OK;
}

void adapt_free_layers(struct gv_adapt *ctl)
{
    gv_free(ctl->heavy);
    gv_free(ctl->ref_norm);
    gv_free(ctl->ratio);
    ctl->heavy = NULL;
    ctl->ref_norm = NULL;
    ctl->ratio = NULL;
}

gv_status_t gv_adapt_create(const struct gv_adapt_config *cfg, struct gv_adapt **ctl_p)
{
    gv_status_t status = gv_adapt_config_validate(cfg);
    if (status != GV_OK)
        return status;
    struct gv_adapt *ctl = gv_calloc(1, sizeof(*ctl));
    if (ctl == NULL) {
        gv_log(GV_LOG_ERROR, "adapt: out of memory for the controller");
        return GV_ERR_NOMEM;
    }
    ctl->cfg = *cfg;
    switch (cfg->kind) {
    case GV_ADAPT_DENSE: ctl->level = GV_ADAPT_LEVEL_DENSE; break;
    case GV_ADAPT_STATIC: ctl->level = GV_ADAPT_LEVEL_FLOOR; break;
    case GV_ADAPT_GRAVAC:
        status = adapt_ladder(&cfg->gravac, ctl->rung_cf, &ctl->top_rung);
        if (status != GV_OK)
            goto err_free;
        gravac_init(ctl);
        break;
    case GV_ADAPT_ACCORDION:
        status = adapt_alloc_layers(ctl);
        if (status != GV_OK)
            goto err_free;
        accordion_init(ctl);
        break;
    case GV_ADAPT_AUTO:
        auto_init(ctl);
        ctl->level = GV_ADAPT_LEVEL_FLOOR; /* the largest CF first (timing) */
        break;
    }
    *ctl_p = ctl;
    return GV_OK;

err_free:
    gv_free(ctl);
    return status;
}

void gv_adapt_destroy(struct gv_adapt *ctl)
{
    if (ctl == NULL)
        return;
    adapt_free_layers(ctl);
    gv_free(ctl);
}

void gv_adapt_set_log(struct gv_adapt *ctl, gv_adapt_log_cb cb, void *arg)
{
    ctl->log_cb = cb;
    ctl->log_arg = arg;
}

void gv_adapt_get_config(const struct gv_adapt *ctl, struct gv_adapt_config *cfg)
{
    *cfg = ctl->cfg;
}

bool adapt_in_warmup(const struct gv_adapt *ctl)
{
    return ctl->cfg.kind == GV_ADAPT_GRAVAC && ctl->n_obs < ctl->cfg.gravac.warmup_iters;
}

void adapt_core_get(const struct gv_adapt *ctl, struct adapt_core *core)
{
    const struct gv_adapt_config *cfg = &ctl->cfg;
    core->level = ctl->level;
    switch (cfg->kind) {
    case GV_ADAPT_DENSE: core->cf_send = core->theta_min = core->cf_cand = 1.0; return;
    case GV_ADAPT_STATIC: core->cf_send = core->theta_min = core->cf_cand = cfg->static_cf; return;
    case GV_ADAPT_GRAVAC:
        core->theta_min = ctl->rung_cf[ctl->floor_rung];
        core->cf_cand = ctl->rung_cf[ctl->cand_rung];
        core->cf_send = ctl->level == GV_ADAPT_LEVEL_CANDIDATE ? core->cf_cand
                        : ctl->level == GV_ADAPT_LEVEL_FLOOR   ? core->theta_min
                                                               : 1.0;
        return;
    case GV_ADAPT_ACCORDION:
        core->theta_min = cfg->accordion.cf_light;
        core->cf_cand = cfg->accordion.cf_heavy;
        core->cf_send = accordion_heavy_count(ctl) == cfg->accordion.num_layers
                            ? cfg->accordion.cf_heavy
                            : cfg->accordion.cf_light;
        return;
    case GV_ADAPT_AUTO: auto_arm_core(ctl, ctl->au.cur, core); return;
    }
}

bool adapt_core_eq(const struct adapt_core *a, const struct adapt_core *b)
{
    return a->level == b->level && a->cf_send == b->cf_send && a->theta_min == b->theta_min &&
           a->cf_cand == b->cf_cand;
}

static uint32_t decision_layers(const struct gv_adapt *ctl)
{
    return ctl->cfg.kind == GV_ADAPT_ACCORDION ? ctl->cfg.accordion.num_layers : 0;
}

static gv_status_t check_layer_storage(const struct gv_adapt *ctl,
                                       const struct gv_adapt_decision *dec)
{
    uint32_t n = decision_layers(ctl);
    if (dec->layer_cf != NULL && dec->layer_cap < n) {
        gv_log(GV_LOG_ERROR, "adapt: decision layer_cap %" PRIu32 " < %" PRIu32 " layers",
               dec->layer_cap, n);
        return GV_ERR_INVAL;
    }
    return GV_OK;
}

static void fill_decision(const struct gv_adapt *ctl, struct gv_adapt_decision *dec)
{
    struct adapt_core core;
    adapt_core_get(ctl, &core);
    dec->iter = ctl->cfg.first_iter + ctl->n_obs;
    dec->level = core.level;
    dec->cf_send = core.cf_send;
    dec->theta_min = core.theta_min;
    dec->cf_candidate = core.cf_cand;
    dec->theta_s = core.cf_cand / core.theta_min;
    switch (ctl->cfg.kind) {
    case GV_ADAPT_DENSE: dec->levels = 0; break;
    case GV_ADAPT_GRAVAC: dec->levels = ctl->cand_rung > ctl->floor_rung ? 2 : 1; break;
    default: dec->levels = 1; break;
    }
    dec->num_layers = decision_layers(ctl);
    if (dec->layer_cf != NULL) {
        const struct gv_adapt_accordion_cfg *a = &ctl->cfg.accordion;
        for (uint32_t l = 0; l < dec->num_layers; l++)
            dec->layer_cf[l] = ctl->heavy[l] ? a->cf_heavy : a->cf_light;
    }
}

gv_status_t gv_adapt_current(const struct gv_adapt *ctl, struct gv_adapt_decision *dec)
{
    gv_status_t status = check_layer_storage(ctl, dec);
    if (status != GV_OK)
        return status;
    fill_decision(ctl, dec);
    return GV_OK;
}

static gv_status_t obs_bad(uint64_t iter, const char *field, double v)
{
    gv_log(GV_LOG_ERROR,
           "adapt: observation of iteration %" PRIu64 ": %s = %g is invalid (must be finite "
           "and >= 0)",
           iter, field, v);
    return GV_ERR_INVAL;
}

static gv_status_t check_layer_norms(const struct gv_adapt *ctl, const struct gv_adapt_obs *obs)
{
    uint32_t n = ctl->cfg.accordion.num_layers;
    if (obs->layer_norms == NULL || obs->num_layers != n) {
        gv_log(GV_LOG_ERROR,
               "adapt: observation of iteration %" PRIu64 ": epoch end needs layer_norms for "
               "%" PRIu32 " layers (got %" PRIu32 "%s)",
               obs->iter, n, obs->num_layers, obs->layer_norms == NULL ? ", NULL" : "");
        return GV_ERR_INVAL;
    }
    for (uint32_t l = 0; l < n; l++) {
        double v = obs->layer_norms[l];
        if (!isfinite(v) || v < 0) {
            gv_log(GV_LOG_ERROR,
                   "adapt: observation of iteration %" PRIu64 ": layer_norms[%" PRIu32
                   "] = %g is invalid (must be finite and >= 0)",
                   obs->iter, l, v);
            return GV_ERR_INVAL;
        }
    }
    return GV_OK;
}

static gv_status_t check_obs(const struct gv_adapt *ctl, const struct gv_adapt_obs *obs)
{
    uint64_t want = ctl->cfg.first_iter + ctl->n_obs;
    if (obs->iter != want) {
        gv_log(GV_LOG_ERROR,
               "adapt: observation of iteration %" PRIu64 " out of sequence (expected %" PRIu64 ")",
               obs->iter, want);
        return GV_ERR_INVAL;
    }
    struct adapt_core core;
    adapt_core_get(ctl, &core);
    if (obs->level != core.level || !(obs->cf_sent == core.cf_send)) {
        gv_log(GV_LOG_ERROR,
               "adapt: observation of iteration %" PRIu64 " reports level %s at CF %g, but the "
               "decision was %s at CF %g",
               obs->iter, gv_adapt_level_str(obs->level), obs->cf_sent,
               gv_adapt_level_str(core.level), core.cf_send);
        return GV_ERR_INVAL;
    }
    const struct {
        const char *name;
        double v;
    } nums[] = {
        {"norm2_ef", obs->norm2_ef},
        {"norm2_min", obs->norm2_min},
        {"norm2_cand", obs->norm2_cand},
        {"t_compute", obs->t_compute},
        {"t_compress", obs->t_compress},
        {"t_comm", obs->t_comm},
        {"lr", obs->lr},
        {"loss", obs->loss},
    };
    for (size_t i = 0; i < GV_ARRAY_LEN(nums); i++)
        if (!isfinite(nums[i].v) || nums[i].v < 0)
            return obs_bad(obs->iter, nums[i].name, nums[i].v);
    if (obs->num_workers < 1) {
        gv_log(GV_LOG_ERROR, "adapt: observation of iteration %" PRIu64 ": num_workers is 0",
               obs->iter);
        return GV_ERR_INVAL;
    }
    if (!isfinite(obs->t_compute + obs->t_compress + obs->t_comm))
        return obs_bad(obs->iter, "t_compute + t_compress + t_comm", HUGE_VAL);
    if (ctl->cfg.kind == GV_ADAPT_ACCORDION && obs->epoch_end)
        return check_layer_norms(ctl, obs);
    return GV_OK;
}

double adapt_t_sys(const struct gv_adapt_obs *obs)
{
    double t_iter = obs->t_compute + obs->t_comm;
    if (obs->level != GV_ADAPT_LEVEL_DENSE)
        t_iter += obs->t_compress;
    return t_iter > 0.0 ? (double)obs->samples / t_iter : -1.0;
}

gv_status_t gv_adapt_update(struct gv_adapt *ctl, const struct gv_adapt_obs *obs,
                            struct gv_adapt_decision *dec)
{
    if (ctl == NULL || obs == NULL || dec == NULL) {
        gv_log(GV_LOG_ERROR, "adapt: update with a NULL %s",
               ctl == NULL   ? "controller"
               : obs == NULL ? "observation"
                             : "decision");
        return GV_ERR_INVAL;
    }
    gv_status_t status = check_layer_storage(ctl, dec);
    if (status == GV_OK)
        status = check_obs(ctl, obs);
    if (status != GV_OK)
        return status;

    double t_sys = adapt_t_sys(obs);
    if (t_sys >= 0.0)
        ctl->t_sys = t_sys;
    ctl->n_obs++;
    switch (ctl->cfg.kind) {
    case GV_ADAPT_GRAVAC: gravac_update(ctl, obs); break;
    case GV_ADAPT_ACCORDION: accordion_update(ctl, obs); break;
    case GV_ADAPT_AUTO: auto_update(ctl, obs); break;
    default: break; /* dense and static never change */
    }
    ctl->last_lr = obs->lr;
    fill_decision(ctl, dec);
    return GV_OK;
}

void gv_adapt_get_info(const struct gv_adapt *ctl, struct gv_adapt_info *info)
{
    memset(info, 0, sizeof(*info));
    info->kind = ctl->cfg.kind;
    info->next_iter = ctl->cfg.first_iter + ctl->n_obs;
    info->observations = ctl->n_obs;
    info->windows = ctl->windows;
    info->t_sys = ctl->t_sys;
    if (ctl->cfg.kind == GV_ADAPT_ACCORDION) {
        info->epochs = ctl->epochs;
        info->heavy_layers = accordion_heavy_count(ctl);
        return;
    }
    if (ctl->cfg.kind == GV_ADAPT_AUTO) {
        const struct auto_state *au = &ctl->au;
        info->in_warmup = au->stage == AUTO_TIMING;
        info->auto_arm = au->cur;
        info->auto_inc = au->inc;
        info->auto_probing = au->stage == AUTO_RUN && au->role == AUTO_PROBE;
        info->auto_phases = au->phases;
        info->auto_switches = au->switches;
        info->auto_probes = au->probes;
        for (uint32_t a = 0; a < ctl->cfg.autoc.n_arms; a++) {
            info->auto_time[a] = auto_arm_time(ctl, a, &info->auto_measured[a]);
            info->auto_count[a] = au->arm[a].count;
        }
        return;
    }
    if (ctl->cfg.kind != GV_ADAPT_GRAVAC)
        return;
    info->in_warmup = adapt_in_warmup(ctl);
    info->gain_min = ctl->s_min;
    info->gain_cand = ctl->s_cand;
    info->gain_min_known = ctl->min_known;
    info->gain_cand_known = ctl->cand_known;
    info->ratio_min = ctl->r_min;
    info->ratio_cand = ctl->r_cand;
    info->alpha = ctl->alpha;
    info->floor_rung = ctl->floor_rung;
    info->cand_rung = ctl->cand_rung;
    info->top_rung = ctl->top_rung;
    const struct adapt_tp_slot *s = &ctl->tp_dense;
    for (uint32_t r = 0; r <= ctl->top_rung + 1; r++) {
        double cf = r == 0 ? 1.0 : ctl->rung_cf[r - 1];
        if (r > 0)
            s = &ctl->tp[r - 1];
        if (s->count == 0)
            continue;
        info->tp[info->n_tp++] = (struct gv_adapt_tp){cf, s->tp, s->gain, s->iter, s->count};
    }
}
