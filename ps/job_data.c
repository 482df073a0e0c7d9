/* job_data.c: the shape of the job's data (image size, classes, training-set size) read from
 * the files' headers only, so a server learns the model's layout without loading the data.
 * The text corpus is the exception: its vocabulary needs the bytes (it is small). */
#include "gv_ps.h"
#include "ps_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

/* dir/base.gz if it exists, else dir/base (the loaders accept both). */
static void data_idx_path(char *out, size_t len, const char *dir, const char *base)
{
    snprintf(out, len, "%s/%s.gz", dir, base);
    FILE *f = fopen(out, "rb");
    if (f != NULL) {
        fclose(f);
        return;
    }
    snprintf(out, len, "%s/%s", dir, base);
}

static uint32_t data_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The 16-byte header of an IDX image file (gzipped or raw). */
static gv_status_t data_idx_header(const char *path, size_t *n_p, int *rows_p, int *cols_p)
{
    gzFile f = gzopen(path, "rb");
    if (f == NULL) {
        gv_log(GV_LOG_ERROR, "%s: cannot open: %s", path, strerror(errno ? errno : ENOENT));
        return GV_ERR_IO;
    }
    unsigned char h[16];
    int got = gzread(f, h, sizeof(h));
    gzclose(f);
    if (got != (int)sizeof(h)) {
        gv_log(GV_LOG_ERROR, "%s: truncated IDX header", path);
        return GV_ERR_PROTO;
    }
    uint32_t magic = data_be32(h), n = data_be32(h + 4), rows = data_be32(h + 8),
             cols = data_be32(h + 12);
    if (magic != 0x00000803u || n == 0 || rows == 0 || cols == 0 || rows > 4096 || cols > 4096) {
        gv_log(GV_LOG_ERROR, "%s: not an IDX image file (magic 0x%08x, %u x %u x %u)", path, magic,
               n, rows, cols);
        return GV_ERR_PROTO;
    }
    *n_p = n;
    *rows_p = (int)rows;
    *cols_p = (int)cols;
    return GV_OK;
}

/* Bytes of a (possibly gzipped) file. */
static gv_status_t data_file_bytes(const char *path, uint64_t *bytes_p)
{
    gzFile f = gzopen(path, "rb");
    if (f == NULL) {
        gv_log(GV_LOG_ERROR, "%s: cannot open: %s", path, strerror(errno ? errno : ENOENT));
        return GV_ERR_IO;
    }
    unsigned char buf[16384];
    uint64_t total = 0;
    int got;
    while ((got = gzread(f, buf, sizeof(buf))) > 0)
        total += (uint64_t)got;
    gzclose(f);
    if (got < 0) {
        gv_log(GV_LOG_ERROR, "%s: read error", path);
        return GV_ERR_IO;
    }
    *bytes_p = total;
    return GV_OK;
}

static gv_status_t data_cifar(struct gv_job *job)
{
    uint64_t total = 0;
    for (int i = 1; i <= 5; i++) {
        char path[1100];
        uint64_t b;
        snprintf(path, sizeof(path), "%s/data_batch_%d.bin", job->data_dir, i);
        gv_status_t status = data_file_bytes(path, &b);
        if (status != GV_OK)
            return status;
        if (b == 0 || b % 3073 != 0) {
            gv_log(GV_LOG_ERROR, "%s: %llu bytes is not a whole number of 3073-byte records", path,
                   (unsigned long long)b);
            return GV_ERR_PROTO;
        }
        total += b / 3073;
    }
    job->n_train = (size_t)total;
    job->model_cfg.in_h = job->model_cfg.in_w = 32;
    job->model_cfg.in_c = 3;
    job->model_cfg.n_classes = 10;
    return GV_OK;
}

static gv_status_t data_text(struct gv_job *job)
{
    char buf[4096];
    const char *paths[32];
    int n = 0;
    snprintf(buf, sizeof(buf), "%s", job->text[0] ? job->text : GV_NN_TEXT_DEFAULT);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL && n < 32;
         tok = strtok_r(NULL, ",", &save))
        paths[n++] = tok;
    struct gv_nn_dataset *tr = NULL, *te = NULL;
    gv_status_t status = gv_nn_dataset_load_text(paths, n, job->model_cfg.seq_len, 0.1, &tr, &te);
    if (status != GV_OK)
        return status;
    job->n_train = tr->n;
    job->model_cfg.n_classes = tr->n_classes;
    gv_nn_dataset_destroy(tr);
    gv_nn_dataset_destroy(te);
    return GV_OK;
}

gv_status_t job_data_shape(struct gv_job *job)
{
    struct gv_nn_model_cfg *mc = &job->model_cfg;
    char path[1100];
    int rows, cols;
    gv_status_t status;

    job->data_kind = GV_NN_DATA_IMAGES;
    mc->in_c = 1;
    mc->n_classes = 10;
    switch (job->data) {
    case GV_JOB_DATA_FASHION:
    case GV_JOB_DATA_MNIST: {
        const char *dir = job->data_dir[0] ? job->data_dir : NULL;
        if (dir == NULL && job->data == GV_JOB_DATA_MNIST) {
            gv_log(GV_LOG_ERROR, "--dataset mnist needs --data-dir");
            return GV_ERR_IO;
        }
        data_idx_path(path, sizeof(path), dir ? dir : GV_NN_FASHION_MNIST_DIR,
                      "train-images-idx3-ubyte");
        status = data_idx_header(path, &job->n_train, &rows, &cols);
        break;
    }
    case GV_JOB_DATA_IDX:
        if (!job->train_images[0] || !job->train_labels[0] || !job->test_images[0] ||
            !job->test_labels[0]) {
            gv_log(GV_LOG_ERROR, "--dataset idx needs --train-images, --train-labels, "
                                 "--test-images and --test-labels");
            return GV_ERR_INVAL;
        }
        status = data_idx_header(job->train_images, &job->n_train, &rows, &cols);
        mc->n_classes = job->classes;
        break;
    case GV_JOB_DATA_CIFAR10:
        if (!job->data_dir[0]) {
            gv_log(GV_LOG_ERROR, "--dataset cifar10 needs --data-dir");
            return GV_ERR_IO;
        }
        return data_cifar(job);
    case GV_JOB_DATA_TEXT: job->data_kind = GV_NN_DATA_TEXT; return data_text(job);
    case GV_JOB_DATA_SYNTHETIC:
        mc->in_h = job->model == GV_NN_CNN ? 8 : 1;
        mc->in_w = job->model == GV_NN_CNN ? 8 : 64;
        job->n_train = (size_t)job->synthetic_n;
        return GV_OK;
    default: gv_log(GV_LOG_ERROR, "unknown dataset %d", job->data); return GV_ERR_INVAL;
    }
    if (status != GV_OK)
        return status;
    mc->in_h = rows;
    mc->in_w = cols;
    return GV_OK;
}
