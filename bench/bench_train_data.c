/* bench_train_data.c: one run's results, read from the workers' metrics files (JSON lines
 * written by gravac-worker --metrics-file): worker 0's evaluations (accuracy, training time
 * without evaluations), every worker's per-iteration records (CF, level, bytes each way), and
 * worker 0's summary (samples/s). Also the per-run series files the plots read. */
#include "bench_train.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long bt_last_iter(const char *dir, int worker)
{
    char path[800], buf[8192];
    snprintf(path, sizeof(path), "%s/worker%d.jsonl", dir, worker);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    long it = -1, size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    /* one record is a few hundred bytes: the last complete one is in the last 8 KiB */
    long off = size > (long)sizeof(buf) - 1 ? size - (long)sizeof(buf) + 1 : 0;
    if (size >= 0 && fseek(f, off, SEEK_SET) == 0) {
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        buf[n] = '\0';
        static const char key[] = "{\"type\":\"iter\",\"iter\":";
        for (const char *p = buf; (p = strstr(p, key)) != NULL; p++) /* max: the last */
            it = GV_MAX(it, strtol(p + sizeof(key) - 1, NULL, 10));  /* may be cut short */
    }
    fclose(f);
    return it;
}

static char *data_slurp(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = gv_malloc(cap);
    while (buf != NULL) {
        if (len + 1 >= cap) {
            char *nb = gv_realloc(buf, cap * 2);
            if (nb == NULL) {
                gv_free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + len, 1, cap - 1 - len, f);
        len += r;
        if (r == 0)
            break;
    }
    fclose(f);
    if (buf != NULL)
        buf[len] = '\0';
    if (len_p != NULL)
        *len_p = len;
    return buf;
}

static void data_err(struct bt_result *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void data_err(struct bt_result *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof(r->err), fmt, ap);
    va_end(ap);
}

static double data_num(const cJSON *o, const char *key, bool *ok)
{
    const cJSON *v = cJSON_GetObjectItem(o, key);
    if (!cJSON_IsNumber(v)) {
        *ok = false;
        return 0;
    }
    return v->valuedouble;
}

static gv_status_t data_grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return GV_OK;
    size_t nc = *cap ? *cap * 2 : 256;
    void *na = gv_realloc(*arr, nc * elem);
    if (na == NULL)
        return GV_ERR_NOMEM;
    *arr = na;
    *cap = nc;
    return GV_OK;
}

static void data_hist_add(struct bt_result *r, double cf)
{
    for (int i = 0; i < r->n_hist; i++)
        if (r->hist[i].cf == cf) {
            r->hist[i].n++;
            return;
        }
    if (r->n_hist < BT_MAX_HIST)
        r->hist[r->n_hist++] = (struct bt_cf_count){cf, 1};
}

/* One worker's file: iteration records into r->it (worker 0 creates them, the others add their
 * bytes), evaluations and the summary from worker 0. */
static gv_status_t data_worker(struct bt_result *r, const char *path, int rank, size_t *it_cap,
                               size_t *ev_cap)
{
    char *s = data_slurp(path, NULL);
    if (s == NULL) {
        data_err(r, "cannot read %s: %s", path, strerror(errno));
        return GV_ERR_PROTO;
    }
    gv_status_t status = GV_OK;
    size_t n_iter = 0;
    bool have_summary = false;
    for (char *save = NULL, *line = strtok_r(s, "\n", &save); line != NULL && status == GV_OK;
         line = strtok_r(NULL, "\n", &save)) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *t = cJSON_GetObjectItem(o, "type");
        bool ok = o != NULL && cJSON_IsString(t);
        const char *type = ok ? t->valuestring : "";
        if (strcmp(type, "iter") == 0) {
            double it = data_num(o, "iter", &ok), up = data_num(o, "bytes_sent", &ok),
                   down = data_num(o, "bytes_recv", &ok);
            if (rank == 0) {
                double ts = data_num(o, "train_s", &ok), cf = data_num(o, "cf", &ok),
                       tc = data_num(o, "compute_s", &ok), tz = data_num(o, "compress_s", &ok),
                       tw = data_num(o, "comm_s", &ok);
                const cJSON *lv = cJSON_GetObjectItem(o, "level");
                ok = ok && cJSON_IsString(lv) && it == (double)r->n_it;
                if (ok && (status = data_grow((void **)&r->it, it_cap, r->n_it, sizeof(*r->it))) ==
                              GV_OK) {
                    const char *l = lv->valuestring;
                    r->it[r->n_it++] = (struct bt_iter){.train_s = ts,
                                                        .cf = cf,
                                                        .level = strcmp(l, "dense") == 0   ? 0
                                                                 : strcmp(l, "floor") == 0 ? 1
                                                                                           : 2,
                                                        .up = (uint64_t)up,
                                                        .down = (uint64_t)down,
                                                        .compute_s = (float)tc,
                                                        .compress_s = (float)tz,
                                                        .wait_s = (float)tw};
                }
            } else {
                ok = ok && it == (double)n_iter && n_iter < r->n_it;
                if (ok) {
                    r->it[n_iter].up += (uint64_t)up;
                    r->it[n_iter].down += (uint64_t)down;
                }
            }
            n_iter++;
        } else if (strcmp(type, "eval") == 0 && rank == 0) {
            struct bt_eval e = {.step = (uint64_t)data_num(o, "step", &ok),
                                .train_s = data_num(o, "train_s", &ok),
                                .time_s = data_num(o, "time_s", &ok),
                                .acc = data_num(o, "accuracy", &ok),
                                .loss = data_num(o, "loss", &ok)};
            if (ok &&
                (status = data_grow((void **)&r->ev, ev_cap, r->n_ev, sizeof(*r->ev))) == GV_OK)
                r->ev[r->n_ev++] = e;
        } else if (strcmp(type, "summary") == 0 && rank == 0) {
            r->samples_per_s = data_num(o, "samples_per_s", &ok);
            have_summary = ok;
        }
        if (!ok && status == GV_OK) {
            data_err(r, "%s: malformed record: %.120s", path, line);
            status = GV_ERR_PROTO;
        }
        cJSON_Delete(o);
    }
    gv_free(s);
    if (status == GV_OK && rank == 0 && !have_summary) {
        data_err(r, "%s: no summary record (the run did not finish)", path);
        status = GV_ERR_PROTO;
    }
    if (status == GV_OK && rank > 0 && n_iter != r->n_it) {
        data_err(r, "%s: %zu iterations, worker 0 has %zu", path, n_iter, r->n_it);
        status = GV_ERR_PROTO;
    }
    return status;
}

