/*
 * bench_reserve.c — does a small pre-touched reserve for the first restored
 * units pay for the memory it holds? (issue 6; MACHINE-NOTES: touching
 * memory handed back to the OS costs 0.3-2.6 s/GiB on these VMs.)
 *
 * For each reserve size R it measures, median of REPEATS:
 *   cold   first touch of R bytes whose pages went back to the OS WAIT
 *          seconds ago (MADV_DONTNEED, then the hypervisor reclaims them):
 *          what the allocation worker pays for the first units today;
 *   hot    first touch right after MADV_DONTNEED (not yet reclaimed);
 *   populate  the same cold pages brought back with one
 *          madvise(MADV_POPULATE_WRITE) instead of a write per page;
 *   remap  moving R bytes of pre-touched reserve pages onto a unit's
 *          PROT_NONE range (mremap MREMAP_FIXED) and touching them: what it
 *          would pay with a reserve;
 *   read   reading R bytes from a file with O_DIRECT into touched memory:
 *          what restoring those units costs besides the allocation.
 * The saving of a reserve is cold - remap per request whose first units are
 * evicted; the memory it holds is R for good.
 *
 *   bench_reserve [-s 4,16,64] [-w WAIT_S] [-r REPEATS] [-f FILE]
 */
#define _GNU_SOURCE
#include "harness/harness.h" /* the library's monotonic clock */
#include "bench_util.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static double now_ms(void) { return mz_harness_time_ms(); }

static void touch(uint8_t *p, size_t n)
{
    volatile uint8_t *v = p;
    for (size_t off = 0; off < n; off += 4096) v[off] = 1;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_d);
    return v[n / 2];
}

int main(int argc, char **argv)
{
    const char *sizes = "4,16,64", *file = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    double wait_s = 5;
    int reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-s")) sizes = argv[i + 1];
        else if (!strcmp(argv[i], "-w")) wait_s = bench_arg_double("bench_reserve", "-w", argv[i + 1], 0, 3600);
        else if (!strcmp(argv[i], "-r")) reps = bench_arg_int("bench_reserve", "-r", argv[i + 1], 1, 32);
        else if (!strcmp(argv[i], "-f")) file = argv[i + 1];
    }
    if (reps < 1 || reps > 32) return 2;
    char la[128];
    bench_loadavg(la, sizeof la);
    printf("load average at start: %s; reclaim wait %.1f s; median of %d\n\n", la, wait_s, reps);
    printf("| reserve MiB | cold touch ms | cold populate ms | hot touch ms | remap reserve ms | "
           "O_DIRECT read ms | saving/request ms | cold s/GiB |\n|---|---|---|---|---|---|---|---|\n");
    for (const char *q = sizes; *q;) {
        size_t mib = strtoul(q, NULL, 10);
        q += strcspn(q, ",");
        if (*q) q++;
        if (mib < 1 || mib > 4096) continue;
        size_t n = mib << 20;
        double cold[32], hot[32], remap[32], rd[32], pop[32];
        for (int r = 0; r < reps; r++) {
            uint8_t *a = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            uint8_t *b = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (b == MAP_FAILED) return 1;
            touch(b, n);
            madvise(b, n, MADV_DONTNEED);
            uint8_t *res = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            uint8_t *unit = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (a == MAP_FAILED || res == MAP_FAILED || unit == MAP_FAILED) return 1;
            touch(a, n);
            touch(res, n); /* the reserve: touched once, kept */
            madvise(a, n, MADV_DONTNEED);
            double t0 = now_ms();
            touch(a, n);
            hot[r] = now_ms() - t0;
            madvise(a, n, MADV_DONTNEED);
            struct timespec ts = {.tv_sec = (time_t)wait_s,
                                  .tv_nsec = (long)((wait_s - (double)(time_t)wait_s) * 1e9)};
            nanosleep(&ts, NULL);
            t0 = now_ms();
            touch(a, n);
            cold[r] = now_ms() - t0;
            t0 = now_ms();
            if (madvise(b, n, MADV_POPULATE_WRITE)) touch(b, n);
            pop[r] = now_ms() - t0;
            munmap(b, n);
            /* The reserve moved onto the unit's range (its address stays). */
            t0 = now_ms();
            void *m = mremap(res, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, unit);
            if (m == MAP_FAILED) return 1;
            touch(unit, n);
            remap[r] = now_ms() - t0;
            /* Reading the units' bytes (into touched memory). */
            rd[r] = 0;
            int fd = open(file, O_RDONLY | O_DIRECT);
            if (fd >= 0) {
                t0 = now_ms();
                size_t done = 0;
                while (done < n) {
                    ssize_t k = pread(fd, a + done, n - done < (1u << 20) ? n - done : (1u << 20),
                                      (off_t)done);
                    if (k <= 0) break;
                    done += (size_t)k;
                }
                rd[r] = now_ms() - t0;
                close(fd);
            }
            munmap(a, n);
            munmap(unit, n);
        }
        double c = median(cold, reps), h = median(hot, reps), m = median(remap, reps);
        printf("| %zu | %.1f | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f |\n", mib, c, median(pop, reps), h, m,
               median(rd, reps), c - m, c / 1e3 * 1024.0 / (double)mib);
        fflush(stdout);
    }
    return 0;
}
