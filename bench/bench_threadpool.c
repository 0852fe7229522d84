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
    for (int i = 0; i < n; i++) {
        double t0 = now_us();
        mz_threadpool_run(tp, task, NULL);
        lat[i] = now_us() - t0;
    }
    qsort(lat, (size_t)n, sizeof *lat, cmp_double);
    printf("threads=%d back-to-back: median %.2f us  p90 %.2f us  p99 %.2f us\n", threads, lat[n / 2],
           lat[n * 9 / 10], lat[n * 99 / 100]);
    const int m = n / 20;
    for (int i = 0; i < m; i++) {
        struct timespec gap = {0, 1000000};
        nanosleep(&gap, NULL);
        double t0 = now_us();
        mz_threadpool_run(tp, task, NULL);
        lat[i] = now_us() - t0;
    }
    qsort(lat, (size_t)m, sizeof *lat, cmp_double);
    printf("threads=%d after a 1 ms gap: median %.2f us  p90 %.2f us  p99 %.2f us\n", threads, lat[m / 2],
           lat[m * 9 / 10], lat[m * 99 / 100]);
    free(lat);
    mz_threadpool_free(tp);
    return 0;
}
