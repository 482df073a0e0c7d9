/* test_topk_paths.c: the paths of the CPU top-k that only some inputs take, each checked
 * against the sort oracle and, through the workspace counters, shown to be the path taken:
 * inputs built against the sample (whose cache lines are known for (n, k, seed)) so that its
 * upper threshold is too low (the k-th key is among the "sure" keys) or its lower one too high
 * (the exact fallback); ties split across the part of a one-thread run that sits in the output
 * and the part in its region; the two-level run whose first write step captures the second
 * level's candidates, with its fallbacks; and the kernels those paths use (a split that stops
 * at its cap and goes on elsewhere, the capturing compaction near its cap). Run once per scan
 * kernel, like test_topk. */
#include "tutil.h"

#define SEED 42
#define N 300001u /* sampled path, parallel with 2 and 3 threads */

static struct gv_cmp *cmps[4]; /* top-k compressors with 1, 2, 3 threads */
static uint32_t *oracle_idx, *oracle2_idx;
static struct gv_sparse out, out2;

static struct gv_topk_stats stats_of(int t)
{
    struct gv_topk_stats st;
    gv_topk_ws_stats(cmps[t]->topk_ws, &st);
    return st;
}

/* The norm the write step summed block by block equals gv_sumsq_f32 of the output, bit for
 * bit (the order is fixed, whatever the thread count and the path). */
static int sumsq_ok(const struct gv_sparse *sp)
{
    double want = gv_sumsq_f32(sp->val, sp->count);
    return sp->sumsq == want || (isnan(want) && isnan(sp->sumsq));
}

/* Top-k at cf with compressor t against the oracle: indices, values, count, norm. */
static int topk_ok(int t, const float *x, uint32_t n, double cf, const char *what)
{
    uint32_t k;
    GV_CHECK_OK(gv_cf_to_k(n, cf, &k));
    GV_CHECK_OK(gv_topk_oracle(x, n, k, oracle_idx));
    GV_CHECK_OK(gv_cmp_select(cmps[t], x, n, cf, 0, 0, &out));
    int vals = out.count == k;
    for (uint32_t i = 0; vals && i < k; i++)
        vals = tu_bits_eq(out.val[i], x[out.idx[i]]);
    int ok = out.count == k && tu_u32_eq(out.idx, oracle_idx, k) && vals;
    GV_CHECK_MSG(ok, "%s: threads %d cf %g differs from the oracle", what, t, cf);
    GV_CHECK_MSG(sumsq_ok(&out), "%s: threads %d cf %g: sumsq %.17g vs %.17g", what, t, cf,
                 out.sumsq, gv_sumsq_f32(out.val, out.count));
    return ok;
}

/* Both levels with gv_cmp_select2 against the oracle at both k. */
static void two_levels_ok(int t, const float *x, uint32_t n, double cf1, double cf2,
                          const char *what)
{
    uint32_t k1, k2;
    GV_CHECK_OK(gv_cf_to_k(n, cf1, &k1));
    GV_CHECK_OK(gv_cf_to_k(n, cf2, &k2));
    GV_CHECK_OK(gv_topk_oracle(x, n, k1, oracle_idx));
    GV_CHECK_OK(gv_topk_oracle(x, n, k2, oracle2_idx));
    GV_CHECK_OK(gv_cmp_select2(cmps[t], x, n, cf1, cf2, 0, 0, &out, &out2));
    int vals = 1;
    for (uint32_t i = 0; i < out2.count; i++)
        vals &= tu_bits_eq(out2.val[i], x[out2.idx[i]]);
    GV_CHECK_MSG(out.count == k1 && tu_u32_eq(out.idx, oracle_idx, k1) && out2.count == k2 &&
                     tu_u32_eq(out2.idx, oracle2_idx, k2) && vals,
                 "%s: threads %d cf %g/%g differs from the oracle", what, t, cf1, cf2);
    GV_CHECK_MSG(sumsq_ok(&out) && sumsq_ok(&out2), "%s: threads %d cf %g/%g: norms", what, t, cf1,
                 cf2);
}

