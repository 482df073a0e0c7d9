/* bench_transport.c: `gravac-bench transport`: command line, roles (server, client, or both
 * in one process over loopback), the perftest-style banner and the per-size report in text,
 * JSON or CSV. The measuring engine is in bench_transport_io.c. */
#include "bench.h"
#include "bench_transport.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const mode_names[] = {"stream", "pingpong", "pushpull", "rawstream"};

static void bt_usage(FILE *f)
{
    fprintf(f,
            "usage: gravac-bench transport [--loopback | --server | --client HOST:PORT] [options]\n"
            "\n"
            "roles (default --loopback: server thread and client in this process):\n"
            "  --server            serve one client session, then exit\n"
            "  --client HOST:PORT  connect to a server ([v6addr]:port for IPv6)\n"
            "  --bind HOST         server / loopback address (default: all for --server,\n"
            "                      127.0.0.1 for --loopback)\n"
            "  --port P            server port (default 18515; loopback: ephemeral)\n"
            "measurement:\n"
            "  --mode M            stream | pingpong | pushpull (default stream), or\n"
            "                      rawstream: baseline, a blocking socket loop with the same\n"
            "                      buffers, no transport (loopback only)\n"
            "  --sizes S           A:B (powers of 2), A:B:4 (x4 steps) or a list 64,1M,4M;\n"
            "                      suffixes K M G (default 8:64M)\n"
            "  --window N          messages (stream) or round trips in flight per\n"
            "                      connection, 1..%d (default 16 stream, 1 otherwise)\n"
            "  --conns N           connections, messages spread round-robin (default 1)\n"
            "  --iters N           measured iterations per size (default: by size)\n"
            "  --duration S        measure each size for S seconds instead\n"
            "  --warmup N          unmeasured iterations first (default: iters/10, 1..1000)\n"
            "  --rtt               pingpong: report full RTT instead of RTT/2\n"
            "  --busy-poll         spin on progress instead of sleeping in epoll_wait\n"
            "  --sockbuf BYTES     SO_SNDBUF/SO_RCVBUF request (default 4M)\n"
            "  --transport NAME    tcp (default), rdma (when built) or auto: rdma when a device\n"
            "                      reaches the peer, else tcp\n"
            "output:\n"
            "  --json | --csv      machine-readable output instead of the table\n"
            "exit status: 0 ok, 1 runtime error, 2 usage error\n",
            BT_MAX_WINDOW);
}

/* "64", "4K", "1M", "2G" (binary multiples). */
static int bt_parse_size(const char *s, uint64_t *v_p)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || s[0] == '-')
        return -1;
    int shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        end++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        end++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        end++;
        break;
    default: break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0' || v > (UINT64_MAX >> shift))
        return -1;
    *v_p = (uint64_t)v << shift;
    return 0;
}

static int bt_parse_sizes(struct bt_opts *o, const char *arg)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", arg);
    snprintf(o->sizes_desc, sizeof(o->sizes_desc), "%s", arg);
    o->n_sizes = 0;
    if (strchr(buf, ':') != NULL) {
        char *a = buf, *b = strchr(a, ':'), *f;
        *b++ = '\0';
        uint64_t lo, hi, factor = 2;
        if ((f = strchr(b, ':')) != NULL) {
            *f++ = '\0';
            if (bt_parse_size(f, &factor) != 0 || factor < 2)
                return -1;
        }
        if (bt_parse_size(a, &lo) != 0 || bt_parse_size(b, &hi) != 0 || lo < 1 || hi < lo)
            return -1;
        for (uint64_t s = lo; s <= hi && o->n_sizes < BT_MAX_SIZES; s *= factor)
            o->sizes[o->n_sizes++] = s;
    } else {
        for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            if (o->n_sizes == BT_MAX_SIZES || bt_parse_size(t, &o->sizes[o->n_sizes]) != 0)
                return -1;
            o->n_sizes++;
        }
    }
    for (int i = 0; i < o->n_sizes; i++)
        if (o->sizes[i] > (1ull << 30))
            return -1;
    return o->n_sizes > 0 ? 0 : -1;
}

static int bt_parse_int(const char *s, long lo, long hi, long *v_p)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *v_p = v;
    return 0;
}

