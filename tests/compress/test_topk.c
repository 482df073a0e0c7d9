/* test_topk.c: the CPU top-k (sampled and exact paths, 1..3 threads) against the sort-based
 * oracle on random and adversarial inputs: ties, all equal, zeros, +-0, NaN and Inf, n < CF,
 * k = n, sorted inputs, concentrated spikes; plus the two scan kernels against each other. */
#include "tutil.h"

static struct gv_cmp *cmps[4]; /* top-k compressors with 1, 2, 3 threads */
static uint32_t *oracle_idx;
static struct gv_sparse out;

/* Runs top-k at cf on x with every compressor and compares to the oracle. */
static void check_topk(const float *x, uint32_t n, double cf, const char *what)
{
    uint32_t k;
    GV_CHECK_OK(gv_cf_to_k(n, cf, &k));
    GV_CHECK_OK(gv_topk_oracle(x, n, k, oracle_idx));
    for (int t = 1; t <= 3; t++) {
        out.count = 0;
        gv_status_t st = gv_cmp_select(cmps[t], x, n, cf, 0, 0, &out);
        GV_CHECK_MSG(st == GV_OK, "%s n %u cf %g threads %d: %s", what, n, cf, t,
                     gv_status_str(st));
        GV_CHECK_MSG(out.count == k, "%s n %u cf %g threads %d: count %u, k %u", what, n, cf, t,
                     out.count, k);
        GV_CHECK_MSG(tu_u32_eq(out.idx, oracle_idx, k),
                     "%s n %u cf %g threads %d: index set "
                     "differs from the oracle",
                     what, n, cf, t);
        int vals_ok = 1;
        double ss = 0;
        for (uint32_t i = 0; i < k && i < out.count; i++) {
            vals_ok &= tu_bits_eq(out.val[i], x[out.idx[i]]);
            ss += (double)out.val[i] * out.val[i];
        }
        GV_CHECK_MSG(vals_ok, "%s n %u cf %g: values are not the inputs at the indices", what, n,
                     cf);
        GV_CHECK_MSG(out.sumsq == ss || (isnan(ss) && isnan(out.sumsq)) ||
                         fabs(out.sumsq - ss) <= 1e-12 * ss,
                     "%s: sumsq %.17g vs %.17g", what, out.sumsq, ss);
        GV_CHECK(out.n == n && !out.dense);
    }
}

static const double cfs[] = {1, 1.5, 2, 7.9, 8, 10, 33.3, 100, 1000, 1e4, 1e9};

static void test_random_sizes(float *x)
{
    static const uint32_t sizes[] = {1,    2,    3,     17,    31,     32,     33,
                                     1000, 4097, 65535, 65536, 100003, 300001, 1u << 20};
    for (size_t s = 0; s < GV_ARRAY_LEN(sizes); s++) {
        tu_fill_normal(x, sizes[s], 100 + s);
        for (size_t c = 0; c < GV_ARRAY_LEN(cfs); c++)
            check_topk(x, sizes[s], cfs[c], "normal");
    }
}

static void test_adversarial(float *x)
{
    const uint32_t n = 300001; /* parallel and sampled paths */
    static const double cf_a[] = {1.5, 10, 100, 1000, 300001, 1e7};
    /* all equal: the first k indices win */
    for (uint32_t i = 0; i < n; i++)
        x[i] = (i & 1) ? -3.5f : 3.5f;
    for (size_t c = 0; c < GV_ARRAY_LEN(cf_a); c++)
        check_topk(x, n, cf_a[c], "all equal");
    /* all zeros, with signed zeros mixed in */
    for (uint32_t i = 0; i < n; i++)
        x[i] = (i % 3 == 0) ? -0.0f : 0.0f;
    for (size_t c = 0; c < GV_ARRAY_LEN(cf_a); c++)
        check_topk(x, n, cf_a[c], "zeros");
    /* few distinct magnitudes: ties straddle every threshold */
    for (uint32_t lv = 2; lv <= 64; lv *= 4) {
        tu_fill_ties(x, n, lv, lv);
        for (size_t c = 0; c < GV_ARRAY_LEN(cf_a); c++)
            check_topk(x, n, cf_a[c], "ties");
    }
    /* mostly zero with a few nonzeros: the sample sees only zeros */
    memset(x, 0, n * sizeof(float));
    for (uint32_t i = 0; i < 50; i++)
        x[(i * 7919u) % n] = (float)(i + 1);
    for (size_t c = 0; c < GV_ARRAY_LEN(cf_a); c++)
        check_topk(x, n, cf_a[c], "sparse spikes");
    /* the large values packed into one contiguous stretch the sample may miss */
    tu_fill_normal(x, n, 5);
    for (uint32_t i = 150000; i < 153000; i++)
        x[i] *= 100.0f;
    for (size_t c = 0; c < GV_ARRAY_LEN(cf_a); c++)
        check_topk(x, n, cf_a[c], "spike block");
    /* sorted ascending and descending magnitudes */
    for (uint32_t i = 0; i < n; i++)
        x[i] = (float)i * 1e-3f;
    check_topk(x, n, 100, "ascending");
    for (uint32_t i = 0; i < n; i++)
        x[i] = -(float)(n - i);
    check_topk(x, n, 100, "descending");
    /* tiny and subnormal magnitudes */
    for (uint32_t i = 0; i < n; i++)
        x[i] = gv_bits_f32(1u + i % 5000u);
    check_topk(x, n, 100, "subnormal");
}

