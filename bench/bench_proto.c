/* bench_proto.c: gravac-bench proto: the cost of the wire header. Encodes and decodes the
 * header of every message type, then sets the cost of one PUSH header (encode + decode)
 * against a baseline measured in the same run: copying that PUSH's payload once with memcpy
 * (the least any receiver does with it). The ratio says how much the header adds per message.
 *     gravac-bench proto [--iters N] [--numel N] [--cf CF] */
#include "bench.h"
#include "gv_proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PB_ROUNDS 5

static unsigned char pb_arena_buf[1 << 16];
static uint8_t pb_frame[GV_PROTO_PREFIX_LEN + (1 << 16)];
static volatile uint64_t pb_sink; /* keeps the timed loops from being optimized away */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[n / 2];
}

/* Median over rounds of the ns per encode and per decode of m. */
static int pb_time(const struct gv_proto_msg *m, long iters, size_t *len_p, double *enc_ns,
                   double *dec_ns)
{
    struct gv_proto_arena arena;
    struct gv_proto_msg out;
    double enc[PB_ROUNDS], dec[PB_ROUNDS];
    size_t len = 0;

    gv_proto_arena_init(&arena, pb_arena_buf, sizeof(pb_arena_buf));
    for (int r = 0; r < PB_ROUNDS; r++) {
        uint64_t t0 = gv_now_ns();
        for (long i = 0; i < iters; i++)
            if (gv_proto_encode(m, NULL, pb_frame, sizeof(pb_frame), &len) != GV_OK)
                return -1;
        uint64_t t1 = gv_now_ns();
        for (long i = 0; i < iters; i++) {
            if (gv_proto_decode(pb_frame, len, NULL, &arena, &out) != GV_OK)
                return -1;
            pb_sink += out.nnz;
        }
        uint64_t t2 = gv_now_ns();
        enc[r] = (double)(t1 - t0) / (double)iters;
        dec[r] = (double)(t2 - t1) / (double)iters;
    }
    *len_p = len;
    *enc_ns = median(enc, PB_ROUNDS);
    *dec_ns = median(dec, PB_ROUNDS);
    return 0;
}

