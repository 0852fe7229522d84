/*
 * bench_restore.c — TTFT of restore_generate for the four overlap modes of
 * the paper's Fig. 11a (no overlap, allocation||reload, reload||prefill, all
 * three), at given remaining-memory levels.
 *
 *   bench_restore [-m MODEL] [-c CONTEXT_TOKENS] [-q QUERY_TOKENS] [-r REPEATS]
 *                 [-t THREADS] [--swap-dir DIR] [--remaining 50,0] [--synthetic]
 *                 [--restore-threads 0,1,2,3] [--modes none,all] [--codec auto]
 *                 [--profile FILE] [--prefault-threads N]
 *
 * --synthetic: the context's KV chunks are written straight by the calibrated
 * fill (src/harness/kv_fill.h; values that compress as the model's real KV does)
 * instead of prefilling CONTEXT tokens (which takes hours for 16k tokens of a
 * 0.6B model on two cores). Restore and attention costs do not depend on the
 * values; the answer is meaningless. --restore-threads lists the splits to
 * run (n_restore_threads; 0 = the device profile's default);
 * --prefault-threads how many of them pre-fault (0, the default: the
 * profile's pre-fault table; from 4 restore threads on). The load
 * average is printed before and after (the machine is shared).
 *
 * Prefills CONTEXT random tokens once, then for every level and mode:
 * truncate back to the context, evict to the level (the hybrid policy,
 * backward-out), and time mz_prefill_restore of QUERY tokens. Prints medians
 * over REPEATS runs (the modes taking turns) as a markdown table: TTFT,
 * prefill (compute incl. stalls), stall, all-ready time, the busy time of
 * each activity (summed over the threads running it), the CPU time the
 * request took (every thread; user + system) and that time spread over
 * the online CPUs: no overlap can bring TTFT below this floor.
 */
#define _POSIX_C_SOURCE 200809L
#include "mzcache.h"
#include "mzcache_experimental.h"
#include "harness/harness.h" /* not public: KV fill and accessors for harnesses */
#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* User + system time of the whole process (every thread) so far. */
static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* The synthetic context: N positions written by the calibrated fill
 * (src/harness/kv_fill.h: per-channel distributions of a real 512-token prefill of
 * this model), so the codec and zram compress it as they would real KV. */
static int fill_synthetic(mz_ctx_t *c, size_t N)
{
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = 512;
    cp.n_threads = mz_harness_ctx_n_threads(c);
    mz_ctx_t *cal = NULL;
    mz_kvfill *f = NULL;
    if (mz_ctx_init(mz_harness_ctx_model(c), &cp, &cal)) return -1;
    mz_status st = mz_kvfill_calibrate_default(cal, 512, &f);
    mz_ctx_free(cal);
    if (!st) st = mz_kvfill_write(f, c, N, 0x9e3779b97f4a7c15ULL);
    mz_kvfill_free(f);
    return st ? -1 : 0;
}