static void test_nan_inf(float *x)
{
    const uint32_t n = 300001;
    tu_fill_normal(x, n, 9);
    /* NaN ranks above Inf, Inf above every finite value; NaNs tie among themselves */
    x[10] = NAN;
    x[20] = -INFINITY;
    x[30] = INFINITY;
    x[40] = -NAN;
    x[50] = gv_bits_f32(0x7F800123u); /* a NaN with another payload */
    x[n - 1] = NAN;
    static const double cf_n[] = {1e9, 300001.0 / 2, 300001.0 / 4, 300001.0 / 6, 1000, 10};
    for (size_t c = 0; c < GV_ARRAY_LEN(cf_n); c++)
        check_topk(x, n, cf_n[c], "nan/inf");
    /* k = 1: the NaN of lowest index */
    GV_CHECK_OK(gv_cmp_select(cmps[2], x, n, 1e9, 0, 0, &out));
    GV_CHECK(out.count == 1 && out.idx[0] == 10);
    /* k = 4: all four NaNs (10, 40, 50, n-1) and no Inf */
    GV_CHECK_OK(gv_cmp_select(cmps[2], x, n, (double)n / 4, 0, 0, &out));
    GV_CHECK(out.count == 4 && out.idx[0] == 10 && out.idx[1] == 40 && out.idx[2] == 50 &&
             out.idx[3] == n - 1);
    /* k = 6: then the Infs */
    GV_CHECK_OK(gv_cmp_select(cmps[2], x, n, (double)n / 6, 0, 0, &out));
    GV_CHECK(out.count == 6 && out.idx[1] == 20 && out.idx[2] == 30);
    /* all NaN */
    for (uint32_t i = 0; i < 1000; i++)
        x[i] = NAN;
    check_topk(x, 1000, 10, "all nan");
}

/* The sampled path must actually serve the normal case, and the exact path the misses. */
static void test_paths(float *x)
{
    struct gv_topk_stats a, b;
    const uint32_t n = 1u << 20;
    tu_fill_normal(x, n, 11);
    gv_topk_ws_stats(cmps[1]->topk_ws, &a);
    GV_CHECK_OK(gv_cmp_select(cmps[1], x, n, 100, 0, 0, &out));
    gv_topk_ws_stats(cmps[1]->topk_ws, &b);
    GV_CHECK_EQ(b.sampled - a.sampled, 1);
    memset(x, 0, n * sizeof(float));
    x[12345] = 1.0f;
    GV_CHECK_OK(gv_cmp_select(cmps[1], x, n, 100, 0, 0, &out)); /* lo = 0: everything passes */
    gv_topk_ws_stats(cmps[1]->topk_ws, &a);
    GV_CHECK_EQ(a.missed - b.missed, 1);
    check_topk(x, n, 100, "forced miss");
    GV_CHECK_OK(gv_cmp_select(cmps[1], x, 1000, 10, 0, 0, &out));
    gv_topk_ws_stats(cmps[1]->topk_ws, &b);
    GV_CHECK_EQ(b.exact - a.exact, 1);
}

/* The level-2 form: top-k over a first level's values, indices mapped back. */
static void test_map(float *x)
{
    const uint32_t n = 200000;
    tu_fill_normal(x, n, 13);
    struct gv_sparse l1, l2, d;
    tu_sparse_alloc(&l1, n);
    tu_sparse_alloc(&l2, n);
    tu_sparse_alloc(&d, n);
    static const double pairs[][2] = {{10, 1000}, {10, 100}, {2, 2}, {1, 1e9}, {100, 150}};
    for (size_t p = 0; p < GV_ARRAY_LEN(pairs); p++) {
        GV_CHECK_OK(gv_cmp_select(cmps[2], x, n, pairs[p][0], 0, 0, &l1));
        GV_CHECK_OK(gv_cmp_select_sub(cmps[2], &l1, pairs[p][1], 0, 0, &l2));
        GV_CHECK_OK(gv_cmp_select(cmps[2], x, n, pairs[p][1], 0, 0, &d));
        GV_CHECK(l2.count == d.count && tu_u32_eq(l2.idx, d.idx, d.count));
        GV_CHECK(l2.n == n && l2.sumsq == d.sumsq);
    }
    tu_sparse_free(&l1);
    tu_sparse_free(&l2);
    tu_sparse_free(&d);
}

