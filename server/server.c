/* server.c: the server object: creation (layout, shard map, buffers, listener, controller),
 * the run loop with its deadlines, aborting, and the summary and state accessors. The
 * connection layer is in server_peer.c, the round logic in server_round.c. */
#include "server_internal.h"

#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void srv_log_line(const char *line, void *arg)
{
    (void)arg;
    gv_log(GV_LOG_INFO, "%s", line);
}

static void srv_declog(const char *json, void *arg)
{
    struct gv_server *srv = arg;
    if (srv->declog != NULL) {
        fprintf(srv->declog, "%s\n", json);
        fflush(srv->declog);
    }
}

static gv_status_t srv_layout(struct gv_server *srv)
{
    srv->names = gv_calloc(SRV_MAX_TENSORS, sizeof(*srv->names));
    srv->numel = gv_calloc(SRV_MAX_TENSORS, sizeof(*srv->numel));
    if (srv->names == NULL || srv->numel == NULL)
        return GV_ERR_NOMEM;
    gv_status_t status =
        gv_job_layout(srv->job, srv->names, srv->numel, SRV_MAX_TENSORS, &srv->n_tensors);
    if (status != GV_OK)
        return status;
    status = gv_shard_map_init(&srv->map, srv->numel, srv->n_tensors, srv->S);
    if (status != GV_OK)
        return status;
    srv->lo = srv->map.lo[srv->rank];
    srv->n = gv_shard_numel(&srv->map, srv->rank);
    const char *names[SRV_MAX_TENSORS];
    for (uint32_t t = 0; t < srv->n_tensors; t++)
        names[t] = srv->names[t];
    gv_shard_map_describe(&srv->map, names, srv_log_line, NULL);
    char desc[4096];
    srv->fingerprint = gv_job_fingerprint(srv->job, (const char(*)[24])srv->names, srv->numel,
                                          srv->n_tensors, desc, sizeof(desc));
    gv_log(GV_LOG_DEBUG, "model fingerprint %016" PRIx64 " of: %s", srv->fingerprint, desc);
    return GV_OK;
}

static gv_status_t srv_buffers(struct gv_server *srv)
{
    /* zeroed by the allocator: untouched pages cost no memory until written */
    srv->params = gv_calloc(srv->n, sizeof(float));
    srv->momentum = gv_calloc(srv->n, sizeof(float));
    srv->acc = gv_calloc(srv->n, sizeof(float));
    /* the largest sparse push: a bitmap index segment + n values (the encoder never picks a
     * larger index encoding); a dense push needs 4n */
    srv->rcap = (srv->n + 7) / 8 + 4 * srv->n + 64;
    srv->rbuf = gv_malloc(srv->rcap);
    srv->workers = gv_calloc(srv->W, sizeof(*srv->workers));
    srv->servers = gv_calloc(srv->S, sizeof(*srv->servers));
    srv->layer_norms = gv_calloc(srv->n_tensors, sizeof(double));
    srv->held_norms = gv_calloc(srv->n_tensors, sizeof(double));
    srv->layer_cf = gv_calloc(srv->n_tensors, sizeof(double));
    srv->dec_cur.heavy = gv_calloc(srv->n_tensors, 1);
    srv->dec_next.heavy = gv_calloc(srv->n_tensors, 1);
    srv->expected = gv_calloc(srv->W, sizeof(bool));
    srv->arrived = gv_calloc(srv->W, sizeof(bool));
    srv->scratch = gv_calloc(2 * (size_t)srv->W, sizeof(bool));
    srv->memb = gv_calloc(srv->W, 1);
    srv->reports = gv_calloc((size_t)srv->S * srv->W, 1);
    srv->got_report = gv_calloc(srv->S, sizeof(bool));
    size_t ab = gv_proto_arena_bound(&srv->caps);
    srv->arena_buf = gv_malloc(ab);
    if (!srv->params || !srv->momentum || !srv->acc || !srv->rbuf || !srv->workers ||
        !srv->servers || !srv->layer_norms || !srv->held_norms || !srv->layer_cf || !srv->dec_cur.heavy ||
        !srv->dec_next.heavy || !srv->arena_buf || !srv->expected || !srv->arrived ||
        !srv->scratch || !srv->memb || !srv->reports || !srv->got_report) {
        gv_log(GV_LOG_ERROR, "server: cannot allocate the buffers of a %" PRIu64
               "-parameter shard", srv->n);
        return GV_ERR_NOMEM;
    }
    gv_proto_arena_init(&srv->arena, srv->arena_buf, ab);
    srv->dec_cur.iter = srv->dec_next.iter = UINT64_MAX;
    for (uint32_t w = 0; w < srv->W; w++)
        srv->expected[w] = true; /* every worker, until one is found dead */
    return GV_OK;
}

