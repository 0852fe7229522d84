/*
 * bench_restore.c — TTFT of restore_generate for the four overlap modes of
 * the paper's Fig. 11a (no overlap, allocation||reload, reload||prefill, all
 * three), at given remaining-memory levels.
 *
 *   bench_restore [-m MODEL] [-c CONTEXT_TOKENS] [-q QUERY_TOKENS] [-r REPEATS]
 *                 [-t THREADS] [--swap-dir DIR] [--remaining 50,0]
 *
 * Prefills CONTEXT random tokens once, then for every level and mode:
 * truncate back to the context, evict to the level (the hybrid policy,
 * backward-out), and time mz_prefill_restore of QUERY tokens. Prints medians
 * over REPEATS runs as a markdown table: TTFT, prefill (compute incl.
 * stalls), stall, all-ready time, and the busy time of each worker.
 */
#define _POSIX_C_SOURCE 200809L
#include "mzcache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv)
{
    const char *model = "models/SmolLM2-135M-Instruct.Q4_1.gguf", *swap = NULL;
    const char *levels = "50,0";
    int n_ctx_tok = 1024, n_q = 8, reps = 3, threads = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "-c") && i + 1 < argc) n_ctx_tok = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-q") && i + 1 < argc) n_q = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--swap-dir") && i + 1 < argc) swap = argv[++i];
        else if (!strcmp(argv[i], "--remaining") && i + 1 < argc) levels = argv[++i];
        else {
            fprintf(stderr, "usage: bench_restore [-m MODEL] [-c N] [-q N] [-r N] [-t N] "
                            "[--swap-dir DIR] [--remaining 50,0]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 64 || n_ctx_tok < 1 || n_q < 1) return 2;
    mz_model_params mp = mz_model_params_default();
    mp.n_threads = threads;
    mz_model_t *m = NULL;
    if (mz_model_load(model, &mp, &m)) {
        fprintf(stderr, "load %s: %s\n", model, mz_last_error());
        return 1;
    }
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = n_ctx_tok + n_q + 16;
    cp.n_threads = threads;
    cp.swap_dir = swap;
    mz_ctx_t *c = NULL;
    if (mz_ctx_init(m, &cp, &c)) {
        fprintf(stderr, "ctx: %s\n", mz_last_error());
        return 1;
    }
    int nv = mz_model_n_vocab(m);
    mz_token *toks = malloc((size_t)(n_ctx_tok + n_q) * sizeof *toks);
    if (!toks) return 1;
    unsigned long long s = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < n_ctx_tok + n_q; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        toks[i] = (mz_token)((s >> 33) % (unsigned long long)nv);
    }
    double t0 = 0;
    mz_restore_timings tm;
    if (mz_prefill_restore(c, toks, (size_t)n_ctx_tok, NULL, &tm)) {
        fprintf(stderr, "prefill: %s\n", mz_ctx_errmsg(c));
        return 1;
    }
    t0 = tm.prefill_ms;
    /* All resident: the baseline TTFT of the query. */
    double base[64];
    for (int r = 0; r < reps; r++) {
        if (mz_ctx_truncate(c, (size_t)n_ctx_tok) ||
            mz_prefill_restore(c, toks + n_ctx_tok, (size_t)n_q, NULL, &tm)) {
            fprintf(stderr, "query: %s\n", mz_ctx_errmsg(c));
            return 1;
        }
        base[r] = tm.ttft_ms;
    }
    printf("model %s, context %d tokens (prefill %.0f ms), query %d tokens, %d threads, "
           "median of %d\n\n", model, n_ctx_tok, t0, n_q, threads, reps);
    printf("all resident: TTFT %.1f ms\n\n", median(base, reps));
    printf("| remaining | overlap | TTFT ms | prefill ms | stall ms | all ready ms | alloc ms | "
           "storage ms | memory ms | units (storage/memory) |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    static const char *const names[] = {"none", "alloc||reload", "reload||prefill", "all"};
    static const mz_restore_overlap modes[] = {MZ_OVERLAP_NONE, MZ_OVERLAP_ALLOC_RELOAD,
                                               MZ_OVERLAP_RELOAD_PREFILL, MZ_OVERLAP_ALL};
    char *lv = strdup(levels);
    for (char *tok = strtok(lv, ","); tok; tok = strtok(NULL, ",")) {
        int rem = atoi(tok);
        for (int k = 0; k < 4; k++) {
            double ttft[64], pre[64], stall[64], ready[64], al[64], st[64], me[64];
            size_t nu = 0, ns = 0, nm = 0;
            for (int r = 0; r < reps; r++) {
                mz_mem_stats ms;
                if (mz_ctx_truncate(c, (size_t)n_ctx_tok)) return 1;
                mz_get_mem_stats(c, &ms);
                size_t total = ms.weights.total_bytes + ms.kv.total_bytes;
                size_t amount = rem <= 0 ? SIZE_MAX : (size_t)((double)total * (100 - rem) / 100.0);
                if (mz_evict(c, amount, NULL)) {
                    fprintf(stderr, "evict: %s\n", mz_ctx_errmsg(c));
                    return 1;
                }
                mz_restore_params rp = mz_restore_params_default();
                rp.overlap = modes[k];
                if (mz_prefill_restore(c, toks + n_ctx_tok, (size_t)n_q, &rp, &tm)) {
                    fprintf(stderr, "query: %s\n", mz_ctx_errmsg(c));
                    return 1;
                }
                ttft[r] = tm.ttft_ms;
                pre[r] = tm.prefill_ms;
                stall[r] = tm.stall_ms;
                ready[r] = tm.restore_ms;
                al[r] = tm.alloc_ms;
                st[r] = tm.storage_ms;
                me[r] = tm.mem_ms;
                nu = tm.n_units, ns = tm.n_storage_units, nm = tm.n_mem_units;
            }
            printf("| %d %% | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %zu (%zu/%zu) |\n",
                   rem, names[k], median(ttft, reps), median(pre, reps), median(stall, reps),
                   median(ready, reps), median(al, reps), median(st, reps), median(me, reps), nu,
                   ns, nm);
            fflush(stdout);
        }
    }
    free(lv);
    free(toks);
    mz_ctx_free(c);
    mz_model_free(m);
    return 0;
}
