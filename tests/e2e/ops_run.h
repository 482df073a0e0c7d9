/* ops_run.h: the harness of the operations scenarios (test_e2e_ops.c, test_e2e_robust.c): a
 * job of S gravac-server and W gravac-worker processes on loopback (rendezvous directory,
 * ephemeral ports, every process's log and metrics file in the run's directory), waiting for an
 * iteration, killing what is left, and the hostile client's basic moves (connect, send, expect
 * a close), scraping /metrics with curl. */
#ifndef GV_OPS_RUN_H
#define GV_OPS_RUN_H

#include "e2e.h"

#include "gv_ps.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

static const char *bindir;

#define PEER_TIMEOUT_S 1.5
/* detection bound in these tests: the timeout, plus a heartbeat and the scheduling slack of a
 * loaded 2-core machine (and ASan) */
#define DETECT_BOUND_S (PEER_TIMEOUT_S + 3.5)

struct run {
    const char *dir;
    const char *tag; /* "a", "b": logs and files of this start */
    int S, W;
    uint64_t steps;
    const char *extra;            /* more options for every process */
    const char *method;           /* the compression options (NULL: static CF 10) */
    const char *server_extra;     /* more options for the servers only */
    const char *worker_extra;     /* more options for the workers only */
    const char *rank_extra[2][8]; /* [server?][rank]: more options for one process */
    bool secure;                  /* GV_SECRET_FILE is set: no --insecure */
    struct e2e_job j;
};

/* Starts one process of the run into its slot (servers 0..S-1, then workers). */
static inline void run_spawn(struct run *r, bool server, int rank)
{
    char common[2048], args[3072], log[800], prog[700], rdv[700], name[32];
    snprintf(rdv, sizeof(rdv), "%s/rdv-%s", r->dir, r->tag);
    mkdir(rdv, 0700);
    snprintf(common, sizeof(common),
             "--dataset synthetic --synthetic-n 2048 --batch 16 --widths 32 --steps %llu "
             "%s --num-servers %d --num-workers %d --rendezvous-dir %s "
             "--connect-timeout 15s --heartbeat-interval 200ms --peer-timeout 1500ms %s %s %s %s",
             (unsigned long long)r->steps, r->method ? r->method : "--method static --cf 10", r->S,
             r->W, rdv, r->secure ? "" : "--insecure", r->extra ? r->extra : "",
             (server ? r->server_extra : r->worker_extra)
                 ? (server ? r->server_extra : r->worker_extra)
                 : "",
             rank < 8 && r->rank_extra[server][rank] ? r->rank_extra[server][rank] : "");
    snprintf(prog, sizeof(prog), "%s/%s", bindir, server ? "gravac-server" : "gravac-worker");
    if (server)
        snprintf(args, sizeof(args),
                 "%s --rank %d --bind 127.0.0.1:0 --dump-params %s/server%%r-%s.bin", common, rank,
                 r->dir, r->tag);
    else
        snprintf(args, sizeof(args),
                 "%s --rank %d --quiet --metrics-file %s/worker%%r-%s.jsonl "
                 "--dump-params %s/worker%%r-%s.bin",
                 common, rank, r->dir, r->tag, r->dir, r->tag);
    snprintf(log, sizeof(log), "%s/%s%d-%s.log", r->dir, server ? "server" : "worker", rank,
             r->tag);
    snprintf(name, sizeof(name), "%s%d", server ? "server" : "worker", rank);
    int slot = server ? rank : r->S + rank, n = r->j.n;
    r->j.n = slot;
    e2e_spawn(&r->j, name, prog, args, log);
    r->j.n = GV_MAX(n, slot + 1);
}

/* Starts every process of the run but `skip_server` (-1: none), whose slot waits (done) for a
 * later run_spawn. */
static inline void run_start_but(struct run *r, int skip_server)
{
    memset(&r->j, 0, sizeof(r->j));
    r->j.n = r->S + r->W;
    for (int i = 0; i < r->j.n; i++)
        r->j.p[i].done = true;
    for (int s = 0; s < r->S; s++)
        if (s != skip_server)
            run_spawn(r, true, s);
    for (int w = 0; w < r->W; w++)
        run_spawn(r, false, w);
}

