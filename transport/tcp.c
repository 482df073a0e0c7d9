/* tcp.c: the TCP backend's lifecycle: create/destroy, socket options, listen and accept,
 * connection references and teardown, and the ops table. Connecting (blocking, and without
 * blocking) is in tcp_connect.c, the data path (send, receive) in tcp_io.c, the event loop and
 * timeouts in tcp_loop.c. */
#include "tcp_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define TCP_ACCEPT_PAUSE_MS 100 /* accept out of descriptors: wait this long before retrying */

gv_status_t tcp_status_of_errno(int err)
{
    return err == ETIMEDOUT ? GV_ERR_TIMEOUT : GV_ERR_IO;
}

/* ---------------------------------------------------------------- socket options */

static void tcp_setsockopt_int(int fd, int level, int opt, int val, const char *name)
{
    if (setsockopt(fd, level, opt, &val, sizeof(val)) != 0)
        gv_log(GV_LOG_WARN, "tcp: setsockopt %s=%d: %s", name, val, strerror(errno));
}

/* Buffer sizes must be set before connect/listen so that the window scale is negotiated
 * for them; accepted sockets inherit the listener's. */
void tcp_sock_set_bufs(int fd, const struct gv_tp_config *cfg)
{
    if (cfg->sock_buf_bytes <= 0)
        return;
    tcp_setsockopt_int(fd, SOL_SOCKET, SO_SNDBUF, cfg->sock_buf_bytes, "SO_SNDBUF");
    tcp_setsockopt_int(fd, SOL_SOCKET, SO_RCVBUF, cfg->sock_buf_bytes, "SO_RCVBUF");
}

/* Latency and dead-peer options on an established socket. TCP_USER_TIMEOUT bounds how long
 * written data may stay unacknowledged; keepalive probes an idle peer. */
