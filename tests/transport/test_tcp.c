/* test_tcp.c: the TCP backend beyond the common contract: traffic both ways at once, 64 MiB
 * messages, partial writes under tiny socket buffers, the send-queue bound, IPv6 and dual
 * stack, connect retry and its deadline, socket options, closing from inside callbacks.
 * Dead and misbehaving peers are in test_tcp_dead.c. */
#include "tt_tcp.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ traffic */

/* Both sides send N messages of varied sizes (0..16 KiB, several segments) with a window of
 * W in flight, at the same time; every payload is checked byte for byte, order per conn. */
static void test_both_ways(void)
{
    enum { N = 10000, W = 32, MAXLEN = 16384 };
    struct tt_side s, k;
    struct gv_conn *c, *conn[2];
    struct gv_tp_config cfg = base_cfg();
    static struct tt_msg slots[2][W];
    static uint8_t bufs[2][W][MAXLEN];
    uint64_t next[2] = {0, 0};
    struct tt_side *sides[] = {&s, &k, NULL};

    if (pair_up(&s, &k, &cfg, &cfg, MAXLEN, &c) != 0)
        goto out;
    s.rx_segs = 3;
    k.rx_segs = 2;
    GV_CHECK(tt_run(sides, side_has_conn, &s, TIMEOUT_MS));
    conn[0] = c;
    conn[1] = s.conns[0].c;
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < W; i++)
            slots[d][i].done = 1;
    uint64_t t0 = gv_now_ns();
    while ((s.msgs < N || k.msgs < N) && tt_ms_since(t0) < TIMEOUT_MS) {
        for (int d = 0; d < 2; d++) {
            while (next[d] < N && slots[d][next[d] % W].done) {
                uint64_t seq = next[d];
                size_t len = (size_t)((seq * 2654435761u) % (MAXLEN + 1));
                if (seq % 5 == 0)
                    len = 0;
                uint8_t *b = bufs[d][seq % W];
                tt_fill(b, len, seq);
                gv_status_t st =
                    tt_send(conn[d], &slots[d][seq % W], seq, 0, b, len, 1 + (int)(seq % 4));
                if (st == GV_ERR_AGAIN) {
                    slots[d][seq % W].done = 1;
                    break;
                }
                GV_CHECK(st == GV_OK || st == GV_INPROGRESS);
                next[d]++;
            }
        }
        gv_tp_progress(s.tp, 0);
        gv_tp_progress(k.tp, 0);
    }
    GV_CHECK_EQ(s.msgs, N);
    GV_CHECK_EQ(k.msgs, N);
    GV_CHECK_EQ(s.bad_payload + k.bad_payload, 0);
    GV_CHECK_EQ(s.bad_order + k.bad_order, 0);
    GV_CHECK_EQ(conn[0]->bytes_sent, conn[1]->bytes_recv);
    GV_CHECK_EQ(conn[1]->bytes_sent, conn[0]->bytes_recv);
out:
    tt_side_cleanup(&k);
    tt_side_cleanup(&s);
}

/* 64 MiB messages, scattered on both ends, checked byte for byte; then one back. */
static void test_64mib(void)
{
    const size_t len = 64u << 20;
    struct tt_side s, k;
    struct gv_conn *c;
    struct gv_tp_config cfg = base_cfg();
    struct tt_msg m[2], back;
    uint8_t *a = malloc(len), *b = malloc(len);
    struct tt_side *sides[] = {&s, &k, NULL};

    GV_CHECK(a != NULL && b != NULL);
    if (a == NULL || b == NULL || pair_up(&s, &k, &cfg, &cfg, len, &c) != 0)
        goto out;
    s.rx_segs = 4;
    tt_fill(a, len, 0);
    tt_fill(b, len, 1);
    GV_CHECK(tt_send(c, &m[0], 0, 0, a, len, 3) == GV_INPROGRESS); /* too big for the kernel */
    /* the second waits behind the first; a and b are distinct buffers */
    GV_CHECK(tt_send(c, &m[1], 1, 0, b, len, 1) == GV_INPROGRESS);
    struct want_msgs w = {&s, 2};
    GV_CHECK(tt_run(sides, have_msgs, &w, TIMEOUT_MS));
    GV_CHECK(m[0].cbs == 1 && m[0].status == GV_OK && m[1].cbs == 1 && m[1].status == GV_OK);
    GV_CHECK_EQ(s.msgs, 2);
    GV_CHECK_EQ(s.bad_payload, 0); /* both checked byte for byte on arrival */
    GV_CHECK_EQ(s.payload_bytes, 2 * (uint64_t)len);
    /* and back, into k's buffer (a still holds seq 0's pattern) */
    GV_CHECK(tt_send(s.conns[0].c, &back, 0, 0, a, len, 2) == GV_INPROGRESS);
    w.s = &k;
    w.n = 1;
    GV_CHECK(tt_run(sides, have_msgs, &w, TIMEOUT_MS));
    GV_CHECK_EQ(k.bad_payload, 0);
    GV_CHECK_EQ(k.msgs, 1);
out:
    tt_side_cleanup(&k);
    tt_side_cleanup(&s);
    free(a);
    free(b);
}

