/* rdma_stub.c: the RDMA backend when gravac is built without libibverbs/librdmacm: nothing to
 * probe, and creating one says why. gv_tp_create_auto then always picks TCP. */
#include "rdma_select.h"

#include <errno.h>
#include <stdio.h>

static int stub_count(void *ctx, int *err_p)
{
    (void)ctx;
    *err_p = ENOPKG; /* "built without RDMA support" in gv_rdma_nodev_reason */
    return -1;
}

static gv_status_t stub_route(void *ctx, const char *host, char *dev, size_t devn, char *why,
                              size_t n)
{
    (void)ctx, (void)host, (void)dev, (void)devn;
    snprintf(why, n, "built without RDMA support");
    return GV_ERR_UNSUPPORTED;
}

static void stub_memlock(void *ctx, uint64_t *limit_p, int *cap_p)
{
    (void)ctx;
    *limit_p = UINT64_MAX;
    *cap_p = 0;
}

const struct gv_rdma_probe_ops gv_rdma_probe_sys = {stub_count, stub_route, stub_memlock};

int gv_rdma_built(void)
{
    return 0;
}

gv_status_t gv_rdma_create_on(const char *dev, const struct gv_tp_config *cfg,
                              const struct gv_tp_handler *h, void *user, struct gv_tp **tp_p,
                              char *why, size_t n)
{
    (void)dev, (void)cfg, (void)h, (void)user, (void)tp_p;
    snprintf(why, n,
             "gravac was built without RDMA support (libibverbs-dev and librdmacm-dev "
             "were not found at build time)");
    return GV_ERR_UNSUPPORTED;
}
