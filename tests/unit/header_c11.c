/* Compiles the public headers alone, as a user's C11 program would: the
 * main one, and the experimental one (paper ablations) on top of it. */
#include "mzcache.h"
#include "mzcache_experimental.h"

int main(void)
{
    mz_model_info info = {0};
    mz_status s = MZ_OK;
    mz_ctx_experimental xc = {.evict_order = MZ_EVICT_BACKWARD, .evict_seed = 0};
    mz_restore_experimental xr = {.overlap = MZ_OVERLAP_ALL, .debug_delay_us = 0, .seed = 0};
    mz_ctx_params cp = {.experimental = &xc};
    mz_restore_params rp = {.experimental = &xr};
    return (int)s + (int)(sizeof info == 0) + (cp.experimental != &xc) + (rp.experimental != &xr);
}
