/* worker_ops.c: the worker runtime's operations side: heartbeats to every server and the
 * servers' liveness (a helper thread runs the event loop while the caller computes between
 * steps, under the worker's lock), the error-feedback residual's checkpoints (written at the
 * servers' checkpoint iterations, loaded when the job resumes), and a stop on request. */
#include "wk.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void wk_seen(struct gv_worker *w, struct wk_server *ws)
{
    if (w->live_on && !ws->got_bye)
        gv_liveness_seen(&w->live, ws->s, gv_now_ns());
}

static void ops_heartbeat(struct gv_worker *w, struct wk_server *ws, uint64_t now)
{
    if (w->cfg.heartbeat_interval_ns == 0 || !gv_ps_link_idle(&ws->link) ||
        now - ws->link.t_sent_ns < w->cfg.heartbeat_interval_ns)
        return;
    struct gv_proto_msg m;
    gv_ps_link_msg(&ws->link, &m, GV_PROTO_MSG_HEARTBEAT, w->iter);
    (void)gv_ps_link_send(&ws->link, &m, NULL, 0, NULL); /* busy: next tick */
}

int wk_tick(struct gv_worker *w, uint64_t now)
{
    /* this process did not run for a while (stopped, a paused VM): the servers were not
     * silent, it was not listening; they get a fresh timeout */
    if (w->live_on && w->t_tick_ns != 0 && now - w->t_tick_ns > w->cfg.peer_timeout_ns / 2) {
        gv_log(GV_LOG_WARN,
               "worker %u: this process did not run for %.1f s (stopped, or the host "
               "stalled): every server gets a fresh timeout",
               w->rank, (double)(now - w->t_tick_ns) * 1e-9);
        for (uint32_t s = 0; s < w->S; s++)
            gv_liveness_seen(&w->live, s, now);
    }
    w->t_tick_ns = now;
    for (uint32_t s = 0; s < w->S; s++) {
        struct wk_server *ws = &w->srv[s];
        if (ws->closed || ws->link.c == NULL || ws->hs.state != GV_PS_CLIENT_WELCOMED)
            continue;
        ops_heartbeat(w, ws, now);
        /* bytes arriving prove life; an update we leave unread hides the server's heartbeats */
        uint64_t b = ws->link.c->bytes_recv;
        if (w->live_on && !ws->got_bye && (b != ws->seen_bytes || ws->deferred))
            gv_liveness_seen(&w->live, s, now);
        ws->seen_bytes = b;
    }
    if (w->live_on && w->fail_status == GV_OK) {
        uint32_t dead[8];
        size_t n;
        gv_liveness_check(&w->live, now, dead, GV_ARRAY_LEN(dead), &n);
        for (size_t i = 0; i < GV_MIN(n, GV_ARRAY_LEN(dead)); i++) {
            struct wk_server *ws = &w->srv[dead[i]];
            if (ws->got_bye || ws->closed)
                continue;
            wk_fail(w, GV_ERR_TIMEOUT,
                    "%s is not responding at iteration %" PRIu64 ": %s (hung, "
                    "or its host unreachable?)",
                    ws->name, w->iter, gv_liveness_why(&w->live, dead[i]));
            if (ws->link.c != NULL)
                gv_tp_conn_close(ws->link.c);
        }
    }
    /* a server that closed or reported an error: said now, not at the next step */
    for (uint32_t s = 0; s < w->S && w->fail_status == GV_OK; s++) {
        struct wk_server *ws = &w->srv[s];
        if (ws->hs.state == GV_PS_CLIENT_WELCOMED && !ws->got_bye && (ws->got_error || ws->closed))
            (void)wk_server_status(w, ws);
    }
    uint64_t wait = 100000000ull;
    if (w->cfg.heartbeat_interval_ns > 0)
        wait = GV_MIN(wait, w->cfg.heartbeat_interval_ns / 2);
    if (w->live_on)
        wait = GV_MIN(wait, gv_liveness_next_deadline(&w->live, now));
    return (int)GV_MAX(1ull, GV_MIN(wait / 1000000ull, 100ull));
}

/* The helper: between the caller's calls it runs the event loop (heartbeats out, heartbeats
 * and errors in) and the liveness check, so that a worker computing a long batch or evaluating
 * is seen alive and a dead server is reported within the timeout. It holds the lock except
 * while it naps; the caller's calls take the lock, so only one thread ever runs the transport.
 * Callbacks it runs never touch the caller's buffers: updates and models are refused between
 * steps (w->busy). */
