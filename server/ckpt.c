/* ckpt.c: a server's checkpoints: the newest valid one loaded at start (a corrupt or
 * foreign one refuses the start), exactly the agreed iteration when the servers' newest differ,
 * a periodic write after every --checkpoint-every rounds in a thread (the event loop goes on:
 * heartbeats, the next pushes wait unread), and a final one when the job ends at a point every
 * server shares. ops/ckpt.c does the file format, the atomic write and the verification. */
#include "srv.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void ck_ident(const struct gv_server *srv, struct gv_ckpt_ident *id)
{
    *id = (struct gv_ckpt_ident){.model_fingerprint = srv->shard.ckpt_fingerprint,
                                 .shard_offset = srv->shard.lo,
                                 .shard_length = srv->shard.n,
                                 .shard_index = srv->rank,
                                 .num_servers = srv->S};
}

/* Server 0: the controller's state and the decision in force at the checkpoint's iteration. */
static gv_status_t ck_load_controller(struct gv_server *srv, struct gv_ckpt *ck, uint64_t it)
{
    size_t len;
    if (gv_ckpt_section_len(ck, "controller", &len) != GV_OK) {
        gv_log(GV_LOG_ERROR,
               "checkpoint %s refused: it has no controller state (server 0's "
               "checkpoints have one)",
               gv_ckpt_path(ck));
        return GV_ERR_PROTO;
    }
    void *blob = gv_malloc(len ? len : 1);
    if (blob == NULL)
        return GV_ERR_NOMEM;
    gv_status_t status = gv_ckpt_read_section(ck, "controller", blob, len);
    if (status == GV_OK && (status = gv_adapt_restore(srv->round.ctl, blob, len)) != GV_OK)
        gv_log(GV_LOG_ERROR, "checkpoint %s refused: its controller state does not load (%s)",
               gv_ckpt_path(ck), gv_status_str(status));
    gv_free(blob);
    if (status != GV_OK)
        return status == GV_ERR_NOMEM ? status : GV_ERR_PROTO;
    if (srv_decide_load(srv) != GV_OK || srv->round.cur.iter != it) {
        gv_log(GV_LOG_ERROR,
               "checkpoint %s refused: its controller decides iteration %" PRIu64
               ", the checkpoint is of iteration %" PRIu64,
               gv_ckpt_path(ck), srv->round.cur.iter, it);
        return GV_ERR_PROTO;
    }
    return GV_OK;
}

/* Loads a verified checkpoint into the shard (and the controller on server 0). */
static gv_status_t ck_load(struct gv_server *srv, struct gv_ckpt *ck)
{
    uint64_t it = gv_ckpt_iteration(ck), sec_it = 0;
    struct srv_shard *sh = &srv->shard;
    gv_status_t status = gv_ckpt_read_section(ck, "params", sh->params, sh->n * sizeof(float));
    if (status == GV_OK)
        status = gv_ckpt_read_section(ck, "momentum", sh->momentum, sh->n * sizeof(float));
    if (status == GV_OK)
        status = gv_ckpt_read_section(ck, "iteration", &sec_it, sizeof(sec_it));
    if (status == GV_OK && sec_it != it) {
        gv_log(GV_LOG_ERROR,
               "checkpoint %s refused: its iteration section says %" PRIu64 ", its header %" PRIu64,
               gv_ckpt_path(ck), sec_it, it);
        status = GV_ERR_PROTO;
    }
    if (status == GV_OK && srv->down != NULL)
        status = gv_ckpt_read_section(ck, "residual", srv->down->resid, sh->n * sizeof(float));
    if (status == GV_OK && srv->rank == 0)
        status = ck_load_controller(srv, ck, it);
    if (status != GV_OK)
        return status == GV_ERR_NOMEM || status == GV_ERR_IO ? status : GV_ERR_PROTO;
    srv->round.iter = it;
    srv->ckpt.resumed_from = it;
    srv->ckpt.last_iter = it;
    srv->start.seeded = true; /* worker 0 seeds a fresh model only */
    gv_log(GV_LOG_INFO,
           "server %u: loaded checkpoint %s (iteration %" PRIu64 ", shard checksum %016" PRIx64 ")",
           srv->rank, gv_ckpt_path(ck), it, gv_ps_checksum(sh->params, sh->n));
    return GV_OK;
}

