/* gen_ps_corpus.c: writes the seed inputs of fuzz_handshake and fuzz_msg (valid frames made
 * by the real encoders, in the layout each target reads) into the two directories named on the
 * command line. The committed corpora hold these seeds plus what libFuzzer found from them:
 *   gen_ps_corpus tests/fuzz/corpus/handshake tests/fuzz/corpus/msg */
#include "gv_ps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct gv_proto_caps caps;

/* Appends m's frame (prefix, header) and payload to buf at *len. */
static void put(uint8_t *buf, size_t cap, size_t *len, const struct gv_proto_msg *m,
                const void *payload, size_t pl_len)
{
    size_t n;
    if (gv_proto_encode(m, &caps, buf + *len, cap - *len, &n) != GV_OK || *len + n + pl_len > cap) {
        fprintf(stderr, "gen_ps_corpus: cannot encode a %s\n", gv_proto_msg_type_str(m->type));
        exit(1);
    }
    *len += n;
    if (pl_len > 0)
        memcpy(buf + *len, payload, pl_len);
    *len += pl_len;
}

static void save(const char *dir, const char *name, const uint8_t *buf, size_t len)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/seed-%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(buf, 1, len, f) != len) {
        fprintf(stderr, "gen_ps_corpus: cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

static void handshake_seeds(const char *dir)
{
    static uint8_t buf[8192];
    uint8_t nonce[64];
    for (int i = 0; i < 64; i++)
        nonce[i] = (uint8_t)(i * 37 + 11);
    struct gv_proto_msg m;
    for (int flags = 0; flags < 8; flags++) {
        size_t len = 0;
        buf[len++] = (uint8_t)flags;
        gv_proto_msg_init(&m, GV_PROTO_MSG_HELLO);
        m.role = flags & 4 ? GV_PROTO_ROLE_SERVER : GV_PROTO_ROLE_WORKER;
        m.rank = 1;
        m.u.hello = (struct gv_proto_hello){
            .num_workers = 2, .num_servers = 2, .nonce = {nonce, 32}, .cluster_id = "gravac"};
        put(buf, sizeof(buf), &len, &m, NULL, 0);
        gv_proto_msg_init(&m, GV_PROTO_MSG_CHALLENGE);
        m.role = GV_PROTO_ROLE_SERVER;
        m.u.challenge.nonce = (struct gv_proto_bytes){nonce, flags & 1 ? 64 : 32};
        put(buf, sizeof(buf), &len, &m, NULL, 0);
        gv_proto_msg_init(&m, GV_PROTO_MSG_AUTH);
        m.role = GV_PROTO_ROLE_WORKER;
        m.rank = 1;
        m.u.auth.mac = (struct gv_proto_bytes){nonce + 32, flags & 2 ? 32 : 0};
        put(buf, sizeof(buf), &len, &m, NULL, 0);
        gv_proto_msg_init(&m, GV_PROTO_MSG_WELCOME);
        m.role = GV_PROTO_ROLE_SERVER;
        m.u.welcome =
            (struct gv_proto_welcome){.shard_numel = 10, .model_numel = 20, .num_shards = 2};
        put(buf, sizeof(buf), &len, &m, NULL, 0);
        char name[32];
        snprintf(name, sizeof(name), "exchange-%d", flags);
        save(dir, name, buf, len);
    }
    size_t len = 0;
    buf[len++] = 1;
    gv_proto_msg_init(&m, GV_PROTO_MSG_REFUSE);
    m.u.refuse.code = GV_PROTO_REFUSE_AUTH;
    m.u.refuse.text = "authentication failed";
    put(buf, sizeof(buf), &len, &m, NULL, 0);
    save(dir, "refuse", buf, len);
    len = 0;
    buf[len++] = 3;
    gv_proto_msg_init(&m, GV_PROTO_MSG_HELLO);
    m.role = GV_PROTO_ROLE_WORKER;
    m.rank = 7; /* out of range */
    m.u.hello = (struct gv_proto_hello){
        .num_workers = 3, .num_servers = 2, .nonce = {nonce, 16}, .cluster_id = "other"};
    put(buf, sizeof(buf), &len, &m, NULL, 0);
    gv_proto_msg_init(&m, GV_PROTO_MSG_PUSH); /* out of order */
    put(buf, sizeof(buf), &len, &m, NULL, 0);
    save(dir, "bad-hello", buf, len);
}

/* A sparse PUSH or UPDATE of `count` entries over n, with the given encodings. */
static void sparse_seed(const char *dir, const char *name, uint8_t mode,
                        enum gv_proto_msg_type type, uint32_t n, uint32_t count, enum gv_idx_enc ie,
                        enum gv_val_type vt, bool accordion)
{
    static uint8_t buf[1 << 17], idx_buf[1 << 16], val_buf[1 << 16];
    uint32_t idx[4096];
    float val[4096];
    for (uint32_t i = 0; i < count; i++) {
        idx[i] = i * (n / count);
        val[i] = 0.25f * (float)(i + 1) * (i % 2 ? -1.0f : 1.0f);
    }
    struct gv_sparse sp = {.idx = idx, .val = val, .cap = count, .count = count, .n = n};
    struct gv_sparse_layout info;
    if (gv_sparse_encode(&sp, vt, ie, idx_buf, sizeof(idx_buf), val_buf, sizeof(val_buf), &info) !=
        GV_OK) {
        fprintf(stderr, "gen_ps_corpus: sparse encode failed (%s)\n", name);
        exit(1);
    }
    struct gv_proto_msg m;
    gv_proto_msg_init(&m, type);
    m.role = type == GV_PROTO_MSG_PUSH ? GV_PROTO_ROLE_WORKER : GV_PROTO_ROLE_SERVER;
    m.iteration = 5;
    m.shard = 1;
    m.dtype = GV_PROTO_DTYPE_F32;
    m.numel = n;
    m.cf = 10;
    enum gv_proto_enc pe = gv_ps_sparse_segs(&m, &info); /* the segments and nnz (count) */
    size_t il = info.idx_len;
    if (type == GV_PROTO_MSG_PUSH) {
        m.u.push.level = GV_PROTO_LEVEL_FLOOR;
        m.u.push.index_enc = pe;
    } else {
        m.u.update.decision = (struct gv_proto_decision){
            .level = GV_PROTO_LEVEL_FLOOR, .theta_min = 10, .cf_send = 10, .lr = 0.1};
    }
    static uint8_t pl[1 << 17];
    size_t pl_len = 0;
    memcpy(pl, idx_buf, il);
    pl_len += il;
    memcpy(pl + pl_len, val_buf, info.val_len);
    pl_len += info.val_len;
    if (accordion) {
        gv_proto_seg_add(&m, GV_PROTO_SEG_RAW, GV_PROTO_ENC_BYTES, 4, 4);
        memcpy(pl + pl_len, "\1\0\1\0", 4);
        pl_len += 4;
    }
    size_t len = 0;
    buf[len++] = mode;
    put(buf, sizeof(buf), &len, &m, pl, pl_len);
    save(dir, name, buf, len);
}

static void dense_seed(const char *dir, const char *name, uint8_t mode, enum gv_proto_msg_type type,
                       uint32_t n)
{
    static uint8_t buf[1 << 17];
    float v[4096];
    for (uint32_t i = 0; i < n; i++)
        v[i] = (float)i * 0.5f - 3.0f;
    struct gv_proto_msg m;
    gv_proto_msg_init(&m, type);
    m.iteration = 2;
    m.dtype = GV_PROTO_DTYPE_F32;
    m.numel = n;
    m.nnz = n;
    m.cf = 1;
    gv_proto_seg_add(&m, GV_PROTO_SEG_DENSE, GV_PROTO_ENC_F32, n, 4ull * n);
    if (type == GV_PROTO_MSG_PUSH)
        m.u.push.level = GV_PROTO_LEVEL_DENSE;
    else
        m.u.update.decision =
            (struct gv_proto_decision){.level = GV_PROTO_LEVEL_DENSE, .cf_send = 1};
    size_t len = 0;
    buf[len++] = mode;
    put(buf, sizeof(buf), &len, &m, v, 4ull * n);
    save(dir, name, buf, len);
}

static void memb_seed(const char *dir, const char *name, enum gv_proto_msg_type type,
                      const char *bytes)
{
    static uint8_t buf[4096];
    struct gv_proto_msg m;
    gv_proto_msg_init(&m, type);
    m.role = GV_PROTO_ROLE_SERVER;
    m.rank = 1;
    m.iteration = 9;
    if (type == GV_PROTO_MSG_STATS)
        m.u.stats.workers = 2;
    else
        m.u.decision = (struct gv_proto_decision){
            .level = GV_PROTO_LEVEL_FLOOR, .cf_send = 10, .theta_min = 10};
    gv_proto_seg_add(&m, GV_PROTO_SEG_RAW, GV_PROTO_ENC_BYTES, 3, 3);
    size_t len = 0;
    buf[len++] = 3;
    put(buf, sizeof(buf), &len, &m, bytes, 3);
    save(dir, name, buf, len);
}

/* A LAYOUT as a worker sends it (--model external): a few tensors of a small CNN. */
static void layout_seed(const char *dir)
{
    static uint8_t buf[4096], pl[2048];
    struct gv_layout l;
    gv_layout_init(&l);
    const uint64_t conv[] = {8, 1, 3, 3}, bias[] = {8}, fc[] = {10, 392}, scale[] = {1};
    if (gv_layout_add(&l, "conv1.weight", 4, conv, NULL, 0) != GV_OK ||
        gv_layout_add(&l, "conv1.bias", 1, bias, NULL, 0) != GV_OK ||
        gv_layout_add(&l, "fc.weight", 2, fc, NULL, 0) != GV_OK ||
        gv_layout_add(&l, "temperature", 0, scale, NULL, 0) != GV_OK ||
        gv_layout_encoded_len(&l) > sizeof(pl)) {
        fprintf(stderr, "gen_ps_corpus: cannot build the layout seed\n");
        exit(1);
    }
    size_t n = gv_layout_encoded_len(&l);
    gv_layout_encode(&l, pl);
    gv_layout_cleanup(&l);
    struct gv_proto_msg m;
    gv_proto_msg_init(&m, GV_PROTO_MSG_LAYOUT);
    m.role = GV_PROTO_ROLE_WORKER;
    m.rank = 1;
    gv_proto_seg_add(&m, GV_PROTO_SEG_RAW, GV_PROTO_ENC_BYTES, n, n);
    size_t len = 0;
    buf[len++] = 0xff;
    put(buf, sizeof(buf), &len, &m, pl, n);
    save(dir, "layout", buf, len);
}

static void msg_seeds(const char *dir)
{
    const enum gv_idx_enc encs[] = {GV_IDX_RAW32, GV_IDX_VARINT, GV_IDX_BITMAP};
    const char *en[] = {"raw32", "varint", "bitmap"};
    for (int e = 0; e < 3; e++) {
        char name[64];
        snprintf(name, sizeof(name), "push-%s-f32", en[e]);
        sparse_seed(dir, name, 0, GV_PROTO_MSG_PUSH, 1000, 40, encs[e], GV_VAL_F32, false);
        snprintf(name, sizeof(name), "push-%s-f16", en[e]);
        sparse_seed(dir, name, 0, GV_PROTO_MSG_PUSH, 1000, 40, encs[e], GV_VAL_F16, false);
        snprintf(name, sizeof(name), "update-%s", en[e]);
        sparse_seed(dir, name, 1, GV_PROTO_MSG_UPDATE, 600, 100, encs[e], GV_VAL_F32, false);
        snprintf(name, sizeof(name), "update-%s-accordion", en[e]);
        sparse_seed(dir, name, 2, GV_PROTO_MSG_UPDATE, 600, 100, encs[e], GV_VAL_F32, true);
    }
    dense_seed(dir, "push-dense", 0, GV_PROTO_MSG_PUSH, 256);
    dense_seed(dir, "update-dense", 1, GV_PROTO_MSG_UPDATE, 256);
    memb_seed(dir, "stats", GV_PROTO_MSG_STATS, "\1\3\2");
    memb_seed(dir, "decision", GV_PROTO_MSG_DECISION, "\5\1\4");
    layout_seed(dir);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s HANDSHAKE_DIR MSG_DIR\n", argv[0]);
        return 2;
    }
    gv_proto_caps_default(&caps);
    caps.max_segments = GV_TP_MAX_DST_IOV;
    handshake_seeds(argv[1]);
    msg_seeds(argv[2]);
    return 0;
}
