/* cksum_pick.c: targets without cksum_x86.c use the portable block kernel. */
#include "ps_internal.h"

gv_ps_cksum_block_fn gv_ps_cksum_pick(const char **name_p)
{
    *name_p = "generic";
    return gv_ps_cksum_block_generic;
}
