/* test_proto.c: the protobuf-c header: every message type round-trips with all its fields,
 * every header check refuses what it should (with a log line naming the cause), the encoder
 * refuses what the decoder would, and decoding lives within its fixed arena. Invalid headers
 * are made by unpacking a valid one with protobuf-c, changing one thing, and repacking. */
#include "check.h"
#include "gravac.pb-c.h"
#include "gv_proto.h"
#include "logcap.h"
#include "samples.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SAMPLE_PUSH_BITMAP GV_PROTO_MSG_COUNT /* base sample id for the bitmap PUSH */

static unsigned char arena_buf[1 << 18];

/* ---------------------------------------------------------------- round trips */

static gv_status_t round_trip(const struct gv_proto_msg *m, const struct gv_proto_caps *caps,
                              struct gv_proto_arena *arena, struct gv_proto_msg *out, size_t *len_p)
{
    static uint8_t frame[1 << 17];
    size_t len = 0;
    gv_status_t status = gv_proto_encode(m, caps, frame, sizeof(frame), &len);
    if (status != GV_OK)
        return status;
    if (len_p != NULL)
        *len_p = len;
    return gv_proto_decode(frame, len, caps, arena, out);
}

static int in_arena(const struct gv_proto_arena *a, const void *p)
{
    return (const unsigned char *)p >= a->base && (const unsigned char *)p < a->base + a->cap;
}

static void test_round_trip_every_type(void)
{
    struct gv_proto_arena arena;
    struct gv_proto_msg m, out;
    size_t len = 0;

    gv_proto_arena_init(&arena, arena_buf, sizeof(arena_buf));
    for (int t = GV_PROTO_MSG_HELLO; t < GV_PROTO_MSG_COUNT; t++) {
        gv_sample_msg((enum gv_proto_msg_type)t, &m);
        memset(&out, 0x5a, sizeof(out));
        GV_CHECK_OK(round_trip(&m, NULL, &arena, &out, &len));
        GV_CHECK_MSG(gv_proto_msg_equal(&m, &out), "%s does not round-trip",
                     gv_proto_msg_type_str(m.type));
        GV_CHECK_EQ(out.payload_len, gv_proto_payload_len(&m));
        GV_CHECK(len > GV_PROTO_PREFIX_LEN);
    }
    gv_sample_push_bitmap(&m);
    GV_CHECK_OK(round_trip(&m, NULL, &arena, &out, NULL));
    GV_CHECK(gv_proto_msg_equal(&m, &out));
    GV_CHECK_EQ(out.payload_len, 145);
}

/* Field by field for the richest types, so the round trip does not rest on msg_equal. */
static void test_round_trip_fields(void)
{
    struct gv_proto_arena arena;
    struct gv_proto_msg m, o;

    gv_proto_arena_init(&arena, arena_buf, sizeof(arena_buf));
    gv_sample_msg(GV_PROTO_MSG_PUSH, &m);
    GV_CHECK_OK(round_trip(&m, NULL, &arena, &o, NULL));
    GV_CHECK_EQ(o.type, GV_PROTO_MSG_PUSH);
    GV_CHECK_EQ(o.role, GV_PROTO_ROLE_WORKER);
    GV_CHECK_EQ(o.rank, 3);
    GV_CHECK(o.iteration == 12345678901ull);
    GV_CHECK_EQ(o.shard, 2);
    GV_CHECK_EQ(o.tensor_id, 7);
    GV_CHECK_EQ(o.dtype, GV_PROTO_DTYPE_F32);
    GV_CHECK_EQ(o.numel, 1000);
    GV_CHECK_EQ(o.nnz, 10);
    GV_CHECK(o.cf == 100);
    GV_CHECK_EQ(o.n_segs, 2);
    GV_CHECK_EQ(o.segs[0].kind, GV_PROTO_SEG_INDICES);
    GV_CHECK_EQ(o.segs[0].enc, GV_PROTO_ENC_U32);
    GV_CHECK_EQ(o.segs[0].count, 10);
    GV_CHECK_EQ(o.segs[0].bytes, 40);
    GV_CHECK_EQ(o.segs[1].kind, GV_PROTO_SEG_VALUES);
    GV_CHECK_EQ(o.segs[1].enc, GV_PROTO_ENC_F32);
    GV_CHECK_EQ(o.payload_len, 80);
    GV_CHECK_EQ(o.u.push.level, GV_PROTO_LEVEL_CANDIDATE);
    GV_CHECK_EQ(o.u.push.index_enc, GV_PROTO_ENC_U32);
    GV_CHECK(o.u.push.stats.g_ef_sq == 12.5 && o.u.push.stats.g_min_sq == 3.25 &&
             o.u.push.stats.g_c_sq == 9.75);
    GV_CHECK(o.u.push.stats.compute_s == 0.125 && o.u.push.stats.compress_s == 0.0625 &&
             o.u.push.stats.comm_s == 0.03125 && o.u.push.stats.pause_s == 0.046875);
    GV_CHECK_EQ(o.u.push.stats.samples, 256);
    GV_CHECK(o.u.push.stats.loss == 2.302585);
    GV_CHECK(o.u.push.stats.lr == 0.0125);
    GV_CHECK_EQ(o.u.push.stats.n_layer_norms, 5);
    GV_CHECK(o.u.push.stats.layer_norms[1] == 1.25 && o.u.push.stats.layer_norms[4] == 1e10);
    GV_CHECK(in_arena(&arena, o.u.push.stats.layer_norms)); /* not the sender's array */

    gv_sample_msg(GV_PROTO_MSG_HELLO, &m);
    GV_CHECK_OK(round_trip(&m, NULL, &arena, &o, NULL));
    GV_CHECK_EQ(o.u.hello.num_workers, 8);
    GV_CHECK_EQ(o.u.hello.num_servers, 2);
    GV_CHECK(o.u.hello.features == (GV_PROTO_FEAT_F16 | GV_PROTO_FEAT_AUTH));
    GV_CHECK_EQ(o.u.hello.nonce.len, 32);
    GV_CHECK(memcmp(o.u.hello.nonce.data, m.u.hello.nonce.data, 32) == 0);
    GV_CHECK(in_arena(&arena, o.u.hello.nonce.data));
    GV_CHECK_STREQ(o.u.hello.cluster_id, "fashion-mnist-run-42");
    GV_CHECK(in_arena(&arena, o.u.hello.cluster_id));

    gv_sample_msg(GV_PROTO_MSG_UPDATE, &m);
    GV_CHECK_OK(round_trip(&m, NULL, &arena, &o, NULL));
    GV_CHECK_EQ(o.u.update.decision.level, GV_PROTO_LEVEL_FLOOR);
    GV_CHECK(o.u.update.decision.theta_min == 10 && o.u.update.decision.cf_candidate == 100 &&
             o.u.update.decision.cf_send == 10 && o.u.update.decision.lr == 0.1);
    GV_CHECK(o.u.update.decision.resync);
    GV_CHECK(o.u.update.model_checksum == 0x1122334455667788ull);
    GV_CHECK_EQ(o.segs[0].enc, GV_PROTO_ENC_DELTA_VARINT);
    GV_CHECK_EQ(o.segs[0].bytes, 17);

    gv_sample_msg(GV_PROTO_MSG_WELCOME, &m);
    GV_CHECK_OK(round_trip(&m, NULL, &arena, &o, NULL));
    GV_CHECK(o.u.welcome.shard_offset == 50000 && o.u.welcome.shard_numel == 50000 &&
             o.u.welcome.model_numel == 101770);
    GV_CHECK(o.u.welcome.model_fingerprint == 0x0123456789abcdefull);
    GV_CHECK_EQ(o.u.welcome.num_shards, 2);

    gv_sample_msg(GV_PROTO_MSG_ERROR, &m);
    GV_CHECK_OK(round_trip(&m, NULL, &arena, &o, NULL));
    GV_CHECK_EQ(o.u.error.code, GV_ERR_PROTO); /* negative codes survive */
    GV_CHECK_STREQ(o.u.error.text, m.u.error.text);

    gv_sample_msg(GV_PROTO_MSG_MODEL, &m);
    GV_CHECK_OK(round_trip(&m, NULL, &arena, &o, NULL));
    GV_CHECK(o.u.model.offset == 512 && o.u.model.checksum == 0xfeedfacecafebeefull);

    GV_CHECK_EQ(o.segs[0].kind, GV_PROTO_SEG_DENSE);
    GV_CHECK_EQ(o.payload_len, 1024);

    gv_sample_msg(GV_PROTO_MSG_UPDATE, &m); /* a piece of a dense round's update */
    m.offset = 4096;
    GV_CHECK_OK(round_trip(&m, NULL, &arena, &o, NULL));
    GV_CHECK(o.offset == 4096 && gv_proto_msg_equal(&m, &o));
    /* checkpoint reports (PUSH, STATS) and verdicts (DECISION, UPDATE); a bare report keeps
     * the statistics sub-message, whose other fields stay zero */
    gv_sample_msg(GV_PROTO_MSG_PUSH, &m);
    m.u.push.stats.ckpt_iter = 3000;
    m.u.push.stats.ckpt_status = GV_ERR_IO;
    GV_CHECK_OK(round_trip(&m, NULL, &arena, &o, NULL));
    GV_CHECK(o.u.push.stats.ckpt_iter == 3000 && o.u.push.stats.ckpt_status == GV_ERR_IO);
    GV_CHECK(gv_proto_msg_equal(&m, &o));
    gv_proto_msg_init(&m, GV_PROTO_MSG_STATS);
    m.u.stats.stats.ckpt_iter = 1000;
    GV_CHECK_OK(round_trip(&m, NULL, &arena, &o, NULL));
    GV_CHECK(o.u.stats.stats.ckpt_iter == 1000 && o.u.stats.stats.ckpt_status == 0);
    gv_sample_msg(GV_PROTO_MSG_UPDATE, &m);
    m.u.update.decision.ckpt_iter = 1000;
    m.u.update.decision.ckpt_status = GV_ERR_CKPT;
    GV_CHECK_OK(round_trip(&m, NULL, &arena, &o, NULL));
    GV_CHECK(o.u.update.decision.ckpt_iter == 1000 &&
             o.u.update.decision.ckpt_status == GV_ERR_CKPT);
    GV_CHECK(gv_proto_msg_equal(&m, &o));
    m.u.update.decision.ckpt_status = GV_OK;
    GV_CHECK(!gv_proto_msg_equal(&m, &o));
}

