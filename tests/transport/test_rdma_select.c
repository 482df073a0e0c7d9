/* test_rdma_select.c: the RDMA backend's decisions without a device: GV_RDMA_* parsing, the
 * memlock check, the no-device reasons, probe ordering (with fake probes), the auto|rdma|tcp
 * choice, the GPU-memory mode and the ops table's capabilities. Then what this machine really
 * says: the real probe and the real create must fail with the reason (here: a kernel without
 * RDMA, ENOSYS). */
#include "check.h"
#include "rdma_select.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#ifdef GV_HAVE_RDMA
#include <infiniband/verbs.h>
#endif

/* ---------------------------------------------------------------- configuration */

static const char *env_tab[16][2];

static const char *fake_getenv(const char *name)
{
    for (int i = 0; i < 16 && env_tab[i][0] != NULL; i++)
        if (strcmp(env_tab[i][0], name) == 0)
            return env_tab[i][1];
    return NULL;
}

static void set_env(int i, const char *name, const char *value)
{
    env_tab[i][0] = name;
    env_tab[i][1] = value;
    env_tab[i + 1][0] = NULL;
}

static void test_cfg(void)
{
    struct gv_rdma_cfg c;
    char why[256] = "";
    env_tab[0][0] = NULL;
    GV_CHECK_OK(gv_rdma_cfg_load(&c, fake_getenv, why, sizeof(why)));
    GV_CHECK_EQ(c.slot_size, 8192);
    GV_CHECK_EQ(c.rx_depth, 32);
    GV_CHECK_STREQ(c.gpu, "auto");
    GV_CHECK_EQ(gv_rdma_conn_bytes(&c), (32 + 1 + 32) * 8192);
    GV_CHECK_EQ(gv_rdma_pool_need(&c), 4ull * (32 + 1 + 32) * 8192 + (128ull + 33) * 256 * 64);

    set_env(0, "GV_RDMA_SLOT_BYTES", "16k");
    set_env(1, "GV_RDMA_RX_DEPTH", "64");
    set_env(2, "GV_RDMA_DEVICE", "mlx5_1");
    set_env(3, "GV_RDMA_REG_CACHE_BYTES", "2G");
    GV_CHECK_OK(gv_rdma_cfg_load(&c, fake_getenv, why, sizeof(why)));
    GV_CHECK_EQ(c.slot_size, 16384);
    GV_CHECK_EQ(c.rx_depth, 64);
    GV_CHECK_STREQ(c.device, "mlx5_1");
    GV_CHECK_EQ(c.reg_cache_bytes, 2ull << 30);

    const char *bad[][2] = {{"GV_RDMA_RX_DEPTH", "2"},     {"GV_RDMA_RX_DEPTH", "-5"},
                            {"GV_RDMA_RX_DEPTH", "12x"},   {"GV_RDMA_SLOT_BYTES", "4G"},
                            {"GV_RDMA_SIGNAL_EVERY", "0"}, {"GV_RDMA_TX_SLOTS", "3"},
                            {"GV_RDMA_MAX_CONNS", "99999"}};
    for (size_t i = 0; i < GV_ARRAY_LEN(bad); i++) {
        set_env(0, bad[i][0], bad[i][1]);
        why[0] = '\0';
        GV_CHECK_STATUS(gv_rdma_cfg_load(&c, fake_getenv, why, sizeof(why)), GV_ERR_INVAL);
        GV_CHECK_MSG(strstr(why, bad[i][0]) != NULL, "why names the variable: %s", why);
    }
    set_env(0, "GV_RDMA_SIGNAL_EVERY", "200"); /* above the default SQ depth of 128 */
    GV_CHECK_STATUS(gv_rdma_cfg_load(&c, fake_getenv, why, sizeof(why)), GV_ERR_INVAL);
    char longname[80];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    set_env(0, "GV_RDMA_DEVICE", longname);
    GV_CHECK_STATUS(gv_rdma_cfg_load(&c, fake_getenv, why, sizeof(why)), GV_ERR_INVAL);
    env_tab[0][0] = NULL;
}

