/* topk_cpu.c: exact top-k by magnitude on the CPU (the reference the CUDA path is tested
 * against), plus the sort-based oracle the tests use.
 *
 * Sampled path (k <= n/4, n >= 64Ki): keys of random cache lines give two thresholds lo < hi
 * such that, with high probability, at least k entries have key >= lo (and not many more) and
 * fewer than k have key >= hi. One streaming pass (SIMD compare, left-packed stores) collects
 * the entries with key >= lo, in index order, plus the keys below hi ("middle"). A one-thread
 * run writes its first k candidates straight into the output and only the rest (about 5 % of
 * them at CF 10) into the workspace; threads of a parallel run each fill a region of their
 * own. The exact k-th key T is then found by a radix select over the few middle keys only (its
 * digits taken from the narrow range [lo, hi), so the first one already spreads them), and the
 * write step keeps key > T plus the first (k - #greater) entries equal to T, which gives the
 * lower-index tie rule and ascending indices for free: in place in the output for the part that
 * is there (every entry moves down or stays, so nothing is read after it is overwritten), a
 * copying compaction for the rest. It goes in pieces and sums the squares of each finished
 * 4096-entry output block while the block is in the cache (the output's norm). When k or more
 * entries are at or above hi (the sample's hi was low), T is selected among those keys instead.
 * Two levels at once (k2 <= k): the same sample gives lo2, and when lo2 > T the write step also
 * captures the kept entries with key >= lo2; level 2 is the top-k2 of those few.
 * Exact path (small n, large k, or when the sample missed): a histogram of the top 11 bits of
 * every key gives the bucket of the k-th key, then the same candidate machinery with that
 * bucket as [lo, hi); if the bucket is too heavy for the regions, a full three-digit radix
 * select (11, 11, 9 bits) and one write pass. Linear time throughout; no sort, no heap. */
#include "compress_internal.h"

#include <math.h>
#include <stdlib.h>

#define SAMPLE_MAX 65536u /* sample keys; a multiple of 16 (one cache line per draw) */
#define SAMPLE_MIN 4096u
#define SAMPLED_MIN_N 65536u /* below this the exact path is as fast */
#define SAMPLED_MAX_FRAC 4u  /* the sampled path serves k <= n / 4 */
#define PAR_MIN_N (1u << 18) /* below this one thread beats waking the others */
#define NB 2048u             /* buckets of the 11-bit digits; the last digit has 9 bits */

/* Sample margin, in standard deviations (+ a constant for the binomial's skew at small means):
 * P(the sample misses) is about 3e-5 per call; a miss costs one exact pass, never a wrong
 * answer. */
#define MARGIN_SD 4.0
#define MARGIN_ABS 4.0

struct topk_hist {
    uint32_t h[3][NB];
};

struct topk_region {
    size_t nd;   /* candidates in the output itself, ahead of the region's (one-thread runs) */
    size_t cnt;  /* candidates in the region */
    int over;    /* the region (or its key segment) overflowed */
    size_t up;   /* candidates with key >= hi, of nd + cnt */
    size_t len;  /* keys in this region's segment of ws->keys */
    size_t gt;   /* entries with key > T */
    size_t eq;   /* entries with key == T */
    size_t take; /* of those, how many this region emits */
    size_t off;  /* first output position of this region */
    size_t n2;   /* second-level captures (cap + 1: overflow) */
};

/* Candidate regions: per thread, the candidates (index, value) in index order, and the
 * segment of "middle" keys the radix select runs over. */
struct topk_set {
    size_t cap;              /* candidates per thread */
    uint32_t *ci;            /* [nthreads][cap] */
    float *cv;               /* [nthreads][cap] */
    uint32_t *keys;          /* [nthreads][cap] */
    uint32_t *c2i;           /* [nthreads][cap]: second-level captures of a two-level run */
    float *c2v;              /* [nthreads][cap] */
    struct topk_region *reg; /* [nthreads] */
    struct topk_hist *hist;  /* [nthreads] */
};

struct gv_topk_ws {
    int nthreads;
    struct gv_scan_kernels kern;
    struct topk_set s1; /* candidate regions */
    uint32_t *samp;     /* [3][SAMPLE_MAX]: the sample, and two copies to select in */
    double *bsum;       /* per GV_SUMSQ_BLOCK-entry block of an output: sum of squares */
    size_t nbsum;       /* blocks it holds: those of any k <= max_n */
    struct gv_topk_stats stats;
};

void gv_topk_ws_stats(const struct gv_topk_ws *ws, struct gv_topk_stats *st)
{
    *st = ws->stats;
}

/* Sample size: n/64 between 4Ki and 64Ki entries (and at most n/8). Selecting in the sample
 * costs about as much per entry as a candidate does, and the expected excess of candidates
 * falls as 1/sqrt(s), so the sample grows with n. */
static uint32_t sample_len(uint64_t n)
{
    uint64_t s = GV_MIN(GV_MAX(n / 64, (uint64_t)SAMPLE_MIN), (uint64_t)SAMPLE_MAX);
    s = GV_MIN(s, n / 8);
    return (uint32_t)(s & ~(uint64_t)15);
}

/* Sample rank of lo: how many sample keys are >= lo. */
static double rank_lo(double mu)
{
    return ceil(mu + MARGIN_SD * sqrt(mu) + MARGIN_ABS);
}

