/* adapt_internal.h: the controller's state, shared by the files of adapt/ and by its tests.
 * Not a public interface: layout and helpers change with the checkpoint format version. */
#ifndef GV_ADAPT_INTERNAL_H
#define GV_ADAPT_INTERNAL_H

#include "gv_adapt.h"

#define ADAPT_STATE_MAGIC 0x44415647u /* "GVAD" little-endian */
#define ADAPT_STATE_VERSION 2u        /* 2: AUTO's `prior` */
#define ADAPT_HDR_LEN 20u /* magic u32, version u16, kind u16, body_len u32, checksum u64 */
#define ADAPT_HDR_CSUM_OFF 12u

/* One T-map slot; count == 0 means never measured. */
struct adapt_tp_slot {
    double tp;
    double gain;
    uint64_t iter;
    uint64_t count;
};

/* The part of a decision that the log compares before and after. */
struct adapt_core {
    enum gv_adapt_level level;
    double cf_send, theta_min, cf_cand;
};

/* ---- AUTO (auto.c) */
#define AUTO_TRING 9 /* iteration-time samples kept per arm (the median is the estimate) */

enum auto_stage { AUTO_TIMING = 0, AUTO_RUN = 1 };
enum auto_role { AUTO_INC = 0, AUTO_PROBE = 1 };

struct auto_arm {
    double t[AUTO_TRING]; /* recent iteration times (s), a ring */
    uint32_t t_n, t_pos;
    uint64_t count; /* iterations sent at this arm */
};

/* A finished block: the loss slope over its iterations and the rate per second. */
struct auto_block {
    bool valid;
    uint32_t arm;
    uint64_t iters;        /* iterations in the block (the slope used block_skip fewer) */
    double t;              /* the block's own mean iteration time (s), outliers clipped */
    double slope, var;     /* loss per iteration, and its variance (OLS) */
    double rate, rate_var; /* -slope / t(arm): loss decrease per second, and its variance */
};

struct auto_state {
    uint32_t stage;       /* enum auto_stage */
    uint32_t timing_left; /* TIMING: iterations left at the arm in force */
    uint32_t inc;         /* the incumbent arm */
    uint32_t cur;         /* the arm in force */
    uint32_t role;        /* enum auto_role: the block in force */
    uint32_t dir;         /* next probe: 0 below, 1 above */
    bool mixed;           /* the next time sample mixes two arms (first after a change) */
    bool prior;           /* the incumbent rests on the prior's score, not on loss evidence */
    /* the block in force */
    uint64_t b_iters;
    double b_time, b_target; /* estimated seconds so far, and how long it is to last */
    double b_tsum;           /* its clipped time samples (not the first after a change) */
    uint64_t b_tn;
    double sn, sx, sy, sxx, sxy, syy; /* regression sums over the iterations used */
    struct auto_block a1, probe;      /* the last incumbent block, the last probe block */
    /* evidence per pair of neighbours (arm p, arm p+1): > 0 favours the lower CF (arm p) */
    double ev_s[GV_ADAPT_AUTO_MAX_ARMS], ev_w[GV_ADAPT_AUTO_MAX_ARMS];
    uint64_t ev_n[GV_ADAPT_AUTO_MAX_ARMS];
    /* probes back off on a side whose neighbour keeps losing: skip[d] opportunities left,
     * lost[d] losses in a row (0 below, 1 above) */
    uint32_t skip[2], lost[2];
    /* the phase (a new one at every lr drop) */
    double phase_lr, phase_time;
    double probe_time; /* the phase's seconds in probes below the incumbent */
    uint64_t phases, switches, probes;
    struct auto_arm arm[GV_ADAPT_AUTO_MAX_ARMS];
};

struct gv_adapt {
    struct gv_adapt_config cfg;
    gv_adapt_log_cb log_cb; /* not saved */
    void *log_arg;

    /* ---- every controller */
    uint64_t n_obs;            /* observations accepted; next iteration = first_iter + n_obs */
    enum gv_adapt_level level; /* level in force for the next iteration */
    double last_lr;            /* lr of the last observation (valid when n_obs > 0) */
    double t_sys;              /* last T_sys, info only */
    uint64_t windows;          /* GraVAC windows / Accordion checks completed */

    /* ---- GraVAC */
    uint32_t top_rung;                  /* rungs 0..top_rung; derived from cfg, not saved */
    double rung_cf[GV_ADAPT_MAX_RUNGS]; /* derived from cfg, not saved */
    uint32_t floor_rung, cand_rung;     /* cand_rung == floor_rung: no candidate */
    double s_min, s_cand;               /* smoothed gains */
    bool min_known, cand_known;
    double r_min, r_cand, alpha; /* last per-step ratios and factor, info only */
    uint64_t win_obs;            /* observations since the last window boundary */
    struct adapt_tp_slot tp_dense;
    struct adapt_tp_slot tp[GV_ADAPT_MAX_RUNGS];

