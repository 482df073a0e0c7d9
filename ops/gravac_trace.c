/* gravac_trace.c: gravac-trace, the timeline's tool. `merge` joins the per-process trace files
 * of a job (--trace, common/trace.c) into one Chrome trace: one process lane per input file,
 * every timestamp moved onto the earliest file's clock anchor (CLOCK_REALTIME). `svg` draws a
 * trace as a Gantt chart (one lane per process, nested spans on rows below their parent), for
 * places where Perfetto cannot be opened. `stats` prints each lane's time per span kind.
 * Reads JSON with cJSON; a file whose process died (the array left open) is read too. */
#include "gv_common.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TR_MAX_FILES 4096
#define TR_MAX_LANES 256
#define TR_MAX_DEPTH 8

static void tr_usage(FILE *f)
{
    fprintf(f,
            "usage: gravac-trace merge [-o OUT] FILE...\n"
            "       gravac-trace svg [-o OUT] [--iters A:B] [--width PX] [--title TEXT] FILE\n"
            "       gravac-trace stats [--iters A:B] FILE\n"
            "\n"
            "merge: joins the timelines of a job's processes (gravac-server and gravac-worker\n"
            "       --trace FILE) into one Chrome trace (Perfetto, chrome://tracing): one lane\n"
            "       per file, clocks aligned on the files' CLOCK_REALTIME anchors\n"
            "svg:   draws a (merged) trace as a Gantt chart: one lane per process, nested spans\n"
            "       below their parent; --iters keeps the spans of iterations A..B\n"
            "stats: each lane's spans per kind: count, total and mean time\n"
            "OUT defaults to standard output. Exit status: 0 ok, 1 unreadable input, 2 usage.\n");
}

/* ---------------------------------------------------------------- reading */

