/* bench_train_out.c: what `gravac-bench train` reports: the per-run CSV, the JSON (set-up,
 * machine, every run with its evaluations and CF timeline, the aggregates over repeats and
 * the claim check), the summary tables on stdout, and the gnuplot plots. */
#include "bench_train.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool bt_method_is_static(const struct bt_opts *o, int m)
{
    return strncmp(o->methods[m].label, "static", 6) == 0;
}

bool bt_method_is_gravac(const struct bt_opts *o, int m)
{
    return strncmp(o->methods[m].label, "gravac", 6) == 0;
}

int bt_method_dense(const struct bt_opts *o)
{
    for (int m = 0; m < o->n_methods; m++)
        if (strcmp(o->methods[m].label, "dense") == 0)
            return m;
    return -1;
}

/* ---------------------------------------------------------------- aggregates, claim */

void bt_aggregate(const struct bt_opts *o, const struct bt_result *rs, int n, const char *rate,
                  int method, struct bt_agg *a)
{
    memset(a, 0, sizeof(*a));
    a->time_min = a->iter_min = a->acc_min = INFINITY;
    a->time_max = a->iter_max = a->acc_max = -INFINITY;
    for (int i = 0; i < n; i++) {
        const struct bt_result *r = &rs[i];
        if (!r->ok || r->method != method || strcmp(r->rate, rate) != 0)
            continue;
        a->n_ok++;
        a->acc_mean += r->final_acc;
        a->acc_min = GV_MIN(a->acc_min, r->final_acc);
        a->acc_max = GV_MAX(a->acc_max, r->final_acc);
        a->sps_mean += r->samples_per_s;
        a->up_mean += (double)r->up_bytes;
        a->down_mean += (double)r->down_bytes;
        a->cf_mean += r->mean_cf;
        double its = (double)GV_MAX(r->iters, 1);
        a->ms_it += 1e3 * r->train_s / its;
        a->compute_ms += 1e3 * r->compute_s / its;
        a->compress_ms += 1e3 * r->compress_s / its;
        a->wait_ms += 1e3 * r->wait_s / its;
        a->up_it += (double)r->up_bytes / its / o->workers;
        a->down_it += (double)r->down_bytes / its / o->workers;
        if (r->target_iter < 0)
            continue;
        a->n_reached++;
        a->time_mean += r->target_train_s;
        a->time_min = GV_MIN(a->time_min, r->target_train_s);
        a->time_max = GV_MAX(a->time_max, r->target_train_s);
        a->iter_mean += (double)r->target_iter;
        a->iter_min = GV_MIN(a->iter_min, (double)r->target_iter);
        a->iter_max = GV_MAX(a->iter_max, (double)r->target_iter);
        a->up_t_mean += (double)r->up_target;
        a->down_t_mean += (double)r->down_target;
    }
    if (a->n_ok > 0) {
        a->acc_mean /= a->n_ok;
        a->sps_mean /= a->n_ok;
        a->up_mean /= a->n_ok;
        a->down_mean /= a->n_ok;
        a->cf_mean /= a->n_ok;
        a->ms_it /= a->n_ok;
        a->compute_ms /= a->n_ok;
        a->compress_ms /= a->n_ok;
        a->wait_ms /= a->n_ok;
        a->up_it /= a->n_ok;
        a->down_it /= a->n_ok;
    }
    if (a->n_reached > 0) {
        a->time_mean /= a->n_reached;
        a->iter_mean /= a->n_reached;
        a->up_t_mean /= a->n_reached;
        a->down_t_mean /= a->n_reached;
    }
}

/* A method's mean time to the target when every repeat reached it; else 0. */
static double out_time_all(const struct bt_opts *o, const struct bt_result *rs, int n,
                           const char *rate, int m, double *iters)
{
    struct bt_agg a;
    bt_aggregate(o, rs, n, rate, m, &a);
    if (a.n_ok == 0 || a.n_reached != a.n_ok)
        return 0;
    if (iters != NULL)
        *iters = a.iter_mean;
    return a.time_mean;
}

