/* gv_nn.h: training workloads for gravac workers: compute backends (CPU on OpenBLAS, GPU on
 * CUDA + cuBLAS) behind one ops table, four models (softmax regression, MLP, CNN, LSTM language
 * model) whose parameters, gradients and momentum live in one arena, the SGD optimizer with
 * learning-rate schedules, datasets (IDX, CIFAR-10 binary, text, synthetic) with per-rank
 * shards, and the training-loop pieces (evaluation, metrics file, progress lines).
 * Holds no networking: the distributed runtime in worker/ moves the flat vectors defined here. */
#ifndef GV_NN_H
#define GV_NN_H

#include "gv_common.h"

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ================================================================ backends */

enum gv_nn_device {
    GV_NN_CPU = 0,  /* OpenBLAS + C loops; the oracle in tests */
    GV_NN_CUDA = 1, /* cuBLAS + CUDA kernels, when built with the toolkit */
};

struct gv_nn_backend; /* opaque; see nn_internal.h for the ops table */

/* Parses "cpu" or "cuda"; GV_ERR_INVAL otherwise. */
gv_status_t gv_nn_device_parse(const char *s, enum gv_nn_device *dev_p);

/* Creates a backend. threads: OpenBLAS threads for the CPU backend (0 = 1, since several worker
 * processes usually share a machine); ignored by CUDA. Errors: GV_ERR_UNSUPPORTED (CUDA not built
 * in), GV_ERR_NODEV (built, but no GPU), GV_ERR_CUDA, GV_ERR_NOMEM. */
gv_status_t gv_nn_backend_create(enum gv_nn_device dev, int threads, struct gv_nn_backend **be_p);
void gv_nn_backend_destroy(struct gv_nn_backend *be);
const char *gv_nn_backend_name(const struct gv_nn_backend *be);
/* Where this backend's tensors live: GV_MEM_HOST (cpu) or GV_MEM_DEVICE (cuda). */
enum gv_mem gv_nn_backend_mem(const struct gv_nn_backend *be);
/* Copies bytes between this backend's memory (src, dst) and host memory, ordered after every
 * operation queued before; complete when they return (the host buffer may be reused). For
 * cuda, host memory from gv_buf_alloc(GV_MEM_PINNED) is copied fastest: creating a cuda
 * backend installs the pinned and device allocators of common/ (gv_mem_set_ops). */
gv_status_t gv_nn_backend_download(struct gv_nn_backend *be, void *host, const void *src,
                                   size_t bytes);
gv_status_t gv_nn_backend_upload(struct gv_nn_backend *be, void *dst, const void *host,
                                 size_t bytes);

/* ================================================================ optimizer */

enum gv_lr_kind {
    GV_LR_CONSTANT = 0,
    GV_LR_STEP = 1,   /* lr * gamma^(number of milestones <= t) */
    GV_LR_COSINE = 2, /* from lr down to min_lr over [warmup, total) */
};

#define GV_LR_MAX_MILESTONES 8

/* SGD with momentum (PyTorch semantics, no dampening), for every element i:
 *   g = grad[i] + weight_decay * p[i]
 *   v[i] = momentum * v[i] + g
 *   d = nesterov ? g + momentum * v[i] : v[i]
 *   p[i] = p[i] - lr_t * d
 * in float, in this order, no fused multiply-add; so applying it to any index range gives
 * bit-identical results to applying it to the whole vector, on every host. */
struct gv_optim_cfg {
    float lr;           /* base learning rate */
    float momentum;     /* 0 = plain SGD */
    float weight_decay; /* L2, applied to every element (biases included) */
    int nesterov;
    enum gv_lr_kind sched;
    int64_t warmup;                           /* linear warm-up iterations (0 = none) */
    int64_t milestones[GV_LR_MAX_MILESTONES]; /* GV_LR_STEP: ascending iterations */
    int n_milestones;
    float gamma;   /* GV_LR_STEP factor */
    int64_t total; /* GV_LR_COSINE: last iteration (> warmup) */
    float min_lr;  /* GV_LR_COSINE floor */
};

