/* test_membership.c: the round membership of the continue policy, made deterministic in one
 * process: 2 servers (threads), a real worker 0 (the runtime, in a thread) and a hand-made
 * worker 1 that joins both servers, pushes its gradient of iteration 0 to server 1 only, and
 * disconnects. The servers must agree that worker 1 is a member of round 0 (its push reached a
 * server): server 1 adds it, server 0 counts it as a zero gradient, and both divide by 2. From
 * round 1 on the job goes on with worker 0 alone (divided by 1). Checked exactly: worker 0's
 * averaged gradient of iteration 0 is its own sent values / 2 on shard 0, worker 1's values /
 * 2 where only worker 1 pushed on shard 1, and worker 0's own / 1 in iteration 1; its
 * parameters equal the servers' shards at the end; the logs say who was dropped. Also: with
 * --min-workers 2 the same death aborts the job, naming the limit. */
#include "ps_test.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define W 2
#define S 2
#define STEPS 3

struct world {
    struct gv_job job;
    struct gv_cfg *cfg;
    char dir[64];
    struct gv_auth_secret none;
    struct gv_cluster scl[S], wcl;
    struct gv_server *srv[S];
    pthread_t sth[S];
    gv_status_t sres[S];
    uint32_t min_workers;
    bool pieces; /* the dense job in pieces */
    /* worker 0 */
    size_t P, n_t, numel[16];
    char names[16][24];
    float *params, *grads, *mom, *g_in[STEPS], *avg[STEPS];
    gv_status_t wstatus;
    int wsteps;
};

/* The job: top-k at CF 4 on a small MLP, or (pieces) dense rounds in pieces of 1024 elements
 * on a larger one (3 pieces per shard). */
static int job_load(struct world *x)
{
    static struct gv_opt_table tab;
    static struct gv_cfg_spec spec;
    /* f32 values: the test compares the averages with what was sent, exactly */
    char *argv[] = {"t",      "--dataset", "synthetic", "--synthetic-n", "1024", "--widths",
                    "16",     "--batch",   "16",        "--lr",          "0.05", "--method",
                    "static", "--cf",      "4",         "--steps",       "3",    "--no-fp16"};
    char *pargv[] = {"t",     "--dataset",    "synthetic", "--synthetic-n", "1024", "--widths",
                     "64",    "--batch",      "16",        "--lr",          "0.05", "--method",
                     "dense", "--piece-size", "4K",        "--steps",       "3"};
    tab = (struct gv_opt_table){gv_job_options, gv_job_options_n, &x->job};
    spec = (struct gv_cfg_spec){.program = "t", .tables = &tab, .n_tables = 1};
    return gv_cfg_create(&spec, &x->cfg) == GV_OK &&
                   gv_cfg_load(x->cfg,
                               x->pieces ? (int)GV_ARRAY_LEN(pargv) : (int)GV_ARRAY_LEN(argv),
                               x->pieces ? pargv : argv, NULL) == GV_OK &&
                   gv_job_resolve(&x->job, W) == GV_OK
               ? 0
               : -1;
}

static void cluster_init(struct gv_cluster *cl, const char *dir, int rank, enum gv_role role)
{
    ps_test_cluster_init(cl, dir, rank, role, S, W, 10000000000ull, 5000000000ull);
}

struct sarg {
    struct world *x;
    int s;
};

static void *srv_main(void *p)
{
    struct sarg *a = p;
    a->x->sres[a->s] = gv_server_run(a->x->srv[a->s], NULL);
    return NULL;
}

/* worker 0's gradient: nonzero everywhere except at worker 1's entries on shard 1 */
static bool fake_index(const struct world *x, size_t j, uint64_t lo1)
{
    (void)x;
    return j == lo1 + 1 || j == lo1 + 3 || j == lo1 + 5;
}
static const float fake_val[3] = {0.5f, -0.25f, 0.125f};

