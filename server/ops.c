/* ops.c: a server's failure detection: heartbeats on idle links and the liveness of every
 * joined peer (ops/'s tracker fed with messages, received bytes and heartbeats). A silent
 * server ends the job here; a silent worker is handed back to the caller, whose round applies
 * the dead-worker policy. */
#include "srv.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

gv_status_t srv_ops_init(struct gv_server *srv)
{
    struct srv_live *lv = &srv->live;
    if (srv->cfg.peer_timeout_ns == 0)
        return GV_OK;
    gv_status_t status =
        gv_liveness_init(&lv->tracker, srv->W + srv->S, srv->cfg.peer_timeout_ns, gv_now_ns());
    if (status != GV_OK)
        return status;
    /* nobody is tracked before it joins: start-up has its own deadline (--connect-timeout) */
    for (uint32_t i = 0; i < srv->W + srv->S; i++)
        gv_liveness_mark_dead(&lv->tracker, i, "not joined");
    lv->on = true;
    return GV_OK;
}

void srv_ops_cleanup(struct gv_server *srv)
{
    if (srv->live.on)
        gv_liveness_cleanup(&srv->live.tracker);
    srv->live.on = false;
}

void srv_ops_joined(struct gv_server *srv, struct srv_peer *p)
{
    p->t_seen_ns = gv_now_ns();
    if (srv->live.on)
        gv_liveness_revive(&srv->live.tracker, srv_live_idx(srv, p), p->t_seen_ns);
    if (p->link.c != NULL)
        p->seen_bytes = p->link.c->bytes_recv;
}

static bool ops_worker_out(const struct gv_server *srv, const struct srv_peer *p)
{
    return p->kind == SRV_PEER_WORKER && srv->round.dead[p->rank];
}

void srv_ops_seen(struct gv_server *srv, struct srv_peer *p)
{
    p->t_seen_ns = gv_now_ns();
    if (srv->live.on && !ops_worker_out(srv, p))
        gv_liveness_seen(&srv->live.tracker, srv_live_idx(srv, p), p->t_seen_ns);
}

void srv_ops_forget(struct gv_server *srv, struct srv_peer *p, const char *why)
{
    if (srv->live.on)
        gv_liveness_mark_dead(&srv->live.tracker, srv_live_idx(srv, p), why);
}

static bool ops_joined(const struct gv_server *srv, const struct srv_peer *p)
{
    return p->kind != SRV_PEER_NEW && !p->closed && p->link.c != NULL && !ops_worker_out(srv, p) &&
           !p->welcome_due && (p->kind != SRV_PEER_COORD || p->hs.state == GV_PS_CLIENT_WELCOMED);
}

/* A server silent past the timeout ends the job. */
static void ops_server_silent(struct gv_server *srv, uint32_t idx)
{
    const char *why = gv_liveness_why(&srv->live.tracker, idx);
    uint32_t s = idx - srv->W;
    struct srv_peer *p = srv->rank == 0 ? srv->net.servers[s] : srv->net.coord;
    char text[200];
    snprintf(text, sizeof(text), "%s is not responding: %s (hung, or its host unreachable?)",
             p != NULL ? p->name : "a server", why);
    if (srv->rank == 0)
        srv_abort(srv, GV_ERR_TIMEOUT, "%s", text);
    else
        srv_abort_now(srv, GV_ERR_TIMEOUT, srv_end_at_cut(srv), text);
    if (p != NULL)
        srv_peer_close(p);
}

/* This process itself did not run for a while (SIGSTOP, a paused VM, a swap storm): its
 * peers were not silent, it was not listening. They get a fresh timeout instead of the blame;
 * if they are really gone, the messages waiting for this process (closes, errors) or a new
 * timeout say so. */
static void ops_own_stall(struct gv_server *srv, uint64_t now)
{
    struct srv_live *lv = &srv->live;
    uint64_t gap = now - lv->t_tick_ns;
    if (lv->t_tick_ns == 0 || !lv->on || gap <= srv->cfg.peer_timeout_ns / 2)
        return;
    gv_log(GV_LOG_WARN,
           "server %u: this process did not run for %.1f s (stopped, or the host "
           "stalled): every peer gets a fresh %.1f s timeout",
           srv->rank, (double)gap * 1e-9, (double)srv->cfg.peer_timeout_ns * 1e-9);
    for (uint32_t i = 0; i < srv->W + srv->S; i++)
        gv_liveness_seen(&lv->tracker, i, now);
}

int srv_ops_tick(struct gv_server *srv, uint64_t now, struct srv_peer **silent, size_t cap,
                 size_t *n_p)
{
    struct srv_live *lv = &srv->live;
    *n_p = 0;
    ops_own_stall(srv, now);
    lv->t_tick_ns = now;
    /* liveness while the job runs; heartbeats until the end (the end has its own deadline) */
    bool active = srv_live(srv);
    for (struct srv_peer *p = srv->net.joined.head; p != NULL && !srv_over(srv); p = p->next) {
        if (!ops_joined(srv, p))
            continue;
        srv_send_heartbeat(srv, p, srv->round.iter, now);
        /* bytes arriving (a long message on its way) prove life as well as a message; a push
         * this server leaves unread has the peer's heartbeats queued behind it */
        uint64_t b = p->link.c->bytes_recv;
        if (b != p->seen_bytes)
            p->t_seen_ns = now;
        if (lv->on && active && (b != p->seen_bytes || p->deferred))
            gv_liveness_seen(&lv->tracker, srv_live_idx(srv, p), now);
        p->seen_bytes = b;
    }
    if (lv->on && active) {
        uint32_t dead[16];
        size_t n;
        gv_liveness_check(&lv->tracker, now, dead, GV_ARRAY_LEN(dead), &n);
        for (size_t i = 0; i < GV_MIN(n, GV_ARRAY_LEN(dead)); i++) {
            if (dead[i] >= srv->W) {
                ops_server_silent(srv, dead[i]);
                continue;
            }
            struct srv_peer *p = srv->net.workers[dead[i]];
            if (p != NULL && !srv->round.dead[p->rank] && *n_p < cap)
                silent[(*n_p)++] = p;
        }
    }
    /* the next thing that can happen: a heartbeat due, a peer's deadline */
    uint64_t wait = 100000000ull;
    if (srv->cfg.heartbeat_interval_ns > 0)
        wait = GV_MIN(wait, srv->cfg.heartbeat_interval_ns / 2);
    if (lv->on)
        wait = GV_MIN(wait, gv_liveness_next_deadline(&lv->tracker, now));
    return (int)GV_MAX(1ull, GV_MIN(wait / 1000000ull, 100ull));
}
