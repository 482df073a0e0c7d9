/* cksum_x86.c: the checksum's block kernel with SSE4.2's CRC32C instruction (CMake leaves this
 * file out on other targets and uses cksum_pick.c). Four lanes hide the instruction's latency:
 * 8 bytes per cycle, against about 1 for the table-driven kernel, which gives the same bits.
 * Chosen at run time; GV_PS_CKSUM=generic forces the portable kernel. */
#include "ps_internal.h"

#include <nmmintrin.h>
#include <stdlib.h>
#include <string.h>

__attribute__((target("sse4.2"))) static uint64_t cksum_sse42(const float *x, size_t m)
{
    uint64_t l0 = GV_PS_CKSUM_LANE0, l1 = GV_PS_CKSUM_LANE1, l2 = GV_PS_CKSUM_LANE2,
             l3 = GV_PS_CKSUM_LANE3;
    size_t words = m / 2, t = 0;
    const unsigned char *b = (const unsigned char *)x;
    for (; t + 4 <= words; t += 4) {
        uint64_t w0, w1, w2, w3;
        memcpy(&w0, b + 8 * t, 8);
        memcpy(&w1, b + 8 * t + 8, 8);
        memcpy(&w2, b + 8 * t + 16, 8);
        memcpy(&w3, b + 8 * t + 24, 8);
        l0 = _mm_crc32_u64(l0, w0);
        l1 = _mm_crc32_u64(l1, w1);
        l2 = _mm_crc32_u64(l2, w2);
        l3 = _mm_crc32_u64(l3, w3);
    }
    uint32_t l[4] = {(uint32_t)l0, (uint32_t)l1, (uint32_t)l2, (uint32_t)l3};
    for (; t < words; t++) {
        uint64_t w;
        memcpy(&w, b + 8 * t, 8);
        l[t % 4] = (uint32_t)_mm_crc32_u64(l[t % 4], w);
    }
    if (m % 2 != 0) {
        uint32_t w;
        memcpy(&w, x + m - 1, sizeof(w));
        l[t % 4] = _mm_crc32_u32(l[t % 4], w);
    }
    return gv_ps_cksum_lanes(l);
}

gv_ps_cksum_block_fn gv_ps_cksum_pick(const char **name_p)
{
    const char *force = getenv("GV_PS_CKSUM");
    if ((force == NULL || strcmp(force, "generic") != 0) && __builtin_cpu_supports("sse4.2")) {
        *name_p = "sse4.2";
        return cksum_sse42;
    }
    *name_p = "generic";
    return gv_ps_cksum_block_generic;
}
