/* test_worker_runtime.c: 2 servers and 3 workers, each in its own thread with its own transport
 * on 127.0.0.1, run the worker runtime on gradients the test chooses (the MLP layout, whose
 * first tensor straddles the shard boundary), and a single-threaded reference recomputes every
 * iteration from scratch: the same compression and error feedback per worker, the decisions the
 * workers were given, the sum in worker-rank order, the average and the optimizer step. Checked:
 * the parameters of every worker and of the servers' shards equal the reference bit for bit;
 * worker 0's initial model reaches everyone; every worker saw the same decision sequence; the
 * bytes of every iteration, both ways, equal the encoder's planned sizes plus the headers, and
 * equal what the transport itself moved. Dense, static top-k (over the whole model, the default
 * scope, and per tensor), fp16 values, GraVAC with changing
 * levels, random-k, DGC and Redsync (variable counts), periodic resyncs, a downlink of 3 pushes'
 * k (--downlink-mult); and pushes without
 * entries (every kept entry in the other shard) that reach a server before their turn.
 * With the argument "cuda" (test_worker_runtime_cuda) the workers' replicas are GPU memory:
 * gradients uploaded, compression and the optimizer step on the GPU, and the same bitwise
 * reference (exact top-k, host-drawn random-k and DGC samples, and an optimizer kernel that
 * rounds as the CPU does give the same bits); Redsync is left out there (its mean of |x| is
 * summed on the GPU in another order, so a threshold can land elsewhere). SKIP (77) without a
 * GPU or without CUDA in the build. With "mirror" (test_worker_runtime_mirror) the GPU worker's
 * data path runs on the CPU backend (host_mirrors): replicas apart from the host mirrors, every
 * copy through the backend, so that path is checked on every machine.
 * Every mode also writes the workers' residual checkpoints (every CKPT_EVERY iterations): each
 * file's residual equals the reference's error-feedback residual of that iteration, bit for bit
 * (for a GPU replica the residual is device memory, copied to the host for the file). */
#include "ps_test.h"
#include "srv.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S 2
#define W 3
#define ITERS 14
#define MAXT 16
#define CKPT_EVERY 7

/* where the workers' replicas are: host memory, or behind host mirrors on the GPU or (to test
 * that path anywhere) on the CPU backend */
static enum { MODE_HOST, MODE_MIRROR, MODE_CUDA } mode;

struct harness {
    struct gv_job job;
    struct gv_cfg *cfg;
    struct gv_cluster scl[S], wcl[W];
    char dir[64];
    char ckdir[96]; /* the workers' checkpoints */
    struct gv_auth_secret secret;
    char names[MAXT][24];
    size_t numel[MAXT];
    uint32_t T;
    size_t P;
    struct gv_server *srv[S];
    pthread_t st[S], wt[W];
    gv_status_t srv_status[S], w_status[W];
    float *params[W], *grads[W], *mom[W];
    float *init0;
    struct gv_worker_step_out out[W][ITERS];
    int steps[W];
    struct gv_worker_summary sum[W];
    int delay_w0_ms;       /* worker 0 sleeps this long before each step: the others push first */
    int empty_late_pushes; /* reference: pushes of workers 1.. without entries for server 0 */
    uint32_t n_pieces;     /* reference: the most pieces a dense round's update came in */
};

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The gradient of worker w at iteration i: uneven magnitudes so top-k has something to pick. */
static void gen_grad(float *g, size_t n, int w, int i)
{
    for (size_t j = 0; j < n; j++) {
        uint64_t r = mix(((uint64_t)w << 48) ^ ((uint64_t)i << 32) ^ j);
        float u = (float)(r & 0xffffff) / (float)0x1000000 - 0.5f;
        float scale = (r >> 40) % 17 == 0 ? 4.0f : 0.05f;
        g[j] = u * scale;
    }
}

static void cluster_init(struct gv_cluster *cl, const char *dir, int rank, enum gv_role role)
{
    ps_test_cluster_init(cl, dir, rank, role, S, W, 20000000000ull, 10000000000ull);
}

struct srv_arg {
    struct harness *h;
    int s;
};
struct wk_arg {
    struct harness *h;
    int w;
};

static void *srv_thread(void *p)
{
    struct srv_arg *a = p;
    a->h->srv_status[a->s] = gv_server_run(a->h->srv[a->s], NULL);
    return NULL;
}

