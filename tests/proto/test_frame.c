/* test_frame.c: the 24-byte prefix (byte layout, round trip, magic, version, reserved, flags,
 * every oversized length) and whole-frame decoding at every truncation point. Truncated
 * frames are decoded from exact-size heap copies so that ASan sees any read past the end. */
#include "check.h"
#include "gv_proto.h"
#include "logcap.h"
#include "samples.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void valid_prefix(struct gv_proto_prefix *p, uint32_t hdr_len, uint64_t payload_len)
{
    *p = (struct gv_proto_prefix){GV_PROTO_MAGIC, GV_PROTO_VERSION, 0, hdr_len, 0, payload_len};
}

static void test_layout(void)
{
    static const uint8_t want[GV_PROTO_PREFIX_LEN] = {
        'G',  'R',  'V',  'C',  0x01, 0x00, 0x03, 0x02, 0x44, 0x33, 0x22, 0x11,
        0xdd, 0xcc, 0xbb, 0xaa, 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
    struct gv_proto_prefix p = {GV_PROTO_MAGIC, 1,          0x0203,
                                0x11223344,     0xaabbccdd, 0x0102030405060708ull};
    uint8_t buf[GV_PROTO_PREFIX_LEN + 1];
    struct gv_proto_prefix q;

    GV_CHECK_EQ(GV_PROTO_PREFIX_LEN, 24);
    /* written at an odd address: no alignment assumptions */
    gv_proto_prefix_write(&p, buf + 1);
    GV_CHECK(memcmp(buf + 1, want, sizeof(want)) == 0);
    gv_proto_prefix_read(want, &q);
    GV_CHECK_EQ(q.magic, GV_PROTO_MAGIC);
    GV_CHECK_EQ(q.version, 1);
    GV_CHECK_EQ(q.flags, 0x0203);
    GV_CHECK_EQ(q.hdr_len, 0x11223344);
    GV_CHECK_EQ(q.reserved, 0xaabbccdd);
    GV_CHECK(q.payload_len == 0x0102030405060708ull);
}

static void test_round_trip(void)
{
    int bad = 0;
    for (int i = 0; i < 10000; i++) {
        struct gv_proto_prefix p = {(uint32_t)rng(), (uint16_t)rng(), (uint16_t)rng(),
                                    (uint32_t)rng(), (uint32_t)rng(), rng()};
        struct gv_proto_prefix q;
        uint8_t a[GV_PROTO_PREFIX_LEN], b[GV_PROTO_PREFIX_LEN];
        gv_proto_prefix_write(&p, a);
        gv_proto_prefix_read(a, &q);
        gv_proto_prefix_write(&q, b);
        bad += p.magic != q.magic || p.version != q.version || p.flags != q.flags ||
               p.hdr_len != q.hdr_len || p.reserved != q.reserved ||
               p.payload_len != q.payload_len || memcmp(a, b, sizeof(a)) != 0;
    }
    GV_CHECK_EQ(bad, 0);
}

/* Parses p with caps; the out-params must stay untouched on failure. */
static gv_status_t parse(const struct gv_proto_prefix *p, const struct gv_proto_caps *caps,
                         uint32_t *hdr_len_p, uint64_t *payload_len_p)
{
    uint8_t buf[GV_PROTO_PREFIX_LEN];
    uint32_t h = 0xdeadbeef;
    uint64_t pl = 0xfeedfacecafebeefull;

    gv_proto_prefix_write(p, buf);
    gv_status_t status = gv_proto_parse_prefix(buf, caps, &h, &pl);
    if (status != GV_OK) {
        GV_CHECK_MSG(h == 0xdeadbeef && pl == 0xfeedfacecafebeefull,
                     "out-params written on failure");
    }
    if (hdr_len_p != NULL)
        *hdr_len_p = h;
    if (payload_len_p != NULL)
        *payload_len_p = pl;
    return status;
}

static void test_parse_ok(void)
{
    struct gv_proto_prefix p;
    uint32_t h;
    uint64_t pl;

    valid_prefix(&p, 123, 456789);
    GV_CHECK_OK(parse(&p, NULL, &h, &pl));
    GV_CHECK_EQ(h, 123);
    GV_CHECK_EQ(pl, 456789);
    valid_prefix(&p, 1, 0);
    GV_CHECK_OK(parse(&p, NULL, &h, &pl));
    GV_CHECK_EQ(h, 1);
    GV_CHECK_EQ(pl, 0);
}

static void test_magic(void)
{
    struct logcap lc;
    struct gv_proto_prefix p;
    int wrong = 0;

    logcap_begin(&lc);
    valid_prefix(&p, 10, 0);
    p.magic = 0x47525643u; /* "CVRG": the magic written big-endian */
    GV_CHECK_STATUS(parse(&p, NULL, NULL, NULL), GV_ERR_PROTO);
    GV_CHECK(logcap_has(&lc, "bad magic 0x47525643"));
    p.magic = 0;
    GV_CHECK_STATUS(parse(&p, NULL, NULL, NULL), GV_ERR_PROTO);
    for (int bit = 0; bit < 32; bit++) {
        p.magic = GV_PROTO_MAGIC ^ (1u << bit);
        wrong += parse(&p, NULL, NULL, NULL) == GV_ERR_PROTO;
    }
    GV_CHECK_EQ(wrong, 32);
    /* a wrong magic wins over a wrong version: the version of a stranger means nothing */
    p.magic = 0x50545448u; /* "HTTP" */
    p.version = 7;
    GV_CHECK_STATUS(parse(&p, NULL, NULL, NULL), GV_ERR_PROTO);
    logcap_end();
}

static void test_version(void)
{
    struct logcap lc;
    struct gv_proto_prefix p;
    char want[96];
    const uint16_t versions[] = {0, GV_PROTO_VERSION + 1, 0xffff};

    for (size_t i = 0; i < GV_ARRAY_LEN(versions); i++) {
        logcap_begin(&lc);
        valid_prefix(&p, 10, 0);
        p.version = versions[i];
        GV_CHECK_STATUS(parse(&p, NULL, NULL, NULL), GV_ERR_VERSION);
        snprintf(want, sizeof(want), "peer speaks wire version %u, this build speaks %u",
                 versions[i], GV_PROTO_VERSION);
        GV_CHECK_MSG(logcap_has(&lc, want), "log \"%s\" lacks \"%s\"", lc.line, want);
        GV_CHECK_EQ(lc.n, 1);
        GV_CHECK_EQ(lc.level, GV_LOG_ERROR);
        logcap_end();
    }
    /* the version is checked before fields a later version may redefine */
    valid_prefix(&p, 10, 0);
    p.version = GV_PROTO_VERSION + 1;
    p.reserved = 5;
    p.flags = 0xffff;
    p.hdr_len = UINT32_MAX;
    logcap_begin(&lc);
    GV_CHECK_STATUS(parse(&p, NULL, NULL, NULL), GV_ERR_VERSION);
    GV_CHECK(logcap_has(&lc, "peer speaks wire version 5, this build speaks 4"));
    logcap_end();
    /* the versions before: 1 (before the checkpoint fields, LAYOUT and the replica checksums)
     * 2 (before IterStats.lr) and 3 (before IterStats.pause_s) are refused as well */
    for (uint16_t v = 1; v < GV_PROTO_VERSION; v++) {
        char old[80];
        snprintf(old, sizeof(old), "peer speaks wire version %u, this build speaks 4", v);
        valid_prefix(&p, 10, 0);
        p.version = v;
        logcap_begin(&lc);
        GV_CHECK_STATUS(parse(&p, NULL, NULL, NULL), GV_ERR_VERSION);
        GV_CHECK_MSG(logcap_has(&lc, old), "%s", old);
        logcap_end();
    }
}

static void test_reserved_flags(void)
{
    struct logcap lc;
    struct gv_proto_prefix p;

    logcap_begin(&lc);
    const uint32_t reserved[] = {1, 0x100, 0x80000000u, UINT32_MAX};
    for (size_t i = 0; i < GV_ARRAY_LEN(reserved); i++) {
        valid_prefix(&p, 10, 0);
        p.reserved = reserved[i];
        GV_CHECK_STATUS(parse(&p, NULL, NULL, NULL), GV_ERR_PROTO);
        GV_CHECK(logcap_has(&lc, "reserved"));
    }
    for (int bit = 0; bit < 16; bit++) {
        valid_prefix(&p, 10, 0);
        p.flags = (uint16_t)(1u << bit);
        GV_CHECK_STATUS(parse(&p, NULL, NULL, NULL), GV_ERR_PROTO);
        GV_CHECK(logcap_has(&lc, "flags"));
    }
    logcap_end();
}

static void test_oversized(void)
{
    struct logcap lc;
    struct gv_proto_prefix p;
    struct gv_proto_caps caps;
    uint32_t h;
    uint64_t pl;

    gv_proto_caps_default(&caps);
    GV_CHECK_EQ(caps.max_hdr_len, 65536);
    GV_CHECK(caps.max_payload_len == 2ull << 30);
    GV_CHECK_EQ(caps.max_segments, 16);
    GV_CHECK_EQ(caps.max_numel, INT32_MAX);
    GV_CHECK_EQ(caps.max_bytes_field, 64);
    GV_CHECK_OK(gv_proto_caps_check(&caps));

    logcap_begin(&lc);
    /* hdr_len: 0 and above the cap refused, the cap itself accepted */
    valid_prefix(&p, 0, 0);
    GV_CHECK_STATUS(parse(&p, NULL, NULL, NULL), GV_ERR_PROTO);
    GV_CHECK(logcap_has(&lc, "hdr_len 0"));
    valid_prefix(&p, caps.max_hdr_len, 0);
    GV_CHECK_OK(parse(&p, NULL, &h, NULL));
    GV_CHECK_EQ(h, caps.max_hdr_len);
    valid_prefix(&p, caps.max_hdr_len + 1, 0);
    GV_CHECK_STATUS(parse(&p, NULL, NULL, NULL), GV_ERR_PROTO);
    GV_CHECK_MSG(logcap_has(&lc, "hdr_len 65537 above cap max_hdr_len 65536"), "log: %s", lc.line);
    valid_prefix(&p, UINT32_MAX, 0);
    GV_CHECK_STATUS(parse(&p, NULL, NULL, NULL), GV_ERR_PROTO);

    /* payload_len */
    valid_prefix(&p, 10, caps.max_payload_len);
    GV_CHECK_OK(parse(&p, NULL, NULL, &pl));
    GV_CHECK(pl == caps.max_payload_len);
    valid_prefix(&p, 10, caps.max_payload_len + 1);
    GV_CHECK_STATUS(parse(&p, NULL, NULL, NULL), GV_ERR_PROTO);
    GV_CHECK_MSG(logcap_has(&lc, "payload_len 2147483649 above cap max_payload_len 2147483648"),
                 "log: %s", lc.line);
    valid_prefix(&p, 10, UINT64_MAX);
    GV_CHECK_STATUS(parse(&p, NULL, NULL, NULL), GV_ERR_PROTO);

    /* caller caps, not only the defaults */
    caps.max_hdr_len = 100;
    caps.max_payload_len = 4096;
    valid_prefix(&p, 100, 4096);
    GV_CHECK_OK(parse(&p, &caps, NULL, NULL));
    valid_prefix(&p, 101, 4096);
    GV_CHECK_STATUS(parse(&p, &caps, NULL, NULL), GV_ERR_PROTO);
    GV_CHECK(logcap_has(&lc, "hdr_len 101 above cap max_hdr_len 100"));
    valid_prefix(&p, 100, 4097);
    GV_CHECK_STATUS(parse(&p, &caps, NULL, NULL), GV_ERR_PROTO);
    GV_CHECK(logcap_has(&lc, "payload_len 4097 above cap max_payload_len 4096"));
    logcap_end();
}

/* Copies n bytes into a heap block of exactly n bytes so ASan flags any over-read. */
static uint8_t *exact_copy(const uint8_t *src, size_t n)
{
    uint8_t *p = malloc(n > 0 ? n : 1);
    if (n > 0)
        memcpy(p, src, n);
    return p;
}

static void truncate_one(const struct gv_proto_msg *m, const char *name)
{
    uint8_t frame[4096], arena_buf[1 << 16];
    struct gv_proto_arena arena;
    struct gv_proto_msg out;
    size_t len;
    int refused = 0, consistent_equal = 0, consistent_other = 0;

    gv_proto_arena_init(&arena, arena_buf, sizeof(arena_buf));
    if (gv_proto_encode(m, NULL, frame, sizeof(frame), &len) != GV_OK) {
        GV_CHECK_MSG(0, "%s: sample does not encode", name);
        return;
    }
    uint8_t *full = exact_copy(frame, len);
    GV_CHECK_OK(gv_proto_decode(full, len, NULL, &arena, &out));
    GV_CHECK_MSG(gv_proto_msg_equal(m, &out), "%s: full frame differs", name);
    free(full);

    for (size_t n = 0; n < len; n++) {
        uint8_t *p = exact_copy(frame, n);
        refused += gv_proto_decode(p, n, NULL, &arena, &out) == GV_ERR_PROTO;
        free(p);
        if (n <= GV_PROTO_PREFIX_LEN)
            continue;
        /* the same cut with a prefix that agrees: the protobuf itself is truncated */
        p = exact_copy(frame, n);
        struct gv_proto_prefix pre;
        gv_proto_prefix_read(p, &pre);
        pre.hdr_len = (uint32_t)(n - GV_PROTO_PREFIX_LEN);
        gv_proto_prefix_write(&pre, p);
        gv_status_t st = gv_proto_decode(p, n, NULL, &arena, &out);
        /* a cut at a field boundary can leave a valid shorter header: then it must still
         * pass every check, and can never equal the original message */
        if (st == GV_OK)
            consistent_equal += gv_proto_msg_equal(m, &out);
        else
            consistent_other += st != GV_ERR_PROTO;
        free(p);
    }
    GV_CHECK_MSG(refused == (int)len, "%s: %d of %zu truncations refused", name, refused, len);
    GV_CHECK_EQ(consistent_other, 0);
    GV_CHECK_EQ(consistent_equal, 0);

    /* one byte too many */
    uint8_t *p = malloc(len + 1);
    memcpy(p, frame, len);
    p[len] = 0;
    GV_CHECK_STATUS(gv_proto_decode(p, len + 1, NULL, &arena, &out), GV_ERR_PROTO);
    free(p);
}

static void test_truncation(void)
{
    struct logcap lc;
    struct gv_proto_msg m;

    logcap_begin(&lc); /* keeps thousands of refusals out of the test log */
    for (int t = GV_PROTO_MSG_HELLO; t < GV_PROTO_MSG_COUNT; t++) {
        gv_sample_msg((enum gv_proto_msg_type)t, &m);
        truncate_one(&m, gv_proto_msg_type_str((enum gv_proto_msg_type)t));
    }
    gv_sample_push_bitmap(&m);
    truncate_one(&m, "push bitmap");
    GV_CHECK(lc.n > 0);
    logcap_end();
}

/* A whole frame with a bad prefix fails with the prefix's error. */
static void test_decode_prefix_errors(void)
{
    struct logcap lc;
    uint8_t frame[1024], arena_buf[8192];
    struct gv_proto_arena arena;
    struct gv_proto_msg m, out;
    struct gv_proto_prefix p;
    size_t len;

    gv_proto_arena_init(&arena, arena_buf, sizeof(arena_buf));
    gv_sample_msg(GV_PROTO_MSG_PUSH, &m);
    GV_CHECK_OK(gv_proto_encode(&m, NULL, frame, sizeof(frame), &len));
    logcap_begin(&lc);

    gv_proto_prefix_read(frame, &p);
    GV_CHECK_EQ(p.magic, GV_PROTO_MAGIC);
    GV_CHECK_EQ(p.version, GV_PROTO_VERSION);
    GV_CHECK_EQ(p.hdr_len, len - GV_PROTO_PREFIX_LEN);
    GV_CHECK_EQ(p.payload_len, 80);

    p.version = GV_PROTO_VERSION + 1;
    gv_proto_prefix_write(&p, frame);
    GV_CHECK_STATUS(gv_proto_decode(frame, len, NULL, &arena, &out), GV_ERR_VERSION);
    GV_CHECK(logcap_has(&lc, "peer speaks wire version 5, this build speaks 4"));
    p.version = GV_PROTO_VERSION;
    p.magic ^= 1;
    gv_proto_prefix_write(&p, frame);
    GV_CHECK_STATUS(gv_proto_decode(frame, len, NULL, &arena, &out), GV_ERR_PROTO);
    p.magic ^= 1;
    p.reserved = 1;
    gv_proto_prefix_write(&p, frame);
    GV_CHECK_STATUS(gv_proto_decode(frame, len, NULL, &arena, &out), GV_ERR_PROTO);
    p.reserved = 0;
    gv_proto_prefix_write(&p, frame);
    GV_CHECK_OK(gv_proto_decode(frame, len, NULL, &arena, &out));
    logcap_end();
}

int main(void)
{
    test_layout();
    test_round_trip();
    test_parse_ok();
    test_magic();
    test_version();
    test_reserved_flags();
    test_oversized();
    test_truncation();
    test_decode_prefix_errors();
    return gv_check_summary();
}
