/*
 * test_restore_grid.c — answers after restore_generate are identical to a
 * blocking restore followed by generation, over a grid of remaining-memory
 * levels (75/50/25/0 %) x KV codecs (raw, q8, cachegen) x overlap modes, on
 * the real model (SmolLM2; skipped with 77 without it) and on a tiny
 * generated qwen3.
 *
 * The history (real prefill, once per model) is copied into every context's
 * KV chunks, so each codec's contexts start from the same real KV without
 * prefilling again. Per model and codec, two contexts on two loads of the
 * model (weights are evicted only while a model has one context) get that
 * history; each
 * grid cell truncates both back to it and evicts both by the same amount
 * (the hybrid policy is deterministic, and both have been through the same
 * lossy round trips, so they free the same bytes). The reference restores
 * with mz_restore, prefills the follow-up and generates greedily; the other
 * runs mz_restore_generate with the cell's overlap mode. The generated
 * tokens and the final logits must be bit-identical and every unit resident
 * afterwards. The cells cycle through the restore-thread splits
 * (n_restore_threads 1, 2, 3, 5, 8, 16: from 4 on, several storage and
 * decoding lanes, more threads than this machine has cores) and put random
 * worker delays on every other cell, to shake orderings under
 * ThreadSanitizer. Under the sanitizers
 * (MZ_SANITIZED=1) the real model runs q8 at 50 % only (the tiny model runs
 * the whole grid), and under ThreadSanitizer not at all: there its history
 * prefill and four cells took 122 of the test's 142 s, while the tiny
 * model's 48 cells (19 s) drive the same restore threads, overlap modes,
 * splits and worker delays. The real model's cells are the same code on
 * more units; the plain and ASan builds still run them.
 */
#include "evict_util.h"
#include "mem/profile.h"

#include <time.h>

#define N_GEN 2
#define N_FOLLOW 8

static const char *T = "test_restore_grid";

typedef struct grid_model {
    const char *name;
    mz_model_t *m, *ref_m;
    size_t n_base;
    int n_ctx;
} grid_model;

static mz_gen_action cb_collect(void *user, mz_token t, const float *logits, int n_vocab)
{
    (void)logits;
    (void)n_vocab;
    mz_token *out = user;
    size_t i = 0;
    while (i < N_GEN && out[i] >= 0) i++;
    if (i < N_GEN) out[i] = t;
    return MZ_GEN_CONTINUE;
}

/* Reference: blocking restore, prefill, greedy generation (each token fed
 * back, as mz_restore_generate does). Returns the count generated. */
static size_t reference(mz_ctx_t *c, const mz_model_t *m, const mz_token *follow, mz_token *want,
                        float *logits, int nv)
{
    CHECK(mz_restore(c, NULL) == MZ_OK);
    CHECK(ev_all_resident(c));
    CHECK(mz_prefill(c, follow, N_FOLLOW) == MZ_OK);
    size_t n = 0;
    while (n < N_GEN) {
        const float *lg = mz_ctx_logits(c);
        if (!lg) break;
        mz_token t = ev_argmax(lg, nv);
        if (mz_token_is_eog(m, t)) {
            /* The end of generation joins the context too (mz_generate). */
            CHECK(mz_prefill(c, &t, 1) == MZ_OK);
            break;
        }
        want[n++] = t;
        CHECK(mz_prefill(c, &t, 1) == MZ_OK);
    }
    const float *lg = mz_ctx_logits(c);
    if (lg) memcpy(logits, lg, (size_t)nv * sizeof(float));
    return n;
}

/* The KV chunks and tokens of a prefilled context. */
typedef struct kv_snapshot {
    int n_layer;
    size_t n_chunks, chunk_bytes, n_tokens;
    uint8_t *bytes;
    mz_token *tokens;
} kv_snapshot;

