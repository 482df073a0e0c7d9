/* gv_transport.h: one message-transport interface (an ops table) with TCP and RDMA backends
 * behind it. A transport moves framed messages (header bytes + raw payload segments) between
 * connections; it never parses protobuf. The caller supplies the framing rule (how long the
 * header and payload of a message are, from a fixed-size prefix) and, per message, where the
 * payload goes, so payloads land straight in caller buffers.
 *
 * Threading: a transport and its connections belong to one thread, the one calling
 * gv_tp_progress(); every callback runs inside progress() (or inside gv_tp_conn_close for
 * on_close). Nothing here is thread-safe. */
#ifndef GV_TRANSPORT_H
#define GV_TRANSPORT_H

#include "gv_common.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gv_tp;       /* one transport instance: event loop, listeners, connections */
struct gv_conn;     /* one connection (a byte stream for TCP, a QP for RDMA) */
struct gv_listener; /* one listening endpoint */

/* A scatter-gather element. base == NULL in a *receive* destination means "read and discard
 * len bytes" (used to drop a refused message without losing the connection's framing). */
struct gv_iov {
    void *base;
    size_t len;
};

/* Framing and delivery callbacks. Every message on the wire is
 *   prefix (prefix_len bytes) | header (hdr_len bytes) | payload (payload_len bytes)
 * where parse_prefix tells hdr_len and payload_len from the prefix. */
struct gv_tp_handler {
    size_t prefix_len; /* fixed, 1..64 bytes */

    /* Decode the prefix; return GV_OK with the lengths, or GV_ERR_PROTO / GV_ERR_VERSION to
     * refuse the stream (the connection is then closed with that status). Must check the
     * lengths against its caps: the transport allocates nothing from them, but rejects
     * hdr_len > cfg.max_hdr_len itself. */
    gv_status_t (*parse_prefix)(const void *prefix, uint32_t *hdr_len_p, uint64_t *payload_len_p,
                                void *user);

    /* The prefix and header have arrived (msg = prefix followed by header, msg_len bytes,
     * valid until on_msg returns). Fill dst[0..*dst_cnt) with where the payload_len payload
     * bytes go (*dst_cnt is the capacity on entry, GV_TP_MAX_DST_IOV; the lengths must add
     * up to payload_len). Return GV_OK to receive, or an error to close the connection with
     * that status. Not called when payload_len == 0.
     * Deferring (backends with GV_TP_CAP_DEFER_RECV only): return GV_ERR_AGAIN to leave this
     * message unread for now. The transport keeps its prefix and header, stops reading c (the
     * payload waits in the kernel, or behind the sender's flow control), does not count c as
     * busy for the I/O timeout meanwhile, and calls on_header again for the same message once
     * gv_tp_conn_resume_recv(c) has been called. A peer reset seen while deferred closes c;
     * an orderly close by the peer is seen once c is resumed (its bytes are read first).
     * Without the capability GV_ERR_AGAIN closes c like any other error. */
    gv_status_t (*on_header)(struct gv_conn *c, const void *msg, size_t msg_len,
                             uint64_t payload_len, struct gv_iov *dst, int *dst_cnt, void *user);

    /* A whole message has arrived: prefix+header in msg (valid during the call), payload in
     * the destination given by on_header. The callback may send, and may close c. */
    void (*on_msg)(struct gv_conn *c, const void *msg, size_t msg_len, void *user);

    /* A listener accepted c. Optional (NULL: accepted connections are just kept). */
    void (*on_accept)(struct gv_listener *l, struct gv_conn *c, void *user);

    /* c is closing: reason GV_OK for a local gv_tp_conn_close, GV_ERR_CLOSED for an orderly
     * remote close, GV_ERR_TIMEOUT for a dead peer (keepalive / I/O timeout), GV_ERR_IO,
     * GV_ERR_PROTO... Fires exactly once per connection; pending sends have their callbacks
     * fired with an error first. c stays valid until this callback returns. Optional. */
    void (*on_close)(struct gv_conn *c, gv_status_t reason, void *user);
};

#define GV_TP_MAX_DST_IOV 8