/* Tiny socket buffers force partial writes and reads at every boundary (prefix, header,
 * between segments); the content must still arrive byte for byte. */
static void test_partial_writes(void)
{
    enum { N = 300, MAXLEN = 40000 };
    struct tt_side s, k;
    struct gv_conn *c;
    struct gv_tp_config cfg = base_cfg();
    static struct tt_msg ms[N];
    static uint8_t bufs[N][MAXLEN];
    int inprogress = 0;
    struct tt_side *sides[] = {&s, &k, NULL};

    cfg.sock_buf_bytes = 4096;
    cfg.max_send_queue = N;
    if (pair_up(&s, &k, &cfg, &cfg, MAXLEN, &c) != 0)
        goto out;
    s.rx_segs = 5;
    for (int i = 0; i < N; i++) {
        size_t len = 1 + ((size_t)i * 7919) % MAXLEN;
        tt_fill(bufs[i], len, (uint64_t)i);
        gv_status_t st = tt_send(c, &ms[i], (uint64_t)i, 0, bufs[i], len, 1 + i % 15);
        GV_CHECK(st == GV_OK || st == GV_INPROGRESS);
        inprogress += st == GV_INPROGRESS;
        if (i % 10 == 0) /* let the receiver drain now and then, so writes are cut mid-way */
            gv_tp_progress(s.tp, 0);
    }
    GV_CHECK(inprogress > 0); /* the queue path really ran */
    struct want_msgs w = {&s, N};
    GV_CHECK(tt_run(sides, have_msgs, &w, TIMEOUT_MS));
    GV_CHECK_EQ(s.msgs, N);
    GV_CHECK_EQ(s.bad_payload, 0);
    GV_CHECK_EQ(s.bad_order, 0);
    for (int i = 0; i < N; i++)
        GV_CHECK(ms[i].done && (ms[i].ret == GV_OK || ms[i].status == GV_OK));
out:
    tt_side_cleanup(&k);
    tt_side_cleanup(&s);
}

/* ------------------------------------------------------------ backpressure */

/* While the peer does not read, sends queue up to max_send_queue messages or
 * max_send_queue_bytes, then GV_ERR_AGAIN with nothing queued; once the peer reads again the
 * queue drains, in order, and sending works again. */
