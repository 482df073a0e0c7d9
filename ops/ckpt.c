/* ckpt.c: checkpoint files. The writer lays out a header, a section directory, the sections
 * and a SHA-256 trailer into a temporary file, fsyncs it, renames it over the final name and
 * fsyncs the directory, then prunes old files. The reader checks sizes and layout before it
 * reads anything large, then the checksum, then the identity. What goes into the sections is
 * the caller's business. */
#include "gv_ops.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CK_MAGIC "GVCKPT\r\n"
#define CK_FIXED_LEN 72u
#define CK_DIR_ENTRY 64u /* name[48] + offset u64 + length u64 */
#define CK_NAME_FIELD 48u
#define CK_HASH_LEN 32u
#define CK_SUFFIX ".gvckpt"
#define CK_PENDING ".pending" /* written, not committed: never loaded, never counted */
#define CK_CHUNK (1u << 20)

struct ck_section {
    char name[CK_NAME_FIELD];
    uint64_t off, len;
};

struct gv_ckpt {
    int fd;             /* -1 for memory */
    const uint8_t *mem; /* gv_ckpt_open_mem */
    uint64_t file_len;
    char *path;
    struct gv_ckpt_ident id;
    uint64_t iteration;
    uint32_t n;
    struct ck_section sec[GV_CKPT_MAX_SECTIONS];
};

static uint64_t ck_align8(uint64_t v)
{
    return (v + 7) & ~(uint64_t)7;
}

static void ck_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void ck_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t ck_get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t ck_get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static bool ck_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > GV_CKPT_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x21 || (unsigned char)name[i] > 0x7e)
            return false;
    return true;
}

/* ---------------------------------------------------------------- writer */

static gv_status_t ck_write_all(int fd, const void *buf, size_t len, EVP_MD_CTX *md,
                                const char *path)
{
    const uint8_t *p = buf;
    if (md != NULL && EVP_DigestUpdate(md, buf, len) != 1) {
        gv_log(GV_LOG_ERROR, "checkpoint %s: SHA-256 failed", path);
        return GV_ERR_IO;
    }
    while (len > 0) {
        ssize_t ret = write(fd, p, len);
        if (ret < 0 && errno == EINTR)
            continue;
        if (ret < 0) {
            gv_log(GV_LOG_ERROR, "checkpoint %s: write: %s", path, strerror(errno));
            return GV_ERR_IO;
        }
        p += ret;
        len -= (size_t)ret;
    }
    return GV_OK;
}

/* Header and directory for the given sections; returns the header length. */
static size_t ck_build_header(uint8_t *h, const struct gv_ckpt_ident *id, uint64_t iteration,
                              const struct gv_ckpt_section *s, size_t n, uint64_t *file_len_p)
{
    size_t hdr_len = CK_FIXED_LEN + CK_DIR_ENTRY * n;
    uint64_t off = ck_align8(hdr_len);
    memset(h, 0, hdr_len);
    for (size_t i = 0; i < n; i++) {
        uint8_t *e = h + CK_FIXED_LEN + CK_DIR_ENTRY * i;
        memcpy(e, s[i].name, strlen(s[i].name));
        ck_put64(e + CK_NAME_FIELD, off);
        ck_put64(e + CK_NAME_FIELD + 8, s[i].len);
        off = ck_align8(off + s[i].len);
    }
    *file_len_p = off + CK_HASH_LEN;
    memcpy(h, CK_MAGIC, 8);
    ck_put32(h + 8, GV_CKPT_VERSION);
    ck_put32(h + 12, (uint32_t)hdr_len);
    ck_put64(h + 16, *file_len_p);
    ck_put64(h + 24, id->model_fingerprint);
    ck_put64(h + 32, id->shard_offset);
    ck_put64(h + 40, id->shard_length);
    ck_put32(h + 48, id->shard_index);
    ck_put32(h + 52, id->num_servers);
    ck_put64(h + 56, iteration);
    ck_put32(h + 64, (uint32_t)n);
    ck_put32(h + 68, 0);
    return hdr_len;
}

