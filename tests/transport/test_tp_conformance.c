/* test_tp_conformance.c: the transport contract, checked with the same test bodies against
 * every backend name the project knows ("tcp", "rdma"). A backend whose create says
 * GV_ERR_UNSUPPORTED or GV_ERR_NODEV is reported as skipped for that backend; if none ran at
 * all the test exits 77. Backend-specific behaviour (socket options, timeouts, retries) is
 * tested in test_tcp.c and test_rdma.c. */
#include "check.h"
#include "tt.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TIMEOUT_MS 10000

static const char *backend;

static struct gv_tp_config small_cfg(void)
{
    struct gv_tp_config cfg;
    gv_tp_config_default(&cfg);
    cfg.io_timeout_ms = 5000;
    cfg.connect_timeout_ms = 5000;
    return cfg;
}

/* A connected pair: server s (listening on loopback), client k with conn *c_p. */
static int pair_up(struct tt_side *s, struct tt_side *k, const struct gv_tp_config *cfg,
                   size_t rx_cap, struct gv_conn **c_p)
{
    memset(s, 0, sizeof(*s));
    memset(k, 0, sizeof(*k));
    s->rx_cap = k->rx_cap = rx_cap;
    if (tt_side_init(s, backend, cfg, "127.0.0.1") != GV_OK)
        return -1;
    if (tt_side_init(k, backend, cfg, NULL) != GV_OK)
        return -1;
    if (gv_tp_connect(k->tp, "127.0.0.1", s->port, c_p) != GV_OK)
        return -1;
    tt_track(k, *c_p);
    return 0;
}

struct want_msgs {
    struct tt_side *s;
    uint64_t n;
};
static int have_msgs(void *arg)
{
    struct want_msgs *w = arg;
    return w->s->msgs >= w->n;
}

struct want_closed {
    struct tt_side *s;
    int n; /* conn records that have seen on_close */
};
static int have_closed(void *arg)
{
    struct want_closed *w = arg;
    int n = 0;
    for (int i = 0; i < w->s->n_conns; i++)
        n += w->s->conns[i].closes > 0;
    return n >= w->n;
}

struct want_accepts {
    struct tt_side *s;
    int n;
};
static int have_accepts(void *arg)
{
    struct want_accepts *w = arg;
    return w->s->accepts >= w->n;
}

static int msg_done(void *arg)
{
    return ((struct tt_msg *)arg)->done;
}

/* Messages both ways, with and without payload, several segments each way; the send
 * contract (GV_OK: no callback; GV_INPROGRESS: exactly one); on_accept; byte counters. */
static void test_exchange(void)
{
    struct tt_side s, k;
    struct gv_conn *c;
    struct gv_tp_config cfg = small_cfg();
    enum { N = 200 };
    static struct tt_msg ms[N], back[N];
    uint8_t *buf = malloc(70000);

    GV_CHECK(buf != NULL);
    if (pair_up(&s, &k, &cfg, 70000, &c) != 0) {
        GV_CHECK_MSG(0, "%s: pair_up failed", backend);
        goto out;
    }
    s.rx_segs = 3;
    for (int i = 0; i < N; i++) {
        size_t len = (size_t)(i % 7 == 0 ? 0 : (i * 331) % 70000);
        tt_fill(buf, len, (uint64_t)i); /* every message's payload differs */
        gv_status_t st = tt_send(c, &ms[i], (uint64_t)i, 0, buf, len, 1 + i % 4);
        GV_CHECK(st == GV_OK || st == GV_INPROGRESS);
        struct tt_side *both[] = {&s, &k, NULL};
        /* buf is reused: wait for this send to complete before refilling it */
        GV_CHECK(tt_run(both, msg_done, &ms[i], TIMEOUT_MS));
        (void)both;
    }
    struct want_msgs w = {&s, N};
    struct tt_side *sides[] = {&s, &k, NULL};
    GV_CHECK(tt_run(sides, have_msgs, &w, TIMEOUT_MS));
    GV_CHECK_EQ(s.msgs, N);
    GV_CHECK_EQ(s.bad_payload, 0);
    GV_CHECK_EQ(s.bad_order, 0);
    GV_CHECK_EQ(s.accepts, 1);
    for (int i = 0; i < N; i++) {
        if (ms[i].ret == GV_OK)
            GV_CHECK_EQ(ms[i].cbs, 0);
        else
            GV_CHECK(ms[i].ret == GV_INPROGRESS && ms[i].cbs == 1 && ms[i].status == GV_OK);
    }

    /* and back: the server answers on the accepted connection */
    struct gv_conn *sc = s.conns[0].c;
    GV_CHECK(sc != NULL);
    tt_fill(buf, 5000, 77);
    k.verify = 0; /* every reply carries seq 77's pattern: checked here instead */
    for (int i = 0; sc != NULL && i < N; i++) {
        gv_status_t st = tt_send(sc, &back[i], (uint64_t)i, 0, buf, 5000, 2);
        if (st != GV_OK && st != GV_INPROGRESS)
            GV_CHECK_MSG(0, "send back %d: %s", i, gv_status_str(st));
        struct want_msgs wk = {&k, (uint64_t)i + 1};
        GV_CHECK(tt_run(sides, have_msgs, &wk, TIMEOUT_MS));
        GV_CHECK(tt_check(k.conns[0].rx, 5000, 77) < 0);
    }
    GV_CHECK_EQ(k.bad_order, 0);
    GV_CHECK_EQ(k.msgs, N);
    uint64_t sent_bytes = 0;
    for (int i = 0; i < N; i++)
        sent_bytes += TT_HDR_LEN + (uint64_t)(i % 7 == 0 ? 0 : (i * 331) % 70000);
    GV_CHECK_EQ(c->bytes_sent, sent_bytes);
    GV_CHECK_EQ(sc ? sc->bytes_recv : 0, sent_bytes);
    GV_CHECK_EQ(c->bytes_recv, (uint64_t)N * (TT_HDR_LEN + 5000));
out:
    tt_side_cleanup(&k);
    tt_side_cleanup(&s);
    free(buf);
}