static int snapshot_take(mz_model_t *m, const mz_token *base, size_t n, int n_ctx, kv_snapshot *out)
{
    memset(out, 0, sizeof *out);
    mz_ctx_t *c = ev_ctx(m, "q8", MZ_KV_PLACE_AUTO, n_ctx, "swap-grid-src");
    if (!c || mz_prefill(c, base, n)) {
        fprintf(stderr, "history: %s\n", c ? mz_ctx_errmsg(c) : mz_last_error());
        mz_ctx_free(c);
        return -1;
    }
    out->n_layer = c->kv.n_layer;
    out->n_chunks = (n + MZ_KV_CHUNK_TOKENS - 1) / MZ_KV_CHUNK_TOKENS;
    out->chunk_bytes = c->kv.chunk_bytes;
    out->n_tokens = n;
    out->bytes = malloc((size_t)out->n_layer * out->n_chunks * out->chunk_bytes);
    out->tokens = malloc(n * sizeof *out->tokens);
    if (out->bytes && out->tokens) {
        for (int l = 0; l < out->n_layer; l++)
            for (size_t ci = 0; ci < out->n_chunks; ci++)
                memcpy(out->bytes + ((size_t)l * out->n_chunks + ci) * out->chunk_bytes,
                       c->kv.chunks[l][ci], out->chunk_bytes);
        memcpy(out->tokens, mz_ctx_tokens(c), n * sizeof *out->tokens);
    }
    mz_ctx_free(c);
    return out->bytes && out->tokens ? 0 : -1;
}

/* Gives a fresh context the snapshot's history (as if it had prefilled it). */
static int snapshot_put(mz_ctx_t *c, const kv_snapshot *sn)
{
    if (mz_kv_cache_reserve(&c->kv, sn->n_tokens) || c->kv.chunk_bytes != sn->chunk_bytes) return -1;
    for (int l = 0; l < sn->n_layer; l++)
        for (size_t ci = 0; ci < sn->n_chunks; ci++)
            memcpy(c->kv.chunks[l][ci],
                   sn->bytes + ((size_t)l * sn->n_chunks + ci) * sn->chunk_bytes, sn->chunk_bytes);
    memcpy(c->tokens, sn->tokens, sn->n_tokens * sizeof *sn->tokens);
    c->n_tokens = sn->n_tokens;
    c->have_logits = false;
    return 0;
}

