/* gravac_launch.c: the gravac-launch program: starts S servers and W workers on this machine
 * (loopback, ephemeral ports found through a rendezvous directory under $TMPDIR), prefixes every
 * line a child prints with its role and rank, and tears everything down when the job ends, on
 * Ctrl-C or SIGTERM (forwarded, then SIGKILL after a grace period) and when any child fails
 * (the others are stopped, the exit status is non-zero and the failed child is named). At the
 * end it prints a summary from worker 0's metrics file. Options it does not own are validated
 * with the same tables as the children's and routed to the servers, the workers or both.
 * With a command after "--" (gravac-launch --workers 4 -- python3 train.py ...) the workers are
 * that command, torchrun- and bpslaunch-style: their rank, the cluster and the worker options
 * go to it as GV_* variables, and the servers take the model's layout and the optimizer from
 * it (--model external --optimizer caller unless given). */
#include "gv_ps.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define L_MAX_CHILDREN 64
#define L_LINE 4096

struct launch_opts {
    int servers, workers;
    const char *bin_dir;
    uint64_t grace; /* ns */
    bool keep_dir;
    const char *tmp_dir;
};

#define L(f) offsetof(struct launch_opts, f)
static const struct gv_opt launch_options[] = {
    {.name = "servers",
     .type = GV_OPT_INT,
     .offset = L(servers),
     .def = "2",
     .help = "servers to start",
     .group = "launch",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 32},
    {.name = "workers",
     .type = GV_OPT_INT,
     .offset = L(workers),
     .def = "3",
     .help = "workers to start",
     .group = "launch",
     .flags = GV_OPT_RANGE,
     .min = 1,
     .max = 31},
    {.name = "bin-dir",
     .type = GV_OPT_STRING,
     .offset = L(bin_dir),
     .def = "",
     .help = "directory of gravac-server and gravac-worker (default: this program's)",
     .group = "launch"},
    {.name = "grace",
     .type = GV_OPT_DURATION,
     .offset = L(grace),
     .def = "5s",
     .help = "after SIGTERM, children still running this long are killed",
     .group = "launch",
     .flags = GV_OPT_RANGE,
     .min = 0.01,
     .max = 3600},
    {.name = "keep-dir",
     .type = GV_OPT_BOOL,
     .offset = L(keep_dir),
     .def = "false",
     .help = "keep the run directory (rendezvous files, metrics)",
     .group = "launch"},
    {.name = "tmp-dir",
     .type = GV_OPT_STRING,
     .offset = L(tmp_dir),
     .def = "",
     .help = "where the run directory goes (default: $TMPDIR or /tmp)",
     .group = "launch"},
};

/* Cluster options launch sets itself for every child. */
static const char *const launch_owned[] = {"servers",        "num-servers", "num-workers", "rank",
                                           "rendezvous-dir", "bind",        "advertise",   NULL};

struct child {
    pid_t pid;
    char name[32]; /* "server0", "worker2" */
    int fd;        /* its stdout + stderr, -1 once at EOF */
    char buf[L_LINE];
    size_t len;
    bool exited;
    int status;
    int sent_sig; /* the last signal gravac-launch itself sent it (0: none) */
};

struct launch {
    struct launch_opts lo;
    struct gv_ps_options ps; /* the job's options, as every gravac program reads them */
    char dir[512];
    struct child ch[L_MAX_CHILDREN];
    int n;
    char **server_args, **worker_args; /* passthrough arguments (borrowed strings) */
    int n_server_args, n_worker_args;
    char **cmd;     /* the workers' command after "--" (NULL: gravac-worker) */
    char **cmd_env; /* its GV_* variables from the worker options ("NAME=value", owned) */
    int n_cmd_env;
    bool set_model, set_optimizer; /* the user chose --model / --optimizer */
    bool user_metrics;
    int lost; /* workers that failed while the job went on (continue policy) */
};

static int sig_pipe[2] = {-1, -1};

static void launch_on_signal(int sig)
{
    unsigned char b = (unsigned char)sig;
    ssize_t r = write(sig_pipe[1], &b, 1);
    (void)r;
}

