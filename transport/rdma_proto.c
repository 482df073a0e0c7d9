/* rdma_proto.c: the sending half of the RDMA protocol and what both halves share: send
 * slots, the send-queue record ring with selective signalling, credits, and connection
 * failure. The receiving half is rdma_proto_rx.c, the encodings rdma_proto_wire.c.
 * No verbs calls: everything goes out through struct gv_rp_wire_ops. */
#include "rdma_proto.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- shared helpers */

gv_status_t gv_rpi_err(const struct gv_rp_conn *pc, gv_status_t status, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    gv_log(GV_LOG_ERROR, "rdma conn %" PRIu64 " peer %s: %s", pc->uc->id, pc->uc->peer, msg);
    return status;
}

char *gv_rpi_rslot(const struct gv_rp_conn *pc, uint32_t slot)
{
    return pc->slots + (size_t)slot * pc->cfg.slot_size;
}

char *gv_rpi_sslot(const struct gv_rp_conn *pc, uint32_t slot)
{
    return pc->slots + (size_t)(pc->nrecv + slot) * pc->cfg.slot_size;
}

int32_t gv_rpi_slot_alloc(struct gv_rp_conn *pc)
{
    GV_ASSERT(pc->nfree > 0);
    return pc->free_slots[--pc->nfree];
}

static void rp_slot_free(struct gv_rp_conn *pc, int32_t slot)
{
    GV_ASSERT(pc->nfree < pc->cfg.tx_slots);
    pc->free_slots[pc->nfree++] = slot;
}

int gv_rpi_sq_space(const struct gv_rp_conn *pc)
{
    return pc->wr_head - pc->wr_tail < pc->cfg.sq_depth;
}

static struct gv_rp_smsg *rp_msg(const struct gv_rp_conn *pc, uint64_t c)
{
    return &pc->msgs[c % pc->cfg.max_send_queue];
}

/* Reserves the next send record and decides whether the WR asks for a completion. Every
 * signal_every-th WR does, so that slots and queue space come back in batches without a
 * completion per send; so does the WR that fills the send queue (otherwise nothing would ever
 * report the space free), one that takes the last data slot, and any the caller must hear of
 * (control messages, the end of a rendezvous). */
static uint32_t rp_wr_begin(struct gv_rp_conn *pc, int32_t slot, int32_t msg, int force,
                            unsigned *flags)
{
    uint64_t outstanding = pc->wr_head - pc->wr_tail;
    int sig = force || pc->since_signal + 1 >= pc->cfg.signal_every ||
              outstanding + 1 >= pc->cfg.sq_depth;
    uint32_t rec = (uint32_t)(pc->wr_head % pc->cfg.sq_depth);
    pc->wr[rec] = (struct gv_rp_wr){slot, msg, (uint8_t)sig};
    *flags |= sig ? GV_RP_F_SIGNALED : 0;
    return rec;
}

static void rp_wr_commit(struct gv_rp_conn *pc, unsigned flags)
{
    pc->wr_head++;
    pc->st.wrs++;
    if (flags & GV_RP_F_SIGNALED) {
        pc->since_signal = 0;
        pc->st.signaled++;
    } else {
        pc->since_signal++;
    }
}

static void rp_use_credits(struct gv_rp_conn *pc, uint32_t n)
{
    GV_ASSERT(pc->credits >= n);
    pc->credits -= n;
    if (pc->credits < pc->st.min_credits)
        pc->st.min_credits = pc->credits;
}

/* Posts the SEND in send slot `slot` (header h encoded in front of h->len data bytes already
 * in place). The slot goes back on completion, or at once for an inline send. */