static void *worker0_main(void *p)
{
    struct world *x = p;
    struct gv_worker_config wc = {
        .job = &x->job, .cluster = &x->wcl, .secret = &x->none, .verify_every = 1};
    struct gv_worker_model m =
        ps_test_model(x->params, x->grads, x->mom, x->P, (uint32_t)x->n_t, x->numel, x->names);
    struct gv_worker *w = NULL;
    x->wstatus = gv_worker_create(&wc, &m, &w);
    uint64_t lo1 = x->P / 2; /* the shard map over 2 servers: [0, P/2), [P/2, P) */
    for (int i = 0; w != NULL && i < STEPS; i++) {
        for (size_t j = 0; j < x->P; j++)
            x->grads[j] = fake_index(x, j, lo1)
                              ? 0.0f
                              : (float)((j * 7 + (size_t)i * 13) % 23) * 0.01f - 0.11f;
        memcpy(x->g_in[i], x->grads, x->P * sizeof(float));
        struct gv_worker_step_in in = {.loss = 1, .compute_s = 0.001, .samples = 16};
        struct gv_worker_step_out out;
        x->wstatus = gv_worker_step(w, &in, &out);
        if (x->wstatus != GV_OK || out.stop)
            break;
        memcpy(x->avg[i], x->grads, x->P * sizeof(float));
        x->wsteps++;
    }
    if (w != NULL && x->wstatus == GV_OK)
        gv_worker_finish(w, (uint64_t)x->wsteps);
    gv_worker_destroy(w);
    return NULL;
}

/* ---------------------------------------------------------------- the hand-made worker 1 */

struct fake {
    struct gv_tp *tp;
    struct gv_proto_caps caps;
    struct gv_proto_arena arena;
    unsigned char arena_buf[65536];
    struct conn {
        struct gv_ps_link link;
        struct gv_ps_client_hs hs;
        bool decision, closed;
        uint64_t numel;
    } c[S];
};

static gv_status_t fk_prefix(const void *p, uint32_t *h, uint64_t *l, void *u)
{
    return gv_proto_parse_prefix(p, &((struct fake *)u)->caps, h, l);
}

static gv_status_t fk_header(struct gv_conn *c, const void *m, size_t n, uint64_t pl,
                             struct gv_iov *dst, int *cnt, void *u)
{
    (void)c, (void)m, (void)n, (void)u;
    dst[0] = (struct gv_iov){NULL, pl}; /* the model: not needed */
    *cnt = 1;
    return GV_OK;
}

static void fk_msg(struct gv_conn *c, const void *msg, size_t len, void *u)
{
    struct fake *f = u;
    struct conn *k = c->user;
    struct gv_proto_msg m;
    if (gv_proto_decode(msg, len, &f->caps, &f->arena, &m) != GV_OK)
        return;
    if (k->hs.state == GV_PS_CLIENT_HELLO_SENT || k->hs.state == GV_PS_CLIENT_AUTH_SENT) {
        GV_CHECK_OK(gv_ps_client_hs_on_msg(&k->hs, &k->link, &m));
        if (k->hs.state == GV_PS_CLIENT_WELCOMED)
            k->numel = k->hs.welcome.shard_numel;
        return;
    }
    if (m.type == GV_PROTO_MSG_DECISION)
        k->decision = true;
}

static void fk_close(struct gv_conn *c, gv_status_t reason, void *u)
{
    (void)reason, (void)u;
    struct conn *k = c->user;
    k->closed = true;
    k->link.c = NULL;
}

static void fake_push_sparse(struct fake *f);
static void fake_push_piece(struct world *x, struct fake *f);

static void fake_run(struct world *x, struct fake *f)
{
    struct gv_tp_config tc;
    gv_ps_caps(&f->caps, &tc, 5000000000ull, 5000000000ull);
    gv_proto_arena_init(&f->arena, f->arena_buf, sizeof(f->arena_buf));
    struct gv_tp_handler h = {.prefix_len = GV_PROTO_PREFIX_LEN,
                              .parse_prefix = fk_prefix,
                              .on_header = fk_header,
                              .on_msg = fk_msg,
                              .on_close = fk_close};
    GV_CHECK_OK(gv_tp_create("tcp", &tc, &h, f, &f->tp));
    for (int s = 0; s < S; s++) {
        struct gv_conn *c;
        GV_CHECK_OK(gv_tp_connect(f->tp, "127.0.0.1", gv_server_port(x->srv[s]), &c));
        c->user = &f->c[s];
        struct gv_ps_envelope env = {GV_PROTO_ROLE_WORKER, 1, (uint32_t)s};
        GV_CHECK_OK(gv_ps_link_init(&f->c[s].link, &f->caps, &env, 8, 4096));
        f->c[s].link.c = c;
        struct gv_ps_hello_info info = {.role = GV_PROTO_ROLE_WORKER,
                                        .rank = 1,
                                        .num_workers = W,
                                        .num_servers = S,
                                        .cluster_id = "test",
                                        .secret = &x->none};
        GV_CHECK_OK(gv_ps_client_hs_start(&f->c[s].hs, &f->c[s].link, &info));
    }
    uint64_t end = gv_now_ns() + 10000000000ull;
    while (gv_now_ns() < end && !(f->c[0].decision && f->c[1].decision))
        gv_tp_progress(f->tp, 10);
    GV_CHECK(f->c[0].decision && f->c[1].decision);
    if (x->pieces) {
        fake_push_piece(x, f);
    } else {
        fake_push_sparse(f);
    }
    end = gv_now_ns() + 2000000000ull;
    while (gv_now_ns() < end && !gv_ps_link_idle(&f->c[1].link))
        gv_tp_progress(f->tp, 10);
    /* then it dies: both connections close (nothing unread: an orderly close, not a reset) */
    gv_tp_destroy(f->tp);
    for (int s = 0; s < S; s++)
        gv_ps_link_cleanup(&f->c[s].link);
}

