/* test_server.c: the server against misbehaving and failing peers, in one process (the server
 * in a thread, hand-made clients and real worker runtimes in others). A server with a secret
 * refuses, logs and closes: another cluster id, a rank out of range, another cluster size,
 * garbage bytes, a client silent past the handshake timeout, a client with another secret or
 * none; then it still runs a job with the right workers. Also: a worker with another model
 * configuration is refused with both fingerprints named; the start-up deadline names the worker
 * that never came; a second worker 0 is refused; a worker that disconnects mid-run aborts the job
 * and the other worker fails with the reason within a bounded time. */
#include "ps_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---------------------------------------------------------------- a job, a server */

struct env {
    struct gv_job job;
    struct gv_cfg *cfg;
    struct gv_cluster scl;
    char dir[64];
    struct gv_auth_secret secret;
    struct gv_server *srv;
    pthread_t th;
    gv_status_t result;
    volatile int stop;
    uint32_t W;
};

/* The job's length (in the fingerprint: servers and workers of a test agree on it). */
static const char *job_steps = "4";

static int job_load(struct gv_job *job, struct gv_cfg **cfg, const char *lr, uint32_t W)
{
    static struct gv_opt_table tab[4];
    static struct gv_cfg_spec spec[4];
    static int k;
    int i = k++ % 4;
    char *argv[] = {
        "t",      "--dataset", "synthetic", "--synthetic-n", "1024",           "--widths",
        "16",     "--batch",   "16",        "--lr",          (char *)lr,       "--method",
        "static", "--cf",      "4",         "--steps",       (char *)job_steps};
    memset(job, 0, sizeof(*job));
    tab[i] = (struct gv_opt_table){gv_job_options, gv_job_options_n, job};
    spec[i] = (struct gv_cfg_spec){.program = "t", .tables = &tab[i], .n_tables = 1};
    if (gv_cfg_create(&spec[i], cfg) != GV_OK ||
        gv_cfg_load(*cfg, (int)GV_ARRAY_LEN(argv), argv, NULL) != GV_OK ||
        gv_job_resolve(job, W) != GV_OK)
        return -1;
    return 0;
}

static void cluster_init(struct gv_cluster *cl, const char *dir, int rank, enum gv_role role,
                         uint32_t W, double connect_s)
{
    ps_test_cluster_init(cl, dir, rank, role, 1, (int)W, (uint64_t)(connect_s * 1e9),
                         5000000000ull);
}

static void *srv_thread(void *p)
{
    struct env *e = p;
    e->result = gv_server_run(e->srv, &e->stop);
    return NULL;
}

static const char key_a[] = "0123456789abcdef-secret-A";
static const char key_b[] = "0123456789abcdef-secret-B";

static int env_start(struct env *e, uint32_t W, const char *key, double connect_s)
{
    memset(e, 0, sizeof(*e));
    e->W = W;
    if (job_load(&e->job, &e->cfg, "0.05", W) != 0)
        return -1;
    snprintf(e->dir, sizeof(e->dir), "/tmp/gv_test_srv_XXXXXX");
    if (mkdtemp(e->dir) == NULL)
        return -1;
    if (key != NULL)
        GV_CHECK_OK(gv_auth_secret_set(&e->secret, key, strlen(key)));
    cluster_init(&e->scl, e->dir, 0, GV_ROLE_SERVER, W, connect_s);
    struct gv_server_config sc = {.job = &e->job,
                                  .cluster = &e->scl,
                                  .secret = &e->secret,
                                  .handshake_timeout_ns = 300000000ull};
    if (gv_server_create(&sc, &e->srv) != GV_OK)
        return -1;
    pthread_create(&e->th, NULL, srv_thread, e);
    return 0;
}

static void env_finish(struct env *e)
{
    pthread_join(e->th, NULL);
    gv_server_destroy(e->srv);
    gv_cfg_destroy(e->cfg);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", e->dir);
}

/* ---------------------------------------------------------------- a real worker in a thread */

struct wt {
    struct env *e;
    uint32_t rank;
    const char *key;
    const char *lr;
    int steps; /* steps to run; then finish (or just leave when `vanish`) */
    bool vanish;
    gv_status_t create_status, step_status;
    int done;
    uint64_t t_fail_ns;
    pthread_t th;
};