static void test_send_queue_bound(void)
{
    enum { LEN = 100 << 10, MAXQ = 8 };
    struct tt_side s, k;
    struct gv_conn *c;
    struct gv_tp_config cfg = base_cfg();
    static struct tt_msg ms[64];
    static uint8_t buf[LEN];
    struct tt_side *sides[] = {&s, &k, NULL};

    cfg.sock_buf_bytes = 64 << 10;
    for (int pass = 0; pass < 2; pass++) {
        struct gv_tp_config kcfg = cfg;
        kcfg.max_send_queue = MAXQ;
        kcfg.max_send_queue_bytes = pass == 0 ? (64ull << 20) : 3ull * LEN;
        if (pair_up(&s, &k, &cfg, &kcfg, LEN, &c) != 0)
            goto out;
        s.verify = 0;
        tt_fill(buf, LEN, 0);
        struct tcp_conn *tc = tcp_conn_of(c);
        int sent = 0, again = 0;
        for (int i = 0; i < 64 && again < 3; i++) {
            gv_status_t st = tt_send(c, &ms[sent], (uint64_t)sent, 0, buf, LEN, 1);
            if (st == GV_ERR_AGAIN) {
                again++;
                continue;
            }
            GV_CHECK(st == GV_OK || st == GV_INPROGRESS);
            sent++;
            GV_CHECK(tc->sq_count <= MAXQ);
            GV_CHECK(tc->sq_count <= 1 || tc->sq_bytes <= kcfg.max_send_queue_bytes);
        }
        GV_CHECK_EQ(again, 3);
        if (pass == 0)
            GV_CHECK_EQ(tc->sq_count, MAXQ);
        else
            GV_CHECK(tc->sq_bytes <= 3ull * LEN && tc->sq_count <= 3);
        /* the receiver wakes up: everything arrives in order */
        struct want_msgs w = {&s, (uint64_t)sent};
        GV_CHECK(tt_run(sides, have_msgs, &w, TIMEOUT_MS));
        GV_CHECK_EQ(s.msgs, sent);
        GV_CHECK_EQ(s.bad_order, 0);
        GV_CHECK_EQ(tc->sq_count, 0);
        for (int i = 0; i < sent; i++)
            GV_CHECK(ms[i].done && ms[i].cbs <= 1);
        GV_CHECK(tt_send(c, &ms[sent], (uint64_t)sent, 0, buf, 100, 1) != GV_ERR_AGAIN);
        w.n = (uint64_t)sent + 1;
        GV_CHECK(tt_run(sides, have_msgs, &w, TIMEOUT_MS));
        tt_side_cleanup(&k);
        tt_side_cleanup(&s);
    }
    return;
out:
    tt_side_cleanup(&k);
    tt_side_cleanup(&s);
}

/* ------------------------------------------------------------ addresses and connect */

