/*
 * mem_names.c — public names of KV placements, eviction orders and stages.
 */
#include "manager_impl.h"

#include <string.h>

/* ---- public names ---------------------------------------------------------------------- */

static const char *const placement_names[] = {
    [MZ_KV_PLACE_AUTO] = "auto",
    [MZ_KV_PLACE_COMPRESSED] = "compressed",
    [MZ_KV_PLACE_STORAGE] = "storage",
    [MZ_KV_PLACE_STORAGE_COMPRESSED] = "storage-compressed",
    [MZ_KV_PLACE_MIXED] = "mixed",
};

const char *mz_kv_placement_name(mz_kv_placement p)
{
    return (unsigned)p < MZ_ARRAY_LEN(placement_names) ? placement_names[p] : NULL;
}

mz_status mz_kv_placement_parse(const char *name, mz_kv_placement *out)
{
    for (size_t i = 0; name && i < MZ_ARRAY_LEN(placement_names); i++) {
        if (strcmp(name, placement_names[i]) == 0) {
            *out = (mz_kv_placement)i;
            return MZ_OK;
        }
    }
    return mz_fail(MZ_E_INVAL, "unknown KV placement '%s' (known: auto, compressed, storage, "
                               "storage-compressed, mixed)", name ? name : "(null)");
}

static const char *const order_names[] = {
    [MZ_EVICT_BACKWARD] = "backward",
    [MZ_EVICT_FORWARD] = "forward",
    [MZ_EVICT_RANDOM] = "random",
};

mz_ctx_experimental mz_ctx_experimental_default(void)
{
    return (mz_ctx_experimental){.evict_order = MZ_EVICT_BACKWARD, .evict_seed = 0};
}

const char *mz_evict_order_name(mz_evict_order o)
{
    return (unsigned)o < MZ_ARRAY_LEN(order_names) ? order_names[o] : NULL;
}

mz_status mz_evict_order_parse(const char *name, mz_evict_order *out)
{
    for (size_t i = 0; name && i < MZ_ARRAY_LEN(order_names); i++) {
        if (strcmp(name, order_names[i]) == 0) {
            *out = (mz_evict_order)i;
            return MZ_OK;
        }
    }
    return mz_fail(MZ_E_INVAL, "unknown eviction order '%s' (known: backward, forward, random)",
                   name ? name : "(null)");
}

const char *mz_evict_stage_name(mz_evict_stage st)
{
    static const char *const names[] = {
        [MZ_EVICT_STAGE_NONE] = "-",           [MZ_EVICT_STAGE_KV_ONLY] = "kv-only",
        [MZ_EVICT_STAGE_KV_AND_W] = "kv-and-w", [MZ_EVICT_STAGE_W_ONLY] = "w-only",
        [MZ_EVICT_STAGE_COMP_KV] = "comp-kv",   [MZ_EVICT_STAGE_DONE] = "done",
    };
    return (unsigned)st < MZ_ARRAY_LEN(names) ? names[st] : NULL;
}
