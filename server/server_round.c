/* server_round.c: one bulk-synchronous round of a server. Pushes are aggregated in worker-rank
 * order (a push that arrives before its turn is deferred by the transport); every server tells
 * server 0 which pushes it added and which workers it found dead, server 0 fixes the round's
 * members and the next round's workers and feeds the controller, whose decision (with the
 * membership) every server applies: the average over the members, the optimizer step on the
 * shard, and the update (the averaged gradient, sparse when that is smaller) to every worker
 * still in the job, which applies the same step: replicas stay bitwise equal. */
#include "server_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* The next push to aggregate: the lowest rank not yet added that is expected and alive (ranks
 * are visited in order, so the sum is the same float sum everywhere). Resumes its connection;
 * when no rank is left, the server's aggregation of the round is done. */
static void round_aggregated(struct gv_server *srv);
static void round_stats(struct gv_server *srv, uint32_t rank,
                        const struct gv_proto_iter_stats *st);

static void round_next(struct gv_server *srv)
{
    for (;;) {
        while (srv->next_rank < srv->W &&
               (!srv->expected[srv->next_rank] || srv->workers[srv->next_rank] == NULL ||
                srv->workers[srv->next_rank]->dead))
            srv->next_rank++;
        if (srv->next_rank == srv->W) {
            round_aggregated(srv);
            return;
        }
        struct srv_peer *q = srv->workers[srv->next_rank];
        if (!q->held) {
            if (q->link.c != NULL)
                (void)gv_tp_conn_resume_recv(q->link.c);
            return;
        }
        /* an empty push held for its turn counts now: no entries, only its statistics, summed
         * in rank order like the others */
        q->held = false;
        if (srv->rank == 0)
            round_stats(srv, q->rank, &q->held_stats);
        srv->arrived[q->rank] = true;
        srv->round_recv += q->held_bytes;
        srv->next_rank++;
    }
}

void srv_round_try_open(struct gv_server *srv)
{
    if (srv->state != SRV_RUNNING || srv->round != SRV_ROUND_WAIT_OPEN || !srv->settled ||
        srv_ckpt_busy(srv))
        return;
    for (uint32_t w = 0; w < srv->W; w++) {
        const struct srv_peer *p = srv->workers[w];
        if (!srv->expected[w] || (p != NULL && p->dead))
            continue;
        if (p == NULL || !p->synced || p->closed || !gv_ps_link_idle(&p->link))
            return;
    }
    /* the previous update's payload (acc, rbuf) has left: reuse the buffers */
    memset(srv->acc, 0, srv->n * sizeof(float));
    memset(&srv->agg, 0, sizeof(srv->agg));
    memset(srv->arrived, 0, srv->W * sizeof(bool));
    srv->next_rank = 0;
    srv->round_dense = false;
    srv->round_recv = srv->round_sent = 0;
    srv->round = SRV_ROUND_OPEN;
    uint64_t now = gv_now_ns();
    if (srv->rounds_done == 0) {
        srv->t_first_round_ns = now;
        srv->t_prev_all_ns = now;
        srv->t_prev_round_ns = now;
        gv_log(GV_LOG_INFO, "server %u: every worker is in; training starts at iteration %" PRIu64,
               srv->rank, srv->iter);
    }
    round_next(srv);
}

void srv_round_on_dead(struct gv_server *srv, struct srv_peer *p)
{
    if (srv->round == SRV_ROUND_OPEN && p->rank == srv->next_rank)
        round_next(srv);
    else if (srv->round == SRV_ROUND_WAIT_OPEN)
        srv_round_try_open(srv);
}

