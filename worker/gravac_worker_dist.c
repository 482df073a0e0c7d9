/* gravac_worker_dist.c: gravac-worker's distributed mode: the training loop around the worker
 * runtime. Every worker trains on its shard of each epoch and steps through gv_worker_step;
 * worker 0 evaluates, prints progress and may end the job early (--target-accuracy). Every
 * worker can write its own metrics file (JSON lines: progress windows, evaluations, one record
 * per iteration with the CF and the bytes each way, and a summary). Iteration and evaluation
 * records carry train_s, the time since training started less the time spent evaluating, so
 * that time to accuracy can be read without the evaluations in it. */
#include "worker_prog.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

#define DIST_MAX_TENSORS 64
#define DIST_TIMELINE 48

struct dist {
    struct gv_ps_options *o;
    uint64_t rss_start; /* VmRSS when main() started: the libraries' share */
    uint32_t rank;
    bool lead; /* evaluates and prints progress */
    struct gv_nn_backend *be;
    struct gv_nn_model *model;
    struct gv_nn_dataset *train, *test;
    struct gv_nn_batch_buf eval_buf;
    struct gv_worker *w;
    struct gv_trace *trace; /* --trace: the timeline, or NULL */
    FILE *mf;
    double t0, eval_s;
    double eval_train_s; /* train_s of the evaluation being recorded */
    double target;
    struct gv_nn_eval last;
    bool have_eval;
    double best_acc;
    int64_t steps_to_target;
    double time_to_target;
    /* CF timeline: the iterations where the CF sent changed */
    uint64_t tl_iter[DIST_TIMELINE];
    double tl_cf[DIST_TIMELINE];
    uint32_t tl_n;
    uint64_t cf_changes;
    double last_cf;
    bool stopped_by_server;
    bool overlap; /* --overlap, and the worker can */
    uint64_t data_bytes;
    uint64_t cuda_rss; /* --device cuda: RSS the CUDA runtime added (libraries, context) */
    uint64_t ws_bytes; /* the model's workspace in host memory (0 on cuda: device memory) */
    char names[DIST_MAX_TENSORS][24];
    size_t numel[DIST_MAX_TENSORS];
};

static volatile sig_atomic_t dist_stop;

static void dist_on_signal(int sig)
{
    dist_stop = sig;
}

/* ---------------------------------------------------------------- metrics file */

static void dist_write(struct dist *d, cJSON *obj)
{
    if (d->mf != NULL) {
        char *s = cJSON_PrintUnformatted(obj);
        if (s != NULL) {
            fprintf(d->mf, "%s\n", s);
            fflush(d->mf);
            cJSON_free(s);
        }
    }
    cJSON_Delete(obj);
}

static void dist_iter_record(struct dist *d, const struct gv_worker_step_out *out, double loss,
                             double compute_s)
{
    if (d->mf == NULL)
        return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "iter");
    cJSON_AddNumberToObject(o, "iter", (double)out->iter);
    cJSON_AddNumberToObject(o, "train_s", gv_now_s() - d->t0 - d->eval_s);
    cJSON_AddStringToObject(o, "level", gv_adapt_level_str(out->level));
    cJSON_AddNumberToObject(o, "cf", out->cf);
    cJSON_AddNumberToObject(o, "theta_min", out->theta_min);
    cJSON_AddNumberToObject(o, "cf_candidate", out->cf_candidate);
    cJSON_AddNumberToObject(o, "lr", (double)out->lr);
    cJSON_AddNumberToObject(o, "loss", loss);
    cJSON_AddNumberToObject(o, "bytes_sent", (double)out->bytes_sent);
    cJSON_AddNumberToObject(o, "bytes_recv", (double)out->bytes_recv);
    cJSON_AddNumberToObject(o, "payload_sent", (double)out->payload_sent);
    cJSON_AddNumberToObject(o, "payload_recv", (double)out->payload_recv);
    cJSON_AddNumberToObject(o, "wire_sent", (double)out->wire_sent);
    cJSON_AddNumberToObject(o, "wire_recv", (double)out->wire_recv);
    cJSON_AddNumberToObject(o, "nnz_sent", (double)out->nnz_sent);
    cJSON_AddNumberToObject(o, "compute_s", compute_s);
    cJSON_AddNumberToObject(o, "compress_s", out->compress_s);
    cJSON_AddNumberToObject(o, "comm_s", out->comm_s);
    cJSON_AddBoolToObject(o, "resynced", out->resynced);
    dist_write(d, o);
}

