/* samples.c: see samples.h. */
#include "samples.h"

#include <string.h>

static const uint8_t sample_nonce_c[32] = {
    0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10,
    0x00, 0xff, 0x11, 0xee, 0x22, 0xdd, 0x33, 0xcc, 0x44, 0xbb, 0x55, 0xaa, 0x66, 0x99, 0x77, 0x88};
static const uint8_t sample_nonce_s[16] = {'s', 'e', 'r', 'v', 'e', 'r', 0, 1,
                                           2,   3,   4,   5,   6,   7,   8, 9};
static const uint8_t sample_mac[32] = {0xa5, 0x5a, 0xa5, 0x5a, 1,  2,  3,  4,  5,  6,  7,
                                       8,    9,    10,   11,   12, 13, 14, 15, 16, 17, 18,
                                       19,   20,   21,   22,   23, 24, 25, 26, 27, 28};
static const double sample_norms[5] = {0.5, 1.25, 3e-7, 42.0, 1e10};

static void sample_common(struct gv_proto_msg *m, enum gv_proto_msg_type type)
{
    gv_proto_msg_init(m, type);
    m->role = GV_PROTO_ROLE_WORKER;
    m->rank = 3;
    m->iteration = 12345678901ull;
    m->shard = 2;
    m->tensor_id = 7;
    m->dtype = GV_PROTO_DTYPE_F32;
}

static void sample_stats(struct gv_proto_iter_stats *s)
{
    s->g_ef_sq = 12.5;
    s->g_min_sq = 3.25;
    s->g_c_sq = 9.75;
    s->compute_s = 0.125;
    s->compress_s = 0.0625;
    s->comm_s = 0.03125;
    s->pause_s = 0.046875;
    s->samples = 256;
    s->loss = 2.302585;
    s->lr = 0.0125;
    s->n_layer_norms = 5;
    s->layer_norms = sample_norms;
}

static void sample_decision(struct gv_proto_decision *d)
{
    d->level = GV_PROTO_LEVEL_FLOOR;
    d->theta_min = 10;
    d->cf_candidate = 100;
    d->cf_send = 10;
    d->lr = 0.1;
    d->resync = true;
}

