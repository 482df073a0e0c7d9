/* server_internal.h: what server/'s files share privately. Tests may include it. */
#ifndef GV_SERVER_INTERNAL_H
#define GV_SERVER_INTERNAL_H

#include "gv_server.h"

/* job_data.c: image shape, classes and training-set size of the job's data, from the files'
 * headers (the text corpus is read for its vocabulary). */
gv_status_t job_data_shape(struct gv_job *job);

#endif /* GV_SERVER_INTERNAL_H */
