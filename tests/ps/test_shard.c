/* test_shard.c: the sharding map (balanced ranges, tensor pieces that tile every shard and
 * every tensor exactly once, a big tensor split across servers, refusals), the job (layout
 * without parameter memory, fingerprint sensitivity, resolution errors) and the cluster
 * description (ranks from flags, MPI and Slurm variables, rendezvous files). */
#include "check.h"
#include "gv_ps.h"
#include "ps_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Every element of every tensor lies in exactly one piece, pieces tile each shard in order. */
static void check_map(const struct gv_shard_map *m, const size_t *numel, uint32_t nt, uint32_t S)
{
    uint64_t P = 0;
    for (uint32_t t = 0; t < nt; t++)
        P += numel[t];
    GV_CHECK_EQ(m->total, P);
    GV_CHECK_EQ(m->lo[0], 0);
    GV_CHECK_EQ(m->lo[S], P);
    uint64_t maxn = 0, minn = UINT64_MAX;
    for (uint32_t s = 0; s < S; s++) {
        uint64_t n = gv_shard_numel(m, s);
        maxn = GV_MAX(maxn, n);
        minn = GV_MIN(minn, n);
        GV_CHECK_EQ(m->lo[s], (uint64_t)((unsigned __int128)P * s / S));
        uint64_t at = 0;
        for (uint32_t p = m->piece_first[s]; p < m->piece_first[s + 1]; p++) {
            const struct gv_shard_piece *pc = &m->pieces[p];
            GV_CHECK_EQ(pc->shard_lo, at);
            GV_CHECK(pc->len > 0);
            GV_CHECK(pc->tensor_lo + pc->len <= numel[pc->tensor]);
            GV_CHECK_EQ(m->tensor_off[pc->tensor] + pc->tensor_lo, m->lo[s] + pc->shard_lo);
            at += pc->len;
        }
        GV_CHECK_EQ(at, gv_shard_numel(m, s));
    }
    GV_CHECK(maxn - minn <= 1); /* balanced whatever the tensor sizes */
    for (uint32_t t = 0; t < nt; t++) {
        uint64_t covered = 0;
        for (uint32_t p = 0; p < m->num_pieces; p++)
            if (m->pieces[p].tensor == t)
                covered += m->pieces[p].len;
        GV_CHECK_EQ(covered, numel[t]);
    }
    for (uint64_t i = 0; i < P; i += 1 + P / 97) {
        uint32_t s = gv_shard_of(m, i);
        GV_CHECK(m->lo[s] <= i && i < m->lo[s + 1]);
    }
}

static void collect(const char *line, void *arg)
{
    char *buf = arg;
    strncat(buf, line, 8000 - strlen(buf) - 2);
    strcat(buf, "\n");
}

static void test_map(void)
{
    /* the MLP 784-256-128-10: one big tensor */
    size_t mlp[] = {200704, 256, 32768, 128, 1280, 10};
    for (uint32_t S = 1; S <= 7; S++) {
        struct gv_shard_map m;
        GV_CHECK_OK(gv_shard_map_init(&m, mlp, 6, S));
        check_map(&m, mlp, 6, S);
        gv_shard_map_cleanup(&m);
    }
    /* the big tensor is split: with 2 servers fc1.w lies on both */
    struct gv_shard_map m;
    GV_CHECK_OK(gv_shard_map_init(&m, mlp, 6, 2));
    GV_CHECK_EQ(m.pieces[m.piece_first[0]].tensor, 0);
    GV_CHECK_EQ(m.pieces[m.piece_first[1]].tensor, 0);
    GV_CHECK_EQ(m.pieces[m.piece_first[1]].tensor_lo, 117573);
    char buf[8000] = "";
    const char *names[] = {"fc1.w", "fc1.b", "fc2.w", "fc2.b", "fc3.w", "fc3.b"};
    gv_shard_map_describe(&m, names, collect, buf);
    GV_CHECK_MSG(strstr(buf, "server 1: [117573, 235146) 117573 params: fc1.w[117573:200704) "
                             "fc1.b fc2.w fc2.b fc3.w fc3.b") != NULL,
                 "%s", buf);
    GV_CHECK_MSG(strstr(buf, "server 0: [0, 117573) 117573 params: fc1.w[0:117573)") != NULL, "%s",
                 buf);
    gv_shard_map_cleanup(&m);
    /* many small tensors, more shards than tensors, random sizes */
    srand(7);
    for (int round = 0; round < 50; round++) {
        uint32_t nt = 1 + (uint32_t)(rand() % 20), S = 1 + (uint32_t)(rand() % 9);
        size_t numel[20];
        uint64_t P = 0;
        for (uint32_t t = 0; t < nt; t++)
            P += numel[t] = 1 + (size_t)(rand() % (round % 3 == 0 ? 5 : 5000));
        if (P < S)
            S = (uint32_t)P;
        GV_CHECK_OK(gv_shard_map_init(&m, numel, nt, S));
        check_map(&m, numel, nt, S);
        gv_shard_map_cleanup(&m);
    }
    /* refusals */
    size_t three[] = {1, 1, 1};
    GV_CHECK_STATUS(gv_shard_map_init(&m, three, 3, 4), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_shard_map_init(&m, three, 3, 0), GV_ERR_INVAL);
    size_t zero[] = {3, 0};
    GV_CHECK_STATUS(gv_shard_map_init(&m, zero, 2, 1), GV_ERR_INVAL);
    size_t huge[] = {(size_t)1 << 33};
    GV_CHECK_STATUS(gv_shard_map_init(&m, huge, 1, 2), GV_ERR_INVAL);
    GV_CHECK_OK(gv_shard_map_init(&m, huge, 1, 5));
    gv_shard_map_cleanup(&m);
}

