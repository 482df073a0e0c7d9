/* test_metrics_http.c: the /metrics endpoint on 127.0.0.1 with an ephemeral port, scraped by a
 * real HTTP client (curl): values move between scrapes, 404 and 405 elsewhere, garbage on the
 * socket does not stop it serving, a busy port is refused with a clear error, stop releases
 * the port, the page is cached for the interval given. Skips (77) when curl is not installed.
 * Hostile clients: test_metrics_http_abuse.c. */
#include "check.h"
#include "gv_ops.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static char last_log[512];

static void capture(enum gv_log_level level, const char *line, void *arg)
{
    (void)arg;
    if (level <= GV_LOG_WARN)
        snprintf(last_log, sizeof(last_log), "%s", line);
}

/* Runs curl; returns its output (body, then "\n<code> <content type>"), malloc'd. */
static char *curl(const char *args, uint16_t port, const char *path)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "curl -sS --noproxy '*' --max-time 10 %s -w '\\n%%{http_code} %%{content_type}' "
             "'http://127.0.0.1:%u%s' 2>&1",
             args, port, path);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    size_t n;
    while (out != NULL && (n = fread(out + len, 1, cap - 1 - len, p)) > 0)
        len += n;
    pclose(p);
    if (out != NULL)
        out[len] = '\0';
    return out;
}

/* The value on the line "name value" of a scrape, or NAN. */
static double sample(const char *text, const char *name)
{
    char key[128];
    snprintf(key, sizeof(key), "\n%s ", name);
    const char *p = text ? strstr(text, key) : NULL;
    return p ? strtod(p + strlen(key), NULL) : NAN;
}

