/* metrics_http.c: the /metrics endpoint. GNU libmicrohttpd parses HTTP; a thread of our own
 * drives it (MHD_run_wait) so that between its turns we enforce what it cannot: a total
 * deadline per request (its own timeout counts idle time, which a trickling client resets),
 * admission by age and client address, and one rendering per interval shared by every scrape.
 * Every libmicrohttpd callback runs in that thread, so the connection table needs no lock.
 * We bind the listening socket ourselves (a clear error, and the ephemeral port read back). */
#include "ops_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define HTTP_DEF_CONNS 32
#define HTTP_DEF_PER_IP 8
#define HTTP_DEF_DEADLINE_MS 5000
#define HTTP_DEF_CACHE_MS 200
#define HTTP_TURN_MS 100   /* longest wait of one turn: stop and deadlines are seen this soon */
#define HTTP_BACKOFF_MS 50 /* pause between turns while accept fails for lack of descriptors */
#define HTTP_NICE 10       /* the thread yields to training threads when cores are contended */
#define MS_NS 1000000ull

struct http_ip {
    uint8_t len; /* 4 or 16 (an IPv4-mapped IPv6 address counts as IPv4) */
    uint8_t b[16];
};

struct http_conn { /* one open connection: a slot of gv_metrics_http.conns */
    bool used;
    bool closing;   /* shut down by us; libmicrohttpd closes it in its next turn */
    bool answering; /* a response is queued and not yet sent */
    int fd;
    uint64_t t0_ns; /* the accept, or the end of the previous answer: the deadline's origin */
    struct http_ip ip;
};

struct gv_metrics_http {
    struct MHD_Daemon *daemon;
    struct gv_metrics *reg;
    struct gv_metrics_http_limits lim;
    uint64_t deadline_ns, cache_ns, grace_ns;
    uint16_t port;
    char url[800];
    pthread_t thread;
    bool thread_started;
    _Atomic bool stop;
    /* the loop thread's state */
    struct http_conn *conns; /* [n_slots]: libmicrohttpd's own limit, so a slot is always free */
    uint32_t n_slots;
    struct MHD_Response *page; /* the cached rendering, shared by every answer (refcounted) */
    uint64_t t_page_ns;
    uint64_t backoff_until_ns;
    struct gv_log_limit log_lim, mhd_lim;
    /* stats */
    _Atomic uint64_t n_conns, n_requests, n_renders, n_evicted, n_deadline;
};

/* ---------------------------------------------------------------- addresses */

/* HOST:PORT with an IPv6 literal in brackets; in a URL (url) a zone's '%' becomes "%25". */
static void http_hostport(const char *host, bool v6, uint16_t port, bool url, char *buf, size_t len)
{
    char h[3 * 256 + 3];
    size_t n = 0;
    if (host[0] == '\0')
        host = v6 ? "::" : "0.0.0.0";
    bool literal6 = strchr(host, ':') != NULL;
    if (literal6)
        h[n++] = '[';
    for (const char *p = host; *p != '\0' && n + 5 < sizeof(h); p++) {
        if (*p == '%' && literal6 && url) { /* RFC 6874 */
            memcpy(h + n, "%25", 3);
            n += 3;
        } else {
            h[n++] = *p;
        }
    }
    if (literal6)
        h[n++] = ']';
    h[n] = '\0';
    snprintf(buf, len, "%s:%u", h, port);
}

void ops_http_hostport(const char *host, bool v6, uint16_t port, char *buf, size_t len)
{
    http_hostport(host, v6, port, false, buf, len);
}

void ops_http_url(const char *host, bool v6, uint16_t port, char *buf, size_t len)
{
    char hp[3 * 256 + 10];
    http_hostport(host, v6, port, true, hp, sizeof(hp));
    snprintf(buf, len, "http://%s/metrics", hp);
}

static void http_ip_of(const struct sockaddr *sa, struct http_ip *ip)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    memset(ip, 0, sizeof(*ip));
    if (sa != NULL && sa->sa_family == AF_INET) {
        ip->len = 4;
        memcpy(ip->b, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
    } else if (sa != NULL && sa->sa_family == AF_INET6) {
        const uint8_t *a = ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr;
        bool v4 = memcmp(a, mapped, sizeof(mapped)) == 0;
        ip->len = v4 ? 4 : 16;
        memcpy(ip->b, v4 ? a + 12 : a, ip->len);
    }
}

static bool http_ip_eq(const struct http_ip *a, const struct http_ip *b)
{
    return a->len == b->len && memcmp(a->b, b->b, a->len) == 0;
}

