/* update.c: the end of a round on every server: the downlink (the averaged gradient plus the
 * server's residual, cut to the k of the CF in force: server-side error feedback), the optimizer
 * step on the shard with what is sent, and the update (sparse when that is smaller, with the
 * next decision and the shard's checksum) to every worker still in the job, which applies the
 * same step; a full model follows where a worker asked for one. */
#include "srv.h"

#include <inttypes.h>
#include <string.h>

/* ---------------------------------------------------------------- the bounded downlink */

void srv_down_destroy(struct srv_down *d)
{
    if (d == NULL)
        return;
    for (uint32_t u = 0; d->ef != NULL && u < d->n_units; u++)
        gv_ef_destroy(d->ef[u]);
    gv_free(d->ef);
    gv_free(d->out.idx);
    gv_free(d->out.val);
    gv_free(d->resid);
    gv_free(d->unit_off);
    gv_free(d->unit_tensor);
    gv_cmp_destroy(d->cmp);
    gv_free(d);
}

gv_status_t srv_down_create(const struct gv_job *job, const struct gv_shard_map *map,
                            uint32_t shard, struct srv_down **d_p)
{
    *d_p = NULL;
    if (gv_job_dense(job) || job->downlink != GV_DOWNLINK_TOPK)
        return GV_OK;
    struct srv_down *d = gv_calloc(1, sizeof(*d));
    if (d == NULL)
        return GV_ERR_NOMEM;
    d->job = job;
    d->n = gv_shard_numel(map, shard);
    uint32_t first = map->piece_first[shard], np = map->piece_first[shard + 1] - first;
    d->n_units = job->topk_scope == GV_SCOPE_MODEL ? 1 : np;
    d->unit_off = gv_calloc(d->n_units + 1, sizeof(*d->unit_off));
    d->unit_tensor = gv_calloc(d->n_units, sizeof(*d->unit_tensor));
    d->ef = gv_calloc(d->n_units, sizeof(*d->ef));
    d->resid = gv_calloc(d->n ? d->n : 1, sizeof(float));
    gv_status_t status = GV_ERR_NOMEM;
    if (d->unit_off == NULL || d->unit_tensor == NULL || d->ef == NULL || d->resid == NULL)
        goto err;
    uint64_t most = 0;
    for (uint32_t u = 0; u < d->n_units; u++) {
        const struct gv_shard_piece *pc = &map->pieces[first + u];
        d->unit_off[u] = d->n_units == 1 ? 0 : pc->shard_lo;
        d->unit_tensor[u] = pc->tensor;
        d->unit_off[u + 1] = d->n_units == 1 ? d->n : pc->shard_lo + pc->len;
        most = GV_MAX(most, d->unit_off[u + 1] - d->unit_off[u]);
    }
    struct gv_cmp_config cc;
    gv_cmp_config_init(&cc);
    cc.kind = GV_CMP_TOPK; /* the downlink keeps the largest entries, whatever the uplink used */
    cc.val_type = gv_job_sparse_vt(job);
    cc.max_numel = GV_MAX(most, 1);
    cc.min_cf = gv_job_down_cf(job, gv_job_min_cf(job));
    cc.nthreads = 1;
    cc.seed = job->seed;
    if ((status = gv_cmp_create(&cc, &d->cmp)) != GV_OK)
        goto err;
    uint32_t cap = gv_cmp_bound(d->cmp, cc.max_numel, cc.min_cf);
    d->out = (struct gv_sparse){.idx = gv_calloc(GV_MAX(cap, 1u), sizeof(uint32_t)),
                                .val = gv_calloc(GV_MAX(cap, 1u), sizeof(float)),
                                .cap = cap};
    status = GV_ERR_NOMEM;
    if (d->out.idx == NULL || d->out.val == NULL)
        goto err;
    for (uint32_t u = 0; u < d->n_units; u++) {
        uint32_t len = (uint32_t)(d->unit_off[u + 1] - d->unit_off[u]);
        if ((status = gv_ef_create(d->cmp, len, d->resid + d->unit_off[u], &d->ef[u])) != GV_OK)
            goto err;
    }
    *d_p = d;
    return GV_OK;
err:
    gv_log(GV_LOG_ERROR,
           "server: cannot set up the bounded downlink of a %" PRIu64 "-parameter shard: %s", d->n,
           gv_status_str(status));
    srv_down_destroy(d);
    return status;
}

void srv_down_dense_add(const struct srv_down *d, float *acc, uint64_t a, uint64_t b)
{
    for (uint64_t i = a; i < b; i++)
        acc[i] += d->resid[i];
}