/* lr 0.05, momentum 0.9, no decay, constant schedule, gamma 0.1. */
void gv_optim_cfg_default(struct gv_optim_cfg *cfg);
/* Parses "constant" | "step:IT[,IT...][@GAMMA]" | "cosine[:TOTAL[:MIN_LR]]" into cfg (other
 * fields untouched). GV_ERR_INVAL with a logged reason on anything else. */
gv_status_t gv_optim_schedule_parse(const char *s, struct gv_optim_cfg *cfg);
/* GV_ERR_INVAL (logged) when cfg is inconsistent (negative lr, unsorted milestones, ...). */
gv_status_t gv_optim_cfg_check(const struct gv_optim_cfg *cfg);
/* Learning rate at iteration t (0-based): a pure function of (cfg, t). */
float gv_optim_lr(const struct gv_optim_cfg *cfg, int64_t t);
/* One step on host arrays p, v, g (float[n], host), any sub-range of a flat vector. */
void gv_optim_apply_host(const struct gv_optim_cfg *cfg, float lr, float *p, float *v,
                         const float *g, size_t n);
/* The momentum half of the step, kept apart (a worker's --local-momentum): u = momentum * u +
 * (g + weight_decay * p), and g = u, on host arrays of n elements; the step that follows runs
 * without momentum and weight decay. Nesterov is not done here. */
void gv_optim_velocity_host(const struct gv_optim_cfg *cfg, const float *p, float *u, float *g,
                            size_t n);
/* Same step on [a, b) of host vectors (p, v, g point at element 0). */
void gv_optim_step_range_host(const struct gv_optim_cfg *cfg, int64_t t, float *p, float *v,
                              const float *g, size_t a, size_t b);
/* Same step on backend memory (device memory for cuda: a kernel with the same semantics). */
gv_status_t gv_optim_step(struct gv_nn_backend *be, const struct gv_optim_cfg *cfg, int64_t t,
                          float *p, float *v, const float *g, size_t n);
/* gv_optim_apply_host on backend memory with the rate given (what a worker does with the
 * rate a server sent): the same bits as the host step on every backend (the CUDA kernel rounds
 * each operation as the CPU does, no FMA; test_nn_cuda checks it). */
gv_status_t gv_optim_apply(struct gv_nn_backend *be, const struct gv_optim_cfg *cfg, float lr,
                           float *p, float *v, const float *g, size_t n);
/* gv_optim_velocity_host on backend memory, the same bits on every backend. */
gv_status_t gv_optim_velocity(struct gv_nn_backend *be, const struct gv_optim_cfg *cfg,
                              const float *p, float *u, float *g, size_t n);

/* ================================================================ models */

enum gv_nn_model_kind {
    GV_NN_SOFTMAX = 0, /* dense(in -> classes) */
    GV_NN_MLP = 1,     /* dense+relu per width, dense(-> classes) */
    GV_NN_CNN = 2,     /* [conv3x3+relu+maxpool2] x 2, dense+relu, dense */
    GV_NN_LSTM = 3,    /* embedding, LSTM layers, dense(-> vocab), per-step softmax */
};

#define GV_NN_MAX_WIDTHS 8
#define GV_NN_MAX_LSTM_LAYERS 4

struct gv_nn_model_cfg {
    enum gv_nn_model_kind kind;
    int in_h, in_w, in_c;         /* image input shape (NHWC); CNN needs h, w % 4 == 0 */
    int n_classes;                /* classes, or vocabulary size for the LSTM */
    int widths[GV_NN_MAX_WIDTHS]; /* MLP hidden widths */
    int n_widths;
    int conv1, conv2, cnn_dense;        /* CNN channels and dense width */
    int embed, hidden, layers, seq_len; /* LSTM */
    int max_batch;                      /* largest batch forward/backward will see */
};

/* Fills the documented defaults for kind (28x28x1 input, 10 classes, MLP 256,128, CNN 16/32/128,
 * LSTM embed 32, hidden 128, 1 layer, seq_len 64, max_batch 256). */
