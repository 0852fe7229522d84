/*
 * test_restore_generate.c — the pipelined restore (mz_prefill_restore /
 * mz_restore_generate) against a blocking restore followed by a prefill.
 *
 * On a generated tiny model (4 layers, 3 KV chunks a layer; vocab from the
 * real model, skipped with 77 without it), for the raw and q8 codecs, the
 * eviction orders, remaining memory 100/75/50/25/0 % and every overlap mode
 * (the paper's Fig. 11a ablation), two contexts on two loads of the model
 * with the same history are evicted by the same amount (every level for
 * backward-out; 50 % and 0 % for forward-out and random-out, q8 only); one
 * restores with mz_restore and prefills, the other runs mz_prefill_restore (with random
 * worker delays every other case, to shake orderings under TSan). Their
 * logits must be bit-identical, and every unit resident afterwards.
 *
 * Faults: EIO from the middle of the storage reads fails the request with
 * an error naming a unit beyond layer 0, leaves that unit evicted and the
 * context at its old length, and a retry gives the right answer.
 *
 * Order: on the real model (SmolLM2), 50 % evicted backward-out, the forward
 * pass gets past layer 0 before the restore workers have finished (asserted
 * on the order of two timestamps, not on durations).
 */
#include "evict_util.h"
#include "io/io.h"

#include <errno.h>

#define N_LAYER 4
#define N_CTX 1024
#define N_BASE 520 /* 3 chunks per layer */
#define N_FOLLOW 8

static const char *T = "test_restore_generate";
static mz_model_t *g_m, *g_ref_m;
static int g_vocab;
static mz_token g_base[N_BASE], g_follow[N_FOLLOW];
static float *g_a, *g_b; /* two logits rows (g_vocab each, one allocation), every test's scratch */

static mz_ctx_t *ctx_on(mz_model_t *m, const char *codec, mz_evict_order order, const char *swap)
{
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = N_CTX;
    cp.n_threads = 2;
    cp.kv_codec = codec;
    cp.swap_dir = t_tmp_path(swap);
    const mz_ctx_experimental xp = {.evict_order = order, .evict_seed = 3};
    cp.experimental = &xp;
    mz_ctx_t *c = NULL;
    if (mz_ctx_init(m, &cp, &c)) {
        fprintf(stderr, "ctx: %s\n", mz_last_error());
        return NULL;
    }
    if (mz_prefill(c, g_base, N_BASE)) {
        fprintf(stderr, "prefill: %s\n", mz_ctx_errmsg(c));
        mz_ctx_free(c);
        return NULL;
    }
    return c;
}

static const char *mode_name(mz_restore_overlap o)
{
    static const char *const n[] = {"all", "none", "alloc||reload", "reload||prefill"};
    return n[o];
}

/* full: every remaining level; else 50 % and 0 % only (the other orders,
 * to keep the test short under the sanitizers). */
