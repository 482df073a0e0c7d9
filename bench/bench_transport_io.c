/* bench_transport_io.c: the engine of `gravac-bench transport`: the bench's own framing, the
 * server (echo / pull / sync responder) and the client's measured phases (stream, ping-pong,
 * push-then-pull). Everything runs inside gv_tp_progress callbacks; payload buffers are
 * allocated once per connection and reused, so the measured loop allocates nothing. */
#include "bench_transport.h"

#include <endian.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define BT_MAGIC 0x54424756u /* "VGBT" */
#define BT_VERSION 1
#define BT_PREFIX_LEN 16
#define BT_HDR_LEN 48            /* prefix + header */
#define BT_MAX_SIZE (1ull << 30) /* largest message size the bench accepts */
#define BT_SERVER_QUEUE (2 * BT_MAX_WINDOW + 8)

enum bt_kind {
    BT_HELLO = 1, /* seq: mode, arg: largest size; answered by BT_HELLO_ACK */
    BT_HELLO_ACK,
    BT_DATA, /* stream payload; no answer */
    BT_PING, /* answered by BT_PONG with as many payload bytes */
    BT_PONG,
    BT_PUSH, /* payload; no answer (the PULL that follows is answered) */
    BT_PULL, /* arg: size wanted; answered by BT_PULL_RESP */
    BT_PULL_RESP,
    BT_SYNC, /* answered by BT_SYNC_ACK once everything before it was received */
    BT_SYNC_ACK,
};

struct bt_msg {
    uint32_t kind;
    uint64_t seq, t_ns, arg, payload_len;
};

/* A header slot: the bytes gv_tp_send references until the send completes. Slots are used in
 * FIFO order from a ring one longer than the send queue, so a slot is never reused while its
 * send is pending (sends complete in order). */
struct bt_slot {
    uint8_t head[BT_HDR_LEN];
    uint64_t t_post;
    struct bt_peer *p;
};

/* One connection, on either side. */
struct bt_peer {
    struct gv_conn *c;
    uint8_t *rx, *tx; /* rx: payload destination; tx: payload source (client: shared) */
    uint64_t rx_cap, tx_cap;
    int own_tx;
    struct bt_slot *slots;
    uint32_t n_slots, next_slot;
    int outstanding; /* client: stream sends pending, or round trips in flight */
    int acks;        /* client: HELLO_ACK + SYNC_ACK received */
    void *owner;
};

/* ---------------------------------------------------------------- framing */

static void bt_encode(uint8_t *h, uint32_t kind, uint64_t seq, uint64_t t_ns, uint64_t arg,
                      uint64_t payload_len)
{
    uint32_t w32[2] = {htole32(BT_MAGIC), htole32(BT_HDR_LEN - BT_PREFIX_LEN)};
    uint64_t pl = htole64(payload_len);
    uint32_t k[2] = {htole32(kind), htole32(BT_VERSION)};
    uint64_t w64[3] = {htole64(seq), htole64(t_ns), htole64(arg)};
    memcpy(h, w32, 8);
    memcpy(h + 8, &pl, 8);
    memcpy(h + 16, k, 8);
    memcpy(h + 24, w64, 24);
}

static gv_status_t bt_parse_prefix(const void *prefix, uint32_t *hdr_len_p, uint64_t *payload_len_p,
                                   void *user)
{
    uint32_t w32[2];
    uint64_t pl;
    (void)user;
    memcpy(w32, prefix, 8);
    memcpy(&pl, (const uint8_t *)prefix + 8, 8);
    if (le32toh(w32[0]) != BT_MAGIC || le32toh(w32[1]) != BT_HDR_LEN - BT_PREFIX_LEN ||
        le64toh(pl) > BT_MAX_SIZE)
        return GV_ERR_PROTO;
    *hdr_len_p = BT_HDR_LEN - BT_PREFIX_LEN;
    *payload_len_p = le64toh(pl);
    return GV_OK;
}

