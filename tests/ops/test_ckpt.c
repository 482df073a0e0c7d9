/* test_ckpt.c: checkpoint files: round trip, newest-file selection and pruning, leftovers of a
 * crash, a write that fails half way, every flipped byte and every truncation refused, wrong
 * identity and version refused with the field named, fallback, bad arguments, allocation
 * failures. */
#include "check.h"
#include "gv_ops.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static int n_errors;
static char last_log[1024];

static void capture(enum gv_log_level level, const char *line, void *arg)
{
    (void)arg;
    if (level <= GV_LOG_WARN) {
        n_errors += level == GV_LOG_ERROR;
        snprintf(last_log, sizeof(last_log), "%s", line);
    }
}

static char root[] = "/tmp/gv_test_ckpt_XXXXXX";

static const char *subdir(const char *name)
{
    static char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", root, name);
    mkdir(path, 0700);
    return path;
}

static const struct gv_ckpt_ident ident = {
    .model_fingerprint = 0x1234abcd5678ef00ull,
    .shard_offset = 1000,
    .shard_length = 250,
    .shard_index = 2,
    .num_servers = 4,
};

static float params[250], momentum[250];
static const uint8_t ctrl[13] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};

static gv_status_t write_iter(const char *dir, const struct gv_ckpt_ident *id, uint64_t it,
                              int keep, char *path, size_t path_len)
{
    for (int i = 0; i < 250; i++) {
        params[i] = (float)it + (float)i * 0.5f;
        momentum[i] = -(float)i;
    }
    struct gv_ckpt_section s[] = {
        {"params", params, sizeof(params)},
        {"momentum", momentum, sizeof(momentum)},
        {"controller", ctrl, sizeof(ctrl)},
        {"empty", NULL, 0},
    };
    return gv_ckpt_write(dir, id, it, s, GV_ARRAY_LEN(s), keep, path, path_len);
}

static size_t count_files(const char *dir, const char *prefix)
{
    size_t n = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d != NULL && (de = readdir(d)) != NULL)
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    if (d != NULL)
        closedir(d);
    return n;
}

static uint8_t *read_all(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n + 1);
    if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len_p = (size_t)n;
    return buf;
}

static void write_all(const char *path, const uint8_t *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return;
    fwrite(buf, 1, len, f);
    fclose(f);
}

/* Rewrites the SHA-256 trailer so that a deliberate edit passes the checksum. */
static void reseal(uint8_t *buf, size_t len)
{
    unsigned int n = 0;
    EVP_Digest(buf, len - 32, buf + len - 32, &n, EVP_sha256(), NULL);
}

