/* test_compress_cuda.c: the CUDA backend against the CPU oracle, fixed seeds. Top-k, level 2,
 * random-k and DGC must give the same index arrays and values bit for bit (same order, same tie
 * rule, host-drawn positions); Redsync the same threshold rule with counts within 1% (its mean
 * is summed in another order); error feedback residuals within abs + rel tolerance over several
 * steps, norms within relative tolerance; fp16 rounding bit for bit; scatter-add within
 * tolerance. Reports SKIP (exit 77) where there is no GPU or no CUDA build. */
#include "tutil.h"

struct pair {
    struct gv_cmp *cpu, *gpu;
};

static struct pair make_pair(enum gv_cmp_kind kind, uint64_t max_n, double min_cf,
                             enum gv_val_type vt)
{
    struct pair p;
    p.cpu = tu_cmp(kind, max_n, min_cf, 2, vt, 11);
    struct gv_cmp_config cfg = *gv_cmp_get_config(p.cpu);
    cfg.mem = GV_MEM_DEVICE;
    gv_status_t st = gv_cmp_create(&cfg, &p.gpu);
    if (st != GV_OK) {
        fprintf(stderr, "cuda create: %s\n", gv_status_str(st));
        exit(1);
    }
    return p;
}

static void free_pair(struct pair *p)
{
    gv_cmp_destroy(p->cpu);
    gv_cmp_destroy(p->gpu);
}

/* Device arrays mirroring a host sparse of capacity cap. */
struct dsparse {
    struct gv_sparse d, h;
};

static void ds_alloc(struct gv_cmp *gpu, struct dsparse *s, uint32_t cap)
{
    void *p;
    memset(&s->d, 0, sizeof(s->d));
    GV_CHECK_OK(gv_cmp_mem_alloc(gpu, (size_t)cap * 4 + 4, &p));
    s->d.idx = p;
    GV_CHECK_OK(gv_cmp_mem_alloc(gpu, (size_t)cap * 4 + 4, &p));
    s->d.val = p;
    s->d.cap = cap;
    tu_sparse_alloc(&s->h, cap);
}

static void ds_free(struct gv_cmp *gpu, struct dsparse *s)
{
    gv_cmp_mem_free(gpu, s->d.idx);
    gv_cmp_mem_free(gpu, s->d.val);
    tu_sparse_free(&s->h);
}

static float *upload(struct gv_cmp *gpu, const float *x, uint32_t n)
{
    void *p;
    GV_CHECK_OK(gv_cmp_mem_alloc(gpu, (size_t)n * 4 + 4, &p));
    GV_CHECK_OK(gv_cmp_copy_from_host(gpu, p, x, (size_t)n * 4));
    return p;
}

static void same_sparse(const struct gv_sparse *cpu, const struct gv_sparse *gpu_host,
                        const char *what)
{
    GV_CHECK_MSG(cpu->count == gpu_host->count, "%s: count cpu %u gpu %u", what, cpu->count,
                 gpu_host->count);
    uint32_t m = GV_MIN(cpu->count, gpu_host->count);
    GV_CHECK_MSG(cpu->dense || tu_u32_eq(cpu->idx, gpu_host->idx, m), "%s: index sets differ",
                 what);
    GV_CHECK_MSG(memcmp(cpu->val, gpu_host->val, (size_t)m * 4) == 0, "%s: values differ", what);
    double a = cpu->sumsq, b = gpu_host->sumsq;
    int near = isnan(a) ? isnan(b) : isinf(a) ? a == b : fabs(a - b) <= 1e-9 * a + 1e-30;
    GV_CHECK_MSG(near, "%s: sumsq %.17g vs %.17g", what, a, b);
}

