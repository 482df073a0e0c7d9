/* test_config.c: option tables: every type, precedence default < file < env < flag, sections,
 * every error message (exact text), --help content, the effective listing, table checks, and
 * allocation failures over the whole load. */
#include "check.h"
#include "gv_ops.h"

#include <limits.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

struct tcfg {
    int workers;
    uint64_t seed;
    double lr;
    double momentum;
    bool verbose;
    const char *dir;
    const char *token;
    int policy;
    uint64_t bucket;
    uint64_t timeout;
    struct gv_hostport bind;
    struct gv_hostlist servers;
};

static const char *const policies[] = {"abort", "continue", NULL};

static const struct gv_opt topts[] = {
    {.name = "workers",
     .type = GV_OPT_INT,
     .offset = offsetof(struct tcfg, workers),
     .def = "4",
     .help = "number of workers",
     .group = "cluster",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 64},
    {.name = "seed",
     .type = GV_OPT_UINT64,
     .offset = offsetof(struct tcfg, seed),
     .def = "42",
     .help = "random seed",
     .group = "training"},
    {.name = "lr",
     .type = GV_OPT_DOUBLE,
     .offset = offsetof(struct tcfg, lr),
     .def = "0.1",
     .help = "learning rate",
     .group = "training",
     .flags = GV_OPT_RANGE,
     .min = 0,
     .max = 10},
    /* a bound that is not exact in binary: printed as written, not as 0.99999899999999997 */
    {.name = "momentum",
     .type = GV_OPT_DOUBLE,
     .offset = offsetof(struct tcfg, momentum),
     .def = "0.9",
     .help = "momentum",
     .group = "training",
     .flags = GV_OPT_RANGE,
     .min = 0,
     .max = 0.999999},
    {.name = "verbose",
     .type = GV_OPT_BOOL,
     .offset = offsetof(struct tcfg, verbose),
     .def = "false",
     .help = "say more"},
    {.name = "checkpoint-dir",
     .type = GV_OPT_STRING,
     .offset = offsetof(struct tcfg, dir),
     .def = "/tmp/ck",
     .help = "where checkpoints go",
     .group = "checkpoints"},
    {.name = "token",
     .type = GV_OPT_STRING,
     .offset = offsetof(struct tcfg, token),
     .def = "t0",
     .help = "a secret token",
     .flags = GV_OPT_SECRET},
    {.name = "policy",
     .type = GV_OPT_ENUM,
     .offset = offsetof(struct tcfg, policy),
     .def = "abort",
     .help = "dead worker policy",
     .group = "cluster",
     .choices = policies},
    {.name = "bucket-size",
     .type = GV_OPT_SIZE,
     .offset = offsetof(struct tcfg, bucket),
     .def = "4M",
     .help = "bucket size",
     .group = "training",
     .flags = GV_OPT_RANGE,
     .min = 1024,
     .max = 1073741824.0},
    {.name = "peer-timeout",
     .type = GV_OPT_DURATION,
     .offset = offsetof(struct tcfg, timeout),
     .def = "5s",
     .help = "dead after this",
     .group = "cluster",
     .flags = GV_OPT_RANGE,
     .min = 0.01,
     .max = 60},
    {.name = "bind",
     .type = GV_OPT_ADDR,
     .offset = offsetof(struct tcfg, bind),
     .def = "127.0.0.1:0",
     .help = "listen address",
     .group = "cluster"},
    {.name = "servers",
     .type = GV_OPT_HOSTLIST,
     .offset = offsetof(struct tcfg, servers),
     .def = "",
     .help = "server addresses",
     .group = "cluster",
     .flags = GV_OPT_RANGE,
     .min = 0,
     .max = 3},
};

static const char *const others[] = {"worker", "bench", NULL};

/* ---------------------------------------------------------------- log capture */

static int n_errors;
static char last_error[1024];

static void capture(enum gv_log_level level, const char *line, void *arg)
{
    (void)arg;
    if (level == GV_LOG_ERROR) {
        n_errors++;
        snprintf(last_error, sizeof(last_error), "%s", line);
    }
}

static char tmpdir[] = "/tmp/gv_test_config_XXXXXX";

static const char *write_file(const char *name, const char *text, size_t len)
{
    static char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return NULL;
    fwrite(text, 1, len, f);
    fclose(f);
    return path;
}

static const char *write_text(const char *name, const char *text)
{
    return write_file(name, text, strlen(text));
}

static const struct gv_opt_table ttable = {.opts = topts, .n = GV_ARRAY_LEN(topts)};

static gv_status_t load(struct gv_cfg **cfg_p, struct tcfg *out, const char *const *argv,
                        const char *const *envp)
{
    static struct gv_opt_table tab;
    static struct gv_cfg_spec spec;
    tab = ttable;
    tab.dst = out;
    spec = (struct gv_cfg_spec){.program = "gravac-test",
                                .summary = "a test program",
                                .section = "server",
                                .other_sections = others,
                                .tables = &tab,
                                .n_tables = 1};
    memset(out, 0, sizeof(*out));
    int argc = 0;
    while (argv[argc] != NULL)
        argc++;
    n_errors = 0;
    last_error[0] = '\0';
    gv_status_t status = gv_cfg_create(&spec, cfg_p);
    if (status != GV_OK)
        return status;
    return gv_cfg_load(*cfg_p, argc, (char *const *)argv, (char *const *)envp);
}

