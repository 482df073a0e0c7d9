/* test_tcp_defer.c: deferred receive (GV_TP_CAP_DEFER_RECV) on the TCP backend: a message whose
 * on_header answers GV_ERR_AGAIN waits unread (in the kernel, not in our memory) until
 * gv_tp_conn_resume_recv, then on_header runs again for the same message; other connections
 * and later messages go on; a deferred connection is not timed out and does not spin; a reset
 * while deferred closes it; resuming from inside a callback and from outside both work. */
#include "check.h"
#include "gv_transport.h"

#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#define PFX 16
#define HDR 32
#define MAXC 8

struct pfx {
    uint32_t magic, hdr_len;
    uint64_t payload_len;
};
struct hdr {
    uint64_t seq;
    uint32_t kind, pad;
};

struct conn_st {
    struct gv_conn *c;
    int defer;        /* answer AGAIN to on_header while set */
    int header_calls; /* on_header calls */
    uint64_t msgs, last_seq;
    int closes;
    gv_status_t reason;
    uint8_t *buf; /* payload destination */
    size_t cap;
};

struct side {
    struct gv_tp *tp;
    struct gv_listener *l;
    uint16_t port;
    struct conn_st cs[MAXC];
    int n;
    int order[64], n_order;        /* conn index of each delivered message */
    struct gv_conn *resume_on_msg; /* resumed from on_msg when set */
    size_t cap;
};

static struct conn_st *st_of(struct side *s, struct gv_conn *c)
{
    for (int i = 0; i < s->n; i++)
        if (s->cs[i].c == c)
            return &s->cs[i];
    return NULL;
}

static gv_status_t parse_prefix(const void *p, uint32_t *hl, uint64_t *pl, void *user)
{
    (void)user;
    struct pfx x;
    memcpy(&x, p, sizeof(x));
    if (x.magic != 0x44454652u || x.hdr_len != HDR - PFX)
        return GV_ERR_PROTO;
    *hl = x.hdr_len;
    *pl = x.payload_len;
    return GV_OK;
}

static gv_status_t on_header(struct gv_conn *c, const void *msg, size_t len, uint64_t payload_len,
                             struct gv_iov *dst, int *cnt, void *user)
{
    (void)msg, (void)len;
    struct side *s = user;
    struct conn_st *st = st_of(s, c);
    st->header_calls++;
    if (st->defer)
        return GV_ERR_AGAIN;
    if (payload_len > st->cap)
        return GV_ERR_PROTO;
    dst[0] = (struct gv_iov){st->buf, (size_t)payload_len};
    *cnt = 1;
    return GV_OK;
}

static void on_msg(struct gv_conn *c, const void *msg, size_t len, void *user)
{
    (void)len;
    struct side *s = user;
    struct conn_st *st = st_of(s, c);
    struct hdr h;
    memcpy(&h, (const uint8_t *)msg + PFX, sizeof(h));
    st->msgs++;
    st->last_seq = h.seq;
    if (s->n_order < 64)
        s->order[s->n_order++] = (int)(st - s->cs);
    if (s->resume_on_msg != NULL) {
        GV_CHECK_OK(gv_tp_conn_resume_recv(s->resume_on_msg));
        st_of(s, s->resume_on_msg)->defer = 0;
        s->resume_on_msg = NULL;
    }
}

static void on_accept(struct gv_listener *l, struct gv_conn *c, void *user)
{
    (void)l;
    struct side *s = user;
    struct conn_st *st = &s->cs[s->n++];
    memset(st, 0, sizeof(*st));
    st->c = c;
    st->cap = s->cap;
    st->buf = calloc(1, s->cap);
}

static void on_close(struct gv_conn *c, gv_status_t reason, void *user)
{
    struct conn_st *st = st_of(user, c);
    if (st != NULL) {
        st->closes++;
        st->reason = reason;
        st->c = NULL;
    }
}

static int side_init(struct side *s, int io_timeout_ms, size_t cap, int listen)
{
    memset(s, 0, sizeof(*s));
    s->cap = cap;
    struct gv_tp_config cfg;
    gv_tp_config_default(&cfg);
    cfg.io_timeout_ms = io_timeout_ms;
    cfg.connect_timeout_ms = 5000;
    struct gv_tp_handler h = {.prefix_len = PFX,
                              .parse_prefix = parse_prefix,
                              .on_header = on_header,
                              .on_msg = on_msg,
                              .on_accept = on_accept,
                              .on_close = on_close};
    if (gv_tp_create("tcp", &cfg, &h, s, &s->tp) != GV_OK)
        return -1;
    if (listen) {
        if (gv_tp_listen(s->tp, "127.0.0.1", 0, &s->l) != GV_OK)
            return -1;
        s->port = gv_tp_listener_port(s->tp, s->l);
    }
    return 0;
}

static void side_cleanup(struct side *s)
{
    gv_tp_destroy(s->tp);
    for (int i = 0; i < MAXC; i++)
        free(s->cs[i].buf);
}

struct out {
    uint8_t head[HDR];
    uint8_t *payload;
    size_t len;
    int done;
};

