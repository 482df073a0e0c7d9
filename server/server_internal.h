/* server_internal.h: what server/'s files share privately: the server object, its peers and
 * the functions of the connection layer (server_peer.c) and the round logic (server_round.c).
 * Tests may include it. */
#ifndef GV_SERVER_INTERNAL_H
#define GV_SERVER_INTERNAL_H

#include "gv_server.h"

#include <pthread.h>
#include <stdatomic.h>

#define SRV_MAX_TENSORS 64
#define SRV_HDR_SLOTS 16
#define SRV_HDR_BYTES 1024
/* MODEL chunks: at most this many elements per message (1 GiB of floats). */
#define SRV_MODEL_CHUNK (256ull << 20)

enum srv_peer_kind {
    SRV_PEER_NEW = 0,  /* accepted, handshake running */
    SRV_PEER_WORKER,   /* a welcomed worker */
    SRV_PEER_SERVER,   /* server 0: a welcomed server 1..S-1 */
    SRV_PEER_COORD,    /* servers 1..S-1: our connection to server 0 */
};

struct srv_peer {
    struct gv_server *srv;
    struct gv_ps_link link;
    enum srv_peer_kind kind;
    enum gv_proto_role hello_role; /* NEW peers: the role their HELLO claimed */
    uint32_t rank;
    char name[96];          /* "worker 2 (127.0.0.1:40312)" */
    struct gv_ps_server_hs shs; /* server side of the handshake (NEW peers) */
    struct gv_ps_client_hs hs; /* COORD: our client side */
    uint64_t t_accept_ns;
    bool synced;            /* worker: initial model and decision sent */
    bool bye;               /* said BYE */
    bool bye_sent;          /* we said BYE to it */
    bool resync_req;        /* worker asked for a full model (checksum mismatch) */
    bool close_after_send;  /* a REFUSE is in flight: close when it completes */
    bool closed;            /* on_close ran */
    /* operations */
    uint64_t hello_iter;    /* SERVER peers: the newest checkpoint iteration its HELLO named */
    bool dead;              /* WORKER: declared dead (the continue policy goes on without it) */
    bool deferred;          /* WORKER: its push waits for its turn, unread; its heartbeats wait
                               behind it, so its silence is not held against it meanwhile */
    uint64_t seen_bytes;    /* conn bytes_recv at the last liveness tick */
    uint64_t t_seen_ns;     /* when it was last heard from (a message or bytes) */
    /* an empty push (every entry of this worker fell in other shards) that arrived before its
     * turn: the transport delivers a message without payload without asking on_header, so it
     * cannot be deferred; it is held here and counted in its turn */
    bool held;
    uint64_t held_bytes;
    struct gv_proto_iter_stats held_stats; /* layer_norms -> srv->held_norms (rank 0) or NULL */
    struct srv_peer *next;  /* in srv->peers */
};

enum srv_round_state {
    SRV_ROUND_WAIT_OPEN = 0, /* waiting for every worker to be synced and the update sends of the
                                previous round to complete (the buffers are borrowed by them) */
    SRV_ROUND_OPEN,          /* aggregating pushes, in worker-rank order */
    SRV_ROUND_WAIT_DECISION, /* every expected push is in or its worker dead: servers 1..S-1
                                have sent their STATS and wait for server 0's DECISION; server 0
                                waits for every other server's STATS */
};

enum srv_state {
    SRV_STARTING = 0, /* peers joining, model not seeded yet */
    SRV_RUNNING,
    SRV_ENDING,       /* BYE sent to the workers, waiting for them to leave */
    SRV_DONE,
    SRV_ABORTED,
};

/* A decision and, for Accordion, the per-tensor level (0 light, 1 heavy). */
struct srv_decision {
    uint64_t iter;      /* the iteration it applies to; UINT64_MAX: none */
    struct gv_proto_decision d;
    uint8_t *heavy;     /* uint8[n_tensors] (Accordion), else NULL */
};

