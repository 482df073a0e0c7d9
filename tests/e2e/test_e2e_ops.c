/* test_e2e_ops.c: operations with the real programs (2 gravac-server, 2-3 gravac-worker on
 * loopback), one scenario per ctest entry (argv[2]):
 *   kill_worker_abort     SIGKILL a worker: every process exits 1 within the bound, naming it
 *   kill_worker_continue  SIGKILL a worker under --dead-worker-policy continue: the job
 *                         finishes with the others (exit 0), replicas equal the servers' shards
 *   stop_worker_abort     SIGSTOP a worker: the heartbeat timeout finds it, everyone exits 1
 *   stop_worker_continue  SIGSTOP a worker under continue: dropped, the job finishes; woken up,
 *                         the worker learns why and exits 1
 *   kill_server           SIGKILL server 1: every other process exits 1, naming it
 *   stop_server           SIGSTOP server 1: found by the timeout, everyone exits 1
 *   kill_server0, stop_server0  the same with server 0, the one that decides the rounds
 *   restart               SIGKILL a server mid-run, restart the job: it resumes from the newest
 *                         common checkpoint and the per-iteration losses and final parameters
 *                         equal an uninterrupted run's, bit for bit
 *   restart_gravac        the same under GraVAC: the restored controller's first decision is
 *                         the killed run's at that iteration
 *   sigterm               SIGTERM a server: every process exits 3 with a checkpoint at one
 *                         iteration; a restart resumes there and finishes
 *   ckpt_refused          a corrupt checkpoint, another job's, and checkpoints on some servers
 *                         only are refused (exit 2) and never loaded
 *   bad_peers             garbage, truncated frames, huge lengths, another wire version, another
 *                         secret and a duplicate rank at both servers during training: each is
 *                         refused and logged, and the job's result equals an undisturbed run's
 *   metrics               /metrics scraped with curl during a GraVAC job: the values move, the
 *                         CF gauges and the gains are there
 * Times are bounded: --peer-timeout 1.5 s, heartbeats every 200 ms. */
#include "ops_run.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------- failures */

/* Kills (SIGKILL) or stops (SIGSTOP) worker `victim` once training runs: under the abort
 * policy every other process exits 1 within the bound and names it. */
static void scenario_worker_abort(bool stop)
{
    struct run r = {
        .dir = mkdir_tmp(stop ? "stopw" : "killw"), .tag = "a", .S = 2, .W = 3, .steps = 100000000};
    GV_CHECK(r.dir != NULL);
    run_start(&r);
    const int victim = 2;
    GV_CHECK(wait_iter(&r, 0, 200, 20));
    struct e2e_proc *v = proc(&r, false, victim);
    kill(v->pid, stop ? SIGSTOP : SIGKILL);
    int vi = r.S + victim;
    double secs = wait_others(&r, vi, 20);
    fprintf(stderr, "every other process ended %.2f s after worker %d was %s\n", secs, victim,
            stop ? "stopped" : "killed");
    GV_CHECK_MSG(secs < (stop ? DETECT_BOUND_S : 3.0), "took %.2f s", secs);
    for (int i = 0; i < r.j.n; i++) {
        if (i == vi)
            continue;
        GV_CHECK_MSG(r.j.p[i].done && e2e_exit_code(&r.j.p[i]) == 1, "%s exit %d", r.j.p[i].name,
                     e2e_exit_code(&r.j.p[i]));
        GV_CHECK_MSG(file_has(r.j.p[i].log, "worker 2 ("), "%s does not name worker 2",
                     r.j.p[i].name);
    }
    if (stop)
        GV_CHECK(file_has(proc(&r, true, 0)->log, "not responding"));
    GV_CHECK(file_has(proc(&r, true, 0)->log, "the dead-worker policy is abort"));
    run_kill(&r);
    if (gv_check_failed_ != 0)
        dump_all(&r);
    else
        e2e_rmdir(r.dir);
}