/* The push of iteration 0 to server 1 only: three entries, shard-relative 1, 3, 5. */
static void fake_push_sparse(struct fake *f)
{
    uint32_t idx[3] = {1, 3, 5};
    float val[3];
    memcpy(val, fake_val, sizeof(val));
    struct gv_sparse sp = {
        .idx = idx, .val = val, .cap = 3, .count = 3, .n = (uint32_t)f->c[1].numel};
    uint8_t ib[256], vb[64];
    struct gv_sparse_layout info;
    GV_CHECK_OK(
        gv_sparse_encode(&sp, GV_VAL_F32, GV_IDX_RAW32, ib, sizeof(ib), vb, sizeof(vb), &info));
    struct gv_proto_msg m;
    gv_proto_msg_init(&m, GV_PROTO_MSG_PUSH);
    m.role = GV_PROTO_ROLE_WORKER;
    m.rank = 1;
    m.iteration = 0;
    m.shard = 1;
    m.dtype = GV_PROTO_DTYPE_F32;
    m.numel = f->c[1].numel;
    m.nnz = 3;
    m.cf = 4;
    m.u.push.level = GV_PROTO_LEVEL_FLOOR;
    m.u.push.index_enc = GV_PROTO_ENC_U32;
    gv_proto_seg_add(&m, GV_PROTO_SEG_INDICES, GV_PROTO_ENC_U32, 3, info.idx_len);
    gv_proto_seg_add(&m, GV_PROTO_SEG_VALUES, GV_PROTO_ENC_F32, 3, info.val_len);
    struct gv_iov pl[2] = {{ib, info.idx_len}, {vb, info.val_len}};
    GV_CHECK_OK(gv_ps_link_send(&f->c[1].link, &m, pl, 2, NULL));
}

/* Dense rounds in pieces: piece 1 of worker 1's dense push of iteration 0, to server 1 only. */
static float fake_piece_val(size_t j)
{
    return (float)((int)(j % 29) - 14) * 0.015625f;
}

static void fake_push_piece(struct world *x, struct fake *f)
{
    static float v[GV_PS_CKSUM_BLOCK * 4];
    struct gv_ps_pieces lay;
    gv_job_pieces(&x->job, f->c[1].numel, &lay);
    GV_CHECK(lay.np == 3);
    uint64_t a = gv_ps_piece_lo(&lay, 1), len = gv_ps_piece_hi(&lay, 1) - a;
    for (uint64_t j = 0; j < len; j++)
        v[j] = fake_piece_val(a + j);
    struct gv_proto_msg m;
    gv_proto_msg_init(&m, GV_PROTO_MSG_PUSH);
    m.role = GV_PROTO_ROLE_WORKER;
    m.rank = 1;
    m.iteration = 0;
    m.shard = 1;
    m.dtype = GV_PROTO_DTYPE_F32;
    m.numel = len;
    m.offset = a;
    m.nnz = len;
    m.cf = 1;
    m.u.push.level = GV_PROTO_LEVEL_DENSE;
    gv_proto_seg_add(&m, GV_PROTO_SEG_DENSE, GV_PROTO_ENC_F32, len, 4 * len);
    struct gv_iov pl = {v, 4 * len};
    GV_CHECK_OK(gv_ps_link_send(&f->c[1].link, &m, &pl, 1, NULL));
}

/* ---------------------------------------------------------------- the runs */

