/* bench_ops.c: gravac-bench ops: what the operations blocks cost, each against a baseline
 * measured in the same run: checkpoint write (vs write+fsync+rename of the same bytes),
 * checkpoint open+verify+read (vs a plain read), a metric update (vs a mutex-guarded add),
 * rendering, and a full handshake (vs the four HMACs it computes). Options through gv_cfg. */
#include "bench.h"
#include "gv_ops.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

struct bops_cfg {
    const char *dir;
    uint64_t size;
    int repeat;
    uint64_t ops;
};

static const struct gv_opt bops_opts[] = {
    {.name = "dir",
     .type = GV_OPT_STRING,
     .offset = offsetof(struct bops_cfg, dir),
     .def = "/tmp",
     .help = "directory for the checkpoint files (a temporary subdirectory)"},
    {.name = "size",
     .type = GV_OPT_SIZE,
     .offset = offsetof(struct bops_cfg, size),
     .def = "64M",
     .help = "checkpoint payload (split into params and momentum)",
     .flags = GV_OPT_RANGE,
     .min = 4096,
     .max = 17179869184.0},
    {.name = "repeat",
     .type = GV_OPT_INT,
     .offset = offsetof(struct bops_cfg, repeat),
     .def = "5",
     .help = "repetitions; the median is reported",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 1000},
    {.name = "ops",
     .type = GV_OPT_UINT64,
     .offset = offsetof(struct bops_cfg, ops),
     .def = "2000000",
     .help = "metric updates and HMACs per timing",
     .flags = GV_OPT_RANGE,
     .min = 1000,
     .max = 1e10},
};

static int bops_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double bops_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), bops_cmp);
    return v[n / 2];
}

