/* test_auth.c: the handshake state machines and the secret loader. The proofs are recomputed
 * here with OpenSSL from the documented layout, so the test pins the format as well as the
 * behaviour: good handshakes, wrong secrets on either side, versions, order, tampering, field
 * lengths, replay, insecure mode, role and rank checks, secret files. */
#include "check.h"
#include "gv_ops.h"

#include <limits.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>
#include <unistd.h>

static const char key_a[] = "correct horse battery staple 42";
static const char key_b[] = "correct horse battery staple 43";

static int n_errors;
static char last_log[1024];

static void capture(enum gv_log_level level, const char *line, void *arg)
{
    (void)arg;
    n_errors += level == GV_LOG_ERROR;
    snprintf(last_log, sizeof(last_log), "%s", line);
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* The documented proof: HMAC-SHA256(key, label | be32 version | role | rank | n1 | n2). */
static void proof(const char *key, const char *label, uint32_t role, uint32_t rank,
                  const uint8_t *n1, const uint8_t *n2, uint8_t *out)
{
    uint8_t msg[16 + 12 + 64];
    unsigned int len = 0;
    memcpy(msg, label, 16);
    put_be32(msg + 16, GV_AUTH_VERSION);
    put_be32(msg + 20, role);
    put_be32(msg + 24, rank);
    memcpy(msg + 28, n1, 32);
    memcpy(msg + 60, n2, 32);
    HMAC(EVP_sha256(), key, (int)strlen(key), msg, sizeof(msg), out, &len);
}

static void secret(struct gv_auth_secret *s, const char *key)
{
    if (key == NULL)
        s->len = 0;
    else
        GV_CHECK_OK(gv_auth_secret_set(s, key, strlen(key)));
}

struct hs {
    struct gv_auth c, s;
    struct gv_auth_hello hello;
    struct gv_auth_challenge ch;
    struct gv_auth_auth auth;
    struct gv_auth_welcome w;
};

static void begin(struct hs *h, const struct gv_auth_secret *cs, const struct gv_auth_secret *ss,
                  uint32_t role, uint32_t rank)
{
    memset(h, 0, sizeof(*h));
    gv_auth_client_init(&h->c, cs, role, rank);
    gv_auth_server_init(&h->s, ss, 0, UINT32_MAX);
    GV_CHECK_OK(gv_auth_client_hello(&h->c, &h->hello));
}

static void test_good(void)
{
    struct gv_auth_secret sa;
    secret(&sa, key_a);
    struct hs h;
    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 3);
    GV_CHECK_EQ(h.hello.version, GV_AUTH_VERSION);
    GV_CHECK_EQ(h.hello.nonce_len, 32);
    GV_CHECK_EQ(h.c.state, GV_AUTH_ST_WAIT_CHALLENGE);
    GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
    GV_CHECK_EQ(h.s.state, GV_AUTH_ST_WAIT_AUTH);
    GV_CHECK_EQ(h.ch.proof_len, 32);
    /* the server proof is exactly the documented HMAC */
    uint8_t want[32];
    proof(key_a, "gravac-v1 server", GV_AUTH_ROLE_WORKER, 3, h.hello.nonce, h.ch.nonce, want);
    GV_CHECK(memcmp(want, h.ch.proof, 32) == 0);
    GV_CHECK_OK(gv_auth_client_on_challenge(&h.c, &h.ch, &h.auth));
    proof(key_a, "gravac-v1 client", GV_AUTH_ROLE_WORKER, 3, h.ch.nonce, h.hello.nonce, want);
    GV_CHECK_EQ(h.auth.proof_len, 32);
    GV_CHECK(memcmp(want, h.auth.proof, 32) == 0);
    GV_CHECK_OK(gv_auth_server_on_auth(&h.s, &h.auth, &h.w));
    GV_CHECK_OK(gv_auth_client_on_welcome(&h.c, &h.w));
    GV_CHECK(gv_auth_done(&h.c));
    GV_CHECK(gv_auth_done(&h.s));
    GV_CHECK_EQ(h.s.role, GV_AUTH_ROLE_WORKER);
    GV_CHECK_EQ(h.s.rank, 3);
    GV_CHECK_STREQ(h.s.reason, "");

    /* every connection gets fresh nonces */
    struct hs h2;
    begin(&h2, &sa, &sa, GV_AUTH_ROLE_WORKER, 3);
    GV_CHECK_OK(gv_auth_server_on_hello(&h2.s, &h2.hello, &h2.ch));
    GV_CHECK(memcmp(h.hello.nonce, h2.hello.nonce, 32) != 0);
    GV_CHECK(memcmp(h.ch.nonce, h2.ch.nonce, 32) != 0);
    GV_CHECK(memcmp(h.ch.proof, h2.ch.proof, 32) != 0);

    /* the other roles, and a server limited to workers with ranks 0..7 */
    struct hs h3;
    begin(&h3, &sa, &sa, GV_AUTH_ROLE_SERVER, 0);
    gv_auth_server_init(&h3.s, &sa, 1u << GV_AUTH_ROLE_SERVER, 0);
    GV_CHECK_OK(gv_auth_server_on_hello(&h3.s, &h3.hello, &h3.ch));
    GV_CHECK_OK(gv_auth_client_on_challenge(&h3.c, &h3.ch, &h3.auth));
    GV_CHECK_OK(gv_auth_server_on_auth(&h3.s, &h3.auth, &h3.w));
    gv_auth_secret_clear(&sa);
    GV_CHECK_EQ(sa.len, 0);
}

