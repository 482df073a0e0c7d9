/* data_load.c: dataset loaders: IDX (MNIST, Fashion-MNIST), CIFAR-10 binary, plain text and a
 * synthetic Gaussian mixture, for the whole set or one rank's shard. Real images are kept as
 * the files hold them (uint8, NHWC) and converted per batch; files are read front to back and
 * only the shard's samples are kept, so a worker holds its shard and little else. */
#include "nn_data.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define CIFAR_RECORD 3073 /* 1 label byte + 32*32*3 pixel bytes, channel planes */
#define LOAD_CHUNK ((size_t)1 << 16)

struct gv_nn_dataset *nn_dataset_new(const char *name)
{
    struct gv_nn_dataset *ds = gv_calloc(1, sizeof(*ds));
    if (ds != NULL)
        snprintf(ds->name, sizeof(ds->name), "%s", name);
    return ds;
}

void gv_nn_dataset_destroy(struct gv_nn_dataset *ds)
{
    if (ds == NULL)
        return;
    gv_free(ds->pix);
    gv_free(ds->x);
    gv_free(ds->y);
    gv_free(ds->tokens);
    gv_free(ds->index);
    gv_free(ds);
}

uint64_t gv_nn_dataset_bytes(const struct gv_nn_dataset *ds)
{
    if (ds == NULL)
        return 0;
    uint64_t d = (uint64_t)ds->h * (uint64_t)ds->w * (uint64_t)ds->c, n = ds->n;
    uint64_t b = ds->n_tokens + (ds->index != NULL ? 4 * n : 0);
    if (ds->kind == GV_NN_DATA_IMAGES)
        b += n * (ds->pix != NULL ? d : 4 * d) + 4 * n;
    return b;
}

/* Picks the shard's item numbers out of a set of n (all of them: *sel_p = NULL). */
static gv_status_t load_select(size_t n, const struct gv_nn_shard *shard, uint32_t **sel_p,
                               size_t *m_p)
{
    *sel_p = NULL;
    *m_p = n;
    if (shard == NULL || shard->world <= 1)
        return GV_OK;
    return gv_nn_shard_indices(n, shard, sel_p, m_p);
}

/* Allocates the images (pixels, or floats for synthetic data) and labels of m samples. */
static gv_status_t load_alloc_images(struct gv_nn_dataset *ds, size_t m, int h, int w, int c,
                                     int floats)
{
    ds->kind = GV_NN_DATA_IMAGES;
    ds->n = m;
    ds->h = h;
    ds->w = w;
    ds->c = c;
    size_t d = (size_t)(h * w * c);
    if (floats)
        ds->x = gv_malloc(m * d * sizeof(float));
    else
        ds->pix = gv_malloc(m * d);
    ds->y = gv_malloc(m * sizeof(int32_t));
    if ((ds->x == NULL && ds->pix == NULL) || ds->y == NULL) {
        gv_log(GV_LOG_ERROR, "%s: cannot allocate %zu images", ds->name, m);
        return GV_ERR_NOMEM;
    }
    return GV_OK;
}

/* ---------------------------------------------------------------- IDX */

/* Streams every item of s in chunks of buf (cap bytes, >= one item): items whose number is in
 * sel (ascending; NULL = all) are copied, in order, to out; with limit > 0 every byte of every
 * item must be below it (labels). */
static gv_status_t idx_keep(struct nn_idx *s, const uint32_t *sel, size_t m, uint8_t *out,
                            uint8_t *buf, size_t cap, int limit)
{
    size_t row = s->item_bytes, per = cap / row, k = 0;
    for (size_t at = 0; at < s->items;) {
        size_t cnt = GV_MIN(per, s->items - at);
        GV_NN_TRY(nn_idx_next(s, buf, cnt));
        for (size_t i = 0; limit > 0 && i < cnt * row; i++)
            if (buf[i] >= limit) {
                gv_log(GV_LOG_ERROR, "%s: label %u of item %zu out of range (%d classes)",
                       s->file.path, buf[i], at + i / row, limit);
                return GV_ERR_PROTO;
            }
        for (size_t i = 0; i < cnt; i++, at++)
            if (sel == NULL || (k < m && sel[k] == at))
                memcpy(out + row * k++, buf + row * i, row);
    }
    return nn_idx_end(s);
}