static void test_topk(void)
{
    const uint32_t max_n = 1u << 22;
    struct pair p = make_pair(GV_CMP_TOPK, max_n, 1.0, GV_VAL_F32);
    float *x = malloc(max_n * 4);
    struct gv_sparse c, c2;
    tu_sparse_alloc(&c, max_n);
    tu_sparse_alloc(&c2, max_n);
    struct dsparse g, g2;
    ds_alloc(p.gpu, &g, max_n);
    ds_alloc(p.gpu, &g2, max_n);
    static const uint32_t sizes[] = {1, 7, 1000, 4096, 4097, 100003, 1u << 22};
    static const double cfs[] = {1, 2, 10, 100, 1000, 1e9};
    for (size_t s = 0; s < GV_ARRAY_LEN(sizes); s++) {
        for (int data = 0; data < 4; data++) {
            uint32_t n = sizes[s];
            if (data == 0)
                tu_fill_normal(x, n, s);
            else if (data == 1)
                tu_fill_ties(x, n, s, 8);
            else if (data == 2)
                for (uint32_t i = 0; i < n; i++)
                    x[i] = 1.0f;
            else {
                tu_fill_normal(x, n, s + 100);
                for (uint32_t i = 0; i < n; i += 97)
                    x[i] = (i / 97) % 3 == 0 ? NAN : (i / 97) % 3 == 1 ? INFINITY : -INFINITY;
            }
            float *dx = upload(p.gpu, x, n);
            for (size_t f = 0; f < GV_ARRAY_LEN(cfs); f++) {
                char what[80];
                snprintf(what, sizeof(what), "topk n %u data %d cf %g", n, data, cfs[f]);
                GV_CHECK_OK(gv_cmp_select(p.cpu, x, n, cfs[f], 0, 0, &c));
                GV_CHECK_OK(gv_cmp_select(p.gpu, dx, n, cfs[f], 0, 0, &g.d));
                GV_CHECK_OK(gv_cmp_sparse_to_host(p.gpu, &g.d, &g.h));
                same_sparse(&c, &g.h, what);
                /* level 2 on the device (the map path) */
                double cf2 = cfs[f] * 10;
                GV_CHECK_OK(gv_cmp_select_sub(p.cpu, &c, cf2, 0, 0, &c2));
                GV_CHECK_OK(gv_cmp_select_sub(p.gpu, &g.d, cf2, 0, 0, &g2.d));
                GV_CHECK_OK(gv_cmp_sparse_to_host(p.gpu, &g2.d, &g2.h));
                strcat(what, " level 2");
                same_sparse(&c2, &g2.h, what);
            }
            gv_cmp_mem_free(p.gpu, dx);
        }
    }
    ds_free(p.gpu, &g);
    ds_free(p.gpu, &g2);
    tu_sparse_free(&c);
    tu_sparse_free(&c2);
    free(x);
    free_pair(&p);
}

static void test_others(void)
{
    const uint32_t n = 1000003;
    float *x = malloc(n * 4);
    tu_fill_normal(x, n, 5);
    x[10] = NAN;
    x[20] = INFINITY;
    static const enum gv_cmp_kind kinds[] = {GV_CMP_RANDOMK, GV_CMP_DGC, GV_CMP_REDSYNC,
                                             GV_CMP_DENSE};
    for (size_t q = 0; q < GV_ARRAY_LEN(kinds); q++) {
        for (int f16 = 0; f16 <= 1; f16++) {
            struct pair p = make_pair(kinds[q], n, 10, f16 ? GV_VAL_F16 : GV_VAL_F32);
            float *dx = upload(p.gpu, x, n);
            struct gv_sparse c;
            tu_sparse_alloc(&c, n);
            struct dsparse g;
            ds_alloc(p.gpu, &g, n);
            static const double cfs[] = {10, 100, 1000};
            for (size_t f = 0; f < 3; f++) {
                char what[80];
                snprintf(what, sizeof(what), "%s %s cf %g", gv_cmp_kind_str(kinds[q]),
                         f16 ? "f16" : "f32", cfs[f]);
                GV_CHECK_OK(gv_cmp_select(p.cpu, x, n, cfs[f], 4, 9, &c));
                GV_CHECK_OK(gv_cmp_select(p.gpu, dx, n, cfs[f], 4, 9, &g.d));
                GV_CHECK_OK(gv_cmp_sparse_to_host(p.gpu, &g.d, &g.h));
                if (kinds[q] != GV_CMP_REDSYNC) {
                    same_sparse(&c, &g.h, what);
                } else {
                    double d = fabs((double)c.count - (double)g.h.count);
                    GV_CHECK_MSG(d <= 0.01 * c.count + 1, "%s: count cpu %u gpu %u", what, c.count,
                                 g.h.count);
                    GV_CHECK(tu_strictly_ascending(g.h.idx, g.h.count));
                }
            }
            ds_free(p.gpu, &g);
            tu_sparse_free(&c);
            gv_cmp_mem_free(p.gpu, dx);
            free_pair(&p);
        }
    }
    free(x);
}

