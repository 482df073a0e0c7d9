/* rdma_proto_rx.c: the receiving half of the RDMA protocol: validating what arrives (all of it
 * is peer data), returning credits, delivering messages in order, and the receiver's side of
 * the rendezvous (on_header -> registration -> CTS -> final write -> on_msg). No verbs. */
#include "rdma_proto.h"

#include <inttypes.h>
#include <string.h>

static gv_status_t rx_add_credits(struct gv_rp_conn *pc, uint32_t n)
{
    if (n > pc->peer.rx_depth || pc->credits + n > pc->peer.rx_depth)
        return gv_rpi_err(pc, GV_ERR_PROTO,
                          "peer returned %" PRIu32 " credits, %" PRIu32 " outstanding", n,
                          pc->peer.rx_depth - pc->credits);
    pc->credits += n;
    return GV_OK;
}

/* The handler's own framing must agree with what the sender declared. */
static gv_status_t rx_check_prefix(struct gv_rp_conn *pc, const char *msg, uint32_t msg_len,
                                   uint64_t payload_len)
{
    uint32_t hdr_len = 0;
    uint64_t pl = 0;
    gv_status_t status = pc->h->parse_prefix(msg, &hdr_len, &pl, pc->user);
    if (status != GV_OK)
        return gv_rpi_err(pc, status, "prefix refused: %s", gv_status_str(status));
    if ((uint64_t)pc->cfg.prefix_len + hdr_len != msg_len || pl != payload_len)
        return gv_rpi_err(pc, GV_ERR_PROTO,
                          "framing mismatch: prefix says %" PRIu32 "+%" PRIu64
                          ", message has %" PRIu32 "+%" PRIu64,
                          hdr_len, pl, msg_len - pc->cfg.prefix_len, payload_len);
    return GV_OK;
}

/* Asks on_header where the payload goes and checks the answer. */
static gv_status_t rx_get_dst(struct gv_rp_conn *pc, const char *msg, uint32_t msg_len,
                              uint64_t payload_len, struct gv_iov *dst, int *cnt_p)
{
    int cnt = GV_TP_MAX_DST_IOV;
    gv_status_t status = pc->h->on_header(pc->uc, msg, msg_len, payload_len, dst, &cnt, pc->user);
    if (status != GV_OK)
        return status;
    if (cnt < 1 || cnt > GV_TP_MAX_DST_IOV)
        return gv_rpi_err(pc, GV_ERR_INVAL, "on_header gave %d destinations", cnt);
    uint64_t sum = 0;
    for (int i = 0; i < cnt; i++) {
        if (dst[i].len > payload_len - sum)
            return gv_rpi_err(pc, GV_ERR_INVAL, "on_header destinations exceed the payload");
        sum += dst[i].len;
    }
    if (sum != payload_len)
        return gv_rpi_err(pc, GV_ERR_INVAL,
                          "on_header destinations hold %" PRIu64 " of %" PRIu64 " bytes", sum,
                          payload_len);
    *cnt_p = cnt;
    return GV_OK;
}

/* on_header answered GV_ERR_AGAIN: the message waits where it is (the RTS header in its slot
 * or reassembly buffer, or the eager message in its receive slot, not reposted) and nothing
 * behind it is delivered until gv_rp_run_resumed. 0 when on_header closed the connection
 * instead (then nothing is delivered any more). */
static int rx_defer(struct gv_rp_conn *pc, int eager)
{
    if (pc->dead || pc->draining)
        return 0;
    pc->rx.state = GV_RP_RX_DEFERRED;
    pc->rx.eager = eager;
    pc->rx.resume = 0;
    pc->st.deferrals++;
    return 1;
}

