/* server_peer.c: the server's connection layer: transport callbacks, the server side of the
 * handshake, the connection to server 0 (servers 1..S-1), the initial model (seeded by
 * worker 0, then sent to every worker with the decision in force), and dispatch of the other
 * messages to the round logic. A connection that misbehaves before it joined is logged and
 * closed; the server goes on serving the others. */
#include "server_internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static gv_status_t srv_parse_prefix(const void *prefix, uint32_t *hdr_len_p,
                                    uint64_t *payload_len_p, void *user)
{
    struct gv_server *srv = user;
    return gv_proto_parse_prefix(prefix, &srv->caps, hdr_len_p, payload_len_p);
}

void srv_peer_close(struct srv_peer *p)
{
    if (p->link.c != NULL)
        gv_tp_conn_close(p->link.c);
}

static void srv_peer_idle(struct gv_ps_link *l, void *arg)
{
    struct srv_peer *p = arg;
    (void)l;
    if (p->close_after_send) {
        srv_peer_close(p);
        return;
    }
    if (p->kind == SRV_PEER_WORKER && p->srv->round == SRV_ROUND_WAIT_OPEN)
        srv_round_try_open(p->srv);
}

static struct srv_peer *srv_peer_new(struct gv_server *srv, struct gv_conn *c,
                                     enum srv_peer_kind kind)
{
    struct srv_peer *p = gv_calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    if (gv_ps_link_init(&p->link, &srv->caps, &srv->env, SRV_HDR_SLOTS, SRV_HDR_BYTES) != GV_OK) {
        gv_free(p);
        return NULL;
    }
    p->srv = srv;
    p->kind = kind;
    p->link.c = c;
    p->link.on_idle = srv_peer_idle;
    p->link.arg = p;
    p->t_accept_ns = gv_now_ns();
    snprintf(p->name, sizeof(p->name), "peer %s", c->peer);
    c->user = p;
    p->next = srv->peers;
    srv->peers = p;
    return p;
}

