/* test_metrics.c: the registry and its Prometheus text rendering: a golden exposition, escaping,
 * number formatting, quantiles over a sliding window, registration rules, concurrent updates
 * and allocation failures. The HTTP endpoint is tested in test_metrics_http.c. */
#include "check.h"
#include "gv_ops.h"

#include <math.h>
#include <pthread.h>

static char *render(struct gv_metrics *reg)
{
    char *text = NULL;
    size_t len = 0;
    GV_CHECK_OK(gv_metrics_render(reg, &text, &len));
    GV_CHECK(text == NULL || strlen(text) == len);
    return text;
}

static void test_golden(void)
{
    struct gv_metrics *reg;
    struct gv_metric *bytes, *cf, *w0, *w1, *step, *unused;
    GV_CHECK_OK(gv_metrics_create(&reg));
    char *t = render(reg);
    GV_CHECK_STREQ(t, "");
    gv_free(t);
    GV_CHECK_OK(gv_metrics_get(reg, GV_METRIC_COUNTER, "gravac_bytes_in_total",
                               "Bytes received from workers.", NULL, 0, &bytes));
    GV_CHECK_OK(gv_metrics_get(reg, GV_METRIC_GAUGE, "gravac_compression_factor",
                               "Current compression factor.", NULL, 0, &cf));
    const char *const l0[] = {"worker", "0", NULL}, *const l1[] = {"worker", "1", NULL};
    GV_CHECK_OK(gv_metrics_get(reg, GV_METRIC_GAUGE, "gravac_worker_last_seen_seconds",
                               "When each worker was last heard from.", l0, 0, &w0));
    GV_CHECK_OK(gv_metrics_get(reg, GV_METRIC_GAUGE, "gravac_worker_last_seen_seconds",
                               "When each worker was last heard from.", l1, 0, &w1));
    GV_CHECK_OK(gv_metrics_get(reg, GV_METRIC_SUMMARY, "gravac_step_seconds", "Step time.", NULL,
                               10, &step));
    /* a counter never incremented renders as 0 */
    GV_CHECK_OK(
        gv_metrics_get(reg, GV_METRIC_COUNTER, "gravac_unused_total", "Unused.", NULL, 0, &unused));
    gv_metric_inc(bytes, 1000);
    gv_metric_inc(bytes, 24);
    gv_metric_set(cf, 0.01);
    gv_metric_set(w0, 1700000000.5);
    gv_metric_set(w1, 1700000001);
    for (int i = 1; i <= 10; i++)
        gv_metric_observe(step, i / 1000.0);
    t = render(reg);
    GV_CHECK_STREQ(t, "# HELP gravac_bytes_in_total Bytes received from workers.\n"
                      "# TYPE gravac_bytes_in_total counter\n"
                      "gravac_bytes_in_total 1024\n"
                      "# HELP gravac_compression_factor Current compression factor.\n"
                      "# TYPE gravac_compression_factor gauge\n"
                      "gravac_compression_factor 0.01\n"
                      "# HELP gravac_worker_last_seen_seconds When each worker was last heard "
                      "from.\n"
                      "# TYPE gravac_worker_last_seen_seconds gauge\n"
                      "gravac_worker_last_seen_seconds{worker=\"0\"} 1700000000.5\n"
                      "gravac_worker_last_seen_seconds{worker=\"1\"} 1700000001\n"
                      "# HELP gravac_step_seconds Step time.\n"
                      "# TYPE gravac_step_seconds summary\n"
                      "gravac_step_seconds{quantile=\"0.5\"} 0.005\n"
                      "gravac_step_seconds{quantile=\"0.9\"} 0.009\n"
                      "gravac_step_seconds{quantile=\"0.99\"} 0.01\n"
                      "gravac_step_seconds_sum 0.055\n"
                      "gravac_step_seconds_count 10\n"
                      "# HELP gravac_unused_total Unused.\n"
                      "# TYPE gravac_unused_total counter\n"
                      "gravac_unused_total 0\n");
    gv_free(t);
    gv_metrics_destroy(reg);
    gv_metrics_destroy(NULL);
}