/* Per-round aggregates of the workers' statistics. */
struct srv_agg {
    double g_ef, g_min, g_c;
    double compute_max, compress_max;
    double loss_sum;
    uint64_t samples;
    bool epoch_end;        /* worker 0's push carried layer norms */
    uint32_t n_layer_norms;
};

struct gv_server {
    struct gv_server_config cfg;
    const struct gv_job *job;
    const struct gv_cluster *cl;
    uint32_t rank, S, W;
    struct gv_ps_envelope env; /* this server on every link: role server, its rank and shard */
    struct gv_proto_caps caps;
    struct gv_tp_config tp_cfg;

    /* model and shard */
    char (*names)[24];
    size_t *numel;
    uint32_t n_tensors;
    struct gv_shard_map map;
    uint64_t lo, n;       /* shard [lo, lo + n) of the flat vector */
    uint64_t fingerprint;
    float *params;        /* float[n] */
    float *momentum;      /* float[n] */
    float *acc;           /* float[n]: the round's sum, then average, then the update values */
    uint8_t *rbuf;        /* receive buffer (one push at a time), then the update's indices */
    size_t rcap;

    /* transport */
    struct gv_tp *tp;
    struct gv_listener *listener;
    uint16_t port;
    char bind_str[300], advertise_str[300];
    struct gv_proto_arena arena;
    void *arena_buf;
    struct srv_peer *peers;    /* every connection */
    struct srv_peer **workers; /* [W], welcomed workers */
    struct srv_peer **servers; /* [S] on server 0 */
    struct srv_peer *coord;    /* servers 1..S-1 */
    uint32_t n_workers_in, n_servers_in;

    /* job state */
    enum srv_state state;
    gv_status_t result;
    char fail[320];
    uint64_t t_start_ns, t_first_round_ns, t_last_round_ns;
    bool seeded;
    uint64_t seed_got;    /* elements of the seed model received */

    /* round state */
    uint64_t iter;        /* the round in progress */
    enum srv_round_state round;
    uint32_t next_rank;   /* the next push to aggregate */
    bool round_dense;     /* a dense push arrived in this round */
    struct srv_decision dec_cur, dec_next;
    struct srv_agg agg;
    double *layer_norms;  /* [n_tensors], worker 0's epoch-end norms (Accordion) */
    double *held_norms;   /* [n_tensors], the same from worker 0's held empty push */
    uint64_t t_prev_all_ns; /* when the previous round's pushes were all in (server 0) */
    uint64_t round_recv, round_sent; /* bytes of the round so far */
    uint64_t rounds_done;
    uint64_t cf_changes;

    /* server 0 */
    struct gv_adapt *ctl;
    FILE *declog;
    double *layer_cf;     /* [n_tensors] scratch for Accordion decisions */

    struct gv_ps_bytes bytes;
    void *ctl_blob;       /* gv_server_state_sections: the controller's saved state */
    size_t ctl_blob_len;

    /* ---- round membership (server_round.c, docs/operations.md "dead workers") ---- */
    bool *expected;       /* [W] workers expected in this round (agreed: server 0 decides) */
    bool *arrived;        /* [W] their push was added here this round */
    uint8_t *memb;        /* [W] server 0: the DECISION's membership bytes (borrowed by the
                             sends until the next round); s > 0: the STATS payload, then the
                             DECISION's received membership */
    uint8_t *reports;     /* server 0: [S x W] the STATS membership of each server */
    bool *got_report;     /* server 0: [S] STATS of this round received */
    uint32_t n_reports;
    uint32_t n_avg;       /* the round's divisor: workers counted in the average */
    uint32_t n_stats;     /* server 0: pushes whose statistics reached the controller */
    bool *scratch;        /* [2W] server 0: the round's merged arrivals and deaths */
    bool settled;         /* the starting iteration is agreed by every server */