/* Loads, expects failure `want` with exactly the message `msg` logged once. */
static void expect_error(const char *const *argv, const char *const *envp, gv_status_t want,
                         const char *msg, int line)
{
    struct gv_cfg *cfg = NULL;
    struct tcfg c;
    gv_status_t status = load(&cfg, &c, argv, envp);
    GV_CHECK_MSG(status == want, "line %d: got %s, want %s", line, gv_status_str(status),
                 gv_status_str(want));
    if (cfg != NULL) {
        GV_CHECK_MSG(strcmp(gv_cfg_error(cfg), msg) == 0,
                     "line %d: message\n  got  '%s'\n  want "
                     "'%s'",
                     line, gv_cfg_error(cfg), msg);
    }
    GV_CHECK_MSG(n_errors == 1, "line %d: %d error lines logged", line, n_errors);
    GV_CHECK_MSG(strcmp(last_error, msg) == 0, "line %d: logged '%s'", line, last_error);
    gv_cfg_destroy(cfg);
}

#define ARGV(...) ((const char *const[]){"gravac-test", __VA_ARGS__, NULL})
#define NOARGS ((const char *const[]){"gravac-test", NULL})
#define ENV(...) ((const char *const[]){__VA_ARGS__, NULL})
#define EXPECT_ERR(argv, env, want, msg) expect_error(argv, env, want, msg, __LINE__)

/* ---------------------------------------------------------------- tests */

static void test_defaults(void)
{
    struct gv_cfg *cfg;
    struct tcfg c;
    GV_CHECK_OK(load(&cfg, &c, NOARGS, NULL));
    GV_CHECK_EQ(c.workers, 4);
    GV_CHECK_EQ(c.seed, 42);
    GV_CHECK_NEAR(c.lr, 0.1, 0, 0);
    GV_CHECK(!c.verbose);
    GV_CHECK_STREQ(c.dir, "/tmp/ck");
    GV_CHECK_EQ(c.policy, 0);
    GV_CHECK_EQ(c.bucket, 4u << 20);
    GV_CHECK_EQ(c.timeout, 5000000000ull);
    GV_CHECK_STREQ(c.bind.host, "127.0.0.1");
    GV_CHECK_EQ(c.bind.port, 0);
    GV_CHECK_EQ(c.servers.n, 0);
    GV_CHECK(gv_cfg_file(cfg) == NULL);
    GV_CHECK(!gv_cfg_help_requested(cfg));
    enum gv_cfg_source src;
    const char *where, *text;
    GV_CHECK_OK(gv_cfg_source(cfg, "lr", &src, &where, &text));
    GV_CHECK_EQ(src, GV_CFG_SRC_DEFAULT);
    GV_CHECK_STREQ(where, "built-in default");
    GV_CHECK_STREQ(text, "0.1");
    GV_CHECK_STATUS(gv_cfg_source(cfg, "nope", &src, NULL, NULL), GV_ERR_INVAL);
    GV_CHECK_EQ(n_errors, 0);
    gv_cfg_destroy(cfg);
}

