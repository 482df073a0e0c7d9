/* test_downlink.c: the bounded downlink (server/update.c srv_down_*), on its own: what a server
 * sends is the aggregate plus its residual cut to the k of the CF in force per unit (a piece of
 * a tensor in the shard, or the whole shard; with --downlink-mult M the k of CF / M, at least
 * CF 1), and the residual keeps the rest bit for bit
 * (sent + residual == aggregate + old residual); a dense round sends everything and empties
 * the residual; fp16 mode sends halves and keeps the rounding; Accordion's heavy layers use the
 * candidate CF; dense methods and the union downlink have no such state. */
#include "check.h"
#include "srv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define T 3

/* A job of the given method and options (the synthetic MLP; its layout is not used here). */
static struct gv_cfg *job_of(struct gv_job *job, const char *const *args, int n)
{
    static struct gv_opt_table tab;
    static struct gv_cfg_spec spec;
    const char *argv[32] = {"t"};
    for (int i = 0; i < n; i++)
        argv[1 + i] = args[i];
    memset(job, 0, sizeof(*job));
    tab = (struct gv_opt_table){gv_job_options, gv_job_options_n, job};
    spec = (struct gv_cfg_spec){.program = "t", .tables = &tab, .n_tables = 1};
    struct gv_cfg *cfg = NULL;
    GV_CHECK_OK(gv_cfg_create(&spec, &cfg));
    GV_CHECK_OK(gv_cfg_load(cfg, 1 + n, (char *const *)argv, NULL));
    GV_CHECK_OK(gv_job_resolve(job, 2)); /* the defaults that depend on the method */
    return cfg;
}

static uint32_t bits(float x)
{
    uint32_t b;
    memcpy(&b, &x, 4);
    return b;
}

/* Deterministic values of mixed magnitudes, some exact zeros and ties. */
static void fill(float *x, size_t n, unsigned seed)
{
    srand(seed);
    for (size_t i = 0; i < n; i++) {
        int r = rand() % 100;
        x[i] = r < 5 ? 0.0f : r < 8 ? 0.25f : ((float)rand() / (float)RAND_MAX - 0.5f) * 3.0f;
    }
}

/* The k entries of v[0..n) with the largest magnitude (ties: the lower index), as a mask. */
static void topk_mask(const float *v, uint32_t n, uint32_t k, bool *mask)
{
    memset(mask, 0, n);
    for (uint32_t c = 0; c < k; c++) {
        int best = -1;
        for (uint32_t i = 0; i < n; i++)
            if (!mask[i] && (best < 0 || fabsf(v[i]) > fabsf(v[best])))
                best = (int)i;
        mask[best] = true;
    }
}

/* Several rounds over a 3-tensor model and 2 shards: every unit's sent + residual equals its
 * aggregate + old residual bit for bit, and sent is exactly the top k of that sum, k that of
 * the CF in force divided by --downlink-mult (mult). */
