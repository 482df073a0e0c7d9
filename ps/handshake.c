/* handshake.c: both sides of a connection's handshake as state machines over decoded messages
 * (ops/'s HMAC exchange carried by proto/'s HELLO, CHALLENGE, AUTH, WELCOME and REFUSE): the
 * connecting side (a worker, or server s > 0 towards server 0) and the accepting side. Neither
 * touches a connection: they return the message to send, so that the fuzz target runs exactly
 * this code. */
#include "gv_ps.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static uint32_t hs_auth_role(enum gv_proto_role role)
{
    return role == GV_PROTO_ROLE_SERVER   ? GV_AUTH_ROLE_SERVER
           : role == GV_PROTO_ROLE_WORKER ? GV_AUTH_ROLE_WORKER
                                          : GV_AUTH_ROLE_TOOL;
}

static enum gv_proto_refuse hs_refuse_code(uint32_t auth_code)
{
    return auth_code == GV_AUTH_REFUSE_VERSION    ? GV_PROTO_REFUSE_VERSION
           : auth_code == GV_AUTH_REFUSE_PEER     ? GV_PROTO_REFUSE_ROLE
           : auth_code == GV_AUTH_REFUSE_PROTOCOL ? GV_PROTO_REFUSE_OTHER
                                                  : GV_PROTO_REFUSE_AUTH;
}

/* ---------------------------------------------------------------- connecting side */

gv_status_t gv_ps_client_hs_begin(struct gv_ps_client_hs *hs, const struct gv_ps_hello_info *info,
                                  struct gv_proto_msg *out)
{
    struct gv_auth_hello h;
    memset(hs, 0, sizeof(*hs));
    hs->role = info->role;
    hs->rank = info->rank;
    gv_auth_client_init(&hs->auth, info->secret, hs_auth_role(info->role), info->rank);
    gv_status_t status = gv_auth_client_hello(&hs->auth, &h);
    if (status != GV_OK) {
        snprintf(hs->why, sizeof(hs->why), "%s", hs->auth.reason);
        hs->state = GV_PS_CLIENT_FAILED;
        return status;
    }
    memcpy(hs->nonce, h.nonce, GV_AUTH_NONCE_LEN);
    struct gv_ps_envelope env = {info->role, info->rank, 0};
    gv_ps_msg_init(out, &env, GV_PROTO_MSG_HELLO, info->iteration);
    out->u.hello.num_workers = info->num_workers;
    out->u.hello.num_servers = info->num_servers;
    out->u.hello.features = info->secret->len > 0 ? GV_PROTO_FEAT_AUTH : 0;
    out->u.hello.nonce = (struct gv_proto_bytes){hs->nonce, GV_AUTH_NONCE_LEN};
    out->u.hello.cluster_id = info->cluster_id;
    hs->state = GV_PS_CLIENT_HELLO_SENT;
    return GV_OK;
}

gv_status_t gv_ps_client_hs_start(struct gv_ps_client_hs *hs, struct gv_ps_link *l,
                                  const struct gv_ps_hello_info *info)
{
    struct gv_proto_msg m;
    gv_status_t status = gv_ps_client_hs_begin(hs, info, &m);
    if (status != GV_OK)
        return status;
    status = gv_ps_link_send(l, &m, NULL, 0, NULL);
    if (status != GV_OK) {
        snprintf(hs->why, sizeof(hs->why), "cannot send HELLO: %s", gv_status_str(status));
        hs->state = GV_PS_CLIENT_FAILED;
    }
    return status;
}

/* Our refusal after a failure: the generic text of the code only. */
static gv_status_t hs_fail(struct gv_ps_client_hs *hs, gv_status_t status, struct gv_proto_msg *out,
                           bool *have_out)
{
    snprintf(hs->why, sizeof(hs->why), "%s", hs->auth.reason);
    hs->state = GV_PS_CLIENT_FAILED;
    struct gv_auth_refuse r;
    gv_auth_refuse_msg(&hs->auth, &r);
    struct gv_ps_envelope env = {hs->role, hs->rank, 0};
    gv_ps_msg_init(out, &env, GV_PROTO_MSG_REFUSE, 0);
    out->u.refuse.code = hs_refuse_code(r.code);
    snprintf(hs->refuse_text, sizeof(hs->refuse_text), "%s", r.reason);
    out->u.refuse.text = hs->refuse_text;
    *have_out = true;
    return status;
}

