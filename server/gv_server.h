/* gv_server.h: the gravac parameter server and what it shares with the worker runtime: the
 * sharding map of the flattened parameter vector, the job description every process must agree
 * on (model, data, optimizer, compression; one option table, one fingerprint), the cluster
 * description (servers, ranks, rendezvous; flags, config file, environment, MPI/Slurm), small
 * protocol helpers (checksums, byte accounting, peak RSS), and the server object itself: one
 * shard, bulk-synchronous rounds, rank-ordered aggregation, the optimizer, the compressed
 * downlink, and on server 0 the GraVAC controller. docs/ps.md describes the protocol.
 * Deliberately no training loop (worker/) and no process management (gravac-launch). */
#ifndef GV_SERVER_H
#define GV_SERVER_H

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
    uint64_t total;       /* P */
    uint64_t *lo;         /* uint64[num_shards + 1]: shard s = [lo[s], lo[s+1]) */
    uint64_t *tensor_off; /* uint64[num_tensors + 1]: tensor t = [tensor_off[t], [t+1]) */
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

enum gv_job_method {
    GV_JOB_DENSE = 0,
    GV_JOB_STATIC,
    GV_JOB_GRAVAC_EXP,
    GV_JOB_GRAVAC_GEO,
    GV_JOB_ACCORDION,
};

struct gv_job {
    /* ---- options (filled by gv_cfg from gv_job_options) ---- */
    int model;              /* enum gv_nn_model_kind */
    const char *widths;     /* MLP hidden widths "256,128" */
    const char *cnn;        /* CNN "16,32,128" */
    int embed, hidden, layers, seq_len;
    int data;               /* enum gv_job_data */
    const char *data_dir;
    const char *train_images, *train_labels, *test_images, *test_labels;
    int classes;            /* idx: number of classes */
    const char *text;       /* comma-separated text files ("" = the fortunes default) */
    uint64_t synthetic_n;
    int batch;              /* per worker */
    uint64_t epochs, steps; /* steps > 0 wins over epochs */
    uint64_t seed;
    double lr, momentum, weight_decay;
    bool nesterov;
    const char *lr_schedule;
    uint64_t warmup;        /* lr warm-up iterations */
    int method;             /* enum gv_job_method */
    double cf;              /* static */
    double theta_min, theta_max, epsilon, omega; /* GraVAC; accordion: light and heavy CF */
    uint64_t window, gravac_warmup;
    double eta;             /* accordion */
    uint64_t switch_epochs; /* accordion */
    int compressor;         /* enum gv_cmp_kind (topk, randomk, dgc, redsync) */
    bool fp16;              /* fp16 values in sparse pushes */
    uint64_t resync_every;  /* full model resync every N iterations (0: on join and mismatch) */

    /* ---- resolved by gv_job_resolve ---- */
    struct gv_nn_model_cfg model_cfg; /* shape from the data headers; max_batch from batch */
    struct gv_optim_cfg optim;        /* lr schedule with the run's total steps */
    size_t n_train;                   /* training samples */
    uint32_t num_workers;
    int64_t steps_per_epoch;          /* per worker shard */
    int64_t total_steps;
    enum gv_nn_data_kind data_kind;
};

extern const struct gv_opt gv_job_options[];
extern const size_t gv_job_options_n;

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
/* The smallest CF a worker is ever asked for (sizes its buffers); 0 for dense. */
double gv_job_min_cf(const struct gv_job *job);
/* The smallest candidate CF (level 2); 0 when there is no second level. */
double gv_job_min_cand_cf(const struct gv_job *job);
const char *gv_job_method_str(int method);

/* The tensor layout of the job's model (nn/'s names, sizes and order), computed from the
 * configuration without building the model: names and sizes into caller arrays of cap entries.
 * GV_ERR_INVAL when more tensors than cap, or a configuration nn/ would refuse. */
gv_status_t gv_job_layout(const struct gv_job *job, char (*names)[24], size_t *numel,
                          uint32_t cap, uint32_t *n_p);

