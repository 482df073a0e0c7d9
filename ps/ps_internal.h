/* ps_internal.h: what ps/'s files share privately. */
#ifndef GV_PS_INTERNAL_H
#define GV_PS_INTERNAL_H

#include "gv_ps.h"

/* job_data.c: image shape, classes and training-set size of the job's data, from the files'
 * headers (the text corpus is read for its vocabulary). */
gv_status_t job_data_shape(struct gv_job *job);

#endif /* GV_PS_INTERNAL_H */
