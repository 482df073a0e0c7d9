/* test_rdma_proto.c: the RDMA protocol (credits, send slots, signalling, eager/rendezvous,
 * in-order delivery, timeouts) and the registration cache, without a device. Two protocol
 * instances are joined by an in-memory fake wire that behaves like a pair of RC queue pairs:
 *  - a SEND lands in the oldest posted receive; none posted is a receive overrun (a failure);
 *  - non-inline SENDs and RDMA WRITEs read their source when they execute, so a slot or buffer
 *    reused too early shows up as corrupt data at the receiver;
 *  - WRITE_WITH_IMM consumes a receive; WRITE checks lkey/rkey and bounds like an HCA;
 *  - send-queue space comes back only through reported signaled completions, and posting more
 *    than sq_depth WRs is an overflow (a failure);
 *  - a seeded RNG interleaves executions and completion reports in both directions. */
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
    int close_at_seq; /* on_msg fails the conn when it sees this seq (-1: never) */
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

static uint64_t rnd(struct env *e)
{
    e->rng ^= e->rng << 13;
    e->rng ^= e->rng >> 7;
    e->rng ^= e->rng << 17;
    return e->rng;
}

static uint8_t pat(uint64_t seq, uint64_t i)
{
    return (uint8_t)(seq * 131u + i * 7u + (i >> 8));
}

static struct reg *reg_find(struct env *e, uint32_t key)
{
    for (size_t i = 0; i < GV_ARRAY_LEN(e->regs); i++)
        if (e->regs[i].live && e->regs[i].key == key)
            return &e->regs[i];
    return NULL;
}

static int reg_covers(const struct reg *r, const void *p, size_t len)
{
    uintptr_t base = r->shadow ? (uintptr_t)r->shadow : r->start;
    uintptr_t a = (uintptr_t)p;
    return a >= base && a + len <= base + r->len;
}

static gv_status_t fake_reg(void *ctx, void *addr, size_t len, enum gv_mem mem, struct gv_rc_mr *mr)
{
    struct env *e = ctx;
    if (e->fail_reg)
        return GV_ERR_IO;
    for (size_t i = 0; i < GV_ARRAY_LEN(e->regs); i++) {
        struct reg *r = &e->regs[i];
        if (r->live)
            continue;
        *r = (struct reg){1, (uintptr_t)addr, len, e->next_key++, NULL};
        if (mem == GV_MEM_DEVICE && e->staged)
            r->shadow = calloc(1, len);
        *mr = (struct gv_rc_mr){r, r->key, r->key, r->shadow};
        return GV_OK;
    }
    return GV_ERR_NOMEM;
}

static void fake_dereg(void *ctx, struct gv_rc_mr *mr)
{
    (void)ctx;
    struct reg *r = mr->handle;
    free(r->shadow);
    memset(r, 0, sizeof(*r));
}

static const struct gv_rc_ops fake_rc_ops = {fake_reg, fake_dereg};

static int live_regs(struct env *e)
{
    int n = 0;
    for (size_t i = 0; i < GV_ARRAY_LEN(e->regs); i++)
        n += e->regs[i].live;
    return n;
}

/* ---------------------------------------------------------------- the fake wire */

static void note_err(struct side *s, gv_status_t st)
{
    if (st != GV_OK && s->err == GV_OK)
        s->err = st;
}

static gv_status_t w_post_common(struct side *s, struct op *o)
{
    if (s->posted - s->done >= s->env->cfg.sq_depth) {
        s->sq_overflows++;
        return GV_ERR_IO;
    }
    if (s->op_tail - s->op_head >= OPQ) {
        s->bad_posts++;
        return GV_ERR_IO;
    }
    o->seq = s->posted++;
    s->ops[s->op_tail++ % OPQ] = *o;
    return GV_OK;
}

static gv_status_t w_post_send(void *wctx, void *addr, uint32_t len, uint32_t lkey, unsigned flags,
                               uint32_t rec)
{
    struct side *s = wctx;
    struct op o = {.kind = OP_SEND, .flags = flags, .rec = rec, .len = len, .src = addr};
    if (lkey != s->slot_key || len > SLOT || (flags & GV_RP_F_INLINE && len > sizeof(o.inl)) ||
        (flags & GV_RP_F_INLINE && len > s->env->cfg.max_inline)) {
        s->bad_posts++;
        return GV_ERR_IO;
    }
    if (flags & GV_RP_F_INLINE)
        memcpy(o.inl, addr, len);
    return w_post_common(s, &o);
}

static gv_status_t w_post_write(void *wctx, const struct gv_rp_write *w, unsigned flags,
                                uint32_t rec)
{
    struct side *s = wctx;
    struct reg *r = reg_find(s->env, w->lkey);
    if (r == NULL || !reg_covers(r, w->laddr, w->len) || w->len == 0 ||
        w->len > s->env->cfg.max_write_len) {
        s->bad_keys++;
        return GV_ERR_IO;
    }
    struct op o = {.kind = OP_WRITE,
                   .flags = flags,
                   .rec = rec,
                   .len = w->len,
                   .src = w->laddr,
                   .raddr = w->raddr,
                   .rkey = w->rkey,
                   .with_imm = w->with_imm,
                   .imm = w->imm};
    return w_post_common(s, &o);
}

static gv_status_t w_post_recv(void *wctx, void *addr, uint32_t len, uint32_t lkey, uint32_t slot)
{
    struct side *s = wctx;
    if (lkey != s->slot_key || len != SLOT || addr != s->slots + (size_t)slot * SLOT ||
        s->rq_tail - s->rq_head >= s->pc.nrecv) {
        s->bad_posts++;
        return GV_ERR_IO;
    }
    s->rq[s->rq_tail++ % 4096] = slot;
    return GV_OK;
}

static gv_status_t w_copy(void *wctx, void *dst, const void *src, size_t len,
                          enum gv_rp_copy_dir dir)
{
    struct side *s = wctx;
    (void)dir;
    s->copies++;
    memcpy(dst, src, len);
    return GV_OK;
}

static const struct gv_rp_wire_ops fake_wire = {w_post_send, w_post_write, w_post_recv, w_copy};

/* Executes the oldest op s posted, at the peer. */
static void exec_op(struct side *s)
{
    struct side *p = s->peer;
    struct op *o = &s->ops[s->op_head++ % OPQ];
    const char *data = o->flags & GV_RP_F_INLINE ? o->inl : o->src;
    uint32_t slot = 0;
    int consumes = o->kind == OP_SEND || o->with_imm;
    if (consumes) {
        if (p->rq_head == p->rq_tail) {
            p->overruns++;
            return;
        }
        slot = p->rq[p->rq_head++ % 4096];
    }
    if (o->kind == OP_SEND) {
        memcpy(p->slots + (size_t)slot * SLOT, data, o->len);
    } else {
        struct reg *r = reg_find(s->env, o->rkey);
        if (r == NULL || !reg_covers(r, (void *)(uintptr_t)o->raddr, o->len)) {
            p->bad_keys++;
            return;
        }
        memcpy((void *)(uintptr_t)o->raddr, data, o->len);
    }
    if (o->flags & GV_RP_F_SIGNALED)
        s->cq[s->cq_tail++ % OPQ] = (uint32_t)o->seq;
    if (consumes)
        note_err(p, gv_rp_on_recv(&p->pc, slot, o->len, o->kind == OP_WRITE, o->imm, s->env->now));
}

