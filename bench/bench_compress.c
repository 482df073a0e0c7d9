/* bench_compress.c: `gravac-bench compress`, throughput of every compressor per CF and tensor
 * size, with one thread and all threads, next to a memcpy of the same n floats measured in the
 * same run (the ratio is against single-thread memcpy). A multi-level row compares top-k to
 * cf_min then to the candidate within that (gv_cmp_select_sub) against top-k of the full tensor
 * twice. --device cuda runs the CUDA backend (device memcpy as the baseline). */
#include "bench.h"
#include "gv_compress.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LIST 16

struct opts {
    double sizes[MAX_LIST];
    int nsizes;
    double cfs[MAX_LIST];
    int ncfs;
    enum gv_cmp_kind kinds[8];
    int nkinds;
    int threads[4]; /* 1 and 0 (= all) by default */
    int nthreads;
    int reps;
    int warm; /* 1: leave the input in cache between reps */
    int json;
    int multilevel;
    int cuda;
    double ml_min, ml_cand;
    uint64_t seed;
};

static void usage(FILE *f)
{
    fprintf(f, "usage: gravac-bench compress [options]\n"
               "  --sizes a,b,..      tensor sizes (default 1e4,1e5,1e6,1e7,2.5e7,1e8)\n"
               "  --cfs a,b,..        compression factors (default 10,100,1000)\n"
               "  --compressors list  topk,randomk,dgc,redsync,dense (default all)\n"
               "  --threads list      1 and/or all, or numbers (default 1,all)\n"
               "  --reps N            timed repetitions, the median is reported (default 7)\n"
               "  --warm              keep the input cached between reps (default: flushed)\n"
               "  --multilevel a,b    the multi-level row: cf_min, candidate (default 10,1000)\n"
               "  --no-multilevel     skip it\n"
               "  --device cpu|cuda   backend (default cpu)\n"
               "  --seed S            data and sampling seed (default 1)\n"
               "  --json              one JSON document instead of the table\n");
}

static int parse_list(const char *s, double *out, int max)
{
    int n = 0;
    char *dup = strdup(s), *save = NULL;
    for (char *tok = strtok_r(dup, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        errno = 0;
        double v = strtod(tok, &end);
        if (errno != 0 || *end != '\0' || !(v > 0) || n == max) {
            free(dup);
            return -1;
        }
        out[n++] = v;
    }
    free(dup);
    return n;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
    static const double def_sizes[] = {1e4, 1e5, 1e6, 1e7, 2.5e7, 1e8};
    static const double def_cfs[] = {10, 100, 1000};
    memset(o, 0, sizeof(*o));
    memcpy(o->sizes, def_sizes, sizeof(def_sizes));
    o->nsizes = 6;
    memcpy(o->cfs, def_cfs, sizeof(def_cfs));
    o->ncfs = 3;
    for (int k = 0; k <= GV_CMP_REDSYNC; k++)
        o->kinds[o->nkinds++] = (enum gv_cmp_kind)(k == 0   ? GV_CMP_TOPK
                                                   : k == 1 ? GV_CMP_DENSE
                                                            : k);
    o->threads[0] = 1;
    o->threads[1] = 0;
    o->nthreads = 2;
    o->reps = 7;
    o->multilevel = 1;
    o->ml_min = 10;
    o->ml_cand = 1000;
    o->seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double tmp[MAX_LIST];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--json") == 0) {
            o->json = 1;
        } else if (strcmp(a, "--warm") == 0) {
            o->warm = 1;
        } else if (strcmp(a, "--no-multilevel") == 0) {
            o->multilevel = 0;
        } else if (v == NULL) {
            fprintf(stderr, "compress: %s needs a value\n", a);
            return -1;
        } else if (strcmp(a, "--sizes") == 0) {
            if ((o->nsizes = parse_list(v, o->sizes, MAX_LIST)) <= 0)
                goto bad;
            for (int s = 0; s < o->nsizes; s++)
                if (o->sizes[s] > 4e9 || o->sizes[s] < 1)
                    goto bad;
            i++;
        } else if (strcmp(a, "--cfs") == 0) {
            if ((o->ncfs = parse_list(v, o->cfs, MAX_LIST)) <= 0)
                goto bad;
            for (int c = 0; c < o->ncfs; c++)
                if (o->cfs[c] < 1)
                    goto bad;
            i++;
        } else if (strcmp(a, "--multilevel") == 0) {
            if (parse_list(v, tmp, MAX_LIST) != 2 || tmp[0] < 1 || tmp[1] < tmp[0])
                goto bad;
            o->ml_min = tmp[0];
            o->ml_cand = tmp[1];
            i++;
        } else if (strcmp(a, "--compressors") == 0) {
            o->nkinds = 0;
            char *dup = strdup(v), *save = NULL;
            for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                enum gv_cmp_kind kind;
                if (gv_cmp_kind_parse(t, &kind) != GV_OK || o->nkinds == 8) {
                    free(dup);
                    goto bad;
                }
                o->kinds[o->nkinds++] = kind;
            }
            free(dup);
            if (o->nkinds == 0)
                goto bad;
            i++;
        } else if (strcmp(a, "--threads") == 0) {
            o->nthreads = 0;
            char *dup = strdup(v), *save = NULL;
            for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                char *end;
                long n = strcmp(t, "all") == 0 ? 0 : strtol(t, &end, 10);
                if ((strcmp(t, "all") != 0 && (*end != '\0' || n < 1 || n > 256)) ||
                    o->nthreads == 4) {
                    free(dup);
                    goto bad;
                }
                o->threads[o->nthreads++] = (int)n;
            }
            free(dup);
            if (o->nthreads == 0)
                goto bad;
            i++;
        } else if (strcmp(a, "--reps") == 0) {
            char *end;
            long r = strtol(v, &end, 10);
            if (*end != '\0' || r < 1 || r > 1000)
                goto bad;
            o->reps = (int)r;
            i++;
        } else if (strcmp(a, "--seed") == 0) {
            char *end;
            o->seed = strtoull(v, &end, 10);
            if (*end != '\0')
                goto bad;
            i++;
        } else if (strcmp(a, "--device") == 0) {
            if (strcmp(v, "cuda") == 0)
                o->cuda = 1;
            else if (strcmp(v, "cpu") != 0)
                goto bad;
            i++;
        } else {
            fprintf(stderr, "compress: unknown option %s\n", a);
            usage(stderr);
            return -1;
        }
        continue;
    bad:
        fprintf(stderr, "compress: bad value '%s' for %s\n", v, a);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- timing helpers */

