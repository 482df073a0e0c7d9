/* test_e2e_train.c: the real programs on loopback: 2 gravac-server and 3 gravac-worker
 * processes train a small MLP on synthetic data (ephemeral ports, rendezvous directory), then a
 * single-process reference repeats the training: the same model replicas on the same data
 * shards, the same compression with error feedback per worker, the decisions the workers logged,
 * the sum in worker-rank order, the average and the optimizer. Checked, for the dense path, the
 * sparse path (static top-k) and GraVAC (changing CF): every worker's final parameters and the
 * servers' shards equal the reference bit for bit; every worker logged the same CF sequence;
 * every iteration's bytes each way equal the encoder's planned sizes plus the headers and what
 * the transport moved. One run also has a stranger connect to server 0 and send garbage, which
 * the server logs and drops while training goes on. */
#include "e2e.h"
#include "gv_ps.h"
#include "srv.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <sys/socket.h>

#define W 3
#define S 2
#define MAXT 16

static const char *bindir;

struct ref {
    struct gv_job job;
    struct gv_cfg *cfg;
    struct gv_nn_dataset *train, *test;
    struct gv_nn_backend *be;
    struct gv_nn_model *model;
    size_t P, off[MAXT + 1];
    size_t numel[MAXT];
    uint32_t T;
};

static int ref_init(struct ref *r, const char *jobargs)
{
    static char buf[2048];
    static char *argv[64];
    argv[0] = "ref";
    int argc = 1 + e2e_split(jobargs, buf, sizeof(buf), argv + 1, 63);
    static struct gv_opt_table tab;
    static struct gv_cfg_spec spec;
    memset(r, 0, sizeof(*r));
    tab = (struct gv_opt_table){gv_job_options, gv_job_options_n, &r->job};
    spec = (struct gv_cfg_spec){.program = "ref", .tables = &tab, .n_tables = 1};
    if (gv_cfg_create(&spec, &r->cfg) != GV_OK || gv_cfg_load(r->cfg, argc, argv, NULL) != GV_OK ||
        gv_job_resolve(&r->job, W) != GV_OK)
        return -1;
    const struct gv_nn_model_cfg *mc = &r->job.model_cfg;
    if (gv_nn_dataset_synthetic(mc->in_h, mc->in_w, 1, 10, (size_t)r->job.synthetic_n, 2048, 1.5f,
                                r->job.seed, &r->train, &r->test) != GV_OK ||
        gv_nn_backend_create(GV_NN_CPU, 1, &r->be) != GV_OK ||
        gv_nn_model_create(r->be, mc, &r->model) != GV_OK ||
        gv_nn_model_init(r->model, r->job.seed) != GV_OK)
        return -1;
    r->T = (uint32_t)gv_nn_model_tensor_count(r->model);
    for (uint32_t t = 0; t < r->T; t++) {
        r->numel[t] = gv_nn_model_tensor(r->model, (int)t)->numel;
        r->off[t + 1] = r->off[t] + r->numel[t];
    }
    r->P = r->off[r->T];
    return 0;
}

static void ref_cleanup(struct ref *r)
{
    gv_nn_model_destroy(r->model);
    gv_nn_backend_destroy(r->be);
    gv_nn_dataset_destroy(r->train);
    gv_nn_dataset_destroy(r->test);
    gv_cfg_destroy(r->cfg);
}

static size_t plan_bytes(const uint32_t *idx, const float *val, uint32_t count, uint32_t n,
                         enum gv_val_type vt)
{
    struct gv_sparse sp = {.idx = (uint32_t *)(uintptr_t)idx,
                           .val = (float *)(uintptr_t)val,
                           .cap = count,
                           .count = count,
                           .n = n};
    struct gv_sparse_layout info;
    if (gv_sparse_plan(&sp, vt, GV_IDX_AUTO, &info) != GV_OK)
        return (size_t)-1;
    return info.idx_len + info.val_len;
}

static enum gv_adapt_level level_of(const char *s)
{
    return strcmp(s, "candidate") == 0 ? GV_ADAPT_LEVEL_CANDIDATE
           : strcmp(s, "floor") == 0   ? GV_ADAPT_LEVEL_FLOOR
                                       : GV_ADAPT_LEVEL_DENSE;
}

