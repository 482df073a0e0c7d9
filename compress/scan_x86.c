/* scan_x86.c: the x86-64 candidate scans (CMake leaves this file out elsewhere and uses
 * scan_pick.c). Both compare 32 magnitudes per step and, when any passes, left-pack the hits
 * without branches: AVX2 with a permutation looked up from the 8-bit compare mask, AVX-512 with
 * vpcompressd; full-width stores, advancing by the popcount. Chosen at run time (AVX-512, then
 * AVX2, then the portable kernel); GV_COMPRESS_SCAN=avx2 or =generic overrides. */
#include "compress_internal.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>

static uint32_t pack_lut[256][8];
static pthread_once_t pack_once = PTHREAD_ONCE_INIT;

static void pack_lut_init(void)
{
    for (int m = 0; m < 256; m++) {
        int c = 0;
        for (int j = 0; j < 8; j++)
            if ((m >> j) & 1)
                pack_lut[m][c++] = (uint32_t)j;
        for (; c < 8; c++)
            pack_lut[m][c] = 0;
    }
}

__attribute__((target("avx2,popcnt"))) static size_t scan_avx2(const float *x, size_t n,
                                                               uint32_t key_min, uint32_t base,
                                                               uint32_t *ci, float *cv, size_t cap)
{
    const __m256i absmask = _mm256_set1_epi32(0x7FFFFFFF);
    const __m256i tv = _mm256_set1_epi32((int32_t)key_min - 1); /* a > key_min - 1 */
    size_t c = 0, i = 0;
    /* each 32-block writes at most 32 lanes past c (junk beyond the hits is overwritten later),
     * so the vector path runs while that stays inside cap */
    for (; i + 32 <= n && c + 32 <= cap; i += 32) {
        GV_SCAN_PREFETCH_STEP(x, i, n);
        __m256i a[4];
        int m[4];
        for (int j = 0; j < 4; j++) {
            a[j] = _mm256_loadu_si256((const __m256i *)(const void *)(x + i + 8 * j));
            __m256i gt = _mm256_cmpgt_epi32(_mm256_and_si256(a[j], absmask), tv);
            m[j] = _mm256_movemask_ps(_mm256_castsi256_ps(gt));
        }
        if ((m[0] | m[1] | m[2] | m[3]) == 0)
            continue;
        __m256i idx = _mm256_add_epi32(_mm256_set1_epi32((int32_t)(base + (uint32_t)i)),
                                       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        for (int j = 0; j < 4; j++) {
            __m256i p = _mm256_loadu_si256((const __m256i *)(const void *)pack_lut[m[j]]);
            __m256i id = _mm256_add_epi32(idx, _mm256_set1_epi32(8 * j));
            _mm256_storeu_si256((__m256i *)(void *)(ci + c), _mm256_permutevar8x32_epi32(id, p));
            _mm256_storeu_si256((__m256i *)(void *)(cv + c), _mm256_permutevar8x32_epi32(a[j], p));
            c += (size_t)__builtin_popcount((unsigned)m[j]);
        }
    }
    if (i >= n)
        return c;
    size_t rest =
        gv_scan_generic(x + i, n - i, key_min, base + (uint32_t)i, ci + c, cv + c, cap - c);
    return rest > cap - c ? cap + 1 : c + rest;
}

__attribute__((target("avx2,popcnt"))) static size_t
scan_split_avx2(const float *x, size_t n, uint32_t lo, uint32_t hi, uint32_t base, uint32_t *ci,
                float *cv, uint32_t *mk, size_t *mid_p, size_t cap)
{
    const __m256i absmask = _mm256_set1_epi32(0x7FFFFFFF);
    const __m256i nan_key = _mm256_set1_epi32((int32_t)GV_KEY_NAN);
    const __m256i lov = _mm256_set1_epi32((int32_t)lo - 1);
    /* keys are <= GV_KEY_NAN, so clamping hi keeps "key < hi" and makes it a signed compare */
    const __m256i hiv = _mm256_set1_epi32((int32_t)GV_MIN(hi, GV_KEY_NAN + 1u));
    size_t c = 0, i = 0, mid = 0;
    for (; i + 32 <= n && c + 32 <= cap; i += 32) {
        GV_SCAN_PREFETCH_STEP(x, i, n);
        __m256i a[4], key[4];
        int m[4];
        for (int j = 0; j < 4; j++) {
            a[j] = _mm256_loadu_si256((const __m256i *)(const void *)(x + i + 8 * j));
            key[j] = _mm256_min_epu32(_mm256_and_si256(a[j], absmask), nan_key);
            __m256i ge = _mm256_cmpgt_epi32(key[j], lov);
            m[j] = _mm256_movemask_ps(_mm256_castsi256_ps(ge));
        }
        if ((m[0] | m[1] | m[2] | m[3]) == 0)
            continue;
        __m256i idx = _mm256_add_epi32(_mm256_set1_epi32((int32_t)(base + (uint32_t)i)),
                                       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        for (int j = 0; j < 4; j++) {
            __m256i lt = _mm256_cmpgt_epi32(hiv, key[j]);
            int mm = m[j] & _mm256_movemask_ps(_mm256_castsi256_ps(lt));
            __m256i p = _mm256_loadu_si256((const __m256i *)(const void *)pack_lut[m[j]]);
            __m256i pm = _mm256_loadu_si256((const __m256i *)(const void *)pack_lut[mm]);
            __m256i id = _mm256_add_epi32(idx, _mm256_set1_epi32(8 * j));
            _mm256_storeu_si256((__m256i *)(void *)(ci + c), _mm256_permutevar8x32_epi32(id, p));
            _mm256_storeu_si256((__m256i *)(void *)(cv + c), _mm256_permutevar8x32_epi32(a[j], p));
            /* mid <= c, so these 8 lanes stay inside the segment as the ones above do */
            _mm256_storeu_si256((__m256i *)(void *)(mk + mid),
                                _mm256_permutevar8x32_epi32(key[j], pm));
            c += (size_t)__builtin_popcount((unsigned)m[j]);
            mid += (size_t)__builtin_popcount((unsigned)mm);
        }
    }
    *mid_p = mid;
    if (i >= n)
        return c;
    size_t mid_rest = 0;
    size_t rest = gv_scan_split_generic(x + i, n - i, lo, hi, base + (uint32_t)i, ci + c, cv + c,
                                        mk + mid, &mid_rest, cap - c);
    *mid_p = mid + mid_rest;
    return rest > cap - c ? cap + 1 : c + rest;
}

/* AVX-512: 16 lanes a compare, and vpcompressd packs the hits in registers (a full 16-lane
 * store follows, so the same cap rule as the AVX2 kernel applies). */
__attribute__((target("avx512f,popcnt"))) static size_t scan_avx512(const float *x, size_t n,
                                                                    uint32_t key_min, uint32_t base,
                                                                    uint32_t *ci, float *cv,
                                                                    size_t cap)
{
    const __m512i absmask = _mm512_set1_epi32(0x7FFFFFFF);
    const __m512i tv = _mm512_set1_epi32((int32_t)key_min);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    size_t c = 0, i = 0;
    for (; i + 32 <= n && c + 32 <= cap; i += 32) {
        GV_SCAN_PREFETCH_STEP(x, i, n);
        __m512i a0 = _mm512_loadu_si512((const void *)(x + i));
        __m512i a1 = _mm512_loadu_si512((const void *)(x + i + 16));
        __mmask16 m0 = _mm512_cmpge_epi32_mask(_mm512_and_si512(a0, absmask), tv);
        __mmask16 m1 = _mm512_cmpge_epi32_mask(_mm512_and_si512(a1, absmask), tv);
        if ((m0 | m1) == 0)
            continue;
        __m512i id = _mm512_add_epi32(_mm512_set1_epi32((int32_t)(base + (uint32_t)i)), lane);
        _mm512_storeu_si512((void *)(ci + c), _mm512_maskz_compress_epi32(m0, id));
        _mm512_storeu_si512((void *)(cv + c), _mm512_maskz_compress_epi32(m0, a0));
        c += (size_t)__builtin_popcount(m0);
        id = _mm512_add_epi32(id, _mm512_set1_epi32(16));
        _mm512_storeu_si512((void *)(ci + c), _mm512_maskz_compress_epi32(m1, id));
        _mm512_storeu_si512((void *)(cv + c), _mm512_maskz_compress_epi32(m1, a1));
        c += (size_t)__builtin_popcount(m1);
    }
    if (i >= n)
        return c;
    size_t rest =
        gv_scan_generic(x + i, n - i, key_min, base + (uint32_t)i, ci + c, cv + c, cap - c);
    return rest > cap - c ? cap + 1 : c + rest;
}

__attribute__((target("avx512f,popcnt"))) static size_t
scan_split_avx512(const float *x, size_t n, uint32_t lo, uint32_t hi, uint32_t base, uint32_t *ci,
                  float *cv, uint32_t *mk, size_t *mid_p, size_t cap)
{
    const __m512i absmask = _mm512_set1_epi32(0x7FFFFFFF);
    const __m512i nan_key = _mm512_set1_epi32((int32_t)GV_KEY_NAN);
    const __m512i lov = _mm512_set1_epi32((int32_t)lo);
    const __m512i hiv = _mm512_set1_epi32((int32_t)GV_MIN(hi, GV_KEY_NAN + 1u));
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    size_t c = 0, i = 0, mid = 0;
    for (; i + 32 <= n && c + 32 <= cap; i += 32) {
        GV_SCAN_PREFETCH_STEP(x, i, n);
        __m512i a[2], key[2];
        __mmask16 m[2];
        for (int j = 0; j < 2; j++) {
            a[j] = _mm512_loadu_si512((const void *)(x + i + 16 * (size_t)j));
            key[j] = _mm512_min_epu32(_mm512_and_si512(a[j], absmask), nan_key);
            m[j] = _mm512_cmpge_epi32_mask(key[j], lov);
        }
        if ((m[0] | m[1]) == 0)
            continue;
        __m512i id = _mm512_add_epi32(_mm512_set1_epi32((int32_t)(base + (uint32_t)i)), lane);
        for (int j = 0; j < 2; j++) {
            __mmask16 mm = _mm512_mask_cmplt_epi32_mask(m[j], key[j], hiv);
            _mm512_storeu_si512((void *)(ci + c), _mm512_maskz_compress_epi32(m[j], id));
            _mm512_storeu_si512((void *)(cv + c), _mm512_maskz_compress_epi32(m[j], a[j]));
            _mm512_storeu_si512((void *)(mk + mid), _mm512_maskz_compress_epi32(mm, key[j]));
            c += (size_t)__builtin_popcount(m[j]);
            mid += (size_t)__builtin_popcount(mm);
            id = _mm512_add_epi32(id, _mm512_set1_epi32(16));
        }
    }
    *mid_p = mid;
    if (i >= n)
        return c;
    size_t mid_rest = 0;
    size_t rest = gv_scan_split_generic(x + i, n - i, lo, hi, base + (uint32_t)i, ci + c, cv + c,
                                        mk + mid, &mid_rest, cap - c);
    *mid_p = mid + mid_rest;
    return rest > cap - c ? cap + 1 : c + rest;
}

/* Top-k's write step: 16 (AVX-512) or 8 (AVX2) candidates per step, packed by the key >= t
 * mask; the vector path stops 16 short of `want` so that no store reaches past it. */
__attribute__((target("avx512f,popcnt"))) static size_t compact_avx512(const uint32_t *ci,
                                                                       const float *cv, size_t cnt,
                                                                       uint32_t t, uint32_t *oi,
                                                                       float *ov, size_t want)
{
    const __m512i absmask = _mm512_set1_epi32(0x7FFFFFFF);
    const __m512i nan_key = _mm512_set1_epi32((int32_t)GV_KEY_NAN);
    const __m512i tv = _mm512_set1_epi32((int32_t)t);
    size_t o = 0, i = 0;
    for (; i + 16 <= cnt && o + 16 <= want; i += 16) {
        __m512i v = _mm512_loadu_si512((const void *)(cv + i));
        __m512i id = _mm512_loadu_si512((const void *)(ci + i));
        __m512i key = _mm512_min_epu32(_mm512_and_si512(v, absmask), nan_key);
        __mmask16 m = _mm512_cmpge_epi32_mask(key, tv);
        _mm512_storeu_si512((void *)(oi + o), _mm512_maskz_compress_epi32(m, id));
        _mm512_storeu_si512((void *)(ov + o), _mm512_maskz_compress_epi32(m, v));
        o += (size_t)__builtin_popcount(m);
    }
    return o + gv_compact_generic(ci + i, cv + i, cnt - i, t, oi + o, ov + o, want - o);
}

__attribute__((target("avx2,popcnt"))) static size_t compact_avx2(const uint32_t *ci,
                                                                  const float *cv, size_t cnt,
                                                                  uint32_t t, uint32_t *oi,
                                                                  float *ov, size_t want)
{
    const __m256i absmask = _mm256_set1_epi32(0x7FFFFFFF);
    const __m256i nan_key = _mm256_set1_epi32((int32_t)GV_KEY_NAN);
    const __m256i tv = _mm256_set1_epi32((int32_t)t - 1); /* key > t - 1; t >= 1 here */
    size_t o = 0, i = 0;
    for (; t > 0 && i + 8 <= cnt && o + 8 <= want; i += 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(cv + i));
        __m256i id = _mm256_loadu_si256((const __m256i *)(const void *)(ci + i));
        __m256i key = _mm256_min_epu32(_mm256_and_si256(v, absmask), nan_key);
        int m = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(key, tv)));
        __m256i p = _mm256_loadu_si256((const __m256i *)(const void *)pack_lut[m]);
        _mm256_storeu_si256((__m256i *)(void *)(oi + o), _mm256_permutevar8x32_epi32(id, p));
        _mm256_storeu_si256((__m256i *)(void *)(ov + o), _mm256_permutevar8x32_epi32(v, p));
        o += (size_t)__builtin_popcount((unsigned)m);
    }
    return o + gv_compact_generic(ci + i, cv + i, cnt - i, t, oi + o, ov + o, want - o);
}