static char *tr_slurp(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "gravac-trace: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 4);
    size_t n;
    while (buf != NULL && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            char *nb = realloc(buf, 2 * cap + 4);
            if (nb == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    bool err = ferror(f) != 0;
    fclose(f);
    if (buf == NULL || err) {
        fprintf(stderr, "gravac-trace: cannot read %s\n", path);
        free(buf);
        return NULL;
    }
    buf[len] = '\0';
    *len_p = len;
    return buf;
}

/* Parses a trace file: the JSON array format, closed or not (a process that died leaves it
 * open), or the object format with "traceEvents". Returns the array (owned by *root_p). */
static cJSON *tr_load(const char *path, cJSON **root_p)
{
    size_t len;
    char *buf = tr_slurp(path, &len);
    if (buf == NULL)
        return NULL;
    cJSON *root = cJSON_Parse(buf);
    /* an unclosed array (its process died): close it after the last whole event, which is
     * the end of the file, or (killed while writing) the end of the line before the last */
    for (int attempt = 0; root == NULL && attempt < 2 && len > 0; attempt++) {
        if (attempt == 1) {
            char *last = NULL;
            for (char *p = strstr(buf, "\n{"); p != NULL; p = strstr(p + 1, "\n{"))
                last = p;
            if (last == NULL)
                break;
            len = (size_t)(last - buf);
        }
        while (len > 0 && strchr(" \t\r\n,", buf[len - 1]) != NULL)
            len--;
        memcpy(buf + len, "\n]", 3);
        root = cJSON_Parse(buf);
    }
    free(buf);
    cJSON *arr = root;
    if (root != NULL && cJSON_IsObject(root))
        arr = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    if (root == NULL || !cJSON_IsArray(arr)) {
        fprintf(stderr, "gravac-trace: %s is not a Chrome trace (a JSON array of events)\n", path);
        cJSON_Delete(root);
        return NULL;
    }
    *root_p = root;
    return arr;
}

static double tr_num(const cJSON *o, const char *key, double def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static const char *tr_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const cJSON *tr_meta(const cJSON *arr, const char *name)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        const char *ph = tr_str(e, "ph"), *n = tr_str(e, "name");
        if (ph != NULL && n != NULL && strcmp(ph, "M") == 0 && strcmp(n, name) == 0)
            return cJSON_GetObjectItemCaseSensitive(e, "args");
    }
    return NULL;
}

static FILE *tr_out(const char *path)
{
    if (path == NULL)
        return stdout;
    FILE *f = fopen(path, "w");
    if (f == NULL)
        fprintf(stderr, "gravac-trace: cannot create %s: %s\n", path, strerror(errno));
    return f;
}

static int tr_close_out(FILE *f, const char *path)
{
    int bad = ferror(f) != 0;
    if (f != stdout)
        bad |= fclose(f) != 0;
    else
        bad |= fflush(f) != 0;
    if (bad)
        fprintf(stderr, "gravac-trace: cannot write %s\n", path ? path : "standard output");
    return bad ? 1 : 0;
}

/* ---------------------------------------------------------------- merge */

struct tr_file {
    cJSON *root, *arr;
    long double t0; /* the anchor, seconds of CLOCK_REALTIME */
};

static int tr_merge(int argc, char **argv)
{
    const char *out = NULL;
    int first = 0;
    if (argc >= 2 && strcmp(argv[0], "-o") == 0) {
        out = argv[1];
        first = 2;
    }
    int n = argc - first;
    if (n < 1 || n > TR_MAX_FILES) {
        tr_usage(stderr);
        return 2;
    }
    struct tr_file *tf = calloc((size_t)n, sizeof(*tf));
    int rc = 1;
    long double t0 = 0;
    if (tf == NULL)
        return 1;
    for (int i = 0; i < n; i++) {
        const char *path = argv[first + i];
        if ((tf[i].arr = tr_load(path, &tf[i].root)) == NULL)
            goto out;
        const cJSON *clk = tr_meta(tf[i].arr, "gravac_clock");
        if (clk == NULL || !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(clk, "t0_s"))) {
            fprintf(stderr,
                    "gravac-trace: %s has no clock anchor (gravac_clock): not written by "
                    "--trace, so it cannot be aligned\n",
                    path);
            goto out;
        }
        tf[i].t0 =
            (long double)tr_num(clk, "t0_s", 0) + (long double)tr_num(clk, "t0_ns", 0) * 1e-9L;
        if (i == 0 || tf[i].t0 < t0)
            t0 = tf[i].t0;
    }
    FILE *f = tr_out(out);
    if (f == NULL)
        goto out;
    long double t0s = floorl(t0);
    fprintf(f,
            "[\n{\"name\":\"gravac_clock\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"clock\":"
            "\"CLOCK_REALTIME\",\"t0_s\":%.0Lf,\"t0_ns\":%.0Lf,\"ts_unit\":\"us since t0\","
            "\"merged_files\":%d}}",
            t0s, (t0 - t0s) * 1e9L, n);
    for (int i = 0; i < n; i++) {
        double shift_us = (double)((tf[i].t0 - t0) * 1e6L);
        cJSON *e;
        cJSON_ArrayForEach(e, tf[i].arr)
        {
            const char *name = tr_str(e, "name"), *ph = tr_str(e, "ph");
            if (ph != NULL && strcmp(ph, "M") == 0 && name != NULL &&
                strcmp(name, "gravac_clock") == 0)
                continue;
            cJSON *pid = cJSON_GetObjectItemCaseSensitive(e, "pid");
            if (pid != NULL)
                cJSON_SetNumberValue(pid, i + 1);
            else
                cJSON_AddNumberToObject(e, "pid", i + 1);
            cJSON *ts = cJSON_GetObjectItemCaseSensitive(e, "ts");
            if (cJSON_IsNumber(ts))
                cJSON_SetNumberValue(ts, ts->valuedouble + shift_us);
            char *s = cJSON_PrintUnformatted(e);
            if (s == NULL)
                break;
            fprintf(f, ",\n%s", s);
            cJSON_free(s);
        }
    }
    fputs("\n]\n", f);
    rc = tr_close_out(f, out);
out:
    for (int i = 0; i < n; i++)
        cJSON_Delete(tf[i].root);
    free(tf);
    return rc;
}

/* ---------------------------------------------------------------- spans, lanes */

struct tr_span {
    const char *name;
    double ts, dur; /* us */
    double iter, cf, bytes, peer;
    int lane, depth;
};

struct tr_lane {
    int pid;
    int sort;
    char name[96];
    int depth; /* rows used */
};

struct tr_trace {
    cJSON *root;
    struct tr_span *sp;
    size_t n;
    struct tr_lane lane[TR_MAX_LANES];
    int n_lanes;
};