static void test_ef(void)
{
    const uint32_t n = 2000003;
    struct pair p = make_pair(GV_CMP_TOPK, n, 10, GV_VAL_F32);
    float *g = malloc(n * 4), *rc = malloc(n * 4), *rg = malloc(n * 4);
    struct gv_ef *ec, *eg;
    GV_CHECK_OK(gv_ef_create(p.cpu, n, NULL, &ec));
    GV_CHECK_OK(gv_ef_create(p.gpu, n, NULL, &eg));
    struct gv_sparse c1, c2;
    tu_sparse_alloc(&c1, n / 10);
    tu_sparse_alloc(&c2, n / 10);
    struct dsparse g1, g2;
    ds_alloc(p.gpu, &g1, n / 10);
    ds_alloc(p.gpu, &g2, n / 10);
    void *dg;
    GV_CHECK_OK(gv_cmp_mem_alloc(p.gpu, (size_t)n * 4, &dg));
    for (int it = 0; it < 6; it++) {
        tu_fill_normal(g, n, 300 + (uint64_t)it);
        GV_CHECK_OK(gv_cmp_copy_from_host(p.gpu, dg, g, (size_t)n * 4));
        struct gv_cmp_req req = {.iter = (uint64_t)it, .cf_min = 10, .cf_cand = 160};
        struct gv_norms nc, ng;
        GV_CHECK_OK(gv_cmp_compress(p.cpu, ec, g, &req, &c1, &c2, &nc));
        GV_CHECK_OK(gv_cmp_compress(p.gpu, eg, dg, &req, &g1.d, &g2.d, &ng));
        GV_CHECK_NEAR(ng.ef, nc.ef, 0, 1e-9);
        GV_CHECK_NEAR(ng.min, nc.min, 0, 1e-9);
        GV_CHECK_NEAR(ng.cand, nc.cand, 0, 1e-9);
        GV_CHECK_OK(gv_cmp_sparse_to_host(p.gpu, &g2.d, &g2.h));
        same_sparse(&c2, &g2.h, "ef candidate");
        enum gv_sent what = it % 3 == 2 ? GV_SENT_DENSE : GV_SENT_SPARSE;
        GV_CHECK_OK(gv_cmp_apply(p.cpu, ec, what, it % 2 ? &c1 : &c2));
        GV_CHECK_OK(gv_cmp_apply(p.gpu, eg, what, it % 2 ? &g1.d : &g2.d));
        memcpy(rc, gv_ef_data(ec), (size_t)n * 4);
        GV_CHECK_OK(gv_cmp_copy_to_host(p.gpu, rg, gv_ef_data(eg), (size_t)n * 4));
        int bad = 0;
        for (uint32_t i = 0; i < n; i++)
            bad += !(fabsf(rc[i] - rg[i]) <= 1e-6f + 1e-5f * fabsf(rc[i]));
        GV_CHECK_MSG(bad == 0, "ef step %d: %d residual entries differ", it, bad);
    }
    gv_cmp_mem_free(p.gpu, dg);
    ds_free(p.gpu, &g1);
    ds_free(p.gpu, &g2);
    tu_sparse_free(&c1);
    tu_sparse_free(&c2);
    gv_ef_destroy(ec);
    gv_ef_destroy(eg);
    free(g);
    free(rc);
    free(rg);
    free_pair(&p);
}

