/* frame.c: a frame as it goes on the wire and comes off it: the fixed 24-byte prefix (packed
 * byte by byte, little-endian, no struct casts), the protobuf-c header (conversion between
 * struct gv_proto_msg and the generated Gravac__Header; validation is in validate.c), the caps
 * and the decode arena. Decoding allocates only from the caller's arena; encoding builds the
 * protobuf structs on the stack. */
#include "gravac.pb-c.h"
#include "gv_proto.h"
#include "proto_internal.h"

#include <stdio.h>
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

gv_status_t gv_proto_prefix_check(const void *prefix, const struct gv_proto_caps *caps,
                                  uint32_t *hdr_len_p, uint64_t *payload_len_p, char *why,
                                  size_t why_len)
{
    struct gv_proto_caps defcaps;
    struct gv_proto_prefix p;

    caps = proto_caps_or_default(caps, &defcaps);
    gv_proto_prefix_read(prefix, &p);
    if (p.magic != GV_PROTO_MAGIC) {
        snprintf(why, why_len, "bad magic 0x%08x (want 0x%08x): not a gravac peer", p.magic,
                 GV_PROTO_MAGIC);
        return GV_ERR_PROTO;
    }
    /* Checked before the other fields: another version may define them differently. */
    if (p.version != GV_PROTO_VERSION) {
        snprintf(why, why_len, "peer speaks wire version %u, this build speaks %u", p.version,
                 GV_PROTO_VERSION);
        return GV_ERR_VERSION;
    }
    if (p.reserved != 0) {
        snprintf(why, why_len, "reserved prefix field is 0x%08x, must be 0", p.reserved);
        return GV_ERR_PROTO;
    }
    if ((p.flags & ~GV_PROTO_FLAGS_KNOWN) != 0) {
        snprintf(why, why_len, "unknown prefix flags 0x%04x", p.flags);
        return GV_ERR_PROTO;
    }
    if (p.hdr_len == 0) {
        snprintf(why, why_len, "hdr_len 0: every frame has a header");
        return GV_ERR_PROTO;
    }
    if (p.hdr_len > caps->max_hdr_len) {
        snprintf(why, why_len, "hdr_len %u above cap max_hdr_len %u", p.hdr_len, caps->max_hdr_len);
        return GV_ERR_PROTO;
    }
    if (p.payload_len > caps->max_payload_len) {
        snprintf(why, why_len, "payload_len %llu above cap max_payload_len %llu",
                 (unsigned long long)p.payload_len, (unsigned long long)caps->max_payload_len);
        return GV_ERR_PROTO;
    }
    *hdr_len_p = p.hdr_len;
    *payload_len_p = p.payload_len;
    return GV_OK;
}

