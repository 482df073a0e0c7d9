/* rdma_select.h (private): the RDMA backend's decisions that need no device, kept apart from
 * the verbs calls so that tests exercise them here: configuration from GV_RDMA_* variables,
 * the memlock check, the reason texts for a missing device, the GPU-memory mode, and the
 * auto|rdma|tcp choice behind gv_tp_create_auto (device probing behind function pointers). */
#ifndef GV_RDMA_SELECT_H
#define GV_RDMA_SELECT_H

#include "gv_transport.h"

#include <stddef.h>
#include <stdint.h>

/* RDMA-specific knobs, read once at create from the environment (defaults in brackets). */
struct gv_rdma_cfg {
    char device[64];            /* GV_RDMA_DEVICE: verbs device name ["": first active] */
    uint32_t slot_size;         /* GV_RDMA_SLOT_BYTES: eager limit incl. 24-byte header [8192] */
    uint32_t rx_depth;          /* GV_RDMA_RX_DEPTH: receive credits per connection [32] */
    uint32_t tx_slots;          /* GV_RDMA_TX_SLOTS: send bounce slots per connection [32] */
    uint32_t sq_depth;          /* GV_RDMA_SQ_DEPTH: send-queue WRs per QP [128] */
    uint32_t signal_every;      /* GV_RDMA_SIGNAL_EVERY: completion every Nth WR [16] */
    uint32_t inline_bytes;      /* GV_RDMA_INLINE: max_inline_data requested [128] */
    uint32_t max_conns;         /* GV_RDMA_MAX_CONNS: connections per transport [256] */
    uint32_t conns_per_chunk;   /* GV_RDMA_CONNS_PER_CHUNK: pool growth step [4] */
    uint64_t reg_cache_bytes;   /* GV_RDMA_REG_CACHE_BYTES: implicit registrations [1 GiB] */
    uint32_t reg_cache_entries; /* GV_RDMA_REG_CACHE_ENTRIES [1024] */
    char gpu[16];               /* GV_RDMA_GPU: auto|dmabuf|peermem|staged|off [auto] */
};

typedef const char *(*gv_getenv_fn)(const char *name);
/* Defaults, then overrides from get (getenv in the transport, a table in tests). A malformed
 * or out-of-range value is GV_ERR_INVAL with why naming the variable. */
gv_status_t gv_rdma_cfg_load(struct gv_rdma_cfg *c, gv_getenv_fn get, char *why, size_t n);
/* Bytes of registered memory one connection's slots take, and what a new transport pins at
 * once (the first pool chunk and the CQ): the memlock check compares the limit with it. */
uint64_t gv_rdma_conn_bytes(const struct gv_rdma_cfg *c);
uint64_t gv_rdma_pool_need(const struct gv_rdma_cfg *c);

/* RLIMIT_MEMLOCK check: limit UINT64_MAX means unlimited; cap_ipc_lock: the process may lock
 * memory regardless (CAP_IPC_LOCK). GV_ERR_NOMEM with a message giving both numbers. */
gv_status_t gv_rdma_memlock_check(uint64_t need, uint64_t limit, int cap_ipc_lock, char *why,
                                  size_t n);
/* Reads this process's limit and CAP_IPC_LOCK. */
void gv_rdma_memlock_read(uint64_t *limit_p, int *cap_p);

/* Why the device list came back NULL (errno err): ENOSYS means the kernel has no RDMA. */
void gv_rdma_nodev_reason(int err, char *why, size_t n);

/* Device probing, as gv_tp_create_auto and the rdma backend's create see it. */
struct gv_rdma_probe_ops {
    /* Number of RDMA devices (>= 0), or -1 with *err_p set to errno. */
    int (*count)(void *ctx, int *err_p);
    /* GV_OK when host is reachable through an RDMA device (host NULL, "" or a wildcard: any
     * device will do), with the device's name; GV_ERR_NODEV and why otherwise. */
    gv_status_t (*route)(void *ctx, const char *host, char *dev, size_t devn, char *why, size_t n);
    void (*memlock)(void *ctx, uint64_t *limit_p, int *cap_p);
};
/* Runs the checks in order: devices, memlock (need bytes), route. GV_OK with dev filled, or
 * GV_ERR_NODEV / GV_ERR_NOMEM with why. Logs nothing. */
gv_status_t gv_rdma_probe(const struct gv_rdma_probe_ops *ops, void *ctx, const char *host,
                          uint64_t need, char *dev, size_t devn, char *why, size_t n);
/* The real probe (verbs and rdma_cm), or one that says the backend is not built. */
extern const struct gv_rdma_probe_ops gv_rdma_probe_sys;
int gv_rdma_built(void);

/* The transport choice. want: "auto" (or NULL), "rdma", "tcp". auto takes RDMA when it is
 * built and the probe passed, else TCP; rdma fails with the probe's status (or
 * GV_ERR_UNSUPPORTED when not built); anything else is GV_ERR_INVAL. */
enum gv_tp_pick { GV_TP_PICK_RDMA, GV_TP_PICK_TCP };
gv_status_t gv_tp_pick(const char *want, int rdma_built, gv_status_t probe,
                       enum gv_tp_pick *pick_p);

/* ---- GPU memory ---- */
enum gv_rdma_gpu_mode {
    GV_RDMA_GPU_NONE = 0, /* no CUDA driver or device: GV_MEM_DEVICE buffers are refused */
    GV_RDMA_GPU_DMABUF,   /* ibv_reg_dmabuf_mr on a dma-buf fd exported by CUDA */
    GV_RDMA_GPU_PEERMEM,  /* ibv_reg_mr on device pointers (nvidia_peermem loaded) */
    GV_RDMA_GPU_STAGED,   /* copied through pinned host buffers */
};
struct gv_rdma_gpu_facts {
    int cuda_driver;  /* libcuda loaded and initialised */
    int cuda_devices; /* devices it reports */
    int dmabuf_attr;  /* CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED on device 0 */
    int verbs_dmabuf; /* the verbs provider implements ibv_reg_dmabuf_mr */
    int peermem;      /* the nvidia_peermem (or nv_peer_mem) module is loaded */
};
/* force: "auto" (or NULL) picks dma-buf, then peer memory, then staging; "dmabuf",
 * "peermem", "staged" insist (GV_ERR_UNSUPPORTED with why when impossible); "off" = NONE. */
gv_status_t gv_rdma_gpu_choose(const struct gv_rdma_gpu_facts *f, const char *force,
                               enum gv_rdma_gpu_mode *mode_p, char *why, size_t n);
const char *gv_rdma_gpu_mode_str(enum gv_rdma_gpu_mode mode);

/* ---- transport creation (gv_tp_create_auto is declared in gv_transport.h) ---- */

/* The rdma backend's create on a given device (NULL/"": GV_RDMA_DEVICE or the first active
 * one). Fills why instead of logging for the expected failures (no device, memlock). */
gv_status_t gv_rdma_create_on(const char *dev, const struct gv_tp_config *cfg,
                              const struct gv_tp_handler *h, void *user, struct gv_tp **tp_p,
                              char *why, size_t n);

#endif /* GV_RDMA_SELECT_H */