/* Reports the oldest signaled completion of s (all WRs up to it are done). */
static void report_cq(struct side *s)
{
    uint32_t seq = s->cq[s->cq_head++ % OPQ];
    s->done = (uint64_t)seq + 1;
    note_err(s, gv_rp_on_send_done(&s->pc, seq % s->env->cfg.sq_depth, s->env->now));
}

static int wire_busy(struct side *s)
{
    return s->op_head != s->op_tail || s->cq_head != s->cq_tail;
}

/* One random step; 0 when nothing was in flight. */
static int step(struct env *e)
{
    struct side *sides[2] = {&e->a, &e->b};
    int busy = 0;
    if (e->a.err != GV_OK || e->b.err != GV_OK)
        return 0; /* a real transport closes the connection here */
    for (int i = 0; i < 2; i++)
        busy |= wire_busy(sides[i]);
    if (!busy)
        return 0;
    e->now += 1000;
    for (;;) {
        struct side *s = sides[rnd(e) & 1];
        int exec = (rnd(e) % 3) != 0;
        if (exec && s->op_head != s->op_tail) {
            exec_op(s);
            return 1;
        }
        if (!exec && s->cq_head != s->cq_tail) {
            report_cq(s);
            return 1;
        }
    }
}

static int run_quiet(struct env *e, long max_steps)
{
    long n = 0;
    while (step(e))
        if (++n > max_steps)
            return 0;
    return 1;
}

/* ---------------------------------------------------------------- applications */

static gv_status_t app_parse(const void *prefix, uint32_t *hdr_len_p, uint64_t *pl_p, void *user)
{
    (void)user;
    uint32_t hl;
    uint64_t pl;
    memcpy(&hl, prefix, 4);
    memcpy(&pl, (const char *)prefix + 4, 8);
    if (hl < 8 || hl > MAXHDR || pl > MAXPAY)
        return GV_ERR_PROTO;
    *hdr_len_p = hl;
    *pl_p = pl;
    return GV_OK;
}

static uint64_t msg_seq(const void *msg)
{
    uint64_t seq;
    memcpy(&seq, (const char *)msg + PFX, 8);
    return seq;
}

static gv_status_t app_on_header(struct gv_conn *c, const void *msg, size_t msg_len,
                                 uint64_t payload_len, struct gv_iov *dst, int *cnt, void *user)
{
    struct side *s = user;
    (void)c;
    (void)msg_len;
    (void)msg;
    s->headers++;
    size_t pl = (size_t)payload_len;
    switch (s->pol) {
    case POL_SINGLE:
        dst[0] = (struct gv_iov){s->rbuf, pl};
        *cnt = 1;
        break;
    case POL_SPLIT: /* three uneven pieces far apart, with guard bytes between */
    case POL_DISCARD_MID: {
        size_t a = pl / 3 + 1 > pl ? pl : pl / 3 + 1, b = (pl - a) / 2, c3 = pl - a - b;
        dst[0] = (struct gv_iov){s->rbuf, a};
        dst[1] = (struct gv_iov){s->pol == POL_SPLIT ? s->rbuf + RBUF / 3 : NULL, b};
        dst[2] = (struct gv_iov){s->rbuf + 2 * (RBUF / 3), c3};
        *cnt = 3;
        break;
    }
    case POL_DISCARD_ALL:
        dst[0] = (struct gv_iov){NULL, pl};
        *cnt = 1;
        break;
    case POL_DEVICE:
        dst[0] = (struct gv_iov){s->dev, pl};
        *cnt = 1;
        break;
    }
    s->ncur = *cnt;
    memcpy(s->cur, dst, (size_t)*cnt * sizeof(*dst));
    for (int i = 0; i < *cnt; i++)
        if (dst[i].base != NULL)
            memset(dst[i].base, 0, dst[i].len);
    return GV_OK;
}

static void app_on_msg(struct gv_conn *c, const void *msg, size_t msg_len, void *user)
{
    struct side *s = user;
    (void)c;
    uint32_t hl;
    uint64_t pl;
    memcpy(&hl, msg, 4);
    memcpy(&pl, (const char *)msg + 4, 8);
    uint64_t seq = msg_seq(msg);
    if (seq != s->expect_seq || msg_len != PFX + hl)
        s->bad_order++;
    s->expect_seq = seq + 1;
    for (size_t i = PFX + 8; i < msg_len; i++)
        if ((uint8_t)((const char *)msg)[i] != pat(seq, i + 1000))
            s->bad_content++;
    uint64_t off = 0;
    for (int k = 0; k < s->ncur && pl > 0; k++) {
        const uint8_t *d = s->cur[k].base;
        for (size_t i = 0; d != NULL && i < s->cur[k].len; i++)
            if (d[i] != pat(seq, off + i)) {
                s->bad_content++;
                break;
            }
        off += s->cur[k].len;
    }
    s->ncur = 0;
    s->delivered++;
    if ((int64_t)seq == s->close_at_seq)
        gv_rp_fail(&s->pc, GV_ERR_CLOSED);
}

static void app_send_cb(struct gv_conn *c, gv_status_t status, void *arg)
{
    struct src *x = arg;
    (void)c;
    if (status == GV_OK)
        x->s->cb_ok++;
    else
        x->s->cb_err++;
    x->s->last_cb_status = status;
    memset(x->hdr, 0xAB, PFX + 8); /* reuse the buffers at once: a late read shows */
    memset(x->pay, 0xCD, 4096);
    x->busy = 0;
}

/* Sends message seq with a hdr_len-byte header and payload_len bytes in niov pieces.
 * Returns the send status; GV_ERR_AGAIN also when the application has no free buffer. */
