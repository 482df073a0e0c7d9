/* gravac_worker_data.c: the gravac-worker program's data: the job's training set (only this
 * worker's shard of it is read into memory) and test set, from IDX, CIFAR or text files. */
#include "worker_prog.h"

#include <stdio.h>
#include <string.h>

#define WORKER_TRY(expr)                                                                           \
    do {                                                                                           \
        gv_status_t try_status_ = (expr);                                                          \
        if (try_status_ != GV_OK)                                                                  \
            return try_status_;                                                                    \
    } while (0)

/* dir/base.gz if it exists, else dir/base (MNIST is shipped both ways). */
static void idx_path(char *out, size_t len, const char *dir, const char *base)
{
    char gz[1024];
    snprintf(gz, sizeof(gz), "%s/%s.gz", dir, base);
    FILE *f = fopen(gz, "rb");
    if (f != NULL) {
        fclose(f);
        snprintf(out, len, "%s", gz);
    } else {
        snprintf(out, len, "%s/%s", dir, base);
    }
}

static gv_status_t load_idx_dir(const char *dir, const struct gv_nn_shard *sh,
                                struct gv_nn_dataset **tr, struct gv_nn_dataset **te)
{
    char a[1024], b[1024];
    idx_path(a, sizeof(a), dir, "train-images-idx3-ubyte");
    idx_path(b, sizeof(b), dir, "train-labels-idx1-ubyte");
    WORKER_TRY(gv_nn_dataset_load_idx_shard(a, b, 10, sh, tr));
    if (te == NULL)
        return GV_OK;
    idx_path(a, sizeof(a), dir, "t10k-images-idx3-ubyte");
    idx_path(b, sizeof(b), dir, "t10k-labels-idx1-ubyte");
    return gv_nn_dataset_load_idx(a, b, 10, te);
}

static gv_status_t load_cifar(const char *dir, const struct gv_nn_shard *sh,
                              struct gv_nn_dataset **tr, struct gv_nn_dataset **te)
{
    char paths[5][1024], test[1024];
    const char *p[5];
    for (int i = 0; i < 5; i++) {
        snprintf(paths[i], sizeof(paths[i]), "%s/data_batch_%d.bin", dir, i + 1);
        p[i] = paths[i];
    }
    snprintf(test, sizeof(test), "%s/test_batch.bin", dir);
    const char *tp = test;
    WORKER_TRY(gv_nn_dataset_load_cifar10_shard(p, 5, sh, tr));
    return te != NULL ? gv_nn_dataset_load_cifar10(&tp, 1, te) : GV_OK;
}

static gv_status_t load_text(const struct gv_job *job, const struct gv_nn_shard *sh,
                             struct gv_nn_dataset **tr, struct gv_nn_dataset **te)
{
    char buf[4096];
    const char *paths[32];
    int n = 0;
    snprintf(buf, sizeof(buf), "%s", job->text[0] ? job->text : GV_NN_TEXT_DEFAULT);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL && n < 32;
         tok = strtok_r(NULL, ",", &save))
        paths[n++] = tok;
    return gv_nn_dataset_load_text_shard(paths, n, job->model_cfg.seq_len, 0.1, sh, tr, te);
}

static gv_status_t load_data(const struct gv_job *job, const struct gv_nn_shard *sh,
                             struct gv_nn_dataset **tr, struct gv_nn_dataset **te)
{
    const char *dir = job->data_dir[0] ? job->data_dir : GV_NN_FASHION_MNIST_DIR;
    switch (job->data) {
    case GV_JOB_DATA_FASHION:
    case GV_JOB_DATA_MNIST: return load_idx_dir(dir, sh, tr, te);
    case GV_JOB_DATA_CIFAR10: return load_cifar(job->data_dir, sh, tr, te);
    case GV_JOB_DATA_IDX:
        WORKER_TRY(gv_nn_dataset_load_idx_shard(job->train_images, job->train_labels, job->classes,
                                                sh, tr));
        return te != NULL
                   ? gv_nn_dataset_load_idx(job->test_images, job->test_labels, job->classes, te)
                   : GV_OK;
    case GV_JOB_DATA_TEXT: return load_text(job, sh, tr, te);
    case GV_JOB_DATA_SYNTHETIC:
        return gv_nn_dataset_synthetic_shard(job->model_cfg.in_h, job->model_cfg.in_w, 1, 10,
                                             (size_t)job->synthetic_n, 2048, 1.5f, job->seed, sh,
                                             tr, te);
    default: return GV_ERR_INVAL;
    }
}

gv_status_t wp_load_data(const struct gv_job *job, int rank, int world, bool want_test,
                         struct gv_nn_dataset **tr, struct gv_nn_dataset **te)
{
    *tr = *te = NULL;
    struct gv_nn_shard sh = {.rank = rank, .world = world, .seed = job->seed};
    gv_status_t status = load_data(job, &sh, tr, want_test ? te : NULL);
    if (status != GV_OK) {
        gv_nn_dataset_destroy(*tr);
        *tr = NULL;
    }
    return status;
}

uint64_t wp_data_bytes(const struct gv_nn_dataset *tr, const struct gv_nn_dataset *te)
{
    return gv_nn_dataset_bytes(tr) + gv_nn_dataset_bytes(te);
}