static gv_status_t bt_decode(const void *msg, size_t len, struct bt_msg *m)
{
    const uint8_t *h = msg;
    uint32_t k[2];
    uint64_t w64[4];
    if (len != BT_HDR_LEN)
        return GV_ERR_PROTO;
    memcpy(&w64[0], h + 8, 8);
    memcpy(k, h + 16, 8);
    memcpy(&w64[1], h + 24, 24);
    if (le32toh(k[1]) != BT_VERSION)
        return GV_ERR_VERSION;
    m->kind = le32toh(k[0]);
    m->payload_len = le64toh(w64[0]);
    m->seq = le64toh(w64[1]);
    m->t_ns = le64toh(w64[2]);
    m->arg = le64toh(w64[3]);
    return GV_OK;
}

static gv_status_t bt_send(struct bt_peer *p, uint32_t kind, uint64_t seq, uint64_t t_ns,
                           uint64_t arg, const uint8_t *payload, uint64_t len, gv_tp_send_cb cb)
{
    struct bt_slot *s = &p->slots[p->next_slot];
    struct gv_iov iov[2] = {{s->head, BT_HDR_LEN}, {(void *)(uintptr_t)payload, (size_t)len}};

    bt_encode(s->head, kind, seq, t_ns, arg, len);
    s->t_post = t_ns;
    s->p = p;
    gv_status_t status = gv_tp_send(p->c, iov, len > 0 ? 2 : 1, cb, s);
    if (status == GV_OK || status == GV_INPROGRESS)
        p->next_slot = p->next_slot + 1 == p->n_slots ? 0 : p->next_slot + 1;
    return status;
}

/* Payload buffers: 2 MiB aligned and backed by transparent huge pages where the kernel allows
 * it (as a real training job's tensor arena would be), so large messages do not pay a TLB
 * miss per 4 KiB page in the kernel's copies. Pages are touched here, before any timing. */
uint8_t *bt_buf_alloc(uint64_t len, int fill)
{
    const uint64_t huge = 2u << 20;
    uint64_t cap = len >= huge ? (len + huge - 1) / huge * huge : (len ? len : 1);
    uint8_t *p = gv_aligned_alloc(len >= huge ? huge : 4096, cap);
    if (p == NULL)
        return NULL;
    if (len >= huge)
        (void)madvise(p, cap, MADV_HUGEPAGE); /* advice only: fine if refused */
    memset(p, fill, cap);
    return p;
}

static struct bt_peer *bt_peer_new(uint32_t queue, uint64_t rx_cap)
{
    struct bt_peer *p = gv_calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->n_slots = queue + 1;
    p->slots = gv_calloc(p->n_slots, sizeof(*p->slots));
    if (rx_cap > 0) {
        p->rx = bt_buf_alloc(rx_cap, 0);
        p->rx_cap = rx_cap;
    }
    if (p->slots == NULL || (rx_cap > 0 && p->rx == NULL)) {
        gv_free(p->slots);
        gv_free(p->rx);
        gv_free(p);
        return NULL;
    }
    return p;
}

static void bt_peer_free(struct bt_peer *p)
{
    if (p == NULL)
        return;
    if (p->own_tx)
        gv_free(p->tx);
    gv_free(p->rx);
    gv_free(p->slots);
    gv_free(p);
}

static struct gv_tp_config bt_config(const struct bt_opts *o, uint32_t queue)
{
    struct gv_tp_config cfg;
    gv_tp_config_default(&cfg);
    cfg.max_send_queue = queue;
    cfg.max_send_queue_bytes = 64ull << 30; /* the queue references, never copies */
    cfg.sock_buf_bytes = o->sock_buf;
    cfg.connect_timeout_ms = 10000;
    return cfg;
}

/* ---------------------------------------------------------------- server */

struct bt_server {
    int seen, open;
};

