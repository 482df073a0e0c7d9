/* fuzz_config.c: libFuzzer target for the config loader: the input is a config file (read
 * through inih from a memfd), and its lines are also tried as command-line arguments. A load
 * either succeeds or fails with a message; nothing else may happen. */
#include "fuzz.h"
#include "gv_ops.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct fz_cfg {
    int i;
    uint64_t u, size, dur;
    double d;
    bool b;
    const char *s;
    int e;
    struct gv_hostport addr;
    struct gv_hostlist list;
};

static const char *const fz_choices[] = {"abort", "continue", NULL};

static const struct gv_opt fz_opts[] = {
    {.name = "workers",
     .type = GV_OPT_INT,
     .offset = offsetof(struct fz_cfg, i),
     .def = "1",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 64},
    {.name = "seed", .type = GV_OPT_UINT64, .offset = offsetof(struct fz_cfg, u), .def = "0"},
    {.name = "lr", .type = GV_OPT_DOUBLE, .offset = offsetof(struct fz_cfg, d), .def = "0.1"},
    {.name = "verbose", .type = GV_OPT_BOOL, .offset = offsetof(struct fz_cfg, b), .def = "no"},
    {.name = "dir", .type = GV_OPT_STRING, .offset = offsetof(struct fz_cfg, s), .def = ""},
    {.name = "policy",
     .type = GV_OPT_ENUM,
     .offset = offsetof(struct fz_cfg, e),
     .def = "abort",
     .choices = fz_choices},
    {.name = "bucket", .type = GV_OPT_SIZE, .offset = offsetof(struct fz_cfg, size), .def = "1M"},
    {.name = "timeout",
     .type = GV_OPT_DURATION,
     .offset = offsetof(struct fz_cfg, dur),
     .def = "1s",
     .flags = GV_OPT_RANGE,
     .min = 0,
     .max = 100},
    {.name = "bind", .type = GV_OPT_ADDR, .offset = offsetof(struct fz_cfg, addr), .def = ""},
    {.name = "servers",
     .type = GV_OPT_HOSTLIST,
     .offset = offsetof(struct fz_cfg, list),
     .def = ""},
};

static void fz_quiet(enum gv_log_level level, const char *line, void *arg)
{
    (void)level;
    (void)line;
    (void)arg;
}

static void fz_load(int argc, char **argv)
{
    static const char *const others[] = {"worker", NULL};
    struct fz_cfg c;
    struct gv_opt_table tab = {fz_opts, sizeof(fz_opts) / sizeof(fz_opts[0]), &c};
    struct gv_cfg_spec spec = {.program = "fuzz",
                               .section = "server",
                               .other_sections = others,
                               .tables = &tab,
                               .n_tables = 1};
    struct gv_cfg *cfg;
    char *envp[] = {"GV_SEED=5", NULL};
    FUZZ_ASSERT(gv_cfg_create(&spec, &cfg) == GV_OK);
    gv_status_t status = gv_cfg_load(cfg, argc, argv, envp);
    FUZZ_ASSERT(status == GV_OK || status == GV_ERR_INVAL || status == GV_ERR_IO ||
                status == GV_ERR_NOMEM);
    FUZZ_ASSERT((status == GV_OK) == (gv_cfg_error(cfg)[0] == '\0'));
    if (status == GV_OK && !gv_cfg_help_requested(cfg)) {
        FUZZ_ASSERT(c.i >= 1 && c.i <= 64);
        FUZZ_ASSERT(c.dur <= 100000000000ull);
        FUZZ_ASSERT(c.s != NULL && (c.list.n == 0 || c.list.v != NULL));
        for (size_t k = 0; k < c.list.n; k++)
            FUZZ_ASSERT(c.list.v[k].port != 0 && c.list.v[k].host[0] != '\0');
        FILE *devnull = fopen("/dev/null", "w");
        if (devnull != NULL) {
            gv_cfg_print_effective(cfg, devnull);
            gv_cfg_print_help(cfg, devnull);
            fclose(devnull);
        }
    }
    gv_cfg_destroy(cfg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gv_log_set_cb(fz_quiet, NULL);
    /* as a config file */
    int fd = memfd_create("fuzz.ini", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) == (ssize_t)size) {
        char path[64], arg[80];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        snprintf(arg, sizeof(arg), "--config=%s", path);
        char *argv[] = {"fuzz", arg, NULL};
        fz_load(2, argv);
    }
    close(fd);
    /* as command-line arguments, one per line (at most 16) */
    char *copy = malloc(size + 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    char *argv[18] = {"fuzz"};
    int argc = 1;
    for (char *s = copy, *nl; argc < 17 && s < copy + size; s = nl + 1) {
        nl = memchr(s, '\n', (size_t)(copy + size - s));
        if (nl == NULL)
            nl = copy + size;
        *nl = '\0';
        if (strncmp(s, "--config", 8) != 0) /* no files named by the input */
            argv[argc++] = s;
    }
    argv[argc] = NULL;
    fz_load(argc, argv);
    free(copy);
    return 0;
}