/* ---------------------------------------------------------------- device checks */

static void test_memlock(void)
{
    char why[512] = "";
    GV_CHECK_OK(gv_rdma_memlock_check(1 << 20, 8 << 20, 0, why, sizeof(why)));
    GV_CHECK_OK(gv_rdma_memlock_check(1 << 30, UINT64_MAX, 0, why, sizeof(why)));
    GV_CHECK_OK(gv_rdma_memlock_check(1 << 30, 65536, 1, why, sizeof(why))); /* CAP_IPC_LOCK */
    GV_CHECK_STATUS(gv_rdma_memlock_check(2129920, 65536, 0, why, sizeof(why)), GV_ERR_NOMEM);
    GV_CHECK_MSG(strstr(why, "memlock") != NULL && strstr(why, "65536 bytes") != NULL &&
                     strstr(why, "2129920 bytes") != NULL,
                 "names the limit and the request: %s", why);

    uint64_t limit = 0;
    int cap = -1;
    gv_rdma_memlock_read(&limit, &cap);
    GV_CHECK(limit > 0);
    GV_CHECK(cap == 0 || cap == 1);
}

static void test_nodev_reason(void)
{
    char why[256];
    gv_rdma_nodev_reason(ENOSYS, why, sizeof(why));
    GV_CHECK_MSG(strstr(why, "kernel has no RDMA support") != NULL, "%s", why);
    gv_rdma_nodev_reason(EACCES, why, sizeof(why));
    GV_CHECK_MSG(strstr(why, "permission") != NULL, "%s", why);
    gv_rdma_nodev_reason(EIO, why, sizeof(why));
    GV_CHECK_MSG(strstr(why, strerror(EIO)) != NULL, "%s", why);
}

struct fake_probe {
    int count, err;
    uint64_t limit;
    int cap;
    const char *rdma_hosts; /* hosts that route through "fake0" */
    int calls_route, calls_memlock;
};

static int fp_count(void *ctx, int *err_p)
{
    struct fake_probe *f = ctx;
    *err_p = f->err;
    return f->count;
}

static gv_status_t fp_route(void *ctx, const char *host, char *dev, size_t devn, char *why,
                            size_t n)
{
    struct fake_probe *f = ctx;
    f->calls_route++;
    if (host == NULL || strstr(f->rdma_hosts, host) != NULL) {
        snprintf(dev, devn, "fake0");
        return GV_OK;
    }
    snprintf(why, n, "address %s is not on (or routed through) an RDMA device", host);
    return GV_ERR_NODEV;
}

static void fp_memlock(void *ctx, uint64_t *limit_p, int *cap_p)
{
    struct fake_probe *f = ctx;
    f->calls_memlock++;
    *limit_p = f->limit;
    *cap_p = f->cap;
}

static const struct gv_rdma_probe_ops fake_ops = {fp_count, fp_route, fp_memlock};