/* A 64-bit hash of what every process must agree on: tensor layout, model and data shape,
 * seed, optimizer (schedule included), method and its parameters, compressor and value type.
 * desc (may be NULL) receives the hashed text, for a mismatch report. */
uint64_t gv_job_fingerprint(const struct gv_job *job, const char (*names)[24],
                            const size_t *numel, uint32_t n_tensors, char *desc, size_t desc_len);

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

    /* ---- resolved by gv_cluster_resolve ---- */
    enum gv_role role;
    uint32_t my_rank, n_servers, n_workers;
    char rank_source[64]; /* "--rank", "OMPI_COMM_WORLD_RANK=3 - 2 servers", ... */
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

/* Server s publishes "host:port" in DIR/server-<s>.addr (write to a temporary file, rename).
 * No-op without a rendezvous dir. GV_ERR_IO (logged). */
gv_status_t gv_cluster_publish(const struct gv_cluster *cl, uint32_t s, const char *addr);

/* Expands tmpl into out: "%r" is the rank, "%n" the role and rank ("server0", "worker2"),
 * "%%" a '%'. */
void gv_cluster_expand(const char *tmpl, enum gv_role role, uint32_t rank, char *out, size_t len);
/* Writes n floats (little-endian float32) to path. GV_ERR_IO (logged). */
gv_status_t gv_ps_dump_floats(const char *path, const float *v, size_t n);

/* The first environment variable of (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID) that is set,
 * as a number; the matching world size (OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS) into
 * *size_p (-1 when absent). Returns -1 when none is set or it is not a number. */
int gv_cluster_env_rank(char *const *envp, int *size_p, const char **name_p);

/* The gravac-worker program's own options (the training loop around the runtime). Every
 * program accepts every table (a server ignores these), so one command line or config file can
 * serve all the processes of a job. */
struct gv_train_opts {
    bool standalone;        /* --standalone: one process, no servers */
    int world;              /* --world: standalone, train on shard --rank of this many */
    uint64_t eval_every;    /* --eval-every: steps between evaluations (0: each epoch) */
    uint64_t eval_limit;    /* --eval-limit: test samples per evaluation (0: all) */
    double target;          /* --target-accuracy: stop at this test accuracy (0: off) */
    int device;             /* --device: enum gv_nn_device */
    int threads;            /* --threads: OpenBLAS threads */
    uint64_t progress_every;/* --progress-every: steps per progress line */
    bool quiet;             /* --quiet: no progress lines */
    bool all_progress;      /* --all-progress: every worker prints progress, not only 0 */
    const char *metrics_file; /* --metrics-file: JSON lines; %r is the rank */
    uint64_t verify_every;  /* --verify-every: checksum check period (0: never) */
    int compress_threads;   /* --compress-threads */
};
extern const struct gv_opt gv_train_options[];
extern const size_t gv_train_options_n;

/* ================================================================ protocol helpers */

/* Checksum of a float range (the drift check in UPDATE): a 64-bit hash of the bit patterns,
 * four independent lanes, so it runs near memory speed. Identical inputs give identical
 * checksums on every host. */
uint64_t gv_ps_checksum(const float *p, size_t n);

/* Averages the aggregated sum in place: x[i] = x[i] / (float)num_workers. The single
 * definition used by the server and by the tests' reference. */
void gv_ps_average(float *x, size_t n, uint32_t num_workers);

/* Peak resident set size (VmHWM) and current RSS (VmRSS) of this process, bytes; 0 when
 * /proc/self/status cannot be read. */
uint64_t gv_ps_peak_rss(void);
uint64_t gv_ps_rss(void);

/* Bytes on the wire per iteration, by compression factor: prefix + header + payload of every
 * PUSH and UPDATE (and of the resync MODELs) of the iterations sent at that CF. */