void tcp_sock_set_conn_opts(int fd, const struct gv_tp_config *cfg)
{
    tcp_setsockopt_int(fd, IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY");
    tcp_setsockopt_int(fd, SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE");
    tcp_setsockopt_int(fd, IPPROTO_TCP, TCP_KEEPIDLE, cfg->keepalive_idle_s, "TCP_KEEPIDLE");
    tcp_setsockopt_int(fd, IPPROTO_TCP, TCP_KEEPINTVL, cfg->keepalive_intvl_s, "TCP_KEEPINTVL");
    tcp_setsockopt_int(fd, IPPROTO_TCP, TCP_KEEPCNT, cfg->keepalive_cnt, "TCP_KEEPCNT");
    tcp_setsockopt_int(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, cfg->io_timeout_ms, "TCP_USER_TIMEOUT");
}

void tcp_addr_str(const struct sockaddr *sa, socklen_t len, char *out, size_t out_len)
{
    char host[64], serv[8];
    if (getnameinfo(sa, len, host, sizeof(host), serv, sizeof(serv),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(out, out_len, "?");
        return;
    }
    if (sa->sa_family == AF_INET6)
        snprintf(out, out_len, "[%.52s]:%.5s", host, serv);
    else
        snprintf(out, out_len, "%.54s:%.5s", host, serv);
}

/* ---------------------------------------------------------------- connections */

void tcp_conn_get(struct tcp_conn *c)
{
    c->refs++;
}

static void tcp_list_unlink(struct tcp_conn **head, struct tcp_conn *c)
{
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        *head = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

void tcp_list_push(struct tcp_conn **head, struct tcp_conn *c)
{
    c->prev = NULL;
    c->next = *head;
    if (*head != NULL)
        (*head)->prev = c;
    *head = c;
}

void tcp_conn_free_unlisted(struct tcp_conn *c)
{
    gv_free(c->host);
    gv_free(c->sq);
    gv_free(c->rbuf);
    gv_free(c);
}

static void tcp_conn_free(struct tcp_conn *c)
{
    tcp_list_unlink(&c->tp->zombies, c);
    tcp_conn_free_unlisted(c);
}

void tcp_conn_put(struct tcp_conn *c)
{
    GV_ASSERT(c->refs > 0);
    if (--c->refs == 0 && c->tp->depth == 0)
        tcp_conn_free(c);
}

/* Frees closed conns and listeners that nobody references any more; called when the
 * outermost progress (or teardown) frame ends. */
void tcp_reap(struct tcp_tp *tp)
{
    struct tcp_conn *c = tp->zombies, *next;
    for (; c != NULL; c = next) {
        next = c->next;
        if (c->refs == 0)
            tcp_conn_free(c);
    }
    while (tp->dead_listeners != NULL) {
        struct tcp_listener *l = tp->dead_listeners;
        tp->dead_listeners = l->next;
        gv_free(l);
    }
}

gv_status_t tcp_conn_alloc(struct tcp_tp *tp, struct tcp_conn **c_p)
{
    const struct gv_tp_config *cfg = &tp->base.cfg;
    struct tcp_conn *c = gv_calloc(1, sizeof(*c));
    if (c == NULL)
        goto err;
    c->rcap = cfg->max_hdr_len + TCP_STAGE_BYTES;
    c->rbuf = gv_malloc(c->rcap);
    c->sq = gv_calloc(cfg->max_send_queue, sizeof(*c->sq));
    if (c->rbuf == NULL || c->sq == NULL)
        goto err_free;
    c->base.tp = &tp->base;
    c->base.id = gv_tp_conn_id_next();
    c->ev_kind = TCP_EV_CONN;
    c->fd = -1;
    c->tp = tp;
    c->refs = 1;
    c->rcvlowat = 1;
    *c_p = c;
    return GV_OK;

err_free:
    gv_free(c->sq);
    gv_free(c->rbuf);
    gv_free(c);
err:
    gv_log(GV_LOG_ERROR, "tcp: out of memory for a connection");
    return GV_ERR_NOMEM;
}

void tcp_conn_set_peer(struct tcp_conn *c)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getpeername(c->fd, (struct sockaddr *)&ss, &len) == 0)
        tcp_addr_str((struct sockaddr *)&ss, len, c->base.peer, sizeof(c->base.peer));
}

/* Wraps an established, non-blocking socket. On failure fd is left open for the caller. */
gv_status_t tcp_conn_new(struct tcp_tp *tp, int fd, struct tcp_conn **c_p)
{
    struct tcp_conn *c;
    gv_status_t status = tcp_conn_alloc(tp, &c);
    if (status != GV_OK)
        return status;
    c->fd = fd;
    tcp_conn_set_peer(c);
    tcp_sock_set_conn_opts(fd, &tp->base.cfg);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = &c->ev_kind};
    if (epoll_ctl(tp->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        gv_log(GV_LOG_ERROR, "tcp: epoll_ctl add conn %s: %s", c->base.peer, strerror(errno));
        c->fd = -1;
        tcp_conn_free_unlisted(c);
        return GV_ERR_IO;
    }
    c->ep_events = ev.events;
    tcp_list_push(&tp->conns, c);
    gv_log(GV_LOG_DEBUG, "tcp: conn %llu peer %s open (fd %d)", (unsigned long long)c->base.id,
           c->base.peer, fd);
    *c_p = c;
    return GV_OK;
}

void tcp_conn_fail_later(struct tcp_conn *c, gv_status_t reason)
{
    if (c->state != TCP_CONN_OPEN && c->state != TCP_CONN_CONNECTING)
        return;
    c->state = TCP_CONN_FAILED;
    c->fail_reason = reason;
    c->tp->n_failed++;
}

void tcp_conn_teardown(struct tcp_conn *c, gv_status_t reason)
{
    struct tcp_tp *tp = c->tp;
    const struct gv_tp_handler *h = &tp->base.h;
    gv_status_t send_status = reason == GV_OK ? GV_ERR_CLOSED : reason;

    if (c->state == TCP_CONN_CLOSING || c->state == TCP_CONN_CLOSED)
        return;
    if (c->state == TCP_CONN_FAILED)
        tp->n_failed--;
    if (c->rx_resume) {
        c->rx_resume = 0;
        tp->n_resume--;
    }
    c->state = TCP_CONN_CLOSING;
    tp->depth++;      /* nothing is freed under the callbacks below */
    if (c->fd >= 0) { /* a connect between attempts has none */
        epoll_ctl(tp->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->fd = -1;
    }
    /* debug: the cause of an error close was logged where it was detected */
    gv_log(GV_LOG_DEBUG, "tcp: conn %llu peer %s closed: %s (sent %llu, received %llu bytes)",
           (unsigned long long)c->base.id, c->base.peer, gv_status_str(reason),
           (unsigned long long)c->base.bytes_sent, (unsigned long long)c->base.bytes_recv);
    while (c->sq_count > 0) {
        struct tcp_sendq_ent *e = &c->sq[c->sq_head];
        gv_tp_send_cb cb = e->cb;
        void *arg = e->arg;
        c->sq_head = (c->sq_head + 1) % tp->base.cfg.max_send_queue;
        c->sq_count--;
        if (cb != NULL)
            cb(&c->base, send_status, arg);
    }
    c->sq_bytes = 0;
    if (h->on_close != NULL)
        h->on_close(&c->base, reason, tp->base.user);
    c->state = TCP_CONN_CLOSED;
    tcp_list_unlink(&tp->conns, c);
    tcp_list_push(&tp->zombies, c);
    c->refs--; /* the reference the open state held */
    if (--tp->depth == 0)
        tcp_reap(tp);
}

static void tcp_conn_close(struct gv_conn *bc)
{
    tcp_conn_teardown(tcp_conn_of(bc), GV_OK);
}

/* ---------------------------------------------------------------- listen / accept */

static int tcp_listen_socket(struct tcp_tp *tp, const struct addrinfo *ai, int *err_p)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        *err_p = errno;
        return -1;
    }
    tcp_setsockopt_int(fd, SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR");
    if (ai->ai_family == AF_INET6) /* "::" also takes IPv4 (dual stack) */
        tcp_setsockopt_int(fd, IPPROTO_IPV6, IPV6_V6ONLY, 0, "IPV6_V6ONLY");
    tcp_sock_set_bufs(fd, &tp->base.cfg);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
        *err_p = errno;
        close(fd);
        return -1;
    }
    return fd;
}

/* host NULL: "::" dual stack, or 0.0.0.0 where the kernel has no IPv6. */
static int tcp_listen_resolve(struct tcp_tp *tp, const char *host, uint16_t port, int *err_p)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char serv[8];
    int fd = -1;

    snprintf(serv, sizeof(serv), "%u", (unsigned)port);
    const char *hosts[2] = {host, NULL};
    if (host == NULL) {
        hosts[0] = "::";
        hosts[1] = "0.0.0.0";
    }
    for (int i = 0; i < 2 && hosts[i] != NULL && fd < 0; i++) {
        int ret = getaddrinfo(hosts[i], serv, &hints, &res);
        if (ret != 0) {
            gv_log(GV_LOG_ERROR, "tcp: listen: cannot resolve '%s': %s", hosts[i],
                   gai_strerror(ret));
            *err_p = EINVAL;
            continue;
        }
        for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next)
            fd = tcp_listen_socket(tp, ai, err_p);
        freeaddrinfo(res);
    }
    return fd;
}