/* Repeats the job in this process and compares with what the programs left in dir. */
static void ref_check(struct ref *r, const char *dir, cJSON *const *iters, int n_iters)
{
    const struct gv_job *job = &r->job;
    size_t P = r->P;
    struct gv_shard_map map;
    GV_CHECK_OK(gv_shard_map_init(&map, r->numel, r->T, S));
    float *p = malloc(P * 4), *v = calloc(P, 4), *acc = malloc(P * 4), *g = malloc(P * 4);
    uint32_t *sidx = malloc(P * 4);
    float *sval = malloc(P * 4);
    GV_CHECK_OK(gv_nn_model_get_params(r->model, p));
    bool dense_method = gv_job_dense(job), fp16_dense = job->method == GV_JOB_DENSE_FP16;
    enum gv_val_type vt = job->fp16 ? GV_VAL_F16 : GV_VAL_F32;
    /* compression units: the tensors, or the whole model (--topk-scope model) */
    uint32_t U = job->topk_scope == GV_SCOPE_MODEL ? 1 : r->T;
    size_t uoff[MAXT + 1] = {0, P};
    for (uint32_t t = 0; U > 1 && t <= r->T; t++)
        uoff[t] = r->off[t];
    struct gv_cmp *cmp[W] = {0};
    struct gv_ef *ef[W][MAXT] = {{0}};
    float *resid[W] = {0};
    struct gv_sparse lmin[MAXT], lcand[MAXT];
    for (uint32_t t = 0; t < U; t++) {
        uint32_t b = (uint32_t)(uoff[t + 1] - uoff[t]);
        lmin[t] = (struct gv_sparse){.idx = malloc(b * 4), .val = malloc(b * 4), .cap = b};
        lcand[t] = (struct gv_sparse){.idx = malloc(b * 4), .val = malloc(b * 4), .cap = b};
    }
    struct gv_nn_sampler smp[W];
    struct gv_nn_batch_buf bb;
    size_t *idx = malloc((size_t)job->batch * sizeof(size_t));
    GV_CHECK_OK(gv_nn_batch_buf_init(&bb, r->train, job->batch));
    for (int w = 0; w < W; w++) {
        GV_CHECK_OK(gv_nn_sampler_init(&smp[w], r->train->n, w, W, job->seed));
        if (dense_method)
            continue;
        struct gv_cmp_config cc;
        gv_cmp_config_init(&cc);
        cc.kind = gv_job_cmp_kind(job);
        cc.val_type = vt;
        cc.max_numel = 1 << 20;
        cc.min_cf = gv_job_min_cf(job);
        cc.seed = job->seed;
        GV_CHECK_OK(gv_cmp_create(&cc, &cmp[w]));
        resid[w] = calloc(P, 4);
        for (uint32_t t = 0; t < U; t++)
            GV_CHECK_OK(gv_ef_create(cmp[w], (uint32_t)(uoff[t + 1] - uoff[t]), resid[w] + uoff[t],
                                     &ef[w][t]));
    }
    /* the servers' bounded downlink: its own residual per shard (srv_down, as the servers run) */
    struct srv_down *down[S] = {0};
    for (uint32_t s = 0; s < S; s++)
        GV_CHECK_OK(srv_down_create(job, &map, s, &down[s]));
    int bad = 0;
    for (int i = 0; i < n_iters; i++) {
        const cJSON *rec = cJSON_GetArrayItem(iters[0], i);
        enum gv_adapt_level level =
            level_of(cJSON_GetStringValue(cJSON_GetObjectItem(rec, "level")));
        double theta = e2e_num(rec, "theta_min"), cand = e2e_num(rec, "cf_candidate");
        uint32_t levels = dense_method                   ? 0
                          : job->method == GV_JOB_STATIC ? 1
                          : cand > theta                 ? 2
                                                         : 1;
        bool dense = level == GV_ADAPT_LEVEL_DENSE;
        /* halves both ways: the dense-fp16 method, or a dense decision at CF 2 (auto's arm) */
        bool f16 = fp16_dense || (dense && e2e_num(rec, "cf") == 2.0);
        GV_CHECK_OK(gv_nn_model_set_params(r->model, p));
        memset(acc, 0, P * 4);
        for (int w = 0; w < W; w++) {
            struct gv_nn_batch b;
            int64_t ep;
            GV_CHECK_OK(gv_nn_sampler_next(&smp[w], job->batch, idx, &ep));
            GV_CHECK_OK(gv_nn_batch_gather(r->train, idx, job->batch, &bb, &b));
            GV_CHECK_OK(gv_nn_model_train_step(r->model, &b, NULL));
            GV_CHECK_OK(gv_nn_model_get_grads(r->model, g));
            size_t nsel = 0;
            for (uint32_t t = 0; t < U && levels > 0; t++) {
                uint32_t nu = (uint32_t)(uoff[t + 1] - uoff[t]);
                struct gv_cmp_req req = {.iter = (uint64_t)i,
                                         .tensor_id = t,
                                         .cf_min = theta,
                                         .cf_cand = levels == 2 ? cand : 0};
                lmin[t].cap = gv_cmp_bound(cmp[w], nu, theta);
                if (levels == 2)
                    lcand[t].cap = gv_cmp_bound(cmp[w], nu, cand);
                struct gv_norms nm;
                GV_CHECK_OK(gv_cmp_compress(cmp[w], ef[w][t], g + uoff[t], &req, &lmin[t],
                                            levels == 2 ? &lcand[t] : NULL, &nm));
                if (dense)
                    continue;
                const struct gv_sparse *sent =
                    level == GV_ADAPT_LEVEL_CANDIDATE ? &lcand[t] : &lmin[t];
                for (uint32_t k = 0; k < sent->count; k++) {
                    acc[uoff[t] + sent->idx[k]] += sent->val[k];
                    sidx[nsel] = (uint32_t)(uoff[t] + sent->idx[k]);
                    sval[nsel++] = sent->val[k];
                }
                GV_CHECK_OK(gv_cmp_apply(cmp[w], ef[w][t], GV_SENT_SPARSE, sent));
            }
            uint64_t want = 0;
            if (dense) {
                const float *src = dense_method ? g : resid[w];
                for (size_t j = 0; j < P; j++) /* dense-fp16 pushes halves */
                    acc[j] += f16 ? gv_f16_round_sat(src[j]) : src[j];
                want = (f16 ? 2 : 4) * P;
                for (uint32_t t = 0; t < U && !dense_method; t++)
                    GV_CHECK_OK(gv_cmp_apply(cmp[w], ef[w][t], GV_SENT_DENSE, NULL));
            } else {
                size_t a = 0;
                for (uint32_t s = 0; s < S; s++) {
                    size_t e = a;
                    while (e < nsel && sidx[e] < map.lo[s + 1])
                        sidx[e++] -= (uint32_t)map.lo[s];
                    want += plan_bytes(sidx + a, sval + a, (uint32_t)(e - a),
                                       (uint32_t)gv_shard_numel(&map, s), vt);
                    a = e;
                }
            }
            const cJSON *rw = cJSON_GetArrayItem(iters[w], i);
            double ps = e2e_num(rw, "payload_sent");
            bad += ps != (double)want || e2e_num(rw, "bytes_sent") != e2e_num(rw, "wire_sent") ||
                   e2e_num(rw, "bytes_sent") <= ps;
            if (ps != (double)want)
                fprintf(stderr,
                        "iteration %d worker %d: %.0f payload bytes sent, the encoder "
                        "plans %llu\n",
                        i, w, ps, (unsigned long long)want);
        }
        gv_ps_average(acc, P, W);
        struct gv_ps_decision dec = {.level = level,
                                     .theta_min = theta,
                                     .cf_candidate = cand,
                                     .cf_send = e2e_num(rec, "cf")};
        for (uint32_t s = 0; s < S; s++)
            if (down[s] != NULL)
                GV_CHECK_OK(
                    srv_down_apply(down[s], acc + map.lo[s], &dec, NULL, false, (uint64_t)i));
        for (size_t j = 0; j < P && f16; j++) /* what is sent, and applied */
            acc[j] = gv_f16_round_sat(acc[j]);
        /* values as halves where the downlink cut them in fp16 mode */
        enum gv_val_type uvt = down[0] != NULL && !dense ? vt : GV_VAL_F32;
        uint64_t upd = 0;
        for (uint32_t s = 0; s < S; s++) {
            uint64_t n = gv_shard_numel(&map, s);
            struct gv_ps_pieces lay = {.n = n, .base = n, .np = 1};
            if (dense && !f16) /* a dense f32 round's update comes in pieces */
                gv_job_pieces(job, n, &lay);
            for (uint32_t k = 0; k < lay.np; k++) {
                uint64_t a = map.lo[s] + gv_ps_piece_lo(&lay, k);
                uint32_t len = (uint32_t)(gv_ps_piece_hi(&lay, k) - gv_ps_piece_lo(&lay, k)), c = 0;
                for (uint32_t j = 0; j < len; j++) {
                    uint32_t bits;
                    memcpy(&bits, &acc[a + j], 4);
                    if (bits != 0) {
                        sidx[c] = j;
                        sval[c++] = acc[a + j];
                    }
                }
                upd += f16              ? 2ull * len
                       : 2ull * c > len ? 4ull * len
                                        : plan_bytes(sidx, sval, c, len, uvt);
            }
        }
        for (int w = 0; w < W; w++) {
            const cJSON *rw = cJSON_GetArrayItem(iters[w], i);
            bad += e2e_num(rw, "payload_recv") != (double)upd;
            bad += i + 1 < n_iters && e2e_num(rw, "bytes_recv") != e2e_num(rw, "wire_recv");
        }
        float lr = gv_optim_lr(&job->optim, i);
        gv_optim_apply_host(&job->optim, lr, p, v, acc, P);
    }
    for (uint32_t s = 0; s < S; s++)
        srv_down_destroy(down[s]);
    GV_CHECK_EQ(bad, 0);
    /* the programs' final parameters */
    for (int w = 0; w < W; w++) {
        char path[600];
        size_t len = 0;
        snprintf(path, sizeof(path), "%s/worker%d.bin", dir, w);
        char *d = e2e_slurp(path, &len);
        GV_CHECK_MSG(d != NULL && len == P * 4 && memcmp(d, p, P * 4) == 0,
                     "worker %d's parameters differ from the single-process reference", w);
        free(d);
    }
    for (int s = 0; s < S; s++) {
        char path[600];
        size_t len = 0;
        snprintf(path, sizeof(path), "%s/server%d.bin", dir, s);
        char *d = e2e_slurp(path, &len);
        GV_CHECK_MSG(d != NULL && len == gv_shard_numel(&map, (uint32_t)s) * 4 &&
                         memcmp(d, p + map.lo[s], len) == 0,
                     "server %d's shard differs from the reference", s);
        free(d);
    }
    for (int w = 0; w < W; w++) {
        for (uint32_t t = 0; t < U && cmp[w]; t++)
            gv_ef_destroy(ef[w][t]);
        gv_cmp_destroy(cmp[w]);
        free(resid[w]);
        gv_nn_sampler_cleanup(&smp[w]);
    }
    for (uint32_t t = 0; t < U; t++) {
        free(lmin[t].idx), free(lmin[t].val);
        free(lcand[t].idx), free(lcand[t].val);
    }
    gv_nn_batch_buf_cleanup(&bb);
    gv_shard_map_cleanup(&map);
    free(idx), free(p), free(v), free(acc), free(g), free(sidx), free(sval);
}

