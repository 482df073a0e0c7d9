/* round.c: one bulk-synchronous round of a server, who is in it, and (server 0) what comes next.
 * Pushes are aggregated in worker-rank order (a push that arrives before its turn is deferred by
 * the transport); every server tells server 0 which pushes it added and which workers it found
 * dead, server 0 fixes the round's members and the next round's workers (the dead-worker policy and
 * --min-workers are applied here and nowhere else) and feeds the controller, whose decision (with
 * the membership) every server applies: the average over the members, the optimizer step on the
 * shard, and the update (the averaged gradient, sparse when that is smaller) to every worker
 * still in the job, which applies the same step: replicas stay bitwise equal.
 * The step and the update are in update.c. Entered only from conn.c; a call that completes the
 * round returns SRV_ROUND_DONE and conn.c finishes it (metrics, checkpoint, the next round). */
#include "srv.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static gv_status_t round_controller(struct gv_server *srv);
static void round_controller_cleanup(struct gv_server *srv);
static gv_status_t round_decide(struct gv_server *srv);
static enum srv_round_event round_worker_bad(struct gv_server *srv, struct srv_peer *p,
                                             const char *why);

/* ---------------------------------------------------------------- set-up */

gv_status_t srv_round_init(struct gv_server *srv)
{
    struct srv_round *r = &srv->round;
    uint64_t n = srv->shard.n;
    uint32_t nt = srv->shard.n_tensors, W = srv->W;
    r->acc = gv_calloc(n, sizeof(float)); /* untouched pages cost no memory until written */
    /* the largest sparse push: a bitmap index segment + n values (the encoder never picks a
     * larger index encoding); a dense push needs 4n */
    r->rcap = (n + 7) / 8 + 4 * n + 64;
    r->rbuf = gv_malloc(r->rcap);
    r->layer_norms = gv_calloc(nt, sizeof(double));
    r->held_norms = gv_calloc(nt, sizeof(double));
    r->layer_cf = gv_calloc(nt, sizeof(double));
    r->cur.heavy = gv_calloc(nt, 1);
    r->next.heavy = gv_calloc(nt, 1);
    r->held = gv_calloc(W, sizeof(*r->held));
    r->resync_req = gv_calloc(W, sizeof(bool));
    r->expected = gv_calloc(W, sizeof(bool));
    r->arrived = gv_calloc(W, sizeof(bool));
    r->dead = gv_calloc(W, sizeof(bool));
    r->scratch = gv_calloc(2 * (size_t)W, sizeof(bool));
    r->memb = gv_calloc(W, 1);
    r->reports = gv_calloc((size_t)srv->S * W, 1);
    r->got_report = gv_calloc(srv->S, sizeof(bool));
    r->ck_srv_iter = gv_calloc(srv->S, sizeof(*r->ck_srv_iter));
    r->ck_srv_st = gv_calloc(srv->S, sizeof(*r->ck_srv_st));
    if (!r->acc || !r->rbuf || !r->layer_norms || !r->held_norms || !r->layer_cf || !r->cur.heavy ||
        !r->next.heavy || !r->held || !r->resync_req || !r->expected || !r->arrived || !r->dead ||
        !r->scratch || !r->memb || !r->reports || !r->got_report || !r->ck_srv_iter ||
        !r->ck_srv_st) {
        gv_log(GV_LOG_ERROR, "server: cannot allocate the buffers of a %" PRIu64 "-parameter shard",
               n);
        return GV_ERR_NOMEM;
    }
    r->cur.iter = r->next.iter = UINT64_MAX;
    for (uint32_t w = 0; w < W; w++)
        r->expected[w] = true; /* every worker, until one is found dead */
    gv_status_t status = srv_piece_init(srv);
    if (status != GV_OK)
        return status;
    return srv->rank == 0 ? round_controller(srv) : GV_OK;
}

void srv_round_cleanup(struct gv_server *srv)
{
    struct srv_round *r = &srv->round;
    round_controller_cleanup(srv);
    srv_piece_cleanup(srv);
    gv_free(r->acc);
    gv_free(r->rbuf);
    gv_free(r->layer_norms);
    gv_free(r->held_norms);
    gv_free(r->layer_cf);
    gv_free(r->cur.heavy);
    gv_free(r->next.heavy);
    gv_free(r->held);
    gv_free(r->resync_req);
    gv_free(r->expected);
    gv_free(r->arrived);
    gv_free(r->dead);
    gv_free(r->scratch);
    gv_free(r->memb);
    gv_free(r->reports);
    gv_free(r->got_report);
    gv_free(r->ck_srv_iter);
    gv_free(r->ck_srv_st);
    memset(r, 0, sizeof(*r));
}

/* Servers 1..S-1: the decision and membership server 0 starts the job with. */
static void round_start_with(struct gv_server *srv, uint64_t iter, const struct gv_ps_decision *d)
{
    struct srv_round *r = &srv->round;
    r->cur.iter = iter;
    r->cur.d = *d;
    for (uint32_t w = 0; w < srv->W; w++)
        r->expected[w] = (r->memb[w] & GV_PS_MEMB_NEXT) != 0;
}

/* ---------------------------------------------------------------- server 0: the controller */

static void decide_log(const char *json, void *arg)
{
    struct srv_round *r = arg;
    if (r->declog != NULL) {
        fprintf(r->declog, "%s\n", json);
        fflush(r->declog);
    }
}

static gv_status_t round_controller(struct gv_server *srv)
{
    struct srv_round *r = &srv->round;
    struct gv_adapt_config ac;
    gv_job_adapt_config(srv->job, srv->shard.n_tensors, &ac);
    gv_status_t status = gv_adapt_create(&ac, &r->ctl);
    if (status != GV_OK)
        return status;
    if (srv->cfg.decision_log != NULL && srv->cfg.decision_log[0] != '\0') {
        r->declog = fopen(srv->cfg.decision_log, "w");
        if (r->declog == NULL) {
            gv_log(GV_LOG_ERROR, "server: cannot open the decision log %s", srv->cfg.decision_log);
            return GV_ERR_IO;
        }
        gv_adapt_set_log(r->ctl, decide_log, r);
    }
    if (srv->cfg.obs_trace != NULL && srv->cfg.obs_trace[0] != '\0') {
        r->obstrace = fopen(srv->cfg.obs_trace, "w");
        if (r->obstrace == NULL) {
            gv_log(GV_LOG_ERROR, "server: cannot open the observation trace %s",
                   srv->cfg.obs_trace);
            return GV_ERR_IO;
        }
        fprintf(r->obstrace, "%s\n", GV_ADAPT_TRACE_HEADER);
    }
    if ((status = srv_decide_load(srv)) != GV_OK)
        return status;
    gv_log(GV_LOG_INFO, "controller: %s, first decision %s at CF %g", gv_adapt_kind_str(ac.kind),
           gv_adapt_level_str(r->cur.d.level), r->cur.d.cf_send);
    return GV_OK;
}