/* ---------------------------------------------------------------- options */

static bool in_list(const char *const *list, const char *name)
{
    for (; *list != NULL; list++)
        if (strcmp(*list, name) == 0)
            return true;
    return false;
}

static const struct gv_opt *find_opt(const struct gv_opt *tab, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(tab[i].name, name) == 0)
            return &tab[i];
    return NULL;
}

/* 0 launch's own, 1 servers only, 2 workers only, 3 both; *takes_value: the next token. */
static int route(const char *arg, bool *takes_value)
{
    char name[64];
    const char *eq = strchr(arg, '=');
    size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
    snprintf(name, sizeof(name), "%.*s", (int)GV_MIN(n, sizeof(name) - 1), arg);
    const char *base = strncmp(name, "no-", 3) == 0 ? name + 3 : name;
    const struct gv_opt *o;
    int where = 3;
    if ((o = find_opt(launch_options, GV_ARRAY_LEN(launch_options), base)) != NULL)
        where = 0;
    else if ((o = find_opt(gv_server_options, gv_server_options_n, base)) != NULL)
        where = 1;
    else if ((o = find_opt(gv_train_options, gv_train_options_n, base)) != NULL)
        where = 2;
    else if ((o = find_opt(gv_ops_server_options, gv_ops_server_options_n, base)) != NULL)
        /* checkpoints concern both (the workers keep their residual's); the metrics address
         * is given to each server with its own port (start_one) */
        where = strncmp(base, "checkpoint", 10) == 0 ? 3
                : strcmp(base, "metrics-addr") == 0  ? 0
                                                     : 1;
    else if ((o = find_opt(gv_job_options, gv_job_options_n, base)) == NULL &&
             (o = find_opt(gv_cluster_options, gv_cluster_options_n, base)) == NULL)
        o = find_opt(gv_ops_common_options, gv_ops_common_options_n, base);
    *takes_value = eq == NULL && (o == NULL || o->type != GV_OPT_BOOL) && base == name;
    if (strcmp(base, "config") == 0)
        *takes_value = eq == NULL;
    return where;
}

/* A worker option as the variable a command's libgravac reads: "--cf=100" or "--cf" "100" ->
 * GV_CF=100, "--fp16" -> GV_FP16=true, "--no-fp16" -> GV_FP16=false, "--config F" ->
 * GV_CONFIG=F. */
