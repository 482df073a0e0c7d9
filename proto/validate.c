/* validate.c: the checks every header passes, shared by the encoder (a violation is the
 * caller's bug: GV_ERR_INVAL) and the decoder (peer input: GV_ERR_PROTO), so the encoder
 * never emits what a decoder refuses. Works on struct gv_proto_msg; knows no protobuf. */
#include "gv_proto.h"
#include "proto_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define LAST_ROLE GV_PROTO_ROLE_CLIENT
#define LAST_DTYPE GV_PROTO_DTYPE_BF16
#define LAST_LEVEL GV_PROTO_LEVEL_DENSE
#define LAST_KIND GV_PROTO_SEG_RAW
#define LAST_ENC GV_PROTO_ENC_BYTES
#define LAST_REFUSE GV_PROTO_REFUSE_OTHER

gv_status_t proto_fail(const struct proto_vctx *c, const char *fmt, ...)
{
    char why[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    gv_log(c->level, "proto: %s (%s): %s", c->what,
           gv_proto_msg_type_str((enum gv_proto_msg_type)c->type), why);
    return c->bad;
}

static bool in_range(int v, int last)
{
    return v >= 0 && v <= last;
}

/* A compression factor: 0 (not set) or finite and >= 1. */
static bool cf_ok(double v)
{
    return v == 0 || (isfinite(v) && v >= 1);
}

static gv_status_t hv_text(const struct proto_vctx *c, const char *field, const char *s)
{
    if (s == NULL)
        return GV_OK;
    size_t n = strnlen(s, (size_t)c->caps->max_text_len + 1);
    if (n > c->caps->max_text_len)
        return proto_fail(c, "%s longer than cap max_text_len %u", field, c->caps->max_text_len);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch == 0x7f) /* keeps peer text from forging log lines */
            return proto_fail(c, "%s has control character 0x%02x at %zu", field, ch, i);
    }
    return GV_OK;
}

static gv_status_t hv_bytes(const struct proto_vctx *c, const char *field,
                            const struct gv_proto_bytes *b)
{
    if (b->len > c->caps->max_bytes_field)
        return proto_fail(c, "%s of %zu bytes above cap max_bytes_field %u", field, b->len,
                          c->caps->max_bytes_field);
    if (b->len > 0 && b->data == NULL)
        return proto_fail(c, "%s has %zu bytes but no data", field, b->len);
    return GV_OK;
}

static gv_status_t hv_stats(const struct proto_vctx *c, const struct gv_proto_iter_stats *s)
{
    if (s->n_layer_norms > c->caps->max_layers)
        return proto_fail(c, "%u layer norms above cap max_layers %u", s->n_layer_norms,
                          c->caps->max_layers);
    if (s->n_layer_norms > 0 && s->layer_norms == NULL)
        return proto_fail(c, "%u layer norms but no array", s->n_layer_norms);
    return GV_OK;
}

static gv_status_t hv_decision(const struct proto_vctx *c, const struct gv_proto_decision *d)
{
    if (!in_range((int)d->level, LAST_LEVEL))
        return proto_fail(c, "unknown level %d", (int)d->level);
    if (!cf_ok(d->theta_min) || !cf_ok(d->cf_candidate) || !cf_ok(d->cf_send))
        return proto_fail(c,
                          "compression factors theta_min %g candidate %g send %g: each must be "
                          "0 (unset) or finite >= 1",
                          d->theta_min, d->cf_candidate, d->cf_send);
    if (!(isfinite(d->lr) && d->lr >= 0))
        return proto_fail(c, "learning rate %g is not finite >= 0", d->lr);
    return GV_OK;
}

/* Whether a segment of this kind may use this encoding. */
static bool kind_allows(enum gv_proto_seg_kind kind, enum gv_proto_enc enc)
{
    switch (kind) {
    case GV_PROTO_SEG_INDICES:
        return enc == GV_PROTO_ENC_U32 || enc == GV_PROTO_ENC_DELTA_VARINT ||
               enc == GV_PROTO_ENC_BITMAP;
    case GV_PROTO_SEG_VALUES:
    case GV_PROTO_SEG_DENSE: return enc == GV_PROTO_ENC_F32 || enc == GV_PROTO_ENC_F16;
    case GV_PROTO_SEG_RAW: return enc == GV_PROTO_ENC_BYTES;
    default: return false;
    }
}

