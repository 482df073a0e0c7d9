/* wire.c: what the payload of a message must be, as servers and workers see it: the checks a
 * server runs on a PUSH header and a worker on an UPDATE header before any payload byte lands
 * in a buffer, the sparse payload decoder both use, the round membership's check, and the one
 * place where the wire's enums (proto/) meet adapt/'s and compress/'s (the decision's level,
 * the payload's index and value encodings), and what an update means: the averaging rule (the
 * checksum of the drift check is in cksum.c). Pure functions over decoded headers and buffers: the
 * fuzz targets (tests/fuzz/) call exactly these. */
#include "gv_ps.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum gv_proto_level gv_ps_level_to_proto(enum gv_adapt_level level)
{
    switch (level) {
    case GV_ADAPT_LEVEL_CANDIDATE: return GV_PROTO_LEVEL_CANDIDATE;
    case GV_ADAPT_LEVEL_FLOOR: return GV_PROTO_LEVEL_FLOOR;
    default: return GV_PROTO_LEVEL_DENSE;
    }
}

enum gv_adapt_level gv_ps_level_from_proto(enum gv_proto_level level)
{
    switch (level) {
    case GV_PROTO_LEVEL_CANDIDATE: return GV_ADAPT_LEVEL_CANDIDATE;
    case GV_PROTO_LEVEL_FLOOR: return GV_ADAPT_LEVEL_FLOOR;
    default: return GV_ADAPT_LEVEL_DENSE;
    }
}

void gv_ps_decision_to_proto(const struct gv_ps_decision *d, struct gv_proto_decision *out)
{
    *out = (struct gv_proto_decision){.level = gv_ps_level_to_proto(d->level),
                                      .theta_min = d->theta_min,
                                      .cf_candidate = d->cf_candidate,
                                      .cf_send = d->cf_send,
                                      .lr = d->lr,
                                      .resync = d->resync,
                                      .ckpt_iter = d->ckpt_iter,
                                      .ckpt_status = d->ckpt_status};
}

void gv_ps_decision_from_proto(const struct gv_proto_decision *in, struct gv_ps_decision *d)
{
    *d = (struct gv_ps_decision){.level = gv_ps_level_from_proto(in->level),
                                 .theta_min = in->theta_min,
                                 .cf_candidate = in->cf_candidate,
                                 .cf_send = in->cf_send,
                                 .lr = in->lr,
                                 .resync = in->resync,
                                 .ckpt_iter = in->ckpt_iter,
                                 .ckpt_status = in->ckpt_status};
}

bool gv_ps_decision_equal(const struct gv_ps_decision *a, const struct gv_ps_decision *b)
{
    return a->level == b->level && a->theta_min == b->theta_min &&
           a->cf_candidate == b->cf_candidate && a->cf_send == b->cf_send && a->lr == b->lr &&
           a->ckpt_iter == b->ckpt_iter && a->ckpt_status == b->ckpt_status;
}

enum gv_proto_enc gv_ps_idx_enc_to_proto(enum gv_idx_enc enc)
{
    switch (enc) {
    case GV_IDX_RAW32: return GV_PROTO_ENC_U32;
    case GV_IDX_VARINT: return GV_PROTO_ENC_DELTA_VARINT;
    case GV_IDX_BITMAP: return GV_PROTO_ENC_BITMAP;
    default: return GV_PROTO_ENC_NONE; /* dense: no index segment */
    }
}

gv_status_t gv_ps_idx_enc_from_proto(enum gv_proto_enc enc, enum gv_idx_enc *out)
{
    switch (enc) {
    case GV_PROTO_ENC_U32: *out = GV_IDX_RAW32; return GV_OK;
    case GV_PROTO_ENC_DELTA_VARINT: *out = GV_IDX_VARINT; return GV_OK;
    case GV_PROTO_ENC_BITMAP: *out = GV_IDX_BITMAP; return GV_OK;
    default: return GV_ERR_PROTO;
    }
}

