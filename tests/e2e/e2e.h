/* e2e.h: helpers of the end-to-end tests: start the real gravac-server and gravac-worker
 * programs (stdout and stderr to a log file each), wait for them with a deadline (killing what
 * is left), read files and JSON lines back. */
#ifndef GV_E2E_H
#define GV_E2E_H

#include "check.h"
#include "gv_common.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define E2E_MAX_ARGS 96
#define E2E_MAX_PROCS 16

struct e2e_proc {
    pid_t pid;
    char name[32];
    char log[1024];
    int status;
    bool done;
};

struct e2e_job {
    struct e2e_proc p[E2E_MAX_PROCS];
    int n;
};

/* Splits s on blanks into argv (the strings point into buf). */
static inline int e2e_split(const char *s, char *buf, size_t len, char **argv, int max)
{
    snprintf(buf, len, "%s", s);
    int n = 0;
    for (char *save = NULL, *t = strtok_r(buf, " ", &save); t != NULL && n < max - 1;
         t = strtok_r(NULL, " ", &save))
        argv[n++] = t;
    argv[n] = NULL;
    return n;
}

/* Starts prog with the blank-separated args; output to log. */
static inline pid_t e2e_spawn(struct e2e_job *j, const char *name, const char *prog,
                              const char *args, const char *log)
{
    char buf[4096];
    char *argv[E2E_MAX_ARGS];
    argv[0] = (char *)prog;
    e2e_split(args, buf, sizeof(buf), argv + 1, E2E_MAX_ARGS - 1);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execv(prog, argv);
        _exit(127);
    }
    struct e2e_proc *p = &j->p[j->n++];
    memset(p, 0, sizeof(*p));
    p->pid = pid;
    snprintf(p->name, sizeof(p->name), "%s", name);
    snprintf(p->log, sizeof(p->log), "%s", log);
    return pid;
}

/* Waits for every process, at most timeout_s seconds; then kills the rest (counted as failed).
 * Returns how many ended with exit status 0. */
static inline int e2e_wait(struct e2e_job *j, double timeout_s)
{
    uint64_t end = gv_now_ns() + (uint64_t)(timeout_s * 1e9);
    int left = 0;
    for (int i = 0; i < j->n; i++)
        left += !j->p[i].done;
    while (left > 0) {
        for (int i = 0; i < j->n; i++) {
            struct e2e_proc *p = &j->p[i];
            if (!p->done && waitpid(p->pid, &p->status, WNOHANG) == p->pid) {
                p->done = true;
                left--;
            }
        }
        if (left == 0)
            break;
        if (gv_now_ns() > end) {
            for (int i = 0; i < j->n; i++)
                if (!j->p[i].done) {
                    fprintf(stderr, "e2e: %s still running after %.0f s: killed\n", j->p[i].name,
                            timeout_s);
                    kill(j->p[i].pid, SIGKILL);
                    waitpid(j->p[i].pid, &j->p[i].status, 0);
                    j->p[i].status = -1;
                    j->p[i].done = true;
                }
            break;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    int ok = 0;
    for (int i = 0; i < j->n; i++)
        ok += j->p[i].status != -1 && WIFEXITED(j->p[i].status) && WEXITSTATUS(j->p[i].status) == 0;
    return ok;
}

static inline int e2e_exit_code(const struct e2e_proc *p)
{
    return p->status != -1 && WIFEXITED(p->status) ? WEXITSTATUS(p->status) : -1;
}

/* The whole file, NUL-terminated (free it); NULL when unreadable. *len_p may be NULL. */
static inline char *e2e_slurp(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf != NULL) {
        buf[n] = '\0';
        if (len_p != NULL)
            *len_p = (size_t)n;
    }
    return buf;
}

static inline void e2e_dump_log(const struct e2e_proc *p)
{
    char *s = e2e_slurp(p->log, NULL);
    fprintf(stderr, "---- %s (%s), exit %d:\n%s\n", p->name, p->log, e2e_exit_code(p),
            s ? s : "(no log)");
    free(s);
}

static inline void e2e_rmdir(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "e2e: cannot remove %s\n", dir);
}

/* The records of type `type` of a JSON-lines file, as an array (cJSON_Delete it). */
static inline cJSON *e2e_records(const char *path, const char *type)
{
    char *s = e2e_slurp(path, NULL);
    cJSON *arr = cJSON_CreateArray();
    for (char *save = NULL, *line = s ? strtok_r(s, "\n", &save) : NULL; line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *t = cJSON_GetObjectItem(o, "type");
        if (cJSON_IsString(t) && strcmp(t->valuestring, type) == 0)
            cJSON_AddItemToArray(arr, o);
        else
            cJSON_Delete(o);
    }
    free(s);
    return arr;
}

static inline double e2e_num(const cJSON *o, const char *key)
{
    return cJSON_GetNumberValue(cJSON_GetObjectItem(o, key));
}

#endif /* GV_E2E_H */