gv_status_t srv_ckpt_init(struct gv_server *srv)
{
    const char *dir = srv->cfg.checkpoint_dir;
    if (dir == NULL || dir[0] == '\0')
        return GV_OK;
    srv->ckpt.on = true;
    srv->ckpt.final_rep = gv_calloc(srv->S, sizeof(*srv->ckpt.final_rep));
    srv->ckpt.final_rep_iter = gv_calloc(srv->S, sizeof(*srv->ckpt.final_rep_iter));
    if (srv->ckpt.final_rep == NULL || srv->ckpt.final_rep_iter == NULL)
        return GV_ERR_NOMEM;
    char why[200] = "see above";
    if (gv_ps_mkdir(dir) != GV_OK || gv_ckpt_dir_check(dir, why, sizeof(why)) != GV_OK) {
        gv_log(GV_LOG_ERROR, "server %u: refusing to start: --checkpoint-dir %s is not usable (%s)",
               srv->rank, dir, why);
        return GV_ERR_INVAL;
    }
    /* what the last run wrote and nobody committed is no checkpoint */
    (void)gv_ckpt_discard(dir, srv->rank, UINT64_MAX);
    gv_status_t status;
    struct gv_ckpt_ident id;
    ck_ident(srv, &id);
    struct gv_ckpt *ck = NULL;
    status = gv_ckpt_find_latest(dir, &id, srv->cfg.checkpoint_fallback, 0, &ck);
    if (status != GV_OK) {
        gv_log(GV_LOG_ERROR,
               "server %u: refusing to start: the checkpoint in %s cannot be "
               "resumed from (see above)",
               srv->rank, dir);
        return status == GV_ERR_IO || status == GV_ERR_NOMEM ? status : GV_ERR_PROTO;
    }
    if (ck == NULL) {
        gv_log(GV_LOG_INFO, "server %u: no checkpoint of shard %u in %s: starting from scratch",
               srv->rank, srv->rank, dir);
        return GV_OK;
    }
    status = ck_load(srv, ck);
    gv_ckpt_close(ck);
    if (status != GV_OK)
        return status;
    srv->ckpt.own = srv->round.iter;
    srv->ckpt.committed = srv->round.iter;
    return GV_OK;
}

gv_status_t srv_ckpt_resume_at(struct gv_server *srv, uint64_t iter)
{
    if (!srv->ckpt.on) {
        gv_log(GV_LOG_ERROR,
               "server %u: the job resumes from iteration %" PRIu64 " but this "
               "server has no --checkpoint-dir",
               srv->rank, iter);
        return GV_ERR_INVAL;
    }
    if (iter == 0) {
        gv_log(GV_LOG_ERROR,
               "server %u: the other servers start from scratch but this one has a "
               "checkpoint (iteration %" PRIu64 ") in %s",
               srv->rank, srv->ckpt.own, srv->cfg.checkpoint_dir);
        return GV_ERR_INVAL;
    }
    struct gv_ckpt_ident id;
    ck_ident(srv, &id);
    char path[PATH_MAX];
    gv_ps_ckpt_path(srv->cfg.checkpoint_dir, srv->rank, iter, path, sizeof(path));
    if (access(path, F_OK) != 0) {
        gv_log(GV_LOG_ERROR,
               "server %u: no checkpoint of iteration %" PRIu64 " in %s, the newest "
               "every server holds (this server's newest is %" PRIu64 "; raise "
               "--checkpoint-keep?)",
               srv->rank, iter, srv->cfg.checkpoint_dir, srv->ckpt.own);
        return GV_ERR_INVAL;
    }
    struct gv_ckpt *ck = NULL;
    gv_status_t status = gv_ps_ckpt_open_iter(srv->cfg.checkpoint_dir, &id, iter, &ck);
    if (status != GV_OK)
        return status;
    status = ck_load(srv, ck);
    gv_ckpt_close(ck);
    if (status != GV_OK)
        return status;
    srv->ckpt.committed = iter;
    return gv_ps_ckpt_retire_newer(srv->cfg.checkpoint_dir, srv->rank, iter);
}

static void *ck_thread(void *arg)
{
    struct gv_server *srv = arg;
    struct gv_ckpt_ident id;
    ck_ident(srv, &id);
    srv->ckpt.status = gv_ckpt_write_pending(srv->cfg.checkpoint_dir, &id, srv->ckpt.iter,
                                             srv->ckpt.sec, srv->ckpt.n_sec, NULL, 0);
    atomic_store(&srv->ckpt.busy, 2);
    return NULL;
}

/* This server's part is written (pending) or failed: it counts once server 0 has heard from
 * every process (ck_verdict). */