static gv_status_t app_send(struct side *s, uint32_t hdr_len, uint32_t payload_len, int niov)
{
    struct src *x = NULL;
    for (int i = 0; i < NSRC && x == NULL; i++)
        if (!s->src[i].busy)
            x = &s->src[i];
    if (x == NULL)
        return GV_ERR_AGAIN;
    uint64_t seq = s->next_seq;
    uint64_t pl = payload_len;
    memcpy(x->hdr, &hdr_len, 4);
    memcpy(x->hdr + 4, &pl, 8);
    memcpy(x->hdr + PFX, &seq, 8);
    for (uint32_t i = PFX + 8; i < PFX + hdr_len; i++)
        x->hdr[i] = (char)pat(seq, i + 1000);
    for (uint32_t i = 0; i < payload_len; i++)
        x->pay[i] = (char)pat(seq, i);
    struct gv_iov iov[GV_TP_MAX_SEND_IOV];
    iov[0] = (struct gv_iov){x->hdr, PFX + hdr_len};
    int n = 1;
    uint32_t off = 0;
    for (int k = 0; k < niov; k++) {
        uint32_t len = k == niov - 1 ? payload_len - off : payload_len / (uint32_t)niov / 2;
        iov[n++] = (struct gv_iov){x->pay + off, len};
        off += len;
    }
    x->s = s;
    x->seq = seq;
    gv_status_t st = gv_rp_send(&s->pc, iov, n, app_send_cb, x, s->env->now);
    if (st == GV_OK) { /* copied: scribble now, the receiver must still see the original */
        memset(x->hdr + PFX + 8, 0x5A, hdr_len - 8);
        memset(x->pay, 0x5A, payload_len);
    }
    if (st == GV_INPROGRESS) {
        x->busy = 1;
        s->inprog++;
    }
    if (st == GV_OK || st == GV_INPROGRESS)
        s->next_seq++;
    return st;
}

/* ---------------------------------------------------------------- set-up */

static struct gv_rp_cfg default_cfg(void)
{
    return (struct gv_rp_cfg){.slot_size = SLOT,
                              .rx_depth = 8,
                              .tx_slots = 8,
                              .sq_depth = 16,
                              .signal_every = 4,
                              .max_inline = 64,
                              .max_write_len = 4096,
                              .prefix_len = PFX,
                              .max_hdr_len = MAXHDR,
                              .max_payload_len = MAXPAY,
                              .max_send_queue = 32,
                              .max_send_queue_bytes = 64u << 20,
                              .io_timeout_ns = 1000000000ull};
}

static void side_init(struct env *e, struct side *s, struct side *peer, const char *name)
{
    memset(s, 0, sizeof(*s));
    s->name = name;
    s->env = e;
    s->peer = peer;
    s->close_at_seq = -1;
    s->uc.id = name[0] == 'a' ? 1 : 2;
    snprintf(s->uc.peer, sizeof(s->uc.peer), "fake-%s", name);
    s->h = (struct gv_tp_handler){.prefix_len = PFX,
                                  .parse_prefix = app_parse,
                                  .on_header = app_on_header,
                                  .on_msg = app_on_msg};
    s->ops = calloc(OPQ, sizeof(*s->ops));
    s->rbuf = calloc(1, RBUF);
    s->slots = aligned_alloc(4096, ((size_t)(e->cfg.rx_depth + 1 + e->cfg.tx_slots) * SLOT + 4095) /
                                       4096 * 4096);
    for (int i = 0; i < NSRC; i++)
        s->src[i].pay = malloc(MAXPAY);
    gv_rc_init(&s->rc, &fake_rc_ops, e, 1u << 30, 64, 4096);
    struct gv_rc_mr mr = {0};
    fake_reg(e, s->slots, gv_rp_slot_bytes(&e->cfg), GV_MEM_HOST, &mr);
    s->slot_key = mr.lkey;
}

static void env_init(struct env *e, const struct gv_rp_cfg *cfg, uint64_t seed)
{
    memset(e, 0, sizeof(*e));
    e->cfg = *cfg;
    e->rng = seed * 2654435761u + 1;
    e->next_key = 100;
    side_init(e, &e->a, &e->b, "a");
    side_init(e, &e->b, &e->a, "b");
    struct gv_rp_params prm = {GV_RP_VERSION, (uint16_t)cfg->rx_depth, cfg->slot_size};
    struct side *s[2] = {&e->a, &e->b};
    for (int i = 0; i < 2; i++) {
        GV_CHECK_OK(gv_rp_init(&s[i]->pc, cfg, &prm, s[i]->slots, s[i]->slot_key, &s[i]->rc,
                               &fake_wire, s[i], &s[i]->uc, &s[i]->h, s[i]));
        GV_CHECK_OK(gv_rp_post_recvs(&s[i]->pc));
    }
}

static void env_free(struct env *e)
{
    struct side *s[2] = {&e->a, &e->b};
    for (int i = 0; i < 2; i++) {
        gv_rp_fail(&s[i]->pc, GV_ERR_CLOSED);
        gv_rp_cleanup(&s[i]->pc);
        gv_rc_cleanup(&s[i]->rc);
        free(s[i]->ops);
        free(s[i]->rbuf);
        free(s[i]->slots);
        for (int k = 0; k < NSRC; k++)
            free(s[i]->src[k].pay);
    }
    for (size_t i = 0; i < GV_ARRAY_LEN(e->regs); i++)
        if (e->regs[i].live)
            free(e->regs[i].shadow);
}

/* The wire's own verdict: nothing overran, overflowed or used a bad key, no errors. */
static void check_wire_clean(struct env *e)
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
static void check_credits_conserved(struct env *e)
{
    GV_CHECK_EQ(e->a.pc.credits + e->b.pc.owed, e->cfg.rx_depth);
    GV_CHECK_EQ(e->b.pc.credits + e->a.pc.owed, e->cfg.rx_depth);
    GV_CHECK_EQ(e->a.pc.reply_credit, 1);
    GV_CHECK_EQ(e->b.pc.reply_credit, 1);
    GV_CHECK_EQ(e->a.rq_tail - e->a.rq_head, e->cfg.rx_depth + 1);
    GV_CHECK_EQ(e->b.rq_tail - e->b.rq_head, e->cfg.rx_depth + 1);
}

/* Sends `count` messages from s with sizes from size_of(i), driving the wire whenever the
 * send side pushes back, then runs the wire dry. */
typedef void (*size_fn)(struct env *e, uint64_t i, uint32_t *hdr, uint32_t *pay, int *niov);

static void dump(const struct side *s)
{
    const struct gv_rp_conn *pc = &s->pc;
    fprintf(stderr,
            "  %s: credits %u owed %u reply %u nfree %u wr %llu..%llu since %u msgs %llu/%llu/%llu "
            "held %llu..%llu rx %d rq %llu ops %llu cq %llu dead %d\n",
            s->name, pc->credits, pc->owed, pc->reply_credit, pc->nfree,
            (unsigned long long)pc->wr_tail, (unsigned long long)pc->wr_head, pc->since_signal,
            (unsigned long long)pc->m_head, (unsigned long long)pc->m_post,
            (unsigned long long)pc->m_tail, (unsigned long long)pc->h_head,
            (unsigned long long)pc->h_tail, pc->rx.state,
            (unsigned long long)(s->rq_tail - s->rq_head),
            (unsigned long long)(s->op_tail - s->op_head),
            (unsigned long long)(s->cq_tail - s->cq_head), pc->dead);
}