static int tr_lane_of(struct tr_trace *t, int pid)
{
    for (int i = 0; i < t->n_lanes; i++)
        if (t->lane[i].pid == pid)
            return i;
    if (t->n_lanes == TR_MAX_LANES)
        return -1;
    struct tr_lane *l = &t->lane[t->n_lanes];
    l->pid = pid;
    l->sort = pid;
    snprintf(l->name, sizeof(l->name), "pid %d", pid);
    return t->n_lanes++;
}

static int tr_span_cmp(const void *a, const void *b)
{
    const struct tr_span *x = a, *y = b;
    if (x->lane != y->lane)
        return x->lane - y->lane;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    return x->dur > y->dur ? -1 : x->dur < y->dur; /* a parent before a child at the same ts */
}

static int tr_lane_cmp(const void *a, const void *b)
{
    const struct tr_lane *x = a, *y = b;
    return x->sort != y->sort ? (x->sort < y->sort ? -1 : 1) : x->pid - y->pid;
}

/* Loads the complete events (ph X) of iterations [lo, hi] and the lanes' names and order;
 * nesting depth per lane from the spans' times. */
static int tr_trace_load(struct tr_trace *t, const char *path, double lo, double hi)
{
    memset(t, 0, sizeof(*t));
    cJSON *arr = tr_load(path, &t->root);
    if (arr == NULL)
        return 1;
    size_t cap = (size_t)cJSON_GetArraySize(arr);
    t->sp = calloc(cap + 1, sizeof(*t->sp));
    if (t->sp == NULL)
        return 1;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        const char *ph = tr_str(e, "ph"), *name = tr_str(e, "name");
        int pid = (int)tr_num(e, "pid", 0);
        if (ph == NULL || name == NULL)
            continue;
        if (strcmp(ph, "M") == 0) {
            const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
            int li = strcmp(name, "process_name") == 0 || strcmp(name, "process_sort_index") == 0
                         ? tr_lane_of(t, pid)
                         : -1;
            if (li >= 0 && strcmp(name, "process_name") == 0 && tr_str(args, "name") != NULL)
                snprintf(t->lane[li].name, sizeof(t->lane[li].name), "%s", tr_str(args, "name"));
            else if (li >= 0)
                t->lane[li].sort = (int)tr_num(args, "sort_index", pid);
            continue;
        }
        if (strcmp(ph, "X") != 0)
            continue;
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
        double iter = tr_num(args, "iter", 0);
        if (iter < lo || iter > hi)
            continue;
        int li = tr_lane_of(t, pid);
        if (li < 0)
            continue;
        double peer = tr_num(args, "server", tr_num(args, "worker", -1));
        t->sp[t->n++] = (struct tr_span){name,
                                         tr_num(e, "ts", 0),
                                         tr_num(e, "dur", 0),
                                         iter,
                                         tr_num(args, "cf", 0),
                                         tr_num(args, "bytes", 0),
                                         peer,
                                         li,
                                         0};
    }
    /* lanes in their sort order, spans renumbered to it */
    int order[TR_MAX_LANES];
    struct tr_lane sorted[TR_MAX_LANES];
    memcpy(sorted, t->lane, sizeof(sorted));
    qsort(sorted, (size_t)t->n_lanes, sizeof(sorted[0]), tr_lane_cmp);
    for (int i = 0; i < t->n_lanes; i++)
        for (int j = 0; j < t->n_lanes; j++)
            if (sorted[j].pid == t->lane[i].pid)
                order[i] = j;
    memcpy(t->lane, sorted, sizeof(sorted));
    for (size_t i = 0; i < t->n; i++)
        t->sp[i].lane = order[t->sp[i].lane];
    qsort(t->sp, t->n, sizeof(t->sp[0]), tr_span_cmp);
    double end[TR_MAX_DEPTH];
    int top = 0;
    for (size_t i = 0; i < t->n; i++) {
        struct tr_span *s = &t->sp[i];
        if (i == 0 || s->lane != t->sp[i - 1].lane)
            top = 0;
        while (top > 0 && end[top - 1] <= s->ts + 1e-6)
            top--;
        s->depth = GV_MIN(top, TR_MAX_DEPTH - 1);
        if (top < TR_MAX_DEPTH)
            end[top++] = s->ts + s->dur;
        if (s->depth + 1 > t->lane[s->lane].depth)
            t->lane[s->lane].depth = s->depth + 1;
    }
    return 0;
}

static void tr_trace_free(struct tr_trace *t)
{
    free(t->sp);
    cJSON_Delete(t->root);
}

