/* tt.c: the transport tests' framing, recording handler and loops (see tt.h). */
#include "tt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static gv_status_t tt_parse_prefix(const void *prefix, uint32_t *hdr_len_p, uint64_t *payload_len_p,
                                   void *user)
{
    struct tt_prefix p;
    (void)user;
    memcpy(&p, prefix, sizeof(p));
    if (p.magic != TT_MAGIC)
        return GV_ERR_PROTO;
    *hdr_len_p = p.hdr_len;
    *payload_len_p = p.payload_len;
    return GV_OK;
}

struct tt_conn_rec *tt_rec(struct tt_side *s, const struct gv_conn *c)
{
    for (int i = 0; i < s->n_conns; i++)
        if (s->conns[i].id == c->id)
            return &s->conns[i];
    return NULL;
}

struct tt_conn_rec *tt_track(struct tt_side *s, struct gv_conn *c)
{
    struct tt_conn_rec *r = tt_rec(s, c);
    if (r != NULL)
        return r;
    if (s->n_conns == TT_MAX_CONNS) {
        fprintf(stderr, "tt: too many connections\n");
        abort();
    }
    r = &s->conns[s->n_conns++];
    memset(r, 0, sizeof(*r));
    r->c = c;
    r->id = c->id;
    if (s->rx_cap > 0) {
        r->rx = malloc(s->rx_cap);
        if (r->rx == NULL)
            abort();
    }
    return r;
}

int tt_open_conns(const struct tt_side *s)
{
    int n = 0;
    for (int i = 0; i < s->n_conns; i++)
        n += s->conns[i].c != NULL;
    return n;
}

static gv_status_t tt_on_header(struct gv_conn *c, const void *msg, size_t msg_len,
                                uint64_t payload_len, struct gv_iov *dst, int *dst_cnt, void *user)
{
    struct tt_side *s = user;
    struct tt_conn_rec *r = tt_track(s, c);
    int segs = s->rx_segs < 1 ? 1 : s->rx_segs;
    (void)msg;
    (void)msg_len;
    if (payload_len > s->rx_cap || segs > *dst_cnt)
        return GV_ERR_PROTO;
    if ((uint64_t)segs > payload_len)
        segs = (int)payload_len;
    /* uneven pieces: the first ones are smaller, to exercise piece boundaries */
    size_t off = 0;
    for (int i = 0; i < segs; i++) {
        size_t len = i == segs - 1 ? (size_t)payload_len - off : (size_t)payload_len / (2u * segs);
        if (len == 0 && i < segs - 1)
            len = 1;
        dst[i].base = i >= s->discard_from ? NULL : r->rx + off;
        dst[i].len = len;
        off += len;
    }
    *dst_cnt = segs;
    return GV_OK;
}

/* Bytes of the payload that were kept (not discarded) by tt_on_header's layout. */
static size_t tt_kept(const struct tt_side *s, uint64_t payload_len)
{
    int segs = s->rx_segs < 1 ? 1 : s->rx_segs;
    if ((uint64_t)segs > payload_len)
        segs = (int)payload_len;
    if (s->discard_from >= segs)
        return (size_t)payload_len;
    size_t off = 0;
    for (int i = 0; i < s->discard_from; i++) {
        size_t len = (size_t)payload_len / (2u * segs);
        off += len ? len : 1;
    }
    return off;
}

static void tt_on_msg(struct gv_conn *c, const void *msg, size_t msg_len, void *user)
{
    struct tt_side *s = user;
    struct tt_conn_rec *r = tt_track(s, c);
    struct tt_prefix p;
    struct tt_hdr h;

    if (msg_len != TT_HDR_LEN) {
        s->bad_order++;
        return;
    }
    memcpy(&p, msg, sizeof(p));
    memcpy(&h, (const uint8_t *)msg + TT_PREFIX_LEN, sizeof(h));
    if (s->seq_check && h.seq != r->next_seq)
        s->bad_order++;
    r->next_seq = h.seq + 1;
    r->msgs++;
    s->msgs++;
    s->payload_bytes += p.payload_len;
    if (s->verify && p.payload_len > 0 && tt_check(r->rx, tt_kept(s, p.payload_len), h.seq) >= 0)
        s->bad_payload++;
    if (s->hook != NULL)
        s->hook(s, r, c, &h, p.payload_len);
}

static void tt_on_accept(struct gv_listener *l, struct gv_conn *c, void *user)
{
    struct tt_side *s = user;
    (void)l;
    s->accepts++;
    tt_track(s, c);
}

