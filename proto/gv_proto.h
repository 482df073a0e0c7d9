/* gv_proto.h: the gravac wire format. A frame is
 *     prefix (24 bytes) | header (hdr_len bytes, protobuf-c) | payload (payload_len bytes)
 * The prefix is fixed binary; the header is one protobuf message (proto/gravac.proto) that
 * this module converts to and from plain C structs (struct gv_proto_msg); the payload is raw
 * segments (indices, values) that the header only describes, so senders pass them as their
 * own iov entries and receivers scatter them straight into their own buffers.
 * Every length is checked against struct gv_proto_caps, and decoding allocates only from a
 * caller-provided fixed arena, never from the heap. docs/wire-format.md has the byte layout.
 * Does not do I/O and does not interpret the payload bytes (compress/ owns the encodings).
 * Threading: no global state; a gv_proto_arena belongs to one thread at a time. */
#ifndef GV_PROTO_H
#define GV_PROTO_H

#include "gv_common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- prefix */

#define GV_PROTO_MAGIC 0x43565247u /* bytes "GRVC" on the wire (little-endian u32) */
#define GV_PROTO_VERSION 4         /* bump on any change to the prefix or gravac.proto */
#define GV_PROTO_PREFIX_LEN 24
#define GV_PROTO_FLAGS_KNOWN 0u /* no flag bits are defined (versions 1 and 2) */

/* The prefix as numbers. On the wire, little-endian, packed byte by byte:
 *   off 0 magic u32 | 4 version u16 | 6 flags u16 | 8 hdr_len u32 | 12 reserved u32 (0)
 *   | 16 payload_len u64 */
struct gv_proto_prefix {
    uint32_t magic;
    uint16_t version;
    uint16_t flags;
    uint32_t hdr_len;     /* header bytes after the prefix */
    uint32_t reserved;    /* must be 0 */
    uint64_t payload_len; /* payload bytes after the header (sum of the segments) */
};

/* Raw byte-level packing, no validation (tests and tools use it to craft frames).
 * out/in: GV_PROTO_PREFIX_LEN bytes, borrowed, any alignment. */
void gv_proto_prefix_write(const struct gv_proto_prefix *p, void *out);
void gv_proto_prefix_read(const void *in, struct gv_proto_prefix *p);

/* ---------------------------------------------------------------- caps */

#define GV_PROTO_MAX_SEGMENTS 16 /* capacity of gv_proto_msg.segs; caps.max_segments <= this */

/* Limits applied to every frame, in both directions. Zero is never "unlimited". */
struct gv_proto_caps {
    uint32_t max_hdr_len;     /* header bytes after the prefix (64 KiB) */
    uint64_t max_payload_len; /* payload bytes (2 GiB) */
    uint32_t max_segments;    /* payload segments per frame (16) */
    uint64_t max_numel;       /* numel, nnz, segment element counts (2^31 - 1) */
    uint32_t max_bytes_field; /* nonce, mac (64) */
    uint32_t max_text_len;    /* cluster id, refuse and error text, in bytes (256) */
    uint32_t max_layers;      /* per-layer norms in the statistics (4096) */
};
void gv_proto_caps_default(struct gv_proto_caps *caps);
/* GV_ERR_INVAL (logged) when a cap is 0 or max_segments > GV_PROTO_MAX_SEGMENTS. */
gv_status_t gv_proto_caps_check(const struct gv_proto_caps *caps);

/* Checks a received prefix (GV_PROTO_PREFIX_LEN bytes, borrowed) and returns the lengths of
 * the header and payload that follow. This is what a transport parse_prefix callback calls.
 * caps: borrowed, NULL for the defaults. Errors (each logged once, with the cause):
 *   GV_ERR_PROTO    wrong magic, reserved != 0, unknown flag bits, hdr_len == 0,
 *                   hdr_len > max_hdr_len or payload_len > max_payload_len (the log names
 *                   the field, its value and the cap)
 *   GV_ERR_VERSION  version != GV_PROTO_VERSION ("peer speaks wire version 2, this build
 *                   speaks 1")
 * The out-params are written only on success. */