#define GV_PS_MAX_CF_BUCKETS 80
struct gv_ps_cf_bytes {
    double cf;          /* 1 = dense */
    uint64_t iters;     /* iterations sent at this CF */
    uint64_t sent;      /* bytes this process sent in those iterations */
    uint64_t recv;      /* bytes it received */
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

/* Human-readable size: "1.5 MiB", "312 B". */
void gv_ps_fmt_bytes(double bytes, char *out, size_t len);

/* ---------------------------------------------------------------- links
 * One peer connection's sending side: prefix+header bytes are encoded into one of n_slots
 * fixed slots (a message's header must live until the transport completes it; completions come
 * in order, so a ring suffices), and every byte sent or received is counted. */
struct gv_ps_link {
    struct gv_conn *c;           /* NULL once closed */
    const struct gv_proto_caps *caps; /* borrowed */
    uint8_t *slots;              /* n_slots x slot_bytes */
    uint32_t n_slots;
    size_t slot_bytes;
    uint64_t n_sent, n_done;     /* messages handed to the transport / completed */
    uint64_t bytes_sent, bytes_recv; /* prefix + header + payload */
    uint64_t t_sent_ns;          /* gv_now_ns() of the last send (paces heartbeats) */
    gv_status_t send_error;      /* first failed completion */
    void (*on_idle)(struct gv_ps_link *l, void *arg); /* all sends completed (optional) */
    void *arg;
};
/* Allocates the slots. GV_ERR_NOMEM. */
gv_status_t gv_ps_link_init(struct gv_ps_link *l, const struct gv_proto_caps *caps,
                            uint32_t n_slots, size_t slot_bytes);
void gv_ps_link_cleanup(struct gv_ps_link *l);
static inline bool gv_ps_link_idle(const struct gv_ps_link *l)
{
    return l->n_done == l->n_sent;
}
/* Encodes m into a free slot and sends it with payload[0..n) (borrowed until completion).
 * *bytes_p (may be NULL) receives the frame's size on the wire. GV_OK when sent or queued;
 * GV_ERR_AGAIN when every slot or the transport queue is busy (nothing sent); GV_ERR_CLOSED,
 * GV_ERR_INVAL (logged). */
gv_status_t gv_ps_link_send(struct gv_ps_link *l, const struct gv_proto_msg *m,
                            const struct gv_iov *payload, int n, uint64_t *bytes_p);

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
struct gv_ps_client_hs {
    struct gv_auth auth;
    enum gv_proto_role role;
    uint32_t rank;
    int state;  /* 0 idle, 1 hello sent, 2 auth sent, 3 welcomed, -1 failed */
    struct gv_proto_welcome welcome; /* valid in state 3 */
    uint64_t iteration;              /* WELCOME's */
    char why[300];                   /* the failure, for the caller's error */
    struct gv_auth_auth proof;       /* the AUTH to send (gv_ps_client_hs_step's *out) */
    uint8_t nonce[GV_AUTH_NONCE_LEN]; /* the HELLO's (gv_ps_client_hs_begin's *out) */
    char refuse_text[GV_AUTH_REASON_MAX]; /* our REFUSE's text */
};
gv_status_t gv_ps_client_hs_start(struct gv_ps_client_hs *hs, struct gv_ps_link *l,
                                  const struct gv_ps_hello_info *info);
/* The same without a connection: the HELLO to send comes back in *out (valid while hs and
 * info live). GV_ERR_IO when the random generator fails (hs->why). */
gv_status_t gv_ps_client_hs_begin(struct gv_ps_client_hs *hs, const struct gv_ps_hello_info *info,
                                  struct gv_proto_msg *out);
/* Feeds one decoded message of the handshake. GV_OK (state advanced; 3 = welcomed),
 * GV_ERR_AUTH / GV_ERR_VERSION / GV_ERR_PROTO: failed (hs->why says why; a REFUSE was sent when
 * it was our refusal). The caller closes the connection on error. */
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
    uint32_t rank;               /* this server's: only server 0 accepts servers */
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
    uint64_t iteration;      /* a server's newest checkpoint, from its HELLO */
    enum gv_proto_refuse code; /* REFUSED */
    uint8_t chal[GV_AUTH_NONCE_LEN + GV_AUTH_MAC_LEN]; /* the CHALLENGE's bytes (*out's) */
    char why[300];           /* REFUSED / CLOSED: for the log */
    char text[300];          /* REFUSED: what the peer is told (*out's text) */
};
void gv_ps_server_hs_init(struct gv_ps_server_hs *hs, const struct gv_auth_secret *secret);
/* Feeds one decoded message; *out is filled for REPLY and REFUSED (its bytes point into hs,
 * valid until the next call). */