static const char *http_ip_str(const struct http_ip *ip, char *buf, size_t len)
{
    if (ip->len == 0 ||
        inet_ntop(ip->len == 4 ? AF_INET : AF_INET6, ip->b, buf, (socklen_t)len) == NULL)
        snprintf(buf, len, "?");
    return buf;
}

/* ---------------------------------------------------------------- admission and deadlines */

static bool http_live(const struct http_conn *c)
{
    return c->used && !c->closing;
}

static uint32_t http_count_ip(const struct gv_metrics_http *http, const struct http_ip *ip)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < http->n_slots; i++)
        n += http_live(&http->conns[i]) && http_ip_eq(&http->conns[i].ip, ip);
    return n;
}

/* The connection to close for a newcomer: among live ones older than the grace period (and
 * from `only` when given), the one whose address holds the most, then one not being
 * answered, then the oldest. NULL when every candidate is younger: the newcomer is refused,
 * so that a burst of connections cannot push out a scrape about to be answered. */
static struct http_conn *http_victim(struct gv_metrics_http *http, const struct http_ip *only,
                                     uint64_t now)
{
    struct http_conn *best = NULL;
    uint32_t best_n = 0;
    for (uint32_t i = 0; i < http->n_slots; i++) {
        struct http_conn *c = &http->conns[i];
        if (!http_live(c) || now - c->t0_ns < http->grace_ns ||
            (only != NULL && !http_ip_eq(&c->ip, only)))
            continue;
        uint32_t n = only != NULL ? 1 : http_count_ip(http, &c->ip);
        if (best == NULL || n > best_n ||
            (n == best_n && (best->answering > c->answering ||
                             (best->answering == c->answering && c->t0_ns < best->t0_ns)))) {
            best = c;
            best_n = n;
        }
    }
    return best;
}

/* Closes c from our side: libmicrohttpd sees the shut-down socket in its next turn, closes it
 * and tells http_notify. The descriptor stays valid until then (this is its only thread). */
static void http_shut(struct http_conn *c)
{
    shutdown(c->fd, SHUT_RDWR);
    c->closing = true;
}

/* libmicrohttpd's accept policy: called for each accepted socket before it becomes a
 * connection. Returning MHD_NO closes the socket. */
static enum MHD_Result http_admit(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    struct gv_metrics_http *http = cls;
    struct http_ip ip;
    char a[INET6_ADDRSTRLEN];
    (void)addrlen;
    http_ip_of(addr, &ip);
    uint64_t now = gv_now_ns();
    uint32_t live = 0, same = http_count_ip(http, &ip);
    for (uint32_t i = 0; i < http->n_slots; i++)
        live += http_live(&http->conns[i]);
    bool per_ip = same >= http->lim.max_conns_per_ip;
    if (!per_ip && live < http->lim.max_conns)
        return MHD_YES;
    struct http_conn *victim = http_victim(http, per_ip ? &ip : NULL, now);
    if (victim == NULL) {
        GV_LOG_LIMITED(GV_LOG_WARN, &http->log_lim,
                       "metrics http: refused a connection from %s: %u open from it and %u in "
                       "all (limits %u and %u), none older than %.1f s",
                       http_ip_str(&ip, a, sizeof(a)), same, live, http->lim.max_conns_per_ip,
                       http->lim.max_conns, (double)http->grace_ns * 1e-9);
        return MHD_NO;
    }
    if (per_ip) {
        GV_LOG_LIMITED(GV_LOG_WARN, &http->log_lim,
                       "metrics http: %s holds %u connections (limit %u): closed its oldest "
                       "for a new one",
                       http_ip_str(&ip, a, sizeof(a)), same, http->lim.max_conns_per_ip);
    } else {
        char b[INET6_ADDRSTRLEN];
        GV_LOG_LIMITED(GV_LOG_WARN, &http->log_lim,
                       "metrics http: %u connections open (limit %u): closed the oldest of %s "
                       "(%u open from it) for a new one from %s",
                       live, http->lim.max_conns, http_ip_str(&victim->ip, a, sizeof(a)),
                       http_count_ip(http, &victim->ip), http_ip_str(&ip, b, sizeof(b)));
    }
    atomic_fetch_add(&http->n_evicted, 1);
    http_shut(victim);
    return MHD_YES;
}

