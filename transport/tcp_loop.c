/* tcp_loop.c: the TCP backend's event loop: one epoll set per transport, level-triggered,
 * EPOLLOUT armed only while a conn has queued sends. Also the deferred closes and the I/O
 * timeout, which is checked here, so progress never sleeps past the next possible expiry. */
#include "tcp_internal.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>

/* Closes the conns a failed send marked; returns how many. */
static int tcp_close_failed(struct tcp_tp *tp)
{
    int n = 0;
    while (tp->n_failed > 0) {
        struct tcp_conn *c = tp->conns;
        while (c != NULL && c->state != TCP_CONN_FAILED)
            c = c->next;
        if (c == NULL) { /* cannot happen: n_failed counts conns on this list */
            tp->n_failed = 0;
            break;
        }
        tcp_conn_teardown(c, c->fail_reason);
        n++;
    }
    return n;
}

/* Closes busy conns that made no progress for io_timeout_ms and finds the next expiry.
 * Rescans from the start after each close, since on_close may close other conns. */
static int tcp_check_timeouts(struct tcp_tp *tp)
{
    uint64_t limit = (uint64_t)tp->base.cfg.io_timeout_ms * 1000000ull;
    uint64_t now = tp->now_ns, next;
    int n = 0;

    if (now < tp->next_check_ns)
        return 0;
restart:
    next = UINT64_MAX;
    for (struct tcp_conn *c = tp->conns; c != NULL; c = c->next) {
        if (c->state == TCP_CONN_CONNECTING) {
            uint64_t due;
            if (tcp_connect_tick(c, now, &due)) {
                n++;
                goto restart;
            }
            next = GV_MIN(next, due);
            continue;
        }
        if (c->state != TCP_CONN_OPEN || !tcp_conn_busy(c))
            continue;
        /* last_io_ns may be later than now: a callback of this very call queued a send */
        if (now > c->last_io_ns && now - c->last_io_ns >= limit && tcp_conn_rx_trickled(c))
            c->last_io_ns = now; /* payload is arriving, below the low-water mark */
        if (now > c->last_io_ns && now - c->last_io_ns >= limit) {
            gv_log(GV_LOG_WARN, "tcp: conn %llu peer %s: no progress for %d ms with %s pending",
                   (unsigned long long)c->base.id, c->base.peer, tp->base.cfg.io_timeout_ms,
                   c->sq_count > 0 ? "sends" : "a partial message");
            tcp_conn_teardown(c, GV_ERR_TIMEOUT);
            n++;
            goto restart;
        }
        next = GV_MIN(next, c->last_io_ns + limit);
    }
    tp->next_check_ns = next;
    return n;
}

/* How long epoll_wait may sleep: the caller's timeout, cut to the next I/O-timeout check. */
static int tcp_wait_ms(struct tcp_tp *tp, int timeout_ms)
{
    uint64_t due = GV_MIN(tp->next_check_ns, tp->listen_resume_ns);
    if (timeout_ms == 0 || due == UINT64_MAX)
        return timeout_ms;
    uint64_t now = gv_now_ns();
    uint64_t due_ms = now >= due ? 0 : (due - now + 999999) / 1000000;
    if (timeout_ms < 0 || due_ms < (uint64_t)timeout_ms)
        return (int)due_ms;
    return timeout_ms;
}

static void tcp_dispatch(struct epoll_event *ev)
{
    int *kind = ev->data.ptr;

    if (*kind == TCP_EV_LISTENER) {
        struct tcp_listener *l = gv_container_of(kind, struct tcp_listener, ev_kind);
        if (l->fd >= 0)
            tcp_listener_on_readable(l);
        return;
    }
    struct tcp_conn *c = gv_container_of(kind, struct tcp_conn, ev_kind);
    if (c->state == TCP_CONN_CONNECTING && c->fd >= 0) {
        tcp_conn_get(c);
        tcp_connect_on_event(c);
        tcp_conn_put(c);
        return;
    }
    if (c->state != TCP_CONN_OPEN)
        return; /* closed earlier in this batch, or failed (closed below) */
    tcp_conn_get(c);
    /* Read first: a peer's last messages are delivered before a write error is seen. */
    if (ev->events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP))
        tcp_conn_on_readable(c);
    if (c->state == TCP_CONN_OPEN && (ev->events & EPOLLOUT))
        tcp_conn_flush(c);
    tcp_conn_put(c);
}

int tcp_progress(struct gv_tp *btp, int timeout_ms)
{
    struct tcp_tp *tp = tcp_tp_of(btp);
    struct epoll_event evs[TCP_MAX_EVENTS];
    int handled;

    tp->depth++;
    handled = tcp_close_failed(tp);
    tp->now_ns = gv_now_ns();
    handled += tcp_run_resumed(tp);
    int n = epoll_wait(tp->epfd, evs, TCP_MAX_EVENTS,
                       tcp_wait_ms(tp, handled || tp->n_resume ? 0 : timeout_ms));
    if (n < 0) {
        if (errno != EINTR) {
            gv_log(GV_LOG_ERROR, "tcp: epoll_wait: %s", strerror(errno));
            handled = GV_ERR_IO;
            goto out;
        }
        n = 0;
    }
    tp->now_ns = gv_now_ns();
    for (int i = 0; i < n; i++)
        tcp_dispatch(&evs[i]);
    handled += n;
    handled += tcp_run_resumed(tp);
    handled += tcp_check_timeouts(tp);
    handled += tcp_close_failed(tp);
    handled += tcp_listeners_resume(tp);
out:
    if (--tp->depth == 0)
        tcp_reap(tp);
    return handled;
}