static void test_insecure(void)
{
    struct gv_auth_secret none = {.len = 0}, sa;
    secret(&sa, key_a);
    struct hs h;
    begin(&h, &none, &none, GV_AUTH_ROLE_WORKER, 0);
    GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
    GV_CHECK_EQ(h.ch.proof_len, 0);
    GV_CHECK_OK(gv_auth_client_on_challenge(&h.c, &h.ch, &h.auth));
    GV_CHECK_EQ(h.auth.proof_len, 0);
    GV_CHECK_OK(gv_auth_server_on_auth(&h.s, &h.auth, &h.w));
    GV_CHECK_OK(gv_auth_client_on_welcome(&h.c, &h.w));

    /* no downgrade: a client with a secret refuses an insecure server */
    begin(&h, &sa, &none, GV_AUTH_ROLE_WORKER, 0);
    GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
    GV_CHECK_STATUS(gv_auth_client_on_challenge(&h.c, &h.ch, &h.auth), GV_ERR_AUTH);
    GV_CHECK_STREQ(h.c.reason, "the server runs without a secret (--insecure) but this side has "
                               "one");
    /* an insecure client meets a server with a secret: it refuses, and so would the server */
    begin(&h, &none, &sa, GV_AUTH_ROLE_WORKER, 0);
    GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
    GV_CHECK_STATUS(gv_auth_client_on_challenge(&h.c, &h.ch, &h.auth), GV_ERR_AUTH);
    GV_CHECK_STREQ(h.c.reason, "the server has a secret but this side runs without one "
                               "(--insecure)");
    h.auth.proof_len = 0;
    GV_CHECK_STATUS(gv_auth_server_on_auth(&h.s, &h.auth, &h.w), GV_ERR_AUTH);
    GV_CHECK_STREQ(h.s.reason, "the client (worker 0) runs without a secret (--insecure) but this "
                               "side has one");
    GV_CHECK(!gv_auth_done(&h.s));
}

