/* test_common.c: status strings, log levels and sink, allocation failure injection, buffers,
 * and the plugin loader: a real plugin (libgv_test_plugin.so) found in the search order, its
 * logs and allocations forwarded to this process, plugins of another interface refused, every
 * place tried named on failure, and system libraries by soname with their symbols. */
#include "check.h"
#include "gv_common.h"
#include "test_plugin.h"

#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

struct captured {
    int n;
    enum gv_log_level level;
    char line[256];
};

static void capture_cb(enum gv_log_level level, const char *line, void *arg)
{
    struct captured *c = arg;
    c->n++;
    c->level = level;
    snprintf(c->line, sizeof(c->line), "%s", line);
}

static void test_status(void)
{
    GV_CHECK_STREQ(gv_status_str(GV_OK), "ok");
    GV_CHECK_STREQ(gv_status_str(GV_ERR_PROTO), "protocol error");
    GV_CHECK_STREQ(gv_status_str(GV_ERR_VERSION), "version mismatch");
    GV_CHECK_STREQ(gv_status_str((gv_status_t)-999), "unknown");
    /* every defined code has its own name */
    for (int a = -12; a <= 1; a++)
        for (int b = a + 1; b <= 1; b++)
            GV_CHECK(strcmp(gv_status_str((gv_status_t)a), gv_status_str((gv_status_t)b)) != 0);
}

static void test_log(void)
{
    struct captured c = {0};
    enum gv_log_level lvl;
    GV_CHECK_OK(gv_log_parse_level("debug", &lvl));
    GV_CHECK_EQ(lvl, GV_LOG_DEBUG);
    GV_CHECK_OK(gv_log_parse_level("1", &lvl));
    GV_CHECK_EQ(lvl, GV_LOG_WARN);
    GV_CHECK_STATUS(gv_log_parse_level("loud", &lvl), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_log_parse_level("9", &lvl), GV_ERR_INVAL);

    gv_log_set_cb(capture_cb, &c);
    gv_log_set_level(GV_LOG_WARN);
    gv_log(GV_LOG_INFO, "hidden %d", 1);
    GV_CHECK_EQ(c.n, 0);
    gv_log(GV_LOG_ERROR, "conn %d closed: %s", 3, "reset");
    GV_CHECK_EQ(c.n, 1);
    GV_CHECK_EQ(c.level, GV_LOG_ERROR);
    GV_CHECK_STREQ(c.line, "conn 3 closed: reset");
    gv_log_set_level(GV_LOG_INFO);
    gv_log_set_cb(NULL, NULL);
}

static void test_alloc_fail(void)
{
    gv_alloc_fail_nth(2);
    void *a = gv_malloc(16);
    void *b = gv_malloc(16); /* the 2nd fails */
    void *c = gv_malloc(16); /* and the hook disarms */
    GV_CHECK(a != NULL);
    GV_CHECK(b == NULL);
    GV_CHECK(c != NULL);
    gv_free(a);
    gv_free(c);
    GV_CHECK_EQ(gv_alloc_fail_nth(0), 3);

    void *al = gv_aligned_alloc(4096, 100);
    GV_CHECK(al != NULL && ((uintptr_t)al & 4095) == 0);
    gv_free(al);
    GV_CHECK(gv_aligned_alloc(3, 100) == NULL);
}

static gv_status_t fake_alloc(size_t len, void **ptr_p)
{
    *ptr_p = gv_malloc(len);
    return *ptr_p ? GV_OK : GV_ERR_NOMEM;
}
static void fake_free(void *p)
{
    gv_free(p);
}
static const struct gv_mem_ops fake_ops = {fake_alloc, fake_free};

static void test_buf(void)
{
    struct gv_buf b;
    GV_CHECK_OK(gv_buf_alloc(&b, 10000, GV_MEM_HOST));
    GV_CHECK(b.ptr != NULL && ((uintptr_t)b.ptr & 4095) == 0);
    GV_CHECK_EQ(b.len, 10000);
    GV_CHECK_EQ(b.mem, GV_MEM_HOST);
    GV_CHECK_EQ(((unsigned char *)b.ptr)[9999], 0);
    gv_buf_free(&b);
    GV_CHECK(b.ptr == NULL);
    gv_buf_free(&b); /* twice is fine */

    GV_CHECK_STATUS(gv_buf_alloc(&b, 64, GV_MEM_DEVICE), GV_ERR_UNSUPPORTED);
    GV_CHECK(b.ptr == NULL);
    gv_mem_set_ops(GV_MEM_PINNED, &fake_ops);
    GV_CHECK_OK(gv_buf_alloc(&b, 64, GV_MEM_PINNED));
    GV_CHECK_EQ(b.mem, GV_MEM_PINNED);
    gv_buf_free(&b);
    gv_mem_set_ops(GV_MEM_PINNED, NULL);

    gv_alloc_fail_nth(1);
    GV_CHECK_STATUS(gv_buf_alloc(&b, 64, GV_MEM_HOST), GV_ERR_NOMEM);
    GV_CHECK(b.ptr == NULL);
    GV_CHECK_STREQ(gv_mem_str(GV_MEM_DEVICE), "device");
}