static int dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), dbl_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Evicts a host buffer from the caches (so every rep reads its input from memory). */
static void flush(const void *p, size_t bytes)
{
#if defined(__x86_64__)
    for (size_t i = 0; i < bytes; i += 64)
        __builtin_ia32_clflush((const char *)p + i);
    __builtin_ia32_mfence();
#else
    static char *evict;
    static const size_t evict_len = (size_t)1 << 30;
    if (evict == NULL)
        evict = malloc(evict_len);
    if (evict != NULL)
        memset(evict, (int)(bytes & 0xFF), evict_len);
    (void)p;
#endif
}

struct ctx {
    struct opts *o;
    struct gv_cmp *cmp; /* of the kind being measured */
    struct gv_cmp *any; /* for memory of the backend's kind */
    float *x;           /* input, host or device */
    float *x_host;
    float *dst; /* memcpy destination */
    struct gv_sparse out, out2, out3;
    cJSON *rows;
    int hdr_done;
    char backend[64];
};

static gv_status_t make_cmp(struct ctx *c, enum gv_cmp_kind kind, int threads, uint64_t max_n,
                            double min_cf, struct gv_cmp **cmp_p)
{
    struct gv_cmp_config cfg;
    gv_cmp_config_init(&cfg);
    cfg.kind = kind;
    cfg.mem = c->o->cuda ? GV_MEM_DEVICE : GV_MEM_HOST;
    cfg.max_numel = max_n;
    cfg.min_cf = min_cf;
    cfg.nthreads = threads;
    cfg.seed = c->o->seed;
    return gv_cmp_create(&cfg, cmp_p);
}

static void maybe_flush(struct ctx *c, uint32_t n)
{
    if (!c->o->warm && !c->o->cuda)
        flush(c->x, (size_t)n * 4);
}

struct mc_part {
    char *dst;
    const char *src;
    size_t len;
};

static void *mc_thread(void *arg)
{
    struct mc_part *p = arg;
    memcpy(p->dst, p->src, p->len);
    return NULL;
}

