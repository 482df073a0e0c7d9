/* rdma_proto.h (private): the device-free protocol of the RDMA transport, one instance per
 * connection. It decides what to post and when (credits, send slots, selective signalling,
 * eager vs rendezvous) and what a completion means; the verbs calls sit behind
 * struct gv_rp_wire_ops, so the whole protocol is unit-tested over an in-memory wire.
 * It does not own the connection's lifetime, the QP or the CQ (rdma.c and rdma_cm.c do).
 *
 * Every message of the transport interface (prefix | header | payload, iov[0] = prefix+header)
 * travels one of two ways:
 *   eager       total + GV_RP_CTRL_LEN <= slot_size: one SEND carrying ctrl | msg | payload,
 *               copied into a pre-registered send slot (IBV_SEND_INLINE when it fits the
 *               QP's max_inline); the receiver copies the payload out to the destination its
 *               on_header gives.
 *   rendezvous  otherwise: RTS (ctrl | first part of msg; RTS_CONT fragments for a header
 *               longer than a slot) -> the receiver, when the RTS is the oldest undelivered
 *               message, calls on_header, registers each destination element through the
 *               registration cache and replies CTS {addr, rkey, len, skip} per element ->
 *               the sender RDMA WRITEs the payload straight into them and ends with
 *               WRITE_WITH_IMM (imm = id | credits), or a FIN send when every element is a
 *               discard destination -> the receiver fires on_msg.
 * Flow control: each side posts rx_depth + 1 receives. The peer may consume rx_depth of them
 * (its credits); the spare one takes the CTS replying to its own RTS, so a CTS never waits for
 * credits (at most one CTS per direction is outstanding, since the receiver handles RTSs one
 * at a time in order). Credits come back piggybacked on every SEND and in the imm of the final
 * write, or by an explicit CREDIT message when the owed count reaches half the window. The last
 * credit is kept for CREDIT messages, and an RTS prepays the credit its final write consumes,
 * so no side can deadlock with both windows exhausted. Order: on_header and on_msg fire in
 * send order; messages arriving behind an unfinished rendezvous stay in their receive slot
 * (not yet returned as credit) until it completes.
 * Deferred receive (GV_TP_CAP_DEFER_RECV): when on_header answers GV_ERR_AGAIN the message
 * stays where it is, as the header of a rendezvous (no CTS is sent) or in its eager receive
 * slot (not reposted, so its credit is not returned); later messages wait behind it like
 * behind a rendezvous, so the sender runs out of credits and is held by flow control.
 * gv_rp_resume_recv marks it, and gv_rp_run_resumed (from progress) asks on_header again. */
#ifndef GV_RDMA_PROTO_H
#define GV_RDMA_PROTO_H

#include "gv_transport.h"
#include "rdma_regcache.h"

#include <stdint.h>

#define GV_RP_VERSION 1
#define GV_RP_MAGIC 0x44525647u /* "GVRD" little-endian */
#define GV_RP_CTRL_LEN 24u      /* control header at the start of every SEND */
#define GV_RP_ELEM_LEN 24u      /* one CTS element */
#define GV_RP_PARAMS_LEN 16u    /* rdma_cm private data (fits the 56 bytes of an IB CM REQ) */
#define GV_RP_CTRL_SLOTS 3u     /* send slots kept free for CTS / FIN / CREDIT */
#define GV_RP_MAX_DEPTH 32767u  /* credits travel in 15..16-bit fields */

enum gv_rp_type {
    GV_RP_EAGER = 1,    /* msg + payload; msg_len = prefix+header bytes */
    GV_RP_RTS = 2,      /* first fragment of a rendezvous msg; payload_len, id */
    GV_RP_RTS_CONT = 3, /* further header bytes of RTS id */
    GV_RP_CTS = 4,      /* destination elements for RTS id */
    GV_RP_FIN = 5,      /* rendezvous id done, no bytes written (all discard) */
    GV_RP_CREDIT = 6,   /* credits only (also the keepalive probe) */
};

/* Control header, little-endian on the wire:
 * type u8 | flags u8 | credits u16 | len u32 | msg_len u32 | id u32 | payload_len u64 */