static void ck_done(struct gv_server *srv)
{
    struct srv_ckpt *ck = &srv->ckpt;
    double secs = (double)(gv_now_ns() - ck->t0) * 1e-9;
    ck->pend_iter = ck->iter;
    ck->pend_status = ck->status;
    if (ck->status == GV_OK)
        gv_log(GV_LOG_DEBUG,
               "server %u: its part of the checkpoint of iteration %" PRIu64 " written in %.2f s",
               srv->rank, ck->iter, secs);
    else
        gv_log(GV_LOG_ERROR,
               "server %u: its part of the checkpoint of iteration %" PRIu64 " failed (%s)",
               srv->rank, ck->iter, gv_status_str(ck->status));
    srv_metrics_ckpt(srv, ck->iter, secs, ck->status == GV_OK);
}

/* Server 0's verdict on the pending checkpoint: committed (renamed, older ones pruned) or
 * dropped. On server 0 a failure applies --checkpoint-failure-policy. */
static void ck_apply(struct gv_server *srv, uint64_t it, gv_status_t verdict, const char *why)
{
    struct srv_ckpt *ck = &srv->ckpt;
    const char *dir = srv->cfg.checkpoint_dir;
    ck->pend_iter = 0;
    if (verdict == GV_OK) {
        if (gv_ckpt_commit(dir, srv->rank, it, srv->cfg.checkpoint_keep) == GV_OK) {
            ck->committed = it;
            ck->last_iter = it;
            ck->written++;
            ck->lost = false;
            gv_log(GV_LOG_INFO, "server %u: checkpoint of iteration %" PRIu64 " committed",
                   srv->rank, it);
            return;
        }
        /* the others committed it; here it stays pending, so a restart's choice (the newest
         * one every server holds) falls back to the previous one, which is kept */
        ck->lost = true;
        return;
    }
    (void)gv_ckpt_discard(dir, srv->rank, it);
    ck->lost = true;
    char resumable[80];
    if (ck->committed > 0)
        snprintf(resumable, sizeof(resumable), "iteration %" PRIu64, ck->committed);
    else
        snprintf(resumable, sizeof(resumable), "nothing (no checkpoint committed yet)");
    if (srv->rank != 0) {
        gv_log(GV_LOG_WARN,
               "server %u: the checkpoint of iteration %" PRIu64 " was not written by every "
               "process: not committed, its part dropped",
               srv->rank, it);
        return;
    }
    char text[400];
    snprintf(text, sizeof(text),
             "the checkpoint of iteration %" PRIu64 " was not written by every process (%.180s); "
             "the job can be resumed from %s",
             it, why, resumable);
    if (srv->cfg.ckpt_fail_policy == GV_CKPT_FAIL_CONTINUE && srv->end.state == SRV_RUNNING) {
        gv_log(GV_LOG_ERROR,
               "server 0: %s; it goes on (--checkpoint-failure-policy continue) but cannot be "
               "resumed from after that until a checkpoint commits",
               text);
        return;
    }
    if (srv->end.state == SRV_RUNNING) /* stop: fix the storage, then restart from there */
        srv_abort_now(srv, GV_ERR_CKPT, false, text);
    else
        gv_log(GV_LOG_ERROR, "server 0: %s", text);
}

/* The verdict server 0 sent with the decision in force (round.cur), if it is about this
 * server's pending checkpoint. */
static void ck_verdict(struct gv_server *srv)
{
    const struct gv_ps_decision *d = &srv->round.cur.d;
    if (!srv->ckpt.on || d->ckpt_iter == 0 || d->ckpt_iter != srv->ckpt.pend_iter)
        return;
    ck_apply(srv, d->ckpt_iter, (gv_status_t)d->ckpt_status, srv->round.ck_why);
}

/* Snapshots the controller and names the sections (borrowing the shard: the next round does
 * not open before the write is done). */
static gv_status_t ck_prepare(struct gv_server *srv)
{
    gv_status_t status =
        gv_server_state_sections(srv, srv->ckpt.sec, GV_SERVER_STATE_SECTIONS, &srv->ckpt.n_sec);
    if (status != GV_OK) {
        gv_log(GV_LOG_ERROR, "server %u: cannot serialise the state for a checkpoint: %s",
               srv->rank, gv_status_str(status));
        return status;
    }
    srv->ckpt.iter = srv->round.iter;
    srv->ckpt.t0 = gv_now_ns();
    return GV_OK;
}

/* Starts writing this server's part of the checkpoint of the current iteration (pending). */
static void ck_start(struct gv_server *srv)
{
    if (ck_prepare(srv) != GV_OK) {
        srv->ckpt.pend_iter = srv->round.iter; /* reported as failed: nothing was written */
        srv->ckpt.pend_status = GV_ERR_NOMEM;
        return;
    }
    atomic_store(&srv->ckpt.busy, 1);
    if (pthread_create(&srv->ckpt.th, NULL, ck_thread, srv) != 0) {
        ck_thread(srv); /* no thread: write here */
        atomic_store(&srv->ckpt.busy, 0);
        ck_done(srv);
        return;
    }
    srv->ckpt.joinable = true;
}