gv_status_t gv_ps_client_hs_step(struct gv_ps_client_hs *hs, const struct gv_proto_msg *m,
                                 struct gv_proto_msg *out, bool *have_out)
{
    *have_out = false;
    gv_status_t status;
    if (m->type == GV_PROTO_MSG_REFUSE) {
        struct gv_auth_refuse r = {.code = m->u.refuse.code == GV_PROTO_REFUSE_VERSION
                                               ? GV_AUTH_REFUSE_VERSION
                                               : GV_AUTH_REFUSE_AUTH};
        snprintf(r.reason, sizeof(r.reason), "%s", m->u.refuse.text ? m->u.refuse.text : "");
        status = gv_auth_on_refuse(&hs->auth, &r);
        snprintf(hs->why, sizeof(hs->why), "refused (%s): %s",
                 gv_proto_refuse_str(m->u.refuse.code), r.reason);
        hs->state = GV_PS_CLIENT_FAILED;
        return status;
    }
    if (hs->state == GV_PS_CLIENT_HELLO_SENT && m->type == GV_PROTO_MSG_CHALLENGE) {
        const struct gv_proto_bytes *b = &m->u.challenge.nonce;
        struct gv_auth_challenge ch = {.version = GV_AUTH_VERSION};
        if (b->len != GV_AUTH_NONCE_LEN && b->len != GV_AUTH_NONCE_LEN + GV_AUTH_MAC_LEN)
            return hs_fail(hs, gv_auth_on_unexpected(&hs->auth, "CHALLENGE of bad length"), out,
                           have_out);
        memcpy(ch.nonce, b->data, GV_AUTH_NONCE_LEN);
        ch.nonce_len = GV_AUTH_NONCE_LEN;
        ch.proof_len = (uint32_t)(b->len - GV_AUTH_NONCE_LEN);
        if (ch.proof_len > 0)
            memcpy(ch.proof, b->data + GV_AUTH_NONCE_LEN, ch.proof_len);
        status = gv_auth_client_on_challenge(&hs->auth, &ch, &hs->proof);
        if (status != GV_OK)
            return hs_fail(hs, status, out, have_out);
        struct gv_ps_envelope env = {hs->role, hs->rank, 0};
        gv_ps_msg_init(out, &env, GV_PROTO_MSG_AUTH, 0);
        out->u.auth.mac = (struct gv_proto_bytes){hs->proof.proof, hs->proof.proof_len};
        *have_out = true;
        hs->state = GV_PS_CLIENT_AUTH_SENT;
        return GV_OK;
    }
    if (hs->state == GV_PS_CLIENT_AUTH_SENT && m->type == GV_PROTO_MSG_WELCOME) {
        struct gv_auth_welcome w = {.version = GV_AUTH_VERSION};
        status = gv_auth_client_on_welcome(&hs->auth, &w);
        if (status != GV_OK)
            return hs_fail(hs, status, out, have_out);
        hs->welcome = m->u.welcome;
        hs->iteration = m->iteration;
        hs->state = GV_PS_CLIENT_WELCOMED;
        return GV_OK;
    }
    char what[64];
    snprintf(what, sizeof(what), "%s", gv_proto_msg_type_str(m->type));
    return hs_fail(hs, gv_auth_on_unexpected(&hs->auth, what), out, have_out);
}