gv_status_t gv_nn_dataset_load_idx_shard(const char *images_path, const char *labels_path,
                                         int n_classes, const struct gv_nn_shard *shard,
                                         struct gv_nn_dataset **ds_p)
{
    struct nn_idx img, lab;
    struct gv_nn_dataset *ds = NULL;
    uint8_t *buf = NULL, *labels = NULL;
    uint32_t *sel = NULL;
    size_t m = 0;
    if (n_classes < 2 || n_classes > 256) {
        gv_log(GV_LOG_ERROR, "%s: %d classes (want 2..256)", labels_path, n_classes);
        return GV_ERR_INVAL;
    }
    gv_status_t status = nn_idx_open(&img, images_path, 3);
    if (status != GV_OK)
        return status;
    if ((status = nn_idx_open(&lab, labels_path, 1)) != GV_OK)
        goto err_img;
    if (img.items != lab.items) {
        gv_log(GV_LOG_ERROR, "%s has %zu images but %s has %zu labels", images_path, img.items,
               labels_path, lab.items);
        status = GV_ERR_PROTO;
        goto err_lab;
    }
    if ((status = load_select(img.items, shard, &sel, &m)) != GV_OK)
        goto err_lab;
    status = GV_ERR_NOMEM;
    size_t cap = GV_MAX(LOAD_CHUNK, img.item_bytes);
    if ((buf = gv_malloc(cap)) == NULL || (labels = gv_malloc(m)) == NULL ||
        (ds = nn_dataset_new(images_path)) == NULL)
        goto err_free;
    ds->n_classes = n_classes;
    ds->n_total = img.items;
    if ((status = load_alloc_images(ds, m, (int)img.dims[1], (int)img.dims[2], 1, 0)) != GV_OK)
        goto err_free;
    if ((status = idx_keep(&lab, sel, m, labels, buf, cap, n_classes)) != GV_OK ||
        (status = idx_keep(&img, sel, m, ds->pix, buf, cap, 0)) != GV_OK)
        goto err_free;
    for (size_t i = 0; i < m; i++)
        ds->y[i] = labels[i];
    ds->index = sel;
    sel = NULL;
    *ds_p = ds;
    ds = NULL;
err_free:
    gv_nn_dataset_destroy(ds);
    gv_free(sel);
    gv_free(labels);
    gv_free(buf);
err_lab:
    nn_idx_close(&lab);
err_img:
    nn_idx_close(&img);
    return status;
}

gv_status_t gv_nn_dataset_load_idx(const char *images_path, const char *labels_path, int n_classes,
                                   struct gv_nn_dataset **ds_p)
{
    return gv_nn_dataset_load_idx_shard(images_path, labels_path, n_classes, NULL, ds_p);
}

/* ---------------------------------------------------------------- CIFAR-10 */

/* Reads the records of one file, keeping those selected (numbers from *at on) into ds. */
static gv_status_t cifar_keep(struct gv_nn_dataset *ds, const char *path, size_t records,
                              const uint32_t *sel, size_t *at, size_t *k)
{
    struct nn_file fl;
    uint8_t rec[CIFAR_RECORD];
    GV_NN_TRY(nn_file_open(&fl, path));
    gv_status_t status = GV_OK;
    for (size_t r = 0; r < records && status == GV_OK; r++, (*at)++) {
        status = nn_file_read(&fl, rec, CIFAR_RECORD, (uint64_t)records * CIFAR_RECORD, "the file");
        if (status == GV_OK && rec[0] >= 10) {
            gv_log(GV_LOG_ERROR, "%s: label %u of record %zu out of range (10 classes)", path,
                   rec[0], r);
            status = GV_ERR_PROTO;
        }
        if (status != GV_OK || (sel != NULL && (*k >= ds->n || sel[*k] != *at)))
            continue;
        ds->y[*k] = rec[0];
        uint8_t *x = ds->pix + *k * 3072;
        for (int p = 0; p < 1024; p++) /* planes R, G, B -> interleaved HWC */
            for (int c = 0; c < 3; c++)
                x[p * 3 + c] = rec[1 + c * 1024 + p];
        (*k)++;
    }
    if (status == GV_OK)
        status = nn_file_end(&fl, "counted before (the file changed while loading)");
    nn_file_close(&fl);
    return status;
}