static void bt_srv_accept(struct gv_listener *l, struct gv_conn *c, void *user)
{
    struct bt_server *srv = user;
    struct bt_peer *p = bt_peer_new(BT_SERVER_QUEUE, 0);
    (void)l;
    if (p == NULL) {
        gv_log(GV_LOG_ERROR, "bench: out of memory for connection %s", c->peer);
        gv_tp_conn_close(c);
        return;
    }
    p->c = c;
    c->user = p;
    srv->seen++;
    srv->open++;
}

static gv_status_t bt_srv_header(struct gv_conn *c, const void *msg, size_t msg_len,
                                 uint64_t payload_len, struct gv_iov *dst, int *dst_cnt, void *user)
{
    struct bt_peer *p = c->user;
    struct bt_msg m;
    (void)user;
    gv_status_t status = bt_decode(msg, msg_len, &m);
    if (status != GV_OK)
        return status;
    int keep = m.kind == BT_DATA || m.kind == BT_PING || m.kind == BT_PUSH;
    if (p == NULL || (keep && payload_len > p->rx_cap))
        return GV_ERR_PROTO;
    dst[0].base = keep ? p->rx : NULL; /* anything else's payload is dropped */
    dst[0].len = (size_t)payload_len;
    *dst_cnt = 1;
    return GV_OK;
}

static gv_status_t bt_srv_hello(struct bt_peer *p, const struct bt_msg *m)
{
    if (m->arg > BT_MAX_SIZE || p->rx != NULL) {
        gv_log(GV_LOG_ERROR, "bench: %s: bad hello (size %llu)", p->c->peer,
               (unsigned long long)m->arg);
        return GV_ERR_PROTO;
    }
    uint64_t cap = m->arg > 0 ? m->arg : 1;
    int answers = m->seq != BT_STREAM; /* only the round-trip modes send payload back */
    p->rx = bt_buf_alloc(cap, 0);
    p->tx = answers ? bt_buf_alloc(cap, 0xa5) : NULL;
    p->own_tx = 1;
    if (p->rx == NULL || (answers && p->tx == NULL)) {
        gv_log(GV_LOG_ERROR, "bench: out of memory for %llu-byte buffers", (unsigned long long)cap);
        return GV_ERR_NOMEM;
    }
    p->rx_cap = cap;
    p->tx_cap = answers ? cap : 0;
    return bt_send(p, BT_HELLO_ACK, m->seq, m->t_ns, 0, NULL, 0, NULL);
}

static void bt_srv_msg(struct gv_conn *c, const void *msg, size_t msg_len, void *user)
{
    struct bt_peer *p = c->user;
    struct bt_msg m = {0};
    gv_status_t status = bt_decode(msg, msg_len, &m);
    (void)user;

    if (status == GV_OK && p->rx == NULL && m.kind != BT_HELLO)
        status = GV_ERR_PROTO; /* nothing before the hello */
    if (status == GV_OK) {
        switch (m.kind) {
        case BT_HELLO: status = bt_srv_hello(p, &m); break;
        case BT_DATA:
        case BT_PUSH: break;
        case BT_PING:
            status = m.payload_len > p->tx_cap
                         ? GV_ERR_PROTO
                         : bt_send(p, BT_PONG, m.seq, m.t_ns, 0, p->tx, m.payload_len, NULL);
            break;
        case BT_PULL:
            status = m.arg > p->tx_cap
                         ? GV_ERR_PROTO
                         : bt_send(p, BT_PULL_RESP, m.seq, m.t_ns, 0, p->tx, m.arg, NULL);
            break;
        case BT_SYNC: status = bt_send(p, BT_SYNC_ACK, m.seq, m.t_ns, 0, NULL, 0, NULL); break;
        default: status = GV_ERR_PROTO; break;
        }
    }
    if (status != GV_OK && status != GV_INPROGRESS) {
        gv_log(GV_LOG_ERROR, "bench: %s: message kind %u: %s", c->peer, m.kind,
               gv_status_str(status));
        gv_tp_conn_close(c);
    }
}