static void test_wrong_secret(void)
{
    struct gv_auth_secret sa, sb;
    secret(&sa, key_a);
    secret(&sb, key_b);
    struct hs h;
    struct gv_auth_refuse r;

    /* the client has another secret: it refuses the server's proof and sends no AUTH */
    begin(&h, &sb, &sa, GV_AUTH_ROLE_WORKER, 1);
    GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
    memset(&h.auth, 0xee, sizeof(h.auth));
    GV_CHECK_STATUS(gv_auth_client_on_challenge(&h.c, &h.ch, &h.auth), GV_ERR_AUTH);
    GV_CHECK_EQ(h.c.state, GV_AUTH_ST_FAILED);
    GV_CHECK_STREQ(h.c.reason, "the server's proof does not verify: it holds another secret");
    GV_CHECK_EQ(h.auth.proof_len, 0xeeeeeeeeu); /* untouched */
    gv_auth_refuse_msg(&h.c, &r);
    GV_CHECK_EQ(r.code, GV_AUTH_REFUSE_AUTH);
    GV_CHECK_STREQ(r.reason, "authentication failed");
    GV_CHECK_STATUS(gv_auth_on_refuse(&h.s, &r), GV_ERR_AUTH);
    GV_CHECK_EQ(h.s.state, GV_AUTH_ST_FAILED);
    GV_CHECK_STREQ(h.s.reason, "refused by the peer: authentication failed (authentication "
                               "failed)");

    /* a client that skips the check and answers with a proof made from another secret */
    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 1);
    GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
    h.auth.proof_len = 32;
    proof(key_b, "gravac-v1 client", GV_AUTH_ROLE_WORKER, 1, h.ch.nonce, h.hello.nonce,
          h.auth.proof);
    GV_CHECK_STATUS(gv_auth_server_on_auth(&h.s, &h.auth, &h.w), GV_ERR_AUTH);
    GV_CHECK_STREQ(h.s.reason, "the client (worker 1)'s proof does not verify: it holds another "
                               "secret");
    GV_CHECK_EQ(h.s.refuse_code, GV_AUTH_REFUSE_AUTH);
    GV_CHECK(!gv_auth_done(&h.s));
    /* nor does the server's own proof, reflected back, pass as a client proof */
    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 1);
    GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
    memcpy(h.auth.proof, h.ch.proof, 32);
    h.auth.proof_len = 32;
    GV_CHECK_STATUS(gv_auth_server_on_auth(&h.s, &h.auth, &h.w), GV_ERR_AUTH);
    /* a proof with the right secret but the client nonce and server nonce swapped */
    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 1);
    GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
    proof(key_a, "gravac-v1 client", GV_AUTH_ROLE_WORKER, 1, h.hello.nonce, h.ch.nonce,
          h.auth.proof);
    h.auth.proof_len = 32;
    GV_CHECK_STATUS(gv_auth_server_on_auth(&h.s, &h.auth, &h.w), GV_ERR_AUTH);
}

static void test_versions(void)
{
    struct gv_auth_secret sa;
    secret(&sa, key_a);
    struct hs h;
    struct gv_auth_refuse r;
    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 0);
    h.hello.version = 2;
    GV_CHECK_STATUS(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch), GV_ERR_VERSION);
    GV_CHECK_STREQ(h.s.reason, "the client speaks handshake version 2, this server 1");
    gv_auth_refuse_msg(&h.s, &r);
    GV_CHECK_EQ(r.code, GV_AUTH_REFUSE_VERSION);
    GV_CHECK_STREQ(r.reason, "handshake version mismatch: this side speaks version 1");
    GV_CHECK_STATUS(gv_auth_on_refuse(&h.c, &r), GV_ERR_VERSION);
    GV_CHECK_STREQ(h.c.reason, "refused by the peer: handshake version mismatch (handshake "
                               "version mismatch: this side speaks version 1)");

    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 0);
    GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
    h.ch.version = 0;
    GV_CHECK_STATUS(gv_auth_client_on_challenge(&h.c, &h.ch, &h.auth), GV_ERR_VERSION);
    GV_CHECK_STREQ(h.c.reason, "the server speaks handshake version 0, this client 1");

    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 0);
    GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
    GV_CHECK_OK(gv_auth_client_on_challenge(&h.c, &h.ch, &h.auth));
    GV_CHECK_OK(gv_auth_server_on_auth(&h.s, &h.auth, &h.w));
    h.w.version = 9;
    GV_CHECK_STATUS(gv_auth_client_on_welcome(&h.c, &h.w), GV_ERR_VERSION);
    GV_CHECK(!gv_auth_done(&h.c));
}