static inline void run_start(struct run *r)
{
    run_start_but(r, -1);
}

static inline struct e2e_proc *proc(struct run *r, bool server, int rank)
{
    return &r->j.p[server ? rank : r->S + rank];
}

static inline bool file_has(const char *path, const char *s)
{
    char *b = e2e_slurp(path, NULL);
    bool found = b != NULL && strstr(b, s) != NULL;
    free(b);
    return found;
}

/* The last iteration worker w recorded (-1: none yet): the tail of its metrics file. */
static inline long last_iter(struct run *r, int w)
{
    char path[700];
    snprintf(path, sizeof(path), "%s/worker%d-%s.jsonl", r->dir, w, r->tag);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    char buf[8192];
    fseek(f, 0, SEEK_END);
    long size = ftell(f), off = size > (long)sizeof(buf) - 1 ? size - (long)sizeof(buf) + 1 : 0;
    fseek(f, off, SEEK_SET);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    long it = -1;
    for (char *p = buf; (p = strstr(p, "{\"type\":\"iter\",\"iter\":")) != NULL; p++)
        it = strtol(p + 22, NULL, 10);
    return it;
}

/* Waits until worker w has recorded iteration `it` (false after timeout_s). */
static inline bool wait_iter(struct run *r, int w, long it, double timeout_s)
{
    uint64_t end = gv_now_ns() + (uint64_t)(timeout_s * 1e9);
    while (gv_now_ns() < end) {
        if (last_iter(r, w) >= it)
            return true;
        usleep(10000);
    }
    return false;
}

static inline void dump_all(struct run *r)
{
    for (int i = 0; i < r->j.n; i++)
        e2e_dump_log(&r->j.p[i]);
}

/* Kills whatever is left (stopped processes included). */
static inline void run_kill(struct run *r)
{
    for (int i = 0; i < r->j.n; i++)
        if (!r->j.p[i].done) {
            kill(r->j.p[i].pid, SIGKILL);
            waitpid(r->j.p[i].pid, &r->j.p[i].status, 0);
            r->j.p[i].done = true;
        }
}

static inline char *mkdir_tmp(const char *what)
{
    static char dir[200];
    snprintf(dir, sizeof(dir), "/tmp/gv_e2e_ops_%s_XXXXXX", what);
    return mkdtemp(dir);
}

/* Waits for every process but `skip` (-1: none); returns the seconds it took. */
static inline double wait_others(struct run *r, int skip, double timeout_s)
{
    uint64_t t0 = gv_now_ns(), end = t0 + (uint64_t)(timeout_s * 1e9);
    for (;;) {
        int left = 0;
        for (int i = 0; i < r->j.n; i++) {
            struct e2e_proc *p = &r->j.p[i];
            if (i == skip || p->done)
                continue;
            if (waitpid(p->pid, &p->status, WNOHANG) == p->pid)
                p->done = true;
            else
                left++;
        }
        if (left == 0 || gv_now_ns() > end)
            break;
        usleep(5000);
    }
    return (double)(gv_now_ns() - t0) * 1e-9;
}

/* The dumps of this run: every worker's parameters equal the servers' shards concatenated. */
static inline void replicas_equal(struct run *r, const bool *alive)
{
    char path[700];
    size_t total = 0;
    char *shards[8];
    size_t lens[8];
    for (int s = 0; s < r->S; s++) {
        snprintf(path, sizeof(path), "%s/server%d-%s.bin", r->dir, s, r->tag);
        shards[s] = e2e_slurp(path, &lens[s]);
        GV_CHECK_MSG(shards[s] != NULL, "no dump %s", path);
        total += shards[s] ? lens[s] : 0;
    }
    for (int w = 0; w < r->W; w++) {
        if (alive != NULL && !alive[w])
            continue;
        size_t len = 0;
        snprintf(path, sizeof(path), "%s/worker%d-%s.bin", r->dir, w, r->tag);
        char *p = e2e_slurp(path, &len);
        GV_CHECK_MSG(p != NULL && len == total, "worker %d dump: %zu bytes, shards %zu", w, len,
                     total);
        size_t off = 0;
        for (int s = 0; p != NULL && len == total && s < r->S; s++) {
            GV_CHECK_MSG(shards[s] && memcmp(p + off, shards[s], lens[s]) == 0,
                         "worker %d differs from shard %d", w, s);
            off += lens[s];
        }
        free(p);
    }
    for (int s = 0; s < r->S; s++)
        free(shards[s]);
}