gv_status_t gv_nn_dataset_load_cifar10_shard(const char *const *paths, int n_paths,
                                             const struct gv_nn_shard *shard,
                                             struct gv_nn_dataset **ds_p)
{
    size_t records[16] = {0}, total = 0, at = 0, k = 0, m = 0;
    struct gv_nn_dataset *ds = NULL;
    uint32_t *sel = NULL;
    if (n_paths < 1 || n_paths > 16) {
        gv_log(GV_LOG_ERROR, "cifar10: %d files given (want 1..16)", n_paths);
        return GV_ERR_INVAL;
    }
    for (int i = 0; i < n_paths; i++) {
        uint64_t len = 0;
        GV_NN_TRY(nn_file_size(paths[i], (uint64_t)CIFAR_RECORD * 100000, &len));
        if (len == 0 || len % CIFAR_RECORD != 0) {
            gv_log(GV_LOG_ERROR,
                   "%s: %llu bytes is not a whole number of %d-byte records "
                   "(truncated or not a CIFAR-10 binary file)",
                   paths[i], (unsigned long long)len, CIFAR_RECORD);
            return GV_ERR_PROTO;
        }
        records[i] = (size_t)(len / CIFAR_RECORD);
        total += records[i];
    }
    gv_status_t status = load_select(total, shard, &sel, &m);
    if (status != GV_OK)
        return status;
    status = GV_ERR_NOMEM;
    if ((ds = nn_dataset_new(paths[0])) == NULL)
        goto out;
    ds->n_classes = 10;
    ds->n_total = total;
    if ((status = load_alloc_images(ds, m, 32, 32, 3, 0)) != GV_OK)
        goto out;
    for (int i = 0; i < n_paths && status == GV_OK; i++)
        status = cifar_keep(ds, paths[i], records[i], sel, &at, &k);
    if (status != GV_OK)
        goto out;
    ds->index = sel;
    sel = NULL;
    *ds_p = ds;
    ds = NULL;
out:
    gv_nn_dataset_destroy(ds);
    gv_free(sel);
    return status;
}

gv_status_t gv_nn_dataset_load_cifar10(const char *const *paths, int n_paths,
                                       struct gv_nn_dataset **ds_p)
{
    return gv_nn_dataset_load_cifar10_shard(paths, n_paths, NULL, ds_p);
}

/* ---------------------------------------------------------------- text */

static struct gv_nn_dataset *text_split(const char *name, size_t len, int seq_len)
{
    struct gv_nn_dataset *ds = nn_dataset_new(name);
    if (ds == NULL)
        return NULL;
    ds->kind = GV_NN_DATA_TEXT;
    ds->seq_len = seq_len;
    ds->tokens = gv_malloc(len ? len : 1);
    if (ds->tokens == NULL) {
        gv_nn_dataset_destroy(ds);
        return NULL;
    }
    return ds;
}

/* Builds the byte vocabulary over all files and maps both splits through it. */
static void text_build(uint8_t **bufs, const size_t *lens, int n, double test_frac,
                       struct gv_nn_dataset *tr, struct gv_nn_dataset *te)
{
    int id[256], v = 0;
    uint8_t seen[256] = {0};
    for (int f = 0; f < n; f++)
        for (size_t i = 0; i < lens[f]; i++)
            seen[bufs[f][i]] = 1;
    for (int b = 0; b < 256; b++) {
        id[b] = seen[b] ? v : -1;
        if (seen[b]) {
            tr->vocab[v] = te->vocab[v] = (char)b;
            v++;
        }
    }
    tr->n_classes = te->n_classes = v;
    for (int f = 0; f < n; f++) {
        size_t cut = lens[f] - (size_t)((double)lens[f] * test_frac);
        for (size_t i = 0; i < lens[f]; i++) {
            struct gv_nn_dataset *d = i < cut ? tr : te;
            d->tokens[d->n_tokens++] = (uint8_t)id[bufs[f][i]];
        }
    }
    tr->n = tr->n_total = tr->n_tokens > 0 ? (tr->n_tokens - 1) / (size_t)tr->seq_len : 0;
    te->n = te->n_total = te->n_tokens > 0 ? (te->n_tokens - 1) / (size_t)te->seq_len : 0;
}

