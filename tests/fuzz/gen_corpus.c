/* gen_corpus.c: writes the seed inputs of the frame fuzz corpus (valid frames of every
 * message type and interesting invalid ones), or checks that the committed seeds are still
 * byte-identical to what the current code generates:
 *     gen_corpus DIR            write the seeds into DIR (seed-*)
 *     gen_corpus --check DIR    exit 1 when a seed in DIR is missing or differs
 * A --check failure after a change to the prefix or gravac.proto means the wire format
 * changed: bump GV_PROTO_VERSION and regenerate the seeds. Inputs found by the fuzzer live
 * next to the seeds under their libFuzzer (sha1) names and are not touched. Invalid headers
 * are made by unpacking a valid one with protobuf-c, changing one field, and repacking. */
#include "gravac.pb-c.h"
#include "gv_proto.h"
#include "samples.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FRAME_MAX (1 << 16)

struct seed {
    char name[64];
    uint8_t bytes[FRAME_MAX];
    size_t len;
};

static struct seed seeds[64];
static size_t n_seeds;

static struct seed *seed_new(const char *name)
{
    if (n_seeds == sizeof(seeds) / sizeof(seeds[0])) {
        fprintf(stderr, "gen_corpus: too many seeds\n");
        exit(1);
    }
    struct seed *s = &seeds[n_seeds++];
    int n = snprintf(s->name, sizeof(s->name), "seed-%s", name);
    if (n < 0 || (size_t)n >= sizeof(s->name)) {
        fprintf(stderr, "gen_corpus: seed name %s too long\n", name);
        exit(1);
    }
    s->len = 0;
    return s;
}

static void must(gv_status_t status, const char *what)
{
    if (status != GV_OK) {
        fprintf(stderr, "gen_corpus: %s: %s\n", what, gv_status_str(status));
        exit(1);
    }
}

static void add_valid(const char *name, const struct gv_proto_msg *m)
{
    struct seed *s = seed_new(name);
    must(gv_proto_encode(m, NULL, s->bytes, sizeof(s->bytes), &s->len), name);
}

/* A valid frame whose prefix field is then changed. */
static struct seed *add_prefix_variant(const char *name, const struct gv_proto_msg *m)
{
    struct seed *s = seed_new(name);
    must(gv_proto_encode(m, NULL, s->bytes, sizeof(s->bytes), &s->len), name);
    return s;
}

static void set_prefix(struct seed *s, void (*edit)(struct gv_proto_prefix *p))
{
    struct gv_proto_prefix p;
    gv_proto_prefix_read(s->bytes, &p);
    edit(&p);
    gv_proto_prefix_write(&p, s->bytes);
}

static void p_magic(struct gv_proto_prefix *p)
{
    p->magic = 0x47525643u;
}
static void p_version(struct gv_proto_prefix *p)
{
    p->version = GV_PROTO_VERSION + 1;
}
static void p_reserved(struct gv_proto_prefix *p)
{
    p->reserved = 1;
}
static void p_flags(struct gv_proto_prefix *p)
{
    p->flags = 0x8000;
}
static void p_hdr_zero(struct gv_proto_prefix *p)
{
    p->hdr_len = 0;
}
static void p_hdr_big(struct gv_proto_prefix *p)
{
    p->hdr_len = (64u << 10) + 1;
}
static void p_payload_big(struct gv_proto_prefix *p)
{
    p->payload_len = (2ull << 30) + 1;
}
static void p_payload_plus1(struct gv_proto_prefix *p)
{
    p->payload_len += 1;
}

/* protobuf-c allocations for the generator's own unpack: a bump pool, never freed. */
static unsigned char pool[1 << 20];
static size_t pool_used;

static void *pool_alloc(void *data, size_t size)
{
    size_t need = (size + 15) & ~(size_t)15;
    (void)data;
    if (need > sizeof(pool) - pool_used)
        return NULL;
    void *p = pool + pool_used;
    pool_used += need;
    return p;
}

static void pool_free(void *data, void *ptr)
{
    (void)data;
    (void)ptr;
}

static ProtobufCAllocator pool_allocator = {pool_alloc, pool_free, NULL};

static void add_mutated(const char *name, const struct gv_proto_msg *m,
                        void (*mutate)(Gravac__Header *h), int64_t payload_delta)
{
    uint8_t frame[FRAME_MAX];
    struct gv_proto_prefix p;
    size_t len;

    must(gv_proto_encode(m, NULL, frame, sizeof(frame), &len), name);
    gv_proto_prefix_read(frame, &p);
    Gravac__Header *h =
        gravac__header__unpack(&pool_allocator, p.hdr_len, frame + GV_PROTO_PREFIX_LEN);
    if (h == NULL)
        must(GV_ERR_PROTO, name);
    mutate(h);
    struct seed *s = seed_new(name);
    size_t hdr_len = gravac__header__get_packed_size(h);
    if (hdr_len > sizeof(s->bytes) - GV_PROTO_PREFIX_LEN)
        must(GV_ERR_INVAL, name);
    gravac__header__pack(h, s->bytes + GV_PROTO_PREFIX_LEN);
    p.hdr_len = (uint32_t)hdr_len;
    p.payload_len += (uint64_t)payload_delta;
    gv_proto_prefix_write(&p, s->bytes);
    s->len = GV_PROTO_PREFIX_LEN + hdr_len;
}

