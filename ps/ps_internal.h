/* ps_internal.h: what ps/'s files share privately. */
#ifndef GV_PS_INTERNAL_H
#define GV_PS_INTERNAL_H

#include "gv_ps.h"

/* job_data.c: image shape, classes and training-set size of the job's data, from the files'
 * headers (the text corpus is read for its vocabulary). */
gv_status_t job_data_shape(struct gv_job *job);

/* cksum.c: one block's four CRC32C lanes (at most GV_PS_CKSUM_BLOCK elements: 8-byte word t
 * of the block goes to lane t % 4, an odd last element as a 4-byte word to the next lane in
 * turn), folded into 64 bits. The portable kernel, and the fastest one this CPU runs
 * (cksum_x86.c, else cksum_pick.c), which must give the same bits; tests call both. */
#define GV_PS_CKSUM_LANE0 0x243f6a88u
#define GV_PS_CKSUM_LANE1 0x85a308d3u
#define GV_PS_CKSUM_LANE2 0x13198a2eu
#define GV_PS_CKSUM_LANE3 0x03707344u
typedef uint64_t (*gv_ps_cksum_block_fn)(const float *x, size_t m);
static inline uint64_t gv_ps_cksum_lanes(const uint32_t l[4])
{
    return ((uint64_t)(l[0] ^ ((l[2] << 16) | (l[2] >> 16))) << 32) |
           (uint64_t)(l[1] ^ ((l[3] << 16) | (l[3] >> 16)));
}
uint64_t gv_ps_cksum_block_generic(const float *x, size_t m);
gv_ps_cksum_block_fn gv_ps_cksum_pick(const char **name_p);

#endif /* GV_PS_INTERNAL_H */