/* The eager message in slot, checked: on_header, payload copied out, on_msg, slot reposted. */
static gv_status_t rx_eager_deliver(struct gv_rp_conn *pc, uint32_t slot, uint32_t msg_len,
                                    uint64_t payload)
{
    const char *data = gv_rpi_rslot(pc, slot) + GV_RP_CTRL_LEN;
    if (payload > 0) {
        struct gv_iov dst[GV_TP_MAX_DST_IOV];
        int cnt;
        gv_status_t status = rx_get_dst(pc, data, msg_len, payload, dst, &cnt);
        if (status == GV_ERR_AGAIN) {
            if (rx_defer(pc, 1)) { /* the slot stays ours: not reposted, its credit kept */
                pc->rx.slot = (int32_t)slot;
                pc->rx.msg_len = msg_len;
                pc->rx.payload_len = payload;
            }
            return GV_OK;
        }
        if (status != GV_OK || pc->dead || pc->draining)
            return status; /* refused, or on_header closed the connection */
        const char *src = data + msg_len;
        for (int i = 0; i < cnt && status == GV_OK; i++) {
            if (dst[i].base != NULL)
                status = gv_rpi_copy(pc, dst[i].base, src, dst[i].len, GV_RP_H2D);
            src += dst[i].len;
        }
        if (status != GV_OK)
            return status;
    }
    pc->uc->bytes_recv += msg_len + payload;
    pc->h->on_msg(pc->uc, data, msg_len, pc->user);
    pc->st.msgs_delivered++;
    return gv_rpi_repost(pc, slot, 1);
}

static gv_status_t rx_eager(struct gv_rp_conn *pc, uint32_t slot, const struct gv_rp_ctrl *h,
                            const char *data)
{
    uint32_t msg_len = h->msg_len;
    if (msg_len < pc->cfg.prefix_len || msg_len > pc->cfg.max_hdr_len || msg_len > h->len)
        return gv_rpi_err(pc, GV_ERR_PROTO, "eager message with header length %" PRIu32, msg_len);
    uint64_t payload = h->len - msg_len;
    gv_status_t status = rx_check_prefix(pc, data, msg_len, payload);
    if (status != GV_OK)
        return status;
    return rx_eager_deliver(pc, slot, msg_len, payload);
}

gv_status_t gv_rpi_rx_try_cts(struct gv_rp_conn *pc)
{
    struct gv_rp_rx *rx = &pc->rx;
    if (rx->state != GV_RP_RX_NEED_CTS || pc->dead)
        return GV_OK;
    /* The CTS goes into the peer's spare receive, free again once our last FIN came in. */
    if (!pc->reply_credit || pc->nfree == 0 || !gv_rpi_sq_space(pc))
        return GV_OK;
    int32_t slot = gv_rpi_slot_alloc(pc);
    char *p = gv_rpi_sslot(pc, (uint32_t)slot) + GV_RP_CTRL_LEN;
    for (int i = 0; i < rx->ndst; i++)
        gv_rp_elem_encode(&rx->elem[i], p + (size_t)i * GV_RP_ELEM_LEN);
    struct gv_rp_ctrl h = {.type = GV_RP_CTS,
                           .len = (uint32_t)rx->ndst * GV_RP_ELEM_LEN,
                           .id = rx->id,
                           .payload_len = rx->payload_len};
    gv_status_t status = gv_rpi_post_ctrl(pc, slot, &h, -1);
    if (status != GV_OK)
        return status;
    pc->reply_credit = 0;
    pc->st.cts++;
    rx->state = GV_RP_RX_WAIT_FIN;
    return GV_OK;
}

static const char *rx_msg(const struct gv_rp_conn *pc)
{
    if (pc->rx.slot >= 0)
        return gv_rpi_rslot(pc, (uint32_t)pc->rx.slot) + GV_RP_CTRL_LEN;
    return pc->rx.hdr;
}

/* Clears the receive rendezvous, handing back its registrations and held slot. */
void gv_rpi_rx_release(struct gv_rp_conn *pc)
{
    struct gv_rp_rx *rx = &pc->rx;
    for (int i = 0; i < GV_TP_MAX_DST_IOV; i++) {
        gv_rc_put(pc->rc, rx->ent[i]);
        rx->ent[i] = NULL;
    }
    rx->ndst = 0;
    rx->slot = -1;
    rx->state = GV_RP_RX_IDLE;
    rx->eager = rx->resume = 0;
}

/* The header of a rendezvous with a payload is complete and checked: on_header, register
 * every destination and ask for the payload with a CTS (or defer). */
