/* step.c: one iteration of the worker runtime, out and back. Tensors are compressed from the last
 * to the first, so the shards complete from the last server to server 0; each server's push leaves
 * as soon as its shard is complete, while the next tensors are compressed (server 0's push, the
 * last one, carries the iteration's statistics for the controller). Then every server's update
 * is applied as it arrives: the same optimizer step the server applied to its shard. */
#include "wk.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

/* What one step needs to remember between its phases. */
struct step_ctx {
    const struct gv_worker_step_in *in;
    struct gv_worker_step_out *out;
    uint32_t levels;
    bool dense; /* the level sent is dense */
    struct gv_norms norms;
    uint64_t t0;
    uint32_t next_push; /* shards >= next_push have been pushed */
};

/* Splits the sent entries of unit u (a tensor, or the model) over the shards it spans, into
 * each shard's staging (filled back to front, so that the shard's entries end up in ascending
 * order). */
static void step_stage(struct gv_worker *w, uint32_t u, const struct gv_sparse *sent)
{
    uint64_t base = w->unit_off[u];
    uint32_t end = sent->count;
    uint32_t s = gv_shard_of(&w->map, w->unit_off[u + 1] - 1);
    for (;; s--) {
        struct wk_server *ws = &w->srv[s];
        /* entries of this unit at or above the shard's start */
        uint64_t from = ws->lo > base ? ws->lo - base : 0;
        uint32_t a = end;
        while (a > 0 && sent->idx[a - 1] >= from)
            a--;
        uint32_t k = end - a;
        ws->tail -= k;
        for (uint32_t i = 0; i < k; i++) {
            ws->sidx[ws->tail + i] = (uint32_t)(base + sent->idx[a + i] - ws->lo);
            ws->sval[ws->tail + i] = sent->val[a + i];
        }
        end = a;
        if (s == 0 || ws->lo <= base)
            break;
    }
}

static void step_stats(struct gv_worker *w, struct step_ctx *x, struct gv_proto_iter_stats *st)
{
    memset(st, 0, sizeof(*st));
    st->g_ef_sq = x->norms.ef;
    st->g_min_sq = x->norms.min;
    st->g_c_sq = x->norms.cand;
    st->compute_s = x->in->compute_s;
    st->compress_s = (double)(gv_now_ns() - x->t0) * 1e-9;
    st->samples = x->in->samples;
    st->loss = x->in->loss;
    if (w->norms_pending) {
        st->n_layer_norms = w->m.n_tensors;
        st->layer_norms = w->layer_norms;
    }
}

