/* fuzz_frame.c: libFuzzer target for the frame prefix and header decoder. The input is a
 * frame without payload (what the transport hands to on_header): it goes to
 * gv_proto_parse_prefix, to gv_proto_decode, and (so that the fuzzer reaches the protobuf
 * decoder without first forging a consistent prefix) to gv_proto_decode_header on the bytes
 * after the prefix, all with the default caps and a fixed arena. Oracles, each an abort:
 *   - every status is GV_OK, GV_ERR_PROTO or (prefix only) GV_ERR_VERSION;
 *   - decode and parse_prefix agree on a bad prefix;
 *   - the arena never grows past its fixed size (there is no other allocation to check);
 *   - an accepted header decoded again with a small arena (0..2040 bytes, from the first
 *     input byte) gives the same message or GV_ERR_PROTO with the arena marked overflowed;
 *   - an accepted header re-encodes (the encoder accepts whatever the decoder accepts), no
 *     larger than it came, and decodes back to an equal message. */
#include "gv_proto.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define ARENA_BYTES (64 << 10)

static unsigned char arena_a_buf[ARENA_BYTES], arena_b_buf[ARENA_BYTES];
static unsigned char arena_small_buf[2048];
static uint8_t reencoded[GV_PROTO_PREFIX_LEN + (128 << 10)];

static void quiet_sink(enum gv_log_level level, const char *line, void *arg)
{
    (void)level;
    (void)line;
    (void)arg;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    gv_log_set_cb(quiet_sink, NULL);
    gv_log_set_level(GV_LOG_ERROR);
    return 0;
}

static void fail(const char *what, gv_status_t status)
{
    fprintf(stderr, "fuzz_frame: %s (status %s)\n", what, gv_status_str(status));
    abort();
}

static void check_arena(const struct gv_proto_arena *a)
{
    if (a->used > a->cap || a->peak > a->cap)
        fail("arena grew past its size", GV_OK);
}

/* m was decoded from a header of hdr_len bytes announcing payload_len. */
static void check_reencode(const struct gv_proto_msg *m, size_t hdr_len, uint64_t payload_len)
{
    struct gv_proto_caps lenient;
    struct gv_proto_arena arena_b;
    struct gv_proto_msg back;
    size_t len;
    gv_status_t status;

    gv_proto_caps_default(&lenient);
    lenient.max_hdr_len = 128 << 10; /* the size oracle below is the real check */
    status = gv_proto_encode(m, &lenient, reencoded, sizeof(reencoded), &len);
    if (status != GV_OK)
        fail("decoder accepted a header the encoder refuses", status);
    if (len - GV_PROTO_PREFIX_LEN > hdr_len)
        fail("re-encoded header is larger than the one received", status);
    if (gv_proto_payload_len(m) != payload_len)
        fail("segments do not add up to the payload length", status);
    gv_proto_arena_init(&arena_b, arena_b_buf, sizeof(arena_b_buf));
    status = gv_proto_decode(reencoded, len, NULL, &arena_b, &back);
    if (status != GV_OK)
        fail("re-encoded frame does not decode", status);
    if (!gv_proto_msg_equal(m, &back))
        fail("re-encoded frame decodes to another message", status);
}

/* m was decoded from the header after the prefix of data; decode it again in an arena of
 * data[0] * 8 bytes. */
static void check_small_arena(const struct gv_proto_msg *m, const uint8_t *data, size_t size,
                              uint64_t payload_len)
{
    struct gv_proto_arena small;
    struct gv_proto_msg again;
    size_t cap = (size_t)data[0] * 8;

    gv_proto_arena_init(&small, arena_small_buf, cap);
    gv_status_t status = gv_proto_decode_header(
        data + GV_PROTO_PREFIX_LEN, size - GV_PROTO_PREFIX_LEN, payload_len, NULL, &small, &again);
    check_arena(&small);
    if (status == GV_OK && !gv_proto_msg_equal(m, &again))
        fail("a smaller arena decodes to another message", status);
    if (status != GV_OK && !(status == GV_ERR_PROTO && small.overflow))
        fail("a smaller arena fails other than by overflow", status);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int initialized;
    struct gv_proto_arena arena;
    struct gv_proto_msg m;
    gv_status_t st_prefix = GV_ERR_PROTO, st_frame, st_hdr;
    uint32_t hdr_len = 0;
    uint64_t payload_len = 0;

    if (!initialized) {
        LLVMFuzzerInitialize(NULL, NULL);
        initialized = 1;
    }
    gv_proto_arena_init(&arena, arena_a_buf, sizeof(arena_a_buf));

    if (size >= GV_PROTO_PREFIX_LEN) {
        st_prefix = gv_proto_parse_prefix(data, NULL, &hdr_len, &payload_len);
        if (st_prefix != GV_OK && st_prefix != GV_ERR_PROTO && st_prefix != GV_ERR_VERSION)
            fail("parse_prefix returned an unexpected status", st_prefix);
    }

    st_frame = gv_proto_decode(data, size, NULL, &arena, &m);
    check_arena(&arena);
    if (st_frame != GV_OK && st_frame != GV_ERR_PROTO && st_frame != GV_ERR_VERSION)
        fail("decode returned an unexpected status", st_frame);
    if (size >= GV_PROTO_PREFIX_LEN && st_prefix != GV_OK && st_frame != st_prefix)
        fail("decode and parse_prefix disagree on the prefix", st_frame);
    if (st_frame == GV_OK) {
        if (m.payload_len != payload_len)
            fail("decoded payload_len differs from the prefix", st_frame);
        check_reencode(&m, hdr_len, payload_len);
    }

    if (size > GV_PROTO_PREFIX_LEN) {
        struct gv_proto_prefix raw;
        gv_proto_prefix_read(data, &raw);
        size_t n = size - GV_PROTO_PREFIX_LEN;
        st_hdr = gv_proto_decode_header(data + GV_PROTO_PREFIX_LEN, n, raw.payload_len, NULL,
                                        &arena, &m);
        check_arena(&arena);
        if (st_hdr != GV_OK && st_hdr != GV_ERR_PROTO)
            fail("decode_header returned an unexpected status", st_hdr);
        if (st_frame == GV_OK && st_hdr != GV_OK)
            fail("decode_header refused what decode accepted", st_hdr);
        if (st_hdr == GV_OK) {
            check_reencode(&m, n, raw.payload_len);
            check_small_arena(&m, data, size, raw.payload_len);
        }
    }
    return 0;
}
