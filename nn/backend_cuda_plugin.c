/* backend_cuda_plugin.c: the CUDA backend as gv_nn sees it: the plugin libgravac_nn_cuda.so is
 * loaded with common/'s gv_plugin_load the first time a CUDA backend is created (never for a
 * CPU backend), so cudart and cuBLAS are mapped only in processes that asked for the GPU. Where
 * the plugin is looked for, in order: $GV_CUDA_PLUGIN_DIR (only there when set), the directory
 * of the executable (/proc/self/exe), its ../lib/gravac, and the build tree's bin/. Without
 * CUDA at build time (GV_NN_CUDA_PLUGIN_NAME is "") creation fails with GV_ERR_UNSUPPORTED.
 * Once loaded, the plugin stays loaded for the life of the process (backends keep pointers into
 * it). */
#include "nn_cuda_plugin.h"

#include <pthread.h>
#include <stdio.h>

static pthread_once_t plug_once = PTHREAD_ONCE_INIT;
static gv_status_t plug_status;
static struct gv_plugin plug; /* where it was loaded from, or why it could not be */
static struct gv_nn_cuda_api plug_api;

static gv_status_t plug_pinned_alloc(size_t len, void **ptr_p)
{
    return plug_api.pinned_alloc(len, ptr_p);
}

static gv_status_t plug_device_alloc(size_t len, void **ptr_p)
{
    return plug_api.device_alloc(len, ptr_p);
}

static void plug_pinned_free(void *ptr)
{
    plug_api.pinned_free(ptr);
}

static void plug_device_free(void *ptr)
{
    plug_api.device_free(ptr);
}

static const struct gv_mem_ops plug_pinned_ops = {plug_pinned_alloc, plug_pinned_free};
static const struct gv_mem_ops plug_device_ops = {plug_device_alloc, plug_device_free};

static void plug_load(void)
{
    if (GV_NN_CUDA_PLUGIN_NAME[0] == '\0') {
        plug_status = GV_ERR_UNSUPPORTED;
        snprintf(plug.why, sizeof(plug.why), "gravac was built without CUDA (no toolkit found)");
        return;
    }
    const struct gv_plugin_spec spec = {.file = GV_NN_CUDA_PLUGIN_NAME,
                                        .build_dir = GV_NN_CUDA_PLUGIN_BUILD_DIR,
                                        .abi = GV_NN_CUDA_PLUGIN_ABI,
                                        .api = &plug_api,
                                        .api_size = sizeof(plug_api)};
    plug_status = gv_plugin_load(&spec, &plug);
    if (plug_status != GV_OK)
        return; /* plug.why lists what was tried */
    if (plug_api.ops_size != sizeof(struct gv_nn_ops) ||
        plug_api.optim_size != sizeof(struct gv_optim_cfg)) {
        snprintf(plug.why, sizeof(plug.why),
                 "%.1000s is not a plugin of this build of gravac "
                 "(the layout of the structures it shares differs)",
                 plug.path);
        gv_plugin_close(&plug);
        plug_status = GV_ERR_UNSUPPORTED;
        return;
    }
    gv_log(GV_LOG_INFO, "nn: loaded the CUDA plugin %s", plug.path);
}

gv_status_t gv_nn_cuda_create(struct gv_nn_backend **be_p)
{
    pthread_once(&plug_once, plug_load);
    if (plug_status != GV_OK) {
        gv_log(GV_LOG_ERROR, "nn: the cuda backend is unavailable: %s%s", plug.why,
               GV_NN_CUDA_PLUGIN_NAME[0] ? "; the plugin " GV_NN_CUDA_PLUGIN_NAME
                                           " is looked for in $GV_CUDA_PLUGIN_DIR, else next to "
                                           "the executable and in its ../lib/gravac"
                                         : "");
        return plug_status;
    }
    gv_status_t status = plug_api.create(be_p);
    if (status == GV_OK) {
        /* other modules (the worker's staging buffers) get pinned and device memory through
         * gv_buf_alloc from now on */
        gv_mem_set_ops(GV_MEM_PINNED, &plug_pinned_ops);
        gv_mem_set_ops(GV_MEM_DEVICE, &plug_device_ops);
    }
    return status;
}

void gv_nn_cuda_destroy(struct gv_nn_backend *be)
{
    if (be != NULL && plug_status == GV_OK)
        plug_api.destroy(be);
}
