/* srv.h: what server/'s files share privately. The server object is a set of parts,
 * each owned by one file, which alone writes it (the others may read it):
 *   shard   shard.c    the model's layout (nn/'s, or the workers' with --model external), the
 *                      shard map, the shard's parameters and momentum
 *   net     net.c      the transport, the peers and their links, every message sent
 *   end     end.c      how the job ends: aborts, stops, the result
 *   live    ops.c      heartbeats and the peers' liveness
 *   start   start.c    joining: the seed model, the agreed starting iteration, the first sync
 *   round   round.c    the round: aggregation, membership, on server 0 the controller's
 *                      decision
 *   pieces  piece.c    a dense round in pieces: each piece's turns, its step and its update
 *   down    update.c   the bounded downlink's residual; update.c also makes the optimizer
 *                      step and sends the update to the workers
 *   ckpt    ckpt.c     checkpoints and resuming
 *   replica replica.c  --optimizer caller: the workers' parameter checksums compared
 *   mx      metrics.c  the Prometheus registry and endpoint
 * Calls go one way, down these layers (docs/architecture.md draws them):
 *   server.c (create, the run loop) -> conn.c (the connection dispatch: the only entry into
 *   the round) -> start.c -> shard.c -> ckpt.c -> round.c -> piece.c -> replica.c -> update.c
 *   -> ops.c -> end.c -> net.c -> metrics.c.
 * What comes back up does so through callback tables: the transport's handler and the links'
 * on_idle (conn.c installs both). Tests may include this header. */
#ifndef GV_SRV_H
#define GV_SRV_H

#include "gv_server.h"

#include <pthread.h>
#include <stdatomic.h>

#define SRV_MAX_TENSORS 64
#define SRV_HDR_SLOTS 32 /* an update's pieces (up to GV_PS_MAX_PIECES) and a few more */
#define SRV_HDR_BYTES 1024
/* MODEL chunks: at most this many elements per message (1 GiB of floats). */
#define SRV_MODEL_CHUNK (256ull << 20)

/* ================================================================ peers (net.c) */

enum srv_peer_kind {
    SRV_PEER_NEW = 0, /* accepted, handshake running */
    SRV_PEER_WORKER,  /* a welcomed worker */
    SRV_PEER_SERVER,  /* server 0: a welcomed server 1..S-1 */
    SRV_PEER_COORD,   /* servers 1..S-1: our connection to server 0 */
};

struct srv_peer {
    struct gv_server *srv;
    struct gv_ps_link link;
    enum srv_peer_kind kind;
    enum gv_proto_role hello_role; /* NEW peers: the role their HELLO claimed */
    uint32_t rank;
    char name[96];              /* "worker 2 (127.0.0.1:40312)" */
    struct gv_ps_server_hs shs; /* server side of the handshake (NEW peers) */
    struct gv_ps_client_hs hs;  /* COORD: our client side */
    struct gv_ps_rx rx;         /* the header of the message being received (decoded once) */
    uint64_t t_accept_ns;
    uint64_t hello_iter;   /* SERVER peers: the newest checkpoint iteration its HELLO named */
    bool synced;           /* worker: initial model and decision sent (start.c) */
    bool bye;              /* said BYE */
    bool bye_sent;         /* we said BYE to it */
    bool welcome_due;      /* WORKER on servers 1..S-1: joined before server 0 welcomed
                              this server (the starting iteration unknown): WELCOME then */
    bool close_after_send; /* a REFUSE or an eviction is in flight: close when it has left */
    bool closed;           /* on_close ran */
    bool deferred;         /* WORKER: its push waits for its turn, unread; its heartbeats wait
                              behind it, so its silence is not held against it meanwhile */
    bool awaiting_layout;  /* --model external: an authenticated worker whose LAYOUT is due */
    bool layout_ok;        /* its layout equals the shard's (it may take its slot) */
    uint8_t *layout_buf;   /* the LAYOUT's payload while it arrives */
    uint64_t layout_len;
    struct gv_layout held_layout; /* a worker > 0's layout, until worker 0's is the model's */
    bool held;
    bool reported;                /* WORKER: it told us it failed (ERROR): the job's root cause */
    uint64_t seen_bytes;          /* conn bytes_recv at the last liveness tick (ops.c) */
    uint64_t t_seen_ns;           /* when it was last heard from (a message or bytes) */
    struct srv_peer_list *list;   /* net.pending (NEW) or net.joined (the others) */
    struct srv_peer *prev, *next; /* in that list */
};

/* Peer records, doubly linked: a record leaves its list (and is freed) in O(1). */
struct srv_peer_list {
    struct srv_peer *head, *tail;
    uint32_t n;
};

