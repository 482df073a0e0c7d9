/* rdma_cm.c: connection management over librdmacm: address and route resolution, listening,
 * the blocking connect with retries, accepting, the event channel of open connections, and the
 * address probe behind gv_tp_create_auto. Queue pairs are RC, created through rdma_cm; the
 * protocol parameters (version, credits, slot size) travel in the connect/accept private
 * data, never in a hand-parsed text exchange. */
#include "rdma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define CM_RESOLVE_MS 2000
#define CM_RETRY_MS 100

static void cm_serve_thread(void);

/* An event copied out before it is acked (acking frees its private data). */
struct cm_ev {
    enum rdma_cm_event_type type;
    int status;
    struct rdma_cm_id *id;
    struct rdma_cm_id *listen_id;
    uint8_t pdata[64];
    uint8_t plen;
};

static void cm_copy(const struct rdma_cm_event *ev, struct cm_ev *e)
{
    e->type = ev->event;
    e->status = ev->status;
    e->id = ev->id;
    e->listen_id = ev->listen_id;
    e->plen = 0;
    if (ev->param.conn.private_data != NULL) {
        e->plen = (uint8_t)GV_MIN(ev->param.conn.private_data_len, sizeof(e->pdata));
        memcpy(e->pdata, ev->param.conn.private_data, e->plen);
    }
}

static void cm_sockaddr_str(const struct sockaddr *sa, char *buf, size_t n)
{
    char host[INET6_ADDRSTRLEN] = "?";
    uint16_t port = 0;
    if (sa != NULL && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
        snprintf(buf, n, "%s:%u", host, port);
    } else if (sa != NULL && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
        snprintf(buf, n, "[%s]:%u", host, port);
    } else {
        snprintf(buf, n, "?");
    }
}

void gv_rdma_peer_str(struct rdma_cm_id *id, char *buf, size_t n)
{
    cm_sockaddr_str(rdma_get_peer_addr(id), buf, n);
}

static int cm_wildcard(const char *host)
{
    return host == NULL || *host == '\0' || strcmp(host, "0.0.0.0") == 0 ||
           strcmp(host, "::") == 0 || strcmp(host, "*") == 0;
}

gv_status_t gv_rdma_resolve_host(const char *host, uint16_t port, int passive,
                                 struct sockaddr_storage *ss, char *why, size_t n)
{
    memset(ss, 0, sizeof(*ss));
    if (passive && (host == NULL || *host == '\0')) {
        /* all IPv4 and IPv6 addresses: the v6 wildcard (rdma_cm binds it dual-stack) */
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)ss;
        in6->sin6_family = AF_INET6;
        in6->sin6_addr = in6addr_any;
        in6->sin6_port = htons(port);
        return GV_OK;
    }
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0};
    struct addrinfo *res = NULL;
    char ps[8];
    snprintf(ps, sizeof(ps), "%u", port);
    int ret = getaddrinfo(host, ps, &hints, &res);
    if (ret != 0 || res == NULL) {
        snprintf(why, n, "cannot resolve '%s': %s", host ? host : "", gai_strerror(ret));
        return GV_ERR_INVAL;
    }
    memcpy(ss, res->ai_addr, GV_MIN((size_t)res->ai_addrlen, sizeof(*ss)));
    freeaddrinfo(res);
    return GV_OK;
}

/* ---------------------------------------------------------------- listening */