static void test_precedence(void)
{
    struct gv_cfg *cfg;
    struct tcfg c;
    char cfgarg[PATH_MAX + 16];
    const char *path = write_text("prec.ini", "; comment\n# another\nlr = 0.2\nworkers = 8\n"
                                              "seed = 7\n\n[server]\nbucket-size = 64K\n");
    snprintf(cfgarg, sizeof(cfgarg), "--config=%s", path);
    GV_CHECK_OK(
        load(&cfg, &c, ARGV(cfgarg, "--lr=0.4"), ENV("GV_LR=0.3", "GV_WORKERS=16", "UNRELATED=1")));
    GV_CHECK_NEAR(c.lr, 0.4, 0, 0);
    GV_CHECK_EQ(c.workers, 16);
    GV_CHECK_EQ(c.seed, 7);
    GV_CHECK_EQ(c.bucket, 64 * 1024);
    GV_CHECK_EQ(c.policy, 0);
    GV_CHECK_STREQ(gv_cfg_file(cfg), path);

    enum gv_cfg_source src;
    const char *where;
    char want[PATH_MAX + 32];
    GV_CHECK_OK(gv_cfg_source(cfg, "lr", &src, &where, NULL));
    GV_CHECK_EQ(src, GV_CFG_SRC_ARGV);
    GV_CHECK_STREQ(where, "command line");
    GV_CHECK_OK(gv_cfg_source(cfg, "workers", &src, &where, NULL));
    GV_CHECK_EQ(src, GV_CFG_SRC_ENV);
    GV_CHECK_STREQ(where, "environment variable GV_WORKERS");
    GV_CHECK_OK(gv_cfg_source(cfg, "seed", &src, &where, NULL));
    GV_CHECK_EQ(src, GV_CFG_SRC_FILE);
    snprintf(want, sizeof(want), "config file %s line 5", path);
    GV_CHECK_STREQ(where, want);
    GV_CHECK_OK(gv_cfg_source(cfg, "bucket-size", &src, &where, NULL));
    snprintf(want, sizeof(want), "config file %s line 8", path);
    GV_CHECK_STREQ(where, want);
    gv_cfg_destroy(cfg);

    /* GV_CONFIG names the file when --config does not; --config (separate arg) wins over it */
    char envcfg[PATH_MAX + 16];
    snprintf(envcfg, sizeof(envcfg), "GV_CONFIG=%s", path);
    GV_CHECK_OK(load(&cfg, &c, NOARGS, ENV(envcfg)));
    GV_CHECK_EQ(c.seed, 7);
    gv_cfg_destroy(cfg);
    const char *other = write_text("other.ini", "seed = 9\n");
    GV_CHECK_OK(load(&cfg, &c, ARGV("--config", other), ENV(envcfg)));
    GV_CHECK_EQ(c.seed, 9);
    GV_CHECK_EQ(c.workers, 4);
    gv_cfg_destroy(cfg);
    /* GV_CONFIG= (empty) means no file */
    GV_CHECK_OK(load(&cfg, &c, NOARGS, ENV("GV_CONFIG=")));
    GV_CHECK(gv_cfg_file(cfg) == NULL);
    gv_cfg_destroy(cfg);
}

static void test_sections(void)
{
    struct gv_cfg *cfg;
    struct tcfg c;
    /* own section wins over common ones wherever it appears; other programs' sections are not
     * read (their unknown keys are theirs to refuse); [gravac] is common; '_' == '-'; quotes */
    const char *path = write_text("sect.ini", "[server]\nlr = 0.5\n[gravac]\nlr = 0.2\n"
                                              "checkpoint_dir = \"/data/ck dir\"\n"
                                              "[worker]\nbatch = 32\nlr = 9\n"
                                              "[BENCH]\nwhatever = 1\n");
    GV_CHECK_OK(load(&cfg, &c, ARGV("--config", path), NULL));
    GV_CHECK_NEAR(c.lr, 0.5, 0, 0);
    GV_CHECK_STREQ(c.dir, "/data/ck dir");
    gv_cfg_destroy(cfg);

    /* continuation lines extend a value (long host lists); inline ';' comments */
    path = write_text("cont.ini", "servers = a:1, b:2 ; the first two\n"
                                  "  c:3\nworkers = 2\n");
    GV_CHECK_OK(load(&cfg, &c, ARGV("--config", path), NULL));
    GV_CHECK_EQ(c.servers.n, 3);
    if (c.servers.n == 3) {
        GV_CHECK_STREQ(c.servers.v[2].host, "c");
        GV_CHECK_EQ(c.servers.v[2].port, 3);
    }
    GV_CHECK_EQ(c.workers, 2);
    gv_cfg_destroy(cfg);
}