static void test_escaping_and_numbers(void)
{
    struct gv_metrics *reg;
    struct gv_metric *m, *s, *g[6];
    GV_CHECK_OK(gv_metrics_create(&reg));
    const char *const labels[] = {"path", "a\"b\\c\nd", "host", "n\xc3\xa9", NULL};
    GV_CHECK_OK(gv_metrics_get(reg, GV_METRIC_COUNTER, "x_total", "Help with \\ and\nnewline \"q\"",
                               labels, 0, &m));
    gv_metric_inc(m, 3);
    const char *const sl[] = {"worker", "7", NULL};
    GV_CHECK_OK(gv_metrics_get(reg, GV_METRIC_SUMMARY, "s", "", sl, 4, &s));
    char *t = render(reg);
    GV_CHECK_STREQ(t, "# HELP x_total Help with \\\\ and\\nnewline \"q\"\n"
                      "# TYPE x_total counter\n"
                      "x_total{path=\"a\\\"b\\\\c\\nd\",host=\"n\xc3\xa9\"} 3\n"
                      "# HELP s \n"
                      "# TYPE s summary\n"
                      "s{worker=\"7\",quantile=\"0.5\"} NaN\n"
                      "s{worker=\"7\",quantile=\"0.9\"} NaN\n"
                      "s{worker=\"7\",quantile=\"0.99\"} NaN\n"
                      "s_sum{worker=\"7\"} 0\n"
                      "s_count{worker=\"7\"} 0\n");
    gv_free(t);
    gv_metrics_destroy(reg);

    GV_CHECK_OK(gv_metrics_create(&reg));
    static const double values[] = {0.1, 1e21, 123456789012.0, INFINITY, -INFINITY, NAN};
    static const char *const want[] = {"0.1", "1e+21", "123456789012", "+Inf", "-Inf", "NaN"};
    for (int i = 0; i < 6; i++) {
        char name[16];
        snprintf(name, sizeof(name), "g%d", i);
        GV_CHECK_OK(gv_metrics_get(reg, GV_METRIC_GAUGE, name, "h", NULL, 0, &g[i]));
        gv_metric_set(g[i], values[i]);
    }
    t = render(reg);
    for (int i = 0; i < 6; i++) {
        char line[64];
        snprintf(line, sizeof(line), "\ng%d %s\n", i, want[i]);
        GV_CHECK_MSG(t && strstr(t, line) != NULL, "missing '%s'", line + 1);
    }
    gv_free(t);
    /* 1/3 needs all 17 digits to read back the same double */
    gv_metric_set(g[0], 1.0 / 3.0);
    t = render(reg);
    GV_CHECK(t && strstr(t, "\ng0 0.33333333333333331\n") != NULL);
    gv_free(t);
    gv_metrics_destroy(reg);
}

static void test_quantiles(void)
{
    struct gv_metrics *reg;
    struct gv_metric *a, *b, *c;
    double v;
    GV_CHECK_OK(gv_metrics_create(&reg));
    GV_CHECK_OK(gv_metrics_get(reg, GV_METRIC_SUMMARY, "a", "h", NULL, 100, &a));
    GV_CHECK_STATUS(gv_metric_quantile(a, 0.5, &v), GV_ERR_AGAIN);
    /* 1..100 in a scrambled order */
    for (int i = 0; i < 100; i++)
        gv_metric_observe(a, (double)((i * 37) % 100 + 1));
    GV_CHECK_OK(gv_metric_quantile(a, 0.5, &v));
    GV_CHECK_EQ(v, 50);
    GV_CHECK_OK(gv_metric_quantile(a, 0.9, &v));
    GV_CHECK_EQ(v, 90);
    GV_CHECK_OK(gv_metric_quantile(a, 0.99, &v));
    GV_CHECK_EQ(v, 99);
    GV_CHECK_OK(gv_metric_quantile(a, 0, &v));
    GV_CHECK_EQ(v, 1);
    GV_CHECK_OK(gv_metric_quantile(a, 1, &v));
    GV_CHECK_EQ(v, 100);
    GV_CHECK_STATUS(gv_metric_quantile(a, 1.5, &v), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_metric_quantile(a, NAN, &v), GV_ERR_INVAL);
    GV_CHECK_EQ(gv_metric_value(a), 5050);

    /* the window slides: of 1..20 only the last 10 count; sum and count cover all */
    GV_CHECK_OK(gv_metrics_get(reg, GV_METRIC_SUMMARY, "b", "h", NULL, 10, &b));
    for (int i = 1; i <= 20; i++)
        gv_metric_observe(b, i);
    gv_metric_observe(b, NAN); /* ignored */
    GV_CHECK_OK(gv_metric_quantile(b, 0.5, &v));
    GV_CHECK_EQ(v, 15);
    GV_CHECK_OK(gv_metric_quantile(b, 0.9, &v));
    GV_CHECK_EQ(v, 19);
    GV_CHECK_OK(gv_metric_quantile(b, 0.99, &v));
    GV_CHECK_EQ(v, 20);
    char *t = render(reg);
    GV_CHECK(t && strstr(t, "b{quantile=\"0.5\"} 15\nb{quantile=\"0.9\"} 19\n"
                            "b{quantile=\"0.99\"} 20\nb_sum 210\nb_count 20\n") != NULL);
    gv_free(t);
    /* a single observation is every quantile */
    GV_CHECK_OK(gv_metrics_get(reg, GV_METRIC_SUMMARY, "c", "h", NULL, 0, &c));
    gv_metric_observe(c, 42);
    GV_CHECK_OK(gv_metric_quantile(c, 0.01, &v));
    GV_CHECK_EQ(v, 42);
    GV_CHECK_OK(gv_metric_quantile(c, 0.99, &v));
    GV_CHECK_EQ(v, 42);
    struct gv_metric *ctr;
    GV_CHECK_OK(gv_metrics_get(reg, GV_METRIC_COUNTER, "ctr", "h", NULL, 0, &ctr));
    GV_CHECK_STATUS(gv_metric_quantile(ctr, 0.5, &v), GV_ERR_INVAL);
    gv_metrics_destroy(reg);
}