/* Closing: on_close exactly once on each side, GV_OK locally, GV_ERR_CLOSED remotely; send
 * on a closed conn is refused; destroy closes what is left. */
static void test_close(void)
{
    struct tt_side s, k;
    struct gv_conn *c, *c2;
    struct gv_tp_config cfg = small_cfg();
    struct tt_msg m;

    if (pair_up(&s, &k, &cfg, 1024, &c) != 0) {
        GV_CHECK_MSG(0, "%s: pair_up failed", backend);
        goto out;
    }
    GV_CHECK_OK(gv_tp_connect(k.tp, "127.0.0.1", s.port, &c2));
    tt_track(&k, c2);
    GV_CHECK(tt_send(c, &m, 0, 0, NULL, 0, 0) == GV_OK || m.status == GV_INPROGRESS);
    struct want_msgs w = {&s, 1};
    struct tt_side *sides[] = {&s, &k, NULL};
    GV_CHECK(tt_run(sides, have_msgs, &w, TIMEOUT_MS));
    gv_tp_conn_close(c);
    GV_CHECK_EQ(k.conns[0].closes, 1);
    GV_CHECK_STATUS(k.conns[0].reason, GV_OK);
    struct want_closed wc = {&s, 1};
    GV_CHECK(tt_run(sides, have_closed, &wc, TIMEOUT_MS));
    int closed_remote = 0;
    for (int i = 0; i < s.n_conns; i++)
        if (s.conns[i].closes == 1) {
            closed_remote++;
            GV_CHECK_STATUS(s.conns[i].reason, GV_ERR_CLOSED);
        }
    GV_CHECK_EQ(closed_remote, 1);
    GV_CHECK_EQ(tt_open_conns(&k), 1);
    /* the server's other conn is still usable */
    GV_CHECK_EQ(s.accepts, 2);
    /* destroy closes the rest, with one on_close each */
    tt_side_cleanup(&k);
    GV_CHECK_EQ(k.conns[1].closes, 1);
    GV_CHECK_EQ(k.conns[0].closes, 1);
    wc.n = 2;
    struct tt_side *only_s[] = {&s, NULL};
    GV_CHECK(tt_run(only_s, have_closed, &wc, TIMEOUT_MS));
out:
    tt_side_cleanup(&k);
    tt_side_cleanup(&s);
}

/* A callback may close its own connection: from on_msg, then nothing more is delivered on it;
 * on_close fires once; ASan checks nothing is used after free. */
static void close_in_on_msg(struct tt_side *s, struct tt_conn_rec *r, struct gv_conn *c,
                            const struct tt_hdr *h, uint64_t payload_len)
{
    (void)s;
    (void)r;
    (void)payload_len;
    if (h->kind == 1) {
        gv_tp_conn_close(c);
        gv_tp_conn_close(c == NULL ? NULL : NULL); /* NULL is accepted */
    }
}

static void test_close_in_callback(void)
{
    struct tt_side s, k;
    struct gv_conn *c;
    struct gv_tp_config cfg = small_cfg();
    static struct tt_msg ms[8];
    static uint8_t buf[3000];

    if (pair_up(&s, &k, &cfg, sizeof(buf), &c) != 0) {
        GV_CHECK_MSG(0, "%s: pair_up failed", backend);
        goto out;
    }
    s.hook = close_in_on_msg;
    tt_fill(buf, sizeof(buf), 0);
    s.verify = 0;
    /* three messages in one burst; the second makes the server close: the third is never
     * delivered although it may already sit in the server's buffer */
    for (int i = 0; i < 3; i++)
        tt_send(c, &ms[i], (uint64_t)i, i == 1 ? 1 : 0, buf, sizeof(buf), 1);
    struct want_closed wc = {&s, 1};
    struct tt_side *sides[] = {&s, &k, NULL};
    GV_CHECK(tt_run(sides, have_closed, &wc, TIMEOUT_MS));
    GV_CHECK_EQ(s.msgs, 2);
    GV_CHECK_EQ(s.conns[0].closes, 1);
    GV_CHECK_STATUS(s.conns[0].reason, GV_OK);
    /* the client learns about it */
    struct want_closed wk = {&k, 1};
    GV_CHECK(tt_run(sides, have_closed, &wk, TIMEOUT_MS));
    GV_CHECK_EQ(k.conns[0].closes, 1);
    GV_CHECK(k.conns[0].reason != GV_OK);
out:
    tt_side_cleanup(&k);
    tt_side_cleanup(&s);
}

