/* gravac_out.c: what libgravac writes: the metrics file (--metrics-file, JSON lines: one record
 * per iteration with the CF and the bytes each way, the evaluations the caller reports, a
 * summary; the same records gravac-worker writes, so gravac-launch and the benchmarks read
 * either) and the summary lines a worker prints at the end. */
#include "gravac_internal.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

gv_status_t gravac_out_open(struct gravac *g)
{
    const char *tmpl = g->o.to.metrics_file;
    if (tmpl == NULL || tmpl[0] == '\0')
        return GV_OK;
    char path[1024];
    gv_cluster_expand(tmpl, GV_ROLE_WORKER, g->o.cl.my_rank, path, sizeof(path));
    if ((g->mf = fopen(path, "w")) == NULL) {
        gv_log(GV_LOG_ERROR, "cannot create the metrics file %s", path);
        return GV_ERR_IO;
    }
    return GV_OK;
}

void gravac_out_close(struct gravac *g)
{
    if (g->mf != NULL)
        fclose(g->mf);
    g->mf = NULL;
}

static void out_write(struct gravac *g, cJSON *o)
{
    if (g->mf != NULL) {
        char *s = cJSON_PrintUnformatted(o);
        if (s != NULL) {
            fprintf(g->mf, "%s\n", s);
            fflush(g->mf);
            cJSON_free(s);
        }
    }
    cJSON_Delete(o);
}

static void out_num(cJSON *o, const char *k, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, k, v);
    else
        cJSON_AddNullToObject(o, k);
}

static void out_timeline(struct gravac *g, uint64_t iter, double cf)
{
    if (g->tl_n > 0 && cf == g->last_cf)
        return;
    if (g->tl_n > 0)
        g->cf_changes++;
    if (g->tl_n < GRAVAC_TIMELINE) {
        g->tl_iter[g->tl_n] = iter;
        g->tl_cf[g->tl_n] = cf;
        g->tl_n++;
    }
    g->last_cf = cf;
}

void gravac_out_step(struct gravac *g, const struct gv_worker_step_out *out, double loss,
                     double compute_s, double step_s)
{
    out_timeline(g, out->iter, out->cf);
    double now = gv_now_s();
    g->t_last = now;
    if (g->mf == NULL)
        return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "iter");
    cJSON_AddNumberToObject(o, "iter", (double)out->iter);
    cJSON_AddNumberToObject(o, "train_s", now - g->t_start - g->eval_s);
    cJSON_AddStringToObject(o, "level", gv_adapt_level_str(out->level));
    cJSON_AddNumberToObject(o, "cf", out->cf);
    cJSON_AddNumberToObject(o, "theta_min", out->theta_min);
    cJSON_AddNumberToObject(o, "cf_candidate", out->cf_candidate);
    out_num(o, "loss", loss);
    cJSON_AddNumberToObject(o, "bytes_sent", (double)out->bytes_sent);
    cJSON_AddNumberToObject(o, "bytes_recv", (double)out->bytes_recv);
    cJSON_AddNumberToObject(o, "payload_sent", (double)out->payload_sent);
    cJSON_AddNumberToObject(o, "payload_recv", (double)out->payload_recv);
    cJSON_AddNumberToObject(o, "nnz_sent", (double)out->nnz_sent);
    out_num(o, "compute_s", compute_s);
    cJSON_AddNumberToObject(o, "compress_s", out->compress_s);
    cJSON_AddNumberToObject(o, "comm_s", out->comm_s);
    cJSON_AddNumberToObject(o, "step_s", step_s);
    out_write(g, o);
}

void gravac_out_eval(struct gravac *g, double loss, double accuracy)
{
    g->last_loss = loss;
    g->last_acc = accuracy;
    if (isfinite(accuracy) && (!g->have_eval || accuracy > g->best_acc))
        g->best_acc = accuracy;
    g->have_eval = true;
    if (g->mf == NULL)
        return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "eval");
    cJSON_AddNumberToObject(o, "step", (double)g->steps);
    double now = gv_now_s();
    cJSON_AddNumberToObject(o, "time_s", g->t_start > 0 ? now - g->t_start : 0.0);
    /* the evaluation happened between the last step and now: it is not training time */
    double train = g->t_start > 0 ? (g->t_last > 0 ? g->t_last : now) - g->t_start - g->eval_s : 0;
    cJSON_AddNumberToObject(o, "train_s", train);
    out_num(o, "loss", loss);
    out_num(o, "accuracy", accuracy);
    out_write(g, o);
    if (g->t_last > 0) {
        g->eval_s += now - g->t_last;  /* steps' train_s leave the evaluation out */
        g->pause_s += now - g->t_last; /* and the servers the iteration's time */
    }
    g->t_last = now;
}