/* Marks the entries of x the sampled path reads for (n, k). */
static void mark_sample(uint8_t *in, uint32_t n, uint32_t k)
{
    uint32_t *lines = malloc(4096 * sizeof(uint32_t));
    memset(in, 0, n);
    uint32_t nl = gv_topk_sample_lines(n, k, SEED, lines);
    GV_CHECK(nl > 0);
    for (uint32_t l = 0; l < nl; l++)
        memset(in + lines[l], 1, 16);
    free(lines);
}

/* The sample sees only middling values while k + 100 larger ones lie outside it: its upper
 * threshold hi is below the k-th key, more than k entries are "sure", and the k-th key is
 * selected among them (the region of a one-thread run then spans the output and its region). */
static void test_hi_too_low(float *x, uint8_t *in)
{
    uint32_t k;
    GV_CHECK_OK(gv_cf_to_k(N, 100, &k));
    mark_sample(in, N, k);
    uint32_t large = 0;
    for (uint32_t i = 0; i < N; i++) {
        if (in[i])
            x[i] = 1.0f + (float)(i % 1000) * 1e-3f;
        else if (i % 50 == 7 && large < k + 100)
            x[i] = (i % 2 ? -2.0f : 2.0f) - (float)(i % 997) * 1e-3f, large++;
        else
            x[i] = 1e-6f * (float)(i % 13);
    }
    GV_CHECK(large == k + 100);
    for (int t = 1; t <= 3; t++) {
        struct gv_topk_stats a = stats_of(t), b;
        topk_ok(t, x, N, 100, "hi too low");
        b = stats_of(t);
        GV_CHECK_MSG(b.upper == a.upper + 1 && b.sampled == a.sampled + 1 && b.missed == a.missed,
                     "hi too low, threads %d: upper %llu sampled %llu missed %llu", t,
                     (unsigned long long)(b.upper - a.upper),
                     (unsigned long long)(b.sampled - a.sampled),
                     (unsigned long long)(b.missed - a.missed));
    }
}

/* The sample sees only large values while k is more than it holds: fewer than k entries pass
 * its lower threshold, the sampled run gives up and the exact path answers. */
static void test_lo_too_high(float *x, uint8_t *in)
{
    uint32_t k;
    GV_CHECK_OK(gv_cf_to_k(N, 10, &k));
    mark_sample(in, N, k);
    for (uint32_t i = 0; i < N; i++)
        x[i] = in[i] ? 2.0f + (float)(i % 1000) * 1e-3f : (float)(i % 1009) * 1e-3f;
    for (int t = 1; t <= 3; t++) {
        struct gv_topk_stats a = stats_of(t), b;
        topk_ok(t, x, N, 10, "lo too high");
        b = stats_of(t);
        GV_CHECK_MSG(b.missed == a.missed + 1, "lo too high, threads %d: not a miss", t);
    }
}

/* Ties at the k-th key in many shapes for a one-thread run, whose first k candidates sit in
 * the output and the rest in its region: the equal entries taken must be the first ones in
 * index order across both parts. */
static void test_ties_split(float *x)
{
    static const uint32_t levels[] = {3, 5, 16, 100, 1000};
    static const double cfs[] = {4.5, 7, 10, 20};
    for (size_t l = 0; l < GV_ARRAY_LEN(levels); l++) {
        tu_fill_ties(x, N, 300 + l, levels[l]);
        for (size_t c = 0; c < GV_ARRAY_LEN(cfs); c++)
            topk_ok(1, x, N, cfs[c], "ties");
    }
    /* rejected middle entries early, the larger ones late: the taken ties reach into the
     * region part */
    for (uint32_t i = 0; i < N; i++) {
        if (i % 10 == 0)
            x[i] = 1.0f;
        else if (i % 10 == 1)
            x[i] = i < N / 2 ? 0.999f : 3.0f;
        else
            x[i] = 1e-4f;
    }
    for (size_t c = 0; c < GV_ARRAY_LEN(cfs); c++)
        for (int t = 1; t <= 3; t++)
            topk_ok(t, x, N, cfs[c], "ties late");
}

/* Two levels: normal data captures level 2 in level 1's write step; so does a split tie at
 * level 1 (the capture then scans the finished output); an input whose sample puts the level-2
 * threshold too high captures fewer than k2 and falls back to the plain second level; a
 * candidate CF too close to the first level's does not capture. */