/* Discard destinations keep the stream's framing: pieces with base NULL are skipped, the
 * kept piece is intact, and the following messages arrive in order. */
static void test_discard(void)
{
    struct tt_side s, k;
    struct gv_conn *c;
    struct gv_tp_config cfg = small_cfg();
    static struct tt_msg ms[40];
    static uint8_t bufs[40][20000];

    if (pair_up(&s, &k, &cfg, 20000, &c) != 0) {
        GV_CHECK_MSG(0, "%s: pair_up failed", backend);
        goto out;
    }
    s.rx_segs = 4;
    s.discard_from = 1; /* keep the first piece, discard the other three */
    for (int i = 0; i < 40; i++) {
        size_t len = 100 + (size_t)i * 490;
        tt_fill(bufs[i], len, (uint64_t)i);
        gv_status_t st = tt_send(c, &ms[i], (uint64_t)i, 0, bufs[i], len, 2);
        GV_CHECK(st == GV_OK || st == GV_INPROGRESS);
    }
    struct want_msgs w = {&s, 40};
    struct tt_side *sides[] = {&s, &k, NULL};
    GV_CHECK(tt_run(sides, have_msgs, &w, TIMEOUT_MS));
    GV_CHECK_EQ(s.bad_payload, 0);
    GV_CHECK_EQ(s.bad_order, 0);
    GV_CHECK_EQ(s.msgs, 40);
out:
    tt_side_cleanup(&k);
    tt_side_cleanup(&s);
}

/* A stream the framing refuses (bad magic) is closed with GV_ERR_PROTO; so is a header above
 * max_hdr_len and a payload above max_payload_len. Send refuses the same caps locally. */
static void test_refusals(void)
{
    struct tt_side s, k;
    struct gv_conn *c;
    struct gv_tp_config cfg = small_cfg();
    struct tt_msg m;
    static uint8_t big[4096];

    for (int which = 0; which < 3; which++) {
        struct gv_tp_config scfg = cfg;
        if (which == 1)
            scfg.max_hdr_len = TT_HDR_LEN - 1; /* every header is above the server's cap */
        if (which == 2)
            scfg.max_payload_len = 1000;
        memset(&s, 0, sizeof(s));
        memset(&k, 0, sizeof(k));
        s.rx_cap = k.rx_cap = sizeof(big);
        if (tt_side_init(&s, backend, &scfg, "127.0.0.1") != GV_OK ||
            tt_side_init(&k, backend, &cfg, NULL) != GV_OK ||
            gv_tp_connect(k.tp, "127.0.0.1", s.port, &c) != GV_OK) {
            GV_CHECK_MSG(0, "%s: setup failed", backend);
            goto next;
        }
        tt_track(&k, c);
        tt_send(c, &m, 0, 0, big, which == 2 ? 1001 : 10, 1);
        if (which == 0) { /* a good message, then one whose prefix has a broken magic */
            static uint8_t head[TT_HDR_LEN];
            memcpy(head, m.head, sizeof(head));
            memset(head, 0xee, 4);
            struct gv_iov iov[1] = {{head, sizeof(head)}};
            GV_CHECK(gv_tp_send(c, iov, 1, NULL, NULL) != GV_ERR_INVAL);
        }
        struct want_closed wc = {&s, 1};
        struct tt_side *sides[] = {&s, &k, NULL};
        GV_CHECK(tt_run(sides, have_closed, &wc, TIMEOUT_MS));
        GV_CHECK_STATUS(s.conns[0].reason, GV_ERR_PROTO);
        GV_CHECK_EQ(s.msgs, which == 0 ? 1 : 0);
    next:
        tt_side_cleanup(&k);
        tt_side_cleanup(&s);
    }
    /* local refusals */
    cfg.max_hdr_len = 100;
    cfg.max_payload_len = 1000;
    memset(&k, 0, sizeof(k));
    memset(&s, 0, sizeof(s));
    if (pair_up(&s, &k, &cfg, 16, &c) == 0) {
        uint8_t head[101] = {0};
        struct gv_iov iov[2] = {{head, 101}, {big, 10}};
        GV_CHECK_STATUS(gv_tp_send(c, iov, 2, NULL, NULL), GV_ERR_INVAL);
        iov[0].len = 32;
        iov[1].len = 1001;
        GV_CHECK_STATUS(gv_tp_send(c, iov, 2, NULL, NULL), GV_ERR_INVAL);
        GV_CHECK_STATUS(gv_tp_send(c, iov, 0, NULL, NULL), GV_ERR_INVAL);
        GV_CHECK_STATUS(gv_tp_send(c, iov, GV_TP_MAX_SEND_IOV + 1, NULL, NULL), GV_ERR_INVAL);
    } else {
        GV_CHECK_MSG(0, "%s: pair_up failed", backend);
    }
    tt_side_cleanup(&k);
    tt_side_cleanup(&s);
}

