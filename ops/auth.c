/* auth.c: the shared secret (file or GV_SECRET) and the mutual HMAC-SHA256 challenge-response
 * handshake, as a state machine over the message structs of gv_ops.h. OpenSSL does the
 * cryptography (HMAC, RAND_bytes, CRYPTO_memcmp, OPENSSL_cleanse). No I/O besides reading the
 * secret file, no clock, no logging in the state machine: the caller logs a->reason with the
 * peer's address. */
#include "gv_ops.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char auth_label_server[16] = "gravac-v1 server";
static const char auth_label_client[16] = "gravac-v1 client";

/* ---------------------------------------------------------------- secret */

static gv_status_t auth_check_len(size_t len, const char *what)
{
    if (len == 0) {
        gv_log(GV_LOG_ERROR, "auth: %s is empty", what);
        return GV_ERR_AUTH;
    }
    if (len < GV_AUTH_SECRET_MIN || len > GV_AUTH_SECRET_MAX) {
        gv_log(GV_LOG_ERROR,
               "auth: %s is %zu bytes; a secret has %u to %u bytes "
               "(e.g. openssl rand -hex 32)",
               what, len, GV_AUTH_SECRET_MIN, GV_AUTH_SECRET_MAX);
        return GV_ERR_AUTH;
    }
    return GV_OK;
}

gv_status_t gv_auth_secret_set(struct gv_auth_secret *secret, const void *key, size_t len)
{
    gv_status_t status = auth_check_len(len, "the secret");
    if (status != GV_OK)
        return status;
    memcpy(secret->key, key, len);
    secret->len = len;
    return GV_OK;
}

void gv_auth_secret_clear(struct gv_auth_secret *secret)
{
    OPENSSL_cleanse(secret->key, sizeof(secret->key));
    secret->len = 0;
}

static gv_status_t auth_read_secret_file(const char *file, struct gv_auth_secret *secret)
{
    gv_status_t status = GV_ERR_IO;
    uint8_t buf[GV_AUTH_SECRET_MAX + 3];
    size_t len = 0;
    struct stat st;
    /* O_NONBLOCK: a FIFO must not block us; it is refused below as not a regular file */
    int fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        gv_log(GV_LOG_ERROR, "auth: secret file %s: %s", file, strerror(errno));
        return GV_ERR_IO;
    }
    if (fstat(fd, &st) != 0) {
        gv_log(GV_LOG_ERROR, "auth: secret file %s: %s", file, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        gv_log(GV_LOG_ERROR, "auth: secret file %s is not a regular file", file);
        goto out;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        gv_log(GV_LOG_ERROR,
               "auth: secret file %s has mode %04o: group or others may read or "
               "write it; chmod 600 it",
               file, (unsigned)(st.st_mode & 07777));
        status = GV_ERR_AUTH;
        goto out;
    }
    for (;;) {
        ssize_t ret = read(fd, buf + len, sizeof(buf) - len);
        if (ret < 0 && errno == EINTR)
            continue;
        if (ret < 0) {
            gv_log(GV_LOG_ERROR, "auth: secret file %s: %s", file, strerror(errno));
            goto out;
        }
        if (ret == 0 || (len += (size_t)ret) == sizeof(buf))
            break;
    }
    if (len > 0 && buf[len - 1] == '\n')
        len -= (len > 1 && buf[len - 2] == '\r') ? 2 : 1;
    char what[300];
    snprintf(what, sizeof(what), "the secret in %s", file);
    status = auth_check_len(len, what);
    if (status == GV_OK) {
        memcpy(secret->key, buf, len);
        secret->len = len;
    }
out:
    OPENSSL_cleanse(buf, sizeof(buf));
    close(fd);
    return status;
}