static gv_status_t ck_write_body(int fd, const char *path, const uint8_t *hdr, size_t hdr_len,
                                 const struct gv_ckpt_section *s, size_t n)
{
    static const uint8_t zeros[8];
    uint8_t digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    gv_status_t status = GV_ERR_IO;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (md == NULL || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        gv_log(GV_LOG_ERROR, "checkpoint %s: SHA-256 init failed", path);
        goto out;
    }
    uint64_t pos = hdr_len;
    status = ck_write_all(fd, hdr, hdr_len, md, path);
    for (size_t i = 0; i <= n && status == GV_OK; i++) {
        size_t pad = (size_t)(ck_align8(pos) - pos);
        status = ck_write_all(fd, zeros, pad, md, path);
        pos += pad;
        if (i == n || status != GV_OK)
            break;
        status = ck_write_all(fd, s[i].data, s[i].len, md, path);
        pos += s[i].len;
    }
    if (status != GV_OK)
        goto out;
    if (EVP_DigestFinal_ex(md, digest, &dlen) != 1 || dlen != CK_HASH_LEN) {
        gv_log(GV_LOG_ERROR, "checkpoint %s: SHA-256 failed", path);
        status = GV_ERR_IO;
        goto out;
    }
    status = ck_write_all(fd, digest, CK_HASH_LEN, NULL, path);
    if (status == GV_OK && fsync(fd) != 0) {
        gv_log(GV_LOG_ERROR, "checkpoint %s: fsync: %s", path, strerror(errno));
        status = GV_ERR_IO;
    }
out:
    EVP_MD_CTX_free(md);
    return status;
}

static gv_status_t ck_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        gv_log(GV_LOG_ERROR, "checkpoint dir %s: fsync: %s", dir, strerror(errno));
        if (fd >= 0)
            close(fd);
        return GV_ERR_IO;
    }
    close(fd);
    return GV_OK;
}

/* Parses "shard<digits>-iter<digits>.gvckpt" (at least 4 and 12 digits). */
static bool ck_parse_name(const char *name, uint32_t *shard_p, uint64_t *iter_p)
{
    const char *p = name;
    if (strncmp(p, "shard", 5) != 0)
        return false;
    p += 5;
    size_t d = 0;
    while (isdigit((unsigned char)p[d]))
        d++;
    if (d < 4 || d > 10 || strncmp(p + d, "-iter", 5) != 0)
        return false;
    unsigned long long shard = strtoull(p, NULL, 10);
    p += d + 5;
    d = 0;
    while (isdigit((unsigned char)p[d]))
        d++;
    if (d < 12 || d > 20 || strcmp(p + d, CK_SUFFIX) != 0 || shard > UINT32_MAX)
        return false;
    errno = 0;
    unsigned long long iter = strtoull(p, NULL, 10);
    if (errno == ERANGE)
        return false;
    *shard_p = (uint32_t)shard;
    *iter_p = iter;
    return true;
}

struct ck_file {
    uint64_t iteration;
    char name[NAME_MAX + 1];
};

static int ck_file_cmp_desc(const void *a, const void *b)
{
    uint64_t x = ((const struct ck_file *)a)->iteration, y = ((const struct ck_file *)b)->iteration;
    return x < y ? 1 : (x > y ? -1 : 0);
}

/* The checkpoint files of one shard in dir, newest first. */
static gv_status_t ck_list(const char *dir, uint32_t shard, struct ck_file **files_p, size_t *n_p)
{
    DIR *d = opendir(dir);
    struct ck_file *files = NULL;
    size_t n = 0, cap = 0;
    if (d == NULL) {
        gv_log(GV_LOG_ERROR, "checkpoint dir %s: %s", dir, strerror(errno));
        return GV_ERR_IO;
    }
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (de == NULL)
            break;
        uint32_t s;
        uint64_t it;
        if (!ck_parse_name(de->d_name, &s, &it) || s != shard)
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct ck_file *nf = gv_realloc(files, ncap * sizeof(*nf));
            if (nf == NULL) {
                gv_free(files);
                closedir(d);
                gv_log(GV_LOG_ERROR, "checkpoint dir %s: out of memory", dir);
                return GV_ERR_NOMEM;
            }
            files = nf;
            cap = ncap;
        }
        files[n].iteration = it;
        snprintf(files[n].name, sizeof(files[n].name), "%s", de->d_name);
        n++;
    }
    if (errno != 0) {
        gv_log(GV_LOG_ERROR, "checkpoint dir %s: readdir: %s", dir, strerror(errno));
        gv_free(files);
        closedir(d);
        return GV_ERR_IO;
    }
    closedir(d);
    if (n > 1)
        qsort(files, n, sizeof(*files), ck_file_cmp_desc);
    *files_p = files;
    *n_p = n;
    return GV_OK;
}

