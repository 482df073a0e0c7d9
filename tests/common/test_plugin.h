/* test_plugin.h: the table of libgv_test_plugin.so (test_plugin.c), a gravac plugin built with
 * gv_add_plugin like the CUDA ones but needing nothing, so that test_common checks the loader
 * and the plugin shim on every machine. */
#ifndef GV_TEST_PLUGIN_H
#define GV_TEST_PLUGIN_H

#include "gv_common.h"

#define TP_ABI 7u

struct tp_api {
    struct gv_plugin_api_hdr hdr; /* TP_ABI, sizeof(struct tp_api) */
    int (*add)(int a, int b);
    void (*say)(const char *what); /* gv_log(GV_LOG_WARN, "test plugin says %s", what) */
    void *(*alloc)(size_t bytes);  /* gv_calloc(1, bytes) */
    void (*release)(void *ptr);    /* gv_free */
};

#endif /* GV_TEST_PLUGIN_H */
