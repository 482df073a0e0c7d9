/* msg.c: helpers on struct gv_proto_msg that need no protobuf: construction, segment
 * descriptors, comparison, and the names used in logs. */
#include "gv_proto.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- message helpers */

void gv_proto_msg_init(struct gv_proto_msg *m, enum gv_proto_msg_type type)
{
    memset(m, 0, sizeof(*m));
    m->type = type;
}

gv_status_t gv_proto_seg_add(struct gv_proto_msg *m, enum gv_proto_seg_kind kind,
                             enum gv_proto_enc enc, uint64_t count, uint64_t bytes)
{
    if (m->n_segs >= GV_PROTO_MAX_SEGMENTS) {
        gv_log(GV_LOG_ERROR, "proto: %s message already has %d segments",
               gv_proto_msg_type_str(m->type), GV_PROTO_MAX_SEGMENTS);
        return GV_ERR_INVAL;
    }
    m->segs[m->n_segs++] = (struct gv_proto_seg){kind, enc, count, bytes};
    return GV_OK;
}

gv_status_t gv_proto_enc_fixed_bytes(enum gv_proto_enc enc, uint64_t count, uint64_t numel,
                                     uint64_t *bytes_p)
{
    uint64_t width;

    switch (enc) {
    case GV_PROTO_ENC_U32:
    case GV_PROTO_ENC_F32: width = 4; break;
    case GV_PROTO_ENC_F16: width = 2; break;
    case GV_PROTO_ENC_BYTES: width = 1; break;
    case GV_PROTO_ENC_BITMAP: *bytes_p = numel / 8 + (numel % 8 != 0); return GV_OK;
    default: return GV_ERR_INVAL; /* DELTA_VARINT is variable; NONE and unknown have no size */
    }
    if (count > UINT64_MAX / width)
        return GV_ERR_INVAL;
    *bytes_p = count * width;
    return GV_OK;
}

uint64_t gv_proto_payload_len(const struct gv_proto_msg *m)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < m->n_segs && i < GV_PROTO_MAX_SEGMENTS; i++)
        sum += m->segs[i].bytes;
    return sum;
}

/* ---------------------------------------------------------------- names */

static const char *name_of(const char *const *names, size_t n, int v)
{
    if (v < 0 || (size_t)v >= n || names[v] == NULL)
        return "unknown";
    return names[v];
}

const char *gv_proto_msg_type_str(enum gv_proto_msg_type type)
{
    static const char *const names[] = {"none",   "hello",     "challenge", "auth",   "welcome",
                                        "refuse", "model",     "push",      "update", "decision",
                                        "stats",  "heartbeat", "bye",       "error",  "layout"};
    return name_of(names, GV_ARRAY_LEN(names), (int)type);
}

const char *gv_proto_role_str(enum gv_proto_role role)
{
    static const char *const names[] = {"none", "worker", "server", "client"};
    return name_of(names, GV_ARRAY_LEN(names), (int)role);
}

const char *gv_proto_dtype_str(enum gv_proto_dtype dtype)
{
    static const char *const names[] = {"none", "f32", "f16", "bf16"};
    return name_of(names, GV_ARRAY_LEN(names), (int)dtype);
}

const char *gv_proto_level_str(enum gv_proto_level level)
{
    static const char *const names[] = {"none", "candidate", "floor", "dense"};
    return name_of(names, GV_ARRAY_LEN(names), (int)level);
}

const char *gv_proto_seg_kind_str(enum gv_proto_seg_kind kind)
{
    static const char *const names[] = {"none", "indices", "values", "dense", "raw"};
    return name_of(names, GV_ARRAY_LEN(names), (int)kind);
}

const char *gv_proto_enc_str(enum gv_proto_enc enc)
{
    static const char *const names[] = {"none", "u32", "delta_varint", "bitmap",
                                        "f32",  "f16", "bytes"};
    return name_of(names, GV_ARRAY_LEN(names), (int)enc);
}

const char *gv_proto_refuse_str(enum gv_proto_refuse code)
{
    static const char *const names[] = {"none", "version", "auth", "cluster",
                                        "full", "model",   "role", "other"};
    return name_of(names, GV_ARRAY_LEN(names), (int)code);
}

/* ---------------------------------------------------------------- comparison */

static bool dbl_eq(double a, double b)
{
    return a == b || (isnan(a) && isnan(b));
}

static bool str_eq(const char *a, const char *b)
{
    return strcmp(a != NULL ? a : "", b != NULL ? b : "") == 0;
}