/* A job with the option defaults, as gv_cfg would fill them. */
static struct gv_cfg *job_defaults(struct gv_job *job, int argc, char **argv)
{
    static struct gv_opt_table tab;
    static struct gv_cfg_spec spec;
    tab = (struct gv_opt_table){gv_job_options, gv_job_options_n, job};
    spec = (struct gv_cfg_spec){.program = "test", .tables = &tab, .n_tables = 1};
    struct gv_cfg *cfg = NULL;
    memset(job, 0, sizeof(*job));
    if (gv_cfg_create(&spec, &cfg) != GV_OK || gv_cfg_load(cfg, argc, argv, NULL) != GV_OK) {
        gv_cfg_destroy(cfg);
        return NULL;
    }
    return cfg;
}

static uint64_t fingerprint_of(int argc, char **argv, uint32_t W)
{
    struct gv_job job;
    struct gv_cfg *cfg = job_defaults(&job, argc, argv);
    if (cfg == NULL)
        return 0;
    char names[32][24];
    size_t numel[32];
    uint32_t n = 0;
    uint64_t fp = 0;
    if (gv_job_resolve(&job, W) == GV_OK && gv_job_layout(&job, names, numel, 32, &n) == GV_OK)
        fp = gv_job_fingerprint(&job, (const char(*)[24])names, numel, n, NULL, 0);
    gv_cfg_destroy(cfg);
    return fp;
}