static int pump_sends(struct env *e, struct side *s, uint64_t count, size_fn size_of)
{
    long guard = 0;
    for (uint64_t i = 0; i < count;) {
        uint32_t hdr, pay;
        int niov;
        size_of(e, i, &hdr, &pay, &niov);
        gv_status_t st = app_send(s, hdr, pay, niov);
        if (st == GV_OK || st == GV_INPROGRESS) {
            i++;
            continue;
        }
        if (st != GV_ERR_AGAIN) {
            GV_CHECK_FAIL_("send %llu: %s", (unsigned long long)i, gv_status_str(st));
            return 0;
        }
        if (!step(e) || ++guard > 2000000) {
            GV_CHECK_FAIL_("stuck at message %llu (nothing in flight)", (unsigned long long)i);
            dump(&e->a);
            dump(&e->b);
            return 0;
        }
    }
    return run_quiet(e, 2000000);
}

/* ---------------------------------------------------------------- size mixes */

static void sz_small(struct env *e, uint64_t i, uint32_t *hdr, uint32_t *pay, int *niov)
{
    *hdr = 8 + (uint32_t)(rnd(e) % 40);
    *pay = i % 5 == 0 ? 0 : (uint32_t)(rnd(e) % 700);
    *niov = 1 + (int)(i % 3);
}

static void sz_mixed(struct env *e, uint64_t i, uint32_t *hdr, uint32_t *pay, int *niov)
{
    *hdr = 8 + (uint32_t)(rnd(e) % 64);
    uint64_t r = rnd(e) % 10;
    *pay = r < 6 ? (uint32_t)(rnd(e) % 900) : (uint32_t)(1000 + rnd(e) % 60000);
    *niov = 1 + (int)(i % 4);
}

static void sz_large(struct env *e, uint64_t i, uint32_t *hdr, uint32_t *pay, int *niov)
{
    (void)i;
    *hdr = 16;
    *pay = (uint32_t)(200000 + rnd(e) % 100000);
    *niov = 4;
}

static void sz_fixed(struct env *e, uint64_t i, uint32_t *hdr, uint32_t *pay, int *niov)
{
    (void)e;
    *hdr = 16;
    *pay = 250000;
    *niov = 1 + (int)(i % 4);
}

static void sz_bighdr(struct env *e, uint64_t i, uint32_t *hdr, uint32_t *pay, int *niov)
{
    *hdr = 2000 + (uint32_t)(rnd(e) % 5000); /* several RTS fragments */
    *pay = i % 2 ? 0 : (uint32_t)(rnd(e) % 5000);
    *niov = 2;
}

/* ---------------------------------------------------------------- tests */

static void test_encodings(void)
{
    struct gv_rp_ctrl h = {GV_RP_RTS, 0, 517, 1000, 77, 0xBEEF, 0x123456789ull}, g;
    uint8_t buf[GV_RP_CTRL_LEN];
    gv_rp_ctrl_encode(&h, buf);
    gv_rp_ctrl_decode(buf, &g);
    GV_CHECK(memcmp(&h, &g, sizeof(h)) == 0);
    GV_CHECK_EQ(buf[0], GV_RP_RTS);
    GV_CHECK_EQ(buf[2] | buf[3] << 8, 517); /* little-endian on the wire */

    struct gv_rp_params p = {GV_RP_VERSION, 64, 8192}, q;
    uint8_t pb[GV_RP_PARAMS_LEN + 4] = {0};
    gv_rp_params_encode(&p, pb);
    GV_CHECK_OK(gv_rp_params_decode(pb, GV_RP_PARAMS_LEN, &q));
    GV_CHECK_EQ(q.rx_depth, 64);
    GV_CHECK_EQ(q.slot_size, 8192);
    GV_CHECK_STATUS(gv_rp_params_decode(pb, GV_RP_PARAMS_LEN - 1, &q), GV_ERR_PROTO);
    GV_CHECK_STATUS(gv_rp_params_decode(NULL, 0, &q), GV_ERR_PROTO);
    pb[4] = GV_RP_VERSION + 1;
    GV_CHECK_STATUS(gv_rp_params_decode(pb, GV_RP_PARAMS_LEN, &q), GV_ERR_VERSION);
    pb[4] = GV_RP_VERSION;
    pb[6] = 2, pb[7] = 0; /* rx_depth 2: too small */
    GV_CHECK_STATUS(gv_rp_params_decode(pb, GV_RP_PARAMS_LEN, &q), GV_ERR_PROTO);
    pb[0] ^= 1;
    GV_CHECK_STATUS(gv_rp_params_decode(pb, GV_RP_PARAMS_LEN, &q), GV_ERR_PROTO);
    GV_CHECK_EQ(gv_rp_imm(0x1234, 7), 0x00071234u);

    struct gv_rp_cfg c = default_cfg();
    GV_CHECK_OK(gv_rp_cfg_check(&c));
    c.tx_slots = GV_RP_CTRL_SLOTS + 1;
    GV_CHECK_STATUS(gv_rp_cfg_check(&c), GV_ERR_INVAL);
    c = default_cfg();
    c.signal_every = c.sq_depth + 1;
    GV_CHECK_STATUS(gv_rp_cfg_check(&c), GV_ERR_INVAL);
    c = default_cfg();
    c.rx_depth = GV_RP_MAX_DEPTH + 1;
    GV_CHECK_STATUS(gv_rp_cfg_check(&c), GV_ERR_INVAL);
}

/* Many small messages one way, random interleaving: order, content, credits. */
static void test_eager_stream(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    for (uint64_t seed = 1; seed <= 5; seed++) {
        struct env e;
        env_init(&e, &cfg, seed);
        GV_CHECK(pump_sends(&e, &e.a, 3000, sz_small));
        GV_CHECK_EQ(e.b.delivered, 3000);
        check_wire_clean(&e);
        check_credits_conserved(&e);
        GV_CHECK(e.a.pc.st.inline_sends > 0);
        GV_CHECK_EQ(e.a.pc.st.rendezvous, 0);
        /* one-way traffic: credits came back in explicit CREDIT messages */
        GV_CHECK(e.b.pc.st.credit_msgs > 0);
        /* selective signalling: far fewer completions than WRs */
        GV_CHECK(e.a.pc.st.signaled * 2 < e.a.pc.st.wrs);
        GV_CHECK(e.b.pc.st.max_held <= cfg.rx_depth);
        env_free(&e);
    }
}

/* A burst with the receiver not running: the sender stops at its credits, never overruns the
 * receive queue, queues up to max_send_queue, then says GV_ERR_AGAIN. */