/* Several connections between the same two transports carry independent ordered streams. */
static void test_many_conns(void)
{
    struct tt_side s, k;
    struct gv_conn *c[4];
    struct gv_tp_config cfg = small_cfg();
    static struct tt_msg ms[4][50];
    static uint8_t buf[4][8192];

    if (pair_up(&s, &k, &cfg, sizeof(buf[0]), &c[0]) != 0) {
        GV_CHECK_MSG(0, "%s: pair_up failed", backend);
        goto out;
    }
    for (int j = 1; j < 4; j++) {
        GV_CHECK_OK(gv_tp_connect(k.tp, "127.0.0.1", s.port, &c[j]));
        tt_track(&k, c[j]);
    }
    s.verify = 0; /* each conn's buffer is reused; order and counts are what matter here */
    for (int i = 0; i < 50; i++)
        for (int j = 0; j < 4; j++)
            tt_send(c[j], &ms[j][i], (uint64_t)i, 0, buf[j], 1000 + (size_t)j * 2000, 1);
    struct want_msgs w = {&s, 200};
    struct tt_side *sides[] = {&s, &k, NULL};
    GV_CHECK(tt_run(sides, have_msgs, &w, TIMEOUT_MS));
    GV_CHECK_EQ(s.accepts, 4);
    GV_CHECK_EQ(s.bad_order, 0);
    for (int j = 0; j < s.n_conns; j++) {
        GV_CHECK_EQ(s.conns[j].msgs, 50);
        for (int i = j + 1; i < s.n_conns; i++)
            GV_CHECK(s.conns[j].id != s.conns[i].id);
    }
out:
    tt_side_cleanup(&k);
    tt_side_cleanup(&s);
}

/* Every allocation in create, listen, connect and accept may fail: the call returns an error
 * (or the accept is dropped) and frees what it built; ASan checks the leaks. */
static void test_alloc_failures(void)
{
    int failed_runs = 0;
    for (uint64_t n = 1; n < 40; n++) {
        struct tt_side s, k;
        struct gv_conn *c = NULL;
        memset(&s, 0, sizeof(s));
        memset(&k, 0, sizeof(k));
        gv_alloc_fail_nth(n);
        gv_status_t st = tt_side_init(&s, backend, NULL, "127.0.0.1");
        if (st == GV_OK)
            st = tt_side_init(&k, backend, NULL, NULL);
        if (st == GV_OK)
            st = gv_tp_connect(k.tp, "127.0.0.1", s.port, &c);
        if (st == GV_OK) {
            struct tt_side *sides[] = {&s, &k, NULL};
            for (int i = 0; i < 20; i++)
                (void)tt_run(sides, have_msgs, &(struct want_msgs){&s, 1}, 1);
        }
        uint64_t made = gv_alloc_fail_nth(0);
        if (st != GV_OK) {
            failed_runs++;
            GV_CHECK(st == GV_ERR_NOMEM);
        }
        tt_side_cleanup(&k);
        tt_side_cleanup(&s);
        if (made < n) /* the sweep went past the last allocation */
            break;
    }
    GV_CHECK(failed_runs > 0);
}

/* ---------------------------------------------------------------- deferred receive */

/* For backends with GV_TP_CAP_DEFER_RECV: the server side's on_header is wrapped so that a
 * connection can answer GV_ERR_AGAIN (per accepted-connection record index); everything
 * else is tt's recording handler. */
static struct {
    struct gv_tp_handler inner;
    int defer[TT_MAX_CONNS];         /* answer GV_ERR_AGAIN on this conn */
    int headers[TT_MAX_CONNS];       /* on_header calls */
    int64_t again_seq[TT_MAX_CONNS]; /* seq of the message deferred last (-1: none) */
    int bad_resume;                  /* on_header after a deferral saw another message */
    struct gv_conn *resume_on_msg;   /* resumed (its defer cleared) from the next on_msg */
    gv_status_t resume_status;
    int order[64], n_order; /* conn record index of each delivered message */
    int resume_in_close;    /* on_close calls gv_tp_conn_resume_recv (must say closed) */
    gv_status_t close_resume;
} dctl;

static gv_status_t defer_on_header(struct gv_conn *c, const void *msg, size_t msg_len,
                                   uint64_t payload_len, struct gv_iov *dst, int *dst_cnt,
                                   void *user)
{
    struct tt_side *s = user;
    int i = (int)(tt_track(s, c) - s->conns);
    struct tt_hdr h;
    memcpy(&h, (const uint8_t *)msg + TT_PREFIX_LEN, sizeof(h));
    dctl.headers[i]++;
    if (dctl.again_seq[i] >= 0 && (uint64_t)dctl.again_seq[i] != h.seq)
        dctl.bad_resume++;
    if (dctl.defer[i]) {
        dctl.again_seq[i] = (int64_t)h.seq;
        return GV_ERR_AGAIN;
    }
    dctl.again_seq[i] = -1;
    return dctl.inner.on_header(c, msg, msg_len, payload_len, dst, dst_cnt, user);
}