static int bops_write_file(const char *path, const void *buf, size_t len)
{
    char tmp[PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
        return -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    const char *p = buf;
    while (len > 0) {
        ssize_t ret = write(fd, p, len);
        if (ret <= 0) {
            close(fd);
            return -1;
        }
        p += ret;
        len -= (size_t)ret;
    }
    int ok = fsync(fd) == 0 && close(fd) == 0 && rename(tmp, path) == 0;
    return ok ? 0 : -1;
}

static int bops_read_file(const char *path, void *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char *p = buf;
    while (len > 0) {
        ssize_t ret = read(fd, p, len);
        if (ret <= 0)
            break;
        p += ret;
        len -= (size_t)ret;
    }
    close(fd);
    return len == 0 ? 0 : -1;
}

static int bops_ckpt(const struct bops_cfg *c, const char *dir)
{
    size_t half = (size_t)(c->size / 2);
    uint8_t *a = malloc(half), *b = malloc(half), *r = malloc(half);
    double tw[1000], tb[1000], tr[1000], tbr[1000];
    char path[PATH_MAX], base[PATH_MAX];
    int rc = 1;
    if (a == NULL || b == NULL || r == NULL)
        goto out;
    for (size_t i = 0; i < half; i++) {
        a[i] = (uint8_t)(i * 7);
        b[i] = (uint8_t)(i * 13);
    }
    struct gv_ckpt_ident id = {.model_fingerprint = 1, .shard_length = half / 4, .num_servers = 1};
    struct gv_ckpt_section s[] = {{"params", a, half}, {"momentum", b, half}};
    if ((size_t)snprintf(base, sizeof(base), "%s/baseline.bin", dir) >= sizeof(base))
        goto out;
    for (int k = 0; k < c->repeat; k++) {
        uint64_t t0 = gv_now_ns();
        if (gv_ckpt_write(dir, &id, (uint64_t)k, s, 2, 1, path, sizeof(path)) != GV_OK)
            goto out;
        uint64_t t1 = gv_now_ns();
        if (bops_write_file(base, a, half) != 0 || bops_write_file(base, b, half) != 0) {
            fprintf(stderr, "baseline write failed: %s\n", strerror(errno));
            goto out;
        }
        uint64_t t2 = gv_now_ns();
        struct gv_ckpt *ck;
        if (gv_ckpt_open(path, 0, &ck) != GV_OK)
            goto out;
        gv_status_t st = gv_ckpt_read_section(ck, "params", r, half);
        if (st == GV_OK)
            st = gv_ckpt_read_section(ck, "momentum", r, half);
        gv_ckpt_close(ck);
        if (st != GV_OK)
            goto out;
        uint64_t t3 = gv_now_ns();
        if (bops_read_file(base, r, half) != 0 || bops_read_file(base, r, half) != 0)
            goto out;
        uint64_t t4 = gv_now_ns();
        tw[k] = (double)(t1 - t0) * 1e-9;
        tb[k] = (double)(t2 - t1) * 1e-9;
        tr[k] = (double)(t3 - t2) * 1e-9;
        tbr[k] = (double)(t4 - t3) * 1e-9;
    }
    double mib = (double)c->size / (1 << 20);
    double w = bops_median(tw, c->repeat), bw = bops_median(tb, c->repeat);
    double rd = bops_median(tr, c->repeat), brd = bops_median(tbr, c->repeat);
    printf("%-34s %10.1f MiB/s   baseline %-26s %10.1f MiB/s   ratio %.2f\n",
           "checkpoint write (sha256, fsync)", mib / w, "write+fsync+rename", mib / bw, w / bw);
    printf("%-34s %10.1f MiB/s   baseline %-26s %10.1f MiB/s   ratio %.2f\n",
           "checkpoint open+verify+read", mib / rd, "read (page cache)", mib / brd, rd / brd);
    unlink(base);
    unlink(path);
    rc = 0;
out:
    if (rc != 0)
        fprintf(stderr, "gravac-bench ops: checkpoint benchmark failed\n");
    free(a);
    free(b);
    free(r);
    return rc;
}

static int bops_metrics(const struct bops_cfg *c)
{
    struct gv_metrics *reg;
    struct gv_metric *ctr, *sum;
    if (gv_metrics_create(&reg) != GV_OK ||
        gv_metrics_get(reg, GV_METRIC_COUNTER, "c_total", "h", NULL, 0, &ctr) != GV_OK ||
        gv_metrics_get(reg, GV_METRIC_SUMMARY, "s", "h", NULL, 1024, &sum) != GV_OK)
        return 1;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    volatile double plain = 0;
    uint64_t t0 = gv_now_ns();
    for (uint64_t i = 0; i < c->ops; i++) {
        pthread_mutex_lock(&mu);
        plain = plain + 1;
        pthread_mutex_unlock(&mu);
    }
    uint64_t t1 = gv_now_ns();
    for (uint64_t i = 0; i < c->ops; i++)
        gv_metric_inc(ctr, 1);
    uint64_t t2 = gv_now_ns();
    for (uint64_t i = 0; i < c->ops; i++)
        gv_metric_observe(sum, (double)(i & 1023));
    uint64_t t3 = gv_now_ns();
    double base = (double)(t1 - t0) / (double)c->ops, inc = (double)(t2 - t1) / (double)c->ops;
    double obs = (double)(t3 - t2) / (double)c->ops;
    printf("%-34s %10.1f ns/op    baseline %-26s %10.1f ns/op    ratio %.2f\n",
           "metric counter inc", inc, "mutex + add", base, inc / base);
    printf("%-34s %10.1f ns/op    baseline %-26s %10.1f ns/op    ratio %.2f\n",
           "metric summary observe", obs, "mutex + add", base, obs / base);
    /* rendering a server's worth of series: 64 workers x 2 gauges, a few counters, 4 summaries */
    for (int w = 0; w < 64; w++) {
        char id[8];
        struct gv_metric *g;
        snprintf(id, sizeof(id), "%d", w);
        const char *const l[] = {"worker", id, NULL};
        gv_metrics_get(reg, GV_METRIC_GAUGE, "last_seen_seconds", "h", l, 0, &g);
        gv_metrics_get(reg, GV_METRIC_GAUGE, "gain", "h", l, 0, &g);
    }
    double tr[64];
    size_t len = 0;
    for (int k = 0; k < 64; k++) {
        char *text;
        uint64_t a = gv_now_ns();
        if (gv_metrics_render(reg, &text, &len) != GV_OK)
            return 1;
        tr[k] = (double)(gv_now_ns() - a) * 1e-3;
        gv_free(text);
    }
    printf("%-34s %10.1f us       (%zu bytes, 130 series, lock held throughout)\n",
           "metrics render", bops_median(tr, 64), len);
    gv_metrics_destroy(reg);
    return 0;
}

static int bops_auth(const struct bops_cfg *c)
{
    struct gv_auth_secret sec;
    if (gv_auth_secret_set(&sec, "benchmark secret 0123456789abcdef", 33) != GV_OK)
        return 1;
    uint64_t n = c->ops / 100;
    uint8_t msg[92] = {0}, mac[32];
    unsigned int ml;
    uint64_t t0 = gv_now_ns();
    for (uint64_t i = 0; i < n * 2; i++) {
        msg[0] = (uint8_t)i;
        HMAC(EVP_sha256(), sec.key, (int)sec.len, msg, sizeof(msg), mac, &ml);
    }
    uint64_t t1 = gv_now_ns();
    for (uint64_t i = 0; i < n; i++) {
        struct gv_auth cl, sv;
        struct gv_auth_hello h;
        struct gv_auth_challenge ch;
        struct gv_auth_auth au;
        struct gv_auth_welcome w;
        gv_auth_client_init(&cl, &sec, GV_AUTH_ROLE_WORKER, 1);
        gv_auth_server_init(&sv, &sec, 0, UINT32_MAX);
        if (gv_auth_client_hello(&cl, &h) != GV_OK || gv_auth_server_on_hello(&sv, &h, &ch) ||
            gv_auth_client_on_challenge(&cl, &ch, &au) || gv_auth_server_on_auth(&sv, &au, &w) ||
            gv_auth_client_on_welcome(&cl, &w))
            return 1;
    }
    uint64_t t2 = gv_now_ns();
    double base = (double)(t1 - t0) * 2e-3 / (double)n; /* 4 HMACs, in us */
    double hs = (double)(t2 - t1) * 1e-3 / (double)n;
    printf("%-34s %10.2f us       baseline %-26s %10.2f us       ratio %.2f\n",
           "handshake, both sides", hs, "4 x HMAC-SHA256", base, hs / base);
    return 0;
}

int gv_bench_ops_main(int argc, char **argv)
{
    struct bops_cfg c;
    struct gv_opt_table tab = {bops_opts, GV_ARRAY_LEN(bops_opts), &c};
    struct gv_cfg_spec spec = {.program = "gravac-bench ops",
                               .summary = "cost of checkpoints, metrics and handshakes",
                               .section = "bench",
                               .tables = &tab,
                               .n_tables = 1};
    struct gv_cfg *cfg;
    if (gv_cfg_create(&spec, &cfg) != GV_OK)
        return 2;
    if (gv_cfg_load(cfg, argc, argv, environ) != GV_OK) {
        gv_cfg_destroy(cfg);
        return 2;
    }
    if (gv_cfg_help_requested(cfg)) {
        gv_cfg_print_help(cfg, stdout);
        gv_cfg_destroy(cfg);
        return 0;
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/gravac-bench-ops-XXXXXX", c.dir);
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "gravac-bench ops: mkdtemp in %s: %s\n", c.dir, strerror(errno));
        gv_cfg_destroy(cfg);
        return 1;
    }
    gv_log_set_level(GV_LOG_WARN);
    printf("gravac-bench ops: checkpoint %.0f MiB x %d (median), %" PRIu64 " metric ops; "
           "absolute numbers drift on a shared machine, compare the ratios\n",
           (double)c.size / (1 << 20), c.repeat, c.ops);
    int rc = bops_ckpt(&c, dir);
    if (rc == 0)
        rc = bops_metrics(&c);
    if (rc == 0)
        rc = bops_auth(&c);
    rmdir(dir);
    gv_cfg_destroy(cfg);
    return rc;
}