/* Refuses a connection that has not joined: REFUSE, then close once it is sent. */
static void srv_refuse(struct srv_peer *p, enum gv_proto_refuse code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void srv_refuse(struct srv_peer *p, enum gv_proto_refuse code, const char *fmt, ...)
{
    char text[240];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    gv_log(GV_LOG_WARN, "server %u: refused %s: %s", p->srv->rank, p->name, text);
    srv_metrics_refused(p->srv, gv_proto_refuse_str(code));
    struct gv_proto_msg m;
    gv_ps_link_msg(&p->link, &m, GV_PROTO_MSG_REFUSE, 0);
    m.u.refuse.code = code;
    m.u.refuse.text = text;
    if (gv_ps_link_send(&p->link, &m, NULL, 0, NULL) == GV_OK && !gv_ps_link_idle(&p->link))
        p->close_after_send = true;
    else
        srv_peer_close(p);
}

/* ---------------------------------------------------------------- handshake, server side */

static gv_status_t srv_send_welcome(struct gv_server *srv, struct srv_peer *p)
{
    struct gv_proto_msg out;
    gv_ps_link_msg(&p->link, &out, GV_PROTO_MSG_WELCOME, srv->iter);
    out.u.welcome = (struct gv_proto_welcome){
        .shard_offset = srv->lo, .shard_numel = srv->n, .model_numel = srv->map.total,
        .model_fingerprint = srv->fingerprint, .num_shards = srv->S,
        .features = srv->cfg.secret->len > 0 ? GV_PROTO_FEAT_AUTH : 0};
    return gv_ps_link_send(&p->link, &out, NULL, 0, NULL);
}

/* Server 0, once every other server has authenticated: the job starts from the newest
 * checkpoint every server holds (each server named its newest in its HELLO; the periodic ones
 * are common to all, a final one may be missing where a server died), or from scratch when
 * none has any. Checkpoints on some servers only are refused: mixing a resumed shard with a
 * fresh one would train a model that never existed. Then every server gets WELCOME(iteration)
 * and the decision in force with the round membership (every worker). */
void srv_settle(struct gv_server *srv)
{
    if (srv->settled || srv->rank != 0 || srv->n_servers_in + 1 < srv->S ||
        srv->state == SRV_ABORTED)
        return;
    uint64_t c = srv->ckpt_own;
    int some = srv->ckpt_own > 0 ? 0 : -1, none = srv->ckpt_own > 0 ? -1 : 0;
    for (uint32_t s = 1; s < srv->S; s++) {
        uint64_t h = srv->servers[s]->hello_iter;
        c = GV_MIN(c, h);
        if (h > 0 && some < 0)
            some = (int)s;
        if (h == 0 && none < 0)
            none = (int)s;
    }
    if (some >= 0 && none >= 0) {
        char text[300];
        snprintf(text, sizeof(text), "checkpoints exist for some servers only: server %d has one "
                 "(iteration %" PRIu64 "), server %d has none in its --checkpoint-dir; restore the "
                 "missing files, or move every server's checkpoints away to start from scratch",
                 some, some == 0 ? srv->ckpt_own : srv->servers[some]->hello_iter, none);
        srv->refused = true;
        srv_abort_now(srv, GV_ERR_PROTO, false, text);
        return;
    }
    if (c != srv->iter && srv_ckpt_resume_at(srv, c) != GV_OK) {
        srv->refused = true;
        srv_abort_now(srv, GV_ERR_PROTO, false, "cannot resume from the iteration every server "
                      "holds a checkpoint of (see above)");
        return;
    }
    srv->settled = true;
    if (c > 0)
        gv_log(GV_LOG_INFO, "server 0: the job resumes from iteration %" PRIu64 " (the newest "
               "checkpoint every server holds)", c);
    for (uint32_t w = 0; w < srv->W; w++)
        srv->memb[w] = srv->expected[w] ? GV_PS_MEMB_NEXT : 0;
    for (uint32_t s = 1; s < srv->S; s++) {
        struct srv_peer *p = srv->servers[s];
        if (srv_send_welcome(srv, p) != GV_OK ||
            srv_send_decision(srv, p, &srv->dec_cur, GV_PROTO_MSG_DECISION, srv->memb) != GV_OK) {
            srv_abort(srv, GV_ERR_IO, "cannot send the welcome and decision to %s", p->name);
            return;
        }
    }
    srv_sync_ready_workers(srv);
}

/* Authenticated: the rank's slot, then WELCOME (workers) or, on server 0, the wait for every
 * server before the starting iteration is agreed. */
static void srv_hs_joined(struct gv_server *srv, struct srv_peer *p)
{
    bool as_server = p->hello_role == GV_PROTO_ROLE_SERVER;
    struct srv_peer **slot = as_server ? &srv->servers[p->rank] : &srv->workers[p->rank];
    if (*slot != NULL) {
        srv_refuse(p, GV_PROTO_REFUSE_FULL, "%s %u has already joined (%s)",
                   gv_proto_role_str(p->hello_role), p->rank, (*slot)->name);
        return;
    }
    *slot = p;
    if (as_server) {
        p->kind = SRV_PEER_SERVER;
        srv->n_servers_in++;
        gv_log(GV_LOG_INFO, "server 0: %s joined (newest checkpoint: iteration %" PRIu64 ")",
               p->name, p->hello_iter);
        srv_ops_joined(srv, p);
        srv_settle(srv); /* once every server is in */
        return;
    }
    if (srv_send_welcome(srv, p) != GV_OK) {
        *slot = NULL;
        srv_peer_close(p);
        return;
    }
    p->kind = SRV_PEER_WORKER;
    srv->n_workers_in++;
    gv_log(GV_LOG_INFO, "server %u: %s joined (%u of %u)", srv->rank, p->name, srv->n_workers_in,
           srv->W);
    srv_ops_joined(srv, p);
    srv_sync_ready_workers(srv);
}

static void srv_hs_on_msg(struct gv_server *srv, struct srv_peer *p, const struct gv_proto_msg *m)
{
    struct gv_ps_server_hs_cfg hc = {.rank = srv->rank, .num_workers = srv->W,
                                     .num_servers = srv->S, .cluster_id = srv->cl->cluster_id,
                                     .secret = srv->cfg.secret};
    struct gv_proto_msg out;
    switch (gv_ps_server_hs_on_msg(&p->shs, &hc, m, &out)) {
    case GV_PS_HS_REPLY:
        p->hello_role = p->shs.role;
        p->rank = p->shs.rank;
        p->hello_iter = p->shs.iteration;
        snprintf(p->name, sizeof(p->name), "%s %u (%s)", gv_proto_role_str(p->hello_role),
                 p->rank, p->link.c->peer);
        if (gv_ps_link_send(&p->link, &out, NULL, 0, NULL) != GV_OK)
            srv_peer_close(p);
        return;
    case GV_PS_HS_JOINED:
        srv_hs_joined(srv, p);
        return;
    case GV_PS_HS_REFUSED:
        gv_log(GV_LOG_WARN, "server %u: refused %s: %s", srv->rank, p->name, p->shs.why);
        srv_metrics_refused(srv, gv_proto_refuse_str(p->shs.code));
        if (gv_ps_link_send(&p->link, &out, NULL, 0, NULL) == GV_OK &&
            !gv_ps_link_idle(&p->link))
            p->close_after_send = true;
        else
            srv_peer_close(p);
        return;
    case GV_PS_HS_CLOSED:
        gv_log(GV_LOG_WARN, "server %u: %s refused the handshake: %s", srv->rank, p->name,
               p->shs.why);
        srv_metrics_refused(srv, "auth");
        srv_peer_close(p);
        return;
    }
}

/* ---------------------------------------------------------------- the connection to server 0 */

static void srv_coord_welcomed(struct gv_server *srv, struct srv_peer *p)
{
    const struct gv_proto_welcome *w = &p->hs.welcome;
    if (w->model_fingerprint != srv->fingerprint || w->model_numel != srv->map.total ||
        w->num_shards != srv->S) {
        char text[200];
        snprintf(text, sizeof(text), "model fingerprint mismatch: server %u has %016" PRIx64
                 " (%" PRIu64 " parameters, %u shards), server 0 has %016" PRIx64 " (%" PRIu64
                 ", %u): the model, optimizer or compression options differ", srv->rank,
                 srv->fingerprint, srv->map.total, srv->S, w->model_fingerprint, w->model_numel,
                 w->num_shards);
        struct gv_proto_msg m;
        gv_ps_link_msg(&p->link, &m, GV_PROTO_MSG_REFUSE, 0);
        m.u.refuse.code = GV_PROTO_REFUSE_MODEL;
        m.u.refuse.text = text;
        (void)gv_ps_link_send(&p->link, &m, NULL, 0, NULL);
        srv_abort(srv, GV_ERR_PROTO, "%s", text);
        return;
    }
    uint64_t c = p->hs.iteration;
    if (c != srv->iter && srv_ckpt_resume_at(srv, c) != GV_OK) {
        srv->refused = true;
        srv_abort_now(srv, GV_ERR_PROTO, false, "cannot resume from the iteration server 0 chose "
                      "(see above)");
        return;
    }
    srv->iter = c;
    gv_log(GV_LOG_INFO, "server %u: joined server 0 at %s; the job %s iteration %" PRIu64,
           srv->rank, p->link.c->peer, c > 0 ? "resumes from" : "starts at", c);
    srv_ops_joined(srv, p);
}

gv_status_t srv_connect_coord(struct gv_server *srv, uint64_t deadline_ns)
{
    struct gv_hostport hp;
    gv_status_t status = gv_cluster_server_addr(srv->cl, 0, deadline_ns, &hp);
    if (status != GV_OK)
        return status;
    struct gv_conn *c;
    status = gv_tp_connect(srv->tp, hp.host, hp.port, &c);
    if (status != GV_OK) {
        gv_log(GV_LOG_ERROR, "server %u: cannot connect to server 0 at %s:%u: %s", srv->rank,
               hp.host, hp.port, gv_status_str(status));
        return status;
    }
    struct srv_peer *p = srv_peer_new(srv, c, SRV_PEER_COORD);
    if (p == NULL) {
        gv_tp_conn_close(c);
        return GV_ERR_NOMEM;
    }
    snprintf(p->name, sizeof(p->name), "server 0 (%s)", c->peer);
    srv->coord = p;
    struct gv_ps_hello_info info = {.role = GV_PROTO_ROLE_SERVER, .rank = srv->rank,
                                    .num_workers = srv->W, .num_servers = srv->S,
                                    .cluster_id = srv->cl->cluster_id,
                                    .secret = srv->cfg.secret, .iteration = srv->ckpt_own};
    if ((status = gv_ps_client_hs_start(&p->hs, &p->link, &info)) != GV_OK)
        return status;
    while (srv->state != SRV_ABORTED && !p->closed && srv->dec_cur.iter == UINT64_MAX) {
        if (gv_now_ns() > deadline_ns) {
            gv_log(GV_LOG_ERROR, "server %u: no welcome and decision from server 0 at %s:%u "
                   "before the start-up deadline", srv->rank, hp.host, hp.port);
            return GV_ERR_TIMEOUT;
        }
        if (gv_tp_progress(srv->tp, 50) < 0)
            return GV_ERR_IO;
    }
    if (srv->state == SRV_ABORTED) {
        gv_log(GV_LOG_ERROR, "server %u: start-up failed: %s", srv->rank, srv->fail);
        return srv->result;
    }
    if (p->closed) {
        gv_log(GV_LOG_ERROR, "server %u: server 0 closed the connection during start-up%s%s",
               srv->rank, p->hs.why[0] ? ": " : "", p->hs.why);
        return GV_ERR_CLOSED;
    }
    return GV_OK;
}

/* ---------------------------------------------------------------- model and decisions */

gv_status_t srv_send_decision(struct gv_server *srv, struct srv_peer *p,
                              const struct srv_decision *d, enum gv_proto_msg_type type,
                              const uint8_t *memb)
{
    struct gv_proto_msg m;
    gv_ps_link_msg(&p->link, &m, type, d->iter);
    m.u.decision = d->d;
    struct gv_iov pl[2];
    int n = 0;
    if (memb != NULL) {
        gv_proto_seg_add(&m, GV_PROTO_SEG_RAW, GV_PROTO_ENC_BYTES, srv->W, srv->W);
        pl[n++] = (struct gv_iov){(void *)(uintptr_t)memb, srv->W};
    }
    if (srv->job->method == GV_JOB_ACCORDION) {
        gv_proto_seg_add(&m, GV_PROTO_SEG_RAW, GV_PROTO_ENC_BYTES, srv->n_tensors, srv->n_tensors);
        pl[n++] = (struct gv_iov){d->heavy, srv->n_tensors};
    }
    return gv_ps_link_send(&p->link, &m, pl, n, NULL);
}

static gv_status_t srv_send_chunks(struct gv_server *srv, struct srv_peer *p, const float *v,
                                   uint32_t tensor_id, uint64_t checksum, uint64_t *bytes)
{
    for (uint64_t off = 0; off < srv->n; off += SRV_MODEL_CHUNK) {
        uint64_t len = GV_MIN(SRV_MODEL_CHUNK, srv->n - off);
        struct gv_proto_msg m;
        gv_ps_link_msg(&p->link, &m, GV_PROTO_MSG_MODEL, srv->iter);
        m.tensor_id = tensor_id;
        m.dtype = GV_PROTO_DTYPE_F32;
        m.numel = len;
        m.u.model.offset = off;
        m.u.model.checksum = checksum;
        gv_proto_seg_add(&m, GV_PROTO_SEG_DENSE, GV_PROTO_ENC_F32, len, 4 * len);
        struct gv_iov pl = {(void *)(uintptr_t)(v + off), 4 * len};
        uint64_t b;
        gv_status_t status = gv_ps_link_send(&p->link, &m, &pl, 1, &b);
        if (status != GV_OK)
            return status;
        *bytes += b;
    }
    return GV_OK;
}

gv_status_t srv_send_model(struct gv_server *srv, struct srv_peer *p, bool with_decision)
{
    uint64_t bytes = 0, ck = gv_ps_checksum(srv->params, srv->n);
    gv_status_t status = srv_send_chunks(srv, p, srv->params, 0, ck, &bytes);
    if (status == GV_OK)
        status = srv_send_chunks(srv, p, srv->momentum, 1, 0, &bytes);
    if (status == GV_OK && with_decision)
        status = srv_send_decision(srv, p, &srv->dec_cur, GV_PROTO_MSG_DECISION, NULL);
    if (status != GV_OK) {
        srv_abort(srv, status, "cannot send the model to %s: %s", p->name, gv_status_str(status));
        return status;
    }
    if (!with_decision)
        srv->round_sent += bytes;
    return GV_OK;
}

void srv_sync_ready_workers(struct gv_server *srv)
{
    if (srv->state == SRV_ABORTED || srv->state == SRV_ENDING || !srv->seeded ||
        !srv->settled || srv->dec_cur.iter != srv->iter)
        return;
    if (srv->state == SRV_STARTING)
        srv->state = SRV_RUNNING;
    for (uint32_t w = 0; w < srv->W; w++) {
        struct srv_peer *p = srv->workers[w];
        if (p == NULL || p->synced || p->closed)
            continue;
        if (srv_send_model(srv, p, true) != GV_OK)
            return;
        p->synced = true;
        gv_log(GV_LOG_DEBUG, "server %u: model and decision sent to %s", srv->rank, p->name);
    }
    srv_round_try_open(srv);
}

void srv_send_bye(struct gv_server *srv, struct srv_peer *p)
{
    if (p == NULL || p->closed || p->bye_sent)
        return;
    struct gv_proto_msg m;
    gv_ps_link_msg(&p->link, &m, GV_PROTO_MSG_BYE, srv->rounds_done);
    (void)gv_ps_link_send(&p->link, &m, NULL, 0, NULL);
    p->bye_sent = true;
}

/* Every worker is told the job is over (those that said BYE get it as the answer). */
void srv_send_bye_all(struct gv_server *srv)
{
    for (uint32_t w = 0; w < srv->W; w++)
        srv_send_bye(srv, srv->workers[w]);
}

/* ---------------------------------------------------------------- transport callbacks */

/* Worker 0's seed: chunks of the initial parameters, straight into the shard. */
static gv_status_t srv_seed_header(struct gv_server *srv, struct srv_peer *p,
                                   const struct gv_proto_msg *m, uint64_t payload_len,
                                   struct gv_iov *dst, int *cnt)
{
    if (p->kind != SRV_PEER_WORKER || p->rank != 0 || m->tensor_id != 0 || m->n_segs != 1 ||
        m->segs[0].kind != GV_PROTO_SEG_DENSE || m->segs[0].enc != GV_PROTO_ENC_F32 ||
        m->u.model.offset > srv->n || m->numel > srv->n - m->u.model.offset) {
        gv_log(GV_LOG_WARN, "server %u: %s sent a malformed model chunk", srv->rank, p->name);
        return GV_ERR_PROTO;
    }
    if (srv->seeded || srv->iter != 0) {
        dst[0] = (struct gv_iov){NULL, payload_len}; /* already have a model: discard */
    } else {
        dst[0] = (struct gv_iov){srv->params + m->u.model.offset, payload_len};
    }
    *cnt = 1;
    return GV_OK;
}

static gv_status_t srv_on_header(struct gv_conn *c, const void *msg, size_t msg_len,
                                 uint64_t payload_len, struct gv_iov *dst, int *dst_cnt,
                                 void *user)
{
    struct gv_server *srv = user;
    struct srv_peer *p = c->user;
    struct gv_proto_msg m;
    gv_status_t status = gv_proto_decode(msg, msg_len, &srv->caps, &srv->arena, &m);
    if (status != GV_OK)
        return status;
    if (srv->state == SRV_ABORTED || srv->state == SRV_DONE) {
        dst[0] = (struct gv_iov){NULL, payload_len};
        *dst_cnt = 1;
        return GV_OK;
    }
    switch (m.type) {
    case GV_PROTO_MSG_PUSH:
        if (p->kind != SRV_PEER_WORKER)
            break;
        return srv_round_push_header(srv, p, &m, payload_len, dst, dst_cnt);
    case GV_PROTO_MSG_MODEL:
        return srv_seed_header(srv, p, &m, payload_len, dst, dst_cnt);
    case GV_PROTO_MSG_DECISION: {
        /* the round membership (W bytes), then Accordion's per-tensor levels */
        bool acc = srv->job->method == GV_JOB_ACCORDION;
        if (p->kind != SRV_PEER_COORD || m.n_segs != 1u + acc ||
            m.segs[0].kind != GV_PROTO_SEG_RAW || m.segs[0].bytes != srv->W ||
            (acc && (m.segs[1].kind != GV_PROTO_SEG_RAW || m.segs[1].bytes != srv->n_tensors)))
            break;
        struct srv_decision *d = srv->dec_cur.iter == UINT64_MAX ? &srv->dec_cur : &srv->dec_next;
        dst[0] = (struct gv_iov){srv->memb, srv->W};
        if (acc)
            dst[1] = (struct gv_iov){d->heavy, srv->n_tensors};
        *dst_cnt = 1 + acc;
        return GV_OK;
    }
    case GV_PROTO_MSG_STATS:
        if (p->kind != SRV_PEER_SERVER || m.n_segs != 1 || m.segs[0].kind != GV_PROTO_SEG_RAW ||
            m.segs[0].bytes != srv->W || srv->got_report[p->rank])
            break;
        dst[0] = (struct gv_iov){srv->reports + (size_t)p->rank * srv->W, srv->W};
        *dst_cnt = 1;
        return GV_OK;
    default:
        break;
    }
    gv_log(GV_LOG_WARN, "server %u: %s sent an unexpected %s with a payload", srv->rank, p->name,
           gv_proto_msg_type_str(m.type));
    return GV_ERR_PROTO;
}

static void srv_on_coord_msg(struct gv_server *srv, struct srv_peer *p,
                             const struct gv_proto_msg *m)
{
    if (p->hs.state != GV_PS_CLIENT_WELCOMED) {
        if (gv_ps_client_hs_on_msg(&p->hs, &p->link, m) != GV_OK) {
            srv_abort_now(srv, GV_ERR_AUTH, false, p->hs.why);
            return;
        }
        if (p->hs.state == GV_PS_CLIENT_WELCOMED)
            srv_coord_welcomed(srv, p);
        return;
    }
    char text[320];
    switch (m->type) {
    case GV_PROTO_MSG_DECISION:
        /* on_header put the membership in srv->memb (a DECISION without it is malformed) */
        if (m->n_segs == 0 || gv_ps_memb_check(srv->memb, srv->W, GV_PS_MEMB_ARRIVED |
                                                                      GV_PS_MEMB_NEXT) != GV_OK) {
            srv_abort_now(srv, GV_ERR_PROTO, false, "server 0 sent a malformed decision");
            return;
        }
        if (srv->dec_cur.iter == UINT64_MAX && m->iteration == srv->iter) {
            srv->dec_cur.iter = m->iteration;
            srv->dec_cur.d = m->u.decision;
            for (uint32_t w = 0; w < srv->W; w++)
                srv->expected[w] = (srv->memb[w] & GV_PS_MEMB_NEXT) != 0;
            srv->settled = true;
            srv_sync_ready_workers(srv);
            return;
        }
        if (m->iteration != srv->iter + 1 || srv->dec_next.iter == m->iteration) {
            snprintf(text, sizeof(text), "server 0 sent a decision for iteration %" PRIu64
                     " during round %" PRIu64, m->iteration, srv->iter);
            srv_abort_now(srv, GV_ERR_PROTO, false, text);
            return;
        }
        srv->dec_next.iter = m->iteration;
        srv->dec_next.d = m->u.decision;
        srv_round_on_decision(srv);
        return;
    case GV_PROTO_MSG_ERROR:
        /* server 0 ended the job at its iteration m->iteration: this server's state is the
         * same cut when it is at that iteration too (DECISIONs travel before the ERROR) */
        snprintf(text, sizeof(text), "%s", m->u.error.text ? m->u.error.text : "server 0 failed");
        srv_abort_now(srv, m->u.error.code == GV_OK ? GV_OK : GV_ERR_CLOSED,
                      m->iteration == srv->iter, text);
        return;
    case GV_PROTO_MSG_HEARTBEAT:
    case GV_PROTO_MSG_BYE:
        return;
    default:
        snprintf(text, sizeof(text), "server 0 sent an unexpected %s",
                 gv_proto_msg_type_str(m->type));
        srv_abort_now(srv, GV_ERR_PROTO, false, text);
    }
}

/* Server 0: a message from server s > 0. */
static void srv_on_server_msg(struct gv_server *srv, struct srv_peer *p,
                              const struct gv_proto_msg *m)
{
    switch (m->type) {
    case GV_PROTO_MSG_BYE:
        p->bye = true;
        return;
    case GV_PROTO_MSG_STATS:
        if (m->n_segs != 1 || m->iteration != srv->iter || srv->got_report[p->rank] ||
            gv_ps_memb_check(srv->reports + (size_t)p->rank * srv->W, srv->W,
                             GV_PS_MEMB_ARRIVED | GV_PS_MEMB_DEAD) != GV_OK) {
            srv_abort(srv, GV_ERR_PROTO, "%s sent a malformed membership for iteration %" PRIu64
                      " during round %" PRIu64, p->name, m->iteration, srv->iter);
            return;
        }
        srv_round_on_report(srv, p->rank);
        return;
    case GV_PROTO_MSG_ERROR:
        if (m->u.error.code == GV_OK)
            srv_stop(srv, m->u.error.text ? m->u.error.text : "a server asked to stop");
        else
            srv_abort(srv, GV_ERR_CLOSED, "%s", m->u.error.text ? m->u.error.text
                                                              : "a server failed");
        return;
    case GV_PROTO_MSG_REFUSE:
        srv_abort(srv, GV_ERR_PROTO, "%s refused to join: %s", p->name,
                  m->u.refuse.text ? m->u.refuse.text : "");
        return;
    case GV_PROTO_MSG_HEARTBEAT:
        return;
    default:
        srv_abort(srv, GV_ERR_PROTO, "%s sent an unexpected %s", p->name,
                  gv_proto_msg_type_str(m->type));
    }
}

static void srv_on_worker_msg(struct gv_server *srv, struct srv_peer *p,
                              const struct gv_proto_msg *m, uint64_t bytes)
{
    switch (m->type) {
    case GV_PROTO_MSG_PUSH:
        srv_round_push_done(srv, p, m, bytes);
        return;
    case GV_PROTO_MSG_MODEL:
        if (m->n_segs == 0) { /* a resync request after a checksum mismatch */
            gv_log(GV_LOG_WARN, "server %u: %s asks for a full model (checksum mismatch at "
                   "iteration %" PRIu64 ")", srv->rank, p->name, m->iteration);
            p->resync_req = true;
            return;
        }
        if (!srv->seeded && srv->iter == 0) {
            srv->seed_got += m->numel;
            if (srv->seed_got >= srv->n) {
                srv->seeded = true;
                gv_log(GV_LOG_INFO, "server %u: model seeded by worker 0 (checksum %016" PRIx64
                       ")", srv->rank, gv_ps_checksum(srv->params, srv->n));
                srv_sync_ready_workers(srv);
            }
        }
        return;
    case GV_PROTO_MSG_BYE:
        srv_round_on_bye(srv, p, m->iteration);
        return;
    case GV_PROTO_MSG_ERROR: {
        char why[300];
        const char *t = m->u.error.text ? m->u.error.text : "";
        if (m->u.error.code == GV_OK) { /* a stop on request (the worker got a signal) */
            snprintf(why, sizeof(why), "%s", t);
            srv_stop(srv, why);
        } else if (srv->cfg.dead_policy != GV_DEAD_CONTINUE) {
            srv_abort(srv, GV_ERR_CLOSED, "%s reported: %s", p->name, t);
        } else {
            snprintf(why, sizeof(why), "it stopped: %s", t);
            srv_worker_dead(srv, p, why);
        }
        return;
    }
    case GV_PROTO_MSG_REFUSE:
        srv_abort(srv, GV_ERR_PROTO, "%s refused to join: %s", p->name,
                  m->u.refuse.text ? m->u.refuse.text : "");
        return;
    case GV_PROTO_MSG_HEARTBEAT:
        return;
    default: {
        char why[200];
        snprintf(why, sizeof(why), "protocol violation: it sent an unexpected %s",
                 gv_proto_msg_type_str(m->type));
        srv_worker_dead(srv, p, why);
        srv_peer_close(p);
    }
    }
}

static void srv_on_msg(struct gv_conn *c, const void *msg, size_t msg_len, void *user)
{
    struct gv_server *srv = user;
    struct srv_peer *p = c->user;
    struct gv_proto_msg m;
    if (gv_proto_decode(msg, msg_len, &srv->caps, &srv->arena, &m) != GV_OK) {
        gv_log(GV_LOG_WARN, "server %u: %s sent an undecodable header; closing", srv->rank,
               p->name);
        srv_peer_close(p);
        return;
    }
    uint64_t bytes = msg_len + m.payload_len;
    p->link.bytes_recv += bytes;
    if (srv->state == SRV_ABORTED || srv->state == SRV_DONE)
        return;
    if (p->kind != SRV_PEER_NEW)
        srv_ops_seen(srv, p);
    switch (p->kind) {
    case SRV_PEER_NEW:
        srv_hs_on_msg(srv, p, &m);
        return;
    case SRV_PEER_COORD:
        srv_on_coord_msg(srv, p, &m);
        return;
    case SRV_PEER_SERVER:
        srv_on_server_msg(srv, p, &m);
        return;
    case SRV_PEER_WORKER:
        srv_on_worker_msg(srv, p, &m, bytes);
        return;
    }
}

static void srv_on_accept(struct gv_listener *l, struct gv_conn *c, void *user)
{
    (void)l;
    struct gv_server *srv = user;
    if (srv->state == SRV_ABORTED || srv->state == SRV_DONE) {
        gv_tp_conn_close(c);
        return;
    }
    struct srv_peer *p = srv_peer_new(srv, c, SRV_PEER_NEW);
    if (p == NULL) {
        gv_log(GV_LOG_ERROR, "server %u: out of memory for a connection from %s", srv->rank,
               c->peer);
        gv_tp_conn_close(c);
        return;
    }
    gv_ps_server_hs_init(&p->shs, srv->cfg.secret);
    gv_log(GV_LOG_DEBUG, "server %u: connection from %s", srv->rank, c->peer);
}

static void srv_on_close(struct gv_conn *c, gv_status_t reason, void *user)
{
    struct gv_server *srv = user;
    struct srv_peer *p = c->user;
    if (p == NULL)
        return;
    p->closed = true;
    p->link.c = NULL;
    bool live = srv->state == SRV_STARTING || srv->state == SRV_RUNNING;
    const char *why = reason == GV_OK ? "closed here" : gv_status_str(reason);
    if (srv->live_on && p->kind != SRV_PEER_NEW) /* no timeout for a closed connection */
        gv_liveness_mark_dead(&srv->live, srv_live_idx(srv, p), why);
    char text[200];
    switch (p->kind) {
    case SRV_PEER_NEW:
        if (reason == GV_ERR_PROTO || reason == GV_ERR_VERSION) {
            /* garbage, a truncated or oversized frame, another wire version: proto/ logged the
             * detail; this connection only is closed */
            gv_log(GV_LOG_WARN, "server %u: closed %s before it joined: %s", srv->rank, p->name,
                   reason == GV_ERR_VERSION ? "it speaks another wire version"
                                            : "it sent a malformed frame");
            srv_metrics_refused(srv, reason == GV_ERR_VERSION ? "version" : "protocol");
        } else {
            gv_log(GV_LOG_INFO, "server %u: %s left before joining (%s)", srv->rank, p->name, why);
        }
        return;
    case SRV_PEER_WORKER:
        if (p->bye || !live || p->dead)
            return;
        snprintf(text, sizeof(text), "disconnected (%s)", why);
        srv_worker_dead(srv, p, text);
        return;
    case SRV_PEER_SERVER:
        if (p->bye || srv->state == SRV_ABORTED || srv->state == SRV_DONE)
            return;
        srv_abort(srv, GV_ERR_CLOSED, "%s disconnected (%s)", p->name, why);
        return;
    case SRV_PEER_COORD:
        if (srv->state == SRV_ABORTED || srv->state == SRV_DONE)
            return;
        snprintf(text, sizeof(text), "server 0 (%s) disconnected (%s)", c->peer, why);
        srv_abort_now(srv, GV_ERR_CLOSED, srv->round != SRV_ROUND_WAIT_DECISION, text);
        return;
    }
}

struct gv_tp_handler srv_handler(void)
{
    return (struct gv_tp_handler){.prefix_len = GV_PROTO_PREFIX_LEN,
                                  .parse_prefix = srv_parse_prefix,
                                  .on_header = srv_on_header,
                                  .on_msg = srv_on_msg,
                                  .on_accept = srv_on_accept,
                                  .on_close = srv_on_close};
}
