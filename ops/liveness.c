/* liveness.c: who is alive, given explicit timestamps. Pure logic: no clock, no I/O, no
 * threads; the server and worker programs feed it times and act on its answers (what a round
 * does about the dead is the server's: server/round.c). */
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