/* A controller decision in the round's terms. */
static void decide_adopt(struct gv_server *srv, struct srv_decision *dst,
                         const struct gv_adapt_decision *d)
{
    dst->iter = d->iter;
    dst->d = (struct gv_ps_decision){.level = d->level,
                                     .theta_min = d->theta_min,
                                     .cf_candidate = d->cf_candidate,
                                     .cf_send = d->cf_send};
    for (uint32_t t = 0; t < srv->shard.n_tensors; t++)
        dst->heavy[t] = d->num_layers > 0 && d->layer_cf[t] > d->theta_min;
}

static void round_controller_cleanup(struct gv_server *srv)
{
    struct srv_round *r = &srv->round;
    if (r->declog != NULL)
        fclose(r->declog);
    r->declog = NULL;
    if (r->obstrace != NULL)
        fclose(r->obstrace);
    r->obstrace = NULL;
    gv_adapt_destroy(r->ctl);
    r->ctl = NULL;
}

gv_status_t srv_decide_load(struct gv_server *srv)
{
    struct srv_round *r = &srv->round;
    struct gv_adapt_decision d = {.layer_cf = r->layer_cf, .layer_cap = srv->shard.n_tensors};
    gv_status_t status = gv_adapt_current(r->ctl, &d);
    if (status != GV_OK)
        return status;
    decide_adopt(srv, &r->cur, &d);
    return GV_OK;
}

/* ---------------------------------------------------------------- each round */

static void decide_log_change(struct gv_server *srv, const struct srv_decision *o,
                              const struct srv_decision *n)
{
    if (o->d.level == n->d.level && o->d.cf_send == n->d.cf_send &&
        o->d.theta_min == n->d.theta_min && o->d.cf_candidate == n->d.cf_candidate)
        return;
    srv->round.cf_changes++;
    gv_log(GV_LOG_INFO,
           "controller: iteration %" PRIu64 ": %s CF %g -> %s CF %g (floor %g, "
           "candidate %g)",
           n->iter, gv_adapt_level_str(o->d.level), o->d.cf_send, gv_adapt_level_str(n->d.level),
           n->d.cf_send, n->d.theta_min, n->d.cf_candidate);
}

/* Server 0, the round of a checkpoint's iteration: committed only when this server wrote its
 * part and every server and every worker that reported did too (a server that reported none
 * failed it: no --checkpoint-dir there, or another --checkpoint-every); the verdict goes with
 * the decision, to the servers (DECISION) and the workers (UPDATE). */
static void round_ckpt_verdict(struct gv_server *srv, struct gv_ps_decision *d)
{
    struct srv_round *r = &srv->round;
    const struct srv_ckpt *ck = &srv->ckpt;
    d->ckpt_iter = 0;
    d->ckpt_status = GV_OK;
    r->ck_why[0] = '\0';
    if (!ck->on || ck->pend_iter == 0 || ck->pend_iter != r->iter)
        return;
    gv_status_t st = ck->pend_status;
    if (st != GV_OK)
        snprintf(r->ck_why, sizeof(r->ck_why), "server 0: %s", gv_status_str(st));
    for (uint32_t s = 1; s < srv->S && st == GV_OK; s++) {
        if (r->ck_srv_iter[s] != r->iter) {
            st = GV_ERR_CKPT;
            snprintf(r->ck_why, sizeof(r->ck_why),
                     "server %u wrote none (no --checkpoint-dir, or another --checkpoint-every?)",
                     s);
        } else if (r->ck_srv_st[s] != GV_OK) {
            st = r->ck_srv_st[s];
            snprintf(r->ck_why, sizeof(r->ck_why), "server %u: %s", s, gv_status_str(st));
        }
    }
    if (st == GV_OK && r->ck_wk_bad != GV_OK) {
        st = (gv_status_t)r->ck_wk_bad;
        snprintf(r->ck_why, sizeof(r->ck_why), "worker %u: %s", r->ck_wk_rank, gv_status_str(st));
    }
    d->ckpt_iter = r->iter;
    d->ckpt_status = st;
}

static gv_status_t round_decide(struct gv_server *srv)
{
    struct srv_round *r = &srv->round;
    uint64_t now = gv_now_ns();
    double period = (double)(now - r->t_prev_all_ns) * 1e-9;
    r->t_prev_all_ns = now;
    const struct srv_agg *a = &r->agg;
    bool norms = a->epoch_end && srv->job->method == GV_JOB_ACCORDION;
    struct gv_adapt_obs obs = {
        .iter = r->iter,
        .level = r->cur.d.level,
        .cf_sent = r->cur.d.cf_send,
        .norm2_ef = a->g_ef,
        .norm2_min = a->g_min,
        .norm2_cand = a->g_c,
        .t_compute = a->compute_max,
        .t_compress = a->compress_max,
        /* the round's period less a worker's evaluation since its last push (the others
         * waited for it): what an arm costs, not what the evaluations cost */
        .t_comm = GV_MAX(0.0, period - a->compute_max - a->compress_max - a->pause_max),
        .samples = a->samples,
        .num_workers = GV_MAX(1u, r->n_stats),
        /* the caller's optimizer steps the model: its lr (a PyTorch LR scheduler's), when the
         * workers tell it, is the one the controller's lr rules must see */
        .lr = srv->job->optimizer == GV_JOB_OPTIM_CALLER && a->lr_max > 0
                  ? a->lr_max
                  : (double)gv_optim_lr(&srv->job->optim, (int64_t)r->iter),
        .loss = a->loss_sum / GV_MAX(1u, r->n_stats),
        .epoch_end = norms,
        .num_layers = norms ? a->n_layer_norms : 0,
        .layer_norms = norms ? r->layer_norms : NULL,
    };
    struct gv_adapt_decision d = {.layer_cf = r->layer_cf, .layer_cap = srv->shard.n_tensors};
    gv_status_t status = gv_adapt_update(r->ctl, &obs, &d);
    if (status != GV_OK) {
        srv_abort(srv, GV_ERR_INVAL,
                  "the controller refused the statistics of iteration %" PRIu64
                  " (||g_ef||^2 %g, loss %g: has training diverged?)",
                  r->iter, a->g_ef, a->loss_sum / GV_MAX(1u, r->n_stats));
        return status;
    }
    if (r->obstrace != NULL) {
        char line[GV_ADAPT_TRACE_LINE];
        gv_adapt_trace_line(&obs, &d, line, sizeof(line));
        fprintf(r->obstrace, "%s\n", line);
        fflush(r->obstrace);
    }
    decide_adopt(srv, &r->next, &d);
    round_ckpt_verdict(srv, &r->next.d);
    decide_log_change(srv, &r->cur, &r->next);
    for (uint32_t s = 1; s < srv->S; s++) {
        struct srv_peer *p = srv->net.servers[s];
        if (p == NULL || p->closed || srv_send_decision(srv, p, &r->next, r->memb) != GV_OK) {
            srv_abort(srv, GV_ERR_CLOSED, "cannot send the decision to server %u", s);
            return GV_ERR_CLOSED;
        }
    }
    return GV_OK;
}