static void test_types(void)
{
    struct gv_cfg *cfg;
    struct tcfg c;
    GV_CHECK_OK(load(&cfg, &c,
                     ARGV("--workers", "7", "--seed=18446744073709551615", "--lr", "1e-3",
                          "--verbose", "--checkpoint-dir=", "--policy=CONTINUE",
                          "--bucket-size=0.5G", "--peer-timeout=250ms", "--bind=[::1]:8080",
                          "--servers=h1:7000,10.0.0.2:7001 [fe80::1%eth0]:7002"),
                     NULL));
    GV_CHECK_EQ(c.workers, 7);
    GV_CHECK_EQ(c.seed == UINT64_MAX, 1);
    GV_CHECK_NEAR(c.lr, 1e-3, 0, 0);
    GV_CHECK(c.verbose);
    GV_CHECK_STREQ(c.dir, "");
    GV_CHECK_EQ(c.policy, 1);
    GV_CHECK_EQ(c.bucket, 536870912ull);
    GV_CHECK_EQ(c.timeout, 250000000ull);
    GV_CHECK_STREQ(c.bind.host, "::1");
    GV_CHECK_EQ(c.bind.port, 8080);
    GV_CHECK_EQ(c.servers.n, 3);
    if (c.servers.n == 3) {
        GV_CHECK_STREQ(c.servers.v[0].host, "h1");
        GV_CHECK_EQ(c.servers.v[0].port, 7000);
        GV_CHECK_STREQ(c.servers.v[1].host, "10.0.0.2");
        GV_CHECK_STREQ(c.servers.v[2].host, "fe80::1%eth0");
        GV_CHECK_EQ(c.servers.v[2].port, 7002);
    }
    gv_cfg_destroy(cfg);

    /* booleans every way; durations and sizes with every unit */
    GV_CHECK_OK(load(&cfg, &c,
                     ARGV("--no-verbose", "--peer-timeout=0.75min", "--bucket-size=64KiB"),
                     ENV("GV_VERBOSE=yes")));
    GV_CHECK(!c.verbose);
    GV_CHECK_EQ(c.timeout, 45000000000ull);
    GV_CHECK_EQ(c.bucket, 65536);
    gv_cfg_destroy(cfg);
    GV_CHECK_OK(load(&cfg, &c, ARGV("--verbose=off"), ENV("GV_VERBOSE=1", "GV_WORKERS=64")));
    GV_CHECK(!c.verbose);
    GV_CHECK_EQ(c.workers, 64);
    gv_cfg_destroy(cfg);
    GV_CHECK_OK(load(&cfg, &c, ARGV("--workers=1"), ENV("GV_VERBOSE=On")));
    GV_CHECK(c.verbose);
    GV_CHECK_EQ(c.workers, 1);
    gv_cfg_destroy(cfg);

    uint64_t v;
    GV_CHECK_OK(gv_parse_size("0", &v));
    GV_CHECK_EQ(v, 0);
    GV_CHECK_OK(gv_parse_size("2t", &v));
    GV_CHECK_EQ(v, 2ull << 40);
    GV_CHECK_OK(gv_parse_size("16384", &v));
    GV_CHECK_EQ(v, 16384);
    GV_CHECK_OK(gv_parse_size("3MB", &v));
    GV_CHECK_EQ(v, 3u << 20);
    GV_CHECK_STATUS(gv_parse_size("16E", &v), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_parse_size("-1", &v), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_parse_size("", &v), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_parse_size("99999999999T", &v), GV_ERR_INVAL); /* overflows u64 */
    GV_CHECK_OK(gv_parse_duration("0", &v));
    GV_CHECK_EQ(v, 0);
    GV_CHECK_OK(gv_parse_duration("7ns", &v));
    GV_CHECK_EQ(v, 7);
    GV_CHECK_OK(gv_parse_duration("20us", &v));
    GV_CHECK_EQ(v, 20000);
    GV_CHECK_OK(gv_parse_duration("2h", &v));
    GV_CHECK_EQ(v, 7200000000000ull);
    GV_CHECK_STATUS(gv_parse_duration("5", &v), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_parse_duration("5 s", &v), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_parse_duration("-5s", &v), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_parse_duration("5m", &v), GV_ERR_INVAL);
    struct gv_hostport hp;
    GV_CHECK_OK(gv_parse_hostport("node-1.cluster:65535", &hp));
    GV_CHECK_STREQ(hp.host, "node-1.cluster");
    GV_CHECK_EQ(hp.port, 65535);
    GV_CHECK_STATUS(gv_parse_hostport("::1:80", &hp), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_parse_hostport("[::1]80", &hp), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_parse_hostport(":80", &hp), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_parse_hostport("h:", &hp), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_parse_hostport("h:123456", &hp), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_parse_hostport("h/x:1", &hp), GV_ERR_INVAL);
}

