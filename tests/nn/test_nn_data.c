/* test_nn_data.c: dataset loaders on crafted files in a temporary directory: valid IDX files
 * (raw and gzipped), CIFAR-10 records and text; and every malformed case (missing file, wrong
 * magic, truncated header or data, trailing bytes, label out of range, mismatched counts, bad
 * record size, corrupt gzip) returns the right status with one error naming the file. Also the
 * shard sampler (fixed disjoint covering shards, reshuffled within per epoch, a world of one
 * unchanged), shards loaded on their own (the same batches as from the whole set) and
 * batching. */
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
        GV_CHECK_EQ(ds->n_total, 5);
        GV_CHECK(ds->index == NULL && ds->x == NULL);
        GV_CHECK_EQ(ds->pix[13], 13); /* kept as in the file */
        GV_CHECK_EQ(gv_nn_dataset_bytes(ds), 5 * 12 + 5 * 4);
        /* scaled to [-1, 1] per batch */
        struct gv_nn_batch_buf buf;
        struct gv_nn_batch bt;
        size_t idx[2] = {1, 0};
        GV_CHECK_OK(gv_nn_batch_buf_init(&buf, ds, 2));
        GV_CHECK_OK(gv_nn_batch_gather(ds, idx, 2, &buf, &bt));
        GV_CHECK(bt.x[12] == -1.0f);                         /* item 0, pixel 0 */
        GV_CHECK(bt.x[13] == 1.0f * (2.0f / 255.0f) - 1.0f); /* item 0, pixel 1 */
        GV_CHECK(bt.x[1] == 13.0f * (2.0f / 255.0f) - 1.0f); /* item 1, pixel 1 */
        GV_CHECK(bt.labels[0] == 1 && bt.labels[1] == 0);
        gv_nn_batch_buf_cleanup(&buf);
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
    gv_status_t status =
        gv_nn_dataset_load_idx(path_of("img_corrupt.gz"), path_of("lab"), 10, &cds);
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
        const uint8_t *px = ds->pix + 3072 + 5 * 3;
        GV_CHECK(px[0] == 1 && px[1] == 101 && px[2] == 201);
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

/* The permutation of [0, n) the sampler drew for (seed, epoch) before shards became fixed,
 * written out here: a world of 1 must still read the set in exactly this order. */