/* Returns 0 to run, 1 for --help, 2 for a usage error. */
static int bt_parse_args(struct bt_opts *o, int argc, char **argv)
{
    static const struct option lo[] = {
        {"loopback", no_argument, 0, 'L'},
        {"server", no_argument, 0, 'S'},
        {"client", required_argument, 0, 'c'},
        {"bind", required_argument, 0, 'b'},
        {"port", required_argument, 0, 'p'},
        {"mode", required_argument, 0, 'm'},
        {"sizes", required_argument, 0, 's'},
        {"window", required_argument, 0, 'w'},
        {"conns", required_argument, 0, 'n'},
        {"iters", required_argument, 0, 'i'},
        {"duration", required_argument, 0, 'd'},
        {"warmup", required_argument, 0, 'W'},
        {"rtt", no_argument, 0, 'r'},
        {"busy-poll", no_argument, 0, 'B'},
        {"sockbuf", required_argument, 0, 'k'},
        {"transport", required_argument, 0, 't'},
        {"json", no_argument, 0, 'j'},
        {"csv", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    long v;
    uint64_t u;
    int opt, window_set = 0, port_set = 0;
    const char *bind = NULL;

    memset(o, 0, sizeof(*o));
    o->transport = "tcp";
    o->conns = 1;
    o->warmup = -1;
    o->sock_buf = 4 << 20;
    o->port = 18515;
    bt_parse_sizes(o, "8:64M");
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (opt) {
        case 'L': o->role = BT_LOOPBACK; break;
        case 'S': o->role = BT_SERVER; break;
        case 'c':
            o->role = BT_CLIENT;
            if (gv_tp_addr_split(optarg, o->host, sizeof(o->host), &o->port) != GV_OK)
                goto bad;
            break;
        case 'b': bind = optarg; break;
        case 'p':
            if (bt_parse_int(optarg, 0, 65535, &v) != 0)
                goto bad;
            o->port = (uint16_t)v;
            port_set = 1;
            break;
        case 'm':
            for (v = 0; v < 4 && strcmp(optarg, mode_names[v]) != 0; v++)
                ;
            if (v == 4)
                goto bad;
            o->mode = (enum bt_mode)v;
            break;
        case 's':
            if (bt_parse_sizes(o, optarg) != 0)
                goto bad;
            break;
        case 'w':
            if (bt_parse_int(optarg, 1, BT_MAX_WINDOW, &v) != 0)
                goto bad;
            o->window = (int)v;
            window_set = 1;
            break;
        case 'n':
            if (bt_parse_int(optarg, 1, BT_MAX_CONNS, &v) != 0)
                goto bad;
            o->conns = (int)v;
            break;
        case 'i':
            if (bt_parse_size(optarg, &u) != 0 || u < 1)
                goto bad;
            o->iters = u;
            break;
        case 'd':
            o->duration_s = strtod(optarg, NULL);
            if (!(o->duration_s > 0 && o->duration_s < 3600))
                goto bad;
            break;
        case 'W':
            if (bt_parse_size(optarg, &u) != 0)
                goto bad;
            o->warmup = (int64_t)u;
            break;
        case 'r': o->rtt = 1; break;
        case 'B': o->busy_poll = 1; break;
        case 'k':
            if (bt_parse_size(optarg, &u) != 0 || u > (1u << 30))
                goto bad;
            o->sock_buf = (int)u;
            break;
        case 't': o->transport = optarg; break;
        case 'j': o->json = 1; break;
        case 'v': o->csv = 1; break;
        case 'h': return 1;
        default: goto bad_quiet;
        }
    }
    if (optind != argc || (o->json && o->csv) || (bind && o->role == BT_CLIENT) ||
        (o->mode == BT_RAWSTREAM && o->role != BT_LOOPBACK))
        goto bad;
    if (!window_set)
        o->window = o->mode == BT_STREAM ? 16 : 1;
    if (o->role == BT_LOOPBACK) {
        snprintf(o->host, sizeof(o->host), "%s", bind ? bind : "127.0.0.1");
        if (!port_set)
            o->port = 0;
    } else if (o->role == BT_SERVER) {
        snprintf(o->host, sizeof(o->host), "%s", bind ? bind : "");
    }
    return 0;
bad:
    fprintf(stderr, "gravac-bench transport: invalid option or value%s%s\n",
            optind <= argc && optind > 0 ? " near " : "",
            optind <= argc && optind > 0 ? argv[optind - 1] : "");
bad_quiet:
    fprintf(stderr, "try 'gravac-bench transport --help'\n");
    return 2;
}

/* ---------------------------------------------------------------- report */

static int bt_one_way(const struct bt_opts *o)
{
    return o->mode == BT_STREAM || o->mode == BT_RAWSTREAM;
}

static const char *bt_direction(const struct bt_opts *o)
{
    return bt_one_way(o) ? "one-way" : "both-ways";
}

static const char *bt_latency_kind(const struct bt_opts *o)
{
    switch (o->mode) {
    case BT_STREAM: return "post-to-completion";
    case BT_RAWSTREAM: return "blocking-write";
    case BT_PINGPONG: return o->rtt ? "rtt" : "rtt/2";
    default: return "push-to-pull-response";
    }
}

static void bt_banner(const struct bt_opts *o, const char *addr)
{
    static const char *const roles[] = {"loopback (server thread + client)", "server", "client"};
    static const char *const lat_text[] = {
        "usec from post to local send completion (stream)",
        "usec, half round trip (RTT/2, as sockperf reports)", "usec, full push + pull round trip",
        "usec per blocking write of a whole message (baseline, no transport)"};
    char iters[64], warm[32];
    if (o->duration_s > 0)
        snprintf(iters, sizeof(iters), "%.1f s per size", o->duration_s);
    else if (o->iters > 0)
        snprintf(iters, sizeof(iters), "%llu", (unsigned long long)o->iters);
    else
        snprintf(iters, sizeof(iters), "auto (by size)");
    if (o->warmup >= 0)
        snprintf(warm, sizeof(warm), "%lld", (long long)o->warmup);
    else
        snprintf(warm, sizeof(warm), "auto");
    printf("------------------------------------------------------------------------------------"
           "-----\n");
    printf("                    gravac transport benchmark: %s\n", mode_names[o->mode]);
    printf(" Transport      : %-24s Role         : %s\n", o->transport, roles[o->role]);
    printf(" Server address : %-24s Connections  : %d\n", addr, o->conns);
    printf(" Sizes          : %-24s Window       : %d per connection\n", o->sizes_desc, o->window);
    printf(" Iterations     : %-24s Warmup       : %s\n", iters, warm);
    printf(" Socket buffers : %-24d Polling      : %s\n", o->sock_buf,
           o->mode == BT_RAWSTREAM ? "blocking read/write"
           : o->busy_poll          ? "busy (progress(0) spin)"
                                   : "epoll_wait (sleeping)");
    printf(" Goodput        : payload only, %s%s\n", bt_direction(o),
           bt_one_way(o) ? " (client -> server)" : " (sum of both directions)");
    printf(" Rate           : %s per second\n", bt_one_way(o) ? "messages" : "round trips");
    printf(" Latency        : %s\n",
           o->mode == BT_PINGPONG && o->rtt ? "usec, full round trip (RTT)" : lat_text[o->mode]);
    printf("------------------------------------------------------------------------------------"
           "-----\n");
    printf(" %10s %9s %12s %9s %9s %9s %9s %9s %9s\n", "bytes", "iters",
           bt_one_way(o) ? "Gb/s(1-way)" : "Gb/s(2-way)", bt_one_way(o) ? "Mmsg/s" : "Mrt/s",
           "lat_min", "p50", "p99", "p99.9", "max");
    fflush(stdout);
}

static void bt_row(const struct bt_opts *o, const struct bt_result *r, int first)
{
    if (o->json) {
        printf("%s\n    {\"bytes\": %llu, \"iters\": %llu, \"total_bytes\": %llu, "
               "\"seconds\": %.6f, \"gbps\": %.4f, \"mrate\": %.6f, \"lat_us\": {\"min\": %.3f, "
               "\"p50\": %.3f, \"p99\": %.3f, \"p99_9\": %.3f, \"max\": %.3f}}",
               first ? "" : ",", (unsigned long long)r->bytes, (unsigned long long)r->iters,
               (unsigned long long)r->total_bytes, r->seconds, r->gbps, r->mrate, r->lat_min,
               r->lat_p50, r->lat_p99, r->lat_p999, r->lat_max);
    } else if (o->csv) {
        printf("%s,%s,%d,%d,%s,%s,%llu,%llu,%.6f,%.4f,%.6f,%.3f,%.3f,%.3f,%.3f,%.3f\n",
               o->transport, mode_names[o->mode], o->conns, o->window, bt_direction(o),
               bt_latency_kind(o), (unsigned long long)r->bytes, (unsigned long long)r->iters,
               r->seconds, r->gbps, r->mrate, r->lat_min, r->lat_p50, r->lat_p99, r->lat_p999,
               r->lat_max);
    } else {
        printf(" %10llu %9llu %12.3f %9.4f %9.2f %9.2f %9.2f %9.2f %9.2f\n",
               (unsigned long long)r->bytes, (unsigned long long)r->iters, r->gbps, r->mrate,
               r->lat_min, r->lat_p50, r->lat_p99, r->lat_p999, r->lat_max);
    }
    fflush(stdout);
}

static void bt_json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

static void bt_header(const struct bt_opts *o, const char *addr)
{
    if (o->json) {
        printf("{\"benchmark\": \"transport\", \"transport\": ");
        bt_json_string(o->transport);
        printf(", \"mode\": \"%s\", \"role\": \"%s\", \"server\": ", mode_names[o->mode],
               o->role == BT_LOOPBACK ? "loopback" : "client");
        bt_json_string(addr);
        printf(", \"conns\": %d, \"window\": %d, \"sock_buf\": %d, \"busy_poll\": %s, "
               "\"direction\": \"%s\", \"latency\": \"%s\", \"results\": [",
               o->conns, o->window, o->sock_buf, o->busy_poll ? "true" : "false", bt_direction(o),
               bt_latency_kind(o));
    } else if (o->csv) {
        printf("transport,mode,conns,window,direction,latency,bytes,iters,seconds,gbps,mrate,"
               "lat_min_us,lat_p50_us,lat_p99_us,lat_p999_us,lat_max_us\n");
    } else {
        bt_banner(o, addr);
    }
}

/* ---------------------------------------------------------------- roles */

struct bt_srv_thread {
    struct gv_tp *tp;
    int busy_poll;
    _Atomic int stop;
    int rc;
};

static void *bt_srv_main(void *arg)
{
    struct bt_srv_thread *st = arg;
    st->rc = bt_serve(st->tp, &st->stop, st->busy_poll);
    return NULL;
}

/* Measures every size, with the transport client cl, or with the raw baseline when cl is
 * NULL; prints the header and the rows. Returns the exit status. */
static int bt_run_sizes(const struct bt_opts *o, const char *addr, struct bt_client *cl)
{
    int rc = 0;

    bt_header(o, addr);
    for (int i = 0; i < o->n_sizes; i++) {
        uint64_t size = o->sizes[i];
        uint64_t iters = o->iters ? o->iters : bt_auto_iters(o->mode, size);
        uint64_t warmup =
            o->warmup >= 0 ? (uint64_t)o->warmup : GV_MAX(1, GV_MIN(1000, iters / 10));
        struct bt_result r;
        gv_status_t status = cl != NULL ? bt_client_run(cl, size, iters, warmup, &r)
                                        : bt_raw_run(o, size, iters, warmup, &r);
        if (status != GV_OK) {
            fprintf(stderr, "gravac-bench transport: size %llu: %s\n", (unsigned long long)size,
                    gv_status_str(status));
            rc = 1;
            break;
        }
        bt_row(o, &r, i == 0);
    }
    if (o->json)
        printf("\n  ], \"ok\": %s}\n", rc == 0 ? "true" : "false");
    return rc;
}

static int bt_run_client(const struct bt_opts *o, const char *host, uint16_t port)
{
    struct bt_client *cl = NULL;
    char addr[300];

    if (gv_tp_addr_advertise(NULL, host, port, addr, sizeof(addr)) != GV_OK)
        snprintf(addr, sizeof(addr), "?");
    gv_status_t status = bt_client_create(o, host, port, &cl);
    if (status != GV_OK) {
        fprintf(stderr, "gravac-bench transport: cannot set up the client to %s: %s\n", addr,
                gv_status_str(status));
        return 1;
    }
    struct bt_opts shown = *o; /* report the backend in use, also for --transport auto */
    shown.transport = bt_client_backend(cl);
    int rc = bt_run_sizes(&shown, addr, cl);
    bt_client_destroy(cl);
    return rc;
}

int gv_bench_transport_main(int argc, char **argv)
{
    struct bt_opts o;
    int rc = bt_parse_args(&o, argc, argv);
    if (rc == 1) {
        bt_usage(stdout);
        return 0;
    }
    if (rc != 0)
        return 2;
    if (strcmp(o.transport, "auto") != 0 && gv_tp_find(o.transport) == NULL) {
        fprintf(stderr, "gravac-bench transport: transport '%s' is not built in\n", o.transport);
        return 2;
    }

    if (o.mode == BT_RAWSTREAM) {
        o.transport = "raw socket (baseline)";
        return bt_run_sizes(&o, "127.0.0.1 (ephemeral)", NULL);
    }
    if (o.role == BT_CLIENT)
        return bt_run_client(&o, o.host, o.port);

    struct bt_srv_thread st = {.busy_poll = o.busy_poll};
    uint16_t port;
    gv_status_t status = bt_server_create(&o, o.host, o.port, &st.tp, &port);
    if (status != GV_OK) {
        fprintf(stderr, "gravac-bench transport: cannot listen on %s port %u: %s\n",
                o.host[0] ? o.host : "(any)", (unsigned)o.port, gv_status_str(status));
        return 1;
    }
    if (o.role == BT_SERVER) {
        fprintf(stderr, "gravac-bench transport: server listening on %s port %u\n",
                o.host[0] ? o.host : "(any)", (unsigned)port);
        return bt_serve(st.tp, &st.stop, o.busy_poll);
    }
    pthread_t th;
    if (pthread_create(&th, NULL, bt_srv_main, &st) != 0) {
        fprintf(stderr, "gravac-bench transport: cannot start the server thread\n");
        st.stop = 1;
        bt_serve(st.tp, &st.stop, 0); /* returns at once and frees the server */
        return 1;
    }
    rc = bt_run_client(&o, o.host, port);
    st.stop = rc != 0; /* on success the server ends when our connections close */
    pthread_join(th, NULL);
    return rc != 0 ? rc : st.rc;
}