static gv_status_t tcp_listen(struct gv_tp *btp, const char *host, uint16_t port,
                              struct gv_listener **l_p)
{
    struct tcp_tp *tp = tcp_tp_of(btp);
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int err = 0;
    gv_status_t status;
    struct tcp_listener *l = gv_calloc(1, sizeof(*l));

    if (l == NULL) {
        gv_log(GV_LOG_ERROR, "tcp: out of memory for a listener");
        return GV_ERR_NOMEM;
    }
    l->fd = tcp_listen_resolve(tp, host, port, &err);
    if (l->fd < 0) {
        status = err == EINVAL ? GV_ERR_INVAL : GV_ERR_IO;
        if (err != EINVAL)
            gv_log(GV_LOG_ERROR, "tcp: listen on %s port %u: %s", host ? host : "(any)",
                   (unsigned)port, strerror(err));
        goto err_free;
    }
    if (getsockname(l->fd, (struct sockaddr *)&ss, &len) != 0) {
        gv_log(GV_LOG_ERROR, "tcp: getsockname: %s", strerror(errno));
        status = GV_ERR_IO;
        goto err_close;
    }
    l->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    l->ev_kind = TCP_EV_LISTENER;
    l->tp = tp;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &l->ev_kind};
    if (epoll_ctl(tp->epfd, EPOLL_CTL_ADD, l->fd, &ev) != 0) {
        gv_log(GV_LOG_ERROR, "tcp: epoll_ctl add listener: %s", strerror(errno));
        status = GV_ERR_IO;
        goto err_close;
    }
    l->next = tp->listeners;
    tp->listeners = l;
    char name[80];
    tcp_addr_str((struct sockaddr *)&ss, len, name, sizeof(name));
    gv_log(GV_LOG_DEBUG, "tcp: listening on %s", name);
    *l_p = (struct gv_listener *)(void *)l;
    return GV_OK;