/* memcpy of n floats over `threads` threads (the caller's thread takes the first part). */
static void par_memcpy(float *dst, const float *src, uint32_t n, int threads)
{
    struct mc_part parts[256];
    pthread_t th[256];
    size_t bytes = (size_t)n * 4, chunk = (bytes / (size_t)threads + 63) & ~(size_t)63;
    int started = 0;
    for (int t = 0; t < threads; t++) {
        size_t b = GV_MIN((size_t)t * chunk, bytes), e = GV_MIN(b + chunk, bytes);
        parts[t] = (struct mc_part){(char *)dst + b, (const char *)src + b, e - b};
    }
    for (int t = 1; t < threads; t++)
        if (pthread_create(&th[t], NULL, mc_thread, &parts[t]) == 0)
            started = t;
        else
            mc_thread(&parts[t]);
    mc_thread(&parts[0]);
    for (int t = 1; t <= started; t++)
        pthread_join(th[t], NULL);
}

/* Median seconds of a memcpy of n floats (host: over `threads` threads; device: one copy). */
static double time_memcpy(struct ctx *c, struct gv_cmp *dev, uint32_t n, int threads)
{
    double t[1000];
    for (int r = -1; r < c->o->reps; r++) { /* r = -1: warm-up (page faults) */
        if (!c->o->warm && !c->o->cuda) {
            flush(c->x, (size_t)n * 4);
            flush(c->dst, (size_t)n * 4);
        }
        uint64_t t0 = gv_now_ns();
        if (c->o->cuda) {
            if (gv_cmp_copy(dev, c->dst, c->x, (size_t)n * 4) != GV_OK)
                exit(1);
        } else if (threads <= 1) {
            memcpy(c->dst, c->x, (size_t)n * 4);
        } else {
            par_memcpy(c->dst, c->x, n, threads);
        }
        uint64_t t1 = gv_now_ns();
        if (r >= 0)
            t[r] = (double)(t1 - t0) * 1e-9;
    }
    return median(t, c->o->reps);
}

static void emit_row(struct ctx *c, const char *what, int threads, uint32_t n, double cf,
                     uint32_t k, double sec, double memcpy1_gbs, double extra)
{
    double gbs = (double)n * 4 / sec * 1e-9, melem = (double)n / sec * 1e-6;
    if (c->o->json) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "what", what);
        cJSON_AddNumberToObject(r, "threads", threads);
        cJSON_AddNumberToObject(r, "n", n);
        cJSON_AddNumberToObject(r, "cf", cf);
        cJSON_AddNumberToObject(r, "k", k);
        cJSON_AddNumberToObject(r, "time_ms", sec * 1e3);
        cJSON_AddNumberToObject(r, "input_gbs", gbs);
        cJSON_AddNumberToObject(r, "melem_s", melem);
        cJSON_AddNumberToObject(r, "x_memcpy1", memcpy1_gbs > 0 ? gbs / memcpy1_gbs : 0);
        if (extra > 0)
            cJSON_AddNumberToObject(r, "speedup", extra);
        cJSON_AddItemToArray(c->rows, r);
        return;
    }
    if (!c->hdr_done) {
        printf("%-10s %4s %10s %7s %9s %10s %8s %9s %9s\n", "what", "thr", "n", "cf", "k",
               "time_ms", "in_GB/s", "Melem/s", "x_memcpy1");
        c->hdr_done = 1;
    }
    printf("%-10s %4d %10u %7g %9u %10.3f %8.2f %9.1f %9.2f", what, threads, n, cf, k, sec * 1e3,
           gbs, melem, memcpy1_gbs > 0 ? gbs / memcpy1_gbs : 0);
    if (extra > 0)
        printf("   speedup %.2fx", extra);
    printf("\n");
    fflush(stdout);
}

static double time_select(struct ctx *c, uint32_t n, double cf)
{
    double t[1000];
    for (int r = -1; r < c->o->reps; r++) {
        maybe_flush(c, n);
        uint64_t t0 = gv_now_ns();
        gv_status_t st = gv_cmp_select(c->cmp, c->x, n, cf, (uint64_t)r + 1, 0, &c->out);
        uint64_t t1 = gv_now_ns();
        if (st != GV_OK) {
            fprintf(stderr, "compress: select failed: %s\n", gv_status_str(st));
            exit(1);
        }
        if (r >= 0)
            t[r] = (double)(t1 - t0) * 1e-9;
    }
    return median(t, c->o->reps);
}

/* Multi-level (cf_min, then the candidate within it) against top-k of the full tensor twice:
 * ml-direct  gv_cmp_select at cf_min + gv_cmp_select at the candidate, both over x;
 * ml-sub     gv_cmp_select at cf_min + gv_cmp_select_sub over its output;
 * ml-2level  gv_cmp_select2 (both levels in one call, as gv_cmp_compress runs them).
 * The three run interleaved in every repetition, each on a flushed input. */
