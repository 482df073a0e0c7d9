/* gravac_worker_main.c: the gravac-worker program: options (flags, GV_* environment, the config
 * file's [worker] and common sections), the standalone mode (one process trains alone with the
 * nn/ optimizer) and main(). The distributed mode, the default, is in gravac_worker_dist.c,
 * data loading in gravac_worker_data.c. Exit status: 0 success, 1 a run that failed, 2 bad options
 * or a refused checkpoint, 3 the job was stopped on request (SIGTERM or SIGINT here or elsewhere).
 */
#include "worker_prog.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

#define WORKER_TRY(expr)                                                                           \
    do {                                                                                           \
        gv_status_t try_status_ = (expr);                                                          \
        if (try_status_ != GV_OK)                                                                  \
            return try_status_;                                                                    \
    } while (0)

/* ---------------------------------------------------------------- standalone */

struct run {
    const struct gv_ps_options *o;
    struct gv_nn_model *model;
    struct gv_nn_dataset *train, *test;
    struct gv_nn_metrics *mf;
    struct gv_nn_batch_buf eval_buf;
    double t0;
    double eval_s; /* time spent evaluating, left out of samples/s */
    double best_acc, best_ppl;
    int64_t steps_to_target;
    double time_to_target;
    struct gv_nn_eval last;
    int rank, world;
    double target;
};

static void emit(struct run *r, const struct gv_nn_record *rec)
{
    if (!r->o->to.quiet) {
        char line[256];
        gv_nn_progress_format(rec, line, sizeof(line));
        printf("%s\n", line);
        fflush(stdout);
    }
    if (r->mf != NULL && gv_nn_metrics_write(r->mf, rec) != GV_OK)
        r->mf = NULL; /* logged once; keep training */
}

static gv_status_t run_eval(struct run *r, int64_t step, int64_t epoch, int *stop)
{
    struct gv_nn_eval ev;
    int bs = gv_nn_model_cfg(r->model)->max_batch;
    WORKER_TRY(
        gv_nn_evaluate(r->model, r->test, bs, (size_t)r->o->to.eval_limit, &r->eval_buf, &ev));
    int lstm = r->o->job.model == GV_NN_LSTM;
    struct gv_nn_record rec = {
        .type = "eval",
        .step = step,
        .epoch = epoch,
        .time_s = gv_now_s() - r->t0,
        .loss = ev.loss,
        .accuracy = ev.accuracy,
        .perplexity = lstm ? ev.perplexity : -1.0,
        .cf = 1.0,
        .standalone = 1,
    };
    emit(r, &rec);
    r->last = ev;
    if (ev.accuracy > r->best_acc)
        r->best_acc = ev.accuracy;
    if (r->best_ppl <= 0 || ev.perplexity < r->best_ppl)
        r->best_ppl = ev.perplexity;
    if (r->target > 0 && ev.accuracy >= r->target && r->steps_to_target < 0) {
        r->steps_to_target = step;
        r->time_to_target = rec.time_s;
        *stop = 1;
    }
    return GV_OK;
}

struct window {
    struct gv_nn_stats st;
    int64_t samples;
    double t;
};