static void *wt_main(void *p)
{
    struct wt *t = p;
    struct gv_job job;
    struct gv_cfg *cfg = NULL;
    struct gv_cluster cl;
    struct gv_auth_secret sec = {0};
    if (job_load(&job, &cfg, t->lr, t->e->W) != 0) {
        t->create_status = GV_ERR_INVAL;
        return NULL;
    }
    if (t->key != NULL)
        gv_auth_secret_set(&sec, t->key, strlen(t->key));
    cluster_init(&cl, t->e->dir, (int)t->rank, GV_ROLE_WORKER, t->e->W,
                 (double)t->e->scl.connect_timeout * 1e-9);
    char names[16][24];
    size_t numel[16];
    uint32_t T = 0;
    gv_job_layout(&job, names, numel, 16, &T);
    size_t P = 0;
    for (uint32_t i = 0; i < T; i++)
        P += numel[i];
    float *pa = calloc(P, 4), *g = calloc(P, 4), *m = calloc(P, 4);
    struct gv_worker_model wm = ps_test_model(pa, g, m, P, T, numel, names);
    struct gv_worker_config wc = {.job = &job, .cluster = &cl, .secret = &sec, .verify_every = 1};
    struct gv_worker *w = NULL;
    t->create_status = gv_worker_create(&wc, &wm, &w);
    for (int i = 0; w != NULL && i < t->steps; i++) {
        for (size_t j = 0; j < P; j++)
            g[j] = (float)((j * 7 + (size_t)i * 13 + t->rank) % 11) * 0.01f - 0.05f;
        struct gv_worker_step_in in = {.loss = 1, .compute_s = 0.001, .samples = 16};
        struct gv_worker_step_out out;
        t->step_status = gv_worker_step(w, &in, &out);
        if (t->step_status != GV_OK) {
            t->t_fail_ns = gv_now_ns();
            break;
        }
        t->done++;
    }
    if (w != NULL && !t->vanish && t->step_status == GV_OK)
        gv_worker_finish(w, (uint64_t)t->done);
    gv_worker_destroy(w);
    free(pa), free(g), free(m);
    gv_cfg_destroy(cfg);
    return NULL;
}

static void wt_start(struct wt *t, struct env *e, uint32_t rank, const char *key, const char *lr,
                     int steps, bool vanish)
{
    memset(t, 0, sizeof(*t));
    t->vanish = vanish;
    t->e = e;
    t->rank = rank;
    t->key = key;
    t->lr = lr;
    t->steps = steps;
    pthread_create(&t->th, NULL, wt_main, t);
}

/* ---------------------------------------------------------------- a hand-made client */

struct rc {
    struct gv_tp *tp;
    struct gv_ps_link link;
    struct gv_proto_caps caps;
    struct gv_proto_arena arena;
    unsigned char arena_buf[65536];
    struct gv_ps_client_hs hs;
    gv_status_t hs_status;
    bool closed;
    enum gv_proto_msg_type last;
    char text[300];
};

static gv_status_t rc_prefix(const void *p, uint32_t *h, uint64_t *l, void *u)
{
    return gv_proto_parse_prefix(p, &((struct rc *)u)->caps, h, l);
}

static gv_status_t rc_header(struct gv_conn *c, const void *m, size_t n, uint64_t pl,
                             struct gv_iov *dst, int *cnt, void *u)
{
    (void)c, (void)m, (void)n, (void)u;
    dst[0] = (struct gv_iov){NULL, pl};
    *cnt = 1;
    return GV_OK;
}

static void rc_msg(struct gv_conn *c, const void *msg, size_t len, void *u)
{
    (void)c;
    struct rc *r = u;
    struct gv_proto_msg m;
    if (gv_proto_decode(msg, len, &r->caps, &r->arena, &m) != GV_OK)
        return;
    r->last = m.type;
    if (m.type == GV_PROTO_MSG_REFUSE)
        snprintf(r->text, sizeof(r->text), "%s", m.u.refuse.text ? m.u.refuse.text : "");
    if (r->hs.state == GV_PS_CLIENT_HELLO_SENT || r->hs.state == GV_PS_CLIENT_AUTH_SENT)
        r->hs_status = gv_ps_client_hs_on_msg(&r->hs, &r->link, &m);
}

static void rc_close(struct gv_conn *c, gv_status_t reason, void *u)
{
    (void)c, (void)reason;
    struct rc *r = u;
    r->closed = true;
    r->link.c = NULL;
}

static int rc_open(struct rc *r, uint16_t port)
{
    static const struct gv_ps_envelope test_env = {GV_PROTO_ROLE_WORKER, 0, 0};
    memset(r, 0, sizeof(*r));
    struct gv_tp_config tc;
    gv_ps_caps(&r->caps, &tc, 5000000000ull, 5000000000ull);
    gv_proto_arena_init(&r->arena, r->arena_buf, sizeof(r->arena_buf));
    struct gv_tp_handler h = {.prefix_len = GV_PROTO_PREFIX_LEN,
                              .parse_prefix = rc_prefix,
                              .on_header = rc_header,
                              .on_msg = rc_msg,
                              .on_close = rc_close};
    struct gv_conn *c;
    if (gv_tp_create("tcp", &tc, &h, r, &r->tp) != GV_OK ||
        gv_tp_connect(r->tp, "127.0.0.1", port, &c) != GV_OK ||
        gv_ps_link_init(&r->link, &r->caps, &test_env, 8, 4096) != GV_OK)
        return -1;
    r->link.c = c;
    return 0;
}