struct gv_rp_ctrl {
    uint8_t type;
    uint8_t flags;
    uint16_t credits;     /* receives the sender has reposted since its last report */
    uint32_t len;         /* data bytes after the header in this SEND */
    uint32_t msg_len;     /* EAGER, RTS: prefix+header bytes of the message */
    uint32_t id;          /* RTS, RTS_CONT, CTS, FIN: rendezvous id (16 bits used) */
    uint64_t payload_len; /* RTS, CTS: payload bytes */
};
void gv_rp_ctrl_encode(const struct gv_rp_ctrl *h, void *buf);
void gv_rp_ctrl_decode(const void *buf, struct gv_rp_ctrl *h);

/* CTS element: addr u64 | rkey u32 | flags u32 | len u64 */
#define GV_RP_ELEM_SKIP 1u /* discard destination: the sender skips these bytes */
struct gv_rp_elem {
    uint64_t addr;
    uint32_t rkey;
    uint32_t flags;
    uint64_t len;
};
void gv_rp_elem_encode(const struct gv_rp_elem *e, void *buf);
void gv_rp_elem_decode(const void *buf, struct gv_rp_elem *e);

/* imm of the final RDMA WRITE: id in the low 16 bits, credits in the high 16. */
static inline uint32_t gv_rp_imm(uint16_t id, uint16_t credits)
{
    return (uint32_t)id | ((uint32_t)credits << 16);
}

/* What each side announces in the rdma_cm private data (connect and accept). */
struct gv_rp_params {
    uint16_t version;
    uint16_t rx_depth;  /* credits the peer gets (we post rx_depth + 1 receives) */
    uint32_t slot_size; /* largest SEND we can receive */
};
void gv_rp_params_encode(const struct gv_rp_params *p, void *buf);
/* GV_ERR_PROTO: too short, bad magic or values out of range; GV_ERR_VERSION: other version. */
gv_status_t gv_rp_params_decode(const void *buf, size_t len, struct gv_rp_params *p);

/* Per-connection protocol configuration (rdma.c fills it from gv_tp_config and GV_RDMA_*). */
struct gv_rp_cfg {
    uint32_t slot_size;     /* bytes per send/receive slot, >= 256 */
    uint32_t rx_depth;      /* receive credits we grant (rx_depth + 1 posted), 4..32767 */
    uint32_t tx_slots;      /* send bounce slots, > GV_RP_CTRL_SLOTS + 1 */
    uint32_t sq_depth;      /* send-queue WRs the QP holds, >= 8 */
    uint32_t signal_every;  /* request a completion every Nth WR, >= 1 */
    uint32_t max_inline;    /* the QP's max_inline_data (0: never inline) */
    uint32_t max_write_len; /* largest single RDMA WRITE */
    uint32_t prefix_len;    /* from the handler */
    uint32_t max_hdr_len;
    uint64_t max_payload_len;
    uint32_t max_send_queue;
    uint64_t max_send_queue_bytes;
    uint64_t io_timeout_ns;
};
gv_status_t gv_rp_cfg_check(const struct gv_rp_cfg *cfg);
/* Bytes of registered slot memory one connection needs. */
static inline uint64_t gv_rp_slot_bytes(const struct gv_rp_cfg *cfg)
{
    return (uint64_t)(cfg->rx_depth + 1 + cfg->tx_slots) * cfg->slot_size;
}

/* One RDMA WRITE to post. */
struct gv_rp_write {
    void *laddr;
    uint32_t lkey;
    uint32_t len;
    uint64_t raddr;
    uint32_t rkey;
    int with_imm;
    uint32_t imm; /* host order; the wire converts */
};

#define GV_RP_F_SIGNALED 1u
#define GV_RP_F_INLINE 2u
enum gv_rp_copy_dir { GV_RP_D2H, GV_RP_H2D };

/* The verbs side (or a test's fake wire). rec is the send record to report back with
 * gv_rp_on_send_done when a signaled WR completes; slot the receive slot for gv_rp_on_recv.
 * A post error is fatal for the connection. copy moves bytes to or from device memory. */
