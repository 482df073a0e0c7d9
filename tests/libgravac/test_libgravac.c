/* test_libgravac.c: libgravac's interface (gravac.h) as a training program uses it: servers in
 * threads of this process (gv_server), workers in threads calling the shared library.
 *  - the caller's optimizer (--optimizer caller): after every step each worker's gradient
 *    buffer holds the servers' average bit for bit (dense: (g0 + g1) / 2 as a server computes
 *    it), every worker starts from worker 0's parameters, and replicas that the caller steps
 *    alike stay bitwise equal, also compressed (static top-k, GraVAC);
 *  - the job's SGD (--optimizer job): the runtime steps the parameters, replicas equal;
 *  - a worker with another layout is refused, the first differing tensor named, and the job
 *    ends for the other worker too;
 *  - a worker whose parameters drift (changed behind the optimizer's back) stops the job, the
 *    servers naming both workers;
 *  - gravac_fail: the other worker's step fails with the reason;
 *  - a worker that finishes long after the others (its script evaluates) ends the job cleanly;
 *  - misuse: bad tensors, calls out of order, options libgravac refuses. */
#include "check.h"
#include "gravac.h"
#include "gv_server.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define W 2
#define ITERS 12
#define MAXN 4096

static const int64_t shape_a[] = {24, 40}, shape_b[] = {40}, shape_c[] = {3, 4, 5};
#define NUMEL (24 * 40 + 40 + 60)

struct job {
    char dir[64];
    const char *method_args[8];
    int n_method;
    bool sgd;       /* --optimizer job */
    int bad_layout; /* this worker registers another shape (-1: none) */
    int drift;      /* this worker changes a parameter after iteration 3 (-1: none) */
    int fail;       /* this worker calls gravac_fail after iteration 2 (-1: none) */
    int late;       /* this worker takes 6.5 s after its last step to finish (-1: none) */
    int S;
    /* results */
    gravac_status start_st[W], step_st[W];
    int steps[W];
    char err[W][1024];
    float params[W][NUMEL + 1], grads[W][NUMEL + 1]; /* + 1: the other layout's extra element */
    bool dense;
    bool stray_layout; /* a connection that never authenticated sends LAYOUTs first */
    bool long_names;   /* names long enough that the abort's text exceeds the wire's cap */
    float avg_ok[W];   /* 1: every step's average was bit-exact */
    float init_ok[W];
    gv_status_t srv_st[4];
    double t_finish[W], t_srv_end[4]; /* when each worker finished, each server returned */
};

static float gen(int w, int i, int j)
{
    uint32_t x = (uint32_t)(w * 7919 + i * 104729 + j * 31) * 2654435761u;
    return (float)((int)(x >> 16) % 2001 - 1000) * 1e-3f;
}

struct wk_arg {
    struct job *jb;
    int w;
};

