/* bench_transport.h: private to `gravac-bench transport`: options, per-size results, and the
 * engine (bench_transport_io.c) that the command line and report code (bench_transport.c)
 * drive. The framing is the bench's own (48-byte prefix+header), independent of proto/. */
#ifndef GV_BENCH_TRANSPORT_H
#define GV_BENCH_TRANSPORT_H

#include "gv_transport.h"

#include <stddef.h>
#include <stdint.h>

#define BT_MAX_SIZES 64
#define BT_MAX_CONNS 64
#define BT_MAX_WINDOW 1024

enum bt_mode {
    BT_STREAM,
    BT_PINGPONG,
    BT_PUSHPULL,
    BT_RAWSTREAM, /* baseline: a blocking socket loop with the same buffers, loopback only */
};
enum bt_role { BT_LOOPBACK, BT_SERVER, BT_CLIENT };

struct bt_opts {
    enum bt_mode mode;
    enum bt_role role;
    const char *transport;
    char host[256]; /* client: server host; loopback/server: bind host ("" = any) */
    uint16_t port;  /* client: server port; server: listen port (0: ephemeral) */
    uint64_t sizes[BT_MAX_SIZES];
    int n_sizes;
    char sizes_desc[96];
    int window; /* messages (stream) or round trips (others) in flight per conn */
    int conns;
    uint64_t iters;    /* 0: automatic per size */
    double duration_s; /* > 0: bound each size by time instead of iterations */
    int64_t warmup;    /* < 0: automatic */
    int rtt;           /* pingpong: report full RTT instead of RTT/2 */
    int busy_poll;     /* spin in progress(0) instead of sleeping in epoll_wait */
    int sock_buf;      /* SO_SNDBUF/SO_RCVBUF request, bytes */
    int json, csv;
};

/* One measured size. Latencies in microseconds. */
struct bt_result {
    uint64_t bytes;       /* message payload size */
    uint64_t iters;       /* measured messages (stream) or round trips */
    uint64_t total_bytes; /* payload bytes moved, all directions */
    double seconds;
    double gbps;  /* total_bytes * 8 / seconds / 1e9 */
    double mrate; /* iters / seconds / 1e6 */
    double lat_min, lat_p50, lat_p99, lat_p999, lat_max;
};

struct bt_client;

/* Server: serves one session (every connection of one client) and returns when all of them
 * have closed, or when *stop becomes non-zero. tp must already listen. 0 ok, 1 error. */
int bt_serve(struct gv_tp *tp, const _Atomic int *stop, int busy_poll);
/* The server's transport and listener on host ("" = any) and port. */
gv_status_t bt_server_create(const struct bt_opts *o, const char *host, uint16_t port,
                             struct gv_tp **tp_p, uint16_t *port_p);

/* Client: connects o->conns connections to host:port and says hello (sizes, mode). */
gv_status_t bt_client_create(const struct bt_opts *o, const char *host, uint16_t port,
                             struct bt_client **cl_p);
/* Runs warmup then the measured phase for one size. */
gv_status_t bt_client_run(struct bt_client *cl, uint64_t size, uint64_t iters, uint64_t warmup,
                          struct bt_result *res);
void bt_client_destroy(struct bt_client *cl);
/* The backend the client runs on ("tcp", "rdma"): what --transport auto picked. */
const char *bt_client_backend(const struct bt_client *cl);

/* The rawstream baseline for one size (bench_transport_raw.c). */
gv_status_t bt_raw_run(const struct bt_opts *o, uint64_t size, uint64_t iters, uint64_t warmup,
                       struct bt_result *res);

/* Payload buffer: len bytes (rounded up to 2 MiB when large, then backed by transparent huge
 * pages where allowed), every byte set to fill; free with gv_free. */
uint8_t *bt_buf_alloc(uint64_t len, int fill);
/* Fills res from a measurement; sorts lat[0..n_lat) (usec) for the percentiles. */
void bt_result_fill(struct bt_result *res, uint64_t size, uint64_t iters, uint64_t total_bytes,
                    double secs, double *lat, size_t n_lat);

/* Default iterations and warmup for a size. */
uint64_t bt_auto_iters(enum bt_mode mode, uint64_t size);

#endif /* GV_BENCH_TRANSPORT_H */
