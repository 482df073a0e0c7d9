/* test_e2e_robust.c: issue 18, a running job probed the way a hostile network or an unlucky
 * operator would, with the real programs on loopback; one scenario per ctest entry (argv[2]):
 *   churn       20 000 connect-and-close cycles at server 0 during training (4 000 under
 *               ASan): no peer record is left behind (gravac_connections_pending back to 0),
 *               the server's RSS and its CPU time per iteration stay where they were, the
 *               log lines about the cycles are rate-limited, training goes on
 *   fdlimit     server 0's descriptor limit lowered during training and its last descriptors
 *               taken by idle connections: accept backs off (a handful of lines, no busy
 *               loop: CPU per iteration as before), training goes on, and once the idle
 *               connections are gone a new connection is served again
 *   late_server server 1 started 3 s after the workers and server 0 (more than the handshake
 *               timeout, 1 s here), then server 0 started last: both jobs complete (exit 0
 *               everywhere) with replicas equal to the servers' shards
 *   early_bye   a worker with other --steps is refused at the handshake (the fingerprint);
 *               worker 1 leaving early (its own early stop) is a dead-worker event: abort (every
 *               process exits 1, naming it) or continue (the job finishes without it); worker 0
 *               stopping at --target-accuracy ends the job well for everyone (exit 0); and
 *               worker 1 killed as worker 0 stops: every surviving process reports the same end
 *   ckpt_fail   server 1's checkpoint directory vanishes during training: under the default
 *               policy the checkpoint is committed nowhere and the job stops (every process
 *               exits 4, server 0 naming the cause and the iteration it resumes from); with the
 *               directory back, a restart resumes from the last committed checkpoint and
 *               finishes. Under --checkpoint-failure-policy continue the job trains to the end,
 *               but its final checkpoint fails too: every process exits 4. An unusable
 *               --checkpoint-dir is refused at start by a server and a worker (exit 2)
 *   operators   options an unlucky operator gives: --bind HOST:0 without a rendezvous
 *               directory, a server whose own --servers entry does not resolve (both refused,
 *               exit 2, naming the option); a worker whose server's name does not resolve (it
 *               retries until --connect-timeout, then says so); a worker pointed at a program
 *               that is not a gravac server, silent or answering garbage (an accurate message,
 *               not "waiting for the other workers")
 * Bounds on RSS and CPU are checked in the release build only (ASan's quarantine and shadow
 * memory make both meaningless); the rest everywhere. */
#include "ops_run.h"

#include <poll.h>
#include <pthread.h>
#include <sys/resource.h>

#ifdef GV_E2E_SANITIZED
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

/* ---------------------------------------------------------------- a process from outside */

/* A /proc file (its size reads as 0, so e2e_slurp cannot), NUL-terminated; NULL if gone. */
static char *proc_read(pid_t pid, const char *what)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, what);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    char *buf = calloc(1, 8192);
    size_t n = buf ? fread(buf, 1, 8191, f) : 0;
    fclose(f);
    if (buf != NULL)
        buf[n] = '\0';
    return buf;
}

/* VmRSS of pid in KiB (-1: gone). */
static long proc_rss_kb(pid_t pid)
{
    char *s = proc_read(pid, "status");
    const char *p = s ? strstr(s, "VmRSS:") : NULL;
    long kb = p ? strtol(p + 6, NULL, 10) : -1;
    free(s);
    return kb;
}

/* CPU seconds pid's main thread (the server's event loop) has used, in nanoseconds from
 * schedstat where the kernel has it; else user + system of the process in clock ticks. -1:
 * gone. */
