/* compress_internal.h: what the files of compress/ share and callers do not see: the compressor
 * object, the backend ops table (CPU, CUDA), the thread pool, the magnitude keys and the random
 * generator. Tests may include it to reach the CPU oracle directly. */
#ifndef GV_COMPRESS_INTERNAL_H
#define GV_COMPRESS_INTERNAL_H

#include "gv_compress.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- magnitude keys
 * key(x) = |x| as IEEE bits (sign cleared). For non-NaN floats the integer order of keys is the
 * order of magnitudes. NaNs are canonicalised to one key just above +Inf, so they all tie (and
 * the lower index wins). A raw "absbits >= key_min" compare with key_min <= GV_KEY_NAN selects
 * the same elements as "key >= key_min", which lets the scans skip canonicalisation. */
#define GV_KEY_INF 0x7F800000u
#define GV_KEY_NAN 0x7F800001u

static inline uint32_t gv_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float gv_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline uint32_t gv_key(float f)
{
    uint32_t a = gv_f32_bits(f) & 0x7FFFFFFFu;
    return a < GV_KEY_NAN ? a : GV_KEY_NAN; /* min(): branch-free, vectorises */
}

/* Streaming scans prefetch this many entries (2 KiB) ahead: with the compare-and-pack work of
 * a dense selection (CF 10) the hardware prefetcher alone falls behind (measured on the
 * 25M-entry scan: 16.3 ms without, 10.9-11.9 ms with; distances of 256..768 entries were within
 * noise of each other, 1024 and beyond were slower again). */
#define GV_SCAN_PREFETCH 512u

/* Prefetches the cache lines of x[i + GV_SCAN_PREFETCH .. + 32) (a 32-entry step of a scan)
 * where they exist. A macro: GCC 12 dropped the prefetch of an equivalent static inline function
 * once it was also inlined into a target("avx512f") function of the same file. */
#define GV_SCAN_PREFETCH_STEP(x, i, n)                                                             \
    do {                                                                                           \
        if ((i) + GV_SCAN_PREFETCH + 32 <= (n)) {                                                  \
            __builtin_prefetch((x) + (i) + GV_SCAN_PREFETCH);                                      \
            __builtin_prefetch((x) + (i) + GV_SCAN_PREFETCH + 16);                                 \
        }                                                                                          \
    } while (0)

/* ---------------------------------------------------------------- random numbers
 * splitmix64 to derive seeds, xoshiro256** for streams, Lemire's unbiased bounded draw. The
 * same code (and so the same positions) on every worker and backend. */
struct gv_rng {
    uint64_t s[4];
};

static inline uint64_t gv_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void gv_rng_seed(struct gv_rng *rng, uint64_t seed);
uint64_t gv_rng_next(struct gv_rng *rng);
/* Uniform in [0, bound), bound >= 1. */
uint32_t gv_rng_below(struct gv_rng *rng, uint32_t bound);
/* The seed of one draw: f(shared seed, iteration, tensor id, level, purpose). */
uint64_t gv_seed_mix(uint64_t seed, uint64_t iter, uint32_t tensor_id, uint32_t level,
                     uint32_t purpose);

enum {
    GV_SEED_RANDOMK = 1,
    GV_SEED_DGC = 2,
    GV_SEED_TOPK = 3,
};

/* ---------------------------------------------------------------- thread pool
 * Persistent threads; run() calls fn(arg, tid, nth) on nth threads (the caller is tid 0) and
 * returns when all are done. */
struct gv_pool;
typedef void (*gv_pool_fn)(void *arg, int tid, int nth);
gv_status_t gv_pool_create(int nthreads, struct gv_pool **pool_p);
void gv_pool_destroy(struct gv_pool *pool);
/* nth <= the pool's size; nth == 1 runs fn inline. */
void gv_pool_run(struct gv_pool *pool, int nth, gv_pool_fn fn, void *arg);
int gv_online_cpus(void);

/* ---------------------------------------------------------------- backend ops
 * Primitives on memory of the compressor's kind. The compressor logic (levels, DGC rounds,
 * Redsync search, random-k positions, error-feedback state) lives in cmp.c / thresh.c and is
 * shared by both backends. `map`, where present, is uint32[n] of the same kind: output index
 * = map[position] (the second level selects among the first level's entries). */