static gv_status_t hv_seg(const struct proto_vctx *c, const struct gv_proto_msg *m, uint32_t i)
{
    const struct gv_proto_seg *s = &m->segs[i];
    uint64_t want;

    if (!in_range((int)s->kind, LAST_KIND) || s->kind == GV_PROTO_SEG_NONE)
        return proto_fail(c, "segment %u: unknown kind %d", i, (int)s->kind);
    if (!in_range((int)s->enc, LAST_ENC) || !kind_allows(s->kind, s->enc))
        return proto_fail(c, "segment %u: encoding %d (%s) not allowed for %s", i, (int)s->enc,
                          gv_proto_enc_str(s->enc), gv_proto_seg_kind_str(s->kind));
    if (s->bytes > c->caps->max_payload_len)
        return proto_fail(c, "segment %u: %llu bytes above cap max_payload_len %llu", i,
                          (unsigned long long)s->bytes,
                          (unsigned long long)c->caps->max_payload_len);
    if (s->kind != GV_PROTO_SEG_RAW && s->count > c->caps->max_numel)
        return proto_fail(c, "segment %u: count %llu above cap max_numel %llu", i,
                          (unsigned long long)s->count, (unsigned long long)c->caps->max_numel);
    if (s->enc == GV_PROTO_ENC_DELTA_VARINT) {
        /* one to five LEB128 bytes per u32 gap */
        if (s->bytes < s->count || s->bytes / 5 + (s->bytes % 5 != 0) > s->count)
            return proto_fail(c, "segment %u: %llu bytes cannot hold %llu delta varints", i,
                              (unsigned long long)s->bytes, (unsigned long long)s->count);
        return GV_OK;
    }
    if (gv_proto_enc_fixed_bytes(s->enc, s->count, m->numel, &want) != GV_OK || want != s->bytes)
        return proto_fail(c, "segment %u: %llu bytes for %llu %s elements (numel %llu)", i,
                          (unsigned long long)s->bytes, (unsigned long long)s->count,
                          gv_proto_enc_str(s->enc), (unsigned long long)m->numel);
    if (s->enc == GV_PROTO_ENC_BITMAP && s->count > m->numel)
        return proto_fail(c, "segment %u: bitmap of %llu indices over numel %llu", i,
                          (unsigned long long)s->count, (unsigned long long)m->numel);
    return GV_OK;
}

/* Segment descriptors; *sum_p: their byte total (<= max_payload_len). */
static gv_status_t hv_segs(const struct proto_vctx *c, const struct gv_proto_msg *m,
                           uint64_t *sum_p)
{
    uint64_t sum = 0, per_kind[LAST_KIND + 1] = {0};
    bool seen[LAST_KIND + 1] = {false};
    gv_status_t status;

    if (m->n_segs > c->caps->max_segments)
        return proto_fail(c, "%u segments above cap max_segments %u", m->n_segs,
                          c->caps->max_segments);
    for (uint32_t i = 0; i < m->n_segs; i++) {
        status = hv_seg(c, m, i);
        if (status != GV_OK)
            return status;
        /* each term <= max_payload_len, so this only overflows past the cap */
        sum += m->segs[i].bytes;
        if (sum < m->segs[i].bytes || sum > c->caps->max_payload_len)
            return proto_fail(c, "segment bytes add up to more than cap max_payload_len %llu",
                              (unsigned long long)c->caps->max_payload_len);
        /* compared kinds have counts <= max_numel, so 16 of them cannot wrap */
        per_kind[m->segs[i].kind] += m->segs[i].count;
        seen[m->segs[i].kind] = true;
    }
    if (seen[GV_PROTO_SEG_INDICES] && per_kind[GV_PROTO_SEG_INDICES] != m->nnz)
        return proto_fail(c, "index segments hold %llu elements, nnz is %llu",
                          (unsigned long long)per_kind[GV_PROTO_SEG_INDICES],
                          (unsigned long long)m->nnz);
    if (seen[GV_PROTO_SEG_VALUES] && per_kind[GV_PROTO_SEG_VALUES] != m->nnz)
        return proto_fail(c, "value segments hold %llu elements, nnz is %llu",
                          (unsigned long long)per_kind[GV_PROTO_SEG_VALUES],
                          (unsigned long long)m->nnz);
    if (seen[GV_PROTO_SEG_DENSE] && per_kind[GV_PROTO_SEG_DENSE] != m->numel)
        return proto_fail(c, "dense segments hold %llu elements, numel is %llu",
                          (unsigned long long)per_kind[GV_PROTO_SEG_DENSE],
                          (unsigned long long)m->numel);
    *sum_p = sum;
    return GV_OK;
}

