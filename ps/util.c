/* util.c: small helpers every gravac process uses: its peak and current RSS, and byte counts
 * written for people. */
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