struct gv_cmp;
struct gv_cmp_ops {
    const char *name;
    gv_status_t (*init)(struct gv_cmp *c);
    void (*fini)(struct gv_cmp *c);
    gv_status_t (*mem_alloc)(struct gv_cmp *c, size_t bytes, void **ptr_p);
    void (*mem_free)(struct gv_cmp *c, void *ptr);
    gv_status_t (*to_host)(struct gv_cmp *c, void *dst, const void *src, size_t bytes);
    gv_status_t (*from_host)(struct gv_cmp *c, void *dst, const void *src, size_t bytes);
    gv_status_t (*copy)(struct gv_cmp *c, void *dst, const void *src, size_t bytes);
    gv_status_t (*zero)(struct gv_cmp *c, float *x, uint32_t n);
    /* r += g; *sumsq_p = sum of the new r^2 */
    gv_status_t (*accumulate)(struct gv_cmp *c, float *r, const float *g, uint32_t n,
                              double *sumsq_p);
    /* r[idx[i]] = r[idx[i]] - val[i], non-finite results -> 0 (idx NULL: dense, i < count) */
    gv_status_t (*ef_apply)(struct gv_cmp *c, float *r, const uint32_t *idx, const float *val,
                            uint32_t count);
    /* exact top-k (ordering of gv_compress.h), k <= n, out->cap >= k: fills idx, val, count,
     * and sumsq too where topk_sumsq is set */
    gv_status_t (*topk)(struct gv_cmp *c, const float *x, uint32_t n, uint32_t k,
                        const uint32_t *map, struct gv_sparse *out);
    /* optional (NULL: two topk calls): out1 = top-k1 of x and out2 = top-k2 of x, k2 <= k1,
     * both with x's indices, at once (as topk fills them) */
    gv_status_t (*topk2)(struct gv_cmp *c, const float *x, uint32_t n, uint32_t k1, uint32_t k2,
                         struct gv_sparse *out1, struct gv_sparse *out2);
    /* number of entries with key >= key_min (key_min <= GV_KEY_NAN) */
    gv_status_t (*count_ge)(struct gv_cmp *c, const float *x, uint32_t n, uint32_t key_min,
                            uint64_t *count_p);
    /* all entries with key >= key_min in index order; the caller guarantees count <= cap */
    gv_status_t (*select_ge)(struct gv_cmp *c, const float *x, uint32_t n, uint32_t key_min,
                             const uint32_t *map, struct gv_sparse *out);
    /* out <- (map ? map[pos[i]] : pos[i], x[pos[i]]) for the ascending host positions pos */
    gv_status_t (*gather)(struct gv_cmp *c, const float *x, const uint32_t *pos_host,
                          uint32_t count, const uint32_t *map, struct gv_sparse *out);
    /* vals_host[i] = x[pos_host[i]] */
    gv_status_t (*sample)(struct gv_cmp *c, const float *x, const uint32_t *pos_host,
                          uint32_t count, float *vals_host);
    /* sum and max of |x| over finite x, and how many were finite */
    gv_status_t (*abs_stats)(struct gv_cmp *c, const float *x, uint32_t n, double *sum_p,
                             float *max_p, uint64_t *nfinite_p);
    /* fp16 mode: val[i] = gv_f16_round_sat(val[i]) */
    gv_status_t (*round_f16)(struct gv_cmp *c, float *val, uint32_t count);
    /* sum of x^2 in double, fixed blocking */
    gv_status_t (*sumsq)(struct gv_cmp *c, const float *x, uint32_t n, double *sumsq_p);
    gv_status_t (*scatter_add)(struct gv_cmp *c, float *dense, uint32_t n, const uint32_t *idx,
                               const float *val, uint32_t count);
    /* topk and topk2 fill out->sumsq as the sumsq op would over the values they wrote (the CPU
     * sums each finished output block in its write step, while the block is in the cache) */
    int topk_sumsq;
};

extern const struct gv_cmp_ops gv_cmp_cpu_ops;
extern const struct gv_cmp_ops gv_cmp_cuda_ops;

/* CPU workspace (topk_cpu.c). */
struct gv_topk_ws;
gv_status_t gv_topk_ws_create(uint64_t max_n, uint32_t max_k, int nthreads,
                              struct gv_topk_ws **ws_p);
