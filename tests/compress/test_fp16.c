/* test_fp16.c: the C float <-> half conversions: edge cases named one by one, every half bit
 * pattern round-tripping, and random floats against a brute-force nearest-half oracle (ties to
 * even) that shares no code with the converter. */
#include "tutil.h"

static uint16_t h_of(float f)
{
    return gv_f32_to_f16(f);
}

static void test_edges(void)
{
    GV_CHECK_EQ(h_of(0.0f), 0x0000);
    GV_CHECK_EQ(h_of(-0.0f), 0x8000);
    GV_CHECK_EQ(h_of(1.0f), 0x3C00);
    GV_CHECK_EQ(h_of(-2.0f), 0xC000);
    GV_CHECK_EQ(h_of(65504.0f), 0x7BFF);  /* largest finite */
    GV_CHECK_EQ(h_of(65519.99f), 0x7BFF); /* below the tie */
    GV_CHECK_EQ(h_of(65520.0f), 0x7C00);  /* the tie rounds to even = Inf */
    GV_CHECK_EQ(h_of(1e10f), 0x7C00);
    GV_CHECK_EQ(h_of(-1e10f), 0xFC00);
    GV_CHECK_EQ(h_of(INFINITY), 0x7C00);
    GV_CHECK_EQ(h_of(-INFINITY), 0xFC00);
    GV_CHECK_EQ(h_of(0x1p-14f), 0x0400);   /* smallest normal */
    GV_CHECK_EQ(h_of(0x1p-24f), 0x0001);   /* smallest subnormal */
    GV_CHECK_EQ(h_of(0x1p-25f), 0x0000);   /* tie between 0 and 2^-24: even = 0 */
    GV_CHECK_EQ(h_of(0x1.8p-25f), 0x0001); /* above the tie */
    GV_CHECK_EQ(h_of(0x1.8p-24f), 0x0002); /* 1.5 ulp: tie, to even (2) */
    GV_CHECK_EQ(h_of(0x1.4p-24f), 0x0001);
    GV_CHECK_EQ(h_of(0x3FFp-24f), 0x03FF);         /* largest subnormal */
    GV_CHECK_EQ(h_of(0x3FF.8p-24f), 0x0400);       /* rounds up into the normals */
    GV_CHECK_EQ(h_of(1.0f + 0x1p-11f), 0x3C00);    /* tie: 1.0 is even */
    GV_CHECK_EQ(h_of(1.0f + 0x3p-11f), 0x3C02);    /* tie: up to even */
    GV_CHECK_EQ(h_of(1.0f + 0x1.01p-11f), 0x3C01); /* just above the tie */
    GV_CHECK_EQ(h_of(-0x1p-30f), 0x8000);          /* underflow keeps the sign */
    uint16_t qn = h_of(NAN);
    GV_CHECK((qn & 0x7C00) == 0x7C00 && (qn & 0x3FF) != 0 && (qn & 0x200) != 0);
    uint16_t nn = h_of(-NAN);
    GV_CHECK((nn & 0x8000) != 0 && (nn & 0x3FF) != 0);
    /* a signalling NaN whose payload sits in the low bits still comes out a NaN */
    GV_CHECK((h_of(gv_bits_f32(0x7F800001u)) & 0x3FF) != 0);

    GV_CHECK(tu_bits_eq(gv_f16_to_f32(0x7BFF), 65504.0f));
    GV_CHECK(tu_bits_eq(gv_f16_to_f32(0x0001), 0x1p-24f));
    GV_CHECK(tu_bits_eq(gv_f16_to_f32(0x8000), -0.0f));
    GV_CHECK(isinf(gv_f16_to_f32(0xFC00)) && gv_f16_to_f32(0xFC00) < 0);
    GV_CHECK(isnan(gv_f16_to_f32(0x7E00)));

    /* the compressors' saturating rounding */
    GV_CHECK(tu_bits_eq(gv_f16_round_sat(1e6f), 65504.0f));
    GV_CHECK(tu_bits_eq(gv_f16_round_sat(-1e30f), -65504.0f));
    GV_CHECK(tu_bits_eq(gv_f16_round_sat(65519.0f), 65504.0f));
    GV_CHECK(isinf(gv_f16_round_sat(INFINITY)));
    GV_CHECK(isnan(gv_f16_round_sat(NAN)));
    GV_CHECK(tu_bits_eq(gv_f16_round_sat(0.1f), gv_f16_to_f32(0x2E66)));
}

static void test_all_halves_round_trip(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = gv_f16_to_f32((uint16_t)h);
        uint16_t back = gv_f32_to_f16(f);
        int is_nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
        if (is_nan) {
            bad += !isnan(f) || (back & 0x7C00) != 0x7C00 || (back & 0x3FF) == 0 ||
                   (back & 0x8000) != (h & 0x8000);
        } else {
            bad += back != h;
            /* and the decoded value is what the bits say (independent formula) */
            uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
            double v = e == 0    ? ldexp((double)m, -24)
                       : e == 31 ? INFINITY
                                 : ldexp(1024.0 + m, (int)e - 25);
            if (h & 0x8000)
                v = -v;
            bad += (double)f != v;
        }
    }
    GV_CHECK_EQ(bad, 0);
}

/* Oracle: the finite non-negative halves in increasing order are h = 0..0x7BFF; find the two
 * neighbours of |f| by binary search and pick the nearer, ties to the even bit pattern. */
static uint16_t oracle(float f)
{
    double a = fabs((double)f);
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (a >= 65520.0)
        return sign | 0x7C00;
    uint32_t lo = 0, hi = 0x7BFF;
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if ((double)gv_f16_to_f32((uint16_t)mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dl = a - (double)gv_f16_to_f32((uint16_t)lo);
    double dh = (double)gv_f16_to_f32((uint16_t)hi) - a;
    uint32_t pick = dl < dh ? lo : dh < dl ? hi : ((lo & 1) == 0 ? lo : hi);
    if (dl == 0)
        pick = lo;
    return (uint16_t)(sign | pick);
}

static void test_random_vs_oracle(void)
{
    struct gv_rng rng;
    gv_rng_seed(&rng, 7);
    int bad = 0;
    for (int i = 0; i < 200000; i++) {
        /* exponents from 2^-30 to 2^17 so subnormals, normals and overflow all occur */
        uint32_t e = 97 + gv_rng_below(&rng, 48);
        uint32_t bits = (e << 23) | (uint32_t)(gv_rng_next(&rng) & 0x7FFFFF);
        if (gv_rng_next(&rng) & 1)
            bits |= 0x80000000u;
        /* every 8th value sits exactly on a tie between two halves */
        if ((i & 7) == 0)
            bits = (bits & ~0x1FFFu) | 0x1000u;
        float f = gv_bits_f32(bits);
        if (gv_f32_to_f16(f) != oracle(f))
            bad++;
    }
    GV_CHECK_EQ(bad, 0);
}

int main(void)
{
    test_edges();
    test_all_halves_round_trip();
    test_random_vs_oracle();
    return gv_check_summary();
}