static double proc_cpu_s(pid_t pid)
{
    char *ss = proc_read(pid, "schedstat");
    unsigned long long ns = 0;
    bool got = ss != NULL && sscanf(ss, "%llu", &ns) == 1;
    free(ss);
    if (got)
        return (double)ns * 1e-9;
    char *s = proc_read(pid, "stat");
    /* fields after the command (which may hold blanks) start after the last ')' */
    const char *p = s ? strrchr(s, ')') : NULL;
    double cpu = -1;
    if (p != NULL) {
        unsigned long long ut = 0, st = 0;
        /* state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
        if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
            cpu = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    }
    free(s);
    return cpu;
}

/* Open descriptors of pid. */
static int proc_fds(pid_t pid)
{
    char cmd[80];
    snprintf(cmd, sizeof(cmd), "ls /proc/%d/fd 2>/dev/null | wc -l", (int)pid);
    FILE *f = popen(cmd, "r");
    int n = -1;
    if (f != NULL) {
        if (fscanf(f, "%d", &n) != 1)
            n = -1;
        pclose(f);
    }
    return n;
}

/* How many times s occurs in the file. */
static int file_count(const char *path, const char *s)
{
    char *b = e2e_slurp(path, NULL);
    int n = 0;
    for (const char *p = b; p != NULL && (p = strstr(p, s)) != NULL; p += strlen(s))
        n++;
    free(b);
    return n;
}

/* CPU seconds of server `pid` per iteration of worker 0 over `secs` seconds of training. */
static double cpu_per_iter(struct run *r, pid_t pid, double secs, long *iters_p)
{
    double c0 = proc_cpu_s(pid);
    long i0 = last_iter(r, 0);
    usleep((useconds_t)(secs * 1e6));
    double c1 = proc_cpu_s(pid);
    long i1 = last_iter(r, 0);
    *iters_p = i1 - i0;
    return i1 > i0 ? (c1 - c0) / (double)(i1 - i0) : 1e9;
}

static double scrape(int port, const char *series)
{
    int code = 0;
    char *t = curl_get(port, &code);
    double v = code == 200 ? sample(t, series) : NAN;
    free(t);
    return v;
}

/* ---------------------------------------------------------------- churn */

/* n connect-and-close cycles (a reset each: no TIME_WAIT piles up on this side). */
static int churn(int port, int n)
{
    int done = 0;
    for (int i = 0; i < n; i++) {
        int fd = connect_port(port);
        if (fd < 0)
            continue;
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        close(fd);
        done++;
    }
    return done;
}

static void scenario_churn(void)
{
    if (system("curl --version > /dev/null 2>&1") != 0)
        GV_SKIP("curl is not installed");
    const int cycles = SANITIZED ? 4000 : 20000;
    struct run r = {.dir = mkdir_tmp("churn"),
                    .tag = "a",
                    .S = 2,
                    .W = 2,
                    .steps = 100000000,
                    .server_extra = "--metrics-addr 127.0.0.1:0"};
    GV_CHECK(r.dir != NULL);
    run_start(&r);
    struct e2e_proc *s0 = proc(&r, true, 0);
    int port = port_of(r.dir, "a", 0), mport = metrics_port(s0->log);
    GV_CHECK(port > 0 && mport > 0);
    GV_CHECK(wait_iter(&r, 0, 300, 30));
    long it_before, it_after;
    double cpu_before = cpu_per_iter(&r, s0->pid, 2.0, &it_before);
    long rss_before = proc_rss_kb(s0->pid);
    uint64_t t0 = gv_now_ns();
    int done = churn(port, cycles);
    double secs = (double)(gv_now_ns() - t0) * 1e-9;
    long it_churned = last_iter(&r, 0);
    /* the last connections are accepted and their resets seen (the listen queue drains at the
     * loaded server's pace): every record goes */
    double pending = scrape(mport, "gravac_connections_pending");
    for (int k = 0; k < 50 && !(pending == 0); k++) {
        usleep(200000);
        pending = scrape(mport, "gravac_connections_pending");
    }
    long rss_after = proc_rss_kb(s0->pid);
    double cpu_after = cpu_per_iter(&r, s0->pid, 2.0, &it_after);
    fprintf(stderr,
            "%d connect-and-close cycles in %.2f s; server 0: RSS %ld -> %ld KiB, CPU per "
            "iteration %.3f -> %.3f ms (%ld, %ld iterations in 2 s), %g connections pending\n",
            done, secs, rss_before, rss_after, cpu_before * 1e3, cpu_after * 1e3, it_before,
            it_after, pending);
    GV_CHECK_MSG(done >= cycles * 9 / 10, "only %d of %d cycles connected", done, cycles);
    /* nothing is kept for a connection that is gone */
    GV_CHECK_MSG(pending == 0, "%g connection records pending after the churn", pending);
    /* training went on, during and after */
    GV_CHECK(it_after > 0 && last_iter(&r, 0) > it_churned);
    GV_CHECK(!s0->done && kill(s0->pid, 0) == 0);
    /* the lines about the cycles are rate-limited: at most 10 per 10 s of each kind */
    int lines = file_count(s0->log, "left before joining");
    GV_CHECK_MSG(lines <= 10 * (int)(secs / 10.0 + 2), "%d lines about the cycles", lines);
    if (!SANITIZED) {
        GV_CHECK_MSG(rss_after - rss_before < 16 * 1024, "RSS grew by %ld KiB",
                     rss_after - rss_before);
        GV_CHECK_MSG(cpu_after < 3 * cpu_before + 0.0001,
                     "CPU per iteration went from %.3f to %.3f ms", cpu_before * 1e3,
                     cpu_after * 1e3);
    }
    run_kill(&r);
    if (gv_check_failed_ != 0)
        dump_all(&r);
    else
        e2e_rmdir(r.dir);
}

/* ---------------------------------------------------------------- descriptors */

static void scenario_fdlimit(void)
{
    struct run r = {.dir = mkdir_tmp("fdlimit"),
                    .tag = "a",
                    .S = 1,
                    .W = 2,
                    .steps = 100000000,
                    .extra = "--handshake-timeout 3s"};
    GV_CHECK(r.dir != NULL);
    run_start(&r);
    struct e2e_proc *s0 = proc(&r, true, 0);
    int port = port_of(r.dir, "a", 0);
    GV_CHECK(port > 0);
    GV_CHECK(wait_iter(&r, 0, 300, 30));
    long it_before, it_during;
    double cpu_before = cpu_per_iter(&r, s0->pid, 1.5, &it_before);
    /* 8 descriptors left to the server, then 40 idle connections: the first take them, the
     * others wait in the listen queue while accept fails with EMFILE */
    int open_fds = proc_fds(s0->pid);
    struct rlimit old, lim;
    GV_CHECK(open_fds > 0 && prlimit(s0->pid, RLIMIT_NOFILE, NULL, &old) == 0);
    lim = (struct rlimit){.rlim_cur = (rlim_t)open_fds + 8, .rlim_max = old.rlim_max};
    GV_CHECK(prlimit(s0->pid, RLIMIT_NOFILE, &lim, NULL) == 0);
    int idle[40], n_idle = 0;
    for (int i = 0; i < 40; i++)
        if ((idle[n_idle] = connect_port(port)) >= 0)
            n_idle++;
    GV_CHECK_EQ(n_idle, 40);
    double cpu_during = cpu_per_iter(&r, s0->pid, 2.0, &it_during);
    int emfile = file_count(s0->log, "Too many open files");
    fprintf(stderr,
            "server 0 at its descriptor limit (%d open + 8): CPU per iteration %.3f -> %.3f ms "
            "(%ld, %ld iterations), %d lines about EMFILE\n",
            open_fds, cpu_before * 1e3, cpu_during * 1e3, it_before, it_during, emfile);
    GV_CHECK_MSG(emfile >= 1 && emfile <= 10, "%d lines about EMFILE", emfile);
    GV_CHECK_MSG(it_during > 0, "training stopped at the descriptor limit");
    if (!SANITIZED)
        GV_CHECK_MSG(cpu_during < 3 * cpu_before + 0.0001,
                     "CPU per iteration went from %.3f to %.3f ms", cpu_before * 1e3,
                     cpu_during * 1e3);
    /* the idle connections leave (or are closed at the handshake timeout); the limit is
     * restored: a new connection is served again, and training has gone on */
    for (int i = 0; i < n_idle; i++)
        close(idle[i]);
    GV_CHECK(prlimit(s0->pid, RLIMIT_NOFILE, &old, NULL) == 0);
    static const char garbage[64] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    bool served = false;
    for (int k = 0; k < 50 && !served; k++) {
        served = send_expect_close(port, garbage, sizeof(garbage), false);
        if (!served)
            usleep(100000);
    }
    GV_CHECK_MSG(served, "no connection was served after the descriptors came back");
    long it_end = last_iter(&r, 0);
    GV_CHECK(wait_iter(&r, 0, it_end + 100, 20));
    run_kill(&r);
    if (gv_check_failed_ != 0)
        dump_all(&r);
    else
        e2e_rmdir(r.dir);
}

/* ---------------------------------------------------------------- start order */

static void start_late(int late, const char *tag)
{
    struct run r = {.dir = mkdir_tmp(tag),
                    .tag = "a",
                    .S = 2,
                    .W = 2,
                    .steps = 300,
                    .extra = "--handshake-timeout 1s --connect-timeout 25s"};
    GV_CHECK(r.dir != NULL);
    run_start_but(&r, late);
    usleep(3000000); /* three handshake timeouts */
    for (int i = 0; i < r.j.n; i++) {
        struct e2e_proc *p = &r.j.p[i];
        if (i != late && waitpid(p->pid, &p->status, WNOHANG) == p->pid) {
            p->done = true;
            GV_CHECK_MSG(0, "%s exited (status %d) while server %d was not up yet", p->name,
                         e2e_exit_code(p), late);
        }
    }
    run_spawn(&r, true, late);
    GV_CHECK_EQ(e2e_wait(&r.j, 40), r.j.n);
    for (int w = 0; w < 2; w++)
        GV_CHECK_EQ(last_iter(&r, w), 299);
    replicas_equal(&r, NULL);
    run_kill(&r);
    if (gv_check_failed_ != 0)
        dump_all(&r);
    else
        e2e_rmdir(r.dir);
}

static void scenario_late_server(void)
{
    start_late(1, "late1");
    start_late(0, "late0");
}

/* ---------------------------------------------------------------- the end of a job */

static int codes_of(struct run *r, int skip, char *out, size_t len)
{
    size_t off = 0;
    int first = -2, same = 1;
    for (int i = 0; i < r->j.n; i++) {
        if (i == skip)
            continue;
        int c = e2e_exit_code(&r->j.p[i]);
        off +=
            (size_t)snprintf(out + off, len - off, "%s %s=%d", off ? "," : "", r->j.p[i].name, c);
        if (first == -2)
            first = c;
        same &= c == first;
    }
    return same ? first : -1;
}

static void scenario_early_bye(void)
{
    char codes[400];
    /* a. another --steps: refused when it joins, not a success after its 100 iterations */
    struct run a = {.dir = mkdir_tmp("steps"), .tag = "a", .S = 2, .W = 2, .steps = 3000};
    a.rank_extra[0][1] = "--steps 100";
    run_start(&a);
    e2e_wait(&a.j, 40);
    codes_of(&a, -1, codes, sizeof(codes));
    fprintf(stderr, "worker 1 with --steps 100: %s\n", codes);
    GV_CHECK_EQ(e2e_exit_code(proc(&a, false, 1)), 2);
    GV_CHECK(file_has(proc(&a, false, 1)->log, "the number of iterations"));
    for (int i = 0; i < a.j.n; i++)
        GV_CHECK_MSG(e2e_exit_code(&a.j.p[i]) != 0, "%s exited 0", a.j.p[i].name);
    GV_CHECK(last_iter(&a, 0) < 100);
    if (gv_check_failed_ == 0)
        e2e_rmdir(a.dir);
    else
        dump_all(&a);

    /* b. worker 1 stops by itself at iteration 50 (its own target): abort, then continue */
    for (int cont = 0; cont < 2; cont++) {
        struct run b = {.dir = mkdir_tmp(cont ? "leavec" : "leave"),
                        .tag = "a",
                        .S = 2,
                        .W = 2,
                        .steps = 1500,
                        .extra = cont ? "--dead-worker-policy continue" : NULL};
        b.rank_extra[0][1] = "--all-progress --target-accuracy 0.01 --eval-every 50";
        run_start(&b);
        e2e_wait(&b.j, 60);
        codes_of(&b, -1, codes, sizeof(codes));
        fprintf(stderr, "worker 1 leaving early (policy %s): %s\n", cont ? "continue" : "abort",
                codes);
        GV_CHECK(file_has(proc(&b, true, 0)->log, "worker 1 (") &&
                 file_has(proc(&b, true, 0)->log, "left the job: it said BYE after 50 of 1500"));
        GV_CHECK_EQ(e2e_exit_code(proc(&b, false, 1)), 1);
        for (int i = 0; i < b.j.n; i++)
            if (i != b.S + 1)
                GV_CHECK_MSG(e2e_exit_code(&b.j.p[i]) == (cont ? 0 : 1), "%s exit %d",
                             b.j.p[i].name, e2e_exit_code(&b.j.p[i]));
        if (cont) {
            GV_CHECK_EQ(last_iter(&b, 0), 1499);
            GV_CHECK(file_has(proc(&b, true, 0)->log, "workers left 1 of 2"));
        } else {
            GV_CHECK(file_has(proc(&b, false, 0)->log, "left the job"));
        }
        if (gv_check_failed_ == 0)
            e2e_rmdir(b.dir);
        else
            dump_all(&b);
    }

    /* c. worker 0 reaches its target at iteration 50: the job ends well everywhere */
    struct run c = {.dir = mkdir_tmp("target"), .tag = "a", .S = 2, .W = 2, .steps = 1500};
    c.rank_extra[0][0] = "--target-accuracy 0.01 --eval-every 50";
    run_start(&c);
    GV_CHECK_EQ(e2e_wait(&c.j, 60), c.j.n);
    GV_CHECK(file_has(proc(&c, true, 0)->log, "worker 0 stopped it (its target reached)"));
    GV_CHECK(file_has(proc(&c, true, 1)->log, "the job ends at iteration 50"));
    GV_CHECK_EQ(last_iter(&c, 0), 49);
    GV_CHECK(last_iter(&c, 1) == 49 || last_iter(&c, 1) == 50);
    if (gv_check_failed_ == 0)
        e2e_rmdir(c.dir);
    else
        dump_all(&c);

    /* d. worker 1 killed just as worker 0 stops: whichever server 0 sees first decides, and
     *    every surviving process reports that same end */
    for (int k = 0; k < 2; k++) {
        struct run d = {.dir = mkdir_tmp("race"), .tag = "a", .S = 2, .W = 2, .steps = 100000};
        d.rank_extra[0][0] = "--target-accuracy 0.01 --eval-every 400";
        run_start(&d);
        GV_CHECK(wait_iter(&d, 0, 398 - k, 40));
        kill(proc(&d, false, 1)->pid, SIGKILL);
        e2e_wait(&d.j, 40);
        int same = codes_of(&d, d.S + 1, codes, sizeof(codes));
        fprintf(stderr, "worker 1 killed at worker 0's iteration %ld as it stops: %s\n",
                last_iter(&d, 0), codes);
        GV_CHECK_MSG(same == 0 || same == 1, "the processes disagree: %s", codes);
        if (gv_check_failed_ == 0)
            e2e_rmdir(d.dir);
        else
            dump_all(&d);
    }
}

/* ---------------------------------------------------------------- checkpoints */

static bool exists(const char *dir, const char *name)
{
    char path[900];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* The checkpoint files of shard/worker `idx` in dir, as "iteration[p]" words (p: pending). */
static void ckpt_list(const char *dir, int idx, char *out, size_t len)
{
    char cmd[1000];
    snprintf(cmd, sizeof(cmd),
             "ls '%s' 2>/dev/null | sed -n 's/^shard%04d-iter0*\\([0-9][0-9]*\\)\\.gvckpt/\\1/p' "
             "| tr '\\n' ' '",
             dir, idx);
    FILE *f = popen(cmd, "r");
    size_t n = f ? fread(out, 1, len - 1, f) : 0;
    out[n] = '\0';
    if (f != NULL)
        pclose(f);
}

static void ckpt_run(struct run *r, const char *dir, const char *tag, uint64_t steps,
                     uint64_t every, const char *policy)
{
    static char extra[600], ex[2][2][300];
    *r = (struct run){.dir = dir, .tag = tag, .S = 2, .W = 2, .steps = steps, .extra = extra};
    snprintf(extra, sizeof(extra), "--checkpoint-every %llu --checkpoint-keep 2%s%s",
             (unsigned long long)every, policy ? " --checkpoint-failure-policy " : "",
             policy ? policy : "");
    for (int srv = 0; srv < 2; srv++)
        for (int k = 0; k < 2; k++) {
            snprintf(ex[srv][k], sizeof(ex[srv][k]), "--checkpoint-dir %s/ck-%s", dir,
                     srv == 0 ? "w"
                     : k == 0 ? "s0"
                              : "s1");
            r->rank_extra[srv][k] = ex[srv][k];
        }
}

static void scenario_ckpt_fail(void)
{
    char *dir = mkdir_tmp("ckfail");
    GV_CHECK(dir != NULL);
    char s1[700], away[700], files[300];
    snprintf(s1, sizeof(s1), "%s/ck-s1", dir);
    snprintf(away, sizeof(away), "%s/ck-s1.away", dir);

    /* A. the default policy: stop where the checkpoint failed, resumable from the last one */
    struct run a;
    ckpt_run(&a, dir, "a", 100000, 2000, NULL);
    run_start(&a);
    GV_CHECK(wait_iter(&a, 0, 2100, 30)); /* checkpoint 2000 is committed */
    GV_CHECK(rename(s1, away) == 0);      /* 4000 cannot be written on server 1 */
    e2e_wait(&a.j, 40);
    char codes[400];
    int same = codes_of(&a, -1, codes, sizeof(codes));
    fprintf(stderr, "server 1's directory gone after checkpoint 2000: %s\n", codes);
    GV_CHECK_MSG(same == 4, "exit codes: %s", codes);
    const char *log0 = proc(&a, true, 0)->log;
    GV_CHECK(file_has(log0, "the checkpoint of iteration 4000 was not written by every process "
                            "(server 1: i/o error); the job can be resumed from iteration 2000"));
    GV_CHECK(file_has(log0, "exit status 4"));
    char d0[700], dw[700];
    snprintf(d0, sizeof(d0), "%s/ck-s0", dir);
    snprintf(dw, sizeof(dw), "%s/ck-w/worker0001", dir);
    ckpt_list(d0, 0, files, sizeof(files));
    fprintf(stderr, "server 0 holds checkpoints %s\n", files);
    GV_CHECK(exists(d0, "shard0000-iter000000002000.gvckpt"));
    GV_CHECK(!exists(d0, "shard0000-iter000000004000.gvckpt"));
    GV_CHECK(!exists(d0, "shard0000-iter000000004000.gvckpt.pending"));
    GV_CHECK(exists(dw, "shard0001-iter000000002000.gvckpt"));
    GV_CHECK(!exists(dw, "shard0001-iter000000004000.gvckpt"));
    if (gv_check_failed_ != 0)
        dump_all(&a);
    /* the directory back, the job restarted: it resumes from 2000 and finishes */
    GV_CHECK(rename(away, s1) == 0);
    struct run b;
    ckpt_run(&b, dir, "b", 5000, 2000, NULL);
    run_start(&b);
    GV_CHECK_EQ(e2e_wait(&b.j, 40), b.j.n);
    GV_CHECK(file_has(proc(&b, true, 0)->log, "the job resumes from iteration 2000"));
    GV_CHECK(file_has(proc(&b, false, 0)->log, "residual of iteration 2000 restored"));
    GV_CHECK_EQ(last_iter(&b, 1), 4999);
    if (gv_check_failed_ != 0)
        dump_all(&b);

    if (gv_check_failed_ == 0)
        e2e_rmdir(dir);

    /* B. continue: training goes on to the end, but the final checkpoint fails as well */
    dir = mkdir_tmp("ckcont");
    GV_CHECK(dir != NULL);
    snprintf(s1, sizeof(s1), "%s/ck-s1", dir);
    snprintf(away, sizeof(away), "%s/ck-s1.away", dir);
    struct run c;
    ckpt_run(&c, dir, "a", 6000, 2000, "continue");
    run_start(&c);
    GV_CHECK(wait_iter(&c, 0, 2100, 30));
    GV_CHECK(rename(s1, away) == 0);
    e2e_wait(&c.j, 60);
    same = codes_of(&c, -1, codes, sizeof(codes));
    fprintf(stderr, "continue policy, server 1's directory gone after 2000: %s\n", codes);
    GV_CHECK_MSG(same == 4, "exit codes: %s", codes);
    GV_CHECK_EQ(last_iter(&c, 0), 5999); /* trained to the end */
    log0 = proc(&c, true, 0)->log;
    GV_CHECK(file_has(log0, "the checkpoint of iteration 4000 was not written by every process"));
    GV_CHECK(file_has(log0, "--checkpoint-failure-policy continue"));
    GV_CHECK(file_has(proc(&c, false, 1)->log, "its final checkpoint (iteration 6000) was not "
                                               "written by every server: it can be resumed from "
                                               "iteration 2000"));
    snprintf(d0, sizeof(d0), "%s/ck-s0", dir);
    ckpt_list(d0, 0, files, sizeof(files));
    fprintf(stderr, "server 0 holds checkpoints %s\n", files);
    GV_CHECK(exists(d0, "shard0000-iter000000002000.gvckpt"));
    GV_CHECK(!exists(d0, "shard0000-iter000000004000.gvckpt"));
    GV_CHECK(!exists(d0, "shard0000-iter000000006000.gvckpt"));
    GV_CHECK(!exists(d0, "shard0000-iter000000006000.gvckpt.pending"));
    if (gv_check_failed_ != 0)
        dump_all(&c);

    /* C. an unusable directory (its parent is a file) is refused at start, on both roles */
    char file[700], args[1600], log[760];
    snprintf(file, sizeof(file), "%s/not-a-dir", dir);
    FILE *f = fopen(file, "w");
    GV_CHECK(f != NULL);
    if (f != NULL)
        fclose(f);
    const char *job = "--dataset synthetic --synthetic-n 512 --batch 16 --widths 16 --steps 50 "
                      "--method static --cf 10 --insecure --num-workers 1 --connect-timeout 3s";
    snprintf(args, sizeof(args),
             "%s --rank 0 --num-servers 1 --rendezvous-dir %s "
             "--bind 127.0.0.1:0 --checkpoint-dir %s/ck",
             job, dir, file);
    snprintf(log, sizeof(log), "%s/unusable-server.log", dir);
    GV_CHECK_EQ(run_one("gravac-server", args, log, 10), 2);
    GV_CHECK(file_has(log, "is not usable"));
    snprintf(args, sizeof(args),
             "%s --rank 0 --num-servers 1 --rendezvous-dir %s --quiet "
             "--checkpoint-dir %s/ck",
             job, dir, file);
    snprintf(log, sizeof(log), "%s/unusable-worker.log", dir);
    GV_CHECK_EQ(run_one("gravac-worker", args, log, 10), 2);
    GV_CHECK(file_has(log, "is not usable"));
    GV_CHECK(!file_has(log, "connecting to"));
    if (gv_check_failed_ == 0)
        e2e_rmdir(dir);
}

/* ---------------------------------------------------------------- operators' mistakes */

/* A listener that is not a gravac server: accepts, then stays silent or answers garbage. */
struct stranger {
    int fd;
    uint16_t port;
    bool garbage;
    volatile bool stop;
    pthread_t th;
};

static void *stranger_main(void *arg)
{
    struct stranger *x = arg;
    int conns[16], n = 0;
    while (!x->stop) {
        struct pollfd p = {.fd = x->fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int c = accept(x->fd, NULL, NULL);
        if (c < 0)
            continue;
        if (x->garbage) {
            static const char answer[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
            if (write(c, answer, sizeof(answer) - 1) < 0)
                fprintf(stderr, "stranger: write: %s\n", strerror(errno));
        }
        if (n < 16)
            conns[n++] = c;
        else
            close(c);
    }
    for (int i = 0; i < n; i++)
        close(conns[i]);
    return NULL;
}

static int listen_any(uint16_t *port_p)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    socklen_t len = sizeof(sa);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 16) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port_p = ntohs(sa.sin_port);
    return fd;
}

static void scenario_operators(void)
{
    char *dir = mkdir_tmp("operators");
    GV_CHECK(dir != NULL);
    char args[1600], log[700];
    const char *job = "--dataset synthetic --synthetic-n 512 --batch 16 --widths 16 --steps 50 "
                      "--method static --cf 10 --insecure --num-workers 1";
    uint16_t free_port = 0;
    int probe = listen_any(&free_port);
    GV_CHECK(probe >= 0);
    close(probe);

    /* 1. --bind HOST:0 without a rendezvous directory: nobody could connect; refused */
    snprintf(args, sizeof(args), "%s --rank 0 --servers 127.0.0.1:%u --bind 127.0.0.1:0", job,
             (unsigned)free_port);
    snprintf(log, sizeof(log), "%s/bind0.log", dir);
    GV_CHECK_EQ(run_one("gravac-server", args, log, 10), 2);
    GV_CHECK(file_has(log, "--bind 127.0.0.1:0 asks for any free port"));
    snprintf(args, sizeof(args), "%s --rank 0 --num-servers 1 --bind 127.0.0.1:0", job);
    snprintf(log, sizeof(log), "%s/bind0b.log", dir);
    GV_CHECK_EQ(run_one("gravac-server", args, log, 10), 2);

    /* 2. its own --servers entry does not resolve: refused before it listens */
    snprintf(args, sizeof(args), "%s --rank 0 --servers gravac-no-such-host.invalid:%u", job,
             (unsigned)free_port);
    snprintf(log, sizeof(log), "%s/own.log", dir);
    GV_CHECK_EQ(run_one("gravac-server", args, log, 10), 2);
    GV_CHECK(file_has(log, "its own --servers entry gravac-no-such-host.invalid"));
    GV_CHECK(!file_has(log, "bound "));

    /* 3. a worker whose server's name does not resolve retries until --connect-timeout */
    snprintf(args, sizeof(args),
             "%s --rank 0 --quiet --servers gravac-no-such-host.invalid:%u --connect-timeout 2s",
             job, (unsigned)free_port);
    snprintf(log, sizeof(log), "%s/dns.log", dir);
    uint64_t t0 = gv_now_ns();
    int rc = run_one("gravac-worker", args, log, 20);
    double secs = (double)(gv_now_ns() - t0) * 1e-9;
    fprintf(stderr, "a worker whose server does not resolve gave up after %.2f s (exit %d)\n", secs,
            rc);
    GV_CHECK(rc == 1);
    GV_CHECK_MSG(secs >= 1.8, "gave up after %.2f s, before --connect-timeout", secs);
    GV_CHECK(file_has(log, "cannot resolve the name"));
    GV_CHECK(file_has(log, "retrying until the connect timeout"));
    GV_CHECK(!file_has(log, "waiting for the other workers"));

    /* 4. a worker pointed at a program that is not a gravac server */
    for (int garbage = 0; garbage < 2; garbage++) {
        struct stranger x = {.garbage = garbage};
        x.fd = listen_any(&x.port);
        GV_CHECK(x.fd >= 0);
        pthread_create(&x.th, NULL, stranger_main, &x);
        snprintf(args, sizeof(args),
                 "%s --rank 0 --quiet --servers 127.0.0.1:%u --connect-timeout 2s", job,
                 (unsigned)x.port);
        snprintf(log, sizeof(log), "%s/stranger%d.log", dir, garbage);
        rc = run_one("gravac-worker", args, log, 20);
        x.stop = true;
        pthread_join(x.th, NULL);
        close(x.fd);
        GV_CHECK_MSG(rc == 1 || rc == 2, "exit %d", rc);
        GV_CHECK(!file_has(log, "waiting for the other workers"));
        if (garbage)
            GV_CHECK(file_has(log, "answered with something that is not gravac's protocol (bad "
                                   "magic"));
        else
            GV_CHECK(file_has(log, "accepted the connection but never answered the handshake"));
    }
    if (gv_check_failed_ != 0) {
        const char *logs[] = {"bind0.log", "bind0b.log",    "own.log",
                              "dns.log",   "stranger0.log", "stranger1.log"};
        for (size_t i = 0; i < GV_ARRAY_LEN(logs); i++) {
            snprintf(log, sizeof(log), "%s/%s", dir, logs[i]);
            char *t = e2e_slurp(log, NULL);
            fprintf(stderr, "---- %s:\n%s\n", logs[i], t ? t : "(none)");
            free(t);
        }
    } else {
        e2e_rmdir(dir);
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s BIN_DIR SCENARIO\n", argv[0]);
        return 2;
    }
    bindir = argv[1];
    signal(SIGPIPE, SIG_IGN);
    const char *s = argv[2];
    if (strcmp(s, "churn") == 0)
        scenario_churn();
    else if (strcmp(s, "fdlimit") == 0)
        scenario_fdlimit();
    else if (strcmp(s, "late_server") == 0)
        scenario_late_server();
    else if (strcmp(s, "early_bye") == 0)
        scenario_early_bye();
    else if (strcmp(s, "ckpt_fail") == 0)
        scenario_ckpt_fail();
    else if (strcmp(s, "operators") == 0)
        scenario_operators();
    else {
        fprintf(stderr, "unknown scenario %s\n", s);
        return 2;
    }
    return gv_check_summary();
}
