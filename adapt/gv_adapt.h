/* gv_adapt.h: the compression-factor controller. A pure state machine: the coordinator feeds it
 * one observation per iteration (aggregated over all workers) and gets back the decision for the
 * next iteration. No clock reads, no I/O, no globals, no randomness: a given configuration and
 * observation trace always give the same decisions. It never touches gradients or sockets.
 *
 * Controllers behind one interface: GraVAC (adaptive search), dense SGD, a static CF, and
 * Accordion (two levels, decided per layer). docs/adapt.md explains every rule with an example.
 *
 * ---- Agreement and the one-iteration lag --------------------------------------------------
 * Only one controller exists (hosted by the coordinating server); it sees the aggregated
 * statistics of every worker and returns one decision that is sent to every worker together
 * with the model update of iteration i. The decision therefore applies to iteration i+1 and is
 * based on observations up to and including i, whereas Algorithm 1 of the paper lets the gain
 * of iteration i pick the level of iteration i. The lag buys agreement without an extra round
 * trip: every worker sends the same level in the same iteration by construction, and no worker
 * waits for a decision between compressing and pushing. A level is sent only once its smoothed
 * gain has been measured (see "unmeasured" below), so the lag never lets an unmeasured CF out.
 *
 * Recommended aggregation on the coordinator (the controller does not care how): squared norms
 * are SUMMED over workers (the gain is then the energy ratio of all workers' vectors taken
 * together); t_compute and t_compress are the MAXIMUM over workers (the slowest worker gates a
 * synchronous iteration); t_comm is the coordinator's push+pull time of the iteration; samples
 * is the global number of samples of the iteration (N * per-worker batch).
 *
 * ---- GraVAC as implemented (paper: Tyagi & Swany, IEEE CLOUD 2023, Algorithm 1) ------------
 * CF = original size / compressed size (>= 1). Levels: FLOOR = theta_min (always computed),
 * CANDIDATE = the CF under evaluation (computed from the floor's output: multi-level),
 * DENSE = CF 1.
 *
 * Ladder. Candidate CFs are the rungs of a fixed ladder anchored at the configured floor:
 *   rung 0 = theta_min;  rung k = min(theta_min * s_k, theta_max),  s_1 = theta_s0 (2),
 *   s_{k+1} = s_k^2 (exponential) or 2 * s_k (geometric); the ladder stops at the first rung that
 *   reaches theta_max (the cap). [10, 1000] exponential: 10, 20, 40, 160, 1000 (2560 capped);
 *   [10, 2000] geometric: 10, 20, 40, 80, 160, 320, 640, 1280, 2000. The floor and the candidate
 *   are rungs; theta_s = candidate / floor is reported but derived. Choice: a floor raise moves
 *   the floor up the ladder without changing the candidate schedule (the paper's
 *   theta_s-relative form would jump rungs after a raise), and keeping CFs on rungs makes every
 *   T-map key exact and the map bounded (GV_ADAPT_MAX_RUNGS).
 *
 * Gain. Per-step ratios r_min = norm2_min / norm2_ef and r_cand = norm2_cand / norm2_ef, clamped
 * to [0, 1] (compressors that rescale, or rounding in sums, can exceed 1 by a hair). Smoothed
 * with the recursive EWMA  s_t = a * r_t + (1 - a) * s_{t-1},  seeded with the first sample
 * (s = r_1; never 0 during warm-up), a = cfg alpha or, when alpha = 0, min(1, N/100) with N the
 * observation's num_workers (paper). An observation with norm2_ef == 0 carries no information
 * about the compressor: both gains are left unchanged. The candidate's EWMA restarts (unmeasured)
 * whenever the candidate rung changes, so a new, more aggressive CF never inherits the higher
 * gain of the previous one; after a floor raise the floor's EWMA takes over the smoothed gain of
 * the CF that just became the floor.
 *
 * Throughput. t_iter = t_compute + t_compress + t_comm for a compressed iteration and
 * t_compute + t_comm for a dense one (paper; the dense step still measured gains, but the
 * paper excludes that cost). T_sys = samples / t_iter; T[CF sent] = T_sys * gain(CF sent) with
 * the smoothed gain after this iteration's sample (dense: gain 1, key CF 1). T keeps the latest
 * value per CF (paper; tp_alpha > 0 smooths it per CF instead). Values never expire: a CF not
 * sent again keeps its last value (the decision log shows each entry's age). A CF never sent
 * has no entry. t_iter == 0 leaves T unchanged.
 *
 * Eligibility, every iteration (after warm-up): CANDIDATE if a candidate exists, its gain is
 * measured and >= epsilon; else FLOOR if the floor's gain is measured and >= epsilon; else DENSE.
 * A level whose smoothed gain is unmeasured or below epsilon is never sent (warm-up excepted).
 *
 * Warm-up. The first iteration is DENSE (no gain is known before the first observation; dense
 * is the only level whose gain is known, 1). With warmup_iters = W > 0 the first W iterations
 * are sent at the floor instead, whatever the gain (the released code's "MIN_CF WARMUP", W=25),
 * and windows start counting after them. Gains and T are updated during warm-up either way.
 *
 * Window (every `window` observations after warm-up; the paper's i % window == 0), in order:
 *  1. Floor raise: if a candidate was measured, |g_min - g_cand| / g_min <= omega, and
 *     g_cand >= epsilon, the floor moves to the CF just evaluated (the paper's text; its
 *     pseudo-code would skip one rung). The epsilon condition is ours (raise_any_gain = true
 *     drops it, as in the paper): without it, early in training when every gain is below
 *     epsilon and close together, the floor ratchets up to theta_max while training is dense,
 *     and since a floor never comes down, dense continues until the gain of theta_max itself
 *     reaches epsilon, long after the lower CFs became eligible.
 *  2. Scale-up: candidate rung += 1, capped at the top rung (theta_max). The paper scales up
 *     every window whether or not the candidate was eligible; so do we.
 *  3. Saturation: among the T entries with CF >= the (new) floor, if the two largest differ by
 *     at most omega relative to the second largest (and it is > 0), the candidate is set to the
 *     SMALLER CF of those two (the paper's text, not its get(ct[-2]) which can pick the larger).
 *     Dense and abandoned floors (below the floor) stay in T and in the log but are not ranked:
 *     GraVAC cannot choose them, and ranking them would give theta_s < 1. If the smaller CF is
 *     the floor itself, there is no candidate until the next window scales up again.
 *  The test runs every window; there is no permanent stop: while the top two stay within omega
 *  the candidate stays pinned, and the search resumes from the pinned rung when they separate.
 *  With a single rung (theta_min == theta_max) there is never a candidate.
 *
 * ---- Baselines ---------------------------------------------------------------------------
 * DENSE: always level DENSE, CF 1, no compression. STATIC: always level FLOOR at static_cf.
 * ACCORDION (Agarwal et al., MLSys 2021): per layer, light level (cf_light) in critical regimes,
 * heavy (cf_heavy) otherwise. At the end of every epoch the caller passes the per-layer L2 norm
 * of that epoch's accumulated gradient. Epoch e (counted from 0, from the start or from the last
 * lr decay) is a check epoch when e % switch_epochs == 0: the first check only records the
 * reference norms (all layers light); later checks compute per layer
 * ratio = |ref - cur| / ref (critical if ref == 0), light if ratio >= eta else heavy, then
 * cur becomes the reference. An lr decay (obs.lr below the previous observation's lr, or the
 * lr_decayed flag) puts every layer light at once and restarts the epoch count as at the start,
 * so every decay is followed by at least switch_epochs light epochs. Decisions take effect from
 * the next iteration. The decision's level is FLOOR; cf_send is the smallest CF any layer uses.
 *
 * ---- AUTO: the controller without per-job settings (docs/adapt.md section 4) ----------------
 * Picks, among a ladder of arms (dense, dense in halves, sparse CFs), the one under which the
 * training loss falls fastest per second, with the same settings on every job. Measurements:
 *  - time: every arm's iteration time (t_compute + t_compress + t_comm), the median of its
 *    last 9 samples; the first iteration after a change is not a sample (its period carries
 *    the previous arm's update); an arm not measured yet is predicted from the two nearest
 *    measured ones by payload, never below the nearest one's time;
 *  - progress: the OLS slope of the round's mean training loss (obs.loss) over a block's
 *    iterations (the first block_skip left out: momentum and the residual settle), divided by
 *    the block's own mean iteration time: loss decrease per second, with its variance;
 *  - the learning rate (phases) and the budget total_iters (the quality guard).
 * TIMING: timing_iters iterations per arm from the largest CF down; the first incumbent
 * minimises time x CF^gamma0 (dense arms count as CF 1); timing stops below the first arm
 * scoring timing_stop times the best, or above a sparse arm whose time, predicted from the two
 * arms above it (a line in payload), already scores that (dense arms are always timed).
 * RUN: an incumbent block of block_frac of the phase's training time (at least block_min
 * iterations), then a probe block (probe_ratio of that) on a neighbour, below and above in turn,
 * then the incumbent again. Each incumbent-probe-incumbent sandwich scores the probe's rate minus
 * the mean of the incumbent's two (a linear trend cancels), accumulated per pair of neighbours with
 * inverse-variance weights, discounted by `forget` per new sandwich; a pair's z-score of z_switch
 * for the neighbour makes it the incumbent. Time rules, no loss needed: an arm above is not probed
 * unless measured `tie` faster; a probe below no more than `tie` slower replaces the incumbent;
 * between the two dense arms (the same gradient) only time counts: 5 % (tie / 2) faster replaces;
 * dense in halves is probed above dense in full only when measured that much faster, otherwise
 * the arm above dense in full is the first sparse arm (that pair's evidence is kept on dense in
 * halves and that arm); dense in full is probed below dense in halves whatever its recorded time
 * (a burst of load may be in it), half as often each time it loses. A probe below waits while the
 * phase's probes below, plus block_min of its own iterations, would exceed probe_budget of the
 * phase's time; a side that lost a sandwich (z beyond -z_switch) is probed half as often each time
 * it loses again (1 in 2, 4, 8). The prior re-scored: a sandwich whose pair's z-score for the
 * incumbent is under z_switch / 2 lets the neighbour it probed replace it if that neighbour's
 * score (time x CF^gamma0, both over 9 samples) is `tie` below the incumbent's, either way in the
 * first phase while no evidence has moved the incumbent, and at any time when the neighbour is
 * also measured faster (a slower incumbent keeps its place only while its evidence holds; an
 * incumbent faster than the neighbour is not taken back by the prior). An lr below lr_drop x the
 * phase's starts a new phase: evidence cleared, short blocks, the incumbent drop_rungs down but not
 * onto a dense arm. The quality guard: from quality_from of total_iters (unknown: from the first lr
 * drop) no arm above quality_cf (the accuracy at the budget depends on the CF through most of
 * training).
 *
 * ---- Decision log --------------------------------------------------------------------------
 * With a sink set, one JSON object (one line, no newline) per window and per decision change:
 * event "window" or "decision", iteration, reason, old and new decision, smoothed gains and
 * per-step ratios, thresholds, T_sys and the T map. Format in docs/adapt.md.
 *
 * Threading: a controller is not thread-safe; one caller (the coordinator) owns it. */
