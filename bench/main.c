/* main.c: gravac-bench, one program with a sub-command per benchmark. Each sub-command lives in
 * its own bench_<name>.c and is listed in the table below. */
#include "bench.h"

#include <stdio.h>
#include <string.h>

static const struct gv_bench_cmd cmds[] = {
    {"transport", "transport goodput, message rate and latency (stream, pingpong, pushpull)",
     gv_bench_transport_main},
    {"ps", "parameter-server push/pull rounds (real servers and workers) vs transport pushpull",
     gv_bench_ps_main},
    {"adapt", "compression-factor controller cost per iteration", gv_bench_adapt_main},
    {"ops", "cost of checkpoints, metrics and handshakes vs baselines", gv_bench_ops_main},
    {"nn", "model training samples/s per backend (nn/)", gv_bench_nn_main},
    {"proto", "wire header encode/decode cost vs a payload memcpy", gv_bench_proto_main},
    {"compress", "compressor throughput per CF and size vs memcpy", gv_bench_compress_main},
    {"train", "time to accuracy of every method on a (shaped) cluster: CSV, JSON, plots",
     gv_bench_train_main},
    {"scaling", "steps to a validation goal vs global batch size (lr/momentum search per B)",
     gv_bench_scaling_main},
    {NULL, NULL, NULL},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: gravac-bench <command> [options]   (gravac-bench <command> --help)\n\n"
               "commands:\n");
    for (const struct gv_bench_cmd *c = cmds; c->name != NULL; c++)
        fprintf(f, "  %-12s %s\n", c->name, c->summary);
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (const struct gv_bench_cmd *c = cmds; c->name != NULL; c++)
        if (strcmp(argv[1], c->name) == 0)
            return c->main(argc - 1, argv + 1);
    fprintf(stderr, "gravac-bench: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
