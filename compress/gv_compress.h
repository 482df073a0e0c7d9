/* gv_compress.h: gradient compression for gravac: what a worker turns a gradient into before it
 * goes on the wire, and back. Compressors (exact top-k, random-k, DGC sampled threshold, Redsync
 * threshold search, dense passthrough, optional fp16 values), error feedback with one residual
 * per tensor, two-level ("multi-level") compression with the squared norms the GraVAC controller
 * needs, and the encoding of a sparse tensor into wire segments with a validating decoder. CPU
 * and CUDA backends sit behind one interface (the memory kind chosen at create picks the
 * backend), so callers need no #ifdef.
 * Deliberately holds no sockets, no protobuf, no clock reads and no controller policy. */
#ifndef GV_COMPRESS_H
#define GV_COMPRESS_H

#include "gv_common.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ================================================================ conventions
 *
 * CF (compression factor) = original size / compressed size, a real number >= 1 (10 = keep 10%
 * of the entries, 1000 = keep 0.1%). For a tensor of n entries a sparsifier keeps
 *     k = max(1, floor(n / CF))          (k = 0 only for n = 0)
 * entries. Index overhead is not part of the CF (it is reported by the encoder, exactly).
 * Tensors have at most UINT32_MAX entries (indices are uint32). */

/* k for n entries at compression factor cf. GV_ERR_INVAL when cf is not finite or < 1, or when
 * n > UINT32_MAX. */
gv_status_t gv_cf_to_k(uint64_t n, double cf, uint32_t *k_p);

/* ================================================================ fp16
 * IEEE binary16 conversions written in C (no hardware dependence), round to nearest, ties to
 * even. Overflow (|x| >= 65520) gives +-Inf; NaN stays NaN (quiet, sign and the top payload bits
 * kept); subnormals are produced and read exactly; -0 stays -0. */
uint16_t gv_f32_to_f16(float f);
float gv_f16_to_f32(uint16_t h);
/* The float the compressors send in fp16 mode: finite values are first clamped to +-65504 (the
 * largest finite half, so a large gradient is not turned into Inf; the clamped-off excess stays
 * in the residual), then rounded as gv_f32_to_f16 does. +-Inf and NaN pass through. The result
 * is exactly representable as a half. */
float gv_f16_round_sat(float f);

/* ================================================================ compressors */

enum gv_cmp_kind {
    GV_CMP_DENSE = 0,   /* passthrough: all n values (CF ignored) */
    GV_CMP_TOPK = 1,    /* exact top-k by magnitude (see ordering below) */
    GV_CMP_RANDOMK = 2, /* k distinct positions drawn uniformly, seed shared by all workers */
    GV_CMP_DGC = 3,     /* DGC sampled threshold (approximate count, 0..bound entries) */
    GV_CMP_REDSYNC = 4, /* Redsync mean/max threshold search (approximate count) */
};
const char *gv_cmp_kind_str(enum gv_cmp_kind kind);
/* "dense", "topk", "randomk", "dgc", "redsync"; GV_ERR_INVAL for anything else. */
gv_status_t gv_cmp_kind_parse(const char *s, enum gv_cmp_kind *kind_p);

enum gv_val_type {
    GV_VAL_F32 = 0,
    GV_VAL_F16 = 1, /* selected values are rounded with gv_f16_round_sat before they are sent */
};

/* Magnitude order used by top-k (and the tie rule everywhere): NaN ranks above +-Inf, +-Inf
 * above every finite value, then |x|; +0 and -0 tie. Among equal magnitudes (all NaNs are equal
 * here) the lower index wins. Outputs list indices in strictly ascending order.
 * Threshold compressors (DGC, Redsync) compute their statistics over finite values only and
 * always select non-finite entries. So a NaN or Inf gradient is always sent, never hidden in a
 * residual: the receiver sees the divergence. */

struct gv_cmp;

