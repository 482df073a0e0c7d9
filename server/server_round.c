/* server_round.c: one bulk-synchronous round of a server. Pushes are aggregated in worker-rank
 * order (a push that arrives before its turn is deferred by the transport), averaged, and on
 * server 0 fed to the controller, whose decision every server sends with its update. The
 * optimizer step is applied to the shard, and the update (the averaged gradient, sparse when
 * that is smaller) goes to every worker, which applies the same step: replicas stay bitwise
 * equal. */
#include "server_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static void round_next(struct gv_server *srv);

void srv_round_try_open(struct gv_server *srv)
{
    if (srv->state != SRV_RUNNING || srv->round != SRV_ROUND_WAIT_OPEN)
        return;
    for (uint32_t w = 0; w < srv->W; w++) {
        const struct srv_peer *p = srv->workers[w];
        if (p == NULL || !p->synced || p->closed || !gv_ps_link_idle(&p->link))
            return;
    }
    /* the previous update's payload (acc, rbuf) has left: reuse the buffers */
    memset(srv->acc, 0, srv->n * sizeof(float));
    memset(&srv->agg, 0, sizeof(srv->agg));
    srv->next_rank = 0;
    srv->round_dense = false;
    srv->round_recv = srv->round_sent = 0;
    srv->round = SRV_ROUND_OPEN;
    uint64_t now = gv_now_ns();
    if (srv->rounds_done == 0) {
        srv->t_first_round_ns = now;
        srv->t_prev_all_ns = now;
        gv_log(GV_LOG_INFO, "server %u: every worker is in; training starts", srv->rank);
    }
    round_next(srv);
}

static enum gv_idx_enc round_idx_enc(enum gv_proto_enc e)
{
    return e == GV_PROTO_ENC_U32            ? GV_IDX_RAW32
           : e == GV_PROTO_ENC_DELTA_VARINT ? GV_IDX_VARINT
           : e == GV_PROTO_ENC_BITMAP       ? GV_IDX_BITMAP
                                            : GV_IDX_AUTO;
}

static enum gv_proto_enc round_proto_enc(enum gv_idx_enc e)
{
    return e == GV_IDX_RAW32    ? GV_PROTO_ENC_U32
           : e == GV_IDX_VARINT ? GV_PROTO_ENC_DELTA_VARINT
                                : GV_PROTO_ENC_BITMAP;
}

/* The iteration, shard, level and CF of a push, and the shape of its payload. */
static gv_status_t round_push_check(struct gv_server *srv, const struct srv_peer *p,
                                    const struct gv_proto_msg *m, uint64_t payload_len)
{
    if (m->iteration != srv->iter) {
        gv_log(GV_LOG_WARN, "server %u: %s pushed iteration %" PRIu64 " during round %" PRIu64,
               srv->rank, p->name, m->iteration, srv->iter);
        return GV_ERR_PROTO;
    }
    const struct gv_proto_decision *d = &srv->dec_cur.d;
    bool dense = m->n_segs == 1 && m->segs[0].kind == GV_PROTO_SEG_DENSE &&
                 m->segs[0].enc == GV_PROTO_ENC_F32;
    bool sparse = m->n_segs == 2 && m->segs[0].kind == GV_PROTO_SEG_INDICES &&
                  m->segs[1].kind == GV_PROTO_SEG_VALUES &&
                  GV_SPARSE_HDR_LEN + payload_len <= srv->rcap;
    if (m->shard != srv->rank || m->numel != srv->n || m->u.push.level != d->level ||
        m->cf != d->cf_send || (dense == (d->level != GV_PROTO_LEVEL_DENSE)) ||
        (!dense && !sparse)) {
        gv_log(GV_LOG_WARN, "server %u: %s pushed a malformed gradient: shard %u numel %" PRIu64
               " level %s CF %g with %u segments (expected shard %u, numel %" PRIu64
               ", level %s, CF %g)", srv->rank, p->name, m->shard, m->numel,
               gv_proto_level_str(m->u.push.level), m->cf, m->n_segs, srv->rank, srv->n,
               gv_proto_level_str(d->level), d->cf_send);
        return GV_ERR_PROTO;
    }
    return GV_OK;
}

