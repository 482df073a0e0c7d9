/* scan_x86.c: the AVX2 candidate scan (x86-64 only; CMake leaves this file out elsewhere and
 * uses scan_pick.c). Compares 32 magnitudes per step and, when any passes, compacts the hits
 * with a permutation looked up from the 8-bit compare mask (branch-free left-packing), storing
 * 8 lanes and advancing by the popcount. Chosen at run time when the CPU has AVX2. */
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

__attribute__((target("avx2,popcnt"))) static size_t
scan_avx2(const float *x, size_t n, uint32_t key_min, uint32_t base, uint32_t *ci, float *cv,
          size_t cap)
{
    const __m256i absmask = _mm256_set1_epi32(0x7FFFFFFF);
    const __m256i tv = _mm256_set1_epi32((int32_t)key_min - 1); /* a > key_min - 1 */
    size_t c = 0, i = 0;
    /* each 32-block writes at most 32 lanes past c (junk beyond the hits is overwritten later),
     * so the vector path runs while that stays inside cap */
    for (; i + 32 <= n && c + 32 <= cap; i += 32) {
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
    size_t rest = gv_scan_generic(x + i, n - i, key_min, base + (uint32_t)i, ci + c, cv + c,
                                  cap - c);
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

gv_scan_fn gv_scan_pick(const char **name_p, gv_scan_split_fn *split_p)
{
    const char *force = getenv("GV_COMPRESS_SCAN");
    if ((force == NULL || strcmp(force, "generic") != 0) && __builtin_cpu_supports("avx2")) {
        pthread_once(&pack_once, pack_lut_init);
        if (name_p != NULL)
            *name_p = "avx2";
        if (split_p != NULL)
            *split_p = scan_split_avx2;
        return scan_avx2;
    }
    if (name_p != NULL)
        *name_p = "generic";
    if (split_p != NULL)
        *split_p = gv_scan_split_generic;
    return gv_scan_generic;
}
