/* test_encode.c: the sparse segment encoding. Round trips for every compressor and every
 * encoding (f32 and f16), the density-based choice, exact sizes; the decoder refusing each kind
 * of bad segment or description with GV_ERR_PROTO, a log line naming it, and the dense buffer
 * untouched; scatter-add accumulating duplicates; a mutation fuzz loop over segments and
 * descriptions (never OK with a bad index, never out of bounds under ASan). */
#include "tutil.h"

struct enc {
    uint8_t *ib, *vb;
    size_t icap, vcap;
};

static void enc_alloc(struct enc *e, uint32_t n, uint32_t count)
{
    e->icap = gv_sparse_idx_bound(n, count);
    e->vcap = gv_sparse_val_len(count, GV_VAL_F32);
    e->ib = malloc(e->icap + 1);
    e->vb = malloc(e->vcap + 1);
}

static void enc_free(struct enc *e)
{
    free(e->ib);
    free(e->vb);
}

static struct tu_log logc;

/* The segments in e, of ilen and vlen bytes as described by d, are refused. d->n <= 64. */
static void expect_proto(const struct enc *e, const struct gv_sparse_desc *d, size_t ilen,
                         size_t vlen, unsigned flags, const char *needle, const char *what)
{
    float dense[64];
    for (int i = 0; i < 64; i++)
        dense[i] = (float)i;
    logc.n = 0;
    logc.line[0] = 0;
    gv_status_t st = gv_sparse_decode_add(d, e->ib, ilen, e->vb, vlen, flags, dense);
    GV_CHECK_MSG(st == GV_ERR_PROTO, "%s: got %s", what, gv_status_str(st));
    GV_CHECK_MSG(logc.n == 1 && strstr(logc.line, needle) != NULL, "%s: log '%s' (want '%s')", what,
                 logc.line, needle);
    int same = 1;
    for (int i = 0; i < 64; i++)
        same &= dense[i] == (float)i;
    GV_CHECK_MSG(same, "%s: dense buffer changed", what);
}

/* Encodes s with enc / vt, checks the plan, decodes both ways, compares. */
static void round_trip(const struct gv_sparse *s, enum gv_val_type vt, enum gv_idx_enc enc,
                       const char *what)
{
    struct enc e;
    enc_alloc(&e, s->n, s->count);
    struct gv_sparse_layout plan, info;
    GV_CHECK_OK(gv_sparse_plan(s, vt, enc, &plan));
    gv_status_t st = gv_sparse_encode(s, vt, enc, e.ib, e.icap, e.vb, e.vcap, &info);
    GV_CHECK_MSG(st == GV_OK, "%s: encode %s", what, gv_status_str(st));
    if (st != GV_OK) {
        enc_free(&e);
        return;
    }
    GV_CHECK(plan.desc.n == info.desc.n && plan.desc.count == info.desc.count &&
             plan.desc.enc == info.desc.enc && plan.desc.vt == info.desc.vt &&
             plan.idx_len == info.idx_len && plan.val_len == info.val_len);
    GV_CHECK(info.desc.n == s->n && info.desc.count == s->count && info.desc.vt == vt);
    GV_CHECK(info.idx_len <= e.icap && info.val_len <= e.vcap);
    GV_CHECK(enc == GV_IDX_AUTO || info.desc.enc == enc);
    uint32_t *idx = malloc(((size_t)s->n + 1) * 4);
    float *val = malloc(((size_t)s->n + 1) * 4);
    st = gv_sparse_decode(&info.desc, e.ib, info.idx_len, e.vb, info.val_len, 0, idx, val, s->n);
    GV_CHECK_MSG(st == GV_OK, "%s: decode %s", what, gv_status_str(st));
    int ok = 1;
    for (uint32_t i = 0; i < s->count && st == GV_OK; i++) {
        uint32_t want_idx = s->dense ? i : s->idx[i];
        float want = vt == GV_VAL_F16 ? gv_f16_to_f32(gv_f32_to_f16(s->val[i])) : s->val[i];
        ok &= idx[i] == want_idx && tu_bits_eq(val[i], want);
    }
    GV_CHECK_MSG(ok, "%s: round trip differs", what);
    /* scatter-add into a dense buffer holding 1.0 */
    float *dense = malloc(((size_t)s->n + 1) * 4);
    for (uint32_t i = 0; i < s->n; i++)
        dense[i] = 1.0f;
    GV_CHECK_OK(gv_sparse_decode_add(&info.desc, e.ib, info.idx_len, e.vb, info.val_len, 0, dense));
    ok = 1;
    for (uint32_t i = 0; i < s->count; i++)
        ok &= dense[idx[i]] == 1.0f + val[i];
    GV_CHECK(ok);
    free(dense);
    free(idx);
    free(val);
    enc_free(&e);
}