static void sent_cb(struct gv_conn *c, gv_status_t st, void *arg)
{
    (void)c;
    struct out *o = arg;
    o->done = st == GV_OK ? 1 : -1;
}

static gv_status_t send_msg(struct gv_conn *c, struct out *o, uint64_t seq, size_t len)
{
    struct pfx p = {0x44454652u, HDR - PFX, len};
    struct hdr h = {seq, 1, 0};
    memcpy(o->head, &p, sizeof(p));
    memcpy(o->head + PFX, &h, sizeof(h));
    o->payload = malloc(len ? len : 1);
    for (size_t i = 0; i < len; i++)
        o->payload[i] = (uint8_t)(seq * 31 + i * 7 + (i >> 9));
    o->len = len;
    struct gv_iov iov[2] = {{o->head, HDR}, {o->payload, len}};
    gv_status_t st = gv_tp_send(c, iov, len ? 2 : 1, sent_cb, o);
    if (st == GV_OK)
        o->done = 1;
    return st;
}

static int payload_ok(const uint8_t *buf, uint64_t seq, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (buf[i] != (uint8_t)(seq * 31 + i * 7 + (i >> 9)))
            return 0;
    return 1;
}

/* progress both sides for ms milliseconds (or until pred), counting calls that did work */
static int run(struct side *a, struct side *b, int ms, int (*pred)(void *), void *arg, int *busy_p)
{
    uint64_t end = gv_now_ns() + (uint64_t)ms * 1000000ull;
    int busy = 0;
    while (gv_now_ns() < end) {
        if (pred != NULL && pred(arg))
            return 1;
        if (gv_tp_progress(a->tp, 2) > 0)
            busy++;
        if (b != NULL && gv_tp_progress(b->tp, 2) > 0)
            busy++;
    }
    if (busy_p != NULL)
        *busy_p = busy;
    return pred != NULL ? pred(arg) : 1;
}

static int has_n_conns(void *arg)
{
    return ((struct side *)arg)->n >= 2;
}
static int order_len2(void *arg)
{
    return ((struct side *)arg)->n_order >= 2;
}

/* B's message is deferred until A's arrives; B is resumed from A's on_msg. B waits longer than
 * the I/O timeout without being closed, and its conn does not spin meanwhile. */
static void test_order_across_conns(void)
{
    struct side srv, cli;
    GV_CHECK(side_init(&srv, 150, 1 << 20, 1) == 0);
    GV_CHECK(side_init(&cli, 5000, 16, 0) == 0);
    GV_CHECK(gv_tp_has_cap(srv.tp, GV_TP_CAP_DEFER_RECV));
    struct gv_conn *ca, *cb;
    GV_CHECK_OK(gv_tp_connect(cli.tp, "127.0.0.1", srv.port, &ca));
    run(&srv, &cli, 2000, has_n_conns, &srv, NULL); /* accept A first */
    GV_CHECK_OK(gv_tp_connect(cli.tp, "127.0.0.1", srv.port, &cb));
    GV_CHECK(run(&srv, &cli, 2000, has_n_conns, &srv, NULL));
    /* both deferred at first: whichever sends, nothing is delivered */
    srv.cs[0].defer = srv.cs[1].defer = 1;
    struct out ob, oa;
    memset(&ob, 0, sizeof(ob));
    memset(&oa, 0, sizeof(oa));
    GV_CHECK(send_msg(cb, &ob, 7, 100000) >= 0);
    int busy = 0;
    run(&srv, &cli, 400, NULL, NULL, &busy); /* > io timeout (150 ms) */
    GV_CHECK_EQ(srv.cs[1].header_calls, 1);
    GV_CHECK_EQ(srv.cs[1].msgs, 0);
    GV_CHECK_EQ(srv.cs[1].closes, 0); /* not timed out while deferred */
    GV_CHECK_MSG(busy < 20, "deferred conn made progress() busy %d times", busy);
    /* A's message arrives and resumes B from on_msg */
    srv.cs[0].defer = 0;
    srv.resume_on_msg = srv.cs[1].c;
    GV_CHECK(send_msg(ca, &oa, 3, 5000) >= 0);
    GV_CHECK(run(&srv, &cli, 5000, order_len2, &srv, NULL));
    GV_CHECK_EQ(srv.n_order, 2);
    GV_CHECK_EQ(srv.order[0], 0);
    GV_CHECK_EQ(srv.order[1], 1);
    GV_CHECK_EQ(srv.cs[1].header_calls, 2);
    GV_CHECK(payload_ok(srv.cs[1].buf, 7, 100000));
    GV_CHECK(payload_ok(srv.cs[0].buf, 3, 5000));
    GV_CHECK_EQ(srv.cs[0].closes + srv.cs[1].closes, 0);
    free(oa.payload);
    free(ob.payload);
    side_cleanup(&cli);
    side_cleanup(&srv);
}

static int msgs5(void *arg)
{
    return ((struct side *)arg)->cs[0].msgs >= 5;
}
static int msgs2(void *arg)
{
    return ((struct side *)arg)->cs[0].msgs >= 2;
}

