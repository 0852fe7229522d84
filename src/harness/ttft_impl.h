/*
 * ttft_impl.h — shared by the files of the TTFT evaluation (ttft.c measures,
 * ttft_sys.c changes the machine around it, ttft_report.c writes the results).
 */
#ifndef MZ_HARNESS_TTFT_IMPL_H
#define MZ_HARNESS_TTFT_IMPL_H

#include "ttft.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct ttft_row {
    char model[96];
    int n_ctx;
    char mode[20], codec[24], order[12], overlap[16];
    int level;                 /* requested remaining %, 100 = nothing evicted */
    int n_runs;
    double ttft[MZ_TTFT_MAX_RUNS];    /* s */
    double ttft_med, remaining_med, remaining_max, remaining_min;
    double alloc_ms, storage_ms, mem_ms, restore_ms, stall_ms, prefill_ms;
    double next_ms;            /* the token after the first: one more forward step at once
                                  (a restore from memory may still be going on) */
    double evict_ms;
    double bound_s;            /* lower bound max(in-memory TTFT, bytes / combined path throughput) */
    double restore_mib;        /* evicted bytes to bring back (ttft_median) */
    double disk_floor_s;       /* reading every stored chunk and dropped block at the device
                                  profile's rates (mz_mem_stats.planned_storage_ms after the
                                  eviction, ttft_median): the time no restore from this
                                  placement can beat; 0 when nothing is on storage */
    double cached_kib_max;     /* page cache of model + swap files before the restore (max over runs) */
    double load_min, load_max;
    double remaining_restore_med; /* remaining % measured again after the page-cache drop */
    char placement[24];        /* where the mode's evicted KV went (mz_mem_stats.placement) */
    char zram_algo[16];        /* os-paging with --zram: the device's algorithm, else "" */
    double zram_orig_mib, zram_compr_mib, zram_used_mib; /* its mm_stat after the eviction (ttft_median) */
    bool in_tol;               /* every run within the ±tolerance of the level, at or below it
                                  (level 0, full eviction: always; the remaining % says it) */
    bool skipped;
    char note[160];
} ttft_row;

/* Every row measured or skipped, in run order (owned by ttft.c). */
extern struct ttft_rows {
    ttft_row *v;
    size_t n, cap;
} ttft_rows;

/* ttft.c */
double ttft_now_s(void);                        /* monotonic */
double ttft_median(const double *v, int n);     /* n <= MZ_TTFT_MAX_RUNS; NAN for n <= 0 */
double ttft_loadavg1(void);
ttft_row *ttft_new_row(void);                   /* appended to ttft_rows; NULL when out of memory */

/* ttft_sys.c */
int ttft_mkdir_p(const char *dir, mode_t mode);
/* Empties the page cache of the model and swap files; returns the bytes of
 * them still cached afterwards (mincore). As root, with global, also drops
 * the whole page cache. */
size_t ttft_drop_caches(const char *model, const char *swap_dir, bool global);
/* A zram swap device of size bytes for os-paging (root); -1 when there is none. */
int ttft_zram_up(size_t bytes);
void ttft_zram_down(void);
/* What the zram device holds now and its algorithm; false when there is none. */
bool ttft_zram_stat(double *orig_mib, double *compr_mib, double *used_mib, char *algo, size_t cap);

/* ttft_report.c */
int ttft_write_csv(const char *path, const char *stamp);
int ttft_write_md(const char *path, const mz_ttft_opts *o, const char *stamp, const char *cmdline,
                  const char *plots);
/* One PNG per (model, ctx) through gnuplot; their markdown links into md. */
void ttft_write_plots(const mz_ttft_opts *o, const char *stem, char *md, size_t cap);

#endif /* MZ_HARNESS_TTFT_IMPL_H */
