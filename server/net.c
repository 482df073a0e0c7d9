/* net.c: a server's network side: the transport and its listener, the peer records (one per
 * connection, with its link), and every message the server sends. It decides nothing: what to
 * send and when is the callers' (conn.c, start.c, round.c, end.c, ops.c). */
#include "srv.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

gv_status_t srv_net_init(struct gv_server *srv)
{
    struct srv_net *net = &srv->net;
    net->workers = gv_calloc(srv->W, sizeof(*net->workers));
    net->servers = gv_calloc(srv->S, sizeof(*net->servers));
    size_t ab = gv_proto_arena_bound(&srv->caps);
    net->arena_buf = gv_malloc(ab);
    if (net->workers == NULL || net->servers == NULL || net->arena_buf == NULL)
        return GV_ERR_NOMEM;
    gv_proto_arena_init(&net->arena, net->arena_buf, ab);
    return GV_OK;
}

gv_status_t srv_net_listen(struct gv_server *srv, const struct gv_tp_handler *h)
{
    struct srv_net *net = &srv->net;
    const struct gv_cluster *cl = srv->cl;
    const char *host = NULL;
    uint16_t port = 0;
    const char *adv = cl->advertise[0] ? cl->advertise : NULL;
    /* with --conns-per-server, lane l of a process listens at the process's port + l */
    uint32_t lanes = cl->lanes > 0 ? cl->lanes : 1, proc = srv->rank / lanes,
             lane = srv->rank % lanes;
    if (cl->bind.host[0] != '\0' || cl->bind.port != 0) {
        host = cl->bind.host[0] ? cl->bind.host : NULL;
        port = cl->bind.port != 0 ? (uint16_t)(cl->bind.port + lane) : 0;
    } else if (cl->servers.n > 0) {
        port = (uint16_t)(cl->servers.v[proc].port + lane);
        if (adv == NULL)
            adv = cl->servers.v[proc].host;
    }
    if (cl->servers.n > 0) {
        /* the address every peer is given for this server must at least resolve here */
        char why[160];
        const char *own = cl->servers.v[srv->rank].host;
        if (gv_tp_addr_resolves(own, why, sizeof(why)) != GV_OK) {
            gv_log(GV_LOG_ERROR,
                   "server %u: refusing to start: its own --servers entry %s:%u does not resolve "
                   "(%s); the workers and the other servers could not reach it",
                   srv->rank, own, cl->servers.v[srv->rank].port, why);
            return GV_ERR_INVAL;
        }
    }
    gv_status_t status = gv_tp_create(cl->transport, &srv->tp_cfg, h, srv, &net->tp);
    if (status != GV_OK) {
        gv_log(GV_LOG_ERROR, "server: cannot create the %s transport: %s", cl->transport,
               gv_status_str(status));
        return status;
    }
    if ((status = gv_tp_listen(net->tp, host, port, &net->listener)) != GV_OK)
        return status;
    net->port = gv_tp_listener_port(net->tp, net->listener);
    snprintf(net->bind_str, sizeof(net->bind_str), "%s:%u", host ? host : "*", net->port);
    status =
        gv_tp_addr_advertise(host, adv, net->port, net->advertise_str, sizeof(net->advertise_str));
    if (status != GV_OK) {
        gv_log(GV_LOG_ERROR, "server: cannot form the advertised address");
        return status;
    }
    gv_log(GV_LOG_INFO, "server %u of %u: bound %s, advertising %s (transport %s)", srv->rank,
           srv->S, net->bind_str, net->advertise_str, cl->transport);
    if (!gv_tp_has_cap(net->tp, GV_TP_CAP_DEFER_RECV)) {
        gv_log(GV_LOG_ERROR,
               "server: the %s transport cannot defer a receive, which the "
               "rank-ordered aggregation needs",
               cl->transport);
        return GV_ERR_UNSUPPORTED;
    }
    return gv_cluster_publish(cl, srv->rank, net->advertise_str);
}

