/* bench.h: the sub-command table of gravac-bench. Each benchmark's entry point takes argv with
 * argv[0] = the sub-command name and returns the process exit code. */
#ifndef GV_BENCH_H
#define GV_BENCH_H

struct gv_bench_cmd {
    const char *name;
    const char *summary;
    int (*main)(int argc, char **argv);
};

int gv_bench_transport_main(int argc, char **argv);
int gv_bench_compress_main(int argc, char **argv);
int gv_bench_train_main(int argc, char **argv);
int gv_bench_scaling_main(int argc, char **argv);
int gv_bench_adapt_main(int argc, char **argv);
int gv_bench_ops_main(int argc, char **argv);
int gv_bench_nn_main(int argc, char **argv);
int gv_bench_proto_main(int argc, char **argv);
int gv_bench_ps_main(int argc, char **argv);

#endif