static void test_burst_no_overrun(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    cfg.tx_slots = 16; /* so that credits, not slots, are what runs out */
    struct env e;
    env_init(&e, &cfg, 7);
    int ok = 0, inprog = 0;
    gv_status_t st;
    while ((st = app_send(&e.a, 8, 100, 1)) == GV_OK || st == GV_INPROGRESS)
        st == GV_OK ? ok++ : inprog++;
    GV_CHECK_STATUS(st, GV_ERR_AGAIN);
    /* credits: one is kept for credit updates, so rx_depth - 1 SENDs went out */
    GV_CHECK_EQ(e.a.op_tail - e.a.op_head, cfg.rx_depth - 1);
    GV_CHECK_EQ(e.a.pc.credits, 1);
    GV_CHECK_EQ(e.a.pc.st.min_credits, 1);
    GV_CHECK_EQ(ok + inprog, (int)cfg.max_send_queue + (int)cfg.rx_depth - 1);
    GV_CHECK(inprog > 0); /* slots ran out: the rest are queued by reference */
    /* deliver only a->b executions (b processes, but its completions are not reported) */
    while (e.a.op_head != e.a.op_tail)
        exec_op(&e.a);
    GV_CHECK_EQ(e.b.overruns, 0);
    GV_CHECK(run_quiet(&e, 1000000));
    GV_CHECK_EQ(e.b.delivered, (uint64_t)(ok + inprog));
    GV_CHECK_EQ(e.a.cb_ok, inprog);
    check_wire_clean(&e);
    check_credits_conserved(&e);
    env_free(&e);
}

/* Rendezvous both ways at once with small windows: the deadlock-prone case (each side holds
 * the other's receives while waiting for a CTS or a final write). */
static void test_bidirectional_mixed(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    cfg.rx_depth = 4;
    cfg.tx_slots = 5;
    cfg.sq_depth = 8;
    cfg.signal_every = 8;
    for (uint64_t seed = 11; seed <= 16; seed++) {
        struct env e;
        env_init(&e, &cfg, seed);
        e.a.pol = POL_SPLIT;
        e.b.pol = POL_SPLIT;
        long guard = 0;
        uint64_t na = 0, nb = 0, n = 400;
        while ((na < n || nb < n) && guard++ < 2000000 && !e.a.err && !e.b.err) {
            uint32_t hdr, pay;
            int niov;
            if (na < n) {
                sz_mixed(&e, na, &hdr, &pay, &niov);
                gv_status_t st = app_send(&e.a, hdr, pay, niov);
                na += st == GV_OK || st == GV_INPROGRESS;
            }
            if (nb < n) {
                sz_mixed(&e, nb, &hdr, &pay, &niov);
                gv_status_t st = app_send(&e.b, hdr, pay, niov);
                nb += st == GV_OK || st == GV_INPROGRESS;
            }
            step(&e);
        }
        GV_CHECK(run_quiet(&e, 2000000));
        GV_CHECK_EQ(e.b.delivered, n);
        GV_CHECK_EQ(e.a.delivered, n);
        GV_CHECK(e.a.pc.st.rendezvous > 0 && e.b.pc.st.rendezvous > 0);
        check_wire_clean(&e);
        check_credits_conserved(&e);
        GV_CHECK_EQ(e.a.cb_err + e.b.cb_err, 0);
        GV_CHECK_EQ(live_regs(&e) - 2, (int)(e.a.rc.st.entries + e.b.rc.st.entries));
        env_free(&e);
    }
}

/* Large payloads: multi-iov sources, three-element destinations, writes chunked at
 * max_write_len, the final write carrying the immediate, one cb per message. */
static void test_rendezvous_scatter(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    struct env e;
    env_init(&e, &cfg, 21);
    e.b.pol = POL_SPLIT;
    GV_CHECK(pump_sends(&e, &e.a, 20, sz_fixed));
    GV_CHECK(pump_sends(&e, &e.a, 20, sz_fixed)); /* the same buffers again */
    GV_CHECK_EQ(e.b.delivered, 40);
    GV_CHECK_EQ(e.a.cb_ok, 40);
    GV_CHECK_EQ(e.a.pc.st.rendezvous, 40);
    GV_CHECK_EQ(e.b.pc.st.cts, 40);
    GV_CHECK_EQ(e.a.pc.st.fins, 0);
    GV_CHECK(e.a.pc.st.writes >= e.a.pc.st.bytes_written / cfg.max_write_len);
    check_wire_clean(&e);
    check_credits_conserved(&e);
    /* the registration cache made one entry per buffer and hit afterwards */
    GV_CHECK_EQ(e.b.rc.st.misses, 3);
    GV_CHECK_EQ(e.b.rc.st.hits, 3 * 39);
    GV_CHECK(e.a.rc.st.hits > 0);
    env_free(&e);
}

/* Discard destinations: skipped bytes are never written; all-discard ends with a FIN. */
static void test_rendezvous_discard(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    struct env e;
    env_init(&e, &cfg, 31);
    e.b.pol = POL_DISCARD_MID;
    GV_CHECK(pump_sends(&e, &e.a, 6, sz_large));
    GV_CHECK_EQ(e.b.delivered, 6);
    uint64_t total = 0;
    for (int i = 0; i < NSRC; i++)
        (void)i;
    total = e.a.pc.st.bytes_written;
    GV_CHECK(total > 0);
    check_wire_clean(&e);

    e.b.pol = POL_DISCARD_ALL;
    uint64_t before = e.a.pc.st.bytes_written;
    GV_CHECK(pump_sends(&e, &e.a, 3, sz_large));
    GV_CHECK_EQ(e.b.delivered, 9);
    GV_CHECK_EQ(e.a.pc.st.bytes_written, before); /* nothing written */
    GV_CHECK_EQ(e.a.pc.st.fins, 3);
    GV_CHECK_EQ(e.a.cb_ok, 9);
    check_wire_clean(&e);
    check_credits_conserved(&e);
    env_free(&e);
}

/* Headers longer than a slot travel as RTS + RTS_CONT fragments, with and without payload,
 * interleaved with eager messages. */
static void test_long_headers(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    struct env e;
    env_init(&e, &cfg, 41);
    e.b.pol = POL_SPLIT;
    GV_CHECK(pump_sends(&e, &e.a, 40, sz_bighdr));
    GV_CHECK(pump_sends(&e, &e.a, 200, sz_small));
    GV_CHECK(pump_sends(&e, &e.a, 40, sz_bighdr));
    GV_CHECK_EQ(e.b.delivered, 280);
    GV_CHECK(e.a.inprog >= 80); /* every long header, and small ones queued by reference */
    GV_CHECK_EQ(e.a.cb_ok, e.a.inprog);
    check_wire_clean(&e);
    check_credits_conserved(&e);
    env_free(&e);
}

/* A dead peer in the middle of a rendezvous: both sides time out, pending callbacks fire once
 * with the error, registrations are released. */
