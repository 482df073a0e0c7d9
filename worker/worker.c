/* worker.c: the worker runtime's set-up: buffers sized once from the model and the job, the
 * connections to every server and the start-up sync (every server's model and decision), the
 * end (finish, failure told to the servers), and the summary. One iteration is in step.c, the
 * other messages in control.c. */
#include "wk.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- set-up */

static void *wk_alloc(struct gv_worker *w, size_t n, size_t size)
{
    void *p = gv_calloc(n ? n : 1, size);
    if (p != NULL)
        w->buffer_bytes += n * size;
    return p;
}

/* Host memory the GPU copies to and from: pinned (page-locked, copied by DMA at full speed)
 * when the CUDA backend installed its allocator, else ordinary. */
static gv_status_t wk_host_buf(struct gv_worker *w, struct gv_buf *b, size_t bytes)
{
    gv_status_t status = gv_buf_alloc(b, bytes, GV_MEM_PINNED);
    if (status == GV_ERR_UNSUPPORTED)
        status = gv_buf_alloc(b, bytes, GV_MEM_HOST);
    if (status == GV_OK)
        w->buffer_bytes += bytes;
    return status;
}

/* A compression output's arrays, of the compressor's memory kind. */
static void *wk_cmp_alloc(struct gv_worker *w, size_t n, size_t size)
{
    if (!w->mirrored)
        return wk_alloc(w, n, size);
    void *p = NULL;
    if (gv_cmp_mem_alloc(w->cmp, (n ? n : 1) * size, &p) != GV_OK)
        return NULL;
    if (gv_cmp_get_config(w->cmp)->mem == GV_MEM_DEVICE)
        w->device_bytes += n * size;
    else
        w->buffer_bytes += n * size;
    return p;
}

static void wk_cmp_free(struct gv_worker *w, void *p)
{
    if (p == NULL)
        return;
    if (w->mirrored)
        gv_cmp_mem_free(w->cmp, p);
    else
        gv_free(p);
}

/* The host views of the replica: the replica itself, or for a GPU replica pinned mirrors
 * (and a host copy of one tensor's level sent, as large as the largest). */
static gv_status_t wk_host_views(struct gv_worker *w)
{
    w->mirrored =
        w->m.be != NULL && (gv_nn_backend_mem(w->m.be) == GV_MEM_DEVICE || w->cfg.host_mirrors);
    if (!w->mirrored) {
        w->hp = w->m.params, w->hg = w->m.grads, w->hv = w->m.momentum;
        return GV_OK;
    }
    gv_status_t status = wk_host_buf(w, &w->mirror, 3 * w->m.numel * sizeof(float));
    if (status != GV_OK)
        return status;
    w->hp = w->mirror.ptr;
    w->hg = w->hp + w->m.numel;
    w->hv = w->hg + w->m.numel;
    gv_log(GV_LOG_INFO, "worker %u: the replica is in %s memory; host mirrors in %s memory",
           w->rank, gv_mem_str(gv_nn_backend_mem(w->m.be)), gv_mem_str(w->mirror.mem));
    /* worker 0 seeds the servers from its initial model */
    return w->rank == 0 ? wk_download(w, w->hp, w->m.params, w->m.numel, "the initial model")
                        : GV_OK;
}

/* --local-momentum: the velocity, zero, where the gradients are (a GPU replica's in its
 * backend's memory). */
static gv_status_t wk_velocity(struct gv_worker *w)
{
    size_t bytes = w->m.numel * sizeof(float);
    if (!w->mirrored) {
        w->lmom = wk_alloc(w, w->m.numel, sizeof(float));
        return w->lmom != NULL ? GV_OK : GV_ERR_NOMEM;
    }
    enum gv_mem mem = gv_nn_backend_mem(w->m.be);
    gv_status_t status = gv_buf_alloc(&w->lmom_buf, bytes, mem);
    if (status != GV_OK) {
        gv_log(GV_LOG_ERROR, "worker %u: no %s memory for the velocity (%zu bytes)", w->rank,
               gv_mem_str(mem), bytes);
        return status;
    }
    if (mem == GV_MEM_DEVICE)
        w->device_bytes += bytes;
    else
        w->buffer_bytes += bytes;
    w->lmom = w->lmom_buf.ptr;
    return GV_OK;
}