static void test_job(void)
{
    struct gv_job job;
    char *a0[] = {"t", "--dataset", "synthetic"};
    struct gv_cfg *cfg = job_defaults(&job, 3, a0);
    GV_CHECK(cfg != NULL);
    GV_CHECK_OK(gv_job_resolve(&job, 4));
    GV_CHECK_EQ(job.model_cfg.in_w, 64);
    GV_CHECK_EQ(job.n_train, 8192);
    GV_CHECK_EQ(job.steps_per_epoch, 8192 / 4 / 64);
    GV_CHECK_EQ(job.total_steps, 32);
    /* no --method: AUTO, the controller without per-job settings (docs/adapt.md section 4.4) */
    GV_CHECK_EQ(job.method, GV_JOB_AUTO);
    char names[32][24];
    size_t numel[32];
    uint32_t n = 0;
    uint64_t rss0 = gv_ps_rss();
    GV_CHECK_OK(gv_job_layout(&job, names, numel, 32, &n));
    GV_CHECK_EQ(n, 6);
    GV_CHECK(strcmp(names[0], "fc1.w") == 0);
    GV_CHECK_EQ(numel[0], 64 * 256);
    (void)rss0;
    gv_cfg_destroy(cfg);

    /* the fingerprint changes with everything that must match, the number of iterations
     * included (issue 18: a worker with other --steps was let in), not with the batch as such */
    char *base[] = {"t", "--dataset", "synthetic", "--steps", "100"};
    uint64_t f0 = fingerprint_of(5, base, 2);
    GV_CHECK(f0 != 0);
    GV_CHECK_EQ(fingerprint_of(5, base, 2), f0);
    char *v1[] = {"t", "--dataset", "synthetic", "--steps", "100", "--widths", "64"};
    char *v2[] = {"t", "--dataset", "synthetic", "--steps", "100", "--lr", "0.1"};
    char *v3[] = {"t", "--dataset", "synthetic", "--steps", "100", "--seed", "2"};
    char *v4[] = {"t", "--dataset", "synthetic", "--steps", "100", "--method", "static"};
    char *v5[] = {"t", "--dataset", "synthetic", "--steps", "100", "--compressor", "randomk"};
    char *v6[] = {"t", "--dataset", "synthetic", "--steps", "100", "--momentum", "0.5"};
    char *v7[] = {"t", "--dataset", "synthetic", "--steps", "100", "--lr-schedule", "cosine"};
    char *v8[] = {"t", "--dataset", "synthetic", "--steps", "3000"};
    GV_CHECK(fingerprint_of(7, v1, 2) != f0);
    GV_CHECK(fingerprint_of(7, v2, 2) != f0);
    GV_CHECK(fingerprint_of(7, v3, 2) != f0);
    GV_CHECK(fingerprint_of(7, v4, 2) != f0);
    GV_CHECK(fingerprint_of(7, v5, 2) != f0);
    GV_CHECK(fingerprint_of(7, v6, 2) != f0);
    GV_CHECK(fingerprint_of(7, v7, 2) != f0);
    GV_CHECK(fingerprint_of(5, v8, 2) != f0);
    /* by epochs, the number of iterations follows the worker count and the batch */
    char *e0[] = {"t", "--dataset", "synthetic", "--lr-schedule", "cosine"};
    GV_CHECK(fingerprint_of(5, e0, 3) != fingerprint_of(5, e0, 2));
    char *eb[] = {"t", "--dataset", "synthetic", "--batch", "32"};
    char *ed[] = {"t", "--dataset", "synthetic"};
    GV_CHECK(fingerprint_of(5, eb, 2) != fingerprint_of(3, ed, 2));
    /* with --steps, the batch is each worker's own */
    char *b1[] = {"t", "--dataset", "synthetic", "--steps", "100", "--batch", "32"};
    GV_CHECK_EQ(fingerprint_of(7, b1, 2), f0);
    /* AUTO's quality guard: the coordinator's setting, so every process must agree; its default
     * leaves the fingerprint as it was before the option existed (checkpoints stay valid) */
    char *q0[] = {"t", "--dataset", "synthetic", "--steps", "100", "--method", "auto"};
    char *q1[] = {"t",        "--dataset", "synthetic",      "--steps", "100",
                  "--method", "auto",      "--quality-from", "0.2"};
    char *q2[] = {"t",        "--dataset", "synthetic",      "--steps", "100",
                  "--method", "auto",      "--quality-from", "1"};
    GV_CHECK_EQ(fingerprint_of(9, q1, 2), fingerprint_of(7, q0, 2));
    GV_CHECK(fingerprint_of(9, q2, 2) != fingerprint_of(7, q0, 2));
    /* --local-momentum: the replicas step otherwise, so every process must agree */
    char *lm1[] = {"t", "--dataset", "synthetic", "--steps", "100", "--local-momentum"};
    GV_CHECK(fingerprint_of(6, lm1, 2) != f0);
    /* --downlink-mult: the servers' cut, every process must agree; 1, the default, leaves the
     * fingerprint as before the option */
    char *dm1[] = {"t", "--dataset", "synthetic", "--steps", "100", "--downlink-mult", "1"};
    char *dm3[] = {"t", "--dataset", "synthetic", "--steps", "100", "--downlink-mult", "3"};
    GV_CHECK_EQ(fingerprint_of(7, dm1, 2), f0);
    GV_CHECK(fingerprint_of(7, dm3, 2) != f0);

    /* the top-k scope: auto is one k over the model, but per tensor for Accordion (which
     * decides per layer); an explicit choice is kept, and model with Accordion refused */
    struct {
        const char *method, *scope;
        int want; /* enum gv_job_scope, or -1: refused */
    } sc[] = {{"static", NULL, GV_SCOPE_MODEL},     {"gravac-exp", NULL, GV_SCOPE_MODEL},
              {"accordion", NULL, GV_SCOPE_TENSOR}, {"static", "tensor", GV_SCOPE_TENSOR},
              {"static", "model", GV_SCOPE_MODEL},  {"accordion", "tensor", GV_SCOPE_TENSOR},
              {"accordion", "model", -1},           {"static", "auto", GV_SCOPE_MODEL}};
    for (size_t i = 0; i < sizeof(sc) / sizeof(sc[0]); i++) {
        char *a[] = {"t",
                     "--dataset",
                     "synthetic",
                     "--method",
                     (char *)sc[i].method,
                     "--topk-scope",
                     (char *)sc[i].scope};
        cfg = job_defaults(&job, sc[i].scope ? 7 : 5, a);
        GV_CHECK(cfg != NULL);
        if (sc[i].want < 0) {
            GV_CHECK_STATUS(gv_job_resolve(&job, 2), GV_ERR_INVAL);
        } else {
            GV_CHECK_OK(gv_job_resolve(&job, 2));
            GV_CHECK_MSG((int)job.topk_scope == sc[i].want, "%s %s: scope %d", sc[i].method,
                         sc[i].scope ? sc[i].scope : "(default)", (int)job.topk_scope);
        }
        gv_cfg_destroy(cfg);
    }
    /* sparse values travel as fp16 unless --no-fp16 (the residuals keep the rounding: 40 % fewer
     * bytes a sparse entry, measured in docs/results.md section 15); the value type of every
     * sparse payload follows */
    char *h1[] = {"t", "--dataset", "synthetic", "--method", "static"};
    char *h2[] = {"t", "--dataset", "synthetic", "--method", "static", "--no-fp16"};
    cfg = job_defaults(&job, 5, h1);
    GV_CHECK(cfg != NULL && job.fp16);
    GV_CHECK_EQ((int)gv_job_sparse_vt(&job), (int)GV_VAL_F16);
    gv_cfg_destroy(cfg);
    cfg = job_defaults(&job, 6, h2);
    GV_CHECK(cfg != NULL && !job.fp16);
    GV_CHECK_EQ((int)gv_job_sparse_vt(&job), (int)GV_VAL_F32);
    GV_CHECK(fingerprint_of(5, h1, 2) != fingerprint_of(6, h2, 2));
    gv_cfg_destroy(cfg);
    /* --model external resolves the scope too (left at auto, the worker's units and its push
     * buffers disagreed and a compressed libgravac job crashed); without --steps the job has
     * no bound of its own (the training script ends it) */
    char *x1[] = {"t", "--model", "external", "--method", "static"};
    cfg = job_defaults(&job, 5, x1);
    GV_CHECK(cfg != NULL);
    GV_CHECK_OK(gv_job_resolve(&job, 2));
    GV_CHECK_EQ((int)job.topk_scope, (int)GV_SCOPE_MODEL);
    GV_CHECK(job.total_steps == INT64_MAX);
    gv_cfg_destroy(cfg);
    char *x2[] = {"t", "--model", "external", "--method", "static", "--steps", "30"};
    cfg = job_defaults(&job, 7, x2);
    GV_CHECK(cfg != NULL);
    GV_CHECK_OK(gv_job_resolve(&job, 2));
    GV_CHECK(job.total_steps == 30);
    gv_cfg_destroy(cfg);

    /* errors */
    char *e1[] = {"t", "--dataset", "synthetic", "--widths", "12,x"};
    cfg = job_defaults(&job, 5, e1);
    GV_CHECK_STATUS(gv_job_resolve(&job, 2), GV_ERR_INVAL);
    gv_cfg_destroy(cfg);
    char *e2[] = {"t", "--dataset", "synthetic", "--synthetic-n", "100"};
    cfg = job_defaults(&job, 5, e2);
    GV_CHECK_STATUS(gv_job_resolve(&job, 2), GV_ERR_INVAL); /* shard < one batch */
    gv_cfg_destroy(cfg);
    char *e3[] = {"t", "--model", "lstm", "--dataset", "fashion-mnist"};
    cfg = job_defaults(&job, 5, e3);
    GV_CHECK_STATUS(gv_job_resolve(&job, 2), GV_ERR_INVAL);
    gv_cfg_destroy(cfg);
    char *e4[] = {"t",
                  "--dataset",
                  "idx",
                  "--train-images",
                  "/nonexistent/a",
                  "--train-labels",
                  "b",
                  "--test-images",
                  "c",
                  "--test-labels",
                  "d"};
    cfg = job_defaults(&job, 11, e4);
    GV_CHECK_STATUS(gv_job_resolve(&job, 2), GV_ERR_IO);
    gv_cfg_destroy(cfg);
    /* fashion-mnist from the Debian package: header only */
    char *f1[] = {"t"};
    cfg = job_defaults(&job, 1, f1);
    if (access(GV_NN_FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) == 0) {
        GV_CHECK_OK(gv_job_resolve(&job, 3));
        GV_CHECK_EQ(job.n_train, 60000);
        GV_CHECK_EQ(job.model_cfg.in_h, 28);
        GV_CHECK_EQ(job.model_cfg.in_w, 28);
        GV_CHECK_EQ(job.steps_per_epoch, 20000 / 64);
    }
    gv_cfg_destroy(cfg);

    /* the layout computed from the configuration equals the model nn/ builds */
    FILE *corpus = fopen("/tmp/gv_test_shard_corpus.txt", "w");
    for (int i = 0; corpus != NULL && i < 300; i++)
        fprintf(corpus, "line %d of a corpus, with some words: %c%c\n", i, 'a' + i % 26,
                'A' + i % 17);
    if (corpus != NULL)
        fclose(corpus);
    const char *variants[] = {
        "--model softmax --dataset synthetic",
        "--model mlp --dataset synthetic --widths 17",
        "--model mlp --dataset synthetic --widths 300,200,100,50",
        "--model cnn --dataset synthetic",
        "--model cnn --dataset synthetic --cnn 3,5,7",
        "--model lstm --dataset text --text /tmp/gv_test_shard_corpus.txt --seq-len 8",
        "--model lstm --dataset text --text /tmp/gv_test_shard_corpus.txt --seq-len 8 "
        "--layers 3 --embed 5 --hidden 9",
    };
    for (size_t v = 0; v < GV_ARRAY_LEN(variants); v++) {
        char vb[300], *va[20] = {"t"};
        int vc = 1;
        snprintf(vb, sizeof(vb), "%s", variants[v]);
        for (char *sv = NULL, *tk = strtok_r(vb, " ", &sv); tk && vc < 19;
             tk = strtok_r(NULL, " ", &sv))
            va[vc++] = tk;
        cfg = job_defaults(&job, vc, va);
        GV_CHECK(cfg != NULL);
        if (cfg == NULL || gv_job_resolve(&job, 1) != GV_OK) {
            GV_CHECK_MSG(0, "%s does not resolve", variants[v]);
            gv_cfg_destroy(cfg);
            continue;
        }
        GV_CHECK_OK(gv_job_layout(&job, names, numel, 32, &n));
        struct gv_nn_backend *be = NULL;
        struct gv_nn_model *m = NULL;
        GV_CHECK_OK(gv_nn_backend_create(GV_NN_CPU, 1, &be));
        GV_CHECK_OK(gv_nn_model_create(be, &job.model_cfg, &m));
        int bad = m == NULL || gv_nn_model_tensor_count(m) != (int)n;
        for (uint32_t t = 0; !bad && t < n; t++) {
            const struct gv_nn_tensor *tt = gv_nn_model_tensor(m, (int)t);
            bad |= strcmp(tt->name, names[t]) != 0 || tt->numel != numel[t];
        }
        GV_CHECK_MSG(!bad, "%s: the computed layout differs from nn/'s model", variants[v]);
        gv_nn_model_destroy(m);
        gv_nn_backend_destroy(be);
        gv_cfg_destroy(cfg);
    }

    unlink("/tmp/gv_test_shard_corpus.txt");

    /* adapt configurations */
    struct gv_adapt_config ac;
    char *g1[] = {"t", "--method", "gravac-geo", "--theta-min", "5", "--window", "20"};
    cfg = job_defaults(&job, 7, g1);
    gv_job_adapt_config(&job, 6, &ac);
    GV_CHECK_EQ(ac.kind, GV_ADAPT_GRAVAC);
    GV_CHECK_EQ(ac.gravac.policy, GV_ADAPT_POLICY_GEOMETRIC);
    GV_CHECK(ac.gravac.theta_min == 5 && ac.gravac.window == 20);
    GV_CHECK(gv_job_min_cf(&job) == 5 && gv_job_min_cand_cf(&job) == 10);
    GV_CHECK_OK(gv_adapt_config_validate(&ac));
    gv_cfg_destroy(cfg);

    /* auto: the defaults of --help are adapt's defaults (the budget added), and bad ladders */
    char *u1[] = {"t", "--dataset", "synthetic", "--method", "auto", "--steps", "300"};
    cfg = job_defaults(&job, 7, u1);
    GV_CHECK_OK(gv_job_resolve(&job, 4));
    gv_job_adapt_config(&job, 6, &ac);
    struct gv_adapt_config def;
    gv_adapt_config_default(&def, GV_ADAPT_AUTO);
    def.autoc.total_iters = 300;
    GV_CHECK_EQ(ac.kind, GV_ADAPT_AUTO);
    GV_CHECK(memcmp(&ac.autoc, &def.autoc, sizeof(ac.autoc)) == 0);
    GV_CHECK(gv_job_min_cf(&job) == 4 && gv_job_min_cand_cf(&job) == 0);
    GV_CHECK_OK(gv_adapt_config_validate(&ac));
    gv_cfg_destroy(cfg);
    /* --model external without --steps: the scripts set the length, the budget is unknown (0:
     * AUTO's quality guard then waits for the first lr drop), not the end condition's bound */
    char *u4[] = {"t", "--model", "external", "--optimizer", "caller", "--method", "auto"};
    cfg = job_defaults(&job, 7, u4);
    GV_CHECK_OK(gv_job_resolve(&job, 4));
    gv_job_adapt_config(&job, 6, &ac);
    GV_CHECK_EQ(ac.kind, GV_ADAPT_AUTO);
    GV_CHECK_EQ(ac.autoc.total_iters, 0);
    GV_CHECK_OK(gv_adapt_config_validate(&ac));
    gv_cfg_destroy(cfg);
    char *u2[] = {"t", "--dataset", "synthetic", "--method", "auto", "--arms", "fp16,20,1000"};
    cfg = job_defaults(&job, 7, u2);
    GV_CHECK_OK(gv_job_resolve(&job, 4));
    gv_job_adapt_config(&job, 6, &ac);
    GV_CHECK(ac.autoc.n_arms == 3 && ac.autoc.cf[0] == 2 && ac.autoc.cf[1] == 20 &&
             ac.autoc.cf[2] == 1000 && gv_job_min_cf(&job) == 20);
    gv_cfg_destroy(cfg);
    /* --quality-from reaches the controller; outside [0, 1] it is refused by the parser */
    char *uq[] = {"t", "--dataset", "synthetic", "--method", "auto", "--quality-from", "0.75"};
    cfg = job_defaults(&job, 7, uq);
    GV_CHECK_OK(gv_job_resolve(&job, 4));
    gv_job_adapt_config(&job, 6, &ac);
    GV_CHECK(ac.autoc.quality_from == 0.75);
    GV_CHECK_OK(gv_adapt_config_validate(&ac));
    gv_cfg_destroy(cfg);
    char *uq2[] = {"t", "--dataset", "synthetic", "--method", "auto", "--quality-from", "1.5"};
    GV_CHECK(job_defaults(&job, 7, uq2) == NULL);
    /* --local-momentum: the replicas step without momentum and weight decay (the workers'
     * velocity holds both), the schedule unchanged; off, they step the job's SGD */
    char *lm[] = {"t",    "--dataset", "synthetic", "--momentum", "0.8", "--weight-decay",
                  "0.01", "--method",  "static",    "--cf",       "10",  "--local-momentum"};
    cfg = job_defaults(&job, 12, lm);
    GV_CHECK_OK(gv_job_resolve(&job, 4));
    GV_CHECK(job.local_momentum && job.optim.momentum == 0.8f && job.optim.weight_decay == 0.01f);
    GV_CHECK(job.step_optim.momentum == 0.0f && job.step_optim.weight_decay == 0.0f &&
             job.step_optim.lr == job.optim.lr && job.step_optim.sched == job.optim.sched);
    gv_cfg_destroy(cfg);
    cfg = job_defaults(&job, 11, lm);
    GV_CHECK_OK(gv_job_resolve(&job, 4));
    GV_CHECK(!job.local_momentum && job.step_optim.momentum == 0.8f &&
             job.step_optim.weight_decay == 0.01f);
    gv_cfg_destroy(cfg);
    /* refused with Nesterov (not kept on the workers) and with the caller's optimizer */
    char *lmn[] = {"t", "--dataset", "synthetic", "--local-momentum", "--nesterov"};
    char *lmc[] = {"t", "--dataset", "synthetic", "--local-momentum", "--optimizer", "caller"};
    cfg = job_defaults(&job, 5, lmn);
    GV_CHECK(cfg != NULL && gv_job_resolve(&job, 4) == GV_ERR_INVAL);
    gv_cfg_destroy(cfg);
    cfg = job_defaults(&job, 6, lmc);
    GV_CHECK(cfg != NULL && gv_job_resolve(&job, 4) == GV_ERR_INVAL);
    gv_cfg_destroy(cfg);
    /* --downlink-mult: the bounded downlink cuts at CF / mult, never below CF 1; refused with
     * the union downlink, and under 1 by the parser */
    char *dm[] = {"t",    "--dataset", "synthetic",       "--method", "static",
                  "--cf", "100",       "--downlink-mult", "4"};
    cfg = job_defaults(&job, 9, dm);
    GV_CHECK_OK(gv_job_resolve(&job, 4));
    GV_CHECK(job.downlink_mult == 4.0 && gv_job_down_cf(&job, 100) == 25.0 &&
             gv_job_down_cf(&job, 2) == 1.0);
    gv_cfg_destroy(cfg);
    cfg = job_defaults(&job, 7, dm);
    GV_CHECK_OK(gv_job_resolve(&job, 4));
    GV_CHECK(job.downlink_mult == 1.0 && gv_job_down_cf(&job, 100) == 100.0);
    gv_cfg_destroy(cfg);
    char *dmu[] = {"t", "--dataset", "synthetic", "--downlink", "union", "--downlink-mult", "2"};
    cfg = job_defaults(&job, 7, dmu);
    GV_CHECK(cfg != NULL && gv_job_resolve(&job, 4) == GV_ERR_INVAL);
    gv_cfg_destroy(cfg);
    char *dm0[] = {"t", "--dataset", "synthetic", "--downlink-mult", "0.5"};
    GV_CHECK(job_defaults(&job, 5, dm0) == NULL);
    static const char *const bad[] = {"10,4", "dense,2", "fp16,dense,10", "1.5", "10,x", ""};
    for (size_t i = 0; i < GV_ARRAY_LEN(bad); i++) {
        char *u3[] = {"t", "--dataset", "synthetic", "--method", "auto", "--arms", (char *)bad[i]};
        cfg = job_defaults(&job, 7, u3);
        GV_CHECK_MSG(cfg != NULL && gv_job_resolve(&job, 4) == GV_ERR_INVAL, "--arms %s", bad[i]);
        gv_cfg_destroy(cfg);
    }
}