static void test_order(void)
{
    struct gv_auth_secret sa;
    secret(&sa, key_a);
    struct hs h;
    struct gv_auth_challenge ch2;

    /* server: AUTH before HELLO, HELLO twice, anything after DONE */
    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 0);
    GV_CHECK_STATUS(gv_auth_server_on_auth(&h.s, &h.auth, &h.w), GV_ERR_PROTO);
    GV_CHECK_STREQ(h.s.reason, "AUTH received in state init");
    GV_CHECK_EQ(h.s.refuse_code, GV_AUTH_REFUSE_PROTOCOL);
    /* once failed, it stays failed and keeps the first reason */
    GV_CHECK_STATUS(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch), GV_ERR_PROTO);
    GV_CHECK_STREQ(h.s.reason, "AUTH received in state init");

    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 0);
    GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
    GV_CHECK_STATUS(gv_auth_server_on_hello(&h.s, &h.hello, &ch2), GV_ERR_PROTO);
    GV_CHECK_STREQ(h.s.reason, "HELLO received in state wait-auth");

    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 0);
    GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
    GV_CHECK_OK(gv_auth_client_on_challenge(&h.c, &h.ch, &h.auth));
    GV_CHECK_OK(gv_auth_server_on_auth(&h.s, &h.auth, &h.w));
    GV_CHECK_STATUS(gv_auth_server_on_auth(&h.s, &h.auth, &h.w), GV_ERR_PROTO);
    GV_CHECK_STREQ(h.s.reason, "AUTH received in state done");
    GV_CHECK(!gv_auth_done(&h.s));

    /* client: WELCOME before CHALLENGE, CHALLENGE twice, hello twice, a server-side call */
    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 0);
    GV_CHECK_STATUS(gv_auth_client_on_welcome(&h.c, &h.w), GV_ERR_PROTO);
    GV_CHECK_STREQ(h.c.reason, "WELCOME received in state wait-challenge");
    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 0);
    GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
    GV_CHECK_OK(gv_auth_client_on_challenge(&h.c, &h.ch, &h.auth));
    GV_CHECK_STATUS(gv_auth_client_on_challenge(&h.c, &h.ch, &h.auth), GV_ERR_PROTO);
    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 0);
    GV_CHECK_STATUS(gv_auth_client_hello(&h.c, &h.hello), GV_ERR_PROTO);
    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 0);
    GV_CHECK_STATUS(gv_auth_server_on_hello(&h.c, &h.hello, &h.ch), GV_ERR_PROTO);
    GV_CHECK_STATUS(gv_auth_client_hello(&h.s, &h.hello), GV_ERR_PROTO);
    /* a message the caller could not place at all */
    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 0);
    GV_CHECK_STATUS(gv_auth_on_unexpected(&h.c, "DATA"), GV_ERR_PROTO);
    GV_CHECK_STREQ(h.c.reason, "DATA received in state wait-challenge");
}