static void test_capture(float *x, uint8_t *in)
{
    tu_fill_normal(x, N, 71);
    for (int t = 1; t <= 3; t += 2) {
        struct gv_topk_stats a = stats_of(t), b;
        two_levels_ok(t, x, N, 10, 1000, "capture");
        two_levels_ok(t, x, N, 10, 100, "capture");
        b = stats_of(t);
        GV_CHECK_MSG(b.captured == a.captured + 2, "capture, threads %d: %llu captures", t,
                     (unsigned long long)(b.captured - a.captured));
        a = b;
        two_levels_ok(t, x, N, 10, 10.5, "close levels");
        b = stats_of(t);
        GV_CHECK(b.captured == a.captured);
    }
    /* a split tie at the first level's k-th key, the second level above it; then also ties at
     * the second level's threshold and k-th key (three large values only) */
    for (int shape = 0; shape < 2; shape++) {
        for (uint32_t i = 0; i < N; i++) {
            if (i % 50 == 0)
                x[i] = shape == 0 ? 2.0f + (float)(i % 4999) * 1e-4f : 2.0f + (float)(i % 3);
            else if (i % 5 == 0)
                x[i] = -1.0f;
            else
                x[i] = 1e-3f * (float)(i % 7);
        }
        for (int t = 1; t <= 3; t++) {
            struct gv_topk_stats a = stats_of(t), b;
            two_levels_ok(t, x, N, 10, 1000, "capture with ties");
            b = stats_of(t);
            GV_CHECK_MSG(b.captured == a.captured + 1, "capture with ties %d, threads %d", shape,
                         t);
        }
    }
    /* ties at the second level's threshold without a split tie at the first level */
    tu_fill_normal(x, N, 73);
    for (uint32_t i = 0; i < N; i += 61)
        x[i] = i % 2 ? 7.0f : -7.0f; /* about 4900 equal magnitudes, all in level 1 */
    for (int t = 1; t <= 3; t += 2) {
        struct gv_topk_stats a = stats_of(t), b;
        two_levels_ok(t, x, N, 10, 1000, "capture at a tie");
        b = stats_of(t);
        GV_CHECK_MSG(b.captured == a.captured + 1, "capture at a tie, threads %d", t);
    }
    /* the sample holds all the large values: too few reach its level-2 threshold */
    uint32_t k1;
    GV_CHECK_OK(gv_cf_to_k(N, 10, &k1));
    mark_sample(in, N, k1);
    for (uint32_t i = 0; i < N; i++)
        x[i] = in[i] ? 2.0f + (float)(i % 1000) * 1e-3f : (float)(i % 1009) * 1e-3f;
    for (int t = 1; t <= 3; t++) {
        struct gv_topk_stats a = stats_of(t), b;
        two_levels_ok(t, x, N, 10, 1000, "capture short");
        b = stats_of(t);
        GV_CHECK(b.captured == a.captured);
    }
}

/* Norms summed in the write step against gv_sumsq_f32 of the output and against each other
 * across thread counts (1-3, so block boundaries fall inside and between the threads' parts),
 * on every path: sampled, exact with regions, exact with full passes (a heavy bucket), small,
 * k = n, both levels, with NaN and Inf, and in fp16 mode (summed after the rounding). */
