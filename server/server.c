/* server.c: the server object: creation (the shard's layout and buffers, then each part in the
 * order it needs the others: round, liveness, checkpoints, the listener, metrics), the run loop
 * with its deadlines, and the summary. Messages are handled in conn.c, the round in round.c;
 * srv.h lists the parts and who owns each. */
#include "srv.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* What the job's model and optimizer rule out: checkpoints need the servers to hold the model
 * (SGD on the servers) and its layout at start (nn/'s). */
static gv_status_t srv_server_check(const struct gv_server *srv)
{
    bool ckpt = srv->cfg.checkpoint_dir != NULL && srv->cfg.checkpoint_dir[0] != '\0';
    if (ckpt && (gv_job_external(srv->job) || srv->job->optimizer == GV_JOB_OPTIM_CALLER)) {
        gv_log(GV_LOG_ERROR, "--checkpoint-dir needs one of nn/'s models and --optimizer job: "
                             "with the workers' optimizer the servers do not hold the model "
                             "(checkpoint it from the training script, e.g. torch.save on "
                             "worker 0)");
        return GV_ERR_INVAL;
    }
    return GV_OK;
}

gv_status_t gv_server_create(const struct gv_server_config *cfg, struct gv_server **srv_p)
{
    struct gv_server *srv = gv_calloc(1, sizeof(*srv));
    if (srv == NULL)
        return GV_ERR_NOMEM;
    srv->cfg = *cfg;
    srv->job = cfg->job;
    srv->cl = cfg->cluster;
    srv->rank = srv->cl->my_rank;
    srv->S = srv->cl->n_servers;
    srv->W = srv->cl->n_workers;
    srv->env = (struct gv_ps_envelope){GV_PROTO_ROLE_SERVER, srv->rank, srv->rank};
    gv_ps_caps(&srv->caps, &srv->tp_cfg, srv->cl->io_timeout, srv->cl->connect_timeout);
    if (srv->cfg.min_workers == 0)
        srv->cfg.min_workers = 1;
    if (srv->cfg.checkpoint_keep <= 0)
        srv->cfg.checkpoint_keep = 3;
    gv_status_t status = srv_server_check(srv);
    if (status == GV_OK)
        status = srv_shard_init(srv);
    if (status == GV_OK)
        status = srv_net_init(srv);
    if (status == GV_OK && srv->shard.ready)
        status = srv_round_init(srv); /* server 0: the controller (external: at the layout) */
    if (status == GV_OK && srv->shard.ready)
        status = srv_down_create(srv->job, &srv->shard.map, srv->rank, &srv->down);
    if (status == GV_OK)
        status = srv_ops_init(srv);
    if (status == GV_OK)
        status = srv_ckpt_init(srv); /* before listening: a refused checkpoint binds nothing */
    if (status == GV_OK) {
        struct gv_tp_handler h = srv_conn_handler();
        status = srv_net_listen(srv, &h);
    }
    if (status == GV_OK)
        status = srv_metrics_init(srv);
    if (status != GV_OK) {
        gv_server_destroy(srv);
        return status;
    }
    char b[32];
    gv_ps_fmt_bytes((double)srv->shard.n * 4.0, b, sizeof(b));
    if (srv->shard.ready)
        gv_log(GV_LOG_INFO,
               "server %u: shard [%" PRIu64 ", %" PRIu64 ") of %" PRIu64
               " parameters (%s), %u workers, method %s, dead-worker policy %s",
               srv->rank, srv->shard.lo, srv->shard.lo + srv->shard.n, srv->shard.map.total, b,
               srv->W, gv_job_method_str(srv->job->method),
               gv_dead_policy_str(srv->cfg.dead_policy));
    else
        gv_log(GV_LOG_INFO, "server %u: %u workers, method %s, optimizer %s, dead-worker policy %s",
               srv->rank, srv->W, gv_job_method_str(srv->job->method),
               srv->job->optimizer == GV_JOB_OPTIM_CALLER ? "the workers'" : "SGD on the servers",
               gv_dead_policy_str(srv->cfg.dead_policy));
    *srv_p = srv;
    return GV_OK;
}

void gv_server_destroy(struct gv_server *srv)
{
    if (srv == NULL)
        return;
    srv_ckpt_cleanup(srv);    /* joins a writer thread still running */
    srv_metrics_cleanup(srv); /* stops the endpoint before the registry goes */
    srv_net_cleanup(srv);     /* closes every conn: on_close marks the peers */
    srv_round_cleanup(srv);
    srv_down_destroy(srv->down);
    srv_ops_cleanup(srv);
    srv_shard_cleanup(srv);
    gv_free(srv);
}

uint16_t gv_server_port(const struct gv_server *srv)
{
    return srv->net.port;
}

/* Connections that have not completed the handshake in time are closed. They are in accept
 * order and share one timeout, so only the expired ones at the head are visited. */
static void srv_check_handshakes(struct gv_server *srv, uint64_t now)
{
    static struct gv_log_limit lim = GV_LOG_LIMIT_INIT(10, 10000);
    for (struct srv_peer *p = srv->net.pending.head, *next; p != NULL; p = next) {
        next = p->next;
        if (p->t_accept_ns > now || now - p->t_accept_ns <= srv->cfg.handshake_timeout_ns)
            break;
        if (p->closed || p->link.c == NULL)
            continue;
        GV_LOG_LIMITED(GV_LOG_WARN, &lim,
                       "server %u: %s did not complete the handshake within %.1f s; closed",
                       srv->rank, p->name, (double)srv->cfg.handshake_timeout_ns * 1e-9);
        srv_peer_close(p); /* frees p */
    }
}

/* Every worker (and on server 0 every other server) has said BYE or left. */
static bool srv_peers_gone(const struct gv_server *srv)
{
    for (uint32_t w = 0; w < srv->W; w++) {
        const struct srv_peer *p = srv->net.workers[w];
        if (p != NULL && !p->closed && !p->bye)
            return false;
    }
    for (uint32_t s = 1; s < srv->S && srv->rank == 0; s++) {
        const struct srv_peer *p = srv->net.servers[s];
        if (p != NULL && !p->closed && !p->bye)
            return false;
    }
    return true;
}

/* Liveness is on and every peer that has not said BYE was heard from (a message, bytes or a
 * heartbeat) within the peer timeout. */
static bool srv_peers_heard(const struct gv_server *srv, uint64_t now)
{
    if (!srv->live.on)
        return false;
    for (const struct srv_peer *p = srv->net.joined.head; p != NULL; p = p->next) {
        bool member = p->kind == SRV_PEER_WORKER || (p->kind == SRV_PEER_SERVER && srv->rank == 0);
        if (member && !p->closed && !p->bye && now - p->t_seen_ns > srv->cfg.peer_timeout_ns)
            return false;
    }
    return true;
}

static void srv_finish(struct gv_server *srv)
{
    srv->end.state = SRV_DONE;
    struct srv_peer *c = srv->net.coord;
    if (c != NULL && !c->closed) {
        struct gv_proto_msg m;
        gv_ps_link_msg(&c->link, &m, GV_PROTO_MSG_BYE, srv->round.done);
        (void)gv_ps_link_send(&c->link, &m, NULL, 0, NULL);
    }
}

/* One turn of the loop's timers: a signal, handshakes, start-up and end deadlines, liveness,
 * the abort request. Returns the poll timeout in ms. */
static int srv_tick(struct gv_server *srv, volatile int *stop, bool *signalled,
                    uint64_t *end_deadline)
{
    uint64_t now = gv_now_ns();
    if (stop != NULL && *stop && !*signalled) {
        *signalled = true;
        char why[80];
        snprintf(why, sizeof(why), "received %s",
                 *stop == SIGINT    ? "SIGINT"
                 : *stop == SIGTERM ? "SIGTERM"
                                    : "a signal");
        srv_stop(srv, why);
    }
    srv_check_handshakes(srv, now);
    srv_conn_coord(srv);
    if (srv_live(srv))
        srv_start_check_deadline(srv, now);
    if (srv->end.state == SRV_ENDING && srv_ckpt_final_tick(srv)) {
        /* the final checkpoint is decided: the workers learn how the job ended, and leave */
        srv_end_answer(srv, srv->ckpt.final_verdict);
        if (*end_deadline == 0)
            *end_deadline = now + 5000000000ull;
        /* past the deadline the end waits only for peers still heard from: a training script
         * may evaluate or save for a while after its last step before it says BYE */
        if (srv_peers_gone(srv) || (now > *end_deadline && !srv_peers_heard(srv, now)))
            srv_finish(srv);
    }
    struct srv_peer *silent[16];
    size_t n_silent;
    int timeout_ms = srv_ops_tick(srv, now, silent, GV_ARRAY_LEN(silent), &n_silent);
    for (size_t i = 0; i < n_silent; i++)
        srv_conn_worker_silent(srv, silent[i],
                               gv_liveness_why(&srv->live.tracker, silent[i]->rank));
    srv_end_tick(srv, now);
    srv_metrics_tick(srv, now);
    if (srv_ckpt_busy(srv))
        timeout_ms = GV_MIN(timeout_ms, 5);
    else if (srv->round.phase == SRV_ROUND_WAIT_OPEN)
        srv_conn_poll_round(srv); /* a checkpoint that just finished lets the round open */
    if (srv->rank > 0 && srv->net.coord == NULL && srv->end.state == SRV_STARTING)
        timeout_ms = GV_MIN(timeout_ms, 20); /* server 0's address may appear any moment */
    return timeout_ms;
}

static bool srv_reporter_alive(const struct gv_server *srv)
{
    for (uint32_t w = 0; w < srv->W; w++) {
        const struct srv_peer *p = srv->net.workers[w];
        if (p != NULL && p->reported && !p->closed)
            return true;
    }
    return false;
}

gv_status_t gv_server_run(struct gv_server *srv, volatile int *stop)
{
    srv->start.t_start_ns = gv_now_ns();
    srv->end.state = SRV_STARTING;
    if (srv->rank == 0) {
        srv_start_settle(srv); /* a single server settles at once */
        srv_conn_poll_round(srv);
    }
    uint64_t end_deadline = 0;
    bool signalled = false;
    int timeout_ms = 0; /* servers 1..S-1: the first turn connects to server 0 */
    while (!srv_over(srv)) {
        int n = gv_tp_progress(srv->net.tp, timeout_ms);
        if (n < 0) {
            srv_abort_now(srv, (gv_status_t)n, false, "transport failure");
            break;
        }
        timeout_ms = srv_tick(srv, stop, &signalled, &end_deadline);
    }
    /* an end at a point every server shares (a stop, an abort there): its final checkpoint,
     * coordinated like the others (DONE has decided it in the loop already) */
    while (!srv_ckpt_final_tick(srv))
        if (gv_tp_progress(srv->net.tp, 5) < 0)
            break;
    /* let the last messages (BYE, ERROR) leave before the connections close, and a worker
     * that reported its own failure go first (so that a launcher sees the cause exit first) */
    uint64_t flush_end = gv_now_ns() + 1000000000ull;
    bool reporter = srv_reporter_alive(srv);
    while ((!srv_net_idle(srv) || srv_reporter_alive(srv)) && gv_now_ns() < flush_end)
        if (gv_tp_progress(srv->net.tp, 20) < 0)
            break;
    if (reporter) /* its exit reaches a launcher's wait before ours */
        usleep(250000);
    if (srv->end.state == SRV_DONE) {
        gv_log(GV_LOG_INFO,
               "server %u: job finished after %" PRIu64 " iterations (at iteration %" PRIu64 ")",
               srv->rank, srv->round.done, srv->round.iter);
        srv->end.result = GV_OK;
        srv->end.final_ok = srv->start.settled;
    }
    srv_metrics_tick(srv, gv_now_ns());
    return srv->end.result;
}

void gv_server_get_summary(const struct gv_server *srv, struct gv_server_summary *sum)
{
    const struct srv_round *r = &srv->round;
    memset(sum, 0, sizeof(*sum));
    sum->rank = srv->rank;
    sum->num_servers = srv->S;
    sum->num_workers = srv->W;
    sum->shard_lo = srv->shard.lo;
    sum->shard_numel = srv->shard.n;
    sum->iterations = r->done;
    if (r->t_last_ns > r->t_first_ns)
        sum->wall_s = (double)(r->t_last_ns - r->t_first_ns) * 1e-9;
    sum->bytes = r->bytes;
    sum->peak_rss = gv_ps_peak_rss();
    sum->bound_rss = 4 * srv->shard.n * sizeof(float) + (64ull << 20);
    sum->last_cf = r->cur.d.cf_send;
    sum->cf_changes = r->cf_changes;
    sum->stopped = srv->end.stopped;
    sum->refused = srv->end.refused;
    for (uint32_t w = 0; w < srv->W; w++)
        sum->workers_left += srv_round_member(srv, w) && srv->net.workers[w] != NULL;
    sum->resumed_from = srv->ckpt.resumed_from;
    sum->ckpt_iter = srv->ckpt.written > 0 ? srv->ckpt.last_iter : 0;
    sum->ckpt_written = srv->ckpt.written;
    sum->ckpt_committed = srv->ckpt.committed;
    sum->ckpt_lost = srv->ckpt.lost || srv->end.result == GV_ERR_CKPT;
}
