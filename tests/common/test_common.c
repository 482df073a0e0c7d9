/* test_common.c: status strings, log levels and sink, rate-limited logging (on a fake clock),
 * allocation failure injection, buffers, and the plugin loader: a real plugin
 * (libgv_test_plugin.so) found in the search order, its logs and allocations forwarded to this
 * process, plugins of another interface refused, every place tried named on failure, and
 * system libraries by soname with their symbols. */
#include "check.h"
#include "gv_common.h"
#include "test_plugin.h"

#include <fcntl.h>
#include <pthread.h>
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
    GV_CHECK_STREQ(gv_status_str(GV_ERR_CKPT), "checkpoint failed");
    GV_CHECK_STREQ(gv_status_str((gv_status_t)-999), "unknown");
    /* every defined code has its own name */
    for (int a = -13; a <= 1; a++)
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

/* Captures every line (up to 16) for the rate-limiter tests. */
struct lines {
    int n;
    char v[16][320];
};

static void lines_cb(enum gv_log_level level, const char *line, void *arg)
{
    struct lines *l = arg;
    (void)level;
    if (l->n < 16)
        snprintf(l->v[l->n], sizeof(l->v[0]), "%s", line);
    l->n++;
}

#define MS 1000000ull

static void test_log_limit(void)
{
    struct lines l = {0};
    gv_log_set_cb(lines_cb, &l);
    gv_log_set_level(GV_LOG_INFO);

    /* 3 lines per second: a flood of 10 in the first second lets 3 through; the first line of
     * the next window carries the count, with the time since the window the drops fell in */
    struct gv_log_limit lim = GV_LOG_LIMIT_INIT(3, 1000);
    uint64_t t0 = 5000 * MS; /* any origin */
    for (int i = 0; i < 10; i++)
        gv_log_limited_at(GV_LOG_WARN, &lim, t0 + (uint64_t)i * 90 * MS, "accept: error %d", i);
    GV_CHECK_EQ(l.n, 3);
    GV_CHECK_STREQ(l.v[0], "accept: error 0");
    GV_CHECK_STREQ(l.v[2], "accept: error 2");
    gv_log_limited_at(GV_LOG_WARN, &lim, t0 + 1000 * MS, "accept: error %d", 10);
    GV_CHECK_EQ(l.n, 4);
    GV_CHECK_STREQ(l.v[3], "accept: error 10 (7 similar messages suppressed in the last 1.0 s)");
    /* the new window has two more lines to give, without a suffix; then one is dropped and
     * reported, singular, 4 s later */
    gv_log_limited_at(GV_LOG_WARN, &lim, t0 + 1100 * MS, "b");
    gv_log_limited_at(GV_LOG_WARN, &lim, t0 + 1200 * MS, "c");
    gv_log_limited_at(GV_LOG_WARN, &lim, t0 + 1300 * MS, "d");
    GV_CHECK_EQ(l.n, 6);
    GV_CHECK_STREQ(l.v[5], "c");
    gv_log_limited_at(GV_LOG_WARN, &lim, t0 + 5000 * MS, "e");
    GV_CHECK_EQ(l.n, 7);
    GV_CHECK_STREQ(l.v[6], "e (1 similar message suppressed in the last 4.0 s)");

    /* below the threshold: neither passes nor counts */
    struct gv_log_limit quiet = GV_LOG_LIMIT_INIT(1, 1000);
    l.n = 0;
    for (int i = 0; i < 5; i++)
        gv_log_limited_at(GV_LOG_DEBUG, &quiet, t0, "hidden");
    gv_log_limited_at(GV_LOG_WARN, &quiet, t0, "shown");
    GV_CHECK_EQ(l.n, 1);
    GV_CHECK_STREQ(l.v[0], "shown");
    /* burst 0 acts as 1 */
    struct gv_log_limit zero = GV_LOG_LIMIT_INIT(0, 1000);
    l.n = 0;
    gv_log_limited_at(GV_LOG_WARN, &zero, t0, "one");
    gv_log_limited_at(GV_LOG_WARN, &zero, t0, "two");
    GV_CHECK_EQ(l.n, 1);

    /* flush: nothing before the window ends, the count after it, then nothing again */
    struct gv_log_limit fl = GV_LOG_LIMIT_INIT(2, 500);
    l.n = 0;
    for (int i = 0; i < 1002; i++)
        gv_log_limited_at(GV_LOG_ERROR, &fl, t0 + (uint64_t)i * 100000, "metrics http: x");
    GV_CHECK_EQ(l.n, 2);
    gv_log_limit_flush_at(GV_LOG_ERROR, &fl, t0 + 499 * MS, "metrics http");
    GV_CHECK_EQ(l.n, 2);
    gv_log_limit_flush_at(GV_LOG_ERROR, &fl, t0 + 1500 * MS, "metrics http");
    GV_CHECK_EQ(l.n, 3);
    GV_CHECK_STREQ(l.v[2], "metrics http: 1000 similar messages suppressed in the last 1.5 s");
    gv_log_limit_flush_at(GV_LOG_ERROR, &fl, t0 + 9000 * MS, "metrics http");
    GV_CHECK_EQ(l.n, 3);
    /* the flushed line counts in the window it opened: one more line passes there, not two */
    gv_log_limited_at(GV_LOG_ERROR, &fl, t0 + 1600 * MS, "y");
    gv_log_limited_at(GV_LOG_ERROR, &fl, t0 + 1700 * MS, "z");
    GV_CHECK_EQ(l.n, 4);
    GV_CHECK_STREQ(l.v[3], "y");

    /* the macro, on the real clock: a window of an hour lets exactly the burst through, and
     * the arguments of a dropped line are not evaluated */
    static struct gv_log_limit site = GV_LOG_LIMIT_INIT(2, 3600 * 1000);
    int evaluated = 0;
    l.n = 0;
    for (int i = 0; i < 50; i++)
        GV_LOG_LIMITED(GV_LOG_WARN, &site, "repeated %d", (evaluated++, i));
    GV_CHECK_EQ(l.n, 2);
    GV_CHECK_EQ(evaluated, 2);
    GV_CHECK_STREQ(l.v[1], "repeated 1");
    gv_log_suppressed(GV_LOG_WARN, 3, 2500 * MS, "x %s", "y");
    GV_CHECK_STREQ(l.v[2], "x y (3 similar messages suppressed in the last 2.5 s)");
    gv_log_set_cb(NULL, NULL);
}

