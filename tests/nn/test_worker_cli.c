/* test_worker_cli.c: the gravac-worker program end to end (path in argv[1]): a standalone run
 * on synthetic data writes a JSON-lines metrics file with the expected records, --quiet keeps
 * progress off stdout, --target-accuracy stops early, the LSTM trains on a text file, and bad
 * options or missing files give a clear error and a non-zero exit instead of a crash. */
#include "check.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *bin;
static char dir[256];

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return calloc(1, 1);
    char *buf = calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Runs bin with args; returns the exit status (-1 if killed by a signal); out/err captured. */
static int run(const char *args, char **out, char **err)
{
    char cmd[4096], o[512], e[512];
    snprintf(o, sizeof(o), "%s/out.txt", dir);
    snprintf(e, sizeof(e), "%s/err.txt", dir);
    snprintf(cmd, sizeof(cmd), "'%s' %s > '%s' 2> '%s'", bin, args, o, e);
    int st = system(cmd);
    *out = slurp(o);
    *err = slurp(e);
    if (st == -1 || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

static void test_metrics(void)
{
    char args[1024], mpath[512], *out, *err;
    snprintf(mpath, sizeof(mpath), "%s/m.jsonl", dir);
    snprintf(args, sizeof(args),
             "--standalone --model softmax --dataset synthetic --synthetic-n 2048 --steps 40 "
             "--batch 32 --progress-every 10 --eval-every 20 --metrics-file '%s' --quiet",
             mpath);
    int rc = run(args, &out, &err);
    GV_CHECK_MSG(rc == 0, "rc %d, stderr: %s", rc, err);
    GV_CHECK(strstr(out, "summary:") != NULL);
    GV_CHECK_MSG(strstr(out, "step     10") == NULL, "--quiet printed progress: %s", out);
    char *m = slurp(mpath);
    int steps = 0, evals = 0, bad = 0;
    for (char *save = NULL, *line = strtok_r(m, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *type = cJSON_GetObjectItem(o, "type");
        if (o == NULL || !cJSON_IsString(type)) {
            bad++;
        } else if (strcmp(type->valuestring, "step") == 0) {
            steps++;
            bad += !cJSON_IsNumber(cJSON_GetObjectItem(o, "samples_per_s")) ||
                   !cJSON_IsNumber(cJSON_GetObjectItem(o, "loss")) ||
                   cJSON_GetObjectItem(o, "cf")->valuedouble != 1.0 ||
                   cJSON_GetObjectItem(o, "bytes_sent")->valuedouble != 0.0 ||
                   !cJSON_IsTrue(cJSON_GetObjectItem(o, "standalone"));
            bad += cJSON_GetObjectItem(o, "step")->valueint != 10 * steps;
        } else if (strcmp(type->valuestring, "eval") == 0) {
            evals++;
            const cJSON *acc = cJSON_GetObjectItem(o, "accuracy");
            bad += !cJSON_IsNumber(acc) || acc->valuedouble < 0 || acc->valuedouble > 1;
        }
        cJSON_Delete(o);
    }
    GV_CHECK_EQ(bad, 0);
    GV_CHECK_EQ(steps, 4);
    GV_CHECK_EQ(evals, 2);
    free(m), free(out), free(err);

    /* without --quiet: a progress line with loss, accuracy, samples/s, CF and bytes sent */
    rc = run("--standalone --model mlp --widths 32 --dataset synthetic --synthetic-n 1024 "
             "--steps 20 --batch 32 --progress-every 10",
             &out, &err);
    GV_CHECK_EQ(rc, 0);
    GV_CHECK_MSG(strstr(out, "step     10") && strstr(out, "samples/s") && strstr(out, "CF 1.0") &&
                     strstr(out, "sent 0 B") && strstr(out, "eval step"),
                 "progress: %s", out);
    free(out), free(err);
}

static void test_target(void)
{
    char *out, *err;
    int rc = run("--standalone --model mlp --widths 64 --dataset synthetic --steps 2000 "
                 "--batch 32 --eval-every 20 --target-accuracy 80 --quiet",
                 &out, &err);
    GV_CHECK_EQ(rc, 0);
    const char *p = strstr(out, "target 80.00% reached after ");
    GV_CHECK_MSG(p != NULL, "no target line: %s", out);
    if (p != NULL)
        GV_CHECK(atoi(p + strlen("target 80.00% reached after ")) < 2000);
    free(out), free(err);
}

static void test_lstm(void)
{
    char path[512], args[1024], *out, *err;
    snprintf(path, sizeof(path), "%s/corpus.txt", dir);
    FILE *f = fopen(path, "w");
    for (int i = 0; f != NULL && i < 200; i++)
        fprintf(f, "line %d of a small corpus for the language model.\n", i);
    if (f != NULL)
        fclose(f);
    snprintf(args, sizeof(args),
             "--standalone --model lstm --dataset text --text '%s' --seq-len 16 --hidden 32 "
             "--embed 8 --batch 8 --steps 30 --lr 0.5 --progress-every 10",
             path);
    int rc = run(args, &out, &err);
    GV_CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    GV_CHECK(strstr(out, "perplexity") != NULL && strstr(out, "ppl ") != NULL);
    free(out), free(err);
}

static void expect_fail(const char *args, int want_rc, const char *want_err)
{
    char *out, *err;
    int rc = run(args, &out, &err);
    GV_CHECK_MSG(rc == want_rc, "%s: rc %d, want %d", args, rc, want_rc);
    GV_CHECK_MSG(strstr(err, want_err) != NULL, "%s: stderr lacks '%s': %s", args, want_err, err);
    free(out), free(err);
}

static void test_errors(void)
{
    expect_fail("--model mlp", 2, "--standalone");
    expect_fail("--standalone --model resnet", 2, "--model");
    expect_fail("--standalone --batch 0", 2, "--batch");
    expect_fail("--standalone --lr-schedule wiggle", 2, "bad schedule");
    expect_fail("--standalone --model lstm --dataset fashion-mnist", 2, "text");
    expect_fail("--standalone --dataset idx --train-images /nonexistent/x-images "
                "--train-labels /nonexistent/x-labels --test-images a --test-labels b",
                1, "/nonexistent/x-images: cannot open");
    expect_fail("--standalone --dataset cifar10 --data-dir /nonexistent/cifar", 1,
                "/nonexistent/cifar/data_batch_1.bin");
    expect_fail("--standalone --dataset text --model lstm --text /nonexistent/t.txt", 1,
                "/nonexistent/t.txt");
    expect_fail("--standalone --dataset mnist", 1, "--data-dir");
    char *out, *err;
    /* cuda: runs where a GPU exists, otherwise a clean error; never a crash */
    int rc = run("--standalone --model softmax --dataset synthetic --steps 5 --device cuda --quiet",
                 &out, &err);
    GV_CHECK_MSG(rc == 0 || (rc == 1 && (strstr(err, "cuda") || strstr(err, "GPU"))),
                 "--device cuda: rc %d: %s", rc, err);
    free(out), free(err);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_worker_cli PATH_TO_GRAVAC_WORKER\n");
        return 2;
    }
    bin = argv[1];
    snprintf(dir, sizeof(dir), "/tmp/gv_worker_cli_XXXXXX");
    if (mkdtemp(dir) == NULL)
        return 1;
    test_metrics();
    test_target();
    test_lstm();
    test_errors();
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return gv_check_summary();
}
