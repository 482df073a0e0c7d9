/* test_rdma_fake.h: what the RDMA protocol tests share (test_rdma_proto.c, test_rdma_defer.c):
 * two protocol instances joined by an in-memory fake wire that behaves like a pair of RC
 * queue pairs:
 *  - a SEND lands in the oldest posted receive; none posted is a receive overrun (a failure);
 *  - non-inline SENDs and RDMA WRITEs read their source when they execute, so a slot or buffer
 *    reused too early shows up as corrupt data at the receiver;
 *  - WRITE_WITH_IMM consumes a receive; WRITE checks lkey/rkey and bounds like an HCA;
 *  - send-queue space comes back only through reported signaled completions, and posting more
 *    than sq_depth WRs is an overflow (a failure);
 *  - a seeded RNG interleaves executions and completion reports in both directions;
 * and on each side a sending and a receiving application that check order and content. */
#ifndef GV_TEST_RDMA_FAKE_H
#define GV_TEST_RDMA_FAKE_H

#include "check.h"
#include "rdma_proto.h"

#include <stdlib.h>
#include <string.h>

#define SLOT 1024
#define PFX 12 /* test framing: u32 hdr_len | u64 payload_len */
#define MAXHDR 8192
#define MAXPAY (1u << 20)
#define NSRC 48
#define OPQ 8192
#define RBUF (4u << 20)

/* ---------------------------------------------------------------- fake registrations */

struct reg {
    int live;
    uintptr_t start;
    size_t len;
    uint32_t key;
    char *shadow;
};

struct env;

enum { OP_SEND, OP_WRITE };
struct op {
    int kind;
    unsigned flags;
    uint32_t rec;
    uint32_t len;
    uint64_t seq;    /* WR number at the sender */
    const char *src; /* read when the op executes (unless inline) */
    uint32_t lkey;
    char inl[256];
    uint64_t raddr;
    uint32_t rkey;
    int with_imm;
    uint32_t imm;
};

struct src {
    int busy;
    struct side *s;
    char hdr[MAXHDR];
    char *pay;
    uint64_t seq;
};

enum pol { POL_SINGLE, POL_SPLIT, POL_DISCARD_MID, POL_DISCARD_ALL, POL_DEVICE };

struct side {
    const char *name;
    struct env *env;
    struct side *peer;
    struct gv_rp_conn pc;
    struct gv_conn uc;
    struct gv_tp_handler h;
    struct gv_rcache rc;
    char *slots;
    uint32_t slot_key;
    /* the queue pair */
    uint32_t rq[4096];
    uint64_t rq_head, rq_tail;
    struct op *ops;
    uint64_t op_head, op_tail;
    uint32_t cq[OPQ];
    uint64_t cq_head, cq_tail;
    uint64_t posted, done;
    /* failures the wire detects */
    int overruns, sq_overflows, bad_keys, bad_posts;
    gv_status_t err; /* first non-OK status from the protocol */
    /* the receiving application */
    enum pol pol;
    char *rbuf; /* destinations for on_header */
    char *dev;  /* "device" buffer registered as GV_MEM_DEVICE (POL_DEVICE) */
    struct gv_iov cur[GV_TP_MAX_DST_IOV];
    int ncur;
    uint64_t expect_seq, delivered, bad_order, bad_content, headers;
    int close_at_seq;        /* on_msg fails the conn when it sees this seq (-1: never) */
    int64_t close_in_header; /* on_header of this seq closes the conn first (-1: never) */
    /* deferring (on_header answers GV_ERR_AGAIN) */
    int defer;           /* while set, every message from seq defer_from on is deferred */
    uint64_t defer_from; /* 0: from the first one */
    int defer_rounds;    /* > 0: message seq is deferred seq % defer_rounds times first */
    int64_t again_seq;   /* seq of the last deferred header (-1: none pending) */
    int again_left;      /* defer_rounds: deferrals left for again_seq */
    uint64_t agains;     /* GV_ERR_AGAIN answers */
    uint64_t bad_resume; /* on_header after a deferral saw another message */
    int resume_in_cb;    /* a send callback resumes this side's receive (and clears defer) */
    gv_status_t resume_cb_status;
    uint64_t resume_cb_headers; /* headers seen inside that resume call (must stay 0) */
    /* the sending application */
    struct src src[NSRC];
    uint64_t next_seq;
    int cb_ok, cb_err, inprog;
    gv_status_t last_cb_status;
    uint64_t copies;
};

