/* test_metrics_http_abuse.c: the /metrics endpoint under slow, greedy or careless clients
 * (issue 18, item 7), over loopback with ephemeral ports. One scenario per ctest:
 *   slow      40 clients each trickle one header line per second and reconnect when closed,
 *             from 127.0.0.2 (and then 40 from the scraper's own address): a scraper must get
 *             a complete page within 2 s every 0.5 s, for 6 s
 *   deadline  a client sending a header byte every 100 ms (never idle) is closed at the
 *             request deadline (1 s here); a kept-alive client whose requests each complete in
 *             time is served beyond it; an idle kept-alive connection is closed
 *   storm     50 clients scraping in a tight loop while a CPU-bound loop updates the registry:
 *             the page is rendered at most once per cache interval (the endpoint's render
 *             counter, not timing), every answer is complete, no client sees a value go back
 *   fdlimit   accept failing with EMFILE: libmicrohttpd's own error lines are rate-limited and
 *             the endpoint does not spin; it serves again once descriptors are free
 *   url       the URL logged for an IPv6 endpoint has brackets; the formatter's cases
 * Usage: test_ops_metrics_http_abuse SCENARIO. */
#include "check.h"
#include "ops_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static double now_s(void)
{
    return gv_now_s();
}

/* ---------------------------------------------------------------- log capture */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static int log_lines;          /* lines starting "metrics http" */
static char log_first[8][400]; /* the first few of them, and the URL line */
static char log_url[400];

static void capture(enum gv_log_level level, const char *line, void *arg)
{
    (void)level;
    (void)arg;
    pthread_mutex_lock(&log_mu);
    if (strncmp(line, "metrics http", 12) == 0) {
        if (log_lines < 8)
            snprintf(log_first[log_lines], sizeof(log_first[0]), "%s", line);
        log_lines++;
    }
    if (strncmp(line, "metrics: serving ", 17) == 0)
        snprintf(log_url, sizeof(log_url), "%s", line);
    pthread_mutex_unlock(&log_mu);
}

static int log_count(void)
{
    pthread_mutex_lock(&log_mu);
    int n = log_lines;
    pthread_mutex_unlock(&log_mu);
    return n;
}

/* ---------------------------------------------------------------- a small HTTP client */

/* A blocking TCP connection to [::1] or 127.0.0.1:port, from source address `from` (IPv4,
 * NULL: any). -1 when the connection fails. */
static int dial(int family, const char *from, uint16_t port)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (family == AF_INET6) {
        struct sockaddr_in6 sa = {
            .sin6_family = AF_INET6, .sin6_port = htons(port), .sin6_addr = IN6ADDR_LOOPBACK_INIT};
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            return fd;
    } else {
        struct sockaddr_in src = {.sin_family = AF_INET};
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
        inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
        if (from != NULL)
            inet_pton(AF_INET, from, &src.sin_addr);
        if ((from == NULL || bind(fd, (struct sockaddr *)&src, sizeof(src)) == 0) &&
            connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            return fd;
    }
    close(fd);
    return -1;
}

static bool send_all(int fd, const char *s)
{
    size_t n = strlen(s);
    return send(fd, s, n, MSG_NOSIGNAL) == (ssize_t)n;
}

/* Waits until fd is readable or the deadline (seconds on now_s) passes. */
static bool wait_readable(int fd, double deadline)
{
    double left = deadline - now_s();
    if (left <= 0)
        return false;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, (int)(left * 1000) + 1) > 0;
}

/* Reads one HTTP answer from fd before the deadline: its status code (0: none, or cut), the
 * body (malloc'd, NUL-terminated) when it is complete by its Content-Length. With `to_eof`
 * the answer must also be followed by the end of the connection (HTTP/1.0). */