static void run_grid(const char *codec, mz_evict_order order, bool full)
{
    float *a = g_a, *b = g_b;
    mz_ctx_t *ref = ctx_on(g_ref_m, codec, order, "swap-rg-ref");
    mz_ctx_t *c = ctx_on(g_m, codec, order, "swap-rg");
    CHECK(ref && c);
    if (!ref || !c) goto out;
    size_t total = ev_evictable_total(c);
    const int remaining[] = {100, 75, 50, 25, 0};
    unsigned k = 0;
    for (size_t r = 0; r < MZ_ARRAY_LEN(remaining); r++) {
        if (!full && remaining[r] != 50 && remaining[r] != 0) continue;
        for (int mode = 0; mode < 4; mode++, k++) {
            size_t amount = (size_t)((double)total * (100 - remaining[r]) / 100.0);
            CHECK(mz_ctx_truncate(ref, N_BASE) == MZ_OK && mz_ctx_truncate(c, N_BASE) == MZ_OK);
            mz_evict_report er1, er2;
            CHECK(mz_evict(ref, amount, &er1) == MZ_OK);
            CHECK(mz_evict(c, amount, &er2) == MZ_OK);
            CHECK(er1.bytes_freed == er2.bytes_freed);
            CHECK(mz_restore(ref, NULL) == MZ_OK);
            CHECK(ev_prefill_logits(ref, g_follow, N_FOLLOW, b, g_vocab) == MZ_OK);

            mz_restore_experimental rx = {.overlap = (mz_restore_overlap)mode,
                                          .debug_delay_us = k % 2 ? 300 : 0, .seed = (uint64_t)k};
            mz_restore_params rp = mz_restore_params_default();
            rp.experimental = &rx;
            mz_restore_timings tm;
            mz_status s = mz_prefill_restore(c, g_follow, N_FOLLOW, &rp, &tm);
            CHECK_MSG(s == MZ_OK, "%s", mz_ctx_errmsg(c));
            if (s == MZ_OK) memcpy(a, mz_ctx_logits(c), (size_t)g_vocab * sizeof(float));
            CHECK_MSG(s == MZ_OK && memcmp(a, b, (size_t)g_vocab * sizeof(float)) == 0,
                      "%s, order %s, %d%% remaining, overlap %s: logits differ", codec,
                      mz_evict_order_name(order), remaining[r], mode_name(rx.overlap));
            CHECK(ev_all_resident(c));
            CHECK(mz_mem_is_valid(c->mem));
            CHECK(remaining[r] < 100 || tm.n_units == 0);
            CHECK(tm.ttft_ms >= tm.prefill_ms && tm.prefill_ms >= 0);
            /* The memory path may have gone on after the call (tm.restore_ms
             * 0 then): the last timings are complete. */
            mz_restore_timings last;
            mz_get_last_restore_timings(c, &last);
            CHECK(last.n_units == tm.n_units && last.ttft_ms == tm.ttft_ms);
            CHECK(last.n_ready == last.n_units);
            CHECK(tm.restore_ms > 0 || tm.n_ready < tm.n_units || tm.n_units == 0);
        }
    }
out:
    mz_ctx_free(c);
    mz_ctx_free(ref);
}

/* restore_generate: the same greedy tokens as mz_restore + prefill + argmax. */
static mz_gen_action cb_collect(void *user, mz_token t, const float *logits, int n_vocab)
{
    (void)logits;
    (void)n_vocab;
    mz_token *out = user;
    size_t i = 0;
    while (out[i] >= 0) i++;
    out[i] = t;
    return MZ_GEN_CONTINUE;
}

static void test_generate(void)
{
    mz_ctx_t *ref = ctx_on(g_ref_m, "q8", MZ_EVICT_BACKWARD, "swap-rg-ref");
    mz_ctx_t *c = ctx_on(g_m, "q8", MZ_EVICT_BACKWARD, "swap-rg");
    CHECK(ref && c);
    if (!ref || !c) goto out;
    size_t total = ev_evictable_total(c);
    CHECK(mz_evict(ref, total / 2, NULL) == MZ_OK && mz_evict(c, total / 2, NULL) == MZ_OK);
    CHECK(mz_restore(ref, NULL) == MZ_OK);
    enum { N_GEN = 5 };
    mz_token want[N_GEN], got[N_GEN + 1];
    for (int i = 0; i <= N_GEN; i++) got[i] = -1;
    CHECK(mz_prefill(ref, g_follow, N_FOLLOW) == MZ_OK);
    size_t n_want = 0;
    for (; n_want < N_GEN; n_want++) {
        mz_token t = ev_argmax(mz_ctx_logits(ref), g_vocab);
        if (mz_token_is_eog(g_ref_m, t)) {
            CHECK(mz_prefill(ref, &t, 1) == MZ_OK); /* the end of generation joins the context */
            break;
        }
        want[n_want] = t;
        CHECK(mz_prefill(ref, &t, 1) == MZ_OK);
    }
    mz_restore_timings tm;
    mz_generate_params gp = mz_generate_params_default();
    gp.max_tokens = N_GEN;
    gp.on_token = cb_collect;
    gp.user = got;
    mz_generate_result gr;
    CHECK(mz_restore_generate(c, g_follow, N_FOLLOW, NULL, NULL, &gp, &gr, &tm) == MZ_OK);
    size_t n_got = gr.n_tokens;
    CHECK_EQ_INT(n_got, n_want);
    CHECK(memcmp(got, want, n_want * sizeof *want) == 0);
    CHECK_EQ_INT(gr.finish, n_want < N_GEN ? MZ_FINISH_EOG : MZ_FINISH_LENGTH);
    CHECK_EQ_INT(mz_ctx_n_tokens(c), mz_ctx_n_tokens(ref));
    CHECK(tm.ttft_ms >= tm.prefill_ms && tm.n_units > 0 && tm.n_ready == tm.n_units);
out:
    mz_ctx_free(c);
    mz_ctx_free(ref);
}

