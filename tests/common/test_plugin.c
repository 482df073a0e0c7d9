/* test_plugin.c: libgv_test_plugin.so, a plugin for test_common: its entry point and functions
 * that call the common/ functions the shim forwards to the host (gv_log, gv_calloc, gv_free). */
#include "test_plugin.h"

static int tp_add(int a, int b)
{
    return a + b;
}

static void tp_say(const char *what)
{
    gv_log(GV_LOG_WARN, "test plugin says %s", what);
}

static void *tp_alloc(size_t bytes)
{
    return gv_calloc(1, bytes);
}

static void tp_release(void *ptr)
{
    gv_free(ptr);
}

GV_PLUGIN_EXPORT gv_status_t gv_plugin_entry(const struct gv_plugin_host *host, uint32_t abi,
                                             void *api, size_t api_size)
{
    if (abi != TP_ABI || api == NULL || api_size != sizeof(struct tp_api) ||
        gv_plugin_shim_init(host) != GV_OK)
        return GV_ERR_UNSUPPORTED;
    *(struct tp_api *)api = (struct tp_api){
        .hdr = {.abi = TP_ABI, .size = sizeof(struct tp_api)},
        .add = tp_add,
        .say = tp_say,
        .alloc = tp_alloc,
        .release = tp_release,
    };
    return GV_OK;
}
