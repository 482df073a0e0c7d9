/* test_cuda_plugins.c: the CUDA code of nn/ and compress/ lives in plugins loaded only when a GPU
 * is asked for. Each case runs in its own child process (a plugin is loaded once per process):
 * a CPU-only worker's work (model, training step, compression) maps none of cudart, cuBLAS or
 * the plugins; asking for the GPU loads the plugin (then GV_ERR_NODEV here, no driver) and maps
 * cudart, the compression plugin without cuBLAS; a missing plugin ($GV_CUDA_PLUGIN_DIR elsewhere)
 * or a broken one gives GV_ERR_UNSUPPORTED with one error naming the path tried and why
 * (dlerror); a build without CUDA says so. Runs everywhere: nothing here needs a GPU. */
#include "check.h"
#include "gv_ps.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef GV_TEST_HAVE_CUDA
#error "GV_TEST_HAVE_CUDA must be 0 or 1"
#endif

static char logs[8192];
static int n_err;

static void capture_cb(enum gv_log_level level, const char *line, void *arg)
{
    (void)arg;
    n_err += level == GV_LOG_ERROR;
    size_t off = strlen(logs);
    snprintf(logs + off, sizeof(logs) - off, "%s\n", line);
}

/* 1 when a mapping of this process has `name` in its path. */
static int mapped(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    int found = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        found |= strstr(line, name) != NULL;
    if (f != NULL)
        fclose(f);
    return found;
}

static void case_cpu_only(void)
{
    struct gv_nn_backend *be = NULL;
    struct gv_nn_model *m = NULL;
    struct gv_nn_model_cfg cfg;
    gv_nn_model_cfg_default(GV_NN_MLP, &cfg);
    cfg.in_h = cfg.in_w = 8, cfg.max_batch = 4;
    GV_CHECK_OK(gv_nn_backend_create(GV_NN_CPU, 1, &be));
    GV_CHECK_OK(gv_nn_model_create(be, &cfg, &m));
    GV_CHECK_OK(gv_nn_model_init(m, 3));
    float x[4 * 64] = {0};
    int32_t y[4] = {1, 2, 3, 4};
    struct gv_nn_batch b = {.n = 4, .x = x, .labels = y};
    GV_CHECK_OK(gv_nn_model_train_step(m, &b, NULL));
    struct gv_cmp_config cc;
    gv_cmp_config_init(&cc);
    cc.max_numel = gv_nn_model_numel(m);
    struct gv_cmp *cmp = NULL;
    GV_CHECK_OK(gv_cmp_create(&cc, &cmp));
    struct gv_sparse out = {.idx = malloc(4 * 64), .val = malloc(4 * 64), .cap = 64};
    GV_CHECK_OK(gv_cmp_select(cmp, gv_nn_model_grads(m), 640, 10, 0, 0, &out));
    GV_CHECK(!mapped("libcudart"));
    GV_CHECK(!mapped("libcublas"));
    GV_CHECK(!mapped("libgravac_"));
    free(out.idx), free(out.val);
    gv_cmp_destroy(cmp);
    gv_nn_model_destroy(m);
    gv_nn_backend_destroy(be);
}

static void case_nn(const char *dir, gv_status_t want, const char *why)
{
    if (dir != NULL)
        setenv("GV_CUDA_PLUGIN_DIR", dir, 1);
    struct gv_nn_backend *be = NULL;
    gv_status_t status = gv_nn_backend_create(GV_NN_CUDA, 0, &be);
    if (want == GV_ERR_NODEV && status == GV_OK) { /* a machine with a GPU */
        GV_CHECK(gv_nn_backend_mem(be) == GV_MEM_DEVICE);
        gv_nn_backend_destroy(be);
    } else {
        GV_CHECK_STATUS(status, want);
    }
    if (want == GV_ERR_UNSUPPORTED) {
        GV_CHECK_EQ(n_err, 1);
        GV_CHECK_MSG(strstr(logs, why) != NULL, "log '%s' should say '%s'", logs, why);
        GV_CHECK(!mapped("libcudart"));
    } else {
        GV_CHECK(strstr(logs, "loaded the CUDA plugin") != NULL);
        GV_CHECK(mapped("libgravac_nn_cuda.so") && mapped("libcudart") && mapped("libcublas"));
    }
}

