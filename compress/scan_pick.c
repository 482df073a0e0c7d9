/* scan_pick.c: targets without scan_x86.c use the portable scan. */
#include "compress_internal.h"

gv_scan_fn gv_scan_pick(const char **name_p, gv_scan_split_fn *split_p)
{
    if (split_p != NULL)
        *split_p = gv_scan_split_generic;
    if (name_p != NULL)
        *name_p = "generic";
    return gv_scan_generic;
}
