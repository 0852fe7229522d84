/*
 * mode.c — names of the engine modes (mzcache and the built-in baselines).
 */
#include "../core/core.h"

#include <string.h>

static const char *const mode_names[] = {
    [MZ_MODE_MZCACHE] = "mzcache",
    [MZ_MODE_OS_PAGING] = "os-paging",
    [MZ_MODE_PARTIAL_OFFLOAD] = "partial-offload",
    [MZ_MODE_RECOMPUTE] = "recompute",
};

const char *mz_engine_mode_name(mz_engine_mode m)
{
    return (unsigned)m < MZ_ARRAY_LEN(mode_names) ? mode_names[m] : NULL;
}

mz_status mz_engine_mode_parse(const char *name, mz_engine_mode *out)
{
    for (size_t i = 0; name && i < MZ_ARRAY_LEN(mode_names); i++) {
        if (strcmp(name, mode_names[i]) == 0) {
            *out = (mz_engine_mode)i;
            return MZ_OK;
        }
    }
    return mz_fail(MZ_E_INVAL, "unknown engine mode '%s' (known: mzcache, os-paging, "
                               "partial-offload, recompute)", name ? name : "(null)");
}
