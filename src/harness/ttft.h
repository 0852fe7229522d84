/*
 * ttft.h — NOT PUBLIC. The paper's TTFT evaluation (section 6) as a module of
 * the harness, outside the user's command: `mzcache bench ttft` (app/cli/bench.c)
 * parses its options into mz_ttft_opts and calls mz_ttft_run. Built as its own
 * static library (mzcache_ttft), not into libmzcache: it drops page caches and
 * sets up zram swap through system() (ttft_sys.c).
 */
#ifndef MZ_HARNESS_TTFT_H
#define MZ_HARNESS_TTFT_H

#include <stdbool.h>

/* Most items of one comma list; most runs of one point. */
#define MZ_TTFT_MAX_LIST 16
#define MZ_TTFT_MAX_RUNS 64

/* Everything a run is given, already split into lists; strings are borrowed
 * for the run. runs, recompute_runs in [1, MZ_TTFT_MAX_RUNS]; every list has
 * at least one item. */
typedef struct mz_ttft_opts {
    const char *models[MZ_TTFT_MAX_LIST];
    int n_models;
    int ctxs[MZ_TTFT_MAX_LIST];
    int n_ctxs;
    int levels[MZ_TTFT_MAX_LIST];
    int n_levels;
    const char *modes[MZ_TTFT_MAX_LIST];
    int n_modes;
    const char *codecs[MZ_TTFT_MAX_LIST];
    int n_codecs;
    const char *orders[MZ_TTFT_MAX_LIST];
    int n_orders;
    const char *overlaps[MZ_TTFT_MAX_LIST];
    int n_overlaps;
    const char *recompute_models[MZ_TTFT_MAX_LIST]; /* aliases/paths/keys; none = every model */
    int n_recompute_models;
    int runs, recompute_runs, recompute_max_ctx, query, threads;
    int restore_threads;       /* mz_restore_params.n_restore_threads (0: the profile's split) */
    int lend_kv;               /* mz_restore_experimental.lend_kv (0 auto, 1 on, -1 off) */
    bool lend_whole;           /* mz_restore_experimental.lend_whole */
    bool wait_all;             /* mz_restore_experimental.wait_all */
    double tol;
    const char *swap_dir, *profile, *out_dir, *name, *peer_csv, *title;
    bool plot, drop_global, inmem, zram;
    bool swa_full;             /* sliding-window layers keep their whole history (gemma3) */
} mz_ttft_opts;

/* Measures every (model, context, config, level) point and writes
 * out_dir/name.csv, .md and the PNGs; cmdline is quoted in the markdown.
 * 0 when every point was measured, 1 when one failed or a model or directory
 * is missing, 2 for an unknown mode, overlap or a level outside 0..99. */
int mz_ttft_run(const mz_ttft_opts *opts, const char *cmdline);

#endif /* MZ_HARNESS_TTFT_H */
