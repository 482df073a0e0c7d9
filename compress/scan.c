/* scan.c: the portable candidate scan of the CPU top-k and threshold selection (GCC vector
 * extensions, 16-byte vectors, so it vectorises on any target). scan_x86.c holds the AVX2 one;
 * gv_scan_pick chooses at run time. */
#include "compress_internal.h"

typedef int32_t v4i __attribute__((vector_size(16)));
typedef uint64_t v2u64 __attribute__((vector_size(16)));

static inline uint32_t v4_bits(v4i m)
{
    return (uint32_t)((m[0] & 1) | (m[1] & 2) | (m[2] & 4) | (m[3] & 8));
}

static size_t scan_tail(const float *x, size_t n, uint32_t key_min, uint32_t base, uint32_t *ci,
                        float *cv, size_t cap, size_t c)
{
    for (size_t i = 0; i < n; i++) {
        if ((gv_f32_bits(x[i]) & 0x7FFFFFFFu) >= key_min) {
            if (c >= cap)
                return cap + 1;
            ci[c] = base + (uint32_t)i;
            cv[c] = x[i];
            c++;
        }
    }
    return c;
}

size_t gv_scan_generic(const float *x, size_t n, uint32_t key_min, uint32_t base, uint32_t *ci,
                       float *cv, size_t cap)
{
    const v4i absmask = {0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF};
    const int32_t t = (int32_t)key_min; /* keys < 2^31: the signed compare is exact */
    const v4i tv = {t, t, t, t};
    size_t c = 0, i = 0;
    for (; i + 32 <= n; i += 32) {
        GV_SCAN_PREFETCH_STEP(x, i, n);
        v4i a[8], m[8];
        memcpy(a, x + i, sizeof(a));
        for (int j = 0; j < 8; j++)
            m[j] = (a[j] & absmask) >= tv;
        v4i any = ((m[0] | m[1]) | (m[2] | m[3])) | ((m[4] | m[5]) | (m[6] | m[7]));
        v2u64 q = (v2u64)any;
        if ((q[0] | q[1]) == 0)
            continue;
        uint32_t bits = 0;
        for (int j = 0; j < 8; j++)
            bits |= v4_bits(m[j]) << (4 * j);
        while (bits != 0) {
            int j = __builtin_ctz(bits);
            if (c >= cap)
                return cap + 1;
            ci[c] = base + (uint32_t)(i + (size_t)j);
            cv[c] = x[i + (size_t)j];
            c++;
            bits &= bits - 1;
        }
    }
    return scan_tail(x + i, n - i, key_min, base + (uint32_t)i, ci, cv, cap, c);
}

static size_t split_tail(const float *x, size_t n, uint32_t lo, uint32_t hi, uint32_t base,
                         uint32_t *ci, float *cv, uint32_t *mk, size_t *mid_p, size_t cap, size_t c)
{
    size_t mid = *mid_p;
    for (size_t i = 0; i < n; i++) {
        uint32_t key = gv_key(x[i]);
        if (key >= lo) {
            if (c >= cap) {
                *mid_p = mid;
                return cap + 1;
            }
            ci[c] = base + (uint32_t)i;
            cv[c] = x[i];
            c++;
            mk[mid] = key;
            mid += key < hi;
        }
    }
    *mid_p = mid;
    return c;
}

size_t gv_scan_split_generic(const float *x, size_t n, uint32_t lo, uint32_t hi, uint32_t base,
                             uint32_t *ci, float *cv, uint32_t *mk, size_t *mid_p, size_t cap)
{
    const v4i absmask = {0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF};
    const int32_t t = (int32_t)lo;
    const v4i tv = {t, t, t, t};
    size_t c = 0, i = 0, mid = 0;
    for (; i + 32 <= n; i += 32) {
        GV_SCAN_PREFETCH_STEP(x, i, n);
        v4i a[8], m[8];
        memcpy(a, x + i, sizeof(a));
        for (int j = 0; j < 8; j++)
            m[j] = (a[j] & absmask) >= tv; /* raw bits >= lo: the same set as keys (lo <= NaN) */
        v4i any = ((m[0] | m[1]) | (m[2] | m[3])) | ((m[4] | m[5]) | (m[6] | m[7]));
        v2u64 q = (v2u64)any;
        if ((q[0] | q[1]) == 0)
            continue;
        uint32_t bits = 0;
        for (int j = 0; j < 8; j++)
            bits |= v4_bits(m[j]) << (4 * j);
        while (bits != 0) {
            int j = __builtin_ctz(bits);
            if (c >= cap) {
                *mid_p = mid;
                return cap + 1;
            }
            uint32_t key = gv_key(x[i + (size_t)j]);
            ci[c] = base + (uint32_t)(i + (size_t)j);
            cv[c] = x[i + (size_t)j];
            c++;
            mk[mid] = key;
            mid += key < hi;
            bits &= bits - 1;
        }
    }
    *mid_p = mid;
    return split_tail(x + i, n - i, lo, hi, base + (uint32_t)i, ci, cv, mk, mid_p, cap, c);
}

size_t gv_compact_generic(const uint32_t *ci, const float *cv, size_t cnt, uint32_t t, uint32_t *oi,
                          float *ov, size_t want)
{
    size_t o = 0;
    /* branch-free: written at o (< want) always, kept when selected */
    for (size_t i = 0; i < cnt && o < want; i++) {
        oi[o] = ci[i];
        ov[o] = cv[i];
        o += gv_key(cv[i]) >= t;
    }
    return o;
}

size_t gv_compact2_generic(const uint32_t *ci, const float *cv, size_t cnt, uint32_t t,
                           uint32_t *oi, float *ov, size_t want, uint32_t t2, uint32_t *c2i,
                           float *c2v, size_t cap2, size_t *n2_p)
{
    size_t o = 0, n2 = *n2_p;
    for (size_t i = 0; i < cnt && o < want; i++) {
        uint32_t key = gv_key(cv[i]), id = ci[i];
        float v = cv[i];
        oi[o] = id;
        ov[o] = v;
        o += key >= t;
        if (key >= t && key >= t2 && n2 <= cap2) {
            if (n2 < cap2) {
                c2i[n2] = id;
                c2v[n2] = v;
            }
            n2++; /* cap2 + 1: overflow, and no more captures */
        }
    }
    *n2_p = n2;
    return o;
}