void bt_claim(const struct bt_opts *o, const struct bt_result *rs, int n, const char *rate,
              int method, struct bt_claim *c)
{
    memset(c, 0, sizeof(*c));
    c->best_static = -1;
    int dense = bt_method_dense(o);
    double it_d = 0, it_m = 0;
    double t_d = dense >= 0 ? out_time_all(o, rs, n, rate, dense, &it_d) : 0;
    double t_m = out_time_all(o, rs, n, rate, method, &it_m);
    if (t_d <= 0 || t_m <= 0)
        return;
    c->have = true;
    c->speedup_vs_dense = t_d / t_m;
    c->iter_ratio = it_m / it_d;
    double best = 0;
    for (int m = 0; m < o->n_methods; m++) {
        double t = bt_method_is_static(o, m) ? out_time_all(o, rs, n, rate, m, NULL) : 0;
        if (t > 0 && (best == 0 || t < best)) {
            best = t;
            c->best_static = m;
        }
    }
    c->vs_best_static = best > 0 ? t_m / best : 0;
    c->pass = c->speedup_vs_dense >= 3.0 && c->iter_ratio <= 1.1 &&
              (best == 0 || c->vs_best_static <= 1.2);
}

/* ---------------------------------------------------------------- CSV */

static void out_hist(const struct bt_result *r, char *buf, size_t len)
{
    buf[0] = '\0';
    for (int i = 0; i < r->n_hist; i++)
        snprintf(buf + strlen(buf), len - strlen(buf), "%s%g:%llu", i ? ";" : "", r->hist[i].cf,
                 (unsigned long long)r->hist[i].n);
}

gv_status_t bt_write_csv(const struct bt_opts *o, const struct bt_result *rs, int n,
                         const char *path)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        gv_log(GV_LOG_ERROR, "bench: cannot write %s: %s", path, strerror(errno));
        return GV_ERR_IO;
    }
    fprintf(f, "rate,method,repeat,seed,status,iterations,train_s,ms_per_iter,samples_per_s,"
               "final_accuracy,best_accuracy,target,target_iter,target_train_s,target_wall_s,"
               "up_bytes,down_bytes,up_bytes_to_target,down_bytes_to_target,mean_cf,cf_changes,"
               "iters_dense,iters_floor,iters_candidate,iters_per_cf,compute_ms_per_iter,"
               "compress_ms_per_iter,wait_ms_per_iter\n");
    for (int i = 0; i < n; i++) {
        const struct bt_result *r = &rs[i];
        char hist[600];
        out_hist(r, hist, sizeof(hist));
        fprintf(f, "%s,%s,%d,%llu,%s,", r->rate, o->methods[r->method].label, r->repeat,
                (unsigned long long)r->seed, r->ok ? "ok" : "failed");
        if (!r->ok) {
            fprintf(f, ",,,,,,%.4f,,,,,,,,,,,,,,,,\n", o->target);
            continue;
        }
        fprintf(f, "%llu,%.3f,%.3f,%.1f,%.4f,%.4f,%.4f,", (unsigned long long)r->iters, r->train_s,
                1e3 * r->train_s / (double)GV_MAX(r->iters, 1), r->samples_per_s, r->final_acc,
                r->best_acc, o->target);
        if (r->target_iter >= 0)
            fprintf(f, "%lld,%.3f,%.3f,", (long long)r->target_iter, r->target_train_s,
                    r->target_wall_s);
        else
            fprintf(f, ",,,");
        fprintf(f, "%llu,%llu,", (unsigned long long)r->up_bytes,
                (unsigned long long)r->down_bytes);
        if (r->target_iter >= 0)
            fprintf(f, "%llu,%llu,", (unsigned long long)r->up_target,
                    (unsigned long long)r->down_target);
        else
            fprintf(f, ",,");
        double its = (double)GV_MAX(r->iters, 1);
        fprintf(f, "%.3f,%llu,%llu,%llu,%llu,%s,%.3f,%.3f,%.3f\n", r->mean_cf,
                (unsigned long long)r->cf_changes, (unsigned long long)r->n_dense,
                (unsigned long long)r->n_floor, (unsigned long long)r->n_cand, hist,
                1e3 * r->compute_s / its, 1e3 * r->compress_s / its, 1e3 * r->wait_s / its);
    }
    if (fclose(f) != 0) {
        gv_log(GV_LOG_ERROR, "bench: cannot write %s: %s", path, strerror(errno));
        return GV_ERR_IO;
    }
    return GV_OK;
}

