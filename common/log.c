/* log.c: levelled logging with a replaceable sink, and rate limiters for lines that can repeat
 * without bound. One line per call, formatted into a stack buffer and written with a single
 * write(2) so lines from several threads never interleave. */
#include "gv_common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static _Atomic int log_level = -1; /* -1: not yet read from GV_LOG_LEVEL */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t limit_mu = PTHREAD_MUTEX_INITIALIZER; /* every gv_log_limit's state */
static gv_log_cb log_cb;
static void *log_cb_arg;
static char log_tag[32];

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

gv_status_t gv_log_parse_level(const char *s, enum gv_log_level *level_p)
{
    if (s == NULL)
        return GV_ERR_INVAL;
    for (int i = 0; i < (int)GV_ARRAY_LEN(level_names); i++) {
        if (strcasecmp(s, level_names[i]) == 0 || (s[0] == '0' + i && s[1] == '\0')) {
            *level_p = (enum gv_log_level)i;
            return GV_OK;
        }
    }
    return GV_ERR_INVAL;
}

enum gv_log_level gv_log_get_level(void)
{
    int lvl = atomic_load_explicit(&log_level, memory_order_relaxed);
    if (lvl >= 0)
        return (enum gv_log_level)lvl;
    enum gv_log_level parsed = GV_LOG_INFO;
    const char *env = getenv("GV_LOG_LEVEL");
    if (env != NULL && gv_log_parse_level(env, &parsed) != GV_OK)
        parsed = GV_LOG_INFO;
    int expected = -1;
    atomic_compare_exchange_strong(&log_level, &expected, (int)parsed);
    return (enum gv_log_level)atomic_load(&log_level);
}

void gv_log_set_level(enum gv_log_level level)
{
    atomic_store(&log_level, (int)level);
}

void gv_log_set_cb(gv_log_cb cb, void *arg)
{
    pthread_mutex_lock(&log_mu);
    log_cb = cb;
    log_cb_arg = arg;
    pthread_mutex_unlock(&log_mu);
}

void gv_log_set_tag(const char *tag)
{
    pthread_mutex_lock(&log_mu);
    snprintf(log_tag, sizeof(log_tag), "%s", tag ? tag : "");
    pthread_mutex_unlock(&log_mu);
}

static void log_default_sink(enum gv_log_level level, const char *msg, const char *tag)
{
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line), "gravac%s%s%s %c %02d:%02d:%02d.%03ld %s\n",
                     tag[0] ? "[" : "", tag, tag[0] ? "]" : "", "EWIDT"[level], tm.tm_hour,
                     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, msg);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
    if ((size_t)n >= sizeof(line))
        line[len - 1] = '\n';
    ssize_t ret = write(STDERR_FILENO, line, len);
    (void)ret; /* nowhere left to report a failed log write */
}

void gv_vlog(enum gv_log_level level, const char *fmt, va_list ap)
{
    if (!gv_log_enabled(level))
        return;
    char msg[1536];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    pthread_mutex_lock(&log_mu);
    gv_log_cb cb = log_cb;
    void *arg = log_cb_arg;
    char tag[sizeof(log_tag)];
    memcpy(tag, log_tag, sizeof(tag));
    pthread_mutex_unlock(&log_mu);
    if (cb != NULL)
        cb(level, msg, arg);
    else
        log_default_sink(level, msg, tag);
}

void gv_log(enum gv_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    gv_vlog(level, fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------- rate limiting */

/* Opens a new window at now when the current one has ended (or none is open). */
static void limit_roll(struct gv_log_limit *lim, uint64_t now_ns)
{
    if (!lim->open || now_ns - lim->window_ns >= lim->interval_ns || now_ns < lim->window_ns) {
        lim->open = true;
        lim->window_ns = now_ns;
        lim->passed = 0;
    }
}

bool gv_log_limit_pass(struct gv_log_limit *lim, uint64_t now_ns, uint64_t *suppressed_p,
                       uint64_t *span_ns_p)
{
    bool pass;
    pthread_mutex_lock(&limit_mu);
    limit_roll(lim, now_ns);
    uint32_t burst = lim->burst ? lim->burst : 1;
    pass = lim->passed < burst;
    if (pass) {
        lim->passed++;
        *suppressed_p = lim->suppressed;
        *span_ns_p = lim->suppressed ? now_ns - lim->suppressed_ns : 0;
        lim->suppressed = 0;
    } else if (lim->suppressed++ == 0) {
        lim->suppressed_ns = lim->window_ns;
    }
    pthread_mutex_unlock(&limit_mu);
    return pass;
}

static void log_suppressed_v(enum gv_log_level level, uint64_t n, uint64_t span_ns, const char *fmt,
                             va_list ap) __attribute__((format(printf, 4, 0)));

static void log_suppressed_v(enum gv_log_level level, uint64_t n, uint64_t span_ns, const char *fmt,
                             va_list ap)
{
    char msg[1280];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (n == 0)
        gv_log(level, "%s", msg);
    else
        gv_log(level, "%s (%llu similar message%s suppressed in the last %.1f s)", msg,
               (unsigned long long)n, n == 1 ? "" : "s", (double)span_ns * 1e-9);
}

void gv_log_suppressed(enum gv_log_level level, uint64_t n, uint64_t span_ns, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_suppressed_v(level, n, span_ns, fmt, ap);
    va_end(ap);
}

void gv_log_limited_at(enum gv_log_level level, struct gv_log_limit *lim, uint64_t now_ns,
                       const char *fmt, ...)
{
    uint64_t n, span_ns;
    if (!gv_log_enabled(level) || !gv_log_limit_pass(lim, now_ns, &n, &span_ns))
        return;
    va_list ap;
    va_start(ap, fmt);
    log_suppressed_v(level, n, span_ns, fmt, ap);
    va_end(ap);
}

void gv_log_limit_flush_at(enum gv_log_level level, struct gv_log_limit *lim, uint64_t now_ns,
                           const char *what)
{
    uint64_t n = 0, span_ns = 0;
    pthread_mutex_lock(&limit_mu);
    if (lim->suppressed > 0 && lim->open && now_ns - lim->window_ns >= lim->interval_ns) {
        n = lim->suppressed;
        span_ns = now_ns - lim->suppressed_ns;
        lim->suppressed = 0;
        limit_roll(lim, now_ns);
        lim->passed = 1;
    }
    pthread_mutex_unlock(&limit_mu);
    if (n > 0)
        gv_log(level, "%s: %llu similar message%s suppressed in the last %.1f s", what,
               (unsigned long long)n, n == 1 ? "" : "s", (double)span_ns * 1e-9);
}