gv_status_t gv_rdma_listen(struct gv_tp *base, const char *host, uint16_t port,
                           struct gv_listener **l_p)
{
    struct rdma_tp *tp = (struct rdma_tp *)base;
    char why[256] = "", addr[64];
    struct sockaddr_storage ss;
    gv_status_t status = gv_rdma_resolve_host(host, port, 1, &ss, why, sizeof(why));
    if (status != GV_OK) {
        gv_log(GV_LOG_ERROR, "rdma: listen: %s", why);
        return status;
    }
    cm_sockaddr_str((struct sockaddr *)&ss, addr, sizeof(addr));
    struct rdma_listener *l = gv_calloc(1, sizeof(*l));
    if (l == NULL)
        return GV_ERR_NOMEM;
    l->tp = tp;
    if (rdma_create_id(tp->ch, &l->id, l, RDMA_PS_TCP) != 0) {
        gv_log(GV_LOG_ERROR, "rdma: listen on %s: rdma_create_id: %s", addr, strerror(errno));
        gv_free(l);
        return GV_ERR_IO;
    }
    status = GV_ERR_IO;
    if (rdma_bind_addr(l->id, (struct sockaddr *)&ss) != 0) {
        int err = errno;
        if (err == ENODEV || err == EADDRNOTAVAIL) {
            gv_log(GV_LOG_ERROR,
                   "rdma: cannot listen on %s: the address is not on an RDMA "
                   "device (%s)",
                   addr, strerror(err));
            status = GV_ERR_NODEV;
        } else {
            gv_log(GV_LOG_ERROR, "rdma: cannot listen on %s: %s", addr, strerror(err));
        }
        goto err_destroy_id;
    }
    if (l->id->verbs != NULL && l->id->verbs != tp->ctx) {
        gv_log(GV_LOG_ERROR,
               "rdma: cannot listen on %s: it belongs to RDMA device %s, this "
               "transport uses %s",
               addr, ibv_get_device_name(l->id->verbs->device), tp->devname);
        status = GV_ERR_NODEV;
        goto err_destroy_id;
    }
    if (rdma_listen(l->id, 128) != 0) {
        gv_log(GV_LOG_ERROR, "rdma: rdma_listen on %s: %s", addr, strerror(errno));
        goto err_destroy_id;
    }
    l->port = ntohs(rdma_get_src_port(l->id));
    l->next = tp->listeners;
    tp->listeners = l;
    gv_log(GV_LOG_INFO, "rdma: listening on %s port %u (device %s)",
           cm_wildcard(host) ? "all addresses" : host, l->port, tp->devname);
    *l_p = (struct gv_listener *)l;
    return GV_OK;

err_destroy_id:
    rdma_destroy_id(l->id);
    gv_free(l);
    return status;
}

uint16_t gv_rdma_listener_port(const struct gv_listener *gl)
{
    return ((const struct rdma_listener *)gl)->port;
}

void gv_rdma_listener_close(struct gv_listener *gl)
{
    struct rdma_listener *l = (struct rdma_listener *)gl;
    if (l == NULL)
        return;
    for (struct rdma_listener **pp = &l->tp->listeners; *pp != NULL; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    for (uint32_t i = 0; i < l->tp->rc_cfg.max_conns; i++)
        if (l->tp->conns[i] != NULL && l->tp->conns[i]->lst == l)
            l->tp->conns[i]->lst = NULL;
    gv_rdma_cm_forget(l->tp, l->id);
    rdma_destroy_id(l->id);
    gv_free(l);
}

/* ---------------------------------------------------------------- connecting */

static int64_t cm_left_ms(uint64_t deadline)
{
    uint64_t now = gv_now_ns();
    return now >= deadline ? 0 : (int64_t)((deadline - now) / 1000000);
}

/* Next event on a connect's private channel, copied and acked. */
static gv_status_t cm_wait(struct rdma_event_channel *ch, uint64_t deadline, struct cm_ev *e)
{
    for (;;) {
        struct rdma_cm_event *ev;
        if (rdma_get_cm_event(ch, &ev) == 0) {
            cm_copy(ev, e);
            rdma_ack_cm_event(ev);
            return GV_OK;
        }
        if (errno != EAGAIN && errno != EINTR) {
            gv_log(GV_LOG_ERROR, "rdma: rdma_get_cm_event: %s", strerror(errno));
            return GV_ERR_IO;
        }
        int64_t left = cm_left_ms(deadline);
        if (left <= 0)
            return GV_ERR_TIMEOUT;
        cm_serve_thread(); /* the peer may be a transport of this very thread */
        struct pollfd p = {.fd = ch->fd, .events = POLLIN};
        poll(&p, 1, (int)GV_MIN(left, 10));
    }
}

/* A private, non-blocking event channel (for a connect or a probe). */
static struct rdma_event_channel *cm_channel(void)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    int fl;
    if (ch != NULL &&
        ((fl = fcntl(ch->fd, F_GETFL)) < 0 || fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) != 0)) {
        rdma_destroy_event_channel(ch);
        return NULL;
    }
    return ch;
}

