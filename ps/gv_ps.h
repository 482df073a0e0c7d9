/* gv_ps.h: what gravac's workers and servers share (the ps/ layer): the sharding map of the
 * flattened parameter vector, the job description every process must agree on (model, data,
 * optimizer, compression; one option table, one fingerprint), the cluster description
 * (servers, ranks, rendezvous; flags, config file, environment, MPI/Slurm), the options every
 * program accepts, links (one peer connection's sending side, with byte accounting), both sides
 * of the handshake, the checks on PUSH and UPDATE headers and the sparse payload decoder,
 * checksums and byte accounting, and checkpoint file names. docs/ps.md describes the protocol,
 * docs/architecture.md the layers. Deliberately no server object (server/), no training loop
 * (worker/) and no process management (launch/). */
#ifndef GV_PS_H
#define GV_PS_H

#include "gv_adapt.h"
#include "gv_common.h"
#include "gv_compress.h"
#include "gv_nn.h"
#include "gv_ops.h"
#include "gv_proto.h"
#include "gv_transport.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ================================================================ sharding map
 *
 * The flattened parameter vector (length P, the nn/ arena layout) is cut into S contiguous,
 * balanced ranges: shard s = [floor(s*P/S), floor((s+1)*P/S)). A tensor that straddles a
 * boundary is split into pieces, so no server holds more than ceil(P/S) parameters whatever the
 * tensor sizes. The map is a pure function of (tensor sizes, S). */

/* The largest shard the wire allows (proto max_numel, u32 sparse indices). */
#define GV_SHARD_MAX_NUMEL 0x7fffffffull

struct gv_shard_piece {
    uint32_t tensor;    /* tensor index in the model */
    uint64_t tensor_lo; /* first element of the piece within the tensor */
    uint64_t shard_lo;  /* first element of the piece within the shard */
    uint64_t len;       /* elements */
};

struct gv_shard_map {
    uint32_t num_shards;
    uint32_t num_tensors;
    uint64_t total;        /* P */
    uint64_t *lo;          /* uint64[num_shards + 1]: shard s = [lo[s], lo[s+1]) */
    uint64_t *tensor_off;  /* uint64[num_tensors + 1]: tensor t = [tensor_off[t], [t+1]) */
    uint32_t *piece_first; /* uint32[num_shards + 1]: shard s owns pieces [first[s], first[s+1]) */
    struct gv_shard_piece *pieces;
    uint32_t num_pieces;
};

/* Builds the map for tensors of numel[0..n_tensors) laid out back to back, over S shards.
 * GV_ERR_INVAL (logged) when S is 0, P is 0 or smaller than S, or a shard would exceed
 * GV_SHARD_MAX_NUMEL; GV_ERR_NOMEM. */
gv_status_t gv_shard_map_init(struct gv_shard_map *map, const size_t *numel, uint32_t n_tensors,
                              uint32_t num_shards);
void gv_shard_map_cleanup(struct gv_shard_map *map);
static inline uint64_t gv_shard_numel(const struct gv_shard_map *map, uint32_t s)
{
    return map->lo[s + 1] - map->lo[s];
}
/* The shard holding flat element i (i < total). */
uint32_t gv_shard_of(const struct gv_shard_map *map, uint64_t i);
/* Writes the map, one line per shard ("shard 1: [117573, 235146) 117573 params: fc1.w[...]"),
 * through fn(line, arg). names: tensor names (may be NULL: "t3"). */
void gv_shard_map_describe(const struct gv_shard_map *map, const char *const *names,
                           void (*fn)(const char *line, void *arg), void *arg);

/* ================================================================ the job
 *
 * Everything servers and workers must agree on, read by every program from the same option
 * table (gv_job_options): model, data, optimizer, compression method. gv_job_resolve() turns
 * the options into the nn/ and adapt/ configurations (reading only the data files' headers, so
 * a server never loads the training set), and gv_job_fingerprint() hashes what must match; the
 * handshake refuses a peer whose fingerprint differs. */

enum gv_job_data {
    GV_JOB_DATA_AUTO = 0, /* text for the LSTM, Fashion-MNIST otherwise */
    GV_JOB_DATA_FASHION,
    GV_JOB_DATA_MNIST,
    GV_JOB_DATA_IDX,
    GV_JOB_DATA_CIFAR10,
    GV_JOB_DATA_TEXT,
    GV_JOB_DATA_SYNTHETIC,
};

/* --model external: the model is not one of nn/'s; its layout comes from the workers
 * (struct gv_layout). A value of struct gv_job's model beyond nn/'s kinds. */
#define GV_JOB_MODEL_EXTERNAL ((enum gv_nn_model_kind)16)

/* Who steps the model (--optimizer). */
enum gv_job_optimizer {
    GV_JOB_OPTIM_JOB = 0, /* servers and workers step the job's SGD (--lr, --momentum, ...) */
    GV_JOB_OPTIM_CALLER,  /* servers only average; the caller's optimizer (PyTorch) steps each
                             replica with the averaged gradient */
};

enum gv_job_method {
    GV_JOB_DENSE = 0,
    GV_JOB_STATIC,
    GV_JOB_GRAVAC_EXP,
    GV_JOB_GRAVAC_GEO,
    GV_JOB_ACCORDION,
    GV_JOB_DENSE_FP16, /* dense, 16-bit values both ways (no error feedback: DDP's fp16 hook) */
    GV_JOB_AUTO,       /* adapt/'s AUTO controller over --arms (docs/adapt.md section 4) */
};

/* What a server sends back in a compressed round. */
enum gv_job_downlink {
    GV_DOWNLINK_TOPK = 0, /* the aggregate plus the server's residual, cut to the k of the CF in
                             force (server-side error feedback): as many entries as one push */
    GV_DOWNLINK_UNION,    /* every entry some worker pushed (grows with the workers) */
};

/* Over what a top-k chooses its k entries. */
enum gv_job_scope {
    GV_SCOPE_TENSOR = 0, /* per tensor (a server: per piece of a tensor in its shard) */
    GV_SCOPE_MODEL,      /* one k over the whole model (a server: its whole shard) */
    GV_SCOPE_AUTO,       /* the option's default; gv_job_resolve makes it one of the above */
};