static void dist_emit(struct dist *d, const struct gv_nn_record *r, uint64_t bytes_recv)
{
    if (d->lead && !d->o->to.quiet) {
        char line[300], rb[32];
        gv_nn_progress_format(r, line, sizeof(line));
        if (strcmp(r->type, "step") == 0) {
            gv_ps_fmt_bytes((double)bytes_recv, rb, sizeof(rb));
            printf("%s  recv %s\n", line, rb);
        } else {
            printf("%s\n", line);
        }
        fflush(stdout);
    }
    if (d->mf == NULL)
        return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", r->type);
    cJSON_AddNumberToObject(o, "step", (double)r->step);
    cJSON_AddNumberToObject(o, "epoch", (double)r->epoch);
    cJSON_AddNumberToObject(o, "time_s", r->time_s);
    if (strcmp(r->type, "eval") == 0)
        cJSON_AddNumberToObject(o, "train_s", d->eval_train_s);
    cJSON_AddNumberToObject(o, "loss", r->loss);
    cJSON_AddNumberToObject(o, "accuracy", r->accuracy);
    if (r->perplexity >= 0)
        cJSON_AddNumberToObject(o, "perplexity", r->perplexity);
    if (strcmp(r->type, "step") == 0) {
        cJSON_AddNumberToObject(o, "samples_per_s", r->samples_per_s);
        cJSON_AddNumberToObject(o, "lr", (double)r->lr);
        cJSON_AddNumberToObject(o, "cf", r->cf);
        cJSON_AddNumberToObject(o, "bytes_sent", (double)r->bytes_sent);
        cJSON_AddNumberToObject(o, "bytes_recv", (double)bytes_recv);
    }
    cJSON_AddBoolToObject(o, "standalone", false);
    dist_write(d, o);
}

/* ---------------------------------------------------------------- set-up */

static gv_status_t dist_model(struct dist *d)
{
    struct gv_ps_options *o = d->o;
    /* --device cuda: the replica, the training step, compression and the optimizer step on the
     * GPU (the CUDA plugins are loaded here, and only here) */
    uint64_t rss0 = gv_ps_rss();
    gv_status_t status = gv_nn_backend_create(o->to.device, o->to.threads, &d->be);
    if (status != GV_OK)
        gv_log(GV_LOG_ERROR, "worker %u: cannot compute on --device %s: %s", d->rank,
               o->to.device == GV_NN_CUDA ? "cuda" : "cpu", gv_status_str(status));
    if (status == GV_OK && gv_nn_backend_mem(d->be) == GV_MEM_DEVICE) {
        uint64_t rss1 = gv_ps_rss();
        d->cuda_rss = rss1 > rss0 ? rss1 - rss0 : 0;
    }
    if (status == GV_OK)
        status = gv_nn_model_create(d->be, &o->job.model_cfg, &d->model);
    if (status == GV_OK)
        status = gv_nn_model_init(d->model, o->job.seed);
    if (status == GV_OK && o->to.device != GV_NN_CUDA)
        d->ws_bytes = gv_nn_model_workspace_bytes(d->model);
    if (status == GV_OK && d->lead)
        status = gv_nn_batch_buf_init(&d->eval_buf, d->test, o->job.model_cfg.max_batch);
    if (status != GV_OK)
        return status;
    int n = gv_nn_model_tensor_count(d->model);
    if (n > DIST_MAX_TENSORS) {
        gv_log(GV_LOG_ERROR, "model has %d tensors, at most %d supported", n, DIST_MAX_TENSORS);
        return GV_ERR_INVAL;
    }
    for (int i = 0; i < n; i++) {
        const struct gv_nn_tensor *t = gv_nn_model_tensor(d->model, i);
        snprintf(d->names[i], sizeof(d->names[i]), "%s", t->name);
        d->numel[i] = t->numel;
    }
    struct gv_worker_model wm = {.params = gv_nn_model_params(d->model),
                                 .grads = gv_nn_model_grads(d->model),
                                 .momentum = gv_nn_model_momentum(d->model),
                                 .be = d->be,
                                 .numel = gv_nn_model_numel(d->model),
                                 .n_tensors = (uint32_t)n,
                                 .tensor_numel = d->numel,
                                 .names = (const char(*)[24])d->names};
    struct gv_auth_secret *secret = gv_calloc(1, sizeof(*secret));
    if (secret == NULL)
        return GV_ERR_NOMEM;
    status = gv_auth_secret_load(o->oc.secret_file, getenv("GV_SECRET"), o->oc.insecure, secret);
    if (status == GV_OK) {
        struct gv_worker_config wc = {.job = &o->job,
                                      .cluster = &o->cl,
                                      .secret = secret,
                                      .cmp_threads = o->to.compress_threads,
                                      .verify_every = (uint32_t)o->to.verify_every,
                                      .heartbeat_interval_ns = o->oc.heartbeat_interval,
                                      .peer_timeout_ns = o->oc.peer_timeout,
                                      .checkpoint_dir = o->os.checkpoint_dir,
                                      .checkpoint_every = o->os.checkpoint_every,
                                      .checkpoint_keep = o->os.checkpoint_keep,
                                      .trace = d->trace};
        status = gv_worker_create(&wc, &wm, &d->w);
    }
    gv_auth_secret_clear(secret);
    gv_free(secret);
    return status;
}