#ifndef GV_ADAPT_H
#define GV_ADAPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gv_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Upper bound on the number of ladder rungs (floor + candidates); a configuration that would
 * need more is rejected. Geometric [1, 2^60] needs 61. */
#define GV_ADAPT_MAX_RUNGS 64
/* Upper bound on Accordion's num_layers. */
#define GV_ADAPT_MAX_LAYERS (1u << 20)

enum gv_adapt_kind {
    GV_ADAPT_DENSE = 0,     /* dense SGD every iteration */
    GV_ADAPT_STATIC = 1,    /* one fixed CF */
    GV_ADAPT_GRAVAC = 2,    /* adaptive search */
    GV_ADAPT_ACCORDION = 3, /* two levels, per layer */
    GV_ADAPT_AUTO = 4,      /* loss decrease per second over a ladder of arms (the default) */
};

enum gv_adapt_level {
    GV_ADAPT_LEVEL_DENSE = 0,     /* send the uncompressed gradient (CF 1); residual := 0 */
    GV_ADAPT_LEVEL_FLOOR = 1,     /* send level 1: compressed to theta_min */
    GV_ADAPT_LEVEL_CANDIDATE = 2, /* send level 2: compressed to the candidate CF */
};

enum gv_adapt_policy {
    GV_ADAPT_POLICY_EXPONENTIAL = 0, /* theta_s <- theta_s^2 */
    GV_ADAPT_POLICY_GEOMETRIC = 1,   /* theta_s <- 2 * theta_s */
};