static void run_model(const grid_model *gm, const char *const *codecs, size_t n_codecs,
                      const int *levels, size_t n_levels, unsigned *cell)
{
    const int nv = mz_model_n_vocab(gm->m);
    float *a = malloc((size_t)nv * sizeof(float)), *b = malloc((size_t)nv * sizeof(float));
    mz_token *base = malloc(gm->n_base * sizeof *base), follow[N_FOLLOW];
    CHECK(a && b && base);
    if (!a || !b || !base) goto out;
    ev_tokens(base, gm->n_base, nv, 31);
    ev_tokens(follow, N_FOLLOW, nv, 32);
    kv_snapshot sn;
    if (snapshot_take(gm->m, base, gm->n_base, gm->n_ctx, &sn)) {
        CHECK(!"history prefill");
        free(sn.bytes);
        free(sn.tokens);
        goto out;
    }
    for (size_t ci = 0; ci < n_codecs; ci++) {
        mz_ctx_t *c = ev_ctx(gm->m, codecs[ci], MZ_KV_PLACE_AUTO, gm->n_ctx, "swap-grid");
        mz_ctx_t *ref = ev_ctx(gm->ref_m, codecs[ci], MZ_KV_PLACE_AUTO, gm->n_ctx, "swap-grid-ref");
        CHECK(c && ref);
        mz_status s = c && ref && !snapshot_put(c, &sn) && !snapshot_put(ref, &sn) ? MZ_OK
                                                                                   : MZ_E_INVAL;
        CHECK_MSG(s == MZ_OK, "%s: cannot set up the history", gm->name);
        size_t total = ev_evictable_total(c);
        for (size_t li = 0; li < n_levels && s == MZ_OK; li++) {
            size_t amount = levels[li] <= 0
                                ? SIZE_MAX
                                : (size_t)((double)total * (100 - levels[li]) / 100.0);
            for (int mode = 0; mode < 4; mode++, (*cell)++) {
                mz_token want[N_GEN], got[N_GEN];
                for (int i = 0; i < N_GEN; i++) got[i] = want[i] = -1;
                mz_evict_report r1, r2;
                CHECK(mz_ctx_truncate(ref, gm->n_base) == MZ_OK);
                CHECK(mz_evict(ref, amount, &r1) == MZ_OK);
                mz_mem_stats st;
                mz_get_mem_stats(ref, &st);
                CHECK_MSG(st.remaining_pct <= levels[li] + 10.0, "%s %s: %.1f%% remaining for %d%%",
                          gm->name, codecs[ci], st.remaining_pct, levels[li]);
                size_t n_want = reference(ref, gm->ref_m, follow, want, b, nv);

                CHECK(mz_ctx_truncate(c, gm->n_base) == MZ_OK);
                CHECK(mz_evict(c, amount, &r2) == MZ_OK);
                CHECK_MSG(r1.bytes_freed == r2.bytes_freed, "%s %s %d%%: evicted %zu then %zu",
                          gm->name, codecs[ci], levels[li], r1.bytes_freed, r2.bytes_freed);
                mz_restore_experimental rx = {.overlap = (mz_restore_overlap)mode,
                                              .debug_delay_us = *cell % 2 ? 200 : 0,
                                              .seed = (uint64_t)*cell};
                mz_restore_params rp = mz_restore_params_default();
                rp.experimental = &rx;
                static const int splits[] = {1, 2, 3, 5, 8, 16};
                /* Pre-faulting threads: the profile's (all of them here: the
                 * built-in profile has no pre-fault table), then capped at
                 * 1, 2 and 4, so the capped splits' layouts (one early lane
                 * running both kinds at 5, several at 8 and 16) come round. */
                static const int prefault[] = {0, 1, 2, 4};
                rp.n_restore_threads = splits[*cell % MZ_ARRAY_LEN(splits)];
                rx.n_prefault_threads =
                    prefault[(*cell / MZ_ARRAY_LEN(splits)) % MZ_ARRAY_LEN(prefault)];
                mz_restore_timings tm;
                mz_generate_params gp = {.max_tokens = N_GEN, .on_token = cb_collect, .user = got};
                mz_generate_result gr;
                s = mz_restore_generate(c, follow, N_FOLLOW, &rp, NULL, &gp, &gr, &tm);
                size_t n_got = gr.n_tokens;
                CHECK_MSG(s == MZ_OK, "%s", mz_ctx_errmsg(c));
                const float *lg = mz_ctx_logits(c);
                if (lg) memcpy(a, lg, (size_t)nv * sizeof(float));
                bool same = s == MZ_OK && n_got == n_want &&
                            memcmp(got, want, n_want * sizeof *want) == 0 && lg &&
                            memcmp(a, b, (size_t)nv * sizeof(float)) == 0;
                CHECK_MSG(same, "%s, codec %s, %d%% remaining, overlap %d, %d restore threads "
                          "(%d pre-faulting): answer differs from the blocking restore", gm->name,
                          codecs[ci], levels[li], mode, rp.n_restore_threads,
                          rx.n_prefault_threads);
                CHECK(ev_all_resident(c));
                CHECK(mz_mem_is_valid(c->mem));
                CHECK(tm.n_ready == tm.n_units && tm.n_units > 0);
                CHECK(tm.n_restore_threads == rp.n_restore_threads);
                if (s) break;
            }
        }
        mz_ctx_free(c);
        mz_ctx_free(ref);
        fprintf(stderr, "%s, %s: %zu cells done (%.1f s cpu so far)\n", gm->name, codecs[ci],
                n_levels * 4, (double)clock() / CLOCKS_PER_SEC);
    }
    free(sn.bytes);
    free(sn.tokens);
out:
    free(base);
    free(a);
    free(b);
}

/* Checks the invariants of one split: every thread has work; from 4
 * threads on exactly n_prefault threads allocate, the pre-faulting ones of a
 * capped split do it first, and the others start at once on lanes of both
 * kinds when both are in the job; storage lanes are 0..n_sto_lanes-1, each
 * once. */