/* The captures of one vector near cap2: lanes in order, n2 = cap2 + 1 once one does not fit. */
static size_t capture_lanes(unsigned lanes, const uint32_t *ids, const float *vals, uint32_t *c2i,
                            float *c2v, size_t cap2, size_t n2)
{
    for (; lanes != 0 && n2 <= cap2; lanes &= lanes - 1) {
        int j = __builtin_ctz(lanes);
        if (n2 < cap2) {
            c2i[n2] = ids[j];
            c2v[n2] = vals[j];
        }
        n2++;
    }
    return n2;
}

/* compact2 (see gv_compact2_fn): the compaction above, and behind a branch (about one step
 * in six at a second level of CF 100 within the first) the second packing of the captured. */
__attribute__((target("avx512f,popcnt"))) static size_t
compact2_avx512(const uint32_t *ci, const float *cv, size_t cnt, uint32_t t, uint32_t *oi,
                float *ov, size_t want, uint32_t t2, uint32_t *c2i, float *c2v, size_t cap2,
                size_t *n2_p)
{
    const __m512i absmask = _mm512_set1_epi32(0x7FFFFFFF);
    const __m512i nan_key = _mm512_set1_epi32((int32_t)GV_KEY_NAN);
    const __m512i tv = _mm512_set1_epi32((int32_t)t);
    /* keys are <= GV_KEY_NAN: clamping keeps "key >= t2" and makes it a signed compare */
    const __m512i t2v = _mm512_set1_epi32((int32_t)GV_MIN(t2, GV_KEY_NAN + 1u));
    size_t o = 0, i = 0, n2 = *n2_p;
    for (; i + 16 <= cnt && o + 16 <= want; i += 16) {
        __m512i v = _mm512_loadu_si512((const void *)(cv + i));
        __m512i id = _mm512_loadu_si512((const void *)(ci + i));
        __m512i key = _mm512_min_epu32(_mm512_and_si512(v, absmask), nan_key);
        __mmask16 m = _mm512_cmpge_epi32_mask(key, tv);
        __mmask16 m2 = _mm512_mask_cmpge_epi32_mask(m, key, t2v);
        _mm512_storeu_si512((void *)(oi + o), _mm512_maskz_compress_epi32(m, id));
        _mm512_storeu_si512((void *)(ov + o), _mm512_maskz_compress_epi32(m, v));
        o += (size_t)__builtin_popcount(m);
        if (m2 != 0 && n2 + 16 <= cap2) {
            _mm512_storeu_si512((void *)(c2i + n2), _mm512_maskz_compress_epi32(m2, id));
            _mm512_storeu_si512((void *)(c2v + n2), _mm512_maskz_compress_epi32(m2, v));
            n2 += (size_t)__builtin_popcount(m2);
        } else if (m2 != 0 && n2 <= cap2) { /* near the cap: one by one, exactly */
            uint32_t ids[16];
            float vals[16];
            _mm512_storeu_si512((void *)ids, id);
            _mm512_storeu_si512((void *)vals, v);
            n2 = capture_lanes(m2, ids, vals, c2i, c2v, cap2, n2);
        }
    }
    *n2_p = n2;
    return o + gv_compact2_generic(ci + i, cv + i, cnt - i, t, oi + o, ov + o, want - o, t2, c2i,
                                   c2v, cap2, n2_p);
}

