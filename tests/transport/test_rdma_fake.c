/* test_rdma_fake.c: the fake RC wire, registrations and applications of the RDMA protocol
 * tests (see test_rdma_fake.h). */
#include "test_rdma_fake.h"

uint64_t rnd(struct env *e)
{
    e->rng ^= e->rng << 13;
    e->rng ^= e->rng >> 7;
    e->rng ^= e->rng << 17;
    return e->rng;
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

const struct gv_rc_ops fake_rc_ops = {fake_reg, fake_dereg};

int live_regs(struct env *e)
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
void exec_op(struct side *s)
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
void report_cq(struct side *s)
{
    uint32_t seq = s->cq[s->cq_head++ % OPQ];
    s->done = (uint64_t)seq + 1;
    note_err(s, gv_rp_on_send_done(&s->pc, seq % s->env->cfg.sq_depth, s->env->now));
}

static int wire_busy(struct side *s)
{
    return s->op_head != s->op_tail || s->cq_head != s->cq_tail;
}

/* One random step; 0 when nothing was in flight. Resumed receives run first, as they do at
 * the start of a progress() call. */
int step(struct env *e)
{
    struct side *sides[2] = {&e->a, &e->b};
    int resumed = 0;
    for (int i = 0; i < 2 && e->a.err == GV_OK && e->b.err == GV_OK; i++) {
        if (gv_rp_resume_pending(&sides[i]->pc)) {
            note_err(sides[i], gv_rp_run_resumed(&sides[i]->pc, e->now));
            resumed = 1;
        }
    }
    if (e->a.err != GV_OK || e->b.err != GV_OK)
        return 0; /* a real transport closes the connection here */
    if (!wire_busy(&e->a) && !wire_busy(&e->b))
        return resumed;
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

int run_quiet(struct env *e, long max_steps)
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

uint64_t msg_seq(const void *msg)
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
    uint64_t seq = msg_seq(msg);
    s->headers++;
    if ((int64_t)seq == s->close_in_header)
        (void)gv_rp_close_begin(&s->pc); /* what gv_tp_conn_close does first */
    if (s->again_seq >= 0 && (uint64_t)s->again_seq != seq)
        s->bad_resume++; /* a deferred message must come back first */
    if (s->defer_rounds > 0 && (int64_t)seq != s->again_seq)
        s->again_left = (int)(seq % (uint64_t)s->defer_rounds);
    if ((s->defer && seq >= s->defer_from) || (s->defer_rounds > 0 && s->again_left-- > 0)) {
        s->again_seq = (int64_t)seq;
        s->agains++;
        return GV_ERR_AGAIN;
    }
    s->again_seq = -1;
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
    struct side *s = x->s;
    if (s->resume_in_cb) { /* resumes from inside a callback: on_header must not run here */
        uint64_t before = s->headers;
        s->resume_in_cb = 0;
        s->defer = 0;
        s->resume_cb_status = gv_rp_resume_recv(&s->pc);
        s->resume_cb_headers += s->headers - before;
    }
}

/* Sends message seq with a hdr_len-byte header and payload_len bytes in niov pieces.
 * Returns the send status; GV_ERR_AGAIN also when the application has no free buffer. */
gv_status_t app_send(struct side *s, uint32_t hdr_len, uint32_t payload_len, int niov)
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

struct gv_rp_cfg default_cfg(void)
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
    s->close_in_header = -1;
    s->again_seq = -1;
    s->resume_cb_status = GV_ERR_INVAL; /* not called yet */
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

gv_status_t env_setup(struct env *e, const struct gv_rp_cfg *cfg, uint64_t seed)
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
        gv_status_t status = gv_rp_init(&s[i]->pc, cfg, &prm, s[i]->slots, s[i]->slot_key,
                                        &s[i]->rc, &fake_wire, s[i], &s[i]->uc, &s[i]->h, s[i]);
        if (status == GV_OK)
            status = gv_rp_post_recvs(&s[i]->pc);
        if (status != GV_OK)
            return status;
    }
    return GV_OK;
}

void env_free(struct env *e)
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

void dump(const struct side *s)
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

int pump_sends(struct env *e, struct side *s, uint64_t count, size_fn size_of)
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
            fprintf(stderr, "pump_sends: send %llu: %s\n", (unsigned long long)i,
                    gv_status_str(st));
            return 0;
        }
        if (!step(e) || ++guard > 2000000) {
            fprintf(stderr, "pump_sends: stuck at message %llu (nothing in flight)\n",
                    (unsigned long long)i);
            dump(&e->a);
            dump(&e->b);
            return 0;
        }
    }
    return run_quiet(e, 2000000);
}

/* ---------------------------------------------------------------- size mixes */

void sz_small(struct env *e, uint64_t i, uint32_t *hdr, uint32_t *pay, int *niov)
{
    *hdr = 8 + (uint32_t)(rnd(e) % 40);
    *pay = i % 5 == 0 ? 0 : (uint32_t)(rnd(e) % 700);
    *niov = 1 + (int)(i % 3);
}

void sz_mixed(struct env *e, uint64_t i, uint32_t *hdr, uint32_t *pay, int *niov)
{
    *hdr = 8 + (uint32_t)(rnd(e) % 64);
    uint64_t r = rnd(e) % 10;
    *pay = r < 6 ? (uint32_t)(rnd(e) % 900) : (uint32_t)(1000 + rnd(e) % 60000);
    *niov = 1 + (int)(i % 4);
}

void sz_large(struct env *e, uint64_t i, uint32_t *hdr, uint32_t *pay, int *niov)
{
    (void)i;
    *hdr = 16;
    *pay = (uint32_t)(200000 + rnd(e) % 100000);
    *niov = 4;
}

void sz_fixed(struct env *e, uint64_t i, uint32_t *hdr, uint32_t *pay, int *niov)
{
    (void)e;
    *hdr = 16;
    *pay = 250000;
    *niov = 1 + (int)(i % 4);
}

void sz_bighdr(struct env *e, uint64_t i, uint32_t *hdr, uint32_t *pay, int *niov)
{
    *hdr = 2000 + (uint32_t)(rnd(e) % 5000); /* several RTS fragments */
    *pay = i % 2 ? 0 : (uint32_t)(rnd(e) % 5000);
    *niov = 2;
}

/* ---------------------------------------------------------------- tests */
