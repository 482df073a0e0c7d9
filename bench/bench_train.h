/* bench_train.h: internals of `gravac-bench train` (bench_train*.c): the options, the shaped
 * network of namespaces, child processes, the per-run results read from the workers' metrics,
 * and the outputs (CSV, JSON, gnuplot). The gnuplot and child-process helpers are shared with
 * `gravac-bench scaling`. Not a public header: bench/ only. */
#ifndef GV_BENCH_TRAIN_H
#define GV_BENCH_TRAIN_H

#include "bench_progress.h"
#include "gv_common.h"

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define BT_MAX_METHODS 16
#define BT_MAX_RATES 8
#define BT_MAX_NODES 64 /* servers + workers */
#define BT_MAX_HIST 32  /* distinct CFs per run */
#define BT_MAX_REPEATS 16
#define BT_MAX_TARGETS 8 /* --also-targets */

/* ---------------------------------------------------------------- child processes */

/* Set by SIGINT/SIGTERM (bt_signals_install): every wait below gives up and returns
 * GV_ERR_CLOSED so that the caller unwinds and cleans up. */
extern volatile sig_atomic_t bt_interrupted;
void bt_signals_install(void);

/* Starts argv[0] (looked up in PATH) with stdout and stderr written to log_path (truncated;
 * NULL: the bench's own), in its own process group; the pid is remembered so that
 * bt_children_kill can stop it. */
gv_status_t bt_spawn(char *const argv[], const char *log_path, pid_t *pid_p);
/* Waits for pid until deadline_ns (gv_now_ns clock); *rc_p: exit status, or 128 + signal.
 * GV_ERR_TIMEOUT at the deadline (the child is left running), GV_ERR_CLOSED when interrupted. */
gv_status_t bt_wait(pid_t pid, uint64_t deadline_ns, int *rc_p);
/* SIGTERM to every child still running, SIGKILL after grace_ms, then reaps them. */
void bt_children_kill(int grace_ms);
/* Runs argv to completion within timeout_ms, capturing up to out_len - 1 bytes of its stdout
 * and stderr in out (may be NULL). GV_OK only for exit status 0; otherwise GV_ERR_IO (the
 * status in *rc_p when given), GV_ERR_TIMEOUT (killed) or GV_ERR_CLOSED (interrupted). */
gv_status_t bt_exec(char *const argv[], int timeout_ms, char *out, size_t out_len, int *rc_p);
/* Splits s at blanks into argv[*argc ...], up to cap entries in all (the strings are copied
 * into the caller's store of store_len bytes). GV_ERR_INVAL when it does not fit. */
gv_status_t bt_split(const char *s, char **argv, int *argc, int cap, char *store, size_t store_len,
                     size_t *used);

/* ---------------------------------------------------------------- the network */

enum bt_net_mode {
    BT_NET_AUTO = 0,  /* namespaces when permitted, else loopback (said so) */
    BT_NET_NETNS = 1, /* namespaces or fail */
    BT_NET_LOOPBACK = 2,
};

/* One namespace per process on a bridge in a hub namespace; each node's veth is shaped at
 * both ends (egress of the node, egress of the hub towards it) with tbf. Names:
 * <prefix>-hub, <prefix>-s<i>, <prefix>-w<i>; addresses 10.201.0.(1 + s) for servers and
 * 10.201.1.(1 + w) for workers. */
struct bt_net {
    char prefix[24];
    int S, W;
    int n_made; /* namespaces created (hub first) */
    bool hub_made;
    char rate[24]; /* current shaping ("" = none) */
};

/* Creates the namespaces. GV_ERR_UNSUPPORTED (with the reason in why) when namespaces, veth,
 * bridges or tbf are not permitted or not in this kernel; everything made is removed again. */
gv_status_t bt_net_create(struct bt_net *net, int S, int W, char *why, size_t why_len);
/* Shapes every link to rate ("100mbit", "1gbit", ...; "none" removes the shaping) with a tbf
 * of the given latency and bucket (burst bytes; 0: 4 ms at the rate, at least 64 KiB). */