/* ---------------------------------------------------------------- membership */

void srv_memb_decide(enum gv_dead_policy policy, uint32_t min_workers, uint64_t iter, uint32_t n,
                     const bool *expected, const bool *arrived, const bool *dead,
                     struct srv_memb_decision *d)
{
    uint32_t n_expected = 0, n_arrived = 0, n_pending = 0, n_dead = 0;
    uint32_t first_dead = UINT32_MAX, first_missing = UINT32_MAX;
    memset(d, 0, sizeof(*d));
    for (uint32_t i = 0; i < n; i++) {
        if (!expected[i])
            continue;
        n_expected++;
        if (dead[i] && first_dead == UINT32_MAX)
            first_dead = i;
        n_dead += dead[i];
        if (arrived[i])
            n_arrived++;
        else if (!dead[i])
            n_pending++;
        else if (first_missing == UINT32_MAX)
            first_missing = i;
    }
    d->n_missing = n_expected - n_arrived - n_pending;
    if (policy == GV_DEAD_ABORT && n_dead > 0) {
        d->action = SRV_MEMB_ABORT;
        snprintf(d->reason, sizeof(d->reason),
                 "worker %u is dead (%u of %u expected workers "
                 "dead) and the policy is abort",
                 first_dead, n_dead, n_expected);
        return;
    }
    if (n_pending > 0) {
        d->action = SRV_MEMB_WAIT;
        return;
    }
    if (min_workers < 1)
        min_workers = 1;
    if (n_arrived < min_workers) {
        d->action = SRV_MEMB_ABORT;
        snprintf(d->reason, sizeof(d->reason),
                 "only %u of %u expected workers delivered (%u "
                 "dead); at least %u needed",
                 n_arrived, n_expected, d->n_missing, min_workers);
        return;
    }
    d->n_next = n_expected - n_dead;
    if (d->n_next < min_workers) {
        d->action = SRV_MEMB_TOO_FEW;
        snprintf(d->reason, sizeof(d->reason),
                 "only %u of %u workers are left after iteration %" PRIu64
                 " and at least %u are needed (--min-workers)",
                 d->n_next, n, iter, min_workers);
        return;
    }
    d->action = SRV_MEMB_COMPLETE;
    d->n_average = n_arrived;
    if (d->n_missing > 0)
        snprintf(d->reason, sizeof(d->reason),
                 "continuing without %u dead worker%s (first: "
                 "worker %u); averaging over %u",
                 d->n_missing, d->n_missing == 1 ? "" : "s", first_missing, n_arrived);
}

/* Worker p is out of the job from the next round on. */
static void round_drop(struct gv_server *srv, struct srv_peer *p, const char *why)
{
    struct srv_round *r = &srv->round;
    r->dead[p->rank] = true;
    r->n_dead++;
    srv_ops_forget(srv, p, why);
}

/* Server s > 0: server 0 dropped worker p (another server found it dead). */
static void round_dropped(struct gv_server *srv, struct srv_peer *p)
{
    round_drop(srv, p, "dropped by server 0");
    gv_log(GV_LOG_WARN,
           "server %u: %s is out of the job from iteration %" PRIu64 " on (another "
           "server found it dead)",
           srv->rank, p->name, srv->round.iter + 1);
    srv_send_evict(srv, p, srv->round.iter,
                   "another server found this worker dead: the job goes on without it");
}

/* ---------------------------------------------------------------- aggregation */

static enum srv_round_event round_aggregated(struct gv_server *srv);

/* Adds one push's statistics (checked finite on arrival) to the round's; false when a sum
 * overflows (each was finite: a worker sent values near the double range). */
static bool round_stats(struct gv_server *srv, uint32_t rank, const struct gv_proto_iter_stats *st)
{
    struct srv_round *r = &srv->round;
    struct srv_agg *a = &r->agg;
    a->g_ef += st->g_ef_sq;
    a->g_min += st->g_min_sq;
    a->g_c += st->g_c_sq;
    a->compute_max = GV_MAX(a->compute_max, st->compute_s);
    a->compress_max = GV_MAX(a->compress_max, st->compress_s);
    a->loss_sum += st->loss;
    a->lr_max = GV_MAX(a->lr_max, st->lr);
    a->pause_max = GV_MAX(a->pause_max, st->pause_s);
    a->samples += st->samples;
    if (st->ckpt_iter == r->iter && st->ckpt_status != GV_OK && r->ck_wk_bad == GV_OK) {
        r->ck_wk_bad = st->ckpt_status; /* its residual checkpoint failed */
        r->ck_wk_rank = rank;
    }
    uint32_t nt = srv->shard.n_tensors;
    if (rank == 0 && st->n_layer_norms == nt && st->layer_norms != NULL) {
        memcpy(r->layer_norms, st->layer_norms, nt * sizeof(double));
        a->epoch_end = true;
        a->n_layer_norms = st->n_layer_norms;
    }
    return isfinite(a->g_ef + a->g_min + a->g_c + a->loss_sum);
}