static void test_round_trip(void)
{
    const char *dir = subdir("rt");
    char path[PATH_MAX], want[PATH_MAX];
    struct gv_ckpt *ck = (struct gv_ckpt *)1;
    GV_CHECK_OK(gv_ckpt_find_latest(dir, &ident, false, 0, &ck));
    GV_CHECK(ck == NULL); /* a fresh start */
    GV_CHECK_OK(write_iter(dir, &ident, 123, 3, path, sizeof(path)));
    snprintf(want, sizeof(want), "%s/shard0002-iter000000000123.gvckpt", dir);
    GV_CHECK_STREQ(path, want);
    struct stat st;
    GV_CHECK(stat(path, &st) == 0 && (st.st_mode & 077) == 0);
    /* layout: header 72 + 4 x 64 directory = 328; sections at 328, 1328, 2328, 2344 (aligned);
     * 2344 + 32 bytes of SHA-256 */
    GV_CHECK_EQ(st.st_size, 2376);

    GV_CHECK_OK(gv_ckpt_find_latest(dir, &ident, false, 0, &ck));
    GV_CHECK(ck != NULL);
    if (ck == NULL)
        return;
    GV_CHECK_EQ(gv_ckpt_iteration(ck), 123);
    GV_CHECK_STREQ(gv_ckpt_path(ck), want);
    GV_CHECK(memcmp(gv_ckpt_ident(ck), &ident, sizeof(ident)) == 0);
    GV_CHECK_EQ(gv_ckpt_section_count(ck), 4);
    GV_CHECK_STREQ(gv_ckpt_section_name(ck, 0), "params");
    GV_CHECK_STREQ(gv_ckpt_section_name(ck, 3), "empty");
    GV_CHECK(gv_ckpt_section_name(ck, 4) == NULL);
    float p[250], m[250];
    uint8_t c[13];
    size_t len;
    GV_CHECK_OK(gv_ckpt_section_len(ck, "params", &len));
    GV_CHECK_EQ(len, sizeof(p));
    GV_CHECK_OK(gv_ckpt_read_section(ck, "params", p, sizeof(p)));
    GV_CHECK_OK(gv_ckpt_read_section(ck, "momentum", m, sizeof(m)));
    GV_CHECK_OK(gv_ckpt_read_section(ck, "controller", c, sizeof(c)));
    GV_CHECK_OK(gv_ckpt_read_section(ck, "empty", NULL, 0));
    GV_CHECK(memcmp(p, params, sizeof(p)) == 0);
    GV_CHECK(memcmp(m, momentum, sizeof(m)) == 0);
    GV_CHECK(memcmp(c, ctrl, sizeof(c)) == 0);
    GV_CHECK_EQ(p[3], 124.5f);
    /* lookups that miss */
    n_errors = 0;
    GV_CHECK_STATUS(gv_ckpt_section_len(ck, "nope", &len), GV_ERR_INVAL);
    GV_CHECK_EQ(n_errors, 0);
    GV_CHECK_STATUS(gv_ckpt_read_section(ck, "params", p, sizeof(p) - 4), GV_ERR_INVAL);
    GV_CHECK(strstr(last_log, "section 'params' has 1000 bytes, expected 996") != NULL);
    GV_CHECK_STATUS(gv_ckpt_read_section(ck, "nope", p, 4), GV_ERR_INVAL);
    gv_ckpt_close(ck);
    gv_ckpt_close(NULL);
}

static void test_latest_and_keep(void)
{
    const char *dir = subdir("keep");
    struct gv_ckpt *ck;
    struct gv_ckpt_ident other = ident;
    other.shard_index = 1;
    GV_CHECK_OK(write_iter(dir, &ident, 5, 10, NULL, 0));
    GV_CHECK_OK(write_iter(dir, &ident, 20, 10, NULL, 0));
    GV_CHECK_OK(write_iter(dir, &ident, 10, 10, NULL, 0));
    GV_CHECK_OK(write_iter(dir, &other, 100, 10, NULL, 0)); /* another shard, same dir */
    GV_CHECK_OK(gv_ckpt_find_latest(dir, &ident, false, 0, &ck));
    GV_CHECK(ck != NULL && gv_ckpt_iteration(ck) == 20);
    gv_ckpt_close(ck);
    GV_CHECK_OK(gv_ckpt_find_latest(dir, &other, false, 0, &ck));
    GV_CHECK(ck != NULL && gv_ckpt_iteration(ck) == 100);
    gv_ckpt_close(ck);

    /* keep 2: the two newest of shard 2 survive; shard 1 is untouched */
    GV_CHECK_OK(write_iter(dir, &ident, 30, 2, NULL, 0));
    GV_CHECK_EQ(count_files(dir, "shard0002-"), 2);
    GV_CHECK_EQ(count_files(dir, "shard0001-"), 1);
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/shard0002-iter000000000020.gvckpt", dir);
    GV_CHECK(access(p, F_OK) == 0);
    snprintf(p, sizeof(p), "%s/shard0002-iter000000000010.gvckpt", dir);
    GV_CHECK(access(p, F_OK) != 0);
    /* the file just written is never pruned, even when it is not the newest */
    GV_CHECK_OK(write_iter(dir, &ident, 7, 1, NULL, 0));
    snprintf(p, sizeof(p), "%s/shard0002-iter000000000007.gvckpt", dir);
    GV_CHECK(access(p, F_OK) == 0);
    GV_CHECK_EQ(count_files(dir, "shard0002-"), 2);
    /* rewriting an iteration replaces the file */
    GV_CHECK_OK(write_iter(dir, &ident, 30, 5, NULL, 0));
    GV_CHECK_EQ(count_files(dir, "shard0002-"), 2);
    GV_CHECK_EQ(count_files(dir, ".tmp-"), 0);
}