gv_status_t gv_auth_secret_load(const char *file, const char *env_value, bool insecure,
                                struct gv_auth_secret *secret)
{
    bool have_file = file != NULL && file[0] != '\0';
    secret->len = 0;
    if (insecure && (have_file || env_value != NULL)) {
        gv_log(GV_LOG_ERROR, "auth: --insecure given together with a secret (%s); pick one",
               have_file ? "--secret-file" : "GV_SECRET");
        return GV_ERR_INVAL;
    }
    if (insecure) {
        gv_log(GV_LOG_WARN, "auth: RUNNING WITHOUT AUTHENTICATION (--insecure): anyone who can "
                            "reach the ports can join the job or feed it data");
        return GV_OK;
    }
    if (have_file) {
        if (env_value != NULL)
            gv_log(GV_LOG_WARN, "auth: both --secret-file and GV_SECRET are set; using %s", file);
        return auth_read_secret_file(file, secret);
    }
    if (env_value == NULL) {
        gv_log(GV_LOG_ERROR, "auth: no shared secret: give --secret-file FILE or set GV_SECRET "
                             "(or pass --insecure to run without authentication)");
        return GV_ERR_AUTH;
    }
    return gv_auth_secret_set(secret, env_value, strlen(env_value));
}

/* ---------------------------------------------------------------- proofs */

static void auth_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* HMAC(secret, label | version | role | rank | n1 | n2) into mac[GV_AUTH_MAC_LEN]. */
static gv_status_t auth_proof(const struct gv_auth *a, const char label[16], const uint8_t *n1,
                              const uint8_t *n2, uint8_t *mac)
{
    uint8_t msg[16 + 12 + 2 * GV_AUTH_NONCE_LEN];
    unsigned int mac_len = 0;
    memcpy(msg, label, 16);
    auth_put_be32(msg + 16, GV_AUTH_VERSION);
    auth_put_be32(msg + 20, a->role);
    auth_put_be32(msg + 24, a->rank);
    memcpy(msg + 28, n1, GV_AUTH_NONCE_LEN);
    memcpy(msg + 28 + GV_AUTH_NONCE_LEN, n2, GV_AUTH_NONCE_LEN);
    if (HMAC(EVP_sha256(), a->secret->key, (int)a->secret->len, msg, sizeof(msg), mac, &mac_len) ==
            NULL ||
        mac_len != GV_AUTH_MAC_LEN)
        return GV_ERR_IO;
    return GV_OK;
}

static gv_status_t auth_nonce(uint8_t *nonce)
{
    return RAND_bytes(nonce, GV_AUTH_NONCE_LEN) == 1 ? GV_OK : GV_ERR_IO;
}

static bool auth_all_zero(const uint8_t *p, size_t n)
{
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++)
        acc |= p[i];
    return acc == 0;
}

static gv_status_t auth_fail(struct gv_auth *a, gv_status_t status, uint32_t code, const char *fmt,
                             ...) __attribute__((format(printf, 4, 5)));

static gv_status_t auth_fail(struct gv_auth *a, gv_status_t status, uint32_t code, const char *fmt,
                             ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->reason, sizeof(a->reason), fmt, ap);
    va_end(ap);
    a->state = GV_AUTH_ST_FAILED;
    a->refuse_code = code;
    return status;
}

static gv_status_t auth_wrong_state(struct gv_auth *a, const char *msg)
{
    if (a->state == GV_AUTH_ST_FAILED)
        return GV_ERR_PROTO; /* keep the first reason */
    return auth_fail(a, GV_ERR_PROTO, GV_AUTH_REFUSE_PROTOCOL, "%s received in state %s", msg,
                     gv_auth_state_str(a->state));
}

/* Checks a received nonce field: the right length and not all zero. */
static gv_status_t auth_check_nonce(struct gv_auth *a, const char *msg, const uint8_t *nonce,
                                    uint32_t len)
{
    if (len != GV_AUTH_NONCE_LEN)
        return auth_fail(a, GV_ERR_PROTO, GV_AUTH_REFUSE_PROTOCOL,
                         "%s nonce is %u bytes, expected %u", msg, len, GV_AUTH_NONCE_LEN);
    if (auth_all_zero(nonce, GV_AUTH_NONCE_LEN))
        return auth_fail(a, GV_ERR_PROTO, GV_AUTH_REFUSE_PROTOCOL, "%s nonce is all zero", msg);
    return GV_OK;
}