static uint8_t big_bytes[65];
static Gravac__Segment x_segs[17];
static Gravac__Segment *x_segp[17];
static uint8_t x_unknown_data[1] = {1};
static ProtobufCMessageUnknownField x_unknown = {99, PROTOBUF_C_WIRE_TYPE_VARINT, 1,
                                                 x_unknown_data};

static void h_nnz(Gravac__Header *h)
{
    h->nnz = h->numel + 1;
}
static void h_type(Gravac__Header *h)
{
    h->type = 14;
}
static void h_cf(Gravac__Header *h)
{
    h->cf = 0.5;
}
static void h_nonce(Gravac__Header *h)
{
    h->hello->nonce = (ProtobufCBinaryData){65, big_bytes};
}
static void h_ctrl(Gravac__Header *h)
{
    h->error->text = "line\nbreak";
}
static void h_unknown(Gravac__Header *h)
{
    h->base.n_unknown_fields = 1;
    h->base.unknown_fields = &x_unknown;
}
static void h_seg_bytes(Gravac__Header *h)
{
    h->segments[0]->bytes += 1;
}
static void h_seg_wrap(Gravac__Header *h)
{
    h->segments[0]->kind = GRAVAC__SEG_KIND__SEG_RAW;
    h->segments[0]->encoding = GRAVAC__SEG_ENCODING__SEG_ENC_BYTES;
    h->segments[0]->count = UINT64_MAX - 39;
    h->segments[0]->bytes = UINT64_MAX - 39;
}
static void h_17_segs(Gravac__Header *h)
{
    for (size_t i = 0; i < 17; i++) {
        gravac__segment__init(&x_segs[i]);
        x_segs[i].kind = GRAVAC__SEG_KIND__SEG_RAW;
        x_segs[i].encoding = GRAVAC__SEG_ENCODING__SEG_ENC_BYTES;
        x_segs[i].count = 1;
        x_segs[i].bytes = 1;
        x_segp[i] = &x_segs[i];
    }
    h->n_segments = 17;
    h->segments = x_segp;
}
static void h_body_mismatch(Gravac__Header *h)
{
    h->type = GRAVAC__MSG_TYPE__MSG_UPDATE;
}
static void h_lr_nan(Gravac__Header *h)
{
    h->update->decision->lr = NAN;
}

static void build(void)
{
    struct gv_proto_msg m;
    struct gv_proto_caps caps;
    char name[64];

    for (int t = GV_PROTO_MSG_HELLO; t < GV_PROTO_MSG_COUNT; t++) {
        gv_sample_msg((enum gv_proto_msg_type)t, &m);
        snprintf(name, sizeof(name), "valid-%s", gv_proto_msg_type_str(m.type));
        add_valid(name, &m);
    }
    gv_sample_push_bitmap(&m);
    add_valid("valid-push-bitmap", &m);
    gv_proto_caps_default(&caps);
    gv_sample_max(&caps, GV_PROTO_MSG_HELLO, &m);
    add_valid("valid-hello-at-caps", &m);
    gv_proto_msg_init(&m, GV_PROTO_MSG_PUSH);
    add_valid("valid-push-empty", &m);

    gv_sample_msg(GV_PROTO_MSG_PUSH, &m);
    set_prefix(add_prefix_variant("bad-magic", &m), p_magic);
    set_prefix(add_prefix_variant("bad-version", &m), p_version);
    set_prefix(add_prefix_variant("bad-reserved", &m), p_reserved);
    set_prefix(add_prefix_variant("bad-flags", &m), p_flags);
    set_prefix(add_prefix_variant("bad-hdr-len-zero", &m), p_hdr_zero);
    set_prefix(add_prefix_variant("bad-hdr-len-over-cap", &m), p_hdr_big);
    set_prefix(add_prefix_variant("bad-payload-over-cap", &m), p_payload_big);
    set_prefix(add_prefix_variant("bad-payload-len-mismatch", &m), p_payload_plus1);
    struct seed *s = add_prefix_variant("bad-truncated-header", &m);
    s->len -= 1;
    s = add_prefix_variant("bad-truncated-prefix", &m);
    s->len = GV_PROTO_PREFIX_LEN - 1;
    s = add_prefix_variant("bad-trailing-byte", &m);
    s->bytes[s->len++] = 0;

    add_mutated("bad-nnz-over-numel", &m, h_nnz, 0);
    add_mutated("bad-unknown-type", &m, h_type, 0);
    add_mutated("bad-cf-below-one", &m, h_cf, 0);
    add_mutated("bad-unknown-field", &m, h_unknown, 0);
    add_mutated("bad-segment-bytes", &m, h_seg_bytes, 1);
    add_mutated("bad-segment-wrap", &m, h_seg_wrap, -80);
    add_mutated("bad-body-mismatch", &m, h_body_mismatch, 0);
    gv_sample_msg(GV_PROTO_MSG_HEARTBEAT, &m);
    add_mutated("bad-17-segments", &m, h_17_segs, 17);
    gv_sample_msg(GV_PROTO_MSG_HELLO, &m);
    add_mutated("bad-nonce-over-cap", &m, h_nonce, 0);
    gv_sample_msg(GV_PROTO_MSG_ERROR, &m);
    add_mutated("bad-control-char", &m, h_ctrl, 0);
    gv_sample_msg(GV_PROTO_MSG_UPDATE, &m);
    add_mutated("bad-lr-nan", &m, h_lr_nan, 0);
}