static const char *unit_layer(const char *msg, int *layer)
{
    const char *p = strstr(msg, "cannot restore ");
    if (!p) return NULL;
    const char *q = strstr(p, "layer ");
    if (!q || sscanf(q, "layer %d", layer) != 1) return NULL;
    return p;
}

static void test_faults(void)
{
    float *b = g_b;
    mz_ctx_t *ref = ctx_on(g_ref_m, "raw", MZ_EVICT_BACKWARD, "swap-rg-ref");
    CHECK(ref && ev_prefill_logits(ref, g_follow, N_FOLLOW, b, g_vocab) == MZ_OK);
    const mz_kv_placement pls[] = {MZ_KV_PLACE_STORAGE, MZ_KV_PLACE_STORAGE_COMPRESSED};
    for (size_t p = 0; p < MZ_ARRAY_LEN(pls); p++) {
        /* every mode on raw storage, each on one restore thread (the reads in
         * forward order: the failing unit is the middle one) and on the
         * default split (on two or three threads a restore with nothing in
         * memory reads on two storage lanes, so the failing read may be any
         * unit in flight) */
        for (int mode = 0; mode < (p ? 2 : 8); mode++) {
            const bool one_lane = mode % 2 == 0;
            mz_ctx_t *c = ev_ctx(g_m, "raw", pls[p], N_CTX, "swap-rg");
            CHECK(c && mz_prefill(c, g_base, N_BASE) == MZ_OK);
            if (!c) continue;
            mz_restore_experimental rx = mz_restore_experimental_default();
            rx.overlap = (mz_restore_overlap)(mode / 2);
            mz_restore_params rp = mz_restore_params_default();
            rp.experimental = &rx;
            if (one_lane) rp.n_restore_threads = 1;
            /* Count the storage reads of a full restore (nothing fires). */
            CHECK(mz_evict(c, SIZE_MAX, NULL) == MZ_OK);
            mz_io_fault never = {.op = MZ_IO_READ, .kind = MZ_IO_FAULT_ERRNO, .err = EIO,
                                 .nth = UINT32_MAX, .count = 1};
            mz_io_fault_set(&never);
            CHECK(mz_prefill_restore(c, g_follow, N_FOLLOW, &rp, NULL) == MZ_OK);
            unsigned n_reads = mz_io_fault_calls(MZ_IO_READ);
            mz_io_fault_set(NULL);
            CHECK(n_reads >= 8);
            /* Fail every read from the middle on. */
            CHECK(mz_ctx_truncate(c, N_BASE) == MZ_OK);
            CHECK(mz_evict(c, SIZE_MAX, NULL) == MZ_OK);
            mz_io_fault f = {.op = MZ_IO_READ, .kind = MZ_IO_FAULT_ERRNO, .err = EIO,
                             .nth = n_reads / 2 + 1, .count = UINT32_MAX};
            mz_io_fault_set(&f);
            mz_status s = mz_prefill_restore(c, g_follow, N_FOLLOW, &rp, NULL);
            mz_io_fault_set(NULL);
            int layer = -1;
            CHECK_MSG(s == MZ_E_IO, "mode %s: %d %s", mode_name(rx.overlap), s, mz_ctx_errmsg(c));
            CHECK_MSG(unit_layer(mz_ctx_errmsg(c), &layer) && (layer > 0 || !one_lane), "%s",
                      mz_ctx_errmsg(c));
            CHECK(mz_ctx_n_tokens(c) == N_BASE && mz_ctx_logits(c) == NULL);
            CHECK(mz_mem_is_valid(c->mem));
            CHECK(mz_mem_weights_state(c->mem, N_LAYER - 1) == MZ_UNIT_DROPPED);
            mz_mem_stats st;
            mz_get_mem_stats(c, &st);
            CHECK(st.remaining_pct < 100.0);
            /* Retry without the fault. */
            CHECK(mz_prefill_restore(c, g_follow, N_FOLLOW, &rp, NULL) == MZ_OK);
            CHECK(memcmp(mz_ctx_logits(c), b, (size_t)g_vocab * sizeof(float)) == 0);
            CHECK(ev_all_resident(c));
            mz_ctx_free(c);
        }
    }
    mz_ctx_free(ref);
}