static void cm_sleep_ms(int64_t ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

void gv_rdma_local_params(const struct rdma_tp *tp, struct gv_rp_params *p)
{
    p->version = GV_RP_VERSION;
    p->rx_depth = (uint16_t)tp->pcfg.rx_depth;
    p->slot_size = tp->pcfg.slot_size;
}

static void cm_conn_param(const struct rdma_tp *tp, uint8_t *pd, struct rdma_conn_param *prm)
{
    struct gv_rp_params mine;
    gv_rdma_local_params(tp, &mine);
    gv_rp_params_encode(&mine, pd);
    /* No RDMA READs (responder resources 0); hardware retries forever on RNR (receives are
     * always posted, so RNR means a stalled peer, which the io timeout catches). */
    *prm = (struct rdma_conn_param){.private_data = pd,
                                    .private_data_len = GV_RP_PARAMS_LEN,
                                    .responder_resources = 0,
                                    .initiator_depth = 0,
                                    .retry_count = 7,
                                    .rnr_retry_count = 7};
}

/* One connect attempt on a fresh id and channel. *retry says whether failing again later may
 * help (nobody listening yet) or not (no RDMA route, other protocol version). */
static gv_status_t cm_attempt(struct rdma_tp *tp, const struct sockaddr *sa, const char *addr,
                              uint64_t deadline, struct rdma_conn **c_p, int *retry)
{
    *retry = 0;
    struct rdma_event_channel *ch = cm_channel();
    struct rdma_cm_id *id = NULL;
    struct rdma_conn *c = NULL;
    struct cm_ev e;
    gv_status_t status = GV_ERR_IO;
    if (ch == NULL || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) != 0) {
        gv_log(GV_LOG_ERROR, "rdma: connect to %s: %s", addr, strerror(errno));
        goto err_channel;
    }
    int ms = (int)GV_MAX(1, GV_MIN(cm_left_ms(deadline), CM_RESOLVE_MS));
    if (rdma_resolve_addr(id, NULL, (struct sockaddr *)sa, ms) != 0 ||
        (status = cm_wait(ch, deadline, &e)) != GV_OK || e.type != RDMA_CM_EVENT_ADDR_RESOLVED) {
        gv_log(GV_LOG_ERROR,
               "rdma: connect to %s: the address is not reachable through an "
               "RDMA device",
               addr);
        status = GV_ERR_NODEV;
        goto err_channel;
    }
    if (id->verbs != tp->ctx) {
        gv_log(GV_LOG_ERROR,
               "rdma: connect to %s: routed through RDMA device %s, this "
               "transport uses %s",
               addr, ibv_get_device_name(id->verbs->device), tp->devname);
        status = GV_ERR_NODEV;
        goto err_channel;
    }
    *retry = 1;
    if (rdma_resolve_route(id, ms) != 0 || cm_wait(ch, deadline, &e) != GV_OK ||
        e.type != RDMA_CM_EVENT_ROUTE_RESOLVED) {
        status = GV_ERR_TIMEOUT;
        goto err_channel;
    }
    status = gv_rdma_conn_new(tp, id, &c);
    if (status != GV_OK) {
        *retry = 0; /* out of memory or connections: waiting will not help */
        goto err_channel;
    }
    id = NULL; /* owned by c from here */
    snprintf(c->base.peer, sizeof(c->base.peer), "%s", addr);
    status = gv_rdma_conn_setup(c, NULL);
    if (status != GV_OK) {
        *retry = 0;
        goto err_conn;
    }
    uint8_t pd[GV_RP_PARAMS_LEN];
    struct rdma_conn_param prm;
    cm_conn_param(tp, pd, &prm);
    if (rdma_connect(c->id, &prm) != 0) {
        gv_log(GV_LOG_ERROR, "rdma: rdma_connect to %s: %s", addr, strerror(errno));
        goto err_conn;
    }
    status = cm_wait(ch, deadline, &e);
    if (status == GV_OK && e.type == RDMA_CM_EVENT_ESTABLISHED) {
        struct gv_rp_params peer;
        status = gv_rp_params_decode(e.pdata, e.plen, &peer);
        if (status == GV_OK)
            status = gv_rp_set_peer(&c->pc, &peer);
        if (status != GV_OK) {
            gv_log(GV_LOG_ERROR, "rdma: %s speaks another protocol (%s)", addr,
                   gv_status_str(status));
            *retry = 0;
            goto err_conn;
        }
        if (rdma_migrate_id(c->id, tp->ch) != 0) {
            gv_log(GV_LOG_ERROR, "rdma: rdma_migrate_id: %s", strerror(errno));
            goto err_conn;
        }
        rdma_destroy_event_channel(ch);
        *c_p = c;
        return GV_OK;
    }
    if (status == GV_OK && e.type == RDMA_CM_EVENT_REJECTED) {
        struct gv_rp_params peer;
        if (gv_rp_params_decode(e.pdata, e.plen, &peer) == GV_ERR_VERSION) {
            gv_log(GV_LOG_ERROR, "rdma: %s refused us: protocol version %u, ours %u", addr,
                   peer.version, GV_RP_VERSION);
            *retry = 0;
            status = GV_ERR_VERSION;
            goto err_conn;
        }
    }
    gv_log(GV_LOG_DEBUG, "rdma: connect to %s: %s (status %d)", addr,
           status == GV_OK ? rdma_event_str(e.type) : gv_status_str(status), e.status);
    status = GV_ERR_TIMEOUT;

err_conn:
    gv_rdma_conn_discard(c);
err_channel:
    if (id != NULL)
        rdma_destroy_id(id);
    if (ch != NULL)
        rdma_destroy_event_channel(ch);
    return status;
}