/* Expected number of candidates for (n, k): n * rank_lo / s. */
static double cand_expect(uint64_t n, uint64_t k)
{
    uint32_t s = sample_len(n);
    if (s == 0)
        return (double)n;
    double mu = (double)s * (double)k / (double)n;
    return (double)n * rank_lo(mu) / s;
}

static int set_alloc(struct topk_set *set, size_t cap, int nthreads)
{
    size_t total = cap * (size_t)nthreads;
    set->cap = cap;
    set->ci = gv_aligned_alloc(64, total * sizeof(uint32_t) + 64);
    set->cv = gv_aligned_alloc(64, total * sizeof(float) + 64);
    set->keys = gv_aligned_alloc(64, total * sizeof(uint32_t) + 64);
    set->c2i = gv_aligned_alloc(64, total * sizeof(uint32_t) + 64);
    set->c2v = gv_aligned_alloc(64, total * sizeof(float) + 64);
    set->hist = gv_aligned_alloc(64, (size_t)nthreads * sizeof(struct topk_hist));
    set->reg = gv_calloc((size_t)nthreads, sizeof(struct topk_region));
    return set->ci && set->cv && set->keys && set->c2i && set->c2v && set->hist && set->reg;
}

static void set_free(struct topk_set *set)
{
    gv_free(set->ci);
    gv_free(set->cv);
    gv_free(set->keys);
    gv_free(set->c2i);
    gv_free(set->c2v);
    gv_free(set->hist);
    gv_free(set->reg);
}

gv_status_t gv_topk_ws_create(uint64_t max_n, uint32_t max_k, int nthreads,
                              struct gv_topk_ws **ws_p)
{
    struct gv_topk_ws *ws = gv_calloc(1, sizeof(*ws));
    if (ws == NULL)
        return GV_ERR_NOMEM;
    ws->nthreads = nthreads;
    gv_scan_pick(&ws->kern);
    size_t cap = 0;
    if (max_n >= SAMPLED_MIN_N) {
        uint64_t k = GV_MIN((uint64_t)max_k, max_n / SAMPLED_MAX_FRAC);
        /* three times the expected excess over k, plus slack */
        double m = (double)k + 3.0 * (cand_expect(max_n, k) - (double)k) + 4096.0;
        uint64_t m_cap = m > (double)max_n ? max_n : (uint64_t)m;
        uint64_t chunk = (max_n + (uint64_t)nthreads - 1) / (uint64_t)nthreads + 32;
        cap = (size_t)GV_MIN(m_cap, chunk);
    }
    int ok = set_alloc(&ws->s1, cap, nthreads);
    ws->samp = gv_aligned_alloc(64, 3 * SAMPLE_MAX * sizeof(uint32_t));
    ws->nbsum = (size_t)(max_n / GV_SUMSQ_BLOCK) + 2;
    ws->bsum = gv_malloc(ws->nbsum * sizeof(double));
    if (!ok || ws->samp == NULL || ws->bsum == NULL) {
        gv_log(GV_LOG_ERROR, "compress: cannot allocate the top-k workspace (%zu candidates)",
               cap * (size_t)nthreads);
        gv_topk_ws_destroy(ws);
        return GV_ERR_NOMEM;
    }
    *ws_p = ws;
    return GV_OK;
}

void gv_topk_ws_destroy(struct gv_topk_ws *ws)
{
    if (ws == NULL)
        return;
    set_free(&ws->s1);
    gv_free(ws->samp);
    gv_free(ws->bsum);
    gv_free(ws);
}

/* ---------------------------------------------------------------- radix select machinery */

/* Digits of a radix select over keys in [base, base + 2^w): from the top, up to three digits of
 * at most 11 bits. Over all keys (base 0, w 31) they are 11, 11 and 9 bits; over the boundary
 * of the sampled path, a narrow key range, the first digit already spreads the keys over up to
 * 2048 buckets (the top bits of the keys themselves would be nearly all equal there). */
struct digits {
    uint32_t base;
    int npass;
    uint32_t shift[3];
    uint32_t nbuck[3];
};

/* The digits for keys in [lo, end), end > lo. */
static void digits_plan(struct digits *d, uint32_t lo, uint32_t end)
{
    uint32_t span = end - lo - 1; /* the largest key - base */
    int w = span == 0 ? 0 : 32 - __builtin_clz(span);
    d->base = lo;
    d->npass = 0;
    while (w > 0) {
        int bits = GV_MIN(w, 11);
        w -= bits;
        d->shift[d->npass] = (uint32_t)w;
        d->nbuck[d->npass] = 1u << bits;
        d->npass++;
    }
}

static const struct digits full_digits = {0, 3, {20, 9, 0}, {NB, NB, 512}};

static inline uint32_t digit_of(const struct digits *d, uint32_t key, int pass)
{
    return ((key - d->base) >> d->shift[pass]) & (d->nbuck[pass] - 1);
}

/* The part of key above digit `pass` (pass >= 1): equal to the k-th key's for the keys still
 * in the running after pass - 1. */
static inline uint32_t prefix_of(const struct digits *d, uint32_t key, int pass)
{
    return (key - d->base) >> d->shift[pass - 1];
}

/* After pass `pass` over nseg sources: the bucket holding the rank-th largest key (rank is
 * 1-based and becomes the rank within that bucket); adds each source's count above the bucket
 * to its gt. */
