/* rdma_select.c: the RDMA backend's device-free decisions: GV_RDMA_* configuration, memlock,
 * no-device reasons, probing order, the GPU-memory mode and the auto|rdma|tcp choice. Built
 * with or without libibverbs; no verbs calls here. */
#include "rdma_proto.h"
#include "rdma_select.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>

/* ---------------------------------------------------------------- configuration */

static gv_status_t cfg_u64(gv_getenv_fn get, const char *name, uint64_t lo, uint64_t hi,
                           uint64_t *v, char *why, size_t n)
{
    const char *s = get(name);
    if (s == NULL || *s == '\0')
        return GV_OK;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 0);
    uint64_t mult = 1;
    if (end != NULL && end != s && (*end == 'k' || *end == 'K'))
        mult = 1024, end++;
    else if (end != NULL && end != s && (*end == 'm' || *end == 'M'))
        mult = 1024 * 1024, end++;
    else if (end != NULL && end != s && (*end == 'g' || *end == 'G'))
        mult = 1024ull * 1024 * 1024, end++;
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || x > hi / mult || x * mult < lo) {
        snprintf(why, n, "%s=%s: expected an integer in [%" PRIu64 ", %" PRIu64 "]", name, s, lo,
                 hi);
        return GV_ERR_INVAL;
    }
    *v = x * mult;
    return GV_OK;
}

static gv_status_t cfg_u32(gv_getenv_fn get, const char *name, uint32_t lo, uint32_t hi,
                           uint32_t *v, char *why, size_t n)
{
    uint64_t x = *v;
    gv_status_t status = cfg_u64(get, name, lo, hi, &x, why, n);
    if (status == GV_OK)
        *v = (uint32_t)x;
    return status;
}

static gv_status_t cfg_str(gv_getenv_fn get, const char *name, char *dst, size_t cap, char *why,
                           size_t n)
{
    const char *s = get(name);
    if (s == NULL || *s == '\0')
        return GV_OK;
    if (strlen(s) >= cap) {
        snprintf(why, n, "%s: value longer than %zu characters", name, cap - 1);
        return GV_ERR_INVAL;
    }
    snprintf(dst, cap, "%s", s);
    return GV_OK;
}

gv_status_t gv_rdma_cfg_load(struct gv_rdma_cfg *c, gv_getenv_fn get, char *why, size_t n)
{
    *c = (struct gv_rdma_cfg){.slot_size = 8192,
                              .rx_depth = 32,
                              .tx_slots = 32,
                              .sq_depth = 128,
                              .signal_every = 16,
                              .inline_bytes = 128,
                              .max_conns = 256,
                              .conns_per_chunk = 4,
                              .reg_cache_bytes = 1ull << 30,
                              .reg_cache_entries = 1024,
                              .gpu = "auto"};
    gv_status_t st = GV_OK;
    if (st == GV_OK)
        st = cfg_str(get, "GV_RDMA_DEVICE", c->device, sizeof(c->device), why, n);
    if (st == GV_OK)
        st = cfg_u32(get, "GV_RDMA_SLOT_BYTES", 512, 1u << 20, &c->slot_size, why, n);
    if (st == GV_OK)
        st = cfg_u32(get, "GV_RDMA_RX_DEPTH", 4, 4096, &c->rx_depth, why, n);
    if (st == GV_OK)
        st = cfg_u32(get, "GV_RDMA_TX_SLOTS", GV_RP_CTRL_SLOTS + 2, 4096, &c->tx_slots, why, n);
    if (st == GV_OK)
        st = cfg_u32(get, "GV_RDMA_SQ_DEPTH", 16, 16384, &c->sq_depth, why, n);
    if (st == GV_OK)
        st = cfg_u32(get, "GV_RDMA_SIGNAL_EVERY", 1, 16384, &c->signal_every, why, n);
    if (st == GV_OK)
        st = cfg_u32(get, "GV_RDMA_INLINE", 0, 4096, &c->inline_bytes, why, n);
    if (st == GV_OK)
        st = cfg_u32(get, "GV_RDMA_MAX_CONNS", 1, 32767, &c->max_conns, why, n);
    if (st == GV_OK)
        st = cfg_u32(get, "GV_RDMA_CONNS_PER_CHUNK", 1, 256, &c->conns_per_chunk, why, n);
    if (st == GV_OK)
        st =
            cfg_u64(get, "GV_RDMA_REG_CACHE_BYTES", 0, UINT64_MAX / 2, &c->reg_cache_bytes, why, n);
    if (st == GV_OK)
        st = cfg_u32(get, "GV_RDMA_REG_CACHE_ENTRIES", 1, 1u << 20, &c->reg_cache_entries, why, n);
    if (st == GV_OK)
        st = cfg_str(get, "GV_RDMA_GPU", c->gpu, sizeof(c->gpu), why, n);
    if (st != GV_OK)
        return st;
    if (c->signal_every > c->sq_depth) {
        snprintf(why, n, "GV_RDMA_SIGNAL_EVERY=%" PRIu32 " exceeds GV_RDMA_SQ_DEPTH=%" PRIu32,
                 c->signal_every, c->sq_depth);
        return GV_ERR_INVAL;
    }
    if (c->conns_per_chunk > c->max_conns)
        c->conns_per_chunk = c->max_conns;
    return GV_OK;
}