static void test_scatter(void)
{
    const uint32_t n = 100000, cnt = 300000;
    struct pair p = make_pair(GV_CMP_TOPK, n, 1, GV_VAL_F32);
    uint32_t *idx = malloc(cnt * 4);
    float *val = malloc(cnt * 4), *dc = calloc(n, 4), *dgh = malloc(n * 4);
    struct gv_rng rng;
    gv_rng_seed(&rng, 5);
    for (uint32_t i = 0; i < cnt; i++) {
        idx[i] = gv_rng_below(&rng, n);
        val[i] = (float)(gv_rng_below(&rng, 1000)) * 0.001f;
    }
    void *di, *dv, *dd;
    GV_CHECK_OK(gv_cmp_mem_alloc(p.gpu, cnt * 4, &di));
    GV_CHECK_OK(gv_cmp_mem_alloc(p.gpu, cnt * 4, &dv));
    GV_CHECK_OK(gv_cmp_mem_alloc(p.gpu, n * 4, &dd));
    GV_CHECK_OK(gv_cmp_copy_from_host(p.gpu, di, idx, cnt * 4));
    GV_CHECK_OK(gv_cmp_copy_from_host(p.gpu, dv, val, cnt * 4));
    GV_CHECK_OK(gv_cmp_scatter_add(p.cpu, dc, n, idx, val, cnt));
    GV_CHECK_OK(gv_cmp_scatter_add(p.gpu, dd, n, di, dv, cnt));
    GV_CHECK_OK(gv_cmp_copy_to_host(p.gpu, dgh, dd, n * 4));
    int bad = 0;
    for (uint32_t i = 0; i < n; i++)
        bad += !(fabsf(dc[i] - dgh[i]) <= 1e-5f + 1e-5f * fabsf(dc[i]));
    GV_CHECK_EQ(bad, 0);
    idx[7] = n; /* out of range: refused, nothing added */
    GV_CHECK_OK(gv_cmp_copy_from_host(p.gpu, di, idx, cnt * 4));
    GV_CHECK_STATUS(gv_cmp_scatter_add(p.gpu, dd, n, di, dv, cnt), GV_ERR_INVAL);
    float *after = malloc(n * 4);
    GV_CHECK_OK(gv_cmp_copy_to_host(p.gpu, after, dd, n * 4));
    GV_CHECK(memcmp(after, dgh, n * 4) == 0);
    free(after);
    gv_cmp_mem_free(p.gpu, di);
    gv_cmp_mem_free(p.gpu, dv);
    gv_cmp_mem_free(p.gpu, dd);
    free(idx);
    free(val);
    free(dc);
    free(dgh);
    free_pair(&p);
}

/* fp16 rounding on the device: every half-adjacent float pattern class, bit for bit. */
static void test_f16(void)
{
    const uint32_t n = 1u << 20;
    struct pair p = make_pair(GV_CMP_DENSE, n, 1, GV_VAL_F16);
    float *x = malloc(n * 4);
    struct gv_rng rng;
    gv_rng_seed(&rng, 8);
    for (uint32_t i = 0; i < n; i++)
        x[i] = gv_bits_f32((uint32_t)gv_rng_next(&rng)); /* any bits: NaN, Inf, subnormals */
    float *dx = upload(p.gpu, x, n);
    struct gv_sparse c;
    tu_sparse_alloc(&c, n);
    struct dsparse g;
    ds_alloc(p.gpu, &g, n);
    GV_CHECK_OK(gv_cmp_select(p.cpu, x, n, 1, 0, 0, &c));
    GV_CHECK_OK(gv_cmp_select(p.gpu, dx, n, 1, 0, 0, &g.d));
    GV_CHECK_OK(gv_cmp_sparse_to_host(p.gpu, &g.d, &g.h));
    GV_CHECK(g.h.dense && g.h.count == n);
    GV_CHECK(memcmp(c.val, g.h.val, (size_t)n * 4) == 0);
    ds_free(p.gpu, &g);
    tu_sparse_free(&c);
    gv_cmp_mem_free(p.gpu, dx);
    free(x);
    free_pair(&p);
}

int main(void)
{
    int ndev = 0;
    gv_status_t st = gv_cmp_cuda_probe(&ndev);
    if (st != GV_OK)
        GV_SKIP("no CUDA device (%s)", gv_status_str(st));
    printf("cuda devices: %d\n", ndev);
    test_topk();
    test_others();
    test_ef();
    test_scatter();
    test_f16();
    return gv_check_summary();
}