/* Coordinated checkpoints: a pending file is never loaded or pruned, it counts once committed,
 * and pruning keeps the newest committed ones only (issue 18: a server that failed a
 * checkpoint must still find the last one every process wrote on the others). */
static void test_pending_commit(void)
{
    const char *dir = subdir("pending");
    struct gv_ckpt *ck;
    struct gv_ckpt_section sec[] = {{"params", params, sizeof(params)}};
    GV_CHECK_OK(write_iter(dir, &ident, 100, 2, NULL, 0)); /* committed directly */
    GV_CHECK_OK(gv_ckpt_write_pending(dir, &ident, 200, sec, 1, NULL, 0));
    GV_CHECK_EQ(count_files(dir, "shard0002-"), 2);
    GV_CHECK_OK(gv_ckpt_find_latest(dir, &ident, false, 0, &ck));
    GV_CHECK(ck != NULL && gv_ckpt_iteration(ck) == 100); /* the pending one does not count */
    gv_ckpt_close(ck);
    GV_CHECK_OK(gv_ckpt_commit(dir, 2, 200, 2));
    GV_CHECK_OK(gv_ckpt_find_latest(dir, &ident, false, 0, &ck));
    GV_CHECK(ck != NULL && gv_ckpt_iteration(ck) == 200);
    gv_ckpt_close(ck);
    /* 300 and 400 written, 300 never committed: pruning to 2 keeps 200 and 400 */
    GV_CHECK_OK(gv_ckpt_write_pending(dir, &ident, 300, sec, 1, NULL, 0));
    GV_CHECK_OK(gv_ckpt_write_pending(dir, &ident, 400, sec, 1, NULL, 0));
    GV_CHECK_OK(gv_ckpt_commit(dir, 2, 400, 2));
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/shard0002-iter000000000200.gvckpt", dir);
    GV_CHECK(access(p, F_OK) == 0);
    snprintf(p, sizeof(p), "%s/shard0002-iter000000000100.gvckpt", dir);
    GV_CHECK(access(p, F_OK) != 0);
    snprintf(p, sizeof(p), "%s/shard0002-iter000000000300.gvckpt.pending", dir);
    GV_CHECK(access(p, F_OK) == 0);
    /* a dropped one is gone; committing what is not pending fails */
    GV_CHECK_EQ(gv_ckpt_discard(dir, 2, 300), 1);
    GV_CHECK(access(p, F_OK) != 0);
    GV_CHECK_STATUS(gv_ckpt_commit(dir, 2, 300, 2), GV_ERR_IO);
    GV_CHECK_OK(gv_ckpt_write_pending(dir, &ident, 500, sec, 1, NULL, 0));
    GV_CHECK_OK(gv_ckpt_write_pending(dir, &ident, 600, sec, 1, NULL, 0));
    GV_CHECK_EQ(gv_ckpt_discard(dir, 2, UINT64_MAX), 2);
    GV_CHECK_EQ(count_files(dir, "shard0002-"), 2);
    /* a usable directory, and one that is not (its parent is a file) */
    char why[200];
    GV_CHECK_OK(gv_ckpt_dir_check(dir, why, sizeof(why)));
    snprintf(p, sizeof(p), "%s/shard0002-iter000000000400.gvckpt/sub", dir);
    GV_CHECK_STATUS(gv_ckpt_dir_check(p, why, sizeof(why)), GV_ERR_INVAL);
    GV_CHECK(strstr(why, "not a directory") != NULL);
}