static int read_answer(int fd, double deadline, bool to_eof, char **body_p, char *why,
                       size_t why_len)
{
    size_t cap = 1 << 18, len = 0;
    char *buf = malloc(cap);
    int code = 0;
    *body_p = NULL;
    snprintf(why, why_len, "timed out");
    if (buf == NULL)
        return 0;
    char *end = NULL;
    long clen = -1;
    for (;;) {
        if (end != NULL && clen >= 0 && (size_t)(end + 4 - buf) + (size_t)clen <= len && !to_eof)
            break;
        if (!wait_readable(fd, deadline) || len + 1 >= cap)
            goto done;
        ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
        if (n < 0) {
            snprintf(why, why_len, "recv: %s", strerror(errno));
            goto done;
        }
        if (n == 0) {
            snprintf(why, why_len, "closed after %zu bytes", len);
            break;
        }
        len += (size_t)n;
        buf[len] = '\0';
        if (end == NULL && (end = strstr(buf, "\r\n\r\n")) != NULL) {
            const char *cl = strcasestr(buf, "\r\nContent-Length:");
            clen = cl != NULL && cl < end ? strtol(cl + 17, NULL, 10) : -1;
        }
    }
    buf[len] = '\0';
    if (end == NULL || sscanf(buf, "HTTP/1.%*d %d", &code) != 1)
        goto done;
    size_t body_len = len - (size_t)(end + 4 - buf);
    if (clen < 0 || body_len != (size_t)clen) {
        snprintf(why, why_len, "status %d, body %zu bytes of %ld", code, body_len, clen);
        code = 0;
        goto done;
    }
    *body_p = strdup(end + 4);
    snprintf(why, why_len, "ok");
done:
    free(buf);
    return code;
}

/* One scrape over a new connection (HTTP/1.0: the server closes after answering). The body
 * of a complete 200 answer (malloc'd), or NULL with why set; *secs_p: the time it took. */
static char *scrape(int family, const char *from, uint16_t port, double timeout, double *secs_p,
                    char *why, size_t why_len)
{
    double t0 = now_s();
    char *body = NULL;
    int fd = dial(family, from, port);
    if (fd < 0) {
        snprintf(why, why_len, "connect: %s", strerror(errno));
    } else if (!send_all(fd, "GET /metrics HTTP/1.0\r\n\r\n")) {
        snprintf(why, why_len, "send: %s", strerror(errno));
    } else {
        int code = read_answer(fd, t0 + timeout, true, &body, why, why_len);
        if (code != 200 && body != NULL) {
            snprintf(why, why_len, "status %d", code);
            free(body);
            body = NULL;
        }
    }
    if (fd >= 0)
        close(fd);
    *secs_p = now_s() - t0;
    return body;
}

static double sample(const char *text, const char *name)
{
    char key[128];
    snprintf(key, sizeof(key), "\n%s ", name);
    const char *p = text ? strstr(text, key) : NULL;
    return p ? strtod(p + strlen(key), NULL) : NAN;
}

/* A registry with a few families, and an endpoint on host ("127.0.0.1:0", "[::1]:0"). */
static struct gv_metrics *reg;
static struct gv_metric *spin;

static struct gv_metrics_http *endpoint(const char *host, const struct gv_metrics_http_limits *lim)
{
    if (reg == NULL) {
        GV_CHECK_OK(gv_metrics_create(&reg));
        GV_CHECK_OK(gv_metrics_get(reg, GV_METRIC_COUNTER, "gravac_test_spin_total",
                                   "Iterations of the test's busy loop.", NULL, 0, &spin));
        for (int i = 0; i < 40; i++) { /* a page of a realistic size (a few KB) */
            char w[8];
            snprintf(w, sizeof(w), "%d", i);
            const char *const l[] = {"worker", w, NULL};
            struct gv_metric *m;
            GV_CHECK_OK(gv_metrics_get(reg, GV_METRIC_GAUGE, "gravac_worker_last_seen_seconds",
                                       "Last seen.", l, 0, &m));
            gv_metric_set(m, 1700000000.25 + i);
        }
    }
    struct gv_hostport addr;
    GV_CHECK_OK(gv_parse_hostport(host, &addr));
    struct gv_metrics_http *http = NULL;
    GV_CHECK_OK(gv_metrics_http_start_limits(reg, &addr, lim, &http));
    return http;
}

/* ---------------------------------------------------------------- slow: tricklers */

#define N_TRICKLE 40

struct tricklers {
    uint16_t port;
    const char *from; /* source address */
    bool reconnect;   /* open a new connection when one is closed */
    int fd[N_TRICKLE];
    _Atomic int stop;
    int closed; /* connections the server closed */
    int lines;  /* header lines sent */
};

static void trickle_open(struct tricklers *t, int i)
{
    t->fd[i] = dial(AF_INET, t->from, t->port);
    if (t->fd[i] >= 0 && !send_all(t->fd[i], "GET /metrics HTTP/1.1\r\nHost: slow\r\n")) {
        close(t->fd[i]);
        t->fd[i] = -1;
    }
}