static void test_norms(float *x)
{
    static const double cfs[] = {1, 1.7, 3, 10, 77.7, 1000};
    static const uint32_t sizes[] = {1000, 70001, N};
    for (int data = 0; data < 3; data++) {
        for (size_t z = 0; z < GV_ARRAY_LEN(sizes); z++) {
            const uint32_t n = sizes[z];
            if (data == 0)
                tu_fill_normal(x, n, 101 + z);
            else if (data == 1)
                tu_fill_ties(x, n, 102 + z, 4); /* heavy buckets: the exact path's full passes */
            else
                for (uint32_t i = 0; i < n; i++)
                    x[i] = i % 97 == 0 ? (i % 2 ? NAN : -INFINITY) : (float)(i % 1013) * 0.5f;
            for (size_t c = 0; c < GV_ARRAY_LEN(cfs); c++) {
                double first = 0;
                for (int t = 1; t <= 3; t++) {
                    topk_ok(t, x, n, cfs[c], "norms");
                    if (t == 1)
                        first = out.sumsq;
                    GV_CHECK(out.sumsq == first || (isnan(first) && isnan(out.sumsq)));
                }
            }
            for (int t = 1; t <= 3; t++)
                two_levels_ok(t, x, n, 3, 30, "norms");
        }
    }
    struct gv_cmp *h = tu_cmp(GV_CMP_TOPK, N, 1.0, 2, GV_VAL_F16, SEED);
    tu_fill_normal(x, N, 103);
    for (uint32_t i = 0; i < N; i += 1000)
        x[i] *= 1e5f; /* saturated in fp16 */
    GV_CHECK_OK(gv_cmp_select2(h, x, N, 10, 1000, 0, 0, &out, &out2));
    for (uint32_t i = 0; i < out.count; i++)
        GV_CHECK(tu_bits_eq(out.val[i], gv_f16_round_sat(x[out.idx[i]])));
    GV_CHECK(sumsq_ok(&out) && sumsq_ok(&out2));
    gv_cmp_destroy(h);
    /* a dense first level claiming more entries than the compressor was sized for: the norm
     * of that many values still comes out right (and within the workspace) */
    struct gv_cmp *small = tu_cmp(GV_CMP_TOPK, 5000, 1.0, 1, GV_VAL_F32, SEED);
    tu_fill_normal(x, 20000, 104);
    struct gv_sparse in = {.val = x, .count = 20000, .n = 5000, .dense = 1};
    GV_CHECK_OK(gv_cmp_select_sub(small, &in, 1.0, 0, 0, &out));
    GV_CHECK(out.count == 20000 && sumsq_ok(&out));
    gv_cmp_destroy(small);
}

/* 1..100 one by one, then in steps of 97, then the last 40 one by one. */
static size_t next_cap(size_t cap, size_t total)
{
    return cap < 100 || cap + 40 >= total ? cap + 1 : GV_MIN(cap + 97, total - 40);
}

/* The split kernel stopping at its cap: the first cap candidates in place and the middle keys
 * among them counted (a one-thread run goes on after the last one in its region), for every
 * cap around the vector widths. */
static void test_split_cap(float *x)
{
    const uint32_t n_max = 20011;
    tu_fill_normal(x, n_max, 81);
    struct gv_scan_kernels kern;
    gv_scan_pick(&kern);
    uint32_t *ci = malloc((n_max + 64) * 4), *mk = malloc((n_max + 64) * 4);
    uint32_t *ri = malloc(n_max * 4);
    float *cv = malloc((n_max + 64) * 4);
    const uint32_t lo = gv_key(1.0f), hi = gv_key(2.0f);
    gv_scan_split_fn fns[2] = {gv_scan_split_generic, kern.split};
    /* every length of the scalar tail; caps all along for one n, near the end for the others */
    for (uint32_t n = n_max - 31; n <= n_max; n++) {
        size_t total = 0;
        for (uint32_t i = 0; i < n; i++)
            if (gv_key(x[i]) >= lo)
                ri[total++] = i;
        GV_CHECK(total > 1000);
        for (int f = 0; f < 2; f++) {
            size_t cap = n == n_max ? 1 : total - 40;
            for (; cap < total; cap = next_cap(cap, total)) {
                size_t mid = 12345;
                size_t c = fns[f](x, n, lo, hi, 0, ci, cv, mk, &mid, cap);
                size_t m = 0;
                int same = c == cap + 1;
                for (size_t q = 0; q < cap && same; q++) {
                    same = ci[q] == ri[q] && tu_bits_eq(cv[q], x[ri[q]]);
                    if (gv_key(x[ri[q]]) < hi)
                        same &= mk[m++] == gv_key(x[ri[q]]);
                }
                GV_CHECK_MSG(same && mid == m,
                             "split %s n %u cap %zu: stopped wrong (mid %zu of %zu)",
                             f ? kern.name : "generic", n, cap, mid, m);
            }
        }
    }
    free(ci);
    free(mk);
    free(ri);
    free(cv);
}

/* The capturing compaction against a plain loop and the kernel without capture: every cap2 up
 * to past the number captured (exact overflow), t2 at, above and below t, in place too. */