/* Replaces the corpus of tr with the shard's windows (seq_len + 1 tokens each). */
static gv_status_t text_shard(struct gv_nn_dataset *tr, const struct gv_nn_shard *shard)
{
    uint32_t *sel = NULL;
    size_t m = 0, T = (size_t)tr->seq_len;
    GV_NN_TRY(load_select(tr->n, shard, &sel, &m));
    if (sel == NULL)
        return GV_OK;
    uint8_t *win = gv_malloc(m * (T + 1));
    if (win == NULL) {
        gv_free(sel);
        return GV_ERR_NOMEM;
    }
    for (size_t i = 0; i < m; i++)
        memcpy(win + i * (T + 1), tr->tokens + (size_t)sel[i] * T, T + 1);
    gv_free(tr->tokens);
    tr->tokens = win;
    tr->n_tokens = m * (T + 1);
    tr->n = m;
    tr->index = sel;
    return GV_OK;
}

gv_status_t gv_nn_dataset_load_text_shard(const char *const *paths, int n_paths, int seq_len,
                                          double test_frac, const struct gv_nn_shard *shard,
                                          struct gv_nn_dataset **train_p,
                                          struct gv_nn_dataset **test_p)
{
    uint8_t *bufs[32] = {0};
    size_t lens[32] = {0}, total = 0;
    struct gv_nn_dataset *tr = NULL, *te = NULL;
    gv_status_t status = GV_ERR_INVAL;
    if (n_paths < 1 || n_paths > 32 || seq_len < 1 || seq_len > 4096 || !(test_frac > 0.0) ||
        !(test_frac < 1.0)) {
        gv_log(GV_LOG_ERROR, "text: bad arguments (%d files, seq_len %d, test fraction %g)",
               n_paths, seq_len, test_frac);
        return GV_ERR_INVAL;
    }
    for (int i = 0; i < n_paths; i++) {
        if ((status = nn_file_read_all(paths[i], (size_t)1 << 30, &bufs[i], &lens[i])) != GV_OK)
            goto out;
        if (lens[i] == 0) {
            gv_log(GV_LOG_ERROR, "%s: empty text file", paths[i]);
            status = GV_ERR_PROTO;
            goto out;
        }
        total += lens[i];
    }
    status = GV_ERR_NOMEM;
    if ((tr = text_split(paths[0], total, seq_len)) == NULL ||
        (te = text_split(paths[0], total, seq_len)) == NULL)
        goto out;
    text_build(bufs, lens, n_paths, test_frac, tr, te);
    status = GV_ERR_PROTO;
    if (tr->n_classes < 2) {
        gv_log(GV_LOG_ERROR, "%s: fewer than 2 distinct bytes: nothing to predict", paths[0]);
        goto out;
    }
    if (tr->n < 1 || te->n < 1) {
        gv_log(GV_LOG_ERROR,
               "%s: %zu bytes is too little text for windows of %d (train %zu, "
               "test %zu windows)",
               paths[0], total, seq_len, tr->n, te->n);
        goto out;
    }
    if ((status = text_shard(tr, shard)) != GV_OK)
        goto out;
    *train_p = tr;
    tr = NULL;
    if (test_p != NULL) {
        *test_p = te;
        te = NULL;
    }
out:
    gv_nn_dataset_destroy(tr);
    gv_nn_dataset_destroy(te);
    for (int i = 0; i < n_paths && i < 32; i++)
        gv_free(bufs[i]);
    return status;
}

gv_status_t gv_nn_dataset_load_text(const char *const *paths, int n_paths, int seq_len,
                                    double test_frac, struct gv_nn_dataset **train_p,
                                    struct gv_nn_dataset **test_p)
{
    return gv_nn_dataset_load_text_shard(paths, n_paths, seq_len, test_frac, NULL, train_p, test_p);
}

/* ---------------------------------------------------------------- synthetic */