static void test_crash_leftovers(void)
{
    const char *dir = subdir("crash");
    char path[PATH_MAX], tmp[PATH_MAX];
    struct gv_ckpt *ck;
    GV_CHECK_OK(write_iter(dir, &ident, 50, 3, path, sizeof(path)));
    /* a crash during the write of iteration 60 left its temporary file: complete, or not */
    size_t len;
    uint8_t *buf = read_all(path, &len);
    GV_CHECK(buf != NULL);
    if (buf == NULL)
        return;
    snprintf(tmp, sizeof(tmp), "%s/.tmp-shard0002-iter000000000060.gvckpt.Ab3dEf", dir);
    write_all(tmp, buf, len / 2);
    snprintf(tmp, sizeof(tmp), "%s/.tmp-shard0002-iter000000000070.gvckpt.Zz9yXx", dir);
    write_all(tmp, buf, len);
    /* and names that only look like checkpoints */
    snprintf(tmp, sizeof(tmp), "%s/shard0002-iter000000000080.gvckpt.corrupt", dir);
    write_all(tmp, buf, len);
    snprintf(tmp, sizeof(tmp), "%s/shard0002-iter90.gvckpt", dir);
    write_all(tmp, buf, len);
    snprintf(tmp, sizeof(tmp), "%s/shard02-iter000000000090.gvckpt", dir);
    write_all(tmp, buf, len);
    free(buf);
    GV_CHECK_OK(gv_ckpt_find_latest(dir, &ident, false, 0, &ck));
    GV_CHECK(ck != NULL && gv_ckpt_iteration(ck) == 50);
    gv_ckpt_close(ck);
}

static void test_failed_write(void)
{
    const char *dir = subdir("efbig");
    char path[PATH_MAX];
    struct gv_ckpt *ck;
    GV_CHECK_OK(write_iter(dir, &ident, 9, 3, path, sizeof(path)));
    /* the disk fills up half way through rewriting the same iteration: RLIMIT_FSIZE makes
     * write() fail with EFBIG like ENOSPC would */
    static uint8_t big[1 << 16];
    struct gv_ckpt_section s[] = {{"params", big, sizeof(big)}};
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 4096;
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    gv_status_t status = gv_ckpt_write(dir, &ident, 9, s, 1, 3, NULL, 0);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_DFL);
    GV_CHECK_STATUS(status, GV_ERR_IO);
    GV_CHECK(strstr(last_log, "write: File too large") != NULL);
    GV_CHECK_EQ(count_files(dir, ".tmp-"), 0);
    /* the previous file of that name is intact */
    GV_CHECK_OK(gv_ckpt_find_latest(dir, &ident, false, 0, &ck));
    float p[250];
    GV_CHECK(ck != NULL && gv_ckpt_read_section(ck, "params", p, sizeof(p)) == GV_OK);
    GV_CHECK_EQ(p[0], 9.0f);
    gv_ckpt_close(ck);
    /* a FIFO named like the newest checkpoint: refused, never waited on */
    char fifo[PATH_MAX];
    snprintf(fifo, sizeof(fifo), "%s/shard0002-iter000000000010.gvckpt", dir);
    GV_CHECK(mkfifo(fifo, 0600) == 0);
    GV_CHECK_STATUS(gv_ckpt_find_latest(dir, &ident, false, 0, &ck), GV_ERR_IO);
    GV_CHECK(strstr(last_log, "is the newest of shard 2 and unusable") != NULL);
    GV_CHECK_OK(gv_ckpt_find_latest(dir, &ident, true, 0, &ck));
    GV_CHECK(ck != NULL && gv_ckpt_iteration(ck) == 9);
    gv_ckpt_close(ck);
    /* a directory that does not exist */
    char missing[PATH_MAX];
    snprintf(missing, sizeof(missing), "%s/no/such/dir", root);
    GV_CHECK_STATUS(write_iter(missing, &ident, 1, 1, NULL, 0), GV_ERR_IO);
    GV_CHECK_STATUS(gv_ckpt_find_latest(missing, &ident, false, 0, &ck), GV_ERR_IO);
}

