/*
 * bench_prefault.c — what pre-faulting evicted memory costs with 4 KiB pages
 * and with transparent huge pages (issue 18, target 2).
 *
 * After eviction to 50 % the restore must pre-fault every evicted unit
 * before it can decode into it (restore_job.c, "alloc"): ~1.9 GB for the
 * target's job, at 0.10-0.18 s/GiB on 4 threads of the 16-vCPU machine —
 * as long as the whole TTFT budget. Huge pages would need one fault and one
 * 2 MiB clear per 512 small faults. This measures, for each thread count,
 * populating SIZE bytes in 2 MiB pieces (one MADV_POPULATE_WRITE each,
 * claimed from a shared counter, as the restore's pre-faulting threads do):
 *
 *   4k      a fresh mapping with MADV_NOHUGEPAGE (what the restore does now)
 *   thp     a fresh 2 MiB-aligned mapping with MADV_HUGEPAGE
 *   thp-1m  that mapping populated, then freed in 1 MiB pieces (as 1 MiB KV
 *           chunks are evicted: each huge page is split), populated again
 *   thp-2m  the same, freed in whole 2 MiB aligned pieces
 *
 * and how much of it ended in huge pages (AnonHugePages of
 * /proc/self/smaps_rollup), since the kernel may fall back to small pages
 * (THP "never", no free 2 MiB blocks, a split range's page tables).
 *
 *   bench_prefault [-s SIZE] [-t 1,2,4,8] [-r REPEATS]
 */
#define _GNU_SOURCE
#include "core/core.h"
#include "core/parse.h"
#include "bench_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define PIECE ((size_t)2 << 20)
#define MAX_THREADS 64
#define MAX_REPS 32

enum mode { MODE_4K, MODE_THP, MODE_THP_1M, MODE_THP_2M, MODE_COUNT };
static const char *const mode_name[MODE_COUNT] = {"4k", "thp", "thp-1m", "thp-2m"};

typedef struct {
    uint8_t *base;
    size_t n_pieces;
    atomic_size_t next;
    atomic_int failed;
    pthread_barrier_t start;
} job;

static double now_s(void) { return mz_time_ms() / 1e3; }

static void *populate_worker(void *arg)
{
    job *j = arg;
    pthread_barrier_wait(&j->start);
    for (;;) {
        size_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n_pieces) break;
        if (madvise(j->base + i * PIECE, PIECE, MADV_POPULATE_WRITE) != 0) atomic_store(&j->failed, errno);
    }
    return NULL;
}

/* Populates [base, base + n) on n_threads threads; seconds, or -1. */
static double populate(uint8_t *base, size_t n, int n_threads)
{
    job j = {.base = base, .n_pieces = n / PIECE};
    atomic_init(&j.next, 0);
    atomic_init(&j.failed, 0);
    pthread_barrier_init(&j.start, NULL, (unsigned)n_threads + 1);
    pthread_t th[MAX_THREADS];
    for (int t = 0; t < n_threads; t++) pthread_create(&th[t], NULL, populate_worker, &j);
    pthread_barrier_wait(&j.start);
    double t0 = now_s();
    for (int t = 0; t < n_threads; t++) pthread_join(th[t], NULL);
    double dt = now_s() - t0;
    pthread_barrier_destroy(&j.start);
    if (atomic_load(&j.failed)) {
        fprintf(stderr, "MADV_POPULATE_WRITE failed: %s\n", strerror(atomic_load(&j.failed)));
        return -1;
    }
    return dt;
}

/* AnonHugePages of this process, in MiB; -1 if unreadable. */
static long anon_huge_mib(void)
{
    long long kib = bench_smaps_kib("AnonHugePages");
    return kib < 0 ? -1 : (long)(kib >> 10);
}