gv_status_t gv_proto_parse_prefix(const void *prefix, const struct gv_proto_caps *caps,
                                  uint32_t *hdr_len_p, uint64_t *payload_len_p);
/* The same checks, silent: the reason goes to why[why_len] instead of the log, for callers
 * that rate-limit their logging (anyone can send garbage in a loop) or name the peer. */
gv_status_t gv_proto_prefix_check(const void *prefix, const struct gv_proto_caps *caps,
                                  uint32_t *hdr_len_p, uint64_t *payload_len_p, char *why,
                                  size_t why_len);

/* ---------------------------------------------------------------- decode arena */

/* A bump allocator over a caller buffer: header decoding allocates only from here, so a
 * decode never touches the heap and a hostile header can at worst exhaust the arena (which
 * gives GV_ERR_PROTO). Every decode resets it, so decoded pointers (strings, bytes, layer
 * norms) are valid until the next decode with the same arena. */
struct gv_proto_arena {
    unsigned char *base; /* borrowed, 16-byte aligned start inside the caller's buffer */
    size_t cap;
    size_t used;
    size_t peak;   /* high-water mark over the arena's life, to size it */
    bool overflow; /* the last decode ran out of arena */
};
/* buf: borrowed for the arena's life; len: bytes (a few are lost to alignment). */
void gv_proto_arena_init(struct gv_proto_arena *arena, void *buf, size_t len);
void gv_proto_arena_reset(struct gv_proto_arena *arena);
/* Arena bytes that always suffice to decode a header this module's encoder produced within
 * caps (any valid message at the caps' limits). Non-canonical encodings may need more and
 * then fail with GV_ERR_PROTO. */
size_t gv_proto_arena_bound(const struct gv_proto_caps *caps);

/* ---------------------------------------------------------------- messages */

/* Values equal those of gravac.proto. */
enum gv_proto_msg_type {
    GV_PROTO_MSG_NONE = 0, /* never valid on the wire */
    GV_PROTO_MSG_HELLO = 1,
    GV_PROTO_MSG_CHALLENGE = 2,
    GV_PROTO_MSG_AUTH = 3,
    GV_PROTO_MSG_WELCOME = 4,
    GV_PROTO_MSG_REFUSE = 5,
    GV_PROTO_MSG_MODEL = 6,
    GV_PROTO_MSG_PUSH = 7,
    GV_PROTO_MSG_UPDATE = 8,
    GV_PROTO_MSG_DECISION = 9,
    GV_PROTO_MSG_STATS = 10,
    GV_PROTO_MSG_HEARTBEAT = 11,
    GV_PROTO_MSG_BYE = 12,
    GV_PROTO_MSG_ERROR = 13,
    GV_PROTO_MSG_LAYOUT = 14, /* one RAW segment: the model's layout (ps/'s gv_layout) */
};
#define GV_PROTO_MSG_COUNT 15

enum gv_proto_role {
    GV_PROTO_ROLE_NONE = 0,
    GV_PROTO_ROLE_WORKER = 1,
    GV_PROTO_ROLE_SERVER = 2,
    GV_PROTO_ROLE_CLIENT = 3,
};

enum gv_proto_dtype {
    GV_PROTO_DTYPE_NONE = 0,
    GV_PROTO_DTYPE_F32 = 1,
    GV_PROTO_DTYPE_F16 = 2,
    GV_PROTO_DTYPE_BF16 = 3,
};

/* What a worker sends (GraVAC): candidate CF, floor CF (theta_min) or dense. */
enum gv_proto_level {
    GV_PROTO_LEVEL_NONE = 0,
    GV_PROTO_LEVEL_CANDIDATE = 1,
    GV_PROTO_LEVEL_FLOOR = 2,
    GV_PROTO_LEVEL_DENSE = 3,
};

