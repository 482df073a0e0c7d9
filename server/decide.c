/* decide.c: server 0's decision: the controller of the job's method (adapt/), fed every round
 * with the workers' statistics summed in rank order and the round's timings, and its decision
 * in the round's terms, sent to the other servers with the round's membership. Its checkpoint
 * state and the decision it restores are here too. */
#include "srv.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static void decide_log(const char *json, void *arg)
{
    struct srv_round *r = arg;
    if (r->declog != NULL) {
        fprintf(r->declog, "%s\n", json);
        fflush(r->declog);
    }
}

gv_status_t srv_decide_init(struct gv_server *srv)
{
    struct srv_round *r = &srv->round;
    struct gv_adapt_config ac;
    gv_job_adapt_config(srv->job, srv->shard.n_tensors, &ac);
    gv_status_t status = gv_adapt_create(&ac, &r->ctl);
    if (status != GV_OK)
        return status;
    if (srv->cfg.decision_log != NULL && srv->cfg.decision_log[0] != '\0') {
        r->declog = fopen(srv->cfg.decision_log, "w");
        if (r->declog == NULL) {
            gv_log(GV_LOG_ERROR, "server: cannot open the decision log %s", srv->cfg.decision_log);
            return GV_ERR_IO;
        }
        gv_adapt_set_log(r->ctl, decide_log, r);
    }
    if ((status = srv_decide_load(srv)) != GV_OK)
        return status;
    gv_log(GV_LOG_INFO, "controller: %s, first decision %s at CF %g", gv_adapt_kind_str(ac.kind),
           gv_adapt_level_str(r->cur.d.level), r->cur.d.cf_send);
    return GV_OK;
}

/* A controller decision in the round's terms. */
static void decide_adopt(struct gv_server *srv, struct srv_decision *dst,
                        const struct gv_adapt_decision *d)
{
    dst->iter = d->iter;
    dst->d = (struct gv_ps_decision){.level = d->level, .theta_min = d->theta_min,
                                     .cf_candidate = d->cf_candidate, .cf_send = d->cf_send};
    for (uint32_t t = 0; t < srv->shard.n_tensors; t++)
        dst->heavy[t] = d->num_layers > 0 && d->layer_cf[t] > d->theta_min;
}

void srv_decide_cleanup(struct gv_server *srv)
{
    struct srv_round *r = &srv->round;
    if (r->declog != NULL)
        fclose(r->declog);
    r->declog = NULL;
    gv_adapt_destroy(r->ctl);
    r->ctl = NULL;
}

gv_status_t srv_decide_load(struct gv_server *srv)
{
    struct srv_round *r = &srv->round;
    struct gv_adapt_decision d = {.layer_cf = r->layer_cf, .layer_cap = srv->shard.n_tensors};
    gv_status_t status = gv_adapt_current(r->ctl, &d);
    if (status != GV_OK)
        return status;
    decide_adopt(srv, &r->cur, &d);
    return GV_OK;
}

/* ---------------------------------------------------------------- each round */

static void decide_log_change(struct gv_server *srv, const struct srv_decision *o,
                             const struct srv_decision *n)
{
    if (o->d.level == n->d.level && o->d.cf_send == n->d.cf_send &&
        o->d.theta_min == n->d.theta_min && o->d.cf_candidate == n->d.cf_candidate)
        return;
    srv->round.cf_changes++;
    gv_log(GV_LOG_INFO, "controller: iteration %" PRIu64 ": %s CF %g -> %s CF %g (floor %g, "
           "candidate %g)", n->iter, gv_adapt_level_str(o->d.level), o->d.cf_send,
           gv_adapt_level_str(n->d.level), n->d.cf_send, n->d.theta_min, n->d.cf_candidate);
}

gv_status_t srv_decide(struct gv_server *srv)
{
    struct srv_round *r = &srv->round;
    uint64_t now = gv_now_ns();
    double period = (double)(now - r->t_prev_all_ns) * 1e-9;
    r->t_prev_all_ns = now;
    const struct srv_agg *a = &r->agg;
    bool norms = a->epoch_end && srv->job->method == GV_JOB_ACCORDION;
    struct gv_adapt_obs obs = {
        .iter = r->iter,
        .level = r->cur.d.level,
        .cf_sent = r->cur.d.cf_send,
        .norm2_ef = a->g_ef, .norm2_min = a->g_min, .norm2_cand = a->g_c,
        .t_compute = a->compute_max, .t_compress = a->compress_max,
        .t_comm = GV_MAX(0.0, period - a->compute_max - a->compress_max),
        .samples = a->samples, .num_workers = GV_MAX(1u, r->n_stats),
        .lr = (double)gv_optim_lr(&srv->job->optim, (int64_t)r->iter),
        .epoch_end = norms,
        .num_layers = norms ? a->n_layer_norms : 0,
        .layer_norms = norms ? r->layer_norms : NULL,
    };
    struct gv_adapt_decision d = {.layer_cf = r->layer_cf, .layer_cap = srv->shard.n_tensors};
    gv_status_t status = gv_adapt_update(r->ctl, &obs, &d);
    if (status != GV_OK) {
        srv_abort(srv, GV_ERR_INVAL, "the controller refused the statistics of iteration %" PRIu64
                  " (||g_ef||^2 %g, loss %g: has training diverged?)", r->iter, a->g_ef,
                  a->loss_sum / GV_MAX(1u, r->n_stats));
        return status;
    }
    decide_adopt(srv, &r->next, &d);
    decide_log_change(srv, &r->cur, &r->next);
    for (uint32_t s = 1; s < srv->S; s++) {
        struct srv_peer *p = srv->net.servers[s];
        if (p == NULL || p->closed || srv_send_decision(srv, p, &r->next, r->memb) != GV_OK) {
            srv_abort(srv, GV_ERR_CLOSED, "cannot send the decision to server %u", s);
            return GV_ERR_CLOSED;
        }
    }
    return GV_OK;
}