/* Transport configuration. gv_tp_config_default() fills sane values; zero is never "unlimited". */
struct gv_tp_config {
    uint32_t max_hdr_len;     /* prefix+header larger than this is refused (64 KiB) */
    uint64_t max_payload_len; /* payload larger than this is refused (2 GiB) */
    int sock_buf_bytes;       /* SO_SNDBUF/SO_RCVBUF request (4 MiB); 0 keeps the
                                 kernel's autotuning */
    int connect_timeout_ms;   /* gv_tp_connect retries until this deadline (10000) */
    int io_timeout_ms;        /* a conn with a partial message or pending sends and no
                                 progress for this long is closed GV_ERR_TIMEOUT (10000) */
    int keepalive_idle_s;     /* TCP keepalive: idle, interval, probes (5, 1, 3) */
    int keepalive_intvl_s;
    int keepalive_cnt;
    uint32_t max_send_queue;       /* messages queued per conn before GV_ERR_AGAIN (64) */
    uint64_t max_send_queue_bytes; /* bytes queued per conn before GV_ERR_AGAIN (1 GiB) */
};
void gv_tp_config_default(struct gv_tp_config *cfg);

/* Send completion: status GV_OK when the message has been handed to the network and the
 * buffers may be reused, an error when the connection died before that. */
typedef void (*gv_tp_send_cb)(struct gv_conn *c, gv_status_t status, void *arg);

/* Optional backend capabilities (gv_tp_ops.caps). */
#define GV_TP_CAP_DEFER_RECV (1u << 0)    /* on_header may defer a message (GV_ERR_AGAIN) */
#define GV_TP_CAP_CONNECT_ASYNC (1u << 1) /* connect_start returns at once (below) */

/* The backend ops table. One static const table per backend; no slot is NULL (an op a backend
 * lacks points to a stub returning GV_ERR_UNSUPPORTED), except the optional ops below `caps`,
 * which are NULL exactly when their capability bit is absent. Callers use the gv_tp_*
 * wrappers. */
struct gv_tp_ops {
    const char *name; /* "tcp", "rdma" */
    gv_status_t (*create)(const struct gv_tp_config *cfg, const struct gv_tp_handler *h, void *user,
                          struct gv_tp **tp_p);
    void (*destroy)(struct gv_tp *tp);
    gv_status_t (*listen)(struct gv_tp *tp, const char *host, uint16_t port,
                          struct gv_listener **l_p);
    uint16_t (*listener_port)(const struct gv_listener *l);
    void (*listener_close)(struct gv_listener *l);
    gv_status_t (*connect)(struct gv_tp *tp, const char *host, uint16_t port, struct gv_conn **c_p);
    gv_status_t (*send)(struct gv_conn *c, const struct gv_iov *iov, int iovcnt, gv_tp_send_cb cb,
                        void *arg);
    int (*progress)(struct gv_tp *tp, int timeout_ms);
    void (*conn_close)(struct gv_conn *c);
    gv_status_t (*mem_reg)(struct gv_tp *tp, struct gv_buf *buf);
    void (*mem_dereg)(struct gv_tp *tp, struct gv_buf *buf);
    unsigned caps; /* GV_TP_CAP_* (0 when the table does not set it) */
    /* GV_TP_CAP_DEFER_RECV: resume a connection whose on_header deferred a message. */
    gv_status_t (*resume_recv)(struct gv_conn *c);
    /* GV_TP_CAP_CONNECT_ASYNC: start connecting without blocking (gv_tp_connect_start). */
    gv_status_t (*connect_start)(struct gv_tp *tp, const char *host, uint16_t port,
                                 struct gv_conn **c_p);
};

/* The base every backend embeds as its first member. */
struct gv_tp {
    const struct gv_tp_ops *ops;
    struct gv_tp_config cfg;
    struct gv_tp_handler h;
    void *user; /* borrowed; passed to every handler callback */
};

/* The base every backend's connection embeds as its first member. */
struct gv_conn {
    struct gv_tp *tp;
    void *user;                      /* per-connection user data, owned by the caller */
    uint64_t id;                     /* unique within the process, for logs */
    char peer[64];                   /* "host:port" of the peer, for logs */
    uint64_t bytes_sent, bytes_recv; /* payload+header bytes, counted by the backend */
};

/* ---- registry ---- */

/* Backend by name ("tcp", "rdma"); NULL when unknown or not built. */
const struct gv_tp_ops *gv_tp_find(const char *name);

/* Creates a transport of the named backend. cfg may be NULL (defaults); h is copied; user is
 * borrowed. Errors: GV_ERR_INVAL (unknown name, bad config), GV_ERR_UNSUPPORTED (backend not
 * built), GV_ERR_NODEV (no usable device), GV_ERR_NOMEM. */
