/* ps_test.h: helpers shared by the tests that run servers and workers as threads of one
 * process (tests/server, tests/worker): a log sink that keeps every line for the checks, and a
 * loopback cluster description resolved through a rendezvous directory. */
#ifndef GV_PS_TEST_H
#define GV_PS_TEST_H

#include "check.h"
#include "gv_server.h"
#include "gv_worker.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char logbuf[1 << 18];
static size_t loglen;

/* gv_log_set_cb(log_cb, NULL): keeps the lines (as long as they fit) and echoes warnings and
 * errors to stderr. */
static inline void log_cb(enum gv_log_level lvl, const char *line, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&log_mu);
    size_t n = strlen(line);
    if (loglen + n + 2 < sizeof(logbuf)) {
        memcpy(logbuf + loglen, line, n);
        loglen += n;
        logbuf[loglen++] = '\n';
        logbuf[loglen] = '\0';
    }
    pthread_mutex_unlock(&log_mu);
    if (lvl <= GV_LOG_WARN)
        fprintf(stderr, "log: %s\n", line);
}

static inline bool log_has(const char *s)
{
    pthread_mutex_lock(&log_mu);
    bool r = strstr(logbuf, s) != NULL;
    pthread_mutex_unlock(&log_mu);
    return r;
}

static inline void log_clear(void)
{
    pthread_mutex_lock(&log_mu);
    loglen = 0;
    logbuf[0] = '\0';
    pthread_mutex_unlock(&log_mu);
}

/* A cluster of S servers and W workers on 127.0.0.1 meeting in `dir`, over TCP. */
static inline void ps_test_cluster_init(struct gv_cluster *cl, const char *dir, int rank,
                                        enum gv_role role, int n_servers, int n_workers,
                                        uint64_t connect_timeout_ns, uint64_t io_timeout_ns)
{
    memset(cl, 0, sizeof(*cl));
    cl->num_servers = n_servers;
    cl->num_workers = n_workers;
    cl->rank = rank;
    cl->rendezvous_dir = dir;
    snprintf(cl->bind.host, sizeof(cl->bind.host), "127.0.0.1");
    cl->advertise = "";
    cl->cluster_id = "test";
    cl->transport = "tcp";
    cl->connect_timeout = connect_timeout_ns;
    cl->io_timeout = io_timeout_ns;
    cl->dump_params = "";
    GV_CHECK_OK(gv_cluster_resolve(cl, role, NULL));
}

/* A worker's model over caller-owned buffers of P floats each, in T tensors. */
static inline struct gv_worker_model ps_test_model(float *params, float *grads, float *momentum,
                                                   size_t P, uint32_t T, const size_t *numel,
                                                   char (*names)[24])
{
    return (struct gv_worker_model){.params = params,
                                    .grads = grads,
                                    .momentum = momentum,
                                    .numel = P,
                                    .n_tensors = T,
                                    .tensor_numel = numel,
                                    .names = (const char(*)[24])names};
}

#endif
