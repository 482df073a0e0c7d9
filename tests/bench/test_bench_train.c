/* test_bench_train.c: smoke test of `gravac-bench train`: two methods (dense and GraVAC), 30
 * iterations of a small MLP on synthetic data, 2 servers and 2 workers, on loopback or (argument
 * "netns") in shaped network namespaces (SKIP without the rights). Checks that the CSV and the
 * JSON are well-formed and consistent with the run (iterations, evaluations, bytes, CF
 * timeline), that the plots are images, and in namespaces that an interrupted bench stops
 * every process and removes every namespace. */
#include "bench_test.h"

#include <dirent.h>
#include <errno.h>

static const char *job[] = {"--",    "--dataset", "synthetic", "--synthetic-n", "2048", "--widths",
                            "64,32", "--batch",   "32",        "--lr",          "0.05"};

static int build_argv(char **argv, const char *bin, const char *net, const char *out,
                      const char *steps, bool iperf)
{
    static char prog[600];
    snprintf(prog, sizeof(prog), "%s/gravac-bench", bin);
    int n = 0;
    argv[n++] = prog;
    argv[n++] = "train";
    argv[n++] = "--net";
    argv[n++] = (char *)net;
    argv[n++] = "--servers";
    argv[n++] = "2";
    argv[n++] = "--workers";
    argv[n++] = "2";
    argv[n++] = "--rates";
    argv[n++] = strcmp(net, "netns") == 0 ? "1gbit" : "loopback";
    argv[n++] = "--methods";
    argv[n++] = "dense,gravac-exp";
    argv[n++] = "--gravac";
    argv[n++] = "--epsilon 0.3 --window 5";
    argv[n++] = "--repeats";
    argv[n++] = "1";
    argv[n++] = "--steps";
    argv[n++] = (char *)steps;
    argv[n++] = "--eval-every";
    argv[n++] = "10";
    argv[n++] = "--target";
    argv[n++] = "0.5";
    argv[n++] = "--also-targets";
    argv[n++] = "0.2,50";
    argv[n++] = "--iperf";
    argv[n++] = iperf ? "1" : "0";
    if (strcmp(net, "netns") == 0) { /* a bucket of its own (the default: 4 ms, >= 64 KiB) */
        argv[n++] = "--burst";
        argv[n++] = "32768";
    }
    argv[n++] = "--out";
    argv[n++] = (char *)out;
    for (size_t i = 0; i < sizeof(job) / sizeof(job[0]); i++)
        argv[n++] = (char *)job[i];
    argv[n] = NULL;
    return n;
}

static const cJSON *find_run(const cJSON *runs, const char *method)
{
    const cJSON *r;
    cJSON_ArrayForEach(r, runs)
    {
        const cJSON *m = cJSON_GetObjectItem(r, "method");
        if (cJSON_IsString(m) && strcmp(m->valuestring, method) == 0)
            return r;
    }
    return NULL;
}

