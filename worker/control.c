/* control.c: every message a worker receives that is not an update: the handshake and the
 * fingerprint check, worker 0's seed of the servers, the model (at start-up and on a resync)
 * straight into the replica, the first decision, and a server's BYE, ERROR and heartbeats. The
 * transport's callbacks (step.c) hand them here. */
#include "wk.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

gv_status_t wk_control_header(struct gv_worker *w, struct wk_server *ws,
                              const struct gv_proto_msg *m, uint64_t payload_len,
                              struct gv_iov *dst, int *cnt)
{
    switch (m->type) {
    case GV_PROTO_MSG_MODEL:
        /* a model arrives at start-up or right after an update: never between iterations,
         * when the caller owns the parameters */
        if (!w->busy || m->tensor_id > (w->caller_optim ? 0u : 1u) || m->n_segs != 1 ||
            m->segs[0].kind != GV_PROTO_SEG_DENSE || m->segs[0].enc != GV_PROTO_ENC_F32 ||
            m->u.model.offset > ws->n || m->numel > ws->n - m->u.model.offset ||
            m->numel > ws->model_left)
            break;
        dst[0] = (struct gv_iov){(m->tensor_id == 0 ? w->hp : w->hv) + ws->lo + m->u.model.offset,
                                 (size_t)payload_len};
        *cnt = 1;
        return GV_OK;
    case GV_PROTO_MSG_DECISION:
        if (!w->busy || w->job->method != GV_JOB_ACCORDION || m->n_segs != 1 ||
            m->segs[0].kind != GV_PROTO_SEG_RAW || payload_len != w->m.n_tensors)
            break;
        dst[0] = (struct gv_iov){ws->heavy, w->m.n_tensors};
        *cnt = 1;
        return GV_OK;
    default: break;
    }
    gv_log(GV_LOG_ERROR, "worker %u: %s sent an unexpected %s with a %" PRIu64 "-byte payload",
           w->rank, ws->name, gv_proto_msg_type_str(m->type), payload_len);
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

/* --model external: the layout follows the AUTH, before the server can welcome us. */
static void wk_send_layout(struct gv_worker *w, struct wk_server *ws)
{
    struct gv_proto_msg m;
    gv_ps_link_msg(&ws->link, &m, GV_PROTO_MSG_LAYOUT, 0);
    gv_proto_seg_add(&m, GV_PROTO_SEG_RAW, GV_PROTO_ENC_BYTES, w->layout_len, w->layout_len);
    struct gv_iov pl = {w->layout_wire, w->layout_len};
    gv_status_t status = gv_ps_link_send(&ws->link, &m, &pl, 1, NULL);
    if (status != GV_OK)
        wk_fail(w, status, "cannot send the model's layout to %s", ws->name);
    ws->layout_sent = true;
}

static void wk_welcomed(struct gv_worker *w, struct wk_server *ws)
{
    const struct gv_proto_welcome *we = &ws->hs.welcome;
    if (we->model_fingerprint != w->fingerprint) {
        char text[240];
        snprintf(text, sizeof(text),
                 "model fingerprint mismatch: worker %u has %016" PRIx64
                 ", server %u has %016" PRIx64 ": the model, the number of iterations, the "
                 "optimizer or the compression options differ",
                 w->rank, w->fingerprint, ws->s, we->model_fingerprint);
        struct gv_proto_msg m;
        gv_ps_link_msg(&ws->link, &m, GV_PROTO_MSG_REFUSE, 0);
        m.u.refuse.code = GV_PROTO_REFUSE_MODEL;
        m.u.refuse.text = text;
        (void)gv_ps_link_send(&ws->link, &m, NULL, 0, NULL);
        wk_fail(w, GV_ERR_PROTO, "%s: %s", ws->name, text);
        return;
    }
    if (we->shard_offset != ws->lo || we->shard_numel != ws->n || we->model_numel != w->map.total ||
        we->num_shards != w->S) {
        wk_fail(w, GV_ERR_PROTO,
                "%s holds shard [%" PRIu64 ", +%" PRIu64 ") of %" PRIu64
                " over %u, this worker expects [%" PRIu64 ", +%" PRIu64 ") of %" PRIu64 " over %u",
                ws->name, we->shard_offset, we->shard_numel, we->model_numel, we->num_shards,
                ws->lo, ws->n, w->map.total, w->S);
        return;
    }
    gv_log(GV_LOG_INFO, "worker %u: joined %s at iteration %" PRIu64, w->rank, ws->name,
           ws->hs.iteration);
    ws->model_left = (w->caller_optim ? 1 : 2) * ws->n; /* params (and momentum) */
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
    if (w->mirrored && !w->caller_optim &&
        wk_upload(w, w->m.params + ws->lo, w->hp + ws->lo, ws->n, "the model") == GV_OK)
        wk_upload(w, w->m.momentum + ws->lo, w->hv + ws->lo, ws->n, "the momentum");
}

void wk_control_msg(struct gv_worker *w, struct wk_server *ws, const struct gv_proto_msg *m)
{
    if (ws->hs.state != GV_PS_CLIENT_WELCOMED) {
        if (gv_ps_client_hs_on_msg(&ws->hs, &ws->link, m) != GV_OK) {
            bool model = m->type == GV_PROTO_MSG_REFUSE &&
                         m->u.refuse.code == GV_PROTO_REFUSE_MODEL; /* a layout refused */
            wk_fail(w, model ? GV_ERR_PROTO : GV_ERR_AUTH, "handshake with %s failed: %s", ws->name,
                    ws->hs.why);
            return;
        }
        if (ws->hs.state == GV_PS_CLIENT_AUTH_SENT && w->layout_wire != NULL && !ws->layout_sent)
            wk_send_layout(w, ws);
        if (ws->hs.state == GV_PS_CLIENT_WELCOMED)
            wk_welcomed(w, ws);
        return;
    }
    switch (m->type) {
    case GV_PROTO_MSG_MODEL:
        ws->model_left -= m->numel;
        if (m->tensor_id == 0)
            ws->model_checksum = m->u.model.checksum;
        if (ws->model_left == 0)
            wk_model_received(w, ws);
        return;
    case GV_PROTO_MSG_DECISION:
        if (ws->synced || ws->model_left != 0) {
            wk_fail(w, GV_ERR_PROTO, "%s sent a decision out of turn", ws->name);
            return;
        }
        gv_ps_decision_from_proto(&m->u.decision, &ws->dec);
        ws->dec_iter = m->iteration;
        ws->got_decision = true;
        ws->synced = true;
        return;
    case GV_PROTO_MSG_BYE: ws->got_bye = true; return;
    case GV_PROTO_MSG_ERROR:
        ws->got_error = true;
        ws->error_code = m->u.error.code;
        ws->error_iter = m->iteration;
        snprintf(ws->error_text, sizeof(ws->error_text), "%s",
                 m->u.error.text ? m->u.error.text : "(no text)");
        return;
    case GV_PROTO_MSG_HEARTBEAT: return;
    default:
        wk_fail(w, GV_ERR_PROTO, "%s sent an unexpected %s", ws->name,
                gv_proto_msg_type_str(m->type));
    }
}
