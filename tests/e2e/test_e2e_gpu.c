/* test_e2e_gpu.c: distributed training with GPU workers, the real programs: 2 servers (CPU) and
 * 2 workers with --device cuda (one case mixes a GPU and a CPU worker). Checked: every process
 * succeeds; every worker's parameters, the GPU replica's included, equal the servers' shards
 * bit for bit (the CUDA optimizer step rounds as the servers' does) with no checksum mismatch
 * and no resync; every worker saw the same CF sequence; the model learns (worker 0's final test
 * accuracy); a GPU worker reports the CUDA runtime mapped and device buffers, a CPU worker
 * neither. Cases: GraVAC with top-k (its first iteration is dense: the staged g_ef push), static
 * DGC with fp16 values, dense. SKIP (77) without a GPU or without CUDA in the build: this needs
 * a GPU machine to run. */
#include "e2e.h"
#include "gv_compress.h"
#include "gv_nn.h"

#define S 2
#define W 2

static const char *bindir;

/* The servers' shards, concatenated, against each worker's parameters. */
static void replicas_check(const char *what, const char *dir)
{
    char path[600];
    size_t len0 = 0, lens = 0;
    snprintf(path, sizeof(path), "%s/worker0.bin", dir);
    char *w0 = e2e_slurp(path, &len0);
    char *cat = malloc(len0 + 1);
    for (int s = 0; s < S && cat != NULL; s++) {
        size_t len = 0;
        snprintf(path, sizeof(path), "%s/server%d.bin", dir, s);
        char *d = e2e_slurp(path, &len);
        if (d != NULL && lens + len <= len0)
            memcpy(cat + lens, d, len);
        lens += len;
        free(d);
    }
    GV_CHECK_MSG(w0 != NULL && len0 > 0 && lens == len0 && memcmp(w0, cat, len0) == 0,
                 "%s: worker 0's parameters differ from the servers' shards", what);
    for (int w = 1; w < W; w++) {
        size_t len = 0;
        snprintf(path, sizeof(path), "%s/worker%d.bin", dir, w);
        char *d = e2e_slurp(path, &len);
        GV_CHECK_MSG(d != NULL && len == len0 && memcmp(d, w0, len0) == 0,
                     "%s: worker %d's parameters differ from worker 0's", what, w);
        free(d);
    }
    free(w0);
    free(cat);
}

