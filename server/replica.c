/* replica.c: --optimizer caller, where the servers do not hold the model: each worker's push
 * carries the checksum of its parameters of this shard (as its optimizer left them after the
 * previous iteration), and within a round they must all be equal. Replicas start equal (worker
 * 0's seed), receive the same averaged gradient bit for bit, and step with the same optimizer,
 * so a difference means an optimizer that is not deterministic across the workers, or a
 * script that changed the parameters on some of them: the job stops, naming both workers. */
#include "srv.h"

#include <inttypes.h>

void srv_replica_check(struct gv_server *srv, const struct srv_peer *p,
                       const struct gv_proto_msg *m)
{
    struct srv_replica *rp = &srv->replica;
    uint64_t ck = m->u.push.replica_checksum;
    if (srv->job->optimizer != GV_JOB_OPTIM_CALLER || ck == 0)
        return;
    if (!rp->have || rp->iter != m->iteration) {
        *rp = (struct srv_replica){.iter = m->iteration,
                                   .ck = ck,
                                   .from = p->rank,
                                   .have = true,
                                   .compared = rp->compared};
        return;
    }
    rp->compared++;
    if (ck == rp->ck)
        return;
    srv_abort(srv, GV_ERR_PROTO,
              "replicas diverged before iteration %" PRIu64 ": shard %u is %016" PRIx64
              " on worker %u, %016" PRIx64 " on worker %u (optimizer not deterministic, or "
              "parameters changed on some workers)",
              m->iteration, srv->rank, ck, p->rank, rp->ck, rp->from);
}