/* The forward pass starts before the restore has finished (real model). */
/* Lending: with the memory path slowed down (each worker step sleeps up to
 * 100 ms), the first forward step reads the chunks it would wait for from
 * their compressed copies, and the logits are still bit-identical to the
 * blocking restore's. The memory path then goes on after the call: the next
 * step (a generated token) waits per unit as during a request, an eviction
 * waits for the job first, and the state stays consistent throughout.
 * lend_kv = -1 lends nothing and gives the same bits. */
static void test_lend_codec(const char *codec, bool whole)
{
    float *a = g_a, *b = g_b;
    mz_ctx_t *ref = ctx_on(g_ref_m, codec, MZ_EVICT_BACKWARD, "swap-rg-ref");
    mz_ctx_t *c = ctx_on(g_m, codec, MZ_EVICT_BACKWARD, "swap-rg");
    CHECK(ref && c);
    if (!ref || !c) goto out;
    const size_t total = ev_evictable_total(c);
    for (int lend = 1; lend >= -1; lend -= 2) {
        CHECK(mz_ctx_truncate(ref, N_BASE) == MZ_OK && mz_ctx_truncate(c, N_BASE) == MZ_OK);
        /* KV only: a layer's dropped weights would be waited for before its
         * chunks, and the memory path would be done by then. */
        CHECK(mz_mem_evict_ex(ref->mem, total / 3, false, NULL) == MZ_OK &&
              mz_mem_evict_ex(c->mem, total / 3, false, NULL) == MZ_OK);
        mz_mem_stats ms;
        mz_get_mem_stats(c, &ms);
        CHECK(ms.kv.compressed_bytes > 0); /* something for the memory path */
        CHECK(mz_restore(ref, NULL) == MZ_OK);
        CHECK(ev_prefill_logits(ref, g_follow, N_FOLLOW, b, g_vocab) == MZ_OK);
        mz_restore_experimental rx = mz_restore_experimental_default();
        rx.lend_kv = lend;
        rx.lend_whole = whole;
        rx.debug_delay_us = 100000;
        rx.seed = 7;
        mz_restore_params rp = mz_restore_params_default();
        rp.experimental = &rx;
        rp.n_restore_threads = 2;
        mz_restore_timings tm;
        mz_status s = mz_prefill_restore(c, g_follow, N_FOLLOW, &rp, &tm);
        CHECK_MSG(s == MZ_OK, "%s", mz_ctx_errmsg(c));
        CHECK_MSG(s == MZ_OK && memcmp(mz_ctx_logits(c), b, (size_t)g_vocab * sizeof(float)) == 0,
                  "%s, lend_kv %d: logits differ from the blocking restore's", codec, lend);
        CHECK_MSG(lend > 0 ? tm.n_lent > 0 : tm.n_lent == 0, "%s, lend_kv %d: %zu chunks lent", codec, lend,
                  tm.n_lent);
        /* One more token on both, the restore possibly still going on. */
        mz_token t = ev_argmax(b, g_vocab);
        CHECK(ev_prefill_logits(ref, &t, 1, b, g_vocab) == MZ_OK);
        CHECK(ev_prefill_logits(c, &t, 1, a, g_vocab) == MZ_OK);
        CHECK_MSG(memcmp(a, b, (size_t)g_vocab * sizeof(float)) == 0, "%s, lend_kv %d: next token differs", codec,
                  lend);
        CHECK(mz_evict(c, total / 4, NULL) == MZ_OK); /* waits for the job first */
        CHECK(mz_mem_is_valid(c->mem));
        mz_restore_timings last;
        mz_get_last_restore_timings(c, &last);
        CHECK(last.n_ready == last.n_units && last.n_units > 0 && last.restore_ms > 0);
        CHECK(mz_restore(c, NULL) == MZ_OK && ev_all_resident(c));
    }
out:
    mz_ctx_free(c);
    mz_ctx_free(ref);
}

/* Attention reads q4r's lent chunks a tile's rows at a time from their
 * compressed copies (its rows of 16 are the model's head rows), or
 * (lend_whole) after decoding each whole into the step's buffer, as it
 * does q8's (groups of 64 straddle its head rows of 16). */