static void test_errors(void)
{
    const gv_status_t E = GV_ERR_INVAL;
    /* values, from each source */
    EXPECT_ERR(ARGV("--lr=abc"), NULL, E, "--lr: 'abc' is not a number (command line)");
    EXPECT_ERR(ARGV("--lr", "abc"), NULL, E, "--lr: 'abc' is not a number (command line)");
    EXPECT_ERR(NOARGS, ENV("GV_LR=abc"), E,
               "--lr: 'abc' is not a number (environment variable GV_LR)");
    EXPECT_ERR(NOARGS, ENV("GV_LR="), E, "--lr: '' is not a number (environment variable GV_LR)");
    EXPECT_ERR(ARGV("--lr=11"), NULL, E,
               "--lr: '11' is out of range (allowed 0 to 10) "
               "(command line)");
    EXPECT_ERR(ARGV("--lr=nan"), NULL, E, "--lr: 'nan' is not a finite number (command line)");
    EXPECT_ERR(ARGV("--workers=1.5"), NULL, E,
               "--workers: '1.5' is not an integer "
               "(command line)");
    EXPECT_ERR(ARGV("--workers=x1"), NULL, E, "--workers: 'x1' is not a number (command line)");
    EXPECT_ERR(ARGV("--workers=0"), NULL, E,
               "--workers: '0' is out of range (allowed 1 to 64) "
               "(command line)");
    EXPECT_ERR(ARGV("--momentum=1"), NULL, E,
               "--momentum: '1' is out of range (allowed 0 to "
               "0.999999) (command line)");
    EXPECT_ERR(ARGV("--workers=99999999999"), NULL, E,
               "--workers: '99999999999' is out of range (allowed -2147483648 to 2147483647) "
               "(command line)");
    EXPECT_ERR(ARGV("--seed=-1"), NULL, E,
               "--seed: '-1' is negative (allowed 0 to "
               "18446744073709551615) (command line)");
    EXPECT_ERR(ARGV("--seed=18446744073709551616"), NULL, E,
               "--seed: '18446744073709551616' is out of range (allowed 0 to "
               "18446744073709551615) (command line)");
    EXPECT_ERR(ARGV("--verbose=maybe"), NULL, E,
               "--verbose: 'maybe' is not a boolean (use "
               "true/false, yes/no, on/off or 1/0) "
               "(command line)");
    EXPECT_ERR(ARGV("--policy=retry"), NULL, E,
               "--policy: 'retry' is not one of: abort, "
               "continue (command line)");
    EXPECT_ERR(ARGV("--bucket-size=12X"), NULL, E,
               "--bucket-size: '12X' is not a size (bytes, with an optional K, M, G or T "
               "suffix) (command line)");
    EXPECT_ERR(ARGV("--bucket-size=2G"), NULL, E,
               "--bucket-size: '2G' is out of range (allowed 1024 to 1073741824 bytes) "
               "(command line)");
    EXPECT_ERR(ARGV("--peer-timeout=5"), NULL, E,
               "--peer-timeout: '5' needs a unit (ns, us, ms, s, min or h) (command line)");
    EXPECT_ERR(ARGV("--peer-timeout=soon"), NULL, E,
               "--peer-timeout: 'soon' is not a duration (a number and a unit: ns, us, ms, s, "
               "min, h) (command line)");
    EXPECT_ERR(ARGV("--peer-timeout=2min"), NULL, E,
               "--peer-timeout: '2min' is out of range (allowed 10ms to 60s) (command line)");
    EXPECT_ERR(ARGV("--bind=localhost"), NULL, E,
               "--bind: 'localhost' is not host:port (the port is missing) (command line)");
    EXPECT_ERR(ARGV("--bind=::1:80"), NULL, E,
               "--bind: '::1:80' is not host:port (write an "
               "IPv6 address as [::1]:port) (command line)");
    EXPECT_ERR(ARGV("--bind=h:70000"), NULL, E,
               "--bind: 'h:70000' has an invalid port (allowed "
               "0 to 65535) (command line)");
    EXPECT_ERR(ARGV("--servers=a:1,,b:2"), NULL, E,
               "--servers: 'a:1,,b:2' has an empty entry (command line)");
    EXPECT_ERR(ARGV("--servers=a:1,"), NULL, E,
               "--servers: 'a:1,' has an empty entry (command line)");
    EXPECT_ERR(ARGV("--servers=a:1,b:0"), NULL, E,
               "--servers: 'b:0' has an invalid port (allowed 1 to 65535) (command line)");
    EXPECT_ERR(ARGV("--servers=a:1 a:1"), NULL, E,
               "--servers: 'a:1 a:1' lists 'a:1' twice (command line)");
    EXPECT_ERR(ARGV("--servers=a:1,b:1,c:1,d:1"), NULL, E,
               "--servers: 'a:1,b:1,c:1,d:1' has 4 entries (allowed 0 to 3 entries) "
               "(command line)");
    /* flags */
    EXPECT_ERR(ARGV("--lrr=1"), NULL, E,
               "unknown option '--lrr' (command line); did you mean "
               "--lr?");
    EXPECT_ERR(ARGV("--lr", "-0.5"), NULL, E,
               "--lr: '-0.5' is out of range (allowed 0 to 10) "
               "(command line)");
    EXPECT_ERR(ARGV("--"), NULL, E, "unexpected argument '--' (command line)");
    EXPECT_ERR(ARGV("--frobnicate"), NULL, E, "unknown option '--frobnicate' (command line)");
    EXPECT_ERR(ARGV("-v"), NULL, E, "unknown option '-v' (command line); options start with --");
    EXPECT_ERR(ARGV("extra"), NULL, E, "unexpected argument 'extra' (command line)");
    EXPECT_ERR(ARGV("--lr"), NULL, E, "--lr: needs a value (command line)");
    EXPECT_ERR(ARGV("--lr", "--workers=2"), NULL, E,
               "--lr: needs a value, got the option '--workers=2' (write --lr=--workers=2 if you "
               "mean it) (command line)");
    EXPECT_ERR(ARGV("--no-verbose=1"), NULL, E, "--no-verbose: takes no value (command line)");
    EXPECT_ERR(ARGV("--no-lr"), NULL, E, "unknown option '--no-lr' (command line)");
    EXPECT_ERR(ARGV("--config"), NULL, E, "--config: needs a file name (command line)");
    EXPECT_ERR(ARGV("--config="), NULL, E, "--config: empty file name (command line)");
}