static void old_perm(uint32_t *perm, size_t n, uint64_t seed, int64_t epoch)
{
    uint64_t st = seed ^ ((uint64_t)epoch * 0xa0761d6478bd642fULL + 0xe7037ed1a0b428dbULL);
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    for (size_t i = n; i > 1; i--) {
        uint64_t z = (st += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        size_t j = (size_t)(z % (uint64_t)i);
        uint32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void test_sampler(void)
{
    enum { N = 1003, W = 3, B = 16 };
    static int owner[N], first_owner[N];
    static uint32_t perm[N];
    struct gv_nn_sampler s[W];
    size_t idx[B];
    int64_t epoch = -1;
    for (int e = 0; e < 3; e++) {
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
        int dup = 0, used = 0, moved = 0;
        for (int i = 0; i < N; i++) {
            dup += owner[i] != 0 && owner[i] != 1 && owner[i] != 11 && owner[i] != 21;
            used += owner[i] != 0;
            if (e == 0)
                first_owner[i] = owner[i];
            else
                moved += owner[i] != 0 && first_owner[i] != 0 && owner[i] != first_owner[i];
        }
        GV_CHECK_EQ(dup, 0);
        GV_CHECK(used >= N - W * B);
        GV_CHECK_EQ(moved, 0); /* a sample stays with its rank: shards are fixed */
    }
    /* the shard is slice r of the epoch-0 permutation, ascending, as gv_nn_shard_indices says */
    old_perm(perm, N, 77, 0);
    for (int r = 0; r < W; r++) {
        size_t lo = (size_t)N * (size_t)r / W, hi = (size_t)N * (size_t)(r + 1) / W, m = 0;
        qsort(perm + lo, hi - lo, sizeof(uint32_t), cmp_u32);
        GV_CHECK_EQ(s[r].m, hi - lo);
        GV_CHECK(memcmp(s[r].shard, perm + lo, (hi - lo) * 4) == 0);
        uint32_t *si = NULL;
        struct gv_nn_shard sh = {.rank = r, .world = W, .seed = 77};
        GV_CHECK_OK(gv_nn_shard_indices(N, &sh, &si, &m));
        GV_CHECK(m == hi - lo && si != NULL && memcmp(si, s[r].shard, m * 4) == 0);
        gv_free(si);
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
    /* one rank: every epoch is the permutation the sampler always drew (standalone runs are
     * unchanged) */
    GV_CHECK_OK(gv_nn_sampler_init(&t, N, 0, 1, 5));
    int bad = 0;
    for (int e = 0; e < 3; e++) {
        old_perm(perm, N, 5, e);
        for (size_t k = 0; k < N / B; k++) {
            GV_CHECK_OK(gv_nn_sampler_next(&t, B, idx, &epoch));
            for (int i = 0; i < B; i++)
                bad += idx[i] != perm[k * B + (size_t)i];
        }
    }
    GV_CHECK_EQ(bad, 0);
    gv_nn_sampler_cleanup(&t);
    for (int r = 0; r < W; r++)
        gv_nn_sampler_cleanup(&s[r]);
    GV_CHECK_STATUS(gv_nn_sampler_init(&t, N, 3, 3, 1), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_nn_sampler_init(&t, 0, 0, 1, 1), GV_ERR_INVAL);
}

/* Gathers the same items from a and b and compares the batches bit for bit. */
static int same_batches(const struct gv_nn_dataset *a, const struct gv_nn_dataset *b,
                        const size_t *items, int n)
{
    struct gv_nn_batch_buf ba = {0}, bb = {0};
    struct gv_nn_batch xa, xb;
    int same = gv_nn_batch_buf_init(&ba, a, n) == GV_OK &&
               gv_nn_batch_buf_init(&bb, b, n) == GV_OK &&
               gv_nn_batch_gather(a, items, n, &ba, &xa) == GV_OK &&
               gv_nn_batch_gather(b, items, n, &bb, &xb) == GV_OK;
    if (same && a->kind == GV_NN_DATA_TEXT) {
        size_t T = (size_t)a->seq_len * (size_t)n;
        same = memcmp(xa.tokens, xb.tokens, T * 4) == 0 && memcmp(xa.labels, xb.labels, T * 4) == 0;
    } else if (same) {
        size_t d = (size_t)(a->h * a->w * a->c) * (size_t)n;
        same = memcmp(xa.x, xb.x, d * 4) == 0 && memcmp(xa.labels, xb.labels, (size_t)n * 4) == 0;
    }
    gv_nn_batch_buf_cleanup(&ba);
    gv_nn_batch_buf_cleanup(&bb);
    return same;
}

/* A shard loaded on its own holds exactly the rank's samples of the whole set, batches from it
 * equal batches from the whole set, and it refuses items of other shards. */
static void check_shards(const char *what, const struct gv_nn_dataset *full,
                         struct gv_nn_dataset *const *part, int world)
{
    size_t held = 0;
    for (int r = 0; r < world; r++) {
        const struct gv_nn_dataset *p = part[r];
        if (p == NULL) {
            GV_CHECK_MSG(0, "%s: shard %d did not load", what, r);
            continue;
        }
        struct gv_nn_sampler smp;
        GV_CHECK_OK(gv_nn_sampler_init(&smp, full->n, r, world, 77));
        GV_CHECK_MSG(p->index != NULL && p->n == smp.m && p->n_total == full->n &&
                         memcmp(p->index, smp.shard, p->n * 4) == 0,
                     "%s: shard %d holds other samples than the sampler gives it", what, r);
        size_t items[2];
        for (int k = 0; k < 5; k++) { /* into the second epoch */
            GV_CHECK_OK(gv_nn_sampler_next(&smp, 2, items, NULL));
            GV_CHECK_MSG(same_batches(full, p, items, 2), "%s: shard %d batch differs", what, r);
        }
        held += p->n;
        /* an item of the next rank's shard */
        struct gv_nn_sampler other;
        GV_CHECK_OK(gv_nn_sampler_init(&other, full->n, (r + 1) % world, world, 77));
        struct gv_nn_batch_buf buf;
        struct gv_nn_batch bt;
        size_t foreign = other.shard[0];
        GV_CHECK_OK(gv_nn_batch_buf_init(&buf, p, 1));
        GV_CHECK_STATUS(gv_nn_batch_gather(p, &foreign, 1, &buf, &bt), GV_ERR_INVAL);
        gv_nn_batch_buf_cleanup(&buf);
        gv_nn_sampler_cleanup(&other);
        gv_nn_sampler_cleanup(&smp);
        GV_CHECK(gv_nn_dataset_bytes(p) < gv_nn_dataset_bytes(full));
    }
    GV_CHECK_EQ(held, full->n);
}

static void test_shard_loads(void)
{
    enum { N = 23, W = 3 };
    struct gv_nn_dataset *full = NULL, *part[W] = {0}, *te = NULL;
    /* IDX */
    static uint8_t img[N * 12 + 64], lab[N + 64];
    size_t ni = idx_make(img, 3, N, 4, 3, 253), nl = idx_make(lab, 1, N, 0, 0, 7);
    write_file("s_img.gz", img, ni, 1);
    write_file("s_lab", lab, nl, 0);
    GV_CHECK_OK(gv_nn_dataset_load_idx(path_of("s_img.gz"), path_of("s_lab"), 10, &full));
    for (int r = 0; r < W; r++) {
        struct gv_nn_shard sh = {.rank = r, .world = W, .seed = 77};
        GV_CHECK_OK(
            gv_nn_dataset_load_idx_shard(path_of("s_img.gz"), path_of("s_lab"), 10, &sh, &part[r]));
    }
    if (full != NULL)
        check_shards("idx", full, part, W);
    /* a bad label in another rank's part of the file is still found */
    struct gv_nn_sampler smp;
    GV_CHECK_OK(gv_nn_sampler_init(&smp, N, 1, W, 77));
    lab[8 + smp.shard[0]] = 10;
    write_file("s_lab_bad", lab, nl, 0);
    struct gv_nn_shard sh0 = {.rank = 0, .world = W, .seed = 77};
    struct gv_nn_dataset *bad = NULL;
    n_err = 0;
    GV_CHECK_STATUS(
        gv_nn_dataset_load_idx_shard(path_of("s_img.gz"), path_of("s_lab_bad"), 10, &sh0, &bad),
        GV_ERR_PROTO);
    GV_CHECK(bad == NULL && n_err == 1 && strstr(last_err, "out of range") != NULL);
    gv_nn_sampler_cleanup(&smp);
    for (int r = 0; r < W; r++)
        gv_nn_dataset_destroy(part[r]), part[r] = NULL;
    gv_nn_dataset_destroy(full), full = NULL;

    /* CIFAR-10 over two files */
    static uint8_t rec[7 * 3073];
    for (int r = 0; r < 7; r++)
        for (int i = 0; i < 3073; i++)
            rec[r * 3073 + i] = i == 0 ? (uint8_t)(r % 10) : (uint8_t)(i * 7 + r);
    write_file("s_c1.bin", rec, 4 * 3073, 0);
    write_file("s_c2.bin.gz", rec + 4 * 3073, 3 * 3073, 1);
    const char *cp[2] = {path_of("s_c1.bin"), path_of("s_c2.bin.gz")};
    GV_CHECK_OK(gv_nn_dataset_load_cifar10(cp, 2, &full));
    for (int r = 0; r < 2; r++) {
        struct gv_nn_shard sh = {.rank = r, .world = 2, .seed = 77};
        GV_CHECK_OK(gv_nn_dataset_load_cifar10_shard(cp, 2, &sh, &part[r]));
    }
    if (full != NULL)
        check_shards("cifar10", full, part, 2);
    for (int r = 0; r < 2; r++)
        gv_nn_dataset_destroy(part[r]), part[r] = NULL;
    gv_nn_dataset_destroy(full), full = NULL;

    /* text: the shard's windows */
    const char *t = "the quick brown fox jumps over the lazy dog, again and again and again!";
    write_file("s_t.txt", t, strlen(t), 0);
    const char *tp = path_of("s_t.txt");
    GV_CHECK_OK(gv_nn_dataset_load_text(&tp, 1, 4, 0.2, &full, &te));
    for (int r = 0; r < W; r++) {
        struct gv_nn_shard sh = {.rank = r, .world = W, .seed = 77};
        GV_CHECK_OK(gv_nn_dataset_load_text_shard(&tp, 1, 4, 0.2, &sh, &part[r], NULL));
    }
    if (full != NULL)
        check_shards("text", full, part, W);
    for (int r = 0; r < W; r++)
        gv_nn_dataset_destroy(part[r]), part[r] = NULL;
    gv_nn_dataset_destroy(full), full = NULL;
    gv_nn_dataset_destroy(te), te = NULL;

    /* synthetic: generated in sequence, the shard's samples kept; no test set asked for */
    GV_CHECK_OK(gv_nn_dataset_synthetic(4, 4, 1, 5, 100, 10, 0.5f, 9, &full, &te));
    for (int r = 0; r < W; r++) {
        struct gv_nn_shard sh = {.rank = r, .world = W, .seed = 77};
        GV_CHECK_OK(
            gv_nn_dataset_synthetic_shard(4, 4, 1, 5, 100, 10, 0.5f, 9, &sh, &part[r], NULL));
    }
    if (full != NULL)
        check_shards("synthetic", full, part, W);
    for (int r = 0; r < W; r++)
        gv_nn_dataset_destroy(part[r]);
    gv_nn_dataset_destroy(full);
    gv_nn_dataset_destroy(te);
    /* impossible shards */
    struct gv_nn_shard big = {.rank = 0, .world = 200, .seed = 1};
    GV_CHECK_STATUS(gv_nn_dataset_synthetic_shard(4, 4, 1, 5, 100, 10, 0.5f, 9, &big, &full, NULL),
                    GV_ERR_INVAL);
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
    test_shard_loads();
    gv_log_set_cb(NULL, NULL);
    test_fashion_mnist();
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return gv_check_summary();
}