/* ---------------------------------------------------------------- JSON */

static cJSON *out_run_json(const struct bt_opts *o, const struct bt_result *r)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "rate", r->rate);
    cJSON_AddStringToObject(j, "method", o->methods[r->method].label);
    cJSON_AddNumberToObject(j, "repeat", r->repeat);
    cJSON_AddNumberToObject(j, "seed", (double)r->seed);
    cJSON_AddStringToObject(j, "dir", r->dir);
    cJSON_AddBoolToObject(j, "ok", r->ok);
    if (!r->ok) {
        cJSON_AddStringToObject(j, "error", r->err);
        return j;
    }
    cJSON_AddNumberToObject(j, "iterations", (double)r->iters);
    cJSON_AddNumberToObject(j, "train_s", r->train_s);
    cJSON_AddNumberToObject(j, "samples_per_s", r->samples_per_s);
    cJSON_AddNumberToObject(j, "final_accuracy", r->final_acc);
    cJSON_AddNumberToObject(j, "best_accuracy", r->best_acc);
    if (r->target_iter >= 0) {
        cJSON_AddNumberToObject(j, "target_iter", (double)r->target_iter);
        cJSON_AddNumberToObject(j, "target_train_s", r->target_train_s);
        cJSON_AddNumberToObject(j, "target_wall_s", r->target_wall_s);
        cJSON_AddNumberToObject(j, "up_bytes_to_target", (double)r->up_target);
        cJSON_AddNumberToObject(j, "down_bytes_to_target", (double)r->down_target);
    } else {
        cJSON_AddNullToObject(j, "target_iter");
        cJSON_AddNullToObject(j, "target_train_s");
    }
    cJSON_AddNumberToObject(j, "up_bytes", (double)r->up_bytes);
    cJSON_AddNumberToObject(j, "down_bytes", (double)r->down_bytes);
    cJSON_AddNumberToObject(j, "mean_cf", r->mean_cf);
    cJSON_AddNumberToObject(j, "cf_changes", (double)r->cf_changes);
    double its = (double)GV_MAX(r->iters, 1);
    cJSON *sp = cJSON_AddObjectToObject(j, "worker0_ms_per_iter");
    cJSON_AddNumberToObject(sp, "total", 1e3 * r->train_s / its);
    cJSON_AddNumberToObject(sp, "compute", 1e3 * r->compute_s / its);
    cJSON_AddNumberToObject(sp, "compress_and_push", 1e3 * r->compress_s / its);
    cJSON_AddNumberToObject(sp, "wait_for_updates", 1e3 * r->wait_s / its);
    cJSON *at = cJSON_AddArrayToObject(j, "also_targets");
    for (int k = 0; k < o->n_also; k++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "target", o->also[k]);
        if (r->also_iter[k] >= 0) {
            cJSON_AddNumberToObject(x, "iter", (double)r->also_iter[k]);
            cJSON_AddNumberToObject(x, "train_s", r->also_train_s[k]);
        } else {
            cJSON_AddNullToObject(x, "iter");
            cJSON_AddNullToObject(x, "train_s");
        }
        cJSON_AddItemToArray(at, x);
    }
    cJSON *lv = cJSON_AddObjectToObject(j, "iters_per_level");
    cJSON_AddNumberToObject(lv, "dense", (double)r->n_dense);
    cJSON_AddNumberToObject(lv, "floor", (double)r->n_floor);
    cJSON_AddNumberToObject(lv, "candidate", (double)r->n_cand);
    cJSON *h = cJSON_AddArrayToObject(j, "iters_per_cf");
    for (int i = 0; i < r->n_hist; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "cf", r->hist[i].cf);
        cJSON_AddNumberToObject(x, "iterations", (double)r->hist[i].n);
        cJSON_AddItemToArray(h, x);
    }
    /* the CF timeline as change points [iteration, CF] (the first iteration included) */
    cJSON *tl = cJSON_AddArrayToObject(j, "cf_timeline");
    for (size_t i = 0; i < r->n_it; i++)
        if (i == 0 || r->it[i].cf != r->it[i - 1].cf) {
            double pt[2] = {(double)i, r->it[i].cf};
            cJSON_AddItemToArray(tl, cJSON_CreateDoubleArray(pt, 2));
        }
    cJSON *ev = cJSON_AddArrayToObject(j, "evaluations");
    for (size_t i = 0; i < r->n_ev; i++) {
        double pt[4] = {(double)r->ev[i].step, r->ev[i].train_s, r->ev[i].time_s, r->ev[i].acc};
        cJSON_AddItemToArray(ev, cJSON_CreateDoubleArray(pt, 4));
    }
    return j;
}

