/* time.c: the monotonic clock. */
#include "gv_common.h"

#include <time.h>

uint64_t gv_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