static void bt_srv_close(struct gv_conn *c, gv_status_t reason, void *user)
{
    struct bt_server *srv = user;
    (void)reason;
    if (c->user == NULL)
        return;
    bt_peer_free(c->user);
    c->user = NULL;
    srv->open--;
}

gv_status_t bt_server_create(const struct bt_opts *o, const char *host, uint16_t port,
                             struct gv_tp **tp_p, uint16_t *port_p)
{
    struct gv_tp_config cfg = bt_config(o, BT_SERVER_QUEUE);
    struct gv_tp_handler h = {
        .prefix_len = BT_PREFIX_LEN,
        .parse_prefix = bt_parse_prefix,
        .on_header = bt_srv_header,
        .on_msg = bt_srv_msg,
        .on_accept = bt_srv_accept,
        .on_close = bt_srv_close,
    };
    struct bt_server *srv = gv_calloc(1, sizeof(*srv));
    struct gv_listener *l;
    struct gv_tp *tp;

    if (srv == NULL)
        return GV_ERR_NOMEM;
    gv_status_t status = gv_tp_create_auto(o->transport, host, &cfg, &h, srv, &tp);
    if (status != GV_OK) {
        gv_free(srv);
        return status;
    }
    status = gv_tp_listen(tp, host[0] ? host : NULL, port, &l);
    if (status != GV_OK) {
        gv_tp_destroy(tp);
        gv_free(srv);
        return status;
    }
    *port_p = gv_tp_listener_port(tp, l);
    *tp_p = tp;
    return GV_OK;
}

int bt_serve(struct gv_tp *tp, const _Atomic int *stop, int busy_poll)
{
    struct bt_server *srv = tp->user;
    int rc = 0;
    while (!*stop && !(srv->seen > 0 && srv->open == 0)) {
        if (gv_tp_progress(tp, busy_poll ? 0 : 200) < 0) {
            rc = 1;
            break;
        }
    }
    gv_tp_destroy(tp);
    gv_free(srv);
    return rc;
}

/* ---------------------------------------------------------------- client */

struct bt_client {
    struct bt_opts o;
    struct gv_tp *tp;
    struct bt_peer *peers[BT_MAX_CONNS];
    int n_peers;
    uint8_t *tx;
    uint64_t max_size;
    int closing;
    gv_status_t failed; /* GV_OK, or why a connection died */
    /* the running phase */
    uint64_t size, target, issued, done;
    uint64_t deadline_ns; /* duration mode; 0 otherwise */
    int recording;
    double lat_scale; /* ns -> reported usec */
    double *lat;
    size_t n_lat, cap_lat;
};

static void bt_record(struct bt_client *cl, uint64_t ns)
{
    if (!cl->recording)
        return;
    if (cl->n_lat == cl->cap_lat) { /* duration mode only: iteration mode sizes it up front */
        size_t cap = cl->cap_lat ? cl->cap_lat * 2 : 1u << 16;
        double *lat = gv_realloc(cl->lat, cap * sizeof(*lat));
        if (lat == NULL) {
            cl->recording = 0;
            cl->failed = GV_ERR_NOMEM;
            return;
        }
        cl->lat = lat;
        cl->cap_lat = cap;
    }
    cl->lat[cl->n_lat++] = (double)ns * cl->lat_scale;
}

/* now: a clock reading the caller already has (duration mode compares it with the end). */
static int bt_more_at(const struct bt_client *cl, uint64_t now)
{
    if (cl->deadline_ns != 0)
        return now < cl->deadline_ns;
    return cl->issued < cl->target;
}

static int bt_more(const struct bt_client *cl)
{
    return bt_more_at(cl, cl->deadline_ns != 0 ? gv_now_ns() : 0);
}

static void bt_fail(struct bt_client *cl, gv_status_t status)
{
    if (cl->failed == GV_OK)
        cl->failed = status;
}