static double synth_normal(uint64_t *st)
{
    double u1 = ((double)(gv_nn_splitmix64(st) >> 11) + 1.0) * 0x1.0p-53;
    double u2 = (double)(gv_nn_splitmix64(st) >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* n samples drawn in sequence from one stream; those in shard are kept. */
static gv_status_t synth_make(const char *name, const float *centres, size_t n, int h, int w, int c,
                              int k, float noise, uint64_t seed, const struct gv_nn_shard *shard,
                              struct gv_nn_dataset **ds_p)
{
    uint32_t *sel = NULL;
    size_t m = 0;
    GV_NN_TRY(load_select(n, shard, &sel, &m));
    struct gv_nn_dataset *ds = nn_dataset_new(name);
    gv_status_t status = ds != NULL ? GV_OK : GV_ERR_NOMEM;
    if (status == GV_OK) {
        ds->n_classes = k;
        ds->n_total = n;
        ds->index = sel;
        sel = NULL;
        status = load_alloc_images(ds, m, h, w, c, 1);
    }
    if (status != GV_OK) {
        gv_free(sel);
        gv_nn_dataset_destroy(ds);
        return status;
    }
    size_t d = (size_t)(h * w * c), kept = 0;
    uint64_t st = seed;
    for (size_t i = 0; i < n; i++) {
        int y = (int)(gv_nn_splitmix64(&st) % (uint64_t)k);
        bool keep = ds->index == NULL || (kept < m && ds->index[kept] == i);
        float *x = ds->x + kept * d;
        for (size_t j = 0; j < d; j++) {
            float v = centres[(size_t)y * d + j] + noise * (float)synth_normal(&st);
            if (keep)
                x[j] = v;
        }
        if (keep)
            ds->y[kept++] = y;
    }
    *ds_p = ds;
    return GV_OK;
}

gv_status_t gv_nn_dataset_synthetic_shard(int h, int w, int c, int n_classes, size_t n_train,
                                          size_t n_test, float noise, uint64_t seed,
                                          const struct gv_nn_shard *shard,
                                          struct gv_nn_dataset **train_p,
                                          struct gv_nn_dataset **test_p)
{
    if (h < 1 || w < 1 || c < 1 || h * w * c > 65536 || n_classes < 2 || n_classes > 256 ||
        n_train < 1 || n_test < 1 || n_train > NN_MAX_SAMPLES || n_test > NN_MAX_SAMPLES ||
        !(noise >= 0.0f)) {
        gv_log(GV_LOG_ERROR, "synthetic: bad shape, class count, sizes or noise");
        return GV_ERR_INVAL;
    }
    size_t d = (size_t)(h * w * c);
    float *centres = gv_malloc((size_t)n_classes * d * sizeof(float));
    if (centres == NULL)
        return GV_ERR_NOMEM;
    /* Blocky centres (constant over 2x2 pixel cells): local structure that a convolution with
     * pooling can pick up, as in real images, while the classes stay linearly separable. */
    uint64_t st = seed ^ 0x5eedc0de5eedc0deULL;
    for (int k = 0; k < n_classes; k++)
        for (int y = 0; y < h; y += 2)
            for (int x = 0; x < w; x += 2)
                for (int ch = 0; ch < c; ch++) {
                    float v = (float)synth_normal(&st);
                    for (int yy = y; yy < GV_MIN(y + 2, h); yy++)
                        for (int xx = x; xx < GV_MIN(x + 2, w); xx++)
                            centres[(size_t)k * d +
                                    ((size_t)yy * (size_t)w + (size_t)xx) * (size_t)c +
                                    (size_t)ch] = v;
                }
    struct gv_nn_dataset *tr = NULL, *te = NULL;
    gv_status_t status = synth_make("synthetic-train", centres, n_train, h, w, c, n_classes, noise,
                                    seed * 2 + 1, shard, &tr);
    if (status == GV_OK && test_p != NULL)
        status = synth_make("synthetic-test", centres, n_test, h, w, c, n_classes, noise,
                            seed * 2 + 2, NULL, &te);
    gv_free(centres);
    if (status != GV_OK) {
        gv_nn_dataset_destroy(tr);
        return status;
    }
    *train_p = tr;
    if (test_p != NULL)
        *test_p = te;
    return GV_OK;
}

gv_status_t gv_nn_dataset_synthetic(int h, int w, int c, int n_classes, size_t n_train,
                                    size_t n_test, float noise, uint64_t seed,
                                    struct gv_nn_dataset **train_p, struct gv_nn_dataset **test_p)
{
    return gv_nn_dataset_synthetic_shard(h, w, c, n_classes, n_train, n_test, noise, seed, NULL,
                                         train_p, test_p);
}
