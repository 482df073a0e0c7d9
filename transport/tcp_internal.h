/* tcp_internal.h: the TCP backend's private types, shared by tcp.c (create, listen, accept,
 * connect, close), tcp_io.c (the send and receive paths) and tcp_loop.c (the epoll loop and the
 * I/O timeout). Tests may include it; callers never do. */
#ifndef GV_TCP_INTERNAL_H
#define GV_TCP_INTERNAL_H

#include "tp_internal.h"

#include <sys/socket.h>
#include <sys/uio.h>

#define TCP_STAGE_BYTES (8u << 10)    /* read-ahead past the current message (see tcp_io.c) */
#define TCP_SCRATCH_BYTES (64u << 10) /* sink for discarded payload bytes */
#define TCP_MAX_WRITE_IOV 64          /* iovecs gathered per sendmsg from the send queue */
#define TCP_MAX_EVENTS 64             /* epoll events per progress call */

/* What an epoll event's data.ptr points at. */
enum tcp_ev_kind {
    TCP_EV_LISTENER = 1,
    TCP_EV_CONN = 2,
};

/* A connection's life, and what gv_tp_send returns in each state. */
enum tcp_conn_state {
    /* Established. send writes at once and returns GV_OK when the kernel took every byte,
     * GV_INPROGRESS when the rest was queued (cb fires later), GV_ERR_AGAIN when the queue
     * bound is reached (nothing queued). */
    TCP_CONN_OPEN = 0,
    /* A write in send() failed outside progress; the close (with fail_reason) runs in the next
     * progress call so that callbacks only fire from there. send returns GV_ERR_CLOSED. */
    TCP_CONN_FAILED,
    /* gv_tp_connect_start: not established yet (an attempt in flight, fd >= 0 polled for
     * EPOLLOUT, or a retry due at retry_ns, fd -1). send queues (GV_INPROGRESS, GV_ERR_AGAIN at
     * the queue's bound); the queue leaves once established. Nothing is received. */
    TCP_CONN_CONNECTING,
    /* Tearing down: pending send callbacks and then on_close are running. send returns
     * GV_ERR_CLOSED. */
    TCP_CONN_CLOSING,
    /* fd closed and on_close done; the memory stays until the last reference is dropped
     * (end of the running progress call). The owner must not use c any more; send would
     * return GV_ERR_CLOSED. */
    TCP_CONN_CLOSED,
};

/* Where the receive path is within the current message. */
enum tcp_rx_state {
    /* Collecting prefix + header in rbuf (plus read-ahead of what follows). */
    TCP_RX_HEAD = 0,
    /* on_header has given the payload's destination; the payload is read straight into it. */
    TCP_RX_PAYLOAD,
};

/* One queued message: a copy of the caller's iov array (the payload bytes are not copied;
 * they stay the caller's until cb fires). */
struct tcp_sendq_ent {
    struct gv_iov iov[GV_TP_MAX_SEND_IOV];
    int iovcnt;
    int idx;       /* first iov not completely written */
    size_t off;    /* bytes of iov[idx] already written */
    uint64_t left; /* bytes of the message still to write */
    gv_tp_send_cb cb;
    void *arg;
};

struct tcp_tp;

struct tcp_conn {
    struct gv_conn base; /* first: a gv_conn * is a tcp_conn * */
    int ev_kind;         /* TCP_EV_CONN; epoll's data.ptr points here */
    int fd;
    struct tcp_tp *tp;
    enum tcp_conn_state state;
    gv_status_t fail_reason;      /* TCP_CONN_FAILED: the reason the deferred close will give */
    int refs;                     /* 1 while open + 1 per running callback frame */
    uint32_t ep_events;           /* events currently registered with epoll */
    struct tcp_conn *prev, *next; /* in tp->conns (open or failed) or tp->zombies (closed) */
    uint64_t last_io_ns;          /* last time bytes moved; the I/O timeout counts from here */

    /* receive: rbuf holds [rstart, rend) read but not yet consumed */
    enum tcp_rx_state rx_state;
    uint8_t *rbuf; /* max_hdr_len + TCP_STAGE_BYTES, allocated once */
    size_t rcap, rstart, rend;
    size_t msg_len;       /* prefix + header length of the current message; 0 until parsed */
    uint64_t payload_len; /* of the current message */
    int rx_deferred;      /* on_header deferred the current message: not reading (no EPOLLIN) */
    int rx_resume;        /* resumed: re-run the parse at the next progress */
    struct gv_iov dst[GV_TP_MAX_DST_IOV];
    int dst_cnt, dst_idx; /* TCP_RX_PAYLOAD: destination and the position in it */
    size_t dst_off;
    uint64_t payload_left;
    int rcvlowat;    /* SO_RCVLOWAT currently set (1: the kernel default); see tcp_io.c */
    int rx_inq_seen; /* bytes queued in the kernel at the last timeout check (lowat armed) */

    /* connecting (TCP_CONN_CONNECTING): where to, until when, what happened so far */
    char *host; /* as the caller gave it (resolved again before each round) */
    uint16_t port;
    uint64_t connect_deadline; /* gv_now_ns() at which connecting gives up (GV_ERR_TIMEOUT) */
    uint64_t retry_ns;         /* fd -1: the next attempt is due then */
    uint32_t backoff_ms;       /* the wait before the next round of attempts */
    uint32_t attempts;
    int addr_idx;    /* the address of the resolved list the attempt in flight uses */
    int last_err;    /* errno of the last failed attempt */
    int last_gai;    /* getaddrinfo's error when the name did not resolve (0: it did) */
    bool dns_warned; /* the name did not resolve: said once */

