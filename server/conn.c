/* conn.c: the server's connection dispatch, the only way into the round: the transport's
 * callbacks (each frame's header decoded once, then routed by the peer's kind and the message's
 * type), the server side of the handshake, the connection to server 0 (servers 1..S-1), and
 * what the run loop hands in (silent workers, a round that may open). A connection that
 * misbehaves before it joined is logged and closed; the server goes on serving the others. */
#include "srv.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Lines about connections that have not joined (anyone can open them, in a loop): each kind
 * at most 10 per 10 s, the rest counted (gv_log_limit). */
static struct gv_log_limit conn_lim_refused = GV_LOG_LIMIT_INIT(10, 10000);
static struct gv_log_limit conn_lim_hs = GV_LOG_LIMIT_INIT(10, 10000);
static struct gv_log_limit conn_lim_unexpected = GV_LOG_LIMIT_INIT(10, 10000);

/* Finishes rounds as long as they complete: metrics, the periodic checkpoint, the next round
 * (held while a checkpoint is written: it borrows the shard). */
static void conn_round(struct gv_server *srv, enum srv_round_event ev)
{
    while (ev == SRV_ROUND_DONE) {
        srv_metrics_round(srv, srv->round.t_last_ns);
        srv_ckpt_after_round(srv);
        if (srv->round.iter >= (uint64_t)srv->job->total_steps) {
            srv_end_done(srv, "every iteration is done");
            return;
        }
        ev = srv_round_try_open(srv, srv_ckpt_busy(srv));
    }
}

void srv_conn_poll_round(struct gv_server *srv)
{
    if (!srv->shard.ready)
        return; /* --model external: no round before the first layout */
    conn_round(srv, srv_round_try_open(srv, srv_ckpt_busy(srv)));
}

void srv_conn_worker_silent(struct gv_server *srv, struct srv_peer *p, const char *why)
{
    char text[200];
    snprintf(text, sizeof(text), "not responding: %s (hung, or its host unreachable?)", why);
    conn_round(srv, srv_round_worker_dead(srv, p, text, srv_ckpt_busy(srv)));
    if (!srv->round.dead[p->rank])
        srv_peer_close(p); /* the policy ended the job */
}

static gv_status_t conn_parse_prefix(const void *prefix, uint32_t *hdr_len_p,
                                     uint64_t *payload_len_p, void *user)
{
    static struct gv_log_limit lim = GV_LOG_LIMIT_INIT(10, 10000);
    struct gv_server *srv = user;
    char why[160];
    gv_status_t status =
        gv_proto_prefix_check(prefix, &srv->caps, hdr_len_p, payload_len_p, why, sizeof(why));
    if (status != GV_OK)
        GV_LOG_LIMITED(GV_LOG_WARN, &lim, "server %u: refused a frame: %s", srv->rank, why);
    return status;
}

/* Every send on p's link has completed. */
static void conn_link_idle(struct gv_ps_link *l, void *arg)
{
    struct srv_peer *p = arg;
    (void)l;
    if (p->close_after_send) {
        srv_peer_close(p);
        return;
    }
    if (p->kind == SRV_PEER_WORKER && p->srv->round.phase == SRV_ROUND_WAIT_OPEN)
        srv_conn_poll_round(p->srv); /* the update's buffers are free again */
}

/* ---------------------------------------------------------------- handshake, server side */

static void conn_hs_on_msg(struct gv_server *srv, struct srv_peer *p, const struct gv_proto_msg *m)
{
    struct gv_ps_server_hs_cfg hc = {.rank = srv->rank,
                                     .num_workers = srv->W,
                                     .num_servers = srv->S,
                                     .cluster_id = srv->cl->cluster_id,
                                     .secret = srv->cfg.secret};
    struct gv_proto_msg out;
    switch (gv_ps_server_hs_on_msg(&p->shs, &hc, m, &out)) {
    case GV_PS_HS_REPLY:
        p->hello_role = p->shs.role;
        p->rank = p->shs.rank;
        p->hello_iter = p->shs.iteration;
        snprintf(p->name, sizeof(p->name), "%s %u (%s)", gv_proto_role_str(p->hello_role), p->rank,
                 p->link.c->peer);
        if (gv_ps_link_send(&p->link, &out, NULL, 0, NULL) != GV_OK)
            srv_peer_close(p);
        return;
    case GV_PS_HS_JOINED:
        srv_start_joined(srv, p);
        srv_conn_poll_round(srv);
        return;
    case GV_PS_HS_REFUSED:
        GV_LOG_LIMITED(GV_LOG_WARN, &conn_lim_refused, "server %u: refused %s: %s", srv->rank,
                       p->name, p->shs.why);
        srv_metrics_refused(srv, gv_proto_refuse_str(p->shs.code));
        srv_peer_send_close(p, &out);
        return;
    case GV_PS_HS_CLOSED:
        GV_LOG_LIMITED(GV_LOG_WARN, &conn_lim_hs, "server %u: %s refused the handshake: %s",
                       srv->rank, p->name, p->shs.why);
        srv_metrics_refused(srv, "auth");
        srv_peer_close(p);
        return;
    }
}