static gv_status_t wk_compressor(struct gv_worker *w)
{
    const struct gv_job *job = w->job;
    uint32_t U = w->n_units;
    w->ef = wk_alloc(w, U, sizeof(*w->ef));
    w->lmin = wk_alloc(w, U, sizeof(*w->lmin));
    w->lcand = wk_alloc(w, U, sizeof(*w->lcand));
    if (w->ef == NULL || w->lmin == NULL || w->lcand == NULL)
        return GV_ERR_NOMEM;
    if (gv_job_dense(job))
        return GV_OK;
    size_t maxn = 0;
    for (uint32_t u = 0; u < U; u++)
        maxn = GV_MAX(maxn, w->unit_off[u + 1] - w->unit_off[u]);
    struct gv_cmp_config cc;
    gv_cmp_config_init(&cc);
    cc.kind = gv_job_cmp_kind(job);
    /* a GPU replica compresses on the GPU */
    cc.mem = w->m.be != NULL ? gv_nn_backend_mem(w->m.be) : GV_MEM_HOST;
    cc.val_type = gv_job_sparse_vt(job);
    cc.max_numel = maxn;
    cc.min_cf = gv_job_min_cf(job);
    cc.nthreads = w->cfg.cmp_threads > 0 ? w->cfg.cmp_threads : 1;
    cc.seed = job->seed;
    gv_status_t status = gv_cmp_create(&cc, &w->cmp);
    if (status != GV_OK)
        return status;
    w->resid = wk_cmp_alloc(w, w->m.numel, sizeof(float));
    if (w->resid == NULL)
        return GV_ERR_NOMEM;
    double cand_cf = gv_job_min_cand_cf(job);
    uint32_t most = 0;
    for (uint32_t u = 0; u < U; u++) {
        uint32_t n = (uint32_t)(w->unit_off[u + 1] - w->unit_off[u]);
        if ((status = gv_ef_create(w->cmp, n, w->resid + w->unit_off[u], &w->ef[u])) != GV_OK)
            return status;
        uint32_t b = gv_cmp_bound(w->cmp, n, cc.min_cf);
        most = GV_MAX(most, b);
        w->lmin[u] = (struct gv_sparse){
            .idx = wk_cmp_alloc(w, b, 4), .val = wk_cmp_alloc(w, b, 4), .cap = b};
        if (w->lmin[u].idx == NULL || w->lmin[u].val == NULL)
            return GV_ERR_NOMEM;
        if (cand_cf > 0) {
            uint32_t bc = gv_cmp_bound(w->cmp, n, cand_cf);
            w->lcand[u] = (struct gv_sparse){
                .idx = wk_cmp_alloc(w, bc, 4), .val = wk_cmp_alloc(w, bc, 4), .cap = bc};
            if (w->lcand[u].idx == NULL || w->lcand[u].val == NULL)
                return GV_ERR_NOMEM;
        }
    }
    if (w->mirrored) {
        /* the level sent goes to the host tensor by tensor, for staging and encoding */
        if ((status = wk_host_buf(w, &w->hsent_buf, (size_t)most * 8)) != GV_OK)
            return status;
        w->hsent = (struct gv_sparse){
            .idx = w->hsent_buf.ptr, .val = (float *)w->hsent_buf.ptr + most, .cap = most};
    }
    gv_log(GV_LOG_INFO, "worker %u: compressor %s (%s) per %s, floor CF %g, %d thread(s)", w->rank,
           gv_cmp_kind_str(cc.kind), gv_cmp_backend(w->cmp),
           job->topk_scope == GV_SCOPE_MODEL ? "model" : "tensor", cc.min_cf,
           gv_cmp_nthreads(w->cmp));
    return GV_OK;
}

