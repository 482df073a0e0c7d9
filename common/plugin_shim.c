/* plugin_shim.c: the plugin side of common/plugin.c, compiled into every gravac plugin and
 * never into gv_common: the common/ functions a plugin's code calls (gv_log, gv_calloc,
 * gv_free), forwarded to the host process's own through the table its entry point receives.
 * Built with hidden visibility, so nothing here interposes on the host's symbols. */
#include "gv_common.h"

static struct gv_plugin_host shim_host;

gv_status_t gv_plugin_shim_init(const struct gv_plugin_host *host)
{
    if (host == NULL || host->abi != GV_PLUGIN_HOST_ABI || host->size != sizeof(*host) ||
        host->vlog == NULL || host->calloc == NULL || host->free == NULL)
        return GV_ERR_UNSUPPORTED;
    shim_host = *host;
    return GV_OK;
}

void gv_log(enum gv_log_level level, const char *fmt, ...)
{
    if (shim_host.vlog == NULL)
        return; /* only the entry point runs before the host is known, and it logs nothing */
    va_list ap;
    va_start(ap, fmt);
    shim_host.vlog(level, fmt, ap);
    va_end(ap);
}

void *gv_calloc(size_t nmemb, size_t size)
{
    return shim_host.calloc != NULL ? shim_host.calloc(nmemb, size) : NULL;
}

void gv_free(void *ptr)
{
    if (shim_host.free != NULL)
        shim_host.free(ptr);
}