static gv_status_t step_push(struct gv_worker *w, struct step_ctx *x, uint32_t s)
{
    struct wk_server *ws = &w->srv[s];
    uint64_t t = gv_trace_now(w->cfg.trace);
    struct gv_proto_msg m;
    gv_ps_link_msg(&ws->link, &m, GV_PROTO_MSG_PUSH, w->iter);
    m.dtype = GV_PROTO_DTYPE_F32;
    m.numel = ws->n;
    m.cf = w->dec.cf_send;
    m.u.push.level = gv_ps_level_to_proto(w->dec.level);
    if (s == 0)
        step_stats(w, x, &m.u.push.stats);
    struct gv_iov pl[2];
    int npl;
    if (x->dense) {
        const float *src = w->resid != NULL ? w->resid : w->m.grads; /* g_ef, or g (dense) */
        if (w->mirrored) { /* the shard's part of it to the host, once this iteration */
            gv_status_t status = wk_download(w, w->hg + ws->lo, src + ws->lo, ws->n, "g_ef");
            if (status != GV_OK)
                return status;
            src = w->hg;
        }
        enum gv_val_type vt = gv_job_dense_vt(w->job);
        size_t len = gv_sparse_val_len(ws->n, vt);
        gv_proto_seg_add(&m, GV_PROTO_SEG_DENSE, gv_ps_val_type_to_proto(vt), ws->n, len);
        m.nnz = ws->n;
        if (vt == GV_VAL_F16) { /* dense-fp16: halves, from the push buffer */
            gv_ps_f16_encode(src + ws->lo, ws->n, (uint16_t *)(void *)ws->ubuf);
            pl[0] = (struct gv_iov){ws->ubuf, len};
        } else {
            pl[0] = (struct gv_iov){(void *)(uintptr_t)(src + ws->lo), len};
        }
        npl = 1;
    } else {
        struct gv_sparse sp = {.idx = ws->sidx + ws->tail,
                               .val = ws->sval + ws->tail,
                               .cap = ws->cap - ws->tail,
                               .count = ws->cap - ws->tail,
                               .n = (uint32_t)ws->n};
        struct gv_sparse_layout info;
        enum gv_val_type vt = gv_job_sparse_vt(w->job);
        size_t ib = gv_sparse_idx_bound(ws->n, sp.count);
        gv_status_t status = gv_sparse_encode(&sp, vt, GV_IDX_AUTO, ws->ubuf, ib, ws->ubuf + ib,
                                              ws->ucap - ib, &info);
        if (status != GV_OK) {
            wk_fail(w, status, "cannot encode the push for %s", ws->name);
            return status;
        }
        m.u.push.index_enc = gv_ps_sparse_segs(&m, &info);
        pl[0] = (struct gv_iov){ws->ubuf, info.idx_len};
        pl[1] = (struct gv_iov){ws->ubuf + ib, info.val_len};
        npl = 2;
    }
    uint64_t b = 0;
    gv_status_t status = gv_ps_link_send(&ws->link, &m, pl, npl, &b);
    if (status != GV_OK) {
        wk_fail(w, status == GV_ERR_CLOSED ? GV_ERR_CLOSED : status, "cannot push to %s: %s",
                ws->name, gv_status_str(status));
        return status;
    }
    x->out->bytes_sent += b;
    x->out->payload_sent += pl[0].len + (npl > 1 ? pl[1].len : 0);
    x->out->nnz_sent += m.nnz;
    ws->pushed = true;
    gv_trace_span(w->cfg.trace, GV_PS_SPAN_PUSH, t, gv_trace_now(w->cfg.trace), w->iter,
                  w->dec.cf_send, pl[0].len + (npl > 1 ? pl[1].len : 0), (int32_t)s);
    return GV_OK;
}

/* Pushes every shard that no tensor below `below` contributes to. */
static gv_status_t step_push_ready(struct gv_worker *w, struct step_ctx *x, uint64_t below)
{
    while (x->next_push > 0 && w->srv[x->next_push - 1].lo >= below) {
        gv_status_t status = step_push(w, x, x->next_push - 1);
        if (status != GV_OK)
            return status;
        x->next_push--;
    }
    return GV_OK;
}

static gv_status_t step_compress(struct gv_worker *w, struct step_ctx *x)
{
    const struct gv_ps_decision *d = &w->dec;
    bool accordion = w->job->method == GV_JOB_ACCORDION;
    for (uint32_t u = w->n_units; u-- > 0;) {
        if (x->levels > 0) {
            /* Accordion's levels are per tensor, and so are its units */
            double cf = accordion && w->heavy[u] ? d->cf_candidate : d->theta_min;
            struct gv_cmp_req req = {.iter = w->iter,
                                     .tensor_id = u,
                                     .cf_min = cf,
                                     .cf_cand = x->levels == 2 ? d->cf_candidate : 0};
            /* the capacity is the bound of this call's CF, not of the buffer: a threshold
             * compressor (DGC, Redsync) falls back to exact top-k above the capacity, so the
             * fallback happens at the documented min(n, 2k) whatever the buffer's size */
            uint32_t n = (uint32_t)(w->unit_off[u + 1] - w->unit_off[u]);
            const char *name = w->n_units == 1 ? "model" : w->m.names[u];
            w->lmin[u].cap = gv_cmp_bound(w->cmp, n, req.cf_min);
            if (x->levels == 2)
                w->lcand[u].cap = gv_cmp_bound(w->cmp, n, req.cf_cand);
            struct gv_norms nm;
            gv_status_t status =
                gv_cmp_compress(w->cmp, w->ef[u], w->m.grads + w->unit_off[u], &req, &w->lmin[u],
                                x->levels == 2 ? &w->lcand[u] : NULL, &nm);
            if (status != GV_OK) {
                wk_fail(w, status, "compression of %s failed", name);
                return status;
            }
            gv_norms_add(&x->norms, &nm);
            if (!x->dense) {
                const struct gv_sparse *sent =
                    d->level == GV_ADAPT_LEVEL_CANDIDATE ? &w->lcand[u] : &w->lmin[u];
                if (w->mirrored) { /* the entries sent, to the host for staging and encoding */
                    if ((status = gv_cmp_sparse_to_host(w->cmp, sent, &w->hsent)) != GV_OK) {
                        wk_fail(w, status, "cannot copy %s's entries from the GPU", name);
                        return status;
                    }
                }
                step_stage(w, u, w->mirrored ? &w->hsent : sent);
                if ((status = gv_cmp_apply(w->cmp, w->ef[u], GV_SENT_SPARSE, sent)) != GV_OK)
                    return status;
            }
        }
        gv_status_t status = step_push_ready(w, x, w->unit_off[u]);
        if (status != GV_OK)
            return status;
        if (gv_tp_progress(w->tp, 0) < 0)
            return GV_ERR_IO;
        (void)wk_tick(w, gv_now_ns());
        if (w->fail_status != GV_OK)
            return w->fail_status;
    }
    return GV_OK;
}