    /* send: a ring of max_send_queue entries, allocated once */
    struct tcp_sendq_ent *sq;
    uint32_t sq_head, sq_count;
    uint64_t sq_bytes; /* bytes still to write, over all queued messages */
};

struct tcp_listener {
    int ev_kind; /* TCP_EV_LISTENER */
    int fd;
    uint16_t port;
    uint64_t paused_until; /* accept failed for want of descriptors: not polled until then */
    struct tcp_tp *tp;
    struct tcp_listener *next; /* in tp->listeners, or tp->dead_listeners once closed */
};

struct tcp_tp {
    struct gv_tp base; /* first */
    int epfd;
    int depth;                 /* > 0 while inside progress (or a teardown) : frees are deferred */
    int n_failed;              /* conns in TCP_CONN_FAILED, closed at the next progress */
    int n_resume;              /* conns with rx_resume set */
    uint64_t now_ns;           /* clock read once per progress call, after epoll_wait */
    uint64_t next_check_ns;    /* earliest time an I/O timeout may expire; UINT64_MAX: none */
    uint64_t listen_resume_ns; /* earliest paused listener's resume time; UINT64_MAX: none */
    struct tcp_conn *conns;    /* open and failed conns */
    struct tcp_conn *zombies;  /* closed conns waiting for their last reference */
    struct tcp_listener *listeners, *dead_listeners;
    uint8_t *scratch; /* TCP_SCRATCH_BYTES, for discarded payload */
};

static inline struct tcp_conn *tcp_conn_of(struct gv_conn *c)
{
    return (struct tcp_conn *)(void *)c;
}

static inline struct tcp_tp *tcp_tp_of(struct gv_tp *tp)
{
    return (struct tcp_tp *)(void *)tp;
}

/* tcp.c */
extern const struct gv_tp_ops gv_tp_tcp_ops;
void tcp_sock_set_bufs(int fd, const struct gv_tp_config *cfg);
void tcp_sock_set_conn_opts(int fd, const struct gv_tp_config *cfg);
void tcp_addr_str(const struct sockaddr *sa, socklen_t len, char *out, size_t out_len);
void tcp_list_push(struct tcp_conn **head, struct tcp_conn *c);
/* A connection's memory (buffers, id, one reference), fd -1, on no list. */
gv_status_t tcp_conn_alloc(struct tcp_tp *tp, struct tcp_conn **c_p);
void tcp_conn_free_unlisted(struct tcp_conn *c);
/* c->base.peer from the socket's peer address. */
void tcp_conn_set_peer(struct tcp_conn *c);
gv_status_t tcp_conn_new(struct tcp_tp *tp, int fd, struct tcp_conn **c_p);
void tcp_conn_get(struct tcp_conn *c);
void tcp_conn_put(struct tcp_conn *c);
/* Closes c now: fails queued sends, fires on_close(reason) once, frees when unreferenced. */
void tcp_conn_teardown(struct tcp_conn *c, gv_status_t reason);
/* Marks c failed; the teardown runs from the next progress call. */
void tcp_conn_fail_later(struct tcp_conn *c, gv_status_t reason);
void tcp_listener_on_readable(struct tcp_listener *l);
/* Polls the listeners whose pause (accept out of descriptors) has ended; returns how many. */
int tcp_listeners_resume(struct tcp_tp *tp);
void tcp_reap(struct tcp_tp *tp);
gv_status_t tcp_status_of_errno(int err);

/* tcp_connect.c */
gv_status_t tcp_connect(struct gv_tp *btp, const char *host, uint16_t port, struct gv_conn **c_p);
gv_status_t tcp_connect_start(struct gv_tp *btp, const char *host, uint16_t port,
                              struct gv_conn **c_p);
/* A connecting conn's socket is writable (or failed): established, or the next attempt. */
void tcp_connect_on_event(struct tcp_conn *c);
/* From the timeout check: a connecting conn's next attempt when due, or its end at the
 * deadline (GV_ERR_TIMEOUT; returns true: c was torn down). *next_p: when it needs a look. */
bool tcp_connect_tick(struct tcp_conn *c, uint64_t now, uint64_t *next_p);

/* tcp_io.c */
gv_status_t tcp_send(struct gv_conn *bc, const struct gv_iov *iov, int iovcnt, gv_tp_send_cb cb,
                     void *arg);
void tcp_conn_on_readable(struct tcp_conn *c);
void tcp_conn_flush(struct tcp_conn *c);
gv_status_t tcp_conn_set_events(struct tcp_conn *c, uint32_t events);
/* The epoll events c needs now: EPOLLIN|EPOLLRDHUP unless deferred, EPOLLOUT with queued sends. */
uint32_t tcp_conn_want_events(const struct tcp_conn *c);
gv_status_t tcp_resume_recv(struct gv_conn *bc);
/* Re-runs the receive path of resumed conns; returns how many. */
int tcp_run_resumed(struct tcp_tp *tp);
/* c has a partial message in either direction: the I/O timeout applies to it. */
int tcp_conn_busy(const struct tcp_conn *c);
/* Bytes arrived below the armed SO_RCVLOWAT since the last look (progress nobody saw). */
int tcp_conn_rx_trickled(struct tcp_conn *c);

/* tcp_loop.c */
int tcp_progress(struct gv_tp *btp, int timeout_ms);
/* c became busy (partial message or queued sends) at c->last_io_ns: arm the I/O timeout. */
static inline void tcp_timer_arm(struct tcp_conn *c, uint64_t io_timeout_ns)
{
    uint64_t due = c->last_io_ns + io_timeout_ns;
    if (due < c->tp->next_check_ns)
        c->tp->next_check_ns = due;
}

#endif /* GV_TCP_INTERNAL_H */