static gv_status_t dist_data(struct dist *d)
{
    const struct gv_job *job = &d->o->job;
    /* this worker's shard of the training set; the test set only where it is evaluated */
    gv_status_t status =
        wp_load_data(job, (int)d->rank, (int)job->num_workers, d->lead, &d->train, &d->test);
    if (status != GV_OK)
        return status;
    bool img = d->train->kind == GV_NN_DATA_IMAGES;
    if (d->train->n_total != job->n_train || d->train->n_classes != job->model_cfg.n_classes ||
        (img && (d->train->h != job->model_cfg.in_h || d->train->w != job->model_cfg.in_w ||
                 d->train->c != job->model_cfg.in_c))) {
        gv_log(GV_LOG_ERROR,
               "the loaded data (%zu samples, %dx%dx%d, %d classes) differs from "
               "its header (%zu, %dx%dx%d, %d)",
               d->train->n_total, d->train->h, d->train->w, d->train->c, d->train->n_classes,
               job->n_train, job->model_cfg.in_h, job->model_cfg.in_w, job->model_cfg.in_c,
               job->model_cfg.n_classes);
        return GV_ERR_PROTO;
    }
    d->data_bytes = wp_data_bytes(d->train, d->test);
    return GV_OK;
}

/* ---------------------------------------------------------------- the loop */

static gv_status_t dist_eval(struct dist *d, int64_t step, int64_t epoch, bool *stop)
{
    struct gv_nn_eval ev;
    int bs = gv_nn_model_cfg(d->model)->max_batch;
    d->eval_train_s = gv_now_s() - d->t0 - d->eval_s;
    gv_status_t status =
        gv_nn_evaluate(d->model, d->test, bs, (size_t)d->o->to.eval_limit, &d->eval_buf, &ev);
    if (status != GV_OK)
        return status;
    struct gv_nn_record rec = {.type = "eval",
                               .step = step,
                               .epoch = epoch,
                               .time_s = gv_now_s() - d->t0,
                               .loss = ev.loss,
                               .accuracy = ev.accuracy,
                               .perplexity = d->o->job.model == GV_NN_LSTM ? ev.perplexity : -1.0};
    dist_emit(d, &rec, 0);
    d->last = ev;
    d->have_eval = true;
    d->best_acc = GV_MAX(d->best_acc, ev.accuracy);
    if (d->target > 0 && ev.accuracy >= d->target && d->steps_to_target < 0) {
        d->steps_to_target = step;
        d->time_to_target = rec.time_s;
        *stop = true;
    }
    return GV_OK;
}

struct window {
    struct gv_nn_stats st;
    int64_t samples;
    uint64_t sent, recv;
    double t;
};

static void dist_timeline(struct dist *d, uint64_t iter, double cf)
{
    if (d->tl_n > 0 && cf == d->last_cf)
        return;
    if (d->tl_n > 0)
        d->cf_changes++;
    if (d->tl_n < DIST_TIMELINE) {
        d->tl_iter[d->tl_n] = iter;
        d->tl_cf[d->tl_n] = cf;
        d->tl_n++;
    }
    d->last_cf = cf;
}

/* One iteration pushed whose updates are still arriving (--overlap), and what its records
 * need once it is finished. */
struct pending {
    bool on;
    int64_t step, epoch;
    struct gv_nn_stats st;
    double loss, compute_s;
};

struct loop {
    struct dist *d;
    struct window win;
    struct pending p;
    bool stop;        /* the job ended (worker 0 stopped it, or the target was reached) */
    int64_t ended_at; /* worker 0 stopped it: the iteration that did not run (-1: none) */
    double hook_s;    /* time spent in the hooks this iteration (not compute) */
    double pause_s;   /* evaluations since the last push (told to the servers with the next) */
    gv_status_t fail; /* a finish's error inside a hook */
};