static void run_multilevel(struct ctx *c, int threads, uint32_t n, double memcpy1)
{
    double t[3][1000];
    double a = c->o->ml_min, b = c->o->ml_cand;
    for (int r = -1; r < c->o->reps; r++) {
        for (int v = 0; v < 3; v++) {
            maybe_flush(c, n);
            uint64_t t0 = gv_now_ns();
            gv_status_t st = GV_OK;
            if (v < 2)
                st = gv_cmp_select(c->cmp, c->x, n, a, 0, 0, &c->out);
            if (st == GV_OK && v == 0)
                st = gv_cmp_select(c->cmp, c->x, n, b, 0, 0, &c->out3);
            if (st == GV_OK && v == 1)
                st = gv_cmp_select_sub(c->cmp, &c->out, b, 0, 0, &c->out2);
            if (st == GV_OK && v == 2)
                st = gv_cmp_select2(c->cmp, c->x, n, a, b, 0, 0, &c->out, &c->out2);
            uint64_t t1 = gv_now_ns();
            if (st != GV_OK) {
                fprintf(stderr, "compress: multi-level failed: %s\n", gv_status_str(st));
                exit(1);
            }
            if (r >= 0)
                t[v][r] = (double)(t1 - t0) * 1e-9;
        }
    }
    double td = median(t[0], c->o->reps), ts = median(t[1], c->o->reps);
    double tm = median(t[2], c->o->reps);
    uint32_t k2 = c->out2.count;
    emit_row(c, "ml-direct", threads, n, b, k2, td, memcpy1, 0);
    emit_row(c, "ml-sub", threads, n, b, k2, ts, memcpy1, td / ts);
    emit_row(c, "ml-2level", threads, n, b, k2, tm, memcpy1, td / tm);
}

static void ef_step(struct ctx *c, struct gv_ef *ef, double cf_min, double cf_cand,
                    struct gv_sparse *l1, struct gv_sparse *l2)
{
    struct gv_cmp_req req = {.cf_min = cf_min, .cf_cand = cf_cand};
    struct gv_norms nm;
    gv_status_t st = gv_cmp_compress(c->cmp, ef, c->x, &req, l1, l2, &nm);
    if (st == GV_OK)
        st = gv_cmp_apply(c->cmp, ef, GV_SENT_SPARSE, l2 != NULL ? l2 : l1);
    if (st != GV_OK) {
        fprintf(stderr, "compress: error-feedback step failed: %s\n", gv_status_str(st));
        exit(1);
    }
}

/* The worker's whole step: without multi-level, two compressors each with its own residual
 * (g + r1 at cf_min, g + r2 at the candidate: what the released GraVAC code does); with it,
 * one residual, g + r once, both levels from gv_cmp_compress. Both apply what they send. */
static void run_ef_multilevel(struct ctx *c, int threads, uint32_t n, double memcpy1)
{
    double direct[1000], ml[1000];
    double a = c->o->ml_min, b = c->o->ml_cand;
    struct gv_ef *e1, *e2, *e3;
    if (gv_ef_create(c->cmp, n, NULL, &e1) != GV_OK ||
        gv_ef_create(c->cmp, n, NULL, &e2) != GV_OK ||
        gv_ef_create(c->cmp, n, NULL, &e3) != GV_OK) {
        fprintf(stderr, "compress: cannot allocate residuals for n %u\n", n);
        exit(1);
    }
    for (int r = -1; r < c->o->reps; r++) {
        if (!c->o->warm && !c->o->cuda) {
            flush(c->x, (size_t)n * 4);
            flush(gv_ef_data(e1), (size_t)n * 4);
            flush(gv_ef_data(e2), (size_t)n * 4);
        }
        uint64_t t0 = gv_now_ns();
        ef_step(c, e1, a, 0, &c->out, NULL);
        ef_step(c, e2, b, 0, &c->out3, NULL);
        uint64_t t1 = gv_now_ns();
        if (!c->o->warm && !c->o->cuda) {
            flush(c->x, (size_t)n * 4);
            flush(gv_ef_data(e3), (size_t)n * 4);
        }
        uint64_t t2 = gv_now_ns();
        ef_step(c, e3, a, b, &c->out, &c->out2);
        uint64_t t3 = gv_now_ns();
        if (r >= 0) {
            direct[r] = (double)(t1 - t0) * 1e-9;
            ml[r] = (double)(t3 - t2) * 1e-9;
        }
    }
    gv_ef_destroy(e1);
    gv_ef_destroy(e2);
    gv_ef_destroy(e3);
    double td = median(direct, c->o->reps), tm = median(ml, c->o->reps);
    emit_row(c, "ef-direct", threads, n, b, c->out2.count, td, memcpy1, 0);
    emit_row(c, "ef-2level", threads, n, b, c->out2.count, tm, memcpy1, td / tm);
}