static uint32_t sel_combine(struct topk_hist *hist, struct topk_region *reg, int nseg, int pass,
                            uint32_t nbuck, size_t *rank)
{
    size_t cum = 0;
    uint32_t b = nbuck;
    while (b > 0) {
        b--;
        size_t c = 0;
        for (int t = 0; t < nseg; t++)
            c += hist[t].h[pass][b];
        if (cum + c >= *rank)
            break;
        cum += c;
    }
    for (int t = 0; t < nseg; t++) {
        size_t above = 0;
        for (uint32_t j = b + 1; j < nbuck; j++)
            above += hist[t].h[pass][j];
        reg[t].gt += above;
    }
    *rank -= cum;
    return b;
}

/* Output layout from each source's gt / eq: the first need_eq entries equal to T (in source
 * order, i.e. index order) are taken. Returns the total emitted. */
static size_t sel_layout(struct topk_region *reg, int nseg, size_t k)
{
    size_t gt = 0;
    for (int t = 0; t < nseg; t++)
        gt += reg[t].gt;
    size_t need_eq = k - gt;
    size_t off = 0, eq_before = 0;
    for (int t = 0; t < nseg; t++) {
        size_t left = need_eq > eq_before ? need_eq - eq_before : 0;
        reg[t].take = GV_MIN(left, reg[t].eq);
        reg[t].off = off;
        off += reg[t].gt + reg[t].take;
        eq_before += reg[t].eq;
    }
    return off;
}

/* Radix select in a plain key array (the sample); destroys it. rank 1-based from the top.
 * *gt_p (if not NULL) gets how many keys are larger than the one returned, *eq_p how many equal
 * it. */
static uint32_t select_array(uint32_t *keys, size_t m, size_t rank, struct topk_hist *hist,
                             size_t *gt_p, size_t *eq_p)
{
    const struct digits *d = &full_digits;
    struct topk_region reg = {0};
    uint32_t t = 0, b = 0;
    for (int pass = 0; pass < d->npass; pass++) {
        memset(hist->h[pass], 0, d->nbuck[pass] * sizeof(uint32_t));
        size_t j = 0;
        for (size_t i = 0; i < m; i++) {
            uint32_t key = keys[i];
            if (pass > 0 && prefix_of(d, key, pass) != prefix_of(d, t, pass))
                continue;
            keys[j++] = key;
            hist->h[pass][digit_of(d, key, pass)]++;
        }
        m = j;
        b = sel_combine(hist, &reg, 1, pass, d->nbuck[pass], &rank);
        t |= b << d->shift[pass];
    }
    if (gt_p != NULL)
        *gt_p = reg.gt;
    if (eq_p != NULL)
        *eq_p = hist->h[d->npass - 1][b];
    return t;
}

uint32_t gv_select_keys(uint32_t *keys, size_t m, size_t rank)
{
    struct topk_hist hist;
    return select_array(keys, m, rank, &hist, NULL, NULL);
}

/* ---------------------------------------------------------------- jobs */

struct topk_job {
    struct gv_topk_ws *ws;
    struct topk_set *set; /* this level's regions */
    const float *x;
    uint32_t n;
    uint32_t k;
    const uint32_t *map;
    struct gv_sparse *out;
    uint32_t lo, hi; /* thresholds of the candidate scan */
    uint32_t lo2;    /* two-level run: a key at least k2 entries reach (UINT32_MAX: none) */
    uint32_t t2;     /* the write step captures kept entries with key >= t2 (or none) */
    uint32_t k2;
    struct digits dg; /* digits of the radix select over the regions' keys */
    uint32_t t;       /* the k-th key once known; during the passes, the digits so far */
    int pass;
    int summed; /* the write step filled ws->bsum for the blocks inside a region */
};

static void chunk_of(uint32_t n, int tid, int nth, size_t *b_p, size_t *e_p)
{
    size_t chunk = (((size_t)n + (size_t)nth - 1) / (size_t)nth + 31) & ~(size_t)31;
    size_t b = GV_MIN((size_t)tid * chunk, (size_t)n);
    *b_p = b;
    *e_p = GV_MIN(b + chunk, (size_t)n);
}

/* The candidate scan of one thread's chunk. A one-thread run (the tensor's only chunk) sends
 * its first candidates straight to the output, up to k of them (and no more middle keys than
 * the segment holds), and goes on in its region after the last one. */
static void job_scan(void *arg, int tid, int nth)
{
    struct topk_job *j = arg;
    struct topk_set *set = j->set;
    const gv_scan_split_fn split = j->ws->kern.split;
    size_t b, e;
    chunk_of(j->n, tid, nth, &b, &e);
    const size_t base = (size_t)tid * set->cap;
    uint32_t *keys = set->keys + base;
    struct topk_region *r = &set->reg[tid];
    size_t start = b, nd = 0, dmid = 0, mid = 0;
    if (nth == 1) {
        const size_t dcap = GV_MIN((size_t)j->k, set->cap);
        size_t c = split(j->x + b, e - b, j->lo, j->hi, (uint32_t)b, j->out->idx, j->out->val, keys,
                         &dmid, dcap);
        nd = GV_MIN(c, dcap);
        start = c <= dcap ? e : (size_t)j->out->idx[dcap - 1] + 1; /* after the last written */
    }
    const size_t rcap = set->cap - dmid; /* what is left of the key segment bounds the region */
    size_t c = start < e ? split(j->x + start, e - start, j->lo, j->hi, (uint32_t)start,
                                 set->ci + base, set->cv + base, keys + dmid, &mid, rcap)
                         : 0;
    r->nd = nd;
    r->over = c > rcap;
    r->cnt = r->over ? 0 : c;
    r->len = dmid + mid;
    r->up = nd + r->cnt - r->len;
    memset(&set->hist[tid], 0, sizeof(set->hist[tid]));
}

