/* nn_cuda_plugin.h: the interface between gv_nn and its CUDA plugin (libgravac_nn_cuda.so, built
 * from backend_cuda.cu and backend_cuda_entry.c). gv_nn loads the plugin with common/'s
 * gv_plugin_load the first time a CUDA backend is asked for (backend_cuda_plugin.c), so a
 * process that computes on the CPU never maps cudart or cuBLAS. The plugin links nothing of
 * gravac: the common/ functions its code calls (gv_log, gv_calloc, gv_free) are
 * common/plugin_shim.c's, which forward to the host's, so logs keep the process's sink and tag
 * and allocations its failure hook. Private to nn/. */
#ifndef GV_NN_CUDA_PLUGIN_H
#define GV_NN_CUDA_PLUGIN_H

#include "nn_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever the table below or a structure the plugin shares with gv_nn changes. */
#define GV_NN_CUDA_PLUGIN_ABI 4u

/* What the plugin's entry point (gv_plugin_entry, backend_cuda_entry.c) gives the host. Layout
 * checks: the sizes of the structures both sides use. */
struct gv_nn_cuda_api {
    struct gv_plugin_api_hdr hdr; /* GV_NN_CUDA_PLUGIN_ABI, sizeof(struct gv_nn_cuda_api) */
    uint32_t ops_size;            /* sizeof(struct gv_nn_ops) */
    uint32_t optim_size;          /* sizeof(struct gv_optim_cfg) */
    /* GV_ERR_NODEV (logged as a warning) when the runtime finds no device or no driver. */
    gv_status_t (*create)(struct gv_nn_backend **be_p);
    void (*destroy)(struct gv_nn_backend *be);
    /* Page-locked host memory (cudaMallocHost), zeroed. */
    gv_status_t (*pinned_alloc)(size_t bytes, void **ptr_p);
    void (*pinned_free)(void *ptr);
    /* Device memory (cudaMalloc), zeroed. */
    gv_status_t (*device_alloc)(size_t bytes, void **ptr_p);
    void (*device_free)(void *ptr);
};

/* backend_cuda.cu (inside the plugin). */
gv_status_t gv_nn_cuda_plugin_create(struct gv_nn_backend **be_p);
void gv_nn_cuda_plugin_destroy(struct gv_nn_backend *be);
gv_status_t gv_nn_cuda_pinned_alloc(size_t bytes, void **ptr_p);
void gv_nn_cuda_pinned_free(void *ptr);
gv_status_t gv_nn_cuda_device_alloc(size_t bytes, void **ptr_p);
void gv_nn_cuda_device_free(void *ptr);

#ifdef __cplusplus
}
#endif
#endif /* GV_NN_CUDA_PLUGIN_H */
