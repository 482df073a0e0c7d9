/* util.c: small helpers both sides of the protocol share: the parameter checksum of the drift
 * check, the averaging rule, peak RSS, and byte accounting per compression factor. */
#include "gv_ps.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline uint64_t util_rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

uint64_t gv_ps_checksum(const float *p, size_t n)
{
    const uint64_t k = 0x9e3779b97f4a7c15ull;
    uint64_t h[4] = {0x243f6a8885a308d3ull, 0x13198a2e03707344ull, 0xa4093822299f31d0ull,
                     0x082efa98ec4e6c89ull};
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++) {
            uint32_t x;
            memcpy(&x, &p[i + (size_t)j], sizeof(x));
            h[j] = util_rotl(h[j] ^ x, 27) * k;
        }
    uint64_t r = (uint64_t)n * k;
    for (; i < n; i++) {
        uint32_t x;
        memcpy(&x, &p[i], sizeof(x));
        r = util_rotl(r ^ x, 27) * k;
    }
    for (int j = 0; j < 4; j++)
        r = util_rotl(r ^ h[j], 31) * k;
    return r ^ (r >> 29);
}

void gv_ps_average(float *x, size_t n, uint32_t num_workers)
{
    const float w = (float)num_workers;
    for (size_t i = 0; i < n; i++)
        x[i] = x[i] / w;
}

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

void gv_ps_bytes_add(struct gv_ps_bytes *b, double cf, uint64_t sent, uint64_t recv,
                     uint64_t payload_sent)
{
    uint32_t i = 0;
    while (i < b->n && b->by_cf[i].cf != cf)
        i++;
    if (i == b->n) {
        if (b->n == GV_PS_MAX_CF_BUCKETS)
            i = GV_PS_MAX_CF_BUCKETS - 1;
        else
            b->by_cf[b->n++].cf = cf;
    }
    b->by_cf[i].iters++;
    b->by_cf[i].sent += sent;
    b->by_cf[i].recv += recv;
    b->by_cf[i].payload_sent += payload_sent;
    b->iter_sent += sent;
    b->iter_recv += recv;
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

void gv_ps_bytes_describe(const struct gv_ps_bytes *b, void (*fn)(const char *line, void *arg),
                          void *arg)
{
    /* ascending CF */
    uint32_t order[GV_PS_MAX_CF_BUCKETS];
    for (uint32_t i = 0; i < b->n; i++)
        order[i] = i;
    for (uint32_t i = 1; i < b->n; i++)
        for (uint32_t j = i; j > 0 && b->by_cf[order[j - 1]].cf > b->by_cf[order[j]].cf; j--) {
            uint32_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (uint32_t k = 0; k < b->n; k++) {
        const struct gv_ps_cf_bytes *c = &b->by_cf[order[k]];
        char s[32], r[32], line[200];
        double it = c->iters ? (double)c->iters : 1.0;
        gv_ps_fmt_bytes((double)c->sent / it, s, sizeof(s));
        gv_ps_fmt_bytes((double)c->recv / it, r, sizeof(r));
        snprintf(line, sizeof(line), "  CF %7.1f: %6" PRIu64 " iterations, sent %s/iter, "
                 "received %s/iter", c->cf, c->iters, s, r);
        fn(line, arg);
    }
}