static void check_split(int nt, int npf, double sto, double mem)
{
    enum {
        A = 1u << MZ_RESTORE_ACT_ALLOC,
        S = 1u << MZ_RESTORE_ACT_STORAGE,
        M = 1u << MZ_RESTORE_ACT_MEM,
    };
    mz_restore_split sp;
    mz_restore_split_plan(nt, npf, sto, mem, &sp);
    CHECK_EQ_INT(sp.n_threads, nt);
    int n_alloc = 0, n_first = 0;
    uint64_t seen_lanes = 0;
    bool early_s = false, early_m = false, any_s = false, any_m = false;
    for (int t = 0; t < nt; t++) {
        CHECK_MSG(sp.mask[t] != 0, "%d threads, %d pre-faulting: thread %d has no work", nt, npf, t);
        n_alloc += !!(sp.mask[t] & A);
        n_first += sp.alloc_first[t];
        CHECK(!sp.alloc_first[t] || (sp.mask[t] & A));
        CHECK((sp.lane[t] >= 0) == !!(sp.mask[t] & S));
        if (sp.lane[t] >= 0) {
            CHECK(sp.lane[t] < sp.n_sto_lanes && !(seen_lanes & (1ULL << sp.lane[t])));
            seen_lanes |= 1ULL << sp.lane[t];
        }
        any_s |= !!(sp.mask[t] & S);
        any_m |= !!(sp.mask[t] & M);
        if (!sp.alloc_first[t]) {
            early_s |= !!(sp.mask[t] & S);
            early_m |= !!(sp.mask[t] & M);
        }
    }
    CHECK(sto <= 0 || (any_s && early_s));
    CHECK(mem <= 0 || (any_m && early_m));
    if (nt >= 4) {
        const int want = npf < nt ? npf : nt;
        CHECK_EQ_INT(sp.n_prefault, want);
        CHECK_EQ_INT(n_alloc, want);
        CHECK_EQ_INT(n_first, want < nt ? want : 0);
        CHECK(seen_lanes == (sp.n_sto_lanes >= 64 ? ~0ULL : (1ULL << sp.n_sto_lanes) - 1));
    } else {
        CHECK_EQ_INT(n_alloc, nt); /* below 4 threads every one pre-faults */
        CHECK_EQ_INT(n_first, 0);
    }
}

/* The pre-fault cap and the roles of the restore threads, on hand-made
 * profile tables (pure functions). */
