/* scratch_config.c: stands in for transport.c's gv_tp_config_default in the scratch build
 * only (the real one arrives with the TCP backend's registry). */
#include "gv_transport.h"

void gv_tp_config_default(struct gv_tp_config *cfg)
{
    *cfg = (struct gv_tp_config){65536, 2ull << 30, 4 << 20, 10000, 10000, 5, 1, 3, 64, 1ull << 30};
}
