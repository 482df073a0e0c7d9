/* metrics.c: a registry of counters, gauges and summaries (with label values), rendered in the
 * Prometheus text exposition format 0.0.4. One mutex guards everything; updates hold it for a
 * few instructions and rendering for the time it takes to format. The HTTP endpoint is in
 * metrics_http.c. */
#include "gv_ops.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MT_WINDOW_DEFAULT 1024u
#define MT_WINDOW_MAX 65536u

static const double mt_quantiles[] = {0.5, 0.9, 0.99};

struct mt_family;

struct gv_metric {
    struct mt_family *fam;
    char *values[GV_METRIC_MAX_LABELS];
    double value; /* counter, gauge */
    double sum;   /* summary: over all observations */
    uint64_t count;
    double *window; /* summary: the last `fam->window` observations, a ring */
    uint32_t w_next, w_fill;
    struct gv_metric *next;
};

struct mt_family {
    struct gv_metrics *reg;
    enum gv_metric_type type;
    char *name, *help;
    uint32_t n_labels;
    char *labels[GV_METRIC_MAX_LABELS];
    uint32_t window;
    struct gv_metric *first, *last;
    struct mt_family *next;
};

struct gv_metrics {
    pthread_mutex_t mu;
    struct mt_family *first, *last;
};

gv_status_t gv_metrics_create(struct gv_metrics **reg_p)
{
    struct gv_metrics *reg = gv_calloc(1, sizeof(*reg));
    if (reg == NULL)
        return GV_ERR_NOMEM;
    pthread_mutex_init(&reg->mu, NULL);
    *reg_p = reg;
    return GV_OK;
}

static void mt_metric_free(struct gv_metric *m)
{
    for (int i = 0; i < GV_METRIC_MAX_LABELS; i++)
        gv_free(m->values[i]);
    gv_free(m->window);
    gv_free(m);
}

static void mt_family_free(struct mt_family *f)
{
    for (struct gv_metric *m = f->first, *next; m != NULL; m = next) {
        next = m->next;
        mt_metric_free(m);
    }
    for (int i = 0; i < GV_METRIC_MAX_LABELS; i++)
        gv_free(f->labels[i]);
    gv_free(f->name);
    gv_free(f->help);
    gv_free(f);
}

void gv_metrics_destroy(struct gv_metrics *reg)
{
    if (reg == NULL)
        return;
    for (struct mt_family *f = reg->first, *next; f != NULL; f = next) {
        next = f->next;
        mt_family_free(f);
    }
    pthread_mutex_destroy(&reg->mu);
    gv_free(reg);
}

/* ---------------------------------------------------------------- registration */

static bool mt_name_ok(const char *s, bool colon)
{
    if (s == NULL || s[0] == '\0' || isdigit((unsigned char)s[0]))
        return false;
    for (size_t i = 0; s[i] != '\0'; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(isalnum(c) && c < 0x80) && c != '_' && !(colon && c == ':'))
            return false;
    }
    return true;
}

static gv_status_t mt_check(enum gv_metric_type type, const char *name, const char *const *labels,
                            uint32_t *n_labels_p)
{
    uint32_t n = 0;
    if ((unsigned)type > GV_METRIC_SUMMARY || !mt_name_ok(name, true)) {
        gv_log(GV_LOG_ERROR, "metrics: invalid metric name '%s'", name ? name : "(null)");
        return GV_ERR_INVAL;
    }
    for (; labels != NULL && labels[2 * n] != NULL; n++) {
        const char *ln = labels[2 * n];
        if (n == GV_METRIC_MAX_LABELS || labels[2 * n + 1] == NULL || !mt_name_ok(ln, false) ||
            strncmp(ln, "__", 2) == 0 || strcmp(ln, "quantile") == 0) {
            gv_log(GV_LOG_ERROR, "metrics %s: invalid label '%s' (or too many, or no value)", name,
                   ln);
            return GV_ERR_INVAL;
        }
        for (uint32_t j = 0; j < n; j++) {
            if (strcmp(labels[2 * j], ln) == 0) {
                gv_log(GV_LOG_ERROR, "metrics %s: label '%s' given twice", name, ln);
                return GV_ERR_INVAL;
            }
        }
    }
    *n_labels_p = n;
    return GV_OK;
}

