/* backend.c: picks a backend at run time. The backends themselves live one per file
 * (backend_cpu.c; backend_cuda.cu, reached through the plugin loader backend_cuda_plugin.c). */
#include "nn_internal.h"

#include <string.h>

gv_status_t gv_nn_device_parse(const char *s, enum gv_nn_device *dev_p)
{
    if (s != NULL && strcmp(s, "cpu") == 0) {
        *dev_p = GV_NN_CPU;
        return GV_OK;
    }
    if (s != NULL && (strcmp(s, "cuda") == 0 || strcmp(s, "gpu") == 0)) {
        *dev_p = GV_NN_CUDA;
        return GV_OK;
    }
    return GV_ERR_INVAL;
}

gv_status_t gv_nn_backend_create(enum gv_nn_device dev, int threads, struct gv_nn_backend **be_p)
{
    switch (dev) {
    case GV_NN_CPU: return gv_nn_cpu_create(threads, be_p);
    case GV_NN_CUDA: return gv_nn_cuda_create(be_p);
    }
    return GV_ERR_INVAL;
}

void gv_nn_backend_destroy(struct gv_nn_backend *be)
{
    if (be == NULL)
        return;
    if (be->ops->mem == GV_MEM_DEVICE)
        gv_nn_cuda_destroy(be);
    else
        gv_free(be);
}

const char *gv_nn_backend_name(const struct gv_nn_backend *be)
{
    return be->ops->name;
}

enum gv_mem gv_nn_backend_mem(const struct gv_nn_backend *be)
{
    return be->ops->mem;
}

gv_status_t gv_nn_backend_download(struct gv_nn_backend *be, void *host, const void *src,
                                   size_t bytes)
{
    return bytes > 0 ? be->ops->download(be, host, src, bytes) : GV_OK;
}

gv_status_t gv_nn_backend_upload(struct gv_nn_backend *be, void *dst, const void *host,
                                 size_t bytes)
{
    return bytes > 0 ? be->ops->upload(be, dst, host, bytes) : GV_OK;
}