static void http_notify(void *cls, struct MHD_Connection *conn, void **socket_ctx,
                        enum MHD_ConnectionNotificationCode code)
{
    struct gv_metrics_http *http = cls;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        struct http_conn *c = *socket_ctx;
        if (c != NULL)
            memset(c, 0, sizeof(*c));
        *socket_ctx = NULL;
        return;
    }
    const union MHD_ConnectionInfo *fd =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *addr =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    atomic_fetch_add(&http->n_conns, 1);
    for (uint32_t i = 0; fd != NULL && i < http->n_slots; i++) {
        struct http_conn *c = &http->conns[i];
        if (c->used)
            continue;
        *c = (struct http_conn){.used = true, .fd = fd->connect_fd, .t0_ns = gv_now_ns()};
        http_ip_of(addr != NULL ? addr->client_addr : NULL, &c->ip);
        *socket_ctx = c;
        return;
    }
    /* unreachable while the slots match libmicrohttpd's connection limit: refuse to serve a
     * connection we could not put under a deadline */
    if (fd != NULL)
        shutdown(fd->connect_fd, SHUT_RDWR);
}

static struct http_conn *http_conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci != NULL ? ci->socket_context : NULL;
}

/* A request ended (answered, or cut): a kept-alive connection's next request gets a full
 * deadline from now. */
static void http_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                           enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)req_cls;
    (void)toe;
    struct http_conn *c = http_conn_of(conn);
    if (c != NULL && !c->closing) {
        c->answering = false;
        c->t0_ns = gv_now_ns();
    }
}

/* Shuts every connection past its deadline; returns the nanoseconds until the next one. */
static uint64_t http_sweep(struct gv_metrics_http *http, uint64_t now)
{
    uint64_t next = UINT64_MAX;
    for (uint32_t i = 0; i < http->n_slots; i++) {
        struct http_conn *c = &http->conns[i];
        if (!http_live(c))
            continue;
        uint64_t age = now - c->t0_ns;
        if (age < http->deadline_ns) {
            next = GV_MIN(next, http->deadline_ns - age);
            continue;
        }
        char a[INET6_ADDRSTRLEN];
        GV_LOG_LIMITED(GV_LOG_WARN, &http->log_lim,
                       "metrics http: closed a connection from %s: %s within %.1f s",
                       http_ip_str(&c->ip, a, sizeof(a)),
                       c->answering ? "the answer was not taken" : "no complete request",
                       (double)http->deadline_ns * 1e-9);
        atomic_fetch_add(&http->n_deadline, 1); /* before the client can see the close */
        http_shut(c);
    }
    return next;
}

/* ---------------------------------------------------------------- requests */

/* The page, rendered again only when the cached one is older than cache_ms: however many
 * clients scrape, the registry lock is taken at most once per interval. NULL: out of memory. */
static struct MHD_Response *http_page(struct gv_metrics_http *http)
{
    uint64_t now = gv_now_ns();
    if (http->page != NULL && now - http->t_page_ns < http->cache_ns)
        return http->page;
    char *body;
    size_t len;
    if (gv_metrics_render(http->reg, &body, &len) != GV_OK)
        return NULL;
    atomic_fetch_add(&http->n_renders, 1);
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(len, body, gv_free);
    if (r == NULL) {
        gv_free(body);
        return NULL;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8");
    if (http->page != NULL)
        MHD_destroy_response(http->page); /* answers still sending it hold their reference */
    http->page = r;
    http->t_page_ns = now;
    return r;
}

static enum MHD_Result http_reply(struct MHD_Connection *conn, unsigned int code, const char *msg)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(msg), (void *)msg, MHD_RESPMEM_PERSISTENT);
    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result ret = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result http_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                    const char *method, const char *version,
                                    const char *upload_data, size_t *upload_data_size,
                                    void **req_cls)
{
    struct gv_metrics_http *http = cls;
    static int seen;
    (void)version;
    (void)upload_data;
    if (*req_cls == NULL) {
        /* the headers are in; answering only on the next call (a body, if any, being read)
         * is what lets libmicrohttpd keep the connection alive */
        *req_cls = &seen;
        return MHD_YES;
    }
    if (*upload_data_size != 0) {
        *upload_data_size = 0; /* a body is read and discarded (within the deadline) */
        return MHD_YES;
    }
    struct http_conn *c = http_conn_of(conn);
    if (c != NULL)
        c->answering = true;
    atomic_fetch_add(&http->n_requests, 1);
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return http_reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed: use GET\n");
    if (strcmp(url, "/metrics") != 0)
        return http_reply(conn, MHD_HTTP_NOT_FOUND, "not found: the metrics are at /metrics\n");
    struct MHD_Response *page = http_page(http);
    if (page == NULL)
        return http_reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    return MHD_queue_response(conn, MHD_HTTP_OK, page);
}

/* libmicrohttpd's error log, rate-limited: a flood of refused or failing connections must not
 * become a flood of log lines. A descriptor shortage also pauses our loop (see http_run). */
