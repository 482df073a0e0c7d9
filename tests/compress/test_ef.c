/* test_ef.c: error feedback and multi-level compression through gv_cmp_compress / gv_cmp_apply:
 * sent + residual == g_ef exactly for every compressor (f32, and fp16 in the normal range),
 * the residual follows only the level that was sent, dense clears it, nothing-sent keeps g_ef,
 * misuse is refused; multi-level equals direct for top-k (f32 and fp16); the three norms match
 * sums done here and do not depend on the thread count. */
#include "tutil.h"

#define N 200000u

static const enum gv_cmp_kind kinds[] = {GV_CMP_DENSE, GV_CMP_TOPK, GV_CMP_RANDOMK, GV_CMP_DGC,
                                         GV_CMP_REDSYNC};

static void alloc_levels(struct gv_cmp *c, struct gv_sparse *a, struct gv_sparse *b)
{
    tu_sparse_alloc(a, gv_cmp_bound(c, N, 10));
    tu_sparse_alloc(b, gv_cmp_bound(c, N, 10));
}

/* Checks that the sent entries plus the residual give back g_ef bit for bit. */
static void check_exact(const float *g_ef, const float *r, const struct gv_sparse *sent, int f16,
                        const char *what)
{
    float *sum = malloc(N * sizeof(float));
    memcpy(sum, r, N * sizeof(float));
    int sent_ok = 1;
    for (uint32_t i = 0; i < sent->count; i++) {
        uint32_t p = sent->dense ? i : sent->idx[i];
        sum[p] += sent->val[i];
        if (!f16)
            sent_ok &= r[p] == 0.0f; /* f32: what went out leaves nothing behind */
    }
    int bad = 0;
    for (uint32_t i = 0; i < N; i++)
        bad += !tu_bits_eq(sum[i], g_ef[i]) && !(sum[i] == 0 && g_ef[i] == 0);
    GV_CHECK_MSG(bad == 0, "%s: sent + residual != g_ef at %d entries", what, bad);
    GV_CHECK_MSG(sent_ok, "%s: residual not zero where f32 values were sent", what);
    free(sum);
}

static void test_sent_plus_residual(void)
{
    float *g = malloc(N * 4), *g_ef = malloc(N * 4), *r = calloc(N, 4);
    for (int f16 = 0; f16 <= 1; f16++) {
        for (size_t q = 0; q < GV_ARRAY_LEN(kinds); q++) {
            struct gv_cmp *c = tu_cmp(kinds[q], N, 10, 2, f16 ? GV_VAL_F16 : GV_VAL_F32, 3);
            struct gv_ef *ef;
            GV_CHECK_OK(gv_ef_create(c, N, NULL, &ef));
            struct gv_sparse lmin, lcand;
            alloc_levels(c, &lmin, &lcand);
            memset(r, 0, N * 4);
            for (int it = 0; it < 4; it++) {
                tu_fill_normal(g, N, 50 + (uint64_t)it);
                for (uint32_t i = 0; i < N; i++)
                    g_ef[i] = r[i] + g[i];
                struct gv_cmp_req req = {
                    .iter = (uint64_t)it, .tensor_id = 7, .cf_min = 10, .cf_cand = 100};
                struct gv_norms nm;
                GV_CHECK_OK(gv_cmp_compress(c, ef, g, &req, &lmin, &lcand, &nm));
                GV_CHECK(memcmp(gv_ef_data(ef), g_ef, N * 4) == 0); /* pending: holds g_ef */
                /* alternate which level goes out */
                const struct gv_sparse *sent = (it & 1) ? &lmin : &lcand;
                GV_CHECK_OK(gv_cmp_apply(c, ef, GV_SENT_SPARSE, sent));
                memcpy(r, gv_ef_data(ef), N * 4);
                char what[64];
                snprintf(what, sizeof(what), "%s %s it %d", gv_cmp_kind_str(kinds[q]),
                         f16 ? "f16" : "f32", it);
                check_exact(g_ef, r, sent, f16, what);
            }
            tu_sparse_free(&lmin);
            tu_sparse_free(&lcand);
            gv_ef_destroy(ef);
            gv_cmp_destroy(c);
        }
    }
    free(g);
    free(g_ef);
    free(r);
}

