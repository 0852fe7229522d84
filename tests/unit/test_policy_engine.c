/*
 * test_policy_engine.c — the cross-session eviction plan (policy_engine.h)
 * as a pure function on hand-made tables: several sessions' KV tables over
 * one shared weight table, no I/O, no clock.
 *
 *   one session       the plan is exactly that session's own hybrid plan
 *                     with the weights offered (mz_evict on an engine's only
 *                     session)
 *   LRU order         idle sessions are taken least recently used first, each
 *                     one's steps contiguous; weight blocks only in the last
 *                     idle session's steps
 *   tie-break         equal last use: the one cheaper to restore first
 *   KV before weights with several sessions, the last idle one gives up its
 *                     KV alone when that covers the request (the same
 *                     request on an only session drops blocks: KVandW), and
 *                     is planned with the weights when it cannot
 *   busy              a computing session comes last as one deferred step
 *                     with what is left; no weight block is offered then
 *   weights refused   weights_ok false: no weight step anywhere
 *   random            random shapes and requests, steps applied as the
 *                     mechanism would: each valid from the state it meets,
 *                     the estimate reaches the request unless exhausted
 */
#include "mem/policy_engine.h"
#include "testutil.h"

#include <stdint.h>
#include <string.h>

static const char *T = "test_policy_engine";

#define MAXS 6
#define NL 4

typedef struct sess {
    size_t n_chunks, max_chunks;
    mz_unit *kv;
    uint64_t *seq, pushes;
    mz_evict_plan scratch;
} sess;

static mz_unit g_w[NL];
static mz_policy *g_pol;
static const mz_unit_times g_times = {.t_d_ns = 100, .t_rkv_ns = 150, .t_rkvc_ns = 180,
                                      .t_rw_ns = 700, .t_alloc_kv_ns = 10, .t_alloc_w_ns = 40};
#define KVB 1000
#define ENCB 300
#define WB 5000

static void weights_reset(void)
{
    for (int l = 0; l < NL; l++) {
        g_w[l] = (mz_unit){.kind = MZ_UNIT_WEIGHTS, .layer = l, .chunk = -1, .bytes = WB};
        mz_unit_set(&g_w[l], MZ_UNIT_RESIDENT);
    }
}

static int sess_init(sess *s, size_t n_chunks)
{
    memset(s, 0, sizeof *s);
    s->n_chunks = n_chunks;
    s->max_chunks = n_chunks + 1;
    size_t nk = (size_t)NL * s->max_chunks;
    s->kv = calloc(nk, sizeof *s->kv);
    s->seq = calloc(nk, sizeof *s->seq);
    if (!s->kv || !s->seq || mz_evict_plan_init(&s->scratch, NL, s->max_chunks)) return -1;
    for (int l = 0; l < NL; l++)
        for (size_t c = 0; c < s->max_chunks; c++) {
            mz_unit *u = &s->kv[(size_t)l * s->max_chunks + c];
            *u = (mz_unit){.kind = MZ_UNIT_KV, .layer = l, .chunk = (int)c, .bytes = KVB};
            mz_unit_set(u, c < n_chunks ? MZ_UNIT_RESIDENT : MZ_UNIT_ABSENT);
        }
    return 0;
}

static void sess_free(sess *s)
{
    free(s->kv);
    free(s->seq);
    mz_evict_plan_free(&s->scratch);
}

static void view_of(sess *s, mz_session_view *v, uint64_t id, uint64_t last_use, bool busy)
{
    *v = (mz_session_view){.id = id, .last_use = last_use, .busy = busy, .policy = g_pol,
                           .scratch = &s->scratch};
    v->view = (mz_policy_view){.n_layer = NL, .max_chunks = s->max_chunks, .n_chunks = s->n_chunks,
                               .weights = g_w, .kv = s->kv, .kv_seq = s->seq,
                               .weights_evictable = false, .can_store = true,
                               .unit_bytes_kv = KVB, .enc_bytes_kv_est = ENCB, .times = g_times};
}