static gv_status_t srv_listen(struct gv_server *srv)
{
    const struct gv_cluster *cl = srv->cl;
    const char *host = NULL;
    uint16_t port = 0;
    const char *adv = cl->advertise[0] ? cl->advertise : NULL;
    if (cl->bind.host[0] != '\0' || cl->bind.port != 0) {
        host = cl->bind.host[0] ? cl->bind.host : NULL;
        port = cl->bind.port;
    } else if (cl->servers.n > 0) {
        port = cl->servers.v[srv->rank].port;
        if (adv == NULL)
            adv = cl->servers.v[srv->rank].host;
    }
    struct gv_tp_handler h = srv_handler();
    gv_status_t status = gv_tp_create(cl->transport, &srv->tp_cfg, &h, srv, &srv->tp);
    if (status != GV_OK) {
        gv_log(GV_LOG_ERROR, "server: cannot create the %s transport: %s", cl->transport,
               gv_status_str(status));
        return status;
    }
    if ((status = gv_tp_listen(srv->tp, host, port, &srv->listener)) != GV_OK)
        return status;
    srv->port = gv_tp_listener_port(srv->tp, srv->listener);
    snprintf(srv->bind_str, sizeof(srv->bind_str), "%s:%u", host ? host : "*", srv->port);
    status = gv_tp_addr_advertise(host, adv, srv->port, srv->advertise_str,
                                  sizeof(srv->advertise_str));
    if (status != GV_OK) {
        gv_log(GV_LOG_ERROR, "server: cannot form the advertised address");
        return status;
    }
    gv_log(GV_LOG_INFO, "server %u of %u: bound %s, advertising %s (transport %s)", srv->rank,
           srv->S, srv->bind_str, srv->advertise_str, cl->transport);
    if (!gv_tp_has_cap(srv->tp, GV_TP_CAP_DEFER_RECV)) {
        gv_log(GV_LOG_ERROR, "server: the %s transport cannot defer a receive, which the "
               "rank-ordered aggregation needs", cl->transport);
        return GV_ERR_UNSUPPORTED;
    }
    return gv_cluster_publish(cl, srv->rank, srv->advertise_str);
}