/* Per server: push staging (the sent entries of its shard) and the push/update buffer. */
static gv_status_t wk_shard_buffers(struct gv_worker *w, struct wk_server *ws)
{
    const struct gv_shard_map *map = &w->map;
    uint64_t cap = 0;
    double mcf = gv_job_min_cf(w->job);
    bool per_tensor = w->job->topk_scope == GV_SCOPE_TENSOR;
    if (w->cmp != NULL && !per_tensor) /* every entry of the model's k may fall here */
        cap = gv_cmp_bound(w->cmp, w->m.numel, mcf);
    for (uint32_t p = map->piece_first[ws->s];
         w->cmp != NULL && per_tensor && p < map->piece_first[ws->s + 1]; p++) {
        const struct gv_shard_piece *pc = &map->pieces[p];
        uint32_t b = gv_cmp_bound(w->cmp, w->m.tensor_numel[pc->tensor], mcf);
        cap += GV_MIN(pc->len, (uint64_t)b);
    }
    ws->cap = (uint32_t)GV_MIN(cap, ws->n);
    /* the encoded push; then (the push has left) the update: a dense f32 one lands in the
     * replica's host view, a dense f16 one here; a sparse one holds at most n/2 entries */
    size_t push = gv_sparse_idx_bound(ws->n, ws->cap) + gv_sparse_val_len(ws->cap, GV_VAL_F32);
    size_t upd = 4 * ws->n + 64;
    ws->ucap = GV_MAX(push, upd);
    ws->sidx = wk_alloc(w, ws->cap, 4);
    ws->sval = wk_alloc(w, ws->cap, 4);
    ws->ubuf = wk_alloc(w, ws->ucap, 1);
    ws->heavy = wk_alloc(w, w->m.n_tensors, 1);
    if (ws->sidx == NULL || ws->sval == NULL || ws->ubuf == NULL || ws->heavy == NULL)
        return GV_ERR_NOMEM;
    struct gv_ps_envelope env = {GV_PROTO_ROLE_WORKER, w->rank, ws->s};
    return gv_ps_link_init(&ws->link, &w->caps, &env, WK_HDR_SLOTS,
                           (size_t)w->caps.max_hdr_len + GV_PROTO_PREFIX_LEN);
}

static void wk_log_line(const char *line, void *arg)
{
    (void)arg;
    gv_log(GV_LOG_INFO, "%s", line);
}

/* --model external: the tensors come from the caller's layout, which is encoded once (it
 * follows the AUTH to every server). Then the replica's constraints of the optimizer mode. */
static gv_status_t wk_model_check(struct gv_worker *w)
{
    struct gv_worker_model *m = &w->m;
    w->caller_optim = w->job->optimizer == GV_JOB_OPTIM_CALLER;
    if (gv_job_external(w->job) != (m->layout != NULL)) {
        gv_log(GV_LOG_ERROR, "worker: %s",
               m->layout != NULL ? "a layout is given but the job's model is nn/'s "
                                   "(--model external)"
                                 : "--model external needs the model's layout");
        return GV_ERR_INVAL;
    }
    if (m->layout != NULL) {
        m->n_tensors = m->layout->n;
        m->tensor_numel = m->layout->numel;
        m->names = NULL;
        w->layout_len = gv_layout_encoded_len(m->layout);
        if (w->layout_len > GV_LAYOUT_MAX_BYTES || m->layout->n == 0) {
            gv_log(GV_LOG_ERROR, "worker: a layout of %u tensors (%zu bytes encoded; at most %u)",
                   m->layout->n, w->layout_len, (unsigned)GV_LAYOUT_MAX_BYTES);
            return GV_ERR_INVAL;
        }
        if ((w->layout_wire = wk_alloc(w, w->layout_len, 1)) == NULL)
            return GV_ERR_NOMEM;
        gv_layout_encode(m->layout, w->layout_wire);
    }
    bool device =
        m->be != NULL && (gv_nn_backend_mem(m->be) == GV_MEM_DEVICE || w->cfg.host_mirrors);
    if (w->caller_optim && device) {
        gv_log(GV_LOG_ERROR, "worker: --optimizer caller takes a host replica (no GPU backend)");
        return GV_ERR_UNSUPPORTED;
    }
    if (!w->caller_optim && m->momentum == NULL) {
        gv_log(GV_LOG_ERROR, "worker: --optimizer job needs the momentum vector");
        return GV_ERR_INVAL;
    }
    if (m->params == NULL || m->grads == NULL || m->numel == 0 || m->n_tensors == 0) {
        gv_log(GV_LOG_ERROR, "worker: the model needs parameters, gradients and tensors");
        return GV_ERR_INVAL;
    }
    return GV_OK;
}