/* ---------------------------------------------------------------- the connection to server 0 */

void srv_conn_coord(struct gv_server *srv)
{
    /* --model external: not before this server has the layout (server 0 compares
     * fingerprints at the handshake); the start-up deadline says when none came */
    if (srv->rank == 0 || srv->net.coord != NULL || srv->end.state != SRV_STARTING ||
        !srv->shard.ready)
        return;
    struct gv_hostport hp;
    gv_status_t status = gv_cluster_server_addr_try(srv->cl, 0, &hp);
    if (status == GV_ERR_AGAIN)
        return; /* server 0 has not published its address yet: the next turn looks again */
    struct gv_conn *c = NULL;
    if (status == GV_OK &&
        (status = gv_tp_connect_start(srv->net.tp, hp.host, hp.port, &c)) != GV_OK)
        gv_log(GV_LOG_ERROR, "server %u: cannot connect to server 0 at %s:%u: %s", srv->rank,
               hp.host, hp.port, gv_status_str(status));
    struct srv_peer *p = NULL;
    if (status == GV_OK && (p = srv_peer_new(srv, c, SRV_PEER_COORD, conn_link_idle)) == NULL) {
        gv_tp_conn_close(c);
        status = GV_ERR_NOMEM;
    }
    if (status != GV_OK) {
        srv_abort_now(srv, status, false, "cannot connect to server 0 (see above)");
        return;
    }
    snprintf(p->name, sizeof(p->name), "server 0 (%s)", c->peer);
    srv->net.coord = p;
    gv_log(GV_LOG_INFO, "server %u: connecting to %s", srv->rank, p->name);
    struct gv_ps_hello_info info = {.role = GV_PROTO_ROLE_SERVER,
                                    .rank = srv->rank,
                                    .num_workers = srv->W,
                                    .num_servers = srv->S,
                                    .cluster_id = srv->cl->cluster_id,
                                    .secret = srv->cfg.secret,
                                    .iteration = srv->ckpt.own};
    if ((status = gv_ps_client_hs_start(&p->hs, &p->link, &info)) != GV_OK)
        srv_abort_now(srv, status, false, "cannot start the handshake with server 0");
}

static void conn_coord_msg(struct gv_server *srv, struct srv_peer *p, const struct gv_proto_msg *m)
{
    if (p->hs.state != GV_PS_CLIENT_WELCOMED) {
        if (gv_ps_client_hs_on_msg(&p->hs, &p->link, m) != GV_OK) {
            srv_abort_now(srv, GV_ERR_AUTH, false, p->hs.why);
            return;
        }
        if (p->hs.state == GV_PS_CLIENT_WELCOMED)
            srv_start_coord_welcomed(srv, p);
        return;
    }
    char text[320];
    switch (m->type) {
    case GV_PROTO_MSG_DECISION: {
        bool first = srv->round.cur.iter == UINT64_MAX;
        enum srv_round_event ev = srv_round_on_decision(srv, m);
        if (first && srv->round.cur.iter != UINT64_MAX) {
            srv_start_coord_decided(srv);
            srv_conn_poll_round(srv);
        }
        conn_round(srv, ev);
        return;
    }
    case GV_PROTO_MSG_ERROR:
        /* server 0 ended the job at its iteration m->iteration: this server's state is the
         * same cut when it is at that iteration too (DECISIONs travel before the ERROR) */
        snprintf(text, sizeof(text), "%s", m->u.error.text ? m->u.error.text : "server 0 failed");
        srv_abort_now(srv,
                      m->u.error.code == GV_OK         ? GV_OK
                      : m->u.error.code == GV_ERR_CKPT ? GV_ERR_CKPT
                                                       : GV_ERR_CLOSED,
                      m->iteration == srv->round.iter, text);
        return;
    case GV_PROTO_MSG_BYE:
        /* server 0 ended the job well at its iteration m->iteration, which is this server's
         * (its DECISIONs came first) */
        if (m->iteration != srv->round.iter) {
            snprintf(text, sizeof(text),
                     "server 0 ended the job at iteration %" PRIu64 ", this server is at %" PRIu64,
                     m->iteration, srv->round.iter);
            srv_abort_now(srv, GV_ERR_PROTO, false, text);
            return;
        }
        srv_end_done(srv, "server 0 ended it");
        return;
    case GV_PROTO_MSG_HEARTBEAT: return;
    default:
        snprintf(text, sizeof(text), "server 0 sent an unexpected %s",
                 gv_proto_msg_type_str(m->type));
        srv_abort_now(srv, GV_ERR_PROTO, false, text);
    }
}