/* Under the continue policy the job finishes without the dead worker. */
static void scenario_worker_continue(bool stop)
{
    struct run r = {.dir = mkdir_tmp(stop ? "stopwc" : "killwc"),
                    .tag = "a",
                    .S = 2,
                    .W = 3,
                    .steps = 3000,
                    .extra = "--dead-worker-policy continue"};
    GV_CHECK(r.dir != NULL);
    run_start(&r);
    const int victim = 2;
    GV_CHECK(wait_iter(&r, 0, 200, 20));
    struct e2e_proc *v = proc(&r, false, victim);
    kill(v->pid, stop ? SIGSTOP : SIGKILL);
    uint64_t t0 = gv_now_ns();
    double secs = wait_others(&r, r.S + victim, 25);
    fprintf(stderr, "the job finished %.2f s after worker %d was %s\n", secs, victim,
            stop ? "stopped" : "killed");
    for (int i = 0; i < r.j.n; i++)
        if (i != r.S + victim)
            GV_CHECK_MSG(r.j.p[i].done && e2e_exit_code(&r.j.p[i]) == 0, "%s exit %d",
                         r.j.p[i].name, e2e_exit_code(&r.j.p[i]));
    /* whichever server's timeout fires first declares the worker dead ("continuing without
     * it"); a server that learns it from server 0's round decision first logs "out of the
     * job" instead (the order depends on scheduling: found under load) */
    int detected = 0;
    for (int s = 0; s < r.S; s++) {
        const char *log = proc(&r, true, s)->log;
        bool found = file_has(log, "continuing without it");
        detected += found;
        GV_CHECK(file_has(log, "worker 2 ("));
        GV_CHECK_MSG(found || file_has(log, "is out of the job"),
                     "server %d does not say that worker 2 left the job", s);
        GV_CHECK(file_has(log, "workers left 2 of 3"));
    }
    GV_CHECK_MSG(detected >= 1, "no server declared worker 2 dead");
    /* the round it died in has three correct outcomes, depending on when the signal landed:
     * without it ("averaging over 2"), with it as a zero gradient where its push had reached
     * one server only ("reached some servers only", over 3), or with it in full when its push
     * had reached every server before it died (nothing to log). The rounds after that
     * average over the 2 survivors; test_membership checks the partial case's count
     * deterministically, and replicas_equal below checks the result here whatever the case. */
    if (!file_has(proc(&r, true, 0)->log, "averaging over 2") &&
        !file_has(proc(&r, true, 0)->log, "worker 2's push reached some servers only"))
        fprintf(stderr, "worker 2's last push had reached every server\n");
    /* the survivors ran every iteration, and their replicas equal the servers' shards */
    GV_CHECK_EQ(last_iter(&r, 0), 2999);
    GV_CHECK_EQ(last_iter(&r, 1), 2999);
    bool alive[3] = {true, true, false};
    replicas_equal(&r, alive);
    /* the dead worker's membership ended where it died: the detection took at most the bound */
    char *log0 = e2e_slurp(proc(&r, true, 0)->log, NULL);
    GV_CHECK(log0 != NULL && (stop ? strstr(log0, "not responding") != NULL : true));
    free(log0);
    if (stop) {
        /* woken up, the worker learns it was dropped and exits 1 */
        kill(v->pid, SIGCONT);
        uint64_t end = gv_now_ns() + 10000000000ull;
        while (!v->done && gv_now_ns() < end) {
            if (waitpid(v->pid, &v->status, WNOHANG) == v->pid)
                v->done = true;
            else
                usleep(10000);
        }
        GV_CHECK_MSG(v->done && e2e_exit_code(v) == 1, "stopped worker: exit %d",
                     v->done ? e2e_exit_code(v) : -2);
        GV_CHECK(file_has(v->log, "declared worker 2 dead") || file_has(v->log, "closed"));
    }
    (void)t0;
    run_kill(&r);
    if (gv_check_failed_ != 0)
        dump_all(&r);
    else
        e2e_rmdir(r.dir);
}

/* A server killed or stopped: every other process exits 1 naming it, within the bound. Server
 * 0 decides the rounds and the aborts, so losing it is checked as well as losing server 1. */
static void scenario_server(bool stop, int victim)
{
    struct run r = {
        .dir = mkdir_tmp(stop ? "stops" : "kills"), .tag = "a", .S = 2, .W = 2, .steps = 100000000};
    GV_CHECK(r.dir != NULL);
    run_start(&r);
    GV_CHECK(wait_iter(&r, 0, 200, 20));
    kill(proc(&r, true, victim)->pid, stop ? SIGSTOP : SIGKILL);
    double secs = wait_others(&r, victim, 20);
    fprintf(stderr, "every other process ended %.2f s after server %d was %s\n", secs, victim,
            stop ? "stopped" : "killed");
    GV_CHECK_MSG(secs < (stop ? DETECT_BOUND_S : 3.0), "took %.2f s", secs);
    char name[32];
    snprintf(name, sizeof(name), "server %d", victim);
    for (int i = 0; i < r.j.n; i++) {
        if (i == victim)
            continue;
        GV_CHECK_MSG(r.j.p[i].done && e2e_exit_code(&r.j.p[i]) == 1, "%s exit %d", r.j.p[i].name,
                     e2e_exit_code(&r.j.p[i]));
        GV_CHECK_MSG(file_has(r.j.p[i].log, name), "%s does not name %s", r.j.p[i].name, name);
    }
    if (stop) {
        bool said = false;
        for (int i = 0; i < r.j.n; i++)
            said |= i != victim && file_has(r.j.p[i].log, "not responding");
        GV_CHECK_MSG(said, "nobody said that %s is not responding", name);
    }
    run_kill(&r);
    if (gv_check_failed_ != 0)
        dump_all(&r);
    else
        e2e_rmdir(r.dir);
}

/* ---------------------------------------------------------------- checkpoints */

/* Worker w's per-iteration losses of a run, indexed by iteration (NAN where absent). */
static double *losses(struct run *r, int w, long n)
{
    char path[700];
    snprintf(path, sizeof(path), "%s/worker%d-%s.jsonl", r->dir, w, r->tag);
    double *v = malloc((size_t)n * sizeof(double));
    for (long i = 0; i < n; i++)
        v[i] = NAN;
    cJSON *it = e2e_records(path, "iter");
    const cJSON *o;
    cJSON_ArrayForEach(o, it)
    {
        long i = (long)e2e_num(o, "iter");
        if (i >= 0 && i < n)
            v[i] = e2e_num(o, "loss");
    }
    cJSON_Delete(it);
    return v;
}

/* Restart from a checkpoint: an uninterrupted run (a) against one whose server 1 is killed
 * (b), then restarted (c) from the newest checkpoint every server holds. From there on the
 * losses of every iteration and the final parameters equal a's bit for bit: servers restore
 * shard, momentum, iteration and controller; workers the error-feedback residual (with
 * --local-momentum also their velocity) and, from the iteration, the data position. method:
 * the job's method options (NULL: static CF 10). */
