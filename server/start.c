/* start.c: how a server's job starts: peers take their slots once authenticated, worker 0 seeds
 * a fresh model, server 0 agrees with the other servers on the starting iteration (the newest
 * checkpoint all of them hold, or none), and every worker gets the shard and the decision in
 * force; the start-up deadline names whoever is missing. */
#include "srv.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void srv_start_sync_workers(struct gv_server *srv)
{
    struct srv_round *r = &srv->round;
    if (srv->end.state == SRV_ABORTED || srv->end.state == SRV_ENDING || !srv->start.seeded ||
        !srv->start.settled || r->cur.iter != r->iter)
        return;
    if (srv->end.state == SRV_STARTING)
        srv->end.state = SRV_RUNNING;
    for (uint32_t w = 0; w < srv->W; w++) {
        struct srv_peer *p = srv->net.workers[w];
        if (p == NULL || p->synced || p->closed)
            continue;
        uint64_t bytes = 0;
        if (srv_send_model(srv, p, r->iter, &bytes) != GV_OK ||
            srv_send_decision(srv, p, &r->cur, NULL) != GV_OK) {
            srv_abort(srv, GV_ERR_CLOSED, "cannot send the model and decision to %s", p->name);
            return;
        }
        p->synced = true;
        gv_log(GV_LOG_DEBUG, "server %u: model and decision sent to %s", srv->rank, p->name);
    }
}

/* Server 0, once every other server has authenticated: the job starts from the newest
 * checkpoint every server holds (each server named its newest in its HELLO; the periodic ones
 * are common to all, a final one may be missing where a server died), or from scratch when
 * none has any. Checkpoints on some servers only are refused: mixing a resumed shard with a
 * fresh one would train a model that never existed. Then every server gets WELCOME(iteration)
 * and the decision in force with the round membership (every worker). */
void srv_start_settle(struct gv_server *srv)
{
    struct srv_round *r = &srv->round;
    if (srv->start.settled || srv->rank != 0 || srv->net.n_servers_in + 1 < srv->S ||
        srv->end.state == SRV_ABORTED || !srv->shard.ready)
        return;
    uint64_t own = srv->ckpt.own, c = own;
    int some = own > 0 ? 0 : -1, none = own > 0 ? -1 : 0;
    for (uint32_t s = 1; s < srv->S; s++) {
        uint64_t h = srv->net.servers[s]->hello_iter;
        c = GV_MIN(c, h);
        if (h > 0 && some < 0)
            some = (int)s;
        if (h == 0 && none < 0)
            none = (int)s;
    }
    if (some >= 0 && none >= 0) {
        char text[300];
        snprintf(text, sizeof(text),
                 "checkpoints exist for some servers only: server %d has one "
                 "(iteration %" PRIu64 "), server %d has none in its --checkpoint-dir; restore the "
                 "missing files, or move every server's checkpoints away to start from scratch",
                 some, some == 0 ? own : srv->net.servers[some]->hello_iter, none);
        srv->end.refused = true;
        srv_abort_now(srv, GV_ERR_PROTO, false, text);
        return;
    }
    if (c != r->iter && srv_ckpt_resume_at(srv, c) != GV_OK) {
        srv->end.refused = true;
        srv_abort_now(srv, GV_ERR_PROTO, false,
                      "cannot resume from the iteration every server "
                      "holds a checkpoint of (see above)");
        return;
    }
    srv->start.settled = true;
    if (c > 0)
        gv_log(GV_LOG_INFO,
               "server 0: the job resumes from iteration %" PRIu64 " (the newest "
               "checkpoint every server holds)",
               c);
    for (uint32_t w = 0; w < srv->W; w++)
        r->memb[w] = r->expected[w] ? GV_PS_MEMB_NEXT : 0;
    for (uint32_t s = 1; s < srv->S; s++) {
        struct srv_peer *p = srv->net.servers[s];
        if (srv_send_welcome(srv, p, r->iter) != GV_OK ||
            srv_send_decision(srv, p, &r->cur, r->memb) != GV_OK) {
            srv_abort(srv, GV_ERR_IO, "cannot send the welcome and decision to %s", p->name);
            return;
        }
    }
    srv_start_sync_workers(srv);
}

void srv_start_coord_decided(struct gv_server *srv)
{
    srv->start.settled = true;
    srv_start_sync_workers(srv);
}

