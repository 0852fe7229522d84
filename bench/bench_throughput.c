/*
 * bench_throughput — prefill and decode speed of mzcache on one model, in the
 * way llama-bench measures them: pp = prefill of P random tokens into an empty
 * context, tg = N single-token decode steps from an empty context. With
 * -d DEPTH (llama-bench's -d), both start from a context that already holds
 * DEPTH random tokens (prefilled once, untimed, kept across runs): decode
 * speed at a long context, where attention over the history weighs.
 * tg_cpu_ms is the process's CPU time per decoded token (all threads), the
 * steadier figure on a loaded machine; pp_busy the process's CPU time while
 * it prefilled over wall time x threads: near 1 when every thread ran (or
 * spun) throughout, so a slow prefill with pp_busy near 1 met a slower
 * machine (memory, clock), one well under 1 had threads off their CPUs;
 * pp_steal_ms and tg_steal_ms the time
 * the hypervisor took from this machine's CPUs (all of them, /proc/stat's
 * steal) while a run prefilled and decoded, so a slow run can say whether
 * its CPUs were taken away.
 *
 * usage: bench_throughput -m MODEL [-t THREADS] [-p 512] [-n 128] [-r 5] [-d 0]
 * Prints one line per run, then a median line and a spread line, as
 * "key=value" pairs, so bench/bench_throughput.py and bench/device-scaling.sh
 * can read them: the spread line gives min / max of every cell and max/min,
 * so a run that collapsed once in ten shows instead of hiding behind the
 * median.
 */
#define _POSIX_C_SOURCE 200809L
#include "mzcache.h"
#include "harness/harness.h" /* the library's monotonic clock */
#include "kernels/kernels.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) { return mz_harness_time_ms() / 1e3; }

/* CPU time of the whole process (every thread, spin-waits included), in ms:
 * on a shared machine the CPU a decode step takes moves less with the load
 * than its wall time. */
static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The machine's steal time so far, all CPUs, in ms (/proc/stat's "cpu" line,
 * 8th number, in USER_HZ ticks); -1 where it cannot be read. */
static double steal_ms(void)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return -1;
    char line[512];
    bool ok = fgets(line, sizeof line, f) && strncmp(line, "cpu ", 4) == 0;
    fclose(f);
    if (!ok) return -1;
    const char *p = line + 4;
    unsigned long long v = 0;
    for (int k = 0; k < 8; k++) { /* user nice system idle iowait irq softirq steal */
        char *end;
        errno = 0;
        v = strtoull(p, &end, 10);
        if (errno || end == p) return -1;
        p = end;
    }
    long hz = sysconf(_SC_CLK_TCK);
    return hz > 0 ? (double)v * 1e3 / (double)hz : -1;
}