static void test_tampering(void)
{
    struct gv_auth_secret sa;
    secret(&sa, key_a);
    struct hs h;
    /* a rank or role changed in transit: the server proves the changed one, the client notices */
    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 3);
    h.hello.rank = 4;
    GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
    GV_CHECK_STATUS(gv_auth_client_on_challenge(&h.c, &h.ch, &h.auth), GV_ERR_AUTH);
    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 3);
    h.hello.role = GV_AUTH_ROLE_TOOL;
    GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
    GV_CHECK_STATUS(gv_auth_client_on_challenge(&h.c, &h.ch, &h.auth), GV_ERR_AUTH);
    /* a flipped bit in the client nonce, the server nonce, either proof */
    for (int field = 0; field < 4; field++) {
        for (int bit = 0; bit < 8; bit += 7) {
            begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 3);
            if (field == 0)
                h.hello.nonce[5] ^= (uint8_t)(1 << bit);
            GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
            if (field == 1)
                h.ch.nonce[31] ^= (uint8_t)(1 << bit);
            if (field == 2)
                h.ch.proof[0] ^= (uint8_t)(1 << bit);
            gv_status_t st = gv_auth_client_on_challenge(&h.c, &h.ch, &h.auth);
            if (field < 3) {
                GV_CHECK_MSG(st == GV_ERR_AUTH, "field %d bit %d: %s", field, bit,
                             gv_status_str(st));
                continue;
            }
            GV_CHECK_OK(st);
            h.auth.proof[17] ^= (uint8_t)(1 << bit);
            GV_CHECK_STATUS(gv_auth_server_on_auth(&h.s, &h.auth, &h.w), GV_ERR_AUTH);
        }
    }
    /* the server nonce echoes the client's (a reflection) */
    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 3);
    GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
    memcpy(h.ch.nonce, h.hello.nonce, 32);
    GV_CHECK_STATUS(gv_auth_client_on_challenge(&h.c, &h.ch, &h.auth), GV_ERR_PROTO);
    GV_CHECK_STREQ(h.c.reason, "CHALLENGE nonce repeats this client's nonce (reflection)");

    /* replay: a recorded HELLO and AUTH played against a new connection */
    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 3);
    GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
    GV_CHECK_OK(gv_auth_client_on_challenge(&h.c, &h.ch, &h.auth));
    struct gv_auth s2;
    struct gv_auth_challenge ch2;
    gv_auth_server_init(&s2, &sa, 0, UINT32_MAX);
    GV_CHECK_OK(gv_auth_server_on_hello(&s2, &h.hello, &ch2));
    GV_CHECK_STATUS(gv_auth_server_on_auth(&s2, &h.auth, &h.w), GV_ERR_AUTH);
}

static void test_lengths(void)
{
    struct gv_auth_secret sa;
    secret(&sa, key_a);
    struct hs h;
    static const uint32_t bad[] = {0, 1, 16, 31, 33, 64, 65, 1000, UINT32_MAX};
    for (size_t i = 0; i < GV_ARRAY_LEN(bad); i++) {
        char want[96];
        begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 0);
        h.hello.nonce_len = bad[i];
        GV_CHECK_STATUS(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch), GV_ERR_PROTO);
        snprintf(want, sizeof(want), "HELLO nonce is %u bytes, expected 32", bad[i]);
        GV_CHECK_STREQ(h.s.reason, want);

        begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 0);
        GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
        h.ch.nonce_len = bad[i];
        GV_CHECK_STATUS(gv_auth_client_on_challenge(&h.c, &h.ch, &h.auth), GV_ERR_PROTO);

        if (bad[i] == 0)
            continue; /* an empty proof means "no secret", tested in test_insecure */
        begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 0);
        GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
        h.ch.proof_len = bad[i];
        GV_CHECK_STATUS(gv_auth_client_on_challenge(&h.c, &h.ch, &h.auth), GV_ERR_PROTO);
        snprintf(want, sizeof(want), "the server's proof is %u bytes, expected 32", bad[i]);
        GV_CHECK_STREQ(h.c.reason, want);

        begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 0);
        GV_CHECK_OK(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch));
        GV_CHECK_OK(gv_auth_client_on_challenge(&h.c, &h.ch, &h.auth));
        h.auth.proof_len = bad[i];
        GV_CHECK_STATUS(gv_auth_server_on_auth(&h.s, &h.auth, &h.w), GV_ERR_PROTO);
    }
    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 0);
    memset(h.hello.nonce, 0, sizeof(h.hello.nonce));
    GV_CHECK_STATUS(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch), GV_ERR_PROTO);
    GV_CHECK_STREQ(h.s.reason, "HELLO nonce is all zero");
}

