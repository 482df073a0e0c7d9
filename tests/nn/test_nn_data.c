/* test_nn_data.c: dataset loaders on crafted files in a temporary directory: valid IDX files
 * (raw and gzipped), CIFAR-10 records and text; and every malformed case (missing file, wrong
 * magic, truncated header or data, trailing bytes, label out of range, mismatched counts, bad
 * record size, corrupt gzip) returns the right status with one error naming the file. Also the
 * shard sampler (disjoint, covering, reshuffled per epoch) and batching. */
#include "check.h"
#include "gv_nn.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static char dir[256];
static char last_err[1024];
static int n_err;

static void capture_cb(enum gv_log_level level, const char *line, void *arg)
{
    (void)arg;
    if (level == GV_LOG_ERROR) {
        n_err++;
        snprintf(last_err, sizeof(last_err), "%s", line);
    }
}

static const char *path_of(const char *name)
{
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof(p[k]), "%s/%s", dir, name);
    return p[k];
}

static void write_file(const char *name, const void *data, size_t len, int gz)
{
    const char *p = path_of(name);
    if (gz) {
        gzFile f = gzopen(p, "wb");
        GV_CHECK(f != NULL && gzwrite(f, data, (unsigned)len) == (int)len);
        gzclose(f);
    } else {
        FILE *f = fopen(p, "wb");
        GV_CHECK(f != NULL && fwrite(data, 1, len, f) == len);
        fclose(f);
    }
}

static size_t idx_make(uint8_t *buf, int ndim, uint32_t n, uint32_t rows, uint32_t cols,
                       uint8_t fill_mod)
{
    uint32_t dims[3] = {n, rows, cols};
    size_t at = 0, total = n;
    buf[at++] = 0, buf[at++] = 0, buf[at++] = 0x08, buf[at++] = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++) {
        for (int s = 24; s >= 0; s -= 8)
            buf[at++] = (uint8_t)(dims[i] >> s);
        if (i > 0)
            total *= dims[i];
    }
    for (size_t i = 0; i < total; i++)
        buf[at++] = (uint8_t)(i % fill_mod);
    return at;
}

/* Loads, expects status; on failure also one error line naming `named` and saying `what`. */
static void expect_idx(const char *img, const char *lab, gv_status_t want, const char *named,
                       const char *what)
{
    struct gv_nn_dataset *ds = NULL;
    n_err = 0;
    last_err[0] = '\0';
    gv_status_t status = gv_nn_dataset_load_idx(path_of(img), path_of(lab), 10, &ds);
    GV_CHECK_MSG(status == want, "%s + %s: got %s, want %s", img, lab, gv_status_str(status),
                 gv_status_str(want));
    if (want == GV_OK) {
        GV_CHECK(ds != NULL);
        gv_nn_dataset_destroy(ds);
        return;
    }
    GV_CHECK(ds == NULL);
    GV_CHECK_MSG(n_err == 1, "%s: %d error lines, want exactly one", named, n_err);
    GV_CHECK_MSG(strstr(last_err, named) != NULL && strstr(last_err, what) != NULL,
                 "error '%s' should name %s and say '%s'", last_err, named, what);
}