static void round_stats_overflow(struct gv_server *srv, const struct srv_peer *p)
{
    const struct srv_agg *a = &srv->round.agg;
    srv_abort(srv, GV_ERR_PROTO,
              "%s's statistics of iteration %" PRIu64 " overflow the round's sums (||g_ef||^2 %g, "
              "||g_min||^2 %g, ||g_c||^2 %g, loss %g): it sent values near the float range",
              p->name, srv->round.iter, a->g_ef, a->g_min, a->g_c, a->loss_sum);
}

/* The next push to aggregate: the lowest rank not yet added that is expected and alive (ranks
 * are visited in order, so the sum is the same float sum everywhere). Resumes its connection;
 * when no rank is left, the server's aggregation of the round is done. */
static enum srv_round_event round_next(struct gv_server *srv)
{
    struct srv_round *r = &srv->round;
    for (;;) {
        while (r->next_rank < srv->W &&
               (!srv_round_member(srv, r->next_rank) || srv->net.workers[r->next_rank] == NULL))
            r->next_rank++;
        if (r->next_rank == srv->W)
            return round_aggregated(srv);
        struct srv_peer *q = srv->net.workers[r->next_rank];
        struct srv_held *h = &r->held[q->rank];
        if (!h->on) {
            if (q->link.c != NULL)
                (void)gv_tp_conn_resume_recv(q->link.c);
            return SRV_ROUND_BUSY;
        }
        /* an empty push held for its turn counts now: no entries, only its statistics, summed
         * in rank order like the others */
        h->on = false;
        if (srv->rank == 0 && !round_stats(srv, q->rank, &h->stats)) {
            round_stats_overflow(srv, q);
            return SRV_ROUND_BUSY;
        }
        r->arrived[q->rank] = true;
        r->recv += h->bytes;
        r->next_rank++;
    }
}

enum srv_round_event srv_round_try_open(struct gv_server *srv, bool hold)
{
    struct srv_round *r = &srv->round;
    if (srv->end.state != SRV_RUNNING || r->phase != SRV_ROUND_WAIT_OPEN || !srv->start.settled ||
        hold || r->iter >= (uint64_t)srv->job->total_steps)
        return SRV_ROUND_BUSY;
    for (uint32_t w = 0; w < srv->W; w++) {
        const struct srv_peer *p = srv->net.workers[w];
        if (!srv_round_member(srv, w))
            continue;
        if (p == NULL || !p->synced || p->closed || !gv_ps_link_idle(&p->link))
            return SRV_ROUND_BUSY;
    }
    /* the previous update's payload (acc, rbuf) has left: reuse the buffers; a round in pieces
     * receives each piece's first push into acc as it is */
    srv_piece_open(srv);
    if (!srv->pieces.on)
        memset(r->acc, 0, srv->shard.n * sizeof(float));
    memset(&r->agg, 0, sizeof(r->agg));
    memset(r->arrived, 0, srv->W * sizeof(bool));
    r->ck_wk_bad = GV_OK;
    r->next_rank = 0;
    r->recv = r->sent = 0;
    r->t_agg_ns = 0;
    r->phase = SRV_ROUND_OPEN;
    uint64_t now = gv_now_ns();
    if (r->done == 0) {
        r->t_first_ns = now;
        r->t_prev_all_ns = now;
        gv_log(GV_LOG_INFO, "server %u: every worker is in; training starts at iteration %" PRIu64,
               srv->rank, r->iter);
    }
    return srv->pieces.on ? SRV_ROUND_BUSY : round_next(srv);
}

gv_status_t srv_round_push_header(struct gv_server *srv, struct srv_peer *p,
                                  const struct gv_proto_msg *m, uint64_t payload_len,
                                  struct gv_iov *dst, int *cnt)
{
    struct srv_round *r = &srv->round;
    if (srv->end.state != SRV_RUNNING) { /* the job is ending: nobody waits for it any more */
        dst[0] = (struct gv_iov){NULL, (size_t)payload_len};
        *cnt = 1;
        return GV_OK;
    }
    if (m->iteration != r->iter) {
        gv_log(GV_LOG_WARN, "server %u: %s pushed iteration %" PRIu64 " during round %" PRIu64,
               srv->rank, p->name, m->iteration, r->iter);
        return GV_ERR_PROTO;
    }
    if (r->phase == SRV_ROUND_OPEN && srv->pieces.on)
        return srv_piece_push_header(srv, p, m, payload_len, dst, cnt);
    if (r->phase != SRV_ROUND_OPEN || p->rank != r->next_rank) {
        p->deferred = true;
        return GV_ERR_AGAIN; /* not its turn: it waits in the kernel */
    }
    p->deferred = false;
    bool dense;
    char why[300];
    if (gv_ps_push_check(m, payload_len, srv->rank, srv->shard.n, &r->cur.d,
                         gv_ps_dense_vt(srv->job, &r->cur.d), r->rcap, &dense, why,
                         sizeof(why)) != GV_OK) {
        gv_log(GV_LOG_WARN, "server %u: %s pushed a malformed gradient: %s", srv->rank, p->name,
               why);
        return GV_ERR_PROTO;
    }
    if (r->t_agg_ns == 0)
        r->t_agg_ns = gv_trace_now(srv->cfg.trace);
    if (dense) {
        dst[0] = (struct gv_iov){r->rbuf, (size_t)payload_len};
        *cnt = 1;
    } else {
        dst[0] = (struct gv_iov){r->rbuf, (size_t)m->segs[0].bytes};
        dst[1] = (struct gv_iov){r->rbuf + m->segs[0].bytes, (size_t)m->segs[1].bytes};
        *cnt = 2;
    }
    return GV_OK;
}

/* Adds the push sitting in rbuf to the accumulator. */
static gv_status_t round_add(struct gv_server *srv, const struct gv_proto_msg *m)
{
    struct srv_round *r = &srv->round;
    float *acc = r->acc;
    if (m->n_segs == 1 && m->segs[0].enc == GV_PROTO_ENC_F16) { /* dense-fp16 */
        const uint16_t *x = (const uint16_t *)(void *)r->rbuf;
        for (uint64_t i = 0; i < srv->shard.n; i++)
            acc[i] += gv_f16_to_f32(x[i]);
        return GV_OK;
    }
    if (m->n_segs == 1) {
        const float *x = (const float *)(void *)r->rbuf;
        for (uint64_t i = 0; i < srv->shard.n; i++)
            acc[i] += x[i];
        return GV_OK;
    }
    return gv_ps_sparse_add(m, r->rbuf, (uint32_t)srv->shard.n, r->acc);
}

