/* test_stop_race.c: a stop requested by server 1 while its worker leaves, made deterministic in
 * one process: 2 servers (threads), a real worker (the runtime, in a thread), and a relay
 * between server 1 and server 0 that the test can hold in the direction server 0 -> server 1.
 *
 * The order of CI's failure (test_e2e_mpirun_stop, once in many runs): server 1 has sent its
 * STATS and waits for the DECISION; it gets SIGTERM and asks server 0 to stop; server 0, which
 * decided the round already, stops one iteration later and tells everyone; the worker hears it
 * first and leaves; only then does server 1 read the DECISION and the ERROR behind it. The round
 * must still complete on server 1 (the departed worker is not sent its update), so that it stops
 * at server 0's iteration and both shards' final checkpoints are written there. Before the fix
 * the update send to the closed worker failed, silently (a request was pending), server 1 stayed
 * one iteration behind, wrote nothing, and server 0 ended with "the checkpoint was not written
 * by every process". */
#include "ps_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define S 2

static struct gv_job job;
static struct gv_cfg *cfg;
static char dir[64], dir1[96];
static struct gv_auth_secret none;
static struct gv_cluster scl[S], wcl;
static struct gv_server *srv[S];
static volatile int stop[S];
static gv_status_t sres[S];
static atomic_int hold, relay_quit, wsteps, wdone;

static int job_load(void)
{
    static struct gv_opt_table tab;
    static struct gv_cfg_spec spec;
    char *argv[] = {"t",      "--dataset", "synthetic", "--synthetic-n", "1024",  "--widths",
                    "16",     "--batch",   "16",        "--lr",          "0.05",  "--method",
                    "static", "--cf",      "4",         "--steps",       "100000"};
    tab = (struct gv_opt_table){gv_job_options, gv_job_options_n, &job};
    spec = (struct gv_cfg_spec){.program = "t", .tables = &tab, .n_tables = 1};
    return gv_cfg_create(&spec, &cfg) == GV_OK &&
                   gv_cfg_load(cfg, (int)GV_ARRAY_LEN(argv), argv, NULL) == GV_OK &&
                   gv_job_resolve(&job, 1) == GV_OK
               ? 0
               : -1;
}

static void *srv_main(void *p)
{
    int s = (int)(intptr_t)p;
    sres[s] = gv_server_run(srv[s], &stop[s]);
    return NULL;
}

/* ---------------------------------------------------------------- the worker */

static void *worker_main(void *p)
{
    (void)p;
    char names[16][24];
    size_t numel[16];
    uint32_t T = 0;
    GV_CHECK_OK(gv_job_layout(&job, names, numel, 16, &T));
    size_t P = 0;
    for (uint32_t i = 0; i < T; i++)
        P += numel[i];
    float *params = calloc(P, 4), *grads = calloc(P, 4), *mom = calloc(P, 4);
    struct gv_worker_config wc = {.job = &job, .cluster = &wcl, .secret = &none};
    struct gv_worker_model m = ps_test_model(params, grads, mom, P, T, numel, names);
    struct gv_worker *w = NULL;
    gv_status_t st = gv_worker_create(&wc, &m, &w);
    for (int i = 0; st == GV_OK && i < 100000; i++) {
        for (size_t j = 0; j < P; j++)
            grads[j] = (float)((j * 7 + (size_t)i * 13) % 23) * 0.01f - 0.11f;
        struct gv_worker_step_in in = {.loss = 1, .compute_s = 0.001, .samples = 16};
        struct gv_worker_step_out out;
        st = gv_worker_step(w, &in, &out);
        if (st != GV_OK || out.stop)
            break;
        atomic_fetch_add(&wsteps, 1);
    }
    gv_worker_destroy(w); /* closes its connections: server 1 sees it leave */
    free(params), free(grads), free(mom);
    atomic_store(&wdone, 1);
    return NULL;
}