void srv_ckpt_after_round(struct gv_server *srv)
{
    ck_verdict(srv);
    uint64_t it = srv->round.iter;
    if (!srv->ckpt.on || srv->cfg.checkpoint_every == 0 || srv->end.state != SRV_RUNNING ||
        it % srv->cfg.checkpoint_every != 0 || atomic_load(&srv->ckpt.busy) != 0 ||
        it == srv->ckpt.committed)
        return;
    ck_start(srv);
}

bool srv_ckpt_busy(struct gv_server *srv)
{
    int v = atomic_load(&srv->ckpt.busy);
    if (v == 0)
        return false;
    if (v == 1)
        return true;
    pthread_join(srv->ckpt.th, NULL);
    srv->ckpt.joinable = false;
    atomic_store(&srv->ckpt.busy, 0);
    ck_done(srv);
    return false;
}

/* ---------------------------------------------------------------- the final checkpoint */

static void ck_final_decided(struct gv_server *srv, gv_status_t verdict, const char *why)
{
    struct srv_ckpt *ck = &srv->ckpt;
    ck->final = SRV_FINAL_DECIDED;
    ck->final_verdict = verdict;
    if (ck->pend_iter == ck->final_iter && ck->final_iter != 0)
        ck_apply(srv, ck->final_iter, verdict, why);
    else if (verdict != GV_OK)
        ck->lost = true;
}

/* Server 0: every server's report is in (or its connection is gone, or the deadline passed):
 * the verdict, to every other server. */
static bool ck_final_collect(struct gv_server *srv, uint64_t now)
{
    struct srv_ckpt *ck = &srv->ckpt;
    gv_status_t verdict = ck->pend_iter == ck->final_iter ? ck->pend_status : GV_ERR_CKPT;
    char why[200] = "";
    if (verdict != GV_OK)
        snprintf(why, sizeof(why), "server 0: %s", gv_status_str(verdict));
    bool all = true;
    for (uint32_t s = 1; s < srv->S; s++) {
        const struct srv_peer *p = srv->net.servers[s];
        gv_status_t r = ck->final_rep_iter[s] == ck->final_iter ? ck->final_rep[s] : GV_ERR_AGAIN;
        if (r == GV_ERR_AGAIN && p != NULL && !p->closed && now < ck->final_deadline) {
            all = false;
            continue;
        }
        if (r != GV_OK && verdict == GV_OK) {
            verdict = GV_ERR_CKPT;
            snprintf(why, sizeof(why), "server %u: %s", s,
                     r == GV_ERR_AGAIN ? "no report" : gv_status_str(r));
        }
    }
    if (!all)
        return false;
    for (uint32_t s = 1; s < srv->S; s++)
        if (srv->net.servers[s] != NULL && !srv->net.servers[s]->closed)
            srv_send_ckpt_verdict(srv, srv->net.servers[s], ck->final_iter, verdict);
    ck_final_decided(srv, verdict, why);
    return true;
}

bool srv_ckpt_final_tick(struct gv_server *srv)
{
    struct srv_ckpt *ck = &srv->ckpt;
    if (ck->final == SRV_FINAL_DECIDED)
        return true;
    if (srv_ckpt_busy(srv))
        return false; /* a write in flight (perhaps of this very iteration) */
    uint64_t now = gv_now_ns(), it = srv->round.iter;
    struct srv_end *e = &srv->end;
    bool cut = e->state == SRV_ENDING || e->state == SRV_DONE ? srv->start.settled : e->final_ok;
    switch (ck->final) {
    case SRV_FINAL_NONE:
        if (!ck->on || !cut || srv->round.done == 0 || it == ck->committed) {
            ck_final_decided(srv, GV_OK, ""); /* nothing to write: what is committed stands */
            return true;
        }
        ck->final_iter = it; /* reports that came before this are kept (final_rep_iter) */
        ck->final = SRV_FINAL_WRITING;
        if (ck->pend_iter != it) {
            gv_log(GV_LOG_INFO, "server %u: writing the final checkpoint (iteration %" PRIu64 ")",
                   srv->rank, it);
            ck_start(srv);
        }
        return false;
    case SRV_FINAL_WRITING:
        ck->final = SRV_FINAL_WAITING;
        ck->final_deadline =
            now + (srv->cfg.peer_timeout_ns ? srv->cfg.peer_timeout_ns : 5000000000ull);
        if (srv->rank > 0) {
            if (!srv_net_coord_alive(srv)) {
                ck_final_decided(srv, GV_ERR_CKPT, "server 0 is gone");
                return true;
            }
            srv_send_ckpt_report(srv, srv->net.coord, it, ck->pend_status);
            return false;
        }
        return ck_final_collect(srv, now);
    case SRV_FINAL_WAITING:
        if (srv->rank == 0)
            return ck_final_collect(srv, now);
        if (now > ck->final_deadline || !srv_net_coord_alive(srv)) {
            gv_log(GV_LOG_WARN,
                   "server %u: no verdict from server 0 on the final checkpoint (iteration "
                   "%" PRIu64 "): not committed",
                   srv->rank, ck->final_iter);
            ck_final_decided(srv, GV_ERR_CKPT, "no verdict from server 0");
            return true;
        }
        return false;
    case SRV_FINAL_DECIDED: return true;
    }
    return true;
}