static void test_dead_peer(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    struct env e;
    env_init(&e, &cfg, 51);
    GV_CHECK_STATUS(app_send(&e.a, 16, 300000, 2), GV_INPROGRESS);
    exec_op(&e.a); /* RTS reaches b; b answers with a CTS ... */
    GV_CHECK_EQ(e.b.pc.rx.state, GV_RP_RX_WAIT_FIN);
    GV_CHECK(e.b.rc.st.entries == 1);
    /* ... which never arrives: b's host died. */
    e.now += cfg.io_timeout_ns / 2;
    GV_CHECK_OK(gv_rp_check_timeout(&e.a.pc, e.now));
    e.now += cfg.io_timeout_ns;
    GV_CHECK_STATUS(gv_rp_check_timeout(&e.a.pc, e.now), GV_ERR_TIMEOUT);
    GV_CHECK_STATUS(gv_rp_check_timeout(&e.b.pc, e.now), GV_ERR_TIMEOUT);
    gv_rp_fail(&e.a.pc, GV_ERR_TIMEOUT);
    GV_CHECK_EQ(e.a.cb_err, 1);
    GV_CHECK_STATUS(e.a.last_cb_status, GV_ERR_TIMEOUT);
    gv_rp_fail(&e.b.pc, GV_ERR_TIMEOUT);
    GV_CHECK_EQ(e.b.rc.st.entries, 1); /* cached, but no longer in use */
    GV_CHECK(e.b.rc.head != NULL && e.b.rc.head->refs == 0);
    GV_CHECK(e.a.rc.head != NULL && e.a.rc.head->refs == 0);
    gv_rp_fail(&e.a.pc, GV_ERR_TIMEOUT); /* idempotent */
    GV_CHECK_EQ(e.a.cb_err, 1);
    GV_CHECK_STATUS(app_send(&e.a, 8, 10, 1), GV_ERR_CLOSED);
    /* an idle connection never times out */
    struct env f;
    env_init(&f, &cfg, 52);
    f.now += 100 * cfg.io_timeout_ns;
    GV_CHECK_OK(gv_rp_check_timeout(&f.a.pc, f.now));
    env_free(&f);
    env_free(&e);
}

/* Selective signalling: every Nth WR, and always the WR that fills the send queue. */
static void test_signalling(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    cfg.max_inline = 0; /* every send holds its slot until a completion covers it */
    cfg.signal_every = 5;
    cfg.rx_depth = 64;
    cfg.tx_slots = 40;
    cfg.sq_depth = 12;
    struct env e;
    env_init(&e, &cfg, 61);
    GV_CHECK(pump_sends(&e, &e.a, 500, sz_small));
    GV_CHECK_EQ(e.b.delivered, 500);
    check_wire_clean(&e); /* includes: never more than sq_depth WRs outstanding */
    GV_CHECK_EQ(e.a.pc.st.inline_sends, 0);
    GV_CHECK(e.a.pc.st.signaled >= e.a.pc.st.wrs / 5);
    GV_CHECK(e.a.pc.st.signaled < e.a.pc.st.wrs / 2);
    GV_CHECK_EQ(e.a.pc.nfree + (uint32_t)e.a.pc.since_signal, cfg.tx_slots);
    env_free(&e);

    /* signal_every larger than what fits: the full-queue rule still brings completions */
    cfg.signal_every = 12;
    cfg.tx_slots = 40;
    env_init(&e, &cfg, 62);
    GV_CHECK(pump_sends(&e, &e.a, 300, sz_small));
    GV_CHECK_EQ(e.b.delivered, 300);
    check_wire_clean(&e);
    env_free(&e);
}

/* The send contract: argument checks, GV_ERR_AGAIN on a full queue, byte cap. */
static void test_send_contract(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    struct env e;
    env_init(&e, &cfg, 71);
    char hdr[PFX + 8] = {0};
    struct gv_iov iov[GV_TP_MAX_SEND_IOV + 1];
    iov[0] = (struct gv_iov){hdr, sizeof(hdr)};
    GV_CHECK_STATUS(gv_rp_send(&e.a.pc, iov, 0, NULL, NULL, 0), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_rp_send(&e.a.pc, iov, GV_TP_MAX_SEND_IOV + 1, NULL, NULL, 0), GV_ERR_INVAL);
    iov[0].len = PFX - 1;
    GV_CHECK_STATUS(gv_rp_send(&e.a.pc, iov, 1, NULL, NULL, 0), GV_ERR_INVAL);
    iov[0].len = MAXHDR + 1;
    GV_CHECK_STATUS(gv_rp_send(&e.a.pc, iov, 1, NULL, NULL, 0), GV_ERR_INVAL);
    iov[0].len = sizeof(hdr);
    iov[1] = (struct gv_iov){NULL, 10};
    GV_CHECK_STATUS(gv_rp_send(&e.a.pc, iov, 2, NULL, NULL, 0), GV_ERR_INVAL);
    iov[1] = (struct gv_iov){hdr, (size_t)MAXPAY + 1};
    GV_CHECK_STATUS(gv_rp_send(&e.a.pc, iov, 2, NULL, NULL, 0), GV_ERR_INVAL);
    GV_CHECK_EQ(e.a.op_tail, 0); /* nothing went out */
    env_free(&e);

    cfg.max_send_queue_bytes = 500000;
    env_init(&e, &cfg, 72);
    GV_CHECK_STATUS(app_send(&e.a, 16, 300000, 1), GV_INPROGRESS);
    GV_CHECK_STATUS(app_send(&e.a, 16, 300000, 1), GV_ERR_AGAIN); /* byte cap */
    GV_CHECK(run_quiet(&e, 100000));
    GV_CHECK_STATUS(app_send(&e.a, 16, 300000, 1), GV_INPROGRESS);
    GV_CHECK(run_quiet(&e, 100000));
    GV_CHECK_EQ(e.b.delivered, 2);
    check_wire_clean(&e);
    env_free(&e);
}

/* Inject a raw SEND into b's next receive. */
static gv_status_t inject(struct env *e, const struct gv_rp_ctrl *h, const void *data, uint32_t len,
                          uint32_t byte_len)
{
    struct side *b = &e->b;
    uint32_t slot = b->rq[b->rq_head++ % 4096];
    char *p = b->slots + (size_t)slot * SLOT;
    gv_rp_ctrl_encode(h, p);
    if (len > 0)
        memcpy(p + GV_RP_CTRL_LEN, data, len);
    return gv_rp_on_recv(&b->pc, slot, byte_len, 0, 0, e->now);
}