/* Deletes the shard's checkpoints beyond the newest `keep`, never the one just written. */
static void ck_prune(const char *dir, uint32_t shard, const char *written, int keep)
{
    struct ck_file *files;
    size_t n;
    if (ck_list(dir, shard, &files, &n) != GV_OK)
        return; /* logged; pruning is best effort */
    for (size_t i = (size_t)keep; i < n; i++) {
        if (strcmp(files[i].name, written) == 0)
            continue;
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", dir, files[i].name);
        if (unlink(path) != 0)
            gv_log(GV_LOG_WARN, "checkpoint %s: cannot delete: %s", path, strerror(errno));
        else
            gv_log(GV_LOG_DEBUG, "checkpoint %s: deleted (keeping %d)", path, keep);
    }
    gv_free(files);
}

static gv_status_t ck_check_sections(const struct gv_ckpt_section *s, size_t n)
{
    if (n > GV_CKPT_MAX_SECTIONS) {
        gv_log(GV_LOG_ERROR, "checkpoint: %zu sections, at most %u", n, GV_CKPT_MAX_SECTIONS);
        return GV_ERR_INVAL;
    }
    for (size_t i = 0; i < n; i++) {
        if (!ck_name_ok(s[i].name) || (s[i].data == NULL && s[i].len > 0)) {
            gv_log(GV_LOG_ERROR, "checkpoint: section %zu has an invalid name or no data", i);
            return GV_ERR_INVAL;
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(s[i].name, s[j].name) == 0) {
                gv_log(GV_LOG_ERROR, "checkpoint: section '%s' appears twice", s[i].name);
                return GV_ERR_INVAL;
            }
        }
    }
    return GV_OK;
}

/* keep > 0: the final name, then the older ones beyond keep pruned; keep 0: the pending name
 * (CK_PENDING appended), nothing pruned. */
static gv_status_t ck_write(const char *dir, const struct gv_ckpt_ident *id, uint64_t iteration,
                            const struct gv_ckpt_section *sections, size_t n_sections, int keep,
                            char *path_out, size_t path_len)
{
    uint8_t hdr[CK_FIXED_LEN + CK_DIR_ENTRY * GV_CKPT_MAX_SECTIONS];
    char name[64], path[PATH_MAX], tmp[PATH_MAX];
    uint64_t file_len;
    gv_status_t status = ck_check_sections(sections, n_sections);
    if (status != GV_OK)
        return status;
    if (keep < 0 || dir == NULL || dir[0] == '\0') {
        gv_log(GV_LOG_ERROR, "checkpoint: %s", keep < 0 ? "keep must be >= 1" : "no directory");
        return GV_ERR_INVAL;
    }
    snprintf(name, sizeof(name), "shard%04" PRIu32 "-iter%012" PRIu64 CK_SUFFIX "%s",
             id->shard_index, iteration, keep == 0 ? CK_PENDING : "");
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path) ||
        (size_t)snprintf(tmp, sizeof(tmp), "%s/.tmp-%s.XXXXXX", dir, name) >= sizeof(tmp)) {
        gv_log(GV_LOG_ERROR, "checkpoint dir %s: path too long", dir);
        return GV_ERR_INVAL;
    }
    size_t hdr_len = ck_build_header(hdr, id, iteration, sections, n_sections, &file_len);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        gv_log(GV_LOG_ERROR, "checkpoint %s: cannot create: %s", tmp, strerror(errno));
        return GV_ERR_IO;
    }
    status = ck_write_body(fd, tmp, hdr, hdr_len, sections, n_sections);
    if (close(fd) != 0 && status == GV_OK) {
        gv_log(GV_LOG_ERROR, "checkpoint %s: close: %s", tmp, strerror(errno));
        status = GV_ERR_IO;
    }
    if (status != GV_OK)
        goto err_unlink;
    if (rename(tmp, path) != 0) {
        gv_log(GV_LOG_ERROR, "checkpoint %s: rename to %s: %s", tmp, path, strerror(errno));
        status = GV_ERR_IO;
        goto err_unlink;
    }
    status = ck_fsync_dir(dir);
    if (status != GV_OK)
        return status; /* the file is complete; only its durability is in doubt */
    if (keep > 0)
        ck_prune(dir, id->shard_index, name, keep);
    gv_log(GV_LOG_INFO, "checkpoint %s written (iteration %" PRIu64 ", %" PRIu64 " bytes)", path,
           iteration, file_len);
    if (path_out != NULL && path_len > 0)
        snprintf(path_out, path_len, "%s", path);
    return GV_OK;