static void test_decisions(void)
{
    struct gv_cmp *c = tu_cmp(GV_CMP_TOPK, N, 10, 1, GV_VAL_F32, 3);
    struct gv_ef *ef, *other;
    GV_CHECK_OK(gv_ef_create(c, N, NULL, &ef));
    GV_CHECK_OK(gv_ef_create(c, N, NULL, &other));
    struct gv_sparse lmin, lcand, foreign;
    alloc_levels(c, &lmin, &lcand);
    tu_sparse_alloc(&foreign, 100);
    float *g = malloc(N * 4), *g_ef = malloc(N * 4);
    tu_fill_normal(g, N, 1);
    struct gv_cmp_req req = {.iter = 1, .cf_min = 10, .cf_cand = 1000};

    /* apply before any compress */
    GV_CHECK_STATUS(gv_cmp_apply(c, ef, GV_SENT_DENSE, NULL), GV_ERR_INVAL);
    GV_CHECK_OK(gv_cmp_compress(c, ef, g, &req, &lmin, &lcand, NULL));
    /* a second compress before apply is refused and changes nothing */
    memcpy(g_ef, gv_ef_data(ef), N * 4);
    GV_CHECK_STATUS(gv_cmp_compress(c, ef, g, &req, &lmin, &lcand, NULL), GV_ERR_INVAL);
    GV_CHECK(memcmp(g_ef, gv_ef_data(ef), N * 4) == 0);
    /* a sparse that is not this step's output is refused */
    GV_CHECK_STATUS(gv_cmp_apply(c, ef, GV_SENT_SPARSE, &foreign), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_cmp_apply(c, other, GV_SENT_SPARSE, &lmin), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_cmp_apply(c, ef, (enum gv_sent)9, NULL), GV_ERR_INVAL);
    /* nothing sent: r = g_ef */
    GV_CHECK_OK(gv_cmp_apply(c, ef, GV_SENT_NOTHING, NULL));
    GV_CHECK(memcmp(g_ef, gv_ef_data(ef), N * 4) == 0);
    /* next step accumulates on top: g_ef = 2g */
    GV_CHECK_OK(gv_cmp_compress(c, ef, g, &req, &lmin, &lcand, NULL));
    int ok = 1;
    for (uint32_t i = 0; i < N; i++)
        ok &= gv_ef_data(ef)[i] == g_ef[i] + g[i];
    GV_CHECK(ok);
    /* candidate sent: only the candidate's entries are cleared; the floor's extra entries stay */
    memcpy(g_ef, gv_ef_data(ef), N * 4);
    GV_CHECK_OK(gv_cmp_apply(c, ef, GV_SENT_SPARSE, &lcand));
    uint32_t zeros = 0;
    for (uint32_t i = 0; i < N; i++)
        zeros += gv_ef_data(ef)[i] == 0.0f && g_ef[i] != 0.0f;
    GV_CHECK_EQ(zeros, lcand.count);
    GV_CHECK(lcand.count < lmin.count);
    for (uint32_t i = 0; i < lmin.count; i++) /* floor entries not in the candidate remain */
        if (gv_ef_data(ef)[lmin.idx[i]] != 0.0f)
            GV_CHECK(gv_ef_data(ef)[lmin.idx[i]] == g_ef[lmin.idx[i]]);
    /* dense: r = 0 */
    GV_CHECK_OK(gv_cmp_compress(c, ef, g, &req, &lmin, &lcand, NULL));
    GV_CHECK_OK(gv_cmp_apply(c, ef, GV_SENT_DENSE, NULL));
    ok = 1;
    for (uint32_t i = 0; i < N; i++)
        ok &= gv_ef_data(ef)[i] == 0.0f;
    GV_CHECK(ok);
    /* bad requests */
    struct gv_cmp_req bad = {.cf_min = 5, .cf_cand = 0}; /* below min_cf 10 */
    GV_CHECK_STATUS(gv_cmp_compress(c, ef, g, &bad, &lmin, NULL, NULL), GV_ERR_INVAL);
    bad = (struct gv_cmp_req){.cf_min = 100, .cf_cand = 50}; /* candidate below the floor */
    GV_CHECK_STATUS(gv_cmp_compress(c, ef, g, &bad, &lmin, &lcand, NULL), GV_ERR_INVAL);
    bad = (struct gv_cmp_req){.cf_min = 100, .cf_cand = 1000};
    GV_CHECK_STATUS(gv_cmp_compress(c, ef, g, &bad, &lmin, NULL, NULL), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_cmp_compress(c, ef, NULL, &req, &lmin, &lcand, NULL), GV_ERR_INVAL);
    struct gv_sparse small;
    tu_sparse_alloc(&small, 10);
    GV_CHECK_STATUS(gv_cmp_compress(c, ef, g, &req, &small, &lcand, NULL), GV_ERR_INVAL);
    /* ... which left the step pending with r = g_ef; NOTHING recovers */
    GV_CHECK_OK(gv_cmp_apply(c, ef, GV_SENT_NOTHING, NULL));
    GV_CHECK_OK(gv_ef_reset(ef));
    GV_CHECK(gv_ef_data(ef)[5] == 0.0f && gv_ef_numel(ef) == N);
    /* a borrowed residual is zeroed and used in place */
    float *mine = malloc(N * 4);
    memset(mine, 0xFF, N * 4);
    struct gv_ef *b;
    GV_CHECK_OK(gv_ef_create(c, N, mine, &b));
    GV_CHECK(gv_ef_data(b) == mine && mine[N - 1] == 0.0f);
    gv_ef_destroy(b);
    free(mine);
    GV_CHECK_STATUS(gv_ef_create(c, N + 1, NULL, &b), GV_ERR_INVAL);

    tu_sparse_free(&small);
    tu_sparse_free(&foreign);
    tu_sparse_free(&lmin);
    tu_sparse_free(&lcand);
    free(g);
    free(g_ef);
    gv_ef_destroy(ef);
    gv_ef_destroy(other);
    gv_cmp_destroy(c);
}

