/*
 * test_evict.c — eviction and restore on a generated tiny model (4 layers,
 * 3 KV chunks per layer), every amount in every KV placement with both
 * codecs. After each eviction the next answer must be bit-identical (full
 * logits, memcmp) to a context that never evicted (raw codec) or to one whose
 * encoded chunks were replaced by decode(encode(chunk)) (q8). Also: restore
 * on demand vs mz_restore, eviction after a partial restore, repeated cycles,
 * truncation with evicted chunks, weights shared between contexts, freeing a
 * context while its model's weights are dropped.
 */
#include "evict_util.h"

#include <unistd.h>

#define N_LAYER 3
#define N_CTX 1024
#define N_BASE 530 /* 3 chunks per layer, the last one partly filled */
#define N_FOLLOW 16

static const char *T = "test_evict";
static mz_model_t *g_m, *g_ref_m; /* evicting contexts / references (separate weights) */
static int g_vocab;
static mz_token g_base[N_BASE], g_follow[N_FOLLOW];
static float *g_a, *g_b; /* two logits rows (g_vocab each, one allocation) */

/* Prefills the n tokens toks into c and into ref and checks both succeed
 * and the logits are bit-equal: three checks. */
static void check_same_logits(mz_ctx_t *c, mz_ctx_t *ref, const mz_token *toks, size_t n, const char *what)
{
    CHECK(ev_prefill_logits(c, toks, n, g_a, g_vocab) == MZ_OK);
    CHECK(ev_prefill_logits(ref, toks, n, g_b, g_vocab) == MZ_OK);
    CHECK_MSG(memcmp(g_a, g_b, (size_t)g_vocab * sizeof(float)) == 0, "%s: logits differ", what);
}

static const mz_kv_placement placements[] = {MZ_KV_PLACE_AUTO, MZ_KV_PLACE_COMPRESSED,
                                             MZ_KV_PLACE_STORAGE, MZ_KV_PLACE_STORAGE_COMPRESSED,
                                             MZ_KV_PLACE_MIXED};

/* Base-context KV, saved once, so cases reuse contexts instead of re-prefilling:
 * writing it back into a context's chunks (all resident) and truncating to
 * N_BASE gives the state right after the base prefill. */
static uint8_t *g_snap[N_LAYER][3];

static void snap_save(mz_ctx_t *c)
{
    for (int l = 0; l < N_LAYER; l++)
        for (int k = 0; k < 3; k++) {
            g_snap[l][k] = malloc(c->kv.chunk_bytes);
            memcpy(g_snap[l][k], c->kv.chunks[l][k], c->kv.chunk_bytes);
        }
}

static int snap_load(mz_ctx_t *c)
{
    if (mz_ctx_truncate(c, N_BASE) != MZ_OK || !ev_all_resident(c)) return -1;
    for (int l = 0; l < N_LAYER; l++)
        for (int k = 0; k < 3; k++) memcpy(c->kv.chunks[l][k], g_snap[l][k], c->kv.chunk_bytes);
    return 0;
}

/* One case on context c (at the base state): evict `amount`, restore (on
 * demand or explicitly), then the follow-up's logits must equal ref's, ref
 * being the never-evicted base with the codec round trip applied to the
 * chunks that went through the codec. */
static void run_case(mz_ctx_t *c, mz_ctx_t *ref, bool lossy, size_t amount, bool explicit_restore,
                     const char *label)
{
    unsigned char *went = calloc((size_t)N_LAYER * c->kv.max_chunks, 1);
    CHECK(went != NULL);
    if (!went) return;
    CHECK(snap_load(c) == 0 && snap_load(ref) == 0);

    size_t total = ev_evictable_total(c);
    mz_evict_report r;
    mz_status s = mz_evict(c, amount, &r);
    CHECK_MSG(s == MZ_OK, "%s: %s", label, mz_ctx_errmsg(c));
    CHECK(mz_mem_is_valid(c->mem));
    mz_mem_stats st;
    mz_get_mem_stats(c, &st);
    if (amount == 0) CHECK(r.bytes_freed == 0 && st.remaining_pct == 100.0);
    if (amount && amount <= total && lossy)
        CHECK_MSG(r.complete && r.bytes_freed >= amount, "%s: freed %zu of %zu", label,
                  r.bytes_freed, amount);
    if (amount >= total) {
        /* Everything: KV in storage (CompKV emptied the stack), weights dropped. */
        CHECK_MSG(st.remaining_pct == 0.0, "%s: remaining %.2f%%", label, st.remaining_pct);
        CHECK(st.weights.n_resident == 0 && st.kv.n_resident == 0 && st.compstack_mapped_bytes == 0);
    }
    if (amount > total) CHECK(!r.complete);
    CHECK(r.n_kv_raw_fallback == 0);

    ev_mark_encoded(c, went);
    if (lossy) CHECK(ev_apply_marks(ref, mz_mem_codec(c->mem), went) == 0);

    if (explicit_restore) {
        mz_restore_report rr;
        CHECK_MSG(mz_restore(c, &rr) == MZ_OK, "%s: %s", label, mz_ctx_errmsg(c));
        CHECK(ev_all_resident(c));
    }
    check_same_logits(c, ref, g_follow, N_FOLLOW, label);
    CHECK(ev_all_resident(c));
    CHECK(mz_mem_is_valid(c->mem));
    free(went);
}