static struct mt_family *mt_family_new(struct gv_metrics *reg, enum gv_metric_type type,
                                       const char *name, const char *help,
                                       const char *const *labels, uint32_t n, uint32_t window)
{
    struct mt_family *f = gv_calloc(1, sizeof(*f));
    if (f == NULL)
        return NULL;
    f->reg = reg;
    f->type = type;
    f->n_labels = n;
    f->window = window;
    f->name = gv_strdup(name);
    f->help = gv_strdup(help);
    bool ok = f->name != NULL && f->help != NULL;
    for (uint32_t i = 0; i < n && ok; i++)
        ok = (f->labels[i] = gv_strdup(labels[2 * i])) != NULL;
    if (!ok) {
        mt_family_free(f);
        return NULL;
    }
    return f;
}

static bool mt_family_matches(const struct mt_family *f, enum gv_metric_type type, const char *help,
                              const char *const *labels, uint32_t n, uint32_t window)
{
    if (f->type != type || strcmp(f->help, help) != 0 || f->n_labels != n ||
        (type == GV_METRIC_SUMMARY && f->window != window))
        return false;
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(f->labels[i], labels[2 * i]) != 0)
            return false;
    return true;
}

static struct gv_metric *mt_series_new(struct mt_family *f, const char *const *labels)
{
    struct gv_metric *m = gv_calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    m->fam = f;
    bool ok = true;
    for (uint32_t i = 0; i < f->n_labels && ok; i++)
        ok = (m->values[i] = gv_strdup(labels[2 * i + 1])) != NULL;
    if (ok && f->type == GV_METRIC_SUMMARY)
        ok = (m->window = gv_calloc(f->window, sizeof(double))) != NULL;
    if (!ok) {
        mt_metric_free(m);
        return NULL;
    }
    return m;
}

gv_status_t gv_metrics_get(struct gv_metrics *reg, enum gv_metric_type type, const char *name,
                           const char *help, const char *const *labels, uint32_t window,
                           struct gv_metric **m_p)
{
    uint32_t n;
    gv_status_t status = mt_check(type, name, labels, &n);
    if (status != GV_OK)
        return status;
    help = help ? help : "";
    window = type != GV_METRIC_SUMMARY ? 0 : (window ? window : MT_WINDOW_DEFAULT);
    if (window > MT_WINDOW_MAX) {
        gv_log(GV_LOG_ERROR, "metrics %s: window %u exceeds %u", name, window, MT_WINDOW_MAX);
        return GV_ERR_INVAL;
    }
    pthread_mutex_lock(&reg->mu);
    struct mt_family *f = reg->first;
    while (f != NULL && strcmp(f->name, name) != 0)
        f = f->next;
    if (f != NULL && !mt_family_matches(f, type, help, labels, n, window)) {
        gv_log(GV_LOG_ERROR,
               "metrics %s: registered again with another type, help, labels or "
               "window",
               name);
        status = GV_ERR_INVAL;
        goto out;
    }
    if (f == NULL) {
        f = mt_family_new(reg, type, name, help, labels, n, window);
        if (f == NULL) {
            status = GV_ERR_NOMEM;
            goto out;
        }
        if (reg->last != NULL)
            reg->last->next = f;
        else
            reg->first = f;
        reg->last = f;
    }
    struct gv_metric *m = f->first;
    for (; m != NULL; m = m->next) {
        uint32_t i = 0;
        while (i < n && strcmp(m->values[i], labels[2 * i + 1]) == 0)
            i++;
        if (i == n)
            break;
    }
    if (m == NULL) {
        m = mt_series_new(f, labels);
        if (m == NULL) {
            status = GV_ERR_NOMEM;
            goto out;
        }
        if (f->last != NULL)
            f->last->next = m;
        else
            f->first = m;
        f->last = m;
    }
    *m_p = m;
out:
    pthread_mutex_unlock(&reg->mu);
    if (status == GV_ERR_NOMEM)
        gv_log(GV_LOG_ERROR, "metrics %s: out of memory", name);
    return status;
}