static void test_round_trips(void)
{
    const uint32_t n = 100000;
    float *x = malloc(n * 4);
    tu_fill_normal(x, n, 12);
    static const enum gv_cmp_kind kinds[] = {GV_CMP_DENSE, GV_CMP_TOPK, GV_CMP_RANDOMK, GV_CMP_DGC,
                                             GV_CMP_REDSYNC};
    static const double cfs[] = {1.5, 10, 100, 1000, 1e9};
    for (size_t q = 0; q < GV_ARRAY_LEN(kinds); q++) {
        for (int f16 = 0; f16 <= 1; f16++) {
            enum gv_val_type vt = f16 ? GV_VAL_F16 : GV_VAL_F32;
            struct gv_cmp *c = tu_cmp(kinds[q], n, 1.5, 1, vt, 3);
            struct gv_sparse s;
            tu_sparse_alloc(&s, n);
            for (size_t f = 0; f < GV_ARRAY_LEN(cfs); f++) {
                GV_CHECK_OK(gv_cmp_select(c, x, n, cfs[f], 0, 0, &s));
                char what[64];
                snprintf(what, sizeof(what), "%s cf %g %s", gv_cmp_kind_str(kinds[q]), cfs[f],
                         f16 ? "f16" : "f32");
                round_trip(&s, vt, GV_IDX_AUTO, what);
                if (!s.dense) {
                    round_trip(&s, vt, GV_IDX_RAW32, what);
                    round_trip(&s, vt, GV_IDX_VARINT, what);
                    round_trip(&s, vt, GV_IDX_BITMAP, what);
                }
            }
            tu_sparse_free(&s);
            gv_cmp_destroy(c);
        }
    }
    free(x);
}

static struct gv_sparse mk(uint32_t n, uint32_t count, const uint32_t *idx, float *val)
{
    struct gv_sparse s = {.idx = (uint32_t *)idx, .val = val, .cap = count, .count = count, .n = n};
    return s;
}

