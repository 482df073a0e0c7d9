/* server_main.c: the gravac-server program: one server process of the parameter server (one
 * shard, or --conns-per-server shards on as many threads). Options come from flags, GV_*
 * environment variables and the config file ([server] and common sections);
 * the cluster from --servers/--rank, a rendezvous directory, or MPI/Slurm variables. Exit
 * status: 0 when the job finished, 1 when it failed or was aborted, 2 for bad options or a
 * refused checkpoint (retrying cannot help), 4 when a checkpoint could not be written by every
 * process (the job stopped under --checkpoint-failure-policy stop, or its final checkpoint
 * failed: resumable only from the last committed one), 3 when it was stopped on request (SIGTERM or
 * SIGINT here or at another process of the job; with --checkpoint-dir a checkpoint was written
 * and a restart resumes from it). */
#include "gv_server.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static volatile int stop_flag;

static void on_signal(int sig)
{
    stop_flag = sig;
}

/* One shard of this process (--conns-per-server: one per connection to each worker). */
struct lane {
    struct gv_cluster cl; /* the process's, with this lane's rank */
    struct gv_server_config sc;
    struct gv_server *srv;
    gv_status_t status;
    pthread_t th;
    bool threaded;
    struct gv_trace *trace; /* --trace: this lane's timeline, or NULL */
};

static void *lane_run(void *arg)
{
    struct lane *l = arg;
    l->status = gv_server_run(l->srv, &stop_flag);
    return NULL;
}

static void print_line(const char *line, void *arg)
{
    (void)arg;
    printf("summary: %s\n", line);
}