int main(int argc, char **argv)
{
    const char *model = "models/SmolLM2-135M-Instruct.Q4_1.gguf", *swap = NULL;
    const char *levels = "50,0", *threads_list = "0", *modes_list = "none,alloc-reload,reload-prefill,all";
    const char *codec = NULL, *profile = NULL;
    int synthetic = 0, n_prefault = 0;
    int n_ctx_tok = 1024, n_q = 8, reps = 3, threads = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "-c") && i + 1 < argc) n_ctx_tok = bench_arg_int("bench_restore", "-c", argv[++i], 1, 1 << 22);
        else if (!strcmp(argv[i], "-q") && i + 1 < argc) n_q = bench_arg_int("bench_restore", "-q", argv[++i], 1, 4096);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = bench_arg_int("bench_restore", "-r", argv[++i], 1, 64);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = bench_arg_int("bench_restore", "-t", argv[++i], 1, 1024);
        else if (!strcmp(argv[i], "--swap-dir") && i + 1 < argc) swap = argv[++i];
        else if (!strcmp(argv[i], "--remaining") && i + 1 < argc) levels = argv[++i];
        else if (!strcmp(argv[i], "--restore-threads") && i + 1 < argc) threads_list = argv[++i];
        else if (!strcmp(argv[i], "--modes") && i + 1 < argc) modes_list = argv[++i];
        else if (!strcmp(argv[i], "--codec") && i + 1 < argc) codec = argv[++i];
        else if (!strcmp(argv[i], "--profile") && i + 1 < argc) profile = argv[++i];
        else if (!strcmp(argv[i], "--synthetic")) synthetic = 1;
        else if (!strcmp(argv[i], "--prefault-threads") && i + 1 < argc)
            n_prefault = bench_arg_int("bench_restore", "--prefault-threads", argv[++i], 0, MZ_RESTORE_THREADS_MAX);
        else {
            fprintf(stderr, "usage: bench_restore [-m MODEL] [-c N] [-q N] [-r N] [-t N] "
                            "[--swap-dir DIR] [--remaining 50,0] [--synthetic]\n"
                            "       [--restore-threads 0,1,2,3] [--modes none,alloc-reload,"
                            "reload-prefill,all] [--codec auto] [--profile FILE]\n"
                            "       [--prefault-threads N]\n");
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
    cp.kv_codec = codec;
    cp.profile_path = profile; /* NULL: the engine's default location */
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
    const long n_cpus = sysconf(_SC_NPROCESSORS_ONLN) > 0 ? sysconf(_SC_NPROCESSORS_ONLN) : 1;
    bench_print_loadavg("at start");
    if (synthetic) {
        double a = mz_harness_time_ms();
        if (fill_synthetic(c, (size_t)n_ctx_tok)) {
            fprintf(stderr, "synthetic context: %s\n", mz_last_error());
            return 1;
        }
        t0 = mz_harness_time_ms() - a;
    } else if (mz_prefill_restore(c, toks, (size_t)n_ctx_tok, NULL, &tm)) {
        fprintf(stderr, "prefill: %s\n", mz_ctx_errmsg(c));
        return 1;
    } else {
        t0 = tm.prefill_ms;
    }
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
    mz_mem_stats ms0; /* the codec the session has (kv_codec NULL: the one chosen for it) */
    mz_get_mem_stats(c, &ms0);
    printf("model %s, context %d tokens (%s %.0f ms), query %d tokens, %d compute threads, "
           "codec %s, isa %s, median of %d, %ld CPUs online\n\n", model, n_ctx_tok,
           synthetic ? "SYNTHETIC KV written in" : "prefill", t0, n_q, threads,
           ms0.codec, mz_harness_isa(), reps, n_cpus);
    printf("all resident: TTFT %.1f ms\n\n", bench_median(base, reps));
    printf("| remaining | restore threads | overlap | TTFT ms | x none | prefill ms | stall ms | "
           "all ready ms | alloc ms | storage ms | memory ms | units (storage/memory) | CPU s | "
           "CPU floor ms |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    static const char *const names[] = {"none", "alloc||reload", "reload||prefill", "all"};
    static const char *const keys[] = {"none", "alloc-reload", "reload-prefill", "all"};
    static const mz_restore_overlap modes[] = {MZ_OVERLAP_NONE, MZ_OVERLAP_ALLOC_RELOAD,
                                               MZ_OVERLAP_RELOAD_PREFILL, MZ_OVERLAP_ALL};
    int nth_list[8], n_nth = 0;
    char *tl = strdup(threads_list), *save_tl = NULL;
    for (char *tok = tl ? strtok_r(tl, ",", &save_tl) : NULL; tok && n_nth < 8; tok = strtok_r(NULL, ",", &save_tl))
        nth_list[n_nth++] = bench_arg_int("bench_restore", "--restore-threads", tok, 0, MZ_RESTORE_THREADS_MAX);
    free(tl);
    char *lv = strdup(levels);
    char *save_lv = NULL;
    for (char *tok = strtok_r(lv, ",", &save_lv); tok; tok = strtok_r(NULL, ",", &save_lv)) {
        int rem = bench_arg_int("bench_restore", "--remaining", tok, 0, 100);
        for (int ti = 0; ti < n_nth; ti++) {
        /* Modes take turns run by run, so a change in the machine's speed
         * (a shared VM) falls on all of them alike. */
        double ttft[4][64], pre[4][64], stall[4][64], ready[4][64], al[4][64], st[4][64], me[4][64],
            cpu[4][64];
        size_t nu = 0, ns = 0, nm = 0;
        int nthr = 0;
        for (int r = 0; r < reps; r++)
            for (int k = 0; k < 4; k++) {
                if (!strstr(modes_list, keys[k])) continue;
                mz_mem_stats ms;
                if (mz_ctx_truncate(c, (size_t)n_ctx_tok)) return 1;
                mz_get_mem_stats(c, &ms);
                size_t total = ms.weights.total_bytes + ms.kv.total_bytes;
                size_t amount = rem <= 0 ? SIZE_MAX : (size_t)((double)total * (100 - rem) / 100.0);
                if (mz_evict(c, amount, NULL)) {
                    fprintf(stderr, "evict: %s\n", mz_ctx_errmsg(c));
                    return 1;
                }
                mz_restore_experimental rx = mz_restore_experimental_default();
                rx.overlap = modes[k];
                rx.n_prefault_threads = n_prefault;
                mz_restore_params rp = mz_restore_params_default();
                rp.experimental = &rx;
                rp.n_restore_threads = nth_list[ti];
                const double c0 = cpu_seconds();
                if (mz_prefill_restore(c, toks + n_ctx_tok, (size_t)n_q, &rp, &tm)) {
                    fprintf(stderr, "query: %s\n", mz_ctx_errmsg(c));
                    return 1;
                }
                mz_get_last_restore_timings(c, &tm); /* complete: the memory path may go on after the call */
                cpu[k][r] = cpu_seconds() - c0;
                ttft[k][r] = tm.ttft_ms;
                pre[k][r] = tm.prefill_ms;
                stall[k][r] = tm.stall_ms;
                ready[k][r] = tm.restore_ms;
                al[k][r] = tm.alloc_ms;
                st[k][r] = tm.storage_ms;
                me[k][r] = tm.mem_ms;
                nu = tm.n_units, ns = tm.n_storage_units, nm = tm.n_mem_units;
                nthr = tm.n_restore_threads;
            }
        double none_ttft = 0;
        for (int k = 0; k < 4; k++) {
            if (!strstr(modes_list, keys[k])) continue;
            double mt = bench_median(ttft[k], reps), mc = bench_median(cpu[k], reps);
            if (modes[k] == MZ_OVERLAP_NONE) none_ttft = mt;
            char ratio[16] = "-";
            if (none_ttft > 0) snprintf(ratio, sizeof ratio, "%.2f", mt / none_ttft);
            printf("| %d %% | %d | %s | %.1f | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | "
                   "%zu (%zu/%zu) | %.2f | %.0f |\n",
                   rem, nthr, names[k], mt, ratio, bench_median(pre[k], reps), bench_median(stall[k], reps),
                   bench_median(ready[k], reps), bench_median(al[k], reps), bench_median(st[k], reps), bench_median(me[k], reps),
                   nu, ns, nm, mc, mc * 1e3 / n_cpus);
            fflush(stdout);
        }
        /* Run by run (the modes took turns, so run r of each saw the same
         * machine): full overlap over no overlap, for targets stated per run. */
        if (strstr(modes_list, "none") && strstr(modes_list, "all")) {
            double worst = 0;
            /* stderr: the table on stdout stays one table */
            fprintf(stderr, "per-run all/none at %d %%, %d restore threads:", rem, nthr);
            for (int r = 0; r < reps; r++) {
                double q = ttft[3][r] / ttft[0][r];
                worst = q > worst ? q : worst;
                fprintf(stderr, " %.2f", q);
            }
            fprintf(stderr, " (worst %.2f)\n", worst);
        }
        }
    }
    bench_print_loadavg("at end");
    free(lv);
    free(toks);
    mz_ctx_free(c);
    mz_model_free(m);
    return 0;
}