struct env {
    struct side a, b;
    struct reg regs[512];
    uint32_t next_key;
    uint64_t rng;
    uint64_t now;
    int staged; /* device registrations get a shadow (staging) */
    int fail_reg;
    struct gv_rp_cfg cfg;
};

/* Payload and header pattern: byte i of message seq. */
static inline uint8_t pat(uint64_t seq, uint64_t i)
{
    return (uint8_t)(seq * 131u + i * 7u + (i >> 8));
}

extern const struct gv_rc_ops fake_rc_ops;
uint64_t rnd(struct env *e);
int live_regs(struct env *e);

/* The wire: exec_op executes the oldest op s posted (at the peer), report_cq reports the
 * oldest signaled completion of s; step does one random one of those (after running what a
 * progress() call would: deferred receives that were resumed) and returns 0 when nothing was
 * in flight; run_quiet steps until then (0 when it took more than max_steps). */
void exec_op(struct side *s);
void report_cq(struct side *s);
int step(struct env *e);
int run_quiet(struct env *e, long max_steps);

/* Sends message seq (s->next_seq) with a hdr_len-byte header and payload_len bytes in niov
 * pieces. Returns the send status; GV_ERR_AGAIN also when no application buffer is free. */
gv_status_t app_send(struct side *s, uint32_t hdr_len, uint32_t payload_len, int niov);
uint64_t msg_seq(const void *msg);

struct gv_rp_cfg default_cfg(void);
gv_status_t env_setup(struct env *e, const struct gv_rp_cfg *cfg, uint64_t seed);
void env_free(struct env *e);
void dump(const struct side *s);

/* Sends `count` messages from s with sizes from size_of(i), driving the wire whenever the
 * send side pushes back, then runs the wire dry. 0 (with the reason on stderr) on failure. */
typedef void (*size_fn)(struct env *e, uint64_t i, uint32_t *hdr, uint32_t *pay, int *niov);
int pump_sends(struct env *e, struct side *s, uint64_t count, size_fn size_of);
void sz_small(struct env *e, uint64_t i, uint32_t *hdr, uint32_t *pay, int *niov);
void sz_mixed(struct env *e, uint64_t i, uint32_t *hdr, uint32_t *pay, int *niov);
void sz_large(struct env *e, uint64_t i, uint32_t *hdr, uint32_t *pay, int *niov);
void sz_fixed(struct env *e, uint64_t i, uint32_t *hdr, uint32_t *pay, int *niov);
void sz_bighdr(struct env *e, uint64_t i, uint32_t *hdr, uint32_t *pay, int *niov);

/* The checks are inline so that they count in the calling test's tally. */
static inline void env_init(struct env *e, const struct gv_rp_cfg *cfg, uint64_t seed)
{
    GV_CHECK_OK(env_setup(e, cfg, seed));
}

/* The wire's own verdict: nothing overran, overflowed or used a bad key, no errors. */
static inline void check_wire_clean(struct env *e)
{
    struct side *s[2] = {&e->a, &e->b};
    for (int i = 0; i < 2; i++) {
        GV_CHECK_EQ(s[i]->overruns, 0);
        GV_CHECK_EQ(s[i]->sq_overflows, 0);
        GV_CHECK_EQ(s[i]->bad_keys, 0);
        GV_CHECK_EQ(s[i]->bad_posts, 0);
        GV_CHECK_EQ(s[i]->bad_order, 0);
        GV_CHECK_EQ(s[i]->bad_content, 0);
        GV_CHECK_STATUS(s[i]->err, GV_OK);
        GV_CHECK(s[i]->pc.credits <= e->cfg.rx_depth);
    }
}

/* At rest, every credit is either held by the sender or owed by the receiver. */
static inline void check_credits_conserved(struct env *e)
{
    GV_CHECK_EQ(e->a.pc.credits + e->b.pc.owed, e->cfg.rx_depth);
    GV_CHECK_EQ(e->b.pc.credits + e->a.pc.owed, e->cfg.rx_depth);
    GV_CHECK_EQ(e->a.pc.reply_credit, 1);
    GV_CHECK_EQ(e->b.pc.reply_credit, 1);
    GV_CHECK_EQ(e->a.rq_tail - e->a.rq_head, e->cfg.rx_depth + 1);
    GV_CHECK_EQ(e->b.rq_tail - e->b.rq_head, e->cfg.rx_depth + 1);
}

#endif /* GV_TEST_RDMA_FAKE_H */