gv_status_t gv_rdma_connect(struct gv_tp *base, const char *host, uint16_t port,
                            struct gv_conn **c_p)
{
    struct rdma_tp *tp = (struct rdma_tp *)base;
    char why[256] = "", addr[64];
    struct sockaddr_storage ss;
    gv_status_t status = gv_rdma_resolve_host(host, port, 0, &ss, why, sizeof(why));
    if (status != GV_OK) {
        gv_log(GV_LOG_ERROR, "rdma: connect: %s", why);
        return status;
    }
    cm_sockaddr_str((struct sockaddr *)&ss, addr, sizeof(addr));
    uint64_t deadline = gv_now_ns() + (uint64_t)GV_MAX(base->cfg.connect_timeout_ms, 1) * 1000000;
    for (;;) {
        struct rdma_conn *c = NULL;
        int retry = 0;
        status = cm_attempt(tp, (struct sockaddr *)&ss, addr, deadline, &c, &retry);
        if (status == GV_OK) {
            gv_rdma_conn_established(c);
            gv_log(GV_LOG_INFO, "rdma conn %" PRIu64 ": connected to %s (qp 0x%x, device %s)",
                   c->base.id, addr, c->qp->qp_num, tp->devname);
            *c_p = &c->base;
            return GV_OK;
        }
        if (!retry)
            return status;
        if (cm_left_ms(deadline) <= 0) {
            gv_log(GV_LOG_ERROR, "rdma: connect to %s: no answer within %d ms", addr,
                   base->cfg.connect_timeout_ms);
            return GV_ERR_TIMEOUT;
        }
        cm_sleep_ms(GV_MIN(CM_RETRY_MS, cm_left_ms(deadline)));
    }
}

/* ---------------------------------------------------------------- passive side and events */

static void cm_refuse(struct rdma_tp *tp, struct rdma_cm_id *id)
{
    uint8_t pd[GV_RP_PARAMS_LEN];
    struct rdma_conn_param prm;
    cm_conn_param(tp, pd, &prm);
    rdma_reject(id, pd, GV_RP_PARAMS_LEN);
    rdma_destroy_id(id);
}

/* Connection requests anyone can send in a loop: their refusals are rate-limited. A request
 * that cannot be served (connection limit, queue pairs exhausted) is rejected at once, so the
 * event channel never spins on it (the TCP listener's back-off, for RDMA). */
static struct gv_log_limit cm_lim_request = GV_LOG_LIMIT_INIT(10, 10000);

static void cm_on_request(struct rdma_tp *tp, const struct cm_ev *e)
{
    struct rdma_cm_id *id = e->id;
    struct rdma_listener *l = e->listen_id != NULL ? e->listen_id->context : NULL;
    char who[64];
    gv_rdma_peer_str(id, who, sizeof(who));
    struct gv_rp_params peer;
    gv_status_t status = gv_rp_params_decode(e->pdata, e->plen, &peer);
    if (status != GV_OK) {
        GV_LOG_LIMITED(GV_LOG_WARN, &cm_lim_request, "rdma: refusing connection from %s: %s", who,
                       status == GV_ERR_VERSION ? "other protocol version"
                                                : "bad connection parameters");
        cm_refuse(tp, id);
        return;
    }
    if (id->verbs != tp->ctx) {
        GV_LOG_LIMITED(GV_LOG_WARN, &cm_lim_request,
                       "rdma: refusing connection from %s on device %s: this transport uses %s",
                       who, ibv_get_device_name(id->verbs->device), tp->devname);
        cm_refuse(tp, id);
        return;
    }
    struct rdma_conn *c;
    if (gv_rdma_conn_new(tp, id, &c) != GV_OK) {
        cm_refuse(tp, id);
        return;
    }
    c->lst = l;
    c->state = RDMA_CONN_ACCEPTING;
    uint8_t pd[GV_RP_PARAMS_LEN];
    struct rdma_conn_param prm;
    cm_conn_param(tp, pd, &prm);
    if (gv_rdma_conn_setup(c, &peer) != GV_OK) {
        rdma_reject(id, pd, GV_RP_PARAMS_LEN);
        gv_rdma_conn_discard(c);
        return;
    }
    if (rdma_accept(id, &prm) != 0) {
        GV_LOG_LIMITED(GV_LOG_WARN, &cm_lim_request, "rdma: rdma_accept from %s: %s", who,
                       strerror(errno));
        gv_rdma_conn_discard(c);
    }
}