enum gv_ps_hs_result gv_ps_server_hs_on_msg(struct gv_ps_server_hs *hs,
                                            const struct gv_ps_server_hs_cfg *cfg,
                                            const struct gv_proto_msg *m, struct gv_proto_msg *out);

/* ---------------------------------------------------------------- payload checks and decoders
 * What a server checks in a PUSH header and a worker in an UPDATE header before any byte of the
 * payload lands in a buffer, and the sparse decoder both run on the payload. Shared with the
 * fuzz targets (tests/fuzz/), which so exercise the production code. */

/* A PUSH for shard `shard` of n parameters under decision d, into a receive buffer of rcap
 * bytes (sparse segments land back to back at its start): its shard, numel, level and CF
 * match, and its segments are one dense f32 segment (exactly when d is dense) or an index and a
 * value segment that fit. *dense_p tells which. GV_ERR_PROTO otherwise, with why (may be NULL)
 * saying what differs. */
gv_status_t gv_ps_push_check(const struct gv_proto_msg *m, uint64_t payload_len, uint32_t shard,
                             uint64_t n, const struct gv_proto_decision *d, size_t rcap,
                             bool *dense_p, char *why, size_t why_len);
/* An UPDATE of iteration iter for shard `shard` of n parameters into a buffer of ucap bytes:
 * one dense f32 segment or an index and an f32 value segment that fit, then (Accordion) one RAW
 * segment of n_tensors bytes. *dense_p tells which. GV_ERR_PROTO otherwise. */
gv_status_t gv_ps_update_check(const struct gv_proto_msg *m, uint64_t iter, uint32_t shard,
                               uint64_t n, size_t ucap, bool accordion, uint32_t n_tensors,
                               bool *dense_p);
/* A sparse payload as received: the index segment at buf, the value segment right behind it
 * (m->segs[0] and [1] give their lengths). Describes them to compress/ from m's fields
 * (encoding, value type, nnz) and n, and adds the entries into acc[n]; compress/ validates
 * every index and length. GV_ERR_PROTO for anything inconsistent. */