static void net_list_add(struct srv_peer_list *l, struct srv_peer *p)
{
    p->list = l;
    p->next = NULL;
    p->prev = l->tail;
    if (l->tail != NULL)
        l->tail->next = p;
    else
        l->head = p;
    l->tail = p;
    l->n++;
}

static void net_list_del(struct srv_peer *p)
{
    struct srv_peer_list *l = p->list;
    if (p->prev != NULL)
        p->prev->next = p->next;
    else
        l->head = p->next;
    if (p->next != NULL)
        p->next->prev = p->prev;
    else
        l->tail = p->prev;
    l->n--;
    p->list = NULL;
    p->prev = p->next = NULL;
}

static void net_peer_free(struct gv_server *srv, struct srv_peer *p)
{
    srv->net.gone_recv += p->link.bytes_recv;
    srv->net.gone_sent += p->link.bytes_sent;
    net_list_del(p);
    gv_ps_link_cleanup(&p->link);
    gv_ps_rx_cleanup(&p->rx);
    gv_free(p->layout_buf);
    gv_layout_cleanup(&p->held_layout);
    gv_free(p);
}

void srv_net_cleanup(struct gv_server *srv)
{
    struct srv_net *net = &srv->net;
    gv_tp_destroy(net->tp); /* closes every conn: on_close marks (or frees) the peers */
    net->tp = NULL;
    while (net->pending.head != NULL)
        net_peer_free(srv, net->pending.head);
    while (net->joined.head != NULL)
        net_peer_free(srv, net->joined.head);
    gv_free(net->workers);
    gv_free(net->servers);
    gv_free(net->arena_buf);
}

/* ---------------------------------------------------------------- peers */

struct srv_peer *srv_peer_new(struct gv_server *srv, struct gv_conn *c, enum srv_peer_kind kind,
                              void (*on_idle)(struct gv_ps_link *l, void *arg))
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
    p->link.on_idle = on_idle;
    p->link.arg = p;
    p->t_accept_ns = gv_now_ns();
    snprintf(p->name, sizeof(p->name), "peer %s", c->peer);
    c->user = p;
    net_list_add(kind == SRV_PEER_NEW ? &srv->net.pending : &srv->net.joined, p);
    return p;
}

void srv_peer_joined(struct gv_server *srv, struct srv_peer *p, enum srv_peer_kind kind)
{
    p->kind = kind;
    if (p->list != &srv->net.joined) {
        net_list_del(p);
        net_list_add(&srv->net.joined, p);
    }
}

bool srv_peer_release(struct gv_server *srv, struct srv_peer *p)
{
    if (!p->closed || p->kind != SRV_PEER_NEW)
        return false;
    net_peer_free(srv, p);
    return true;
}

void srv_peer_close(struct srv_peer *p)
{
    if (p->link.c != NULL)
        gv_tp_conn_close(p->link.c);
}

void srv_peer_send_close(struct srv_peer *p, const struct gv_proto_msg *out)
{
    if (gv_ps_link_send(&p->link, out, NULL, 0, NULL) == GV_OK && !gv_ps_link_idle(&p->link))
        p->close_after_send = true;
    else
        srv_peer_close(p);
}

void srv_peer_refuse(struct srv_peer *p, enum gv_proto_refuse code, const char *fmt, ...)
{
    char text[240];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    static struct gv_log_limit lim = GV_LOG_LIMIT_INIT(10, 10000);
    GV_LOG_LIMITED(GV_LOG_WARN, &lim, "server %u: refused %s: %s", p->srv->rank, p->name, text);
    srv_metrics_refused(p->srv, gv_proto_refuse_str(code));
    struct gv_proto_msg m;
    gv_ps_link_msg(&p->link, &m, GV_PROTO_MSG_REFUSE, 0);
    m.u.refuse.code = code;
    m.u.refuse.text = text;
    srv_peer_send_close(p, &m);
}

