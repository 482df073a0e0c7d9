/* test_rdma_defer.c: deferred receive (GV_TP_CAP_DEFER_RECV) in the RDMA protocol, over the fake
 * RC wire of test_rdma_fake.c: on_header answers GV_ERR_AGAIN and the message waits (a
 * rendezvous without its CTS, an eager message in its receive slot with its credit kept),
 * later messages wait behind it, gv_rp_resume_recv brings on_header back with the same
 * header; several deferrals in a row, resume from a callback, the I/O timeout, close while
 * deferred, bursts against a deferring receiver, and the keepalive probe that must not take
 * the last credit when both sides hold each other's receives. */
#include "test_rdma_fake.h"

#include <stdlib.h>
#include <string.h>

static uint32_t posted_recvs(const struct side *s)
{
    return (uint32_t)(s->rq_tail - s->rq_head);
}

/* The message the sender queued at ring position c (tests look at its state). */
static const struct gv_rp_smsg *smsg(const struct side *s, uint64_t c)
{
    return &s->pc.msgs[c % s->pc.cfg.max_send_queue];
}

/* Resumes s (clearing its defer flag first when `accept`) and runs the wire dry. */
static int resume_and_run(struct env *e, struct side *s, int accept)
{
    if (accept)
        s->defer = 0;
    uint64_t headers = s->headers;
    GV_CHECK_OK(gv_rp_resume_recv(&s->pc));
    GV_CHECK_EQ(s->headers, headers); /* never from inside the resume call */
    GV_CHECK(gv_rp_resume_pending(&s->pc));
    return run_quiet(e, 2000000);
}

/* An eager message deferred: it keeps its receive slot and its credit; on resume on_header
 * sees the same message again and the payload is copied out intact. */
static void test_eager(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    struct env e;
    env_init(&e, &cfg, 201);
    GV_CHECK_OK(gv_rp_resume_recv(&e.b.pc)); /* nothing deferred: a no-op */
    GV_CHECK(!gv_rp_resume_pending(&e.b.pc));
    e.b.defer = 1;
    GV_CHECK_STATUS(app_send(&e.a, 20, 300, 2), GV_OK);
    GV_CHECK(run_quiet(&e, 100000));
    GV_CHECK_EQ(e.b.delivered, 0);
    GV_CHECK_EQ(e.b.headers, 1);
    GV_CHECK_EQ(e.b.agains, 1);
    GV_CHECK(gv_rp_deferred(&e.b.pc));
    GV_CHECK(e.b.pc.rx.slot >= 0);
    /* the slot is not reposted, nor its credit owed */
    GV_CHECK_EQ(posted_recvs(&e.b), cfg.rx_depth);
    GV_CHECK_EQ(e.a.pc.credits + e.b.pc.owed, cfg.rx_depth - 1);
    GV_CHECK_OK(gv_rp_check_timeout(&e.b.pc, e.now + 10 * cfg.io_timeout_ns));
    GV_CHECK(resume_and_run(&e, &e.b, 1));
    GV_CHECK_OK(gv_rp_resume_recv(&e.b.pc)); /* twice: harmless */
    GV_CHECK(!gv_rp_resume_pending(&e.b.pc));
    GV_CHECK_EQ(e.b.delivered, 1);
    GV_CHECK_EQ(e.b.headers, 2);
    GV_CHECK_EQ(e.b.bad_resume, 0);
    GV_CHECK_EQ(e.b.pc.st.deferrals, 1);
    GV_CHECK(!gv_rp_deferred(&e.b.pc));
    GV_CHECK_EQ(e.b.pc.uc->bytes_recv, PFX + 20 + 300);
    check_wire_clean(&e);
    check_credits_conserved(&e);
    env_free(&e);
}

/* A rendezvous deferred: no CTS goes out and nothing is registered, the sender waits for the
 * CTS with its callback pending; on resume the payload is written straight into the
 * destinations. Also with a header longer than a slot (RTS + RTS_CONT reassembled). */
