/* metrics.c: what a server exposes in the Prometheus text format (ops/'s registry) and,
 * with --metrics-addr, serves on http://HOST:PORT/metrics: the iteration, samples and their
 * rate, bytes in and out, the compression factor and (server 0) GraVAC's gains, the workers'
 * liveness, the round time's quantiles, checkpoints and refused connections. Updated after
 * each round and, for the clocks, at most every 200 ms from the loop. */
#include "srv.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

struct srv_metrics {
    struct gv_metric *iteration, *rounds, *samples, *rate, *bytes_in, *bytes_out;
    struct gv_metric *cf, *cf_floor, *cf_cand, *gain_floor, *gain_cand, *loss;
    struct gv_metric *workers, *dead, *round_s, *ckpt_iter, *ckpt_s, *ckpt_fail, *ckpt_total;
    struct gv_metric *pending;
    struct gv_metric **last_seen; /* [W] */
    uint64_t in_prev, out_prev;   /* bytes already counted */
    uint32_t dead_prev;
    uint64_t t_tick;
    uint64_t t_prev_round; /* the previous round's end, for the round time */
};

static double mx_unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static gv_status_t mx_get(struct gv_server *srv, enum gv_metric_type type, const char *name,
                          const char *help, const char *const *labels, struct gv_metric **m_p)
{
    return gv_metrics_get(srv->reg, type, name, help, labels, 0, m_p);
}

static gv_status_t mx_register(struct gv_server *srv, struct srv_metrics *x)
{
    char rank[16];
    snprintf(rank, sizeof(rank), "%u", srv->rank);
    const char *const info_labels[] = {"rank",   rank,
                                       "method", gv_job_method_str(srv->job->method),
                                       "policy", gv_dead_policy_str(srv->cfg.dead_policy),
                                       NULL};
    struct gv_metric *info;
    gv_status_t st = mx_get(srv, GV_METRIC_GAUGE, "gravac_server_info",
                            "This server: its rank, the compression method, the dead-worker "
                            "policy (value 1).",
                            info_labels, &info);
    if (st == GV_OK)
        gv_metric_set(info, 1);
#define MX(field, type, name, help)                                                                \
    if (st == GV_OK)                                                                               \
    st = mx_get(srv, type, name, help, NULL, &x->field)
    MX(iteration, GV_METRIC_GAUGE, "gravac_iteration",
       "The iteration this server works on (iterations completed, resumed ones included).");
    MX(rounds, GV_METRIC_COUNTER, "gravac_rounds_total", "Rounds completed by this process.");
    MX(samples, GV_METRIC_COUNTER, "gravac_samples_total",
       "Training samples of the completed rounds (batch x workers averaged).");
    MX(rate, GV_METRIC_GAUGE, "gravac_samples_per_second",
       "Samples per second over the last round (all workers).");
    MX(bytes_in, GV_METRIC_COUNTER, "gravac_bytes_received_total",
       "Bytes received from every peer (prefix, header and payload).");
    MX(bytes_out, GV_METRIC_COUNTER, "gravac_bytes_sent_total",
       "Bytes sent to every peer (prefix, header and payload).");
    MX(cf, GV_METRIC_GAUGE, "gravac_compression_factor",
       "Compression factor the workers send at in the next iteration (1: dense).");
    MX(cf_floor, GV_METRIC_GAUGE, "gravac_compression_factor_floor",
       "GraVAC's floor compression factor (theta_min).");
    MX(cf_cand, GV_METRIC_GAUGE, "gravac_compression_factor_candidate",
       "GraVAC's candidate compression factor under evaluation.");
    MX(workers, GV_METRIC_GAUGE, "gravac_workers", "Workers in the job (alive, expected).");
    MX(pending, GV_METRIC_GAUGE, "gravac_connections_pending",
       "Connections accepted whose handshake is not complete (a flood of them shows here).");
    MX(dead, GV_METRIC_COUNTER, "gravac_workers_dead_total",
       "Workers this server declared dead (the continue policy went on without them).");
    MX(round_s, GV_METRIC_SUMMARY, "gravac_round_seconds",
       "Time of one training iteration (round) seen by this server.");
    MX(ckpt_iter, GV_METRIC_GAUGE, "gravac_checkpoint_iteration",
       "Iteration of the last checkpoint written or resumed from (0: none).");
    MX(ckpt_s, GV_METRIC_GAUGE, "gravac_checkpoint_duration_seconds",
       "Time the last checkpoint write took.");
    MX(ckpt_total, GV_METRIC_COUNTER, "gravac_checkpoints_total", "Checkpoints written.");
    MX(ckpt_fail, GV_METRIC_COUNTER, "gravac_checkpoint_failures_total",
       "Checkpoint writes that failed (training went on).");
    bool gravac = srv->job->method == GV_JOB_GRAVAC_EXP || srv->job->method == GV_JOB_GRAVAC_GEO;
    if (srv->rank == 0 && gravac) {
        static const char gain_help[] = "GraVAC's smoothed compression gain (the share of the "
                                        "gradient's energy kept) per level.";
        const char *const fl[] = {"level", "floor", NULL};
        const char *const ca[] = {"level", "candidate", NULL};
        if (st == GV_OK)
            st = mx_get(srv, GV_METRIC_GAUGE, "gravac_compression_gain", gain_help, fl,
                        &x->gain_floor);
        if (st == GV_OK)
            st = mx_get(srv, GV_METRIC_GAUGE, "gravac_compression_gain", gain_help, ca,
                        &x->gain_cand);
    }
    if (srv->rank == 0)
        MX(loss, GV_METRIC_GAUGE, "gravac_loss", "Mean training loss of the last round.");
#undef MX
    for (uint32_t w = 0; st == GV_OK && w < srv->W; w++) {
        char id[16];
        snprintf(id, sizeof(id), "%u", w);
        const char *const l[] = {"worker", id, NULL};
        st = mx_get(srv, GV_METRIC_GAUGE, "gravac_worker_last_seen_timestamp_seconds",
                    "Unix time this server last heard from each worker (0: not yet).", l,
                    &x->last_seen[w]);
    }
    return st;
}