void srv_start_joined(struct gv_server *srv, struct srv_peer *p)
{
    struct srv_net *net = &srv->net;
    bool as_server = p->hello_role == GV_PROTO_ROLE_SERVER;
    if (!as_server && gv_job_external(srv->job) && !p->layout_ok) {
        p->awaiting_layout = true; /* its LAYOUT follows the AUTH: srv_start_layout */
        return;
    }
    struct srv_peer **slot = as_server ? &net->servers[p->rank] : &net->workers[p->rank];
    if (*slot != NULL) {
        srv_peer_refuse(p, GV_PROTO_REFUSE_FULL, "%s %u has already joined (%s)",
                        gv_proto_role_str(p->hello_role), p->rank, (*slot)->name);
        return;
    }
    *slot = p;
    if (as_server) {
        srv_peer_joined(srv, p, SRV_PEER_SERVER);
        net->n_servers_in++;
        gv_log(GV_LOG_INFO, "server 0: %s joined (newest checkpoint: iteration %" PRIu64 ")",
               p->name, p->hello_iter);
        srv_ops_joined(srv, p);
        srv_start_settle(srv); /* once every server is in */
        return;
    }
    if (srv->rank > 0 && !srv_net_coord_alive(srv)) {
        /* the starting iteration is server 0's to say: the WELCOME waits for it */
        srv_peer_joined(srv, p, SRV_PEER_WORKER);
        net->n_workers_in++;
        p->welcome_due = true;
        gv_log(GV_LOG_INFO, "server %u: %s joined (%u of %u); welcomed once server 0 is reached",
               srv->rank, p->name, net->n_workers_in, srv->W);
        return;
    }
    if (srv_send_welcome(srv, p, srv->round.iter) != GV_OK) {
        *slot = NULL;
        srv_peer_close(p);
        return;
    }
    srv_peer_joined(srv, p, SRV_PEER_WORKER);
    net->n_workers_in++;
    gv_log(GV_LOG_INFO, "server %u: %s joined (%u of %u)", srv->rank, p->name, net->n_workers_in,
           srv->W);
    srv_ops_joined(srv, p);
    srv_start_sync_workers(srv);
}

void srv_start_coord_welcomed(struct gv_server *srv, struct srv_peer *p)
{
    const struct srv_shard *sh = &srv->shard;
    const struct gv_proto_welcome *w = &p->hs.welcome;
    if (w->model_fingerprint != sh->fingerprint || w->model_numel != sh->map.total ||
        w->num_shards != srv->S) {
        char text[320];
        snprintf(text, sizeof(text),
                 "model fingerprint mismatch: server %u has %016" PRIx64 " (%" PRIu64
                 " parameters, %u shards), server 0 has %016" PRIx64 " (%" PRIu64
                 ", %u): the model, the number of iterations, the optimizer or the compression "
                 "options differ",
                 srv->rank, sh->fingerprint, sh->map.total, srv->S, w->model_fingerprint,
                 w->model_numel, w->num_shards);
        struct gv_proto_msg m;
        gv_ps_link_msg(&p->link, &m, GV_PROTO_MSG_REFUSE, 0);
        m.u.refuse.code = GV_PROTO_REFUSE_MODEL;
        m.u.refuse.text = text;
        (void)gv_ps_link_send(&p->link, &m, NULL, 0, NULL);
        srv_abort(srv, GV_ERR_PROTO, "%s", text);
        return;
    }
    uint64_t c = p->hs.iteration;
    if (c != srv->round.iter && srv_ckpt_resume_at(srv, c) != GV_OK) {
        srv->end.refused = true;
        srv_abort_now(srv, GV_ERR_PROTO, false,
                      "cannot resume from the iteration server 0 chose "
                      "(see above)");
        return;
    }
    srv->round.iter = c;
    gv_log(GV_LOG_INFO, "server %u: joined server 0 at %s; the job %s iteration %" PRIu64,
           srv->rank, p->link.c->peer, c > 0 ? "resumes from" : "starts at", c);
    srv_ops_joined(srv, p);
    for (uint32_t k = 0; k < srv->W; k++) { /* the workers that joined before */
        struct srv_peer *q = srv->net.workers[k];
        if (q == NULL || !q->welcome_due || q->closed)
            continue;
        q->welcome_due = false;
        if (srv_send_welcome(srv, q, c) != GV_OK) {
            srv_abort(srv, GV_ERR_CLOSED, "cannot welcome %s", q->name);
            return;
        }
        srv_ops_joined(srv, q);
    }
}

/* ---------------------------------------------------------------- worker 0's seed */

