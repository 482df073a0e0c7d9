/* test_rdma_proto.c: the RDMA protocol (credits, send slots, signalling, eager/rendezvous,
 * in-order delivery, timeouts) and the registration cache, without a device, over the fake
 * RC wire of test_rdma_fake.c. Deferred receive has its own file, test_rdma_defer.c. */
#include "test_rdma_fake.h"

#include <stdlib.h>
#include <string.h>

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