static void test_rendezvous(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    for (int longhdr = 0; longhdr <= 1; longhdr++) {
        struct env e;
        env_init(&e, &cfg, 211 + (uint64_t)longhdr);
        e.b.pol = POL_SPLIT;
        e.b.defer = 1;
        uint32_t hdr = longhdr ? 3000 : 16;
        GV_CHECK_STATUS(app_send(&e.a, hdr, 200000, 3), GV_INPROGRESS);
        GV_CHECK(run_quiet(&e, 100000));
        GV_CHECK_EQ(e.b.headers, 1);
        GV_CHECK_EQ(e.b.pc.st.cts, 0);
        GV_CHECK_EQ(e.b.rc.st.entries, 0);
        GV_CHECK_EQ(e.b.pc.rx.state, GV_RP_RX_DEFERRED);
        GV_CHECK_EQ(smsg(&e.a, 0)->state, GV_RP_S_WAIT_CTS);
        GV_CHECK_EQ(e.a.cb_ok + e.a.cb_err, 0);
        GV_CHECK_EQ(e.a.pc.st.writes, 0);
        GV_CHECK(resume_and_run(&e, &e.b, 1));
        GV_CHECK_EQ(e.b.delivered, 1);
        GV_CHECK_EQ(e.b.headers, 2);
        GV_CHECK_EQ(e.b.pc.st.cts, 1);
        GV_CHECK_EQ(e.a.cb_ok, 1);
        GV_CHECK_EQ(e.a.pc.st.bytes_written, 200000);
        GV_CHECK_EQ(e.b.bad_resume, 0);
        check_wire_clean(&e);
        check_credits_conserved(&e);
        env_free(&e);
    }
}

/* Several deferrals in a row: each resume brings on_header back for the same message, which
 * may defer it again; nothing else is delivered meanwhile. Eager, rendezvous, long header. */
static void test_repeated(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    const uint32_t hdrs[3] = {16, 16, 4000}, pays[3] = {500, 100000, 2000};
    for (int k = 0; k < 3; k++) {
        struct env e;
        env_init(&e, &cfg, 221 + (uint64_t)k);
        e.b.defer = 1;
        app_send(&e.a, hdrs[k], pays[k], 2);
        app_send(&e.a, 16, 100, 1); /* behind it */
        GV_CHECK(run_quiet(&e, 100000));
        for (int round = 0; round < 5; round++) {
            GV_CHECK(resume_and_run(&e, &e.b, 0));
            GV_CHECK(gv_rp_deferred(&e.b.pc));
        }
        GV_CHECK_EQ(e.b.headers, 6);
        GV_CHECK_EQ(e.b.agains, 6);
        GV_CHECK_EQ(e.b.delivered, 0);
        GV_CHECK_EQ(e.b.pc.st.cts, 0);
        GV_CHECK(resume_and_run(&e, &e.b, 1));
        GV_CHECK_EQ(e.b.delivered, 2);
        GV_CHECK_EQ(e.b.headers, 8);
        GV_CHECK_EQ(e.b.bad_resume, 0);
        GV_CHECK_EQ(e.a.cb_err, 0);
        check_wire_clean(&e);
        check_credits_conserved(&e);
        env_free(&e);
    }
}

/* Messages of every kind queued behind a deferred one stay behind it: none of them reaches
 * on_header until it is delivered, then all of them arrive in order. Then on_msg of the
 * resumed message closes the connection: nothing after it is delivered. */
static void test_queued_behind(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    for (uint64_t seed = 231; seed <= 234; seed++) {
        struct env e;
        env_init(&e, &cfg, seed);
        e.b.pol = POL_SPLIT;
        e.b.defer = 1;
        e.b.defer_from = 3;
        int closing = seed == 234;
        if (closing)
            e.b.close_at_seq = 3;
        long guard = 0;
        uint64_t n = 0;
        while (n < 40 && guard++ < 100000) { /* as many as the sender takes */
            uint32_t hdr, pay;
            int niov;
            sz_mixed(&e, n, &hdr, &pay, &niov);
            gv_status_t st = app_send(&e.a, hdr, pay, niov);
            if (st == GV_OK || st == GV_INPROGRESS)
                n++;
            else if (!step(&e))
                break;
        }
        GV_CHECK(run_quiet(&e, 2000000));
        GV_CHECK(n > 10);
        GV_CHECK_EQ(e.b.delivered, 3);
        GV_CHECK_EQ(e.b.headers, 4); /* 0, 1, 2 and the deferred 3: nothing behind it */
        GV_CHECK(gv_rp_deferred(&e.b.pc));
        GV_CHECK(e.b.pc.st.max_held >= 2);
        GV_CHECK(e.b.pc.st.max_held <= cfg.rx_depth);
        GV_CHECK(resume_and_run(&e, &e.b, 1));
        if (closing) {
            GV_CHECK_EQ(e.b.delivered, 4);
            GV_CHECK(e.b.pc.dead);
            GV_CHECK_EQ(e.b.bad_order, 0);
            env_free(&e);
            continue;
        }
        /* what the sender could not queue while b deferred goes now */
        GV_CHECK(pump_sends(&e, &e.a, 40 - n, sz_mixed));
        GV_CHECK_EQ(e.b.delivered, 40);
        GV_CHECK_EQ(e.b.bad_resume, 0);
        GV_CHECK_EQ(e.a.cb_err, 0);
        GV_CHECK_EQ(e.a.cb_ok, e.a.inprog);
        check_wire_clean(&e);
        check_credits_conserved(&e);
        env_free(&e);
    }
}