static gv_status_t wk_layout(struct gv_worker *w)
{
    const struct gv_worker_model *m = &w->m;
    w->off = wk_alloc(w, m->n_tensors + 1, sizeof(size_t));
    w->tnames = wk_alloc(w, m->n_tensors, sizeof(*w->tnames));
    if (w->off == NULL || w->tnames == NULL)
        return GV_ERR_NOMEM;
    for (uint32_t t = 0; t < m->n_tensors; t++)
        w->tnames[t] = m->layout != NULL ? m->layout->t[t].name : m->names[t];
    for (uint32_t t = 0; t < m->n_tensors; t++)
        w->off[t + 1] = w->off[t] + m->tensor_numel[t];
    if (w->off[m->n_tensors] != m->numel) {
        gv_log(GV_LOG_ERROR, "worker: tensors add up to %zu elements, the model has %zu",
               w->off[m->n_tensors], m->numel);
        return GV_ERR_INVAL;
    }
    /* compression units: the tensors, or the whole model */
    if (w->job->topk_scope == GV_SCOPE_MODEL) {
        w->n_units = 1;
        w->unit_off = wk_alloc(w, 2, sizeof(size_t));
        if (w->unit_off == NULL)
            return GV_ERR_NOMEM;
        w->unit_off[1] = m->numel;
    } else {
        w->n_units = m->n_tensors;
        w->unit_off = w->off;
    }
    gv_status_t status = gv_shard_map_init(&w->map, m->tensor_numel, m->n_tensors, w->S);
    if (status != GV_OK)
        return status;
    if (w->rank == 0)
        gv_shard_map_describe(&w->map, w->tnames, wk_log_line, NULL);
    w->fingerprint = m->layout != NULL ? gv_layout_fingerprint(w->job, m->layout, NULL, 0)
                                       : gv_job_fingerprint(w->job, m->names, m->tensor_numel,
                                                            m->n_tensors, NULL, 0);
    /* checkpoints need nn/'s models (--model external is refused with --checkpoint-dir) */
    w->ckpt_fingerprint =
        m->layout != NULL
            ? 0
            : gv_job_state_fingerprint(w->job, m->names, m->tensor_numel, m->n_tensors);
    return GV_OK;
}

/* Starts a connection to every server whose address is known by now (--servers, or its
 * rendezvous file has appeared) and queues its HELLO; the others are tried again at the next
 * turn. Nothing here waits: the servers that are up are answered while another is not. */
static gv_status_t wk_connect(struct gv_worker *w)
{
    struct gv_ps_hello_info info = {.role = GV_PROTO_ROLE_WORKER,
                                    .rank = w->rank,
                                    .num_workers = w->W,
                                    .num_servers = w->S,
                                    .cluster_id = w->cl->cluster_id,
                                    .secret = w->cfg.secret};
    for (uint32_t s = 0; s < w->S; s++) {
        struct wk_server *ws = &w->srv[s];
        if (ws->connecting)
            continue;
        struct gv_hostport hp;
        gv_status_t status = gv_cluster_server_addr_try(w->cl, s, &hp);
        if (status == GV_ERR_AGAIN)
            continue;
        if (status != GV_OK) {
            wk_fail(w, status, "no address for server %u (see above)", s);
            return status;
        }
        snprintf(ws->name, sizeof(ws->name), "server %u (%.60s:%u)", s, hp.host, hp.port);
        gv_log(GV_LOG_INFO, "worker %u: connecting to %s", w->rank, ws->name);
        struct gv_conn *c;
        if ((status = gv_tp_connect_start(w->tp, hp.host, hp.port, &c)) != GV_OK) {
            wk_fail(w, status, "cannot connect to %s: %s", ws->name, gv_status_str(status));
            return status;
        }
        ws->connecting = true;
        c->user = ws;
        ws->link.c = c;
        if ((status = gv_ps_client_hs_start(&ws->hs, &ws->link, &info)) != GV_OK) {
            wk_fail(w, status, "handshake with %s: %s", ws->name, ws->hs.why);
            return status;
        }
    }
    return GV_OK;
}

