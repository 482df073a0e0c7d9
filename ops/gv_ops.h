/* gv_ops.h: what an operator needs around training: configuration (option tables filled from
 * defaults, an INI file, the environment and the command line), the authentication handshake
 * (HMAC-SHA256 challenge-response as a pure state machine), checkpoint files (atomic writes,
 * verified reads), metrics (a registry rendered in the Prometheus text format, served over
 * HTTP) and liveness (dead-peer detection and the dead-worker policy, pure logic).
 * Deliberately no wire encoding (proto/ does it), no sockets except the metrics endpoint's, and
 * no clock reads: every time is an input. */
#ifndef GV_OPS_H
#define GV_OPS_H

#include "gv_common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ================================================================ configuration
 *
 * A program describes its options in static tables (struct gv_opt) whose entries point, by
 * offset, into the program's own config struct. gv_cfg_load() fills that struct from, in
 * increasing precedence:
 *   built-in default < config file < environment variable < command-line flag.
 * The config file is named by --config FILE (or --config=FILE), else by the environment
 * variable GV_CONFIG; without either, no file is read. The environment variable of option
 * "checkpoint-dir" is GV_CHECKPOINT_DIR ('-' -> '_', upper case). Flags are --name=value or
 * --name value; booleans are --name (true), --no-name (false) or --name=false.
 * The file is INI (parsed by inih): keys before any [section] and keys in [gravac] apply to
 * every program; keys in the program's own section (e.g. [server]) apply to it and win over
 * the common ones; sections of other programs (spec.other_sections) are skipped unread; any
 * other section, an unknown key or a repeated key is an error. docs/operations.md has more. */

enum gv_opt_type {
    GV_OPT_INT,      /* int */
    GV_OPT_UINT64,   /* uint64_t; a leading '-' is refused */
    GV_OPT_DOUBLE,   /* double; finite */
    GV_OPT_BOOL,     /* bool: true/false, yes/no, on/off, 1/0 (any case) */
    GV_OPT_STRING,   /* const char *, owned by the gv_cfg */
    GV_OPT_ENUM,     /* int: index of the value in choices (any case) */
    GV_OPT_SIZE,     /* uint64_t bytes: "4096", "64K", "1.5G" (K, M, G, T: powers of 1024;
                        KB, KiB, ... mean the same) */
    GV_OPT_DURATION, /* uint64_t nanoseconds: "250ms", "5s", "1.5min"; units ns, us, ms, s, min, h;
                        a bare "0" needs no unit */
    GV_OPT_ADDR,     /* struct gv_hostport: "host:port" or "[v6]:port", port 0-65535 (0 asks
                        for an ephemeral port); "" leaves it unset (host "" and port 0) */
    GV_OPT_HOSTLIST, /* struct gv_hostlist: "host:port,host:port ..." (commas and/or blanks),
                        ports 1-65535, no duplicates; "" is the empty list */
};

#define GV_OPT_RANGE 0x1u    /* min and max apply (inclusive) */
#define GV_OPT_REQUIRED 0x2u /* no default: a file, the environment or a flag must set it */
#define GV_OPT_SECRET 0x4u   /* the value is not printed by gv_cfg_print_effective */

struct gv_opt {
    const char *name; /* "checkpoint-dir": a-z, 0-9 and '-', starts with a letter, <= 48 chars;
                         not "help", "config" or "no-..." */
    enum gv_opt_type type;
    size_t offset;     /* offsetof(caller's struct, field); the field has the type above */
    const char *def;   /* default, as text parsed like any other source; NULL means "" */
    const char *help;  /* one line for --help */
    const char *group; /* heading in --help ("training", "checkpoints"); NULL: "options" */
    unsigned flags;    /* GV_OPT_* */
    double min, max;   /* with GV_OPT_RANGE: the number for INT, UINT64, DOUBLE; bytes for SIZE;
                          seconds for DURATION; the number of entries for HOSTLIST */
    const char *const *choices; /* ENUM only: NULL-terminated allowed values */
    const int *values; /* ENUM only, optional: the value stored for choices[i] (the field is
                          then an enum of the caller's); NULL stores the index i */
};

struct gv_hostport {
    char host[256]; /* name or address, without the brackets of an IPv6 literal */
    uint16_t port;
};

struct gv_hostlist {
    size_t n;
    const struct gv_hostport *v; /* [n], owned by the gv_cfg; NULL when n == 0 */
};

/* One table of options and the struct its offsets point into (borrowed, must outlive the
 * gv_cfg). A program may combine several, e.g. its own and gv_ops_common_options. */