static gv_status_t rp_post_slot(struct gv_rp_conn *pc, int32_t slot, struct gv_rp_ctrl *h,
                                int32_t msg, int force)
{
    char *p = gv_rpi_sslot(pc, (uint32_t)slot);
    uint32_t len = GV_RP_CTRL_LEN + h->len;
    h->credits = (uint16_t)pc->owed;
    gv_rp_ctrl_encode(h, p);
    int inl = len <= pc->cfg.max_inline;
    unsigned flags = inl ? GV_RP_F_INLINE : 0;
    /* Taking the last data slot forces a signal so that slots keep coming back. */
    int last_slot = !inl && pc->nfree <= GV_RP_CTRL_SLOTS;
    uint32_t rec = rp_wr_begin(pc, inl ? -1 : slot, msg, force || last_slot, &flags);
    gv_status_t status = pc->wire->post_send(pc->wctx, p, len, pc->lkey, flags, rec);
    if (status != GV_OK)
        return status;
    rp_wr_commit(pc, flags);
    pc->owed = 0;
    if (inl) {
        pc->st.inline_sends++;
        rp_slot_free(pc, slot);
    }
    return GV_OK;
}

gv_status_t gv_rpi_post_ctrl(struct gv_rp_conn *pc, int32_t slot, struct gv_rp_ctrl *h, int32_t msg)
{
    return rp_post_slot(pc, slot, h, msg, 1);
}

gv_status_t gv_rpi_repost(struct gv_rp_conn *pc, uint32_t slot, int owed)
{
    if (pc->dead)
        return GV_OK;
    gv_status_t status =
        pc->wire->post_recv(pc->wctx, gv_rpi_rslot(pc, slot), pc->cfg.slot_size, pc->lkey, slot);
    if (status == GV_OK && owed)
        pc->owed++;
    return status;
}

/* Copies between user memory and a slot; the user side may be device memory, which only the
 * registration cache knows about (explicit entries of kind GV_MEM_DEVICE). */
gv_status_t gv_rpi_copy(struct gv_rp_conn *pc, void *dst, const void *src, size_t len,
                        enum gv_rp_copy_dir dir)
{
    if (len == 0)
        return GV_OK;
    if (pc->rc != NULL && pc->rc->st.device_entries > 0) {
        const void *user = dir == GV_RP_D2H ? src : dst;
        struct gv_rc_entry *e = gv_rc_peek(pc->rc, user, len);
        if (e != NULL && e->mem == GV_MEM_DEVICE)
            return pc->wire->copy(pc->wctx, dst, src, len, dir);
    }
    memcpy(dst, src, len);
    return GV_OK;
}

/* ---------------------------------------------------------------- lifetime */

gv_status_t gv_rp_init(struct gv_rp_conn *pc, const struct gv_rp_cfg *cfg,
                       const struct gv_rp_params *peer, void *slots, uint32_t lkey,
                       struct gv_rcache *rc, const struct gv_rp_wire_ops *wire, void *wctx,
                       struct gv_conn *uc, const struct gv_tp_handler *h, void *user)
{
    memset(pc, 0, sizeof(*pc));
    gv_status_t status = gv_rp_cfg_check(cfg);
    if (status != GV_OK)
        return status;
    pc->cfg = *cfg;
    pc->peer = *peer;
    pc->slots = slots;
    pc->lkey = lkey;
    pc->nrecv = cfg->rx_depth + 1;
    pc->wire = wire;
    pc->wctx = wctx;
    pc->rc = rc;
    pc->uc = uc;
    pc->h = h;
    pc->user = user;
    pc->credits = peer->rx_depth;
    pc->reply_credit = 1;
    pc->credit_thresh = GV_MAX(1u, cfg->rx_depth / 2);
    pc->send_max = GV_MIN(cfg->slot_size, peer->slot_size);
    pc->rx.slot = -1;
    pc->st.min_credits = pc->credits;

    pc->free_slots = gv_calloc(cfg->tx_slots, sizeof(*pc->free_slots));
    pc->wr = gv_calloc(cfg->sq_depth, sizeof(*pc->wr));
    pc->msgs = gv_calloc(cfg->max_send_queue, sizeof(*pc->msgs));
    pc->held = gv_calloc(pc->nrecv, sizeof(*pc->held));
    if (pc->free_slots == NULL || pc->wr == NULL || pc->msgs == NULL || pc->held == NULL) {
        gv_rp_cleanup(pc);
        return GV_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < cfg->tx_slots; i++)
        pc->free_slots[i] = (int32_t)(cfg->tx_slots - 1 - i);
    pc->nfree = cfg->tx_slots;
    return GV_OK;
}