/* Zero and empty values, NaN statistics, a bare PUSH without stats. */
static void test_round_trip_edges(void)
{
    struct gv_proto_arena arena;
    struct gv_proto_msg m, o;

    gv_proto_arena_init(&arena, arena_buf, sizeof(arena_buf));
    gv_proto_msg_init(&m, GV_PROTO_MSG_HELLO); /* NULL cluster id, empty nonce */
    GV_CHECK_OK(round_trip(&m, NULL, &arena, &o, NULL));
    GV_CHECK_STREQ(o.u.hello.cluster_id, "");
    GV_CHECK_EQ(o.u.hello.nonce.len, 0);
    GV_CHECK(gv_proto_msg_equal(&m, &o));

    gv_proto_msg_init(&m, GV_PROTO_MSG_PUSH);
    GV_CHECK_OK(round_trip(&m, NULL, &arena, &o, NULL));
    GV_CHECK_EQ(o.u.push.stats.n_layer_norms, 0);
    GV_CHECK(gv_proto_msg_equal(&m, &o));

    gv_proto_msg_init(&m, GV_PROTO_MSG_UPDATE);
    GV_CHECK_OK(round_trip(&m, NULL, &arena, &o, NULL));
    GV_CHECK(gv_proto_msg_equal(&m, &o));

    /* a diverged worker reports a NaN loss: carried as is, the server decides */
    gv_sample_msg(GV_PROTO_MSG_PUSH, &m);
    m.u.push.stats.loss = NAN;
    m.u.push.stats.g_ef_sq = INFINITY;
    GV_CHECK_OK(round_trip(&m, NULL, &arena, &o, NULL));
    GV_CHECK(isnan(o.u.push.stats.loss));
    GV_CHECK(isinf(o.u.push.stats.g_ef_sq));
    GV_CHECK(gv_proto_msg_equal(&m, &o));

    /* boundaries that are allowed: cf exactly 1, numel and nnz at the cap */
    gv_sample_msg(GV_PROTO_MSG_PUSH, &m);
    m.cf = 1;
    m.numel = INT32_MAX;
    GV_CHECK_OK(round_trip(&m, NULL, &arena, &o, NULL));
    GV_CHECK(gv_proto_msg_equal(&m, &o));
}

static void test_msg_equal(void)
{
    struct gv_proto_msg a, b;
    static const double other_norms[5] = {0.5, 1.25, 3e-7, 42.0, 1e11};
    int differ = 0, n = 0;

    gv_sample_msg(GV_PROTO_MSG_PUSH, &a);
    b = a;
    GV_CHECK(gv_proto_msg_equal(&a, &b));
#define DIFFER(stmt)                                                                               \
    do {                                                                                           \
        b = a;                                                                                     \
        stmt;                                                                                      \
        differ += !gv_proto_msg_equal(&a, &b);                                                     \
        n++;                                                                                       \
    } while (0)
    DIFFER(b.type = GV_PROTO_MSG_UPDATE);
    DIFFER(b.role = GV_PROTO_ROLE_SERVER);
    DIFFER(b.rank++);
    DIFFER(b.iteration++);
    DIFFER(b.shard++);
    DIFFER(b.tensor_id++);
    DIFFER(b.dtype = GV_PROTO_DTYPE_F16);
    DIFFER(b.numel++);
    DIFFER(b.nnz++);
    DIFFER(b.cf = 99);
    DIFFER(b.n_segs--);
    DIFFER(b.segs[1].kind = GV_PROTO_SEG_DENSE);
    DIFFER(b.segs[0].enc = GV_PROTO_ENC_DELTA_VARINT);
    DIFFER(b.segs[1].count++);
    DIFFER(b.segs[1].bytes++);
    DIFFER(b.u.push.level = GV_PROTO_LEVEL_DENSE);
    DIFFER(b.u.push.index_enc = GV_PROTO_ENC_BITMAP);
    DIFFER(b.u.push.stats.g_ef_sq = 1);
    DIFFER(b.u.push.stats.g_min_sq = 1);
    DIFFER(b.u.push.stats.g_c_sq = 1);
    DIFFER(b.u.push.stats.compute_s = 1);
    DIFFER(b.u.push.stats.compress_s = 1);
    DIFFER(b.u.push.stats.comm_s = 1);
    DIFFER(b.u.push.stats.pause_s = 1);
    DIFFER(b.u.push.stats.samples = 1);
    DIFFER(b.u.push.stats.loss = NAN);
    DIFFER(b.u.push.stats.lr = 0.5);
    DIFFER(b.u.push.stats.n_layer_norms = 4);
    DIFFER(b.u.push.stats.layer_norms = other_norms);
    GV_CHECK_EQ(differ, n);

    gv_sample_msg(GV_PROTO_MSG_HELLO, &a);
    differ = n = 0;
    DIFFER(b.u.hello.cluster_id = "other");
    DIFFER(b.u.hello.nonce.len--);
    DIFFER(b.u.hello.features = 0);
    DIFFER(b.u.hello.num_workers = 9);
    GV_CHECK_EQ(differ, n);

    gv_sample_msg(GV_PROTO_MSG_DECISION, &a);
    differ = n = 0;
    DIFFER(b.u.decision.level = GV_PROTO_LEVEL_DENSE);
    DIFFER(b.u.decision.theta_min = 11);
    DIFFER(b.u.decision.cf_candidate = 11);
    DIFFER(b.u.decision.cf_send = 11);
    DIFFER(b.u.decision.lr = 0.2);
    DIFFER(b.u.decision.resync = false);
    GV_CHECK_EQ(differ, n);
#undef DIFFER
}

