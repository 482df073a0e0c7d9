/* worker_internal.h: the worker runtime's private state, shared by worker.c (create, connect,
 * handshake, model sync, transport callbacks) and worker_step.c (one iteration). */
#ifndef GV_WORKER_INTERNAL_H
#define GV_WORKER_INTERNAL_H

#include "gv_worker.h"

#define WK_HDR_SLOTS 16
#define WK_MODEL_CHUNK (256ull << 20)

/* One server connection and everything about that server's shard. */
struct wk_server {
    struct gv_worker *w;
    uint32_t s;
    struct gv_ps_link link;
    struct gv_ps_client_hs hs;
    char name[96];          /* "server 1 (10.0.0.2:7000)" */
    bool closed;
    gv_status_t close_reason;
    uint64_t lo, n;         /* the shard [lo, lo + n) */

    /* sync and updates */
    bool synced;            /* initial model and decision received */
    bool got_decision;
    uint64_t model_left;    /* MODEL elements still expected (params + momentum) */
    uint64_t model_checksum;
    bool got_update;
    bool resync;            /* this update is followed by a full model */
    bool got_bye;
    bool got_error;
    char error_text[260];
    struct gv_proto_decision dec; /* from the last UPDATE or DECISION */
    uint64_t dec_iter;
    uint8_t *heavy;         /* [n_tensors]: Accordion's per-tensor level from this server */

    /* push staging: the sent entries of this shard, filled back to front */
    uint32_t *sidx;         /* [cap], shard-relative indices */
    float *sval;            /* [cap] */
    uint32_t cap, tail;
    bool pushed;
    /* the encoded push, then (same memory: the push has left before the update comes) the
     * update: 12 bytes of room for the compress/ header, indices, values */
    uint8_t *ubuf;
    size_t ucap;
    uint64_t upd_payload;
};

struct gv_worker {
    struct gv_worker_config cfg;
    const struct gv_job *job;
    const struct gv_cluster *cl;
    uint32_t rank, S, W;
    struct gv_worker_model m;
    /* where the replica is read and written on the host: the replica itself (host memory),
     * or for a GPU replica (mirrored) pinned mirrors of it that updates and models land in */
    bool mirrored;
    float *hp, *hg, *hv;    /* float[numel] each: params, grads, momentum */
    struct gv_buf mirror;   /* mirrored: hp, hg, hv */
    struct gv_sparse hsent; /* mirrored: host copy of one tensor's level sent (pinned) */
    struct gv_buf hsent_buf;
    size_t *off;            /* [n_tensors + 1] */
    struct gv_shard_map map;
    uint64_t fingerprint;
    struct gv_proto_caps caps;
    struct gv_tp_config tp_cfg;
    struct gv_tp *tp;
    struct gv_proto_arena arena;
    void *arena_buf;
    struct wk_server *srv;  /* [S] */

    /* compression */
    struct gv_cmp *cmp;     /* NULL for the dense method */
    struct gv_ef **ef;      /* [n_tensors], residuals are views into resid */
    float *resid;           /* float[numel]: r, and g_ef between compress and apply (of the
                               compressor's memory kind, as the outputs below) */
    struct gv_sparse *lmin, *lcand; /* [n_tensors] */

    /* the decision in force */
    uint64_t iter;
    struct gv_proto_decision dec;
    uint8_t *heavy;         /* [n_tensors] */

    /* Accordion (worker 0): the averaged gradient accumulated over the epoch */
    float *epoch_acc;
    double *layer_norms;
    bool norms_pending;

    /* accounting */
    struct gv_ps_bytes bytes;
    uint64_t steps, checks, mismatches, resyncs;
    uint64_t buffer_bytes, device_bytes;
    uint64_t it_recv, it_payload_recv; /* bytes of the current iteration received */
    bool in_step;

    /* failure */
    gv_status_t fail_status;
    char fail[400];
};

/* worker.c */
struct gv_tp_handler wk_handler(void);
void wk_fail(struct gv_worker *w, gv_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Checks a server's connection state; GV_OK while it is usable. */
gv_status_t wk_server_status(struct gv_worker *w, struct wk_server *ws);
/* Processes an UPDATE's payload (in place) and steps the shard. */
void wk_apply_update(struct gv_worker *w, struct wk_server *ws, const struct gv_proto_msg *m);
/* GPU replica: copies between the device vectors and the host mirrors (wk_fail on error). */
gv_status_t wk_download(struct gv_worker *w, float *host, const float *dev, size_t n,
                        const char *what);
gv_status_t wk_upload(struct gv_worker *w, float *dev, const float *host, size_t n,
                      const char *what);
uint32_t wk_levels(const struct gv_worker *w, const struct gv_proto_decision *d);
bool wk_decision_equal(const struct gv_worker *w, const struct gv_proto_decision *a,
                       const struct gv_proto_decision *b);

#endif /* GV_WORKER_INTERNAL_H */