gv_status_t gv_tp_create(const char *name, const struct gv_tp_config *cfg,
                         const struct gv_tp_handler *h, void *user, struct gv_tp **tp_p);

/* Creates the transport `want` names, "auto", "rdma" or "tcp" (NULL = "auto"), for traffic
 * with host: the peer a client will connect to, or the address a server will listen on (NULL,
 * "", "0.0.0.0" or "::" = any). auto uses RDMA when a device is present, the memlock limit
 * allows its buffer pools and host is on (or routed through) an RDMA device, and otherwise
 * falls back to TCP with exactly one WARN line giving the reason. "rdma" without a usable
 * device fails with one ERROR line giving the reason: GV_ERR_NODEV (no device, a kernel
 * without RDMA, an address not on an RDMA device), GV_ERR_NOMEM (memlock limit, with the
 * limit and the bytes needed) or GV_ERR_UNSUPPORTED (built without RDMA). Anything else:
 * GV_ERR_INVAL. Other errors as gv_tp_create. tp->ops->name says which backend it is. */
gv_status_t gv_tp_create_auto(const char *want, const char *host, const struct gv_tp_config *cfg,
                              const struct gv_tp_handler *h, void *user, struct gv_tp **tp_p);

/* Closes every connection and listener (on_close fires for each) and frees tp. NULL is fine. */
static inline void gv_tp_destroy(struct gv_tp *tp)
{
    if (tp != NULL)
        tp->ops->destroy(tp);
}

/* Listens on host ("0.0.0.0", "::", "127.0.0.1", a name; NULL = all IPv4 and IPv6) and port
 * (0 = ephemeral; read it back with gv_tp_listener_port). */
static inline gv_status_t gv_tp_listen(struct gv_tp *tp, const char *host, uint16_t port,
                                       struct gv_listener **l_p)
{
    return tp->ops->listen(tp, host, port, l_p);
}
static inline uint16_t gv_tp_listener_port(struct gv_tp *tp, const struct gv_listener *l)
{
    return tp->ops->listener_port(l);
}
static inline void gv_tp_listener_close(struct gv_tp *tp, struct gv_listener *l)
{
    if (l != NULL)
        tp->ops->listener_close(l);
}

/* Connects to host:port (IPv4, IPv6 or a name), retrying refused/unreachable attempts and names
 * that do not resolve (yet) until cfg.connect_timeout_ms has passed (peers may start later
 * than us). Blocks (no callbacks run
 * and no other connection of tp progresses meanwhile); returns an established connection or
 * GV_ERR_TIMEOUT / GV_ERR_IO / GV_ERR_INVAL. Several connections to the same peer are
 * independent streams. */
static inline gv_status_t gv_tp_connect(struct gv_tp *tp, const char *host, uint16_t port,
                                        struct gv_conn **c_p)
{
    return tp->ops->connect(tp, host, port, c_p);
}

/* Starts connecting to host:port and returns at once (GV_TP_CAP_CONNECT_ASYNC): *c_p is a
 * connection being established, which progress() retries (the name does not resolve yet, the
 * peer refuses, is unreachable or does not answer) until cfg.connect_timeout_ms from now; then
 * it is closed: on_close(GV_ERR_TIMEOUT), the last cause logged. Sends on it are queued
 * (GV_INPROGRESS; GV_ERR_AGAIN at the queue's bound) and leave once it is established; nothing
 * is received before. c->peer is "host:port" as given until then, the peer's address after.
 * This is what a process that must go on answering its other connections while a peer is not
 * up yet uses. A backend without the capability connects here as gv_tp_connect does
 * (blocking). GV_ERR_INVAL (no host or port 0), GV_ERR_NOMEM. */
static inline gv_status_t gv_tp_connect_start(struct gv_tp *tp, const char *host, uint16_t port,
                                              struct gv_conn **c_p)
{
    if (tp->ops->connect_start == NULL)
        return tp->ops->connect(tp, host, port, c_p);
    return tp->ops->connect_start(tp, host, port, c_p);
}

