/* tcp_io.c: the TCP data path. Send: write at once, queue what the kernel did not take
 * (referencing the caller's buffers, never copying payloads) in a bounded per-conn ring, flush
 * it on EPOLLOUT. Receive: prefix and header collect in a per-conn buffer, the payload is read
 * straight into the scatter list on_header returns. No allocation happens here. */
#include "tcp_internal.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define TCP_READ_ROUNDS 8 /* reads per readable event before other conns get a turn */
#define TCP_MAX_READ_IOV 24
#define TCP_MAX_READ_CHUNK (1ull << 30) /* keeps one readv's total far below SSIZE_MAX */

_Static_assert(sizeof(struct gv_iov) == sizeof(struct iovec) &&
                   offsetof(struct gv_iov, base) == offsetof(struct iovec, iov_base) &&
                   offsetof(struct gv_iov, len) == offsetof(struct iovec, iov_len),
               "struct gv_iov must match struct iovec");

#define TCP_EV_BASE (EPOLLIN | EPOLLRDHUP)

/* Per-connection errors a peer can cause at will (garbage, resets, truncated frames): each
 * family at most 10 lines per 10 s, the rest counted (gv_log_limit). */
static struct gv_log_limit tcp_lim_rx = GV_LOG_LIMIT_INIT(10, 10000);
static struct gv_log_limit tcp_lim_close = GV_LOG_LIMIT_INIT(10, 10000);

static uint64_t tcp_io_timeout_ns(const struct tcp_conn *c)
{
    return (uint64_t)c->tp->base.cfg.io_timeout_ms * 1000000ull;
}

gv_status_t tcp_conn_set_events(struct tcp_conn *c, uint32_t events)
{
    if (c->ep_events == events)
        return GV_OK;
    struct epoll_event ev = {.events = events, .data.ptr = &c->ev_kind};
    if (epoll_ctl(c->tp->epfd, EPOLL_CTL_MOD, c->fd, &ev) != 0) {
        gv_log(GV_LOG_ERROR, "tcp: conn %llu: epoll_ctl mod: %s", (unsigned long long)c->base.id,
               strerror(errno));
        return GV_ERR_IO;
    }
    c->ep_events = events;
    return GV_OK;
}

uint32_t tcp_conn_want_events(const struct tcp_conn *c)
{
    return (c->rx_deferred ? 0u : (uint32_t)TCP_EV_BASE) | (c->sq_count > 0 ? EPOLLOUT : 0u);
}

/* sendmsg rather than writev: MSG_NOSIGNAL turns a write to a dead peer into EPIPE instead of
 * a process-killing SIGPIPE, without touching the process's signal dispositions. */