static gv_status_t srv_controller(struct gv_server *srv)
{
    struct gv_adapt_config ac;
    gv_job_adapt_config(srv->job, srv->n_tensors, &ac);
    gv_status_t status = gv_adapt_create(&ac, &srv->ctl);
    if (status != GV_OK)
        return status;
    if (srv->cfg.decision_log != NULL && srv->cfg.decision_log[0] != '\0') {
        srv->declog = fopen(srv->cfg.decision_log, "w");
        if (srv->declog == NULL) {
            gv_log(GV_LOG_ERROR, "server: cannot open the decision log %s", srv->cfg.decision_log);
            return GV_ERR_IO;
        }
        gv_adapt_set_log(srv->ctl, srv_declog, srv);
    }
    struct gv_adapt_decision d = {.layer_cf = srv->layer_cf, .layer_cap = srv->n_tensors};
    if ((status = gv_adapt_current(srv->ctl, &d)) != GV_OK)
        return status;
    srv->dec_cur.iter = d.iter;
    srv->dec_cur.d = (struct gv_proto_decision){
        .level = gv_ps_level_to_proto(d.level), .theta_min = d.theta_min,
        .cf_candidate = d.cf_candidate, .cf_send = d.cf_send};
    for (uint32_t t = 0; t < srv->n_tensors; t++)
        srv->dec_cur.heavy[t] = d.num_layers > 0 && d.layer_cf[t] > d.theta_min;
    gv_log(GV_LOG_INFO, "controller: %s, first decision %s at CF %g",
           gv_adapt_kind_str(ac.kind), gv_adapt_level_str(d.level), d.cf_send);
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
    gv_ps_caps(&srv->caps, &srv->tp_cfg, srv->cl->io_timeout, srv->cl->connect_timeout);
    if (srv->cfg.min_workers == 0)
        srv->cfg.min_workers = 1;
    if (srv->cfg.checkpoint_keep <= 0)
        srv->cfg.checkpoint_keep = 3;
    gv_status_t status = srv_layout(srv);
    if (status == GV_OK)
        status = srv_buffers(srv);
    if (status == GV_OK && srv->rank == 0)
        status = srv_controller(srv);
    if (status == GV_OK)
        status = srv_ops_init(srv);
    if (status == GV_OK)
        status = srv_ckpt_init(srv); /* before listening: a refused checkpoint binds nothing */
    if (status == GV_OK)
        status = srv_listen(srv);
    if (status == GV_OK)
        status = srv_metrics_init(srv);
    if (status != GV_OK) {
        gv_server_destroy(srv);
        return status;
    }
    char b[32];
    gv_ps_fmt_bytes((double)srv->n * 4.0, b, sizeof(b));
    gv_log(GV_LOG_INFO, "server %u: shard [%" PRIu64 ", %" PRIu64 ") of %" PRIu64
           " parameters (%s), %u workers, method %s, dead-worker policy %s", srv->rank, srv->lo,
           srv->lo + srv->n, srv->map.total, b, srv->W, gv_job_method_str(srv->job->method),
           gv_dead_policy_str(srv->cfg.dead_policy));
    *srv_p = srv;
    return GV_OK;
}

void gv_server_destroy(struct gv_server *srv)
{
    if (srv == NULL)
        return;
    srv_ckpt_cleanup(srv);   /* joins a writer thread still running */
    srv_metrics_cleanup(srv); /* stops the endpoint before the registry goes */
    gv_tp_destroy(srv->tp); /* closes every conn: on_close marks the peers */
    for (struct srv_peer *p = srv->peers, *next; p != NULL; p = next) {
        next = p->next;
        gv_ps_link_cleanup(&p->link);
        gv_free(p);
    }
    if (srv->declog != NULL)
        fclose(srv->declog);
    gv_adapt_destroy(srv->ctl);
    gv_shard_map_cleanup(&srv->map);
    gv_free(srv->names);
    gv_free(srv->numel);
    gv_free(srv->params);
    gv_free(srv->momentum);
    gv_free(srv->acc);
    gv_free(srv->rbuf);
    gv_free(srv->workers);
    gv_free(srv->servers);
    gv_free(srv->layer_norms);
    gv_free(srv->held_norms);
    gv_free(srv->layer_cf);
    gv_free(srv->dec_cur.heavy);
    gv_free(srv->dec_next.heavy);
    gv_free(srv->arena_buf);
    gv_free(srv->ctl_blob);
    gv_free(srv->expected);
    gv_free(srv->arrived);
    gv_free(srv->scratch);
    gv_free(srv->memb);
    gv_free(srv->reports);
    gv_free(srv->got_report);
    srv_ops_cleanup(srv);
    gv_free(srv);
}

uint16_t gv_server_port(const struct gv_server *srv)
{
    return srv->port;
}

void srv_abort_now(struct gv_server *srv, gv_status_t status, bool consistent, const char *text)
{
    if (srv->state == SRV_ABORTED)
        return;
    snprintf(srv->fail, sizeof(srv->fail), "%s", text);
    srv->stopped = status == GV_OK;
    srv->final_ok = consistent && srv->settled && !srv->refused;
    gv_log(srv->stopped ? GV_LOG_WARN : GV_LOG_ERROR, "server %u: %s the job at iteration %" PRIu64
           ": %s", srv->rank, srv->stopped ? "stopping" : "aborting", srv->iter, srv->fail);
    srv->state = SRV_ABORTED;
    srv->result = srv->stopped ? GV_ERR_CLOSED : status;
    char msg[400];
    if (srv->stopped && srv->rank == 0)
        snprintf(msg, sizeof(msg), "server 0 stopped the job at iteration %" PRIu64 ": %.200s",
                 srv->iter, srv->fail);
    else
        snprintf(msg, sizeof(msg), "server %u %s the job: %.200s", srv->rank,
                 srv->stopped ? "stopped" : "aborted", srv->fail);
    for (struct srv_peer *p = srv->peers; p != NULL; p = p->next) {
        if (p->closed || p->kind == SRV_PEER_NEW)
            continue;
        struct gv_proto_msg m;
        gv_proto_msg_init(&m, GV_PROTO_MSG_ERROR);
        m.role = GV_PROTO_ROLE_SERVER;
        m.rank = srv->rank;
        m.iteration = srv->iter;
        m.u.error.code = srv->stopped ? GV_OK : status;
        m.u.error.text = msg;
        (void)gv_ps_link_send(&p->link, &m, NULL, 0, NULL);
    }
}