/* dir/name into path; -1 when it does not fit. */
static int seed_path(char *path, size_t size, const char *dir, const char *name)
{
    int n = snprintf(path, size, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= size) {
        fprintf(stderr, "gen_corpus: path %s/%s too long\n", dir, name);
        return -1;
    }
    return 0;
}

static int write_all(const char *dir)
{
    for (size_t i = 0; i < n_seeds; i++) {
        char path[4096];
        if (seed_path(path, sizeof(path), dir, seeds[i].name) != 0)
            return 1;
        FILE *f = fopen(path, "wb");
        if (f == NULL || fwrite(seeds[i].bytes, 1, seeds[i].len, f) != seeds[i].len ||
            fclose(f) != 0) {
            fprintf(stderr, "gen_corpus: %s: %s\n", path, strerror(errno));
            return 1;
        }
    }
    printf("gen_corpus: wrote %zu seeds to %s\n", n_seeds, dir);
    return 0;
}

/* Each seed does what its name says: valid-* decode, bad-* are refused (bad-version with
 * GV_ERR_VERSION, the others with GV_ERR_PROTO). */
static int check_meaning(void)
{
    static unsigned char arena_buf[1 << 16];
    struct gv_proto_arena arena;
    struct gv_proto_msg m;
    int bad = 0;

    gv_proto_arena_init(&arena, arena_buf, sizeof(arena_buf));
    for (size_t i = 0; i < n_seeds; i++) {
        const char *name = seeds[i].name;
        gv_status_t want = strncmp(name, "seed-valid-", 11) == 0   ? GV_OK
                           : strcmp(name, "seed-bad-version") == 0 ? GV_ERR_VERSION
                                                                   : GV_ERR_PROTO;
        gv_status_t got = gv_proto_decode(seeds[i].bytes, seeds[i].len, NULL, &arena, &m);
        if (got != want) {
            fprintf(stderr, "gen_corpus: %s decodes to %s, want %s\n", name, gv_status_str(got),
                    gv_status_str(want));
            bad++;
        }
    }
    return bad;
}

static int check_all(const char *dir)
{
    static uint8_t buf[FRAME_MAX + 1];
    int bad = check_meaning();

    for (size_t i = 0; i < n_seeds; i++) {
        char path[4096];
        if (seed_path(path, sizeof(path), dir, seeds[i].name) != 0)
            return 1;
        FILE *f = fopen(path, "rb");
        if (f == NULL) {
            fprintf(stderr, "gen_corpus: %s: %s\n", path, strerror(errno));
            bad++;
            continue;
        }
        size_t n = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        if (n != seeds[i].len || memcmp(buf, seeds[i].bytes, n) != 0) {
            fprintf(stderr, "gen_corpus: %s differs from what this build encodes\n", path);
            bad++;
        }
    }
    if (bad != 0) {
        fprintf(stderr,
                "gen_corpus: %d of %zu seeds differ: the wire format changed? bump "
                "GV_PROTO_VERSION and regenerate (docs/wire-format.md)\n",
                bad, n_seeds);
        return 1;
    }
    printf("gen_corpus: %zu seeds match\n", n_seeds);
    return 0;
}

int main(int argc, char **argv)
{
    gv_log_set_level(GV_LOG_ERROR);
    memset(big_bytes, 0x42, sizeof(big_bytes));
    build();
    if (argc == 3 && strcmp(argv[1], "--check") == 0)
        return check_all(argv[2]);
    if (argc == 2)
        return write_all(argv[1]);
    fprintf(stderr, "usage: %s [--check] DIR\n", argv[0]);
    return 2;
}