struct srv_net {
    struct gv_tp *tp;
    struct gv_listener *listener;
    uint16_t port;
    char bind_str[300], advertise_str[300];
    struct gv_proto_arena arena;
    void *arena_buf;
    /* A record lives as long as its connection, except a joined peer's, which keeps its slot
     * (and so its record) until the server is destroyed: at most W + S records outlive their
     * connection, so memory and the per-turn sweeps are bounded by the connections open now.
     * pending: connections still in the handshake (or refused, their REFUSE leaving), in
     * accept order, so the handshake deadline is checked from the head only; joined: workers,
     * servers and (servers 1..S-1) the connection to server 0. */
    struct srv_peer_list pending, joined;
    uint64_t gone_recv, gone_sent; /* bytes of the records already freed (metrics) */
    struct srv_peer **workers;     /* [W], welcomed workers */
    struct srv_peer **servers;     /* [S] on server 0 */
    struct srv_peer *coord;        /* servers 1..S-1 */
    uint32_t n_workers_in, n_servers_in;
};

/* The shard this server holds (shard.c builds it; round.c steps it; ckpt.c saves and loads).
 * With --model external it is built when the first worker's layout arrives (ready). */
struct srv_shard {
    bool ready;
    struct gv_layout layout;
    char layout_from[96]; /* who the layout came from ("nn/'s mlp", "worker 1 (...)") */
    uint32_t n_tensors;
    struct gv_shard_map map;
    uint64_t lo, n;            /* shard [lo, lo + n) of the flat vector */
    uint64_t fingerprint;      /* the job's (gv_job_fingerprint): every peer must have it */
    uint64_t ckpt_fingerprint; /* its state's (gv_job_state_fingerprint): checkpoints' identity */
    float *params;             /* float[n] */
    float *momentum;           /* float[n] */
};

/* ================================================================ how the job ends (end.c) */

enum srv_state {
    SRV_STARTING = 0, /* peers joining, model not seeded yet */
    SRV_RUNNING,
    SRV_ENDING, /* BYE sent to the workers, waiting for them to leave */
    SRV_DONE,
    SRV_ABORTED,
};

struct srv_end {
    enum srv_state state;
    gv_status_t result;
    char fail[320];
    bool abort_requested; /* s > 0: asked server 0 to end the job, waiting for its ERROR */
    uint64_t abort_deadline;
    gv_status_t abort_status;
    bool stopped;  /* ended on request (signal or a peer's stop request) */
    bool refused;  /* a checkpoint was refused: the job cannot start */
    bool final_ok; /* the state at the end is a consistent cut with server 0's */
    bool answered; /* ENDING: the workers were told how the job ended (after the final
                      checkpoint's verdict) */
};

/* ================================================================ liveness (ops.c) */

struct srv_live {
    struct gv_liveness tracker; /* workers 0..W-1, servers W..W+S-1; when peer_timeout > 0 */
    bool on;
    uint64_t t_tick_ns; /* the last tick (a long gap: this process stalled) */
};

/* ================================================================ joining (start.c) */

struct srv_start {
    uint64_t t_start_ns;
    bool seeded;       /* the shard holds a model (worker 0's seed, or a checkpoint) */
    uint64_t seed_got; /* elements of the seed model received */
    bool settled;      /* the starting iteration is agreed by every server */
};

/* ================================================================ the round (round.c) */

enum srv_round_phase {
    SRV_ROUND_WAIT_OPEN = 0, /* waiting for every worker to be synced and the update sends of the
                                previous round to complete (the buffers are borrowed by them) */
    SRV_ROUND_OPEN,          /* aggregating pushes, in worker-rank order */
    SRV_ROUND_WAIT_DECISION, /* every expected push is in or its worker dead: servers 1..S-1
                                have sent their STATS and wait for server 0's DECISION; server 0
                                waits for every other server's STATS */
};

/* What a round call did: the caller (conn.c) finishes a completed round (metrics, checkpoint,
 * the next round). */
enum srv_round_event {
    SRV_ROUND_BUSY = 0, /* nothing more to do now */
    SRV_ROUND_DONE,     /* the round completed: iter is the next one */
};

/* A decision and, for Accordion, the per-tensor level (0 light, 1 heavy). The level is
 * adapt/'s: the wire's enum appears only where a message is encoded or decoded. */
struct srv_decision {
    uint64_t iter; /* the iteration it applies to; UINT64_MAX: none */
    struct gv_ps_decision d;
    uint8_t *heavy; /* uint8[n_tensors] (Accordion), else NULL */
};

/* Per-round aggregates of the workers' statistics (server 0). */
struct srv_agg {
    double g_ef, g_min, g_c;
    double compute_max, compress_max;
    double loss_sum;
    double lr_max;    /* the largest learning rate a worker's own optimizer reported (0: none) */
    double pause_max; /* the longest time a worker spent outside training (an evaluation) */
    uint64_t samples;
    bool epoch_end; /* worker 0's push carried layer norms */
    uint32_t n_layer_norms;
};

/* An empty push (every entry of this worker fell in other shards) that arrived before its turn:
 * the transport delivers a message without payload without asking on_header, so it cannot be
 * deferred; it is held and counted in its turn. */
struct srv_held {
    bool on;
    uint64_t bytes;
    struct gv_proto_iter_stats stats; /* layer_norms -> round.held_norms (rank 0) or NULL */
};

