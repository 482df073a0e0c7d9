/* backend_cuda_stub.c: built when the CUDA toolkit is absent (GV_HAVE_CUDA OFF), so callers can
 * ask for the GPU backend without #ifdef and get GV_ERR_UNSUPPORTED. */
#include "nn_internal.h"

gv_status_t gv_nn_cuda_create(struct gv_nn_backend **be_p)
{
    (void)be_p;
    gv_log(GV_LOG_ERROR, "nn: the cuda backend is not built in (no CUDA toolkit at build time)");
    return GV_ERR_UNSUPPORTED;
}

void gv_nn_cuda_destroy(struct gv_nn_backend *be)
{
    (void)be;
}
