/*
 * policy_hybrid.c — the four-stage hybrid swap of paper §4.3 (Algorithm 1)
 * with the backward-out order of §4.4. Contract in policy.h: a pure
 * function of (unit states, per-unit times, request) -> ordered steps.
 *
 * Two restore paths run in parallel when the context comes back: the memory
 * path decodes chunks from the compressed stack (t_d per chunk), the storage
 * path reads raw chunks from the swap file (t_rKV) and weight blocks from the
 * model file (t_rW). Eviction decides what each path will have to do, so it
 * keeps their planned times A_mem and A_sto equal wherever it stops.
 *
 * State. Everything is recomputed from the table at every call, never
 * remembered, so a plan is right from any prior state (after a partial
 * restore, another policy, a failed step):
 *     N_KV   resident KV chunks         A_mem = t_d  · #COMPRESSED
 *     N_W    resident weight blocks     A_sto = t_rKV · #STORED_RAW
 *            (0 while the model is              + t_rKVc · #STORED_COMPRESSED
 *            shared: none may drop)             + w · #DROPPED
 * where w is what a dropped block counts for (see rounding below).
 *
 * Threshold. T = the KV chunks the memory path needs so that, once every
 * remaining block is dropped, both paths are balanced:
 *     T = max(0, floor((A_sto - A_mem + N_W · w) / t_d))
 * On a fresh table (A_mem = A_sto = 0, N_W = N_W_total) with w = t_rW this is
 * floor(N_W_total · t_rW / t_d); with the paper's rounding (w = floor(t_rW /
 * t_d) · t_d) it is exactly the paper's T = N_W_total · floor(t_rW / t_d).
 *
 * Stages (Algorithm 1's if-chain, evaluated before every step):
 *   KVonly   N_KV > T: the next KV chunk goes to the path that finishes
 *            first with it: memory if A_mem + t_d <= A_sto + t_rKV, else
 *            storage (raw). The faster path takes more, in inverse
 *            proportion to its unit time.
 *   KVandW   0 < N_KV <= T: drop the next weight block when the memory path
 *            is not behind (A_mem >= A_sto and N_W > 0), else compress the
 *            next KV chunk into memory. A block is followed by the chunks
 *            that cover its reload: floor(t_rW / t_d) or one more, the
 *            remainder carried from block to block (exactly floor(t_rW/t_d)
 *            each under the paper's rounding).
 *   Wonly    N_KV = 0, N_W > 0: drop the next weight block.
 *   CompKV   nothing resident: move the compressed stack's bottom item (the
 *            chunk needed last) to storage, encoded as it is.
 *   done     nothing left (or CompKV impossible: no swap file).
 *
 * Invariants (tests/unit/test_policy.c checks each one):
 *   - stages only move forward while evicting: a KVonly step to memory keeps
 *     N_KV - T, one to storage lowers it; KVandW steps keep it (dropping a
 *     block adds w to A_sto and removes w from N_W · w; compressing lowers N_KV
 *     and T by one), all in exact integer nanoseconds, so no rounding flips a
 *     stage back;
 *   - balance: |A_mem - A_sto| never exceeds max(its value when the plan
 *     started, the largest unit time of the stage): KVonly is greedy list
 *     scheduling (<= max(t_d, t_rKV)); KVandW adds to the path that is behind
 *     (<= max(t_d, t_rW)). Wonly and CompKV cannot balance (paper §4.3,
 *     "Balance preservation") and are entered only when KV has run out;
 *   - order: units of each kind are taken in the order of policy.c
 *     (backward-out: the resident units of each kind stay a prefix of the
 *     forward order after any mix of evictions and forward-in restores);
 *   - the plan ends when its estimated freed bytes reach the request, or
 *     when nothing evictable is left (exhausted).
 *
 * Tunables (mz_policy_params): order and seed; rounding = MZ_HYBRID_EXACT
 * (default: the balance bound above holds through KVandW; T differs from the
 * paper's formula by less than N_W_total chunks) or MZ_HYBRID_PAPER (the
 * paper's integer form; the storage path then drifts ahead by t_rW mod t_d
 * per block dropped in KVandW). Without a swap file every KV chunk goes to
 * memory and CompKV is skipped.
 */
#include "policy.h"

#include <string.h>

typedef struct hybrid_policy {
    mz_policy base;             /* first: the vtable */
    mz_policy_params prm;
} hybrid_policy;

/* The planner's running state (see the top comment). */
typedef struct hstate {
    int64_t a_mem, a_sto;       /* planned times, ns (dropped blocks at w) */
    int64_t w;                  /* what a dropped block counts for */
    size_t n_kv, n_w;
    size_t stack_lo, stack_hi;  /* simulated stack items [lo, hi) of plan->stack */
} hstate;

