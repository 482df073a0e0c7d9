/* bench_train_proc.c: child processes for the benches (posix_spawn, bounded waits, a table of
 * the children so that an interrupt or an error stops every one of them), running short
 * commands with captured output, and the gnuplot driver. Nothing here knows about training. */
#include "bench_train.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define BT_MAX_CHILDREN 128

volatile sig_atomic_t bt_interrupted;

static pid_t bt_children[BT_MAX_CHILDREN];
static int bt_n_children;

static void bt_on_signal(int sig)
{
    (void)sig;
    bt_interrupted = 1;
}

void bt_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = bt_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

static void bt_child_add(pid_t pid)
{
    if (bt_n_children < BT_MAX_CHILDREN)
        bt_children[bt_n_children++] = pid;
}

static void bt_child_forget(pid_t pid)
{
    for (int i = 0; i < bt_n_children; i++)
        if (bt_children[i] == pid) {
            bt_children[i] = bt_children[--bt_n_children];
            return;
        }
}

static void bt_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

gv_status_t bt_spawn(char *const argv[], const char *log_path, pid_t *pid_p)
{
    if (bt_n_children >= BT_MAX_CHILDREN) {
        gv_log(GV_LOG_ERROR, "bench: too many child processes");
        return GV_ERR_INVAL;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    if (log_path != NULL) {
        posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
    }
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    /* its own process group: a terminal's Ctrl-C reaches the bench only, which stops the
     * children itself (and cleans up the namespaces) */
    posix_spawnattr_setpgroup(&at, 0);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&at, &none);
    sigset_t def;
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    sigaddset(&def, SIGINT);
    sigaddset(&def, SIGTERM);
    posix_spawnattr_setsigdefault(&at, &def);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    int ret = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (ret != 0) {
        gv_log(GV_LOG_ERROR, "bench: cannot start %s: %s", argv[0], strerror(ret));
        return GV_ERR_IO;
    }
    bt_child_add(pid);
    *pid_p = pid;
    return GV_OK;
}

static int bt_decode_status(int st)
{
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return 255;
}

gv_status_t bt_wait(pid_t pid, uint64_t deadline_ns, int *rc_p)
{
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            bt_child_forget(pid);
            *rc_p = bt_decode_status(st);
            return GV_OK;
        }
        if (r < 0 && errno != EINTR) {
            gv_log(GV_LOG_ERROR, "bench: waitpid %d: %s", (int)pid, strerror(errno));
            bt_child_forget(pid);
            return GV_ERR_IO;
        }
        if (bt_interrupted)
            return GV_ERR_CLOSED;
        if (gv_now_ns() >= deadline_ns)
            return GV_ERR_TIMEOUT;
        bt_sleep_ms(20);
    }
}

void bt_children_kill(int grace_ms)
{
    for (int i = 0; i < bt_n_children; i++)
        kill(bt_children[i], SIGTERM);
    uint64_t end = gv_now_ns() + (uint64_t)grace_ms * 1000000ull;
    while (bt_n_children > 0 && gv_now_ns() < end) {
        for (int i = 0; i < bt_n_children;) {
            int st;
            if (waitpid(bt_children[i], &st, WNOHANG) != 0)
                bt_children[i] = bt_children[--bt_n_children];
            else
                i++;
        }
        if (bt_n_children > 0)
            bt_sleep_ms(20);
    }
    for (int i = 0; i < bt_n_children; i++) {
        kill(bt_children[i], SIGKILL);
        int st;
        waitpid(bt_children[i], &st, 0);
    }
    bt_n_children = 0;
}