/* Where server ws is in the start-up, for the deadline's message. */
static void wk_stage(const struct gv_worker *w, const struct wk_server *ws, char *out, size_t len)
{
    if (!ws->connecting)
        snprintf(out, len, "server %u never published its address in %s", ws->s,
                 w->cl->rendezvous_dir);
    else if (ws->link.c == NULL)
        snprintf(out, len, "%s closed", ws->name);
    else if (ws->link.c->bytes_sent == 0)
        snprintf(out, len, "%s: nothing accepts connections there (is it up, is that its address?)",
                 ws->name);
    else if (ws->hs.state != GV_PS_CLIENT_WELCOMED && ws->link.c->bytes_recv == 0)
        snprintf(out, len,
                 "%s accepted the connection but never answered the handshake: is a gravac "
                 "server listening there, or another program?",
                 ws->name);
    else if (ws->hs.state != GV_PS_CLIENT_WELCOMED)
        snprintf(out, len, "%s did not complete the handshake", ws->name);
    else
        snprintf(out, len, "%s has not sent the model yet (waiting for the other workers to join?)",
                 ws->name);
}

static gv_status_t wk_sync(struct gv_worker *w, uint64_t deadline)
{
    for (;;) {
        gv_status_t status = wk_connect(w);
        if (status != GV_OK)
            return status;
        bool all = true;
        for (uint32_t s = 0; s < w->S; s++) {
            struct wk_server *ws = &w->srv[s];
            if (ws->connecting && (status = wk_server_status(w, ws)) != GV_OK)
                return status;
            all &= ws->synced && ws->model_left == 0;
        }
        if (all)
            break;
        if (gv_now_ns() > deadline) {
            char missing[600] = "";
            size_t off = 0;
            for (uint32_t s = 0; s < w->S && off < sizeof(missing) - 200; s++) {
                if (w->srv[s].synced)
                    continue;
                char stage[300];
                wk_stage(w, &w->srv[s], stage, sizeof(stage));
                off += (size_t)snprintf(missing + off, sizeof(missing) - off, "%s%s",
                                        off ? "; " : "", stage);
            }
            wk_fail(w, GV_ERR_TIMEOUT,
                    "start-up did not complete within %.1f s (--connect-timeout): %s",
                    (double)w->cl->connect_timeout * 1e-9, missing);
            return GV_ERR_TIMEOUT;
        }
        int ms = wk_tick(w, gv_now_ns());
        bool unknown = false; /* a server whose address may appear any moment */
        for (uint32_t s = 0; s < w->S; s++)
            unknown |= !w->srv[s].connecting;
        if (gv_tp_progress(w->tp, GV_MIN(ms, unknown ? 20 : 50)) < 0) {
            wk_fail(w, GV_ERR_IO, "transport failure during start-up");
            return GV_ERR_IO;
        }
    }
    /* every server sent the same iteration and decision */
    const struct wk_server *s0 = &w->srv[0];
    for (uint32_t s = 1; s < w->S; s++) {
        const struct wk_server *ws = &w->srv[s];
        if (ws->dec_iter != s0->dec_iter || !gv_ps_decision_equal(&ws->dec, &s0->dec) ||
            memcmp(ws->heavy, s0->heavy, w->m.n_tensors) != 0) {
            wk_fail(w, GV_ERR_PROTO,
                    "servers 0 and %u disagree on the starting iteration or "
                    "decision (%" PRIu64 " vs %" PRIu64 ")",
                    s, s0->dec_iter, ws->dec_iter);
            return GV_ERR_PROTO;
        }
    }
    w->iter = s0->dec_iter;
    w->dec = s0->dec;
    memcpy(w->heavy, s0->heavy, w->m.n_tensors);
    return GV_OK;
}