static cJSON *out_agg_json(const struct bt_agg *a)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "runs", a->n_ok);
    cJSON_AddNumberToObject(j, "reached", a->n_reached);
    if (a->n_reached > 0) {
        cJSON_AddNumberToObject(j, "time_to_target_mean", a->time_mean);
        cJSON_AddNumberToObject(j, "time_to_target_min", a->time_min);
        cJSON_AddNumberToObject(j, "time_to_target_max", a->time_max);
        cJSON_AddNumberToObject(j, "iters_to_target_mean", a->iter_mean);
        cJSON_AddNumberToObject(j, "iters_to_target_min", a->iter_min);
        cJSON_AddNumberToObject(j, "iters_to_target_max", a->iter_max);
        cJSON_AddNumberToObject(j, "up_bytes_to_target_mean", a->up_t_mean);
        cJSON_AddNumberToObject(j, "down_bytes_to_target_mean", a->down_t_mean);
    }
    if (a->n_ok > 0) {
        cJSON_AddNumberToObject(j, "final_accuracy_mean", a->acc_mean);
        cJSON_AddNumberToObject(j, "final_accuracy_min", a->acc_min);
        cJSON_AddNumberToObject(j, "final_accuracy_max", a->acc_max);
        cJSON_AddNumberToObject(j, "samples_per_s_mean", a->sps_mean);
        cJSON_AddNumberToObject(j, "up_bytes_mean", a->up_mean);
        cJSON_AddNumberToObject(j, "down_bytes_mean", a->down_mean);
        cJSON_AddNumberToObject(j, "mean_cf", a->cf_mean);
        cJSON_AddNumberToObject(j, "ms_per_iter", a->ms_it);
        cJSON_AddNumberToObject(j, "compute_ms_per_iter", a->compute_ms);
        cJSON_AddNumberToObject(j, "compress_ms_per_iter", a->compress_ms);
        cJSON_AddNumberToObject(j, "wait_ms_per_iter", a->wait_ms);
        cJSON_AddNumberToObject(j, "up_bytes_per_iter_worker", a->up_it);
        cJSON_AddNumberToObject(j, "down_bytes_per_iter_worker", a->down_it);
    }
    return j;
}

