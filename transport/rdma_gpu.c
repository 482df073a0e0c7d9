/* rdma_gpu.c: GPU memory support for the RDMA backend through the CUDA driver API, whose
 * library libcuda.so.1 is loaded by soname with common/'s gv_plugin_load only when asked for, so
 * that binaries built with CUDA still start (and fall back to "unavailable") on machines without
 * a driver. cuda.h provides the types only. Built when GV_HAVE_CUDA; rdma_gpu_stub.c otherwise. */
#include "rdma_gpu.h"

#include <cuda.h>
#include <string.h>
#include <unistd.h>

struct gv_rdma_gpu {
    struct gv_plugin lib;
    __typeof__(&cuInit) init;
    __typeof__(&cuDeviceGetCount) dev_count;
    __typeof__(&cuDeviceGet) dev_get;
    __typeof__(&cuDeviceGetAttribute) dev_attr;
    __typeof__(&cuMemGetHandleForAddressRange) range_handle;
    __typeof__(&cuMemGetAddressRange) addr_range;
    __typeof__(&cuPointerGetAttribute) ptr_attr;
    __typeof__(&cuCtxPushCurrent) ctx_push;
    __typeof__(&cuCtxPopCurrent) ctx_pop;
    __typeof__(&cuMemcpy) memcpy_;
    __typeof__(&cuMemHostAlloc) host_alloc;
    __typeof__(&cuMemFreeHost) host_free;
    __typeof__(&cuGetErrorString) err_str;
};

static const char *gpu_err(const struct gv_rdma_gpu *g, CUresult r)
{
    const char *s = NULL;
    if (g->err_str == NULL || g->err_str(r, &s) != CUDA_SUCCESS || s == NULL)
        return "unknown CUDA error";
    return s;
}

int gv_rdma_gpu_peermem_loaded(void)
{
    return access("/sys/module/nvidia_peermem", F_OK) == 0 ||
           access("/sys/module/nv_peer_mem", F_OK) == 0;
}

/* The driver, by soname, with the versioned symbol names behind the cuda.h macros (cuMemcpy is
 * not versioned); dma-buf export is optional (older drivers lack it). */
static int gpu_load(struct gv_rdma_gpu *g)
{
    const struct gv_plugin_sym syms[] = {
        {"cuInit", (void **)&g->init, 0},
        {"cuDeviceGetCount", (void **)&g->dev_count, 0},
        {"cuDeviceGet", (void **)&g->dev_get, 0},
        {"cuDeviceGetAttribute", (void **)&g->dev_attr, 0},
        {"cuMemGetHandleForAddressRange", (void **)&g->range_handle, 1},
        {"cuMemGetAddressRange_v2", (void **)&g->addr_range, 0},
        {"cuPointerGetAttribute", (void **)&g->ptr_attr, 0},
        {"cuCtxPushCurrent_v2", (void **)&g->ctx_push, 0},
        {"cuCtxPopCurrent_v2", (void **)&g->ctx_pop, 0},
        {"cuMemcpy", (void **)&g->memcpy_, 0},
        {"cuMemHostAlloc", (void **)&g->host_alloc, 0},
        {"cuMemFreeHost", (void **)&g->host_free, 0},
        {"cuGetErrorString", (void **)&g->err_str, 0},
    };
    const struct gv_plugin_spec spec = {
        .file = "libcuda.so.1", .system = 1, .syms = syms, .n_syms = GV_ARRAY_LEN(syms)};
    if (gv_plugin_load(&spec, &g->lib) != GV_OK) {
        gv_log(GV_LOG_DEBUG, "rdma gpu: no CUDA driver: %s", g->lib.why);
        return 0;
    }
    return 1;
}

void gv_rdma_gpu_open(struct gv_rdma_gpu **g_p, struct gv_rdma_gpu_facts *facts)
{
    memset(facts, 0, sizeof(*facts));
    *g_p = NULL;
    facts->peermem = gv_rdma_gpu_peermem_loaded();
    struct gv_rdma_gpu *g = gv_calloc(1, sizeof(*g));
    if (g == NULL)
        return;
    if (!gpu_load(g) || g->init(0) != CUDA_SUCCESS) {
        gv_rdma_gpu_close(g);
        return;
    }
    facts->cuda_driver = 1;
    int n = 0;
    if (g->dev_count(&n) == CUDA_SUCCESS)
        facts->cuda_devices = n;
    CUdevice dev;
    int v = 0;
    if (n > 0 && g->range_handle != NULL && g->dev_get(&dev, 0) == CUDA_SUCCESS &&
        g->dev_attr(&v, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev) == CUDA_SUCCESS)
        facts->dmabuf_attr = v != 0;
    *g_p = g;
}