struct gv_adapt_gravac_cfg {
    double theta_min;      /* initial floor CF, >= 1 (paper: 10; 1.5 for random-k) */
    double theta_max;      /* largest CF, >= theta_min (paper: 1000 exponential, 2000 geometric) */
    double epsilon;        /* (0, 1]: smallest smoothed gain a level may be sent with (0.7, 0.9) */
    double omega;          /* [0, 1): relative tolerance of the floor raise and saturation (0.01) */
    double theta_s0;       /* > 1: first step, first candidate = theta_min * theta_s0 (2) */
    double alpha;          /* (0, 1]: gain EWMA factor; 0 = auto, min(1, N/100) per observation */
    double tp_alpha;       /* [0, 1]: 0 = T[CF] is the latest value (paper); else its EWMA factor */
    uint32_t window;       /* >= 1: observations per candidate evaluation (500; 2000 geometric) */
    uint32_t warmup_iters; /* first W iterations at the floor whatever the gain (0) */
    enum gv_adapt_policy policy; /* exponential */
    bool raise_any_gain;         /* true: the paper's floor raise, whatever the gains; false
                                    (default): only when the candidate is eligible (>= eps) */
};

struct gv_adapt_accordion_cfg {
    double cf_light;        /* >= 1: CF of a layer in a critical regime (10) */
    double cf_heavy;        /* >= cf_light: CF otherwise (1000) */
    double eta;             /* > 0: relative norm change that marks a layer critical (0.5) */
    uint32_t switch_epochs; /* >= 1: epochs between checks (10 for CNNs, 5 for LSTMs) */
    uint32_t num_layers;    /* 1 .. GV_ADAPT_MAX_LAYERS (no default: the model decides) */
};

