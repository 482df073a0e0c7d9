/* train.c: the pieces of a training loop that every worker main reuses: evaluation over a
 * dataset, the JSON-lines metrics file (written with cJSON) and the progress line. */
#include "nn_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <string.h>

gv_status_t gv_nn_evaluate(struct gv_nn_model *m, const struct gv_nn_dataset *ds, int batch,
                           size_t limit, struct gv_nn_batch_buf *buf, struct gv_nn_eval *ev)
{
    size_t n = limit > 0 && limit < ds->n ? limit : ds->n;
    int bs = GV_MIN(GV_MIN(batch, gv_nn_model_cfg(m)->max_batch), buf->cap);
    if (bs < 1 || n < 1)
        return GV_ERR_INVAL;
    size_t *idx = gv_malloc((size_t)bs * sizeof(size_t));
    if (idx == NULL)
        return GV_ERR_NOMEM;
    struct gv_nn_stats sum = {0.0, 0, 0};
    gv_status_t status = GV_OK;
    for (size_t at = 0; at < n && status == GV_OK; at += (size_t)bs) {
        int k = (int)GV_MIN((size_t)bs, n - at);
        struct gv_nn_batch b;
        struct gv_nn_stats st;
        for (int i = 0; i < k; i++) /* item numbers of the samples held */
            idx[i] = ds->index != NULL ? ds->index[at + (size_t)i] : at + (size_t)i;
        status = gv_nn_batch_gather(ds, idx, k, buf, &b);
        if (status == GV_OK)
            status = gv_nn_model_eval_batch(m, &b, &st);
        if (status == GV_OK) {
            sum.loss_sum += st.loss_sum;
            sum.correct += st.correct;
            sum.count += st.count;
        }
    }
    gv_free(idx);
    if (status != GV_OK)
        return status;
    ev->count = sum.count;
    ev->loss = sum.loss_sum / (double)sum.count;
    ev->accuracy = (double)sum.correct / (double)sum.count;
    ev->perplexity = exp(ev->loss);
    return GV_OK;
}

struct gv_nn_metrics {
    FILE *f;
    char *path;
};

gv_status_t gv_nn_metrics_open(const char *path, struct gv_nn_metrics **mf_p)
{
    struct gv_nn_metrics *mf = gv_calloc(1, sizeof(*mf));
    if (mf == NULL)
        return GV_ERR_NOMEM;
    mf->path = gv_strdup(path);
    mf->f = fopen(path, "w");
    if (mf->path == NULL || mf->f == NULL) {
        gv_log(GV_LOG_ERROR, "%s: cannot open metrics file: %s", path, strerror(errno));
        gv_nn_metrics_close(mf);
        return GV_ERR_IO;
    }
    *mf_p = mf;
    return GV_OK;
}

static cJSON *metrics_object(const struct gv_nn_record *r)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL)
        return NULL;
    cJSON_AddStringToObject(o, "type", r->type);
    cJSON_AddNumberToObject(o, "step", (double)r->step);
    cJSON_AddNumberToObject(o, "epoch", (double)r->epoch);
    cJSON_AddNumberToObject(o, "time_s", r->time_s);
    cJSON_AddNumberToObject(o, "loss", isfinite(r->loss) ? r->loss : -1.0);
    cJSON_AddNumberToObject(o, "accuracy", r->accuracy);
    if (r->perplexity >= 0.0)
        cJSON_AddNumberToObject(o, "perplexity", isfinite(r->perplexity) ? r->perplexity : -1.0);
    if (strcmp(r->type, "step") == 0) {
        cJSON_AddNumberToObject(o, "samples_per_s", r->samples_per_s);
        cJSON_AddNumberToObject(o, "lr", (double)r->lr);
    }
    cJSON_AddNumberToObject(o, "cf", r->cf);
    cJSON_AddNumberToObject(o, "bytes_sent", (double)r->bytes_sent);
    cJSON_AddBoolToObject(o, "standalone", r->standalone != 0);
    return o;
}

gv_status_t gv_nn_metrics_write(struct gv_nn_metrics *mf, const struct gv_nn_record *r)
{
    cJSON *o = metrics_object(r);
    char *s = o != NULL ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (s == NULL) {
        gv_log(GV_LOG_ERROR, "%s: cannot format a metrics record", mf->path);
        return GV_ERR_NOMEM;
    }
    int ok = fputs(s, mf->f) >= 0 && fputc('\n', mf->f) != EOF && fflush(mf->f) == 0;
    cJSON_free(s);
    if (!ok) {
        gv_log(GV_LOG_ERROR, "%s: cannot write metrics: %s", mf->path, strerror(errno));
        return GV_ERR_IO;
    }
    return GV_OK;
}

void gv_nn_metrics_close(struct gv_nn_metrics *mf)
{
    if (mf == NULL)
        return;
    if (mf->f != NULL)
        fclose(mf->f);
    gv_free(mf->path);
    gv_free(mf);
}

static void progress_bytes(uint64_t b, char *out, size_t len)
{
    if (b >= (1ULL << 30))
        snprintf(out, len, "%.2f GiB", (double)b / (double)(1ULL << 30));
    else if (b >= (1ULL << 20))
        snprintf(out, len, "%.2f MiB", (double)b / (double)(1ULL << 20));
    else if (b >= 1024)
        snprintf(out, len, "%.1f KiB", (double)b / 1024.0);
    else
        snprintf(out, len, "%llu B", (unsigned long long)b);
}

void gv_nn_progress_format(const struct gv_nn_record *r, char *out, size_t len)
{
    char bytes[32], ppl[32] = "";
    progress_bytes(r->bytes_sent, bytes, sizeof(bytes));
    if (r->perplexity >= 0.0)
        snprintf(ppl, sizeof(ppl), " ppl %.2f", r->perplexity);
    if (strcmp(r->type, "eval") == 0) {
        snprintf(out, len, "eval step %6lld epoch %3lld  test loss %.4f acc %6.2f%%%s  %.1fs",
                 (long long)r->step, (long long)r->epoch, r->loss, 100.0 * r->accuracy, ppl,
                 r->time_s);
        return;
    }
    snprintf(out, len,
             "step %6lld epoch %3lld  loss %.4f acc %6.2f%%%s  %8.0f samples/s  lr %.4g  CF %.1f%s"
             "  sent %s",
             (long long)r->step, (long long)r->epoch, r->loss, 100.0 * r->accuracy, ppl,
             r->samples_per_s, (double)r->lr, r->cf, r->standalone ? " (standalone)" : "", bytes);
}