struct gv_job {
    /* ---- options (filled by gv_cfg from gv_job_options) ---- */
    enum gv_nn_model_kind model;
    const char *widths; /* MLP hidden widths "256,128" */
    const char *cnn;    /* CNN "16,32,128" */
    int embed, hidden, layers, seq_len;
    enum gv_job_data data;
    const char *data_dir;
    const char *train_images, *train_labels, *test_images, *test_labels;
    int classes;      /* idx: number of classes */
    const char *text; /* comma-separated text files ("" = the fortunes default) */
    uint64_t synthetic_n;
    int batch;              /* per worker */
    uint64_t epochs, steps; /* steps > 0 wins over epochs */
    uint64_t seed;
    double lr, momentum, weight_decay;
    bool nesterov;
    const char *lr_schedule;
    uint64_t warmup; /* lr warm-up iterations */
    enum gv_job_method method;
    double cf;                                   /* static */
    double theta_min, theta_max, epsilon, omega; /* GraVAC; accordion: light and heavy CF */
    uint64_t window, gravac_warmup;
    double eta;                  /* accordion */
    uint64_t switch_epochs;      /* accordion */
    enum gv_cmp_kind compressor; /* topk, randomk, dgc, redsync (dense is a method) */
    bool fp16;                   /* fp16 values in sparse pushes and updates */
    enum gv_job_downlink downlink;
    double downlink_mult; /* the bounded downlink's k, in pushes' k: it cuts at CF / this */
    enum gv_job_scope topk_scope;
    uint64_t resync_every; /* full model resync every N iterations (0: on join and mismatch) */
    uint64_t piece_size;   /* bytes of a dense round's pieces per shard (0: whole shards) */
    enum gv_job_optimizer optimizer; /* --optimizer */
    const char *arms;                /* auto: the ladder, "dense,fp16,4,10,30,100,300,1000" */
    double quality_from;             /* auto: the quality guard from this fraction of the budget */
    bool local_momentum; /* workers keep the momentum and push their velocity (DGC's momentum
                            correction); the replicas step without momentum (step_optim) */

    /* ---- resolved by gv_job_resolve ---- */
    struct gv_nn_model_cfg model_cfg; /* shape from the data headers; max_batch from batch */
    struct gv_optim_cfg optim;        /* lr schedule with the run's total steps */
    struct gv_optim_cfg step_optim;   /* what servers and workers step the replicas with: optim,
                                         or (local_momentum) optim without momentum and weight
                                         decay, which the workers' velocity already holds */
    size_t n_train;                   /* training samples */
    uint32_t num_workers;
    int64_t steps_per_epoch; /* per worker shard */
    int64_t total_steps;
    enum gv_nn_data_kind data_kind;
    uint32_t n_arms; /* auto: --arms parsed (1 dense, 2 dense in halves, sparse CFs) */
    double arm_cf[GV_ADAPT_AUTO_MAX_ARMS];
};

extern const struct gv_opt gv_job_options[];
extern const size_t gv_job_options_n;

/* --model external: the layout comes from the workers (gv_layout). */
static inline bool gv_job_external(const struct gv_job *job)
{
    return job->model == GV_JOB_MODEL_EXTERNAL;
}

/* Resolves the options for num_workers workers: parses widths and schedule, reads the data
 * headers (image shape, classes, training-set size; the text corpus for its vocabulary), and
 * computes steps per epoch and the total. GV_ERR_INVAL (logged, naming the option) or the
 * loader's GV_ERR_IO / GV_ERR_PROTO. */
gv_status_t gv_job_resolve(struct gv_job *job, uint32_t num_workers);

/* The adapt/ controller configuration of the job's method (num_layers: tensors, Accordion). */
void gv_job_adapt_config(const struct gv_job *job, uint32_t num_layers,
                         struct gv_adapt_config *cfg);
/* The compressor kind used for the sparse levels. */
enum gv_cmp_kind gv_job_cmp_kind(const struct gv_job *job);
/* Dense methods (dense, dense-fp16): no compressor, no second level, no controller choice. */
bool gv_job_dense(const struct gv_job *job);
/* The value type of sparse payloads both ways (fp16 with --fp16). */
enum gv_val_type gv_job_sparse_vt(const struct gv_job *job);
/* The CF the bounded downlink cuts at when cf is in force: cf / --downlink-mult, at least 1. */
double gv_job_down_cf(const struct gv_job *job, double cf);
/* The value type of dense pushes and updates of the job's dense methods (fp16 for dense-fp16);
 * a compressed method's dense rounds: gv_ps_dense_vt. */
enum gv_val_type gv_job_dense_vt(const struct gv_job *job);
/* Whether the job's dense f32 rounds take the pieces' path (ps.md section 2): not for
 * dense-fp16, nor --optimizer caller (the servers do not step: the update is the cut vector,
 * checksummed whole, and the caller steps once it has all of it), nor --model external (the
 * libgravac callers: their rounds are main's, one message per shard). */
bool gv_job_pieced(const struct gv_job *job);
/* A dense round's pieces of an n-element shard (--piece-size; ps.md section 2): np pieces of
 * base elements (the last one shorter), base a multiple of the checksum's block, at most
 * GV_PS_MAX_PIECES; one piece (the whole shard) when the option is 0, the job is not pieced
 * (gv_job_pieced), or the shard is not larger than one piece. A round is in pieces only when
 * its decision's dense values are f32 too (not AUTO's dense-fp16 arm: gv_ps_dense_vt). Piece k
 * is [k * base, min(n, (k + 1) * base)). */
#define GV_PS_MAX_PIECES 16
struct gv_ps_pieces {
    uint64_t n, base;
    uint32_t np;
};
void gv_job_pieces(const struct gv_job *job, uint64_t n, struct gv_ps_pieces *pc);
static inline uint64_t gv_ps_piece_lo(const struct gv_ps_pieces *pc, uint32_t k)
{
    return (uint64_t)k * pc->base;
}
static inline uint64_t gv_ps_piece_hi(const struct gv_ps_pieces *pc, uint32_t k)
{
    uint64_t h = ((uint64_t)k + 1) * pc->base;
    return h < pc->n ? h : pc->n;
}
struct gv_ps_decision;
/* The value type of a dense push or update under decision d: fp16 for the dense-fp16 method,
 * and for a dense decision at CF 2 (halves: AUTO's dense-fp16 arm); f32 otherwise. */
enum gv_val_type gv_ps_dense_vt(const struct gv_job *job, const struct gv_ps_decision *d);
/* The smallest CF a worker is ever asked for (sizes its buffers); 0 for dense. */
double gv_job_min_cf(const struct gv_job *job);
/* The smallest candidate CF (level 2); 0 when there is no second level. */
double gv_job_min_cand_cf(const struct gv_job *job);
const char *gv_job_method_str(enum gv_job_method method);

