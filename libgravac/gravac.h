/* gravac.h: libgravac, gravac's worker side for embedding in a training program: the model and
 * the optimizer are the caller's (PyTorch's, through the gravac.torch package, or any C code);
 * gravac compresses the gradient with error feedback, pushes it to the parameter servers, and
 * returns the averaged gradient, which the caller's optimizer then applies. The servers learn
 * the model's layout from the tensors registered here, and check that every worker's parameters
 * stay bitwise equal (docs/torch.md).
 *
 *     struct gravac *g;
 *     const char *argv[] = {"train", "--method", "gravac-exp"};
 *     gravac_create(3, argv, &g);                   // + GV_* variables, --config, MPI/Slurm
 *     gravac_add_tensor(g, "fc.weight", 2, (int64_t[]){10, 784});
 *     gravac_add_tensor(g, "fc.bias", 1, (int64_t[]){10});
 *     gravac_start(g, params, grads, 7850);         // params now hold worker 0's model
 *     for (...) {
 *         forward_backward(params, grads);          // the local gradient in grads
 *         gravac_step(g, loss, compute_s, batch, &info);  // grads: the averaged gradient
 *         my_optimizer_step(params, grads);
 *     }
 *     gravac_finish(g);                             // BYE; the summary
 *     gravac_destroy(g);
 *
 * Every function returns a gravac_status; on an error gravac_last_error() says why (the line
 * gravac logged). Threading: one object per thread; the library runs a helper thread of its own
 * (heartbeats while the caller computes). This header is the library's whole interface. */
#ifndef GRAVAC_H
#define GRAVAC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GRAVAC_API_VERSION 2 /* 2: gravac_set_lr */

/* The values are gravac's own status codes. */
typedef enum {
    GRAVAC_OK = 0,
    GRAVAC_ERR_NOMEM = -1,
    GRAVAC_ERR_INVAL = -2,   /* a bad argument or option, or a call out of order */
    GRAVAC_ERR_IO = -3,      /* a file or socket error */
    GRAVAC_ERR_PROTO = -4,   /* refused: another model, layout or options than the servers' */
    GRAVAC_ERR_TIMEOUT = -6, /* start-up did not complete in --connect-timeout */
    GRAVAC_ERR_CLOSED = -7,  /* the job ended with an error (a peer died or failed; see why) */
    GRAVAC_ERR_UNSUPPORTED = -8,
    GRAVAC_ERR_AUTH = -11,    /* the shared secret differs */
    GRAVAC_ERR_VERSION = -12, /* a peer of another gravac version */
} gravac_status;

struct gravac;

/* What one step did. */
struct gravac_step_info {
    uint64_t iteration;   /* the iteration just run (0, 1, ...) */
    int32_t level;        /* 0 dense, 1 floor CF (theta_min), 2 candidate CF */
    int32_t stopped;      /* 1: the job had ended (worker 0 finished): nothing was applied */
    double cf;            /* compression factor sent (1: dense) */
    double cf_candidate;  /* GraVAC's candidate CF */
    double theta_min;     /* GraVAC's floor CF */
    uint64_t bytes_sent;  /* this worker's bytes on the wire (headers included) */
    uint64_t bytes_recv;  /* bytes received */
    uint64_t nnz_sent;    /* gradient entries pushed */
    double compress_s;    /* compression and encoding */
    double comm_s;        /* from the last push to the last update */
    double step_s;        /* the whole call */
    uint64_t checks;      /* checksum checks so far (averaged gradient, replicas) */
    uint64_t dense_bytes; /* 4 x the parameters: a dense push */
};

int gravac_api_version(void);
/* sizeof(struct gravac_step_info), for bindings that declare it themselves. */
size_t gravac_step_info_size(void);
/* "closed", "protocol error", ... */
const char *gravac_status_str(int status);

/* Creates a worker from options, as gravac-worker takes them: argv[1..argc) ("--method",
 * "static", "--cf=100", ...; argv[0] is a program name), the GV_* environment variables and a
 * --config file (GV_CONFIG); the rank from --rank, GV_RANK, or MPI/Slurm. The model is the
 * caller's (--model external, the default here) and so, unless --optimizer job is given, is
 * the optimizer (--optimizer caller). Nothing connects yet. GRAVAC_ERR_INVAL for a bad option
 * or a missing cluster setting (logged, naming it). */
gravac_status gravac_create(int argc, const char *const *argv, struct gravac **g_p);
void gravac_destroy(struct gravac *g);

int gravac_rank(const struct gravac *g);
int gravac_size(const struct gravac *g); /* workers */
int gravac_num_servers(const struct gravac *g);

/* Registers the next tensor of the model, in the order of the flat buffers (name: printable,
 * at most 200 bytes; ndim <= 8, every dimension >= 1; a scalar has ndim 0). Before
 * gravac_start. */
gravac_status gravac_add_tensor(struct gravac *g, const char *name, int ndim, const int64_t *shape);

/* Connects to every server (handshake, layout, fingerprint), seeds the servers (worker 0) and
 * receives the model: on return params holds worker 0's initial parameters on every worker.
 * params, grads: float[numel], the registered tensors back to back, borrowed until
 * gravac_destroy. GRAVAC_ERR_PROTO when refused (another layout: the first differing tensor is
 * named), GRAVAC_ERR_TIMEOUT, GRAVAC_ERR_AUTH, GRAVAC_ERR_CLOSED. */
gravac_status gravac_start(struct gravac *g, float *params, float *grads, size_t numel);

/* One iteration: grads holds this worker's gradient; on return it holds the average over the
 * workers (what every worker's optimizer must apply; with --optimizer job params are stepped
 * too). loss: the batch's mean loss (NAN when unknown: the servers then count it as 0, and the
 * default controller, AUTO, which compares arms by how fast the loss falls, has only their
 * times to go on); compute_s: forward and backward time;
 * samples: the batch size (the controller's throughput). info may be NULL. When the job has
 * ended (worker 0 finished earlier) info->stopped is 1 and nothing changed. */
gravac_status gravac_step(struct gravac *g, double loss, double compute_s, uint64_t samples,
                          struct gravac_step_info *info);

/* The learning rate the caller's optimizer uses from the next step on (a PyTorch LR
 * scheduler's): it goes with each step's statistics, and the servers' controller sees it instead
 * of their own --lr (AUTO starts a new phase when it drops; Accordion's lr-decay rule). 0 (the
 * default): none given. GRAVAC_ERR_INVAL unless finite and >= 0. */
gravac_status gravac_set_lr(struct gravac *g, double lr);

/* A test-set evaluation for the metrics file and the summary (accuracy in 0..1; NAN when not
 * applicable). Call it right after evaluating: the time since the last step is the
 * evaluation's, and the next step tells the servers so (their controller leaves it out of the
 * iteration's time); pass the next step's compute_s from now. */
gravac_status gravac_report_eval(struct gravac *g, double loss, double accuracy);

/* After the last step: says BYE to the servers (waits for their answers, at most 2 s), prints
 * this worker's summary and writes it to the metrics file. */
gravac_status gravac_finish(struct gravac *g);

/* The caller failed (an exception in a training script): the servers are told why, so that
 * every process of the job stops and names this worker and the reason. */
void gravac_fail(struct gravac *g, const char *why);

/* The last error gravac logged on the calling thread; when that thread has logged none, the
 * last one of the process (its helper thread's, say); "" when none. */
const char *gravac_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* GRAVAC_H */