err_unlink:
    unlink(tmp);
    return status;
}

gv_status_t gv_ckpt_write(const char *dir, const struct gv_ckpt_ident *id, uint64_t iteration,
                          const struct gv_ckpt_section *sections, size_t n_sections, int keep,
                          char *path_out, size_t path_len)
{
    if (keep < 1) {
        gv_log(GV_LOG_ERROR, "checkpoint: keep must be >= 1");
        return GV_ERR_INVAL;
    }
    return ck_write(dir, id, iteration, sections, n_sections, keep, path_out, path_len);
}

gv_status_t gv_ckpt_write_pending(const char *dir, const struct gv_ckpt_ident *id,
                                  uint64_t iteration, const struct gv_ckpt_section *sections,
                                  size_t n_sections, char *path_out, size_t path_len)
{
    return ck_write(dir, id, iteration, sections, n_sections, 0, path_out, path_len);
}

gv_status_t gv_ckpt_commit(const char *dir, uint32_t shard, uint64_t iteration, int keep)
{
    char name[64], path[PATH_MAX], pending[PATH_MAX + 16];
    snprintf(name, sizeof(name), "shard%04" PRIu32 "-iter%012" PRIu64 CK_SUFFIX, shard, iteration);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(pending, sizeof(pending), "%s" CK_PENDING, path);
    if (rename(pending, path) != 0) {
        gv_log(GV_LOG_ERROR, "checkpoint %s: cannot commit it (rename to %s): %s", pending, path,
               strerror(errno));
        return GV_ERR_IO;
    }
    gv_status_t status = ck_fsync_dir(dir);
    if (status != GV_OK)
        return status;
    gv_log(GV_LOG_DEBUG, "checkpoint %s committed", path);
    ck_prune(dir, shard, name, keep < 1 ? 1 : keep);
    return GV_OK;
}

int gv_ckpt_discard(const char *dir, uint32_t shard, uint64_t iteration)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (d == NULL)
        return 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        size_t len = strlen(de->d_name), pl = strlen(CK_PENDING);
        uint32_t s;
        uint64_t it;
        char base[NAME_MAX + 1];
        if (len <= pl || strcmp(de->d_name + len - pl, CK_PENDING) != 0)
            continue;
        snprintf(base, sizeof(base), "%.*s", (int)(len - pl), de->d_name);
        if (!ck_parse_name(base, &s, &it) || s != shard ||
            (iteration != UINT64_MAX && it != iteration))
            continue;
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        if (unlink(path) == 0) {
            gv_log(GV_LOG_INFO, "checkpoint %s: removed (never committed by every process)", path);
            n++;
        }
    }
    closedir(d);
    return n;
}