static void test_matrix(void)
{
    mz_ctx_t *ref = ev_ctx(g_ref_m, "raw", MZ_KV_PLACE_AUTO, N_CTX, "swap-evict-ref");
    CHECK(ref && mz_prefill(ref, g_base, N_BASE) == MZ_OK);
    if (!ref) return;
    snap_save(ref);
    size_t total = ev_evictable_total(ref);
    const size_t amounts[] = {0, 3, total / 4, total / 2, total * 3 / 4, total, total * 2};
    const char *names[] = {"0%", "3 bytes", "25%", "50%", "75%", "all", "2x all"};
    const char *codecs[] = {"raw", "q8", "q4"};
    /* Sanitizer builds: "auto" is "mixed" today, skip the duplicate. */
    const char *san = getenv("MZ_SANITIZED");
    size_t p0 = san && *san == '1' ? 1 : 0;
    int k = 0;
    for (size_t ci = 0; ci < MZ_ARRAY_LEN(codecs); ci++)
        for (size_t pi = p0; pi < MZ_ARRAY_LEN(placements); pi++) {
            mz_ctx_t *c = ev_ctx(g_m, codecs[ci], placements[pi], N_CTX, "swap-evict");
            CHECK(c && mz_prefill(c, g_base, N_BASE) == MZ_OK);
            if (!c) continue;
            CHECK(ev_evictable_total(c) == total);
            for (size_t ai = 0; ai < MZ_ARRAY_LEN(amounts); ai++, k++) {
                char label[128];
                snprintf(label, sizeof label, "%s/%s/%s", codecs[ci],
                         mz_kv_placement_name(placements[pi]), names[ai]);
                run_case(c, ref, strcmp(codecs[ci], "raw") != 0, amounts[ai], k % 2 == 1, label);
            }
            mz_ctx_free(c);
        }
    mz_ctx_free(ref);
}

/* Evict all, restore layers 0-1 only (as a prefill would), evict half, and
 * cycle evict/restore several times: q8 round trips are idempotent, so the
 * answers stay equal to the reference transformed once. */
static void test_partial_and_cycles(void)
{
    mz_ctx_t *c = ev_ctx(g_m, "q8", MZ_KV_PLACE_MIXED, N_CTX, "swap-evict");
    mz_ctx_t *ref = ev_ctx(g_ref_m, "raw", MZ_KV_PLACE_AUTO, N_CTX, "swap-evict-ref");
    unsigned char went[N_LAYER * 4] = {0};
    CHECK(c && ref);
    if (!c || !ref) goto out;
    CHECK(mz_prefill(c, g_base, N_BASE) == MZ_OK);
    CHECK(mz_prefill(ref, g_base, N_BASE) == MZ_OK);
    size_t total = ev_evictable_total(c);

    CHECK(mz_evict(c, SIZE_MAX, NULL) == MZ_OK);
    ev_mark_encoded(c, went);
    for (int l = 0; l < 2; l++) CHECK(mz_mem_acquire_layer(c->mem, l, 3) == MZ_OK);
    CHECK(mz_mem_weights_state(c->mem, 1) == MZ_UNIT_RESIDENT);
    CHECK(mz_mem_weights_state(c->mem, 2) == MZ_UNIT_DROPPED);
    CHECK(mz_mem_is_valid(c->mem));
    mz_evict_report r;
    CHECK(mz_evict(c, total / 10, &r) == MZ_OK && r.complete);
    ev_mark_encoded(c, went);
    CHECK(mz_mem_is_valid(c->mem));

    for (int cycle = 0; cycle < 4; cycle++) {
        if (cycle > 0) {
            CHECK(mz_ctx_truncate(c, N_BASE) == MZ_OK);
            CHECK(mz_ctx_truncate(ref, N_BASE) == MZ_OK);
            CHECK(mz_evict(c, cycle % 2 ? SIZE_MAX : total / 2, NULL) == MZ_OK);
            ev_mark_encoded(c, went);
            if (cycle == 3) CHECK(mz_restore(c, NULL) == MZ_OK);
        }
        CHECK(ev_apply_marks(ref, mz_mem_codec(c->mem), went) == 0);
        char what[24];
        snprintf(what, sizeof what, "cycle %d", cycle);
        check_same_logits(c, ref, g_follow, N_FOLLOW, what);
        CHECK(mz_mem_is_valid(c->mem));
    }
out:
    mz_ctx_free(c);
    mz_ctx_free(ref);
}