static void scenario_restart(const char *method, const char *tag)
{
    const uint64_t steps = 2400, every = 300;
    char *dir = mkdir_tmp(tag);
    GV_CHECK(dir != NULL);
    char extra_a[900], extra_b[900];
    snprintf(extra_a, sizeof(extra_a), "--checkpoint-dir %s/ck-a --checkpoint-every %llu", dir,
             (unsigned long long)every);
    snprintf(extra_b, sizeof(extra_b), "--checkpoint-dir %s/ck-b --checkpoint-every %llu", dir,
             (unsigned long long)every);
    struct run a = {
        .dir = dir, .tag = "a", .S = 2, .W = 2, .steps = steps, .extra = extra_a, .method = method};
    run_start(&a);
    GV_CHECK_EQ(e2e_wait(&a.j, 25), a.j.n);
    struct run b = {
        .dir = dir, .tag = "b", .S = 2, .W = 2, .steps = steps, .extra = extra_b, .method = method};
    run_start(&b);
    GV_CHECK(wait_iter(&b, 0, 1000, 20));
    kill(proc(&b, true, 1)->pid, SIGKILL);
    wait_others(&b, 1, 15);
    run_kill(&b);
    long killed_at = last_iter(&b, 0);
    GV_CHECK_MSG(killed_at < (long)steps - 1, "the job ended before the kill (%ld)", killed_at);
    struct run c = {
        .dir = dir, .tag = "c", .S = 2, .W = 2, .steps = steps, .extra = extra_b, .method = method};
    run_start(&c);
    GV_CHECK_EQ(e2e_wait(&c.j, 25), c.j.n);
    /* where it resumed: the first iteration the restarted workers recorded */
    double *la = losses(&a, 0, (long)steps), *lc0 = losses(&c, 0, (long)steps);
    long from = 0;
    while (from < (long)steps && isnan(lc0[from]))
        from++;
    fprintf(stderr, "killed at iteration %ld, resumed from %ld\n", killed_at, from);
    GV_CHECK_MSG(from > 0 && from % (long)every == 0 && from <= killed_at + 1,
                 "resumed from %ld (killed at %ld)", from, killed_at);
    char key[80];
    snprintf(key, sizeof(key), "the job resumes from iteration %ld", from);
    GV_CHECK(file_has(proc(&c, true, 0)->log, key));
    for (int w = 0; w < 2; w++) {
        double *x = losses(&a, w, (long)steps), *y = losses(&c, w, (long)steps);
        long diff = 0, n = 0;
        for (long i = from; i < (long)steps; i++) {
            n++;
            diff += !(x[i] == y[i]); /* bitwise: the JSON holds 17 digits */
        }
        GV_CHECK_MSG(diff == 0 && n == (long)steps - from,
                     "worker %d: %ld of %ld losses differ "
                     "after the restart",
                     w, diff, n);
        GV_CHECK(file_has(proc(&c, false, w)->log, "residual of iteration"));
        free(x);
        free(y);
    }
    free(la);
    free(lc0);
    char p1[700], p2[700];
    for (int s = 0; s < 2; s++) {
        snprintf(p1, sizeof(p1), "%s/server%d-a.bin", dir, s);
        snprintf(p2, sizeof(p2), "%s/server%d-c.bin", dir, s);
        GV_CHECK_MSG(same_file(p1, p2),
                     "server %d: final shard differs from the uninterrupted "
                     "run's",
                     s);
    }
    for (int w = 0; w < 2; w++) {
        snprintf(p1, sizeof(p1), "%s/worker%d-a.bin", dir, w);
        snprintf(p2, sizeof(p2), "%s/worker%d-c.bin", dir, w);
        GV_CHECK_MSG(same_file(p1, p2), "worker %d: final parameters differ", w);
    }
    if (gv_check_failed_ != 0) {
        dump_all(&b);
        dump_all(&c);
    } else {
        e2e_rmdir(dir);
    }
}

/* Worker w's decision of iteration `it` in a run's metrics file (false if not recorded). */
struct decision {
    char level[32];
    double cf, theta_min, cf_candidate;
};

static bool decision_at(struct run *r, int w, long it, struct decision *d)
{
    char path[700];
    snprintf(path, sizeof(path), "%s/worker%d-%s.jsonl", r->dir, w, r->tag);
    cJSON *recs = e2e_records(path, "iter");
    const cJSON *o;
    bool found = false;
    cJSON_ArrayForEach(o, recs)
    {
        if ((long)e2e_num(o, "iter") != it)
            continue;
        const cJSON *lv = cJSON_GetObjectItemCaseSensitive(o, "level");
        snprintf(d->level, sizeof(d->level), "%s", cJSON_IsString(lv) ? lv->valuestring : "?");
        d->cf = e2e_num(o, "cf");
        d->theta_min = e2e_num(o, "theta_min");
        d->cf_candidate = e2e_num(o, "cf_candidate");
        found = true;
    }
    cJSON_Delete(recs);
    return found;
}

static bool decision_eq(const struct decision *a, const struct decision *b)
{
    return strcmp(a->level, b->level) == 0 && a->cf == b->cf && a->theta_min == b->theta_min &&
           a->cf_candidate == b->cf_candidate;
}

/* Restart under an adaptive controller (GraVAC, AUTO): server 0's checkpoint carries the
 * controller. A job whose server 1 is killed, restarted: the first decision after the resume
 * (level, CF, floor, candidate) is the one the killed run had at that iteration, which is not
 * what a fresh controller decides first; the job then finishes with every replica equal to the
 * servers. (Both controllers weigh measured times, so the whole trajectory is not compared
 * here; the static restart scenario compares it bit for bit.) */