static void http_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

static void http_log(void *cls, const char *fmt, va_list ap)
{
    struct gv_metrics_http *http = cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    uint64_t now = gv_now_ns();
    if (strstr(msg, "resource limit") != NULL || strstr(msg, "Too many open files") != NULL)
        http->backoff_until_ns = now + HTTP_BACKOFF_MS * MS_NS;
    gv_log_limited_at(GV_LOG_WARN, &http->mhd_lim, now, "metrics http: %s", msg);
}

/* ---------------------------------------------------------------- the thread */

static void *http_run(void *arg)
{
    struct gv_metrics_http *http = arg;
    pid_t tid = gettid();
    if (setpriority(PRIO_PROCESS, (id_t)tid, HTTP_NICE) != 0)
        gv_log(GV_LOG_DEBUG, "metrics http: setpriority: %s", strerror(errno));
    pthread_setname_np(pthread_self(), "gv-metrics");
    uint64_t wait_ns = HTTP_TURN_MS * MS_NS;
    while (!atomic_load(&http->stop)) {
        uint64_t now = gv_now_ns();
        enum MHD_Result ret;
        if (now < http->backoff_until_ns) {
            /* accept fails with EMFILE while the queued connection stays readable: without
             * a pause libmicrohttpd would retry at once, a spinning core */
            usleep((useconds_t)(GV_MIN(http->backoff_until_ns - now, wait_ns) / 1000));
            ret = MHD_run_wait(http->daemon, 0);
        } else {
            ret = MHD_run_wait(http->daemon, (int32_t)((wait_ns + MS_NS - 1) / MS_NS));
        }
        if (ret != MHD_YES) { /* not expected; whatever it is, it must not spin */
            GV_LOG_LIMITED(GV_LOG_ERROR, &http->log_lim,
                           "metrics http: libmicrohttpd failed a turn; pausing %d ms",
                           HTTP_TURN_MS);
            usleep(HTTP_TURN_MS * 1000);
        }
        now = gv_now_ns();
        wait_ns = GV_MIN(http_sweep(http, now), HTTP_TURN_MS * MS_NS);
        gv_log_limit_flush_at(GV_LOG_WARN, &http->log_lim, now, "metrics http");
        gv_log_limit_flush_at(GV_LOG_WARN, &http->mhd_lim, now, "metrics http (libmicrohttpd)");
    }
    return NULL;
}

/* ---------------------------------------------------------------- start and stop */

/* A bound, listening socket for addr; *port_p gets the port actually bound. */
static gv_status_t http_listen(const struct gv_hostport *addr, int *fd_p, bool *v6_p,
                               uint16_t *port_p)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res;
    char port[8];
    const char *host = addr->host[0] ? addr->host : NULL;
    snprintf(port, sizeof(port), "%u", addr->port);
    int ret = getaddrinfo(host, port, &hints, &res);
    if (ret != 0) {
        gv_log(GV_LOG_ERROR, "metrics http: cannot resolve '%s': %s", addr->host,
               gai_strerror(ret));
        return GV_ERR_INVAL;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 64) != 0) {
        int err = errno;
        char hp[800];
        ops_http_hostport(addr->host, res->ai_family == AF_INET6, addr->port, hp, sizeof(hp));
        gv_log(GV_LOG_ERROR, "metrics http: cannot listen on %s: %s", hp, strerror(err));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(res);
        return GV_ERR_IO;
    }
    *v6_p = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        gv_log(GV_LOG_ERROR, "metrics http: getsockname: %s", strerror(errno));
        close(fd);
        return GV_ERR_IO;
    }
    *port_p = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    *fd_p = fd;
    return GV_OK;
}

static void http_limits(struct gv_metrics_http *http, const struct gv_metrics_http_limits *l)
{
    struct gv_metrics_http_limits z = {0};
    if (l == NULL)
        l = &z;
    http->lim.max_conns = l->max_conns ? l->max_conns : HTTP_DEF_CONNS;
    http->lim.max_conns_per_ip = l->max_conns_per_ip ? l->max_conns_per_ip : HTTP_DEF_PER_IP;
    http->lim.max_conns_per_ip = GV_MIN(http->lim.max_conns_per_ip, http->lim.max_conns);
    http->lim.deadline_ms = l->deadline_ms ? l->deadline_ms : HTTP_DEF_DEADLINE_MS;
    http->lim.cache_ms = l->cache_ms ? l->cache_ms : HTTP_DEF_CACHE_MS;
    http->deadline_ns = http->lim.deadline_ms * MS_NS;
    http->cache_ns = http->lim.cache_ms * MS_NS;
    /* younger connections are never closed for a newcomer: a tenth of the deadline leaves a
     * scrape (milliseconds) time to be answered, a trickler none to hold its place */
    http->grace_ns = http->deadline_ns / 10;
    /* room for connections we shut that libmicrohttpd has not closed yet */
    http->n_slots = 2 * http->lim.max_conns;
    http->log_lim = (struct gv_log_limit)GV_LOG_LIMIT_INIT(5, 10000);
    http->mhd_lim = (struct gv_log_limit)GV_LOG_LIMIT_INIT(5, 10000);
}

