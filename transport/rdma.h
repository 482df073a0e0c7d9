/* rdma.h (private): the verbs/rdma_cm backend's objects and the functions its files share
 * (rdma.c: ops table, data path and event loop; rdma_cm.c: connection management;
 * rdma_dev.c: device, memory pools, registration). One transport uses one RDMA device (one
 * PD, one CQ with one completion channel, one slot pool, one registration cache); several
 * devices mean several transports. Policy that needs no device lives in rdma_select.h. */
#ifndef GV_RDMA_H
#define GV_RDMA_H

#include "gv_transport.h"
#include "rdma_gpu.h"
#include "rdma_proto.h"
#include "rdma_regcache.h"
#include "rdma_select.h"

#include <infiniband/verbs.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdatomic.h>

extern const struct gv_tp_ops gv_tp_rdma_ops;

/* One registered chunk of the slot pool, carved into per-connection blocks. */
struct rdma_chunk {
    void *mem;
    size_t len;
    struct ibv_mr *mr;
};

struct rdma_block {
    void *mem;
    uint32_t lkey;
};

struct rdma_pool {
    size_t block_bytes; /* gv_rp_slot_bytes(): one connection's receive + send slots */
    uint32_t per_chunk; /* blocks per registered chunk */
    uint32_t max_chunks;
    uint32_t nchunks;
    struct rdma_chunk *chunks;
    struct rdma_block *free; /* free blocks (stack) */
    uint32_t nfree;
};

enum rdma_conn_state {
    RDMA_CONN_CONNECTING, /* active side inside gv_tp_connect (blocking) */
    RDMA_CONN_ACCEPTING,  /* passive side: rdma_accept sent, waiting for ESTABLISHED */
    RDMA_CONN_OPEN,       /* established: send and receive */
    RDMA_CONN_LINGER,     /* closed by the user: posting the sends it already accepted */
    RDMA_CONN_CLOSED,     /* on_close fired; QP gone; freed when the last ref drops */
};

struct rdma_tp;
struct rdma_listener;
struct cm_ev;

struct rdma_conn {
    struct gv_conn base; /* first: the public view */
    struct rdma_tp *tp;
    struct rdma_listener *lst; /* accepted through it, or NULL */
    struct rdma_cm_id *id;
    struct ibv_qp *qp;
    enum rdma_conn_state state;
    uint32_t idx;            /* slot in tp->conns, for wr_id */
    uint32_t gen;            /* generation, for wr_id: stale completions are dropped */
    int refs;                /* held around callbacks; freed at 0 once CLOSED */
    struct rdma_block block; /* slot memory, from the pool */
    int proto_ready;         /* pc initialised */
    struct gv_rp_conn pc;
    gv_status_t pending_close; /* close requested from a context that cannot close */
    uint64_t linger_deadline_ns;
    uint64_t last_rx_ns; /* keepalive: last receive completion */
    uint64_t probe_ns;   /* keepalive: last probe sent */
};

struct rdma_listener {
    struct rdma_tp *tp;
    struct rdma_cm_id *id;
    uint16_t port;
    struct rdma_listener *next;
};

struct rdma_tp {
    struct gv_tp base;             /* first: the public view */
    struct gv_rdma_cfg rc_cfg;     /* GV_RDMA_* knobs */
    struct gv_rp_cfg pcfg;         /* per-connection protocol configuration */
    struct rdma_event_channel *ch; /* rdma_cm events of listeners and open connections */
    struct ibv_context **devs;     /* rdma_get_devices() */
    struct ibv_context *ctx;       /* the device this transport uses */
    char devname[64];
    struct ibv_device_attr dattr;
    struct ibv_pd *pd;
    struct ibv_comp_channel *cc;
    struct ibv_cq *cq;
    unsigned cq_unacked; /* CQ events to ack before destroying the CQ */
    int epfd;
    struct rdma_pool pool;
    struct gv_rcache rc;
    struct gv_rdma_gpu *gpu;
    enum gv_rdma_gpu_mode gpu_mode;
    struct rdma_conn **conns; /* max_conns slots */
    uint32_t nconns;
    uint32_t gen;
    struct rdma_listener *listeners;
    uint64_t next_timer_ns; /* next io-timeout / keepalive / linger check */
    int resume_any;         /* some connection's deferred message was resumed: run it */
    /* A blocking connect accepts connection requests for every transport its thread runs (a
     * passive side must answer from its event loop, which is not running meanwhile); their
     * other events wait in deferred for the owner's next progress(). */
    _Atomic uintptr_t owner; /* token of the thread that created it or last progressed it */
    pthread_mutex_t mu;      /* held by progress(); the nested accept only trylocks it */
    int mu_init;
    struct rdma_tp *thread_next; /* every RDMA transport of the process */
    struct cm_ev *deferred;      /* RDMA_CM_DEFERRED copied events */
    unsigned ndeferred;
};