static gv_status_t launch_env_arg(struct launch *L, const char *arg, const char *next)
{
    char name[80], value[1024];
    const char *eq = strchr(arg, '=');
    size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
    snprintf(name, sizeof(name), "%.*s", (int)GV_MIN(n, sizeof(name) - 1), arg);
    bool neg = strncmp(name, "no-", 3) == 0 && next == NULL && eq == NULL;
    const char *base = neg ? name + 3 : name;
    snprintf(value, sizeof(value), "%s", eq ? eq + 1 : next ? next : neg ? "false" : "true");
    char *e = gv_malloc(strlen(base) + strlen(value) + 8);
    if (e == NULL)
        return GV_ERR_NOMEM;
    size_t j = (size_t)sprintf(e, "GV_");
    for (const char *c = base; *c != '\0'; c++)
        e[j++] = *c == '-' ? '_' : (char)(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
    sprintf(e + j, "=%s", value);
    L->cmd_env[L->n_cmd_env++] = e;
    return GV_OK;
}

static gv_status_t launch_parse(struct launch *L, int argc, char **argv, struct gv_cfg **cfg_p)
{
    /* "--" ends gravac's options: what follows is the workers' command */
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--") == 0) {
            if (i + 1 == argc) {
                fprintf(stderr, "gravac-launch: no command after \"--\"\n");
                return GV_ERR_INVAL;
            }
            L->cmd = argv + i + 1;
            argc = i;
            break;
        }
    /* launch's own table first, then the shared ones, less the cluster options launch sets
     * itself for its children */
    static struct gv_opt cl_opts[32];
    size_t ncl = 0;
    for (size_t i = 0; i < gv_cluster_options_n && ncl < GV_ARRAY_LEN(cl_opts); i++)
        if (!in_list(launch_owned, gv_cluster_options[i].name))
            cl_opts[ncl++] = gv_cluster_options[i];
    static struct gv_opt_table tables[1 + GV_PS_OPTION_TABLES];
    tables[0] = (struct gv_opt_table){launch_options, GV_ARRAY_LEN(launch_options), &L->lo};
    gv_ps_option_tables(&L->ps, tables + 1);
    for (size_t t = 1; t < GV_ARRAY_LEN(tables); t++)
        if (tables[t].opts == gv_cluster_options)
            tables[t] = (struct gv_opt_table){cl_opts, ncl, &L->ps.cl};
    static const char *const others[] = {"server", "worker", NULL};
    static struct gv_cfg_spec spec = {
        .program = "gravac-launch",
        .summary = "start S servers and W workers on this machine and train (options other than "
                   "launch's own go to the servers, the workers or both); with '-- COMMAND "
                   "[ARGS]' each worker runs COMMAND (a PyTorch script using gravac.torch), its "
                   "rank and options in GV_* variables",
        .section = "launch",
        .other_sections = others,
        .tables = tables,
        .n_tables = GV_ARRAY_LEN(tables)};
    gv_status_t status = gv_cfg_create(&spec, cfg_p);
    if (status == GV_OK)
        status = gv_cfg_load(*cfg_p, argc, argv, environ);
    if (status != GV_OK)
        return status;
    L->server_args = gv_calloc((size_t)argc + 3, sizeof(char *));
    L->worker_args = gv_calloc((size_t)argc + 1, sizeof(char *));
    L->cmd_env = gv_calloc((size_t)argc + 1, sizeof(char *));
    if (L->server_args == NULL || L->worker_args == NULL || L->cmd_env == NULL)
        return GV_ERR_NOMEM;
    enum gv_cfg_source src;
    const char *txt;
    L->set_model =
        gv_cfg_source(*cfg_p, "model", &src, NULL, &txt) == GV_OK && src != GV_CFG_SRC_DEFAULT;
    L->set_optimizer =
        gv_cfg_source(*cfg_p, "optimizer", &src, NULL, &txt) == GV_OK && src != GV_CFG_SRC_DEFAULT;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0)
            continue; /* a value, consumed below; gv_cfg refused stray words */
        bool tv;
        int where = route(a + 2, &tv);
        bool has_val = tv && i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0;
        if (where & 1) {
            L->server_args[L->n_server_args++] = argv[i];
            if (has_val)
                L->server_args[L->n_server_args++] = argv[i + 1];
        }
        if (where & 2) {
            L->worker_args[L->n_worker_args++] = argv[i];
            if (has_val)
                L->worker_args[L->n_worker_args++] = argv[i + 1];
            if (strncmp(a, "--metrics-file", 14) == 0)
                L->user_metrics = true;
            if (L->cmd != NULL && launch_env_arg(L, a + 2, has_val ? argv[i + 1] : NULL) != GV_OK)
                return GV_ERR_NOMEM;
        }
        if (has_val)
            i++;
    }
    return GV_OK;
}

/* ---------------------------------------------------------------- children */

static void launch_out(const struct child *c, const char *line, size_t n)
{
    printf("[%s] %.*s\n", c->name, (int)n, line);
}

static void child_drain(struct child *c, bool eof)
{
    size_t start = 0;
    for (size_t i = 0; i < c->len; i++)
        if (c->buf[i] == '\n') {
            launch_out(c, c->buf + start, i - start);
            start = i + 1;
        }
    if (start == 0 && (c->len == sizeof(c->buf) || (eof && c->len > 0))) {
        launch_out(c, c->buf, c->len); /* an over-long or unterminated last line */
        start = c->len;
    }
    memmove(c->buf, c->buf + start, c->len - start);
    c->len -= start;
    fflush(stdout);
}

static void child_read(struct child *c)
{
    ssize_t r = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);
    if (r > 0) {
        c->len += (size_t)r;
        child_drain(c, false);
        return;
    }
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    child_drain(c, true);
    close(c->fd);
    c->fd = -1;
}

