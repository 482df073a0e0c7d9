/* bench_test.h: helpers of the bench smoke tests: run gravac-bench with a deadline (output to
 * a log), read files, check CSV shape and image signatures. */
#ifndef GV_BENCH_TEST_H
#define GV_BENCH_TEST_H

#include "check.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Runs argv (argv[0] a path) with stdout/stderr to log, at most timeout_s; returns the exit
 * status, 128 + signal, or -1 when it had to be killed. */
static inline int bt_test_run(char *const argv[], const char *log, int timeout_s)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    for (int i = 0; i < timeout_s * 20; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGTERM); /* the bench stops its children and removes its namespaces */
    for (int i = 0; i < 200; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return -1;
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static inline char *bt_test_slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s != NULL && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s != NULL)
        s[n] = '\0';
    fclose(f);
    return s;
}

static inline void bt_test_dump(const char *path)
{
    char *s = bt_test_slurp(path);
    fprintf(stderr, "---- %s\n%s\n----\n", path, s ? s : "(unreadable)");
    free(s);
}

/* Rows of a CSV file (header included) into *rows; every row must have cols fields. */
static inline bool bt_test_csv(const char *path, int cols, int *rows)
{
    char *s = bt_test_slurp(path);
    *rows = 0;
    if (s == NULL)
        return false;
    bool ok = true;
    for (char *save = NULL, *line = strtok_r(s, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        int n = 1;
        for (const char *p = line; *p; p++)
            n += *p == ',';
        if (n != cols) {
            fprintf(stderr, "%s: row %d has %d fields, want %d: %s\n", path, *rows, n, cols, line);
            ok = false;
        }
        (*rows)++;
    }
    free(s);
    return ok;
}

/* The file starts with the PNG signature (or is an SVG document) and is not tiny. */
static inline bool bt_test_image(const char *path)
{
    char *s = bt_test_slurp(path);
    if (s == NULL)
        return false;
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    bool ok = n > 2000 && (memcmp(s, "\x89PNG\r\n\x1a\n", 8) == 0 || strstr(s, "<svg") != NULL);
    free(s);
    return ok;
}

static inline bool bt_test_have(const char *prog)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", prog);
    return system(cmd) == 0;
}

static inline double bt_num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

#endif /* GV_BENCH_TEST_H */