gv_status_t srv_round_push_header(struct gv_server *srv, struct srv_peer *p,
                                  const struct gv_proto_msg *m, uint64_t payload_len,
                                  struct gv_iov *dst, int *cnt)
{
    if (srv->state != SRV_RUNNING) { /* the job is ending: nobody waits for it any more */
        dst[0] = (struct gv_iov){NULL, (size_t)payload_len};
        *cnt = 1;
        return GV_OK;
    }
    gv_status_t status = round_push_check(srv, p, m, payload_len);
    if (status != GV_OK)
        return status;
    if (srv->round != SRV_ROUND_OPEN || p->rank != srv->next_rank)
        return GV_ERR_AGAIN; /* not its turn: it waits in the kernel */
    bool dense = m->n_segs == 1;
    if (dense) {
        dst[0] = (struct gv_iov){srv->rbuf, (size_t)payload_len};
        *cnt = 1;
    } else {
        dst[0] = (struct gv_iov){srv->rbuf + GV_SPARSE_HDR_LEN, (size_t)m->segs[0].bytes};
        dst[1] = (struct gv_iov){srv->rbuf + GV_SPARSE_HDR_LEN + m->segs[0].bytes,
                                 (size_t)m->segs[1].bytes};
        *cnt = 2;
    }
    return GV_OK;
}

static void round_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* Adds the push sitting in rbuf to the accumulator. */
static gv_status_t round_add(struct gv_server *srv, const struct gv_proto_msg *m)
{
    if (m->n_segs == 1) {
        const float *x = (const float *)(void *)srv->rbuf;
        float *acc = srv->acc;
        for (uint64_t i = 0; i < srv->n; i++)
            acc[i] += x[i];
        srv->round_dense = true;
        return GV_OK;
    }
    /* the index segment arrived after a 12-byte gap: write the compress/ header there, from the
     * fields the wire header carried, and let the decoder validate everything */
    uint8_t *h = srv->rbuf;
    h[0] = GV_SPARSE_MAGIC;
    h[1] = GV_SPARSE_VERSION;
    h[2] = (uint8_t)round_idx_enc(m->segs[0].enc);
    h[3] = m->segs[1].enc == GV_PROTO_ENC_F16 ? GV_VAL_F16 : GV_VAL_F32;
    round_put_u32(h + 4, (uint32_t)srv->n);
    round_put_u32(h + 8, (uint32_t)m->nnz);
    size_t il = GV_SPARSE_HDR_LEN + (size_t)m->segs[0].bytes;
    return gv_sparse_decode_add(srv->rbuf, il, srv->rbuf + il, (size_t)m->segs[1].bytes,
                                (uint32_t)srv->n, 0, srv->acc, NULL);
}

static void round_stats(struct gv_server *srv, uint32_t rank,
                        const struct gv_proto_iter_stats *st)
{
    struct srv_agg *a = &srv->agg;
    a->g_ef += st->g_ef_sq;
    a->g_min += st->g_min_sq;
    a->g_c += st->g_c_sq;
    a->compute_max = GV_MAX(a->compute_max, st->compute_s);
    a->compress_max = GV_MAX(a->compress_max, st->compress_s);
    a->loss_sum += st->loss;
    a->samples += st->samples;
    if (rank == 0 && st->n_layer_norms == srv->n_tensors && st->layer_norms != NULL) {
        memcpy(srv->layer_norms, st->layer_norms, srv->n_tensors * sizeof(double));
        a->epoch_end = true;
        a->n_layer_norms = st->n_layer_norms;
    }
}

static void round_complete(struct gv_server *srv);

/* The turn passes to rank next_rank: a push held for it counts at once (it has no entries, only
 * statistics, summed in rank order like the others); otherwise its connection may be read. */
static void round_next(struct gv_server *srv)
{
    while (srv->next_rank < srv->W) {
        struct srv_peer *q = srv->workers[srv->next_rank];
        if (!q->held) {
            if (q->link.c != NULL)
                (void)gv_tp_conn_resume_recv(q->link.c);
            return;
        }
        q->held = false;
        if (srv->rank == 0)
            round_stats(srv, q->rank, &q->held_stats);
        srv->round_recv += q->held_bytes;
        srv->next_rank++;
    }
    round_complete(srv);
}

/* A push without payload that arrived out of turn (the transport asks on_header only for
 * messages with a payload, so it could not be deferred): checked and held for its turn. */