void gv_nn_model_cfg_default(enum gv_nn_model_kind kind, struct gv_nn_model_cfg *cfg);
gv_status_t gv_nn_model_kind_parse(const char *s, enum gv_nn_model_kind *kind_p);
const char *gv_nn_model_kind_str(enum gv_nn_model_kind kind);

/* One parameter tensor: a view into the flat vectors (same offset in params, grads, momentum). */
struct gv_nn_tensor {
    char name[24]; /* "fc1.w", "conv2.b", "lstm0.wh", ... */
    int ndim;
    int shape[4];  /* row-major; weights are [out, in] */
    size_t offset; /* in floats from the start of the flat vector */
    size_t numel;
};

struct gv_nn_model;

/* Per-batch results: sums, so callers can aggregate across batches and workers.
 * count is the number of predictions (samples, or samples * seq_len for the LSTM). */
struct gv_nn_stats {
    double loss_sum;
    int64_t correct;
    int64_t count;
};

/* A batch in host memory; borrowed for the duration of the call. */
struct gv_nn_batch {
    int n;                 /* samples, 1..max_batch */
    const float *x;        /* image models: float[n][in_h][in_w][in_c], host */
    const int32_t *tokens; /* LSTM: int32[n][seq_len] input token ids, host */
    const int32_t *labels; /* int32[n] classes, or int32[n][seq_len] next tokens, host */
};

/* Builds the model on be (borrowed; must outlive the model): one arena holding params, grads
 * and momentum (3 x numel floats in backend memory) plus a workspace for max_batch. Parameters
 * are zero until gv_nn_model_init. GV_ERR_INVAL on a bad cfg (logged), GV_ERR_NOMEM. */
gv_status_t gv_nn_model_create(struct gv_nn_backend *be, const struct gv_nn_model_cfg *cfg,
                               struct gv_nn_model **model_p);
void gv_nn_model_destroy(struct gv_nn_model *m);
const struct gv_nn_model_cfg *gv_nn_model_cfg(const struct gv_nn_model *m);
struct gv_nn_backend *gv_nn_model_backend(const struct gv_nn_model *m);

/* Deterministic initialisation from seed (He-uniform weights, zero biases, LSTM forget-gate bias
 * 1, zero momentum): identical bits for the same (cfg, seed) on every backend and host. */
gv_status_t gv_nn_model_init(struct gv_nn_model *m, uint64_t seed);

size_t gv_nn_model_numel(const struct gv_nn_model *m);
/* Bytes of the workspace (activations and their gradients for max_batch samples), in backend
 * memory: host memory on the CPU backend, device memory on cuda. */
size_t gv_nn_model_workspace_bytes(const struct gv_nn_model *m);
int gv_nn_model_tensor_count(const struct gv_nn_model *m);
const struct gv_nn_tensor *gv_nn_model_tensor(const struct gv_nn_model *m, int i);
/* The flat vectors: float[numel] each, in backend memory (device memory for cuda), valid for
 * the model's lifetime. Tensor i is [offset, offset + numel) of each. */
float *gv_nn_model_params(struct gv_nn_model *m);
float *gv_nn_model_grads(struct gv_nn_model *m);
float *gv_nn_model_momentum(struct gv_nn_model *m);

/* Copies between the flat vectors and host buffers (float[numel], host). */
gv_status_t gv_nn_model_get_params(struct gv_nn_model *m, float *host);
gv_status_t gv_nn_model_set_params(struct gv_nn_model *m, const float *host);
gv_status_t gv_nn_model_get_grads(struct gv_nn_model *m, float *host);
gv_status_t gv_nn_model_set_grads(struct gv_nn_model *m, const float *host);

/* Forward and backward on one batch: grads are overwritten with d(mean loss)/d(params).
 * stats_p (may be NULL) receives the batch's loss sum, correct predictions and count.
 * GV_ERR_INVAL (logged) when the batch is malformed (n out of range, label out of range). */
gv_status_t gv_nn_model_train_step(struct gv_nn_model *m, const struct gv_nn_batch *b,
                                   struct gv_nn_stats *stats_p);
/* What a caller running communication beside the compute (gravac-worker --overlap) is told
 * during a training step. Offsets are elements of the flat vectors. */