gv_status_t gv_proto_parse_prefix(const void *prefix, const struct gv_proto_caps *caps,
                                  uint32_t *hdr_len_p, uint64_t *payload_len_p)
{
    char why[160];
    gv_status_t status =
        gv_proto_prefix_check(prefix, caps, hdr_len_p, payload_len_p, why, sizeof(why));
    if (status != GV_OK)
        gv_log(status == GV_ERR_VERSION ? GV_LOG_ERROR : GV_LOG_WARN, "proto: %s", why);
    return status;
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

/* ---------------------------------------------------------------- the protobuf header */

/* The C enums mirror the generated ones value for value. */
_Static_assert(GV_PROTO_MSG_ERROR == (int)GRAVAC__MSG_TYPE__MSG_ERROR, "msg type values");
_Static_assert(GV_PROTO_MSG_HEARTBEAT == (int)GRAVAC__MSG_TYPE__MSG_HEARTBEAT, "msg values");
_Static_assert(GV_PROTO_MSG_LAYOUT == (int)GRAVAC__MSG_TYPE__MSG_LAYOUT, "msg values");
_Static_assert(GV_PROTO_ROLE_CLIENT == (int)GRAVAC__ROLE__ROLE_CLIENT, "role values");
_Static_assert(GV_PROTO_DTYPE_BF16 == (int)GRAVAC__DTYPE__DTYPE_BF16, "dtype values");
_Static_assert(GV_PROTO_LEVEL_DENSE == (int)GRAVAC__LEVEL__LEVEL_DENSE, "level values");
_Static_assert(GV_PROTO_SEG_RAW == (int)GRAVAC__SEG_KIND__SEG_RAW, "segment kind values");
_Static_assert(GV_PROTO_SEG_DENSE == (int)GRAVAC__SEG_KIND__SEG_DENSE, "segment kind values");
_Static_assert(GV_PROTO_ENC_BYTES == (int)GRAVAC__SEG_ENCODING__SEG_ENC_BYTES, "encodings");
_Static_assert(GV_PROTO_ENC_BITMAP == (int)GRAVAC__SEG_ENCODING__SEG_ENC_BITMAP, "encodings");
_Static_assert(GV_PROTO_REFUSE_OTHER == (int)GRAVAC__REFUSE_CODE__REFUSE_OTHER, "refuse codes");

/* The body each message type carries (NOT_SET: none). */
static const Gravac__Header__BodyCase type_body[GV_PROTO_MSG_COUNT] = {
    [GV_PROTO_MSG_NONE] = GRAVAC__HEADER__BODY__NOT_SET,
    [GV_PROTO_MSG_HELLO] = GRAVAC__HEADER__BODY_HELLO,
    [GV_PROTO_MSG_CHALLENGE] = GRAVAC__HEADER__BODY_CHALLENGE,
    [GV_PROTO_MSG_AUTH] = GRAVAC__HEADER__BODY_AUTH,
    [GV_PROTO_MSG_WELCOME] = GRAVAC__HEADER__BODY_WELCOME,
    [GV_PROTO_MSG_REFUSE] = GRAVAC__HEADER__BODY_REFUSE,
    [GV_PROTO_MSG_MODEL] = GRAVAC__HEADER__BODY_MODEL,
    [GV_PROTO_MSG_PUSH] = GRAVAC__HEADER__BODY_PUSH,
    [GV_PROTO_MSG_UPDATE] = GRAVAC__HEADER__BODY_UPDATE,
    [GV_PROTO_MSG_DECISION] = GRAVAC__HEADER__BODY_DECISION,
    [GV_PROTO_MSG_STATS] = GRAVAC__HEADER__BODY_STATS,
    [GV_PROTO_MSG_HEARTBEAT] = GRAVAC__HEADER__BODY__NOT_SET,
    [GV_PROTO_MSG_BYE] = GRAVAC__HEADER__BODY__NOT_SET,
    [GV_PROTO_MSG_ERROR] = GRAVAC__HEADER__BODY_ERROR,
    [GV_PROTO_MSG_LAYOUT] = GRAVAC__HEADER__BODY__NOT_SET,
};

/* ---------------------------------------------------------------- C struct -> protobuf */

/* Stack storage for one header being encoded. */
struct pb_out {
    Gravac__Header h;
    Gravac__Segment segs[GV_PROTO_MAX_SEGMENTS];
    Gravac__Segment *segp[GV_PROTO_MAX_SEGMENTS];
    Gravac__Hello hello;
    Gravac__Challenge challenge;
    Gravac__Auth auth;
    Gravac__Welcome welcome;
    Gravac__Refuse refuse;
    Gravac__Model model;
    Gravac__Push push;
    Gravac__Update update;
    Gravac__Decision decision;
    Gravac__Stats stats;
    Gravac__Error error;
    Gravac__IterStats iter;
};

/* protobuf-c's structs are not const-correct; packing never writes through these. */
static char *pb_str(const char *s)
{
    return (char *)(uintptr_t)(s != NULL ? s : "");
}

static ProtobufCBinaryData pb_bytes(const struct gv_proto_bytes *b)
{
    return (ProtobufCBinaryData){b->len, (uint8_t *)(uintptr_t)b->data};
}

static bool stats_is_zero(const struct gv_proto_iter_stats *s)
{
    return s->g_ef_sq == 0 && s->g_min_sq == 0 && s->g_c_sq == 0 && s->compute_s == 0 &&
           s->compress_s == 0 && s->comm_s == 0 && s->pause_s == 0 && s->samples == 0 &&
           s->loss == 0 && s->lr == 0 && s->n_layer_norms == 0 && s->ckpt_iter == 0 &&
           s->ckpt_status == 0;
}

static bool decision_is_zero(const struct gv_proto_decision *d)
{
    return d->level == 0 && d->theta_min == 0 && d->cf_candidate == 0 && d->cf_send == 0 &&
           d->lr == 0 && !d->resync && d->ckpt_iter == 0 && d->ckpt_status == 0;
}

/* Nested sub-messages are emitted only when non-zero, so that re-encoding a decoded header
 * never grows it (an absent sub-message decodes as zeros). */
static Gravac__IterStats *pb_iter(struct pb_out *o, const struct gv_proto_iter_stats *s)
{
    if (stats_is_zero(s))
        return NULL;
    gravac__iter_stats__init(&o->iter);
    o->iter.g_ef_sq = s->g_ef_sq;
    o->iter.g_min_sq = s->g_min_sq;
    o->iter.g_c_sq = s->g_c_sq;
    o->iter.compute_s = s->compute_s;
    o->iter.compress_s = s->compress_s;
    o->iter.comm_s = s->comm_s;
    o->iter.pause_s = s->pause_s;
    o->iter.samples = s->samples;
    o->iter.loss = s->loss;
    o->iter.lr = s->lr;
    o->iter.n_layer_norms = s->n_layer_norms;
    o->iter.layer_norms = (double *)(uintptr_t)s->layer_norms;
    o->iter.ckpt_iteration = s->ckpt_iter;
    o->iter.ckpt_status = s->ckpt_status;
    return &o->iter;
}

static Gravac__Decision *pb_decision(struct pb_out *o, const struct gv_proto_decision *d)
{
    gravac__decision__init(&o->decision);
    o->decision.level = (Gravac__Level)d->level;
    o->decision.theta_min = d->theta_min;
    o->decision.cf_candidate = d->cf_candidate;
    o->decision.cf_send = d->cf_send;
    o->decision.lr = d->lr;
    o->decision.resync = d->resync;
    o->decision.ckpt_iteration = d->ckpt_iter;
    o->decision.ckpt_status = d->ckpt_status;
    return &o->decision;
}

static void pb_body(struct pb_out *o, const struct gv_proto_msg *m)
{
    Gravac__Header *h = &o->h;

    h->body_case = type_body[m->type];
    switch (m->type) {
    case GV_PROTO_MSG_HELLO:
        gravac__hello__init(&o->hello);
        o->hello.num_workers = m->u.hello.num_workers;
        o->hello.num_servers = m->u.hello.num_servers;
        o->hello.features = m->u.hello.features;
        o->hello.nonce = pb_bytes(&m->u.hello.nonce);
        o->hello.cluster_id = pb_str(m->u.hello.cluster_id);
        h->hello = &o->hello;
        break;
    case GV_PROTO_MSG_CHALLENGE:
        gravac__challenge__init(&o->challenge);
        o->challenge.nonce = pb_bytes(&m->u.challenge.nonce);
        h->challenge = &o->challenge;
        break;
    case GV_PROTO_MSG_AUTH:
        gravac__auth__init(&o->auth);
        o->auth.mac = pb_bytes(&m->u.auth.mac);
        h->auth = &o->auth;
        break;
    case GV_PROTO_MSG_WELCOME:
        gravac__welcome__init(&o->welcome);
        o->welcome.shard_offset = m->u.welcome.shard_offset;
        o->welcome.shard_numel = m->u.welcome.shard_numel;
        o->welcome.model_numel = m->u.welcome.model_numel;
        o->welcome.model_fingerprint = m->u.welcome.model_fingerprint;
        o->welcome.num_shards = m->u.welcome.num_shards;
        o->welcome.features = m->u.welcome.features;
        h->welcome = &o->welcome;
        break;
    case GV_PROTO_MSG_REFUSE:
        gravac__refuse__init(&o->refuse);
        o->refuse.code = (Gravac__RefuseCode)m->u.refuse.code;
        o->refuse.text = pb_str(m->u.refuse.text);
        h->refuse = &o->refuse;
        break;
    case GV_PROTO_MSG_MODEL:
        gravac__model__init(&o->model);
        o->model.offset = m->u.model.offset;
        o->model.checksum = m->u.model.checksum;
        h->model = &o->model;
        break;
    case GV_PROTO_MSG_PUSH:
        gravac__push__init(&o->push);
        o->push.level = (Gravac__Level)m->u.push.level;
        o->push.index_encoding = (Gravac__SegEncoding)m->u.push.index_enc;
        o->push.stats = pb_iter(o, &m->u.push.stats);
        o->push.replica_checksum = m->u.push.replica_checksum;
        h->push = &o->push;
        break;
    case GV_PROTO_MSG_UPDATE:
        gravac__update__init(&o->update);
        if (!decision_is_zero(&m->u.update.decision))
            o->update.decision = pb_decision(o, &m->u.update.decision);
        o->update.model_checksum = m->u.update.model_checksum;
        h->update = &o->update;
        break;
    case GV_PROTO_MSG_DECISION: h->decision = pb_decision(o, &m->u.decision); break;
    case GV_PROTO_MSG_STATS:
        gravac__stats__init(&o->stats);
        o->stats.workers = m->u.stats.workers;
        o->stats.stats = pb_iter(o, &m->u.stats.stats);
        h->stats = &o->stats;
        break;
    case GV_PROTO_MSG_ERROR:
        gravac__error__init(&o->error);
        o->error.code = m->u.error.code;
        o->error.text = pb_str(m->u.error.text);
        h->error = &o->error;
        break;
    default: break;
    }
}

static void pb_from_msg(struct pb_out *o, const struct gv_proto_msg *m)
{
    Gravac__Header *h = &o->h;

    gravac__header__init(h);
    h->type = (Gravac__MsgType)m->type;
    h->role = (Gravac__Role)m->role;
    h->rank = m->rank;
    h->iteration = m->iteration;
    h->shard = m->shard;
    h->tensor_id = m->tensor_id;
    h->dtype = (Gravac__DType)m->dtype;
    h->numel = m->numel;
    h->nnz = m->nnz;
    h->cf = m->cf;
    h->offset = m->offset;
    for (uint32_t i = 0; i < m->n_segs; i++) {
        gravac__segment__init(&o->segs[i]);
        o->segs[i].kind = (Gravac__SegKind)m->segs[i].kind;
        o->segs[i].encoding = (Gravac__SegEncoding)m->segs[i].enc;
        o->segs[i].count = m->segs[i].count;
        o->segs[i].bytes = m->segs[i].bytes;
        o->segp[i] = &o->segs[i];
    }
    h->n_segments = m->n_segs;
    h->segments = m->n_segs > 0 ? o->segp : NULL;
    pb_body(o, m);
}

/* ---------------------------------------------------------------- protobuf -> C struct */

static bool has_unknown(const ProtobufCMessage *pm)
{
    return pm != NULL && pm->n_unknown_fields != 0;
}

static void iter_from_pb(struct gv_proto_iter_stats *s, const Gravac__IterStats *p)
{
    if (p == NULL)
        return; /* absent: zeros */
    s->g_ef_sq = p->g_ef_sq;
    s->g_min_sq = p->g_min_sq;
    s->g_c_sq = p->g_c_sq;
    s->compute_s = p->compute_s;
    s->compress_s = p->compress_s;
    s->comm_s = p->comm_s;
    s->pause_s = p->pause_s;
    s->samples = p->samples;
    s->loss = p->loss;
    s->lr = p->lr;
    /* clamped so the count fits; hv_stats refuses it against max_layers afterwards */
    s->n_layer_norms = p->n_layer_norms > UINT32_MAX ? UINT32_MAX : (uint32_t)p->n_layer_norms;
    s->layer_norms = p->layer_norms;
    s->ckpt_iter = p->ckpt_iteration;
    s->ckpt_status = p->ckpt_status;
}

static void decision_from_pb(struct gv_proto_decision *d, const Gravac__Decision *p)
{
    if (p == NULL)
        return;
    d->level = (enum gv_proto_level)p->level;
    d->theta_min = p->theta_min;
    d->cf_candidate = p->cf_candidate;
    d->cf_send = p->cf_send;
    d->lr = p->lr;
    d->resync = p->resync;
    d->ckpt_iter = p->ckpt_iteration;
    d->ckpt_status = p->ckpt_status;
}

static struct gv_proto_bytes bytes_from_pb(ProtobufCBinaryData b)
{
    return (struct gv_proto_bytes){b.data, b.len};
}

/* The body as a generic message (NULL when absent). */
static const ProtobufCMessage *body_msg(const Gravac__Header *h)
{
    switch (h->body_case) {
    case GRAVAC__HEADER__BODY_HELLO: return &h->hello->base;
    case GRAVAC__HEADER__BODY_CHALLENGE: return &h->challenge->base;
    case GRAVAC__HEADER__BODY_AUTH: return &h->auth->base;
    case GRAVAC__HEADER__BODY_WELCOME: return &h->welcome->base;
    case GRAVAC__HEADER__BODY_REFUSE: return &h->refuse->base;
    case GRAVAC__HEADER__BODY_MODEL: return &h->model->base;
    case GRAVAC__HEADER__BODY_PUSH: return &h->push->base;
    case GRAVAC__HEADER__BODY_UPDATE: return &h->update->base;
    case GRAVAC__HEADER__BODY_DECISION: return &h->decision->base;
    case GRAVAC__HEADER__BODY_STATS: return &h->stats->base;
    case GRAVAC__HEADER__BODY_ERROR: return &h->error->base;
    default: return NULL;
    }
}

/* Unknown fields anywhere in the header: the sender has exactly our gravac.proto (the
 * prefix version matched), so they can only be garbage. */
static bool pb_has_unknown(const Gravac__Header *h)
{
    if (has_unknown(&h->base) || has_unknown(body_msg(h)))
        return true;
    for (size_t i = 0; i < h->n_segments; i++)
        if (has_unknown(&h->segments[i]->base))
            return true;
    switch (h->body_case) {
    case GRAVAC__HEADER__BODY_PUSH:
        return h->push->stats != NULL && has_unknown(&h->push->stats->base);
    case GRAVAC__HEADER__BODY_UPDATE:
        return h->update->decision != NULL && has_unknown(&h->update->decision->base);
    case GRAVAC__HEADER__BODY_STATS:
        return h->stats->stats != NULL && has_unknown(&h->stats->stats->base);
    default: return false;
    }
}

static void body_from_pb(struct gv_proto_msg *m, const Gravac__Header *h)
{
    switch (h->body_case) {
    case GRAVAC__HEADER__BODY_HELLO:
        m->u.hello.num_workers = h->hello->num_workers;
        m->u.hello.num_servers = h->hello->num_servers;
        m->u.hello.features = h->hello->features;
        m->u.hello.nonce = bytes_from_pb(h->hello->nonce);
        m->u.hello.cluster_id = h->hello->cluster_id;
        break;
    case GRAVAC__HEADER__BODY_CHALLENGE:
        m->u.challenge.nonce = bytes_from_pb(h->challenge->nonce);
        break;
    case GRAVAC__HEADER__BODY_AUTH: m->u.auth.mac = bytes_from_pb(h->auth->mac); break;
    case GRAVAC__HEADER__BODY_WELCOME:
        m->u.welcome.shard_offset = h->welcome->shard_offset;
        m->u.welcome.shard_numel = h->welcome->shard_numel;
        m->u.welcome.model_numel = h->welcome->model_numel;
        m->u.welcome.model_fingerprint = h->welcome->model_fingerprint;
        m->u.welcome.num_shards = h->welcome->num_shards;
        m->u.welcome.features = h->welcome->features;
        break;
    case GRAVAC__HEADER__BODY_REFUSE:
        m->u.refuse.code = (enum gv_proto_refuse)h->refuse->code;
        m->u.refuse.text = h->refuse->text;
        break;
    case GRAVAC__HEADER__BODY_MODEL:
        m->u.model.offset = h->model->offset;
        m->u.model.checksum = h->model->checksum;
        break;
    case GRAVAC__HEADER__BODY_PUSH:
        m->u.push.level = (enum gv_proto_level)h->push->level;
        m->u.push.index_enc = (enum gv_proto_enc)h->push->index_encoding;
        iter_from_pb(&m->u.push.stats, h->push->stats);
        m->u.push.replica_checksum = h->push->replica_checksum;
        break;
    case GRAVAC__HEADER__BODY_UPDATE:
        decision_from_pb(&m->u.update.decision, h->update->decision);
        m->u.update.model_checksum = h->update->model_checksum;
        break;
    case GRAVAC__HEADER__BODY_DECISION: decision_from_pb(&m->u.decision, h->decision); break;
    case GRAVAC__HEADER__BODY_STATS:
        m->u.stats.workers = h->stats->workers;
        iter_from_pb(&m->u.stats.stats, h->stats->stats);
        break;
    case GRAVAC__HEADER__BODY_ERROR:
        m->u.error.code = h->error->code;
        m->u.error.text = h->error->text;
        break;
    default: break;
    }
}

/* Structural checks that must precede the copy into the fixed-size C struct. */
static gv_status_t msg_from_pb(const struct proto_vctx *c, const Gravac__Header *h,
                               struct gv_proto_msg *m)
{
    int type = (int)h->type;

    if (!proto_type_known(type))
        return proto_fail(c, "unknown message type %d", type);
    if (h->body_case != type_body[type])
        return proto_fail(c, "body field %d does not belong to this type", (int)h->body_case);
    if (h->n_segments > c->caps->max_segments) /* before the copy into segs[] */
        return proto_fail(c, "header lists %zu segments, above cap max_segments %u", h->n_segments,
                          c->caps->max_segments);
    if (pb_has_unknown(h))
        return proto_fail(c, "unknown fields (a different gravac.proto?)");

    gv_proto_msg_init(m, (enum gv_proto_msg_type)type);
    m->role = (enum gv_proto_role)h->role;
    m->rank = h->rank;
    m->iteration = h->iteration;
    m->shard = h->shard;
    m->tensor_id = h->tensor_id;
    m->dtype = (enum gv_proto_dtype)h->dtype;
    m->numel = h->numel;
    m->nnz = h->nnz;
    m->cf = h->cf;
    m->offset = h->offset;
    m->n_segs = (uint32_t)h->n_segments;
    for (size_t i = 0; i < h->n_segments; i++) {
        const Gravac__Segment *s = h->segments[i];
        m->segs[i].kind = (enum gv_proto_seg_kind)s->kind;
        m->segs[i].enc = (enum gv_proto_enc)s->encoding;
        m->segs[i].count = s->count;
        m->segs[i].bytes = s->bytes;
    }
    body_from_pb(m, h);
    return GV_OK;
}

/* ---------------------------------------------------------------- encode / decode */

gv_status_t gv_proto_encode(const struct gv_proto_msg *m, const struct gv_proto_caps *caps,
                            void *buf, size_t buf_len, size_t *len_p)
{
    struct gv_proto_caps defcaps;
    struct pb_out o;
    uint64_t payload_len;
    gv_status_t status;

    caps = proto_caps_or_default(caps, &defcaps);
    status = gv_proto_caps_check(caps);
    if (status != GV_OK)
        return status;
    struct proto_vctx c = {caps, GV_ERR_INVAL, GV_LOG_ERROR, "cannot encode", (int)m->type};
    status = proto_validate(&c, m, &payload_len);
    if (status != GV_OK)
        return status;

    pb_from_msg(&o, m);
    size_t hdr_len = gravac__header__get_packed_size(&o.h);
    if (hdr_len > caps->max_hdr_len)
        return proto_fail(&c, "header of %zu bytes above cap max_hdr_len %u", hdr_len,
                          caps->max_hdr_len);
    if (buf_len < GV_PROTO_PREFIX_LEN || hdr_len > buf_len - GV_PROTO_PREFIX_LEN)
        return proto_fail(&c, "frame of %zu bytes does not fit a %zu-byte buffer",
                          GV_PROTO_PREFIX_LEN + hdr_len, buf_len);

    struct gv_proto_prefix p = {
        .magic = GV_PROTO_MAGIC,
        .version = GV_PROTO_VERSION,
        .flags = 0,
        .hdr_len = (uint32_t)hdr_len,
        .reserved = 0,
        .payload_len = payload_len,
    };
    gv_proto_prefix_write(&p, buf);
    size_t packed = gravac__header__pack(&o.h, (uint8_t *)buf + GV_PROTO_PREFIX_LEN);
    GV_ASSERT(packed == hdr_len);
    *len_p = GV_PROTO_PREFIX_LEN + hdr_len;
    return GV_OK;
}

gv_status_t gv_proto_decode_header(const void *hdr, size_t hdr_len, uint64_t payload_len,
                                   const struct gv_proto_caps *caps, struct gv_proto_arena *arena,
                                   struct gv_proto_msg *m)
{
    struct gv_proto_caps defcaps;
    struct gv_proto_msg tmp;
    uint64_t sum;
    gv_status_t status;

    caps = proto_caps_or_default(caps, &defcaps);
    status = gv_proto_caps_check(caps);
    if (status != GV_OK)
        return status;
    gv_proto_arena_reset(arena);
    struct proto_vctx c = {caps, GV_ERR_PROTO, GV_LOG_WARN, "bad header", 0};
    if (hdr_len == 0 || hdr_len > caps->max_hdr_len)
        return proto_fail(&c, "hdr_len %zu outside 1..max_hdr_len %u", hdr_len, caps->max_hdr_len);
    if (payload_len > caps->max_payload_len)
        return proto_fail(&c, "payload_len %llu above cap max_payload_len %llu",
                          (unsigned long long)payload_len,
                          (unsigned long long)caps->max_payload_len);

    ProtobufCAllocator alloc = {proto_arena_alloc, proto_arena_free, arena};
    Gravac__Header *h = gravac__header__unpack(&alloc, hdr_len, hdr);
    if (h == NULL) {
        if (arena->overflow)
            return proto_fail(&c, "%zu-byte header needs more than the %zu-byte decode arena",
                              hdr_len, arena->cap);
        return proto_fail(&c, "%zu bytes are not a valid protobuf header", hdr_len);
    }
    c.type = (int)h->type;
    status = msg_from_pb(&c, h, &tmp);
    if (status != GV_OK)
        return status;
    status = proto_validate(&c, &tmp, &sum);
    if (status != GV_OK)
        return status;
    if (sum != payload_len)
        return proto_fail(&c, "segments add up to %llu bytes, prefix says payload_len %llu",
                          (unsigned long long)sum, (unsigned long long)payload_len);
    tmp.payload_len = payload_len;
    *m = tmp;
    return GV_OK;
}

gv_status_t gv_proto_decode(const void *frame, size_t frame_len, const struct gv_proto_caps *caps,
                            struct gv_proto_arena *arena, struct gv_proto_msg *m)
{
    uint32_t hdr_len;
    uint64_t payload_len;
    gv_status_t status;

    gv_proto_arena_reset(arena);
    if (frame_len < GV_PROTO_PREFIX_LEN) {
        gv_log(GV_LOG_WARN, "proto: frame of %zu bytes is shorter than the %d-byte prefix",
               frame_len, GV_PROTO_PREFIX_LEN);
        return GV_ERR_PROTO;
    }
    status = gv_proto_parse_prefix(frame, caps, &hdr_len, &payload_len);
    if (status != GV_OK)
        return status;
    if (frame_len - GV_PROTO_PREFIX_LEN != hdr_len) {
        gv_log(GV_LOG_WARN, "proto: frame has %zu header bytes, prefix says hdr_len %u",
               frame_len - GV_PROTO_PREFIX_LEN, hdr_len);
        return GV_ERR_PROTO;
    }
    return gv_proto_decode_header((const uint8_t *)frame + GV_PROTO_PREFIX_LEN, hdr_len,
                                  payload_len, caps, arena, m);
}

/* ---------------------------------------------------------------- arena bound */

/* protobuf-c records the fields of a message as it scans them: the first 16 on the stack,
 * then in slabs of 32, 64, ... entries taken from the allocator (and only given back at the
 * end, which for the arena is the next reset). An entry is a tag, a wire type, a field
 * pointer, a length and a data pointer; 6 words per entry leaves a margin over its size. */
#define SCAN_STACK_ENTRIES 16
#define SCAN_ENTRY_BYTES (6 * sizeof(void *))

static size_t scan_slab_bytes(size_t fields)
{
    size_t bytes = 0, have = SCAN_STACK_ENTRIES, slab = 2 * SCAN_STACK_ENTRIES;

    while (have < fields) {
        bytes += proto_arena_round(slab * SCAN_ENTRY_BYTES);
        have += slab;
        slab *= 2;
    }
    return bytes;
}

size_t gv_proto_arena_bound(const struct gv_proto_caps *caps)
{
    struct gv_proto_caps defcaps;
    size_t body = 0;

    caps = proto_caps_or_default(caps, &defcaps);
    const size_t bodies[] = {
        sizeof(Gravac__Hello),   sizeof(Gravac__Challenge), sizeof(Gravac__Auth),
        sizeof(Gravac__Welcome), sizeof(Gravac__Refuse),    sizeof(Gravac__Model),
        sizeof(Gravac__Push),    sizeof(Gravac__Update),    sizeof(Gravac__Decision),
        sizeof(Gravac__Stats),   sizeof(Gravac__Error),
    };
    for (size_t i = 0; i < GV_ARRAY_LEN(bodies); i++)
        body = GV_MAX(body, bodies[i]);
    /* What protobuf-c allocates for a canonical header: the header, the segment pointer
     * array and each segment, one body, one nested message (stats or decision), the layer
     * norm array, at most one bytes field and one string (HELLO has both), and the scan
     * slabs of the header (its scalar fields, the segments and the body; every other message
     * has fewer than 16 fields). */
    size_t n = proto_arena_round(sizeof(Gravac__Header));
    n += scan_slab_bytes(gravac__header__descriptor.n_fields + caps->max_segments);
    n += proto_arena_round(caps->max_segments * sizeof(Gravac__Segment *));
    n += caps->max_segments * proto_arena_round(sizeof(Gravac__Segment));
    n += proto_arena_round(body);
    n += proto_arena_round(GV_MAX(sizeof(Gravac__IterStats), sizeof(Gravac__Decision)));
    n += proto_arena_round((size_t)caps->max_layers * sizeof(double));
    n += proto_arena_round(caps->max_bytes_field);
    n += proto_arena_round((size_t)caps->max_text_len + 1);
    return n + 16; /* alignment lost at the start of the caller's buffer */
}
