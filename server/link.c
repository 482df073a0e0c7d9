/* link.c: the sending side of a peer connection (header slots, byte counts), the connecting
 * side of the handshake, and the small protocol conversions servers and workers share. */
#include "gv_server.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

gv_status_t gv_ps_link_init(struct gv_ps_link *l, const struct gv_proto_caps *caps,
                            uint32_t n_slots, size_t slot_bytes)
{
    memset(l, 0, sizeof(*l));
    l->caps = caps;
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

gv_status_t gv_ps_link_send(struct gv_ps_link *l, const struct gv_proto_msg *m,
                            const struct gv_iov *payload, int n, uint64_t *bytes_p)
{
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

/* ---------------------------------------------------------------- handshake, client side */

static uint32_t hs_auth_role(enum gv_proto_role role)
{
    return role == GV_PROTO_ROLE_SERVER ? GV_AUTH_ROLE_SERVER
           : role == GV_PROTO_ROLE_WORKER ? GV_AUTH_ROLE_WORKER
                                          : GV_AUTH_ROLE_TOOL;
}

gv_status_t gv_ps_client_hs_start(struct gv_ps_client_hs *hs, struct gv_ps_link *l,
                                  const struct gv_ps_hello_info *info)
{
    struct gv_auth_hello h;
    memset(hs, 0, sizeof(*hs));
    hs->role = info->role;
    hs->rank = info->rank;
    gv_auth_client_init(&hs->auth, info->secret, hs_auth_role(info->role), info->rank);
    gv_status_t status = gv_auth_client_hello(&hs->auth, &h);
    if (status != GV_OK) {
        snprintf(hs->why, sizeof(hs->why), "%s", hs->auth.reason);
        hs->state = -1;
        return status;
    }
    struct gv_proto_msg m;
    gv_proto_msg_init(&m, GV_PROTO_MSG_HELLO);
    m.role = info->role;
    m.rank = info->rank;
    m.iteration = info->iteration;
    m.u.hello.num_workers = info->num_workers;
    m.u.hello.num_servers = info->num_servers;
    m.u.hello.features = info->secret->len > 0 ? GV_PROTO_FEAT_AUTH : 0;
    m.u.hello.nonce = (struct gv_proto_bytes){h.nonce, h.nonce_len};
    m.u.hello.cluster_id = info->cluster_id;
    status = gv_ps_link_send(l, &m, NULL, 0, NULL);
    if (status != GV_OK) {
        snprintf(hs->why, sizeof(hs->why), "cannot send HELLO: %s", gv_status_str(status));
        hs->state = -1;
        return status;
    }
    hs->state = 1;
    return GV_OK;
}

static gv_status_t hs_fail(struct gv_ps_client_hs *hs, struct gv_ps_link *l, gv_status_t status)
{
    snprintf(hs->why, sizeof(hs->why), "%s", hs->auth.reason);
    hs->state = -1;
    if (l->c != NULL) {
        struct gv_auth_refuse r;
        gv_auth_refuse_msg(&hs->auth, &r);
        struct gv_proto_msg m;
        gv_proto_msg_init(&m, GV_PROTO_MSG_REFUSE);
        m.u.refuse.code = r.code == GV_AUTH_REFUSE_VERSION  ? GV_PROTO_REFUSE_VERSION
                          : r.code == GV_AUTH_REFUSE_AUTH   ? GV_PROTO_REFUSE_AUTH
                          : r.code == GV_AUTH_REFUSE_PEER   ? GV_PROTO_REFUSE_ROLE
                                                            : GV_PROTO_REFUSE_OTHER;
        m.u.refuse.text = r.reason;
        (void)gv_ps_link_send(l, &m, NULL, 0, NULL);
    }
    return status;
}

gv_status_t gv_ps_client_hs_on_msg(struct gv_ps_client_hs *hs, struct gv_ps_link *l,
                                   const struct gv_proto_msg *m)
{
    gv_status_t status;
    if (m->type == GV_PROTO_MSG_REFUSE) {
        struct gv_auth_refuse r = {.code = m->u.refuse.code == GV_PROTO_REFUSE_VERSION
                                               ? GV_AUTH_REFUSE_VERSION
                                               : GV_AUTH_REFUSE_AUTH};
        snprintf(r.reason, sizeof(r.reason), "%s", m->u.refuse.text ? m->u.refuse.text : "");
        status = gv_auth_on_refuse(&hs->auth, &r);
        snprintf(hs->why, sizeof(hs->why), "refused (%s): %s",
                 gv_proto_refuse_str(m->u.refuse.code), r.reason);
        hs->state = -1;
        return status;
    }
    if (hs->state == 1 && m->type == GV_PROTO_MSG_CHALLENGE) {
        const struct gv_proto_bytes *b = &m->u.challenge.nonce;
        struct gv_auth_challenge ch = {.version = GV_AUTH_VERSION};
        if (b->len != GV_AUTH_NONCE_LEN && b->len != GV_AUTH_NONCE_LEN + GV_AUTH_MAC_LEN)
            return hs_fail(hs, l, gv_auth_on_unexpected(&hs->auth, "CHALLENGE of bad length"));
        memcpy(ch.nonce, b->data, GV_AUTH_NONCE_LEN);
        ch.nonce_len = GV_AUTH_NONCE_LEN;
        ch.proof_len = (uint32_t)(b->len - GV_AUTH_NONCE_LEN);
        if (ch.proof_len > 0)
            memcpy(ch.proof, b->data + GV_AUTH_NONCE_LEN, ch.proof_len);
        struct gv_auth_auth a;
        status = gv_auth_client_on_challenge(&hs->auth, &ch, &a);
        if (status != GV_OK)
            return hs_fail(hs, l, status);
        struct gv_proto_msg out;
        gv_proto_msg_init(&out, GV_PROTO_MSG_AUTH);
        out.role = hs->role;
        out.rank = hs->rank;
        out.u.auth.mac = (struct gv_proto_bytes){a.proof, a.proof_len};
        if ((status = gv_ps_link_send(l, &out, NULL, 0, NULL)) != GV_OK) {
            snprintf(hs->why, sizeof(hs->why), "cannot send AUTH: %s", gv_status_str(status));
            hs->state = -1;
            return status;
        }
        hs->state = 2;
        return GV_OK;
    }
    if (hs->state == 2 && m->type == GV_PROTO_MSG_WELCOME) {
        struct gv_auth_welcome w = {.version = GV_AUTH_VERSION};
        status = gv_auth_client_on_welcome(&hs->auth, &w);
        if (status != GV_OK)
            return hs_fail(hs, l, status);
        hs->welcome = m->u.welcome;
        hs->iteration = m->iteration;
        hs->state = 3;
        return GV_OK;
    }
    char what[64];
    snprintf(what, sizeof(what), "%s", gv_proto_msg_type_str(m->type));
    return hs_fail(hs, l, gv_auth_on_unexpected(&hs->auth, what));
}

/* ---------------------------------------------------------------- conversions */

enum gv_proto_level gv_ps_level_to_proto(enum gv_adapt_level level)
{
    switch (level) {
    case GV_ADAPT_LEVEL_CANDIDATE: return GV_PROTO_LEVEL_CANDIDATE;
    case GV_ADAPT_LEVEL_FLOOR: return GV_PROTO_LEVEL_FLOOR;
    default: return GV_PROTO_LEVEL_DENSE;
    }
}

enum gv_adapt_level gv_ps_level_from_proto(enum gv_proto_level level)
{
    switch (level) {
    case GV_PROTO_LEVEL_CANDIDATE: return GV_ADAPT_LEVEL_CANDIDATE;
    case GV_PROTO_LEVEL_FLOOR: return GV_ADAPT_LEVEL_FLOOR;
    default: return GV_ADAPT_LEVEL_DENSE;
    }
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