static void test_idx(void)
{
    static uint8_t img[4096], lab[256];
    size_t ni = idx_make(img, 3, 5, 4, 3, 251), nl = idx_make(lab, 1, 5, 0, 0, 10);
    write_file("img", img, ni, 0);
    write_file("lab", lab, nl, 0);
    write_file("img.gz", img, ni, 1);
    write_file("lab.gz", lab, nl, 1);

    struct gv_nn_dataset *ds = NULL;
    GV_CHECK_OK(gv_nn_dataset_load_idx(path_of("img.gz"), path_of("lab"), 10, &ds));
    if (ds != NULL) {
        GV_CHECK_EQ(ds->n, 5);
        GV_CHECK_EQ(ds->h, 4);
        GV_CHECK_EQ(ds->w, 3);
        GV_CHECK_EQ(ds->c, 1);
        GV_CHECK_EQ(ds->y[3], 3);
        GV_CHECK(ds->x[0] == -1.0f);                       /* pixel 0 */
        GV_CHECK_NEAR(ds->x[13], 13 * 2.0 / 255 - 1, 1e-6, 0); /* pixel 13 */
        gv_nn_dataset_destroy(ds);
    }
    expect_idx("img", "lab.gz", GV_OK, "", "");

    expect_idx("nope", "lab", GV_ERR_IO, "nope", "cannot open");
    expect_idx("img", "nope.gz", GV_ERR_IO, "nope.gz", "cannot open");
    /* images and labels swapped: wrong magic */
    expect_idx("lab", "lab", GV_ERR_PROTO, "lab", "wrong magic");
    expect_idx("img", "img", GV_ERR_PROTO, "img", "wrong magic");
    uint8_t bad[4096];
    memcpy(bad, img, ni);
    bad[2] = 0x0d; /* float type */
    write_file("img_type", bad, ni, 0);
    expect_idx("img_type", "lab", GV_ERR_PROTO, "img_type", "wrong magic");
    write_file("img_hdr", img, 9, 0);
    expect_idx("img_hdr", "lab", GV_ERR_PROTO, "img_hdr", "truncated");
    write_file("img_trunc", img, ni - 7, 0);
    expect_idx("img_trunc", "lab", GV_ERR_PROTO, "img_trunc", "truncated");
    write_file("img_trunc.gz", img, ni - 7, 1);
    expect_idx("img_trunc.gz", "lab", GV_ERR_PROTO, "img_trunc.gz", "truncated");
    memcpy(bad, img, ni);
    bad[ni] = 1;
    write_file("img_tail", bad, ni + 1, 0);
    expect_idx("img_tail", "lab", GV_ERR_PROTO, "img_tail", "trailing");
    memcpy(bad, img, ni);
    bad[4] = 0x7f; /* 2 billion images */
    write_file("img_huge", bad, ni, 0);
    expect_idx("img_huge", "lab", GV_ERR_PROTO, "img_huge", "dimension 0");
    memcpy(bad, img, ni);
    bad[11] = 0; /* zero rows */
    write_file("img_zero", bad, ni, 0);
    expect_idx("img_zero", "lab", GV_ERR_PROTO, "img_zero", "dimension 1");
    memcpy(bad, lab, nl);
    bad[8 + 2] = 10; /* label 10 of 10 classes */
    write_file("lab_range", bad, nl, 0);
    expect_idx("img", "lab_range", GV_ERR_PROTO, "lab_range", "out of range");
    uint8_t lab4[256];
    size_t nl4 = idx_make(lab4, 1, 4, 0, 0, 10);
    write_file("lab4", lab4, nl4, 1);
    expect_idx("img", "lab4", GV_ERR_PROTO, "lab4", "5 images but");
    /* a gzip stream whose compressed bytes are damaged */
    static uint8_t big[20000], comp[30000];
    size_t nb = idx_make(big, 3, 64, 16, 16, 199);
    write_file("img_big.gz", big, nb, 1);
    FILE *f = fopen(path_of("img_big.gz"), "rb");

    size_t nc = f ? fread(comp, 1, sizeof(comp), f) : 0;
    if (f)
        fclose(f);
    for (size_t i = 40; i + 10 < nc; i += 7)
        comp[i] ^= 0x5a;
    write_file("img_corrupt.gz", comp, nc, 0);
    struct gv_nn_dataset *cds = NULL;
    n_err = 0;
    gv_status_t status = gv_nn_dataset_load_idx(path_of("img_corrupt.gz"), path_of("lab"), 10,
                                                &cds);
    GV_CHECK(status == GV_ERR_PROTO || status == GV_ERR_IO);
    GV_CHECK(cds == NULL && n_err == 1 && strstr(last_err, "img_corrupt.gz") != NULL);
    /* classes out of range */
    GV_CHECK_STATUS(gv_nn_dataset_load_idx(path_of("img"), path_of("lab"), 1, &ds), GV_ERR_INVAL);
}