/* Multi-level top-k equals direct top-k at the candidate CF; norms match sums done here. */
static void test_multilevel_topk(void)
{
    static const double pairs[][2] = {{10, 20}, {10, 40}, {10, 160}, {10, 1000},
                                      {1.5, 3}, {10, 10}, {2, 2e6}};
    float *g = malloc(N * 4);
    for (int f16 = 0; f16 <= 1; f16++) {
        struct gv_cmp *c1 = tu_cmp(GV_CMP_TOPK, N, 1.5, 1, f16 ? GV_VAL_F16 : GV_VAL_F32, 3);
        struct gv_cmp *c3 = tu_cmp(GV_CMP_TOPK, N, 1.5, 3, f16 ? GV_VAL_F16 : GV_VAL_F32, 3);
        struct gv_sparse lmin, lcand, direct, l1b, l2b;
        tu_sparse_alloc(&lmin, N);
        tu_sparse_alloc(&lcand, N);
        tu_sparse_alloc(&direct, N);
        tu_sparse_alloc(&l1b, N);
        tu_sparse_alloc(&l2b, N);
        for (size_t p = 0; p < GV_ARRAY_LEN(pairs); p++) {
            tu_fill_normal(g, N, 90 + p);
            if (p == 4) /* ties */
                tu_fill_ties(g, N, 3, 16);
            struct gv_ef *e1, *e3;
            GV_CHECK_OK(gv_ef_create(c1, N, NULL, &e1));
            GV_CHECK_OK(gv_ef_create(c3, N, NULL, &e3));
            struct gv_cmp_req req = {.cf_min = pairs[p][0], .cf_cand = pairs[p][1]};
            struct gv_norms n1, n3;
            GV_CHECK_OK(gv_cmp_compress(c1, e1, g, &req, &lmin, &lcand, &n1));
            GV_CHECK_OK(gv_cmp_compress(c3, e3, g, &req, &l1b, &l2b, &n3));
            /* direct: top-k of g (r was 0, so g_ef = g) at the candidate CF */
            GV_CHECK_OK(gv_cmp_select(c1, g, N, pairs[p][1], 0, 0, &direct));
            GV_CHECK_MSG(lcand.count == direct.count &&
                             tu_u32_eq(lcand.idx, direct.idx, direct.count) &&
                             memcmp(lcand.val, direct.val, direct.count * 4) == 0,
                         "multi-level %g/%g %s differs from direct", pairs[p][0], pairs[p][1],
                         f16 ? "f16" : "f32");
            /* level 2 is a subset of level 1 */
            uint32_t a = 0, hits = 0;
            for (uint32_t i = 0; i < lcand.count; i++) {
                while (a < lmin.count && lmin.idx[a] < lcand.idx[i])
                    a++;
                hits += a < lmin.count && lmin.idx[a] == lcand.idx[i];
            }
            GV_CHECK_EQ(hits, lcand.count);
            /* norms: here, in double, in the same fixed order */
            double ef = gv_sumsq_f32(g, N), mn = 0, cd = 0;
            for (uint32_t i = 0; i < lmin.count; i++)
                mn += (double)lmin.val[i] * lmin.val[i];
            for (uint32_t i = 0; i < lcand.count; i++)
                cd += (double)lcand.val[i] * lcand.val[i];
            GV_CHECK(n1.ef == ef);
            GV_CHECK_NEAR(n1.min, mn, 0, 1e-12);
            GV_CHECK_NEAR(n1.cand, cd, 0, 1e-12);
            GV_CHECK(n1.cand <= n1.min && n1.min <= n1.ef * (1 + 1e-6));
            /* thread count changes nothing, bit for bit */
            GV_CHECK(n1.ef == n3.ef && n1.min == n3.min && n1.cand == n3.cand);
            GV_CHECK(tu_u32_eq(lmin.idx, l1b.idx, lmin.count) &&
                     tu_u32_eq(lcand.idx, l2b.idx, lcand.count));
            GV_CHECK_OK(gv_cmp_apply(c1, e1, GV_SENT_NOTHING, NULL));
            GV_CHECK_OK(gv_cmp_apply(c3, e3, GV_SENT_NOTHING, NULL));
            gv_ef_destroy(e1);
            gv_ef_destroy(e3);
        }
        tu_sparse_free(&lmin);
        tu_sparse_free(&lcand);
        tu_sparse_free(&direct);
        tu_sparse_free(&l1b);
        tu_sparse_free(&l2b);
        gv_cmp_destroy(c1);
        gv_cmp_destroy(c3);
    }
    free(g);
}