gv_status_t gv_ps_sparse_add(const uint8_t *buf, const struct gv_proto_msg *m, uint32_t n,
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

/* proto <-> adapt levels, and the number of compression levels a worker computes. */
enum gv_proto_level gv_ps_level_to_proto(enum gv_adapt_level level);
enum gv_adapt_level gv_ps_level_from_proto(enum gv_proto_level level);
/* The caps every gravac process uses; transport max_hdr_len = caps.max_hdr_len + prefix. */
void gv_ps_caps(struct gv_proto_caps *caps, struct gv_tp_config *tp_cfg, uint64_t io_timeout_ns,
                uint64_t connect_timeout_ns);

/* ================================================================ the server */

struct gv_server;

/* The gravac-server program's own options (besides the job, cluster and ops tables). */
struct gv_server_opts {
    const char *decision_log; /* --decision-log: server 0's controller log, JSON lines */
};
extern const struct gv_opt gv_server_options[];
extern const size_t gv_server_options_n;

struct gv_server_config {
    const struct gv_job *job;         /* borrowed, resolved */
    const struct gv_cluster *cluster; /* borrowed, resolved, role server */
    const struct gv_auth_secret *secret; /* borrowed; empty = --insecure */
    uint64_t handshake_timeout_ns;
    const char *decision_log;         /* server 0: JSON lines of the controller ("" none) */

    /* ---- operations (docs/operations.md); zero-initialised fields disable each ---- */
    uint64_t heartbeat_interval_ns; /* a HEARTBEAT on every idle link this often (0: none) */
    uint64_t peer_timeout_ns;       /* a joined peer silent this long is dead (0: never) */
    enum gv_dead_policy dead_policy; /* a dead worker aborts the job, or the job goes on */
    uint32_t min_workers;           /* continue: abort below this many workers (0 means 1) */
    const char *checkpoint_dir;     /* NULL or "": no checkpoints, no resume */
    uint64_t checkpoint_every;      /* iterations between checkpoints (0: only at the end) */
    int checkpoint_keep;            /* files kept per shard (0 means 3) */
    bool checkpoint_fallback;       /* a corrupt newest checkpoint: fall back to an older one */
    struct gv_hostport metrics_addr; /* host "" and port 0: no HTTP endpoint */
};

/* Builds the shard map, allocates every buffer (parameters, momentum, accumulator, one receive
 * buffer), creates the transport and listens on the bind address, prints the map and the
 * addresses (bind and advertise), publishes the address in the rendezvous dir. Server 0 also
 * creates the controller. GV_ERR_INVAL, GV_ERR_IO, GV_ERR_NOMEM (each logged). */
gv_status_t gv_server_create(const struct gv_server_config *cfg, struct gv_server **srv_p);
void gv_server_destroy(struct gv_server *srv);
/* The port the server listens on (after an ephemeral bind). */
uint16_t gv_server_port(const struct gv_server *srv);
/* The port of the metrics endpoint (0 when there is none). */
uint16_t gv_server_metrics_port(const struct gv_server *srv);

/* Runs the server until the job ends: connects to server 0 (servers 1..S-1), admits every
 * worker, receives the initial model from worker 0, then runs rounds until every worker said
 * BYE (or worker 0 stopped early). GV_OK on a clean end; GV_ERR_TIMEOUT when start-up missed its
 * deadline; GV_ERR_CLOSED when a worker or server died (the job is aborted, every peer is told);
 * GV_ERR_PROTO on a protocol violation by a joined peer. *stop (may be NULL) is polled: when it
 * becomes non-zero (the signal number, SIGINT or SIGTERM) the job is stopped on request: server
 * 0 stops it at a round boundary (the others ask it to), every server writes its final
 * checkpoint there, and the summary says `stopped`. */
gv_status_t gv_server_run(struct gv_server *srv, volatile int *stop);

struct gv_server_summary {
    uint32_t rank, num_servers, num_workers;
    uint64_t shard_lo, shard_numel;
    uint64_t iterations; /* rounds completed */
    double wall_s;       /* from the first round to the last */
    struct gv_ps_bytes bytes;
    uint64_t peak_rss, bound_rss; /* VmHWM, and 4 x shard bytes + 64 MiB */
    double last_cf;
    uint64_t cf_changes;
    /* operations */
    bool stopped;              /* ended on request (a signal, or a peer's stop request) */
    bool refused;              /* refused to start: checkpoint unusable or not shared by all */
    uint32_t workers_left;     /* workers still in the job at the end */
    uint64_t resumed_from;     /* the checkpoint iteration the run started from (0: fresh) */
    uint64_t ckpt_iter;        /* iteration of the last checkpoint written (0: none) */
    uint64_t ckpt_written;     /* checkpoints written by this run */
};
void gv_server_get_summary(const struct gv_server *srv, struct gv_server_summary *sum);

/* Server state for a checkpoint, as named sections valid until the next round: "params" and
 * "momentum" (float[shard]), "iteration" (u64), "controller" (server 0: gv_adapt_save blob).
 * n_p receives the count (at most 4). The one function that serialises server state. */
gv_status_t gv_server_state_sections(struct gv_server *srv, struct gv_ckpt_section *sec,
                                     size_t cap, size_t *n_p);

#ifdef __cplusplus
}
#endif
#endif /* GV_SERVER_H */