static void test_cifar(void)
{
    static uint8_t rec[3 * 3073];
    for (int r = 0; r < 3; r++) {
        rec[r * 3073] = (uint8_t)(r * 4);
        for (int i = 0; i < 3072; i++)
            rec[r * 3073 + 1 + i] = (uint8_t)(i / 1024 * 100 + r); /* plane value R, G, B */
    }
    write_file("c1.bin", rec, 2 * 3073, 0);
    write_file("c2.bin.gz", rec + 2 * 3073, 3073, 1);
    const char *paths[2] = {path_of("c1.bin"), path_of("c2.bin.gz")};
    struct gv_nn_dataset *ds = NULL;
    GV_CHECK_OK(gv_nn_dataset_load_cifar10(paths, 2, &ds));
    if (ds != NULL) {
        GV_CHECK_EQ(ds->n, 3);
        GV_CHECK_EQ(ds->h * 100 + ds->w * 10 + ds->c, 32 * 100 + 32 * 10 + 3);
        GV_CHECK_EQ(ds->y[2], 8);
        /* HWC: pixel 5 of record 1 has channels (1, 101, 201) */
        const float *px = ds->x + 3072 + 5 * 3;
        GV_CHECK_NEAR(px[0], 1 * 2.0 / 255 - 1, 1e-6, 0);
        GV_CHECK_NEAR(px[1], 101 * 2.0 / 255 - 1, 1e-6, 0);
        GV_CHECK_NEAR(px[2], 201 * 2.0 / 255 - 1, 1e-6, 0);
        gv_nn_dataset_destroy(ds);
    }
    write_file("c_trunc.bin", rec, 3073 + 100, 0);
    write_file("c_label.bin", rec, 3073, 0);
    write_file("c_empty.bin", rec, 0, 0);
    const char *bad[3] = {"c_trunc.bin", "c_label.bin", "c_empty.bin"};
    const char *why[3] = {"whole number", "out of range", "whole number"};
    for (int i = 0; i < 3; i++) {
        if (i == 1) {
            uint8_t r0[3073];
            memcpy(r0, rec, 3073);
            r0[0] = 10;
            write_file("c_label.bin", r0, 3073, 0);
        }
        const char *p = path_of(bad[i]);
        n_err = 0;
        ds = NULL;
        GV_CHECK_STATUS(gv_nn_dataset_load_cifar10(&p, 1, &ds), GV_ERR_PROTO);
        GV_CHECK(ds == NULL && n_err == 1);
        GV_CHECK_MSG(strstr(last_err, bad[i]) && strstr(last_err, why[i]), "error '%s'", last_err);
    }
    const char *missing = path_of("c_missing.bin");
    GV_CHECK_STATUS(gv_nn_dataset_load_cifar10(&missing, 1, &ds), GV_ERR_IO);
    GV_CHECK(strstr(last_err, "c_missing.bin") != NULL);
}

