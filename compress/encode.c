/* encode.c: one sparse tensor as two headerless wire segments (indices, values) and the
 * decoder of such segments given their description (n, count, encodings), which the caller
 * carries in its own message header. The decoder trusts nothing: it validates the whole input
 * before it writes a byte, and names what is wrong in one log line. Host memory only. */
#include "compress_internal.h"

#include <math.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the value segment is copied as little-endian memory");

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static size_t varint_len(uint32_t v)
{
    return v < (1u << 7) ? 1 : v < (1u << 14) ? 2 : v < (1u << 21) ? 3 : v < (1u << 28) ? 4 : 5;
}

static size_t bitmap_len(uint64_t n)
{
    return (size_t)((n + 7) / 8);
}

size_t gv_sparse_idx_bound(uint64_t n, uint64_t count)
{
    /* AUTO never exceeds RAW32, but a forced VARINT takes up to 5 bytes an index and a forced
     * BITMAP n/8 bytes whatever the count */
    return GV_MAX((size_t)count * 5, bitmap_len(n));
}

size_t gv_sparse_val_len(uint64_t count, enum gv_val_type vt)
{
    return (size_t)count * (vt == GV_VAL_F16 ? 2 : 4);
}

/* ---------------------------------------------------------------- encoder */

gv_status_t gv_sparse_plan(const struct gv_sparse *sp, enum gv_val_type vt, enum gv_idx_enc enc,
                           struct gv_sparse_layout *lay_p)
{
    if (sp == NULL || (unsigned)vt > GV_VAL_F16 || (sp->count > 0 && sp->val == NULL) ||
        (!sp->dense && sp->count > 0 && sp->idx == NULL)) {
        gv_log(GV_LOG_ERROR, "sparse encode: invalid arguments");
        return GV_ERR_INVAL;
    }
    struct gv_sparse_layout lay = {.desc = {.n = sp->n, .count = sp->count, .vt = vt}};
    lay.val_len = gv_sparse_val_len(sp->count, vt);
    if (sp->dense) {
        if (sp->count != sp->n || (enc != GV_IDX_AUTO && enc != GV_IDX_DENSE)) {
            gv_log(GV_LOG_ERROR,
                   "sparse encode: a dense tensor needs the dense encoding "
                   "and count == n (%u vs %u)",
                   sp->count, sp->n);
            return GV_ERR_INVAL;
        }
        lay.desc.enc = GV_IDX_DENSE;
        lay.idx_len = 0;
        *lay_p = lay;
        return GV_OK;
    }
    /* one pass: range, order, and the exact varint size */
    int ascending = 1;
    size_t vlen = 0;
    int64_t prev = -1;
    for (uint32_t i = 0; i < sp->count; i++) {
        uint32_t x = sp->idx[i];
        if (x >= sp->n) {
            gv_log(GV_LOG_ERROR, "sparse encode: index %u at %u is out of range (n %u)", x, i,
                   sp->n);
            return GV_ERR_INVAL;
        }
        if ((int64_t)x <= prev)
            ascending = 0;
        else if (ascending)
            vlen += varint_len((uint32_t)((int64_t)x - prev - 1));
        prev = x;
    }
    size_t raw = (size_t)sp->count * 4, bmp = bitmap_len(sp->n);
    switch (enc) {
    case GV_IDX_AUTO:
        if (ascending && vlen <= bmp && vlen <= raw)
            lay.desc.enc = GV_IDX_VARINT;
        else if (ascending && bmp <= raw)
            lay.desc.enc = GV_IDX_BITMAP;
        else
            lay.desc.enc = GV_IDX_RAW32;
        break;
    case GV_IDX_RAW32: lay.desc.enc = enc; break;
    case GV_IDX_VARINT:
    case GV_IDX_BITMAP:
        if (!ascending) {
            gv_log(GV_LOG_ERROR, "sparse encode: %s needs strictly ascending indices",
                   gv_idx_enc_str(enc));
            return GV_ERR_INVAL;
        }
        lay.desc.enc = enc;
        break;
    default:
        gv_log(GV_LOG_ERROR, "sparse encode: encoding %s does not fit a sparse tensor",
               gv_idx_enc_str(enc));
        return GV_ERR_INVAL;
    }
    lay.idx_len = lay.desc.enc == GV_IDX_VARINT ? vlen : lay.desc.enc == GV_IDX_BITMAP ? bmp : raw;
    *lay_p = lay;
    return GV_OK;
}