/* The replica behind mirrors: its own backend and vectors, starting from the host ones. */
static gv_status_t wk_device(struct harness *h, int w, struct gv_nn_backend **be, struct gv_buf *dv,
                             struct gv_worker_model *m)
{
    size_t bytes = h->P * sizeof(float);
    gv_status_t status = gv_nn_backend_create(mode == MODE_CUDA ? GV_NN_CUDA : GV_NN_CPU, 1, be);
    if (status == GV_OK)
        status = gv_buf_alloc(dv, 3 * bytes, mode == MODE_CUDA ? GV_MEM_DEVICE : GV_MEM_HOST);
    if (status != GV_OK)
        return status;
    m->params = dv->ptr;
    m->grads = m->params + h->P;
    m->momentum = m->grads + h->P;
    m->be = *be;
    status = gv_nn_backend_upload(*be, m->params, h->params[w], bytes);
    return status == GV_OK ? gv_nn_backend_upload(*be, m->momentum, h->mom[w], bytes) : status;
}

static void *wk_thread(void *p)
{
    struct wk_arg *a = p;
    struct harness *h = a->h;
    int w = a->w;
    struct gv_worker_model m = {.params = h->params[w],
                                .grads = h->grads[w],
                                .momentum = h->mom[w],
                                .numel = h->P,
                                .n_tensors = h->T,
                                .tensor_numel = h->numel,
                                .names = (const char(*)[24])h->names};
    struct gv_worker_config wc = {.job = &h->job,
                                  .cluster = &h->wcl[w],
                                  .secret = &h->secret,
                                  .cmp_threads = 1,
                                  .verify_every = 1,
                                  .host_mirrors = mode == MODE_MIRROR,
                                  .checkpoint_dir = h->ckdir,
                                  .checkpoint_every = CKPT_EVERY};
    struct gv_worker *wk = NULL;
    struct gv_nn_backend *be = NULL;
    struct gv_buf dv = {0};
    size_t bytes = h->P * sizeof(float);
    bool mirrored = mode != MODE_HOST;
    gv_status_t status = mirrored ? wk_device(h, w, &be, &dv, &m) : GV_OK;
    if (status == GV_OK)
        status = gv_worker_create(&wc, &m, &wk);
    h->w_status[w] = status;
    for (int i = 0; status == GV_OK && i < ITERS; i++) {
        gen_grad(h->grads[w], h->P, w, i);
        if (w == 0 && h->delay_w0_ms > 0)
            usleep((useconds_t)h->delay_w0_ms * 1000u);
        if (mirrored && (status = gv_nn_backend_upload(be, m.grads, h->grads[w], bytes)) != GV_OK)
            break;
        struct gv_worker_step_in in = {.loss = 1.0 + w, .compute_s = 0.001, .samples = 32};
        status = gv_worker_step(wk, &in, &h->out[w][i]);
        if (status != GV_OK || h->out[w][i].stop)
            break;
        h->steps[w]++;
    }
    h->w_status[w] = status;
    if (wk != NULL) {
        gv_worker_finish(wk, (uint64_t)h->steps[w]);
        gv_worker_get_summary(wk, &h->sum[w]);
        gv_worker_destroy(wk);
    }
    if (mirrored && status == GV_OK) { /* the reference checks the host copies */
        status = gv_nn_backend_download(be, h->params[w], m.params, bytes);
        if (status == GV_OK)
            status = gv_nn_backend_download(be, h->mom[w], m.momentum, bytes);
        h->w_status[w] = status;
    }
    gv_buf_free(&dv);
    gv_nn_backend_destroy(be);
    return NULL;
}