static void out_line(const char *line, void *arg)
{
    (void)arg;
    printf("summary: %s\n", line);
}

void gravac_out_summary(struct gravac *g, double secs)
{
    struct gv_worker_summary s;
    gv_worker_get_summary(g->w, &s);
    char a[32], b[32], c[32];
    double it = s.iterations ? (double)s.iterations : 1.0;
    double train = secs - g->eval_s;
    printf("summary: worker %u of %u, %u servers: %" PRIu64 " iterations in %.1f s (%.1f s "
           "outside the steps' timing), %.2f ms per iteration, %.0f samples/s over all workers\n",
           s.rank, s.num_workers, s.num_servers, s.iterations, secs, g->eval_s, 1e3 * train / it,
           (double)g->samples * s.num_workers / GV_MAX(1e-9, train));
    if (g->have_eval)
        printf("summary: final test loss %.4f, accuracy %.2f%% (best %.2f%%)\n", g->last_loss,
               100.0 * g->last_acc, 100.0 * g->best_acc);
    gv_ps_fmt_bytes((double)s.bytes.iter_sent / it, a, sizeof(a));
    gv_ps_fmt_bytes((double)s.bytes.iter_recv / it, b, sizeof(b));
    gv_ps_fmt_bytes((double)s.param_bytes, c, sizeof(c));
    printf("summary: bytes per iteration: sent %s, received %s (dense model %s); by CF:\n", a, b,
           c);
    gv_ps_bytes_describe(&s.bytes, out_line, NULL);
    char tl[600];
    size_t off = 0;
    tl[0] = '\0';
    for (uint32_t i = 0; i < g->tl_n && off < sizeof(tl) - 40; i++)
        off += (size_t)snprintf(tl + off, sizeof(tl) - off, "%s%" PRIu64 ":%g", i ? " " : "",
                                g->tl_iter[i], g->tl_cf[i]);
    printf("summary: CF timeline (iteration:CF): %s%s; %" PRIu64 " changes, last CF %g\n", tl,
           g->tl_n == GRAVAC_TIMELINE ? " ..." : "", g->cf_changes, g->last_cf);
    printf("summary: checksums verified %" PRIu64 " times (the averaged gradient and every "
           "replica's parameters), %" PRIu64 " mismatches\n",
           s.checksum_checks, s.checksum_mismatches);
    fflush(stdout);
    if (g->mf == NULL)
        return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "summary");
    cJSON_AddNumberToObject(o, "rank", s.rank);
    cJSON_AddNumberToObject(o, "iterations", (double)s.iterations);
    cJSON_AddNumberToObject(o, "time_s", secs);
    cJSON_AddNumberToObject(o, "samples_per_s",
                            (double)g->samples * s.num_workers / GV_MAX(1e-9, train));
    if (g->have_eval) {
        out_num(o, "accuracy", g->last_acc);
        out_num(o, "best_accuracy", g->best_acc);
        out_num(o, "test_loss", g->last_loss);
    }
    cJSON_AddNumberToObject(o, "bytes_sent", (double)s.bytes.iter_sent);
    cJSON_AddNumberToObject(o, "bytes_recv", (double)s.bytes.iter_recv);
    cJSON_AddNumberToObject(o, "setup_sent", (double)s.setup_sent);
    cJSON_AddNumberToObject(o, "setup_recv", (double)s.setup_recv);
    cJSON_AddNumberToObject(o, "cf_changes", (double)g->cf_changes);
    cJSON_AddNumberToObject(o, "last_cf", g->last_cf);
    cJSON_AddNumberToObject(o, "checksum_checks", (double)s.checksum_checks);
    cJSON_AddNumberToObject(o, "checksum_mismatches", (double)s.checksum_mismatches);
    cJSON_AddNumberToObject(o, "peak_rss", (double)s.peak_rss);
    cJSON_AddNumberToObject(o, "param_bytes", (double)s.param_bytes);
    out_write(g, o);
}