static int world_start(struct world *x, uint32_t min_workers, bool pieces)
{
    memset(x, 0, sizeof(*x));
    x->min_workers = min_workers;
    x->pieces = pieces;
    if (job_load(x) != 0)
        return -1;
    snprintf(x->dir, sizeof(x->dir), "/tmp/gv_test_memb_XXXXXX");
    if (mkdtemp(x->dir) == NULL)
        return -1;
    for (int s = 0; s < S; s++) {
        cluster_init(&x->scl[s], x->dir, s, GV_ROLE_SERVER);
        struct gv_server_config sc = {.job = &x->job,
                                      .cluster = &x->scl[s],
                                      .secret = &x->none,
                                      .handshake_timeout_ns = 5000000000ull,
                                      .dead_policy = GV_DEAD_CONTINUE,
                                      .min_workers = min_workers};
        if (gv_server_create(&sc, &x->srv[s]) != GV_OK)
            return -1;
    }
    static struct sarg args[S];
    for (int s = 0; s < S; s++) {
        args[s] = (struct sarg){x, s};
        pthread_create(&x->sth[s], NULL, srv_main, &args[s]);
    }
    cluster_init(&x->wcl, x->dir, 0, GV_ROLE_WORKER);
    uint32_t T = 0;
    GV_CHECK_OK(gv_job_layout(&x->job, x->names, x->numel, 16, &T));
    x->n_t = T;
    for (uint32_t i = 0; i < T; i++)
        x->P += x->numel[i];
    x->params = calloc(x->P, 4);
    x->grads = calloc(x->P, 4);
    x->mom = calloc(x->P, 4);
    for (int i = 0; i < STEPS; i++) {
        x->g_in[i] = calloc(x->P, 4);
        x->avg[i] = calloc(x->P, 4);
    }
    return 0;
}

static void world_end(struct world *x)
{
    for (int s = 0; s < S; s++)
        pthread_join(x->sth[s], NULL);
}

static void world_free(struct world *x)
{
    for (int s = 0; s < S; s++)
        gv_server_destroy(x->srv[s]);
    gv_cfg_destroy(x->cfg);
    free(x->params), free(x->grads), free(x->mom);
    for (int i = 0; i < STEPS; i++)
        free(x->g_in[i]), free(x->avg[i]);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", x->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", x->dir);
}

static void test_partial_push(void)
{
    static struct world x;
    static struct fake f;
    GV_CHECK(world_start(&x, 1, false) == 0);
    pthread_t wt;
    pthread_create(&wt, NULL, worker0_main, &x);
    fake_run(&x, &f);
    pthread_join(wt, NULL);
    world_end(&x);
    GV_CHECK_OK(x.wstatus);
    GV_CHECK_EQ(x.wsteps, STEPS);
    GV_CHECK_OK(x.sres[0]);
    GV_CHECK_OK(x.sres[1]);
    GV_CHECK(log_has("server 0: iteration 0: worker 1's push reached some servers only: it counts "
                     "in the average (over 2), as a zero gradient where it is missing"));
    GV_CHECK(log_has("server 1: worker 1 (") && log_has("continuing without it"));
    uint64_t lo1 = x.P / 2; /* shard 1 = [P/2, P) */
    /* iteration 0: shard 0 holds worker 0's sent entries / 2 (worker 1 counts, as a zero);
     * shard 1 also holds worker 1's three entries / 2 */
    size_t seen0 = 0;
    for (size_t j = 0; j < lo1; j++)
        if (x.avg[0][j] != 0.0f) {
            seen0++;
            GV_CHECK_MSG(x.avg[0][j] == x.g_in[0][j] / 2.0f,
                         "shard 0 entry %zu: %g, worker 0 "
                         "sent %g",
                         j, (double)x.avg[0][j], (double)x.g_in[0][j]);
        }
    GV_CHECK(seen0 > 0);
    for (int k = 0; k < 3; k++) {
        size_t j = lo1 + (size_t)(1 + 2 * k);
        GV_CHECK_MSG(x.avg[0][j] == fake_val[k] / 2.0f, "worker 1's entry %zu: %g", j,
                     (double)x.avg[0][j]);
    }
    /* iteration 1: worker 0 alone, divided by 1 */
    size_t seen1 = 0;
    for (size_t j = 0; j < x.P; j++)
        if (x.avg[1][j] != 0.0f) {
            seen1++;
            float g = x.g_in[1][j];
            /* its sent value: the gradient plus error feedback, at most; exactly g where the
             * residual is zero, which is where iteration 0 sent the entry */
            if (x.avg[0][j] != 0.0f && j < lo1)
                GV_CHECK_MSG(x.avg[1][j] == g, "iteration 1 entry %zu: %g, sent %g", j,
                             (double)x.avg[1][j], (double)g);
        }
    GV_CHECK(seen1 > 0);
    /* the replica equals the servers' shards */
    for (int s = 0; s < S; s++) {
        struct gv_ckpt_section sec[GV_SERVER_STATE_SECTIONS];
        size_t n;
        GV_CHECK_OK(gv_server_state_sections(x.srv[s], sec, GV_SERVER_STATE_SECTIONS, &n));
        size_t off = s == 0 ? 0 : lo1;
        GV_CHECK(memcmp(sec[0].data, x.params + off, sec[0].len) == 0);
        struct gv_server_summary sum;
        gv_server_get_summary(x.srv[s], &sum);
        GV_CHECK_EQ(sum.workers_left, 1);
        GV_CHECK_EQ(sum.iterations, STEPS);
    }
    world_free(&x);
}