enum gv_proto_enc gv_ps_val_type_to_proto(enum gv_val_type vt)
{
    return vt == GV_VAL_F16 ? GV_PROTO_ENC_F16 : GV_PROTO_ENC_F32;
}

gv_status_t gv_ps_val_type_from_proto(enum gv_proto_enc enc, enum gv_val_type *out)
{
    switch (enc) {
    case GV_PROTO_ENC_F32: *out = GV_VAL_F32; return GV_OK;
    case GV_PROTO_ENC_F16: *out = GV_VAL_F16; return GV_OK;
    default: return GV_ERR_PROTO;
    }
}

/* ---------------------------------------------------------------- the update: the average */

/* A power-of-two divisor is applied as a product by its reciprocal: exact, so the quotient's
 * bits (a division costs several times a product). */
void gv_ps_average(float *x, size_t n, uint32_t num_workers)
{
    gv_ps_average_sum(x, NULL, false, num_workers, 0, n);
}

void gv_ps_average_sum(float *acc, const float *x, bool raw, uint32_t num_workers, size_t a,
                       size_t b)
{
    const float div = (float)num_workers, inv = 1.0f / div;
    if ((num_workers & (num_workers - 1)) == 0) {
        if (x != NULL && raw)
            for (size_t i = a; i < b; i++)
                acc[i] = ((0.0f + acc[i]) + x[i]) * inv;
        else if (x != NULL)
            for (size_t i = a; i < b; i++)
                acc[i] = (acc[i] + x[i]) * inv;
        else if (raw)
            for (size_t i = a; i < b; i++)
                acc[i] = (0.0f + acc[i]) * inv;
        else
            for (size_t i = a; i < b; i++)
                acc[i] = acc[i] * inv;
        return;
    }
    if (x != NULL && raw)
        for (size_t i = a; i < b; i++)
            acc[i] = ((0.0f + acc[i]) + x[i]) / div;
    else if (x != NULL)
        for (size_t i = a; i < b; i++)
            acc[i] = (acc[i] + x[i]) / div;
    else if (raw)
        for (size_t i = a; i < b; i++)
            acc[i] = (0.0f + acc[i]) / div;
    else
        for (size_t i = a; i < b; i++)
            acc[i] = acc[i] / div;
}

/* ---------------------------------------------------------------- payload checks */

