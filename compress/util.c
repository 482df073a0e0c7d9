/* util.c: the small shared pieces of compress/: the CF -> k rule, names of kinds, the random
 * generator and seed derivation, fixed-blocking sums of squares, and fp16 conversion. */
#include "compress_internal.h"

#include <math.h>

gv_status_t gv_cf_to_k(uint64_t n, double cf, uint32_t *k_p)
{
    if (!isfinite(cf) || cf < 1.0) {
        gv_log(GV_LOG_ERROR, "compression factor %g is invalid (must be finite and >= 1)", cf);
        return GV_ERR_INVAL;
    }
    if (n > UINT32_MAX) {
        gv_log(GV_LOG_ERROR, "tensor of %llu entries exceeds the uint32 index range",
               (unsigned long long)n);
        return GV_ERR_INVAL;
    }
    if (n == 0) {
        *k_p = 0;
        return GV_OK;
    }
    /* n and cf are exact doubles and the division is correctly rounded, so an exact integer
     * quotient is never floored one below. */
    double q = floor((double)n / cf);
    uint32_t k = q < 1.0 ? 1u : (uint32_t)q;
    *k_p = k > n ? (uint32_t)n : k;
    return GV_OK;
}

static const char *const kind_names[] = {"dense", "topk", "randomk", "dgc", "redsync"};

const char *gv_cmp_kind_str(enum gv_cmp_kind kind)
{
    return (unsigned)kind < GV_ARRAY_LEN(kind_names) ? kind_names[kind] : "unknown";
}

gv_status_t gv_cmp_kind_parse(const char *s, enum gv_cmp_kind *kind_p)
{
    for (size_t i = 0; s != NULL && i < GV_ARRAY_LEN(kind_names); i++) {
        if (strcmp(s, kind_names[i]) == 0) {
            *kind_p = (enum gv_cmp_kind)i;
            return GV_OK;
        }
    }
    return GV_ERR_INVAL;
}

const char *gv_idx_enc_str(enum gv_idx_enc enc)
{
    switch (enc) {
    case GV_IDX_AUTO: return "auto";
    case GV_IDX_DENSE: return "dense";
    case GV_IDX_RAW32: return "raw32";
    case GV_IDX_VARINT: return "varint";
    case GV_IDX_BITMAP: return "bitmap";
    }
    return "unknown";
}

/* ---------------------------------------------------------------- random numbers */

void gv_rng_seed(struct gv_rng *rng, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        rng->s[i] = gv_splitmix64(&x);
}

static inline uint64_t rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

uint64_t gv_rng_next(struct gv_rng *rng)
{
    uint64_t *s = rng->s;
    uint64_t out = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return out;
}

uint32_t gv_rng_below(struct gv_rng *rng, uint32_t bound)
{
    /* Lemire: multiply a 32-bit draw by bound, reject the few low products that would bias. */
    uint64_t m = (gv_rng_next(rng) >> 32) * (uint64_t)bound;
    uint32_t low = (uint32_t)m;
    if (low < bound) {
        uint32_t floor_ = (uint32_t)(-bound) % bound;
        while (low < floor_) {
            m = (gv_rng_next(rng) >> 32) * (uint64_t)bound;
            low = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

uint64_t gv_seed_mix(uint64_t seed, uint64_t iter, uint32_t tensor_id, uint32_t level,
                     uint32_t purpose)
{
    uint64_t x = seed;
    uint64_t h = gv_splitmix64(&x);
    x = h ^ iter;
    h = gv_splitmix64(&x);
    x = h ^ (((uint64_t)tensor_id << 32) | ((uint64_t)level << 8) | purpose);
    return gv_splitmix64(&x);
}

/* ---------------------------------------------------------------- sums of squares */

/* Sixteen partial sums (lane j takes the entries i = j mod 16 below the last multiple of 16),
 * added pairwise at the end, then the rest: eight independent two-lane add chains in vector
 * registers instead of the two of a four-sum loop, which were latency bound (the 2.5 M values of
 * a CF 10 level of 25 M entries took 1.1 ms). The order is fixed, so the result still depends
 * only on the block's values. */
typedef double v2d __attribute__((vector_size(16)));

double gv_sumsq_block(const float *x, size_t n)
{
    v2d a0 = {0, 0}, a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const float *p = x + i;
        v2d d0 = {p[0], p[1]}, d1 = {p[2], p[3]}, d2 = {p[4], p[5]}, d3 = {p[6], p[7]};
        v2d d4 = {p[8], p[9]}, d5 = {p[10], p[11]}, d6 = {p[12], p[13]}, d7 = {p[14], p[15]};
        a0 += d0 * d0;
        a1 += d1 * d1;
        a2 += d2 * d2;
        a3 += d3 * d3;
        a4 += d4 * d4;
        a5 += d5 * d5;
        a6 += d6 * d6;
        a7 += d7 * d7;
    }
    v2d s = ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7));
    double t = s[0] + s[1];
    for (; i < n; i++)
        t += (double)x[i] * x[i];
    return t;
}

double gv_sumsq_f32(const float *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i += GV_SUMSQ_BLOCK)
        s += gv_sumsq_block(x + i, GV_MIN((size_t)GV_SUMSQ_BLOCK, n - i));
    return s;
}

/* ---------------------------------------------------------------- fp16 */

uint16_t gv_f32_to_f16(float f)
{
    uint32_t x = gv_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) /* NaN: quiet, keep the top payload bits */
        return (uint16_t)(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
    if (ax >= 0x477FF000u) /* >= 65520 rounds to Inf (65520 is the tie, and 65536 is even) */
        return (uint16_t)(sign | 0x7C00u);
    if (ax >= 0x38800000u) { /* normal half: rebias 127 -> 15, round the 13 dropped bits */
        uint32_t odd = (ax >> 13) & 1u;
        ax += 0xC8000FFFu + odd;
        return (uint16_t)(sign | (ax >> 13));
    }
    if (ax < 0x33000000u) /* below 2^-25 (half of the smallest subnormal, which ties to 0) */
        return sign;
    /* subnormal half: value / 2^-24 = m * 2^(e - 126), with m the 24-bit significand */
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t h = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u)))
        h++; /* may carry into the exponent: 0x400 is the smallest normal, which is right */
    return (uint16_t)(sign | h);
}

float gv_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu;
    uint32_t m = h & 0x3FFu;
    if (e == 0x1F)
        return gv_bits_f32(sign | 0x7F800000u | (m << 13));
    if (e == 0) {
        float v = (float)m * 0x1p-24f; /* exact: m < 2^10 */
        return sign ? -v : v;
    }
    return gv_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

float gv_f16_round_sat(float f)
{
    if (isfinite(f)) {
        if (f > 65504.0f)
            f = 65504.0f;
        else if (f < -65504.0f)
            f = -65504.0f;
    }
    return gv_f16_to_f32(gv_f32_to_f16(f));
}