/* ---------------------------------------------------------------- decoder refusals */

/* protobuf-c allocations of the test's own unpack: a bump pool, reset per case. */
static unsigned char tpool[1 << 20];
static size_t tpool_used;

static void *tpool_alloc(void *data, size_t size)
{
    size_t need = (size + 15) & ~(size_t)15;
    (void)data;
    if (need > sizeof(tpool) - tpool_used)
        return NULL;
    void *p = tpool + tpool_used;
    tpool_used += need;
    return p;
}

static void tpool_free(void *data, void *ptr)
{
    (void)data;
    (void)ptr;
}

static ProtobufCAllocator tpool_allocator = {tpool_alloc, tpool_free, NULL};

static void sample(int base, struct gv_proto_msg *m)
{
    if (base == SAMPLE_PUSH_BITMAP)
        gv_sample_push_bitmap(m);
    else
        gv_sample_msg((enum gv_proto_msg_type)base, m);
}

/* Encodes sample base, lets mutate change its protobuf header, repacks it with payload_len
 * moved by payload_delta, and decodes the frame with caps. */
static gv_status_t decode_mutated(int base, void (*mutate)(Gravac__Header *h),
                                  int64_t payload_delta, const struct gv_proto_caps *caps)
{
    static uint8_t frame[1 << 17], out_frame[1 << 17];
    struct gv_proto_arena arena;
    struct gv_proto_msg m, out;
    struct gv_proto_prefix p;
    size_t len;

    sample(base, &m);
    if (gv_proto_encode(&m, NULL, frame, sizeof(frame), &len) != GV_OK)
        return GV_ERR_INVAL;
    gv_proto_prefix_read(frame, &p);
    tpool_used = 0;
    Gravac__Header *h =
        gravac__header__unpack(&tpool_allocator, p.hdr_len, frame + GV_PROTO_PREFIX_LEN);
    if (h == NULL)
        return GV_ERR_INVAL;
    mutate(h);
    size_t hdr_len = gravac__header__get_packed_size(h);
    if (hdr_len + GV_PROTO_PREFIX_LEN > sizeof(out_frame))
        return GV_ERR_INVAL;
    gravac__header__pack(h, out_frame + GV_PROTO_PREFIX_LEN);
    p.hdr_len = (uint32_t)hdr_len;
    p.payload_len += (uint64_t)payload_delta;
    gv_proto_prefix_write(&p, out_frame);
    gv_proto_arena_init(&arena, arena_buf, sizeof(arena_buf));
    return gv_proto_decode(out_frame, GV_PROTO_PREFIX_LEN + hdr_len, caps, &arena, &out);
}

/* The mutations (one per check). Static storage: the header only points to it. */
static Gravac__Hello x_hello = GRAVAC__HELLO__INIT;
static Gravac__Segment x_segs[GV_PROTO_MAX_SEGMENTS + 4];
static Gravac__Segment *x_segp[GV_PROTO_MAX_SEGMENTS + 4];
static uint8_t x_bytes[1024];
static char x_text[1024];
static double x_norms[8192];
static uint8_t x_unknown_data[1] = {1};
static ProtobufCMessageUnknownField x_unknown = {99, PROTOBUF_C_WIRE_TYPE_VARINT, 1,
                                                 x_unknown_data};

static void raw_segments(Gravac__Header *h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        gravac__segment__init(&x_segs[i]);
        x_segs[i].kind = GRAVAC__SEG_KIND__SEG_RAW;
        x_segs[i].encoding = GRAVAC__SEG_ENCODING__SEG_ENC_BYTES;
        x_segs[i].count = 1;
        x_segs[i].bytes = 1;
        x_segp[i] = &x_segs[i];
    }
    h->n_segments = n;
    h->segments = x_segp;
}

static char *text_of(size_t n, char fill)
{
    memset(x_text, fill, n);
    x_text[n] = '\0';
    return x_text;
}

static void unknown_in(ProtobufCMessage *m)
{
    m->n_unknown_fields = 1;
    m->unknown_fields = &x_unknown;
}

