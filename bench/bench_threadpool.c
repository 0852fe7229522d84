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
 * usage: bench_threadpool [-t 2] [-n 20000]
 */
#define _POSIX_C_SOURCE 200809L
#include "core/core.h"
#include "sched/threadpool.h"

#include <stdatomic.h>
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

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Times n jobs into lat[], each after a pause of gap_ns (0: none). */
static void time_jobs(mz_threadpool *tp, double *lat, int n, long gap_ns)
{
    for (int i = 0; i < n; i++) {
        if (gap_ns > 0) nanosleep(&(struct timespec){0, gap_ns}, NULL);
        double t0 = now_us();
        mz_threadpool_run(tp, task, NULL);
        lat[i] = now_us() - t0;
    }
}

static void print_latency(int threads, const char *what, double *lat, int n)
{
    qsort(lat, (size_t)n, sizeof *lat, cmp_double);
    printf("threads=%d %s: median %.2f us  p90 %.2f us  p99 %.2f us\n", threads, what, lat[n / 2],
           lat[n * 9 / 10], lat[n * 99 / 100]);
}

int main(int argc, char **argv)
{
    int threads = 2, n = 20000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) n = atoi(argv[i + 1]);
    }
    mz_threadpool *tp = mz_threadpool_init(threads);
    if (!tp || n < 10) return 1;
    double *lat = malloc((size_t)n * sizeof *lat);
    for (int i = 0; i < 1000; i++) mz_threadpool_run(tp, task, NULL); /* warm-up */
    time_jobs(tp, lat, n, 0);
    print_latency(threads, "back-to-back", lat, n);
    const int m = n / 20;
    time_jobs(tp, lat, m, 1000000L);
    print_latency(threads, "after a 1 ms gap", lat, m);
    free(lat);
    mz_threadpool_free(tp);
    return 0;
}
