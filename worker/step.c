/* step.c: one iteration of the worker runtime, out and back. Tensors are compressed from the last
 * to the first, so the shards complete from the last server to server 0; each server's push leaves
 * as soon as its shard is complete, while the next tensors are compressed (server 0's push, the
 * last one, carries the iteration's statistics for the controller). Then every server's update
 * is applied as it arrives: the same optimizer step the server applied to its shard. */
#include "wk.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

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

static void step_stats(struct gv_worker *w, struct gv_proto_iter_stats *st)
{
    const struct wk_step *x = &w->st;
    memset(st, 0, sizeof(*st));
    st->g_ef_sq = x->norms.ef;
    st->g_min_sq = x->norms.min;
    st->g_c_sq = x->norms.cand;
    st->compute_s = x->in.compute_s;
    st->pause_s = x->in.pause_s;
    st->compress_s = (double)(x->work_ns + gv_now_ns() - x->t_call) * 1e-9;
    st->samples = x->in.samples;
    st->loss = x->in.loss;
    st->lr = x->in.lr;
    if (w->ck_pend_iter == w->iter) { /* its part of this iteration's checkpoint */
        st->ckpt_iter = w->iter;
        st->ckpt_status = w->ck_pend_status;
    }
    if (w->norms_pending) {
        st->n_layer_norms = w->m.n_tensors;
        st->layer_norms = w->layer_norms;
    }
}

static void step_push_msg(struct gv_worker *w, struct wk_server *ws, struct gv_proto_msg *m)
{
    gv_ps_link_msg(&ws->link, m, GV_PROTO_MSG_PUSH, w->iter);
    m->dtype = GV_PROTO_DTYPE_F32;
    m->numel = ws->n;
    m->cf = w->dec.cf_send;
    m->u.push.level = gv_ps_level_to_proto(w->dec.level);
}

/* A push that could not be sent: a server that dropped this worker (declared it dead while it
 * was stopped, say) closed the connection, and what it said first, or the close itself, is the
 * reason to report, not the broken pipe. */
static gv_status_t step_push_failed(struct gv_worker *w, struct wk_server *ws, gv_status_t status)
{
    (void)gv_tp_progress(w->tp, 0);
    if (wk_server_status(w, ws) == GV_OK)
        wk_fail(w, status == GV_ERR_CLOSED ? GV_ERR_CLOSED : status, "cannot push to %s: %s",
                ws->name, gv_status_str(status));
    return w->fail_status;
}

/* A dense f32 push in the round's pieces (src: the shard's first element), from the last piece
 * to the first (the order backward produces them in), those starting at or above global
 * element `below` not pushed yet; server 0's first piece, the last to leave, carries the
 * statistics, and only with `final`. */
static gv_status_t step_push_pieces(struct gv_worker *w, struct wk_server *ws, const float *src,
                                    uint64_t below, bool final)
{
    struct gv_worker_step_out *out = &w->st.out;
    while (ws->pc_left > 0) {
        uint32_t k = ws->pc_left - 1;
        uint64_t a = gv_ps_piece_lo(&ws->pc, k), len = gv_ps_piece_hi(&ws->pc, k) - a;
        bool stats = ws->s == 0 && k == 0;
        if (ws->lo + a < below || (stats && !final))
            break;
        struct gv_proto_msg m;
        step_push_msg(w, ws, &m);
        m.numel = len;
        m.offset = a;
        m.nnz = len;
        if (stats)
            step_stats(w, &m.u.push.stats);
        gv_proto_seg_add(&m, GV_PROTO_SEG_DENSE, GV_PROTO_ENC_F32, len, 4 * len);
        struct gv_iov pl = {(void *)(uintptr_t)(src + a), 4 * len};
        uint64_t b = 0;
        gv_status_t status = gv_ps_link_send(&ws->link, &m, &pl, 1, &b);
        if (status != GV_OK)
            return step_push_failed(w, ws, status);
        ws->piece_seq[k] = ws->link.n_sent;
        ws->pc_left = k;
        w->pushes++;
        w->pushes_early += w->st.early;
        out->bytes_sent += b;
        out->payload_sent += pl.len;
        out->nnz_sent += len;
    }
    return GV_OK;
}