/* Checks a received proof against the expected MAC. Without a secret on this side, the peer's
 * proof must be empty; with one, it must be there and match. */
static gv_status_t auth_check_proof(struct gv_auth *a, const char *peer, const uint8_t *proof,
                                    uint32_t len, const uint8_t *want)
{
    bool secured = a->secret->len > 0;
    if (!secured && len != 0)
        return auth_fail(a, GV_ERR_AUTH, GV_AUTH_REFUSE_AUTH,
                         "the %s has a secret but this side runs without one (--insecure)", peer);
    if (!secured)
        return GV_OK;
    if (len == 0)
        return auth_fail(a, GV_ERR_AUTH, GV_AUTH_REFUSE_AUTH,
                         "the %s runs without a secret (--insecure) but this side has one", peer);
    if (len != GV_AUTH_MAC_LEN)
        return auth_fail(a, GV_ERR_PROTO, GV_AUTH_REFUSE_PROTOCOL,
                         "the %s's proof is %u bytes, expected %u", peer, len, GV_AUTH_MAC_LEN);
    if (CRYPTO_memcmp(proof, want, GV_AUTH_MAC_LEN) != 0)
        return auth_fail(a, GV_ERR_AUTH, GV_AUTH_REFUSE_AUTH,
                         "the %s's proof does not verify: it holds another secret", peer);
    return GV_OK;
}

/* ---------------------------------------------------------------- client */

void gv_auth_client_init(struct gv_auth *a, const struct gv_auth_secret *secret, uint32_t role,
                         uint32_t rank)
{
    memset(a, 0, sizeof(*a));
    a->secret = secret;
    a->role = role;
    a->rank = rank;
}

gv_status_t gv_auth_client_hello(struct gv_auth *a, struct gv_auth_hello *hello)
{
    if (a->is_server || a->state != GV_AUTH_ST_INIT)
        return auth_wrong_state(a, "hello request");
    if (auth_nonce(a->nonce_c) != GV_OK)
        return auth_fail(a, GV_ERR_IO, GV_AUTH_REFUSE_PROTOCOL, "RAND_bytes failed");
    memset(hello, 0, sizeof(*hello));
    hello->version = GV_AUTH_VERSION;
    hello->role = a->role;
    hello->rank = a->rank;
    memcpy(hello->nonce, a->nonce_c, GV_AUTH_NONCE_LEN);
    hello->nonce_len = GV_AUTH_NONCE_LEN;
    a->state = GV_AUTH_ST_WAIT_CHALLENGE;
    return GV_OK;
}

gv_status_t gv_auth_client_on_challenge(struct gv_auth *a, const struct gv_auth_challenge *ch,
                                        struct gv_auth_auth *auth)
{
    uint8_t want[GV_AUTH_MAC_LEN], mine[GV_AUTH_MAC_LEN];
    gv_status_t status;
    if (a->is_server || a->state != GV_AUTH_ST_WAIT_CHALLENGE)
        return auth_wrong_state(a, "CHALLENGE");
    if (ch->version != GV_AUTH_VERSION)
        return auth_fail(a, GV_ERR_VERSION, GV_AUTH_REFUSE_VERSION,
                         "the server speaks handshake version %u, this client %u", ch->version,
                         GV_AUTH_VERSION);
    status = auth_check_nonce(a, "CHALLENGE", ch->nonce, ch->nonce_len);
    if (status != GV_OK)
        return status;
    if (memcmp(ch->nonce, a->nonce_c, GV_AUTH_NONCE_LEN) == 0)
        return auth_fail(a, GV_ERR_PROTO, GV_AUTH_REFUSE_PROTOCOL,
                         "CHALLENGE nonce repeats this client's nonce (reflection)");
    memcpy(a->nonce_s, ch->nonce, GV_AUTH_NONCE_LEN);
    if (a->secret->len > 0 && auth_proof(a, auth_label_server, a->nonce_c, a->nonce_s, want))
        return auth_fail(a, GV_ERR_IO, GV_AUTH_REFUSE_PROTOCOL, "HMAC failed");
    status = auth_check_proof(a, "server", ch->proof, ch->proof_len, want);
    if (status != GV_OK)
        return status;
    memset(auth, 0, sizeof(*auth));
    if (a->secret->len > 0) {
        if (auth_proof(a, auth_label_client, a->nonce_s, a->nonce_c, mine) != GV_OK)
            return auth_fail(a, GV_ERR_IO, GV_AUTH_REFUSE_PROTOCOL, "HMAC failed");
        memcpy(auth->proof, mine, GV_AUTH_MAC_LEN);
        auth->proof_len = GV_AUTH_MAC_LEN;
    }
    a->state = GV_AUTH_ST_WAIT_RESULT;
    return GV_OK;
}

