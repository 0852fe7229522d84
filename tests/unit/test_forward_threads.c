/*
 * The forward pass gives bit-identical logits whatever the thread count, the
 * prefill batch size, or how the tokens are split across calls — every
 * output element is computed by the same arithmetic in the same order, only
 * by a different thread. This is what lets a chat prefill only the new
 * tokens of a turn, and it is the property the restore pipeline relies on.
 * Run under TSan by `make test-tsan` (label "concurrency").
 */
#include "mzcache.h"
#include "testutil.h"

#include <unistd.h>

#define N_TOK 300 /* crosses a 256-token KV chunk boundary */

static float *run(mz_model_t *m, const mz_token *toks, int n_threads, int n_batch,
                  const size_t *splits, size_t n_splits)
{
    mz_ctx_params p = mz_ctx_params_default();
    p.n_ctx = 512;
    p.n_threads = n_threads;
    p.n_batch = n_batch;
    mz_ctx_t *c = NULL;
    if (mz_ctx_init(m, &p, &c)) return NULL;
    size_t done = 0;
    for (size_t i = 0; i <= n_splits; i++) {
        size_t end = i < n_splits ? splits[i] : N_TOK;
        if (mz_prefill(c, toks + done, end - done)) {
            fprintf(stderr, "prefill: %s\n", mz_ctx_errmsg(c));
            mz_ctx_free(c);
            return NULL;
        }
        done = end;
    }
    int nv = mz_model_n_vocab(m);
    float *out = malloc((size_t)nv * sizeof *out);
    memcpy(out, mz_ctx_logits(c), (size_t)nv * sizeof *out);
    mz_ctx_free(c);
    return out;
}

static bool one_type(const char *type, int n_ff);

int main(void)
{
    if (!t_real_model_path()) return t_skip("test_forward_threads", "no models/SmolLM2 (run make model)");
    /* Q8_0 (x8 kernels) and F16 (F16 tiles): the work split (work_split.h)
     * cuts rows and tokens differently for every thread count. F16 again with
     * an FFN of 3200: the down product's rows are longer than one F16 panel
     * (gemm_x86.h, F16GX_MAX_N), so prefill carries accumulators across
     * column panels while decode does not. */
    const struct { const char *type; int n_ff; } cases[] = {{"Q8_0", 0}, {"F16", 0}, {"F16", 3200}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!one_type(cases[i].type, cases[i].n_ff)) break;
    return t_done("test_forward_threads");
}

static bool one_type(const char *type, int n_ff)
{
    const char *path = t_tmp_path("threads-tiny-qwen3.gguf");
    mz_gen_params gp = mz_gen_params_default();
    gp.preset = "tiny-qwen3";
    gp.weight_type = type;
    gp.n_ff = n_ff;
    gp.vocab_from = t_real_model_path();
    CHECK_MSG(mz_gen_model(path, &gp) == MZ_OK, "gen-model: %s", mz_last_error());
    mz_model_t *m = NULL;
    CHECK_MSG(mz_model_load(path, NULL, &m) == MZ_OK, "load: %s", mz_last_error());
    if (!m) return false;
    int nv = mz_model_n_vocab(m);

    mz_token toks[N_TOK];
    unsigned long long rng = 99;
    for (int i = 0; i < N_TOK; i++) toks[i] = (mz_token)(t_rand_u64(&rng) % (unsigned)nv);

    float *ref = run(m, toks, 1, 64, NULL, 0);
    CHECK(ref != NULL);
    struct { int threads, batch; size_t splits[3]; size_t n_splits; } cases[] = {
        {2, 64, {0}, 0},  {3, 64, {0}, 0},          {2, 1, {0}, 0},  {2, 7, {0}, 0},
        {2, 300, {0}, 0}, {2, 64, {100, 256, 257}, 3}, {1, 16, {1, 2, 299}, 3},
        {5, 64, {0}, 0},  {7, 300, {0}, 0},         {16, 300, {0}, 0}, {7, 1, {0}, 0},
    };
    for (size_t i = 0; ref && i < sizeof cases / sizeof cases[0]; i++) {
        float *got = run(m, toks, cases[i].threads, cases[i].batch, cases[i].splits, cases[i].n_splits);
        CHECK_MSG(got && !memcmp(got, ref, (size_t)nv * sizeof *got),
                  "%s ff %d threads %d batch %d splits %zu: logits differ", type, n_ff, cases[i].threads,
                  cases[i].batch, cases[i].n_splits);
        free(got);
    }

    /* truncate and redo: same logits as a fresh run */
    {
        mz_ctx_params p = mz_ctx_params_default();
        p.n_ctx = 512;
        p.n_threads = 2;
        mz_ctx_t *c = NULL;
        CHECK(mz_ctx_init(m, &p, &c) == MZ_OK);
        mz_token junk[40];
        for (int i = 0; i < 40; i++) junk[i] = (mz_token)((i * 7919) % nv);
        CHECK(mz_prefill(c, toks, 280) == MZ_OK);
        CHECK(mz_prefill(c, junk, 40) == MZ_OK);
        CHECK(mz_ctx_truncate(c, 280) == MZ_OK);
        CHECK(mz_ctx_logits(c) == NULL);
        CHECK(mz_prefill(c, toks + 280, N_TOK - 280) == MZ_OK);
        CHECK(ref && mz_ctx_logits(c) && !memcmp(mz_ctx_logits(c), ref, (size_t)nv * sizeof(float)));
        /* errors leave the context as it was */
        mz_token bad = nv + 5;
        size_t before = mz_ctx_n_tokens(c);
        CHECK(mz_prefill(c, &bad, 1) == MZ_E_INVAL);
        CHECK(strstr(mz_ctx_errmsg(c), "outside the vocabulary") != NULL);
        CHECK_EQ_INT(mz_ctx_n_tokens(c), before);
        CHECK(mz_ctx_truncate(c, before + 1) == MZ_E_RANGE);
        mz_ctx_free(c);
    }
    /* a context that is full says so and keeps its tokens */
    {
        mz_ctx_params p = mz_ctx_params_default();
        p.n_ctx = 256;
        mz_ctx_t *c = NULL;
        CHECK(mz_ctx_init(m, &p, &c) == MZ_OK);
        CHECK(mz_prefill(c, toks, 250) == MZ_OK);
        CHECK(mz_prefill(c, toks, 10) == MZ_E_CONTEXT_FULL);
        CHECK_EQ_INT(mz_ctx_n_tokens(c), 250);
        CHECK(mz_prefill(c, toks, 6) == MZ_OK);
        mz_ctx_free(c);
    }
    free(ref);
    mz_model_free(m);
    unlink(path);
    return true;
}
