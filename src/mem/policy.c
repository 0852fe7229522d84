/*
 * policy.c — what the eviction policies share (contract in policy.h): the
 * plan buffer, the three eviction orders, the simulated table a planner
 * works on, and the planned restore time of each path.
 *
 * Orders (paper §4.4). A plan takes units of each kind in a fixed order,
 * skipping those that are not resident:
 *   backward-out  (l, c) descending: last layer first, last chunk first;
 *                 weight blocks last layer first
 *   forward-out   ascending (LRU-like)
 *   random-out    descending by a 64-bit mix of (seed, kind, layer, chunk):
 *                 a permutation fixed by the seed, so the plan stays a pure
 *                 function of the state (the same state always gives the
 *                 same plan), and a resident unit's rank never changes
 *
 * Planned restore time (for stats and for balancing): the memory path
 * decodes every COMPRESSED chunk (t_d each); the storage path reads every
 * STORED_RAW chunk (t_rKV), every STORED_COMPRESSED chunk (t_rKVc: read plus
 * decode, done by the storage worker) and every DROPPED weight block (t_rW);
 * allocation faults in fresh pages for every evicted unit.
 */
#include "policy.h"

#include <string.h>

mz_status mz_evict_plan_init(mz_evict_plan *p, int n_layer, size_t max_chunks)
{
    memset(p, 0, sizeof *p);
    size_t n_kv = (size_t)n_layer * MZ_MAX(max_chunks, 1);
    if (n_layer <= 0 || n_kv > UINT32_MAX / 2) return mz_fail(MZ_E_INVAL, "bad unit table size");
    p->n_layer = n_layer;
    p->max_chunks = max_chunks;
    /* Every chunk is evicted at most once and moved by CompKV at most once. */
    p->cap = 2 * n_kv + (size_t)n_layer;
    p->steps = mz_calloc(p->cap, sizeof *p->steps);
    p->sim_w = mz_calloc((size_t)n_layer, 1);
    p->sim_kv = mz_calloc(n_kv, 1);
    p->ord_kv = mz_calloc(n_kv, sizeof *p->ord_kv);
    p->ord_w = mz_calloc((size_t)n_layer, sizeof *p->ord_w);
    p->stack = mz_calloc(n_kv, sizeof *p->stack);
    p->sort_tmp = mz_calloc(MZ_MAX(n_kv, (size_t)n_layer), sizeof *p->sort_tmp);
    if (!p->steps || !p->sim_w || !p->sim_kv || !p->ord_kv || !p->ord_w || !p->stack ||
        !p->sort_tmp) {
        mz_evict_plan_free(p);
        return mz_fail(MZ_E_NOMEM, "out of memory for the eviction plan");
    }
    return MZ_OK;
}

void mz_evict_plan_free(mz_evict_plan *p)
{
    if (!p) return;
    free(p->steps);
    free(p->sim_w);
    free(p->sim_kv);
    free(p->ord_kv);
    free(p->ord_w);
    free(p->stack);
    free(p->sort_tmp);
    memset(p, 0, sizeof *p);
}

void mz_evict_plan_push(mz_evict_plan *p, const mz_evict_step *s)
{
    MZ_ASSERT(p->n < p->cap);
    p->steps[p->n++] = *s;
    p->bytes_planned += s->est_freed;
}

mz_policy_params mz_policy_params_default(void)
{
    return (mz_policy_params){.order = MZ_EVICT_BACKWARD, .seed = 0, .rounding = MZ_HYBRID_EXACT};
}

/* ---- orders --------------------------------------------------------------------- */

/* splitmix64's finaliser: a bijection, so distinct units get distinct keys. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t unit_key(uint64_t seed, int kind, int layer, size_t chunk)
{
    return mix64(mix64(seed ^ ((uint64_t)kind << 62)) ^ ((uint64_t)(uint32_t)layer << 32 |
                                                        (uint32_t)chunk));
}

typedef struct mz_sort_pair pair;

static int pair_desc(const void *a, const void *b)
{
    const pair *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? 1 : -1;
    return x->idx < y->idx ? 1 : (x->idx > y->idx ? -1 : 0);
}

static int pair_asc(const void *a, const void *b) { return pair_desc(b, a); }

/* Sorts ids[n] by their random-out key, largest first. */
static void sort_random(uint32_t *ids, size_t n, uint64_t seed, mz_unit_kind kind,
                        size_t max_chunks, pair *tmp)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        int l = kind == MZ_UNIT_KV ? (int)(id / max_chunks) : (int)id;
        size_t c = kind == MZ_UNIT_KV ? id % max_chunks : 0;
        tmp[i] = (pair){unit_key(seed, kind, l, c), id};
    }
    qsort(tmp, n, sizeof *tmp, pair_desc);
    for (size_t i = 0; i < n; i++) ids[i] = tmp[i].idx;
}