/* Applies a unit step as the mechanism would; -1 if not allowed. */
static int apply(sess *s, const mz_evict_step *st, bool weights_allowed)
{
    if (st->kind == MZ_UNIT_WEIGHTS) {
        if (!weights_allowed || mz_unit_state_get(&g_w[st->layer]) != MZ_UNIT_RESIDENT) return -1;
        mz_unit_set(&g_w[st->layer], MZ_UNIT_DROPPED);
        return 0;
    }
    if (st->chunk >= s->n_chunks) return -1;
    size_t i = (size_t)st->layer * s->max_chunks + st->chunk;
    mz_unit *u = &s->kv[i];
    mz_unit_state from = mz_unit_state_get(u);
    if (from == MZ_UNIT_COMPRESSED) {
        for (size_t k = 0; k < (size_t)NL * s->max_chunks; k++)
            if (mz_unit_state_get(&s->kv[k]) == MZ_UNIT_COMPRESSED && s->seq[k] < s->seq[i])
                return -1;
        u->enc_bytes = ENCB;
        mz_unit_set(u, MZ_UNIT_STORED_COMPRESSED);
        return 0;
    }
    if (from != MZ_UNIT_RESIDENT) return -1;
    switch (st->dest) {
    case MZ_DEST_COMPRESS:
        u->enc_bytes = ENCB;
        s->seq[i] = ++s->pushes;
        mz_unit_set(u, MZ_UNIT_COMPRESSED);
        return 0;
    case MZ_DEST_STORE_RAW: mz_unit_set(u, MZ_UNIT_STORED_RAW); return 0;
    case MZ_DEST_STORE_COMPRESSED:
        u->enc_bytes = ENCB;
        mz_unit_set(u, MZ_UNIT_STORED_COMPRESSED);
        return 0;
    default: return -1;
    }
}

static mz_xplan g_xp;

static void plan(mz_session_view *sv, size_t n, size_t nbytes, bool weights_ok)
{
    CHECK(mz_xplan_reserve(&g_xp, sv, n) == MZ_OK);
    mz_plan_sessions(sv, n, nbytes, weights_ok, &g_xp);
}

/* Index of the first step of session i, SIZE_MAX if none. */
static size_t first_of(uint32_t i)
{
    for (size_t k = 0; k < g_xp.n; k++)
        if (g_xp.steps[k].session == i) return k;
    return SIZE_MAX;
}

static size_t n_weight_steps(uint32_t *session_out)
{
    size_t n = 0;
    for (size_t k = 0; k < g_xp.n; k++)
        if (!g_xp.steps[k].deferred && !g_xp.steps[k].opaque &&
            g_xp.steps[k].step.kind == MZ_UNIT_WEIGHTS) {
            n++;
            if (session_out) *session_out = g_xp.steps[k].session;
        }
    return n;
}

static bool contiguous(size_t n_sessions)
{
    for (uint32_t i = 0; i < n_sessions; i++) {
        size_t a = first_of(i);
        if (a == SIZE_MAX) continue;
        size_t b = a;
        while (b < g_xp.n && g_xp.steps[b].session == i) b++;
        for (size_t k = b; k < g_xp.n; k++)
            if (g_xp.steps[k].session == i) return false;
    }
    return true;
}

