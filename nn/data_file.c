/* data_file.c: file readers behind every dataset loader: IDX files and whole files, gzipped or
 * raw (zlib reads both), with every size checked against a cap before allocation and every
 * error logged once with the file name. */
#include "nn_data.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <zlib.h>

/* Maps a failed or short gzread to a status, logging what happened to path. */
static gv_status_t file_read_error(gzFile f, const char *path, const char *what, size_t got,
                                   size_t want)
{
    int err = Z_OK;
    const char *msg = gzerror(f, &err);
    if (err == Z_ERRNO) {
        gv_log(GV_LOG_ERROR, "%s: read error in %s: %s", path, what, strerror(errno));
        return GV_ERR_IO;
    }
    if (err != Z_OK && err != Z_BUF_ERROR) {
        gv_log(GV_LOG_ERROR, "%s: corrupt compressed data in %s: %s", path, what, msg);
        return GV_ERR_PROTO;
    }
    gv_log(GV_LOG_ERROR, "%s: truncated: %s has %zu of %zu bytes", path, what, got, want);
    return GV_ERR_PROTO;
}

/* Reads exactly len bytes; *got_p is what was read. */
static int file_read_exact(gzFile f, void *buf, size_t len, size_t *got_p)
{
    size_t got = 0;
    while (got < len) {
        size_t chunk = GV_MIN(len - got, (size_t)1 << 30);
        int r = gzread(f, (char *)buf + got, (unsigned)chunk);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    *got_p = got;
    return got == len ? 0 : -1;
}

static gv_status_t file_open(const char *path, gzFile *f_p)
{
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (f == NULL) {
        gv_log(GV_LOG_ERROR, "%s: cannot open: %s", path,
               errno ? strerror(errno) : "out of memory");
        return GV_ERR_IO;
    }
    gzbuffer(f, 1 << 17);
    *f_p = f;
    return GV_OK;
}

static uint32_t file_be32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Header: magic {0, 0, 0x08 (ubyte), ndim}, then ndim big-endian u32 dimensions. */
static gv_status_t idx_header(gzFile f, const char *path, int ndim, uint32_t *dims,
                              size_t *total_p)
{
    uint8_t hdr[16];
    size_t got, want = 4 + 4 * (size_t)ndim;
    if (file_read_exact(f, hdr, 4, &got) != 0)
        return file_read_error(f, path, "the header", got, want);
    uint32_t magic = file_be32(hdr), want_magic = 0x00000800u | (uint32_t)ndim;
    if (magic != want_magic) {
        gv_log(GV_LOG_ERROR, "%s: wrong magic 0x%08x (want 0x%08x, an IDX %s file)", path, magic,
               want_magic, ndim == 1 ? "label" : "image");
        return GV_ERR_PROTO;
    }
    if (file_read_exact(f, hdr + 4, want - 4, &got) != 0)
        return file_read_error(f, path, "the header", got + 4, want);
    size_t total = 1;
    for (int i = 0; i < ndim; i++) {
        dims[i] = file_be32(hdr + 4 + 4 * i);
        uint32_t cap = i == 0 ? NN_MAX_SAMPLES : 4096;
        if (dims[i] == 0 || dims[i] > cap) {
            gv_log(GV_LOG_ERROR, "%s: dimension %d is %u (want 1..%u)", path, i, dims[i], cap);
            return GV_ERR_PROTO;
        }
        total *= dims[i];
    }
    if (total > NN_MAX_FILE_BYTES) {
        gv_log(GV_LOG_ERROR, "%s: %zu data bytes exceed the %zu-byte cap", path, total,
               (size_t)NN_MAX_FILE_BYTES);
        return GV_ERR_PROTO;
    }
    *total_p = total;
    return GV_OK;
}

gv_status_t nn_idx_read(const char *path, int ndim, uint32_t *dims, uint8_t **data_p)
{
    gzFile f;
    size_t total = 0, got;
    uint8_t extra;
    GV_NN_TRY(file_open(path, &f));
    gv_status_t status = idx_header(f, path, ndim, dims, &total);
    if (status != GV_OK)
        goto err_close;
    uint8_t *data = gv_malloc(total);
    if (data == NULL) {
        gv_log(GV_LOG_ERROR, "%s: cannot allocate %zu bytes", path, total);
        status = GV_ERR_NOMEM;
        goto err_close;
    }
    if (file_read_exact(f, data, total, &got) != 0) {
        status = file_read_error(f, path, "the data", got, total);
        goto err_free;
    }
    if (gzread(f, &extra, 1) != 0) {
        gv_log(GV_LOG_ERROR, "%s: trailing bytes after the %zu data bytes the header declares",
               path, total);
        status = GV_ERR_PROTO;
        goto err_free;
    }
    gzclose(f);
    *data_p = data;
    return GV_OK;
err_free:
    gv_free(data);
err_close:
    gzclose(f);
    return status;
}

gv_status_t nn_file_read_all(const char *path, size_t cap, uint8_t **data_p, size_t *len_p)
{
    gzFile f;
    GV_NN_TRY(file_open(path, &f));
    gv_status_t status = GV_OK;
    size_t len = 0, size = 1 << 16;
    uint8_t *buf = gv_malloc(size);
    while (buf != NULL) {
        if (len == size) {
            if (size >= cap) {
                gv_log(GV_LOG_ERROR, "%s: larger than the %zu-byte cap", path, cap);
                status = GV_ERR_PROTO;
                goto err_free;
            }
            size_t nsize = GV_MIN(size * 2, cap);
            uint8_t *nbuf = gv_realloc(buf, nsize);
            if (nbuf == NULL)
                break;
            buf = nbuf;
            size = nsize;
        }
        int r = gzread(f, buf + len, (unsigned)GV_MIN(size - len, (size_t)INT_MAX));
        if (r < 0) {
            status = file_read_error(f, path, "the file", len, len + 1);
            goto err_free;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    if (buf == NULL || len == size) {
        gv_log(GV_LOG_ERROR, "%s: cannot allocate memory to read it", path);
        status = GV_ERR_NOMEM;
        goto err_free;
    }
    gzclose(f);
    *data_p = buf;
    *len_p = len;
    return GV_OK;
err_free:
    gv_free(buf);
    gzclose(f);
    return status;
}