static int harness_setup(struct harness *h, int argc, char **argv)
{
    memset(h, 0, sizeof(*h));
    static struct gv_opt_table tab;
    static struct gv_cfg_spec spec;
    tab = (struct gv_opt_table){gv_job_options, gv_job_options_n, &h->job};
    spec = (struct gv_cfg_spec){.program = "test", .tables = &tab, .n_tables = 1};
    if (gv_cfg_create(&spec, &h->cfg) != GV_OK || gv_cfg_load(h->cfg, argc, argv, NULL) != GV_OK)
        return -1;
    if (h->job.steps == 0)
        h->job.steps = ITERS; /* the job's length: every worker runs all of it */
    if (gv_job_resolve(&h->job, W) != GV_OK ||
        gv_job_layout(&h->job, h->names, h->numel, MAXT, &h->T) != GV_OK) {
        GV_CHECK_MSG(0, "job set-up failed");
        return -1;
    }
    for (uint32_t t = 0; t < h->T; t++)
        h->P += h->numel[t];
    snprintf(h->dir, sizeof(h->dir), "/tmp/gv_test_wrt_XXXXXX");
    if (mkdtemp(h->dir) == NULL)
        return -1;
    snprintf(h->ckdir, sizeof(h->ckdir), "%s/ck", h->dir);
    for (int s = 0; s < S; s++)
        cluster_init(&h->scl[s], h->dir, s, GV_ROLE_SERVER);
    for (int w = 0; w < W; w++)
        cluster_init(&h->wcl[w], h->dir, w, GV_ROLE_WORKER);
    h->init0 = malloc(h->P * sizeof(float));
    for (int w = 0; w < W; w++) {
        h->params[w] = malloc(h->P * sizeof(float));
        h->grads[w] = malloc(h->P * sizeof(float));
        h->mom[w] = malloc(h->P * sizeof(float));
        for (size_t j = 0; j < h->P; j++) {
            /* worker 0's values seed the servers; the others start from garbage */
            h->params[w][j] = w == 0 ? (float)((int)(mix(j) % 2001) - 1000) * 1e-3f : 1e6f;
            h->mom[w][j] = w == 0 ? 0.0f : -7.0f;
        }
    }
    memcpy(h->init0, h->params[0], h->P * sizeof(float));
    return 0;
}

static void harness_run(struct harness *h)
{
    struct srv_arg sa[S];
    struct wk_arg wa[W];
    for (int s = 0; s < S; s++) {
        /* the servers checkpoint too: a residual counts once every process wrote its part */
        struct gv_server_config sc = {.job = &h->job,
                                      .cluster = &h->scl[s],
                                      .secret = &h->secret,
                                      .handshake_timeout_ns = 5000000000ull,
                                      .checkpoint_dir = h->ckdir,
                                      .checkpoint_every = CKPT_EVERY,
                                      .checkpoint_keep = 100};
        GV_CHECK_OK(gv_server_create(&sc, &h->srv[s]));
    }
    for (int s = 0; s < S; s++) {
        sa[s] = (struct srv_arg){h, s};
        pthread_create(&h->st[s], NULL, srv_thread, &sa[s]);
    }
    for (int w = 0; w < W; w++) {
        wa[w] = (struct wk_arg){h, w};
        pthread_create(&h->wt[w], NULL, wk_thread, &wa[w]);
    }
    for (int w = 0; w < W; w++)
        pthread_join(h->wt[w], NULL);
    for (int s = 0; s < S; s++)
        pthread_join(h->st[s], NULL);
}

static void harness_cleanup(struct harness *h)
{
    for (int s = 0; s < S; s++)
        gv_server_destroy(h->srv[s]);
    for (int w = 0; w < W; w++) {
        free(h->params[w]);
        free(h->grads[w]);
        free(h->mom[w]);
    }
    free(h->init0);
    gv_cfg_destroy(h->cfg);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", h->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", h->dir);
}

/* ---------------------------------------------------------------- the reference */

struct ref_worker {
    struct gv_cmp *cmp;
    struct gv_ef *ef[MAXT];
    struct gv_sparse lmin[MAXT], lcand[MAXT];
};

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

/* Worker w's residual checkpoint of iteration it holds exactly the reference residual (and,
 * with --local-momentum, the reference velocity: vel, else NULL). */