/* Fills p's window of round trips (ping-pong / push-then-pull). */
static void bt_issue(struct bt_client *cl, struct bt_peer *p)
{
    for (;;) {
        uint64_t t = gv_now_ns(); /* one clock read: the deadline check and the timestamp */
        if (p->outstanding >= cl->o.window || !bt_more_at(cl, t) || cl->failed != GV_OK)
            return;
        gv_status_t st;
        if (cl->o.mode == BT_PINGPONG) {
            st = bt_send(p, BT_PING, cl->issued, t, 0, cl->tx, cl->size, NULL);
        } else {
            st = bt_send(p, BT_PUSH, cl->issued, t, 0, cl->tx, cl->size, NULL);
            if (st == GV_OK || st == GV_INPROGRESS)
                st = bt_send(p, BT_PULL, cl->issued, t, cl->size, NULL, 0, NULL);
        }
        if (st != GV_OK && st != GV_INPROGRESS) {
            gv_log(GV_LOG_ERROR, "bench: send: %s", gv_status_str(st));
            bt_fail(cl, st);
            return;
        }
        p->outstanding++;
        cl->issued++;
    }
}

static gv_status_t bt_cli_header(struct gv_conn *c, const void *msg, size_t msg_len,
                                 uint64_t payload_len, struct gv_iov *dst, int *dst_cnt, void *user)
{
    struct bt_peer *p = c->user;
    struct bt_msg m;
    (void)user;
    gv_status_t status = bt_decode(msg, msg_len, &m);
    if (status != GV_OK)
        return status;
    int keep = m.kind == BT_PONG || m.kind == BT_PULL_RESP;
    if (keep && payload_len > p->rx_cap)
        return GV_ERR_PROTO;
    dst[0].base = keep ? p->rx : NULL;
    dst[0].len = (size_t)payload_len;
    *dst_cnt = 1;
    return GV_OK;
}

static void bt_cli_msg(struct gv_conn *c, const void *msg, size_t msg_len, void *user)
{
    struct bt_client *cl = user;
    struct bt_peer *p = c->user;
    struct bt_msg m;

    if (bt_decode(msg, msg_len, &m) != GV_OK) {
        bt_fail(cl, GV_ERR_PROTO);
        return;
    }
    switch (m.kind) {
    case BT_HELLO_ACK:
    case BT_SYNC_ACK: p->acks++; break;
    case BT_PONG:
    case BT_PULL_RESP:
        bt_record(cl, gv_now_ns() - m.t_ns);
        p->outstanding--;
        cl->done++;
        bt_issue(cl, p);
        break;
    default: bt_fail(cl, GV_ERR_PROTO); break;
    }
}

static void bt_cli_close(struct gv_conn *c, gv_status_t reason, void *user)
{
    struct bt_client *cl = user;
    if (!cl->closing) {
        gv_log(GV_LOG_ERROR, "bench: connection to %s lost: %s", c->peer, gv_status_str(reason));
        bt_fail(cl, reason == GV_OK ? GV_ERR_CLOSED : reason);
    }
}

/* A stream send completed: its latency is post to completion. */
static void bt_stream_done(struct gv_conn *c, gv_status_t status, void *arg)
{
    struct bt_slot *s = arg;
    struct bt_client *cl = c->tp->user;
    s->p->outstanding--;
    if (status == GV_OK)
        bt_record(cl, gv_now_ns() - s->t_post);
}

static gv_status_t bt_wait(struct bt_client *cl, int (*pred)(struct bt_client *cl))
{
    while (!pred(cl) && cl->failed == GV_OK) {
        int n = gv_tp_progress(cl->tp, cl->o.busy_poll ? 0 : 1000);
        if (n < 0)
            bt_fail(cl, (gv_status_t)n);
    }
    return cl->failed;
}

static int bt_all_acked(struct bt_client *cl)
{
    for (int i = 0; i < cl->n_peers; i++)
        if (cl->peers[i]->acks < (int)cl->target)
            return 0;
    return 1;
}

static int bt_round_trips_done(struct bt_client *cl)
{
    return cl->done == cl->issued && !bt_more(cl);
}