static void out_setup_json(cJSON *root, const struct bt_opts *o, const struct bt_machine *mach)
{
    cJSON *s = cJSON_AddObjectToObject(root, "setup");
    cJSON_AddNumberToObject(s, "servers", o->servers);
    cJSON_AddNumberToObject(s, "workers", o->workers);
    cJSON_AddStringToObject(s, "network", mach->netns ? "netns" : "loopback");
    cJSON_AddStringToObject(s, "tbf_latency", o->latency);
    cJSON_AddNumberToObject(s, "tbf_burst", (double)o->burst); /* 0: the default */
    cJSON *rates = cJSON_AddArrayToObject(s, "rates");
    for (int i = 0; i < o->n_rates; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "rate", o->rates[i]);
        if (mach->iperf_up[i] > 0) {
            cJSON_AddNumberToObject(x, "iperf3_up_bps", mach->iperf_up[i]);
            cJSON_AddNumberToObject(x, "iperf3_down_bps", mach->iperf_down[i]);
        }
        cJSON_AddItemToArray(rates, x);
    }
    cJSON_AddNumberToObject(s, "repeats", o->repeats);
    cJSON_AddNumberToObject(s, "seed", (double)o->seed);
    cJSON_AddBoolToObject(s, "same_seed", o->same_seed);
    cJSON_AddNumberToObject(s, "target_accuracy", o->target);
    cJSON_AddItemToObject(s, "also_targets", cJSON_CreateDoubleArray(o->also, o->n_also));
    cJSON_AddNumberToObject(s, "steps", (double)o->steps);
    cJSON_AddNumberToObject(s, "eval_every", (double)o->eval_every);
    cJSON_AddStringToObject(s, "job", o->job);
    cJSON *ms = cJSON_AddArrayToObject(s, "methods");
    for (int m = 0; m < o->n_methods; m++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "label", o->methods[m].label);
        cJSON_AddStringToObject(x, "options", o->methods[m].opts);
        cJSON_AddItemToArray(ms, x);
    }
    cJSON *mj = cJSON_AddObjectToObject(root, "machine");
    cJSON_AddNumberToObject(mj, "cpus", (double)mach->cpus);
    cJSON_AddStringToObject(mj, "cpu", mach->cpu_model);
    cJSON_AddStringToObject(mj, "kernel", mach->kernel);
    cJSON_AddItemToObject(mj, "load_before", cJSON_CreateDoubleArray(mach->load_before, 3));
    cJSON_AddItemToObject(mj, "load_after", cJSON_CreateDoubleArray(mach->load_after, 3));
}

gv_status_t bt_write_json(const struct bt_opts *o, const struct bt_machine *mach,
                          const struct bt_result *rs, int n, const char *path)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "bench", "gravac-bench train");
    out_setup_json(root, o, mach);
    cJSON *runs = cJSON_AddArrayToObject(root, "runs");
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(runs, out_run_json(o, &rs[i]));
    cJSON *sum = cJSON_AddArrayToObject(root, "summary");
    cJSON *claims = cJSON_AddArrayToObject(root, "claim");
    for (int ri = 0; ri < o->n_rates; ri++)
        for (int m = 0; m < o->n_methods; m++) {
            struct bt_agg a;
            bt_aggregate(o, rs, n, o->rates[ri], m, &a);
            cJSON *x = out_agg_json(&a);
            cJSON_AddStringToObject(x, "rate", o->rates[ri]);
            cJSON_AddStringToObject(x, "method", o->methods[m].label);
            cJSON_AddItemToArray(sum, x);
            if (!bt_method_is_gravac(o, m))
                continue;
            struct bt_claim c;
            bt_claim(o, rs, n, o->rates[ri], m, &c);
            cJSON *y = cJSON_CreateObject();
            cJSON_AddStringToObject(y, "rate", o->rates[ri]);
            cJSON_AddStringToObject(y, "method", o->methods[m].label);
            cJSON_AddBoolToObject(y, "measured", c.have);
            if (c.have) {
                cJSON_AddNumberToObject(y, "speedup_vs_dense", c.speedup_vs_dense);
                cJSON_AddNumberToObject(y, "iterations_vs_dense", c.iter_ratio);
                if (c.best_static >= 0) {
                    cJSON_AddStringToObject(y, "best_static", o->methods[c.best_static].label);
                    cJSON_AddNumberToObject(y, "time_vs_best_static", c.vs_best_static);
                }
                cJSON_AddBoolToObject(y, "pass", c.pass);
            }
            cJSON_AddItemToArray(claims, y);
        }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    if (s == NULL)
        return GV_ERR_NOMEM;
    FILE *f = fopen(path, "w");
    bool ok = f != NULL && fputs(s, f) >= 0 && fputc('\n', f) != EOF;
    if (f != NULL && fclose(f) != 0)
        ok = false;
    cJSON_free(s);
    if (!ok) {
        gv_log(GV_LOG_ERROR, "bench: cannot write %s: %s", path, strerror(errno));
        return GV_ERR_IO;
    }
    return GV_OK;
}

