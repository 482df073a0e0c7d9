/* piece.c: a dense f32 round in pieces of the shard. Each piece is aggregated in worker-rank
 * order on its own, so the float sums are those of a whole-shard round; under the abort policy a
 * piece is averaged, stepped, checksummed and sent back as soon as every worker's push of it is
 * in, while the next pieces still arrive (the round's last piece waits for the decision). Under
 * the continue policy the membership, hence the divisor, is known only at the round's end, so
 * the pieces are stepped there. Not here: sparse rounds and dense-fp16 (round.c, update.c), the
 * decision (round.c). */
#include "srv.h"

#include <inttypes.h>
#include <string.h>

gv_status_t srv_piece_init(struct gv_server *srv)
{
    struct srv_pieces *pc = &srv->pieces;
    gv_job_pieces(srv->job, srv->shard.n, &pc->lay);
    pc->got = gv_calloc(srv->W, sizeof(uint32_t));
    pc->last = -1;
    if (pc->got == NULL) {
        gv_log(GV_LOG_ERROR, "server: cannot allocate the pieces' state");
        return GV_ERR_NOMEM;
    }
    return GV_OK;
}

void srv_piece_cleanup(struct gv_server *srv)
{
    gv_free(srv->pieces.got);
    memset(&srv->pieces, 0, sizeof(srv->pieces));
}

/* The first worker rank >= w in the round (W: none). */
static uint32_t piece_member_from(const struct gv_server *srv, uint32_t w)
{
    while (w < srv->W && (!srv_round_member(srv, w) || srv->net.workers[w] == NULL))
        w++;
    return w;
}

static uint32_t piece_members(const struct gv_server *srv)
{
    uint32_t n = 0;
    for (uint32_t w = piece_member_from(srv, 0); w < srv->W; w = piece_member_from(srv, w + 1))
        n++;
    return n;
}

void srv_piece_open(struct gv_server *srv)
{
    struct srv_pieces *pc = &srv->pieces;
    const struct srv_round *r = &srv->round;
    /* dense f32 only (not AUTO's dense-fp16 arm: a dense decision at CF 2), in a job that takes
     * pieces (not --optimizer caller nor --model external) */
    pc->on = gv_job_pieced(srv->job) && r->cur.d.level == GV_ADAPT_LEVEL_DENSE &&
             gv_ps_dense_vt(srv->job, &r->cur.d) == GV_VAL_F32;
    if (!pc->on)
        return;
    uint32_t first = piece_member_from(srv, 0);
    for (uint32_t k = 0; k < pc->lay.np; k++)
        pc->p[k] = (struct srv_piece){.next = first};
    memset(pc->got, 0, srv->W * sizeof(uint32_t));
    pc->n_complete = 0;
    pc->ck_sum = 0;
    pc->last = -1;
    pc->lr = gv_optim_lr(&srv->job->optim, (int64_t)r->iter);
    for (uint32_t w = 0; w < srv->W; w++) { /* pushes deferred before the round opened */
        struct srv_peer *q = srv->net.workers[w];
        if (q != NULL && q->link.c != NULL && srv_round_member(srv, w))
            (void)gv_tp_conn_resume_recv(q->link.c);
    }
}

const uint8_t *srv_piece_landed(const struct gv_server *srv, const struct gv_proto_msg *m)
{
    const struct srv_pieces *pc = &srv->pieces;
    uint64_t k = m->offset / pc->lay.base; /* checked by srv_piece_push_header */
    const float *at =
        pc->p[k].added == 0 ? srv->round.acc : (const float *)(const void *)srv->round.rbuf;
    return (const uint8_t *)(const void *)(at + m->offset);
}