static void test_file_errors(void)
{
    const gv_status_t E = GV_ERR_INVAL;
    char msg[PATH_MAX + 200];
    const char *p;

#define FILE_ERR(name, text, fmt_tail, ...)                                                        \
    do {                                                                                           \
        p = write_text(name, text);                                                                \
        snprintf(msg, sizeof(msg), "config file %s " fmt_tail, p, __VA_ARGS__);                    \
        EXPECT_ERR(ARGV("--config", p), NULL, E, msg);                                             \
    } while (0)

    FILE_ERR("e1.ini", "lr = 0.1\n\n\nlrr = 2\n",
             "line %d: unknown key 'lrr'; did you mean "
             "'lr'?",
             4);
    FILE_ERR("e2.ini", "[server]\nworkers = 3\nworkers = 4\n",
             "line %d: duplicate key "
             "'workers' (first set on line 2)",
             3);
    FILE_ERR("e3.ini", "lr = 0.1\n[srever]\nlr = 1\n", "line %d: unknown section [srever]", 3);
    FILE_ERR("e4.ini", "lr = 0.1\nthis line has no equals sign\n",
             "line %d: expected 'key = value' or '[section]'", 2);
    FILE_ERR("e5.ini", "[server\nlr = 1\n", "line %d: expected 'key = value' or '[section]'", 1);
    /* a bad value in the file: the message names the option, the value, the file and line */
    p = write_text("e6.ini", "seed = 1\nlr = 0.1 # not a comment here\n");
    snprintf(msg, sizeof(msg),
             "--lr: '0.1 # not a comment here' is not a number (config file %s "
             "line 2)",
             p);
    EXPECT_ERR(ARGV("--config", p), NULL, E, msg);

    char longline[400];
    memset(longline, 'x', sizeof(longline));
    memcpy(longline, "checkpoint-dir = ", 17);
    longline[sizeof(longline) - 2] = '\n';
    longline[sizeof(longline) - 1] = '\0';
    p = write_text("e7.ini", longline);
    snprintf(msg, sizeof(msg),
             "config file %s line 1: is longer than 198 bytes (continue a long "
             "value on indented lines)",
             p);
    EXPECT_ERR(ARGV("--config", p), NULL, E, msg);

    p = write_file("e8.ini", "lr = 1\n\0x = 2\n", 14);
    snprintf(msg, sizeof(msg), "config file %s: contains a NUL byte (not a text file)", p);
    EXPECT_ERR(ARGV("--config", p), NULL, E, msg);

    snprintf(msg, sizeof(msg), "config file %s/missing.ini: No such file or directory", tmpdir);
    char missing[PATH_MAX];
    snprintf(missing, sizeof(missing), "%s/missing.ini", tmpdir);
    EXPECT_ERR(ARGV("--config", missing), NULL, GV_ERR_IO, msg);
    snprintf(msg, sizeof(msg), "config file %s: not a regular file", tmpdir);
    EXPECT_ERR(ARGV("--config", tmpdir), NULL, GV_ERR_IO, msg);
    char fifo[PATH_MAX];
    snprintf(fifo, sizeof(fifo), "%s/fifo.ini", tmpdir);
    GV_CHECK(mkfifo(fifo, 0600) == 0);
    snprintf(msg, sizeof(msg), "config file %s: not a regular file", fifo);
    EXPECT_ERR(ARGV("--config", fifo), NULL, GV_ERR_IO, msg);
    /* a key of the program's own section is checked like a common one */
    FILE_ERR("e9.ini", "[server]\nbogus = 1\n", "line %d: unknown key 'bogus'%s", 2, "");
    /* 'config' and 'help' are not keys */
    FILE_ERR("e10.ini", "config = other.ini\n", "line %d: unknown key 'config'%s", 1, "");
#undef FILE_ERR
}

static void test_required(void)
{
    static struct {
        struct gv_hostlist servers;
        int n;
    } r;
    static const struct gv_opt ropts[] = {
        {.name = "servers",
         .type = GV_OPT_HOSTLIST,
         .offset = 0,
         .help = "servers",
         .flags = GV_OPT_REQUIRED | GV_OPT_RANGE,
         .min = 1,
         .max = 8},
    };
    struct gv_opt_table tab = {.opts = ropts, .n = 1, .dst = &r};
    struct gv_cfg_spec spec = {.program = "w", .tables = &tab, .n_tables = 1};
    struct gv_cfg *cfg;
    char *argv0[] = {"w", NULL};
    GV_CHECK_OK(gv_cfg_create(&spec, &cfg));
    n_errors = 0;
    GV_CHECK_STATUS(gv_cfg_load(cfg, 1, argv0, NULL), GV_ERR_INVAL);
    GV_CHECK_STREQ(gv_cfg_error(cfg), "--servers: required but not set (give --servers, "
                                      "GV_SERVERS or 'servers =' in the config file)");
    GV_CHECK_EQ(n_errors, 1);
    gv_cfg_destroy(cfg);
    char *argv1[] = {"w", "--servers", "", NULL};
    GV_CHECK_OK(gv_cfg_create(&spec, &cfg));
    GV_CHECK_STATUS(gv_cfg_load(cfg, 3, argv1, NULL), GV_ERR_INVAL);
    GV_CHECK_STREQ(gv_cfg_error(cfg), "--servers: '' has 0 entries (allowed 1 to 8 entries) "
                                      "(command line)");
    gv_cfg_destroy(cfg);
    char *envp[] = {"GV_SERVERS=s0:7000 s1:7000", NULL};
    GV_CHECK_OK(gv_cfg_create(&spec, &cfg));
    GV_CHECK_OK(gv_cfg_load(cfg, 1, argv0, envp));
    GV_CHECK_EQ(r.servers.n, 2);
    gv_cfg_destroy(cfg);
}