/* Peer data is validated: every malformed message is GV_ERR_PROTO, never a crash. */
static void test_bad_peer_data(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    char good[PFX + 8];
    uint32_t hl = 8;
    uint64_t pl = 0;
    memcpy(good, &hl, 4);
    memcpy(good + 4, &pl, 8);
    memset(good + PFX, 0, 8);
    struct {
        struct gv_rp_ctrl h;
        uint32_t byte_len; /* 0: CTRL + h.len */
        gv_status_t want;
    } cases[] = {
        {{GV_RP_EAGER, 0, 0, sizeof(good), sizeof(good), 0, 0}, 0, GV_OK},
        {{GV_RP_EAGER, 0, 0, 10, 10, 0, 0}, 5, GV_ERR_PROTO},                   /* runt */
        {{GV_RP_EAGER, 0, 0, 30, 20, 0, 0}, GV_RP_CTRL_LEN + 20, GV_ERR_PROTO}, /* len lies */
        {{GV_RP_EAGER, 0, 0, sizeof(good), 4, 0, 0}, 0, GV_ERR_PROTO},          /* msg < prefix */
        {{GV_RP_EAGER, 0, 0, sizeof(good), 100, 0, 0}, 0, GV_ERR_PROTO},        /* msg > len */
        {{GV_RP_EAGER, 0, 0, sizeof(good) + 4, sizeof(good), 0, 0}, 0, GV_ERR_PROTO}, /* framing */
        {{99, 0, 0, 0, 0, 0, 0}, 0, GV_ERR_PROTO},                      /* unknown type */
        {{GV_RP_CREDIT, 0, 1, 0, 0, 0, 0}, 0, GV_ERR_PROTO},            /* credits we never spent */
        {{GV_RP_CTS, 0, 0, GV_RP_ELEM_LEN, 0, 3, 10}, 0, GV_ERR_PROTO}, /* CTS, no RTS */
        {{GV_RP_FIN, 0, 0, 0, 0, 3, 0}, 0, GV_ERR_PROTO},               /* FIN, no CTS */
        {{GV_RP_RTS, 0, 0, sizeof(good), sizeof(good), 1, (uint64_t)MAXPAY + 1}, 0, GV_ERR_PROTO},
        {{GV_RP_RTS_CONT, 0, 0, 4, 0, 1, 0}, 0, GV_ERR_PROTO}, /* stray fragment */
        {{GV_RP_RTS, 0, 0, sizeof(good), MAXHDR + 1, 1, 5}, 0, GV_ERR_PROTO},
    };
    for (size_t i = 0; i < GV_ARRAY_LEN(cases); i++) {
        struct env e;
        env_init(&e, &cfg, 80 + i);
        uint8_t data[64] = {0};
        memcpy(data, good, sizeof(good));
        uint32_t bl = cases[i].byte_len ? cases[i].byte_len : GV_RP_CTRL_LEN + cases[i].h.len;
        gv_status_t st =
            inject(&e, &cases[i].h, data, cases[i].h.len < 64 ? cases[i].h.len : 0, bl);
        GV_CHECK_MSG(st == cases[i].want, "case %zu: got %s", i, gv_status_str(st));
        env_free(&e);
    }
    /* an immediate for a rendezvous nobody started */
    struct env e;
    env_init(&e, &cfg, 99);
    uint32_t slot = e.b.rq[e.b.rq_head++ % 4096];
    GV_CHECK_STATUS(gv_rp_on_recv(&e.b.pc, slot, 0, 1, gv_rp_imm(5, 0), 0), GV_ERR_PROTO);
    env_free(&e);
}

/* on_msg may close the connection: nothing more is delivered, nothing crashes. */
static void test_close_from_callback(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    struct env e;
    env_init(&e, &cfg, 101);
    e.b.close_at_seq = 10;
    GV_CHECK(pump_sends(&e, &e.a, 6, sz_small));
    for (int i = 0; i < 30; i++)
        app_send(&e.a, 8, 50, 1);
    run_quiet(&e, 100000);
    GV_CHECK_EQ(e.b.delivered, 11);
    GV_CHECK(e.b.pc.dead);
    GV_CHECK_EQ(e.b.bad_order, 0);
    env_free(&e);
}

/* Graceful local close: sends already accepted with GV_OK still arrive; the rest fail. */
static void test_close_drains(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    struct env e;
    env_init(&e, &cfg, 111);
    int ok = 0, inprog = 0;
    for (int i = 0; i < 30; i++) {
        gv_status_t st = app_send(&e.a, 8, 300, 1);
        ok += st == GV_OK;
        inprog += st == GV_INPROGRESS;
    }
    GV_CHECK(inprog > 0 && ok > 0);
    GV_CHECK_EQ(gv_rp_close_begin(&e.a.pc), 1);
    GV_CHECK_EQ(e.a.cb_err, inprog);
    GV_CHECK_STATUS(app_send(&e.a, 8, 10, 1), GV_ERR_CLOSED);
    GV_CHECK(!gv_rp_drained(&e.a.pc));
    GV_CHECK(run_quiet(&e, 100000));
    GV_CHECK(gv_rp_drained(&e.a.pc));
    GV_CHECK_EQ(e.b.delivered, (uint64_t)ok);
    check_wire_clean(&e);
    env_free(&e);

    /* with a rendezvous half done there is no lingering */
    env_init(&e, &cfg, 112);
    GV_CHECK_STATUS(app_send(&e.a, 16, 200000, 1), GV_INPROGRESS);
    exec_op(&e.a);
    GV_CHECK_EQ(gv_rp_close_begin(&e.a.pc), 0);
    GV_CHECK_EQ(e.a.cb_err, 1);
    env_free(&e);
}

/* Staged device memory: rendezvous sources are copied to the pinned shadow before the
 * writes, destinations copied from it after the final write; eager payloads go through the
 * copy hook in both directions. Without staging, the device registration is written directly. */
static void test_device_memory(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    for (int staged = 0; staged <= 1; staged++) {
        struct env e;
        env_init(&e, &cfg, 121);
        e.staged = staged;
        e.b.pol = POL_DEVICE;
        e.b.dev = calloc(1, MAXPAY);
        struct gv_buf db = {e.b.dev, MAXPAY, GV_MEM_DEVICE, NULL};
        struct gv_rc_entry *de;
        GV_CHECK_OK(gv_rc_add_explicit(&e.b.rc, &db, &de));
        GV_CHECK_EQ(de->mr.shadow != NULL, staged);
        /* the sender's payload buffers are "device" memory too */
        struct gv_rc_entry *se[NSRC];
        for (int i = 0; i < NSRC; i++) {
            struct gv_buf sb = {e.a.src[i].pay, MAXPAY, GV_MEM_DEVICE, NULL};
            GV_CHECK_OK(gv_rc_add_explicit(&e.a.rc, &sb, &se[i]));
        }
        GV_CHECK(pump_sends(&e, &e.a, 10, sz_large));
        GV_CHECK(pump_sends(&e, &e.a, 10, sz_small));
        GV_CHECK_EQ(e.b.delivered, 20);
        check_wire_clean(&e);
        /* staged rendezvous: one D2H per source iov, one H2D per message */
        if (staged) {
            GV_CHECK(e.a.copies >= 10 * 4);
            GV_CHECK(e.b.copies >= 10);
        }
        GV_CHECK(e.b.copies >= 8);        /* eager payloads with a device destination */
        GV_CHECK_EQ(e.a.rc.st.misses, 0); /* explicit entries only, no implicit registration */
        GV_CHECK_EQ(e.a.rc.st.device_entries, NSRC);
        env_free(&e);
        free(e.b.dev);
    }
}

/* ---------------------------------------------------------------- registration cache */