/* The records of a finished iteration: metrics, CF timeline, the progress window and line. */
static void dist_record(struct loop *lp, const struct gv_worker_step_out *out)
{
    struct dist *d = lp->d;
    const struct gv_job *job = &d->o->job;
    const struct gv_train_opts *to = &d->o->to;
    const struct pending *p = &lp->p;
    int64_t step = p->step, total = job->total_steps;
    dist_iter_record(d, out, p->loss, p->compute_s);
    dist_timeline(d, out->iter, out->cf);
    struct window *win = &lp->win;
    win->st.loss_sum += p->st.loss_sum;
    win->st.correct += p->st.correct;
    win->st.count += p->st.count;
    win->samples += job->batch;
    win->sent += out->bytes_sent;
    win->recv += out->bytes_recv;
    if ((uint64_t)(step + 1) % to->progress_every == 0 || step + 1 == total) {
        double now = gv_now_s(), wl = win->st.loss_sum / (double)win->st.count;
        uint64_t its = (uint64_t)win->samples / (uint64_t)job->batch;
        struct gv_nn_record rec = {.type = "step",
                                   .step = step + 1,
                                   .epoch = p->epoch,
                                   .time_s = now - d->t0,
                                   .loss = wl,
                                   .accuracy = (double)win->st.correct / (double)win->st.count,
                                   .perplexity = job->model == GV_NN_LSTM ? exp(wl) : -1.0,
                                   .samples_per_s =
                                       (double)win->samples * job->num_workers / (now - win->t),
                                   .lr = out->lr,
                                   .cf = out->cf,
                                   .bytes_sent = its ? win->sent / its : 0};
        dist_emit(d, &rec, its ? win->recv / its : 0);
        *win = (struct window){.t = gv_now_s()};
    }
}

/* Finishes the pending iteration and records it; GV_OK with lp->stop when the job ended. */
static gv_status_t dist_finish(struct loop *lp)
{
    if (!lp->p.on)
        return GV_OK;
    lp->p.on = false;
    struct gv_worker_step_out out;
    gv_status_t status = gv_worker_step_finish(lp->d->w, &out);
    if (status != GV_OK)
        return status;
    if (out.stop) {
        lp->d->stopped_by_server = true;
        lp->stop = true;
        lp->ended_at = lp->p.step;
        gv_log(GV_LOG_INFO, "worker %u: the job ended at iteration %lld (worker 0 stopped it)",
               lp->d->rank, (long long)lp->p.step);
        return GV_OK;
    }
    dist_record(lp, &out);
    return GV_OK;
}

/* The hooks (--overlap): the forward pass waits for the parameters it reads; the backward pass
 * finishes the last iteration (its updates are all in: the forward pass read every parameter)
 * and hands over each block of gradients as it is produced. GV_ERR_AGAIN: the job ended. */
static gv_status_t dist_need(void *user, size_t lo, size_t hi)
{
    struct loop *lp = user;
    uint64_t t = gv_now_ns();
    gv_status_t status = lp->p.on ? gv_worker_params_wait(lp->d->w, lo, hi) : GV_OK;
    lp->hook_s += (double)(gv_now_ns() - t) * 1e-9;
    return status;
}

static gv_status_t dist_ready(void *user, size_t lo)
{
    struct loop *lp = user;
    uint64_t t = gv_now_ns();
    gv_status_t status = dist_finish(lp);
    if (status != GV_OK)
        lp->fail = status;
    else if (lp->stop)
        status = GV_ERR_AGAIN;
    else
        status = gv_worker_grads_ready(lp->d->w, lo);
    lp->hook_s += (double)(gv_now_ns() - t) * 1e-9;
    return status;
}

/* --comm-only: the last iteration finished, a constant gradient (dense: every element is sent)
 * in place of the batch's, a zero loss. */
static gv_status_t dist_comm_only(struct dist *d, struct loop *lp, struct gv_nn_stats *st)
{
    uint64_t t = gv_now_ns();
    gv_status_t status = dist_finish(lp);
    lp->hook_s += (double)(gv_now_ns() - t) * 1e-9;
    if (status != GV_OK || lp->stop)
        return status == GV_OK ? GV_ERR_AGAIN : status;
    float *g = gv_nn_model_grads(d->model);
    size_t n = gv_nn_model_numel(d->model);
    if (gv_nn_backend_mem(d->be) == GV_MEM_DEVICE) {
        gv_log(GV_LOG_ERROR, "worker %u: --comm-only runs on CPU workers only", d->rank);
        return GV_ERR_UNSUPPORTED;
    }
    for (size_t i = 0; i < n; i++)
        g[i] = 1e-7f;
    *st = (struct gv_nn_stats){.loss_sum = 0.0, .correct = 0, .count = 1};
    return GV_OK;
}