gv_status_t gv_worker_create(const struct gv_worker_config *cfg,
                             const struct gv_worker_model *model, struct gv_worker **w_p)
{
    struct gv_worker *w = gv_calloc(1, sizeof(*w));
    if (w == NULL)
        return GV_ERR_NOMEM;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    w->busy = true;
    w->cfg = *cfg;
    w->job = cfg->job;
    w->cl = cfg->cluster;
    w->m = *model;
    w->rank = w->cl->my_rank;
    w->S = w->cl->n_servers;
    w->W = w->cl->n_workers;
    uint64_t t0 = gv_now_ns(), deadline = t0 + w->cl->connect_timeout;
    gv_ps_caps(&w->caps, &w->tp_cfg, w->cl->io_timeout, w->cl->connect_timeout);
    gv_status_t status = wk_model_check(w);
    if (status != GV_OK) {
        w->busy = false;
        gv_worker_destroy(w);
        return status;
    }
    size_t ab = gv_proto_arena_bound(&w->caps);
    w->arena_buf = wk_alloc(w, ab, 1);
    w->srv = wk_alloc(w, w->S, sizeof(*w->srv));
    w->heavy = wk_alloc(w, w->m.n_tensors, 1);
    status = w->arena_buf && w->srv && w->heavy ? GV_OK : GV_ERR_NOMEM;
    if (status == GV_OK)
        status = wk_layout(w);
    if (status == GV_OK)
        status = wk_host_views(w);
    if (status == GV_OK)
        status = wk_compressor(w);
    if (status == GV_OK && w->job->local_momentum)
        status = wk_velocity(w);
    if (status == GV_OK && w->job->method == GV_JOB_ACCORDION && w->rank == 0) {
        w->epoch_acc = wk_alloc(w, w->m.numel, sizeof(float));
        w->layer_norms = wk_alloc(w, w->m.n_tensors, sizeof(double));
        if (w->epoch_acc == NULL || w->layer_norms == NULL)
            status = GV_ERR_NOMEM;
    }
    for (uint32_t s = 0; status == GV_OK && s < w->S; s++) {
        struct wk_server *ws = &w->srv[s];
        ws->w = w;
        ws->s = s;
        ws->lo = w->map.lo[s];
        ws->n = gv_shard_numel(&w->map, s);
        gv_job_pieces(w->job, ws->n, &ws->pc);
        status = wk_shard_buffers(w, ws);
        ws->link.on_idle = wk_link_idle;
        ws->link.arg = ws;
    }
    if (status == GV_OK) {
        gv_proto_arena_init(&w->arena, w->arena_buf, ab);
        struct gv_tp_handler h = wk_handler();
        status = gv_tp_create(w->cl->transport, &w->tp_cfg, &h, w, &w->tp);
        if (status != GV_OK)
            gv_log(GV_LOG_ERROR, "worker: cannot create the %s transport", w->cl->transport);
    }
    if (status == GV_OK && cfg->checkpoint_dir != NULL && cfg->checkpoint_dir[0] != '\0') {
        /* refused now, not after joining the job (the first residual would fail) */
        char why[200] = "see above";
        if (gv_ps_mkdir(cfg->checkpoint_dir) != GV_OK ||
            gv_ckpt_dir_check(cfg->checkpoint_dir, why, sizeof(why)) != GV_OK) {
            gv_log(GV_LOG_ERROR,
                   "worker %u: refusing to start: --checkpoint-dir %s is not usable (%s)", w->rank,
                   cfg->checkpoint_dir, why);
            status = GV_ERR_INVAL;
        }
    }
    if (status == GV_OK && !gv_tp_has_cap(w->tp, GV_TP_CAP_DEFER_RECV)) {
        gv_log(GV_LOG_ERROR, "worker: the %s transport cannot defer a receive", w->cl->transport);
        status = GV_ERR_UNSUPPORTED;
    }
    if (status == GV_ERR_NOMEM)
        gv_log(GV_LOG_ERROR, "worker: cannot allocate the runtime's buffers");
    if (status == GV_OK)
        status = wk_sync(w, deadline);
    w->busy = false; /* before the helper thread starts: from now on it may run callbacks */
    if (status == GV_OK)
        status = wk_ops_start(w);
    if (status != GV_OK) {
        gv_worker_destroy(w);
        return status;
    }
    gv_log(GV_LOG_INFO,
           "worker %u of %u: in sync with %u servers at iteration %" PRIu64
           " after %.2f s (first decision: %s, CF %g)",
           w->rank, w->W, w->S, w->iter, (double)(gv_now_ns() - t0) * 1e-9,
           gv_adapt_level_str(w->dec.level), w->dec.cf_send);
    *w_p = w;
    return GV_OK;
}

/* A worker that fails tells the servers still connected why, so that their abort names the
 * cause (a server that only saw this worker's connection close would name this worker). */