void gv_rdma_gpu_close(struct gv_rdma_gpu *g)
{
    if (g == NULL)
        return;
    gv_plugin_close(&g->lib);
    gv_free(g);
}

/* Runs with the context that owns ptr current, as the caller's runtime may not have made any
 * context current on this thread. */
static gv_status_t gpu_push(struct gv_rdma_gpu *g, const void *ptr, int *pushed)
{
    CUcontext ctx = NULL;
    *pushed = 0;
    CUresult r = g->ptr_attr(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)(uintptr_t)ptr);
    if (r != CUDA_SUCCESS) {
        gv_log(GV_LOG_ERROR, "rdma gpu: %p is not CUDA memory: %s", ptr, gpu_err(g, r));
        return GV_ERR_CUDA;
    }
    if (ctx != NULL && g->ctx_push(ctx) == CUDA_SUCCESS)
        *pushed = 1;
    return GV_OK;
}

static void gpu_pop(struct gv_rdma_gpu *g, int pushed)
{
    CUcontext ctx;
    if (pushed)
        g->ctx_pop(&ctx);
}

gv_status_t gv_rdma_gpu_dmabuf(struct gv_rdma_gpu *g, void *ptr, size_t len, int *fd_p,
                               uint64_t *offset_p)
{
    if (g == NULL || g->range_handle == NULL)
        return GV_ERR_UNSUPPORTED;
    int pushed;
    gv_status_t status = gpu_push(g, ptr, &pushed);
    if (status != GV_OK)
        return status;
    CUdeviceptr base = 0;
    size_t size = 0;
    CUresult r = g->addr_range(&base, &size, (CUdeviceptr)(uintptr_t)ptr);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    /* The export must be page-aligned; allocations start aligned, their size may not be. */
    size_t alen = (size + page - 1) / page * page;
    int fd = -1;
    if (r == CUDA_SUCCESS)
        r = g->range_handle(&fd, base, alen, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    gpu_pop(g, pushed);
    if (r != CUDA_SUCCESS) {
        gv_log(GV_LOG_ERROR, "rdma gpu: cannot export %zu bytes at %p as a dma-buf: %s", len, ptr,
               gpu_err(g, r));
        return GV_ERR_CUDA;
    }
    *fd_p = fd;
    *offset_p = (uint64_t)((uintptr_t)ptr - (uintptr_t)base);
    return GV_OK;
}

gv_status_t gv_rdma_gpu_copy(struct gv_rdma_gpu *g, void *dst, const void *src, size_t len,
                             int to_device)
{
    if (g == NULL)
        return GV_ERR_UNSUPPORTED;
    int pushed;
    gv_status_t status = gpu_push(g, to_device ? dst : src, &pushed);
    if (status != GV_OK)
        return status;
    /* Unified addressing: cuMemcpy takes host and device pointers alike. */
    CUresult r = g->memcpy_((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, len);
    gpu_pop(g, pushed);
    if (r != CUDA_SUCCESS) {
        gv_log(GV_LOG_ERROR, "rdma gpu: copy of %zu bytes %s failed: %s", len,
               to_device ? "to the device" : "from the device", gpu_err(g, r));
        return GV_ERR_CUDA;
    }
    return GV_OK;
}

gv_status_t gv_rdma_gpu_host_alloc(struct gv_rdma_gpu *g, const void *dev, size_t len, void **p)
{
    if (g == NULL)
        return GV_ERR_UNSUPPORTED;
    int pushed;
    gv_status_t status = gpu_push(g, dev, &pushed);
    if (status != GV_OK)
        return status;
    CUresult r = g->host_alloc(p, len, CU_MEMHOSTALLOC_PORTABLE);
    gpu_pop(g, pushed);
    if (r != CUDA_SUCCESS) {
        gv_log(GV_LOG_ERROR, "rdma gpu: cannot allocate %zu bytes of pinned memory: %s", len,
               gpu_err(g, r));
        return GV_ERR_NOMEM;
    }
    return GV_OK;
}

void gv_rdma_gpu_host_free(struct gv_rdma_gpu *g, void *p)
{
    if (g != NULL && p != NULL)
        g->host_free(p);
}