static void test_cluster(void)
{
    struct gv_cluster cl;
    memset(&cl, 0, sizeof(cl));
    struct gv_hostport hp[2] = {{"a", 7000}, {"b", 7001}};
    cl.servers = (struct gv_hostlist){2, hp};
    cl.rank = -1;
    cl.rendezvous_dir = "";
    /* MPMD under mpirun: servers first */
    char *env1[] = {"OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=5", NULL};
    GV_CHECK_OK(gv_cluster_resolve(&cl, GV_ROLE_WORKER, env1));
    GV_CHECK_EQ(cl.my_rank, 1);
    GV_CHECK_EQ(cl.n_workers, 3);
    GV_CHECK_EQ(cl.n_servers, 2);
    GV_CHECK_STATUS(gv_cluster_resolve(&cl, GV_ROLE_SERVER, env1), GV_ERR_INVAL);
    char *env2[] = {"SLURM_PROCID=1", "SLURM_NTASKS=6", NULL};
    GV_CHECK_OK(gv_cluster_resolve(&cl, GV_ROLE_SERVER, env2));
    GV_CHECK_EQ(cl.my_rank, 1);
    GV_CHECK_EQ(cl.n_workers, 4);
    GV_CHECK_STATUS(gv_cluster_resolve(&cl, GV_ROLE_WORKER, env2), GV_ERR_INVAL);
    char *env3[] = {"PMI_RANK=2", NULL};
    GV_CHECK_STATUS(gv_cluster_resolve(&cl, GV_ROLE_WORKER, env3), GV_ERR_INVAL); /* no W */
    cl.num_workers = 2;
    GV_CHECK_OK(gv_cluster_resolve(&cl, GV_ROLE_WORKER, env3));
    GV_CHECK_EQ(cl.my_rank, 0);
    /* explicit rank wins; range checked */
    cl.rank = 5;
    GV_CHECK_STATUS(gv_cluster_resolve(&cl, GV_ROLE_WORKER, env3), GV_ERR_INVAL);
    cl.rank = 1;
    GV_CHECK_OK(gv_cluster_resolve(&cl, GV_ROLE_WORKER, NULL));
    struct gv_hostport out;
    GV_CHECK_OK(gv_cluster_server_addr(&cl, 1, 0, &out));
    GV_CHECK(strcmp(out.host, "b") == 0 && out.port == 7001);
    /* no servers at all */
    cl.servers = (struct gv_hostlist){0, NULL};
    GV_CHECK_STATUS(gv_cluster_resolve(&cl, GV_ROLE_WORKER, NULL), GV_ERR_INVAL);

    /* rendezvous: publish and read back; a missing file times out */
    char dir[] = "/tmp/gv_test_rdv_XXXXXX";
    GV_CHECK(mkdtemp(dir) != NULL);
    cl.rendezvous_dir = dir;
    cl.num_servers = 2;
    cl.rank = 0;
    GV_CHECK_OK(gv_cluster_resolve(&cl, GV_ROLE_SERVER, NULL));
    GV_CHECK_OK(gv_cluster_publish(&cl, 0, "127.0.0.1:4242"));
    GV_CHECK_OK(gv_cluster_server_addr(&cl, 0, gv_now_ns() + 1000000000ull, &out));
    GV_CHECK(strcmp(out.host, "127.0.0.1") == 0 && out.port == 4242);
    uint64_t t0 = gv_now_ns();
    GV_CHECK_STATUS(gv_cluster_server_addr(&cl, 1, t0 + 100000000ull, &out), GV_ERR_TIMEOUT);
    GV_CHECK(gv_now_ns() - t0 >= 100000000ull);
    char path[200];
    snprintf(path, sizeof(path), "%s/server-1.addr", dir);
    FILE *f = fopen(path, "w");
    fputs("garbage\n", f);
    fclose(f);
    GV_CHECK_STATUS(gv_cluster_server_addr(&cl, 1, gv_now_ns(), &out), GV_ERR_PROTO);
    unlink(path);
    snprintf(path, sizeof(path), "%s/server-0.addr", dir);
    unlink(path);
    rmdir(dir);
}

