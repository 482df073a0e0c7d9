/* rdma_gpu_stub.c: GPU memory support for builds without CUDA: there is never a driver, so
 * the RDMA backend runs with GPU mode "unavailable" and refuses GV_MEM_DEVICE buffers. */
#include "rdma_gpu.h"

#include <string.h>

void gv_rdma_gpu_open(struct gv_rdma_gpu **g_p, struct gv_rdma_gpu_facts *facts)
{
    *g_p = NULL;
    memset(facts, 0, sizeof(*facts));
}

void gv_rdma_gpu_close(struct gv_rdma_gpu *g)
{
    (void)g;
}

gv_status_t gv_rdma_gpu_dmabuf(struct gv_rdma_gpu *g, void *ptr, size_t len, int *fd_p,
                               uint64_t *offset_p)
{
    (void)g, (void)ptr, (void)len, (void)fd_p, (void)offset_p;
    return GV_ERR_UNSUPPORTED;
}

gv_status_t gv_rdma_gpu_copy(struct gv_rdma_gpu *g, void *dst, const void *src, size_t len,
                             int to_device)
{
    (void)g, (void)dst, (void)src, (void)len, (void)to_device;
    return GV_ERR_UNSUPPORTED;
}

gv_status_t gv_rdma_gpu_host_alloc(struct gv_rdma_gpu *g, const void *dev, size_t len, void **p)
{
    (void)g, (void)dev, (void)len, (void)p;
    return GV_ERR_UNSUPPORTED;
}

void gv_rdma_gpu_host_free(struct gv_rdma_gpu *g, void *p)
{
    (void)g, (void)p;
}

int gv_rdma_gpu_peermem_loaded(void)
{
    return 0;
}