/* When k or more candidates have key >= hi: the segment gets those keys instead of the
 * middle ones (the scan wrote the middle ones); over when they do not fit it. */
static void job_split_up(void *arg, int tid, int nth)
{
    (void)nth;
    struct topk_job *j = arg;
    struct topk_set *set = j->set;
    struct topk_region *r = &set->reg[tid];
    uint32_t *seg = set->keys + (size_t)tid * set->cap;
    const uint32_t hi = j->hi;
    memset(&set->hist[tid], 0, sizeof(set->hist[tid]));
    if (r->up > set->cap) {
        r->over = 1;
        return;
    }
    size_t m = 0;
    for (int part = 0; part < 2; part++) {
        const float *v = part == 0 ? j->out->val : set->cv + (size_t)tid * set->cap;
        const size_t cnt = part == 0 ? r->nd : r->cnt;
        for (size_t i = 0; i < cnt; i++) {
            uint32_t key = gv_key(v[i]);
            seg[m] = key;
            m += key >= hi;
        }
    }
    r->len = m;
}

/* One radix pass over a region's key segment: filter by the digits so far, histogram. */
static void job_seg_pass(void *arg, int tid, int nth)
{
    (void)nth;
    struct topk_job *j = arg;
    struct topk_set *set = j->set;
    struct topk_region *r = &set->reg[tid];
    uint32_t *seg = set->keys + (size_t)tid * set->cap;
    uint32_t *h = set->hist[tid].h[j->pass];
    const struct digits *d = &j->dg;
    const int pass = j->pass;
    size_t m = 0;
    if (pass == 0) {
        for (size_t i = 0; i < r->len; i++)
            h[digit_of(d, seg[i], 0)]++;
        return;
    }
    const uint32_t want = prefix_of(d, j->t, pass);
    for (size_t i = 0; i < r->len; i++) {
        uint32_t key = seg[i];
        if (prefix_of(d, key, pass) != want)
            continue;
        seg[m++] = key;
        h[digit_of(d, key, pass)]++;
    }
    r->len = m;
}

/* Keeps, in order, the candidates (ci, cv)[0..cnt) with key > t and the first (take - *taken)
 * equal to t, writing them from (oi, ov)[o] on and stopping at `want`; returns the new o. May
 * run in place (oi == ci, then o <= i throughout). */
static size_t keep_ties(const uint32_t *ci, const float *cv, size_t cnt, uint32_t t, size_t take,
                        size_t *taken_p, uint32_t *oi, float *ov, size_t o, size_t want)
{
    size_t taken = *taken_p;
    /* branch-free: every candidate is written at o (< want) and o advances for the kept */
    for (size_t i = 0; i < cnt && o < want; i++) {
        uint32_t key = gv_key(cv[i]);
        size_t eq = key == t, sel = (key > t) | (eq & (taken < take));
        taken += eq & sel;
        uint32_t id = ci[i];
        float v = cv[i];
        oi[o] = id;
        ov[o] = v;
        o += sel;
    }
    *taken_p = taken;
    return o;
}

/* The second level's captures from a region's finished output (the rare path with a split
 * tie): entries with key >= t2, in order; cap + 1 when more than cap. */
static size_t capture_scan(const uint32_t *oi, const float *ov, size_t cnt, uint32_t t2,
                           uint32_t *c2i, float *c2v, size_t cap)
{
    size_t n2 = 0;
    for (size_t i = 0; i < cnt; i++) {
        if (gv_key(ov[i]) < t2)
            continue;
        if (n2 == cap)
            return cap + 1;
        c2i[n2] = oi[i];
        c2v[n2] = ov[i];
        n2++;
    }
    return n2;
}

/* Sums of squares of the output's GV_SUMSQ_BLOCK-entry blocks from *next_p on that end at or
 * before position `done` (the blocks lie inside the calling region: next starts there). */
static void block_sums(struct topk_job *j, size_t done, size_t *next_p)
{
    const size_t bl = GV_SUMSQ_BLOCK, k = j->k;
    size_t b = *next_p;
    if (k > j->ws->nbsum * bl) /* more than the workspace was sized for: topk_sums does it */
        return;
    for (; b * bl < k && GV_MIN(b * bl + bl, k) <= done; b++)
        j->ws->bsum[b] = gv_sumsq_block(j->out->val + b * bl, GV_MIN(bl, k - b * bl));
    *next_p = b;
}

/* One piece of a region's candidates (ci, cv)[0..cnt), kept ones appended at o. */
static size_t write_piece(struct topk_job *j, struct topk_region *r, int tid, const uint32_t *ci,
                          const float *cv, size_t cnt, uint32_t *oi, float *ov, size_t o,
                          size_t want, size_t *taken_p)
{
    const struct gv_scan_kernels *kern = &j->ws->kern;
    struct topk_set *set = j->set;
    const uint32_t t = j->t, t2 = j->t2;
    if (r->take != r->eq)
        return keep_ties(ci, cv, cnt, t, r->take, taken_p, oi, ov, o, want);
    if (t2 == UINT32_MAX) /* a plain threshold (SIMD packing) */
        return o + kern->compact(ci, cv, cnt, t, oi + o, ov + o, want - o);
    /* the same, capturing the second level's candidates */
    return o + kern->compact2(ci, cv, cnt, t, oi + o, ov + o, want - o, t2,
                              set->c2i + (size_t)tid * set->cap, set->c2v + (size_t)tid * set->cap,
                              set->cap, &r->n2);
}