gv_status_t srv_piece_push_header(struct gv_server *srv, struct srv_peer *p,
                                  const struct gv_proto_msg *m, uint64_t payload_len,
                                  struct gv_iov *dst, int *cnt)
{
    struct srv_pieces *pc = &srv->pieces;
    struct srv_round *r = &srv->round;
    const struct gv_ps_pieces *lay = &pc->lay;
    uint64_t k = m->offset / lay->base;
    uint64_t len = k < lay->np ? gv_ps_piece_hi(lay, (uint32_t)k) - m->offset : 0;
    bool dense;
    char why[300] = "";
    if (k >= lay->np || m->offset % lay->base != 0 ||
        gv_ps_push_check(m, payload_len, srv->rank, len, &r->cur.d, GV_VAL_F32, r->rcap, &dense,
                         why, sizeof(why)) != GV_OK ||
        !dense) {
        gv_log(GV_LOG_WARN,
               "server %u: %s pushed a malformed piece (offset %" PRIu64 ", %" PRIu64
               " elements; the shard's %u pieces are of %" PRIu64 "): %s",
               srv->rank, p->name, m->offset, m->numel, lay->np, lay->base, why);
        return GV_ERR_PROTO;
    }
    struct srv_piece *pk = &pc->p[k];
    if (pk->next != p->rank) {
        p->deferred = true;
        return GV_ERR_AGAIN; /* not its turn for this piece: it waits in the kernel */
    }
    p->deferred = false;
    if (r->t_agg_ns == 0)
        r->t_agg_ns = gv_trace_now(srv->cfg.trace);
    /* the first push of the piece lands in the accumulator itself, the others in its region of
     * rbuf */
    float *to = pk->added == 0 ? r->acc : (float *)(void *)r->rbuf;
    dst[0] = (struct gv_iov){to + m->offset, (size_t)payload_len};
    *cnt = 1;
    return GV_OK;
}

static uint64_t piece_nonzero(const float *acc, uint64_t a, uint64_t b)
{
    uint32_t c = 0; /* a block: fits, and vectorises */
    for (uint64_t i = a; i < b; i++) {
        uint32_t bits;
        memcpy(&bits, &acc[i], sizeof(bits));
        c += bits != 0;
    }
    return c;
}

/* The update of piece k (acc[a, b) holds what was applied): the entries whose bits are not +0.0
 * with piece-relative indices while that is smaller (indices encoded into the piece's region of
 * rbuf, values compacted in acc), else dense. */
static gv_status_t piece_build(struct gv_server *srv, uint32_t k, uint64_t c,
                               struct gv_proto_msg *m, struct gv_iov *pl, int *npl)
{
    struct srv_round *r = &srv->round;
    const struct gv_ps_pieces *lay = &srv->pieces.lay;
    uint64_t a = gv_ps_piece_lo(lay, k), len = gv_ps_piece_hi(lay, k) - a;
    gv_ps_msg_init(m, &srv->env, GV_PROTO_MSG_UPDATE, r->iter);
    m->dtype = GV_PROTO_DTYPE_F32;
    m->numel = len;
    m->offset = a;
    m->cf = r->cur.d.cf_send;
    float *acc = r->acc + a;
    if (c * 2 > len) {
        gv_proto_seg_add(m, GV_PROTO_SEG_DENSE, GV_PROTO_ENC_F32, len, 4 * len);
        m->nnz = len;
        pl[0] = (struct gv_iov){acc, 4 * len};
        *npl = 1;
        return GV_OK;
    }
    uint8_t *region = r->rbuf + 4 * a; /* 4 * len bytes, free: the piece's pushes are added */
    size_t idx_off = (4 * len - 4 * c) & ~(size_t)3;
    uint32_t *idx = (uint32_t *)(void *)(region + idx_off);
    const uint32_t *bits = (const uint32_t *)(const void *)acc;
    uint64_t j = 0;
    for (uint64_t i = 0; i < len; i++)
        if (bits[i] != 0) {
            idx[j] = (uint32_t)i;
            acc[j] = acc[i]; /* j <= i: in place, front to back */
            j++;
        }
    struct gv_sparse sp = {
        .idx = idx, .val = acc, .cap = (uint32_t)c, .count = (uint32_t)c, .n = (uint32_t)len};
    struct gv_sparse_layout info;
    gv_status_t status = gv_sparse_encode(&sp, GV_VAL_F32, GV_IDX_AUTO, region, idx_off, acc + c,
                                          4 * (len - c), &info);
    if (status != GV_OK)
        return status;
    (void)gv_ps_sparse_segs(m, &info);
    pl[0] = (struct gv_iov){region, info.idx_len};
    pl[1] = (struct gv_iov){acc + c, info.val_len};
    *npl = 2;
    return GV_OK;
}