static gv_status_t spawn(struct launch *L, const char *role, int rank, char *const *argv,
                         char *const *env)
{
    struct child *c = &L->ch[L->n];
    int p[2];
    if (pipe(p) != 0) {
        gv_log(GV_LOG_ERROR, "launch: pipe: %s", strerror(errno));
        return GV_ERR_IO;
    }
    /* launch's handlers write to its signal pipe: a child must not run them between fork and
     * exec (a SIGTERM launch sends it then would read as one sent to launch), so the signals
     * stay blocked until the child has the default actions back */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGCHLD);
    sigprocmask(SIG_BLOCK, &block, &old);
    pid_t launch_pid = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        gv_log(GV_LOG_ERROR, "launch: fork: %s", strerror(errno));
        close(p[0]);
        close(p[1]);
        return GV_ERR_IO;
    }
    if (pid == 0) {
        setpgid(0, 0); /* Ctrl-C reaches launch only; it forwards the signal */
        /* launch killed outright (SIGKILL, an OOM kill) forwards nothing: the kernel sends
         * the child SIGTERM instead, so no server or worker outlives it; a launch that died
         * before this line is seen as a new parent */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != launch_pid)
            _exit(127);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGCHLD, SIG_DFL);
        close(sig_pipe[0]);
        close(sig_pipe[1]);
        sigprocmask(SIG_SETMASK, &old, NULL);
        dup2(p[1], STDOUT_FILENO);
        dup2(p[1], STDERR_FILENO);
        close(p[0]);
        close(p[1]);
        for (int i = 0; env != NULL && env[i] != NULL; i++)
            putenv(env[i]);
        execvp(argv[0], argv); /* a command (python3 ...) is looked up in PATH */
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(p[1]);
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    c->pid = pid;
    c->fd = p[0];
    snprintf(c->name, sizeof(c->name), "%s%d", role, rank);
    L->n++;
    return GV_OK;
}

/* argv for one child: program, passthrough options, then what launch decides. */
static gv_status_t start_one(struct launch *L, const char *prog, bool server, int rank)
{
    char path[1100], num[4][32], metrics[700], maddr[300];
    const char *argv[256];
    int n = 0;
    snprintf(path, sizeof(path), "%s/%s", L->lo.bin_dir, prog);
    argv[n++] = path;
    char **pass = server ? L->server_args : L->worker_args;
    int np = server ? L->n_server_args : L->n_worker_args;
    for (int i = 0; i < np && n < 240; i++)
        argv[n++] = pass[i];
    snprintf(num[0], sizeof(num[0]), "--num-servers=%d", L->lo.servers);
    snprintf(num[1], sizeof(num[1]), "--num-workers=%d", L->lo.workers);
    snprintf(num[2], sizeof(num[2]), "--rank=%d", rank);
    argv[n++] = num[0];
    argv[n++] = num[1];
    argv[n++] = num[2];
    argv[n++] = "--rendezvous-dir";
    argv[n++] = L->dir;
    if (server) {
        argv[n++] = "--bind=127.0.0.1:0";
        const struct gv_hostport *ma = &L->ps.os.metrics_addr;
        if (ma->host[0] != '\0' || ma->port != 0) {
            /* one port per server: PORT, PORT+1, ... (0 stays ephemeral) */
            unsigned port = ma->port ? ma->port + (unsigned)rank : 0;
            bool v6 = strchr(ma->host, ':') != NULL;
            snprintf(maddr, sizeof(maddr), "--metrics-addr=%s%s%s:%u", v6 ? "[" : "", ma->host,
                     v6 ? "]" : "", port);
            argv[n++] = maddr;
        }
    } else if (!L->user_metrics) {
        snprintf(metrics, sizeof(metrics), "--metrics-file=%s/worker%%r.jsonl", L->dir);
        argv[n++] = metrics;
    }
    argv[n] = NULL;
    return spawn(L, server ? "server" : "worker", rank, (char *const *)argv, NULL);
}

/* A worker that is the user's command: the cluster, its rank and the worker options in its
 * environment (libgravac reads them, as it reads mpirun's and srun's). */
