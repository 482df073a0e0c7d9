/* gv_compress_cuda.h: the extern "C" launchers of compress/cuda/ (the .cu files) and the table
 * through which cuda_backend.c calls them. The launchers live in the plugin
 * libgravac_compress_cuda.so (the .cu files and cuda/plugin.c), which gv_compress loads with
 * common/'s gv_plugin_load the first time device memory or a GPU probe is asked for
 * (cuda_plugin.c), so a process that compresses on the CPU never maps cudart. The plugin links
 * nothing of gravac: the common/ functions its code calls are forwarded to the host's by
 * common/plugin_shim.c, compiled into it.
 * Pointers named *_host are host memory; every other array is device memory (cudaMalloc).
 * Every launcher returns GV_ERR_CUDA (after logging cudaGetErrorString) on a CUDA error and
 * synchronises before returning, so results are ready and errors are reported where they occur. */
#ifndef GV_COMPRESS_CUDA_H
#define GV_COMPRESS_CUDA_H

#include "gv_common.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gv_cuda_ws;

/* ---------------------------------------------------------------- the plugin interface */

/* Bumped whenever the table below or a launcher's signature changes. */
#define GV_CUDA_PLUGIN_ABI 2u

/* The launchers below, as the plugin's entry point (gv_plugin_entry, cuda/plugin.c) gives them
 * to the host. */
struct gv_cuda_api {
    struct gv_plugin_api_hdr hdr; /* GV_CUDA_PLUGIN_ABI, sizeof(struct gv_cuda_api) */
    gv_status_t (*device_count)(int *ndev_p);
    gv_status_t (*ws_create)(uint64_t max_n, uint32_t pos_cap, struct gv_cuda_ws **ws_p);
    void (*ws_destroy)(struct gv_cuda_ws *ws);
    gv_status_t (*malloc)(size_t bytes, void **ptr_p);
    void (*free)(void *ptr);
    gv_status_t (*d2h)(void *dst_host, const void *src, size_t bytes);
    gv_status_t (*h2d)(void *dst, const void *src_host, size_t bytes);
    gv_status_t (*d2d)(void *dst, const void *src, size_t bytes);
    gv_status_t (*zero)(void *ptr, size_t bytes);
    gv_status_t (*accumulate)(struct gv_cuda_ws *ws, float *r, const float *g, uint32_t n,
                              double *sumsq_p);
    gv_status_t (*sumsq)(struct gv_cuda_ws *ws, const float *x, uint32_t n, double *sumsq_p);
    gv_status_t (*ef_apply)(struct gv_cuda_ws *ws, float *r, const uint32_t *idx, const float *val,
                            uint32_t count);
    gv_status_t (*topk)(struct gv_cuda_ws *ws, const float *x, uint32_t n, uint32_t k,
                        const uint32_t *map, uint32_t *idx_out, float *val_out);
    gv_status_t (*count_ge)(struct gv_cuda_ws *ws, const float *x, uint32_t n, uint32_t key_min,
                            uint64_t *count_p);
    gv_status_t (*select_ge)(struct gv_cuda_ws *ws, const float *x, uint32_t n, uint32_t key_min,
                             const uint32_t *map, uint32_t cap, uint32_t *idx_out, float *val_out,
                             uint32_t *count_p);
    gv_status_t (*gather)(struct gv_cuda_ws *ws, const float *x, const uint32_t *pos_host,
                          uint32_t count, const uint32_t *map, uint32_t *idx_out, float *val_out);
    gv_status_t (*sample)(struct gv_cuda_ws *ws, const float *x, const uint32_t *pos_host,
                          uint32_t count, float *vals_host);
    gv_status_t (*abs_stats)(struct gv_cuda_ws *ws, const float *x, uint32_t n, double *sum_p,
                             float *max_p, uint64_t *nfinite_p);
    gv_status_t (*round_f16)(struct gv_cuda_ws *ws, float *val, uint32_t count);
    gv_status_t (*scatter_add)(struct gv_cuda_ws *ws, float *dense, uint32_t n, const uint32_t *idx,
                               const float *val, uint32_t count);
};

