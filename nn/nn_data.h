/* nn_data.h: file readers shared by the dataset loaders. Private to nn/. */
#ifndef GV_NN_DATA_H
#define GV_NN_DATA_H

#include "nn_internal.h"

#define NN_MAX_SAMPLES (1u << 26)           /* samples in one IDX file */
#define NN_MAX_FILE_BYTES ((size_t)1 << 31) /* data bytes in one file */

#include <zlib.h>

/* A file read front to back (gzipped or raw). Errors are logged with the path. */
struct nn_file {
    gzFile f;
    const char *path; /* borrowed */
    uint64_t off;     /* bytes read (for messages) */
};
gv_status_t nn_file_open(struct nn_file *fl, const char *path);
/* Exactly len bytes; a short file is "truncated: <what> has <off + got> of <total> bytes". */
gv_status_t nn_file_read(struct nn_file *fl, void *buf, size_t len, uint64_t total,
                         const char *what);
/* GV_ERR_PROTO ("trailing bytes after the <off> data bytes <what>") unless at the end. */
gv_status_t nn_file_end(struct nn_file *fl, const char *what);
void nn_file_close(struct nn_file *fl);
/* Bytes of the (decompressed) file, at most cap. */
gv_status_t nn_file_size(const char *path, uint64_t cap, uint64_t *bytes_p);

/* An IDX file of ndim dimensions (1: labels, 3: images) read item by item: the header is read
 * and checked at open (magic, every dimension against its cap, the data size). */
struct nn_idx {
    struct nn_file file;
    uint32_t dims[3];
    size_t items;      /* dims[0] */
    size_t item_bytes; /* product of the other dimensions */
    size_t done;       /* items read */
};
gv_status_t nn_idx_open(struct nn_idx *s, const char *path, int ndim);
/* The next n items into buf (n * item_bytes). */
gv_status_t nn_idx_next(struct nn_idx *s, uint8_t *buf, size_t n);
/* After the last item: GV_ERR_PROTO when bytes follow. */
gv_status_t nn_idx_end(struct nn_idx *s);
void nn_idx_close(struct nn_idx *s);

/* Reads a whole file (gzipped or raw) of at most cap bytes. */
gv_status_t nn_file_read_all(const char *path, size_t cap, uint8_t **data_p, size_t *len_p);
/* A zeroed dataset with name (borrowed, copied). */
struct gv_nn_dataset *nn_dataset_new(const char *name);

/* The seeded per-epoch permutation every shard is cut from (data_batch.c): a[0..n) shuffled
 * (Fisher-Yates) with the stream of (seed, epoch). */
void nn_shuffle(uint32_t *a, size_t n, uint64_t seed, int64_t epoch);
/* Position of sample `item` in ds (its index, or item itself for a whole set); GV_ERR_INVAL
 * when ds does not hold it. */
gv_status_t nn_dataset_find(const struct gv_nn_dataset *ds, size_t item, size_t *pos_p);

#endif /* GV_NN_DATA_H */