static void tt_on_close(struct gv_conn *c, gv_status_t reason, void *user)
{
    struct tt_side *s = user;
    struct tt_conn_rec *r = tt_track(s, c);
    r->closes++;
    r->reason = reason;
    r->closed_ns = gv_now_ns();
    r->c = NULL;
}

struct gv_tp_handler tt_handler(void)
{
    struct gv_tp_handler h = {
        .prefix_len = TT_PREFIX_LEN,
        .parse_prefix = tt_parse_prefix,
        .on_header = tt_on_header,
        .on_msg = tt_on_msg,
        .on_accept = tt_on_accept,
        .on_close = tt_on_close,
    };
    return h;
}

gv_status_t tt_side_init(struct tt_side *s, const char *backend, const struct gv_tp_config *cfg,
                         const char *listen_host)
{
    struct gv_tp_handler h = tt_handler();
    gv_status_t status;

    s->discard_from = GV_TP_MAX_DST_IOV;
    s->seq_check = 1;
    s->verify = 1;
    status = gv_tp_create(backend, cfg, &h, s, &s->tp);
    if (status != GV_OK)
        return status;
    if (listen_host != NULL) {
        status = gv_tp_listen(s->tp, listen_host[0] ? listen_host : NULL, 0, &s->l);
        if (status != GV_OK) {
            gv_tp_destroy(s->tp);
            s->tp = NULL;
            return status;
        }
        s->port = gv_tp_listener_port(s->tp, s->l);
    }
    return GV_OK;
}

void tt_side_cleanup(struct tt_side *s)
{
    gv_tp_destroy(s->tp);
    s->tp = NULL;
    for (int i = 0; i < s->n_conns; i++) {
        free(s->conns[i].rx);
        s->conns[i].rx = NULL;
    }
}

void tt_fill(uint8_t *buf, size_t len, uint64_t seq)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = tt_pattern(seq, i);
}

long long tt_check(const uint8_t *buf, size_t len, uint64_t seq)
{
    for (size_t i = 0; i < len; i++)
        if (buf[i] != tt_pattern(seq, i))
            return (long long)i;
    return -1;
}

static void tt_send_cb(struct gv_conn *c, gv_status_t status, void *arg)
{
    struct tt_msg *m = arg;
    (void)c;
    m->cbs++;
    m->done = 1;
    m->status = status;
}

gv_status_t tt_send(struct gv_conn *c, struct tt_msg *m, uint64_t seq, uint32_t kind,
                    const uint8_t *payload, size_t len, int nseg)
{
    struct tt_prefix p = {
        .magic = TT_MAGIC, .hdr_len = TT_HDR_LEN - TT_PREFIX_LEN, .payload_len = len};
    struct tt_hdr h = {.seq = seq, .kind = kind};

    memcpy(m->head, &p, sizeof(p));
    memcpy(m->head + TT_PREFIX_LEN, &h, sizeof(h));
    m->iov[0].base = m->head;
    m->iov[0].len = TT_HDR_LEN;
    m->iovcnt = 1;
    if (len > 0) {
        if (nseg < 1)
            nseg = 1;
        if (nseg > GV_TP_MAX_SEND_IOV - 1)
            nseg = GV_TP_MAX_SEND_IOV - 1;
        if ((size_t)nseg > len)
            nseg = (int)len;
        size_t off = 0;
        for (int i = 0; i < nseg; i++) {
            size_t l = i == nseg - 1 ? len - off : len / (size_t)(nseg + 1);
            if (l == 0)
                l = 1;
            m->iov[m->iovcnt].base = (void *)(uintptr_t)(payload + off);
            m->iov[m->iovcnt].len = l;
            m->iovcnt++;
            off += l;
        }
    }
    m->done = 0;
    m->cbs = 0;
    m->status = GV_INPROGRESS;
    gv_status_t status = gv_tp_send(c, m->iov, m->iovcnt, tt_send_cb, m);
    m->ret = status;
    if (status != GV_INPROGRESS) {
        m->done = 1;
        m->status = status;
    }
    return status;
}

int tt_run(struct tt_side **sides, int (*pred)(void *arg), void *arg, int timeout_ms)
{
    uint64_t deadline = gv_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    while (!pred(arg)) {
        if (gv_now_ns() > deadline)
            return 0;
        int n = 0;
        for (int i = 0; sides[i] != NULL; i++) {
            int ret = gv_tp_progress(sides[i]->tp, 0);
            if (ret < 0)
                return 0;
            n += ret;
        }
        if (n == 0 && sides[0] != NULL) /* nothing moved: sleep a little in one of them */
            gv_tp_progress(sides[0]->tp, 1);
    }
    return 1;
}

double tt_ms_since(uint64_t t0)
{
    return (double)(gv_now_ns() - t0) / 1e6;
}