static bool net_list_idle(const struct srv_peer_list *l)
{
    for (const struct srv_peer *p = l->head; p != NULL; p = p->next)
        if (!p->closed && p->link.c != NULL && !gv_ps_link_idle(&p->link))
            return false;
    return true;
}

bool srv_net_idle(const struct gv_server *srv)
{
    return net_list_idle(&srv->net.pending) && net_list_idle(&srv->net.joined);
}

bool srv_net_coord_alive(const struct gv_server *srv)
{
    const struct srv_peer *c = srv->net.coord;
    return c != NULL && !c->closed && c->link.c != NULL && c->hs.state == GV_PS_CLIENT_WELCOMED;
}

/* ---------------------------------------------------------------- what is sent */

gv_status_t srv_send_welcome(struct gv_server *srv, struct srv_peer *p, uint64_t iter)
{
    const struct srv_shard *sh = &srv->shard;
    struct gv_proto_msg out;
    gv_ps_link_msg(&p->link, &out, GV_PROTO_MSG_WELCOME, iter);
    out.u.welcome =
        (struct gv_proto_welcome){.shard_offset = sh->lo,
                                  .shard_numel = sh->n,
                                  .model_numel = sh->map.total,
                                  .model_fingerprint = sh->fingerprint,
                                  .num_shards = srv->S,
                                  .features = srv->cfg.secret->len > 0 ? GV_PROTO_FEAT_AUTH : 0};
    return gv_ps_link_send(&p->link, &out, NULL, 0, NULL);
}

gv_status_t srv_send_decision(struct gv_server *srv, struct srv_peer *p,
                              const struct srv_decision *d, const uint8_t *memb)
{
    struct gv_proto_msg m;
    gv_ps_link_msg(&p->link, &m, GV_PROTO_MSG_DECISION, d->iter);
    gv_ps_decision_to_proto(&d->d, &m.u.decision);
    struct gv_iov pl[2];
    int n = 0;
    if (memb != NULL) {
        gv_proto_seg_add(&m, GV_PROTO_SEG_RAW, GV_PROTO_ENC_BYTES, srv->W, srv->W);
        pl[n++] = (struct gv_iov){(void *)(uintptr_t)memb, srv->W};
    }
    if (srv->job->method == GV_JOB_ACCORDION) {
        uint32_t nt = srv->shard.n_tensors;
        gv_proto_seg_add(&m, GV_PROTO_SEG_RAW, GV_PROTO_ENC_BYTES, nt, nt);
        pl[n++] = (struct gv_iov){d->heavy, nt};
    }
    return gv_ps_link_send(&p->link, &m, pl, n, NULL);
}