static void test_probe(void)
{
    char dev[32], why[512];
    struct fake_probe f = {-1, ENOSYS, UINT64_MAX, 0, "10.0.0.1", 0, 0};
    GV_CHECK_STATUS(
        gv_rdma_probe(&fake_ops, &f, "10.0.0.1", 1 << 20, dev, sizeof(dev), why, sizeof(why)),
        GV_ERR_NODEV);
    GV_CHECK_MSG(strstr(why, "kernel has no RDMA support") != NULL, "%s", why);
    GV_CHECK_EQ(f.calls_memlock + f.calls_route, 0); /* stops at the first failure */

    f = (struct fake_probe){0, 0, UINT64_MAX, 0, "10.0.0.1", 0, 0};
    GV_CHECK_STATUS(
        gv_rdma_probe(&fake_ops, &f, "10.0.0.1", 1 << 20, dev, sizeof(dev), why, sizeof(why)),
        GV_ERR_NODEV);
    GV_CHECK_MSG(strstr(why, "no RDMA device") != NULL, "%s", why);

    f = (struct fake_probe){1, 0, 65536, 0, "10.0.0.1", 0, 0};
    GV_CHECK_STATUS(
        gv_rdma_probe(&fake_ops, &f, "10.0.0.1", 1 << 20, dev, sizeof(dev), why, sizeof(why)),
        GV_ERR_NOMEM);
    GV_CHECK_MSG(strstr(why, "65536") != NULL && strstr(why, "1048576") != NULL, "%s", why);
    GV_CHECK_EQ(f.calls_route, 0);

    f = (struct fake_probe){1, 0, UINT64_MAX, 0, "10.0.0.1", 0, 0};
    GV_CHECK_STATUS(
        gv_rdma_probe(&fake_ops, &f, "192.168.7.9", 1 << 20, dev, sizeof(dev), why, sizeof(why)),
        GV_ERR_NODEV);
    GV_CHECK_MSG(strstr(why, "192.168.7.9") != NULL, "names the address: %s", why);
    GV_CHECK_OK(
        gv_rdma_probe(&fake_ops, &f, "10.0.0.1", 1 << 20, dev, sizeof(dev), why, sizeof(why)));
    GV_CHECK_STREQ(dev, "fake0");
}

static void test_pick(void)
{
    enum gv_tp_pick p = GV_TP_PICK_RDMA;
    GV_CHECK_OK(gv_tp_pick("auto", 1, GV_OK, &p));
    GV_CHECK_EQ(p, GV_TP_PICK_RDMA);
    GV_CHECK_OK(gv_tp_pick(NULL, 1, GV_OK, &p));
    GV_CHECK_EQ(p, GV_TP_PICK_RDMA);
    GV_CHECK_OK(gv_tp_pick("auto", 1, GV_ERR_NODEV, &p));
    GV_CHECK_EQ(p, GV_TP_PICK_TCP);
    GV_CHECK_OK(gv_tp_pick("auto", 1, GV_ERR_NOMEM, &p));
    GV_CHECK_EQ(p, GV_TP_PICK_TCP);
    GV_CHECK_OK(gv_tp_pick("auto", 0, GV_OK, &p));
    GV_CHECK_EQ(p, GV_TP_PICK_TCP);
    GV_CHECK_OK(gv_tp_pick("tcp", 1, GV_OK, &p));
    GV_CHECK_EQ(p, GV_TP_PICK_TCP);
    GV_CHECK_OK(gv_tp_pick("rdma", 1, GV_OK, &p));
    GV_CHECK_EQ(p, GV_TP_PICK_RDMA);
    GV_CHECK_STATUS(gv_tp_pick("rdma", 1, GV_ERR_NODEV, &p), GV_ERR_NODEV);
    GV_CHECK_STATUS(gv_tp_pick("rdma", 1, GV_ERR_NOMEM, &p), GV_ERR_NOMEM);
    GV_CHECK_STATUS(gv_tp_pick("rdma", 0, GV_OK, &p), GV_ERR_UNSUPPORTED);
    GV_CHECK_STATUS(gv_tp_pick("infiniband", 1, GV_OK, &p), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_tp_pick("", 1, GV_OK, &p), GV_ERR_INVAL);
}