gv_status_t srv_metrics_init(struct gv_server *srv)
{
    struct srv_metrics *x = gv_calloc(1, sizeof(*x));
    if (x == NULL)
        return GV_ERR_NOMEM;
    srv->mx = x;
    x->last_seen = gv_calloc(srv->W, sizeof(*x->last_seen));
    if (x->last_seen == NULL)
        return GV_ERR_NOMEM;
    gv_status_t status = gv_metrics_create(&srv->reg);
    if (status == GV_OK)
        status = mx_register(srv, x);
    if (status != GV_OK)
        return status;
    gv_metric_set(x->iteration, (double)srv->round.iter);
    gv_metric_set(x->ckpt_iter, (double)srv->ckpt.last_iter);
    gv_metric_set(x->workers, (double)srv->W);
    const struct gv_hostport *a = &srv->cfg.metrics_addr;
    if (a->host[0] == '\0' && a->port == 0)
        return GV_OK;
    if ((status = gv_metrics_http_start(srv->reg, a, &srv->http)) != GV_OK)
        return status;
    char url[800];
    gv_log(GV_LOG_INFO, "server %u: metrics at %s", srv->rank,
           gv_metrics_http_url(srv->http, url, sizeof(url)));
    return GV_OK;
}

void srv_metrics_cleanup(struct gv_server *srv)
{
    gv_metrics_http_stop(srv->http);
    srv->http = NULL;
    gv_metrics_destroy(srv->reg);
    srv->reg = NULL;
    if (srv->mx != NULL)
        gv_free(srv->mx->last_seen);
    gv_free(srv->mx);
    srv->mx = NULL;
}

uint16_t gv_server_metrics_port(const struct gv_server *srv)
{
    return srv->http != NULL ? gv_metrics_http_port(srv->http) : 0;
}