struct gv_rp_wire_ops {
    gv_status_t (*post_send)(void *wctx, void *addr, uint32_t len, uint32_t lkey, unsigned flags,
                             uint32_t rec);
    gv_status_t (*post_write)(void *wctx, const struct gv_rp_write *w, unsigned flags,
                              uint32_t rec);
    gv_status_t (*post_recv)(void *wctx, void *addr, uint32_t len, uint32_t lkey, uint32_t slot);
    gv_status_t (*copy)(void *wctx, void *dst, const void *src, size_t len,
                        enum gv_rp_copy_dir dir);
};

/* ---- internal state (visible for tests) ---- */

enum gv_rp_smsg_state {
    GV_RP_S_FREE = 0,
    GV_RP_S_EAGER,     /* copied into a send slot (send returned GV_OK); waits to be posted */
    GV_RP_S_EAGER_REF, /* by reference (GV_INPROGRESS); waits for a send slot, then copied */
    GV_RP_S_RTS,       /* rendezvous: header fragments being posted */
    GV_RP_S_WAIT_CTS,  /* every fragment posted; waiting for the receiver's CTS */
    GV_RP_S_WRITING,   /* CTS in: RDMA WRITEs being posted from the cursor */
    GV_RP_S_WAIT_DONE, /* final WRITE_WITH_IMM / FIN posted; cb fires at its completion */
    GV_RP_S_DONE,      /* retired; the ring head moves past it */
};

struct gv_rp_smsg {
    uint8_t state;
    uint16_t id;
    int32_t slot;     /* send slot with the eager copy, or -1 */
    uint32_t msg_len; /* iov[0].len */
    uint64_t payload_len;
    uint64_t bytes; /* msg_len + payload_len (the queue byte cap) */
    int iovcnt;
    struct gv_iov iov[GV_TP_MAX_SEND_IOV];       /* caller's buffers (by ref / rendezvous) */
    struct gv_rc_entry *src[GV_TP_MAX_SEND_IOV]; /* rendezvous: registration per payload iov */
    uint32_t frag_off;                           /* RTS: header bytes posted so far */
    int ndst;
    struct gv_rp_elem dst[GV_TP_MAX_DST_IOV]; /* from the CTS */
    int src_i, dst_i;                         /* write cursor */
    uint64_t src_off, dst_off;
    uint64_t left; /* non-skip bytes still to write */
    gv_tp_send_cb cb;
    void *arg;
};

struct gv_rp_wr { /* one posted send-queue WR */
    int32_t slot; /* send slot to free when it completes, or -1 */
    int32_t msg;  /* message to complete (final write / FIN), or -1 */
    uint8_t signaled;
};

struct gv_rp_held { /* a received SEND waiting for in-order delivery */
    uint32_t slot;
    uint32_t len;
};

enum gv_rp_rx_state {
    GV_RP_RX_IDLE = 0,
    GV_RP_RX_HDR,      /* RTS header fragments being reassembled */
    GV_RP_RX_NEED_CTS, /* on_header done; CTS not yet posted */
    GV_RP_RX_WAIT_FIN, /* CTS posted; waiting for the final write / FIN */
    GV_RP_RX_DEFERRED, /* on_header answered GV_ERR_AGAIN: waits for gv_rp_resume_recv */
};

struct gv_rp_rx {
    int state;
    int eager;  /* DEFERRED: the message is an eager one (its payload is in slot) */
    int resume; /* DEFERRED: gv_rp_resume_recv was called; run at the next gv_rp_run_resumed */
    uint16_t id;
    uint32_t msg_len, got;
    uint64_t payload_len;
    int32_t slot; /* single-fragment RTS or deferred eager message: its held slot, else -1 */
    char *hdr;    /* reassembly buffer (max_hdr_len bytes, allocated on first use) */
    int ndst;
    struct gv_iov dst[GV_TP_MAX_DST_IOV];
    struct gv_rc_entry *ent[GV_TP_MAX_DST_IOV];
    struct gv_rp_elem elem[GV_TP_MAX_DST_IOV];
};

