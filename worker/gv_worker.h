/* gv_worker.h: the distributed worker runtime, the library a training loop calls. It connects
 * to every server (handshake, model fingerprint check), seeds the servers with the initial model
 * (worker 0) and receives the model and the decision in force from each, then per iteration:
 * compresses the gradient with error feedback (both GraVAC levels, per tensor), pushes one
 * message per server as soon as that server's shard is compressed (so compression overlaps the
 * transfers), receives every server's update (the averaged gradient of its shard, sparse or
 * dense), applies the same optimizer step the server applied, verifies the shard checksum, and
 * adopts the next decision. The replica is host memory (the CPU path) or device memory (a GPU
 * worker: compression on the GPU, pushes and updates through pinned host mirrors, the
 * optimizer step as a kernel; see gv_worker_model).
 * Operations: heartbeats to every server and a dead-server timeout (a helper thread runs the
 * event loop while the caller computes between steps: peers see this worker alive, and a dead
 * server is reported within the timeout), periodic checkpoints of the error-feedback residual
 * (with the servers' iterations, so that a resumed job continues exactly), a stop on request.
 * Threading: one worker object belongs to one thread, the caller's; its functions take an
 * internal lock shared with the helper thread, which touches no caller buffer. */
#ifndef GV_WORKER_H
#define GV_WORKER_H

#include "gv_ps.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gv_worker;

struct gv_worker_config {
    const struct gv_job *job;            /* borrowed, resolved: method, compressor, optimizer */
    const struct gv_cluster *cluster;    /* borrowed, resolved, role worker */
    const struct gv_auth_secret *secret; /* borrowed; empty = --insecure */
    int cmp_threads;                     /* compressor threads (0 or 1: the calling thread) */
    uint32_t verify_every; /* compare the shard checksums every N iterations (0: no) */
    bool host_mirrors;     /* treat a host replica (model.be a CPU backend) as a GPU one: separate
                              host mirrors, copies through the backend, the backend's optimizer
                              step; runs the GPU worker's data path on a CPU (tests) */
    /* operations (docs/operations.md); zero-initialised fields disable each */
    uint64_t heartbeat_interval_ns; /* a HEARTBEAT on every idle link this often (0: none) */
    uint64_t peer_timeout_ns;       /* a server silent this long is dead (0: never) */
    const char *checkpoint_dir;     /* the residual goes to DIR/worker<RRRR>/ (NULL/"": no) */
    uint64_t checkpoint_every;      /* with the servers' --checkpoint-every (0: never) */
    int checkpoint_keep;            /* files kept (0 means 3) */
    struct gv_trace *trace;         /* borrowed, NULL: no timeline; used inside the caller's
                                       gv_worker_step only */
};

/* The replica the runtime updates: flat vectors, borrowed for the worker's life. Tensor t is
 * [off_t, off_t + tensor_numel[t]) of each vector, back to back. With be a GPU backend
 * (gv_nn_backend_mem(be) == GV_MEM_DEVICE) the vectors are device memory: the runtime then
 * compresses on the GPU (compress/'s CUDA backend), copies the level sent to pinned host memory
 * per tensor (a dense push: the shard's g_ef, once per iteration), receives updates and models
 * into pinned host mirrors, uploads the averaged gradient and steps the device vectors with
 * gv_optim_apply (the same bits as the servers' host step, so replicas stay bitwise equal to
 * the servers and the checksum check stays exact; it downloads the shard to checksum it). */
struct gv_worker_model {
    float *params;            /* float[numel], host or device (be) */
    float *grads;             /* float[numel]: the caller's gradient before a step, the averaged
                                 gradient after it */
    float *momentum;          /* float[numel]; NULL with --optimizer caller (the caller's
                                 optimizer keeps its own state) */
    struct gv_nn_backend *be; /* borrowed, may be NULL: where the vectors live (NULL or a CPU
                                 backend: host memory) */
    size_t numel;
    uint32_t n_tensors;
    const size_t *tensor_numel; /* [n_tensors] */
    const char (*names)[24];    /* [n_tensors] */
    /* --model external: the model's layout (borrowed for the worker's life), which the servers
     * learn from the LAYOUT message; n_tensors, tensor_numel and names then come from it (the
     * fields above are ignored). Host memory only. */
    const struct gv_layout *layout;
};