struct gv_opt_table {
    const struct gv_opt *opts;
    size_t n;
    void *dst;
};

struct gv_cfg_spec {
    const char *program; /* "gravac-server", for the usage line */
    const char *summary; /* one line under the usage line; may be NULL */
    const char *section; /* this program's section in the file ("server"); may be NULL */
    const char *const *other_sections; /* NULL-terminated sections skipped unread; may be NULL */
    const struct gv_opt_table *tables;
    size_t n_tables;
};

enum gv_cfg_source {
    GV_CFG_SRC_UNSET = 0, /* a GV_OPT_REQUIRED option no source set (only before load) */
    GV_CFG_SRC_DEFAULT,
    GV_CFG_SRC_FILE,
    GV_CFG_SRC_ENV,
    GV_CFG_SRC_ARGV,
};

struct gv_cfg;

/* Checks the tables (names, types, choices, defaults parse and lie in range) and writes every
 * default into the destination structs. spec and everything it points to are borrowed and
 * must outlive the gv_cfg. GV_ERR_INVAL (a programming error in the tables, logged with the
 * option's name) or GV_ERR_NOMEM. */
gv_status_t gv_cfg_create(const struct gv_cfg_spec *spec, struct gv_cfg **cfg_p);

/* Reads the config file, the environment and argv (in that order, each overriding the last)
 * into the destination structs. argv[0] is the program name; envp is a NULL-terminated array
 * of "NAME=value" (pass environ), NULL for none. Call once.
 * GV_OK: done; if --help or -h was given, gv_cfg_help_requested() is true and nothing else
 * was read (the caller prints gv_cfg_print_help and exits 0).
 * GV_ERR_INVAL: an unknown flag or key, an unparsable or out-of-range value, a missing required
 * option: the first such problem is logged at ERROR and kept in gv_cfg_error(), naming the
 * option and the source. GV_ERR_IO: the config file cannot be read (also in gv_cfg_error()).
 * GV_ERR_NOMEM. On error the destination holds a mix of values: do not use it. */
gv_status_t gv_cfg_load(struct gv_cfg *cfg, int argc, char *const *argv, char *const *envp);

bool gv_cfg_help_requested(const struct gv_cfg *cfg);

/* The message of the last failure of gv_cfg_create/gv_cfg_load, "" when none. Valid until the
 * next call on cfg. */
const char *gv_cfg_error(const struct gv_cfg *cfg);

/* Prints the usage line, the precedence rule and every option, grouped, with its type,
 * default, range or choices, and environment variable. */
void gv_cfg_print_help(const struct gv_cfg *cfg, FILE *out);

/* Prints "name = value   (source)" for every option, one per line (secrets as "(hidden)"). */
void gv_cfg_print_effective(const struct gv_cfg *cfg, FILE *out);
/* The same lines through gv_log at INFO, for the start-up banner. */
void gv_cfg_log_effective(const struct gv_cfg *cfg);

/* Where option `name` got its value: *src_p, and in *where_p (optional, valid while cfg lives)
 * a description: "built-in default", "config file a.ini line 3", "environment variable GV_LR",
 * "command line". *text_p (optional) gets the value's text. GV_ERR_INVAL for an unknown name. */
gv_status_t gv_cfg_source(const struct gv_cfg *cfg, const char *name, enum gv_cfg_source *src_p,
                          const char **where_p, const char **text_p);

/* The config file that was read, or NULL. */
const char *gv_cfg_file(const struct gv_cfg *cfg);

/* Frees the strings and host lists it owns (the destination structs' pointers dangle after).
 * Accepts NULL. */
void gv_cfg_destroy(struct gv_cfg *cfg);

/* Parsers used by the tables, public for programs that take such values elsewhere.
 * Each returns GV_ERR_INVAL for text it does not accept, without logging. */
gv_status_t gv_parse_size(const char *text, uint64_t *bytes_p);
gv_status_t gv_parse_duration(const char *text, uint64_t *ns_p);
gv_status_t gv_parse_hostport(const char *text, struct gv_hostport *hp_p);

/* ---------------------------------------------------------------- options the ops blocks need
 * Ready-made tables for the server and worker programs: add them to their gv_cfg_spec. */

enum gv_dead_policy {
    GV_DEAD_ABORT = 0,    /* a dead worker ends the job with a clear error (default) */
    GV_DEAD_CONTINUE = 1, /* the survivors go on; rounds average over those that arrived */
};

