/* thresh.c: random-k, DGC sampled threshold and Redsync threshold search, written once on top
 * of the backend ops (CPU or CUDA): the control logic runs on the host, the passes over the
 * tensor run on the backend. The released GraVAC/GRACE quirks are fixed as docs/compress.md
 * lists: random-k draws without replacement over all n with a shared seed; DGC never gets stuck
 * at a zero threshold; Redsync lowers the threshold whenever fewer than k pass. */
#include "compress_internal.h"

#include <float.h>
#include <math.h>

/* ---------------------------------------------------------------- random-k */

void gv_randk_positions(uint64_t *bitmap, uint32_t n, uint32_t k, uint64_t seed, uint32_t *pos)
{
    struct gv_rng rng;
    gv_rng_seed(&rng, seed);
    /* Floyd: for j = n-k .. n-1 draw t in [0, j]; take t, or j if t is taken. Every k-subset
     * is equally likely; k draws, no rejection loop. */
    for (uint32_t j = n - k; j < n; j++) {
        uint32_t t = gv_rng_below(&rng, j + 1);
        if ((bitmap[t >> 6] >> (t & 63)) & 1u)
            t = j;
        bitmap[t >> 6] |= (uint64_t)1 << (t & 63);
    }
    /* read the set back in ascending order, clearing the bitmap for the next call */
    uint32_t c = 0;
    for (size_t w = 0; w < ((size_t)n + 63) / 64; w++) {
        uint64_t bits = bitmap[w];
        bitmap[w] = 0;
        while (bits != 0) {
            pos[c++] = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(bits));
            bits &= bits - 1;
        }
    }
    GV_ASSERT(c == k);
}

gv_status_t gv_cmp_randomk(struct gv_cmp *c, const float *x, uint32_t n, uint32_t k,
                           const uint32_t *map, uint64_t seed, struct gv_sparse *out)
{
    if (k > c->pos_cap || k > out->cap)
        return GV_ERR_INVAL;
    gv_randk_positions(c->bitmap, n, k, seed, c->pos);
    return c->ops->gather(c, x, c->pos, k, map, out);
}

/* ---------------------------------------------------------------- DGC */

static uint32_t thr_key(float thr)
{
    return gv_f32_bits(fabsf(thr)) & 0x7FFFFFFFu;
}

/* Count, then either select everything >= key_min or, when that exceeds the output's cap,
 * fall back to exact top-k (documented: a threshold compressor never overflows its bound). */
static gv_status_t select_or_topk(struct gv_cmp *c, const float *x, uint32_t n, uint32_t k,
                                  uint32_t key_min, uint64_t cnt, const uint32_t *map,
                                  struct gv_sparse *out)
{
    if (cnt > out->cap) {
        GV_TRACE("compress: threshold selects %llu > cap %u; exact top-%u instead",
                 (unsigned long long)cnt, out->cap, k);
        return c->ops->topk(c, x, n, k, map, out);
    }
    return c->ops->select_ge(c, x, n, key_min, map, out);
}

gv_status_t gv_cmp_dgc(struct gv_cmp *c, const float *x, uint32_t n, uint32_t k,
                       const uint32_t *map, uint64_t seed, struct gv_sparse *out)
{
    gv_status_t status;
    uint32_t ns = gv_dgc_sample_len(n);
    if (ns > c->pos_cap)
        return GV_ERR_INVAL;
    /* 1% of the positions, uniform with replacement (as DGC does) */
    struct gv_rng rng;
    gv_rng_seed(&rng, seed);
    for (uint32_t i = 0; i < ns; i++)
        c->pos[i] = gv_rng_below(&rng, n);
    status = c->ops->sample(c, x, c->pos, ns, c->samp);
    if (status != GV_OK)
        return status;
    /* the ks largest finite magnitudes of the sample; ks scales k by the sample fraction */
    uint32_t m = 0;
    for (uint32_t i = 0; i < ns; i++) {
        float a = fabsf(c->samp[i]);
        if (a <= FLT_MAX)
            c->pos[m++] = gv_f32_bits(a);
    }
    uint64_t ks = (uint64_t)ns * k / n;
    ks = ks < 1 ? 1 : ks;
    float thr = m > 0 ? gv_bits_f32(gv_select_keys(c->pos, m, GV_MIN(ks, (uint64_t)m))) : 0.0f;

    /* up to 10 rounds of x1.3 / x0.7; the threshold whose count came nearest to k is kept, so
     * a search that oscillates around a steep tail ends on its best probe, not its last */
    uint64_t cnt = 0, best_cnt = 0;
    uint32_t key_min = 0, best_key = 0;
    double best_err = INFINITY;
    for (int round = 0; round < 10; round++) {
        key_min = thr > 0 ? thr_key(thr) : 1u; /* zeros are never sent */
        status = c->ops->count_ge(c, x, n, key_min, &cnt);
        if (status != GV_OK)
            return status;
        double err = fabs((double)cnt - (double)k);
        if (err < best_err || (err == best_err && cnt > best_cnt)) {
            best_err = err;
            best_cnt = cnt;
            best_key = key_min;
        }
        if ((double)cnt > 1.3 * k) {
            if (thr == 0)
                break; /* scaling zero cannot help; the cap check below decides */
            thr *= 1.3f;
        } else if ((double)cnt < 0.7 * k) {
            thr *= 0.7f;
        } else {
            break;
        }
    }
    return select_or_topk(c, x, n, k, best_key, best_cnt, map, out);
}

/* ---------------------------------------------------------------- Redsync */

gv_status_t gv_cmp_redsync(struct gv_cmp *c, const float *x, uint32_t n, uint32_t k,
                           const uint32_t *map, struct gv_sparse *out)
{
    double sum;
    float mx;
    uint64_t nfin, cnt = 0;
    gv_status_t status = c->ops->abs_stats(c, x, n, &sum, &mx, &nfin);
    if (status != GV_OK)
        return status;
    double mean = nfin > 0 ? sum / (double)nfin : 0.0;
    double lo = 0.0, hi = 1.0;
    uint32_t key_min = 0;
    /* binary search of r in [0, 1] for thr = mean + r (max - mean), at most 3 rounds */
    while (hi - lo > 0.2) {
        double mid = 0.5 * (lo + hi);
        float thr = (float)(mean + mid * ((double)mx - mean));
        key_min = thr_key(thr) + 1u; /* |x| > thr */
        status = c->ops->count_ge(c, x, n, key_min, &cnt);
        if (status != GV_OK)
            return status;
        if (cnt >= k && cnt < 2ull * k)
            break;
        if (cnt < k)
            hi = mid; /* too few: lower the threshold */
        else
            lo = mid; /* too many: raise it */
    }
    return select_or_topk(c, x, n, k, key_min, cnt, map, out);
}