/* The tensor layout of the job's model (nn/'s names, sizes and order), computed from the
 * configuration without building the model: names and sizes into caller arrays of cap entries.
 * GV_ERR_INVAL when more tensors than cap, or a configuration nn/ would refuse. */
gv_status_t gv_job_layout(const struct gv_job *job, char (*names)[24], size_t *numel, uint32_t cap,
                          uint32_t *n_p);

/* A 64-bit hash of what every process must agree on: tensor layout, model and data shape, the
 * number of iterations (--steps, or --epochs through the steps per epoch), seed, optimizer
 * (schedule included), method and its parameters, compressor and value type.
 * desc (may be NULL) receives the hashed text, for a mismatch report. */
uint64_t gv_job_fingerprint(const struct gv_job *job, const char (*names)[24], const size_t *numel,
                            uint32_t n_tensors, char *desc, size_t desc_len);
/* The same without the number of iterations: what a checkpoint belongs to (a job restarted
 * with more --steps resumes from it; a cosine schedule's length is in its optimizer). */
uint64_t gv_job_state_fingerprint(const struct gv_job *job, const char (*names)[24],
                                  const size_t *numel, uint32_t n_tensors);

/* ================================================================ model layouts (layout.c)
 *
 * The layout of a model that is not one of nn/'s (--model external: libgravac, PyTorch): tensor
 * names and shapes, back to back in the flat vector, as the workers declare them. A worker sends
 * it to every server in a LAYOUT message right after its AUTH; a server adopts the first one it
 * receives (shard map, buffers, fingerprint) and refuses a worker whose layout differs, naming
 * the first differing tensor. The encoding (docs/wire-format.md): u32 count, then per tensor
 * u16 name length, the name, u8 ndim, ndim x u64 dimensions, little-endian. */

#define GV_LAYOUT_MAX_TENSORS 16384
#define GV_LAYOUT_NAME_MAX 200 /* bytes of a name, printable (no control characters) */
#define GV_LAYOUT_MAX_DIMS 8
#define GV_LAYOUT_MAX_NUMEL (1ull << 40) /* elements of a tensor, and of the whole model */
/* The largest encoded layout: what a server accepts before it allocates anything. */
#define GV_LAYOUT_MAX_BYTES                                                                        \
    (4u + GV_LAYOUT_MAX_TENSORS * (3u + GV_LAYOUT_NAME_MAX + 8u * GV_LAYOUT_MAX_DIMS))
/* Tensors of an nn/ model (gv_layout_from_job). */
#define GV_LAYOUT_JOB_MAX 64

struct gv_layout_tensor {
    char *name; /* owned, NUL-terminated */
    uint32_t ndim;
    uint64_t shape[GV_LAYOUT_MAX_DIMS];
    uint64_t numel; /* product of the shape (1 for a scalar) */
};

struct gv_layout {
    uint32_t n, cap;
    struct gv_layout_tensor *t; /* [n] */
    size_t *numel;              /* [n]: the tensors' sizes (for gv_shard_map_init) */
    uint64_t total;             /* elements in all */
};

void gv_layout_init(struct gv_layout *l);
void gv_layout_cleanup(struct gv_layout *l);
/* Appends a tensor (name borrowed, copied). GV_ERR_INVAL with why (may be NULL) for a name that
 * is empty, longer than GV_LAYOUT_NAME_MAX or has a control character, more than
 * GV_LAYOUT_MAX_DIMS dimensions, a dimension of 0, or beyond the caps; GV_ERR_NOMEM. */
gv_status_t gv_layout_add(struct gv_layout *l, const char *name, uint32_t ndim,
                          const uint64_t *shape, char *why, size_t why_len);
/* The layout of the job's nn/ model (gv_job_layout; shapes as one dimension). */
gv_status_t gv_layout_from_job(struct gv_layout *l, const struct gv_job *job);
size_t gv_layout_encoded_len(const struct gv_layout *l);
/* out: gv_layout_encoded_len(l) bytes. */
void gv_layout_encode(const struct gv_layout *l, uint8_t *out);
/* Decodes a received layout (buf: len bytes, borrowed) into l (initialised here; the caller
 * cleans it up on success). Nothing is allocated before the count is checked against len and
 * the caps. GV_ERR_PROTO with why (may be NULL) for anything malformed; GV_ERR_NOMEM. */
gv_status_t gv_layout_decode(const uint8_t *buf, size_t len, struct gv_layout *l, char *why,
                             size_t why_len);
/* "[10, 128]" */
void gv_layout_shape_str(const struct gv_layout *l, uint32_t t, char *out, size_t len);
/* Whether a and b differ; why names the first differing tensor ("tensor 3 is 'fc.weight'
 * [10, 64] on worker 1 but 'fc.weight' [10, 128] on server 0"), a_who and b_who their holders. */
bool gv_layout_diff(const struct gv_layout *a, const struct gv_layout *b, const char *a_who,
                    const char *b_who, char *why, size_t why_len);
/* The fingerprint of a job whose layout comes from the workers: the job's options
 * (gv_job_fingerprint without tensors) and every name and shape. desc as gv_job_fingerprint. */
uint64_t gv_layout_fingerprint(const struct gv_job *job, const struct gv_layout *l, char *desc,
                               size_t desc_len);

/* ================================================================ the cluster
 *
 * Who is who: the servers' addresses (index = server rank), the number of workers, this
 * process's rank. From flags, the config file or GV_* environment variables (gv_cluster_options),
 * and from MPI or Slurm rank variables when --rank is not given (OMPI_COMM_WORLD_RANK, PMI_RANK,
 * SLURM_PROCID; in an MPMD launch the servers take the first S global ranks, so a worker's rank
 * is its global rank - S, and the world size - S is the number of workers). With
 * --rendezvous-dir each server writes its advertised address to DIR/server-<s>.addr (atomically)
 * and the others wait for the files. */

enum gv_role {
    GV_ROLE_SERVER = 0,
    GV_ROLE_WORKER = 1,
};