/* The checks on_header makes, for a push without payload (on_header never saw it). */
static bool round_empty_ok(struct gv_server *srv, const struct srv_peer *p,
                           const struct gv_proto_msg *m)
{
    struct srv_round *r = &srv->round;
    bool dense;
    char why[300];
    if (m->iteration != r->iter) {
        gv_log(GV_LOG_WARN, "server %u: %s pushed iteration %" PRIu64 " during round %" PRIu64,
               srv->rank, p->name, m->iteration, r->iter);
        return false;
    }
    if (gv_ps_push_check(m, 0, srv->rank, srv->shard.n, &r->cur.d,
                         gv_ps_dense_vt(srv->job, &r->cur.d), r->rcap, &dense, why,
                         sizeof(why)) != GV_OK) {
        gv_log(GV_LOG_WARN, "server %u: %s pushed a malformed gradient: %s", srv->rank, p->name,
               why);
        return false;
    }
    return true;
}

/* A push without payload that arrived out of turn (the transport asks on_header only for
 * messages with a payload, so it could not be deferred): checked and held for its turn. */
static enum srv_round_event round_hold(struct gv_server *srv, struct srv_peer *p,
                                       const struct gv_proto_msg *m, uint64_t msg_bytes)
{
    struct srv_round *r = &srv->round;
    struct srv_held *h = &r->held[p->rank];
    char why[300];
    if (m->payload_len != 0 || h->on) {
        srv_abort(srv, GV_ERR_PROTO, "%s pushed twice in round %" PRIu64, p->name, r->iter);
        return SRV_ROUND_BUSY;
    }
    if (!round_empty_ok(srv, p, m)) {
        srv_abort(srv, GV_ERR_PROTO, "%s pushed a malformed gradient at iteration %" PRIu64,
                  p->name, r->iter);
        return SRV_ROUND_BUSY;
    }
    if (gv_ps_stats_check(&m->u.push.stats, why, sizeof(why)) != GV_OK) {
        char what[360];
        snprintf(what, sizeof(what), "a non-finite statistic (%.300s)", why);
        return round_worker_bad(srv, p, what);
    }
    uint32_t nt = srv->shard.n_tensors;
    h->on = true;
    h->bytes = msg_bytes;
    h->stats = m->u.push.stats;
    h->stats.layer_norms = NULL;
    if (p->rank == 0 && m->u.push.stats.n_layer_norms == nt) {
        memcpy(r->held_norms, m->u.push.stats.layer_norms, nt * sizeof(double));
        h->stats.layer_norms = r->held_norms;
    }
    return SRV_ROUND_BUSY;
}

/* A piece of a round in pieces landed (on_header accepted only pieces in their turn). */
static enum srv_round_event round_piece_done(struct gv_server *srv, struct srv_peer *p,
                                             const struct gv_proto_msg *m, uint64_t msg_bytes)
{
    struct srv_round *r = &srv->round;
    if (m->payload_len == 0) { /* on_header never saw it: a dense piece always has a payload */
        srv_abort(srv, GV_ERR_PROTO, "%s pushed an empty piece at iteration %" PRIu64, p->name,
                  r->iter);
        return SRV_ROUND_BUSY;
    }
    /* before it is added: one NaN would poison every replica (a first push of its piece that
     * landed in the accumulator is overwritten by the next member's, or zeroed) */
    char why[300];
    if (gv_ps_push_finite(m, srv_piece_landed(srv, m), why, sizeof(why)) != GV_OK) {
        char what[360];
        snprintf(what, sizeof(what), "a non-finite %s (%.300s)",
                 strncmp(why, "statistic", 9) == 0 ? "statistic" : "gradient", why);
        return round_worker_bad(srv, p, what);
    }
    uint64_t t = gv_trace_now(srv->cfg.trace);
    bool whole = false;
    if (srv_piece_push_done(srv, p, m, &whole) != GV_OK)
        return SRV_ROUND_BUSY;
    gv_trace_span(srv->cfg.trace, GV_PS_SPAN_ADD, t, gv_trace_now(srv->cfg.trace), r->iter,
                  r->cur.d.cf_send, msg_bytes, (int32_t)p->rank);
    r->recv += msg_bytes;
    if (whole) { /* its last piece carried the statistics */
        if (srv->rank == 0 && !round_stats(srv, p->rank, &m->u.push.stats)) {
            round_stats_overflow(srv, p);
            return SRV_ROUND_BUSY;
        }
        r->arrived[p->rank] = true;
    }
    return srv_piece_all_in(srv) ? round_aggregated(srv) : SRV_ROUND_BUSY;
}

enum srv_round_event srv_round_push_done(struct gv_server *srv, struct srv_peer *p,
                                         const struct gv_proto_msg *m, uint64_t msg_bytes)
{
    struct srv_round *r = &srv->round;
    char why[300];
    if (srv->end.state != SRV_RUNNING)
        return SRV_ROUND_BUSY;    /* dropped unread: the job is ending */
    srv_replica_check(srv, p, m); /* --optimizer caller */
    if (srv->end.state != SRV_RUNNING)
        return SRV_ROUND_BUSY;
    if (r->phase == SRV_ROUND_OPEN && srv->pieces.on)
        return round_piece_done(srv, p, m, msg_bytes);
    if (r->phase != SRV_ROUND_OPEN || p->rank != r->next_rank)
        return round_hold(srv, p, m, msg_bytes); /* on_header deferred every push with a payload */
    if (m->payload_len == 0 && !round_empty_ok(srv, p, m)) {
        srv_abort(srv, GV_ERR_PROTO, "%s pushed a malformed gradient at iteration %" PRIu64,
                  p->name, r->iter);
        return SRV_ROUND_BUSY;
    }
    /* before anything is added: one NaN would poison every replica */
    if (gv_ps_push_finite(m, r->rbuf, why, sizeof(why)) != GV_OK) {
        char what[360];
        snprintf(what, sizeof(what), "a non-finite %s (%.300s)",
                 strncmp(why, "statistic", 9) == 0 ? "statistic" : "gradient", why);
        return round_worker_bad(srv, p, what);
    }
    uint64_t t = gv_trace_now(srv->cfg.trace);
    if (round_add(srv, m) != GV_OK) {
        srv_abort(srv, GV_ERR_PROTO, "%s pushed a malformed sparse gradient at iteration %" PRIu64,
                  p->name, r->iter);
        return SRV_ROUND_BUSY;
    }
    gv_trace_span(srv->cfg.trace, GV_PS_SPAN_ADD, t, gv_trace_now(srv->cfg.trace), r->iter,
                  r->cur.d.cf_send, msg_bytes, (int32_t)p->rank);
    if (r->t_agg_ns == 0) /* a push without payload: on_header never saw it */
        r->t_agg_ns = t;
    if (srv->rank == 0 && !round_stats(srv, p->rank, &m->u.push.stats)) {
        round_stats_overflow(srv, p);
        return SRV_ROUND_BUSY;
    }
    r->arrived[p->rank] = true;
    r->recv += msg_bytes;
    r->next_rank++;
    return round_next(srv);
}

