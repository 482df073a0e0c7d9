/* rdma_dev.c: the RDMA device side of one transport: choosing and opening the device, its PD,
 * completion channel and CQ; the slot pool (page-aligned chunks registered once, carved into
 * per-connection blocks); the registration callbacks behind the registration cache, including
 * GPU memory (dma-buf, peer memory, or a pinned staging shadow). Connections and the data
 * path are in rdma.c and rdma_cm.c. */
#include "rdma.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static size_t dev_page(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

/* ibv_reg_mr failed with errno err for len bytes: say why, with the memlock numbers when the
 * kernel refused to pin (the most common RDMA set-up problem). */
static void dev_reg_error(const char *what, size_t len, int err)
{
    if (err == ENOMEM || err == EAGAIN || err == EPERM) {
        uint64_t limit;
        int cap;
        gv_rdma_memlock_read(&limit, &cap);
        char lim[32];
        if (limit == UINT64_MAX)
            snprintf(lim, sizeof(lim), "unlimited");
        else
            snprintf(lim, sizeof(lim), "%" PRIu64 " bytes", limit);
        gv_log(GV_LOG_ERROR,
               "rdma: cannot register %zu bytes of %s: %s (RLIMIT_MEMLOCK %s%s; raise it with "
               "ulimit -l unlimited)",
               len, what, strerror(err), lim, cap ? ", CAP_IPC_LOCK held" : "");
    } else if (err == EFAULT) {
        gv_log(GV_LOG_ERROR,
               "rdma: cannot register %zu bytes of %s: %s (not host memory? register GPU "
               "buffers with gv_tp_mem_reg as GV_MEM_DEVICE)",
               len, what, strerror(err));
    } else {
        gv_log(GV_LOG_ERROR, "rdma: cannot register %zu bytes of %s: %s", len, what, strerror(err));
    }
}

/* ---------------------------------------------------------------- pool */

static gv_status_t pool_grow(struct rdma_tp *tp)
{
    struct rdma_pool *p = &tp->pool;
    if (p->nchunks == p->max_chunks) {
        gv_log(GV_LOG_ERROR, "rdma: connection limit reached (GV_RDMA_MAX_CONNS=%" PRIu32 ")",
               tp->rc_cfg.max_conns);
        return GV_ERR_AGAIN;
    }
    struct rdma_chunk *ch = &p->chunks[p->nchunks];
    ch->len = p->block_bytes * p->per_chunk;
    ch->mem = gv_aligned_alloc(dev_page(), ch->len);
    if (ch->mem == NULL)
        return GV_ERR_NOMEM;
    memset(ch->mem, 0, ch->len);
    ch->mr = ibv_reg_mr(tp->pd, ch->mem, ch->len, IBV_ACCESS_LOCAL_WRITE);
    if (ch->mr == NULL) {
        dev_reg_error("connection buffers", ch->len, errno);
        gv_free(ch->mem);
        ch->mem = NULL;
        return GV_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < p->per_chunk; i++)
        p->free[p->nfree++] =
            (struct rdma_block){(char *)ch->mem + (size_t)i * p->block_bytes, ch->mr->lkey};
    p->nchunks++;
    return GV_OK;
}

gv_status_t gv_rdma_pool_get(struct rdma_tp *tp, struct rdma_block *b)
{
    if (tp->pool.nfree == 0) {
        gv_status_t status = pool_grow(tp);
        if (status != GV_OK)
            return status;
    }
    *b = tp->pool.free[--tp->pool.nfree];
    return GV_OK;
}

void gv_rdma_pool_put(struct rdma_tp *tp, const struct rdma_block *b)
{
    if (b->mem != NULL)
        tp->pool.free[tp->pool.nfree++] = *b;
}

