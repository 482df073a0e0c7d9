/* plugin.c: the entry point of the CUDA plugin libgravac_compress_cuda.so, which gives the
 * host the launchers of ops.cu and topk.cu, and the common/ functions their code calls,
 * forwarded to the host process's own (its log sink and tag, its allocation failure hook).
 * Compiled into the plugin only; every symbol but the entry point is hidden. */
#include "gv_compress_cuda.h"

#include <string.h>

static struct gv_cuda_host plugin_host;

void gv_log(enum gv_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    plugin_host.vlog(level, fmt, ap);
    va_end(ap);
}

void *gv_calloc(size_t nmemb, size_t size)
{
    return plugin_host.calloc(nmemb, size);
}

void gv_free(void *ptr)
{
    plugin_host.free(ptr);
}

__attribute__((visibility("default"))) gv_status_t
gv_compress_cuda_plugin_init(const struct gv_cuda_host *host, struct gv_cuda_api *api)
{
    if (host == NULL || api == NULL || host->abi != GV_CUDA_PLUGIN_ABI ||
        host->size != sizeof(*host))
        return GV_ERR_UNSUPPORTED;
    plugin_host = *host;
    *api = (struct gv_cuda_api){
        .abi = GV_CUDA_PLUGIN_ABI,
        .size = sizeof(*api),
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