struct gv_cluster {
    /* ---- options (gv_cluster_options) ---- */
    struct gv_hostlist servers; /* --servers */
    int num_servers;            /* --num-servers: with --rendezvous-dir; 0 = len(servers) */
    int num_workers;            /* --num-workers: 0 = world size - S from MPI/Slurm */
    int rank;                   /* --rank: -1 = from MPI/Slurm */
    const char *rendezvous_dir; /* --rendezvous-dir */
    struct gv_hostport bind;    /* --bind (server): "" = port of servers[rank] on all addresses */
    const char *advertise;      /* --advertise (server): host others connect to */
    const char *cluster_id;     /* --cluster-id */
    const char *transport;      /* --transport */
    uint64_t connect_timeout;   /* ns: start-up deadline (connect, rendezvous, all peers in) */
    uint64_t io_timeout;        /* ns: transport I/O timeout */
    const char *dump_params;    /* --dump-params: final parameters (float32 LE); %r = rank */
    bool print_config;          /* --print-config: log every option's value and source */
    int conns_per_server;       /* --conns-per-server: connections per worker and server process */

    /* ---- resolved by gv_cluster_resolve ----
     * With --conns-per-server C, each server process holds C shards ("lanes"), each served by
     * its own gv_server on its own connection to every worker (port + lane), so that a worker
     * moves a server's part of the model over C TCP connections, striped by shard range, and
     * the process aggregates them on C threads. Everything below counts lanes as servers:
     * n_servers = S processes x C, and a server's my_rank is its lane's (process rank x C +
     * lane); proc_rank and n_procs count processes. */
    enum gv_role role;
    uint32_t my_rank, n_servers, n_workers;
    uint32_t lanes;              /* C */
    uint32_t proc_rank, n_procs; /* a server: its process rank; n_procs: S */
    char rank_source[64];        /* "--rank", "OMPI_COMM_WORLD_RANK=3 - 2 servers", ... */
};

extern const struct gv_opt gv_cluster_options[];
extern const size_t gv_cluster_options_n;

/* Resolves role, rank, S and W from the options and envp (NULL-terminated "NAME=value"; pass
 * environ). GV_ERR_INVAL (logged, saying what is missing and where it may come from). */
gv_status_t gv_cluster_resolve(struct gv_cluster *cl, enum gv_role role, char *const *envp);

/* Address of server s: --servers, else the rendezvous file (waits until deadline_ns on
 * gv_now_ns()). out: "host" and port. GV_ERR_TIMEOUT (logged, naming the file), GV_ERR_PROTO
 * (a malformed file), GV_ERR_INVAL. */
gv_status_t gv_cluster_server_addr(const struct gv_cluster *cl, uint32_t s, uint64_t deadline_ns,
                                   struct gv_hostport *out);

/* The same without waiting: GV_ERR_AGAIN (nothing logged) while server s has not published its
 * address yet, for a caller that goes on serving its other connections meanwhile. */
gv_status_t gv_cluster_server_addr_try(const struct gv_cluster *cl, uint32_t s,
                                       struct gv_hostport *out);

/* Server s publishes "host:port" in DIR/server-<s>.addr (write to a temporary file, rename).
 * No-op without a rendezvous dir. GV_ERR_IO (logged). */
gv_status_t gv_cluster_publish(const struct gv_cluster *cl, uint32_t s, const char *addr);

/* Expands tmpl into out: "%r" is the rank, "%n" the role and rank ("server0", "worker2"),
 * "%%" a '%'. */
void gv_cluster_expand(const char *tmpl, enum gv_role role, uint32_t rank, char *out, size_t len);
/* Writes n floats (little-endian float32) to path. GV_ERR_IO (logged). */
gv_status_t gv_ps_dump_floats(const char *path, const float *v, size_t n);

/* ---------------------------------------------------------------- the timeline (--trace)
 * The spans servers and workers record (gv_trace, common/): one iteration's phases. Nested
 * spans lie inside their parent on the same lane (push inside compress, apply inside wait or
 * compress, add inside aggregate). docs/operations.md shows a timeline. */
enum gv_ps_span {
    GV_PS_SPAN_COMPUTE = 0, /* worker: the caller's time between two steps (forward, backward) */
    GV_PS_SPAN_COMPRESS,    /* worker: compression and error feedback of every tensor, and the
                               pushes that leave in between */
    GV_PS_SPAN_PUSH,        /* worker: one server's push encoded and handed to the transport */
    GV_PS_SPAN_WAIT,        /* worker: from the last push to the last update applied */
    GV_PS_SPAN_APPLY,       /* worker: one server's update decoded, stepped and checksummed */
    GV_PS_SPAN_AGGREGATE,   /* server: from the round's first push to its last one added */
    GV_PS_SPAN_ADD,         /* server: one worker's push added into the sum */
    GV_PS_SPAN_DECIDE,      /* server 0: the other servers' reports and the controller;
                               servers 1..S-1: the wait for server 0's decision */
    GV_PS_SPAN_UPDATE,      /* server: the average, the optimizer step, the checksum, the update
                               encoded and handed to the transport for every worker */
    GV_PS_SPAN_N,
};
extern const char *const gv_ps_span_names[GV_PS_SPAN_N];
/* The tracer of server or worker `rank`, writing to tmpl with %r and %n expanded
 * (gv_cluster_expand; missing directories are made); tmpl "" or NULL: *tr_p = NULL (tracing
 * off) and GV_OK. Close it with gv_trace_close after the server or worker is destroyed.
 * gv_trace_open's errors, GV_ERR_IO for a directory that cannot be made (logged). */
gv_status_t gv_ps_trace_open(const char *tmpl, enum gv_role role, uint32_t rank,
                             struct gv_trace **tr_p);

/* The first environment variable of (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID) that is set,
 * as a number; the matching world size (OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS) into
 * *size_p (-1 when absent). Returns -1 when none is set or it is not a number. */
int gv_cluster_env_rank(char *const *envp, int *size_p, const char **name_p);

/* The gravac-worker program's own options (the training loop around the runtime). Every
 * program accepts every table (a server ignores these), so one command line or config file can
 * serve all the processes of a job. */
