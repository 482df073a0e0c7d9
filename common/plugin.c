/* plugin.c: finds and dlopens a gravac plugin (a shared object built with the project, e.g. the
 * CUDA backends), so that optional heavy dependencies are mapped only by processes that ask for
 * them. Where it looks, in order: $GV_CUDA_PLUGIN_DIR (only there when set), the directory of the
 * executable (/proc/self/exe), its ../lib/gravac, then the build tree's directory. */
#include "gv_common.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct plugin_search {
    const char *name;
    char *why;
    size_t why_len;
    size_t off;
    char *path;
    size_t path_len;
};

/* Appends "path (why)" to the list of places tried. */
static void plugin_note(struct plugin_search *ps, const char *path, const char *why)
{
    if (ps->why_len == 0 || ps->off >= ps->why_len)
        return;
    int n = snprintf(ps->why + ps->off, ps->why_len - ps->off, "%s%s (%s)", ps->off ? "; " : "",
                     path, why);
    if (n > 0)
        ps->off += (size_t)n;
}

/* dlopen of dir/name: 1 loaded, 0 not there, -1 there but unloadable (dlerror noted). */
static int plugin_try(struct plugin_search *ps, const char *dir, void **lib_p)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", dir, ps->name);
    if (access(path, F_OK) != 0) {
        plugin_note(ps, path, strerror(errno));
        return 0;
    }
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *e = dlerror();
        plugin_note(ps, path, e != NULL ? e : "dlopen failed");
        return -1;
    }
    *lib_p = lib;
    if (ps->path_len > 0)
        snprintf(ps->path, ps->path_len, "%s", path);
    return 1;
}

void *gv_plugin_open(const char *name, const char *build_dir, char *path, size_t path_len,
                     char *why, size_t why_len)
{
    struct plugin_search ps = {name, why, why_len, 0, path, path_len};
    void *lib = NULL;
    if (why_len > 0)
        why[0] = '\0';
    const char *env = getenv("GV_CUDA_PLUGIN_DIR");
    if (env != NULL && env[0] != '\0') {
        plugin_try(&ps, env, &lib);
        return lib;
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash != NULL) {
            *slash = '\0';
            if (plugin_try(&ps, exe, &lib) != 0)
                return lib;
            char up[PATH_MAX + 16];
            snprintf(up, sizeof(up), "%s/../lib/gravac", exe);
            if (plugin_try(&ps, up, &lib) != 0)
                return lib;
        }
    }
    if (build_dir != NULL)
        plugin_try(&ps, build_dir, &lib);
    return lib;
}