static void test_one_session(void)
{
    weights_reset();
    sess s;
    CHECK(sess_init(&s, 3) == 0);
    mz_session_view v;
    view_of(&s, &v, 1, 5, false);
    /* Everything: the hybrid plan with weights, step for step. */
    plan(&v, 1, SIZE_MAX, true);
    mz_evict_plan own;
    CHECK(mz_evict_plan_init(&own, NL, s.max_chunks) == MZ_OK);
    mz_policy_view pv = v.view;
    pv.weights_evictable = true;
    g_pol->plan(g_pol, &pv, SIZE_MAX, &own);
    CHECK_EQ_INT(g_xp.n, own.n);
    bool same = g_xp.n == own.n;
    for (size_t k = 0; same && k < own.n; k++)
        same = g_xp.steps[k].session == 0 && !g_xp.steps[k].deferred &&
               memcmp(&g_xp.steps[k].step, &own.steps[k], sizeof own.steps[k]) == 0;
    CHECK(same);
    CHECK(n_weight_steps(NULL) == NL);
    CHECK(g_xp.bytes_deferred == 0);
    mz_evict_plan_free(&own);
    sess_free(&s);
}

static void test_lru_order(void)
{
    weights_reset();
    sess s[3];
    mz_session_view v[3];
    const uint64_t last[3] = {10, 30, 20}; /* order: 0, 2, 1 */
    for (int i = 0; i < 3; i++) {
        CHECK(sess_init(&s[i], 2) == 0);
        view_of(&s[i], &v[i], (uint64_t)i + 1, last[i], false);
    }
    plan(v, 3, SIZE_MAX, true);
    CHECK(g_xp.order[0] == 0 && g_xp.order[1] == 2 && g_xp.order[2] == 1);
    CHECK(first_of(0) == 0);
    CHECK(first_of(0) < first_of(2) && first_of(2) < first_of(1) && first_of(1) != SIZE_MAX);
    CHECK(contiguous(3));
    uint32_t ws = 99;
    CHECK(n_weight_steps(&ws) == NL && ws == 1);
    /* Applying the plan: every step valid, every unit evicted. */
    int bad = 0;
    for (size_t k = 0; k < g_xp.n; k++)
        bad += apply(&s[g_xp.steps[k].session], &g_xp.steps[k].step,
                     g_xp.steps[k].session == 1) != 0;
    CHECK_EQ_INT(bad, 0);
    for (int i = 0; i < 3; i++)
        for (size_t k = 0; k < (size_t)NL * s[i].n_chunks; k++)
            CHECK(mz_unit_state_get(&s[i].kv[(k / s[i].n_chunks) * s[i].max_chunks +
                                             k % s[i].n_chunks]) != MZ_UNIT_RESIDENT);

    /* A small request touches only the least recently used session. */
    for (int i = 0; i < 3; i++) {
        sess_free(&s[i]);
        CHECK(sess_init(&s[i], 2) == 0);
        view_of(&s[i], &v[i], (uint64_t)i + 1, last[i], false);
    }
    weights_reset();
    plan(v, 3, 3 * KVB, true);
    CHECK(g_xp.n > 0 && first_of(1) == SIZE_MAX && first_of(2) == SIZE_MAX);
    CHECK(n_weight_steps(NULL) == 0);
    CHECK(g_xp.bytes_planned >= 3 * KVB);

    /* Weights refused: none even in the last session. */
    plan(v, 3, SIZE_MAX, false);
    CHECK(n_weight_steps(NULL) == 0);
    for (int i = 0; i < 3; i++) sess_free(&s[i]);
}

static void test_tie_break(void)
{
    weights_reset();
    sess big, small;
    CHECK(sess_init(&big, 3) == 0 && sess_init(&small, 1) == 0);
    mz_session_view v[2];
    view_of(&big, &v[0], 1, 7, false);
    view_of(&small, &v[1], 2, 7, false);
    CHECK(mz_session_restore_cost(&v[1].view) < mz_session_restore_cost(&v[0].view));
    plan(v, 2, SIZE_MAX, true);
    CHECK(g_xp.order[0] == 1 && g_xp.order[1] == 0);
    CHECK(first_of(1) < first_of(0));
    uint32_t ws = 99;
    CHECK(n_weight_steps(&ws) == NL && ws == 0);
    /* Equal cost too: the smaller id first. */
    sess other;
    CHECK(sess_init(&other, 3) == 0);
    view_of(&other, &v[1], 0, 7, false);
    plan(v, 2, KVB, true);
    CHECK(g_xp.order[0] == 1);
    sess_free(&big);
    sess_free(&small);
    sess_free(&other);
}

