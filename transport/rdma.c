/* rdma.c: the RDMA backend's ops table: create/destroy, connection lifetime (references held
 * around callbacks, deferred frees, lingering close), the verbs side of the protocol's wire
 * (post send / write / receive), and progress(): CQ and rdma_cm events in one epoll set,
 * completions polled and handed to rdma_proto, io timeouts and keepalive probes. Protocol
 * decisions live in rdma_proto*.c; connection set-up in rdma_cm.c; the device in rdma_dev.c. */
#include "rdma.h"
#include "tp_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define RDMA_TIMER_NS (10u * 1000 * 1000) /* timeouts and keepalive are checked this often */
#define RDMA_WAKE_MS 100                  /* a blocking progress() wakes up for them */
#define RDMA_ACK_TIMEOUT 16               /* 4.096 us * 2^16 = 268 ms per try, 7 tries */
#define RDMA_RESUME_PASSES 4              /* resumed-connection scans per progress() call */

/* wr_id: generation (32) | receive (1) | connection slot (15) | send record or slot (16). The
 * generation makes completions of a closed connection recognisable after its slot is reused. */
#define WR_RECV (1ull << 31)
static uint64_t rdma_wrid(const struct rdma_conn *c, int recv, uint32_t v)
{
    return (uint64_t)c->gen << 32 | (recv ? WR_RECV : 0) | (uint64_t)c->idx << 16 | (v & 0xffffu);
}

/* ---------------------------------------------------------------- the wire (verbs) */

static gv_status_t w_post_send(void *wctx, void *addr, uint32_t len, uint32_t lkey, unsigned flags,
                               uint32_t rec)
{
    struct rdma_conn *c = wctx;
    struct ibv_sge sge = {(uintptr_t)addr, len, lkey};
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = rdma_wrid(c, 0, rec);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = (flags & GV_RP_F_SIGNALED ? IBV_SEND_SIGNALED : 0) |
                    (flags & GV_RP_F_INLINE ? IBV_SEND_INLINE : 0);
    int ret = ibv_post_send(c->qp, &wr, &bad);
    if (ret != 0) {
        gv_log(GV_LOG_ERROR, "rdma conn %" PRIu64 ": ibv_post_send: %s", c->base.id, strerror(ret));
        return GV_ERR_IO;
    }
    return GV_OK;
}

static gv_status_t w_post_write(void *wctx, const struct gv_rp_write *w, unsigned flags,
                                uint32_t rec)
{
    struct rdma_conn *c = wctx;
    struct ibv_sge sge = {(uintptr_t)w->laddr, w->len, w->lkey};
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = rdma_wrid(c, 0, rec);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = w->with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.imm_data = htonl(w->imm);
    wr.send_flags = flags & GV_RP_F_SIGNALED ? IBV_SEND_SIGNALED : 0;
    wr.wr.rdma.remote_addr = w->raddr;
    wr.wr.rdma.rkey = w->rkey;
    int ret = ibv_post_send(c->qp, &wr, &bad);
    if (ret != 0) {
        gv_log(GV_LOG_ERROR, "rdma conn %" PRIu64 ": ibv_post_send (write): %s", c->base.id,
               strerror(ret));
        return GV_ERR_IO;
    }
    return GV_OK;
}

static gv_status_t w_post_recv(void *wctx, void *addr, uint32_t len, uint32_t lkey, uint32_t slot)
{
    struct rdma_conn *c = wctx;
    struct ibv_sge sge = {(uintptr_t)addr, len, lkey};
    struct ibv_recv_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = rdma_wrid(c, 1, slot);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    int ret = ibv_post_recv(c->qp, &wr, &bad);
    if (ret != 0) {
        gv_log(GV_LOG_ERROR, "rdma conn %" PRIu64 ": ibv_post_recv: %s", c->base.id, strerror(ret));
        return GV_ERR_IO;
    }
    return GV_OK;
}