/* Connects to server 0 (address from the rendezvous file) and sends garbage. */
static void send_garbage(const char *dir)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/server-0.addr", dir);
    char *addr = NULL;
    for (int k = 0; k < 500 && addr == NULL; k++) {
        addr = e2e_slurp(path, NULL);
        if (addr == NULL)
            usleep(10000);
    }
    GV_CHECK(addr != NULL);
    if (addr == NULL)
        return;
    char *colon = strrchr(addr, ':');
    int port = colon ? atoi(colon + 1) : 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    GV_CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    const char junk[] = "GET / HTTP/1.0\r\n\r\nthis is not a gravac frame at all, not at all";
    GV_CHECK(write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk));
    usleep(100000);
    close(fd);
    free(addr);
}

/* Replicas only (no reference): every worker's parameters equal the servers' shards. */
static void replicas_check(const char *dir, size_t *P_p)
{
    char path[600];
    size_t len0 = 0, lens = 0;
    snprintf(path, sizeof(path), "%s/worker0.bin", dir);
    char *w0 = e2e_slurp(path, &len0);
    char *cat = malloc(len0 + 1);
    for (int s = 0; s < S && cat != NULL; s++) {
        size_t len = 0;
        snprintf(path, sizeof(path), "%s/server%d.bin", dir, s);
        char *d = e2e_slurp(path, &len);
        if (d != NULL && lens + len <= len0)
            memcpy(cat + lens, d, len);
        lens += len;
        free(d);
    }
    GV_CHECK_MSG(w0 != NULL && lens == len0 && memcmp(w0, cat, len0) == 0,
                 "worker 0's parameters differ from the servers' shards");
    for (int w = 1; w < W; w++) {
        size_t len = 0;
        snprintf(path, sizeof(path), "%s/worker%d.bin", dir, w);
        char *d = e2e_slurp(path, &len);
        GV_CHECK_MSG(d != NULL && len == len0 && memcmp(d, w0, len0) == 0,
                     "worker %d's parameters differ from worker 0's", w);
        free(d);
    }
    *P_p = len0 / 4;
    free(w0);
    free(cat);
}