static void test_table_checks(void)
{
    struct tcfg c;
    struct {
        struct gv_opt opt;
        const char *msg;
    } bad[] = {
        {{.name = "Lr", .type = GV_OPT_DOUBLE}, "option table: invalid option name 'Lr'"},
        {{.name = "no-sync", .type = GV_OPT_BOOL}, "option table: invalid option name 'no-sync'"},
        {{.name = "help", .type = GV_OPT_BOOL}, "option table: invalid option name 'help'"},
        {{.name = "a_b", .type = GV_OPT_BOOL}, "option table: invalid option name 'a_b'"},
        {{.name = "pick", .type = GV_OPT_ENUM}, "--pick: an enum option needs choices"},
        {{.name = "x", .type = GV_OPT_INT, .def = "zz"},
         "--x: the built-in default 'zz' is not a number"},
        {{.name = "y", .type = GV_OPT_INT, .def = "9", .flags = GV_OPT_RANGE, .min = 0, .max = 5},
         "--y: the built-in default '9' is out of range (allowed 0 to 5)"},
        {{.name = "z", .type = GV_OPT_INT, .flags = GV_OPT_RANGE, .min = 5, .max = 0},
         "--z: min > max in the option table"},
    };
    for (size_t i = 0; i < GV_ARRAY_LEN(bad); i++) {
        struct gv_opt_table tab = {.opts = &bad[i].opt, .n = 1, .dst = &c};
        struct gv_cfg_spec spec = {.program = "p", .tables = &tab, .n_tables = 1};
        struct gv_cfg *cfg = NULL;
        n_errors = 0;
        GV_CHECK_STATUS(gv_cfg_create(&spec, &cfg), GV_ERR_INVAL);
        GV_CHECK(cfg == NULL);
        GV_CHECK_MSG(strcmp(last_error, bad[i].msg) == 0, "table %zu: '%s'", i, last_error);
        GV_CHECK_EQ(n_errors, 1);
    }
    /* the same name in two tables */
    struct gv_opt_table two[2] = {{.opts = topts, .n = 2, .dst = &c},
                                  {.opts = topts + 1, .n = 1, .dst = &c}};
    struct gv_cfg_spec spec = {.program = "p", .tables = two, .n_tables = 2};
    struct gv_cfg *cfg = NULL;
    GV_CHECK_STATUS(gv_cfg_create(&spec, &cfg), GV_ERR_INVAL);
    GV_CHECK_STREQ(last_error, "option table: --seed is defined twice");
}

/* Reads a whole memstream-captured text. */
static char *capture_output(struct gv_cfg *cfg, bool help)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL)
        return NULL;
    if (help)
        gv_cfg_print_help(cfg, f);
    else
        gv_cfg_print_effective(cfg, f);
    fclose(f);
    return buf;
}

static void test_help(void)
{
    struct gv_cfg *cfg;
    struct tcfg c;
    /* --help wins over a bad value given with it, and nothing else is read */
    GV_CHECK_OK(load(&cfg, &c, ARGV("--lr=abc", "--help"), ENV("GV_WORKERS=zz")));
    GV_CHECK(gv_cfg_help_requested(cfg));
    GV_CHECK_EQ(n_errors, 0);
    char *h = capture_output(cfg, true);
    GV_CHECK(h != NULL);
    if (h != NULL) {
        static const char *const want[] = {
            "usage: gravac-test [--config FILE] [--OPTION=VALUE ...]\na test program\n",
            "then [server]",
            "GV_<NAME>",
            "  -h, --help ",
            "  --config=FILE ",
            "\ncluster:\n",
            "\ntraining:\n",
            "\ncheckpoints:\n",
            "\noptions:\n",
            "  --workers=N                  number of workers\n",
            "(integer, default 4, range 1 to 64, env GV_WORKERS)",
            "(unsigned integer, default 42, env GV_SEED)",
            "(number, default 0.1, range 0 to 10, env GV_LR)",
            "(number, default 0.9, range 0 to 0.999999, env GV_MOMENTUM)",
            "  --[no-]verbose               say more\n",
            "(boolean, default false, env GV_VERBOSE)",
            "(string, default /tmp/ck, env GV_CHECKPOINT_DIR)",
            "(one of abort|continue, default abort, env GV_POLICY)",
            "(size, default 4M, range 1024 to 1073741824 bytes, env GV_BUCKET_SIZE)",
            "(duration, default 5s, range 10ms to 60s, env GV_PEER_TIMEOUT)",
            "--bind=HOST:PORT",
            "(host:port, default 127.0.0.1:0, env GV_BIND)",
            "--servers=HOST:PORT,...",
            "(host:port list, default \"\", range 0 to 3 entries, env GV_SERVERS)",
        };
        for (size_t i = 0; i < GV_ARRAY_LEN(want); i++)
            GV_CHECK_MSG(strstr(h, want[i]) != NULL, "help lacks \"%s\"", want[i]);
        /* the groups keep the order of first appearance: cluster before training */
        GV_CHECK(strstr(h, "\ncluster:") < strstr(h, "\ntraining:"));
        for (size_t i = 0; i < GV_ARRAY_LEN(topts); i++) {
            char flag[80];
            snprintf(flag, sizeof(flag), "%s", topts[i].name);
            GV_CHECK_MSG(strstr(h, flag) != NULL, "help lacks option %s", flag);
        }
        free(h);
    }
    gv_cfg_destroy(cfg);
    GV_CHECK_OK(load(&cfg, &c, ARGV("-h"), NULL));
    GV_CHECK(gv_cfg_help_requested(cfg));
    gv_cfg_destroy(cfg);
    /* a value that looks like a help flag is a value */
    GV_CHECK_OK(load(&cfg, &c, ARGV("--checkpoint-dir", "-h"), NULL));
    GV_CHECK(!gv_cfg_help_requested(cfg));
    GV_CHECK_STREQ(c.dir, "-h");
    gv_cfg_destroy(cfg);
    GV_CHECK_OK(load(&cfg, &c, ARGV("--checkpoint-dir=--help"), NULL));
    GV_CHECK(!gv_cfg_help_requested(cfg));
    GV_CHECK_STREQ(c.dir, "--help");
    gv_cfg_destroy(cfg);
}