gv_status_t gv_ckpt_dir_check(const char *dir, char *why, size_t why_len)
{
    char path[PATH_MAX];
    struct stat st;
    if (dir == NULL || dir[0] == '\0' || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(why, why_len, "%s", dir != NULL && dir[0] ? "not a directory" : "no directory");
        return GV_ERR_INVAL;
    }
    if ((size_t)snprintf(path, sizeof(path), "%s/.gravac-probe.XXXXXX", dir) >= sizeof(path)) {
        snprintf(why, why_len, "its path is too long");
        return GV_ERR_INVAL;
    }
    int fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, why_len, "a file cannot be created there: %s", strerror(errno));
        return GV_ERR_INVAL;
    }
    static const char probe[] = "gravac checkpoint directory probe\n";
    bool ok = write(fd, probe, sizeof(probe)) == (ssize_t)sizeof(probe) && fsync(fd) == 0;
    int err = errno;
    ok &= close(fd) == 0;
    unlink(path);
    if (!ok) {
        snprintf(why, why_len, "a file cannot be written there: %s", strerror(err));
        return GV_ERR_INVAL;
    }
    return ck_fsync_dir(dir) == GV_OK ? GV_OK : GV_ERR_INVAL;
}

/* ---------------------------------------------------------------- reader */

static gv_status_t ck_pread(const struct gv_ckpt *ck, uint64_t off, void *buf, size_t len)
{
    if (ck->mem != NULL) {
        memcpy(buf, ck->mem + off, len);
        return GV_OK;
    }
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t ret = pread(ck->fd, p, len, (off_t)off);
        if (ret < 0 && errno == EINTR)
            continue;
        if (ret <= 0) {
            gv_log(GV_LOG_ERROR, "checkpoint %s: read: %s", ck->path,
                   ret < 0 ? strerror(errno) : "file shrank while being read");
            return GV_ERR_IO;
        }
        p += ret;
        off += (uint64_t)ret;
        len -= (size_t)ret;
    }
    return GV_OK;
}

static gv_status_t ck_bad(const struct gv_ckpt *ck, gv_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static gv_status_t ck_bad(const struct gv_ckpt *ck, gv_status_t status, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    gv_log(GV_LOG_ERROR, "checkpoint %s refused: %s", ck->path, msg);
    return status;
}

/* The fixed header: magic, version, lengths. */
static gv_status_t ck_parse_fixed(struct gv_ckpt *ck, const uint8_t *h, uint64_t max_len)
{
    if (memcmp(h, CK_MAGIC, 8) != 0)
        return ck_bad(ck, GV_ERR_PROTO, "not a gravac checkpoint (bad magic)");
    uint32_t version = ck_get32(h + 8);
    if (version != GV_CKPT_VERSION)
        return ck_bad(ck, GV_ERR_VERSION, "format version %" PRIu32 ", this build reads %u",
                      version, GV_CKPT_VERSION);
    uint32_t hdr_len = ck_get32(h + 12);
    uint64_t file_len = ck_get64(h + 16);
    ck->n = ck_get32(h + 64);
    if (file_len != ck->file_len)
        return ck_bad(ck, GV_ERR_PROTO,
                      "the header says %" PRIu64 " bytes but the file has %" PRIu64
                      " (truncated or extended)",
                      file_len, ck->file_len);
    if (max_len != 0 && file_len > max_len)
        return ck_bad(ck, GV_ERR_PROTO, "%" PRIu64 " bytes, more than the cap of %" PRIu64,
                      file_len, max_len);
    if (ck->n > GV_CKPT_MAX_SECTIONS || hdr_len != CK_FIXED_LEN + CK_DIR_ENTRY * ck->n)
        return ck_bad(ck, GV_ERR_PROTO, "bad section count %" PRIu32 " or header length %" PRIu32,
                      ck->n, hdr_len);
    if (ck_get32(h + 68) != 0)
        return ck_bad(ck, GV_ERR_PROTO, "unknown flags 0x%" PRIx32, ck_get32(h + 68));
    ck->id.model_fingerprint = ck_get64(h + 24);
    ck->id.shard_offset = ck_get64(h + 32);
    ck->id.shard_length = ck_get64(h + 40);
    ck->id.shard_index = ck_get32(h + 48);
    ck->id.num_servers = ck_get32(h + 52);
    ck->iteration = ck_get64(h + 56);
    return GV_OK;
}

/* The directory: names, and the one canonical layout the writer produces. */
static gv_status_t ck_parse_dir(struct gv_ckpt *ck, const uint8_t *d)
{
    uint64_t off = ck_align8(CK_FIXED_LEN + CK_DIR_ENTRY * (uint64_t)ck->n);
    for (uint32_t i = 0; i < ck->n; i++) {
        const uint8_t *e = d + CK_DIR_ENTRY * i;
        struct ck_section *s = &ck->sec[i];
        const uint8_t *nul = memchr(e, '\0', CK_NAME_FIELD);
        size_t name_len = nul ? (size_t)(nul - e) : CK_NAME_FIELD;
        bool padded = nul != NULL;
        for (size_t k = name_len; padded && k < CK_NAME_FIELD; k++)
            padded = e[k] == 0;
        memcpy(s->name, e, name_len < CK_NAME_FIELD ? name_len : CK_NAME_FIELD - 1);
        s->name[name_len < CK_NAME_FIELD ? name_len : CK_NAME_FIELD - 1] = '\0';
        if (!padded || !ck_name_ok(s->name))
            return ck_bad(ck, GV_ERR_PROTO, "section %" PRIu32 " has an invalid name", i);
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(ck->sec[j].name, s->name) == 0)
                return ck_bad(ck, GV_ERR_PROTO, "section '%s' appears twice", s->name);
        s->off = ck_get64(e + CK_NAME_FIELD);
        s->len = ck_get64(e + CK_NAME_FIELD + 8);
        if (s->off != off || s->len > ck->file_len - CK_HASH_LEN - off)
            return ck_bad(ck, GV_ERR_PROTO, "section '%s' lies outside the file or out of place",
                          s->name);
        off = ck_align8(off + s->len);
    }
    if (off + CK_HASH_LEN != ck->file_len)
        return ck_bad(ck, GV_ERR_PROTO, "the sections do not add up to the file length");
    return GV_OK;
}