enum gv_proto_seg_kind {
    GV_PROTO_SEG_NONE = 0,
    GV_PROTO_SEG_INDICES = 1, /* encodings U32, DELTA_VARINT, BITMAP; count = nnz */
    GV_PROTO_SEG_VALUES = 2,  /* encodings F32, F16; count = nnz */
    GV_PROTO_SEG_DENSE = 3,   /* encodings F32, F16; count = numel */
    GV_PROTO_SEG_RAW = 4,     /* encoding BYTES */
};

/* Byte length of a segment of count elements (numel: the header's numel):
 * U32 4*count, F32 4*count, F16 2*count, BYTES count, BITMAP ceil(numel/8),
 * DELTA_VARINT between count and 5*count (LEB128 of u32 gaps). */
enum gv_proto_enc {
    GV_PROTO_ENC_NONE = 0,
    GV_PROTO_ENC_U32 = 1,
    GV_PROTO_ENC_DELTA_VARINT = 2,
    GV_PROTO_ENC_BITMAP = 3,
    GV_PROTO_ENC_F32 = 4,
    GV_PROTO_ENC_F16 = 5,
    GV_PROTO_ENC_BYTES = 6,
};

enum gv_proto_refuse {
    GV_PROTO_REFUSE_NONE = 0,
    GV_PROTO_REFUSE_VERSION = 1,
    GV_PROTO_REFUSE_AUTH = 2,
    GV_PROTO_REFUSE_CLUSTER = 3,
    GV_PROTO_REFUSE_FULL = 4,
    GV_PROTO_REFUSE_MODEL = 5,
    GV_PROTO_REFUSE_ROLE = 6,
    GV_PROTO_REFUSE_OTHER = 7,
};

/* HELLO feature bits (advisory: peers use the intersection, WELCOME.features). */
#define GV_PROTO_FEAT_F16 (1ull << 0)          /* F16 value segments */
#define GV_PROTO_FEAT_DELTA_VARINT (1ull << 1) /* DELTA_VARINT index segments */
#define GV_PROTO_FEAT_BITMAP (1ull << 2)       /* BITMAP index segments */
#define GV_PROTO_FEAT_RDMA (1ull << 3)         /* can switch to the RDMA transport */
#define GV_PROTO_FEAT_AUTH (1ull << 4)         /* CHALLENGE/AUTH handshake */

/* Small byte strings (nonce, mac). On decode they point into the arena. */
struct gv_proto_bytes {
    const uint8_t *data; /* borrowed; may be NULL when len == 0 */
    size_t len;
};

struct gv_proto_seg {
    enum gv_proto_seg_kind kind;
    enum gv_proto_enc enc;
    uint64_t count; /* elements */
    uint64_t bytes; /* bytes on the wire */
};

/* Per-iteration statistics (PUSH: one worker; STATS: summed over a server's workers). */
struct gv_proto_iter_stats {
    double g_ef_sq;  /* ||g + residual||^2 */
    double g_min_sq; /* ||compressed at theta_min||^2 */
    double g_c_sq;   /* ||compressed at the candidate CF||^2 */
    double compute_s, compress_s, comm_s;
    double pause_s; /* not training since the sender's previous push (an evaluation) */
    uint64_t samples;
    double loss;
    double lr; /* the sender's own optimizer's learning rate (0: none given) */
    uint32_t n_layer_norms;
    const double *layer_norms; /* double[n_layer_norms], borrowed (decode: in the arena) */
    uint64_t ckpt_iter;        /* checkpoint report: its iteration (0: none)... */
    int32_t ckpt_status;       /* ...and whether the sender's part was written (a gv_status_t) */
};

/* GraVAC controller output for the next iteration. CFs: 0 = not set, else finite >= 1. */
struct gv_proto_decision {
    enum gv_proto_level level;
    double theta_min;    /* floor compression factor */
    double cf_candidate; /* candidate compression factor being explored */
    double cf_send;      /* compression factor to send with */
    double lr;           /* learning rate, finite >= 0 */
    bool resync;         /* the worker must resync its model (dense MODEL) */
    uint64_t ckpt_iter;  /* checkpoint verdict: its iteration (0: none)... */
    int32_t ckpt_status; /* ...committed (0) or not (a gv_status_t) */
};