/* Both levels at once against the oracle at both k, on normal data, ties, all equal, NaN/Inf
 * and mostly-zero data (which forces the exact path). */
static void test_two_levels(float *x)
{
    const uint32_t n = 300001;
    struct gv_sparse l1, l2;
    tu_sparse_alloc(&l1, n);
    tu_sparse_alloc(&l2, n);
    uint32_t *o2 = malloc(n * sizeof(uint32_t));
    static const double pairs[][2] = {{10, 20},   {10, 100}, {10, 1000}, {4, 8},
                                      {100, 1e4}, {4, 4.5},  {10, 1e9}};
    for (int data = 0; data < 5; data++) {
        if (data == 0)
            tu_fill_normal(x, n, 61);
        else if (data == 1)
            tu_fill_ties(x, n, 62, 8);
        else if (data == 2)
            for (uint32_t i = 0; i < n; i++)
                x[i] = 2.0f;
        else if (data == 3) {
            tu_fill_normal(x, n, 63);
            for (uint32_t i = 1000; i < n; i += 1000)
                x[i] = (i / 1000) % 2 ? NAN : -INFINITY;
        } else {
            memset(x, 0, n * sizeof(float));
            for (uint32_t i = 0; i < 99; i++)
                x[(i * 7919u) % n] = (float)(i + 1);
        }
        for (size_t p = 0; p < GV_ARRAY_LEN(pairs); p++) {
            uint32_t k1, k2;
            GV_CHECK_OK(gv_cf_to_k(n, pairs[p][0], &k1));
            GV_CHECK_OK(gv_cf_to_k(n, pairs[p][1], &k2));
            GV_CHECK_OK(gv_topk_oracle(x, n, k1, oracle_idx));
            GV_CHECK_OK(gv_topk_oracle(x, n, k2, o2));
            for (int t = 1; t <= 3; t++) {
                GV_CHECK_OK(
                    gv_cmp_select2(cmps[t], x, n, pairs[p][0], pairs[p][1], 0, 0, &l1, &l2));
                GV_CHECK_MSG(l1.count == k1 && tu_u32_eq(l1.idx, oracle_idx, k1) &&
                                 l2.count == k2 && tu_u32_eq(l2.idx, o2, k2),
                             "two levels data %d cf %g/%g threads %d differ from the oracle", data,
                             pairs[p][0], pairs[p][1], t);
                int vals = 1;
                for (uint32_t i = 0; i < l2.count; i++)
                    vals &= tu_bits_eq(l2.val[i], x[l2.idx[i]]);
                GV_CHECK(vals && l2.n == n && l1.n == n);
            }
        }
    }
    /* invalid: candidate below the floor */
    GV_CHECK_STATUS(gv_cmp_select2(cmps[1], x, n, 100, 10, 0, 0, &l1, &l2), GV_ERR_INVAL);
    free(o2);
    tu_sparse_free(&l1);
    tu_sparse_free(&l2);
}

