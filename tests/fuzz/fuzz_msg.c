/* fuzz_msg.c: libFuzzer target for the data-plane decoders: a whole frame (24-byte prefix,
 * header, payload) as a server or a worker receives it. The first byte picks the receiver:
 *   0  a server receiving a PUSH: gv_ps_push_check against the decision the PUSH claims, the
 *      payload scattered into the receive buffer as the transport does, then the dense add or
 *      gv_ps_sparse_add (compress/'s sparse decoder) into the accumulator;
 *   1  a worker receiving an UPDATE (2: Accordion, with its per-tensor byte segment):
 *      gv_ps_update_check, then the sparse decoder into the gradient buffer;
 *   3  a server receiving a STATS or DECISION: the round membership segment's check;
 *   4  (first byte 0xff) a server receiving a LAYOUT (--model external): ps/'s layout decoder
 *      on its payload; a layout it accepts re-encodes to exactly the bytes that came.
 * The shard size is the header's numel (at most 2^16 here). Invariants (abort on violation):
 * a check or decoder says GV_OK or GV_ERR_PROTO, never anything else; a sparse add that
 * succeeds touched at most nnz entries (compress/ validates strictly increasing indices); the
 * buffers are exactly as large as server/ and worker/ make them, so ASan sees any overrun. */
#include "gv_ps.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Refusals and decode errors are the expected outcome of most inputs: not logged. */
static void quiet(enum gv_log_level level, const char *line, void *arg)
{
    (void)level, (void)line, (void)arg;
}

#define FUZZ_MAX_N 65536u

static void must_proto(gv_status_t st)
{
    if (st != GV_OK && st != GV_ERR_PROTO)
        abort();
}

/* The payload's segments scattered back to back into buf + off, as the transport would. */
static bool scatter(uint8_t *buf, size_t cap, size_t off, const uint8_t *pl, uint64_t len)
{
    if (off > cap || len > cap - off)
        return false;
    memcpy(buf + off, pl, (size_t)len);
    return true;
}

static size_t count_nonzero(const float *v, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += v[i] != 0.0f;
    return c;
}

static void on_push(const struct gv_proto_msg *m, const uint8_t *pl, uint64_t pl_len)
{
    uint64_t n = m->numel;
    /* round.c's receive buffer: the largest sparse push (bitmap) or a dense one */
    size_t rcap = (n + 7) / 8 + 4 * n + 64;
    struct gv_ps_decision d = {.level = gv_ps_level_from_proto(m->u.push.level), .cf_send = m->cf};
    /* the job's dense value type: the one the frame claims (dense-fp16 sends halves) */
    enum gv_val_type dvt =
        m->n_segs == 1 && m->segs[0].enc == GV_PROTO_ENC_F16 ? GV_VAL_F16 : GV_VAL_F32;
    bool dense;
    gv_status_t st = gv_ps_push_check(m, pl_len, m->shard, n, &d, dvt, rcap, &dense, NULL, 0);
    must_proto(st);
    if (st != GV_OK)
        return;
    uint8_t *rbuf = malloc(rcap);
    float *acc = calloc(n ? n : 1, sizeof(float));
    if (rbuf == NULL || acc == NULL)
        abort();
    if (dense) {
        if (!scatter(rbuf, rcap, 0, pl, pl_len) || pl_len != gv_sparse_val_len(n, dvt))
            abort(); /* the check promised it fits */
        if (dvt == GV_VAL_F16) {
            gv_ps_f16_decode((const uint16_t *)(const void *)rbuf, n, acc);
        } else {
            const float *x = (const float *)(void *)rbuf;
            for (uint64_t i = 0; i < n; i++)
                acc[i] += x[i];
        }
    } else {
        if (!scatter(rbuf, rcap, 0, pl, pl_len))
            abort();
        st = gv_ps_sparse_add(m, rbuf, (uint32_t)n, acc);
        must_proto(st);
        if (st == GV_OK && count_nonzero(acc, n) > m->nnz)
            abort();
    }
    free(rbuf);
    free(acc);
}

