/* test_liveness.c: dead-peer detection with explicit times. The round decisions of the
 * dead-worker policy are the server's (tests/server/test_round_policy.c). */
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

int main(void)
{
    test_detection();
    GV_CHECK_STREQ(gv_dead_policy_str(GV_DEAD_ABORT), "abort");
    GV_CHECK_STREQ(gv_dead_policy_str(GV_DEAD_CONTINUE), "continue");
    return gv_check_summary();
}