static void mx_bytes(struct gv_server *srv, struct srv_metrics *x)
{
    uint64_t in = srv->net.gone_recv, out = srv->net.gone_sent;
    const struct srv_peer_list *lists[] = {&srv->net.pending, &srv->net.joined};
    for (size_t i = 0; i < GV_ARRAY_LEN(lists); i++)
        for (const struct srv_peer *p = lists[i]->head; p != NULL; p = p->next) {
            in += p->link.bytes_recv;
            out += p->link.bytes_sent;
        }
    gv_metric_inc(x->bytes_in, (double)(in - x->in_prev));
    gv_metric_inc(x->bytes_out, (double)(out - x->out_prev));
    x->in_prev = in;
    x->out_prev = out;
}

void srv_metrics_round(struct gv_server *srv, uint64_t now)
{
    struct srv_metrics *x = srv->mx;
    const struct srv_round *r = &srv->round;
    if (x == NULL)
        return;
    uint64_t prev = x->t_prev_round != 0 ? x->t_prev_round : r->t_first_ns;
    double period = (double)(now - prev) * 1e-9;
    x->t_prev_round = now;
    double samples = (double)srv->job->batch * r->n_avg;
    gv_metric_set(x->iteration, (double)r->iter); /* the round completed: iter is the next */
    gv_metric_inc(x->rounds, 1);
    mx_bytes(srv, x);
    gv_metric_inc(x->samples, samples);
    if (period > 0) {
        gv_metric_set(x->rate, samples / period);
        gv_metric_observe(x->round_s, period);
    }
    const struct gv_ps_decision *d = &r->cur.d; /* the next round's */
    gv_metric_set(x->cf, d->cf_send);
    gv_metric_set(x->cf_floor, d->theta_min);
    gv_metric_set(x->cf_cand, d->cf_candidate);
    if (srv->rank == 0) {
        struct gv_adapt_info info;
        gv_adapt_get_info(r->ctl, &info);
        if (info.gain_min_known && x->gain_floor != NULL)
            gv_metric_set(x->gain_floor, info.gain_min);
        if (info.gain_cand_known && x->gain_cand != NULL)
            gv_metric_set(x->gain_cand, info.gain_cand);
        if (r->n_stats > 0)
            gv_metric_set(x->loss, r->agg.loss_sum / r->n_stats);
    }
}

void srv_metrics_tick(struct gv_server *srv, uint64_t now)
{
    struct srv_metrics *x = srv->mx;
    if (x == NULL || now - x->t_tick < 200000000ull)
        return;
    x->t_tick = now;
    mx_bytes(srv, x);
    double unix_now = mx_unix_now();
    uint32_t alive = 0;
    for (uint32_t w = 0; w < srv->W; w++) {
        const struct srv_peer *p = srv->net.workers[w];
        if (p == NULL)
            continue;
        alive += srv_round_member(srv, w);
        if (p->t_seen_ns > 0 && p->t_seen_ns <= now)
            gv_metric_set(x->last_seen[w], unix_now - (double)(now - p->t_seen_ns) * 1e-9);
    }
    gv_metric_set(x->workers, alive);
    gv_metric_set(x->pending, (double)srv->net.pending.n);
    gv_metric_inc(x->dead, (double)(srv->round.n_dead - x->dead_prev));
    x->dead_prev = srv->round.n_dead;
}

void srv_metrics_refused(struct gv_server *srv, const char *reason)
{
    if (srv->reg == NULL)
        return;
    const char *const l[] = {"reason", reason, NULL};
    struct gv_metric *m;
    if (gv_metrics_get(srv->reg, GV_METRIC_COUNTER, "gravac_connections_refused_total",
                       "Connections refused or closed before joining, by reason.", l, 0,
                       &m) == GV_OK)
        gv_metric_inc(m, 1);
}

void srv_metrics_ckpt(struct gv_server *srv, uint64_t iter, double secs, bool ok)
{
    struct srv_metrics *x = srv->mx;
    if (x == NULL)
        return;
    if (!ok) {
        gv_metric_inc(x->ckpt_fail, 1);
        return;
    }
    gv_metric_set(x->ckpt_iter, (double)iter);
    gv_metric_set(x->ckpt_s, secs);
    gv_metric_inc(x->ckpt_total, 1);
}
