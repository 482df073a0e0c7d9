/* ckpt_files.c: checkpoint files by name, for the server and the worker: a directory created
 * with its parents, the path of one iteration, opening exactly one iteration, and retiring the
 * files of an abandoned future after a resume. ops/ckpt.c writes and verifies the files; this
 * only finds and renames them. */
#include "gv_ps.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

gv_status_t gv_ps_mkdir(const char *dir)
{
    char path[PATH_MAX];
    size_t len = strlen(dir);
    if (len == 0 || len >= sizeof(path)) {
        gv_log(GV_LOG_ERROR, "directory '%s': empty or too long", dir);
        return GV_ERR_IO;
    }
    memcpy(path, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char c = path[i];
        path[i] = '\0';
        struct stat st;
        if (stat(path, &st) != 0) {
            if (mkdir(path, 0700) != 0 && errno != EEXIST) {
                gv_log(GV_LOG_ERROR, "directory %s: cannot create %s: %s", dir, path,
                       strerror(errno));
                return GV_ERR_IO;
            }
        } else if (!S_ISDIR(st.st_mode)) {
            gv_log(GV_LOG_ERROR, "directory %s: %s is not a directory", dir, path);
            return GV_ERR_IO;
        }
        path[i] = c;
    }
    return GV_OK;
}

void gv_ps_ckpt_path(const char *dir, uint32_t index, uint64_t iter, char *out, size_t len)
{
    snprintf(out, len, "%s/shard%04" PRIu32 "-iter%012" PRIu64 ".gvckpt", dir, index, iter);
}

gv_status_t gv_ps_ckpt_open_iter(const char *dir, const struct gv_ckpt_ident *id, uint64_t iter,
                                 struct gv_ckpt **ck_p)
{
    char path[PATH_MAX];
    struct stat st;
    gv_ps_ckpt_path(dir, id->shard_index, iter, path, sizeof(path));
    if (stat(path, &st) != 0)
        return GV_ERR_INVAL;
    struct gv_ckpt *ck;
    gv_status_t status = gv_ckpt_open(path, 0, &ck);
    if (status != GV_OK)
        return status;
    if ((status = gv_ckpt_check_ident(ck, id)) != GV_OK) {
        gv_ckpt_close(ck);
        return status;
    }
    if (gv_ckpt_iteration(ck) != iter) {
        gv_log(GV_LOG_ERROR,
               "checkpoint %s holds iteration %" PRIu64 ", not the %" PRIu64 " of its name", path,
               gv_ckpt_iteration(ck), iter);
        gv_ckpt_close(ck);
        return GV_ERR_PROTO;
    }
    *ck_p = ck;
    return GV_OK;
}

/* "shard<index>-iter<digits>.gvckpt" with index's value: the iteration, else false. */
static bool files_match(const char *name, uint32_t index, uint64_t *iter_p)
{
    if (strncmp(name, "shard", 5) != 0)
        return false;
    char *end;
    errno = 0;
    unsigned long long s = strtoull(name + 5, &end, 10);
    if (errno != 0 || end == name + 5 || s != index || strncmp(end, "-iter", 5) != 0)
        return false;
    const char *p = end + 5;
    if (!isdigit((unsigned char)*p))
        return false;
    unsigned long long it = strtoull(p, &end, 10);
    if (errno != 0 || strcmp(end, ".gvckpt") != 0)
        return false;
    *iter_p = it;
    return true;
}

gv_status_t gv_ps_ckpt_retire_newer(const char *dir, uint32_t index, uint64_t iter)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        gv_log(GV_LOG_ERROR, "checkpoint dir %s: %s", dir, strerror(errno));
        return GV_ERR_IO;
    }
    gv_status_t status = GV_OK;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        uint64_t it;
        if (!files_match(de->d_name, index, &it) || it <= iter)
            continue;
        char from[PATH_MAX], to[PATH_MAX + 8];
        snprintf(from, sizeof(from), "%s/%s", dir, de->d_name);
        snprintf(to, sizeof(to), "%s.stale", from);
        if (rename(from, to) != 0) {
            gv_log(GV_LOG_ERROR, "checkpoint %s: cannot rename it to %s: %s", from, to,
                   strerror(errno));
            status = GV_ERR_IO;
            continue;
        }
        gv_log(GV_LOG_WARN,
               "checkpoint %s is newer than iteration %" PRIu64 ", which the job "
               "resumes from: renamed to %s (never loaded)",
               from, iter, to);
    }
    closedir(d);
    return status;
}
