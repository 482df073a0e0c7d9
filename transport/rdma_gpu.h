/* rdma_gpu.h (private): what the RDMA backend needs from CUDA to move GPU memory: the facts
 * that choose the mode (dma-buf, peer memory, staging), a dma-buf fd for a device range,
 * copies between device and host, and pinned host memory for staging shadows. rdma_gpu.c
 * loads the CUDA driver on demand with common/'s gv_plugin_load (binaries start on machines
 * without it) when built with CUDA; rdma_gpu_stub.c stands in otherwise. Nothing here touches
 * verbs. */
#ifndef GV_RDMA_GPU_H
#define GV_RDMA_GPU_H

#include "rdma_select.h"

#include <stddef.h>
#include <stdint.h>

struct gv_rdma_gpu;

/* Loads and initialises the CUDA driver and fills the facts it can tell (cuda_driver,
 * cuda_devices, dmabuf_attr, peermem; not verbs_dmabuf). *g_p is NULL without a driver. */
void gv_rdma_gpu_open(struct gv_rdma_gpu **g_p, struct gv_rdma_gpu_facts *facts);
void gv_rdma_gpu_close(struct gv_rdma_gpu *g);

/* A dma-buf fd covering the device allocation that holds [ptr, ptr+len): *fd_p (the caller
 * closes it after registering) spans the page-rounded allocation; *offset_p is ptr's offset
 * in it. GV_ERR_CUDA with the driver's message logged on failure. */
gv_status_t gv_rdma_gpu_dmabuf(struct gv_rdma_gpu *g, void *ptr, size_t len, int *fd_p,
                               uint64_t *offset_p);
/* Synchronous copy; dir GV_RP_D2H / GV_RP_H2D as in rdma_proto.h (0 = D2H, 1 = H2D). */
gv_status_t gv_rdma_gpu_copy(struct gv_rdma_gpu *g, void *dst, const void *src, size_t len,
                             int to_device);
/* Page-locked host memory for the staging shadow of device buffer dev (whose context is
 * made current for the allocation). */
gv_status_t gv_rdma_gpu_host_alloc(struct gv_rdma_gpu *g, const void *dev, size_t len, void **p);
void gv_rdma_gpu_host_free(struct gv_rdma_gpu *g, void *p);

/* 1 when the nvidia_peermem (or legacy nv_peer_mem) kernel module is loaded. */
int gv_rdma_gpu_peermem_loaded(void);

#endif /* GV_RDMA_GPU_H */