static void round_hold(struct gv_server *srv, struct srv_peer *p, const struct gv_proto_msg *m,
                       uint64_t msg_bytes)
{
    if (m->payload_len != 0 || p->held) {
        srv_abort(srv, GV_ERR_PROTO, "%s pushed twice in round %" PRIu64, p->name, srv->iter);
        return;
    }
    if (round_push_check(srv, p, m, 0) != GV_OK) {
        srv_abort(srv, GV_ERR_PROTO, "%s pushed a malformed gradient at iteration %" PRIu64,
                  p->name, srv->iter);
        return;
    }
    p->held = true;
    p->held_bytes = msg_bytes;
    p->held_stats = m->u.push.stats;
    p->held_stats.layer_norms = NULL;
    if (p->rank == 0 && m->u.push.stats.n_layer_norms == srv->n_tensors) {
        memcpy(srv->held_norms, m->u.push.stats.layer_norms, srv->n_tensors * sizeof(double));
        p->held_stats.layer_norms = srv->held_norms;
    }
}

void srv_round_push_done(struct gv_server *srv, struct srv_peer *p, const struct gv_proto_msg *m,
                         uint64_t msg_bytes)
{
    if (srv->state != SRV_RUNNING)
        return; /* dropped unread: the job is ending */
    if (srv->round != SRV_ROUND_OPEN || p->rank != srv->next_rank) {
        round_hold(srv, p, m, msg_bytes); /* on_header deferred every push with a payload */
        return;
    }
    if (m->payload_len == 0 && round_push_check(srv, p, m, 0) != GV_OK) {
        srv_abort(srv, GV_ERR_PROTO, "%s pushed a malformed gradient at iteration %" PRIu64,
                  p->name, srv->iter);
        return;
    }
    gv_status_t status = round_add(srv, m);
    if (status != GV_OK) {
        srv_abort(srv, GV_ERR_PROTO, "%s pushed a malformed sparse gradient at iteration %" PRIu64,
                  p->name, srv->iter);
        return;
    }
    if (srv->rank == 0)
        round_stats(srv, p->rank, &m->u.push.stats);
    srv->round_recv += msg_bytes;
    srv->next_rank++;
    round_next(srv);
}

/* ---------------------------------------------------------------- server 0: the decision */

static void round_log_change(struct gv_server *srv, const struct srv_decision *o,
                             const struct srv_decision *n)
{
    if (o->d.level == n->d.level && o->d.cf_send == n->d.cf_send &&
        o->d.theta_min == n->d.theta_min && o->d.cf_candidate == n->d.cf_candidate)
        return;
    srv->cf_changes++;
    gv_log(GV_LOG_INFO, "controller: iteration %" PRIu64 ": %s CF %g -> %s CF %g (floor %g, "
           "candidate %g)", n->iter, gv_proto_level_str(o->d.level), o->d.cf_send,
           gv_proto_level_str(n->d.level), n->d.cf_send, n->d.theta_min, n->d.cf_candidate);
}

static gv_status_t round_decide(struct gv_server *srv)
{
    uint64_t now = gv_now_ns();
    double period = (double)(now - srv->t_prev_all_ns) * 1e-9;
    srv->t_prev_all_ns = now;
    const struct srv_agg *a = &srv->agg;
    struct gv_adapt_obs obs = {
        .iter = srv->iter,
        .level = gv_ps_level_from_proto(srv->dec_cur.d.level),
        .cf_sent = srv->dec_cur.d.cf_send,
        .norm2_ef = a->g_ef, .norm2_min = a->g_min, .norm2_cand = a->g_c,
        .t_compute = a->compute_max, .t_compress = a->compress_max,
        .t_comm = GV_MAX(0.0, period - a->compute_max - a->compress_max),
        .samples = a->samples, .num_workers = srv->W,
        .lr = (double)gv_optim_lr(&srv->job->optim, (int64_t)srv->iter),
        .epoch_end = a->epoch_end && srv->job->method == GV_JOB_ACCORDION,
        .num_layers = a->epoch_end ? a->n_layer_norms : 0,
        .layer_norms = a->epoch_end ? srv->layer_norms : NULL,
    };
    if (!obs.epoch_end) {
        obs.num_layers = 0;
        obs.layer_norms = NULL;
    }
    struct gv_adapt_decision d = {.layer_cf = srv->layer_cf, .layer_cap = srv->n_tensors};
    gv_status_t status = gv_adapt_update(srv->ctl, &obs, &d);
    if (status != GV_OK) {
        srv_abort(srv, GV_ERR_INVAL, "the controller refused the statistics of iteration %" PRIu64
                  " (||g_ef||^2 %g, loss %g: has training diverged?)", srv->iter, a->g_ef,
                  a->loss_sum / srv->W);
        return status;
    }
    struct srv_decision *nx = &srv->dec_next;
    nx->iter = d.iter;
    nx->d = (struct gv_proto_decision){.level = gv_ps_level_to_proto(d.level),
                                       .theta_min = d.theta_min,
                                       .cf_candidate = d.cf_candidate,
                                       .cf_send = d.cf_send};
    for (uint32_t t = 0; t < srv->n_tensors; t++)
        nx->heavy[t] = d.num_layers > 0 && d.layer_cf[t] > d.theta_min;
    round_log_change(srv, &srv->dec_cur, nx);
    for (uint32_t s = 1; s < srv->S; s++) {
        struct srv_peer *p = srv->servers[s];
        if (p == NULL || p->closed ||
            srv_send_decision(srv, p, nx, GV_PROTO_MSG_DECISION) != GV_OK) {
            srv_abort(srv, GV_ERR_CLOSED, "cannot send the decision to server %u", s);
            return GV_ERR_CLOSED;
        }
    }
    return GV_OK;
}