static void rc_run(struct rc *r, int ms, bool (*pred)(struct rc *))
{
    uint64_t end = gv_now_ns() + (uint64_t)ms * 1000000ull;
    while (gv_now_ns() < end && !(pred != NULL && pred(r)))
        gv_tp_progress(r->tp, 10);
}

static bool rc_closed(struct rc *r)
{
    return r->closed;
}

static bool rc_done(struct rc *r)
{
    return r->closed || r->hs.state == GV_PS_CLIENT_WELCOMED || r->hs.state == GV_PS_CLIENT_FAILED;
}

static void rc_free(struct rc *r)
{
    gv_tp_destroy(r->tp);
    gv_ps_link_cleanup(&r->link);
}

/* A handshake with the given fields; returns the client's final state. */
static int try_hello(uint16_t port, const char *cluster, uint32_t rank, uint32_t W, const char *key,
                     char *text, size_t len)
{
    struct rc *r = calloc(1, sizeof(*r));
    struct gv_auth_secret sec = {0};
    if (key != NULL)
        gv_auth_secret_set(&sec, key, strlen(key));
    GV_CHECK(rc_open(r, port) == 0);
    struct gv_ps_hello_info info = {.role = GV_PROTO_ROLE_WORKER,
                                    .rank = rank,
                                    .num_workers = W,
                                    .num_servers = 1,
                                    .cluster_id = cluster,
                                    .secret = &sec};
    GV_CHECK_OK(gv_ps_client_hs_start(&r->hs, &r->link, &info));
    rc_run(r, 3000, rc_done);
    rc_run(r, 500, rc_closed); /* the server closes refused connections */
    snprintf(text, len, "%s | %s", r->text, r->hs.why);
    int st = r->closed ? GV_PS_CLIENT_FAILED : (int)r->hs.state;
    rc_free(r);
    free(r);
    return st;
}

static void test_refusals_then_job(void)
{
    struct env e;
    log_clear();
    GV_CHECK(env_start(&e, 2, key_a, 20) == 0);
    uint16_t port = gv_server_port(e.srv);
    char text[700];
    GV_CHECK_EQ(try_hello(port, "other", 0, 2, key_a, text, sizeof(text)), -1);
    GV_CHECK_MSG(strstr(text, "cluster id 'other'"), "%s", text);
    GV_CHECK_EQ(try_hello(port, "test", 9, 2, key_a, text, sizeof(text)), -1);
    GV_CHECK_MSG(strstr(text, "rank 9 is out of range"), "%s", text);
    GV_CHECK_EQ(try_hello(port, "test", 0, 3, key_a, text, sizeof(text)), -1);
    GV_CHECK_MSG(strstr(text, "expects 3 workers"), "%s", text);
    GV_CHECK_EQ(try_hello(port, "test", 0, 2, key_b, text, sizeof(text)), -1);
    GV_CHECK_MSG(strstr(text, "does not verify"), "%s", text);
    GV_CHECK_EQ(try_hello(port, "test", 0, 2, NULL, text, sizeof(text)), -1);
    GV_CHECK_MSG(strstr(text, "secret"), "%s", text);
    /* garbage */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    GV_CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    char junk[200];
    memset(junk, 0x5a, sizeof(junk));
    GV_CHECK(write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk));
    char b;
    GV_CHECK(read(fd, &b, 1) <= 0); /* the server closed it */
    close(fd);
    /* silent after HELLO: closed after the handshake timeout */
    struct rc *r = calloc(1, sizeof(*r));
    GV_CHECK(rc_open(r, port) == 0);
    struct gv_auth_secret sec;
    gv_auth_secret_set(&sec, key_a, strlen(key_a));
    struct gv_ps_hello_info info = {.role = GV_PROTO_ROLE_WORKER,
                                    .rank = 0,
                                    .num_workers = 2,
                                    .num_servers = 1,
                                    .cluster_id = "test",
                                    .secret = &sec};
    GV_CHECK_OK(gv_ps_client_hs_start(&r->hs, &r->link, &info));
    r->hs.state = GV_PS_CLIENT_IDLE; /* stop answering */
    uint64_t t0 = gv_now_ns();
    rc_run(r, 3000, rc_closed);
    GV_CHECK(r->closed);
    GV_CHECK(gv_now_ns() - t0 >= 250000000ull);
    rc_free(r);
    free(r);
    GV_CHECK(log_has("did not complete the handshake"));
    /* the right workers still get served */
    struct wt w0, w1;
    wt_start(&w0, &e, 0, key_a, "0.05", 4, false);
    wt_start(&w1, &e, 1, key_a, "0.05", 4, false);
    pthread_join(w0.th, NULL);
    pthread_join(w1.th, NULL);
    GV_CHECK_OK(w0.create_status);
    GV_CHECK_OK(w1.create_status);
    GV_CHECK_EQ(w0.done, 4);
    GV_CHECK_EQ(w1.done, 4);
    env_finish(&e);
    GV_CHECK_OK(e.result);
}

