/*
 * test_ctx_sync.c — the library's one prefix sync (mz_ctx_common_prefix,
 * mz_ctx_keep_prefix, mz_ctx_sync), which the daemon, `mzcache chat` and
 * the demo use: after a sync the context holds exactly the asked tokens,
 * kept the longest common prefix (never the last token: it runs again),
 * and its logits are those of a fresh context prefilled with the same
 * tokens, bit for bit (the forward pass gives a token the same bits
 * whatever batch it is in), also when the kept prefix was evicted first.
 * On the real model (SmolLM2); skipped (77) without it.
 */
#include "mzcache.h"
#include "testutil.h"

static const char *T = "test_ctx_sync";

#define N_A 40

static mz_ctx_t *new_ctx(mz_model_t *m)
{
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    cp.swap_dir = t_tmp_path("ctx_sync_swap");
    cp.kv_codec = "raw"; /* lossless: a restored prefix gives the same bits */
    mz_ctx_t *c = NULL;
    if (mz_ctx_init(m, &cp, &c)) fprintf(stderr, "ctx: %s\n", mz_last_error());
    return c;
}

/* The logits of a fresh context prefilled with t[0, n), into out. */
static int reference_logits(mz_model_t *m, const mz_token *t, size_t n, float *out, int nv)
{
    mz_ctx_t *r = new_ctx(m);
    if (!r) return -1;
    int rc = -1;
    if (mz_prefill(r, t, n) == MZ_OK && mz_ctx_logits(r)) {
        memcpy(out, mz_ctx_logits(r), (size_t)nv * sizeof *out);
        rc = 0;
    }
    mz_ctx_free(r);
    return rc;
}

/* c holds exactly t[0, n) and its logits are want's. */
static void check_state(mz_ctx_t *c, const mz_token *t, size_t n, const float *want, int nv,
                        const char *what)
{
    CHECK_MSG(mz_ctx_n_tokens(c) == n, "%s: %zu tokens, want %zu", what, mz_ctx_n_tokens(c), n);
    CHECK_MSG(mz_ctx_common_prefix(c, t, n) == n, "%s: tokens differ", what);
    const float *got = mz_ctx_logits(c);
    CHECK_MSG(got != NULL, "%s: no logits", what);
    if (got) CHECK_MSG(memcmp(got, want, (size_t)nv * sizeof *got) == 0, "%s: logits differ", what);
}

int main(void)
{
    const char *path = t_real_model_path();
    if (!path) return t_skip(T, "the real model is not in models/");
    mz_model_t *m = NULL;
    mz_model_params mp = mz_model_params_default();
    if (mz_model_load(path, &mp, &m)) return t_skip(T, mz_last_error());
    const int nv = mz_model_n_vocab(m);
    float *want = malloc((size_t)nv * sizeof *want);
    mz_ctx_t *c = new_ctx(m);
    CHECK(want && c);
    if (!want || !c) goto out;

    mz_token a[N_A], b[N_A + 2];
    for (int i = 0; i < N_A; i++) a[i] = (mz_token)(100 + 37 * i % 900);
    CHECK(mz_prefill(c, a, N_A) == MZ_OK);
    CHECK_EQ_INT(mz_ctx_common_prefix(c, a, N_A), N_A);
    CHECK_EQ_INT(mz_ctx_common_prefix(c, a, 5), 5);

    /* A branch: the first 25 tokens shared, then two others. */
    memcpy(b, a, 25 * sizeof *b);
    b[25] = 7;
    b[26] = 8;
    CHECK_EQ_INT(mz_ctx_common_prefix(c, b, 27), 25);
    size_t kept = 999;
    CHECK(reference_logits(m, b, 27, want, nv) == 0);
    CHECK(mz_ctx_sync(c, b, 27, NULL, NULL, &kept) == MZ_OK);
    CHECK_EQ_INT(kept, 25);
    check_state(c, b, 27, want, nv, "branch");

    /* The same tokens again: the last one runs again (fresh logits). */
    CHECK(mz_ctx_sync(c, b, 27, NULL, NULL, &kept) == MZ_OK);
    CHECK_EQ_INT(kept, 26);
    check_state(c, b, 27, want, nv, "same tokens");

    /* A shorter prefix of what the context holds. */
    CHECK(reference_logits(m, b, 10, want, nv) == 0);
    CHECK(mz_ctx_sync(c, b, 10, NULL, NULL, &kept) == MZ_OK);
    CHECK_EQ_INT(kept, 9);
    check_state(c, b, 10, want, nv, "shorter");

    /* Nothing in common: everything is computed again. */
    mz_token other[3] = {11, 12, 13};
    CHECK(mz_ctx_keep_prefix(c, other, 3, &kept) == MZ_OK);
    CHECK_EQ_INT(kept, 0);
    CHECK_EQ_INT(mz_ctx_n_tokens(c), 0);

    /* After an eviction of everything the kept prefix is restored. */
    CHECK(mz_prefill(c, a, N_A) == MZ_OK);
    CHECK(mz_evict(c, SIZE_MAX, NULL) == MZ_OK);
    memcpy(b, a, N_A * sizeof *b);
    b[N_A] = 5;
    b[N_A + 1] = 6;
    CHECK(reference_logits(m, b, N_A + 2, want, nv) == 0);
    mz_restore_timings tm;
    CHECK(mz_ctx_sync(c, b, N_A + 2, NULL, &tm, &kept) == MZ_OK);
    CHECK_EQ_INT(kept, N_A);
    check_state(c, b, N_A + 2, want, nv, "after eviction");

    /* No tokens: refused, the context unchanged. */
    CHECK(mz_ctx_keep_prefix(c, b, 0, &kept) == MZ_E_INVAL);
    CHECK(mz_ctx_sync(c, b, 0, NULL, NULL, NULL) == MZ_E_INVAL);
    CHECK_EQ_INT(mz_ctx_n_tokens(c), N_A + 2);
out:
    mz_ctx_free(c);
    free(want);
    mz_model_free(m);
    return t_done(T);
}