static void scenario_restart_ctl(const char *method, const char *tag)
{
    const uint64_t steps = 1500, every = 300;
    char *dir = mkdir_tmp(tag);
    GV_CHECK(dir != NULL);
    char extra[900];
    snprintf(extra, sizeof(extra), "--checkpoint-dir %s/ck --checkpoint-every %llu", dir,
             (unsigned long long)every);
    struct run b = {
        .dir = dir, .tag = "b", .S = 2, .W = 2, .steps = steps, .extra = extra, .method = method};
    run_start(&b);
    GV_CHECK(wait_iter(&b, 0, 700, 20));
    kill(proc(&b, true, 1)->pid, SIGKILL);
    wait_others(&b, 1, 15);
    run_kill(&b);
    long killed_at = last_iter(&b, 0);
    GV_CHECK_MSG(killed_at < (long)steps - 1, "the job ended before the kill (%ld)", killed_at);
    struct run c = {
        .dir = dir, .tag = "c", .S = 2, .W = 2, .steps = steps, .extra = extra, .method = method};
    run_start(&c);
    GV_CHECK_EQ(e2e_wait(&c.j, 25), c.j.n);
    long from = -1;
    char *log0 = e2e_slurp(proc(&c, true, 0)->log, NULL);
    const char *p = log0 ? strstr(log0, "the job resumes from iteration ") : NULL;
    from = p ? strtol(p + 31, NULL, 10) : -1;
    free(log0);
    fprintf(stderr, "killed at iteration %ld, resumed from %ld\n", killed_at, from);
    GV_CHECK_MSG(from > 0 && from % (long)every == 0 && from <= killed_at + 1,
                 "resumed from %ld (killed at %ld)", from, killed_at);
    struct decision first, killed, resumed;
    GV_CHECK(decision_at(&b, 0, 0, &first));
    GV_CHECK(decision_at(&b, 0, from, &killed));
    GV_CHECK(decision_at(&c, 0, from, &resumed));
    fprintf(stderr,
            "decision at %ld: %s CF %g (floor %g, candidate %g) before the kill, %s CF "
            "%g (floor %g, candidate %g) after the restart; at 0: %s CF %g (candidate %g)\n",
            from, killed.level, killed.cf, killed.theta_min, killed.cf_candidate, resumed.level,
            resumed.cf, resumed.theta_min, resumed.cf_candidate, first.level, first.cf,
            first.cf_candidate);
    GV_CHECK_MSG(decision_eq(&killed, &resumed), "the restarted controller decides otherwise");
    GV_CHECK_MSG(!decision_eq(&first, &killed),
                 "the controller at iteration %ld decides as a "
                 "fresh one: this run cannot tell a restored controller (change the options)",
                 from);
    for (int w = 0; w < 2; w++)
        GV_CHECK_EQ(last_iter(&c, w), (long)steps - 1);
    replicas_equal(&c, NULL);
    if (gv_check_failed_ != 0) {
        dump_all(&b);
        dump_all(&c);
    } else {
        e2e_rmdir(dir);
    }
}

/* SIGTERM to one server: the job stops at one iteration everywhere, with a checkpoint of it
 * on every server, every process exits 3; a restart resumes from it and finishes. */
static void scenario_sigterm(void)
{
    char *dir = mkdir_tmp("sigterm");
    GV_CHECK(dir != NULL);
    char extra[900];
    snprintf(extra, sizeof(extra), "--checkpoint-dir %s/ck --checkpoint-every 100000", dir);
    struct run b = {.dir = dir, .tag = "b", .S = 2, .W = 2, .steps = 4000, .extra = extra};
    run_start(&b);
    GV_CHECK(wait_iter(&b, 0, 500, 20));
    kill(proc(&b, true, 1)->pid, SIGTERM);
    e2e_wait(&b.j, 15);
    for (int i = 0; i < b.j.n; i++)
        GV_CHECK_MSG(e2e_exit_code(&b.j.p[i]) == 3, "%s exit %d", b.j.p[i].name,
                     e2e_exit_code(&b.j.p[i]));
    GV_CHECK(file_has(proc(&b, true, 0)->log, "stopping the job at iteration"));
    GV_CHECK(file_has(proc(&b, false, 0)->log, "stopped on request"));
    /* both shards were checkpointed at the same iteration */
    char *log0 = e2e_slurp(proc(&b, true, 0)->log, NULL);
    const char *p = log0 ? strstr(log0, "stopping the job at iteration ") : NULL;
    long at = p ? strtol(p + 30, NULL, 10) : -1;
    free(log0);
    GV_CHECK(at > 0);
    char path[700];
    for (int s = 0; s < 2; s++) {
        snprintf(path, sizeof(path), "%s/ck/shard%04d-iter%012ld.gvckpt", dir, s, at);
        GV_CHECK_MSG(access(path, R_OK) == 0, "missing %s", path);
    }
    struct run c = {.dir = dir, .tag = "c", .S = 2, .W = 2, .steps = 4000, .extra = extra};
    run_start(&c);
    GV_CHECK_EQ(e2e_wait(&c.j, 25), c.j.n);
    char key[80];
    snprintf(key, sizeof(key), "the job resumes from iteration %ld", at);
    GV_CHECK(file_has(proc(&c, true, 0)->log, key));
    GV_CHECK_EQ(last_iter(&c, 1), 3999);
    /* no residual was saved at that iteration: said, not hidden */
    GV_CHECK(file_has(proc(&c, false, 0)->log, "starts from zero"));
    replicas_equal(&c, NULL);
    if (gv_check_failed_ != 0) {
        dump_all(&b);
        dump_all(&c);
    } else {
        e2e_rmdir(dir);
    }
}

/* Flips a bit of the byte at off (negative: from the end, inside the sections' data). */
static void flip_byte(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    GV_CHECK(f != NULL);
    if (f == NULL)
        return;
    if (off < 0) {
        fseek(f, 0, SEEK_END);
        off += ftell(f);
    }
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
}