static void m_type0(Gravac__Header *h)
{
    h->type = 0;
}
static void m_type15(Gravac__Header *h)
{
    h->type = 15;
}
static void m_type_neg(Gravac__Header *h)
{
    h->type = (Gravac__MsgType)-1;
}
static void m_type_big(Gravac__Header *h)
{
    h->type = 1000;
}
static void m_body_hello(Gravac__Header *h)
{
    h->body_case = GRAVAC__HEADER__BODY_HELLO;
    h->hello = &x_hello;
}
static void m_body_none(Gravac__Header *h)
{
    h->body_case = GRAVAC__HEADER__BODY__NOT_SET;
}
static void m_17_segs(Gravac__Header *h)
{
    raw_segments(h, 17);
}
static void m_9_segs(Gravac__Header *h)
{
    raw_segments(h, 9);
}
static void m_16_segs(Gravac__Header *h)
{
    raw_segments(h, 16);
}
static void m_numel_big(Gravac__Header *h)
{
    h->numel = (uint64_t)INT32_MAX + 1;
}
static void m_nnz_1001(Gravac__Header *h)
{
    h->nnz = 1001;
}
static void m_nnz_9(Gravac__Header *h)
{
    h->nnz = 9;
}
static void m_seg0_bytes41(Gravac__Header *h)
{
    h->segments[0]->bytes = 41;
}
static void m_seg1_bytes40(Gravac__Header *h)
{
    h->segments[1]->bytes = 40;
}
static void m_seg0_bytes124(Gravac__Header *h)
{
    h->segments[0]->bytes = 124;
}
static void m_seg0_bitmap_count(Gravac__Header *h)
{
    h->segments[0]->count = 1001;
}
static void m_seg0_bytes9(Gravac__Header *h)
{
    h->segments[0]->bytes = 9;
}
static void m_seg0_bytes50(Gravac__Header *h)
{
    h->segments[0]->bytes = 50;
}
static void m_seg0_bytes51(Gravac__Header *h)
{
    h->segments[0]->bytes = 51;
}
static void m_seg0_kind9(Gravac__Header *h)
{
    h->segments[0]->kind = 9;
}
static void m_seg0_kind0(Gravac__Header *h)
{
    h->segments[0]->kind = 0;
}
static void m_seg0_enc0(Gravac__Header *h)
{
    h->segments[0]->encoding = 0;
}
static void m_seg0_enc7(Gravac__Header *h)
{
    h->segments[0]->encoding = 7;
}
static void m_seg0_enc_f32(Gravac__Header *h)
{
    h->segments[0]->encoding = GRAVAC__SEG_ENCODING__SEG_ENC_F32;
}
static void m_seg0_raw(Gravac__Header *h)
{
    h->segments[0]->kind = GRAVAC__SEG_KIND__SEG_RAW;
}
static void m_seg1_count9(Gravac__Header *h)
{
    h->segments[1]->count = 9;
    h->segments[1]->bytes = 36;
}
static void m_numel_255(Gravac__Header *h)
{
    h->numel = 255;
}
static void m_seg0_count_big(Gravac__Header *h)
{
    h->segments[0]->count = (uint64_t)INT32_MAX + 1;
    h->segments[0]->bytes = (uint64_t)INT32_MAX + 1;
}
static void m_seg_wrap(Gravac__Header *h)
{
    /* 2^64 - 40 + 40 wraps to 0: a sum check alone would pass it */
    h->segments[0]->kind = GRAVAC__SEG_KIND__SEG_RAW;
    h->segments[0]->encoding = GRAVAC__SEG_ENCODING__SEG_ENC_BYTES;
    h->segments[0]->count = UINT64_MAX - 39;
    h->segments[0]->bytes = UINT64_MAX - 39;
}
static void m_cf_half(Gravac__Header *h)
{
    h->cf = 0.5;
}
static void m_cf_nan(Gravac__Header *h)
{
    h->cf = NAN;
}
static void m_cf_inf(Gravac__Header *h)
{
    h->cf = INFINITY;
}
static void m_cf_neg(Gravac__Header *h)
{
    h->cf = -1;
}
static void m_cf_one(Gravac__Header *h)
{
    h->cf = 1;
}
static void m_nonce65(Gravac__Header *h)
{
    h->hello->nonce = (ProtobufCBinaryData){65, x_bytes};
}
static void m_nonce64(Gravac__Header *h)
{
    h->hello->nonce = (ProtobufCBinaryData){64, x_bytes};
}
static void m_snonce65(Gravac__Header *h)
{
    h->challenge->nonce = (ProtobufCBinaryData){65, x_bytes};
}
static void m_mac65(Gravac__Header *h)
{
    h->auth->mac = (ProtobufCBinaryData){65, x_bytes};
}
static void m_mac_big(Gravac__Header *h)
{
    h->auth->mac = (ProtobufCBinaryData){1000, x_bytes};
}
static void m_cluster257(Gravac__Header *h)
{
    h->hello->cluster_id = text_of(257, 'c');
}
static void m_cluster256(Gravac__Header *h)
{
    h->hello->cluster_id = text_of(256, 'c');
}
static void m_refuse_ctrl(Gravac__Header *h)
{
    h->refuse->text = "bad\nline";
}
static void m_refuse_code8(Gravac__Header *h)
{
    h->refuse->code = 8;
}
static void m_error257(Gravac__Header *h)
{
    h->error->text = text_of(257, 'e');
}
static void m_error_esc(Gravac__Header *h)
{
    h->error->text = "\x1b[2Jcleared";
}
static void m_role4(Gravac__Header *h)
{
    h->role = 4;
}
static void m_dtype4(Gravac__Header *h)
{
    h->dtype = 4;
}
static void m_push_level4(Gravac__Header *h)
{
    h->push->level = 4;
}
static void m_push_enc7(Gravac__Header *h)
{
    h->push->index_encoding = 7;
}
static void m_upd_theta(Gravac__Header *h)
{
    h->update->decision->theta_min = 0.5;
}
static void m_upd_send_nan(Gravac__Header *h)
{
    h->update->decision->cf_send = NAN;
}
static void m_upd_lr_neg(Gravac__Header *h)
{
    h->update->decision->lr = -0.1;
}
static void m_upd_lr_inf(Gravac__Header *h)
{
    h->update->decision->lr = INFINITY;
}
static void m_upd_level5(Gravac__Header *h)
{
    h->update->decision->level = 5;
}
static void m_dec_cand(Gravac__Header *h)
{
    h->decision->cf_candidate = 0.5;
}
static void m_push_norms(Gravac__Header *h)
{
    h->push->stats->n_layer_norms = 4097;
    h->push->stats->layer_norms = x_norms;
}
static void m_stats_norms(Gravac__Header *h)
{
    h->stats->stats->n_layer_norms = 4097;
    h->stats->stats->layer_norms = x_norms;
}
static void m_push_norms_ok(Gravac__Header *h)
{
    h->push->stats->n_layer_norms = 4096;
    h->push->stats->layer_norms = x_norms;
}
static void m_welcome_out(Gravac__Header *h)
{
    h->welcome->shard_offset = 60000;
}
static void m_welcome_big(Gravac__Header *h)
{
    h->welcome->shard_numel = (uint64_t)INT32_MAX + 1;
    h->welcome->model_numel = 0;
}
static void m_model_off_ok(Gravac__Header *h)
{
    h->model->offset = INT32_MAX - 256;
}
static void m_model_off_bad(Gravac__Header *h)
{
    h->model->offset = INT32_MAX - 255;
}
static void m_piece_off_ok(Gravac__Header *h) /* an UPDATE piece of numel 1000 */
{
    h->offset = INT32_MAX - 1000;
}
static void m_piece_off_bad(Gravac__Header *h)
{
    h->offset = INT32_MAX - 999;
}
static void m_unknown_top(Gravac__Header *h)
{
    unknown_in(&h->base);
}
static void m_unknown_seg(Gravac__Header *h)
{
    unknown_in(&h->segments[1]->base);
}
static void m_unknown_body(Gravac__Header *h)
{
    unknown_in(&h->push->base);
}
static void m_unknown_stats(Gravac__Header *h)
{
    unknown_in(&h->push->stats->base);
}
static void m_unknown_decision(Gravac__Header *h)
{
    unknown_in(&h->update->decision->base);
}
static void m_unknown_hello(Gravac__Header *h)
{
    unknown_in(&h->hello->base);
}

static void caps_seg8(struct gv_proto_caps *c)
{
    c->max_segments = 8;
}
static void caps_big_payload(struct gv_proto_caps *c)
{
    c->max_payload_len = 1ull << 40;
}
static void caps_small_text(struct gv_proto_caps *c)
{
    c->max_text_len = 10;
}
static void caps_small_bytes(struct gv_proto_caps *c)
{
    c->max_bytes_field = 16;
}

struct mcase {
    int base;
    void (*mutate)(Gravac__Header *h);
    int64_t payload_delta;
    void (*caps_fn)(struct gv_proto_caps *caps);
    gv_status_t want;
    const char *log; /* part of the refusal's log line */
};