static ssize_t tcp_writev(int fd, const struct iovec *v, int n)
{
    struct msghdr mh = {.msg_iov = (struct iovec *)(uintptr_t)v, .msg_iovlen = (size_t)n};
    return sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* ---------------------------------------------------------------- send */

/* Moves e's position n bytes forward. */
static void tcp_ent_advance(struct tcp_sendq_ent *e, uint64_t n)
{
    e->left -= n;
    while (e->idx < e->iovcnt) {
        size_t rest = e->iov[e->idx].len - e->off;
        if (n < rest) {
            e->off += (size_t)n;
            return;
        }
        n -= rest;
        e->idx++;
        e->off = 0;
    }
}

static void tcp_sq_push(struct tcp_conn *c, const struct gv_iov *iov, int iovcnt, uint64_t total,
                        uint64_t done, gv_tp_send_cb cb, void *arg)
{
    uint32_t cap = c->tp->base.cfg.max_send_queue;
    uint32_t slot = c->sq_head + c->sq_count;
    struct tcp_sendq_ent *e = &c->sq[slot >= cap ? slot - cap : slot];

    memcpy(e->iov, iov, (size_t)iovcnt * sizeof(*iov));
    e->iovcnt = iovcnt;
    e->idx = 0;
    e->off = 0;
    e->left = total;
    e->cb = cb;
    e->arg = arg;
    tcp_ent_advance(e, done);
    c->sq_count++;
    c->sq_bytes += e->left;
}

static gv_status_t tcp_send_check(const struct tcp_conn *c, const struct gv_iov *iov, int iovcnt,
                                  uint64_t *total_p)
{
    const struct gv_tp_config *cfg = &c->tp->base.cfg;
    uint64_t payload = 0;

    if (iov == NULL || iovcnt < 1 || iovcnt > GV_TP_MAX_SEND_IOV) {
        gv_log(GV_LOG_ERROR, "tcp: send: iovcnt %d outside 1..%d", iovcnt, GV_TP_MAX_SEND_IOV);
        return GV_ERR_INVAL;
    }
    if (iov[0].len > cfg->max_hdr_len) {
        gv_log(GV_LOG_ERROR, "tcp: send: header of %zu bytes above max_hdr_len %u", iov[0].len,
               cfg->max_hdr_len);
        return GV_ERR_INVAL;
    }
    for (int i = 0; i < iovcnt; i++) {
        if (iov[i].base == NULL && iov[i].len > 0) {
            gv_log(GV_LOG_ERROR, "tcp: send: iov[%d] has no buffer", i);
            return GV_ERR_INVAL;
        }
        if (i > 0)
            payload += iov[i].len;
    }
    if (payload > cfg->max_payload_len) {
        gv_log(GV_LOG_ERROR, "tcp: send: payload of %llu bytes above max_payload_len %llu",
               (unsigned long long)payload, (unsigned long long)cfg->max_payload_len);
        return GV_ERR_INVAL;
    }
    *total_p = payload + iov[0].len;
    return GV_OK;
}

gv_status_t tcp_send(struct gv_conn *bc, const struct gv_iov *iov, int iovcnt, gv_tp_send_cb cb,
                     void *arg)
{
    struct tcp_conn *c = tcp_conn_of(bc);
    const struct gv_tp_config *cfg = &c->tp->base.cfg;
    uint64_t total;
    gv_status_t status = tcp_send_check(c, iov, iovcnt, &total);

    if (status != GV_OK)
        return status;
    if (c->state == TCP_CONN_CONNECTING) { /* leaves once established (tcp_connect.c) */
        if (c->sq_count >= cfg->max_send_queue ||
            (c->sq_count > 0 && c->sq_bytes + total > cfg->max_send_queue_bytes))
            return GV_ERR_AGAIN;
        tcp_sq_push(c, iov, iovcnt, total, 0, cb, arg);
        return GV_INPROGRESS;
    }
    if (c->state != TCP_CONN_OPEN)
        return GV_ERR_CLOSED;
    if (c->sq_count > 0) {
        /* Earlier messages wait for socket space; keep order, respect the bound. One message
         * is always accepted by an empty queue, whatever its size. */
        if (c->sq_count >= cfg->max_send_queue || c->sq_bytes + total > cfg->max_send_queue_bytes)
            return GV_ERR_AGAIN;
        tcp_sq_push(c, iov, iovcnt, total, 0, cb, arg);
        return GV_INPROGRESS;
    }
    ssize_t ret = tcp_writev(c->fd, (const struct iovec *)(const void *)iov, iovcnt);
    if (ret < 0) {
        int err = errno;
        if (err != EAGAIN && err != EWOULDBLOCK && err != EINTR && err != ENOBUFS) {
            GV_LOG_LIMITED(GV_LOG_WARN, &tcp_lim_close, "tcp: conn %llu peer %s: send: %s",
                           (unsigned long long)bc->id, bc->peer, strerror(err));
            tcp_conn_fail_later(c, tcp_status_of_errno(err));
            return GV_ERR_IO;
        }
        ret = 0;
    }
    bc->bytes_sent += (uint64_t)ret;
    if ((uint64_t)ret == total)
        return GV_OK;
    tcp_sq_push(c, iov, iovcnt, total, (uint64_t)ret, cb, arg);
    c->last_io_ns = gv_now_ns();
    tcp_timer_arm(c, tcp_io_timeout_ns(c));
    if (tcp_conn_set_events(c, tcp_conn_want_events(c)) != GV_OK)
        tcp_conn_fail_later(c, GV_ERR_IO); /* the queued message's cb reports the failure */
    return GV_INPROGRESS;
}

/* n more bytes were written: complete the messages they finish, in order. A callback may
 * close c (then teardown has failed what is left) or send (which queues behind). */
static void tcp_sq_complete(struct tcp_conn *c, uint64_t n)
{
    uint32_t cap = c->tp->base.cfg.max_send_queue;

    while (c->sq_count > 0) {
        struct tcp_sendq_ent *e = &c->sq[c->sq_head];
        uint64_t take = GV_MIN(n, e->left);
        tcp_ent_advance(e, take);
        c->sq_bytes -= take;
        n -= take;
        if (e->left > 0)
            return;
        gv_tp_send_cb cb = e->cb;
        void *arg = e->arg;
        c->sq_head = c->sq_head + 1 == cap ? 0 : c->sq_head + 1;
        c->sq_count--;
        if (cb != NULL) {
            cb(&c->base, GV_OK, arg);
            if (c->state != TCP_CONN_OPEN)
                return;
        }
    }
}

/* Gathers up to TCP_MAX_WRITE_IOV pieces of queued messages; returns their byte count. */
static size_t tcp_sq_gather(const struct tcp_conn *c, struct iovec *v, int *n_p)
{
    uint32_t cap = c->tp->base.cfg.max_send_queue;
    uint32_t k = c->sq_head;
    size_t want = 0;
    int n = 0;

    for (uint32_t q = 0; q < c->sq_count && n < TCP_MAX_WRITE_IOV; q++) {
        const struct tcp_sendq_ent *e = &c->sq[k];
        for (int i = e->idx; i < e->iovcnt && n < TCP_MAX_WRITE_IOV; i++) {
            size_t off = i == e->idx ? e->off : 0;
            if (e->iov[i].len == off)
                continue;
            v[n].iov_base = (char *)e->iov[i].base + off;
            v[n].iov_len = e->iov[i].len - off;
            want += v[n].iov_len;
            n++;
        }
        k = k + 1 == cap ? 0 : k + 1;
    }
    *n_p = n;
    return want;
}

void tcp_conn_flush(struct tcp_conn *c)
{
    while (c->state == TCP_CONN_OPEN && c->sq_count > 0) {
        struct iovec v[TCP_MAX_WRITE_IOV];
        int n;
        size_t want = tcp_sq_gather(c, v, &n);
        ssize_t ret = tcp_writev(c->fd, v, n);
        if (ret < 0) {
            int err = errno;
            if (err == EINTR)
                continue;
            if (err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS)
                return;
            GV_LOG_LIMITED(GV_LOG_WARN, &tcp_lim_close, "tcp: conn %llu peer %s: send: %s",
                           (unsigned long long)c->base.id, c->base.peer, strerror(err));
            tcp_conn_teardown(c, tcp_status_of_errno(err));
            return;
        }
        c->base.bytes_sent += (uint64_t)ret;
        c->last_io_ns = c->tp->now_ns;
        tcp_sq_complete(c, (uint64_t)ret);
        if ((size_t)ret < want)
            return; /* socket full: wait for the next EPOLLOUT */
    }
    if (c->state == TCP_CONN_OPEN && c->sq_count == 0 &&
        tcp_conn_set_events(c, tcp_conn_want_events(c)) != GV_OK)
        tcp_conn_teardown(c, GV_ERR_IO);
}

/* ---------------------------------------------------------------- receive */

/* Large payloads: ask the kernel to report the socket readable only once a big piece of the
 * payload is there (SO_RCVLOWAT, at most 4 MiB; the kernel also caps it at half a locked
 * receive buffer), not at every arriving segment: a 1 MiB message then costs one wake-up and
 * one readv instead of several (measured on loopback: about +40% goodput at 1..64 MiB; 8 and
 * 16 MiB marks gained nothing more). The mark never exceeds what is left of the current
 * payload, so the wake-up never waits for bytes the peer has no reason to send; EOF and errors
 * are reported regardless. It is rounded down to 64 KiB so that a stream of same-size messages
 * keeps one value (no setsockopt per message), and it is 1 (the default) between messages. */
#define TCP_LOWAT_MIN (128u << 10)
#define TCP_LOWAT_MAX (4u << 20)
#define TCP_LOWAT_STEP (64u << 10)

static void tcp_rx_lowat(struct tcp_conn *c)
{
    int want = 1;
    if (c->rx_state == TCP_RX_PAYLOAD && c->payload_left >= TCP_LOWAT_MIN) {
        /* v - 1: whether or not a few KiB of the payload came with the header, same mark */
        uint64_t v = GV_MIN(c->payload_left, (uint64_t)TCP_LOWAT_MAX) - 1;
        want = (int)(v - v % TCP_LOWAT_STEP);
    }
    if (want == c->rcvlowat)
        return;
    if (setsockopt(c->fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want)) == 0)
        c->rcvlowat = want;
    else /* harmless: only the number of wake-ups changes */
        gv_log(GV_LOG_DEBUG, "tcp: conn %llu: SO_RCVLOWAT %d: %s", (unsigned long long)c->base.id,
               want, strerror(errno));
}