void srv_down_flush(struct srv_down *d)
{
    for (uint32_t u = 0; u < d->n_units; u++)
        (void)gv_ef_reset(d->ef[u]);
}

gv_status_t srv_down_apply(struct srv_down *d, float *acc, const struct gv_ps_decision *dec,
                           const uint8_t *heavy, bool accordion, uint64_t iter)
{
    if (dec->level == GV_ADAPT_LEVEL_DENSE) { /* everything goes: the residual with it */
        srv_down_dense_add(d, acc, 0, d->n);
        srv_down_flush(d);
        return GV_OK;
    }
    for (uint32_t u = 0; u < d->n_units; u++) {
        uint64_t off = d->unit_off[u];
        uint32_t len = (uint32_t)(d->unit_off[u + 1] - off);
        if (len == 0)
            continue;
        double cf = gv_job_down_cf(
            d->job, accordion ? (heavy[d->unit_tensor[u]] ? dec->cf_candidate : dec->theta_min)
                              : dec->cf_send);
        struct gv_cmp_req req = {.iter = iter, .tensor_id = u, .cf_min = cf, .cf_cand = 0};
        d->out.cap = gv_cmp_bound(d->cmp, len, cf);
        struct gv_norms nm;
        gv_status_t status = gv_cmp_compress(d->cmp, d->ef[u], acc + off, &req, &d->out, NULL, &nm);
        if (status == GV_OK)
            status = gv_cmp_apply(d->cmp, d->ef[u], GV_SENT_SPARSE, &d->out);
        if (status != GV_OK)
            return status;
        memset(acc + off, 0, (size_t)len * sizeof(float));
        for (uint32_t k = 0; k < d->out.count; k++)
            acc[off + d->out.idx[k]] = d->out.val[k];
    }
    return GV_OK;
}

/* ---------------------------------------------------------------- the update */

/* Builds the update payload. The gradient applied is sent at the positions whose bit pattern
 * is not +0.0 (what a worker's zeroed buffer does not already hold), so the worker rebuilds the
 * server's vector bit for bit. Sparse while that is smaller (at most half the entries: the
 * indices go to the end of rbuf, the values are compacted into acc), else dense. Values travel
 * as fp16 where they are exactly halves: the bounded downlink's selections in fp16 mode, and
 * every value of the dense-fp16 method (rounded before the step, below). */
