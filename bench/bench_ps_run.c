/* bench_ps_run.c: one configuration of `gravac-bench ps`: S real gv_server instances and W
 * gv_worker instances, each in a thread of this process on 127.0.0.1 (the servers' and the
 * workers' whole code path: aggregation in rank order, the optimizer, checksums, the update),
 * stepping a fixed synthetic gradient without model compute; and the transport's own pushpull
 * (bench_transport_io.c) at the same payload size as the baseline, in the same process,
 * alternated with the PS rounds. Workers start every round together (a barrier), so a round's
 * time is from the first worker's step call to the last one's return. */
#include "bench_ps.h"
#include "gv_server.h"
#include "gv_worker.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <string.h>
#include <unistd.h>

#define BP_MAX_TENSORS 16

/* A barrier that a failing thread can break, so that nobody waits for it forever. */
struct bp_barrier {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t n, in;
    uint64_t gen;
    bool broken;
};

static void bp_barrier_init(struct bp_barrier *b, uint32_t n)
{
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->n = n;
    b->in = 0;
    b->gen = 0;
    b->broken = false;
}

static void bp_barrier_destroy(struct bp_barrier *b)
{
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
}

/* false when the barrier is broken (now or while waiting). */
static bool bp_barrier_wait(struct bp_barrier *b)
{
    pthread_mutex_lock(&b->mu);
    uint64_t gen = b->gen;
    if (++b->in == b->n) {
        b->in = 0;
        b->gen++;
        pthread_cond_broadcast(&b->cv);
    } else {
        while (gen == b->gen && !b->broken)
            pthread_cond_wait(&b->cv, &b->mu);
    }
    bool ok = !b->broken;
    pthread_mutex_unlock(&b->mu);
    return ok;
}

