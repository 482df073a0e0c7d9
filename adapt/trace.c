/* trace.c: the observation trace's CSV line, written by server 0 (--obs-trace) and read back by
 * tests/adapt: formatting and parsing only, no I/O. */
#include "adapt_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void gv_adapt_trace_line(const struct gv_adapt_obs *o, const struct gv_adapt_decision *next,
                         char *buf, size_t len)
{
    snprintf(buf, len,
             "%" PRIu64 ",%d,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%" PRIu64
             ",%u,%.17g,%.17g,%d,%.17g",
             o->iter, (int)o->level, o->cf_sent, o->norm2_ef, o->norm2_min, o->norm2_cand,
             o->t_compute, o->t_compress, o->t_comm, o->samples, o->num_workers, o->lr, o->loss,
             (int)next->level, next->cf_send);
}

gv_status_t gv_adapt_trace_parse(const char *line, struct gv_adapt_obs *o,
                                 enum gv_adapt_level *next_level, double *next_cf)
{
    double v[15];
    const char *p = line;
    for (int i = 0; i < 15; i++) {
        char *end;
        errno = 0;
        v[i] = strtod(p, &end);
        if (end == p || errno != 0 || !isfinite(v[i]) || (*end != ',' && i < 14) ||
            (i == 14 && *end != '\0' && *end != '\n' && *end != '\r'))
            return GV_ERR_PROTO;
        p = end + 1;
    }
    bool lv = v[1] >= 0 && v[1] <= 2 && v[1] == floor(v[1]) && v[13] >= 0 && v[13] <= 2 &&
              v[13] == floor(v[13]);
    if (!lv || v[0] < 0 || v[0] > 9e15 || v[9] < 0 || v[9] > 9e15 || v[10] < 1 || v[10] > 1e9)
        return GV_ERR_PROTO;
    *o = (struct gv_adapt_obs){.iter = (uint64_t)v[0],
                               .level = (enum gv_adapt_level)v[1],
                               .cf_sent = v[2],
                               .norm2_ef = v[3],
                               .norm2_min = v[4],
                               .norm2_cand = v[5],
                               .t_compute = v[6],
                               .t_compress = v[7],
                               .t_comm = v[8],
                               .samples = (uint64_t)v[9],
                               .num_workers = (uint32_t)v[10],
                               .lr = v[11],
                               .loss = v[12]};
    *next_level = (enum gv_adapt_level)v[13];
    *next_cf = v[14];
    return GV_OK;
}
