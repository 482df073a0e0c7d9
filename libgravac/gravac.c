/* gravac.c: libgravac's interface (gravac.h) over the worker runtime (worker/gv_worker.h): the
 * options every gravac program reads, the caller's layout, the runtime's create, step and finish,
 * and the last error for the binding's exceptions. The metrics file and the summary are in
 * gravac_out.c. */
#include "gravac_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

_Static_assert(GRAVAC_ERR_CLOSED == (int)GV_ERR_CLOSED, "status values");
_Static_assert(GRAVAC_ERR_PROTO == (int)GV_ERR_PROTO, "status values");
_Static_assert(GRAVAC_ERR_VERSION == (int)GV_ERR_VERSION, "status values");
_Static_assert(GRAVAC_ERR_AUTH == (int)GV_ERR_AUTH, "status values");

/* ---------------------------------------------------------------- logging: the last error */

static pthread_mutex_t err_mu = PTHREAD_MUTEX_INITIALIZER;
static char err_line[1024];              /* the process's last error (any thread's) */
static _Thread_local char err_own[1024]; /* the calling thread's */
static char log_tag[32] = "worker";

/* gravac's usual line on stderr, one write per line; errors are kept for gravac_last_error. */
static void gravac_log_sink(enum gv_log_level level, const char *line, void *arg)
{
    (void)arg;
    char out[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    pthread_mutex_lock(&err_mu);
    int n = snprintf(out, sizeof(out), "gravac[%s] %c %02d:%02d:%02d.%03ld %s\n", log_tag,
                     "EWIDT"[level], tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, line);
    if (level == GV_LOG_ERROR)
        snprintf(err_line, sizeof(err_line), "%s", line);
    pthread_mutex_unlock(&err_mu);
    if (level == GV_LOG_ERROR)
        snprintf(err_own, sizeof(err_own), "%s", line);
    if (n > (int)sizeof(out) - 1)
        n = (int)sizeof(out) - 1;
    ssize_t w = write(STDERR_FILENO, out, (size_t)n);
    (void)w;
}

const char *gravac_last_error(void)
{
    /* two workers in one process (threads) each read their own: a process-wide line was
     * overwritten by the other worker's error in between */
    return err_own[0] != '\0' ? err_own : err_line;
}

int gravac_api_version(void)
{
    return GRAVAC_API_VERSION;
}

size_t gravac_step_info_size(void)
{
    return sizeof(struct gravac_step_info);
}

const char *gravac_status_str(int status)
{
    return gv_status_str((gv_status_t)status);
}

/* ---------------------------------------------------------------- create */

/* An option left at its built-in default (not set by a flag, a variable or the file). */
static bool opt_default(struct gv_cfg *cfg, const char *name)
{
    enum gv_cfg_source src;
    const char *txt = NULL;
    return gv_cfg_source(cfg, name, &src, NULL, &txt) == GV_OK && src == GV_CFG_SRC_DEFAULT;
}

static gv_status_t gravac_options(struct gravac *g, int argc, const char *const *argv)
{
    static const char *const others[] = {"server", "launch", NULL};
    struct gv_cfg_spec spec = {.program = "libgravac",
                               .summary = "gravac's worker side in a training program",
                               .section = "worker",
                               .other_sections = others};
    char **args = gv_calloc((size_t)argc + 2, sizeof(char *));
    if (args == NULL)
        return GV_ERR_NOMEM;
    args[0] = (char *)(uintptr_t)(argc > 0 && argv[0] != NULL ? argv[0] : "libgravac");
    for (int i = 1; i < argc; i++)
        args[i] = (char *)(uintptr_t)argv[i];
    int rc = gv_ps_options_load(&g->o, &spec, NULL, argc > 0 ? argc : 1, args, &g->cfg);
    gv_free(args);
    if (rc == 0) {
        gv_log(GV_LOG_ERROR, "libgravac: --help was given (the options are listed above)");
        return GV_ERR_INVAL;
    }
    if (rc >= 0)
        return GV_ERR_INVAL; /* logged */
    /* the caller's model, and unless told otherwise the caller's optimizer */
    if (opt_default(g->cfg, "model"))
        g->o.job.model = GV_JOB_MODEL_EXTERNAL;
    if (opt_default(g->cfg, "optimizer"))
        g->o.job.optimizer = GV_JOB_OPTIM_CALLER;
    if (!gv_job_external(&g->o.job)) {
        gv_log(GV_LOG_ERROR, "libgravac: the model is the caller's: --model must be external "
                             "(nn/'s models train with gravac-worker)");
        return GV_ERR_INVAL;
    }
    if (g->o.job.method == GV_JOB_ACCORDION) {
        /* its per-layer decisions come from epoch boundaries, which gravac_step does not take */
        gv_log(GV_LOG_ERROR, "libgravac: --method accordion is not offered to training programs "
                             "yet (it needs their epoch boundaries); use gravac-exp, "
                             "gravac-geo, static or dense");
        return GV_ERR_INVAL;
    }
    return GV_OK;
}

gravac_status gravac_create(int argc, const char *const *argv, struct gravac **g_p)
{
    gv_log_set_cb(gravac_log_sink, NULL);
    struct gravac *g = gv_calloc(1, sizeof(*g));
    if (g == NULL)
        return GRAVAC_ERR_NOMEM;
    gv_layout_init(&g->layout);
    g->t_create = gv_now_s();
    gv_status_t status = gravac_options(g, argc, argv);
    if (status == GV_OK && gv_cluster_resolve(&g->o.cl, GV_ROLE_WORKER, environ) != GV_OK)
        status = GV_ERR_INVAL;
    if (status == GV_OK) {
        pthread_mutex_lock(&err_mu);
        snprintf(log_tag, sizeof(log_tag), "worker%u", g->o.cl.my_rank);
        pthread_mutex_unlock(&err_mu);
        status = gv_job_resolve(&g->o.job, g->o.cl.n_workers);
    }
    if (status == GV_OK)
        status = gravac_out_open(g);
    if (status != GV_OK) {
        gravac_destroy(g);
        return (gravac_status)status;
    }
    *g_p = g;
    return GRAVAC_OK;
}

void gravac_destroy(struct gravac *g)
{
    if (g == NULL)
        return;
    gv_worker_destroy(g->w);
    gravac_out_close(g);
    gv_layout_cleanup(&g->layout);
    gv_free(g->momentum);
    gv_cfg_destroy(g->cfg);
    gv_free(g);
}

int gravac_rank(const struct gravac *g)
{
    return (int)g->o.cl.my_rank;
}

int gravac_size(const struct gravac *g)
{
    return (int)g->o.cl.n_workers;
}

int gravac_num_servers(const struct gravac *g)
{
    return (int)g->o.cl.n_servers;
}

gravac_status gravac_add_tensor(struct gravac *g, const char *name, int ndim, const int64_t *shape)
{
    if (g->w != NULL || ndim < 0 || ndim > GV_LAYOUT_MAX_DIMS || (ndim > 0 && shape == NULL)) {
        gv_log(GV_LOG_ERROR, "gravac_add_tensor: %s",
               g->w != NULL ? "the worker has started: the layout is fixed"
                            : "ndim must be 0..8, with a shape");
        return GRAVAC_ERR_INVAL;
    }
    uint64_t dims[GV_LAYOUT_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        dims[d] = shape[d] > 0 ? (uint64_t)shape[d] : 0;
    char why[300];
    gv_status_t status = gv_layout_add(&g->layout, name, (uint32_t)ndim, dims, why, sizeof(why));
    if (status != GV_OK)
        gv_log(GV_LOG_ERROR, "gravac_add_tensor: %s", why);
    return (gravac_status)status;
}

/* ---------------------------------------------------------------- start, step, finish */

gravac_status gravac_start(struct gravac *g, float *params, float *grads, size_t numel)
{
    if (g->w != NULL || params == NULL || grads == NULL || g->layout.n == 0 ||
        numel != g->layout.total) {
        gv_log(GV_LOG_ERROR,
               "gravac_start: %s (the registered tensors hold %llu elements, the buffers %zu)",
               g->w != NULL ? "already started" : "the buffers must hold the registered tensors",
               (unsigned long long)g->layout.total, numel);
        return GRAVAC_ERR_INVAL;
    }
    const struct gv_ps_options *o = &g->o;
    if (o->job.optimizer == GV_JOB_OPTIM_JOB &&
        (g->momentum = gv_calloc(numel, sizeof(float))) == NULL)
        return GRAVAC_ERR_NOMEM;
    struct gv_auth_secret *secret = gv_calloc(1, sizeof(*secret));
    if (secret == NULL)
        return GRAVAC_ERR_NOMEM;
    gv_status_t status =
        gv_auth_secret_load(o->oc.secret_file, getenv("GV_SECRET"), o->oc.insecure, secret);
    if (status == GV_OK) {
        struct gv_worker_model wm = {.params = params,
                                     .grads = grads,
                                     .momentum = g->momentum,
                                     .numel = numel,
                                     .layout = &g->layout};
        struct gv_worker_config wc = {.job = &o->job,
                                      .cluster = &o->cl,
                                      .secret = secret,
                                      .cmp_threads = o->to.compress_threads,
                                      .verify_every = (uint32_t)o->to.verify_every,
                                      .heartbeat_interval_ns = o->oc.heartbeat_interval,
                                      .peer_timeout_ns = o->oc.peer_timeout};
        status = gv_worker_create(&wc, &wm, &g->w);
    }
    gv_auth_secret_clear(secret);
    gv_free(secret);
    if (status != GV_OK)
        return (gravac_status)status;
    g->numel = numel;
    g->t_start = gv_now_s();
    if (g->o.cl.my_rank == 0)
        printf("gravac: worker 0 of %u, %u servers: %u tensors, %llu parameters, method %s, "
               "optimizer %s\n",
               o->cl.n_workers, o->cl.n_servers, g->layout.n, (unsigned long long)numel,
               gv_job_method_str(o->job.method),
               o->job.optimizer == GV_JOB_OPTIM_CALLER ? "the caller's" : "the job's SGD");
    fflush(stdout);
    return GRAVAC_OK;
}

gravac_status gravac_step(struct gravac *g, double loss, double compute_s, uint64_t samples,
                          struct gravac_step_info *info)
{
    if (g->w == NULL) {
        gv_log(GV_LOG_ERROR, "gravac_step: gravac_start has not succeeded");
        return GRAVAC_ERR_INVAL;
    }
    if (!isfinite(loss) && g->o.job.method == GV_JOB_AUTO && !g->told_no_loss) {
        g->told_no_loss = true;
        gv_log(GV_LOG_WARN,
               "gravac_step: no training loss given (NaN): the AUTO controller, which compares "
               "its CFs by how fast the loss falls, has only their times to go on; pass the "
               "batch's loss (gravac.torch takes it from backward() unless capture_loss=False)");
    }
    double t0 = gv_now_s();
    struct gv_worker_step_in in = {.loss = isfinite(loss) ? loss : 0.0,
                                   .lr = g->lr,
                                   .compute_s = compute_s > 0 ? compute_s : 0.0,
                                   .pause_s = g->pause_s,
                                   .samples = samples > 0 ? samples : 1};
    struct gv_worker_step_out out;
    gv_status_t status = gv_worker_step(g->w, &in, &out);
    if (status != GV_OK)
        return (gravac_status)status;
    g->pause_s = 0.0;
    double step_s = gv_now_s() - t0;
    if (!out.stop) {
        g->steps++;
        g->samples += in.samples;
        gravac_out_step(g, &out, loss, compute_s, step_s);
    }
    g->stopped = out.stop;
    if (info != NULL) {
        struct gv_worker_summary s;
        gv_worker_get_summary(g->w, &s);
        *info = (struct gravac_step_info){.iteration = out.iter,
                                          .level = (int32_t)out.level,
                                          .stopped = out.stop,
                                          .cf = out.cf,
                                          .cf_candidate = out.cf_candidate,
                                          .theta_min = out.theta_min,
                                          .bytes_sent = out.bytes_sent,
                                          .bytes_recv = out.bytes_recv,
                                          .nnz_sent = out.nnz_sent,
                                          .compress_s = out.compress_s,
                                          .comm_s = out.comm_s,
                                          .step_s = step_s,
                                          .checks = s.checksum_checks,
                                          .dense_bytes = 4 * (uint64_t)g->numel};
    }
    return GRAVAC_OK;
}

gravac_status gravac_set_lr(struct gravac *g, double lr)
{
    if (!isfinite(lr) || lr < 0) {
        gv_log(GV_LOG_ERROR, "gravac_set_lr: learning rate %g (must be finite and >= 0)", lr);
        return GRAVAC_ERR_INVAL;
    }
    g->lr = lr;
    return GRAVAC_OK;
}

gravac_status gravac_report_eval(struct gravac *g, double loss, double accuracy)
{
    gravac_out_eval(g, loss, accuracy);
    return GRAVAC_OK;
}

gravac_status gravac_finish(struct gravac *g)
{
    if (g->w == NULL)
        return GRAVAC_ERR_INVAL;
    double secs = gv_now_s() - g->t_start;
    gv_status_t status = gv_worker_finish(g->w, gv_worker_iteration(g->w));
    gravac_out_summary(g, secs);
    return (gravac_status)status;
}

void gravac_fail(struct gravac *g, const char *why)
{
    if (g != NULL && g->w != NULL)
        gv_worker_fail(g->w, why != NULL ? why : "the training program failed");
}
