/* test_round_policy.c: the membership decision of a round (the dead-worker policy and
 * --min-workers, applied by round.c alone), case by case and fed by ops/'s liveness tracker. */
#include "check.h"
#include "srv.h"

#include <string.h>

#define MS 1000000ull
#define S 1000000000ull

struct round_case {
    enum gv_dead_policy policy;
    uint32_t min_workers;
    const char *expected, *arrived, *dead; /* one char per worker, '1' = true */
    enum srv_memb_action action;
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
        {A, 1, "1111", "1111", "0000", SRV_MEMB_COMPLETE, 4, 0, ""},
        {A, 1, "1111", "1110", "0000", SRV_MEMB_WAIT, 0, 0, ""},
        {A, 1, "1111", "1110", "0001", SRV_MEMB_ABORT, 0, 1,
         "worker 3 is dead (1 of 4 expected workers dead) and the policy is abort"},
        {A, 1, "1111", "1111", "0100", SRV_MEMB_ABORT, 0, 0,
         "worker 1 is dead (1 of 4 expected workers dead) and the policy is abort"},
        {A, 1, "1101", "1101", "0010", SRV_MEMB_COMPLETE, 3, 0, ""}, /* dead but not expected */
        {C, 1, "1111", "1110", "0001", SRV_MEMB_COMPLETE, 3, 1,
         "continuing without 1 dead worker (first: worker 3); averaging over 3"},
        {C, 1, "1111", "1010", "0101", SRV_MEMB_COMPLETE, 2, 2,
         "continuing without 2 dead workers (first: worker 1); averaging over 2"},
        {C, 1, "1111", "1100", "0001", SRV_MEMB_WAIT, 0, 1, ""},
        {C, 1, "1111", "1111", "0001", SRV_MEMB_COMPLETE, 4, 0, ""}, /* arrived, then died */
        {C, 3, "1111", "1100", "0011", SRV_MEMB_ABORT, 0, 2,
         "only 2 of 4 expected workers delivered (2 dead); at least 3 needed"},
        {C, 0, "1111", "0000", "1111", SRV_MEMB_ABORT, 0, 4,
         "only 0 of 4 expected workers delivered (4 dead); at least 1 needed"},
        {C, 1, "1101", "1111", "0000", SRV_MEMB_COMPLETE, 3, 0, ""}, /* unexpected arrival */
        {C, 1, "0000", "0000", "0000", SRV_MEMB_ABORT, 0, 0,
         "only 0 of 0 expected workers delivered (0 dead); at least 1 needed"},
    };
    for (size_t i = 0; i < GV_ARRAY_LEN(cases); i++) {
        const struct round_case *c = &cases[i];
        bool e[4], a[4], d[4];
        struct srv_memb_decision dec;
        bools(c->expected, e);
        bools(c->arrived, a);
        bools(c->dead, d);
        srv_memb_decide(c->policy, c->min_workers, 7, 4, e, a, d, &dec);
        GV_CHECK_MSG(dec.action == c->action, "case %zu: action %d, want %d", i, dec.action,
                     c->action);
        GV_CHECK_MSG(dec.n_average == c->n_average, "case %zu: n_average %u", i, dec.n_average);
        GV_CHECK_MSG(dec.n_missing == c->n_missing, "case %zu: n_missing %u", i, dec.n_missing);
        GV_CHECK_MSG(strcmp(dec.reason, c->reason) == 0, "case %zu: reason '%s'", i, dec.reason);
    }
}

/* Liveness feeding the round decision, as the server will: worker 2 stops sending. */
static void test_together(void)
{
    struct gv_liveness lv;
    GV_CHECK_OK(gv_liveness_init(&lv, 3, 2 * S, 0));
    bool expected[3] = {true, true, true}, arrived[3] = {false}, dead[3] = {false};
    struct srv_memb_decision d;
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
        srv_memb_decide(GV_DEAD_CONTINUE, 2, (uint64_t)round, 3, expected, arrived, dead, &d);
        /* 500 ms per round: worker 2 last seen at 2.0 s, dead once silent > 2 s, at 4.5 s */
        if (round < 5)
            GV_CHECK_EQ(d.action, SRV_MEMB_COMPLETE);
        else if (round < 9)
            GV_CHECK_MSG(d.action == SRV_MEMB_WAIT, "round %d: %d", round, d.action);
        else
            GV_CHECK_MSG(d.action == SRV_MEMB_COMPLETE && d.n_average == 2, "round %d", round);
        if (round == 9)
            GV_CHECK_EQ(n, 1);
        t += 500 * MS;
    }
    gv_liveness_cleanup(&lv);
}

/* Fewer workers left for the next round than --min-workers: the job stops, naming the round. */
static void test_too_few_next(void)
{
    bool expected[3] = {true, true, true}, arrived[3] = {true, true, true};
    bool dead[3] = {false, true, true};
    struct srv_memb_decision d;
    srv_memb_decide(GV_DEAD_CONTINUE, 2, 12, 3, expected, arrived, dead, &d);
    GV_CHECK_EQ(d.action, SRV_MEMB_TOO_FEW);
    GV_CHECK_STREQ(d.reason, "only 1 of 3 workers are left after iteration 12 and at least 2 "
                             "are needed (--min-workers)");
    dead[2] = false;
    srv_memb_decide(GV_DEAD_CONTINUE, 2, 12, 3, expected, arrived, dead, &d);
    GV_CHECK_EQ(d.action, SRV_MEMB_COMPLETE);
    GV_CHECK_EQ(d.n_average, 3);
    GV_CHECK_EQ(d.n_next, 2);
}

int main(void)
{
    test_rounds();
    test_together();
    test_too_few_next();
    return gv_check_summary();
}