/* ---------------------------------------------------------------- what arrives
 * The transport's callbacks: each header decoded once (gv_ps_rx); an update is applied here as
 * it arrives (the same optimizer step its server applied to its shard); every other message
 * goes to control.c. */

static gv_status_t wk_parse_prefix(const void *prefix, uint32_t *hdr_len_p, uint64_t *payload_len_p,
                                   void *user)
{
    struct gv_worker *w = user;
    return gv_proto_parse_prefix(prefix, &w->caps, hdr_len_p, payload_len_p);
}

static gv_status_t wk_update_header(struct gv_worker *w, struct wk_server *ws,
                                    const struct gv_proto_msg *m, struct gv_iov *dst, int *cnt)
{
    bool accordion = w->job->method == GV_JOB_ACCORDION;
    enum gv_val_type dense_vt = gv_job_dense_vt(w->job);
    bool dense;
    if (!ws->synced || !w->in_step ||
        gv_ps_update_check(m, w->iter, ws->s, ws->n, dense_vt, ws->ucap, accordion, w->m.n_tensors,
                           &dense) != GV_OK) {
        gv_log(GV_LOG_ERROR,
               "worker %u: %s sent a malformed update (iteration %" PRIu64
               ", shard %u, numel %" PRIu64 ", %u segments) during iteration %" PRIu64 "%s",
               w->rank, ws->name, m->iteration, m->shard, m->numel, m->n_segs, w->iter,
               w->in_step ? "" : " (between iterations)");
        return GV_ERR_PROTO;
    }
    if (!gv_ps_link_idle(&ws->link)) {
        ws->deferred = true;
        return GV_ERR_AGAIN; /* our push to this server is still leaving ubuf: wait */
    }
    ws->deferred = false;
    int k = 0;
    if (dense && dense_vt == GV_VAL_F32) {
        dst[k++] = (struct gv_iov){w->hg + ws->lo, 4 * ws->n};
    } else if (dense) { /* halves: decoded into the replica's host view when applied */
        dst[k++] = (struct gv_iov){ws->ubuf, (size_t)m->segs[0].bytes};
    } else {
        dst[k++] = (struct gv_iov){ws->ubuf, (size_t)m->segs[0].bytes};
        dst[k++] = (struct gv_iov){ws->ubuf + m->segs[0].bytes, (size_t)m->segs[1].bytes};
    }
    if (accordion)
        dst[k++] = (struct gv_iov){ws->heavy, w->m.n_tensors};
    *cnt = k;
    return GV_OK;
}

static gv_status_t wk_on_header(struct gv_conn *c, const void *msg, size_t msg_len,
                                uint64_t payload_len, struct gv_iov *dst, int *dst_cnt, void *user)
{
    struct gv_worker *w = user;
    struct wk_server *ws = c->user;
    const struct gv_proto_msg *m;
    gv_status_t status = gv_ps_rx_header(&ws->rx, msg, msg_len, &w->caps, &w->arena, &m);
    if (status != GV_OK)
        return status;
    if (m->type == GV_PROTO_MSG_UPDATE)
        return wk_update_header(w, ws, m, dst, dst_cnt);
    return wk_control_header(w, ws, m, payload_len, dst, dst_cnt);
}

/* The optimizer step on the shard, with the averaged gradient g (host): on the host replica,
 * fused with the checksum when `verify` (its blocks' sum in *ck_sum), or uploaded to the GPU and
 * stepped there (the same bits; the checksum is then taken by the caller on a copy). */