static void why_set(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void why_set(char *why, size_t len, const char *fmt, ...)
{
    if (why == NULL || len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
}

/* A dense segment of n values of type vt. */
static bool wire_dense_seg(const struct gv_proto_seg *g, uint64_t n, enum gv_val_type vt)
{
    return g->kind == GV_PROTO_SEG_DENSE && g->enc == gv_ps_val_type_to_proto(vt) &&
           g->bytes == gv_sparse_val_len(n, vt);
}

/* A values segment of f32 or f16 values. */
static bool wire_values_seg(const struct gv_proto_seg *g)
{
    return g->kind == GV_PROTO_SEG_VALUES &&
           (g->enc == GV_PROTO_ENC_F32 || g->enc == GV_PROTO_ENC_F16);
}

gv_status_t gv_ps_push_check(const struct gv_proto_msg *m, uint64_t payload_len, uint32_t shard,
                             uint64_t n, const struct gv_ps_decision *d, enum gv_val_type dense_vt,
                             size_t rcap, bool *dense_p, char *why, size_t why_len)
{
    bool dense = m->n_segs == 1 && wire_dense_seg(&m->segs[0], n, dense_vt) &&
                 payload_len == m->segs[0].bytes && payload_len <= rcap;
    /* the decoder guarantees payload_len == the sum of the segments */
    bool sparse = m->n_segs == 2 && m->segs[0].kind == GV_PROTO_SEG_INDICES &&
                  wire_values_seg(&m->segs[1]) && payload_len <= rcap && n <= UINT32_MAX;
    enum gv_proto_level level = gv_ps_level_to_proto(d->level);
    if (m->shard != shard || m->numel != n || m->u.push.level != level || m->cf != d->cf_send ||
        (dense == (d->level != GV_ADAPT_LEVEL_DENSE)) || (!dense && !sparse)) {
        why_set(why, why_len,
                "shard %u numel %" PRIu64 " level %s CF %g with %u segments (%" PRIu64
                " bytes), expected shard %u, numel %" PRIu64 ", level %s, CF %g",
                m->shard, m->numel, gv_proto_level_str(m->u.push.level), m->cf, m->n_segs,
                payload_len, shard, n, gv_proto_level_str(level), d->cf_send);
        return GV_ERR_PROTO;
    }
    *dense_p = dense;
    return GV_OK;
}

static void wire_bad_value(char *why, size_t why_len, float v, uint64_t at, uint64_t n)
{
    why_set(why, why_len, "%s at entry %" PRIu64 " of %" PRIu64,
            isnan(v) ? "NaN"
            : v > 0  ? "+Inf"
                     : "-Inf",
            at, n);
}

gv_status_t gv_ps_push_finite(const struct gv_proto_msg *m, const uint8_t *payload, char *why,
                              size_t why_len)
{
    gv_status_t status = gv_ps_stats_check(&m->u.push.stats, why, why_len);
    if (status != GV_OK || m->n_segs == 0)
        return status;
    const struct gv_proto_seg *vs = &m->segs[m->n_segs - 1]; /* DENSE, or VALUES after INDICES */
    const uint8_t *v = payload + (m->n_segs == 2 ? m->segs[0].bytes : 0);
    bool f16 = vs->enc == GV_PROTO_ENC_F16;
    uint64_t n = GV_MIN(vs->count, vs->bytes / (f16 ? 2 : 4)); /* within the received bytes */
    if (f16) {
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, v + 2 * i, 2);
            if ((h & 0x7c00u) == 0x7c00u) { /* exponent all ones: Inf or NaN */
                wire_bad_value(why, why_len, gv_f16_to_f32(h), i, n);
                return GV_ERR_PROTO;
            }
        }
        return GV_OK;
    }
    /* f32: the exponent bits of every value, no branch per entry (the common case is clean) */
    uint32_t worst = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, v + 4 * i, 4);
        worst |= (b & 0x7f800000u) == 0x7f800000u;
    }
    if (worst == 0)
        return GV_OK;
    for (uint64_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, v + 4 * i, 4);
        if (!isfinite(f)) {
            wire_bad_value(why, why_len, f, i, n);
            break;
        }
    }
    return GV_ERR_PROTO;
}

gv_status_t gv_ps_stats_check(const struct gv_proto_iter_stats *st, char *why, size_t why_len)
{
    const struct {
        const char *name;
        double v;
        bool signed_ok;
    } f[] = {
        {"||g_ef||^2", st->g_ef_sq, false},
        {"||g_min||^2", st->g_min_sq, false},
        {"||g_c||^2", st->g_c_sq, false},
        {"compute time", st->compute_s, false},
        {"compression time", st->compress_s, false},
        {"communication time", st->comm_s, false},
        {"pause time", st->pause_s, false},
        {"loss", st->loss, true},
        {"learning rate", st->lr, false},
    };
    for (size_t i = 0; i < GV_ARRAY_LEN(f); i++)
        if (!isfinite(f[i].v) || (!f[i].signed_ok && f[i].v < 0)) {
            why_set(why, why_len, "statistic %s = %g (must be finite%s)", f[i].name, f[i].v,
                    f[i].signed_ok ? "" : " and >= 0");
            return GV_ERR_PROTO;
        }
    for (uint32_t i = 0; st->layer_norms != NULL && i < st->n_layer_norms; i++)
        if (!isfinite(st->layer_norms[i]) || st->layer_norms[i] < 0) {
            why_set(why, why_len, "statistic layer norm %u = %g (must be finite and >= 0)", i,
                    st->layer_norms[i]);
            return GV_ERR_PROTO;
        }
    return GV_OK;
}

