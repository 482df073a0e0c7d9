/* data_batch.c: the seeded per-rank shard sampler and host batch staging. */
#include "nn_data.h"

#include <string.h>

static void sampler_shuffle(struct gv_nn_sampler *s)
{
    /* One permutation per (seed, epoch), the same on every rank, so the slices are disjoint. */
    uint64_t st = s->seed ^ ((uint64_t)s->epoch * 0xa0761d6478bd642fULL + 0xe7037ed1a0b428dbULL);
    for (size_t i = 0; i < s->n; i++)
        s->perm[i] = (uint32_t)i;
    for (size_t i = s->n; i > 1; i--) {
        size_t j = (size_t)(gv_nn_splitmix64(&st) % (uint64_t)i);
        uint32_t tmp = s->perm[i - 1];
        s->perm[i - 1] = s->perm[j];
        s->perm[j] = tmp;
    }
}

gv_status_t gv_nn_sampler_init(struct gv_nn_sampler *s, size_t n, int rank, int world,
                               uint64_t seed)
{
    memset(s, 0, sizeof(*s));
    if (n < 1 || n > UINT32_MAX || world < 1 || rank < 0 || rank >= world || (size_t)world > n) {
        gv_log(GV_LOG_ERROR, "sampler: bad shard (n %zu, rank %d, world %d)", n, rank, world);
        return GV_ERR_INVAL;
    }
    s->perm = gv_malloc(n * sizeof(uint32_t));
    if (s->perm == NULL)
        return GV_ERR_NOMEM;
    s->n = n;
    s->rank = rank;
    s->world = world;
    s->seed = seed;
    s->lo = (size_t)((uint64_t)n * (uint64_t)rank / (uint64_t)world);
    s->hi = (size_t)((uint64_t)n * (uint64_t)(rank + 1) / (uint64_t)world);
    s->pos = s->lo;
    sampler_shuffle(s);
    return GV_OK;
}

void gv_nn_sampler_cleanup(struct gv_nn_sampler *s)
{
    if (s == NULL)
        return;
    gv_free(s->perm);
    s->perm = NULL;
}

size_t gv_nn_sampler_shard_size(const struct gv_nn_sampler *s)
{
    return s->hi - s->lo;
}

gv_status_t gv_nn_sampler_next(struct gv_nn_sampler *s, int batch, size_t *idx,
                               int64_t *epoch_p)
{
    if (batch < 1 || (size_t)batch > s->hi - s->lo) {
        gv_log(GV_LOG_ERROR, "sampler: batch %d does not fit the shard of %zu samples", batch,
               s->hi - s->lo);
        return GV_ERR_INVAL;
    }
    if (s->pos + (size_t)batch > s->hi) {
        s->epoch++;
        sampler_shuffle(s);
        s->pos = s->lo;
    }
    for (int i = 0; i < batch; i++)
        idx[i] = s->perm[s->pos + (size_t)i];
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

gv_status_t gv_nn_batch_gather(const struct gv_nn_dataset *ds, const size_t *idx, int n,
                               struct gv_nn_batch_buf *buf, struct gv_nn_batch *b)
{
    if (n < 1 || n > buf->cap)
        return GV_ERR_INVAL;
    for (int i = 0; i < n; i++)
        if (idx[i] >= ds->n)
            return GV_ERR_INVAL;
    if (ds->kind == GV_NN_DATA_TEXT) {
        size_t T = (size_t)ds->seq_len;
        for (int i = 0; i < n; i++) {
            const uint8_t *src = ds->tokens + idx[i] * T;
            for (size_t t = 0; t < T; t++) {
                buf->tokens[(size_t)i * T + t] = src[t];
                buf->labels[(size_t)i * T + t] = src[t + 1];
            }
        }
        *b = (struct gv_nn_batch){.n = n, .tokens = buf->tokens, .labels = buf->labels};
        return GV_OK;
    }
    size_t d = (size_t)(ds->h * ds->w * ds->c);
    for (int i = 0; i < n; i++) {
        memcpy(buf->x + (size_t)i * d, ds->x + idx[i] * d, d * sizeof(float));
        buf->labels[i] = ds->y[idx[i]];
    }
    *b = (struct gv_nn_batch){.n = n, .x = buf->x, .labels = buf->labels};
    return GV_OK;
}
