/* update.c: the end of a round on every server: the optimizer step on the shard with the
 * averaged gradient, and the update (that gradient, sparse when that is smaller, with the next
 * decision and the shard's checksum) to every worker still in the job, which applies the same
 * step; a full model follows where a worker asked for one. */
#include "srv.h"

#include <inttypes.h>
#include <string.h>

/* Builds the update payload. The averaged gradient is sent at the positions whose bit pattern
 * is not +0.0 (what a worker's zeroed buffer does not already hold), so the worker rebuilds
 * the server's vector bit for bit. Sparse while that is smaller (at most half the entries:
 * the indices go to the end of rbuf, the values are compacted into acc), else dense. */
static gv_status_t update_build(struct gv_server *srv, struct gv_proto_msg *m, struct gv_iov *pl,
                                int *npl)
{
    struct srv_round *r = &srv->round;
    uint64_t n = srv->shard.n;
    const uint32_t *bits = (const uint32_t *)(const void *)r->acc;
    uint64_t c = 0;
    for (uint64_t i = 0; i < n; i++)
        c += bits[i] != 0;
    if (c * 2 > n) {
        gv_proto_seg_add(m, GV_PROTO_SEG_DENSE, GV_PROTO_ENC_F32, n, 4 * n);
        m->nnz = n;
        pl[0] = (struct gv_iov){r->acc, 4 * n};
        *npl = 1;
        return GV_OK;
    }
    size_t idx_off = (r->rcap - 4 * c) & ~(size_t)3;
    uint32_t *idx = (uint32_t *)(void *)(r->rbuf + idx_off);
    float *acc = r->acc;
    uint64_t j = 0;
    for (uint64_t i = 0; i < n; i++)
        if (bits[i] != 0) {
            idx[j] = (uint32_t)i;
            acc[j] = acc[i]; /* j <= i: in place, front to back */
            j++;
        }
    struct gv_sparse sp = {
        .idx = idx, .val = acc, .cap = (uint32_t)c, .count = (uint32_t)c, .n = (uint32_t)n};
    struct gv_sparse_layout info;
    gv_status_t status =
        gv_sparse_encode(&sp, GV_VAL_F32, GV_IDX_AUTO, r->rbuf, idx_off, acc + c, 4 * c, &info);
    if (status != GV_OK)
        return status;
    (void)gv_ps_sparse_segs(m, &info);
    pl[0] = (struct gv_iov){r->rbuf, info.idx_len};
    pl[1] = (struct gv_iov){acc + c, info.val_len};
    *npl = 2;
    return GV_OK;
}

static void update_decision_copy(struct gv_server *srv, struct srv_decision *dst,
                                 const struct srv_decision *src)
{
    dst->iter = src->iter;
    dst->d = src->d;
    memcpy(dst->heavy, src->heavy, srv->shard.n_tensors);
}

/* The optimizer step on the shard and the update to every worker still in the job. */
enum srv_round_event srv_update_apply(struct gv_server *srv)
{
    struct srv_round *r = &srv->round;
    struct srv_shard *sh = &srv->shard;
    const struct gv_job *job = srv->job;
    float lr = gv_optim_lr(&job->optim, (int64_t)r->iter);
    uint64_t checksum;
    if (job->optimizer == GV_JOB_OPTIM_CALLER) {
        /* the workers' optimizer steps their replicas: the checksum is of the averaged
         * gradient, which every worker must hold bit for bit once it decoded the update */
        checksum = gv_ps_checksum(r->acc, sh->n);
    } else {
        gv_optim_apply_host(&job->optim, lr, sh->params, sh->momentum, r->acc, sh->n);
        checksum = gv_ps_checksum(sh->params, sh->n);
    }

    struct gv_proto_msg m;
    gv_ps_msg_init(&m, &srv->env, GV_PROTO_MSG_UPDATE, r->iter);
    m.dtype = GV_PROTO_DTYPE_F32;
    m.numel = sh->n;
    m.cf = r->cur.d.cf_send;
    struct gv_iov pl[3];
    int npl = 0;
    gv_status_t status = update_build(srv, &m, pl, &npl);
    if (status != GV_OK) {
        srv_abort(srv, status, "cannot encode the update of iteration %" PRIu64, r->iter);
        return SRV_ROUND_BUSY;
    }
    if (job->method == GV_JOB_ACCORDION) {
        gv_proto_seg_add(&m, GV_PROTO_SEG_RAW, GV_PROTO_ENC_BYTES, sh->n_tensors, sh->n_tensors);
        pl[npl++] = (struct gv_iov){r->next.heavy, sh->n_tensors};
    }
    struct gv_ps_decision next = r->next.d;
    next.lr = (double)lr;
    m.u.update.model_checksum = checksum;
    bool resync_all = job->resync_every > 0 && (r->iter + 1) % job->resync_every == 0;
    for (uint32_t w = 0; w < srv->W; w++) {
        struct srv_peer *p = srv->net.workers[w];
        if (p == NULL || !srv_round_member(srv, w))
            continue; /* out of the job (expected now holds the next round's workers) */
        next.resync = resync_all || r->resync_req[w];
        gv_ps_decision_to_proto(&next, &m.u.update.decision);
        uint64_t b = 0;
        status = gv_ps_link_send(&p->link, &m, pl, npl, &b);
        if (status != GV_OK) {
            srv_abort(srv, GV_ERR_CLOSED, "cannot send the update to %s: %s", p->name,
                      gv_status_str(status));
            return SRV_ROUND_BUSY;
        }
        r->sent += b;
        if (next.resync) {
            r->resync_req[w] = false;
            if (srv_send_model(srv, p, r->iter, &r->sent) != GV_OK) {
                srv_abort(srv, GV_ERR_CLOSED, "cannot send the model to %s", p->name);
                return SRV_ROUND_BUSY;
            }
        }
    }
    gv_ps_bytes_add(&r->bytes, r->cur.d.cf_send, r->sent, r->recv, 0);
    r->done++;
    r->t_last_ns = gv_now_ns();
    GV_TRACE("server %u: round %" PRIu64 " done, update of %" PRIu64 " entries", srv->rank, r->iter,
             m.nnz);
    update_decision_copy(srv, &r->cur, &r->next);
    r->next.iter = UINT64_MAX;
    r->iter++;
    r->phase = SRV_ROUND_WAIT_OPEN;
    return SRV_ROUND_DONE;
}
