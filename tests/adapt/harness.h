/* harness.h: shared by the adapt tests. A synthetic "environment" turns the decision in force
 * into the observation a coordinator would report (gains and times as functions of the CF and
 * the iteration), a replay loop records the decision of every iteration, and runs of equal
 * decisions are compared with an expected list. Also a decision-log capture. */
#ifndef GV_ADAPT_TEST_HARNESS_H
#define GV_ADAPT_TEST_HARNESS_H

#include "check.h"
#include "gv_adapt.h"

#include <cjson/cJSON.h>
#include <stdbool.h>

/* ---------------------------------------------------------------- environment */

struct env {
    /* per-step compression ratio ||C(g, cf)||^2 / ||g||^2 at iteration iter */
    double (*gain)(const struct env *e, double cf, uint64_t iter);
    /* when set: the compression throughput T the controller must see when cf is sent
     * (t_comm is derived from it; exact only with alpha = 1, where gain = per-step ratio) */
    double (*tput)(const struct env *e, double cf, uint64_t iter);
    double t_compute, t_compress;
    double comm_dense; /* without tput: t_comm = comm_dense / cf_sent */
    uint64_t samples;
    uint32_t workers;
    double lr;
    bool zero_grad; /* norm2_ef = 0 (set per iteration by a hook) */
    void (*hook)(struct env *e, uint64_t iter);
    void *user;
};

/* A power of two, so that (NORM * g) / NORM == g exactly. */
#define ENV_NORM 1024.0

static inline void env_obs(struct env *e, const struct gv_adapt_decision *d, struct gv_adapt_obs *o)
{
    if (e->hook != NULL)
        e->hook(e, d->iter);
    memset(o, 0, sizeof(*o));
    o->iter = d->iter;
    o->level = d->level;
    o->cf_sent = d->cf_send;
    o->norm2_ef = e->zero_grad ? 0.0 : ENV_NORM;
    if (d->levels >= 1)
        o->norm2_min = o->norm2_ef * e->gain(e, d->theta_min, d->iter);
    if (d->levels == 2)
        o->norm2_cand = o->norm2_ef * e->gain(e, d->cf_candidate, d->iter);
    o->t_compute = e->t_compute;
    o->t_compress = e->t_compress;
    o->samples = e->samples;
    o->num_workers = e->workers;
    o->lr = e->lr;
    if (e->tput != NULL) {
        double g = d->level == GV_ADAPT_LEVEL_DENSE ? 1.0 : e->gain(e, d->cf_send, d->iter);
        double t_iter = (double)e->samples * g / e->tput(e, d->cf_send, d->iter);
        double t_other = e->t_compute + (d->level == GV_ADAPT_LEVEL_DENSE ? 0.0 : e->t_compress);
        o->t_comm = t_iter - t_other;
    } else {
        o->t_comm = e->comm_dense / d->cf_send;
    }
}

/* ---------------------------------------------------------------- replay */

struct step {
    uint64_t iter;
    enum gv_adapt_level level;
    double cf, theta_min, cand;
};

/* Records the decision of iterations first..first+n-1 into out (n entries), feeding the
 * environment's observations. Returns false (and records a failure) if an update fails. */
static inline bool replay(struct gv_adapt *ctl, struct env *e, size_t n, struct step *out)
{
    struct gv_adapt_decision d = {0};
    if (gv_adapt_current(ctl, &d) != GV_OK)
        return false;
    for (size_t i = 0; i < n; i++) {
        out[i] = (struct step){d.iter, d.level, d.cf_send, d.theta_min, d.cf_candidate};
        struct gv_adapt_obs o;
        env_obs(e, &d, &o);
        gv_status_t st = gv_adapt_update(ctl, &o, &d);
        if (st != GV_OK) {
            GV_CHECK_FAIL_("update of iteration %llu: %s", (unsigned long long)o.iter,
                           gv_status_str(st));
            return false;
        }
    }
    return true;
}

/* A run of identical decisions starting at iteration `from`. */
struct run {
    uint64_t from;
    enum gv_adapt_level level;
    double cf, theta_min, cand;
};

static inline size_t to_runs(const struct step *s, size_t n, struct run *runs, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k > 0 && runs[k - 1].level == s[i].level && runs[k - 1].cf == s[i].cf &&
            runs[k - 1].theta_min == s[i].theta_min && runs[k - 1].cand == s[i].cand)
            continue;
        if (k == cap)
            return cap + 1;
        runs[k++] = (struct run){s[i].iter, s[i].level, s[i].cf, s[i].theta_min, s[i].cand};
    }
    return k;
}

static inline void print_runs(const char *title, const struct run *r, size_t n)
{
    fprintf(stderr, "  %s (%zu runs):\n", title, n);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, "    {%llu, %s, %g, %g, %g},\n", (unsigned long long)r[i].from,
                gv_adapt_level_str(r[i].level), r[i].cf, r[i].theta_min, r[i].cand);
}

/* Checks that the steps form exactly the expected runs. */
#define CHECK_RUNS(steps, n, expected)                                                             \
    check_runs_(__FILE__, __LINE__, steps, n, expected, GV_ARRAY_LEN(expected))
static inline void check_runs_(const char *file, int line, const struct step *s, size_t n,
                               const struct run *want, size_t n_want)
{
    struct run got[256];
    size_t n_got = to_runs(s, n, got, GV_ARRAY_LEN(got));
    bool ok = n_got == n_want;
    for (size_t i = 0; ok && i < n_want; i++)
        ok = got[i].from == want[i].from && got[i].level == want[i].level &&
             got[i].cf == want[i].cf && got[i].theta_min == want[i].theta_min &&
             got[i].cand == want[i].cand;
    if (ok) {
        gv_check_passed_++;
        return;
    }
    gv_check_failed_++;
    fprintf(stderr, "FAIL %s:%d: decision runs differ\n", file, line);
    print_runs("expected", want, n_want);
    print_runs("got", got, n_got > GV_ARRAY_LEN(got) ? GV_ARRAY_LEN(got) : n_got);
}

#define D GV_ADAPT_LEVEL_DENSE
#define F GV_ADAPT_LEVEL_FLOOR
#define C GV_ADAPT_LEVEL_CANDIDATE

/* ---------------------------------------------------------------- log capture */

struct logcap {
    int n;
    cJSON *lines[4096];
};

static inline void logcap_cb(const char *line, void *arg)
{
    struct logcap *c = arg;
    cJSON *j = cJSON_Parse(line);
    if (j == NULL) {
        GV_CHECK_FAIL_("decision log line is not JSON: %s", line);
        return;
    }
    if (c->n < (int)GV_ARRAY_LEN(c->lines))
        c->lines[c->n++] = j;
    else
        cJSON_Delete(j);
}

static inline void logcap_free(struct logcap *c)
{
    for (int i = 0; i < c->n; i++)
        cJSON_Delete(c->lines[i]);
    c->n = 0;
}

static inline const char *jstr(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "(missing)";
}

static inline double jnum(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

#endif /* GV_ADAPT_TEST_HARNESS_H */