struct gv_proto_hello {
    uint32_t num_workers, num_servers;
    uint64_t features;           /* GV_PROTO_FEAT_* */
    struct gv_proto_bytes nonce; /* client nonce, <= max_bytes_field */
    const char *cluster_id;      /* NUL-terminated, <= max_text_len; NULL = "" on encode */
};
struct gv_proto_challenge {
    struct gv_proto_bytes nonce; /* server nonce, <= max_bytes_field */
};
struct gv_proto_auth {
    struct gv_proto_bytes mac; /* <= max_bytes_field */
};
struct gv_proto_welcome {
    uint64_t shard_offset; /* the shard in the flattened parameter vector */
    uint64_t shard_numel;  /* <= max_numel; offset + numel <= model_numel when set */
    uint64_t model_numel;
    uint64_t model_fingerprint;
    uint32_t num_shards;
    uint64_t features; /* negotiated GV_PROTO_FEAT_* */
};
struct gv_proto_refuse_body {
    enum gv_proto_refuse code;
    const char *text;
};
struct gv_proto_model {
    uint64_t offset;   /* first element of this chunk within the shard */
    uint64_t checksum; /* model checksum (0: not computed) */
};
struct gv_proto_push {
    enum gv_proto_level level;   /* what was sent */
    enum gv_proto_enc index_enc; /* encoding of the INDICES segment, NONE when dense */
    struct gv_proto_iter_stats stats;
    uint64_t replica_checksum; /* --optimizer caller: the worker's parameters of this shard
                                  before the push (0: not computed) */
};
struct gv_proto_update {
    struct gv_proto_decision decision;
    uint64_t model_checksum;
};
struct gv_proto_stats {
    uint32_t workers; /* workers summed into stats */
    struct gv_proto_iter_stats stats;
};
struct gv_proto_error {
    int32_t code; /* a gv_status_t */
    const char *text;
};

/* One decoded (or to-be-encoded) header. Common fields first; each type uses a documented
 * subset (docs/wire-format.md) and its union member. Zero means "not set" throughout. */
struct gv_proto_msg {
    enum gv_proto_msg_type type;
    enum gv_proto_role role; /* sender */
    uint32_t rank;           /* sender rank within its role */
    uint64_t iteration;
    uint32_t shard;
    uint32_t tensor_id;
    enum gv_proto_dtype dtype;
    uint64_t numel;  /* dense length of the tensor/shard, <= max_numel */
    uint64_t nnz;    /* non-zeros carried, <= numel */
    double cf;       /* compression factor used: 0 = not set, else finite >= 1 */
    uint64_t offset; /* PUSH, UPDATE in pieces: the piece's first element in the shard (numel:
                        its length); offset + numel <= max_numel */
    uint32_t n_segs;
    struct gv_proto_seg segs[GV_PROTO_MAX_SEGMENTS]; /* payload layout, in wire order */
    uint64_t payload_len; /* decode: from the prefix (== sum of segs[].bytes); encode: unused */
    union {
        struct gv_proto_hello hello;         /* HELLO */
        struct gv_proto_challenge challenge; /* CHALLENGE */
        struct gv_proto_auth auth;           /* AUTH */
        struct gv_proto_welcome welcome;     /* WELCOME */
        struct gv_proto_refuse_body refuse;  /* REFUSE */
        struct gv_proto_model model;         /* MODEL */
        struct gv_proto_push push;           /* PUSH */
        struct gv_proto_update update;       /* UPDATE */
        struct gv_proto_decision decision;   /* DECISION */
        struct gv_proto_stats stats;         /* STATS */
        struct gv_proto_error error;         /* ERROR */
    } u;                                     /* HEARTBEAT, BYE, LAYOUT: none */
};