gv_status_t gv_auth_client_on_welcome(struct gv_auth *a, const struct gv_auth_welcome *w)
{
    if (a->is_server || a->state != GV_AUTH_ST_WAIT_RESULT)
        return auth_wrong_state(a, "WELCOME");
    if (w->version != GV_AUTH_VERSION)
        return auth_fail(a, GV_ERR_VERSION, GV_AUTH_REFUSE_VERSION,
                         "WELCOME names handshake version %u, this client speaks %u", w->version,
                         GV_AUTH_VERSION);
    a->state = GV_AUTH_ST_DONE;
    return GV_OK;
}

/* ---------------------------------------------------------------- server */

void gv_auth_server_init(struct gv_auth *a, const struct gv_auth_secret *secret,
                         uint32_t accept_roles, uint32_t max_rank)
{
    memset(a, 0, sizeof(*a));
    a->is_server = true;
    a->secret = secret;
    a->accept_roles = accept_roles;
    a->max_rank = max_rank;
}

gv_status_t gv_auth_server_on_hello(struct gv_auth *a, const struct gv_auth_hello *hello,
                                    struct gv_auth_challenge *ch)
{
    uint8_t proof[GV_AUTH_MAC_LEN];
    if (!a->is_server || a->state != GV_AUTH_ST_INIT)
        return auth_wrong_state(a, "HELLO");
    if (hello->version != GV_AUTH_VERSION)
        return auth_fail(a, GV_ERR_VERSION, GV_AUTH_REFUSE_VERSION,
                         "the client speaks handshake version %u, this server %u", hello->version,
                         GV_AUTH_VERSION);
    gv_status_t status = auth_check_nonce(a, "HELLO", hello->nonce, hello->nonce_len);
    if (status != GV_OK)
        return status;
    bool role_ok = hello->role >= GV_AUTH_ROLE_WORKER && hello->role <= GV_AUTH_ROLE_TOOL &&
                   (a->accept_roles == 0 || (a->accept_roles & (1u << hello->role)));
    if (!role_ok)
        return auth_fail(a, GV_ERR_AUTH, GV_AUTH_REFUSE_PEER, "role %u (%s) is not accepted here",
                         hello->role, gv_auth_role_str(hello->role));
    if (hello->rank > a->max_rank)
        return auth_fail(a, GV_ERR_AUTH, GV_AUTH_REFUSE_PEER,
                         "%s rank %u is out of range (0 to %u)", gv_auth_role_str(hello->role),
                         hello->rank, a->max_rank);
    a->role = hello->role;
    a->rank = hello->rank;
    memcpy(a->nonce_c, hello->nonce, GV_AUTH_NONCE_LEN);
    if (auth_nonce(a->nonce_s) != GV_OK)
        return auth_fail(a, GV_ERR_IO, GV_AUTH_REFUSE_PROTOCOL, "RAND_bytes failed");
    memset(ch, 0, sizeof(*ch));
    if (a->secret->len > 0) {
        if (auth_proof(a, auth_label_server, a->nonce_c, a->nonce_s, proof) != GV_OK)
            return auth_fail(a, GV_ERR_IO, GV_AUTH_REFUSE_PROTOCOL, "HMAC failed");
        memcpy(ch->proof, proof, GV_AUTH_MAC_LEN);
        ch->proof_len = GV_AUTH_MAC_LEN;
    }
    ch->version = GV_AUTH_VERSION;
    memcpy(ch->nonce, a->nonce_s, GV_AUTH_NONCE_LEN);
    ch->nonce_len = GV_AUTH_NONCE_LEN;
    a->state = GV_AUTH_ST_WAIT_AUTH;
    return GV_OK;
}

