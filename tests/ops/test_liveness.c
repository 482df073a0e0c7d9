/* test_liveness.c: dead-peer detection with explicit times, and the round decisions of the
 * dead-worker policy. */
#include "check.h"
#include "gv_ops.h"

#define MS 1000000ull
#define S 1000000000ull

static void test_detection(void)
{
    struct gv_liveness lv;
    uint32_t dead[8];
    size_t n;
    GV_CHECK_STATUS(gv_liveness_init(&lv, 0, 5 * S, 0), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_liveness_init(&lv, 3, 0, 0), GV_ERR_INVAL);
    const uint64_t t0 = 1000 * S;
    GV_CHECK_OK(gv_liveness_init(&lv, 4, 5 * S, t0));
    GV_CHECK_EQ(gv_liveness_state(&lv, 0), GV_PEER_WAITING);
    GV_CHECK_EQ(gv_liveness_next_deadline(&lv, t0), 5 * S + 1);

    GV_CHECK_OK(gv_liveness_seen(&lv, 0, t0 + 1 * S));
    GV_CHECK_OK(gv_liveness_seen(&lv, 1, t0 + 2 * S));
    GV_CHECK_OK(gv_liveness_seen(&lv, 2, t0 + 3 * S));
    GV_CHECK_STATUS(gv_liveness_seen(&lv, 4, t0), GV_ERR_INVAL);
    GV_CHECK_EQ(gv_liveness_state(&lv, 1), GV_PEER_ALIVE);
    /* an older report does not move the time back */
    GV_CHECK_OK(gv_liveness_seen(&lv, 2, t0 + 1 * S));

    /* silent exactly the timeout: still alive; one nanosecond more: dead */
    gv_liveness_check(&lv, t0 + 5 * S, dead, 8, &n);
    GV_CHECK_EQ(n, 0);
    gv_liveness_check(&lv, t0 + 5 * S + 1, dead, 8, &n);
    GV_CHECK_EQ(n, 1);
    GV_CHECK_EQ(dead[0], 3);
    GV_CHECK_STREQ(gv_liveness_why(&lv, 3), "never heard from for 5000 ms (timeout 5000 ms)");
    GV_CHECK_EQ(gv_liveness_next_deadline(&lv, t0 + 5 * S + 1), 1 * S);

    gv_liveness_check(&lv, t0 + 6 * S + 1, dead, 8, &n);
    GV_CHECK_EQ(n, 1);
    GV_CHECK_EQ(dead[0], 0);
    GV_CHECK_STREQ(gv_liveness_why(&lv, 0), "silent for 5000 ms (timeout 5000 ms)");
    /* death is sticky: a late message does not revive, and a dead peer is reported once */
    GV_CHECK_OK(gv_liveness_seen(&lv, 0, t0 + 7 * S));
    GV_CHECK_EQ(gv_liveness_state(&lv, 0), GV_PEER_DEAD);
    gv_liveness_check(&lv, t0 + 7 * S + 1, dead, 8, &n);
    GV_CHECK_EQ(n, 1);
    GV_CHECK_EQ(dead[0], 1);

    /* a transport error kills at once, keeps its first reason */
    GV_CHECK_OK(gv_liveness_mark_dead(&lv, 2, "connection reset by peer"));
    GV_CHECK_OK(gv_liveness_mark_dead(&lv, 2, "second"));
    GV_CHECK_STREQ(gv_liveness_why(&lv, 2), "connection reset by peer");
    GV_CHECK_EQ(gv_liveness_next_deadline(&lv, t0 + 8 * S), UINT64_MAX);
    gv_liveness_check(&lv, t0 + 100 * S, dead, 8, &n);
    GV_CHECK_EQ(n, 0);

    /* a peer that came back and authenticated again */
    GV_CHECK_OK(gv_liveness_revive(&lv, 2, t0 + 100 * S));
    GV_CHECK_EQ(gv_liveness_state(&lv, 2), GV_PEER_ALIVE);
    GV_CHECK_STREQ(gv_liveness_why(&lv, 2), "");
    GV_CHECK_EQ(gv_liveness_next_deadline(&lv, t0 + 101 * S), 4 * S + 1);
    GV_CHECK_STATUS(gv_liveness_mark_dead(&lv, 9, NULL), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_liveness_revive(&lv, 9, 0), GV_ERR_INVAL);
    GV_CHECK_EQ(gv_liveness_state(&lv, 9), GV_PEER_DEAD);
    gv_liveness_cleanup(&lv);

    /* more newly dead than the caller's array holds: all are counted and marked */
    GV_CHECK_OK(gv_liveness_init(&lv, 5, 100 * MS, 0));
    gv_liveness_check(&lv, 200 * MS, dead, 2, &n);
    GV_CHECK_EQ(n, 5);
    GV_CHECK_EQ(dead[0], 0);
    GV_CHECK_EQ(dead[1], 1);
    GV_CHECK_EQ(gv_liveness_state(&lv, 4), GV_PEER_DEAD);
    gv_liveness_cleanup(&lv);
}

struct round_case {
    enum gv_dead_policy policy;
    uint32_t min_workers;
    const char *expected, *arrived, *dead; /* one char per worker, '1' = true */
    enum gv_round_action action;
    uint32_t n_average, n_missing;
    const char *reason;
};