struct srv_round {
    uint64_t iter; /* the round in progress */
    enum srv_round_phase phase;
    uint32_t next_rank; /* the next push to aggregate */
    struct srv_decision cur, next;
    struct srv_agg agg;
    float *acc;    /* float[n]: the round's sum, then average, then the update values */
    uint8_t *rbuf; /* receive buffer (one push at a time), then the update's indices */
    size_t rcap;
    double *layer_norms;   /* [n_tensors], worker 0's epoch-end norms (Accordion) */
    double *held_norms;    /* [n_tensors], the same from worker 0's held empty push */
    struct srv_held *held; /* [W] */
    bool *resync_req;      /* [W] the worker asked for a full model (checksum mismatch) */
    uint64_t recv, sent;   /* bytes of the round so far */
    uint64_t done;         /* rounds completed */
    uint64_t cf_changes;
    struct gv_ps_bytes bytes;
    uint64_t t_first_ns, t_last_ns; /* the first round's start, the last one's end */
    uint64_t t_prev_all_ns;         /* server 0: when the previous round's pushes were all in */
    uint64_t t_agg_ns, t_dec_ns;    /* timeline: the round's first push, its aggregation done */

    /* membership (docs/operations.md "dead workers"): the round alone decides it */
    bool *expected; /* [W] workers expected in this round (agreed: server 0 decides) */
    bool *arrived;  /* [W] their push was added here this round */
    bool *dead;     /* [W] declared dead, or dropped by server 0: out of the job */
    uint32_t n_dead;
    uint8_t *memb;    /* [W] server 0: the DECISION's membership bytes (borrowed by the
                         sends until the next round); s > 0: the STATS payload, then the
                         DECISION's received membership */
    uint8_t *reports; /* server 0: [S x W] the STATS membership of each server */
    /* server 0, the checkpoint of this round's iteration: the processes' reports (in the STATS
     * and the workers' pushes), the verdict that goes with the decision */
    uint64_t *ck_srv_iter;  /* [S] the iteration each server reported (0: none) */
    gv_status_t *ck_srv_st; /* [S] and how its write went */
    int32_t ck_wk_bad;      /* a worker's failed report this round (GV_OK: none)... */
    uint32_t ck_wk_rank;    /* ...from this worker */
    char ck_why[200];       /* the verdict's cause (for the log) */
    bool *got_report;       /* server 0: [S] STATS of this round received */
    uint32_t n_reports;
    uint32_t n_avg;   /* the round's divisor: workers counted in the average */
    uint32_t n_stats; /* server 0: pushes whose statistics reached the controller */
    bool *scratch;    /* [2W] server 0: the round's merged arrivals and deaths */

    /* server 0: the controller */
    struct gv_adapt *ctl;
    FILE *declog;
    FILE *obstrace;   /* --obs-trace */
    double *layer_cf; /* [n_tensors] scratch for Accordion decisions */
};

/* ================================================================ pieces (piece.c) */

/* A dense f32 round travels in pieces of the shard (gv_job_pieces; one piece when the shard is
 * small or --piece-size is 0): each piece is aggregated in worker-rank order on its own (the
 * pushes of several pieces interleave on the connections), and under the abort policy stepped
 * and sent back as soon as every member's push of it is in, while later pieces still arrive.
 * The first push of a piece lands in the accumulator as it is (no zeroing, no copy); pushes in
 * between are added from rbuf (each piece has its own region of rbuf); the last one stays in rbuf
 * for the finishing pass, which sums, averages, steps and checksums block by block. */
struct srv_piece {
    uint32_t next;  /* the worker rank whose push of this piece is added next (W: none left) */
    uint32_t added; /* pushes in the accumulator: 1 means it holds the first push raw (0 + x
                       is applied when the next one is added, or in the finishing pass) */
    bool x_pending; /* the last push waits in rbuf for the finishing pass */
    bool complete;  /* every member's push of it is in */
    bool finished;  /* stepped; its update sent, unless it is the round's last */
    uint32_t divisor;
};
struct srv_pieces {
    bool on; /* the round in progress travels in pieces */
    struct gv_ps_pieces lay;
    struct srv_piece p[GV_PS_MAX_PIECES];
    uint32_t *got; /* [W] pieces received from each worker this round */
    uint32_t n_complete;
    uint64_t ck_sum; /* the checksum's blocks stepped so far */
    float lr;
    /* the round's last piece, stepped: its update leaves with the decision (piece_end) */
    int32_t last;
    struct gv_proto_msg last_msg;
    struct gv_iov last_pl[2];
    int last_npl;
};

/* ================================================================ the downlink (update.c) */

/* The bounded downlink (--downlink topk): server-side error feedback. The averaged aggregate
 * plus this residual is cut to the k of the CF in force per unit (a piece of a tensor in the
 * shard, or the whole shard with --topk-scope model); what is not sent stays in the residual,
 * so every worker applies the same sparse update and nothing is lost, only delayed. */
