/* bench_transport_raw.c: the `rawstream` baseline of `gravac-bench transport`: a plain blocking
 * socket loop (write whole messages, read into a buffer of the message size) over loopback,
 * with the same buffers as the transport's stream mode (same size, same allocation, pages
 * touched). It isolates what the transport adds from what the message size itself costs
 * (a 64 MiB buffer does not stay in cache; iperf3 cannot go above 1 MiB). No gv_tp here. */
#include "bench_transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct raw_sink {
    int lfd;
    uint64_t size;
    uint64_t received;
    int rc;
};

/* Accepts one connection and reads until EOF into a buffer of the message size. */
static void *raw_sink_main(void *arg)
{
    struct raw_sink *k = arg;
    uint8_t *buf = bt_buf_alloc(k->size, 0);
    int fd = accept(k->lfd, NULL, NULL);

    k->rc = buf == NULL || fd < 0;
    for (uint64_t off = 0; k->rc == 0;) {
        ssize_t n = read(fd, buf + off, (size_t)(k->size - off));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            k->rc = n < 0;
            break;
        }
        k->received += (uint64_t)n;
        off = (off + (uint64_t)n) % k->size;
    }
    if (fd >= 0)
        close(fd);
    gv_free(buf);
    return NULL;
}

static int raw_setup(const struct bt_opts *o, int *lfd_p, int *cfd_p)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (lfd < 0 || cfd < 0)
        goto err;
    if (o->sock_buf > 0) { /* the same request as the transport makes */
        setsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &o->sock_buf, sizeof(o->sock_buf));
        setsockopt(cfd, SOL_SOCKET, SO_SNDBUF, &o->sock_buf, sizeof(o->sock_buf));
    }
    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 1) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &len) != 0 ||
        connect(cfd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        goto err;
    *lfd_p = lfd;
    *cfd_p = cfd;
    return 0;
err:
    gv_log(GV_LOG_ERROR, "bench: raw socket setup: %s", strerror(errno));
    if (lfd >= 0)
        close(lfd);
    if (cfd >= 0)
        close(cfd);
    return -1;
}

/* Writes whole messages; returns the number written, or -1. */
static int64_t raw_pump(int fd, const uint8_t *buf, uint64_t size, uint64_t iters,
                        uint64_t deadline_ns, double *lat, uint64_t lat_cap)
{
    uint64_t i = 0;
    for (; deadline_ns ? gv_now_ns() < deadline_ns : i < iters; i++) {
        uint64_t t = gv_now_ns();
        for (uint64_t off = 0; off < size;) {
            ssize_t n = write(fd, buf + off, (size_t)(size - off));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                return -1;
            off += (uint64_t)n;
        }
        if (lat != NULL && i < lat_cap)
            lat[i] = (double)(gv_now_ns() - t) * 1e-3;
    }
    return (int64_t)i;
}

gv_status_t bt_raw_run(const struct bt_opts *o, uint64_t size, uint64_t iters, uint64_t warmup,
                       struct bt_result *res)
{
    struct raw_sink k = {.size = size};
    uint64_t cap = o->duration_s > 0 ? 1u << 22 : iters;
    double *lat = gv_malloc(cap * sizeof(*lat));
    uint8_t *buf = bt_buf_alloc(size, 0x5a);
    pthread_t th;
    int cfd = -1;
    gv_status_t status = GV_ERR_IO;

    if (lat == NULL || buf == NULL) {
        status = GV_ERR_NOMEM;
        goto out;
    }
    if (raw_setup(o, &k.lfd, &cfd) != 0)
        goto out;
    if (pthread_create(&th, NULL, raw_sink_main, &k) != 0) {
        close(k.lfd);
        goto out;
    }
    int64_t n = raw_pump(cfd, buf, size, warmup, 0, NULL, 0);
    uint64_t t0 = gv_now_ns();
    uint64_t deadline = o->duration_s > 0 ? t0 + (uint64_t)(o->duration_s * 1e9) : 0;
    if (n >= 0)
        n = raw_pump(cfd, buf, size, iters, deadline, lat, cap);
    shutdown(cfd, SHUT_WR);
    pthread_join(th, NULL); /* the sink has read everything: received goodput */
    double secs = (double)(gv_now_ns() - t0) * 1e-9;
    close(k.lfd);
    if (n < 0 || k.rc != 0)
        goto out;
    bt_result_fill(res, size, (uint64_t)n, (uint64_t)n * size, secs, lat,
                   (size_t)GV_MIN((uint64_t)n, cap));
    status = GV_OK;
out:
    if (cfd >= 0)
        close(cfd);
    gv_free(buf);
    gv_free(lat);
    return status;
}
