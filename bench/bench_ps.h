/* bench_ps.h: private to `gravac-bench ps`: options, one configuration's results, and the
 * cluster engine (bench_ps_run.c: S real gv_server instances and W gv_worker instances, each
 * in a thread of this process, stepping synthetic gradients without model compute) that the
 * command line and report code (bench_ps.c) drive. */
#ifndef GV_BENCH_PS_H
#define GV_BENCH_PS_H

#include "bench_transport.h"
#include "gv_ps.h"

#include <stdbool.h>
#include <stdint.h>

#define BP_MAX_SIZES 32
#define BP_MAX_CFS 16
#define BP_MAX_REPEATS 32
#define BP_MAX_WORKERS 64
#define BP_MAX_SERVERS 16

struct bp_opts {
    uint32_t workers, servers;
    uint64_t sizes[BP_MAX_SIZES]; /* value bytes (the dense model: 4 x parameters) */
    int n_sizes;
    char sizes_desc[96];
    double cfs[BP_MAX_CFS]; /* 1: dense */
    int n_cfs;
    char cfs_desc[96];
    const char *method;     /* the method of CF > 1: "static", "gravac-exp", ... */
    const char *compressor; /* "topk", ... */
    uint64_t gravac_window; /* the controller's window (gravac-*: iterations) */
    uint64_t iters;         /* measured rounds per repeat (0: by size) */
    int64_t warmup;         /* rounds before measuring (< 0: by size) */
    int repeats;            /* PS and baseline alternated this many times */
    int window;             /* the baseline pushpull's round trips in flight per connection */
    int cmp_threads;
    uint32_t verify_every;
    bool no_baseline;
    bool f32;              /* --no-fp16: sparse values as f32 (the job's default is fp16) */
    bool breakdown;        /* per-phase time from the servers' and workers' tracers */
    const char *trace_dir; /* per-process timelines of every configuration ("" none) */
    int json, csv;
};

/* Per-phase time of the measured rounds, microseconds per round (means over the workers and
 * over the servers): the spans of gv_ps_span (ps/gv_ps.h). */
struct bp_breakdown {
    bool on;
    double us[GV_PS_SPAN_N];
};

/* One configuration (size, CF): the PS rounds and the baseline. */
struct bp_result {
    uint64_t numel, bytes; /* the model: parameters, value bytes (4 x numel) */
    double cf;             /* nominal CF (1: dense) */
    double cf_mean;        /* mean CF sent in the measured rounds */
    uint64_t iters;        /* measured rounds (all repeats) */
    double seconds;        /* sum of the measured rounds' times (first step in to last out) */
    uint64_t up_bytes, down_bytes; /* payload pushed and received, all workers */
    double up_gbps, down_gbps, gbps;
    double eff_gbps; /* the dense model's bytes, both ways and all workers, per second: what a
                        compressed round delivers in dense terms (= gbps when dense) */
    double rtt_min, rtt_p50, rtt_p99, rtt_p999, rtt_max; /* usec per worker step */
    struct bt_result pp; /* the baseline, pooled over the repeats (pp.bytes: its message) */
    bool have_pp;
    double ratio;                  /* median over the repeats of gbps / pp gbps */
    double ratios[BP_MAX_REPEATS]; /* each repeat's */
    int n_ratios;
    /* CPU time of the whole process (every thread: servers, workers, the bench's gradient
     * copies) over the PS rounds and over the baseline's, seconds: a view that the shared
     * host's load does not stretch as it stretches wall time */
    double cpu_s, pp_cpu_s;
    uint64_t pp_rounds; /* the baseline's round trips / W: PS-round equivalents */
    struct bp_breakdown bd;
};

/* Measures one configuration: builds the cluster (a model of about `bytes` value bytes),
 * warms up, alternates PS rounds and the baseline `repeats` times, tears down. GV_OK or the
 * failure (logged). */
gv_status_t bp_run_config(const struct bp_opts *o, uint64_t bytes, double cf,
                          struct bp_result *res);

/* MLP hidden widths (two layers, the synthetic data's 64 inputs and 10 classes) whose
 * parameter count is closest to numel; *got_p receives that count. */
void bp_widths_for(uint64_t numel, int *a_p, int *b_p, uint64_t *got_p);

#endif /* GV_BENCH_PS_H */