static void test_compact2(float *x)
{
    const uint32_t n = 5003;
    tu_fill_normal(x, n, 91);
    for (uint32_t i = 0; i < n; i += 17) /* keys equal to the thresholds */
        x[i] = i % 2 ? 1.0f : -2.0f;
    struct gv_scan_kernels kern;
    gv_scan_pick(&kern);
    uint32_t *ci = malloc(n * 4), *oi = malloc((n + 16) * 4), *c2i = malloc((n + 16) * 4);
    uint32_t *ri = malloc(n * 4), *oi2 = malloc((n + 16) * 4);
    float *ov = malloc((n + 16) * 4), *c2v = malloc((n + 16) * 4), *ov2 = malloc((n + 16) * 4);
    for (uint32_t i = 0; i < n; i++)
        ci[i] = i * 7 + 1;
    static const float ts[] = {0.5f, 1.0f};
    static const float t2s[] = {0.3f, 1.0f, 2.0f, 1e30f};
    gv_compact2_fn fns[2] = {gv_compact2_generic, kern.compact2};
    for (size_t a = 0; a < GV_ARRAY_LEN(ts); a++) {
        for (size_t b = 0; b < GV_ARRAY_LEN(t2s); b++) {
            const uint32_t t = gv_key(ts[a]), t2 = gv_key(t2s[b]);
            size_t kept = 0, cap_all = 0;
            for (uint32_t i = 0; i < n; i++) {
                uint32_t key = gv_key(x[i]);
                kept += key >= t;
                if (key >= t && key >= t2)
                    ri[cap_all++] = i;
            }
            for (int f = 0; f < 2; f++) {
                for (size_t cap2 = 0; cap2 <= cap_all + 2; cap2 += cap2 < 40 ? 1 : 37) {
                    size_t n2 = 0;
                    for (size_t i = 0; i < n + 16; i++)
                        c2i[i] = 0xDEADBEEFu;
                    size_t o = fns[f](ci, x, n, t, oi, ov, n, t2, c2i, c2v, cap2, &n2);
                    size_t o2 = kern.compact(ci, x, n, t, oi2, ov2, n);
                    int same = o == kept && o2 == kept && tu_u32_eq(oi, oi2, kept) &&
                               memcmp(ov, ov2, kept * 4) == 0;
                    size_t want2 = cap_all <= cap2 ? cap_all : cap2 + 1;
                    same &= n2 == want2 && c2i[cap2] == 0xDEADBEEFu;
                    for (size_t q = 0; q < GV_MIN(cap_all, cap2); q++)
                        same &= c2i[q] == ci[ri[q]] && tu_bits_eq(c2v[q], x[ri[q]]);
                    GV_CHECK_MSG(same, "compact2 %s t %g t2 %g cap2 %zu: n2 %zu (want %zu)",
                                 f ? kern.name : "generic", ts[a], t2s[b], cap2, n2, want2);
                }
            }
        }
    }
    free(ci);
    free(oi);
    free(c2i);
    free(ri);
    free(oi2);
    free(ov);
    free(c2v);
    free(ov2);
}

int main(void)
{
    const uint32_t max_n = 1u << 20;
    for (int t = 1; t <= 3; t++)
        cmps[t] = tu_cmp(GV_CMP_TOPK, max_n, 1.0, t, GV_VAL_F32, SEED);
    float *x = malloc(max_n * sizeof(float));
    uint8_t *in = malloc(max_n);
    oracle_idx = malloc(max_n * sizeof(uint32_t));
    oracle2_idx = malloc(max_n * sizeof(uint32_t));
    tu_sparse_alloc(&out, max_n);
    tu_sparse_alloc(&out2, max_n);
    test_hi_too_low(x, in);
    test_lo_too_high(x, in);
    test_ties_split(x);
    test_capture(x, in);
    test_norms(x);
    test_split_cap(x);
    test_compact2(x);
    tu_sparse_free(&out);
    tu_sparse_free(&out2);
    free(oracle_idx);
    free(oracle2_idx);
    free(in);
    free(x);
    for (int t = 1; t <= 3; t++)
        gv_cmp_destroy(cmps[t]);
    return gv_check_summary();
}