static void test_lend(void)
{
    test_lend_codec("q4r", false);
    test_lend_codec("q4r", true);
    test_lend_codec("q8", false);
}

/* A restore that fails after the request returned: the chunks in the
 * compressed stack (forward order from its top), the decoding lanes fail on
 * the item of layer 3, chunk 1, which the pass itself decoded fine (lent),
 * so the request succeeds and the job goes on; the chunk the request wrote
 * its tokens into (layer 3, chunk 2, the item below the failed one) then
 * goes back to its item, which lacks them. Nothing is
 * silently wrong: the next pass is refused with MZ_E_CORRUPT naming the
 * position, and after a truncation to it the same tokens give the blocking
 * restore's logits again. (Were the failure seen during the pass, the
 * request would fail instead and leave the context as it was: checked too.) */
static void test_lend_failure(void)
{
    float *a = g_a, *b = g_b;
    mz_ctx_t *ref = ev_ctx(g_ref_m, "q8", MZ_KV_PLACE_COMPRESSED, N_CTX, "swap-rg-ref");
    mz_ctx_t *c = ev_ctx(g_m, "q8", MZ_KV_PLACE_COMPRESSED, N_CTX, "swap-rg");
    CHECK(ref && c);
    if (!ref || !c) goto out;
    CHECK(mz_prefill(ref, g_base, N_BASE) == MZ_OK && mz_prefill(c, g_base, N_BASE) == MZ_OK);
    mz_mem_stats ms;
    mz_get_mem_stats(c, &ms);
    /* What q8 frees from all of it (about 47 %): more would move items on to storage. */
    const size_t ask = ms.kv.total_bytes / 100 * 40;
    CHECK(mz_mem_evict_ex(ref->mem, ask, false, NULL) == MZ_OK && mz_mem_evict_ex(c->mem, ask, false, NULL) == MZ_OK);
    /* Backward-out: the last layer's chunks went first, so they are the
     * stack's bottom items, the rest above them in forward order. */
    size_t n_items = 0;
    for (int l = 0; l < N_LAYER; l++)
        for (size_t ch = 0; ch < 3; ch++) n_items += mz_mem_kv_state(c->mem, l, ch) == MZ_UNIT_COMPRESSED;
    CHECK(n_items >= 6 && mz_mem_kv_state(c->mem, N_LAYER - 1, 1) == MZ_UNIT_COMPRESSED &&
          mz_mem_kv_state(c->mem, N_LAYER - 1, 2) == MZ_UNIT_COMPRESSED);
    CHECK(mz_restore(ref, NULL) == MZ_OK);
    CHECK(ev_prefill_logits(ref, g_follow, N_FOLLOW, b, g_vocab) == MZ_OK);
    mz_restore_experimental rx = mz_restore_experimental_default();
    rx.lend_kv = 1;
    rx.debug_delay_us = 100000;
    rx.seed = 7;
    rx.debug_fail_mem_item = n_items - 1; /* 1-based from the top: layer 3, chunk 1 */
    mz_restore_params rp = mz_restore_params_default();
    rp.experimental = &rx;
    rp.n_restore_threads = 2;
    mz_restore_timings tm;
    mz_status s = mz_prefill_restore(c, g_follow, N_FOLLOW, &rp, &tm);
    if (s == MZ_OK) {
        CHECK(memcmp(mz_ctx_logits(c), b, (size_t)g_vocab * sizeof(float)) == 0);
        CHECK_EQ_INT(mz_ctx_n_tokens(c), N_BASE + N_FOLLOW);
        mz_restore_timings last;
        mz_get_last_restore_timings(c, &last); /* waits for the job: it failed */
        CHECK(last.n_ready < last.n_units);
        mz_token t = ev_argmax(b, g_vocab);
        s = mz_prefill(c, &t, 1);
        CHECK_EQ_INT(s, MZ_E_CORRUPT);
        char want[32];
        snprintf(want, sizeof want, "back to %d tokens", N_BASE);
        CHECK_MSG(strstr(mz_ctx_errmsg(c), want) != NULL, "%s", mz_ctx_errmsg(c));
        CHECK_EQ_INT(mz_ctx_n_tokens(c), N_BASE + N_FOLLOW); /* the refused pass changed nothing */
        CHECK(mz_ctx_truncate(c, N_BASE) == MZ_OK);
    } else {
        fprintf(stderr, "%s: the failure came during the pass: %s\n", T, mz_ctx_errmsg(c));
        CHECK_EQ_INT(mz_ctx_n_tokens(c), N_BASE);
    }
    CHECK(mz_mem_is_valid(c->mem));
    CHECK(ev_prefill_logits(c, g_follow, N_FOLLOW, a, g_vocab) == MZ_OK);
    CHECK_MSG(memcmp(a, b, (size_t)g_vocab * sizeof(float)) == 0, "after the cut: logits differ");
    CHECK(mz_restore(c, NULL) == MZ_OK && ev_all_resident(c) && mz_mem_is_valid(c->mem));
out:
    mz_ctx_free(c);
    mz_ctx_free(ref);
}

