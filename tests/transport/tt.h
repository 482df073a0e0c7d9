/* tt.h: helpers for the transport tests: a tiny framing of their own (16-byte prefix + 16-byte
 * header; the transport never depends on proto/), a "side" that owns one transport and records
 * what it saw, payload patterns checked byte for byte, and bounded progress loops. */
#ifndef GV_TT_H
#define GV_TT_H

#include "gv_transport.h"

#include <stdint.h>

#define TT_MAGIC 0x54544756u /* "VGTT" */
#define TT_PREFIX_LEN 16
#define TT_HDR_LEN 32 /* prefix + header */
#define TT_MAX_CONNS 16

/* Wire layout (host byte order; tests run on one host). */
struct tt_prefix {
    uint32_t magic;
    uint32_t hdr_len; /* bytes after the prefix */
    uint64_t payload_len;
};
struct tt_hdr {
    uint64_t seq;
    uint32_t kind; /* test-defined */
    uint32_t pad;
};

/* What a side knows about one of its connections. */
struct tt_conn_rec {
    struct gv_conn *c; /* NULL once closed */
    uint64_t id;
    uint64_t next_seq;  /* next seq expected on receive (messages are delivered in order) */
    uint64_t msgs;      /* messages received */
    int closes;         /* on_close calls (must end at exactly 1) */
    gv_status_t reason; /* on_close's reason */
    uint64_t closed_ns; /* when on_close fired */
    uint8_t *rx;        /* payload destination, side->rx_cap bytes */
};

struct tt_side;
typedef void (*tt_hook)(struct tt_side *s, struct tt_conn_rec *r, struct gv_conn *c,
                        const struct tt_hdr *h, uint64_t payload_len);

struct tt_side {
    struct gv_tp *tp;
    struct gv_listener *l;
    uint16_t port;
    size_t rx_cap;    /* per-conn payload buffer (set before connections arrive) */
    int rx_segs;      /* split each payload destination into this many pieces (1..8) */
    int discard_from; /* destination pieces from this index on are discarded; >= rx_segs: none */
    int verify;       /* check each payload's pattern */
    int seq_check;    /* check per-conn seq order */
    tt_hook hook;     /* called after each message (may send, may close c) */
    void *hook_arg;
    uint64_t msgs, payload_bytes, bad_payload, bad_order;
    int accepts;
    struct tt_conn_rec conns[TT_MAX_CONNS];
    int n_conns;
};

/* One message to send: owns the prefix+header bytes; valid until done. */
struct tt_msg {
    uint8_t head[TT_HDR_LEN];
    struct gv_iov iov[GV_TP_MAX_SEND_IOV];
    int iovcnt;
    int done;           /* completion seen (GV_OK return or callback) */
    int cbs;            /* callbacks received (must be <= 1) */
    gv_status_t ret;    /* what gv_tp_send returned */
    gv_status_t status; /* the send's final status */
};

/* The handler every test uses; user must be the struct tt_side. */
struct gv_tp_handler tt_handler(void);

/* Creates the side's transport (backend name, cfg may be NULL) and, if listen_host is not
 * NULL (use "" for the dual-stack any address), listens on an ephemeral port. Returns the
 * create/listen status (GV_ERR_UNSUPPORTED / GV_ERR_NODEV for an absent backend). */
gv_status_t tt_side_init(struct tt_side *s, const char *backend, const struct gv_tp_config *cfg,
                         const char *listen_host);
void tt_side_cleanup(struct tt_side *s);

/* Registers a connection the side opened itself (accepted ones are registered by on_accept). */
struct tt_conn_rec *tt_track(struct tt_side *s, struct gv_conn *c);
struct tt_conn_rec *tt_rec(struct tt_side *s, const struct gv_conn *c);
int tt_open_conns(const struct tt_side *s);

/* Payload pattern: byte i of the message with sequence seq. */
static inline uint8_t tt_pattern(uint64_t seq, size_t i)
{
    return (uint8_t)((uint8_t)(seq * 167u + 11u) ^ (uint8_t)(i * 31u + (i >> 8)));
}
void tt_fill(uint8_t *buf, size_t len, uint64_t seq);
/* Returns the first offset that does not match, or -1. */
long long tt_check(const uint8_t *buf, size_t len, uint64_t seq);

/* Sends seq with payload split into nseg pieces (0: no payload). m must stay valid until
 * m->done. Returns gv_tp_send's status. */
gv_status_t tt_send(struct gv_conn *c, struct tt_msg *m, uint64_t seq, uint32_t kind,
                    const uint8_t *payload, size_t len, int nseg);

/* Progress every side (NULL-terminated list) until pred(arg) holds or timeout_ms passed.
 * Returns 1 when pred held. */
int tt_run(struct tt_side **sides, int (*pred)(void *arg), void *arg, int timeout_ms);

/* Milliseconds since t0 (gv_now_ns). */
double tt_ms_since(uint64_t t0);

#endif /* GV_TT_H */
