/* tt_tcp.h: helpers shared by the TCP-specific tests (test_tcp.c, test_tcp_dead.c): a
 * connected pair of TCP sides, progress predicates, and raw-socket peers that misbehave in
 * ways the transport itself never would. */
#ifndef GV_TT_TCP_H
#define GV_TT_TCP_H

#include "check.h"
#include "tcp_internal.h"
#include "tt.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TIMEOUT_MS 20000

static inline struct gv_tp_config base_cfg(void)
{
    struct gv_tp_config cfg;
    gv_tp_config_default(&cfg);
    cfg.connect_timeout_ms = 5000;
    cfg.io_timeout_ms = 5000;
    return cfg;
}

static inline int pair_up(struct tt_side *s, struct tt_side *k, const struct gv_tp_config *scfg,
                          const struct gv_tp_config *kcfg, size_t rx_cap, struct gv_conn **c_p)
{
    memset(s, 0, sizeof(*s));
    memset(k, 0, sizeof(*k));
    s->rx_cap = k->rx_cap = rx_cap;
    if (tt_side_init(s, "tcp", scfg, "127.0.0.1") != GV_OK ||
        tt_side_init(k, "tcp", kcfg, NULL) != GV_OK ||
        gv_tp_connect(k->tp, "127.0.0.1", s->port, c_p) != GV_OK) {
        GV_CHECK_MSG(0, "pair_up failed");
        return -1;
    }
    tt_track(k, *c_p);
    return 0;
}

struct want_msgs {
    struct tt_side *s;
    uint64_t n;
};
static inline int have_msgs(void *arg)
{
    struct want_msgs *w = arg;
    return w->s->msgs >= w->n;
}
static inline int rec_closed(void *arg)
{
    return ((struct tt_conn_rec *)arg)->closes > 0;
}
static inline int side_has_conn(void *arg)
{
    return ((struct tt_side *)arg)->n_conns > 0;
}

/* ------------------------------------------------------------ raw-socket peers */

static inline int raw_connect(uint16_t port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* A listening socket on 127.0.0.1 (port 0: ephemeral, *port_p gets it). rcvbuf 0: default. */
static inline int raw_listen(uint16_t *port_p, int rcvbuf)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(*port_p)};
    socklen_t len = sizeof(sa);
    int one = 1;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 16) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        close(fd);
        return -1;
    }
    *port_p = ntohs(sa.sin_port);
    return fd;
}

static inline int write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t ret = write(fd, p, len);
        if (ret <= 0)
            return -1;
        p += ret;
        len -= (size_t)ret;
    }
    return 0;
}

static inline void raw_head(uint8_t *head, uint64_t seq, uint32_t hdr_len, uint64_t payload_len)
{
    struct tt_prefix p = {.magic = TT_MAGIC, .hdr_len = hdr_len, .payload_len = payload_len};
    struct tt_hdr h = {.seq = seq};
    memcpy(head, &p, sizeof(p));
    memcpy(head + TT_PREFIX_LEN, &h, sizeof(h));
}

#endif /* GV_TT_TCP_H */