/* With a low-water mark armed, bytes may be arriving without waking us: the I/O timeout asks
 * the kernel how much is queued before calling the conn stalled. Returns 1 when more bytes
 * arrived since the last look. */
int tcp_conn_rx_trickled(struct tcp_conn *c)
{
    int inq = 0;
    if (c->rcvlowat <= 1 || ioctl(c->fd, FIONREAD, &inq) != 0 || inq <= c->rx_inq_seen)
        return 0;
    c->rx_inq_seen = inq;
    return 1;
}

static void tcp_rx_reset(struct tcp_conn *c)
{
    c->rx_state = TCP_RX_HEAD;
    c->msg_len = 0;
    c->payload_len = 0;
    c->payload_left = 0;
    c->dst_cnt = c->dst_idx = 0;
    c->dst_off = 0;
}

/* Moves the unconsumed bytes to the front of rbuf. */
static void tcp_rx_compact(struct tcp_conn *c)
{
    if (c->rstart == 0)
        return;
    memmove(c->rbuf, c->rbuf + c->rstart, c->rend - c->rstart);
    c->rend -= c->rstart;
    c->rstart = 0;
}

/* n payload bytes arrived: copy them from src (NULL: the kernel already put them in place). */
static void tcp_dst_fill(struct tcp_conn *c, const uint8_t *src, uint64_t n)
{
    c->payload_left -= n;
    while (n > 0 && c->dst_idx < c->dst_cnt) {
        struct gv_iov *d = &c->dst[c->dst_idx];
        size_t k = (size_t)GV_MIN(n, (uint64_t)(d->len - c->dst_off));
        if (src != NULL) {
            if (d->base != NULL)
                memcpy((uint8_t *)d->base + c->dst_off, src, k);
            src += k;
        }
        n -= k;
        c->dst_off += k;
        if (c->dst_off == d->len) {
            c->dst_idx++;
            c->dst_off = 0;
        }
    }
}