static void wk_tell_failure(struct gv_worker *w)
{
    char text[240];
    if (w->stopped || w->told)
        return; /* the servers stopped the job, or were told already: nothing to tell */
    w->told = true;
    snprintf(text, sizeof(text), "worker %u stops: %.200s", w->rank, w->fail);
    bool sent = false;
    for (uint32_t s = 0; w->srv != NULL && s < w->S; s++) {
        struct wk_server *ws = &w->srv[s];
        if (ws->closed || ws->link.c == NULL || ws->got_error ||
            ws->hs.state != GV_PS_CLIENT_WELCOMED)
            continue;
        struct gv_proto_msg m;
        gv_ps_link_msg(&ws->link, &m, GV_PROTO_MSG_ERROR, w->iter);
        m.u.error.code = w->fail_status;
        m.u.error.text = text;
        sent |= gv_ps_link_send(&ws->link, &m, NULL, 0, NULL) == GV_OK;
    }
    uint64_t end = gv_now_ns() + 200000000ull;
    while (sent && gv_now_ns() < end) {
        bool idle = true;
        for (uint32_t s = 0; s < w->S; s++)
            idle &= w->srv[s].closed || gv_ps_link_idle(&w->srv[s].link);
        if (idle || gv_tp_progress(w->tp, 10) < 0)
            break;
    }
}

void gv_worker_fail(struct gv_worker *w, const char *why)
{
    pthread_mutex_lock(&w->mu);
    wk_fail(w, GV_ERR_CLOSED, "%s", why);
    if (w->tp != NULL)
        wk_tell_failure(w);
    pthread_mutex_unlock(&w->mu);
}

void gv_worker_destroy(struct gv_worker *w)
{
    if (w == NULL)
        return;
    wk_ops_stop(w);
    if (w->fail_status != GV_OK && w->tp != NULL)
        wk_tell_failure(w);
    gv_tp_destroy(w->tp);
    for (uint32_t s = 0; w->srv != NULL && s < w->S; s++) {
        struct wk_server *ws = &w->srv[s];
        gv_ps_link_cleanup(&ws->link);
        gv_ps_rx_cleanup(&ws->rx);
        gv_free(ws->sidx);
        gv_free(ws->sval);
        gv_free(ws->ubuf);
        gv_free(ws->heavy);
    }
    for (uint32_t u = 0; u < w->n_units; u++) {
        if (w->ef != NULL)
            gv_ef_destroy(w->ef[u]);
        if (w->lmin != NULL) {
            wk_cmp_free(w, w->lmin[u].idx);
            wk_cmp_free(w, w->lmin[u].val);
        }
        if (w->lcand != NULL) {
            wk_cmp_free(w, w->lcand[u].idx);
            wk_cmp_free(w, w->lcand[u].val);
        }
    }
    if (w->resid != NULL)
        wk_cmp_free(w, w->resid);
    gv_cmp_destroy(w->cmp); /* after the memory it gave */
    gv_free(w->ef);
    gv_free(w->lmin);
    gv_free(w->lcand);
    gv_buf_free(&w->hsent_buf);
    gv_buf_free(&w->mirror);
    gv_free(w->epoch_acc);
    if (w->lmom_buf.ptr != NULL)
        gv_buf_free(&w->lmom_buf);
    else
        gv_free(w->lmom);
    gv_free(w->layer_norms);
    gv_shard_map_cleanup(&w->map);
    if (w->unit_off != w->off)
        gv_free(w->unit_off);
    gv_free(w->off);
    gv_free(w->tnames);
    gv_free(w->layout_wire);
    gv_free(w->srv);
    gv_free(w->heavy);
    gv_free(w->arena_buf);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    gv_free(w);
}

uint64_t gv_worker_iteration(const struct gv_worker *w)
{
    return w->iter; /* changed by the caller's own gv_worker_step only */
}

void gv_worker_decision(const struct gv_worker *w, struct gv_worker_decision *d)
{
    d->level = w->dec.level;
    d->cf_send = w->dec.cf_send;
    d->theta_min = w->dec.theta_min;
    d->cf_candidate = w->dec.cf_candidate;
    d->levels = wk_levels(w, &w->dec);
}

/* Every server has answered (BYE, or an ERROR), closed, or this worker failed meanwhile. */
static bool wk_all_answered(const struct gv_worker *w)
{
    if (w->fail_status != GV_OK)
        return true;
    for (uint32_t s = 0; s < w->S; s++) {
        const struct wk_server *ws = &w->srv[s];
        if (!ws->closed && !ws->got_error && !(ws->got_bye && gv_ps_link_idle(&ws->link)))
            return false;
    }
    return true;
}