/* Every second: one more header line on each connection; a closed one is counted and, with
 * reconnect, opened again. The request is never finished. */
static void *trickle_loop(void *arg)
{
    struct tricklers *t = arg;
    for (int i = 0; i < N_TRICKLE; i++)
        trickle_open(t, i);
    for (int tick = 0; !t->stop; tick++) {
        for (int k = 0; k < 20 && !t->stop; k++)
            usleep(50000);
        for (int i = 0; i < N_TRICKLE && !t->stop; i++) {
            char line[64], c;
            if (t->fd[i] >= 0) {
                ssize_t n = recv(t->fd[i], &c, 1, MSG_DONTWAIT | MSG_PEEK);
                snprintf(line, sizeof(line), "X-Trickle-%d: %d\r\n", i, tick);
                if ((n == 0 || (n < 0 && errno != EAGAIN)) || !send_all(t->fd[i], line)) {
                    close(t->fd[i]);
                    t->fd[i] = -1;
                    t->closed++;
                } else {
                    t->lines++;
                }
            }
            if (t->fd[i] < 0 && t->reconnect)
                trickle_open(t, i);
        }
    }
    for (int i = 0; i < N_TRICKLE; i++)
        if (t->fd[i] >= 0)
            close(t->fd[i]);
    return NULL;
}

/* Scrapes every 0.5 s for `secs` seconds while the tricklers run; each must complete in 2 s. */
static void scrape_while(uint16_t port, double secs, const char *what, double *worst)
{
    double end = now_s() + secs;
    int ok = 0, n = 0;
    while (now_s() < end) {
        char why[128];
        double took;
        char *body = scrape(AF_INET, "127.0.0.1", port, 2.0, &took, why, sizeof(why));
        n++;
        bool good = body != NULL && sample(body, "gravac_test_spin_total") >= 0 &&
                    strstr(body, "gravac_worker_last_seen_seconds{worker=\"39\"}") != NULL;
        ok += good;
        GV_CHECK_MSG(good && took < 2.0, "%s: scrape %d: %s after %.3f s", what, n, why, took);
        *worst = GV_MAX(*worst, took);
        free(body);
        usleep(500000);
    }
    printf("%s: %d of %d scrapes complete, the slowest took %.1f ms\n", what, ok, n, *worst * 1e3);
    GV_CHECK(n >= 8);
}

static void scenario_slow(void)
{
    struct gv_metrics_http *http = endpoint("127.0.0.1:0", NULL);
    if (http == NULL)
        return;
    uint16_t port = gv_metrics_http_port(http);

    /* from another address, reconnecting: they cannot push out a scraper */
    struct tricklers t = {.port = port, .from = "127.0.0.2", .reconnect = true};
    pthread_t th;
    pthread_create(&th, NULL, trickle_loop, &t);
    usleep(300000);
    double worst = 0;
    scrape_while(port, 6.0, "40 reconnecting tricklers from 127.0.0.2", &worst);
    t.stop = 1;
    pthread_join(th, NULL);
    struct gv_metrics_http_stats st;
    gv_metrics_http_stats(http, &st);
    printf("tricklers: %d header lines sent, %d connections closed by the server; endpoint: "
           "%" PRIu64 " connections, %" PRIu64 " requests, %" PRIu64 " closed for newer ones, "
           "%" PRIu64 " at the deadline\n",
           t.lines, t.closed, st.conns, st.requests, st.evicted, st.deadline);
    GV_CHECK(t.lines >= 8); /* they did trickle */
    GV_CHECK(st.evicted + st.deadline >= 1);

    /* from the scraper's own address, as in the report (no reconnecting): a scrape closes the
     * oldest of them once they are older than the grace period (0.5 s by default) */
    struct tricklers u = {.port = port, .from = "127.0.0.1", .reconnect = false};
    pthread_create(&th, NULL, trickle_loop, &u);
    usleep(700000);
    double worst2 = 0;
    scrape_while(port, 6.0, "40 tricklers from the scraper's address", &worst2);
    u.stop = 1;
    pthread_join(th, NULL);
    gv_metrics_http_stop(http);
}

/* ---------------------------------------------------------------- deadline */

/* Seconds until the server closes fd (EOF or reset) while we send one byte every 100 ms;
 * -1 if it stays open `limit` seconds. */