/* Zeroes *m and sets its type. */
void gv_proto_msg_init(struct gv_proto_msg *m, enum gv_proto_msg_type type);

/* Appends a segment descriptor; GV_ERR_INVAL when all GV_PROTO_MAX_SEGMENTS are used. */
gv_status_t gv_proto_seg_add(struct gv_proto_msg *m, enum gv_proto_seg_kind kind,
                             enum gv_proto_enc enc, uint64_t count, uint64_t bytes);

/* Byte length of count elements in encoding enc (numel: the header's numel, for BITMAP).
 * GV_ERR_INVAL for DELTA_VARINT (variable length), NONE/unknown encodings, or overflow. */
gv_status_t gv_proto_enc_fixed_bytes(enum gv_proto_enc enc, uint64_t count, uint64_t numel,
                                     uint64_t *bytes_p);

/* True when a and b carry the same message: common fields, segments, and the body of their
 * type (strings and bytes by content, NULL equal to empty; doubles by value, NaN equal to
 * NaN). payload_len is not compared. */
bool gv_proto_msg_equal(const struct gv_proto_msg *a, const struct gv_proto_msg *b);

/* Sum of m->segs[].bytes (the payload length a sender writes into the prefix). */
uint64_t gv_proto_payload_len(const struct gv_proto_msg *m);

/* Encodes prefix + header into buf (borrowed, buf_len bytes) and returns the frame length
 * (GV_PROTO_PREFIX_LEN + hdr_len) in *len_p. The payload is not written: the sender passes
 * the segments, in m->segs order, as the following iov entries. m is validated exactly as
 * the decoder would; any violation, a header above caps->max_hdr_len, a payload above
 * caps->max_payload_len or a buf too small gives GV_ERR_INVAL (logged).
 * caps: borrowed, NULL for the defaults. */
gv_status_t gv_proto_encode(const struct gv_proto_msg *m, const struct gv_proto_caps *caps,
                            void *buf, size_t buf_len, size_t *len_p);

/* Decodes a whole prefix + header (frame, frame_len bytes exactly, borrowed) into *m:
 * gv_proto_parse_prefix, then frame_len == GV_PROTO_PREFIX_LEN + hdr_len, then
 * gv_proto_decode_header. Errors: those of parse_prefix, and GV_ERR_PROTO for a short or
 * long frame or any header violation (docs/wire-format.md lists them all). Resets arena;
 * strings, bytes and layer norms in *m point into it. *m is written only on success. */
gv_status_t gv_proto_decode(const void *frame, size_t frame_len, const struct gv_proto_caps *caps,
                            struct gv_proto_arena *arena, struct gv_proto_msg *m);

/* Decodes the header alone (hdr, hdr_len bytes, borrowed) of a frame whose prefix announced
 * payload_len. GV_ERR_PROTO on malformed protobuf, arena overflow, unknown type, a body that
 * does not match the type, or any cap or consistency violation. Resets arena. */
gv_status_t gv_proto_decode_header(const void *hdr, size_t hdr_len, uint64_t payload_len,
                                   const struct gv_proto_caps *caps, struct gv_proto_arena *arena,
                                   struct gv_proto_msg *m);

/* ---------------------------------------------------------------- names for logs */

/* Static lower-case names ("push", "worker", "f32", ...); "unknown" for other values. */
const char *gv_proto_msg_type_str(enum gv_proto_msg_type type);
const char *gv_proto_role_str(enum gv_proto_role role);
const char *gv_proto_dtype_str(enum gv_proto_dtype dtype);
const char *gv_proto_level_str(enum gv_proto_level level);
const char *gv_proto_seg_kind_str(enum gv_proto_seg_kind kind);
const char *gv_proto_enc_str(enum gv_proto_enc enc);
const char *gv_proto_refuse_str(enum gv_proto_refuse code);

#ifdef __cplusplus
}
#endif
#endif /* GV_PROTO_H */