static void test_roles(void)
{
    struct gv_auth_secret sa;
    secret(&sa, key_a);
    struct hs h;
    struct gv_auth_refuse r;
    begin(&h, &sa, &sa, GV_AUTH_ROLE_TOOL, 0);
    gv_auth_server_init(&h.s, &sa, 1u << GV_AUTH_ROLE_WORKER, 7);
    GV_CHECK_STATUS(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch), GV_ERR_AUTH);
    GV_CHECK_STREQ(h.s.reason, "role 3 (tool) is not accepted here");
    gv_auth_refuse_msg(&h.s, &r);
    GV_CHECK_EQ(r.code, GV_AUTH_REFUSE_PEER);
    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 8);
    gv_auth_server_init(&h.s, &sa, 1u << GV_AUTH_ROLE_WORKER, 7);
    GV_CHECK_STATUS(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch), GV_ERR_AUTH);
    GV_CHECK_STREQ(h.s.reason, "worker rank 8 is out of range (0 to 7)");
    for (uint32_t role = 0; role < 40; role += 4) {
        begin(&h, &sa, &sa, role, 0);
        GV_CHECK_STATUS(gv_auth_server_on_hello(&h.s, &h.hello, &h.ch), GV_ERR_AUTH);
    }
    /* a refuse with no NUL and control bytes is sanitised and bounded */
    memset(&r, 'A', sizeof(r));
    r.code = 77;
    r.reason[3] = '\n';
    r.reason[4] = (char)0xff;
    begin(&h, &sa, &sa, GV_AUTH_ROLE_WORKER, 0);
    GV_CHECK_STATUS(gv_auth_on_refuse(&h.c, &r), GV_ERR_AUTH);
    GV_CHECK(strncmp(h.c.reason, "refused by the peer: refused (AAA??AAA", 38) == 0);
    GV_CHECK(strlen(h.c.reason) < sizeof(h.c.reason));
    GV_CHECK(strchr(h.c.reason, '\n') == NULL);
}

static char tmpdir[] = "/tmp/gv_test_auth_XXXXXX";

static const char *secret_file(const char *name, const char *text, size_t len, mode_t mode)
{
    static char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return NULL;
    fwrite(text, 1, len, f);
    fclose(f);
    chmod(path, mode);
    return path;
}