static double trickle_until_closed(int fd, double limit)
{
    double t0 = now_s();
    static const char hdr[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    if (!send_all(fd, hdr))
        return 0;
    while (now_s() - t0 < limit) {
        if (wait_readable(fd, now_s() + 0.1)) {
            char buf[512];
            ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN))
                return now_s() - t0;
        }
        if (send(fd, "a", 1, MSG_NOSIGNAL) != 1)
            return now_s() - t0;
    }
    return -1;
}

static void scenario_deadline(void)
{
    const struct gv_metrics_http_limits lim = {.deadline_ms = 1000};
    struct gv_metrics_http *http = endpoint("127.0.0.1:0", &lim);
    if (http == NULL)
        return;
    uint16_t port = gv_metrics_http_port(http);

    /* never idle, never complete: closed at the deadline (1 s), not at the idle timeout */
    int fd = dial(AF_INET, NULL, port);
    GV_CHECK(fd >= 0);
    double t = fd >= 0 ? trickle_until_closed(fd, 4.0) : -1;
    printf("a client sending a header byte every 100 ms was closed after %.2f s "
           "(-1: still open after 4 s)\n",
           t);
    GV_CHECK_MSG(t >= 0.9 && t < 2.5, "closed after %.2f s, want about 1 s", t);
    if (fd >= 0)
        close(fd);

    /* kept alive: four requests 0.6 s apart on one connection (2.4 s in all, past the 1 s
     * deadline), each answered: the deadline counts from the previous answer */
    fd = dial(AF_INET, NULL, port);
    GV_CHECK(fd >= 0);
    for (int i = 0; fd >= 0 && i < 4; i++) {
        char why[128], *body = NULL;
        bool sent = send_all(fd, "GET /metrics HTTP/1.1\r\nHost: keep\r\n\r\n");
        int code = sent ? read_answer(fd, now_s() + 2.0, false, &body, why, sizeof(why)) : 0;
        GV_CHECK_MSG(code == 200 && body != NULL, "kept-alive request %d: %d %s", i, code,
                     sent ? why : "send failed");
        free(body);
        usleep(600000);
    }
    /* then idle: closed within the deadline (plus a turn) */
    double t0 = now_s();
    bool closed = false;
    while (fd >= 0 && !closed && now_s() - t0 < 3.0) {
        char c;
        if (wait_readable(fd, now_s() + 0.1))
            closed = recv(fd, &c, 1, 0) <= 0;
    }
    GV_CHECK_MSG(closed && now_s() - t0 < 1.5, "idle kept-alive connection %s after %.2f s",
                 closed ? "closed" : "still open", now_s() - t0);
    if (fd >= 0)
        close(fd);
    struct gv_metrics_http_stats st;
    gv_metrics_http_stats(http, &st);
    GV_CHECK_EQ(st.deadline, 2);
    GV_CHECK_EQ(st.requests, 4);
    gv_metrics_http_stop(http);
}

/* ---------------------------------------------------------------- storm */

#define N_STORM 50

struct stormer {
    uint16_t port;
    char from[16];
    _Atomic int *stop;
    _Atomic int *total_ok;
    int ok, failed, bad, back;
    char why[160];
};

static void *storm_loop(void *arg)
{
    struct stormer *s = arg;
    double last = -1;
    while (!*s->stop) {
        char why[128];
        int fd = dial(AF_INET, s->from, s->port);
        if (fd < 0) {
            s->failed++;
            continue;
        }
        char *body = NULL;
        int code = send_all(fd, "GET /metrics HTTP/1.0\r\n\r\n")
                       ? read_answer(fd, now_s() + 10.0, true, &body, why, sizeof(why))
                       : 0;
        close(fd);
        if (code == 200 && body != NULL) {
            double v = sample(body, "gravac_test_spin_total");
            s->ok++;
            atomic_fetch_add(s->total_ok, 1);
            s->back += v < last;
            last = v;
        } else if (code != 0 || (strncmp(why, "closed after 0 ", 15) != 0 &&
                                 strcmp(why, "recv: Connection reset by peer") != 0)) {
            /* a refused or displaced connection is closed before any byte of an answer: that
             * is allowed; anything else (a cut answer, another status) is not */
            s->bad++;
            snprintf(s->why, sizeof(s->why), "%d %s", code, why);
        } else {
            s->failed++;
        }
        free(body);
    }
    return NULL;
}