/* A resume from inside a callback (here b's own send completing) only marks the connection;
 * on_header runs at the next progress. */
static void test_resume_in_callback(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    struct env e;
    env_init(&e, &cfg, 241);
    e.b.defer = 1;
    app_send(&e.a, 16, 700, 1);
    app_send(&e.a, 16, 50000, 1);
    GV_CHECK(run_quiet(&e, 100000));
    GV_CHECK_EQ(e.b.delivered, 0);
    e.b.resume_in_cb = 1;
    GV_CHECK_STATUS(app_send(&e.b, 16, 90000, 2), GV_INPROGRESS);
    GV_CHECK(run_quiet(&e, 1000000));
    GV_CHECK_EQ(e.b.cb_ok, 1);
    GV_CHECK_OK(e.b.resume_cb_status);
    GV_CHECK_EQ(e.b.resume_cb_headers, 0);
    GV_CHECK_EQ(e.b.delivered, 2);
    GV_CHECK_EQ(e.a.delivered, 1);
    check_wire_clean(&e);
    check_credits_conserved(&e);
    env_free(&e);
}

/* The I/O timeout: a deferring receiver is not waiting on its peer, so it never times out
 * for that; after a resume the clock starts again (a rendezvous resumed after a long wait
 * must not be called stalled). The sender of a deferred rendezvous waits for its CTS and
 * does time out, as a TCP sender whose message waits in a full socket does. */
static void test_timeout(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    struct env e;
    env_init(&e, &cfg, 251);
    e.b.defer = 1;
    GV_CHECK_STATUS(app_send(&e.a, 16, 200000, 1), GV_INPROGRESS);
    GV_CHECK(run_quiet(&e, 100000));
    GV_CHECK(gv_rp_deferred(&e.b.pc));
    e.now += 5 * cfg.io_timeout_ns;
    GV_CHECK_OK(gv_rp_check_timeout(&e.b.pc, e.now));
    GV_CHECK_STATUS(gv_rp_check_timeout(&e.a.pc, e.now), GV_ERR_TIMEOUT);
    e.b.defer = 0;
    GV_CHECK_OK(gv_rp_resume_recv(&e.b.pc));
    GV_CHECK_OK(gv_rp_run_resumed(&e.b.pc, e.now)); /* CTS posted, rendezvous under way */
    GV_CHECK_EQ(e.b.pc.rx.state, GV_RP_RX_WAIT_FIN);
    GV_CHECK_OK(gv_rp_check_timeout(&e.b.pc, e.now + cfg.io_timeout_ns / 2));
    GV_CHECK_STATUS(gv_rp_check_timeout(&e.b.pc, e.now + 2 * cfg.io_timeout_ns),
                    GV_ERR_TIMEOUT); /* a stalled rendezvous still counts */
    GV_CHECK(run_quiet(&e, 100000));
    GV_CHECK_EQ(e.b.delivered, 1);
    GV_CHECK_OK(gv_rp_check_timeout(&e.b.pc, e.now + 10 * cfg.io_timeout_ns));

    /* an eager message deferred: its sender is done, nobody times out */
    e.b.defer = 1;
    GV_CHECK_STATUS(app_send(&e.a, 16, 100, 1), GV_OK);
    GV_CHECK(run_quiet(&e, 100000));
    e.now += 5 * cfg.io_timeout_ns;
    GV_CHECK_OK(gv_rp_check_timeout(&e.a.pc, e.now));
    GV_CHECK_OK(gv_rp_check_timeout(&e.b.pc, e.now));
    GV_CHECK(resume_and_run(&e, &e.b, 1));
    GV_CHECK_EQ(e.b.delivered, 2);
    env_free(&e);
}