void mz_policy_fill_orders(const mz_policy_view *v, mz_evict_order order, uint64_t seed,
                           mz_evict_plan *p)
{
    size_t k = 0;
    bool fwd = order == MZ_EVICT_FORWARD;
    for (int i = 0; i < v->n_layer; i++) {
        int l = fwd ? i : v->n_layer - 1 - i;
        for (size_t j = 0; j < v->n_chunks; j++) {
            size_t c = fwd ? j : v->n_chunks - 1 - j;
            p->ord_kv[k++] = (uint32_t)((size_t)l * v->max_chunks + c);
        }
        p->ord_w[i] = (uint32_t)l;
    }
    if (order == MZ_EVICT_RANDOM) {
        sort_random(p->ord_kv, k, seed, MZ_UNIT_KV, v->max_chunks, p->sort_tmp);
        sort_random(p->ord_w, (size_t)v->n_layer, seed, MZ_UNIT_WEIGHTS, 1, p->sort_tmp);
    }
}

/* ---- simulated table ------------------------------------------------------------ */

size_t mz_policy_sim_load(const mz_policy_view *v, mz_evict_plan *p)
{
    size_t n_stack = 0;
    MZ_ASSERT(v->n_layer == p->n_layer && v->max_chunks <= p->max_chunks);
    for (int l = 0; l < v->n_layer; l++) p->sim_w[l] = (uint8_t)mz_unit_state_get(&v->weights[l]);
    for (int l = 0; l < v->n_layer; l++) {
        for (size_t c = 0; c < v->max_chunks; c++) {
            size_t i = (size_t)l * v->max_chunks + c;
            mz_unit_state s = c < v->n_chunks ? mz_unit_state_get(&v->kv[i]) : MZ_UNIT_ABSENT;
            p->sim_kv[i] = (uint8_t)s;
            if (s == MZ_UNIT_COMPRESSED)
                p->sort_tmp[n_stack++] = (pair){v->kv_seq ? v->kv_seq[i] : 0, (uint32_t)i};
        }
    }
    /* The stack's items in push order: bottom (needed last) first. */
    qsort(p->sort_tmp, n_stack, sizeof *p->sort_tmp, pair_asc);
    for (size_t k = 0; k < n_stack; k++) p->stack[k] = p->sort_tmp[k].idx;
    return n_stack;
}

/* ---- dead chunks of sliding-window layers -------------------------------------------- */

size_t mz_policy_plan_dead(const mz_policy_view *v, size_t nbytes, mz_evict_plan *p)
{
    size_t n = 0;
    if (!v->kv_window || !v->can_store) return 0;
    for (size_t c = 0; c < v->n_chunks; c++) {
        for (int l = 0; l < v->n_layer; l++) {
            if (p->bytes_planned >= 0 && (uint64_t)p->bytes_planned >= nbytes) return n;
            size_t i = (size_t)l * v->max_chunks + c;
            if (p->sim_kv[i] != MZ_UNIT_RESIDENT || !mz_policy_kv_dead(v, l, c)) continue;
            mz_evict_step s = {.kind = MZ_UNIT_KV, .layer = l, .chunk = c,
                               .dest = MZ_DEST_STORE_RAW, .stage = MZ_EVICT_STAGE_KV_ONLY,
                               .est_freed = (int64_t)v->unit_bytes_kv};
            p->sim_kv[i] = MZ_UNIT_STORED_RAW;
            mz_evict_plan_push(p, &s);
            n++;
        }
    }
    return n;
}

/* ---- planned restore times ---------------------------------------------------------- */

void mz_policy_restore_times(const mz_policy_view *v, mz_restore_plan_times *out)
{
    const mz_unit_times *t = &v->times;
    memset(out, 0, sizeof *out);
    for (int l = 0; l < v->n_layer; l++) {
        if (mz_unit_state_get(&v->weights[l]) == MZ_UNIT_DROPPED) {
            out->storage_ns += t->t_rw_ns;
            out->alloc_ns += t->t_alloc_w_ns;
        }
        for (size_t c = 0; c < v->n_chunks; c++) {
            mz_unit_state s = mz_unit_state_get(&v->kv[(size_t)l * v->max_chunks + c]);
            if (mz_policy_kv_stored_dead(v, l, c, s)) continue;
            switch (s) {
            case MZ_UNIT_COMPRESSED: out->mem_ns += t->t_d_ns; break;
            case MZ_UNIT_STORED_RAW: out->storage_ns += t->t_rkv_ns; break;
            case MZ_UNIT_STORED_COMPRESSED: out->storage_ns += t->t_rkvc_ns; break;
            default: continue;
            }
            out->alloc_ns += t->t_alloc_kv_ns;
        }
    }
}