#define P GV_ERR_PROTO
static const struct mcase mcases[] = {
    {GV_PROTO_MSG_PUSH, m_type0, 0, NULL, P, "unknown message type 0"},
    {GV_PROTO_MSG_PUSH, m_type15, 0, NULL, P, "unknown message type 15"},
    {GV_PROTO_MSG_PUSH, m_type_neg, 0, NULL, P, "unknown message type -1"},
    {GV_PROTO_MSG_BYE, m_type_big, 0, NULL, P, "unknown message type 1000"},
    {GV_PROTO_MSG_PUSH, m_body_hello, 0, NULL, P, "body field 16 does not belong"},
    {GV_PROTO_MSG_PUSH, m_body_none, 0, NULL, P, "body field 0 does not belong"},
    {GV_PROTO_MSG_HEARTBEAT, m_body_hello, 0, NULL, P, "does not belong"},
    {GV_PROTO_MSG_HEARTBEAT, m_17_segs, 17, NULL, P,
     "header lists 17 segments, above cap max_segments 16"},
    {GV_PROTO_MSG_HEARTBEAT, m_16_segs, 16, NULL, GV_OK, NULL},
    {GV_PROTO_MSG_HEARTBEAT, m_9_segs, 9, caps_seg8, P,
     "header lists 9 segments, above cap max_segments 8"},
    {GV_PROTO_MSG_PUSH, m_numel_big, 0, NULL, P, "numel 2147483648 above cap max_numel 2147483647"},
    {GV_PROTO_MSG_PUSH, m_nnz_1001, 0, NULL, P, "nnz 1001 above numel 1000"},
    {GV_PROTO_MSG_PUSH, m_nnz_9, 0, NULL, P, "index segments hold 10 elements, nnz is 9"},
    {GV_PROTO_MSG_PUSH, m_seg1_count9, -4, NULL, P, "value segments hold 9 elements, nnz is 10"},
    {GV_PROTO_MSG_MODEL, m_numel_255, 0, NULL, P, "dense segments hold 256 elements, numel is 255"},
    {GV_PROTO_MSG_PUSH, m_seg0_bytes41, 1, NULL, P, "segment 0: 41 bytes for 10 u32 elements"},
    {GV_PROTO_MSG_UPDATE, m_seg1_bytes40, 20, NULL, P, "segment 1: 40 bytes for 10 f16 elements"},
    {SAMPLE_PUSH_BITMAP, m_seg0_bytes124, -1, NULL, P, "124 bytes for 10 bitmap elements"},
    {SAMPLE_PUSH_BITMAP, m_seg0_bitmap_count, 0, NULL, P, "bitmap of 1001 indices over numel"},
    {GV_PROTO_MSG_UPDATE, m_seg0_bytes9, -8, NULL, P, "9 bytes cannot hold 10 delta varints"},
    {GV_PROTO_MSG_UPDATE, m_seg0_bytes50, 33, NULL, GV_OK, NULL},
    {GV_PROTO_MSG_UPDATE, m_seg0_bytes51, 34, NULL, P, "51 bytes cannot hold 10 delta varints"},
    {GV_PROTO_MSG_PUSH, m_seg0_kind9, 0, NULL, P, "segment 0: unknown kind 9"},
    {GV_PROTO_MSG_PUSH, m_seg0_kind0, 0, NULL, P, "segment 0: unknown kind 0"},
    {GV_PROTO_MSG_PUSH, m_seg0_enc0, 0, NULL, P, "encoding 0 (none) not allowed for indices"},
    {GV_PROTO_MSG_PUSH, m_seg0_enc7, 0, NULL, P, "encoding 7 (unknown) not allowed"},
    {GV_PROTO_MSG_PUSH, m_seg0_enc_f32, 0, NULL, P, "encoding 4 (f32) not allowed for indices"},
    {GV_PROTO_MSG_PUSH, m_seg0_raw, 0, NULL, P, "encoding 1 (u32) not allowed for raw"},
    {GV_PROTO_MSG_UPDATE, m_seg0_count_big, (int64_t)INT32_MAX + 1 - 17, caps_big_payload, P,
     "segment 0: count 2147483648 above cap max_numel 2147483647"},
    {GV_PROTO_MSG_PUSH, m_seg_wrap, -80, NULL, P,
     "segment 0: 18446744073709551576 bytes above cap max_payload_len"},
    {GV_PROTO_MSG_PUSH, m_cf_one, 1, NULL, P,
     "segments add up to 80 bytes, prefix says "
     "payload_len 81"},
    {GV_PROTO_MSG_PUSH, m_cf_one, -1, NULL, P, "prefix says payload_len 79"},
    {GV_PROTO_MSG_PUSH, m_cf_one, 0, NULL, GV_OK, NULL},
    {GV_PROTO_MSG_PUSH, m_cf_half, 0, NULL, P, "compression factor 0.5"},
    {GV_PROTO_MSG_PUSH, m_cf_nan, 0, NULL, P, "compression factor nan"},
    {GV_PROTO_MSG_PUSH, m_cf_inf, 0, NULL, P, "compression factor inf"},
    {GV_PROTO_MSG_PUSH, m_cf_neg, 0, NULL, P, "compression factor -1"},
    {GV_PROTO_MSG_HELLO, m_nonce65, 0, NULL, P,
     "client nonce of 65 bytes above cap max_bytes_field 64"},
    {GV_PROTO_MSG_HELLO, m_nonce64, 0, NULL, GV_OK, NULL},
    {GV_PROTO_MSG_HELLO, m_nonce64, 0, caps_small_bytes, P,
     "client nonce of 64 bytes above cap max_bytes_field 16"},
    {GV_PROTO_MSG_CHALLENGE, m_snonce65, 0, NULL, P, "server nonce of 65 bytes above cap"},
    {GV_PROTO_MSG_AUTH, m_mac65, 0, NULL, P, "mac of 65 bytes above cap max_bytes_field 64"},
    {GV_PROTO_MSG_AUTH, m_mac_big, 0, NULL, P, "mac of 1000 bytes"},
    {GV_PROTO_MSG_HELLO, m_cluster257, 0, NULL, P, "cluster id longer than cap max_text_len 256"},
    {GV_PROTO_MSG_HELLO, m_cluster256, 0, NULL, GV_OK, NULL},
    {GV_PROTO_MSG_HELLO, m_cluster256, 0, caps_small_text, P, "cap max_text_len 10"},
    {GV_PROTO_MSG_REFUSE, m_refuse_ctrl, 0, NULL, P, "refuse text has control character 0x0a"},
    {GV_PROTO_MSG_REFUSE, m_refuse_code8, 0, NULL, P, "unknown refuse code 8"},
    {GV_PROTO_MSG_ERROR, m_error257, 0, NULL, P, "error text longer than cap"},
    {GV_PROTO_MSG_ERROR, m_error_esc, 0, NULL, P, "error text has control character 0x1b"},
    {GV_PROTO_MSG_PUSH, m_role4, 0, NULL, P, "unknown role 4"},
    {GV_PROTO_MSG_PUSH, m_dtype4, 0, NULL, P, "unknown dtype 4"},
    {GV_PROTO_MSG_PUSH, m_push_level4, 0, NULL, P, "unknown level 4"},
    {GV_PROTO_MSG_PUSH, m_push_enc7, 0, NULL, P, "unknown index encoding 7"},
    {GV_PROTO_MSG_UPDATE, m_upd_theta, 0, NULL, P, "theta_min 0.5"},
    {GV_PROTO_MSG_UPDATE, m_upd_send_nan, 0, NULL, P, "send nan"},
    {GV_PROTO_MSG_UPDATE, m_upd_lr_neg, 0, NULL, P, "learning rate -0.1"},
    {GV_PROTO_MSG_UPDATE, m_upd_lr_inf, 0, NULL, P, "learning rate inf"},
    {GV_PROTO_MSG_UPDATE, m_upd_level5, 0, NULL, P, "unknown level 5"},
    {GV_PROTO_MSG_DECISION, m_dec_cand, 0, NULL, P, "candidate 0.5"},
    {GV_PROTO_MSG_PUSH, m_push_norms, 0, NULL, P, "4097 layer norms above cap max_layers 4096"},
    {GV_PROTO_MSG_PUSH, m_push_norms_ok, 0, NULL, GV_OK, NULL},
    {GV_PROTO_MSG_STATS, m_stats_norms, 0, NULL, P, "4097 layer norms above cap"},
    {GV_PROTO_MSG_WELCOME, m_welcome_out, 0, NULL, P,
     "shard [60000, +50000) outside the model's 101770 elements"},
    {GV_PROTO_MSG_WELCOME, m_welcome_big, 0, NULL, P, "shard numel 2147483648 above cap"},
    {GV_PROTO_MSG_MODEL, m_model_off_ok, 0, NULL, GV_OK, NULL},
    {GV_PROTO_MSG_MODEL, m_model_off_bad, 0, NULL, P, "beyond cap max_numel"},
    {GV_PROTO_MSG_UPDATE, m_piece_off_ok, 0, NULL, GV_OK, NULL},
    {GV_PROTO_MSG_UPDATE, m_piece_off_bad, 0, NULL, P, "piece [2147482648, +1000) beyond cap"},
    {GV_PROTO_MSG_PUSH, m_unknown_top, 0, NULL, P, "unknown fields"},
    {GV_PROTO_MSG_PUSH, m_unknown_seg, 0, NULL, P, "unknown fields"},
    {GV_PROTO_MSG_PUSH, m_unknown_body, 0, NULL, P, "unknown fields"},
    {GV_PROTO_MSG_PUSH, m_unknown_stats, 0, NULL, P, "unknown fields"},
    {GV_PROTO_MSG_UPDATE, m_unknown_decision, 0, NULL, P, "unknown fields"},
    {GV_PROTO_MSG_HELLO, m_unknown_hello, 0, NULL, P, "unknown fields"},
};
#undef P