/* Server s's push, or (a dense round in pieces) its pieces at or above global element
 * `below`; *whole: all of it has left. */
static gv_status_t step_push(struct gv_worker *w, uint32_t s, uint64_t below, bool final,
                             bool *whole)
{
    struct wk_step *x = &w->st;
    struct gv_worker_step_out *out = &x->out;
    struct wk_server *ws = &w->srv[s];
    *whole = false;
    bool pieced =
        x->dense && gv_ps_dense_vt(w->job, &w->dec) == GV_VAL_F32 && gv_job_pieced(w->job);
    /* a shard in one message leaves whole, once complete; server 0's with the statistics */
    if (!pieced && (ws->lo < below || (s == 0 && !final)))
        return GV_OK;
    uint64_t t = gv_trace_now(w->cfg.trace);
    struct gv_proto_msg m;
    step_push_msg(w, ws, &m);
    if (s == 0 && !pieced)
        step_stats(w, &m.u.push.stats);
    /* --optimizer caller (never in pieces): the servers compare every worker's parameters (as
     * the caller's optimizer left them) by their checksum */
    if (!pieced && w->caller_optim && w->cfg.verify_every > 0 && w->iter % w->cfg.verify_every == 0)
        m.u.push.replica_checksum = gv_ps_checksum(w->hp + ws->lo, ws->n);
    struct gv_iov pl[2];
    int npl;
    if (x->dense) {
        /* g_ef, or g (dense, or nothing compressed: no residual owed) */
        const float *src = w->resid != NULL && x->levels > 0 ? w->resid : w->m.grads;
        if (w->mirrored) { /* the shard's part of it to the host, once this iteration (no
                              overlap on a GPU replica: the whole shard is ready) */
            if (ws->pc_left == ws->pc.np) {
                gv_status_t status = wk_download(w, w->hg + ws->lo, src + ws->lo, ws->n, "g_ef");
                if (status != GV_OK)
                    return status;
            }
            src = w->hg;
        }
        enum gv_val_type vt = gv_ps_dense_vt(w->job, &w->dec);
        if (pieced) {
            uint64_t before = out->payload_sent;
            gv_status_t status = step_push_pieces(w, ws, src + ws->lo, below, final);
            if (status != GV_OK)
                return status;
            gv_trace_span(w->cfg.trace, GV_PS_SPAN_PUSH, t, gv_trace_now(w->cfg.trace), w->iter,
                          w->dec.cf_send, out->payload_sent - before, (int32_t)s);
            ws->pushed = *whole = ws->pc_left == 0;
            return GV_OK;
        }
        size_t len = gv_sparse_val_len(ws->n, vt);
        gv_proto_seg_add(&m, GV_PROTO_SEG_DENSE, gv_ps_val_type_to_proto(vt), ws->n, len);
        m.nnz = ws->n;
        if (vt == GV_VAL_F16) { /* dense-fp16 (or auto's fp16 arm): halves, from the push buffer */
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
    if (status != GV_OK)
        return step_push_failed(w, ws, status);
    ws->piece_seq[0] = ws->link.n_sent;
    w->pushes++;
    w->pushes_early += x->early;
    out->bytes_sent += b;
    out->payload_sent += pl[0].len + (npl > 1 ? pl[1].len : 0);
    out->nnz_sent += m.nnz;
    ws->pushed = *whole = true;
    gv_trace_span(w->cfg.trace, GV_PS_SPAN_PUSH, t, gv_trace_now(w->cfg.trace), w->iter,
                  w->dec.cf_send, pl[0].len + (npl > 1 ? pl[1].len : 0), (int32_t)s);
    return GV_OK;
}

/* Pushes what no gradient below global element `below` contributes to, from the last server
 * down: whole shards, or a dense round's pieces; server 0's last push (the statistics) only
 * with `final`. */
static gv_status_t step_push_ready(struct gv_worker *w, uint64_t below, bool final)
{
    struct wk_step *x = &w->st;
    while (x->next_push > 0) {
        bool whole = false;
        gv_status_t status = step_push(w, x->next_push - 1, below, final, &whole);
        if (status != GV_OK)
            return status;
        if (!whole)
            break;
        x->next_push--;
    }
    return GV_OK;
}

/* --local-momentum: the gradient of elements [lo, x->mom_lo), final now, becomes this worker's
 * velocity, u = momentum * u + (g + weight_decay * p), and what is compressed and pushed is u
 * (the replicas step with job->step_optim, without momentum). Dense rounds average the
 * workers' velocities, which is the velocity of the averaged gradient: the same steps as
 * momentum on the servers. A GPU replica (mirrored) keeps the velocity in its backend's memory
 * and updates it there, with the same bits. */
static gv_status_t step_velocity(struct gv_worker *w, uint64_t lo)
{
    struct wk_step *x = &w->st;
    if (w->lmom == NULL || lo >= x->mom_lo)
        return GV_OK;
    if (!w->mirrored) {
        gv_optim_velocity_host(&w->job->optim, w->m.params + lo, w->lmom + lo, w->m.grads + lo,
                               x->mom_lo - lo);
    } else {
        gv_status_t status = gv_optim_velocity(w->m.be, &w->job->optim, w->m.params + lo,
                                               w->lmom + lo, w->m.grads + lo, x->mom_lo - lo);
        if (status != GV_OK) {
            gv_log(GV_LOG_ERROR, "worker %u: the velocity update on the %s backend failed (%s)",
                   w->rank, gv_nn_backend_name(w->m.be), gv_status_str(status));
            return status;
        }
    }
    x->mom_lo = lo;
    return GV_OK;
}

/* Compresses the units whose gradients are final (those starting at or above `lo`), from the
 * last, pushing what is complete as it goes. */
static gv_status_t step_advance(struct gv_worker *w, uint64_t lo, bool final)
{
    struct wk_step *x = &w->st;
    const struct gv_ps_decision *d = &w->dec;
    bool accordion = w->job->method == GV_JOB_ACCORDION;
    gv_status_t vstatus = step_velocity(w, lo);
    if (vstatus != GV_OK)
        return vstatus;
    for (; x->next_unit > 0 && w->unit_off[x->next_unit - 1] >= lo; x->next_unit--) {
        uint32_t u = x->next_unit - 1;
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
            const char *name = w->n_units == 1 ? "model" : w->tnames[u];
            w->lmin[u].cap = gv_cmp_bound(w->cmp, n, req.cf_min);
            if (x->levels == 2)
                w->lcand[u].cap = gv_cmp_bound(w->cmp, n, req.cf_cand);
            struct gv_norms nm;
            w->resid_zero = false; /* it holds g_ef until a dense iteration's apply */
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
        gv_status_t status = step_push_ready(w, w->unit_off[u], final);
        if (status != GV_OK)
            return status;
        if (gv_tp_progress(w->tp, 0) < 0)
            return GV_ERR_IO;
        (void)wk_tick(w, gv_now_ns());
        if (w->fail_status != GV_OK)
            return w->fail_status;
    }
    /* what is final: from lo without compression (any element is a boundary), else from the
     * last unit compressed (server 0's last push with `final`, however early the rest left) */
    uint64_t below = x->levels == 0              ? lo
                     : x->next_unit < w->n_units ? w->unit_off[x->next_unit]
                                                 : w->m.numel;
    gv_status_t status = step_push_ready(w, below, final);
    if (status == GV_OK && gv_tp_progress(w->tp, 0) < 0)
        status = GV_ERR_IO;
    return status;
}

/* ---------------------------------------------------------------- what arrives
 * The transport's callbacks: each header decoded once (gv_ps_rx); an update is applied here as
 * it arrives (the same optimizer step its server applied to its shard); every other message
 * goes to control.c. */

static gv_status_t wk_parse_prefix(const void *prefix, uint32_t *hdr_len_p, uint64_t *payload_len_p,
                                   void *user)
{
    struct gv_worker *w = user;
    gv_status_t status = gv_proto_prefix_check(prefix, &w->caps, hdr_len_p, payload_len_p,
                                               w->rx_why, sizeof(w->rx_why));
    if (status != GV_OK)
        gv_log(GV_LOG_WARN, "worker %u: refused a frame from a server: %s", w->rank, w->rx_why);
    return status;
}

/* The pieces this round's update comes in: a dense f32 round's (ws->pc), else one, the shard. */
static struct gv_ps_pieces step_pieces(const struct gv_worker *w, const struct wk_server *ws)
{
    if (w->dec.level == GV_ADAPT_LEVEL_DENSE && gv_ps_dense_vt(w->job, &w->dec) == GV_VAL_F32)
        return ws->pc; /* one piece unless gv_job_pieced */
    return (struct gv_ps_pieces){.n = ws->n, .base = ws->n, .np = 1};
}

/* An update's piece: one of the round's pieces not applied yet, the last one (with the
 * decision: its level is not NONE) after all the others. GV_OK with its index in *k_p. */
static gv_status_t step_piece_check(const struct gv_worker *w, const struct wk_server *ws,
                                    const struct gv_proto_msg *m, uint32_t *k_p)
{
    struct gv_ps_pieces lay = step_pieces(w, ws);
    bool final = m->u.update.decision.level != GV_PROTO_LEVEL_NONE;
    uint64_t k = lay.base > 0 ? m->offset / lay.base : 0;
    if (k >= lay.np || m->offset != gv_ps_piece_lo(&lay, (uint32_t)k) ||
        m->numel != gv_ps_piece_hi(&lay, (uint32_t)k) - m->offset || (ws->have >> k) & 1u ||
        final != (ws->pieces_got + 1 == lay.np))
        return GV_ERR_PROTO;
    *k_p = (uint32_t)k;
    return GV_OK;
}

static gv_status_t wk_update_header(struct gv_worker *w, struct wk_server *ws,
                                    const struct gv_proto_msg *m, struct gv_iov *dst, int *cnt)
{
    bool accordion = w->job->method == GV_JOB_ACCORDION;
    enum gv_val_type dense_vt = gv_ps_dense_vt(w->job, &w->dec); /* this iteration's decision */
    bool dense, final = m->u.update.decision.level != GV_PROTO_LEVEL_NONE;
    uint32_t pk = 0;
    if (!ws->synced || w->st.phase == WK_IDLE || step_piece_check(w, ws, m, &pk) != GV_OK ||
        gv_ps_update_check(m, w->iter, ws->s, m->numel, dense_vt, ws->ucap, accordion && final,
                           w->m.n_tensors, &dense) != GV_OK) {
        gv_log(GV_LOG_ERROR,
               "worker %u: %s sent a malformed update (iteration %" PRIu64
               ", shard %u, offset %" PRIu64 ", numel %" PRIu64 ", %u segments) during "
               "iteration %" PRIu64 "%s",
               w->rank, ws->name, m->iteration, m->shard, m->offset, m->numel, m->n_segs, w->iter,
               w->st.phase != WK_IDLE ? "" : " (between iterations)");
        return GV_ERR_PROTO;
    }
    if (ws->link.n_done < ws->piece_seq[pk]) {
        ws->deferred = true;
        return GV_ERR_AGAIN; /* our push of that piece is still being read from where it lands */
    }
    ws->deferred = false;
    int k = 0;
    if (dense && dense_vt == GV_VAL_F32) {
        dst[k++] = (struct gv_iov){w->hg + ws->lo + m->offset, 4 * m->numel};
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

/* The optimizer step on elements [a, b) of the shard, with the averaged gradient g (host, the
 * shard's first element): on the host replica, fused with the checksum when `verify` (the
 * blocks' sum added to ws->ck_sum), or uploaded to the GPU and stepped there (the same bits; the
 * checksum is then taken on a copy of the whole shard at the end). */
static gv_status_t step_optim(struct gv_worker *w, struct wk_server *ws, float lr, const float *g,
                              uint64_t a, uint64_t b, bool verify)
{
    const struct gv_optim_cfg *oc = &w->job->step_optim;
    if (!w->mirrored) {
        ws->ck_sum += gv_ps_step_range(oc, lr, w->hp + ws->lo, w->hv + ws->lo, g, a, b, verify);
        return GV_OK;
    }
    float *dg = w->m.grads + ws->lo;
    gv_status_t status = wk_upload(w, dg + a, g + a, b - a, "the update");
    if (status == GV_OK)
        status = gv_optim_apply(w->m.be, oc, lr, w->m.params + ws->lo + a,
                                w->m.momentum + ws->lo + a, dg + a, b - a);
    if (status != GV_OK)
        wk_fail(w, status, "the optimizer step on the GPU failed (%s)", gv_status_str(status));
    return status;
}

/* The drift check once the shard's update is applied (a mismatch asks for a full model). */
static void step_verify(struct gv_worker *w, struct wk_server *ws, uint64_t want)
{
    /* a GPU replica is checked on a copy of its shard */
    if (w->mirrored && wk_download(w, w->hp + ws->lo, w->m.params + ws->lo, ws->n,
                                   "the shard to checksum") != GV_OK)
        return;
    w->checks++;
    uint64_t ck =
        w->mirrored ? gv_ps_checksum(w->hp + ws->lo, ws->n) : gv_ps_cksum_final(ws->ck_sum, ws->n);
    if (ck == want)
        return;
    w->mismatches++;
    gv_log(GV_LOG_WARN,
           "worker %u: shard %u drifted from %s at iteration %" PRIu64 " (checksum %016" PRIx64
           ", server %016" PRIx64 "): asking for a full model",
           w->rank, ws->s, ws->name, w->iter, ck, want);
    struct gv_proto_msg r;
    gv_ps_link_msg(&ws->link, &r, GV_PROTO_MSG_MODEL, w->iter);
    (void)gv_ps_link_send(&ws->link, &r, NULL, 0, NULL);
}

/* An update, or a piece of one, arrived: decoded where the shard's gradient is, the server's
 * step applied to its range; the last piece brings the next decision and the checksum. */
static void step_apply_update(struct gv_worker *w, struct wk_server *ws,
                              const struct gv_proto_msg *m)
{
    float *g = w->hg + ws->lo;
    bool accordion = w->job->method == GV_JOB_ACCORDION;
    bool final = m->u.update.decision.level != GV_PROTO_LEVEL_NONE;
    uint32_t k;
    if (ws->got_update || step_piece_check(w, ws, m, &k) != GV_OK) {
        wk_fail(w, GV_ERR_PROTO,
                "%s sent an unexpected update (offset %" PRIu64 ", %" PRIu64
                " elements) for iteration %" PRIu64,
                ws->name, m->offset, m->numel, w->iter);
        return;
    }
    uint64_t a = m->offset, len = m->numel;
    uint32_t nseg = m->n_segs - (accordion && final ? 1 : 0);
    if (nseg == 2) {
        memset(g + a, 0, 4 * len);
        if (gv_ps_sparse_add(m, ws->ubuf, (uint32_t)len, g + a) != GV_OK) {
            wk_fail(w, GV_ERR_PROTO, "%s sent an update that does not decode", ws->name);
            return;
        }
    } else if (m->segs[0].enc == GV_PROTO_ENC_F16) {
        gv_ps_f16_decode((const uint16_t *)(const void *)ws->ubuf, len, g + a);
    }
    ws->have |= 1u << k;
    ws->pieces_got++;
    bool verify = w->cfg.verify_every > 0 && w->iter % w->cfg.verify_every == 0;
    /* --optimizer caller: no step here (the caller's optimizer steps with g; one piece) */
    if (!w->caller_optim &&
        step_optim(w, ws, (float)m->u.update.decision.lr, g, a, a + len, verify) != GV_OK)
        return;
    if (!final)
        return;
    gv_ps_decision_from_proto(&m->u.update.decision, &ws->dec);
    ws->dec_iter = m->iteration + 1;
    ws->resync = ws->dec.resync;
    ws->got_update = true;
    if (w->caller_optim) {
        /* the checksum is of g itself */
        if (verify) {
            w->checks++;
            uint64_t ck = gv_ps_checksum(g, ws->n);
            if (ck != m->u.update.model_checksum) {
                w->mismatches++;
                wk_fail(w, GV_ERR_PROTO,
                        "the averaged gradient from %s at iteration %" PRIu64 " does not match "
                        "its checksum (%016" PRIx64 ", server %016" PRIx64 ")",
                        ws->name, w->iter, ck, m->u.update.model_checksum);
            }
        }
        return;
    }
    if (ws->resync) {
        ws->model_left = 2 * ws->n;
        ws->model_checksum = 0;
        w->resyncs++;
    } else if (verify) {
        step_verify(w, ws, m->u.update.model_checksum);
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
    if (joined && w->st.phase != WK_IDLE &&
        (m->type == GV_PROTO_MSG_UPDATE || m->type == GV_PROTO_MSG_MODEL)) {
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
    struct gv_worker *w = user;
    struct wk_server *ws = c->user;
    ws->closed = true;
    ws->close_reason = reason == GV_OK ? GV_ERR_CLOSED : reason;
    ws->close_unsent = c->bytes_sent == 0;
    ws->close_unanswered = c->bytes_recv == 0;
    if ((reason == GV_ERR_PROTO || reason == GV_ERR_VERSION) && w->rx_why[0] != '\0')
        snprintf(ws->close_why, sizeof(ws->close_why), "%s", w->rx_why);
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

/* Opens the iteration (once): every server's round state reset, the decision's levels taken. */
static void step_open(struct gv_worker *w)
{
    struct wk_step *x = &w->st;
    if (x->phase != WK_IDLE)
        return;
    *x = (struct wk_step){.phase = WK_OPEN,
                          .levels = wk_levels(w, &w->dec),
                          .dense = w->dec.level == GV_ADAPT_LEVEL_DENSE,
                          .t0 = gv_now_ns(),
                          .next_push = w->S,
                          .mom_lo = w->m.numel,
                          .next_unit = w->cmp != NULL ? w->n_units : 0};
    if (w->t_step_end_ns != 0) /* the caller's time since the last step */
        gv_trace_span(w->cfg.trace, GV_PS_SPAN_COMPUTE, w->t_step_end_ns, x->t0, w->iter, 0, 0, -1);
    struct gv_worker_step_out *out = &x->out;
    out->iter = w->iter;
    out->level = w->dec.level;
    out->cf = w->dec.cf_send;
    out->theta_min = w->dec.theta_min;
    out->cf_candidate = w->dec.cf_candidate;
    x->wire_s0 = step_wire(w, true);
    x->wire_r0 = step_wire(w, false);
    for (uint32_t s = 0; s < w->S; s++) {
        struct wk_server *ws = &w->srv[s];
        ws->tail = ws->cap;
        ws->pushed = ws->got_update = ws->resync = false;
        ws->pieces_got = ws->have = 0;
        ws->pc_left = ws->pc.np;
        ws->ck_sum = 0;
        memset(ws->piece_seq, 0, sizeof(ws->piece_seq));
    }
    w->it_recv = w->it_payload_recv = 0;
}

/* Compresses what is left and pushes every server's rest; the iteration is then in flight. */
static gv_status_t step_push_all(struct gv_worker *w, const struct gv_worker_step_in *in)
{
    if (w->fail_status != GV_OK)
        return w->fail_status;
    if (w->st.phase == WK_FLIGHT) {
        gv_log(GV_LOG_ERROR, "worker %u: a push before the last iteration was finished", w->rank);
        return GV_ERR_INVAL;
    }
    step_open(w); /* the compute span ends where it opens: before this call's first span */
    uint64_t t = gv_now_ns();
    struct wk_step *x = &w->st;
    x->in = *in;
    x->t_call = t;
    gv_status_t status = step_advance(w, 0, true);
    x->t_pushed = gv_now_ns();
    x->work_ns += x->t_pushed - t;
    x->out.compress_s = (double)x->work_ns * 1e-9;
    gv_trace_span(w->cfg.trace, GV_PS_SPAN_COMPRESS, t, x->t_pushed, w->iter, w->dec.cf_send,
                  x->out.payload_sent, -1);
    if (status == GV_OK && x->next_push > 0) { /* cannot happen: every unit was compressed */
        wk_fail(w, GV_ERR_INVAL, "iteration %" PRIu64 ": %u servers' pushes did not leave", w->iter,
                x->next_push);
        status = GV_ERR_INVAL;
    }
    if (status != GV_OK) { /* the iteration is over: the helper runs the transport again */
        x->phase = WK_IDLE;
        return w->fail_status != GV_OK ? w->fail_status : status;
    }
    x->phase = WK_FLIGHT;
    return GV_OK;
}

/* Waits for every update, adopts the next decision and closes the iteration. */
static gv_status_t step_finish(struct gv_worker *w, struct gv_worker_step_out *out)
{
    struct wk_step *x = &w->st;
    memset(out, 0, sizeof(*out));
    if (w->fail_status != GV_OK)
        return w->fail_status;
    if (x->phase != WK_FLIGHT) {
        gv_log(GV_LOG_ERROR, "worker %u: finishing an iteration that was not pushed", w->rank);
        return GV_ERR_INVAL;
    }
    bool stop = false;
    uint64_t t = gv_now_ns();
    gv_status_t status = step_wait(w, &stop);
    x->phase = WK_IDLE;
    uint64_t t2 = gv_now_ns();
    x->wait_ns += t2 - t;
    *out = x->out;
    out->comm_s = (double)x->wait_ns * 1e-9; /* not the caller's compute in between */
    gv_trace_span(w->cfg.trace, GV_PS_SPAN_WAIT, t, t2, w->iter, w->dec.cf_send, w->it_payload_recv,
                  -1);
    if (status != GV_OK)
        return w->fail_status != GV_OK ? w->fail_status : status;
    if (stop) {
        out->stop = true;
        return GV_OK;
    }
    if (x->dense && x->levels > 0) { /* g_ef has left (the updates came back): r = 0 */
        for (uint32_t u = 0; u < w->n_units; u++)
            if ((status = gv_cmp_apply(w->cmp, w->ef[u], GV_SENT_DENSE, NULL)) != GV_OK)
                return status;
        w->resid_zero = true;
    }
    out->lr = (float)w->srv[0].dec.lr;
    for (uint32_t s = 0; s < w->S; s++)
        out->resynced |= w->srv[s].resync;
    if ((status = step_adopt(w)) != GV_OK)
        return status;
    step_accordion(w, x->in.epoch_end);
    out->bytes_recv = w->it_recv;
    out->payload_recv = w->it_payload_recv;
    out->wire_sent = step_wire(w, true) - x->wire_s0;
    out->wire_recv = step_wire(w, false) - x->wire_r0;
    gv_ps_bytes_add(&w->bytes, out->cf, out->bytes_sent, out->bytes_recv, out->payload_sent);
    w->steps++;
    w->iter++;
    return GV_OK;
}

/* After a finished iteration, out of the lock: the residual checkpoint's verdict and write. */
static void step_after(struct gv_worker *w, gv_status_t status,
                       const struct gv_worker_step_out *out)
{
    bool ckpt = status == GV_OK && !out->stop && wk_ckpt_due(w);
    bool verdict = status == GV_OK && !out->stop && w->ck_pend_iter != 0;
    w->busy = false;
    pthread_mutex_unlock(&w->mu);
    if (verdict)
        wk_ckpt_verdict(w);
    if (ckpt)
        wk_ckpt_write(w);
    w->t_step_end_ns = gv_trace_now(w->cfg.trace);
}

static void step_lock(struct gv_worker *w)
{
    pthread_mutex_lock(&w->mu);
    w->busy = true;
}

static void step_unlock(struct gv_worker *w)
{
    w->busy = false;
    pthread_mutex_unlock(&w->mu);
}

gv_status_t gv_worker_step(struct gv_worker *w, const struct gv_worker_step_in *in,
                           struct gv_worker_step_out *out)
{
    step_lock(w);
    gv_status_t status = step_push_all(w, in);
    if (status == GV_OK)
        status = step_finish(w, out);
    else
        memset(out, 0, sizeof(*out));
    step_after(w, status, out);
    return status;
}

bool gv_worker_overlaps(const struct gv_worker *w)
{
    return !w->mirrored;
}

gv_status_t gv_worker_grads_ready(struct gv_worker *w, size_t lo)
{
    if (w->mirrored) /* a GPU replica pushes at gv_worker_step_push */
        return GV_OK;
    step_lock(w);
    gv_status_t status = w->fail_status;
    if (status == GV_OK && w->st.phase == WK_FLIGHT) {
        gv_log(GV_LOG_ERROR,
               "worker %u: gradients of the next iteration before the last one was "
               "finished",
               w->rank);
        status = GV_ERR_INVAL;
    } else if (status == GV_OK) {
        step_open(w);
        uint64_t t = gv_now_ns();
        w->st.early = true;
        w->st.t_call = t;
        status = step_advance(w, GV_MIN(lo, w->m.numel), false);
        w->st.early = false;
        w->st.work_ns += gv_now_ns() - t;
        if (status != GV_OK) {
            w->st.phase = WK_IDLE;
        }
    }
    step_unlock(w);
    return status;
}

gv_status_t gv_worker_step_push(struct gv_worker *w, const struct gv_worker_step_in *in)
{
    step_lock(w);
    gv_status_t status = step_push_all(w, in);
    step_unlock(w);
    return status;
}

/* Whether every element of [lo, hi) of the replica has its update applied. */
static bool step_params_final(const struct gv_worker *w, uint64_t lo, uint64_t hi)
{
    for (uint32_t s = gv_shard_of(&w->map, lo); s < w->S && w->srv[s].lo < hi; s++) {
        const struct wk_server *ws = &w->srv[s];
        if (ws->got_update) {
            if (ws->model_left > 0) /* a resync rewrites the whole shard */
                return false;
            continue;
        }
        struct gv_ps_pieces lay = step_pieces(w, ws);
        uint64_t a = lo > ws->lo ? lo - ws->lo : 0, b = GV_MIN(hi - ws->lo, ws->n);
        for (uint32_t k = lay.base > 0 ? (uint32_t)(a / lay.base) : 0;
             k < lay.np && gv_ps_piece_lo(&lay, k) < b; k++)
            if (!((ws->have >> k) & 1u))
                return false;
    }
    return true;
}

gv_status_t gv_worker_params_wait(struct gv_worker *w, size_t lo, size_t hi)
{
    step_lock(w);
    gv_status_t status = w->fail_status;
    hi = GV_MIN(hi, w->m.numel);
    uint64_t t = gv_now_ns();
    if (status == GV_OK && w->st.phase == WK_FLIGHT && lo < hi && !step_params_final(w, lo, hi))
        w->params_waits++;
    while (status == GV_OK && w->st.phase == WK_FLIGHT && lo < hi &&
           !step_params_final(w, lo, hi)) {
        bool bye = false;
        for (uint32_t s = 0; s < w->S && status == GV_OK; s++) {
            struct wk_server *ws = &w->srv[s];
            bye |= ws->got_bye;
            if (!ws->got_update || ws->model_left > 0)
                status = wk_server_status(w, ws);
        }
        if (bye || status != GV_OK)
            break; /* the finish reports it */
        int ms = wk_tick(w, gv_now_ns());
        if (w->fail_status != GV_OK)
            break;
        if (gv_tp_progress(w->tp, ms) < 0)
            wk_fail(w, GV_ERR_IO, "transport failure");
        status = w->fail_status;
    }
    w->st.wait_ns += gv_now_ns() - t;
    step_unlock(w);
    return status;
}

gv_status_t gv_worker_step_finish(struct gv_worker *w, struct gv_worker_step_out *out)
{
    step_lock(w);
    gv_status_t status = step_finish(w, out);
    step_after(w, status, out);
    return status;
}