static void defer_on_close(struct gv_conn *c, gv_status_t reason, void *user)
{
    if (dctl.resume_in_close)
        dctl.close_resume = gv_tp_conn_resume_recv(c);
    dctl.inner.on_close(c, reason, user);
}

static void defer_hook(struct tt_side *s, struct tt_conn_rec *r, struct gv_conn *c,
                       const struct tt_hdr *h, uint64_t payload_len)
{
    (void)c, (void)h, (void)payload_len;
    if (dctl.n_order < 64)
        dctl.order[dctl.n_order++] = (int)(r - s->conns);
    if (dctl.resume_on_msg != NULL) {
        struct tt_conn_rec *q = tt_rec(s, dctl.resume_on_msg);
        dctl.defer[q - s->conns] = 0;
        dctl.resume_status = gv_tp_conn_resume_recv(dctl.resume_on_msg);
        dctl.resume_on_msg = NULL;
    }
}

/* Server s (deferring handler, listening) and client k with n connections to it, accepted in
 * order (record i of s is k's connection c[i]). */
static int defer_pair(struct tt_side *s, struct tt_side *k, const struct gv_tp_config *scfg,
                      size_t rx_cap, struct gv_conn **c, int n)
{
    struct gv_tp_config kcfg = small_cfg();
    kcfg.sock_buf_bytes = scfg->sock_buf_bytes;
    struct gv_tp_handler h = tt_handler();
    memset(&dctl, 0, sizeof(dctl));
    for (int i = 0; i < TT_MAX_CONNS; i++)
        dctl.again_seq[i] = -1;
    dctl.inner = h;
    h.on_header = defer_on_header;
    h.on_close = defer_on_close;
    memset(s, 0, sizeof(*s));
    memset(k, 0, sizeof(*k));
    s->rx_cap = k->rx_cap = rx_cap;
    s->discard_from = GV_TP_MAX_DST_IOV;
    s->seq_check = s->verify = 1;
    s->hook = defer_hook;
    if (gv_tp_create(backend, scfg, &h, s, &s->tp) != GV_OK ||
        gv_tp_listen(s->tp, "127.0.0.1", 0, &s->l) != GV_OK ||
        tt_side_init(k, backend, &kcfg, NULL) != GV_OK)
        return -1;
    s->port = gv_tp_listener_port(s->tp, s->l);
    struct tt_side *sides[] = {s, k, NULL};
    for (int i = 0; i < n; i++) {
        if (gv_tp_connect(k->tp, "127.0.0.1", s->port, &c[i]) != GV_OK)
            return -1;
        tt_track(k, c[i]);
        struct want_accepts wa = {s, i + 1};
        if (!tt_run(sides, have_accepts, &wa, TIMEOUT_MS))
            return -1;
    }
    return 0;
}

static int never(void *arg)
{
    (void)arg;
    return 0;
}

struct want_headers {
    int i, n;
};
static int have_headers(void *arg)
{
    struct want_headers *w = arg;
    return dctl.headers[w->i] >= w->n;
}

/* A message deferred on one connection while another goes on; the deferred one is resumed
 * from the other's on_msg and arrives after it, intact, with the message queued behind it.
 * Deferred for twice the server's I/O timeout, it is not closed. */
static void test_defer_order(void)
{
    struct tt_side s, k;
    struct gv_conn *c[2];
    struct gv_tp_config scfg = small_cfg();
    static struct tt_msg m[3];
    uint8_t *big = malloc(150000), *small = malloc(3000);
    scfg.io_timeout_ms = 300;
    if (big == NULL || small == NULL || defer_pair(&s, &k, &scfg, 150000, c, 2) != 0) {
        GV_CHECK_MSG(0, "%s: defer set-up failed", backend);
        goto out;
    }
    struct tt_side *sides[] = {&s, &k, NULL};
    dctl.defer[1] = 1;
    tt_fill(big, 150000, 0);
    GV_CHECK(tt_send(c[1], &m[0], 0, 0, big, 150000, 2) >= 0); /* rendezvous on RDMA */
    tt_fill(small, 500, 1);
    GV_CHECK(tt_send(c[1], &m[1], 1, 0, small, 500, 1) >= 0); /* queued behind it */
    (void)tt_run(sides, never, NULL, 700);
    GV_CHECK_EQ(dctl.headers[1], 1);
    GV_CHECK_EQ(s.conns[1].msgs, 0);
    GV_CHECK_EQ(s.conns[1].closes, 0); /* not timed out while deferred */
    GV_CHECK_EQ(tt_open_conns(&s), 2);
    dctl.resume_on_msg = s.conns[1].c;
    static uint8_t other[3000];
    tt_fill(other, 3000, 0);
    GV_CHECK(tt_send(c[0], &m[2], 0, 0, other, 3000, 1) >= 0);
    struct want_msgs w = {&s, 3};
    GV_CHECK(tt_run(sides, have_msgs, &w, TIMEOUT_MS));
    GV_CHECK_OK(dctl.resume_status);
    GV_CHECK_EQ(dctl.n_order, 3);
    GV_CHECK(dctl.order[0] == 0 && dctl.order[1] == 1 && dctl.order[2] == 1);
    GV_CHECK_EQ(dctl.headers[1], 3);
    GV_CHECK_EQ(dctl.bad_resume, 0);
    GV_CHECK_EQ(s.bad_order + s.bad_payload, 0);
    struct tt_side *ks[] = {&k, &s, NULL};
    for (int i = 0; i < 3; i++) {
        GV_CHECK(tt_run(ks, msg_done, &m[i], TIMEOUT_MS));
        GV_CHECK_OK(m[i].status);
    }
    GV_CHECK_EQ(s.conns[0].closes + s.conns[1].closes, 0);
out:
    tt_side_cleanup(&k);
    tt_side_cleanup(&s);
    free(big);
    free(small);
}

