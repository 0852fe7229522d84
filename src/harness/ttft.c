/*
 * ttft.c — `mzcache bench ttft`: the paper's TTFT evaluation (§6) on this
 * machine. For every model, context length, engine mode (mzcache and the
 * built-in baselines) and remaining-memory level it evicts a cached context
 * down to the level, empties the page cache of the model and swap files
 * (checked with mincore), and times an 8-token query restored with
 * mz_prefill_restore. Results: CSV, a markdown table with the speedup of
 * mzcache over each baseline, and gnuplot PNGs under bench/results/.
 *
 * Level 0 is each mode's FULL EVICTION: everything is asked (SIZE_MAX) and each
 * mode evicts all it can; what it could not give back is its recorded
 * remaining %, shown for every mode (no "(!)" there), and the markdown has a
 * section comparing each baseline's full eviction with mzcache's, each with
 * its own remaining %. `--levels full` is the same as 0. With --zram the
 * os-paging rows also record what the zram device holds (mm_stat: original
 * and compressed bytes, memory used) and its algorithm (this kernel offers
 * lzo/lzo-rle/lz4, no zstd): zram keeps the swapped KV in RAM, compressed, and
 * that counts as remaining, so os-paging's full eviction with zram leaves the
 * compressed KV. How much that is depends on the values, so the synthetic
 * contexts are drawn to compress as real KV does (below).
 *
 * The cached contexts are SYNTHETIC: K/V written straight into the KV chunks
 * of positions [0, N), because prefilling 32k tokens on two cores takes
 * hours. The values come from src/harness/kv_fill.c, calibrated once per model on
 * a real 512-token prefill: per-channel distributions (K before RoPE, rotated
 * to each position), so lz4, zstd and q8 treat them as they treat the
 * model's real KV (test_kv_fill: within 2 points and 20 %). Attention and
 * restore costs do not depend on the values.
 *
 * This file is a harness only: it reaches the KV chunks through harness.h
 * (mz_harness_kv_chunk) to write the synthetic context and otherwise uses the
 * public API. No kernel or policy code lives here.
 */
#define _GNU_SOURCE
#define _GNU_SOURCE

#include "ttft_impl.h"
#include "../core/core.h"
#include "harness.h" /* not public: KV fill and accessors for harnesses */
#include "mzcache_experimental.h" /* --orders, --overlaps: paper ablations */

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SMOLLM2_PATH "models/SmolLM2-135M-Instruct.Q4_1.gguf"

/* ---- small helpers ------------------------------------------------------------------ */