struct gv_nn_hooks {
    /* Before the forward pass first reads parameters [lo, hi): the caller returns once they are
     * final (a non-OK status ends the step with it). */
    gv_status_t (*params_needed)(void *user, size_t lo, size_t hi);
    /* The gradients of [lo, numel) are final: called with decreasing lo during the backward
     * pass, last with 0 (a non-OK status ends the step with it). */
    gv_status_t (*grads_ready)(void *user, size_t lo);
    void *user;
};
/* A dense layer's weight gradient is computed, and reported, in blocks of rows of about 128 Ki
 * elements (with or without hooks: the same bits either way), so that its first blocks can
 * leave while the rest is computed; the forward pass asks for the same blocks. Image models
 * only: the LSTM's weights are needed from its first time step to its last, so it asks for
 * every parameter before its forward pass and reports every gradient after its backward pass. */

/* gv_nn_model_train_step with hooks (NULL: none): the same bits with or without them. */
gv_status_t gv_nn_model_train_step_hooked(struct gv_nn_model *m, const struct gv_nn_batch *b,
                                          const struct gv_nn_hooks *hooks,
                                          struct gv_nn_stats *stats_p);
/* Forward only; grads untouched. */
gv_status_t gv_nn_model_eval_batch(struct gv_nn_model *m, const struct gv_nn_batch *b,
                                   struct gv_nn_stats *stats_p);
/* SGD step on the whole replica with the model's own momentum buffer. */
gv_status_t gv_nn_model_optim_step(struct gv_nn_model *m, const struct gv_optim_cfg *cfg,
                                   int64_t t);

/* ================================================================ datasets */

enum gv_nn_data_kind {
    GV_NN_DATA_IMAGES = 0, /* pixels uint8[n][h][w][c] (or x float), y int32[n] */
    GV_NN_DATA_TEXT = 1,   /* tokens; sample i = a window of seq_len + 1 tokens */
};

/* A dataset, or a shard of one (index != NULL). Samples are named by their item number in the
 * whole set (0 .. n_total - 1): the sampler hands out item numbers and gv_nn_batch_gather
 * takes them, whether the process holds the whole set or only its shard. */
struct gv_nn_dataset {
    char name[64];
    enum gv_nn_data_kind kind;
    size_t n;        /* samples held */
    size_t n_total;  /* samples in the whole set (n when not a shard) */
    int h, w, c;     /* image shape */
    int n_classes;   /* classes, or vocabulary size */
    uint8_t *pix;    /* real images as the files hold them: uint8[n][h][w][c] (HWC), host;
                        scaled to [-1, 1] by gv_nn_batch_gather (p * 2/255 - 1) */
    float *x;        /* synthetic images: float[n][h][w][c], host (NULL when pix is used) */
    int32_t *y;      /* labels int32[n], host */
    uint8_t *tokens; /* text, token ids < n_classes, host: the corpus (window i starts at
                        i * seq_len), or for a shard the n windows back to back, seq_len + 1
                        tokens each */
    size_t n_tokens;
    int seq_len;
    char vocab[256]; /* text: token id -> byte */
    uint32_t *index; /* NULL: the whole set (sample i is item i); else uint32[n], the item
                        numbers of the samples held, ascending, host */
};

/* Which samples of a training set a process keeps: the shard rank of world that gv_nn_sampler
 * gives that rank (see there). world <= 1: the whole set. */
struct gv_nn_shard {
    int rank, world;
    uint64_t seed; /* the sampler's seed */
};

/* The item numbers of a shard of a set of n, ascending: *idx_p (uint32[*m_p], gv_free).
 * GV_ERR_INVAL (logged) when the shard is impossible (rank >= world, world > n, n > 2^32). */
gv_status_t gv_nn_shard_indices(size_t n, const struct gv_nn_shard *shard, uint32_t **idx_p,
                                size_t *m_p);

/* Every loader logs one error naming the file and what is wrong, returns GV_ERR_IO (missing or
 * unreadable file) or GV_ERR_PROTO (wrong magic, truncated, label out of range, counts that
 * do not match, trailing bytes), and never crashes. *ds_p is written only on success. The
 * _shard forms read the files front to back and keep only the shard's samples (shard NULL:
 * all), so loading never holds more than the shard plus a 64 KiB buffer; every item is still
 * validated. */