gv_status_t gv_rp_set_peer(struct gv_rp_conn *pc, const struct gv_rp_params *peer)
{
    if (pc->wr_head != 0 || pc->m_tail != 0)
        return GV_ERR_INVAL;
    pc->peer = *peer;
    pc->credits = peer->rx_depth;
    pc->st.min_credits = pc->credits;
    pc->send_max = GV_MIN(pc->cfg.slot_size, peer->slot_size);
    return GV_OK;
}

static void rp_release_src(struct gv_rp_conn *pc, struct gv_rp_smsg *m)
{
    for (int i = 0; i < m->iovcnt; i++) {
        gv_rc_put(pc->rc, m->src[i]);
        m->src[i] = NULL;
    }
}

void gv_rp_cleanup(struct gv_rp_conn *pc)
{
    if (pc->msgs != NULL)
        for (uint64_t c = pc->m_head; c < pc->m_tail; c++)
            rp_release_src(pc, rp_msg(pc, c));
    gv_rpi_rx_release(pc);
    gv_free(pc->rx.hdr);
    gv_free(pc->free_slots);
    gv_free(pc->wr);
    gv_free(pc->msgs);
    gv_free(pc->held);
    pc->rx.hdr = NULL;
    pc->free_slots = NULL;
    pc->wr = NULL;
    pc->msgs = NULL;
    pc->held = NULL;
}

gv_status_t gv_rp_post_recvs(struct gv_rp_conn *pc)
{
    for (uint32_t i = 0; i < pc->nrecv; i++) {
        gv_status_t status = gv_rpi_repost(pc, i, 0);
        if (status != GV_OK)
            return status;
    }
    return GV_OK;
}

static int rp_cb_pending(const struct gv_rp_smsg *m)
{
    return m->state != GV_RP_S_FREE && m->state != GV_RP_S_EAGER && m->state != GV_RP_S_DONE;
}

/* Fails the messages matching `which` (all with a pending cb, or only those not yet on the
 * wire): releases their registrations and fires cb(status). */
static void rp_fail_msgs(struct gv_rp_conn *pc, gv_status_t status, int unposted_only)
{
    for (uint64_t c = pc->m_head; c < pc->m_tail; c++) {
        struct gv_rp_smsg *m = rp_msg(pc, c);
        if (!rp_cb_pending(m))
            continue;
        int posted = m->state != GV_RP_S_EAGER_REF && !(m->state == GV_RP_S_RTS && !m->frag_off);
        if (unposted_only && posted)
            continue;
        rp_release_src(pc, m);
        m->state = GV_RP_S_DONE;
        pc->q_bytes -= m->bytes;
        if (m->cb != NULL)
            m->cb(pc->uc, status, m->arg);
    }
}

void gv_rp_fail(struct gv_rp_conn *pc, gv_status_t status)
{
    if (pc->dead)
        return;
    pc->dead = 1;
    rp_fail_msgs(pc, status, 0);
    gv_rpi_rx_release(pc);
}

int gv_rp_close_begin(struct gv_rp_conn *pc)
{
    if (pc->dead)
        return 0;
    /* A deferred message is not midway: no CTS went out, so the peer writes nothing. */
    int midway = pc->rx.state != GV_RP_RX_IDLE && pc->rx.state != GV_RP_RX_DEFERRED;
    for (uint64_t c = pc->m_head; c < pc->m_tail && !midway; c++) {
        const struct gv_rp_smsg *m = rp_msg(pc, c);
        midway = m->state >= GV_RP_S_WAIT_CTS && m->state <= GV_RP_S_WAIT_DONE;
        midway |= m->state == GV_RP_S_RTS && m->frag_off > 0;
    }
    if (midway) {
        /* A rendezvous is half done in one direction: the peer could still write into our
         * buffers or wait for ours. Stop now rather than linger. */
        gv_rp_fail(pc, GV_ERR_CLOSED);
        return 0;
    }
    rp_fail_msgs(pc, GV_ERR_CLOSED, 1);
    gv_rpi_rx_release(pc);
    pc->draining = 1;
    if (gv_rp_drained(pc))
        return 0;
    return gv_rp_pump(pc) == GV_OK;
}