static void test_gpu_choose(void)
{
    char why[256];
    enum gv_rdma_gpu_mode m;
    struct gv_rdma_gpu_facts none = {0};
    struct gv_rdma_gpu_facts all = {
        .cuda_driver = 1, .cuda_devices = 2, .dmabuf_attr = 1, .verbs_dmabuf = 1, .peermem = 1};
    struct gv_rdma_gpu_facts nodmabuf = {.cuda_driver = 1, .cuda_devices = 1, .verbs_dmabuf = 1};
    struct gv_rdma_gpu_facts peer = {
        .cuda_driver = 1, .cuda_devices = 1, .verbs_dmabuf = 1, .peermem = 1};
    struct gv_rdma_gpu_facts noverbs = {.cuda_driver = 1, .cuda_devices = 1, .dmabuf_attr = 1};
    struct gv_rdma_gpu_facts nodev = {.cuda_driver = 1};
    GV_CHECK_OK(gv_rdma_gpu_choose(&none, "auto", &m, why, sizeof(why)));
    GV_CHECK_EQ(m, GV_RDMA_GPU_NONE);
    GV_CHECK_MSG(strstr(why, "no CUDA driver") != NULL, "%s", why);
    GV_CHECK_OK(gv_rdma_gpu_choose(&nodev, "auto", &m, why, sizeof(why)));
    GV_CHECK_EQ(m, GV_RDMA_GPU_NONE);
    GV_CHECK_MSG(strstr(why, "no CUDA device") != NULL, "%s", why);
    GV_CHECK_OK(gv_rdma_gpu_choose(&all, NULL, &m, why, sizeof(why)));
    GV_CHECK_EQ(m, GV_RDMA_GPU_DMABUF);
    GV_CHECK_OK(gv_rdma_gpu_choose(&peer, "auto", &m, why, sizeof(why)));
    GV_CHECK_EQ(m, GV_RDMA_GPU_PEERMEM);
    GV_CHECK_OK(gv_rdma_gpu_choose(&nodmabuf, "auto", &m, why, sizeof(why)));
    GV_CHECK_EQ(m, GV_RDMA_GPU_STAGED);
    GV_CHECK_MSG(strstr(why, "dma-buf") != NULL, "%s", why);
    GV_CHECK_OK(gv_rdma_gpu_choose(&noverbs, "auto", &m, why, sizeof(why)));
    GV_CHECK_EQ(m, GV_RDMA_GPU_STAGED);
    GV_CHECK_MSG(strstr(why, "provider") != NULL, "%s", why);
    GV_CHECK_OK(gv_rdma_gpu_choose(&all, "staged", &m, why, sizeof(why)));
    GV_CHECK_EQ(m, GV_RDMA_GPU_STAGED);
    GV_CHECK_OK(gv_rdma_gpu_choose(&all, "peermem", &m, why, sizeof(why)));
    GV_CHECK_EQ(m, GV_RDMA_GPU_PEERMEM);
    GV_CHECK_OK(gv_rdma_gpu_choose(&all, "off", &m, why, sizeof(why)));
    GV_CHECK_EQ(m, GV_RDMA_GPU_NONE);
    GV_CHECK_STATUS(gv_rdma_gpu_choose(&nodmabuf, "dmabuf", &m, why, sizeof(why)),
                    GV_ERR_UNSUPPORTED);
    GV_CHECK_STATUS(gv_rdma_gpu_choose(&none, "staged", &m, why, sizeof(why)), GV_ERR_UNSUPPORTED);
    GV_CHECK_STATUS(gv_rdma_gpu_choose(&all, "fast", &m, why, sizeof(why)), GV_ERR_INVAL);
    GV_CHECK_STREQ(gv_rdma_gpu_mode_str(GV_RDMA_GPU_DMABUF), "dma-buf registration");
    GV_CHECK_STREQ(gv_rdma_gpu_mode_str(GV_RDMA_GPU_STAGED), "staged through pinned host buffers");
}

/* ---------------------------------------------------------------- this machine */

static gv_status_t h_parse(const void *p, uint32_t *hl, uint64_t *pl, void *u)
{
    (void)p, (void)u;
    *hl = 0;
    *pl = 0;
    return GV_OK;
}
static gv_status_t h_header(struct gv_conn *c, const void *m, size_t ml, uint64_t pl,
                            struct gv_iov *d, int *n, void *u)
{
    (void)c, (void)m, (void)ml, (void)pl, (void)d, (void)n, (void)u;
    return GV_ERR_PROTO;
}
static void h_msg(struct gv_conn *c, const void *m, size_t ml, void *u)
{
    (void)c, (void)m, (void)ml, (void)u;
}