static bool srv_coord_alive(const struct gv_server *srv)
{
    const struct srv_peer *c = srv->coord;
    return c != NULL && !c->closed && c->link.c != NULL && c->hs.state == 3;
}

/* Servers 1..S-1: asks server 0 to end the job (it decides, so that every server stops at the
 * same iteration) and goes on meanwhile; srv_ops_tick aborts here if no answer comes. */
static void srv_request_abort(struct gv_server *srv, gv_status_t status, const char *text)
{
    if (srv->abort_requested)
        return;
    srv->abort_requested = true;
    srv->abort_status = status;
    srv->abort_deadline = gv_now_ns() + (srv->cfg.peer_timeout_ns ? srv->cfg.peer_timeout_ns
                                                                   : 5000000000ull);
    snprintf(srv->fail, sizeof(srv->fail), "%s", text);
    gv_log(status == GV_OK ? GV_LOG_WARN : GV_LOG_ERROR, "server %u: %s; asking server 0 to %s "
           "the job", srv->rank, text, status == GV_OK ? "stop" : "end");
    char msg[400];
    snprintf(msg, sizeof(msg), "server %u: %.300s", srv->rank, text);
    struct gv_proto_msg m;
    gv_proto_msg_init(&m, GV_PROTO_MSG_ERROR);
    m.role = GV_PROTO_ROLE_SERVER;
    m.rank = srv->rank;
    m.iteration = srv->iter;
    m.u.error.code = status;
    m.u.error.text = msg;
    if (gv_ps_link_send(&srv->coord->link, &m, NULL, 0, NULL) != GV_OK)
        srv_abort_now(srv, status, srv->round != SRV_ROUND_WAIT_DECISION, text);
}