struct gv_rp_stats {
    uint64_t eager, rendezvous, inline_sends, signaled, wrs, writes, credit_msgs, cts, fins;
    uint64_t msgs_delivered, bytes_written;
    uint64_t deferrals;   /* on_header answers of GV_ERR_AGAIN */
    uint32_t min_credits; /* lowest credit count seen after a post */
    uint32_t max_held;    /* most receive slots held for in-order delivery */
};

struct gv_rp_conn {
    struct gv_rp_cfg cfg;
    struct gv_rp_params peer;
    char *slots; /* [nrecv receive slots][tx_slots send slots], slot_size each */
    uint32_t lkey;
    uint32_t nrecv; /* rx_depth + 1 */
    const struct gv_rp_wire_ops *wire;
    void *wctx;
    struct gv_rcache *rc;
    struct gv_conn *uc; /* the transport-level connection handed to callbacks */
    const struct gv_tp_handler *h;
    void *user;

    uint32_t credits;      /* peer receives we may consume */
    uint32_t owed;         /* receives reposted and not yet reported to the peer */
    uint32_t reply_credit; /* 1 while the peer's spare receive (for our CTS) is free */
    uint32_t credit_thresh;

    int32_t *free_slots; /* stack of free send slots */
    uint32_t nfree;
    uint32_t send_max; /* largest SEND we may post: min(ours, peer's slot_size) */
    /* Rings index with 64-bit counters (never wrap): entry = counter % capacity. */
    struct gv_rp_wr *wr; /* sq_depth records; [wr_tail, wr_head) posted, not known done */
    uint64_t wr_head, wr_tail;
    uint32_t since_signal;           /* unsignaled WRs posted since the last signaled one */
    struct gv_rp_smsg *msgs;         /* max_send_queue entries */
    uint64_t m_head, m_tail, m_post; /* [head, tail) live; m_post: first not fully posted */
    uint64_t q_bytes;
    uint16_t next_id;
    struct gv_rp_held *held; /* nrecv entries; [h_head, h_tail) waiting for delivery */
    uint64_t h_head, h_tail;
    struct gv_rp_rx rx;

    int dead;          /* failed or closed: nothing more is posted or delivered */
    gv_status_t fatal; /* first post error seen inside gv_rp_send (the caller closes) */
    int draining;      /* closing gracefully: posts what is queued, delivers nothing */
    int in_pump, pump_again, in_send;
    uint64_t last_progress_ns;
    struct gv_rp_stats st;
};

/* Sets up pc over slots (gv_rp_slot_bytes(cfg) bytes registered under lkey). Nothing is
 * posted yet. peer comes from the peer's private data. uc, h, user are borrowed. */
gv_status_t gv_rp_init(struct gv_rp_conn *pc, const struct gv_rp_cfg *cfg,
                       const struct gv_rp_params *peer, void *slots, uint32_t lkey,
                       struct gv_rcache *rc, const struct gv_rp_wire_ops *wire, void *wctx,
                       struct gv_conn *uc, const struct gv_tp_handler *h, void *user);
/* Replaces the peer's parameters (the active side learns them only when the connection is
 * established, after its receives are posted). GV_ERR_INVAL once anything was sent. */
gv_status_t gv_rp_set_peer(struct gv_rp_conn *pc, const struct gv_rp_params *peer);
/* Releases what pc holds (registrations in use, buffers). Call gv_rp_fail first if live. */
void gv_rp_cleanup(struct gv_rp_conn *pc);

/* Posts every receive slot; call before the connection is accepted / connected. */
gv_status_t gv_rp_post_recvs(struct gv_rp_conn *pc);

/* The send contract of gv_tp_send (see gv_transport.h). */
gv_status_t gv_rp_send(struct gv_rp_conn *pc, const struct gv_iov *iov, int iovcnt,
                       gv_tp_send_cb cb, void *arg, uint64_t now_ns);

/* A receive completed in slot: byte_len bytes (a SEND), or a WRITE_WITH_IMM when has_imm.
 * Delivers what can be delivered in order and posts what became possible. Non-OK: the
 * connection must be closed with that status (GV_ERR_PROTO for bad peer data). */
