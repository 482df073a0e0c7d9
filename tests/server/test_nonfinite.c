/* test_nonfinite.c: a push with a non-finite value or statistic never reaches a replica (issue
 * 18, item 6). One server and a real worker 0 (threads of this process) and a hand-made,
 * authenticated worker 1 that pushes iteration 0 with a NaN value (sparse), +Inf in a dense
 * push, or an infinite statistic. Under the abort policy the job ends naming worker 1 and what
 * it sent; under the continue policy worker 1 is dropped, told why, and the job finishes with
 * worker 0, whose parameters are finite and equal the server's shard. */
#include "ps_test.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define W 2
#define STEPS 4

enum bad_kind { BAD_SPARSE_NAN, BAD_DENSE_INF, BAD_STATS_INF };

struct world {
    struct gv_job job;
    struct gv_cfg *cfg;
    char dir[64];
    struct gv_auth_secret none;
    struct gv_cluster scl, wcl;
    struct gv_server *srv;
    pthread_t sth;
    gv_status_t sres;
    size_t P, n_t, numel[16];
    char names[16][24];
    float *params, *grads, *mom;
    gv_status_t wstatus;
    int wsteps;
};

static int job_load(struct world *x, bool dense)
{
    static struct gv_opt_table tab;
    static struct gv_cfg_spec spec;
    char steps[16];
    snprintf(steps, sizeof(steps), "%d", STEPS);
    char *argv[] = {"t",
                    "--dataset",
                    "synthetic",
                    "--synthetic-n",
                    "1024",
                    "--widths",
                    "16",
                    "--batch",
                    "16",
                    "--lr",
                    "0.05",
                    "--steps",
                    steps,
                    "--method",
                    dense ? "dense" : "static",
                    "--cf",
                    "4"};
    tab = (struct gv_opt_table){gv_job_options, gv_job_options_n, &x->job};
    spec = (struct gv_cfg_spec){.program = "t", .tables = &tab, .n_tables = 1};
    return gv_cfg_create(&spec, &x->cfg) == GV_OK &&
                   gv_cfg_load(x->cfg, (int)GV_ARRAY_LEN(argv), argv, NULL) == GV_OK &&
                   gv_job_resolve(&x->job, W) == GV_OK
               ? 0
               : -1;
}

static void *srv_main(void *p)
{
    struct world *x = p;
    x->sres = gv_server_run(x->srv, NULL);
    return NULL;
}

static void *worker0_main(void *p)
{
    struct world *x = p;
    struct gv_worker_config wc = {
        .job = &x->job, .cluster = &x->wcl, .secret = &x->none, .verify_every = 1};
    struct gv_worker_model m =
        ps_test_model(x->params, x->grads, x->mom, x->P, (uint32_t)x->n_t, x->numel, x->names);
    struct gv_worker *w = NULL;
    x->wstatus = gv_worker_create(&wc, &m, &w);
    for (int i = 0; w != NULL && i < STEPS; i++) {
        for (size_t j = 0; j < x->P; j++)
            x->grads[j] = (float)((j * 7 + (size_t)i * 13) % 23) * 0.01f - 0.11f;
        struct gv_worker_step_in in = {.loss = 1, .compute_s = 0.001, .samples = 16};
        struct gv_worker_step_out out;
        x->wstatus = gv_worker_step(w, &in, &out);
        if (x->wstatus != GV_OK || out.stop)
            break;
        x->wsteps++;
    }
    if (w != NULL && x->wstatus == GV_OK)
        x->wstatus = gv_worker_finish(w, (uint64_t)x->wsteps);
    gv_worker_destroy(w);
    return NULL;
}

/* ---------------------------------------------------------------- the hand-made worker 1 */

struct fake {
    struct gv_tp *tp;
    struct gv_proto_caps caps;
    struct gv_proto_arena arena;
    unsigned char arena_buf[65536];
    struct gv_ps_link link;
    struct gv_ps_client_hs hs;
    bool decision, closed;
    uint64_t numel;
    char error[400]; /* the ERROR the server sent it */
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
    (void)c;
    struct fake *f = u;
    struct gv_proto_msg m;
    if (gv_proto_decode(msg, len, &f->caps, &f->arena, &m) != GV_OK)
        return;
    if (f->hs.state == GV_PS_CLIENT_HELLO_SENT || f->hs.state == GV_PS_CLIENT_AUTH_SENT) {
        GV_CHECK_OK(gv_ps_client_hs_on_msg(&f->hs, &f->link, &m));
        if (f->hs.state == GV_PS_CLIENT_WELCOMED)
            f->numel = f->hs.welcome.shard_numel;
        return;
    }
    if (m.type == GV_PROTO_MSG_DECISION)
        f->decision = true;
    if (m.type == GV_PROTO_MSG_ERROR)
        snprintf(f->error, sizeof(f->error), "%s", m.u.error.text ? m.u.error.text : "");
}