/* The same death in a dense job whose rounds travel in pieces: worker 1 pushed one piece of
 * server 1's shard and died. Its piece counts (the round averages over 2 on both servers, its
 * other pieces and shard 0 count as zero), the pieces are stepped at the round's end, and from
 * iteration 1 on worker 0 is alone. */
static void test_partial_pieces(void)
{
    static struct world x;
    static struct fake f;
    memset(&f, 0, sizeof(f));
    GV_CHECK(world_start(&x, 1, true) == 0);
    pthread_t wt;
    pthread_create(&wt, NULL, worker0_main, &x);
    fake_run(&x, &f);
    pthread_join(wt, NULL);
    world_end(&x);
    GV_CHECK_OK(x.wstatus);
    GV_CHECK_EQ(x.wsteps, STEPS);
    GV_CHECK_OK(x.sres[0]);
    GV_CHECK_OK(x.sres[1]);
    GV_CHECK(log_has("worker 1's push reached some servers only: it counts in the average "
                     "(over 2)"));
    uint64_t lo1 = x.P / 2;
    struct gv_ps_pieces lay;
    gv_job_pieces(&x.job, x.P - lo1, &lay);
    uint64_t a = lo1 + gv_ps_piece_lo(&lay, 1), b = lo1 + gv_ps_piece_hi(&lay, 1);
    int bad0 = 0, bad1 = 0;
    for (size_t j = 0; j < x.P; j++) {
        float s = 0.0f;
        s += x.g_in[0][j];
        if (j >= a && j < b)
            s += fake_piece_val(j - lo1);
        float want = s / 2.0f;
        bad0 += memcmp(&x.avg[0][j], &want, 4) != 0;
        float alone = (0.0f + x.g_in[1][j]) / 1.0f;
        bad1 += memcmp(&x.avg[1][j], &alone, 4) != 0;
    }
    GV_CHECK_EQ(bad0, 0);
    GV_CHECK_EQ(bad1, 0);
    for (int s = 0; s < S; s++) {
        struct gv_ckpt_section sec[GV_SERVER_STATE_SECTIONS];
        size_t n;
        GV_CHECK_OK(gv_server_state_sections(x.srv[s], sec, GV_SERVER_STATE_SECTIONS, &n));
        size_t off = s == 0 ? 0 : lo1;
        GV_CHECK(memcmp(sec[0].data, x.params + off, sec[0].len) == 0);
    }
    world_free(&x);
}

static void test_min_workers(void)
{
    static struct world x;
    static struct fake f;
    memset(&f, 0, sizeof(f));
    GV_CHECK(world_start(&x, 2, false) == 0);
    pthread_t wt;
    pthread_create(&wt, NULL, worker0_main, &x);
    fake_run(&x, &f);
    pthread_join(wt, NULL);
    world_end(&x);
    GV_CHECK_STATUS(x.wstatus, GV_ERR_CLOSED);
    GV_CHECK(x.sres[0] != GV_OK && x.sres[1] != GV_OK);
    GV_CHECK(log_has("only 1 of 2 workers are left after iteration 0 and at least 2 are needed "
                     "(--min-workers)"));
    world_free(&x);
}

int main(void)
{
    gv_log_set_cb(log_cb, NULL);
    test_partial_push();
    test_partial_pieces();
    test_min_workers();
    gv_log_set_cb(NULL, NULL);
    return gv_check_summary();
}