static gv_status_t tcp_rx_prefix(struct tcp_conn *c)
{
    const struct gv_tp *tp = &c->tp->base;
    uint32_t hdr_len = 0;
    uint64_t payload_len = 0;
    gv_status_t status = tp->h.parse_prefix(c->rbuf + c->rstart, &hdr_len, &payload_len, tp->user);

    if (status != GV_OK) {
        GV_LOG_LIMITED(GV_LOG_WARN, &tcp_lim_rx, "tcp: conn %llu peer %s: prefix refused: %s",
                       (unsigned long long)c->base.id, c->base.peer, gv_status_str(status));
        return status;
    }
    if ((uint64_t)tp->h.prefix_len + hdr_len > tp->cfg.max_hdr_len ||
        payload_len > tp->cfg.max_payload_len) {
        GV_LOG_LIMITED(GV_LOG_WARN, &tcp_lim_rx,
                       "tcp: conn %llu peer %s: message of header %u, payload %llu bytes "
                       "above the caps (%u, %llu)",
                       (unsigned long long)c->base.id, c->base.peer, hdr_len,
                       (unsigned long long)payload_len, tp->cfg.max_hdr_len,
                       (unsigned long long)tp->cfg.max_payload_len);
        return GV_ERR_PROTO;
    }
    c->msg_len = tp->h.prefix_len + hdr_len;
    c->payload_len = payload_len;
    if (c->rstart + c->msg_len > c->rcap)
        tcp_rx_compact(c);
    return GV_OK;
}