/* Norms summed over a model's tensors, single level (cand == min), NaN makes them NaN. */
static void test_model_norms(void)
{
    static const uint32_t sizes[] = {1000, 50000, 3, 150000};
    struct gv_cmp *c = tu_cmp(GV_CMP_TOPK, N, 10, 2, GV_VAL_F32, 3);
    struct gv_norms total = {0}, expect = {0};
    struct gv_sparse l1;
    tu_sparse_alloc(&l1, N);
    float *g = malloc(N * 4);
    for (size_t t = 0; t < GV_ARRAY_LEN(sizes); t++) {
        struct gv_ef *ef;
        GV_CHECK_OK(gv_ef_create(c, sizes[t], NULL, &ef));
        tu_fill_normal(g, sizes[t], 200 + t);
        struct gv_cmp_req req = {.tensor_id = (uint32_t)t, .cf_min = 10};
        struct gv_norms nm;
        GV_CHECK_OK(gv_cmp_compress(c, ef, g, &req, &l1, NULL, &nm));
        GV_CHECK(nm.cand == nm.min);
        gv_norms_add(&total, &nm);
        expect.ef += gv_sumsq_f32(g, sizes[t]);
        GV_CHECK_OK(gv_cmp_apply(c, ef, GV_SENT_SPARSE, &l1));
        gv_ef_destroy(ef);
    }
    GV_CHECK(total.ef == expect.ef);
    GV_CHECK(total.min > 0 && total.min < total.ef);
    struct gv_ef *ef;
    GV_CHECK_OK(gv_ef_create(c, 1000, NULL, &ef));
    g[17] = NAN;
    struct gv_cmp_req req = {.cf_min = 10};
    struct gv_norms nm;
    GV_CHECK_OK(gv_cmp_compress(c, ef, g, &req, &l1, NULL, &nm));
    GV_CHECK(isnan(nm.ef) && isnan(nm.min)); /* the NaN is ranked first, so it is in l1 */
    uint32_t has = 0;
    for (uint32_t i = 0; i < l1.count; i++)
        has += l1.idx[i] == 17;
    GV_CHECK_EQ(has, 1);
    /* the NaN went out whole: its residual is 0, not NaN */
    GV_CHECK_OK(gv_cmp_apply(c, ef, GV_SENT_SPARSE, &l1));
    GV_CHECK(gv_ef_data(ef)[17] == 0.0f);
    gv_ef_destroy(ef);
    free(g);
    tu_sparse_free(&l1);
    gv_cmp_destroy(c);
}

int main(void)
{
    test_sent_plus_residual();
    test_decisions();
    test_multilevel_topk();
    test_model_norms();
    return gv_check_summary();
}
