/*
 * policy_backward.c — the simple eviction policy (contract in policy.h).
 *
 * Order (paper §4.4, backward-out): the rearmost remaining unit first.
 *   1. KV chunks: layer n_layer-1 down to 0, in each layer the last chunk first;
 *   2. weight blocks: layer n_layer-1 down to 0 (only while no other context
 *      shares the model);
 *   3. CompKV: the compressed stack's bottom item (the chunk needed last) to storage.
 * Destination of a KV chunk: fixed by the placement parameter, or alternating
 * compressed / raw storage for MZ_KV_PLACE_MIXED (and AUTO), so tests can
 * force every restore path. Storage destinations fall back to the compressed
 * stack when no swap file can be used.
 *
 * Invariant: under this order the resident KV chunks of each layer are a
 * prefix, and the resident layers are a prefix, after any sequence of
 * evictions and forward-in restores — the property forward-in restore relies
 * on (the compressed stack pops in exactly the order prefill needs).
 *
 * This is deliberately not Algorithm 1; the next issue replaces it.
 */
#include "policy.h"

typedef struct backward_policy {
    mz_policy base;             /* first: the vtable */
    mz_kv_placement placement;
    size_t n_kv_done;           /* KV chunks moved; drives the mixed alternation */
} backward_policy;

static mz_mem_dest kv_dest(const backward_policy *bp, const mz_policy_view *v)
{
    mz_mem_dest d;
    switch (bp->placement) {
    case MZ_KV_PLACE_COMPRESSED: d = MZ_DEST_COMPRESS; break;
    case MZ_KV_PLACE_STORAGE: d = MZ_DEST_STORE_RAW; break;
    case MZ_KV_PLACE_STORAGE_COMPRESSED: d = MZ_DEST_STORE_COMPRESSED; break;
    case MZ_KV_PLACE_AUTO:
    case MZ_KV_PLACE_MIXED:
    default: d = (bp->n_kv_done % 2 == 0) ? MZ_DEST_COMPRESS : MZ_DEST_STORE_RAW; break;
    }
    if (!v->can_store && d != MZ_DEST_COMPRESS) d = MZ_DEST_COMPRESS;
    return d;
}

static bool backward_next(mz_policy *p, const mz_policy_view *v, mz_evict_step *out)
{
    const backward_policy *bp = (const backward_policy *)p;
    out->dest = MZ_DEST_NONE;
    for (int l = v->n_layer - 1; l >= 0; l--) {
        for (size_t c = v->n_chunks; c-- > 0;) {
            if (mz_unit_state_get(&v->kv[(size_t)l * v->max_chunks + c]) != MZ_UNIT_RESIDENT)
                continue;
            *out = (mz_evict_step){.kind = MZ_UNIT_KV, .layer = l, .chunk = c,
                                   .dest = kv_dest(bp, v)};
            return true;
        }
    }
    if (v->weights_evictable) {
        for (int l = v->n_layer - 1; l >= 0; l--) {
            if (mz_unit_state_get(&v->weights[l]) != MZ_UNIT_RESIDENT) continue;
            *out = (mz_evict_step){.kind = MZ_UNIT_WEIGHTS, .layer = l, .dest = MZ_DEST_DROP};
            return true;
        }
    }
    if (v->can_store && v->comp_bottom_layer >= 0) {
        *out = (mz_evict_step){.kind = MZ_UNIT_KV, .layer = v->comp_bottom_layer,
                               .chunk = v->comp_bottom_chunk, .dest = MZ_DEST_STORE_COMPRESSED};
        return true;
    }
    return false;
}

static void backward_done(mz_policy *p, const mz_evict_step *s, bool ok)
{
    backward_policy *bp = (backward_policy *)p;
    if (ok && s->kind == MZ_UNIT_KV && s->dest != MZ_DEST_NONE) bp->n_kv_done++;
}

static void backward_on_restore(mz_policy *p) { ((backward_policy *)p)->n_kv_done = 0; }

static void backward_free(mz_policy *p) { free(p); }

mz_policy *mz_policy_backward_init(mz_kv_placement placement)
{
    backward_policy *bp = mz_calloc(1, sizeof *bp);
    if (!bp) return NULL;
    bp->base = (mz_policy){.name = "backward", .next = backward_next, .done = backward_done,
                           .on_restore = backward_on_restore, .free = backward_free};
    bp->placement = placement;
    return &bp->base;
}
