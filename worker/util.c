/* util.c: what every part of the worker runtime uses: recording the first failure, a server's
 * connection state, the number of compression levels of a decision, and copies between a GPU
 * replica and its host mirrors. */
#include "wk.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

void wk_fail(struct gv_worker *w, gv_status_t status, const char *fmt, ...)
{
    if (w->fail_status != GV_OK)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->fail, sizeof(w->fail), fmt, ap);
    va_end(ap);
    w->fail_status = status;
    gv_log(w->stopped ? GV_LOG_WARN : GV_LOG_ERROR, "worker %u: %s", w->rank, w->fail);
}

gv_status_t wk_server_status(struct gv_worker *w, struct wk_server *ws)
{
    if (ws->got_error) {
        if (ws->error_code == GV_OK) { /* stopped on request: not a failure of this worker */
            w->stopped = true;
            wk_fail(w, GV_ERR_CLOSED, "the job was stopped on request (said %s): %s", ws->name,
                    ws->error_text);
        } else {
            wk_fail(w, ws->error_code == GV_ERR_CKPT ? GV_ERR_CKPT : GV_ERR_CLOSED,
                    "%s ended the job with an error: %s", ws->name, ws->error_text);
        }
        return w->fail_status;
    }
    if (ws->closed && ws->hs.state != GV_PS_CLIENT_WELCOMED) {
        /* start-up: say what was at the other end, if anything */
        if (ws->close_unsent && ws->close_reason == GV_ERR_TIMEOUT)
            wk_fail(w, GV_ERR_TIMEOUT,
                    "cannot reach %s within %.1f s (--connect-timeout): nothing accepted the "
                    "connection (is it up, and is that its address?)",
                    ws->name, (double)w->cl->connect_timeout * 1e-9);
        else if (ws->close_why[0] != '\0')
            wk_fail(w, GV_ERR_PROTO,
                    "%s answered with something that is not gravac's protocol (%s): is another "
                    "program listening on that port?",
                    ws->name, ws->close_why);
        else if (ws->close_unanswered)
            wk_fail(w, GV_ERR_CLOSED,
                    "%s closed the connection without answering the handshake (%s): is a gravac "
                    "server listening there?",
                    ws->name, gv_status_str(ws->close_reason));
        else
            wk_fail(w, GV_ERR_CLOSED, "%s closed the connection during the handshake (%s)",
                    ws->name, gv_status_str(ws->close_reason));
        return w->fail_status;
    }
    if (ws->closed) {
        wk_fail(w, GV_ERR_CLOSED, "%s closed the connection at iteration %" PRIu64 " (%s)",
                ws->name, w->iter, gv_status_str(ws->close_reason));
        return w->fail_status; /* the first failure: a refusal that closed it stays one */
    }
    return w->fail_status;
}

uint32_t wk_levels(const struct gv_worker *w, const struct gv_ps_decision *d)
{
    /* AUTO's dense arms: no controller reads the norms of a top-k that is not sent, and with
     * no residual owed g_ef is g; the first dense iteration after a sparse one still compresses,
     * so that its push carries the residual (g + r) and clears it */
    if (w->job->method == GV_JOB_AUTO && d->level == GV_ADAPT_LEVEL_DENSE && w->resid_zero)
        return 0;
    switch (w->job->method) {
    case GV_JOB_DENSE:
    case GV_JOB_DENSE_FP16: return 0;
    case GV_JOB_STATIC:
    case GV_JOB_ACCORDION: return 1;
    default: return d->cf_candidate > d->theta_min ? 2 : 1;
    }
}

gv_status_t wk_download(struct gv_worker *w, float *host, const float *dev, size_t n,
                        const char *what)
{
    gv_status_t status = gv_nn_backend_download(w->m.be, host, dev, n * sizeof(float));
    if (status != GV_OK)
        wk_fail(w, status, "cannot copy %s from the GPU (%s)", what, gv_status_str(status));
    return status;
}

gv_status_t wk_upload(struct gv_worker *w, float *dev, const float *host, size_t n,
                      const char *what)
{
    gv_status_t status = gv_nn_backend_upload(w->m.be, dev, host, n * sizeof(float));
    if (status != GV_OK)
        wk_fail(w, status, "cannot copy %s to the GPU (%s)", what, gv_status_str(status));
    return status;
}