    /* ---- liveness and failures (server_ops.c) ---- */
    struct gv_liveness live; /* workers 0..W-1, servers W..W+S-1; only when peer_timeout > 0 */
    bool live_on;
    uint64_t t_tick_ns;   /* the last liveness tick (a long gap: this process stalled) */
    bool abort_requested; /* s > 0: asked server 0 to end the job, waiting for its ERROR */
    uint64_t abort_deadline;
    gv_status_t abort_status;
    bool stopped;         /* ended on request (signal or a peer's stop request) */
    bool refused;         /* a checkpoint was refused: the job cannot start */
    bool final_ok;        /* the state at the end is a consistent cut with server 0's */
    uint32_t n_dead;      /* workers declared dead */

    /* ---- checkpoints (server_ckpt.c) ---- */
    bool ckpt_on;
    uint64_t resumed_from;   /* iteration resumed from (0: fresh) */
    uint64_t ckpt_own;       /* the newest checkpoint found at start (0: none) */
    uint64_t ckpt_last_iter; /* last written (or resumed from) */
    uint64_t ckpt_written;
    pthread_t ckpt_th;
    atomic_int ckpt_busy;    /* 1 while the writer thread runs, 2 when it finished */
    bool ckpt_joinable;
    gv_status_t ckpt_status;
    uint64_t ckpt_iter, ckpt_t0;
    uint64_t state_iter;     /* gv_server_state_sections' "iteration" */
    struct gv_ckpt_section ckpt_sec[4];
    size_t ckpt_n;

    /* ---- metrics (server_metrics.c) ---- */
    struct gv_metrics *reg;
    struct gv_metrics_http *http;
    struct srv_metrics *mx;
    uint64_t t_prev_round_ns; /* previous round's end, for the round time */
};

/* server_peer.c: transport callbacks, handshake, model sync, sending helpers */
struct gv_tp_handler srv_handler(void);
gv_status_t srv_connect_coord(struct gv_server *srv, uint64_t deadline_ns);
void srv_peer_close(struct srv_peer *p);
/* Sends the initial (or resync) model of the shard and, when with_decision, DECISION(iter). */
gv_status_t srv_send_model(struct gv_server *srv, struct srv_peer *p, bool with_decision);
/* DECISION d; to a server (memb != NULL) the round membership goes first: W bytes, borrowed
 * until sent. */
gv_status_t srv_send_decision(struct gv_server *srv, struct srv_peer *p,
                              const struct srv_decision *d, enum gv_proto_msg_type type,
                              const uint8_t *memb);
void srv_sync_ready_workers(struct gv_server *srv);
/* Server 0: once every server joined, agrees the starting iteration (checkpoints) and tells
 * the servers; then the workers are synced. */
void srv_settle(struct gv_server *srv);
/* Ends the job with an error. Server 0 (or a server whose connection to server 0 is gone):
 * logs it once, tells every peer (ERROR), state ABORTED. Servers 1..S-1 ask server 0 to end
 * the job instead (server 0 decides, so every server stops at the same iteration) and abort by
 * themselves only if its answer does not come within the peer timeout. */
void srv_abort(struct gv_server *srv, gv_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Aborts at once. consistent: this server's state is the cut server 0 stops at (its final
 * checkpoint may be written). status GV_OK: stopped on request (ERROR code 0). */
void srv_abort_now(struct gv_server *srv, gv_status_t status, bool consistent, const char *text);
/* A stop on request (signal, a peer's stop): server 0 stops the job; others ask it to. */
void srv_stop(struct gv_server *srv, const char *why);
void srv_send_bye_all(struct gv_server *srv);
void srv_send_bye(struct gv_server *srv, struct srv_peer *p);

/* server_round.c: the round logic. A round completes in srv_round_maybe_decide (server 0,
 * once every server's aggregation is in) and srv_round_on_decision (the others); the workers
 * of a round are srv->expected, less the dead. */