struct gv_train_opts {
    bool standalone;          /* --standalone: one process, no servers */
    int world;                /* --world: standalone, train on shard --rank of this many */
    uint64_t eval_every;      /* --eval-every: steps between evaluations (0: each epoch) */
    uint64_t eval_limit;      /* --eval-limit: test samples per evaluation (0: all) */
    double target;            /* --target-accuracy: stop at this test accuracy (0: off) */
    enum gv_nn_device device; /* --device */
    int threads;              /* --threads: OpenBLAS threads */
    uint64_t progress_every;  /* --progress-every: steps per progress line */
    bool quiet;               /* --quiet: no progress lines */
    bool all_progress;        /* --all-progress: every worker prints progress, not only 0 */
    const char *metrics_file; /* --metrics-file: JSON lines; %r is the rank */
    uint64_t verify_every;    /* --verify-every: checksum check period (0: never) */
    int compress_threads;     /* --compress-threads */
    bool overlap;             /* --overlap: compute beside communication (ps-bench.md section 6) */
    bool comm_only;           /* --comm-only: no compute (bench-overlap.sh's communication) */
};
extern const struct gv_opt gv_train_options[];
extern const size_t gv_train_options_n;

/* The gravac-server program's own options (every program accepts them too). */
struct gv_server_opts {
    const char *decision_log; /* --decision-log: server 0's controller log, JSON lines */
    const char *obs_trace;    /* --obs-trace: server 0's observations, CSV (tests/adapt replays) */
};
extern const struct gv_opt gv_server_options[];
extern const size_t gv_server_options_n;

#define GV_PS_OPTION_TABLES 6
/* Every option a gravac program accepts: one command line or config file serves every process
 * of a job (a program ignores the tables that are not its own). */
struct gv_ps_options {
    struct gv_job job;
    struct gv_cluster cl;
    struct gv_ops_common_cfg oc;
    struct gv_ops_server_cfg os;
    struct gv_train_opts to;
    struct gv_server_opts so;
    /* private: what the loaded configuration borrows (gv_ps_options_load) */
    struct gv_opt_table tables_[GV_PS_OPTION_TABLES + 1];
    struct gv_cfg_spec spec_;
};
/* The tables of o, in --help's order, into tables[GV_PS_OPTION_TABLES]. */
void gv_ps_option_tables(struct gv_ps_options *o, struct gv_opt_table *tables);
/* The preamble of every program's main(): loads o (and the extra table, may be NULL) from argv,
 * the GV_* environment and --config FILE ([section] and the common sections; the other
 * programs' sections are skipped), prints --help, logs every option with --print-config, and
 * checks what options of different tables must agree on (heartbeats and the peer timeout).
 * Returns -1 to go on, with *cfg_p the loaded configuration (the caller destroys it after the
 * run: strings point into it; o must outlive it), or the exit status: 0 after --help, 2 for a
 * refused option (the reason logged, naming it). */
int gv_ps_options_load(struct gv_ps_options *o, const struct gv_cfg_spec *spec,
                       const struct gv_opt_table *extra, int argc, char **argv,
                       struct gv_cfg **cfg_p);

/* ================================================================ protocol helpers */

/* ---------------------------------------------------------------- the wire's enums (wire.c)
 * The one place where proto/'s enums meet adapt/'s and compress/'s: servers and workers hold
 * decisions and encodings in adapt/'s and compress/'s terms and convert only where a message is
 * encoded or decoded. */

/* A decision as servers and workers hold it (adapt/'s level). */
struct gv_ps_decision {
    enum gv_adapt_level level;
    double theta_min;    /* floor compression factor */
    double cf_candidate; /* candidate compression factor being explored */
    double cf_send;      /* compression factor to send with (1: dense) */
    double lr;           /* UPDATE: the learning rate of the step */
    bool resync;         /* UPDATE: a full model follows */
    uint64_t ckpt_iter;  /* server 0's verdict on the checkpoint of this iteration (0: none): */
    int32_t ckpt_status; /* committed (GV_OK), or not (why, a gv_status_t) */
};
void gv_ps_decision_to_proto(const struct gv_ps_decision *d, struct gv_proto_decision *out);
void gv_ps_decision_from_proto(const struct gv_proto_decision *in, struct gv_ps_decision *d);
/* Equal in what every worker must apply alike (level, CFs, learning rate). */
bool gv_ps_decision_equal(const struct gv_ps_decision *a, const struct gv_ps_decision *b);
enum gv_proto_level gv_ps_level_to_proto(enum gv_adapt_level level);
enum gv_adapt_level gv_ps_level_from_proto(enum gv_proto_level level);
/* Index and value encodings of a sparse payload's segments: to the wire, and back (GV_ERR_PROTO
 * for an encoding that is not one of the index encodings, or of the value types). */
enum gv_proto_enc gv_ps_idx_enc_to_proto(enum gv_idx_enc enc);
gv_status_t gv_ps_idx_enc_from_proto(enum gv_proto_enc enc, enum gv_idx_enc *out);
enum gv_proto_enc gv_ps_val_type_to_proto(enum gv_val_type vt);
gv_status_t gv_ps_val_type_from_proto(enum gv_proto_enc enc, enum gv_val_type *out);

/* What an update means (cksum.c). The checksum of a float vector (the drift check in UPDATE and
 * MODEL): a 64-bit hash of the bit patterns, identical on every host. The vector is cut into
 * blocks of GV_PS_CKSUM_BLOCK elements, each hashed by four CRC32C lanes and mixed with its
 * index; the blocks' values are summed (mod 2^64) and the sum finalised with n, so a vector can
 * be checksummed in block-aligned pieces, in any order, and the pieces' sums added:
 *   gv_ps_checksum(p, n) == gv_ps_cksum_final(gv_ps_cksum_range(p, 0, a)
 *                                             + gv_ps_cksum_range(p, a, n), n)
 * for any a that is a multiple of GV_PS_CKSUM_BLOCK. ps.md section 3 gives the definition. */
#define GV_PS_CKSUM_BLOCK 1024
uint64_t gv_ps_checksum(const float *p, size_t n);
/* The sum over the blocks of [from, to) of the vector x (float[>= to], x[0] is element 0 of
 * the vector): from a multiple of GV_PS_CKSUM_BLOCK, to one too or the vector's end. */
uint64_t gv_ps_cksum_range(const float *x, size_t from, size_t to);
/* The checksum of an n-element vector from the sum of all its blocks. */
uint64_t gv_ps_cksum_final(uint64_t sum, size_t n);
/* The optimizer step (gv_optim_apply_host, the same bits) on elements [from, to) of p, v with
 * g, block by block, each block's checksum taken right after its step while it is in cache;
 * returns the blocks' sum (0 when !checksum). from and to as for gv_ps_cksum_range. */
uint64_t gv_ps_step_range(const struct gv_optim_cfg *cfg, float lr, float *p, float *v,
                          const float *g, size_t from, size_t to, bool checksum);
