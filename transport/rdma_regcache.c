/* rdma_regcache.c: the registration cache (address range -> registration, LRU with a byte and
 * an entry cap). A linked list in recency order: lookups find recent buffers in the first few
 * steps, and the list stays short because the caps bound it. No verbs here. */
#include "rdma_regcache.h"

#include <string.h>

void gv_rc_init(struct gv_rcache *rc, const struct gv_rc_ops *ops, void *ctx, uint64_t cap_bytes,
                uint32_t cap_entries, size_t page)
{
    memset(rc, 0, sizeof(*rc));
    rc->ops = ops;
    rc->ctx = ctx;
    rc->cap_bytes = cap_bytes;
    rc->cap_entries = cap_entries ? cap_entries : 1;
    rc->page = page ? page : 4096;
}

static void rc_unlink(struct gv_rcache *rc, struct gv_rc_entry *e)
{
    if (e->prev != NULL)
        e->prev->next = e->next;
    else
        rc->head = e->next;
    if (e->next != NULL)
        e->next->prev = e->prev;
    else
        rc->tail = e->prev;
    e->prev = e->next = NULL;
}

static void rc_push_front(struct gv_rcache *rc, struct gv_rc_entry *e)
{
    e->prev = NULL;
    e->next = rc->head;
    if (rc->head != NULL)
        rc->head->prev = e;
    rc->head = e;
    if (rc->tail == NULL)
        rc->tail = e;
}

static void rc_account(struct gv_rcache *rc, const struct gv_rc_entry *e, int sign)
{
    uint64_t len = e->end - e->start;
    if (sign > 0) {
        rc->st.entries++;
        if (!e->is_explicit) {
            rc->st.implicit_bytes += len;
            rc->st.implicit_entries++;
        } else if (e->mem == GV_MEM_DEVICE)
            rc->st.device_entries++;
    } else {
        rc->st.entries--;
        if (!e->is_explicit) {
            rc->st.implicit_bytes -= len;
            rc->st.implicit_entries--;
        } else if (e->mem == GV_MEM_DEVICE)
            rc->st.device_entries--;
    }
}

/* Unlinks, deregisters and frees e (which must be live and unused, or dead). */
static void rc_destroy_entry(struct gv_rcache *rc, struct gv_rc_entry *e)
{
    if (!e->dead) {
        rc_unlink(rc, e);
        rc_account(rc, e, -1);
    }
    rc->ops->dereg(rc->ctx, &e->mr);
    gv_free(e);
}

/* Evicts unused implicit entries from the cold end until the caps hold. */
static void rc_evict(struct gv_rcache *rc)
{
    struct gv_rc_entry *e = rc->tail;
    while (e != NULL &&
           (rc->st.implicit_bytes > rc->cap_bytes || rc->st.implicit_entries > rc->cap_entries)) {
        struct gv_rc_entry *prev = e->prev;
        if (!e->is_explicit && e->refs == 0) {
            rc->st.evictions++;
            rc_destroy_entry(rc, e);
        }
        e = prev;
    }
}

struct gv_rc_entry *gv_rc_peek(struct gv_rcache *rc, const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr;
    if (len == 0 || a + len < a)
        return NULL;
    for (struct gv_rc_entry *e = rc->head; e != NULL; e = e->next)
        if (e->start <= a && a + len <= e->end)
            return e;
    return NULL;
}

static gv_status_t rc_new_entry(struct gv_rcache *rc, uintptr_t start, uintptr_t end,
                                enum gv_mem mem, int is_explicit, struct gv_rc_entry **e_p)
{
    struct gv_rc_entry *e = gv_calloc(1, sizeof(*e));
    if (e == NULL)
        return GV_ERR_NOMEM;
    e->start = start;
    e->end = end;
    e->mem = mem;
    e->is_explicit = is_explicit;
    gv_status_t status = rc->ops->reg(rc->ctx, (void *)start, end - start, mem, &e->mr);
    if (status != GV_OK) {
        rc->st.reg_failures++;
        gv_free(e);
        return status;
    }
    rc_push_front(rc, e);
    rc_account(rc, e, +1);
    *e_p = e;
    return GV_OK;
}

gv_status_t gv_rc_get(struct gv_rcache *rc, const void *addr, size_t len, struct gv_rc_entry **e_p)
{
    uintptr_t a = (uintptr_t)addr;
    if (len == 0 || a + len < a)
        return GV_ERR_INVAL;
    struct gv_rc_entry *e = gv_rc_peek(rc, addr, len);
    if (e != NULL) {
        rc->st.hits++;
        rc_unlink(rc, e);
        rc_push_front(rc, e);
    } else {
        rc->st.misses++;
        uintptr_t mask = (uintptr_t)rc->page - 1;
        uintptr_t start = a & ~mask;
        uintptr_t end = (a + len + mask) & ~mask;
        if (end < a + len)
            return GV_ERR_INVAL;
        gv_status_t status = rc_new_entry(rc, start, end, GV_MEM_HOST, 0, &e);
        if (status != GV_OK)
            return status;
        e->refs++;
        rc_evict(rc); /* make room now, not at the next put */
        *e_p = e;
        return GV_OK;
    }
    e->refs++;
    *e_p = e;
    return GV_OK;
}

void gv_rc_put(struct gv_rcache *rc, struct gv_rc_entry *e)
{
    if (e == NULL)
        return;
    GV_ASSERT(e->refs > 0);
    e->refs--;
    if (e->refs == 0 && e->dead) {
        rc_destroy_entry(rc, e);
        return;
    }
    rc_evict(rc);
}

gv_status_t gv_rc_add_explicit(struct gv_rcache *rc, const struct gv_buf *buf,
                               struct gv_rc_entry **e_p)
{
    uintptr_t a = (uintptr_t)buf->ptr;
    if (buf->ptr == NULL || buf->len == 0 || a + buf->len < a)
        return GV_ERR_INVAL;
    return rc_new_entry(rc, a, a + buf->len, buf->mem, 1, e_p);
}

void gv_rc_remove(struct gv_rcache *rc, struct gv_rc_entry *e)
{
    if (e == NULL || e->dead)
        return;
    if (e->refs == 0) {
        rc_destroy_entry(rc, e);
        return;
    }
    /* In use by an operation in flight: hide it now, deregister on the last put. */
    rc_unlink(rc, e);
    rc_account(rc, e, -1);
    e->dead = 1;
}

void gv_rc_cleanup(struct gv_rcache *rc)
{
    while (rc->head != NULL)
        rc_destroy_entry(rc, rc->head);
    /* Dead entries still referenced belong to operations the transport is failing; their
     * owners call gv_rc_put before the transport frees them, so nothing is left here. */
}