static void scenario_ckpt_refused(void)
{
    char *dir = mkdir_tmp("refused");
    GV_CHECK(dir != NULL);
    char extra[900];
    snprintf(extra, sizeof(extra), "--checkpoint-dir %s/ck --checkpoint-every 100", dir);
    struct run a = {.dir = dir, .tag = "a", .S = 2, .W = 2, .steps = 300, .extra = extra};
    run_start(&a);
    GV_CHECK_EQ(e2e_wait(&a.j, 25), a.j.n); /* checkpoints 100, 200, 300 of both shards */
    char f0[700], f1[700], base[1600], args[2600], log[700];
    snprintf(f1, sizeof(f1), "%s/ck/shard0001-iter000000000300.gvckpt", dir);
    snprintf(f0, sizeof(f0), "%s/ck/shard0000-iter000000000300.gvckpt", dir);
    GV_CHECK(access(f0, R_OK) == 0 && access(f1, R_OK) == 0);
    snprintf(base, sizeof(base),
             "--dataset synthetic --synthetic-n 2048 --batch 16 --steps 600 "
             "--method static --cf 10 --num-servers 2 --num-workers 2 --rendezvous-dir "
             "%s/rdv-x --connect-timeout 3s --insecure --checkpoint-dir %s/ck",
             dir, dir);

    /* 1. a corrupt newest checkpoint: refused before anything else, never loaded */
    char *orig = e2e_slurp(f1, NULL);
    flip_byte(f1, -300); /* a byte of the shard's data, not of the file's header */
    snprintf(args, sizeof(args), "%s --widths 32 --rank 1 --bind 127.0.0.1:0", base);
    snprintf(log, sizeof(log), "%s/corrupt.log", dir);
    GV_CHECK_EQ(run_one("gravac-server", args, log, 10), 2);
    GV_CHECK(file_has(log, "SHA-256 checksum mismatch (the file is corrupt)"));
    GV_CHECK(file_has(log, "refusing to resume from an older one"));
    GV_CHECK(!file_has(log, "loaded checkpoint"));
    /* the file is left as it was for the operator */
    GV_CHECK(access(f1, R_OK) == 0);
    free(orig);

    /* 2. another job's checkpoint (another model): refused, naming the difference */
    snprintf(args, sizeof(args), "%s --widths 48 --rank 0 --bind 127.0.0.1:0", base);
    snprintf(log, sizeof(log), "%s/mismatch.log", dir);
    GV_CHECK_EQ(run_one("gravac-server", args, log, 10), 2);
    GV_CHECK(file_has(log, "belongs to another job"));
    GV_CHECK(!file_has(log, "loaded checkpoint"));

    /* 3. checkpoints for server 0 only (server 1's directory is empty): server 0 refuses to
     *    mix a resumed shard with a fresh one */
    char ck1[700];
    snprintf(ck1, sizeof(ck1), "%s/ck1", dir);
    mkdir(ck1, 0700);
    snprintf(ck1, sizeof(ck1), "%s/rdv-x", dir);
    mkdir(ck1, 0700);
    snprintf(ck1, sizeof(ck1), "%s/ck1", dir);
    struct e2e_job j = {0};
    char prog[700], log0[700], log1[700];
    snprintf(prog, sizeof(prog), "%s/gravac-server", bindir);
    snprintf(args, sizeof(args), "%s --widths 32 --rank 0 --bind 127.0.0.1:0", base);
    snprintf(log0, sizeof(log0), "%s/mix0.log", dir);
    e2e_spawn(&j, "server0", prog, args, log0);
    snprintf(args, sizeof(args), "%s --widths 32 --rank 1 --bind 127.0.0.1:0 --checkpoint-dir %s",
             base, ck1);
    snprintf(log1, sizeof(log1), "%s/mix1.log", dir);
    e2e_spawn(&j, "server1", prog, args, log1);
    e2e_wait(&j, 15);
    GV_CHECK_EQ(e2e_exit_code(&j.p[0]), 2);
    GV_CHECK(e2e_exit_code(&j.p[1]) != 0);
    GV_CHECK(file_has(log0, "checkpoints exist for some servers only"));
    if (gv_check_failed_ != 0) {
        char *s;
        const char *logs[] = {"corrupt.log", "mismatch.log", "mix0.log", "mix1.log"};
        for (size_t i = 0; i < GV_ARRAY_LEN(logs); i++) {
            snprintf(log, sizeof(log), "%s/%s", dir, logs[i]);
            s = e2e_slurp(log, NULL);
            fprintf(stderr, "---- %s:\n%s\n", logs[i], s ? s : "(none)");
            free(s);
        }
    } else {
        e2e_rmdir(dir);
    }
}

/* ---------------------------------------------------------------- bad peers */

/* A handshake as worker `rank` with `secret`; the text of the REFUSE that came back. */
struct hs_client {
    struct gv_proto_caps caps;
    struct gv_proto_arena arena;
    unsigned char arena_buf[65536];
    struct gv_ps_link link;
    struct gv_ps_client_hs hs;
    bool forge; /* answer the CHALLENGE with a made-up proof, unchecked */
    bool closed;
    char refuse[300];
};

static gv_status_t hc_prefix(const void *p, uint32_t *h, uint64_t *l, void *u)
{
    return gv_proto_parse_prefix(p, &((struct hs_client *)u)->caps, h, l);
}

static gv_status_t hc_header(struct gv_conn *c, const void *m, size_t n, uint64_t pl,
                             struct gv_iov *dst, int *cnt, void *u)
{
    (void)c, (void)m, (void)n, (void)u;
    dst[0] = (struct gv_iov){NULL, pl};
    *cnt = 1;
    return GV_OK;
}

static void hc_msg(struct gv_conn *c, const void *msg, size_t len, void *u)
{
    (void)c;
    struct hs_client *h = u;
    struct gv_proto_msg m;
    if (gv_proto_decode(msg, len, &h->caps, &h->arena, &m) != GV_OK)
        return;
    if (m.type == GV_PROTO_MSG_REFUSE)
        snprintf(h->refuse, sizeof(h->refuse), "%s", m.u.refuse.text ? m.u.refuse.text : "");
    if (h->forge && m.type == GV_PROTO_MSG_CHALLENGE) {
        uint8_t mac[GV_AUTH_MAC_LEN];
        for (size_t i = 0; i < sizeof(mac); i++)
            mac[i] = (uint8_t)(rand() & 0xff);
        struct gv_proto_msg out;
        gv_proto_msg_init(&out, GV_PROTO_MSG_AUTH);
        out.role = GV_PROTO_ROLE_WORKER;
        out.rank = h->hs.rank;
        out.u.auth.mac = (struct gv_proto_bytes){mac, sizeof(mac)};
        (void)gv_ps_link_send(&h->link, &out, NULL, 0, NULL);
        h->hs.state = GV_PS_CLIENT_AUTH_SENT;
        return;
    }
    if (h->hs.state == GV_PS_CLIENT_HELLO_SENT || h->hs.state == GV_PS_CLIENT_AUTH_SENT)
        (void)gv_ps_client_hs_on_msg(&h->hs, &h->link, &m);
}

