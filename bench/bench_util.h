/*
 * bench_util.h — small helpers the benchmark programs share: ordering and
 * the median of timings, and the load average printed beside a result.
 * Header only (each program in bench/ is built on its own).
 */
#ifndef MZ_BENCH_UTIL_H
#define MZ_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* qsort order of doubles, ascending. */
static inline int bench_cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (n > 0), the mean of the middle two for an even n;
 * sorts v in place. */
static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* /proc/loadavg's line without its newline ("?" where it cannot be opened). */
static inline void bench_loadavg(char *buf, size_t cap)
{
    snprintf(buf, cap, "?");
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (!fgets(buf, (int)cap, f)) buf[0] = '\0';
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = '\0';
}

/* "load average WHEN: 0.52 0.61 0.70 1/234 5678". */
static inline void bench_print_loadavg(const char *when)
{
    char buf[128];
    bench_loadavg(buf, sizeof buf);
    printf("load average %s: %s\n", when, buf);
}

#endif /* MZ_BENCH_UTIL_H */