static void test_prefault_split(void)
{
    enum {
        A = 1u << MZ_RESTORE_ACT_ALLOC,
        S = 1u << MZ_RESTORE_ACT_STORAGE,
        M = 1u << MZ_RESTORE_ACT_MEM,
    };
    mz_device_profile p;
    mz_profile_builtin(&p);
    p.n_touch = 0; /* no table: every restore thread pre-faults */
    CHECK_EQ_INT(mz_profile_prefault_threads(&p, 8), 8);
    CHECK_EQ_INT(mz_profile_prefault_threads(&p, 2), 2);
    CHECK_EQ_INT(mz_profile_prefault_threads(&p, 0), 0);
    /* The 16-vCPU device (2026-12-02): best at 4, slower at 8 and 16. */
    static const int th[] = {1, 2, 4, 8, 16};
    static const double dev[] = {0.294, 0.162, 0.130, 0.204, 0.257};
    p.n_touch = 5;
    for (int i = 0; i < 5; i++) {
        p.touch_threads[i] = th[i];
        p.touch_mt_s_per_gib[i] = dev[i];
    }
    CHECK_EQ_INT(mz_profile_prefault_threads(&p, 16), 4);
    CHECK_EQ_INT(mz_profile_prefault_threads(&p, 8), 4);
    CHECK_EQ_INT(mz_profile_prefault_threads(&p, 5), 4);
    CHECK_EQ_INT(mz_profile_prefault_threads(&p, 3), 2); /* counts up to 3: 1 and 2 */
    CHECK_EQ_INT(mz_profile_prefault_threads(&p, 1), 1);
    /* Within 10 % of the best counts as the best: the smaller count wins. */
    static const double near[] = {1.0, 0.51, 0.50, 0.48, 0.47};
    for (int i = 0; i < 5; i++) p.touch_mt_s_per_gib[i] = near[i];
    CHECK_EQ_INT(mz_profile_prefault_threads(&p, 16), 2);
    /* Still scaling at 16: all of them. */
    static const double scaling[] = {1.0, 0.55, 0.3, 0.17, 0.08};
    for (int i = 0; i < 5; i++) p.touch_mt_s_per_gib[i] = scaling[i];
    CHECK_EQ_INT(mz_profile_prefault_threads(&p, 16), 16);
    CHECK_EQ_INT(mz_profile_prefault_threads(&p, 12), 8); /* 16 not measured up to 12 */
    /* A count measured as 0 (failed) is skipped. */
    p.touch_mt_s_per_gib[2] = 0;
    CHECK_EQ_INT(mz_profile_prefault_threads(&p, 4), 2);

    /* Roles. The device's target 2 at 50 %: 16 dropped F16 blocks (~0.69 GB
     * to read) and 1792 q8 chunks (~1.88 GB to decode), 8 restore threads, 4
     * pre-faulting: the two storage lanes (2 of 8 by bytes) and two
     * decoding lanes run from the start on threads 4..7; 0..3 pre-fault,
     * then decode. */
    const double sto = 0.69e9, mem = 1.88e9;
    mz_restore_split sp;
    mz_restore_split_plan(8, 4, sto, mem, &sp);
    CHECK_EQ_INT(sp.n_prefault, 4);
    CHECK_EQ_INT(sp.n_sto_lanes, 2);
    CHECK(sp.mask[4] == S && sp.lane[4] == 0 && !sp.alloc_first[4]);
    CHECK(sp.mask[5] == S && sp.lane[5] == 1 && !sp.alloc_first[5]);
    for (int t = 6; t < 8; t++) CHECK(sp.mask[t] == M && sp.lane[t] == -1 && !sp.alloc_first[t]);
    for (int t = 0; t < 4; t++) CHECK(sp.mask[t] == (A | M) && sp.alloc_first[t] && sp.lane[t] < 0);
    /* Mostly storage: the early group keeps one decoding lane, the
     * pre-faulting group reads too. */
    mz_restore_split_plan(8, 4, 99, 1, &sp);
    CHECK(sp.mask[4] == S && sp.mask[5] == S && sp.mask[6] == S && sp.mask[7] == M);
    CHECK(sp.n_sto_lanes == 7);
    for (int t = 0; t < 4; t++) CHECK(sp.mask[t] == (A | S) && sp.alloc_first[t]);
    /* Uncapped (no table): the layout of before — thread 0 only
     * allocates, the 7 others allocate and run 2 storage / 5 decoding lanes. */
    mz_restore_split_plan(8, 8, sto, mem, &sp);
    CHECK(sp.mask[0] == A && !sp.alloc_first[0] && sp.n_sto_lanes == 2);
    CHECK(sp.mask[1] == (A | S) && sp.lane[1] == 0 && sp.mask[2] == (A | S) && sp.lane[2] == 1);
    for (int t = 3; t < 8; t++) CHECK(sp.mask[t] == (A | M) && !sp.alloc_first[t]);
    /* One thread left beside the pre-faulting ones runs both kinds. */
    mz_restore_split_plan(5, 4, sto, mem, &sp);
    CHECK(sp.mask[4] == (S | M) && sp.lane[4] == 0);
    /* Below 4 threads the cap is ignored: 2 = alloc+decoding, alloc+storage. */
    mz_restore_split_plan(2, 1, sto, mem, &sp);
    CHECK(sp.mask[0] == (A | M) && sp.mask[1] == (A | S) && sp.lane[1] == 0 && sp.n_prefault == 2);
    /* ... but with one path empty both loader threads run it (a switch
     * back to a session the budget moved to the swap file). */
    mz_restore_split_plan(2, 2, sto, 0, &sp);
    CHECK(sp.mask[0] == (A | S) && sp.mask[1] == (A | S) && sp.lane[0] == 0 && sp.lane[1] == 1);
    CHECK_EQ_INT(sp.n_sto_lanes, 2);
    mz_restore_split_plan(3, 3, sto, 0, &sp);
    CHECK(sp.mask[0] == A && sp.mask[1] == (A | S) && sp.mask[2] == (A | S));
    CHECK(sp.lane[1] == 0 && sp.lane[2] == 1 && sp.n_sto_lanes == 2);
    mz_restore_split_plan(3, 3, 0, mem, &sp);
    CHECK(sp.mask[0] == A && sp.mask[1] == (A | M) && sp.mask[2] == (A | M) && sp.lane[1] < 0);
    /* Only one kind in the job: every lane is of that kind. */
    mz_restore_split_plan(8, 4, 0, mem, &sp);
    CHECK(sp.n_sto_lanes == 0);
    for (int t = 4; t < 8; t++) CHECK(sp.mask[t] == M);
    mz_restore_split_plan(8, 4, sto, 0, &sp);
    CHECK(sp.n_sto_lanes == 8);
    /* Invariants over the whole range. */
    static const double fr[][2] = {{1, 0}, {0, 1}, {1, 1}, {1, 99}, {99, 1}, {0.69, 1.88}};
    for (int nt = 1; nt <= MZ_RESTORE_THREADS_MAX; nt++)
        for (int npf = 1; npf <= nt; npf++)
            for (size_t f = 0; f < MZ_ARRAY_LEN(fr); f++) check_split(nt, npf, fr[f][0], fr[f][1]);
}