static gv_status_t w_copy(void *wctx, void *dst, const void *src, size_t len,
                          enum gv_rp_copy_dir dir)
{
    struct rdma_conn *c = wctx;
    return gv_rdma_gpu_copy(c->tp->gpu, dst, src, len, dir == GV_RP_H2D);
}

static const struct gv_rp_wire_ops rdma_wire = {w_post_send, w_post_write, w_post_recv, w_copy};

/* ---------------------------------------------------------------- connection lifetime */

gv_status_t gv_rdma_conn_new(struct rdma_tp *tp, struct rdma_cm_id *id, struct rdma_conn **c_p)
{
    uint32_t idx = 0;
    while (idx < tp->rc_cfg.max_conns && tp->conns[idx] != NULL)
        idx++;
    if (idx == tp->rc_cfg.max_conns) {
        static struct gv_log_limit lim = GV_LOG_LIMIT_INIT(5, 10000);
        GV_LOG_LIMITED(GV_LOG_ERROR, &lim,
                       "rdma: connection limit reached (GV_RDMA_MAX_CONNS=%" PRIu32 ")",
                       tp->rc_cfg.max_conns);
        return GV_ERR_AGAIN;
    }
    struct rdma_conn *c = gv_calloc(1, sizeof(*c));
    if (c == NULL)
        return GV_ERR_NOMEM;
    gv_status_t status = gv_rdma_pool_get(tp, &c->block);
    if (status != GV_OK) {
        gv_free(c);
        return status;
    }
    c->tp = tp;
    c->base.tp = &tp->base;
    c->base.id = gv_tp_conn_id_next();
    c->id = id;
    c->idx = idx;
    c->gen = ++tp->gen ? tp->gen : ++tp->gen;
    c->refs = 1; /* the owner's: dropped when the connection closes */
    c->state = RDMA_CONN_CONNECTING;
    id->context = c;
    uint8_t timeout = RDMA_ACK_TIMEOUT; /* a dead peer shows as a retry error within seconds */
    (void)rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout,
                          sizeof(timeout));
    gv_rdma_peer_str(id, c->base.peer, sizeof(c->base.peer));
    tp->conns[idx] = c;
    tp->nconns++;
    *c_p = c;
    return GV_OK;
}

gv_status_t gv_rdma_conn_setup(struct rdma_conn *c, const struct gv_rp_params *peer)
{
    struct rdma_tp *tp = c->tp;
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = tp->cq;
    qa.recv_cq = tp->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = tp->pcfg.sq_depth;
    qa.cap.max_recv_wr = tp->pcfg.rx_depth + 1;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qa.cap.max_inline_data = tp->rc_cfg.inline_bytes;
    if (rdma_create_qp(c->id, tp->pd, &qa) != 0) {
        qa.cap.max_inline_data = 0; /* some devices refuse inline data of that size */
        if (tp->rc_cfg.inline_bytes == 0 || rdma_create_qp(c->id, tp->pd, &qa) != 0) {
            static struct gv_log_limit lim = GV_LOG_LIMIT_INIT(5, 10000);
            GV_LOG_LIMITED(GV_LOG_ERROR, &lim,
                           "rdma: cannot create a queue pair (%u/%u WRs) on %s: %s",
                           tp->pcfg.sq_depth, tp->pcfg.rx_depth + 1, tp->devname, strerror(errno));
            return GV_ERR_IO;
        }
    }
    c->qp = c->id->qp;
    struct gv_rp_cfg cfg = tp->pcfg;
    cfg.max_inline = qa.cap.max_inline_data;
    struct gv_rp_params mine;
    gv_rdma_local_params(tp, &mine);
    gv_status_t status =
        gv_rp_init(&c->pc, &cfg, peer != NULL ? peer : &mine, c->block.mem, c->block.lkey, &tp->rc,
                   &rdma_wire, c, &c->base, &tp->base.h, tp->base.user);
    if (status != GV_OK)
        return status;
    c->proto_ready = 1;
    return gv_rp_post_recvs(&c->pc);
}

void gv_rdma_conn_established(struct rdma_conn *c)
{
    c->state = RDMA_CONN_OPEN;
    c->last_rx_ns = c->probe_ns = gv_now_ns();
}