static void test_kv_before_weights(void)
{
    weights_reset();
    sess empty, used;
    CHECK(sess_init(&empty, 0) == 0 && sess_init(&used, 3) == 0); /* 12 chunks, 12 KVB */
    mz_session_view v[2];
    view_of(&empty, &v[0], 1, 1, false);
    view_of(&used, &v[1], 2, 2, false);
    /* Alone, 8 KVB: T = 4 blocks x t_rW / t_d = 28 > 12 chunks, so KVandW
     * drops a block at once. */
    plan(&v[1], 1, 8 * KVB, true);
    CHECK(n_weight_steps(NULL) > 0);
    /* Beside another session: its KV covers the request, no block goes. */
    plan(v, 2, 8 * KVB, true);
    CHECK_EQ_INT(n_weight_steps(NULL), 0);
    CHECK(g_xp.bytes_planned >= 8 * KVB);
    int bad = 0;
    for (size_t k = 0; k < g_xp.n; k++)
        bad += apply(g_xp.steps[k].session ? &used : &empty, &g_xp.steps[k].step, false) != 0;
    CHECK_EQ_INT(bad, 0);
    /* More than all of its KV: planned with the weights (the blocks go). */
    sess_free(&used);
    CHECK(sess_init(&used, 3) == 0);
    view_of(&used, &v[1], 2, 2, false);
    plan(v, 2, 12 * KVB + WB, true);
    uint32_t ws = 99;
    CHECK(n_weight_steps(&ws) > 0 && ws == 1);
    CHECK(g_xp.bytes_planned >= 12 * KVB + WB);
    sess_free(&empty);
    sess_free(&used);
}

static void test_busy(void)
{
    weights_reset();
    sess s[3];
    mz_session_view v[3];
    for (int i = 0; i < 3; i++) CHECK(sess_init(&s[i], 2) == 0);
    view_of(&s[0], &v[0], 1, 1, true); /* least recently used, but computing */
    view_of(&s[1], &v[1], 2, 5, false);
    view_of(&s[2], &v[2], 3, 9, false);
    plan(v, 3, SIZE_MAX, true);
    CHECK(g_xp.order[2] == 0);
    CHECK(g_xp.n > 0 && g_xp.steps[g_xp.n - 1].deferred && g_xp.steps[g_xp.n - 1].session == 0);
    CHECK(g_xp.bytes_deferred > 0);
    CHECK(n_weight_steps(NULL) == 0); /* a busy session pins what it computes on */
    for (size_t k = 0; k + 1 < g_xp.n; k++) CHECK(!g_xp.steps[k].deferred && g_xp.steps[k].session != 0);
    /* A request the idle sessions cover defers nothing. */
    plan(v, 3, 2 * KVB, true);
    CHECK(g_xp.bytes_deferred == 0 && first_of(0) == SIZE_MAX);
    for (int i = 0; i < 3; i++) sess_free(&s[i]);
}

/* Opaque sessions (baseline modes): after the planned ones, least recently
 * used first, one step each; busy still last; weights for the last planned
 * idle session. */