/* Sends SYNC on every conn and waits for the answers: everything sent before has arrived. */
static gv_status_t bt_sync(struct bt_client *cl)
{
    int want = cl->peers[0]->acks + 1;
    for (int i = 0; i < cl->n_peers; i++) {
        gv_status_t st;
        while ((st = bt_send(cl->peers[i], BT_SYNC, 0, 0, 0, NULL, 0, NULL)) == GV_ERR_AGAIN)
            gv_tp_progress(cl->tp, 0);
        if (st != GV_OK && st != GV_INPROGRESS)
            return st;
    }
    cl->target = (uint64_t)want;
    return bt_wait(cl, bt_all_acked);
}

static gv_status_t bt_stream(struct bt_client *cl)
{
    uint64_t i = 0;
    while (bt_more(cl) && cl->failed == GV_OK) {
        struct bt_peer *p = cl->peers[i % (uint64_t)cl->n_peers];
        if (p->outstanding >= cl->o.window) {
            if (gv_tp_progress(cl->tp, cl->o.busy_poll ? 0 : 1000) < 0)
                bt_fail(cl, GV_ERR_IO);
            continue;
        }
        uint64_t t = gv_now_ns();
        gv_status_t st = bt_send(p, BT_DATA, cl->issued, t, 0, cl->tx, cl->size, bt_stream_done);
        if (st == GV_OK) {
            bt_record(cl, gv_now_ns() - t);
        } else if (st == GV_INPROGRESS) {
            p->outstanding++;
        } else if (st == GV_ERR_AGAIN) {
            gv_tp_progress(cl->tp, 0);
            continue;
        } else {
            bt_fail(cl, st);
            break;
        }
        cl->issued++;
        i++;
    }
    if (cl->failed != GV_OK)
        return cl->failed;
    return bt_sync(cl);
}

static gv_status_t bt_phase(struct bt_client *cl, uint64_t iters, int recording)
{
    cl->issued = cl->done = 0;
    cl->recording = recording;
    cl->target = iters;
    cl->deadline_ns = 0;
    if (recording && cl->o.duration_s > 0)
        cl->deadline_ns = gv_now_ns() + (uint64_t)(cl->o.duration_s * 1e9);
    if (cl->o.mode == BT_STREAM)
        return bt_stream(cl);
    for (int i = 0; i < cl->n_peers; i++)
        bt_issue(cl, cl->peers[i]);
    return bt_wait(cl, bt_round_trips_done);
}

static int bt_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[0..n). */
static double bt_pct(const double *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t rank = (size_t)((p / 100.0) * (double)n + 0.999999999);
    if (rank < 1)
        rank = 1;
    return v[GV_MIN(rank, n) - 1];
}

gv_status_t bt_client_run(struct bt_client *cl, uint64_t size, uint64_t iters, uint64_t warmup,
                          struct bt_result *res)
{
    gv_status_t status;

    cl->size = size;
    cl->n_lat = 0;
    if (cl->o.duration_s <= 0 && iters > cl->cap_lat) {
        double *lat = gv_realloc(cl->lat, iters * sizeof(*lat));
        if (lat == NULL)
            return GV_ERR_NOMEM;
        cl->lat = lat;
        cl->cap_lat = iters;
    }
    if (warmup > 0 && (status = bt_phase(cl, warmup, 0)) != GV_OK)
        return status;
    uint64_t t0 = gv_now_ns();
    if ((status = bt_phase(cl, iters, 1)) != GV_OK)
        return status;
    double secs = (double)(gv_now_ns() - t0) * 1e-9;
    bt_result_fill(res, size, cl->issued, size * cl->issued * (cl->o.mode == BT_STREAM ? 1 : 2),
                   secs, cl->lat, cl->n_lat);
    return GV_OK;
}

