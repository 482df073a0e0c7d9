/* cluster.c: who is who in a job. Options (servers, ranks, rendezvous, timeouts), resolution
 * from flags / config / GV_* variables and from MPI or Slurm rank variables, and the rendezvous
 * files through which servers on ephemeral ports publish their addresses. */
#include "gv_ps.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define C(f) offsetof(struct gv_cluster, f)

const struct gv_opt gv_cluster_options[] = {
    {.name = "servers",
     .type = GV_OPT_HOSTLIST,
     .offset = C(servers),
     .def = "",
     .help = "server addresses host:port,... (index = server rank)",
     .group = "cluster"},
    {.name = "num-servers",
     .type = GV_OPT_INT,
     .offset = C(num_servers),
     .def = "0",
     .help = "number of servers when --servers is not given (with --rendezvous-dir)",
     .group = "cluster",
     .flags = GV_OPT_RANGE,
     .min = 0,
     .max = 4096},
    {.name = "num-workers",
     .type = GV_OPT_INT,
     .offset = C(num_workers),
     .def = "0",
     .help = "number of workers (0: MPI/Slurm world size minus the servers)",
     .group = "cluster",
     .flags = GV_OPT_RANGE,
     .min = 0,
     .max = 65536},
    {.name = "rank",
     .type = GV_OPT_INT,
     .offset = C(rank),
     .def = "-1",
     .help = "rank within the role (-1: from OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID)",
     .group = "cluster",
     .flags = GV_OPT_RANGE,
     .min = -1,
     .max = 65535},
    {.name = "rendezvous-dir",
     .type = GV_OPT_STRING,
     .offset = C(rendezvous_dir),
     .def = "",
     .help = "shared directory where servers publish their addresses (server-<s>.addr)",
     .group = "cluster"},
    {.name = "bind",
     .type = GV_OPT_ADDR,
     .offset = C(bind),
     .def = "",
     .help = "server: address to listen on (default: all addresses, port of --servers[rank])",
     .group = "cluster"},
    {.name = "advertise",
     .type = GV_OPT_STRING,
     .offset = C(advertise),
     .def = "",
     .help = "server: host name or address the others should connect to",
     .group = "cluster"},
    {.name = "cluster-id",
     .type = GV_OPT_STRING,
     .offset = C(cluster_id),
     .def = "gravac",
     .help = "job name; peers of another job are refused",
     .group = "cluster"},
    {.name = "transport",
     .type = GV_OPT_STRING,
     .offset = C(transport),
     .def = "tcp",
     .help = "transport backend",
     .group = "cluster"},
    {.name = "connect-timeout",
     .type = GV_OPT_DURATION,
     .offset = C(connect_timeout),
     .def = "30s",
     .help = "start-up deadline: connect, rendezvous, every peer joined",
     .group = "cluster",
     .flags = GV_OPT_RANGE,
     .min = 0.01,
     .max = 86400},
    {.name = "io-timeout",
     .type = GV_OPT_DURATION,
     .offset = C(io_timeout),
     .def = "60s",
     .help = "a transfer that makes no progress for this long fails (longer than the longest "
             "pause, e.g. worker 0's evaluation: a push waits while the server reads another "
             "rank's)",
     .group = "cluster",
     .flags = GV_OPT_RANGE,
     .min = 0.01,
     .max = 86400},
    {.name = "dump-params",
     .type = GV_OPT_STRING,
     .offset = C(dump_params),
     .def = "",
     .help = "write the final parameters (float32) to this file; %r is the rank, %n the role "
             "and rank (server0, worker2)",
     .group = "output"},
    {.name = "print-config",
     .type = GV_OPT_BOOL,
     .offset = C(print_config),
     .def = "false",
     .help = "log every option's value and where it came from",
     .group = "output"},
    {.name = "conns-per-server",
     .type = GV_OPT_INT,
     .offset = C(conns_per_server),
     .def = "1",
     .help = "TCP connections between each worker and each server process: the server's part "
             "of the model is striped over them (one shard each, at port + i, served by a thread "
             "of its own)",
     .group = "cluster",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 64},
};
const size_t gv_cluster_options_n = GV_ARRAY_LEN(gv_cluster_options);