/* Decides (server 0), averages over the round's members and applies. Server 0 decides before
 * averaging: the decision reads the workers' statistics, not the sum, and the other servers
 * get it sooner. */
static enum srv_round_event round_finish(struct gv_server *srv)
{
    struct srv_round *r = &srv->round;
    struct gv_trace *tr = srv->cfg.trace;
    if (srv->rank == 0 && round_decide(srv) != GV_OK)
        return SRV_ROUND_BUSY;
    uint64_t t = gv_trace_now(tr), iter = r->iter;
    double cf = r->cur.d.cf_send;
    gv_trace_span(tr, GV_PS_SPAN_DECIDE, r->t_dec_ns, t, iter, r->next.d.cf_send, 0, -1);
    if (srv->pieces.on)
        return srv_piece_end(srv); /* its update spans are the pieces' */
    gv_ps_average(r->acc, srv->shard.n, r->n_avg);
    enum srv_round_event ev = srv_update_apply(srv);
    gv_trace_span(tr, GV_PS_SPAN_UPDATE, t, gv_trace_now(tr), iter, cf, r->sent, -1);
    return ev;
}

/* Server 0, once its own aggregation and every other server's STATS are in: the round's
 * members are the workers whose push reached any server (a push that reached only some
 * servers counts as zero on the others), the next round's are the expected workers nobody
 * found dead. The policy decides between that and an abort. */
static enum srv_round_event round_maybe_decide(struct gv_server *srv)
{
    struct srv_round *r = &srv->round;
    if (srv->end.state != SRV_RUNNING || r->phase != SRV_ROUND_WAIT_DECISION ||
        r->n_reports < srv->S - 1)
        return SRV_ROUND_BUSY;
    uint32_t W = srv->W;
    bool *arr = r->scratch, *dead = r->scratch + W;
    r->n_stats = 0;
    for (uint32_t w = 0; w < W; w++) {
        arr[w] = r->arrived[w];
        dead[w] = srv->net.workers[w] == NULL || r->dead[w];
        r->n_stats += r->arrived[w];
        for (uint32_t s = 1; s < srv->S; s++) {
            uint8_t b = r->reports[(size_t)s * W + w];
            arr[w] |= (b & GV_PS_MEMB_ARRIVED) != 0;
            dead[w] |= (b & GV_PS_MEMB_DEAD) != 0;
        }
    }
    memset(r->got_report, 0, srv->S * sizeof(bool));
    r->n_reports = 0;
    struct srv_memb_decision d;
    srv_memb_decide(srv->cfg.dead_policy, srv->cfg.min_workers, r->iter, W, r->expected, arr, dead,
                    &d);
    if (d.action == SRV_MEMB_TOO_FEW) {
        srv_abort(srv, GV_ERR_CLOSED, "%s", d.reason);
        return SRV_ROUND_BUSY;
    }
    if (d.action != SRV_MEMB_COMPLETE) {
        srv_abort(srv, GV_ERR_CLOSED, "iteration %" PRIu64 ": %s", r->iter,
                  d.action == SRV_MEMB_ABORT ? d.reason : "a worker is neither in nor dead");
        return SRV_ROUND_BUSY;
    }
    if (d.n_missing > 0)
        gv_log(GV_LOG_WARN, "server 0: iteration %" PRIu64 ": %s", r->iter, d.reason);
    for (uint32_t w = 0; w < W; w++)
        if (arr[w] && !r->arrived[w])
            gv_log(GV_LOG_WARN,
                   "server 0: iteration %" PRIu64 ": worker %u's push reached some "
                   "servers only: it counts in the average (over %u), as a zero gradient where "
                   "it is missing",
                   r->iter, w, d.n_average);
    for (uint32_t w = 0; w < W; w++) {
        bool next = r->expected[w] && !dead[w];
        if (r->expected[w] && !next) {
            struct srv_peer *p = srv->net.workers[w];
            if (p != NULL && !r->dead[w])
                round_dropped(srv, p); /* another server found it dead */
        }
        r->memb[w] = (uint8_t)((arr[w] ? GV_PS_MEMB_ARRIVED : 0u) | (next ? GV_PS_MEMB_NEXT : 0u));
        r->expected[w] = next;
    }
    r->n_avg = d.n_average;
    return round_finish(srv);
}

/* This server has every expected push of the round, or knows its worker dead. Servers 1..S-1
 * tell server 0 which pushes they added and which workers they found dead (STATS), then wait
 * for its DECISION; server 0 waits for every server's STATS. */