static gv_status_t ck_verify_hash(struct gv_ckpt *ck)
{
    uint8_t digest[EVP_MAX_MD_SIZE], stored[CK_HASH_LEN];
    unsigned int dlen = 0;
    uint64_t body = ck->file_len - CK_HASH_LEN;
    gv_status_t status = GV_ERR_NOMEM;
    uint8_t *buf = NULL;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (md == NULL || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1)
        goto out;
    if (ck->mem != NULL) {
        if (EVP_DigestUpdate(md, ck->mem, body) != 1)
            goto out;
    } else {
        buf = gv_malloc(CK_CHUNK);
        if (buf == NULL)
            goto out;
        for (uint64_t off = 0; off < body;) {
            size_t n = (size_t)GV_MIN((uint64_t)CK_CHUNK, body - off);
            status = ck_pread(ck, off, buf, n);
            if (status != GV_OK)
                goto out;
            status = GV_ERR_NOMEM;
            if (EVP_DigestUpdate(md, buf, n) != 1)
                goto out;
            off += n;
        }
    }
    if (EVP_DigestFinal_ex(md, digest, &dlen) != 1 || dlen != CK_HASH_LEN)
        goto out;
    status = ck_pread(ck, body, stored, CK_HASH_LEN);
    if (status == GV_OK && CRYPTO_memcmp(digest, stored, CK_HASH_LEN) != 0)
        status = ck_bad(ck, GV_ERR_PROTO, "SHA-256 checksum mismatch (the file is corrupt)");
out:
    if (status == GV_ERR_NOMEM)
        gv_log(GV_LOG_ERROR, "checkpoint %s: out of memory or SHA-256 failure", ck->path);
    gv_free(buf);
    EVP_MD_CTX_free(md);
    return status;
}

static gv_status_t ck_parse(struct gv_ckpt *ck, uint64_t max_len)
{
    uint8_t hdr[CK_FIXED_LEN + CK_DIR_ENTRY * GV_CKPT_MAX_SECTIONS];
    if (ck->file_len < CK_FIXED_LEN + CK_HASH_LEN)
        return ck_bad(ck, GV_ERR_PROTO, "%" PRIu64 " bytes, too short for a checkpoint",
                      ck->file_len);
    gv_status_t status = ck_pread(ck, 0, hdr, CK_FIXED_LEN);
    if (status == GV_OK)
        status = ck_parse_fixed(ck, hdr, max_len);
    if (status == GV_OK &&
        ck->file_len < CK_FIXED_LEN + CK_DIR_ENTRY * (uint64_t)ck->n + CK_HASH_LEN)
        status = ck_bad(ck, GV_ERR_PROTO, "too short for its %" PRIu32 " sections", ck->n);
    if (status == GV_OK && ck->n > 0)
        status = ck_pread(ck, CK_FIXED_LEN, hdr + CK_FIXED_LEN, CK_DIR_ENTRY * (size_t)ck->n);
    if (status == GV_OK)
        status = ck_parse_dir(ck, hdr + CK_FIXED_LEN);
    if (status == GV_OK)
        status = ck_verify_hash(ck);
    return status;
}