static int64_t block_cost(const mz_unit_times *t, mz_hybrid_rounding r)
{
    return r == MZ_HYBRID_PAPER ? t->t_rw_ns / t->t_d_ns * t->t_d_ns : t->t_rw_ns;
}

static int64_t threshold(const hstate *h, const mz_unit_times *t)
{
    int64_t x = h->a_sto - h->a_mem + (int64_t)h->n_w * h->w;
    return x > 0 ? x / t->t_d_ns : 0;
}

static mz_evict_stage stage_of(const hstate *h, const mz_policy_view *v)
{
    if (h->n_kv > 0)
        return (int64_t)h->n_kv > threshold(h, &v->times) ? MZ_EVICT_STAGE_KV_ONLY
                                                           : MZ_EVICT_STAGE_KV_AND_W;
    if (h->n_w > 0) return MZ_EVICT_STAGE_W_ONLY;
    if (v->can_store && h->stack_lo < h->stack_hi) return MZ_EVICT_STAGE_COMP_KV;
    return MZ_EVICT_STAGE_DONE;
}

/* Loads the table into the plan's scratch and the running state. */
static void hstate_load(const hybrid_policy *hp, const mz_policy_view *v, mz_evict_plan *p,
                        hstate *h)
{
    const mz_unit_times *t = &v->times;
    MZ_ASSERT(t->t_d_ns > 0 && t->t_rkv_ns > 0 && t->t_rw_ns > 0);
    memset(h, 0, sizeof *h);
    h->w = block_cost(t, hp->prm.rounding);
    h->stack_hi = mz_policy_sim_load(v, p);
    for (int l = 0; l < v->n_layer; l++) {
        mz_unit_state s = (mz_unit_state)p->sim_w[l];
        if (s == MZ_UNIT_DROPPED) h->a_sto += h->w;
        if (s == MZ_UNIT_RESIDENT && v->weights_evictable) h->n_w++;
        for (size_t c = 0; c < v->n_chunks; c++) {
            mz_unit_state ks = (mz_unit_state)p->sim_kv[(size_t)l * v->max_chunks + c];
            if (mz_policy_kv_stored_dead(v, l, c, ks)) continue;
            switch (ks) {
            case MZ_UNIT_RESIDENT: h->n_kv++; break;
            case MZ_UNIT_COMPRESSED: h->a_mem += t->t_d_ns; break;
            case MZ_UNIT_STORED_RAW: h->a_sto += t->t_rkv_ns; break;
            case MZ_UNIT_STORED_COMPRESSED: h->a_sto += t->t_rkvc_ns; break;
            default: break;
            }
        }
    }
}

static mz_evict_stage hybrid_stage(const mz_policy *p, const mz_policy_view *v)
{
    /* The stage needs only counts and sums: no scratch, no sort. */
    const hybrid_policy *hp = (const hybrid_policy *)p;
    const mz_unit_times *t = &v->times;
    hstate h = {.w = block_cost(t, hp->prm.rounding)};
    for (int l = 0; l < v->n_layer; l++) {
        mz_unit_state s = mz_unit_state_get(&v->weights[l]);
        if (s == MZ_UNIT_DROPPED) h.a_sto += h.w;
        if (s == MZ_UNIT_RESIDENT && v->weights_evictable) h.n_w++;
        for (size_t c = 0; c < v->n_chunks; c++) {
            mz_unit_state ks = mz_unit_state_get(&v->kv[(size_t)l * v->max_chunks + c]);
            if (mz_policy_kv_stored_dead(v, l, c, ks)) continue;
            switch (ks) {
            case MZ_UNIT_RESIDENT: h.n_kv++; break;
            case MZ_UNIT_COMPRESSED: h.a_mem += t->t_d_ns; h.stack_hi++; break;
            case MZ_UNIT_STORED_RAW: h.a_sto += t->t_rkv_ns; break;
            case MZ_UNIT_STORED_COMPRESSED: h.a_sto += t->t_rkvc_ns; break;
            default: break;
            }
        }
    }
    return stage_of(&h, v);
}

/* Next unit of a kind in the plan's order that is still resident in the
 * simulation; *cursor only moves forward (the resident set only shrinks). */
static uint32_t next_resident(const uint32_t *ord, size_t n, const uint8_t *sim, size_t *cursor)
{
    while (*cursor < n && sim[ord[*cursor]] != MZ_UNIT_RESIDENT) (*cursor)++;
    MZ_ASSERT(*cursor < n);
    return ord[(*cursor)++];
}