/* Without a usable RDMA device, the real probe and the real create must say why. On a machine
 * with one (or soft-RoCE), they must succeed. */
static void test_this_machine(void)
{
    char dev[64] = "", why[512] = "";
    gv_status_t probe =
        gv_rdma_probe(&gv_rdma_probe_sys, NULL, NULL, 1 << 20, dev, sizeof(dev), why, sizeof(why));
    printf("this machine: rdma %s, probe: %s%s%s\n", gv_rdma_built() ? "built" : "not built",
           gv_status_str(probe), why[0] ? ": " : "", why);
    struct gv_tp_handler h = {
        .prefix_len = 8, .parse_prefix = h_parse, .on_header = h_header, .on_msg = h_msg};
    struct gv_tp *tp = NULL;
    char cwhy[512] = "";
    gv_status_t st = gv_rdma_create_on(NULL, NULL, &h, NULL, &tp, cwhy, sizeof(cwhy));
    if (probe == GV_OK) {
        GV_CHECK_OK(st);
        gv_tp_destroy(tp);
        return;
    }
    GV_CHECK(st != GV_OK && tp == NULL);
    GV_CHECK(cwhy[0] != '\0');
    if (!gv_rdma_built()) {
        GV_CHECK_STATUS(st, GV_ERR_UNSUPPORTED);
        GV_CHECK_MSG(strstr(cwhy, "without RDMA") != NULL, "%s", cwhy);
        return;
    }
    GV_CHECK_STATUS(st, probe);
    GV_CHECK_STREQ(cwhy, why);
    printf("create rdma: %s: %s\n", gv_status_str(st), cwhy);
#ifdef GV_HAVE_RDMA
    /* Independent observation: a kernel without RDMA makes the device list fail with ENOSYS,
     * and the error must then say so in those words. */
    int num = 0;
    errno = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    int err = errno;
    if (list != NULL)
        ibv_free_device_list(list);
    if (list == NULL && err == ENOSYS) {
        GV_CHECK_STATUS(st, GV_ERR_NODEV);
        GV_CHECK_MSG(strstr(cwhy, "kernel has no RDMA support") != NULL, "%s", cwhy);
    } else if (list != NULL && num == 0) {
        GV_CHECK_STATUS(st, GV_ERR_NODEV);
        GV_CHECK_MSG(strstr(cwhy, "no RDMA device") != NULL, "%s", cwhy);
    }
#endif
}

/* The ops table the registry hands out: every slot filled, and the deferred receive the
 * parameter server needs (it refuses to start on a transport without it). */
static void test_ops_table(void)
{
    const struct gv_tp_ops *ops = gv_tp_find("rdma");
    if (!gv_rdma_built()) {
        GV_CHECK(ops == NULL);
        return;
    }
    GV_CHECK(ops != NULL);
    if (ops == NULL)
        return;
    GV_CHECK_STREQ(ops->name, "rdma");
    GV_CHECK(ops->create && ops->destroy && ops->listen && ops->listener_port &&
             ops->listener_close && ops->connect && ops->send && ops->progress && ops->conn_close &&
             ops->mem_reg && ops->mem_dereg);
    GV_CHECK(ops->caps & GV_TP_CAP_DEFER_RECV);
    GV_CHECK(ops->resume_recv != NULL);
}

/* ---------------------------------------------------------------- gv_tp_create_auto */

struct captured {
    int n, warn_or_worse;
    enum gv_log_level level;
    char line[1024];
};

static void capture(enum gv_log_level level, const char *line, void *arg)
{
    struct captured *c = arg;
    c->n++;
    if (level <= GV_LOG_WARN) {
        c->warn_or_worse++;
        c->level = level;
        snprintf(c->line, sizeof(c->line), "%s", line);
    }
}

/* auto falls back to TCP with exactly one line saying why; rdma fails with the reason; tcp is
 * quiet; anything else is refused. On a machine with a usable device, auto and rdma give RDMA. */