static int ipv6_available(void)
{
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    int ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

static void exchange_one(struct tt_side *s, struct tt_side *k, const char *host)
{
    struct gv_conn *c;
    struct tt_msg m;
    static uint8_t buf[1000];
    struct tt_side *sides[] = {s, k, NULL};
    uint64_t before = s->msgs;

    GV_CHECK_OK(gv_tp_connect(k->tp, host, s->port, &c));
    if (c == NULL)
        return;
    tt_fill(buf, sizeof(buf), before);
    tt_send(c, &m, before, 0, buf, sizeof(buf), 1);
    struct want_msgs w = {s, before + 1};
    GV_CHECK_MSG(tt_run(sides, have_msgs, &w, TIMEOUT_MS), "no message over %s", host);
    GV_CHECK(c->peer[0] != '\0');
    gv_tp_conn_close(c);
}

static void test_addresses(void)
{
    struct tt_side s, k;
    struct gv_tp_config cfg = base_cfg();
    int v6 = ipv6_available();

    if (!v6)
        printf("IPv6 cases skipped: no IPv6 on this kernel\n");
    if (v6) { /* IPv6 loopback */
        memset(&s, 0, sizeof(s));
        memset(&k, 0, sizeof(k));
        s.rx_cap = 1000;
        s.seq_check = 0;
        GV_CHECK_OK(tt_side_init(&s, "tcp", &cfg, "::1"));
        GV_CHECK_OK(tt_side_init(&k, "tcp", &cfg, NULL));
        if (s.tp != NULL && k.tp != NULL)
            exchange_one(&s, &k, "::1");
        tt_side_cleanup(&k);
        tt_side_cleanup(&s);
    }
    /* NULL host: dual stack, reachable over IPv4 and (when present) IPv6 */
    memset(&s, 0, sizeof(s));
    memset(&k, 0, sizeof(k));
    s.rx_cap = 1000;
    s.seq_check = 0;
    GV_CHECK_OK(tt_side_init(&s, "tcp", &cfg, ""));
    GV_CHECK_OK(tt_side_init(&k, "tcp", &cfg, NULL));
    if (s.tp != NULL && k.tp != NULL) {
        exchange_one(&s, &k, "127.0.0.1");
        exchange_one(&s, &k, "localhost");
        if (v6)
            exchange_one(&s, &k, "::1");
    }
    tt_side_cleanup(&k);
    tt_side_cleanup(&s);
    /* an address that is not ours cannot be bound */
    struct gv_tp *tp;
    struct gv_listener *l;
    struct gv_tp_handler h = tt_handler();
    GV_CHECK_OK(gv_tp_create("tcp", &cfg, &h, NULL, &tp));
    GV_CHECK(gv_tp_listen(tp, "192.0.2.1", 0, &l) != GV_OK);
    GV_CHECK(gv_tp_connect(tp, NULL, 1, &(struct gv_conn *){NULL}) == GV_ERR_INVAL);
    gv_tp_destroy(tp);
}

struct late_listener {
    uint16_t port;
    int delay_ms;
    int fd;
};

static void *late_listen_main(void *arg)
{
    struct late_listener *ll = arg;
    usleep((useconds_t)ll->delay_ms * 1000);
    ll->fd = raw_listen(&ll->port, 0);
    return NULL;
}

/* A peer that starts listening ~300 ms after we connect is reached by the retries; a port
 * nobody listens on gives GV_ERR_TIMEOUT at the deadline, not before, not much after. */
static void test_connect_retry(void)
{
    struct gv_tp_config cfg = base_cfg();
    struct gv_tp_handler h = tt_handler();
    struct gv_tp *tp = NULL;
    struct gv_conn *c = NULL;
    struct late_listener ll = {.delay_ms = 300, .fd = -1};
    pthread_t th;
    static struct tt_side rec; /* the handler's user: records the close */

    /* pick a free port, then release it for the late listener */
    int probe = raw_listen(&ll.port, 0);
    GV_CHECK(probe >= 0);
    close(probe);
    GV_CHECK_OK(gv_tp_create("tcp", &cfg, &h, &rec, &tp));
    if (tp == NULL)
        return;
    GV_CHECK(pthread_create(&th, NULL, late_listen_main, &ll) == 0);
    uint64_t t0 = gv_now_ns();
    GV_CHECK_OK(gv_tp_connect(tp, "127.0.0.1", ll.port, &c));
    double ms = tt_ms_since(t0);
    pthread_join(th, NULL);
    GV_CHECK(ll.fd >= 0);
    GV_CHECK_MSG(ms >= 200 && ms < 3000, "late listener reached after %.0f ms", ms);
    gv_tp_conn_close(c);
    GV_CHECK(rec.n_conns == 1 && rec.conns[0].closes == 1 && rec.conns[0].reason == GV_OK);
    if (ll.fd >= 0)
        close(ll.fd);
    gv_tp_destroy(tp);

    /* nobody listens: the deadline holds */
    cfg.connect_timeout_ms = 400;
    GV_CHECK_OK(gv_tp_create("tcp", &cfg, &h, &rec, &tp));
    t0 = gv_now_ns();
    GV_CHECK_STATUS(gv_tp_connect(tp, "127.0.0.1", ll.port, &c), GV_ERR_TIMEOUT);
    ms = tt_ms_since(t0);
    GV_CHECK_MSG(ms >= 380 && ms < 1500, "closed port gave up after %.0f ms", ms);
    gv_tp_destroy(tp);
}

/* gv_tp_connect_start: returns at once; the event loop retries a peer that listens only
 * ~300 ms later, meanwhile a message is queued, and it arrives intact once connected; the
 * caller's loop is never blocked. Nobody listening, or a name that does not resolve: the
 * connection closes with GV_ERR_TIMEOUT at the deadline (its queued send failed first). The
 * blocking connect retries a name that does not resolve as well (issue 18: a DNS error is
 * retried until the connect timeout), instead of failing at once. */
static void test_connect_async(void)
{
    struct gv_tp_config cfg = base_cfg();
    static struct tt_side s, k;
    static uint8_t buf[5000];
    struct tt_msg m;
    struct gv_conn *c = NULL;
    uint16_t port = 0;
    int probe = raw_listen(&port, 0);
    GV_CHECK(probe >= 0);
    close(probe);
    memset(&k, 0, sizeof(k));
    memset(&s, 0, sizeof(s));
    GV_CHECK_OK(tt_side_init(&k, "tcp", &cfg, NULL));
    GV_CHECK(gv_tp_has_cap(k.tp, GV_TP_CAP_CONNECT_ASYNC));
    uint64_t t0 = gv_now_ns();
    GV_CHECK_OK(gv_tp_connect_start(k.tp, "127.0.0.1", port, &c));
    GV_CHECK_MSG(tt_ms_since(t0) < 100, "connect_start took %.0f ms", tt_ms_since(t0));
    tt_track(&k, c);
    tt_fill(buf, sizeof(buf), 0);
    GV_CHECK_STATUS(tt_send(c, &m, 0, 0, buf, sizeof(buf), 2), GV_INPROGRESS);
    /* 300 ms of the loop: each call returns within its own timeout (never stuck connecting) */
    int slow = 0;
    while (tt_ms_since(t0) < 300) {
        uint64_t t1 = gv_now_ns();
        gv_tp_progress(k.tp, 20);
        slow += tt_ms_since(t1) > 150;
    }
    GV_CHECK_EQ(slow, 0);
    GV_CHECK_EQ(m.done, 0);
    /* the listener comes up */
    struct gv_tp_handler h = tt_handler();
    s.rx_cap = sizeof(buf);
    s.discard_from = GV_TP_MAX_DST_IOV;
    s.seq_check = 1;
    s.verify = 1;
    GV_CHECK_OK(gv_tp_create("tcp", &cfg, &h, &s, &s.tp));
    GV_CHECK_OK(gv_tp_listen(s.tp, "127.0.0.1", port, &s.l));
    struct tt_side *sides[] = {&s, &k, NULL};
    struct want_msgs w = {&s, 1};
    GV_CHECK_MSG(tt_run(sides, have_msgs, &w, TIMEOUT_MS), "the queued message never arrived");
    GV_CHECK_EQ(s.bad_payload, 0);
    GV_CHECK(m.done && m.status == GV_OK);
    char want[32];
    snprintf(want, sizeof(want), "127.0.0.1:%u", (unsigned)port);
    GV_CHECK_MSG(strcmp(c->peer, want) == 0, "peer %s", c->peer);
    tt_side_cleanup(&s);
    tt_side_cleanup(&k);

    /* nobody listens, or the name does not resolve: closed at the deadline */
    static const char *const hosts[] = {"127.0.0.1", "gravac-no-such-host.invalid"};
    cfg.connect_timeout_ms = 400;
    for (size_t i = 0; i < GV_ARRAY_LEN(hosts); i++) {
        memset(&k, 0, sizeof(k));
        GV_CHECK_OK(tt_side_init(&k, "tcp", &cfg, NULL));
        t0 = gv_now_ns();
        GV_CHECK_OK(gv_tp_connect_start(k.tp, hosts[i], port, &c));
        struct tt_conn_rec *r = tt_track(&k, c);
        GV_CHECK_STATUS(tt_send(c, &m, 0, 0, buf, 100, 1), GV_INPROGRESS);
        struct tt_side *one[] = {&k, NULL};
        GV_CHECK(tt_run(one, rec_closed, r, TIMEOUT_MS));
        double ms = tt_ms_since(t0);
        GV_CHECK_STATUS(r->reason, GV_ERR_TIMEOUT);
        GV_CHECK_MSG(ms >= 380 && ms < 1500, "%s: gave up after %.0f ms", hosts[i], ms);
        GV_CHECK(m.done && m.status != GV_OK);
        tt_side_cleanup(&k);
        /* the blocking connect waits for the deadline as well */
        struct gv_tp *tp = NULL;
        GV_CHECK_OK(gv_tp_create("tcp", &cfg, &h, NULL, &tp));
        t0 = gv_now_ns();
        GV_CHECK_STATUS(gv_tp_connect(tp, hosts[i], port, &c), GV_ERR_TIMEOUT);
        ms = tt_ms_since(t0);
        GV_CHECK_MSG(ms >= 380 && ms < 1500, "%s: blocking connect gave up after %.0f ms", hosts[i],
                     ms);
        gv_tp_destroy(tp);
    }
}

static int fcntl_nonblock_check(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && (fl & O_NONBLOCK) != 0;
}

/* The socket options the design relies on are really set. */
static void test_socket_options(void)
{
    struct tt_side s, k;
    struct gv_conn *c;
    struct gv_tp_config cfg = base_cfg();
    int v = 0;
    socklen_t len = sizeof(v);

    cfg.sock_buf_bytes = 1 << 20;
    cfg.io_timeout_ms = 7000;
    cfg.keepalive_idle_s = 4;
    if (pair_up(&s, &k, &cfg, &cfg, 16, &c) == 0) {
        int fd = tcp_conn_of(c)->fd;
        GV_CHECK(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &len) == 0 && v == 1);
        GV_CHECK(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, &len) == 0 && v == 1);
        GV_CHECK(getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &v, &len) == 0 && v == 4);
        GV_CHECK(getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &v, &len) == 0 && v == 7000);
        GV_CHECK(getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, &len) == 0 && v >= (1 << 20));
        GV_CHECK(getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, &len) == 0 && v >= (1 << 20));
        GV_CHECK(fcntl_nonblock_check(fd));
    }
    tt_side_cleanup(&k);
    tt_side_cleanup(&s);
}

