/*
 * test_swa_evict.c — sliding-window attention as free memory (src/mem/policy.h,
 * "dead" chunks; issue 29).
 *
 * On a generated gemma3 (the tiny-gemma3 preset: 7 layers, local 0-4 and 6,
 * global 5; vocab from the real model, skipped with 77 without it) with a
 * window of 300 tokens and a 1000-token history (4 chunks a layer), the next
 * token attends to positions from 701 on, so chunks 0 and 1 of the six local
 * layers (12 chunks) are dead; chunks 2-3 of those and all 4 of the global
 * layer are live. Every answer is compared bit for bit with a session on a
 * second load of the model that is never evicted (the KV codec is raw, so
 * only the dead-chunk rule could make them differ).
 *
 *   order    under a budget evicted one chunk's bytes at a time: after k
 *            steps exactly min(k, 12) dead chunks are out, all STORED_RAW
 *            (never through the codec), and no live chunk or weight block
 *            leaves while a dead chunk is resident; then the rest follows.
 *            The stats count the 12 (kv_out_of_window).
 *   restore  after evicting everything, mz_restore brings back exactly the
 *            16 live chunks and the weights; the dead ones stay stored; the
 *            next prefill answers as the never-evicted session.
 *   regen    a regenerate that cuts back to 400 tokens (into chunks 0-1)
 *            reads the 12 dead chunks from storage (the pipelined restore's
 *            count) and recomputes only the new tokens; logits and a greedy
 *            continuation equal the reference.
 *   resume   stored, evicted, restored, synced, abandoned as kill -9 leaves
 *            it, then resumed with the next tokens: the resume reads the live
 *            chunks only, answers as the reference, and a regenerate then
 *            reads the dead chunks back from the store.
 *   real     the real Gemma 3 270M Q4_K_M file (window 512, 18 layers, 15
 *            of them local; skipped, saying so, without it): at 800 tokens
 *            chunk 0 of each local layer is dead (15 chunks); evicted whole
 *            and restored, the dead chunks stay stored, the next answer
 *            equals a never-evicted session's, and a regenerate cut back to
 *            200 tokens reads them back and answers the same too.
 *   planner  (pure, hand-made table, no model) the hybrid and the fixed
 *            planners take the dead chunks first, oldest first, raw; not
 *            when the view cannot store; dead stored chunks are not in the
 *            planned restore time.
 */
#include "evict_util.h"
#include "store/store.h"

#define WINDOW 300
#define N_CTX 1280
#define N_BASE 1000
#define N_FOLLOW 8
#define N_CUT 400
#define N_ALT 8
#define N_GREEDY 6
#define N_LAYER 7
#define GLOBAL_LAYER 5
#define N_DEAD 12 /* chunks 0, 1 of the six local layers at 1000 or 1008 tokens */

static const char *T = "test_swa_evict";
static mz_model_t *g_m, *g_ref_m;
static int g_vocab;
static mz_token g_base[N_BASE], g_follow[N_FOLLOW], g_regen[N_CUT + N_ALT];
static float *g_want_follow, *g_want_regen; /* reference logits */
static mz_token g_want_greedy[N_GREEDY];

static bool is_local(int l) { return l != GLOBAL_LAYER; }

/* Dead at 1000..1008 tokens: (1001 - 300) / 256 = 2. */
static bool is_dead(int l, size_t c) { return is_local(l) && c < 2; }

static mz_ctx_params ctx_params(const char *swap)
{
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = N_CTX;
    cp.n_threads = 2;
    cp.kv_codec = "raw";
    cp.swap_dir = t_tmp_path(swap);
    return cp;
}

static bool same_logits(const mz_ctx_t *c, const float *want)
{
    const float *lg = mz_ctx_logits(c);
    return lg && memcmp(lg, want, (size_t)g_vocab * sizeof *lg) == 0;
}

