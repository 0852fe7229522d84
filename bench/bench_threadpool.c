/*
 * bench_threadpool — cost of one fork-join of the compute pool: the caller
 * runs an (almost) empty task on every thread and waits for all of them.
 * A forward pass does about 8 of these per layer, so this is the per-layer
 * synchronisation overhead divided by 8.
 *
 *   back-to-back: jobs issued in a tight loop (workers still spinning)
 *   after a gap:  a 1 ms pause between jobs (workers have gone to sleep, so
 *                 this includes a futex wake-up)
 *
 * each for mz_threadpool_run (every worker waited for) and for
 * mz_threadpool_run_claimed (only the workers that arrived before the
 * caller's own call returned; "threads in" is the mean number that took
 * part): after a gap the claimed join does not wait for the wake-ups.
 *
 * usage: bench_threadpool [-t 2] [-n 20000]
 */
#define _POSIX_C_SOURCE 200809L
#include "core/core.h"
#include "sched/threadpool.h"
#include "bench_util.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) { return mz_time_ms() * 1e3; }

static atomic_int g_sink;

static void task(void *arg, int ith, int nth)
{
    (void)arg;
    atomic_fetch_add_explicit(&g_sink, ith + nth, memory_order_relaxed);
}


/* Times n jobs into lat[], each after a pause of gap_ns (0: none); claimed
 * jobs add the number of threads that took part to *in. */
static void time_jobs(mz_threadpool *tp, double *lat, int n, long gap_ns, bool claimed, long *in)
{
    for (int i = 0; i < n; i++) {
        if (gap_ns > 0) nanosleep(&(struct timespec){0, gap_ns}, NULL);
        double t0 = now_us();
        if (claimed) *in += mz_threadpool_run_claimed(tp, task, NULL);
        else mz_threadpool_run(tp, task, NULL);
        lat[i] = now_us() - t0;
    }
}

static void print_latency(int threads, const char *what, double *lat, int n, double threads_in)
{
    qsort(lat, (size_t)n, sizeof *lat, bench_cmp_d);
    printf("threads=%d %s: median %.2f us  p90 %.2f us  p99 %.2f us", threads, what, lat[n / 2],
           lat[n * 9 / 10], lat[n * 99 / 100]);
    if (threads_in > 0) printf("  threads in %.2f", threads_in);
    printf("\n");
}

int main(int argc, char **argv)
{
    int threads = 2, n = 20000;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc || (strcmp(argv[i], "-t") && strcmp(argv[i], "-n"))) {
            fprintf(stderr, "usage: bench_threadpool [-t 2] [-n 20000]\n");
            return 2;
        }
        if (!strcmp(argv[i], "-t")) threads = bench_arg_int("bench_threadpool", "-t", argv[i + 1], 1, 1024);
        else n = bench_arg_int("bench_threadpool", "-n", argv[i + 1], 20, 100000000);
    }
    mz_threadpool *tp = mz_threadpool_init(threads);
    if (!tp) return 1;
    double *lat = malloc((size_t)n * sizeof *lat);
    if (!lat) return 1;
    for (int i = 0; i < 1000; i++) mz_threadpool_run(tp, task, NULL); /* warm-up */
    const int m = n / 20;
    for (int claimed = 0; claimed <= 1; claimed++) {
        long in = 0;
        time_jobs(tp, lat, n, 0, claimed, &in);
        print_latency(threads, claimed ? "claimed, back-to-back" : "back-to-back", lat, n, claimed ? (double)in / n : 0);
        in = 0;
        time_jobs(tp, lat, m, 1000000L, claimed, &in);
        print_latency(threads, claimed ? "claimed, after a 1 ms gap" : "after a 1 ms gap", lat, m,
                      claimed ? (double)in / m : 0);
    }
    free(lat);
    mz_threadpool_free(tp);
    return 0;
}