void gv_rdma_conn_accepted(struct rdma_conn *c)
{
    struct rdma_tp *tp = c->tp;
    if (c->state != RDMA_CONN_ACCEPTING)
        return;
    gv_rdma_conn_established(c);
    /* anyone can connect in a loop: rate-limited, like every per-connection line */
    static struct gv_log_limit lim = GV_LOG_LIMIT_INIT(10, 10000);
    GV_LOG_LIMITED(GV_LOG_INFO, &lim, "rdma conn %" PRIu64 ": accepted from %s (qp 0x%x)",
                   c->base.id, c->base.peer, c->qp->qp_num);
    if (tp->base.h.on_accept != NULL) {
        gv_rdma_conn_ref(c);
        tp->base.h.on_accept((struct gv_listener *)c->lst, &c->base, tp->base.user);
        gv_rdma_conn_unref(c);
    }
}

static void conn_teardown(struct rdma_conn *c)
{
    if (c->id == NULL)
        return;
    if (c->qp != NULL) {
        rdma_disconnect(c->id); /* fails harmlessly on a connection never established */
        rdma_destroy_qp(c->id);
        c->qp = NULL;
    }
    gv_rdma_cm_forget(c->tp, c->id);
    rdma_destroy_id(c->id);
    c->id = NULL;
}

static void conn_free(struct rdma_conn *c)
{
    struct rdma_tp *tp = c->tp;
    conn_teardown(c);
    if (c->proto_ready)
        gv_rp_cleanup(&c->pc);
    gv_rdma_pool_put(tp, &c->block);
    tp->conns[c->idx] = NULL;
    tp->nconns--;
    gv_free(c);
}

void gv_rdma_conn_ref(struct rdma_conn *c)
{
    c->refs++;
}

void gv_rdma_conn_unref(struct rdma_conn *c)
{
    GV_ASSERT(c->refs > 0);
    if (--c->refs == 0)
        conn_free(c);
}

void gv_rdma_conn_discard(struct rdma_conn *c)
{
    if (c == NULL || c->state == RDMA_CONN_CLOSED)
        return;
    c->state = RDMA_CONN_CLOSED;
    if (c->proto_ready)
        gv_rp_fail(&c->pc, GV_ERR_CLOSED);
    conn_teardown(c);
    gv_rdma_conn_unref(c);
}

void gv_rdma_conn_fail(struct rdma_conn *c, gv_status_t reason)
{
    if (c->state == RDMA_CONN_CLOSED)
        return;
    enum rdma_conn_state prev = c->state;
    struct rdma_tp *tp = c->tp;
    c->state = RDMA_CONN_CLOSED;
    gv_rdma_conn_ref(c);
    if (c->proto_ready)
        gv_rp_fail(&c->pc, reason == GV_OK ? GV_ERR_CLOSED : reason);
    if (prev == RDMA_CONN_OPEN) {
        static struct gv_log_limit lim = GV_LOG_LIMIT_INIT(10, 10000);
        GV_LOG_LIMITED(reason == GV_OK || reason == GV_ERR_CLOSED ? GV_LOG_INFO : GV_LOG_WARN, &lim,
                       "rdma conn %" PRIu64 " peer %s closed: %s", c->base.id, c->base.peer,
                       gv_status_str(reason));
        if (tp->base.h.on_close != NULL)
            tp->base.h.on_close(&c->base, reason, tp->base.user);
    }
    conn_teardown(c);
    gv_rdma_conn_unref(c); /* the owner's */
    gv_rdma_conn_unref(c);
}

static void conn_linger_done(struct rdma_conn *c)
{
    c->state = RDMA_CONN_CLOSED;
    gv_rp_fail(&c->pc, GV_ERR_CLOSED);
    conn_teardown(c);
    gv_rdma_conn_unref(c); /* the owner's */
}