err_close:
    close(l->fd);
err_free:
    gv_free(l);
    return status;
}

static uint16_t tcp_listener_port(const struct gv_listener *bl)
{
    return ((const struct tcp_listener *)(const void *)bl)->port;
}

static void tcp_listener_close(struct gv_listener *bl)
{
    struct tcp_listener *l = (struct tcp_listener *)(void *)bl;
    struct tcp_tp *tp = l->tp;
    struct tcp_listener **pp = &tp->listeners;

    while (*pp != NULL && *pp != l)
        pp = &(*pp)->next;
    if (*pp == NULL)
        return; /* already closed */
    *pp = l->next;
    epoll_ctl(tp->epfd, EPOLL_CTL_DEL, l->fd, NULL);
    close(l->fd);
    l->fd = -1;
    if (tp->depth > 0) { /* an event for l may still be pending in this progress call */
        l->next = tp->dead_listeners;
        tp->dead_listeners = l;
    } else {
        gv_free(l);
    }
}

/* accept failed for want of a resource (descriptors, buffers): the pending connection stays
 * queued, so the listener would stay readable and the loop would spin on the failing call.
 * The listener is left out of the poll for a while instead; the queued connections are
 * accepted once descriptors are free again (nothing is shed). */
static void tcp_listener_pause(struct tcp_listener *l, int err)
{
    static struct gv_log_limit lim = GV_LOG_LIMIT_INIT(5, 10000);
    struct tcp_tp *tp = l->tp;
    struct epoll_event ev = {.events = 0, .data.ptr = &l->ev_kind};
    if (epoll_ctl(tp->epfd, EPOLL_CTL_MOD, l->fd, &ev) != 0) {
        gv_log(GV_LOG_ERROR, "tcp: epoll_ctl mod listener: %s", strerror(errno));
        return;
    }
    l->paused_until = gv_now_ns() + TCP_ACCEPT_PAUSE_MS * 1000000ull;
    tp->listen_resume_ns = GV_MIN(tp->listen_resume_ns, l->paused_until);
    GV_LOG_LIMITED(GV_LOG_WARN, &lim,
                   "tcp: accept on port %u: %s; not accepting for %d ms (the connections wait in "
                   "the listen queue)",
                   (unsigned)l->port, strerror(err), TCP_ACCEPT_PAUSE_MS);
}

int tcp_listeners_resume(struct tcp_tp *tp)
{
    uint64_t now = tp->now_ns, next = UINT64_MAX;
    int n = 0;
    if (now < tp->listen_resume_ns)
        return 0;
    for (struct tcp_listener *l = tp->listeners; l != NULL; l = l->next) {
        if (l->paused_until == 0)
            continue;
        if (now < l->paused_until) {
            next = GV_MIN(next, l->paused_until);
            continue;
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &l->ev_kind};
        if (epoll_ctl(tp->epfd, EPOLL_CTL_MOD, l->fd, &ev) != 0) {
            gv_log(GV_LOG_ERROR, "tcp: epoll_ctl mod listener: %s", strerror(errno));
            continue;
        }
        l->paused_until = 0;
        n++;
    }
    tp->listen_resume_ns = next;
    return n;
}