static void test_registration(void)
{
    struct gv_metrics *reg;
    struct gv_metric *m, *m2;
    GV_CHECK_OK(gv_metrics_create(&reg));
    const enum gv_metric_type C = GV_METRIC_COUNTER, G = GV_METRIC_GAUGE, S = GV_METRIC_SUMMARY;
    static const char *const bad_names[] = {"", "1abc", "a-b", "a b", "\xc3\xa9", "a.b"};
    for (size_t i = 0; i < GV_ARRAY_LEN(bad_names); i++)
        GV_CHECK_STATUS(gv_metrics_get(reg, C, bad_names[i], "h", NULL, 0, &m), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_metrics_get(reg, C, NULL, "h", NULL, 0, &m), GV_ERR_INVAL);
    GV_CHECK_OK(gv_metrics_get(reg, C, "ns:sub_x_total", "h", NULL, 0, &m));
    const char *const q[] = {"quantile", "1", NULL};
    const char *const dunder[] = {"__x", "1", NULL};
    const char *const colon[] = {"a:b", "1", NULL};
    const char *const twice[] = {"a", "1", "a", "2", NULL};
    const char *const novalue[] = {"a", NULL};
    const char *const five[] = {"a", "1", "b", "1", "c", "1", "d", "1", "e", "1", NULL};
    const char *const four[] = {"a", "1", "b", "1", "c", "1", "d", "1", NULL};
    GV_CHECK_STATUS(gv_metrics_get(reg, S, "l1", "h", q, 0, &m), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_metrics_get(reg, G, "l2", "h", dunder, 0, &m), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_metrics_get(reg, G, "l3", "h", colon, 0, &m), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_metrics_get(reg, G, "l4", "h", twice, 0, &m), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_metrics_get(reg, G, "l5", "h", novalue, 0, &m), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_metrics_get(reg, G, "l6", "h", five, 0, &m), GV_ERR_INVAL);
    GV_CHECK_OK(gv_metrics_get(reg, G, "l7", "h", four, 0, &m));
    GV_CHECK_STATUS(gv_metrics_get(reg, S, "w", "h", NULL, 65537, &m), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_metrics_get(reg, (enum gv_metric_type)7, "t", "h", NULL, 0, &m),
                    GV_ERR_INVAL);

    /* the first registration fixes type, help, label names and window */
    const char *const w3[] = {"worker", "3", NULL}, *const r3[] = {"rank", "3", NULL};
    GV_CHECK_OK(gv_metrics_get(reg, G, "fam", "help", w3, 0, &m));
    GV_CHECK_OK(gv_metrics_get(reg, G, "fam", "help", w3, 0, &m2));
    GV_CHECK(m == m2);
    GV_CHECK_STATUS(gv_metrics_get(reg, C, "fam", "help", w3, 0, &m2), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_metrics_get(reg, G, "fam", "other help", w3, 0, &m2), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_metrics_get(reg, G, "fam", "help", r3, 0, &m2), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_metrics_get(reg, G, "fam", "help", NULL, 0, &m2), GV_ERR_INVAL);
    GV_CHECK_OK(gv_metrics_get(reg, S, "sw", "help", NULL, 8, &m));
    GV_CHECK_STATUS(gv_metrics_get(reg, S, "sw", "help", NULL, 16, &m2), GV_ERR_INVAL);
    GV_CHECK_OK(gv_metrics_get(reg, S, "sd", "help", NULL, 0, &m));
    GV_CHECK_OK(gv_metrics_get(reg, S, "sd", "help", NULL, 1024, &m2)); /* 0 means 1024 */
    GV_CHECK(m == m2);

    /* counters only go up; gauges anywhere; wrong-kind updates are ignored */
    struct gv_metric *c, *g;
    GV_CHECK_OK(gv_metrics_get(reg, C, "up_total", "h", NULL, 0, &c));
    gv_metric_inc(c, 2);
    gv_metric_inc(c, -1);
    gv_metric_inc(c, NAN);
    gv_metric_set(c, 100);
    gv_metric_observe(c, 100);
    GV_CHECK_EQ(gv_metric_value(c), 2);
    GV_CHECK_OK(gv_metrics_get(reg, G, "level", "h", NULL, 0, &g));
    gv_metric_inc(g, -2.5);
    GV_CHECK_NEAR(gv_metric_value(g), -2.5, 0, 0);
    gv_metric_set(g, 7);
    GV_CHECK_EQ(gv_metric_value(g), 7);
    gv_metrics_destroy(reg);
}