static bool bytes_eq(const struct gv_proto_bytes *a, const struct gv_proto_bytes *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

static bool stats_eq(const struct gv_proto_iter_stats *a, const struct gv_proto_iter_stats *b)
{
    if (!dbl_eq(a->g_ef_sq, b->g_ef_sq) || !dbl_eq(a->g_min_sq, b->g_min_sq) ||
        !dbl_eq(a->g_c_sq, b->g_c_sq) || !dbl_eq(a->compute_s, b->compute_s) ||
        !dbl_eq(a->compress_s, b->compress_s) || !dbl_eq(a->comm_s, b->comm_s) ||
        !dbl_eq(a->pause_s, b->pause_s) || a->samples != b->samples || !dbl_eq(a->loss, b->loss) ||
        !dbl_eq(a->lr, b->lr) || a->n_layer_norms != b->n_layer_norms ||
        a->ckpt_iter != b->ckpt_iter || a->ckpt_status != b->ckpt_status)
        return false;
    for (uint32_t i = 0; i < a->n_layer_norms; i++)
        if (!dbl_eq(a->layer_norms[i], b->layer_norms[i]))
            return false;
    return true;
}

static bool decision_eq(const struct gv_proto_decision *a, const struct gv_proto_decision *b)
{
    return a->level == b->level && dbl_eq(a->theta_min, b->theta_min) &&
           dbl_eq(a->cf_candidate, b->cf_candidate) && dbl_eq(a->cf_send, b->cf_send) &&
           dbl_eq(a->lr, b->lr) && a->resync == b->resync && a->ckpt_iter == b->ckpt_iter &&
           a->ckpt_status == b->ckpt_status;
}

static bool body_eq(const struct gv_proto_msg *a, const struct gv_proto_msg *b)
{
    switch (a->type) {
    case GV_PROTO_MSG_HELLO:
        return a->u.hello.num_workers == b->u.hello.num_workers &&
               a->u.hello.num_servers == b->u.hello.num_servers &&
               a->u.hello.features == b->u.hello.features &&
               bytes_eq(&a->u.hello.nonce, &b->u.hello.nonce) &&
               str_eq(a->u.hello.cluster_id, b->u.hello.cluster_id);
    case GV_PROTO_MSG_CHALLENGE: return bytes_eq(&a->u.challenge.nonce, &b->u.challenge.nonce);
    case GV_PROTO_MSG_AUTH: return bytes_eq(&a->u.auth.mac, &b->u.auth.mac);
    case GV_PROTO_MSG_WELCOME:
        return memcmp(&a->u.welcome, &b->u.welcome, sizeof(a->u.welcome)) == 0;
    case GV_PROTO_MSG_REFUSE:
        return a->u.refuse.code == b->u.refuse.code && str_eq(a->u.refuse.text, b->u.refuse.text);
    case GV_PROTO_MSG_MODEL:
        return a->u.model.offset == b->u.model.offset && a->u.model.checksum == b->u.model.checksum;
    case GV_PROTO_MSG_PUSH:
        return a->u.push.level == b->u.push.level && a->u.push.index_enc == b->u.push.index_enc &&
               stats_eq(&a->u.push.stats, &b->u.push.stats) &&
               a->u.push.replica_checksum == b->u.push.replica_checksum;
    case GV_PROTO_MSG_UPDATE:
        return decision_eq(&a->u.update.decision, &b->u.update.decision) &&
               a->u.update.model_checksum == b->u.update.model_checksum;
    case GV_PROTO_MSG_DECISION: return decision_eq(&a->u.decision, &b->u.decision);
    case GV_PROTO_MSG_STATS:
        return a->u.stats.workers == b->u.stats.workers &&
               stats_eq(&a->u.stats.stats, &b->u.stats.stats);
    case GV_PROTO_MSG_ERROR:
        return a->u.error.code == b->u.error.code && str_eq(a->u.error.text, b->u.error.text);
    default: return true;
    }
}

bool gv_proto_msg_equal(const struct gv_proto_msg *a, const struct gv_proto_msg *b)
{
    if (a->type != b->type || a->role != b->role || a->rank != b->rank ||
        a->iteration != b->iteration || a->shard != b->shard || a->tensor_id != b->tensor_id ||
        a->dtype != b->dtype || a->numel != b->numel || a->nnz != b->nnz || !dbl_eq(a->cf, b->cf) ||
        a->offset != b->offset || a->n_segs != b->n_segs || a->n_segs > GV_PROTO_MAX_SEGMENTS)
        return false;
    for (uint32_t i = 0; i < a->n_segs; i++)
        if (a->segs[i].kind != b->segs[i].kind || a->segs[i].enc != b->segs[i].enc ||
            a->segs[i].count != b->segs[i].count || a->segs[i].bytes != b->segs[i].bytes)
            return false;
    return body_eq(a, b);
}
