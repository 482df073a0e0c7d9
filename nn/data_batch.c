/* data_batch.c: shards (which samples a rank owns), the seeded per-rank sampler and host batch
 * staging, which turns item numbers into batches whatever part of the set a process holds. */
#include "nn_data.h"

#include <stdlib.h>
#include <string.h>

void nn_shuffle(uint32_t *a, size_t n, uint64_t seed, int64_t epoch)
{
    uint64_t st = seed ^ ((uint64_t)epoch * 0xa0761d6478bd642fULL + 0xe7037ed1a0b428dbULL);
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(gv_nn_splitmix64(&st) % (uint64_t)i);
        uint32_t tmp = a[i - 1];
        a[i - 1] = a[j];
        a[j] = tmp;
    }
}

static int batch_cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

gv_status_t gv_nn_shard_indices(size_t n, const struct gv_nn_shard *shard, uint32_t **idx_p,
                                size_t *m_p)
{
    int rank = shard != NULL && shard->world > 1 ? shard->rank : 0;
    int world = shard != NULL && shard->world > 1 ? shard->world : 1;
    if (n < 1 || n > UINT32_MAX || rank < 0 || rank >= world || (size_t)world > n) {
        gv_log(GV_LOG_ERROR, "nn: bad shard (n %zu, rank %d, world %d)", n, rank, world);
        return GV_ERR_INVAL;
    }
    size_t lo = (size_t)((uint64_t)n * (uint64_t)rank / (uint64_t)world);
    size_t hi = (size_t)((uint64_t)n * (uint64_t)(rank + 1) / (uint64_t)world);
    uint32_t *perm = gv_malloc(n * sizeof(uint32_t));
    uint32_t *idx = world > 1 ? gv_malloc((hi - lo) * sizeof(uint32_t)) : perm;
    if (perm == NULL || idx == NULL) {
        gv_free(perm);
        if (idx != perm)
            gv_free(idx);
        gv_log(GV_LOG_ERROR, "nn: cannot allocate the shard of %zu samples", n);
        return GV_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    if (world > 1) {
        /* the slices of the epoch-0 permutation: the ranks' samples are mixed across the set
         * (a sorted or class-ordered file still gives every rank every class) */
        nn_shuffle(perm, n, shard->seed, 0);
        memcpy(idx, perm + lo, (hi - lo) * sizeof(uint32_t));
        gv_free(perm);
        qsort(idx, hi - lo, sizeof(uint32_t), batch_cmp_u32);
    }
    *idx_p = idx;
    *m_p = hi - lo;
    return GV_OK;
}

static void sampler_shuffle(struct gv_nn_sampler *s)
{
    memcpy(s->order, s->shard, s->m * sizeof(uint32_t));
    nn_shuffle(s->order, s->m, s->seed, s->epoch);
}

gv_status_t gv_nn_sampler_init(struct gv_nn_sampler *s, size_t n, int rank, int world,
                               uint64_t seed)
{
    memset(s, 0, sizeof(*s));
    if (n < 1 || n > UINT32_MAX || world < 1 || rank < 0 || rank >= world || (size_t)world > n) {
        gv_log(GV_LOG_ERROR, "sampler: bad shard (n %zu, rank %d, world %d)", n, rank, world);
        return GV_ERR_INVAL;
    }
    struct gv_nn_shard sh = {.rank = rank, .world = world, .seed = seed};
    GV_NN_TRY(gv_nn_shard_indices(n, &sh, &s->shard, &s->m));
    s->order = gv_malloc(s->m * sizeof(uint32_t));
    if (s->order == NULL) {
        gv_nn_sampler_cleanup(s);
        return GV_ERR_NOMEM;
    }
    s->n = n;
    s->rank = rank;
    s->world = world;
    s->seed = seed;
    sampler_shuffle(s);
    return GV_OK;
}

void gv_nn_sampler_cleanup(struct gv_nn_sampler *s)
{
    if (s == NULL)
        return;
    gv_free(s->shard);
    gv_free(s->order);
    s->shard = s->order = NULL;
}

size_t gv_nn_sampler_shard_size(const struct gv_nn_sampler *s)
{
    return s->m;
}

gv_status_t gv_nn_sampler_next(struct gv_nn_sampler *s, int batch, size_t *idx, int64_t *epoch_p)
{
    if (batch < 1 || (size_t)batch > s->m) {
        gv_log(GV_LOG_ERROR, "sampler: batch %d does not fit the shard of %zu samples", batch,
               s->m);
        return GV_ERR_INVAL;
    }
    if (s->pos + (size_t)batch > s->m) {
        s->epoch++;
        sampler_shuffle(s);
        s->pos = 0;
    }
    for (int i = 0; i < batch; i++)
        idx[i] = s->order[s->pos + (size_t)i];
    s->pos += (size_t)batch;
    if (epoch_p != NULL)
        *epoch_p = s->epoch;
    return GV_OK;
}

gv_status_t gv_nn_batch_buf_init(struct gv_nn_batch_buf *buf, const struct gv_nn_dataset *ds,
                                 int cap)
{
    memset(buf, 0, sizeof(*buf));
    if (cap < 1)
        return GV_ERR_INVAL;
    buf->cap = cap;
    if (ds->kind == GV_NN_DATA_TEXT) {
        size_t n = (size_t)cap * (size_t)ds->seq_len;
        buf->tokens = gv_malloc(n * sizeof(int32_t));
        buf->labels = gv_malloc(n * sizeof(int32_t));
    } else {
        buf->x = gv_malloc((size_t)cap * (size_t)(ds->h * ds->w * ds->c) * sizeof(float));
        buf->labels = gv_malloc((size_t)cap * sizeof(int32_t));
    }
    if (buf->labels == NULL || (buf->x == NULL && buf->tokens == NULL)) {
        gv_nn_batch_buf_cleanup(buf);
        gv_log(GV_LOG_ERROR, "nn: cannot allocate a batch of %d", cap);
        return GV_ERR_NOMEM;
    }
    return GV_OK;
}

void gv_nn_batch_buf_cleanup(struct gv_nn_batch_buf *buf)
{
    if (buf == NULL)
        return;
    gv_free(buf->x);
    gv_free(buf->tokens);
    gv_free(buf->labels);
    memset(buf, 0, sizeof(*buf));
}

gv_status_t nn_dataset_find(const struct gv_nn_dataset *ds, size_t item, size_t *pos_p)
{
    if (ds->index == NULL) {
        *pos_p = item;
        return item < ds->n ? GV_OK : GV_ERR_INVAL;
    }
    size_t lo = 0, hi = ds->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ds->index[mid] < item)
            lo = mid + 1;
        else
            hi = mid;
    }
    *pos_p = lo;
    return lo < ds->n && ds->index[lo] == item ? GV_OK : GV_ERR_INVAL;
}