/* Upper bound on the arms of the AUTO ladder. */
#define GV_ADAPT_AUTO_MAX_ARMS 16

struct gv_adapt_auto_cfg {
    uint32_t n_arms;                   /* 1 .. GV_ADAPT_AUTO_MAX_ARMS */
    double cf[GV_ADAPT_AUTO_MAX_ARMS]; /* strictly ascending: 1 = dense, 2 = dense in halves
                                          (both level DENSE), sparse CFs > 2
                                          (1, 2, 4, 10, 30, 100, 300, 1000) */
    double gamma0;                     /* >= 0: start prior, iterations grow as CF^gamma0 (0.2) */
    double block_frac;                 /* (0, 1]: incumbent block / phase time so far (0.1) */
    double probe_ratio;                /* (0, 1]: probe block / incumbent block (0.5) */
    uint32_t block_min;                /* >= block_skip + 8: iterations per block at least (20) */
    uint32_t block_skip;               /* first iterations of a block left out of its slope (5) */
    double z_switch;                   /* > 0: evidence that moves the incumbent (2) */
    double forget;                     /* [0, 1]: evidence kept per new sandwich (0.7) */
    double tie;                        /* [0, 1): relative time difference taken as equal (0.1) */
    double probe_budget;               /* (0, 1]: probes below / phase time (0.25) */
    double lr_drop;                    /* (0, 1): lr below this x the phase's: new phase (0.5) */
    uint32_t drop_rungs;               /* rungs down at a new phase (1) */
    uint32_t timing_iters;             /* >= 2: iterations per arm when timing (3) */
    double quality_cf;                 /* >= 1: the largest CF once the guard is on (10) */
    double quality_from;               /* [0, 1]: the guard is on from this fraction of
                                          total_iters (0.2) */
    uint64_t total_iters;              /* the job's iteration budget (0: unknown, the guard
                                          is on from the first lr drop) */
    double timing_stop;                /* > 1: timing stops below an arm scoring this x the
                                          best (1.5) */
};

struct gv_adapt_config {
    enum gv_adapt_kind kind;
    uint64_t first_iter; /* number of the first iteration (0) */
    double static_cf;    /* GV_ADAPT_STATIC: >= 1 (10) */
    struct gv_adapt_gravac_cfg gravac;
    struct gv_adapt_accordion_cfg accordion;
    struct gv_adapt_auto_cfg autoc;
};

/* What the coordinator measured in one iteration, aggregated over all workers. Every double
 * must be finite and >= 0 (fields a controller does not use may be left 0). */