static void check_resid_ckpt(struct harness *h, int w, uint64_t it, const float *want,
                             const float *vel)
{
    char dir[160], path[256];
    snprintf(dir, sizeof(dir), "%s/worker%04d", h->ckdir, w);
    gv_ps_ckpt_path(dir, (uint32_t)w, it, path, sizeof(path));
    struct gv_ckpt *ck = NULL;
    float *got = malloc(h->P * sizeof(float));
    GV_CHECK_MSG(gv_ckpt_open(path, 0, &ck) == GV_OK, "worker %d: no valid checkpoint %s", w, path);
    if (ck != NULL) {
        GV_CHECK_OK(gv_ckpt_read_section(ck, "residual", got, h->P * sizeof(float)));
        GV_CHECK_MSG(memcmp(got, want, h->P * sizeof(float)) == 0,
                     "worker %d: the residual in "
                     "%s differs from the reference's of iteration %llu",
                     w, path, (unsigned long long)it);
        if (vel != NULL) {
            GV_CHECK_OK(gv_ckpt_read_section(ck, "velocity", got, h->P * sizeof(float)));
            GV_CHECK_MSG(memcmp(got, vel, h->P * sizeof(float)) == 0,
                         "worker %d: the velocity in %s differs from the reference's", w, path);
        }
        gv_ckpt_close(ck);
    }
    free(got);
}