static gv_status_t pool_init(struct rdma_tp *tp)
{
    struct rdma_pool *p = &tp->pool;
    size_t page = dev_page();
    p->block_bytes = (gv_rdma_conn_bytes(&tp->rc_cfg) + page - 1) / page * page;
    p->per_chunk = tp->rc_cfg.conns_per_chunk;
    p->max_chunks = (tp->rc_cfg.max_conns + p->per_chunk - 1) / p->per_chunk;
    p->chunks = gv_calloc(p->max_chunks, sizeof(*p->chunks));
    p->free = gv_calloc((size_t)p->max_chunks * p->per_chunk, sizeof(*p->free));
    if (p->chunks == NULL || p->free == NULL)
        return GV_ERR_NOMEM;
    return pool_grow(tp); /* the first chunk now: a low memlock limit shows at create */
}

static void pool_cleanup(struct rdma_tp *tp)
{
    struct rdma_pool *p = &tp->pool;
    for (uint32_t i = 0; i < p->nchunks; i++) {
        ibv_dereg_mr(p->chunks[i].mr);
        gv_free(p->chunks[i].mem);
    }
    gv_free(p->chunks);
    gv_free(p->free);
    memset(p, 0, sizeof(*p));
}

/* ---------------------------------------------------------------- registration */

#define DEV_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

static gv_status_t dev_reg_device(struct rdma_tp *tp, void *addr, size_t len, struct gv_rc_mr *mr)
{
    struct ibv_mr *m = NULL;
    switch (tp->gpu_mode) {
    case GV_RDMA_GPU_DMABUF: {
        int fd;
        uint64_t off;
        gv_status_t status = gv_rdma_gpu_dmabuf(tp->gpu, addr, len, &fd, &off);
        if (status != GV_OK)
            return status;
        /* iova = the device address, so SGEs and CTS elements use device pointers. */
        m = ibv_reg_dmabuf_mr(tp->pd, off, len, (uint64_t)(uintptr_t)addr, fd, DEV_ACCESS);
        int err = errno;
        close(fd);
        if (m == NULL) {
            dev_reg_error("GPU memory (dma-buf)", len, err);
            return GV_ERR_IO;
        }
        break;
    }
    case GV_RDMA_GPU_PEERMEM:
        m = ibv_reg_mr(tp->pd, addr, len, DEV_ACCESS);
        if (m == NULL) {
            dev_reg_error("GPU memory (peer memory)", len, errno);
            return GV_ERR_IO;
        }
        break;
    case GV_RDMA_GPU_STAGED: {
        gv_status_t status = gv_rdma_gpu_host_alloc(tp->gpu, addr, len, &mr->shadow);
        if (status != GV_OK)
            return status;
        m = ibv_reg_mr(tp->pd, mr->shadow, len, DEV_ACCESS);
        if (m == NULL) {
            dev_reg_error("pinned staging memory", len, errno);
            gv_rdma_gpu_host_free(tp->gpu, mr->shadow);
            mr->shadow = NULL;
            return GV_ERR_NOMEM;
        }
        break;
    }
    case GV_RDMA_GPU_NONE:
        gv_log(GV_LOG_ERROR,
               "rdma: cannot register %zu bytes of GPU memory: no GPU support "
               "(gpu memory: unavailable)",
               len);
        return GV_ERR_UNSUPPORTED;
    }
    mr->handle = m;
    mr->lkey = m->lkey;
    mr->rkey = m->rkey;
    return GV_OK;
}

static gv_status_t dev_reg(void *ctx, void *addr, size_t len, enum gv_mem mem, struct gv_rc_mr *mr)
{
    struct rdma_tp *tp = ctx;
    memset(mr, 0, sizeof(*mr));
    if (mem == GV_MEM_DEVICE)
        return dev_reg_device(tp, addr, len, mr);
    struct ibv_mr *m = ibv_reg_mr(tp->pd, addr, len, DEV_ACCESS);
    if (m == NULL) {
        int err = errno;
        dev_reg_error(mem == GV_MEM_PINNED ? "pinned memory" : "host memory", len, err);
        return err == ENOMEM || err == EAGAIN ? GV_ERR_NOMEM : GV_ERR_IO;
    }
    mr->handle = m;
    mr->lkey = m->lkey;
    mr->rkey = m->rkey;
    return GV_OK;
}