/* Several threads hitting one limiter at one (fake) instant: exactly `burst` lines pass and
 * every other call is counted once. */
struct limit_thread {
    struct gv_log_limit *lim;
    uint64_t passed;
};

static void *limit_hammer(void *p)
{
    struct limit_thread *t = p;
    for (int i = 0; i < 20000; i++) {
        uint64_t n, span;
        t->passed += gv_log_limit_pass(t->lim, 7 * MS, &n, &span);
    }
    return NULL;
}

static void test_log_limit_threads(void)
{
    struct gv_log_limit lim = GV_LOG_LIMIT_INIT(5, 1000);
    struct limit_thread t[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        t[i] = (struct limit_thread){.lim = &lim};
        pthread_create(&th[i], NULL, limit_hammer, &t[i]);
    }
    uint64_t passed = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        passed += t[i].passed;
    }
    GV_CHECK_EQ(passed, 5);
    uint64_t n = 0, span = 0;
    GV_CHECK(gv_log_limit_pass(&lim, 1007 * MS, &n, &span));
    GV_CHECK_EQ(n, 4 * 20000 - 5);
    GV_CHECK_EQ(span, 1000 * MS);
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
    struct gv_plugin_host host = {.abi = GV_PLUGIN_HOST_ABI + 1,
                                  .size = sizeof(host),
                                  .vlog = gv_vlog,
                                  .calloc = gv_calloc,
                                  .free = gv_free};
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
    test_log_limit();
    test_log_limit_threads();
    test_alloc_fail();
    test_buf();
    test_time();
    test_plugin_load();
    test_plugin_refused();
    test_plugin_search();
    test_plugin_system();
    return gv_check_summary();
}