static void rdma_conn_close(struct gv_conn *uc)
{
    struct rdma_conn *c = (struct rdma_conn *)uc;
    struct rdma_tp *tp = c->tp;
    if (c->state != RDMA_CONN_OPEN)
        return; /* already closed (by the user, the peer or an error) */
    gv_rdma_conn_ref(c);
    /* Sends accepted with GV_OK still go out (lingering up to io_timeout_ms); those waiting
     * for their cb fail with GV_ERR_CLOSED. */
    int linger = gv_rp_close_begin(&c->pc);
    c->state = linger ? RDMA_CONN_LINGER : RDMA_CONN_CLOSED;
    gv_log(GV_LOG_DEBUG, "rdma conn %" PRIu64 " peer %s: closed locally%s", c->base.id,
           c->base.peer, linger ? ", flushing queued sends" : "");
    if (tp->base.h.on_close != NULL)
        tp->base.h.on_close(uc, GV_OK, tp->base.user);
    if (linger) {
        c->linger_deadline_ns = gv_now_ns() + (uint64_t)tp->base.cfg.io_timeout_ms * 1000000;
    } else {
        gv_rp_fail(&c->pc, GV_ERR_CLOSED);
        conn_teardown(c);
        gv_rdma_conn_unref(c); /* the owner's */
    }
    gv_rdma_conn_unref(c);
}

/* ---------------------------------------------------------------- sending */

static gv_status_t rdma_send(struct gv_conn *uc, const struct gv_iov *iov, int iovcnt,
                             gv_tp_send_cb cb, void *arg)
{
    struct rdma_conn *c = (struct rdma_conn *)uc;
    if (c->state != RDMA_CONN_OPEN || c->pending_close != GV_OK)
        return GV_ERR_CLOSED;
    gv_status_t status = gv_rp_send(&c->pc, iov, iovcnt, cb, arg, gv_now_ns());
    if (c->pc.fatal != GV_OK)
        c->pending_close = c->pc.fatal; /* closed by the next progress() */
    return status;
}

/* ---------------------------------------------------------------- deferred receive */

/* on_header deferred a message (GV_ERR_AGAIN): the protocol keeps it (no CTS for a rendezvous,
 * the receive slot and its credit for an eager one) and this marks it for the next progress. */
static gv_status_t rdma_resume_recv(struct gv_conn *uc)
{
    struct rdma_conn *c = (struct rdma_conn *)uc;
    if (c->state != RDMA_CONN_OPEN || c->pending_close != GV_OK || !c->proto_ready)
        return GV_ERR_CLOSED;
    gv_status_t status = gv_rp_resume_recv(&c->pc);
    if (status == GV_OK && gv_rp_resume_pending(&c->pc))
        c->tp->resume_any = 1;
    return status;
}

/* Runs on_header again for the resumed connections (never inside gv_tp_conn_resume_recv).
 * Their callbacks may resume others, so the table is scanned again while any is marked, up
 * to RDMA_RESUME_PASSES times; what is left runs at the start of the next progress(), which
 * then does not sleep. Returns the connections run. */
static int rdma_run_resumed(struct rdma_tp *tp)
{
    int n = 0;
    for (int pass = 0; pass < RDMA_RESUME_PASSES && tp->resume_any; pass++) {
        tp->resume_any = 0;
        for (uint32_t i = 0; i < tp->rc_cfg.max_conns && tp->nconns > 0; i++) {
            struct rdma_conn *c = tp->conns[i];
            if (c == NULL || c->state != RDMA_CONN_OPEN || !c->proto_ready ||
                c->pending_close != GV_OK || !gv_rp_resume_pending(&c->pc))
                continue;
            gv_rdma_conn_ref(c);
            gv_status_t status = gv_rp_run_resumed(&c->pc, gv_now_ns());
            if (status != GV_OK)
                gv_rdma_conn_fail(c, status);
            gv_rdma_conn_unref(c);
            n++;
        }
    }
    return n;
}

/* ---------------------------------------------------------------- completions */