/* The split's default: the profile's restore_threads, else the rule from
 * the CPU count, the compute threads and the measured pre-fault scaling;
 * the fields round-trip through the JSON; out-of-range values are refused. */
static void test_split_params(mz_model_t *m)
{
    mz_device_profile p, q;
    mz_profile_builtin(&p);
    p.n_cpus = 2; /* the CI machine: two restore threads, as measured there */
    CHECK_EQ_INT(mz_profile_restore_threads(&p, 2), 2);
    CHECK_EQ_INT(mz_profile_restore_threads(&p, 1), 2);
    p.n_cpus = 16; /* no pre-fault table: every CPU the compute leaves */
    CHECK_EQ_INT(mz_profile_restore_threads(&p, 8), 8);
    CHECK_EQ_INT(mz_profile_restore_threads(&p, 2), 14);
    CHECK_EQ_INT(mz_profile_restore_threads(&p, 15), 3); /* never below 3 with 4+ CPUs */
    CHECK_EQ_INT(mz_profile_restore_threads(&p, 0), 8);  /* unknown: half computes */
    /* Pre-faulting that still scales at 8 threads: all spare CPUs. */
    static const int th[] = {1, 2, 4, 8, 16};
    static const double scaling[] = {1.0, 0.55, 0.3, 0.17, 0.16};
    static const double flat[] = {1.0, 0.6, 0.58, 0.6, 0.7};
    p.n_touch = 5;
    for (int i = 0; i < 5; i++) {
        p.touch_threads[i] = th[i];
        p.touch_mt_s_per_gib[i] = scaling[i];
    }
    CHECK_EQ_INT(mz_profile_restore_threads(&p, 8), 8);
    CHECK_EQ_INT(mz_profile_restore_threads(&p, 2), 14);
    /* Flat from 2 threads on: the memory system is saturated at 2, the
     * floor of 3 applies. */
    for (int i = 0; i < 5; i++) p.touch_mt_s_per_gib[i] = flat[i];
    CHECK_EQ_INT(mz_profile_restore_threads(&p, 2), 3);
    CHECK_EQ_INT(mz_profile_restore_threads(&p, 12), 4); /* 4 left: counts up to 4 still scale */
    /* The 16-vCPU device's table (06:08 and 08:10 runs): best at 4 threads,
     * 8 and 16 slower. Beside 2 compute threads 4 restore threads were
     * ready soonest and slowed the prefill least (the target-3 sweep); the
     * rule that let twice that many run (8) missed target 3. Beside a
     * compute wider than 4 the restore matches the compute's width (8
     * compute threads, q4 at 50 %: ready after 229-246 ms with 8, 314-319
     * with 4), the pre-faulting stays at 4. */
    static const double device[] = {0.3523, 0.1962, 0.1503, 0.2147, 0.2763};
    for (int i = 0; i < 5; i++) p.touch_mt_s_per_gib[i] = device[i];
    CHECK_EQ_INT(mz_profile_restore_threads(&p, 2), 4);
    CHECK_EQ_INT(mz_profile_restore_threads(&p, 4), 4);
    CHECK_EQ_INT(mz_profile_restore_threads(&p, 6), 6);
    CHECK_EQ_INT(mz_profile_restore_threads(&p, 8), 8);
    CHECK_EQ_INT(mz_profile_prefault_threads(&p, mz_profile_restore_threads(&p, 8)), 4);
    CHECK_EQ_INT(mz_profile_restore_threads(&p, 10), 6); /* the spare CPUs */
    CHECK_EQ_INT(mz_profile_restore_threads(&p, 12), 4); /* 4 CPUs left, still scaling there */
    CHECK_EQ_INT(mz_profile_restore_threads(&p, 14), 3); /* 2 left: the floor */
    CHECK_EQ_INT(mz_profile_restore_threads(&p, 16), 3);
    CHECK_EQ_INT(mz_profile_prefault_threads(&p, mz_profile_restore_threads(&p, 2)), 4);
    for (int i = 0; i < 5; i++) p.touch_mt_s_per_gib[i] = flat[i];
    p.restore_threads = 12; /* set in the profile: used as it is */
    CHECK_EQ_INT(mz_profile_restore_threads(&p, 8), 12);
    static char json[16384];
    size_t len = mz_profile_to_json(&p, json, sizeof json);
    CHECK(len < sizeof json && strstr(json, "\"restore_threads\": 12,"));
    CHECK(mz_profile_from_json(json, len, &q) == MZ_OK && q.restore_threads == 12);
    CHECK(q.n_touch == 5 && q.touch_threads[4] == 16 && q.touch_mt_s_per_gib[2] == 0.58);
    char *f = strstr(json, "\"restore_threads\": 12,");
    if (f) memcpy(f + 19, "99", 2); /* above MZ_RESTORE_THREADS_MAX */
    CHECK(mz_profile_from_json(json, len, &q) == MZ_E_FORMAT);
    if (f) memmove(f, f + 25, strlen(f + 25) + 1); /* no field: the rule */
    CHECK(mz_profile_from_json(json, strlen(json), &q) == MZ_OK && q.restore_threads == 0);
    char *g = strstr(json, "\"prefault_threads\": [1, 2, 4");
    if (g) g[24] = '1'; /* [1, 1, 4, ...]: no longer ascending */
    CHECK(g && mz_profile_from_json(json, strlen(json), &q) == MZ_E_FORMAT);

    /* The storage requests: the profile's saturation point when measured
     * (at least 4 in flight), 1 MiB x 4 otherwise. */
    size_t io;
    int qd;
    mz_profile_builtin(&p);
    mz_profile_io_shape(&p, &io, &qd);
    CHECK(io == (1u << 20) && qd == 4);
    p.measured = true;
    p.sat_size = 128u << 10;
    p.sat_qd = 8; /* the 16-vCPU machine */
    mz_profile_io_shape(&p, &io, &qd);
    CHECK(io == (128u << 10) && qd == 8);
    p.sat_size = 8u << 20;
    p.sat_qd = 1;
    mz_profile_io_shape(&p, &io, &qd);
    CHECK(io == (4u << 20) && qd == 4);

    mz_ctx_t *c = ev_ctx(m, "q8", MZ_KV_PLACE_AUTO, 512, "swap-grid-split");
    CHECK(c != NULL);
    if (!c) return;
    mz_token t[4] = {1, 2, 3, 4};
    mz_restore_params rp = mz_restore_params_default();
    rp.n_restore_threads = MZ_RESTORE_THREADS_MAX + 1;
    CHECK(mz_prefill_restore(c, t, 4, &rp, NULL) == MZ_E_INVAL);
    rp.n_restore_threads = -1;
    CHECK(mz_prefill_restore(c, t, 4, &rp, NULL) == MZ_E_INVAL);
    rp.n_restore_threads = 0;
    mz_restore_experimental rx = mz_restore_experimental_default();
    rp.experimental = &rx;
    rx.n_prefault_threads = -1;
    CHECK(mz_prefill_restore(c, t, 4, &rp, NULL) == MZ_E_INVAL);
    rx.n_prefault_threads = MZ_RESTORE_THREADS_MAX + 1;
    CHECK(mz_prefill_restore(c, t, 4, &rp, NULL) == MZ_E_INVAL);
    rp.experimental = NULL;
    CHECK(mz_ctx_n_tokens(c) == 0);
    /* 0: the profile's split is used and reported. */
    rp.n_restore_threads = 0;
    mz_restore_timings tm;
    CHECK(mz_prefill_restore(c, t, 4, &rp, NULL) == MZ_OK);
    CHECK(mz_evict(c, SIZE_MAX, NULL) == MZ_OK);
    CHECK(mz_ctx_truncate(c, 4) == MZ_OK);
    CHECK(mz_prefill_restore(c, t, 4, &rp, &tm) == MZ_OK);
    CHECK(tm.n_restore_threads >= 2 && tm.n_restore_threads <= MZ_RESTORE_THREADS_MAX &&
          tm.n_units > 0);
    mz_ctx_free(c);
}

