/* cksum.c: the checksum of a float range (the drift check an UPDATE and a MODEL carry) and the
 * optimizer step fused with it. The range is cut into blocks of GV_PS_CKSUM_BLOCK elements; each
 * block's bit patterns go through four interleaved CRC32C lanes (8 bytes per step, so the
 * SSE4.2 instruction of cksum_x86.c streams near memory speed; the table-driven kernel here
 * gives the same bits anywhere), and the blocks' mixed values are summed, so any block-aligned
 * split of the range, computed in any order, gives the same checksum: a server steps and checks
 * each piece of its shard as it completes, a worker each piece of an update as it arrives, each
 * while the block is still in cache. Not a cryptographic hash: it detects drift, not tampering. */
#include "ps_internal.h"

#include <pthread.h>
#include <string.h>

/* ---------------------------------------------------------------- the portable kernel */

#define CK_POLY 0x82f63b78u /* CRC32C, reflected */

static uint32_t ck_table[8][256];
static pthread_once_t ck_table_once = PTHREAD_ONCE_INIT;

static void ck_table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (CK_POLY & (0u - (c & 1u)));
        ck_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            ck_table[t][i] = (ck_table[t - 1][i] >> 8) ^ ck_table[0][ck_table[t - 1][i] & 0xff];
}

/* What _mm_crc32_u64(c, w) computes (no inversion before or after), eight bytes at a time. */
static inline uint32_t ck_crc64(uint32_t c, uint64_t w)
{
    uint64_t x = w ^ c;
    return ck_table[7][x & 0xff] ^ ck_table[6][(x >> 8) & 0xff] ^ ck_table[5][(x >> 16) & 0xff] ^
           ck_table[4][(x >> 24) & 0xff] ^ ck_table[3][(x >> 32) & 0xff] ^
           ck_table[2][(x >> 40) & 0xff] ^ ck_table[1][(x >> 48) & 0xff] ^ ck_table[0][x >> 56];
}

/* What _mm_crc32_u32(c, w) computes. */
static inline uint32_t ck_crc32(uint32_t c, uint32_t w)
{
    uint32_t x = w ^ c;
    return ck_table[3][x & 0xff] ^ ck_table[2][(x >> 8) & 0xff] ^ ck_table[1][(x >> 16) & 0xff] ^
           ck_table[0][x >> 24];
}

uint64_t gv_ps_cksum_block_generic(const float *x, size_t m)
{
    pthread_once(&ck_table_once, ck_table_init);
    uint32_t l[4] = {GV_PS_CKSUM_LANE0, GV_PS_CKSUM_LANE1, GV_PS_CKSUM_LANE2, GV_PS_CKSUM_LANE3};
    size_t words = m / 2, t = 0;
    for (; t < words; t++) {
        uint64_t w;
        memcpy(&w, x + 2 * t, sizeof(w)); /* elements 2t, 2t+1, little-endian */
        l[t % 4] = ck_crc64(l[t % 4], w);
    }
    if (m % 2 != 0) {
        uint32_t w;
        memcpy(&w, x + m - 1, sizeof(w));
        l[t % 4] = ck_crc32(l[t % 4], w);
    }
    return gv_ps_cksum_lanes(l);
}

/* ---------------------------------------------------------------- blocks and their sum */

static uint64_t (*ck_block)(const float *, size_t);
static const char *ck_name;
static pthread_once_t ck_pick_once = PTHREAD_ONCE_INIT;

static void ck_pick(void)
{
    ck_block = gv_ps_cksum_pick(&ck_name);
}

const char *gv_ps_cksum_kernel(void)
{
    pthread_once(&ck_pick_once, ck_pick);
    return ck_name;
}

static inline uint64_t ck_fmix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

/* Block b's share of the sum: its lanes mixed with its index and length, so that blocks that
 * trade places, or a block cut short, change the checksum. */
static inline uint64_t ck_mix(uint64_t lanes, size_t b, size_t m)
{
    return ck_fmix(lanes ^ ((uint64_t)b * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)m << 52));
}

uint64_t gv_ps_cksum_range(const float *x, size_t from, size_t to)
{
    pthread_once(&ck_pick_once, ck_pick);
    uint64_t sum = 0;
    for (size_t a = from; a < to; a += GV_PS_CKSUM_BLOCK) {
        size_t m = GV_MIN((size_t)GV_PS_CKSUM_BLOCK, to - a);
        sum += ck_mix(ck_block(x + a, m), a / GV_PS_CKSUM_BLOCK, m);
    }
    return sum;
}

uint64_t gv_ps_cksum_final(uint64_t sum, size_t n)
{
    /* the constant keeps an empty vector's checksum off 0, which MODEL reads as "not computed" */
    return ck_fmix(sum ^ ((uint64_t)n * 0xc2b2ae3d27d4eb4full) ^ 0x6a09e667f3bcc909ull);
}

uint64_t gv_ps_checksum(const float *p, size_t n)
{
    return gv_ps_cksum_final(gv_ps_cksum_range(p, 0, n), n);
}

/* ---------------------------------------------------------------- the step, fused */

uint64_t gv_ps_step_range(const struct gv_optim_cfg *cfg, float lr, float *p, float *v,
                          const float *g, size_t from, size_t to, bool checksum)
{
    pthread_once(&ck_pick_once, ck_pick);
    uint64_t sum = 0;
    for (size_t a = from; a < to; a += GV_PS_CKSUM_BLOCK) {
        size_t m = GV_MIN((size_t)GV_PS_CKSUM_BLOCK, to - a);
        gv_optim_apply_host(cfg, lr, p + a, v + a, g + a, m);
        if (checksum) /* the block just written is in L1 */
            sum += ck_mix(ck_block(p + a, m), a / GV_PS_CKSUM_BLOCK, m);
    }
    return sum;
}