static void rdma_on_wc(struct rdma_tp *tp, const struct ibv_wc *wc)
{
    uint32_t gen = (uint32_t)(wc->wr_id >> 32);
    uint32_t idx = (uint32_t)(wc->wr_id >> 16) & 0x7fffu;
    uint32_t v = (uint32_t)wc->wr_id & 0xffffu;
    int recv = (wc->wr_id & WR_RECV) != 0;
    struct rdma_conn *c = idx < tp->rc_cfg.max_conns ? tp->conns[idx] : NULL;
    if (c == NULL || c->gen != gen || c->state == RDMA_CONN_CLOSED || !c->proto_ready)
        return; /* a closed connection's flushed work */
    if (wc->status != IBV_WC_SUCCESS) {
        int retry = wc->status == IBV_WC_RETRY_EXC_ERR || wc->status == IBV_WC_RNR_RETRY_EXC_ERR;
        gv_log(GV_LOG_ERROR,
               "rdma conn %" PRIu64 " peer %s: %s completion failed: %s "
               "(vendor error 0x%x)%s",
               c->base.id, c->base.peer, recv ? "receive" : "send", ibv_wc_status_str(wc->status),
               wc->vendor_err, retry ? ": the peer stopped answering" : "");
        gv_rdma_conn_fail(c, retry ? GV_ERR_TIMEOUT : GV_ERR_IO);
        return;
    }
    gv_rdma_conn_ref(c);
    if (c->state == RDMA_CONN_ACCEPTING)
        gv_rdma_conn_accepted(c);       /* data may overtake the ESTABLISHED event */
    if (c->state == RDMA_CONN_CLOSED) { /* on_accept closed it */
        gv_rdma_conn_unref(c);
        return;
    }
    uint64_t now = gv_now_ns();
    gv_status_t status;
    if (recv) {
        c->last_rx_ns = now;
        int imm = (wc->wc_flags & IBV_WC_WITH_IMM) != 0;
        status = gv_rp_on_recv(&c->pc, v, wc->byte_len, imm, imm ? ntohl(wc->imm_data) : 0, now);
    } else {
        status = gv_rp_on_send_done(&c->pc, v, now);
    }
    if (status != GV_OK)
        gv_rdma_conn_fail(c, status);
    else if (c->state == RDMA_CONN_LINGER && gv_rp_drained(&c->pc))
        conn_linger_done(c);
    gv_rdma_conn_unref(c);
}

int gv_rdma_cq_poll(struct rdma_tp *tp)
{
    struct ibv_cq *cq;
    void *cctx;
    unsigned events = 0;
    while (ibv_get_cq_event(tp->cc, &cq, &cctx) == 0)
        events++;
    if (events > 0) {
        tp->cq_unacked += events;
        if (tp->cq_unacked >= 256) { /* acking takes a lock: batch it */
            ibv_ack_cq_events(tp->cq, tp->cq_unacked);
            tp->cq_unacked = 0;
        }
        /* Re-arm before polling, so a completion landing in between still wakes us. */
        if (ibv_req_notify_cq(tp->cq, 0) != 0) {
            gv_log(GV_LOG_ERROR, "rdma: ibv_req_notify_cq: %s", strerror(errno));
            return GV_ERR_IO;
        }
    }
    int n = 0;
    struct ibv_wc wc[32];
    for (;;) {
        int got = ibv_poll_cq(tp->cq, (int)GV_ARRAY_LEN(wc), wc);
        if (got < 0) {
            gv_log(GV_LOG_ERROR, "rdma: ibv_poll_cq failed on %s", tp->devname);
            return GV_ERR_IO;
        }
        for (int i = 0; i < got; i++)
            rdma_on_wc(tp, &wc[i]);
        n += got;
        if (got < (int)GV_ARRAY_LEN(wc))
            return n;
    }
}

/* ---------------------------------------------------------------- timers and progress */