static void test_time(void)
{
    uint64_t a = gv_now_ns(), b = gv_now_ns();
    GV_CHECK(b >= a);
}

static const struct gv_plugin_spec tp_spec = {.file = "libgv_test_plugin.so",
                                              .build_dir = GV_TEST_PLUGIN_DIR,
                                              .abi = TP_ABI,
                                              .api_size = sizeof(struct tp_api)};

/* Found in the build-tree place, entered, and its common/ calls land in this process. */
static void test_plugin_load(void)
{
    unsetenv("GV_CUDA_PLUGIN_DIR");
    struct gv_plugin pl;
    struct tp_api api;
    struct gv_plugin_spec spec = tp_spec;
    spec.api = &api;
    GV_CHECK_OK(gv_plugin_load(&spec, &pl));
    GV_CHECK(pl.lib != NULL);
    GV_CHECK_STREQ(pl.path, GV_TEST_PLUGIN_DIR "/libgv_test_plugin.so");
    GV_CHECK(api.hdr.abi == TP_ABI && api.hdr.size == sizeof(api));
    GV_CHECK_EQ(api.add(2, 3), 5);
    /* the plugin's gv_log goes to this process's sink and level */
    struct captured c = {0};
    gv_log_set_cb(capture_cb, &c);
    api.say("hello");
    GV_CHECK_EQ(c.n, 1);
    GV_CHECK_EQ(c.level, GV_LOG_WARN);
    GV_CHECK_STREQ(c.line, "test plugin says hello");
    gv_log_set_level(GV_LOG_ERROR);
    api.say("nothing");
    GV_CHECK_EQ(c.n, 1);
    gv_log_set_level(GV_LOG_INFO);
    gv_log_set_cb(NULL, NULL);
    /* its allocations go through this process's failure hook */
    gv_alloc_fail_nth(1);
    GV_CHECK(api.alloc(64) == NULL);
    char *p = api.alloc(64);
    GV_CHECK(p != NULL && p[63] == 0);
    api.release(p);
    /* the entry point checks the host's table too */
    gv_plugin_entry_fn entry = NULL;
    const struct gv_plugin_sym sym = {GV_PLUGIN_ENTRY, (void **)&entry, 0};
    struct gv_plugin pl2;
    spec.api = NULL;
    spec.syms = &sym;
    spec.n_syms = 1;
    GV_CHECK_OK(gv_plugin_load(&spec, &pl2));
    GV_CHECK(entry != NULL);
    struct gv_plugin_host host = {.abi = GV_PLUGIN_HOST_ABI + 1, .size = sizeof(host),
                                  .vlog = gv_vlog, .calloc = gv_calloc, .free = gv_free};
    struct tp_api api2;
    if (entry != NULL) {
        GV_CHECK_STATUS(entry(&host, TP_ABI, &api2, sizeof(api2)), GV_ERR_UNSUPPORTED);
        host.abi = GV_PLUGIN_HOST_ABI;
        host.size--;
        GV_CHECK_STATUS(entry(&host, TP_ABI, &api2, sizeof(api2)), GV_ERR_UNSUPPORTED);
        GV_CHECK_STATUS(entry(NULL, TP_ABI, &api2, sizeof(api2)), GV_ERR_UNSUPPORTED);
    }
    gv_plugin_close(&pl2);
    gv_plugin_close(&pl);
    GV_CHECK(pl.lib == NULL);
    gv_plugin_close(&pl); /* twice is fine */
}

/* A plugin of another interface version or table size is refused and unloaded. */
static void test_plugin_refused(void)
{
    unsetenv("GV_CUDA_PLUGIN_DIR");
    struct gv_plugin pl;
    struct tp_api api;
    struct gv_plugin_spec spec = tp_spec;
    spec.api = &api;
    spec.abi = TP_ABI + 1;
    GV_CHECK_STATUS(gv_plugin_load(&spec, &pl), GV_ERR_UNSUPPORTED);
    GV_CHECK(pl.lib == NULL);
    GV_CHECK_MSG(strstr(pl.why, "libgv_test_plugin.so is not a plugin of this build") != NULL,
                 "why: %s", pl.why);
    spec.abi = TP_ABI;
    spec.api_size = sizeof(api) - sizeof(void *);
    GV_CHECK_STATUS(gv_plugin_load(&spec, &pl), GV_ERR_UNSUPPORTED);
    GV_CHECK(strstr(pl.why, "is not a plugin of this build") != NULL);
    spec.file = "";
    GV_CHECK_STATUS(gv_plugin_load(&spec, &pl), GV_ERR_UNSUPPORTED);
}