/* Closing while deferred. A local close is not "midway" for a deferred message (no CTS was
 * sent): sends accepted with GV_OK still go out, those with a pending callback fail once,
 * the deferred message is dropped (on_header never runs again) and resume says closed. With
 * a rendezvous of our own half done the close is immediate; the peer, failed in turn, fails
 * its deferred message's callback exactly once. */
static void test_close(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    struct env e;
    env_init(&e, &cfg, 261);
    e.b.defer = 1;
    app_send(&e.a, 16, 400, 1);
    app_send(&e.a, 16, 600, 1);
    GV_CHECK(run_quiet(&e, 100000));
    GV_CHECK(gv_rp_deferred(&e.b.pc));
    int ok = 0, inprog = 0;
    for (int i = 0; i < 20; i++) {
        gv_status_t st = app_send(&e.b, 8, 300, 1);
        ok += st == GV_OK;
        inprog += st == GV_INPROGRESS;
    }
    GV_CHECK(ok > 0 && inprog > 0);
    GV_CHECK_EQ(gv_rp_close_begin(&e.b.pc), 1); /* lingers for the GV_OK ones */
    GV_CHECK_EQ(e.b.cb_err, inprog);
    GV_CHECK_STATUS(gv_rp_resume_recv(&e.b.pc), GV_ERR_CLOSED);
    GV_CHECK(!gv_rp_deferred(&e.b.pc));
    GV_CHECK(run_quiet(&e, 100000));
    GV_CHECK(gv_rp_drained(&e.b.pc));
    GV_CHECK_EQ(e.a.delivered, (uint64_t)ok);
    GV_CHECK_EQ(e.b.headers, 1);
    GV_CHECK_EQ(e.b.delivered, 0);
    GV_CHECK_EQ(e.b.cb_err, inprog); /* once each */
    env_free(&e);

    env_init(&e, &cfg, 262);
    e.b.defer = 1;
    GV_CHECK_STATUS(app_send(&e.a, 16, 300000, 2), GV_INPROGRESS);
    GV_CHECK(run_quiet(&e, 100000));
    GV_CHECK_STATUS(app_send(&e.b, 16, 300000, 2), GV_INPROGRESS);
    exec_op(&e.b); /* b's RTS reaches a, whose CTS is on its way: b's rendezvous is half done */
    GV_CHECK_EQ(gv_rp_close_begin(&e.b.pc), 0);
    GV_CHECK(e.b.pc.dead);
    GV_CHECK_EQ(e.b.cb_err, 1);
    GV_CHECK_STATUS(gv_rp_resume_recv(&e.b.pc), GV_ERR_CLOSED);
    gv_rp_fail(&e.a.pc, GV_ERR_CLOSED); /* a learns of the disconnect */
    GV_CHECK_EQ(e.a.cb_err, 1);
    GV_CHECK_STATUS(e.a.last_cb_status, GV_ERR_CLOSED);
    gv_rp_fail(&e.a.pc, GV_ERR_CLOSED);
    gv_rp_fail(&e.b.pc, GV_ERR_CLOSED);
    GV_CHECK_EQ(e.a.cb_err + e.b.cb_err, 2);
    GV_CHECK(e.a.rc.head == NULL || e.a.rc.head->refs == 0); /* nothing left in use */
    GV_CHECK(e.b.rc.head == NULL || e.b.rc.head->refs == 0);
    GV_CHECK_EQ(e.b.headers, 1);
    env_free(&e);
}

/* on_header may close its connection (and may then answer GV_ERR_AGAIN or GV_OK): the
 * message is not delivered, no CTS goes out, nothing is registered, nothing is deferred. */
static void test_close_in_header(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    for (int k = 0; k < 4; k++) {
        struct env e;
        env_init(&e, &cfg, 265 + (uint64_t)k);
        e.b.close_in_header = 1;
        e.b.defer = k >= 2;
        e.b.defer_from = 1;
        app_send(&e.a, 16, 100, 1);
        app_send(&e.a, 16, k % 2 ? 100000 : 300, 1);
        app_send(&e.a, 16, 100, 1);
        GV_CHECK(run_quiet(&e, 100000));
        GV_CHECK_EQ(e.b.headers, 2);
        GV_CHECK_EQ(e.b.delivered, 1);
        GV_CHECK_EQ(e.b.pc.st.cts, 0);
        GV_CHECK_EQ(e.b.rc.st.entries, 0);
        GV_CHECK(!gv_rp_deferred(&e.b.pc));
        GV_CHECK_STATUS(gv_rp_resume_recv(&e.b.pc), GV_ERR_CLOSED);
        GV_CHECK_STATUS(e.b.err, GV_OK);
        env_free(&e);
    }
}