/* The write step of a region: the part already in the output first (off is 0 there: a
 * one-thread run), in place, then the region. It goes in pieces of WRITE_PIECE candidates, and
 * after each piece the output blocks it completed get their sums of squares while they are
 * still in the cache (the same fixed-order block sums as gv_sumsq_f32, which read the whole
 * output again from memory). */
#define WRITE_PIECE 8192u

static void job_region_write(void *arg, int tid, int nth)
{
    (void)nth;
    struct topk_job *j = arg;
    struct topk_set *set = j->set;
    struct topk_region *r = &set->reg[tid];
    uint32_t *oi = j->out->idx + r->off;
    float *ov = j->out->val + r->off;
    const size_t want = r->gt + r->take, bl = GV_SUMSQ_BLOCK;
    size_t o = 0, taken = 0, next = (r->off + bl - 1) / bl;
    r->n2 = 0;
    for (int part = 0; part < 2; part++) {
        const uint32_t *ci = part == 0 ? oi : set->ci + (size_t)tid * set->cap;
        const float *cv = part == 0 ? ov : set->cv + (size_t)tid * set->cap;
        const size_t cnt = part == 0 ? r->nd : r->cnt;
        for (size_t i = 0; i < cnt && o < want; i += WRITE_PIECE) {
            o = write_piece(j, r, tid, ci + i, cv + i, GV_MIN((size_t)WRITE_PIECE, cnt - i), oi, ov,
                            o, want, &taken);
            block_sums(j, r->off + o, &next);
        }
    }
    GV_ASSERT(o == want);
    if (r->take != r->eq && j->t2 != UINT32_MAX) /* a split tie: T < t2 (rare) */
        r->n2 = capture_scan(oi, ov, o, j->t2, set->c2i + (size_t)tid * set->cap,
                             set->c2v + (size_t)tid * set->cap, set->cap);
    /* map in a loop of its own: independent loads overlap, where inside the loops above each
     * miss would wait behind the selection logic */
    if (j->map != NULL)
        for (size_t i = 0; i < o; i++)
            oi[i] = j->map[oi[i]];
}

/* Exact path: histogram of digit `pass` over the entries whose higher digits match. Four
 * interleaved sub-histograms break the store-to-load chains of runs of equal digits; in the
 * later passes non-matching entries go to four spare bins instead of a mispredicted branch. */
static void job_x_pass(void *arg, int tid, int nth)
{
    struct topk_job *j = arg;
    size_t b, e;
    chunk_of(j->n, tid, nth, &b, &e);
    struct topk_hist *hist = &j->set->hist[tid];
    const float *x = j->x;
    const int pass = j->pass;
    uint32_t h[4][NB + 4];
    memset(h, 0, sizeof(h));
    if (pass == 0) {
        size_t i = b;
        for (; i + 4 <= e; i += 4)
            for (int q = 0; q < 4; q++)
                h[q][gv_key(x[i + (size_t)q]) >> 20]++;
        for (; i < e; i++)
            h[0][gv_key(x[i]) >> 20]++;
    } else {
        /* the digits found so far form the high bits of t; match them all */
        const uint32_t shift = pass == 1 ? 20 : 9;
        const uint32_t want = j->t >> shift;
        size_t i = b;
        for (; i + 4 <= e; i += 4) {
            for (int q = 0; q < 4; q++) {
                uint32_t key = gv_key(x[i + (size_t)q]);
                uint32_t bin =
                    (key >> shift) == want ? digit_of(&full_digits, key, pass) : NB + (uint32_t)q;
                h[q][bin]++;
            }
        }
        for (; i < e; i++) {
            uint32_t key = gv_key(x[i]);
            h[0][(key >> shift) == want ? digit_of(&full_digits, key, pass) : NB]++;
        }
    }
    for (uint32_t q = 0; q < NB; q++)
        hist->h[pass][q] = h[0][q] + h[1][q] + h[2][q] + h[3][q];
}

static void job_x_write(void *arg, int tid, int nth)
{
    struct topk_job *j = arg;
    size_t b, e;
    chunk_of(j->n, tid, nth, &b, &e);
    struct topk_region *r = &j->set->reg[tid];
    uint32_t *oi = j->out->idx + r->off;
    float *ov = j->out->val + r->off;
    const uint32_t t = j->t, *map = j->map;
    const size_t want = r->gt + r->take, take = r->take;
    const float *x = j->x;
    size_t o = 0, taken = 0;
    for (size_t i = b; i < e && o < want; i++) { /* branch-free as in job_region_write */
        uint32_t key = gv_key(x[i]);
        size_t eq = key == t, sel = (key > t) | (eq & (taken < take));
        taken += eq & sel;
        oi[o] = map != NULL ? map[i] : (uint32_t)i;
        ov[o] = x[i];
        o += sel;
    }
}

/* ---------------------------------------------------------------- the paths */

/* Selection and write once a level's regions hold its candidates (nd, cnt, len, up): the k-th
 * key among the middle keys (or among the keys >= hi when k or more are there), the layout,
 * the write. Returns 0, having left the output unspecified, when a region overflowed or fewer
 * than k entries passed lo. */