/* ---------------------------------------------------------------- messages */

static gv_status_t conn_on_header(struct gv_conn *c, const void *msg, size_t msg_len,
                                  uint64_t payload_len, struct gv_iov *dst, int *dst_cnt,
                                  void *user)
{
    struct gv_server *srv = user;
    struct srv_peer *p = c->user;
    const struct gv_proto_msg *m;
    gv_status_t status = gv_ps_rx_header(&p->rx, msg, msg_len, &srv->caps, &srv->net.arena, &m);
    if (status != GV_OK)
        return status;
    if (srv_over(srv)) {
        dst[0] = (struct gv_iov){NULL, payload_len};
        *dst_cnt = 1;
        return GV_OK;
    }
    switch (m->type) {
    case GV_PROTO_MSG_PUSH:
        if (p->kind != SRV_PEER_WORKER)
            break;
        return srv_round_push_header(srv, p, m, payload_len, dst, dst_cnt);
    case GV_PROTO_MSG_MODEL: return srv_start_seed_header(srv, p, m, payload_len, dst, dst_cnt);
    case GV_PROTO_MSG_LAYOUT: return srv_start_layout_header(srv, p, m, payload_len, dst, dst_cnt);
    case GV_PROTO_MSG_DECISION:
        if (p->kind != SRV_PEER_COORD || srv_round_decision_header(srv, m, dst, dst_cnt) != GV_OK)
            break;
        return GV_OK;
    case GV_PROTO_MSG_STATS:
        if (p->kind != SRV_PEER_SERVER || srv_round_stats_header(srv, p, m, dst, dst_cnt) != GV_OK)
            break;
        return GV_OK;
    default: break;
    }
    GV_LOG_LIMITED(GV_LOG_WARN, &conn_lim_unexpected,
                   "server %u: %s sent an unexpected %s with a payload", srv->rank, p->name,
                   gv_proto_msg_type_str(m->type));
    return GV_ERR_PROTO;
}

/* Server 0: a message from server s > 0. */
static void conn_server_msg(struct gv_server *srv, struct srv_peer *p, const struct gv_proto_msg *m)
{
    switch (m->type) {
    case GV_PROTO_MSG_BYE: p->bye = true; return;
    case GV_PROTO_MSG_STATS: conn_round(srv, srv_round_on_report(srv, p, m)); return;
    case GV_PROTO_MSG_ERROR:
        if (m->u.error.code == GV_OK)
            srv_stop(srv, m->u.error.text ? m->u.error.text : "a server asked to stop");
        else
            srv_abort(srv, GV_ERR_CLOSED, "%s",
                      m->u.error.text ? m->u.error.text : "a server failed");
        return;
    case GV_PROTO_MSG_REFUSE:
        srv_abort(srv, GV_ERR_PROTO, "%s refused to join: %s", p->name,
                  m->u.refuse.text ? m->u.refuse.text : "");
        return;
    case GV_PROTO_MSG_HEARTBEAT: return;
    default:
        srv_abort(srv, GV_ERR_PROTO, "%s sent an unexpected %s", p->name,
                  gv_proto_msg_type_str(m->type));
    }
}

static void conn_worker_dead(struct gv_server *srv, struct srv_peer *p, const char *why)
{
    conn_round(srv, srv_round_worker_dead(srv, p, why, srv_ckpt_busy(srv)));
}

