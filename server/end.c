/* end.c: how a server's job ends when it does not finish: an abort (a failure, logged once and
 * told to every peer), a stop on request (a signal, a peer's request), and on servers 1..S-1
 * the request to server 0 that decides where every server stops, with its deadline. */
#include "srv.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

bool srv_end_at_cut(const struct gv_server *srv)
{
    return srv->rank == 0 || srv->round.phase != SRV_ROUND_WAIT_DECISION;
}

void srv_abort_now(struct gv_server *srv, gv_status_t status, bool consistent, const char *text)
{
    struct srv_end *e = &srv->end;
    if (e->state == SRV_ABORTED)
        return;
    if (e->state == SRV_ENDING || e->state == SRV_DONE) {
        /* the job already ended well (server 0 decided it): what happens to a peer now
         * changes nothing of the training, and every process reports the same end */
        gv_log(GV_LOG_INFO, "server %u: after the end of the job: %s", srv->rank, text);
        return;
    }
    snprintf(e->fail, sizeof(e->fail), "%s", text);
    e->stopped = status == GV_OK;
    e->final_ok = consistent && srv->start.settled && !e->refused;
    uint64_t iter = srv->round.iter;
    gv_log(e->stopped ? GV_LOG_WARN : GV_LOG_ERROR,
           "server %u: %s the job at iteration %" PRIu64 ": %s", srv->rank,
           e->stopped ? "stopping" : "aborting", iter, e->fail);
    e->state = SRV_ABORTED;
    e->result = e->stopped ? GV_ERR_CLOSED : status;
    char msg[400];
    if (e->stopped && srv->rank == 0)
        snprintf(msg, sizeof(msg), "server 0 stopped the job at iteration %" PRIu64 ": %.200s",
                 iter, e->fail);
    else
        snprintf(msg, sizeof(msg), "server %u %s the job: %.200s", srv->rank,
                 e->stopped ? "stopped" : "aborted", e->fail);
    srv_send_error_all(srv, iter, e->stopped ? GV_OK : status, msg);
}

/* Servers 1..S-1: asks server 0 to end the job (it decides, so that every server stops at the
 * same iteration) and goes on meanwhile; srv_end_tick aborts here if no answer comes. */
static void end_request(struct gv_server *srv, gv_status_t status, const char *text)
{
    struct srv_end *e = &srv->end;
    if (e->abort_requested) { /* server 0 decides where the job ends: this is for the record */
        gv_log(GV_LOG_INFO, "server %u: while asking server 0 to end the job: %s", srv->rank, text);
        return;
    }
    e->abort_requested = true;
    e->abort_status = status;
    e->abort_deadline =
        gv_now_ns() + (srv->cfg.peer_timeout_ns ? srv->cfg.peer_timeout_ns : 5000000000ull);
    snprintf(e->fail, sizeof(e->fail), "%s", text);
    gv_log(status == GV_OK ? GV_LOG_WARN : GV_LOG_ERROR,
           "server %u: %s; asking server 0 to %s "
           "the job",
           srv->rank, text, status == GV_OK ? "stop" : "end");
    /* the link cuts it to the wire's cap: refused, the request would fail and this server
     * would end the job on its own, with its own status, instead of server 0's */
    char msg[400];
    snprintf(msg, sizeof(msg), "server %u: %s", srv->rank, text);
    struct srv_peer *c = srv->net.coord;
    struct gv_proto_msg m;
    gv_ps_link_msg(&c->link, &m, GV_PROTO_MSG_ERROR, srv->round.iter);
    m.u.error.code = status;
    m.u.error.text = msg;
    if (gv_ps_link_send(&c->link, &m, NULL, 0, NULL) != GV_OK)
        srv_abort_now(srv, status, srv_end_at_cut(srv), text);
}

void srv_abort(struct gv_server *srv, gv_status_t status, const char *fmt, ...)
{
    if (srv->end.state == SRV_ABORTED)
        return;
    char text[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (srv->end.state == SRV_ENDING || srv->end.state == SRV_DONE) {
        gv_log(GV_LOG_INFO, "server %u: after the end of the job: %s", srv->rank, text);
        return;
    }
    if (srv->rank > 0 && srv_net_coord_alive(srv)) {
        end_request(srv, status, text);
        return;
    }
    srv_abort_now(srv, status, srv_end_at_cut(srv), text);
}

void srv_stop(struct gv_server *srv, const char *why)
{
    if (srv->end.state != SRV_STARTING && srv->end.state != SRV_RUNNING)
        return; /* ending already: a stop request has nothing left to stop */
    if (srv->rank > 0 && srv_net_coord_alive(srv)) {
        end_request(srv, GV_OK, why);
        return;
    }
    srv_abort_now(srv, GV_OK, srv_end_at_cut(srv), why);
}

void srv_end_done(struct gv_server *srv, const char *why)
{
    struct srv_end *e = &srv->end;
    if (e->state != SRV_STARTING && e->state != SRV_RUNNING)
        return;
    e->state = SRV_ENDING;
    e->abort_requested = false; /* server 0 ended the job well: a pending request is moot */
    uint64_t iter = srv->round.iter;
    gv_log(GV_LOG_INFO, "server %u: the job ends at iteration %" PRIu64 ": %s", srv->rank, iter,
           why);
    if (srv->rank == 0)
        for (uint32_t s = 1; s < srv->S; s++)
            srv_send_bye(srv, srv->net.servers[s], iter);
    /* the workers are answered once the final checkpoint is decided (srv_end_answer) */
    /* pushes deferred for the round that will not happen are read (and dropped) now, and the
     * BYEs behind them */
    for (uint32_t w = 0; w < srv->W; w++) {
        struct srv_peer *q = srv->net.workers[w];
        if (q != NULL && q->link.c != NULL) {
            q->deferred = false;
            (void)gv_tp_conn_resume_recv(q->link.c);
        }
    }
}

void srv_end_answer(struct gv_server *srv, gv_status_t verdict)
{
    struct srv_end *e = &srv->end;
    if (e->state != SRV_ENDING || e->answered)
        return;
    e->answered = true;
    uint64_t iter = srv->round.iter;
    if (verdict == GV_OK) {
        srv_send_bye_all(srv, iter);
        return;
    }
    char text[300], from[64];
    if (srv->ckpt.committed > 0)
        snprintf(from, sizeof(from), "iteration %" PRIu64, srv->ckpt.committed);
    else
        snprintf(from, sizeof(from), "nothing (no checkpoint committed)");
    snprintf(text, sizeof(text),
             "the job is done, but its final checkpoint (iteration %" PRIu64 ") was not written "
             "by every server: it can be resumed from %s",
             iter, from);
    gv_log(GV_LOG_ERROR, "server %u: %s", srv->rank, text);
    srv_send_error_workers(srv, iter, GV_ERR_CKPT, text);
}

void srv_end_tick(struct gv_server *srv, uint64_t now)
{
    struct srv_end *e = &srv->end;
    if (!e->abort_requested || e->state == SRV_ABORTED || now <= e->abort_deadline)
        return;
    char text[400];
    snprintf(text, sizeof(text), "%.300s (server 0 did not answer the request to end the job)",
             e->fail);
    srv_abort_now(srv, e->abort_status, srv_end_at_cut(srv), text);
}
