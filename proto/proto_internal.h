/* proto_internal.h: what the proto/ files share (the arena as a protobuf-c allocator, the
 * default caps, validation). Not part of the public interface. */
#ifndef GV_PROTO_INTERNAL_H
#define GV_PROTO_INTERNAL_H

#include "gv_proto.h"

/* caps, or the defaults written into *storage when caps is NULL. */
const struct gv_proto_caps *proto_caps_or_default(const struct gv_proto_caps *caps,
                                                  struct gv_proto_caps *storage);

/* ProtobufCAllocator callbacks; allocator_data is a struct gv_proto_arena. alloc returns
 * NULL (and sets arena->overflow) when the arena is exhausted; free does nothing. */
void *proto_arena_alloc(void *allocator_data, size_t size);
void proto_arena_free(void *allocator_data, void *ptr);
/* size rounded up to the arena's alignment */
size_t proto_arena_round(size_t size);

/* Who validates: the decoder refuses peer input (GV_ERR_PROTO, a warning), the encoder
 * refuses a caller's bug (GV_ERR_INVAL, an error). */
struct proto_vctx {
    const struct gv_proto_caps *caps;
    gv_status_t bad;
    enum gv_log_level level;
    const char *what; /* "bad header" / "cannot encode" */
    int type;         /* for the log line */
};

/* Logs "proto: <what> (<type>): <why>" at c->level and returns c->bad. */
gv_status_t proto_fail(const struct proto_vctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Known, non-NONE message type. */
bool proto_type_known(int type);

/* Every check on a header except its payload length against the prefix (the caller compares
 * *sum_p, the segments' byte total, which is <= max_payload_len). Logs the violation. */
gv_status_t proto_validate(const struct proto_vctx *c, const struct gv_proto_msg *m,
                           uint64_t *sum_p);

#endif /* GV_PROTO_INTERNAL_H */