/* Where it is looked for, and what a failure says. */
static void test_plugin_search(void)
{
    char dir[] = "/tmp/gv_test_common_XXXXXX", empty[64], broken[64], path[128];
    GV_CHECK(mkdtemp(dir) != NULL);
    snprintf(empty, sizeof(empty), "%s/empty", dir);
    snprintf(broken, sizeof(broken), "%s/broken", dir);
    GV_CHECK(mkdir(empty, 0700) == 0 && mkdir(broken, 0700) == 0);
    snprintf(path, sizeof(path), "%s/libgv_test_plugin.so", broken);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    GV_CHECK(fd >= 0 && write(fd, "not a shared object\n", 20) == 20);
    if (fd >= 0)
        close(fd);
    struct gv_plugin pl;
    struct tp_api api;
    struct gv_plugin_spec spec = tp_spec;
    spec.api = &api;
    /* $GV_CUDA_PLUGIN_DIR is the only place looked in when set, even if the build tree has it */
    setenv("GV_CUDA_PLUGIN_DIR", empty, 1);
    GV_CHECK_STATUS(gv_plugin_load(&spec, &pl), GV_ERR_UNSUPPORTED);
    char want[256];
    snprintf(want, sizeof(want), "%s/libgv_test_plugin.so (No such file or directory)", empty);
    GV_CHECK_STREQ(pl.why, want);
    /* a file that is there but does not load: the search stops there, with dlerror() */
    setenv("GV_CUDA_PLUGIN_DIR", broken, 1);
    GV_CHECK_STATUS(gv_plugin_load(&spec, &pl), GV_ERR_UNSUPPORTED);
    snprintf(want, sizeof(want), "%s (", path);
    GV_CHECK_MSG(strncmp(pl.why, want, strlen(want)) == 0, "why: %s", pl.why);
    /* unset: the executable's directory, its ../lib/gravac, then the build tree, in order */
    unsetenv("GV_CUDA_PLUGIN_DIR");
    spec.build_dir = empty;
    GV_CHECK_STATUS(gv_plugin_load(&spec, &pl), GV_ERR_UNSUPPORTED);
    char exe[512];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    GV_CHECK(n > 0);
    exe[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash != NULL)
        *slash = '\0';
    char here[600], up[640], build[128];
    snprintf(here, sizeof(here), "%s/libgv_test_plugin.so (", exe);
    snprintf(up, sizeof(up), "%s/../lib/gravac/libgv_test_plugin.so (", exe);
    snprintf(build, sizeof(build), "%s/libgv_test_plugin.so (", empty);
    const char *a = strstr(pl.why, here), *b = strstr(pl.why, up), *c = strstr(pl.why, build);
    GV_CHECK_MSG(a != NULL && b != NULL && c != NULL && a < b && b < c, "why: %s", pl.why);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    GV_CHECK(system(cmd) == 0);
}

/* A system library by soname: the symbols asked for, optional ones may be absent. */
static void test_plugin_system(void)
{
    void *cos_p = NULL, *none_p = &cos_p;
    struct gv_plugin_sym syms[2] = {{"cos", &cos_p, 0}, {"gv_no_such_function", &none_p, 1}};
    struct gv_plugin_spec spec = {.file = "libm.so.6", .system = 1, .syms = syms, .n_syms = 2};
    struct gv_plugin pl;
    GV_CHECK_OK(gv_plugin_load(&spec, &pl));
    GV_CHECK_STREQ(pl.path, "libm.so.6");
    GV_CHECK(cos_p != NULL && none_p == NULL);
    if (cos_p != NULL) {
        double (*cos_fn)(double);
        *(void **)&cos_fn = cos_p;
        GV_CHECK(cos_fn(0.0) == 1.0);
    }
    gv_plugin_close(&pl);
    syms[1].optional = 0;
    GV_CHECK_STATUS(gv_plugin_load(&spec, &pl), GV_ERR_UNSUPPORTED);
    GV_CHECK(pl.lib == NULL);
    GV_CHECK_STREQ(pl.why, "libm.so.6 lacks the symbol gv_no_such_function");
    spec.file = "libgv-no-such-library.so.1";
    spec.n_syms = 0;
    GV_CHECK_STATUS(gv_plugin_load(&spec, &pl), GV_ERR_UNSUPPORTED);
    GV_CHECK_MSG(strstr(pl.why, "libgv-no-such-library.so.1") != NULL, "why: %s", pl.why);
}

int main(void)
{
    test_status();
    test_log();
    test_alloc_fail();
    test_buf();
    test_time();
    test_plugin_load();
    test_plugin_refused();
    test_plugin_search();
    test_plugin_system();
    return gv_check_summary();
}
