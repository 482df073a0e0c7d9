/* test_bench_scaling.c: smoke test of `gravac-bench scaling`: two batch sizes, two trials
 * each plus one refining trial (and at the second, the first's best transferred), an easy goal,
 * on Fashion-MNIST. Checks the CSV and JSON are well-formed and consistent: every batch size
 * reached the goal, its steps are the fewest of its reached trials, the larger batch needs fewer
 * steps, the transferred trials, the perfect-scaling line is anchored at the smallest batch,
 * and the slope and regime follow the documented rule; and the plot. Then the stalled and the
 * slow-large-batch rules on one trial each. */
#include "bench_test.h"

#include <math.h>

static const char *regime_of(double s)
{
    return s >= 0.8   ? "perfect scaling"
           : s >= 0.2 ? "diminishing returns"
                      : "maximal data parallelism";
}

static void check_json(const char *out)
{
    char path[700];
    snprintf(path, sizeof(path), "%s/scaling.json", out);
    char *s = bt_test_slurp(path);
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    free(s);
    GV_CHECK_MSG(j != NULL, "%s does not parse", path);
    if (j == NULL)
        return;
    GV_CHECK_NEAR(bt_num(cJSON_GetObjectItem(j, "setup"), "goal_validation_error"), 0.45, 0, 0);
    const cJSON *trials = cJSON_GetObjectItem(j, "trials"), *b = cJSON_GetObjectItem(j, "batches");
    GV_CHECK_EQ(cJSON_GetArraySize(trials), 8); /* 2 + 1 at B 256; 2 + 2 transferred + 1 */
    GV_CHECK_EQ(cJSON_GetArraySize(b), 2);
    if (cJSON_GetArraySize(b) != 2) {
        cJSON_Delete(j);
        return;
    }
    const cJSON *b0 = cJSON_GetArrayItem(b, 0), *b1 = cJSON_GetArrayItem(b, 1);
    double s0 = bt_num(b0, "steps"), s1 = bt_num(b1, "steps");
    GV_CHECK_MSG(s0 > 0 && s1 > 0, "a batch size did not reach the goal (%g, %g)", s0, s1);
    GV_CHECK_MSG(s1 < s0, "B 2048 needed %g steps, B 256 %g", s1, s0);
    GV_CHECK_EQ(bt_num(b0, "perfect_scaling_steps"), s0);
    GV_CHECK_NEAR(bt_num(b1, "perfect_scaling_steps"), s0 * 256 / 2048, 1e-9, 0);
    double slope = bt_num(b0, "slope_to_next");
    GV_CHECK_NEAR(slope, log2(s0 / s1) / 3.0, 1e-9, 1e-9);
    GV_CHECK_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(b0, "regime_to_next")),
                   regime_of(slope));
    /* one segment: its regime spans B 256 .. 2048, the other two are absent */
    const cJSON *rg = cJSON_GetObjectItem(j, "regimes");
    static const char *names[] = {"perfect scaling", "diminishing returns",
                                  "maximal data parallelism"};
    for (int r = 0; r < 3; r++) {
        const cJSON *span = cJSON_GetObjectItem(rg, names[r]);
        if (strcmp(names[r], regime_of(slope)) == 0) {
            const cJSON *lo = cJSON_GetArrayItem(span, 0), *hi = cJSON_GetArrayItem(span, 1);
            GV_CHECK_MSG(cJSON_GetArraySize(span) == 2 && cJSON_IsNumber(lo) && cJSON_IsNumber(hi),
                         "no span for %s", names[r]);
            if (cJSON_IsNumber(lo) && cJSON_IsNumber(hi)) {
                GV_CHECK_EQ(lo->valuedouble, 256);
                GV_CHECK_EQ(hi->valuedouble, 2048);
            }
        } else {
            GV_CHECK_MSG(cJSON_IsNull(span), "%s present", names[r]);
        }
    }
    /* B 2048 also tries B 256's best point and twice its lr (capped at the range's 0.3) */
    int transferred = 0;
    const cJSON *t0;
    cJSON_ArrayForEach(t0, trials)
    {
        if (bt_num(t0, "stage") != 0)
            continue;
        transferred++;
        GV_CHECK_EQ(bt_num(t0, "batch"), 2048);
        GV_CHECK_NEAR(bt_num(t0, "momentum"), bt_num(b0, "momentum"), 1e-12, 0);
        double want = transferred == 1 ? bt_num(b0, "lr") : fmin(0.3, 2 * bt_num(b0, "lr"));
        GV_CHECK_NEAR(bt_num(t0, "lr"), want, 0, 1e-9);
    }
    GV_CHECK_EQ(transferred, 2);
    /* per batch size: its steps are the fewest among its reached trials */
    for (int k = 0; k < 2; k++) {
        const cJSON *bb = cJSON_GetArrayItem(b, k), *t;
        double fewest = INFINITY;
        int reached = 0;
        cJSON_ArrayForEach(t, trials)
        {
            const char *oc = cJSON_GetStringValue(cJSON_GetObjectItem(t, "outcome"));
            GV_CHECK(oc != NULL && (strcmp(oc, "reached") == 0 || strcmp(oc, "pruned") == 0 ||
                                    strcmp(oc, "not-reached") == 0 || strcmp(oc, "diverged") == 0 ||
                                    strcmp(oc, "stalled") == 0));
            if (bt_num(t, "batch") != bt_num(bb, "batch") || oc == NULL ||
                strcmp(oc, "reached") != 0)
                continue;
            reached++;
            fewest = fmin(fewest, bt_num(t, "steps"));
            GV_CHECK(bt_num(t, "best_val_error") < 0.45);
        }
        GV_CHECK(reached >= 1);
        GV_CHECK_EQ(fewest, bt_num(bb, "steps"));
    }
    cJSON_Delete(j);
}

