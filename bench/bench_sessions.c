/*
 * bench_sessions — switching between conversations (issue 16's workload):
 * K sessions of N tokens each on one model, round-robin Q-token questions,
 * under a memory budget that holds all, half or an eighth of the sessions'
 * KV (weights always fit). Time to first token of each switch for:
 *
 *   mzcache    one engine, K sessions; after every turn mz_engine_evict keeps
 *              the footprint (resident weights + resident and compressed KV)
 *              under the budget (idle sessions least recently used first);
 *              a switch restores its session through the pipelined restore
 *              (mz_restore_generate);
 *   recompute  what a one-conversation server does today: one context, and
 *              every switch prefills the new conversation's whole history;
 *   os-paging  K os-paging sessions (every session's KV in anonymous memory;
 *              the budget is kept the same way, by the mode's own eviction:
 *              MADV_PAGEOUT, restore by page faults);
 *   single     the reference for a switch: one session alone, its whole KV
 *              evicted (mz_evict) and restored by the next question, K * r
 *              times (-b is ignored).
 *
 * Tokens are random ids (the timing does not depend on them). TTFT = the
 * first token sampled (greedy) after the question; each turn is truncated
 * away again so every session stays at N tokens.
 *
 * usage: bench_sessions -m MODEL [-k 4] [-c 1024] [-q 8] [-t 2] [-r 2]
 *                       [-b all|half|eighth] [-M mzcache|recompute|os-paging|single]
 * Prints one line per switch and "median ttft_ms=... mode=... k=... n=...
 * budget=...".
 */
#define _POSIX_C_SOURCE 200809L
#include "mzcache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A switch is the question and its first token (TTFT). */
static const mz_generate_params g_one_token = {.max_tokens = 1};

static bool parse_long(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !end || *end || end == s || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void rand_tokens(mz_token *t, size_t n, int nv, unsigned long long seed)
{
    unsigned long long s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (mz_token)((s >> 33) % (unsigned long long)(nv - 10)) + 5;
    }
}