/* Several deferrals in a row (each resume brings on_header back for the same message),
 * resumed from outside the callbacks; resuming twice, or with nothing deferred, is a no-op. */
static void test_defer_repeated(void)
{
    struct tt_side s, k;
    struct gv_conn *c;
    struct gv_tp_config scfg = small_cfg();
    static struct tt_msg m[3];
    static uint8_t b0[700], b2[900];
    uint8_t *b1 = malloc(150000);
    if (b1 == NULL || defer_pair(&s, &k, &scfg, 150000, &c, 1) != 0) {
        GV_CHECK_MSG(0, "%s: defer set-up failed", backend);
        goto out;
    }
    struct tt_side *sides[] = {&s, &k, NULL};
    GV_CHECK_OK(gv_tp_conn_resume_recv(s.conns[0].c)); /* nothing deferred */
    dctl.defer[0] = 1;
    tt_fill(b0, sizeof(b0), 0);
    tt_fill(b1, 150000, 1);
    tt_fill(b2, sizeof(b2), 2);
    tt_send(c, &m[0], 0, 0, b0, sizeof(b0), 1);
    tt_send(c, &m[1], 1, 0, b1, 150000, 3);
    tt_send(c, &m[2], 2, 0, b2, sizeof(b2), 2);
    struct want_headers wh = {0, 1};
    GV_CHECK(tt_run(sides, have_headers, &wh, TIMEOUT_MS));
    for (int round = 0; round < 3; round++) {
        GV_CHECK_OK(gv_tp_conn_resume_recv(s.conns[0].c));
        GV_CHECK_EQ(dctl.headers[0], 1 + round); /* not from inside the call */
        wh.n = 2 + round;
        GV_CHECK(tt_run(sides, have_headers, &wh, TIMEOUT_MS));
        GV_CHECK_EQ(s.msgs, 0);
    }
    dctl.defer[0] = 0;
    GV_CHECK_OK(gv_tp_conn_resume_recv(s.conns[0].c));
    GV_CHECK_OK(gv_tp_conn_resume_recv(s.conns[0].c));
    struct want_msgs w = {&s, 3};
    GV_CHECK(tt_run(sides, have_msgs, &w, TIMEOUT_MS));
    GV_CHECK_EQ(dctl.headers[0], 1 + 3 + 3); /* deferred, deferred again 3 times, 3 taken */
    GV_CHECK_EQ(dctl.bad_resume, 0);
    GV_CHECK_EQ(s.bad_order + s.bad_payload, 0);
    GV_CHECK_OK(gv_tp_conn_resume_recv(s.conns[0].c)); /* nothing deferred again */
out:
    tt_side_cleanup(&k);
    tt_side_cleanup(&s);
    free(b1);
}

/* The receiver closes while a message is deferred: on_close once (resume from it says
 * closed), on_header never again; the sender's pending send fails once and it sees the
 * close. */