struct gv_cmp_config {
    enum gv_cmp_kind kind;
    enum gv_mem mem; /* GV_MEM_HOST: CPU backend; GV_MEM_DEVICE: CUDA backend. All
                      * gradients, residuals and outputs passed in are of this kind. */
    enum gv_val_type val_type;
    uint64_t max_numel; /* largest tensor that will be compressed, 1..UINT32_MAX */
    double min_cf;      /* smallest CF that will be asked for (sizes the workspace), >=1 */
    int nthreads;       /* CPU threads: 0 = all online CPUs, 1 = the calling thread only */
    uint64_t seed;      /* identical on all workers: random-k positions, sampling */
};

/* Defaults: top-k, host memory, f32 values, max_numel 0 (must be set), min_cf 1, one thread,
 * seed 0. */
void gv_cmp_config_init(struct gv_cmp_config *cfg);

/* One compressor: its backend, worker threads and a workspace sized once for (max_numel,
 * min_cf), so compressing does not allocate. Not thread-safe: one caller at a time (it uses its
 * own threads inside). GV_ERR_INVAL for a bad config, GV_ERR_UNSUPPORTED for GV_MEM_DEVICE
 * without CUDA support built in, GV_ERR_NODEV when built but no GPU is present, GV_ERR_CUDA,
 * GV_ERR_NOMEM. */
gv_status_t gv_cmp_create(const struct gv_cmp_config *cfg, struct gv_cmp **cmp_p);
/* Accepts NULL. Destroy every gv_ef made from this compressor first. */
void gv_cmp_destroy(struct gv_cmp *cmp);
const struct gv_cmp_config *gv_cmp_get_config(const struct gv_cmp *cmp);
/* Threads actually used ("all" resolved), and the backend: "cpu-avx512" / "cpu-avx2" /
 * "cpu-generic" (the CPU scan kernel in use) or "cuda". */
int gv_cmp_nthreads(const struct gv_cmp *cmp);
const char *gv_cmp_backend(const struct gv_cmp *cmp);

/* Entries an output of this compressor may hold for a tensor of n entries at cf, i.e. the cap
 * to allocate: k for top-k and random-k; min(n, 2k) for DGC and Redsync (a threshold that would
 * select more falls back to exact top-k, see docs/compress.md); n for dense. 0 when the
 * arguments are invalid or n > max_numel / cf < min_cf. */
uint32_t gv_cmp_bound(const struct gv_cmp *cmp, uint64_t n, double cf);

/* A compressed tensor. idx and val are caller-provided arrays of the compressor's memory kind,
 * cap entries each (size them with gv_cmp_bound); the compressor fills count, n, dense, sumsq. */
struct gv_sparse {
    uint32_t *idx;  /* uint32[cap], strictly ascending; not written (may be NULL) when dense */
    float *val;     /* float[cap]: the values that are sent (fp16-rounded in fp16 mode) */
    uint32_t cap;   /* set by the caller */
    uint32_t count; /* entries written */
    uint32_t n;     /* size of the tensor the indices refer to */
    int dense;      /* 1: val[i] is entry i and count == n (dense compressor) */
    double sumsq;   /* sum of val[i]^2, in double */
};

/* Selects entries of x (float[n], compressor's memory kind, borrowed) into out at factor cf, no
 * error feedback. iter and tensor_id seed random-k (and the samplers) so that every worker draws
 * the same positions for the same (seed, iter, tensor_id). GV_ERR_INVAL for bad arguments or
 * out->cap below gv_cmp_bound. */
gv_status_t gv_cmp_select(struct gv_cmp *cmp, const float *x, uint32_t n, double cf, uint64_t iter,
                          uint32_t tensor_id, struct gv_sparse *out);
/* Second level: selects from the entries of in (an output of this compressor, borrowed) down to
 * factor cf relative to the original tensor (k = max(1, floor(in->n / cf)), capped at
 * in->count), into out (its own arrays; indices are original tensor indices). For top-k this
 * equals gv_cmp_select at cf on the full tensor; for random-k it is a uniform subset of in; for
 * DGC and Redsync the threshold rule is re-applied to in's values. */
gv_status_t gv_cmp_select_sub(struct gv_cmp *cmp, const struct gv_sparse *in, double cf,
                              uint64_t iter, uint32_t tensor_id, struct gv_sparse *out);