static void test_decoder_refusals(void)
{
    struct logcap lc;

    for (size_t i = 0; i < GV_ARRAY_LEN(x_norms); i++)
        x_norms[i] = (double)i;
    for (size_t i = 0; i < GV_ARRAY_LEN(mcases); i++) {
        const struct mcase *c = &mcases[i];
        struct gv_proto_caps caps;
        gv_proto_caps_default(&caps);
        if (c->caps_fn != NULL)
            c->caps_fn(&caps);
        logcap_begin(&lc);
        gv_status_t st = decode_mutated(c->base, c->mutate, c->payload_delta, &caps);
        logcap_end();
        GV_CHECK_MSG(st == c->want, "case %zu (%s): got %s, want %s; log: %s", i,
                     gv_proto_msg_type_str((enum gv_proto_msg_type)c->base), gv_status_str(st),
                     gv_status_str(c->want), lc.line);
        if (c->log != NULL) {
            GV_CHECK_MSG(logcap_has(&lc, c->log), "case %zu: log \"%s\" lacks \"%s\"", i, lc.line,
                         c->log);
            GV_CHECK_MSG(lc.n == 1, "case %zu: %d log lines", i, lc.n);
        } else {
            GV_CHECK_MSG(lc.n == 0, "case %zu: unexpected log: %s", i, lc.line);
        }
    }
}