gv_status_t gv_ps_update_check(const struct gv_proto_msg *m, uint64_t iter, uint32_t shard,
                               uint64_t n, enum gv_val_type dense_vt, size_t ucap, bool accordion,
                               uint32_t n_tensors, bool *dense_p)
{
    if (m->iteration != iter || m->shard != shard || m->numel != n || m->n_segs < 1 ||
        n > UINT32_MAX)
        return GV_ERR_PROTO;
    uint32_t nseg = m->n_segs;
    if (accordion) {
        const struct gv_proto_seg *last = &m->segs[m->n_segs - 1];
        if (last->kind != GV_PROTO_SEG_RAW || last->bytes != n_tensors)
            return GV_ERR_PROTO;
        nseg--;
    }
    if (nseg == 1 && wire_dense_seg(&m->segs[0], n, dense_vt) && m->segs[0].bytes <= ucap) {
        *dense_p = true;
        return GV_OK;
    }
    if (nseg == 2 && m->segs[0].kind == GV_PROTO_SEG_INDICES && wire_values_seg(&m->segs[1]) &&
        m->segs[0].bytes <= ucap && m->segs[1].bytes <= ucap &&
        m->segs[0].bytes + m->segs[1].bytes <= ucap) {
        *dense_p = false;
        return GV_OK;
    }
    return GV_ERR_PROTO;
}

void gv_ps_f16_encode(const float *src, size_t n, uint16_t *dst)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = gv_f32_to_f16(gv_f16_round_sat(src[i]));
}

void gv_ps_f16_decode(const uint16_t *src, size_t n, float *dst)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = gv_f16_to_f32(src[i]);
}

enum gv_proto_enc gv_ps_sparse_segs(struct gv_proto_msg *m, const struct gv_sparse_layout *lay)
{
    const struct gv_sparse_desc *d = &lay->desc;
    enum gv_proto_enc ie = gv_ps_idx_enc_to_proto(d->enc);
    gv_proto_seg_add(m, GV_PROTO_SEG_INDICES, ie, d->count, lay->idx_len);
    gv_proto_seg_add(m, GV_PROTO_SEG_VALUES, gv_ps_val_type_to_proto(d->vt), d->count,
                     lay->val_len);
    m->nnz = d->count;
    return ie;
}

gv_status_t gv_ps_sparse_desc(const struct gv_proto_msg *m, uint32_t n, struct gv_sparse_desc *d)
{
    if (m->n_segs < 2 || m->segs[0].kind != GV_PROTO_SEG_INDICES ||
        m->segs[1].kind != GV_PROTO_SEG_VALUES || m->nnz > n)
        return GV_ERR_PROTO;
    *d = (struct gv_sparse_desc){.n = n, .count = (uint32_t)m->nnz};
    if (gv_ps_idx_enc_from_proto(m->segs[0].enc, &d->enc) != GV_OK ||
        gv_ps_val_type_from_proto(m->segs[1].enc, &d->vt) != GV_OK)
        return GV_ERR_PROTO;
    return GV_OK;
}

gv_status_t gv_ps_sparse_add(const struct gv_proto_msg *m, const uint8_t *payload, uint32_t n,
                             float *acc)
{
    struct gv_sparse_desc desc;
    if (gv_ps_sparse_desc(m, n, &desc) != GV_OK)
        return GV_ERR_PROTO;
    size_t il = (size_t)m->segs[0].bytes;
    gv_status_t status =
        gv_sparse_decode_add(&desc, payload, il, payload + il, (size_t)m->segs[1].bytes, 0, acc);
    return status == GV_OK ? GV_OK : GV_ERR_PROTO;
}

gv_status_t gv_ps_memb_check(const uint8_t *memb, uint32_t num_workers, unsigned allowed)
{
    for (uint32_t w = 0; w < num_workers; w++)
        if ((memb[w] & ~allowed) != 0)
            return GV_ERR_PROTO;
    return GV_OK;
}
