/* fuzz_replay.c: the ctest side of a fuzz target. Feeds every file of the corpus directories
 * given on the command line to LLVMFuzzerTestOneInput, then about REPLAY_BUDGET deterministic
 * mutations spread over them (byte flips, truncations, insertions, splices; seeded, so a failure
 * reproduces). A crash, a sanitizer report or a broken invariant fails the test. Built with
 * the normal compiler; the real libFuzzer binaries are built when GV_FUZZ=ON with clang. */
#include "fuzz.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define REPLAY_MAX_INPUT (1u << 20)
#define REPLAY_BUDGET 30000 /* mutated inputs per run, spread over the corpus */
#define GV_FUZZ_MIN(a, b) ((a) < (b) ? (a) : (b))
#define GV_FUZZ_MAX(a, b) ((a) > (b) ? (a) : (b))

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

struct input {
    uint8_t *data;
    size_t len;
};

static int load_dir(const char *dir, struct input **in_p, size_t *n_p)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        fprintf(stderr, "fuzz replay: cannot open %s\n", dir);
        return -1;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "rb");
        if (f == NULL)
            continue;
        uint8_t *buf = malloc(REPLAY_MAX_INPUT);
        size_t len = buf ? fread(buf, 1, REPLAY_MAX_INPUT, f) : 0;
        fclose(f);
        struct input *grown = realloc(*in_p, (*n_p + 1) * sizeof(**in_p));
        if (buf == NULL || grown == NULL) {
            free(buf);
            closedir(d);
            return -1;
        }
        *in_p = grown;
        (*in_p)[(*n_p)++] = (struct input){buf, len};
    }
    closedir(d);
    return 0;
}

/* One mutation of `src` into `dst` (capacity src->len + 64); returns the new length. */
static size_t mutate(const struct input *src, const struct input *other, uint8_t *dst)
{
    size_t len = src->len;
    memcpy(dst, src->data, len);
    int rounds = 1 + (int)(rng() % 4);
    for (int r = 0; r < rounds; r++) {
        size_t pos = len ? (size_t)(rng() % len) : 0;
        switch (rng() % 5) {
        case 0:
            if (len)
                dst[pos] ^= (uint8_t)(1u << (rng() % 8));
            break;
        case 1:
            if (len)
                dst[pos] = (uint8_t)rng();
            break;
        case 2: len = pos; break;
        case 3:
            if (len < src->len + 60) {
                memmove(dst + pos + 1, dst + pos, len - pos);
                dst[pos] = (uint8_t)rng();
                len++;
            }
            break;
        default:
            if (other->len && len) { /* splice a run of the other input in */
                size_t from = (size_t)(rng() % other->len);
                size_t n = GV_FUZZ_MIN(other->len - from, len - pos);
                memcpy(dst + pos, other->data + from, GV_FUZZ_MIN(n, 16));
            }
            break;
        }
    }
    return len;
}

/* Runs the target on a heap copy of exactly len bytes, so that ASan sees a read past the end. */
static void run_exact(const uint8_t *data, size_t len)
{
    uint8_t *exact = malloc(len ? len : 1);
    if (exact == NULL)
        abort();
    memcpy(exact, data, len);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
}

int main(int argc, char **argv)
{
    struct input *in = NULL;
    size_t n = 0, runs = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++)
        if (load_dir(argv[i], &in, &n) != 0)
            return 1;
    if (n == 0) {
        fprintf(stderr, "fuzz replay: empty corpus\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++, runs++)
        run_exact(in[i].data, in[i].len);
    size_t per_seed = GV_FUZZ_MIN(1000, GV_FUZZ_MAX(20, REPLAY_BUDGET / n));
    for (size_t i = 0; i < n; i++) {
        uint8_t *buf = malloc(in[i].len + 64);
        if (buf == NULL)
            return 1;
        for (size_t m = 0; m < per_seed; m++, runs++) {
            size_t len = mutate(&in[i], &in[rng() % n], buf);
            run_exact(buf, len);
        }
        free(buf);
    }
    for (size_t i = 0; i < n; i++)
        free(in[i].data);
    free(in);
    printf("fuzz replay: %zu corpus files, %zu inputs run, no failure\n", n, runs);
    return 0;
}