gv_status_t gv_rp_on_recv(struct gv_rp_conn *pc, uint32_t slot, uint32_t byte_len, int has_imm,
                          uint32_t imm, uint64_t now_ns);
/* A signaled send WR completed successfully: retires every record up to rec. */
gv_status_t gv_rp_on_send_done(struct gv_rp_conn *pc, uint32_t rec, uint64_t now_ns);

/* Posts whatever credits, slots and send-queue space allow. */
gv_status_t gv_rp_pump(struct gv_rp_conn *pc);

/* GV_ERR_TIMEOUT when the connection has work pending (queued or unfinished sends, a
 * rendezvous being received) and nothing completed for cfg.io_timeout_ns. A message deferred
 * by on_header is not pending work: it waits on us, not on the peer. */
gv_status_t gv_rp_check_timeout(const struct gv_rp_conn *pc, uint64_t now_ns);
/* Sends a CREDIT message (keepalive probe) when a slot and a credit are free. It takes the
 * last credit only when it carries credits back: two probes crossing with nothing to return
 * could otherwise leave both sides at zero credits for good, once receives are held by a
 * deferred message. */
gv_status_t gv_rp_send_probe(struct gv_rp_conn *pc);

/* Deferred receive. gv_rp_resume_recv asks for the deferred message's on_header to run again;
 * it calls nothing itself (GV_OK also when nothing is deferred; GV_ERR_CLOSED when pc is
 * failed or closing). gv_rp_resume_pending says whether gv_rp_run_resumed has work; that one
 * (called from progress) re-runs on_header, delivers what follows in order and posts what
 * became possible; non-OK: close the connection with that status. gv_rp_deferred: 1 while a
 * message is deferred. */
gv_status_t gv_rp_resume_recv(struct gv_rp_conn *pc);
int gv_rp_resume_pending(const struct gv_rp_conn *pc);
gv_status_t gv_rp_run_resumed(struct gv_rp_conn *pc, uint64_t now_ns);
int gv_rp_deferred(const struct gv_rp_conn *pc);

/* Fails pc: every send whose cb is pending gets cb(status); nothing more is delivered. */
void gv_rp_fail(struct gv_rp_conn *pc, gv_status_t status);
/* Local graceful close: fails the sends still waiting for their cb (GV_ERR_CLOSED) and keeps
 * posting the eager ones already accepted with GV_OK. Returns 1 when that is worth waiting
 * for (then poll gv_rp_drained), 0 when the QP may be torn down now. */
int gv_rp_close_begin(struct gv_rp_conn *pc);
/* 1 when a draining connection has nothing left queued and every WR has completed. */
int gv_rp_drained(const struct gv_rp_conn *pc);

/* ---- shared by rdma_proto.c and rdma_proto_rx.c only ---- */
char *gv_rpi_rslot(const struct gv_rp_conn *pc, uint32_t slot);
char *gv_rpi_sslot(const struct gv_rp_conn *pc, uint32_t slot);
int32_t gv_rpi_slot_alloc(struct gv_rp_conn *pc);
int gv_rpi_sq_space(const struct gv_rp_conn *pc);
gv_status_t gv_rpi_post_ctrl(struct gv_rp_conn *pc, int32_t slot, struct gv_rp_ctrl *h,
                             int32_t msg);
gv_status_t gv_rpi_repost(struct gv_rp_conn *pc, uint32_t slot, int owed);
gv_status_t gv_rpi_err(const struct gv_rp_conn *pc, gv_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
gv_status_t gv_rpi_copy(struct gv_rp_conn *pc, void *dst, const void *src, size_t len,
                        enum gv_rp_copy_dir dir);
gv_status_t gv_rpi_on_cts(struct gv_rp_conn *pc, const struct gv_rp_ctrl *h, const char *data);
gv_status_t gv_rpi_rx_deliver(struct gv_rp_conn *pc);
gv_status_t gv_rpi_rx_try_cts(struct gv_rp_conn *pc);
void gv_rpi_rx_release(struct gv_rp_conn *pc);

#endif /* GV_RDMA_PROTO_H */