static void run_case(const char *what, const char *jobargs, int steps, const char *dev1,
                     double min_acc)
{
    fprintf(stderr, "==== %s\n", what);
    char dir[] = "/tmp/gv_e2e_gpu_XXXXXX";
    if (mkdtemp(dir) == NULL)
        return;
    char common[2048], args[3072], log[600], prog[600];
    snprintf(common, sizeof(common),
             "%s --steps %d --num-servers %d --num-workers %d "
             "--rendezvous-dir %s --insecure --connect-timeout 60s",
             jobargs, steps, S, W, dir);
    struct e2e_job j = {0};
    snprintf(prog, sizeof(prog), "%s/gravac-server", bindir);
    for (int s = 0; s < S; s++) {
        snprintf(args, sizeof(args),
                 "%s --rank %d --bind 127.0.0.1:0 --dump-params "
                 "%s/server%%r.bin",
                 common, s, dir);
        snprintf(log, sizeof(log), "%s/server%d.log", dir, s);
        e2e_spawn(&j, s ? "server1" : "server0", prog, args, log);
    }
    snprintf(prog, sizeof(prog), "%s/gravac-worker", bindir);
    for (int w = 0; w < W; w++) {
        snprintf(args, sizeof(args),
                 "%s --rank %d --device %s --quiet --metrics-file "
                 "%s/worker%%r.jsonl --dump-params %s/worker%%r.bin",
                 common, w, w == 0 ? "cuda" : dev1, dir, dir);
        snprintf(log, sizeof(log), "%s/worker%d.log", dir, w);
        e2e_spawn(&j, w ? "worker1" : "worker0", prog, args, log);
    }
    int ok = e2e_wait(&j, 100);
    GV_CHECK_MSG(ok == S + W, "%s: %d of %d processes succeeded", what, ok, S + W);
    if (ok != S + W) {
        for (int i = 0; i < j.n; i++)
            e2e_dump_log(&j.p[i]);
        e2e_rmdir(dir);
        return;
    }
    replicas_check(what, dir);
    cJSON *iters[W];
    char path[600];
    for (int w = 0; w < W; w++) {
        snprintf(path, sizeof(path), "%s/worker%d.jsonl", dir, w);
        iters[w] = e2e_records(path, "iter");
        GV_CHECK_EQ(cJSON_GetArraySize(iters[w]), steps);
        cJSON *sum = e2e_records(path, "summary");
        const cJSON *o = cJSON_GetArrayItem(sum, 0);
        bool gpu = w == 0 || strcmp(dev1, "cuda") == 0;
        GV_CHECK_MSG(o != NULL && e2e_num(o, "checksum_mismatches") == 0,
                     "%s: worker %d's replica drifted", what, w);
        GV_CHECK_MSG(o != NULL && e2e_num(o, "cuda_mapped") == (gpu ? 1 : 0),
                     "%s: worker %d: CUDA runtime %s", what, w, gpu ? "not mapped" : "mapped");
        if (gpu && strstr(jobargs, "dense") == NULL)
            GV_CHECK_MSG(o != NULL && e2e_num(o, "device_bytes") > 0,
                         "%s: worker %d compressed without device buffers", what, w);
        if (w == 0) {
            double acc = o != NULL ? e2e_num(o, "accuracy") : 0;
            fprintf(stderr, "%s: final test accuracy %.4f\n", what, acc);
            GV_CHECK_MSG(acc >= min_acc, "%s: accuracy %.4f < %.2f", what, acc, min_acc);
        }
        cJSON_Delete(sum);
    }
    int diff = 0;
    for (int i = 0; i < steps && cJSON_GetArraySize(iters[1]) == steps; i++)
        diff += e2e_num(cJSON_GetArrayItem(iters[0], i), "cf") !=
                e2e_num(cJSON_GetArrayItem(iters[1], i), "cf");
    GV_CHECK_EQ(diff, 0);
    for (int w = 0; w < W; w++)
        cJSON_Delete(iters[w]);
    if (gv_check_failed_ == 0)
        e2e_rmdir(dir);
    else
        fprintf(stderr, "kept %s\n", dir);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_e2e_gpu BIN_DIR\n");
        return 2;
    }
    bindir = argv[1];
    struct gv_nn_backend *be = NULL;
    int ndev = 0;
    gv_status_t st = gv_nn_backend_create(GV_NN_CUDA, 0, &be);
    gv_nn_backend_destroy(be);
    if (st == GV_OK)
        st = gv_cmp_cuda_probe(&ndev);
    if (st == GV_ERR_UNSUPPORTED || st == GV_ERR_NODEV)
        GV_SKIP("no GPU worker possible here (%s): this test needs a GPU", gv_status_str(st));
    GV_CHECK_OK(st);
    const char *base = "--dataset synthetic --synthetic-n 3072 --batch 32 --widths 256,128 "
                       "--lr 0.05";
    char a[512];
    snprintf(a, sizeof(a), "%s --method gravac-exp --window 4 --epsilon 0.3 --theta-min 5", base);
    run_case("gravac top-k, worker 0 on the GPU, worker 1 on the CPU", a, 60, "cpu", 0.8);
    snprintf(a, sizeof(a), "%s --method static --cf 20 --compressor dgc --fp16", base);
    run_case("static DGC CF 20, fp16, both on the GPU", a, 60, "cuda", 0.8);
    snprintf(a, sizeof(a), "%s --method dense", base);
    run_case("dense, both on the GPU", a, 30, "cuda", 0.8);
    /* AUTO with arms dense, fp16 and 10: its timing stage always times the dense arms, and
     * the first dense iteration pushes g + residual from the GPU, later ones the gradient alone
     * (no top-k) */
    snprintf(a, sizeof(a), "%s --method auto --arms dense,fp16,10", base);
    run_case("auto, worker 0 on the GPU, worker 1 on the CPU", a, 60, "cpu", 0.8);
    return gv_check_summary();
}
