/* gen_corpus.c: writes the seed corpora of the ops fuzz targets (tests/ops/corpus/<target>/).
 * Not a test: run it by hand after a format change and commit the result:
 *   build/tests/ops/ops_gen_corpus tests/ops/corpus
 * The files named by a hash were added from libFuzzer runs (fuzz_ops_<t> -merge=1). */
#include "gv_ops.h"

#include <limits.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *out_root;

static void put(const char *target, const char *name, const void *data, size_t len)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", out_root, target);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/%s/%s", out_root, target, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(data, 1, len, f) != len) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

static uint8_t *slurp(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        exit(1);
    fseek(f, 0, SEEK_END);
    size_t len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(len);
    if (buf == NULL || fread(buf, 1, len, f) != len)
        exit(1);
    fclose(f);
    *len_p = len;
    return buf;
}

static void ckpt_seeds(void)
{
    char dir[] = "/tmp/gv_gen_corpus_XXXXXX", path[PATH_MAX];
    if (mkdtemp(dir) == NULL)
        exit(1);
    struct gv_ckpt_ident id = {0x1122334455667788ull, 0, 16, 0, 1};
    float p[16], m[16];
    for (int i = 0; i < 16; i++) {
        p[i] = (float)i;
        m[i] = -(float)i;
    }
    uint8_t ctrl[5] = {9, 8, 7, 6, 5};
    struct gv_ckpt_section s[] = {
        {"params", p, sizeof(p)},
        {"momentum", m, sizeof(m)},
        {"controller", ctrl, 5},
        {"empty", NULL, 0},
    };
    static const size_t counts[] = {0, 1, 2, 4};
    for (size_t k = 0; k < 4; k++) {
        size_t len;
        char name[32];
        if (gv_ckpt_write(dir, &id, k, s, counts[k], 10, path, sizeof(path)) != GV_OK)
            exit(1);
        uint8_t *buf = slurp(path, &len);
        snprintf(name, sizeof(name), "valid-%zu-sections", counts[k]);
        put("ckpt", name, buf, len);
        if (k == 3) {
            put("ckpt", "truncated", buf, len / 2);
            buf[8] = 2; /* version 2, resealed */
            unsigned int n;
            EVP_Digest(buf, len - 32, buf + len - 32, &n, EVP_sha256(), NULL);
            put("ckpt", "version-2", buf, len);
            memcpy(buf, "GVCKPX\r\n", 8);
            put("ckpt", "bad-magic", buf, len);
        }
        free(buf);
    }
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        exit(1);
}

static void auth_seeds(void)
{
    /* honest handshakes in every mode, then each kind of interference on each message */
    for (int mode = 0; mode < 16; mode++) {
        uint8_t s[5] = {(uint8_t)mode, 0, 0, 0, 0};
        char name[32];
        snprintf(name, sizeof(name), "honest-mode%02d", mode);
        put("auth", name, s, sizeof(s));
    }
    for (int step = 0; step < 4; step++) {
        for (int ctl = 1; ctl <= 7; ctl += 2) {
            uint8_t s[64];
            size_t n = 0;
            s[n++] = 3; /* both sides have the secret */
            for (int t = 0; t < step; t++)
                s[n++] = 0;
            s[n++] = (uint8_t)ctl;
            for (int k = 0; k < 40; k++)
                s[n++] = (uint8_t)(k == 30 ? 1 : 0); /* flips a byte of the nonce or proof */
            char name[32];
            snprintf(name, sizeof(name), "step%d-ctl%d", step, ctl);
            put("auth", name, s, n);
        }
    }
}

static void config_seeds(void)
{
    static const struct {
        const char *name, *text;
    } seeds[] = {
        {"flat.ini", "workers = 4\nseed = 7\nlr = 0.05\nverbose = yes\ndir = /data/ck\n"
                     "policy = continue\nbucket = 64K\ntimeout = 250ms\nbind = 127.0.0.1:0\n"
                     "servers = a:7000, b:7000\n"},
        {"sections.ini", "; comment\n# comment\n[gravac]\nlr = 0.1\n[server]\nlr = 0.2 ; inline\n"
                         "[worker]\nanything = 1\n"},
        {"continuation.ini", "servers = a:1,\n  b:2\n\tc:3\nbind = [::1]:9100\n"},
        {"quoted.ini", "dir = \"/path with spaces\"\nsecret_like = x\n"},
        {"errors.ini", "lrr = 1\n[bogus]\nnovalue\n[unterminated\nworkers = 0\n"},
        {"argv.txt", "--workers=3\n--no-verbose\n--servers\nh:1 h:2\n--lr\n1e-3\n--help\n"},
        {"argv-bad.txt", "--lr\n--workers=2\n-x\nextra\n--no-lr\n--timeout=5\n"},
    };
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++)
        put("config", seeds[i].name, seeds[i].text, strlen(seeds[i].text));
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_ROOT\n", argv[0]);
        return 2;
    }
    out_root = argv[1];
    mkdir(out_root, 0755);
    ckpt_seeds();
    auth_seeds();
    config_seeds();
    return 0;
}