struct worker_arg {
    struct gv_metrics *reg;
    int id;
};

static void *hammer(void *p)
{
    struct worker_arg *a = p;
    struct gv_metric *c, *s, *g;
    char id[8];
    snprintf(id, sizeof(id), "%d", a->id);
    const char *const labels[] = {"worker", id, NULL};
    if (gv_metrics_get(a->reg, GV_METRIC_COUNTER, "ops_total", "h", NULL, 0, &c) != GV_OK ||
        gv_metrics_get(a->reg, GV_METRIC_SUMMARY, "lat", "h", NULL, 64, &s) != GV_OK ||
        gv_metrics_get(a->reg, GV_METRIC_GAUGE, "seen", "h", labels, 0, &g) != GV_OK)
        return NULL;
    for (int i = 0; i < 50000; i++) {
        gv_metric_inc(c, 1);
        gv_metric_observe(s, i);
        gv_metric_set(g, i);
    }
    return NULL;
}

static void test_threads(void)
{
    struct gv_metrics *reg;
    GV_CHECK_OK(gv_metrics_create(&reg));
    pthread_t th[4];
    struct worker_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct worker_arg){reg, i};
        pthread_create(&th[i], NULL, hammer, &args[i]);
    }
    int renders = 0;
    for (int i = 0; i < 50; i++) {
        char *t = NULL;
        size_t len;
        if (gv_metrics_render(reg, &t, &len) == GV_OK)
            renders++;
        gv_free(t);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    GV_CHECK_EQ(renders, 50);
    char *t = render(reg);
    GV_CHECK(t && strstr(t, "\nops_total 200000\n") != NULL);
    GV_CHECK(t && strstr(t, "\nlat_count 200000\n") != NULL);
    for (int i = 0; i < 4; i++) {
        char line[64];
        snprintf(line, sizeof(line), "\nseen{worker=\"%d\"} 49999\n", i);
        GV_CHECK(t && strstr(t, line) != NULL);
    }
    gv_free(t);
    gv_metrics_destroy(reg);
}

static void test_alloc_failures(void)
{
    int nomem = 0;
    for (uint64_t n = 1; n < 100; n++) {
        struct gv_metrics *reg = NULL;
        struct gv_metric *m;
        char *t = NULL;
        size_t len;
        const char *const l[] = {"worker", "1", "kind", "x", NULL};
        gv_alloc_fail_nth(n);
        gv_status_t st = gv_metrics_create(&reg);
        if (st == GV_OK)
            st = gv_metrics_get(reg, GV_METRIC_SUMMARY, "s", "help", l, 16, &m);
        if (st == GV_OK)
            st = gv_metrics_get(reg, GV_METRIC_COUNTER, "c", "help", l, 0, &m);
        if (st == GV_OK)
            st = gv_metrics_render(reg, &t, &len);
        gv_alloc_fail_nth(0);
        GV_CHECK_MSG(st == GV_OK || st == GV_ERR_NOMEM, "n=%llu: %s", (unsigned long long)n,
                     gv_status_str(st));
        nomem += st == GV_ERR_NOMEM;
        gv_free(t);
        gv_metrics_destroy(reg);
        if (st == GV_OK)
            break;
    }
    GV_CHECK(nomem >= 8);
}

int main(void)
{
    test_golden();
    test_escaping_and_numbers();
    test_quantiles();
    test_registration();
    test_threads();
    gv_log_set_level(GV_LOG_ERROR + 0);
    test_alloc_failures();
    return gv_check_summary();
}
