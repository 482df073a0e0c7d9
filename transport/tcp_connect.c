/* tcp_connect.c: the TCP backend's two ways to connect. gv_tp_connect blocks, retrying refused
 * attempts and names that do not resolve (yet) until the connect timeout. gv_tp_connect_start
 * returns at once with a connection in TCP_CONN_CONNECTING whose attempts the event loop makes:
 * a non-blocking connect() polled for EPOLLOUT, the next address or a backed-off retry on
 * failure, the name resolved again before each round, until the same timeout. Sends queue
 * meanwhile and leave once it is established. */
#include "tcp_internal.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#define TCP_BACKOFF_MIN_MS 10
#define TCP_BACKOFF_MAX_MS 200
#define TCP_ATTEMPT_MAX_MS 2000 /* one address that does not answer: the next one after this */

/* Failures that waiting may mend: nobody listens yet, the route or the peer is not up yet,
 * or this process is momentarily out of descriptors or buffers. */
static int tcp_retryable(int err)
{
    return err == ECONNREFUSED || err == ENETUNREACH || err == EHOSTUNREACH || err == ETIMEDOUT ||
           err == ECONNRESET || err == ECONNABORTED || err == ENETDOWN || err == EAGAIN ||
           err == EINTR || err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

/* What made an attempt fail: gai, a getaddrinfo error (the name did not resolve), else err,
 * an errno. */
static void tcp_err_str(int gai, int err, char *out, size_t len)
{
    if (gai != 0)
        snprintf(out, len, "cannot resolve the name: %s", gai_strerror(gai));
    else
        snprintf(out, len, "%s", err != 0 ? strerror(err) : "no answer");
}

/* The addresses of host:serv; 0, or the getaddrinfo error (any of which may pass: a name can
 * appear in DNS after the job started, and the connect timeout bounds the wait). */
static int tcp_resolve(const char *host, const char *serv, struct addrinfo **res_p)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    return getaddrinfo(host, serv, &hints, res_p);
}

static void tcp_dns_warn(const char *host, const char *serv, int gai, int timeout_ms, bool *warned)
{
    if (*warned || gai == EAI_AGAIN)
        return;
    *warned = true;
    gv_log(GV_LOG_WARN,
           "tcp: connect to %s port %s: cannot resolve the name (%s); retrying until the connect "
           "timeout (%d ms)",
           host, serv, gai_strerror(gai), timeout_ms);
}

/* ---------------------------------------------------------------- blocking */

/* One non-blocking connect attempt, waiting at most until deadline. Returns the connected fd,
 * or -1 with the cause in *err_p. */
static int tcp_connect_once(struct tcp_tp *tp, const struct addrinfo *ai, uint64_t deadline,
                            int *err_p)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        *err_p = errno;
        return -1;
    }
    tcp_sock_set_bufs(fd, &tp->base.cfg);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            *err_p = errno;
            goto err_close;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        for (;;) {
            uint64_t now = gv_now_ns();
            int wait_ms = now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
            int ret = poll(&pfd, 1, wait_ms);
            if (ret > 0)
                break;
            if (ret == 0) {
                *err_p = ETIMEDOUT;
                goto err_close;
            }
            if (errno != EINTR) {
                *err_p = errno;
                goto err_close;
            }
        }
        int soerr = 0;
        socklen_t len = sizeof(soerr);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0)
            soerr = errno;
        if (soerr != 0) {
            *err_p = soerr;
            goto err_close;
        }
    }
    return fd;

err_close:
    close(fd);
    return -1;
}

/* Tries every address of host:port once. Returns an fd or -1 with *err_p, or *gai_p when
 * the name does not resolve. */
static int tcp_connect_round(struct tcp_tp *tp, const char *host, const char *serv,
                             uint64_t deadline, int *err_p, int *gai_p, bool *warned)
{
    struct addrinfo *res = NULL;
    int fd = -1;
    *gai_p = tcp_resolve(host, serv, &res);
    if (*gai_p != 0) {
        tcp_dns_warn(host, serv, *gai_p, tp->base.cfg.connect_timeout_ms, warned);
        return -1;
    }
    for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next)
        fd = tcp_connect_once(tp, ai, deadline, err_p);
    freeaddrinfo(res);
    return fd;
}