static void test_rounds(const char *const *args, int nargs, bool model_scope, double mult)
{
    struct gv_job job;
    struct gv_cfg *cfg = job_of(&job, args, nargs);
    size_t numel[T] = {700, 130, 45};
    struct gv_shard_map map;
    GV_CHECK_OK(gv_shard_map_init(&map, numel, T, 2));
    for (uint32_t s = 0; s < 2; s++) {
        struct srv_down *d = NULL;
        GV_CHECK_OK(srv_down_create(&job, &map, s, &d));
        GV_CHECK(d != NULL);
        if (d == NULL)
            continue;
        uint64_t n = gv_shard_numel(&map, s);
        GV_CHECK_EQ(d->n, n);
        GV_CHECK_EQ(d->n_units, model_scope ? 1 : map.piece_first[s + 1] - map.piece_first[s]);
        float *acc = malloc(n * 4), *want = malloc(n * 4), *old = malloc(n * 4);
        bool *mask = malloc(n);
        struct gv_ps_decision dec = {
            .level = GV_ADAPT_LEVEL_FLOOR, .theta_min = 10, .cf_candidate = 40, .cf_send = 10};
        int bad_sum = 0, bad_sel = 0, rounds = 0;
        for (int round = 0; round < 6; round++) {
            fill(acc, n, 100u * s + (unsigned)round);
            memcpy(old, d->resid, n * 4);
            for (uint64_t i = 0; i < n; i++)
                want[i] = acc[i] + old[i]; /* what must be sent or kept, in float */
            dec.cf_send = round % 2 ? 40 : 10;
            dec.level = round % 2 ? GV_ADAPT_LEVEL_CANDIDATE : GV_ADAPT_LEVEL_FLOOR;
            GV_CHECK_OK(srv_down_apply(d, acc, &dec, NULL, false, (uint64_t)round));
            for (uint64_t i = 0; i < n; i++) {
                /* exactly one of them holds it: sent (residual 0) or kept (nothing sent) */
                bool sent = bits(acc[i]) != 0 || (bits(d->resid[i]) == 0 && bits(want[i]) == 0);
                bad_sum += sent ? bits(acc[i]) != bits(want[i]) || bits(d->resid[i]) != 0
                                : bits(d->resid[i]) != bits(want[i]);
            }
            for (uint32_t u = 0; u < d->n_units; u++) {
                uint64_t off = d->unit_off[u];
                uint32_t len = (uint32_t)(d->unit_off[u + 1] - off);
                double cf = GV_MAX(1.0, dec.cf_send / mult);
                uint32_t k = (uint32_t)GV_MIN(len, GV_MAX(1.0, floor((double)len / cf)));
                topk_mask(want + off, len, k, mask);
                for (uint32_t i = 0; i < len; i++)
                    bad_sel += mask[i] ? bits(acc[off + i]) != bits(want[off + i])
                                       : bits(acc[off + i]) != 0;
            }
            rounds++;
        }
        GV_CHECK_EQ(rounds, 6);
        GV_CHECK_MSG(bad_sum == 0, "shard %u: %d entries break sent + residual == sum", s, bad_sum);
        GV_CHECK_MSG(bad_sel == 0, "shard %u: %d entries are not the top k of their unit", s,
                     bad_sel);
        /* a dense round sends the aggregate and the whole residual, and empties it */
        fill(acc, n, 7);
        for (uint64_t i = 0; i < n; i++)
            want[i] = acc[i] + d->resid[i];
        dec.level = GV_ADAPT_LEVEL_DENSE;
        dec.cf_send = 1;
        GV_CHECK_OK(srv_down_apply(d, acc, &dec, NULL, false, 6));
        int bad_dense = 0;
        for (uint64_t i = 0; i < n; i++)
            bad_dense += bits(acc[i]) != bits(want[i]) || bits(d->resid[i]) != 0;
        GV_CHECK_EQ(bad_dense, 0);
        free(acc), free(want), free(old), free(mask);
        srv_down_destroy(d);
    }
    gv_shard_map_cleanup(&map);
    gv_cfg_destroy(cfg);
}

/* fp16 mode: what is sent is exactly a half, the residual keeps the rounding (sent + residual
 * equals the sum for every value in the halves' range), saturating at +-65504. */
static void test_fp16(void)
{
    static const char *const args[] = {"--method", "static", "--cf", "4", "--fp16"};
    struct gv_job job;
    struct gv_cfg *cfg = job_of(&job, args, 5);
    size_t numel[1] = {400};
    struct gv_shard_map map;
    GV_CHECK_OK(gv_shard_map_init(&map, numel, 1, 1));
    struct srv_down *d = NULL;
    GV_CHECK_OK(srv_down_create(&job, &map, 0, &d));
    float acc[400], want[400];
    fill(acc, 400, 3);
    acc[5] = 1e6f; /* beyond the halves: 65504 goes, the rest stays */
    memcpy(want, acc, sizeof(acc));
    struct gv_ps_decision dec = {.level = GV_ADAPT_LEVEL_FLOOR, .theta_min = 4, .cf_send = 4};
    GV_CHECK_OK(srv_down_apply(d, acc, &dec, NULL, false, 0));
    int not_half = 0, lost = 0, sent = 0;
    for (int i = 0; i < 400; i++) {
        sent += acc[i] != 0;
        not_half += gv_f16_round_sat(acc[i]) != acc[i];
        lost += acc[i] + d->resid[i] != want[i];
    }
    GV_CHECK_EQ(sent, 100);
    GV_CHECK_EQ(not_half, 0);
    GV_CHECK_EQ(lost, 0);
    GV_CHECK(acc[5] == 65504.0f && d->resid[5] == 1e6f - 65504.0f);
    srv_down_destroy(d);
    gv_shard_map_cleanup(&map);
    gv_cfg_destroy(cfg);
}