static void test_order(void)
{
    const char *path = t_real_model_path();
    mz_model_t *m = ev_load(path);
    CHECK(m != NULL);
    if (!m) return;
    mz_ctx_t *c = ev_ctx(m, "q8", MZ_KV_PLACE_AUTO, 512, "swap-rg-order");
    enum { N_P = 64 };
    mz_token toks[N_P + 8];
    ev_tokens(toks, N_P + 8, mz_model_n_vocab(m), 21);
    CHECK(c && mz_prefill(c, toks, N_P) == MZ_OK);
    if (c) {
        CHECK(mz_evict(c, ev_evictable_total(c) / 2, NULL) == MZ_OK);
        CHECK(mz_mem_weights_state(c->mem, 0) == MZ_UNIT_RESIDENT);
        mz_restore_experimental rx = mz_restore_experimental_default();
        rx.debug_delay_us = 2000; /* each worker step: 0..2 ms */
        mz_restore_params rp = mz_restore_params_default();
        rp.experimental = &rx;
        mz_restore_timings tm;
        CHECK(mz_prefill_restore(c, toks + N_P, 8, &rp, &tm) == MZ_OK);
        double first = 0, ready = 0;
        mz_mem_restore_order_probe(c->mem, &first, &ready);
        CHECK_MSG(first > 0 && first < ready, "layer 0 passed at %.3f, restore done at %.3f",
                  first, ready);
        CHECK(tm.n_units > 10 && tm.n_ready == tm.n_units);
        CHECK(ev_all_resident(c));
        /* No overlap: compute waits for everything. */
        CHECK(mz_ctx_truncate(c, N_P) == MZ_OK);
        CHECK(mz_evict(c, ev_evictable_total(c) / 2, NULL) == MZ_OK);
        rx.overlap = MZ_OVERLAP_NONE;
        CHECK(mz_prefill_restore(c, toks + N_P, 8, &rp, &tm) == MZ_OK);
        mz_mem_restore_order_probe(c->mem, &first, &ready);
        CHECK_MSG(first >= ready, "no overlap: layer 0 at %.3f, restore done at %.3f", first,
                  ready);
    }
    mz_ctx_free(c);
    mz_model_free(m);
}

int main(void)
{
    int setup = ev_pair_setup(T, "rg-tiny.gguf", N_LAYER, &g_m, &g_ref_m, &g_vocab, g_base, N_BASE, g_follow,
                              N_FOLLOW, 11);
    if (setup >= 0) return setup;
    CHECK((g_a = malloc(2 * (size_t)g_vocab * sizeof(float))) != NULL);
    if (!g_a) return t_done(T);
    g_b = g_a + g_vocab;

    const mz_evict_order orders[] = {MZ_EVICT_BACKWARD, MZ_EVICT_FORWARD, MZ_EVICT_RANDOM};
    for (int k = 0; k < 2; k++)
        for (size_t o = 0; o < MZ_ARRAY_LEN(orders); o++)
            if (k || orders[o] == MZ_EVICT_BACKWARD) /* raw: backward-out only */
                run_grid(k ? "q8" : "raw", orders[o], orders[o] == MZ_EVICT_BACKWARD);
    test_generate();
    test_lend();
    test_lend_failure();
    test_faults();
    mz_model_free(g_m);
    mz_model_free(g_ref_m);
    test_order();
    free(g_a);
    return t_done(T);
}