static int tr_parse_iters(const char *s, double *lo, double *hi)
{
    char *end;
    *lo = strtod(s, &end);
    if (end == s || *end != ':')
        return -1;
    const char *b = end + 1;
    *hi = strtod(b, &end);
    return end == b || *end != '\0' || *hi < *lo ? -1 : 0;
}

/* ---------------------------------------------------------------- svg */

static const struct {
    const char *name, *color;
} tr_colors[] = {
    {"compute", "#9e9e9e"}, {"compress", "#1f77b4"},    {"push", "#17becf"}, {"wait", "#ffbb78"},
    {"apply", "#2ca02c"},   {"aggregate", "#9467bd"},   {"add", "#c5b0d5"},  {"decide", "#d62728"},
    {"update", "#ff7f0e"},  {"trace-flush", "#000000"},
};

static const char *tr_color(const char *name)
{
    for (size_t i = 0; i < GV_ARRAY_LEN(tr_colors); i++)
        if (strcmp(tr_colors[i].name, name) == 0)
            return tr_colors[i].color;
    return "#bcbd22";
}

static void tr_xml(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* A tick step of 1, 2 or 5 x 10^k giving about `want` ticks over span. */
static double tr_tick(double span, int want)
{
    double raw = span / want, p = pow(10, floor(log10(raw)));
    double m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

static void tr_svg_draw(FILE *f, const struct tr_trace *t, double width, const char *title)
{
    const double left = 110, right = 20, top = 46, row = 16, gap = 10, legend_h = 40;
    double t_lo = INFINITY, t_hi = -INFINITY;
    for (size_t i = 0; i < t->n; i++) {
        t_lo = fmin(t_lo, t->sp[i].ts);
        t_hi = fmax(t_hi, t->sp[i].ts + t->sp[i].dur);
    }
    if (t->n == 0)
        t_lo = 0, t_hi = 1;
    double span = fmax(t_hi - t_lo, 1e-3), plot_w = width - left - right;
    double lane_y[TR_MAX_LANES + 1];
    double y = top;
    for (int l = 0; l < t->n_lanes; l++) {
        lane_y[l] = y;
        y += GV_MAX(1, t->lane[l].depth) * row + gap;
    }
    double axis_y = y, height = axis_y + 30 + legend_h;
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"11\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            "<text x=\"%.0f\" y=\"20\" font-size=\"14\" font-weight=\"bold\">",
            width, height, width, height, left);
    tr_xml(f, title);
    fprintf(f,
            "</text>\n<text x=\"%.0f\" y=\"36\" fill=\"#555\">%zu spans, %.3f ms shown; "
            "nested spans on the rows below their parent</text>\n",
            left, t->n, span * 1e-3);
    double step = tr_tick(span, 10);
    for (double v = t_lo; v <= t_hi + 1e-9; v += step) { /* ms from the first span shown */
        double x = left + (v - t_lo) / span * plot_w;
        fprintf(f,
                "<line x1=\"%.2f\" y1=\"%.0f\" x2=\"%.2f\" y2=\"%.0f\" stroke=\"#e0e0e0\"/>\n"
                "<text x=\"%.2f\" y=\"%.0f\" text-anchor=\"middle\" fill=\"#333\">%.6g</text>\n",
                x, top - 4, x, axis_y, x, axis_y + 14, (v - t_lo) * 1e-3);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\" fill=\"#333\">ms</text>\n",
            width - right, axis_y + 26);
    for (int l = 0; l < t->n_lanes; l++) {
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\" font-weight=\"bold\">",
                left - 8, lane_y[l] + row * 0.75);
        tr_xml(f, t->lane[l].name);
        fputs("</text>\n", f);
    }
    for (size_t i = 0; i < t->n; i++) {
        const struct tr_span *s = &t->sp[i];
        double x = left + (s->ts - t_lo) / span * plot_w;
        double w = fmax(s->dur / span * plot_w, 0.5);
        double yy = lane_y[s->lane] + s->depth * row;
        fprintf(f,
                "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
                "stroke=\"white\" stroke-width=\"0.3\"><title>",
                x, yy + 1, w, row - 2, tr_color(s->name));
        tr_xml(f, s->name);
        fprintf(f, ": iteration %.0f, %.1f us, CF %.4g, %.0f bytes", s->iter, s->dur, s->cf,
                s->bytes);
        if (s->peer >= 0)
            fprintf(f, ", peer %.0f", s->peer);
        fputs("</title></rect>\n", f);
        if (w > 7.0 * (double)strlen(s->name)) {
            fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" fill=\"white\" font-size=\"10\">", x + 2,
                    yy + row * 0.72);
            tr_xml(f, s->name);
            fputs("</text>\n", f);
        }
    }
    double lx = left, ly = axis_y + 42;
    for (size_t i = 0; i < GV_ARRAY_LEN(tr_colors); i++) {
        bool used = false;
        for (size_t j = 0; j < t->n && !used; j++)
            used = strcmp(t->sp[j].name, tr_colors[i].name) == 0;
        if (!used)
            continue;
        fprintf(f,
                "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n",
                lx, ly - 10, tr_colors[i].color, lx + 16, ly, tr_colors[i].name);
        lx += 30 + 7.0 * (double)strlen(tr_colors[i].name);
    }
    fputs("</svg>\n", f);
}

