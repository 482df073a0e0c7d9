/* rdma_regcache.h (private): the memory-registration cache of the RDMA transport. It maps
 * address ranges to registrations (an ibv_mr in the real transport, anything in tests) and
 * keeps the least recently used unpinned ones under a byte cap. The registration itself sits
 * behind function pointers, so this file links no verbs and is unit-tested without a device.
 *
 * Two kinds of entries:
 *   explicit  made by gv_tp_mem_reg (a struct gv_buf with its memory kind); never evicted,
 *             removed by gv_tp_mem_dereg. The only way the transport learns that a range is
 *             device memory.
 *   implicit  made on a miss for a buffer the user passed to send or on_header without
 *             registering it; page-rounded; evicted LRU-first once the implicit entries
 *             exceed the byte or entry cap and nobody is using them (refs == 0).
 * Caveat of every registration cache: an implicit entry pins the pages it was made for. A
 * buffer that is freed and whose address range is handed out again by a later allocation
 * would hit the stale entry; docs/rdma.md tells users to register long-lived buffers with
 * gv_tp_mem_reg (or set GV_RDMA_REG_CACHE_BYTES=0 to register per use). */
#ifndef GV_RDMA_REGCACHE_H
#define GV_RDMA_REGCACHE_H

#include "gv_common.h"

#include <stddef.h>
#include <stdint.h>

/* One registration as the backend made it. */
struct gv_rc_mr {
    void *handle;  /* backend object (struct ibv_mr *), opaque here */
    uint32_t lkey; /* local key for SGEs */
    uint32_t rkey; /* remote key advertised in CTS */
    void *shadow;  /* staged device memory: the pinned host copy (same length); else NULL */
};

struct gv_rc_ops {
    /* Registers [addr, addr+len) of memory kind mem for local and remote write access; fills
     * *mr on success. Called with the already page-rounded range for implicit entries. */
    gv_status_t (*reg)(void *ctx, void *addr, size_t len, enum gv_mem mem, struct gv_rc_mr *mr);
    void (*dereg)(void *ctx, struct gv_rc_mr *mr);
};

struct gv_rc_entry {
    uintptr_t start, end; /* registered range [start, end) */
    enum gv_mem mem;
    int is_explicit; /* from gv_tp_mem_reg: never evicted */
    int dead;        /* removed from lookups; deregistered when refs drop to 0 */
    uint32_t refs;   /* in-flight operations using this entry */
    struct gv_rc_mr mr;
    struct gv_rc_entry *prev, *next; /* LRU list, most recent first */
};

struct gv_rc_stats {
    uint64_t hits, misses, evictions, reg_failures;
    uint64_t implicit_bytes; /* bytes held by live implicit entries */
    uint32_t entries;        /* live entries (explicit + implicit) */
    uint32_t implicit_entries;
    uint32_t device_entries; /* live explicit entries of GV_MEM_DEVICE memory */
};

struct gv_rcache {
    const struct gv_rc_ops *ops;
    void *ctx;
    size_t page;
    uint64_t cap_bytes;   /* implicit entries above this are evicted (0: register per use) */
    uint32_t cap_entries; /* implicit entries above this many are evicted too */
    struct gv_rc_entry *head, *tail;
    struct gv_rc_stats st;
};

/* cap_bytes == 0 disables caching of implicit entries: each is deregistered on its last put.
 * page is the registration granularity (the system page size). */
void gv_rc_init(struct gv_rcache *rc, const struct gv_rc_ops *ops, void *ctx, uint64_t cap_bytes,
                uint32_t cap_entries, size_t page);
/* Deregisters every entry, in use or not (the transport is going away). */
void gv_rc_cleanup(struct gv_rcache *rc);

/* The entry covering [addr, addr+len) with refs taken, registering an implicit host entry on a
 * miss. GV_ERR_INVAL for len == 0 or a range that wraps; the backend's status when the
 * registration fails (logged there). Release with gv_rc_put. */
gv_status_t gv_rc_get(struct gv_rcache *rc, const void *addr, size_t len, struct gv_rc_entry **e_p);
/* Drops one reference; evicts as the caps require. NULL is fine. */
void gv_rc_put(struct gv_rcache *rc, struct gv_rc_entry *e);

/* Covering entry without taking a reference or registering; NULL on a miss. Does not count as
 * a hit or touch the LRU order. */
struct gv_rc_entry *gv_rc_peek(struct gv_rcache *rc, const void *addr, size_t len);

/* Registers buf as an explicit entry (exact range, buf->mem); *e_p is stored in buf->mr by the
 * transport. GV_ERR_INVAL for an empty buffer. */
gv_status_t gv_rc_add_explicit(struct gv_rcache *rc, const struct gv_buf *buf,
                               struct gv_rc_entry **e_p);
/* Removes an explicit entry; deregistered now, or on its last gv_rc_put when in use. */
void gv_rc_remove(struct gv_rcache *rc, struct gv_rc_entry *e);

/* Address of addr inside the entry as the NIC sees it: addr itself, or its place in the
 * pinned shadow for staged device memory. */
static inline void *gv_rc_xlate(const struct gv_rc_entry *e, const void *addr)
{
    if (e->mr.shadow == NULL)
        return (void *)(uintptr_t)addr;
    return (char *)e->mr.shadow + ((uintptr_t)addr - e->start);
}

#endif /* GV_RDMA_REGCACHE_H */
