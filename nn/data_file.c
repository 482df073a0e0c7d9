/* data_file.c: file readers behind every dataset loader: sequential reads of a file and of an
 * IDX file item by item (so that a loader keeps only the items it wants, never the whole file),
 * and whole files; gzipped or raw (zlib reads both), every size checked against a cap before
 * allocation, every error logged once with the file name. */
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

gv_status_t nn_file_open(struct nn_file *fl, const char *path)
{
    memset(fl, 0, sizeof(*fl));
    fl->path = path;
    return file_open(path, &fl->f);
}

gv_status_t nn_file_read(struct nn_file *fl, void *buf, size_t len, uint64_t total,
                         const char *what)
{
    size_t got;
    if (file_read_exact(fl->f, buf, len, &got) != 0)
        return file_read_error(fl->f, fl->path, what, (size_t)fl->off + got, (size_t)total);
    fl->off += len;
    return GV_OK;
}

gv_status_t nn_file_end(struct nn_file *fl, const char *what)
{
    uint8_t extra;
    int r = gzread(fl->f, &extra, 1);
    if (r < 0)
        return file_read_error(fl->f, fl->path, what, (size_t)fl->off, (size_t)fl->off + 1);
    if (r != 0) {
        gv_log(GV_LOG_ERROR, "%s: trailing bytes after the %llu data bytes %s", fl->path,
               (unsigned long long)fl->off, what);
        return GV_ERR_PROTO;
    }
    return GV_OK;
}

void nn_file_close(struct nn_file *fl)
{
    if (fl->f != NULL)
        gzclose(fl->f);
    fl->f = NULL;
}

gv_status_t nn_file_size(const char *path, uint64_t cap, uint64_t *bytes_p)
{
    struct nn_file fl;
    GV_NN_TRY(nn_file_open(&fl, path));
    uint8_t *buf = gv_malloc(1 << 16);
    gv_status_t status = buf != NULL ? GV_OK : GV_ERR_NOMEM;
    uint64_t total = 0;
    for (int r = 1; status == GV_OK && r > 0;) {
        r = gzread(fl.f, buf, 1 << 16);
        if (r < 0)
            status = file_read_error(fl.f, path, "the file", (size_t)total, (size_t)total + 1);
        else
            total += (uint64_t)r;
        if (status == GV_OK && total > cap) {
            gv_log(GV_LOG_ERROR, "%s: larger than the %llu-byte cap", path,
                   (unsigned long long)cap);
            status = GV_ERR_PROTO;
        }
    }
    gv_free(buf);
    nn_file_close(&fl);
    if (status == GV_OK)
        *bytes_p = total;
    return status;
}

static uint32_t file_be32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Header: magic {0, 0, 0x08 (ubyte), ndim}, then ndim big-endian u32 dimensions. */
static gv_status_t idx_header(struct nn_idx *s, int ndim)
{
    uint8_t hdr[16];
    size_t got, want = 4 + 4 * (size_t)ndim;
    if (file_read_exact(s->file.f, hdr, 4, &got) != 0)
        return file_read_error(s->file.f, s->file.path, "the header", got, want);
    uint32_t magic = file_be32(hdr), want_magic = 0x00000800u | (uint32_t)ndim;
    if (magic != want_magic) {
        gv_log(GV_LOG_ERROR, "%s: wrong magic 0x%08x (want 0x%08x, an IDX %s file)", s->file.path,
               magic, want_magic, ndim == 1 ? "label" : "image");
        return GV_ERR_PROTO;
    }
    if (file_read_exact(s->file.f, hdr + 4, want - 4, &got) != 0)
        return file_read_error(s->file.f, s->file.path, "the header", got + 4, want);
    size_t total = 1;
    for (int i = 0; i < ndim; i++) {
        s->dims[i] = file_be32(hdr + 4 + 4 * i);
        uint32_t cap = i == 0 ? NN_MAX_SAMPLES : 4096;
        if (s->dims[i] == 0 || s->dims[i] > cap) {
            gv_log(GV_LOG_ERROR, "%s: dimension %d is %u (want 1..%u)", s->file.path, i, s->dims[i],
                   cap);
            return GV_ERR_PROTO;
        }
        total *= s->dims[i];
    }
    if (total > NN_MAX_FILE_BYTES) {
        gv_log(GV_LOG_ERROR, "%s: %zu data bytes exceed the %zu-byte cap", s->file.path, total,
               (size_t)NN_MAX_FILE_BYTES);
        return GV_ERR_PROTO;
    }
    s->items = s->dims[0];
    s->item_bytes = total / s->dims[0];
    return GV_OK;
}

gv_status_t nn_idx_open(struct nn_idx *s, const char *path, int ndim)
{
    memset(s, 0, sizeof(*s));
    GV_NN_TRY(nn_file_open(&s->file, path));
    gv_status_t status = idx_header(s, ndim);
    if (status != GV_OK)
        nn_file_close(&s->file);
    s->file.off = 0; /* data bytes from here on */
    return status;
}

gv_status_t nn_idx_next(struct nn_idx *s, uint8_t *buf, size_t n)
{
    if (n > s->items - s->done)
        return GV_ERR_INVAL;
    GV_NN_TRY(nn_file_read(&s->file, buf, n * s->item_bytes, s->items * s->item_bytes, "the data"));
    s->done += n;
    return GV_OK;
}

gv_status_t nn_idx_end(struct nn_idx *s)
{
    return nn_file_end(&s->file, "the header declares");
}

void nn_idx_close(struct nn_idx *s)
{
    nn_file_close(&s->file);
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