int main(void)
{
    const char *real = t_real_model_path();
    if (!real) return t_skip(T, "real model absent (make model)");
    const bool san = getenv("MZ_SANITIZED") != NULL;
    static const char *const codecs[] = {"raw", "q8", "cachegen"};
    static const int levels[] = {75, 50, 25, 0};
    static const char *const san_codecs[] = {"q8"};
    static const int san_levels[] = {50};
    unsigned cell = 0;

    /* A tiny generated qwen3 (vocab from the real model): 4 layers, 3 KV
     * chunks a layer. */
    const char *path = t_tmp_path("grid-qwen3.gguf");
    mz_gen_params gp = mz_gen_params_default();
    gp.preset = "tiny-qwen3";
    gp.n_layer = 4;
    gp.weight_type = "Q8_0";
    gp.vocab_from = real;
    gp.seed = 9;
    if (mz_gen_model(path, &gp)) {
        fprintf(stderr, "gen: %s\n", mz_last_error());
        return 1;
    }
    grid_model q = {.name = "tiny qwen3", .m = ev_load(path), .ref_m = ev_load(path),
                    .n_base = 600, .n_ctx = 1024};
    CHECK(q.m && q.ref_m);
    test_prefault_split();
    if (q.m) test_split_params(q.m);
    if (q.m && q.ref_m) run_model(&q, codecs, MZ_ARRAY_LEN(codecs), levels, MZ_ARRAY_LEN(levels), &cell);
    mz_model_free(q.m);
    mz_model_free(q.ref_m);

    /* The real model: 2 KV chunks a layer (30 layers). */
    grid_model sm = {.name = "SmolLM2", .m = ev_load(real), .ref_m = ev_load(real), .n_base = 300,
                     .n_ctx = 512};
    CHECK(sm.m && sm.ref_m);
    if (T_UNDER_TSAN) {
        printf("%s: ThreadSanitizer build: the SmolLM2 cells run in the plain and ASan builds\n", T);
    } else if (sm.m && sm.ref_m) {
        if (san)
            run_model(&sm, san_codecs, MZ_ARRAY_LEN(san_codecs), san_levels,
                      MZ_ARRAY_LEN(san_levels), &cell);
        else
            run_model(&sm, codecs, MZ_ARRAY_LEN(codecs), levels, MZ_ARRAY_LEN(levels), &cell);
    }
    mz_model_free(sm.m);
    mz_model_free(sm.ref_m);
    return t_done(T);
}
