/* topk.cu: exact top-k and threshold selection on the GPU.
 * Top-k: three radix-select passes over the magnitude keys (digits of 11, 11 and 9 bits; a
 * shared-memory histogram per block, then one warp finds the bucket holding the k-th key and
 * narrows the rank) leave the k-th key T and how many entries equal to T to take. The ordered
 * compaction (per-tile counts, one scan over tiles, per-tile block scans) then writes keys > T
 * and the first need_eq keys == T in index order: the same set, order and tie rule as the CPU.
 * Everything stays on the device between passes; the host synchronises once at the end. */
#include "cuda_internal.cuh"

__device__ __forceinline__ uint32_t d_digit(uint32_t key, int pass)
{
    return pass == 0 ? key >> 20 : pass == 1 ? (key >> 9) & 0x7FFu : key & 0x1FFu;
}

/* Histogram of digit `pass` over the keys whose higher digits equal sel->prefix's. */
__global__ void k_hist(const float *x, uint32_t n, int pass, const struct gv_cu_sel *sel,
                       uint32_t *hist)
{
    __shared__ uint32_t sh[2048];
    const uint32_t nb = pass == 2 ? 512u : 2048u;
    for (uint32_t i = threadIdx.x; i < nb; i += blockDim.x)
        sh[i] = 0;
    __syncthreads();
    const uint32_t shift = pass == 1 ? 20u : 9u;
    const uint32_t want = pass > 0 ? sel->prefix >> shift : 0u;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t key = gv_cu_key(x[i]);
        if (pass == 0 || (key >> shift) == want)
            atomicAdd(&sh[d_digit(key, pass)], 1u);
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < nb; i += blockDim.x)
        if (sh[i] != 0)
            atomicAdd(&hist[i], sh[i]);
}

/* One warp: finds the bucket of the rank-th largest key, records the digit, narrows the rank,
 * and zeroes the histogram for the next pass. After the last pass it sets the compaction
 * parameters. */
__global__ void k_find(uint32_t *hist, int pass, struct gv_cu_sel *sel, uint32_t k)
{
    const uint32_t nb = pass == 2 ? 512u : 2048u, per = nb / 32;
    const int lane = threadIdx.x;
    uint32_t rank = pass == 0 ? k : sel->rank;
    /* lane 0 owns the top `per` buckets, lane 31 the bottom ones */
    const uint32_t top = nb - (uint32_t)lane * per;
    uint32_t s = 0;
    for (uint32_t b = top - per; b < top; b++)
        s += hist[b];
    uint32_t incl = s;
    for (int off = 1; off < 32; off <<= 1) {
        uint32_t t = __shfl_up_sync(0xFFFFFFFFu, incl, off);
        if (lane >= off)
            incl += t;
    }
    uint32_t excl = incl - s;
    unsigned owner_mask = __ballot_sync(0xFFFFFFFFu, excl < rank && rank <= incl);
    int owner = owner_mask != 0 ? __ffs(owner_mask) - 1 : 31;
    if (lane == owner) {
        uint32_t cum = excl, b = top;
        while (b > top - per) {
            b--;
            uint32_t c = hist[b];
            if (cum + c >= rank)
                break;
            cum += c;
        }
        uint32_t prefix = pass == 0 ? 0u : sel->prefix;
        prefix |= pass == 0 ? b << 20 : pass == 1 ? b << 9 : b;
        sel->prefix = prefix;
        sel->rank = rank - cum;
        if (pass == 2) {
            sel->gt_min = prefix + 1u;
            sel->eq_key = prefix;
            sel->need_eq = rank - cum;
        }
    }
    __syncwarp();
    for (uint32_t b = top - per; b < top; b++)
        hist[b] = 0;
}

/* Per tile: how many keys are >= gt_min and how many == eq_key. */
__global__ void k_tile_count(const float *x, uint32_t n, const struct gv_cu_sel *sel,
                             uint32_t *tile_gt, uint32_t *tile_eq)
{
    const size_t base = (size_t)blockIdx.x * GV_CU_TILE;
    const uint32_t gt_min = sel->gt_min, eq_key = sel->eq_key;
    uint32_t g = 0, e = 0;
    for (uint32_t j = threadIdx.x; j < GV_CU_TILE; j += blockDim.x) {
        size_t i = base + j;
        if (i < n) {
            uint32_t key = gv_cu_key(x[i]);
            g += key >= gt_min;
            e += key == eq_key;
        }
    }
    /* pack: per block at most 4096 of each, so 16 bits would do; use 32/32 in 64 */
    unsigned long long v = gv_cu_block_sum(((unsigned long long)g << 32) | e);
    if (threadIdx.x == 0) {
        tile_gt[blockIdx.x] = (uint32_t)(v >> 32);
        tile_eq[blockIdx.x] = (uint32_t)v;
    }
}

/* One block: exclusive scan of the tile counts in place; the grand total of what will be
 * written goes to sel->total. */
__global__ void k_tile_scan(uint32_t *tile_gt, uint32_t *tile_eq, uint32_t ntiles,
                            struct gv_cu_sel *sel)
{
    unsigned long long carry = 0; /* gt in the high half, eq in the low half; each < 2^32 */
    for (uint32_t base = 0; base < ntiles; base += blockDim.x) {
        uint32_t i = base + threadIdx.x;
        unsigned long long v =
            i < ntiles ? ((unsigned long long)tile_gt[i] << 32) | tile_eq[i] : 0ull;
        unsigned long long total;
        unsigned long long ex = gv_cu_block_excl_scan(v, &total);
        if (i < ntiles) {
            unsigned long long o = carry + ex;
            tile_gt[i] = (uint32_t)(o >> 32);
            tile_eq[i] = (uint32_t)o;
        }
        carry += total;
    }
    if (threadIdx.x == 0) {
        uint32_t gt = (uint32_t)(carry >> 32), eq = (uint32_t)carry;
        sel->total = gt + (eq < sel->need_eq ? eq : sel->need_eq);
    }
}

