/* wk.h: the worker runtime's private state, shared by its files, whose calls go
 * one way: worker.c (create, connect, the start-up sync, finish, summary) -> step.c (one
 * iteration, out and back: compress, push, and the transport's callbacks, which apply each
 * update as it arrives) -> control.c (every other message: handshake, model, decisions, BYE,
 * ERROR) -> ops.c (heartbeats, liveness, the helper thread, residual checkpoints, a stop) ->
 * util.c (failures, levels, GPU copies). The transport calls back into step.c through its
 * handler table. */
#ifndef GV_WK_H
#define GV_WK_H

#include "gv_worker.h"

#include <pthread.h>

#define WK_HDR_SLOTS 32 /* pieces of a push (up to GV_PS_MAX_PIECES) and a few more */
#define WK_MODEL_CHUNK (256ull << 20)

/* One server connection and everything about that server's shard. */
struct wk_server {
    struct gv_worker *w;
    uint32_t s;
    struct gv_ps_link link;
    struct gv_ps_client_hs hs;
    struct gv_ps_rx rx; /* the header of the message being received (decoded once) */
    char name[96];      /* "server 1 (10.0.0.2:7000)" */
    bool connecting;    /* a connection was started (its address is known) */
    bool closed;
    gv_status_t close_reason;
    bool close_unanswered; /* it closed before a byte arrived from the server */
    bool close_unsent;     /* it closed before a byte left: never established */
    char close_why[160];   /* it closed on what was not gravac's protocol: why */
    uint64_t lo, n;        /* the shard [lo, lo + n) */

    /* sync and updates */
    bool synced; /* initial model and decision received */
    bool got_decision;
    uint64_t model_left; /* MODEL elements still expected (params + momentum) */
    uint64_t model_checksum;
    bool got_update;
    bool resync; /* this update is followed by a full model */
    bool layout_sent;
    bool got_bye;
    bool got_error;
    int32_t error_code;  /* the ERROR's status: GV_OK means the job was stopped on request */
    uint64_t error_iter; /* the ERROR's iteration: where the servers stopped */
    char error_text[260];
    bool deferred;             /* its update waits for our push to leave: not held against it */
    uint64_t seen_bytes;       /* conn bytes_recv at the last liveness tick */
    struct gv_ps_decision dec; /* from the last UPDATE or DECISION */
    uint64_t dec_iter;
    uint8_t *heavy; /* [n_tensors]: Accordion's per-tensor level from this server */

    /* a dense round's pieces (gv_job_pieces): those of this round's update applied so far,
     * the link's send count once each piece of our push was handed to it (its update may land
     * where the push is read from only once that send completed), the checksum's blocks */
    struct gv_ps_pieces pc;
    uint32_t pc_left; /* a dense round in pieces: pieces [0, pc_left) not pushed yet */
    uint32_t pieces_got;
    uint32_t have; /* bit k: piece k applied */
    uint64_t piece_seq[GV_PS_MAX_PIECES];
    uint64_t ck_sum;

    /* push staging: the sent entries of this shard, filled back to front */
    uint32_t *sidx; /* [cap], shard-relative indices */
    float *sval;    /* [cap] */
    uint32_t cap, tail;
    bool pushed;
    /* the encoded push, then (same memory: the push has left before the update comes) the
     * update: 12 bytes of room for the compress/ header, indices, values */
    uint8_t *ubuf;
    size_t ucap;
    uint64_t upd_payload;
};

/* One iteration between the caller's calls (step.c): opened by the first gv_worker_grads_ready
 * or by the push, in flight once every push has left, closed by the finish. */
enum wk_phase { WK_IDLE, WK_OPEN, WK_FLIGHT };
struct wk_step {
    enum wk_phase phase;
    struct gv_worker_step_in in; /* set by the push */
    struct gv_worker_step_out out;
    uint32_t levels;
    bool dense; /* the level sent is dense */
    struct gv_norms norms;
    uint64_t t0, t_pushed;
    uint64_t t_call;           /* when the running call began */
    uint64_t work_ns, wait_ns; /* in the calls that compress and push; that wait for updates */
    uint32_t next_push;        /* shards >= next_push have been pushed */
    uint32_t next_unit;        /* units >= next_unit have been compressed */
    bool early;      /* inside gv_worker_grads_ready: the caller's backward pass goes on */
    uint64_t mom_lo; /* --local-momentum: elements >= mom_lo hold the velocity, not g */
    uint64_t wire_s0, wire_r0;
};

struct gv_worker {
    struct gv_worker_config cfg;
    const struct gv_job *job;
    const struct gv_cluster *cl;
    uint32_t rank, S, W;
    struct gv_worker_model m;
    /* where the replica is read and written on the host: the replica itself (host memory),
     * or for a GPU replica (mirrored) pinned mirrors of it that updates and models land in */
    bool mirrored;
    float *hp, *hg, *hv;    /* float[numel] each: params, grads, momentum */
    struct gv_buf mirror;   /* mirrored: hp, hg, hv */
    struct gv_sparse hsent; /* mirrored: host copy of one tensor's level sent (pinned) */
    struct gv_buf hsent_buf;
    size_t *off;          /* [n_tensors + 1] */
    const char **tnames;  /* [n_tensors]: the tensors' names (nn/'s, or the layout's) */
    bool caller_optim;    /* --optimizer caller: no optimizer step here, no momentum */
    uint8_t *layout_wire; /* --model external: the encoded layout, sent after every AUTH */
    size_t layout_len;
    struct gv_shard_map map;
    uint64_t fingerprint;      /* the job's: every server must have it */
    uint64_t ckpt_fingerprint; /* its state's: the residual checkpoints' identity */
    struct gv_proto_caps caps;
    struct gv_tp_config tp_cfg;
    struct gv_tp *tp;
    struct gv_proto_arena arena;
    void *arena_buf;
    struct wk_server *srv; /* [S] */