static int topk_finish_regions(struct topk_job *j, struct gv_pool *pool, int nth)
{
    struct topk_set *set = j->set;
    const uint32_t k = j->k;
    size_t total = 0, up = 0;
    for (int t = 0; t < nth; t++) {
        if (set->reg[t].over)
            return 0;
        total += set->reg[t].nd + set->reg[t].cnt;
        up += set->reg[t].up;
    }
    if (total < k)
        return 0;
    size_t rank = k - up;
    int in_up = up >= k;
    if (in_up) { /* T is among the keys >= hi (rare: the sample's upper bound was low) */
        gv_pool_run(pool, nth, job_split_up, j);
        for (int t = 0; t < nth; t++)
            if (set->reg[t].over)
                return 0;
        rank = k;
        digits_plan(&j->dg, j->hi, GV_KEY_NAN + 1u);
        j->ws->stats.upper++;
    } else { /* then some keys are middle ones, so lo < hi */
        digits_plan(&j->dg, j->lo, GV_MIN(j->hi, GV_KEY_NAN + 1u));
    }
    for (int t = 0; t < nth; t++)
        set->reg[t].gt = in_up ? 0 : set->reg[t].up;
    uint32_t b = 0, rel = 0;
    j->t = j->dg.base; /* a single key value in range: no pass */
    for (int pass = 0; pass < j->dg.npass; pass++) {
        j->pass = pass;
        gv_pool_run(pool, nth, job_seg_pass, j);
        b = sel_combine(set->hist, set->reg, nth, pass, j->dg.nbuck[pass], &rank);
        rel |= b << j->dg.shift[pass];
        j->t = j->dg.base + rel;
    }
    for (int t = 0; t < nth; t++)
        set->reg[t].eq = j->dg.npass == 0 ? set->reg[t].len : set->hist[t].h[j->dg.npass - 1][b];
    size_t emitted = sel_layout(set->reg, nth, k);
    GV_ASSERT(emitted == k);
    /* a two-level run captures its second level on the way when that is a small part of
     * this one (lo2 > T) */
    j->t2 = j->lo2 != UINT32_MAX && j->lo2 > j->t ? j->lo2 : UINT32_MAX;
    gv_pool_run(pool, nth, job_region_write, j);
    /* the blocks that straddle two regions' outputs */
    const size_t bl = GV_SUMSQ_BLOCK;
    size_t last = SIZE_MAX;
    for (int t = 1; t < nth && k <= j->ws->nbsum * bl; t++) {
        size_t at = set->reg[t].off, blk = at / bl;
        if (at % bl != 0 && at < k && blk != last) {
            j->ws->bsum[blk] = gv_sumsq_block(j->out->val + blk * bl, GV_MIN(bl, k - blk * bl));
            last = blk;
        }
    }
    j->summed = k <= j->ws->nbsum * bl;
    return 1;
}

static int topk_regions(struct topk_job *j, struct gv_pool *pool, int nth)
{
    gv_pool_run(pool, nth, job_scan, j);
    return topk_finish_regions(j, pool, nth);
}

/* Draws the sample of random cache lines (s keys into ws->samp). The line positions are drawn
 * first, so that the loads can be prefetched a few lines ahead (they are misses to memory, and
 * one at a time they cost about 0.5 ms for 4096 lines). */
#define SAMPLE_PREFETCH 16u

uint32_t gv_topk_sample_lines(uint32_t n, uint32_t k, uint64_t seed, uint32_t *pos)
{
    uint32_t lines = sample_len(n) / 16;
    struct gv_rng rng;
    gv_rng_seed(&rng, gv_seed_mix(seed, n, k, 0, GV_SEED_TOPK));
    for (uint32_t l = 0; l < lines; l++)
        pos[l] = gv_rng_below(&rng, n / 16) * 16;
    return lines;
}

static uint32_t draw_sample(struct topk_job *j, uint64_t seed)
{
    const float *x = j->x;
    uint32_t *smp = j->ws->samp, *pos = j->ws->samp + 2 * SAMPLE_MAX; /* free until thresholds() */
    uint32_t lines = gv_topk_sample_lines(j->n, j->k, seed, pos);
    for (uint32_t l = 0; l < lines; l++) {
        if (l + SAMPLE_PREFETCH < lines) {
            __builtin_prefetch(x + pos[l + SAMPLE_PREFETCH]);
            __builtin_prefetch(x + pos[l + SAMPLE_PREFETCH] + 15); /* x may be unaligned */
        }
        for (uint32_t q = 0; q < 16; q++)
            smp[l * 16 + q] = gv_key(x[pos[l] + q]);
    }
    return lines * 16;
}

/* Thresholds lo < hi for k of n from the sample (which it leaves intact, so that other ranks
 * can be read from it); returns the expected number of candidates. */
static double thresholds(struct gv_topk_ws *ws, uint32_t s, uint32_t n, uint32_t k, uint32_t *lo_p,
                         uint32_t *hi_p)
{
    uint32_t *w1 = ws->samp + SAMPLE_MAX, *w2 = ws->samp + 2 * SAMPLE_MAX;
    double mu = (double)s * k / n;
    double rlo = GV_MIN(rank_lo(mu), (double)s);
    double rhi = floor(mu - MARGIN_SD * sqrt(mu) - MARGIN_ABS);
    memcpy(w1, ws->samp, (size_t)s * sizeof(uint32_t));
    memcpy(w2, ws->samp, (size_t)s * sizeof(uint32_t));
    *lo_p = select_array(w1, s, (size_t)rlo, &ws->s1.hist[0], NULL, NULL);
    *hi_p = rhi >= 1 ? select_array(w2, s, (size_t)rhi, &ws->s1.hist[0], NULL, NULL) : UINT32_MAX;
    if (*hi_p <= *lo_p)
        *hi_p = UINT32_MAX; /* heavy ties at the sample quantile: everything is "middle" */
    return (double)n * rlo / s;
}

