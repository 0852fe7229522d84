/*
 * policy_engine.c — the cross-session eviction plan (rules in
 * policy_engine.h). Pure: reads the views, writes the plan.
 */
#include "policy_engine.h"

#include <stdlib.h>
#include <string.h>

mz_status mz_xplan_reserve(mz_xplan *p, const mz_session_view *sv, size_t n)
{
    size_t cap = 1;
    for (size_t i = 0; i < n; i++) cap += sv[i].busy || !sv[i].scratch ? 1 : sv[i].scratch->cap;
    if (cap > p->cap) {
        mz_xstep *s = realloc(p->steps, cap * sizeof *s);
        if (!s) return MZ_E_NOMEM;
        p->steps = s;
        p->cap = cap;
    }
    if (n + 1 > p->order_cap) {
        uint32_t *o = realloc(p->order, (n + 1) * sizeof *o);
        if (!o) return MZ_E_NOMEM;
        p->order = o;
        p->order_cap = n + 1;
    }
    return MZ_OK;
}

void mz_xplan_free(mz_xplan *p)
{
    free(p->steps);
    free(p->order);
    memset(p, 0, sizeof *p);
}

int64_t mz_session_restore_cost(const mz_policy_view *v)
{
    const mz_unit_times *t = &v->times;
    int64_t cost = 0;
    for (int l = 0; l < v->n_layer; l++) {
        for (size_t c = 0; c < v->n_chunks; c++) {
            switch (mz_unit_state_get(&v->kv[(size_t)l * v->max_chunks + c])) {
            case MZ_UNIT_RESIDENT:
            case MZ_UNIT_BUSY: cost += MZ_MIN(t->t_d_ns, t->t_rkv_ns); break;
            case MZ_UNIT_COMPRESSED: cost += t->t_d_ns; break;
            case MZ_UNIT_STORED_RAW: cost += t->t_rkv_ns; break;
            case MZ_UNIT_STORED_COMPRESSED: cost += t->t_rkvc_ns; break;
            default: break;
            }
        }
    }
    return cost;
}

/* true when a goes before b (rule 1). */
static int rank(const mz_session_view *v) { return v->busy ? 2 : v->opaque ? 1 : 0; }

static bool before(const mz_session_view *a, int64_t ca, const mz_session_view *b, int64_t cb)
{
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    if (a->last_use != b->last_use) return a->last_use < b->last_use;
    if (ca != cb) return ca < cb;
    return a->id < b->id;
}

void mz_session_order(const mz_session_view *sv, size_t n, uint32_t *order)
{
    /* Insertion sort: a handful of sessions. Costs are computed once each. */
    int64_t cost_small[16];
    int64_t *cost = n <= 16 ? cost_small : malloc(n * sizeof *cost);
    for (size_t i = 0; i < n; i++)
        if (cost) cost[i] = sv[i].busy || sv[i].opaque ? 0 : mz_session_restore_cost(&sv[i].view);
    for (size_t i = 0; i < n; i++) {
        size_t j = i;
        for (; j > 0; j--) {
            uint32_t o = order[j - 1];
            int64_t ci = cost ? cost[i] : 0, co = cost ? cost[o] : 0;
            if (!before(&sv[i], ci, &sv[o], co)) break;
            order[j] = order[j - 1];
        }
        order[j] = (uint32_t)i;
    }
    if (cost != cost_small) free(cost);
}

void mz_plan_sessions(mz_session_view *sv, size_t n, size_t nbytes, bool weights_ok,
                      mz_xplan *out)
{
    out->n = 0;
    out->n_order = n;
    out->bytes_planned = 0;
    out->bytes_deferred = 0;
    out->exhausted = true;
    MZ_ASSERT(out->order_cap >= n);
    mz_session_order(sv, n, out->order);
    size_t last_idle = SIZE_MAX;
    bool any_busy = false;
    for (size_t k = 0; k < n; k++) {
        if (sv[out->order[k]].busy) any_busy = true;
        else if (!sv[out->order[k]].opaque) last_idle = k;
    }
    if (nbytes == 0) {
        out->exhausted = false;
        return;
    }
    uint64_t left = nbytes;
    for (size_t k = 0; k < n && left > 0; k++) {
        uint32_t i = out->order[k];
        mz_session_view *s = &sv[i];
        if (s->opaque) {
            /* Rule 4: its own mode, for what is left when it is reached. */
            MZ_ASSERT(out->n < out->cap);
            out->steps[out->n++] = (mz_xstep){.session = i, .opaque = true, .bytes = (size_t)left};
            out->exhausted = false;
            continue;
        }
        if (s->busy) {
            /* Rule 5: everything still to free, asked of the first busy one. */
            MZ_ASSERT(out->n < out->cap);
            out->steps[out->n++] = (mz_xstep){.session = i, .deferred = true, .bytes = (size_t)left};
            out->bytes_deferred += (size_t)left;
            left = 0;
            break;
        }
        /* Rule 3: with one session, its own plan with the weights offered;
         * with several, the last idle one's KV alone first, and its plan
         * with the weights only when that KV cannot free what is left. */
        const bool w_here = weights_ok && !any_busy && k == last_idle;
        s->view.weights_evictable = w_here && n == 1;
        s->policy->plan(s->policy, &s->view, (size_t)left, s->scratch);
        const int64_t want = (int64_t)MZ_MIN(left, (uint64_t)INT64_MAX);
        if (w_here && n > 1 && s->scratch->bytes_planned < want) {
            s->view.weights_evictable = true;
            s->policy->plan(s->policy, &s->view, (size_t)left, s->scratch);
        }
        for (size_t j = 0; j < s->scratch->n; j++) {
            MZ_ASSERT(out->n < out->cap);
            out->steps[out->n++] = (mz_xstep){.session = i, .step = s->scratch->steps[j]};
        }
        out->bytes_planned += s->scratch->bytes_planned;
        if (!s->scratch->exhausted) out->exhausted = false;
        int64_t got = s->scratch->bytes_planned;
        left = got <= 0 ? left : (uint64_t)got >= left ? 0 : left - (uint64_t)got;
    }
    if (left > 0) return;
    /* Stopped early: sessions not planned may still hold evictable units. */
    out->exhausted = false;
}
