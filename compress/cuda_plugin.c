/* cuda_plugin.c: finds and loads the CUDA plugin libgravac_compress_cuda.so with dlopen, the
 * first time the CUDA backend or a GPU probe is asked for (never for the CPU backend), so cudart
 * is mapped only in processes that asked for the GPU. Without CUDA at build time
 * (GV_CUDA_PLUGIN_NAME is "") it answers GV_ERR_UNSUPPORTED. Once loaded the plugin stays
 * loaded for the life of the process (workspaces and device memory belong to it). */
#include "cuda/gv_compress_cuda.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_once_t plug_once = PTHREAD_ONCE_INIT;
static gv_status_t plug_status;
static char plug_why[1536];      /* why it could not be loaded: the places tried */
static char plug_path[PATH_MAX]; /* where it was loaded from */
static struct gv_cuda_api plug_api;

static void *plug_find(void)
{
    return gv_plugin_open(GV_CUDA_PLUGIN_NAME, GV_CUDA_PLUGIN_BUILD_DIR, plug_path, sizeof(plug_path), plug_why, sizeof(plug_why));
}

static void plug_load(void)
{
    plug_status = GV_ERR_UNSUPPORTED;
    if (GV_CUDA_PLUGIN_NAME[0] == '\0') {
        snprintf(plug_why, sizeof(plug_why), "gravac was built without CUDA (no toolkit found)");
        return;
    }
    void *lib = plug_find();
    if (lib == NULL)
        return;
    gv_cuda_plugin_init_fn init;
    *(void **)&init = dlsym(lib, GV_CUDA_PLUGIN_ENTRY);
    struct gv_cuda_host host = {.abi = GV_CUDA_PLUGIN_ABI, .size = sizeof(host),
                                .vlog = gv_vlog, .calloc = gv_calloc, .free = gv_free};
    struct gv_cuda_api api;
    if (init == NULL || init(&host, &api) != GV_OK || api.abi != GV_CUDA_PLUGIN_ABI ||
        api.size != sizeof(api)) {
        snprintf(plug_why, sizeof(plug_why), "%.1000s is not a plugin of this build of gravac "
                 "(entry point or interface version differs)", plug_path);
        dlclose(lib);
        return;
    }
    plug_api = api;
    plug_status = GV_OK;
    gv_log(GV_LOG_INFO, "compress: loaded the CUDA plugin %s", plug_path);
}

gv_status_t gv_cuda_plugin(int quiet, const struct gv_cuda_api **api_p)
{
    pthread_once(&plug_once, plug_load);
    if (plug_status != GV_OK) {
        gv_log(quiet ? GV_LOG_INFO : GV_LOG_ERROR,
               "compress: the CUDA backend is unavailable: %s%s", plug_why,
               GV_CUDA_PLUGIN_NAME[0] ? "; the plugin " GV_CUDA_PLUGIN_NAME " is looked for in "
                                        "$GV_CUDA_PLUGIN_DIR, else next to the executable and "
                                        "in its ../lib/gravac"
                                      : "");
        return plug_status;
    }
    *api_p = &plug_api;
    return GV_OK;
}
