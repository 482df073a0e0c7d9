/* liveness.c: who is alive, given explicit timestamps, and what a round does about the dead
 * (the dead-worker policy). Pure logic: no clock, no I/O, no threads; the server and worker
 * programs feed it times and act on its answers. */
#include "gv_ops.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

gv_status_t gv_liveness_init(struct gv_liveness *lv, uint32_t n_peers, uint64_t timeout_ns,
                             uint64_t start_ns)
{
    memset(lv, 0, sizeof(*lv));
    if (n_peers == 0 || timeout_ns == 0) {
        gv_log(GV_LOG_ERROR, "liveness: need at least one peer and a non-zero timeout");
        return GV_ERR_INVAL;
    }
    lv->last_seen_ns = gv_calloc(n_peers, sizeof(*lv->last_seen_ns));
    lv->state = gv_calloc(n_peers, sizeof(*lv->state));
    lv->why = gv_calloc(n_peers, sizeof(*lv->why));
    if (lv->last_seen_ns == NULL || lv->state == NULL || lv->why == NULL) {
        gv_liveness_cleanup(lv);
        return GV_ERR_NOMEM;
    }
    lv->n = n_peers;
    lv->timeout_ns = timeout_ns;
    for (uint32_t i = 0; i < n_peers; i++)
        lv->last_seen_ns[i] = start_ns;
    return GV_OK;
}

void gv_liveness_cleanup(struct gv_liveness *lv)
{
    gv_free(lv->last_seen_ns);
    gv_free(lv->state);
    gv_free(lv->why);
    memset(lv, 0, sizeof(*lv));
}

gv_status_t gv_liveness_seen(struct gv_liveness *lv, uint32_t peer, uint64_t now_ns)
{
    if (peer >= lv->n)
        return GV_ERR_INVAL;
    if (lv->state[peer] == GV_PEER_DEAD)
        return GV_OK;
    if (now_ns > lv->last_seen_ns[peer])
        lv->last_seen_ns[peer] = now_ns;
    lv->state[peer] = GV_PEER_ALIVE;
    return GV_OK;
}

gv_status_t gv_liveness_mark_dead(struct gv_liveness *lv, uint32_t peer, const char *why)
{
    if (peer >= lv->n)
        return GV_ERR_INVAL;
    if (lv->state[peer] != GV_PEER_DEAD)
        snprintf(lv->why[peer], sizeof(lv->why[peer]), "%s", why ? why : "connection lost");
    lv->state[peer] = GV_PEER_DEAD;
    return GV_OK;
}

gv_status_t gv_liveness_revive(struct gv_liveness *lv, uint32_t peer, uint64_t now_ns)
{
    if (peer >= lv->n)
        return GV_ERR_INVAL;
    lv->state[peer] = GV_PEER_ALIVE;
    lv->last_seen_ns[peer] = now_ns;
    lv->why[peer][0] = '\0';
    return GV_OK;
}

void gv_liveness_check(struct gv_liveness *lv, uint64_t now_ns, uint32_t *dead, size_t cap,
                       size_t *n_dead_p)
{
    size_t n = 0;
    for (uint32_t i = 0; i < lv->n; i++) {
        if (lv->state[i] == GV_PEER_DEAD || now_ns <= lv->last_seen_ns[i] ||
            now_ns - lv->last_seen_ns[i] <= lv->timeout_ns)
            continue;
        uint64_t silent_ms = (now_ns - lv->last_seen_ns[i]) / 1000000;
        snprintf(lv->why[i], sizeof(lv->why[i]), "%s for %" PRIu64 " ms (timeout %" PRIu64 " ms)",
                 lv->state[i] == GV_PEER_WAITING ? "never heard from" : "silent", silent_ms,
                 lv->timeout_ns / 1000000);
        lv->state[i] = GV_PEER_DEAD;
        if (n < cap)
            dead[n] = i;
        n++;
    }
    *n_dead_p = n;
}

enum gv_peer_state gv_liveness_state(const struct gv_liveness *lv, uint32_t peer)
{
    return peer < lv->n ? (enum gv_peer_state)lv->state[peer] : GV_PEER_DEAD;
}

const char *gv_liveness_why(const struct gv_liveness *lv, uint32_t peer)
{
    return peer < lv->n ? lv->why[peer] : "no such peer";
}

uint64_t gv_liveness_next_deadline(const struct gv_liveness *lv, uint64_t now_ns)
{
    uint64_t best = UINT64_MAX;
    for (uint32_t i = 0; i < lv->n; i++) {
        if (lv->state[i] == GV_PEER_DEAD)
            continue;
        uint64_t deadline = lv->last_seen_ns[i] + lv->timeout_ns;
        /* dead once now > deadline: the first such nanosecond is deadline + 1 */
        uint64_t wait = now_ns > deadline ? 0 : deadline - now_ns + 1;
        best = GV_MIN(best, wait);
    }
    return best;
}

const char *gv_dead_policy_str(enum gv_dead_policy policy)
{
    return policy == GV_DEAD_CONTINUE ? "continue" : "abort";
}

void gv_round_decide(enum gv_dead_policy policy, uint32_t min_workers, uint32_t n,
                     const bool *expected, const bool *arrived, const bool *dead,
                     struct gv_round_decision *d)
{
    uint32_t n_expected = 0, n_arrived = 0, n_pending = 0, n_dead = 0;
    uint32_t first_dead = UINT32_MAX, first_missing = UINT32_MAX;
    memset(d, 0, sizeof(*d));
    for (uint32_t i = 0; i < n; i++) {
        if (!expected[i])
            continue;
        n_expected++;
        if (dead[i] && first_dead == UINT32_MAX)
            first_dead = i;
        n_dead += dead[i];
        if (arrived[i])
            n_arrived++;
        else if (!dead[i])
            n_pending++;
        else if (first_missing == UINT32_MAX)
            first_missing = i;
    }
    d->n_missing = n_expected - n_arrived - n_pending;
    if (policy == GV_DEAD_ABORT && n_dead > 0) {
        d->action = GV_ROUND_ABORT;
        snprintf(d->reason, sizeof(d->reason), "worker %u is dead (%u of %u expected workers "
                 "dead) and the policy is abort", first_dead, n_dead, n_expected);
        return;
    }
    if (n_pending > 0) {
        d->action = GV_ROUND_WAIT;
        return;
    }
    if (min_workers < 1)
        min_workers = 1;
    if (n_arrived < min_workers) {
        d->action = GV_ROUND_ABORT;
        snprintf(d->reason, sizeof(d->reason), "only %u of %u expected workers delivered (%u "
                 "dead); at least %u needed", n_arrived, n_expected, d->n_missing, min_workers);
        return;
    }
    d->action = GV_ROUND_COMPLETE;
    d->n_average = n_arrived;
    if (d->n_missing > 0)
        snprintf(d->reason, sizeof(d->reason), "continuing without %u dead worker%s (first: "
                 "worker %u); averaging over %u", d->n_missing, d->n_missing == 1 ? "" : "s",
                 first_missing, n_arrived);
}
