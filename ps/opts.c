/* opts.c: the option tables of the gravac-worker program (the training loop around the runtime)
 * and of gravac-server. Every program accepts both; gravac-launch routes them. */
#include "gv_ps.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

extern char **environ;

static const char *const device_choices[] = {"cpu", "cuda", NULL};
static const int device_values[] = {GV_NN_CPU, GV_NN_CUDA};

#define T(f) offsetof(struct gv_train_opts, f)

const struct gv_opt gv_train_options[] = {
    {.name = "standalone",
     .type = GV_OPT_BOOL,
     .offset = T(standalone),
     .def = "false",
     .help = "train in this process alone, without servers",
     .group = "worker"},
    {.name = "world",
     .type = GV_OPT_INT,
     .offset = T(world),
     .def = "1",
     .help = "standalone: train on shard --rank of this many",
     .group = "worker",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 65536},
    {.name = "eval-every",
     .type = GV_OPT_UINT64,
     .offset = T(eval_every),
     .def = "0",
     .help = "steps between evaluations on the test set (0: each epoch)",
     .group = "worker"},
    {.name = "eval-limit",
     .type = GV_OPT_UINT64,
     .offset = T(eval_limit),
     .def = "0",
     .help = "test samples per evaluation (0: all)",
     .group = "worker"},
    {.name = "target-accuracy",
     .type = GV_OPT_DOUBLE,
     .offset = T(target),
     .def = "0",
     .help = "stop once the test accuracy reaches this (0..1, or a percentage; 0: off)",
     .group = "worker",
     .flags = GV_OPT_RANGE,
     .min = 0,
     .max = 100},
    {.name = "device",
     .type = GV_OPT_ENUM,
     .offset = T(device),
     .def = "cpu",
     .help = "compute backend",
     .group = "worker",
     .choices = device_choices,
     .values = device_values},
    {.name = "threads",
     .type = GV_OPT_INT,
     .offset = T(threads),
     .def = "1",
     .help = "OpenBLAS threads",
     .group = "worker",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 256},
    {.name = "progress-every",
     .type = GV_OPT_UINT64,
     .offset = T(progress_every),
     .def = "100",
     .help = "steps per progress line",
     .group = "worker",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 1e12},
    {.name = "quiet",
     .type = GV_OPT_BOOL,
     .offset = T(quiet),
     .def = "false",
     .help = "no progress lines",
     .group = "worker"},
    {.name = "all-progress",
     .type = GV_OPT_BOOL,
     .offset = T(all_progress),
     .def = "false",
     .help = "every worker prints progress and evaluates (default: worker 0 only)",
     .group = "worker"},
    {.name = "metrics-file",
     .type = GV_OPT_STRING,
     .offset = T(metrics_file),
     .def = "",
     .help = "JSON-lines metrics (steps, evaluations, every iteration); %r is the rank, %n "
             "the role and rank",
     .group = "worker"},
    {.name = "verify-every",
     .type = GV_OPT_UINT64,
     .offset = T(verify_every),
     .def = "1",
     .help = "compare the replica's shard checksums with the servers' every N iterations "
             "(0: never)",
     .group = "worker"},
    {.name = "compress-threads",
     .type = GV_OPT_INT,
     .offset = T(compress_threads),
     .def = "1",
     .help = "compressor threads",
     .group = "worker",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 256},
    {.name = "comm-only",
     .type = GV_OPT_BOOL,
     .offset = T(comm_only),
     .def = "false",
     .help = "benchmarks: push a constant gradient of the model's size each iteration without "
             "computing it (communication alone; the model learns nothing)",
     .group = "worker"},
    {.name = "overlap",
     .type = GV_OPT_BOOL,
     .offset = T(overlap),
     .def = "true",
     .help = "push each block of gradients as the backward pass produces it and start the next "
             "forward pass while updates arrive (CPU workers; the same bits either way)",
     .group = "worker"},
};
const size_t gv_train_options_n = GV_ARRAY_LEN(gv_train_options);

const struct gv_opt gv_server_options[] = {
    {.name = "decision-log",
     .type = GV_OPT_STRING,
     .offset = offsetof(struct gv_server_opts, decision_log),
     .def = "",
     .help = "server 0: write the controller's decisions and windows here (JSON lines)",
     .group = "output"},
    {.name = "obs-trace",
     .type = GV_OPT_STRING,
     .offset = offsetof(struct gv_server_opts, obs_trace),
     .def = "",
     .help = "server 0: write every observation the controller gets and its decision here "
             "(CSV, exact doubles: a trace tests/adapt can replay)",
     .group = "output"},
};
const size_t gv_server_options_n = GV_ARRAY_LEN(gv_server_options);

void gv_ps_option_tables(struct gv_ps_options *o, struct gv_opt_table *tables)
{
    tables[0] = (struct gv_opt_table){gv_job_options, gv_job_options_n, &o->job};
    tables[1] = (struct gv_opt_table){gv_cluster_options, gv_cluster_options_n, &o->cl};
    tables[2] = (struct gv_opt_table){gv_ops_common_options, gv_ops_common_options_n, &o->oc};
    tables[3] = (struct gv_opt_table){gv_ops_server_options, gv_ops_server_options_n, &o->os};
    tables[4] = (struct gv_opt_table){gv_train_options, gv_train_options_n, &o->to};
    tables[5] = (struct gv_opt_table){gv_server_options, gv_server_options_n, &o->so};
}

int gv_ps_options_load(struct gv_ps_options *o, const struct gv_cfg_spec *spec,
                       const struct gv_opt_table *extra, int argc, char **argv,
                       struct gv_cfg **cfg_p)
{
    memset(o, 0, sizeof(*o));
    size_t n = 0;
    if (extra != NULL)
        o->tables_[n++] = *extra;
    gv_ps_option_tables(o, o->tables_ + n);
    n += GV_PS_OPTION_TABLES;
    o->spec_ = *spec;
    o->spec_.tables = o->tables_;
    o->spec_.n_tables = n;
    struct gv_cfg *cfg = NULL;
    *cfg_p = NULL;
    if (gv_cfg_create(&o->spec_, &cfg) != GV_OK || gv_cfg_load(cfg, argc, argv, environ) != GV_OK) {
        fprintf(stderr, "%s: see --help\n", spec->program);
        gv_cfg_destroy(cfg);
        return 2;
    }
    if (gv_cfg_help_requested(cfg)) {
        gv_cfg_print_help(cfg, stdout);
        gv_cfg_destroy(cfg);
        return 0;
    }
    if (o->cl.print_config)
        gv_cfg_log_effective(cfg);
    if (o->oc.heartbeat_interval * 2 > o->oc.peer_timeout) {
        gv_log(GV_LOG_ERROR,
               "--heartbeat-interval (%.3f s) must be at most half of "
               "--peer-timeout (%.3f s), or live peers would be declared dead",
               (double)o->oc.heartbeat_interval * 1e-9, (double)o->oc.peer_timeout * 1e-9);
        gv_cfg_destroy(cfg);
        return 2;
    }
    *cfg_p = cfg;
    return -1;
}