static void test_defer_close(void)
{
    struct tt_side s, k;
    struct gv_conn *c;
    struct gv_tp_config scfg = small_cfg();
    static struct tt_msg m;
    size_t len = 16u << 20; /* more than any socket buffer: still pending on TCP too */
    uint8_t *big = malloc(len);
    if (big == NULL || defer_pair(&s, &k, &scfg, 4096, &c, 1) != 0) {
        GV_CHECK_MSG(0, "%s: defer set-up failed", backend);
        goto out;
    }
    struct tt_side *sides[] = {&s, &k, NULL};
    dctl.defer[0] = 1;
    tt_fill(big, len, 0);
    GV_CHECK_STATUS(tt_send(c, &m, 0, 0, big, len, 1), GV_INPROGRESS);
    struct want_headers wh = {0, 1};
    GV_CHECK(tt_run(sides, have_headers, &wh, TIMEOUT_MS));
    (void)tt_run(sides, never, NULL, 100);
    GV_CHECK_EQ(m.done, 0);
    dctl.resume_in_close = 1;
    gv_tp_conn_close(s.conns[0].c);
    GV_CHECK_EQ(s.conns[0].closes, 1);
    GV_CHECK_STATUS(s.conns[0].reason, GV_OK);
    GV_CHECK_STATUS(dctl.close_resume, GV_ERR_CLOSED);
    struct want_closed wc = {&k, 1};
    GV_CHECK(tt_run(sides, have_closed, &wc, TIMEOUT_MS));
    GV_CHECK_EQ(m.cbs, 1);
    GV_CHECK(m.status != GV_OK);
    GV_CHECK_EQ(k.conns[0].closes, 1);
    GV_CHECK(k.conns[0].reason != GV_OK);
    GV_CHECK_EQ(dctl.headers[0], 1);
    GV_CHECK_EQ(s.msgs, 0);
    (void)tt_run(sides, never, NULL, 50);
    GV_CHECK_EQ(s.conns[0].closes + k.conns[0].closes, 2); /* exactly once each */
out:
    tt_side_cleanup(&k);
    tt_side_cleanup(&s);
    free(big);
}

/* A deferring receiver holds its sender back (flow control: socket buffers on TCP, credits on
 * RDMA): sends end in GV_ERR_AGAIN; after the resume every message arrives, in order, intact,
 * and every send completes. */
static void test_defer_backpressure(void)
{
    enum { MAXN = 6000, LEN = 2000 };
    struct tt_side s, k;
    struct gv_conn *c;
    struct gv_tp_config scfg = small_cfg();
    struct tt_msg *m = calloc(MAXN, sizeof(*m));
    uint8_t *bufs = malloc((size_t)MAXN * LEN);
    scfg.sock_buf_bytes = 256 << 10; /* both ends: TCP fills up after about 1 MiB */
    if (m == NULL || bufs == NULL || defer_pair(&s, &k, &scfg, LEN, &c, 1) != 0) {
        GV_CHECK_MSG(0, "%s: defer set-up failed", backend);
        goto out;
    }
    struct tt_side *sides[] = {&s, &k, NULL};
    dctl.defer[0] = 1;
    int n = 0, again = 0;
    uint64_t t0 = gv_now_ns(), again_since = 0;
    while (n < MAXN && tt_ms_since(t0) < 5000) {
        uint8_t *b = bufs + (size_t)n * LEN;
        tt_fill(b, LEN, (uint64_t)n);
        gv_status_t st = tt_send(c, &m[n], (uint64_t)n, 0, b, LEN, 1);
        if (st == GV_OK || st == GV_INPROGRESS) {
            n++;
            again_since = 0;
            continue;
        }
        GV_CHECK_STATUS(st, GV_ERR_AGAIN);
        if (st != GV_ERR_AGAIN)
            break;
        if (again_since == 0)
            again_since = gv_now_ns();
        else if (tt_ms_since(again_since) > 200) { /* stays full: the receiver holds it */
            again = 1;
            break;
        }
        gv_tp_progress(k.tp, 1);
        gv_tp_progress(s.tp, 0);
    }
    GV_CHECK_MSG(again, "%s: %d sends to a deferring receiver never pushed back", backend, n);
    GV_CHECK_EQ(s.msgs, 0);
    GV_CHECK_EQ(dctl.headers[0], 1);
    dctl.defer[0] = 0;
    GV_CHECK_OK(gv_tp_conn_resume_recv(s.conns[0].c));
    struct want_msgs w = {&s, (uint64_t)n};
    GV_CHECK(tt_run(sides, have_msgs, &w, TIMEOUT_MS));
    GV_CHECK_EQ(s.msgs, n);
    GV_CHECK_EQ(s.bad_order + s.bad_payload, 0);
    struct tt_side *ks[] = {&k, &s, NULL};
    for (int i = 0; i < n; i++) {
        if (!tt_run(ks, msg_done, &m[i], TIMEOUT_MS) || m[i].status != GV_OK) {
            GV_CHECK_MSG(0, "%s: send %d: %s", backend, i, gv_status_str(m[i].status));
            break;
        }
    }
    GV_CHECK_EQ(s.conns[0].closes, 0);
out:
    tt_side_cleanup(&k);
    tt_side_cleanup(&s);
    free(m);
    free(bufs);
}