/* Headers that are not protobuf at all, or not ours. */
static void test_garbage_headers(void)
{
    static const struct {
        uint8_t bytes[12];
        size_t len;
        const char *log;
    } cases[] = {
        {{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 8, "not a valid protobuf header"},
        {{0x08}, 1, "not a valid protobuf header"},             /* tag without a value */
        {{0x08, 0x87}, 2, "not a valid protobuf header"},       /* varint cut short */
        {{0x5a, 0x05, 0x08}, 3, "not a valid protobuf header"}, /* segment runs past the end */
        {{0x0a, 0x00}, 2, "not a valid protobuf header"},       /* type with a length wire type */
        {{0x00}, 1, "not a valid protobuf header"},             /* field number 0 */
        {{0x10, 0x01}, 2, "unknown message type 0"},            /* valid, but no type */
        {{0x08, 0x0b, 0xf8, 0x06, 0x01}, 5, "unknown fields"},  /* heartbeat + field 111 */
    };
    struct logcap lc;
    struct gv_proto_arena arena;
    struct gv_proto_msg m;
    uint8_t frame[64];

    gv_proto_arena_init(&arena, arena_buf, sizeof(arena_buf));
    for (size_t i = 0; i < GV_ARRAY_LEN(cases); i++) {
        struct gv_proto_prefix p = {
            GV_PROTO_MAGIC, GV_PROTO_VERSION, 0, (uint32_t)cases[i].len, 0, 0};
        gv_proto_prefix_write(&p, frame);
        memcpy(frame + GV_PROTO_PREFIX_LEN, cases[i].bytes, cases[i].len);
        logcap_begin(&lc);
        GV_CHECK_STATUS(
            gv_proto_decode(frame, GV_PROTO_PREFIX_LEN + cases[i].len, NULL, &arena, &m),
            GV_ERR_PROTO);
        logcap_end();
        GV_CHECK_MSG(logcap_has(&lc, cases[i].log), "garbage %zu: log \"%s\" lacks \"%s\"", i,
                     lc.line, cases[i].log);
    }
    /* the same heartbeat without the stray field is fine */
    struct gv_proto_prefix p = {GV_PROTO_MAGIC, GV_PROTO_VERSION, 0, 2, 0, 0};
    gv_proto_prefix_write(&p, frame);
    frame[GV_PROTO_PREFIX_LEN] = 0x08;
    frame[GV_PROTO_PREFIX_LEN + 1] = 0x0b;
    GV_CHECK_OK(gv_proto_decode(frame, GV_PROTO_PREFIX_LEN + 2, NULL, &arena, &m));
    GV_CHECK_EQ(m.type, GV_PROTO_MSG_HEARTBEAT);
}

/* ---------------------------------------------------------------- encoder refusals */

static void test_encoder_refusals(void)
{
    static uint8_t buf[1 << 17], big_nonce[65];
    static double norms[4097];
    struct logcap lc;
    struct gv_proto_msg m;
    struct gv_proto_caps caps;
    size_t len = 12345;

#define REFUSE(setup, needle)                                                                      \
    do {                                                                                           \
        gv_sample_msg(GV_PROTO_MSG_PUSH, &m);                                                      \
        len = 12345;                                                                               \
        setup;                                                                                     \
        logcap_begin(&lc);                                                                         \
        GV_CHECK_STATUS(gv_proto_encode(&m, NULL, buf, sizeof(buf), &len), GV_ERR_INVAL);          \
        logcap_end();                                                                              \
        GV_CHECK_MSG(logcap_has(&lc, "cannot encode") && logcap_has(&lc, needle),                  \
                     "log \"%s\" lacks \"%s\"", lc.line, needle);                                  \
        GV_CHECK_EQ(lc.level, GV_LOG_ERROR);                                                       \
        GV_CHECK_EQ(len, 12345);                                                                   \
    } while (0)
    REFUSE(m.type = GV_PROTO_MSG_NONE, "unknown message type 0");
    REFUSE(m.type = (enum gv_proto_msg_type)15, "unknown message type 15");
    REFUSE(m.nnz = 1001, "nnz 1001 above numel 1000");
    REFUSE(m.numel = (uint64_t)INT32_MAX + 1, "numel 2147483648 above cap");
    REFUSE(m.cf = 0.5, "compression factor 0.5");
    REFUSE(m.segs[0].bytes = 44, "segment 0: 44 bytes for 10 u32 elements");
    REFUSE(m.segs[1].count = 9, "segment 1: 40 bytes for 9 f32 elements");
    REFUSE(m.n_segs = 17, "17 segments above cap max_segments 16");
    REFUSE(m.segs[1].kind = GV_PROTO_SEG_DENSE, "dense segments hold 10 elements, numel is 1000");
    REFUSE(m.segs[1].enc = GV_PROTO_ENC_U32, "encoding 1 (u32) not allowed for values");
    REFUSE((m.u.push.stats.n_layer_norms = 4097, m.u.push.stats.layer_norms = norms),
           "4097 layer norms above cap max_layers 4096");
    REFUSE((m.u.push.stats.n_layer_norms = 3, m.u.push.stats.layer_norms = NULL),
           "3 layer norms but no array");
    REFUSE((m.type = GV_PROTO_MSG_HELLO, memset(&m.u, 0, sizeof(m.u)),
            m.u.hello.nonce = (struct gv_proto_bytes){big_nonce, 65}),
           "client nonce of 65 bytes above cap max_bytes_field 64");
    REFUSE(
        (m.type = GV_PROTO_MSG_ERROR, memset(&m.u, 0, sizeof(m.u)), m.u.error.text = "two\nlines"),
        "error text has control character 0x0a");
    REFUSE((m.type = GV_PROTO_MSG_DECISION, memset(&m.u, 0, sizeof(m.u)), m.u.decision.lr = NAN),
           "learning rate nan");
    /* 4 GiB of dense values: above max_payload_len */
    REFUSE((m.n_segs = 0, m.nnz = 0, m.numel = 1u << 30,
            gv_proto_seg_add(&m, GV_PROTO_SEG_DENSE, GV_PROTO_ENC_F32, 1u << 30, 4ull << 30)),
           "segment 0: 4294967296 bytes above cap max_payload_len 2147483648");
#undef REFUSE

    /* buffer too small, at every size; the exact size works */
    gv_sample_msg(GV_PROTO_MSG_PUSH, &m);
    size_t need;
    GV_CHECK_OK(gv_proto_encode(&m, NULL, buf, sizeof(buf), &need));
    logcap_begin(&lc);
    int refused = 0;
    for (size_t n = 0; n < need; n++) {
        uint8_t *small = malloc(n > 0 ? n : 1);
        refused += gv_proto_encode(&m, NULL, small, n, &len) == GV_ERR_INVAL;
        free(small);
    }
    logcap_end();
    GV_CHECK_EQ(refused, need);
    GV_CHECK(logcap_has(&lc, "does not fit"));
    uint8_t *exact = malloc(need);
    GV_CHECK_OK(gv_proto_encode(&m, NULL, exact, need, &len));
    GV_CHECK_EQ(len, need);
    free(exact);

    /* header above max_hdr_len */
    gv_proto_caps_default(&caps);
    caps.max_hdr_len = (uint32_t)(need - GV_PROTO_PREFIX_LEN - 1);
    logcap_begin(&lc);
    GV_CHECK_STATUS(gv_proto_encode(&m, &caps, buf, sizeof(buf), &len), GV_ERR_INVAL);
    logcap_end();
    GV_CHECK(logcap_has(&lc, "above cap max_hdr_len"));
    caps.max_hdr_len++;
    GV_CHECK_OK(gv_proto_encode(&m, &caps, buf, sizeof(buf), &len));
}

static void test_caps_check(void)
{
    struct logcap lc;
    struct gv_proto_caps caps;
    struct gv_proto_arena arena;
    struct gv_proto_msg m, out;
    uint8_t buf[1024];
    size_t len;

    gv_proto_arena_init(&arena, arena_buf, sizeof(arena_buf));
    gv_sample_msg(GV_PROTO_MSG_BYE, &m);
    GV_CHECK_OK(gv_proto_encode(&m, NULL, buf, sizeof(buf), &len));
    logcap_begin(&lc);
    gv_proto_caps_default(&caps);
    caps.max_segments = GV_PROTO_MAX_SEGMENTS + 1;
    GV_CHECK_STATUS(gv_proto_caps_check(&caps), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_proto_encode(&m, &caps, buf, sizeof(buf), &len), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_proto_decode(buf, len, &caps, &arena, &out), GV_ERR_INVAL);
    gv_proto_caps_default(&caps);
    caps.max_text_len = 0;
    GV_CHECK_STATUS(gv_proto_caps_check(&caps), GV_ERR_INVAL);
    logcap_end();
    GV_CHECK(logcap_has(&lc, "every cap must be > 0"));
}

/* ---------------------------------------------------------------- arena */

static void test_arena(void)
{
    static uint8_t frame[1 << 17];
    static unsigned char big[1 << 18];
    struct logcap lc;
    struct gv_proto_arena arena;
    struct gv_proto_msg m, out;
    size_t len;

    gv_sample_msg(GV_PROTO_MSG_PUSH, &m);
    GV_CHECK_OK(gv_proto_encode(&m, NULL, frame, sizeof(frame), &len));
    gv_proto_arena_init(&arena, big, sizeof(big));
    GV_CHECK_OK(gv_proto_decode(frame, len, NULL, &arena, &out));
    size_t used = arena.used;
    GV_CHECK(used > 0 && used <= gv_proto_arena_bound(NULL));
    GV_CHECK_EQ(arena.peak, used);
    /* decoding again reuses the same bytes: every decode resets the arena */
    GV_CHECK_OK(gv_proto_decode(frame, len, NULL, &arena, &out));
    GV_CHECK_EQ(arena.used, used);

    /* every arena size below the need fails cleanly (protobuf-c sees NULL at each of its
     * allocation points in turn); from the need up it works. An odd start address too. */
    int refused = 0, ok = 0;
    logcap_begin(&lc);
    for (size_t n = 0; n <= used + 32; n++) {
        unsigned char *buf = malloc(n + 1);
        gv_proto_arena_init(&arena, buf + 1, n);
        gv_status_t st = gv_proto_decode(frame, len, NULL, &arena, &out);
        if (st == GV_OK)
            ok++;
        else
            refused += st == GV_ERR_PROTO && arena.overflow;
        free(buf);
    }
    logcap_end();
    GV_CHECK(logcap_has(&lc, "decode arena"));
    GV_CHECK(refused > 0 && ok > 0);
    GV_CHECK_EQ(refused + ok, used + 33);

    gv_proto_arena_init(&arena, NULL, 0);
    logcap_begin(&lc);
    GV_CHECK_STATUS(gv_proto_decode(frame, len, NULL, &arena, &out), GV_ERR_PROTO);
    logcap_end();
    GV_CHECK(arena.overflow);
}

/* The largest canonical headers within the caps decode in gv_proto_arena_bound bytes. */
static void test_arena_bound(void)
{
    struct gv_proto_caps caps_list[2];
    struct gv_proto_msg m, out;
    struct gv_proto_arena arena;
    static uint8_t frame[1 << 17];
    size_t len;

    gv_proto_caps_default(&caps_list[0]);
    gv_proto_caps_default(&caps_list[1]);
    caps_list[1].max_segments = 4;
    caps_list[1].max_layers = 100;
    caps_list[1].max_bytes_field = 32;
    caps_list[1].max_text_len = 1000;
    for (size_t c = 0; c < GV_ARRAY_LEN(caps_list); c++) {
        const struct gv_proto_caps *caps = &caps_list[c];
        const enum gv_proto_msg_type types[] = {GV_PROTO_MSG_HELLO, GV_PROTO_MSG_PUSH};
        size_t bound = gv_proto_arena_bound(caps);
        for (size_t t = 0; t < GV_ARRAY_LEN(types); t++) {
            gv_sample_max(caps, types[t], &m);
            GV_CHECK_OK(gv_proto_encode(&m, caps, frame, sizeof(frame), &len));
            unsigned char *buf = malloc(bound);
            gv_proto_arena_init(&arena, buf, bound);
            GV_CHECK_OK(gv_proto_decode(frame, len, caps, &arena, &out));
            GV_CHECK(gv_proto_msg_equal(&m, &out));
            GV_CHECK_EQ(out.n_segs, caps->max_segments);
            free(buf);
        }
    }
}

/* ---------------------------------------------------------------- payload segments */

/* What a receiver does: decode the header, then scatter the payload by segment straight into
 * its own buffers. The wire here is the concatenation the transport would deliver. */
static void test_scatter(void)
{
    uint32_t idx[10], got_idx[10];
    float val[10], got_val[10];
    uint8_t wire[4096], frame[1024];
    struct gv_proto_arena arena;
    struct gv_proto_msg m, out;
    size_t len;

    for (int i = 0; i < 10; i++) {
        idx[i] = (uint32_t)(i * 97 + 3);
        val[i] = (float)i * -0.25f;
    }
    gv_sample_msg(GV_PROTO_MSG_PUSH, &m);
    GV_CHECK_OK(gv_proto_encode(&m, NULL, frame, sizeof(frame), &len));
    /* sender: iov = {frame, idx, val} */
    memcpy(wire, frame, len);
    memcpy(wire + len, idx, sizeof(idx));
    memcpy(wire + len + sizeof(idx), val, sizeof(val));

    /* receiver */
    uint32_t hdr_len;
    uint64_t payload_len;
    GV_CHECK_OK(gv_proto_parse_prefix(wire, NULL, &hdr_len, &payload_len));
    gv_proto_arena_init(&arena, arena_buf, sizeof(arena_buf));
    GV_CHECK_OK(gv_proto_decode(wire, GV_PROTO_PREFIX_LEN + hdr_len, NULL, &arena, &out));
    size_t off = GV_PROTO_PREFIX_LEN + hdr_len;
    for (uint32_t s = 0; s < out.n_segs; s++) {
        void *dst = out.segs[s].kind == GV_PROTO_SEG_INDICES ? (void *)got_idx : (void *)got_val;
        GV_CHECK(out.segs[s].bytes <= sizeof(got_idx));
        memcpy(dst, wire + off, out.segs[s].bytes);
        off += out.segs[s].bytes;
    }
    GV_CHECK_EQ(off - GV_PROTO_PREFIX_LEN - hdr_len, payload_len);
    GV_CHECK(memcmp(idx, got_idx, sizeof(idx)) == 0);
    GV_CHECK(memcmp(val, got_val, sizeof(val)) == 0);
}

/* ---------------------------------------------------------------- helpers and names */

static void test_helpers(void)
{
    uint64_t b = 0;
    struct gv_proto_msg m;

    GV_CHECK_OK(gv_proto_enc_fixed_bytes(GV_PROTO_ENC_U32, 10, 0, &b));
    GV_CHECK_EQ(b, 40);
    GV_CHECK_OK(gv_proto_enc_fixed_bytes(GV_PROTO_ENC_F16, 10, 0, &b));
    GV_CHECK_EQ(b, 20);
    GV_CHECK_OK(gv_proto_enc_fixed_bytes(GV_PROTO_ENC_F32, 3, 0, &b));
    GV_CHECK_EQ(b, 12);
    GV_CHECK_OK(gv_proto_enc_fixed_bytes(GV_PROTO_ENC_BYTES, 7, 0, &b));
    GV_CHECK_EQ(b, 7);
    GV_CHECK_OK(gv_proto_enc_fixed_bytes(GV_PROTO_ENC_BITMAP, 10, 1000, &b));
    GV_CHECK_EQ(b, 125);
    GV_CHECK_OK(gv_proto_enc_fixed_bytes(GV_PROTO_ENC_BITMAP, 10, 1001, &b));
    GV_CHECK_EQ(b, 126);
    GV_CHECK_OK(gv_proto_enc_fixed_bytes(GV_PROTO_ENC_BITMAP, 0, 0, &b));
    GV_CHECK_EQ(b, 0);
    b = 99;
    GV_CHECK_STATUS(gv_proto_enc_fixed_bytes(GV_PROTO_ENC_DELTA_VARINT, 10, 0, &b), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_proto_enc_fixed_bytes(GV_PROTO_ENC_NONE, 10, 0, &b), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_proto_enc_fixed_bytes(GV_PROTO_ENC_U32, UINT64_MAX / 2, 0, &b),
                    GV_ERR_INVAL);
    GV_CHECK_EQ(b, 99);

    struct logcap lc;
    gv_proto_msg_init(&m, GV_PROTO_MSG_PUSH);
    logcap_begin(&lc);
    for (int i = 0; i < GV_PROTO_MAX_SEGMENTS; i++)
        GV_CHECK_OK(gv_proto_seg_add(&m, GV_PROTO_SEG_RAW, GV_PROTO_ENC_BYTES, 1, 1));
    GV_CHECK_STATUS(gv_proto_seg_add(&m, GV_PROTO_SEG_RAW, GV_PROTO_ENC_BYTES, 1, 1), GV_ERR_INVAL);
    logcap_end();
    GV_CHECK_EQ(m.n_segs, GV_PROTO_MAX_SEGMENTS);
    GV_CHECK_EQ(gv_proto_payload_len(&m), GV_PROTO_MAX_SEGMENTS);
}

static void test_names(void)
{
    GV_CHECK_STREQ(gv_proto_msg_type_str(GV_PROTO_MSG_PUSH), "push");
    GV_CHECK_STREQ(gv_proto_msg_type_str(GV_PROTO_MSG_ERROR), "error");
    GV_CHECK_STREQ(gv_proto_msg_type_str((enum gv_proto_msg_type)GV_PROTO_MSG_COUNT), "unknown");
    GV_CHECK_STREQ(gv_proto_msg_type_str((enum gv_proto_msg_type) - 1), "unknown");
    for (int a = 0; a < GV_PROTO_MSG_COUNT; a++)
        for (int b = a + 1; b < GV_PROTO_MSG_COUNT; b++)
            GV_CHECK(strcmp(gv_proto_msg_type_str((enum gv_proto_msg_type)a),
                            gv_proto_msg_type_str((enum gv_proto_msg_type)b)) != 0);
    GV_CHECK_STREQ(gv_proto_role_str(GV_PROTO_ROLE_WORKER), "worker");
    GV_CHECK_STREQ(gv_proto_role_str((enum gv_proto_role)4), "unknown");
    GV_CHECK_STREQ(gv_proto_dtype_str(GV_PROTO_DTYPE_BF16), "bf16");
    GV_CHECK_STREQ(gv_proto_level_str(GV_PROTO_LEVEL_FLOOR), "floor");
    GV_CHECK_STREQ(gv_proto_seg_kind_str(GV_PROTO_SEG_INDICES), "indices");
    GV_CHECK_STREQ(gv_proto_enc_str(GV_PROTO_ENC_DELTA_VARINT), "delta_varint");
    GV_CHECK_STREQ(gv_proto_enc_str((enum gv_proto_enc)7), "unknown");
    GV_CHECK_STREQ(gv_proto_refuse_str(GV_PROTO_REFUSE_AUTH), "auth");
}

int main(void)
{
    test_round_trip_every_type();
    test_round_trip_fields();
    test_round_trip_edges();
    test_msg_equal();
    test_decoder_refusals();
    test_garbage_headers();
    test_encoder_refusals();
    test_caps_check();
    test_arena();
    test_arena_bound();
    test_scatter();
    test_helpers();
    test_names();
    return gv_check_summary();
}
