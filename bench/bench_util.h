/*
 * bench_util.h — small helpers the benchmark programs share: ordering and
 * the median of timings, the load average printed beside a result, a
 * field of this process's memory summary, and whole-number options parsed
 * with checks.
 * Header only (each program in bench/ is built on its own).
 */
#ifndef MZ_BENCH_UTIL_H
#define MZ_BENCH_UTIL_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Option opt's value text as a whole number in [lo, hi]; otherwise prog
 * says why on stderr and exits with status 2 (a usage error). */
static inline long long bench_arg_ll(const char *prog, const char *opt, const char *text, long long lo, long long hi)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) {
        fprintf(stderr, "%s: %s wants a whole number in [%lld, %lld], not '%s'\n", prog, opt, lo, hi, text);
        exit(2);
    }
    return v;
}

/* As bench_arg_ll, for a range within int's. */
static inline int bench_arg_int(const char *prog, const char *opt, const char *text, long lo, long hi)
{
    return (int)bench_arg_ll(prog, opt, text, lo, hi);
}

/* Option opt's value text as a finite number in [lo, hi]; otherwise exits
 * with status 2, as bench_arg_int. */
static inline double bench_arg_double(const char *prog, const char *opt, const char *text, double lo, double hi)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "%s: %s wants a number in [%g, %g], not '%s'\n", prog, opt, lo, hi, text);
        exit(2);
    }
    return v;
}

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

/* A "NAME:   N kB" field of /proc/self/smaps_rollup (Rss, AnonHugePages),
 * in KiB; -1 where the file or the field cannot be read. */
static inline long long bench_smaps_kib(const char *name)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f) return -1;
    const size_t name_len = strlen(name);
    char line[256];
    long long kib = -1;
    while (kib < 0 && fgets(line, sizeof line, f)) {
        if (strncmp(line, name, name_len) || line[name_len] != ':') continue;
        char *end;
        long long v = strtoll(line + name_len + 1, &end, 10);
        if (end != line + name_len + 1 && v >= 0) kib = v;
    }
    fclose(f);
    return kib;
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