/* Address helpers (backend independent). */
static void test_addr_helpers(void)
{
    char host[64], out[80];
    uint16_t port = 0;
    GV_CHECK_OK(gv_tp_addr_split("10.0.0.2:7000", host, sizeof(host), &port));
    GV_CHECK_STREQ(host, "10.0.0.2");
    GV_CHECK_EQ(port, 7000);
    GV_CHECK_OK(gv_tp_addr_split("[fe80::1%eth0]:65535", host, sizeof(host), &port));
    GV_CHECK_STREQ(host, "fe80::1%eth0");
    GV_CHECK_EQ(port, 65535);
    GV_CHECK_OK(gv_tp_addr_split("node-3.cluster:1", host, sizeof(host), &port));
    GV_CHECK_STREQ(host, "node-3.cluster");
    const char *bad[] = {"",        "host",   "host:",   ":80",   "host:0", "host:65536",
                         "host:8x", "::1:80", "[::1]80", "[]:80", "host:-1"};
    for (size_t i = 0; i < GV_ARRAY_LEN(bad); i++)
        GV_CHECK_MSG(gv_tp_addr_split(bad[i], host, sizeof(host), &port) == GV_ERR_INVAL,
                     "'%s' accepted", bad[i]);
    GV_CHECK_STATUS(gv_tp_addr_split("averylonghostname:1", host, 8, &port), GV_ERR_INVAL);

    GV_CHECK_OK(gv_tp_addr_advertise("0.0.0.0", "10.1.2.3", 7000, out, sizeof(out)));
    GV_CHECK_STREQ(out, "10.1.2.3:7000");
    GV_CHECK_OK(gv_tp_addr_advertise("192.168.0.7", NULL, 7000, out, sizeof(out)));
    GV_CHECK_STREQ(out, "192.168.0.7:7000");
    GV_CHECK_OK(gv_tp_addr_advertise(NULL, "::1", 9, out, sizeof(out)));
    GV_CHECK_STREQ(out, "[::1]:9");
    char name[256];
    GV_CHECK(gethostname(name, sizeof(name)) == 0);
    GV_CHECK_OK(gv_tp_addr_advertise("::", NULL, 5, out, sizeof(out)));
    GV_CHECK(strncmp(out, name, strlen(name)) == 0 && strstr(out, ":5") != NULL);
    GV_CHECK_STATUS(gv_tp_addr_advertise("1.2.3.4", NULL, 5, out, 6), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_tp_addr_advertise("1.2.3.4", NULL, 0, out, sizeof(out)), GV_ERR_INVAL);
    /* round trip */
    GV_CHECK_OK(gv_tp_addr_advertise(NULL, "fe80::2", 81, out, sizeof(out)));
    GV_CHECK_OK(gv_tp_addr_split(out, host, sizeof(host), &port));
    GV_CHECK_STREQ(host, "fe80::2");
    GV_CHECK_EQ(port, 81);
}

/* Keeps the last error line, to give the reason a backend cannot run. */
static void last_error(enum gv_log_level level, const char *line, void *arg)
{
    if (level == GV_LOG_ERROR)
        snprintf(arg, 512, "%s", line);
}

/* No argument: every backend. One backend name: only that one, exiting 77 (SKIP) when it
 * cannot run here (ctest runs "rdma" on its own so that its skip shows). */
int main(int argc, char **argv)
{
    static const char *names[] = {"tcp", "rdma"};
    size_t n_names = GV_ARRAY_LEN(names);
    int ran = 0;

    if (argc > 1) {
        names[0] = argv[1];
        n_names = 1;
    }
    gv_log_set_level(GV_LOG_ERROR);
    for (size_t i = 0; i < n_names; i++) {
        struct gv_tp_handler h = tt_handler();
        struct gv_tp *tp = NULL;
        char why[512] = "";
        gv_log_set_cb(last_error, why);
        gv_status_t st = gv_tp_create(names[i], NULL, &h, NULL, &tp);
        gv_log_set_cb(NULL, NULL);
        if (st == GV_ERR_UNSUPPORTED || st == GV_ERR_NODEV || st == GV_ERR_NOMEM) {
            if (n_names == 1)
                GV_SKIP("backend %s unavailable here (%s): %s", names[i], gv_status_str(st), why);
            printf("backend %s: skipped (%s): %s\n", names[i], gv_status_str(st), why);
            continue;
        }
        GV_CHECK_OK(st);
        gv_tp_destroy(tp);
        if (st != GV_OK)
            continue;
        backend = names[i];
        printf("backend %s: running\n", backend);
        int before = gv_check_failed_;
        test_exchange();
        test_close();
        test_close_in_callback();
        test_discard();
        test_refusals();
        test_many_conns();
        test_alloc_failures();
        if (gv_tp_find(backend)->caps & GV_TP_CAP_DEFER_RECV) {
            test_defer_order();
            test_defer_repeated();
            test_defer_close();
            test_defer_backpressure();
        } else {
            printf("backend %s: no deferred receive: its tests skipped\n", backend);
        }
        printf("backend %s: %s\n", backend, gv_check_failed_ == before ? "ok" : "FAILED");
        ran++;
    }
    /* the registry itself */
    struct gv_tp_handler h = tt_handler();
    struct gv_tp *tp = NULL;
    GV_CHECK(gv_tp_find("tcp") != NULL);
    GV_CHECK(gv_tp_find("nope") == NULL);
    GV_CHECK_STATUS(gv_tp_create("nope", NULL, &h, NULL, &tp), GV_ERR_INVAL);
    h.prefix_len = 0;
    GV_CHECK_STATUS(gv_tp_create("tcp", NULL, &h, NULL, &tp), GV_ERR_INVAL);
    test_addr_helpers();
    if (ran == 0)
        GV_SKIP("no transport backend available");
    return gv_check_summary();
}