static void hc_close(struct gv_conn *c, gv_status_t reason, void *u)
{
    (void)c, (void)reason;
    struct hs_client *h = u;
    h->closed = true;
    h->link.c = NULL;
}

static bool handshake_refused(int port, const char *key, uint32_t rank, bool forge, char *why,
                              size_t len)
{
    struct hs_client *h = calloc(1, sizeof(*h));
    h->forge = forge;
    struct gv_tp_config tc;
    gv_ps_caps(&h->caps, &tc, 5000000000ull, 5000000000ull);
    gv_proto_arena_init(&h->arena, h->arena_buf, sizeof(h->arena_buf));
    struct gv_tp_handler hd = {.prefix_len = GV_PROTO_PREFIX_LEN,
                               .parse_prefix = hc_prefix,
                               .on_header = hc_header,
                               .on_msg = hc_msg,
                               .on_close = hc_close};
    struct gv_tp *tp = NULL;
    struct gv_conn *c = NULL;
    struct gv_auth_secret sec = {0};
    gv_auth_secret_set(&sec, key, strlen(key));
    struct gv_ps_envelope hostile_env = {GV_PROTO_ROLE_WORKER, rank, 0};
    bool ok = gv_tp_create("tcp", &tc, &hd, h, &tp) == GV_OK &&
              gv_tp_connect(tp, "127.0.0.1", (uint16_t)port, &c) == GV_OK &&
              gv_ps_link_init(&h->link, &h->caps, &hostile_env, 8, 4096) == GV_OK;
    if (ok) {
        h->link.c = c;
        struct gv_ps_hello_info info = {.role = GV_PROTO_ROLE_WORKER,
                                        .rank = rank,
                                        .num_workers = 2,
                                        .num_servers = 2,
                                        .cluster_id = "gravac",
                                        .secret = &sec};
        ok = gv_ps_client_hs_start(&h->hs, &h->link, &info) == GV_OK;
        uint64_t end = gv_now_ns() + 5000000000ull;
        while (ok && !h->closed && gv_now_ns() < end)
            gv_tp_progress(tp, 10);
        ok = h->closed && h->hs.state != GV_PS_CLIENT_WELCOMED;
    }
    snprintf(why, len, "%s | %s", h->refuse, h->hs.why);
    gv_tp_destroy(tp);
    gv_ps_link_cleanup(&h->link);
    free(h);
    return ok;
}

/* Every kind of bad connection, each in its own thread (so that the slowest, the one the
 * handshake timeout ends, bounds the time), at one server. */
enum attack_kind {
    ATT_GARBAGE,
    ATT_VERSION,
    ATT_HUGE_HDR,
    ATT_HUGE_PAYLOAD,
    ATT_TRUNC_EOF,
    ATT_TRUNC_HANG,
    ATT_WRONG_SECRET,
    ATT_FORGED_PROOF,
    ATT_DUP_RANK,
    ATT_N
};

struct attack {
    int port;
    enum attack_kind kind;
    const char *wrong_key, *right_key;
    bool ok;
    char why[700];
    pthread_t th;
};

static void *attack_one(void *arg)
{
    struct attack *a = arg;
    uint8_t buf[256];
    memset(buf, 0x5a, sizeof(buf));
    switch (a->kind) {
    case ATT_GARBAGE: a->ok = send_expect_close(a->port, buf, sizeof(buf), false); break;
    case ATT_VERSION: /* another wire version */
        prefix(buf, GV_PROTO_VERSION + 1, 16, 0);
        a->ok = send_expect_close(a->port, buf, GV_PROTO_PREFIX_LEN + 16, true);
        break;
    case ATT_HUGE_HDR: /* a header length above any cap */
        prefix(buf, GV_PROTO_VERSION, 0x7fffff00u, 0);
        a->ok = send_expect_close(a->port, buf, GV_PROTO_PREFIX_LEN, true);
        break;
    case ATT_HUGE_PAYLOAD: /* a payload of 2^50 bytes */
        prefix(buf, GV_PROTO_VERSION, 16, 1ull << 50);
        a->ok = send_expect_close(a->port, buf, GV_PROTO_PREFIX_LEN + 16, true);
        break;
    case ATT_TRUNC_EOF: /* a truncated frame, then EOF */
        prefix(buf, GV_PROTO_VERSION, 200, 0);
        a->ok = send_expect_close(a->port, buf, GV_PROTO_PREFIX_LEN + 40, false);
        break;
    case ATT_TRUNC_HANG: /* the same left hanging: the handshake timeout closes it */
        prefix(buf, GV_PROTO_VERSION, 200, 0);
        a->ok = send_expect_close(a->port, buf, GV_PROTO_PREFIX_LEN + 40, true);
        break;
    case ATT_WRONG_SECRET: /* the client finds the server's proof wrong and refuses */
        a->ok = handshake_refused(a->port, a->wrong_key, 1, false, a->why, sizeof(a->why)) &&
                strstr(a->why, "does not verify") != NULL;
        break;
    case ATT_FORGED_PROOF: /* a client that ignores the server's proof and makes one up */
        a->ok = handshake_refused(a->port, a->wrong_key, 1, true, a->why, sizeof(a->why)) &&
                strstr(a->why, "authentication failed") != NULL;
        break;
    case ATT_DUP_RANK: /* the right secret, claiming a rank that has joined */
        a->ok = handshake_refused(a->port, a->right_key, 0, false, a->why, sizeof(a->why)) &&
                strstr(a->why, "already joined") != NULL;
        break;
    default: break;
    }
    return NULL;
}