/* ---------------------------------------------------------------- updates */

void gv_metric_inc(struct gv_metric *m, double v)
{
    if (m->fam->type == GV_METRIC_COUNTER && !(v >= 0))
        return;
    if (m->fam->type == GV_METRIC_SUMMARY)
        return;
    pthread_mutex_lock(&m->fam->reg->mu);
    m->value += v;
    pthread_mutex_unlock(&m->fam->reg->mu);
}

void gv_metric_set(struct gv_metric *m, double v)
{
    if (m->fam->type != GV_METRIC_GAUGE)
        return;
    pthread_mutex_lock(&m->fam->reg->mu);
    m->value = v;
    pthread_mutex_unlock(&m->fam->reg->mu);
}

void gv_metric_observe(struct gv_metric *m, double v)
{
    if (m->fam->type != GV_METRIC_SUMMARY || isnan(v))
        return;
    pthread_mutex_lock(&m->fam->reg->mu);
    m->sum += v;
    m->count++;
    m->window[m->w_next] = v;
    m->w_next = (m->w_next + 1) % m->fam->window;
    if (m->w_fill < m->fam->window)
        m->w_fill++;
    pthread_mutex_unlock(&m->fam->reg->mu);
}

double gv_metric_value(struct gv_metric *m)
{
    pthread_mutex_lock(&m->fam->reg->mu);
    double v = m->fam->type == GV_METRIC_SUMMARY ? m->sum : m->value;
    pthread_mutex_unlock(&m->fam->reg->mu);
    return v;
}

static int mt_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : (x > y ? 1 : 0);
}

/* Nearest rank over sorted[0..n), n >= 1. */
static double mt_rank(const double *sorted, uint32_t n, double q)
{
    double r = ceil(q * (double)n);
    uint32_t rank = r < 1 ? 1 : (r > n ? n : (uint32_t)r);
    return sorted[rank - 1];
}

gv_status_t gv_metric_quantile(struct gv_metric *m, double q, double *v_p)
{
    if (m->fam->type != GV_METRIC_SUMMARY || !(q >= 0 && q <= 1))
        return GV_ERR_INVAL;
    double *copy = gv_malloc(m->fam->window * sizeof(double));
    if (copy == NULL)
        return GV_ERR_NOMEM;
    pthread_mutex_lock(&m->fam->reg->mu);
    uint32_t n = m->w_fill;
    memcpy(copy, m->window, n * sizeof(double));
    pthread_mutex_unlock(&m->fam->reg->mu);
    gv_status_t status = GV_ERR_AGAIN;
    if (n > 0) {
        qsort(copy, n, sizeof(double), mt_cmp_double);
        *v_p = mt_rank(copy, n, q);
        status = GV_OK;
    }
    gv_free(copy);
    return status;
}

/* ---------------------------------------------------------------- rendering */

struct mt_buf {
    char *p;
    size_t len, cap;
    bool nomem;
};

static void mt_put(struct mt_buf *b, const char *s, size_t n)
{
    if (b->nomem)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = gv_realloc(b->p, cap);
        if (p == NULL) {
            b->nomem = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void mt_puts(struct mt_buf *b, const char *s)
{
    mt_put(b, s, strlen(s));
}

/* Escapes \ and newline (and " inside label values). */
static void mt_put_escaped(struct mt_buf *b, const char *s, bool quote)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\')
            mt_puts(b, "\\\\");
        else if (*s == '\n')
            mt_puts(b, "\\n");
        else if (*s == '"' && quote)
            mt_puts(b, "\\\"");
        else
            mt_put(b, s, 1);
    }
}