static void data_derive(struct bt_result *r, double target, const double *also, int n_also)
{
    for (int k = 0; k < n_also; k++) {
        r->also_iter[k] = -1;
        for (size_t i = 0; i < r->n_ev && r->also_iter[k] < 0; i++)
            if (r->ev[i].acc >= also[k]) {
                r->also_iter[k] = (int64_t)r->ev[i].step;
                r->also_train_s[k] = r->ev[i].train_s;
            }
    }
    r->iters = r->n_it;
    r->train_s = r->n_it ? r->it[r->n_it - 1].train_s : 0;
    r->target_iter = -1;
    r->final_acc = r->n_ev ? r->ev[r->n_ev - 1].acc : 0;
    r->best_acc = 0;
    for (size_t i = 0; i < r->n_ev; i++) {
        const struct bt_eval *e = &r->ev[i];
        r->best_acc = GV_MAX(r->best_acc, e->acc);
        if (r->target_iter < 0 && e->acc >= target) {
            r->target_iter = (int64_t)e->step;
            r->target_train_s = e->train_s;
            r->target_wall_s = e->time_s;
        }
    }
    double cf_sum = 0, prev = -1;
    for (size_t i = 0; i < r->n_it; i++) {
        const struct bt_iter *x = &r->it[i];
        r->up_bytes += x->up;
        r->down_bytes += x->down;
        if (r->target_iter >= 0 && (int64_t)i < r->target_iter) {
            r->up_target += x->up;
            r->down_target += x->down;
        }
        r->compute_s += x->compute_s;
        r->compress_s += x->compress_s;
        r->wait_s += x->wait_s;
        r->n_dense += x->level == 0;
        r->n_floor += x->level == 1;
        r->n_cand += x->level == 2;
        r->cf_changes += i > 0 && x->cf != prev;
        prev = x->cf;
        cf_sum += x->cf;
        data_hist_add(r, x->cf);
    }
    r->mean_cf = r->n_it ? cf_sum / (double)r->n_it : 0;
}

gv_status_t bt_result_load(struct bt_result *r, const char *dir, int workers, double target,
                           const double *also, int n_also)
{
    size_t it_cap = 0, ev_cap = 0;
    gv_status_t status = GV_OK;
    for (int w = 0; w < workers && status == GV_OK; w++) {
        char path[800];
        snprintf(path, sizeof(path), "%s/worker%d.jsonl", dir, w);
        status = data_worker(r, path, w, &it_cap, &ev_cap);
    }
    if (status == GV_OK && (r->n_it == 0 || r->n_ev == 0)) {
        data_err(r, "%s: no iterations or no evaluations recorded", dir);
        status = GV_ERR_PROTO;
    }
    if (status == GV_OK)
        data_derive(r, target, also, n_also);
    return status;
}

void bt_result_free(struct bt_result *r)
{
    gv_free(r->ev);
    gv_free(r->it);
    r->ev = NULL;
    r->it = NULL;
    r->n_ev = r->n_it = 0;
}

gv_status_t bt_result_series(const struct bt_result *r)
{
    char path[800];
    snprintf(path, sizeof(path), "%s/eval.dat", r->dir);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        gv_log(GV_LOG_ERROR, "bench: cannot write %s: %s", path, strerror(errno));
        return GV_ERR_IO;
    }
    fprintf(f, "# step train_s wall_s accuracy_pct loss\n");
    for (size_t i = 0; i < r->n_ev; i++)
        fprintf(f, "%llu %.4f %.4f %.3f %.5f\n", (unsigned long long)r->ev[i].step,
                r->ev[i].train_s, r->ev[i].time_s, 100.0 * r->ev[i].acc, r->ev[i].loss);
    bool bad = fclose(f) != 0;
    snprintf(path, sizeof(path), "%s/iter.dat", r->dir);
    f = fopen(path, "w");
    if (f == NULL || bad) {
        gv_log(GV_LOG_ERROR, "bench: cannot write %s: %s", path, strerror(errno));
        if (f != NULL)
            fclose(f);
        return GV_ERR_IO;
    }
    fprintf(f, "# iter train_s cf level up_cum_MiB down_cum_MiB (all workers)\n");
    double up = 0, down = 0;
    for (size_t i = 0; i < r->n_it; i++) {
        up += (double)r->it[i].up;
        down += (double)r->it[i].down;
        fprintf(f, "%zu %.4f %g %u %.4f %.4f\n", i + 1, r->it[i].train_s, r->it[i].cf,
                r->it[i].level, up / 1048576.0, down / 1048576.0);
    }
    if (fclose(f) != 0) {
        gv_log(GV_LOG_ERROR, "bench: cannot write %s: %s", path, strerror(errno));
        return GV_ERR_IO;
    }
    return GV_OK;
}
