/* backend_cuda_entry.c: the entry point of the CUDA plugin (libgravac_nn_cuda.so) and the
 * common/ functions the plugin's code calls, forwarded to the host process's own (so logs keep
 * its sink and tag, allocations its failure hook). Compiled into the plugin only; every symbol
 * but the entry point is hidden (-fvisibility=hidden), so nothing here interposes on gravac. */
#include "nn_cuda_plugin.h"

#include <string.h>

static struct gv_nn_cuda_host entry_host;

void gv_log(enum gv_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    entry_host.vlog(level, fmt, ap);
    va_end(ap);
}

void *gv_calloc(size_t nmemb, size_t size)
{
    return entry_host.calloc(nmemb, size);
}

void gv_free(void *ptr)
{
    entry_host.free(ptr);
}

__attribute__((visibility("default"))) gv_status_t
gv_nn_cuda_plugin_init(const struct gv_nn_cuda_host *host, struct gv_nn_cuda_api *api)
{
    if (host == NULL || api == NULL || host->abi != GV_NN_CUDA_PLUGIN_ABI ||
        host->size != sizeof(*host))
        return GV_ERR_UNSUPPORTED;
    entry_host = *host;
    memset(api, 0, sizeof(*api));
    api->abi = GV_NN_CUDA_PLUGIN_ABI;
    api->size = sizeof(*api);
    api->ops_size = sizeof(struct gv_nn_ops);
    api->optim_size = sizeof(struct gv_optim_cfg);
    api->create = gv_nn_cuda_plugin_create;
    api->destroy = gv_nn_cuda_plugin_destroy;
    api->pinned_alloc = gv_nn_cuda_pinned_alloc;
    api->pinned_free = gv_nn_cuda_pinned_free;
    api->device_alloc = gv_nn_cuda_device_alloc;
    api->device_free = gv_nn_cuda_device_free;
    return GV_OK;
}