static gv_status_t tcp_rx_header(struct tcp_conn *c)
{
    const struct gv_tp *tp = &c->tp->base;
    int cnt = GV_TP_MAX_DST_IOV;
    uint64_t sum = 0;
    gv_status_t status = tp->h.on_header(&c->base, c->rbuf + c->rstart, c->msg_len, c->payload_len,
                                         c->dst, &cnt, tp->user);

    if (status == GV_ERR_AGAIN)
        return status; /* deferred: the caller stops reading */
    if (status != GV_OK) {
        gv_log(GV_LOG_DEBUG, "tcp: conn %llu peer %s: message refused by on_header: %s",
               (unsigned long long)c->base.id, c->base.peer, gv_status_str(status));
        return status;
    }
    int ok = cnt >= 1 && cnt <= GV_TP_MAX_DST_IOV;
    for (int i = 0; ok && i < cnt; i++) {
        ok = c->dst[i].len <= c->payload_len - sum;
        sum += ok ? c->dst[i].len : 0;
    }
    if (!ok || sum != c->payload_len) {
        gv_log(GV_LOG_ERROR,
               "tcp: conn %llu: on_header gave %d segments of %llu bytes for a "
               "payload of %llu",
               (unsigned long long)c->base.id, cnt, (unsigned long long)sum,
               (unsigned long long)c->payload_len);
        return GV_ERR_INVAL;
    }
    c->dst_cnt = cnt;
    c->dst_idx = 0;
    c->dst_off = 0;
    c->payload_left = c->payload_len;
    return GV_OK;
}

/* The current message is complete: deliver it and consume its header plus skip bytes. */
static void tcp_rx_finish(struct tcp_conn *c, size_t skip)
{
    const struct gv_tp *tp = &c->tp->base;
    tp->h.on_msg(&c->base, c->rbuf + c->rstart, c->msg_len, tp->user);
    c->rstart += c->msg_len + skip;
    tcp_rx_reset(c);
}

/* Delivers every complete message in rbuf; stops at a partial one (entering TCP_RX_PAYLOAD when
 * its header is complete) or when c stops being open. */
static void tcp_rx_parse(struct tcp_conn *c)
{
    size_t prefix_len = c->tp->base.h.prefix_len;
    gv_status_t status;

    while (c->state == TCP_CONN_OPEN) {
        size_t avail = c->rend - c->rstart;
        if (c->msg_len == 0) {
            if (avail < prefix_len)
                break;
            if ((status = tcp_rx_prefix(c)) != GV_OK)
                goto err;
        }
        if (avail < c->msg_len)
            break;
        if (c->payload_len == 0) {
            tcp_rx_finish(c, 0);
            continue;
        }
        if ((status = tcp_rx_header(c)) == GV_ERR_AGAIN) {
            c->rx_deferred = 1;
            if (tcp_conn_set_events(c, tcp_conn_want_events(c)) != GV_OK) {
                status = GV_ERR_IO;
                goto err;
            }
            return;
        }
        if (status != GV_OK)
            goto err;
        size_t take = (size_t)GV_MIN((uint64_t)(avail - c->msg_len), c->payload_len);
        tcp_dst_fill(c, c->rbuf + c->rstart + c->msg_len, take);
        if (c->payload_left == 0) {
            tcp_rx_finish(c, take);
            continue;
        }
        /* Everything buffered was payload; keep only the header, with read-ahead room. */
        c->rend = c->rstart + c->msg_len;
        c->rx_state = TCP_RX_PAYLOAD;
        if (c->rcap - c->rend < TCP_STAGE_BYTES)
            tcp_rx_compact(c);
        return;
    }
    if (c->rstart == c->rend)
        c->rstart = c->rend = 0;
    return;
err:
    tcp_conn_teardown(c, status);
}