static uint64_t ck_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The checksum: its definition pinned (a wire value: both sides must agree, on every host), the
 * CRC32C instruction's kernel equal to the portable one, any block-aligned split summing to the
 * whole, the fused optimizer step giving gv_optim_apply_host's bits, and what it must notice. */
static void test_cksum(void)
{
    enum { N = 5000 };
    float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float));
    uint64_t seed = 0x1234567ull;
    for (int i = 0; i < N; i++)
        a[i] = (float)i * 0.37f - 100.0f;
    /* the definition: changing it changes what servers and workers compare */
    GV_CHECK_EQ(gv_ps_checksum(a, N), 0x7447f35f63feb4d0ull);
    GV_CHECK_EQ(gv_ps_checksum(a, 1), 0x4655caa900d3b088ull);
    GV_CHECK_EQ(gv_ps_checksum(a, 0), 0xc25abb1cbd5e0221ull);
    const char *name;
    gv_ps_cksum_block_fn fast = gv_ps_cksum_pick(&name);
    GV_CHECK(strcmp(name, gv_ps_cksum_kernel()) == 0);
    for (int i = 0; i < N; i++) { /* any bit pattern: NaNs, infinities, subnormals, -0 */
        uint32_t x = (uint32_t)ck_rand(&seed);
        memcpy(&b[i], &x, 4);
    }
    int bad = 0;
    for (size_t m = 0; m <= GV_PS_CKSUM_BLOCK; m += (m < 40 ? 1 : 61))
        for (size_t off = 0; off < 3; off++)
            bad += fast(b + off, m) != gv_ps_cksum_block_generic(b + off, m);
    GV_CHECK_EQ(bad, 0);
    /* block-aligned splits, summed in any order */
    for (size_t n = 1; n < N; n = n * 3 + 7) {
        uint64_t whole = gv_ps_checksum(b, n), sum = 0;
        size_t cut = (n / 2) / GV_PS_CKSUM_BLOCK * GV_PS_CKSUM_BLOCK;
        sum += gv_ps_cksum_range(b, cut, n);
        sum += gv_ps_cksum_range(b, 0, cut);
        GV_CHECK_EQ(gv_ps_cksum_final(sum, n), whole);
    }
    /* what it notices: a sign, one ulp, two elements or two blocks trading places, the length */
    memcpy(a, b, N * sizeof(float));
    uint64_t base = gv_ps_checksum(a, N);
    a[N - 1] = -a[N - 1];
    GV_CHECK(gv_ps_checksum(a, N) != base);
    memcpy(a, b, N * sizeof(float));
    uint32_t u;
    memcpy(&u, &a[7], 4);
    u ^= 1;
    memcpy(&a[7], &u, 4);
    GV_CHECK(gv_ps_checksum(a, N) != base);
    memcpy(a, b, N * sizeof(float));
    a[2] = b[3], a[3] = b[2]; /* two lanes */
    GV_CHECK(gv_ps_checksum(a, N) != base);
    memcpy(a, b, N * sizeof(float));
    a[0] = b[8], a[8] = b[0]; /* the same lane, two words apart */
    GV_CHECK(gv_ps_checksum(a, N) != base);
    memcpy(a, b + GV_PS_CKSUM_BLOCK, GV_PS_CKSUM_BLOCK * sizeof(float)); /* blocks swapped */
    memcpy(a + GV_PS_CKSUM_BLOCK, b, GV_PS_CKSUM_BLOCK * sizeof(float));
    GV_CHECK(gv_ps_checksum(a, 2 * GV_PS_CKSUM_BLOCK) != gv_ps_checksum(b, 2 * GV_PS_CKSUM_BLOCK));
    GV_CHECK(gv_ps_checksum(b, N - 1) != base);
    float z[2] = {0.0f, -0.0f}, z2[2] = {0.0f, 0.0f};
    GV_CHECK(gv_ps_checksum(z, 2) != gv_ps_checksum(z2, 2)); /* bit patterns, not values */

    /* the fused step: gv_optim_apply_host's bits, its checksum the checksum of the result */
    struct gv_optim_cfg oc;
    gv_optim_cfg_default(&oc);
    oc.weight_decay = 1e-3f;
    for (int nest = 0; nest < 2; nest++) {
        oc.nesterov = nest;
        float *p1 = malloc(N * 4), *v1 = malloc(N * 4), *p2 = malloc(N * 4), *v2 = malloc(N * 4);
        for (int i = 0; i < N; i++) {
            p1[i] = p2[i] = (float)((int)(ck_rand(&seed) % 2001) - 1000) * 1e-3f;
            v1[i] = v2[i] = (float)((int)(ck_rand(&seed) % 201) - 100) * 1e-4f;
            a[i] = (float)((int)(ck_rand(&seed) % 2001) - 1000) * 1e-5f;
        }
        gv_optim_apply_host(&oc, 0.05f, p1, v1, a, N);
        size_t cut = 3 * GV_PS_CKSUM_BLOCK;
        uint64_t s2 = gv_ps_step_range(&oc, 0.05f, p2, v2, a, cut, N, true);
        s2 += gv_ps_step_range(&oc, 0.05f, p2, v2, a, 0, cut, true);
        GV_CHECK(memcmp(p1, p2, N * 4) == 0 && memcmp(v1, v2, N * 4) == 0);
        GV_CHECK_EQ(gv_ps_cksum_final(s2, N), gv_ps_checksum(p1, N));
        GV_CHECK_EQ(gv_ps_step_range(&oc, 0.05f, p2, v2, a, 0, N, false), 0);
        free(p1), free(v1), free(p2), free(v2);
    }
    free(a);
    free(b);
}