gv_status_t bt_exec(char *const argv[], int timeout_ms, char *out, size_t out_len, int *rc_p)
{
    int fds[2];
    if (pipe(fds) != 0) {
        gv_log(GV_LOG_ERROR, "bench: pipe: %s", strerror(errno));
        return GV_ERR_IO;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    pid_t pid;
    int ret = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (ret != 0) {
        close(fds[0]);
        if (out != NULL && out_len > 0)
            snprintf(out, out_len, "cannot start %s: %s", argv[0], strerror(ret));
        return GV_ERR_IO;
    }
    bt_child_add(pid);
    size_t got = 0;
    char sink[512];
    uint64_t end = gv_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    gv_status_t status = GV_OK;
    for (;;) { /* read until EOF (the child and its descendants closed the pipe) */
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        int n = poll(&p, 1, 100);
        if (n > 0) {
            char *dst = out != NULL && got + 1 < out_len ? out + got : sink;
            size_t room = out != NULL && got + 1 < out_len ? out_len - 1 - got : sizeof(sink);
            ssize_t r = read(fds[0], dst, room);
            if (r > 0 && dst != sink)
                got += (size_t)r;
            if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
                break;
        }
        if (bt_interrupted) {
            status = GV_ERR_CLOSED;
            break;
        }
        if (gv_now_ns() >= end) {
            status = GV_ERR_TIMEOUT;
            break;
        }
    }
    close(fds[0]);
    if (out != NULL && out_len > 0)
        out[GV_MIN(got, out_len - 1)] = '\0';
    if (status != GV_OK)
        kill(pid, SIGKILL);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    bt_child_forget(pid);
    int rc = status == GV_OK ? bt_decode_status(st) : -1;
    if (rc_p != NULL)
        *rc_p = rc;
    if (status == GV_OK && rc != 0)
        status = GV_ERR_IO;
    return status;
}

gv_status_t bt_split(const char *s, char **argv, int *argc, int cap, char *store, size_t store_len,
                     size_t *used)
{
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        if (*p == '\0')
            return GV_OK;
        size_t n = strcspn(p, " \t\n");
        if (*argc + 1 >= cap || *used + n + 1 > store_len) {
            gv_log(GV_LOG_ERROR, "bench: too many options in '%s'", s);
            return GV_ERR_INVAL;
        }
        memcpy(store + *used, p, n);
        store[*used + n] = '\0';
        argv[(*argc)++] = store + *used;
        argv[*argc] = NULL;
        *used += n + 1;
        p += n;
    }
}

gv_status_t bt_mkdirs(const char *path)
{
    char buf[1024];
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) {
        gv_log(GV_LOG_ERROR, "bench: path too long: %s", path);
        return GV_ERR_INVAL;
    }
    for (char *p = buf + 1;; p++) {
        bool end = *p == '\0';
        if (*p == '/' || end) {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
                gv_log(GV_LOG_ERROR, "bench: cannot create %s: %s", buf, strerror(errno));
                return GV_ERR_IO;
            }
            if (end)
                return GV_OK;
            *p = '/';
        }
    }
}

/* ---------------------------------------------------------------- gnuplot */

bool bt_have_gnuplot(void)
{
    char *argv[] = {"gnuplot", "--version", NULL};
    char out[128];
    return bt_exec(argv, 10000, out, sizeof(out), NULL) == GV_OK;
}

gv_status_t bt_gnuplot(const char *script_path)
{
    char *argv[] = {"gnuplot", (char *)(uintptr_t)script_path, NULL};
    char out[2048];
    gv_status_t status = bt_exec(argv, 60000, out, sizeof(out), NULL);
    if (status != GV_OK)
        gv_log(GV_LOG_ERROR, "bench: gnuplot %s failed (%s): %s", script_path,
               gv_status_str(status), out);
    return status;
}

void bt_gnuplot_terminal(const char *fmt, int w, int h, char *out, size_t len)
{
    if (strcmp(fmt, "svg") == 0)
        snprintf(out, len, "set terminal svg size %d,%d dynamic font 'sans,11'", w, h);
    else
        snprintf(out, len, "set terminal pngcairo size %d,%d font 'sans,10'", w, h);
}