gv_status_t gv_metrics_http_start_limits(struct gv_metrics *reg, const struct gv_hostport *addr,
                                         const struct gv_metrics_http_limits *limits,
                                         struct gv_metrics_http **http_p)
{
    int fd;
    bool v6;
    gv_status_t status = GV_ERR_NOMEM;
    struct gv_metrics_http *http = gv_calloc(1, sizeof(*http));
    if (http == NULL)
        return GV_ERR_NOMEM;
    http->reg = reg;
    http_limits(http, limits);
    http->conns = gv_calloc(http->n_slots, sizeof(*http->conns));
    if (http->conns == NULL)
        goto err_free;
    if ((status = http_listen(addr, &fd, &v6, &http->port)) != GV_OK)
        goto err_free;
    ops_http_url(addr->host, v6, http->port, http->url, sizeof(http->url));
    /* no internal thread: http_run drives the daemon. epoll, not select: the server's
     * descriptors may be numbered past FD_SETSIZE */
    unsigned int flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
    unsigned int idle_s = (http->lim.deadline_ms + 999) / 1000 + 1; /* a backstop only */
    http->daemon = MHD_start_daemon(
        flags, http->port, http_admit, http, http_handler, http, MHD_OPTION_EXTERNAL_LOGGER,
        http_log, http, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT, http->n_slots,
        MHD_OPTION_CONNECTION_TIMEOUT, idle_s, MHD_OPTION_NOTIFY_CONNECTION, http_notify, http,
        MHD_OPTION_NOTIFY_COMPLETED, http_completed, http, MHD_OPTION_END);
    if (http->daemon == NULL) {
        gv_log(GV_LOG_ERROR, "metrics http: libmicrohttpd failed to start on port %u", http->port);
        close(fd);
        status = GV_ERR_IO;
        goto err_free;
    }
    int ret = pthread_create(&http->thread, NULL, http_run, http);
    if (ret != 0) {
        gv_log(GV_LOG_ERROR, "metrics http: pthread_create: %s", strerror(ret));
        status = ret == ENOMEM ? GV_ERR_NOMEM : GV_ERR_IO;
        goto err_stop;
    }
    http->thread_started = true;
    gv_log(GV_LOG_INFO, "metrics: serving %s", http->url);
    *http_p = http;
    return GV_OK;

err_stop:
    MHD_stop_daemon(http->daemon); /* closes the listening socket */
err_free:
    gv_free(http->conns);
    gv_free(http);
    return status;
}

gv_status_t gv_metrics_http_start(struct gv_metrics *reg, const struct gv_hostport *addr,
                                  struct gv_metrics_http **http_p)
{
    return gv_metrics_http_start_limits(reg, addr, NULL, http_p);
}

uint16_t gv_metrics_http_port(const struct gv_metrics_http *http)
{
    return http->port;
}

const char *gv_metrics_http_url(const struct gv_metrics_http *http, char *buf, size_t len)
{
    snprintf(buf, len, "%s", http->url);
    return buf;
}

void gv_metrics_http_stats(const struct gv_metrics_http *http, struct gv_metrics_http_stats *st)
{
    struct gv_metrics_http *h = (struct gv_metrics_http *)http; /* atomics: loads only */
    st->conns = atomic_load(&h->n_conns);
    st->requests = atomic_load(&h->n_requests);
    st->renders = atomic_load(&h->n_renders);
    st->evicted = atomic_load(&h->n_evicted);
    st->deadline = atomic_load(&h->n_deadline);
}

void gv_metrics_http_stop(struct gv_metrics_http *http)
{
    if (http == NULL)
        return;
    if (http->thread_started) {
        atomic_store(&http->stop, true);
        pthread_join(http->thread, NULL);
    }
    if (http->daemon != NULL)
        MHD_stop_daemon(http->daemon); /* closes every connection and the listening socket */
    if (http->page != NULL)
        MHD_destroy_response(http->page);
    gv_free(http->conns);
    gv_free(http);
}