/* Sends one message: iov[0] is the prefix+header, iov[1..iovcnt) the payload segments
 * (1 <= iovcnt <= GV_TP_MAX_SEND_IOV). The iov array itself is copied; the bytes it points to
 * are borrowed until completion. cb may be NULL when the caller needs no completion (buffers
 * that never change, e.g. a constant payload). Contract:
 *   GV_OK          sent (handed to the kernel / NIC); buffers reusable now; cb is NOT called.
 *   GV_INPROGRESS  queued; cb fires later from progress() (or with an error when the conn
 *                  closes); the caller must not touch the buffers until then.
 *   GV_ERR_AGAIN   the conn's send queue is full (cfg.max_send_queue*); nothing was queued:
 *                  call progress and retry.
 *   GV_ERR_CLOSED / GV_ERR_IO  the connection is dead or closing; nothing was queued.
 *   GV_ERR_INVAL   bad iov (too many, header above max_hdr_len, payload above cap).
 * Messages on one connection are delivered in order. */
#define GV_TP_MAX_SEND_IOV 16
static inline gv_status_t gv_tp_send(struct gv_conn *c, const struct gv_iov *iov, int iovcnt,
                                     gv_tp_send_cb cb, void *arg)
{
    return c->tp->ops->send(c, iov, iovcnt, cb, arg);
}

/* Runs the event loop once: waits up to timeout_ms (0 = poll, -1 = forever) for I/O, makes
 * progress on every connection, fires callbacks, enforces io_timeout_ms (it never sleeps past
 * the next possible expiry, so a dead peer is reported even under timeout_ms = -1). Returns the
 * number of events handled (>= 0) or a negative status on a fatal transport error. Must not be
 * called from inside a callback. */
static inline int gv_tp_progress(struct gv_tp *tp, int timeout_ms)
{
    return tp->ops->progress(tp, timeout_ms);
}

/* Closes c: fails its pending sends (their cbs fire with GV_ERR_CLOSED), fires on_close with
 * GV_OK, and frees c once no callback on it is running (a callback may close its own conn).
 * c must not be used after this call. NULL is fine. */
static inline void gv_tp_conn_close(struct gv_conn *c)
{
    if (c != NULL)
        c->tp->ops->conn_close(c);
}

/* Whether tp's backend offers the capability cap (GV_TP_CAP_*). */
static inline int gv_tp_has_cap(const struct gv_tp *tp, unsigned cap)
{
    return (tp->ops->caps & cap) == cap;
}

/* Lets c read again after its on_header deferred a message (GV_ERR_AGAIN): on_header is
 * called again for that message from a later (or the current) gv_tp_progress, never from inside
 * this call, so it may be called from any callback. GV_OK also when nothing was deferred.
 * GV_ERR_UNSUPPORTED when the backend lacks GV_TP_CAP_DEFER_RECV; GV_ERR_CLOSED when c is
 * closing. */
static inline gv_status_t gv_tp_conn_resume_recv(struct gv_conn *c)
{
    if (!gv_tp_has_cap(c->tp, GV_TP_CAP_DEFER_RECV) || c->tp->ops->resume_recv == NULL)
        return GV_ERR_UNSUPPORTED;
    return c->tp->ops->resume_recv(c);
}

/* Registers buf with the transport (fills buf->mr) so it can be a zero-copy source or
 * destination; a no-op returning GV_OK on TCP. Register at init, never per message. */
static inline gv_status_t gv_tp_mem_reg(struct gv_tp *tp, struct gv_buf *buf)
{
    return tp->ops->mem_reg(tp, buf);
}
static inline void gv_tp_mem_dereg(struct gv_tp *tp, struct gv_buf *buf)
{
    tp->ops->mem_dereg(tp, buf);
}

/* ---- addresses ---- */

/* Splits "host:port", "[v6addr]:port" or "name:port" into host (NUL-terminated, brackets
 * removed) and port (1..65535). GV_ERR_INVAL for anything else or a host that does not fit. */
gv_status_t gv_tp_addr_split(const char *addr, char *host, size_t host_len, uint16_t *port_p);

/* The address peers should be told to connect to, for a listener bound to bind_host and port:
 * advertise_host when given (the explicit advertise address: wildcard binds, NAT, several
 * interfaces), else bind_host when it names one address, else this machine's host name.
 * Written as "host:port" ("[v6addr]:port") into out[0..out_len); GV_ERR_INVAL if it does
 * not fit. */
gv_status_t gv_tp_addr_advertise(const char *bind_host, const char *advertise_host, uint16_t port,
                                 char *out, size_t out_len);

/* Whether host resolves to an address now (a name through the resolver, or a literal).
 * GV_ERR_INVAL with the resolver's reason in why[why_len] when it does not. */
gv_status_t gv_tp_addr_resolves(const char *host, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif /* GV_TRANSPORT_H */