static void test_opaque(void)
{
    weights_reset();
    sess s[4];
    mz_session_view v[4];
    for (int i = 0; i < 4; i++) CHECK(sess_init(&s[i], 2) == 0);
    view_of(&s[0], &v[0], 1, 1, false);
    v[0].opaque = true;
    view_of(&s[1], &v[1], 2, 2, false);
    view_of(&s[2], &v[2], 3, 3, false);
    v[2].opaque = true;
    view_of(&s[3], &v[3], 4, 4, false);
    plan(v, 4, SIZE_MAX, true);
    CHECK(g_xp.order[0] == 1 && g_xp.order[1] == 3 && g_xp.order[2] == 0 && g_xp.order[3] == 2);
    CHECK(g_xp.n >= 2 && g_xp.steps[g_xp.n - 2].opaque && g_xp.steps[g_xp.n - 2].session == 0);
    CHECK(g_xp.steps[g_xp.n - 1].opaque && g_xp.steps[g_xp.n - 1].session == 2);
    uint32_t ws = 99;
    size_t nw = n_weight_steps(&ws);
    CHECK_MSG(nw == NL && ws == 3, "%zu weight steps, session %u", nw, ws);
    for (size_t k = 0; k < g_xp.n; k++)
        CHECK(!g_xp.steps[k].opaque || v[g_xp.steps[k].session].opaque);
    CHECK(g_xp.bytes_deferred == 0);
    for (int i = 0; i < 4; i++) sess_free(&s[i]);
}

static void test_random(void)
{
    unsigned long long rng = 12345;
    int bad = 0, short_of = 0, wrong_weights = 0, noncontig = 0;
    for (int it = 0; it < 400; it++) {
        weights_reset();
        size_t n = 1 + t_rand_u64(&rng) % 4;
        sess s[MAXS];
        mz_session_view v[MAXS];
        for (size_t i = 0; i < n; i++) {
            CHECK(sess_init(&s[i], t_rand_u64(&rng) % 4) == 0);
            view_of(&s[i], &v[i], i + 1, t_rand_u64(&rng) % 5, t_rand_u64(&rng) % 7 == 0);
            v[i].opaque = !v[i].busy && t_rand_u64(&rng) % 6 == 0;
        }
        for (int round = 0; round < 4; round++) {
            size_t want = (size_t)(t_rand_u64(&rng) % (20 * KVB + 4 * WB));
            bool wok = t_rand_u64(&rng) % 3 != 0;
            plan(v, n, want, wok);
            /* The last idle session in the order is the one allowed weights. */
            uint32_t last_idle = UINT32_MAX;
            bool any_busy = false;
            for (size_t k = 0; k < n; k++) {
                if (v[g_xp.order[k]].busy) any_busy = true;
                else if (!v[g_xp.order[k]].opaque) last_idle = g_xp.order[k];
            }
            for (size_t k = 0; k < g_xp.n; k++) {
                const mz_xstep *x = &g_xp.steps[k];
                if (x->deferred) {
                    bad += !v[x->session].busy;
                    continue;
                }
                if (x->opaque) {
                    bad += !v[x->session].opaque;
                    continue;
                }
                bool wa = wok && !any_busy && x->session == last_idle;
                if (x->step.kind == MZ_UNIT_WEIGHTS && !wa) wrong_weights++;
                bad += apply(&s[x->session], &x->step, wa) != 0;
            }
            noncontig += !contiguous(n);
            bool any_opaque = false; /* what an opaque step frees is not planned */
            for (size_t k = 0; k < g_xp.n; k++) any_opaque |= g_xp.steps[k].opaque;
            if (!any_opaque && (uint64_t)(g_xp.bytes_planned > 0 ? g_xp.bytes_planned : 0) + g_xp.bytes_deferred <
                    want && !g_xp.exhausted)
                short_of++;
        }
        for (size_t i = 0; i < n; i++) sess_free(&s[i]);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(wrong_weights, 0);
    CHECK_EQ_INT(noncontig, 0);
    CHECK_EQ_INT(short_of, 0);
}

int main(void)
{
    mz_policy_params pp = mz_policy_params_default();
    g_pol = mz_policy_hybrid_init(&pp);
    if (!g_pol) return 1;
    test_one_session();
    test_lru_order();
    test_tie_break();
    test_kv_before_weights();
    test_busy();
    test_opaque();
    test_random();
    g_pol->free(g_pol);
    mz_xplan_free(&g_xp);
    return t_done(T);
}
