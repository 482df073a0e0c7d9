/* nn_data.h: file readers shared by the dataset loaders. Private to nn/. */
#ifndef GV_NN_DATA_H
#define GV_NN_DATA_H

#include "nn_internal.h"

#define NN_MAX_SAMPLES (1u << 26)               /* samples in one IDX file */
#define NN_MAX_FILE_BYTES ((size_t)1 << 31)     /* data bytes in one file */

/* Reads an IDX file of ndim dimensions (1: labels, 3: images), gzipped or raw. dims receives
 * the ndim sizes, *data_p the uint8 payload (free with gv_free). Errors are logged with path. */
gv_status_t nn_idx_read(const char *path, int ndim, uint32_t *dims, uint8_t **data_p);
/* Reads a whole file (gzipped or raw) of at most cap bytes. */
gv_status_t nn_file_read_all(const char *path, size_t cap, uint8_t **data_p, size_t *len_p);
/* A zeroed dataset with name (borrowed, copied). */
struct gv_nn_dataset *nn_dataset_new(const char *name);

#endif /* GV_NN_DATA_H */