int gv_rp_drained(const struct gv_rp_conn *pc)
{
    uint64_t live = 0;
    for (uint64_t c = pc->m_head; c < pc->m_tail; c++)
        live += rp_msg(pc, c)->state != GV_RP_S_DONE;
    return live == 0 && pc->wr_head == pc->wr_tail;
}

gv_status_t gv_rp_check_timeout(const struct gv_rp_conn *pc, uint64_t now_ns)
{
    if (pc->dead || pc->cfg.io_timeout_ns == 0)
        return GV_OK;
    int rx_busy = pc->rx.state != GV_RP_RX_IDLE && pc->rx.state != GV_RP_RX_DEFERRED;
    int pending = pc->m_head != pc->m_tail || rx_busy || pc->draining;
    if (pending && now_ns > pc->last_progress_ns &&
        now_ns - pc->last_progress_ns > pc->cfg.io_timeout_ns)
        return GV_ERR_TIMEOUT;
    return GV_OK;
}

/* ---------------------------------------------------------------- sending */

static gv_status_t rp_copy_msg(struct gv_rp_conn *pc, char *dst, const struct gv_iov *iov,
                               int iovcnt)
{
    for (int i = 0; i < iovcnt; i++) {
        gv_status_t status = gv_rpi_copy(pc, dst, iov[i].base, iov[i].len, GV_RP_D2H);
        if (status != GV_OK)
            return status;
        dst += iov[i].len;
    }
    return GV_OK;
}

static gv_status_t rp_check_iov(const struct gv_rp_conn *pc, const struct gv_iov *iov, int iovcnt,
                                uint64_t *payload_p)
{
    if (iov == NULL || iovcnt < 1 || iovcnt > GV_TP_MAX_SEND_IOV || iov[0].base == NULL ||
        iov[0].len < pc->cfg.prefix_len || iov[0].len > pc->cfg.max_hdr_len)
        return GV_ERR_INVAL;
    uint64_t payload = 0;
    for (int i = 1; i < iovcnt; i++) {
        if (iov[i].len > 0 && iov[i].base == NULL)
            return GV_ERR_INVAL;
        if (iov[i].len > pc->cfg.max_payload_len - payload)
            return GV_ERR_INVAL;
        payload += iov[i].len;
    }
    *payload_p = payload;
    return GV_OK;
}

/* Rendezvous sources: registered (or looked up) now, so a failure is reported by send, and
 * staged device memory copied to its pinned shadow while the caller waits. */
static gv_status_t rp_prepare_src(struct gv_rp_conn *pc, struct gv_rp_smsg *m)
{
    for (int i = 1; i < m->iovcnt; i++) {
        if (m->iov[i].len == 0)
            continue;
        gv_status_t status = gv_rc_get(pc->rc, m->iov[i].base, m->iov[i].len, &m->src[i]);
        if (status == GV_OK && m->src[i]->mr.shadow != NULL)
            status = pc->wire->copy(pc->wctx, gv_rc_xlate(m->src[i], m->iov[i].base),
                                    m->iov[i].base, m->iov[i].len, GV_RP_D2H);
        if (status != GV_OK) {
            rp_release_src(pc, m);
            return status;
        }
    }
    return GV_OK;
}

/* 1 when a queued message is still waiting for send slots: a new message must not take a
 * slot ahead of it (it could not be posted before it anyway, and would starve it). */
static int rp_slot_waiters(const struct gv_rp_conn *pc)
{
    for (uint64_t c = pc->m_post; c < pc->m_tail; c++) {
        uint8_t st = rp_msg(pc, c)->state;
        if (st == GV_RP_S_EAGER_REF || st == GV_RP_S_RTS)
            return 1;
    }
    return 0;
}