/* For a two-level run, from the same sample: a key that at least k2 entries reach with high
 * probability (as lo for k), so that the first level's write step can capture the second
 * level's candidates; UINT32_MAX when more of them are expected than a region holds. */
static uint32_t level2_threshold(struct gv_topk_ws *ws, uint32_t s, uint32_t n, uint32_t k2,
                                 int nth)
{
    double r = rank_lo((double)s * k2 / n);
    if (r > s || (double)n * r / s > 0.5 * (double)ws->s1.cap * nth)
        return UINT32_MAX;
    uint32_t *w1 = ws->samp + SAMPLE_MAX;
    memcpy(w1, ws->samp, (size_t)s * sizeof(uint32_t));
    return select_array(w1, s, (size_t)r, &ws->s1.hist[0], NULL, NULL);
}

/* Small tensors (n <= 2 * SAMPLE_MAX): the keys fit the sample buffers, so the radix select
 * runs on a copy that shrinks pass by pass, then one write pass; one thread. */
static void topk_small(struct topk_job *j)
{
    struct gv_topk_ws *ws = j->ws;
    uint32_t *keys = ws->samp;
    const float *x = j->x;
    for (uint32_t i = 0; i < j->n; i++)
        keys[i] = gv_key(x[i]);
    size_t gt, eq_all;
    const uint32_t t = select_array(keys, j->n, j->k, &ws->s1.hist[0], &gt, &eq_all);
    const size_t take = j->k - gt, k = j->k;
    const uint32_t n = j->n, *map = j->map;
    uint32_t *oi = j->out->idx;
    float *ov = j->out->val;
    size_t o = 0, taken = 0;
    if (take == eq_all) { /* no tie to split: a plain threshold, no carried count */
        for (uint32_t i = 0; i < n && o < k; i++) {
            oi[o] = map != NULL ? map[i] : i;
            ov[o] = x[i];
            o += gv_key(x[i]) >= t;
        }
    } else {
        for (uint32_t i = 0; i < n && o < k; i++) { /* branch-free as in job_region_write */
            uint32_t key = gv_key(x[i]);
            size_t eq = key == t, sel = (key > t) | (eq & (taken < take));
            taken += eq & sel;
            oi[o] = map != NULL ? map[i] : i;
            ov[o] = x[i];
            o += sel;
        }
    }
    GV_ASSERT(o == k);
}

/* Exact path. The first digit's histogram gives the bucket b0 of the k-th key exactly; when
 * the entries of digit >= b0 fit the regions, the region machinery finishes with lo = b0 and
 * hi = b0 + 1 (two passes over x in all). Otherwise two more digit passes and a write pass. */
static void topk_exact(struct topk_job *j, struct gv_pool *pool, int nth)
{
    struct topk_set *set = j->set;
    size_t rank = j->k;
    for (int t = 0; t < nth; t++)
        memset(&set->reg[t], 0, sizeof(set->reg[t]));
    j->t = 0;
    j->pass = 0;
    gv_pool_run(pool, nth, job_x_pass, j);
    uint32_t b0 = sel_combine(set->hist, set->reg, nth, 0, NB, &rank);
    int fits = set->cap > 0;
    for (int t = 0; t < nth && fits; t++) {
        size_t c = 0;
        for (uint32_t b = b0; b < NB; b++)
            c += set->hist[t].h[0][b];
        fits = c <= set->cap;
    }
    if (fits) {
        j->lo = b0 << 20;
        j->hi = (b0 + 1) << 20;
        if (topk_regions(j, pool, nth))
            return;
        GV_ASSERT(0); /* the counts said it fits */
    }
    j->t = b0 << 20;
    for (int pass = 1; pass < 3; pass++) {
        j->pass = pass;
        for (int t = 0; t < nth; t++)
            memset(set->hist[t].h[pass], 0, sizeof(set->hist[t].h[pass]));
        gv_pool_run(pool, nth, job_x_pass, j);
        uint32_t b = sel_combine(set->hist, set->reg, nth, pass, full_digits.nbuck[pass], &rank);
        j->t |= b << full_digits.shift[pass];
    }
    for (int t = 0; t < nth; t++)
        set->reg[t].eq = set->hist[t].h[2][j->t & 0x1FFu];
    size_t total = sel_layout(set->reg, nth, j->k);
    GV_ASSERT(total == j->k);
    gv_pool_run(pool, nth, job_x_write, j);
}

static int sampled_ok(const struct gv_topk_ws *ws, uint32_t n, uint32_t k)
{
    return n >= SAMPLED_MIN_N && (uint64_t)k * SAMPLED_MAX_FRAC <= n && ws->s1.cap > 0;
}

/* Selection of one level after the trivial cases. */
static void topk_level(struct topk_job *j, struct gv_pool *pool, int nth, uint64_t seed)
{
    struct gv_topk_ws *ws = j->ws;
    if (sampled_ok(ws, j->n, j->k)) {
        uint32_t s = draw_sample(j, seed);
        double expect = thresholds(ws, s, j->n, j->k, &j->lo, &j->hi);
        if (j->k2 > 0)
            j->lo2 = level2_threshold(ws, s, j->n, j->k2, nth);
        if (expect <= (double)ws->s1.cap * nth && topk_regions(j, pool, nth)) {
            ws->stats.sampled++;
            return;
        }
        ws->stats.missed++;
        GV_TRACE("topk: sampled thresholds missed (n %u, k %u); exact radix pass", j->n, j->k);
    } else {
        ws->stats.exact++;
    }
    if (j->n <= 2 * SAMPLE_MAX)
        topk_small(j);
    else
        topk_exact(j, pool, nth);
}