static void print_summary(const struct gv_server *srv, uint64_t rss0)
{
    struct gv_server_summary s;
    gv_server_get_summary(srv, &s);
    char a[32], b[32], c[32];
    printf("summary: server %u of %u: %" PRIu64 " iterations in %.1f s, shard [%" PRIu64
           ", %" PRIu64 ") of %" PRIu64 " parameters, %u workers, %" PRIu64 " decision changes\n",
           s.rank, s.num_servers, s.iterations, s.wall_s, s.shard_lo, s.shard_lo + s.shard_numel,
           s.shard_numel, s.num_workers, s.cf_changes);
    double it = s.iterations ? (double)s.iterations : 1.0;
    gv_ps_fmt_bytes((double)s.bytes.iter_sent / it, a, sizeof(a));
    gv_ps_fmt_bytes((double)s.bytes.iter_recv / it, b, sizeof(b));
    printf("summary: bytes per iteration (all workers): sent %s, received %s; by CF:\n", a, b);
    gv_ps_bytes_describe(&s.bytes, print_line, NULL);
    /* the bound applies to the raw peak (VmHWM), shared libraries included */
    char d[32];
    gv_ps_fmt_bytes((double)s.peak_rss, a, sizeof(a));
    gv_ps_fmt_bytes((double)s.bound_rss, b, sizeof(b));
    gv_ps_fmt_bytes((double)s.shard_numel * 4.0, c, sizeof(c));
    gv_ps_fmt_bytes((double)rss0, d, sizeof(d));
    printf("summary: peak RSS %s (%s at start); bound 4 x shard (%s) + 64 MiB = %s: %s\n", a, d, c,
           b, s.peak_rss <= s.bound_rss ? "within" : "EXCEEDED");
    printf("summary: workers left %u of %u; %s; %" PRIu64 " checkpoints written%s", s.workers_left,
           s.num_workers, s.resumed_from ? "resumed" : "fresh start", s.ckpt_written,
           s.ckpt_written ? ", the last of iteration " : "");
    if (s.ckpt_written)
        printf("%" PRIu64, s.ckpt_iter);
    if (s.resumed_from)
        printf(" (resumed from iteration %" PRIu64 ")", s.resumed_from);
    printf("\n");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    uint64_t rss0 = gv_ps_rss();
    static struct gv_ps_options o;
    gv_log_set_tag("server");
    static const char *const others[] = {"worker", "launch", NULL};
    struct gv_cfg_spec spec = {.program = "gravac-server",
                               .summary = "one shard of the gravac parameter server",
                               .section = "server",
                               .other_sections = others};
    struct gv_cfg *cfg = NULL;
    int rc = gv_ps_options_load(&o, &spec, NULL, argc, argv, &cfg);
    if (rc >= 0)
        return rc;
    rc = 2;
    struct gv_auth_secret *secret = gv_calloc(1, sizeof(*secret));
    if (secret == NULL || gv_cluster_resolve(&o.cl, GV_ROLE_SERVER, environ) != GV_OK)
        goto out;
    char tag[32];
    snprintf(tag, sizeof(tag), "server%u", o.cl.proc_rank);
    gv_log_set_tag(tag);
    gv_status_t status = gv_job_resolve(&o.job, o.cl.n_workers);
    if (status != GV_OK) {
        rc = status == GV_ERR_INVAL ? 2 : 1;
        goto out;
    }
    if (gv_auth_secret_load(o.oc.secret_file, getenv("GV_SECRET"), o.oc.insecure, secret) != GV_OK)
        goto out;
    rc = 1;
    gv_log(GV_LOG_INFO, "gravac-server %u of %u (rank from %s), %u workers", o.cl.proc_rank,
           o.cl.n_procs, o.cl.rank_source, o.cl.n_workers);
    struct gv_server_config sc = {.job = &o.job,
                                  .cluster = &o.cl,
                                  .secret = secret,
                                  .handshake_timeout_ns = o.oc.handshake_timeout,
                                  .decision_log = o.so.decision_log,
                                  .obs_trace = o.so.obs_trace,
                                  .heartbeat_interval_ns = o.oc.heartbeat_interval,
                                  .peer_timeout_ns = o.oc.peer_timeout,
                                  .dead_policy = o.os.dead_worker_policy,
                                  .min_workers = (uint32_t)o.os.min_workers,
                                  .checkpoint_dir = o.os.checkpoint_dir,
                                  .checkpoint_every = o.os.checkpoint_every,
                                  .checkpoint_keep = o.os.checkpoint_keep,
                                  .checkpoint_fallback = o.os.checkpoint_fallback,
                                  .ckpt_fail_policy = o.os.checkpoint_failure_policy,
                                  .metrics_addr = o.os.metrics_addr};
    if ((uint32_t)o.os.min_workers > o.cl.n_workers) {
        gv_log(GV_LOG_ERROR, "--min-workers %d is more than the job's %u workers", o.os.min_workers,
               o.cl.n_workers);
        rc = 2;
        goto out;
    }
    if (o.cl.lanes > 1 && o.oc.trace[0] != '\0' && strstr(o.oc.trace, "%r") == NULL &&
        strstr(o.oc.trace, "%n") == NULL) {
        gv_log(GV_LOG_ERROR,
               "--trace %s: with --conns-per-server every shard writes a file of "
               "its own: name it with %%r or %%n",
               o.oc.trace);
        rc = 2;
        goto out;
    }
    if (o.cl.lanes > 1)
        gv_log(GV_LOG_INFO,
               "server process %u holds shards %u..%u, one per connection to each worker "
               "(--conns-per-server %u), each on a thread of its own",
               o.cl.proc_rank, o.cl.my_rank, o.cl.my_rank + o.cl.lanes - 1, o.cl.lanes);
    struct lane *ln = gv_calloc(o.cl.lanes, sizeof(*ln));
    if (ln == NULL)
        goto out;
    status = GV_OK;
    for (uint32_t l = 0; l < o.cl.lanes && status == GV_OK; l++) {
        ln[l].cl = o.cl;
        ln[l].cl.my_rank = o.cl.my_rank + l;
        ln[l].sc = sc;
        ln[l].sc.cluster = &ln[l].cl;
        if (l > 0) /* one endpoint per process */
            memset(&ln[l].sc.metrics_addr, 0, sizeof(ln[l].sc.metrics_addr));
        status = gv_ps_trace_open(o.oc.trace, GV_ROLE_SERVER, ln[l].cl.my_rank, &ln[l].trace);
        ln[l].sc.trace = ln[l].trace;
        if (status == GV_OK)
            status = gv_server_create(&ln[l].sc, &ln[l].srv);
    }
    if (status != GV_OK) {
        /* a refused checkpoint or a job the options describe wrongly: retrying cannot help */
        rc = status == GV_ERR_PROTO || status == GV_ERR_VERSION || status == GV_ERR_INVAL ? 2 : 1;
        goto out_lanes;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    for (uint32_t l = 1; l < o.cl.lanes; l++)
        ln[l].threaded = pthread_create(&ln[l].th, NULL, lane_run, &ln[l]) == 0;
    lane_run(&ln[0]);
    for (uint32_t l = 1; l < o.cl.lanes; l++) {
        if (ln[l].threaded)
            pthread_join(ln[l].th, NULL);
        else
            lane_run(&ln[l]); /* no thread: after the others (the job then waits for it) */
    }
    bool refused = false, failed = false, stopped = false, ckpt = false, lost = false;
    uint64_t committed = UINT64_MAX;
    for (uint32_t l = 0; l < o.cl.lanes; l++) {
        struct gv_server_summary sum;
        gv_server_get_summary(ln[l].srv, &sum);
        print_summary(ln[l].srv, rss0);
        if (o.cl.dump_params[0] != '\0') {
            char path[1024];
            struct gv_ckpt_section sec[GV_SERVER_STATE_SECTIONS];
            size_t n;
            gv_cluster_expand(o.cl.dump_params, GV_ROLE_SERVER, ln[l].cl.my_rank, path,
                              sizeof(path));
            if (gv_server_state_sections(ln[l].srv, sec, GV_SERVER_STATE_SECTIONS, &n) == GV_OK &&
                gv_ps_dump_floats(path, sec[0].data, sec[0].len / sizeof(float)) != GV_OK)
                ln[l].status = GV_ERR_IO;
        }
        refused |= sum.refused;
        stopped |= sum.stopped;
        lost |= sum.ckpt_lost;
        failed |=
            !sum.refused && !sum.stopped && ln[l].status != GV_OK && ln[l].status != GV_ERR_CKPT;
        ckpt |= sum.ckpt_committed > 0;
        committed = GV_MIN(committed, sum.ckpt_committed);
    }
    rc = refused ? 2 : failed ? 1 : lost ? 4 : stopped ? 3 : 0;
    char resume[120] = "";
    if (ckpt)
        snprintf(resume, sizeof(resume),
                 "; a restart resumes from iteration %" PRIu64
                 " (the last checkpoint every process wrote)",
                 committed);
    if (rc != 0)
        gv_log(rc == 3 ? GV_LOG_WARN : GV_LOG_ERROR, "gravac-server %u: exit status %d (%s)%s",
               o.cl.proc_rank, rc,
               rc == 2   ? "refused: fix the configuration or the checkpoints"
               : rc == 3 ? "stopped on request"
               : rc == 4 ? "a checkpoint could not be written everywhere: fix the storage"
                         : "the job failed",
               resume);
out_lanes:
    for (uint32_t l = 0; l < o.cl.lanes; l++) {
        gv_server_destroy(ln[l].srv);
        gv_trace_close(ln[l].trace);
    }
    gv_free(ln);
out:
    if (secret != NULL)
        gv_auth_secret_clear(secret);
    gv_free(secret);
    gv_cfg_destroy(cfg);
    return rc;
}