/* A 2 MiB-aligned anonymous range of n bytes (n a multiple of PIECE). */
static uint8_t *map_aligned(size_t n, size_t *span_out, uint8_t **raw_out)
{
    size_t span = n + PIECE;
    uint8_t *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    *span_out = span;
    *raw_out = raw;
    return (uint8_t *)(((uintptr_t)raw + PIECE - 1) & ~(uintptr_t)(PIECE - 1));
}

/* One measurement: seconds for the timed populate, huge MiB after it. */
static int measure(enum mode m, size_t n, int n_threads, double *secs, long *huge_mib)
{
    size_t span;
    uint8_t *raw;
    uint8_t *p = map_aligned(n, &span, &raw);
    if (!p) return -1;
    madvise(p, n, m == MODE_4K ? MADV_NOHUGEPAGE : MADV_HUGEPAGE);
    if (m == MODE_THP_1M || m == MODE_THP_2M) {
        if (populate(p, n, n_threads) < 0) return -1;
        size_t step = m == MODE_THP_1M ? PIECE / 2 : PIECE;
        for (size_t off = 0; off < n; off += step) madvise(p + off, step, MADV_DONTNEED);
    }
    long before = anon_huge_mib();
    *secs = populate(p, n, n_threads);
    long after = anon_huge_mib();
    *huge_mib = before >= 0 && after >= 0 ? after - before : -1;
    munmap(raw, span);
    return *secs < 0 ? -1 : 0;
}

static void read_setting(const char *path, char *buf, size_t cap)
{
    snprintf(buf, cap, "?");
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (!fgets(buf, (int)cap, f)) snprintf(buf, cap, "?");
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_prefault [-s SIZE, e.g. 1G] [-t 1,2,4,8] [-r REPEATS 1-%d]\n", MAX_REPS);
    return 2;
}

int main(int argc, char **argv)
{
    size_t size = (size_t)1 << 30;
    const char *threads = "1,2,4,8";
    long reps = 3;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) return usage();
        if (!strcmp(argv[i], "-s")) {
            if (mz_parse_size(argv[i + 1], &size) != 0 || size < PIECE) return usage();
            size -= size % PIECE;
        } else if (!strcmp(argv[i], "-t")) {
            threads = argv[i + 1];
        } else if (!strcmp(argv[i], "-r")) {
            char *end;
            errno = 0;
            reps = strtol(argv[i + 1], &end, 10);
            if (errno || *end || reps < 1 || reps > MAX_REPS) return usage();
        } else {
            return usage();
        }
    }
    char thp[128], defrag[128];
    read_setting("/sys/kernel/mm/transparent_hugepage/enabled", thp, sizeof thp);
    read_setting("/sys/kernel/mm/transparent_hugepage/defrag", defrag, sizeof defrag);
    printf("pre-faulting %zu MiB in 2 MiB pieces (MADV_POPULATE_WRITE), median of %ld; THP enabled: %s; "
           "defrag: %s\n\n", size >> 20, reps, thp, defrag);
    printf("| threads | mode | s/GiB | vs 4k | in huge pages |\n|---|---|---|---|---|\n");
    for (const char *q = threads; *q;) {
        char *end;
        errno = 0;
        long nt = strtol(q, &end, 10);
        if (errno || end == q || nt < 1 || nt > MAX_THREADS || (*end && *end != ',')) return usage();
        q = *end ? end + 1 : end;
        double base = 0;
        for (int m = 0; m < MODE_COUNT; m++) {
            double s[MAX_REPS];
            long huge = -1;
            for (long r = 0; r < reps; r++)
                if (measure((enum mode)m, size, (int)nt, &s[r], &huge) != 0) return 1;
            qsort(s, (size_t)reps, sizeof s[0], bench_cmp_d);
            double per_gib = s[reps / 2] / ((double)size / (double)(1 << 30));
            if (m == MODE_4K) base = per_gib;
            printf("| %ld | %s | %.3f | %.2f | %ld of %zu MiB |\n", nt, mode_name[m], per_gib,
                   base > 0 ? per_gib / base : 0.0, huge, size >> 20);
            fflush(stdout);
        }
    }
    return 0;
}