static void *ops_helper(void *arg)
{
    struct gv_worker *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->helper_stop) {
        int ms = 50;
        /* not while an iteration is open or in flight (overlap): its pushes and updates are
         * the caller's calls' to run, on the replica's ranges they own */
        if (w->fail_status == GV_OK && w->st.phase == WK_IDLE) {
            (void)gv_tp_progress(w->tp, 0);
            ms = GV_MIN(wk_tick(w, gv_now_ns()), 50);
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += (long)ms * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* ---------------------------------------------------------------- residual checkpoints */

static void ck_ident(const struct gv_worker *w, struct gv_ckpt_ident *id)
{
    /* a worker's file: the whole model, index = its rank, and the number of workers */
    *id = (struct gv_ckpt_ident){.model_fingerprint = w->ckpt_fingerprint,
                                 .shard_offset = 0,
                                 .shard_length = w->m.numel,
                                 .shard_index = w->rank,
                                 .num_servers = w->W};
}

static bool ck_has_state(const struct gv_worker *w)
{
    return w->resid != NULL || w->epoch_acc != NULL || w->lmom != NULL;
}

/* The residual's memory is the compressor's, and the velocity's (--local-momentum) the
 * backend's: for a GPU replica (w->mirrored) both may be device memory, which the checkpoint
 * code cannot read or write. Those replicas go through host copies (every mirrored one, so
 * that the CPU backend's mirror path exercises the same code): this many float[numel]. */
static size_t ck_staged(const struct gv_worker *w)
{
    return w->mirrored ? (size_t)(w->resid != NULL) + (size_t)(w->lmom != NULL) : 0;
}

/* The sections of this worker's state; when staged, the residual's and then the velocity's
 * data are float[numel] each in `host`. */
static size_t ck_sections(struct gv_worker *w, struct gv_ckpt_section *sec, uint8_t *pending,
                          float *host)
{
    size_t n = 0, numel = w->m.numel;
    float *stage = host;
    if (w->resid != NULL) {
        sec[n++] = (struct gv_ckpt_section){"residual", stage != NULL ? stage : w->resid,
                                            numel * sizeof(float)};
        stage = stage != NULL ? stage + numel : NULL;
    }
    if (w->lmom != NULL)
        sec[n++] = (struct gv_ckpt_section){"velocity", stage != NULL ? stage : w->lmom,
                                            numel * sizeof(float)};
    if (w->epoch_acc != NULL) {
        *pending = w->norms_pending;
        sec[n++] = (struct gv_ckpt_section){"epoch_acc", w->epoch_acc, w->m.numel * sizeof(float)};
        sec[n++] = (struct gv_ckpt_section){"layer_norms", w->layer_norms,
                                            w->m.n_tensors * sizeof(double)};
        sec[n++] = (struct gv_ckpt_section){"norms_pending", pending, 1};
    }
    return n;
}

/* A host buffer for the staged state (NULL, and logged, when none can be had). */
static float *ck_stage_alloc(struct gv_worker *w)
{
    size_t bytes = ck_staged(w) * w->m.numel * sizeof(float);
    float *host = gv_malloc(bytes);
    if (host == NULL)
        gv_log(GV_LOG_ERROR, "worker %u: no memory for a host copy of its state (%zu bytes)",
               w->rank, bytes);
    return host;
}

/* The staged state, from the replica's memory into `host` (to_host) or back. */
static gv_status_t ck_stage_copy(struct gv_worker *w, float *host, bool to_host)
{
    size_t bytes = w->m.numel * sizeof(float);
    gv_status_t status = GV_OK;
    if (w->resid != NULL) {
        status = to_host ? gv_cmp_copy_to_host(w->cmp, host, w->resid, bytes)
                         : gv_cmp_copy_from_host(w->cmp, w->resid, host, bytes);
        host += w->m.numel;
    }
    if (status == GV_OK && w->lmom != NULL)
        status = to_host ? gv_nn_backend_download(w->m.be, host, w->lmom, bytes)
                         : gv_nn_backend_upload(w->m.be, w->lmom, host, bytes);
    return status;
}

/* The servers resumed from iteration w->iter: this worker's residual of that iteration, if
 * there is one. Without it the residual starts from zero (the trajectory then differs slightly
 * from an uninterrupted run); a corrupt or foreign file is refused. */
static gv_status_t ck_restore(struct gv_worker *w)
{
    struct gv_ckpt_ident id;
    ck_ident(w, &id);
    w->resid_zero = false; /* whatever happens below, r is no longer known to be zero */
    char path[PATH_MAX];
    gv_ps_ckpt_path(w->ckpt_dir, w->rank, w->iter, path, sizeof(path));
    if (access(path, F_OK) != 0) {
        gv_log(GV_LOG_WARN,
               "worker %u: no checkpoint of iteration %" PRIu64 " in %s: the "
               "error-feedback residual starts from zero (training goes on, but not exactly as "
               "an uninterrupted run would)",
               w->rank, w->iter, w->ckpt_dir);
        return gv_ps_ckpt_retire_newer(w->ckpt_dir, w->rank, w->iter);
    }
    float *host = NULL;
    if (ck_staged(w) > 0 && (host = ck_stage_alloc(w)) == NULL)
        return GV_ERR_NOMEM;
    struct gv_ckpt *ck;
    gv_status_t status = gv_ps_ckpt_open_iter(w->ckpt_dir, &id, w->iter, &ck);
    if (status == GV_OK) {
        struct gv_ckpt_section sec[5];
        uint8_t pending = 0;
        size_t n = ck_sections(w, sec, &pending, host);
        for (size_t i = 0; i < n && status == GV_OK; i++)
            status =
                gv_ckpt_read_section(ck, sec[i].name, (void *)(uintptr_t)sec[i].data, sec[i].len);
        w->norms_pending = pending != 0;
        gv_ckpt_close(ck);
    }
    if (status == GV_OK && host != NULL) {
        status = ck_stage_copy(w, host, false);
        if (status != GV_OK) {
            gv_log(GV_LOG_ERROR, "worker %u: cannot copy the restored state to the GPU (%s)",
                   w->rank, gv_status_str(status));
            gv_free(host);
            return status;
        }
    }
    gv_free(host);
    if (status != GV_OK) {
        gv_log(GV_LOG_ERROR,
               "worker %u: refusing the checkpoint %s (see above): move it away "
               "to resume with a zero residual",
               w->rank, path);
        return GV_ERR_PROTO;
    }
    w->residual_restored = true;
    gv_log(GV_LOG_INFO,
           "worker %u: error-feedback residual of iteration %" PRIu64 " restored "
           "from %s",
           w->rank, w->iter, path);
    return gv_ps_ckpt_retire_newer(w->ckpt_dir, w->rank, w->iter);
}

bool wk_ckpt_due(const struct gv_worker *w)
{
    return w->ckpt_dir[0] != '\0' && w->cfg.checkpoint_every > 0 && ck_has_state(w) &&
           w->iter % w->cfg.checkpoint_every == 0;
}

/* committed: a stop's residual, written where the servers stop (no report follows it); else
 * pending, reported with the next push and committed on server 0's verdict (wk_ckpt_verdict). */
static void ck_write(struct gv_worker *w, bool committed)
{
    struct gv_ckpt_ident id;
    ck_ident(w, &id);
    uint64_t t0 = gv_now_ns();
    float *host = NULL;
    gv_status_t status = GV_OK;
    if (ck_staged(w) > 0) {
        host = ck_stage_alloc(w);
        status = host == NULL ? GV_ERR_NOMEM : ck_stage_copy(w, host, true);
    }
    if (status == GV_OK) {
        struct gv_ckpt_section sec[5];
        uint8_t pending = 0;
        size_t n = ck_sections(w, sec, &pending, host);
        int keep = w->cfg.checkpoint_keep > 0 ? w->cfg.checkpoint_keep : 3;
        status = committed ? gv_ckpt_write(w->ckpt_dir, &id, w->iter, sec, n, keep, NULL, 0)
                           : gv_ckpt_write_pending(w->ckpt_dir, &id, w->iter, sec, n, NULL, 0);
    }
    gv_free(host);
    if (!committed) {
        w->ck_pend_iter = w->iter;
        w->ck_pend_status = status;
    }
    if (status != GV_OK) {
        gv_log(GV_LOG_ERROR,
               "worker %u: its part (the residual) of the checkpoint of iteration %" PRIu64
               " failed (%s); server 0 learns it with the next push",
               w->rank, w->iter, gv_status_str(status));
        return;
    }
    if (committed)
        w->ckpt_written++;
    gv_log(GV_LOG_DEBUG,
           "worker %u: residual checkpoint of iteration %" PRIu64 " written in %.3f "
           "s",
           w->rank, w->iter, (double)(gv_now_ns() - t0) * 1e-9);
}

void wk_ckpt_write(struct gv_worker *w)
{
    /* a pending one without a verdict by now never gets one (the servers write none?) */
    if (w->ck_pend_iter != 0)
        (void)gv_ckpt_discard(w->ckpt_dir, w->rank, w->ck_pend_iter);
    w->ck_pend_iter = 0;
    ck_write(w, false);
}

void wk_ckpt_verdict(struct gv_worker *w)
{
    uint64_t it = w->dec.ckpt_iter;
    if (w->ckpt_dir[0] == '\0' || it == 0 || it != w->ck_pend_iter)
        return;
    w->ck_pend_iter = 0;
    if (w->dec.ckpt_status == GV_OK) {
        int keep = w->cfg.checkpoint_keep > 0 ? w->cfg.checkpoint_keep : 3;
        if (gv_ckpt_commit(w->ckpt_dir, w->rank, it, keep) == GV_OK)
            w->ckpt_written++;
        return;
    }
    (void)gv_ckpt_discard(w->ckpt_dir, w->rank, it);
    gv_log(GV_LOG_WARN,
           "worker %u: the checkpoint of iteration %" PRIu64 " was not written by every process "
           "(%s): its residual is dropped",
           w->rank, it, gv_status_str((gv_status_t)w->dec.ckpt_status));
}

/* ---------------------------------------------------------------- start, stop */

gv_status_t wk_ops_start(struct gv_worker *w)
{
    const char *dir = w->cfg.checkpoint_dir;
    w->resumed_from = w->iter;
    if (dir != NULL && dir[0] != '\0' && ck_has_state(w)) {
        snprintf(w->ckpt_dir, sizeof(w->ckpt_dir), "%s/worker%04u", dir, w->rank);
        gv_status_t status = gv_ps_mkdir(w->ckpt_dir);
        /* what the last run wrote and nobody committed is no checkpoint */
        if (status == GV_OK)
            (void)gv_ckpt_discard(w->ckpt_dir, w->rank, UINT64_MAX);
        if (status == GV_OK && w->iter > 0)
            status = ck_restore(w);
        if (status != GV_OK)
            return status;
    }
    uint64_t now = gv_now_ns();
    if (w->cfg.peer_timeout_ns > 0) {
        gv_status_t status = gv_liveness_init(&w->live, w->S, w->cfg.peer_timeout_ns, now);
        if (status != GV_OK)
            return status;
        w->live_on = true;
        for (uint32_t s = 0; s < w->S; s++)
            gv_liveness_seen(&w->live, s, now);
    }
    if (w->cfg.heartbeat_interval_ns == 0 && !w->live_on)
        return GV_OK;
    if (pthread_create(&w->helper, NULL, ops_helper, w) != 0) {
        gv_log(GV_LOG_ERROR, "worker %u: cannot start the heartbeat thread: %s", w->rank,
               strerror(errno));
        return GV_ERR_IO;
    }
    w->helper_on = true;
    return GV_OK;
}

void wk_ops_stop(struct gv_worker *w)
{
    if (w->helper_on) {
        pthread_mutex_lock(&w->mu);
        w->helper_stop = true;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->helper, NULL);
        w->helper_on = false;
    }
    if (w->live_on)
        gv_liveness_cleanup(&w->live);
    w->live_on = false;
}

void gv_worker_stop(struct gv_worker *w, const char *why)
{
    pthread_mutex_lock(&w->mu);
    char text[300];
    snprintf(text, sizeof(text), "worker %u asks to stop the job: %.200s", w->rank, why);
    gv_log(GV_LOG_WARN, "%s", text);
    bool sent = false;
    for (uint32_t s = 0; s < w->S; s++) {
        struct wk_server *ws = &w->srv[s];
        if (ws->closed || ws->link.c == NULL || ws->hs.state != GV_PS_CLIENT_WELCOMED ||
            ws->got_error)
            continue;
        struct gv_proto_msg m;
        gv_ps_link_msg(&ws->link, &m, GV_PROTO_MSG_ERROR, w->iter);
        m.u.error.code = GV_OK; /* a stop on request, not a failure */
        m.u.error.text = text;
        sent |= gv_ps_link_send(&ws->link, &m, NULL, 0, NULL) == GV_OK;
    }
    /* wait for the servers' answer (their ERROR stopping the job), so that the request has
     * left and nothing is unread when the connections close */
    uint64_t end = gv_now_ns() + 2000000000ull;
    while (sent && gv_now_ns() < end) {
        bool answered = true;
        for (uint32_t s = 0; s < w->S; s++)
            answered &= w->srv[s].closed || w->srv[s].got_error;
        if (answered || gv_tp_progress(w->tp, 20) < 0)
            break;
    }
    /* between steps this worker's residual is that of iteration w->iter, and no server can
     * complete that round without its push: the servers stop there, and so can its checkpoint */
    bool same = sent && w->fail_status == GV_OK;
    for (uint32_t s = 0; s < w->S; s++)
        same &=
            w->srv[s].got_error && w->srv[s].error_code == GV_OK && w->srv[s].error_iter == w->iter;
    w->stopped = true;
    if (w->fail_status == GV_OK) {
        w->fail_status = GV_ERR_CLOSED;
        snprintf(w->fail, sizeof(w->fail), "stopped on request: %s", why);
    }
    bool ckpt = same && w->ckpt_dir[0] != '\0' && ck_has_state(w);
    pthread_mutex_unlock(&w->mu);
    if (ckpt)
        ck_write(w, true);
}