/* The reference: base + follow, then the regenerate, then greedy tokens. */
static int make_reference(void)
{
    mz_ctx_params cp = ctx_params("swap-swa-ref");
    mz_ctx_t *r = NULL;
    g_want_follow = malloc((size_t)g_vocab * sizeof(float));
    g_want_regen = malloc((size_t)g_vocab * sizeof(float));
    if (!g_want_follow || !g_want_regen || mz_ctx_init(g_ref_m, &cp, &r)) return -1;
    int rc = -1;
    size_t kept = 0;
    if (mz_prefill(r, g_base, N_BASE) || ev_prefill_logits(r, g_follow, N_FOLLOW, g_want_follow, g_vocab))
        goto out;
    if (mz_ctx_sync(r, g_regen, N_CUT + N_ALT, NULL, NULL, &kept) || kept != N_CUT) goto out;
    memcpy(g_want_regen, mz_ctx_logits(r), (size_t)g_vocab * sizeof(float));
    if (ev_greedy(r, N_GREEDY, g_want_greedy) != N_GREEDY) goto out;
    rc = 0;
out:
    if (rc) fprintf(stderr, "reference: %s\n", mz_ctx_errmsg(r));
    mz_ctx_free(r);
    return rc;
}

typedef struct census {
    size_t dead_out, dead_raw, live_out, w_out;
} census;

static census count_units(mz_ctx_t *c)
{
    census k = {0};
    for (int l = 0; l < N_LAYER; l++) {
        if (mz_mem_weights_state(c->mem, l) != MZ_UNIT_RESIDENT) k.w_out++;
        for (size_t ch = 0; ch < c->kv.n_chunks; ch++) {
            mz_unit_state s = mz_mem_kv_state(c->mem, l, ch);
            if (s == MZ_UNIT_RESIDENT) continue;
            if (!is_dead(l, ch)) {
                k.live_out++;
                continue;
            }
            k.dead_out++;
            if (s == MZ_UNIT_STORED_RAW) k.dead_raw++;
        }
    }
    return k;
}