static void check_run(const cJSON *r, const char *method)
{
    GV_CHECK_MSG(r != NULL, "no run of %s in the JSON", method);
    if (r == NULL)
        return;
    GV_CHECK_MSG(cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")), "%s: run failed: %s", method,
                 cJSON_GetStringValue(cJSON_GetObjectItem(r, "error")));
    GV_CHECK_EQ(bt_num(r, "iterations"), 30);
    const cJSON *ev = cJSON_GetObjectItem(r, "evaluations");
    GV_CHECK_EQ(cJSON_GetArraySize(ev), 3); /* after 10, 20 and 30 iterations */
    double prev_t = -1;
    const cJSON *e;
    int k = 0;
    cJSON_ArrayForEach(e, ev)
    {
        k++;
        GV_CHECK_EQ(cJSON_GetArrayItem(e, 0)->valuedouble, 10 * k);
        double t = cJSON_GetArrayItem(e, 1)->valuedouble;
        GV_CHECK(t > prev_t);
        prev_t = t;
        double acc = cJSON_GetArrayItem(e, 3)->valuedouble;
        GV_CHECK(acc > 0 && acc <= 1);
    }
    double fin = bt_num(r, "final_accuracy");
    GV_CHECK(fin > 0.3 && fin <= 1); /* 10 classes: chance is 0.1; this data is easy */
    const cJSON *ti = cJSON_GetObjectItem(r, "target_iter");
    GV_CHECK(cJSON_IsNull(ti) || (ti->valuedouble >= 10 && ti->valuedouble <= 30));
    if (cJSON_IsNumber(ti)) {
        GV_CHECK(bt_num(r, "up_bytes_to_target") > 0);
        GV_CHECK(bt_num(r, "up_bytes_to_target") <= bt_num(r, "up_bytes"));
        GV_CHECK(bt_num(r, "target_train_s") <= bt_num(r, "train_s"));
    }
    GV_CHECK(bt_num(r, "up_bytes") > 0 && bt_num(r, "down_bytes") > 0);
    GV_CHECK(bt_num(r, "samples_per_s") > 0);
    /* worker 0's split of an iteration: every part measured, together within the iteration */
    const cJSON *sp = cJSON_GetObjectItem(r, "worker0_ms_per_iter");
    double tot = bt_num(sp, "total"), cpu = bt_num(sp, "compute"),
           cmp = bt_num(sp, "compress_and_push"), wait = bt_num(sp, "wait_for_updates");
    GV_CHECK_NEAR(tot, 1e3 * bt_num(r, "train_s") / 30, 1e-9, 1e-9);
    GV_CHECK(cpu > 0 && cmp > 0 && wait > 0);
    GV_CHECK_MSG(cpu + cmp + wait <= tot, "%s: split %g + %g + %g ms > %g ms per iteration", method,
                 cpu, cmp, wait, tot);
    /* --also-targets 0.2,50: 50 (a percentage) is the target itself; 0.2 comes no later */
    const cJSON *at = cJSON_GetObjectItem(r, "also_targets");
    GV_CHECK_EQ(cJSON_GetArraySize(at), 2);
    const cJSON *lo = cJSON_GetArrayItem(at, 0), *same = cJSON_GetArrayItem(at, 1);
    if (lo != NULL && same != NULL) {
        GV_CHECK_NEAR(bt_num(lo, "target"), 0.2, 1e-12, 0);
        GV_CHECK_NEAR(bt_num(same, "target"), 0.5, 1e-12, 0);
        const cJSON *si = cJSON_GetObjectItem(same, "iter");
        GV_CHECK(cJSON_IsNull(si) == cJSON_IsNull(ti));
        if (cJSON_IsNumber(ti) && cJSON_IsNumber(si)) {
            GV_CHECK_EQ(si->valuedouble, ti->valuedouble);
            GV_CHECK_NEAR(bt_num(same, "train_s"), bt_num(r, "target_train_s"), 1e-6, 0);
            const cJSON *li = cJSON_GetObjectItem(lo, "iter");
            GV_CHECK(cJSON_IsNumber(li) && li->valuedouble <= ti->valuedouble);
        }
    }
    /* iterations per CF add up; the timeline starts at iteration 0 */
    const cJSON *h = cJSON_GetObjectItem(r, "iters_per_cf"), *x;
    double sum = 0;
    cJSON_ArrayForEach(x, h) sum += bt_num(x, "iterations");
    GV_CHECK_EQ(sum, 30);
    const cJSON *tl = cJSON_GetObjectItem(r, "cf_timeline");
    GV_CHECK(cJSON_GetArraySize(tl) >= 1);
    GV_CHECK_EQ(cJSON_GetArrayItem(cJSON_GetArrayItem(tl, 0), 0)->valuedouble, 0);
    GV_CHECK_EQ(cJSON_GetArraySize(tl), bt_num(r, "cf_changes") + 1);
}

static void check_outputs(const char *out, bool netns)
{
    char path[700];
    int rows = 0;
    snprintf(path, sizeof(path), "%s/train.csv", out);
    GV_CHECK_MSG(bt_test_csv(path, 28, &rows), "%s is not a 28-column CSV", path);
    GV_CHECK_EQ(rows, 3);
    snprintf(path, sizeof(path), "%s/train.json", out);
    char *s = bt_test_slurp(path);
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    free(s);
    GV_CHECK_MSG(j != NULL, "%s does not parse", path);
    if (j == NULL)
        return;
    const cJSON *setup = cJSON_GetObjectItem(j, "setup");
    GV_CHECK_EQ(bt_num(setup, "servers"), 2);
    GV_CHECK_EQ(bt_num(setup, "workers"), 2);
    GV_CHECK_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(setup, "network")),
                   netns ? "netns" : "loopback");
    GV_CHECK_EQ(bt_num(setup, "tbf_burst"), netns ? 32768 : 0);
    const cJSON *runs = cJSON_GetObjectItem(j, "runs");
    GV_CHECK_EQ(cJSON_GetArraySize(runs), 2);
    const cJSON *dense = find_run(runs, "dense"), *grv = find_run(runs, "gravac-exp");
    check_run(dense, "dense");
    check_run(grv, "gravac-exp");
    if (dense != NULL && grv != NULL) {
        GV_CHECK_EQ(bt_num(dense, "mean_cf"), 1);
        GV_CHECK_EQ(bt_num(cJSON_GetObjectItem(dense, "iters_per_level"), "dense"), 30);
        /* GraVAC: dense first (no gain known), then compressed: fewer bytes than dense */
        const cJSON *tl = cJSON_GetObjectItem(grv, "cf_timeline");
        GV_CHECK_EQ(cJSON_GetArrayItem(cJSON_GetArrayItem(tl, 0), 1)->valuedouble, 1);
        GV_CHECK(bt_num(grv, "cf_changes") >= 1);
        GV_CHECK(bt_num(grv, "mean_cf") > 5);
        GV_CHECK(bt_num(grv, "up_bytes") < 0.5 * bt_num(dense, "up_bytes"));
    }
    GV_CHECK_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(j, "summary")), 2);
    const cJSON *claim = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "claim"), 0);
    GV_CHECK_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(claim, "method")), "gravac-exp");
    cJSON_Delete(j);
    if (!bt_test_have("gnuplot")) {
        printf("gnuplot not installed: plots not checked\n");
        return;
    }
    static const char *plots[] = {"accuracy-time", "accuracy-iteration", "cf-iteration", "bytes"};
    for (size_t i = 0; i < sizeof(plots) / sizeof(plots[0]); i++) {
        snprintf(path, sizeof(path), "%s/plots/%s-%s.png", out, netns ? "1gbit" : "loopback",
                 plots[i]);
        GV_CHECK_MSG(bt_test_image(path), "%s is not a PNG image", path);
    }
}