/* ---------------------------------------------------------------- the relay */

static int relay_lfd;

static int relay_listen(void)
{
    relay_lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    GV_CHECK(bind(relay_lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
    GV_CHECK(listen(relay_lfd, 1) == 0);
    GV_CHECK(getsockname(relay_lfd, (struct sockaddr *)&a, &len) == 0);
    return ntohs(a.sin_port);
}

/* copies what fd `from` has to `to`; false when `from` closed or failed */
static bool relay_copy(int from, int to)
{
    char buf[65536];
    ssize_t n = read(from, buf, sizeof(buf));
    if (n <= 0)
        return false;
    for (ssize_t off = 0; off < n;) {
        ssize_t k = write(to, buf + off, (size_t)(n - off));
        if (k < 0 && errno != EINTR)
            return false;
        off += k > 0 ? k : 0;
    }
    return true;
}

/* Server 1's connection to "server 0" comes here and goes on to server 0; what server 0 sends
 * waits in the kernel while `hold` is set. Ends when a side closes or the test says quit. */
static void *relay_main(void *p)
{
    uint16_t port0 = (uint16_t)(intptr_t)p;
    struct pollfd lp = {.fd = relay_lfd, .events = POLLIN};
    int s1 = -1;
    for (int i = 0; i < 200 && s1 < 0 && !atomic_load(&relay_quit); i++)
        if (poll(&lp, 1, 50) == 1)
            s1 = accept(relay_lfd, NULL, NULL);
    if (s1 < 0)
        return NULL;
    int s0 = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port0), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(s0, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(s1), close(s0);
        return NULL;
    }
    while (!atomic_load(&relay_quit)) {
        bool held = atomic_load(&hold) != 0;
        struct pollfd f[2] = {{.fd = s1, .events = POLLIN},
                              {.fd = s0, .events = held ? 0 : POLLIN}};
        if (poll(f, 2, 20) <= 0)
            continue;
        if ((f[0].revents & (POLLIN | POLLHUP | POLLERR)) && !relay_copy(s1, s0))
            break;
        if (!held && (f[1].revents & (POLLIN | POLLHUP | POLLERR)) && !relay_copy(s0, s1))
            break;
    }
    close(s1), close(s0);
    return NULL;
}

/* ---------------------------------------------------------------- helpers */

static void write_addr(const char *d, int s, const char *addr)
{
    char path[160], tmp[170];
    snprintf(path, sizeof(path), "%s/server-%d.addr", d, s);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    GV_CHECK(f != NULL);
    fprintf(f, "%s\n", addr);
    fclose(f);
    GV_CHECK(rename(tmp, path) == 0);
}

static bool wait_until(bool (*pred)(void), int ms)
{
    for (int i = 0; i < ms / 10; i++) {
        if (pred())
            return true;
        usleep(10000);
    }
    return pred();
}

static bool worker_going(void)
{
    return atomic_load(&wsteps) >= 20;
}
static bool worker_gone(void)
{
    return atomic_load(&wdone) != 0;
}

static bool ckpt_exists(int shard, uint64_t iter)
{
    char path[200];
    snprintf(path, sizeof(path), "%s/ckpt/shard%04d-iter%012llu.gvckpt", dir, shard,
             (unsigned long long)iter);
    struct stat st;
    return stat(path, &st) == 0 && st.st_size > 0;
}

int main(void)
{
    gv_log_set_cb(log_cb, NULL);
    signal(SIGPIPE, SIG_IGN);
    GV_CHECK(job_load() == 0);
    snprintf(dir, sizeof(dir), "/tmp/gv_test_stoprace_XXXXXX");
    GV_CHECK(mkdtemp(dir) != NULL);
    /* server 1 meets "server 0" (the relay) in a directory of its own */
    snprintf(dir1, sizeof(dir1), "%s/s1", dir);
    GV_CHECK(mkdir(dir1, 0700) == 0);
    char ckdir[128];
    snprintf(ckdir, sizeof(ckdir), "%s/ckpt", dir);
    for (int s = 0; s < S; s++) {
        ps_test_cluster_init(&scl[s], s == 0 ? dir : dir1, s, GV_ROLE_SERVER, S, 1, 10000000000ull,
                             5000000000ull);
        struct gv_server_config sc = {.job = &job,
                                      .cluster = &scl[s],
                                      .secret = &none,
                                      .handshake_timeout_ns = 5000000000ull,
                                      .checkpoint_dir = ckdir};
        GV_CHECK_OK(gv_server_create(&sc, &srv[s]));
    }
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", gv_server_port(srv[1]));
    write_addr(dir, 1, addr); /* the worker meets both in dir */
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", relay_listen());
    write_addr(dir1, 0, addr);
    pthread_t rt, st[S], wt;
    pthread_create(&rt, NULL, relay_main, (void *)(intptr_t)gv_server_port(srv[0]));
    for (int s = 0; s < S; s++)
        pthread_create(&st[s], NULL, srv_main, (void *)(intptr_t)s);
    ps_test_cluster_init(&wcl, dir, 0, GV_ROLE_WORKER, S, 1, 10000000000ull, 5000000000ull);
    pthread_create(&wt, NULL, worker_main, NULL);

    GV_CHECK_MSG(wait_until(worker_going, 20000), "the job did not run 20 iterations");
    /* server 0's messages to server 1 wait: server 1 finishes its aggregation of some round k,
     * sends its STATS and waits; server 0 decides k and goes on to k + 1, where the worker waits
     * for server 1's update of k */
    atomic_store(&hold, 1);
    int seen = -1;
    for (int i = 0; i < 100 && seen != atomic_load(&wsteps); i++) {
        seen = atomic_load(&wsteps);
        usleep(50000);
    }
    GV_CHECK_MSG(seen == atomic_load(&wsteps), "the worker kept going with server 1 held");
    stop[1] = SIGTERM; /* server 1 asks server 0 (that direction is open) */
    GV_CHECK_MSG(wait_until(worker_gone, 10000), "the worker did not leave on server 0's stop");
    usleep(300000); /* server 1 reads the worker's departure before server 0's messages */
    atomic_store(&hold, 0);
    for (int s = 0; s < S; s++)
        pthread_join(st[s], NULL);
    pthread_join(wt, NULL);
    atomic_store(&relay_quit, 1);
    pthread_join(rt, NULL);
    close(relay_lfd);

    struct gv_server_summary sum[S];
    for (int s = 0; s < S; s++)
        gv_server_get_summary(srv[s], &sum[s]);
    GV_CHECK(log_has("server 1: received SIGTERM; asking server 0 to stop the job"));
    GV_CHECK(log_has("server 0: stopping the job at iteration"));
    for (int s = 0; s < S; s++) {
        GV_CHECK_MSG(sres[s] == GV_ERR_CLOSED && sum[s].stopped,
                     "server %d: %s, stopped %d (expected: stopped on request)", s,
                     gv_status_str(sres[s]), sum[s].stopped);
        GV_CHECK_MSG(sum[s].iterations == sum[0].iterations,
                     "server %d stopped after %llu rounds, server 0 after %llu", s,
                     (unsigned long long)sum[s].iterations, (unsigned long long)sum[0].iterations);
        GV_CHECK_MSG(ckpt_exists(s, sum[0].iterations),
                     "no final checkpoint of shard %d at iteration %llu", s,
                     (unsigned long long)sum[0].iterations);
    }
    GV_CHECK(sum[0].iterations >= 20);
    GV_CHECK(!log_has("was not written by every process"));

    for (int s = 0; s < S; s++)
        gv_server_destroy(srv[s]);
    gv_cfg_destroy(cfg);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
    gv_log_set_cb(NULL, NULL);
    return gv_check_summary();
}
