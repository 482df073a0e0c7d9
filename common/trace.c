/* trace.c: a thread's timeline in the Chrome trace event format (gv_common.h describes the
 * file). Events are kept in an array allocated at open and written out when it is full and at
 * close; the stdio buffer is allocated at open too, so a span never allocates. Deliberately no
 * reading of trace files (ops/gravac_trace.c merges and draws them). */
#include "gv_common.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TRACE_DEFAULT_CAP 16384u
#define TRACE_STDIO_BUF (256u << 10)

struct trace_ev {
    uint64_t t0, t1, iter, bytes;
    double cf;
    int32_t peer;
    uint32_t kind;
};

struct gv_trace {
    struct gv_trace_config cfg;
    char process[96];
    char path[256]; /* for the logs */
    FILE *f;
    char *iobuf;
    struct trace_ev *ev; /* [cap] */
    uint32_t cap, n;
    uint64_t mono0;        /* the anchor: gv_now_ns() at open ... */
    struct timespec real0; /* ... and CLOCK_REALTIME then */
    long pid, tid;         /* tid: of the first span's thread */
    bool thread_named;     /* its thread_name event is written */
    bool failed;           /* a write failed: the file is abandoned */
    uint64_t *count, *ns;  /* [n_kinds + 1] totals */
};

static void trace_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void trace_fail(struct gv_trace *tr, const char *what)
{
    if (!tr->failed)
        gv_log(GV_LOG_ERROR, "trace %s: cannot %s: %s; no more spans are written", tr->path, what,
               strerror(errno));
    tr->failed = true;
}

/* The lane's metadata: its name and order, and the clock anchor. */
static void trace_write_head(struct gv_trace *tr)
{
    FILE *f = tr->f;
    fprintf(f,
            "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%ld,\"tid\":0,\"args\":{\"name\":",
            tr->pid);
    trace_json_str(f, tr->process);
    fprintf(f,
            "}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%ld,\"tid\":0,"
            "\"args\":{\"sort_index\":%d}},\n"
            "{\"name\":\"gravac_clock\",\"ph\":\"M\",\"pid\":%ld,\"tid\":0,\"args\":{\"clock\":"
            "\"CLOCK_REALTIME\",\"t0_s\":%lld,\"t0_ns\":%ld,\"ts_unit\":\"us since t0\"}}",
            tr->pid, tr->cfg.sort_index, tr->pid, (long long)tr->real0.tv_sec, tr->real0.tv_nsec);
}

/* An event's line is formatted by hand into a stack buffer (printf's general number formatting
 * cost about 2 us per event, which a full buffer pays 16384 times at once). */
struct trace_line {
    char b[512];
    size_t n;
};

static void tl_str(struct trace_line *l, const char *s)
{
    size_t k = strlen(s);
    if (k > sizeof(l->b) - l->n - 1)
        k = sizeof(l->b) - l->n - 1;
    memcpy(l->b + l->n, s, k);
    l->n += k;
}