static gv_status_t train_loop(struct run *r, int64_t total, int64_t *done_p)
{
    const struct gv_job *job = &r->o->job;
    const struct gv_train_opts *to = &r->o->to;
    struct gv_nn_sampler smp;
    struct gv_nn_batch_buf buf;
    WORKER_TRY(gv_nn_sampler_init(&smp, r->train->n_total, r->rank, r->world, job->seed));
    size_t *idx = gv_malloc((size_t)job->batch * sizeof(size_t));
    gv_status_t status = gv_nn_batch_buf_init(&buf, r->train, job->batch);
    if (idx == NULL && status == GV_OK)
        status = GV_ERR_NOMEM;
    struct window w = {.t = gv_now_s()};
    int64_t epoch = 0, step = 0, per_epoch = job->steps_per_epoch;
    int stop = 0;
    for (; status == GV_OK && step < total && !stop; step++) {
        struct gv_nn_batch b;
        struct gv_nn_stats st;
        if ((status = gv_nn_sampler_next(&smp, job->batch, idx, &epoch)) != GV_OK ||
            (status = gv_nn_batch_gather(r->train, idx, job->batch, &buf, &b)) != GV_OK ||
            (status = gv_nn_model_train_step(r->model, &b, &st)) != GV_OK ||
            (status = gv_nn_model_optim_step(r->model, &job->optim, step)) != GV_OK)
            break;
        if (!isfinite(st.loss_sum)) {
            gv_log(GV_LOG_ERROR, "training diverged: loss is %g at step %lld (lower --lr?)",
                   st.loss_sum, (long long)step);
            status = GV_ERR_INVAL;
            break;
        }
        w.st.loss_sum += st.loss_sum;
        w.st.correct += st.correct;
        w.st.count += st.count;
        w.samples += job->batch;
        if ((uint64_t)(step + 1) % to->progress_every == 0 || step + 1 == total) {
            double now = gv_now_s(), loss = w.st.loss_sum / (double)w.st.count;
            struct gv_nn_record rec = {
                .type = "step",
                .step = step + 1,
                .epoch = epoch,
                .time_s = now - r->t0,
                .loss = loss,
                .accuracy = (double)w.st.correct / (double)w.st.count,
                .perplexity = job->model == GV_NN_LSTM ? exp(loss) : -1.0,
                .samples_per_s = (double)w.samples / (now - w.t),
                .lr = gv_optim_lr(&job->optim, step),
                .cf = 1.0,
                .bytes_sent = 0,
                .standalone = 1,
            };
            emit(r, &rec);
            w = (struct window){.t = gv_now_s()};
        }
        int epoch_end = per_epoch > 0 && (step + 1) % per_epoch == 0;
        if ((to->eval_every > 0 ? (uint64_t)(step + 1) % to->eval_every == 0 : epoch_end) ||
            step + 1 == total) {
            double e0 = gv_now_s();
            status = run_eval(r, step + 1, epoch, &stop);
            double spent = gv_now_s() - e0;
            r->eval_s += spent;
            w.t += spent; /* progress samples/s counts training time only */
        }
    }
    *done_p = step;
    gv_free(idx);
    gv_nn_batch_buf_cleanup(&buf);
    gv_nn_sampler_cleanup(&smp);
    return status;
}

static void print_summary(const struct run *r, int64_t steps, double secs)
{
    const struct gv_job *job = &r->o->job;
    printf("summary: model %s, %zu parameters, device %s, %lld steps of %d (%.2f epochs of the "
           "shard) in %.1f s (%.1f s of it evaluating), %.0f samples/s training\n",
           gv_nn_model_kind_str(job->model), gv_nn_model_numel(r->model),
           gv_nn_backend_name(gv_nn_model_backend(r->model)), (long long)steps, job->batch,
           (double)steps * job->batch / (double)r->train->n, secs, r->eval_s,
           (double)steps * job->batch / (secs - r->eval_s));
    printf("summary: final test loss %.4f, accuracy %.2f%%", r->last.loss,
           100.0 * r->last.accuracy);
    if (job->model == GV_NN_LSTM)
        printf(", perplexity %.2f (best %.2f)", r->last.perplexity, r->best_ppl);
    printf(", best accuracy %.2f%%\n", 100.0 * r->best_acc);
    if (r->target > 0) {
        if (r->steps_to_target >= 0)
            printf("summary: target %.2f%% reached after %lld steps, %.1f s\n", 100.0 * r->target,
                   (long long)r->steps_to_target, r->time_to_target);
        else
            printf("summary: target %.2f%% not reached\n", 100.0 * r->target);
    }
}