/* AUTO's dense rounds in server 0's observation trace: the first after a sparse one still
 * compresses (its push carries the residual, and the workers' norms come with it); every later
 * one runs no top-k (no norms: before, the workers compressed at the lowest sparse arm on every
 * dense iteration, for norms no controller reads) */
static void auto_dense_check(const char *path)
{
    FILE *f = fopen(path, "r");
    GV_CHECK_MSG(f != NULL, "no observation trace %s", path);
    if (f == NULL)
        return;
    char line[1024];
    int flushed = 0, clean = 0, bad = 0, prev = -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        struct gv_adapt_obs o;
        enum gv_adapt_level nl;
        double ncf;
        if (gv_adapt_trace_parse(line, &o, &nl, &ncf) != GV_OK)
            continue; /* the header */
        if (o.level == GV_ADAPT_LEVEL_DENSE && prev >= 0) {
            bool after_dense = prev == GV_ADAPT_LEVEL_DENSE;
            flushed += !after_dense && o.norm2_ef > 0;
            clean += after_dense && o.norm2_ef == 0 && o.norm2_min == 0;
            bool wrong = after_dense ? o.norm2_ef != 0 : !(o.norm2_ef > 0);
            if (wrong && bad++ < 3)
                fprintf(stderr, "iteration %" PRIu64 ": dense after %s, ||g_ef||^2 %g\n", o.iter,
                        after_dense ? "dense" : "sparse", o.norm2_ef);
        }
        prev = (int)o.level;
    }
    fclose(f);
    GV_CHECK_MSG(bad == 0 && flushed > 0 && clean > 0,
                 "auto's dense rounds: %d after a sparse one compressed, %d later ones did "
                 "not, %d otherwise",
                 flushed, clean, bad);
}