static void test_create_auto(void)
{
    char dev[64] = "", why[512] = "";
    gv_status_t probe = gv_rdma_probe(&gv_rdma_probe_sys, NULL, "127.0.0.1", 1 << 20, dev,
                                      sizeof(dev), why, sizeof(why));
    struct gv_tp_handler h = {
        .prefix_len = 8, .parse_prefix = h_parse, .on_header = h_header, .on_msg = h_msg};
    struct captured cap;
    struct gv_tp *tp = NULL;
    gv_log_set_level(GV_LOG_INFO);

    memset(&cap, 0, sizeof(cap));
    gv_log_set_cb(capture, &cap);
    GV_CHECK_OK(gv_tp_create_auto("auto", "127.0.0.1", NULL, &h, NULL, &tp));
    gv_log_set_cb(NULL, NULL);
    GV_CHECK(tp != NULL);
    if (tp != NULL && probe != GV_OK) {
        GV_CHECK_STREQ(tp->ops->name, "tcp");
        GV_CHECK_EQ(cap.warn_or_worse, 1);
        GV_CHECK_EQ(cap.level, GV_LOG_WARN);
        GV_CHECK_MSG(strstr(cap.line, "using tcp") != NULL && strstr(cap.line, why) != NULL,
                     "the fallback line gives the reason: %s", cap.line);
        printf("auto: %s\n", cap.line);
    } else if (tp != NULL) {
        GV_CHECK_STREQ(tp->ops->name, "rdma");
    }
    gv_tp_destroy(tp);
    tp = NULL;

    memset(&cap, 0, sizeof(cap));
    gv_log_set_cb(capture, &cap);
    gv_status_t st = gv_tp_create_auto("rdma", NULL, NULL, &h, NULL, &tp);
    gv_log_set_cb(NULL, NULL);
    if (probe != GV_OK && strstr(why, "not on") == NULL) {
        GV_CHECK(st != GV_OK && tp == NULL);
        GV_CHECK_EQ(cap.warn_or_worse, 1);
        GV_CHECK_EQ(cap.level, GV_LOG_ERROR);
        GV_CHECK_MSG(strstr(cap.line, why) != NULL, "rdma gives the reason: %s", cap.line);
        printf("rdma: %s: %s\n", gv_status_str(st), cap.line);
        if (strstr(why, "kernel has no RDMA support") != NULL)
            GV_CHECK_STATUS(st, GV_ERR_NODEV);
    } else if (probe == GV_OK) {
        GV_CHECK_OK(st);
        GV_CHECK(tp != NULL && strcmp(tp->ops->name, "rdma") == 0);
    }
    gv_tp_destroy(tp);
    tp = NULL;

    memset(&cap, 0, sizeof(cap));
    gv_log_set_cb(capture, &cap);
    GV_CHECK_OK(gv_tp_create_auto("tcp", "127.0.0.1", NULL, &h, NULL, &tp));
    gv_log_set_cb(NULL, NULL);
    GV_CHECK(tp != NULL && strcmp(tp->ops->name, "tcp") == 0);
    GV_CHECK_EQ(cap.warn_or_worse, 0);
    gv_tp_destroy(tp);
    tp = NULL;

    gv_log_set_level(GV_LOG_ERROR);
    GV_CHECK_STATUS(gv_tp_create_auto("infiniband", NULL, NULL, &h, NULL, &tp), GV_ERR_INVAL);
    GV_CHECK(tp == NULL);
    h.prefix_len = 0;
    GV_CHECK_STATUS(gv_tp_create_auto("auto", NULL, NULL, &h, NULL, &tp), GV_ERR_INVAL);
    gv_log_set_level(GV_LOG_INFO);
}

int main(void)
{
    test_cfg();
    test_memlock();
    test_nodev_reason();
    test_probe();
    test_pick();
    test_gpu_choose();
    test_this_machine();
    test_ops_table();
    test_create_auto();
    return gv_check_summary();
}