static void reference(struct harness *h)
{
    const struct gv_job *job = &h->job;
    size_t P = h->P;
    size_t off[MAXT + 1] = {0};
    for (uint32_t t = 0; t < h->T; t++)
        off[t + 1] = off[t] + h->numel[t];
    /* compression units: the tensors, or the whole model (--topk-scope model) */
    bool whole = job->topk_scope == GV_SCOPE_MODEL;
    uint32_t U = whole ? 1 : h->T;
    size_t uoff[MAXT + 1] = {0, P};
    for (uint32_t t = 0; t < h->T && !whole; t++)
        uoff[t + 1] = off[t + 1];
    struct gv_shard_map map;
    GV_CHECK_OK(gv_shard_map_init(&map, h->numel, h->T, S));
    float *p = malloc(P * 4), *v = calloc(P, 4), *acc = malloc(P * 4), *g = malloc(P * 4);
    float *resid[W], *vel[W] = {0};
    for (int w = 0; w < W && job->local_momentum; w++)
        vel[w] = calloc(P, 4); /* each worker's velocity: its gradients' momentum */
    uint32_t *sidx = malloc(P * 4);
    float *sval = malloc(P * 4);
    memcpy(p, h->init0, P * 4);
    struct ref_worker rw[W];
    memset(rw, 0, sizeof(rw));
    bool dense_method = job->method == GV_JOB_DENSE;
    enum gv_val_type vt = job->fp16 ? GV_VAL_F16 : GV_VAL_F32;
    for (int w = 0; w < W && !dense_method; w++) {
        struct gv_cmp_config cc;
        gv_cmp_config_init(&cc);
        cc.kind = gv_job_cmp_kind(job);
        cc.val_type = vt;
        cc.max_numel = (uint32_t)P;
        cc.min_cf = gv_job_min_cf(job);
        cc.seed = job->seed;
        GV_CHECK_OK(gv_cmp_create(&cc, &rw[w].cmp));
        resid[w] = calloc(P, 4);
        for (uint32_t t = 0; t < U; t++) {
            uint32_t b = (uint32_t)(uoff[t + 1] - uoff[t]);
            GV_CHECK_OK(gv_ef_create(rw[w].cmp, b, resid[w] + uoff[t], &rw[w].ef[t]));
            rw[w].lmin[t] =
                (struct gv_sparse){.idx = malloc(b * 4), .val = malloc(b * 4), .cap = b};
            rw[w].lcand[t] =
                (struct gv_sparse){.idx = malloc(b * 4), .val = malloc(b * 4), .cap = b};
        }
    }
    /* the servers' bounded downlink: its own residual per shard (srv_down, as the servers run) */
    struct srv_down *down[S] = {0};
    for (uint32_t s = 0; s < S; s++)
        GV_CHECK_OK(srv_down_create(job, &map, s, &down[s]));
    int bad_bytes = 0, bad_dec = 0;
    for (int i = 0; i < h->steps[0]; i++) {
        const struct gv_worker_step_out *o0 = &h->out[0][i];
        bool dense = o0->level == GV_ADAPT_LEVEL_DENSE;
        uint32_t levels = dense_method                       ? 0
                          : job->method == GV_JOB_STATIC     ? 1
                          : o0->cf_candidate > o0->theta_min ? 2
                                                             : 1;
        memset(acc, 0, P * 4);
        for (int w = 0; w < W; w++) {
            const struct gv_worker_step_out *ow = &h->out[w][i];
            bad_dec += ow->level != o0->level || ow->cf != o0->cf ||
                       ow->theta_min != o0->theta_min || ow->cf_candidate != o0->cf_candidate;
            gen_grad(g, P, w, i);
            if (vel[w] != NULL) /* what the worker compresses and pushes: its velocity */
                gv_optim_velocity_host(&job->optim, p, vel[w], g, P);
            uint64_t push_payload = 0;
            size_t nsel = 0;
            for (uint32_t t = 0; t < U && levels > 0; t++) {
                struct gv_cmp_req req = {.iter = (uint64_t)i,
                                         .tensor_id = t,
                                         .cf_min = o0->theta_min,
                                         .cf_cand = levels == 2 ? o0->cf_candidate : 0};
                uint32_t un = (uint32_t)(uoff[t + 1] - uoff[t]);
                rw[w].lmin[t].cap = gv_cmp_bound(rw[w].cmp, un, req.cf_min);
                if (levels == 2)
                    rw[w].lcand[t].cap = gv_cmp_bound(rw[w].cmp, un, req.cf_cand);
                struct gv_norms nm;
                GV_CHECK_OK(gv_cmp_compress(rw[w].cmp, rw[w].ef[t], g + uoff[t], &req,
                                            &rw[w].lmin[t], levels == 2 ? &rw[w].lcand[t] : NULL,
                                            &nm));
                if (dense)
                    continue;
                const struct gv_sparse *sent =
                    o0->level == GV_ADAPT_LEVEL_CANDIDATE ? &rw[w].lcand[t] : &rw[w].lmin[t];
                for (uint32_t k = 0; k < sent->count; k++) {
                    acc[uoff[t] + sent->idx[k]] += sent->val[k];
                    sidx[nsel] = (uint32_t)(uoff[t] + sent->idx[k]);
                    sval[nsel++] = sent->val[k];
                }
                GV_CHECK_OK(gv_cmp_apply(rw[w].cmp, rw[w].ef[t], GV_SENT_SPARSE, sent));
            }
            if (dense) {
                const float *src = dense_method ? g : resid[w];
                for (size_t j = 0; j < P; j++)
                    acc[j] += src[j];
                push_payload = 4 * P;
                for (uint32_t t = 0; t < U && !dense_method; t++)
                    GV_CHECK_OK(gv_cmp_apply(rw[w].cmp, rw[w].ef[t], GV_SENT_DENSE, NULL));
            } else {
                /* per shard: the entries within its range, shard-relative */
                size_t a = 0;
                for (uint32_t s = 0; s < S; s++) {
                    size_t b = a;
                    while (b < nsel && sidx[b] < map.lo[s + 1])
                        sidx[b++] -= (uint32_t)map.lo[s];
                    push_payload += plan_bytes(sidx + a, sval + a, (uint32_t)(b - a),
                                               (uint32_t)gv_shard_numel(&map, s), vt);
                    h->empty_late_pushes += w > 0 && s == 0 && b == a;
                    a = b;
                }
            }
            bad_bytes += ow->payload_sent != push_payload;
            /* the last iteration may also read the servers' BYE */
            bool wire_bad = ow->bytes_sent != ow->wire_sent ||
                            (ow->bytes_recv != ow->wire_recv && i + 1 < ITERS);
            bad_bytes += wire_bad;
            if (wire_bad)
                fprintf(stderr,
                        "iter %d worker %d: counted %llu/%llu bytes, the transport moved "
                        "%llu/%llu\n",
                        i, w, (unsigned long long)ow->bytes_sent,
                        (unsigned long long)ow->bytes_recv, (unsigned long long)ow->wire_sent,
                        (unsigned long long)ow->wire_recv);
            bad_bytes += ow->bytes_sent <= ow->payload_sent;
            if (ow->payload_sent != push_payload)
                fprintf(stderr, "iter %d worker %d: pushed %llu payload bytes, plan says %llu\n", i,
                        w, (unsigned long long)ow->payload_sent, (unsigned long long)push_payload);
        }
        gv_ps_average(acc, P, W);
        struct gv_ps_decision dec = {.level = o0->level,
                                     .theta_min = o0->theta_min,
                                     .cf_candidate = o0->cf_candidate,
                                     .cf_send = o0->cf};
        for (uint32_t s = 0; s < S; s++)
            if (down[s] != NULL)
                GV_CHECK_OK(
                    srv_down_apply(down[s], acc + map.lo[s], &dec, NULL, false, (uint64_t)i));
        /* values as halves where the downlink cut them in fp16 mode */
        enum gv_val_type uvt = down[0] != NULL && !dense ? vt : GV_VAL_F32;
        /* the update each server sends: the entries whose bits are not +0.0, per piece of a
         * dense round (one piece, the shard, otherwise) */
        uint64_t upd = 0, n_msgs = 0;
        for (uint32_t s = 0; s < S; s++) {
            uint64_t n = gv_shard_numel(&map, s);
            struct gv_ps_pieces lay = {.n = n, .base = n, .np = 1};
            if (dense)
                gv_job_pieces(job, n, &lay);
            h->n_pieces = GV_MAX(h->n_pieces, lay.np);
            n_msgs += lay.np;
            for (uint32_t k = 0; k < lay.np; k++) {
                uint64_t a = gv_ps_piece_lo(&lay, k), len = gv_ps_piece_hi(&lay, k) - a;
                const float *x = acc + map.lo[s] + a;
                uint32_t c = 0;
                for (uint32_t j = 0; j < len; j++) {
                    uint32_t bits;
                    memcpy(&bits, &x[j], 4);
                    if (bits != 0) {
                        sidx[c] = j;
                        sval[c++] = x[j];
                    }
                }
                upd += 2 * (uint64_t)c > len ? 4ull * len
                                             : plan_bytes(sidx, sval, c, (uint32_t)len, uvt);
            }
        }
        bool resync = false;
        for (int w = 0; w < W; w++)
            resync |= h->out[w][i].resynced;
        for (int w = 0; w < W && !resync; w++) {
            /* one message per piece: at least a prefix each */
            bad_bytes += h->out[w][i].bytes_recv - upd < n_msgs * GV_PROTO_PREFIX_LEN;
            bad_bytes += h->out[w][i].payload_recv != upd;
            if (h->out[w][i].payload_recv != upd)
                fprintf(stderr, "iter %d worker %d: received %llu payload bytes, expected %llu\n",
                        i, w, (unsigned long long)h->out[w][i].payload_recv,
                        (unsigned long long)upd);
        }
        float lr = gv_optim_lr(&job->optim, i);
        GV_CHECK(lr == h->out[0][i].lr);
        /* with --local-momentum without momentum here: the velocity was pushed */
        gv_optim_apply_host(&job->step_optim, lr, p, v, acc, P);
        if ((i + 1) % CKPT_EVERY == 0 && !dense_method)
            for (int w = 0; w < W; w++)
                check_resid_ckpt(h, w, (uint64_t)i + 1, resid[w], vel[w]);
    }
    for (uint32_t s = 0; s < S; s++)
        srv_down_destroy(down[s]);
    GV_CHECK_EQ(bad_bytes, 0);
    GV_CHECK_EQ(bad_dec, 0);
    for (int w = 0; w < W; w++) {
        GV_CHECK_MSG(memcmp(h->params[w], p, P * 4) == 0,
                     "worker %d's parameters differ from "
                     "the reference",
                     w);
        GV_CHECK_MSG(memcmp(h->mom[w], v, P * 4) == 0, "worker %d's momentum differs", w);
    }
    for (int s = 0; s < S; s++) {
        struct gv_ckpt_section sec[GV_SERVER_STATE_SECTIONS];
        size_t n;
        GV_CHECK_OK(gv_server_state_sections(h->srv[s], sec, GV_SERVER_STATE_SECTIONS, &n));
        GV_CHECK(sec[0].len == gv_shard_numel(&map, (uint32_t)s) * 4);
        GV_CHECK_MSG(memcmp(sec[0].data, p + map.lo[s], sec[0].len) == 0,
                     "server %d's shard differs from the reference", s);
        GV_CHECK(memcmp(sec[1].data, v + map.lo[s], sec[1].len) == 0);
    }
    for (int w = 0; w < W && !dense_method; w++) {
        for (uint32_t t = 0; t < U; t++) {
            gv_ef_destroy(rw[w].ef[t]);
            free(rw[w].lmin[t].idx), free(rw[w].lmin[t].val);
            free(rw[w].lcand[t].idx), free(rw[w].lcand[t].val);
        }
        gv_cmp_destroy(rw[w].cmp);
        free(resid[w]);
    }
    for (int w = 0; w < W; w++)
        free(vel[w]);
    gv_shard_map_cleanup(&map);
    free(p), free(v), free(acc), free(g), free(sidx), free(sval);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_worker_runtime: FAILED: the job hung (watchdog, 60 s)\n";
    if (write(2, msg, sizeof(msg) - 1) < 0)
        _exit(1);
    _exit(1);
}