struct srv_down {
    const struct gv_job *job; /* its options (--downlink-mult); outlives this */
    struct gv_cmp *cmp;       /* top-k, the job's fp16 mode */
    uint32_t n_units;
    uint64_t *unit_off;    /* [n_units + 1] within the shard */
    uint32_t *unit_tensor; /* [n_units] the tensor of each unit (Accordion's per-layer CF) */
    struct gv_ef **ef;     /* [n_units], residuals are views into resid */
    float *resid;          /* float[n]: the server's residual (part of its checkpoints) */
    struct gv_sparse out;  /* one unit's selection */
    uint64_t n;
};

/* ================================================================ checkpoints (ckpt.c) */

/* The final checkpoint's coordination, once the job has ended at a point every server shares:
 * each server writes it (pending), servers 1..S-1 report to server 0 (STATS without payload),
 * server 0 commits it only when every server wrote its part and says so (DECISION without
 * payload); the workers are answered after that (docs/operations.md, section 5). */
enum srv_final {
    SRV_FINAL_NONE = 0, /* not started */
    SRV_FINAL_WRITING,  /* this server's part is being written */
    SRV_FINAL_WAITING,  /* server 0: the others' reports; servers 1..S-1: server 0's verdict */
    SRV_FINAL_DECIDED,  /* committed or dropped (verdict), or nothing to write */
};

struct srv_ckpt {
    bool on;
    uint64_t resumed_from; /* iteration resumed from (0: fresh) */
    uint64_t own;          /* the newest checkpoint found at start (0: none) */
    uint64_t last_iter;    /* last written (or resumed from) */
    uint64_t written;
    /* coordination: a checkpoint is written pending and counts once server 0 has said that
     * every process wrote its part (the verdict travels with the next decision) */
    uint64_t pend_iter;      /* this server's pending checkpoint (0: none) */
    gv_status_t pend_status; /* how its write went */
    uint64_t committed;      /* the newest checkpoint every process wrote (resumed from counts) */
    bool lost;               /* the job is not resumable from after `committed` right now */
    enum srv_final final;
    uint64_t final_iter, final_deadline;
    gv_status_t final_verdict; /* DECIDED: GV_OK committed (or nothing to write), else why not */
    gv_status_t *final_rep;    /* server 0: [S] the servers' reports on the final checkpoint... */
    uint64_t *final_rep_iter;  /* ...[S] and the iteration each is about (0: none yet) */
    pthread_t th;
    atomic_int busy; /* 1 while the writer thread runs, 2 when it finished */
    bool joinable;
    gv_status_t status;
    uint64_t iter, t0;
    uint64_t state_iter; /* gv_server_state_sections' "iteration" */
    struct gv_ckpt_section sec[GV_SERVER_STATE_SECTIONS];
    size_t n_sec;
    void *ctl_blob; /* the controller's saved state */
    size_t ctl_blob_len;
};

/* ================================================================ replicas (replica.c) */

/* --optimizer caller: every push carries the checksum of its worker's parameters of this
 * shard; within a round every worker's must be the same. */
struct srv_replica {
    uint64_t iter;     /* the round of ck */
    uint64_t ck;       /* the first checksum reported in that round */
    uint32_t from;     /* by this worker */
    bool have;         /* ck is set for iter */
    uint64_t compared; /* checksums compared */
};

/* ================================================================ the server */

struct gv_server {
    struct gv_server_config cfg;
    const struct gv_job *job;
    const struct gv_cluster *cl;
    uint32_t rank, S, W;
    struct gv_ps_envelope env; /* this server on every link: role server, its rank and shard */
    struct gv_proto_caps caps;
    struct gv_tp_config tp_cfg;
    struct srv_shard shard;
    struct srv_net net;
    struct srv_end end;
    struct srv_live live;
    struct srv_start start;
    struct srv_round round;
    struct srv_pieces pieces;
    struct srv_down *down; /* NULL: dense methods, or --downlink union */
    struct srv_ckpt ckpt;
    struct srv_replica replica;
    struct gv_metrics *reg;
    struct gv_metrics_http *http;
    struct srv_metrics *mx;
};

/* ================================================================ conn.c: the dispatch */

struct gv_tp_handler srv_conn_handler(void);
/* Servers 1..S-1, from every loop turn during start-up: once server 0's address is known,
 * starts the connection to it (without waiting: the workers are answered meanwhile) and queues
 * the HELLO; its welcome and first decision arrive through the dispatch. */
void srv_conn_coord(struct gv_server *srv);
/* Liveness found worker p silent past the timeout (why: for the log). */
void srv_conn_worker_silent(struct gv_server *srv, struct srv_peer *p, const char *why);
/* The loop's turn: a round waiting to open (a checkpoint that just finished) may open. */
void srv_conn_poll_round(struct gv_server *srv);

/* ================================================================ start.c: joining */

/* Server 0: once every server joined, agrees the starting iteration (checkpoints) and tells
 * the servers; then the workers are synced. */
void srv_start_settle(struct gv_server *srv);
/* Servers 1..S-1: server 0's first DECISION arrived (the round holds it): the starting point is
 * agreed; the workers are synced. */