static gv_status_t hv_body(const struct proto_vctx *c, const struct gv_proto_msg *m)
{
    gv_status_t status;

    switch (m->type) {
    case GV_PROTO_MSG_HELLO:
        status = hv_bytes(c, "client nonce", &m->u.hello.nonce);
        return status != GV_OK ? status : hv_text(c, "cluster id", m->u.hello.cluster_id);
    case GV_PROTO_MSG_CHALLENGE: return hv_bytes(c, "server nonce", &m->u.challenge.nonce);
    case GV_PROTO_MSG_AUTH: return hv_bytes(c, "mac", &m->u.auth.mac);
    case GV_PROTO_MSG_WELCOME: {
        const struct gv_proto_welcome *w = &m->u.welcome;
        if (w->shard_numel > c->caps->max_numel)
            return proto_fail(c, "shard numel %llu above cap max_numel %llu",
                              (unsigned long long)w->shard_numel,
                              (unsigned long long)c->caps->max_numel);
        if (w->model_numel != 0 &&
            (w->shard_offset > w->model_numel || w->shard_numel > w->model_numel - w->shard_offset))
            return proto_fail(c, "shard [%llu, +%llu) outside the model's %llu elements",
                              (unsigned long long)w->shard_offset,
                              (unsigned long long)w->shard_numel,
                              (unsigned long long)w->model_numel);
        return GV_OK;
    }
    case GV_PROTO_MSG_REFUSE:
        if (!in_range((int)m->u.refuse.code, LAST_REFUSE))
            return proto_fail(c, "unknown refuse code %d", (int)m->u.refuse.code);
        return hv_text(c, "refuse text", m->u.refuse.text);
    case GV_PROTO_MSG_MODEL:
        if (m->u.model.offset > c->caps->max_numel - m->numel)
            return proto_fail(c, "model chunk [%llu, +%llu) beyond cap max_numel %llu",
                              (unsigned long long)m->u.model.offset, (unsigned long long)m->numel,
                              (unsigned long long)c->caps->max_numel);
        return GV_OK;
    case GV_PROTO_MSG_PUSH:
        if (!in_range((int)m->u.push.level, LAST_LEVEL))
            return proto_fail(c, "unknown level %d", (int)m->u.push.level);
        if (!in_range((int)m->u.push.index_enc, LAST_ENC))
            return proto_fail(c, "unknown index encoding %d", (int)m->u.push.index_enc);
        return hv_stats(c, &m->u.push.stats);
    case GV_PROTO_MSG_UPDATE: return hv_decision(c, &m->u.update.decision);
    case GV_PROTO_MSG_DECISION: return hv_decision(c, &m->u.decision);
    case GV_PROTO_MSG_STATS: return hv_stats(c, &m->u.stats.stats);
    case GV_PROTO_MSG_ERROR: return hv_text(c, "error text", m->u.error.text);
    default: /* HEARTBEAT, BYE: no body */ return GV_OK;
    }
}

gv_status_t proto_validate(const struct proto_vctx *c, const struct gv_proto_msg *m,
                           uint64_t *sum_p)
{
    gv_status_t status;

    if (!proto_type_known((int)m->type))
        return proto_fail(c, "unknown message type %d", (int)m->type);
    if (!in_range((int)m->role, LAST_ROLE))
        return proto_fail(c, "unknown role %d", (int)m->role);
    if (!in_range((int)m->dtype, LAST_DTYPE))
        return proto_fail(c, "unknown dtype %d", (int)m->dtype);
    if (m->numel > c->caps->max_numel)
        return proto_fail(c, "numel %llu above cap max_numel %llu", (unsigned long long)m->numel,
                          (unsigned long long)c->caps->max_numel);
    if (m->nnz > m->numel)
        return proto_fail(c, "nnz %llu above numel %llu", (unsigned long long)m->nnz,
                          (unsigned long long)m->numel);
    if (m->offset > c->caps->max_numel - m->numel)
        return proto_fail(c, "piece [%llu, +%llu) beyond cap max_numel %llu",
                          (unsigned long long)m->offset, (unsigned long long)m->numel,
                          (unsigned long long)c->caps->max_numel);
    if (!cf_ok(m->cf))
        return proto_fail(c, "compression factor %g must be 0 (unset) or finite >= 1", m->cf);
    status = hv_segs(c, m, sum_p);
    if (status != GV_OK)
        return status;
    return hv_body(c, m);
}

bool proto_type_known(int type)
{
    return type > GV_PROTO_MSG_NONE && type < GV_PROTO_MSG_COUNT;
}