static gv_status_t start_cmd(struct launch *L, int rank)
{
    static char vars[8][1100];
    char *env[8 + 256];
    int n = 0;
    snprintf(vars[0], sizeof(vars[0]), "GV_NUM_SERVERS=%d", L->lo.servers);
    snprintf(vars[1], sizeof(vars[1]), "GV_NUM_WORKERS=%d", L->lo.workers);
    snprintf(vars[2], sizeof(vars[2]), "GV_RANK=%d", rank);
    snprintf(vars[3], sizeof(vars[3]), "GV_LOCAL_RANK=%d", rank);
    snprintf(vars[4], sizeof(vars[4]), "GV_RENDEZVOUS_DIR=%s", L->dir);
    for (int i = 0; i < 5; i++)
        env[n++] = vars[i];
    if (!L->user_metrics) {
        snprintf(vars[5], sizeof(vars[5]), "GV_METRICS_FILE=%s/worker%%r.jsonl", L->dir);
        env[n++] = vars[5];
    }
    for (int i = 0; i < L->n_cmd_env && n < 8 + 250; i++)
        env[n++] = L->cmd_env[i];
    env[n] = NULL;
    return spawn(L, "worker", rank, L->cmd, env);
}

/* What the command's workers find without installing anything: the Python package of this
 * build tree (bin/../python) on PYTHONPATH, and one compute thread each unless the user set
 * OMP_NUM_THREADS (several workers share this machine's cores; torchrun does the same). */
static void launch_cmd_setup(struct launch *L)
{
    char py[1100], path[4200];
    snprintf(py, sizeof(py), "%s/../python/gravac", L->lo.bin_dir);
    if (access(py, R_OK) == 0) {
        const char *old = getenv("PYTHONPATH");
        snprintf(path, sizeof(path), "%s/../python%s%s", L->lo.bin_dir, old ? ":" : "",
                 old ? old : "");
        setenv("PYTHONPATH", path, 1);
    }
    if (getenv("OMP_NUM_THREADS") == NULL && L->lo.workers > 1) {
        setenv("OMP_NUM_THREADS", "1", 1);
        printf("gravac-launch: OMP_NUM_THREADS=1 for each worker (set it to change)\n");
    }
    /* the servers take the layout and the optimizer from the workers */
    static char model[] = "--model=external", optim[] = "--optimizer=caller";
    if (!L->set_model)
        L->server_args[L->n_server_args++] = model;
    if (!L->set_optimizer)
        L->server_args[L->n_server_args++] = optim;
}

static void signal_all(struct launch *L, int sig)
{
    for (int i = 0; i < L->n; i++)
        if (!L->ch[i].exited) {
            L->ch[i].sent_sig = sig;
            kill(L->ch[i].pid, sig);
        }
}

/* Killed by a signal gravac-launch sent it: a consequence of another failure, not a cause. */
static bool killed_by_us(const struct child *c)
{
    return WIFSIGNALED(c->status) && c->sent_sig != 0 && WTERMSIG(c->status) == c->sent_sig;
}

static void describe_exit(const struct child *c, char *out, size_t len);

/* Collects exited children and keeps the failure to name. A process killed by a signal is the
 * likelier cause than one that exited 1 (the others exit 1 once they notice it is gone, and a
 * dying process closes its sockets before it becomes a zombie), so it replaces the first
 * failure seen when it shows up within a second of it, unless gravac-launch sent that signal
 * itself (stopping the others after the first failure). Under the continue policy a worker's
 * failure is the servers' to judge: the job goes on, and it only counts if the job fails. */
static void reap(struct launch *L, struct child **failed, uint64_t *failed_ns)
{
    for (int i = 0; i < L->n; i++) {
        struct child *c = &L->ch[i];
        int st;
        if (c->exited || waitpid(c->pid, &st, WNOHANG) != c->pid)
            continue;
        c->exited = true;
        c->status = st;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
            continue;
        if (L->ps.os.dead_worker_policy == GV_DEAD_CONTINUE && *failed == NULL &&
            strncmp(c->name, "worker", 6) == 0) {
            char why[96];
            describe_exit(c, why, sizeof(why));
            fprintf(stderr,
                    "gravac-launch: %s failed (%s): the job goes on without it "
                    "(--dead-worker-policy continue)\n",
                    c->name, why);
            L->lost++;
            continue;
        }
        if (*failed == NULL) {
            *failed = c;
            *failed_ns = gv_now_ns();
        } else if (WIFSIGNALED(st) && !killed_by_us(c) && !WIFSIGNALED((*failed)->status) &&
                   gv_now_ns() - *failed_ns < 1000000000ull) {
            *failed = c;
        }
    }
}