static gv_status_t dist_loop(struct dist *d, int64_t *done_p)
{
    const struct gv_job *job = &d->o->job;
    const struct gv_train_opts *to = &d->o->to;
    struct gv_nn_sampler smp;
    struct gv_nn_batch_buf buf;
    gv_status_t status =
        gv_nn_sampler_init(&smp, d->train->n_total, (int)d->rank, (int)job->num_workers, job->seed);
    if (status != GV_OK)
        return status;
    size_t *idx = gv_malloc((size_t)job->batch * sizeof(size_t));
    status = gv_nn_batch_buf_init(&buf, d->train, job->batch);
    if (idx == NULL && status == GV_OK)
        status = GV_ERR_NOMEM;
    int64_t step = (int64_t)gv_worker_iteration(d->w), total = job->total_steps, epoch = 0;
    for (int64_t i = 0; status == GV_OK && i < step; i++) /* joined late: skip those batches */
        status = gv_nn_sampler_next(&smp, job->batch, idx, &epoch);
    struct loop lp = {.d = d, .win = {.t = gv_now_s()}, .ended_at = -1};
    bool overlap = d->overlap = to->overlap && gv_worker_overlaps(d->w);
    struct gv_nn_hooks hooks = {.params_needed = dist_need, .grads_ready = dist_ready, .user = &lp};
    for (; status == GV_OK && step < total && !lp.stop; step++) {
        if (dist_stop) {
            gv_log(GV_LOG_WARN, "worker %u: %s at iteration %lld", d->rank,
                   strsignal((int)dist_stop), (long long)step);
            (void)dist_finish(&lp);
            status = GV_ERR_CLOSED;
            break;
        }
        struct gv_nn_batch b;
        struct gv_nn_stats st;
        uint64_t tc = gv_now_ns();
        lp.hook_s = 0;
        if ((status = gv_nn_sampler_next(&smp, job->batch, idx, &epoch)) != GV_OK ||
            (status = gv_nn_batch_gather(d->train, idx, job->batch, &buf, &b)) != GV_OK)
            break;
        if (to->comm_only)
            status = dist_comm_only(d, &lp, &st);
        else if (overlap)
            status = gv_nn_model_train_step_hooked(d->model, &b, &hooks, &st);
        else
            status = gv_nn_model_train_step(d->model, &b, &st);
        if (status == GV_ERR_AGAIN && lp.stop) { /* the job ended during the backward pass */
            status = GV_OK;
            break;
        }
        if (lp.fail != GV_OK)
            status = lp.fail;
        if (status == GV_OK)
            status = dist_finish(&lp); /* a model that reported nothing (cannot happen) */
        if (status != GV_OK || lp.stop)
            break;
        double compute_s = (double)(gv_now_ns() - tc) * 1e-9 - lp.hook_s;
        double loss = st.loss_sum / (double)st.count;
        if (!isfinite(loss)) {
            gv_log(GV_LOG_ERROR,
                   "worker %u: training diverged: loss is %g at iteration %lld "
                   "(lower --lr?)",
                   d->rank, loss, (long long)step);
            status = GV_ERR_INVAL;
            break;
        }
        bool epoch_end = job->steps_per_epoch > 0 && (step + 1) % job->steps_per_epoch == 0;
        struct gv_worker_step_in in = {.loss = loss,
                                       .compute_s = compute_s,
                                       .pause_s = lp.pause_s,
                                       .samples = (uint64_t)job->batch,
                                       .epoch_end = epoch_end};
        if ((status = gv_worker_step_push(d->w, &in)) != GV_OK)
            break;
        lp.pause_s = 0.0;
        lp.p = (struct pending){.on = true,
                                .step = step,
                                .epoch = epoch,
                                .st = st,
                                .loss = loss,
                                .compute_s = compute_s};
        bool eval = to->eval_every > 0 ? (uint64_t)(step + 1) % to->eval_every == 0 : epoch_end;
        bool at_eval = d->lead && (eval || step + 1 == total);
        /* the updates arrive during the next forward pass; not before an evaluation (it reads
         * the whole model), at the last iteration, or without overlap */
        if (!overlap || at_eval || step + 1 == total) {
            if ((status = dist_finish(&lp)) != GV_OK || lp.stop)
                break;
        }
        if (at_eval) {
            double e0 = gv_now_s();
            status = dist_eval(d, step + 1, epoch, &lp.stop);
            double spent = gv_now_s() - e0;
            d->eval_s += spent;
            lp.win.t += spent;
            lp.pause_s += spent;
        }
    }
    if (status == GV_OK)
        status = dist_finish(&lp);
    else
        (void)dist_finish(&lp);
    *done_p = lp.ended_at >= 0 ? lp.ended_at : step;
    gv_free(idx);
    gv_nn_batch_buf_cleanup(&buf);
    gv_nn_sampler_cleanup(&smp);
    return status;
}