static void test_choice_and_sizes(void)
{
    float val[40000];
    uint32_t idx[40000];
    for (int i = 0; i < 40000; i++)
        val[i] = (float)i;
    struct gv_sparse_layout info;
    /* sparse and spread out: varint; exact size = sum of varint lengths */
    for (uint32_t i = 0; i < 1000; i++)
        idx[i] = i * 1000; /* gaps of 999: 2 bytes each, the first 1 byte */
    struct gv_sparse s = mk(1000000, 1000, idx, val);
    GV_CHECK_OK(gv_sparse_plan(&s, GV_VAL_F32, GV_IDX_AUTO, &info));
    GV_CHECK_EQ(info.desc.enc, GV_IDX_VARINT);
    GV_CHECK_EQ(info.idx_len, 1 + 999 * 2);
    GV_CHECK_EQ(info.val_len, 4000);
    GV_CHECK_OK(gv_sparse_plan(&s, GV_VAL_F16, GV_IDX_AUTO, &info));
    GV_CHECK_EQ(info.val_len, 2000);
    /* dense-ish (40% of 100000): bitmap, 12500 bytes */
    for (uint32_t i = 0; i < 40000; i++)
        idx[i] = i * 2 + (i & 1) * 0 + (i / 20000) * 20000;
    s = mk(100000, 40000, idx, val);
    GV_CHECK_OK(gv_sparse_plan(&s, GV_VAL_F32, GV_IDX_AUTO, &info));
    GV_CHECK_EQ(info.desc.enc, GV_IDX_BITMAP);
    GV_CHECK_EQ(info.idx_len, 12500);
    /* unsorted: raw32 only */
    uint32_t un[3] = {5, 2, 9};
    s = mk(10, 3, un, val);
    GV_CHECK_OK(gv_sparse_plan(&s, GV_VAL_F32, GV_IDX_AUTO, &info));
    GV_CHECK_EQ(info.desc.enc, GV_IDX_RAW32);
    GV_CHECK_EQ(info.idx_len, 12);
    GV_CHECK_STATUS(gv_sparse_plan(&s, GV_VAL_F32, GV_IDX_VARINT, &info), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_sparse_plan(&s, GV_VAL_F32, GV_IDX_BITMAP, &info), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_sparse_plan(&s, GV_VAL_F32, GV_IDX_DENSE, &info), GV_ERR_INVAL);
    /* an index out of range is refused by the encoder too */
    uint32_t oob[2] = {1, 10};
    s = mk(10, 2, oob, val);
    GV_CHECK_STATUS(gv_sparse_plan(&s, GV_VAL_F32, GV_IDX_AUTO, &info), GV_ERR_INVAL);
    /* empty */
    s = mk(10, 0, idx, val);
    GV_CHECK_OK(gv_sparse_plan(&s, GV_VAL_F32, GV_IDX_AUTO, &info));
    GV_CHECK(info.idx_len == 0 && info.val_len == 0 && info.desc.enc == GV_IDX_VARINT);
    round_trip(&s, GV_VAL_F32, GV_IDX_AUTO, "empty");
    /* empty segments may be NULL, in every encoding (UBSan checks no NULL reaches memcpy) */
    s = mk(0, 0, NULL, NULL);
    static const enum gv_idx_enc forced[] = {GV_IDX_RAW32, GV_IDX_VARINT, GV_IDX_BITMAP};
    for (size_t f = 0; f < GV_ARRAY_LEN(forced); f++) {
        GV_CHECK_OK(gv_sparse_encode(&s, GV_VAL_F32, forced[f], NULL, 0, NULL, 0, &info));
        GV_CHECK(info.idx_len == 0 && info.val_len == 0 && info.desc.enc == forced[f]);
        GV_CHECK_OK(gv_sparse_decode_add(&info.desc, NULL, 0, NULL, 0, 0, NULL));
        GV_CHECK_OK(gv_sparse_decode(&info.desc, NULL, 0, NULL, 0, 0, NULL, NULL, 0));
    }
    /* segments too small (by one byte each), and exactly large enough */
    uint8_t ib[8], vb[8];
    s = mk(10, 2, un, val);
    GV_CHECK_STATUS(gv_sparse_encode(&s, GV_VAL_F32, GV_IDX_RAW32, ib, 7, vb, 8, &info),
                    GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_sparse_encode(&s, GV_VAL_F32, GV_IDX_RAW32, ib, 8, vb, 7, &info),
                    GV_ERR_INVAL);
    GV_CHECK_OK(gv_sparse_encode(&s, GV_VAL_F32, GV_IDX_RAW32, ib, 8, vb, 8, &info));
    /* the segments, byte by byte: no header, the description comes back beside them */
    uint32_t two[2] = {3, 0x1234};
    float tv[2] = {1.0f, -2.0f};
    s = mk(0x10000, 2, two, tv);
    uint8_t ib2[64], vb2[8];
    GV_CHECK_OK(gv_sparse_encode(&s, GV_VAL_F16, GV_IDX_VARINT, ib2, 64, vb2, 8, &info));
    static const uint8_t want[] = {0x03, 0xB0, 0x24}; /* 3, then 0x1234 - 3 - 1 = 0x1230 */
    GV_CHECK_EQ(info.idx_len, sizeof(want));
    GV_CHECK(memcmp(ib2, want, sizeof(want)) == 0);
    GV_CHECK(info.desc.n == 0x10000 && info.desc.count == 2 && info.desc.enc == GV_IDX_VARINT &&
             info.desc.vt == GV_VAL_F16 && info.val_len == 4);
    GV_CHECK(vb2[0] == 0x00 && vb2[1] == 0x3C && vb2[2] == 0x00 && vb2[3] == 0xC0);
    /* a dense tensor has an empty index segment, which may be NULL */
    float dv[3] = {1, 2, 3};
    struct gv_sparse sd = {.val = dv, .cap = 3, .count = 3, .n = 3, .dense = 1};
    uint8_t vb3[12];
    GV_CHECK_OK(gv_sparse_encode(&sd, GV_VAL_F32, GV_IDX_AUTO, NULL, 0, vb3, 12, &info));
    GV_CHECK(info.desc.enc == GV_IDX_DENSE && info.idx_len == 0 && info.val_len == 12);
    GV_CHECK(memcmp(vb3, dv, 12) == 0);
}

