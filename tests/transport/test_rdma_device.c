/* test_rdma_device.c: the RDMA backend over a real device (an HCA, or soft-RoCE): two
 * transports of this process connected through the device's address, eager and rendezvous
 * messages up to 64 MiB with scatter and discard destinations, explicitly registered buffers,
 * a ping-pong, then an orderly close seen by the peer. Single-threaded on purpose: the
 * blocking connect must answer the passive side itself.
 * Without a usable device it exits 77 (SKIP) with the reason. The address comes from
 * GV_RDMA_TEST_ADDR, else the first local address that routes through an RDMA device. */
#include "check.h"
#include "rdma_select.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#define PFX 12
#define BIG (64u << 20)

struct side {
    struct gv_tp *tp;
    struct gv_conn *conn; /* server: the accepted one */
    uint64_t expect, got, bad, closed;
    gv_status_t close_reason;
    char *rbuf; /* BIG bytes */
    struct gv_iov dst[3];
    int ndst;
    int discard_middle;
    int echo; /* answer every message with an empty one */
};

static uint8_t pat(uint64_t seq, uint64_t i)
{
    return (uint8_t)(seq * 29u + i * 13u + (i >> 12));
}

static gv_status_t t_parse(const void *p, uint32_t *hl, uint64_t *pl, void *u)
{
    (void)u;
    memcpy(hl, p, 4);
    memcpy(pl, (const char *)p + 4, 8);
    return *hl >= 8 && *hl <= 4096 && *pl <= BIG ? GV_OK : GV_ERR_PROTO;
}

static gv_status_t t_header(struct gv_conn *c, const void *m, size_t ml, uint64_t pl,
                            struct gv_iov *d, int *n, void *u)
{
    struct side *s = u;
    (void)c, (void)m, (void)ml;
    size_t a = (size_t)pl / 4, b = (size_t)pl / 3, rest = (size_t)pl - a - b;
    d[0] = (struct gv_iov){s->rbuf, a};
    d[1] = (struct gv_iov){s->discard_middle ? NULL : s->rbuf + a, b};
    d[2] = (struct gv_iov){s->rbuf + a + b, rest};
    *n = 3;
    memcpy(s->dst, d, sizeof(s->dst));
    s->ndst = 3;
    return GV_OK;
}

static void t_msg(struct gv_conn *c, const void *m, size_t ml, void *u)
{
    struct side *s = u;
    (void)ml;
    uint64_t pl, seq;
    memcpy(&pl, (const char *)m + 4, 8);
    memcpy(&seq, (const char *)m + PFX, 8);
    if (seq != s->expect)
        s->bad++;
    s->expect = seq + 1;
    uint64_t off = 0;
    for (int k = 0; k < s->ndst && pl > 0; k++) {
        const uint8_t *p = s->dst[k].base;
        for (size_t i = 0; p != NULL && i < s->dst[k].len; i += 4093)
            if (p[i] != pat(seq, off + i)) {
                s->bad++;
                break;
            }
        off += s->dst[k].len;
    }
    s->ndst = 0;
    s->got++;
    if (s->echo) {
        char hdr[PFX + 8];
        uint32_t hl = 8;
        uint64_t zero = 0;
        memcpy(hdr, &hl, 4);
        memcpy(hdr + 4, &zero, 8);
        memcpy(hdr + PFX, &seq, 8);
        struct gv_iov iov = {hdr, sizeof(hdr)};
        if (gv_tp_send(c, &iov, 1, NULL, NULL) != GV_OK)
            s->bad++;
    }
}

static void t_accept(struct gv_listener *l, struct gv_conn *c, void *u)
{
    (void)l;
    ((struct side *)u)->conn = c;
}

static void t_close(struct gv_conn *c, gv_status_t reason, void *u)
{
    struct side *s = u;
    (void)c;
    s->closed++;
    s->close_reason = reason;
}

static const struct gv_tp_handler handler = {PFX, t_parse, t_header, t_msg, t_accept, t_close};

static void spin(struct side *a, struct side *b, int (*done)(void), int ms)
{
    uint64_t end = gv_now_ns() + (uint64_t)ms * 1000000;
    while (!done() && gv_now_ns() < end) {
        gv_tp_progress(a->tp, 0);
        gv_tp_progress(b->tp, 0);
    }
}

static struct side srv, cli;
static uint64_t want;
static int all_in(void)
{
    return srv.got >= want;
}
static int echoed(void)
{
    return cli.got >= want;
}
static int peer_closed(void)
{
    return srv.closed > 0;
}

static int find_addr(char *addr, size_t n)
{
    const char *env = getenv("GV_RDMA_TEST_ADDR");
    char dev[64], why[256];
    if (env != NULL && *env != '\0') {
        snprintf(addr, n, "%s", env);
        return 1;
    }
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0)
        return 0;
    int found = 0;
    for (struct ifaddrs *i = ifs; i != NULL && !found; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET)
            continue;
        inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, addr,
                  (socklen_t)n);
        found = gv_rdma_probe_sys.route(NULL, addr, dev, sizeof(dev), why, sizeof(why)) == GV_OK;
    }
    freeifaddrs(ifs);
    return found;
}

/* Sends message seq with payload_len bytes from src in 2 pieces. */
static gv_status_t send_msg(struct gv_conn *c, uint64_t seq, char *src, uint64_t payload_len,
                            int *done)
{
    static char hdr[PFX + 8];
    uint32_t hl = 8;
    memcpy(hdr, &hl, 4);
    memcpy(hdr + 4, &payload_len, 8);
    memcpy(hdr + PFX, &seq, 8);
    for (uint64_t i = 0; i < payload_len; i++)
        src[i] = (char)pat(seq, i);
    struct gv_iov iov[3] = {{hdr, sizeof(hdr)},
                            {src, (size_t)payload_len / 2},
                            {src + payload_len / 2, (size_t)(payload_len - payload_len / 2)}};
    *done = 0;
    return gv_tp_send(c, iov, 3, NULL, NULL);
}

