/* rx.c: what the worker receives, through the transport's callbacks: every header decoded once
 * (gv_ps_rx), the handshake and the fingerprint check, worker 0's seed of the servers, the
 * model (at start and on resync) straight into the replica, the decisions, and the updates,
 * each applied as it arrives: the same optimizer step its server applied to its shard. */
#include "wk.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static gv_status_t wk_parse_prefix(const void *prefix, uint32_t *hdr_len_p,
                                   uint64_t *payload_len_p, void *user)
{
    struct gv_worker *w = user;
    return gv_proto_parse_prefix(prefix, &w->caps, hdr_len_p, payload_len_p);
}

static gv_status_t wk_update_header(struct gv_worker *w, struct wk_server *ws,
                                    const struct gv_proto_msg *m, struct gv_iov *dst, int *cnt)
{
    bool accordion = w->job->method == GV_JOB_ACCORDION;
    bool dense;
    if (!ws->synced || !w->in_step ||
        gv_ps_update_check(m, w->iter, ws->s, ws->n, ws->ucap, accordion, w->m.n_tensors,
                           &dense) != GV_OK) {
        gv_log(GV_LOG_ERROR, "worker %u: %s sent a malformed update (iteration %" PRIu64
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
    if (dense) {
        dst[k++] = (struct gv_iov){w->hg + ws->lo, 4 * ws->n};
    } else {
        dst[k++] = (struct gv_iov){ws->ubuf + GV_SPARSE_HDR_LEN, (size_t)m->segs[0].bytes};
        dst[k++] = (struct gv_iov){ws->ubuf + GV_SPARSE_HDR_LEN + m->segs[0].bytes,
                                   (size_t)m->segs[1].bytes};
    }
    if (accordion)
        dst[k++] = (struct gv_iov){ws->heavy, w->m.n_tensors};
    *cnt = k;
    return GV_OK;
}

static gv_status_t wk_on_header(struct gv_conn *c, const void *msg, size_t msg_len,
                                uint64_t payload_len, struct gv_iov *dst, int *dst_cnt,
                                void *user)
{
    struct gv_worker *w = user;
    struct wk_server *ws = c->user;
    const struct gv_proto_msg *mp;
    gv_status_t status = gv_ps_rx_header(&ws->rx, msg, msg_len, &w->caps, &w->arena, &mp);
    if (status != GV_OK)
        return status;
    const struct gv_proto_msg m = *mp;
    switch (m.type) {
    case GV_PROTO_MSG_UPDATE:
        return wk_update_header(w, ws, mp, dst, dst_cnt);
    case GV_PROTO_MSG_MODEL:
        /* a model arrives at start-up or right after an update: never between iterations,
         * when the caller owns the parameters */
        if (!w->busy || m.tensor_id > 1 || m.n_segs != 1 || m.segs[0].kind != GV_PROTO_SEG_DENSE ||
            m.segs[0].enc != GV_PROTO_ENC_F32 || m.u.model.offset > ws->n ||
            m.numel > ws->n - m.u.model.offset || m.numel > ws->model_left)
            break;
        dst[0] = (struct gv_iov){(m.tensor_id == 0 ? w->hp : w->hv) + ws->lo + m.u.model.offset,
                                 (size_t)payload_len};
        *dst_cnt = 1;
        return GV_OK;
    case GV_PROTO_MSG_DECISION:
        if (!w->busy || w->job->method != GV_JOB_ACCORDION || m.n_segs != 1 ||
            m.segs[0].kind != GV_PROTO_SEG_RAW || payload_len != w->m.n_tensors)
            break;
        dst[0] = (struct gv_iov){ws->heavy, w->m.n_tensors};
        *dst_cnt = 1;
        return GV_OK;
    default:
        break;
    }
    gv_log(GV_LOG_ERROR, "worker %u: %s sent an unexpected %s with a %" PRIu64 "-byte payload",
           w->rank, ws->name, gv_proto_msg_type_str(m.type), payload_len);
    return GV_ERR_PROTO;
}

static void wk_seed(struct gv_worker *w, struct wk_server *ws)
{
    for (uint64_t off = 0; off < ws->n; off += WK_MODEL_CHUNK) {
        uint64_t len = GV_MIN(WK_MODEL_CHUNK, ws->n - off);
        struct gv_proto_msg m;
        gv_ps_link_msg(&ws->link, &m, GV_PROTO_MSG_MODEL, 0);
        m.dtype = GV_PROTO_DTYPE_F32;
        m.numel = len;
        m.u.model.offset = off;
        gv_proto_seg_add(&m, GV_PROTO_SEG_DENSE, GV_PROTO_ENC_F32, len, 4 * len);
        struct gv_iov pl = {w->hp + ws->lo + off, 4 * len};
        gv_status_t status = gv_ps_link_send(&ws->link, &m, &pl, 1, NULL);
        if (status != GV_OK) {
            wk_fail(w, status, "cannot send the initial model to %s", ws->name);
            return;
        }
    }
    gv_log(GV_LOG_INFO, "worker %u: seeded %s with the initial model", w->rank, ws->name);
}

static void wk_welcomed(struct gv_worker *w, struct wk_server *ws)
{
    const struct gv_proto_welcome *we = &ws->hs.welcome;
    if (we->model_fingerprint != w->fingerprint) {
        char text[240];
        snprintf(text, sizeof(text), "model fingerprint mismatch: worker %u has %016" PRIx64
                 ", server %u has %016" PRIx64 ": the model, optimizer or compression options "
                 "differ", w->rank, w->fingerprint, ws->s, we->model_fingerprint);
        struct gv_proto_msg m;
        gv_ps_link_msg(&ws->link, &m, GV_PROTO_MSG_REFUSE, 0);
        m.u.refuse.code = GV_PROTO_REFUSE_MODEL;
        m.u.refuse.text = text;
        (void)gv_ps_link_send(&ws->link, &m, NULL, 0, NULL);
        wk_fail(w, GV_ERR_PROTO, "%s: %s", ws->name, text);
        return;
    }
    if (we->shard_offset != ws->lo || we->shard_numel != ws->n ||
        we->model_numel != w->map.total || we->num_shards != w->S) {
        wk_fail(w, GV_ERR_PROTO, "%s holds shard [%" PRIu64 ", +%" PRIu64 ") of %" PRIu64
                " over %u, this worker expects [%" PRIu64 ", +%" PRIu64 ") of %" PRIu64 " over %u",
                ws->name, we->shard_offset, we->shard_numel, we->model_numel, we->num_shards,
                ws->lo, ws->n, w->map.total, w->S);
        return;
    }
    gv_log(GV_LOG_INFO, "worker %u: joined %s at iteration %" PRIu64, w->rank, ws->name,
           ws->hs.iteration);
    ws->model_left = 2 * ws->n;
    if (w->rank == 0 && ws->hs.iteration == 0)
        wk_seed(w, ws);
}

/* A server's whole shard (params and momentum) has arrived in the host view: check it, and
 * put it on the GPU for a device replica. */
static void wk_model_received(struct gv_worker *w, struct wk_server *ws)
{
    if (ws->model_checksum != 0 && gv_ps_checksum(w->hp + ws->lo, ws->n) != ws->model_checksum) {
        wk_fail(w, GV_ERR_PROTO, "the model from %s does not match its checksum", ws->name);
        return;
    }
    if (w->mirrored &&
        wk_upload(w, w->m.params + ws->lo, w->hp + ws->lo, ws->n, "the model") == GV_OK)
        wk_upload(w, w->m.momentum + ws->lo, w->hv + ws->lo, ws->n, "the momentum");
}

static void wk_on_msg(struct gv_conn *c, const void *msg, size_t msg_len, void *user)
{
    struct gv_worker *w = user;
    struct wk_server *ws = c->user;
    const struct gv_proto_msg *mp;
    if (gv_ps_rx_msg(&ws->rx, msg, msg_len, &w->caps, &w->arena, &mp) != GV_OK) {
        wk_fail(w, GV_ERR_PROTO, "%s sent an undecodable header", ws->name);
        gv_tp_conn_close(c);
        return;
    }
    const struct gv_proto_msg m = *mp;
    uint64_t bytes = msg_len + m.payload_len;
    ws->link.bytes_recv += bytes;
    wk_seen(w, ws);
    if (ws->hs.state != GV_PS_CLIENT_WELCOMED) {
        if (gv_ps_client_hs_on_msg(&ws->hs, &ws->link, &m) != GV_OK) {
            wk_fail(w, GV_ERR_AUTH, "handshake with %s failed: %s", ws->name, ws->hs.why);
            return;
        }
        if (ws->hs.state == GV_PS_CLIENT_WELCOMED)
            wk_welcomed(w, ws);
        return;
    }
    switch (m.type) {
    case GV_PROTO_MSG_UPDATE:
        if (w->in_step) {
            w->it_recv += bytes;
            w->it_payload_recv += m.payload_len;
        }
        wk_apply_update(w, ws, &m);
        return;
    case GV_PROTO_MSG_MODEL:
        ws->model_left -= m.numel;
        if (m.tensor_id == 0)
            ws->model_checksum = m.u.model.checksum;
        if (w->in_step) {
            w->it_recv += bytes;
            w->it_payload_recv += m.payload_len;
        }
        if (ws->model_left == 0)
            wk_model_received(w, ws);
        return;
    case GV_PROTO_MSG_DECISION:
        if (ws->synced || ws->model_left != 0) {
            wk_fail(w, GV_ERR_PROTO, "%s sent a decision out of turn", ws->name);
            return;
        }
        gv_ps_decision_from_proto(&m.u.decision, &ws->dec);
        ws->dec_iter = m.iteration;
        ws->got_decision = true;
        ws->synced = true;
        return;
    case GV_PROTO_MSG_BYE:
        ws->got_bye = true;
        return;
    case GV_PROTO_MSG_ERROR:
        ws->got_error = true;
        ws->error_code = m.u.error.code;
        ws->error_iter = m.iteration;
        snprintf(ws->error_text, sizeof(ws->error_text), "%s",
                 m.u.error.text ? m.u.error.text : "(no text)");
        return;
    case GV_PROTO_MSG_HEARTBEAT:
        return;
    default:
        wk_fail(w, GV_ERR_PROTO, "%s sent an unexpected %s", ws->name,
                gv_proto_msg_type_str(m.type));
    }
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

/* ---------------------------------------------------------------- updates */

/* The optimizer step on the shard, with the averaged gradient g (host): on the host replica,
 * or uploaded to the GPU and stepped there (the same bits). */
static gv_status_t step_optim(struct gv_worker *w, struct wk_server *ws, float lr, const float *g)
{
    const struct gv_optim_cfg *oc = &w->job->optim;
    if (!w->mirrored) {
        gv_optim_apply_host(oc, lr, w->hp + ws->lo, w->hv + ws->lo, g, ws->n);
        return GV_OK;
    }
    float *dg = w->m.grads + ws->lo;
    gv_status_t status = wk_upload(w, dg, g, ws->n, "the update");
    if (status == GV_OK)
        status = gv_optim_apply(w->m.be, oc, lr, w->m.params + ws->lo, w->m.momentum + ws->lo,
                                dg, ws->n);
    if (status != GV_OK)
        wk_fail(w, status, "the optimizer step on the GPU failed (%s)", gv_status_str(status));
    return status;
}

void wk_apply_update(struct gv_worker *w, struct wk_server *ws, const struct gv_proto_msg *m)
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
        if (gv_ps_sparse_add(ws->ubuf, m, (uint32_t)ws->n, g) != GV_OK) {
            wk_fail(w, GV_ERR_PROTO, "%s sent an update that does not decode", ws->name);
            return;
        }
    }
    gv_ps_decision_from_proto(&m->u.update.decision, &ws->dec);
    ws->dec_iter = m->iteration + 1;
    ws->resync = ws->dec.resync;
    ws->got_update = true;
    float lr = (float)ws->dec.lr;
    if (step_optim(w, ws, lr, g) != GV_OK)
        return;
    if (ws->resync) {
        ws->model_left = 2 * ws->n;
        ws->model_checksum = 0;
        w->resyncs++;
        return;
    }
    if (w->cfg.verify_every > 0 && w->iter % w->cfg.verify_every == 0) {
        /* a GPU replica is checked on a copy of its shard */
        if (w->mirrored && wk_download(w, w->hp + ws->lo, w->m.params + ws->lo, ws->n,
                                  "the shard to checksum") != GV_OK)
            return;
        w->checks++;
        uint64_t ck = gv_ps_checksum(w->hp + ws->lo, ws->n);
        if (ck != m->u.update.model_checksum) {
            w->mismatches++;
            gv_log(GV_LOG_WARN, "worker %u: shard %u drifted from %s at iteration %" PRIu64
                   " (checksum %016" PRIx64 ", server %016" PRIx64 "): asking for a full model",
                   w->rank, ws->s, ws->name, w->iter, ck, m->u.update.model_checksum);
            struct gv_proto_msg r;
            gv_ps_link_msg(&ws->link, &r, GV_PROTO_MSG_MODEL, w->iter);
            (void)gv_ps_link_send(&ws->link, &r, NULL, 0, NULL);
        }
    }
}