/* Both levels in one call, no error feedback: lvl_min at cf_min from x, lvl_cand at cf_cand
 * (>= cf_min) within lvl_min. Equal to gv_cmp_select then gv_cmp_select_sub, except that in
 * fp16 mode the second level ranks unrounded values (as gv_cmp_compress does). */
gv_status_t gv_cmp_select2(struct gv_cmp *cmp, const float *x, uint32_t n, double cf_min,
                           double cf_cand, uint64_t iter, uint32_t tensor_id,
                           struct gv_sparse *lvl_min, struct gv_sparse *lvl_cand);

/* ================================================================ error feedback + multi-level
 *
 * One residual r per tensor, of the compressor's memory kind. Each iteration, per tensor:
 *   gv_cmp_compress: g_ef = g + r (computed in place: the residual buffer now holds g_ef),
 *                    level "min" = C(g_ef, cf_min), level "cand" = C(level min, cf_cand), and
 *                    the squared norms ||g_ef||^2, ||g_min||^2, ||g_c||^2.
 *   (the worker reports the norms summed over its tensors; the server decides what is sent)
 *   gv_cmp_apply:    r = g_ef - sent for the level actually sent, r = 0 after a dense step
 *                    (which sends g_ef, read from gv_ef_data), r = g_ef when nothing was sent.
 * Levels that were not sent leave no trace in r. */

struct gv_ef;

/* Residual for a tensor of n entries (n <= max_numel), zeroed. residual: borrowed float[n] of
 * the compressor's memory kind (e.g. a view into the worker's arena), or NULL to allocate one.
 * The gv_ef keeps a pointer to cmp, which must outlive it. */
gv_status_t gv_ef_create(struct gv_cmp *cmp, uint32_t n, float *residual, struct gv_ef **ef_p);
/* Accepts NULL; frees the residual only if it allocated it. */
void gv_ef_destroy(struct gv_ef *ef);
/* float[n], compressor's memory kind: r between steps, g_ef between compress and apply. */
float *gv_ef_data(const struct gv_ef *ef);
uint32_t gv_ef_numel(const struct gv_ef *ef);
/* r = 0 (e.g. after loading a checkpoint); also cancels a pending step. */
gv_status_t gv_ef_reset(struct gv_ef *ef);

/* Squared L2 norms of one tensor, or summed over a model with gv_norms_add. */
struct gv_norms {
    double ef;   /* ||g_ef||^2 */
    double min;  /* ||g_min||^2 (what level "min" would send) */
    double cand; /* ||g_c||^2 (level "cand"; equals min when there is no second level) */
};
static inline void gv_norms_add(struct gv_norms *sum, const struct gv_norms *t)
{
    sum->ef += t->ef;
    sum->min += t->min;
    sum->cand += t->cand;
}

struct gv_cmp_req {
    uint64_t iter;      /* iteration number (seeds random-k) */
    uint32_t tensor_id; /* stable id of the tensor in the model (seeds random-k) */
    double cf_min;      /* theta_min >= 1 */
    double cf_cand;     /* candidate CF >= cf_min, or 0 for one level only */
};

/* One tensor's step: g_ef = g + r, both levels and the norms, in one call. g: float[n]
 * (borrowed, read only; n = gv_ef_numel). lvl_min, lvl_cand: caller-provided outputs (lvl_cand
 * may be NULL when req->cf_cand == 0). norms_p receives this tensor's norms. After it returns
 * the ef is pending: call gv_cmp_apply before the next compress (GV_ERR_INVAL otherwise).
 * Squared norms are summed in double in fixed-size blocks, so they do not depend on the
 * thread count. A NaN or Inf in g_ef makes ||g_ef||^2 NaN or Inf. */
gv_status_t gv_cmp_compress(struct gv_cmp *cmp, struct gv_ef *ef, const float *g,
                            const struct gv_cmp_req *req, struct gv_sparse *lvl_min,
                            struct gv_sparse *lvl_cand, struct gv_norms *norms_p);

enum gv_sent {
    GV_SENT_SPARSE = 0,  /* `sent` (lvl_min or lvl_cand of this step) went out: r = g_ef - sent */
    GV_SENT_DENSE = 1,   /* g_ef went out dense: r = 0 */
    GV_SENT_NOTHING = 2, /* nothing went out this step: r = g_ef */
};