static void scenario_storm(void)
{
    struct gv_metrics_http *http = endpoint("127.0.0.1:0", NULL);
    if (http == NULL)
        return;
    uint16_t port = gv_metrics_http_port(http);
    static struct stormer s[N_STORM];
    pthread_t th[N_STORM];
    _Atomic int stop = 0, total_ok = 0;
    double t0 = now_s(), t; /* before any client: every render falls after it */
    for (int i = 0; i < N_STORM; i++) {
        s[i] = (struct stormer){.port = port, .stop = &stop, .total_ok = &total_ok};
        snprintf(s[i].from, sizeof(s[i].from), "127.0.1.%d", 1 + i); /* one address each */
        pthread_create(&th[i], NULL, storm_loop, &s[i]);
    }
    /* the "training" loop: CPU-bound, taking the registry lock as the server's updates do,
     * until enough scrapes were answered (at least 2 s; at most 10 s on a slow machine) */
    uint64_t iters = 0;
    do {
        for (int k = 0; k < 4096; k++)
            gv_metric_inc(spin, 1);
        iters += 4096;
        t = now_s() - t0;
    } while (t < 10.0 && (t < 2.0 || total_ok < 500));
    stop = 1;
    for (int i = 0; i < N_STORM; i++)
        pthread_join(th[i], NULL);
    double elapsed = now_s() - t0;
    struct gv_metrics_http_stats st;
    gv_metrics_http_stats(http, &st);
    int ok = 0, failed = 0, bad = 0, back = 0;
    for (int i = 0; i < N_STORM; i++) {
        ok += s[i].ok;
        failed += s[i].failed;
        bad += s[i].bad;
        back += s[i].back;
        GV_CHECK_MSG(s[i].bad == 0, "client %d: %d bad answers, the last: %s", i, s[i].bad,
                     s[i].why);
    }
    /* renders are at least cache_ms (200 ms) apart: at most elapsed / 0.2 + 1 */
    uint64_t bound = (uint64_t)(elapsed / 0.2) + 1;
    printf("storm: %.1f s, %d scrapes answered, %d refused, %" PRIu64 " requests, %" PRIu64
           " renders (bound %" PRIu64 "), busy loop %.2f M iterations/s\n",
           elapsed, ok, failed, st.requests, st.renders, bound, (double)iters / elapsed * 1e-6);
    GV_CHECK_MSG(st.renders <= bound, "%" PRIu64 " renders in %.1f s", st.renders, elapsed);
    GV_CHECK(st.renders >= 1);
    GV_CHECK_MSG(ok >= 100, "only %d scrapes answered", ok);
    GV_CHECK_EQ(back, 0);
    GV_CHECK_EQ(bad, 0);
    gv_metrics_http_stop(http);
}

/* ---------------------------------------------------------------- fdlimit */

static void scenario_fdlimit(void)
{
    struct gv_metrics_http *http = endpoint("127.0.0.1:0", NULL);
    if (http == NULL)
        return;
    uint16_t port = gv_metrics_http_port(http);
    /* the client sockets first, then every descriptor left is taken: the endpoint's accept
     * fails with EMFILE while the connection waits in its queue */
    int cl[3];
    for (int i = 0; i < 3; i++)
        cl[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct rlimit old, low;
    getrlimit(RLIMIT_NOFILE, &old);
    int top = dup(0);
    low = old;
    low.rlim_cur = (rlim_t)top + 1;
    close(top);
    GV_CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    int filler[64], nf = 0;
    while (nf < 64 && (filler[nf] = dup(0)) >= 0)
        nf++;
    GV_CHECK(nf >= 1);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int before = log_count();
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    double t0 = now_s();
    GV_CHECK(connect(cl[0], (struct sockaddr *)&sa, sizeof(sa)) == 0);
    send_all(cl[0], "GET /metrics HTTP/1.0\r\n\r\n");
    usleep(1500000);
    getrusage(RUSAGE_SELF, &r1);
    double cpu = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec -
                          r0.ru_stime.tv_sec) +
                 (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec -
                          r0.ru_stime.tv_usec) *
                     1e-6;
    double wall = now_s() - t0;
    int lines = log_count() - before;
    printf("EMFILE for %.1f s: %d log lines from the endpoint, %.2f s of CPU\n", wall, lines, cpu);
    pthread_mutex_lock(&log_mu);
    for (int i = 0; i < GV_MIN(log_lines, 8); i++)
        printf("  %s\n", log_first[i]);
    pthread_mutex_unlock(&log_mu);
    GV_CHECK_MSG(lines >= 1 && lines <= 6, "%d lines", lines); /* 5 per 10 s, then a count */
    GV_CHECK_MSG(cpu < 0.5 * wall, "%.2f s of CPU in %.2f s: spinning", cpu, wall);
    /* descriptors back: the queued connection is served */
    for (int i = 0; i < nf; i++)
        close(filler[i]);
    setrlimit(RLIMIT_NOFILE, &old);
    char *body = NULL, why[128];
    int code = read_answer(cl[0], now_s() + 3.0, true, &body, why, sizeof(why));
    GV_CHECK_MSG(code == 200 && body != NULL, "after EMFILE: %d %s", code, why);
    free(body);
    for (int i = 0; i < 3; i++)
        close(cl[i]);
    gv_metrics_http_stop(http);
}