gv_status_t gv_ps_client_hs_on_msg(struct gv_ps_client_hs *hs, struct gv_ps_link *l,
                                   const struct gv_proto_msg *m)
{
    struct gv_proto_msg out;
    bool have_out;
    gv_status_t status = gv_ps_client_hs_step(hs, m, &out, &have_out);
    if (!have_out || l->c == NULL)
        return status;
    gv_status_t sent = gv_ps_link_send(l, &out, NULL, 0, NULL);
    if (status == GV_OK && sent != GV_OK) {
        snprintf(hs->why, sizeof(hs->why), "cannot send AUTH: %s", gv_status_str(sent));
        hs->state = GV_PS_CLIENT_FAILED;
        return sent;
    }
    return status;
}

/* ---------------------------------------------------------------- accepting side */

void gv_ps_server_hs_init(struct gv_ps_server_hs *hs, const struct gv_auth_secret *secret)
{
    memset(hs, 0, sizeof(*hs));
    gv_auth_server_init(&hs->auth, secret,
                        (1u << GV_AUTH_ROLE_WORKER) | (1u << GV_AUTH_ROLE_SERVER), UINT32_MAX);
}

/* A refusal whose text the peer may see in full (it is about its own request). */
static enum gv_ps_hs_result hs_refuse(struct gv_ps_server_hs *hs,
                                      const struct gv_ps_server_hs_cfg *cfg,
                                      struct gv_proto_msg *out, enum gv_proto_refuse code,
                                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static enum gv_ps_hs_result hs_refuse(struct gv_ps_server_hs *hs,
                                      const struct gv_ps_server_hs_cfg *cfg,
                                      struct gv_proto_msg *out, enum gv_proto_refuse code,
                                      const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(hs->why, sizeof(hs->why), fmt, ap);
    va_end(ap);
    snprintf(hs->text, sizeof(hs->text), "%s", hs->why);
    hs->code = code;
    struct gv_ps_envelope env = {GV_PROTO_ROLE_SERVER, cfg->rank, 0};
    gv_ps_msg_init(out, &env, GV_PROTO_MSG_REFUSE, 0);
    out->u.refuse.code = code;
    out->u.refuse.text = hs->text;
    return GV_PS_HS_REFUSED;
}

/* An authentication failure: the detail stays in why (the log), the peer is told the generic
 * text of the code (ops/: nothing it could not see). */
static enum gv_ps_hs_result hs_refuse_auth(struct gv_ps_server_hs *hs,
                                           const struct gv_ps_server_hs_cfg *cfg,
                                           struct gv_proto_msg *out)
{
    struct gv_auth_refuse r;
    gv_auth_refuse_msg(&hs->auth, &r);
    enum gv_ps_hs_result res = hs_refuse(hs, cfg, out, hs_refuse_code(r.code), "%s", r.reason);
    snprintf(hs->why, sizeof(hs->why), "%s", hs->auth.reason);
    return res;
}

static enum gv_ps_hs_result hs_hello(struct gv_ps_server_hs *hs,
                                     const struct gv_ps_server_hs_cfg *cfg,
                                     const struct gv_proto_msg *m, struct gv_proto_msg *out)
{
    const struct gv_proto_hello *h = &m->u.hello;
    bool as_server = m->role == GV_PROTO_ROLE_SERVER;
    if (m->role != GV_PROTO_ROLE_WORKER && !(as_server && cfg->rank == 0))
        return hs_refuse(hs, cfg, out, GV_PROTO_REFUSE_ROLE,
                         "role %s is not accepted by server "
                         "%u",
                         gv_proto_role_str(m->role), cfg->rank);
    uint32_t lim = as_server ? cfg->num_servers : cfg->num_workers;
    if (m->rank >= lim || (as_server && m->rank == 0))
        return hs_refuse(hs, cfg, out, GV_PROTO_REFUSE_ROLE,
                         "%s rank %u is out of range (this "
                         "job has %u %ss)",
                         gv_proto_role_str(m->role), m->rank, lim, gv_proto_role_str(m->role));
    if (h->num_workers != cfg->num_workers || h->num_servers != cfg->num_servers)
        return hs_refuse(hs, cfg, out, GV_PROTO_REFUSE_CLUSTER,
                         "the peer expects %u workers and "
                         "%u servers, this job has %u and %u",
                         h->num_workers, h->num_servers, cfg->num_workers, cfg->num_servers);
    const char *cid = h->cluster_id ? h->cluster_id : "";
    if (strcmp(cid, cfg->cluster_id) != 0)
        return hs_refuse(hs, cfg, out, GV_PROTO_REFUSE_CLUSTER,
                         "cluster id '%s' is not this "
                         "job's '%s'",
                         cid, cfg->cluster_id);
    struct gv_auth_hello ah = {.version = GV_AUTH_VERSION,
                               .role = as_server ? GV_AUTH_ROLE_SERVER : GV_AUTH_ROLE_WORKER,
                               .rank = m->rank};
    if (h->nonce.len > sizeof(ah.nonce))
        return hs_refuse(hs, cfg, out, GV_PROTO_REFUSE_OTHER, "nonce too long");
    if (h->nonce.len > 0)
        memcpy(ah.nonce, h->nonce.data, h->nonce.len);
    ah.nonce_len = (uint32_t)h->nonce.len;
    struct gv_auth_challenge ch;
    if (gv_auth_server_on_hello(&hs->auth, &ah, &ch) != GV_OK)
        return hs_refuse_auth(hs, cfg, out);
    hs->hello_seen = true;
    hs->role = m->role;
    hs->rank = m->rank;
    hs->iteration = as_server ? m->iteration : 0;
    memcpy(hs->chal, ch.nonce, GV_AUTH_NONCE_LEN);
    memcpy(hs->chal + GV_AUTH_NONCE_LEN, ch.proof, ch.proof_len);
    struct gv_ps_envelope env = {GV_PROTO_ROLE_SERVER, cfg->rank, 0};
    gv_ps_msg_init(out, &env, GV_PROTO_MSG_CHALLENGE, 0);
    out->u.challenge.nonce = (struct gv_proto_bytes){hs->chal, GV_AUTH_NONCE_LEN + ch.proof_len};
    return GV_PS_HS_REPLY;
}

enum gv_ps_hs_result gv_ps_server_hs_on_msg(struct gv_ps_server_hs *hs,
                                            const struct gv_ps_server_hs_cfg *cfg,
                                            const struct gv_proto_msg *m, struct gv_proto_msg *out)
{
    switch (m->type) {
    case GV_PROTO_MSG_HELLO:
        if (hs->auth.state != GV_AUTH_ST_INIT)
            break;
        return hs_hello(hs, cfg, m, out);
    case GV_PROTO_MSG_AUTH: {
        if (hs->auth.state != GV_AUTH_ST_WAIT_AUTH)
            break;
        struct gv_auth_auth a = {0};
        struct gv_auth_welcome w;
        if (m->u.auth.mac.len > sizeof(a.proof))
            return hs_refuse(hs, cfg, out, GV_PROTO_REFUSE_AUTH, "proof too long");
        if (m->u.auth.mac.len > 0)
            memcpy(a.proof, m->u.auth.mac.data, m->u.auth.mac.len);
        a.proof_len = (uint32_t)m->u.auth.mac.len;
        if (gv_auth_server_on_auth(&hs->auth, &a, &w) != GV_OK)
            return hs_refuse_auth(hs, cfg, out);
        return GV_PS_HS_JOINED;
    }
    case GV_PROTO_MSG_REFUSE:
        snprintf(hs->why, sizeof(hs->why), "%s%s", m->u.refuse.text ? m->u.refuse.text : "",
                 m->u.refuse.code == GV_PROTO_REFUSE_AUTH
                     ? " (this server's proof did not "
                       "verify there: the peer holds another secret, or none)"
                     : "");
        return GV_PS_HS_CLOSED;
    default: break;
    }
    return hs_refuse(hs, cfg, out, GV_PROTO_REFUSE_OTHER, "%s before the handshake completed",
                     gv_proto_msg_type_str(m->type));
}