/* Sets the residual from what was actually sent and ends the pending step. `sent` is borrowed
 * and must be an output of this step's gv_cmp_compress for this ef (GV_SENT_SPARSE only).
 * Where sent entries are non-finite (a NaN or Inf went out) the residual there is 0. */
gv_status_t gv_cmp_apply(struct gv_cmp *cmp, struct gv_ef *ef, enum gv_sent what,
                         const struct gv_sparse *sent);

/* ================================================================ memory of the compressor's kind
 * So callers (worker, tests, bench) need no CUDA headers. On the CPU backend these are
 * gv_aligned_alloc / memcpy. */
gv_status_t gv_cmp_mem_alloc(struct gv_cmp *cmp, size_t bytes, void **ptr_p); /* zeroed */
void gv_cmp_mem_free(struct gv_cmp *cmp, void *ptr);
gv_status_t gv_cmp_copy_to_host(struct gv_cmp *cmp, void *host_dst, const void *src, size_t bytes);
gv_status_t gv_cmp_copy_from_host(struct gv_cmp *cmp, void *dst, const void *host_src,
                                  size_t bytes);
/* dst <- src, both of the compressor's kind (completed when it returns). */
gv_status_t gv_cmp_copy(struct gv_cmp *cmp, void *dst, const void *src, size_t bytes);
/* Copies src's metadata and its count entries into host_dst's host arrays (cap >= count). */
gv_status_t gv_cmp_sparse_to_host(struct gv_cmp *cmp, const struct gv_sparse *src,
                                  struct gv_sparse *host_dst);

/* dense[idx[i]] += val[i] for i < count, duplicates accumulate. All arrays are of the
 * compressor's kind (dense: float[n]). GV_ERR_INVAL (nothing added) if an index is >= n. */
gv_status_t gv_cmp_scatter_add(struct gv_cmp *cmp, float *dense, uint32_t n, const uint32_t *idx,
                               const float *val, uint32_t count);

/* Number of CUDA devices in *ndev_p. GV_ERR_UNSUPPORTED when built without CUDA, GV_ERR_NODEV
 * when the runtime finds no device (the tests' SKIP condition). */
gv_status_t gv_cmp_cuda_probe(int *ndev_p);

/* ================================================================ sparse segments
 *
 * Per tensor, two segments that go on the wire as separate iov entries, neither with a header:
 *   index segment: the encoded indices (empty for DENSE),
 *   value segment: count values, f32 or f16, little-endian.
 * What a receiver needs to read them (n, count, index encoding, value type: struct
 * gv_sparse_desc) travels beside them, in the message header the caller builds; compress/
 * neither writes nor reads it. Index encodings (docs/compress.md has them byte by byte):
 *   DENSE  nothing (count == n, value i is entry i)
 *   RAW32  count x u32; strictly ascending unless the decoder allows duplicates
 *   VARINT count x LEB128(idx[i] - idx[i-1] - 1), idx[-1] = -1 (strictly ascending by form)
 *   BITMAP ceil(n/8) bytes, bit i (LSB first) set iff i is present; count = popcount
 * The encoder picks the smallest valid encoding (ties: VARINT, BITMAP, RAW32). */

enum gv_idx_enc {
    GV_IDX_AUTO = -1, /* encoder only: choose the smallest */
    GV_IDX_DENSE = 0,
    GV_IDX_RAW32 = 1,
    GV_IDX_VARINT = 2,
    GV_IDX_BITMAP = 3,
};
const char *gv_idx_enc_str(enum gv_idx_enc enc);

/* What a receiver must know to decode one tensor's two segments. */
struct gv_sparse_desc {
    uint32_t n;          /* entries of the tensor the indices refer to */
    uint32_t count;      /* entries carried (== n for DENSE; may exceed n for RAW32 sums) */
    enum gv_idx_enc enc; /* DENSE, RAW32, VARINT or BITMAP; never AUTO */
    enum gv_val_type vt;
};

