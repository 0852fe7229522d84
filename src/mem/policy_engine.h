/*
 * policy_engine.h — one eviction plan across the sessions of an engine
 * (include/mzcache.h, mz_engine_evict). Like policy.h, a pure function: from
 * each session's view (its unit table and its own policy) and a request it
 * returns ordered steps, each carrying the session it belongs to; the engine
 * (src/engine/session.c) carries them out and plans again for the rest when
 * the bytes really freed fall short.
 *
 * The rule:
 *   1. Sessions are taken one after another: idle ones first, least recently
 *      used first; on a tie the one cheaper to restore first (restore cost:
 *      the per-unit times of putting back every KV chunk it has); then the id.
 *      Sessions that are computing (busy) come last.
 *   2. Within an idle session its own policy plans (Algorithm 1 and
 *      backward-out exactly as mz_evict) for what is still to free.
 *   3. Weight blocks are shared: they are offered only to the last idle
 *      session in the order, and only when no session is busy. An idle
 *      session's KV goes before any weight block: every next request needs
 *      the weights, an idle session's KV only its own return. So with
 *      several sessions the last idle one is planned for its KV alone
 *      first (all of it may go, to memory and on to storage), and only when
 *      that cannot free what is left is it planned again with the weights
 *      offered; Algorithm 1 then drops them where doing so balances the
 *      restore paths against that session's own KV (KVandW). Offered at
 *      once, under a tight budget they would go beside the session just
 *      used, and the next request, to another session whose KV is all in
 *      storage, would read them back on its storage path with nothing to
 *      balance against (bench_sessions with an eighth of the KV).
 *   4. Sessions whose mode is not planned unit by unit (the baselines:
 *      opaque) come after the planned ones, least recently used first, one
 *      step each: their own mode's eviction for what is left.
 *   5. A busy session cannot be planned unit by unit (its table is changing
 *      under its forward pass): what is left is asked of the first busy one
 *      as one deferred step, which it carries out between two of its
 *      forward steps.
 * With the engine's only session this is exactly that session's own plan with the
 * weights offered: mz_evict on the engine's only session.
 */
#ifndef MZ_POLICY_ENGINE_H
#define MZ_POLICY_ENGINE_H

#include "policy.h"

typedef struct mz_session_view {
    uint64_t id;                /* for the tie-break and diagnostics */
    uint64_t last_use;          /* larger: used later */
    bool busy;                  /* computing now: no view, its share is deferred */
    bool opaque;                /* idle, but its mode is not planned unit by unit (the
                                   baselines): one step, its own mode's eviction */
    const mz_policy *policy;    /* idle only */
    mz_policy_view view;        /* idle only; weights_evictable is set by the planner */
    mz_evict_plan *scratch;     /* idle only: the session's plan buffer (sized for its table) */
} mz_session_view;

typedef struct mz_xstep {
    uint32_t session;           /* index into the views */
    bool deferred;              /* busy session: `bytes` asked of it between its steps */
    bool opaque;                /* opaque session: its own mode evicts up to `bytes` now */
    size_t bytes;               /* deferred / opaque: what is still to free when it is
                                   reached (the mechanism uses its own running count) */
    mz_evict_step step;         /* !deferred */
} mz_xstep;

typedef struct mz_xplan {
    mz_xstep *steps;
    size_t n, cap;
    uint32_t *order;            /* session indices in the order taken */
    size_t n_order, order_cap;
    int64_t bytes_planned;      /* estimated bytes of the unit steps (deferred and opaque
                                   ones excluded) */
    size_t bytes_deferred;
    bool exhausted;             /* every idle session has nothing evictable left */
} mz_xplan;

/* Sizes the plan for these views (allocates; the planner does not). */
MZ_INTERNAL MZ_NODISCARD mz_status mz_xplan_reserve(mz_xplan *p, const mz_session_view *sv,
                                                    size_t n);
MZ_INTERNAL void mz_xplan_free(mz_xplan *p);

/* Nanoseconds to restore every KV chunk the session has if all were evicted
 * now the cheapest way (resident: min(t_d, t_rKV); evicted: its own path). */
MZ_INTERNAL int64_t mz_session_restore_cost(const mz_policy_view *v);
/* The order of rule 1 (n entries). */
MZ_INTERNAL void mz_session_order(const mz_session_view *sv, size_t n, uint32_t *order);
/* The plan (rules 1-5) for nbytes; weights_ok: the engine's blocks may be
 * offered at all (none pinned). Uses each idle view's scratch. */
MZ_INTERNAL void mz_plan_sessions(mz_session_view *sv, size_t n, size_t nbytes, bool weights_ok,
                                  mz_xplan *out);

#endif /* MZ_POLICY_ENGINE_H */