static int connect_local(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

struct updater {
    struct gv_metric *m;
    _Atomic int stop;
};

static void *update_loop(void *p)
{
    struct updater *u = p;
    while (!u->stop) {
        gv_metric_inc(u->m, 1);
        usleep(100);
    }
    return NULL;
}

int main(void)
{
    if (system("curl --version >/dev/null 2>&1") != 0)
        GV_SKIP("curl is not installed");
    gv_log_set_cb(capture, NULL);
    struct gv_metrics *reg;
    struct gv_metric *req, *iter, *busy;
    GV_CHECK_OK(gv_metrics_create(&reg));
    GV_CHECK_OK(gv_metrics_get(reg, GV_METRIC_COUNTER, "gravac_test_requests_total", "Requests.",
                               NULL, 0, &req));
    GV_CHECK_OK(
        gv_metrics_get(reg, GV_METRIC_GAUGE, "gravac_iteration", "Iteration.", NULL, 0, &iter));
    struct gv_hostport addr;
    GV_CHECK_OK(gv_parse_hostport("127.0.0.1:0", &addr));
    struct gv_metrics_http *http = NULL;
    /* a 1 ms cache: each scrape below sees what was set before it */
    const struct gv_metrics_http_limits fresh = {.cache_ms = 1};
    GV_CHECK_OK(gv_metrics_http_start_limits(reg, &addr, &fresh, &http));
    if (http == NULL)
        return gv_check_summary();
    uint16_t port = gv_metrics_http_port(http);
    GV_CHECK(port != 0);

    /* two scrapes: the values moved by exactly what was added in between */
    gv_metric_inc(req, 5);
    gv_metric_set(iter, 17);
    char *a = curl("", port, "/metrics");
    gv_metric_inc(req, 3);
    gv_metric_set(iter, 18);
    usleep(2000);
    char *b = curl("", port, "/metrics");
    GV_CHECK_MSG(a && strstr(a, "\n200 text/plain; version=0.0.4; charset=utf-8") != NULL,
                 "first scrape: %s", a ? a : "(null)");
    GV_CHECK(a && strncmp(a, "# HELP gravac_test_requests_total Requests.\n", 44) == 0);
    GV_CHECK_EQ(sample(a, "gravac_test_requests_total"), 5);
    GV_CHECK_EQ(sample(b, "gravac_test_requests_total"), 8);
    GV_CHECK_EQ(sample(a, "gravac_iteration"), 17);
    GV_CHECK_EQ(sample(b, "gravac_iteration"), 18);
    free(a);
    free(b);

    /* elsewhere: 404; other methods: 405; HEAD: headers only */
    a = curl("", port, "/");
    GV_CHECK(a && strstr(a, "not found: the metrics are at /metrics\n\n404 ") != NULL);
    free(a);
    a = curl("", port, "/metrics/x");
    GV_CHECK(a && strstr(a, "\n404 ") != NULL);
    free(a);
    a = curl("-X POST -d x=1", port, "/metrics");
    GV_CHECK(a && strstr(a, "\n405 ") != NULL);
    free(a);
    a = curl("-I", port, "/metrics");
    GV_CHECK(a && strstr(a, "HTTP/1.1 200") != NULL && strstr(a, "# HELP") == NULL);
    free(a);

    /* garbage on a raw connection gets the connection closed; the endpoint keeps serving */
    int fd = connect_local(port);
    GV_CHECK(fd >= 0);
    if (fd >= 0) {
        struct timeval tv = {.tv_sec = 5};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        static const char junk[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http\r\n\r\n";
        GV_CHECK(write(fd, junk, sizeof(junk) - 1) == (ssize_t)(sizeof(junk) - 1));
        char reply[512];
        ssize_t n, total = 0;
        while ((n = read(fd, reply, sizeof(reply))) > 0)
            total += n; /* a 400 answer or nothing, then EOF: never a hang (curl-free check) */
        GV_CHECK(n == 0);
        close(fd);
        (void)total;
    }
    int idle = connect_local(port); /* an idle connection does not block others */
    a = curl("", port, "/metrics");
    GV_CHECK_EQ(sample(a, "gravac_test_requests_total"), 8);
    free(a);

    /* scrapes while another thread updates */
    struct updater u = {.m = req};
    pthread_t th;
    pthread_create(&th, NULL, update_loop, &u);
    double prev = 8;
    for (int i = 0; i < 3; i++) {
        usleep(20000);
        a = curl("", port, "/metrics");
        double v = sample(a, "gravac_test_requests_total");
        GV_CHECK_MSG(v > prev, "scrape %d: %g after %g", i, v, prev);
        prev = v;
        free(a);
    }
    u.stop = 1;
    pthread_join(th, NULL);
    if (idle >= 0)
        close(idle);

    /* the port is taken: a clear error naming it */
    struct gv_hostport taken = addr;
    struct gv_metrics_http *http2 = NULL;
    taken.port = port;
    GV_CHECK_STATUS(gv_metrics_http_start(reg, &taken, &http2), GV_ERR_IO);
    char want[128];
    snprintf(want, sizeof(want),
             "metrics http: cannot listen on 127.0.0.1:%u: Address already in "
             "use",
             port);
    GV_CHECK_STREQ(last_log, want);
    GV_CHECK(http2 == NULL);

    /* with the default cache (and a long one): scrapes within the interval get the same
     * rendering; the next one after it sees the new values */
    struct gv_metrics_http *cached = NULL;
    const struct gv_metrics_http_limits slow = {.cache_ms = 2000};
    struct gv_metrics_http_stats st;
    GV_CHECK_OK(gv_metrics_http_start_limits(reg, &addr, &slow, &cached));
    if (cached != NULL) {
        uint16_t cport = gv_metrics_http_port(cached);
        a = curl("", cport, "/metrics");
        double v0 = sample(a, "gravac_test_requests_total");
        free(a);
        gv_metric_inc(req, 1);
        a = curl("", cport, "/metrics");
        GV_CHECK_EQ(sample(a, "gravac_test_requests_total"), v0);
        free(a);
        a = curl("-I", cport, "/metrics"); /* HEAD: the cached page's headers */
        GV_CHECK(a && strstr(a, "HTTP/1.1 200") != NULL);
        free(a);
        gv_metrics_http_stats(cached, &st);
        GV_CHECK_EQ(st.renders, 1);
        GV_CHECK_EQ(st.requests, 3);
        usleep(2100000);
        a = curl("", cport, "/metrics");
        GV_CHECK_EQ(sample(a, "gravac_test_requests_total"), v0 + 1);
        free(a);
        gv_metrics_http_stats(cached, &st);
        GV_CHECK_EQ(st.renders, 2);
        gv_metrics_http_stop(cached);
    }

    /* stop: the port is released */
    GV_CHECK_OK(gv_metrics_get(reg, GV_METRIC_GAUGE, "busy", "b", NULL, 0, &busy));
    gv_metrics_http_stop(http);
    gv_metrics_http_stop(NULL);
    fd = connect_local(port);
    GV_CHECK(fd < 0);
    if (fd >= 0)
        close(fd);
    GV_CHECK_OK(gv_metrics_http_start(reg, &taken, &http2));
    gv_metrics_http_stop(http2);
    gv_metrics_destroy(reg);
    gv_log_set_cb(NULL, NULL);
    return gv_check_summary();
}
