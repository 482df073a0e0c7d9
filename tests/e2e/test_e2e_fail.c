/* test_e2e_fail.c: a server process killed (SIGKILL) in the middle of training: every worker
 * and the other server exit non-zero within a few seconds with a message naming the dead
 * server, instead of hanging. */
#include "e2e.h"

static bool file_has(const char *path, const char *s)
{
    char *b = e2e_slurp(path, NULL);
    bool r = b != NULL && strstr(b, s) != NULL;
    free(b);
    return r;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    const char *bin = argv[1];
    char dir[] = "/tmp/gv_e2e_fail_XXXXXX";
    if (mkdtemp(dir) == NULL)
        return 1;
    char common[1024], args[2048], log[600], prog[600];
    snprintf(common, sizeof(common),
             "--dataset synthetic --synthetic-n 2048 --batch 16 --widths 32 --steps 10000000 "
             "--method static --num-servers 2 --num-workers 2 --rendezvous-dir %s --insecure "
             "--connect-timeout 20s",
             dir);
    struct e2e_job j = {0};
    snprintf(prog, sizeof(prog), "%s/gravac-server", bin);
    for (int s = 0; s < 2; s++) {
        snprintf(args, sizeof(args), "%s --rank %d --bind 127.0.0.1:0", common, s);
        snprintf(log, sizeof(log), "%s/server%d.log", dir, s);
        e2e_spawn(&j, s ? "server1" : "server0", prog, args, log);
    }
    snprintf(prog, sizeof(prog), "%s/gravac-worker", bin);
    for (int w = 0; w < 2; w++) {
        snprintf(args, sizeof(args), "%s --rank %d --quiet --metrics-file %s/worker%%r.jsonl",
                 common, w, dir);
        snprintf(log, sizeof(log), "%s/worker%d.log", dir, w);
        e2e_spawn(&j, w ? "worker1" : "worker0", prog, args, log);
    }
    /* wait until training runs (iterations logged), then kill server 1 */
    char m0[600];
    snprintf(m0, sizeof(m0), "%s/worker0.jsonl", dir);
    for (int k = 0; k < 1000 && !file_has(m0, "\"type\":\"iter\""); k++)
        usleep(10000);
    GV_CHECK(file_has(m0, "\"type\":\"iter\""));
    usleep(200000);
    kill(j.p[1].pid, SIGKILL);
    uint64_t t0 = gv_now_ns();
    e2e_wait(&j, 15);
    double secs = (double)(gv_now_ns() - t0) * 1e-9;
    fprintf(stderr, "every process ended %.2f s after server 1 was killed\n", secs);
    GV_CHECK(secs < 10);
    for (int i = 0; i < j.n; i++) {
        GV_CHECK_MSG(j.p[i].status != -1, "%s hung", j.p[i].name);
        GV_CHECK_MSG(e2e_exit_code(&j.p[i]) != 0, "%s exited 0", j.p[i].name);
    }
    for (int w = 0; w < 2; w++) {
        GV_CHECK_MSG(file_has(j.p[2 + w].log, "server 1"), "worker %d does not name server 1", w);
        if (!file_has(j.p[2 + w].log, "server 1"))
            e2e_dump_log(&j.p[2 + w]);
    }
    GV_CHECK(file_has(j.p[0].log, "aborting the job"));
    if (gv_check_failed_ == 0)
        e2e_rmdir(dir);
    return gv_check_summary();
}
