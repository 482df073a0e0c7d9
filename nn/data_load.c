/* data_load.c: dataset loaders: IDX (MNIST, Fashion-MNIST), CIFAR-10 binary, plain text and a
 * synthetic Gaussian mixture. Images are stored NHWC as floats scaled to [-1, 1]. */
#include "nn_data.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define CIFAR_RECORD 3073 /* 1 label byte + 32*32*3 pixel bytes, channel planes */

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
    gv_free(ds->x);
    gv_free(ds->y);
    gv_free(ds->tokens);
    gv_free(ds);
}

static float data_pixel(uint8_t p)
{
    return (float)p * (2.0f / 255.0f) - 1.0f;
}

/* Allocates x and y for n images of h*w*c. */
static gv_status_t data_alloc_images(struct gv_nn_dataset *ds, size_t n, int h, int w, int c)
{
    ds->kind = GV_NN_DATA_IMAGES;
    ds->n = n;
    ds->h = h;
    ds->w = w;
    ds->c = c;
    ds->x = gv_malloc(n * (size_t)(h * w * c) * sizeof(float));
    ds->y = gv_malloc(n * sizeof(int32_t));
    if (ds->x == NULL || ds->y == NULL) {
        gv_log(GV_LOG_ERROR, "%s: cannot allocate %zu images", ds->name, n);
        return GV_ERR_NOMEM;
    }
    return GV_OK;
}

static gv_status_t idx_fill(struct gv_nn_dataset *ds, const char *labels_path, const uint8_t *img,
                            const uint8_t *lab, int n_classes)
{
    size_t d = (size_t)(ds->h * ds->w);
    for (size_t i = 0; i < ds->n; i++) {
        if (lab[i] >= n_classes) {
            gv_log(GV_LOG_ERROR, "%s: label %u of item %zu out of range (%d classes)", labels_path,
                   lab[i], i, n_classes);
            return GV_ERR_PROTO;
        }
        ds->y[i] = lab[i];
    }
    for (size_t i = 0; i < ds->n * d; i++)
        ds->x[i] = data_pixel(img[i]);
    return GV_OK;
}

gv_status_t gv_nn_dataset_load_idx(const char *images_path, const char *labels_path,
                                   int n_classes, struct gv_nn_dataset **ds_p)
{
    uint32_t idims[3], ldims[1];
    uint8_t *img = NULL, *lab = NULL;
    struct gv_nn_dataset *ds = NULL;
    gv_status_t status = GV_ERR_INVAL;
    if (n_classes < 2 || n_classes > 256) {
        gv_log(GV_LOG_ERROR, "%s: %d classes (want 2..256)", labels_path, n_classes);
        return GV_ERR_INVAL;
    }
    if ((status = nn_idx_read(images_path, 3, idims, &img)) != GV_OK)
        goto out;
    if ((status = nn_idx_read(labels_path, 1, ldims, &lab)) != GV_OK)
        goto out;
    if (idims[0] != ldims[0]) {
        gv_log(GV_LOG_ERROR, "%s has %u images but %s has %u labels", images_path, idims[0],
               labels_path, ldims[0]);
        status = GV_ERR_PROTO;
        goto out;
    }
    status = GV_ERR_NOMEM;
    if ((ds = nn_dataset_new(images_path)) == NULL)
        goto out;
    ds->n_classes = n_classes;
    if ((status = data_alloc_images(ds, idims[0], (int)idims[1], (int)idims[2], 1)) != GV_OK)
        goto out;
    if ((status = idx_fill(ds, labels_path, img, lab, n_classes)) != GV_OK)
        goto out;
    *ds_p = ds;
    ds = NULL;
out:
    gv_nn_dataset_destroy(ds);
    gv_free(img);
    gv_free(lab);
    return status;
}

/* Appends the records of one CIFAR-10 file (already read) to ds starting at item *at. */
static gv_status_t cifar_fill(struct gv_nn_dataset *ds, const char *path, const uint8_t *buf,
                              size_t records, size_t *at)
{
    for (size_t r = 0; r < records; r++, (*at)++) {
        const uint8_t *rec = buf + r * CIFAR_RECORD;
        if (rec[0] >= 10) {
            gv_log(GV_LOG_ERROR, "%s: label %u of record %zu out of range (10 classes)", path,
                   rec[0], r);
            return GV_ERR_PROTO;
        }
        ds->y[*at] = rec[0];
        float *x = ds->x + *at * 3072;
        for (int p = 0; p < 1024; p++) /* planes R, G, B -> interleaved HWC */
            for (int c = 0; c < 3; c++)
                x[p * 3 + c] = data_pixel(rec[1 + c * 1024 + p]);
    }
    return GV_OK;
}