static gv_status_t step_optim(struct gv_worker *w, struct wk_server *ws, float lr, const float *g,
                              bool verify, uint64_t *ck_sum)
{
    const struct gv_optim_cfg *oc = &w->job->optim;
    if (!w->mirrored) {
        *ck_sum = gv_ps_step_range(oc, lr, w->hp + ws->lo, w->hv + ws->lo, g, 0, ws->n, verify);
        return GV_OK;
    }
    float *dg = w->m.grads + ws->lo;
    gv_status_t status = wk_upload(w, dg, g, ws->n, "the update");
    if (status == GV_OK)
        status = gv_optim_apply(w->m.be, oc, lr, w->m.params + ws->lo, w->m.momentum + ws->lo, dg,
                                ws->n);
    if (status != GV_OK)
        wk_fail(w, status, "the optimizer step on the GPU failed (%s)", gv_status_str(status));
    return status;
}

static void step_apply_update(struct gv_worker *w, struct wk_server *ws,
                              const struct gv_proto_msg *m)
{
    float *g = w->hg + ws->lo;
    bool accordion = w->job->method == GV_JOB_ACCORDION;
    if (ws->got_update) {
        wk_fail(w, GV_ERR_PROTO, "%s sent two updates for iteration %" PRIu64, ws->name, w->iter);
        return;
    }
    uint32_t nseg = m->n_segs - (accordion ? 1 : 0);
    if (nseg == 2) {
        memset(g, 0, 4 * ws->n);
        if (gv_ps_sparse_add(m, ws->ubuf, (uint32_t)ws->n, g) != GV_OK) {
            wk_fail(w, GV_ERR_PROTO, "%s sent an update that does not decode", ws->name);
            return;
        }
    } else if (m->segs[0].enc == GV_PROTO_ENC_F16) {
        gv_ps_f16_decode((const uint16_t *)(const void *)ws->ubuf, ws->n, g);
    }
    gv_ps_decision_from_proto(&m->u.update.decision, &ws->dec);
    ws->dec_iter = m->iteration + 1;
    ws->resync = ws->dec.resync;
    ws->got_update = true;
    float lr = (float)ws->dec.lr;
    bool verify = !ws->resync && w->cfg.verify_every > 0 && w->iter % w->cfg.verify_every == 0;
    uint64_t ck_sum = 0;
    if (step_optim(w, ws, lr, g, verify, &ck_sum) != GV_OK)
        return;
    if (ws->resync) {
        ws->model_left = 2 * ws->n;
        ws->model_checksum = 0;
        w->resyncs++;
        return;
    }
    if (verify) {
        /* a GPU replica is checked on a copy of its shard */
        if (w->mirrored && wk_download(w, w->hp + ws->lo, w->m.params + ws->lo, ws->n,
                                       "the shard to checksum") != GV_OK)
            return;
        w->checks++;
        uint64_t ck =
            w->mirrored ? gv_ps_checksum(w->hp + ws->lo, ws->n) : gv_ps_cksum_final(ck_sum, ws->n);
        if (ck != m->u.update.model_checksum) {
            w->mismatches++;
            gv_log(GV_LOG_WARN,
                   "worker %u: shard %u drifted from %s at iteration %" PRIu64
                   " (checksum %016" PRIx64 ", server %016" PRIx64 "): asking for a full model",
                   w->rank, ws->s, ws->name, w->iter, ck, m->u.update.model_checksum);
            struct gv_proto_msg r;
            gv_ps_link_msg(&ws->link, &r, GV_PROTO_MSG_MODEL, w->iter);
            (void)gv_ps_link_send(&ws->link, &r, NULL, 0, NULL);
        }
    }
}

static void wk_on_msg(struct gv_conn *c, const void *msg, size_t msg_len, void *user)
{
    struct gv_worker *w = user;
    struct wk_server *ws = c->user;
    const struct gv_proto_msg *m;
    if (gv_ps_rx_msg(&ws->rx, msg, msg_len, &w->caps, &w->arena, &m) != GV_OK) {
        wk_fail(w, GV_ERR_PROTO, "%s sent an undecodable header", ws->name);
        gv_tp_conn_close(c);
        return;
    }
    uint64_t bytes = msg_len + m->payload_len;
    ws->link.bytes_recv += bytes;
    wk_seen(w, ws);
    bool joined = ws->hs.state == GV_PS_CLIENT_WELCOMED;
    if (joined && w->in_step && (m->type == GV_PROTO_MSG_UPDATE || m->type == GV_PROTO_MSG_MODEL)) {
        w->it_recv += bytes;
        w->it_payload_recv += m->payload_len;
    }
    if (joined && m->type == GV_PROTO_MSG_UPDATE) {
        uint64_t t = gv_trace_now(w->cfg.trace);
        step_apply_update(w, ws, m);
        gv_trace_span(w->cfg.trace, GV_PS_SPAN_APPLY, t, gv_trace_now(w->cfg.trace), w->iter,
                      w->dec.cf_send, m->payload_len, (int32_t)ws->s);
    } else
        wk_control_msg(w, ws, m);
}