/* ---------------------------------------------------------------- url */

static void scenario_url(void)
{
    char buf[128];
    ops_http_url("", false, 9464, buf, sizeof(buf));
    GV_CHECK_STREQ(buf, "http://0.0.0.0:9464/metrics");
    ops_http_url("", true, 9464, buf, sizeof(buf));
    GV_CHECK_STREQ(buf, "http://[::]:9464/metrics");
    ops_http_url("10.0.0.1", false, 80, buf, sizeof(buf));
    GV_CHECK_STREQ(buf, "http://10.0.0.1:80/metrics");
    ops_http_url("node-7.cluster", false, 9464, buf, sizeof(buf));
    GV_CHECK_STREQ(buf, "http://node-7.cluster:9464/metrics");
    ops_http_url("2001:db8::7", true, 9464, buf, sizeof(buf));
    GV_CHECK_STREQ(buf, "http://[2001:db8::7]:9464/metrics");
    ops_http_url("fe80::1%eth0", true, 9464, buf, sizeof(buf));
    GV_CHECK_STREQ(buf, "http://[fe80::1%25eth0]:9464/metrics");
    ops_http_hostport("fe80::1%eth0", true, 9464, buf, sizeof(buf));
    GV_CHECK_STREQ(buf, "[fe80::1%eth0]:9464");
    ops_http_url("2001:db8::7", true, 9464, buf, 12); /* truncated, terminated */
    GV_CHECK_STREQ(buf, "http://[200");

    /* a real endpoint on ::1, when this host has IPv6 */
    int probe = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    bool v6 = probe >= 0 && bind(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    if (probe >= 0)
        close(probe);
    if (!v6) {
        printf("no IPv6 loopback here: the endpoint on [::1] is not tried\n");
        return;
    }
    struct gv_metrics_http *http = endpoint("[::1]:0", NULL);
    if (http == NULL)
        return;
    uint16_t port = gv_metrics_http_port(http);
    char want[128], got[128];
    snprintf(want, sizeof(want), "http://[::1]:%u/metrics", port);
    GV_CHECK_STREQ(gv_metrics_http_url(http, got, sizeof(got)), want);
    char line[160];
    snprintf(line, sizeof(line), "metrics: serving %s", want);
    pthread_mutex_lock(&log_mu);
    GV_CHECK_STREQ(log_url, line);
    pthread_mutex_unlock(&log_mu);
    double took;
    char *body = scrape(AF_INET6, NULL, port, 2.0, &took, got, sizeof(got));
    GV_CHECK_MSG(body != NULL, "scrape over IPv6: %s", got);
    free(body);
    gv_metrics_http_stop(http);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s slow|deadline|storm|fdlimit|url\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    gv_log_set_cb(capture, NULL);
    if (strcmp(argv[1], "slow") == 0)
        scenario_slow();
    else if (strcmp(argv[1], "deadline") == 0)
        scenario_deadline();
    else if (strcmp(argv[1], "storm") == 0)
        scenario_storm();
    else if (strcmp(argv[1], "fdlimit") == 0)
        scenario_fdlimit();
    else if (strcmp(argv[1], "url") == 0)
        scenario_url();
    else
        GV_CHECK_MSG(false, "unknown scenario %s", argv[1]);
    gv_metrics_destroy(reg);
    gv_log_set_cb(NULL, NULL);
    return gv_check_summary();
}