/* Piece k's finishing pass, block by block while each block is in cache: the sum completed and
 * averaged over `divisor` workers (plus the server's residual in a dense round of a compressed
 * job), the optimizer step on the shard's parameters with it, the checksum of the result, the
 * non-zero count; then its update is built and sent, or kept for the decision when it is the
 * round's last. */
static gv_status_t piece_finish(struct gv_server *srv, uint32_t k, uint32_t divisor, bool last)
{
    struct srv_pieces *pc = &srv->pieces;
    struct srv_round *r = &srv->round;
    struct srv_piece *pk = &pc->p[k];
    uint64_t t = gv_trace_now(srv->cfg.trace);
    uint64_t a = gv_ps_piece_lo(&pc->lay, k), b = gv_ps_piece_hi(&pc->lay, k), c = 0;
    if (pk->added == 0) /* nobody's push of it arrived (continue policy): a zero sum */
        memset(r->acc + a, 0, (b - a) * sizeof(float));
    const float *x = pk->x_pending ? (const float *)(const void *)r->rbuf : NULL;
    bool raw = pk->added == 1;
    for (uint64_t u = a; u < b; u += GV_PS_CKSUM_BLOCK) {
        uint64_t v = GV_MIN(b, u + GV_PS_CKSUM_BLOCK);
        gv_ps_average_sum(r->acc, x, raw, divisor, u, v);
        if (srv->down != NULL)
            srv_down_dense_add(srv->down, r->acc, u, v);
        c += piece_nonzero(r->acc, u, v);
        pc->ck_sum += gv_ps_step_range(&srv->job->step_optim, pc->lr, srv->shard.params,
                                       srv->shard.momentum, r->acc, u, v, true);
    }
    pk->finished = true;
    pk->divisor = divisor;
    struct gv_proto_msg m;
    struct gv_iov pl[2];
    int npl = 0;
    gv_status_t status = piece_build(srv, k, c, &m, pl, &npl);
    if (status != GV_OK) {
        srv_abort(srv, status, "cannot encode the update of iteration %" PRIu64, r->iter);
        return status;
    }
    if (last) {
        pc->last = (int32_t)k;
        pc->last_msg = m;
        memcpy(pc->last_pl, pl, sizeof(pl));
        pc->last_npl = npl;
    } else if ((status = srv_update_send(srv, &m, pl, npl, pc->lr, false)) != GV_OK) {
        return status;
    }
    gv_trace_span(srv->cfg.trace, GV_PS_SPAN_UPDATE, t, gv_trace_now(srv->cfg.trace), r->iter,
                  r->cur.d.cf_send, 4 * (b - a), (int32_t)k);
    return GV_OK;
}

/* Piece k's turn moves past the ranks that left; its completion is counted, and it is finished
 * at once under the abort policy (the members, hence the divisor, cannot change but by an
 * abort). */
static gv_status_t piece_advance(struct gv_server *srv, uint32_t k, uint32_t from)
{
    struct srv_pieces *pc = &srv->pieces;
    struct srv_piece *pk = &pc->p[k];
    pk->next = piece_member_from(srv, from);
    if (pk->next < srv->W) {
        struct srv_peer *q = srv->net.workers[pk->next];
        if (q->link.c != NULL)
            (void)gv_tp_conn_resume_recv(q->link.c);
        return GV_OK;
    }
    pk->complete = true;
    pc->n_complete++;
    if (srv->cfg.dead_policy != GV_DEAD_ABORT)
        return GV_OK;
    return piece_finish(srv, k, piece_members(srv), srv_piece_all_in(srv));
}