static void *wk_thread(void *p)
{
    struct wk_arg *a = p;
    struct job *jb = a->jb;
    int w = a->w;
    char rank[32], dir[96], servers[32];
    snprintf(rank, sizeof(rank), "--rank=%d", w);
    snprintf(dir, sizeof(dir), "--rendezvous-dir=%s", jb->dir);
    snprintf(servers, sizeof(servers), "--num-servers=%d", jb->S);
    const char *argv[24] = {"test",
                            rank,
                            dir,
                            servers,
                            "--num-workers=2",
                            "--insecure",
                            "--connect-timeout=20s",
                            "--cluster-id=test"};
    int argc = 8;
    for (int k = 0; k < jb->n_method; k++)
        argv[argc++] = jb->method_args[k];
    if (jb->sgd)
        argv[argc++] = "--optimizer=job";
    struct gravac *g = NULL;
    gravac_status st = gravac_create(argc, argv, &g);
    jb->start_st[w] = st;
    if (st != GRAVAC_OK)
        return NULL;
    float *P = jb->params[w], *G = jb->grads[w];
    for (int j = 0; j < NUMEL; j++)
        P[j] = w == 0 ? gen(9, 0, j) : 1e6f; /* only worker 0's start counts */
    static const char *const long_bias = "encoder.layers.11.self_attention.multi_head_attention."
                                         "query_key_value_projection.bias_of_a_very_long_name";
    gravac_add_tensor(g, "a.weight", 2, shape_a);
    gravac_add_tensor(g, jb->long_names ? long_bias : "a.bias", 1,
                      jb->bad_layout == w ? (const int64_t[]){41} : shape_b);
    gravac_add_tensor(g, "c", 3, shape_c);
    st = gravac_start(g, P, G, jb->bad_layout == w ? NUMEL + 1 : NUMEL);
    jb->start_st[w] = st;
    if (st != GRAVAC_OK) {
        snprintf(jb->err[w], sizeof(jb->err[w]), "%s", gravac_last_error());
        gravac_destroy(g);
        return NULL;
    }
    jb->init_ok[w] = 1;
    for (int j = 0; j < NUMEL; j++)
        if (P[j] != gen(9, 0, j))
            jb->init_ok[w] = 0;
    jb->avg_ok[w] = 1;
    for (int i = 0; i < ITERS; i++) {
        for (int j = 0; j < NUMEL; j++)
            G[j] = gen(w, i, j);
        struct gravac_step_info info;
        st = gravac_step(g, 1.0, 0.001, 16, &info);
        if (st != GRAVAC_OK) {
            snprintf(jb->err[w], sizeof(jb->err[w]), "%s", gravac_last_error());
            break;
        }
        if (info.iteration != (uint64_t)i || info.dense_bytes != 4 * NUMEL)
            jb->avg_ok[w] = 0;
        if (jb->dense) { /* the server's average, exactly */
            for (int j = 0; j < NUMEL; j++) {
                float want = (0.0f + gen(0, i, j) + gen(1, i, j)) / 2.0f;
                if (memcmp(&G[j], &want, 4) != 0)
                    jb->avg_ok[w] = 0;
            }
        }
        if (!jb->sgd) /* the caller's optimizer: plain SGD here */
            for (int j = 0; j < NUMEL; j++)
                P[j] -= 0.1f * G[j];
        if (jb->drift == w && i == 3)
            P[NUMEL - 1] += 1e-3f;
        if (jb->fail == w && i == 2) {
            gravac_fail(g, "ValueError: the test's own failure");
            st = GRAVAC_ERR_CLOSED;
            break;
        }
        jb->steps[w]++;
    }
    jb->step_st[w] = st;
    if (jb->late == w) /* a script that evaluates or saves after its last step */
        usleep(6500000);
    jb->t_finish[w] = gv_now_s();
    if (st == GRAVAC_OK)
        gravac_finish(g);
    gravac_destroy(g);
    return NULL;
}

struct srv_arg {
    struct job *jb;
    struct gv_server *srv;
    int s;
};

static void *srv_thread(void *p)
{
    struct srv_arg *a = p;
    a->jb->srv_st[a->s] = gv_server_run(a->srv, NULL);
    a->jb->t_srv_end[a->s] = gv_now_s();
    return NULL;
}