static gv_status_t update_build(struct gv_server *srv, struct gv_proto_msg *m, struct gv_iov *pl,
                                int *npl)
{
    struct srv_round *r = &srv->round;
    uint64_t n = srv->shard.n;
    const uint32_t *bits = (const uint32_t *)(const void *)r->acc;
    uint64_t c = 0;
    for (uint64_t i = 0; i < n; i++)
        c += bits[i] != 0;
    enum gv_val_type dvt = gv_ps_dense_vt(srv->job, &r->cur.d);
    if (c * 2 > n || dvt == GV_VAL_F16) {
        enum gv_val_type vt = dvt;
        gv_proto_seg_add(m, GV_PROTO_SEG_DENSE, gv_ps_val_type_to_proto(vt), n,
                         gv_sparse_val_len(n, vt));
        m->nnz = n;
        if (vt == GV_VAL_F16) /* rbuf (4n bytes and more) is free: the pushes are in */
            gv_ps_f16_encode(r->acc, n, (uint16_t *)(void *)r->rbuf);
        pl[0] = (struct gv_iov){vt == GV_VAL_F16 ? (void *)r->rbuf : (void *)r->acc,
                                gv_sparse_val_len(n, vt)};
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
    bool cut = srv->down != NULL && r->cur.d.level != GV_ADAPT_LEVEL_DENSE;
    enum gv_val_type vt = cut ? gv_job_sparse_vt(srv->job) : GV_VAL_F32;
    struct gv_sparse_layout info;
    gv_status_t status = gv_sparse_encode(&sp, vt, GV_IDX_AUTO, r->rbuf, idx_off, acc + c,
                                          gv_sparse_val_len(c, GV_VAL_F32), &info);
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
    /* what the workers will apply, exactly: cut by the downlink, or rounded to halves */
    gv_status_t status = GV_OK;
    if (srv->down != NULL)
        status = srv_down_apply(srv->down, r->acc, &r->cur.d, r->cur.heavy,
                                job->method == GV_JOB_ACCORDION, r->iter);
    if (status != GV_OK) {
        srv_abort(srv, status, "the downlink of iteration %" PRIu64 " failed", r->iter);
        return SRV_ROUND_BUSY;
    }
    if (gv_ps_dense_vt(job, &r->cur.d) == GV_VAL_F16) /* dense-fp16, or auto's fp16 arm */
        for (uint64_t i = 0; i < sh->n; i++)
            r->acc[i] = gv_f16_round_sat(r->acc[i]);
    float lr = gv_optim_lr(&job->optim, (int64_t)r->iter);
    uint64_t checksum;
    if (job->optimizer == GV_JOB_OPTIM_CALLER) {
        /* the workers' optimizer steps their replicas: the checksum is of the averaged
         * gradient, which every worker must hold bit for bit once it decoded the update */
        checksum = gv_ps_checksum(r->acc, sh->n);
    } else {
        checksum = gv_ps_cksum_final(gv_ps_step_range(&job->step_optim, lr, sh->params,
                                                      sh->momentum, r->acc, 0, sh->n, true),
                                     sh->n);
    }

    struct gv_proto_msg m;
    gv_ps_msg_init(&m, &srv->env, GV_PROTO_MSG_UPDATE, r->iter);
    m.dtype = GV_PROTO_DTYPE_F32;
    m.numel = sh->n;
    m.cf = r->cur.d.cf_send;
    struct gv_iov pl[3];
    int npl = 0;
    status = update_build(srv, &m, pl, &npl);
    if (status != GV_OK) {
        srv_abort(srv, status, "cannot encode the update of iteration %" PRIu64, r->iter);
        return SRV_ROUND_BUSY;
    }
    if (job->method == GV_JOB_ACCORDION) {
        gv_proto_seg_add(&m, GV_PROTO_SEG_RAW, GV_PROTO_ENC_BYTES, sh->n_tensors, sh->n_tensors);
        pl[npl++] = (struct gv_iov){r->next.heavy, sh->n_tensors};
    }
    m.u.update.model_checksum = checksum;
    if (srv_update_send(srv, &m, pl, npl, lr, true) != GV_OK)
        return SRV_ROUND_BUSY;
    return srv_update_done(srv);
}

gv_status_t srv_update_send(struct gv_server *srv, struct gv_proto_msg *m, const struct gv_iov *pl,
                            int npl, float lr, bool final)
{
    struct srv_round *r = &srv->round;
    struct gv_ps_decision next = r->next.d;
    next.lr = (double)lr;
    bool resync_all = srv->job->resync_every > 0 && (r->iter + 1) % srv->job->resync_every == 0;
    if (!final) /* a piece: only the rate of its step; the decision comes with the last one */
        m->u.update.decision = (struct gv_proto_decision){.level = GV_PROTO_LEVEL_NONE, .lr = lr};
    for (uint32_t w = 0; w < srv->W; w++) {
        struct srv_peer *p = srv->net.workers[w];
        if (p == NULL || !srv_round_member(srv, w))
            continue; /* out of the job (expected now holds the next round's workers) */
        if (p->link.c == NULL)
            continue; /* gone: its close went through the dead-worker policy already; on
                         servers 1..S-1 a request to end the job may be pending, and the round
                         must still complete, so that this server stops where server 0 does */
        next.resync = final && (resync_all || r->resync_req[w]);
        if (final)
            gv_ps_decision_to_proto(&next, &m->u.update.decision);
        uint64_t b = 0;
        gv_status_t status = gv_ps_link_send(&p->link, m, pl, npl, &b);
        if (status != GV_OK) {
            srv_abort(srv, GV_ERR_CLOSED, "cannot send the update to %s: %s", p->name,
                      gv_status_str(status));
            return status;
        }
        r->sent += b;
        if (next.resync) {
            r->resync_req[w] = false;
            if (srv_send_model(srv, p, r->iter, &r->sent) != GV_OK) {
                srv_abort(srv, GV_ERR_CLOSED, "cannot send the model to %s", p->name);
                return GV_ERR_CLOSED;
            }
        }
    }
    return GV_OK;
}

enum srv_round_event srv_update_done(struct gv_server *srv)
{
    struct srv_round *r = &srv->round;
    gv_ps_bytes_add(&r->bytes, r->cur.d.cf_send, r->sent, r->recv, 0);
    r->done++;
    r->t_last_ns = gv_now_ns();
    GV_TRACE("server %u: round %" PRIu64 " done", srv->rank, r->iter);
    update_decision_copy(srv, &r->cur, &r->next);
    r->next.iter = UINT64_MAX;
    r->iter++;
    r->phase = SRV_ROUND_WAIT_OPEN;
    return SRV_ROUND_DONE;
}