/* Host side (cuda_plugin.c): loads the plugin once (thread-safe) and gives its table. Looked
 * for in $GV_CUDA_PLUGIN_DIR (only there when set), next to the executable (/proc/self/exe),
 * in its ../lib/gravac, then in the build tree's bin/. GV_ERR_UNSUPPORTED when it cannot be
 * loaded or gravac was built without CUDA: logged as an error naming every place tried with
 * dlerror() (as information only when quiet, for probes). */
gv_status_t gv_cuda_plugin(int quiet, const struct gv_cuda_api **api_p);

/* ---------------------------------------------------------------- the launchers (plugin) */

/* GV_ERR_NODEV when the runtime reports no device (or no driver). */
gv_status_t gv_cuda_device_count(int *ndev_p);
/* Device workspace for tensors up to max_n entries and positions up to pos_cap. */
gv_status_t gv_cuda_ws_create(uint64_t max_n, uint32_t pos_cap, struct gv_cuda_ws **ws_p);
void gv_cuda_ws_destroy(struct gv_cuda_ws *ws);

gv_status_t gv_cuda_malloc(size_t bytes, void **ptr_p); /* zeroed */
void gv_cuda_free(void *ptr);
gv_status_t gv_cuda_d2h(void *dst_host, const void *src, size_t bytes);
gv_status_t gv_cuda_h2d(void *dst, const void *src_host, size_t bytes);
gv_status_t gv_cuda_d2d(void *dst, const void *src, size_t bytes);
gv_status_t gv_cuda_zero(void *ptr, size_t bytes);

/* r += g; *sumsq_p = sum of the new r^2 */
gv_status_t gv_cuda_accumulate(struct gv_cuda_ws *ws, float *r, const float *g, uint32_t n,
                               double *sumsq_p);
gv_status_t gv_cuda_sumsq(struct gv_cuda_ws *ws, const float *x, uint32_t n, double *sumsq_p);
/* r[idx[i]] -= val[i] (idx NULL: r[i]), non-finite results -> 0 */
gv_status_t gv_cuda_ef_apply(struct gv_cuda_ws *ws, float *r, const uint32_t *idx, const float *val,
                             uint32_t count);
/* Exact top-k with the CPU's order and tie rule; k entries, ascending index. map: NULL or
 * uint32[n] (output index = map[position]). */
gv_status_t gv_cuda_topk(struct gv_cuda_ws *ws, const float *x, uint32_t n, uint32_t k,
                         const uint32_t *map, uint32_t *idx_out, float *val_out);
gv_status_t gv_cuda_count_ge(struct gv_cuda_ws *ws, const float *x, uint32_t n, uint32_t key_min,
                             uint64_t *count_p);
/* All entries with key >= key_min, ascending index; GV_ERR_INVAL if more than cap. */
gv_status_t gv_cuda_select_ge(struct gv_cuda_ws *ws, const float *x, uint32_t n, uint32_t key_min,
                              const uint32_t *map, uint32_t cap, uint32_t *idx_out, float *val_out,
                              uint32_t *count_p);
gv_status_t gv_cuda_gather(struct gv_cuda_ws *ws, const float *x, const uint32_t *pos_host,
                           uint32_t count, const uint32_t *map, uint32_t *idx_out, float *val_out);
gv_status_t gv_cuda_sample(struct gv_cuda_ws *ws, const float *x, const uint32_t *pos_host,
                           uint32_t count, float *vals_host);
gv_status_t gv_cuda_abs_stats(struct gv_cuda_ws *ws, const float *x, uint32_t n, double *sum_p,
                              float *max_p, uint64_t *nfinite_p);
gv_status_t gv_cuda_round_f16(struct gv_cuda_ws *ws, float *val, uint32_t count);
/* Validates every index first (GV_ERR_INVAL, nothing added), then atomicAdd. */
gv_status_t gv_cuda_scatter_add(struct gv_cuda_ws *ws, float *dense, uint32_t n,
                                const uint32_t *idx, const float *val, uint32_t count);

#ifdef __cplusplus
}
#endif
#endif /* GV_COMPRESS_CUDA_H */
