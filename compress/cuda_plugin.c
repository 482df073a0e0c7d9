/* cuda_plugin.c: loads the CUDA plugin libgravac_compress_cuda.so with common/'s
 * gv_plugin_load, the first time the CUDA backend or a GPU probe is asked for (never for the
 * CPU backend), so cudart is mapped only in processes that asked for the GPU. Without CUDA at
 * build time (GV_CUDA_PLUGIN_NAME is "") it answers GV_ERR_UNSUPPORTED. Once loaded the plugin
 * stays loaded for the life of the process (workspaces and device memory belong to it). */
#include "cuda/gv_compress_cuda.h"

#include <pthread.h>
#include <stdio.h>

static pthread_once_t plug_once = PTHREAD_ONCE_INIT;
static gv_status_t plug_status;
static struct gv_plugin plug; /* where it was loaded from, or why it could not be */
static struct gv_cuda_api plug_api;

static void plug_load(void)
{
    if (GV_CUDA_PLUGIN_NAME[0] == '\0') {
        plug_status = GV_ERR_UNSUPPORTED;
        snprintf(plug.why, sizeof(plug.why), "gravac was built without CUDA (no toolkit found)");
        return;
    }
    const struct gv_plugin_spec spec = {.file = GV_CUDA_PLUGIN_NAME,
                                        .build_dir = GV_CUDA_PLUGIN_BUILD_DIR,
                                        .abi = GV_CUDA_PLUGIN_ABI,
                                        .api = &plug_api,
                                        .api_size = sizeof(plug_api)};
    plug_status = gv_plugin_load(&spec, &plug);
    if (plug_status == GV_OK)
        gv_log(GV_LOG_INFO, "compress: loaded the CUDA plugin %s", plug.path);
}

gv_status_t gv_cuda_plugin(int quiet, const struct gv_cuda_api **api_p)
{
    pthread_once(&plug_once, plug_load);
    if (plug_status != GV_OK) {
        gv_log(quiet ? GV_LOG_INFO : GV_LOG_ERROR,
               "compress: the CUDA backend is unavailable: %s%s", plug.why,
               GV_CUDA_PLUGIN_NAME[0] ? "; the plugin " GV_CUDA_PLUGIN_NAME " is looked for in "
                                        "$GV_CUDA_PLUGIN_DIR, else next to the executable and "
                                        "in its ../lib/gravac"
                                      : "");
        return plug_status;
    }
    *api_p = &plug_api;
    return GV_OK;
}