static void test_text(void)
{
    const char *a = "abcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabc";
    const char *b = "zzzz yyyy zzzz yyyy zzzz yyyy zzzz yyyy zzzz yyyy zzzz yyyy zzzz yyyy!";
    write_file("a.txt", a, strlen(a), 0);
    write_file("b.txt.gz", b, strlen(b), 1);
    const char *paths[2] = {path_of("a.txt"), path_of("b.txt.gz")};
    struct gv_nn_dataset *tr = NULL, *te = NULL;
    GV_CHECK_OK(gv_nn_dataset_load_text(paths, 2, 8, 0.25, &tr, &te));
    if (tr != NULL && te != NULL) {
        GV_CHECK_EQ(tr->n_classes, 7); /* ' ', '!', a, b, c, y, z */
        GV_CHECK_EQ(te->n_classes, 7);
        GV_CHECK(tr->vocab[0] == ' ' && tr->vocab[1] == '!' && tr->vocab[6] == 'z');
        size_t la = strlen(a), lb = strlen(b);
        size_t ta = la - (size_t)((double)la * 0.25), tb = lb - (size_t)((double)lb * 0.25);
        GV_CHECK_EQ(tr->n_tokens, ta + tb);
        GV_CHECK_EQ(te->n_tokens, la + lb - ta - tb);
        GV_CHECK_EQ(tr->n, (tr->n_tokens - 1) / 8);
        GV_CHECK(tr->vocab[tr->tokens[0]] == 'a' && te->vocab[te->tokens[te->n_tokens - 1]] == '!');
        /* windows: labels are the inputs shifted by one */
        struct gv_nn_batch_buf buf;
        struct gv_nn_batch bt;
        size_t idx[2] = {1, 0};
        GV_CHECK_OK(gv_nn_batch_buf_init(&buf, tr, 2));
        GV_CHECK_OK(gv_nn_batch_gather(tr, idx, 2, &buf, &bt));
        GV_CHECK(bt.tokens[0] == tr->tokens[8] && bt.labels[0] == tr->tokens[9]);
        GV_CHECK(bt.labels[15] == tr->tokens[8]);
        idx[0] = tr->n; /* out of range */
        GV_CHECK_STATUS(gv_nn_batch_gather(tr, idx, 2, &buf, &bt), GV_ERR_INVAL);
        gv_nn_batch_buf_cleanup(&buf);
    }
    gv_nn_dataset_destroy(tr);
    gv_nn_dataset_destroy(te);
    write_file("empty.txt", "", 0, 0);
    write_file("one.txt", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 31, 0);
    write_file("short.txt", "abcdefg", 7, 0);
    const char *bad[4] = {"empty.txt", "one.txt", "short.txt", "missing.txt"};
    gv_status_t want[4] = {GV_ERR_PROTO, GV_ERR_PROTO, GV_ERR_PROTO, GV_ERR_IO};
    for (int i = 0; i < 4; i++) {
        const char *p = path_of(bad[i]);
        tr = te = NULL;
        n_err = 0;
        GV_CHECK_STATUS(gv_nn_dataset_load_text(&p, 1, 8, 0.1, &tr, &te), want[i]);
        GV_CHECK(tr == NULL && te == NULL && n_err == 1 && strstr(last_err, bad[i]) != NULL);
    }
}

static void test_synthetic(void)
{
    struct gv_nn_dataset *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    GV_CHECK_OK(gv_nn_dataset_synthetic(4, 4, 2, 5, 100, 50, 0.5f, 9, &a, &b));
    GV_CHECK_OK(gv_nn_dataset_synthetic(4, 4, 2, 5, 100, 50, 0.5f, 9, &c, &d));
    if (a && c) {
        GV_CHECK(memcmp(a->x, c->x, 100 * 32 * sizeof(float)) == 0);
        GV_CHECK(memcmp(a->y, c->y, 100 * sizeof(int32_t)) == 0);
        GV_CHECK(memcmp(a->x, b->x, 50 * 32 * sizeof(float)) != 0);
        int seen[5] = {0};
        for (int i = 0; i < 100; i++)
            seen[a->y[i]]++;
        for (int k = 0; k < 5; k++)
            GV_CHECK(seen[k] > 5);
    }
    gv_nn_dataset_destroy(a), gv_nn_dataset_destroy(b);
    gv_nn_dataset_destroy(c), gv_nn_dataset_destroy(d);
    GV_CHECK_STATUS(gv_nn_dataset_synthetic(4, 4, 2, 1, 100, 50, 0.5f, 9, &a, &b), GV_ERR_INVAL);
}

