/* shard.c: the shard a server holds: the model's layout (nn/'s, computed from the job at create;
 * or with --model external worker 0's, adopted when its LAYOUT arrives), the shard map, the
 * fingerprint, and the shard's parameters and momentum. Adopting a layout also builds what is
 * sized by it: the round's buffers and the downlink's residual. */
#include "srv.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static void shard_log_line(const char *line, void *arg)
{
    (void)arg;
    gv_log(GV_LOG_INFO, "%s", line);
}

/* The fingerprint nn/'s models have always had (gv_job_fingerprint over their tensor list). */
static uint64_t shard_job_fingerprint(const struct gv_server *srv, char *desc, size_t len)
{
    const struct gv_layout *l = &srv->shard.layout;
    char names[GV_LAYOUT_JOB_MAX][24];
    for (uint32_t t = 0; t < l->n && t < GV_LAYOUT_JOB_MAX; t++)
        snprintf(names[t], sizeof(names[t]), "%s", l->t[t].name);
    return gv_job_fingerprint(srv->job, (const char(*)[24])names, l->numel, l->n, desc, len);
}

/* The map, the fingerprint and the buffers, from shard.layout. */
static gv_status_t shard_build(struct gv_server *srv)
{
    struct srv_shard *sh = &srv->shard;
    const struct gv_layout *l = &sh->layout;
    gv_status_t status = gv_shard_map_init(&sh->map, l->numel, l->n, srv->S);
    if (status != GV_OK)
        return status;
    sh->n_tensors = l->n;
    sh->lo = sh->map.lo[srv->rank];
    sh->n = gv_shard_numel(&sh->map, srv->rank);
    const char **names = gv_calloc(l->n, sizeof(*names));
    if (names == NULL)
        return GV_ERR_NOMEM;
    for (uint32_t t = 0; t < l->n; t++)
        names[t] = l->t[t].name;
    gv_shard_map_describe(&sh->map, names, shard_log_line, NULL);
    gv_free(names);
    char desc[4096];
    sh->fingerprint = gv_job_external(srv->job)
                          ? gv_layout_fingerprint(srv->job, l, desc, sizeof(desc))
                          : shard_job_fingerprint(srv, desc, sizeof(desc));
    gv_log(GV_LOG_DEBUG, "model fingerprint %016" PRIx64 " of: %s", sh->fingerprint, desc);
    char(*tnames)[24] = gv_calloc(l->n, sizeof(*tnames));
    if (tnames == NULL)
        return GV_ERR_NOMEM;
    for (uint32_t t = 0; t < l->n; t++)
        snprintf(tnames[t], sizeof(tnames[t]), "%s", l->t[t].name);
    sh->ckpt_fingerprint =
        gv_job_state_fingerprint(srv->job, (const char(*)[24])tnames, l->numel, l->n);
    gv_free(tnames);
    sh->params = gv_calloc(sh->n, sizeof(float)); /* zeroed: untouched pages cost nothing */
    sh->momentum = gv_calloc(sh->n, sizeof(float));
    if (sh->params == NULL || sh->momentum == NULL) {
        gv_log(GV_LOG_ERROR, "server: cannot allocate a %" PRIu64 "-parameter shard", sh->n);
        return GV_ERR_NOMEM;
    }
    sh->ready = true;
    return GV_OK;
}

gv_status_t srv_shard_init(struct gv_server *srv)
{
    struct srv_shard *sh = &srv->shard;
    gv_layout_init(&sh->layout);
    if (gv_job_external(srv->job)) {
        gv_log(GV_LOG_INFO, "server %u: --model external: the layout comes from the first worker",
               srv->rank);
        return GV_OK;
    }
    gv_status_t status = gv_layout_from_job(&sh->layout, srv->job);
    if (status != GV_OK)
        return status;
    snprintf(sh->layout_from, sizeof(sh->layout_from), "nn/'s %s",
             gv_nn_model_kind_str(srv->job->model));
    return shard_build(srv);
}

gv_status_t srv_shard_adopt(struct gv_server *srv, struct gv_layout *l, const char *from)
{
    struct srv_shard *sh = &srv->shard;
    if (sh->ready)
        return GV_ERR_INVAL;
    sh->layout = *l;
    gv_layout_init(l);
    snprintf(sh->layout_from, sizeof(sh->layout_from), "%s", from);
    gv_log(GV_LOG_INFO, "server %u: model layout from %s: %u tensors, %" PRIu64 " parameters",
           srv->rank, from, sh->layout.n, sh->layout.total);
    gv_status_t status = shard_build(srv);
    if (status == GV_OK)
        status = srv_round_init(srv); /* sized by the shard; server 0: the controller */
    if (status == GV_OK)
        status = srv_down_create(srv->job, &sh->map, srv->rank, &srv->down);
    if (status != GV_OK) {
        sh->ready = false; /* nothing may use a half-built shard */
        return status;
    }
    char b[32];
    gv_ps_fmt_bytes((double)sh->n * 4.0, b, sizeof(b));
    gv_log(GV_LOG_INFO,
           "server %u: shard [%" PRIu64 ", %" PRIu64 ") of %" PRIu64 " parameters (%s)", srv->rank,
           sh->lo, sh->lo + sh->n, sh->map.total, b);
    return GV_OK;
}

void srv_shard_cleanup(struct gv_server *srv)
{
    struct srv_shard *sh = &srv->shard;
    gv_shard_map_cleanup(&sh->map);
    gv_layout_cleanup(&sh->layout);
    gv_free(sh->params);
    gv_free(sh->momentum);
}