static inline bool same_file(const char *a, const char *b)
{
    size_t la = 0, lb = 0;
    char *x = e2e_slurp(a, &la), *y = e2e_slurp(b, &lb);
    bool same = x != NULL && y != NULL && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return same;
}

/* One process, waited for; its exit code. */
static inline int run_one(const char *prog, const char *args, const char *log, double timeout_s)
{
    struct e2e_job j = {0};
    char path[700];
    snprintf(path, sizeof(path), "%s/%s", bindir, prog);
    e2e_spawn(&j, prog, path, args, log);
    e2e_wait(&j, timeout_s);
    return e2e_exit_code(&j.p[0]);
}

static inline int port_of(const char *dir, const char *tag, int s)
{
    char path[700];
    snprintf(path, sizeof(path), "%s/rdv-%s/server-%d.addr", dir, tag, s);
    char *addr = NULL;
    for (int k = 0; k < 1000 && addr == NULL; k++) {
        addr = e2e_slurp(path, NULL);
        if (addr == NULL)
            usleep(10000);
    }
    const char *colon = addr ? strrchr(addr, ':') : NULL;
    int port = colon ? atoi(colon + 1) : 0;
    free(addr);
    return port;
}

static inline int connect_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* Sends bytes and reports whether the server closed the connection (EOF or reset) within 5 s,
 * reading and dropping whatever it answered first. */
static inline bool send_expect_close(int port, const void *bytes, size_t len, bool keep_open)
{
    int fd = connect_port(port);
    if (fd < 0)
        return false;
    if (len > 0 && write(fd, bytes, len) != (ssize_t)len) {
        close(fd);
        return false;
    }
    if (!keep_open)
        shutdown(fd, SHUT_WR);
    char buf[512];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0)
        ;
    bool closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    close(fd);
    return closed;
}

static inline void prefix(uint8_t *out, uint16_t version, uint32_t hdr_len, uint64_t payload_len)
{
    struct gv_proto_prefix p = {.magic = GV_PROTO_MAGIC,
                                .version = version,
                                .hdr_len = hdr_len,
                                .payload_len = payload_len};
    gv_proto_prefix_write(&p, out);
}

static inline char *curl_get(int port, int *code)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd),
             "curl -sS --noproxy '*' --max-time 5 -w '\\n%%{http_code}' "
             "'http://127.0.0.1:%d/metrics' 2>&1",
             port);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return NULL;
    size_t cap = 1 << 18, len = 0, n;
    char *out = malloc(cap);
    while (out != NULL && (n = fread(out + len, 1, cap - 1 - len, p)) > 0)
        len += n;
    pclose(p);
    if (out == NULL)
        return NULL;
    out[len] = '\0';
    char *nl = strrchr(out, '\n');
    *code = nl ? atoi(nl + 1) : 0;
    return out;
}

static inline double sample(const char *text, const char *series)
{
    char key[200];
    snprintf(key, sizeof(key), "\n%s ", series);
    const char *p = text ? strstr(text, key) : NULL;
    return p ? strtod(p + strlen(key), NULL) : NAN;
}

static inline int metrics_port(const char *log)
{
    for (int k = 0; k < 1000; k++) {
        char *s = e2e_slurp(log, NULL);
        const char *p = s ? strstr(s, "metrics at http://127.0.0.1:") : NULL;
        int port = p ? atoi(p + 28) : 0;
        free(s);
        if (port > 0)
            return port;
        usleep(10000);
    }
    return 0;
}

#endif /* GV_OPS_RUN_H */
