/* backend_cuda_entry.c: the entry point of the CUDA plugin (libgravac_nn_cuda.so), which gives
 * the host the functions of backend_cuda.cu. The common/ functions the plugin's code calls are
 * common/plugin_shim.c's, compiled into the plugin too. Every symbol but the entry point is
 * hidden (-fvisibility=hidden), so nothing here interposes on gravac. */
#include "nn_cuda_plugin.h"

GV_PLUGIN_EXPORT gv_status_t gv_plugin_entry(const struct gv_plugin_host *host, uint32_t abi,
                                             void *api, size_t api_size)
{
    if (abi != GV_NN_CUDA_PLUGIN_ABI || api == NULL || api_size != sizeof(struct gv_nn_cuda_api) ||
        gv_plugin_shim_init(host) != GV_OK)
        return GV_ERR_UNSUPPORTED;
    *(struct gv_nn_cuda_api *)api = (struct gv_nn_cuda_api){
        .hdr = {.abi = GV_NN_CUDA_PLUGIN_ABI, .size = sizeof(struct gv_nn_cuda_api)},
        .ops_size = sizeof(struct gv_nn_ops),
        .optim_size = sizeof(struct gv_optim_cfg),
        .create = gv_nn_cuda_plugin_create,
        .destroy = gv_nn_cuda_plugin_destroy,
        .pinned_alloc = gv_nn_cuda_pinned_alloc,
        .pinned_free = gv_nn_cuda_pinned_free,
        .device_alloc = gv_nn_cuda_device_alloc,
        .device_free = gv_nn_cuda_device_free,
    };
    return GV_OK;
}