/* order, restore and regen on one session. */
static void test_in_memory(void)
{
    mz_ctx_params cp = ctx_params("swap-swa");
    mz_ctx_t *c = NULL;
    float *got = malloc((size_t)g_vocab * sizeof(float));
    CHECK(got && mz_ctx_init(g_m, &cp, &c) == MZ_OK && mz_prefill(c, g_base, N_BASE) == MZ_OK);
    if (!got || !c) goto out;

    /* order */
    mz_mem_stats st;
    mz_get_mem_stats(c, &st);
    CHECK_EQ_INT(st.kv.n_units, N_LAYER * 4);
    CHECK_EQ_INT(st.kv_out_of_window.n_units, N_DEAD);
    CHECK_EQ_INT(st.kv_out_of_window.n_resident, N_DEAD);
    const size_t chunk = st.kv.total_bytes / st.kv.n_units;
    size_t step = 0;
    for (; step < N_DEAD + 6; step++) {
        mz_evict_report er;
        CHECK(mz_evict(c, chunk, &er) == MZ_OK);
        census k = count_units(c);
        CHECK_MSG(k.dead_raw == k.dead_out, "step %zu: %zu dead chunks out, %zu of them raw", step,
                  k.dead_out, k.dead_raw);
        if (step < N_DEAD) {
            CHECK_MSG(k.dead_out == step + 1 && k.live_out == 0 && k.w_out == 0,
                      "step %zu: dead %zu, live %zu, weights %zu out", step, k.dead_out, k.live_out,
                      k.w_out);
        } else {
            CHECK_EQ_INT(k.dead_out, N_DEAD);
        }
    }
    census k = count_units(c);
    CHECK_MSG(k.live_out + k.w_out > 0, "past the dead chunks nothing else was evicted");
    mz_get_mem_stats(c, &st);
    CHECK_EQ_INT(st.kv_out_of_window.n_resident, 0);
    CHECK_EQ_INT(st.kv_out_of_window.stored_bytes, N_DEAD * chunk);

    /* restore */
    mz_evict_report er;
    CHECK(mz_evict(c, SIZE_MAX / 2, &er) == MZ_OK);
    k = count_units(c);
    CHECK_MSG(k.dead_out == N_DEAD && k.dead_raw == N_DEAD && k.live_out == 16,
              "evict all: dead %zu (%zu raw), live %zu", k.dead_out, k.dead_raw, k.live_out);
    mz_restore_report rr;
    CHECK(mz_restore(c, &rr) == MZ_OK);
    k = count_units(c);
    CHECK_MSG(k.dead_out == N_DEAD && k.dead_raw == N_DEAD && k.live_out == 0 && k.w_out == 0,
              "after restore: dead %zu (%zu raw), live %zu, weights %zu out", k.dead_out, k.dead_raw,
              k.live_out, k.w_out);
    CHECK_EQ_INT(rr.n_kv_decoded + rr.n_kv_read_raw + rr.n_kv_read_compressed, 16);
    mz_get_mem_stats(c, &st);
    CHECK_EQ_INT(st.kv.resident_bytes, 16 * chunk);
    CHECK(ev_prefill_logits(c, g_follow, N_FOLLOW, got, g_vocab) == MZ_OK);
    CHECK_MSG(memcmp(got, g_want_follow, (size_t)g_vocab * sizeof *got) == 0,
              "logits after evict + restore differ from the never-evicted session's");

    /* regen: only the dead chunks are out; the cut to 400 tokens needs them. */
    k = count_units(c);
    CHECK_MSG(k.dead_out == N_DEAD && k.live_out == 0, "before regen: dead %zu, live %zu out",
              k.dead_out, k.live_out);
    mz_restore_timings rt;
    size_t kept = 0;
    CHECK(mz_ctx_sync(c, g_regen, N_CUT + N_ALT, NULL, &rt, &kept) == MZ_OK);
    CHECK_EQ_INT(kept, N_CUT);                /* recomputed: the N_ALT new tokens only */
    CHECK_EQ_INT(rt.n_storage_units, N_DEAD); /* read back, not recomputed */
    CHECK_EQ_INT(rt.n_mem_units, 0);
    CHECK_MSG(same_logits(c, g_want_regen), "logits after the regenerate differ");
    mz_token tok[N_GREEDY];
    CHECK(ev_greedy(c, N_GREEDY, tok) == N_GREEDY &&
          memcmp(tok, g_want_greedy, sizeof tok) == 0);
    printf("%s: order, restore, regen: %zu dead chunks first, restore brought %zu back, regenerate "
           "read %zu from storage and recomputed %d tokens\n",
           T, (size_t)N_DEAD, rr.n_kv_decoded + rr.n_kv_read_raw + rr.n_kv_read_compressed,
           rt.n_storage_units, N_ALT);
out:
    mz_ctx_free(c);
    free(got);
}