/* Namespaces named after the bench process pid (gvbt<pid>-...) still present. */
static int leftover_namespaces(pid_t pid)
{
    char cmd[128], prefix[32];
    snprintf(cmd, sizeof(cmd), "ip netns list 2>/dev/null");
    snprintf(prefix, sizeof(prefix), "gvbt%d-", (int)pid);
    FILE *p = popen(cmd, "r");
    int n = 0;
    char line[256];
    while (p != NULL && fgets(line, sizeof(line), p) != NULL)
        n += strncmp(line, prefix, strlen(prefix)) == 0;
    if (p != NULL)
        pclose(p);
    return n;
}

/* Processes whose command line mentions dir (the run's servers and workers). */
static int leftover_processes(const char *dir)
{
    DIR *d = opendir("/proc");
    int n = 0;
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9' || atoi(e->d_name) == (int)getpid())
            continue;
        char path[300], buf[4096];
        snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(path, "rb");
        if (f == NULL)
            continue;
        size_t len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        for (size_t i = 0; i < len; i++)
            if (buf[i] == '\0')
                buf[i] = ' ';
        buf[len] = '\0';
        n += strstr(buf, dir) != NULL && strstr(buf, "gravac-") != NULL;
    }
    if (d != NULL)
        closedir(d);
    return n;
}

/* A long run interrupted after 4 s: exit status 130, nothing left behind. */
static void check_interrupt(const char *bin, const char *out)
{
    char *argv[64];
    build_argv(argv, bin, "netns", out, "1000000", false);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    sleep(4);
    GV_CHECK_MSG(leftover_processes(out) > 0, "the interrupted run had not started");
    kill(pid, SIGINT);
    int st = 0, rc = -1;
    for (int i = 0; i < 300; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid) {
            rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            break;
        }
        usleep(50000);
    }
    if (rc < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    GV_CHECK_EQ(rc, 130);
    GV_CHECK_EQ(leftover_namespaces(pid), 0);
    GV_CHECK_EQ(leftover_processes(out), 0);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: test_bench_train BIN_DIR loopback|netns\n");
        return 2;
    }
    bool netns = strcmp(argv[2], "netns") == 0;
    if (netns && geteuid() != 0)
        GV_SKIP("network namespaces need root");
    char out[64] = "/tmp/gv_test_bench_train_XXXXXX";
    if (mkdtemp(out) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    char log[128], cmd[160];
    snprintf(log, sizeof(log), "%s/bench.log", out);
    char *bargv[64];
    build_argv(bargv, argv[1], netns ? "netns" : "loopback", out, "30",
               netns && bt_test_have("iperf3"));
    int rc = bt_test_run(bargv, log, 50);
    if (netns && rc == 3) {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", out);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", out);
        GV_SKIP("cannot create network namespaces here (gravac-bench train exit status 3)");
    }
    GV_CHECK_EQ(rc, 0);
    if (rc != 0)
        bt_test_dump(log);
    check_outputs(out, netns);
    /* a bucket under a frame is refused, saying why, before anything starts */
    char log2[160];
    snprintf(log2, sizeof(log2), "%s/burst.log", out);
    char *b2[] = {bargv[0], "train", "--burst", "100", NULL};
    GV_CHECK_EQ(bt_test_run(b2, log2, 10), 2);
    char *s2 = bt_test_slurp(log2);
    GV_CHECK_MSG(s2 != NULL && strstr(s2, "--burst 100: a tbf bucket holds at least one frame"),
                 "no reason given for --burst 100");
    free(s2);
    if (netns) {
        char *s = bt_test_slurp(log);
        GV_CHECK_MSG(s != NULL && strstr(s, "in its own namespace") != NULL,
                     "the header does not say the processes ran in namespaces");
        GV_CHECK_MSG(s != NULL && strstr(s, "tbf bucket 32768 bytes") != NULL,
                     "the header does not give the bucket");
        if (bt_test_have("iperf3"))
            GV_CHECK_MSG(s != NULL && strstr(s, "iperf3 worker0 -> server0") != NULL,
                         "the shaped link was not measured");
        free(s);
        char out2[80];
        snprintf(out2, sizeof(out2), "%s/interrupted", out);
        check_interrupt(argv[1], out2);
    }
    if (gv_check_failed_ == 0) {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", out);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", out);
    } else {
        fprintf(stderr, "outputs kept in %s\n", out);
    }
    return gv_check_summary();
}