gv_status_t gv_rp_send(struct gv_rp_conn *pc, const struct gv_iov *iov, int iovcnt,
                       gv_tp_send_cb cb, void *arg, uint64_t now_ns)
{
    if (pc->dead || pc->draining)
        return GV_ERR_CLOSED;
    uint64_t payload;
    gv_status_t status = rp_check_iov(pc, iov, iovcnt, &payload);
    if (status != GV_OK)
        return status;
    uint64_t bytes = iov[0].len + payload;
    uint64_t count = pc->m_tail - pc->m_head;
    if (count >= pc->cfg.max_send_queue ||
        (count > 0 && pc->q_bytes + bytes > pc->cfg.max_send_queue_bytes))
        return GV_ERR_AGAIN;

    struct gv_rp_smsg *m = rp_msg(pc, pc->m_tail);
    memset(m, 0, sizeof(*m));
    m->slot = -1;
    m->msg_len = (uint32_t)iov[0].len;
    m->payload_len = payload;
    m->bytes = bytes;
    if (GV_RP_CTRL_LEN + bytes <= pc->send_max && pc->nfree > GV_RP_CTRL_SLOTS &&
        !rp_slot_waiters(pc)) {
        m->slot = gv_rpi_slot_alloc(pc);
        status = rp_copy_msg(pc, gv_rpi_sslot(pc, (uint32_t)m->slot) + GV_RP_CTRL_LEN, iov, iovcnt);
        if (status != GV_OK) {
            rp_slot_free(pc, m->slot);
            return status;
        }
        m->state = GV_RP_S_EAGER;
    } else {
        memcpy(m->iov, iov, (size_t)iovcnt * sizeof(*iov));
        m->iovcnt = iovcnt;
        m->cb = cb;
        m->arg = arg;
        if (GV_RP_CTRL_LEN + bytes <= pc->send_max) {
            m->state = GV_RP_S_EAGER_REF;
        } else {
            status = rp_prepare_src(pc, m);
            if (status != GV_OK)
                return status;
            m->state = GV_RP_S_RTS;
            m->id = pc->next_id++;
            pc->st.rendezvous++;
        }
    }
    if (m->state != GV_RP_S_RTS)
        pc->st.eager++;
    if (pc->m_head == pc->m_tail)
        pc->last_progress_ns = now_ns; /* the io timeout counts from the first pending work */
    pc->m_tail++;
    pc->q_bytes += bytes;
    pc->uc->bytes_sent += bytes;
    gv_status_t ret = m->state == GV_RP_S_EAGER ? GV_OK : GV_INPROGRESS;
    pc->in_send = 1;
    status = gv_rp_pump(pc);
    pc->in_send = 0;
    if (status != GV_OK && pc->fatal == GV_OK)
        pc->fatal = status;
    return ret;
}

static void rp_msg_done(struct gv_rp_conn *pc, struct gv_rp_smsg *m, int fire)
{
    rp_release_src(pc, m);
    m->state = GV_RP_S_DONE;
    pc->q_bytes -= m->bytes;
    if (fire && m->cb != NULL)
        m->cb(pc->uc, GV_OK, m->arg);
}

static gv_status_t rp_post_eager(struct gv_rp_conn *pc, struct gv_rp_smsg *m, int *done)
{
    *done = 0;
    if (pc->credits < 2 || !gv_rpi_sq_space(pc))
        return GV_OK;
    int promoted = 0;
    if (m->state == GV_RP_S_EAGER_REF) {
        /* Copied only from progress(), so that its cb never fires inside gv_tp_send. */
        if (pc->in_send || pc->nfree <= GV_RP_CTRL_SLOTS)
            return GV_OK;
        m->slot = gv_rpi_slot_alloc(pc);
        gv_status_t status = rp_copy_msg(pc, gv_rpi_sslot(pc, (uint32_t)m->slot) + GV_RP_CTRL_LEN,
                                         m->iov, m->iovcnt);
        if (status != GV_OK)
            return status;
        m->state = GV_RP_S_EAGER;
        promoted = 1;
    }
    struct gv_rp_ctrl h = {.type = GV_RP_EAGER, .len = (uint32_t)m->bytes, .msg_len = m->msg_len};
    gv_status_t status = rp_post_slot(pc, m->slot, &h, -1, 0);
    if (status != GV_OK)
        return status;
    rp_use_credits(pc, 1);
    m->slot = -1;
    *done = 1;
    rp_msg_done(pc, m, promoted);
    return GV_OK;
}