static void dev_dereg(void *ctx, struct gv_rc_mr *mr)
{
    struct rdma_tp *tp = ctx;
    if (mr->handle != NULL)
        ibv_dereg_mr(mr->handle);
    if (mr->shadow != NULL)
        gv_rdma_gpu_host_free(tp->gpu, mr->shadow);
    memset(mr, 0, sizeof(*mr));
}

const struct gv_rc_ops gv_rdma_rc_ops = {dev_reg, dev_dereg};

/* ---------------------------------------------------------------- device */

static int dev_port_active(struct ibv_context *ctx)
{
    struct ibv_device_attr a;
    if (ibv_query_device(ctx, &a) != 0)
        return 0;
    for (uint8_t port = 1; port <= a.phys_port_cnt; port++) {
        struct ibv_port_attr pa;
        if (ibv_query_port(ctx, port, &pa) == 0 && pa.state == IBV_PORT_ACTIVE)
            return 1;
    }
    return 0;
}

static gv_status_t dev_pick(struct rdma_tp *tp, const char *want, char *why, size_t n)
{
    int num = 0;
    errno = 0;
    tp->devs = rdma_get_devices(&num);
    if (tp->devs == NULL || num <= 0) {
        int err = errno ? errno : ENODEV;
        if (err == ENODEV)
            snprintf(why, n, "no RDMA device (rdma_get_devices found none)");
        else
            gv_rdma_nodev_reason(err, why, n);
        return GV_ERR_NODEV;
    }
    for (int i = 0; i < num && tp->ctx == NULL; i++) {
        const char *name = ibv_get_device_name(tp->devs[i]->device);
        if (want != NULL && *want != '\0' ? strcmp(name, want) == 0 : dev_port_active(tp->devs[i]))
            tp->ctx = tp->devs[i];
    }
    if (tp->ctx == NULL && (want == NULL || *want == '\0'))
        tp->ctx = tp->devs[0]; /* none active: the first, so errors name a device */
    if (tp->ctx == NULL) {
        snprintf(why, n, "RDMA device '%s' not found (GV_RDMA_DEVICE)", want);
        return GV_ERR_NODEV;
    }
    snprintf(tp->devname, sizeof(tp->devname), "%s", ibv_get_device_name(tp->ctx->device));
    if (ibv_query_device(tp->ctx, &tp->dattr) != 0) {
        snprintf(why, n, "%s: ibv_query_device: %s", tp->devname, strerror(errno));
        return GV_ERR_NODEV;
    }
    return GV_OK;
}

/* Fits the queue sizes to what the device allows and sizes the shared CQ. */
static int dev_fit(struct rdma_tp *tp)
{
    struct gv_rdma_cfg *c = &tp->rc_cfg;
    uint32_t max_wr = (uint32_t)GV_MAX(tp->dattr.max_qp_wr, 16);
    c->sq_depth = GV_MIN(c->sq_depth, max_wr);
    c->rx_depth = GV_MIN(c->rx_depth, max_wr - 1);
    c->signal_every = GV_MIN(c->signal_every, c->sq_depth);
    uint32_t per_conn = c->sq_depth + c->rx_depth + 1;
    uint32_t max_cqe = (uint32_t)GV_MAX(tp->dattr.max_cqe, (int)per_conn);
    if ((uint64_t)per_conn * c->max_conns > max_cqe) {
        c->max_conns = max_cqe / per_conn;
        gv_log(GV_LOG_INFO, "rdma: %s: CQ limit allows %" PRIu32 " connections", tp->devname,
               c->max_conns);
    }
    c->conns_per_chunk = GV_MIN(c->conns_per_chunk, c->max_conns);
    return (int)(per_conn * c->max_conns);
}

/* Whether the verbs provider implements dma-buf registration: with fd -1 a provider that has
 * it fails on the fd (EBADF), one that lacks it with EOPNOTSUPP. */