static void conn_worker_msg(struct gv_server *srv, struct srv_peer *p, const struct gv_proto_msg *m,
                            uint64_t bytes)
{
    switch (m->type) {
    case GV_PROTO_MSG_PUSH: conn_round(srv, srv_round_push_done(srv, p, m, bytes)); return;
    case GV_PROTO_MSG_MODEL:
        if (m->n_segs == 0) { /* a resync request after a checksum mismatch */
            gv_log(GV_LOG_WARN,
                   "server %u: %s asks for a full model (checksum mismatch at "
                   "iteration %" PRIu64 ")",
                   srv->rank, p->name, m->iteration);
            srv_round_resync(srv, p);
            return;
        }
        srv_start_seed_done(srv, m);
        srv_conn_poll_round(srv);
        return;
    case GV_PROTO_MSG_BYE: srv_round_on_bye(srv, p, m->iteration); return;
    case GV_PROTO_MSG_ERROR: {
        char why[300];
        const char *t = m->u.error.text ? m->u.error.text : "";
        if (m->u.error.code == GV_OK) { /* a stop on request (the worker got a signal) */
            snprintf(why, sizeof(why), "%s", t);
            srv_stop(srv, why);
        } else if (srv->cfg.dead_policy != GV_DEAD_CONTINUE) {
            p->reported = true;
            /* a worker passing on server 0's verdict that a checkpoint failed: the job ends for
             * that reason here too (exit status 4), whichever message arrives first */
            gv_status_t cause = m->u.error.code == GV_ERR_CKPT ? GV_ERR_CKPT : GV_ERR_CLOSED;
            srv_abort(srv, cause, "%s reported: %s", p->name, t);
        } else {
            snprintf(why, sizeof(why), "it stopped: %s", t);
            conn_worker_dead(srv, p, why);
        }
        return;
    }
    case GV_PROTO_MSG_REFUSE:
        srv_abort(srv, GV_ERR_PROTO, "%s refused to join: %s", p->name,
                  m->u.refuse.text ? m->u.refuse.text : "");
        return;
    case GV_PROTO_MSG_HEARTBEAT: return;
    default: {
        char why[200];
        snprintf(why, sizeof(why), "protocol violation: it sent an unexpected %s",
                 gv_proto_msg_type_str(m->type));
        conn_worker_dead(srv, p, why);
        srv_peer_close(p);
    }
    }
}

static void conn_on_msg(struct gv_conn *c, const void *msg, size_t msg_len, void *user)
{
    struct gv_server *srv = user;
    struct srv_peer *p = c->user;
    const struct gv_proto_msg *m;
    if (gv_ps_rx_msg(&p->rx, msg, msg_len, &srv->caps, &srv->net.arena, &m) != GV_OK) {
        GV_LOG_LIMITED(GV_LOG_WARN, &conn_lim_unexpected,
                       "server %u: %s sent an undecodable header; closing", srv->rank, p->name);
        srv_peer_close(p);
        return;
    }
    uint64_t bytes = msg_len + m->payload_len;
    p->link.bytes_recv += bytes;
    if (m->n_segs == 0 && ((m->type == GV_PROTO_MSG_STATS && p->kind == SRV_PEER_SERVER) ||
                           (m->type == GV_PROTO_MSG_DECISION && p->kind == SRV_PEER_COORD &&
                            p->hs.state == GV_PS_CLIENT_WELCOMED))) {
        /* the final checkpoint's report or verdict: they come after the job's end */
        srv_ckpt_final_msg(srv, p, m);
        return;
    }
    if (srv_over(srv))
        return;
    if (p->kind != SRV_PEER_NEW)
        srv_ops_seen(srv, p);
    switch (p->kind) {
    case SRV_PEER_NEW:
        if (m->type == GV_PROTO_MSG_LAYOUT)
            srv_start_layout(srv, p, m);
        else
            conn_hs_on_msg(srv, p, m);
        return;
    case SRV_PEER_COORD: conn_coord_msg(srv, p, m); return;
    case SRV_PEER_SERVER: conn_server_msg(srv, p, m); return;
    case SRV_PEER_WORKER: conn_worker_msg(srv, p, m, bytes); return;
    }
}