gv_status_t gv_worker_finish(struct gv_worker *w, uint64_t iterations)
{
    pthread_mutex_lock(&w->mu);
    for (uint32_t s = 0; s < w->S && w->fail_status == GV_OK; s++) {
        struct wk_server *ws = &w->srv[s];
        if (ws->closed || ws->link.c == NULL)
            continue;
        struct gv_proto_msg m;
        gv_ps_link_msg(&ws->link, &m, GV_PROTO_MSG_BYE, iterations);
        (void)gv_ps_link_send(&ws->link, &m, NULL, 0, NULL);
    }
    /* every server's answer says how the job ended: BYE (well), or an ERROR (it failed, or
     * was stopped); a server that dies meanwhile is found by the liveness check. Without
     * one, the I/O timeout bounds the wait. */
    uint64_t cap = w->live_on ? 3600000000000ull : GV_MAX(w->cl->io_timeout, 1000000000ull);
    uint64_t end = gv_now_ns() + cap;
    while (!wk_all_answered(w) && gv_now_ns() < end) {
        int ms = wk_tick(w, gv_now_ns());
        if (gv_tp_progress(w->tp, GV_MIN(ms, 20)) < 0)
            break;
    }
    gv_status_t status = w->fail_status;
    for (uint32_t s = 0; s < w->S && status == GV_OK; s++) {
        struct wk_server *ws = &w->srv[s];
        if (ws->got_error || (ws->closed && !ws->got_bye))
            status = wk_server_status(w, ws);
        else if (!ws->got_bye)
            wk_fail(w, status = GV_ERR_TIMEOUT, "%s never answered this worker's BYE", ws->name);
    }
    /* every server's BYE says the end's checkpoint is committed: this worker's part of it
     * (its residual of the last iteration, written after the last step) counts with it */
    if (w->ck_pend_iter != 0 && w->ck_pend_iter == w->iter) {
        uint64_t it = w->ck_pend_iter;
        w->ck_pend_iter = 0;
        int keep = w->cfg.checkpoint_keep > 0 ? w->cfg.checkpoint_keep : 3;
        if (status == GV_OK && w->ck_pend_status == GV_OK &&
            gv_ckpt_commit(w->ckpt_dir, w->rank, it, keep) == GV_OK) {
            w->ckpt_written++;
        } else {
            (void)gv_ckpt_discard(w->ckpt_dir, w->rank, it);
            if (status == GV_OK)
                wk_fail(w, status = GV_ERR_CKPT,
                        "its residual of the final checkpoint (iteration %" PRIu64
                        ") could not be written: a restart from there starts it from zero",
                        it);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return status;
}

void gv_worker_get_summary(const struct gv_worker *w, struct gv_worker_summary *sum)
{
    pthread_mutex_lock((pthread_mutex_t *)&w->mu);
    memset(sum, 0, sizeof(*sum));
    sum->rank = w->rank;
    sum->num_workers = w->W;
    sum->num_servers = w->S;
    sum->iterations = w->steps;
    sum->bytes = w->bytes;
    uint64_t sent = 0, recv = 0;
    for (uint32_t s = 0; s < w->S; s++) {
        sent += w->srv[s].link.bytes_sent;
        recv += w->srv[s].link.bytes_recv;
    }
    sum->setup_sent = sent - w->bytes.iter_sent;
    sum->setup_recv = recv - w->bytes.iter_recv;
    sum->checksum_checks = w->checks;
    sum->checksum_mismatches = w->mismatches;
    sum->resyncs = w->resyncs;
    sum->pushes = w->pushes;
    sum->pushes_early = w->pushes_early;
    sum->params_waits = w->params_waits;
    sum->peak_rss = gv_ps_peak_rss();
    sum->param_bytes = 4 * (uint64_t)w->m.numel;
    sum->buffer_bytes = w->buffer_bytes;
    sum->device_bytes = w->device_bytes;
    sum->stopped = w->stopped;
    sum->resumed_from = w->resumed_from;
    sum->residual_restored = w->residual_restored;
    sum->ckpt_written = w->ckpt_written;
    pthread_mutex_unlock((pthread_mutex_t *)&w->mu);
}
