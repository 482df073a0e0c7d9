/* scan_pick.c: targets without scan_x86.c use the portable kernels. */
#include "compress_internal.h"

void gv_scan_pick(struct gv_scan_kernels *k)
{
    k->name = "generic";
    k->scan = gv_scan_generic;
    k->split = gv_scan_split_generic;
    k->compact = gv_compact_generic;
    k->compact2 = gv_compact2_generic;
}