static void run_case(const char *what, const char *jobargs, int steps, bool garbage,
                     bool want_cf_changes)
{
    fprintf(stderr, "==== %s\n", what);
    char dir[] = "/tmp/gv_e2e_train_XXXXXX";
    if (mkdtemp(dir) == NULL)
        return;
    char common[2048], args[3072], log[600], prog[600], job[1024];
    snprintf(job, sizeof(job), "%s --steps %d", jobargs, steps);
    snprintf(common, sizeof(common),
             "%s --num-servers %d --num-workers %d "
             "--rendezvous-dir %s --insecure --connect-timeout 20s",
             job, S, W, dir);
    struct e2e_job j = {0};
    snprintf(prog, sizeof(prog), "%s/gravac-server", bindir);
    for (int s = 0; s < S; s++) {
        snprintf(args, sizeof(args),
                 "%s --rank %d --bind 127.0.0.1:0 --dump-params "
                 "%s/server%%r.bin --decision-log %s/decisions.jsonl --obs-trace %s/obs.csv",
                 common, s, dir, dir, dir);
        snprintf(log, sizeof(log), "%s/server%d.log", dir, s);
        char name[16];
        snprintf(name, sizeof(name), "server%d", s);
        e2e_spawn(&j, name, prog, args, log);
    }
    snprintf(prog, sizeof(prog), "%s/gravac-worker", bindir);
    for (int w = 0; w < W; w++) {
        snprintf(args, sizeof(args),
                 "%s --rank %d --quiet --metrics-file %s/worker%%r.jsonl "
                 "--dump-params %s/worker%%r.bin",
                 common, w, dir, dir);
        snprintf(log, sizeof(log), "%s/worker%d.log", dir, w);
        char name[16];
        snprintf(name, sizeof(name), "worker%d", w);
        e2e_spawn(&j, name, prog, args, log);
    }
    if (garbage)
        send_garbage(dir);
    int ok = e2e_wait(&j, 25);
    GV_CHECK_MSG(ok == S + W, "%s: %d of %d processes succeeded", what, ok, S + W);
    if (ok != S + W) {
        for (int i = 0; i < j.n; i++)
            e2e_dump_log(&j.p[i]);
        e2e_rmdir(dir);
        return;
    }
    if (garbage) {
        char path[600];
        snprintf(path, sizeof(path), "%s/server0.log", dir);
        char *s = e2e_slurp(path, NULL);
        GV_CHECK_MSG(s && strstr(s, "before it joined: it sent a malformed frame"),
                     "the garbage connection was not "
                     "logged and dropped");
        free(s);
    }
    /* identical CF sequences on every worker */
    cJSON *iters[W];
    char path[600];
    for (int w = 0; w < W; w++) {
        snprintf(path, sizeof(path), "%s/worker%d.jsonl", dir, w);
        iters[w] = e2e_records(path, "iter");
        GV_CHECK_EQ(cJSON_GetArraySize(iters[w]), steps);
    }
    int diff = 0, changes = 0;
    for (int i = 0; i < steps && cJSON_GetArraySize(iters[0]) == steps; i++) {
        const cJSON *a = cJSON_GetArrayItem(iters[0], i);
        for (int w = 1; w < W && cJSON_GetArraySize(iters[w]) == steps; w++) {
            const cJSON *b = cJSON_GetArrayItem(iters[w], i);
            diff += e2e_num(a, "cf") != e2e_num(b, "cf") ||
                    strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(a, "level")),
                           cJSON_GetStringValue(cJSON_GetObjectItem(b, "level"))) != 0;
        }
        changes += i > 0 && e2e_num(a, "cf") != e2e_num(cJSON_GetArrayItem(iters[0], i - 1), "cf");
    }
    GV_CHECK_EQ(diff, 0);
    /* train_s: the training time without evaluations, non-decreasing; an evaluation after
     * iteration i-1 (step i) is stamped between iterations i-1 and i, below its wall time */
    int bad_t = 0;
    double prev = 0;
    for (int i = 0; i < cJSON_GetArraySize(iters[0]); i++) {
        double t = e2e_num(cJSON_GetArrayItem(iters[0], i), "train_s");
        bad_t += !(t > 0 && t >= prev);
        prev = t;
    }
    GV_CHECK_EQ(bad_t, 0);
    snprintf(path, sizeof(path), "%s/worker0.jsonl", dir);
    cJSON *evals = e2e_records(path, "eval");
    GV_CHECK(cJSON_GetArraySize(evals) >= 1);
    for (int i = 0; i < cJSON_GetArraySize(evals); i++) {
        const cJSON *e = cJSON_GetArrayItem(evals, i);
        GV_CHECK(e2e_num(e, "train_s") > 0 && e2e_num(e, "train_s") < e2e_num(e, "time_s"));
        int step = (int)e2e_num(e, "step");
        int n = cJSON_GetArraySize(iters[0]);
        GV_CHECK(step >= 1 && step <= n);
        if (step >= 1 && step <= n)
            GV_CHECK(e2e_num(e, "train_s") >=
                     e2e_num(cJSON_GetArrayItem(iters[0], step - 1), "train_s"));
        if (step >= 1 && step < n)
            GV_CHECK(e2e_num(e, "train_s") <=
                     e2e_num(cJSON_GetArrayItem(iters[0], step), "train_s"));
    }
    cJSON_Delete(evals);
    if (want_cf_changes) {
        GV_CHECK_MSG(changes > 0, "%s: the CF never changed", what);
        snprintf(path, sizeof(path), "%s/decisions.jsonl", dir);
        char *s = e2e_slurp(path, NULL);
        const char *ev =
            strstr(jobargs, "auto") != NULL ? "\"event\":\"block\"" : "\"event\":\"window\"";
        GV_CHECK_MSG(s != NULL && strstr(s, ev) != NULL, "server 0 wrote no decision log");
        free(s);
    }
    if (strstr(jobargs, "--arms") != NULL) {
        snprintf(path, sizeof(path), "%s/obs.csv", dir);
        auto_dense_check(path);
    }
    if (strstr(jobargs, "accordion") != NULL) {
        /* some layers went heavy (per-layer CFs reached the workers) */
        snprintf(path, sizeof(path), "%s/decisions.jsonl", dir);
        char *s = e2e_slurp(path, NULL);
        bool heavy = false;
        for (const char *q = s; q != NULL && (q = strstr(q, "\"heavy_layers\":")) != NULL; q++)
            heavy |= q[15] >= '1' && q[15] <= '9';
        GV_CHECK_MSG(s != NULL && strstr(s, "\"reason\":\"norm-check\"") != NULL && heavy,
                     "accordion: no layer went heavy");
        free(s);
    }
    size_t P = 0;
    replicas_check(dir, &P);
    GV_CHECK(P > 0);
    if (strstr(jobargs, "accordion") == NULL) { /* the reference has no per-layer CFs */
        struct ref r;
        GV_CHECK_MSG(ref_init(&r, job) == 0, "reference set-up failed");
        if (cJSON_GetArraySize(iters[0]) == steps)
            ref_check(&r, dir, iters, steps);
        ref_cleanup(&r);
    }
    for (int w = 0; w < W; w++)
        cJSON_Delete(iters[w]);
    if (gv_check_failed_ == 0)
        e2e_rmdir(dir);
    else
        fprintf(stderr, "kept %s\n", dir);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_e2e_train BIN_DIR\n");
        return 2;
    }
    bindir = argv[1];
    const char *base = "--dataset synthetic --synthetic-n 3072 --batch 32 --widths 48,24";
    char a[512];
    snprintf(a, sizeof(a), "%s --method dense --lr 0.05", base);
    run_case("dense", a, 20, false, false);
    snprintf(a, sizeof(a), "%s --method dense --lr 0.05 --piece-size 4K", base);
    run_case("dense in pieces of 1024 elements", a, 20, false, false);
    snprintf(a, sizeof(a), "%s --method dense-fp16 --lr 0.05", base);
    run_case("dense-fp16", a, 20, false, false);
    snprintf(a, sizeof(a), "%s --method static --cf 10 --lr 0.05", base);
    run_case("static top-k CF 10, with a garbage connection", a, 25, true, false);
    snprintf(a, sizeof(a), "%s --method static --cf 10 --lr 0.05 --downlink union", base);
    run_case("static top-k CF 10, the union downlink", a, 25, false, false);
    snprintf(a, sizeof(a), "%s --method static --cf 10 --lr 0.05 --topk-scope tensor", base);
    run_case("static top-k CF 10 per tensor", a, 25, false, false);
    snprintf(a, sizeof(a), "%s --method static --cf 20 --lr 0.05 --fp16 --topk-scope tensor", base);
    run_case("static top-k CF 20 per tensor, fp16 both ways", a, 25, false, false);
    snprintf(a, sizeof(a),
             "%s --method gravac-exp --window 4 --epsilon 0.3 --theta-min 5 "
             "--lr-schedule cosine",
             base);
    run_case("gravac", a, 30, false, true);
    snprintf(a, sizeof(a),
             "%s --method accordion --theta-min 4 --theta-max 64 "
             "--switch-epochs 1 --synthetic-n 1536",
             base);
    run_case("accordion (replicas only)", a, 64, false, false);
    /* auto: its timing stage sends the arms from 1000 down to dense in halves (or in full)
     * and the blocks that follow switch between sparse and dense levels */
    snprintf(a, sizeof(a), "%s --method auto --lr 0.05", base);
    run_case("auto", a, 60, false, true);
    /* auto with one sparse arm: the timing stage always reaches the dense arms (where the
     * machine's times can stop it above them with the default ladder), a dense round after a
     * sparse one and dense rounds after dense ones are certain */
    snprintf(a, sizeof(a), "%s --method auto --arms dense,fp16,10 --lr 0.05", base);
    run_case("auto, arms dense, fp16 and 10", a, 40, false, false);
    return gv_check_summary();
}