void srv_ckpt_final_msg(struct gv_server *srv, struct srv_peer *p, const struct gv_proto_msg *m)
{
    struct srv_ckpt *ck = &srv->ckpt;
    if (m->type == GV_PROTO_MSG_STATS && srv->rank == 0 && p->kind == SRV_PEER_SERVER) {
        /* a report: kept even when it comes before this server's own final phase */
        if (ck->final_rep != NULL && m->u.stats.stats.ckpt_iter == srv->round.iter) {
            ck->final_rep_iter[p->rank] = m->u.stats.stats.ckpt_iter;
            ck->final_rep[p->rank] = (gv_status_t)m->u.stats.stats.ckpt_status;
        }
        return;
    }
    if (m->type == GV_PROTO_MSG_DECISION && srv->rank > 0 && p->kind == SRV_PEER_COORD &&
        ck->final == SRV_FINAL_WAITING && m->u.decision.ckpt_iter == ck->final_iter) {
        gv_status_t v = (gv_status_t)m->u.decision.ckpt_status;
        ck_final_decided(srv, v, v == GV_OK ? "" : "server 0's verdict");
    }
}

void srv_ckpt_cleanup(struct gv_server *srv)
{
    if (srv->ckpt.joinable) {
        pthread_join(srv->ckpt.th, NULL);
        srv->ckpt.joinable = false;
        atomic_store(&srv->ckpt.busy, 0);
    }
    gv_free(srv->ckpt.ctl_blob);
    srv->ckpt.ctl_blob = NULL;
    gv_free(srv->ckpt.final_rep);
    gv_free(srv->ckpt.final_rep_iter);
    srv->ckpt.final_rep = NULL;
    srv->ckpt.final_rep_iter = NULL;
}

gv_status_t gv_server_state_sections(struct gv_server *srv, struct gv_ckpt_section *sec, size_t cap,
                                     size_t *n_p)
{
    struct srv_shard *sh = &srv->shard;
    struct srv_ckpt *ck = &srv->ckpt;
    if (cap < 3)
        return GV_ERR_INVAL;
    static const char *const names[] = {"params", "momentum", "iteration"};
    sec[0] = (struct gv_ckpt_section){names[0], sh->params, sh->n * sizeof(float)};
    sec[1] = (struct gv_ckpt_section){names[1], sh->momentum, sh->n * sizeof(float)};
    ck->state_iter = srv->round.iter; /* a copy: the sections stay valid while rounds go on */
    sec[2] = (struct gv_ckpt_section){names[2], &ck->state_iter, sizeof(ck->state_iter)};
    size_t n = 3;
    if (srv->down != NULL) {
        if (cap < n + 1)
            return GV_ERR_INVAL;
        sec[n++] = (struct gv_ckpt_section){"residual", srv->down->resid, sh->n * sizeof(float)};
    }
    *n_p = n;
    if (srv->round.ctl == NULL)
        return GV_OK;
    if (cap < n + 1)
        return GV_ERR_INVAL;
    size_t need = gv_adapt_state_size(srv->round.ctl);
    if (need > ck->ctl_blob_len) {
        void *b = gv_realloc(ck->ctl_blob, need);
        if (b == NULL)
            return GV_ERR_NOMEM;
        ck->ctl_blob = b;
        ck->ctl_blob_len = need;
    }
    size_t len;
    gv_status_t status = gv_adapt_save(srv->round.ctl, ck->ctl_blob, ck->ctl_blob_len, &len);
    if (status != GV_OK)
        return status;
    sec[n++] = (struct gv_ckpt_section){"controller", ck->ctl_blob, len};
    *n_p = n;
    return GV_OK;
}