static void test_fingerprint(void)
{
    struct env e;
    log_clear();
    GV_CHECK(env_start(&e, 1, NULL, 10) == 0);
    struct wt w0;
    wt_start(&w0, &e, 0, NULL, "0.1", 2, false); /* another learning rate */
    pthread_join(w0.th, NULL);
    env_finish(&e);
    GV_CHECK_STATUS(w0.create_status, GV_ERR_PROTO);
    GV_CHECK(e.result != GV_OK);
    GV_CHECK(log_has("model fingerprint mismatch: worker 0 has"));
    GV_CHECK(log_has("refused to join: model fingerprint mismatch"));
}

static void test_startup_deadline(void)
{
    struct env e;
    log_clear();
    GV_CHECK(env_start(&e, 2, NULL, 1.0) == 0);
    struct wt w0;
    wt_start(&w0, &e, 0, NULL, "0.05", 2, false);
    uint64_t t0 = gv_now_ns();
    pthread_join(e.th, NULL);
    GV_CHECK_STATUS(e.result, GV_ERR_TIMEOUT);
    GV_CHECK(gv_now_ns() - t0 < 3000000000ull);
    GV_CHECK(log_has("workers not joined or synced: 1"));
    pthread_join(w0.th, NULL);
    GV_CHECK(w0.create_status != GV_OK || w0.step_status != GV_OK);
    e.th = pthread_self();
    gv_server_destroy(e.srv);
    gv_cfg_destroy(e.cfg);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e.dir);
    GV_CHECK(system(cmd) == 0);
}

static void test_duplicate_and_dead_worker(void)
{
    struct env e;
    log_clear();
    GV_CHECK(env_start(&e, 2, NULL, 10) == 0);
    uint16_t port = gv_server_port(e.srv);
    struct gv_auth_secret none = {0};
    struct gv_ps_hello_info info = {.role = GV_PROTO_ROLE_WORKER,
                                    .rank = 0,
                                    .num_workers = 2,
                                    .num_servers = 1,
                                    .cluster_id = "test",
                                    .secret = &none};
    struct rc *a = calloc(1, sizeof(*a));
    GV_CHECK(rc_open(a, port) == 0);
    GV_CHECK_OK(gv_ps_client_hs_start(&a->hs, &a->link, &info));
    rc_run(a, 3000, rc_done);
    GV_CHECK_EQ(a->hs.state, GV_PS_CLIENT_WELCOMED); /* welcomed as worker 0 */
    char text[700];
    GV_CHECK_EQ(try_hello(port, "test", 0, 2, NULL, text, sizeof(text)), -1);
    GV_CHECK_MSG(strstr(text, "already joined"), "%s", text);
    rc_free(a); /* worker 0 vanishes: the job is aborted, naming it */
    free(a);
    pthread_join(e.th, NULL);
    GV_CHECK_STATUS(e.result, GV_ERR_CLOSED);
    GV_CHECK(log_has("aborting the job at iteration 0: worker 0"));
    e.th = pthread_self();
    gv_server_destroy(e.srv);
    gv_cfg_destroy(e.cfg);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e.dir);
    GV_CHECK(system(cmd) == 0);

    /* a worker disconnects mid-run: the other one fails with the reason, quickly */
    log_clear();
    job_steps = "1000000";
    GV_CHECK(env_start(&e, 2, NULL, 10) == 0);
    struct wt w0, w1;
    wt_start(&w0, &e, 0, NULL, "0.05", 1000000, false);
    wt_start(&w1, &e, 1, NULL, "0.05", 5, true);
    pthread_join(w1.th, NULL);
    uint64_t gone = gv_now_ns();
    pthread_join(w0.th, NULL);
    GV_CHECK_STATUS(w0.step_status, GV_ERR_CLOSED);
    GV_CHECK(w0.t_fail_ns < gone + 3000000000ull); /* it may even fail before the join */
    GV_CHECK(log_has("worker 1 (") && log_has("disconnected"));
    GV_CHECK(log_has("ended the job with an error: server 0 aborted the job: worker 1"));
    env_finish(&e);
    GV_CHECK_STATUS(e.result, GV_ERR_CLOSED);
}

int main(void)
{
    gv_log_set_cb(log_cb, NULL);
    test_refusals_then_job();
    test_fingerprint();
    test_startup_deadline();
    test_duplicate_and_dead_worker();
    gv_log_set_cb(NULL, NULL);
    return gv_check_summary();
}