static void test_scan_kernels(float *x)
{
    const uint32_t n = 100003;
    tu_fill_normal(x, n, 17);
    uint32_t *i1 = malloc(n * 4 + 64), *i2 = malloc(n * 4 + 64);
    float *v1 = malloc(n * 4 + 64), *v2 = malloc(n * 4 + 64);
    struct gv_scan_kernels kern;
    gv_scan_pick(&kern);
    const char *name = kern.name;
    gv_scan_fn fast = kern.scan;
    static const float thr[] = {0.0f, 0.5f, 2.0f, 3.0f, 10.0f};
    for (size_t t = 0; t < GV_ARRAY_LEN(thr); t++) {
        uint32_t key = gv_key(thr[t]);
        for (size_t cap = 0; cap <= n; cap = cap * 4 + 7) {
            size_t a = gv_scan_generic(x + 3, n - 3, key, 3, i1, v1, cap);
            size_t b = fast(x + 3, n - 3, key, 3, i2, v2, cap);
            GV_CHECK_MSG(a == b, "scan %s thr %g cap %zu: %zu vs %zu", name, thr[t], cap, a, b);
            size_t m = GV_MIN(a, cap);
            GV_CHECK(tu_u32_eq(i1, i2, m) && memcmp(v1, v2, m * 4) == 0);
            /* against a plain loop */
            size_t c = 0;
            for (uint32_t i = 3; i < n; i++)
                c += (gv_f32_bits(x[i]) & 0x7FFFFFFFu) >= key;
            GV_CHECK(a == (c > cap ? cap + 1 : c));
        }
    }
    /* the split form: candidates plus the middle keys, NaNs and Infs included */
    gv_scan_split_fn fast_split = kern.split;
    uint32_t *k1 = malloc(n * 4 + 64), *k2 = malloc(n * 4 + 64);
    for (uint32_t i = 0; i < n; i += 501)
        x[i] = i % 2 ? NAN : INFINITY;
    static const float los[] = {0.0f, 1.0f, 2.5f, 1e30f};
    static const float his[] = {1.5f, 3.0f, INFINITY, 0.0f}; /* 0: hi = UINT32_MAX */
    for (size_t t = 0; t < GV_ARRAY_LEN(los); t++) {
        for (size_t h = 0; h < GV_ARRAY_LEN(his); h++) {
            uint32_t lo = gv_key(los[t]), hi = his[h] == 0.0f ? UINT32_MAX : gv_key(his[h]);
            if (h == 2)
                hi = GV_KEY_NAN; /* Infs are middle, NaNs are up */
            for (size_t cap = 5; cap <= n; cap = cap * 8 + 3) {
                size_t ma = 0, mb = 0;
                size_t a = gv_scan_split_generic(x + 1, n - 1, lo, hi, 1, i1, v1, k1, &ma, cap);
                size_t b = fast_split(x + 1, n - 1, lo, hi, 1, i2, v2, k2, &mb, cap);
                GV_CHECK_MSG(a == b, "split %s lo %g cap %zu: %zu vs %zu", name, los[t], cap, a, b);
                if (a > cap || b > cap)
                    continue;
                GV_CHECK(ma == mb && tu_u32_eq(i1, i2, a) && memcmp(v1, v2, a * 4) == 0 &&
                         tu_u32_eq(k1, k2, ma));
                size_t c = 0, m = 0;
                for (uint32_t i = 1; i < n; i++) {
                    uint32_t key = gv_key(x[i]);
                    c += key >= lo;
                    m += key >= lo && key < hi;
                }
                GV_CHECK(a == c && ma == m);
            }
        }
    }
    /* the write step: the first `want` entries with key >= t, nothing written past want */
    for (size_t i = 0; i < n; i++)
        i1[i] = (uint32_t)i * 3;
    static const float ts[] = {0.0f, 0.8f, 2.0f, 1e30f};
    for (size_t t = 0; t < GV_ARRAY_LEN(ts); t++) {
        uint32_t key = gv_key(ts[t]);
        for (size_t want = 0; want <= n; want = want * 5 + 9) {
            size_t cnt = n - 7;
            for (size_t i = 0; i < n; i++)
                i2[i] = k2[i] = 0xDEADBEEFu;
            size_t a = gv_compact_generic(i1, x, cnt, key, k1, v1, want);
            size_t b = kern.compact(i1, x, cnt, key, i2, v2, want);
            size_t c = 0;
            for (size_t i = 0; i < cnt; i++)
                c += gv_key(x[i]) >= key;
            GV_CHECK(a == b && a == GV_MIN(c, want));
            GV_CHECK(tu_u32_eq(k1, i2, a) && memcmp(v1, v2, a * 4) == 0);
            GV_CHECK(want >= n || i2[want] == 0xDEADBEEFu);
        }
    }
    free(k1);
    free(k2);
    free(i1);
    free(i2);
    free(v1);
    free(v2);
}

int main(void)
{
    const uint32_t max_n = 1u << 20;
    for (int t = 1; t <= 3; t++)
        cmps[t] = tu_cmp(GV_CMP_TOPK, max_n, 1.0, t, GV_VAL_F32, 42);
    float *x = malloc(max_n * sizeof(float));
    oracle_idx = malloc(max_n * sizeof(uint32_t));
    tu_sparse_alloc(&out, max_n);
    test_random_sizes(x);
    test_adversarial(x);
    test_nan_inf(x);
    test_paths(x);
    test_map(x);
    test_two_levels(x);
    test_scan_kernels(x);
    tu_sparse_free(&out);
    free(oracle_idx);
    free(x);
    for (int t = 1; t <= 3; t++)
        gv_cmp_destroy(cmps[t]);
    return gv_check_summary();
}