static void test_sampler(void)
{
    enum { N = 1003, W = 3, B = 16 };
    static int owner[N];
    struct gv_nn_sampler s[W];
    size_t idx[B];
    int64_t epoch = -1;
    for (int e = 0; e < 2; e++) {
        memset(owner, 0, sizeof(owner));
        for (int r = 0; r < W; r++) {
            if (e == 0)
                GV_CHECK_OK(gv_nn_sampler_init(&s[r], N, r, W, 77));
            size_t shard = gv_nn_sampler_shard_size(&s[r]);
            GV_CHECK(shard == N / W || shard == N / W + 1);
            for (size_t k = 0; k < shard / B; k++) {
                GV_CHECK_OK(gv_nn_sampler_next(&s[r], B, idx, &epoch));
                GV_CHECK_EQ(epoch, e);
                for (int i = 0; i < B; i++)
                    owner[idx[i]] += 1 + r * 10;
            }
        }
        /* within an epoch no sample goes to two ranks or twice to one */
        int dup = 0, used = 0;
        for (int i = 0; i < N; i++) {
            dup += owner[i] != 0 && owner[i] != 1 && owner[i] != 11 && owner[i] != 21;
            used += owner[i] != 0;
        }
        GV_CHECK_EQ(dup, 0);
        GV_CHECK(used >= N - W * B);
    }
    /* a new epoch reshuffles: rank 0 sees a different sequence */
    struct gv_nn_sampler t;
    size_t first[B], later[B];
    GV_CHECK_OK(gv_nn_sampler_init(&t, N, 0, W, 77));
    GV_CHECK_OK(gv_nn_sampler_next(&t, B, first, &epoch));
    for (size_t k = 1; k < gv_nn_sampler_shard_size(&t) / B; k++)
        GV_CHECK_OK(gv_nn_sampler_next(&t, B, later, &epoch));
    GV_CHECK_OK(gv_nn_sampler_next(&t, B, later, &epoch));
    GV_CHECK_EQ(epoch, 1);
    GV_CHECK(memcmp(first, later, sizeof(first)) != 0);
    GV_CHECK_STATUS(gv_nn_sampler_next(&t, N, later, &epoch), GV_ERR_INVAL);
    gv_nn_sampler_cleanup(&t);
    for (int r = 0; r < W; r++)
        gv_nn_sampler_cleanup(&s[r]);
    GV_CHECK_STATUS(gv_nn_sampler_init(&t, N, 3, 3, 1), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_nn_sampler_init(&t, 0, 0, 1, 1), GV_ERR_INVAL);
}

/* The real Fashion-MNIST files from the Debian package, when installed (scripts/deps.txt). */
static void test_fashion_mnist(void)
{
    const char *img = GV_NN_FASHION_MNIST_DIR "/t10k-images-idx3-ubyte.gz";
    const char *lab = GV_NN_FASHION_MNIST_DIR "/t10k-labels-idx1-ubyte.gz";
    if (access(img, R_OK) != 0) {
        printf("  note: %s missing; install dataset-fashion-mnist (scripts/setup.sh)\n", img);
        GV_CHECK(0);
        return;
    }
    struct gv_nn_dataset *ds = NULL;
    GV_CHECK_OK(gv_nn_dataset_load_idx(img, lab, 10, &ds));
    if (ds != NULL) {
        GV_CHECK_EQ(ds->n, 10000);
        GV_CHECK_EQ(ds->h * ds->w, 784);
        int count[10] = {0};
        for (size_t i = 0; i < ds->n; i++)
            count[ds->y[i]]++;
        for (int k = 0; k < 10; k++)
            GV_CHECK_EQ(count[k], 1000);
    }
    gv_nn_dataset_destroy(ds);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/gv_nn_data_XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    gv_log_set_cb(capture_cb, NULL);
    test_idx();
    test_cifar();
    test_text();
    test_synthetic();
    test_sampler();
    gv_log_set_cb(NULL, NULL);
    test_fashion_mnist();
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return gv_check_summary();
}