static void run_case_delayed(const char *what, int argc, char **argv, int want_levels_changed,
                             int delay_w0_ms, int want_empty_late, uint32_t want_pieces)
{
    struct harness *h = calloc(1, sizeof(*h));
    fprintf(stderr, "---- %s\n", what);
    if (harness_setup(h, argc, argv) != 0) {
        free(h);
        return;
    }
    h->delay_w0_ms = delay_w0_ms;
    signal(SIGALRM, on_alarm);
    alarm(60); /* a lost push hangs every thread: fail instead of waiting for ctest's timeout */
    harness_run(h);
    alarm(0);
    for (int s = 0; s < S; s++)
        GV_CHECK_MSG(h->srv_status[s] == GV_OK, "%s: server %d: %s", what, s,
                     gv_status_str(h->srv_status[s]));
    for (int w = 0; w < W; w++) {
        GV_CHECK_MSG(h->w_status[w] == GV_OK, "%s: worker %d: %s", what, w,
                     gv_status_str(h->w_status[w]));
        GV_CHECK_EQ(h->steps[w], ITERS);
        GV_CHECK_EQ(h->sum[w].checksum_mismatches, 0);
    }
    if (h->steps[0] == ITERS) {
        reference(h);
        int changes = 0;
        for (int i = 1; i < ITERS; i++)
            changes += h->out[0][i].cf != h->out[0][i - 1].cf;
        if (want_levels_changed)
            GV_CHECK_MSG(changes > 0, "%s: the CF never changed", what);
        if (want_empty_late)
            GV_CHECK_MSG(h->empty_late_pushes > 0, "%s: no push without entries", what);
        if (want_pieces > 0)
            GV_CHECK_MSG(h->n_pieces == want_pieces, "%s: dense rounds came in %u pieces, not %u",
                         what, h->n_pieces, want_pieces);
    }
    harness_cleanup(h);
    free(h);
}

