/*
 * policy_layer.c — the layer-granular policy of the partial-offload baseline
 * (paper §6.1; the seam is src/mem/policy.h, the mechanism src/mem/manager.c).
 *
 * Whole layers go, from the last one backward: in layer l, its KV chunks
 * (the last chunk first), each written raw to the swap file, then its weight
 * block, dropped (the model file is its source) while no other context
 * shares the model. No compression, no balancing of two restore paths: what
 * mzcache is compared against. Pure, like the other policies: the plan is a
 * function of the unit states and the request.
 */
#include "baseline.h"

static bool kv_resident(const mz_policy_view *v, const uint8_t *sim, int l, size_t c)
{
    (void)v;
    return sim[(size_t)l * v->max_chunks + c] == MZ_UNIT_RESIDENT;
}

static mz_evict_stage layer_stage(const mz_policy *p, const mz_policy_view *v)
{
    (void)p;
    for (int l = v->n_layer - 1; l >= 0; l--) {
        for (size_t c = v->n_chunks; c-- > 0;)
            if (mz_unit_state_get(&v->kv[(size_t)l * v->max_chunks + c]) == MZ_UNIT_RESIDENT)
                return MZ_EVICT_STAGE_KV_ONLY;
        if (v->weights_evictable && mz_unit_state_get(&v->weights[l]) == MZ_UNIT_RESIDENT)
            return MZ_EVICT_STAGE_W_ONLY;
    }
    return MZ_EVICT_STAGE_DONE;
}

static void layer_plan(const mz_policy *pol, const mz_policy_view *v, size_t nbytes,
                       mz_evict_plan *p)
{
    (void)pol;
    p->n = 0;
    p->bytes_planned = 0;
    p->exhausted = false;
    (void)mz_policy_sim_load(v, p);
    mz_mem_dest kv_dest = v->can_store ? MZ_DEST_STORE_RAW : MZ_DEST_COMPRESS;
    for (int l = v->n_layer - 1; l >= 0; l--) {
        for (size_t c = v->n_chunks; c-- > 0;) {
            if (p->bytes_planned >= 0 && (uint64_t)p->bytes_planned >= nbytes) return;
            if (!kv_resident(v, p->sim_kv, l, c)) continue;
            mz_evict_step s = {.kind = MZ_UNIT_KV, .layer = l, .chunk = c, .dest = kv_dest,
                               .stage = MZ_EVICT_STAGE_KV_ONLY,
                               .est_freed = (int64_t)v->unit_bytes_kv};
            if (kv_dest == MZ_DEST_COMPRESS) s.est_freed -= (int64_t)v->enc_bytes_kv_est;
            p->sim_kv[(size_t)l * v->max_chunks + c] =
                (uint8_t)(kv_dest == MZ_DEST_STORE_RAW ? MZ_UNIT_STORED_RAW : MZ_UNIT_COMPRESSED);
            mz_evict_plan_push(p, &s);
        }
        if (p->bytes_planned >= 0 && (uint64_t)p->bytes_planned >= nbytes) return;
        if (v->weights_evictable && p->sim_w[l] == MZ_UNIT_RESIDENT) {
            mz_evict_step s = {.kind = MZ_UNIT_WEIGHTS, .layer = l, .dest = MZ_DEST_DROP,
                               .stage = MZ_EVICT_STAGE_W_ONLY,
                               .est_freed = (int64_t)v->weights[l].bytes};
            p->sim_w[l] = MZ_UNIT_DROPPED;
            mz_evict_plan_push(p, &s);
        }
    }
    p->exhausted = true;
}

static void layer_free(mz_policy *p) { free(p); }

mz_policy *mz_policy_layer_init(const mz_policy_params *prm)
{
    (void)prm;
    mz_policy *p = mz_calloc(1, sizeof *p);
    if (!p) return NULL;
    *p = (mz_policy){.name = "layer", .plan = layer_plan, .stage = layer_stage,
                     .free = layer_free};
    return p;
}