static void test_decoder_rejects(void)
{
    const uint32_t n = 40;
    uint32_t idx[5] = {1, 5, 6, 20, 39};
    float val[5] = {1, 2, 3, 4, 5};
    struct gv_sparse s = mk(n, 5, idx, val);
    struct enc e;
    enc_alloc(&e, n, 64);
    struct gv_sparse_layout info;
    struct gv_sparse_desc d;
    gv_log_set_cb(tu_log_cb, &logc);

    /* lengths and description problems, on a raw32 encoding */
    GV_CHECK_OK(gv_sparse_encode(&s, GV_VAL_F32, GV_IDX_RAW32, e.ib, e.icap, e.vb, e.vcap, &info));
    size_t il = info.idx_len, vl = info.val_len;
    GV_CHECK_EQ(il, 20);
    d = info.desc;
    GV_CHECK_OK(gv_sparse_desc_check(&d, il, vl, 0));
    expect_proto(&e, &d, il - 1, vl, 0, "truncated", "raw32 truncated");
    expect_proto(&e, &d, il + 1, vl, 0, "trailing", "raw32 trailing byte");
    expect_proto(&e, &d, il, vl - 1, 0, "truncated", "values truncated");
    expect_proto(&e, &d, il, vl + 4, 0, "trailing", "values trailing");
    logc.n = 0;
    GV_CHECK_STATUS(gv_sparse_desc_check(&d, il, vl + 4, 0), GV_ERR_PROTO);
    GV_CHECK_EQ(logc.n, 1);
    d.enc = (enum gv_idx_enc)7;
    expect_proto(&e, &d, il, vl, 0, "encoding", "bad encoding");
    d.enc = GV_IDX_AUTO; /* the encoder's choice is never a description */
    expect_proto(&e, &d, il, vl, 0, "encoding", "auto encoding");
    d.enc = GV_IDX_RAW32;
    d.vt = (enum gv_val_type)5;
    expect_proto(&e, &d, il, vl, 0, "value type", "bad value type");
    d.vt = GV_VAL_F32;
    d.count = 6; /* one entry more than the segments hold */
    expect_proto(&e, &d, il, vl, 0, "truncated", "raw32 count too large");
    d.count = 5;
    /* raw32 index problems */
    e.ib[4 * 3] = 40; /* idx 20 -> 40 == n */
    expect_proto(&e, &d, il, vl, 0, "out of range", "raw32 index == n");
    d.n = 39; /* the same segments against a smaller tensor: 39 is out of range */
    e.ib[4 * 3] = 20;
    expect_proto(&e, &d, il, vl, 0, "out of range", "raw32 index == smaller n");
    d.n = n;
    e.ib[4 * 3] = 6; /* 20 -> 6, a duplicate of the previous */
    expect_proto(&e, &d, il, vl, 0, "duplicate", "raw32 duplicate");
    /* ... allowed with the flag, and it accumulates */
    float dense[40] = {0};
    GV_CHECK_OK(gv_sparse_decode_add(&d, e.ib, il, e.vb, vl, GV_DECODE_ALLOW_DUP, dense));
    GV_CHECK(dense[6] == 3 + 4 && dense[20] == 0 && dense[39] == 5);
    e.ib[4 * 3] = 2; /* out of order */
    expect_proto(&e, &d, il, vl, 0, "out of order", "raw32 unsorted");
    GV_CHECK_OK(gv_sparse_decode_add(&d, e.ib, il, e.vb, vl, GV_DECODE_ALLOW_DUP, dense));
    e.ib[4 * 3] = 20;
    /* count > n is only possible with duplicates allowed */
    uint32_t many[50];
    float mv[50];
    for (int i = 0; i < 50; i++) {
        many[i] = (uint32_t)i % 4;
        mv[i] = 1;
    }
    struct gv_sparse sm = mk(n, 50, many, mv);
    GV_CHECK_OK(gv_sparse_encode(&sm, GV_VAL_F32, GV_IDX_RAW32, e.ib, e.icap, e.vb, e.vcap, &info));
    expect_proto(&e, &info.desc, info.idx_len, info.val_len, 0, "exceeds", "count > n");
    memset(dense, 0, sizeof(dense));
    GV_CHECK_OK(gv_sparse_decode_add(&info.desc, e.ib, info.idx_len, e.vb, info.val_len,
                                     GV_DECODE_ALLOW_DUP, dense));
    GV_CHECK(dense[0] == 13 && dense[1] == 13 && dense[2] == 12 && dense[3] == 12);

    /* varint problems */
    GV_CHECK_OK(gv_sparse_encode(&s, GV_VAL_F32, GV_IDX_VARINT, e.ib, e.icap, e.vb, e.vcap, &info));
    il = info.idx_len;
    d = info.desc;
    GV_CHECK_EQ(il, 5); /* 1, 3, 0, 13, 18: one byte each */
    expect_proto(&e, &d, il - 1, vl, 0, "truncated", "varint truncated");
    e.ib[il] = 0;
    expect_proto(&e, &d, il + 1, vl, 0, "trailing", "varint trailing");
    e.ib[4] = 19; /* last gap 18 -> 19: index 40 */
    expect_proto(&e, &d, il, vl, 0, "out of range", "varint index == n");
    e.ib[4] = 18;
    uint8_t save[8];
    memcpy(save, e.ib, 5);
    uint8_t overlong[] = {0x81, 0x00, 0x03, 0x00, 0x0D, 0x12}; /* 1 as 0x81 0x00 */
    memcpy(e.ib, overlong, sizeof(overlong));
    expect_proto(&e, &d, sizeof(overlong), vl, 0, "not minimal", "varint overlong");
    uint8_t huge[] = {0xFF, 0xFF, 0xFF, 0xFF, 0x1F}; /* > 32 bits */
    memcpy(e.ib, huge, sizeof(huge));
    expect_proto(&e, &d, sizeof(huge), vl, 0, "overflows", "varint overflow");
    uint8_t big[] = {0xFF, 0xFF, 0xFF, 0xFF, 0x0F}; /* 2^32 - 1 >= n */
    memcpy(e.ib, big, sizeof(big));
    expect_proto(&e, &d, sizeof(big), vl, 0, "out of range", "varint huge index");
    memcpy(e.ib, save, 5);
    /* a count larger than the varints present */
    d.count = 6;
    expect_proto(&e, &d, il, vl + 4, 0, "truncated", "varint count too large");
    d.count = 5;
    /* the encoder's varints decode only as varints */
    d.enc = GV_IDX_BITMAP;
    expect_proto(&e, &d, il, vl, 0, "holds 8 indices", "varint read as a bitmap");
    d.enc = GV_IDX_VARINT;

    /* bitmap problems */
    GV_CHECK_OK(gv_sparse_encode(&s, GV_VAL_F32, GV_IDX_BITMAP, e.ib, e.icap, e.vb, e.vcap, &info));
    il = info.idx_len;
    d = info.desc;
    GV_CHECK_EQ(il, 5);
    expect_proto(&e, &d, il - 1, vl, 0, "truncated", "bitmap truncated");
    e.ib[0] |= 0x01; /* index 0 too: popcount 6 != 5 */
    expect_proto(&e, &d, il, vl, 0, "description says", "bitmap popcount");
    e.ib[0] &= (uint8_t)~0x01;
    d.count = 41;
    expect_proto(&e, &d, il, 164, 0, "exceeds", "bitmap count > n");
    d.count = 5;
    /* n = 37: bits beyond n in the last byte */
    uint32_t i37[2] = {1, 36};
    struct gv_sparse s37 = mk(37, 2, i37, val);
    GV_CHECK_OK(
        gv_sparse_encode(&s37, GV_VAL_F32, GV_IDX_BITMAP, e.ib, e.icap, e.vb, e.vcap, &info));
    e.ib[4] |= 0x40; /* bit 38 */
    d = info.desc;
    d.count = 3;
    expect_proto(&e, &d, info.idx_len, 12, 0, "beyond n", "bitmap bit beyond n");

    /* dense: count must equal n, and there are no index bytes */
    float dv[40] = {0};
    struct gv_sparse sd = {.val = dv, .cap = 40, .count = 40, .n = 40, .dense = 1};
    GV_CHECK_OK(gv_sparse_encode(&sd, GV_VAL_F32, GV_IDX_AUTO, e.ib, e.icap, e.vb, e.vcap, &info));
    GV_CHECK(info.desc.enc == GV_IDX_DENSE && info.idx_len == 0 && info.val_len == 160);
    d = info.desc;
    d.count = 39;
    expect_proto(&e, &d, 0, 156, 0, "count 39 != n", "dense count");
    d.count = 40;
    expect_proto(&e, &d, 4, 160, 0, "trailing", "dense with index bytes");

    /* non-finite values with GV_DECODE_FINITE */
    val[2] = NAN;
    GV_CHECK_OK(gv_sparse_encode(&s, GV_VAL_F16, GV_IDX_VARINT, e.ib, e.icap, e.vb, e.vcap, &info));
    expect_proto(&e, &info.desc, info.idx_len, info.val_len, GV_DECODE_FINITE, "not finite",
                 "nan value");
    GV_CHECK_OK(gv_sparse_decode_add(&info.desc, e.ib, info.idx_len, e.vb, info.val_len, 0, dense));
    val[2] = 3;
    /* decode into too small an output */
    uint32_t oi[4];
    float ov[4];
    GV_CHECK_STATUS(
        gv_sparse_decode(&info.desc, e.ib, info.idx_len, e.vb, info.val_len, 0, oi, ov, 4),
        GV_ERR_INVAL);
    gv_log_set_cb(NULL, NULL);
    enc_free(&e);
}