static void alloc_sparse(struct ctx *c, struct gv_cmp *any, struct gv_sparse *sp, uint32_t cap,
                         int with_idx)
{
    void *p = NULL;
    memset(sp, 0, sizeof(*sp));
    if (with_idx) {
        if (gv_cmp_mem_alloc(any, (size_t)cap * 4 + 64, &p) != GV_OK)
            exit(1);
        sp->idx = p;
    }
    if (gv_cmp_mem_alloc(any, (size_t)cap * 4 + 64, &p) != GV_OK)
        exit(1);
    sp->val = p;
    sp->cap = cap;
    (void)c;
}

static void fill_input(float *x, size_t n, uint64_t seed)
{
    /* gradient-like: a sum of two uniforms (triangular), cheap enough for 1e8 entries */
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        float a = (float)(s & 0xFFFFFF) * 0x1p-24f, b = (float)((s >> 24) & 0xFFFFFF) * 0x1p-24f;
        x[i] = (a + b - 1.0f) * 0.01f;
    }
}

/* Input, memcpy destination and outputs, of the backend's memory kind. */
static int setup_buffers(struct ctx *c, uint32_t nmax, uint32_t kmax)
{
    void *p;
    c->x_host = malloc((size_t)nmax * 4 + 64);
    if (c->x_host == NULL) {
        fprintf(stderr, "gravac-bench compress: cannot allocate %u floats\n", nmax);
        return -1;
    }
    fill_input(c->x_host, nmax, c->o->seed);
    if (c->o->cuda) {
        if (gv_cmp_mem_alloc(c->any, (size_t)nmax * 4, &p) != GV_OK)
            return -1;
        c->x = p;
        if (gv_cmp_copy_from_host(c->any, c->x, c->x_host, (size_t)nmax * 4) != GV_OK)
            return -1;
    } else {
        c->x = c->x_host;
    }
    if (gv_cmp_mem_alloc(c->any, (size_t)nmax * 4, &p) != GV_OK)
        return -1;
    c->dst = p;
    alloc_sparse(c, c->any, &c->out, nmax, 1);
    alloc_sparse(c, c->any, &c->out2, kmax, 1);
    alloc_sparse(c, c->any, &c->out3, kmax, 1);
    return 0;
}

static void free_buffers(struct ctx *c)
{
    struct gv_sparse *sp[] = {&c->out, &c->out2, &c->out3};
    for (size_t i = 0; i < GV_ARRAY_LEN(sp); i++) {
        gv_cmp_mem_free(c->any, sp[i]->idx);
        gv_cmp_mem_free(c->any, sp[i]->val);
    }
    gv_cmp_mem_free(c->any, c->dst);
    if (c->o->cuda)
        gv_cmp_mem_free(c->any, c->x);
    free(c->x_host);
}

/* The thread counts to run, "all" resolved, duplicates dropped; returns how many. */
static int thread_list(struct ctx *c, int *all_p, int thr[4])
{
    struct opts *o = c->o;
    int all = 1, nthr = 0;
    struct gv_cmp *tmp;
    if (!o->cuda && make_cmp(c, GV_CMP_DENSE, 0, 16, 1.0, &tmp) == GV_OK) {
        all = gv_cmp_nthreads(tmp);
        gv_cmp_destroy(tmp);
    }
    for (int t = 0; t < (o->cuda ? 1 : o->nthreads); t++) {
        int v = o->cuda ? 1 : o->threads[t] == 0 ? all : o->threads[t];
        int dup = 0;
        for (int u = 0; u < nthr; u++)
            dup |= thr[u] == v;
        if (!dup)
            thr[nthr++] = v;
    }
    *all_p = all;
    return nthr;
}