/* Every single-byte change and every truncation of a small checkpoint is refused. */
static void test_corruption(void)
{
    const char *dir = subdir("corrupt");
    char path[PATH_MAX];
    struct gv_ckpt *ck;
    uint8_t a = 7;
    struct gv_ckpt_section s[] = {{"a", &a, 1}, {"b", "hello", 5}};
    GV_CHECK_OK(gv_ckpt_write(dir, &ident, 1, s, 2, 3, path, sizeof(path)));
    size_t len;
    uint8_t *good = read_all(path, &len);
    GV_CHECK(good != NULL && len == 72 + 2 * 64 + 8 + 8 + 32);
    if (good == NULL)
        return;
    GV_CHECK_OK(gv_ckpt_open_mem(good, len, &ck));
    gv_ckpt_close(ck);
    uint8_t *bad = malloc(len + 8);
    size_t refused = 0, tries = 0;
    for (size_t i = 0; i < len; i++) {
        for (int f = 0; f < 3; f++) {
            static const uint8_t flips[] = {0x01, 0x80, 0xff};
            memcpy(bad, good, len);
            bad[i] ^= flips[f];
            gv_status_t st = gv_ckpt_open_mem(bad, len, &ck);
            tries++;
            refused += st == GV_ERR_PROTO || st == GV_ERR_VERSION;
            if (st == GV_OK) {
                GV_CHECK_MSG(0, "byte %zu ^ 0x%02x accepted", i, flips[f]);
                gv_ckpt_close(ck);
            }
        }
    }
    GV_CHECK_EQ(refused, tries);
    for (size_t n = 0; n < len; n++) {
        gv_status_t st = gv_ckpt_open_mem(good, n, &ck);
        GV_CHECK_MSG(st == GV_ERR_PROTO, "truncated to %zu: %s", n, gv_status_str(st));
        if (st == GV_OK)
            gv_ckpt_close(ck);
    }
    memcpy(bad, good, len);
    memset(bad + len, 0, 8);
    GV_CHECK_STATUS(gv_ckpt_open_mem(bad, len + 8, &ck), GV_ERR_PROTO);
    GV_CHECK(strstr(last_log, "the header says 248 bytes but the file has 256") != NULL);
    /* a consistent-looking file whose layout lies (resealed so only the layout is wrong) */
    memcpy(bad, good, len);
    bad[72 + 64 + 48] = 0x10; /* section b's offset */
    reseal(bad, len);
    GV_CHECK_STATUS(gv_ckpt_open_mem(bad, len, &ck), GV_ERR_PROTO);
    GV_CHECK(strstr(last_log, "section 'b' lies outside the file or out of place") != NULL);
    memcpy(bad, good, len);
    bad[72 + 64] = 'a'; /* both sections named "a" */
    reseal(bad, len);
    GV_CHECK_STATUS(gv_ckpt_open_mem(bad, len, &ck), GV_ERR_PROTO);
    GV_CHECK(strstr(last_log, "section 'a' appears twice") != NULL);
    /* a checksum mismatch is reported as such */
    memcpy(bad, good, len);
    bad[len - 40] ^= 1; /* in section data */
    GV_CHECK_STATUS(gv_ckpt_open_mem(bad, len, &ck), GV_ERR_PROTO);
    GV_CHECK(strstr(last_log, "SHA-256 checksum mismatch (the file is corrupt)") != NULL);
    /* the cap on the file size */
    GV_CHECK_STATUS(gv_ckpt_open(path, 100, &ck), GV_ERR_PROTO);
    GV_CHECK(strstr(last_log, "248 bytes, more than the cap of 100") != NULL);
    GV_CHECK_OK(gv_ckpt_open(path, 248, &ck));
    gv_ckpt_close(ck);
    GV_CHECK_STATUS(gv_ckpt_open(path, 247, &ck), GV_ERR_PROTO);
    ck = NULL;
    gv_ckpt_close(ck);

    /* on disk: the newest corrupt file is refused loudly, or skipped with fallback */
    GV_CHECK_OK(gv_ckpt_write(dir, &ident, 2, s, 2, 3, path, sizeof(path)));
    memcpy(bad, good, len);
    bad[100] ^= 4;
    write_all(path, bad, len);
    n_errors = 0;
    GV_CHECK_STATUS(gv_ckpt_find_latest(dir, &ident, false, 0, &ck), GV_ERR_PROTO);
    GV_CHECK(strstr(last_log, "is the newest of shard 2 and unusable: refusing to resume from an "
                              "older one. Move it away, or pass --checkpoint-fallback") != NULL);
    GV_CHECK_EQ(n_errors, 2); /* what is wrong, and what is done about it */
    GV_CHECK_OK(gv_ckpt_find_latest(dir, &ident, true, 0, &ck));
    GV_CHECK(ck != NULL && gv_ckpt_iteration(ck) == 1);
    gv_ckpt_close(ck);
    char aside[PATH_MAX + 16];
    snprintf(aside, sizeof(aside), "%s.corrupt", path);
    GV_CHECK(access(aside, F_OK) == 0 && access(path, F_OK) != 0);
    /* without fallback the set-aside file no longer blocks a restart */
    GV_CHECK_OK(gv_ckpt_find_latest(dir, &ident, false, 0, &ck));
    GV_CHECK(ck != NULL && gv_ckpt_iteration(ck) == 1);
    gv_ckpt_close(ck);
    /* every file corrupt, with fallback: an error, not a silent fresh start */
    snprintf(path, sizeof(path), "%s/shard0002-iter000000000001.gvckpt", dir);
    write_all(path, good, len - 1);
    GV_CHECK_STATUS(gv_ckpt_find_latest(dir, &ident, true, 0, &ck), GV_ERR_PROTO);
    GV_CHECK(strstr(last_log, "none of the 1 checkpoints of shard 2 is valid") != NULL);
    free(bad);
    free(good);
}