/* The job's options as the servers read them (the same table every program uses). */
static void run_job(struct job *jb)
{
    snprintf(jb->dir, sizeof(jb->dir), "/tmp/gv_test_libgravac_XXXXXX");
    GV_CHECK(mkdtemp(jb->dir) != NULL);
    const char *argv[16] = {"test", "--model=external"};
    int argc = 2;
    for (int k = 0; k < jb->n_method; k++)
        argv[argc++] = jb->method_args[k];
    argv[argc++] = jb->sgd ? "--optimizer=job" : "--optimizer=caller";
    static struct gv_job job;
    memset(&job, 0, sizeof(job));
    struct gv_opt_table tab = {gv_job_options, gv_job_options_n, &job};
    struct gv_cfg_spec spec = {.program = "test", .tables = &tab, .n_tables = 1};
    struct gv_cfg *cfg = NULL;
    GV_CHECK_OK(gv_cfg_create(&spec, &cfg));
    GV_CHECK_OK(gv_cfg_load(cfg, argc, (char **)argv, NULL));
    GV_CHECK_OK(gv_job_resolve(&job, W));
    struct gv_cluster cl[4];
    struct gv_server *srv[4] = {NULL};
    struct srv_arg sa[4];
    pthread_t st[4], wt[W];
    struct gv_auth_secret secret = {0};
    for (int s = 0; s < jb->S; s++) {
        memset(&cl[s], 0, sizeof(cl[s]));
        cl[s].num_servers = jb->S;
        cl[s].num_workers = W;
        cl[s].rank = s;
        cl[s].rendezvous_dir = jb->dir;
        snprintf(cl[s].bind.host, sizeof(cl[s].bind.host), "127.0.0.1");
        cl[s].advertise = "";
        cl[s].cluster_id = "test";
        cl[s].transport = "tcp";
        cl[s].connect_timeout = 20000000000ull;
        cl[s].io_timeout = 10000000000ull;
        cl[s].dump_params = "";
        GV_CHECK_OK(gv_cluster_resolve(&cl[s], GV_ROLE_SERVER, NULL));
        struct gv_server_config sc = {.job = &job,
                                      .cluster = &cl[s],
                                      .secret = &secret,
                                      .handshake_timeout_ns = 5000000000ull,
                                      .heartbeat_interval_ns = 500000000ull, /* the defaults */
                                      .peer_timeout_ns = 5000000000ull};
        GV_CHECK_OK(gv_server_create(&sc, &srv[s]));
        sa[s] = (struct srv_arg){jb, srv[s], s};
        pthread_create(&st[s], NULL, srv_thread, &sa[s]);
    }
    if (jb->stray_layout) { /* before any worker: a stranger's LAYOUTs, empty and not */
        for (int k = 0; k < 2; k++) {
            uint8_t frame[512];
            size_t len = 0;
            struct gv_proto_msg m;
            gv_proto_msg_init(&m, GV_PROTO_MSG_LAYOUT);
            m.role = GV_PROTO_ROLE_WORKER;
            if (k == 1)
                gv_proto_seg_add(&m, GV_PROTO_SEG_RAW, GV_PROTO_ENC_BYTES, 16, 16);
            GV_CHECK_OK(gv_proto_encode(&m, NULL, frame, sizeof(frame) - 16, &len));
            memset(frame + len, 0x41, 16);
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            struct sockaddr_in sa_in = {.sin_family = AF_INET,
                                        .sin_port = htons(gv_server_port(srv[0])),
                                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
            GV_CHECK(connect(fd, (struct sockaddr *)&sa_in, sizeof(sa_in)) == 0);
            GV_CHECK(write(fd, frame, len + (k == 1 ? 16 : 0)) > 0);
            usleep(100000);
            close(fd);
        }
    }
    struct wk_arg wa[W];
    for (int w = 0; w < W; w++) {
        wa[w] = (struct wk_arg){jb, w};
        pthread_create(&wt[w], NULL, wk_thread, &wa[w]);
    }
    for (int w = 0; w < W; w++)
        pthread_join(wt[w], NULL);
    for (int s = 0; s < jb->S; s++) {
        pthread_join(st[s], NULL);
        gv_server_destroy(srv[s]);
    }
    gv_cfg_destroy(cfg);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", jb->dir);
    GV_CHECK(system(cmd) == 0);
}

static struct job *job_new(int S)
{
    struct job *jb = calloc(1, sizeof(*jb));
    jb->S = S;
    jb->bad_layout = jb->drift = jb->fail = jb->late = -1;
    return jb;
}

static void check_clean(struct job *jb, const char *what)
{
    for (int w = 0; w < W; w++) {
        GV_CHECK_MSG(jb->start_st[w] == GRAVAC_OK && jb->step_st[w] == GRAVAC_OK &&
                         jb->steps[w] == ITERS,
                     "%s: worker %d: start %d step %d after %d steps: %s", what, w, jb->start_st[w],
                     jb->step_st[w], jb->steps[w], jb->err[w]);
        GV_CHECK_MSG(jb->init_ok[w] == 1, "%s: worker %d did not start from worker 0's model", what,
                     w);
        GV_CHECK_MSG(jb->avg_ok[w] == 1, "%s: worker %d: an average or an iteration was off", what,
                     w);
    }
    GV_CHECK_MSG(memcmp(jb->params[0], jb->params[1], NUMEL * sizeof(float)) == 0,
                 "%s: the replicas differ", what);
    GV_CHECK_MSG(memcmp(jb->grads[0], jb->grads[1], NUMEL * sizeof(float)) == 0,
                 "%s: the averaged gradients differ", what);
    for (int s = 0; s < jb->S; s++)
        GV_CHECK_MSG(jb->srv_st[s] == GV_OK, "%s: server %d ended with %s", what, s,
                     gv_status_str(jb->srv_st[s]));
}

static void test_caller_dense(void)
{
    struct job *jb = job_new(2);
    jb->dense = true;
    jb->stray_layout = true; /* closed, and the job goes on (an empty one aborted it) */
    jb->method_args[jb->n_method++] = "--method=dense";
    run_job(jb);
    check_clean(jb, "dense, the caller's optimizer");
    free(jb);
}

static void test_caller_compressed(void)
{
    const char *const sets[][3] = {
        {"--method=static", "--cf=8", NULL},
        {"--method=gravac-exp", "--window=3", "--theta-min=4"},
    };
    for (size_t k = 0; k < 2; k++) {
        struct job *jb = job_new(2);
        for (int i = 0; i < 3 && sets[k][i] != NULL; i++)
            jb->method_args[jb->n_method++] = sets[k][i];
        run_job(jb);
        check_clean(jb, sets[k][0]);
        free(jb);
    }
}

static void test_job_sgd(void)
{
    struct job *jb = job_new(1);
    jb->sgd = true;
    jb->method_args[jb->n_method++] = "--method=static";
    jb->method_args[jb->n_method++] = "--cf=4";
    jb->method_args[jb->n_method++] = "--lr=0.05";
    run_job(jb);
    check_clean(jb, "the job's SGD");
    bool moved = false;
    for (int j = 0; j < NUMEL; j++)
        moved |= jb->params[0][j] != gen(9, 0, j);
    GV_CHECK_MSG(moved, "the runtime's SGD did not step the parameters");
    free(jb);
}

/* The servers' end waited 5 s for the last BYEs and then finished: a worker still at work
 * after its last step found its servers gone (and server 1 failed when server 0 left). */
static void test_late_finish(void)
{
    struct job *jb = job_new(2);
    jb->late = 0;
    jb->method_args[jb->n_method++] = "--method=static";
    jb->method_args[jb->n_method++] = "--cf=8";
    run_job(jb);
    check_clean(jb, "worker 0 finishing 6.5 s after the others");
    for (int s = 0; s < jb->S; s++)
        GV_CHECK_MSG(jb->t_srv_end[s] >= jb->t_finish[0],
                     "server %d ended %.1f s before worker 0 said BYE", s,
                     jb->t_finish[0] - jb->t_srv_end[s]);
    free(jb);
}

static void test_layout_mismatch(void)
{
    struct job *jb = job_new(1);
    jb->bad_layout = 1;
    run_job(jb);
    GV_CHECK_EQ(jb->start_st[1], GRAVAC_ERR_PROTO);
    GV_CHECK_MSG(strstr(jb->err[1], "tensor 1 is 'a.bias' [41]") != NULL &&
                     strstr(jb->err[1], "'a.bias' [40]") != NULL,
                 "the refusal does not name the differing tensor: %s", jb->err[1]);
    GV_CHECK_MSG(jb->start_st[0] != GRAVAC_OK || jb->step_st[0] != GRAVAC_OK,
                 "worker 0 trained on without worker 1");
    GV_CHECK_EQ(jb->srv_st[0], GV_ERR_PROTO);
    free(jb);
    /* a longer text than an ERROR may carry: the other worker is still told, cut (it was not
     * sent at all, and worker 0 only saw its connection close) */
    jb = job_new(1);
    jb->bad_layout = 1;
    jb->long_names = true;
    run_job(jb);
    GV_CHECK_EQ(jb->start_st[1], GRAVAC_ERR_PROTO);
    GV_CHECK_MSG(strstr(jb->err[0], "ended the job with an error") != NULL &&
                     strstr(jb->err[0], "model layout mismatch: tensor 1 is") != NULL,
                 "worker 0 was not told why: %s", jb->err[0]);
    free(jb);
}

static void test_drift(void)
{
    struct job *jb = job_new(2);
    jb->drift = 1;
    jb->method_args[jb->n_method++] = "--method=static";
    jb->method_args[jb->n_method++] = "--cf=8";
    run_job(jb);
    for (int w = 0; w < W; w++) {
        GV_CHECK_EQ(jb->step_st[w], GRAVAC_ERR_CLOSED);
        GV_CHECK_MSG(jb->steps[w] == 4, "worker %d ran %d steps", w, jb->steps[w]);
    }
    GV_CHECK_MSG(strstr(jb->err[0], "replicas diverged before iteration 4") != NULL &&
                     strstr(jb->err[0], "worker 1") != NULL,
                 "worker 0's error: %s", jb->err[0]);
    free(jb);
}

static void test_fail(void)
{
    struct job *jb = job_new(1);
    jb->fail = 1;
    run_job(jb);
    GV_CHECK_EQ(jb->step_st[0], GRAVAC_ERR_CLOSED);
    GV_CHECK_MSG(strstr(jb->err[0], "ValueError: the test's own failure") != NULL,
                 "worker 0 does not name worker 1's failure: %s", jb->err[0]);
    GV_CHECK(jb->srv_st[0] != GV_OK);
    free(jb);
}

static void test_misuse(void)
{
    struct gravac *g = NULL;
    const char *bad_model[] = {"t", "--model=mlp", "--rank=0", "--num-workers=1",
                               "--servers=127.0.0.1:1"};
    GV_CHECK_STATUS(gravac_create(5, bad_model, &g), GRAVAC_ERR_INVAL);
    GV_CHECK(strstr(gravac_last_error(), "--model must be external") != NULL);
    const char *accordion[] = {"t", "--method=accordion", "--rank=0", "--num-workers=1",
                               "--servers=127.0.0.1:1"};
    GV_CHECK_STATUS(gravac_create(5, accordion, &g), GRAVAC_ERR_INVAL);
    GV_CHECK(strstr(gravac_last_error(), "accordion is not offered") != NULL);
    const char *unknown[] = {"t", "--no-such-option=1"};
    GV_CHECK_STATUS(gravac_create(2, unknown, &g), GRAVAC_ERR_INVAL);
    const char *ok[] = {"t", "--rank=0", "--num-workers=1", "--servers=127.0.0.1:1", "--insecure"};
    GV_CHECK_OK(gravac_create(5, ok, &g));
    GV_CHECK_EQ(gravac_rank(g), 0);
    GV_CHECK_EQ(gravac_size(g), 1);
    GV_CHECK_EQ(gravac_num_servers(g), 1);
    const int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, zero[1] = {0};
    GV_CHECK_STATUS(gravac_add_tensor(g, "x", 9, nine), GRAVAC_ERR_INVAL);
    GV_CHECK_STATUS(gravac_add_tensor(g, "x", 1, zero), GRAVAC_ERR_INVAL);
    GV_CHECK_STATUS(gravac_add_tensor(g, "bad\nname", 1, shape_b), GRAVAC_ERR_INVAL);
    GV_CHECK_STATUS(gravac_add_tensor(g, "", 1, shape_b), GRAVAC_ERR_INVAL);
    GV_CHECK_STATUS(gravac_step(g, 0, 0, 1, NULL), GRAVAC_ERR_INVAL);
    GV_CHECK_OK(gravac_add_tensor(g, "w", 1, shape_b));
    GV_CHECK_OK(gravac_add_tensor(g, "scalar", 0, NULL));
    float p[41], gr[41];
    GV_CHECK_STATUS(gravac_start(g, p, gr, 40), GRAVAC_ERR_INVAL); /* 41 registered */
    GV_CHECK(strstr(gravac_last_error(), "41 elements") != NULL);
    GV_CHECK_STATUS(gravac_finish(g), GRAVAC_ERR_INVAL);
    gravac_destroy(g);
    GV_CHECK_EQ(gravac_api_version(), GRAVAC_API_VERSION);
    GV_CHECK_EQ(gravac_step_info_size(), sizeof(struct gravac_step_info));
    GV_CHECK(strcmp(gravac_status_str(GRAVAC_ERR_PROTO), gv_status_str(GV_ERR_PROTO)) == 0);
}

/* Two threads, each with its own failed call, in the order A, B, then A reads: A gets its own
 * error, not B's (the layout-mismatch job above, two workers in one process, read the other
 * worker's error now and then). */
struct err_pair {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stage;
    char a_read[1024];
};

static void err_wait(struct err_pair *e, int stage)
{
    pthread_mutex_lock(&e->mu);
    while (e->stage < stage)
        pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

static void err_set(struct err_pair *e, int stage)
{
    pthread_mutex_lock(&e->mu);
    e->stage = stage;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void *err_thread_a(void *arg)
{
    struct err_pair *e = arg;
    struct gravac *g = NULL;
    const char *bad_model[] = {"t", "--model=mlp", "--rank=0", "--num-workers=1",
                               "--servers=127.0.0.1:1"};
    (void)gravac_create(5, bad_model, &g);
    err_set(e, 1);
    err_wait(e, 2);
    snprintf(e->a_read, sizeof(e->a_read), "%s", gravac_last_error());
    return NULL;
}

static void *err_thread_b(void *arg)
{
    struct err_pair *e = arg;
    struct gravac *g = NULL;
    err_wait(e, 1);
    const char *accordion[] = {"t", "--method=accordion", "--rank=0", "--num-workers=1",
                               "--servers=127.0.0.1:1"};
    (void)gravac_create(5, accordion, &g);
    err_set(e, 2);
    return NULL;
}

static void test_last_error_per_thread(void)
{
    struct err_pair e = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    pthread_t a, b;
    GV_CHECK_EQ(pthread_create(&a, NULL, err_thread_a, &e), 0);
    GV_CHECK_EQ(pthread_create(&b, NULL, err_thread_b, &e), 0);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    GV_CHECK_MSG(strstr(e.a_read, "--model must be external") != NULL,
                 "thread A read another thread's error: %s", e.a_read);
}

int main(void)
{
    test_misuse();
    test_last_error_per_thread();
    test_caller_dense();
    test_caller_compressed();
    test_job_sgd();
    test_late_finish();
    test_layout_mismatch();
    test_drift();
    test_fail();
    return gv_check_summary();
}
