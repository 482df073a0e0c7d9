/* server_internal.h: what server/'s files share privately: the server object, its peers and
 * the functions of the connection layer (server_peer.c) and the round logic (server_round.c).
 * Tests may include it. */
#ifndef GV_SERVER_INTERNAL_H
#define GV_SERVER_INTERNAL_H

#include "gv_server.h"

/* job_data.c: image shape, classes and training-set size of the job's data, from the files'
 * headers (the text corpus is read for its vocabulary). */
gv_status_t job_data_shape(struct gv_job *job);

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
    struct gv_auth auth;    /* server side of the handshake (NEW peers) */
    struct gv_ps_client_hs hs; /* COORD: our client side */
    uint64_t t_accept_ns;
    bool synced;            /* worker: initial model and decision sent */
    bool bye;               /* said BYE */
    bool bye_sent;          /* we said BYE to it */
    bool resync_req;        /* worker asked for a full model (checksum mismatch) */
    bool close_after_send;  /* a REFUSE is in flight: close when it completes */
    bool closed;            /* on_close ran */
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
    SRV_ROUND_WAIT_DECISION, /* servers 1..S-1: all pushes in, waiting for server 0's decision */
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
};

/* server_peer.c: transport callbacks, handshake, model sync, sending helpers */
struct gv_tp_handler srv_handler(void);
gv_status_t srv_connect_coord(struct gv_server *srv, uint64_t deadline_ns);
void srv_peer_close(struct srv_peer *p);
/* Sends the initial (or resync) model of the shard and, when with_decision, DECISION(iter). */
gv_status_t srv_send_model(struct gv_server *srv, struct srv_peer *p, bool with_decision);
gv_status_t srv_send_decision(struct gv_server *srv, struct srv_peer *p,
                              const struct srv_decision *d, enum gv_proto_msg_type type);
void srv_sync_ready_workers(struct gv_server *srv);
/* Ends the job with an error: logs it once, tells every peer (ERROR), state ABORTED. */
void srv_abort(struct gv_server *srv, gv_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void srv_send_bye_all(struct gv_server *srv);
void srv_send_bye(struct gv_server *srv, struct srv_peer *p);

/* server_round.c: the round logic. The one place that decides "round complete" is
 * srv_round_push_done; the set of live workers is srv->workers (joined, not dead). */
void srv_round_try_open(struct gv_server *srv);
/* on_header of a PUSH: GV_OK with the destination, GV_ERR_AGAIN (not its turn yet) or an error
 * (protocol violation: the connection is closed). */
gv_status_t srv_round_push_header(struct gv_server *srv, struct srv_peer *p,
                                  const struct gv_proto_msg *m, uint64_t payload_len,
                                  struct gv_iov *dst, int *cnt);
void srv_round_push_done(struct gv_server *srv, struct srv_peer *p, const struct gv_proto_msg *m,
                         uint64_t msg_bytes);
/* Servers 1..S-1: DECISION(iter + 1) from server 0 (its Accordion bytes already received). */
void srv_round_on_decision(struct gv_server *srv);
/* A worker said BYE. */
void srv_round_on_bye(struct gv_server *srv, struct srv_peer *p, uint64_t iteration);
void srv_decision_copy(struct gv_server *srv, struct srv_decision *dst,
                       const struct srv_decision *src);

#endif /* GV_SERVER_INTERNAL_H */