static void cm_on_conn_event(struct rdma_tp *tp, struct rdma_conn *c, const struct cm_ev *e)
{
    switch (e->type) {
    case RDMA_CM_EVENT_ESTABLISHED: gv_rdma_conn_accepted(c); return;
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        if (c->state == RDMA_CONN_ACCEPTING) {
            gv_rdma_conn_discard(c); /* the user never saw it */
            return;
        }
        if (e->type == RDMA_CM_EVENT_DEVICE_REMOVAL)
            gv_log(GV_LOG_ERROR, "rdma conn %" PRIu64 ": device %s removed", c->base.id,
                   tp->devname);
        /* What arrived before the disconnect is delivered first. */
        gv_rdma_conn_ref(c);
        gv_rdma_cq_poll(tp);
        int closed = c->state == RDMA_CONN_CLOSED;
        gv_rdma_conn_unref(c);
        if (closed)
            return;
        gv_rdma_conn_fail(c, e->type == RDMA_CM_EVENT_DISCONNECTED ? GV_ERR_CLOSED : GV_ERR_IO);
        return;
    default: return; /* TIMEWAIT_EXIT, ADDR_CHANGE: nothing to do */
    }
}

void gv_rdma_cm_forget(struct rdma_tp *tp, struct rdma_cm_id *id)
{
    for (unsigned i = 0; i < tp->ndeferred; i++)
        if (tp->deferred[i].id == id)
            tp->deferred[i].id = NULL;
}

static void cm_dispatch(struct rdma_tp *tp, const struct cm_ev *e)
{
    if (e->id == NULL)
        return; /* its id was destroyed while the event waited */
    if (e->type == RDMA_CM_EVENT_CONNECT_REQUEST) {
        cm_on_request(tp, e);
        return;
    }
    int on_listener = 0;
    for (struct rdma_listener *l = tp->listeners; l != NULL; l = l->next)
        on_listener |= e->id == l->id;
    if (on_listener && e->type == RDMA_CM_EVENT_DEVICE_REMOVAL)
        gv_log(GV_LOG_ERROR, "rdma: device %s removed under a listener", tp->devname);
    else if (!on_listener && e->id != NULL && e->id->context != NULL)
        cm_on_conn_event(tp, e->id->context, e);
}

/* nested: called from a blocking connect on the owner's thread. Only connection requests are
 * answered (no user callback runs); other events are kept for the owner's progress(). */
static int cm_poll(struct rdma_tp *tp, int nested)
{
    int n = 0;
    for (unsigned i = 0; !nested && i < tp->ndeferred; i++, n++)
        cm_dispatch(tp, &tp->deferred[i]);
    if (!nested)
        tp->ndeferred = 0;
    for (;;) {
        if (nested && (tp->deferred == NULL || tp->ndeferred == RDMA_CM_DEFERRED))
            return n; /* no room to keep events: leave them in the channel */
        struct rdma_cm_event *ev;
        if (rdma_get_cm_event(tp->ch, &ev) != 0) {
            if (errno == EAGAIN || errno == EINTR)
                return n;
            gv_log(GV_LOG_ERROR, "rdma: rdma_get_cm_event: %s", strerror(errno));
            return GV_ERR_IO;
        }
        struct cm_ev e;
        cm_copy(ev, &e);
        rdma_ack_cm_event(ev); /* before anything may destroy the id */
        n++;
        if (nested && e.type != RDMA_CM_EVENT_CONNECT_REQUEST)
            tp->deferred[tp->ndeferred++] = e;
        else
            cm_dispatch(tp, &e);
    }
}