/* Random mutations of valid encodings and of their descriptions: every result is OK, PROTO or
 * (for a count above the output's cap) INVAL, and an OK decode only ever yields indices below
 * the described n (ASan watches the reads and writes). The described n is only ever lowered:
 * the receiver's own n is what it sizes its buffers by. */
static void test_fuzz(void)
{
    const uint32_t n = 5000;
    float *x = malloc(n * 4), *dense = malloc(n * 4);
    tu_fill_normal(x, n, 21);
    struct gv_cmp *c = tu_cmp(GV_CMP_TOPK, n, 1.0, 1, GV_VAL_F32, 3);
    struct gv_sparse s;
    tu_sparse_alloc(&s, n);
    struct enc e;
    enc_alloc(&e, n, n);
    uint32_t *oi = malloc(n * 4 * 2);
    float *ov = malloc(n * 4 * 2);
    struct gv_rng rng;
    gv_rng_seed(&rng, 99);
    gv_log_set_level(GV_LOG_ERROR);
    gv_log_set_cb(tu_log_cb, &logc);
    int ok_count = 0, proto = 0, other = 0;
    static const double cfs[] = {1.2, 5, 50, 500};
    for (int round = 0; round < 4000; round++) {
        enum gv_idx_enc enc = (enum gv_idx_enc)(1 + round % 3);
        GV_CHECK_OK(gv_cmp_select(c, x, n, cfs[round % 4], 0, 0, &s));
        struct gv_sparse_layout info;
        GV_CHECK_OK(gv_sparse_encode(&s, (round / 3) % 2 ? GV_VAL_F16 : GV_VAL_F32, enc, e.ib,
                                     e.icap, e.vb, e.vcap, &info));
        size_t il = info.idx_len, vl = info.val_len;
        struct gv_sparse_desc d = info.desc;
        int muts = 1 + (int)gv_rng_below(&rng, 4);
        for (int m = 0; m < muts; m++) {
            uint32_t what = gv_rng_below(&rng, 4);
            if (what == 0 && il > 0) {
                e.ib[gv_rng_below(&rng, (uint32_t)il)] ^= (uint8_t)(1u << gv_rng_below(&rng, 8));
            } else if (what == 1) {
                switch (gv_rng_below(&rng, 4)) {
                case 0: d.n = gv_rng_below(&rng, n + 1); break;
                case 1: d.count = gv_rng_below(&rng, 2 * n + 1); break;
                case 2: d.enc = (enum gv_idx_enc)((int)gv_rng_below(&rng, 6) - 1); break;
                default: d.vt = (enum gv_val_type)gv_rng_below(&rng, 3); break;
                }
            } else if (what == 2) {
                il = gv_rng_below(&rng, (uint32_t)il + 1);
            } else {
                vl = gv_rng_below(&rng, (uint32_t)vl + 1);
            }
        }
        unsigned flags = round % 5 == 0 ? GV_DECODE_ALLOW_DUP : 0;
        uint32_t cnt_cap = 2 * n;
        gv_status_t st = gv_sparse_decode(&d, e.ib, il, e.vb, vl, flags, oi, ov, cnt_cap);
        if (st == GV_OK) {
            ok_count++;
            int in_range = 1;
            for (uint32_t i = 0; i < d.count; i++)
                in_range &= oi[i] < d.n;
            GV_CHECK(in_range);
            GV_CHECK_OK(gv_sparse_decode_add(&d, e.ib, il, e.vb, vl, flags, dense));
        } else if (st == GV_ERR_PROTO || st == GV_ERR_INVAL) {
            proto++;
        } else {
            other++;
        }
    }
    gv_log_set_cb(NULL, NULL);
    gv_log_set_level(GV_LOG_INFO);
    GV_CHECK_EQ(other, 0);
    GV_CHECK(proto > 2000);
    GV_CHECK(ok_count > 0); /* flips in value-free places (e.g. f16 values) still decode */
    free(oi);
    free(ov);
    enc_free(&e);
    tu_sparse_free(&s);
    gv_cmp_destroy(c);
    free(x);
    free(dense);
}

int main(void)
{
    test_round_trips();
    test_choice_and_sizes();
    test_decoder_rejects();
    test_fuzz();
    return gv_check_summary();
}