/* Every compressor and CF (and the multi-level rows) for one size and thread count. */
static int run_kinds(struct ctx *c, uint32_t n, int threads, double min_cf, double mc1_gbs)
{
    struct opts *o = c->o;
    for (int q = 0; q < o->nkinds; q++) {
        gv_status_t st = make_cmp(c, o->kinds[q], threads, n, min_cf, &c->cmp);
        if (st != GV_OK) {
            fprintf(stderr, "compress: create %s: %s\n", gv_cmp_kind_str(o->kinds[q]),
                    gv_status_str(st));
            return -1;
        }
        int dense = o->kinds[q] == GV_CMP_DENSE; /* ignores the CF: one row */
        for (int f = 0; f < (dense ? 1 : o->ncfs); f++) {
            double sec = time_select(c, n, dense ? min_cf : o->cfs[f]);
            emit_row(c, gv_cmp_kind_str(o->kinds[q]), threads, n, dense ? 1 : o->cfs[f],
                     c->out.count, sec, mc1_gbs, 0);
        }
        if (o->kinds[q] == GV_CMP_TOPK && o->multilevel && n >= 1000) {
            run_multilevel(c, threads, n, mc1_gbs);
            run_ef_multilevel(c, threads, n, mc1_gbs);
        }
        gv_cmp_destroy(c->cmp);
        c->cmp = NULL;
    }
    return 0;
}

static int run(struct ctx *c)
{
    struct opts *o = c->o;
    double max_n = 0, min_cf = o->ml_min;
    for (int s = 0; s < o->nsizes; s++)
        max_n = o->sizes[s] > max_n ? o->sizes[s] : max_n;
    for (int f = 0; f < o->ncfs; f++)
        min_cf = o->cfs[f] < min_cf ? o->cfs[f] : min_cf;
    uint32_t nmax = (uint32_t)max_n;
    /* a compressor of the right memory kind for allocations and the device probe */
    gv_status_t st = make_cmp(c, GV_CMP_DENSE, 1, nmax, 1.0, &c->any);
    if (st != GV_OK) {
        fprintf(stderr, "gravac-bench compress: cannot use the %s backend: %s%s\n",
                o->cuda ? "cuda" : "cpu", gv_status_str(st),
                o->cuda ? " (no GPU, or built without CUDA)" : "");
        return 1;
    }
    int rc = 1, all, thr[4];
    if (setup_buffers(c, nmax, (uint32_t)GV_MIN(max_n, 2.0 * floor(max_n / min_cf) + 2)) != 0)
        goto out;
    int nthr = thread_list(c, &all, thr);
    snprintf(c->backend, sizeof(c->backend), "%s", gv_cmp_backend(c->any));
    if (!o->json)
        printf("# gravac-bench compress: backend %s, online CPUs %d, %d reps (median), input %s,"
               " seed %llu\n# x_memcpy1 = input GB/s / single-thread memcpy GB/s of the same n "
               "(same run). Shared machine: compare ratios, not absolute times.\n",
               c->backend, all, o->reps, o->warm ? "warm" : "flushed before each rep",
               (unsigned long long)o->seed);
    for (int s = 0; s < o->nsizes; s++) {
        uint32_t n = (uint32_t)o->sizes[s];
        double mc1 = time_memcpy(c, c->any, n, 1);
        double mc1_gbs = (double)n * 4 / mc1 * 1e-9;
        emit_row(c, "memcpy", 1, n, 1, n, mc1, mc1_gbs, 0);
        for (int t = 0; t < nthr; t++) {
            if (thr[t] > 1 && !o->cuda && n >= 1000000) /* thread start-up dominates below */
                emit_row(c, "memcpy", thr[t], n, 1, n, time_memcpy(c, c->any, n, thr[t]), mc1_gbs,
                         0);
            if (run_kinds(c, n, thr[t], min_cf, mc1_gbs) != 0)
                goto out;
        }
    }
    rc = 0;
out:
    free_buffers(c);
    gv_cmp_destroy(c->any);
    return rc;
}

int gv_bench_compress_main(int argc, char **argv)
{
    struct opts o;
    if (parse_opts(argc, argv, &o) != 0)
        return 2;
    struct ctx c = {.o = &o};
    gv_log_set_tag("bench");
    if (o.json)
        c.rows = cJSON_CreateArray();
    int rc = run(&c);
    if (o.json) {
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddStringToObject(doc, "bench", "compress");
        cJSON_AddStringToObject(doc, "backend", c.backend);
        cJSON_AddNumberToObject(doc, "reps", o.reps);
        cJSON_AddBoolToObject(doc, "input_flushed", !o.warm && !o.cuda);
        cJSON_AddItemToObject(doc, "rows", c.rows);
        if (rc == 0) {
            char *txt = cJSON_Print(doc);
            printf("%s\n", txt);
            free(txt);
        }
        cJSON_Delete(doc);
    }
    return rc;
}