/* What a checkpoint that some process could not write does to the job. */
enum gv_ckpt_fail_policy {
    GV_CKPT_FAIL_STOP = 0,     /* stop the job (exit 4): resumable from the last committed one */
    GV_CKPT_FAIL_CONTINUE = 1, /* go on, saying it cannot be resumed from after that one */
};

/* Options of both programs. */
struct gv_ops_common_cfg {
    const char *secret_file;     /* --secret-file: file holding the shared secret */
    bool insecure;               /* --insecure: run without a secret (no authentication) */
    uint64_t heartbeat_interval; /* ns, --heartbeat-interval */
    uint64_t peer_timeout;       /* ns, --peer-timeout: silent this long = dead */
    uint64_t handshake_timeout;  /* ns, --handshake-timeout */
    const char *trace;           /* --trace: the timeline (Chrome trace events); "" none */
};
extern const struct gv_opt gv_ops_common_options[];
extern const size_t gv_ops_common_options_n;

/* Server-only options. */
struct gv_ops_server_cfg {
    enum gv_dead_policy dead_worker_policy; /* --dead-worker-policy */
    int min_workers;                        /* --min-workers: under "continue", abort below this */
    const char *checkpoint_dir;             /* --checkpoint-dir: "" disables checkpoints */
    uint64_t checkpoint_every; /* --checkpoint-every: iterations between checkpoints, 0 = only
                                  on SIGTERM */
    int checkpoint_keep;       /* --checkpoint-keep: how many files to keep per shard */
    bool checkpoint_fallback;  /* --checkpoint-fallback: skip a corrupt latest file */
    enum gv_ckpt_fail_policy checkpoint_failure_policy; /* --checkpoint-failure-policy */
    struct gv_hostport metrics_addr; /* --metrics-addr: "" disables the endpoint */
};
extern const struct gv_opt gv_ops_server_options[];
extern const size_t gv_ops_server_options_n;

/* ================================================================ authentication
 *
 * Mutual HMAC-SHA256 challenge-response over a shared secret, on every connection:
 *   client -> HELLO(version, role, rank, client nonce)
 *   server -> CHALLENGE(version, server nonce, server proof)
 *   client -> AUTH(client proof)                    (after checking the server proof)
 *   server -> WELCOME or REFUSE(code, reason)
 * server proof = HMAC(secret, "gravac-v1 server" | version | role | rank | Nc | Ns)
 * client proof = HMAC(secret, "gravac-v1 client" | version | role | rank | Ns | Nc)
 * (fixed-width big-endian integers, 32-byte nonces from RAND_bytes). Either side may send
 * REFUSE instead of its next message. The structs below are the messages' fields; proto/ puts
 * them on the wire. The state machines read no clock: the caller bounds the handshake's time
 * (gv_ops_common_cfg.handshake_timeout) and closes the connection after any failure.
 * Without a secret (--insecure) the proofs are empty and not checked, and a side with a
 * secret refuses a side without one (and the reverse): there is no silent downgrade. */

#define GV_AUTH_VERSION 1u
#define GV_AUTH_NONCE_LEN 32u
#define GV_AUTH_MAC_LEN 32u
#define GV_AUTH_FIELD_MAX 64u  /* capacity of a bytes field, as in proto/ */
#define GV_AUTH_SECRET_MIN 16u /* bytes */
#define GV_AUTH_SECRET_MAX 4096u
#define GV_AUTH_REASON_MAX 128u

enum gv_auth_role {
    GV_AUTH_ROLE_WORKER = 1,
    GV_AUTH_ROLE_SERVER = 2, /* a server connecting to another server */
    GV_AUTH_ROLE_TOOL = 3,   /* a bench or admin tool */
};

enum gv_auth_refuse_code {
    GV_AUTH_REFUSE_AUTH = 1,     /* a proof did not verify, or one side has no secret */
    GV_AUTH_REFUSE_VERSION = 2,  /* the versions differ */
    GV_AUTH_REFUSE_PROTOCOL = 3, /* a malformed field or a message out of order */
    GV_AUTH_REFUSE_PEER = 4,     /* role or rank not accepted by this server */
};

struct gv_auth_hello {
    uint32_t version;
    uint32_t role; /* enum gv_auth_role */
    uint32_t rank;
    uint8_t nonce[GV_AUTH_FIELD_MAX];
    uint32_t nonce_len; /* must be GV_AUTH_NONCE_LEN */
};