static void test_effective(void)
{
    struct gv_cfg *cfg;
    struct tcfg c;
    const char *path = write_text("eff.ini", "seed = 11\n");
    GV_CHECK_OK(load(&cfg, &c, ARGV("--config", path, "--token=hunter2", "--lr=0.25"),
                     ENV("GV_WORKERS=5")));
    char *e = capture_output(cfg, false);
    GV_CHECK(e != NULL);
    if (e != NULL) {
        char want[PATH_MAX + 100];
        GV_CHECK(strstr(e, "lr                       = 0.25   (command line)\n") != NULL);
        GV_CHECK(strstr(e, "workers                  = 5   (environment variable GV_WORKERS)\n"));
        snprintf(want, sizeof(want), "seed                     = 11   (config file %s line 1)\n",
                 path);
        GV_CHECK(strstr(e, want) != NULL);
        GV_CHECK(strstr(e, "policy                   = abort   (built-in default)\n") != NULL);
        GV_CHECK(strstr(e, "servers                  = \"\"   (built-in default)\n") != NULL);
        GV_CHECK(strstr(e, "token                    = (hidden)   (command line)\n") != NULL);
        GV_CHECK(strstr(e, "hunter2") == NULL);
        size_t lines = 0;
        for (const char *s = e; *s; s++)
            lines += *s == '\n';
        GV_CHECK_EQ(lines, GV_ARRAY_LEN(topts));
        free(e);
    }
    gv_cfg_destroy(cfg);
}

/* Fails each allocation of a full load in turn: every one must end in GV_ERR_NOMEM or GV_OK,
 * never a crash or a leak (ASan checks the latter). */
static void test_alloc_failures(void)
{
    const char *path = write_text("nomem.ini", "[server]\nservers = a:1, b:2\nlr = 0.3\n"
                                               "[gravac]\ncheckpoint-dir = /x\n");
    int nomem = 0;
    for (uint64_t n = 1; n < 400; n++) {
        struct gv_cfg *cfg = NULL;
        struct tcfg c;
        gv_alloc_fail_nth(n);
        gv_status_t status =
            load(&cfg, &c, ARGV("--config", path, "--servers=x:1 y:2", "--token=abc"),
                 ENV("GV_SEED=3", "GV_CHECKPOINT_DIR=/y"));
        gv_alloc_fail_nth(0);
        GV_CHECK_MSG(status == GV_OK || status == GV_ERR_NOMEM, "n=%llu: %s", (unsigned long long)n,
                     gv_status_str(status));
        if (status == GV_OK) {
            GV_CHECK_EQ(c.servers.n, 2);
            GV_CHECK_STREQ(c.dir, "/y");
        } else {
            nomem++;
        }
        gv_cfg_destroy(cfg);
        if (status == GV_OK && n > 10)
            break; /* past the last allocation */
    }
    GV_CHECK(nomem > 10);
}

int main(void)
{
    if (mkdtemp(tmpdir) == NULL)
        GV_SKIP("mkdtemp failed");
    gv_log_set_cb(capture, NULL);
    test_defaults();
    test_precedence();
    test_sections();
    test_types();
    test_errors();
    test_file_errors();
    test_required();
    test_table_checks();
    test_help();
    test_effective();
    test_alloc_failures();
    gv_log_set_cb(NULL, NULL);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return gv_check_summary();
}
