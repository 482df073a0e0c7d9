/* worker_prog.h: what the gravac-worker program's files share: its options, data loading, the
 * standalone loop (gravac_worker_main.c) and the distributed loop (gravac_worker_dist.c). */
#ifndef GV_WORKER_PROG_H
#define GV_WORKER_PROG_H

#include "gv_worker.h"

/* Loads shard rank of world of the job's training set (the sampler's shard: only those
 * samples are read into memory) and, when want_test, the whole test set (the job is resolved).
 * Logs what failed. */
gv_status_t wp_load_data(const struct gv_job *job, int rank, int world, bool want_test,
                         struct gv_nn_dataset **tr, struct gv_nn_dataset **te);
/* Bytes the datasets occupy in memory. */
uint64_t wp_data_bytes(const struct gv_nn_dataset *tr, const struct gv_nn_dataset *te);

/* Exit status: 0 done, 1 failed, 2 refused (options, a checkpoint), 3 stopped on request. */
int wp_run_distributed(struct gv_ps_options *o, uint64_t rss_start);

#endif /* GV_WORKER_PROG_H */