static void on_update(const struct gv_proto_msg *m, const uint8_t *pl, uint64_t pl_len,
                      bool accordion)
{
    uint64_t n = m->numel;
    const uint32_t T = 4;
    /* worker.c's per-shard buffer: the update side (a sparse update holds <= n/2 entries) */
    size_t ucap = 4 * n + 64;
    enum gv_val_type dvt =
        m->n_segs >= 1 && m->segs[0].enc == GV_PROTO_ENC_F16 ? GV_VAL_F16 : GV_VAL_F32;
    bool dense;
    gv_status_t st =
        gv_ps_update_check(m, m->iteration, m->shard, n, dvt, ucap, accordion, T, &dense);
    must_proto(st);
    if (st != GV_OK)
        return;
    uint8_t *ubuf = malloc(ucap), heavy[4];
    float *g = calloc(n ? n : 1, sizeof(float));
    if (ubuf == NULL || g == NULL)
        abort();
    uint64_t body = pl_len - (accordion ? T : 0);
    if (dense) {
        if (body != gv_sparse_val_len(n, dvt))
            abort();
        if (dvt == GV_VAL_F16) { /* from an aligned buffer, as the worker's */
            memcpy(ubuf, pl, (size_t)body);
            gv_ps_f16_decode((const uint16_t *)(const void *)ubuf, n, g);
        } else {
            memcpy(g, pl, (size_t)body);
        }
    } else {
        if (!scatter(ubuf, ucap, 0, pl, body))
            abort();
        st = gv_ps_sparse_add(m, ubuf, (uint32_t)n, g);
        must_proto(st);
        if (st == GV_OK && count_nonzero(g, n) > m->nnz)
            abort();
    }
    if (accordion)
        memcpy(heavy, pl + body, T);
    free(ubuf);
    free(g);
}

static void on_membership(const struct gv_proto_msg *m, const uint8_t *pl, uint64_t pl_len)
{
    const uint32_t W = 3;
    if ((m->type != GV_PROTO_MSG_STATS && m->type != GV_PROTO_MSG_DECISION) || m->n_segs < 1 ||
        m->segs[0].kind != GV_PROTO_SEG_RAW || m->segs[0].bytes != W || pl_len < W)
        return;
    unsigned allowed = m->type == GV_PROTO_MSG_STATS ? GV_PS_MEMB_ARRIVED | GV_PS_MEMB_DEAD
                                                     : GV_PS_MEMB_ARRIVED | GV_PS_MEMB_NEXT;
    gv_status_t st = gv_ps_memb_check(pl, W, allowed);
    must_proto(st);
    for (uint32_t w = 0; st == GV_OK && w < W; w++)
        if (pl[w] & ~allowed)
            abort();
}

static void on_layout(const struct gv_proto_msg *m, const uint8_t *pl, uint64_t pl_len)
{
    if (m->type != GV_PROTO_MSG_LAYOUT || m->n_segs != 1 || pl_len > GV_LAYOUT_MAX_BYTES)
        return; /* server/start.c refuses these before allocating */
    struct gv_layout l;
    gv_status_t st = gv_layout_decode(pl, (size_t)pl_len, &l, NULL, 0);
    must_proto(st);
    if (st != GV_OK)
        return;
    uint64_t total = 0;
    for (uint32_t t = 0; t < l.n; t++)
        total += l.t[t].numel;
    size_t n = gv_layout_encoded_len(&l);
    uint8_t *again = n == pl_len ? malloc(n) : NULL;
    if (again == NULL || l.n == 0 || l.n > GV_LAYOUT_MAX_TENSORS || total != l.total)
        abort();
    gv_layout_encode(&l, again);
    if (memcmp(again, pl, n) != 0)
        abort();
    free(again);
    gv_layout_cleanup(&l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct gv_proto_caps caps;
    static struct gv_proto_arena arena;
    static void *arena_buf;
    if (arena_buf == NULL) {
        gv_log_set_cb(quiet, NULL);
        gv_proto_caps_default(&caps);
        caps.max_segments = GV_TP_MAX_DST_IOV; /* as gv_ps_caps sets them */
        arena_buf = malloc(gv_proto_arena_bound(&caps));
        gv_proto_arena_init(&arena, arena_buf, gv_proto_arena_bound(&caps));
    }
    if (size < 1 + GV_PROTO_PREFIX_LEN)
        return 0;
    uint8_t mode = data[0] == 0xff ? 4 : data[0] % 4;
    data++;
    size--;
    uint32_t hdr_len;
    uint64_t pl_len;
    if (gv_proto_parse_prefix(data, &caps, &hdr_len, &pl_len) != GV_OK ||
        GV_PROTO_PREFIX_LEN + (size_t)hdr_len > size)
        return 0;
    size_t frame_len = GV_PROTO_PREFIX_LEN + hdr_len;
    if (pl_len > size - frame_len)
        return 0; /* the rest has not arrived: the transport waits */
    struct gv_proto_msg m;
    gv_proto_arena_reset(&arena);
    if (gv_proto_decode(data, frame_len, &caps, &arena, &m) != GV_OK)
        return 0;
    if (m.numel > FUZZ_MAX_N)
        return 0;
    const uint8_t *pl = data + frame_len;
    switch (mode) {
    case 0:
        if (m.type == GV_PROTO_MSG_PUSH)
            on_push(&m, pl, pl_len);
        break;
    case 1:
    case 2:
        if (m.type == GV_PROTO_MSG_UPDATE)
            on_update(&m, pl, pl_len, mode == 2);
        break;
    case 4: on_layout(&m, pl, pl_len); break;
    default: on_membership(&m, pl, pl_len); break;
    }
    return 0;
}