static gv_status_t rx_request(struct gv_rp_conn *pc)
{
    struct gv_rp_rx *rx = &pc->rx;
    int cnt;
    gv_status_t status = rx_get_dst(pc, rx_msg(pc), rx->msg_len, rx->payload_len, rx->dst, &cnt);
    if (status == GV_ERR_AGAIN) {
        (void)rx_defer(pc, 0); /* the RTS stays in rx, no CTS */
        return GV_OK;
    }
    if (status != GV_OK || pc->dead || pc->draining)
        return status; /* refused, or on_header closed the connection */
    rx->ndst = cnt;
    for (int i = 0; i < cnt; i++) {
        struct gv_rp_elem *e = &rx->elem[i];
        *e = (struct gv_rp_elem){.flags = GV_RP_ELEM_SKIP, .len = rx->dst[i].len};
        if (rx->dst[i].base == NULL || rx->dst[i].len == 0)
            continue;
        status = gv_rc_get(pc->rc, rx->dst[i].base, rx->dst[i].len, &rx->ent[i]);
        if (status != GV_OK)
            return gv_rpi_err(pc, status, "cannot register a %zu-byte receive destination",
                              rx->dst[i].len);
        e->addr = (uint64_t)(uintptr_t)gv_rc_xlate(rx->ent[i], rx->dst[i].base);
        e->rkey = rx->ent[i]->mr.rkey;
        e->flags = 0;
    }
    rx->state = GV_RP_RX_NEED_CTS;
    return gv_rpi_rx_try_cts(pc);
}

/* The whole header is in: on_msg right away for a header-only message, else on_header,
 * register every destination and ask for the payload with a CTS. */
static gv_status_t rx_header_done(struct gv_rp_conn *pc)
{
    struct gv_rp_rx *rx = &pc->rx;
    const char *msg = rx_msg(pc);
    gv_status_t status = rx_check_prefix(pc, msg, rx->msg_len, rx->payload_len);
    if (status != GV_OK)
        return status;
    if (rx->payload_len == 0) {
        int32_t slot = rx->slot;
        rx->state = GV_RP_RX_IDLE;
        rx->slot = -1;
        pc->uc->bytes_recv += rx->msg_len;
        pc->h->on_msg(pc->uc, msg, rx->msg_len, pc->user);
        pc->st.msgs_delivered++;
        return slot >= 0 ? gv_rpi_repost(pc, (uint32_t)slot, 1) : GV_OK;
    }
    return rx_request(pc);
}

static gv_status_t rx_rts(struct gv_rp_conn *pc, uint32_t slot, const struct gv_rp_ctrl *h,
                          const char *data, int first)
{
    struct gv_rp_rx *rx = &pc->rx;
    if (first) {
        if (rx->state != GV_RP_RX_IDLE || h->msg_len < pc->cfg.prefix_len ||
            h->msg_len > pc->cfg.max_hdr_len || h->len == 0 || h->len > h->msg_len ||
            h->payload_len > pc->cfg.max_payload_len)
            return gv_rpi_err(pc, GV_ERR_PROTO, "bad RTS (header %" PRIu32 ", payload %" PRIu64 ")",
                              h->msg_len, h->payload_len);
        rx->id = (uint16_t)h->id;
        rx->msg_len = h->msg_len;
        rx->payload_len = h->payload_len;
        rx->got = 0;
        if (h->len == h->msg_len) { /* the header fits: keep it in its slot */
            rx->slot = (int32_t)slot;
            rx->got = h->len;
            return rx_header_done(pc);
        }
        if (rx->hdr == NULL && (rx->hdr = gv_malloc(pc->cfg.max_hdr_len)) == NULL)
            return GV_ERR_NOMEM;
        rx->state = GV_RP_RX_HDR;
    } else if (rx->state != GV_RP_RX_HDR || h->id != rx->id || h->len == 0 ||
               h->len > rx->msg_len - rx->got) {
        return gv_rpi_err(pc, GV_ERR_PROTO, "unexpected RTS fragment for %" PRIu32, h->id);
    }
    memcpy(rx->hdr + rx->got, data, h->len);
    rx->got += h->len;
    gv_status_t status = gv_rpi_repost(pc, slot, 1);
    if (status != GV_OK || rx->got < rx->msg_len)
        return status;
    return rx_header_done(pc);
}