gv_status_t srv_start_seed_header(struct gv_server *srv, struct srv_peer *p,
                                  const struct gv_proto_msg *m, uint64_t payload_len,
                                  struct gv_iov *dst, int *cnt)
{
    uint64_t n = srv->shard.n;
    if (p->kind != SRV_PEER_WORKER || p->rank != 0 || m->tensor_id != 0 || m->n_segs != 1 ||
        m->segs[0].kind != GV_PROTO_SEG_DENSE || m->segs[0].enc != GV_PROTO_ENC_F32 ||
        m->u.model.offset > n || m->numel > n - m->u.model.offset) {
        gv_log(GV_LOG_WARN, "server %u: %s sent a malformed model chunk", srv->rank, p->name);
        return GV_ERR_PROTO;
    }
    if (srv->start.seeded || srv->round.iter != 0)
        dst[0] = (struct gv_iov){NULL, payload_len}; /* already have a model: discard */
    else
        dst[0] = (struct gv_iov){srv->shard.params + m->u.model.offset, payload_len};
    *cnt = 1;
    return GV_OK;
}

void srv_start_seed_done(struct gv_server *srv, const struct gv_proto_msg *m)
{
    struct srv_start *st = &srv->start;
    if (st->seeded || srv->round.iter != 0)
        return;
    const float *v = srv->shard.params + m->u.model.offset;
    for (uint64_t i = 0; i < m->numel; i++)
        if (!isfinite(v[i])) {
            srv_abort(srv, GV_ERR_PROTO,
                      "worker 0 seeded the model with a non-finite value (%g at parameter %" PRIu64
                      " of the shard)",
                      (double)v[i], m->u.model.offset + i);
            return;
        }
    st->seed_got += m->numel;
    if (st->seed_got < srv->shard.n)
        return;
    st->seeded = true;
    gv_log(GV_LOG_INFO, "server %u: model seeded by worker 0 (checksum %016" PRIx64 ")", srv->rank,
           gv_ps_checksum(srv->shard.params, srv->shard.n));
    srv_start_sync_workers(srv);
}

/* ---------------------------------------------------------------- the layout (--model external) */

gv_status_t srv_start_layout_header(struct gv_server *srv, struct srv_peer *p,
                                    const struct gv_proto_msg *m, uint64_t payload_len,
                                    struct gv_iov *dst, int *cnt)
{
    /* checked before anything is allocated: an authenticated worker's one LAYOUT, one RAW
     * segment within the largest layout there can be */
    if (!gv_job_external(srv->job) || p->kind != SRV_PEER_NEW || !p->awaiting_layout ||
        p->layout_buf != NULL || m->n_segs != 1 || m->segs[0].kind != GV_PROTO_SEG_RAW ||
        payload_len > GV_LAYOUT_MAX_BYTES) {
        gv_log(GV_LOG_WARN,
               "server %u: %s sent a LAYOUT %s (%" PRIu64 " bytes, %u segments; at most %u bytes)",
               srv->rank, p->name,
               !gv_job_external(srv->job) ? "but this job's model is nn/'s (--model)"
                                          : "out of turn or malformed",
               payload_len, m->n_segs, (unsigned)GV_LAYOUT_MAX_BYTES);
        return GV_ERR_PROTO;
    }
    p->layout_buf = gv_malloc(payload_len);
    if (p->layout_buf == NULL)
        return GV_ERR_NOMEM;
    p->layout_len = payload_len;
    dst[0] = (struct gv_iov){p->layout_buf, payload_len};
    *cnt = 1;
    return GV_OK;
}

/* A layout that cannot join this job: the worker is refused with the reason, and the job
 * cannot start without that worker, so it is aborted with the same text. */
static void start_layout_refuse(struct gv_server *srv, struct srv_peer *p, const char *text)
{
    srv_peer_refuse(p, GV_PROTO_REFUSE_MODEL, "%s", text); /* logged there */
    srv_abort(srv, GV_ERR_PROTO, "%s was refused: %s", p->name, text);
}

