/* buf.c: buffers tagged with their memory kind. Host memory is allocated here; pinned and
 * device memory through ops a CUDA-aware module installs (common/ links no CUDA). */
#include "gv_common.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static const struct gv_mem_ops *mem_ops[3];

const char *gv_mem_str(enum gv_mem mem)
{
    switch (mem) {
    case GV_MEM_HOST: return "host";
    case GV_MEM_PINNED: return "pinned";
    case GV_MEM_DEVICE: return "device";
    }
    return "unknown";
}

void gv_mem_set_ops(enum gv_mem mem, const struct gv_mem_ops *ops)
{
    if ((unsigned)mem >= GV_ARRAY_LEN(mem_ops) || mem == GV_MEM_HOST)
        return;
    pthread_mutex_lock(&mem_mu);
    mem_ops[mem] = ops;
    pthread_mutex_unlock(&mem_mu);
}

static const struct gv_mem_ops *buf_ops(enum gv_mem mem)
{
    pthread_mutex_lock(&mem_mu);
    const struct gv_mem_ops *ops = mem_ops[mem];
    pthread_mutex_unlock(&mem_mu);
    return ops;
}

gv_status_t gv_buf_alloc(struct gv_buf *buf, size_t len, enum gv_mem mem)
{
    memset(buf, 0, sizeof(*buf));
    if ((unsigned)mem > GV_MEM_DEVICE)
        return GV_ERR_INVAL;
    void *p = NULL;
    if (mem == GV_MEM_HOST) {
        long page = sysconf(_SC_PAGESIZE);
        /* RDMA registration wants page-aligned memory; round up so the tail is ours too. */
        size_t pg = page > 0 ? (size_t)page : 4096;
        size_t rounded = (len + pg - 1) / pg * pg;
        p = gv_aligned_alloc(pg, rounded ? rounded : pg);
        if (p == NULL) {
            gv_log(GV_LOG_ERROR, "cannot allocate %zu bytes of host memory", len);
            return GV_ERR_NOMEM;
        }
        memset(p, 0, rounded);
    } else {
        const struct gv_mem_ops *ops = buf_ops(mem);
        if (ops == NULL)
            return GV_ERR_UNSUPPORTED;
        gv_status_t status = ops->alloc(len, &p);
        if (status != GV_OK)
            return status;
    }
    buf->ptr = p;
    buf->len = len;
    buf->mem = mem;
    return GV_OK;
}

void gv_buf_free(struct gv_buf *buf)
{
    if (buf == NULL || buf->ptr == NULL)
        return;
    if (buf->mem == GV_MEM_HOST) {
        gv_free(buf->ptr);
    } else {
        const struct gv_mem_ops *ops = buf_ops(buf->mem);
        if (ops != NULL)
            ops->free(buf->ptr);
    }
    memset(buf, 0, sizeof(*buf));
}
