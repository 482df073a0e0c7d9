/* plugin.c: the one loader of what gravac maps only on demand: its plugins (found in
 * $GV_CUDA_PLUGIN_DIR only when set, else next to the executable, in its ../lib/gravac, then in
 * the build tree), whose entry point gets the host's table, and system libraries by soname.
 * It says why a load failed and logs nothing; the plugin side is plugin_shim.c. */
#include "gv_common.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Appends "what (why)" to pl->why, the list of places tried (cut short when it is full). */
static void plugin_note(struct gv_plugin *pl, const char *what, const char *why)
{
    size_t off = strlen(pl->why);
    if (off + 1 >= sizeof(pl->why))
        return;
    int n = snprintf(pl->why + off, sizeof(pl->why) - off, "%s%s (%s)", off ? "; " : "", what, why);
    if (n < 0)
        pl->why[off] = '\0';
}

/* dlopen of path: 1 loaded, 0 not there, -1 there but unloadable (dlerror noted). */
static int plugin_try_path(struct gv_plugin *pl, const char *path)
{
    if (access(path, F_OK) != 0) {
        plugin_note(pl, path, strerror(errno));
        return 0;
    }
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *e = dlerror();
        plugin_note(pl, path, e != NULL ? e : "dlopen failed");
        return -1;
    }
    pl->lib = lib;
    snprintf(pl->path, sizeof(pl->path), "%s", path);
    return 1;
}

static int plugin_try(struct gv_plugin *pl, const char *dir, const char *name)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof(path)) {
        plugin_note(pl, dir, "path too long");
        return 0;
    }
    return plugin_try_path(pl, path);
}

/* The search order of a gravac plugin; stops at the first file that exists. */
static void plugin_find(struct gv_plugin *pl, const char *name, const char *build_dir)
{
    const char *env = getenv("GV_CUDA_PLUGIN_DIR");
    if (env != NULL && env[0] != '\0') {
        plugin_try(pl, env, name); /* an explicit choice is not second-guessed */
        return;
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash != NULL) {
            *slash = '\0';
            if (plugin_try(pl, exe, name) != 0)
                return;
            char up[PATH_MAX + 16];
            snprintf(up, sizeof(up), "%s/../lib/gravac", exe);
            if (plugin_try(pl, up, name) != 0)
                return;
        }
    }
    if (build_dir != NULL)
        plugin_try(pl, build_dir, name);
}

static gv_status_t plugin_fail(struct gv_plugin *pl)
{
    if (pl->lib != NULL)
        dlclose(pl->lib);
    pl->lib = NULL;
    return GV_ERR_UNSUPPORTED;
}

/* Resolves the symbols the caller asked for. */
static gv_status_t plugin_syms(const struct gv_plugin_spec *spec, struct gv_plugin *pl)
{
    for (size_t i = 0; i < spec->n_syms; i++) {
        const struct gv_plugin_sym *s = &spec->syms[i];
        *s->addr_p = dlsym(pl->lib, s->name);
        if (*s->addr_p == NULL && !s->optional) {
            snprintf(pl->why, sizeof(pl->why), "%.1000s lacks the symbol %.200s", pl->path,
                     s->name);
            return GV_ERR_UNSUPPORTED;
        }
    }
    return GV_OK;
}

/* Calls a gravac plugin's entry point with the host's table and checks what comes back. */
static gv_status_t plugin_enter(const struct gv_plugin_spec *spec, struct gv_plugin *pl)
{
    static const struct gv_plugin_host host = {.abi = GV_PLUGIN_HOST_ABI,
                                               .size = sizeof(host),
                                               .vlog = gv_vlog,
                                               .calloc = gv_calloc,
                                               .free = gv_free};
    gv_plugin_entry_fn entry;
    *(void **)&entry = dlsym(pl->lib, GV_PLUGIN_ENTRY);
    memset(spec->api, 0, spec->api_size);
    const struct gv_plugin_api_hdr *hdr = spec->api;
    if (entry == NULL || spec->api_size < sizeof(*hdr) ||
        entry(&host, spec->abi, spec->api, spec->api_size) != GV_OK || hdr->abi != spec->abi ||
        hdr->size != spec->api_size) {
        snprintf(pl->why, sizeof(pl->why),
                 "%.1000s is not a plugin of this build of gravac "
                 "(entry point or interface version differs)",
                 pl->path);
        return GV_ERR_UNSUPPORTED;
    }
    return GV_OK;
}

gv_status_t gv_plugin_load(const struct gv_plugin_spec *spec, struct gv_plugin *pl)
{
    pl->lib = NULL;
    pl->path[0] = '\0';
    pl->why[0] = '\0';
    if (spec->file == NULL || spec->file[0] == '\0') {
        snprintf(pl->why, sizeof(pl->why), "no library named");
        return GV_ERR_UNSUPPORTED;
    }
    if (spec->system) {
        /* by soname: the dynamic loader's own search, none of gravac's places */
        pl->lib = dlopen(spec->file, RTLD_NOW | RTLD_LOCAL);
        if (pl->lib == NULL) {
            const char *e = dlerror();
            snprintf(pl->why, sizeof(pl->why), "%.1400s", e != NULL ? e : spec->file);
            return GV_ERR_UNSUPPORTED;
        }
        snprintf(pl->path, sizeof(pl->path), "%s", spec->file);
    } else {
        plugin_find(pl, spec->file, spec->build_dir);
        if (pl->lib == NULL)
            return GV_ERR_UNSUPPORTED; /* pl->why lists what was tried */
    }
    if (plugin_syms(spec, pl) != GV_OK)
        return plugin_fail(pl);
    if (spec->api != NULL && plugin_enter(spec, pl) != GV_OK)
        return plugin_fail(pl);
    return GV_OK;
}

void gv_plugin_close(struct gv_plugin *pl)
{
    if (pl != NULL && pl->lib != NULL) {
        dlclose(pl->lib);
        pl->lib = NULL;
    }
}