void gv_topk_ws_destroy(struct gv_topk_ws *ws);
/* How the calls were served, for tests and the bench: sampled path, sample missed (then
 * exact), exact path directly. */
struct gv_topk_stats {
    uint64_t sampled;
    uint64_t missed;
    uint64_t exact;
    uint64_t upper;    /* runs whose k-th key was among the keys >= hi (the sample's hi low) */
    uint64_t captured; /* two-level runs whose second level came from the first's write step */
};
void gv_topk_ws_stats(const struct gv_topk_ws *ws, struct gv_topk_stats *st);

/* CPU primitives on host memory (topk_cpu.c, cpu.c); pool may be NULL (one thread). */
gv_status_t gv_topk_cpu(struct gv_topk_ws *ws, struct gv_pool *pool, int nthreads, uint64_t seed,
                        const float *x, uint32_t n, uint32_t k, const uint32_t *map,
                        struct gv_sparse *out);
/* Both levels of a two-level top-k (k2 <= k1): out1 = top-k1 of x, out2 = top-k2 of x, as two
 * gv_topk_cpu calls would give them (the second over the first's output); the first level's
 * write step captures the second's candidates when the sample allows. */
gv_status_t gv_topk_cpu2(struct gv_topk_ws *ws, struct gv_pool *pool, int nthreads, uint64_t seed,
                         const float *x, uint32_t n, uint32_t k1, uint32_t k2,
                         struct gv_sparse *out1, struct gv_sparse *out2);
/* The sampled path's cache lines for (n, k, seed): the first index of each 16-entry line it
 * reads, in draw order, into pos (up to 4096 of them); returns how many. Tests use it to build
 * inputs that the sample misjudges. */
uint32_t gv_topk_sample_lines(uint32_t n, uint32_t k, uint64_t seed, uint32_t *pos);
/* rank-th largest (1-based) of keys[0..m); destroys the array. Radix select, linear time. */
uint32_t gv_select_keys(uint32_t *keys, size_t m, size_t rank);
/* The oracle: sort by (key desc, index asc), take k, sort indices. Allocates; tests only. */
gv_status_t gv_topk_oracle(const float *x, uint32_t n, uint32_t k, uint32_t *idx_out);
/* Sums of squares in a fixed order: per GV_SUMSQ_BLOCK-entry block, blocks added in order, so
 * the result does not depend on the thread count. */
#define GV_SUMSQ_BLOCK 4096u
double gv_sumsq_block(const float *x, size_t n);
double gv_sumsq_f32(const float *x, size_t n);

/* Scan kernels: append (base + i, x[i]) for every i < n with absbits(x[i]) >= key_min, in
 * ascending i, writing at most cap entries. Returns the number appended, or cap + 1 (and stops)
 * when more than cap match. */
typedef size_t (*gv_scan_fn)(const float *x, size_t n, uint32_t key_min, uint32_t base,
                             uint32_t *ci, float *cv, size_t cap);
size_t gv_scan_generic(const float *x, size_t n, uint32_t key_min, uint32_t base, uint32_t *ci,
                       float *cv, size_t cap);
/* The top-k form: as above with key_min = lo, and also the canonical keys of the entries with
 * key < hi ("middle" keys, in order) into mk; *mid_p gets their number. hi: a canonical key or
 * UINT32_MAX. When it returns cap + 1, the first cap candidates are in place and *mid_p counts
 * the middle keys among them (so a caller can go on after ci[cap - 1] with other arrays). */
typedef size_t (*gv_scan_split_fn)(const float *x, size_t n, uint32_t lo, uint32_t hi,
                                   uint32_t base, uint32_t *ci, float *cv, uint32_t *mk,
                                   size_t *mid_p, size_t cap);
size_t gv_scan_split_generic(const float *x, size_t n, uint32_t lo, uint32_t hi, uint32_t base,
                             uint32_t *ci, float *cv, uint32_t *mk, size_t *mid_p, size_t cap);
/* The write step of top-k: appends, in order, the entries of (ci, cv)[0..cnt) whose key is
 * >= t to (oi, ov), stopping after `want`; returns how many it wrote. Writes nothing at or
 * beyond oi[want]. */
