/* frame.c: the fixed 24-byte prefix (packed byte by byte, little-endian, no struct casts),
 * the caps, and the decode arena. The protobuf header lives in header.c; nothing here
 * allocates. */
#include "gv_proto.h"
#include "proto_internal.h"

#include <string.h>

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void gv_proto_prefix_write(const struct gv_proto_prefix *p, void *out)
{
    unsigned char *b = out;
    put_le(b + 0, p->magic, 4);
    put_le(b + 4, p->version, 2);
    put_le(b + 6, p->flags, 2);
    put_le(b + 8, p->hdr_len, 4);
    put_le(b + 12, p->reserved, 4);
    put_le(b + 16, p->payload_len, 8);
}

void gv_proto_prefix_read(const void *in, struct gv_proto_prefix *p)
{
    const unsigned char *b = in;
    p->magic = (uint32_t)get_le(b + 0, 4);
    p->version = (uint16_t)get_le(b + 4, 2);
    p->flags = (uint16_t)get_le(b + 6, 2);
    p->hdr_len = (uint32_t)get_le(b + 8, 4);
    p->reserved = (uint32_t)get_le(b + 12, 4);
    p->payload_len = get_le(b + 16, 8);
}

/* ---------------------------------------------------------------- caps */

void gv_proto_caps_default(struct gv_proto_caps *caps)
{
    caps->max_hdr_len = 64u << 10;
    caps->max_payload_len = 2ull << 30;
    caps->max_segments = GV_PROTO_MAX_SEGMENTS;
    caps->max_numel = INT32_MAX;
    caps->max_bytes_field = 64;
    caps->max_text_len = 256;
    caps->max_layers = 4096;
}

gv_status_t gv_proto_caps_check(const struct gv_proto_caps *caps)
{
    if (caps->max_hdr_len == 0 || caps->max_payload_len == 0 || caps->max_segments == 0 ||
        caps->max_numel == 0 || caps->max_bytes_field == 0 || caps->max_text_len == 0 ||
        caps->max_layers == 0) {
        gv_log(GV_LOG_ERROR, "proto: caps: every cap must be > 0");
        return GV_ERR_INVAL;
    }
    if (caps->max_segments > GV_PROTO_MAX_SEGMENTS) {
        gv_log(GV_LOG_ERROR, "proto: caps: max_segments %u above the limit %d", caps->max_segments,
               GV_PROTO_MAX_SEGMENTS);
        return GV_ERR_INVAL;
    }
    return GV_OK;
}

const struct gv_proto_caps *proto_caps_or_default(const struct gv_proto_caps *caps,
                                                  struct gv_proto_caps *storage)
{
    if (caps != NULL)
        return caps;
    gv_proto_caps_default(storage);
    return storage;
}

gv_status_t gv_proto_parse_prefix(const void *prefix, const struct gv_proto_caps *caps,
                                  uint32_t *hdr_len_p, uint64_t *payload_len_p)
{
    struct gv_proto_caps defcaps;
    struct gv_proto_prefix p;

    caps = proto_caps_or_default(caps, &defcaps);
    gv_proto_prefix_read(prefix, &p);
    if (p.magic != GV_PROTO_MAGIC) {
        gv_log(GV_LOG_WARN, "proto: bad magic 0x%08x (want 0x%08x): not a gravac peer", p.magic,
               GV_PROTO_MAGIC);
        return GV_ERR_PROTO;
    }
    /* Checked before the other fields: another version may define them differently. */
    if (p.version != GV_PROTO_VERSION) {
        gv_log(GV_LOG_ERROR, "proto: peer speaks wire version %u, this build speaks %u", p.version,
               GV_PROTO_VERSION);
        return GV_ERR_VERSION;
    }
    if (p.reserved != 0) {
        gv_log(GV_LOG_WARN, "proto: reserved prefix field is 0x%08x, must be 0", p.reserved);
        return GV_ERR_PROTO;
    }
    if ((p.flags & ~GV_PROTO_FLAGS_KNOWN) != 0) {
        gv_log(GV_LOG_WARN, "proto: unknown prefix flags 0x%04x", p.flags);
        return GV_ERR_PROTO;
    }
    if (p.hdr_len == 0) {
        gv_log(GV_LOG_WARN, "proto: hdr_len 0: every frame has a header");
        return GV_ERR_PROTO;
    }
    if (p.hdr_len > caps->max_hdr_len) {
        gv_log(GV_LOG_WARN, "proto: hdr_len %u above cap max_hdr_len %u", p.hdr_len,
               caps->max_hdr_len);
        return GV_ERR_PROTO;
    }
    if (p.payload_len > caps->max_payload_len) {
        gv_log(GV_LOG_WARN, "proto: payload_len %llu above cap max_payload_len %llu",
               (unsigned long long)p.payload_len, (unsigned long long)caps->max_payload_len);
        return GV_ERR_PROTO;
    }
    *hdr_len_p = p.hdr_len;
    *payload_len_p = p.payload_len;
    return GV_OK;
}

/* ---------------------------------------------------------------- arena */

#define ARENA_ALIGN 16u /* enough for every protobuf-c message field */

void gv_proto_arena_init(struct gv_proto_arena *arena, void *buf, size_t len)
{
    uintptr_t start = (uintptr_t)buf;
    uintptr_t aligned = (start + (ARENA_ALIGN - 1)) & ~(uintptr_t)(ARENA_ALIGN - 1);
    size_t lost = (size_t)(aligned - start);

    memset(arena, 0, sizeof(*arena));
    if (buf == NULL || len <= lost)
        return; /* an empty arena: every decode overflows */
    arena->base = (unsigned char *)aligned;
    arena->cap = (len - lost) & ~(size_t)(ARENA_ALIGN - 1);
}

void gv_proto_arena_reset(struct gv_proto_arena *arena)
{
    arena->used = 0;
    arena->overflow = false;
}

void *proto_arena_alloc(void *allocator_data, size_t size)
{
    struct gv_proto_arena *arena = allocator_data;
    size_t need = (size + (ARENA_ALIGN - 1)) & ~(size_t)(ARENA_ALIGN - 1);

    if (need < size || need > arena->cap - arena->used) {
        arena->overflow = true;
        return NULL;
    }
    void *p = arena->base + arena->used;
    arena->used += need;
    if (arena->used > arena->peak)
        arena->peak = arena->used;
    return p;
}

void proto_arena_free(void *allocator_data, void *ptr)
{
    /* Bump allocator: memory comes back all at once on reset. */
    (void)allocator_data;
    (void)ptr;
}

size_t proto_arena_round(size_t size)
{
    return (size + (ARENA_ALIGN - 1)) & ~(size_t)(ARENA_ALIGN - 1);
}