/* Writes the selected entries of each tile at their global positions: an entry's position is
 * (keys >= gt_min before it) + min(keys == eq_key before it, need_eq). */
__global__ void k_tile_write(const float *x, uint32_t n, const struct gv_cu_sel *sel,
                             const uint32_t *tile_gt, const uint32_t *tile_eq, const uint32_t *map,
                             uint32_t *idx_out, float *val_out)
{
    const size_t base = (size_t)blockIdx.x * GV_CU_TILE;
    const uint32_t gt_min = sel->gt_min, eq_key = sel->eq_key, need_eq = sel->need_eq;
    uint32_t run_gt = tile_gt[blockIdx.x], run_eq = tile_eq[blockIdx.x];
    for (uint32_t r = 0; r < GV_CU_TILE; r += blockDim.x) {
        size_t i = base + r + threadIdx.x;
        float v = 0.0f;
        uint32_t g = 0, e = 0;
        if (i < n) {
            v = x[i];
            uint32_t key = gv_cu_key(v);
            g = key >= gt_min;
            e = key == eq_key;
        }
        uint32_t total;
        uint32_t ex = gv_cu_block_excl_scan((g << 16) | e, &total);
        uint32_t gt_before = run_gt + (ex >> 16), eq_before = run_eq + (ex & 0xFFFFu);
        if (g || (e && eq_before < need_eq)) {
            uint32_t pos = gt_before + (eq_before < need_eq ? eq_before : need_eq);
            idx_out[pos] = map != NULL ? map[i] : (uint32_t)i;
            val_out[pos] = v;
        }
        run_gt += total >> 16;
        run_eq += total & 0xFFFFu;
    }
}

__global__ void k_copy_all(const float *x, uint32_t n, const uint32_t *map, uint32_t *idx_out,
                           float *val_out)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        idx_out[i] = map != NULL ? map[i] : (uint32_t)i;
        val_out[i] = x[i];
    }
}

static gv_status_t compact(struct gv_cuda_ws *ws, const float *x, uint32_t n, const uint32_t *map,
                           uint32_t *idx_out, float *val_out)
{
    uint32_t ntiles = (uint32_t)(((uint64_t)n + GV_CU_TILE - 1) / GV_CU_TILE);
    k_tile_count<<<ntiles, GV_CU_BLOCK>>>(x, n, ws->sel, ws->tile_gt, ws->tile_eq);
    k_tile_scan<<<1, 1024>>>(ws->tile_gt, ws->tile_eq, ntiles, ws->sel);
    k_tile_write<<<ntiles, GV_CU_BLOCK>>>(x, n, ws->sel, ws->tile_gt, ws->tile_eq, map, idx_out,
                                          val_out);
    return gv_cu_sync("compaction");
}

extern "C" gv_status_t gv_cuda_topk(struct gv_cuda_ws *ws, const float *x, uint32_t n, uint32_t k,
                                    const uint32_t *map, uint32_t *idx_out, float *val_out)
{
    if (k > n || (uint64_t)n > ws->max_n)
        return GV_ERR_INVAL;
    if (k == 0)
        return GV_OK;
    if (k == n) {
        k_copy_all<<<gv_cu_blocks(n, ws->grid), GV_CU_BLOCK>>>(x, n, map, idx_out, val_out);
        return gv_cu_sync("top-k copy");
    }
    GV_CU(cudaMemset(ws->hist, 0, 2048 * sizeof(uint32_t)));
    GV_CU(cudaMemset(ws->sel, 0, sizeof(*ws->sel)));
    int blocks = gv_cu_blocks(n, ws->grid);
    for (int pass = 0; pass < 3; pass++) {
        k_hist<<<blocks, GV_CU_BLOCK>>>(x, n, pass, ws->sel, ws->hist);
        k_find<<<1, 32>>>(ws->hist, pass, ws->sel, k);
    }
    return compact(ws, x, n, map, idx_out, val_out);
}

extern "C" gv_status_t gv_cuda_select_ge(struct gv_cuda_ws *ws, const float *x, uint32_t n,
                                         uint32_t key_min, const uint32_t *map, uint32_t cap,
                                         uint32_t *idx_out, float *val_out, uint32_t *count_p)
{
    if ((uint64_t)n > ws->max_n)
        return GV_ERR_INVAL;
    uint64_t cnt = 0;
    gv_status_t status = gv_cuda_count_ge(ws, x, n, key_min, &cnt);
    if (status != GV_OK)
        return status;
    if (cnt > cap) {
        gv_log(GV_LOG_ERROR, "compress: threshold selects %llu entries, cap %u",
               (unsigned long long)cnt, cap);
        return GV_ERR_INVAL;
    }
    *count_p = (uint32_t)cnt;
    if (cnt == 0)
        return GV_OK;
    /* keys >= key_min; the eq class is a key no float has */
    struct gv_cu_sel sel = {0, 0, key_min, 0xFFFFFFFFu, 0, 0};
    GV_CU(cudaMemcpy(ws->sel, &sel, sizeof(sel), cudaMemcpyHostToDevice));
    return compact(ws, x, n, map, idx_out, val_out);
}