static int run_standalone(struct gv_ps_options *o)
{
    struct run r = {.o = o, .steps_to_target = -1, .world = o->to.world};
    struct gv_nn_backend *be = NULL;
    int rc = 1;
    r.rank = o->cl.rank < 0 ? 0 : o->cl.rank;
    r.target = o->to.target > 1.0 ? o->to.target / 100.0 : o->to.target;
    if (r.rank >= r.world) {
        fprintf(stderr, "gravac-worker: --rank %d must be < --world %d\n", r.rank, r.world);
        return 2;
    }
    gv_status_t status = gv_job_resolve(&o->job, (uint32_t)r.world);
    if (status != GV_OK)
        return status == GV_ERR_INVAL ? 2 : 1;
    if (wp_load_data(&o->job, r.rank, r.world, true, &r.train, &r.test) != GV_OK)
        goto out;
    int64_t total = o->job.total_steps;
    if (gv_nn_backend_create(o->to.device, o->to.threads, &be) != GV_OK ||
        gv_nn_model_create(be, &o->job.model_cfg, &r.model) != GV_OK ||
        gv_nn_model_init(r.model, o->job.seed) != GV_OK ||
        gv_nn_batch_buf_init(&r.eval_buf, r.test, o->job.model_cfg.max_batch) != GV_OK)
        goto out;
    if (o->to.metrics_file[0] != '\0') {
        char path[1024];
        gv_cluster_expand(o->to.metrics_file, GV_ROLE_WORKER, (uint32_t)r.rank, path, sizeof(path));
        if (gv_nn_metrics_open(path, &r.mf) != GV_OK)
            goto out;
    }
    printf("gravac-worker standalone: model %s (%zu parameters in %d tensors), data %s "
           "(%zu train in shard %d of %d of %zu, %zu test), device %s, threads %d, batch %d, "
           "%lld steps\n",
           gv_nn_model_kind_str(o->job.model), gv_nn_model_numel(r.model),
           gv_nn_model_tensor_count(r.model), r.train->name, r.train->n, r.rank, r.world,
           r.train->n_total, r.test->n, gv_nn_backend_name(be), o->to.threads, o->job.batch,
           (long long)total);
    fflush(stdout);
    int64_t done = 0;
    r.t0 = gv_now_s();
    status = train_loop(&r, total, &done);
    double secs = gv_now_s() - r.t0;
    if (status == GV_OK) {
        print_summary(&r, done, secs);
        rc = 0;
    }
    if (rc == 0 && o->cl.dump_params[0] != '\0') {
        char path[1024];
        size_t n = gv_nn_model_numel(r.model);
        float *host = gv_malloc(n * sizeof(float));
        gv_cluster_expand(o->cl.dump_params, GV_ROLE_WORKER, (uint32_t)r.rank, path, sizeof(path));
        if (host == NULL || gv_nn_model_get_params(r.model, host) != GV_OK ||
            gv_ps_dump_floats(path, host, n) != GV_OK)
            rc = 1;
        gv_free(host);
    }
out:
    gv_nn_metrics_close(r.mf);
    gv_nn_batch_buf_cleanup(&r.eval_buf);
    gv_nn_model_destroy(r.model);
    gv_nn_backend_destroy(be);
    gv_nn_dataset_destroy(r.train);
    gv_nn_dataset_destroy(r.test);
    return rc;
}

int main(int argc, char **argv)
{
    static struct gv_ps_options o;
    uint64_t rss_start = gv_ps_rss();
    gv_log_set_tag("worker");
    static const char *const others[] = {"server", "launch", NULL};
    struct gv_cfg_spec spec = {.program = "gravac-worker",
                               .summary = "a gravac worker: trains on its data shard with the "
                                          "servers (or alone with --standalone)",
                               .section = "worker",
                               .other_sections = others};
    struct gv_cfg *cfg = NULL;
    int rc = gv_ps_options_load(&o, &spec, NULL, argc, argv, &cfg);
    if (rc >= 0)
        return rc;
    if (gv_job_external(&o.job) || o.job.optimizer == GV_JOB_OPTIM_CALLER) {
        /* the job is one of PyTorch's (or another libgravac caller's): its servers accept
         * workers that bring their own model and optimizer, which this program has not */
        gv_log(GV_LOG_ERROR, "gravac-worker trains nn/'s models with the job's SGD: --model "
                             "external and --optimizer caller are for libgravac callers "
                             "(PyTorch: the gravac.torch package)");
        gv_cfg_destroy(cfg);
        return 2;
    }
    rc = o.to.standalone ? run_standalone(&o) : wp_run_distributed(&o, rss_start);
    gv_cfg_destroy(cfg);
    return rc;
}