static void mt_put_double(struct mt_buf *b, double v)
{
    char s[40];
    if (isnan(v))
        snprintf(s, sizeof(s), "NaN");
    else if (isinf(v))
        snprintf(s, sizeof(s), v > 0 ? "+Inf" : "-Inf");
    else {
        snprintf(s, sizeof(s), "%.15g", v);
        if (strtod(s, NULL) != v)
            snprintf(s, sizeof(s), "%.17g", v);
    }
    mt_puts(b, s);
}

/* name{labels[,quantile="q"]} */
static void mt_put_series(struct mt_buf *b, const struct gv_metric *m, const char *suffix,
                          const char *quantile)
{
    const struct mt_family *f = m->fam;
    mt_puts(b, f->name);
    mt_puts(b, suffix);
    if (f->n_labels == 0 && quantile == NULL) {
        mt_puts(b, " ");
        return;
    }
    mt_puts(b, "{");
    for (uint32_t i = 0; i < f->n_labels; i++) {
        mt_puts(b, i ? "," : "");
        mt_puts(b, f->labels[i]);
        mt_puts(b, "=\"");
        mt_put_escaped(b, m->values[i], true);
        mt_puts(b, "\"");
    }
    if (quantile != NULL) {
        mt_puts(b, f->n_labels ? ",quantile=\"" : "quantile=\"");
        mt_puts(b, quantile);
        mt_puts(b, "\"");
    }
    mt_puts(b, "} ");
}

static void mt_render_family(struct mt_buf *b, const struct mt_family *f, double *scratch)
{
    static const char *const type_names[] = {"counter", "gauge", "summary"};
    static const char *const q_text[] = {"0.5", "0.9", "0.99"};
    mt_puts(b, "# HELP ");
    mt_puts(b, f->name);
    mt_puts(b, " ");
    mt_put_escaped(b, f->help, false);
    mt_puts(b, "\n# TYPE ");
    mt_puts(b, f->name);
    mt_puts(b, " ");
    mt_puts(b, type_names[f->type]);
    mt_puts(b, "\n");
    for (const struct gv_metric *m = f->first; m != NULL; m = m->next) {
        if (f->type != GV_METRIC_SUMMARY) {
            mt_put_series(b, m, "", NULL);
            mt_put_double(b, m->value);
            mt_puts(b, "\n");
            continue;
        }
        memcpy(scratch, m->window, m->w_fill * sizeof(double));
        qsort(scratch, m->w_fill, sizeof(double), mt_cmp_double);
        for (size_t i = 0; i < GV_ARRAY_LEN(mt_quantiles); i++) {
            mt_put_series(b, m, "", q_text[i]);
            mt_put_double(b, m->w_fill ? mt_rank(scratch, m->w_fill, mt_quantiles[i]) : NAN);
            mt_puts(b, "\n");
        }
        mt_put_series(b, m, "_sum", NULL);
        mt_put_double(b, m->sum);
        mt_puts(b, "\n");
        mt_put_series(b, m, "_count", NULL);
        mt_put_double(b, (double)m->count);
        mt_puts(b, "\n");
    }
}

gv_status_t gv_metrics_render(struct gv_metrics *reg, char **text_p, size_t *len_p)
{
    struct mt_buf b = {0};
    double *scratch = NULL;
    uint32_t max_window = 0;
    pthread_mutex_lock(&reg->mu);
    for (const struct mt_family *f = reg->first; f != NULL; f = f->next)
        max_window = GV_MAX(max_window, f->window);
    if (max_window > 0 && (scratch = gv_malloc(max_window * sizeof(double))) == NULL)
        b.nomem = true;
    for (const struct mt_family *f = reg->first; f != NULL && !b.nomem; f = f->next)
        if (f->first != NULL)
            mt_render_family(&b, f, scratch);
    pthread_mutex_unlock(&reg->mu);
    gv_free(scratch);
    mt_put(&b, "", 0); /* an empty registry still yields "" */
    if (b.nomem) {
        gv_free(b.p);
        gv_log(GV_LOG_ERROR, "metrics: out of memory while rendering");
        return GV_ERR_NOMEM;
    }
    *text_p = b.p;
    *len_p = b.len;
    return GV_OK;
}