void srv_start_coord_decided(struct gv_server *srv);
/* Servers 1..S-1: server 0 welcomed this server (its fingerprint is checked, the starting
 * iteration loaded). */
void srv_start_coord_welcomed(struct gv_server *srv, struct srv_peer *p);
/* A worker or server authenticated: its slot, then WELCOME (workers) or, on server 0, the wait
 * for every server before the starting iteration is agreed. */
void srv_start_joined(struct gv_server *srv, struct srv_peer *p);
/* Worker 0's seed: where a MODEL chunk's payload goes (on_header), and its arrival (on_msg). */
gv_status_t srv_start_seed_header(struct gv_server *srv, struct srv_peer *p,
                                  const struct gv_proto_msg *m, uint64_t payload_len,
                                  struct gv_iov *dst, int *cnt);
void srv_start_seed_done(struct gv_server *srv, const struct gv_proto_msg *m);
/* Sends the model and the decision in force to every joined worker not synced yet, once the
 * shard holds a model and the starting iteration is agreed. */
void srv_start_sync_workers(struct gv_server *srv);
/* The start-up deadline: names whoever is missing. */
void srv_start_check_deadline(struct gv_server *srv, uint64_t now);

/* The layout (--model external): where a worker's LAYOUT payload goes (on_header), and the
 * layout itself (on_msg): adopted when it is the first, else compared; then the worker joins. */
gv_status_t srv_start_layout_header(struct gv_server *srv, struct srv_peer *p,
                                    const struct gv_proto_msg *m, uint64_t payload_len,
                                    struct gv_iov *dst, int *cnt);
void srv_start_layout(struct gv_server *srv, struct srv_peer *p, const struct gv_proto_msg *m);

/* ================================================================ shard.c: the shard */

/* At create: nn/'s layout of the job's model and the shard built from it; with --model
 * external nothing yet (the first worker's layout comes through srv_shard_adopt). */
gv_status_t srv_shard_init(struct gv_server *srv);
/* --model external: builds the shard from a worker's layout (taken over: l is left empty),
 * then the round's buffers (and server 0's controller). from: who sent it. GV_ERR_INVAL (a
 * layout the servers cannot shard, logged), GV_ERR_NOMEM. */
gv_status_t srv_shard_adopt(struct gv_server *srv, struct gv_layout *l, const char *from);
void srv_shard_cleanup(struct gv_server *srv);

/* ================================================================ ckpt.c: checkpoints */

/* At create: finds and loads the newest valid checkpoint (GV_OK with none: fresh start). */
gv_status_t srv_ckpt_init(struct gv_server *srv);
/* Loads exactly iteration iter (the agreed starting point) and retires newer files. */
gv_status_t srv_ckpt_resume_at(struct gv_server *srv, uint64_t iter);
/* After a round: starts a periodic checkpoint when one is due. */
void srv_ckpt_after_round(struct gv_server *srv);
/* Polls the writer thread; true while one runs (the next round waits). */
bool srv_ckpt_busy(struct gv_server *srv);
/* The final checkpoint (srv_final above), step by step from the loop: true once it is decided
 * (or there is none to write). The verdict is in ckpt.final_verdict. */
bool srv_ckpt_final_tick(struct gv_server *srv);
/* A report (server 0, from server p) or server 0's verdict (servers 1..S-1) on the final
 * checkpoint: a STATS or a DECISION without payload. */
void srv_ckpt_final_msg(struct gv_server *srv, struct srv_peer *p, const struct gv_proto_msg *m);
void srv_ckpt_cleanup(struct gv_server *srv);

/* ================================================================ round.c: the round */

gv_status_t srv_round_init(struct gv_server *srv);
void srv_round_cleanup(struct gv_server *srv);
/* Opens the next round when every expected worker is synced and the previous update has left;
 * `hold` (a checkpoint being written) keeps it closed. */
enum srv_round_event srv_round_try_open(struct gv_server *srv, bool hold);
/* on_header of a PUSH: GV_OK with the destination, GV_ERR_AGAIN (not its turn yet) or an error
 * (protocol violation: the connection is closed). */
gv_status_t srv_round_push_header(struct gv_server *srv, struct srv_peer *p,
                                  const struct gv_proto_msg *m, uint64_t payload_len,
                                  struct gv_iov *dst, int *cnt);
enum srv_round_event srv_round_push_done(struct gv_server *srv, struct srv_peer *p,
                                         const struct gv_proto_msg *m, uint64_t msg_bytes);
/* Servers 1..S-1: where a DECISION's payload goes (the membership, Accordion's levels). */
gv_status_t srv_round_decision_header(struct gv_server *srv, const struct gv_proto_msg *m,
                                      struct gv_iov *dst, int *cnt);
/* Server 0: where server p's STATS payload (its membership bytes) goes. */
gv_status_t srv_round_stats_header(struct gv_server *srv, const struct srv_peer *p,
                                   const struct gv_proto_msg *m, struct gv_iov *dst, int *cnt);