static void conn_on_accept(struct gv_listener *l, struct gv_conn *c, void *user)
{
    (void)l;
    struct gv_server *srv = user;
    if (srv_over(srv)) {
        gv_tp_conn_close(c);
        return;
    }
    struct srv_peer *p = srv_peer_new(srv, c, SRV_PEER_NEW, conn_link_idle);
    if (p == NULL) {
        gv_log(GV_LOG_ERROR, "server %u: out of memory for a connection from %s", srv->rank,
               c->peer);
        gv_tp_conn_close(c);
        return;
    }
    gv_ps_server_hs_init(&p->shs, srv->cfg.secret);
    gv_log(GV_LOG_DEBUG, "server %u: connection from %s", srv->rank, c->peer);
}

/* A connection that closed before it joined: logged (rate-limited: a flood of them is one
 * client's doing) and its record freed. */
static void conn_new_closed(struct gv_server *srv, struct srv_peer *p, gv_status_t reason,
                            const char *why)
{
    static struct gv_log_limit lim_bad = GV_LOG_LIMIT_INIT(10, 10000);
    static struct gv_log_limit lim_left = GV_LOG_LIMIT_INIT(10, 10000);
    if (reason == GV_ERR_PROTO || reason == GV_ERR_VERSION) {
        /* garbage, a truncated or oversized frame, another wire version: proto/ logged the
         * detail; this connection only is closed */
        GV_LOG_LIMITED(GV_LOG_WARN, &lim_bad, "server %u: closed %s before it joined: %s",
                       srv->rank, p->name,
                       reason == GV_ERR_VERSION ? "it speaks another wire version"
                                                : "it sent a malformed frame");
        srv_metrics_refused(srv, reason == GV_ERR_VERSION ? "version" : "protocol");
    } else if (!p->close_after_send) {
        GV_LOG_LIMITED(GV_LOG_INFO, &lim_left, "server %u: %s left before joining (%s)", srv->rank,
                       p->name, why);
    }
    srv_peer_release(srv, p);
}

static void conn_on_close(struct gv_conn *c, gv_status_t reason, void *user)
{
    struct gv_server *srv = user;
    struct srv_peer *p = c->user;
    if (p == NULL)
        return;
    c->user = NULL;
    p->closed = true;
    p->link.c = NULL;
    const char *why = reason == GV_OK ? "closed here" : gv_status_str(reason);
    if (p->kind != SRV_PEER_NEW) /* no timeout for a closed connection */
        srv_ops_forget(srv, p, why);
    char text[400];
    switch (p->kind) {
    case SRV_PEER_NEW: conn_new_closed(srv, p, reason, why); return;
    case SRV_PEER_WORKER:
        if (p->bye || !srv_live(srv) || srv->round.dead[p->rank])
            return;
        snprintf(text, sizeof(text), "disconnected (%s)", why);
        conn_worker_dead(srv, p, text);
        return;
    case SRV_PEER_SERVER:
        if (p->bye || srv_over(srv))
            return;
        srv_abort(srv, GV_ERR_CLOSED, "%s disconnected (%s)", p->name, why);
        return;
    case SRV_PEER_COORD:
        if (srv_over(srv))
            return;
        if (p->hs.state == GV_PS_CLIENT_WELCOMED)
            snprintf(text, sizeof(text), "server 0 (%s) disconnected (%s)", c->peer, why);
        else if (reason == GV_ERR_TIMEOUT && c->bytes_sent == 0)
            snprintf(text, sizeof(text),
                     "cannot reach server 0 at %s within --connect-timeout: nothing accepted "
                     "the connection (is it up, and is that its address?)",
                     c->peer);
        else
            snprintf(text, sizeof(text),
                     "server 0 (%s) closed the connection during start-up (%s)%s%.100s", c->peer,
                     why, p->hs.why[0] ? ": " : "", p->hs.why);
        srv_abort_now(srv, GV_ERR_CLOSED, srv_end_at_cut(srv), text);
        return;
    }
}

struct gv_tp_handler srv_conn_handler(void)
{
    return (struct gv_tp_handler){.prefix_len = GV_PROTO_PREFIX_LEN,
                                  .parse_prefix = conn_parse_prefix,
                                  .on_header = conn_on_header,
                                  .on_msg = conn_on_msg,
                                  .on_accept = conn_on_accept,
                                  .on_close = conn_on_close};
}