static size_t put_varint(uint8_t *p, uint32_t v)
{
    size_t i = 0;
    while (v >= 0x80) {
        p[i++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[i++] = (uint8_t)v;
    return i;
}

gv_status_t gv_sparse_encode(const struct gv_sparse *sp, enum gv_val_type vt, enum gv_idx_enc enc,
                             void *idx_seg, size_t idx_cap, void *val_seg, size_t val_cap,
                             struct gv_sparse_layout *lay_p)
{
    struct gv_sparse_layout lay;
    gv_status_t status = gv_sparse_plan(sp, vt, enc, &lay);
    if (status != GV_OK)
        return status;
    if ((lay.idx_len > 0 && idx_seg == NULL) || idx_cap < lay.idx_len ||
        (lay.val_len > 0 && val_seg == NULL) || val_cap < lay.val_len) {
        gv_log(GV_LOG_ERROR, "sparse encode: segments of %zu + %zu bytes, %zu + %zu needed",
               idx_cap, val_cap, lay.idx_len, lay.val_len);
        return GV_ERR_INVAL;
    }
    uint8_t *q = idx_seg; /* NULL only when idx_len is 0: nothing below writes then */
    switch (lay.desc.enc) {
    case GV_IDX_RAW32:
        if (lay.idx_len > 0)
            memcpy(q, sp->idx, lay.idx_len);
        break;
    case GV_IDX_VARINT: {
        int64_t prev = -1;
        for (uint32_t i = 0; i < sp->count; i++) {
            q += put_varint(q, (uint32_t)((int64_t)sp->idx[i] - prev - 1));
            prev = sp->idx[i];
        }
        break;
    }
    case GV_IDX_BITMAP:
        if (lay.idx_len > 0)
            memset(q, 0, lay.idx_len);
        for (uint32_t i = 0; i < sp->count; i++)
            q[sp->idx[i] >> 3] |= (uint8_t)(1u << (sp->idx[i] & 7));
        break;
    default: break;
    }
    if (vt == GV_VAL_F32) {
        if (lay.val_len > 0)
            memcpy(val_seg, sp->val, lay.val_len);
    } else {
        uint8_t *v = val_seg;
        for (uint32_t i = 0; i < sp->count; i++) {
            uint16_t h = gv_f32_to_f16(sp->val[i]);
            v[2 * i] = (uint8_t)h;
            v[2 * i + 1] = (uint8_t)(h >> 8);
        }
    }
    if (lay_p != NULL)
        *lay_p = lay;
    return GV_OK;
}

/* ---------------------------------------------------------------- decoder */

gv_status_t gv_sparse_desc_check(const struct gv_sparse_desc *d, size_t idx_len, size_t val_len,
                                 unsigned flags)
{
    if (d == NULL) {
        gv_log(GV_LOG_ERROR, "sparse decode: no description");
        return GV_ERR_INVAL;
    }
    if ((unsigned)d->enc > GV_IDX_BITMAP) {
        gv_log(GV_LOG_ERROR, "sparse decode: unknown index encoding %d", (int)d->enc);
        return GV_ERR_PROTO;
    }
    if ((unsigned)d->vt > GV_VAL_F16) {
        gv_log(GV_LOG_ERROR, "sparse decode: unknown value type %d", (int)d->vt);
        return GV_ERR_PROTO;
    }
    size_t want = idx_len; /* VARINT: known only by parsing */
    switch (d->enc) {
    case GV_IDX_DENSE:
        if (d->count != d->n) {
            gv_log(GV_LOG_ERROR, "sparse decode: dense tensor with count %u != n %u", d->count,
                   d->n);
            return GV_ERR_PROTO;
        }
        want = 0;
        break;
    case GV_IDX_RAW32: want = (size_t)d->count * 4; break;
    case GV_IDX_BITMAP: want = bitmap_len(d->n); break;
    default: break;
    }
    if (d->count > d->n && (d->enc != GV_IDX_RAW32 || !(flags & GV_DECODE_ALLOW_DUP))) {
        gv_log(GV_LOG_ERROR, "sparse decode: count %u exceeds n %u", d->count, d->n);
        return GV_ERR_PROTO;
    }
    if (idx_len != want) {
        gv_log(GV_LOG_ERROR,
               "sparse decode: %s index segment of %u entries is %zu bytes, "
               "expected %zu (%s)",
               gv_idx_enc_str(d->enc), d->count, idx_len, want,
               idx_len < want ? "truncated" : "trailing bytes");
        return GV_ERR_PROTO;
    }
    size_t vwant = gv_sparse_val_len(d->count, d->vt);
    if (val_len != vwant) {
        gv_log(GV_LOG_ERROR,
               "sparse decode: value segment is %zu bytes, %u %s values need %zu "
               "(%s)",
               val_len, d->count, d->vt == GV_VAL_F16 ? "f16" : "f32", vwant,
               val_len < vwant ? "truncated" : "trailing bytes");
        return GV_ERR_PROTO;
    }
    return GV_OK;
}

/* Walks the index segment of a checked description and lengths, calling back per entry, and
 * validates every index. emit == NULL: validation only. Each returns GV_ERR_PROTO (logged) on
 * the first bad one. */
typedef void (*idx_emit_fn)(void *arg, uint32_t i, uint32_t idx);

static gv_status_t walk_raw32(const struct gv_sparse_desc *d, const uint8_t *q, unsigned flags,
                              idx_emit_fn emit, void *arg)
{
    int64_t prev = -1;
    for (uint32_t i = 0; i < d->count; i++) {
        uint32_t x = get_u32(q + (size_t)i * 4);
        if (x >= d->n) {
            gv_log(GV_LOG_ERROR, "sparse decode: index %u at entry %u is out of range (n %u)", x, i,
                   d->n);
            return GV_ERR_PROTO;
        }
        if (!(flags & GV_DECODE_ALLOW_DUP) && (int64_t)x <= prev) {
            gv_log(GV_LOG_ERROR, "sparse decode: index %u at entry %u is %s (previous %lld)", x, i,
                   (int64_t)x == prev ? "a duplicate" : "out of order", (long long)prev);
            return GV_ERR_PROTO;
        }
        prev = x;
        if (emit != NULL)
            emit(arg, i, x);
    }
    return GV_OK;
}

/* One LEB128 value of at most 32 bits in minimal form at q[*pos], advancing *pos. */
static gv_status_t get_varint(const uint8_t *q, size_t qlen, size_t *pos, uint32_t i,
                              uint32_t count, uint64_t *v_p)
{
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
        if (*pos >= qlen) {
            gv_log(GV_LOG_ERROR, "sparse decode: varint indices truncated at entry %u of %u", i,
                   count);
            return GV_ERR_PROTO;
        }
        uint8_t b = q[(*pos)++];
        if (shift == 28 && (b & 0xF0) != 0) {
            gv_log(GV_LOG_ERROR, "sparse decode: varint at entry %u overflows 32 bits", i);
            return GV_ERR_PROTO;
        }
        v |= (uint64_t)(b & 0x7F) << shift;
        if ((b & 0x80) == 0) {
            if (b == 0 && shift > 0) {
                gv_log(GV_LOG_ERROR, "sparse decode: varint at entry %u is not minimal", i);
                return GV_ERR_PROTO;
            }
            *v_p = v;
            return GV_OK;
        }
    }
}

static gv_status_t walk_varint(const struct gv_sparse_desc *d, const uint8_t *q, size_t qlen,
                               idx_emit_fn emit, void *arg)
{
    size_t pos = 0;
    int64_t prev = -1;
    for (uint32_t i = 0; i < d->count; i++) {
        uint64_t v;
        gv_status_t status = get_varint(q, qlen, &pos, i, d->count, &v);
        if (status != GV_OK)
            return status;
        int64_t x = prev + 1 + (int64_t)v;
        if (x >= (int64_t)d->n) {
            gv_log(GV_LOG_ERROR, "sparse decode: index %lld at entry %u is out of range (n %u)",
                   (long long)x, i, d->n);
            return GV_ERR_PROTO;
        }
        prev = x;
        if (emit != NULL)
            emit(arg, i, (uint32_t)x);
    }
    if (pos != qlen) {
        gv_log(GV_LOG_ERROR, "sparse decode: %zu trailing bytes after %u varint indices",
               qlen - pos, d->count);
        return GV_ERR_PROTO;
    }
    return GV_OK;
}

static gv_status_t walk_bitmap(const struct gv_sparse_desc *d, const uint8_t *q, idx_emit_fn emit,
                               void *arg)
{
    const uint32_t n = d->n;
    size_t nbytes = bitmap_len(n);
    if ((n & 7) != 0 && (q[nbytes - 1] >> (n & 7)) != 0) {
        gv_log(GV_LOG_ERROR, "sparse decode: bitmap has bits set beyond n %u", n);
        return GV_ERR_PROTO;
    }
    uint64_t pop = 0;
    for (size_t b = 0; b < nbytes; b++)
        pop += (uint64_t)__builtin_popcount(q[b]);
    if (pop != d->count) {
        gv_log(GV_LOG_ERROR, "sparse decode: bitmap holds %llu indices, the description says %u",
               (unsigned long long)pop, d->count);
        return GV_ERR_PROTO;
    }
    uint32_t i = 0;
    for (size_t b = 0; emit != NULL && b < nbytes; b++) {
        unsigned bits = q[b];
        while (bits != 0) {
            emit(arg, i++, (uint32_t)(b * 8 + (size_t)__builtin_ctz(bits)));
            bits &= bits - 1;
        }
    }
    return GV_OK;
}

static gv_status_t walk_indices(const struct gv_sparse_desc *d, const uint8_t *q, size_t qlen,
                                unsigned flags, idx_emit_fn emit, void *arg)
{
    switch (d->enc) {
    case GV_IDX_DENSE:
        for (uint32_t i = 0; emit != NULL && i < d->n; i++)
            emit(arg, i, i);
        return GV_OK;
    case GV_IDX_RAW32: return walk_raw32(d, q, flags, emit, arg);
    case GV_IDX_VARINT: return walk_varint(d, q, qlen, emit, arg);
    case GV_IDX_BITMAP: return walk_bitmap(d, q, emit, arg);
    default: return GV_ERR_PROTO;
    }
}

static float get_val(enum gv_val_type vt, const uint8_t *v, uint32_t i)
{
    if (vt == GV_VAL_F16)
        return gv_f16_to_f32((uint16_t)(v[2 * (size_t)i] | v[2 * (size_t)i + 1] << 8));
    float f;
    memcpy(&f, v + 4 * (size_t)i, 4);
    return f;
}

/* The description, the lengths, every index and (with GV_DECODE_FINITE) every value. */
static gv_status_t decode_check(const struct gv_sparse_desc *d, const void *idx_seg, size_t idx_len,
                                const void *val_seg, size_t val_len, unsigned flags)
{
    gv_status_t status = gv_sparse_desc_check(d, idx_len, val_len, flags);
    if (status != GV_OK)
        return status;
    if ((idx_len > 0 && idx_seg == NULL) || (val_len > 0 && val_seg == NULL)) {
        gv_log(GV_LOG_ERROR, "sparse decode: a segment of %zu bytes at NULL",
               idx_seg == NULL ? idx_len : val_len);
        return GV_ERR_INVAL;
    }
    if (flags & GV_DECODE_FINITE) {
        for (uint32_t i = 0; i < d->count; i++) {
            if (!isfinite(get_val(d->vt, val_seg, i))) {
                gv_log(GV_LOG_ERROR, "sparse decode: value at entry %u is not finite", i);
                return GV_ERR_PROTO;
            }
        }
    }
    return walk_indices(d, idx_seg, idx_len, flags, NULL, NULL);
}

struct emit_arrays {
    enum gv_val_type vt;
    const uint8_t *v;
    uint32_t *idx;
    float *val;
    float *dense;
};

static void emit_arrays(void *arg, uint32_t i, uint32_t idx)
{
    struct emit_arrays *a = arg;
    a->idx[i] = idx;
    a->val[i] = get_val(a->vt, a->v, i);
}

static void emit_add(void *arg, uint32_t i, uint32_t idx)
{
    struct emit_arrays *a = arg;
    a->dense[idx] += get_val(a->vt, a->v, i);
}

gv_status_t gv_sparse_decode(const struct gv_sparse_desc *d, const void *idx_seg, size_t idx_len,
                             const void *val_seg, size_t val_len, unsigned flags, uint32_t *idx_out,
                             float *val_out, uint32_t cap)
{
    gv_status_t status = decode_check(d, idx_seg, idx_len, val_seg, val_len, flags);
    if (status != GV_OK)
        return status;
    if (cap < d->count || (d->count > 0 && (idx_out == NULL || val_out == NULL))) {
        gv_log(GV_LOG_ERROR, "sparse decode: %u entries do not fit the output (cap %u)", d->count,
               cap);
        return GV_ERR_INVAL;
    }
    struct emit_arrays a = {.vt = d->vt, .v = val_seg, .idx = idx_out, .val = val_out};
    return walk_indices(d, idx_seg, idx_len, flags, emit_arrays, &a);
}

gv_status_t gv_sparse_decode_add(const struct gv_sparse_desc *d, const void *idx_seg,
                                 size_t idx_len, const void *val_seg, size_t val_len,
                                 unsigned flags, float *dense)
{
    gv_status_t status = decode_check(d, idx_seg, idx_len, val_seg, val_len, flags);
    if (status != GV_OK)
        return status;
    if (dense == NULL && d->count > 0) {
        gv_log(GV_LOG_ERROR, "sparse decode: no dense buffer for %u entries", d->count);
        return GV_ERR_INVAL;
    }
    struct emit_arrays a = {.vt = d->vt, .v = val_seg, .dense = dense};
    return walk_indices(d, idx_seg, idx_len, flags, emit_add, &a);
}