/* ---------------------------------------------------------------- summary */

/* 1 when the CUDA runtime is mapped into this process (only after --device cuda asked for the
 * plugins): the metrics summary says so, and test_e2e_memory checks that a CPU worker has none. */
static int dist_cuda_mapped(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    int found = 0;
    while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, "libcudart") != NULL;
    if (f != NULL)
        fclose(f);
    return found;
}

static void dist_line(const char *line, void *arg)
{
    (void)arg;
    printf("summary: %s\n", line);
}

static void dist_summary(struct dist *d, int64_t steps, double secs)
{
    const struct gv_job *job = &d->o->job;
    struct gv_worker_summary s;
    gv_worker_get_summary(d->w, &s);
    char a[32], b[32], c[32], e[32];
    double it = s.iterations ? (double)s.iterations : 1.0;
    uint64_t bound = 6 * s.param_bytes + d->data_bytes + d->ws_bytes + (64ull << 20);
    printf("summary: worker %u of %u, %u servers: %lld iterations of batch %d in %.1f s (%.1f s "
           "evaluating), %.2f ms per iteration, %.0f samples/s over all workers\n",
           d->rank, s.num_workers, s.num_servers, (long long)steps, job->batch, secs, d->eval_s,
           1e3 * (secs - d->eval_s) / (double)GV_MAX(steps, 1),
           (double)steps * job->batch * s.num_workers / GV_MAX(1e-9, secs - d->eval_s));
    if (d->have_eval) {
        printf("summary: final test loss %.4f, accuracy %.2f%% (best %.2f%%)\n", d->last.loss,
               100.0 * d->last.accuracy, 100.0 * d->best_acc);
        if (d->target > 0) {
            if (d->steps_to_target >= 0)
                printf("summary: target %.2f%% reached after %lld steps, %.1f s\n",
                       100.0 * d->target, (long long)d->steps_to_target, d->time_to_target);
            else
                printf("summary: target %.2f%% not reached\n", 100.0 * d->target);
        }
    }
    gv_ps_fmt_bytes((double)s.bytes.iter_sent / it, a, sizeof(a));
    gv_ps_fmt_bytes((double)s.bytes.iter_recv / it, b, sizeof(b));
    gv_ps_fmt_bytes((double)s.param_bytes, c, sizeof(c));
    printf("summary: bytes per iteration: sent %s, received %s (dense model %s); by CF:\n", a, b,
           c);
    gv_ps_bytes_describe(&s.bytes, dist_line, NULL);
    char tl[600];
    size_t off = 0;
    for (uint32_t i = 0; i < d->tl_n && off < sizeof(tl) - 40; i++)
        off += (size_t)snprintf(tl + off, sizeof(tl) - off, "%s%" PRIu64 ":%g", i ? " " : "",
                                d->tl_iter[i], d->tl_cf[i]);
    printf("summary: CF timeline (iteration:CF): %s%s; %" PRIu64 " changes, last CF %g\n", tl,
           d->tl_n == DIST_TIMELINE ? " ..." : "", d->cf_changes, d->last_cf);
    printf("summary: checksums verified %" PRIu64 " times, %" PRIu64 " mismatches, %" PRIu64
           " resyncs\n",
           s.checksum_checks, s.checksum_mismatches, s.resyncs);
    if (d->overlap)
        printf("summary: overlap: %" PRIu64 " of %" PRIu64 " pushes left during the backward pass; "
               "the forward pass waited for an update %" PRIu64 " times\n",
               s.pushes_early, s.pushes, s.params_waits);
    else
        printf("summary: overlap off (%s)\n",
               d->o->to.overlap ? "a GPU replica pushes after its backward pass" : "--no-overlap");
    /* the bound, on the raw peak (VmHWM): everything the process ever held, shared
     * libraries included (the CUDA ones are mapped only with --device cuda; there the host
     * memory the CUDA runtime itself takes, measured when the GPU backend was created, is
     * reported and left out, as no bound in terms of the model can hold it) */
    char f[32], g[32], h[32];
    uint64_t held = s.peak_rss > d->cuda_rss ? s.peak_rss - d->cuda_rss : 0;
    gv_ps_fmt_bytes((double)s.peak_rss, a, sizeof(a));
    gv_ps_fmt_bytes((double)bound, b, sizeof(b));
    gv_ps_fmt_bytes((double)d->data_bytes, e, sizeof(e));
    gv_ps_fmt_bytes((double)d->rss_start, f, sizeof(f));
    gv_ps_fmt_bytes((double)d->cuda_rss, g, sizeof(g));
    gv_ps_fmt_bytes((double)d->ws_bytes, h, sizeof(h));
    if (d->cuda_rss == 0)
        printf("summary: peak RSS %s (%s at start); bound 6 x params (%s) + data (%s) + "
               "activations (%s) + 64 MiB = %s: %s\n",
               a, f, c, e, h, b, held <= bound ? "within" : "EXCEEDED");
    else
        printf("summary: peak RSS %s (%s at start, %s the CUDA runtime's); bound 6 x params (%s) "
               "+ data (%s) + 64 MiB = %s: %s without the CUDA runtime's; %.1f MiB of GPU "
               "memory for the runtime's buffers\n",
               a, f, g, c, e, b, held <= bound ? "within" : "EXCEEDED",
               (double)s.device_bytes / 1048576.0);
    fflush(stdout);
    if (d->mf == NULL)
        return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "summary");
    cJSON_AddNumberToObject(o, "rank", d->rank);
    cJSON_AddNumberToObject(o, "iterations", (double)steps);
    cJSON_AddNumberToObject(o, "time_s", secs);
    cJSON_AddNumberToObject(o, "samples_per_s",
                            (double)steps * job->batch * s.num_workers /
                                GV_MAX(1e-9, secs - d->eval_s));
    if (d->have_eval) {
        cJSON_AddNumberToObject(o, "accuracy", d->last.accuracy);
        cJSON_AddNumberToObject(o, "best_accuracy", d->best_acc);
        cJSON_AddNumberToObject(o, "test_loss", d->last.loss);
    }
    cJSON_AddNumberToObject(o, "bytes_sent", (double)s.bytes.iter_sent);
    cJSON_AddNumberToObject(o, "bytes_recv", (double)s.bytes.iter_recv);
    cJSON_AddNumberToObject(o, "setup_sent", (double)s.setup_sent);
    cJSON_AddNumberToObject(o, "setup_recv", (double)s.setup_recv);
    cJSON_AddNumberToObject(o, "cf_changes", (double)d->cf_changes);
    cJSON_AddNumberToObject(o, "last_cf", d->last_cf);
    cJSON *by = cJSON_AddArrayToObject(o, "by_cf");
    for (uint32_t i = 0; i < s.bytes.n; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "cf", s.bytes.by_cf[i].cf);
        cJSON_AddNumberToObject(x, "iterations", (double)s.bytes.by_cf[i].iters);
        cJSON_AddNumberToObject(x, "sent", (double)s.bytes.by_cf[i].sent);
        cJSON_AddNumberToObject(x, "recv", (double)s.bytes.by_cf[i].recv);
        cJSON_AddItemToArray(by, x);
    }
    cJSON_AddNumberToObject(o, "checksum_mismatches", (double)s.checksum_mismatches);
    cJSON_AddNumberToObject(o, "peak_rss", (double)s.peak_rss);
    cJSON_AddNumberToObject(o, "rss_start", (double)d->rss_start);
    cJSON_AddNumberToObject(o, "rss_bound", (double)bound);
    cJSON_AddNumberToObject(o, "param_bytes", (double)s.param_bytes);
    cJSON_AddNumberToObject(o, "data_bytes", (double)d->data_bytes);
    cJSON_AddNumberToObject(o, "workspace_bytes", (double)d->ws_bytes);
    cJSON_AddNumberToObject(o, "cuda_mapped", dist_cuda_mapped());
    cJSON_AddNumberToObject(o, "cuda_rss", (double)d->cuda_rss);
    cJSON_AddNumberToObject(o, "device_bytes", (double)s.device_bytes);
    dist_write(d, o);
}