__attribute__((target("avx2,popcnt"))) static size_t
compact2_avx2(const uint32_t *ci, const float *cv, size_t cnt, uint32_t t, uint32_t *oi, float *ov,
              size_t want, uint32_t t2, uint32_t *c2i, float *c2v, size_t cap2, size_t *n2_p)
{
    const __m256i absmask = _mm256_set1_epi32(0x7FFFFFFF);
    const __m256i nan_key = _mm256_set1_epi32((int32_t)GV_KEY_NAN);
    const __m256i tv = _mm256_set1_epi32((int32_t)t - 1); /* key > t - 1; t >= 1 here */
    const __m256i t2v = _mm256_set1_epi32((int32_t)GV_MIN(t2, GV_KEY_NAN + 1u) - 1);
    size_t o = 0, i = 0, n2 = *n2_p;
    for (; t > 0 && t2 > 0 && i + 8 <= cnt && o + 8 <= want; i += 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(cv + i));
        __m256i id = _mm256_loadu_si256((const __m256i *)(const void *)(ci + i));
        __m256i key = _mm256_min_epu32(_mm256_and_si256(v, absmask), nan_key);
        int m = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(key, tv)));
        int m2 = m & _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(key, t2v)));
        __m256i p = _mm256_loadu_si256((const __m256i *)(const void *)pack_lut[m]);
        _mm256_storeu_si256((__m256i *)(void *)(oi + o), _mm256_permutevar8x32_epi32(id, p));
        _mm256_storeu_si256((__m256i *)(void *)(ov + o), _mm256_permutevar8x32_epi32(v, p));
        o += (size_t)__builtin_popcount((unsigned)m);
        if (m2 != 0 && n2 + 8 <= cap2) {
            __m256i p2 = _mm256_loadu_si256((const __m256i *)(const void *)pack_lut[m2]);
            _mm256_storeu_si256((__m256i *)(void *)(c2i + n2), _mm256_permutevar8x32_epi32(id, p2));
            _mm256_storeu_si256((__m256i *)(void *)(c2v + n2), _mm256_permutevar8x32_epi32(v, p2));
            n2 += (size_t)__builtin_popcount((unsigned)m2);
        } else if (m2 != 0 && n2 <= cap2) { /* near the cap: one by one, exactly */
            uint32_t ids[8];
            float vals[8];
            _mm256_storeu_si256((__m256i *)(void *)ids, id);
            _mm256_storeu_si256((__m256i *)(void *)vals, v);
            n2 = capture_lanes((unsigned)m2, ids, vals, c2i, c2v, cap2, n2);
        }
    }
    *n2_p = n2;
    return o + gv_compact2_generic(ci + i, cv + i, cnt - i, t, oi + o, ov + o, want - o, t2, c2i,
                                   c2v, cap2, n2_p);
}

void gv_scan_pick(struct gv_scan_kernels *k)
{
    const char *force = getenv("GV_COMPRESS_SCAN");
    int generic = force != NULL && strcmp(force, "generic") == 0;
    int no512 = force != NULL && strcmp(force, "avx2") == 0;
    if (!generic && !no512 && __builtin_cpu_supports("avx512f")) {
        *k = (struct gv_scan_kernels){"avx512", scan_avx512, scan_split_avx512, compact_avx512,
                                      compact2_avx512};
    } else if (!generic && __builtin_cpu_supports("avx2")) {
        pthread_once(&pack_once, pack_lut_init);
        *k = (struct gv_scan_kernels){"avx2", scan_avx2, scan_split_avx2, compact_avx2,
                                      compact2_avx2};
    } else {
        *k = (struct gv_scan_kernels){"generic", gv_scan_generic, gv_scan_split_generic,
                                      gv_compact_generic, gv_compact2_generic};
    }
}