/* IDX image and label files, gzipped or raw (0x00000803 images [n][rows][cols] ubyte,
 * 0x00000801 labels [n] ubyte, each label < n_classes). */
gv_status_t gv_nn_dataset_load_idx(const char *images_path, const char *labels_path, int n_classes,
                                   struct gv_nn_dataset **ds_p);
gv_status_t gv_nn_dataset_load_idx_shard(const char *images_path, const char *labels_path,
                                         int n_classes, const struct gv_nn_shard *shard,
                                         struct gv_nn_dataset **ds_p);
/* CIFAR-10 binary files (gzipped or raw): records of 1 label byte + 3072 pixel bytes (R, G, B
 * planes), held as 32x32x3 HWC. The files are read twice (count, then keep). */
gv_status_t gv_nn_dataset_load_cifar10(const char *const *paths, int n_paths,
                                       struct gv_nn_dataset **ds_p);
gv_status_t gv_nn_dataset_load_cifar10_shard(const char *const *paths, int n_paths,
                                             const struct gv_nn_shard *shard,
                                             struct gv_nn_dataset **ds_p);
/* Plain-text corpus (the files concatenated): byte-level vocabulary of the bytes that occur
 * (at most 256, sorted), shared by both splits; the last test_frac of each file goes to test.
 * The _shard form keeps the shard's windows of the training split, and the test split only
 * when test_p is not NULL. */
gv_status_t gv_nn_dataset_load_text(const char *const *paths, int n_paths, int seq_len,
                                    double test_frac, struct gv_nn_dataset **train_p,
                                    struct gv_nn_dataset **test_p);
gv_status_t gv_nn_dataset_load_text_shard(const char *const *paths, int n_paths, int seq_len,
                                          double test_frac, const struct gv_nn_shard *shard,
                                          struct gv_nn_dataset **train_p,
                                          struct gv_nn_dataset **test_p);
/* Gaussian mixture: n_classes centres drawn from seed (constant over 2x2 pixel cells), samples
 * centre + noise * N(0, 1), held as floats (x). train and test share the centres and differ in
 * samples. The _shard form generates every training sample (the stream is sequential) and
 * keeps the shard's, and the test set only when test_p is not NULL. */
gv_status_t gv_nn_dataset_synthetic(int h, int w, int c, int n_classes, size_t n_train,
                                    size_t n_test, float noise, uint64_t seed,
                                    struct gv_nn_dataset **train_p, struct gv_nn_dataset **test_p);
gv_status_t gv_nn_dataset_synthetic_shard(int h, int w, int c, int n_classes, size_t n_train,
                                          size_t n_test, float noise, uint64_t seed,
                                          const struct gv_nn_shard *shard,
                                          struct gv_nn_dataset **train_p,
                                          struct gv_nn_dataset **test_p);
void gv_nn_dataset_destroy(struct gv_nn_dataset *ds);
/* Bytes the dataset holds in memory (samples, labels, tokens, index). 0 for NULL. */
uint64_t gv_nn_dataset_bytes(const struct gv_nn_dataset *ds);

/* Default file locations (Debian packages dataset-fashion-mnist and fortunes). */
#define GV_NN_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#define GV_NN_TEXT_DEFAULT                                                                         \
    "/usr/share/games/fortunes/cookie,/usr/share/games/fortunes/computers,"                        \
    "/usr/share/games/fortunes/songs-poems,/usr/share/games/fortunes/definitions,"                 \
    "/usr/share/games/fortunes/people,/usr/share/games/fortunes/science"

/* Seeded shard sampler. Rank r's shard is fixed for the whole run: slice r of world equal
 * contiguous slices of one permutation of [0, n) drawn from (seed, epoch 0), so ranks are
 * disjoint and cover the set (gv_nn_shard_indices gives it, ascending). Every epoch e the
 * shard, in ascending order, is shuffled with the stream of (seed, e), so each rank reads its
 * own samples in a new order every epoch (for world 1: one permutation of the whole set per
 * epoch). Batches are taken in order; an incomplete tail batch is dropped and the next epoch
 * starts. Item numbers refer to the whole set (gv_nn_batch_gather maps them into a shard). */