/* resume: stored, killed, resumed. */
static void test_resume(void)
{
    mz_engine_t *e = NULL;
    mz_engine_params ep = mz_engine_params_default();
    ep.n_threads = 2;
    ep.swap_dir = t_tmp_path("swap-swa");
    CHECK(mz_engine_create(g_m, &ep, &e) == MZ_OK);
    if (!e) return;
    mz_store_params stp = mz_store_params_default();
    char sdir[1024];
    snprintf(sdir, sizeof sdir, "%s/store-swa", t_tmp_dir());
    stp.dir = sdir;
    mz_store_t *st = NULL;
    mz_ctx_t *c = NULL;
    CHECK(mz_store_open(e, &stp, &st) == MZ_OK);
    if (!st) goto out;
    mz_ctx_params cp = ctx_params("swap-swa");
    cp.swap_dir = NULL; /* the engine's */
    CHECK(mz_session_create(e, &cp, &c) == MZ_OK && mz_session_store(c, st, "swa") == MZ_OK);
    CHECK(c && mz_prefill(c, g_base, N_BASE) == MZ_OK);
    mz_evict_report er;
    mz_restore_report rr;
    CHECK(c && mz_evict(c, SIZE_MAX / 2, &er) == MZ_OK && mz_restore(c, &rr) == MZ_OK);
    CHECK(c && count_units(c).dead_out == N_DEAD && mz_session_sync(c) == MZ_OK);
    if (!c) goto out;
    mz_sstore_test_abandon(c); /* as kill -9 leaves it */
    mz_ctx_free(c);
    c = NULL;

    mz_resume_info ri;
    CHECK(mz_session_resume_prefill(st, "swa", &cp, g_follow, N_FOLLOW, &c, &ri) == MZ_OK);
    if (!c) goto out;
    CHECK_EQ_INT(ri.outcome, MZ_RESUME_FULL);
    census k = count_units(c);
    CHECK_MSG(k.dead_out == N_DEAD && k.live_out == 0 && k.w_out == 0,
              "after resume: dead %zu out, live %zu, weights %zu", k.dead_out, k.live_out, k.w_out);
    /* 3 full chunks stored a layer; chunk 3 is the tail. Read: the live full
     * chunk 2 of the local layers and chunks 0-2 of the global one. */
    CHECK_EQ_INT(ri.timings.n_storage_units, 6 + 3);
    CHECK_MSG(same_logits(c, g_want_follow), "logits after the resume differ");
    mz_restore_timings rt;
    size_t kept = 0;
    CHECK(mz_ctx_sync(c, g_regen, N_CUT + N_ALT, NULL, &rt, &kept) == MZ_OK);
    CHECK_EQ_INT(kept, N_CUT);
    CHECK_EQ_INT(rt.n_storage_units, N_DEAD); /* from the store's file */
    CHECK_MSG(same_logits(c, g_want_regen), "logits of the regenerate after the resume differ");
    mz_token tok[N_GREEDY];
    CHECK(ev_greedy(c, N_GREEDY, tok) == N_GREEDY && memcmp(tok, g_want_greedy, sizeof tok) == 0);
    printf("%s: resume read %zu units (dead chunks left in the store), regenerate read %zu back\n",
           T, ri.timings.n_storage_units, rt.n_storage_units);
out:
    mz_ctx_free(c);
    mz_store_close(st);
    mz_engine_free(e);
}

/* ---- planner (pure) -------------------------------------------------------------------- */

enum { PL_LAYERS = 2, PL_CHUNKS = 4 };

