/* link.c: a peer connection's two sides as servers and workers use them: sending (the envelope,
 * header slots, byte counts) and receiving (each header decoded once), and the caps every
 * process uses. The handshakes are in handshake.c, the wire's enums in wire.c. */
#include "gv_ps.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void gv_ps_msg_init(struct gv_proto_msg *m, const struct gv_ps_envelope *env,
                    enum gv_proto_msg_type type, uint64_t iteration)
{
    gv_proto_msg_init(m, type);
    m->role = env->role;
    m->rank = env->rank;
    m->shard = env->shard;
    m->iteration = iteration;
}

gv_status_t gv_ps_link_init(struct gv_ps_link *l, const struct gv_proto_caps *caps,
                            const struct gv_ps_envelope *env, uint32_t n_slots, size_t slot_bytes)
{
    memset(l, 0, sizeof(*l));
    l->caps = caps;
    l->env = *env;
    l->n_slots = n_slots;
    l->slot_bytes = slot_bytes;
    l->slots = gv_malloc((size_t)n_slots * slot_bytes);
    if (l->slots == NULL) {
        gv_log(GV_LOG_ERROR, "link: cannot allocate %u header slots", n_slots);
        return GV_ERR_NOMEM;
    }
    return GV_OK;
}

void gv_ps_link_cleanup(struct gv_ps_link *l)
{
    if (l == NULL)
        return;
    gv_free(l->slots);
    l->slots = NULL;
}

static void link_sent(struct gv_conn *c, gv_status_t status, void *arg)
{
    (void)c;
    struct gv_ps_link *l = arg;
    l->n_done++;
    if (status != GV_OK && l->send_error == GV_OK)
        l->send_error = status;
    if (l->n_done == l->n_sent && l->on_idle != NULL)
        l->on_idle(l, l->arg);
}

const char *gv_ps_error_text_fit(const char *text, const struct gv_proto_caps *caps, char *buf,
                                 size_t len)
{
    struct gv_proto_caps def;
    if (caps == NULL) {
        gv_proto_caps_default(&def);
        caps = &def;
    }
    if (text == NULL || strlen(text) <= caps->max_text_len || len == 0)
        return text;
    snprintf(buf, GV_MIN(len, (size_t)caps->max_text_len + 1), "%s", text);
    return buf;
}

gv_status_t gv_ps_link_send(struct gv_ps_link *l, const struct gv_proto_msg *m,
                            const struct gv_iov *payload, int n, uint64_t *bytes_p)
{
    struct gv_proto_msg cut_m;
    char cut[1024];
    if (m->type == GV_PROTO_MSG_ERROR) {
        const char *t = gv_ps_error_text_fit(m->u.error.text, l->caps, cut, sizeof(cut));
        if (t != m->u.error.text) {
            cut_m = *m;
            cut_m.u.error.text = t;
            m = &cut_m;
        }
    }
    if (l->c == NULL)
        return GV_ERR_CLOSED;
    if (l->n_sent - l->n_done >= l->n_slots)
        return GV_ERR_AGAIN;
    if (n < 0 || n > GV_TP_MAX_SEND_IOV - 1)
        return GV_ERR_INVAL;
    uint8_t *slot = l->slots + (size_t)(l->n_sent % l->n_slots) * l->slot_bytes;
    size_t len;
    gv_status_t status = gv_proto_encode(m, l->caps, slot, l->slot_bytes, &len);
    if (status != GV_OK)
        return status;
    struct gv_iov iov[GV_TP_MAX_SEND_IOV];
    uint64_t total = len;
    iov[0] = (struct gv_iov){slot, len};
    for (int i = 0; i < n; i++) {
        iov[i + 1] = payload[i];
        total += payload[i].len;
    }
    status = gv_tp_send(l->c, iov, n + 1, link_sent, l);
    if (status != GV_OK && status != GV_INPROGRESS)
        return status;
    l->t_sent_ns = gv_now_ns();
    l->n_sent++;
    if (status == GV_OK)
        l->n_done++;
    l->bytes_sent += total;
    if (bytes_p != NULL)
        *bytes_p = total;
    return GV_OK;
}

/* ---------------------------------------------------------------- byte accounting */

void gv_ps_bytes_add(struct gv_ps_bytes *b, double cf, uint64_t sent, uint64_t recv,
                     uint64_t payload_sent)
{
    uint32_t i = 0;
    while (i < b->n && b->by_cf[i].cf != cf)
        i++;
    if (i == b->n) {
        if (b->n == GV_PS_MAX_CF_BUCKETS)
            i = GV_PS_MAX_CF_BUCKETS - 1;
        else
            b->by_cf[b->n++].cf = cf;
    }
    b->by_cf[i].iters++;
    b->by_cf[i].sent += sent;
    b->by_cf[i].recv += recv;
    b->by_cf[i].payload_sent += payload_sent;
    b->iter_sent += sent;
    b->iter_recv += recv;
}