static void hybrid_plan(const mz_policy *pol, const mz_policy_view *v, size_t nbytes,
                        mz_evict_plan *p)
{
    const hybrid_policy *hp = (const hybrid_policy *)pol;
    const mz_unit_times *t = &v->times;
    hstate h;
    p->n = 0;
    p->bytes_planned = 0;
    hstate_load(hp, v, p, &h);
    h.n_kv -= mz_policy_plan_dead(v, nbytes, p);
    mz_policy_fill_orders(v, hp->prm.order, hp->prm.seed, p);
    size_t n_kv_units = (size_t)v->n_layer * v->n_chunks, ck = 0, cw = 0;
    int64_t kv_bytes = (int64_t)v->unit_bytes_kv;
    int64_t comp_gain = kv_bytes - (int64_t)v->enc_bytes_kv_est;

    while (nbytes > 0 && (p->bytes_planned < 0 || (uint64_t)p->bytes_planned < nbytes)) {
        mz_evict_stage st = stage_of(&h, v);
        if (st == MZ_EVICT_STAGE_DONE) break;
        enum { KV_TO_MEM, KV_TO_STORAGE, DROP_BLOCK, MOVE_BOTTOM } act;
        switch (st) {
        case MZ_EVICT_STAGE_KV_ONLY:
            act = !v->can_store || h.a_mem + t->t_d_ns <= h.a_sto + t->t_rkv_ns ? KV_TO_MEM
                                                                                : KV_TO_STORAGE;
            break;
        case MZ_EVICT_STAGE_KV_AND_W:
            act = h.n_w > 0 && h.a_mem >= h.a_sto ? DROP_BLOCK : KV_TO_MEM;
            break;
        case MZ_EVICT_STAGE_W_ONLY: act = DROP_BLOCK; break;
        default: act = MOVE_BOTTOM; break;
        }
        mz_evict_step s = {.stage = st};
        if (act == DROP_BLOCK) {
            uint32_t l = next_resident(p->ord_w, (size_t)v->n_layer, p->sim_w, &cw);
            s.kind = MZ_UNIT_WEIGHTS;
            s.layer = (int)l;
            s.chunk = 0;
            s.dest = MZ_DEST_DROP;
            s.est_freed = (int64_t)v->weights[l].bytes;
            p->sim_w[l] = MZ_UNIT_DROPPED;
            h.a_sto += h.w;
            h.n_w--;
        } else {
            uint32_t i = act == MOVE_BOTTOM ? p->stack[h.stack_lo++]
                                            : next_resident(p->ord_kv, n_kv_units, p->sim_kv, &ck);
            s.kind = MZ_UNIT_KV;
            s.layer = (int)(i / v->max_chunks);
            s.chunk = i % v->max_chunks;
            /* [store] a chunk with a current copy in the session store costs
             * nothing to evict (pages released, no encode or write): it goes
             * to the storage path whichever path was due. */
            if (act == KV_TO_MEM && mz_unit_is_clean(&v->kv[i])) act = KV_TO_STORAGE;
            if (act == KV_TO_MEM) {
                s.dest = MZ_DEST_COMPRESS;
                s.est_freed = comp_gain;
                p->sim_kv[i] = MZ_UNIT_COMPRESSED;
                p->stack[h.stack_hi++] = i;
                h.a_mem += t->t_d_ns;
                h.n_kv--;
            } else if (act == KV_TO_STORAGE) {
                s.dest = MZ_DEST_STORE_RAW;
                s.est_freed = kv_bytes;
                p->sim_kv[i] = MZ_UNIT_STORED_RAW;
                h.a_sto += t->t_rkv_ns;
                h.n_kv--;
            } else {
                /* CompKV: encoded before this plan, its real size; by this
                 * plan, the estimate. */
                bool was = mz_unit_state_get(&v->kv[i]) == MZ_UNIT_COMPRESSED;
                s.dest = MZ_DEST_STORE_COMPRESSED;
                s.est_freed = was ? (int64_t)v->kv[i].enc_bytes : (int64_t)v->enc_bytes_kv_est;
                p->sim_kv[i] = MZ_UNIT_STORED_COMPRESSED;
                h.a_mem -= t->t_d_ns;
                h.a_sto += t->t_rkvc_ns;
            }
        }
        mz_evict_plan_push(p, &s);
    }
    p->exhausted = stage_of(&h, v) == MZ_EVICT_STAGE_DONE;
}

static void hybrid_free(mz_policy *p) { free(p); }

mz_policy *mz_policy_hybrid_init(const mz_policy_params *prm)
{
    hybrid_policy *hp = mz_calloc(1, sizeof *hp);
    if (!hp) return NULL;
    hp->base = (mz_policy){.name = "hybrid", .plan = hybrid_plan, .stage = hybrid_stage,
                           .free = hybrid_free};
    hp->prm = prm ? *prm : mz_policy_params_default();
    return &hp->base;
}