static void attack(const int *ports, int n_ports, const char *wrong_key, const char *right_key)
{
    static const char *const names[ATT_N] = {
        "garbage",        "another wire version", "huge header",
        "huge payload",   "truncated frame",      "hanging truncated frame",
        "another secret", "a forged proof",       "duplicate rank"};
    struct attack a[2 * ATT_N];
    int n = 0;
    for (int p = 0; p < n_ports; p++)
        for (int k = 0; k < ATT_N; k++) {
            a[n] = (struct attack){.port = ports[p],
                                   .kind = (enum attack_kind)k,
                                   .wrong_key = wrong_key,
                                   .right_key = right_key};
            pthread_create(&a[n].th, NULL, attack_one, &a[n]);
            n++;
        }
    for (int i = 0; i < n; i++) {
        pthread_join(a[i].th, NULL);
        GV_CHECK_MSG(a[i].ok, "port %d: %s was not refused and closed (%s)", a[i].port,
                     names[a[i].kind], a[i].why);
    }
}

#ifndef BAD_PEERS_STEPS
#define BAD_PEERS_STEPS 8000
#endif

static void scenario_bad_peers(void)
{
    char *dir = mkdir_tmp("badpeers");
    GV_CHECK(dir != NULL);
    static const char key[] = "e2e-ops-secret-0123456789abcdef";
    char path[700];
    snprintf(path, sizeof(path), "%s/secret", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    GV_CHECK(fd >= 0 && write(fd, key, strlen(key)) == (ssize_t)strlen(key));
    close(fd);
    setenv("GV_SECRET_FILE", path, 1);
    const char *extra = "--handshake-timeout 300ms";
    struct run a = {.dir = dir,
                    .tag = "a",
                    .S = 2,
                    .W = 2,
                    .steps = BAD_PEERS_STEPS,
                    .extra = extra,
                    .secure = true};
    run_start(&a);
    GV_CHECK_EQ(e2e_wait(&a.j, 25), a.j.n);
    struct run b = {.dir = dir,
                    .tag = "b",
                    .S = 2,
                    .W = 2,
                    .steps = BAD_PEERS_STEPS,
                    .extra = extra,
                    .secure = true};
    run_start(&b);
    int port0 = port_of(dir, "b", 0), port1 = port_of(dir, "b", 1);
    GV_CHECK(port0 > 0 && port1 > 0);
    GV_CHECK(wait_iter(&b, 0, 100, 20));
    int ports[2] = {port0, port1};
    long before = last_iter(&b, 0);
    uint64_t t0 = gv_now_ns();
    attack(ports, 2, "another-secret-0123456789abcdef", key);
    long during = last_iter(&b, 0);
    fprintf(stderr, "the attacks took %.2f s, iterations %ld to %ld of %ld\n",
            (double)(gv_now_ns() - t0) * 1e-9, before, during, (long)BAD_PEERS_STEPS);
    GV_CHECK_MSG(during < (long)BAD_PEERS_STEPS - 1,
                 "training ended before the attacks did "
                 "(%ld)",
                 during);
    GV_CHECK_EQ(e2e_wait(&b.j, 25), b.j.n);
    unsetenv("GV_SECRET_FILE");
    for (int s = 0; s < 2; s++) {
        const char *log = proc(&b, true, s)->log;
        GV_CHECK(file_has(log, "it sent a malformed frame"));
        GV_CHECK(file_has(log, "it speaks another wire version"));
        GV_CHECK(file_has(log, "did not complete the handshake"));
        GV_CHECK(file_has(log, "refused the handshake: authentication failed"));
        GV_CHECK(file_has(log, "proof does not verify: it holds another secret"));
        GV_CHECK(file_has(log, "has already joined"));
    }
    /* undisturbed: the attacked run's parameters equal the clean run's, bit for bit */
    char p1[700], p2[700];
    for (int s = 0; s < 2; s++) {
        snprintf(p1, sizeof(p1), "%s/server%d-a.bin", dir, s);
        snprintf(p2, sizeof(p2), "%s/server%d-b.bin", dir, s);
        GV_CHECK_MSG(same_file(p1, p2), "server %d: the attacked run differs", s);
    }
    for (int w = 0; w < 2; w++) {
        snprintf(p1, sizeof(p1), "%s/worker%d-a.bin", dir, w);
        snprintf(p2, sizeof(p2), "%s/worker%d-b.bin", dir, w);
        GV_CHECK_MSG(same_file(p1, p2), "worker %d: the attacked run differs", w);
    }
    if (gv_check_failed_ != 0)
        dump_all(&b);
    else
        e2e_rmdir(dir);
}

/* ---------------------------------------------------------------- metrics */

static void scenario_metrics(void)
{
    if (system("curl --version > /dev/null 2>&1") != 0)
        GV_SKIP("curl is not installed");
    char *dir = mkdir_tmp("metrics");
    GV_CHECK(dir != NULL);
    char extra[900];
    snprintf(extra, sizeof(extra),
             "--metrics-addr 127.0.0.1:0 --checkpoint-dir %s/ck "
             "--checkpoint-every 200",
             dir);
    /* GraVAC, so that the gains are exported (server 0): after its first windows a compressed
     * floor is used (CF 10 at first; a later search may raise it, as fast as the machine runs
     * the iterations) and the candidate climbs towards the top (1000) */
    struct run r = {.dir = dir,
                    .tag = "a",
                    .S = 2,
                    .W = 2,
                    .steps = 100000000,
                    .extra = extra,
                    .method = "--method gravac-exp --window 25 --epsilon 0.3"};
    run_start(&r);
    int port = metrics_port(proc(&r, true, 0)->log), port1 = metrics_port(proc(&r, true, 1)->log);
    GV_CHECK(port > 0 && port1 > 0);
    GV_CHECK(wait_iter(&r, 0, 300, 20));
    int code = 0;
    char *a = curl_get(port, &code);
    GV_CHECK_EQ(code, 200);
    usleep(300000); /* the clocks are refreshed every 200 ms */
    GV_CHECK(wait_iter(&r, 0, last_iter(&r, 0) + 300, 20));
    char *b = curl_get(port, &code);
    GV_CHECK_EQ(code, 200);
    char *c = curl_get(port1, &code);
    GV_CHECK_EQ(code, 200);
    double now = (double)time(NULL);
    const char *moving[] = {"gravac_iteration",        "gravac_rounds_total",
                            "gravac_samples_total",    "gravac_bytes_received_total",
                            "gravac_bytes_sent_total", "gravac_round_seconds_count"};
    for (size_t i = 0; i < GV_ARRAY_LEN(moving); i++) {
        double x = sample(a, moving[i]), y = sample(b, moving[i]);
        GV_CHECK_MSG(x > 0 && y > x, "%s: %g then %g", moving[i], x, y);
    }
    GV_CHECK(sample(b, "gravac_iteration") >= 300);
    GV_CHECK(sample(b, "gravac_samples_per_second") > 0);
    double cf = sample(b, "gravac_compression_factor");
    double floor_cf = sample(b, "gravac_compression_factor_floor");
    double cand_cf = sample(b, "gravac_compression_factor_candidate");
    /* the floor is one of the search's compressed levels, from --theta-min (10) to its top; not
     * necessarily 10: in one run the search had raised it to 20 by iteration 525 */
    GV_CHECK_MSG(floor_cf >= 10.0 && floor_cf <= 1000.0, "floor CF %g", floor_cf);
    /* no candidate (a window that found none to try): the candidate gauge is the floor */
    GV_CHECK_MSG(cand_cf >= floor_cf && (cf == floor_cf || cf == cand_cf),
                 "CF %g, floor %g, candidate %g", cf, floor_cf, cand_cf);
    double g_floor = sample(b, "gravac_compression_gain{level=\"floor\"}");
    double g_cand = sample(b, "gravac_compression_gain{level=\"candidate\"}");
    GV_CHECK_MSG(g_floor > 0 && g_floor <= 1 && g_cand > 0 && g_cand <= 1,
                 "gains: floor %g, candidate %g", g_floor, g_cand);
    GV_CHECK_EQ(sample(b, "gravac_workers"), 2.0);
    GV_CHECK(sample(b, "gravac_loss") > 0);
    GV_CHECK(sample(b, "gravac_checkpoint_iteration") >= 200);
    double q50 = sample(b, "gravac_round_seconds{quantile=\"0.5\"}");
    double q99 = sample(b, "gravac_round_seconds{quantile=\"0.99\"}");
    GV_CHECK_MSG(q50 > 0 && q99 >= q50 && q99 < 10, "round time quantiles %g %g", q50, q99);
    for (int w = 0; w < 2; w++) {
        char s[80];
        snprintf(s, sizeof(s), "gravac_worker_last_seen_timestamp_seconds{worker=\"%d\"}", w);
        double t = sample(b, s);
        GV_CHECK_MSG(fabs(t - now) < 10, "%s = %f, now %f", s, t, now);
    }
    GV_CHECK(strstr(b, "# TYPE gravac_round_seconds summary") != NULL);
    GV_CHECK(strstr(b, "gravac_server_info{rank=\"0\"") != NULL);
    GV_CHECK(sample(c, "gravac_iteration") > 0 && strstr(c, "rank=\"1\"") != NULL);
    free(a);
    free(b);
    free(c);
    run_kill(&r);
    if (gv_check_failed_ != 0)
        dump_all(&r);
    else
        e2e_rmdir(dir);
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
    if (strcmp(s, "kill_worker_abort") == 0)
        scenario_worker_abort(false);
    else if (strcmp(s, "stop_worker_abort") == 0)
        scenario_worker_abort(true);
    else if (strcmp(s, "kill_worker_continue") == 0)
        scenario_worker_continue(false);
    else if (strcmp(s, "stop_worker_continue") == 0)
        scenario_worker_continue(true);
    else if (strcmp(s, "kill_server") == 0)
        scenario_server(false, 1);
    else if (strcmp(s, "stop_server") == 0)
        scenario_server(true, 1);
    else if (strcmp(s, "kill_server0") == 0)
        scenario_server(false, 0);
    else if (strcmp(s, "stop_server0") == 0)
        scenario_server(true, 0);
    else if (strcmp(s, "restart") == 0)
        scenario_restart(NULL, "restart");
    else if (strcmp(s, "restart_local_momentum") == 0)
        scenario_restart("--method static --cf 10 --local-momentum", "restartm");
    else if (strcmp(s, "restart_gravac") == 0)
        scenario_restart_ctl("--method gravac-exp --window 25 --epsilon 0.3", "restartg");
    else if (strcmp(s, "restart_auto") == 0)
        scenario_restart_ctl("--method auto", "restarta");
    else if (strcmp(s, "sigterm") == 0)
        scenario_sigterm();
    else if (strcmp(s, "ckpt_refused") == 0)
        scenario_ckpt_refused();
    else if (strcmp(s, "bad_peers") == 0)
        scenario_bad_peers();
    else if (strcmp(s, "metrics") == 0)
        scenario_metrics();
    else {
        fprintf(stderr, "unknown scenario %s\n", s);
        return 2;
    }
    return gv_check_summary();
}
