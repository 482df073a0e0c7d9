/* alloc.c: the project's allocator entry points, with a test hook that fails the N-th call so
 * that every error path (err_ labels) can be exercised under ASan. */
#include "gv_common.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic uint64_t alloc_count;   /* allocations since the last gv_alloc_fail_nth() */
static _Atomic uint64_t alloc_fail_at; /* 0: disarmed; else the count value that fails */

uint64_t gv_alloc_fail_nth(uint64_t n)
{
    uint64_t made = atomic_exchange(&alloc_count, 0);
    atomic_store(&alloc_fail_at, n);
    return made;
}

static int alloc_should_fail(void)
{
    uint64_t c = atomic_fetch_add(&alloc_count, 1) + 1;
    uint64_t at = atomic_load_explicit(&alloc_fail_at, memory_order_relaxed);
    if (at != 0 && c == at) {
        atomic_store(&alloc_fail_at, 0);
        return 1;
    }
    return 0;
}

void *gv_malloc(size_t size)
{
    return alloc_should_fail() ? NULL : malloc(size ? size : 1);
}

void *gv_calloc(size_t nmemb, size_t size)
{
    if (alloc_should_fail())
        return NULL;
    return calloc(nmemb ? nmemb : 1, size ? size : 1);
}

void *gv_realloc(void *ptr, size_t size)
{
    return alloc_should_fail() ? NULL : realloc(ptr, size ? size : 1);
}

void *gv_aligned_alloc(size_t align, size_t size)
{
    if (alloc_should_fail())
        return NULL;
    void *p = NULL;
    if (align < sizeof(void *) || (align & (align - 1)) != 0)
        return NULL;
    if (posix_memalign(&p, align, size ? size : 1) != 0)
        return NULL;
    return p;
}

char *gv_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = gv_malloc(n);
    if (d != NULL)
        memcpy(d, s, n);
    return d;
}

void gv_free(void *ptr)
{
    free(ptr);
}