/* The encoder's plan for one tensor: its description and the exact length of each segment. */
struct gv_sparse_layout {
    struct gv_sparse_desc desc;
    size_t idx_len; /* exact bytes of the index segment (0 for DENSE) */
    size_t val_len; /* exact bytes of the value segment */
};

/* Segment sizes to allocate once: every encoding, forced or chosen, fits in
 * gv_sparse_idx_bound bytes (the automatic choice is never larger than 4 * count). */
size_t gv_sparse_idx_bound(uint64_t n, uint64_t count);
size_t gv_sparse_val_len(uint64_t count, enum gv_val_type vt);

/* Chooses the encoding (enc = GV_IDX_AUTO or a forced one) for sp (host arrays, borrowed) and
 * reports it with the exact segment lengths in *lay_p, writing nothing else. GV_ERR_INVAL when
 * the forced encoding cannot represent sp (VARINT/BITMAP need strictly ascending indices, DENSE
 * a dense sp), or when an index is >= sp->n. */
gv_status_t gv_sparse_plan(const struct gv_sparse *sp, enum gv_val_type vt, enum gv_idx_enc enc,
                           struct gv_sparse_layout *lay_p);
/* Encodes sp into the index segment idx_seg (idx_cap bytes) and the value segment val_seg
 * (val_cap bytes): host, caller-provided, written from their first byte; either may be NULL
 * when its length is 0. GV_ERR_INVAL (nothing written) as gv_sparse_plan, or if a capacity is
 * too small. In fp16 the values are converted with gv_f32_to_f16 (exact for values that came
 * from an fp16-mode compressor). *lay_p (may be NULL) receives what gv_sparse_plan gives. */
gv_status_t gv_sparse_encode(const struct gv_sparse *sp, enum gv_val_type vt, enum gv_idx_enc enc,
                             void *idx_seg, size_t idx_cap, void *val_seg, size_t val_cap,
                             struct gv_sparse_layout *lay_p);

/* Decoder flags. */
#define GV_DECODE_ALLOW_DUP                                                                        \
    0x1u                      /* RAW32 indices may repeat and come in any order (sums of           \
                               * several workers); count may then exceed n */
#define GV_DECODE_FINITE 0x2u /* reject NaN and Inf values */

/* Checks a description against the segment lengths, before the segments are read: a known
 * encoding and value type, count == n for DENSE, count <= n (RAW32: unless
 * GV_DECODE_ALLOW_DUP), idx_len exact for DENSE (0), RAW32 (4 * count) and BITMAP
 * (ceil(n/8)) (VARINT's is known only by parsing), val_len exact. The decoders below run it
 * first; a receiver may also call it on a header before the payload arrives. GV_ERR_PROTO with
 * one log line naming the problem. */
gv_status_t gv_sparse_desc_check(const struct gv_sparse_desc *d, size_t idx_len, size_t val_len,
                                 unsigned flags);

/* Decodes the segments described by d into idx_out / val_out (host, cap entries; DENSE gives
 * idx 0..n-1). The whole input is validated before anything is written: gv_sparse_desc_check,
 * every index < n, strictly ascending (unless GV_DECODE_ALLOW_DUP for RAW32), minimal varints
 * that fill the segment exactly, no bits set beyond n, popcount == count, and with
 * GV_DECODE_FINITE every value finite. Segments are host memory, borrowed, of any alignment.
 * GV_ERR_PROTO with one log line naming what is wrong; GV_ERR_INVAL if cap < count. */
gv_status_t gv_sparse_decode(const struct gv_sparse_desc *d, const void *idx_seg, size_t idx_len,
                             const void *val_seg, size_t val_len, unsigned flags, uint32_t *idx_out,
                             float *val_out, uint32_t cap);
/* Same validation, then dense[idx] += val (host float[d->n]), duplicates accumulating. On
 * error dense is untouched. */
gv_status_t gv_sparse_decode_add(const struct gv_sparse_desc *d, const void *idx_seg,
                                 size_t idx_len, const void *val_seg, size_t val_len,
                                 unsigned flags, float *dense);

#ifdef __cplusplus
}
#endif
#endif /* GV_COMPRESS_H */