void srv_abort(struct gv_server *srv, gv_status_t status, const char *fmt, ...)
{
    if (srv->state == SRV_ABORTED)
        return;
    char text[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (srv->rank > 0 && srv_coord_alive(srv)) {
        srv_request_abort(srv, status, text);
        return;
    }
    srv_abort_now(srv, status, srv->rank == 0 || srv->round != SRV_ROUND_WAIT_DECISION, text);
}

void srv_stop(struct gv_server *srv, const char *why)
{
    if (srv->state == SRV_ABORTED)
        return;
    if (srv->rank > 0 && srv_coord_alive(srv)) {
        srv_request_abort(srv, GV_OK, why);
        return;
    }
    srv_abort_now(srv, GV_OK, srv->rank == 0 || srv->round != SRV_ROUND_WAIT_DECISION, why);
}

/* The start-up deadline: names whoever is missing. */
static void srv_check_startup(struct gv_server *srv, uint64_t now)
{
    if (srv->rounds_done > 0 || srv->round == SRV_ROUND_OPEN ||
        now - srv->t_start_ns < srv->cl->connect_timeout)
        return;
    char missing[200] = "";
    size_t off = 0;
    for (uint32_t w = 0; w < srv->W && off < sizeof(missing) - 16; w++)
        if (srv->workers[w] == NULL || !srv->workers[w]->synced)
            off += (size_t)snprintf(missing + off, sizeof(missing) - off, " %u", w);
    if (off == 0 && srv->round == SRV_ROUND_WAIT_OPEN && srv->seeded && srv->settled)
        return; /* everyone is in: the first round opens as soon as the sends complete */
    char servers[160] = "";
    size_t so = 0;
    for (uint32_t s = 1; srv->rank == 0 && s < srv->S && so < sizeof(servers) - 16; s++)
        if (srv->servers[s] == NULL)
            so += (size_t)snprintf(servers + so, sizeof(servers) - so, " %u", s);
    srv_abort(srv, GV_ERR_TIMEOUT,
              "start-up did not complete within %.1f s (--connect-timeout): %s%s%s%s%s",
              (double)srv->cl->connect_timeout * 1e-9,
              off ? "workers not joined or synced:" : "", missing,
              !srv->seeded ? (off ? "; model not seeded by worker 0" : "model not seeded by "
                                                                          "worker 0")
                           : "",
              so ? "; servers not joined:" : "", servers);
}

static void srv_check_handshakes(struct gv_server *srv, uint64_t now)
{
    for (struct srv_peer *p = srv->peers; p != NULL; p = p->next)
        if (p->kind == SRV_PEER_NEW && !p->closed && p->link.c != NULL &&
            now - p->t_accept_ns > srv->cfg.handshake_timeout_ns) {
            gv_log(GV_LOG_WARN, "server %u: %s did not complete the handshake within %.1f s; "
                   "closed", srv->rank, p->name, (double)srv->cfg.handshake_timeout_ns * 1e-9);
            srv_peer_close(p);
        }
}

/* Every worker (and on server 0 every other server) has said BYE or left. */
static bool srv_peers_gone(const struct gv_server *srv)
{
    for (uint32_t w = 0; w < srv->W; w++) {
        const struct srv_peer *p = srv->workers[w];
        if (p != NULL && !p->closed && !p->bye)
            return false;
    }
    for (uint32_t s = 1; s < srv->S && srv->rank == 0; s++) {
        const struct srv_peer *p = srv->servers[s];
        if (p != NULL && !p->closed && !p->bye)
            return false;
    }
    return true;
}

static void srv_finish(struct gv_server *srv)
{
    srv->state = SRV_DONE;
    if (srv->coord != NULL && !srv->coord->closed) {
        struct gv_proto_msg m;
        gv_proto_msg_init(&m, GV_PROTO_MSG_BYE);
        m.role = GV_PROTO_ROLE_SERVER;
        m.rank = srv->rank;
        m.iteration = srv->rounds_done;
        (void)gv_ps_link_send(&srv->coord->link, &m, NULL, 0, NULL);
    }
}

gv_status_t gv_server_run(struct gv_server *srv, volatile int *stop)
{
    srv->t_start_ns = gv_now_ns();
    srv->state = SRV_STARTING;
    if (srv->rank > 0) {
        gv_status_t status = srv_connect_coord(srv, srv->t_start_ns + srv->cl->connect_timeout);
        if (status != GV_OK) {
            srv->state = SRV_ABORTED;
            return status;
        }
    } else {
        srv_settle(srv); /* a single server settles at once */
    }
    uint64_t end_deadline = 0;
    bool signalled = false;
    int timeout_ms = 100;
    while (srv->state != SRV_DONE && srv->state != SRV_ABORTED) {
        int n = gv_tp_progress(srv->tp, timeout_ms);
        if (n < 0) {
            srv_abort_now(srv, (gv_status_t)n, false, "transport failure");
            break;
        }
        uint64_t now = gv_now_ns();
        if (stop != NULL && *stop && !signalled) {
            signalled = true;
            char why[80];
            snprintf(why, sizeof(why), "received %s", *stop == SIGINT ? "SIGINT" : *stop ==
                     SIGTERM ? "SIGTERM" : "a signal");
            srv_stop(srv, why);
        }
        srv_check_handshakes(srv, now);
        if (srv->state == SRV_STARTING || srv->state == SRV_RUNNING)
            srv_check_startup(srv, now);
        if (srv->state == SRV_ENDING) {
            if (end_deadline == 0)
                end_deadline = now + 5000000000ull;
            if (srv_peers_gone(srv) || now > end_deadline)
                srv_finish(srv);
        }
        timeout_ms = srv_ops_tick(srv, now);
        if (srv_ckpt_busy(srv))
            timeout_ms = GV_MIN(timeout_ms, 5);
        else if (srv->round == SRV_ROUND_WAIT_OPEN)
            srv_round_try_open(srv); /* a checkpoint that just finished lets the round open */
    }
    /* let the last messages (BYE, ERROR) leave before the connections close */
    uint64_t flush_end = gv_now_ns() + 1000000000ull;
    for (;;) {
        bool idle = true;
        for (struct srv_peer *p = srv->peers; p != NULL; p = p->next)
            idle &= p->closed || p->link.c == NULL || gv_ps_link_idle(&p->link);
        if (idle || gv_now_ns() > flush_end)
            break;
        if (gv_tp_progress(srv->tp, 20) < 0)
            break;
    }
    if (srv->state == SRV_DONE) {
        gv_log(GV_LOG_INFO, "server %u: job finished after %" PRIu64 " iterations (at iteration %"
               PRIu64 ")", srv->rank, srv->rounds_done, srv->iter);
        srv->result = GV_OK;
        srv->final_ok = srv->settled;
    }
    srv_ckpt_final(srv);
    srv_metrics_tick(srv, gv_now_ns());
    return srv->result;
}

void gv_server_get_summary(const struct gv_server *srv, struct gv_server_summary *sum)
{
    memset(sum, 0, sizeof(*sum));
    sum->rank = srv->rank;
    sum->num_servers = srv->S;
    sum->num_workers = srv->W;
    sum->shard_lo = srv->lo;
    sum->shard_numel = srv->n;
    sum->iterations = srv->rounds_done;
    if (srv->t_last_round_ns > srv->t_first_round_ns)
        sum->wall_s = (double)(srv->t_last_round_ns - srv->t_first_round_ns) * 1e-9;
    sum->bytes = srv->bytes;
    sum->peak_rss = gv_ps_peak_rss();
    sum->bound_rss = 4 * srv->n * sizeof(float) + (64ull << 20);
    sum->last_cf = srv->dec_cur.d.cf_send;
    sum->cf_changes = srv->cf_changes;
    sum->stopped = srv->stopped;
    sum->refused = srv->refused;
    for (uint32_t w = 0; w < srv->W; w++)
        sum->workers_left += srv->expected[w] && srv->workers[w] != NULL &&
                             !srv->workers[w]->dead;
    sum->resumed_from = srv->resumed_from;
    sum->ckpt_iter = srv->ckpt_written > 0 ? srv->ckpt_last_iter : 0;
    sum->ckpt_written = srv->ckpt_written;
}

gv_status_t gv_server_state_sections(struct gv_server *srv, struct gv_ckpt_section *sec,
                                     size_t cap, size_t *n_p)
{
    if (cap < 3)
        return GV_ERR_INVAL;
    static const char *const names[] = {"params", "momentum", "iteration"};
    sec[0] = (struct gv_ckpt_section){names[0], srv->params, srv->n * sizeof(float)};
    sec[1] = (struct gv_ckpt_section){names[1], srv->momentum, srv->n * sizeof(float)};
    srv->state_iter = srv->iter; /* a copy: the sections stay valid while rounds go on */
    sec[2] = (struct gv_ckpt_section){names[2], &srv->state_iter, sizeof(srv->state_iter)};
    *n_p = 3;
    if (srv->ctl == NULL)
        return GV_OK;
    if (cap < 4)
        return GV_ERR_INVAL;
    size_t need = gv_adapt_state_size(srv->ctl);
    if (need > srv->ctl_blob_len) {
        void *b = gv_realloc(srv->ctl_blob, need);
        if (b == NULL)
            return GV_ERR_NOMEM;
        srv->ctl_blob = b;
        srv->ctl_blob_len = need;
    }
    size_t len;
    gv_status_t status = gv_adapt_save(srv->ctl, srv->ctl_blob, srv->ctl_blob_len, &len);
    if (status != GV_OK)
        return status;
    sec[3] = (struct gv_ckpt_section){"controller", srv->ctl_blob, len};
    *n_p = 4;
    return GV_OK;
}

const struct gv_opt gv_server_options[] = {
    {.name = "decision-log", .type = GV_OPT_STRING,
     .offset = offsetof(struct gv_server_opts, decision_log), .def = "",
     .help = "server 0: write the controller's decisions and windows here (JSON lines)",
     .group = "output"},
};
const size_t gv_server_options_n = GV_ARRAY_LEN(gv_server_options);