static enum gv_proto_enc round_proto_enc(enum gv_idx_enc e)
{
    return e == GV_IDX_RAW32    ? GV_PROTO_ENC_U32
           : e == GV_IDX_VARINT ? GV_PROTO_ENC_DELTA_VARINT
                                : GV_PROTO_ENC_BITMAP;
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
    if (m->iteration != srv->iter) {
        gv_log(GV_LOG_WARN, "server %u: %s pushed iteration %" PRIu64 " during round %" PRIu64,
               srv->rank, p->name, m->iteration, srv->iter);
        return GV_ERR_PROTO;
    }
    if (srv->round != SRV_ROUND_OPEN || p->rank != srv->next_rank) {
        p->deferred = true;
        return GV_ERR_AGAIN; /* not its turn: it waits in the kernel */
    }
    p->deferred = false;
    bool dense;
    char why[300];
    if (gv_ps_push_check(m, payload_len, srv->rank, srv->n, &srv->dec_cur.d, srv->rcap, &dense,
                         why, sizeof(why)) != GV_OK) {
        gv_log(GV_LOG_WARN, "server %u: %s pushed a malformed gradient: %s", srv->rank, p->name,
               why);
        return GV_ERR_PROTO;
    }
    if (dense) {
        dst[0] = (struct gv_iov){srv->rbuf, (size_t)payload_len};
        *cnt = 1;
    } else {
        dst[0] = (struct gv_iov){srv->rbuf, (size_t)m->segs[0].bytes};
        dst[1] = (struct gv_iov){srv->rbuf + m->segs[0].bytes, (size_t)m->segs[1].bytes};
        *cnt = 2;
    }
    return GV_OK;
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
    return gv_ps_sparse_add(srv->rbuf, m, (uint32_t)srv->n, srv->acc);
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

/* The checks on_header makes, for a push without payload (on_header never saw it). */
static bool round_empty_ok(struct gv_server *srv, const struct srv_peer *p,
                           const struct gv_proto_msg *m)
{
    bool dense;
    char why[300];
    if (m->iteration != srv->iter) {
        gv_log(GV_LOG_WARN, "server %u: %s pushed iteration %" PRIu64 " during round %" PRIu64,
               srv->rank, p->name, m->iteration, srv->iter);
        return false;
    }
    if (gv_ps_push_check(m, 0, srv->rank, srv->n, &srv->dec_cur.d, srv->rcap, &dense, why,
                         sizeof(why)) != GV_OK) {
        gv_log(GV_LOG_WARN, "server %u: %s pushed a malformed gradient: %s", srv->rank, p->name,
               why);
        return false;
    }
    return true;
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
    if (!round_empty_ok(srv, p, m)) {
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
    if (m->payload_len == 0 && !round_empty_ok(srv, p, m)) {
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
    srv->arrived[p->rank] = true;
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
        .samples = a->samples, .num_workers = GV_MAX(1u, srv->n_stats),
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
                  a->loss_sum / GV_MAX(1u, srv->n_stats));
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
            srv_send_decision(srv, p, nx, GV_PROTO_MSG_DECISION, srv->memb) != GV_OK) {
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
    struct gv_sparse_layout info;
    gv_status_t status = gv_sparse_encode(&sp, GV_VAL_F32, GV_IDX_AUTO, srv->rbuf, idx_off,
                                          acc + c, 4 * c, &info);
    if (status != GV_OK)
        return status;
    gv_proto_seg_add(m, GV_PROTO_SEG_INDICES, round_proto_enc(info.desc.enc), c, info.idx_len);
    gv_proto_seg_add(m, GV_PROTO_SEG_VALUES, GV_PROTO_ENC_F32, c, info.val_len);
    m->nnz = c;
    pl[0] = (struct gv_iov){srv->rbuf, info.idx_len};
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
        if (!srv->expected[w] || p == NULL || p->dead)
            continue; /* out of the job (expected now holds the next round's workers) */
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
    srv_metrics_round(srv, srv->t_last_round_ns);
    srv_decision_copy(srv, &srv->dec_cur, &srv->dec_next);
    srv->dec_next.iter = UINT64_MAX;
    srv->iter++;
    srv->round = SRV_ROUND_WAIT_OPEN;
    srv_ckpt_after_round(srv);
    srv_round_try_open(srv);
}

/* Averages over the round's members, decides (server 0) and applies. */
static void round_finish(struct gv_server *srv)
{
    gv_ps_average(srv->acc, srv->n, srv->n_avg);
    if (srv->rank == 0 && round_decide(srv) != GV_OK)
        return;
    round_apply(srv);
}

/* This server has every expected push of the round, or knows its worker dead. Servers 1..S-1
 * tell server 0 which pushes they added and which workers they found dead (STATS), then wait
 * for its DECISION; server 0 waits for every server's STATS. */
static void round_aggregated(struct gv_server *srv)
{
    srv->round = SRV_ROUND_WAIT_DECISION;
    if (srv->rank == 0) {
        srv_round_maybe_decide(srv);
        return;
    }
    uint8_t *rep = srv->reports; /* s > 0: the first W bytes are this server's report */
    uint32_t n = 0;
    for (uint32_t w = 0; w < srv->W; w++) {
        const struct srv_peer *p = srv->workers[w];
        rep[w] = (uint8_t)((srv->arrived[w] ? GV_PS_MEMB_ARRIVED : 0u) |
                           (p != NULL && p->dead ? GV_PS_MEMB_DEAD : 0u));
        n += srv->arrived[w];
    }
    struct gv_proto_msg m;
    gv_proto_msg_init(&m, GV_PROTO_MSG_STATS);
    m.role = GV_PROTO_ROLE_SERVER;
    m.rank = srv->rank;
    m.iteration = srv->iter;
    m.shard = srv->rank;
    m.u.stats.workers = n;
    gv_proto_seg_add(&m, GV_PROTO_SEG_RAW, GV_PROTO_ENC_BYTES, srv->W, srv->W);
    struct gv_iov pl = {rep, srv->W};
    if (srv->coord == NULL || gv_ps_link_send(&srv->coord->link, &m, &pl, 1, NULL) != GV_OK)
        srv_abort_now(srv, GV_ERR_CLOSED, true, "cannot send the round's membership to server 0");
}

void srv_round_on_report(struct gv_server *srv, uint32_t s)
{
    srv->got_report[s] = true;
    srv->n_reports++;
    srv_round_maybe_decide(srv);
}

/* Server 0, once its own aggregation and every other server's STATS are in: the round's
 * members are the workers whose push reached any server (a push that reached only some
 * servers counts as zero on the others), the next round's are the expected workers nobody
 * found dead. The policy decides between that and an abort. */
void srv_round_maybe_decide(struct gv_server *srv)
{
    if (srv->state != SRV_RUNNING || srv->round != SRV_ROUND_WAIT_DECISION ||
        srv->n_reports < srv->S - 1)
        return;
    uint32_t W = srv->W, n_next = 0;
    bool *arr = srv->scratch, *dead = srv->scratch + W;
    srv->n_stats = 0;
    for (uint32_t w = 0; w < W; w++) {
        const struct srv_peer *p = srv->workers[w];
        arr[w] = srv->arrived[w];
        dead[w] = p == NULL || p->dead;
        srv->n_stats += srv->arrived[w];
        for (uint32_t s = 1; s < srv->S; s++) {
            uint8_t b = srv->reports[(size_t)s * W + w];
            arr[w] |= (b & GV_PS_MEMB_ARRIVED) != 0;
            dead[w] |= (b & GV_PS_MEMB_DEAD) != 0;
        }
    }
    memset(srv->got_report, 0, srv->S * sizeof(bool));
    srv->n_reports = 0;
    struct gv_round_decision d;
    gv_round_decide((enum gv_dead_policy)srv->cfg.dead_policy, srv->cfg.min_workers, W,
                    srv->expected, arr, dead, &d);
    if (d.action != GV_ROUND_COMPLETE) {
        srv_abort(srv, GV_ERR_CLOSED, "iteration %" PRIu64 ": %s", srv->iter,
                  d.action == GV_ROUND_ABORT ? d.reason : "a worker is neither in nor dead");
        return;
    }
    if (d.n_missing > 0)
        gv_log(GV_LOG_WARN, "server 0: iteration %" PRIu64 ": %s", srv->iter, d.reason);
    for (uint32_t w = 0; w < W; w++)
        if (arr[w] && !srv->arrived[w])
            gv_log(GV_LOG_WARN, "server 0: iteration %" PRIu64 ": worker %u's push reached some "
                   "servers only: it counts in the average (over %u), as a zero gradient where "
                   "it is missing", srv->iter, w, d.n_average);
    for (uint32_t w = 0; w < W; w++) {
        bool next = srv->expected[w] && !dead[w];
        if (srv->expected[w] && !next) {
            struct srv_peer *p = srv->workers[w];
            if (p != NULL && !p->dead)
                srv_worker_dropped(srv, p); /* another server found it dead */
        }
        srv->memb[w] = (uint8_t)((arr[w] ? GV_PS_MEMB_ARRIVED : 0u) |
                                 (next ? GV_PS_MEMB_NEXT : 0u));
        srv->expected[w] = next;
        n_next += next;
    }
    uint32_t min = GV_MAX(1u, srv->cfg.min_workers);
    if (n_next < min) {
        srv_abort(srv, GV_ERR_CLOSED, "only %u of %u workers are left after iteration %" PRIu64
                  " and at least %u are needed (--min-workers)", n_next, W, srv->iter, min);
        return;
    }
    srv->n_avg = d.n_average;
    round_finish(srv);
}

void srv_round_on_decision(struct gv_server *srv)
{
    if (srv->round != SRV_ROUND_WAIT_DECISION) {
        srv_abort_now(srv, GV_ERR_PROTO, false, "server 0 sent the decision of an iteration this "
                      "server has not aggregated");
        return;
    }
    uint32_t n_avg = 0, n_next = 0;
    for (uint32_t w = 0; w < srv->W; w++) {
        uint8_t b = srv->memb[w];
        bool next = (b & GV_PS_MEMB_NEXT) != 0;
        if ((srv->arrived[w] && !(b & GV_PS_MEMB_ARRIVED)) || (next && !srv->expected[w])) {
            srv_abort_now(srv, GV_ERR_PROTO, false, "server 0's membership of the round "
                          "contradicts this server's (worker pushed here, or rejoined)");
            return;
        }
        n_avg += (b & GV_PS_MEMB_ARRIVED) != 0;
        n_next += next;
        if (srv->expected[w] && !next) {
            struct srv_peer *p = srv->workers[w];
            if (p != NULL && !p->dead)
                srv_worker_dropped(srv, p);
        }
        srv->expected[w] = next;
    }
    if (n_avg == 0 || n_next == 0) {
        srv_abort_now(srv, GV_ERR_PROTO, false, "server 0's decision counts no worker");
        return;
    }
    srv->n_avg = n_avg;
    round_finish(srv);
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
            if (srv->workers[w] != NULL && srv->workers[w]->link.c != NULL) {
                srv->workers[w]->deferred = false;
                (void)gv_tp_conn_resume_recv(srv->workers[w]->link.c);
            }
    }
    srv_send_bye(srv, p); /* the answer: the worker closes once it has it */
}