/* The block kernel in use: "sse4.2" or "generic" (GV_PS_CKSUM=generic forces the latter). */
const char *gv_ps_cksum_kernel(void);

/* Averages the aggregated sum in place: x[i] = x[i] / (float)num_workers. The single
 * definition used by the server and by the tests' reference. */
void gv_ps_average(float *x, size_t n, uint32_t num_workers);
/* The same over [a, b) of acc, completing the sum first with the float operations of a sum
 * started from zero: acc[i] = ((raw ? 0 + acc[i] : acc[i]) + x[i]) / num_workers, without x when
 * it is NULL. raw: acc holds the first push as it arrived (a -0.0 becomes +0.0, as 0 + it does);
 * x: the last push, not added yet. */
void gv_ps_average_sum(float *acc, const float *x, bool raw, uint32_t num_workers, size_t a,
                       size_t b);

/* Bytes on the wire per iteration (link.c), by compression factor: prefix + header + payload of
 * every PUSH and UPDATE (and of the resync MODELs) of the iterations sent at that CF. */
#define GV_PS_MAX_CF_BUCKETS 80
struct gv_ps_cf_bytes {
    double cf;      /* 1 = dense */
    uint64_t iters; /* iterations sent at this CF */
    uint64_t sent;  /* bytes this process sent in those iterations */
    uint64_t recv;  /* bytes it received */
    uint64_t payload_sent;
};
struct gv_ps_bytes {
    uint64_t setup_sent, setup_recv; /* handshake, initial model, decisions, BYE */
    uint64_t iter_sent, iter_recv;   /* PUSH/UPDATE/resync bytes of all iterations */
    uint32_t n;
    struct gv_ps_cf_bytes by_cf[GV_PS_MAX_CF_BUCKETS];
};
/* Adds one iteration sent at cf; beyond GV_PS_MAX_CF_BUCKETS distinct CFs the last bucket
 * takes the rest. */
void gv_ps_bytes_add(struct gv_ps_bytes *b, double cf, uint64_t sent, uint64_t recv,
                     uint64_t payload_sent);
/* One line per CF: "  CF 160.0: 1200 iters, sent 5.3 KB/iter, recv 12.1 KB/iter", via fn. */
void gv_ps_bytes_describe(const struct gv_ps_bytes *b, void (*fn)(const char *line, void *arg),
                          void *arg);

/* util.c: peak resident set size (VmHWM) and current RSS (VmRSS) of this process, bytes; 0
 * when /proc/self/status cannot be read. */
uint64_t gv_ps_peak_rss(void);
uint64_t gv_ps_rss(void);
/* Human-readable size: "1.5 MiB", "312 B". */
void gv_ps_fmt_bytes(double bytes, char *out, size_t len);

/* ---------------------------------------------------------------- links
 * One peer connection's sending side: prefix+header bytes are encoded into one of n_slots
 * fixed slots (a message's header must live until the transport completes it; completions come
 * in order, so a ring suffices), and every byte sent or received is counted. */
/* Who sends: every message a process sends on a link is stamped with its link's envelope. */
struct gv_ps_envelope {
    enum gv_proto_role role;
    uint32_t rank;
    uint32_t shard; /* the shard the link is about: a server's own rank; a worker's link to
                       server s: s */
};
/* m = an empty message of `type` stamped with env and iteration (the one place the envelope is
 * filled). */
void gv_ps_msg_init(struct gv_proto_msg *m, const struct gv_ps_envelope *env,
                    enum gv_proto_msg_type type, uint64_t iteration);

struct gv_ps_link {
    struct gv_conn *c;                /* NULL once closed */
    struct gv_ps_envelope env;        /* this side's identity on the link */
    const struct gv_proto_caps *caps; /* borrowed */
    uint8_t *slots;                   /* n_slots x slot_bytes */
    uint32_t n_slots;
    size_t slot_bytes;
    uint64_t n_sent, n_done;         /* messages handed to the transport / completed */
    uint64_t bytes_sent, bytes_recv; /* prefix + header + payload */
    uint64_t t_sent_ns;              /* gv_now_ns() of the last send (paces heartbeats) */
    gv_status_t send_error;          /* first failed completion */
    void (*on_idle)(struct gv_ps_link *l, void *arg); /* all sends completed (optional) */
    void *arg;
};
/* Allocates the slots; env: this side's identity on the link. GV_ERR_NOMEM. */
gv_status_t gv_ps_link_init(struct gv_ps_link *l, const struct gv_proto_caps *caps,
                            const struct gv_ps_envelope *env, uint32_t n_slots, size_t slot_bytes);
/* gv_ps_msg_init with the link's envelope. */
static inline void gv_ps_link_msg(const struct gv_ps_link *l, struct gv_proto_msg *m,
                                  enum gv_proto_msg_type type, uint64_t iteration)
{
    gv_ps_msg_init(m, &l->env, type, iteration);
}
void gv_ps_link_cleanup(struct gv_ps_link *l);
static inline bool gv_ps_link_idle(const struct gv_ps_link *l)
{
    return l->n_done == l->n_sent;
}
/* An ERROR's text as it can go on the wire: text itself when it fits caps->max_text_len
 * (caps NULL: the defaults), else its first max_text_len bytes copied into buf (len bytes).
 * A text is for people: cut, not refused (a refused ERROR tells the peer nothing). */
const char *gv_ps_error_text_fit(const char *text, const struct gv_proto_caps *caps, char *buf,
                                 size_t len);

/* Encodes m into a free slot and sends it with payload[0..n) (borrowed until completion); an
 * ERROR's text too long for the wire is cut (gv_ps_error_text_fit).
 * *bytes_p (may be NULL) receives the frame's size on the wire. GV_OK when sent or queued;
 * GV_ERR_AGAIN when every slot or the transport queue is busy (nothing sent); GV_ERR_CLOSED,
 * GV_ERR_INVAL (logged). */
gv_status_t gv_ps_link_send(struct gv_ps_link *l, const struct gv_proto_msg *m,
                            const struct gv_iov *payload, int n, uint64_t *bytes_p);

/* ---------------------------------------------------------------- receiving (link.c)
 * A peer connection's receiving side: every frame's header is decoded once. The transport asks
 * where a payload goes (on_header) before it delivers the message (on_msg): the header decoded
 * for on_header is kept here for on_msg, with what lives in the decode arena (a PUSH's layer
 * norms) copied out, since the arena is shared by every connection. A deferred message's
 * on_header, asked again, gets the kept header. A message without payload is decoded in on_msg
 * alone. */