/* Accordion: a heavy layer is cut at the candidate CF, a light one at the floor. */
static void test_accordion(void)
{
    static const char *const args[] = {"--method", "accordion",   "--theta-min",
                                       "4",        "--theta-max", "20"};
    struct gv_job job;
    struct gv_cfg *cfg = job_of(&job, args, 6);
    size_t numel[2] = {200, 200};
    struct gv_shard_map map;
    GV_CHECK_OK(gv_shard_map_init(&map, numel, 2, 1));
    struct srv_down *d = NULL;
    GV_CHECK_OK(srv_down_create(&job, &map, 0, &d));
    float acc[400];
    fill(acc, 400, 11);
    for (int i = 0; i < 400; i++)
        acc[i] += acc[i] == 0 ? 1.0f : 0.0f; /* no zeros: the counts are exact */
    uint8_t heavy[2] = {1, 0};
    struct gv_ps_decision dec = {
        .level = GV_ADAPT_LEVEL_FLOOR, .theta_min = 4, .cf_candidate = 20, .cf_send = 4};
    GV_CHECK_OK(srv_down_apply(d, acc, &dec, heavy, true, 0));
    int c0 = 0, c1 = 0;
    for (int i = 0; i < 200; i++) {
        c0 += acc[i] != 0;
        c1 += acc[200 + i] != 0;
    }
    GV_CHECK_EQ(c0, 10); /* heavy: 200 / 20 */
    GV_CHECK_EQ(c1, 50); /* light: 200 / 4 */
    srv_down_destroy(d);
    gv_shard_map_cleanup(&map);
    gv_cfg_destroy(cfg);
}

/* No downlink state where nothing is cut. */
static void test_none(void)
{
    static const char *const dense[] = {"--method", "dense"};
    static const char *const fp16[] = {"--method", "dense-fp16"};
    static const char *const uni[] = {"--method", "static", "--cf", "10", "--downlink", "union"};
    const char *const *cases[] = {dense, fp16, uni};
    int lens[] = {2, 2, 6};
    size_t numel[1] = {100};
    struct gv_shard_map map;
    GV_CHECK_OK(gv_shard_map_init(&map, numel, 1, 1));
    for (int c = 0; c < 3; c++) {
        struct gv_job job;
        struct gv_cfg *cfg = job_of(&job, cases[c], lens[c]);
        struct srv_down *d = (struct srv_down *)&job; /* must be overwritten with NULL */
        GV_CHECK_OK(srv_down_create(&job, &map, 0, &d));
        GV_CHECK(d == NULL);
        gv_cfg_destroy(cfg);
    }
    gv_shard_map_cleanup(&map);
}

int main(void)
{
    /* f32 values (the exact sums above); fp16, the default, in test_fp16 */
    static const char *const tensor[] = {"--method",     "static", "--cf",     "10",
                                         "--topk-scope", "tensor", "--no-fp16"};
    static const char *const model[] = {"--method",     "static", "--cf",     "10",
                                        "--topk-scope", "model",  "--no-fp16"};
    static const char *const dflt[] = {"--method", "static", "--cf", "10",
                                       "--no-fp16"}; /* auto: model */
    /* --downlink-mult: 3x the entries at CF 10 and 40, and at 50 every entry (CF 1) at CF 40 */
    static const char *const mult3[] = {"--method",  "static",          "--cf", "10",
                                        "--no-fp16", "--downlink-mult", "3"};
    static const char *const mult50[] = {"--method",  "static",          "--cf", "10",
                                         "--no-fp16", "--downlink-mult", "50"};
    test_rounds(tensor, 7, false, 1);
    test_rounds(model, 7, true, 1);
    test_rounds(dflt, 5, true, 1);
    test_rounds(mult3, 7, true, 3);
    test_rounds(mult50, 7, true, 50);
    test_fp16();
    test_accordion();
    test_none();
    return gv_check_summary();
}
