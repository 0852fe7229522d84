/*
 * policy_backward.c — the fixed-placement policy (contract in policy.h), for
 * tests and ablations that must force one restore path.
 *
 * Stages, simpler than Algorithm 1 and without balancing:
 *   1. KV chunks (stage "kv-only"), in the configured order (backward-out by
 *      default: layer n_layer-1 down to 0, in each layer the last chunk
 *      first), each to the destination the placement names: compressed,
 *      storage (raw), storage-compressed, or mixed — compressed when the
 *      number of evicted chunks so far is even, raw storage when it is odd,
 *      so the paths alternate and the choice is a function of the state;
 *   2. weight blocks ("w-only"), same order, while no other context shares
 *      the model;
 *   3. CompKV ("comp-kv"): the compressed stack's bottom item first.
 * Storage destinations fall back to the compressed stack when no swap file
 * can be used. Like the hybrid policy it is pure: the plan is recomputed
 * from the table at each call.
 */
#include "policy.h"

typedef struct backward_policy {
    mz_policy base;             /* first: the vtable */
    mz_kv_placement placement;
    mz_policy_params prm;
} backward_policy;

typedef struct bstate {
    size_t n_kv, n_w, n_evicted_kv;
    size_t stack_lo, stack_hi;
} bstate;

static mz_evict_stage bstage(const bstate *b, const mz_policy_view *v)
{
    if (b->n_kv) return MZ_EVICT_STAGE_KV_ONLY;
    if (b->n_w) return MZ_EVICT_STAGE_W_ONLY;
    if (v->can_store && b->stack_lo < b->stack_hi) return MZ_EVICT_STAGE_COMP_KV;
    return MZ_EVICT_STAGE_DONE;
}

static void bcount(const mz_policy_view *v, bstate *b)
{
    *b = (bstate){0};
    for (int l = 0; l < v->n_layer; l++) {
        if (v->weights_evictable && mz_unit_state_get(&v->weights[l]) == MZ_UNIT_RESIDENT)
            b->n_w++;
        for (size_t c = 0; c < v->n_chunks; c++) {
            mz_unit_state s = mz_unit_state_get(&v->kv[(size_t)l * v->max_chunks + c]);
            if (mz_policy_kv_stored_dead(v, l, c, s)) continue; /* off the restore paths */
            if (s == MZ_UNIT_RESIDENT) b->n_kv++;
            else if (s != MZ_UNIT_ABSENT) b->n_evicted_kv++;
            if (s == MZ_UNIT_COMPRESSED) b->stack_hi++;
        }
    }
}

static mz_mem_dest kv_dest(const backward_policy *bp, const mz_policy_view *v, size_t n_evicted)
{
    mz_mem_dest d;
    switch (bp->placement) {
    case MZ_KV_PLACE_COMPRESSED: d = MZ_DEST_COMPRESS; break;
    case MZ_KV_PLACE_STORAGE: d = MZ_DEST_STORE_RAW; break;
    case MZ_KV_PLACE_STORAGE_COMPRESSED: d = MZ_DEST_STORE_COMPRESSED; break;
    case MZ_KV_PLACE_MIXED:
    default: d = n_evicted % 2 == 0 ? MZ_DEST_COMPRESS : MZ_DEST_STORE_RAW; break;
    }
    if (!v->can_store) d = MZ_DEST_COMPRESS;
    return d;
}

static mz_evict_stage backward_stage(const mz_policy *p, const mz_policy_view *v)
{
    (void)p;
    bstate b;
    bcount(v, &b);
    return bstage(&b, v);
}

static size_t next_resident(const uint32_t *ord, size_t n, const uint8_t *sim, size_t *cursor)
{
    while (*cursor < n && sim[ord[*cursor]] != MZ_UNIT_RESIDENT) (*cursor)++;
    MZ_ASSERT(*cursor < n);
    return ord[(*cursor)++];
}

static void backward_plan(const mz_policy *pol, const mz_policy_view *v, size_t nbytes,
                          mz_evict_plan *p)
{
    const backward_policy *bp = (const backward_policy *)pol;
    bstate b;
    p->n = 0;
    p->bytes_planned = 0;
    bcount(v, &b);
    b.stack_hi = mz_policy_sim_load(v, p);
    b.n_kv -= mz_policy_plan_dead(v, nbytes, p); /* mixed alternates over live chunks only */
    mz_policy_fill_orders(v, bp->prm.order, bp->prm.seed, p);
    size_t n_kv_units = (size_t)v->n_layer * v->n_chunks, ck = 0, cw = 0;
    while (nbytes > 0 && (p->bytes_planned < 0 || (uint64_t)p->bytes_planned < nbytes)) {
        mz_evict_stage st = bstage(&b, v);
        mz_evict_step s = {.stage = st};
        if (st == MZ_EVICT_STAGE_DONE) break;
        if (st == MZ_EVICT_STAGE_W_ONLY) {
            size_t l = next_resident(p->ord_w, (size_t)v->n_layer, p->sim_w, &cw);
            s.kind = MZ_UNIT_WEIGHTS;
            s.layer = (int)l;
            s.dest = MZ_DEST_DROP;
            s.est_freed = (int64_t)v->weights[l].bytes;
            p->sim_w[l] = MZ_UNIT_DROPPED;
            b.n_w--;
        } else {
            size_t i = st == MZ_EVICT_STAGE_KV_ONLY
                           ? next_resident(p->ord_kv, n_kv_units, p->sim_kv, &ck)
                           : p->stack[b.stack_lo++];
            s.kind = MZ_UNIT_KV;
            s.layer = (int)(i / v->max_chunks);
            s.chunk = i % v->max_chunks;
            if (st == MZ_EVICT_STAGE_KV_ONLY) {
                s.dest = kv_dest(bp, v, b.n_evicted_kv);
                s.est_freed = (int64_t)v->unit_bytes_kv;
                if (s.dest == MZ_DEST_COMPRESS) {
                    s.est_freed -= (int64_t)v->enc_bytes_kv_est;
                    p->stack[b.stack_hi++] = (uint32_t)i;
                }
                p->sim_kv[i] = (uint8_t)(s.dest == MZ_DEST_COMPRESS ? MZ_UNIT_COMPRESSED
                                         : s.dest == MZ_DEST_STORE_RAW ? MZ_UNIT_STORED_RAW
                                                                       : MZ_UNIT_STORED_COMPRESSED);
                b.n_kv--;
                b.n_evicted_kv++;
            } else {
                bool was = mz_unit_state_get(&v->kv[i]) == MZ_UNIT_COMPRESSED;
                s.dest = MZ_DEST_STORE_COMPRESSED;
                s.est_freed = was ? (int64_t)v->kv[i].enc_bytes : (int64_t)v->enc_bytes_kv_est;
                p->sim_kv[i] = MZ_UNIT_STORED_COMPRESSED;
            }
        }
        mz_evict_plan_push(p, &s);
    }
    p->exhausted = bstage(&b, v) == MZ_EVICT_STAGE_DONE;
}

static void backward_free(mz_policy *p) { free(p); }

mz_policy *mz_policy_backward_init(mz_kv_placement placement, const mz_policy_params *prm)
{
    MZ_ASSERT(placement != MZ_KV_PLACE_AUTO);
    backward_policy *bp = mz_calloc(1, sizeof *bp);
    if (!bp) return NULL;
    bp->base = (mz_policy){.name = "fixed", .plan = backward_plan, .stage = backward_stage,
                           .free = backward_free};
    bp->placement = placement;
    bp->prm = prm ? *prm : mz_policy_params_default();
    return &bp->base;
}