/* Server 0: STATS(iter) from server p, its membership bytes received. */
enum srv_round_event srv_round_on_report(struct gv_server *srv, const struct srv_peer *p,
                                         const struct gv_proto_msg *m);
/* Servers 1..S-1: DECISION from server 0, its membership and Accordion bytes received: the
 * first one starts the job (the decision and the workers of the starting iteration), then
 * DECISION(iter + 1) completes the round. */
enum srv_round_event srv_round_on_decision(struct gv_server *srv, const struct gv_proto_msg *m);
/* Worker p is dead (why: for the log): the dead-worker policy decides between an abort and the
 * job going on without it. */
enum srv_round_event srv_round_worker_dead(struct gv_server *srv, struct srv_peer *p,
                                           const char *why, bool hold);
/* A worker asked for a full model (its checksum differed): it comes with the next update. */
void srv_round_resync(struct gv_server *srv, struct srv_peer *p);
/* A worker said BYE. */
void srv_round_on_bye(struct gv_server *srv, struct srv_peer *p, uint64_t iteration);
/* Whether worker w is in the job (expected and not dead). */
static inline bool srv_round_member(const struct gv_server *srv, uint32_t w)
{
    return srv->round.expected[w] && !srv->round.dead[w];
}
/* The membership decision of a round (pure; tests/server/test_round_policy.c). expected,
 * arrived, dead: bool[n] over workers. Under ABORT any dead expected worker aborts. Under
 * CONTINUE the round completes once every expected worker has either arrived or died,
 * averaging over the arrivals (a worker that sent its gradient and then died still counts),
 * and aborts if fewer than min_workers (>= 1) arrived (ABORT) or would be left for the next
 * round (TOO_FEW; iter names the round in its reason). */
enum srv_memb_action {
    SRV_MEMB_WAIT = 0,     /* gradients still expected from live workers */
    SRV_MEMB_COMPLETE = 1, /* aggregate now, averaging over n_average workers */
    SRV_MEMB_ABORT = 2,    /* stop the job; reason says why */
    SRV_MEMB_TOO_FEW = 3,  /* stop the job: fewer than min_workers left for the next round */
};
struct srv_memb_decision {
    enum srv_memb_action action;
    uint32_t n_average; /* COMPLETE: how many gradients to average over */
    uint32_t n_missing; /* expected workers that are dead and did not arrive */
    uint32_t n_next;    /* COMPLETE: workers expected in the next round */
    char reason[160];   /* ABORT: for the log; COMPLETE with missing workers: which */
};
void srv_memb_decide(enum gv_dead_policy policy, uint32_t min_workers, uint64_t iter, uint32_t n,
                     const bool *expected, const bool *arrived, const bool *dead,
                     struct srv_memb_decision *d);

/* round.c, server 0: the controller's decision in force into round.cur (at create, after
 * loading a checkpoint). */
gv_status_t srv_decide_load(struct gv_server *srv);

/* ================================================================ piece.c: pieces */

gv_status_t srv_piece_init(struct gv_server *srv);
void srv_piece_cleanup(struct gv_server *srv);
/* At a round's opening: whether it travels in pieces (a dense f32 round), the turns reset. */
void srv_piece_open(struct gv_server *srv);
/* on_header of a PUSH of a round in pieces: GV_OK with the destination, GV_ERR_AGAIN (not its
 * turn for that piece) or GV_ERR_PROTO (logged). */
/* Where the payload of push m (a piece) landed: the accumulator for its piece's first push,
 * else the piece's region of rbuf. */
const uint8_t *srv_piece_landed(const struct gv_server *srv, const struct gv_proto_msg *m);
gv_status_t srv_piece_push_header(struct gv_server *srv, struct srv_peer *p,
                                  const struct gv_proto_msg *m, uint64_t payload_len,
                                  struct gv_iov *dst, int *cnt);
/* The piece of worker p landed: added, the piece's turn passed on, the piece stepped and sent
 * when it completes (abort policy). *whole: that was the worker's last piece. GV_ERR_PROTO when
 * the round was aborted. */
gv_status_t srv_piece_push_done(struct gv_server *srv, struct srv_peer *p,
                                const struct gv_proto_msg *m, bool *whole);
/* Worker w left the round: the turns it held pass on. */
void srv_piece_member_gone(struct gv_server *srv, uint32_t w);
static inline bool srv_piece_all_in(const struct gv_server *srv)
{
    return srv->pieces.n_complete == srv->pieces.lay.np;
}
/* The round's end (its decision taken, n_avg known): pieces not stepped yet are (the continue
 * policy), the last one leaves with the decision and the checksum; SRV_ROUND_DONE. */
enum srv_round_event srv_piece_end(struct gv_server *srv);

/* ================================================================ replica.c */

/* --optimizer caller: a push's replica checksum (0: not computed) against the round's first;
 * a difference aborts the job naming both workers (their optimizers diverged). */
void srv_replica_check(struct gv_server *srv, const struct srv_peer *p,
                       const struct gv_proto_msg *m);

/* ================================================================ update.c: the downlink */