static void send_cb(struct gv_conn *c, gv_status_t st, void *arg)
{
    (void)c;
    *(int *)arg = st == GV_OK ? 1 : -1;
}

int main(void)
{
    char dev[64] = "", why[512] = "", addr[64];
    gv_status_t st =
        gv_rdma_probe(&gv_rdma_probe_sys, NULL, NULL, 1 << 20, dev, sizeof(dev), why, sizeof(why));
    if (!gv_rdma_built())
        GV_SKIP("RDMA backend not built (libibverbs/librdmacm missing at build time)");
    if (st != GV_OK)
        GV_SKIP("no usable RDMA device: %s", why);
    if (!find_addr(addr, sizeof(addr)))
        GV_SKIP("no local IPv4 address on an RDMA device (set GV_RDMA_TEST_ADDR)");
    printf("rdma device test over %s\n", addr);

    srv.rbuf = calloc(1, BIG);
    cli.rbuf = calloc(1, BIG);
    char *src = malloc(BIG);
    GV_CHECK_OK(gv_rdma_create_on(NULL, NULL, &handler, &srv, &srv.tp, why, sizeof(why)));
    GV_CHECK_OK(gv_rdma_create_on(NULL, NULL, &handler, &cli, &cli.tp, why, sizeof(why)));
    struct gv_listener *l = NULL;
    GV_CHECK_OK(gv_tp_listen(srv.tp, addr, 0, &l));
    uint16_t port = gv_tp_listener_port(srv.tp, l);
    GV_CHECK(port != 0);
    GV_CHECK_OK(gv_tp_connect(cli.tp, addr, port, &cli.conn));
    if (cli.conn == NULL || gv_check_failed_)
        return gv_check_summary();

    /* eager and rendezvous sizes, with a 3-piece destination */
    const uint64_t sizes[] = {0, 1, 100, 8000, 8168, 8169, 65536, 1 << 20, 16u << 20, BIG};
    int done;
    for (size_t i = 0; i < GV_ARRAY_LEN(sizes); i++) {
        st = send_msg(cli.conn, i, src, sizes[i], &done);
        GV_CHECK(st == GV_OK || st == GV_INPROGRESS);
        want = i + 1;
        spin(&srv, &cli, all_in, 20000); /* payload reused next round: wait for delivery */
    }
    GV_CHECK_EQ(srv.got, GV_ARRAY_LEN(sizes));
    GV_CHECK_EQ(srv.bad, 0);

    /* discard destinations and an explicitly registered source */
    struct gv_buf reg = {src, BIG, GV_MEM_HOST, NULL};
    GV_CHECK_OK(gv_tp_mem_reg(cli.tp, &reg));
    srv.discard_middle = 1;
    for (uint64_t i = 0; i < 4; i++) {
        uint64_t seq = srv.got;
        struct gv_iov iov[2];
        static char hdr[PFX + 8];
        uint32_t hl = 8;
        uint64_t pl = (4u << 20) + i;
        memcpy(hdr, &hl, 4);
        memcpy(hdr + 4, &pl, 8);
        memcpy(hdr + PFX, &seq, 8);
        for (uint64_t k = 0; k < pl; k++)
            src[k] = (char)pat(seq, k);
        iov[0] = (struct gv_iov){hdr, sizeof(hdr)};
        iov[1] = (struct gv_iov){src, (size_t)pl};
        done = 0;
        GV_CHECK_STATUS(gv_tp_send(cli.conn, iov, 2, send_cb, &done), GV_INPROGRESS);
        want = seq + 1;
        spin(&srv, &cli, all_in, 10000);
        GV_CHECK_EQ(done, 1);
    }
    GV_CHECK_EQ(srv.bad, 0);
    srv.discard_middle = 0;

    /* ping-pong: the server echoes (the echo carries the sequence number) */
    srv.echo = 1;
    cli.expect = srv.got;
    uint64_t t0 = gv_now_ns();
    for (int i = 0; i < 1000; i++) {
        uint64_t seq = srv.got;
        GV_CHECK(send_msg(cli.conn, seq, src, 32, &done) == GV_OK);
        want = (uint64_t)i + 1;
        spin(&srv, &cli, echoed, 5000);
    }
    GV_CHECK_EQ(cli.got, 1000);
    GV_CHECK_EQ(cli.bad, 0);
    printf("ping-pong: %.2f us round trip (average of 1000)\n",
           (double)(gv_now_ns() - t0) / 1000.0 / 1000.0);

    /* orderly close: the peer hears GV_ERR_CLOSED */
    gv_tp_mem_dereg(cli.tp, &reg);
    gv_tp_conn_close(cli.conn);
    GV_CHECK_EQ(cli.closed, 1);
    GV_CHECK_STATUS(cli.close_reason, GV_OK);
    spin(&srv, &cli, peer_closed, 5000);
    GV_CHECK_EQ(srv.closed, 1);
    GV_CHECK_STATUS(srv.close_reason, GV_ERR_CLOSED);

    gv_tp_listener_close(srv.tp, l);
    gv_tp_destroy(cli.tp);
    gv_tp_destroy(srv.tp);
    free(src);
    free(srv.rbuf);
    free(cli.rbuf);
    return gv_check_summary();
}