struct gv_auth_challenge {
    uint32_t version;
    uint8_t nonce[GV_AUTH_FIELD_MAX];
    uint32_t nonce_len; /* GV_AUTH_NONCE_LEN */
    uint8_t proof[GV_AUTH_FIELD_MAX];
    uint32_t proof_len; /* GV_AUTH_MAC_LEN, or 0 from a server without a secret */
};

struct gv_auth_auth {
    uint8_t proof[GV_AUTH_FIELD_MAX];
    uint32_t proof_len; /* GV_AUTH_MAC_LEN, or 0 from a client without a secret */
};

struct gv_auth_welcome {
    uint32_t version;
};

struct gv_auth_refuse {
    uint32_t code;                   /* enum gv_auth_refuse_code */
    char reason[GV_AUTH_REASON_MAX]; /* NUL-terminated, printable ASCII */
};

/* The shared secret. Empty (len 0) means "insecure": authentication disabled. */
struct gv_auth_secret {
    uint8_t key[GV_AUTH_SECRET_MAX];
    size_t len;
};

/* Loads the secret: from `file` when it is non-NULL and non-empty, else from `env_value` (the
 * value of GV_SECRET, or NULL). The file must be a regular file not readable or writable by
 * group or others (else GV_ERR_AUTH: "chmod 600 it"); one trailing newline ("\n" or "\r\n")
 * is dropped. A secret shorter than GV_AUTH_SECRET_MIN or longer than GV_AUTH_SECRET_MAX bytes
 * is refused (GV_ERR_AUTH). With neither source: GV_ERR_AUTH unless `insecure`, in which case
 * *secret becomes empty and a warning is logged. With both a file and GV_SECRET, the file wins
 * (warning). `insecure` together with a secret is refused (GV_ERR_INVAL): pick one.
 * GV_ERR_IO when the file cannot be read. Errors are logged. */
gv_status_t gv_auth_secret_load(const char *file, const char *env_value, bool insecure,
                                struct gv_auth_secret *secret);
/* Sets a secret from bytes (tests, tools); same length rules. */
gv_status_t gv_auth_secret_set(struct gv_auth_secret *secret, const void *key, size_t len);
/* Wipes the key (OPENSSL_cleanse). */
void gv_auth_secret_clear(struct gv_auth_secret *secret);

enum gv_auth_state {
    GV_AUTH_ST_INIT = 0,       /* client: before hello; server: waiting for HELLO */
    GV_AUTH_ST_WAIT_CHALLENGE, /* client sent HELLO */
    GV_AUTH_ST_WAIT_AUTH,      /* server sent CHALLENGE */
    GV_AUTH_ST_WAIT_RESULT,    /* client sent AUTH */
    GV_AUTH_ST_DONE,           /* authenticated */
    GV_AUTH_ST_FAILED,         /* refused or broken: close the connection */
};

/* One connection's handshake, either side. Plain data: embed it in the connection. The secret
 * is borrowed (it must outlive the handshake). */
struct gv_auth {
    bool is_server;
    enum gv_auth_state state;
    const struct gv_auth_secret *secret;
    uint32_t role, rank;   /* client: its own; server: the peer's, from HELLO */
    uint32_t accept_roles; /* server: bit (1 << role) for each accepted role */
    uint32_t max_rank;     /* server: ranks above are refused (UINT32_MAX: any) */
    uint8_t nonce_c[GV_AUTH_NONCE_LEN];
    uint8_t nonce_s[GV_AUTH_NONCE_LEN];
    uint32_t refuse_code; /* why it failed (enum gv_auth_refuse_code), 0 if it did not */
    char reason[256];     /* for the log: what failed and why, "" if nothing did */
};

/* Client side. role/rank are bound into both proofs. */
void gv_auth_client_init(struct gv_auth *a, const struct gv_auth_secret *secret, uint32_t role,
                         uint32_t rank);
/* INIT -> WAIT_CHALLENGE: fills *hello with a fresh nonce. GV_ERR_PROTO in any other state,
 * GV_ERR_IO if the random generator fails. */
gv_status_t gv_auth_client_hello(struct gv_auth *a, struct gv_auth_hello *hello);
/* WAIT_CHALLENGE -> WAIT_RESULT: checks the server's version and proof and fills *auth.
 * Errors (state FAILED, a->reason set, *auth untouched): GV_ERR_VERSION, GV_ERR_AUTH (the proof
 * does not verify, or one side has no secret), GV_ERR_PROTO (bad lengths, wrong state, the
 * server echoed the client nonce). The caller may send gv_auth_refuse_msg() and must close. */