struct gv_adapt_obs {
    uint64_t iter;             /* must equal the iteration of the decision in force */
    enum gv_adapt_level level; /* level sent in this iteration (must be the one decided) */
    double cf_sent;            /* its CF (must be the decided cf_send; 1 for dense) */
    double norm2_ef;           /* sum over workers of ||g_ef||^2 (gradient + residual) */
    double norm2_min;          /* sum over workers of ||C(g_ef, theta_min)||^2 */
    double norm2_cand;         /* sum over workers of ||C(g_min, theta_s)||^2; 0 without one */
    double t_compute;          /* seconds: forward + backward */
    double t_compress;         /* seconds: both compression levels */
    double t_comm;             /* seconds: push + pull (or collective) */
    uint64_t samples;          /* samples processed by all workers in this iteration */
    uint32_t num_workers;      /* >= 1 */
    double lr;                 /* learning rate used in this iteration */
    double loss;               /* AUTO: mean training loss of the iteration over the workers */
    bool lr_decayed;           /* Accordion: force the lr-decay rule (also detected from lr) */
    bool epoch_end;            /* Accordion: this iteration ends an epoch; layer_norms given */
    uint32_t num_layers;       /* Accordion at epoch end: must equal cfg accordion.num_layers */
    const double *layer_norms; /* double[num_layers], host, borrowed for the call: L2 norm of
                                  each layer's gradient accumulated over the epoch */
};

/* What every worker does in the iteration `iter`. */
struct gv_adapt_decision {
    uint64_t iter;             /* the iteration this decision applies to */
    enum gv_adapt_level level; /* what to send */
    double cf_send;            /* CF to send at: candidate CF, theta_min, or 1 (dense) */
    double theta_min;          /* current floor (level 1) */
    double cf_candidate;       /* current candidate (level 2); == theta_min when there is none */
    double theta_s;            /* cf_candidate / theta_min */
    uint32_t levels;           /* compression levels workers compute: 0 none, 1 floor only,
                                  2 floor then candidate (both, to measure both gains) */
    /* Per-layer CFs (Accordion; whole-model controllers report num_layers = 0 and use
     * cf_send for every layer). In: layer_cf is caller storage for layer_cap doubles, or NULL
     * to skip. Out: num_layers = the layer count; layer_cf[0..num_layers) written if given. */
    uint32_t num_layers;
    double *layer_cf; /* borrowed, host */
    uint32_t layer_cap;
};

/* One entry of the GraVAC throughput map. */
struct gv_adapt_tp {
    double cf;      /* 1 = dense */
    double tp;      /* compression throughput T[cf], samples/s times gain */
    double gain;    /* smoothed gain used for the latest value */
    uint64_t iter;  /* iteration of the latest value */
    uint64_t count; /* number of iterations sent at this CF */
};

/* A snapshot for progress lines and tests. */
struct gv_adapt_info {
    enum gv_adapt_kind kind;
    uint64_t next_iter;    /* iteration of the decision in force */
    uint64_t observations; /* accepted so far */
    uint64_t windows;      /* GraVAC windows or Accordion checks completed */
    bool in_warmup;
    double gain_min, gain_cand; /* smoothed gains (valid when *_known) */
    bool gain_min_known, gain_cand_known;
    double ratio_min, ratio_cand; /* last per-step ratios (0 before any) */
    double alpha;                 /* EWMA factor used last */
    double t_sys;                 /* last T_sys in samples/s (0 before any) */
    uint32_t floor_rung, cand_rung, top_rung;
    uint32_t n_tp;                                 /* entries in tp[], ascending cf */
    struct gv_adapt_tp tp[GV_ADAPT_MAX_RUNGS + 1]; /* dense first when present */
    uint64_t epochs;                               /* Accordion: epochs ended */
    uint32_t heavy_layers;                         /* Accordion: layers at cf_heavy */
    /* AUTO (in_warmup: still timing the arms) */
    uint32_t auto_arm, auto_inc; /* the arm in force, the incumbent (indices into cfg cf[]) */
    bool auto_probing;           /* the block in force is a probe */
    uint64_t auto_phases, auto_switches, auto_probes;
    double auto_time[GV_ADAPT_AUTO_MAX_ARMS]; /* iteration time estimates (s), 0: unknown */
    bool auto_measured[GV_ADAPT_AUTO_MAX_ARMS];
    uint64_t auto_count[GV_ADAPT_AUTO_MAX_ARMS]; /* iterations sent at each arm */
};

struct gv_adapt;

/* Receives one JSON object per line (no trailing newline); the string is valid for the call. */
typedef void (*gv_adapt_log_cb)(const char *json_line, void *arg);

/* Fills cfg with the paper's defaults for kind (GraVAC: [10, 1000], exponential, window 500,
 * epsilon 0.9, omega 0.01, theta_s0 2, alpha auto N/100; static 10x; Accordion 10x/1000x, eta 0.5,
 * 10 epochs, num_layers 0 which the caller must set; AUTO: the values in gv_adapt_auto_cfg's
 * comments, the same for every job). Every kind's section is filled whatever the kind. */
