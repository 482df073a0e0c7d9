/* status.c: names for gv_status_t values and the assertion handler. */
#include "gv_common.h"

#include <stdio.h>
#include <stdlib.h>

const char *gv_status_str(gv_status_t status)
{
    switch (status) {
    case GV_OK: return "ok";
    case GV_INPROGRESS: return "in progress";
    case GV_ERR_NOMEM: return "out of memory";
    case GV_ERR_INVAL: return "invalid argument";
    case GV_ERR_IO: return "i/o error";
    case GV_ERR_PROTO: return "protocol error";
    case GV_ERR_AGAIN: return "resource temporarily unavailable";
    case GV_ERR_TIMEOUT: return "timed out";
    case GV_ERR_CLOSED: return "connection closed";
    case GV_ERR_UNSUPPORTED: return "not supported";
    case GV_ERR_NODEV: return "no such device";
    case GV_ERR_CUDA: return "cuda error";
    case GV_ERR_AUTH: return "authentication failed";
    case GV_ERR_VERSION: return "version mismatch";
    case GV_ERR_CKPT: return "checkpoint failed";
    }
    return "unknown";
}

void gv_assert_fail(const char *expr, const char *file, int line)
{
    gv_log(GV_LOG_ERROR, "assertion failed: %s (%s:%d)", expr, file, line);
    abort();
}
