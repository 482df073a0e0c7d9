/* logcap.h: captures gv_log lines in tests (the last line and a count). */
#ifndef GV_TEST_LOGCAP_H
#define GV_TEST_LOGCAP_H

#include "gv_common.h"

#include <stdio.h>
#include <string.h>

struct logcap {
    int n;
    enum gv_log_level level;
    char line[1024];
};

static void logcap_cb(enum gv_log_level level, const char *line, void *arg)
{
    struct logcap *c = arg;
    c->n++;
    c->level = level;
    snprintf(c->line, sizeof(c->line), "%s", line);
}

/* Starts capturing into c (cleared); every level is delivered. */
static inline void logcap_begin(struct logcap *c)
{
    memset(c, 0, sizeof(*c));
    gv_log_set_level(GV_LOG_TRACE);
    gv_log_set_cb(logcap_cb, c);
}

static inline void logcap_end(void)
{
    gv_log_set_cb(NULL, NULL);
    gv_log_set_level(GV_LOG_INFO);
}

static inline int logcap_has(const struct logcap *c, const char *needle)
{
    return c->n > 0 && strstr(c->line, needle) != NULL;
}

#endif