static void test_identity_and_version(void)
{
    const char *dir = subdir("ident");
    char path[PATH_MAX];
    struct gv_ckpt *ck = NULL;
    GV_CHECK_OK(write_iter(dir, &ident, 4, 3, NULL, 0));
    GV_CHECK_OK(write_iter(dir, &ident, 8, 3, path, sizeof(path)));
    struct {
        struct gv_ckpt_ident id;
        const char *msg;
    } cases[] = {
        {ident, "model fingerprint is 0x1234abcd5678ef00 in the file, 0x1234abcd5678ef01 in this "
                "run"},
        {ident, "number of servers is 4 in the file, 3 in this run"},
        {ident, "shard offset is 1000 in the file, 1001 in this run"},
        {ident, "shard length is 250 in the file, 249 in this run"},
    };
    cases[0].id.model_fingerprint++;
    cases[1].id.num_servers = 3;
    cases[2].id.shard_offset++;
    cases[3].id.shard_length--;
    for (size_t i = 0; i < GV_ARRAY_LEN(cases); i++) {
        for (int fallback = 0; fallback < 2; fallback++) {
            ck = NULL;
            GV_CHECK_STATUS(gv_ckpt_find_latest(dir, &cases[i].id, fallback, 0, &ck), GV_ERR_INVAL);
            GV_CHECK(ck == NULL);
            GV_CHECK_MSG(strstr(last_log, cases[i].msg) != NULL, "case %zu: '%s'", i, last_log);
            GV_CHECK(strstr(last_log, "belongs to another job") != NULL);
        }
    }
    GV_CHECK_OK(gv_ckpt_open(path, 0, &ck));
    struct gv_ckpt_ident want = ident;
    want.shard_index = 5;
    GV_CHECK_STATUS(gv_ckpt_check_ident(ck, &want), GV_ERR_INVAL);
    GV_CHECK(strstr(last_log, "shard index is 2 in the file, 5 in this run") != NULL);
    gv_ckpt_close(ck);

    /* a file of another format version, otherwise intact: refused even with fallback */
    size_t len;
    uint8_t *buf = read_all(path, &len);
    GV_CHECK(buf != NULL);
    if (buf == NULL)
        return;
    buf[8] = 2;
    reseal(buf, len);
    write_all(path, buf, len);
    for (int fallback = 0; fallback < 2; fallback++) {
        GV_CHECK_STATUS(gv_ckpt_find_latest(dir, &ident, fallback, 0, &ck), GV_ERR_VERSION);
        GV_CHECK(strstr(last_log, "format version 2, this build reads 1") != NULL);
    }
    GV_CHECK(access(path, F_OK) == 0); /* not set aside: it is not corrupt */
    memcpy(buf, "GVCKPT\n\n", 8);
    GV_CHECK_STATUS(gv_ckpt_open_mem(buf, len, &ck), GV_ERR_PROTO);
    GV_CHECK(strstr(last_log, "not a gravac checkpoint (bad magic)") != NULL);
    free(buf);
}