/* Connects to every server, handshakes, seeds (worker 0) and receives the model: on success
 * params and momentum hold the servers' shards and the first decision is known. When the
 * servers resumed from a checkpoint and checkpoint_dir is set, the residual of that iteration
 * is loaded (a missing file: a warning and a zero residual). Prints the shard map (worker 0)
 * and every server address. Errors (each logged with the server named):
 * GV_ERR_TIMEOUT (start-up deadline, --connect-timeout), GV_ERR_AUTH / GV_ERR_VERSION (refused),
 * GV_ERR_PROTO (fingerprint or shard mismatch, a corrupt or foreign residual checkpoint),
 * GV_ERR_CLOSED, GV_ERR_NOMEM, GV_ERR_INVAL. */
gv_status_t gv_worker_create(const struct gv_worker_config *cfg,
                             const struct gv_worker_model *model, struct gv_worker **w_p);
void gv_worker_destroy(struct gv_worker *w);

/* The iteration the next step runs (the servers' iteration at join, then +1 per step). */
uint64_t gv_worker_iteration(const struct gv_worker *w);

/* The decision in force for the next step. */
struct gv_worker_decision {
    enum gv_adapt_level level;
    double cf_send, theta_min, cf_candidate;
    uint32_t levels; /* compression levels computed: 0, 1 or 2 */
};
void gv_worker_decision(const struct gv_worker *w, struct gv_worker_decision *d);

struct gv_worker_step_in {
    double loss;      /* mean loss of this worker's batch (reported to the controller) */
    double lr;        /* --optimizer caller: the caller's learning rate (0: none given) */
    double compute_s; /* forward + backward time */
    double pause_s;   /* since the previous step, not training (an evaluation): the servers
                       * leave it out of the iteration's time */
    uint64_t samples; /* samples in the batch */
    bool epoch_end;   /* this iteration ends an epoch (Accordion's per-layer norms) */
};

struct gv_worker_step_out {
    uint64_t iter; /* the iteration just run */
    enum gv_adapt_level level;
    double cf; /* compression factor sent (1: dense) */
    double theta_min, cf_candidate;
    float lr;          /* learning rate applied */
    double compress_s; /* compression + encoding */
    double comm_s;     /* waiting for the updates: from the last push to the last update, less
                          what the caller computed in between (overlap) */
    uint64_t bytes_sent, bytes_recv;     /* prefix + header + payload of this iteration */
    uint64_t payload_sent, payload_recv; /* payload only */
    uint64_t wire_sent, wire_recv;       /* the transport's own counters over the iteration */
    uint64_t nnz_sent;                   /* entries pushed, over all servers */
    bool resynced;                       /* a full model was received (resync) */
    bool stop; /* the job ended instead (a server said BYE): nothing was applied */
};

/* One iteration. model->grads holds this iteration's gradient; on return params and momentum
 * are stepped and grads holds the averaged gradient (out->stop: unchanged, the job is over).
 * Every --checkpoint-every iterations the residual is written after the step (a failed write
 * is logged; training goes on).
 * Errors: GV_ERR_CLOSED (a server died, aborted or stopped the job; logged, naming it; the
 * helper thread may have found it between steps), GV_ERR_TIMEOUT (a server stopped
 * answering), GV_ERR_PROTO (a malformed update, servers disagreeing on the decision),
 * GV_ERR_INVAL. */
gv_status_t gv_worker_step(struct gv_worker *w, const struct gv_worker_step_in *in,
                           struct gv_worker_step_out *out);

