/* server_ops.c: a server's failure detection: heartbeats on idle links, the liveness of every
 * joined peer (ops/'s tracker fed with messages, received bytes and heartbeats), dead workers
 * under the dead-worker policy, and the deadline of an abort request to server 0. */
#include "server_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

gv_status_t srv_ops_init(struct gv_server *srv)
{
    if (srv->cfg.peer_timeout_ns == 0)
        return GV_OK;
    gv_status_t status =
        gv_liveness_init(&srv->live, srv->W + srv->S, srv->cfg.peer_timeout_ns, gv_now_ns());
    if (status != GV_OK)
        return status;
    /* nobody is tracked before it joins: start-up has its own deadline (--connect-timeout) */
    for (uint32_t i = 0; i < srv->W + srv->S; i++)
        gv_liveness_mark_dead(&srv->live, i, "not joined");
    srv->live_on = true;
    return GV_OK;
}

void srv_ops_cleanup(struct gv_server *srv)
{
    if (srv->live_on)
        gv_liveness_cleanup(&srv->live);
    srv->live_on = false;
}

void srv_ops_joined(struct gv_server *srv, struct srv_peer *p)
{
    p->t_seen_ns = gv_now_ns();
    if (srv->live_on)
        gv_liveness_revive(&srv->live, srv_live_idx(srv, p), p->t_seen_ns);
    if (p->link.c != NULL)
        p->seen_bytes = p->link.c->bytes_recv;
}

void srv_ops_seen(struct gv_server *srv, struct srv_peer *p)
{
    p->t_seen_ns = gv_now_ns();
    if (srv->live_on && !p->dead)
        gv_liveness_seen(&srv->live, srv_live_idx(srv, p), p->t_seen_ns);
}

static bool ops_joined(const struct srv_peer *p)
{
    return p->kind != SRV_PEER_NEW && !p->closed && p->link.c != NULL && !p->dead &&
           (p->kind != SRV_PEER_COORD || p->hs.state == GV_PS_CLIENT_WELCOMED);
}

static void ops_heartbeat(struct gv_server *srv, struct srv_peer *p, uint64_t now)
{
    if (srv->cfg.heartbeat_interval_ns == 0 || !gv_ps_link_idle(&p->link) ||
        now - p->link.t_sent_ns < srv->cfg.heartbeat_interval_ns)
        return;
    struct gv_proto_msg m;
    gv_ps_link_msg(&p->link, &m, GV_PROTO_MSG_HEARTBEAT, srv->iter);
    (void)gv_ps_link_send(&p->link, &m, NULL, 0, NULL); /* busy: try again next tick */
}

/* A peer silent past the timeout: a worker follows the policy, a server ends the job. */
static void ops_peer_timeout(struct gv_server *srv, uint32_t idx)
{
    const char *why = gv_liveness_why(&srv->live, idx);
    char text[200];
    if (idx < srv->W) {
        struct srv_peer *p = srv->workers[idx];
        if (p == NULL || p->dead)
            return;
        snprintf(text, sizeof(text), "not responding: %s (hung, or its host unreachable?)", why);
        srv_worker_dead(srv, p, text);
        if (!p->dead)
            srv_peer_close(p); /* the policy ended the job */
        return;
    }
    uint32_t s = idx - srv->W;
    struct srv_peer *p = srv->rank == 0 ? srv->servers[s] : srv->coord;
    snprintf(text, sizeof(text), "%s is not responding: %s (hung, or its host unreachable?)",
             p != NULL ? p->name : "a server", why);
    if (srv->rank == 0)
        srv_abort(srv, GV_ERR_TIMEOUT, "%s", text);
    else
        srv_abort_now(srv, GV_ERR_TIMEOUT, srv->round != SRV_ROUND_WAIT_DECISION, text);
    if (p != NULL)
        srv_peer_close(p);
}

/* This process itself did not run for a while (SIGSTOP, a paused VM, a swap storm): its
 * peers were not silent, it was not listening. They get a fresh timeout instead of the blame;
 * if they are really gone, the messages waiting for this process (closes, errors) or a new
 * timeout say so. */
static void ops_own_stall(struct gv_server *srv, uint64_t now)
{
    uint64_t gap = now - srv->t_tick_ns;
    if (srv->t_tick_ns == 0 || !srv->live_on || gap <= srv->cfg.peer_timeout_ns / 2)
        return;
    gv_log(GV_LOG_WARN, "server %u: this process did not run for %.1f s (stopped, or the host "
           "stalled): every peer gets a fresh %.1f s timeout", srv->rank, (double)gap * 1e-9,
           (double)srv->cfg.peer_timeout_ns * 1e-9);
    for (uint32_t i = 0; i < srv->W + srv->S; i++)
        gv_liveness_seen(&srv->live, i, now);
}