static void test_bad_writes(void)
{
    const char *dir = subdir("badw");
    uint8_t x = 1;
    char longname[64];
    memset(longname, 'n', sizeof(longname));
    longname[GV_CKPT_NAME_MAX + 1] = '\0';
    struct gv_ckpt_section bad[][2] = {
        {{"", &x, 1}, {"b", &x, 1}},       {{"a b", &x, 1}, {"b", &x, 1}},
        {{longname, &x, 1}, {"b", &x, 1}}, {{"same", &x, 1}, {"same", &x, 1}},
        {{"a", NULL, 1}, {"b", &x, 1}},    {{NULL, &x, 1}, {"b", &x, 1}},
    };
    for (size_t i = 0; i < GV_ARRAY_LEN(bad); i++)
        GV_CHECK_STATUS(gv_ckpt_write(dir, &ident, 1, bad[i], 2, 1, NULL, 0), GV_ERR_INVAL);
    longname[GV_CKPT_NAME_MAX] = '\0'; /* 47 bytes: fine */
    struct gv_ckpt_section ok[] = {{longname, &x, 1}};
    GV_CHECK_OK(gv_ckpt_write(dir, &ident, 1, ok, 1, 1, NULL, 0));
    GV_CHECK_STATUS(gv_ckpt_write(dir, &ident, 1, ok, 1, 0, NULL, 0), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_ckpt_write("", &ident, 1, ok, 1, 1, NULL, 0), GV_ERR_INVAL);
    struct gv_ckpt_section many[GV_CKPT_MAX_SECTIONS + 1];
    char names[GV_CKPT_MAX_SECTIONS + 1][8];
    for (int i = 0; i <= (int)GV_CKPT_MAX_SECTIONS; i++) {
        snprintf(names[i], sizeof(names[i]), "s%d", i);
        many[i] = (struct gv_ckpt_section){names[i], &x, 1};
    }
    GV_CHECK_STATUS(gv_ckpt_write(dir, &ident, 2, many, GV_CKPT_MAX_SECTIONS + 1, 1, NULL, 0),
                    GV_ERR_INVAL);
    GV_CHECK_OK(gv_ckpt_write(dir, &ident, 2, many, GV_CKPT_MAX_SECTIONS, 1, NULL, 0));
    struct gv_ckpt *ck;
    GV_CHECK_OK(gv_ckpt_find_latest(dir, &ident, false, 0, &ck));
    size_t len = 0;
    GV_CHECK(ck != NULL && gv_ckpt_section_len(ck, "s63", &len) == GV_OK && len == 1);
    gv_ckpt_close(ck);
}

static void test_alloc_failures(void)
{
    const char *dir = subdir("nomem");
    GV_CHECK_OK(write_iter(dir, &ident, 3, 3, NULL, 0));
    int nomem = 0;
    for (uint64_t n = 1; n < 50; n++) {
        struct gv_ckpt *ck = NULL;
        gv_alloc_fail_nth(n);
        gv_status_t st = gv_ckpt_find_latest(dir, &ident, false, 0, &ck);
        gv_alloc_fail_nth(0);
        GV_CHECK_MSG(st == GV_OK || st == GV_ERR_NOMEM, "n=%llu: %s", (unsigned long long)n,
                     gv_status_str(st));
        nomem += st == GV_ERR_NOMEM;
        gv_ckpt_close(ck);
        if (st == GV_OK) {
            GV_CHECK(ck != NULL);
            break;
        }
    }
    GV_CHECK(nomem >= 3);
}

int main(void)
{
    if (mkdtemp(root) == NULL)
        GV_SKIP("mkdtemp failed");
    gv_log_set_cb(capture, NULL);
    test_round_trip();
    test_latest_and_keep();
    test_pending_commit();
    test_crash_leftovers();
    test_failed_write();
    test_corruption();
    test_identity_and_version();
    test_bad_writes();
    test_alloc_failures();
    gv_log_set_cb(NULL, NULL);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
    return gv_check_summary();
}