static int running(const struct launch *L)
{
    int n = 0;
    for (int i = 0; i < L->n; i++)
        n += !L->ch[i].exited || L->ch[i].fd >= 0;
    return n;
}

static void describe_exit(const struct child *c, char *out, size_t len)
{
    if (WIFEXITED(c->status))
        snprintf(out, len, "exit status %d", WEXITSTATUS(c->status));
    else if (WIFSIGNALED(c->status))
        snprintf(out, len, "killed by signal %d (%s)%s", WTERMSIG(c->status),
                 strsignal(WTERMSIG(c->status)), killed_by_us(c) ? ", sent by gravac-launch" : "");
    else
        snprintf(out, len, "status 0x%x", (unsigned)c->status);
}

/* The event loop: forwards output, watches exits and signals. Returns the exit status. */
static int supervise(struct launch *L)
{
    struct child *failed = NULL;
    uint64_t failed_ns = 0;
    int got_sig = 0;
    uint64_t kill_at = 0;
    while (running(L) > 0) {
        struct pollfd pf[L_MAX_CHILDREN + 1];
        struct child *who[L_MAX_CHILDREN + 1];
        int n = 0;
        pf[n] = (struct pollfd){.fd = sig_pipe[0], .events = POLLIN};
        who[n++] = NULL;
        for (int i = 0; i < L->n; i++)
            if (L->ch[i].fd >= 0) {
                pf[n] = (struct pollfd){.fd = L->ch[i].fd, .events = POLLIN};
                who[n++] = &L->ch[i];
            }
        int r = poll(pf, (nfds_t)n, 100);
        for (int i = 0; r > 0 && i < n; i++) {
            if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (who[i] != NULL) {
                child_read(who[i]);
                continue;
            }
            unsigned char b;
            if (read(sig_pipe[0], &b, 1) == 1 && b != SIGCHLD && !got_sig) {
                got_sig = b;
                fprintf(stderr, "gravac-launch: %s: stopping every process\n", strsignal(b));
                signal_all(L, b); /* forwarded as received (SIGINT or SIGTERM) */
                kill_at = gv_now_ns() + L->lo.grace;
            }
        }
        struct child *was = failed;
        reap(L, &failed, &failed_ns);
        if (failed != NULL && was == NULL && !got_sig) {
            char why[96];
            describe_exit(failed, why, sizeof(why));
            fprintf(stderr, "gravac-launch: %s failed (%s): stopping the others\n", failed->name,
                    why);
            signal_all(L, SIGTERM);
            kill_at = gv_now_ns() + L->lo.grace;
        }
        if (kill_at != 0 && gv_now_ns() > kill_at) {
            fprintf(stderr, "gravac-launch: grace period over: killing what is left\n");
            signal_all(L, SIGKILL);
            kill_at = UINT64_MAX;
        }
    }
    fflush(stdout);
    if (got_sig)
        return 128 + got_sig;
    if (failed != NULL) {
        char why[96], others[600] = "";
        size_t off = 0;
        describe_exit(failed, why, sizeof(why));
        for (int i = 0; i < L->n && off < sizeof(others) - 48; i++) {
            const struct child *c = &L->ch[i];
            if (c == failed || (WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0))
                continue;
            char w[96];
            describe_exit(c, w, sizeof(w));
            off += (size_t)snprintf(others + off, sizeof(others) - off, "%s%s (%s)",
                                    off ? ", " : "; then ", c->name, w);
        }
        fprintf(stderr, "gravac-launch: FAILED: %s (%s)%s\n", failed->name, why, others);
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- set-up and summary */

static gv_status_t launch_secret(struct launch *L, const struct gv_ops_common_cfg *oc)
{
    (void)oc;
    /* a generated secret when the user gave none: local runs are authenticated by default */
    char path[600];
    snprintf(path, sizeof(path), "%s/secret", L->dir);
    FILE *rnd = fopen("/dev/urandom", "rb");
    unsigned char key[32];
    if (rnd == NULL || fread(key, 1, sizeof(key), rnd) != sizeof(key)) {
        if (rnd != NULL)
            fclose(rnd);
        gv_log(GV_LOG_ERROR, "launch: cannot read /dev/urandom");
        return GV_ERR_IO;
    }
    fclose(rnd);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        gv_log(GV_LOG_ERROR, "launch: cannot create %s: %s", path, strerror(errno));
        return GV_ERR_IO;
    }
    char hex[65];
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", key[i]);
    bool ok = write(fd, hex, 64) == 64;
    close(fd);
    if (!ok)
        return GV_ERR_IO;
    return setenv("GV_SECRET_FILE", path, 1) == 0 ? GV_OK : GV_ERR_IO;
}

static void launch_summary(struct launch *L, double secs)
{
    char path[700];
    snprintf(path, sizeof(path), "%s/worker0.jsonl", L->dir);
    FILE *f = L->user_metrics ? NULL : fopen(path, "r");
    printf("gravac-launch: done in %.1f s: %d servers, %d workers\n", secs, L->lo.servers,
           L->lo.workers);
    if (f == NULL) {
        fflush(stdout);
        return;
    }
    char *line = NULL;
    size_t cap = 0;
    double cfs[64];
    uint64_t its[64];
    int ncf = 0;
    uint64_t changes = 0;
    double last = -1;
    cJSON *sum = NULL;
    while (getline(&line, &cap, f) > 0) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *t = cJSON_GetObjectItem(o, "type");
        if (cJSON_IsString(t) && strcmp(t->valuestring, "iter") == 0) {
            double cf = cJSON_GetNumberValue(cJSON_GetObjectItem(o, "cf"));
            int k = 0;
            while (k < ncf && cfs[k] != cf)
                k++;
            if (k == ncf && ncf < 64) {
                cfs[ncf] = cf;
                its[ncf++] = 0;
            }
            if (k < ncf)
                its[k]++;
            changes += last >= 0 && cf != last;
            last = cf;
        } else if (cJSON_IsString(t) && strcmp(t->valuestring, "summary") == 0) {
            cJSON_Delete(sum);
            sum = o;
            o = NULL;
        }
        cJSON_Delete(o);
    }
    free(line);
    fclose(f);
    if (sum != NULL) {
        const cJSON *acc = cJSON_GetObjectItem(sum, "accuracy");
        double iters = cJSON_GetNumberValue(cJSON_GetObjectItem(sum, "iterations"));
        double it = iters > 0 ? iters : 1;
        char s[32], r[32];
        gv_ps_fmt_bytes(cJSON_GetNumberValue(cJSON_GetObjectItem(sum, "bytes_sent")) / it, s,
                        sizeof(s));
        gv_ps_fmt_bytes(cJSON_GetNumberValue(cJSON_GetObjectItem(sum, "bytes_recv")) / it, r,
                        sizeof(r));
        printf("gravac-launch: %.0f iterations, %.0f samples/s", iters,
               cJSON_GetNumberValue(cJSON_GetObjectItem(sum, "samples_per_s")));
        if (cJSON_IsNumber(acc))
            printf(", final test accuracy %.2f%%", 100.0 * acc->valuedouble);
        printf("\ngravac-launch: bytes per iteration and worker: sent %s, received %s\n", s, r);
        cJSON_Delete(sum);
    }
    printf("gravac-launch: CF timeline: %" PRIu64 " changes, last CF %g; iterations per CF:",
           changes, last);
    for (int k = 0; k < ncf; k++)
        printf(" %g x%" PRIu64, cfs[k], its[k]);
    printf("\n");
    fflush(stdout);
}