static int conn_timers(struct rdma_tp *tp, struct rdma_conn *c, uint64_t now)
{
    const struct gv_tp_config *cfg = &tp->base.cfg;
    if (c->state == RDMA_CONN_LINGER) {
        if (now >= c->linger_deadline_ns || c->pending_close != GV_OK) {
            conn_linger_done(c);
            return 1;
        }
        return 0;
    }
    if (c->state != RDMA_CONN_OPEN)
        return 0;
    if (c->pending_close != GV_OK) {
        gv_rdma_conn_fail(c, c->pending_close);
        return 1;
    }
    if (gv_rp_check_timeout(&c->pc, now) != GV_OK) {
        gv_log(GV_LOG_WARN, "rdma conn %" PRIu64 " peer %s: no progress for %d ms", c->base.id,
               c->base.peer, cfg->io_timeout_ms);
        gv_rdma_conn_fail(c, GV_ERR_TIMEOUT);
        return 1;
    }
    /* Keepalive: an idle connection sends a probe now and then; against a dead host it ends
     * in a retry-exceeded completion (GV_ERR_TIMEOUT) within seconds. */
    uint64_t idle = (uint64_t)GV_MAX(cfg->keepalive_idle_s, 1) * 1000000000ull;
    uint64_t intvl = (uint64_t)GV_MAX(cfg->keepalive_intvl_s, 1) * 1000000000ull;
    if (cfg->keepalive_idle_s > 0 && now - c->last_rx_ns > idle && now - c->probe_ns > intvl) {
        c->probe_ns = now;
        gv_status_t status = gv_rp_send_probe(&c->pc);
        if (status != GV_OK) {
            gv_rdma_conn_fail(c, status);
            return 1;
        }
    }
    return 0;
}

static int rdma_timers(struct rdma_tp *tp, uint64_t now)
{
    int n = 0;
    for (uint32_t i = 0; i < tp->rc_cfg.max_conns && tp->nconns > 0; i++) {
        struct rdma_conn *c = tp->conns[i];
        if (c == NULL)
            continue;
        gv_rdma_conn_ref(c);
        n += conn_timers(tp, c, now);
        gv_rdma_conn_unref(c);
    }
    return n;
}

static int rdma_poll_once(struct rdma_tp *tp)
{
    int n = gv_rdma_cq_poll(tp);
    if (n < 0)
        return n;
    int m = gv_rdma_cm_poll(tp);
    return m < 0 ? m : n + m;
}

static int rdma_progress_locked(struct rdma_tp *tp, int timeout_ms);

static int rdma_progress(struct gv_tp *base, int timeout_ms)
{
    struct rdma_tp *tp = (struct rdma_tp *)base;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->owner, gv_rdma_thread_token());
    int n = rdma_progress_locked(tp, timeout_ms);
    pthread_mutex_unlock(&tp->mu);
    return n;
}

static int rdma_progress_locked(struct rdma_tp *tp, int timeout_ms)
{
    uint64_t now = gv_now_ns();
    uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : now + (uint64_t)timeout_ms * 1000000;
    int resumed = rdma_run_resumed(tp); /* resumed outside progress, or left over */
    int n = rdma_poll_once(tp);
    if (n >= 0)
        n += resumed;
    while (n == 0) {
        now = gv_now_ns();
        if (now >= tp->next_timer_ns) {
            tp->next_timer_ns = now + RDMA_TIMER_NS;
            n = rdma_timers(tp, now);
            if (n != 0)
                break;
        }
        if (now >= deadline)
            break;
        uint64_t wait_ns = GV_MIN(deadline - now, (uint64_t)RDMA_WAKE_MS * 1000000);
        struct epoll_event ev[4];
        int ret = epoll_wait(tp->epfd, ev, 4, (int)((wait_ns + 999999) / 1000000));
        if (ret < 0 && errno != EINTR) {
            gv_log(GV_LOG_ERROR, "rdma: epoll_wait: %s", strerror(errno));
            return GV_ERR_IO;
        }
        n = rdma_poll_once(tp);
    }
    if (n > 0 && gv_now_ns() >= tp->next_timer_ns) {
        tp->next_timer_ns = gv_now_ns() + RDMA_TIMER_NS;
        n += rdma_timers(tp, gv_now_ns());
    }
    if (n >= 0 && tp->resume_any) /* resumed by a callback of this call */
        n += rdma_run_resumed(tp);
    return n;
}