static size_t footprint(mz_engine_t *e)
{
    mz_mem_stats st;
    mz_engine_get_mem_stats(e, &st);
    return st.weights.resident_bytes + st.kv.resident_bytes + st.kv.compressed_bytes;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *budget_s = "half", *mode_s = "mzcache";
    long k = 4, n = 1024, q = 8, threads = 2, rounds = 2;
    bool ok = true;
    for (int i = 1; i + 1 < argc && ok; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "-m")) model = v;
        else if (!strcmp(a, "-k")) ok = parse_long(v, 1, 64, &k);
        else if (!strcmp(a, "-c")) ok = parse_long(v, 16, 1 << 17, &n);
        else if (!strcmp(a, "-q")) ok = parse_long(v, 1, 256, &q);
        else if (!strcmp(a, "-t")) ok = parse_long(v, 1, 256, &threads);
        else if (!strcmp(a, "-r")) ok = parse_long(v, 1, 100, &rounds);
        else if (!strcmp(a, "-b")) budget_s = v;
        else if (!strcmp(a, "-M")) mode_s = v;
        else ok = false;
    }
    double frac = !strcmp(budget_s, "all") ? 1.0 : !strcmp(budget_s, "half") ? 0.5
                  : !strcmp(budget_s, "eighth")                                ? 0.125
                                                                               : -1;
    mz_engine_mode mode = MZ_MODE_MZCACHE;
    const bool single = !strcmp(mode_s, "single");
    if (!ok || !model || frac < 0 || (!single && mz_engine_mode_parse(mode_s, &mode)) ||
        mode == MZ_MODE_PARTIAL_OFFLOAD) {
        fprintf(stderr, "usage: bench_sessions -m MODEL [-k 4] [-c 1024] [-q 8] [-t 2] [-r 2] "
                        "[-b all|half|eighth] [-M mzcache|recompute|os-paging|single]\n");
        return 2;
    }
    mz_model_t *m = NULL;
    if (mz_model_load(model, NULL, &m)) {
        fprintf(stderr, "load: %s\n", mz_last_error());
        return 1;
    }
    const int nv = mz_model_n_vocab(m);
    mz_token *hist = malloc((size_t)(k * n) * sizeof *hist), *qs = malloc((size_t)q * sizeof *qs);
    size_t n_sw = (size_t)(k * rounds);
    double *ttft = calloc(n_sw, sizeof *ttft);
    if (!hist || !qs || !ttft) return 1;
    for (long s = 0; s < k; s++) rand_tokens(hist + s * n, (size_t)n, nv, 100 + (unsigned long long)s);
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = (int)(n + q + 8);
    cp.n_threads = (int)threads;
    cp.kv_codec = "q8";
    cp.mode = mode == MZ_MODE_RECOMPUTE ? MZ_MODE_MZCACHE : mode;
    size_t sw = 0;
    int rc = 0;
    if (single) {
        /* One session: evict its KV, restore it with the next question. */
        mz_ctx_t *c = NULL;
        if (mz_ctx_init(m, &cp, &c) || mz_prefill(c, hist, (size_t)n)) return 1;
        for (sw = 0; sw < n_sw; sw++) {
            mz_mem_stats st;
            mz_get_mem_stats(c, &st);
            mz_evict_report er;
            if (mz_evict(c, st.kv.resident_bytes, &er)) return 1;
            rand_tokens(qs, (size_t)q, nv, 1000 + (unsigned long long)sw);
            mz_restore_timings tm;
            if (mz_restore_generate(c, qs, (size_t)q, NULL, NULL, &g_one_token, NULL, &tm) ||
                mz_ctx_truncate(c, (size_t)n))
                return 1;
            ttft[sw] = tm.ttft_ms;
            printf("restore %zu: ttft_ms=%.1f restore_ms=%.1f units=%zu (evicted %zu B)\n", sw,
                   tm.ttft_ms, tm.restore_ms, tm.n_units, er.bytes_freed);
        }
        mz_ctx_free(c);
    } else if (mode == MZ_MODE_RECOMPUTE) {
        /* One conversation at a time: every switch prefills the history. */
        mz_ctx_t *c = NULL;
        if (mz_ctx_init(m, &cp, &c)) return 1;
        for (long r = 0; r < rounds; r++) {
            for (long s = 0; s < k; s++, sw++) {
                rand_tokens(qs, (size_t)q, nv, 1000 + (unsigned long long)(r * k + s));
                if (mz_ctx_truncate(c, 0)) return 1;
                mz_token *all = malloc((size_t)(n + q) * sizeof *all);
                if (!all) return 1;
                memcpy(all, hist + s * n, (size_t)n * sizeof *all);
                memcpy(all + n, qs, (size_t)q * sizeof *all);
                mz_restore_timings tm;
                mz_status st = mz_restore_generate(c, all, (size_t)(n + q), NULL, NULL, &g_one_token,
                                                   NULL, &tm);
                free(all);
                if (st) {
                    fprintf(stderr, "switch: %s\n", mz_ctx_errmsg(c));
                    return 1;
                }
                ttft[sw] = tm.ttft_ms;
                printf("switch %zu session %ld: ttft_ms=%.1f (prefill of %ld tokens)\n", sw, s,
                       tm.ttft_ms, n + q);
            }
        }
        mz_ctx_free(c);
    } else {
        mz_engine_params ep = mz_engine_params_default();
        ep.n_threads = (int)threads;
        mz_engine_t *e = NULL;
        if (mz_engine_create(m, &ep, &e)) {
            fprintf(stderr, "engine: %s\n", mz_last_error());
            return 1;
        }
        mz_ctx_t **ss = calloc((size_t)k, sizeof *ss);
        if (!ss) return 1;
        for (long s = 0; s < k; s++) {
            if (mz_session_create(e, &cp, &ss[s]) || mz_prefill(ss[s], hist + s * n, (size_t)n)) {
                fprintf(stderr, "session %ld: %s\n", s, mz_last_error());
                return 1;
            }
        }
        mz_mem_stats st;
        mz_engine_get_mem_stats(e, &st);
        const size_t budget = st.weights.total_bytes + (size_t)(frac * (double)st.kv.total_bytes);
        printf("weights %zu B, kv %zu B over %ld sessions, budget %zu B (%s of the KV)\n",
               st.weights.total_bytes, st.kv.total_bytes, k, budget, budget_s);
        for (long r = 0; r < rounds; r++) {
            for (long s = 0; s < k; s++, sw++) {
                size_t fp = footprint(e);
                if (fp > budget) {
                    mz_evict_report er;
                    if (mz_engine_evict(e, fp - budget, &er)) {
                        fprintf(stderr, "evict: %s\n", mz_last_error());
                        return 1;
                    }
                }
                rand_tokens(qs, (size_t)q, nv, 1000 + (unsigned long long)(r * k + s));
                mz_restore_timings tm;
                if (mz_restore_generate(ss[s], qs, (size_t)q, NULL, NULL, &g_one_token, NULL, &tm)) {
                    fprintf(stderr, "switch: %s\n", mz_ctx_errmsg(ss[s]));
                    return 1;
                }
                if (mz_ctx_truncate(ss[s], (size_t)n)) return 1;
                ttft[sw] = tm.ttft_ms;
                printf("switch %zu session %ld: ttft_ms=%.1f restore_ms=%.1f units=%zu\n", sw, s,
                       tm.ttft_ms, tm.restore_ms, tm.n_units);
            }
        }
        mz_engine_free(e);
        free(ss);
    }
    /* The first round of mzcache/os-paging starts from everything resident
     * for the first sessions; the median is over every switch. */
    qsort(ttft, n_sw, sizeof *ttft, cmp_double);
    printf("median ttft_ms=%.1f mode=%s k=%ld n=%ld budget=%s switches=%zu\n", ttft[n_sw / 2],
           mode_s, k, n, budget_s, n_sw);
    free(ttft);
    free(hist);
    free(qs);
    mz_model_free(m);
    return rc;
}