int srv_ops_tick(struct gv_server *srv, uint64_t now)
{
    ops_own_stall(srv, now);
    srv->t_tick_ns = now;
    /* liveness while the job runs; heartbeats until the end (the end has its own deadline) */
    bool active = srv->state == SRV_STARTING || srv->state == SRV_RUNNING;
    for (struct srv_peer *p = srv->peers; p != NULL; p = p->next) {
        if (!ops_joined(p) || srv->state == SRV_ABORTED || srv->state == SRV_DONE)
            continue;
        ops_heartbeat(srv, p, now);
        /* bytes arriving (a long message on its way) prove life as well as a message; a push
         * this server leaves unread has the peer's heartbeats queued behind it */
        uint64_t b = p->link.c->bytes_recv;
        if (b != p->seen_bytes)
            p->t_seen_ns = now;
        if (srv->live_on && active && (b != p->seen_bytes || p->deferred))
            gv_liveness_seen(&srv->live, srv_live_idx(srv, p), now);
        p->seen_bytes = b;
    }
    if (srv->live_on && active) {
        uint32_t dead[16];
        size_t n;
        gv_liveness_check(&srv->live, now, dead, GV_ARRAY_LEN(dead), &n);
        for (size_t i = 0; i < GV_MIN(n, GV_ARRAY_LEN(dead)); i++)
            ops_peer_timeout(srv, dead[i]);
    }
    if (srv->abort_requested && srv->state != SRV_ABORTED && now > srv->abort_deadline) {
        char text[400];
        snprintf(text, sizeof(text), "%.300s (server 0 did not answer the request to end the "
                 "job)", srv->fail);
        srv_abort_now(srv, srv->abort_status, srv->round != SRV_ROUND_WAIT_DECISION, text);
    }
    srv_metrics_tick(srv, now);
    /* the next thing that can happen: a heartbeat due, a peer's deadline */
    uint64_t wait = 100000000ull;
    if (srv->cfg.heartbeat_interval_ns > 0)
        wait = GV_MIN(wait, srv->cfg.heartbeat_interval_ns / 2);
    if (srv->live_on)
        wait = GV_MIN(wait, gv_liveness_next_deadline(&srv->live, now));
    return (int)GV_MAX(1ull, GV_MIN(wait / 1000000ull, 100ull));
}

/* Tells worker p why it is out of the job (it may be alive: hung, or cut off from this server
 * only), then closes its connection once that has left. */
static void ops_evict(struct gv_server *srv, struct srv_peer *p, const char *text)
{
    if (p->link.c == NULL)
        return;
    struct gv_proto_msg m;
    gv_ps_link_msg(&p->link, &m, GV_PROTO_MSG_ERROR, srv->iter);
    m.u.error.code = GV_ERR_CLOSED;
    m.u.error.text = text;
    (void)gv_ps_link_send(&p->link, &m, NULL, 0, NULL);
    p->close_after_send = !gv_ps_link_idle(&p->link);
    if (!p->close_after_send)
        srv_peer_close(p);
}

void srv_worker_dead(struct gv_server *srv, struct srv_peer *p, const char *why)
{
    if (p->dead)
        return;
    if (srv->live_on)
        gv_liveness_mark_dead(&srv->live, p->rank, why);
    /* the job has started once every worker has the model: before, it starts with all */
    bool started = srv->rounds_done > 0;
    for (uint32_t w = 0; !started && w < srv->W; w++)
        started = w + 1 == srv->W && srv->workers[w] != NULL && srv->workers[w]->synced;
    for (uint32_t w = 0; started && srv->rounds_done == 0 && w < srv->W; w++)
        started = srv->workers[w] != NULL && srv->workers[w]->synced;
    if (srv->state != SRV_RUNNING || srv->cfg.dead_policy != GV_DEAD_CONTINUE || !started) {
        /* the abort policy, or start-up: a job starts with every one of its workers */
        srv_abort(srv, GV_ERR_CLOSED, "%s is dead: %s; the dead-worker policy is %s",
                  p->name, why, srv->cfg.dead_policy != GV_DEAD_CONTINUE ? "abort"
                  : "continue, but training had not started");
        return;
    }
    p->dead = true;
    srv->n_dead++;
    uint32_t left = 0;
    for (uint32_t w = 0; w < srv->W; w++)
        left += srv->expected[w] && srv->workers[w] != NULL && !srv->workers[w]->dead;
    gv_log(GV_LOG_WARN, "server %u: %s is dead at iteration %" PRIu64 ": %s; continuing without it "
           "(dead-worker policy continue, %u of %u workers left)", srv->rank, p->name, srv->iter,
           why, left, srv->W);
    srv_metrics_tick(srv, gv_now_ns());
    char text[300];
    snprintf(text, sizeof(text), "server %u declared worker %u dead (%.200s): the job goes on "
             "without it", srv->rank, p->rank, why);
    ops_evict(srv, p, text);
    srv_round_on_dead(srv, p);
}

void srv_worker_dropped(struct gv_server *srv, struct srv_peer *p)
{
    if (p->dead)
        return;
    p->dead = true;
    srv->n_dead++;
    if (srv->live_on)
        gv_liveness_mark_dead(&srv->live, p->rank, "dropped by server 0");
    gv_log(GV_LOG_WARN, "server %u: %s is out of the job from iteration %" PRIu64 " on (another "
           "server found it dead)", srv->rank, p->name, srv->iter + 1);
    ops_evict(srv, p, "another server found this worker dead: the job goes on without it");
}