gv_status_t gv_auth_client_on_challenge(struct gv_auth *a, const struct gv_auth_challenge *ch,
                                        struct gv_auth_auth *auth);
/* WAIT_RESULT -> DONE. GV_ERR_VERSION if the welcome names another version, GV_ERR_PROTO in a
 * wrong state. */
gv_status_t gv_auth_client_on_welcome(struct gv_auth *a, const struct gv_auth_welcome *w);

/* Server side: one per accepted connection. accept_roles: bits (1u << GV_AUTH_ROLE_*), 0 means
 * all; max_rank: highest accepted rank (UINT32_MAX for any). */
void gv_auth_server_init(struct gv_auth *a, const struct gv_auth_secret *secret,
                         uint32_t accept_roles, uint32_t max_rank);
/* INIT -> WAIT_AUTH: checks the hello and fills *ch (fresh server nonce, server proof).
 * Errors (state FAILED, reason and refuse_code set; send gv_auth_refuse_msg() then close):
 * GV_ERR_VERSION, GV_ERR_PROTO (bad nonce length, all-zero nonce, wrong state), GV_ERR_AUTH
 * (role or rank refused), GV_ERR_IO (random generator). */
gv_status_t gv_auth_server_on_hello(struct gv_auth *a, const struct gv_auth_hello *hello,
                                    struct gv_auth_challenge *ch);
/* WAIT_AUTH -> DONE: verifies the client proof (constant time) and fills *w. Errors as above:
 * GV_ERR_AUTH (wrong proof, or a client without a secret), GV_ERR_PROTO. */
gv_status_t gv_auth_server_on_auth(struct gv_auth *a, const struct gv_auth_auth *auth,
                                   struct gv_auth_welcome *w);

/* Either side received REFUSE: state FAILED, reason = the peer's (sanitised) text. Always
 * returns GV_ERR_AUTH, or GV_ERR_VERSION for a version refusal. */
gv_status_t gv_auth_on_refuse(struct gv_auth *a, const struct gv_auth_refuse *r);
/* Either side: a message the state machine does not expect in its state (or one it cannot
 * decode); moves to FAILED and returns GV_ERR_PROTO. `what` names it for the reason. */
gv_status_t gv_auth_on_unexpected(struct gv_auth *a, const char *what);
/* The REFUSE to send after a failure: the code, and a short reason that tells the peer
 * nothing it could not see (no secret material). */
void gv_auth_refuse_msg(const struct gv_auth *a, struct gv_auth_refuse *r);
static inline bool gv_auth_done(const struct gv_auth *a)
{
    return a->state == GV_AUTH_ST_DONE;
}
const char *gv_auth_state_str(enum gv_auth_state st);
const char *gv_auth_role_str(uint32_t role);

/* ================================================================ checkpoints
 *
 * One file per checkpoint, "<dir>/shard<SSSS>-iter<IIIIIIIIIIII>.gvckpt" (decimal, zero-padded,
 * 4 and 12 digits at least), written atomically: a temporary ".tmp-..." file in the same
 * directory, write, fsync, rename over the final name, fsync the directory. Layout (all
 * integers little-endian):
 *   0  magic "GVCKPT\r\n"          8   format version u32     12 header length u32
 *   16 file length u64             24  model fingerprint u64  32 shard offset u64
 *   40 shard length u64            48  shard index u32        52 num servers u32
 *   56 iteration u64               64  section count u32      68 flags u32 (0)
 *   72 section directory: count x {name[48] NUL-padded, offset u64, length u64}
 *   section data, each starting 8-byte aligned, zero padding between
 *   last 32 bytes: SHA-256 of everything before them.
 * A reader checks the size and layout before reading data, then the SHA-256 over the whole
 * file, then the identity, and refuses anything that does not match with a message naming it. */

#define GV_CKPT_VERSION 1u
#define GV_CKPT_MAX_SECTIONS 64u
#define GV_CKPT_NAME_MAX 47u /* bytes of a section name (the field holds a NUL too) */

/* What a checkpoint belongs to. A reader refuses a file whose identity differs. */
struct gv_ckpt_ident {
    uint64_t model_fingerprint; /* hash of the model's shapes, from the caller */
    uint64_t shard_offset;      /* first parameter of the shard */
    uint64_t shard_length;      /* parameters in the shard */
    uint32_t shard_index;
    uint32_t num_servers;
};

struct gv_ckpt_section {
    const char *name; /* 1..GV_CKPT_NAME_MAX printable ASCII bytes, unique within a file */
    const void *data; /* borrowed, len bytes */
    size_t len;
};

