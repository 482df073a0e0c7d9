/* replay.c: runs a libFuzzer target (LLVMFuzzerTestOneInput) over every file of the corpus
 * directories (or single files) named on the command line, with any compiler, so that ctest
 * replays the committed corpora in every build. A crash, an abort from one of the target's
 * oracles, or a sanitizer report fails the test; so does finding no input at all (a missing
 * corpus must not pass silently). Files are read into exact-size heap blocks so that ASan
 * catches any read past the end of an input. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

/* Runs the target on one file; returns 0 on success, -1 when it cannot be read. */
static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size < 0) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        fclose(f);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    uint8_t *data = malloc(size > 0 ? size : 1);
    if (data == NULL || fread(data, 1, size, f) != size) {
        fprintf(stderr, "replay: %s: short read\n", path);
        free(data);
        fclose(f);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(data, size);
    free(data);
    return 0;
}

static int skip_entry(const struct dirent *e)
{
    return e->d_name[0] != '.';
}

/* Replays every regular file in dir in name order; returns the count or -1. */
static long replay_dir(const char *dir)
{
    struct dirent **names;
    int n = scandir(dir, &names, skip_entry, alphasort);
    long done = 0;
    int failed = 0;

    if (n < 0) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (replay_file(path) == 0)
                done++;
            else
                failed = 1;
        }
        free(names[i]);
    }
    free(names);
    return failed ? -1 : done;
}

int main(int argc, char **argv)
{
    long total = 0;

    if (LLVMFuzzerInitialize != NULL)
        LLVMFuzzerInitialize(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        struct stat st;
        long n;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        n = S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : (replay_file(argv[i]) == 0 ? 1 : -1);
        if (n < 0)
            return 1;
        total += n;
    }
    printf("replay: %ld inputs ran\n", total);
    if (total == 0) {
        fprintf(stderr, "replay: no inputs found\n");
        return 1;
    }
    return 0;
}