/* RTS and its RTS_CONT fragments. The first one prepays the credit of the final write (its
 * imm consumes a receive at the peer), so that write never waits for credits. */
static gv_status_t rp_post_rts(struct gv_rp_conn *pc, struct gv_rp_smsg *m, int *done)
{
    *done = 0;
    do {
        int first = m->frag_off == 0;
        uint32_t need = first && m->payload_len > 0 ? 2 : 1;
        if (pc->credits < need + 1 || !gv_rpi_sq_space(pc) || pc->nfree <= GV_RP_CTRL_SLOTS)
            return GV_OK;
        uint32_t n = GV_MIN(m->msg_len - m->frag_off, pc->send_max - GV_RP_CTRL_LEN);
        int32_t slot = gv_rpi_slot_alloc(pc);
        memcpy(gv_rpi_sslot(pc, (uint32_t)slot) + GV_RP_CTRL_LEN,
               (const char *)m->iov[0].base + m->frag_off, n);
        struct gv_rp_ctrl h = {.type = first ? GV_RP_RTS : GV_RP_RTS_CONT,
                               .len = n,
                               .msg_len = m->msg_len,
                               .id = m->id,
                               .payload_len = m->payload_len};
        gv_status_t status = rp_post_slot(pc, slot, &h, -1, 0);
        if (status != GV_OK)
            return status;
        rp_use_credits(pc, need);
        m->frag_off += n;
    } while (m->frag_off < m->msg_len);
    *done = 1;
    if (m->payload_len > 0)
        m->state = GV_RP_S_WAIT_CTS;
    else
        rp_msg_done(pc, m, 1); /* a long header alone: copied out, buffers free */
    return GV_OK;
}

gv_status_t gv_rpi_on_cts(struct gv_rp_conn *pc, const struct gv_rp_ctrl *h, const char *data)
{
    struct gv_rp_smsg *m = NULL;
    for (uint64_t c = pc->m_head; c < pc->m_post && m == NULL; c++)
        if (rp_msg(pc, c)->state == GV_RP_S_WAIT_CTS)
            m = rp_msg(pc, c);
    if (m == NULL || m->id != h->id)
        return gv_rpi_err(pc, GV_ERR_PROTO, "unexpected CTS for rendezvous %" PRIu32, h->id);
    uint32_t n = h->len / GV_RP_ELEM_LEN;
    if (h->len % GV_RP_ELEM_LEN != 0 || n < 1 || n > GV_TP_MAX_DST_IOV)
        return gv_rpi_err(pc, GV_ERR_PROTO, "malformed CTS (%" PRIu32 " bytes)", h->len);
    uint64_t sum = 0, left = 0;
    for (uint32_t i = 0; i < n; i++) {
        gv_rp_elem_decode(data + i * GV_RP_ELEM_LEN, &m->dst[i]);
        if (m->dst[i].len > m->payload_len - sum)
            return gv_rpi_err(pc, GV_ERR_PROTO, "CTS lengths exceed the payload");
        sum += m->dst[i].len;
        if (!(m->dst[i].flags & GV_RP_ELEM_SKIP))
            left += m->dst[i].len;
    }
    if (sum != m->payload_len)
        return gv_rpi_err(pc, GV_ERR_PROTO, "CTS covers %" PRIu64 " of %" PRIu64 " bytes", sum,
                          m->payload_len);
    m->ndst = (int)n;
    m->src_i = 1;
    m->src_off = m->dst_off = 0;
    m->dst_i = 0;
    m->left = left;
    m->state = GV_RP_S_WRITING;
    return GV_OK;
}