/* gv_ps_average_sum gives the bits of the reference's sum from zero and division, for any bit
 * pattern (subnormals, infinities, NaNs, -0.0) and divisor (powers of two are multiplied). */
static void test_average_sum(void)
{
    enum { N = 4096 };
    float *g0 = malloc(N * 4), *g1 = malloc(N * 4), *acc = malloc(N * 4), *want = malloc(N * 4);
    uint64_t seed = 99;
    for (int i = 0; i < N; i++) {
        uint32_t a = (uint32_t)ck_rand(&seed), b = (uint32_t)ck_rand(&seed);
        if (i % 7 == 0)
            a &= 0x807fffffu; /* subnormal or zero, either sign */
        if (i % 11 == 0)
            b = 0x80000000u; /* -0.0 */
        memcpy(&g0[i], &a, 4);
        memcpy(&g1[i], &b, 4);
    }
    g0[5] = -0.0f;
    const uint32_t divs[] = {1, 2, 3, 4, 7, 8, 1024, 1000};
    int bad = 0;
    for (size_t d = 0; d < GV_ARRAY_LEN(divs); d++) {
        const float w = (float)divs[d];
        for (int last = 0; last < 2; last++) {
            for (int i = 0; i < N; i++) { /* the reference: 0 + g0 (+ g1), / w */
                float s = 0.0f;
                s += g0[i];
                if (last)
                    s += g1[i];
                want[i] = s / w;
            }
            memcpy(acc, g0, N * 4); /* the first push as it landed */
            gv_ps_average_sum(acc, last ? g1 : NULL, true, divs[d], 0, N);
            for (int i = 0; i < N; i++)
                bad += memcmp(&acc[i], &want[i], 4) != 0;
            for (int i = 0; i < N; i++) /* a sum already started from zero */
                acc[i] = 0.0f + g0[i];
            gv_ps_average_sum(acc, last ? g1 : NULL, false, divs[d], 0, N);
            for (int i = 0; i < N; i++)
                bad += memcmp(&acc[i], &want[i], 4) != 0;
        }
        memcpy(acc, g0, N * 4);
        gv_ps_average(acc, N, divs[d]);
        for (int i = 0; i < N; i++) {
            float q = g0[i] / w;
            bad += memcmp(&acc[i], &q, 4) != 0;
        }
    }
    GV_CHECK_EQ(bad, 0);
    free(g0), free(g1), free(acc), free(want);
}