static int dev_has_dmabuf(struct rdma_tp *tp)
{
    errno = 0;
    struct ibv_mr *m = ibv_reg_dmabuf_mr(tp->pd, 0, dev_page(), 0, -1, IBV_ACCESS_LOCAL_WRITE);
    if (m != NULL) {
        ibv_dereg_mr(m);
        return 1;
    }
    return errno != EOPNOTSUPP && errno != ENOSYS;
}

static gv_status_t dev_gpu_init(struct rdma_tp *tp, char *why, size_t n)
{
    struct gv_rdma_gpu_facts f;
    gv_rdma_gpu_open(&tp->gpu, &f);
    if (f.cuda_driver && f.cuda_devices > 0)
        f.verbs_dmabuf = dev_has_dmabuf(tp);
    char reason[160];
    gv_status_t status =
        gv_rdma_gpu_choose(&f, tp->rc_cfg.gpu, &tp->gpu_mode, reason, sizeof(reason));
    if (status != GV_OK) {
        snprintf(why, n, "%s", reason);
        return status;
    }
    gv_log(GV_LOG_INFO, "rdma: gpu memory: %s (%s)", gv_rdma_gpu_mode_str(tp->gpu_mode), reason);
    return GV_OK;
}

static int dev_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0;
}

gv_status_t gv_rdma_dev_open(struct rdma_tp *tp, const char *want_dev, char *why, size_t n)
{
    gv_status_t status = dev_pick(tp, want_dev, why, n);
    if (status != GV_OK)
        return status;
    int cqe = dev_fit(tp);
    tp->pd = ibv_alloc_pd(tp->ctx);
    if (tp->pd == NULL) {
        snprintf(why, n, "%s: ibv_alloc_pd: %s", tp->devname, strerror(errno));
        return GV_ERR_NODEV;
    }
    tp->cc = ibv_create_comp_channel(tp->ctx);
    if (tp->cc == NULL || !dev_nonblock(tp->cc->fd)) {
        snprintf(why, n, "%s: completion channel: %s", tp->devname, strerror(errno));
        return GV_ERR_NODEV;
    }
    tp->cq = ibv_create_cq(tp->ctx, cqe, tp, tp->cc, 0);
    if (tp->cq == NULL || ibv_req_notify_cq(tp->cq, 0) != 0) {
        snprintf(why, n, "%s: cannot create a %d-entry CQ: %s", tp->devname, cqe, strerror(errno));
        return GV_ERR_NODEV;
    }
    status = dev_gpu_init(tp, why, n);
    if (status != GV_OK)
        return status;
    status = pool_init(tp);
    if (status != GV_OK) {
        snprintf(why, n, "%s: cannot register the connection buffer pool (%zu bytes)", tp->devname,
                 tp->pool.block_bytes * tp->pool.per_chunk);
        return status;
    }
    gv_rc_init(&tp->rc, &gv_rdma_rc_ops, tp, tp->rc_cfg.reg_cache_bytes,
               tp->rc_cfg.reg_cache_entries, dev_page());
    return GV_OK;
}

/* Safe on a half-opened device: every step checks what exists. */
void gv_rdma_dev_close(struct rdma_tp *tp)
{
    if (tp->rc.ops != NULL)
        gv_rc_cleanup(&tp->rc);
    pool_cleanup(tp);
    if (tp->cq != NULL) {
        if (tp->cq_unacked > 0)
            ibv_ack_cq_events(tp->cq, tp->cq_unacked);
        ibv_destroy_cq(tp->cq);
    }
    if (tp->cc != NULL)
        ibv_destroy_comp_channel(tp->cc);
    if (tp->pd != NULL)
        ibv_dealloc_pd(tp->pd);
    gv_rdma_gpu_close(tp->gpu);
    if (tp->devs != NULL)
        rdma_free_devices(tp->devs);
    tp->cq = NULL;
    tp->cc = NULL;
    tp->pd = NULL;
    tp->gpu = NULL;
    tp->devs = NULL;
    tp->ctx = NULL;
}