static void wk_on_close(struct gv_conn *c, gv_status_t reason, void *user)
{
    (void)user;
    struct wk_server *ws = c->user;
    ws->closed = true;
    ws->close_reason = reason == GV_OK ? GV_ERR_CLOSED : reason;
    ws->link.c = NULL;
}

void wk_link_idle(struct gv_ps_link *l, void *arg)
{
    (void)arg;
    /* an update deferred while our push was leaving may be read now */
    if (l->c != NULL)
        (void)gv_tp_conn_resume_recv(l->c);
}

struct gv_tp_handler wk_handler(void)
{
    return (struct gv_tp_handler){.prefix_len = GV_PROTO_PREFIX_LEN,
                                  .parse_prefix = wk_parse_prefix,
                                  .on_header = wk_on_header,
                                  .on_msg = wk_on_msg,
                                  .on_close = wk_on_close};
}

/* Waits for every server's update (and resync model); GV_OK, or the job's end (stop). */
static gv_status_t step_wait(struct gv_worker *w, bool *stop)
{
    for (;;) {
        bool all = true;
        for (uint32_t s = 0; s < w->S; s++) {
            struct wk_server *ws = &w->srv[s];
            bool done = ws->got_update && ws->model_left == 0;
            if (!done && ws->got_bye) {
                *stop = true;
                return GV_OK;
            }
            if (!done) {
                gv_status_t status = wk_server_status(w, ws);
                if (status != GV_OK)
                    return status;
            }
            all &= done;
        }
        if (w->fail_status != GV_OK)
            return w->fail_status;
        if (all)
            return GV_OK;
        int ms = wk_tick(w, gv_now_ns());
        if (w->fail_status != GV_OK)
            return w->fail_status;
        if (gv_tp_progress(w->tp, ms) < 0) {
            wk_fail(w, GV_ERR_IO, "transport failure");
            return GV_ERR_IO;
        }
    }
}

/* Adopts the decision for the next iteration: every server must have sent the same. */
static gv_status_t step_adopt(struct gv_worker *w)
{
    const struct wk_server *s0 = &w->srv[0];
    for (uint32_t s = 1; s < w->S; s++) {
        const struct wk_server *ws = &w->srv[s];
        if (!gv_ps_decision_equal(&ws->dec, &s0->dec) ||
            memcmp(ws->heavy, s0->heavy, w->m.n_tensors) != 0) {
            wk_fail(w, GV_ERR_PROTO,
                    "servers 0 and %u sent different decisions for iteration "
                    "%" PRIu64 " (CF %g vs %g, level %s vs %s)",
                    s, w->iter + 1, s0->dec.cf_send, ws->dec.cf_send,
                    gv_adapt_level_str(s0->dec.level), gv_adapt_level_str(ws->dec.level));
            return GV_ERR_PROTO;
        }
    }
    w->dec = s0->dec;
    memcpy(w->heavy, s0->heavy, w->m.n_tensors);
    return GV_OK;
}

/* Accordion, worker 0: the averaged gradient accumulated per tensor over the epoch. */
static void step_accordion(struct gv_worker *w, bool epoch_end)
{
    if (w->epoch_acc == NULL)
        return;
    w->norms_pending = false; /* they left with this iteration's push */
    for (size_t i = 0; i < w->m.numel; i++)
        w->epoch_acc[i] += w->hg[i]; /* the averaged gradient, on the host */
    if (!epoch_end)
        return;
    for (uint32_t t = 0; t < w->m.n_tensors; t++) {
        double s = 0;
        for (size_t i = w->off[t]; i < w->off[t + 1]; i++)
            s += (double)w->epoch_acc[i] * (double)w->epoch_acc[i];
        w->layer_norms[t] = sqrt(s);
    }
    memset(w->epoch_acc, 0, w->m.numel * sizeof(float));
    w->norms_pending = true;
}

