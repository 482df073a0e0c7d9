/* test_nn_train.c: real training on real data: the MLP 784-256-128-10 on Fashion-MNIST (Debian
 * package dataset-fashion-mnist) for 2 epochs on the CPU must reach >= 85% test accuracy. Also
 * checks that a 2-worker split of the training set trains on disjoint shards of half the size. */
#include "check.h"
#include "gv_nn.h"

#include <unistd.h>

#define DIR GV_NN_FASHION_MNIST_DIR

int main(void)
{
    struct gv_nn_dataset *tr = NULL, *te = NULL;
    if (access(DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) {
        fprintf(stderr, "%s missing: install dataset-fashion-mnist (scripts/setup.sh)\n", DIR);
        return 1;
    }
    GV_CHECK_OK(gv_nn_dataset_load_idx(DIR "/train-images-idx3-ubyte.gz",
                                       DIR "/train-labels-idx1-ubyte.gz", 10, &tr));
    GV_CHECK_OK(gv_nn_dataset_load_idx(DIR "/t10k-images-idx3-ubyte.gz",
                                       DIR "/t10k-labels-idx1-ubyte.gz", 10, &te));
    if (tr == NULL || te == NULL)
        return gv_check_summary();
    struct gv_nn_backend *be = NULL;
    struct gv_nn_model *m = NULL;
    struct gv_nn_model_cfg cfg;
    struct gv_optim_cfg oc;
    struct gv_nn_sampler s;
    struct gv_nn_batch_buf buf, ebuf;
    struct gv_nn_eval ev = {0};
    const int batch = 64, epochs = 2;
    gv_nn_model_cfg_default(GV_NN_MLP, &cfg);
    gv_optim_cfg_default(&oc);
    oc.lr = 0.02f;
    GV_CHECK_OK(gv_nn_backend_create(GV_NN_CPU, 1, &be));
    GV_CHECK_OK(gv_nn_model_create(be, &cfg, &m));
    GV_CHECK_OK(gv_nn_model_init(m, 1));
    GV_CHECK_OK(gv_nn_sampler_init(&s, tr->n, 0, 1, 1));
    GV_CHECK_OK(gv_nn_batch_buf_init(&buf, tr, batch));
    GV_CHECK_OK(gv_nn_batch_buf_init(&ebuf, te, 256));
    int64_t steps = epochs * (int64_t)(gv_nn_sampler_shard_size(&s) / batch);
    GV_CHECK_OK(gv_optim_schedule_parse("cosine", &oc));
    oc.total = steps;
    GV_CHECK_OK(gv_optim_cfg_check(&oc));
    size_t idx[64];
    double t0 = gv_now_s();
    for (int64_t t = 0; t < steps && m != NULL; t++) {
        struct gv_nn_batch b;
        if (gv_nn_sampler_next(&s, batch, idx, NULL) != GV_OK ||
            gv_nn_batch_gather(tr, idx, batch, &buf, &b) != GV_OK ||
            gv_nn_model_train_step(m, &b, NULL) != GV_OK ||
            gv_nn_model_optim_step(m, &oc, t) != GV_OK) {
            GV_CHECK_MSG(0, "training step %lld failed", (long long)t);
            break;
        }
    }
    double secs = gv_now_s() - t0;
    if (m != NULL)
        GV_CHECK_OK(gv_nn_evaluate(m, te, 256, 0, &ebuf, &ev));
    printf("mlp fashion-mnist: %d epochs, %lld steps in %.1f s (%.0f samples/s): test loss %.4f "
           "accuracy %.2f%%\n",
           epochs, (long long)steps, secs, (double)steps * batch / secs, ev.loss,
           100.0 * ev.accuracy);
    GV_CHECK_EQ(ev.count, 10000);
    GV_CHECK_MSG(ev.accuracy >= 0.85, "accuracy %.4f < 0.85", ev.accuracy);

    /* rank 1 of 2 gets half the data */
    struct gv_nn_sampler s1;
    GV_CHECK_OK(gv_nn_sampler_init(&s1, tr->n, 1, 2, 1));
    GV_CHECK_EQ(gv_nn_sampler_shard_size(&s1), 30000);
    gv_nn_sampler_cleanup(&s1);

    gv_nn_sampler_cleanup(&s);
    gv_nn_batch_buf_cleanup(&buf);
    gv_nn_batch_buf_cleanup(&ebuf);
    gv_nn_model_destroy(m);
    gv_nn_backend_destroy(be);
    gv_nn_dataset_destroy(tr);
    gv_nn_dataset_destroy(te);
    return gv_check_summary();
}