gv_status_t gv_auth_server_on_auth(struct gv_auth *a, const struct gv_auth_auth *auth,
                                   struct gv_auth_welcome *w)
{
    uint8_t want[GV_AUTH_MAC_LEN];
    if (!a->is_server || a->state != GV_AUTH_ST_WAIT_AUTH)
        return auth_wrong_state(a, "AUTH");
    if (a->secret->len > 0 && auth_proof(a, auth_label_client, a->nonce_s, a->nonce_c, want))
        return auth_fail(a, GV_ERR_IO, GV_AUTH_REFUSE_PROTOCOL, "HMAC failed");
    char peer[48];
    snprintf(peer, sizeof(peer), "client (%s %u)", gv_auth_role_str(a->role), a->rank);
    gv_status_t status = auth_check_proof(a, peer, auth->proof, auth->proof_len, want);
    if (status != GV_OK)
        return status;
    memset(w, 0, sizeof(*w));
    w->version = GV_AUTH_VERSION;
    a->state = GV_AUTH_ST_DONE;
    return GV_OK;
}

/* ---------------------------------------------------------------- either side */

static const char *auth_code_str(uint32_t code)
{
    switch (code) {
    case GV_AUTH_REFUSE_AUTH: return "authentication failed";
    case GV_AUTH_REFUSE_VERSION: return "handshake version mismatch";
    case GV_AUTH_REFUSE_PROTOCOL: return "protocol violation";
    case GV_AUTH_REFUSE_PEER: return "role or rank not accepted";
    }
    return "refused";
}

gv_status_t gv_auth_on_refuse(struct gv_auth *a, const struct gv_auth_refuse *r)
{
    char text[GV_AUTH_REASON_MAX];
    size_t j = 0;
    for (size_t i = 0; i < sizeof(r->reason) && r->reason[i] != '\0'; i++) {
        unsigned char c = (unsigned char)r->reason[i];
        text[j++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
        if (j == sizeof(text) - 1)
            break;
    }
    text[j] = '\0';
    gv_status_t status = r->code == GV_AUTH_REFUSE_VERSION ? GV_ERR_VERSION : GV_ERR_AUTH;
    return auth_fail(a, status, r->code, "refused by the peer: %s (%s)", auth_code_str(r->code),
                     text);
}

gv_status_t gv_auth_on_unexpected(struct gv_auth *a, const char *what)
{
    return auth_wrong_state(a, what ? what : "a message");
}

void gv_auth_refuse_msg(const struct gv_auth *a, struct gv_auth_refuse *r)
{
    memset(r, 0, sizeof(*r));
    r->code = a->refuse_code ? a->refuse_code : GV_AUTH_REFUSE_PROTOCOL;
    if (r->code == GV_AUTH_REFUSE_VERSION)
        snprintf(r->reason, sizeof(r->reason), "%s: this side speaks version %u",
                 auth_code_str(r->code), GV_AUTH_VERSION);
    else
        snprintf(r->reason, sizeof(r->reason), "%s", auth_code_str(r->code));
}

const char *gv_auth_state_str(enum gv_auth_state st)
{
    switch (st) {
    case GV_AUTH_ST_INIT: return "init";
    case GV_AUTH_ST_WAIT_CHALLENGE: return "wait-challenge";
    case GV_AUTH_ST_WAIT_AUTH: return "wait-auth";
    case GV_AUTH_ST_WAIT_RESULT: return "wait-result";
    case GV_AUTH_ST_DONE: return "done";
    case GV_AUTH_ST_FAILED: return "failed";
    }
    return "?";
}

const char *gv_auth_role_str(uint32_t role)
{
    switch (role) {
    case GV_AUTH_ROLE_WORKER: return "worker";
    case GV_AUTH_ROLE_SERVER: return "server";
    case GV_AUTH_ROLE_TOOL: return "tool";
    }
    return "unknown role";
}