static void fk_close(struct gv_conn *c, gv_status_t reason, void *u)
{
    (void)c, (void)reason;
    struct fake *f = u;
    f->closed = true;
    f->link.c = NULL;
}

/* Joins, waits for the model and the first decision, pushes iteration 0 with the bad value,
 * then waits until the server has answered (an ERROR) or closed. */
static void fake_run(struct world *x, struct fake *f, enum bad_kind kind)
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
    struct gv_conn *c;
    GV_CHECK_OK(gv_tp_connect(f->tp, "127.0.0.1", gv_server_port(x->srv), &c));
    struct gv_ps_envelope env = {GV_PROTO_ROLE_WORKER, 1, 0};
    GV_CHECK_OK(gv_ps_link_init(&f->link, &f->caps, &env, 8, 4096));
    f->link.c = c;
    struct gv_ps_hello_info info = {.role = GV_PROTO_ROLE_WORKER,
                                    .rank = 1,
                                    .num_workers = W,
                                    .num_servers = 1,
                                    .cluster_id = "test",
                                    .secret = &x->none};
    GV_CHECK_OK(gv_ps_client_hs_start(&f->hs, &f->link, &info));
    uint64_t end = gv_now_ns() + 10000000000ull;
    while (gv_now_ns() < end && !f->decision && !f->closed)
        gv_tp_progress(f->tp, 10);
    GV_CHECK(f->decision);
    struct gv_proto_msg m;
    gv_proto_msg_init(&m, GV_PROTO_MSG_PUSH);
    m.role = GV_PROTO_ROLE_WORKER;
    m.rank = 1;
    m.iteration = 0;
    m.shard = 0;
    m.dtype = GV_PROTO_DTYPE_F32;
    m.numel = f->numel;
    m.u.push.stats.samples = 16;
    m.u.push.stats.loss = 1;
    m.u.push.stats.g_ef_sq = kind == BAD_STATS_INF ? INFINITY : 1.0;
    struct gv_iov pl[2];
    int npl;
    uint32_t idx[3] = {1, 3, 5};
    float val[3] = {0.5f, kind == BAD_SPARSE_NAN ? NAN : -0.25f, 0.125f};
    uint8_t ib[256], vb[64];
    float *dense = NULL;
    if (kind == BAD_DENSE_INF) {
        dense = calloc(f->numel, sizeof(float));
        dense[7] = INFINITY;
        m.cf = 1;
        m.nnz = f->numel;
        m.u.push.level = GV_PROTO_LEVEL_DENSE;
        gv_proto_seg_add(&m, GV_PROTO_SEG_DENSE, GV_PROTO_ENC_F32, f->numel, 4 * f->numel);
        pl[0] = (struct gv_iov){dense, 4 * f->numel};
        npl = 1;
    } else {
        struct gv_sparse sp = {
            .idx = idx, .val = val, .cap = 3, .count = 3, .n = (uint32_t)f->numel};
        struct gv_sparse_layout lay;
        GV_CHECK_OK(
            gv_sparse_encode(&sp, GV_VAL_F32, GV_IDX_RAW32, ib, sizeof(ib), vb, sizeof(vb), &lay));
        m.cf = 4;
        m.nnz = 3;
        m.u.push.level = GV_PROTO_LEVEL_FLOOR;
        m.u.push.index_enc = GV_PROTO_ENC_U32;
        gv_proto_seg_add(&m, GV_PROTO_SEG_INDICES, GV_PROTO_ENC_U32, 3, lay.idx_len);
        gv_proto_seg_add(&m, GV_PROTO_SEG_VALUES, GV_PROTO_ENC_F32, 3, lay.val_len);
        pl[0] = (struct gv_iov){ib, lay.idx_len};
        pl[1] = (struct gv_iov){vb, lay.val_len};
        npl = 2;
    }
    GV_CHECK_OK(gv_ps_link_send(&f->link, &m, pl, npl, NULL));
    end = gv_now_ns() + 10000000000ull;
    while (gv_now_ns() < end && f->error[0] == '\0' && !f->closed)
        gv_tp_progress(f->tp, 10);
    gv_tp_destroy(f->tp);
    gv_ps_link_cleanup(&f->link);
    free(dense);
}

/* ---------------------------------------------------------------- the runs */