static void tl_u64(struct trace_line *l, uint64_t v)
{
    char d[24];
    int k = 0;
    do {
        d[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (k > 0 && l->n < sizeof(l->b) - 1)
        l->b[l->n++] = d[--k];
}

/* ns as microseconds with three decimals ("12.345"), signed */
static void tl_us(struct trace_line *l, uint64_t ns, bool neg)
{
    if (neg)
        tl_str(l, "-");
    tl_u64(l, ns / 1000);
    char frac[5] = {'.', (char)('0' + ns / 100 % 10), (char)('0' + ns / 10 % 10),
                    (char)('0' + ns % 10), '\0'};
    tl_str(l, frac);
}

static void tl_double(struct trace_line *l, double v)
{
    if (v >= 0 && v < 1e15 && v == (double)(uint64_t)v) { /* CFs are mostly whole numbers */
        tl_u64(l, (uint64_t)v);
        return;
    }
    char d[32];
    snprintf(d, sizeof(d), "%.6g", isfinite(v) ? v : 0.0);
    tl_str(l, d);
}

static const char *trace_kind_name(const struct gv_trace *tr, uint32_t kind)
{
    return kind < tr->cfg.n_kinds ? tr->cfg.kinds[kind] : "trace-flush";
}

/* Writes the events kept, then empties the array. */
static void trace_write(struct gv_trace *tr)
{
    FILE *f = tr->f;
    if (f == NULL || tr->failed) {
        tr->n = 0;
        return;
    }
    if (!tr->thread_named && tr->n > 0) {
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%ld,\"tid\":%ld,\"args\":{",
                tr->pid, tr->tid);
        fputs("\"name\":", f);
        trace_json_str(f, tr->process);
        fputs("}}", f);
        tr->thread_named = true;
    }
    for (uint32_t i = 0; i < tr->n; i++) {
        const struct trace_ev *e = &tr->ev[i];
        struct trace_line l = {.n = 0};
        tl_str(&l, ",\n{\"name\":\"");
        tl_str(&l, trace_kind_name(tr, e->kind));
        tl_str(&l, "\",\"cat\":\"");
        tl_str(&l, tr->cfg.category);
        tl_str(&l, "\",\"ph\":\"X\",\"ts\":");
        bool before = e->t0 < tr->mono0; /* a span that began before the tracer opened */
        tl_us(&l, before ? tr->mono0 - e->t0 : e->t0 - tr->mono0, before);
        tl_str(&l, ",\"dur\":");
        tl_us(&l, e->t1 >= e->t0 ? e->t1 - e->t0 : 0, false);
        tl_str(&l, ",\"pid\":");
        tl_u64(&l, (uint64_t)tr->pid);
        tl_str(&l, ",\"tid\":");
        tl_u64(&l, (uint64_t)tr->tid);
        tl_str(&l, ",\"args\":{\"iter\":");
        tl_u64(&l, e->iter);
        tl_str(&l, ",\"cf\":");
        tl_double(&l, e->cf);
        tl_str(&l, ",\"bytes\":");
        tl_u64(&l, e->bytes);
        if (e->peer >= 0) {
            tl_str(&l, ",\"");
            tl_str(&l, tr->cfg.peer_arg);
            tl_str(&l, "\":");
            tl_u64(&l, (uint64_t)e->peer);
        }
        tl_str(&l, "}}");
        fwrite(l.b, 1, l.n, f);
    }
    tr->n = 0;
    if (fflush(f) != 0 || ferror(f))
        trace_fail(tr, "write");
}

gv_status_t gv_trace_open(const struct gv_trace_config *cfg, struct gv_trace **tr_p)
{
    if (cfg == NULL || cfg->kinds == NULL || cfg->n_kinds == 0 || cfg->category == NULL) {
        gv_log(GV_LOG_ERROR, "trace: a tracer needs span kinds and a category");
        return GV_ERR_INVAL;
    }
    gv_status_t status = GV_ERR_NOMEM;
    struct gv_trace *tr = gv_calloc(1, sizeof(*tr));
    if (tr == NULL)
        return GV_ERR_NOMEM;
    tr->cfg = *cfg;
    if (tr->cfg.peer_arg == NULL)
        tr->cfg.peer_arg = "peer";
    snprintf(tr->process, sizeof(tr->process), "%s", cfg->process ? cfg->process : "gravac");
    tr->cfg.process = tr->process;
    tr->cap = cfg->capacity > 0 ? cfg->capacity : TRACE_DEFAULT_CAP;
    tr->ev = gv_calloc(tr->cap, sizeof(*tr->ev));
    tr->count = gv_calloc(cfg->n_kinds + 1u, sizeof(uint64_t));
    tr->ns = gv_calloc(cfg->n_kinds + 1u, sizeof(uint64_t));
    if (tr->ev == NULL || tr->count == NULL || tr->ns == NULL)
        goto err_free;
    tr->pid = (long)getpid();
    tr->tid = tr->pid;
    clock_gettime(CLOCK_REALTIME, &tr->real0);
    tr->mono0 = gv_now_ns();
    if (cfg->path != NULL) {
        tr->iobuf = gv_malloc(TRACE_STDIO_BUF);
        if (tr->iobuf == NULL)
            goto err_free;
        tr->f = fopen(cfg->path, "w");
        if (tr->f == NULL) {
            gv_log(GV_LOG_ERROR, "trace: cannot create %s: %s", cfg->path, strerror(errno));
            status = GV_ERR_IO;
            goto err_free;
        }
        setvbuf(tr->f, tr->iobuf, _IOFBF, TRACE_STDIO_BUF);
        snprintf(tr->path, sizeof(tr->path), "%s", cfg->path);
        tr->cfg.path = tr->path; /* the caller's string is not kept */
        trace_write_head(tr);
        if (fflush(tr->f) != 0) {
            gv_log(GV_LOG_ERROR, "trace: cannot write %s: %s", cfg->path, strerror(errno));
            status = GV_ERR_IO;
            goto err_close;
        }
    }
    *tr_p = tr;
    return GV_OK;
err_close:
    fclose(tr->f);
err_free:
    gv_free(tr->iobuf);
    gv_free(tr->ev);
    gv_free(tr->count);
    gv_free(tr->ns);
    gv_free(tr);
    return status;
}

void gv_trace_record(struct gv_trace *tr, uint32_t kind, uint64_t t0, uint64_t t1, uint64_t iter,
                     double cf, uint64_t bytes, int32_t peer)
{
    if (kind >= tr->cfg.n_kinds)
        return;
    if (tr->n == 0 && !tr->thread_named)
        tr->tid = (long)gettid();
    if (iter >= tr->cfg.totals_from) {
        tr->count[kind]++;
        tr->ns[kind] += t1 >= t0 ? t1 - t0 : 0;
    }
    if (tr->f == NULL)
        return;
    if (tr->n == tr->cap) {
        uint64_t w0 = gv_now_ns();
        trace_write(tr);
        uint64_t w1 = gv_now_ns();
        tr->count[tr->cfg.n_kinds]++;
        tr->ns[tr->cfg.n_kinds] += w1 - w0;
        tr->ev[tr->n++] = (struct trace_ev){w0, w1, iter, 0, 0, -1, tr->cfg.n_kinds};
    }
    tr->ev[tr->n++] = (struct trace_ev){t0, t1, iter, bytes, cf, peer, kind};
}

void gv_trace_totals(const struct gv_trace *tr, uint64_t *count, uint64_t *ns, uint32_t n)
{
    for (uint32_t k = 0; k < n; k++) {
        bool in = tr != NULL && k <= tr->cfg.n_kinds;
        if (count != NULL)
            count[k] = in ? tr->count[k] : 0;
        if (ns != NULL)
            ns[k] = in ? tr->ns[k] : 0;
    }
}

void gv_trace_close(struct gv_trace *tr)
{
    if (tr == NULL)
        return;
    if (tr->f != NULL) {
        trace_write(tr);
        if (!tr->failed)
            fputs("\n]\n", tr->f);
        if (fclose(tr->f) != 0)
            trace_fail(tr, "close");
    }
    gv_free(tr->iobuf);
    gv_free(tr->ev);
    gv_free(tr->count);
    gv_free(tr->ns);
    gv_free(tr);
}