static enum srv_round_event round_aggregated(struct gv_server *srv)
{
    struct srv_round *r = &srv->round;
    r->phase = SRV_ROUND_WAIT_DECISION;
    r->t_dec_ns = gv_trace_now(srv->cfg.trace);
    gv_trace_span(srv->cfg.trace, GV_PS_SPAN_AGGREGATE, r->t_agg_ns ? r->t_agg_ns : r->t_dec_ns,
                  r->t_dec_ns, r->iter, r->cur.d.cf_send, r->recv, -1);
    if (srv->rank == 0)
        return round_maybe_decide(srv);
    uint8_t *rep = r->reports; /* s > 0: the first W bytes are this server's report */
    uint32_t n = 0;
    for (uint32_t w = 0; w < srv->W; w++) {
        rep[w] = (uint8_t)((r->arrived[w] ? GV_PS_MEMB_ARRIVED : 0u) |
                           (srv->net.workers[w] != NULL && r->dead[w] ? GV_PS_MEMB_DEAD : 0u));
        n += r->arrived[w];
    }
    struct srv_peer *c = srv->net.coord;
    struct gv_proto_msg m;
    gv_ps_msg_init(&m, &srv->env, GV_PROTO_MSG_STATS, r->iter);
    m.u.stats.workers = n;
    if (srv->ckpt.on && srv->ckpt.pend_iter == r->iter) { /* its part of this checkpoint */
        m.u.stats.stats.ckpt_iter = r->iter;
        m.u.stats.stats.ckpt_status = srv->ckpt.pend_status;
    }
    gv_proto_seg_add(&m, GV_PROTO_SEG_RAW, GV_PROTO_ENC_BYTES, srv->W, srv->W);
    struct gv_iov pl = {rep, srv->W};
    if (c == NULL || gv_ps_link_send(&c->link, &m, &pl, 1, NULL) != GV_OK)
        srv_abort_now(srv, GV_ERR_CLOSED, true, "cannot send the round's membership to server 0");
    return SRV_ROUND_BUSY;
}

gv_status_t srv_round_decision_header(struct gv_server *srv, const struct gv_proto_msg *m,
                                      struct gv_iov *dst, int *cnt)
{
    struct srv_round *r = &srv->round;
    bool acc = srv->job->method == GV_JOB_ACCORDION;
    uint32_t nt = srv->shard.n_tensors;
    if (m->n_segs != 1u + acc || m->segs[0].kind != GV_PROTO_SEG_RAW ||
        m->segs[0].bytes != srv->W ||
        (acc && (m->segs[1].kind != GV_PROTO_SEG_RAW || m->segs[1].bytes != nt)))
        return GV_ERR_PROTO;
    struct srv_decision *d = r->cur.iter == UINT64_MAX ? &r->cur : &r->next;
    dst[0] = (struct gv_iov){r->memb, srv->W};
    if (acc)
        dst[1] = (struct gv_iov){d->heavy, nt};
    *cnt = 1 + acc;
    return GV_OK;
}

gv_status_t srv_round_stats_header(struct gv_server *srv, const struct srv_peer *p,
                                   const struct gv_proto_msg *m, struct gv_iov *dst, int *cnt)
{
    struct srv_round *r = &srv->round;
    if (m->n_segs != 1 || m->segs[0].kind != GV_PROTO_SEG_RAW || m->segs[0].bytes != srv->W ||
        r->got_report[p->rank])
        return GV_ERR_PROTO;
    dst[0] = (struct gv_iov){r->reports + (size_t)p->rank * srv->W, srv->W};
    *cnt = 1;
    return GV_OK;
}

enum srv_round_event srv_round_on_report(struct gv_server *srv, const struct srv_peer *p,
                                         const struct gv_proto_msg *m)
{
    struct srv_round *r = &srv->round;
    if (m->n_segs != 1 || m->iteration != r->iter || r->got_report[p->rank] ||
        gv_ps_memb_check(r->reports + (size_t)p->rank * srv->W, srv->W,
                         GV_PS_MEMB_ARRIVED | GV_PS_MEMB_DEAD) != GV_OK) {
        srv_abort(srv, GV_ERR_PROTO,
                  "%s sent a malformed membership for iteration %" PRIu64 " during round %" PRIu64,
                  p->name, m->iteration, r->iter);
        return SRV_ROUND_BUSY;
    }
    r->got_report[p->rank] = true;
    r->n_reports++;
    r->ck_srv_iter[p->rank] = m->u.stats.stats.ckpt_iter;
    r->ck_srv_st[p->rank] = (gv_status_t)m->u.stats.stats.ckpt_status;
    return round_maybe_decide(srv);
}

enum srv_round_event srv_round_on_decision(struct gv_server *srv, const struct gv_proto_msg *m)
{
    struct srv_round *r = &srv->round;
    /* srv_round_decision_header put the membership in memb (a DECISION without it is malformed) */
    if (m->n_segs == 0 ||
        gv_ps_memb_check(r->memb, srv->W, GV_PS_MEMB_ARRIVED | GV_PS_MEMB_NEXT) != GV_OK) {
        srv_abort_now(srv, GV_ERR_PROTO, false, "server 0 sent a malformed decision");
        return SRV_ROUND_BUSY;
    }
    if (r->cur.iter == UINT64_MAX && m->iteration == r->iter) { /* the first: start-up */
        struct gv_ps_decision d;
        gv_ps_decision_from_proto(&m->u.decision, &d);
        round_start_with(srv, m->iteration, &d);
        return SRV_ROUND_BUSY;
    }
    if (m->iteration != r->iter + 1 || r->next.iter == m->iteration) {
        char text[200];
        snprintf(text, sizeof(text),
                 "server 0 sent a decision for iteration %" PRIu64 " during round %" PRIu64,
                 m->iteration, r->iter);
        srv_abort_now(srv, GV_ERR_PROTO, false, text);
        return SRV_ROUND_BUSY;
    }
    r->next.iter = m->iteration;
    gv_ps_decision_from_proto(&m->u.decision, &r->next.d);
    if (r->phase != SRV_ROUND_WAIT_DECISION) {
        srv_abort_now(srv, GV_ERR_PROTO, false,
                      "server 0 sent the decision of an iteration this "
                      "server has not aggregated");
        return SRV_ROUND_BUSY;
    }
    uint32_t n_avg = 0, n_next = 0;
    for (uint32_t w = 0; w < srv->W; w++) {
        uint8_t b = r->memb[w];
        bool next = (b & GV_PS_MEMB_NEXT) != 0;
        if ((r->arrived[w] && !(b & GV_PS_MEMB_ARRIVED)) || (next && !r->expected[w])) {
            srv_abort_now(srv, GV_ERR_PROTO, false,
                          "server 0's membership of the round "
                          "contradicts this server's (worker pushed here, or rejoined)");
            return SRV_ROUND_BUSY;
        }
        n_avg += (b & GV_PS_MEMB_ARRIVED) != 0;
        n_next += next;
        if (r->expected[w] && !next) {
            struct srv_peer *p = srv->net.workers[w];
            if (p != NULL && !r->dead[w])
                round_dropped(srv, p);
        }
        r->expected[w] = next;
    }
    if (n_avg == 0 || n_next == 0) {
        srv_abort_now(srv, GV_ERR_PROTO, false, "server 0's decision counts no worker");
        return SRV_ROUND_BUSY;
    }
    r->n_avg = n_avg;
    return round_finish(srv);
}