static void test_util(void)
{
    float x[3] = {3.0f, 1.0f, -0.0f};
    gv_ps_average(x, 3, 3);
    GV_CHECK(x[0] == 1.0f && x[1] == 1.0f / 3.0f && signbit(x[2]));
    test_average_sum();

    struct gv_ps_bytes by;
    memset(&by, 0, sizeof(by));
    gv_ps_bytes_add(&by, 10, 100, 200, 80);
    gv_ps_bytes_add(&by, 1, 4000, 4000, 3900);
    gv_ps_bytes_add(&by, 10, 110, 210, 90);
    GV_CHECK_EQ(by.n, 2);
    GV_CHECK_EQ(by.by_cf[0].iters, 2);
    GV_CHECK_EQ(by.by_cf[0].sent, 210);
    GV_CHECK_EQ(by.iter_recv, 4410);
    char buf[8000] = "";
    gv_ps_bytes_describe(&by, collect, buf);
    GV_CHECK_MSG(strstr(buf, "CF     1.0:") < strstr(buf, "CF    10.0:"), "%s", buf);
    uint64_t rss = gv_ps_rss();
    GV_CHECK(rss > 0 && gv_ps_peak_rss() >= rss);
}

/* A dense round's pieces: 512 KiB pieces of a 300000-element shard; one piece where the job
 * takes none (dense-fp16, --optimizer caller, --model external) or the option is 0. */