/* Truncating drops evicted chunks wholly past the cut (their slots and stack
 * items go) and keeps the partly cut one evicted. */
static void test_truncate_evicted(void)
{
    mz_ctx_t *c = ev_ctx(g_m, "raw", MZ_KV_PLACE_MIXED, N_CTX, "swap-evict");
    mz_ctx_t *ref = ev_ctx(g_ref_m, "raw", MZ_KV_PLACE_AUTO, N_CTX, "swap-evict-ref");
    CHECK(c && ref);
    if (!c || !ref) goto out;
    CHECK(mz_prefill(c, g_base, N_BASE) == MZ_OK);
    CHECK(mz_prefill(ref, g_base, N_BASE) == MZ_OK);
    mz_mem_stats st;
    mz_get_mem_stats(c, &st);
    /* KV only, through both paths: the stack holds chunks of every layer. */
    CHECK(mz_evict(c, st.kv.total_bytes, NULL) == MZ_OK);
    CHECK(mz_mem_kv_state(c->mem, 0, 2) != MZ_UNIT_RESIDENT);
    CHECK(mz_ctx_truncate(c, 300) == MZ_OK); /* keeps chunks 0-1, drops 2 */
    CHECK(mz_ctx_truncate(ref, 300) == MZ_OK);
    CHECK(mz_mem_is_valid(c->mem));
    CHECK(mz_mem_kv_state(c->mem, 0, 2) == MZ_UNIT_ABSENT);
    mz_get_mem_stats(c, &st);
    CHECK(st.kv.n_units == N_LAYER * 2);
    check_same_logits(c, ref, g_follow, N_FOLLOW, "truncated to 300");
    /* Truncate to zero with chunks evicted everywhere. */
    CHECK(mz_evict(c, SIZE_MAX, NULL) == MZ_OK);
    CHECK(mz_ctx_truncate(c, 0) == MZ_OK);
    CHECK(mz_mem_is_valid(c->mem));
    CHECK(mz_ctx_truncate(ref, 0) == MZ_OK);
    check_same_logits(c, ref, g_base, 300, "truncated to 0");
out:
    mz_ctx_free(c);
    mz_ctx_free(ref);
}

/* Weights belong to the model: with two contexts on it, neither drops them.
 * Freeing the last context while its weights are dropped reloads them, so
 * the next context on the model computes the same answer. */
static void test_shared_weights(void)
{
    mz_ctx_t *c1 = ev_ctx(g_m, "q8", MZ_KV_PLACE_STORAGE, N_CTX, "swap-evict");
    mz_ctx_t *c2 = ev_ctx(g_m, "q8", MZ_KV_PLACE_STORAGE, N_CTX, "swap-evict");
    CHECK(c1 && c2);
    if (!c1 || !c2) goto out;
    CHECK(mz_prefill(c1, g_base, 300) == MZ_OK);
    mz_evict_report r;
    CHECK(mz_evict(c1, SIZE_MAX, &r) == MZ_OK);
    CHECK(r.n_weights_dropped == 0 && !r.complete && r.n_kv_stored_raw == N_LAYER * 2);
    CHECK(mz_mem_weights_state(c1->mem, 0) == MZ_UNIT_RESIDENT);
    mz_ctx_free(c2);
    c2 = NULL;
    CHECK(mz_evict(c1, SIZE_MAX, &r) == MZ_OK);
    CHECK(r.n_weights_dropped == N_LAYER);
    mz_ctx_free(c1); /* reloads the weights */
    c1 = ev_ctx(g_m, "q8", MZ_KV_PLACE_STORAGE, N_CTX, "swap-evict");
    c2 = ev_ctx(g_ref_m, "q8", MZ_KV_PLACE_STORAGE, N_CTX, "swap-evict-ref");
    CHECK(c1 && c2);
    if (!c1 || !c2) goto out;
    CHECK(mz_mem_weights_state(c1->mem, N_LAYER - 1) == MZ_UNIT_RESIDENT);
    check_same_logits(c1, c2, g_base, 300, "weights reloaded");
out:
    mz_ctx_free(c1);
    mz_ctx_free(c2);
}