gv_status_t gv_ckpt_open(const char *path, uint64_t max_len, struct gv_ckpt **ck_p)
{
    struct stat st;
    struct gv_ckpt *ck = gv_calloc(1, sizeof(*ck));
    gv_status_t status = GV_ERR_NOMEM;
    if (ck != NULL)
        ck->fd = -1;
    if (ck == NULL || (ck->path = gv_strdup(path)) == NULL) {
        gv_log(GV_LOG_ERROR, "checkpoint %s: out of memory", path);
        goto err_close;
    }
    ck->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block */
    if (ck->fd < 0 || fstat(ck->fd, &st) != 0) {
        gv_log(GV_LOG_ERROR, "checkpoint %s: %s", path, strerror(errno));
        status = GV_ERR_IO;
        goto err_close;
    }
    if (!S_ISREG(st.st_mode)) {
        status = ck_bad(ck, GV_ERR_IO, "not a regular file");
        goto err_close;
    }
    ck->file_len = (uint64_t)st.st_size;
    status = ck_parse(ck, max_len);
    if (status != GV_OK)
        goto err_close;
    *ck_p = ck;
    return GV_OK;

err_close:
    gv_ckpt_close(ck);
    return status;
}

gv_status_t gv_ckpt_open_mem(const void *buf, size_t len, struct gv_ckpt **ck_p)
{
    struct gv_ckpt *ck = gv_calloc(1, sizeof(*ck));
    if (ck == NULL || (ck->path = gv_strdup("(memory)")) == NULL) {
        gv_free(ck);
        return GV_ERR_NOMEM;
    }
    ck->fd = -1;
    ck->mem = buf ? buf : (const uint8_t *)"";
    ck->file_len = len;
    gv_status_t status = ck_parse(ck, 0);
    if (status != GV_OK) {
        gv_ckpt_close(ck);
        return status;
    }
    *ck_p = ck;
    return GV_OK;
}

void gv_ckpt_close(struct gv_ckpt *ck)
{
    if (ck == NULL)
        return;
    if (ck->mem == NULL && ck->fd >= 0)
        close(ck->fd);
    gv_free(ck->path);
    gv_free(ck);
}

gv_status_t gv_ckpt_check_ident(const struct gv_ckpt *ck, const struct gv_ckpt_ident *want)
{
    const struct gv_ckpt_ident *have = &ck->id;
    const char *field = NULL;
    uint64_t a = 0, b = 0;
    if (have->model_fingerprint != want->model_fingerprint)
        field = "model fingerprint", a = have->model_fingerprint, b = want->model_fingerprint;
    else if (have->num_servers != want->num_servers)
        field = "number of servers", a = have->num_servers, b = want->num_servers;
    else if (have->shard_index != want->shard_index)
        field = "shard index", a = have->shard_index, b = want->shard_index;
    else if (have->shard_offset != want->shard_offset)
        field = "shard offset", a = have->shard_offset, b = want->shard_offset;
    else if (have->shard_length != want->shard_length)
        field = "shard length", a = have->shard_length, b = want->shard_length;
    if (field == NULL)
        return GV_OK;
    bool hex = strcmp(field, "model fingerprint") == 0;
    gv_log(GV_LOG_ERROR,
           hex ? "checkpoint %s refused: it belongs to another job: %s is 0x%016" PRIx64
                 " in the file, 0x%016" PRIx64 " in this run"
               : "checkpoint %s refused: it belongs to another job: %s is %" PRIu64
                 " in the file, %" PRIu64 " in this run",
           ck->path, field, a, b);
    return GV_ERR_INVAL;
}

