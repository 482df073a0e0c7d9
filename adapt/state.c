/* state.c: checkpoint of a controller (configuration and state) into a versioned, checksummed,
 * little-endian byte string, and its validated restore. Derived values (the ladder) are
 * recomputed from the configuration, never trusted from the bytes. */
#include "adapt_internal.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- encoding */

struct wr {
    uint8_t *p; /* NULL: only count */
    size_t off;
};

static void put_bytes(struct wr *w, const void *v, size_t n)
{
    if (w->p != NULL)
        memcpy(w->p + w->off, v, n);
    w->off += n;
}

static void put_u64(struct wr *w, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put_bytes(w, b, 8);
}

static void put_u32(struct wr *w, uint32_t v)
{
    uint8_t b[4];
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put_bytes(w, b, 4);
}

static void put_u16(struct wr *w, uint16_t v)
{
    uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    put_bytes(w, b, 2);
}

static void put_u8(struct wr *w, uint8_t v)
{
    put_bytes(w, &v, 1);
}

static void put_f64(struct wr *w, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof(u));
    put_u64(w, u);
}

struct rd {
    const uint8_t *p;
    size_t len, off;
    bool bad; /* ran past the end */
};

static const uint8_t *get_bytes(struct rd *r, size_t n)
{
    if (r->bad || r->len - r->off < n) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p + r->off;
    r->off += n;
    return p;
}