gv_status_t bt_net_shape(struct bt_net *net, const char *rate, const char *latency, uint64_t burst);
/* Removes every namespace made (and with them the veths and qdiscs). Accepts a zeroed net. */
void bt_net_destroy(struct bt_net *net);
/* Namespaces left by bench runs that died without cleaning up (prefix gvbt<pid>, pid gone). */
void bt_net_remove_stale(void);
void bt_net_ns(const struct bt_net *net, bool server, int rank, char *out, size_t len);
void bt_net_ip(bool server, int rank, char *out, size_t len);
/* iperf3 from worker 0's namespace to server 0's, both directions, secs seconds each:
 * the goodput of one shaped link (bits/s). GV_ERR_UNSUPPORTED without iperf3. */
gv_status_t bt_net_iperf(const struct bt_net *net, int secs, double *up_bps, double *down_bps);

/* ---------------------------------------------------------------- options */

struct bt_method {
    char label[32]; /* "dense", "static-10", "gravac-exp", "accordion", ... */
    char opts[600]; /* job options of this method, for every process */
};

struct bt_opts {
    int servers, workers;
    char rates[BT_MAX_RATES][24];
    int n_rates;
    struct bt_method methods[BT_MAX_METHODS];
    int n_methods;
    int repeats;
    uint64_t seed;
    bool same_seed;              /* every repeat with --seed (else repeat k uses seed + k) */
    double target;               /* test accuracy in (0, 1] */
    double also[BT_MAX_TARGETS]; /* more targets, reported in a second table and the JSON */
    int n_also;
    uint64_t steps, eval_every;
    char out[512];
    char bin_dir[512];
    enum bt_net_mode net;
    char latency[16];
    uint64_t burst; /* tbf bucket in bytes, 0: the default (bt_net_shape) */
    int run_timeout_s;
    bool plots;
    char plot_fmt[8];                 /* png | svg */
    int iperf_secs;                   /* 0: no link measurement */
    char job[2048];                   /* options after "--": for every process of every run */
    char gravac[600], accordion[600]; /* method options (overridable) */
    enum bp_mode progress;            /* --progress (--quiet: off) */
    double progress_every;            /* --progress-every S (0: the default for the output) */
};

/* ---------------------------------------------------------------- one run's results */

struct bt_eval {
    uint64_t step;  /* iterations done */
    double train_s; /* training time at the evaluation (evaluations excluded) */
    double time_s;  /* wall time since training started */
    double acc, loss;
};

struct bt_iter {
    double train_s; /* after this iteration */
    double cf;
    uint8_t level;     /* 0 dense, 1 floor, 2 candidate */
    uint64_t up, down; /* bytes of this iteration, summed over the workers */
    /* worker 0's split of the iteration: forward/backward; compression and pushing as the
     * shards complete; waiting for every server's update (network, the other ranks, the
     * servers, applying the updates) */
    float compute_s, compress_s, wait_s;
};

struct bt_cf_count {
    double cf;
    uint64_t n;
};

struct bt_result {
    bool ok;
    char err[300];
    char dir[700]; /* the run's directory */
    char rate[24];
    int method, repeat;
    uint64_t seed;
    uint64_t iters;
    double train_s;             /* whole run, evaluations excluded */
    double samples_per_s;       /* global, over train_s */
    double final_acc, best_acc; /* final: at the iteration budget */
    int64_t target_iter;        /* first evaluation at or above the target; -1: never */
    double target_train_s, target_wall_s;
    uint64_t up_bytes, down_bytes;     /* all workers, whole run */
    uint64_t up_target, down_target;   /* all workers, up to the target */
    int64_t also_iter[BT_MAX_TARGETS]; /* the same for opts.also[] (-1: never) */
    double also_train_s[BT_MAX_TARGETS];
    struct bt_cf_count hist[BT_MAX_HIST]; /* iterations per CF */
    int n_hist;
    uint64_t cf_changes, n_dense, n_floor, n_cand;
    double mean_cf;                       /* over iterations */
    double compute_s, compress_s, wait_s; /* worker 0, sums over the run (see bt_iter) */
    struct bt_eval *ev;
    size_t n_ev;
    struct bt_iter *it;
    size_t n_it;
};