static void test_pieces(void)
{
    struct gv_job job = {.method = GV_JOB_DENSE, .piece_size = 512 * 1024};
    struct gv_ps_pieces pc;
    gv_job_pieces(&job, 300000, &pc);
    GV_CHECK(gv_job_pieced(&job) && pc.np == 3 && pc.base == 131072 && pc.n == 300000);
    GV_CHECK_EQ(gv_ps_piece_hi(&pc, 2), 300000);
    job.optimizer = GV_JOB_OPTIM_CALLER; /* the update is the cut vector: no step to overlap */
    gv_job_pieces(&job, 300000, &pc);
    GV_CHECK(!gv_job_pieced(&job) && pc.np == 1 && pc.base == 300000);
    job.optimizer = GV_JOB_OPTIM_JOB;
    job.model = GV_JOB_MODEL_EXTERNAL;
    gv_job_pieces(&job, 300000, &pc);
    GV_CHECK(!gv_job_pieced(&job) && pc.np == 1);
    job.model = (enum gv_nn_model_kind)0;
    job.method = GV_JOB_DENSE_FP16;
    gv_job_pieces(&job, 300000, &pc);
    GV_CHECK(!gv_job_pieced(&job) && pc.np == 1);
    job.method = GV_JOB_DENSE;
    job.piece_size = 0;
    gv_job_pieces(&job, 300000, &pc);
    GV_CHECK(gv_job_pieced(&job) && pc.np == 1);
}

int main(void)
{
    test_map();
    test_job();
    test_cluster();
    test_util();
    test_cksum();
    test_pieces();
    return gv_check_summary();
}