static void test_secret_load(void)
{
    struct gv_auth_secret s;
    const char *p = secret_file("ok", "0123456789abcdef0123\n", 21, 0600);
    n_errors = 0;
    GV_CHECK_OK(gv_auth_secret_load(p, NULL, false, &s));
    GV_CHECK_EQ(s.len, 20);
    GV_CHECK(memcmp(s.key, "0123456789abcdef0123", 20) == 0);
    p = secret_file("crlf", "0123456789abcdef\r\n", 18, 0400);
    GV_CHECK_OK(gv_auth_secret_load(p, NULL, false, &s));
    GV_CHECK_EQ(s.len, 16);
    /* the file wins over GV_SECRET, with a warning */
    GV_CHECK_OK(gv_auth_secret_load(p, "ffffffffffffffffffffffff", false, &s));
    GV_CHECK_EQ(s.len, 16);
    GV_CHECK(strstr(last_log, "both --secret-file and GV_SECRET") != NULL);
    GV_CHECK_OK(gv_auth_secret_load("", "ffffffffffffffffffffffff", false, &s));
    GV_CHECK_EQ(s.len, 24);
    GV_CHECK_OK(gv_auth_secret_load(NULL, "ffffffffffffffffffffffff", false, &s));
    GV_CHECK_EQ(n_errors, 0);

    struct {
        const char *name, *text;
        mode_t mode;
        gv_status_t want;
        const char *log;
    } bad[] = {
        {"world", "0123456789abcdef0123", 0644, GV_ERR_AUTH, "has mode 0644: group or others"},
        {"group", "0123456789abcdef0123", 0640, GV_ERR_AUTH, "chmod 600 it"},
        {"gw", "0123456789abcdef0123", 0620, GV_ERR_AUTH, "has mode 0620"},
        {"empty", "", 0600, GV_ERR_AUTH, "is empty"},
        {"nl", "\n", 0600, GV_ERR_AUTH, "is empty"},
        {"short", "0123456789abcde", 0600, GV_ERR_AUTH, "is 15 bytes; a secret has 16 to 4096"},
    };
    for (size_t i = 0; i < GV_ARRAY_LEN(bad); i++) {
        p = secret_file(bad[i].name, bad[i].text, strlen(bad[i].text), bad[i].mode);
        n_errors = 0;
        s.len = 99;
        GV_CHECK_STATUS(gv_auth_secret_load(p, NULL, false, &s), bad[i].want);
        GV_CHECK_MSG(strstr(last_log, bad[i].log) != NULL, "%s: log '%s'", bad[i].name, last_log);
        GV_CHECK_EQ(n_errors, 1);
        GV_CHECK_EQ(s.len, 0);
    }
    static char big[GV_AUTH_SECRET_MAX + 100];
    memset(big, 'k', sizeof(big));
    p = secret_file("long", big, GV_AUTH_SECRET_MAX + 1, 0600);
    GV_CHECK_STATUS(gv_auth_secret_load(p, NULL, false, &s), GV_ERR_AUTH);
    GV_CHECK(strstr(last_log, "is 4097 bytes") != NULL);
    p = secret_file("max", big, GV_AUTH_SECRET_MAX, 0600);
    GV_CHECK_OK(gv_auth_secret_load(p, NULL, false, &s));
    GV_CHECK_EQ(s.len, GV_AUTH_SECRET_MAX);
    p = secret_file("huge", big, sizeof(big), 0600);
    GV_CHECK_STATUS(gv_auth_secret_load(p, NULL, false, &s), GV_ERR_AUTH);

    char missing[PATH_MAX];
    snprintf(missing, sizeof(missing), "%s/missing", tmpdir);
    GV_CHECK_STATUS(gv_auth_secret_load(missing, NULL, false, &s), GV_ERR_IO);
    GV_CHECK(strstr(last_log, "No such file or directory") != NULL);
    GV_CHECK_STATUS(gv_auth_secret_load(tmpdir, NULL, false, &s), GV_ERR_IO);
    GV_CHECK(strstr(last_log, "not a regular file") != NULL);
    char fifo[PATH_MAX];
    snprintf(fifo, sizeof(fifo), "%s/fifo", tmpdir);
    GV_CHECK(mkfifo(fifo, 0600) == 0);
    last_log[0] = '\0';
    GV_CHECK_STATUS(gv_auth_secret_load(fifo, NULL, false, &s), GV_ERR_IO);
    GV_CHECK(strstr(last_log, "not a regular file") != NULL);

    GV_CHECK_STATUS(gv_auth_secret_load(NULL, "", false, &s), GV_ERR_AUTH);
    GV_CHECK(strstr(last_log, "is empty") != NULL);
    GV_CHECK_STATUS(gv_auth_secret_load(NULL, "short", false, &s), GV_ERR_AUTH);
    GV_CHECK_STATUS(gv_auth_secret_load(NULL, NULL, false, &s), GV_ERR_AUTH);
    GV_CHECK(strstr(last_log, "no shared secret") != NULL);
    GV_CHECK_STATUS(gv_auth_secret_load(NULL, "ffffffffffffffffffffffff", true, &s), GV_ERR_INVAL);
    n_errors = 0;
    GV_CHECK_OK(gv_auth_secret_load(NULL, NULL, true, &s));
    GV_CHECK_EQ(s.len, 0);
    GV_CHECK(strstr(last_log, "RUNNING WITHOUT AUTHENTICATION") != NULL);
    GV_CHECK_EQ(n_errors, 0);
    GV_CHECK_STATUS(gv_auth_secret_set(&s, "abc", 3), GV_ERR_AUTH);
}

int main(void)
{
    if (mkdtemp(tmpdir) == NULL)
        GV_SKIP("mkdtemp failed");
    gv_log_set_cb(capture, NULL);
    test_good();
    test_insecure();
    test_wrong_secret();
    test_versions();
    test_order();
    test_tampering();
    test_lengths();
    test_roles();
    test_secret_load();
    gv_log_set_cb(NULL, NULL);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return gv_check_summary();
}