int wp_run_distributed(struct gv_ps_options *o, uint64_t rss_start)
{
    struct dist d;
    memset(&d, 0, sizeof(d));
    d.o = o;
    d.rss_start = rss_start;
    d.steps_to_target = -1;
    if (gv_cluster_resolve(&o->cl, GV_ROLE_WORKER, environ) != GV_OK) {
        fprintf(stderr, "gravac-worker: see --help\n");
        return 2;
    }
    d.rank = o->cl.my_rank;
    d.lead = d.rank == 0 || o->to.all_progress;
    d.target = o->to.target > 1.0 ? o->to.target / 100.0 : o->to.target;
    char tag[32];
    snprintf(tag, sizeof(tag), "worker%u", d.rank);
    gv_log_set_tag(tag);
    gv_status_t status = gv_job_resolve(&o->job, o->cl.n_workers);
    if (status != GV_OK)
        return status == GV_ERR_INVAL ? 2 : 1;
    int rc = 1;
    if (o->to.metrics_file[0] != '\0') {
        char path[1024];
        gv_cluster_expand(o->to.metrics_file, GV_ROLE_WORKER, d.rank, path, sizeof(path));
        if ((d.mf = fopen(path, "w")) == NULL) {
            gv_log(GV_LOG_ERROR, "cannot create the metrics file %s", path);
            goto out;
        }
    }
    if (gv_ps_trace_open(o->oc.trace, GV_ROLE_WORKER, d.rank, &d.trace) != GV_OK)
        goto out;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = dist_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (dist_data(&d) != GV_OK)
        goto out;
    if ((status = dist_model(&d)) != GV_OK) {
        /* refused (a fingerprint or shard mismatch, the secret, a refused checkpoint): a
         * configuration to fix, not a failure to retry */
        if (status == GV_ERR_PROTO || status == GV_ERR_VERSION || status == GV_ERR_AUTH ||
            status == GV_ERR_INVAL)
            rc = 2;
        goto out;
    }
    if (d.lead)
        printf("gravac-worker %u of %u (rank from %s, device %s): model %s (%zu parameters in %d "
               "tensors), data %s (%zu train in this worker's shard of %zu, %zu test), %u "
               "servers, method %s, %lld iterations of batch %d\n",
               d.rank, o->cl.n_workers, o->cl.rank_source, gv_nn_backend_name(d.be),
               gv_nn_model_kind_str(o->job.model), gv_nn_model_numel(d.model),
               gv_nn_model_tensor_count(d.model), d.train->name, d.train->n, d.train->n_total,
               d.test != NULL ? d.test->n : 0, o->cl.n_servers, gv_job_method_str(o->job.method),
               (long long)o->job.total_steps, o->job.batch);
    fflush(stdout);
    int64_t done = 0;
    d.t0 = gv_now_s();
    status = dist_loop(&d, &done);
    double secs = gv_now_s() - d.t0;
    if (dist_stop) {
        char why[80];
        snprintf(why, sizeof(why), "%s", strsignal((int)dist_stop));
        gv_worker_stop(d.w, why);
    } else if (status == GV_OK) {
        status = gv_worker_finish(d.w, (uint64_t)done); /* the servers' answer: how it ended */
    }
    struct gv_worker_summary ws;
    gv_worker_get_summary(d.w, &ws);
    if (status == GV_OK) {
        dist_summary(&d, done, secs);
        rc = 0;
    } else if (status == GV_ERR_CKPT) {
        gv_log(GV_LOG_ERROR,
               "worker %u: a checkpoint could not be written by every process (exit status 4): "
               "fix the storage; a restart resumes from the last committed one",
               d.rank);
        rc = 4;
    } else if (ws.stopped) {
        gv_log(GV_LOG_WARN, "worker %u: stopped on request at iteration %lld (exit status 3)",
               d.rank, (long long)done);
        rc = 3;
    }
    if (rc == 0 && o->cl.dump_params[0] != '\0') {
        char path[1024];
        size_t n = gv_nn_model_numel(d.model);
        float *host = gv_malloc(n * sizeof(float)); /* the replica may be on the GPU */
        gv_cluster_expand(o->cl.dump_params, GV_ROLE_WORKER, d.rank, path, sizeof(path));
        if (host == NULL || gv_nn_model_get_params(d.model, host) != GV_OK ||
            gv_ps_dump_floats(path, host, n) != GV_OK)
            rc = 1;
        gv_free(host);
    }
out:
    gv_worker_destroy(d.w);
    gv_trace_close(d.trace);
    if (d.mf != NULL)
        fclose(d.mf);
    gv_nn_batch_buf_cleanup(&d.eval_buf);
    gv_nn_model_destroy(d.model);
    gv_nn_backend_destroy(d.be);
    gv_nn_dataset_destroy(d.train);
    gv_nn_dataset_destroy(d.test);
    return rc;
}