/* One read in TCP_RX_HEAD: enough for what is missing, plus read-ahead. */
static ssize_t tcp_read_head(struct tcp_conn *c, size_t *want_p)
{
    size_t avail = c->rend - c->rstart;
    size_t need = (c->msg_len ? c->msg_len : c->tp->base.h.prefix_len) - avail;

    if (c->rcap - c->rend < TCP_STAGE_BYTES || c->rcap - c->rstart < avail + need)
        tcp_rx_compact(c);
    size_t want = GV_MIN(c->rcap - c->rend, GV_MAX(need, (size_t)TCP_STAGE_BYTES));
    *want_p = want;
    return read(c->fd, c->rbuf + c->rend, want);
}

/* One readv in TCP_RX_PAYLOAD: straight into the destination (discarded bytes into the shared
 * scratch), plus read-ahead into rbuf when the whole rest of the payload is covered. */
static ssize_t tcp_read_payload(struct tcp_conn *c, size_t *want_p, size_t *payload_part_p)
{
    struct iovec v[TCP_MAX_READ_IOV];
    uint64_t part = 0;
    int n = 0;

    for (int i = c->dst_idx; i < c->dst_cnt && n < TCP_MAX_READ_IOV - 1; i++) {
        size_t off = i == c->dst_idx ? c->dst_off : 0;
        size_t len = c->dst[i].len - off;
        while (len > 0 && n < TCP_MAX_READ_IOV - 1 && part < TCP_MAX_READ_CHUNK) {
            size_t k = (size_t)GV_MIN((uint64_t)len, TCP_MAX_READ_CHUNK - part);
            if (c->dst[i].base == NULL) {
                k = GV_MIN(k, (size_t)TCP_SCRATCH_BYTES);
                v[n].iov_base = c->tp->scratch;
            } else {
                v[n].iov_base = (uint8_t *)c->dst[i].base + off;
            }
            v[n].iov_len = k;
            n++;
            part += k;
            off += k;
            len -= k;
        }
    }
    size_t want = (size_t)part;
    if (part == c->payload_left && c->rcap > c->rend) {
        v[n].iov_base = c->rbuf + c->rend;
        v[n].iov_len = GV_MIN(c->rcap - c->rend, (size_t)TCP_STAGE_BYTES);
        want += v[n].iov_len;
        n++;
    }
    *want_p = want;
    *payload_part_p = (size_t)part;
    return readv(c->fd, v, n);
}

static int tcp_rx_busy(const struct tcp_conn *c)
{
    return c->rx_state == TCP_RX_PAYLOAD || c->rend > c->rstart;
}

/* got bytes were read in state rx_state; route them and deliver what is complete. */
static void tcp_rx_advance(struct tcp_conn *c, size_t got, size_t payload_part)
{
    if (c->rx_state == TCP_RX_HEAD) {
        c->rend += got;
    } else {
        size_t to_payload = GV_MIN(got, payload_part);
        tcp_dst_fill(c, NULL, to_payload);
        c->rend += got - to_payload;
        if (c->payload_left > 0)
            return;
        tcp_rx_finish(c, 0);
    }
    tcp_rx_parse(c);
}