double ttft_now_s(void)
{
    return (double)mz_time_ns() / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ttft_median(const double *v, int n)
{
    if (n <= 0) return NAN;
    double t[MZ_TTFT_MAX_RUNS];
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

double ttft_loadavg1(void)
{
    double l[1] = {NAN};
    return getloadavg(l, 1) == 1 ? l[0] : NAN;
}

/* ---- models ------------------------------------------------------------------------ */

/* Short names for the evaluation's models; a generated one is made on first use. */
static const struct {
    const char *alias, *path, *preset, *note, *fetch;
} k_models[] = {
    {"smollm2", SMOLLM2_PATH, NULL, "real SmolLM2-135M-Instruct, Q4_1", "make model"},
    {"gemma3-270m", "models/gemma-3-270m-q4_k_m.gguf", NULL,
     "real Gemma 3 270M, Q4_K_M (sliding-window layers)", "make model MODELS=\"smollm2 gemma3\""},
    {"qwen3-0.6b", "models/qwen3-0.6b-F16.gguf", "qwen3-0.6b", "generated qwen3-0.6b shape, F16", NULL},
    {"exaone-1.2b", "models/exaone4-1.2b-F16.gguf", "exaone4-1.2b",
     "generated EXAONE-4.0-1.2B shape (qwen3 arch approximation), F16", NULL},
};

static bool file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static bool gen_progress(void *user, size_t done, size_t total)
{
    (void)user;
    static int last = -1;
    int pct = total ? (int)(100.0 * (double)done / (double)total) : 100;
    if (pct / 10 != last / 10) fprintf(stderr, "  generating: %d %%\n", pct);
    last = pct;
    return true;
}

/* Resolves an alias or a path; generates a missing preset model. */
static int resolve_model(const char *arg, char *path, size_t cap)
{
    for (size_t i = 0; i < sizeof k_models / sizeof k_models[0]; i++) {
        if (strcmp(arg, k_models[i].alias) != 0) continue;
        snprintf(path, cap, "%s", k_models[i].path);
        if (file_exists(path)) return 0;
        if (!k_models[i].preset) {
            fprintf(stderr, "mzcache bench: %s is missing (%s)\n", path, k_models[i].fetch);
            return -1;
        }
        fprintf(stderr, "mzcache bench: generating %s (preset %s, F16, vocabulary of %s)\n", path,
                k_models[i].preset, SMOLLM2_PATH);
        mz_gen_params gp = mz_gen_params_default();
        gp.preset = k_models[i].preset;
        gp.weight_type = "F16";
        gp.vocab_from = SMOLLM2_PATH;
        gp.progress = gen_progress;
        if (mz_gen_model(path, &gp)) {
            fprintf(stderr, "mzcache bench: gen-model %s: %s\n", path, mz_last_error());
            return -1;
        }
        return 0;
    }
    snprintf(path, cap, "%s", arg);
    if (!file_exists(path)) {
        fprintf(stderr, "mzcache bench: no model file '%s' (aliases: smollm2, gemma3-270m, qwen3-0.6b, exaone-1.2b)\n",
                arg);
        return -1;
    }
    return 0;
}

static const char *model_key(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

struct ttft_rows ttft_rows;

ttft_row *ttft_new_row(void)
{
    if (ttft_rows.n == ttft_rows.cap) {
        size_t cap = ttft_rows.cap ? ttft_rows.cap * 2 : 64;
        ttft_row *v = realloc(ttft_rows.v, cap * sizeof *v);
        if (!v) return NULL;
        ttft_rows.v = v, ttft_rows.cap = cap;
    }
    ttft_row *r = &ttft_rows.v[ttft_rows.n++];
    memset(r, 0, sizeof *r);
    r->load_min = INFINITY;
    r->load_max = -INFINITY;
    r->remaining_min = INFINITY;
    r->remaining_max = -INFINITY;
    r->in_tol = true;
    r->bound_s = NAN;
    return r;
}

static const char *ttft_overlap_name(mz_restore_overlap o)
{
    switch (o) {
    case MZ_OVERLAP_NONE: return "none";
    case MZ_OVERLAP_ALLOC_RELOAD: return "alloc-reload";
    case MZ_OVERLAP_RELOAD_PREFILL: return "reload-prefill";
    default: return "all";
    }
}

static int overlap_parse(const char *s, mz_restore_overlap *o)
{
    static const mz_restore_overlap all[] = {MZ_OVERLAP_ALL, MZ_OVERLAP_NONE, MZ_OVERLAP_ALLOC_RELOAD,
                                             MZ_OVERLAP_RELOAD_PREFILL};
    for (size_t i = 0; i < 4; i++)
        if (!strcmp(s, ttft_overlap_name(all[i]))) {
            *o = all[i];
            return 0;
        }
    return -1;
}

/* ---- one context: synthetic fill ------------------------------------------------- */

/* The fill is calibrated once per model from a real prefill of
 * BENCH_CALIB_TOKENS tokens of English text (src/harness/kv_fill.h), so the values
 * compress (lz4, zstd, q8) as the model's real KV does. */
#define BENCH_CALIB_TOKENS 512
static mz_kvfill *g_fill;
static char g_fill_model[4096];

/* mode: c's engine mode; the calibration context has it too (a model loaded
 * for os-paging takes os-paging contexts only). */
static int fill_synthetic(mz_ctx_t *c, size_t N, mz_engine_mode mode)
{
    const char *path = mz_harness_model_path(mz_harness_ctx_model(c));
    if (!g_fill || strcmp(g_fill_model, path) != 0) {
        mz_kvfill_free(g_fill);
        g_fill = NULL;
        mz_ctx_params cp = mz_ctx_params_default();
        cp.n_ctx = BENCH_CALIB_TOKENS;
        cp.n_threads = mz_harness_ctx_n_threads(c);
        cp.mode = mode;
        mz_ctx_t *cal = NULL;
        double t0 = ttft_now_s();
        if (mz_ctx_init(mz_harness_ctx_model(c), &cp, &cal)) return -1;
        mz_status st = mz_kvfill_calibrate_default(cal, BENCH_CALIB_TOKENS, &g_fill);
        mz_ctx_free(cal);
        if (st) return -1;
        snprintf(g_fill_model, sizeof g_fill_model, "%s", path);
        fprintf(stderr, "  KV fill calibrated on a real %d-token prefill in %.1f s\n", BENCH_CALIB_TOKENS,
                ttft_now_s() - t0);
    }
    return mz_kvfill_write(g_fill, c, N, 0x9e3779b97f4a7c15ULL) ? -1 : 0;
}

/* ---- the measurement ----------------------------------------------------------------- */

typedef struct point_cfg {
    mz_engine_mode mode;
    const char *codec, *order;
    mz_restore_overlap overlap;
} point_cfg;

static size_t evictable_total(const mz_mem_stats *ms)
{
    return ms->weights.total_bytes + ms->kv.total_bytes;
}

static size_t evicted_bytes(const mz_mem_stats *ms)
{
    return (ms->weights.total_bytes - ms->weights.resident_bytes) +
           (ms->kv.total_bytes - ms->kv.resident_bytes);
}

/* Lower bound of a restore (issue 7): the bytes to bring back over the two
 * paths' combined throughput from the device profile (decode from memory,
 * read from storage, per raw KV chunk), or the in-memory TTFT if larger. */
static double lower_bound_s(const mz_mem_stats *ms, double inmem_s)
{
    /* Without the in-memory TTFT (--no-inmem) there is no bound: the
     * transfer term alone would be far below any TTFT. */
    if (isnan(inmem_s)) return NAN;
    if (ms->kv.n_units == 0 || ms->unit_t_d_ms <= 0 || ms->unit_t_rkv_ms <= 0) return inmem_s;
    double chunk = (double)ms->kv.total_bytes / (double)ms->kv.n_units;
    double r = chunk / ms->unit_t_d_ms + chunk / ms->unit_t_rkv_ms; /* bytes per ms */
    double t = (double)evicted_bytes(ms) / r / 1e3;
    return inmem_s > t ? inmem_s : t;
}

typedef struct run_env {
    const mz_ttft_opts *o;
    const char *model_path;
    mz_model_t *m;
    mz_ctx_t *c;
    size_t N;
    mz_token *query;
    int point, n_points;
    double t_start;
    char codec[24];            /* the open context's KV codec: "auto:<chosen>" for auto */
} run_env;

static void progress_line(const run_env *e, const ttft_row *r, int run, int n_runs, double ttft,
                          double rem, size_t cached, double load, const char *extra)
{
    double el = ttft_now_s() - e->t_start;
    char lvl[24];
    if (r->level < 0) snprintf(lvl, sizeof lvl, "any");
    else if (r->level == 0) snprintf(lvl, sizeof lvl, "0%% (full eviction)");
    else snprintf(lvl, sizeof lvl, "%d%%", r->level);
    fprintf(stderr,
            "[%d/%d %4.0fs] %s ctx %d %s %s/%s/%s level %s: run %d/%d ttft %.3f s "
            "(remaining %.1f%%, cached %zu KiB, load %.2f%s)\n",
            e->point, e->n_points, el, r->model, r->n_ctx, r->mode, r->codec, r->order, r->overlap,
            lvl, run + 1, n_runs, ttft, rem, cached >> 10, load, extra ? extra : "");
}

/* Measures one (config, level) point on the prepared context. */
static int measure_level(run_env *e, const point_cfg *pc, int level, int n_runs, double inmem_s,
                         ttft_row *r)
{
    const mz_ttft_opts *o = e->o;
    double rem[MZ_TTFT_MAX_RUNS], al[MZ_TTFT_MAX_RUNS], st[MZ_TTFT_MAX_RUNS], me[MZ_TTFT_MAX_RUNS], rs[MZ_TTFT_MAX_RUNS],
        sl[MZ_TTFT_MAX_RUNS], pf[MZ_TTFT_MAX_RUNS], ev[MZ_TTFT_MAX_RUNS], lb[MZ_TTFT_MAX_RUNS], rb[MZ_TTFT_MAX_RUNS],
        rr[MZ_TTFT_MAX_RUNS], df[MZ_TTFT_MAX_RUNS], zo[MZ_TTFT_MAX_RUNS], zc[MZ_TTFT_MAX_RUNS], zu[MZ_TTFT_MAX_RUNS],
        nx[MZ_TTFT_MAX_RUNS];
    int nz = 0;
    for (int k = 0; k < n_runs; k++) {
        if (mz_ctx_truncate(e->c, e->N)) goto fail;
        mz_mem_stats ms;
        mz_get_mem_stats(e->c, &ms);
        size_t total = evictable_total(&ms);
        /* From what is held now down to the level: a gemma3 session holds
         * less than all after its first restore (chunks out of the sliding
         * windows stay stored), every other one all of it. */
        size_t held = ms.weights.resident_bytes + ms.weights.compressed_bytes +
                      ms.kv.resident_bytes + ms.kv.compressed_bytes;
        size_t keep = (size_t)floor((double)total * (double)level / 100.0);
        size_t amount = level <= 0 ? SIZE_MAX : held > keep ? held - keep : 0;
        mz_evict_report er;
        memset(&er, 0, sizeof er);
        double t0 = ttft_now_s();
        if (level < 100 && amount && mz_evict(e->c, amount, &er)) goto fail;
        ev[k] = (ttft_now_s() - t0) * 1e3;
        mz_get_mem_stats(e->c, &ms);
        rem[k] = ms.remaining_pct;
        rb[k] = (double)evicted_bytes(&ms) / (1 << 20);
        lb[k] = lower_bound_s(&ms, inmem_s);
        df[k] = ms.planned_storage_ms / 1e3;
        snprintf(r->placement, sizeof r->placement, "%s", ms.placement);
        /* Level 0 asks for everything: whatever remains is the mode's floor, shown
         * as its remaining %, not a miss. */
        if (level > 0 && (rem[k] > level + 1e-9 || rem[k] < level - o->tol)) r->in_tol = false;
        char extra[256] = "";
        if (pc->mode == MZ_MODE_OS_PAGING &&
            ttft_zram_stat(&zo[nz], &zc[nz], &zu[nz], r->zram_algo, sizeof r->zram_algo)) {
            snprintf(extra, sizeof extra, "; zram %s holds %.0f MiB as %.0f MiB (%.0f %%), uses %.0f MiB",
                     r->zram_algo, zo[nz], zc[nz], zo[nz] > 0 ? 100.0 * zc[nz] / zo[nz] : 0.0,
                     zu[nz]);
            nz++;
        }
        size_t cached = ttft_drop_caches(e->model_path, o->swap_dir, o->drop_global);
        /* Again after the drop: the state the timed restore starts from (the
         * drop can take page cache the mode's own eviction left). */
        mz_get_mem_stats(e->c, &ms);
        rr[k] = ms.remaining_pct;
        if ((double)(cached >> 10) > r->cached_kib_max) r->cached_kib_max = (double)(cached >> 10);
        double load = ttft_loadavg1();
        if (load < r->load_min) r->load_min = load;
        if (load > r->load_max) r->load_max = load;
        mz_restore_experimental rx = mz_restore_experimental_default();
        rx.overlap = pc->overlap;
        rx.lend_kv = o->lend_kv;
        rx.lend_whole = o->lend_whole;
        rx.wait_all = o->wait_all;
        mz_restore_params rp = mz_restore_params_default();
        rp.experimental = &rx;
        rp.n_restore_threads = o->restore_threads;
        mz_restore_timings tm;
        memset(&tm, 0, sizeof tm);
        t0 = ttft_now_s();
        mz_status s = mz_prefill_restore(e->c, e->query, (size_t)o->query, &rp, &tm);
        double t = ttft_now_s() - t0;
        if (s || !mz_ctx_logits(e->c)) goto fail;
        r->ttft[k] = t;
        /* The next token at once, before anything waits for the restore:
         * what going on after the request costs the one after the first. */
        const float *lg = mz_ctx_logits(e->c);
        mz_token next = 0;
        for (int v = 1; v < mz_model_n_vocab(e->m); v++)
            if (lg[v] > lg[next]) next = v;
        t0 = ttft_now_s();
        if (mz_prefill(e->c, &next, 1)) goto fail;
        nx[k] = (ttft_now_s() - t0) * 1e3;
        /* The memory path may go on after the call (mzcache.h): the complete
         * breakdown once it is done. */
        mz_get_last_restore_timings(e->c, &tm);
        al[k] = tm.alloc_ms, st[k] = tm.storage_ms, me[k] = tm.mem_ms, rs[k] = tm.restore_ms;
        sl[k] = tm.stall_ms, pf[k] = tm.prefill_ms;
        if (rem[k] < r->remaining_min) r->remaining_min = rem[k];
        if (rem[k] > r->remaining_max) r->remaining_max = rem[k];
        if (tm.n_restore_threads) {
            size_t n = strlen(extra);
            snprintf(extra + n, sizeof extra - n,
                     "; %d restore threads, alloc %.0f ms, ready %.0f ms, %zu chunks lent, next token %.0f ms",
                     tm.n_restore_threads, tm.alloc_ms, tm.restore_ms, tm.n_lent, nx[k]);
        }
        progress_line(e, r, k, n_runs, t, rem[k], cached, load, extra);
    }
    if (mz_ctx_truncate(e->c, e->N)) goto fail;
    r->remaining_restore_med = ttft_median(rr, n_runs);
    if (nz) {
        r->zram_orig_mib = ttft_median(zo, nz);
        r->zram_compr_mib = ttft_median(zc, nz);
        r->zram_used_mib = ttft_median(zu, nz);
    }
    r->n_runs = n_runs;
    r->ttft_med = ttft_median(r->ttft, n_runs);
    r->remaining_med = ttft_median(rem, n_runs);
    r->alloc_ms = ttft_median(al, n_runs), r->storage_ms = ttft_median(st, n_runs);
    r->mem_ms = ttft_median(me, n_runs), r->restore_ms = ttft_median(rs, n_runs);
    r->stall_ms = ttft_median(sl, n_runs), r->prefill_ms = ttft_median(pf, n_runs);
    r->next_ms = ttft_median(nx, n_runs);
    r->evict_ms = ttft_median(ev, n_runs);
    r->bound_s = ttft_median(lb, n_runs);
    r->restore_mib = ttft_median(rb, n_runs);
    r->disk_floor_s = ttft_median(df, n_runs);
    return 0;
fail:
    fprintf(stderr, "mzcache bench: %s ctx %zu %s level %d: %s\n", r->model, e->N, r->mode, level,
            mz_ctx_errmsg(e->c));
    snprintf(r->note, sizeof r->note, "failed: %.140s", mz_ctx_errmsg(e->c));
    r->skipped = true;
    return -1;
}

/* In-memory TTFT: nothing evicted, warm (one warm-up query first). */
static double measure_inmem(run_env *e, ttft_row *r)
{
    const mz_ttft_opts *o = e->o;
    for (int k = -1; k < o->runs; k++) {
        double load = ttft_loadavg1();
        double t0 = ttft_now_s();
        if (mz_prefill(e->c, e->query, (size_t)o->query) || !mz_ctx_logits(e->c)) return NAN;
        double t = ttft_now_s() - t0;
        if (mz_ctx_truncate(e->c, e->N)) return NAN;
        if (k < 0) continue;
        r->ttft[k] = t;
        if (load < r->load_min) r->load_min = load;
        if (load > r->load_max) r->load_max = load;
        progress_line(e, r, k, o->runs, t, 100.0, 0, load, NULL);
    }
    r->n_runs = o->runs;
    r->ttft_med = ttft_median(r->ttft, o->runs);
    r->remaining_med = r->remaining_min = r->remaining_max = r->remaining_restore_med = 100.0;
    r->bound_s = r->ttft_med;
    return r->ttft_med;
}

/* codec: the KV codec to name (the open context's, e->codec, once there is one). */
static void row_id(ttft_row *r, const char *model, int n_ctx, const point_cfg *pc, const char *codec,
                   int level)
{
    snprintf(r->model, sizeof r->model, "%s", model);
    r->n_ctx = n_ctx;
    snprintf(r->mode, sizeof r->mode, "%s", mz_engine_mode_name(pc->mode));
    snprintf(r->codec, sizeof r->codec, "%s", pc->mode == MZ_MODE_MZCACHE ? codec : "-");
    snprintf(r->order, sizeof r->order, "%s", pc->mode == MZ_MODE_MZCACHE ? pc->order : "-");
    snprintf(r->overlap, sizeof r->overlap, "%s",
             pc->mode == MZ_MODE_MZCACHE ? ttft_overlap_name(pc->overlap) : "-");
    r->level = level;
}

/* Opens model + context for one config, with the synthetic context. */
static int open_ctx(run_env *e, const point_cfg *pc)
{
    const mz_ttft_opts *o = e->o;
    mz_model_params mp = mz_model_params_default();
    mp.n_threads = o->threads;
    if (mz_model_load(e->model_path, &mp, &e->m)) {
        fprintf(stderr, "mzcache bench: load %s: %s\n", e->model_path, mz_last_error());
        return -1;
    }
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = (int)e->N + o->query + 16;
    cp.n_threads = o->threads;
    cp.kv_codec = pc->codec;
    cp.swap_dir = o->swap_dir;
    cp.profile_path = o->profile;
    cp.mode = pc->mode;
    mz_ctx_experimental xp = mz_ctx_experimental_default();
    if (mz_evict_order_parse(pc->order, &xp.evict_order)) return -1;
    xp.swa_full = o->swa_full;
    cp.experimental = &xp;
    if (mz_ctx_init(e->m, &cp, &e->c)) {
        fprintf(stderr, "mzcache bench: context (%s): %s\n", mz_engine_mode_name(pc->mode),
                mz_last_error());
        mz_model_free(e->m);
        e->m = NULL;
        return -1;
    }
    mz_mem_stats ms;
    mz_get_mem_stats(e->c, &ms);
    bool is_auto = strcmp(pc->codec, "auto") == 0;
    snprintf(e->codec, sizeof e->codec, "%s%s", is_auto ? "auto:" : "", is_auto ? ms.codec : pc->codec);
    if (is_auto && pc->mode == MZ_MODE_MZCACHE) fprintf(stderr, "  KV codec: %s\n", e->codec);
    double t0 = ttft_now_s();
    if (fill_synthetic(e->c, e->N, pc->mode)) {
        fprintf(stderr, "mzcache bench: synthetic context of %zu tokens: %s\n", e->N, mz_last_error());
        return -1;
    }
    fprintf(stderr, "  synthetic context: %zu tokens (%.0f MiB of KV) written in %.1f s\n", e->N,
            (double)mz_harness_kv_bytes(e->c) / (1 << 20), ttft_now_s() - t0);
    mz_get_mem_stats(e->c, &ms);
    if (ms.kv_out_of_window.total_bytes || o->swa_full)
        fprintf(stderr, "  KV held for the next token: %.1f MiB of %.1f MiB (%.1f MiB out of the "
                "sliding windows%s)\n",
                (double)(ms.kv.total_bytes - ms.kv_out_of_window.total_bytes) / (1 << 20),
                (double)ms.kv.total_bytes / (1 << 20),
                (double)ms.kv_out_of_window.total_bytes / (1 << 20),
                o->swa_full ? "; --swa-full: every layer's history held" : "");
    return 0;
}

static void close_ctx(run_env *e)
{
    mz_ctx_free(e->c);
    mz_model_free(e->m);
    e->c = NULL;
    e->m = NULL;
}

/* ---- the run ---------------------------------------------------------------------- */

int mz_ttft_run(const mz_ttft_opts *opts, const char *cmdline)
{
    mz_ttft_opts o = *opts;
    mz_engine_mode modes[MZ_TTFT_MAX_LIST];
    for (int i = 0; i < o.n_modes; i++)
        if (mz_engine_mode_parse(o.modes[i], &modes[i])) {
            fprintf(stderr, "mzcache bench ttft: %s\n", mz_last_error());
            return 2;
        }
    mz_restore_overlap ovl[MZ_TTFT_MAX_LIST];
    for (int i = 0; i < o.n_overlaps; i++)
        if (overlap_parse(o.overlaps[i], &ovl[i])) {
            fprintf(stderr, "mzcache bench ttft: unknown overlap '%s'\n", o.overlaps[i]);
            return 2;
        }
    for (int i = 0; i < o.n_levels; i++)
        if (o.levels[i] < 0 || o.levels[i] > 99) {
            fprintf(stderr, "mzcache bench ttft: levels are 0..99 %% remaining, or full (= 0)\n");
            return 2;
        }
    /* Resolve models (keys = file names, used in every output). */
    static char paths[MZ_TTFT_MAX_LIST][PATH_MAX];
    const char *model_alias[MZ_TTFT_MAX_LIST];
    for (int i = 0; i < o.n_models; i++) {
        model_alias[i] = o.models[i];
        if (resolve_model(o.models[i], paths[i], sizeof paths[i])) return 1;
        o.models[i] = model_key(paths[i]);
    }
    if (ttft_mkdir_p(o.swap_dir, 0700) || ttft_mkdir_p(o.out_dir, 0755)) return 1;

    /* Configs: every combination of the mzcache variants, one per baseline. */
    point_cfg cfgs[MZ_TTFT_MAX_LIST * 8];
    int n_cfg = 0;
    for (int mi = 0; mi < o.n_modes; mi++) {
        if (modes[mi] != MZ_MODE_MZCACHE) {
            cfgs[n_cfg++] = (point_cfg){modes[mi], o.codecs[0], o.orders[0], MZ_OVERLAP_ALL};
            continue;
        }
        for (int a = 0; a < o.n_codecs; a++)
            for (int b = 0; b < o.n_orders; b++)
                for (int d = 0; d < o.n_overlaps && n_cfg < MZ_TTFT_MAX_LIST * 8 - 4; d++)
                    cfgs[n_cfg++] = (point_cfg){MZ_MODE_MZCACHE, o.codecs[a], o.orders[b], ovl[d]};
    }
    int n_points = 0;
    for (int k = 0; k < n_cfg; k++) n_points += cfgs[k].mode == MZ_MODE_RECOMPUTE ? 1 : o.n_levels;
    n_points = n_points * o.n_models * o.n_ctxs + (o.inmem ? o.n_models * o.n_ctxs : 0);

    char stamp[64];
    time_t tt = time(NULL);
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M", localtime(&tt));
    fprintf(stderr, "mzcache bench ttft: %d models x %d contexts, %d configs, %d levels, %d runs: %d points "
                    "(synthetic contexts; isa %s, q8 codec %s; load %.2f)\n",
            o.n_models, o.n_ctxs, n_cfg, o.n_levels, o.runs, n_points, mz_harness_isa(),
            mz_harness_q8_isa(), ttft_loadavg1());

    run_env e;
    memset(&e, 0, sizeof e);
    e.o = &o;
    e.n_points = n_points;
    e.t_start = ttft_now_s();
    int rc = 0;
    for (int mi = 0; mi < o.n_models; mi++) {
        e.model_path = paths[mi];
        for (int ci = 0; ci < o.n_ctxs; ci++) {
            e.N = (size_t)o.ctxs[ci];
            double inmem = NAN;
            for (int k = 0; k < n_cfg; k++) {
                const point_cfg *pc = &cfgs[k];
                bool recompute = pc->mode == MZ_MODE_RECOMPUTE;
                bool rc_model = o.n_recompute_models == 0;
                for (int k2 = 0; k2 < o.n_recompute_models; k2++)
                    rc_model = rc_model || !strcmp(o.recompute_models[k2], o.models[mi]) ||
                               !strcmp(o.recompute_models[k2], model_alias[mi]) ||
                               !strcmp(o.recompute_models[k2], paths[mi]);
                if (recompute && !rc_model) {
                    ttft_row *r = ttft_new_row();
                    if (!r) return 1;
                    row_id(r, o.models[mi], o.ctxs[ci], pc, pc->codec, -1);
                    r->skipped = true;
                    snprintf(r->note, sizeof r->note, "skipped: recompute not requested for this model "
                                                      "(--recompute-models)");
                    e.point++;
                    continue;
                }
                if (recompute && o.recompute_max_ctx > 0 && o.ctxs[ci] > o.recompute_max_ctx) {
                    ttft_row *r = ttft_new_row();
                    if (!r) return 1;
                    row_id(r, o.models[mi], o.ctxs[ci], pc, pc->codec, -1);
                    r->skipped = true;
                    snprintf(r->note, sizeof r->note, "skipped: recompute above %d tokens takes too long",
                             o.recompute_max_ctx);
                    e.point++;
                    continue;
                }
                fprintf(stderr, "%s, %d tokens, %s (codec %s, order %s, overlap %s)\n", o.models[mi],
                        o.ctxs[ci], mz_engine_mode_name(pc->mode), pc->codec, pc->order,
                        ttft_overlap_name(pc->overlap));
                /* Random weights everywhere but in the real model: reuse the file. */
                e.query = NULL;
                if (open_ctx(&e, pc)) {
                    ttft_row *r = ttft_new_row();
                    if (!r) return 1;
                    row_id(r, o.models[mi], o.ctxs[ci], pc, pc->codec, recompute ? -1 : o.levels[0]);
                    r->skipped = true;
                    snprintf(r->note, sizeof r->note, "unavailable: %.140s", mz_last_error());
                    close_ctx(&e);
                    e.point += recompute ? 1 : o.n_levels;
                    rc = 1;
                    continue;
                }
                /* os-paging: anonymous KV pages go to swap; room for all of them. */
                if (pc->mode == MZ_MODE_OS_PAGING && o.zram)
                    (void)ttft_zram_up(mz_harness_kv_bytes(e.c) / 4 * 5 + ((size_t)256 << 20));
                if (pc->mode == MZ_MODE_OS_PAGING) {
                    /* Everything resident to begin with, as after a query: the weights
                     * are faulted in through the file mapping (the loader may have
                     * left only part of the file in the page cache). */
                    mz_mem_stats ms;
                    if (mz_restore(e.c, NULL))
                        fprintf(stderr, "mzcache bench: os-paging restore: %s\n", mz_ctx_errmsg(e.c));
                    mz_get_mem_stats(e.c, &ms);
                    fprintf(stderr, "  os-paging: %.1f %% resident before the first eviction\n",
                            ms.remaining_pct);
                }
                mz_token q[512];
                int nv = mz_model_n_vocab(e.m);
                for (int i = 0; i < o.query && i < 512; i++) q[i] = (mz_token)((1000 + 37 * i) % nv);
                e.query = q;
                if (o.inmem && isnan(inmem) && pc->mode == MZ_MODE_MZCACHE) {
                    ttft_row *r = ttft_new_row();
                    if (!r) return 1;
                    row_id(r, o.models[mi], o.ctxs[ci], pc, e.codec, 100);
                    e.point++;
                    inmem = measure_inmem(&e, r);
                    if (isnan(inmem)) {
                        r->skipped = true;
                        rc = 1;
                    }
                }
                if (recompute) {
                    ttft_row *r = ttft_new_row();
                    if (!r) return 1;
                    row_id(r, o.models[mi], o.ctxs[ci], pc, e.codec, -1);
                    e.point++;
                    if (measure_level(&e, pc, 0, o.recompute_runs, inmem, r)) rc = 1;
                    snprintf(r->note + strlen(r->note), sizeof r->note - strlen(r->note),
                             "%sany level: everything is dropped", r->note[0] ? "; " : "");
                } else {
                    for (int li = 0; li < o.n_levels; li++) {
                        ttft_row *r = ttft_new_row();
                        if (!r) return 1;
                        row_id(r, o.models[mi], o.ctxs[ci], pc, e.codec, o.levels[li]);
                        e.point++;
                        if (measure_level(&e, pc, o.levels[li], o.runs, inmem, r)) {
                            rc = 1;
                            break;
                        }
                    }
                }
                close_ctx(&e);
                if (pc->mode == MZ_MODE_OS_PAGING) ttft_zram_down();
            }
        }
    }
    ttft_zram_down();

    char path[PATH_MAX], plots[8192];
    plots[0] = 0;
    snprintf(path, sizeof path, "%s/%s.csv", o.out_dir, o.name);
    if (ttft_write_csv(path, stamp)) fprintf(stderr, "mzcache bench: cannot write %s\n", path);
    else fprintf(stderr, "  wrote %s\n", path);
    if (o.plot) ttft_write_plots(&o, o.name, plots, sizeof plots);
    snprintf(path, sizeof path, "%s/%s.md", o.out_dir, o.name);
    if (ttft_write_md(path, &o, stamp, cmdline, plots)) fprintf(stderr, "mzcache bench: cannot write %s\n", path);
    else fprintf(stderr, "  wrote %s (%.0f s in all)\n", path, ttft_now_s() - e.t_start);
    free(ttft_rows.v);
    ttft_rows.v = NULL;
    ttft_rows.n = ttft_rows.cap = 0;
    return rc;
}