/* A chunk the codec refuses (q8: inf/NaN) is kept as a raw blob. */
static void test_raw_fallback(void)
{
    mz_ctx_t *c = ev_ctx(g_m, "q8", MZ_KV_PLACE_COMPRESSED, N_CTX, "swap-evict");
    CHECK(c != NULL);
    if (!c) return;
    CHECK(mz_prefill(c, g_base, 300) == MZ_OK);
    mz_f16 *k = (mz_f16 *)(void *)c->kv.chunks[N_LAYER - 1][1];
    k[5] = 0x7c00; /* +inf: q8 refuses the chunk; it must come back bit for bit */
    uint8_t *copy = malloc(c->kv.chunk_bytes);
    CHECK(copy != NULL);
    if (!copy) goto out;
    memcpy(copy, c->kv.chunks[N_LAYER - 1][1], c->kv.chunk_bytes);
    mz_evict_report r;
    CHECK(mz_evict(c, c->kv.chunk_bytes / 2, &r) == MZ_OK);
    CHECK(r.n_kv_compressed >= 2 && r.n_kv_raw_fallback == 1); /* the raw blob frees nothing */
    CHECK(mz_restore(c, NULL) == MZ_OK);
    CHECK(memcmp(copy, c->kv.chunks[N_LAYER - 1][1], c->kv.chunk_bytes) == 0);
out:
    free(copy);
    mz_ctx_free(c);
}

/* A weight unit is a unit whatever its type: for each weight type and mix,
 * a model evicted whole (weights dropped, KV to storage) answers with the
 * same logits as a copy never evicted, restored on demand and by
 * mz_restore (the reload reads the block from the file, converts it to the
 * layout the kernels use, and checks its hash). */
static void test_weight_types(void)
{
    static const char *types[] = {"Q4_K_M", "Q5_K_M", "Q6_K", "Q3_K_M", "Q2_K", "Q5_0",
                                  "Q5_1", "IQ4_NL", "IQ4_XS", "Q4_0", "Q4_1", "BF16"};
    for (size_t i = 0; i < MZ_ARRAY_LEN(types); i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s", t_tmp_path("evict-types.gguf"));
        mz_model_t *m = NULL, *ref = NULL;
        mz_ctx_t *c = NULL, *r = NULL;
        CHECK_MSG(ev_gen_type(path, "tiny-llama", N_LAYER, 0, types[i]) == 0, "%s: %s", types[i], mz_last_error());
        if (ev_load_pair(path, &m, &ref) == 0 && (c = ev_ctx(m, "raw", MZ_KV_PLACE_STORAGE, N_CTX, "swap-evict")) &&
            (r = ev_ctx(ref, "raw", MZ_KV_PLACE_AUTO, N_CTX, "swap-evict-ref"))) {
            CHECK(mz_prefill(c, g_base, 300) == MZ_OK && mz_prefill(r, g_base, 300) == MZ_OK);
            for (int round = 0; round < 2; round++) {
                mz_evict_report rep;
                CHECK_MSG(mz_evict(c, SIZE_MAX, &rep) == MZ_OK && rep.n_weights_dropped == N_LAYER, "%s: evict",
                          types[i]);
                if (round == 1) CHECK_MSG(mz_restore(c, NULL) == MZ_OK && ev_all_resident(c), "%s", types[i]);
                char what[64];
                snprintf(what, sizeof what, "%s, %s", types[i], round ? "mz_restore" : "on demand");
                check_same_logits(c, r, g_follow, N_FOLLOW / 2, what);
                CHECK(mz_mem_is_valid(c->mem));
            }
        } else {
            CHECK_MSG(0, "%s: load or context failed", types[i]);
        }
        mz_ctx_free(c);
        mz_ctx_free(r);
        mz_model_free(m);
        mz_model_free(ref);
        unlink(path);
    }
}

int main(void)
{
    int setup = ev_pair_setup(T, "evict-tiny.gguf", N_LAYER, &g_m, &g_ref_m, &g_vocab, g_base, N_BASE, g_follow,
                              N_FOLLOW, 42);
    if (setup >= 0) return setup;
    CHECK((g_a = malloc(2 * (size_t)g_vocab * sizeof(float))) != NULL);
    if (!g_a) return t_done(T);
    g_b = g_a + g_vocab;

    test_matrix();
    test_partial_and_cycles();
    test_truncate_evicted();
    test_shared_weights();
    test_raw_fallback();
    test_weight_types();

    for (int l = 0; l < N_LAYER; l++)
        for (int k = 0; k < 3; k++) free(g_snap[l][k]);
    mz_model_free(g_m);
    mz_model_free(g_ref_m);
    free(g_a);
    return t_done(T);
}