void gv_sample_msg(enum gv_proto_msg_type type, struct gv_proto_msg *m)
{
    sample_common(m, type);
    switch (type) {
    case GV_PROTO_MSG_HELLO:
        m->u.hello.num_workers = 8;
        m->u.hello.num_servers = 2;
        m->u.hello.features = GV_PROTO_FEAT_F16 | GV_PROTO_FEAT_AUTH;
        m->u.hello.nonce = (struct gv_proto_bytes){sample_nonce_c, sizeof(sample_nonce_c)};
        m->u.hello.cluster_id = "fashion-mnist-run-42";
        break;
    case GV_PROTO_MSG_CHALLENGE:
        m->role = GV_PROTO_ROLE_SERVER;
        m->u.challenge.nonce = (struct gv_proto_bytes){sample_nonce_s, sizeof(sample_nonce_s)};
        break;
    case GV_PROTO_MSG_AUTH:
        m->u.auth.mac = (struct gv_proto_bytes){sample_mac, sizeof(sample_mac)};
        break;
    case GV_PROTO_MSG_WELCOME:
        m->role = GV_PROTO_ROLE_SERVER;
        m->u.welcome.shard_offset = 50000;
        m->u.welcome.shard_numel = 50000;
        m->u.welcome.model_numel = 101770;
        m->u.welcome.model_fingerprint = 0x0123456789abcdefull;
        m->u.welcome.num_shards = 2;
        m->u.welcome.features = GV_PROTO_FEAT_F16;
        break;
    case GV_PROTO_MSG_REFUSE:
        m->role = GV_PROTO_ROLE_SERVER;
        m->u.refuse.code = GV_PROTO_REFUSE_CLUSTER;
        m->u.refuse.text = "cluster id \"other\" is not \"fashion-mnist-run-42\"";
        break;
    case GV_PROTO_MSG_MODEL: /* 256 dense f32 values at offset 512 of the shard */
        m->role = GV_PROTO_ROLE_SERVER;
        m->numel = 256;
        m->u.model.offset = 512;
        m->u.model.checksum = 0xfeedfacecafebeefull;
        gv_proto_seg_add(m, GV_PROTO_SEG_DENSE, GV_PROTO_ENC_F32, 256, 1024);
        break;
    case GV_PROTO_MSG_PUSH: /* top-10 of 1000, u32 indices, f32 values */
        m->numel = 1000;
        m->nnz = 10;
        m->cf = 100;
        m->u.push.level = GV_PROTO_LEVEL_CANDIDATE;
        m->u.push.index_enc = GV_PROTO_ENC_U32;
        sample_stats(&m->u.push.stats);
        m->u.push.replica_checksum = 0x5a5a0123a5a5fedcull;
        gv_proto_seg_add(m, GV_PROTO_SEG_INDICES, GV_PROTO_ENC_U32, 10, 40);
        gv_proto_seg_add(m, GV_PROTO_SEG_VALUES, GV_PROTO_ENC_F32, 10, 40);
        break;
    case GV_PROTO_MSG_UPDATE: /* 10 of 1000, delta-varint indices, f16 values */
        m->role = GV_PROTO_ROLE_SERVER;
        m->numel = 1000;
        m->nnz = 10;
        m->cf = 100;
        sample_decision(&m->u.update.decision);
        m->u.update.model_checksum = 0x1122334455667788ull;
        gv_proto_seg_add(m, GV_PROTO_SEG_INDICES, GV_PROTO_ENC_DELTA_VARINT, 10, 17);
        gv_proto_seg_add(m, GV_PROTO_SEG_VALUES, GV_PROTO_ENC_F16, 10, 20);
        break;
    case GV_PROTO_MSG_DECISION:
        m->role = GV_PROTO_ROLE_SERVER;
        sample_decision(&m->u.decision);
        break;
    case GV_PROTO_MSG_STATS:
        m->role = GV_PROTO_ROLE_SERVER;
        m->u.stats.workers = 4;
        sample_stats(&m->u.stats.stats);
        break;
    case GV_PROTO_MSG_ERROR:
        m->u.error.code = GV_ERR_PROTO;
        m->u.error.text = "segment 1: 41 bytes for 10 f32 elements";
        break;
    case GV_PROTO_MSG_LAYOUT: /* a model's layout in 96 bytes */
        gv_proto_seg_add(m, GV_PROTO_SEG_RAW, GV_PROTO_ENC_BYTES, 96, 96);
        break;
    default: /* HEARTBEAT, BYE: common fields only */ break;
    }
}

void gv_sample_push_bitmap(struct gv_proto_msg *m)
{
    gv_sample_msg(GV_PROTO_MSG_PUSH, m);
    m->n_segs = 0;
    m->u.push.index_enc = GV_PROTO_ENC_BITMAP;
    gv_proto_seg_add(m, GV_PROTO_SEG_INDICES, GV_PROTO_ENC_BITMAP, 10, 125); /* 1000 bits */
    gv_proto_seg_add(m, GV_PROTO_SEG_VALUES, GV_PROTO_ENC_F16, 10, 20);
}

void gv_sample_max(const struct gv_proto_caps *caps, enum gv_proto_msg_type type,
                   struct gv_proto_msg *m)
{
    static double norms[1 << 13];
    static uint8_t nonce[1 << 12];
    static char text[1 << 12];

    gv_sample_msg(type, m);
    m->numel = caps->max_numel;
    m->nnz = caps->max_numel;
    m->n_segs = 0;
    for (uint32_t i = 0; i < caps->max_segments && i < GV_PROTO_MAX_SEGMENTS; i++)
        gv_proto_seg_add(m, GV_PROTO_SEG_RAW, GV_PROTO_ENC_BYTES, i + 1, i + 1);
    if (type == GV_PROTO_MSG_HELLO) {
        memset(nonce, 0xab, sizeof(nonce));
        memset(text, 'x', sizeof(text));
        text[GV_MIN(caps->max_text_len, sizeof(text) - 1)] = '\0';
        m->u.hello.nonce =
            (struct gv_proto_bytes){nonce, GV_MIN(caps->max_bytes_field, sizeof(nonce))};
        m->u.hello.cluster_id = text;
    } else if (type == GV_PROTO_MSG_PUSH) {
        for (size_t i = 0; i < GV_ARRAY_LEN(norms); i++)
            norms[i] = (double)i * 0.5 + 1.0 / 3.0;
        m->u.push.stats.n_layer_norms = GV_MIN(caps->max_layers, (uint32_t)GV_ARRAY_LEN(norms));
        m->u.push.stats.layer_norms = norms;
    }
}
