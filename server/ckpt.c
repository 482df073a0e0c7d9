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
    *id = (struct gv_ckpt_ident){.model_fingerprint = srv->shard.fingerprint,
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
    gv_status_t status = gv_ps_mkdir(dir);
    if (status != GV_OK)
        return status;
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
    return gv_ps_ckpt_retire_newer(srv->cfg.checkpoint_dir, srv->rank, iter);
}

static void *ck_thread(void *arg)
{
    struct gv_server *srv = arg;
    struct gv_ckpt_ident id;
    ck_ident(srv, &id);
    srv->ckpt.status = gv_ckpt_write(srv->cfg.checkpoint_dir, &id, srv->ckpt.iter, srv->ckpt.sec,
                                     srv->ckpt.n_sec, srv->cfg.checkpoint_keep, NULL, 0);
    atomic_store(&srv->ckpt.busy, 2);
    return NULL;
}

static void ck_done(struct gv_server *srv)
{
    double secs = (double)(gv_now_ns() - srv->ckpt.t0) * 1e-9;
    bool ok = srv->ckpt.status == GV_OK;
    if (ok) {
        char path[PATH_MAX];
        gv_ps_ckpt_path(srv->cfg.checkpoint_dir, srv->rank, srv->ckpt.iter, path, sizeof(path));
        gv_log(GV_LOG_DEBUG, "server %u: checkpoint of iteration %" PRIu64 " written in %.2f s: %s",
               srv->rank, srv->ckpt.iter, secs, path);
        srv->ckpt.last_iter = srv->ckpt.iter;
        srv->ckpt.written++;
    } else {
        gv_log(GV_LOG_ERROR,
               "server %u: the checkpoint of iteration %" PRIu64 " failed (%s); "
               "training goes on, the next one is tried in %" PRIu64 " iterations",
               srv->rank, srv->ckpt.iter, gv_status_str(srv->ckpt.status),
               srv->cfg.checkpoint_every);
    }
    srv_metrics_ckpt(srv, srv->ckpt.iter, secs, ok);
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

void srv_ckpt_after_round(struct gv_server *srv)
{
    uint64_t it = srv->round.iter;
    if (!srv->ckpt.on || srv->cfg.checkpoint_every == 0 || srv->end.state != SRV_RUNNING ||
        it % srv->cfg.checkpoint_every != 0 || atomic_load(&srv->ckpt.busy) != 0 ||
        it == srv->ckpt.last_iter)
        return;
    if (ck_prepare(srv) != GV_OK)
        return;
    atomic_store(&srv->ckpt.busy, 1);
    if (pthread_create(&srv->ckpt.th, NULL, ck_thread, srv) != 0) {
        ck_thread(srv); /* no thread: write here */
        atomic_store(&srv->ckpt.busy, 0);
        ck_done(srv);
        return;
    }
    srv->ckpt.joinable = true;
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

void srv_ckpt_final(struct gv_server *srv)
{
    while (srv_ckpt_busy(srv))
        usleep(1000);
    if (!srv->ckpt.on || !srv->end.final_ok || srv->round.done == 0 ||
        srv->round.iter == srv->ckpt.last_iter)
        return;
    if (ck_prepare(srv) != GV_OK)
        return;
    gv_log(GV_LOG_INFO, "server %u: writing the final checkpoint (iteration %" PRIu64 ")",
           srv->rank, srv->round.iter);
    ck_thread(srv);
    atomic_store(&srv->ckpt.busy, 0);
    ck_done(srv);
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