static struct out *big_out;
static int big_done(void *arg)
{
    return ((struct side *)arg)->cs[0].msgs >= 6 && big_out->done != 0;
}

/* Small messages back to back (read ahead in one read): the third is deferred, resumed from
 * outside the callbacks; all five arrive in order and intact, and a big one deferred for a
 * while still completes on the sender once resumed. */
static void test_read_ahead_and_big(void)
{
    struct side srv, cli;
    GV_CHECK(side_init(&srv, 5000, 32 << 20, 1) == 0);
    GV_CHECK(side_init(&cli, 5000, 16, 0) == 0);
    struct gv_conn *c;
    GV_CHECK_OK(gv_tp_connect(cli.tp, "127.0.0.1", srv.port, &c));
    struct out o[6];
    memset(o, 0, sizeof(o));
    uint64_t seqs[5] = {1, 2, 3, 4, 5};
    run(&srv, &cli, 100, NULL, NULL, NULL);
    for (int i = 0; i < 2; i++)
        GV_CHECK(send_msg(c, &o[i], seqs[i], 100) >= 0);
    GV_CHECK(run(&srv, &cli, 3000, msgs2, &srv, NULL));
    srv.cs[0].defer = 1; /* defer the third, while 3, 4, 5 arrive in one read */
    for (int i = 2; i < 5; i++)
        GV_CHECK(send_msg(c, &o[i], seqs[i], 100) >= 0);
    run(&srv, &cli, 200, NULL, NULL, NULL);
    GV_CHECK_EQ(srv.cs[0].msgs, 2);
    srv.cs[0].defer = 0;
    GV_CHECK_OK(gv_tp_conn_resume_recv(srv.cs[0].c));
    GV_CHECK_OK(gv_tp_conn_resume_recv(srv.cs[0].c)); /* twice is harmless */
    GV_CHECK(run(&srv, &cli, 3000, msgs5, &srv, NULL));
    GV_CHECK_EQ(srv.cs[0].last_seq, 5);
    GV_CHECK(payload_ok(srv.cs[0].buf, 5, 100));
    GV_CHECK_OK(gv_tp_conn_resume_recv(srv.cs[0].c)); /* nothing deferred: no-op */

    /* a 24 MiB message deferred: the sender cannot finish until we read */
    srv.cs[0].defer = 1;
    GV_CHECK(send_msg(c, &o[5], 9, 24u << 20) >= 0);
    run(&srv, &cli, 300, NULL, NULL, NULL);
    GV_CHECK_EQ(o[5].done, 0);
    GV_CHECK_EQ(srv.cs[0].msgs, 5);
    srv.cs[0].defer = 0;
    GV_CHECK_OK(gv_tp_conn_resume_recv(srv.cs[0].c));
    big_out = &o[5];
    GV_CHECK(run(&srv, &cli, 10000, big_done, &srv, NULL));
    GV_CHECK_EQ(srv.cs[0].msgs, 6);
    GV_CHECK_EQ(o[5].done, 1);
    GV_CHECK(payload_ok(srv.cs[0].buf, 9, 24u << 20));
    for (int i = 0; i < 6; i++)
        free(o[i].payload);
    side_cleanup(&cli);
    side_cleanup(&srv);
}

static int closed0(void *arg)
{
    return ((struct side *)arg)->cs[0].closes > 0;
}

/* A peer that resets its connection while the message is deferred: closed, bounded. */
static void test_reset_while_deferred(void)
{
    struct side srv, cli;
    GV_CHECK(side_init(&srv, 5000, 1 << 20, 1) == 0);
    GV_CHECK(side_init(&cli, 5000, 16, 0) == 0);
    struct gv_conn *c;
    GV_CHECK_OK(gv_tp_connect(cli.tp, "127.0.0.1", srv.port, &c));
    run(&srv, &cli, 100, NULL, NULL, NULL);
    srv.cs[0].defer = 1;
    struct out o;
    memset(&o, 0, sizeof(o));
    GV_CHECK(send_msg(c, &o, 4, 1000) >= 0);
    run(&srv, &cli, 100, NULL, NULL, NULL);
    GV_CHECK_EQ(srv.cs[0].header_calls, 1);
    /* reset: SO_LINGER 0 on the client's socket (fd of the first conn of its transport) */
    int fd = -1;
    for (int i = 3; i < 1024 && fd < 0; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        if (getpeername(i, (struct sockaddr *)&ss, &sl) == 0 &&
            ((struct sockaddr_in *)&ss)->sin_port == htons(srv.port))
            fd = i;
    }
    GV_CHECK(fd >= 0);
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    gv_tp_conn_close(c);
    uint64_t t0 = gv_now_ns();
    GV_CHECK(run(&srv, NULL, 3000, closed0, &srv, NULL));
    GV_CHECK(gv_now_ns() - t0 < 2000000000ull);
    GV_CHECK(srv.cs[0].reason != GV_OK);
    free(o.payload);
    side_cleanup(&cli);
    side_cleanup(&srv);
}

int main(void)
{
    test_order_across_conns();
    test_read_ahead_and_big();
    test_reset_while_deferred();
    return gv_check_summary();
}