static void case_compress(const char *dir, gv_status_t want, const char *why)
{
    if (dir != NULL)
        setenv("GV_CUDA_PLUGIN_DIR", dir, 1);
    int ndev = -1;
    gv_status_t probe = gv_cmp_cuda_probe(&ndev);
    GV_CHECK_EQ(n_err, 0); /* a probe is a question: no error logged */
    struct gv_cmp_config cc;
    gv_cmp_config_init(&cc);
    cc.mem = GV_MEM_DEVICE;
    cc.max_numel = 1000;
    struct gv_cmp *cmp = NULL;
    gv_status_t status = gv_cmp_create(&cc, &cmp);
    if (want == GV_ERR_NODEV && probe == GV_OK) { /* a machine with a GPU */
        GV_CHECK(ndev > 0);
        GV_CHECK_OK(status);
        gv_cmp_destroy(cmp);
    } else {
        GV_CHECK_STATUS(probe, want);
        GV_CHECK_STATUS(status, want);
        GV_CHECK_EQ(ndev, 0);
    }
    if (want == GV_ERR_UNSUPPORTED) {
        GV_CHECK_EQ(n_err, 1);
        GV_CHECK_MSG(strstr(logs, why) != NULL, "log '%s' should say '%s'", logs, why);
        GV_CHECK(!mapped("libcudart"));
    } else {
        GV_CHECK(mapped("libgravac_compress_cuda.so") && mapped("libcudart"));
        GV_CHECK(!mapped("libcublas")); /* compression needs no cuBLAS */
    }
}

/* Runs fn in a child; its checks count there, its exit status here. */
static void in_child(const char *what, void (*fn)(const char *, gv_status_t, const char *),
                     const char *dir, gv_status_t want, const char *why)
{
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        gv_log_set_cb(capture_cb, NULL);
        if (fn != NULL)
            fn(dir, want, why);
        else
            case_cpu_only();
        gv_log_set_cb(NULL, NULL);
        if (gv_check_failed_ != 0)
            fprintf(stderr, "%s: logs were:\n%s", what, logs);
        _exit(gv_check_failed_ == 0 ? 0 : 1);
    }
    int st = 0;
    GV_CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    GV_CHECK_MSG(ok, "case '%s' failed", what);
    fprintf(stderr, "case '%s': %s\n", what, ok ? "ok" : "FAILED");
}

int main(void)
{
    char dir[] = "/tmp/gv_test_plugins_XXXXXX", empty[64], broken[64];
    if (mkdtemp(dir) == NULL)
        return 1;
    snprintf(empty, sizeof(empty), "%s/empty", dir);
    snprintf(broken, sizeof(broken), "%s/broken", dir);
    GV_CHECK(mkdir(empty, 0700) == 0 && mkdir(broken, 0700) == 0);
    const char *names[2] = {"libgravac_nn_cuda.so", "libgravac_compress_cuda.so"};
    for (int i = 0; i < 2; i++) {
        char p[128];
        snprintf(p, sizeof(p), "%s/%s", broken, names[i]);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        GV_CHECK(fd >= 0 && write(fd, "not a shared object\n", 20) == 20);
        if (fd >= 0)
            close(fd);
    }
    in_child("cpu only", NULL, NULL, GV_OK, NULL);
    if (GV_TEST_HAVE_CUDA) {
        char want[128];
        in_child("nn: default search", case_nn, NULL, GV_ERR_NODEV, NULL);
        snprintf(want, sizeof(want), "%s/libgravac_nn_cuda.so (No such file", empty);
        in_child("nn: plugin missing", case_nn, empty, GV_ERR_UNSUPPORTED, want);
        snprintf(want, sizeof(want), "%s/libgravac_nn_cuda.so (", broken);
        in_child("nn: plugin broken", case_nn, broken, GV_ERR_UNSUPPORTED, want);
        in_child("compress: default search", case_compress, NULL, GV_ERR_NODEV, NULL);
        snprintf(want, sizeof(want), "%s/libgravac_compress_cuda.so (No such file", empty);
        in_child("compress: plugin missing", case_compress, empty, GV_ERR_UNSUPPORTED, want);
        snprintf(want, sizeof(want), "%s/libgravac_compress_cuda.so (", broken);
        in_child("compress: plugin broken", case_compress, broken, GV_ERR_UNSUPPORTED, want);
    } else {
        in_child("nn: built without CUDA", case_nn, NULL, GV_ERR_UNSUPPORTED, "without CUDA");
        in_child("compress: built without CUDA", case_compress, NULL, GV_ERR_UNSUPPORTED,
                 "without CUDA");
    }
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    GV_CHECK(system(cmd) == 0);
    return gv_check_summary();
}