/* Writes a checkpoint of iteration `iteration` with the given sections into dir (which must
 * exist), then deletes the older checkpoints of the same shard beyond the newest `keep`
 * (keep >= 1). Writes the final path into path_out when it is non-NULL (capacity path_len).
 * Not async-signal-safe: on SIGTERM set a flag and call it from the loop. GV_ERR_INVAL (bad
 * names, keep < 1, too many sections), GV_ERR_IO (logged with strerror; the temporary file is
 * removed and an existing checkpoint of the same name is left intact), GV_ERR_NOMEM. */
gv_status_t gv_ckpt_write(const char *dir, const struct gv_ckpt_ident *id, uint64_t iteration,
                          const struct gv_ckpt_section *sections, size_t n_sections, int keep,
                          char *path_out, size_t path_len);

/* Coordinated checkpoints: a checkpoint counts only once every process of the job has written
 * its part. gv_ckpt_write_pending writes it as "<name>.pending" (atomically, as above; nothing
 * is pruned; never loaded or counted by gv_ckpt_find_latest); gv_ckpt_commit then renames it to
 * its final name (and fsyncs the directory) and deletes the committed checkpoints of the shard
 * beyond the newest keep: only committed ones are ever pruned. gv_ckpt_discard removes the
 * pending file of `iteration` (UINT64_MAX: every pending file of the shard) and returns how
 * many it removed. Errors as gv_ckpt_write (commit: GV_ERR_IO when the rename fails). */
gv_status_t gv_ckpt_write_pending(const char *dir, const struct gv_ckpt_ident *id,
                                  uint64_t iteration, const struct gv_ckpt_section *sections,
                                  size_t n_sections, char *path_out, size_t path_len);
gv_status_t gv_ckpt_commit(const char *dir, uint32_t shard, uint64_t iteration, int keep);
int gv_ckpt_discard(const char *dir, uint32_t shard, uint64_t iteration);
/* Whether dir can hold checkpoints: a directory where a file can be created, written, synced
 * and removed. GV_ERR_INVAL with the reason in why[why_len] otherwise. */
gv_status_t gv_ckpt_dir_check(const char *dir, char *why, size_t why_len);

/* An opened and verified checkpoint. */
struct gv_ckpt;

/* Opens and verifies a file: size, layout, checksum. max_len caps the file's size (0: no cap
 * beyond what the layout allows). GV_ERR_PROTO for anything malformed or corrupt,
 * GV_ERR_VERSION for another format version, GV_ERR_IO if unreadable; logged with the path and
 * the reason. The file stays open for gv_ckpt_read_section. */
gv_status_t gv_ckpt_open(const char *path, uint64_t max_len, struct gv_ckpt **ck_p);
/* The same over bytes in memory (borrowed until gv_ckpt_close); used by the fuzz target. */
gv_status_t gv_ckpt_open_mem(const void *buf, size_t len, struct gv_ckpt **ck_p);

/* GV_OK when ck's identity equals *want, else GV_ERR_INVAL with a message naming the first
 * field that differs and both values (logged at ERROR). */
gv_status_t gv_ckpt_check_ident(const struct gv_ckpt *ck, const struct gv_ckpt_ident *want);
const struct gv_ckpt_ident *gv_ckpt_ident(const struct gv_ckpt *ck);
uint64_t gv_ckpt_iteration(const struct gv_ckpt *ck);
const char *gv_ckpt_path(const struct gv_ckpt *ck); /* "(memory)" for gv_ckpt_open_mem */
/* The sections in file order: count, and the name of section i (< count), NULL beyond. */
uint32_t gv_ckpt_section_count(const struct gv_ckpt *ck);
const char *gv_ckpt_section_name(const struct gv_ckpt *ck, uint32_t i);
/* Section lookup: GV_OK with its length, GV_ERR_INVAL if absent (not logged). */
gv_status_t gv_ckpt_section_len(const struct gv_ckpt *ck, const char *name, size_t *len_p);
/* Copies section `name` into dst, whose capacity len must equal the section's length.
 * GV_ERR_INVAL (absent, or another length: logged), GV_ERR_IO. */
gv_status_t gv_ckpt_read_section(struct gv_ckpt *ck, const char *name, void *dst, size_t len);
void gv_ckpt_close(struct gv_ckpt *ck);

/* Finds the newest checkpoint of want->shard_index in dir, opens, verifies and checks its
 * identity. GV_OK with *ck_p = NULL when there is none (fresh start). When the newest is
 * corrupt: GV_ERR_PROTO (refused loudly) unless `fallback`, which logs a warning per bad file
 * and tries the next older one. An identity or version mismatch is always refused (never
 * skipped): the directory belongs to another job. Temporary files are ignored. */