/* Common options of svg and stats: -o, --iters, --width, --title; one input file. */
struct tr_opts {
    const char *out, *in, *title;
    double lo, hi, width;
};

static int tr_parse_opts(int argc, char **argv, struct tr_opts *o)
{
    *o = (struct tr_opts){.lo = -INFINITY, .hi = INFINITY, .width = 1400};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (strcmp(a, "-o") == 0 && has)
            o->out = argv[++i];
        else if (strcmp(a, "--iters") == 0 && has) {
            if (tr_parse_iters(argv[++i], &o->lo, &o->hi) != 0)
                return 2;
        } else if (strcmp(a, "--width") == 0 && has) {
            o->width = strtod(argv[++i], NULL);
            if (!(o->width >= 300 && o->width <= 20000))
                return 2;
        } else if (strcmp(a, "--title") == 0 && has)
            o->title = argv[++i];
        else if (a[0] != '-' && o->in == NULL)
            o->in = a;
        else
            return 2;
    }
    return o->in == NULL ? 2 : 0;
}

static int tr_svg(int argc, char **argv)
{
    struct tr_opts o;
    if (tr_parse_opts(argc, argv, &o) != 0) {
        tr_usage(stderr);
        return 2;
    }
    struct tr_trace t;
    int rc = 1;
    if (tr_trace_load(&t, o.in, o.lo, o.hi) == 0) {
        FILE *f = tr_out(o.out);
        if (f != NULL) {
            tr_svg_draw(f, &t, o.width, o.title ? o.title : o.in);
            rc = tr_close_out(f, o.out);
        }
    }
    tr_trace_free(&t);
    return rc;
}

/* ---------------------------------------------------------------- stats */

static int tr_stats(int argc, char **argv)
{
    struct tr_opts o;
    if (tr_parse_opts(argc, argv, &o) != 0 || o.out != NULL) {
        tr_usage(stderr);
        return 2;
    }
    struct tr_trace t;
    if (tr_trace_load(&t, o.in, o.lo, o.hi) != 0) {
        tr_trace_free(&t);
        return 1;
    }
    printf("%-16s %-12s %8s %12s %12s %14s\n", "lane", "span", "count", "total_ms", "mean_us",
           "bytes/span");
    for (int l = 0; l < t.n_lanes; l++) {
        for (size_t k = 0; k < GV_ARRAY_LEN(tr_colors); k++) {
            double n = 0, tot = 0, bytes = 0;
            for (size_t i = 0; i < t.n; i++)
                if (t.sp[i].lane == l && strcmp(t.sp[i].name, tr_colors[k].name) == 0) {
                    n++;
                    tot += t.sp[i].dur;
                    bytes += t.sp[i].bytes;
                }
            if (n > 0)
                printf("%-16s %-12s %8.0f %12.3f %12.1f %14.0f\n", t.lane[l].name,
                       tr_colors[k].name, n, tot * 1e-3, tot / n, bytes / n);
        }
    }
    tr_trace_free(&t);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        tr_usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        tr_usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "merge") == 0)
        return tr_merge(argc - 2, argv + 2);
    if (strcmp(argv[1], "svg") == 0)
        return tr_svg(argc - 2, argv + 2);
    if (strcmp(argv[1], "stats") == 0)
        return tr_stats(argc - 2, argv + 2);
    fprintf(stderr, "gravac-trace: unknown command '%s'\n", argv[1]);
    tr_usage(stderr);
    return 2;
}