/* Worker 0's layout becomes the model's; any other is compared with it. l is consumed. */
static void start_layout_accept(struct gv_server *srv, struct srv_peer *p, struct gv_layout *l)
{
    char why[400], text[480];
    if (!srv->shard.ready) {
        gv_status_t status = srv_shard_adopt(srv, l, p->name);
        gv_layout_cleanup(l);
        if (status != GV_OK) {
            snprintf(text, sizeof(text),
                     "its model of %" PRIu64 " parameters cannot be sharded over %u servers "
                     "(see the server's log)",
                     srv->shard.layout.total, srv->S);
            start_layout_refuse(srv, p, text);
            return;
        }
    } else {
        char here[120];
        snprintf(here, sizeof(here), "server %u (from %s)", srv->rank, srv->shard.layout_from);
        bool differ = gv_layout_diff(l, &srv->shard.layout, p->name, here, why, sizeof(why));
        gv_layout_cleanup(l);
        if (differ) {
            snprintf(text, sizeof(text), "model layout mismatch: %s", why);
            start_layout_refuse(srv, p, text);
            return;
        }
    }
    p->awaiting_layout = false;
    p->layout_ok = true;
    srv_start_joined(srv, p); /* takes its slot, WELCOME */
}

void srv_start_layout(struct gv_server *srv, struct srv_peer *p, const struct gv_proto_msg *m)
{
    char why[400];
    struct gv_layout l;
    if (!p->awaiting_layout || p->held) {
        /* not a joined worker whose layout is due (an unauthenticated peer, a second LAYOUT):
         * that connection goes, the job does not */
        gv_log(GV_LOG_WARN, "server %u: %s sent a LAYOUT out of turn; closed", srv->rank, p->name);
        gv_free(p->layout_buf);
        p->layout_buf = NULL;
        srv_peer_close(p);
        return;
    }
    bool have = p->layout_buf != NULL && m->n_segs == 1;
    gv_status_t status =
        have ? gv_layout_decode(p->layout_buf, (size_t)p->layout_len, &l, why, sizeof(why))
             : GV_ERR_PROTO;
    gv_free(p->layout_buf);
    p->layout_buf = NULL;
    if (!have)
        snprintf(why, sizeof(why), "an empty or unexpected LAYOUT");
    if (status != GV_OK) {
        start_layout_refuse(srv, p, why);
        return;
    }
    if (!srv->shard.ready && p->rank != 0) {
        /* worker 0's layout is the model's (as its parameters are): this one waits for it */
        p->held_layout = l;
        p->held = true;
        return;
    }
    bool adopting = !srv->shard.ready;
    start_layout_accept(srv, p, &l);
    /* held workers are still pending; joining moves one to the joined list */
    for (struct srv_peer *q = srv->net.pending.head, *next;
         adopting && srv->shard.ready && q != NULL; q = next) {
        next = q->next;
        if (q->held && !q->closed && srv_live(srv)) {
            q->held = false;
            start_layout_accept(srv, q, &q->held_layout);
        }
    }
    srv_start_settle(srv); /* server 0: the layout may have been all it waited for */
}

/* ---------------------------------------------------------------- the deadline */

void srv_start_check_deadline(struct gv_server *srv, uint64_t now)
{
    const struct srv_round *r = &srv->round;
    if (r->done > 0 || r->phase == SRV_ROUND_OPEN ||
        now - srv->start.t_start_ns < srv->cl->connect_timeout)
        return;
    char missing[200] = "";
    size_t off = 0;
    for (uint32_t w = 0; w < srv->W && off < sizeof(missing) - 16; w++)
        if (srv->net.workers[w] == NULL || !srv->net.workers[w]->synced)
            off += (size_t)snprintf(missing + off, sizeof(missing) - off, " %u", w);
    if (off == 0 && r->phase == SRV_ROUND_WAIT_OPEN && srv->start.seeded && srv->start.settled)
        return; /* everyone is in: the first round opens as soon as the sends complete */
    char servers[160] = "";
    size_t so = 0;
    for (uint32_t s = 1; srv->rank == 0 && s < srv->S && so < sizeof(servers) - 16; s++)
        if (srv->net.servers[s] == NULL)
            so += (size_t)snprintf(servers + so, sizeof(servers) - so, " %u", s);
    bool seeded = srv->start.seeded;
    const char *coord = "";
    if (srv->rank > 0 && !srv_net_coord_alive(srv))
        coord = srv->net.coord == NULL ? "; server 0 never published its address"
                                       : "; no welcome from server 0";
    srv_abort(srv, GV_ERR_TIMEOUT,
              "start-up did not complete within %.1f s (--connect-timeout): %s%s%s%s%s%s%s",
              (double)srv->cl->connect_timeout * 1e-9, off ? "workers not joined or synced:" : "",
              missing,
              !seeded ? (off ? "; model not seeded by worker 0" : "model not seeded by worker 0")
                      : "",
              so ? "; servers not joined:" : "", servers, coord,
              srv->shard.ready ? "" : "; no worker sent the model's layout (--model external)");
}