/* Whole decimal int in [lo, hi], or -1. */
static int parse_int(const char *s, int lo, int hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    return (int)v;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *model = NULL;
    int threads = 2, n_prompt = 512, n_gen = 128, reps = 5, depth = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m")) model = argv[i + 1];
        else if (!strcmp(argv[i], "-t")) threads = parse_int(argv[i + 1], 1, 1024);
        else if (!strcmp(argv[i], "-p")) n_prompt = parse_int(argv[i + 1], 1, 1 << 20);
        else if (!strcmp(argv[i], "-n")) n_gen = parse_int(argv[i + 1], 1, 1 << 20);
        else if (!strcmp(argv[i], "-r")) reps = parse_int(argv[i + 1], 1, 100);
        else if (!strcmp(argv[i], "-d")) depth = parse_int(argv[i + 1], 0, 1 << 20);
    }
    if (!model || threads < 1 || reps < 1 || reps > 100 || n_prompt < 1 || n_gen < 1 || depth < 0) {
        fprintf(stderr, "usage: bench_throughput -m MODEL [-t 2] [-p 512] [-n 128] [-r 5] [-d 0]\n");
        return 2;
    }
    mz_model_t *m = NULL;
    if (mz_model_load(model, NULL, &m)) {
        fprintf(stderr, "bench_throughput: %s\n", mz_last_error());
        return 1;
    }
    int n_vocab = mz_model_n_vocab(m);
    const int n_toks = n_prompt > depth ? n_prompt : depth;
    mz_token *toks = malloc((size_t)n_toks * sizeof *toks);
    unsigned long long rng = 42;
    for (int i = 0; i < n_toks; i++) {
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        toks[i] = (mz_token)((rng >> 33) % (unsigned long long)n_vocab);
    }
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_threads = threads;
    cp.n_ctx = depth + n_prompt + n_gen + 16;
    cp.n_batch = 512;
    double *pp = calloc((size_t)reps, sizeof *pp), *tg = calloc((size_t)reps, sizeof *tg);
    double *tg_cpu = calloc((size_t)reps, sizeof *tg_cpu); /* CPU ms per generated token */
    int rc = 0;
    mz_ctx_t *c = NULL; /* a fresh one per run, or with -d one holding the depth tokens */
    for (int r = 0; r <= reps && rc == 0; r++) { /* run 0 is a warm-up */
        if (!c && (mz_ctx_init(m, &cp, &c) || (depth && mz_prefill(c, toks, (size_t)depth)))) {
            rc = 1;
            fprintf(stderr, "bench_throughput: %s\n", mz_last_error());
            break;
        }
        double t0 = now_s(), cpu0 = cpu_ms(), st0 = steal_ms();
        if (mz_prefill(c, toks, (size_t)n_prompt)) rc = 1;
        double t1 = now_s(), cpu1 = cpu_ms(), st1 = steal_ms();
        if (mz_ctx_truncate(c, (size_t)depth)) rc = 1;
        double t2 = now_s(), cpu2 = cpu_ms(), st2 = steal_ms();
        for (int i = 0; i < n_gen && !rc; i++)
            if (mz_prefill(c, &toks[i % n_prompt], 1)) rc = 1;
        double t3 = now_s(), cpu3 = cpu_ms(), st3 = steal_ms();
        if (!depth || mz_ctx_truncate(c, (size_t)depth)) {
            mz_ctx_free(c);
            c = NULL;
        }
        if (rc) {
            fprintf(stderr, "bench_throughput: %s\n", mz_last_error());
            break;
        }
        if (r == 0) continue;
        pp[r - 1] = n_prompt / (t1 - t0);
        tg[r - 1] = n_gen / (t3 - t2);
        tg_cpu[r - 1] = (cpu3 - cpu2) / n_gen;
        const double pp_busy = (cpu1 - cpu0) / (1e3 * (t1 - t0) * threads);
        printf("run=%d pp%d=%.2f tg%d=%.2f tg_cpu_ms=%.2f pp_busy=%.2f pp_steal_ms=%.0f tg_steal_ms=%.0f\n", r,
               n_prompt, pp[r - 1], n_gen, tg[r - 1], tg_cpu[r - 1], pp_busy,
               st0 >= 0 && st1 >= 0 ? st1 - st0 : -1.0, st2 >= 0 && st3 >= 0 ? st3 - st2 : -1.0);
        fflush(stdout);
    }
    if (!rc) {
        qsort(pp, (size_t)reps, sizeof *pp, cmp_double);
        qsort(tg, (size_t)reps, sizeof *tg, cmp_double);
        qsort(tg_cpu, (size_t)reps, sizeof *tg_cpu, cmp_double);
        /* which kernels ran: the ISA, and whether quantized weights were
         * repacked (x8, src/kernels/repack.c) on this machine */
        printf("median pp%d=%.2f tg%d=%.2f threads=%d isa=%s x8=%s depth=%d tg_cpu_ms=%.2f\n", n_prompt,
               pp[reps / 2], n_gen, tg[reps / 2], threads, mz_kernels_isa(),
               mz_kernels_pick_layout(MZ_DT_Q4_0, 8, MZ_QK) == MZ_LAYOUT_X8 ? "on" : "off", depth,
               tg_cpu[reps / 2]);
        printf("spread pp%d_min=%.2f pp%d_max=%.2f pp%d_ratio=%.2f tg%d_min=%.2f tg%d_max=%.2f "
               "tg%d_ratio=%.2f runs=%d\n",
               n_prompt, pp[0], n_prompt, pp[reps - 1], n_prompt, pp[reps - 1] / pp[0], n_gen, tg[0],
               n_gen, tg[reps - 1], n_gen, tg[reps - 1] / tg[0], reps);
    }
    mz_ctx_free(c);
    free(pp);
    free(tg);
    free(tg_cpu);
    free(toks);
    mz_model_free(m);
    return rc;
}