/* ------------------------------------------------------------ closing from callbacks */

struct cb_log {
    char ev[16];
    int n;
    struct gv_conn *c;
};
static struct cb_log cbl;

static void close_from_send_cb(struct gv_conn *c, gv_status_t status, void *arg)
{
    (void)arg;
    cbl.ev[cbl.n++] = status == GV_OK ? 'o' : 'e';
    if (status == GV_OK) {
        gv_tp_conn_close(c); /* our own conn, from inside its callback */
        cbl.ev[cbl.n++] = 'x';
    }
}

static void record_close(struct gv_conn *c, gv_status_t reason, void *user)
{
    (void)user;
    cbl.ev[cbl.n++] = reason == GV_OK ? 'C' : 'E';
    gv_tp_conn_close(c); /* closing again from on_close is a no-op */
    struct gv_iov iov = {"x", 1};
    if (gv_tp_send(c, &iov, 1, NULL, NULL) == GV_ERR_CLOSED)
        cbl.ev[cbl.n++] = 's';
}

static void test_close_in_send_cb(void)
{
    const size_t len = 4u << 20;
    struct tt_side s;
    struct gv_tp_config cfg = base_cfg();
    struct gv_tp_handler h = tt_handler();
    struct gv_tp *tp = NULL;
    struct gv_conn *c;
    uint8_t *buf = calloc(1, len);
    uint8_t head[TT_HDR_LEN];

    memset(&s, 0, sizeof(s));
    memset(&cbl, 0, sizeof(cbl));
    s.rx_cap = len;
    s.verify = 0;
    cfg.sock_buf_bytes = 64 << 10;
    h.on_close = record_close;
    if (buf == NULL || tt_side_init(&s, "tcp", &cfg, "127.0.0.1") != GV_OK ||
        gv_tp_create("tcp", &cfg, &h, NULL, &tp) != GV_OK ||
        gv_tp_connect(tp, "127.0.0.1", s.port, &c) != GV_OK) {
        GV_CHECK_MSG(0, "setup failed");
        goto out;
    }
    raw_head(head, 0, TT_HDR_LEN - TT_PREFIX_LEN, len);
    struct gv_iov iov[2] = {{head, sizeof(head)}, {buf, len}};
    GV_CHECK_STATUS(gv_tp_send(c, iov, 2, close_from_send_cb, NULL), GV_INPROGRESS);
    GV_CHECK_STATUS(gv_tp_send(c, iov, 2, close_from_send_cb, NULL), GV_INPROGRESS);
    uint64_t t0 = gv_now_ns();
    while (cbl.n < 5 && tt_ms_since(t0) < TIMEOUT_MS) {
        gv_tp_progress(tp, 0);
        gv_tp_progress(s.tp, 0);
    }
    /* first send completes and closes; the second fails before on_close; nothing after */
    GV_CHECK_MSG(cbl.n == 5 && memcmp(cbl.ev, "oeCsx", 5) == 0, "callback order %.*s", cbl.n,
                 cbl.ev);
    gv_tp_progress(tp, 10);
    GV_CHECK_EQ(cbl.n, 5);
out:
    gv_tp_destroy(tp);
    tt_side_cleanup(&s);
    free(buf);
}

static void run(const char *name, void (*fn)(void))
{
    uint64_t t0 = gv_now_ns();
    int before = gv_check_failed_;
    fn();
    printf("%-32s %s (%.0f ms)\n", name, gv_check_failed_ == before ? "ok" : "FAILED",
           tt_ms_since(t0));
    fflush(stdout);
}

int main(void)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {
        {"both_ways", test_both_ways},           {"64mib", test_64mib},
        {"partial_writes", test_partial_writes}, {"send_queue_bound", test_send_queue_bound},
        {"addresses", test_addresses},           {"connect_retry", test_connect_retry},
        {"socket_options", test_socket_options}, {"close_in_send_cb", test_close_in_send_cb},
        {"connect_async", test_connect_async},
    };
    gv_log_set_level(GV_LOG_ERROR);
    for (size_t i = 0; i < GV_ARRAY_LEN(tests); i++)
        run(tests[i].name, tests[i].fn);
    return gv_check_summary();
}