int gv_rdma_cm_poll(struct rdma_tp *tp)
{
    return cm_poll(tp, 0);
}

static pthread_mutex_t cm_tps_mu = PTHREAD_MUTEX_INITIALIZER;
static struct rdma_tp *cm_tps;
static _Thread_local char cm_thread_token;

uintptr_t gv_rdma_thread_token(void)
{
    return (uintptr_t)&cm_thread_token;
}

void gv_rdma_cm_thread_add(struct rdma_tp *tp)
{
    tp->deferred = gv_calloc(RDMA_CM_DEFERRED, sizeof(*tp->deferred));
    pthread_mutex_lock(&cm_tps_mu);
    tp->thread_next = cm_tps;
    cm_tps = tp;
    pthread_mutex_unlock(&cm_tps_mu);
}

void gv_rdma_cm_thread_del(struct rdma_tp *tp)
{
    pthread_mutex_lock(&cm_tps_mu);
    for (struct rdma_tp **pp = &cm_tps; *pp != NULL; pp = &(*pp)->thread_next)
        if (*pp == tp) {
            *pp = tp->thread_next;
            break;
        }
    pthread_mutex_unlock(&cm_tps_mu);
}

/* Answers connection requests for the transports this thread runs (a transport is only ever
 * touched by its own thread; the others are left alone). */
static void cm_serve_thread(void)
{
    uintptr_t me = gv_rdma_thread_token();
    pthread_mutex_lock(&cm_tps_mu);
    for (struct rdma_tp *tp = cm_tps; tp != NULL; tp = tp->thread_next) {
        if (atomic_load(&tp->owner) != me || pthread_mutex_trylock(&tp->mu) != 0)
            continue; /* another thread runs it (or is about to) */
        cm_poll(tp, 1);
        pthread_mutex_unlock(&tp->mu);
    }
    pthread_mutex_unlock(&cm_tps_mu);
}

/* ---------------------------------------------------------------- probing (auto selection) */

static int probe_count(void *ctx, int *err_p)
{
    (void)ctx;
    int num = 0;
    errno = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (list == NULL) {
        *err_p = errno ? errno : ENODEV;
        return -1;
    }
    ibv_free_device_list(list);
    return num;
}

static gv_status_t probe_route(void *ctx, const char *host, char *dev, size_t devn, char *why,
                               size_t n)
{
    (void)ctx;
    dev[0] = '\0';
    if (cm_wildcard(host))
        return GV_OK; /* any device will do */
    struct sockaddr_storage ss;
    gv_status_t status = gv_rdma_resolve_host(host, 0, 0, &ss, why, n);
    if (status != GV_OK)
        return GV_ERR_NODEV;
    struct rdma_event_channel *ch = cm_channel();
    struct rdma_cm_id *id = NULL;
    if (ch == NULL || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) != 0) {
        gv_rdma_nodev_reason(errno, why, n);
        if (ch != NULL)
            rdma_destroy_event_channel(ch);
        return GV_ERR_NODEV;
    }
    /* A local address binds to its device; any other must resolve through one. */
    status = GV_ERR_NODEV;
    if (rdma_bind_addr(id, (struct sockaddr *)&ss) == 0) {
        if (id->verbs != NULL)
            status = GV_OK;
    } else if (errno == EADDRNOTAVAIL) {
        struct cm_ev e;
        if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&ss, CM_RESOLVE_MS) == 0 &&
            cm_wait(ch, gv_now_ns() + (uint64_t)CM_RESOLVE_MS * 1000000, &e) == GV_OK &&
            e.type == RDMA_CM_EVENT_ADDR_RESOLVED && id->verbs != NULL)
            status = GV_OK;
    }
    if (status == GV_OK)
        snprintf(dev, devn, "%s", ibv_get_device_name(id->verbs->device));
    else
        snprintf(why, n, "address %s is not on (or routed through) an RDMA device", host);
    rdma_destroy_id(id);
    rdma_destroy_event_channel(ch);
    return status;
}

static void probe_memlock(void *ctx, uint64_t *limit_p, int *cap_p)
{
    (void)ctx;
    gv_rdma_memlock_read(limit_p, cap_p);
}

const struct gv_rdma_probe_ops gv_rdma_probe_sys = {probe_count, probe_route, probe_memlock};

int gv_rdma_built(void)
{
    return 1;
}
