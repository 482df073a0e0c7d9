/* oracle.c: the sort-based top-k the tests compare every fast path against: sort all entries
 * by (magnitude key descending, index ascending), keep k, sort their indices. O(n log n) and
 * allocating; never on the hot path. */
#include "compress_internal.h"

#include <stdlib.h>

struct oracle_ent {
    uint32_t key;
    uint32_t idx;
};

static int oracle_cmp(const void *a, const void *b)
{
    const struct oracle_ent *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

static int u32_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : (x > y);
}

gv_status_t gv_topk_oracle(const float *x, uint32_t n, uint32_t k, uint32_t *idx_out)
{
    if (k > n)
        return GV_ERR_INVAL;
    struct oracle_ent *e = gv_malloc((size_t)n * sizeof(*e) + 1);
    if (e == NULL)
        return GV_ERR_NOMEM;
    for (uint32_t i = 0; i < n; i++) {
        e[i].key = gv_key(x[i]);
        e[i].idx = i;
    }
    qsort(e, n, sizeof(*e), oracle_cmp);
    for (uint32_t i = 0; i < k; i++)
        idx_out[i] = e[i].idx;
    qsort(idx_out, k, sizeof(*idx_out), u32_cmp);
    gv_free(e);
    return GV_OK;
}