/* The downlink's state for shard `shard` of map under job (pure: the tests' reference uses it
 * too); *d_p NULL when the job's rounds send no compressed update (dense methods, --downlink
 * union). GV_ERR_NOMEM, the compressor's errors. */
gv_status_t srv_down_create(const struct gv_job *job, const struct gv_shard_map *map,
                            uint32_t shard, struct srv_down **d_p);
void srv_down_destroy(struct srv_down *d);
/* acc (float[n], the round's averaged aggregate) becomes what is sent and applied: plus the
 * residual, cut per unit to the k of its CF (d's cf_send; Accordion: the tensor's level from
 * heavy[]); the residual keeps the rest, bit for bit (sent + residual == acc + old residual).
 * A dense decision sends acc plus the whole residual and empties it. iter seeds nothing (top-k)
 * but is passed on. */
gv_status_t srv_down_apply(struct srv_down *d, float *acc, const struct gv_ps_decision *dec,
                           const uint8_t *heavy, bool accordion, uint64_t iter);
/* A dense round's share of the residual: acc[i] += resid[i] over [a, b) of the shard (the
 * caller has averaged acc there); srv_down_flush empties the residual once the round sent it. */
void srv_down_dense_add(const struct srv_down *d, float *acc, uint64_t a, uint64_t b);
void srv_down_flush(struct srv_down *d);
/* The optimizer step on the shard with round.acc (averaged, then cut by the downlink) and the
 * update to every worker in the job; the round is then complete (SRV_ROUND_DONE) unless the
 * job had to abort. Rounds in pieces (piece.c) step and send piece by piece instead. */
enum srv_round_event srv_update_apply(struct gv_server *srv);
/* Sends update m (payload pl[npl], borrowed until the sends complete) to every worker in the
 * job: a piece carries only lr (its decision's level NONE); the final one the next decision
 * with lr, each worker's resync flag, and the full model after it where one is due. Aborts the
 * job and returns an error when a send fails. */
gv_status_t srv_update_send(struct gv_server *srv, struct gv_proto_msg *m, const struct gv_iov *pl,
                            int npl, float lr, bool final);
/* The round's update has left: the bytes counted, the next decision in force, the next
 * iteration (SRV_ROUND_DONE). */
enum srv_round_event srv_update_done(struct gv_server *srv);

/* ================================================================ ops.c: liveness */

gv_status_t srv_ops_init(struct gv_server *srv);
void srv_ops_cleanup(struct gv_server *srv);
/* Liveness index of a peer: workers 0..W-1, servers W + rank. */
static inline uint32_t srv_live_idx(const struct gv_server *srv, const struct srv_peer *p)
{
    if (p->kind == SRV_PEER_WORKER)
        return p->rank;
    return srv->W + (p->kind == SRV_PEER_COORD ? 0 : p->rank);
}
/* A peer joined (its clock starts) / said something (it is alive) / is gone (no timeout). */
void srv_ops_joined(struct gv_server *srv, struct srv_peer *p);
void srv_ops_seen(struct gv_server *srv, struct srv_peer *p);
void srv_ops_forget(struct gv_server *srv, struct srv_peer *p, const char *why);
/* Heartbeats and liveness; a silent server ends the job here, silent workers come back in
 * silent[cap] (*n_p of them) for the round's policy. Returns the poll timeout in ms. */
int srv_ops_tick(struct gv_server *srv, uint64_t now, struct srv_peer **silent, size_t cap,
                 size_t *n_p);

/* ================================================================ end.c: how the job ends */

/* Ends the job with an error. Server 0 (or a server whose connection to server 0 is gone):
 * logs it once, tells every peer (ERROR), state ABORTED. Servers 1..S-1 ask server 0 to end
 * the job instead (server 0 decides, so every server stops at the same iteration) and abort by
 * themselves only if its answer does not come within the peer timeout (srv_end_tick). */
void srv_abort(struct gv_server *srv, gv_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Aborts at once. consistent: this server's state is the cut server 0 stops at (its final
 * checkpoint may be written). status GV_OK: stopped on request (ERROR code 0). */
void srv_abort_now(struct gv_server *srv, gv_status_t status, bool consistent, const char *text);
/* A stop on request (signal, a peer's stop): server 0 stops the job; others ask it to. */
void srv_stop(struct gv_server *srv, const char *why);
/* The job ends well at round.iter: every iteration is done, or worker 0 stopped it (its
 * target reached). Server 0 decides it (an abort or a stop asked for afterwards changes
 * nothing) and says BYE to the other servers; every server says BYE to its workers (the
 * answer to theirs, or instead of the next update) and lets their deferred pushes drain. */
void srv_end_done(struct gv_server *srv, const char *why);
/* ENDING, once the final checkpoint is decided: every worker is told how the job ended (BYE,
 * or ERROR(GV_ERR_CKPT) when the final checkpoint could not be committed). */