/* Moves the write cursor n bytes forward (written or skipped) on both sides. */
static void rp_cursor_advance(struct gv_rp_smsg *m, uint64_t n)
{
    uint64_t s = n;
    while (s > 0 && m->src_i < m->iovcnt) {
        uint64_t k = GV_MIN(s, m->iov[m->src_i].len - m->src_off);
        m->src_off += k;
        s -= k;
        if (m->src_off == m->iov[m->src_i].len) {
            m->src_i++;
            m->src_off = 0;
        }
    }
    m->dst_off += n;
    if (m->dst_off == m->dst[m->dst_i].len) {
        m->dst_i++;
        m->dst_off = 0;
    }
}

static void rp_cursor_settle(struct gv_rp_smsg *m)
{
    while (m->dst_i < m->ndst &&
           (m->dst[m->dst_i].flags & GV_RP_ELEM_SKIP || m->dst[m->dst_i].len == 0)) {
        uint64_t skip = m->dst[m->dst_i].len - m->dst_off;
        if (skip == 0) {
            m->dst_i++;
            m->dst_off = 0;
        } else {
            rp_cursor_advance(m, skip);
        }
    }
    while (m->src_i < m->iovcnt && m->src_off == m->iov[m->src_i].len) {
        m->src_i++;
        m->src_off = 0;
    }
}

static gv_status_t rp_post_fin(struct gv_rp_conn *pc, struct gv_rp_smsg *m, int32_t mi)
{
    if (pc->nfree == 0 || !gv_rpi_sq_space(pc))
        return GV_OK;
    struct gv_rp_ctrl h = {.type = GV_RP_FIN, .id = m->id};
    gv_status_t status = gv_rpi_post_ctrl(pc, gv_rpi_slot_alloc(pc), &h, mi);
    if (status == GV_OK) {
        pc->st.fins++;
        m->state = GV_RP_S_WAIT_DONE;
    }
    return status;
}

static gv_status_t rp_post_writes(struct gv_rp_conn *pc, struct gv_rp_smsg *m, int32_t mi)
{
    while (m->state == GV_RP_S_WRITING) {
        if (m->left == 0)
            return rp_post_fin(pc, m, mi);
        if (!gv_rpi_sq_space(pc))
            return GV_OK;
        rp_cursor_settle(m);
        const struct gv_iov *s = &m->iov[m->src_i];
        const struct gv_rp_elem *d = &m->dst[m->dst_i];
        uint64_t n = GV_MIN(s->len - m->src_off, d->len - m->dst_off);
        n = GV_MIN(n, (uint64_t)pc->cfg.max_write_len);
        int last = n == m->left;
        const char *src = (const char *)s->base + m->src_off;
        struct gv_rp_write w = {.laddr = gv_rc_xlate(m->src[m->src_i], src),
                                .lkey = m->src[m->src_i]->mr.lkey,
                                .len = (uint32_t)n,
                                .raddr = d->addr + m->dst_off,
                                .rkey = d->rkey,
                                .with_imm = last,
                                .imm = gv_rp_imm(m->id, (uint16_t)pc->owed)};
        unsigned flags = 0;
        uint32_t rec = rp_wr_begin(pc, -1, last ? mi : -1, last, &flags);
        gv_status_t status = pc->wire->post_write(pc->wctx, &w, flags, rec);
        if (status != GV_OK)
            return status;
        rp_wr_commit(pc, flags);
        pc->st.writes++;
        pc->st.bytes_written += n;
        m->left -= n;
        rp_cursor_advance(m, n);
        if (last) {
            pc->owed = 0;
            m->state = GV_RP_S_WAIT_DONE;
        }
    }
    return GV_OK;
}

static void rp_retire(struct gv_rp_conn *pc)
{
    while (pc->m_head < pc->m_post && rp_msg(pc, pc->m_head)->state == GV_RP_S_DONE) {
        rp_msg(pc, pc->m_head)->state = GV_RP_S_FREE;
        pc->m_head++;
    }
}