gv_status_t srv_piece_push_done(struct gv_server *srv, struct srv_peer *p,
                                const struct gv_proto_msg *m, bool *whole)
{
    struct srv_pieces *pc = &srv->pieces;
    struct srv_round *r = &srv->round;
    uint32_t k = (uint32_t)(m->offset / pc->lay.base);
    struct srv_piece *pk = &pc->p[k];
    uint64_t a = gv_ps_piece_lo(&pc->lay, k), b = gv_ps_piece_hi(&pc->lay, k);
    bool last_rank = piece_member_from(srv, p->rank + 1) == srv->W;
    if (pk->added > 0 && last_rank && srv->cfg.dead_policy == GV_DEAD_ABORT) {
        pk->x_pending = true; /* the finishing pass adds it */
    } else if (pk->added > 0) {
        float *acc = r->acc;
        const float *x = (const float *)(const void *)r->rbuf;
        if (pk->added == 1)
            for (uint64_t i = a; i < b; i++)
                acc[i] = (0.0f + acc[i]) + x[i];
        else
            for (uint64_t i = a; i < b; i++)
                acc[i] = acc[i] + x[i];
    }
    pk->added++;
    pc->got[p->rank]++;
    *whole = pc->got[p->rank] == pc->lay.np;
    return piece_advance(srv, k, p->rank + 1);
}

void srv_piece_member_gone(struct gv_server *srv, uint32_t w)
{
    struct srv_pieces *pc = &srv->pieces;
    if (!pc->on)
        return;
    for (uint32_t k = 0; k < pc->lay.np; k++)
        if (!pc->p[k].complete && pc->p[k].next == w)
            (void)piece_advance(srv, k, w + 1);
}

enum srv_round_event srv_piece_end(struct gv_server *srv)
{
    struct srv_pieces *pc = &srv->pieces;
    struct srv_round *r = &srv->round;
    uint32_t left = 0;
    for (uint32_t k = 0; k < pc->lay.np; k++)
        left += !pc->p[k].finished;
    for (uint32_t k = 0; k < pc->lay.np; k++) {
        if (pc->p[k].finished) {
            if (pc->p[k].divisor != r->n_avg) { /* the abort policy: cannot happen */
                srv_abort(srv, GV_ERR_PROTO,
                          "iteration %" PRIu64 ": piece %u was averaged over %u workers, the "
                          "round over %u",
                          r->iter, k, pc->p[k].divisor, r->n_avg);
                return SRV_ROUND_BUSY;
            }
            continue;
        }
        if (piece_finish(srv, k, r->n_avg, --left == 0) != GV_OK)
            return SRV_ROUND_BUSY;
    }
    if (srv->down != NULL)
        srv_down_flush(srv->down); /* the residual left with this dense round */
    struct gv_proto_msg *m = &pc->last_msg;
    struct gv_iov pl[3];
    int npl = pc->last_npl;
    memcpy(pl, pc->last_pl, sizeof(pc->last_pl));
    if (srv->job->method == GV_JOB_ACCORDION) {
        uint32_t nt = srv->shard.n_tensors;
        gv_proto_seg_add(m, GV_PROTO_SEG_RAW, GV_PROTO_ENC_BYTES, nt, nt);
        pl[npl++] = (struct gv_iov){r->next.heavy, nt};
    }
    m->u.update.model_checksum = gv_ps_cksum_final(pc->ck_sum, srv->shard.n);
    if (srv_update_send(srv, m, pl, npl, pc->lr, true) != GV_OK)
        return SRV_ROUND_BUSY;
    return srv_update_done(srv);
}