struct gv_ps_rx {
    struct gv_proto_msg m; /* while `kept` */
    bool kept;
    double *norms; /* m's layer norms, copied */
    uint32_t norms_cap;
};
/* on_header: decodes msg (prefix + header, len bytes) into rx, or returns the header kept by an
 * earlier on_header of the same (deferred) message. *m_p points into rx. The errors of
 * gv_proto_decode; GV_ERR_NOMEM. */
gv_status_t gv_ps_rx_header(struct gv_ps_rx *rx, const void *msg, size_t len,
                            const struct gv_proto_caps *caps, struct gv_proto_arena *arena,
                            const struct gv_proto_msg **m_p);
/* on_msg: the header kept by on_header (released now; valid until the next rx call), or msg
 * decoded now when nothing was kept (a message without payload). */
gv_status_t gv_ps_rx_msg(struct gv_ps_rx *rx, const void *msg, size_t len,
                         const struct gv_proto_caps *caps, struct gv_proto_arena *arena,
                         const struct gv_proto_msg **m_p);
void gv_ps_rx_cleanup(struct gv_ps_rx *rx);
/* ---------------------------------------------------------------- client handshake
 * The connecting side (a worker, or server s > 0 towards server 0): HELLO, CHALLENGE (whose
 * nonce field carries the server nonce followed by the server's proof), AUTH, then WELCOME or
 * REFUSE. */
struct gv_ps_hello_info {
    enum gv_proto_role role;
    uint32_t rank, num_workers, num_servers;
    const char *cluster_id;
    const struct gv_auth_secret *secret; /* empty: --insecure */
    uint64_t iteration; /* a server: its newest checkpoint (0: none); a worker: 0 */
};
enum gv_ps_client_state {
    GV_PS_CLIENT_FAILED = -1,
    GV_PS_CLIENT_IDLE = 0,
    GV_PS_CLIENT_HELLO_SENT,
    GV_PS_CLIENT_AUTH_SENT,
    GV_PS_CLIENT_WELCOMED,
};
struct gv_ps_client_hs {
    struct gv_auth auth;
    enum gv_proto_role role;
    uint32_t rank;
    enum gv_ps_client_state state;
    struct gv_proto_welcome welcome;      /* valid once WELCOMED */
    uint64_t iteration;                   /* WELCOME's */
    char why[300];                        /* the failure, for the caller's error */
    struct gv_auth_auth proof;            /* the AUTH to send (gv_ps_client_hs_step's *out) */
    uint8_t nonce[GV_AUTH_NONCE_LEN];     /* the HELLO's (gv_ps_client_hs_begin's *out) */
    char refuse_text[GV_AUTH_REASON_MAX]; /* our REFUSE's text */
};
gv_status_t gv_ps_client_hs_start(struct gv_ps_client_hs *hs, struct gv_ps_link *l,
                                  const struct gv_ps_hello_info *info);
/* The same without a connection: the HELLO to send comes back in *out (valid while hs and
 * info live). GV_ERR_IO when the random generator fails (hs->why). */
gv_status_t gv_ps_client_hs_begin(struct gv_ps_client_hs *hs, const struct gv_ps_hello_info *info,
                                  struct gv_proto_msg *out);
/* Feeds one decoded message of the handshake. GV_OK (state advanced; GV_PS_CLIENT_WELCOMED at the
 * end), GV_ERR_AUTH / GV_ERR_VERSION / GV_ERR_PROTO: failed (hs->why says why; a REFUSE was sent
 * when it was our refusal). The caller closes the connection on error. */
gv_status_t gv_ps_client_hs_on_msg(struct gv_ps_client_hs *hs, struct gv_ps_link *l,
                                   const struct gv_proto_msg *m);
/* The same without a connection: what to send comes back in *out (*have_out true: AUTH, or
 * the REFUSE of a failure; out's bytes point into hs and into m, valid until the next call or
 * until m's arena is reused). gv_ps_client_hs_on_msg is this plus the send. */
gv_status_t gv_ps_client_hs_step(struct gv_ps_client_hs *hs, const struct gv_proto_msg *m,
                                 struct gv_proto_msg *out, bool *have_out);

/* ---------------------------------------------------------------- server handshake
 * The accepting side of a connection as a state machine over decoded messages, without a
 * connection (server_peer.c sends what it returns; the fuzz target feeds it anything): the
 * HELLO's role, rank, cluster size and id are checked, then ops/'s HMAC exchange. Whether the
 * rank is taken is the caller's to check once the peer is authenticated (an unauthenticated
 * peer learns nothing of who has joined). */
struct gv_ps_server_hs_cfg {
    uint32_t rank; /* this server's: only server 0 accepts servers */
    uint32_t num_workers, num_servers;
    const char *cluster_id;
    const struct gv_auth_secret *secret; /* borrowed; empty: --insecure */
};
enum gv_ps_hs_result {
    GV_PS_HS_REPLY = 0, /* send *out (the CHALLENGE) and wait for the next message */
    GV_PS_HS_JOINED,    /* authenticated: role, rank and iteration are the peer's */
    GV_PS_HS_REFUSED,   /* send *out (a REFUSE) and close; why: the detail for this side's log */
    GV_PS_HS_CLOSED,    /* the peer refused (why: its text): close without an answer */
};
struct gv_ps_server_hs {
    struct gv_auth auth;
    bool hello_seen;
    enum gv_proto_role role; /* from the HELLO */
    uint32_t rank;
    uint64_t iteration;        /* a server's newest checkpoint, from its HELLO */
    enum gv_proto_refuse code; /* REFUSED */
    uint8_t chal[GV_AUTH_NONCE_LEN + GV_AUTH_MAC_LEN]; /* the CHALLENGE's bytes (*out's) */
    char why[300];                                     /* REFUSED / CLOSED: for the log */
    char text[300]; /* REFUSED: what the peer is told (*out's text) */
};
void gv_ps_server_hs_init(struct gv_ps_server_hs *hs, const struct gv_auth_secret *secret);
/* Feeds one decoded message; *out is filled for REPLY and REFUSED (its bytes point into hs,
 * valid until the next call). */