/* The final write (or FIN) of the rendezvous being received: the payload is in place. */
static gv_status_t rx_fin(struct gv_rp_conn *pc, uint32_t id)
{
    struct gv_rp_rx *rx = &pc->rx;
    if (rx->state != GV_RP_RX_WAIT_FIN || id != rx->id)
        return gv_rpi_err(pc, GV_ERR_PROTO, "unexpected end of rendezvous %" PRIu32, id);
    pc->reply_credit = 1; /* the peer has consumed our CTS */
    for (int i = 0; i < rx->ndst; i++) {
        struct gv_rc_entry *e = rx->ent[i];
        if (e == NULL || e->mr.shadow == NULL)
            continue;
        gv_status_t status = pc->wire->copy(
            pc->wctx, rx->dst[i].base, gv_rc_xlate(e, rx->dst[i].base), rx->dst[i].len, GV_RP_H2D);
        if (status != GV_OK)
            return status;
    }
    /* Detach everything before the callback, which may close the connection. */
    struct gv_rc_entry *ent[GV_TP_MAX_DST_IOV];
    memcpy(ent, rx->ent, sizeof(ent));
    memset(rx->ent, 0, sizeof(rx->ent));
    int32_t slot = rx->slot;
    const char *msg = rx_msg(pc);
    rx->slot = -1;
    rx->ndst = 0;
    rx->state = GV_RP_RX_IDLE;
    pc->uc->bytes_recv += rx->msg_len + rx->payload_len;
    pc->h->on_msg(pc->uc, msg, rx->msg_len, pc->user);
    pc->st.msgs_delivered++;
    for (int i = 0; i < GV_TP_MAX_DST_IOV; i++)
        gv_rc_put(pc->rc, ent[i]);
    return slot >= 0 ? gv_rpi_repost(pc, (uint32_t)slot, 1) : GV_OK;
}

gv_status_t gv_rpi_rx_deliver(struct gv_rp_conn *pc)
{
    gv_status_t status = GV_OK;
    while (status == GV_OK && !pc->dead && !pc->draining && pc->h_head != pc->h_tail) {
        if (pc->rx.state == GV_RP_RX_NEED_CTS || pc->rx.state == GV_RP_RX_WAIT_FIN ||
            pc->rx.state == GV_RP_RX_DEFERRED)
            break; /* later messages wait for the rendezvous in progress or the deferred one */
        struct gv_rp_held e = pc->held[pc->h_head % pc->nrecv];
        pc->h_head++;
        const char *p = gv_rpi_rslot(pc, e.slot);
        struct gv_rp_ctrl h;
        gv_rp_ctrl_decode(p, &h);
        if (h.type == GV_RP_EAGER && pc->rx.state == GV_RP_RX_IDLE)
            status = rx_eager(pc, e.slot, &h, p + GV_RP_CTRL_LEN);
        else if (h.type == GV_RP_EAGER)
            status = gv_rpi_err(pc, GV_ERR_PROTO, "eager message inside a fragmented header");
        else
            status = rx_rts(pc, e.slot, &h, p + GV_RP_CTRL_LEN, h.type == GV_RP_RTS);
    }
    return status;
}