/* ---------------------------------------------------------------- memory registration */

static gv_status_t rdma_mem_reg(struct gv_tp *base, struct gv_buf *buf)
{
    struct rdma_tp *tp = (struct rdma_tp *)base;
    if (buf == NULL || buf->ptr == NULL || buf->len == 0 || buf->mr != NULL)
        return GV_ERR_INVAL;
    struct gv_rc_entry *e;
    gv_status_t status = gv_rc_add_explicit(&tp->rc, buf, &e);
    if (status == GV_OK)
        buf->mr = e;
    return status;
}

static void rdma_mem_dereg(struct gv_tp *base, struct gv_buf *buf)
{
    struct rdma_tp *tp = (struct rdma_tp *)base;
    if (buf == NULL || buf->mr == NULL)
        return;
    gv_rc_remove(&tp->rc, buf->mr);
    buf->mr = NULL;
}

/* ---------------------------------------------------------------- create / destroy */

static void rdma_destroy(struct gv_tp *base)
{
    struct rdma_tp *tp = (struct rdma_tp *)base;
    if (tp == NULL)
        return;
    for (uint32_t i = 0; tp->conns != NULL && i < tp->rc_cfg.max_conns; i++) {
        struct rdma_conn *c = tp->conns[i];
        if (c == NULL)
            continue;
        gv_rdma_conn_ref(c);
        if (c->state == RDMA_CONN_LINGER)
            conn_linger_done(c);
        else
            gv_rdma_conn_fail(c, GV_OK); /* on_close(GV_OK) for the open ones */
        gv_rdma_conn_unref(c);
    }
    while (tp->listeners != NULL)
        gv_rdma_listener_close((struct gv_listener *)tp->listeners);
    gv_rdma_cm_thread_del(tp);
    gv_free(tp->deferred);
    if (tp->mu_init)
        pthread_mutex_destroy(&tp->mu);
    if (tp->epfd >= 0)
        close(tp->epfd);
    gv_rdma_dev_close(tp);
    if (tp->ch != NULL)
        rdma_destroy_event_channel(tp->ch);
    gv_free(tp->conns);
    gv_free(tp);
}

static gv_status_t rdma_epoll_add(struct rdma_tp *tp, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0 ||
        epoll_ctl(tp->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        gv_log(GV_LOG_ERROR, "rdma: epoll: %s", strerror(errno));
        return GV_ERR_IO;
    }
    return GV_OK;
}

static const char *rdma_getenv(const char *name)
{
    return getenv(name);
}

static void rdma_fill_pcfg(struct rdma_tp *tp)
{
    const struct gv_tp_config *cfg = &tp->base.cfg;
    const struct gv_rdma_cfg *rc = &tp->rc_cfg;
    tp->pcfg =
        (struct gv_rp_cfg){.slot_size = rc->slot_size,
                           .rx_depth = rc->rx_depth,
                           .tx_slots = rc->tx_slots,
                           .sq_depth = rc->sq_depth,
                           .signal_every = rc->signal_every,
                           .max_inline = rc->inline_bytes,
                           .max_write_len = 1u << 30,
                           .prefix_len = (uint32_t)tp->base.h.prefix_len,
                           .max_hdr_len = cfg->max_hdr_len,
                           .max_payload_len = cfg->max_payload_len,
                           .max_send_queue = cfg->max_send_queue,
                           .max_send_queue_bytes = cfg->max_send_queue_bytes,
                           .io_timeout_ns = (uint64_t)GV_MAX(cfg->io_timeout_ms, 0) * 1000000};
}