/* Reads worker 0's evaluations and every worker's iteration records from dir
 * (worker<r>.jsonl) and fills r for the target and the n_also more. GV_ERR_PROTO (with
 * r->err) when a file is missing or malformed. */
gv_status_t bt_result_load(struct bt_result *r, const char *dir, int workers, double target,
                           const double *also, int n_also);
void bt_result_free(struct bt_result *r);
/* The last iteration worker `worker` recorded in dir/worker<r>.jsonl so far (0-based; -1:
 * none yet or no file): the tail of the file, read while the run goes on. */
long bt_last_iter(const char *dir, int worker);
/* The per-run series for gnuplot: <dir>/eval.dat and <dir>/iter.dat. */
gv_status_t bt_result_series(const struct bt_result *r);

/* ---------------------------------------------------------------- outputs */

struct bt_machine {
    long cpus;
    double load_before[3], load_after[3];
    char kernel[128];
    char cpu_model[128];
    double iperf_up[BT_MAX_RATES], iperf_down[BT_MAX_RATES]; /* bits/s, 0: not measured */
    bool netns;
};

gv_status_t bt_write_csv(const struct bt_opts *o, const struct bt_result *rs, int n,
                         const char *path);
gv_status_t bt_write_json(const struct bt_opts *o, const struct bt_machine *mach,
                          const struct bt_result *rs, int n, const char *path);
/* Four plots per rate (accuracy vs time and vs iteration, CF vs iteration, cumulative bytes),
 * from the first repeat of every method. */
gv_status_t bt_plots(const struct bt_opts *o, const struct bt_result *rs, int n);
/* Prints the per-method table of every rate and the claim check. */
void bt_print_summary(const struct bt_opts *o, const struct bt_result *rs, int n);

/* Aggregates over the repeats of (rate, method): means, minimum and maximum; n_ok counts the
 * repeats that ran, n_reached those that reached the target. */
struct bt_agg {
    int n_ok, n_reached;
    double time_mean, time_min, time_max; /* to the target (reached repeats) */
    double iter_mean, iter_min, iter_max;
    double acc_mean, acc_min, acc_max; /* at the budget */
    double sps_mean;
    double up_mean, down_mean;     /* whole run, all workers */
    double up_t_mean, down_t_mean; /* to the target */
    double cf_mean;
    double ms_it, compute_ms, compress_ms, wait_ms; /* per iteration, worker 0 */
    double up_it, down_it;                          /* bytes per iteration and worker */
};
void bt_aggregate(const struct bt_opts *o, const struct bt_result *rs, int n, const char *rate,
                  int method, struct bt_agg *a);

/* Claim check for one GraVAC method at one rate (see docs/results.md). */
struct bt_claim {
    bool have;               /* dense and this method reached the target in every repeat */
    double speedup_vs_dense; /* dense time / method time (means) */
    double iter_ratio;       /* method iterations / dense iterations (means) */
    double vs_best_static;   /* method time / best static time (means); 0: no static reached */
    int best_static;         /* method index, -1: none */
    bool pass;
};
void bt_claim(const struct bt_opts *o, const struct bt_result *rs, int n, const char *rate,
              int method, struct bt_claim *c);
bool bt_method_is_static(const struct bt_opts *o, int m);
bool bt_method_is_gravac(const struct bt_opts *o, int m);
int bt_method_dense(const struct bt_opts *o);

/* ---------------------------------------------------------------- gnuplot (shared) */

/* True when a gnuplot program is on PATH. */
bool bt_have_gnuplot(void);
/* Runs gnuplot on script_path (bounded to 60 s); GV_ERR_IO with its output logged. */
gv_status_t bt_gnuplot(const char *script_path);
/* The terminal line for fmt ("png" or "svg"), sized w x h pixels. */
void bt_gnuplot_terminal(const char *fmt, int w, int h, char *out, size_t len);

/* mkdir -p; GV_ERR_IO (logged) on failure. */
gv_status_t bt_mkdirs(const char *path);

#endif /* GV_BENCH_TRAIN_H */