/* ---------------------------------------------------------------- the update */

/* Builds the update payload. The averaged gradient is sent at the positions whose bit pattern
 * is not +0.0 (what a worker's zeroed buffer does not already hold), so the worker rebuilds
 * the server's vector bit for bit. Sparse while that is smaller (at most half the entries:
 * the indices go to the end of rbuf, the values are compacted into acc), else dense. */
static gv_status_t round_build_update(struct gv_server *srv, struct gv_proto_msg *m,
                                      struct gv_iov *pl, int *npl)
{
    const uint32_t *bits = (const uint32_t *)(const void *)srv->acc;
    uint64_t c = 0;
    for (uint64_t i = 0; i < srv->n; i++)
        c += bits[i] != 0;
    if (c * 2 > srv->n) {
        gv_proto_seg_add(m, GV_PROTO_SEG_DENSE, GV_PROTO_ENC_F32, srv->n, 4 * srv->n);
        m->nnz = srv->n;
        pl[0] = (struct gv_iov){srv->acc, 4 * srv->n};
        *npl = 1;
        return GV_OK;
    }
    size_t idx_off = (srv->rcap - 4 * c) & ~(size_t)3;
    uint32_t *idx = (uint32_t *)(void *)(srv->rbuf + idx_off);
    float *acc = srv->acc;
    uint64_t j = 0;
    for (uint64_t i = 0; i < srv->n; i++)
        if (bits[i] != 0) {
            idx[j] = (uint32_t)i;
            acc[j] = acc[i]; /* j <= i: in place, front to back */
            j++;
        }
    struct gv_sparse sp = {.idx = idx, .val = acc, .cap = (uint32_t)c, .count = (uint32_t)c,
                           .n = (uint32_t)srv->n};
    struct gv_sparse_info info;
    gv_status_t status = gv_sparse_encode(&sp, GV_VAL_F32, GV_IDX_AUTO, srv->rbuf, idx_off,
                                          acc + c, 4 * c, &info);
    if (status != GV_OK)
        return status;
    gv_proto_seg_add(m, GV_PROTO_SEG_INDICES, round_proto_enc(info.enc), c,
                     info.idx_len - GV_SPARSE_HDR_LEN);
    gv_proto_seg_add(m, GV_PROTO_SEG_VALUES, GV_PROTO_ENC_F32, c, info.val_len);
    m->nnz = c;
    pl[0] = (struct gv_iov){srv->rbuf + GV_SPARSE_HDR_LEN, info.idx_len - GV_SPARSE_HDR_LEN};
    pl[1] = (struct gv_iov){acc + c, info.val_len};
    *npl = 2;
    return GV_OK;
}

void srv_decision_copy(struct gv_server *srv, struct srv_decision *dst,
                       const struct srv_decision *src)
{
    dst->iter = src->iter;
    dst->d = src->d;
    memcpy(dst->heavy, src->heavy, srv->n_tensors);
}