static uint64_t step_wire(const struct gv_worker *w, bool sent)
{
    uint64_t b = 0;
    for (uint32_t s = 0; s < w->S; s++) {
        const struct gv_conn *c = w->srv[s].link.c;
        if (c != NULL)
            b += sent ? c->bytes_sent : c->bytes_recv;
    }
    return b;
}

static gv_status_t step_run(struct gv_worker *w, const struct gv_worker_step_in *in,
                            struct gv_worker_step_out *out);

gv_status_t gv_worker_step(struct gv_worker *w, const struct gv_worker_step_in *in,
                           struct gv_worker_step_out *out)
{
    pthread_mutex_lock(&w->mu);
    w->busy = true;
    gv_status_t status = step_run(w, in, out);
    w->busy = false;
    bool ckpt = status == GV_OK && !out->stop && wk_ckpt_due(w);
    pthread_mutex_unlock(&w->mu);
    if (ckpt)
        wk_ckpt_write(w);
    w->t_step_end_ns = gv_trace_now(w->cfg.trace);
    return status;
}

static gv_status_t step_run(struct gv_worker *w, const struct gv_worker_step_in *in,
                            struct gv_worker_step_out *out)
{
    memset(out, 0, sizeof(*out));
    if (w->fail_status != GV_OK)
        return w->fail_status;
    struct step_ctx x = {.in = in,
                         .out = out,
                         .levels = wk_levels(w, &w->dec),
                         .dense = w->dec.level == GV_ADAPT_LEVEL_DENSE,
                         .t0 = gv_now_ns(),
                         .next_push = w->S};
    if (w->t_step_end_ns != 0) /* the caller's time since the last step */
        gv_trace_span(w->cfg.trace, GV_PS_SPAN_COMPUTE, w->t_step_end_ns, x.t0, w->iter, 0, 0, -1);
    out->iter = w->iter;
    out->level = w->dec.level;
    out->cf = w->dec.cf_send;
    out->theta_min = w->dec.theta_min;
    out->cf_candidate = w->dec.cf_candidate;
    uint64_t wire_s0 = step_wire(w, true), wire_r0 = step_wire(w, false);
    for (uint32_t s = 0; s < w->S; s++) {
        struct wk_server *ws = &w->srv[s];
        ws->tail = ws->cap;
        ws->pushed = ws->got_update = ws->resync = false;
    }
    w->it_recv = w->it_payload_recv = 0;
    w->in_step = true;
    gv_status_t status = step_compress(w, &x);
    if (status == GV_OK)
        status = step_push_ready(w, &x, 0);
    uint64_t t1 = gv_now_ns();
    out->compress_s = (double)(t1 - x.t0) * 1e-9;
    gv_trace_span(w->cfg.trace, GV_PS_SPAN_COMPRESS, x.t0, t1, w->iter, w->dec.cf_send,
                  out->payload_sent, -1);
    bool stop = false;
    if (status == GV_OK)
        status = step_wait(w, &stop);
    w->in_step = false;
    uint64_t t2 = gv_now_ns();
    out->comm_s = (double)(t2 - t1) * 1e-9;
    gv_trace_span(w->cfg.trace, GV_PS_SPAN_WAIT, t1, t2, w->iter, w->dec.cf_send,
                  w->it_payload_recv, -1);
    if (status != GV_OK)
        return w->fail_status != GV_OK ? w->fail_status : status;
    if (stop) {
        out->stop = true;
        return GV_OK;
    }
    if (x.dense && w->cmp != NULL) /* g_ef has left (the updates came back): r = 0 */
        for (uint32_t u = 0; u < w->n_units; u++)
            if ((status = gv_cmp_apply(w->cmp, w->ef[u], GV_SENT_DENSE, NULL)) != GV_OK)
                return status;
    out->lr = (float)w->srv[0].dec.lr;
    for (uint32_t s = 0; s < w->S; s++)
        out->resynced |= w->srv[s].resync;
    if ((status = step_adopt(w)) != GV_OK)
        return status;
    step_accordion(w, in->epoch_end);
    out->bytes_recv = w->it_recv;
    out->payload_recv = w->it_payload_recv;
    out->wire_sent = step_wire(w, true) - wire_s0;
    out->wire_recv = step_wire(w, false) - wire_r0;
    gv_ps_bytes_add(&w->bytes, out->cf, out->bytes_sent, out->bytes_recv, out->payload_sent);
    w->steps++;
    w->iter++;
    return GV_OK;
}
