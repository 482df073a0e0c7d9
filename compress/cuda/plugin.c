/* plugin.c: the entry point of the CUDA plugin libgravac_compress_cuda.so, which gives the
 * host the launchers of ops.cu and topk.cu. The common/ functions their code calls are
 * common/plugin_shim.c's, compiled into the plugin too. Every symbol but the entry point is
 * hidden. */
#include "gv_compress_cuda.h"

GV_PLUGIN_EXPORT gv_status_t gv_plugin_entry(const struct gv_plugin_host *host, uint32_t abi,
                                             void *api, size_t api_size)
{
    if (abi != GV_CUDA_PLUGIN_ABI || api == NULL || api_size != sizeof(struct gv_cuda_api) ||
        gv_plugin_shim_init(host) != GV_OK)
        return GV_ERR_UNSUPPORTED;
    *(struct gv_cuda_api *)api = (struct gv_cuda_api){
        .hdr = {.abi = GV_CUDA_PLUGIN_ABI, .size = sizeof(struct gv_cuda_api)},
        .device_count = gv_cuda_device_count,
        .ws_create = gv_cuda_ws_create,
        .ws_destroy = gv_cuda_ws_destroy,
        .malloc = gv_cuda_malloc,
        .free = gv_cuda_free,
        .d2h = gv_cuda_d2h,
        .h2d = gv_cuda_h2d,
        .d2d = gv_cuda_d2d,
        .zero = gv_cuda_zero,
        .accumulate = gv_cuda_accumulate,
        .sumsq = gv_cuda_sumsq,
        .ef_apply = gv_cuda_ef_apply,
        .topk = gv_cuda_topk,
        .count_ge = gv_cuda_count_ge,
        .select_ge = gv_cuda_select_ge,
        .gather = gv_cuda_gather,
        .sample = gv_cuda_sample,
        .abs_stats = gv_cuda_abs_stats,
        .round_f16 = gv_cuda_round_f16,
        .scatter_add = gv_cuda_scatter_add,
    };
    return GV_OK;
}
