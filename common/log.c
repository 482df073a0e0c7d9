/* log.c: levelled logging with a replaceable sink. One line per call, formatted into a stack
 * buffer and written with a single write(2) so lines from several threads never interleave. */
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