static gv_status_t rx_ctrl(struct gv_rp_conn *pc, uint32_t slot, uint32_t byte_len)
{
    const char *p = gv_rpi_rslot(pc, slot);
    struct gv_rp_ctrl h;
    if (byte_len < GV_RP_CTRL_LEN || byte_len > pc->cfg.slot_size)
        return gv_rpi_err(pc, GV_ERR_PROTO, "%" PRIu32 "-byte message", byte_len);
    gv_rp_ctrl_decode(p, &h);
    if (h.len != byte_len - GV_RP_CTRL_LEN)
        return gv_rpi_err(pc, GV_ERR_PROTO, "length %" PRIu32 " in a %" PRIu32 "-byte message",
                          h.len, byte_len);
    gv_status_t status = rx_add_credits(pc, h.credits);
    if (status != GV_OK)
        return status;
    switch (h.type) {
    case GV_RP_CREDIT: return gv_rpi_repost(pc, slot, 1);
    case GV_RP_CTS:
        /* It came into our spare receive, which is not a credit the peer holds. */
        status = gv_rpi_on_cts(pc, &h, p + GV_RP_CTRL_LEN);
        return status == GV_OK ? gv_rpi_repost(pc, slot, 0) : status;
    case GV_RP_FIN:
        status =
            h.len == 0 ? gv_rpi_repost(pc, slot, 1) : gv_rpi_err(pc, GV_ERR_PROTO, "FIN with data");
        return status == GV_OK ? rx_fin(pc, h.id) : status;
    case GV_RP_EAGER:
    case GV_RP_RTS:
    case GV_RP_RTS_CONT:
        if (pc->draining) /* closing: the user hears nothing more */
            return gv_rpi_repost(pc, slot, 1);
        pc->held[pc->h_tail % pc->nrecv] = (struct gv_rp_held){slot, byte_len};
        pc->h_tail++;
        uint32_t held = (uint32_t)(pc->h_tail - pc->h_head) + (pc->rx.slot >= 0);
        if (held > pc->st.max_held)
            pc->st.max_held = held;
        return GV_OK;
    default: return gv_rpi_err(pc, GV_ERR_PROTO, "unknown message type %u", h.type);
    }
}

gv_status_t gv_rp_on_recv(struct gv_rp_conn *pc, uint32_t slot, uint32_t byte_len, int has_imm,
                          uint32_t imm, uint64_t now_ns)
{
    if (pc->dead)
        return GV_OK;
    if (slot >= pc->nrecv)
        return gv_rpi_err(pc, GV_ERR_IO, "receive completion for unknown slot %" PRIu32, slot);
    pc->last_progress_ns = now_ns;
    gv_status_t status;
    if (has_imm) {
        status = rx_add_credits(pc, imm >> 16);
        if (status == GV_OK)
            status = gv_rpi_repost(pc, slot, 1);
        if (status == GV_OK)
            status = rx_fin(pc, imm & 0xffffu);
    } else {
        status = rx_ctrl(pc, slot, byte_len);
    }
    if (status == GV_OK)
        status = gv_rpi_rx_deliver(pc);
    if (status == GV_OK)
        status = gv_rp_pump(pc);
    return status;
}

/* ---------------------------------------------------------------- deferred receive */

gv_status_t gv_rp_resume_recv(struct gv_rp_conn *pc)
{
    if (pc->dead || pc->draining)
        return GV_ERR_CLOSED;
    if (pc->rx.state == GV_RP_RX_DEFERRED)
        pc->rx.resume = 1;
    return GV_OK;
}

int gv_rp_resume_pending(const struct gv_rp_conn *pc)
{
    return pc->rx.state == GV_RP_RX_DEFERRED && pc->rx.resume && !pc->dead && !pc->draining;
}

int gv_rp_deferred(const struct gv_rp_conn *pc)
{
    return pc->rx.state == GV_RP_RX_DEFERRED && !pc->dead;
}

gv_status_t gv_rp_run_resumed(struct gv_rp_conn *pc, uint64_t now_ns)
{
    if (!gv_rp_resume_pending(pc))
        return GV_OK;
    struct gv_rp_rx *rx = &pc->rx;
    rx->resume = 0;
    /* The wait was ours, not the peer's: the io timeout counts from now. */
    pc->last_progress_ns = now_ns;
    gv_status_t status;
    if (rx->eager) {
        uint32_t slot = (uint32_t)rx->slot;
        rx->state = GV_RP_RX_IDLE;
        rx->slot = -1;
        rx->eager = 0;
        status = rx_eager_deliver(pc, slot, rx->msg_len, rx->payload_len);
    } else {
        rx->state = GV_RP_RX_HDR; /* complete; rx_request moves it on */
        status = rx_request(pc);
    }
    if (status == GV_OK)
        status = gv_rpi_rx_deliver(pc);
    if (status == GV_OK)
        status = gv_rp_pump(pc);
    return status;
}
