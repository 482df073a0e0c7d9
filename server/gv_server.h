/* gv_server.h: the gravac parameter server: one shard, bulk-synchronous rounds, rank-ordered
 * aggregation, the optimizer, the compressed downlink, and on server 0 the GraVAC controller.
 * What servers share with workers (job, cluster, shard map, links, handshakes) is in ps/
 * (gv_ps.h). docs/ps.md describes the protocol. Deliberately no training loop (worker/) and no
 * process management (launch/). */
#ifndef GV_SERVER_H
#define GV_SERVER_H

#include "gv_ps.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ================================================================ the server */

struct gv_server;

struct gv_server_config {
    const struct gv_job *job;            /* borrowed, resolved */
    const struct gv_cluster *cluster;    /* borrowed, resolved, role server */
    const struct gv_auth_secret *secret; /* borrowed; empty = --insecure */
    uint64_t handshake_timeout_ns;
    const char *decision_log; /* server 0: JSON lines of the controller ("" none) */
    const char *obs_trace;    /* server 0: CSV of the controller's observations ("" none) */

    /* ---- operations (docs/operations.md); zero-initialised fields disable each ---- */
    uint64_t heartbeat_interval_ns;  /* a HEARTBEAT on every idle link this often (0: none) */
    uint64_t peer_timeout_ns;        /* a joined peer silent this long is dead (0: never) */
    enum gv_dead_policy dead_policy; /* a dead worker aborts the job, or the job goes on */
    uint32_t min_workers;            /* continue: abort below this many workers (0 means 1) */
    const char *checkpoint_dir;      /* NULL or "": no checkpoints, no resume */
    uint64_t checkpoint_every;       /* iterations between checkpoints (0: only at the end) */
    int checkpoint_keep;             /* files kept per shard (0 means 3) */
    bool checkpoint_fallback;        /* a corrupt newest checkpoint: fall back to an older one */
    enum gv_ckpt_fail_policy ckpt_fail_policy; /* a checkpoint not written everywhere */
    struct gv_hostport metrics_addr;           /* host "" and port 0: no HTTP endpoint */
    struct gv_trace *trace; /* borrowed, NULL: no timeline; used by gv_server_run's thread only */
};

/* Builds the shard map, allocates every buffer (parameters, momentum, accumulator, one receive
 * buffer), creates the transport and listens on the bind address, prints the map and the
 * addresses (bind and advertise), publishes the address in the rendezvous dir. Server 0 also
 * creates the controller. GV_ERR_INVAL, GV_ERR_IO, GV_ERR_NOMEM (each logged). */
gv_status_t gv_server_create(const struct gv_server_config *cfg, struct gv_server **srv_p);
void gv_server_destroy(struct gv_server *srv);
/* The port the server listens on (after an ephemeral bind). */
uint16_t gv_server_port(const struct gv_server *srv);
/* The port of the metrics endpoint (0 when there is none). */
uint16_t gv_server_metrics_port(const struct gv_server *srv);

/* Runs the server until the job ends: connects to server 0 (servers 1..S-1), admits every
 * worker, receives the initial model from worker 0, then runs rounds until every worker said
 * BYE (or worker 0 stopped early). GV_OK on a clean end; GV_ERR_TIMEOUT when start-up missed its
 * deadline; GV_ERR_CLOSED when a worker or server died (the job is aborted, every peer is told);
 * GV_ERR_PROTO on a protocol violation by a joined peer. *stop (may be NULL) is polled: when it
 * becomes non-zero (the signal number, SIGINT or SIGTERM) the job is stopped on request: server
 * 0 stops it at a round boundary (the others ask it to), every server writes its final
 * checkpoint there, and the summary says `stopped`. */
gv_status_t gv_server_run(struct gv_server *srv, volatile int *stop);

struct gv_server_summary {
    uint32_t rank, num_servers, num_workers;
    uint64_t shard_lo, shard_numel;
    uint64_t iterations; /* rounds completed */
    double wall_s;       /* from the first round to the last */
    struct gv_ps_bytes bytes;
    uint64_t peak_rss, bound_rss; /* VmHWM, and 4 x shard bytes + 64 MiB */
    double last_cf;
    uint64_t cf_changes;
    /* operations */
    bool stopped;            /* ended on request (a signal, or a peer's stop request) */
    bool refused;            /* refused to start: checkpoint unusable or not shared by all */
    uint32_t workers_left;   /* workers still in the job at the end */
    uint64_t resumed_from;   /* the checkpoint iteration the run started from (0: fresh) */
    uint64_t ckpt_iter;      /* iteration of the last checkpoint written (0: none) */
    uint64_t ckpt_written;   /* checkpoints written by this run */
    uint64_t ckpt_committed; /* the newest checkpoint every process wrote (0: none) */
    bool ckpt_lost;          /* a checkpoint failure stopped the job, or the end state is not
                                committed: resumable only from ckpt_committed (exit status 4) */
};
void gv_server_get_summary(const struct gv_server *srv, struct gv_server_summary *sum);

/* Server state for a checkpoint, as named sections valid until the next round: "params" and
 * "momentum" (float[shard]), "iteration" (u64), "residual" (float[shard], the bounded
 * downlink's), "controller" (server 0: gv_adapt_save blob). n_p receives the count (at most
 * GV_SERVER_STATE_SECTIONS). The one function that serialises server state. */
#define GV_SERVER_STATE_SECTIONS 5
gv_status_t gv_server_state_sections(struct gv_server *srv, struct gv_ckpt_section *sec, size_t cap,
                                     size_t *n_p);

#ifdef __cplusplus
}
#endif
#endif /* GV_SERVER_H */
