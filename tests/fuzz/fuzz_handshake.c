/* fuzz_handshake.c: libFuzzer target for the handshake as it arrives off the wire. The input's
 * first byte picks the set-up (bit 0: the server holds a secret; bit 1: the client does; bit 2:
 * the server is rank 1, which accepts workers only); the rest is cut into frames (24-byte
 * prefix, header as the prefix says; a frame with a payload ends the stream, as the server
 * refuses payloads before the handshake), each decoded by proto/ and fed to server/'s accepting
 * state machine and to its connecting one, exactly as server_peer.c and the worker do.
 * Invariants (abort on violation):
 *  - with a secret on the server side, no input completes the server's handshake, and with
 *    one on the client side, none completes the client's: a proof needs the secret over a
 *    nonce drawn fresh for this run;
 *  - whatever a machine answers (CHALLENGE, AUTH, REFUSE) encodes, and a REFUSE has a known
 *    code and a text within the cap;
 *  - once refused or failed, a machine stays so.
 * Every run also completes one genuine handshake between the two machines (same secret) as a
 * check that the harness drives them correctly. */
#include "gv_ps.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Refusals and decode errors are the expected outcome of most inputs: not logged. */
static void quiet(enum gv_log_level level, const char *line, void *arg)
{
    (void)level, (void)line, (void)arg;
}

static const char key[] = "fuzz-handshake-secret-0123456789";

static void must_encode(const struct gv_proto_msg *m, const struct gv_proto_caps *caps)
{
    uint8_t buf[4096];
    size_t len;
    if (gv_proto_encode(m, caps, buf, sizeof(buf), &len) != GV_OK)
        abort();
    if (m->type == GV_PROTO_MSG_REFUSE &&
        (m->u.refuse.code <= GV_PROTO_REFUSE_NONE || m->u.refuse.code > GV_PROTO_REFUSE_OTHER ||
         m->u.refuse.text == NULL || strlen(m->u.refuse.text) > caps->max_text_len))
        abort();
}

static const struct gv_ps_server_hs_cfg *hs_cfg(bool rank1, const struct gv_auth_secret *sec)
{
    static struct gv_ps_server_hs_cfg cfg;
    cfg = (struct gv_ps_server_hs_cfg){.rank = rank1 ? 1 : 0,
                                       .num_workers = 2,
                                       .num_servers = 2,
                                       .cluster_id = "gravac",
                                       .secret = sec};
    return &cfg;
}

/* The two machines against each other, through the encoder and decoder. */
static void genuine(const struct gv_auth_secret *sec, const struct gv_proto_caps *caps,
                    struct gv_proto_arena *arena)
{
    struct gv_ps_client_hs c;
    struct gv_ps_server_hs s;
    struct gv_ps_hello_info info = {.role = GV_PROTO_ROLE_WORKER,
                                    .rank = 1,
                                    .num_workers = 2,
                                    .num_servers = 2,
                                    .cluster_id = "gravac",
                                    .secret = sec};
    struct gv_proto_msg m, out, dec;
    uint8_t buf[4096];
    size_t len;
    bool have;
    gv_ps_server_hs_init(&s, sec);
    if (gv_ps_client_hs_begin(&c, &info, &m) != GV_OK)
        abort();
    for (int step = 0; step < 2; step++) {
        if (gv_proto_encode(&m, caps, buf, sizeof(buf), &len) != GV_OK)
            abort();
        gv_proto_arena_reset(arena);
        if (gv_proto_decode(buf, len, caps, arena, &dec) != GV_OK)
            abort();
        enum gv_ps_hs_result r = gv_ps_server_hs_on_msg(&s, hs_cfg(false, sec), &dec, &out);
        if (step == 1) {
            if (r != GV_PS_HS_JOINED)
                abort();
            break;
        }
        if (r != GV_PS_HS_REPLY || gv_proto_encode(&out, caps, buf, sizeof(buf), &len) != GV_OK)
            abort();
        gv_proto_arena_reset(arena);
        if (gv_proto_decode(buf, len, caps, arena, &dec) != GV_OK ||
            gv_ps_client_hs_step(&c, &dec, &m, &have) != GV_OK || !have)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct gv_proto_caps caps;
    static struct gv_proto_arena arena;
    static void *arena_buf;
    static struct gv_auth_secret with, none;
    if (arena_buf == NULL) {
        gv_log_set_cb(quiet, NULL);
        gv_proto_caps_default(&caps);
        arena_buf = malloc(gv_proto_arena_bound(&caps));
        gv_proto_arena_init(&arena, arena_buf, gv_proto_arena_bound(&caps));
        gv_auth_secret_set(&with, key, strlen(key));
    }
    if (size < 1)
        return 0;
    bool srv_secret = data[0] & 1, cli_secret = data[0] & 2, rank1 = data[0] & 4;
    const struct gv_auth_secret *ss = srv_secret ? &with : &none;
    const struct gv_auth_secret *cs = cli_secret ? &with : &none;
    genuine(&with, &caps, &arena);

    struct gv_ps_server_hs s;
    gv_ps_server_hs_init(&s, ss);
    struct gv_ps_client_hs c;
    struct gv_ps_hello_info info = {.role = GV_PROTO_ROLE_WORKER,
                                    .rank = 0,
                                    .num_workers = 2,
                                    .num_servers = 2,
                                    .cluster_id = "gravac",
                                    .secret = cs};
    struct gv_proto_msg hello;
    if (gv_ps_client_hs_begin(&c, &info, &hello) != GV_OK)
        abort();
    must_encode(&hello, &caps);
    bool s_done = false, c_done = false;
    size_t off = 1;
    while (off + GV_PROTO_PREFIX_LEN <= size && !(s_done && c_done)) {
        uint32_t hdr_len;
        uint64_t payload_len;
        if (gv_proto_parse_prefix(data + off, &caps, &hdr_len, &payload_len) != GV_OK ||
            payload_len != 0 || GV_PROTO_PREFIX_LEN + (size_t)hdr_len > size - off)
            break;
        size_t frame_len = GV_PROTO_PREFIX_LEN + hdr_len;
        struct gv_proto_msg m, out;
        gv_proto_arena_reset(&arena);
        if (gv_proto_decode(data + off, frame_len, &caps, &arena, &m) != GV_OK)
            break;
        off += frame_len;
        if (!s_done) {
            enum gv_ps_hs_result r = gv_ps_server_hs_on_msg(&s, hs_cfg(rank1, ss), &m, &out);
            if (r == GV_PS_HS_REPLY || r == GV_PS_HS_REFUSED)
                must_encode(&out, &caps);
            if (r == GV_PS_HS_JOINED && srv_secret)
                abort(); /* forged: the server accepted a proof it never saw made */
            s_done = r != GV_PS_HS_REPLY;
        }
        if (!c_done) {
            bool have = false;
            gv_status_t st = gv_ps_client_hs_step(&c, &m, &out, &have);
            if (have)
                must_encode(&out, &caps);
            if (c.state == GV_PS_CLIENT_WELCOMED && cli_secret)
                abort(); /* the client trusted a server proof the input made up */
            if ((st != GV_OK) != (c.state == GV_PS_CLIENT_FAILED))
                abort();
            c_done = c.state == GV_PS_CLIENT_FAILED || c.state == GV_PS_CLIENT_WELCOMED;
        }
    }
    return 0;
}