void gv_adapt_config_default(struct gv_adapt_config *cfg, enum gv_adapt_kind kind);

/* GV_OK, or GV_ERR_INVAL with one error line naming the offending field. Only the fields of
 * cfg->kind are checked. */
gv_status_t gv_adapt_config_validate(const struct gv_adapt_config *cfg);

/* Creates a controller (cfg is copied). GV_ERR_INVAL for a bad config, GV_ERR_NOMEM. */
gv_status_t gv_adapt_create(const struct gv_adapt_config *cfg, struct gv_adapt **ctl_p);
/* Accepts NULL. */
void gv_adapt_destroy(struct gv_adapt *ctl);

/* Sets the decision-log sink (NULL: no log, and no JSON is built). Not part of the saved state. */
void gv_adapt_set_log(struct gv_adapt *ctl, gv_adapt_log_cb cb, void *arg);

/* The decision in force (for the first iteration right after create or restore).
 * GV_ERR_INVAL if dec->layer_cf is given with layer_cap < num_layers. */
gv_status_t gv_adapt_current(const struct gv_adapt *ctl, struct gv_adapt_decision *dec);

/* Feeds the observation of iteration obs->iter and writes the decision for obs->iter + 1.
 * GV_ERR_INVAL (logged, naming the field) for an observation out of sequence, with a level or
 * CF other than the one decided, with a NaN, infinite or negative value, or bad layer norms;
 * the controller is then unchanged and *dec untouched. Never fails otherwise (a failing log
 * sink allocation drops that log line with a warning). */
gv_status_t gv_adapt_update(struct gv_adapt *ctl, const struct gv_adapt_obs *obs,
                            struct gv_adapt_decision *dec);

void gv_adapt_get_info(const struct gv_adapt *ctl, struct gv_adapt_info *info);
void gv_adapt_get_config(const struct gv_adapt *ctl, struct gv_adapt_config *cfg);

/* ---- checkpoint: the whole state (configuration included; the log sink excluded) ----------
 * Format: little-endian, header {magic "GVAD", u16 version, u16 kind, u32 body length,
 * u64 FNV-1a checksum over header (checksum field zeroed) and body}, then the body. */
size_t gv_adapt_state_size(const struct gv_adapt *ctl);
/* Writes gv_adapt_state_size() bytes to buf; GV_ERR_INVAL if cap is smaller. */
gv_status_t gv_adapt_save(const struct gv_adapt *ctl, void *buf, size_t cap, size_t *len_p);
/* Replaces ctl's configuration and state with the saved ones (the log sink is kept).
 * GV_ERR_PROTO for a truncated, corrupt or inconsistent buffer, GV_ERR_VERSION for a well-formed
 * buffer of another format version, GV_ERR_NOMEM; on any error ctl is unchanged. Continuing
 * after a restore gives bit-identical decisions to never having stopped. */
gv_status_t gv_adapt_restore(struct gv_adapt *ctl, const void *buf, size_t len);

/* ---- observation traces (server --obs-trace; tests/adapt replays them) ----------------------
 * One CSV line per iteration: the observation and the decision that followed, doubles printed
 * with 17 significant digits so that a replay feeds the controller the same bits. Accordion's
 * epoch-end layer norms are not traced. */
#define GV_ADAPT_TRACE_HEADER                                                                      \
    "iter,level,cf_sent,norm2_ef,norm2_min,norm2_cand,t_compute,t_compress,t_comm,samples,"        \
    "num_workers,lr,loss,next_level,next_cf"
#define GV_ADAPT_TRACE_LINE 512
/* Formats obs and the decision it produced into buf (no newline; truncated to len). */
void gv_adapt_trace_line(const struct gv_adapt_obs *obs, const struct gv_adapt_decision *next,
                         char *buf, size_t len);
/* Parses one line of GV_ADAPT_TRACE_HEADER's format: GV_ERR_PROTO when malformed. */
gv_status_t gv_adapt_trace_parse(const char *line, struct gv_adapt_obs *obs,
                                 enum gv_adapt_level *next_level, double *next_cf);

const char *gv_adapt_level_str(enum gv_adapt_level level); /* "dense", "floor", "candidate" */
const char *gv_adapt_kind_str(enum gv_adapt_kind kind);    /* "dense", "static", ... */
const char *gv_adapt_policy_str(enum gv_adapt_policy pol); /* "exponential", "geometric" */

#ifdef __cplusplus
}
#endif
#endif /* GV_ADAPT_H */