uint64_t gv_rdma_conn_bytes(const struct gv_rdma_cfg *c)
{
    return (uint64_t)(c->rx_depth + 1 + c->tx_slots) * c->slot_size;
}

uint64_t gv_rdma_pool_need(const struct gv_rdma_cfg *c)
{
    /* the first chunk of connection slots, and the shared CQ (64-byte entries, pinned too) */
    uint64_t cqe = (uint64_t)(c->sq_depth + c->rx_depth + 1) * c->max_conns;
    return gv_rdma_conn_bytes(c) * c->conns_per_chunk + cqe * 64;
}

/* ---------------------------------------------------------------- device checks */

gv_status_t gv_rdma_memlock_check(uint64_t need, uint64_t limit, int cap_ipc_lock, char *why,
                                  size_t n)
{
    if (cap_ipc_lock || limit == UINT64_MAX || limit >= need)
        return GV_OK;
    snprintf(why, n,
             "memlock limit too low: RLIMIT_MEMLOCK is %" PRIu64 " bytes (ulimit -l %" PRIu64
             "), the RDMA buffer pools need %" PRIu64 " bytes; raise it (ulimit -l unlimited, "
             "or docker --ulimit memlock=-1) or lower GV_RDMA_RX_DEPTH/GV_RDMA_TX_SLOTS/"
             "GV_RDMA_SLOT_BYTES",
             limit, limit / 1024, need);
    return GV_ERR_NOMEM;
}

void gv_rdma_memlock_read(uint64_t *limit_p, int *cap_p)
{
    struct rlimit rl;
    *limit_p = UINT64_MAX;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        *limit_p = (uint64_t)rl.rlim_cur;
    /* CAP_IPC_LOCK (bit 14 of CapEff) lifts the limit for registrations. */
    *cap_p = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return;
    char line[256];
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long long caps;
        if (sscanf(line, "CapEff: %llx", &caps) == 1) {
            *cap_p = (int)((caps >> 14) & 1);
            break;
        }
    }
    fclose(f);
}

void gv_rdma_nodev_reason(int err, char *why, size_t n)
{
    switch (err) {
    case ENOSYS:
        snprintf(why, n, "kernel has no RDMA support (ibv_get_device_list: %s)", strerror(err));
        break;
    case ENOPKG:
        snprintf(why, n,
                 "gravac was built without RDMA support (libibverbs-dev and "
                 "librdmacm-dev missing at build time)");
        break;
    case EPERM:
    case EACCES:
        snprintf(why, n, "no permission to open the RDMA devices (%s); check /dev/infiniband",
                 strerror(err));
        break;
    default: snprintf(why, n, "cannot list RDMA devices: %s", strerror(err)); break;
    }
}

gv_status_t gv_rdma_probe(const struct gv_rdma_probe_ops *ops, void *ctx, const char *host,
                          uint64_t need, char *dev, size_t devn, char *why, size_t n)
{
    int err = 0;
    int count = ops->count(ctx, &err);
    if (count < 0) {
        gv_rdma_nodev_reason(err, why, n);
        return GV_ERR_NODEV;
    }
    if (count == 0) {
        snprintf(why, n, "no RDMA device (ibv_get_device_list found none)");
        return GV_ERR_NODEV;
    }
    uint64_t limit;
    int cap;
    ops->memlock(ctx, &limit, &cap);
    gv_status_t status = gv_rdma_memlock_check(need, limit, cap, why, n);
    if (status != GV_OK)
        return status;
    return ops->route(ctx, host, dev, devn, why, n);
}

gv_status_t gv_tp_pick(const char *want, int rdma_built, gv_status_t probe, enum gv_tp_pick *pick_p)
{
    if (want == NULL || strcmp(want, "auto") == 0) {
        *pick_p = rdma_built && probe == GV_OK ? GV_TP_PICK_RDMA : GV_TP_PICK_TCP;
        return GV_OK;
    }
    if (strcmp(want, "tcp") == 0) {
        *pick_p = GV_TP_PICK_TCP;
        return GV_OK;
    }
    if (strcmp(want, "rdma") != 0)
        return GV_ERR_INVAL;
    if (!rdma_built)
        return GV_ERR_UNSUPPORTED;
    if (probe != GV_OK)
        return probe;
    *pick_p = GV_TP_PICK_RDMA;
    return GV_OK;
}

/* ---------------------------------------------------------------- GPU memory */

const char *gv_rdma_gpu_mode_str(enum gv_rdma_gpu_mode mode)
{
    switch (mode) {
    case GV_RDMA_GPU_DMABUF: return "dma-buf registration";
    case GV_RDMA_GPU_PEERMEM: return "peer-memory registration (nvidia_peermem)";
    case GV_RDMA_GPU_STAGED: return "staged through pinned host buffers";
    case GV_RDMA_GPU_NONE: break;
    }
    return "unavailable";
}