/* A burst against a deferring receiver: the sender stops at its credits (keeping the last
 * one), the receiver holds at most rx_depth slots, nothing overruns, the queue bound says
 * GV_ERR_AGAIN; traffic the other way is unaffected; after the resume everything arrives in
 * order and every credit is back. */
static void test_burst(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    cfg.tx_slots = 16;
    for (uint64_t seed = 271; seed <= 273; seed++) {
        struct env e;
        env_init(&e, &cfg, seed);
        e.b.defer = 1;
        gv_status_t st;
        int sent = 0;
        long guard = 0;
        while (guard++ < 100000) {
            st = app_send(&e.a, 8, (uint32_t)(rnd(&e) % 900), 1);
            if (st == GV_OK || st == GV_INPROGRESS)
                sent++;
            else if (!step(&e))
                break;
        }
        GV_CHECK_STATUS(st, GV_ERR_AGAIN);
        GV_CHECK(run_quiet(&e, 100000));
        GV_CHECK_EQ(e.a.pc.credits, 1);
        GV_CHECK_EQ(e.a.pc.st.min_credits, 1);
        GV_CHECK_EQ(e.a.pc.m_tail - e.a.pc.m_head, cfg.max_send_queue);
        GV_CHECK_EQ(sent, (int)cfg.max_send_queue + (int)cfg.rx_depth - 1);
        GV_CHECK_EQ(e.b.pc.h_tail - e.b.pc.h_head + 1, cfg.rx_depth - 1); /* + the deferred */
        GV_CHECK(e.b.pc.st.max_held <= cfg.rx_depth);
        GV_CHECK_EQ(e.b.delivered, 0);
        GV_CHECK_EQ(e.b.overruns, 0);
        /* the other direction flows while b defers */
        GV_CHECK(pump_sends(&e, &e.b, 300, sz_small));
        GV_CHECK_EQ(e.a.delivered, 300);
        GV_CHECK(gv_rp_deferred(&e.b.pc));
        GV_CHECK(resume_and_run(&e, &e.b, 1));
        GV_CHECK_EQ(e.b.delivered, (uint64_t)sent);
        GV_CHECK_EQ(e.a.cb_ok, e.a.inprog);
        check_wire_clean(&e);
        check_credits_conserved(&e);
        env_free(&e);
    }
}

/* Both sides defer each other's burst, so each holds the other's receives and is down to its
 * last credit with nothing owed. Keepalive probes then must not take that credit: two probes
 * crossing would leave both at zero credits, and after the resumes neither could return the
 * credits it owes (a deadlock). A probe with credits to return, or with credits to spare,
 * still goes out. */
static void test_probe_keeps_last_credit(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    cfg.tx_slots = 16;
    struct env e;
    env_init(&e, &cfg, 281);
    e.a.defer = e.b.defer = 1;
    int sa = 0, sb = 0;
    for (long guard = 0; guard < 100000; guard++) {
        gv_status_t x = app_send(&e.a, 8, 200, 1), y = app_send(&e.b, 8, 200, 1);
        sa += x == GV_OK || x == GV_INPROGRESS;
        sb += y == GV_OK || y == GV_INPROGRESS;
        if (x == GV_ERR_AGAIN && y == GV_ERR_AGAIN && !step(&e))
            break;
    }
    GV_CHECK_EQ(e.a.pc.credits, 1);
    GV_CHECK_EQ(e.b.pc.credits, 1);
    GV_CHECK_EQ(e.a.pc.owed + e.b.pc.owed, 0);
    uint64_t probes = e.a.pc.st.credit_msgs + e.b.pc.st.credit_msgs;
    GV_CHECK_OK(gv_rp_send_probe(&e.a.pc)); /* both keepalives fire before either lands */
    GV_CHECK_OK(gv_rp_send_probe(&e.b.pc));
    GV_CHECK_EQ(e.a.pc.st.credit_msgs + e.b.pc.st.credit_msgs, probes);
    GV_CHECK(run_quiet(&e, 100000));
    e.a.defer = e.b.defer = 0;
    GV_CHECK_OK(gv_rp_resume_recv(&e.a.pc));
    GV_CHECK_OK(gv_rp_resume_recv(&e.b.pc));
    GV_CHECK(run_quiet(&e, 1000000));
    GV_CHECK_EQ(e.b.delivered, (uint64_t)sa);
    GV_CHECK_EQ(e.a.delivered, (uint64_t)sb);
    GV_CHECK(pump_sends(&e, &e.a, 50, sz_small));
    GV_CHECK(pump_sends(&e, &e.b, 50, sz_small));
    GV_CHECK_EQ(e.b.delivered, (uint64_t)sa + 50);
    GV_CHECK_EQ(e.a.delivered, (uint64_t)sb + 50);
    check_wire_clean(&e);
    check_credits_conserved(&e);
    /* at rest with credits to spare, a probe goes out (and its credit comes back) */
    GV_CHECK(e.a.pc.credits >= 2);
    uint64_t before = e.a.pc.st.credit_msgs;
    GV_CHECK_OK(gv_rp_send_probe(&e.a.pc));
    GV_CHECK_EQ(e.a.pc.st.credit_msgs, before + 1);
    GV_CHECK(run_quiet(&e, 100000));
    check_credits_conserved(&e);
    env_free(&e);
}

