/* fuzz_auth.c: libFuzzer target for the handshake state machines. An honest client and server
 * run the handshake; the input decides, for each message in transit, whether it is delivered,
 * changed (bits flipped or bytes replaced), or preceded by an injected raw message of another
 * type. Invariants, with a secret on both sides: a changed HELLO or CHALLENGE leaves neither
 * side DONE, a changed AUTH or anything injected towards the server leaves the server short of
 * DONE, and raw bytes are never accepted as anything but a WELCOME (which authenticates nothing:
 * the server proved itself in the CHALLENGE). A side with a secret never completes against one
 * without. Untouched handshakes complete on both sides. A failed side always has a reason.
 * Input: byte 0 = mode (bit 0: client has a secret, bit 1: server has one, bit 2: the server
 * accepts only workers, bit 3: the server's max rank is 0, below the client's 1), then per
 * message one control byte (low 2 bits: 0 deliver, 1 xor, 2 replace, 3 inject) and the bytes it
 * consumes. */
#include "fuzz.h"
#include "gv_ops.h"

#include <string.h>

struct fz_in {
    const uint8_t *p;
    size_t n;
};

static uint8_t fz_byte(struct fz_in *in)
{
    if (in->n == 0)
        return 0;
    in->n--;
    return *in->p++;
}

/* XORs (op 1) or overwrites (op 2) the message bytes with input bytes. */
static void fz_mangle(struct fz_in *in, void *msg, size_t size, int op)
{
    uint8_t *m = msg;
    size_t k = in->n < size ? in->n : size;
    for (size_t i = 0; i < k; i++)
        m[i] = op == 1 ? (uint8_t)(m[i] ^ in->p[i]) : in->p[i];
    in->p += k;
    in->n -= k;
}

static bool fz_eq_hello(const struct gv_auth_hello *a, const struct gv_auth_hello *b)
{
    return a->version == b->version && a->role == b->role && a->rank == b->rank &&
           a->nonce_len == b->nonce_len && memcmp(a->nonce, b->nonce, GV_AUTH_NONCE_LEN) == 0;
}

static bool fz_eq_challenge(const struct gv_auth_challenge *a, const struct gv_auth_challenge *b)
{
    return a->version == b->version && a->nonce_len == b->nonce_len &&
           memcmp(a->nonce, b->nonce, GV_AUTH_NONCE_LEN) == 0 && a->proof_len == b->proof_len &&
           memcmp(a->proof, b->proof, GV_AUTH_MAC_LEN) == 0;
}

static bool fz_eq_auth(const struct gv_auth_auth *a, const struct gv_auth_auth *b)
{
    return a->proof_len == b->proof_len && memcmp(a->proof, b->proof, GV_AUTH_MAC_LEN) == 0;
}

enum { FZ_HELLO, FZ_CHALLENGE, FZ_AUTH, FZ_WELCOME, FZ_REFUSE, FZ_N };

union fz_msg {
    struct gv_auth_hello hello;
    struct gv_auth_challenge ch;
    struct gv_auth_auth auth;
    struct gv_auth_welcome w;
    struct gv_auth_refuse r;
};

/* Delivers a message of type t to `to` (the server for HELLO and AUTH, else the client). */
static gv_status_t fz_deliver(int t, union fz_msg *m, struct gv_auth *client,
                              struct gv_auth *server, union fz_msg *reply)
{
    switch (t) {
    case FZ_HELLO: return gv_auth_server_on_hello(server, &m->hello, &reply->ch);
    case FZ_CHALLENGE: return gv_auth_client_on_challenge(client, &m->ch, &reply->auth);
    case FZ_AUTH: return gv_auth_server_on_auth(server, &m->auth, &reply->w);
    case FZ_WELCOME: return gv_auth_client_on_welcome(client, &m->w);
    default: return gv_auth_on_refuse(client, &m->r);
    }
}