static void bp_barrier_break(struct bp_barrier *b)
{
    pthread_mutex_lock(&b->mu);
    b->broken = true;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

enum bp_cmd { BP_CMD_RUN, BP_CMD_STOP };

struct bp_cluster;

struct bp_srv_arg {
    struct bp_cluster *c;
    uint32_t s;
};

struct bp_wk {
    struct bp_cluster *c;
    uint32_t rank;
    pthread_t th;
    bool started;
    float *params, *grads, *mom, *gsrc; /* float[P] each */
    struct gv_worker *w;
    struct gv_trace *tr;
    gv_status_t status;
    uint64_t *t0, *t1; /* [cap] the recorded steps' start and end */
    uint64_t n_rec, cap;
    uint64_t up, down; /* payload bytes of the recorded steps */
    double cf_sum;
    double refill_s; /* thread CPU of the gradient refills (the bench's, not the PS's) */
};

struct bp_cluster {
    const struct bp_opts *o;
    struct gv_job job;
    struct gv_cfg *cfg;
    char dir[64];
    char names[BP_MAX_TENSORS][24];
    size_t numel[BP_MAX_TENSORS];
    uint32_t T, W, S;
    size_t P;
    double cf; /* asked for (1: dense) */
    struct gv_auth_secret secret;
    struct gv_cluster scl[BP_MAX_SERVERS], wcl[BP_MAX_WORKERS];
    struct gv_server *srv[BP_MAX_SERVERS];
    struct gv_trace *str[BP_MAX_SERVERS];
    pthread_t st[BP_MAX_SERVERS];
    struct bp_srv_arg sa[BP_MAX_SERVERS];
    bool srv_started[BP_MAX_SERVERS];
    gv_status_t srv_status[BP_MAX_SERVERS];
    volatile int srv_stop;
    _Atomic bool failed; /* a worker failed, or the set-up: the servers are stopped */
    struct bp_wk wk[BP_MAX_WORKERS];
    struct bp_barrier phase; /* the main thread and every worker: commands */
    struct bp_barrier step;  /* the workers: every round starts together */
    enum bp_cmd cmd;
    uint64_t n_steps;
    bool record;
};

/* ---------------------------------------------------------------- the model's size */

void bp_widths_for(uint64_t numel, int *a_p, int *b_p, uint64_t *got_p)
{
    /* fc1 64 -> a, fc2 a -> b, fc3 b -> 10: P = a (65 + b) + 11 b + 10 */
    uint64_t best = UINT64_MAX, got = 0;
    int ba = 1, bb = 1;
    for (int64_t a = 1; a <= 65536; a++) {
        int64_t rest = (int64_t)numel - 10 - 65 * a;
        int64_t b0 = rest > 0 ? (rest + (a + 11) / 2) / (a + 11) : 1;
        for (int64_t b = b0 - 1; b <= b0 + 1; b++) {
            if (b < 1 || b > 65536)
                continue;
            uint64_t p = (uint64_t)(a * (65 + b) + 11 * b + 10);
            uint64_t d = p > numel ? p - numel : numel - p;
            if (d < best) {
                best = d;
                got = p;
                ba = (int)a;
                bb = (int)b;
            }
        }
        if (rest < 0)
            break;
    }
    *a_p = ba;
    *b_p = bb;
    *got_p = got;
}

/* ---------------------------------------------------------------- set-up */

static gv_status_t bp_job(struct bp_cluster *c, uint64_t bytes, double cf, uint64_t steps)
{
    int a, b;
    uint64_t got;
    bp_widths_for(GV_MAX(bytes / 4, 100), &a, &b, &got);
    char widths[48], cfs[32], st[32], win[32];
    snprintf(widths, sizeof(widths), "%d,%d", a, b);
    snprintf(cfs, sizeof(cfs), "%.17g", cf > 1 ? cf : 10);
    snprintf(st, sizeof(st), "%" PRIu64, steps);
    snprintf(win, sizeof(win), "%" PRIu64, c->o->gravac_window);
    const char *method = cf > 1 ? c->o->method : "dense";
    char *argv[24] = {
        "bench-ps", "--dataset", "synthetic",    "--synthetic-n", "4096",
        "--batch",  "32",        "--widths",     widths,          "--steps",
        st,         "--method",  (char *)method, "--compressor",  (char *)c->o->compressor};
    int argc = 15;
    if (strncmp(method, "gravac", 6) == 0) { /* the controller's floor is the CF asked for */
        argv[argc++] = "--theta-min";
        argv[argc++] = cfs;
        argv[argc++] = "--window";
        argv[argc++] = win;
    } else {
        argv[argc++] = "--cf";
        argv[argc++] = cfs;
    }
    if (c->o->f32)
        argv[argc++] = "--no-fp16";
    static struct gv_opt_table tab;
    static struct gv_cfg_spec spec;
    tab = (struct gv_opt_table){gv_job_options, gv_job_options_n, &c->job};
    spec = (struct gv_cfg_spec){.program = "gravac-bench ps", .tables = &tab, .n_tables = 1};
    gv_status_t status = gv_cfg_create(&spec, &c->cfg);
    if (status == GV_OK)
        status = gv_cfg_load(c->cfg, argc, argv, NULL);
    if (status == GV_OK)
        status = gv_job_resolve(&c->job, c->W);
    if (status == GV_OK)
        status = gv_job_layout(&c->job, c->names, c->numel, BP_MAX_TENSORS, &c->T);
    if (status != GV_OK) {
        gv_log(GV_LOG_ERROR, "bench ps: cannot describe a model of %" PRIu64 " bytes: %s", bytes,
               gv_status_str(status));
        return status;
    }
    c->P = 0;
    for (uint32_t t = 0; t < c->T; t++)
        c->P += c->numel[t];
    return GV_OK;
}

static void bp_cluster_desc(struct bp_cluster *c, struct gv_cluster *cl, uint32_t rank)
{
    memset(cl, 0, sizeof(*cl));
    cl->num_servers = (int)c->S;
    cl->num_workers = (int)c->W;
    cl->rank = (int)rank;
    cl->rendezvous_dir = c->dir;
    snprintf(cl->bind.host, sizeof(cl->bind.host), "127.0.0.1");
    cl->advertise = "";
    cl->cluster_id = "bench-ps";
    cl->transport = "tcp";
    cl->connect_timeout = 60000000000ull;
    cl->io_timeout = 60000000000ull;
    cl->dump_params = "";
}

static uint64_t bp_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A worker's gradient: uneven magnitudes (so top-k has something to pick), different per
 * worker, the same every round (model compute is not measured). */
static void bp_gen_grad(float *g, size_t n, uint32_t w)
{
    for (size_t j = 0; j < n; j++) {
        uint64_t r = bp_mix(((uint64_t)w << 48) ^ j);
        float u = (float)(r & 0xffffff) / (float)0x1000000 - 0.5f;
        g[j] = u * ((r >> 40) % 17 == 0 ? 0.04f : 0.002f);
    }
}

static gv_status_t bp_trace_open(struct bp_cluster *c, enum gv_role role, uint32_t rank,
                                 uint64_t warmup, struct gv_trace **tr_p)
{
    const struct bp_opts *o = c->o;
    *tr_p = NULL;
    if (!o->breakdown && (o->trace_dir == NULL || o->trace_dir[0] == '\0'))
        return GV_OK;
    char path[1024], name[64];
    bool server = role == GV_ROLE_SERVER;
    snprintf(name, sizeof(name), "%s %u", server ? "server" : "worker", rank);
    if (o->trace_dir != NULL && o->trace_dir[0] != '\0')
        snprintf(path, sizeof(path), "%s/ps-%zu-cf%g-%s%u.json", o->trace_dir, 4 * c->P, c->cf,
                 server ? "server" : "worker", rank);
    struct gv_trace_config tc = {.path =
                                     o->trace_dir != NULL && o->trace_dir[0] != '\0' ? path : NULL,
                                 .process = name,
                                 .sort_index = (int)rank + (server ? 0 : 100000),
                                 .category = server ? "server" : "worker",
                                 .kinds = gv_ps_span_names,
                                 .n_kinds = GV_PS_SPAN_N,
                                 .peer_arg = server ? "worker" : "server",
                                 .totals_from = warmup};
    return gv_trace_open(&tc, tr_p);
}

/* ---------------------------------------------------------------- the threads */

static void *bp_srv_thread(void *arg)
{
    struct bp_srv_arg *a = arg;
    a->c->srv_status[a->s] = gv_server_run(a->c->srv[a->s], &a->c->srv_stop);
    return NULL;
}

/* Runs n rounds; records them when asked. false: the job failed (the barriers are broken). */
static bool bp_wk_rounds(struct bp_wk *k, uint64_t n, bool record)
{
    struct bp_cluster *c = k->c;
    for (uint64_t i = 0; i < n; i++) {
        struct timespec a, b;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
        memcpy(k->grads, k->gsrc, c->P * sizeof(float)); /* what backward would have written */
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
        k->refill_s += (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
        if (!bp_barrier_wait(&c->step))
            return false;
        struct gv_worker_step_in in = {.loss = 1.0, .compute_s = 0.0, .samples = 32};
        struct gv_worker_step_out out;
        uint64_t t0 = gv_now_ns();
        gv_status_t status = gv_worker_step(k->w, &in, &out);
        uint64_t t1 = gv_now_ns();
        if (status == GV_OK && out.stop)
            status = GV_ERR_CLOSED;
        if (status != GV_OK) {
            k->status = status;
            gv_log(GV_LOG_ERROR, "bench ps: worker %u: step failed: %s", k->rank,
                   gv_status_str(status));
            return false;
        }
        if (record && k->n_rec < k->cap) {
            k->t0[k->n_rec] = t0;
            k->t1[k->n_rec] = t1;
            k->n_rec++;
            k->up += out.payload_sent;
            k->down += out.payload_recv;
            k->cf_sum += out.cf;
        }
    }
    return true;
}

static void *bp_wk_thread(void *arg)
{
    struct bp_wk *k = arg;
    struct bp_cluster *c = k->c;
    struct gv_worker_model m = {.params = k->params,
                                .grads = k->grads,
                                .momentum = k->mom,
                                .numel = c->P,
                                .n_tensors = c->T,
                                .tensor_numel = c->numel,
                                .names = (const char(*)[24])c->names};
    struct gv_worker_config wc = {.job = &c->job,
                                  .cluster = &c->wcl[k->rank],
                                  .secret = &c->secret,
                                  .cmp_threads = c->o->cmp_threads,
                                  .verify_every = c->o->verify_every,
                                  .trace = k->tr};
    k->status = gv_worker_create(&wc, &m, &k->w);
    bool ok = k->status == GV_OK;
    if (!ok)
        gv_log(GV_LOG_ERROR, "bench ps: worker %u: cannot join: %s", k->rank,
               gv_status_str(k->status));
    uint64_t done = 0;
    while (ok && bp_barrier_wait(&c->phase)) { /* ready / the previous command done */
        if (!bp_barrier_wait(&c->phase))       /* the next command */
            break;
        if (c->cmd == BP_CMD_STOP)
            break;
        ok = bp_wk_rounds(k, c->n_steps, c->record);
        done += ok ? c->n_steps : 0;
    }
    if (k->w != NULL) {
        if (ok)
            gv_worker_finish(k->w, done);
        gv_worker_destroy(k->w); /* closes: a failed job ends on the servers too */
        k->w = NULL;
    }
    if (!ok) {
        c->failed = true;
        bp_barrier_break(&c->step);
        bp_barrier_break(&c->phase);
    }
    return NULL;
}

/* ---------------------------------------------------------------- the cluster */

/* Waits for every thread (the workers said BYE, or failed). */
static void bp_cluster_join(struct bp_cluster *c)
{
    for (uint32_t w = 0; w < c->W; w++)
        if (c->wk[w].started)
            pthread_join(c->wk[w].th, NULL);
    for (uint32_t w = 0; w < c->W; w++)
        c->wk[w].started = false;
    if (c->failed) /* a job that cannot end by itself (workers that never joined) */
        c->srv_stop = SIGTERM;
    for (uint32_t s = 0; s < c->S; s++)
        if (c->srv_started[s])
            pthread_join(c->st[s], NULL);
    for (uint32_t s = 0; s < c->S; s++)
        c->srv_started[s] = false;
}

static void bp_cluster_destroy(struct bp_cluster *c)
{
    bp_cluster_join(c);
    for (uint32_t s = 0; s < c->S; s++) {
        gv_server_destroy(c->srv[s]);
        gv_trace_close(c->str[s]);
    }
    for (uint32_t w = 0; w < c->W; w++) {
        struct bp_wk *k = &c->wk[w];
        gv_trace_close(k->tr);
        gv_free(k->params);
        gv_free(k->grads);
        gv_free(k->mom);
        gv_free(k->gsrc);
        gv_free(k->t0);
        gv_free(k->t1);
    }
    bp_barrier_destroy(&c->phase);
    bp_barrier_destroy(&c->step);
    gv_cfg_destroy(c->cfg);
    if (c->dir[0] != '\0') {
        char path[128];
        for (uint32_t s = 0; s < c->S; s++) {
            snprintf(path, sizeof(path), "%s/server-%u.addr", c->dir, s);
            unlink(path);
        }
        if (rmdir(c->dir) != 0)
            gv_log(GV_LOG_WARN, "bench ps: cannot remove %s", c->dir);
    }
    gv_free(c);
}

static gv_status_t bp_cluster_create(const struct bp_opts *o, uint64_t bytes, double cf,
                                     uint64_t warmup, uint64_t rec_cap, struct bp_cluster **c_p)
{
    struct bp_cluster *c = gv_calloc(1, sizeof(*c));
    if (c == NULL)
        return GV_ERR_NOMEM;
    c->o = o;
    c->cf = cf;
    c->W = o->workers;
    c->S = o->servers;
    bp_barrier_init(&c->phase, c->W + 1);
    bp_barrier_init(&c->step, c->W);
    /* exactly the rounds the workers run: a job longer than that would see their BYEs as
     * workers leaving early (and abort) */
    uint64_t steps = warmup + rec_cap;
    gv_status_t status = bp_job(c, bytes, cf, steps);
    if (status == GV_OK && o->trace_dir[0] != '\0')
        status = gv_ps_mkdir(o->trace_dir);
    char dir[sizeof(c->dir)] = "/tmp/gravac-bench-ps-XXXXXX";
    if (status == GV_OK && mkdtemp(dir) == NULL) {
        gv_log(GV_LOG_ERROR, "bench ps: cannot create a rendezvous directory in /tmp: %s",
               strerror(errno));
        status = GV_ERR_IO;
    } else if (status == GV_OK) {
        memcpy(c->dir, dir, sizeof(dir));
    }
    for (uint32_t s = 0; status == GV_OK && s < c->S; s++) {
        bp_cluster_desc(c, &c->scl[s], s);
        status = gv_cluster_resolve(&c->scl[s], GV_ROLE_SERVER, NULL);
        if (status == GV_OK)
            status = bp_trace_open(c, GV_ROLE_SERVER, s, warmup, &c->str[s]);
        struct gv_server_config sc = {.job = &c->job,
                                      .cluster = &c->scl[s],
                                      .secret = &c->secret,
                                      .handshake_timeout_ns = 30000000000ull,
                                      .trace = c->str[s]};
        if (status == GV_OK)
            status = gv_server_create(&sc, &c->srv[s]);
    }
    for (uint32_t w = 0; status == GV_OK && w < c->W; w++) {
        struct bp_wk *k = &c->wk[w];
        k->c = c;
        k->rank = w;
        k->cap = rec_cap;
        bp_cluster_desc(c, &c->wcl[w], w);
        status = gv_cluster_resolve(&c->wcl[w], GV_ROLE_WORKER, NULL);
        k->params = gv_malloc(c->P * sizeof(float));
        k->grads = gv_calloc(c->P, sizeof(float));
        k->mom = gv_calloc(c->P, sizeof(float));
        k->gsrc = gv_malloc(c->P * sizeof(float));
        k->t0 = gv_calloc(rec_cap + 1, sizeof(uint64_t));
        k->t1 = gv_calloc(rec_cap + 1, sizeof(uint64_t));
        if (!k->params || !k->grads || !k->mom || !k->gsrc || !k->t0 || !k->t1)
            status = status == GV_OK ? GV_ERR_NOMEM : status;
        if (status == GV_OK) {
            for (size_t j = 0; j < c->P; j++) /* worker 0's seed the servers */
                k->params[j] = (float)((int)(bp_mix(j) % 2001) - 1000) * 1e-4f;
            bp_gen_grad(k->gsrc, c->P, w);
            status = bp_trace_open(c, GV_ROLE_WORKER, w, warmup, &k->tr);
        }
    }
    for (uint32_t s = 0; status == GV_OK && s < c->S; s++) {
        c->sa[s] = (struct bp_srv_arg){c, s};
        if (pthread_create(&c->st[s], NULL, bp_srv_thread, &c->sa[s]) != 0)
            status = GV_ERR_NOMEM;
        else
            c->srv_started[s] = true;
    }
    for (uint32_t w = 0; status == GV_OK && w < c->W; w++) {
        if (pthread_create(&c->wk[w].th, NULL, bp_wk_thread, &c->wk[w]) != 0)
            status = GV_ERR_NOMEM;
        else
            c->wk[w].started = true;
    }
    if (status == GV_OK && !bp_barrier_wait(&c->phase)) /* every worker joined */
        status = GV_ERR_CLOSED;
    if (status != GV_OK) {
        c->failed = true;
        bp_barrier_break(&c->phase);
        bp_barrier_break(&c->step);
        bp_cluster_destroy(c);
        return status;
    }
    *c_p = c;
    return GV_OK;
}

/* Every worker runs n rounds (recorded or not). */
static gv_status_t bp_cluster_run(struct bp_cluster *c, uint64_t n, bool record)
{
    c->cmd = BP_CMD_RUN;
    c->n_steps = n;
    c->record = record;
    if (!bp_barrier_wait(&c->phase) || !bp_barrier_wait(&c->phase))
        return GV_ERR_CLOSED;
    return GV_OK;
}

/* The workers say BYE and leave (bp_cluster_join waits for them). */
static void bp_cluster_stop(struct bp_cluster *c)
{
    c->cmd = BP_CMD_STOP;
    (void)bp_barrier_wait(&c->phase);
}

/* ---------------------------------------------------------------- one configuration */

static int bp_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The rounds recorded since mark[w] (per worker): their time (each round from the first
 * worker's step call to the last one's return), and the step times (usec) appended to lat. */
static void bp_collect(struct bp_cluster *c, const uint64_t *mark, double *secs_p, double *lat,
                       size_t *n_lat_p)
{
    uint64_t n = c->wk[0].n_rec - mark[0];
    double secs = 0;
    size_t nl = *n_lat_p;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t a = UINT64_MAX, b = 0;
        for (uint32_t w = 0; w < c->W; w++) {
            const struct bp_wk *k = &c->wk[w];
            uint64_t j = mark[w] + i;
            a = GV_MIN(a, k->t0[j]);
            b = GV_MAX(b, k->t1[j]);
            lat[nl++] = (double)(k->t1[j] - k->t0[j]) * 1e-3;
        }
        secs += (double)(b - a) * 1e-9;
    }
    *secs_p = secs;
    *n_lat_p = nl;
}

static double bp_gbps(uint64_t bytes, double secs)
{
    return secs > 0 ? (double)bytes * 8.0 / secs / 1e9 : 0;
}

struct bp_baseline {
    struct bt_opts o;
    struct gv_tp *tp;
    pthread_t th;
    bool started;
    _Atomic int stop;
    int rc;
    struct bt_client *cl;
};

static void *bp_bt_thread(void *arg)
{
    struct bp_baseline *b = arg;
    b->rc = bt_serve(b->tp, &b->stop, 0);
    return NULL;
}

static gv_status_t bp_baseline_start(const struct bp_opts *o, uint64_t max_size,
                                     struct bp_baseline *b)
{
    memset(b, 0, sizeof(*b));
    b->o.mode = BT_PUSHPULL;
    b->o.role = BT_LOOPBACK;
    b->o.transport = "tcp";
    snprintf(b->o.host, sizeof(b->o.host), "127.0.0.1");
    b->o.sizes[0] = GV_MAX(max_size, 1);
    b->o.n_sizes = 1;
    b->o.window = o->window;
    b->o.conns = (int)o->workers;
    b->o.warmup = -1;
    b->o.sock_buf = 4 << 20;
    uint16_t port;
    gv_status_t status = bt_server_create(&b->o, b->o.host, 0, &b->tp, &port);
    if (status != GV_OK)
        return status;
    if (pthread_create(&b->th, NULL, bp_bt_thread, b) != 0) {
        b->stop = 1;
        bt_serve(b->tp, &b->stop, 0);
        return GV_ERR_NOMEM;
    }
    b->started = true;
    return bt_client_create(&b->o, b->o.host, port, &b->cl);
}

static void bp_baseline_stop(struct bp_baseline *b)
{
    bool connected = b->cl != NULL; /* the server ends when the client's connections close */
    bt_client_destroy(b->cl);
    b->cl = NULL;
    if (b->started) {
        b->stop = !connected;
        pthread_join(b->th, NULL);
    }
    b->started = false;
}

static void bp_breakdown(struct bp_cluster *c, uint64_t rounds, struct bp_breakdown *bd)
{
    memset(bd, 0, sizeof(*bd));
    if (!c->o->breakdown || rounds == 0)
        return;
    bd->on = true;
    uint64_t ns[GV_PS_SPAN_N + 1];
    double wk[GV_PS_SPAN_N] = {0}, sv[GV_PS_SPAN_N] = {0};
    for (uint32_t w = 0; w < c->W; w++) {
        gv_trace_totals(c->wk[w].tr, NULL, ns, GV_PS_SPAN_N);
        for (int k = 0; k < GV_PS_SPAN_N; k++)
            wk[k] += (double)ns[k];
    }
    for (uint32_t s = 0; s < c->S; s++) {
        gv_trace_totals(c->str[s], NULL, ns, GV_PS_SPAN_N);
        for (int k = 0; k < GV_PS_SPAN_N; k++)
            sv[k] += (double)ns[k];
    }
    for (int k = 0; k < GV_PS_SPAN_N; k++) {
        bool server = k >= GV_PS_SPAN_AGGREGATE;
        double v = server ? sv[k] / c->S : wk[k] / c->W;
        bd->us[k] = v / (double)rounds * 1e-3;
    }
}

static double bp_median(const double *v, int n)
{
    double sorted[BP_MAX_REPEATS];
    memcpy(sorted, v, sizeof(double) * (size_t)n);
    qsort(sorted, (size_t)n, sizeof(double), bp_cmp_double);
    return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

/* The baseline's message: the PS's mean payload per worker, round and direction (the value
 * bytes when dense), so that both move the same bytes per round trip. */
static uint64_t bp_pp_size(const struct bp_cluster *c, uint64_t value_bytes)
{
    uint64_t bytes = 0, n = 0;
    for (uint32_t w = 0; w < c->W; w++) {
        bytes += c->wk[w].up + c->wk[w].down;
        n += c->wk[w].n_rec;
    }
    uint64_t size = n > 0 ? bytes / (2 * n) : value_bytes;
    return GV_MAX(1, GV_MIN(size, value_bytes));
}

/* Pools the repeats' baseline runs into res->pp (percentiles: the medians of the runs'). */
static void bp_pp_pool(struct bp_result *res, const struct bt_result *pr, int n)
{
    double v[5][BP_MAX_REPEATS];
    struct bt_result *pp = &res->pp;
    memset(pp, 0, sizeof(*pp));
    for (int i = 0; i < n; i++) {
        pp->iters += pr[i].iters;
        pp->seconds += pr[i].seconds;
        pp->total_bytes += pr[i].total_bytes;
        v[0][i] = pr[i].lat_min;
        v[1][i] = pr[i].lat_p50;
        v[2][i] = pr[i].lat_p99;
        v[3][i] = pr[i].lat_p999;
        v[4][i] = pr[i].lat_max;
    }
    pp->bytes = pr[0].bytes;
    pp->gbps = bp_gbps(pp->total_bytes, pp->seconds);
    pp->mrate = pp->seconds > 0 ? (double)pp->iters / pp->seconds / 1e6 : 0;
    pp->lat_min = bp_median(v[0], n);
    pp->lat_p50 = bp_median(v[1], n);
    pp->lat_p99 = bp_median(v[2], n);
    pp->lat_p999 = bp_median(v[3], n);
    pp->lat_max = bp_median(v[4], n);
    res->have_pp = true;
    res->ratio = bp_median(res->ratios, res->n_ratios);
}

static void bp_finish(struct bp_cluster *c, struct bp_result *res, double *lat, size_t n_lat)
{
    double cfs = 0;
    for (uint32_t w = 0; w < c->W; w++)
        cfs += c->wk[w].cf_sum;
    res->cf_mean = res->iters > 0 ? cfs / (double)(res->iters * c->W) : res->cf;
    res->up_gbps = bp_gbps(res->up_bytes, res->seconds);
    res->down_gbps = bp_gbps(res->down_bytes, res->seconds);
    res->gbps = bp_gbps(res->up_bytes + res->down_bytes, res->seconds);
    res->eff_gbps = bp_gbps(2 * res->bytes * c->W * res->iters, res->seconds);
    struct bt_result lr;
    bt_result_fill(&lr, res->bytes, n_lat, 0, 1, lat, n_lat);
    res->rtt_min = lr.lat_min;
    res->rtt_p50 = lr.lat_p50;
    res->rtt_p99 = lr.lat_p99;
    res->rtt_p999 = lr.lat_p999;
    res->rtt_max = lr.lat_max;
}

static double bp_cpu_now(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* One repeat: the PS rounds and the baseline, in the order given. */
static gv_status_t bp_repeat(struct bp_cluster *c, struct bp_baseline *b, uint64_t iters,
                             bool pp_first, struct bp_result *res, double *lat, size_t *n_lat,
                             struct bt_result *pr)
{
    uint64_t mark[BP_MAX_WORKERS], up0 = 0, down0 = 0;
    for (uint32_t w = 0; w < c->W; w++) {
        mark[w] = c->wk[w].n_rec;
        up0 += c->wk[w].up;
        down0 += c->wk[w].down;
    }
    gv_status_t status = GV_OK;
    for (int phase = 0; phase < 2 && status == GV_OK; phase++) {
        double cpu0 = bp_cpu_now(), refill0 = 0, refill1 = 0;
        if ((phase == 0) != pp_first) {
            for (uint32_t w = 0; w < c->W; w++)
                refill0 += c->wk[w].refill_s;
            status = bp_cluster_run(c, iters, true);
            for (uint32_t w = 0; w < c->W; w++)
                refill1 += c->wk[w].refill_s;
            res->cpu_s += bp_cpu_now() - cpu0 - (refill1 - refill0);
        } else if (b != NULL) {
            uint64_t size = res->pp.bytes ? res->pp.bytes : bp_pp_size(c, res->bytes);
            res->pp.bytes = size;
            uint64_t n = iters * c->W; /* a PS round is W round trips */
            status = bt_client_run(b->cl, size, n, GV_MAX(1, n / 10), pr);
            res->pp_cpu_s += bp_cpu_now() - cpu0; /* its warm-up round trips included */
            res->pp_rounds += iters + GV_MAX(1, n / 10) / c->W;
        }
    }
    if (status != GV_OK)
        return status;
    double secs;
    bp_collect(c, mark, &secs, lat, n_lat);
    uint64_t up = 0, down = 0;
    for (uint32_t w = 0; w < c->W; w++) {
        up += c->wk[w].up;
        down += c->wk[w].down;
    }
    res->seconds += secs;
    res->up_bytes += up - up0;
    res->down_bytes += down - down0;
    res->iters += c->wk[0].n_rec - mark[0];
    if (b != NULL)
        res->ratios[res->n_ratios++] =
            pr->gbps > 0 ? bp_gbps(up - up0 + down - down0, secs) / pr->gbps : 0;
    return GV_OK;
}

gv_status_t bp_run_config(const struct bp_opts *o, uint64_t bytes, double cf, struct bp_result *res)
{
    memset(res, 0, sizeof(*res));
    uint64_t iters = o->iters;
    if (iters == 0) /* about 512 MiB of values per repeat, 20..2000 rounds */
        iters = GV_MAX(20, GV_MIN(2000, (512ull << 20) / GV_MAX(bytes, 1)));
    uint64_t warmup = o->warmup >= 0 ? (uint64_t)o->warmup : GV_MAX(3, GV_MIN(100, iters / 10));
    int reps = GV_MAX(1, GV_MIN(BP_MAX_REPEATS, o->repeats));
    uint64_t total = iters * (uint64_t)reps;
    struct bp_cluster *c = NULL;
    gv_status_t status = bp_cluster_create(o, bytes, cf, warmup, total, &c);
    if (status != GV_OK)
        return status;
    res->numel = c->P;
    res->bytes = 4 * c->P;
    res->cf = cf;
    double *lat = gv_malloc((total * c->W + 1) * sizeof(double));
    struct bt_result pr[BP_MAX_REPEATS];
    struct bp_baseline b;
    memset(&b, 0, sizeof(b));
    bool base = !o->no_baseline;
    if (lat == NULL)
        status = GV_ERR_NOMEM;
    if (status == GV_OK && base)
        status = bp_baseline_start(o, res->bytes, &b);
    if (status == GV_OK)
        status = bp_cluster_run(c, warmup, false);
    size_t n_lat = 0;
    /* the order alternates (PS first in the first repeat: the baseline's message size comes
     * from it), so that a drift of the shared host weighs on both alike */
    for (int r = 0; status == GV_OK && r < reps; r++)
        status = bp_repeat(c, base ? &b : NULL, iters, r % 2 == 1, res, lat, &n_lat, &pr[r]);
    bp_cluster_stop(c); /* every worker says BYE (at once where the barriers broke) */
    if (status == GV_OK) {
        bp_finish(c, res, lat, n_lat);
        if (base)
            bp_pp_pool(res, pr, reps);
    }
    if (base)
        bp_baseline_stop(&b);
    bp_cluster_join(c); /* the tracers' totals are final */
    if (status == GV_OK)
        bp_breakdown(c, res->iters, &res->bd);
    bp_cluster_destroy(c);
    gv_free(lat);
    return status;
}