gv_status_t gv_ckpt_find_latest(const char *dir, const struct gv_ckpt_ident *want, bool fallback,
                                uint64_t max_len, struct gv_ckpt **ck_p);

/* ================================================================ metrics
 *
 * A registry of counters, gauges and summaries, each metric family optionally split by label
 * values, rendered in the Prometheus text exposition format 0.0.4. Updates and rendering take
 * one mutex; rendering holds it only while formatting into a buffer. */

enum gv_metric_type {
    GV_METRIC_COUNTER,
    GV_METRIC_GAUGE,
    GV_METRIC_SUMMARY, /* quantiles 0.5, 0.9, 0.99 over the last `window` observations, plus
                          _sum and _count over all of them */
};

#define GV_METRIC_MAX_LABELS 4

struct gv_metrics;
struct gv_metric; /* one time series (a family + label values); owned by the registry */

gv_status_t gv_metrics_create(struct gv_metrics **reg_p);
/* Frees every metric; no handle may be used after. Accepts NULL. */
void gv_metrics_destroy(struct gv_metrics *reg);

/* Returns the series `name` with the given labels, creating the family and the series on first
 * use. labels: NULL or a NULL-terminated list of name, value pairs ({"worker", "3", NULL}),
 * at most GV_METRIC_MAX_LABELS pairs. A family's type, help, label names and window are fixed
 * by its first registration; a later call that differs gets GV_ERR_INVAL. Names must match
 * [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* (not "quantile" or "__..."),
 * label values any UTF-8 (escaped when rendered). window: summaries only, 1..65536 (0: 1024).
 * The handle lives as long as the registry. Thread-safe. */
gv_status_t gv_metrics_get(struct gv_metrics *reg, enum gv_metric_type type, const char *name,
                           const char *help, const char *const *labels, uint32_t window,
                           struct gv_metric **m_p);

/* Updates (thread-safe, no allocation). Counters ignore negative or NaN increments. */
void gv_metric_inc(struct gv_metric *m, double v);     /* counter or gauge */
void gv_metric_set(struct gv_metric *m, double v);     /* gauge */
void gv_metric_observe(struct gv_metric *m, double v); /* summary */
double gv_metric_value(struct gv_metric *m);           /* counter/gauge value; summary: sum */
/* Quantile q in [0, 1] of a summary's window by nearest rank (the ceil(q*n)-th smallest);
 * GV_ERR_AGAIN when the window is empty, GV_ERR_INVAL for another type or q out of range. */
gv_status_t gv_metric_quantile(struct gv_metric *m, double q, double *v_p);

/* Renders every series into a new NUL-terminated buffer (free with gv_free), families in
 * registration order. GV_ERR_NOMEM. */
gv_status_t gv_metrics_render(struct gv_metrics *reg, char **text_p, size_t *len_p);

/* The HTTP endpoint: GET (or HEAD) /metrics answers the rendering with Content-Type
 * "text/plain; version=0.0.4; charset=utf-8"; other paths 404, other methods 405. One thread of
 * its own (libmicrohttpd driven by our loop, at nice +10) serves every connection; nothing the
 * clients do blocks the caller's threads beyond the registry lock taken to render, and the
 * page is rendered at most once per cache_ms however many clients scrape (the others get the
 * cached bytes). Slow or hostile clients are bounded three ways:
 *   - at most max_conns connections at once, at most max_conns_per_ip from one address; a new
 *     connection over either limit does not wait and is not refused: it closes the oldest
 *     connection of the address holding the most (of its own address for the per-address
 *     limit), preferring one not being answered, so a scraper always gets in;
 *   - a request must arrive complete and be answered within deadline_ms of the accept (or of
 *     the previous answer on a kept-alive connection), however steadily the client trickles
 *     bytes; otherwise the connection is closed;
 *   - libmicrohttpd's own error log goes through a rate limiter (5 lines per 10 s). */
struct gv_metrics_http;

struct gv_metrics_http_limits {
    uint32_t max_conns;        /* connections open at once (0: 32) */
    uint32_t max_conns_per_ip; /* of which from one client address (0: 8; at most max_conns) */
    uint32_t deadline_ms;      /* per request, see above (0: 5000) */
    uint32_t cache_ms;         /* the page is rendered at most once per cache_ms (0: 200) */
};