static void test_regcache(void)
{
    struct env e;
    memset(&e, 0, sizeof(e));
    e.next_key = 1;
    struct gv_rcache rc;
    char *mem = aligned_alloc(4096, 64 * 4096);
    gv_rc_init(&rc, &fake_rc_ops, &e, 3 * 4096, 8, 4096);

    struct gv_rc_entry *a, *b, *c, *d;
    GV_CHECK_OK(gv_rc_get(&rc, mem + 100, 50, &a));
    GV_CHECK_EQ(a->start, (uintptr_t)mem); /* page-rounded */
    GV_CHECK_EQ(a->end, (uintptr_t)mem + 4096);
    GV_CHECK_OK(gv_rc_get(&rc, mem + 4000, 96, &b)); /* inside the same page: a hit */
    GV_CHECK(a == b);
    GV_CHECK_EQ(rc.st.hits, 1);
    GV_CHECK_EQ(rc.st.misses, 1);
    GV_CHECK_EQ(a->refs, 2);
    gv_rc_put(&rc, a);
    gv_rc_put(&rc, b);
    GV_CHECK_OK(gv_rc_get(&rc, mem + 4096, 8192, &c)); /* 2 pages: 3 pages cached */
    gv_rc_put(&rc, c);
    GV_CHECK_EQ(rc.st.implicit_bytes, 3 * 4096);
    GV_CHECK_EQ(rc.st.evictions, 0);
    GV_CHECK_OK(gv_rc_get(&rc, mem + 100, 10, &a)); /* touch: a is most recent */
    gv_rc_put(&rc, a);
    GV_CHECK_OK(gv_rc_get(&rc, mem + 8 * 4096, 4096, &d)); /* over the cap: evict LRU = c */
    GV_CHECK_EQ(rc.st.evictions, 1);
    GV_CHECK(gv_rc_peek(&rc, mem + 4096, 10) == NULL);
    GV_CHECK(gv_rc_peek(&rc, mem + 10, 10) == a);
    /* entries in use are never evicted, even over the cap */
    struct gv_rc_entry *big;
    GV_CHECK_OK(gv_rc_get(&rc, mem + 16 * 4096, 8 * 4096, &big));
    GV_CHECK(gv_rc_peek(&rc, mem + 8 * 4096, 1) == d); /* d still referenced */
    GV_CHECK(rc.st.implicit_bytes > 3 * 4096);
    gv_rc_put(&rc, d);
    gv_rc_put(&rc, big);
    GV_CHECK(rc.st.implicit_bytes <= 3 * 4096);

    /* explicit entries: never evicted; removal while in use is deferred */
    struct gv_buf buf = {mem + 40 * 4096, 5 * 4096, GV_MEM_HOST, NULL};
    struct gv_rc_entry *x, *y;
    GV_CHECK_OK(gv_rc_add_explicit(&rc, &buf, &x));
    for (int i = 0; i < 6; i++) {
        GV_CHECK_OK(gv_rc_get(&rc, mem + (size_t)(48 + i % 3) * 4096, 4096, &a));
        gv_rc_put(&rc, a);
    }
    GV_CHECK_OK(gv_rc_get(&rc, mem + 41 * 4096, 100, &y));
    GV_CHECK(x == y);
    int before = live_regs(&e);
    gv_rc_remove(&rc, x);
    GV_CHECK(gv_rc_peek(&rc, mem + 41 * 4096, 100) == NULL);
    GV_CHECK_EQ(live_regs(&e), before); /* still registered: in use */
    gv_rc_put(&rc, y);
    GV_CHECK_EQ(live_regs(&e), before - 1);
    GV_CHECK_STATUS(gv_rc_get(&rc, mem, 0, &a), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_rc_get(&rc, (void *)(UINTPTR_MAX - 10), 100, &a), GV_ERR_INVAL);
    struct gv_buf empty = {NULL, 0, GV_MEM_HOST, NULL};
    GV_CHECK_STATUS(gv_rc_add_explicit(&rc, &empty, &x), GV_ERR_INVAL);
    e.fail_reg = 1;
    GV_CHECK_STATUS(gv_rc_get(&rc, mem + 60 * 4096, 10, &a), GV_ERR_IO);
    GV_CHECK_EQ(rc.st.reg_failures, 1);
    e.fail_reg = 0;
    gv_rc_cleanup(&rc);
    GV_CHECK_EQ(live_regs(&e), 0);

    /* cap 0: register per use */
    gv_rc_init(&rc, &fake_rc_ops, &e, 0, 8, 4096);
    GV_CHECK_OK(gv_rc_get(&rc, mem, 10, &a));
    GV_CHECK_EQ(live_regs(&e), 1);
    gv_rc_put(&rc, a);
    GV_CHECK_EQ(live_regs(&e), 0);
    gv_rc_cleanup(&rc);

    /* entry cap */
    gv_rc_init(&rc, &fake_rc_ops, &e, 1u << 30, 4, 4096);
    for (int i = 0; i < 10; i++) {
        GV_CHECK_OK(gv_rc_get(&rc, mem + (size_t)i * 4096, 10, &a));
        gv_rc_put(&rc, a);
    }
    GV_CHECK_EQ(rc.st.implicit_entries, 4);
    GV_CHECK_EQ(rc.st.evictions, 6);
    gv_rc_cleanup(&rc);
    GV_CHECK_EQ(live_regs(&e), 0);
    free(mem);
}

/* Registration failure of a rendezvous source is reported by send; of a destination, it
 * closes the connection with the status. */
static void test_reg_failure(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    struct env e;
    env_init(&e, &cfg, 131);
    e.fail_reg = 1;
    GV_CHECK_STATUS(app_send(&e.a, 16, 200000, 2), GV_ERR_IO);
    GV_CHECK_EQ(e.a.op_tail, 0);
    e.fail_reg = 0;
    GV_CHECK_STATUS(app_send(&e.a, 16, 200000, 2), GV_INPROGRESS);
    e.fail_reg = 1;
    exec_op(&e.a); /* b cannot register its destination */
    GV_CHECK_STATUS(e.b.err, GV_ERR_IO);
    e.fail_reg = 0;
    env_free(&e);
}

#define RUN(t)                                                                                     \
    do {                                                                                           \
        int before_ = gv_check_failed_;                                                            \
        t();                                                                                       \
        printf("%-28s %s\n", #t, gv_check_failed_ == before_ ? "ok" : "FAILED");                   \
    } while (0)

int main(void)
{
    gv_log_set_level(GV_LOG_WARN);
    RUN(test_encodings);
    RUN(test_eager_stream);
    RUN(test_burst_no_overrun);
    RUN(test_bidirectional_mixed);
    RUN(test_rendezvous_scatter);
    RUN(test_rendezvous_discard);
    RUN(test_long_headers);
    RUN(test_dead_peer);
    RUN(test_signalling);
    RUN(test_send_contract);
    RUN(test_bad_peer_data);
    RUN(test_close_from_callback);
    RUN(test_close_drains);
    RUN(test_device_memory);
    RUN(test_regcache);
    RUN(test_reg_failure);
    return gv_check_summary();
}