gv_status_t gv_nn_batch_gather(const struct gv_nn_dataset *ds, const size_t *idx, int n,
                               struct gv_nn_batch_buf *buf, struct gv_nn_batch *b)
{
    if (n < 1 || n > buf->cap)
        return GV_ERR_INVAL;
    size_t T = (size_t)ds->seq_len, d = (size_t)(ds->h * ds->w * ds->c);
    for (int i = 0; i < n; i++) {
        size_t at;
        if (nn_dataset_find(ds, idx[i], &at) != GV_OK) {
            gv_log(GV_LOG_ERROR, "nn: sample %zu is not in %s (%zu of %zu samples held)", idx[i],
                   ds->name, ds->n, ds->n_total);
            return GV_ERR_INVAL;
        }
        if (ds->kind == GV_NN_DATA_TEXT) {
            /* a corpus: windows overlap by one token; a shard: windows of T + 1 tokens */
            const uint8_t *src = ds->tokens + at * (ds->index != NULL ? T + 1 : T);
            for (size_t t = 0; t < T; t++) {
                buf->tokens[(size_t)i * T + t] = src[t];
                buf->labels[(size_t)i * T + t] = src[t + 1];
            }
            continue;
        }
        float *dst = buf->x + (size_t)i * d;
        if (ds->pix != NULL) {
            const uint8_t *p = ds->pix + at * d;
            for (size_t j = 0; j < d; j++)
                dst[j] = (float)p[j] * (2.0f / 255.0f) - 1.0f;
        } else {
            memcpy(dst, ds->x + at * d, d * sizeof(float));
        }
        buf->labels[i] = ds->y[at];
    }
    if (ds->kind == GV_NN_DATA_TEXT)
        *b = (struct gv_nn_batch){.n = n, .tokens = buf->tokens, .labels = buf->labels};
    else
        *b = (struct gv_nn_batch){.n = n, .x = buf->x, .labels = buf->labels};
    return GV_OK;
}