static gv_status_t rp_post_queued(struct gv_rp_conn *pc)
{
    for (uint64_t c = pc->m_head; c < pc->m_post && !pc->dead; c++) {
        struct gv_rp_smsg *m = rp_msg(pc, c);
        if (m->state != GV_RP_S_WRITING)
            continue;
        gv_status_t status = rp_post_writes(pc, m, (int32_t)(c % pc->cfg.max_send_queue));
        if (status != GV_OK || m->state == GV_RP_S_WRITING)
            return status; /* error, or the send queue is full */
    }
    while (pc->m_post < pc->m_tail && !pc->dead) {
        struct gv_rp_smsg *m = rp_msg(pc, pc->m_post);
        int done = 0;
        if (m->state == GV_RP_S_DONE) { /* failed before it was posted (closing) */
            pc->m_post++;
            continue;
        }
        gv_status_t status =
            m->state == GV_RP_S_RTS ? rp_post_rts(pc, m, &done) : rp_post_eager(pc, m, &done);
        if (status != GV_OK || !done)
            return status;
        pc->m_post++;
    }
    return GV_OK;
}

static gv_status_t rp_send_credit(struct gv_rp_conn *pc)
{
    if (pc->dead || pc->credits < 1 || pc->nfree == 0 || !gv_rpi_sq_space(pc))
        return GV_OK;
    struct gv_rp_ctrl h = {.type = GV_RP_CREDIT};
    gv_status_t status = gv_rpi_post_ctrl(pc, gv_rpi_slot_alloc(pc), &h, -1);
    if (status == GV_OK) {
        rp_use_credits(pc, 1);
        pc->st.credit_msgs++;
    }
    return status;
}

gv_status_t gv_rp_send_probe(struct gv_rp_conn *pc)
{
    /* The last credit goes only with credits to return (see the header). */
    if (pc->credits < 2 && pc->owed == 0)
        return GV_OK;
    return rp_send_credit(pc);
}

static gv_status_t rp_pump_once(struct gv_rp_conn *pc)
{
    gv_status_t status = GV_OK;
    if (!pc->draining)
        status = gv_rpi_rx_try_cts(pc);
    if (status == GV_OK)
        status = rp_post_queued(pc);
    rp_retire(pc);
    if (status != GV_OK || pc->dead)
        return status;
    /* Nothing carried the credits back: say so explicitly before the peer runs dry. When
     * draining, one signaled probe also tells us that every earlier WR has completed. */
    if (pc->owed >= pc->credit_thresh ||
        (pc->draining && pc->m_head == pc->m_tail && pc->since_signal > 0))
        status = rp_send_credit(pc);
    return status;
}

gv_status_t gv_rp_pump(struct gv_rp_conn *pc)
{
    if (pc->in_pump) {
        pc->pump_again = 1; /* a callback fired from inside the pump sent something */
        return GV_OK;
    }
    gv_status_t status;
    pc->in_pump = 1;
    do {
        pc->pump_again = 0;
        status = pc->dead ? GV_OK : rp_pump_once(pc);
    } while (status == GV_OK && pc->pump_again && !pc->dead);
    pc->in_pump = 0;
    return status;
}

gv_status_t gv_rp_on_send_done(struct gv_rp_conn *pc, uint32_t rec, uint64_t now_ns)
{
    if (pc->dead)
        return GV_OK;
    uint32_t depth = pc->cfg.sq_depth;
    uint64_t c = pc->wr_tail + (rec + depth - (uint32_t)(pc->wr_tail % depth)) % depth;
    if (rec >= depth || c >= pc->wr_head || !pc->wr[rec].signaled)
        return gv_rpi_err(pc, GV_ERR_IO, "send completion for unknown record %" PRIu32, rec);
    pc->last_progress_ns = now_ns;
    /* Send completions come in posting order, so a signaled one covers every WR before it. */
    while (pc->wr_tail <= c) {
        struct gv_rp_wr r = pc->wr[pc->wr_tail % depth];
        pc->wr_tail++;
        if (r.slot >= 0)
            rp_slot_free(pc, r.slot);
        if (r.msg >= 0 && pc->msgs[r.msg].state == GV_RP_S_WAIT_DONE)
            rp_msg_done(pc, &pc->msgs[r.msg], 1);
    }
    rp_retire(pc);
    return gv_rp_pump(pc);
}