static void launch_bin_dir(struct launch *L)
{
    static char dir[1024];
    if (L->lo.bin_dir[0] != '\0')
        return;
    ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
    if (n <= 0) {
        snprintf(dir, sizeof(dir), ".");
    } else {
        dir[n] = '\0';
        char *slash = strrchr(dir, '/');
        if (slash != NULL)
            *slash = '\0';
    }
    L->lo.bin_dir = dir;
}

static void remove_dir(const char *dir)
{
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "gravac-launch: could not remove %s\n", dir);
}

int main(int argc, char **argv)
{
    static struct launch L;
    gv_log_set_tag("launch");
    struct gv_cfg *cfg = NULL;
    if (launch_parse(&L, argc, argv, &cfg) != GV_OK) {
        gv_cfg_destroy(cfg);
        return 2;
    }
    if (gv_cfg_help_requested(cfg)) {
        gv_cfg_print_help(cfg, stdout);
        gv_cfg_destroy(cfg);
        return 0;
    }
    launch_bin_dir(&L);
    /* the children get their cluster from the command line: a GV_SERVERS meant for launch (a
     * count) or an inherited host list or advertised name would mislead them */
    unsetenv("GV_SERVERS");
    unsetenv("GV_ADVERTISE");
    const char *tmp = L.lo.tmp_dir[0] ? L.lo.tmp_dir : getenv("TMPDIR");
    snprintf(L.dir, sizeof(L.dir), "%s/gravac-launch-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(L.dir) == NULL) {
        fprintf(stderr, "gravac-launch: cannot create a run directory in %s: %s\n",
                tmp ? tmp : "/tmp", strerror(errno));
        gv_cfg_destroy(cfg);
        return 1;
    }
    enum gv_cfg_source src_ins, src_sf;
    const char *txt = NULL;
    bool insecure = gv_cfg_source(cfg, "insecure", &src_ins, NULL, &txt) == GV_OK && txt &&
                    strcmp(txt, "true") == 0;
    bool has_file =
        gv_cfg_source(cfg, "secret-file", &src_sf, NULL, &txt) == GV_OK && txt && txt[0] != '\0';
    int rc = 1;
    if (!insecure && !has_file && getenv("GV_SECRET") == NULL && launch_secret(&L, NULL) != GV_OK)
        goto out;
    if (pipe(sig_pipe) != 0)
        goto out;
    fcntl(sig_pipe[1], F_SETFL, O_NONBLOCK);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = launch_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGCHLD, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (L.cmd != NULL)
        launch_cmd_setup(&L);
    printf("gravac-launch: %d servers, %d workers on this machine; run directory %s\n",
           L.lo.servers, L.lo.workers, L.dir);
    if (L.cmd != NULL)
        printf("gravac-launch: workers run '%s'%s (ranks and the cluster in GV_* variables)\n",
               L.cmd[0], L.cmd[1] != NULL ? " ..." : "");
    fflush(stdout);
    double t0 = gv_now_s();
    bool spawned = true;
    for (int s = 0; s < L.lo.servers && spawned; s++)
        spawned = start_one(&L, "gravac-server", true, s) == GV_OK;
    for (int w = 0; w < L.lo.workers && spawned; w++)
        spawned =
            (L.cmd != NULL ? start_cmd(&L, w) : start_one(&L, "gravac-worker", false, w)) == GV_OK;
    if (!spawned)
        signal_all(&L, SIGTERM);
    rc = supervise(&L);
    if (!spawned && rc == 0)
        rc = 1;
    if (rc == 0)
        launch_summary(&L, gv_now_s() - t0);
    if (rc == 0 && L.lost > 0)
        printf("gravac-launch: %d worker%s failed; the job finished without %s (dead-worker "
               "policy continue)\n",
               L.lost, L.lost == 1 ? "" : "s", L.lost == 1 ? "it" : "them");
out:
    if (L.lo.keep_dir || rc != 0)
        fprintf(stderr, "gravac-launch: run directory kept: %s\n", L.dir);
    else
        remove_dir(L.dir);
    gv_free(L.server_args);
    gv_free(L.worker_args);
    for (int i = 0; i < L.n_cmd_env; i++)
        gv_free(L.cmd_env[i]);
    gv_free(L.cmd_env);
    gv_cfg_destroy(cfg);
    return rc;
}