static void bools(const char *s, bool *b)
{
    for (size_t i = 0; s[i]; i++)
        b[i] = s[i] == '1';
}

static void test_rounds(void)
{
    const enum gv_dead_policy A = GV_DEAD_ABORT, C = GV_DEAD_CONTINUE;
    static const struct round_case cases[] = {
        {A, 1, "1111", "1111", "0000", GV_ROUND_COMPLETE, 4, 0, ""},
        {A, 1, "1111", "1110", "0000", GV_ROUND_WAIT, 0, 0, ""},
        {A, 1, "1111", "1110", "0001", GV_ROUND_ABORT, 0, 1,
         "worker 3 is dead (1 of 4 expected workers dead) and the policy is abort"},
        {A, 1, "1111", "1111", "0100", GV_ROUND_ABORT, 0, 0,
         "worker 1 is dead (1 of 4 expected workers dead) and the policy is abort"},
        {A, 1, "1101", "1101", "0010", GV_ROUND_COMPLETE, 3, 0, ""}, /* dead but not expected */
        {C, 1, "1111", "1110", "0001", GV_ROUND_COMPLETE, 3, 1,
         "continuing without 1 dead worker (first: worker 3); averaging over 3"},
        {C, 1, "1111", "1010", "0101", GV_ROUND_COMPLETE, 2, 2,
         "continuing without 2 dead workers (first: worker 1); averaging over 2"},
        {C, 1, "1111", "1100", "0001", GV_ROUND_WAIT, 0, 1, ""},
        {C, 1, "1111", "1111", "0001", GV_ROUND_COMPLETE, 4, 0, ""}, /* arrived, then died */
        {C, 3, "1111", "1100", "0011", GV_ROUND_ABORT, 0, 2,
         "only 2 of 4 expected workers delivered (2 dead); at least 3 needed"},
        {C, 0, "1111", "0000", "1111", GV_ROUND_ABORT, 0, 4,
         "only 0 of 4 expected workers delivered (4 dead); at least 1 needed"},
        {C, 1, "1101", "1111", "0000", GV_ROUND_COMPLETE, 3, 0, ""}, /* unexpected arrival */
        {C, 1, "0000", "0000", "0000", GV_ROUND_ABORT, 0, 0,
         "only 0 of 0 expected workers delivered (0 dead); at least 1 needed"},
    };
    for (size_t i = 0; i < GV_ARRAY_LEN(cases); i++) {
        const struct round_case *c = &cases[i];
        bool e[4], a[4], d[4];
        struct gv_round_decision dec;
        bools(c->expected, e);
        bools(c->arrived, a);
        bools(c->dead, d);
        gv_round_decide(c->policy, c->min_workers, 4, e, a, d, &dec);
        GV_CHECK_MSG(dec.action == c->action, "case %zu: action %d, want %d", i, dec.action,
                     c->action);
        GV_CHECK_MSG(dec.n_average == c->n_average, "case %zu: n_average %u", i, dec.n_average);
        GV_CHECK_MSG(dec.n_missing == c->n_missing, "case %zu: n_missing %u", i, dec.n_missing);
        GV_CHECK_MSG(strcmp(dec.reason, c->reason) == 0, "case %zu: reason '%s'", i, dec.reason);
    }
    GV_CHECK_STREQ(gv_dead_policy_str(GV_DEAD_ABORT), "abort");
    GV_CHECK_STREQ(gv_dead_policy_str(GV_DEAD_CONTINUE), "continue");
}

/* Liveness feeding the round decision, as the server will: worker 2 stops sending. */
static void test_together(void)
{
    struct gv_liveness lv;
    GV_CHECK_OK(gv_liveness_init(&lv, 3, 2 * S, 0));
    bool expected[3] = {true, true, true}, arrived[3] = {false}, dead[3] = {false};
    struct gv_round_decision d;
    uint64_t t = 0;
    for (int round = 0; round < 20; round++) {
        memset(arrived, 0, sizeof(arrived));
        for (uint32_t w = 0; w < 3; w++) {
            if (w == 2 && round >= 5)
                continue; /* worker 2 died after round 4 */
            GV_CHECK_OK(gv_liveness_seen(&lv, w, t));
            arrived[w] = true;
        }
        uint32_t newly[3];
        size_t n;
        gv_liveness_check(&lv, t, newly, 3, &n);
        for (uint32_t w = 0; w < 3; w++)
            dead[w] = gv_liveness_state(&lv, w) == GV_PEER_DEAD;
        gv_round_decide(GV_DEAD_CONTINUE, 2, 3, expected, arrived, dead, &d);
        /* 500 ms per round: worker 2 last seen at 2.0 s, dead once silent > 2 s, at 4.5 s */
        if (round < 5)
            GV_CHECK_EQ(d.action, GV_ROUND_COMPLETE);
        else if (round < 9)
            GV_CHECK_MSG(d.action == GV_ROUND_WAIT, "round %d: %d", round, d.action);
        else
            GV_CHECK_MSG(d.action == GV_ROUND_COMPLETE && d.n_average == 2, "round %d", round);
        if (round == 9)
            GV_CHECK_EQ(n, 1);
        t += 500 * MS;
    }
    gv_liveness_cleanup(&lv);
}

int main(void)
{
    test_detection();
    test_rounds();
    test_together();
    return gv_check_summary();
}