static void test_planner(void)
{
    mz_unit w[PL_LAYERS], kv[PL_LAYERS * PL_CHUNKS];
    const size_t kv_bytes = 1 << 16;
    for (int l = 0; l < PL_LAYERS; l++) {
        w[l] = (mz_unit){.kind = MZ_UNIT_WEIGHTS, .layer = l, .chunk = -1, .bytes = 1 << 20};
        mz_unit_set(&w[l], MZ_UNIT_RESIDENT);
        for (int c = 0; c < PL_CHUNKS; c++) {
            mz_unit *u = &kv[l * PL_CHUNKS + c];
            *u = (mz_unit){.kind = MZ_UNIT_KV, .layer = l, .chunk = c, .bytes = kv_bytes};
            mz_unit_set(u, MZ_UNIT_RESIDENT);
        }
    }
    /* Layer 0 local (window 300), layer 1 global; 1000 tokens: chunks 0-1
     * of layer 0 dead. */
    const size_t window[PL_LAYERS] = {300, 0};
    mz_policy_view v = {.n_layer = PL_LAYERS, .max_chunks = PL_CHUNKS, .n_chunks = PL_CHUNKS,
                        .weights = w, .kv = kv, .weights_evictable = true, .can_store = true,
                        .unit_bytes_kv = kv_bytes, .enc_bytes_kv_est = kv_bytes / 2,
                        .times = {1000, 2000, 2000, 3000, 1, 1}, .kv_window = window,
                        .n_pos = 1000};
    CHECK(mz_swa_first_live_chunk(1000, 300) == 2 && mz_swa_first_live_chunk(299, 300) == 0 &&
          mz_swa_first_live_chunk(300, 300) == 0 && mz_swa_first_live_chunk(555, 300) == 1 &&
          mz_swa_first_live_chunk(1000, 0) == 0);
    CHECK(mz_policy_kv_dead(&v, 0, 1) && !mz_policy_kv_dead(&v, 0, 2) && !mz_policy_kv_dead(&v, 1, 0));
    mz_evict_plan p;
    if (mz_evict_plan_init(&p, PL_LAYERS, PL_CHUNKS) != MZ_OK) {
        CHECK(!"plan init");
        return;
    }
    mz_policy *pols[2] = {mz_policy_hybrid_init(NULL),
                          mz_policy_backward_init(MZ_KV_PLACE_COMPRESSED, NULL)};
    for (int k = 0; k < 2; k++) {
        CHECK(pols[k] != NULL);
        if (!pols[k]) continue;
        pols[k]->plan(pols[k], &v, 3 * kv_bytes, &p);
        CHECK_MSG(p.n >= 3 && p.steps[0].layer == 0 && p.steps[0].chunk == 0 &&
                      p.steps[0].dest == MZ_DEST_STORE_RAW && p.steps[1].layer == 0 &&
                      p.steps[1].chunk == 1 && p.steps[1].dest == MZ_DEST_STORE_RAW &&
                      !(p.steps[2].kind == MZ_UNIT_KV && p.steps[2].layer == 0 && p.steps[2].chunk < 2),
                  "%s: dead chunks not first", pols[k]->name);
        v.can_store = false;
        pols[k]->plan(pols[k], &v, kv_bytes, &p);
        CHECK_MSG(p.n >= 1 && p.steps[0].dest == MZ_DEST_COMPRESS,
                  "%s: without storage the first step is %d", pols[k]->name, (int)p.steps[0].dest);
        v.can_store = true;
    }
    /* Planned restore time: a dead chunk in storage is off the paths. */
    mz_restore_plan_times rt0, rt1;
    mz_unit_set(&kv[0], MZ_UNIT_STORED_RAW);
    mz_policy_restore_times(&v, &rt0);
    CHECK_EQ_INT(rt0.storage_ns, 0);
    mz_unit_set(&kv[2], MZ_UNIT_STORED_RAW); /* live */
    mz_policy_restore_times(&v, &rt1);
    CHECK_EQ_INT(rt1.storage_ns, v.times.t_rkv_ns);
    for (int k = 0; k < 2; k++)
        if (pols[k]) pols[k]->free(pols[k]);
    mz_evict_plan_free(&p);
}

/* The real file: the same rule on its geometry (window 512, layers 5, 11
 * and 17 global, 256-token chunks). */