enum gv_ps_hs_result gv_ps_server_hs_on_msg(struct gv_ps_server_hs *hs,
                                            const struct gv_ps_server_hs_cfg *cfg,
                                            const struct gv_proto_msg *m, struct gv_proto_msg *out);

/* ---------------------------------------------------------------- payload checks (wire.c)
 * What a server checks in a PUSH header and a worker in an UPDATE header before any byte of the
 * payload lands in a buffer, and the sparse decoder both run on the payload. Shared with the
 * fuzz targets (tests/fuzz/), which so exercise the production code. */

/* A PUSH for shard `shard` of n parameters under decision d, into a receive buffer of rcap
 * bytes (sparse segments land back to back at its start): its shard, numel, level and CF
 * match, and its segments are one dense segment of n values of type dense_vt (the job's:
 * gv_job_dense_vt; exactly when d is dense) or an index and an f32 or f16 value segment that
 * fit. *dense_p tells which. GV_ERR_PROTO otherwise, with why (may be NULL) saying what
 * differs. */
gv_status_t gv_ps_push_check(const struct gv_proto_msg *m, uint64_t payload_len, uint32_t shard,
                             uint64_t n, const struct gv_ps_decision *d, enum gv_val_type dense_vt,
                             size_t rcap, bool *dense_p, char *why, size_t why_len);
/* Whether a PUSH's values are all finite: its payload (the VALUES segment of a sparse push, f32
 * or f16, or its DENSE segment), as received in `payload` after a passed gv_ps_push_check, and
 * its statistics (gv_ps_stats_check). GV_ERR_PROTO with why ("NaN at entry 5 of 120") when not.
 * A push with a non-finite value must not reach an accumulator: one NaN poisons every replica. */
gv_status_t gv_ps_push_finite(const struct gv_proto_msg *m, const uint8_t *payload, char *why,
                              size_t why_len);
/* A push's statistics: the squared norms, the times (and Accordion's layer norms) finite and
 * >= 0, the loss finite (what adapt/ accepts). GV_ERR_PROTO with why naming the field. */
gv_status_t gv_ps_stats_check(const struct gv_proto_iter_stats *st, char *why, size_t why_len);
/* An UPDATE of iteration iter for shard `shard` of n parameters into a buffer of ucap bytes:
 * one dense segment of n values of type dense_vt, or an index and an f32 or f16 value segment
 * that fit, then (Accordion) one RAW segment of n_tensors bytes. *dense_p tells which.
 * GV_ERR_PROTO otherwise. */
gv_status_t gv_ps_update_check(const struct gv_proto_msg *m, uint64_t iter, uint32_t shard,
                               uint64_t n, enum gv_val_type dense_vt, size_t ucap, bool accordion,
                               uint32_t n_tensors, bool *dense_p);
/* Dense fp16 payloads: n floats to halves (saturating at +-65504, as the compressors' fp16 mode
 * does), and back (exact). */
void gv_ps_f16_encode(const float *src, size_t n, uint16_t *dst);
void gv_ps_f16_decode(const uint16_t *src, size_t n, float *dst);
/* The index and value segments of an encoded sparse tensor (compress/'s layout) added to m, and
 * its nnz; returns the index encoding as the wire names it. */
enum gv_proto_enc gv_ps_sparse_segs(struct gv_proto_msg *m, const struct gv_sparse_layout *lay);
/* What compress/ needs to decode a sparse payload of n entries, from m's fields (index
 * encoding, value type, nnz); GV_ERR_PROTO when they are not a sparse payload's. */
gv_status_t gv_ps_sparse_desc(const struct gv_proto_msg *m, uint32_t n, struct gv_sparse_desc *d);
/* A sparse payload as received (the index segment at payload, the value segment right behind
 * it; m->segs[0] and [1] give their lengths) added into acc[n]; compress/ validates every index
 * and length. GV_ERR_PROTO for anything inconsistent. */
gv_status_t gv_ps_sparse_add(const struct gv_proto_msg *m, const uint8_t *payload, uint32_t n,
                             float *acc);

/* Round membership between servers (docs/operations.md, "dead workers"): one byte per worker
 * in a RAW segment. In a STATS a server s > 0 sends server 0 at the end of its aggregation:
 * ARRIVED (it added the worker's push) and DEAD (it declared the worker dead). In the DECISION
 * server 0 answers with: ARRIVED (the worker counts in this round's average) and NEXT (the
 * worker is expected in the next round). */
#define GV_PS_MEMB_ARRIVED 0x1u
#define GV_PS_MEMB_DEAD 0x2u
#define GV_PS_MEMB_NEXT 0x4u
/* Checks a membership segment of num_workers bytes (only the bits allowed set); GV_ERR_PROTO. */
gv_status_t gv_ps_memb_check(const uint8_t *memb, uint32_t num_workers, unsigned allowed);

/* ---------------------------------------------------------------- checkpoint files
 * ops/ names a checkpoint <dir>/shard<SSSS>-iter<IIIIIIIIIIII>.gvckpt; a worker's files go to
 * <dir>/worker<RRRR>/ with the worker's rank as the index. */

/* Creates dir and its missing parents (mode 0700). GV_ERR_IO (logged). */
gv_status_t gv_ps_mkdir(const char *dir);
/* The path of index's checkpoint of iteration iter in dir. */
void gv_ps_ckpt_path(const char *dir, uint32_t index, uint64_t iter, char *out, size_t len);
/* Opens, verifies and checks the identity of index's checkpoint of exactly iteration iter.
 * GV_ERR_INVAL (not logged) when there is no such file; the errors of gv_ckpt_open and
 * gv_ckpt_check_ident (logged) otherwise. */
gv_status_t gv_ps_ckpt_open_iter(const char *dir, const struct gv_ckpt_ident *id, uint64_t iter,
                                 struct gv_ckpt **ck_p);
/* Renames index's checkpoint files of iterations above iter to "<name>.stale" (the abandoned
 * future of a job that resumed from iter: they must never be mixed with the new one), logging
 * each at WARN. GV_ERR_IO when dir cannot be read. */
gv_status_t gv_ps_ckpt_retire_newer(const char *dir, uint32_t index, uint64_t iter);

/* The caps every gravac process uses; transport max_hdr_len = caps.max_hdr_len + prefix. */
void gv_ps_caps(struct gv_proto_caps *caps, struct gv_tp_config *tp_cfg, uint64_t io_timeout_ns,
                uint64_t connect_timeout_ns);

#ifdef __cplusplus
}
#endif
#endif /* GV_PS_H */