/* ---------------------------------------------------------------- summary on stdout */

static void out_bytes(double b, char *buf, size_t len)
{
    if (b >= 1024.0 * 1048576.0)
        snprintf(buf, len, "%.2f GiB", b / (1024.0 * 1048576.0));
    else if (b >= 1048576.0)
        snprintf(buf, len, "%.1f MiB", b / 1048576.0);
    else
        snprintf(buf, len, "%.1f KiB", b / 1024.0);
}

static void out_timeline(const struct bt_opts *o, const struct bt_result *rs, int n,
                         const char *rate, int m, char *buf, size_t len)
{
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        const struct bt_result *r = &rs[i];
        if (!r->ok || r->method != m || strcmp(r->rate, rate) != 0)
            continue;
        for (int k = 0; k < r->n_hist && strlen(buf) + 24 < len; k++)
            snprintf(buf + strlen(buf), len - strlen(buf), "%s%gx%llu", k ? " " : "", r->hist[k].cf,
                     (unsigned long long)r->hist[k].n);
        snprintf(buf + strlen(buf), len - strlen(buf), " (%llu changes)",
                 (unsigned long long)r->cf_changes);
        return; /* the first repeat */
    }
    (void)o;
}

/* Time and iterations to each of --also-targets: means over the repeats that reached it. */
static void out_also(const struct bt_opts *o, const struct bt_result *rs, int n, const char *rate)
{
    if (o->n_also == 0)
        return;
    printf("more targets: mean time [s] / iterations over the repeats that reached it (reached "
           "of run)\n%-12s",
           "method");
    for (int k = 0; k < o->n_also; k++)
        printf(" %-22.2f", 100.0 * o->also[k]);
    printf("\n");
    for (int m = 0; m < o->n_methods; m++) {
        printf("%-12s", o->methods[m].label);
        for (int k = 0; k < o->n_also; k++) {
            double t = 0, it = 0;
            int runs = 0, got = 0;
            for (int i = 0; i < n; i++) {
                const struct bt_result *r = &rs[i];
                if (!r->ok || r->method != m || strcmp(r->rate, rate) != 0)
                    continue;
                runs++;
                if (r->also_iter[k] < 0)
                    continue;
                got++;
                t += r->also_train_s[k];
                it += (double)r->also_iter[k];
            }
            char cell[40];
            if (got > 0)
                snprintf(cell, sizeof(cell), "%.1f / %.0f (%d/%d)", t / got, it / got, got, runs);
            else
                snprintf(cell, sizeof(cell), "- (0/%d)", runs);
            printf(" %-22s", cell);
        }
        printf("\n");
    }
}

/* Where an iteration's time goes (worker 0) and what one worker moves per iteration. */
static void out_split(const struct bt_opts *o, const struct bt_result *rs, int n, const char *rate)
{
    printf("per iteration (worker 0; means over the repeats): ms = compute + compress&push + "
           "wait for the updates; bytes per worker\n%-12s %-8s %-8s %-9s %-8s %-11s %-11s %s\n",
           "method", "ms", "compute", "compress", "wait", "up", "down", "down/up");
    for (int m = 0; m < o->n_methods; m++) {
        struct bt_agg a;
        bt_aggregate(o, rs, n, rate, m, &a);
        if (a.n_ok == 0)
            continue;
        char up[24], down[24];
        out_bytes(a.up_it, up, sizeof(up));
        out_bytes(a.down_it, down, sizeof(down));
        printf("%-12s %-8.1f %-8.2f %-9.2f %-8.1f %-11s %-11s %.2f\n", o->methods[m].label, a.ms_it,
               a.compute_ms, a.compress_ms, a.wait_ms, up, down,
               a.up_it > 0 ? a.down_it / a.up_it : 0);
    }
}