/* Random deferrals both ways (message seq deferred seq % 4 times), resumed at random moments
 * from outside, with eager, rendezvous and long-header messages in both directions and small
 * windows: everything arrives once, in order, intact; the wire stays clean. */
static void test_random(void)
{
    struct gv_rp_cfg cfg = default_cfg();
    cfg.rx_depth = 4;
    cfg.tx_slots = 6;
    cfg.sq_depth = 8;
    for (uint64_t seed = 291; seed <= 296; seed++) {
        struct env e;
        env_init(&e, &cfg, seed);
        e.a.pol = e.b.pol = POL_SPLIT;
        e.a.defer_rounds = 3;
        e.b.defer_rounds = 4;
        uint64_t na = 0, nb = 0, n = 300;
        long guard = 0;
        while ((e.a.delivered < n || e.b.delivered < n) && guard++ < 3000000 && !e.a.err &&
               !e.b.err) {
            uint32_t hdr, pay;
            int niov;
            if (na < n) {
                if (seed % 2)
                    sz_mixed(&e, na, &hdr, &pay, &niov);
                else
                    sz_bighdr(&e, na, &hdr, &pay, &niov);
                gv_status_t st = app_send(&e.a, hdr, pay, niov);
                na += st == GV_OK || st == GV_INPROGRESS;
            }
            if (nb < n) {
                sz_mixed(&e, nb, &hdr, &pay, &niov);
                gv_status_t st = app_send(&e.b, hdr, pay, niov);
                nb += st == GV_OK || st == GV_INPROGRESS;
            }
            struct side *s = rnd(&e) & 1 ? &e.a : &e.b;
            if (gv_rp_deferred(&s->pc) && rnd(&e) % 4 == 0)
                GV_CHECK_OK(gv_rp_resume_recv(&s->pc));
            step(&e);
        }
        GV_CHECK_EQ(e.b.delivered, n);
        GV_CHECK_EQ(e.a.delivered, n);
        GV_CHECK(e.a.agains > 50 && e.b.agains > 50);
        GV_CHECK_EQ(e.a.bad_resume + e.b.bad_resume, 0);
        GV_CHECK(run_quiet(&e, 1000000));
        check_wire_clean(&e);
        check_credits_conserved(&e);
        GV_CHECK_EQ(e.a.cb_err + e.b.cb_err, 0);
        env_free(&e);
    }
}

#define RUN(t)                                                                                     \
    do {                                                                                           \
        int before_ = gv_check_failed_;                                                            \
        t();                                                                                       \
        printf("%-30s %s\n", #t, gv_check_failed_ == before_ ? "ok" : "FAILED");                   \
    } while (0)

int main(void)
{
    gv_log_set_level(GV_LOG_WARN);
    RUN(test_eager);
    RUN(test_rendezvous);
    RUN(test_repeated);
    RUN(test_queued_behind);
    RUN(test_resume_in_callback);
    RUN(test_timeout);
    RUN(test_close);
    RUN(test_close_in_header);
    RUN(test_burst);
    RUN(test_probe_keeps_last_credit);
    RUN(test_random);
    return gv_check_summary();
}
