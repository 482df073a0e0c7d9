/* decode.c: the checks a server runs on a PUSH header and a worker on an UPDATE header before
 * any payload byte lands in a buffer, the sparse payload decoder both use, and the round
 * membership segment's check. Pure functions over decoded headers and buffers: the fuzz
 * targets (tests/fuzz/) call exactly these. */
#include "gv_server.h"

#include <inttypes.h>
#include <stdio.h>

static void why_set(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void why_set(char *why, size_t len, const char *fmt, ...)
{
    if (why == NULL || len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
}

gv_status_t gv_ps_push_check(const struct gv_proto_msg *m, uint64_t payload_len, uint32_t shard,
                             uint64_t n, const struct gv_proto_decision *d, size_t rcap,
                             bool *dense_p, char *why, size_t why_len)
{
    bool dense = m->n_segs == 1 && m->segs[0].kind == GV_PROTO_SEG_DENSE &&
                 m->segs[0].enc == GV_PROTO_ENC_F32 && payload_len == 4 * n &&
                 payload_len <= rcap;
    /* the decoder guarantees payload_len == the sum of the segments */
    bool sparse = m->n_segs == 2 && m->segs[0].kind == GV_PROTO_SEG_INDICES &&
                  m->segs[1].kind == GV_PROTO_SEG_VALUES && payload_len <= rcap &&
                  n <= UINT32_MAX;
    if (m->shard != shard || m->numel != n || m->u.push.level != d->level ||
        m->cf != d->cf_send || (dense == (d->level != GV_PROTO_LEVEL_DENSE)) ||
        (!dense && !sparse)) {
        why_set(why, why_len, "shard %u numel %" PRIu64 " level %s CF %g with %u segments (%" PRIu64
                " bytes), expected shard %u, numel %" PRIu64 ", level %s, CF %g", m->shard,
                m->numel, gv_proto_level_str(m->u.push.level), m->cf, m->n_segs, payload_len,
                shard, n, gv_proto_level_str(d->level), d->cf_send);
        return GV_ERR_PROTO;
    }
    *dense_p = dense;
    return GV_OK;
}

gv_status_t gv_ps_update_check(const struct gv_proto_msg *m, uint64_t iter, uint32_t shard,
                               uint64_t n, size_t ucap, bool accordion, uint32_t n_tensors,
                               bool *dense_p)
{
    if (m->iteration != iter || m->shard != shard || m->numel != n || m->n_segs < 1 ||
        n > UINT32_MAX)
        return GV_ERR_PROTO;
    uint32_t nseg = m->n_segs;
    if (accordion) {
        const struct gv_proto_seg *last = &m->segs[m->n_segs - 1];
        if (last->kind != GV_PROTO_SEG_RAW || last->bytes != n_tensors)
            return GV_ERR_PROTO;
        nseg--;
    }
    if (nseg == 1 && m->segs[0].kind == GV_PROTO_SEG_DENSE && m->segs[0].enc == GV_PROTO_ENC_F32 &&
        m->segs[0].bytes == 4 * n) {
        *dense_p = true;
        return GV_OK;
    }
    if (nseg == 2 && m->segs[0].kind == GV_PROTO_SEG_INDICES &&
        m->segs[1].kind == GV_PROTO_SEG_VALUES && m->segs[1].enc == GV_PROTO_ENC_F32 &&
        m->segs[0].bytes <= ucap && m->segs[1].bytes <= ucap &&
        m->segs[0].bytes + m->segs[1].bytes <= ucap) {
        *dense_p = false;
        return GV_OK;
    }
    return GV_ERR_PROTO;
}

gv_status_t gv_ps_sparse_add(const uint8_t *buf, const struct gv_proto_msg *m, uint32_t n,
                             float *acc)
{
    if (m->n_segs < 2 || m->segs[0].kind != GV_PROTO_SEG_INDICES ||
        m->segs[1].kind != GV_PROTO_SEG_VALUES || m->nnz > n)
        return GV_ERR_PROTO;
    enum gv_idx_enc ie;
    switch (m->segs[0].enc) {
    case GV_PROTO_ENC_U32: ie = GV_IDX_RAW32; break;
    case GV_PROTO_ENC_DELTA_VARINT: ie = GV_IDX_VARINT; break;
    case GV_PROTO_ENC_BITMAP: ie = GV_IDX_BITMAP; break;
    default: return GV_ERR_PROTO;
    }
    enum gv_val_type vt;
    switch (m->segs[1].enc) {
    case GV_PROTO_ENC_F32: vt = GV_VAL_F32; break;
    case GV_PROTO_ENC_F16: vt = GV_VAL_F16; break;
    default: return GV_ERR_PROTO;
    }
    struct gv_sparse_desc desc = {.n = n, .count = (uint32_t)m->nnz, .enc = ie, .vt = vt};
    size_t il = (size_t)m->segs[0].bytes;
    gv_status_t status = gv_sparse_decode_add(&desc, buf, il, buf + il, (size_t)m->segs[1].bytes,
                                              0, acc);
    return status == GV_OK ? GV_OK : GV_ERR_PROTO;
}

gv_status_t gv_ps_memb_check(const uint8_t *memb, uint32_t num_workers, unsigned allowed)
{
    for (uint32_t w = 0; w < num_workers; w++)
        if ((memb[w] & ~allowed) != 0)
            return GV_ERR_PROTO;
    return GV_OK;
}