static int world_start(struct world *x, bool dense, enum gv_dead_policy policy)
{
    memset(x, 0, sizeof(*x));
    if (job_load(x, dense) != 0)
        return -1;
    snprintf(x->dir, sizeof(x->dir), "/tmp/gv_test_nonfinite_XXXXXX");
    if (mkdtemp(x->dir) == NULL)
        return -1;
    ps_test_cluster_init(&x->scl, x->dir, 0, GV_ROLE_SERVER, 1, W, 10000000000ull, 5000000000ull);
    struct gv_server_config sc = {.job = &x->job,
                                  .cluster = &x->scl,
                                  .secret = &x->none,
                                  .handshake_timeout_ns = 5000000000ull,
                                  .dead_policy = policy,
                                  .min_workers = 1};
    if (gv_server_create(&sc, &x->srv) != GV_OK)
        return -1;
    pthread_create(&x->sth, NULL, srv_main, x);
    ps_test_cluster_init(&x->wcl, x->dir, 0, GV_ROLE_WORKER, 1, W, 10000000000ull, 5000000000ull);
    uint32_t T = 0;
    GV_CHECK_OK(gv_job_layout(&x->job, x->names, x->numel, 16, &T));
    x->n_t = T;
    for (uint32_t i = 0; i < T; i++)
        x->P += x->numel[i];
    x->params = calloc(x->P, 4);
    x->grads = calloc(x->P, 4);
    x->mom = calloc(x->P, 4);
    return 0;
}

static void world_free(struct world *x)
{
    gv_server_destroy(x->srv);
    gv_cfg_destroy(x->cfg);
    free(x->params), free(x->grads), free(x->mom);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", x->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", x->dir);
}

static void run(enum bad_kind kind, enum gv_dead_policy policy, const char *what)
{
    static struct world x;
    static struct fake f;
    memset(&f, 0, sizeof(f));
    log_clear();
    bool dense = kind == BAD_DENSE_INF;
    GV_CHECK(world_start(&x, dense, policy) == 0);
    pthread_t wt;
    pthread_create(&wt, NULL, worker0_main, &x);
    fake_run(&x, &f, kind);
    pthread_join(wt, NULL);
    pthread_join(x.sth, NULL);
    fprintf(stderr, "worker 1 was told: %s\n", f.error);
    /* the server names worker 1 and what it sent, and so does what worker 1 was told */
    GV_CHECK_MSG(log_has("worker 1 (") && log_has(what), "the log does not name '%s'", what);
    GV_CHECK_MSG(strstr(f.error, what) != NULL, "worker 1 was told '%s'", f.error);
    if (policy == GV_DEAD_ABORT) {
        /* the job ends, naming it: worker 0 learns it from the server */
        GV_CHECK(x.sres != GV_OK);
        GV_CHECK_STATUS(x.wstatus, GV_ERR_CLOSED);
        GV_CHECK(log_has("the dead-worker policy is abort"));
        GV_CHECK(log_has("worker 0: server 0 (") && log_has("ended the job with an error"));
    } else {
        /* the job goes on with worker 0 alone, every step, and nothing non-finite landed */
        GV_CHECK(log_has("continuing without it"));
        GV_CHECK_OK(x.wstatus);
        GV_CHECK_EQ(x.wsteps, STEPS);
        GV_CHECK_OK(x.sres);
        struct gv_ckpt_section sec[GV_SERVER_STATE_SECTIONS];
        size_t n;
        GV_CHECK_OK(gv_server_state_sections(x.srv, sec, GV_SERVER_STATE_SECTIONS, &n));
        const float *shard = sec[0].data;
        size_t bad = 0;
        for (size_t j = 0; j < x.P; j++)
            bad += !isfinite(shard[j]) || !isfinite(x.params[j]);
        GV_CHECK_EQ(bad, 0);
        GV_CHECK(memcmp(shard, x.params, x.P * 4) == 0);
        struct gv_server_summary sum;
        gv_server_get_summary(x.srv, &sum);
        GV_CHECK_EQ(sum.workers_left, 1);
        GV_CHECK_EQ(sum.iterations, STEPS);
    }
    world_free(&x);
}

int main(void)
{
    gv_log_set_cb(log_cb, NULL);
    run(BAD_SPARSE_NAN, GV_DEAD_ABORT, "pushed a non-finite gradient (NaN at entry 1 of 3)");
    run(BAD_DENSE_INF, GV_DEAD_CONTINUE, "pushed a non-finite gradient (+Inf at entry 7 of");
    run(BAD_STATS_INF, GV_DEAD_ABORT,
        "pushed a non-finite statistic (statistic ||g_ef||^2 = inf (must be finite and >= 0))");
    run(BAD_SPARSE_NAN, GV_DEAD_CONTINUE, "pushed a non-finite gradient (NaN at entry 1 of 3)");
    gv_log_set_cb(NULL, NULL);
    return gv_check_summary();
}
