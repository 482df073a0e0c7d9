/* util.c: small helpers every gravac process uses: its peak and current RSS, byte counts
 * written for people, and the timeline's spans and files (--trace). */
#include "gv_ps.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t util_status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return 0;
    char line[256];
    uint64_t kb = 0;
    size_t n = strlen(key);
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            kb = strtoull(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return kb * 1024;
}

uint64_t gv_ps_peak_rss(void)
{
    return util_status_kb("VmHWM");
}

uint64_t gv_ps_rss(void)
{
    return util_status_kb("VmRSS");
}

void gv_ps_fmt_bytes(double bytes, char *out, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(out, len, "%.0f B", bytes);
    else
        snprintf(out, len, "%.*f %s", bytes < 10 ? 2 : 1, bytes, units[u]);
}

const char *const gv_ps_span_names[GV_PS_SPAN_N] = {
    "compute", "compress", "push", "wait", "apply", "aggregate", "add", "decide", "update",
};

gv_status_t gv_ps_trace_open(const char *tmpl, enum gv_role role, uint32_t rank,
                             struct gv_trace **tr_p)
{
    *tr_p = NULL;
    if (tmpl == NULL || tmpl[0] == '\0')
        return GV_OK;
    char path[1024], name[64], parent[1024];
    gv_cluster_expand(tmpl, role, rank, path, sizeof(path));
    snprintf(parent, sizeof(parent), "%s", path);
    char *slash = strrchr(parent, '/');
    if (slash != NULL && slash != parent) { /* the directory of a job's files, made once */
        *slash = '\0';
        gv_status_t st = gv_ps_mkdir(parent);
        if (st != GV_OK)
            return st;
    }
    bool server = role == GV_ROLE_SERVER;
    snprintf(name, sizeof(name), "%s %u", server ? "server" : "worker", rank);
    struct gv_trace_config tc = {.path = path,
                                 .process = name,
                                 .sort_index = (int)rank + (server ? 0 : 100000),
                                 .category = server ? "server" : "worker",
                                 .kinds = gv_ps_span_names,
                                 .n_kinds = GV_PS_SPAN_N,
                                 .peer_arg = server ? "worker" : "server"};
    gv_status_t status = gv_trace_open(&tc, tr_p);
    if (status == GV_OK)
        gv_log(GV_LOG_INFO, "%s: timeline to %s (Chrome trace event format)", name, path);
    return status;
}