void srv_round_try_open(struct gv_server *srv);
/* A worker of the round died: skip it if the aggregation was waiting for it. */
void srv_round_on_dead(struct gv_server *srv, struct srv_peer *p);
/* Server 0: STATS(iter) from server s with its membership bytes (already in reports). */
void srv_round_on_report(struct gv_server *srv, uint32_t s);
/* Server 0: completes the round once its aggregation and every server's STATS are in. */
void srv_round_maybe_decide(struct gv_server *srv);
/* on_header of a PUSH: GV_OK with the destination, GV_ERR_AGAIN (not its turn yet) or an error
 * (protocol violation: the connection is closed). */
gv_status_t srv_round_push_header(struct gv_server *srv, struct srv_peer *p,
                                  const struct gv_proto_msg *m, uint64_t payload_len,
                                  struct gv_iov *dst, int *cnt);
void srv_round_push_done(struct gv_server *srv, struct srv_peer *p, const struct gv_proto_msg *m,
                         uint64_t msg_bytes);
/* Servers 1..S-1: DECISION(iter + 1) from server 0 (its membership and Accordion bytes already
 * received). */
void srv_round_on_decision(struct gv_server *srv);
/* A worker said BYE. */
void srv_round_on_bye(struct gv_server *srv, struct srv_peer *p, uint64_t iteration);
void srv_decision_copy(struct gv_server *srv, struct srv_decision *dst,
                       const struct srv_decision *src);

/* server_ops.c: heartbeats, liveness, dead workers. */
gv_status_t srv_ops_init(struct gv_server *srv);
void srv_ops_cleanup(struct gv_server *srv);
/* Liveness index of a peer: workers 0..W-1, servers W + rank. */
static inline uint32_t srv_live_idx(const struct gv_server *srv, const struct srv_peer *p)
{
    if (p->kind == SRV_PEER_WORKER)
        return p->rank;
    return srv->W + (p->kind == SRV_PEER_COORD ? 0 : p->rank);
}
/* A peer joined (its clock starts) / said something (it is alive). */
void srv_ops_joined(struct gv_server *srv, struct srv_peer *p);
void srv_ops_seen(struct gv_server *srv, struct srv_peer *p);
/* Heartbeats, liveness, the abort-request deadline; returns the poll timeout in ms. */
int srv_ops_tick(struct gv_server *srv, uint64_t now);
/* Worker p is dead (why: for the log): the policy decides. */
void srv_worker_dead(struct gv_server *srv, struct srv_peer *p, const char *why);
/* Server s > 0: worker p is no longer in the job (server 0 dropped it). */
void srv_worker_dropped(struct gv_server *srv, struct srv_peer *p);

/* server_ckpt.c: checkpoints and resuming. */
/* At create: finds and loads the newest valid checkpoint (GV_OK with none: fresh start). */
gv_status_t srv_ckpt_init(struct gv_server *srv);
/* Loads exactly iteration iter (the agreed starting point) and retires newer files. */
gv_status_t srv_ckpt_resume_at(struct gv_server *srv, uint64_t iter);
/* After a round: starts a periodic checkpoint when one is due. */
void srv_ckpt_after_round(struct gv_server *srv);
/* Polls the writer thread; true while one runs (the next round waits). */
bool srv_ckpt_busy(struct gv_server *srv);
/* At the end of the run: waits for the writer, then writes the final checkpoint if due. */
void srv_ckpt_final(struct gv_server *srv);
void srv_ckpt_cleanup(struct gv_server *srv);

/* server_metrics.c */
gv_status_t srv_metrics_init(struct gv_server *srv);
void srv_metrics_cleanup(struct gv_server *srv);
/* After round `iter` completed (period: since the previous round, ns). */
void srv_metrics_round(struct gv_server *srv, uint64_t now);
void srv_metrics_tick(struct gv_server *srv, uint64_t now);
void srv_metrics_refused(struct gv_server *srv, const char *reason);
void srv_metrics_ckpt(struct gv_server *srv, uint64_t iter, double secs, bool ok);

#endif /* GV_SERVER_INTERNAL_H */