static void round_apply(struct gv_server *srv)
{
    const struct gv_job *job = srv->job;
    float lr = gv_optim_lr(&job->optim, (int64_t)srv->iter);
    gv_optim_apply_host(&job->optim, lr, srv->params, srv->momentum, srv->acc, srv->n);
    uint64_t checksum = gv_ps_checksum(srv->params, srv->n);

    struct gv_proto_msg m;
    gv_proto_msg_init(&m, GV_PROTO_MSG_UPDATE);
    m.role = GV_PROTO_ROLE_SERVER;
    m.rank = srv->rank;
    m.iteration = srv->iter;
    m.shard = srv->rank;
    m.dtype = GV_PROTO_DTYPE_F32;
    m.numel = srv->n;
    m.cf = srv->dec_cur.d.cf_send;
    struct gv_iov pl[3];
    int npl = 0;
    gv_status_t status = round_build_update(srv, &m, pl, &npl);
    if (status != GV_OK) {
        srv_abort(srv, status, "cannot encode the update of iteration %" PRIu64, srv->iter);
        return;
    }
    if (job->method == GV_JOB_ACCORDION) {
        gv_proto_seg_add(&m, GV_PROTO_SEG_RAW, GV_PROTO_ENC_BYTES, srv->n_tensors, srv->n_tensors);
        pl[npl++] = (struct gv_iov){srv->dec_next.heavy, srv->n_tensors};
    }
    m.u.update.decision = srv->dec_next.d;
    m.u.update.decision.lr = (double)lr;
    m.u.update.model_checksum = checksum;
    bool resync_all = job->resync_every > 0 && (srv->iter + 1) % job->resync_every == 0;
    for (uint32_t w = 0; w < srv->W; w++) {
        struct srv_peer *p = srv->workers[w];
        bool resync = resync_all || p->resync_req;
        m.u.update.decision.resync = resync;
        uint64_t b = 0;
        status = gv_ps_link_send(&p->link, &m, pl, npl, &b);
        if (status != GV_OK) {
            srv_abort(srv, GV_ERR_CLOSED, "cannot send the update to %s: %s", p->name,
                      gv_status_str(status));
            return;
        }
        srv->round_sent += b;
        if (resync) {
            p->resync_req = false;
            if (srv_send_model(srv, p, false) != GV_OK)
                return;
        }
    }
    gv_ps_bytes_add(&srv->bytes, srv->dec_cur.d.cf_send, srv->round_sent, srv->round_recv, 0);
    srv->rounds_done++;
    srv->t_last_round_ns = gv_now_ns();
    GV_TRACE("server %u: round %" PRIu64 " done, update of %" PRIu64 " entries", srv->rank,
             srv->iter, m.nnz);
    srv_decision_copy(srv, &srv->dec_cur, &srv->dec_next);
    srv->dec_next.iter = UINT64_MAX;
    srv->iter++;
    srv->round = SRV_ROUND_WAIT_OPEN;
    srv_round_try_open(srv);
}

/* The one place where a round completes: every live worker's push is in. */
static void round_complete(struct gv_server *srv)
{
    gv_ps_average(srv->acc, srv->n, srv->W);
    if (srv->rank == 0) {
        if (round_decide(srv) != GV_OK)
            return;
        round_apply(srv);
        return;
    }
    if (srv->dec_next.iter == srv->iter + 1) {
        round_apply(srv);
        return;
    }
    srv->round = SRV_ROUND_WAIT_DECISION;
}

void srv_round_on_decision(struct gv_server *srv)
{
    if (srv->round == SRV_ROUND_WAIT_DECISION)
        round_apply(srv);
}

void srv_round_on_bye(struct gv_server *srv, struct srv_peer *p, uint64_t iteration)
{
    p->bye = true;
    gv_log(GV_LOG_INFO, "server %u: %s ends after %" PRIu64 " iterations", srv->rank, p->name,
           iteration);
    if (srv->state == SRV_RUNNING || srv->state == SRV_STARTING) {
        /* every worker runs the same number of iterations, and worker 0 may stop early (target
         * reached): the first BYE ends the job for everyone */
        srv->state = SRV_ENDING;
        srv_send_bye_all(srv);
        /* pushes deferred for this round are read (and dropped) now, and the BYEs behind them */
        for (uint32_t w = 0; w < srv->W; w++)
            if (srv->workers[w] != NULL && srv->workers[w]->link.c != NULL)
                (void)gv_tp_conn_resume_recv(srv->workers[w]->link.c);
    }
    srv_send_bye(srv, p); /* the answer: the worker closes once it has it */
}