    /* compression, by unit: a tensor (--topk-scope tensor) or the whole model (model) */
    struct gv_cmp *cmp; /* NULL for the dense methods */
    uint32_t n_units;
    size_t *unit_off;  /* [n_units + 1]: unit u is [unit_off[u], unit_off[u + 1]) */
    struct gv_ef **ef; /* [n_units], residuals are views into resid */
    float *resid;      /* float[numel]: r, and g_ef between compress and apply (of the
                          compressor's memory kind, as the outputs below) */
    bool resid_zero;   /* r is known to be zero: a dense iteration applied it (none owed) */
    float *lmom;       /* --local-momentum: float[numel], this worker's velocity (host, or
                        * for a mirrored replica the backend's memory, in lmom_buf) */
    struct gv_buf lmom_buf;
    struct gv_sparse *lmin, *lcand; /* [n_units] */

    /* the decision in force */
    uint64_t iter;
    struct gv_ps_decision dec;
    uint8_t *heavy; /* [n_tensors] */

    /* Accordion (worker 0): the averaged gradient accumulated over the epoch */
    float *epoch_acc;
    double *layer_norms;
    bool norms_pending;

    /* accounting */
    struct gv_ps_bytes bytes;
    uint64_t steps, checks, mismatches, resyncs;
    uint64_t pushes, pushes_early, params_waits; /* overlap's (gv_worker_summary) */
    uint64_t buffer_bytes, device_bytes;
    uint64_t it_recv, it_payload_recv; /* bytes of the current iteration received */
    struct wk_step st;
    bool busy; /* the caller's thread is inside create or step: updates and
                  models may arrive (any other time they are a protocol error) */

    char rx_why[160];       /* the last prefix refused (the connection then closes: close_why) */
    uint64_t t_step_end_ns; /* timeline: when the last step returned (0: none yet) */

    /* failure */
    gv_status_t fail_status;
    char fail[400];
    bool stopped; /* a server stopped the job on request */
    bool told;    /* the servers were told of the failure */

    /* operations (worker_ops.c) */
    pthread_mutex_t mu; /* held by the caller's calls and by the helper between naps */
    pthread_cond_t cv;
    pthread_t helper;
    bool helper_on, helper_stop;
    struct gv_liveness live; /* servers 0..S-1, from the end of start-up */
    bool live_on;
    uint64_t t_tick_ns;  /* the last liveness tick (a long gap: this process stalled) */
    char ckpt_dir[1024]; /* this worker's directory ("" none) */
    uint64_t resumed_from;
    bool residual_restored;
    uint64_t ckpt_written;
    uint64_t ck_pend_iter;      /* the residual checkpoint written pending (0: none)... */
    gv_status_t ck_pend_status; /* ...how its write went: reported with the next push */
};

/* step.c: the transport's callbacks (updates are applied there) */
struct gv_tp_handler wk_handler(void);
/* A link's on_idle: an update deferred while our push was leaving may be read now. */
void wk_link_idle(struct gv_ps_link *l, void *arg);

/* control.c: every message that is not an update */
/* Where a MODEL's or DECISION's payload goes; GV_ERR_PROTO (logged) for anything else. */
gv_status_t wk_control_header(struct gv_worker *w, struct wk_server *ws,
                              const struct gv_proto_msg *m, uint64_t payload_len,
                              struct gv_iov *dst, int *cnt);
/* A whole message from server ws that is not an update (the handshake's too). */
void wk_control_msg(struct gv_worker *w, struct wk_server *ws, const struct gv_proto_msg *m);

/* util.c */
void wk_fail(struct gv_worker *w, gv_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Checks a server's connection state; GV_OK while it is usable. */
gv_status_t wk_server_status(struct gv_worker *w, struct wk_server *ws);
/* GPU replica: copies between the device vectors and the host mirrors (wk_fail on error). */
gv_status_t wk_download(struct gv_worker *w, float *host, const float *dev, size_t n,
                        const char *what);
gv_status_t wk_upload(struct gv_worker *w, float *dev, const float *host, size_t n,
                      const char *what);
/* Compression levels a worker computes under decision d: 0, 1 or 2. */
uint32_t wk_levels(const struct gv_worker *w, const struct gv_ps_decision *d);

/* ops.c */
/* Heartbeats on idle links, the servers' liveness, and failures found between calls; called
 * from every wait loop and from the helper. Returns the poll timeout in ms. */
int wk_tick(struct gv_worker *w, uint64_t now);
/* A message or bytes from server ws: it is alive. */
void wk_seen(struct gv_worker *w, struct wk_server *ws);
/* After start-up: the residual of the resumed iteration, liveness, the helper thread. */
gv_status_t wk_ops_start(struct gv_worker *w);
/* Stops the helper thread (before anything else is torn down). */
void wk_ops_stop(struct gv_worker *w);
/* Whether a residual checkpoint is due after the step that just ended; writes it (called with
 * the lock released: it reads only the residual, which nothing else touches). */
bool wk_ckpt_due(const struct gv_worker *w);
void wk_ckpt_write(struct gv_worker *w);
/* Server 0's verdict on the pending residual checkpoint (in the decision adopted by the step
 * that just ended): committed, or dropped. Called with the lock released, as wk_ckpt_write. */
void wk_ckpt_verdict(struct gv_worker *w);

#endif /* GV_WK_H */