void bt_result_fill(struct bt_result *res, uint64_t size, uint64_t iters, uint64_t total_bytes,
                    double secs, double *lat, size_t n_lat)
{
    memset(res, 0, sizeof(*res));
    res->bytes = size;
    res->iters = iters;
    res->seconds = secs;
    res->total_bytes = total_bytes;
    res->gbps = secs > 0 ? (double)total_bytes * 8.0 / secs / 1e9 : 0;
    res->mrate = secs > 0 ? (double)iters / secs / 1e6 : 0;
    qsort(lat, n_lat, sizeof(double), bt_cmp_double);
    if (n_lat > 0) {
        res->lat_min = lat[0];
        res->lat_p50 = bt_pct(lat, n_lat, 50);
        res->lat_p99 = bt_pct(lat, n_lat, 99);
        res->lat_p999 = bt_pct(lat, n_lat, 99.9);
        res->lat_max = lat[n_lat - 1];
    }
}

gv_status_t bt_client_create(const struct bt_opts *o, const char *host, uint16_t port,
                             struct bt_client **cl_p)
{
    uint32_t queue = 2u * (uint32_t)o->window + 8;
    struct gv_tp_config cfg = bt_config(o, queue);
    struct gv_tp_handler h = {
        .prefix_len = BT_PREFIX_LEN,
        .parse_prefix = bt_parse_prefix,
        .on_header = bt_cli_header,
        .on_msg = bt_cli_msg,
        .on_close = bt_cli_close,
    };
    gv_status_t status = GV_ERR_NOMEM;
    struct bt_client *cl = gv_calloc(1, sizeof(*cl));

    if (cl == NULL)
        return GV_ERR_NOMEM;
    cl->o = *o;
    cl->lat_scale = (o->mode == BT_PINGPONG && !o->rtt) ? 0.5e-3 : 1e-3;
    for (int i = 0; i < o->n_sizes; i++)
        cl->max_size = GV_MAX(cl->max_size, o->sizes[i]);
    cl->tx = bt_buf_alloc(cl->max_size, 0x5a);
    if (cl->tx == NULL)
        goto err;
    if ((status = gv_tp_create_auto(o->transport, host, &cfg, &h, cl, &cl->tp)) != GV_OK)
        goto err;
    for (int i = 0; i < o->conns; i++) {
        /* a stream client receives only acks: no payload buffer */
        uint64_t rx = o->mode == BT_STREAM ? 0 : (cl->max_size ? cl->max_size : 1);
        struct bt_peer *p = bt_peer_new(queue, rx);
        if (p == NULL) {
            status = GV_ERR_NOMEM;
            goto err;
        }
        cl->peers[cl->n_peers++] = p;
        p->tx = cl->tx;
        if ((status = gv_tp_connect(cl->tp, host, port, &p->c)) != GV_OK)
            goto err;
        p->c->user = p;
        status = bt_send(p, BT_HELLO, (uint64_t)o->mode, 0, cl->max_size, NULL, 0, NULL);
        if (status != GV_OK && status != GV_INPROGRESS)
            goto err;
    }
    cl->target = 1;
    if ((status = bt_wait(cl, bt_all_acked)) != GV_OK)
        goto err;
    *cl_p = cl;
    return GV_OK;

err:
    bt_client_destroy(cl);
    return status;
}

const char *bt_client_backend(const struct bt_client *cl)
{
    return cl->tp->ops->name;
}

void bt_client_destroy(struct bt_client *cl)
{
    if (cl == NULL)
        return;
    cl->closing = 1;
    gv_tp_destroy(cl->tp);
    for (int i = 0; i < cl->n_peers; i++)
        bt_peer_free(cl->peers[i]);
    gv_free(cl->tx);
    gv_free(cl->lat);
    gv_free(cl);
}

uint64_t bt_auto_iters(enum bt_mode mode, uint64_t size)
{
    int stream = mode == BT_STREAM || mode == BT_RAWSTREAM;
    uint64_t budget = stream ? (4ull << 30) : (1ull << 30); /* bytes per size */
    uint64_t lo = stream ? 100 : 20, hi = stream ? 200000 : 100000;
    uint64_t n = budget / (size ? size : 1);
    return GV_MAX(lo, GV_MIN(hi, n));
}