void bt_print_summary(const struct bt_opts *o, const struct bt_result *rs, int n)
{
    for (int ri = 0; ri < o->n_rates; ri++) {
        const char *rate = o->rates[ri];
        printf("\n== %s: target %.2f%% test accuracy, budget %llu iterations; mean [min, max] "
               "over %d repeat(s); times exclude evaluation\n",
               rate, 100.0 * o->target, (unsigned long long)o->steps, o->repeats);
        printf("%-12s %-24s %-20s %-9s %-11s %-11s %-10s %-8s %s\n", "method", "time to target [s]",
               "iters to target", "acc@budget", "up (run)", "down (run)", "samples/s", "mean CF",
               "iterations per CF (first repeat)");
        for (int m = 0; m < o->n_methods; m++) {
            struct bt_agg a;
            bt_aggregate(o, rs, n, rate, m, &a);
            char t[40], it[40], up[24], down[24], tl[400];
            if (a.n_reached > 0) {
                snprintf(t, sizeof(t), "%.1f [%.1f, %.1f]%s", a.time_mean, a.time_min, a.time_max,
                         a.n_reached < a.n_ok ? "*" : "");
                snprintf(it, sizeof(it), "%.0f [%.0f, %.0f]", a.iter_mean, a.iter_min, a.iter_max);
            } else {
                snprintf(t, sizeof(t), "%s", a.n_ok ? "not reached" : "failed");
                snprintf(it, sizeof(it), "-");
            }
            out_bytes(a.up_mean, up, sizeof(up));
            out_bytes(a.down_mean, down, sizeof(down));
            out_timeline(o, rs, n, rate, m, tl, sizeof(tl));
            printf("%-12s %-24s %-20s %-9.2f %-11s %-11s %-10.0f %-8.1f %s\n", o->methods[m].label,
                   t, it, 100.0 * a.acc_mean, up, down, a.sps_mean, a.cf_mean, tl);
        }
        out_also(o, rs, n, rate);
        out_split(o, rs, n, rate);
        for (int m = 0; m < o->n_methods; m++) {
            if (!bt_method_is_gravac(o, m))
                continue;
            struct bt_claim c;
            bt_claim(o, rs, n, rate, m, &c);
            if (!c.have) {
                printf("claim %s at %s: not measurable (dense or %s did not reach the target in "
                       "every repeat)\n",
                       o->methods[m].label, rate, o->methods[m].label);
                continue;
            }
            printf("claim %s at %s: %.2fx sooner than dense (>= 3: %s), %.2fx dense's "
                   "iterations (<= 1.1: %s), ",
                   o->methods[m].label, rate, c.speedup_vs_dense,
                   c.speedup_vs_dense >= 3 ? "yes" : "no", c.iter_ratio,
                   c.iter_ratio <= 1.1 ? "yes" : "no");
            if (c.best_static >= 0)
                printf("%.2fx the best static (%s) (<= 1.2: %s)", c.vs_best_static,
                       o->methods[c.best_static].label, c.vs_best_static <= 1.2 ? "yes" : "no");
            else
                printf("no static CF reached the target");
            printf(": %s\n", c.pass ? "PASS" : "FAIL");
        }
    }
    fflush(stdout);
}

/* ---------------------------------------------------------------- plots */

static const char *out_colors[] = {"#000000", "#1f77b4", "#2ca02c", "#9467bd", "#d62728",
                                   "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"};

/* The plot commands for every method's first successful run at rate: one entry per method
 * "'<dir>/<file>' using <cols> with <style> lw 2 lc rgb '<c>' title '<label>'". */
static void out_plot_lines(FILE *f, const struct bt_opts *o, const struct bt_result *rs, int n,
                           const char *rate, const char *file, const char *cols, const char *style)
{
    bool first = true;
    for (int m = 0; m < o->n_methods; m++)
        for (int i = 0; i < n; i++) {
            const struct bt_result *r = &rs[i];
            if (!r->ok || r->method != m || strcmp(r->rate, rate) != 0)
                continue;
            /* dash types too: methods that send the same CF draw the same line */
            fprintf(f, "%s'%s/%s' using %s with %s lw %d dt %d lc rgb '%s' title '%s'",
                    first ? "plot " : ", \\\n     ", r->dir, file, cols, style, m < 4 ? 3 : 2,
                    1 + m % 5, out_colors[m % GV_ARRAY_LEN(out_colors)], o->methods[m].label);
            first = false;
            break;
        }
    fprintf(f, "%s\n", first ? "print 'nothing to plot'" : "");
}