static void job_all_sums(void *arg, int tid, int nth)
{
    struct topk_job *j = arg;
    const size_t bl = GV_SUMSQ_BLOCK, k = j->k, nb = (k + bl - 1) / bl;
    for (size_t b = nb * (size_t)tid / (size_t)nth; b < nb * ((size_t)tid + 1) / (size_t)nth; b++)
        j->ws->bsum[b] = gv_sumsq_block(j->out->val + b * bl, GV_MIN(bl, k - b * bl));
}

/* out->sumsq: the block sums (from the write step, or computed here where another path wrote
 * the output), added in order: gv_sumsq_f32 of the output, bit for bit. */
static void topk_sums(struct topk_job *j, struct gv_pool *pool, int nth)
{
    const size_t bl = GV_SUMSQ_BLOCK, nb = ((size_t)j->k + bl - 1) / bl;
    if (nb > j->ws->nbsum) { /* an output larger than max_numel (a malformed dense input) */
        j->out->sumsq = gv_sumsq_f32(j->out->val, j->k);
        return;
    }
    if (!j->summed)
        gv_pool_run(pool, nb >= 64 ? nth : 1, job_all_sums, j);
    double sum = 0;
    for (size_t b = 0; b < nb; b++)
        sum += j->ws->bsum[b];
    j->out->sumsq = sum;
}

/* k == 0 and k == n need no selection. Returns 1 when handled. */
static int topk_trivial(uint32_t n, uint32_t k, const float *x, const uint32_t *map,
                        struct gv_sparse *out)
{
    out->count = k;
    if (k == n) {
        for (uint32_t i = 0; i < n; i++) {
            out->idx[i] = map != NULL ? map[i] : i;
            out->val[i] = x[i];
        }
    }
    return k == 0 || k == n;
}

gv_status_t gv_topk_cpu(struct gv_topk_ws *ws, struct gv_pool *pool, int nthreads, uint64_t seed,
                        const float *x, uint32_t n, uint32_t k, const uint32_t *map,
                        struct gv_sparse *out)
{
    if (k > n || k > out->cap || (k > 0 && (out->idx == NULL || out->val == NULL)))
        return GV_ERR_INVAL;
    int nth = n >= PAR_MIN_N ? GV_MIN(nthreads, ws->nthreads) : 1;
    struct topk_job j = {.ws = ws,
                         .set = &ws->s1,
                         .x = x,
                         .n = n,
                         .k = k,
                         .map = map,
                         .out = out,
                         .lo2 = UINT32_MAX,
                         .t2 = UINT32_MAX};
    if (!topk_trivial(n, k, x, map, out))
        topk_level(&j, pool, nth, seed);
    topk_sums(&j, pool, nth);
    return GV_OK;
}

gv_status_t gv_topk_cpu2(struct gv_topk_ws *ws, struct gv_pool *pool, int nthreads, uint64_t seed,
                         const float *x, uint32_t n, uint32_t k1, uint32_t k2,
                         struct gv_sparse *out1, struct gv_sparse *out2)
{
    if (k1 > n || k2 > k1 || k1 > out1->cap || k2 > out2->cap ||
        (k1 > 0 && (out1->idx == NULL || out1->val == NULL)) ||
        (k2 > 0 && (out2->idx == NULL || out2->val == NULL)))
        return GV_ERR_INVAL;
    struct topk_set *set = &ws->s1;
    int nth = n >= PAR_MIN_N ? GV_MIN(nthreads, ws->nthreads) : 1;
    struct topk_job j = {.ws = ws,
                         .set = set,
                         .x = x,
                         .n = n,
                         .k = k1,
                         .out = out1,
                         .lo2 = UINT32_MAX,
                         .t2 = UINT32_MAX,
                         .k2 = k2};
    if (!topk_trivial(n, k1, x, NULL, out1))
        topk_level(&j, pool, nth, seed);
    topk_sums(&j, pool, nth); /* before level 2, which reuses the block sums */
    if (j.t2 != UINT32_MAX) {
        /* the write step captured the entries of level 1 with key >= t2, in index order per
         * thread: when they are k2 or more (and fitted), level 2 is their top-k2 */
        size_t total = 0;
        int ok = 1;
        for (int t = 0; t < nth; t++) {
            ok &= set->reg[t].n2 <= set->cap;
            total += set->reg[t].n2;
        }
        if (ok && total >= k2 && total <= set->cap) {
            for (int t = 1; t < nth; t++) { /* concatenated in thread 0's part */
                size_t at = 0;
                for (int q = 0; q < t; q++)
                    at += set->reg[q].n2;
                memmove(set->c2i + at, set->c2i + (size_t)t * set->cap,
                        set->reg[t].n2 * sizeof(uint32_t));
                memmove(set->c2v + at, set->c2v + (size_t)t * set->cap,
                        set->reg[t].n2 * sizeof(float));
            }
            ws->stats.captured++;
            return gv_topk_cpu(ws, pool, nthreads, seed, set->c2v, (uint32_t)total, k2, set->c2i,
                               out2);
        }
    }
    return gv_topk_cpu(ws, pool, nthreads, seed, out1->val, k1, k2, out1->idx, out2);
}