void gv_ps_bytes_describe(const struct gv_ps_bytes *b, void (*fn)(const char *line, void *arg),
                          void *arg)
{
    /* ascending CF */
    uint32_t order[GV_PS_MAX_CF_BUCKETS];
    for (uint32_t i = 0; i < b->n; i++)
        order[i] = i;
    for (uint32_t i = 1; i < b->n; i++)
        for (uint32_t j = i; j > 0 && b->by_cf[order[j - 1]].cf > b->by_cf[order[j]].cf; j--) {
            uint32_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (uint32_t k = 0; k < b->n; k++) {
        const struct gv_ps_cf_bytes *c = &b->by_cf[order[k]];
        char s[32], r[32], line[200];
        double it = c->iters ? (double)c->iters : 1.0;
        gv_ps_fmt_bytes((double)c->sent / it, s, sizeof(s));
        gv_ps_fmt_bytes((double)c->recv / it, r, sizeof(r));
        snprintf(line, sizeof(line),
                 "  CF %7.1f: %6" PRIu64 " iterations, sent %s/iter, "
                 "received %s/iter",
                 c->cf, c->iters, s, r);
        fn(line, arg);
    }
}

/* ---------------------------------------------------------------- receiving */

/* A decoded header keeps pointers into the arena, which the next decode of any connection
 * reuses: copy out what a kept message needs (only a PUSH's statistics point into it). */
static gv_status_t rx_keep(struct gv_ps_rx *rx)
{
    struct gv_proto_iter_stats *st = &rx->m.u.push.stats;
    if (rx->m.type != GV_PROTO_MSG_PUSH || st->n_layer_norms == 0 || st->layer_norms == NULL)
        return GV_OK;
    if (st->n_layer_norms > rx->norms_cap) {
        double *v = gv_realloc(rx->norms, st->n_layer_norms * sizeof(double));
        if (v == NULL)
            return GV_ERR_NOMEM;
        rx->norms = v;
        rx->norms_cap = st->n_layer_norms;
    }
    memcpy(rx->norms, st->layer_norms, st->n_layer_norms * sizeof(double));
    st->layer_norms = rx->norms;
    return GV_OK;
}

gv_status_t gv_ps_rx_header(struct gv_ps_rx *rx, const void *msg, size_t len,
                            const struct gv_proto_caps *caps, struct gv_proto_arena *arena,
                            const struct gv_proto_msg **m_p)
{
    if (!rx->kept) {
        gv_status_t status = gv_proto_decode(msg, len, caps, arena, &rx->m);
        if (status == GV_OK)
            status = rx_keep(rx);
        if (status != GV_OK)
            return status;
        rx->kept = true;
    }
    *m_p = &rx->m;
    return GV_OK;
}

gv_status_t gv_ps_rx_msg(struct gv_ps_rx *rx, const void *msg, size_t len,
                         const struct gv_proto_caps *caps, struct gv_proto_arena *arena,
                         const struct gv_proto_msg **m_p)
{
    if (!rx->kept) {
        gv_status_t status = gv_proto_decode(msg, len, caps, arena, &rx->m);
        if (status != GV_OK)
            return status;
    }
    rx->kept = false;
    *m_p = &rx->m;
    return GV_OK;
}

void gv_ps_rx_cleanup(struct gv_ps_rx *rx)
{
    gv_free(rx->norms);
    rx->norms = NULL;
    rx->norms_cap = 0;
    rx->kept = false;
}

void gv_ps_caps(struct gv_proto_caps *caps, struct gv_tp_config *tp_cfg, uint64_t io_timeout_ns,
                uint64_t connect_timeout_ns)
{
    gv_proto_caps_default(caps);
    caps->max_segments = GV_TP_MAX_DST_IOV; /* what a receiver can scatter */
    gv_tp_config_default(tp_cfg);
    tp_cfg->max_hdr_len = caps->max_hdr_len + GV_PROTO_PREFIX_LEN;
    tp_cfg->max_payload_len = caps->max_payload_len;
    tp_cfg->max_send_queue = 256;
    uint64_t io_ms = io_timeout_ns / 1000000ull, conn_ms = connect_timeout_ns / 1000000ull;
    tp_cfg->io_timeout_ms = (int)GV_MAX(1ull, GV_MIN(io_ms, 86400000ull));
    tp_cfg->connect_timeout_ms = (int)GV_MAX(1ull, GV_MIN(conn_ms, 86400000ull));
}
