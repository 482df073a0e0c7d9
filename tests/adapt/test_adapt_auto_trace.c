/* test_adapt_auto_trace.c: replays observation traces recorded by server 0 (--obs-trace) in real
 * jobs of `gravac-bench train` through the AUTO controller with the default settings (those of
 * `gravac-server --help`; the trace's header gives the budget), and asserts
 *  - closed-loop fidelity: after every observation the controller decides exactly what the job's
 *    controller decided (next_level, next_cf of the line): the replay is the run, bit for bit;
 *  - the decision sequence, run by run, against the list written below for each trace;
 *  - why each change was made: the decision log's reasons, in order.
 * A trace recorded before a rule was added replays up to the first decision the rule changes:
 * the iteration is asserted, and the runs and reasons up to it.
 * argv: pairs of (trace path, expected-runs name). ADAPT_DUMP=1 prints the runs and reasons. */
#include "harness.h"

#include <errno.h>

struct expect {
    const char *name;
    const struct run *runs;
    size_t n_runs;
    const char *const *reasons; /* the log's reasons in order (NULL-terminated) */
    uint64_t diverge; /* 0: the replay is the run; else the iteration from which a rule added
                       * since the recording decides otherwise (the replay ends there) */
};

#include "traces/auto_expected.h"

struct tlog {
    int n;
    char reasons[512][32];
};

static void tlog_cb(const char *line, void *arg)
{
    struct tlog *t = arg;
    cJSON *j = cJSON_Parse(line);
    if (j == NULL) {
        GV_CHECK_FAIL_("log line is not JSON: %s", line);
        return;
    }
    const char *r = jstr(j, "reason");
    if (strcmp(r, "back-to-incumbent") != 0 && strcmp(r, "probe-above") != 0 &&
        strcmp(r, "probe-below") != 0 && strcmp(r, "no-probe") != 0 && t->n < 512)
        snprintf(t->reasons[t->n++], sizeof(t->reasons[0]), "%s", r); /* the changes only */
    if (getenv("ADAPT_DUMP") != NULL)
        printf("%s\n", line);
    cJSON_Delete(j);
}

static const struct expect *find_expect(const char *name)
{
    for (size_t i = 0; i < GV_ARRAY_LEN(expected); i++)
        if (strcmp(expected[i].name, name) == 0)
            return &expected[i];
    return NULL;
}

static void replay_trace(const char *path, const struct expect *want)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        GV_CHECK_FAIL_("cannot open %s: %s", path, strerror(errno));
        return;
    }
    struct gv_adapt_config cfg;
    gv_adapt_config_default(&cfg, GV_ADAPT_AUTO);
    char line[GV_ADAPT_TRACE_LINE + 64];
    bool header = false;
    struct gv_adapt *ctl = NULL;
    struct gv_adapt_decision d = {0};
    struct tlog log = {0};
    size_t n = 0, cap = 0, differ = 0;
    uint64_t first_diff = 0;
    struct step *s = NULL;
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        unsigned long long total;
        if (sscanf(line, "# total_iters %llu", &total) == 1) {
            cfg.autoc.total_iters = total;
            continue;
        }
        if (line[0] == '#' || line[0] == '\0')
            continue;
        if (!header) {
            header = strcmp(line, GV_ADAPT_TRACE_HEADER) == 0;
            GV_CHECK_MSG(header, "%s: not an observation trace", path);
            if (!header)
                break;
            GV_CHECK_OK(gv_adapt_create(&cfg, &ctl));
            gv_adapt_set_log(ctl, tlog_cb, &log);
            GV_CHECK_OK(gv_adapt_current(ctl, &d));
            continue;
        }
        struct gv_adapt_obs o;
        enum gv_adapt_level next_level;
        double next_cf;
        if (gv_adapt_trace_parse(line, &o, &next_level, &next_cf) != GV_OK) {
            GV_CHECK_FAIL_("%s: line %zu malformed", path, n + 1);
            break;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 1024;
            s = realloc(s, cap * sizeof(*s));
        }
        s[n++] = (struct step){d.iter, d.level, d.cf_send, d.theta_min, d.cf_candidate};
        if (gv_adapt_update(ctl, &o, &d) != GV_OK) {
            GV_CHECK_FAIL_("%s: observation %llu refused", path, (unsigned long long)o.iter);
            break;
        }
        if (d.level != next_level || d.cf_send != next_cf) {
            if (differ++ == 0)
                first_diff = d.iter;
            if (want != NULL && want->diverge > 0) {
                /* the new decision ends the runs; the observations after it answer decisions
                 * the replay did not make */
                if (n == cap)
                    s = realloc(s, (cap += 1) * sizeof(*s));
                s[n++] = (struct step){d.iter, d.level, d.cf_send, d.theta_min, d.cf_candidate};
                break;
            }
        }
    }
    fclose(f);
    if (want != NULL && want->diverge > 0)
        GV_CHECK_MSG(first_diff == want->diverge,
                     "%s: the replay departs from the run at %llu, "
                     "expected %llu",
                     path, (unsigned long long)first_diff, (unsigned long long)want->diverge);
    else
        GV_CHECK_MSG(differ == 0, "%s: %zu decisions differ from the recorded run", path, differ);
    GV_CHECK_MSG(n >= 100, "%s: only %zu observations", path, n);
    if (getenv("ADAPT_DUMP") != NULL) {
        struct run r[256];
        size_t k = to_runs(s, n, r, GV_ARRAY_LEN(r));
        print_runs(path, r, k > GV_ARRAY_LEN(r) ? GV_ARRAY_LEN(r) : k);
        for (int i = 0; i < log.n; i++)
            fprintf(stderr, "    \"%s\",\n", log.reasons[i]);
    }
    if (want != NULL) {
        check_runs_(__FILE__, __LINE__, s, n, want->runs, want->n_runs);
        int k = 0;
        for (; want->reasons[k] != NULL && k < log.n; k++)
            GV_CHECK_MSG(strcmp(want->reasons[k], log.reasons[k]) == 0,
                         "%s: reason %d is %s, expected %s", path, k, log.reasons[k],
                         want->reasons[k]);
        GV_CHECK_MSG(want->reasons[k] == NULL && k == log.n, "%s: %d reasons logged, %d expected",
                     path, log.n, k);
    }
    free(s);
    gv_adapt_destroy(ctl);
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc % 2 != 1) {
        fprintf(stderr, "usage: test_adapt_auto_trace TRACE NAME [TRACE NAME ...]\n");
        return 2;
    }
    for (int i = 1; i + 1 < argc; i += 2) {
        const struct expect *want = find_expect(argv[i + 1]);
        GV_CHECK_MSG(want != NULL || getenv("ADAPT_DUMP") != NULL, "no expected runs for %s",
                     argv[i + 1]);
        replay_trace(argv[i], want);
    }
    return gv_check_summary();
}