static void tcp_sleep_ms(uint64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

gv_status_t tcp_connect(struct gv_tp *btp, const char *host, uint16_t port, struct gv_conn **c_p)
{
    struct tcp_tp *tp = tcp_tp_of(btp);
    uint64_t start = gv_now_ns();
    uint64_t deadline = start + (uint64_t)btp->cfg.connect_timeout_ms * 1000000ull;
    uint64_t backoff_ms = TCP_BACKOFF_MIN_MS;
    int err = 0, gai = 0, attempts = 0;
    bool warned = false;
    char serv[8], why[160];

    if (host == NULL || host[0] == '\0' || port == 0) {
        gv_log(GV_LOG_ERROR, "tcp: connect needs a host and a non-zero port");
        return GV_ERR_INVAL;
    }
    snprintf(serv, sizeof(serv), "%u", (unsigned)port);
    for (;;) {
        attempts++;
        int fd = tcp_connect_round(tp, host, serv, deadline, &err, &gai, &warned);
        if (fd >= 0) {
            struct tcp_conn *c;
            gv_status_t status = tcp_conn_new(tp, fd, &c);
            if (status != GV_OK) {
                close(fd);
                return status;
            }
            *c_p = &c->base;
            return GV_OK;
        }
        uint64_t now = gv_now_ns();
        tcp_err_str(gai, err, why, sizeof(why));
        if (gai == 0 && !tcp_retryable(err)) {
            gv_log(GV_LOG_ERROR, "tcp: connect to %s port %s: %s", host, serv, why);
            return GV_ERR_IO;
        }
        if (now >= deadline) {
            gv_log(GV_LOG_ERROR,
                   "tcp: connect to %s port %s: gave up after %d attempts in %d ms (last error: "
                   "%s)",
                   host, serv, attempts, btp->cfg.connect_timeout_ms, why);
            return GV_ERR_TIMEOUT;
        }
        gv_log(GV_LOG_DEBUG, "tcp: connect to %s port %s: %s; retrying in %llu ms", host, serv, why,
               (unsigned long long)backoff_ms);
        uint64_t left_ms = (deadline - now + 999999) / 1000000;
        tcp_sleep_ms(GV_MIN(backoff_ms, left_ms));
        backoff_ms = GV_MIN(backoff_ms * 2, TCP_BACKOFF_MAX_MS);
    }
}

/* ---------------------------------------------------------------- without blocking */

static void tcp_timer_at(struct tcp_tp *tp, uint64_t due)
{
    if (due < tp->next_check_ns)
        tp->next_check_ns = due;
}

/* The attempt in flight is over (failed): its socket goes. */
static void tcp_connect_drop_fd(struct tcp_conn *c)
{
    if (c->fd < 0)
        return;
    if (c->ep_events != 0)
        epoll_ctl(c->tp->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    c->ep_events = 0;
}

/* The next round of attempts after the backoff (addresses start again from the first). */
static void tcp_connect_later(struct tcp_conn *c, uint64_t now)
{
    c->addr_idx = 0;
    c->retry_ns = now + (uint64_t)c->backoff_ms * 1000000ull;
    c->backoff_ms = GV_MIN(c->backoff_ms * 2, TCP_BACKOFF_MAX_MS);
    tcp_timer_at(c->tp, GV_MIN(c->retry_ns, c->connect_deadline));
}

static void tcp_connect_established(struct tcp_conn *c, uint64_t now)
{
    struct tcp_tp *tp = c->tp;
    tcp_conn_set_peer(c);
    tcp_sock_set_conn_opts(c->fd, &tp->base.cfg);
    c->state = TCP_CONN_OPEN;
    c->last_io_ns = now;
    /* queued sends leave from the next progress call (EPOLLOUT is level-triggered): callbacks
     * never run inside gv_tp_connect_start */
    struct epoll_event ev = {.events = tcp_conn_want_events(c), .data.ptr = &c->ev_kind};
    int op = c->ep_events != 0 ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (epoll_ctl(tp->epfd, op, c->fd, &ev) != 0) {
        gv_log(GV_LOG_ERROR, "tcp: epoll_ctl conn %s: %s", c->base.peer, strerror(errno));
        tcp_conn_fail_later(c, GV_ERR_IO);
        return;
    }
    c->ep_events = ev.events;
    if (c->sq_count > 0)
        tcp_timer_arm(c, (uint64_t)tp->base.cfg.io_timeout_ms * 1000000ull);
    gv_log(GV_LOG_DEBUG, "tcp: conn %llu peer %s open (fd %d) after %u attempts",
           (unsigned long long)c->base.id, c->base.peer, c->fd, c->attempts);
}

/* One attempt at the address addr_idx of the name (resolved now). Returns when it is in
 * flight, established, or has failed (then the next address or a retry later is scheduled, or
 * c is marked failed for an error waiting cannot mend). */
static void tcp_connect_attempt(struct tcp_conn *c, uint64_t now)
{
    struct tcp_tp *tp = c->tp;
    char serv[8];
    snprintf(serv, sizeof(serv), "%u", (unsigned)c->port);
    for (;;) {
        struct addrinfo *res = NULL, *ai;
        int gai = tcp_resolve(c->host, serv, &res);
        c->attempts++;
        c->last_gai = gai;
        if (gai != 0) {
            tcp_dns_warn(c->host, serv, gai, tp->base.cfg.connect_timeout_ms, &c->dns_warned);
            tcp_connect_later(c, now);
            return;
        }
        int i = 0;
        for (ai = res; ai != NULL && i < c->addr_idx; ai = ai->ai_next)
            i++;
        if (ai == NULL) { /* every address failed: a round is over */
            freeaddrinfo(res);
            tcp_connect_later(c, now);
            return;
        }
        int fd =
            socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        int err = fd < 0 ? errno : 0;
        if (fd >= 0) {
            tcp_sock_set_bufs(fd, &tp->base.cfg);
            if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0)
                err = errno;
        }
        freeaddrinfo(res);
        c->fd = fd;
        if (err == 0) {
            tcp_connect_established(c, now);
            return;
        }
        if (err == EINPROGRESS) {
            struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = &c->ev_kind};
            if (epoll_ctl(tp->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
                gv_log(GV_LOG_ERROR, "tcp: epoll_ctl add conn %s: %s", c->base.peer,
                       strerror(errno));
                tcp_connect_drop_fd(c);
                tcp_conn_fail_later(c, GV_ERR_IO);
                return;
            }
            c->ep_events = ev.events;
            c->retry_ns = GV_MIN(now + TCP_ATTEMPT_MAX_MS * 1000000ull, c->connect_deadline);
            tcp_timer_at(tp, c->retry_ns);
            return;
        }
        tcp_connect_drop_fd(c);
        c->last_err = err;
        if (!tcp_retryable(err)) {
            gv_log(GV_LOG_ERROR, "tcp: connect to %s: %s", c->base.peer, strerror(err));
            tcp_conn_fail_later(c, GV_ERR_IO);
            return;
        }
        c->addr_idx++; /* the next address at once */
    }
}

gv_status_t tcp_connect_start(struct gv_tp *btp, const char *host, uint16_t port,
                              struct gv_conn **c_p)
{
    struct tcp_tp *tp = tcp_tp_of(btp);
    if (host == NULL || host[0] == '\0' || port == 0) {
        gv_log(GV_LOG_ERROR, "tcp: connect needs a host and a non-zero port");
        return GV_ERR_INVAL;
    }
    struct tcp_conn *c;
    gv_status_t status = tcp_conn_alloc(tp, &c);
    if (status != GV_OK)
        return status;
    size_t hl = strlen(host);
    c->host = gv_malloc(hl + 1);
    if (c->host == NULL) {
        tcp_conn_free_unlisted(c);
        gv_log(GV_LOG_ERROR, "tcp: out of memory for a connection");
        return GV_ERR_NOMEM;
    }
    memcpy(c->host, host, hl + 1);
    c->port = port;
    snprintf(c->base.peer, sizeof(c->base.peer), strchr(host, ':') ? "[%.52s]:%u" : "%.54s:%u",
             host, (unsigned)port);
    uint64_t now = gv_now_ns();
    c->state = TCP_CONN_CONNECTING;
    c->connect_deadline = now + (uint64_t)btp->cfg.connect_timeout_ms * 1000000ull;
    c->backoff_ms = TCP_BACKOFF_MIN_MS;
    tcp_list_push(&tp->conns, c);
    tcp_timer_at(tp, c->connect_deadline);
    tcp_connect_attempt(c, now);
    *c_p = &c->base;
    return GV_OK;
}

void tcp_connect_on_event(struct tcp_conn *c)
{
    uint64_t now = c->tp->now_ns;
    int soerr = 0;
    socklen_t len = sizeof(soerr);
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0)
        soerr = errno;
    if (soerr == 0) {
        tcp_connect_established(c, now);
        return;
    }
    tcp_connect_drop_fd(c);
    c->last_err = soerr;
    if (!tcp_retryable(soerr)) {
        gv_log(GV_LOG_ERROR, "tcp: connect to %s: %s", c->base.peer, strerror(soerr));
        tcp_conn_teardown(c, GV_ERR_IO);
        return;
    }
    c->addr_idx++;
    tcp_connect_attempt(c, now);
}

bool tcp_connect_tick(struct tcp_conn *c, uint64_t now, uint64_t *next_p)
{
    if (now >= c->connect_deadline) {
        char why[160];
        tcp_err_str(c->last_gai, c->last_err, why, sizeof(why));
        gv_log(GV_LOG_ERROR,
               "tcp: connect to %s: gave up after %u attempts in %d ms (last error: %s)",
               c->base.peer, c->attempts, c->tp->base.cfg.connect_timeout_ms, why);
        tcp_conn_teardown(c, GV_ERR_TIMEOUT);
        return true;
    }
    if (now >= c->retry_ns) {
        if (c->fd >= 0) { /* this address does not answer: the next one */
            tcp_connect_drop_fd(c);
            c->last_err = ETIMEDOUT;
            c->addr_idx++;
        }
        tcp_connect_attempt(c, now);
    }
    *next_p =
        c->state == TCP_CONN_CONNECTING ? GV_MIN(c->retry_ns, c->connect_deadline) : UINT64_MAX;
    return false;
}