static void pb_fill(struct gv_proto_msg *m, enum gv_proto_msg_type type, uint64_t numel,
                    uint64_t nnz, double cf)
{
    static const double norms[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    static const uint8_t nonce[32] = {1};

    gv_proto_msg_init(m, type);
    m->role = GV_PROTO_ROLE_WORKER;
    m->rank = 5;
    m->iteration = 123456;
    m->shard = 1;
    m->dtype = GV_PROTO_DTYPE_F32;
    switch (type) {
    case GV_PROTO_MSG_HELLO:
        m->u.hello.num_workers = 8;
        m->u.hello.nonce = (struct gv_proto_bytes){nonce, sizeof(nonce)};
        m->u.hello.cluster_id = "bench-cluster";
        break;
    case GV_PROTO_MSG_MODEL:
        m->numel = numel;
        gv_proto_seg_add(m, GV_PROTO_SEG_DENSE, GV_PROTO_ENC_F32, numel, 4 * numel);
        break;
    case GV_PROTO_MSG_PUSH:
        m->numel = numel;
        m->nnz = nnz;
        m->cf = cf;
        m->u.push.level = GV_PROTO_LEVEL_CANDIDATE;
        m->u.push.index_enc = GV_PROTO_ENC_U32;
        m->u.push.stats = (struct gv_proto_iter_stats){.g_ef_sq = 1.5,
                                                       .g_min_sq = 0.5,
                                                       .g_c_sq = 1.0,
                                                       .compute_s = 0.1,
                                                       .compress_s = 0.01,
                                                       .comm_s = 0.02,
                                                       .samples = 256,
                                                       .loss = 2.3,
                                                       .n_layer_norms = 16,
                                                       .layer_norms = norms};
        gv_proto_seg_add(m, GV_PROTO_SEG_INDICES, GV_PROTO_ENC_U32, nnz, 4 * nnz);
        gv_proto_seg_add(m, GV_PROTO_SEG_VALUES, GV_PROTO_ENC_F32, nnz, 4 * nnz);
        break;
    case GV_PROTO_MSG_UPDATE:
        m->numel = numel;
        m->nnz = nnz;
        m->u.update.decision =
            (struct gv_proto_decision){GV_PROTO_LEVEL_FLOOR, 10, 100, 10, 0.1, false, 0, 0};
        gv_proto_seg_add(m, GV_PROTO_SEG_INDICES, GV_PROTO_ENC_U32, nnz, 4 * nnz);
        gv_proto_seg_add(m, GV_PROTO_SEG_VALUES, GV_PROTO_ENC_F32, nnz, 4 * nnz);
        break;
    default: break;
    }
}

int gv_bench_proto_main(int argc, char **argv)
{
    long iters = 200000;
    uint64_t numel = 25000000; /* ResNet-50-sized shard */
    double cf = 100;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
            iters = atol(argv[++i]);
        else if (strcmp(argv[i], "--numel") == 0 && i + 1 < argc)
            numel = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--cf") == 0 && i + 1 < argc)
            cf = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: gravac-bench proto [--iters N (default 200000)] "
                            "[--numel N (default 25000000)] [--cf CF (default 100)]\n");
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    if (iters < 1 || numel < 1 || numel > INT32_MAX || !(cf >= 1)) {
        fprintf(stderr, "proto: need iters >= 1, 1 <= numel <= 2^31-1, cf >= 1\n");
        return 2;
    }
    uint64_t nnz = (uint64_t)((double)numel / cf);
    nnz = nnz < 1 ? 1 : nnz;

    printf("# gravac-bench proto: wire header encode/decode, median of %d rounds x %ld\n",
           PB_ROUNDS, iters);
    printf("# push/update: numel %llu, cf %g, nnz %llu\n", (unsigned long long)numel, cf,
           (unsigned long long)nnz);
    printf("%-10s %9s %11s %11s\n", "type", "frame[B]", "encode[ns]", "decode[ns]");
    double push_ns = 0;
    for (int t = GV_PROTO_MSG_HELLO; t < GV_PROTO_MSG_COUNT; t++) {
        struct gv_proto_msg m;
        size_t len;
        double enc, dec;
        if (t != GV_PROTO_MSG_HELLO && t != GV_PROTO_MSG_MODEL && t != GV_PROTO_MSG_PUSH &&
            t != GV_PROTO_MSG_UPDATE && t != GV_PROTO_MSG_HEARTBEAT)
            continue;
        pb_fill(&m, (enum gv_proto_msg_type)t, numel, nnz, cf);
        if (pb_time(&m, iters, &len, &enc, &dec) != 0) {
            fprintf(stderr, "proto: %s does not encode/decode\n", gv_proto_msg_type_str(m.type));
            return 1;
        }
        printf("%-10s %9zu %11.1f %11.1f\n", gv_proto_msg_type_str(m.type), len, enc, dec);
        if (t == GV_PROTO_MSG_PUSH)
            push_ns = enc + dec;
    }

    /* baseline: one memcpy of the PUSH payload (indices + values) */
    size_t payload = (size_t)(8 * nnz);
    char *src = malloc(payload), *dst = malloc(payload);
    if (src == NULL || dst == NULL) {
        fprintf(stderr, "proto: cannot allocate %zu bytes\n", payload);
        free(src);
        free(dst);
        return 1;
    }
    memset(src, 1, payload);
    memset(dst, 0, payload);
    double copy[PB_ROUNDS];
    long copies = (long)GV_MAX(1, (1 << 28) / (payload + 1));
    for (int r = 0; r < PB_ROUNDS; r++) {
        uint64_t t0 = gv_now_ns();
        for (long i = 0; i < copies; i++) {
            memcpy(dst, src, payload);
            pb_sink += (unsigned char)dst[i % payload];
        }
        copy[r] = (double)(gv_now_ns() - t0) / (double)copies;
    }
    double copy_ns = median(copy, PB_ROUNDS);
    printf("# baseline: memcpy of the push payload (%zu B): %.1f ns\n", payload, copy_ns);
    printf("# push header encode+decode / payload memcpy = %.5f\n", push_ns / copy_ns);
    free(src);
    free(dst);
    return 0;
}