/* Listens on addr ("" host means all interfaces, port 0 means ephemeral: read it back with
 * gv_metrics_http_port) with the default limits. The registry is borrowed and must outlive the
 * endpoint. GV_ERR_INVAL (unresolvable host), GV_ERR_IO (bind failed: logged with the address),
 * GV_ERR_NOMEM. */
gv_status_t gv_metrics_http_start(struct gv_metrics *reg, const struct gv_hostport *addr,
                                  struct gv_metrics_http **http_p);
/* The same with the limits given (borrowed; NULL or a zero field: the default). */
gv_status_t gv_metrics_http_start_limits(struct gv_metrics *reg, const struct gv_hostport *addr,
                                         const struct gv_metrics_http_limits *limits,
                                         struct gv_metrics_http **http_p);
uint16_t gv_metrics_http_port(const struct gv_metrics_http *http);
/* "http://HOST:PORT/metrics" with the configured host ("0.0.0.0" when empty; an IPv6 literal
 * in brackets, a zone's '%' as "%25") and the bound port, written into buf; returns buf. */
const char *gv_metrics_http_url(const struct gv_metrics_http *http, char *buf, size_t len);

/* Counters since start, for tests and the curious; readable from any thread. */
struct gv_metrics_http_stats {
    uint64_t conns;    /* connections accepted */
    uint64_t requests; /* requests answered (any status) */
    uint64_t renders;  /* registry renders: at most one per cache_ms */
    uint64_t evicted;  /* connections closed to make room for a newer one */
    uint64_t deadline; /* connections closed at the request deadline */
};
void gv_metrics_http_stats(const struct gv_metrics_http *http, struct gv_metrics_http_stats *st);
/* Stops the thread and closes the socket and every connection; waits for a scrape in
 * progress (at most ~0.1 s more). Accepts NULL. */
void gv_metrics_http_stop(struct gv_metrics_http *http);

/* ================================================================ liveness
 *
 * Pure logic: times are inputs (nanoseconds on any monotonic clock), nothing here reads one.
 * A peer is dead when it was silent longer than the timeout (counted from `start` until it is
 * first seen) or when the caller reports a transport error. Death is sticky until
 * gv_liveness_revive (after the peer reconnected and authenticated again). */

enum gv_peer_state {
    GV_PEER_WAITING = 0, /* never seen since start */
    GV_PEER_ALIVE = 1,
    GV_PEER_DEAD = 2,
};

struct gv_liveness {
    uint32_t n;
    uint64_t timeout_ns;
    uint64_t *last_seen_ns; /* [n]; start time for WAITING peers */
    uint8_t *state;         /* [n] enum gv_peer_state */
    char (*why)[96];        /* [n] why a dead peer is dead */
};

gv_status_t gv_liveness_init(struct gv_liveness *lv, uint32_t n_peers, uint64_t timeout_ns,
                             uint64_t start_ns);
void gv_liveness_cleanup(struct gv_liveness *lv);
/* A message or heartbeat from peer at now_ns. Ignored for a dead peer; a time earlier than the
 * last one seen is ignored too (out-of-order reports). GV_ERR_INVAL for a bad peer index. */
gv_status_t gv_liveness_seen(struct gv_liveness *lv, uint32_t peer, uint64_t now_ns);
/* A transport error or a close: the peer is dead now. `why` (copied) is kept for the log. */
gv_status_t gv_liveness_mark_dead(struct gv_liveness *lv, uint32_t peer, const char *why);
gv_status_t gv_liveness_revive(struct gv_liveness *lv, uint32_t peer, uint64_t now_ns);
/* Declares dead every live or waiting peer silent for more than the timeout at now_ns, writes
 * the newly dead into dead[0..cap) and their count into *n_dead_p (the count of all newly dead,
 * even beyond cap). */
void gv_liveness_check(struct gv_liveness *lv, uint64_t now_ns, uint32_t *dead, size_t cap,
                       size_t *n_dead_p);
enum gv_peer_state gv_liveness_state(const struct gv_liveness *lv, uint32_t peer);
const char *gv_liveness_why(const struct gv_liveness *lv, uint32_t peer);
/* Nanoseconds until the earliest moment a live or waiting peer could be declared dead (0 if
 * one already could; UINT64_MAX when every peer is dead): a bound for the caller's poll. */
uint64_t gv_liveness_next_deadline(const struct gv_liveness *lv, uint64_t now_ns);

const char *gv_dead_policy_str(enum gv_dead_policy policy);

#ifdef __cplusplus
}
#endif
#endif /* GV_OPS_H */