static void fz_quiet(enum gv_log_level level, const char *line, void *arg)
{
    (void)level;
    (void)line;
    (void)arg;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct gv_auth_secret key, none;
    static bool init;
    if (!init) {
        gv_log_set_cb(fz_quiet, NULL);
        gv_auth_secret_set(&key, "fuzzing secret 0123456789", 25);
        init = true;
    }
    struct fz_in in = {data, size};
    uint8_t mode = fz_byte(&in);
    const struct gv_auth_secret *cs = (mode & 1) ? &key : &none, *ss = (mode & 2) ? &key : &none;
    struct gv_auth client, server;
    gv_auth_client_init(&client, cs, GV_AUTH_ROLE_WORKER, 1);
    gv_auth_server_init(&server, ss, (mode & 4) ? 1u << GV_AUTH_ROLE_WORKER : 0,
                        (mode & 8) ? 0 : UINT32_MAX);
    union fz_msg msg, reply, honest;
    bool changed[FZ_N] = {false}; /* a meaningful field of the step's message was changed */
    bool inj_server = false, inj_client = false; /* raw messages injected towards each side */
    gv_status_t status = GV_OK;
    memset(&msg, 0, sizeof(msg));
    if (gv_auth_client_hello(&client, &msg.hello) != GV_OK)
        return 0;
    for (int t = FZ_HELLO; t <= FZ_WELCOME && status == GV_OK; t++) {
        honest = msg;
        uint8_t ctl = fz_byte(&in);
        static const size_t sizes[] = {sizeof(struct gv_auth_hello),
                                       sizeof(struct gv_auth_challenge),
                                       sizeof(struct gv_auth_auth), sizeof(struct gv_auth_welcome),
                                       sizeof(struct gv_auth_refuse)};
        if ((ctl & 3) == 1 || (ctl & 3) == 2)
            fz_mangle(&in, &msg, sizes[t], ctl & 3);
        if ((ctl & 3) == 3) {
            /* an injected message of another type, made of raw bytes, arrives first */
            int other = (t + 1 + (ctl >> 2) % (FZ_N - 1)) % FZ_N;
            union fz_msg inj, junk;
            memset(&inj, 0, sizeof(inj));
            fz_mangle(&in, &inj, sizes[other], 2);
            gv_status_t st = fz_deliver(other, &inj, &client, &server, &junk);
            /* with secrets, only a WELCOME (it proves nothing: the server proved itself in the
             * CHALLENGE) can be accepted out of raw bytes */
            if (cs->len > 0 && ss->len > 0)
                FUZZ_ASSERT(st != GV_OK || other == FZ_WELCOME);
            if (other == FZ_HELLO || other == FZ_AUTH)
                inj_server = true;
            else
                inj_client = true;
        }
        switch (t) {
        case FZ_HELLO: changed[t] = !fz_eq_hello(&msg.hello, &honest.hello); break;
        case FZ_CHALLENGE: changed[t] = !fz_eq_challenge(&msg.ch, &honest.ch); break;
        case FZ_AUTH: changed[t] = !fz_eq_auth(&msg.auth, &honest.auth); break;
        default: changed[t] = msg.w.version != honest.w.version; break;
        }
        memset(&reply, 0, sizeof(reply));
        status = fz_deliver(t, &msg, &client, &server, &reply);
        msg = reply;
    }
    bool c_done = gv_auth_done(&client), s_done = gv_auth_done(&server);
    bool t_any = changed[FZ_HELLO] || changed[FZ_CHALLENGE] || changed[FZ_AUTH] ||
                 changed[FZ_WELCOME] || inj_server || inj_client;
    if (cs->len > 0 && ss->len > 0) {
        /* the server's proof covers HELLO and CHALLENGE; the client's proof covers them too and
         * is checked by the server; nothing raw gets a server to DONE */
        if (changed[FZ_HELLO] || changed[FZ_CHALLENGE])
            FUZZ_ASSERT(!c_done && !s_done);
        if (changed[FZ_AUTH] || inj_server)
            FUZZ_ASSERT(!s_done);
    }
    /* a side with a secret never completes against one without (no downgrade), even when
     * the messages are tampered with; a side without a secret has nothing to defend */
    if (cs->len > 0 && ss->len == 0)
        FUZZ_ASSERT(!c_done);
    if (ss->len > 0 && cs->len == 0)
        FUZZ_ASSERT(!s_done);
    if ((cs->len != ss->len || (mode & 8)) && !t_any)
        FUZZ_ASSERT(!c_done && !s_done);
    if (!t_any && cs->len == ss->len && !(mode & 8))
        FUZZ_ASSERT(status == GV_OK && c_done && s_done);
    FUZZ_ASSERT(client.state != GV_AUTH_ST_FAILED || client.reason[0] != '\0');
    FUZZ_ASSERT(server.state != GV_AUTH_ST_FAILED || server.reason[0] != '\0');
    FUZZ_ASSERT(memchr(client.reason, '\0', sizeof(client.reason)) != NULL);
    FUZZ_ASSERT(memchr(server.reason, '\0', sizeof(server.reason)) != NULL);
    struct gv_auth_refuse r;
    gv_auth_refuse_msg(&server, &r);
    FUZZ_ASSERT(memchr(r.reason, '\0', sizeof(r.reason)) != NULL && r.code != 0);
    return 0;
}