gv_status_t gv_nn_dataset_load_cifar10(const char *const *paths, int n_paths,
                                       struct gv_nn_dataset **ds_p)
{
    uint8_t *bufs[16] = {0};
    size_t lens[16] = {0}, total = 0, at = 0;
    struct gv_nn_dataset *ds = NULL;
    gv_status_t status = GV_ERR_INVAL;
    if (n_paths < 1 || n_paths > 16) {
        gv_log(GV_LOG_ERROR, "cifar10: %d files given (want 1..16)", n_paths);
        return GV_ERR_INVAL;
    }
    for (int i = 0; i < n_paths; i++) {
        status = nn_file_read_all(paths[i], (size_t)CIFAR_RECORD * 100000, &bufs[i], &lens[i]);
        if (status != GV_OK)
            goto out;
        if (lens[i] == 0 || lens[i] % CIFAR_RECORD != 0) {
            gv_log(GV_LOG_ERROR, "%s: %zu bytes is not a whole number of %d-byte records "
                   "(truncated or not a CIFAR-10 binary file)", paths[i], lens[i], CIFAR_RECORD);
            status = GV_ERR_PROTO;
            goto out;
        }
        total += lens[i] / CIFAR_RECORD;
    }
    status = GV_ERR_NOMEM;
    if ((ds = nn_dataset_new(paths[0])) == NULL)
        goto out;
    ds->n_classes = 10;
    if ((status = data_alloc_images(ds, total, 32, 32, 3)) != GV_OK)
        goto out;
    for (int i = 0; i < n_paths; i++)
        if ((status = cifar_fill(ds, paths[i], bufs[i], lens[i] / CIFAR_RECORD, &at)) != GV_OK)
            goto out;
    *ds_p = ds;
    ds = NULL;
out:
    gv_nn_dataset_destroy(ds);
    for (int i = 0; i < n_paths && i < 16; i++)
        gv_free(bufs[i]);
    return status;
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
static gv_status_t text_build(uint8_t **bufs, const size_t *lens, int n, double test_frac,
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
    tr->n = tr->n_tokens > 0 ? (tr->n_tokens - 1) / (size_t)tr->seq_len : 0;
    te->n = te->n_tokens > 0 ? (te->n_tokens - 1) / (size_t)te->seq_len : 0;
    return GV_OK;
}

gv_status_t gv_nn_dataset_load_text(const char *const *paths, int n_paths, int seq_len,
                                    double test_frac, struct gv_nn_dataset **train_p,
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
        gv_log(GV_LOG_ERROR, "%s: %zu bytes is too little text for windows of %d (train %zu, "
               "test %zu windows)", paths[0], total, seq_len, tr->n, te->n);
        goto out;
    }
    *train_p = tr;
    *test_p = te;
    tr = te = NULL;
    status = GV_OK;
out:
    gv_nn_dataset_destroy(tr);
    gv_nn_dataset_destroy(te);
    for (int i = 0; i < n_paths && i < 32; i++)
        gv_free(bufs[i]);
    return status;
}

/* ---------------------------------------------------------------- synthetic */

static double synth_normal(uint64_t *st)
{
    double u1 = ((double)(gv_nn_splitmix64(st) >> 11) + 1.0) * 0x1.0p-53;
    double u2 = (double)(gv_nn_splitmix64(st) >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

static gv_status_t synth_make(const char *name, const float *centres, size_t n, int h, int w,
                              int c, int k, float noise, uint64_t seed,
                              struct gv_nn_dataset **ds_p)
{
    struct gv_nn_dataset *ds = nn_dataset_new(name);
    if (ds == NULL)
        return GV_ERR_NOMEM;
    ds->n_classes = k;
    gv_status_t status = data_alloc_images(ds, n, h, w, c);
    if (status != GV_OK) {
        gv_nn_dataset_destroy(ds);
        return status;
    }
    size_t d = (size_t)(h * w * c);
    uint64_t st = seed;
    for (size_t i = 0; i < n; i++) {
        int y = (int)(gv_nn_splitmix64(&st) % (uint64_t)k);
        ds->y[i] = y;
        for (size_t j = 0; j < d; j++)
            ds->x[i * d + j] = centres[(size_t)y * d + j] + noise * (float)synth_normal(&st);
    }
    *ds_p = ds;
    return GV_OK;
}

gv_status_t gv_nn_dataset_synthetic(int h, int w, int c, int n_classes, size_t n_train,
                                    size_t n_test, float noise, uint64_t seed,
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
                            centres[(size_t)k * d + ((size_t)yy * (size_t)w + (size_t)xx) *
                                                        (size_t)c + (size_t)ch] = v;
                }
    struct gv_nn_dataset *tr = NULL, *te = NULL;
    gv_status_t status = synth_make("synthetic-train", centres, n_train, h, w, c, n_classes,
                                    noise, seed * 2 + 1, &tr);
    if (status == GV_OK)
        status = synth_make("synthetic-test", centres, n_test, h, w, c, n_classes, noise,
                            seed * 2 + 2, &te);
    gv_free(centres);
    if (status != GV_OK) {
        gv_nn_dataset_destroy(tr);
        return status;
    }
    *train_p = tr;
    *test_p = te;
    return GV_OK;
}