const struct gv_ckpt_ident *gv_ckpt_ident(const struct gv_ckpt *ck)
{
    return &ck->id;
}

uint64_t gv_ckpt_iteration(const struct gv_ckpt *ck)
{
    return ck->iteration;
}

const char *gv_ckpt_path(const struct gv_ckpt *ck)
{
    return ck->path;
}

uint32_t gv_ckpt_section_count(const struct gv_ckpt *ck)
{
    return ck->n;
}

const char *gv_ckpt_section_name(const struct gv_ckpt *ck, uint32_t i)
{
    return i < ck->n ? ck->sec[i].name : NULL;
}

static const struct ck_section *ck_find(const struct gv_ckpt *ck, const char *name)
{
    for (uint32_t i = 0; name != NULL && i < ck->n; i++)
        if (strcmp(ck->sec[i].name, name) == 0)
            return &ck->sec[i];
    return NULL;
}

gv_status_t gv_ckpt_section_len(const struct gv_ckpt *ck, const char *name, size_t *len_p)
{
    const struct ck_section *s = ck_find(ck, name);
    if (s == NULL || s->len > SIZE_MAX)
        return GV_ERR_INVAL;
    *len_p = (size_t)s->len;
    return GV_OK;
}

gv_status_t gv_ckpt_read_section(struct gv_ckpt *ck, const char *name, void *dst, size_t len)
{
    const struct ck_section *s = ck_find(ck, name);
    if (s == NULL) {
        gv_log(GV_LOG_ERROR, "checkpoint %s: no section '%s'", ck->path, name ? name : "(null)");
        return GV_ERR_INVAL;
    }
    if (s->len != len) {
        gv_log(GV_LOG_ERROR, "checkpoint %s: section '%s' has %" PRIu64 " bytes, expected %zu",
               ck->path, name, s->len, len);
        return GV_ERR_INVAL;
    }
    return len ? ck_pread(ck, s->off, dst, len) : GV_OK;
}

gv_status_t gv_ckpt_find_latest(const char *dir, const struct gv_ckpt_ident *want, bool fallback,
                                uint64_t max_len, struct gv_ckpt **ck_p)
{
    struct ck_file *files;
    size_t n;
    gv_status_t status = ck_list(dir, want->shard_index, &files, &n);
    if (status != GV_OK)
        return status;
    struct gv_ckpt *ck = NULL;
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX], aside[PATH_MAX + 16];
        snprintf(path, sizeof(path), "%s/%s", dir, files[i].name);
        status = gv_ckpt_open(path, max_len, &ck);
        if (status == GV_OK) {
            status = gv_ckpt_check_ident(ck, want);
            if (status != GV_OK) {
                gv_ckpt_close(ck);
                ck = NULL;
            }
            break;
        }
        if (status == GV_ERR_VERSION || status == GV_ERR_NOMEM)
            break;
        if (!fallback) {
            gv_log(GV_LOG_ERROR,
                   "checkpoint %s is the newest of shard %" PRIu32 " and unusable: "
                   "refusing to resume from an older one. Move it away, or pass "
                   "--checkpoint-fallback",
                   path, want->shard_index);
            break;
        }
        snprintf(aside, sizeof(aside), "%s.corrupt", path);
        if (rename(path, aside) == 0)
            gv_log(GV_LOG_WARN, "checkpoint %s skipped (fallback) and renamed to %s", path, aside);
        else
            gv_log(GV_LOG_WARN, "checkpoint %s skipped (fallback); cannot rename it: %s", path,
                   strerror(errno));
        if (i + 1 == n) {
            gv_log(GV_LOG_ERROR,
                   "checkpoint dir %s: none of the %zu checkpoints of shard %" PRIu32 " is valid",
                   dir, n, want->shard_index);
            break;
        }
    }
    gv_free(files);
    if (status != GV_OK)
        return status;
    if (ck != NULL)
        gv_log(GV_LOG_INFO, "checkpoint %s: resuming from iteration %" PRIu64, ck->path,
               ck->iteration);
    *ck_p = ck;
    return GV_OK;
}
