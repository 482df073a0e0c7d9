/* backend_cuda_plugin.c: the CUDA backend as gv_nn sees it: the plugin libgravac_nn_cuda.so is
 * loaded with dlopen the first time a CUDA backend is created (never for a CPU backend), so
 * cudart and cuBLAS are mapped only in processes that asked for the GPU. Where the plugin is
 * looked for, in order: $GV_CUDA_PLUGIN_DIR (only there when set), the directory of the
 * executable (/proc/self/exe), its ../lib/gravac, and the build tree's bin/. Without CUDA at
 * build time (GV_NN_CUDA_PLUGIN_NAME is "") creation fails with GV_ERR_UNSUPPORTED. Once loaded,
 * the plugin stays loaded for the life of the process (backends keep pointers into it). */
#include "nn_cuda_plugin.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_once_t plug_once = PTHREAD_ONCE_INIT;
static gv_status_t plug_status;
static char plug_why[1536];    /* why it could not be loaded: the places tried */
static char plug_path[PATH_MAX]; /* where it was loaded from */
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

static void *plug_find(void)
{
    return gv_plugin_open(GV_NN_CUDA_PLUGIN_NAME, GV_NN_CUDA_PLUGIN_BUILD_DIR, plug_path, sizeof(plug_path), plug_why, sizeof(plug_why));
}

static void plug_load(void)
{
    plug_status = GV_ERR_UNSUPPORTED;
    if (GV_NN_CUDA_PLUGIN_NAME[0] == '\0') {
        snprintf(plug_why, sizeof(plug_why), "gravac was built without CUDA (no toolkit found)");
        return;
    }
    void *lib = plug_find();
    if (lib == NULL)
        return; /* plug_why lists what was tried */
    gv_nn_cuda_plugin_init_fn init;
    *(void **)&init = dlsym(lib, GV_NN_CUDA_PLUGIN_ENTRY);
    struct gv_nn_cuda_host host = {.abi = GV_NN_CUDA_PLUGIN_ABI, .size = sizeof(host),
                                   .vlog = gv_vlog, .calloc = gv_calloc, .free = gv_free};
    struct gv_nn_cuda_api api;
    if (init == NULL || init(&host, &api) != GV_OK || api.abi != GV_NN_CUDA_PLUGIN_ABI ||
        api.size != sizeof(api) || api.ops_size != sizeof(struct gv_nn_ops) ||
        api.optim_size != sizeof(struct gv_optim_cfg)) {
        snprintf(plug_why, sizeof(plug_why), "%.1000s is not a plugin of this build of gravac "
                 "(entry point or interface version differs)", plug_path);
        dlclose(lib);
        return;
    }
    plug_api = api;
    plug_status = GV_OK;
    gv_log(GV_LOG_INFO, "nn: loaded the CUDA plugin %s", plug_path);
}

gv_status_t gv_nn_cuda_create(struct gv_nn_backend **be_p)
{
    pthread_once(&plug_once, plug_load);
    if (plug_status != GV_OK) {
        gv_log(GV_LOG_ERROR, "nn: the cuda backend is unavailable: %s%s", plug_why,
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