    /* ---- AUTO */
    struct auto_state au;

    /* ---- Accordion (arrays of cfg.accordion.num_layers, owned) */
    uint8_t *heavy;   /* 1: layer at cf_heavy */
    double *ref_norm; /* reference norms of the last check */
    double *ratio;    /* scratch for the log, not saved */
    bool ref_valid;
    uint64_t epochs;      /* epochs ended */
    uint64_t phase_start; /* epoch index that counts as epoch 0 (start or last lr decay) */
};

/* adapt.c */
void adapt_core_get(const struct gv_adapt *ctl, struct adapt_core *core);
bool adapt_core_eq(const struct adapt_core *a, const struct adapt_core *b);
bool adapt_in_warmup(const struct gv_adapt *ctl);
/* Ladder for cfg (GraVAC); GV_ERR_INVAL (logged) when it needs more than GV_ADAPT_MAX_RUNGS. */
gv_status_t adapt_ladder(const struct gv_adapt_gravac_cfg *g, double *rung_cf, uint32_t *top_p);
gv_status_t adapt_alloc_layers(struct gv_adapt *ctl);
/* samples / t_iter (t_compress counted unless the level was dense); -1 when t_iter == 0. */
double adapt_t_sys(const struct gv_adapt_obs *obs);
void adapt_free_layers(struct gv_adapt *ctl);

/* gravac.c */
void gravac_init(struct gv_adapt *ctl);
void gravac_update(struct gv_adapt *ctl, const struct gv_adapt_obs *obs);
/* The level eligibility gives in the current state, and the reason string for the log. */
enum gv_adapt_level gravac_eligible(const struct gv_adapt *ctl, const char **why_p);

/* auto.c */
void auto_init(struct gv_adapt *ctl);
void auto_update(struct gv_adapt *ctl, const struct gv_adapt_obs *obs);
/* The arm's decision: level and CF on the wire. */
void auto_arm_core(const struct gv_adapt *ctl, uint32_t arm, struct adapt_core *core);
/* The arm's time estimate (s): measured median, or predicted from the nearest measured arm;
 * 0 when no arm is measured yet. *measured_p (may be NULL): whether it was measured. */
double auto_arm_time(const struct gv_adapt *ctl, uint32_t arm, bool *measured_p);
/* GV_OK or GV_ERR_INVAL (logged) for a bad AUTO configuration. */
gv_status_t auto_validate(const struct gv_adapt_auto_cfg *a);
/* The name of the first inconsistent field of a restored AUTO state, or NULL. */
const char *auto_state_bad(const struct gv_adapt *ctl);

/* baseline.c */
void accordion_init(struct gv_adapt *ctl);
void accordion_update(struct gv_adapt *ctl, const struct gv_adapt_obs *obs);
uint32_t accordion_heavy_count(const struct gv_adapt *ctl);

/* log.c: each builds and emits one line when a sink is set. */
struct gravac_window_log {
    const struct adapt_core *old_core;
    const char *reason;       /* what the window did: "floor-raise+scale-up", ... */
    const char *level_reason; /* why the level in force is what it is */
    char reason_buf[48];
    double gain_gap; /* |g_min - g_cand| / g_min, < 0 when not computed */
    int sat_n;       /* entries ranked */
    uint32_t sat_rung[2];
    double sat_gap; /* < 0 when not computed */
};
void adapt_log_decision(const struct gv_adapt *ctl, uint64_t iter,
                        const struct adapt_core *old_core, const char *reason);
void adapt_log_gravac_window(const struct gv_adapt *ctl, uint64_t iter,
                             const struct gravac_window_log *w);
void adapt_log_accordion_check(const struct gv_adapt *ctl, uint64_t iter, uint64_t epoch,
                               const struct adapt_core *old_core, const char *reason);

/* One AUTO log line: the event ("timing", "block", "phase"), why, the decision before. The
 * block just finished, the sandwich's evidence and the next block are read from the state;
 * pair < 0 when no sandwich was scored. */
struct auto_log {
    const char *event, *reason;
    const struct adapt_core *old_core;
    const struct auto_block *block; /* the block that ended, or NULL */
    int pair;                       /* the pair scored, or -1 */
    double e, e_var;                /* the sandwich's difference (> 0: lower CF better) */
};
void adapt_log_auto(const struct gv_adapt *ctl, uint64_t iter, const struct auto_log *l);

/* state.c: checksum over a whole saved buffer (header checksum field taken as zero); the
 * tests use adapt_state_seal to forge well-formed buffers. */
uint64_t adapt_state_checksum(const uint8_t *buf, size_t len);
void adapt_state_seal(uint8_t *buf, size_t len);

#endif /* GV_ADAPT_INTERNAL_H */
