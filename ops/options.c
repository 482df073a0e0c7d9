/* options.c: the option tables of the operations blocks (authentication, liveness, checkpoints,
 * metrics), ready for the server and worker programs to add to their gv_cfg_spec. Defaults
 * live here and nowhere else; docs/operations.md lists them. */
#include "gv_ops.h"

#include <stddef.h>

static const char *const dead_policy_choices[] = {"abort", "continue", NULL};
static const int dead_policy_values[] = {GV_DEAD_ABORT, GV_DEAD_CONTINUE};

const struct gv_opt gv_ops_common_options[] = {
    {.name = "secret-file", .type = GV_OPT_STRING,
     .offset = offsetof(struct gv_ops_common_cfg, secret_file), .def = "",
     .help = "file holding the shared secret (mode 0600); else GV_SECRET is used",
     .group = "security"},
    {.name = "insecure", .type = GV_OPT_BOOL,
     .offset = offsetof(struct gv_ops_common_cfg, insecure), .def = "false",
     .help = "run without a shared secret: no authentication at all",
     .group = "security"},
    {.name = "handshake-timeout", .type = GV_OPT_DURATION,
     .offset = offsetof(struct gv_ops_common_cfg, handshake_timeout), .def = "5s",
     .help = "close a connection not authenticated within this time",
     .group = "security", .flags = GV_OPT_RANGE, .min = 0.01, .max = 600},
    {.name = "heartbeat-interval", .type = GV_OPT_DURATION,
     .offset = offsetof(struct gv_ops_common_cfg, heartbeat_interval), .def = "500ms",
     .help = "send a heartbeat after this long without other traffic",
     .group = "failure detection", .flags = GV_OPT_RANGE, .min = 0.001, .max = 600},
    {.name = "peer-timeout", .type = GV_OPT_DURATION,
     .offset = offsetof(struct gv_ops_common_cfg, peer_timeout), .def = "5s",
     .help = "a peer silent for longer than this is declared dead",
     .group = "failure detection", .flags = GV_OPT_RANGE, .min = 0.01, .max = 3600},
};
const size_t gv_ops_common_options_n = GV_ARRAY_LEN(gv_ops_common_options);

const struct gv_opt gv_ops_server_options[] = {
    {.name = "dead-worker-policy", .type = GV_OPT_ENUM,
     .offset = offsetof(struct gv_ops_server_cfg, dead_worker_policy), .def = "abort",
     .help = "when a worker dies: abort the job, or continue without it",
     .group = "failure detection", .choices = dead_policy_choices,
     .values = dead_policy_values},
    {.name = "min-workers", .type = GV_OPT_INT,
     .offset = offsetof(struct gv_ops_server_cfg, min_workers), .def = "1",
     .help = "under the continue policy, abort when fewer workers are left",
     .group = "failure detection", .flags = GV_OPT_RANGE, .min = 1, .max = 1 << 20},
    {.name = "checkpoint-dir", .type = GV_OPT_STRING,
     .offset = offsetof(struct gv_ops_server_cfg, checkpoint_dir), .def = "",
     .help = "directory for checkpoints, resumed from at start; \"\" disables",
     .group = "checkpoints"},
    {.name = "checkpoint-every", .type = GV_OPT_UINT64,
     .offset = offsetof(struct gv_ops_server_cfg, checkpoint_every), .def = "1000",
     .help = "iterations between checkpoints; 0: only on SIGTERM", .group = "checkpoints"},
    {.name = "checkpoint-keep", .type = GV_OPT_INT,
     .offset = offsetof(struct gv_ops_server_cfg, checkpoint_keep), .def = "3",
     .help = "checkpoints kept per shard (older ones are deleted)", .group = "checkpoints",
     .flags = GV_OPT_RANGE, .min = 1, .max = 1000},
    {.name = "checkpoint-fallback", .type = GV_OPT_BOOL,
     .offset = offsetof(struct gv_ops_server_cfg, checkpoint_fallback), .def = "false",
     .help = "if the newest checkpoint is corrupt, resume from an older one",
     .group = "checkpoints"},
    {.name = "metrics-addr", .type = GV_OPT_ADDR,
     .offset = offsetof(struct gv_ops_server_cfg, metrics_addr), .def = "",
     .help = "serve Prometheus metrics on http://HOST:PORT/metrics; \"\" disables",
     .group = "metrics"},
};
const size_t gv_ops_server_options_n = GV_ARRAY_LEN(gv_ops_server_options);