void tcp_listener_on_readable(struct tcp_listener *l)
{
    struct tcp_tp *tp = l->tp;
    const struct gv_tp_handler *h = &tp->base.h;

    for (int i = 0; i < 16 && l->fd >= 0; i++) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int err = errno;
            if (err == EINTR || err == ECONNABORTED)
                continue;
            if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM)
                tcp_listener_pause(l, err);
            else if (err != EAGAIN && err != EWOULDBLOCK)
                gv_log(GV_LOG_WARN, "tcp: accept: %s", strerror(err));
            return;
        }
        struct tcp_conn *c;
        if (tcp_conn_new(tp, fd, &c) != GV_OK) {
            close(fd); /* the peer sees a reset; the listener keeps serving others */
            continue;
        }
        if (h->on_accept != NULL) {
            tcp_conn_get(c);
            h->on_accept((struct gv_listener *)(void *)l, &c->base, tp->base.user);
            tcp_conn_put(c);
        }
    }
}

/* ---------------------------------------------------------------- create / destroy */

static void tcp_destroy(struct gv_tp *btp)
{
    struct tcp_tp *tp = tcp_tp_of(btp);

    while (tp->listeners != NULL)
        tcp_listener_close((struct gv_listener *)(void *)tp->listeners);
    while (tp->conns != NULL)
        tcp_conn_teardown(tp->conns, GV_OK);
    tcp_reap(tp);
    GV_ASSERT(tp->zombies == NULL); /* destroy must not run inside a callback */
    if (tp->epfd >= 0)
        close(tp->epfd);
    gv_free(tp->scratch);
    gv_free(tp);
}

static gv_status_t tcp_create(const struct gv_tp_config *cfg, const struct gv_tp_handler *h,
                              void *user, struct gv_tp **tp_p)
{
    gv_status_t status = GV_ERR_NOMEM;
    struct tcp_tp *tp = gv_calloc(1, sizeof(*tp));

    if (tp == NULL)
        goto err;
    tp->epfd = -1;
    tp->base.ops = &gv_tp_tcp_ops;
    tp->base.cfg = *cfg;
    tp->base.h = *h;
    tp->base.user = user;
    tp->next_check_ns = UINT64_MAX;
    tp->listen_resume_ns = UINT64_MAX;
    tp->scratch = gv_malloc(TCP_SCRATCH_BYTES);
    if (tp->scratch == NULL)
        goto err_destroy;
    tp->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (tp->epfd < 0) {
        gv_log(GV_LOG_ERROR, "tcp: epoll_create1: %s", strerror(errno));
        status = GV_ERR_IO;
        goto err_destroy;
    }
    *tp_p = &tp->base;
    return GV_OK;

err_destroy:
    tcp_destroy(&tp->base);
err:
    if (status == GV_ERR_NOMEM)
        gv_log(GV_LOG_ERROR, "tcp: out of memory creating the transport");
    return status;
}

const struct gv_tp_ops gv_tp_tcp_ops = {
    .name = "tcp",
    .create = tcp_create,
    .destroy = tcp_destroy,
    .listen = tcp_listen,
    .listener_port = tcp_listener_port,
    .listener_close = tcp_listener_close,
    .connect = tcp_connect,
    .connect_start = tcp_connect_start,
    .send = tcp_send,
    .progress = tcp_progress,
    .conn_close = tcp_conn_close,
    .mem_reg = gv_tp_mem_reg_noop,
    .mem_dereg = gv_tp_mem_dereg_noop,
    .caps = GV_TP_CAP_DEFER_RECV | GV_TP_CAP_CONNECT_ASYNC,
    .resume_recv = tcp_resume_recv,
};