/* ---------------------------------------------------------------- workers leaving */

/* Worker p is out of the job: `what` says why as a predicate ("is dead: disconnected", "pushed
 * a gradient with NaN at entry 5 of 120"). The policy decides: an abort naming it, or the job
 * goes on without it (told why, disconnected). */
static enum srv_round_event round_worker_out(struct gv_server *srv, struct srv_peer *p,
                                             const char *what, const char *told, bool hold)
{
    struct srv_round *r = &srv->round;
    if (r->dead[p->rank])
        return SRV_ROUND_BUSY;
    srv_ops_forget(srv, p, what);
    /* the job has started once every worker has the model: before, it starts with all */
    bool started = r->done > 0;
    for (uint32_t w = 0; !started && w < srv->W; w++)
        started = w + 1 == srv->W && srv->net.workers[w] != NULL && srv->net.workers[w]->synced;
    for (uint32_t w = 0; started && r->done == 0 && w < srv->W; w++)
        started = srv->net.workers[w] != NULL && srv->net.workers[w]->synced;
    if (srv->end.state != SRV_RUNNING || srv->cfg.dead_policy != GV_DEAD_CONTINUE || !started) {
        /* the abort policy, or start-up: a job starts with every one of its workers */
        srv_abort(srv, GV_ERR_CLOSED, "%s %s; the dead-worker policy is %s", p->name, what,
                  srv->cfg.dead_policy != GV_DEAD_CONTINUE
                      ? "abort"
                      : "continue, but training had not started");
        return SRV_ROUND_BUSY;
    }
    round_drop(srv, p, what);
    uint32_t left = 0;
    for (uint32_t w = 0; w < srv->W; w++)
        left += srv_round_member(srv, w) && srv->net.workers[w] != NULL;
    gv_log(GV_LOG_WARN,
           "server %u: %s %s at iteration %" PRIu64 "; continuing without it "
           "(dead-worker policy continue, %u of %u workers left)",
           srv->rank, p->name, what, r->iter, left, srv->W);
    srv_send_evict(srv, p, r->iter, told);
    if (r->phase == SRV_ROUND_OPEN && srv->pieces.on) {
        /* what it pushed counts; its missing pieces count as zero, as a push that reached some
         * servers only */
        if (srv->pieces.got[p->rank] > 0)
            r->arrived[p->rank] = true;
        srv_piece_member_gone(srv, p->rank);
        return srv_piece_all_in(srv) ? round_aggregated(srv) : SRV_ROUND_BUSY;
    }
    if (r->phase == SRV_ROUND_OPEN && p->rank == r->next_rank)
        return round_next(srv);
    if (r->phase == SRV_ROUND_WAIT_OPEN)
        return srv_round_try_open(srv, hold);
    return SRV_ROUND_BUSY;
}

enum srv_round_event srv_round_worker_dead(struct gv_server *srv, struct srv_peer *p,
                                           const char *why, bool hold)
{
    char what[300], told[360];
    snprintf(what, sizeof(what), "is dead: %.280s", why);
    snprintf(told, sizeof(told),
             "server %u declared worker %u dead (%.200s): the job goes on without it", srv->rank,
             p->rank, why);
    return round_worker_out(srv, p, what, told, hold);
}

/* Worker p sent what no replica may take (a non-finite value or statistic): the same policy as
 * a dead worker; its push is not added. */
static enum srv_round_event round_worker_bad(struct gv_server *srv, struct srv_peer *p,
                                             const char *why)
{
    char what[400], told[460];
    snprintf(what, sizeof(what), "pushed %.380s", why);
    snprintf(told, sizeof(told),
             "server %u dropped worker %u at iteration %" PRIu64 ": it %.380s: the job goes on "
             "without it",
             srv->rank, p->rank, srv->round.iter, what);
    return round_worker_out(srv, p, what, told, true); /* the loop opens the next round */
}

void srv_round_resync(struct gv_server *srv, struct srv_peer *p)
{
    srv->round.resync_req[p->rank] = true;
}

void srv_round_on_bye(struct gv_server *srv, struct srv_peer *p, uint64_t iteration)
{
    struct srv_round *r = &srv->round;
    uint64_t total = (uint64_t)srv->job->total_steps;
    p->bye = true;
    gv_log(GV_LOG_INFO, "server %u: %s ends after %" PRIu64 " iterations", srv->rank, p->name,
           iteration);
    if (srv_live(srv) && r->iter >= total) {
        srv_end_done(srv, "every iteration is done");
    } else if (srv_live(srv) && gv_job_external(srv->job) && srv->job->steps == 0 &&
               iteration == r->iter && !r->dead[p->rank]) {
        /* --model external without --steps: the training scripts set the length, and the first
         * to finish at a round's boundary ends the job (--steps makes an early one a leaver) */
        if (srv->rank == 0)
            srv_end_done(srv, "a worker finished its training script");
    } else if (srv_live(srv) && p->rank == 0 && iteration == r->iter && !r->dead[0]) {
        /* worker 0 stops the job early (--target-accuracy): server 0 ends it, the others
         * follow its BYE (so that an abort racing with it ends the job once, the same way
         * everywhere) */
        if (srv->rank == 0)
            srv_end_done(srv, "worker 0 stopped it (its target reached)");
    } else if (srv_live(srv)) {
        char what[200];
        snprintf(what, sizeof(what),
                 "left the job: it said BYE after %" PRIu64 " of %" PRIu64 " iterations", iteration,
                 total);
        (void)round_worker_out(srv, p, what, "a worker leaving before the end is out of the job",
                               true);
        return;
    }
    /* the answer (BYE, or how the end failed) comes from srv_end_answer once the final
     * checkpoint is decided; the worker closes once it has it */
}