typedef size_t (*gv_compact_fn)(const uint32_t *ci, const float *cv, size_t cnt, uint32_t t,
                                uint32_t *oi, float *ov, size_t want);
size_t gv_compact_generic(const uint32_t *ci, const float *cv, size_t cnt, uint32_t t, uint32_t *oi,
                          float *ov, size_t want);

/* The write step with the second level of a two-level top-k captured on the way: as
 * gv_compact_fn, and the kept entries whose key is also >= t2 are appended, in order, to
 * (c2i, c2v) from *n2_p on. When they would pass cap2, *n2_p becomes cap2 + 1 and the capture
 * stops (the compaction goes on); nothing is written at or beyond c2i/c2v[cap2]. */
typedef size_t (*gv_compact2_fn)(const uint32_t *ci, const float *cv, size_t cnt, uint32_t t,
                                 uint32_t *oi, float *ov, size_t want, uint32_t t2, uint32_t *c2i,
                                 float *c2v, size_t cap2, size_t *n2_p);
size_t gv_compact2_generic(const uint32_t *ci, const float *cv, size_t cnt, uint32_t t,
                           uint32_t *oi, float *ov, size_t want, uint32_t t2, uint32_t *c2i,
                           float *c2v, size_t cap2, size_t *n2_p);

struct gv_scan_kernels {
    const char *name; /* "avx512", "avx2", "generic" */
    gv_scan_fn scan;
    gv_scan_split_fn split;
    gv_compact_fn compact;
    gv_compact2_fn compact2;
};
/* The fastest kernels this CPU runs (scan_x86.c on x86-64, else the generic ones).
 * GV_COMPRESS_SCAN=avx2 / =generic in the environment caps the choice (tests, benches). */
void gv_scan_pick(struct gv_scan_kernels *k);

/* ---------------------------------------------------------------- the compressor */
struct gv_cmp {
    struct gv_cmp_config cfg;
    const struct gv_cmp_ops *ops;
    int nthreads;
    uint32_t max_k;             /* k at min_cf for max_numel */
    struct gv_pool *pool;       /* CPU threads (NULL when nthreads == 1) */
    gv_scan_fn scan;            /* CPU candidate scan kernel */
    char backend[24];           /* "cpu-avx512", "cpu-avx2", "cpu-generic", "cuda" */
    struct gv_topk_ws *topk_ws; /* CPU backend */
    void *be;                   /* backend state (cpu.c: struct cpu_ws, CUDA: device workspace) */
    /* host scratch of the shared compressor logic */
    uint64_t *bitmap; /* random-k membership, max_numel bits */
    uint32_t *pos;    /* random-k / DGC positions, host */
    float *samp;      /* DGC sample values, host */
    uint32_t pos_cap;
};

struct gv_ef {
    struct gv_cmp *cmp;
    float *r; /* float[n], cmp's kind */
    uint32_t n;
    int owned;                                    /* r was allocated here */
    int pending;                                  /* between compress and apply */
    const struct gv_sparse *last_min, *last_cand; /* this step's outputs, to check `sent` */
};

/* thresh.c: the compressors other than top-k and dense, on top of the ops. */
gv_status_t gv_cmp_randomk(struct gv_cmp *c, const float *x, uint32_t n, uint32_t k,
                           const uint32_t *map, uint64_t seed, struct gv_sparse *out);
gv_status_t gv_cmp_dgc(struct gv_cmp *c, const float *x, uint32_t n, uint32_t k,
                       const uint32_t *map, uint64_t seed, struct gv_sparse *out);
gv_status_t gv_cmp_redsync(struct gv_cmp *c, const float *x, uint32_t n, uint32_t k,
                           const uint32_t *map, struct gv_sparse *out);
/* Sorted uniform sample of k distinct positions of [0, n) (Floyd's algorithm over a bitmap). */
void gv_randk_positions(uint64_t *bitmap, uint32_t n, uint32_t k, uint64_t seed, uint32_t *pos);

/* DGC sample size for n entries: max(1, floor(n / 100)). */
static inline uint32_t gv_dgc_sample_len(uint32_t n)
{
    return n / 100 > 0 ? n / 100 : 1;
}

#endif /* GV_COMPRESS_INTERNAL_H */