static void test_real_gemma(void)
{
    const char *path = t_gemma_model_path();
    if (T_UNDER_TSAN) { /* no thread of its own to check; two 238 MB models under TSan */
        t_skip_part("real", "the real Gemma file's case is not run under ThreadSanitizer (tiny-gemma3 covers the threads)");
        return;
    }
    if (!path) {
        t_skip_part("real", "the Gemma 3 270M file is absent (make model MODELS=\"smollm2 gemma3\")");
        return;
    }
    enum { BASE = 800, FOLLOW = 8, CUT = 200, ALT = 8 };
    mz_model_t *m = NULL, *ref_m = NULL;
    mz_ctx_t *c = NULL, *r = NULL;
    mz_token *toks = malloc((BASE + FOLLOW + ALT) * sizeof *toks);
    float *want = NULL;
    if (!toks || ev_load_pair(path, &m, &ref_m)) {
        CHECK_MSG(0, "real Gemma: load failed");
        goto out;
    }
    const mz_model_config *cfg = &m->cfg;
    CHECK_MSG(cfg->n_swa == 512 && cfg->n_layer == 18, "window %d, %d layers", cfg->n_swa, cfg->n_layer);
    const int nv = mz_model_n_vocab(m);
    ev_tokens(toks, BASE + FOLLOW + ALT, nv, 77);
    want = malloc((size_t)nv * sizeof *want);
    mz_ctx_params cp = ctx_params("swap-swa-gemma");
    cp.kv_placement = MZ_KV_PLACE_STORAGE;
    mz_ctx_params rp = ctx_params("swap-swa-gemma-ref");
    if (!want || mz_ctx_init(m, &cp, &c) || mz_ctx_init(ref_m, &rp, &r)) {
        CHECK_MSG(0, "real Gemma: context: %s", mz_last_error());
        goto out;
    }
    CHECK(mz_prefill(c, toks, BASE) == MZ_OK && mz_prefill(r, toks, BASE) == MZ_OK);
    CHECK(mz_evict(c, SIZE_MAX, NULL) == MZ_OK);
    CHECK(mz_restore(c, NULL) == MZ_OK);
    size_t dead_stored = 0, live_out = 0;
    for (int l = 0; l < cfg->n_layer; l++)
        for (size_t ch = 0; ch < c->kv.n_chunks; ch++) {
            const bool dead = mz_layer_window(cfg, l) > 0 && ch == 0;
            const bool resident = mz_mem_kv_state(c->mem, l, ch) == MZ_UNIT_RESIDENT;
            dead_stored += dead && !resident;
            live_out += !dead && !resident;
        }
    CHECK_MSG(dead_stored == 15 && live_out == 0, "after mz_restore: %zu dead chunks stored (want 15), %zu live out",
              dead_stored, live_out);
    CHECK(ev_prefill_logits(r, toks + BASE, FOLLOW, want, nv) == MZ_OK);
    CHECK(mz_prefill(c, toks + BASE, FOLLOW) == MZ_OK);
    CHECK_MSG(memcmp(mz_ctx_logits(c), want, (size_t)nv * sizeof *want) == 0, "real Gemma: logits after restore");
    /* a regenerate cut back into the dead chunks */
    CHECK(mz_ctx_truncate(c, CUT) == MZ_OK && mz_ctx_truncate(r, CUT) == MZ_OK);
    CHECK(ev_prefill_logits(r, toks + BASE + FOLLOW, ALT, want, nv) == MZ_OK);
    CHECK(mz_prefill(c, toks + BASE + FOLLOW, ALT) == MZ_OK);
    CHECK_MSG(memcmp(mz_ctx_logits(c), want, (size_t)nv * sizeof *want) == 0, "real Gemma: logits after the cut");
    fprintf(stderr, "%s: real Gemma 3 270M: %zu dead chunks left stored by mz_restore; answers equal after the "
            "restore and after a cut back to %d tokens\n", T, dead_stored, CUT);
out:
    mz_ctx_free(c);
    mz_ctx_free(r);
    mz_model_free(m);
    mz_model_free(ref_m);
    free(toks);
    free(want);
}

int main(void)
{
    test_planner();
    const char *path = t_tmp_path("swa-tiny-gemma3.gguf");
    if (!t_real_model_path()) {
        t_skip_part("model", "real model absent (make model): its vocabulary makes the gemma3");
        return t_done(T);
    }
    if (ev_gen(path, "tiny-gemma3", 0, WINDOW)) {
        fprintf(stderr, "gen-model tiny-gemma3: %s\n", mz_last_error());
        return 1;
    }
    if (ev_load_pair(path, &g_m, &g_ref_m)) return 1;
    g_vocab = mz_model_n_vocab(g_m);
    ev_tokens(g_base, N_BASE, g_vocab, 41);
    ev_tokens(g_follow, N_FOLLOW, g_vocab, 42);
    memcpy(g_regen, g_base, N_CUT * sizeof *g_regen);
    ev_tokens(g_regen + N_CUT, N_ALT, g_vocab, 43);
    if (make_reference()) return 1;
    test_in_memory();
    test_resume();
    test_real_gemma();
    mz_model_free(g_m);
    mz_model_free(g_ref_m);
    free(g_want_follow);
    free(g_want_regen);
    return t_done(T);
}