gv_status_t gv_rdma_gpu_choose(const struct gv_rdma_gpu_facts *f, const char *force,
                               enum gv_rdma_gpu_mode *mode_p, char *why, size_t n)
{
    int have_gpu = f->cuda_driver && f->cuda_devices > 0;
    int dmabuf = have_gpu && f->dmabuf_attr && f->verbs_dmabuf;
    int peer = have_gpu && f->peermem;
    if (force == NULL || *force == '\0' || strcasecmp(force, "auto") == 0) {
        *mode_p = dmabuf     ? GV_RDMA_GPU_DMABUF
                  : peer     ? GV_RDMA_GPU_PEERMEM
                  : have_gpu ? GV_RDMA_GPU_STAGED
                             : GV_RDMA_GPU_NONE;
        if (!have_gpu)
            snprintf(why, n, "%s", f->cuda_driver ? "no CUDA device" : "no CUDA driver");
        else if (*mode_p == GV_RDMA_GPU_STAGED)
            snprintf(why, n, "%s",
                     !f->dmabuf_attr    ? "the GPU does not export dma-bufs"
                     : !f->verbs_dmabuf ? "the RDMA provider lacks dma-buf"
                                        : "no peer-memory module");
        else
            snprintf(why, n, "supported");
        return GV_OK;
    }
    if (strcasecmp(force, "off") == 0) {
        *mode_p = GV_RDMA_GPU_NONE;
        snprintf(why, n, "GV_RDMA_GPU=off");
        return GV_OK;
    }
    struct {
        const char *name;
        int ok;
        enum gv_rdma_gpu_mode mode;
        const char *missing;
    } opts[] = {
        {"dmabuf", dmabuf, GV_RDMA_GPU_DMABUF,
         "needs a CUDA device exporting dma-bufs and a "
         "verbs provider with ibv_reg_dmabuf_mr"},
        {"peermem", peer, GV_RDMA_GPU_PEERMEM,
         "needs a CUDA device and the nvidia_peermem "
         "module"},
        {"staged", have_gpu, GV_RDMA_GPU_STAGED, "needs a CUDA driver and device"},
    };
    for (size_t i = 0; i < GV_ARRAY_LEN(opts); i++) {
        if (strcasecmp(force, opts[i].name) != 0)
            continue;
        if (!opts[i].ok) {
            snprintf(why, n, "GV_RDMA_GPU=%s %s", opts[i].name, opts[i].missing);
            return GV_ERR_UNSUPPORTED;
        }
        *mode_p = opts[i].mode;
        snprintf(why, n, "GV_RDMA_GPU=%s", opts[i].name);
        return GV_OK;
    }
    snprintf(why, n, "GV_RDMA_GPU=%s: expected auto, dmabuf, peermem, staged or off", force);
    return GV_ERR_INVAL;
}

/* ---------------------------------------------------------------- creation by name */

static const char *sel_getenv(const char *name)
{
    return getenv(name);
}

gv_status_t gv_tp_create_auto(const char *want, const char *host, const struct gv_tp_config *cfg,
                              const struct gv_tp_handler *h, void *user, struct gv_tp **tp_p)
{
    int is_auto = want == NULL || strcmp(want, "auto") == 0;
    if (!is_auto && strcmp(want, "rdma") != 0 && strcmp(want, "tcp") != 0) {
        gv_log(GV_LOG_ERROR, "transport: unknown transport '%s' (auto, rdma or tcp)", want);
        return GV_ERR_INVAL;
    }
    char dev[64] = "", why[512] = "";
    gv_status_t probe = GV_ERR_UNSUPPORTED;
    if (strcmp(want ? want : "auto", "tcp") != 0) {
        struct gv_rdma_cfg rc;
        probe = gv_rdma_cfg_load(&rc, sel_getenv, why, sizeof(why));
        if (probe == GV_OK)
            probe = gv_rdma_probe(&gv_rdma_probe_sys, NULL, host, gv_rdma_pool_need(&rc), dev,
                                  sizeof(dev), why, sizeof(why));
    }
    enum gv_tp_pick pick;
    gv_status_t status = gv_tp_pick(want, gv_rdma_built(), probe, &pick);
    if (status != GV_OK) {
        gv_log(GV_LOG_ERROR, "transport: rdma unavailable: %s", why);
        return status;
    }
    if (pick == GV_TP_PICK_RDMA) {
        status = gv_rdma_create_on(dev, cfg, h, user, tp_p, why, sizeof(why));
        if (status == GV_OK || status == GV_ERR_INVAL)
            return status; /* INVAL: the caller's arguments, logged where checked */
        if (!is_auto) {
            gv_log(GV_LOG_ERROR, "transport: rdma unavailable: %s", why);
            return status;
        }
    }
    if (is_auto)
        gv_log(GV_LOG_WARN, "transport: using tcp: rdma unavailable: %s", why);
    return gv_tp_create("tcp", cfg, h, user, tp_p);
}