static const char *cluster_getenv(char *const *envp, const char *name)
{
    size_t n = strlen(name);
    for (char *const *e = envp; e != NULL && *e != NULL; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

static int cluster_num(const char *s)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : -1;
    if (s == NULL || errno != 0 || end == s || *end != '\0' || v < 0 || v > 1 << 24)
        return -1;
    return (int)v;
}

int gv_cluster_env_rank(char *const *envp, int *size_p, const char **name_p)
{
    static const char *const ranks[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
    static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"};
    for (size_t i = 0; i < GV_ARRAY_LEN(ranks); i++) {
        const char *v = cluster_getenv(envp, ranks[i]);
        if (v == NULL)
            continue;
        if (size_p != NULL)
            *size_p = cluster_num(cluster_getenv(envp, sizes[i]));
        if (name_p != NULL)
            *name_p = ranks[i];
        return cluster_num(v);
    }
    if (size_p != NULL)
        *size_p = -1;
    return -1;
}

static gv_status_t cluster_servers(struct gv_cluster *cl)
{
    if (cl->servers.n > 0) {
        if (cl->num_servers > 0 && (size_t)cl->num_servers != cl->servers.n) {
            gv_log(GV_LOG_ERROR, "--num-servers %d disagrees with the %zu addresses of --servers",
                   cl->num_servers, cl->servers.n);
            return GV_ERR_INVAL;
        }
        cl->n_servers = (uint32_t)cl->servers.n;
        return GV_OK;
    }
    if (cl->num_servers > 0 && cl->rendezvous_dir[0] != '\0') {
        cl->n_servers = (uint32_t)cl->num_servers;
        return GV_OK;
    }
    gv_log(GV_LOG_ERROR, "no servers given: set --servers host:port,... (or GV_SERVERS, or "
                         "'servers =' in the config file), or --num-servers with "
                         "--rendezvous-dir (or use --standalone)");
    return GV_ERR_INVAL;
}

static gv_status_t cluster_rank(struct gv_cluster *cl, enum gv_role role, char *const *envp,
                                int *world_p)
{
    const char *var = NULL;
    int world = -1;
    int g = gv_cluster_env_rank(envp, &world, &var);
    *world_p = world;
    if (cl->rank >= 0) {
        cl->my_rank = (uint32_t)cl->rank;
        snprintf(cl->rank_source, sizeof(cl->rank_source), "--rank");
        return GV_OK;
    }
    if (g < 0) {
        gv_log(GV_LOG_ERROR, "no rank: give --rank (or GV_RANK), or start under mpirun/srun "
                             "(OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID)");
        return GV_ERR_INVAL;
    }
    if (role == GV_ROLE_SERVER) {
        if ((uint32_t)g >= cl->n_servers) {
            gv_log(GV_LOG_ERROR, "%s=%d is not a server rank (servers take global ranks 0..%u)",
                   var, g, cl->n_servers - 1);
            return GV_ERR_INVAL;
        }
        cl->my_rank = (uint32_t)g;
        snprintf(cl->rank_source, sizeof(cl->rank_source), "%s=%d", var, g);
        return GV_OK;
    }
    if ((uint32_t)g < cl->n_servers) {
        gv_log(GV_LOG_ERROR,
               "%s=%d is a server rank (servers take global ranks 0..%u, workers "
               "the ranks after them)",
               var, g, cl->n_servers - 1);
        return GV_ERR_INVAL;
    }
    cl->my_rank = (uint32_t)g - cl->n_servers;
    snprintf(cl->rank_source, sizeof(cl->rank_source), "%s=%d - %u servers", var, g, cl->n_servers);
    return GV_OK;
}

/* After the ranks (which count processes): the lanes. */
static gv_status_t cluster_lanes(struct gv_cluster *cl)
{
    cl->lanes = cl->conns_per_server > 0 ? (uint32_t)cl->conns_per_server : 1;
    cl->n_procs = cl->n_servers;
    cl->proc_rank = cl->role == GV_ROLE_SERVER ? cl->my_rank : 0;
    if (cl->lanes > 1 && cl->servers.n > 0)
        for (size_t i = 0; i < cl->servers.n; i++)
            if (cl->servers.v[i].port == 0 || cl->servers.v[i].port + cl->lanes - 1 > 65535) {
                gv_log(GV_LOG_ERROR,
                       "--conns-per-server %u needs ports %u..%u of server %zu (%s): give a "
                       "fixed port with room, or use --rendezvous-dir",
                       cl->lanes, cl->servers.v[i].port, cl->servers.v[i].port + cl->lanes - 1, i,
                       cl->servers.v[i].host);
                return GV_ERR_INVAL;
            }
    cl->n_servers = cl->n_procs * cl->lanes;
    return GV_OK;
}

gv_status_t gv_cluster_resolve(struct gv_cluster *cl, enum gv_role role, char *const *envp)
{
    int world;
    gv_status_t status;
    cl->role = role;
    if ((status = cluster_servers(cl)) != GV_OK)
        return status;
    if ((status = cluster_rank(cl, role, envp, &world)) != GV_OK)
        return status;
    status = cluster_lanes(cl);
    if (status != GV_OK)
        return status;
    if (cl->num_workers > 0) {
        cl->n_workers = (uint32_t)cl->num_workers;
    } else if (world > (int)cl->n_procs) {
        cl->n_workers = (uint32_t)world - cl->n_procs;
    } else {
        gv_log(GV_LOG_ERROR, "number of workers unknown: give --num-workers (or GV_NUM_WORKERS), "
                             "or start under mpirun/srun with the servers in the first ranks");
        return GV_ERR_INVAL;
    }
    bool bind_set = cl->bind.host[0] != '\0' || cl->bind.port != 0;
    if (role == GV_ROLE_SERVER && bind_set && cl->bind.port == 0 &&
        (cl->rendezvous_dir[0] == '\0' || cl->servers.n > 0)) {
        gv_log(GV_LOG_ERROR,
               "--bind %s:0 asks for any free port, which the others can only learn through "
               "--rendezvous-dir (%s): give a port, or a rendezvous directory%s",
               cl->bind.host[0] ? cl->bind.host : "*",
               cl->servers.n > 0 ? "with --servers they connect to the port listed there"
                                 : "there is none",
               cl->servers.n > 0 ? " instead of --servers" : "");
        return GV_ERR_INVAL;
    }
    uint32_t n = role == GV_ROLE_SERVER ? cl->n_servers : cl->n_workers;
    if (role == GV_ROLE_SERVER)
        cl->my_rank = cl->proc_rank * cl->lanes; /* the process's first lane */
    if (cl->my_rank >= n) {
        gv_log(GV_LOG_ERROR, "%s rank %u (from %s) is out of range: %u %ss",
               role == GV_ROLE_SERVER ? "server" : "worker", cl->my_rank, cl->rank_source, n,
               role == GV_ROLE_SERVER ? "server" : "worker");
        return GV_ERR_INVAL;
    }
    return GV_OK;
}

static void cluster_file(const struct gv_cluster *cl, uint32_t s, char *out, size_t len)
{
    snprintf(out, len, "%s/server-%u.addr", cl->rendezvous_dir, s);
}

gv_status_t gv_cluster_publish(const struct gv_cluster *cl, uint32_t s, const char *addr)
{
    char path[1100], tmp[1200];
    if (cl->rendezvous_dir[0] == '\0')
        return GV_OK;
    cluster_file(cl, s, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s/.server-%u.addr.%ld.tmp", cl->rendezvous_dir, s, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        gv_log(GV_LOG_ERROR, "rendezvous: cannot create %s: %s", tmp, strerror(errno));
        return GV_ERR_IO;
    }
    int bad = fprintf(f, "%s\n", addr) < 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        gv_log(GV_LOG_ERROR, "rendezvous: cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return GV_ERR_IO;
    }
    gv_log(GV_LOG_INFO, "rendezvous: published %s in %s", addr, path);
    return GV_OK;
}

static gv_status_t cluster_read_file(const char *path, struct gv_hostport *out, int *absent)
{
    char line[600];
    FILE *f = fopen(path, "r");
    *absent = f == NULL;
    if (f == NULL)
        return GV_ERR_AGAIN;
    char *got = fgets(line, sizeof(line), f);
    fclose(f);
    if (got == NULL) {
        gv_log(GV_LOG_ERROR, "rendezvous: %s is empty", path);
        return GV_ERR_PROTO;
    }
    line[strcspn(line, "\r\n")] = '\0';
    if (gv_parse_hostport(line, out) != GV_OK || out->port == 0) {
        gv_log(GV_LOG_ERROR, "rendezvous: %s holds '%s', not host:port", path, line);
        return GV_ERR_PROTO;
    }
    return GV_OK;
}

gv_status_t gv_cluster_server_addr_try(const struct gv_cluster *cl, uint32_t s,
                                       struct gv_hostport *out)
{
    if (s >= cl->n_servers)
        return GV_ERR_INVAL;
    if (cl->servers.n > 0) {
        *out = cl->servers.v[s];
        return GV_OK;
    }
    char path[1100];
    int absent;
    cluster_file(cl, s, path, sizeof(path));
    return cluster_read_file(path, out, &absent);
}

gv_status_t gv_cluster_server_addr(const struct gv_cluster *cl, uint32_t s, uint64_t deadline_ns,
                                   struct gv_hostport *out)
{
    if (s >= cl->n_servers)
        return GV_ERR_INVAL;
    if (cl->servers.n > 0) { /* lane l of process p listens at p's port + l */
        uint32_t lanes = cl->lanes > 0 ? cl->lanes : 1;
        *out = cl->servers.v[s / lanes];
        out->port = (uint16_t)(out->port + s % lanes);
        return GV_OK;
    }
    char path[1100];
    cluster_file(cl, s, path, sizeof(path));
    for (;;) {
        int absent;
        gv_status_t status = cluster_read_file(path, out, &absent);
        if (!absent)
            return status;
        if (gv_now_ns() >= deadline_ns) {
            gv_log(GV_LOG_ERROR,
                   "rendezvous: server %u did not publish its address in %s "
                   "before the start-up deadline (--connect-timeout)",
                   s, path);
            return GV_ERR_TIMEOUT;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void gv_cluster_expand(const char *tmpl, enum gv_role role, uint32_t rank, char *out, size_t len)
{
    size_t o = 0;
    for (const char *p = tmpl; *p != '\0' && o + 1 < len; p++) {
        if (p[0] == '%' && (p[1] == 'r' || p[1] == 'n')) {
            int n = snprintf(out + o, len - o, "%s%u",
                             p[1] == 'r'              ? ""
                             : role == GV_ROLE_SERVER ? "server"
                                                      : "worker",
                             rank);
            o = n > 0 ? GV_MIN(o + (size_t)n, len - 1) : o;
            p++;
        } else if (p[0] == '%' && p[1] == '%') {
            out[o++] = '%';
            p++;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
}

gv_status_t gv_ps_dump_floats(const char *path, const float *v, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        gv_log(GV_LOG_ERROR, "cannot create %s: %s", path, strerror(errno));
        return GV_ERR_IO;
    }
    int bad = fwrite(v, sizeof(float), n, f) != n;
    bad |= fclose(f) != 0;
    if (bad) {
        gv_log(GV_LOG_ERROR, "cannot write %s: %s", path, strerror(errno));
        return GV_ERR_IO;
    }
    return GV_OK;
}