/* Overlap (docs/ps-bench.md section 6): gv_worker_step is gv_worker_step_push then
 * gv_worker_step_finish; a caller may instead run its next forward pass between the two and,
 * during its backward pass, hand over gradients as they are produced:
 * - gv_worker_grads_ready(w, lo): the gradients of [lo, numel) are final (lo decreasing over
 *   the pass); what they complete is compressed and pushed at once (whole shards, or a dense
 *   f32 round's pieces; server 0's last push, which carries the statistics, waits for the push
 *   call). Not after a push whose iteration is not finished (GV_ERR_INVAL). A GPU replica
 *   (gv_worker_overlaps false) pushes everything at the push call instead.
 * - gv_worker_step_push(w, in): compresses and pushes the rest; the iteration is in flight.
 * - gv_worker_params_wait(w, lo, hi): returns once the in-flight iteration's updates of
 *   [lo, hi) are applied (at once when none is in flight): the caller reads parameters only
 *   after this. Each update is applied as it arrives, by whichever call is running.
 * - gv_worker_step_finish(w, out): waits for every update, adopts the next decision, fills out
 *   as gv_worker_step does (comm_s and compress_s count the time inside these calls only).
 * The replica's bits are those of gv_worker_step. Errors as gv_worker_step's. */
bool gv_worker_overlaps(const struct gv_worker *w);
gv_status_t gv_worker_grads_ready(struct gv_worker *w, size_t lo);
gv_status_t gv_worker_step_push(struct gv_worker *w, const struct gv_worker_step_in *in);
gv_status_t gv_worker_params_wait(struct gv_worker *w, size_t lo, size_t hi);
gv_status_t gv_worker_step_finish(struct gv_worker *w, struct gv_worker_step_out *out);

/* Says BYE to every server after `iterations` and waits for every server's answer, which says
 * how the job ended: GV_OK when every server answered BYE (every iteration of the job done, or
 * worker 0 ended it early: its BYE before the last iteration is how --target-accuracy stops a
 * job; any other worker's early BYE takes it out of the job under the dead-worker policy, and
 * this returns an error). Errors as gv_worker_step's: the job failed or was stopped (the
 * summary's `stopped`) meanwhile. A dead server is found by the liveness check. */
gv_status_t gv_worker_finish(struct gv_worker *w, uint64_t iterations);

/* The caller failed (an exception in a training script): the servers are told why (ERROR), so
 * that every process of the job stops naming this worker and the reason, and later calls
 * return GV_ERR_CLOSED. why: for the logs. */
void gv_worker_fail(struct gv_worker *w, const char *why);

/* Asks the servers to stop the whole job (the caller got SIGTERM or SIGINT): they write their
 * checkpoints at the iteration they agree on and stop everyone (exit status 3 by convention).
 * Waits, at most two seconds, for their answer. why: for the logs. */
void gv_worker_stop(struct gv_worker *w, const char *why);

struct gv_worker_summary {
    uint32_t rank, num_workers, num_servers;
    uint64_t iterations;
    struct gv_ps_bytes bytes;
    uint64_t setup_sent, setup_recv;
    uint64_t checksum_checks, checksum_mismatches, resyncs;
    uint64_t peak_rss;
    uint64_t param_bytes;   /* 4 x numel */
    uint64_t buffer_bytes;  /* host memory the runtime allocated (residuals, compression,
                               staging, mirrors) */
    uint64_t device_bytes;  /* device memory the runtime allocated (GPU worker) */
    bool stopped;           /* the job was stopped on request (a signal somewhere) */
    uint64_t resumed_from;  /* the iteration the servers resumed from (0: fresh) */
    bool residual_restored; /* the residual of that iteration was loaded */
    uint64_t ckpt_written;  /* residual checkpoints written */
    uint64_t pushes;        /* pushes (or pieces of one) sent */
    uint64_t pushes_early;  /* of which during the caller's backward pass (gv_worker_grads_ready) */
    uint64_t params_waits;  /* gv_worker_params_wait calls that had to wait for an update */
};
void gv_worker_get_summary(const struct gv_worker *w, struct gv_worker_summary *sum);

#ifdef __cplusplus
}
#endif
#endif /* GV_WORKER_H */