static gv_status_t out_plot(const struct bt_opts *o, const struct bt_result *rs, int n,
                            const char *rate, const char *name, const char *title, const char *body,
                            int kind)
{
    char dir[600], script[800], img[800], term[160];
    snprintf(dir, sizeof(dir), "%s/plots", o->out);
    gv_status_t status = bt_mkdirs(dir);
    if (status != GV_OK)
        return status;
    snprintf(script, sizeof(script), "%s/%s-%s.gp", dir, rate, name);
    snprintf(img, sizeof(img), "%s/%s-%s.%s", dir, rate, name, o->plot_fmt);
    FILE *f = fopen(script, "w");
    if (f == NULL) {
        gv_log(GV_LOG_ERROR, "bench: cannot write %s: %s", script, strerror(errno));
        return GV_ERR_IO;
    }
    bt_gnuplot_terminal(o->plot_fmt, 900, kind == 3 ? 760 : 540, term, sizeof(term));
    fprintf(f, "%s\nset output '%s'\nset grid\nset key outside right top\n", term, img);
    if (kind == 3)
        fprintf(f, "set multiplot layout 2,1 title '%s (%s links, %d servers, %d workers)'\n",
                title, rate, o->servers, o->workers);
    else
        fprintf(f, "set title '%s (%s links, %d servers, %d workers)'\n", title, rate, o->servers,
                o->workers);
    fprintf(f, "%s\n", body);
    double tgt = 100.0 * o->target;
    switch (kind) {
    case 0: /* accuracy vs training time */
    case 1: /* accuracy vs iteration */
        fprintf(f,
                "set yrange [%g:*]\nset arrow from graph 0, first %g to graph 1, first %g "
                "nohead dt 2 lc rgb '#808080'\n",
                GV_MAX(0.0, tgt - 15.0), tgt, tgt);
        out_plot_lines(f, o, rs, n, rate, "eval.dat", kind == 0 ? "2:4" : "1:4",
                       "linespoints pt 7 ps 0.4");
        break;
    case 2: /* CF vs iteration */
        out_plot_lines(f, o, rs, n, rate, "iter.dat", "1:3", "steps");
        break;
    default: /* cumulative bytes, both directions */
        fprintf(f, "set title 'uplink (workers to servers)'\n");
        out_plot_lines(f, o, rs, n, rate, "iter.dat", "1:5", "lines");
        fprintf(f, "set title 'downlink (servers to workers)'\nset xlabel 'iteration'\n");
        out_plot_lines(f, o, rs, n, rate, "iter.dat", "1:6", "lines");
        fprintf(f, "unset multiplot\n");
        break;
    }
    if (fclose(f) != 0)
        return GV_ERR_IO;
    return bt_gnuplot(script);
}

gv_status_t bt_plots(const struct bt_opts *o, const struct bt_result *rs, int n)
{
    static const struct {
        const char *name, *title, *body;
    } plots[] = {
        {"accuracy-time", "Test accuracy vs training time",
         "set xlabel 'training time [s], evaluations excluded (log scale)'\nset logscale x\n"
         "set ylabel 'test accuracy [%]'"},
        {"accuracy-iteration", "Test accuracy vs iteration",
         "set xlabel 'iteration'\nset ylabel 'test accuracy [%]'"},
        {"cf-iteration", "Compression factor sent vs iteration",
         "set xlabel 'iteration'\nset ylabel 'CF (1 = dense)'\nset logscale y\n"
         "set yrange [0.8:*]"},
        {"bytes", "Cumulative bytes, all workers", "set ylabel 'MiB (log scale)'\nset logscale y"},
    };
    gv_status_t status = GV_OK;
    for (int ri = 0; ri < o->n_rates && status == GV_OK; ri++)
        for (int k = 0; k < (int)GV_ARRAY_LEN(plots) && status == GV_OK; k++)
            status =
                out_plot(o, rs, n, o->rates[ri], plots[k].name, plots[k].title, plots[k].body, k);
    return status;
}
