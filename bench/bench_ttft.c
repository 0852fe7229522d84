/*
 * bench_ttft — time to first token of a short query over a long cached
 * context, in memory (no eviction): the paper's workload, isolated.
 *
 * The context is SYNTHETIC: instead of prefilling N tokens (minutes to hours
 * on two cores), the KV chunks of positions [0, N) are filled straight by the
 * calibrated fill (src/harness/kv_fill.h) and the context is told it holds
 * N tokens. Attention cost does not depend on the values, so the query's
 * timing is that of a real context of the same length; its output is
 * meaningless. bench/bench_ttft.py gives llama.cpp a synthetic state of the
 * same size (llama_state_set_data), so both sides do the same work.
 *
 * TTFT = wall time of mz_prefill(Q query tokens) with logits, after one
 * warm-up query (each query is removed again with mz_ctx_truncate).
 *
 * usage: bench_ttft -m MODEL -c N [-q 8] [-t 2] [-r 3]
 * Prints "ttft_s=..." per run and "median ttft_s=... n_ctx=N".
 */
#define _POSIX_C_SOURCE 200809L
#include "mzcache.h"
#include "harness/harness.h" /* not public: KV fill and accessors for harnesses */
#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) { return mz_harness_time_ms() / 1e3; }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *model = NULL;
    long n_ctx_tok = 8192;
    int n_q = 8, threads = 2, reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m")) model = argv[i + 1];
        else if (!strcmp(argv[i], "-c")) n_ctx_tok = (long)bench_arg_ll("bench_ttft", "-c", argv[i + 1], 1, 1 << 22);
        else if (!strcmp(argv[i], "-q")) n_q = bench_arg_int("bench_ttft", "-q", argv[i + 1], 1, 4096);
        else if (!strcmp(argv[i], "-t")) threads = bench_arg_int("bench_ttft", "-t", argv[i + 1], 1, 1024);
        else if (!strcmp(argv[i], "-r")) reps = bench_arg_int("bench_ttft", "-r", argv[i + 1], 1, 100);
    }
    if (!model || n_ctx_tok < 1 || n_q < 1 || reps < 1 || reps > 100) {
        fprintf(stderr, "usage: bench_ttft -m MODEL -c N [-q 8] [-t 2] [-r 3]\n");
        return 2;
    }
    const size_t N = (size_t)n_ctx_tok;
    mz_model_t *m = NULL;
    if (mz_model_load(model, NULL, &m)) {
        fprintf(stderr, "bench_ttft: %s\n", mz_last_error());
        return 1;
    }
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_threads = threads;
    cp.n_ctx = (int)(N + (size_t)n_q + 16);
    mz_ctx_t *c = NULL;
    if (mz_ctx_init(m, &cp, &c)) {
        fprintf(stderr, "bench_ttft: %s\n", mz_last_error());
        mz_model_free(m);
        return 1;
    }
    const int n_vocab = mz_model_n_vocab(m);

    /* The synthetic context. */
    double t0 = now_s();
    /* Values from the calibrated fill (src/harness/kv_fill.h), as the other harnesses. */
    mz_kvfill *fill = NULL;
    {
        mz_ctx_params cc = mz_ctx_params_default();
        cc.n_ctx = 512;
        cc.n_threads = threads;
        mz_ctx_t *cal = NULL;
        if (mz_ctx_init(m, &cc, &cal) || mz_kvfill_calibrate_default(cal, 512, &fill) ||
            mz_kvfill_write(fill, c, N, 0x9e3779b97f4a7c15ULL)) {
            fprintf(stderr, "bench_ttft: %s\n", mz_last_error());
            return 1;
        }
        mz_ctx_free(cal);
        mz_kvfill_free(fill);
    }
    const double t_fill = now_s() - t0;

    mz_token *q = malloc((size_t)n_q * sizeof *q);
    for (int i = 0; i < n_q; i++) q[i] = (mz_token)((1000 + 37 * i) % n_vocab);
    double *ttft = calloc((size_t)reps, sizeof *ttft);
    int rc = 0;
    for (int r = -1; r < reps && !rc; r++) { /* r = -1: warm-up */
        double a = now_s();
        if (mz_prefill(c, q, (size_t)n_q) || !mz_ctx_logits(c)) rc = 1;
        double b = now_s();
        if (mz_ctx_truncate(c, N)) rc = 1;
        if (rc) fprintf(stderr, "bench_ttft: %s\n", mz_ctx_errmsg(c));
        if (r >= 0 && !rc) {
            ttft[r] = b - a;
            printf("run=%d ttft_s=%.4f\n", r + 1, ttft[r]);
        }
    }
    if (!rc) {
        qsort(ttft, (size_t)reps, sizeof *ttft, cmp_double);
        printf("median ttft_s=%.4f n_ctx=%zu n_q=%d threads=%d isa=%s fill_s=%.1f (synthetic KV)\n",
               ttft[reps / 2], N, n_q, threads, mz_harness_isa(), t_fill);
    }
    free(ttft);
    free(q);
    mz_ctx_free(c);
    mz_model_free(m);
    return rc;
}