struct gv_nn_sampler {
    size_t n; /* samples in the whole set */
    int rank, world;
    uint64_t seed;
    int64_t epoch;   /* epoch of the last batch returned */
    size_t m;        /* samples in this rank's shard */
    size_t pos;      /* next position in order */
    uint32_t *shard; /* uint32[m]: the shard's item numbers, ascending, host */
    uint32_t *order; /* uint32[m]: this epoch's order, host */
};

gv_status_t gv_nn_sampler_init(struct gv_nn_sampler *s, size_t n, int rank, int world,
                               uint64_t seed);
void gv_nn_sampler_cleanup(struct gv_nn_sampler *s);
/* Samples per epoch for this rank. */
size_t gv_nn_sampler_shard_size(const struct gv_nn_sampler *s);
/* Writes batch item numbers into idx (size_t[batch]); GV_ERR_INVAL if the shard is smaller
 * than one batch. *epoch_p (may be NULL) receives the epoch the batch belongs to (0-based). */
gv_status_t gv_nn_sampler_next(struct gv_nn_sampler *s, int batch, size_t *idx, int64_t *epoch_p);

/* Host staging for one batch of up to cap samples of ds. */
struct gv_nn_batch_buf {
    int cap;
    float *x;
    int32_t *tokens;
    int32_t *labels;
};
gv_status_t gv_nn_batch_buf_init(struct gv_nn_batch_buf *buf, const struct gv_nn_dataset *ds,
                                 int cap);
void gv_nn_batch_buf_cleanup(struct gv_nn_batch_buf *buf);
/* Copies the samples with item numbers idx[0..n) of ds into buf (images converted to floats)
 * and points *b at them (n <= cap). GV_ERR_INVAL (logged) for an item ds does not hold. */
gv_status_t gv_nn_batch_gather(const struct gv_nn_dataset *ds, const size_t *idx, int n,
                               struct gv_nn_batch_buf *buf, struct gv_nn_batch *b);

/* ================================================================ training-loop pieces */

struct gv_nn_eval {
    double loss;       /* mean per prediction */
    double accuracy;   /* correct / count */
    double perplexity; /* exp(loss); meaningful for the LSTM */
    int64_t count;
};

/* Evaluates m on the first limit samples ds holds (0 = all) in batches of up to batch (clamped
 * to the model's max_batch); uses buf as staging (initialised for ds with cap >= batch). */
gv_status_t gv_nn_evaluate(struct gv_nn_model *m, const struct gv_nn_dataset *ds, int batch,
                           size_t limit, struct gv_nn_batch_buf *buf, struct gv_nn_eval *ev);

/* One logged point: a training step ("step") or an evaluation ("eval"). */
struct gv_nn_record {
    const char *type; /* "step" | "eval" */
    int64_t step;     /* iterations done */
    int64_t epoch;
    double time_s; /* since training started */
    double loss;
    double accuracy;   /* [0, 1] */
    double perplexity; /* < 0: not reported */
    double samples_per_s;
    float lr;
    double cf; /* compression factor (1.0 when uncompressed) */
    uint64_t bytes_sent;
    int standalone; /* cf and bytes_sent are placeholders */
};

struct gv_nn_metrics;
/* Opens path for writing JSON lines (truncates). GV_ERR_IO (logged) on failure. */
gv_status_t gv_nn_metrics_open(const char *path, struct gv_nn_metrics **mf_p);
/* Writes one JSON object per line and flushes; GV_ERR_IO on a write error. */
gv_status_t gv_nn_metrics_write(struct gv_nn_metrics *mf, const struct gv_nn_record *r);
void gv_nn_metrics_close(struct gv_nn_metrics *mf);
/* Formats r as one progress line (no newline) into out[len]. */
void gv_nn_progress_format(const struct gv_nn_record *r, char *out, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* GV_NN_H */