void srv_end_answer(struct gv_server *srv, gv_status_t verdict);
/* Whether this server is at a consistent cut with server 0 (not waiting for its decision). */
bool srv_end_at_cut(const struct gv_server *srv);
/* The deadline of an abort request to server 0. */
void srv_end_tick(struct gv_server *srv, uint64_t now);
static inline bool srv_live(const struct gv_server *srv)
{
    return srv->end.state == SRV_STARTING || srv->end.state == SRV_RUNNING;
}
static inline bool srv_over(const struct gv_server *srv)
{
    return srv->end.state == SRV_ABORTED || srv->end.state == SRV_DONE;
}

/* ================================================================ net.c: peers and sending */

gv_status_t srv_net_init(struct gv_server *srv);
/* Creates the transport (handler: conn.c's) and listens; publishes the advertised address. */
gv_status_t srv_net_listen(struct gv_server *srv, const struct gv_tp_handler *h);
/* Closes the transport (on_close marks the peers) and frees every peer. */
void srv_net_cleanup(struct gv_server *srv);
/* A record for connection c (on_idle: the link's callback, conn.c's). NULL: out of memory.
 * A NEW peer goes to net.pending, a COORD to net.joined. */
struct srv_peer *srv_peer_new(struct gv_server *srv, struct gv_conn *c, enum srv_peer_kind kind,
                              void (*on_idle)(struct gv_ps_link *l, void *arg));
/* A NEW peer took a slot as kind (WORKER or SERVER): it moves to net.joined. */
void srv_peer_joined(struct gv_server *srv, struct srv_peer *p, enum srv_peer_kind kind);
/* Frees p if nothing refers to it any more: its connection has closed (on_close ran, so its
 * sends' callbacks have fired) and it holds no slot (a NEW peer). Returns whether it did. */
bool srv_peer_release(struct gv_server *srv, struct srv_peer *p);
/* Closes p's connection (on_close follows at once; a NEW peer's record is then freed: the
 * caller must not use p afterwards). */
void srv_peer_close(struct srv_peer *p);
/* Refuses a connection that has not joined: REFUSE, then close once it is sent. */
void srv_peer_refuse(struct srv_peer *p, enum gv_proto_refuse code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Sends out (a REFUSE) and closes p once it has left. */
void srv_peer_send_close(struct srv_peer *p, const struct gv_proto_msg *out);
gv_status_t srv_send_welcome(struct gv_server *srv, struct srv_peer *p, uint64_t iter);
/* DECISION d; to a server (memb != NULL) the round membership goes first: W bytes, borrowed
 * until sent. */
gv_status_t srv_send_decision(struct gv_server *srv, struct srv_peer *p,
                              const struct srv_decision *d, const uint8_t *memb);
/* The shard's parameters (with their checksum) and momentum at iteration iter, in chunks; the
 * bytes sent are added to *bytes_p. */
gv_status_t srv_send_model(struct gv_server *srv, struct srv_peer *p, uint64_t iter,
                           uint64_t *bytes_p);
void srv_send_bye(struct gv_server *srv, struct srv_peer *p, uint64_t iteration);
/* Every welcomed worker is told the job is over (those that said BYE get it as the answer). */
void srv_send_bye_all(struct gv_server *srv, uint64_t iteration);
/* ERROR(code, text) at iteration iter to every joined peer. */
void srv_send_error_all(struct gv_server *srv, uint64_t iter, gv_status_t code, const char *text);
/* Tells worker p why it is out of the job (it may be alive: hung, or cut off from this server
 * only), then closes its connection once that has left. */
void srv_send_evict(struct gv_server *srv, struct srv_peer *p, uint64_t iter, const char *text);
/* A HEARTBEAT when the link has been idle for the interval. */
void srv_send_heartbeat(struct gv_server *srv, struct srv_peer *p, uint64_t iter, uint64_t now);
/* The final checkpoint: a server's report to server 0 (a STATS without payload), server 0's
 * verdict to a server (a DECISION without payload): iteration and status (GV_OK: written /
 * committed). */
void srv_send_ckpt_report(struct gv_server *srv, struct srv_peer *p, uint64_t iter,
                          gv_status_t status);
void srv_send_ckpt_verdict(struct gv_server *srv, struct srv_peer *p, uint64_t iter,
                           gv_status_t status);
/* ERROR(code, text) at iteration iter to every joined worker (not the servers). */
void srv_send_error_workers(struct gv_server *srv, uint64_t iter, gv_status_t code,
                            const char *text);
/* Whether every connection's sends have completed (or it is closed). */
bool srv_net_idle(const struct gv_server *srv);
/* The connection to server 0 is up and welcomed. */
bool srv_net_coord_alive(const struct gv_server *srv);

/* ================================================================ metrics.c */

gv_status_t srv_metrics_init(struct gv_server *srv);
void srv_metrics_cleanup(struct gv_server *srv);
/* After a round completed (now: its end). */
void srv_metrics_round(struct gv_server *srv, uint64_t now);
void srv_metrics_tick(struct gv_server *srv, uint64_t now);
void srv_metrics_refused(struct gv_server *srv, const char *reason);
void srv_metrics_ckpt(struct gv_server *srv, uint64_t iter, double secs, bool ok);

#endif /* GV_SRV_H */
