/* test_e2e_memory.c: peak memory of the real programs with a model large enough for the bounds
 * to mean something (an MLP of 3.4 M parameters, 13 MiB): 2 servers and 2 workers train a few
 * GraVAC iterations; every process reports its peak RSS (VmHWM, everything it ever held, its
 * shared libraries included) and its RSS when main() started. Asserted on that raw peak: a
 * server under 4 x its shard's parameter bytes + 64 MiB, a worker under 6 x the model's
 * parameter bytes + its data (its shard of the training set, and the test set on worker 0) +
 * 64 MiB. Also: a CPU worker maps no CUDA library (the GPU code is a plugin loaded on demand),
 * and worker 1, which does not evaluate, holds no test set. Then a CNN on Fashion-MNIST, whose
 * activations for the 256-sample evaluation batches (over 100 MiB on the CPU) are part of a
 * worker's bound: it reports them, and its peak stays within 6 x params + data + activations +
 * 64 MiB (the bound without them was exceeded, and the summary said so for every CNN job).
 * Under the sanitizers (shadow memory, quarantine) the numbers are printed and the test reports
 * SKIP. */
#include "e2e.h"

#include <sys/stat.h>

#define S 2
#define W 2

static const char *bindir;

/* "12.3 MiB" (or KiB, GiB) at p, in MiB */
static int mem_mib(const char *p, double *mib)
{
    char unit[4] = "";
    if (p == NULL || sscanf(p, "%lf %3s", mib, unit) != 2)
        return -1;
    *mib *= strcmp(unit, "KiB") == 0 ? 1.0 / 1024 : strcmp(unit, "GiB") == 0 ? 1024.0 : 1.0;
    return strcmp(unit, "KiB") == 0 || strcmp(unit, "MiB") == 0 || strcmp(unit, "GiB") == 0 ? 0
                                                                                            : -1;
}

/* "summary: peak RSS 9.4 MiB (4.2 MiB at start); bound ... = 91.2 MiB: within" from a server's
 * log */
static int server_mem(const char *log, double *peak, double *bound)
{
    char *s = e2e_slurp(log, NULL);
    const char *p = s ? strstr(s, "summary: peak RSS ") : NULL;
    const char *b = p ? strstr(p, "64 MiB = ") : NULL;
    if (p != NULL)
        fprintf(stderr, "%.*s\n", (int)strcspn(p, "\n"), p);
    int ok = p && b && mem_mib(p + strlen("summary: peak RSS "), peak) == 0 &&
             mem_mib(b + strlen("64 MiB = "), bound) == 0;
    free(s);
    return ok ? 0 : -1;
}

/* One job of S servers and W workers with these options; checks each process against its
 * bound (and the MLP's data sizes when mlp); *within: false when one exceeded it. */
static void run_job(const char *dir, const char *job, bool mlp, bool *within)
{
    char common[1024], args[2048], log[600], prog[600];
    snprintf(common, sizeof(common),
             "%s --num-servers %d --num-workers %d --rendezvous-dir %s --insecure "
             "--connect-timeout 60s",
             job, S, W, dir);
    struct e2e_job j = {0};
    snprintf(prog, sizeof(prog), "%s/gravac-server", bindir);
    for (int s = 0; s < S; s++) {
        snprintf(args, sizeof(args), "%s --rank %d --bind 127.0.0.1:0", common, s);
        snprintf(log, sizeof(log), "%s/server%d.log", dir, s);
        e2e_spawn(&j, s ? "server1" : "server0", prog, args, log);
    }
    snprintf(prog, sizeof(prog), "%s/gravac-worker", bindir);
    for (int w = 0; w < W; w++) {
        snprintf(args, sizeof(args), "%s --rank %d --quiet --metrics-file %s/worker%%r.jsonl",
                 common, w, dir);
        snprintf(log, sizeof(log), "%s/worker%d.log", dir, w);
        e2e_spawn(&j, w ? "worker1" : "worker0", prog, args, log);
    }
    int ok = e2e_wait(&j, 100);
    GV_CHECK_EQ(ok, S + W);
    for (int s = 0; s < S; s++) {
        double peak = -1, b = -1;
        GV_CHECK(server_mem(j.p[s].log, &peak, &b) == 0);
        fprintf(stderr, "server %d: peak RSS %.1f MiB, bound %.1f MiB\n", s, peak, b);
        *within &= peak > 0 && peak <= b;
    }
    for (int w = 0; w < W; w++) {
        char path[600];
        snprintf(path, sizeof(path), "%s/worker%d.jsonl", dir, w);
        cJSON *sum = e2e_records(path, "summary");
        const cJSON *o = cJSON_GetArrayItem(sum, 0);
        GV_CHECK(o != NULL);
        double peak = e2e_num(o, "peak_rss"), start = e2e_num(o, "rss_start"),
               bound = e2e_num(o, "rss_bound"), params = e2e_num(o, "param_bytes"),
               data = e2e_num(o, "data_bytes"), ws = e2e_num(o, "workspace_bytes");
        fprintf(stderr,
                "worker %d: peak RSS %.1f MiB (%.1f at start), bound %.1f MiB "
                "(parameters %.1f MiB, data %.2f MiB, activations %.1f MiB)\n",
                w, peak / 1048576, start / 1048576, bound / 1048576, params / 1048576,
                data / 1048576, ws / 1048576);
        GV_CHECK(ws > 0);
        GV_CHECK(bound == 6 * params + data + ws + 64.0 * 1048576);
        if (mlp) {
            GV_CHECK(params > 13e6);
            /* the shard of 2048 synthetic 8x8 samples (floats), the 2048 test samples on
             * worker 0 */
            double shard = 1024.0 * (64 * 4 + 4 + 4), test = 2048.0 * (64 * 4 + 4);
            GV_CHECK_MSG(data == shard + (w == 0 ? test : 0), "worker %d holds %.0f data bytes", w,
                         data);
        } else {
            /* the CNN's activations dwarf its parameters: the case the bound missed */
            GV_CHECK_MSG(ws > 64.0 * 1048576 && ws > 6 * params, "activations %.0f bytes", ws);
        }
        GV_CHECK(e2e_num(o, "cuda_mapped") == 0);
        *within &= peak > 0 && peak <= bound;
        cJSON_Delete(sum);
    }
    if (ok != S + W)
        for (int i = 0; i < j.n; i++)
            e2e_dump_log(&j.p[i]);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    bindir = argv[1];
    char dir[] = "/tmp/gv_e2e_mem_XXXXXX", sub[64];
    if (mkdtemp(dir) == NULL)
        return 1;
    bool within = true;
    snprintf(sub, sizeof(sub), "%s/mlp", dir);
    GV_CHECK(mkdir(sub, 0700) == 0);
    run_job(sub,
            "--dataset synthetic --synthetic-n 2048 --batch 32 --widths 3072,1024 --steps 6 "
            "--method gravac-exp --window 2 --epsilon 0.5",
            true, &within);
    snprintf(sub, sizeof(sub), "%s/cnn", dir);
    GV_CHECK(mkdir(sub, 0700) == 0);
    run_job(sub,
            "--model cnn --dataset fashion-mnist --batch 64 --steps 3 --eval-every 3 "
            "--eval-limit 512 --method static --cf 10",
            false, &within);
#ifdef GV_SANITIZED
    e2e_rmdir(dir);
    if (gv_check_failed_ == 0)
        GV_SKIP("memory is not representative under the sanitizers (numbers above)");
#else
    GV_CHECK_MSG(within, "a process exceeded its memory bound");
    e2e_rmdir(dir);
#endif
    return gv_check_summary();
}