void tcp_conn_on_readable(struct tcp_conn *c)
{
    if (c->rx_deferred) {
        /* only EPOLLERR/EPOLLHUP reach a deferred conn: the peer reset it */
        gv_log(GV_LOG_WARN,
               "tcp: conn %llu peer %s: connection reset while a message was "
               "deferred",
               (unsigned long long)c->base.id, c->base.peer);
        tcp_conn_teardown(c, GV_ERR_IO);
        return;
    }
    for (int round = 0; round < TCP_READ_ROUNDS && c->state == TCP_CONN_OPEN && !c->rx_deferred;
         round++) {
        size_t want, payload_part = 0;
        ssize_t got = c->rx_state == TCP_RX_PAYLOAD ? tcp_read_payload(c, &want, &payload_part)
                                                    : tcp_read_head(c, &want);
        if (got < 0) {
            int err = errno;
            if (err == EINTR)
                continue;
            if (err == EAGAIN || err == EWOULDBLOCK)
                return;
            GV_LOG_LIMITED(GV_LOG_WARN, &tcp_lim_close, "tcp: conn %llu peer %s: receive: %s",
                           (unsigned long long)c->base.id, c->base.peer, strerror(err));
            tcp_conn_teardown(c, tcp_status_of_errno(err));
            return;
        }
        if (got == 0) {
            int mid = tcp_rx_busy(c);
            if (mid)
                GV_LOG_LIMITED(GV_LOG_WARN, &tcp_lim_close,
                               "tcp: conn %llu peer %s: peer closed in the middle of a message",
                               (unsigned long long)c->base.id, c->base.peer);
            tcp_conn_teardown(c, mid ? GV_ERR_IO : GV_ERR_CLOSED);
            return;
        }
        c->base.bytes_recv += (uint64_t)got;
        c->last_io_ns = c->tp->now_ns;
        c->rx_inq_seen = 0;
        tcp_rx_advance(c, (size_t)got, payload_part);
        if (c->state == TCP_CONN_OPEN)
            tcp_rx_lowat(c);
        if (c->state == TCP_CONN_OPEN && tcp_rx_busy(c))
            tcp_timer_arm(c, tcp_io_timeout_ns(c));
        if ((size_t)got < want)
            return; /* drained */
    }
}

int tcp_conn_busy(const struct tcp_conn *c)
{
    /* a deferred message waits on us, not on the peer */
    return c->sq_count > 0 || (!c->rx_deferred && tcp_rx_busy(c));
}

gv_status_t tcp_resume_recv(struct gv_conn *bc)
{
    struct tcp_conn *c = tcp_conn_of(bc);
    if (c->state == TCP_CONN_CONNECTING)
        return GV_OK; /* nothing received yet, nothing deferred */
    if (c->state != TCP_CONN_OPEN)
        return GV_ERR_CLOSED;
    if (!c->rx_deferred || c->rx_resume)
        return GV_OK;
    c->rx_resume = 1;
    c->tp->n_resume++;
    return GV_OK;
}

int tcp_run_resumed(struct tcp_tp *tp)
{
    int n = 0;
    /* A resumed conn's callbacks may resume or close others, so the list is rescanned from
     * the head after each one; at most TCP_MAX_EVENTS per progress call (the rest go at the
     * next call, which then does not sleep). */
    while (tp->n_resume > 0 && n < TCP_MAX_EVENTS) {
        struct tcp_conn *c = tp->conns;
        while (c != NULL && !(c->rx_resume && c->state == TCP_CONN_OPEN))
            c = c->next;
        if (c == NULL) { /* cannot happen: n_resume counts open conns with the flag */
            tp->n_resume = 0;
            break;
        }
        c->rx_resume = 0;
        tp->n_resume--;
        c->rx_deferred = 0;
        c->last_io_ns = gv_now_ns(); /* the wait was ours, not the peer's */
        tcp_conn_get(c);
        if (tcp_conn_set_events(c, tcp_conn_want_events(c)) != GV_OK)
            tcp_conn_teardown(c, GV_ERR_IO);
        else
            tcp_rx_parse(c);
        if (c->state == TCP_CONN_OPEN && !c->rx_deferred) {
            if (tcp_rx_busy(c))
                tcp_timer_arm(c, tcp_io_timeout_ns(c));
            tcp_conn_on_readable(c);
        }
        tcp_conn_put(c);
        n++;
    }
    return n;
}