static void run_case(const char *what, int argc, char **argv, int want_levels_changed)
{
    run_case_delayed(what, argc, argv, want_levels_changed, 0, 0, 0);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "cuda") == 0) {
        struct gv_nn_backend *be = NULL;
        int ndev = 0;
        gv_status_t st = gv_nn_backend_create(GV_NN_CUDA, 0, &be);
        gv_nn_backend_destroy(be);
        if (st == GV_OK)
            st = gv_cmp_cuda_probe(&ndev);
        if (st == GV_ERR_UNSUPPORTED || st == GV_ERR_NODEV)
            GV_SKIP("no GPU worker possible here (%s)", gv_status_str(st));
        GV_CHECK_OK(st);
        mode = MODE_CUDA;
    }
    if (argc > 1 && strcmp(argv[1], "mirror") == 0)
        mode = MODE_MIRROR;
    char *dense[] = {"t",     "--dataset", "synthetic", "--widths",       "48,24", "--method",
                     "dense", "--lr",      "0.1",       "--weight-decay", "0.001"};
    run_case("dense", 11, dense, 0);
    char *stat[] = {"t",     "--dataset",  "synthetic",     "--widths",
                    "48,24", "--method",   "static",        "--cf",
                    "10",    "--nesterov", "--lr-schedule", "step:5,9@0.5"};
    run_case("static top-k CF 10 over the model, nesterov, step schedule", 12, stat, 0);
    char *tens[] = {"t",      "--dataset", "synthetic", "--widths",     "48,24", "--method",
                    "static", "--cf",      "10",        "--topk-scope", "tensor"};
    run_case("static top-k CF 10 per tensor", 11, tens, 0);
    char *fp16[] = {"t",        "--dataset", "synthetic", "--widths", "48,24",
                    "--method", "static",    "--cf",      "4",        "--fp16"};
    run_case("static CF 4, fp16 values", 10, fp16, 0);
    char *grv[] = {"t",        "--dataset",   "synthetic", "--widths",    "48,24",
                   "--method", "gravac-exp",  "--window",  "3",           "--epsilon",
                   "0.2",      "--theta-min", "4",         "--theta-max", "64"};
    run_case("gravac: candidate, floor and dense levels", 15, grv, 1);
    char *rk[] = {
        "t",          "--dataset",   "synthetic", "--widths",       "48,24", "--method",
        "gravac-geo", "--window",    "2",         "--epsilon",      "0.05",  "--compressor",
        "randomk",    "--theta-min", "2",         "--resync-every", "4"};
    run_case("gravac geometric, random-k, resync every 4", 17, rk, 1);
    char *dgc[] = {"t",      "--dataset", "synthetic", "--widths",     "48,24", "--method",
                   "static", "--cf",      "20",        "--compressor", "dgc"};
    run_case("static CF 20, DGC (variable counts)", 11, dgc, 0);
    char *rs[] = {"t",        "--dataset",    "synthetic", "--widths", "48,24",
                  "--method", "gravac-exp",   "--window",  "3",        "--epsilon",
                  "0.2",      "--compressor", "redsync"};
    if (mode != MODE_CUDA)
        run_case("gravac, Redsync", 13, rs, 0);
    /* one entry per tensor: server 0's shard lies inside fc1.w, so a worker whose fc1.w entry
     * falls in server 1's part pushes nothing to server 0; worker 0 is late, so those empty
     * pushes (which the transport delivers without asking on_header) arrive before their turn */
    char *empty[] = {"t",      "--dataset", "synthetic", "--widths",     "48,24", "--method",
                     "static", "--cf",      "100000",    "--topk-scope", "tensor"};
    run_case_delayed("static CF 100000: empty pushes before their turn", 11, empty, 0, 30, 1, 0);
    /* dense rounds in pieces of 1024 elements (3 per shard of 2273), worker 0 late so that the
     * others' pieces wait for their turn; and GraVAC's dense rounds in pieces, where the
     * servers' downlink residual goes out with them */
    char *pdense[] = {"t",     "--dataset",      "synthetic", "--widths",     "48,24", "--method",
                      "dense", "--weight-decay", "0.001",     "--piece-size", "4K"};
    run_case_delayed("dense in pieces", 11, pdense, 0, 20, 0, 3);
    char *pgrv[] = {
        "t",          "--dataset",   "synthetic", "--widths",     "48,24", "--method",
        "gravac-exp", "--window",    "3",         "--epsilon",    "0.2",   "--theta-min",
        "4",          "--theta-max", "64",        "--piece-size", "4K"};
    run_case_delayed("gravac with dense rounds in pieces", 17, pgrv, 1, 0, 0, 3);
    char *dmult[] = {"t",      "--dataset", "synthetic", "--widths",        "48,24", "--method",
                     "static", "--cf",      "20",        "--downlink-mult", "3"};
    run_case("static CF 20, a downlink of 3 pushes' k", 11, dmult, 0);
    { /* --local-momentum: the velocity on the host, or in the backend's memory (mirror, cuda) */
        char *lmd[] = {"t",     "--dataset",        "synthetic", "--widths",
                       "48,24", "--method",         "dense",     "--weight-decay",
                       "0.001", "--local-momentum", "--lr",      "0.1"};
        run_case("dense, momentum on the workers", 12, lmd, 0);
        char *lms[] = {"t",
                       "--dataset",
                       "synthetic",
                       "--widths",
                       "48,24",
                       "--method",
                       "static",
                       "--cf",
                       "10",
                       "--fp16",
                       "--weight-decay",
                       "0.001",
                       "--lr-schedule",
                       "step:5,9@0.5",
                       "--local-momentum"};
        run_case("static CF 10, fp16, momentum on the workers", 15, lms, 0);
        char *lmg[] = {"t",     "--dataset",   "synthetic",  "--widths",
                       "48,24", "--method",    "gravac-exp", "--window",
                       "3",     "--epsilon",   "0.2",        "--theta-min",
                       "4",     "--theta-max", "64",         "--local-momentum"};
        run_case("gravac levels, momentum on the workers", 16, lmg, 1);
    }
    return gv_check_summary();
}