static uint64_t get_u64(struct rd *r)
{
    const uint8_t *b = get_bytes(r, 8);
    uint64_t v = 0;
    for (int i = 0; b != NULL && i < 8; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

static uint32_t get_u32(struct rd *r)
{
    const uint8_t *b = get_bytes(r, 4);
    uint32_t v = 0;
    for (int i = 0; b != NULL && i < 4; i++)
        v |= (uint32_t)b[i] << (8 * i);
    return v;
}

static uint16_t get_u16(struct rd *r)
{
    const uint8_t *b = get_bytes(r, 2);
    return b == NULL ? 0 : (uint16_t)(b[0] | (b[1] << 8));
}

static uint8_t get_u8(struct rd *r)
{
    const uint8_t *b = get_bytes(r, 1);
    return b == NULL ? 0 : b[0];
}

static double get_f64(struct rd *r)
{
    uint64_t u = get_u64(r);
    double v;
    memcpy(&v, &u, sizeof(v));
    return v;
}

uint64_t adapt_state_checksum(const uint8_t *buf, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */
    for (size_t i = 0; i < len; i++) {
        uint8_t c = (i >= ADAPT_HDR_CSUM_OFF && i < ADAPT_HDR_CSUM_OFF + 8) ? 0 : buf[i];
        h = (h ^ c) * 0x100000001b3ull;
    }
    return h;
}

void adapt_state_seal(uint8_t *buf, size_t len)
{
    struct wr w = {buf, ADAPT_HDR_CSUM_OFF};
    put_u64(&w, adapt_state_checksum(buf, len));
}

/* ---------------------------------------------------------------- body */

static void put_slot(struct wr *w, const struct adapt_tp_slot *s)
{
    put_f64(w, s->tp);
    put_f64(w, s->gain);
    put_u64(w, s->iter);
    put_u64(w, s->count);
}

static void get_slot(struct rd *r, struct adapt_tp_slot *s)
{
    s->tp = get_f64(r);
    s->gain = get_f64(r);
    s->iter = get_u64(r);
    s->count = get_u64(r);
}

static void put_config(struct wr *w, const struct gv_adapt_config *c)
{
    put_u64(w, c->first_iter);
    put_f64(w, c->static_cf);
    const struct gv_adapt_gravac_cfg *g = &c->gravac;
    const double gd[] = {g->theta_min, g->theta_max, g->epsilon, g->omega,
                         g->theta_s0,  g->alpha,     g->tp_alpha};
    for (size_t i = 0; i < GV_ARRAY_LEN(gd); i++)
        put_f64(w, gd[i]);
    put_u32(w, g->window);
    put_u32(w, g->warmup_iters);
    put_u32(w, (uint32_t)g->policy);
    put_u8(w, g->raise_any_gain);
    const struct gv_adapt_accordion_cfg *a = &c->accordion;
    put_f64(w, a->cf_light);
    put_f64(w, a->cf_heavy);
    put_f64(w, a->eta);
    put_u32(w, a->switch_epochs);
    put_u32(w, a->num_layers);
    if (c->kind != GV_ADAPT_AUTO)
        return; /* the other kinds' format is that of version 1 before AUTO existed */
    const struct gv_adapt_auto_cfg *u = &c->autoc;
    put_u32(w, u->n_arms);
    for (uint32_t i = 0; i < GV_ADAPT_AUTO_MAX_ARMS; i++)
        put_f64(w, u->cf[i]);
    const double ud[] = {u->gamma0,      u->block_frac, u->probe_ratio,  u->z_switch,
                         u->forget,      u->tie,        u->probe_budget, u->lr_drop,
                         u->timing_stop, u->quality_cf, u->quality_from};
    for (size_t i = 0; i < GV_ARRAY_LEN(ud); i++)
        put_f64(w, ud[i]);
    put_u32(w, u->block_min);
    put_u32(w, u->block_skip);
    put_u32(w, u->drop_rungs);
    put_u32(w, u->timing_iters);
    put_u64(w, u->total_iters);
}

static void get_config(struct rd *r, struct gv_adapt_config *c, uint8_t *flag_p)
{
    c->first_iter = get_u64(r);
    c->static_cf = get_f64(r);
    struct gv_adapt_gravac_cfg *g = &c->gravac;
    double *gd[] = {&g->theta_min, &g->theta_max, &g->epsilon, &g->omega,
                    &g->theta_s0,  &g->alpha,     &g->tp_alpha};
    for (size_t i = 0; i < GV_ARRAY_LEN(gd); i++)
        *gd[i] = get_f64(r);
    g->window = get_u32(r);
    g->warmup_iters = get_u32(r);
    g->policy = (enum gv_adapt_policy)get_u32(r);
    uint8_t any = get_u8(r);
    g->raise_any_gain = any != 0;
    *flag_p = any;
    struct gv_adapt_accordion_cfg *a = &c->accordion;
    a->cf_light = get_f64(r);
    a->cf_heavy = get_f64(r);
    a->eta = get_f64(r);
    a->switch_epochs = get_u32(r);
    a->num_layers = get_u32(r);
    if (c->kind != GV_ADAPT_AUTO)
        return;
    struct gv_adapt_auto_cfg *u = &c->autoc;
    u->n_arms = get_u32(r);
    for (uint32_t i = 0; i < GV_ADAPT_AUTO_MAX_ARMS; i++)
        u->cf[i] = get_f64(r);
    double *ud[] = {&u->gamma0,      &u->block_frac, &u->probe_ratio,  &u->z_switch,
                    &u->forget,      &u->tie,        &u->probe_budget, &u->lr_drop,
                    &u->timing_stop, &u->quality_cf, &u->quality_from};
    for (size_t i = 0; i < GV_ARRAY_LEN(ud); i++)
        *ud[i] = get_f64(r);
    u->block_min = get_u32(r);
    u->block_skip = get_u32(r);
    u->drop_rungs = get_u32(r);
    u->timing_iters = get_u32(r);
    u->total_iters = get_u64(r);
}

static void put_block(struct wr *w, const struct auto_block *b)
{
    put_u8(w, b->valid);
    put_u32(w, b->arm);
    put_u64(w, b->iters);
    put_f64(w, b->t);
    put_f64(w, b->slope);
    put_f64(w, b->var);
    put_f64(w, b->rate);
    put_f64(w, b->rate_var);
}

static uint8_t get_block(struct rd *r, struct auto_block *b)
{
    uint8_t v = get_u8(r);
    b->valid = v == 1;
    b->arm = get_u32(r);
    b->iters = get_u64(r);
    b->t = get_f64(r);
    b->slope = get_f64(r);
    b->var = get_f64(r);
    b->rate = get_f64(r);
    b->rate_var = get_f64(r);
    return v;
}

static void put_auto(struct wr *w, const struct auto_state *au)
{
    const uint32_t u32[] = {au->stage, au->timing_left, au->inc,     au->cur,     au->role,
                            au->dir,   au->skip[0],     au->skip[1], au->lost[0], au->lost[1]};
    for (size_t i = 0; i < GV_ARRAY_LEN(u32); i++)
        put_u32(w, u32[i]);
    put_u8(w, au->mixed);
    put_u8(w, au->prior);
    put_u64(w, au->b_iters);
    put_u64(w, au->b_tn);
    put_f64(w, au->b_tsum);
    const double d[] = {au->b_time,   au->b_target,   au->sn,        au->sx,
                        au->sy,       au->sxx,        au->sxy,       au->syy,
                        au->phase_lr, au->phase_time, au->probe_time};
    for (size_t i = 0; i < GV_ARRAY_LEN(d); i++)
        put_f64(w, d[i]);
    put_block(w, &au->a1);
    put_block(w, &au->probe);
    for (uint32_t p = 0; p < GV_ADAPT_AUTO_MAX_ARMS; p++) {
        put_f64(w, au->ev_s[p]);
        put_f64(w, au->ev_w[p]);
        put_u64(w, au->ev_n[p]);
    }
    put_u64(w, au->phases);
    put_u64(w, au->switches);
    put_u64(w, au->probes);
    for (uint32_t a = 0; a < GV_ADAPT_AUTO_MAX_ARMS; a++) {
        const struct auto_arm *m = &au->arm[a];
        for (uint32_t i = 0; i < AUTO_TRING; i++)
            put_f64(w, m->t[i]);
        put_u32(w, m->t_n);
        put_u32(w, m->t_pos);
        put_u64(w, m->count);
    }
}

/* Returns the flags OR-ed together (anything above 1 is corrupt). */
static uint8_t get_auto(struct rd *r, struct auto_state *au)
{
    uint32_t *u32[] = {&au->stage, &au->timing_left, &au->inc,     &au->cur,     &au->role,
                       &au->dir,   &au->skip[0],     &au->skip[1], &au->lost[0], &au->lost[1]};
    for (size_t i = 0; i < GV_ARRAY_LEN(u32); i++)
        *u32[i] = get_u32(r);
    uint8_t f = get_u8(r);
    au->mixed = f == 1;
    uint8_t g = get_u8(r);
    au->prior = g == 1;
    f |= g;
    au->b_iters = get_u64(r);
    au->b_tn = get_u64(r);
    au->b_tsum = get_f64(r);
    double *d[] = {&au->b_time,   &au->b_target,   &au->sn,        &au->sx,
                   &au->sy,       &au->sxx,        &au->sxy,       &au->syy,
                   &au->phase_lr, &au->phase_time, &au->probe_time};
    for (size_t i = 0; i < GV_ARRAY_LEN(d); i++)
        *d[i] = get_f64(r);
    f |= get_block(r, &au->a1);
    f |= get_block(r, &au->probe);
    for (uint32_t p = 0; p < GV_ADAPT_AUTO_MAX_ARMS; p++) {
        au->ev_s[p] = get_f64(r);
        au->ev_w[p] = get_f64(r);
        au->ev_n[p] = get_u64(r);
    }
    au->phases = get_u64(r);
    au->switches = get_u64(r);
    au->probes = get_u64(r);
    for (uint32_t a = 0; a < GV_ADAPT_AUTO_MAX_ARMS && !r->bad; a++) {
        struct auto_arm *m = &au->arm[a];
        for (uint32_t i = 0; i < AUTO_TRING; i++)
            m->t[i] = get_f64(r);
        m->t_n = get_u32(r);
        m->t_pos = get_u32(r);
        m->count = get_u64(r);
    }
    return f;
}

static void put_state(struct wr *w, const struct gv_adapt *ctl)
{
    put_u64(w, ctl->n_obs);
    put_u32(w, (uint32_t)ctl->level);
    put_f64(w, ctl->last_lr);
    put_f64(w, ctl->t_sys);
    put_u64(w, ctl->windows);
    if (ctl->cfg.kind == GV_ADAPT_GRAVAC) {
        put_u32(w, ctl->floor_rung);
        put_u32(w, ctl->cand_rung);
        put_f64(w, ctl->s_min);
        put_f64(w, ctl->s_cand);
        put_u8(w, ctl->min_known);
        put_u8(w, ctl->cand_known);
        put_f64(w, ctl->r_min);
        put_f64(w, ctl->r_cand);
        put_f64(w, ctl->alpha);
        put_u64(w, ctl->win_obs);
        put_slot(w, &ctl->tp_dense);
        put_u32(w, ctl->top_rung + 1);
        for (uint32_t r = 0; r <= ctl->top_rung; r++)
            put_slot(w, &ctl->tp[r]);
    } else if (ctl->cfg.kind == GV_ADAPT_AUTO) {
        put_auto(w, &ctl->au);
    } else if (ctl->cfg.kind == GV_ADAPT_ACCORDION) {
        put_u8(w, ctl->ref_valid);
        put_u64(w, ctl->epochs);
        put_u64(w, ctl->phase_start);
        for (uint32_t l = 0; l < ctl->cfg.accordion.num_layers; l++)
            put_u8(w, ctl->heavy[l]);
        for (uint32_t l = 0; l < ctl->cfg.accordion.num_layers; l++)
            put_f64(w, ctl->ref_norm[l]);
    }
}

/* Reads the state into ctl (created from the saved configuration). Flags outside {0, 1} are
 * reported through *flags_ok. */
static void get_state(struct rd *r, struct gv_adapt *ctl, bool *flags_ok, uint32_t *n_slots_p)
{
    ctl->n_obs = get_u64(r);
    ctl->level = (enum gv_adapt_level)get_u32(r);
    ctl->last_lr = get_f64(r);
    ctl->t_sys = get_f64(r);
    ctl->windows = get_u64(r);
    uint8_t f1 = 0, f2 = 0;
    if (ctl->cfg.kind == GV_ADAPT_GRAVAC) {
        ctl->floor_rung = get_u32(r);
        ctl->cand_rung = get_u32(r);
        ctl->s_min = get_f64(r);
        ctl->s_cand = get_f64(r);
        f1 = get_u8(r);
        f2 = get_u8(r);
        ctl->min_known = f1 == 1;
        ctl->cand_known = f2 == 1;
        ctl->r_min = get_f64(r);
        ctl->r_cand = get_f64(r);
        ctl->alpha = get_f64(r);
        ctl->win_obs = get_u64(r);
        get_slot(r, &ctl->tp_dense);
        *n_slots_p = get_u32(r);
        for (uint32_t i = 0; i < *n_slots_p && i <= ctl->top_rung && !r->bad; i++)
            get_slot(r, &ctl->tp[i]);
    } else if (ctl->cfg.kind == GV_ADAPT_AUTO) {
        f1 = get_auto(r, &ctl->au);
    } else if (ctl->cfg.kind == GV_ADAPT_ACCORDION) {
        f1 = get_u8(r);
        ctl->ref_valid = f1 == 1;
        ctl->epochs = get_u64(r);
        ctl->phase_start = get_u64(r);
        for (uint32_t l = 0; l < ctl->cfg.accordion.num_layers && !r->bad; l++) {
            ctl->heavy[l] = get_u8(r);
            f2 |= ctl->heavy[l] > 1 ? 2 : 0;
        }
        for (uint32_t l = 0; l < ctl->cfg.accordion.num_layers && !r->bad; l++)
            ctl->ref_norm[l] = get_f64(r);
    }
    *flags_ok = f1 <= 1 && f2 <= 1;
}

/* ---------------------------------------------------------------- validation */

static bool fin_ge0(double v)
{
    return isfinite(v) && v >= 0.0;
}

static bool unit(double v)
{
    return v >= 0.0 && v <= 1.0;
}

static bool slot_ok(const struct gv_adapt *ctl, const struct adapt_tp_slot *s)
{
    if (s->count == 0)
        return s->tp == 0.0 && s->gain == 0.0 && s->iter == 0;
    return fin_ge0(s->tp) && unit(s->gain) && s->count <= ctl->n_obs &&
           s->iter >= ctl->cfg.first_iter && s->iter < ctl->cfg.first_iter + ctl->n_obs;
}

/* Returns the name of the first inconsistent field, or NULL. */
static const char *gravac_state_bad(const struct gv_adapt *ctl, uint32_t n_slots)
{
    const struct gv_adapt_gravac_cfg *g = &ctl->cfg.gravac;
    if (n_slots != ctl->top_rung + 1)
        return "rung count";
    if (ctl->cand_rung > ctl->top_rung || ctl->floor_rung > ctl->cand_rung)
        return "rungs";
    if (!unit(ctl->s_min) || !unit(ctl->s_cand) || !unit(ctl->r_min) || !unit(ctl->r_cand) ||
        !unit(ctl->alpha))
        return "gains";
    if (ctl->cand_known && ctl->cand_rung == ctl->floor_rung)
        return "candidate gain without a candidate";
    uint64_t counted = ctl->n_obs > g->warmup_iters ? ctl->n_obs - g->warmup_iters : 0;
    if (ctl->win_obs != counted % g->window || ctl->windows != counted / g->window)
        return "window counters";
    if (!slot_ok(ctl, &ctl->tp_dense))
        return "dense throughput";
    for (uint32_t r = 0; r <= ctl->top_rung; r++)
        if (!slot_ok(ctl, &ctl->tp[r]))
            return "throughput map";
    const char *why;
    enum gv_adapt_level want =
        ctl->n_obs == 0        ? (g->warmup_iters > 0 ? GV_ADAPT_LEVEL_FLOOR : GV_ADAPT_LEVEL_DENSE)
        : adapt_in_warmup(ctl) ? GV_ADAPT_LEVEL_FLOOR
                               : gravac_eligible(ctl, &why);
    if (ctl->level != want)
        return "level";
    return NULL;
}

static const char *accordion_state_bad(const struct gv_adapt *ctl)
{
    if (ctl->level != GV_ADAPT_LEVEL_FLOOR)
        return "level";
    if (ctl->phase_start > ctl->epochs || ctl->windows > ctl->epochs)
        return "epoch counters";
    for (uint32_t l = 0; l < ctl->cfg.accordion.num_layers; l++) {
        if (!fin_ge0(ctl->ref_norm[l]))
            return "reference norms";
        if (!ctl->ref_valid && (ctl->heavy[l] != 0 || ctl->ref_norm[l] != 0.0))
            return "layers before the first check";
    }
    return NULL;
}

static const char *state_bad(const struct gv_adapt *ctl, uint32_t n_slots)
{
    if (ctl->cfg.first_iter + ctl->n_obs < ctl->cfg.first_iter)
        return "iteration count";
    if (ctl->windows > ctl->n_obs)
        return "window count";
    if (!fin_ge0(ctl->last_lr) || !fin_ge0(ctl->t_sys))
        return "lr or t_sys";
    switch (ctl->cfg.kind) {
    case GV_ADAPT_DENSE:
        return ctl->level == GV_ADAPT_LEVEL_DENSE && ctl->windows == 0 ? NULL : "level";
    case GV_ADAPT_STATIC:
        return ctl->level == GV_ADAPT_LEVEL_FLOOR && ctl->windows == 0 ? NULL : "level";
    case GV_ADAPT_GRAVAC: return gravac_state_bad(ctl, n_slots);
    case GV_ADAPT_ACCORDION: return accordion_state_bad(ctl);
    case GV_ADAPT_AUTO: return ctl->windows == 0 ? auto_state_bad(ctl) : "window count";
    }
    return "kind";
}

/* ---------------------------------------------------------------- API */

static void put_all(struct wr *w, const struct gv_adapt *ctl, uint32_t body_len)
{
    put_u32(w, ADAPT_STATE_MAGIC);
    put_u16(w, ADAPT_STATE_VERSION);
    put_u16(w, (uint16_t)ctl->cfg.kind);
    put_u32(w, body_len);
    put_u64(w, 0); /* checksum, sealed afterwards */
    put_config(w, &ctl->cfg);
    put_state(w, ctl);
}

size_t gv_adapt_state_size(const struct gv_adapt *ctl)
{
    struct wr w = {NULL, 0};
    put_all(&w, ctl, 0);
    return w.off;
}

gv_status_t gv_adapt_save(const struct gv_adapt *ctl, void *buf, size_t cap, size_t *len_p)
{
    size_t len = gv_adapt_state_size(ctl);
    if (buf == NULL || cap < len) {
        gv_log(GV_LOG_ERROR, "adapt: save needs %zu bytes, buffer has %zu", len,
               buf == NULL ? (size_t)0 : cap);
        return GV_ERR_INVAL;
    }
    struct wr w = {buf, 0};
    put_all(&w, ctl, (uint32_t)(len - ADAPT_HDR_LEN));
    adapt_state_seal(buf, len);
    *len_p = len;
    return GV_OK;
}

static gv_status_t proto_err(const char *what)
{
    gv_log(GV_LOG_ERROR, "adapt: refusing checkpoint: %s", what);
    return GV_ERR_PROTO;
}

/* Header checks; *kind_p on success. */
static gv_status_t check_header(const uint8_t *b, size_t len, uint16_t *kind_p)
{
    if (b == NULL || len < ADAPT_HDR_LEN)
        return proto_err("truncated header");
    struct rd r = {b, len, 0, false};
    uint32_t magic = get_u32(&r);
    uint16_t version = get_u16(&r);
    uint16_t kind = get_u16(&r);
    uint32_t body_len = get_u32(&r);
    uint64_t csum = get_u64(&r);
    if (magic != ADAPT_STATE_MAGIC)
        return proto_err("bad magic (not an adapt checkpoint)");
    if (body_len != len - ADAPT_HDR_LEN)
        return proto_err("length does not match the header");
    if (csum != adapt_state_checksum(b, len))
        return proto_err("checksum mismatch (corrupt)");
    /* version 1 differs from 2 only in AUTO's state: the other kinds' read as before */
    bool same = version == ADAPT_STATE_VERSION || (version == 1 && kind != GV_ADAPT_AUTO);
    if (!same) {
        gv_log(GV_LOG_ERROR, "adapt: checkpoint format version %u, this build reads %u", version,
               ADAPT_STATE_VERSION);
        return GV_ERR_VERSION;
    }
    *kind_p = kind;
    return GV_OK;
}

gv_status_t gv_adapt_restore(struct gv_adapt *ctl, const void *buf, size_t len)
{
    const uint8_t *b = buf;
    uint16_t kind;
    gv_status_t status = check_header(b, len, &kind);
    if (status != GV_OK)
        return status;

    struct rd r = {b, len, ADAPT_HDR_LEN, false};
    struct gv_adapt_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.kind = (enum gv_adapt_kind)kind;
    uint8_t cfg_flag;
    get_config(&r, &cfg, &cfg_flag);
    if (r.bad)
        return proto_err("truncated configuration");
    if (cfg_flag > 1)
        return proto_err("configuration flag outside 0/1");
    if (gv_adapt_config_validate(&cfg) != GV_OK)
        return proto_err("invalid configuration");

    struct gv_adapt *tmp;
    status = gv_adapt_create(&cfg, &tmp);
    if (status != GV_OK)
        return status; /* NOMEM; the configuration was valid */
    bool flags_ok = true;
    uint32_t n_slots = 0;
    get_state(&r, tmp, &flags_ok, &n_slots);
    const char *bad = r.bad          ? "length (state truncated)"
                      : r.off != len ? "length (trailing bytes)"
                      : !flags_ok    ? "flag (outside 0/1)"
                                     : state_bad(tmp, n_slots);
    if (bad != NULL) {
        gv_adapt_destroy(tmp);
        gv_log(GV_LOG_ERROR, "adapt: refusing checkpoint: bad %s", bad);
        return GV_ERR_PROTO;
    }
    tmp->log_cb = ctl->log_cb;
    tmp->log_arg = ctl->log_arg;
    adapt_free_layers(ctl);
    *ctl = *tmp;
    gv_free(tmp); /* its arrays now belong to ctl */
    return GV_OK;
}