/* ---- rdma_dev.c ---- */
/* Opens the device (named, or the first with an active port), its PD, completion channel and
 * CQ, and the first pool chunk. why gets the reason on failure (nothing logged). */
gv_status_t gv_rdma_dev_open(struct rdma_tp *tp, const char *want_dev, char *why, size_t n);
void gv_rdma_dev_close(struct rdma_tp *tp);
gv_status_t gv_rdma_pool_get(struct rdma_tp *tp, struct rdma_block *b);
void gv_rdma_pool_put(struct rdma_tp *tp, const struct rdma_block *b);
extern const struct gv_rc_ops gv_rdma_rc_ops;

/* ---- rdma_cm.c ---- */
gv_status_t gv_rdma_listen(struct gv_tp *tp, const char *host, uint16_t port,
                           struct gv_listener **l_p);
uint16_t gv_rdma_listener_port(const struct gv_listener *l);
void gv_rdma_listener_close(struct gv_listener *l);
gv_status_t gv_rdma_connect(struct gv_tp *tp, const char *host, uint16_t port,
                            struct gv_conn **c_p);
/* Drains the event channel; returns the number of events handled or a negative status. */
int gv_rdma_cm_poll(struct rdma_tp *tp);
#define RDMA_CM_DEFERRED 64
/* Lists tp among the process's transports (for the accept-while-connecting above); owner
 * tokens tell which thread runs each. */
void gv_rdma_cm_thread_add(struct rdma_tp *tp);
void gv_rdma_cm_thread_del(struct rdma_tp *tp);
uintptr_t gv_rdma_thread_token(void);
/* Drops deferred events of id, which is about to be destroyed. */
void gv_rdma_cm_forget(struct rdma_tp *tp, struct rdma_cm_id *id);
/* Resolves host to a sockaddr (port in network order set). */
gv_status_t gv_rdma_resolve_host(const char *host, uint16_t port, int passive,
                                 struct sockaddr_storage *ss, char *why, size_t n);

/* ---- rdma.c ---- */
/* Polls the CQ dry (consuming completion-channel events); completions handled or < 0. */
int gv_rdma_cq_poll(struct rdma_tp *tp);
/* A new connection on cm id (QP not yet created): takes a pool block and a table slot. */
gv_status_t gv_rdma_conn_new(struct rdma_tp *tp, struct rdma_cm_id *id, struct rdma_conn **c_p);
/* Creates the QP, initialises the protocol with the peer's parameters, posts receives. */
gv_status_t gv_rdma_conn_setup(struct rdma_conn *c, const struct gv_rp_params *peer);
/* Our parameters for the private data. */
void gv_rdma_local_params(const struct rdma_tp *tp, struct gv_rp_params *p);
/* The connection is established: counts from now for keepalive. */
void gv_rdma_conn_established(struct rdma_conn *c);
/* An accepted connection is up (ESTABLISHED, or its first completion came first): OPEN, and
 * on_accept fires. */
void gv_rdma_conn_accepted(struct rdma_conn *c);
/* Closes c with reason (on_close fires unless it never became visible to the user). */
void gv_rdma_conn_fail(struct rdma_conn *c, gv_status_t reason);
/* Frees a connection the user never saw (failed connect or accept). */
void gv_rdma_conn_discard(struct rdma_conn *c);
void gv_rdma_conn_ref(struct rdma_conn *c);
void gv_rdma_conn_unref(struct rdma_conn *c);
void gv_rdma_peer_str(struct rdma_cm_id *id, char *buf, size_t n);

#endif /* GV_RDMA_H */