static gv_status_t net_send_chunks(struct gv_server *srv, struct srv_peer *p, uint64_t iter,
                                   const float *v, uint32_t tensor_id, uint64_t checksum,
                                   uint64_t *bytes)
{
    uint64_t n = srv->shard.n;
    for (uint64_t off = 0; off < n; off += SRV_MODEL_CHUNK) {
        uint64_t len = GV_MIN(SRV_MODEL_CHUNK, n - off);
        struct gv_proto_msg m;
        gv_ps_link_msg(&p->link, &m, GV_PROTO_MSG_MODEL, iter);
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

gv_status_t srv_send_model(struct gv_server *srv, struct srv_peer *p, uint64_t iter,
                           uint64_t *bytes_p)
{
    const struct srv_shard *sh = &srv->shard;
    uint64_t bytes = 0, ck = gv_ps_checksum(sh->params, sh->n);
    gv_status_t status = net_send_chunks(srv, p, iter, sh->params, 0, ck, &bytes);
    if (status == GV_OK && srv->job->optimizer != GV_JOB_OPTIM_CALLER) /* else no momentum here */
        status = net_send_chunks(srv, p, iter, sh->momentum, 1, 0, &bytes);
    if (status != GV_OK)
        gv_log(GV_LOG_ERROR, "server %u: cannot send the model to %s: %s", srv->rank, p->name,
               gv_status_str(status));
    *bytes_p += bytes;
    return status;
}

void srv_send_bye(struct gv_server *srv, struct srv_peer *p, uint64_t iteration)
{
    (void)srv;
    if (p == NULL || p->closed || p->bye_sent)
        return;
    struct gv_proto_msg m;
    gv_ps_link_msg(&p->link, &m, GV_PROTO_MSG_BYE, iteration);
    (void)gv_ps_link_send(&p->link, &m, NULL, 0, NULL);
    p->bye_sent = true;
}

void srv_send_bye_all(struct gv_server *srv, uint64_t iteration)
{
    for (uint32_t w = 0; w < srv->W; w++)
        srv_send_bye(srv, srv->net.workers[w], iteration);
}

void srv_send_error_all(struct gv_server *srv, uint64_t iter, gv_status_t code, const char *text)
{
    for (struct srv_peer *p = srv->net.joined.head; p != NULL; p = p->next) {
        if (p->closed)
            continue;
        struct gv_proto_msg m;
        gv_ps_link_msg(&p->link, &m, GV_PROTO_MSG_ERROR, iter);
        m.u.error.code = code;
        m.u.error.text = text; /* cut to the wire's cap by the link */
        (void)gv_ps_link_send(&p->link, &m, NULL, 0, NULL);
    }
}

void srv_send_evict(struct gv_server *srv, struct srv_peer *p, uint64_t iter, const char *text)
{
    (void)srv;
    if (p->link.c == NULL)
        return;
    struct gv_proto_msg m;
    gv_ps_link_msg(&p->link, &m, GV_PROTO_MSG_ERROR, iter);
    m.u.error.code = GV_ERR_CLOSED;
    m.u.error.text = text;
    srv_peer_send_close(p, &m);
}

void srv_send_heartbeat(struct gv_server *srv, struct srv_peer *p, uint64_t iter, uint64_t now)
{
    if (srv->cfg.heartbeat_interval_ns == 0 || !gv_ps_link_idle(&p->link) ||
        now - p->link.t_sent_ns < srv->cfg.heartbeat_interval_ns)
        return;
    struct gv_proto_msg m;
    gv_ps_link_msg(&p->link, &m, GV_PROTO_MSG_HEARTBEAT, iter);
    (void)gv_ps_link_send(&p->link, &m, NULL, 0, NULL); /* busy: try again next tick */
}

void srv_send_ckpt_report(struct gv_server *srv, struct srv_peer *p, uint64_t iter,
                          gv_status_t status)
{
    struct gv_proto_msg m;
    gv_ps_msg_init(&m, &srv->env, GV_PROTO_MSG_STATS, iter);
    m.u.stats.stats.ckpt_iter = iter;
    m.u.stats.stats.ckpt_status = status;
    (void)gv_ps_link_send(&p->link, &m, NULL, 0, NULL);
}

void srv_send_ckpt_verdict(struct gv_server *srv, struct srv_peer *p, uint64_t iter,
                           gv_status_t status)
{
    (void)srv;
    struct gv_proto_msg m;
    gv_ps_link_msg(&p->link, &m, GV_PROTO_MSG_DECISION, iter);
    m.u.decision.ckpt_iter = iter;
    m.u.decision.ckpt_status = status;
    (void)gv_ps_link_send(&p->link, &m, NULL, 0, NULL);
}

void srv_send_error_workers(struct gv_server *srv, uint64_t iter, gv_status_t code,
                            const char *text)
{
    for (uint32_t w = 0; w < srv->W; w++) {
        struct srv_peer *p = srv->net.workers[w];
        if (p == NULL || p->closed || p->link.c == NULL)
            continue;
        struct gv_proto_msg m;
        gv_ps_link_msg(&p->link, &m, GV_PROTO_MSG_ERROR, iter);
        m.u.error.code = code;
        m.u.error.text = text;
        (void)gv_ps_link_send(&p->link, &m, NULL, 0, NULL);
    }
}