gv_status_t gv_rdma_create_on(const char *dev, const struct gv_tp_config *cfg,
                              const struct gv_tp_handler *h, void *user, struct gv_tp **tp_p,
                              char *why, size_t n)
{
    struct gv_tp_config defaults;
    why[0] = '\0';
    if (cfg == NULL) {
        gv_tp_config_default(&defaults);
        cfg = &defaults;
    }
    if (gv_tp_check_args(cfg, h) != GV_OK) { /* logged there */
        snprintf(why, n, "invalid transport configuration or handler");
        return GV_ERR_INVAL;
    }
    struct rdma_tp *tp = gv_calloc(1, sizeof(*tp));
    if (tp == NULL)
        return GV_ERR_NOMEM;
    tp->base.ops = &gv_tp_rdma_ops;
    tp->base.cfg = *cfg;
    tp->base.h = *h;
    tp->base.user = user;
    tp->epfd = -1;
    gv_status_t status = gv_rdma_cfg_load(&tp->rc_cfg, rdma_getenv, why, n);
    char devname[64] = "";
    if (status == GV_OK)
        status = gv_rdma_probe(&gv_rdma_probe_sys, NULL, NULL, gv_rdma_pool_need(&tp->rc_cfg),
                               devname, sizeof(devname), why, n);
    if (status != GV_OK)
        goto err_destroy;
    tp->ch = rdma_create_event_channel();
    if (tp->ch == NULL) {
        gv_rdma_nodev_reason(errno, why, n);
        status = GV_ERR_NODEV;
        goto err_destroy;
    }
    status = gv_rdma_dev_open(tp, dev != NULL && *dev != '\0' ? dev : tp->rc_cfg.device, why, n);
    if (status != GV_OK)
        goto err_destroy;
    rdma_fill_pcfg(tp);
    if ((status = gv_rp_cfg_check(&tp->pcfg)) != GV_OK) {
        snprintf(why, n, "transport configuration out of range for the RDMA protocol");
        goto err_destroy;
    }
    tp->conns = gv_calloc(tp->rc_cfg.max_conns, sizeof(*tp->conns));
    tp->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (tp->conns == NULL || tp->epfd < 0) {
        status = tp->conns == NULL ? GV_ERR_NOMEM : GV_ERR_IO;
        goto err_destroy;
    }
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    tp->mu_init = pthread_mutex_init(&tp->mu, &ma) == 0;
    pthread_mutexattr_destroy(&ma);
    atomic_store(&tp->owner, gv_rdma_thread_token());
    if (tp->mu_init)
        gv_rdma_cm_thread_add(tp);
    if ((status = rdma_epoll_add(tp, tp->ch->fd)) != GV_OK ||
        (status = rdma_epoll_add(tp, tp->cc->fd)) != GV_OK)
        goto err_destroy;
    gv_log(GV_LOG_INFO,
           "rdma: device %s: %" PRIu32 "-byte slots (eager up to %" PRIu32 " bytes), %" PRIu32
           " credits, %" PRIu32 " send slots, signal every %" PRIu32,
           tp->devname, tp->pcfg.slot_size, tp->pcfg.slot_size - GV_RP_CTRL_LEN, tp->pcfg.rx_depth,
           tp->pcfg.tx_slots, tp->pcfg.signal_every);
    *tp_p = &tp->base;
    return GV_OK;

err_destroy:
    rdma_destroy(&tp->base);
    return status;
}

static gv_status_t rdma_create(const struct gv_tp_config *cfg, const struct gv_tp_handler *h,
                               void *user, struct gv_tp **tp_p)
{
    char why[512];
    gv_status_t status = gv_rdma_create_on(NULL, cfg, h, user, tp_p, why, sizeof(why));
    if (status != GV_OK)
        gv_log(GV_LOG_ERROR, "rdma: unavailable: %s", why[0] ? why : gv_status_str(status));
    return status;
}

const struct gv_tp_ops gv_tp_rdma_ops = {
    .name = "rdma",
    .create = rdma_create,
    .destroy = rdma_destroy,
    .listen = gv_rdma_listen,
    .listener_port = gv_rdma_listener_port,
    .listener_close = gv_rdma_listener_close,
    .connect = gv_rdma_connect,
    .send = rdma_send,
    .progress = rdma_progress,
    .conn_close = rdma_conn_close,
    .mem_reg = rdma_mem_reg,
    .mem_dereg = rdma_mem_dereg,
    .caps = GV_TP_CAP_DEFER_RECV,
    .resume_recv = rdma_resume_recv,
};