/* One trial that blows up and ends at chance (B 512, lr 0.3, momentum 0.897; its error was
 * 0.53 before): stopped as stalled at the first evaluation after one epoch (115.2 steps), not
 * run to its 2-epoch budget as a not-reached trial. */
static void check_stalled(const char *prog, const char *dir)
{
    char out[600], log[700], path[700];
    snprintf(out, sizeof(out), "%s/stalled", dir);
    snprintf(log, sizeof(log), "%s/stalled.log", dir);
    char *argv[] = {(char *)prog,
                    "scaling",
                    "--batches",
                    "512",
                    "--trials",
                    "1",
                    "--refine",
                    "0",
                    "--goal-error",
                    "0.05",
                    "--max-epochs",
                    "2",
                    "--val",
                    "1000",
                    "--lr-range",
                    "0.3,0.301",
                    "--om-range",
                    "0.1,0.11",
                    "--no-plots",
                    "--out",
                    out,
                    NULL};
    int rc = bt_test_run(argv, log, 30);
    GV_CHECK_EQ(rc, 0);
    snprintf(path, sizeof(path), "%s/scaling.json", out);
    char *s = bt_test_slurp(path);
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    free(s);
    const cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "trials"), 0);
    GV_CHECK_MSG(t != NULL, "%s: no trial", path);
    if (t != NULL) {
        GV_CHECK_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(t, "outcome")), "stalled");
        double steps = bt_num(t, "steps");
        GV_CHECK_MSG(steps >= 116 && steps < 231, "stalled after %g steps", steps);
        GV_CHECK(bt_num(t, "best_val_error") < 0.85);
    }
    cJSON_Delete(j);
}

/* B 8192 with a learning rate far too small (lr 0.0016, momentum 0.68): an epoch is 7.2 steps,
 * and the error is still near chance after it; that is slow, not dead: the trial runs to its
 * 2-epoch budget (15 steps). No trial reaches the goal, so the refining trial is placed around
 * the lowest validation error, and runs too. */
static void check_slow_large_batch(const char *prog, const char *dir)
{
    char out[600], log[700], path[700];
    snprintf(out, sizeof(out), "%s/slow", dir);
    snprintf(log, sizeof(log), "%s/slow.log", dir);
    char *argv[] = {(char *)prog,
                    "scaling",
                    "--batches",
                    "8192",
                    "--trials",
                    "1",
                    "--refine",
                    "1",
                    "--goal-error",
                    "0.05",
                    "--max-epochs",
                    "2",
                    "--val",
                    "1000",
                    "--lr-range",
                    "0.0016,0.00161",
                    "--om-range",
                    "0.32,0.33",
                    "--no-plots",
                    "--out",
                    out,
                    NULL};
    int rc = bt_test_run(argv, log, 30);
    GV_CHECK_EQ(rc, 0);
    snprintf(path, sizeof(path), "%s/scaling.json", out);
    char *s = bt_test_slurp(path);
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    free(s);
    const cJSON *ts = cJSON_GetObjectItem(j, "trials");
    GV_CHECK_EQ(cJSON_GetArraySize(ts), 2);
    for (int i = 0; i < cJSON_GetArraySize(ts); i++) {
        const cJSON *t = cJSON_GetArrayItem(ts, i);
        GV_CHECK_EQ(bt_num(t, "stage"), i + 1);
        GV_CHECK_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(t, "outcome")), "not-reached");
        GV_CHECK_EQ(bt_num(t, "steps"), 15);
        GV_CHECK(bt_num(t, "lr") >= 0.0016 && bt_num(t, "lr") <= 0.00161);
    }
    cJSON_Delete(j);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_bench_scaling BIN_DIR\n");
        return 2;
    }
    char out[64] = "/tmp/gv_test_bench_scaling_XXXXXX";
    if (mkdtemp(out) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    char prog[600], log[128];
    snprintf(prog, sizeof(prog), "%s/gravac-bench", argv[1]);
    snprintf(log, sizeof(log), "%s/bench.log", out);
    char *bargv[] = {prog,
                     "scaling",
                     "--batches",
                     "256,2048",
                     "--trials",
                     "2",
                     "--refine",
                     "1",
                     "--goal-error",
                     "0.45",
                     "--max-epochs",
                     "3",
                     "--val",
                     "1000",
                     "--eval-samples",
                     "4096",
                     "--lr-range",
                     "0.01,0.3",
                     "--om-range",
                     "0.05,0.3",
                     "--out",
                     out,
                     NULL};
    int rc = bt_test_run(bargv, log, 50);
    GV_CHECK_EQ(rc, 0);
    if (rc != 0)
        bt_test_dump(log);
    char path[700];
    int rows = 0;
    snprintf(path, sizeof(path), "%s/scaling.csv", out);
    GV_CHECK_MSG(bt_test_csv(path, 10, &rows), "%s is not a 10-column CSV", path);
    GV_CHECK_EQ(rows, 9);
    check_json(out);
    check_stalled(prog, out);
    check_slow_large_batch(prog, out);
    char *s = bt_test_slurp(log);
    GV_CHECK_MSG(s != NULL && strstr(s, "regimes (rule:") != NULL, "no regime report");
    free(s);
    if (bt_test_have("gnuplot")) {
        snprintf(path, sizeof(path), "%s/scaling.png", out);
        GV_CHECK_MSG(bt_test_image(path), "%s is not a PNG image", path);
    }
    if (gv_check_failed_ == 0) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", out);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", out);
    } else {
        fprintf(stderr, "outputs kept in %s\n", out);
    }
    return gv_check_summary();
}
