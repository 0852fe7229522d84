/*
 * bench.c — `mzcache bench ttft`: the paper's TTFT evaluation (§6) on this
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
 * hours. The values come from src/kv/kv_fill.c, calibrated once per model on
 * a real 512-token prefill: per-channel distributions (K before RoPE, rotated
 * to each position), so lz4, zstd and q8 treat them as they treat the
 * model's real KV (test_kv_fill: within 2 points and 20 %). Attention and
 * restore costs do not depend on the values.
 *
 * This file is a harness only: it reaches the KV chunks through the engine's
 * internal header to write the synthetic context and otherwise uses the
 * public API. No kernel or policy code lives here.
 */
#define _GNU_SOURCE
#include "cli.h"
#include "mzcache_experimental.h" /* --orders, --overlaps: paper ablations */

#include "harness/harness.h" /* not public: KV fill and accessors for harnesses */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define BMAX_LIST 16
#define BMAX_RUNS 64
#define SMOLLM2_PATH "models/SmolLM2-135M-Instruct.Q4_1.gguf"

/* ---- small helpers ------------------------------------------------------------------ */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n)
{
    if (n <= 0) return NAN;
    double t[BMAX_RUNS];
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static double loadavg1(void)
{
    double l[1] = {NAN};
    return getloadavg(l, 1) == 1 ? l[0] : NAN;
}

/* Splits a comma list into at most BMAX_LIST items (the string is modified). */
static int split_list(char *s, const char **out)
{
    int n = 0;
    for (char *save = NULL, *t = strtok_r(s, ",", &save); t && n < BMAX_LIST;
         t = strtok_r(NULL, ",", &save))
        out[n++] = t;
    return n;
}

static int mkdir_p(const char *dir, mode_t mode)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, mode) && errno != EEXIST) break;
            *s = '/';
        }
    if (mkdir(p, mode) && errno != EEXIST) {
        fprintf(stderr, "mzcache bench: mkdir %s: %s\n", dir, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- page cache: drop and check --------------------------------------------------- */

static void fadvise_dontneed(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

/* Bytes of the file present in the page cache (mincore over a read-only map). */
static size_t cached_bytes(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat st;
    size_t got = 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
        size_t len = (size_t)st.st_size, pg = (size_t)sysconf(_SC_PAGESIZE);
        void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            size_t np = (len + pg - 1) / pg;
            unsigned char *vec = malloc(np);
            if (vec && mincore(p, len, vec) == 0)
                for (size_t i = 0; i < np; i++) got += (vec[i] & 1) ? pg : 0;
            free(vec);
            munmap(p, len);
        }
    }
    close(fd);
    return got;
}

/* Calls fn on every regular file directly inside dir. */
static void for_dir_files(const char *dir, void (*fn)(const char *, void *), void *user)
{
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) return;
    struct dirent *e;
    char path[PATH_MAX];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) fn(path, user);
    }
    closedir(d);
}

static void drop_one(const char *path, void *user)
{
    (void)user;
    fadvise_dontneed(path);
}

static void count_one(const char *path, void *user)
{
    *(size_t *)user += cached_bytes(path);
}

/* Empties the page cache of the model and swap files; returns the bytes of
 * them still cached afterwards (mincore). As root also drops the whole page
 * cache (/proc/sys/vm/drop_caches). */
static size_t drop_caches(const char *model, const char *swap_dir, bool global)
{
    fadvise_dontneed(model);
    for_dir_files(swap_dir, drop_one, NULL);
    if (global && geteuid() == 0) {
        sync();
        int fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            if (write(fd, "3\n", 2) != 2) { /* not fatal: fadvise did the files */ }
            close(fd);
        }
    }
    size_t left = cached_bytes(model);
    for_dir_files(swap_dir, count_one, &left);
    return left;
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

/* ---- results ----------------------------------------------------------------------- */

typedef struct bench_row {
    char model[96];
    int n_ctx;
    char mode[20], codec[16], order[12], overlap[16];
    int level;                 /* requested remaining %, 100 = nothing evicted */
    int n_runs;
    double ttft[BMAX_RUNS];    /* s */
    double ttft_med, remaining_med, remaining_max, remaining_min;
    double alloc_ms, storage_ms, mem_ms, restore_ms, stall_ms, prefill_ms;
    double evict_ms;
    double bound_s;            /* lower bound max(in-memory TTFT, bytes / combined path throughput) */
    double restore_mib;        /* evicted bytes to bring back (median) */
    double cached_kib_max;     /* page cache of model + swap files before the restore (max over runs) */
    double load_min, load_max;
    double remaining_restore_med; /* remaining % measured again after the page-cache drop */
    char placement[24];        /* where the mode's evicted KV went (mz_mem_stats.placement) */
    char zram_algo[16];        /* os-paging with --zram: the device's algorithm, else "" */
    double zram_orig_mib, zram_compr_mib, zram_used_mib; /* its mm_stat after the eviction (median) */
    bool in_tol;               /* every run within the ±tolerance of the level, at or below it
                                  (level 0, full eviction: always; the remaining % says it) */
    bool skipped;
    char note[160];
} bench_row;

typedef struct bench_opts {
    const char *models[BMAX_LIST];
    int n_models;
    int ctxs[BMAX_LIST];
    int n_ctxs;
    int levels[BMAX_LIST];
    int n_levels;
    const char *modes[BMAX_LIST];
    int n_modes;
    const char *codecs[BMAX_LIST];
    int n_codecs;
    const char *orders[BMAX_LIST];
    int n_orders;
    const char *overlaps[BMAX_LIST];
    int n_overlaps;
    const char *recompute_models[BMAX_LIST]; /* aliases/paths/keys; none = every model */
    int n_recompute_models;
    int runs, recompute_runs, recompute_max_ctx, query, threads;
    int restore_threads;       /* mz_restore_params.n_restore_threads (0: the profile's split) */
    double tol;
    const char *swap_dir, *profile, *out_dir, *name, *peer_csv, *title;
    bool plot, drop_global, inmem, zram;
    bool swa_full;             /* sliding-window layers keep their whole history (gemma3) */
} bench_opts;

static struct {
    bench_row *v;
    size_t n, cap;
} g_rows;

static bench_row *new_row(void)
{
    if (g_rows.n == g_rows.cap) {
        size_t cap = g_rows.cap ? g_rows.cap * 2 : 64;
        bench_row *v = realloc(g_rows.v, cap * sizeof *v);
        if (!v) return NULL;
        g_rows.v = v, g_rows.cap = cap;
    }
    bench_row *r = &g_rows.v[g_rows.n++];
    memset(r, 0, sizeof *r);
    r->load_min = INFINITY;
    r->load_max = -INFINITY;
    r->remaining_min = INFINITY;
    r->remaining_max = -INFINITY;
    r->in_tol = true;
    r->bound_s = NAN;
    return r;
}

static const char *overlap_name(mz_restore_overlap o)
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
        if (!strcmp(s, overlap_name(all[i]))) {
            *o = all[i];
            return 0;
        }
    return -1;
}

/* ---- one context: synthetic fill ------------------------------------------------- */

/* The fill is calibrated once per model from a real prefill of
 * BENCH_CALIB_TOKENS tokens of English text (src/kv/kv_fill.h), so the values
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
        double t0 = now_s();
        if (mz_ctx_init(mz_harness_ctx_model(c), &cp, &cal)) return -1;
        mz_status st = mz_kvfill_calibrate_default(cal, BENCH_CALIB_TOKENS, &g_fill);
        mz_ctx_free(cal);
        if (st) return -1;
        snprintf(g_fill_model, sizeof g_fill_model, "%s", path);
        fprintf(stderr, "  KV fill calibrated on a real %d-token prefill in %.1f s\n", BENCH_CALIB_TOKENS,
                now_s() - t0);
    }
    return mz_kvfill_write(g_fill, c, N, 0x9e3779b97f4a7c15ULL) ? -1 : 0;
}

/* ---- zram swap for os-paging -------------------------------------------------------- */

static int g_zram_id = -1;
static bool g_zram_script; /* set up by scripts/zram-swap.sh */

static int sh(const char *cmd)
{
    int rc = system(cmd);
    if (rc != 0) fprintf(stderr, "mzcache bench: '%s' failed (%d)\n", cmd, rc);
    return rc;
}

static void zram_down(void)
{
    if (g_zram_id < 0) return;
    char cmd[256];
    if (g_zram_script) {
        snprintf(cmd, sizeof cmd, "scripts/zram-swap.sh down /dev/zram%d", g_zram_id);
        (void)sh(cmd);
        fprintf(stderr, "mzcache bench: zram%d swap removed\n", g_zram_id);
        g_zram_id = -1;
        g_zram_script = false;
        return;
    }
    snprintf(cmd, sizeof cmd, "swapoff /dev/zram%d", g_zram_id);
    (void)sh(cmd);
    snprintf(cmd, sizeof cmd, "echo %d > /sys/class/zram-control/hot_remove", g_zram_id);
    (void)sh(cmd);
    fprintf(stderr, "mzcache bench: zram%d swap removed\n", g_zram_id);
    g_zram_id = -1;
}

static void on_signal(int sig)
{
    zram_down(); /* not async-signal-safe, but the run is being abandoned anyway */
    signal(sig, SIG_DFL);
    raise(sig);
}

/* A zram swap device of size bytes (zstd as Android does, where available). */
static int zram_up(size_t bytes)
{
    if (g_zram_id >= 0) return 0;
    if (geteuid() != 0) {
        fprintf(stderr, "mzcache bench: --zram needs root; os-paging uses its file-backed fallback\n");
        return -1;
    }
    /* The baselines' own set-up script when present (run from the repository root). */
    if (access("scripts/zram-swap.sh", X_OK) == 0) {
        char cmd[128], dev[64] = "";
        snprintf(cmd, sizeof cmd, "scripts/zram-swap.sh up %zu", bytes);
        FILE *p = popen(cmd, "r");
        int id = -1;
        if (p && fgets(dev, sizeof dev, p) && sscanf(dev, "/dev/zram%d", &id) == 1) g_zram_id = id;
        if (p && pclose(p) != 0) g_zram_id = -1;
        if (g_zram_id < 0) {
            fprintf(stderr, "mzcache bench: scripts/zram-swap.sh up failed; os-paging uses its "
                            "file-backed fallback\n");
            return -1;
        }
        g_zram_script = true;
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        fprintf(stderr, "mzcache bench: zram%d swap up (%zu MiB, scripts/zram-swap.sh)\n", id, bytes >> 20);
        return 0;
    }
    FILE *f = fopen("/sys/class/zram-control/hot_add", "r");
    int id = -1;
    if (!f || fscanf(f, "%d", &id) != 1) {
        if (f) fclose(f);
        fprintf(stderr, "mzcache bench: no zram here; os-paging uses its file-backed fallback\n");
        return -1;
    }
    fclose(f);
    g_zram_id = id;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    char cmd[256];
    /* zstd as Android does where the kernel has it, else lz4, else the default. */
    const char *algo = "default";
    static const char *const algos[] = {"zstd", "lz4"};
    for (int k = 0; k < 2 && !strcmp(algo, "default"); k++) {
        snprintf(cmd, sizeof cmd, "echo %s > /sys/block/zram%d/comp_algorithm 2>/dev/null", algos[k], id);
        if (system(cmd) == 0) algo = algos[k];
    }
    snprintf(cmd, sizeof cmd, "echo %zu > /sys/block/zram%d/disksize", bytes, id);
    if (sh(cmd)) goto fail;
    snprintf(cmd, sizeof cmd, "mkswap /dev/zram%d >/dev/null && swapon -p 100 /dev/zram%d", id, id);
    if (sh(cmd)) goto fail;
    fprintf(stderr, "mzcache bench: zram%d swap up (%zu MiB, %s)\n", id, bytes >> 20, algo);
    return 0;
fail:
    zram_down();
    return -1;
}

/* What our zram device holds now (/sys/block/zramN/mm_stat: orig_data_size,
 * compr_data_size, mem_used_total) and its algorithm (the bracketed entry of
 * comp_algorithm). False when there is none. */
static bool zram_stat(double *orig_mib, double *compr_mib, double *used_mib, char *algo, size_t cap)
{
    if (g_zram_id < 0) return false;
    char path[96];
    snprintf(path, sizeof path, "/sys/block/zram%d/mm_stat", g_zram_id);
    FILE *f = fopen(path, "r");
    unsigned long long o = 0, c = 0, u = 0;
    bool ok = f && fscanf(f, "%llu %llu %llu", &o, &c, &u) == 3;
    if (f) fclose(f);
    if (!ok) return false;
    *orig_mib = (double)o / (1 << 20);
    *compr_mib = (double)c / (1 << 20);
    *used_mib = (double)u / (1 << 20);
    snprintf(path, sizeof path, "/sys/block/zram%d/comp_algorithm", g_zram_id);
    snprintf(algo, cap, "?");
    char line[256];
    if ((f = fopen(path, "r"))) {
        if (fgets(line, sizeof line, f)) {
            char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
            if (a && b && b - a - 1 < (long)cap) snprintf(algo, cap, "%.*s", (int)(b - a - 1), a + 1);
        }
        fclose(f);
    }
    return true;
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
    const bench_opts *o;
    const char *model_path;
    mz_model_t *m;
    mz_ctx_t *c;
    size_t N;
    mz_token *query;
    int point, n_points;
    double t_start;
} run_env;

static void progress_line(const run_env *e, const bench_row *r, int run, int n_runs, double ttft,
                          double rem, size_t cached, double load, const char *extra)
{
    double el = now_s() - e->t_start;
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
                         bench_row *r)
{
    const bench_opts *o = e->o;
    double rem[BMAX_RUNS], al[BMAX_RUNS], st[BMAX_RUNS], me[BMAX_RUNS], rs[BMAX_RUNS],
        sl[BMAX_RUNS], pf[BMAX_RUNS], ev[BMAX_RUNS], lb[BMAX_RUNS], rb[BMAX_RUNS],
        rr[BMAX_RUNS], zo[BMAX_RUNS], zc[BMAX_RUNS], zu[BMAX_RUNS];
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
        double t0 = now_s();
        if (level < 100 && amount && mz_evict(e->c, amount, &er)) goto fail;
        ev[k] = (now_s() - t0) * 1e3;
        mz_get_mem_stats(e->c, &ms);
        rem[k] = ms.remaining_pct;
        rb[k] = (double)evicted_bytes(&ms) / (1 << 20);
        lb[k] = lower_bound_s(&ms, inmem_s);
        snprintf(r->placement, sizeof r->placement, "%s", ms.placement);
        /* Level 0 asks for everything: whatever remains is the mode's floor, shown
         * as its remaining %, not a miss. */
        if (level > 0 && (rem[k] > level + 1e-9 || rem[k] < level - o->tol)) r->in_tol = false;
        char extra[256] = "";
        if (pc->mode == MZ_MODE_OS_PAGING &&
            zram_stat(&zo[nz], &zc[nz], &zu[nz], r->zram_algo, sizeof r->zram_algo)) {
            snprintf(extra, sizeof extra, "; zram %s holds %.0f MiB as %.0f MiB (%.0f %%), uses %.0f MiB",
                     r->zram_algo, zo[nz], zc[nz], zo[nz] > 0 ? 100.0 * zc[nz] / zo[nz] : 0.0,
                     zu[nz]);
            nz++;
        }
        size_t cached = drop_caches(e->model_path, o->swap_dir, o->drop_global);
        /* Again after the drop: the state the timed restore starts from (the
         * drop can take page cache the mode's own eviction left). */
        mz_get_mem_stats(e->c, &ms);
        rr[k] = ms.remaining_pct;
        if ((double)(cached >> 10) > r->cached_kib_max) r->cached_kib_max = (double)(cached >> 10);
        double load = loadavg1();
        if (load < r->load_min) r->load_min = load;
        if (load > r->load_max) r->load_max = load;
        mz_restore_experimental rx = mz_restore_experimental_default();
        rx.overlap = pc->overlap;
        mz_restore_params rp = mz_restore_params_default();
        rp.experimental = &rx;
        rp.n_restore_threads = o->restore_threads;
        mz_restore_timings tm;
        memset(&tm, 0, sizeof tm);
        t0 = now_s();
        mz_status s = mz_prefill_restore(e->c, e->query, (size_t)o->query, &rp, &tm);
        double t = now_s() - t0;
        if (s || !mz_ctx_logits(e->c)) goto fail;
        r->ttft[k] = t;
        al[k] = tm.alloc_ms, st[k] = tm.storage_ms, me[k] = tm.mem_ms, rs[k] = tm.restore_ms;
        sl[k] = tm.stall_ms, pf[k] = tm.prefill_ms;
        if (rem[k] < r->remaining_min) r->remaining_min = rem[k];
        if (rem[k] > r->remaining_max) r->remaining_max = rem[k];
        if (tm.n_restore_threads) {
            size_t n = strlen(extra);
            snprintf(extra + n, sizeof extra - n, "; %d restore threads, alloc %.0f ms, ready %.0f ms",
                     tm.n_restore_threads, tm.alloc_ms, tm.restore_ms);
        }
        progress_line(e, r, k, n_runs, t, rem[k], cached, load, extra);
    }
    if (mz_ctx_truncate(e->c, e->N)) goto fail;
    r->remaining_restore_med = median(rr, n_runs);
    if (nz) {
        r->zram_orig_mib = median(zo, nz);
        r->zram_compr_mib = median(zc, nz);
        r->zram_used_mib = median(zu, nz);
    }
    r->n_runs = n_runs;
    r->ttft_med = median(r->ttft, n_runs);
    r->remaining_med = median(rem, n_runs);
    r->alloc_ms = median(al, n_runs), r->storage_ms = median(st, n_runs);
    r->mem_ms = median(me, n_runs), r->restore_ms = median(rs, n_runs);
    r->stall_ms = median(sl, n_runs), r->prefill_ms = median(pf, n_runs);
    r->evict_ms = median(ev, n_runs);
    r->bound_s = median(lb, n_runs);
    r->restore_mib = median(rb, n_runs);
    return 0;
fail:
    fprintf(stderr, "mzcache bench: %s ctx %zu %s level %d: %s\n", r->model, e->N, r->mode, level,
            mz_ctx_errmsg(e->c));
    snprintf(r->note, sizeof r->note, "failed: %.140s", mz_ctx_errmsg(e->c));
    r->skipped = true;
    return -1;
}

/* In-memory TTFT: nothing evicted, warm (one warm-up query first). */
static double measure_inmem(run_env *e, bench_row *r)
{
    const bench_opts *o = e->o;
    for (int k = -1; k < o->runs; k++) {
        double load = loadavg1();
        double t0 = now_s();
        if (mz_prefill(e->c, e->query, (size_t)o->query) || !mz_ctx_logits(e->c)) return NAN;
        double t = now_s() - t0;
        if (mz_ctx_truncate(e->c, e->N)) return NAN;
        if (k < 0) continue;
        r->ttft[k] = t;
        if (load < r->load_min) r->load_min = load;
        if (load > r->load_max) r->load_max = load;
        progress_line(e, r, k, o->runs, t, 100.0, 0, load, NULL);
    }
    r->n_runs = o->runs;
    r->ttft_med = median(r->ttft, o->runs);
    r->remaining_med = r->remaining_min = r->remaining_max = r->remaining_restore_med = 100.0;
    r->bound_s = r->ttft_med;
    return r->ttft_med;
}

static void row_id(bench_row *r, const char *model, int n_ctx, const point_cfg *pc, int level)
{
    snprintf(r->model, sizeof r->model, "%s", model);
    r->n_ctx = n_ctx;
    snprintf(r->mode, sizeof r->mode, "%s", mz_engine_mode_name(pc->mode));
    snprintf(r->codec, sizeof r->codec, "%s", pc->mode == MZ_MODE_MZCACHE ? pc->codec : "-");
    snprintf(r->order, sizeof r->order, "%s", pc->mode == MZ_MODE_MZCACHE ? pc->order : "-");
    snprintf(r->overlap, sizeof r->overlap, "%s",
             pc->mode == MZ_MODE_MZCACHE ? overlap_name(pc->overlap) : "-");
    r->level = level;
}

/* Opens model + context for one config, with the synthetic context. */
static int open_ctx(run_env *e, const point_cfg *pc)
{
    const bench_opts *o = e->o;
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
    double t0 = now_s();
    if (fill_synthetic(e->c, e->N, pc->mode)) {
        fprintf(stderr, "mzcache bench: synthetic context of %zu tokens: %s\n", e->N, mz_last_error());
        return -1;
    }
    fprintf(stderr, "  synthetic context: %zu tokens (%.0f MiB of KV) written in %.1f s\n", e->N,
            (double)mz_harness_kv_bytes(e->c) / (1 << 20), now_s() - t0);
    mz_mem_stats ms;
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

/* ---- output ------------------------------------------------------------------------- */

static void fmt_runs(const bench_row *r, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    for (int k = 0; k < r->n_runs && n + 16 < cap; k++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%.3f", k ? " " : "", r->ttft[k]);
}

static int write_csv(const char *path, const char *stamp)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "date,model,ctx,context,mode,codec,order,overlap,level,remaining_pct,remaining_min,"
               "remaining_max,in_tol,ttft_s,runs_s,n_runs,lower_bound_s,ttft_over_bound,restore_mib,"
               "evict_ms,alloc_ms,storage_ms,mem_ms,all_ready_ms,stall_ms,prefill_ms,"
               "cached_kib_max,load_min,load_max,note,remaining_at_restore_pct,placement,zram_algo,"
               "zram_orig_mib,zram_compr_mib,zram_used_mib\n");
    for (size_t i = 0; i < g_rows.n; i++) {
        const bench_row *r = &g_rows.v[i];
        char runs[BMAX_RUNS * 10];
        fmt_runs(r, runs, sizeof runs);
        fprintf(f,
                "%s,%s,%d,synthetic,%s,%s,%s,%s,%d,%.2f,%.2f,%.2f,%d,%.4f,%s,%d,%.4f,%.2f,%.1f,%.1f,"
                "%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.0f,%.2f,%.2f,\"%s\",%.2f,%s,%s,%.1f,%.1f,%.1f\n",
                stamp, r->model, r->n_ctx, r->mode, r->codec, r->order, r->overlap, r->level,
                r->remaining_med, r->remaining_min, r->remaining_max, r->in_tol, r->ttft_med, runs,
                r->n_runs, r->bound_s, r->ttft_med / r->bound_s, r->restore_mib, r->evict_ms,
                r->alloc_ms, r->storage_ms, r->mem_ms, r->restore_ms, r->stall_ms, r->prefill_ms,
                r->cached_kib_max, isfinite(r->load_min) ? r->load_min : 0.0,
                isfinite(r->load_max) ? r->load_max : 0.0, r->note, r->remaining_restore_med,
                r->placement[0] ? r->placement : "-", r->zram_algo[0] ? r->zram_algo : "-",
                r->zram_orig_mib, r->zram_compr_mib, r->zram_used_mib);
    }
    fclose(f);
    return 0;
}

static const bench_row *find_row(const char *model, int n_ctx, const char *mode, const char *codec,
                                 const char *order, const char *overlap, int level)
{
    for (size_t i = 0; i < g_rows.n; i++) {
        const bench_row *r = &g_rows.v[i];
        if (r->skipped || strcmp(r->model, model) || r->n_ctx != n_ctx || strcmp(r->mode, mode))
            continue;
        if (codec && strcmp(r->codec, codec)) continue;
        if (order && strcmp(r->order, order)) continue;
        if (overlap && strcmp(r->overlap, overlap)) continue;
        if (r->level == level || (level >= 0 && r->level == -1)) return r; /* -1: any level */
    }
    return NULL;
}

/* Peer results (bench/peer_llamacpp.py CSV): model,ctx,metric,median_s,... */
typedef struct peer_row {
    char model[96], metric[24], note[96];
    int n_ctx;
    double med;
} peer_row;

static int read_peer(const char *path, peer_row *out, int cap)
{
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return 0;
    char line[1024];
    int n = 0;
    if (!fgets(line, sizeof line, f)) { fclose(f); return 0; } /* header */
    while (n < cap && fgets(line, sizeof line, f)) {
        char *save = NULL, *fld[8] = {0};
        int k = 0;
        for (char *t = strtok_r(line, ",\n", &save); t && k < 8; t = strtok_r(NULL, ",\n", &save))
            fld[k++] = t;
        /* date,model,ctx,metric,median_s,runs_s,context,load */
        if (k < 5) continue;
        peer_row *p = &out[n++];
        snprintf(p->model, sizeof p->model, "%s", fld[1]);
        long long ctx_ll = 0;
        double med = 0;
        if (cli_num_i64(fld[2], 0, INT_MAX, &ctx_ll) || cli_num_double(fld[4], 0, 1e9, &med)) {
            n--; /* not a result row */
            continue;
        }
        p->n_ctx = (int)ctx_ll;
        snprintf(p->metric, sizeof p->metric, "%s", fld[3]);
        p->med = med;
        snprintf(p->note, sizeof p->note, "%s", k > 6 ? fld[6] : "");
    }
    fclose(f);
    return n;
}

static const char *k_baselines[] = {"os-paging", "partial-offload", "recompute"};

static int write_md(const char *path, const bench_opts *o, const char *stamp, const char *cmdline,
                    const char *plots)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    struct utsname u;
    uname(&u);
    char cpu[128] = "?";
    FILE *ci = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (ci && fgets(line, sizeof line, ci))
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) snprintf(cpu, sizeof cpu, "%s", p + 2);
            cpu[strcspn(cpu, "\n")] = 0;
            break;
        }
    if (ci) fclose(ci);
    fprintf(f, "# %s\n\n", o->title ? o->title : "TTFT after eviction (mzcache bench ttft)");
    fprintf(f, "%s, %s (%ld CPUs, kernel %s), %d compute threads, %d-token query, median of %d "
               "(recompute: %d), remaining tolerance -%.0f %%.\n\n",
            stamp, cpu, sysconf(_SC_NPROCESSORS_ONLN), u.release, o->threads, o->query, o->runs,
            o->recompute_runs, o->tol);
    fprintf(f, "Command: `%s`\n\n", cmdline);
    fprintf(f, "Contexts are SYNTHETIC: K/V written into the KV chunks by the calibrated fill "
               "(src/kv/kv_fill.c: per-channel value distributions of a real 512-token prefill of "
               "the same model, so lz4/zstd/q8 compress them as real KV). "
               "Page cache of the model and swap files dropped and checked (mincore) before every "
               "restore; `cached` = KiB still cached (max over runs). `load` = 1-min load average "
               "during the point (2 vCPUs: above ~2.5 means other programs took CPU). "
               "`bound` = max(in-memory TTFT, restore bytes / combined path throughput of the "
               "device profile). Level 0 is each mode's **full eviction**: everything is asked and "
               "each mode evicts all it can; its remaining %% is what it could not give back.\n\n");
    /* zram: what it held, and why (os-paging with --zram). */
    for (size_t i = 0; i < g_rows.n; i++) {
        const bench_row *r = &g_rows.v[i];
        if (r->skipped || !r->zram_algo[0]) continue;
        fprintf(f, "os-paging swapped its KV to a zram device (%s; this kernel's zram offers "
                   "lzo/lzo-rle/lz4, no zstd). zram keeps what it is given in RAM, compressed, so "
                   "those bytes count as remaining: os-paging's full eviction leaves the KV's "
                   "compressed size. What the device held after os-paging's evictions (mm_stat, "
                   "median of the runs):\n\n",
                r->zram_algo);
        fprintf(f, "| model | ctx | level | zram original MiB | compressed MiB | compressed / "
                   "original | memory used MiB | os-paging remaining %% |\n|---|---|---|---|---|---|---|---|\n");
        for (size_t j = i; j < g_rows.n; j++) {
            const bench_row *z = &g_rows.v[j];
            if (z->skipped || !z->zram_algo[0]) continue;
            fprintf(f, "| %s | %d | %d%s | %.0f | %.0f | %.1f %% | %.0f | %.1f |\n", z->model,
                    z->n_ctx, z->level, z->level == 0 ? " (full eviction)" : "", z->zram_orig_mib,
                    z->zram_compr_mib,
                    z->zram_orig_mib > 0 ? 100.0 * z->zram_compr_mib / z->zram_orig_mib : 0.0,
                    z->zram_used_mib, z->remaining_med);
        }
        fprintf(f, "\nThe contexts are the calibrated fill (src/kv/kv_fill.c), which lz4 treats as "
                   "real KV (lz4 in 4 KiB pages saves 0.22 %% on real SmolLM2 KV, docs/CODECS.md, "
                   "Table 2; test_kv_fill checks the fill within 2 points), so zram holds about all "
                   "of the KV it is given.\n\n");
        break;
    }

    /* Main comparison: per model/ctx/level, mzcache (first config) vs baselines. */
    peer_row peer[256];
    int n_peer = read_peer(o->peer_csv, peer, 256);
    const char *c0 = o->codecs[0], *o0 = o->orders[0], *v0 = o->overlaps[0];
    fprintf(f, "## TTFT (s) and speedup of mzcache over each baseline\n\n");
    fprintf(f, "mzcache = codec %s, order %s, overlap %s. Speedup = baseline TTFT / mzcache TTFT "
               "(> 1: mzcache faster).\n\n", c0, o0, v0);
    fprintf(f, "| model | ctx | level | mzcache rem. %% | mzcache | bound | x bound |");
    for (size_t b = 0; b < 3; b++) fprintf(f, " %s | speedup |", k_baselines[b]);
    fprintf(f, " cached KiB | load |\n|---|---|---|---|---|---|---|");
    for (size_t b = 0; b < 3; b++) fprintf(f, "---|---|");
    fprintf(f, "---|---|\n");
    for (int mi = 0; mi < o->n_models; mi++)
        for (int ci2 = 0; ci2 < o->n_ctxs; ci2++) {
            const bench_row *any = NULL;
            for (size_t i = 0; i < g_rows.n && !any; i++)
                if (!strcmp(g_rows.v[i].model, o->models[mi]) && g_rows.v[i].n_ctx == o->ctxs[ci2])
                    any = &g_rows.v[i];
            if (!any) continue;
            const bench_row *im = find_row(o->models[mi], o->ctxs[ci2], "mzcache", NULL, NULL, NULL, 100);
            if (im)
                fprintf(f, "| %s | %d | 100 (in memory) | 100 | %.3f | | | | | | | | | 0 | %.1f |\n",
                        o->models[mi], o->ctxs[ci2], im->ttft_med, im->load_max);
            for (int li = 0; li < o->n_levels; li++) {
                int lv = o->levels[li];
                const bench_row *mz = find_row(o->models[mi], o->ctxs[ci2], "mzcache", c0, o0, v0, lv);
                fprintf(f, "| %s | %d | %d%s |", o->models[mi], o->ctxs[ci2], lv,
                        lv == 0 ? " (full eviction)" : "");
                if (mz)
                    fprintf(f, " %.1f%s | %.3f | %.3f | %.2f |", mz->remaining_med,
                            mz->in_tol ? "" : " (!)", mz->ttft_med, mz->bound_s,
                            mz->ttft_med / mz->bound_s);
                else
                    fprintf(f, " - | - | - | - |");
                double cached = mz ? mz->cached_kib_max : 0, load = mz ? mz->load_max : 0;
                for (size_t b = 0; b < 3; b++) {
                    const bench_row *br =
                        find_row(o->models[mi], o->ctxs[ci2], k_baselines[b], NULL, NULL, NULL, lv);
                    if (!br) {
                        fprintf(f, " - | - |");
                        continue;
                    }
                    if (br->cached_kib_max > cached) cached = br->cached_kib_max;
                    if (br->load_max > load) load = br->load_max;
                    char rem[32] = "";
                    if (!br->in_tol && br->level >= 0)
                        snprintf(rem, sizeof rem, " (rem. %.0f %% !)", br->remaining_med);
                    else if (br->level == 0)
                        snprintf(rem, sizeof rem, " (rem. %.1f %%)", br->remaining_med);
                    if (mz)
                        fprintf(f, " %.3f%s%s | **%.2fx** |", br->ttft_med,
                                br->level == -1 ? "*" : "", rem, br->ttft_med / mz->ttft_med);
                    else
                        fprintf(f, " %.3f%s%s | - |", br->ttft_med, br->level == -1 ? "*" : "", rem);
                }
                fprintf(f, " %.0f | %.1f |\n", cached, load);
            }
        }
    fprintf(f, "\n`*` recompute does not depend on the level (everything is dropped): measured once "
               "per context and repeated. `(!)` remaining outside [level - tol, level] "
               "(the mode did not give back the memory asked for; its TTFT is then not comparable). "
               "At level 0 (full eviction) every mode's remaining %% is shown instead.\n");

    /* Full eviction: each mode evicts all it can; compared as such. */
    bool any_full = false;
    for (int li = 0; li < o->n_levels; li++) any_full = any_full || o->levels[li] == 0;
    if (any_full) {
        fprintf(f, "\n## Full eviction: mzcache vs each baseline, each evicting all it can\n\n");
        fprintf(f, "Level 0 asks every mode for everything. Each column pair is one mode's full "
                   "eviction: the remaining %% it reached (median of its runs; for os-paging "
                   "with zram that is zram's compressed copy of the KV) and the TTFT after it. "
                   "Speedup = baseline TTFT / mzcache TTFT, at each one's own full eviction.\n\n");
        fprintf(f, "| model | ctx | mzcache rem. %% | mzcache TTFT s | baseline | baseline rem. %% | "
                   "placement | baseline TTFT s | speedup (full vs full) | load |\n"
                   "|---|---|---|---|---|---|---|---|---|---|\n");
        for (int mi = 0; mi < o->n_models; mi++)
            for (int ci2 = 0; ci2 < o->n_ctxs; ci2++) {
                const bench_row *mz = find_row(o->models[mi], o->ctxs[ci2], "mzcache", c0, o0, v0, 0);
                for (size_t b = 0; b < 3; b++) {
                    const bench_row *br =
                        find_row(o->models[mi], o->ctxs[ci2], k_baselines[b], NULL, NULL, NULL, 0);
                    if (!br) continue;
                    char zr[64] = "";
                    if (br->zram_algo[0])
                        snprintf(zr, sizeof zr, " (%s %.0f of %.0f MiB)", br->zram_algo,
                                 br->zram_compr_mib, br->zram_orig_mib);
                    double load = br->load_max;
                    if (mz && mz->load_max > load) load = mz->load_max;
                    if (mz)
                        fprintf(f, "| %s | %d | %.1f | %.3f | %s | %.1f | %s%s | %.3f%s | **%.2fx** | %.1f |\n",
                                o->models[mi], o->ctxs[ci2], mz->remaining_med, mz->ttft_med,
                                k_baselines[b], br->remaining_med,
                                br->placement[0] ? br->placement : "-", zr, br->ttft_med,
                                br->level == -1 ? "*" : "", br->ttft_med / mz->ttft_med, load);
                    else
                        fprintf(f, "| %s | %d | - | - | %s | %.1f | %s%s | %.3f%s | - | %.1f |\n",
                                o->models[mi], o->ctxs[ci2], k_baselines[b], br->remaining_med,
                                br->placement[0] ? br->placement : "-", zr, br->ttft_med,
                                br->level == -1 ? "*" : "", load);
                }
            }
    }

    if (n_peer) {
        fprintf(f, "\n## Peer: llama.cpp (bench/peer_llamacpp.py) vs mzcache\n\n");
        fprintf(f, "| model | ctx | llama.cpp metric | llama.cpp s | mzcache s (same point) | "
                   "speedup of mzcache | note |\n|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < n_peer; i++) {
            const peer_row *p = &peer[i];
            int lv = !strcmp(p->metric, "inmem") ? 100 : 0;
            const bench_row *mz = lv == 100 ? find_row(p->model, p->n_ctx, "mzcache", NULL, NULL, NULL, 100)
                                            : find_row(p->model, p->n_ctx, "mzcache", c0, o0, v0, 0);
            fprintf(f, "| %s | %d | %s | %.3f | ", p->model, p->n_ctx, p->metric, p->med);
            if (mz)
                fprintf(f, "%.3f (%s) | %.2fx | %s |\n", mz->ttft_med, lv == 100 ? "in memory" : "0 %",
                        p->med / mz->ttft_med, p->note);
            else
                fprintf(f, "- | - | %s |\n", p->note);
        }
    }

    /* Every row, with the restore breakdown (Fig. 10) and the variants. */
    fprintf(f, "\n## All points (restore breakdown: busy ms of each activity)\n\n");
    fprintf(f, "| model | ctx | mode | codec | order | overlap | level | remaining %% | at restore %% | "
               "placement | TTFT s | runs s | "
               "bound s | restore MiB | evict ms | alloc ms | storage ms | memory ms | all ready ms | "
               "stall ms | prefill ms | cached KiB | load | note |\n");
    fprintf(f, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < g_rows.n; i++) {
        const bench_row *r = &g_rows.v[i];
        char runs[BMAX_RUNS * 10];
        fmt_runs(r, runs, sizeof runs);
        char lvl[24];
        if (r->level == -1) snprintf(lvl, sizeof lvl, "any");
        else if (r->level == 0) snprintf(lvl, sizeof lvl, "0 (full)");
        else snprintf(lvl, sizeof lvl, "%d", r->level);
        char plc[80];
        if (r->zram_algo[0])
            snprintf(plc, sizeof plc, "%s (%s %.0f of %.0f MiB)", r->placement, r->zram_algo,
                     r->zram_compr_mib, r->zram_orig_mib);
        else
            snprintf(plc, sizeof plc, "%s", r->placement[0] ? r->placement : "-");
        fprintf(f, "| %s | %d | %s | %s | %s | %s | %s | %.1f%s | %.1f | %s | %.3f | %s | %.3f | %.0f | %.0f | %.0f | "
                   "%.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.1f-%.1f | %s |\n",
                r->model, r->n_ctx, r->mode, r->codec, r->order, r->overlap, lvl, r->remaining_med,
                r->in_tol ? "" : " (!)", r->remaining_restore_med, plc, r->ttft_med, runs, r->bound_s,
                r->restore_mib, r->evict_ms,
                r->alloc_ms, r->storage_ms, r->mem_ms, r->restore_ms, r->stall_ms, r->prefill_ms,
                r->cached_kib_max, isfinite(r->load_min) ? r->load_min : 0.0,
                isfinite(r->load_max) ? r->load_max : 0.0, r->note);
    }
    if (plots[0]) fprintf(f, "\n## Plots\n\n%s", plots);
    fclose(f);
    return 0;
}

/* One PNG per (model, ctx): TTFT vs remaining level, one line per mode/config. */
static void write_plots(const bench_opts *o, const char *stem, char *md, size_t cap)
{
    md[0] = 0;
    size_t mdn = 0;
    for (int mi = 0; mi < o->n_models; mi++)
        for (int ci = 0; ci < o->n_ctxs; ci++) {
            /* Series: distinct (mode, codec, order, overlap) of this model/ctx. */
            char series[32][80];
            int ns = 0;
            for (size_t i = 0; i < g_rows.n; i++) {
                const bench_row *r = &g_rows.v[i];
                if (strcmp(r->model, o->models[mi]) || r->n_ctx != o->ctxs[ci] || r->skipped ||
                    r->level == 100)
                    continue;
                char s[80];
                if (!strcmp(r->mode, "mzcache"))
                    snprintf(s, sizeof s, "mzcache %s/%s/%s", r->codec, r->order, r->overlap);
                else
                    snprintf(s, sizeof s, "%s", r->mode);
                int k = 0;
                while (k < ns && strcmp(series[k], s)) k++;
                if (k == ns && ns < 32) snprintf(series[ns++], sizeof series[0], "%s", s);
            }
            if (!ns) continue;
            char dat[PATH_MAX], gp[PATH_MAX], png[PATH_MAX];
            snprintf(dat, sizeof dat, "%s/%s-%s-%d.dat", o->out_dir, stem, o->models[mi], o->ctxs[ci]);
            snprintf(gp, sizeof gp, "%s/%s-%s-%d.gp", o->out_dir, stem, o->models[mi], o->ctxs[ci]);
            snprintf(png, sizeof png, "%s/%s-%s-%d.png", o->out_dir, stem, o->models[mi], o->ctxs[ci]);
            FILE *f = fopen(dat, "w");
            if (!f) continue;
            /* Per series a pair of columns (x, TTFT): x is the remaining %
             * the mode actually reached (os-paging's full eviction with zram
             * stays well above 0), the level for recompute (any level). */
            fprintf(f, "level");
            for (int k = 0; k < ns; k++) fprintf(f, "\t\"x\"\t\"%s\"", series[k]);
            fprintf(f, "\n");
            for (int li = 0; li < o->n_levels; li++) {
                fprintf(f, "%d", o->levels[li]);
                for (int k = 0; k < ns; k++) {
                    double v = NAN, x = NAN;
                    for (size_t i = 0; i < g_rows.n; i++) {
                        const bench_row *r = &g_rows.v[i];
                        if (strcmp(r->model, o->models[mi]) || r->n_ctx != o->ctxs[ci] || r->skipped)
                            continue;
                        if (r->level != o->levels[li] && r->level != -1) continue;
                        char s[80];
                        if (!strcmp(r->mode, "mzcache"))
                            snprintf(s, sizeof s, "mzcache %s/%s/%s", r->codec, r->order, r->overlap);
                        else
                            snprintf(s, sizeof s, "%s", r->mode);
                        if (!strcmp(s, series[k])) {
                            v = r->ttft_med;
                            x = r->level == -1 ? (double)o->levels[li] : r->remaining_med;
                        }
                    }
                    if (isnan(v)) fprintf(f, "\tNaN\tNaN");
                    else fprintf(f, "\t%.2f\t%.4f", x, v);
                }
                fprintf(f, "\n");
            }
            fclose(f);
            f = fopen(gp, "w");
            if (!f) continue;
            fprintf(f, "set terminal pngcairo size 800,500\nset output '%s'\n", png);
            fprintf(f, "set title '%s, %d-token synthetic context, %d-token query' noenhanced\n",
                    o->models[mi],
                    o->ctxs[ci], o->query);
            fprintf(f, "set xlabel 'remaining memory reached (%%)'\nset ylabel 'TTFT (s)'\n"
                       "set key outside right\nset grid\nset xrange [-5:80]\nset yrange [0:*]\n");
            fprintf(f, "plot for [i=1:%d] '%s' using (column(2*i)):(column(2*i+1)) with linespoints "
                       "lw 2 title columnheader(2*i+1) noenhanced\n", ns, dat);
            fclose(f);
            char cmd[PATH_MAX * 2];
            snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>&1", gp);
            int rc = system(cmd);
            if (rc == 0) {
                mdn += (size_t)snprintf(md + mdn, mdn < cap ? cap - mdn : 0, "![%s %d](%s)\n\n",
                                        o->models[mi], o->ctxs[ci], strrchr(png, '/') + 1);
                fprintf(stderr, "  plot %s\n", png);
            } else {
                fprintf(stderr, "mzcache bench: gnuplot failed (%d); data in %s\n", rc, dat);
            }
            if (mdn >= cap) mdn = cap - 1;
        }
}

/* ---- the command -------------------------------------------------------------------- */

static void help(void)
{
    printf("usage: mzcache bench ttft [options]\n\n"
           "TTFT of a short query over a cached context after eviction to each remaining-memory\n"
           "level, for mzcache and the built-in baselines (engine modes), paper section 6.\n"
           "Contexts are SYNTHETIC: K/V drawn from the model's real per-channel distributions\n"
           "(a 512-token calibration prefill), so zram/q8 compress them as real KV.\n\n"
           "  --models LIST         aliases or GGUF paths (default smollm2,qwen3-0.6b,exaone-1.2b;\n"
           "                        qwen3-0.6b / exaone-1.2b are generated on first use;\n"
           "                        gemma3-270m is the real Gemma 3 file)\n"
           "  --ctx LIST            context lengths in tokens (default 8192,16384,32768)\n"
           "  --levels LIST         remaining memory %% (default 0,25,50,75); 0 (or 'full') is\n"
           "                        each mode's full eviction: everything asked, each mode\n"
           "                        evicts all it can and its remaining %% is recorded\n"
           "  --modes LIST          mzcache,os-paging,partial-offload,recompute (default all)\n"
           "  --codecs LIST         mzcache KV codecs, one series each (default q8)\n"
           "  --orders LIST         mzcache eviction orders: backward,forward,random (default backward)\n"
           "  --overlaps LIST       mzcache restore overlap: all,none,alloc-reload,reload-prefill\n"
           "                        (default all)\n"
           "  --runs N              runs per point, median reported (default 3)\n"
           "  --recompute-runs N    runs of the recompute baseline (default 1; it is minutes each)\n"
           "  --recompute-max-ctx N skip recompute above N tokens (default 8192; 0 = never skip)\n"
           "  --recompute-models L  run recompute only for these models (default every model)\n"
           "  --query N             query tokens (default 8)\n"
           "  --restore-threads N   mzcache restore threads (default 0: the device profile's\n"
           "                        split for the compute threads and CPUs)\n"
           "  -t, --threads N       compute threads (default 2)\n"
           "  --tol PCT             allowed undershoot of the remaining level (default 3)\n"
           "  --no-inmem            skip the in-memory (nothing evicted) TTFT (the bound is then nan)\n"
           "  --swap-dir DIR        swap files (default build/bench-swap; on disk, not tmpfs)\n"
           "  --profile FILE        device profile (default: the engine's default location)\n"
           "  --zram                os-paging: set up a zram swap device for the run (root;\n"
           "                        zstd where the kernel has it, else lz4); its mm_stat is\n"
           "                        recorded after every os-paging eviction\n"
           "  --no-global-drop      only posix_fadvise the files, never /proc/sys/vm/drop_caches\n"
           "  --swa-full            sliding-window layers (gemma3) keep their whole history, as\n"
           "                        llama.cpp --swa-full: the comparison for the default, which\n"
           "                        evicts the chunks out of the window first and leaves them stored\n"
           "  --peer CSV            join bench/peer_llamacpp.py results into the table\n"
           "  -o, --out DIR         output directory (default bench/results)\n"
           "  --name STEM           output file stem (default ttft): STEM.csv, STEM.md, STEM-*.png\n"
           "  --title TEXT          heading of the markdown file\n"
           "  --no-plot             no gnuplot PNGs\n");
}

static int parse_int_list(char *s, int *out)
{
    const char *items[BMAX_LIST];
    int n = split_list(s, items);
    for (int i = 0; i < n; i++) {
        if (!strcmp(items[i], "full")) out[i] = 0;
        else if (cli_opt_int("--ctx/--levels item", items[i], 0, INT_MAX, &out[i])) return 0;
    }
    return n;
}

static int bench_ttft(int argc, char **argv)
{
    bench_opts o;
    memset(&o, 0, sizeof o);
    static char def_models[] = "smollm2,qwen3-0.6b,exaone-1.2b", def_ctx[] = "8192,16384,32768",
                def_levels[] = "0,25,50,75", def_modes[] = "mzcache,os-paging,partial-offload,recompute",
                def_codecs[] = "q8", def_orders[] = "backward", def_overlaps[] = "all";
    char *l_models = def_models, *l_ctx = def_ctx, *l_levels = def_levels, *l_modes = def_modes,
         *l_codecs = def_codecs, *l_orders = def_orders, *l_overlaps = def_overlaps;
    o.runs = 3, o.recompute_runs = 1, o.recompute_max_ctx = 8192, o.query = 8, o.threads = 2;
    o.tol = 3, o.swap_dir = "build/bench-swap", o.out_dir = "bench/results", o.name = "ttft";
    o.plot = true, o.drop_global = true, o.inmem = true;
    char cmdline[2048];
    size_t cl = (size_t)snprintf(cmdline, sizeof cmdline, "mzcache bench ttft");
    for (int i = 1; i < argc && cl < sizeof cmdline; i++)
        cl += (size_t)snprintf(cmdline + cl, sizeof cmdline - cl, " %s", argv[i]);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(name) (!strcmp(a, name) && v && ++i)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { help(); return 0; }
        else if (OPT("--models")) l_models = v;
        else if (OPT("--ctx")) l_ctx = v;
        else if (OPT("--levels")) l_levels = v;
        else if (OPT("--modes")) l_modes = v;
        else if (OPT("--codecs")) l_codecs = v;
        else if (OPT("--orders")) l_orders = v;
        else if (OPT("--overlaps")) l_overlaps = v;
        else if (OPT("--runs")) { if (cli_opt_int(a, v, 1, BMAX_RUNS, &o.runs)) return 2; }
        else if (OPT("--recompute-runs")) { if (cli_opt_int(a, v, 1, BMAX_RUNS, &o.recompute_runs)) return 2; }
        else if (OPT("--recompute-max-ctx")) { if (cli_opt_int(a, v, 0, INT_MAX, &o.recompute_max_ctx)) return 2; }
        else if (OPT("--recompute-models")) o.n_recompute_models = split_list(v, o.recompute_models);
        else if (OPT("--query")) { if (cli_opt_int(a, v, 1, 1 << 20, &o.query)) return 2; }
        else if (OPT("--restore-threads")) {
            if (cli_opt_int(a, v, 0, MZ_RESTORE_THREADS_MAX, &o.restore_threads)) return 2;
        }
        else if (OPT("-t") || OPT("--threads")) { if (cli_opt_int(a, v, 1, 256, &o.threads)) return 2; }
        else if (OPT("--tol")) { if (cli_opt_double(a, v, 0, 1e6, &o.tol)) return 2; }
        else if (OPT("--swap-dir")) o.swap_dir = v;
        else if (OPT("--profile")) o.profile = v;
        else if (OPT("--peer")) o.peer_csv = v;
        else if (OPT("-o") || OPT("--out")) o.out_dir = v;
        else if (OPT("--name")) o.name = v;
        else if (OPT("--title")) o.title = v;
        else if (!strcmp(a, "--no-inmem")) o.inmem = false;
        else if (!strcmp(a, "--zram")) o.zram = true;
        else if (!strcmp(a, "--no-global-drop")) o.drop_global = false;
        else if (!strcmp(a, "--no-plot")) o.plot = false;
        else if (!strcmp(a, "--swa-full")) o.swa_full = true;
        else {
            fprintf(stderr, "mzcache bench ttft: unknown or incomplete option '%s' (--help)\n", a);
            return 2;
        }
#undef OPT
    }
    o.n_models = split_list(l_models, o.models);
    o.n_ctxs = parse_int_list(l_ctx, o.ctxs);
    o.n_levels = parse_int_list(l_levels, o.levels);
    o.n_modes = split_list(l_modes, o.modes);
    o.n_codecs = split_list(l_codecs, o.codecs);
    o.n_orders = split_list(l_orders, o.orders);
    o.n_overlaps = split_list(l_overlaps, o.overlaps);
    if (o.runs < 1 || o.runs > BMAX_RUNS || o.recompute_runs < 1 || o.recompute_runs > BMAX_RUNS ||
        o.query < 1 || o.threads < 1 || !o.n_models || !o.n_ctxs || !o.n_levels || !o.n_modes ||
        !o.n_codecs || !o.n_orders || !o.n_overlaps) {
        fprintf(stderr, "mzcache bench ttft: bad option value (--help)\n");
        return 2;
    }
    mz_engine_mode modes[BMAX_LIST];
    for (int i = 0; i < o.n_modes; i++)
        if (mz_engine_mode_parse(o.modes[i], &modes[i])) {
            fprintf(stderr, "mzcache bench ttft: %s\n", mz_last_error());
            return 2;
        }
    mz_restore_overlap ovl[BMAX_LIST];
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
    static char paths[BMAX_LIST][PATH_MAX];
    const char *model_alias[BMAX_LIST];
    for (int i = 0; i < o.n_models; i++) {
        model_alias[i] = o.models[i];
        if (resolve_model(o.models[i], paths[i], sizeof paths[i])) return 1;
        o.models[i] = model_key(paths[i]);
    }
    if (mkdir_p(o.swap_dir, 0700) || mkdir_p(o.out_dir, 0755)) return 1;

    /* Configs: every combination of the mzcache variants, one per baseline. */
    point_cfg cfgs[BMAX_LIST * 8];
    int n_cfg = 0;
    for (int mi = 0; mi < o.n_modes; mi++) {
        if (modes[mi] != MZ_MODE_MZCACHE) {
            cfgs[n_cfg++] = (point_cfg){modes[mi], o.codecs[0], o.orders[0], MZ_OVERLAP_ALL};
            continue;
        }
        for (int a = 0; a < o.n_codecs; a++)
            for (int b = 0; b < o.n_orders; b++)
                for (int d = 0; d < o.n_overlaps && n_cfg < BMAX_LIST * 8 - 4; d++)
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
            mz_harness_q8_isa(), loadavg1());

    run_env e;
    memset(&e, 0, sizeof e);
    e.o = &o;
    e.n_points = n_points;
    e.t_start = now_s();
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
                    bench_row *r = new_row();
                    if (!r) return 1;
                    row_id(r, o.models[mi], o.ctxs[ci], pc, -1);
                    r->skipped = true;
                    snprintf(r->note, sizeof r->note, "skipped: recompute not requested for this model "
                                                      "(--recompute-models)");
                    e.point++;
                    continue;
                }
                if (recompute && o.recompute_max_ctx > 0 && o.ctxs[ci] > o.recompute_max_ctx) {
                    bench_row *r = new_row();
                    if (!r) return 1;
                    row_id(r, o.models[mi], o.ctxs[ci], pc, -1);
                    r->skipped = true;
                    snprintf(r->note, sizeof r->note, "skipped: recompute above %d tokens takes too long",
                             o.recompute_max_ctx);
                    e.point++;
                    continue;
                }
                fprintf(stderr, "%s, %d tokens, %s (codec %s, order %s, overlap %s)\n", o.models[mi],
                        o.ctxs[ci], mz_engine_mode_name(pc->mode), pc->codec, pc->order,
                        overlap_name(pc->overlap));
                /* Random weights everywhere but in the real model: reuse the file. */
                e.query = NULL;
                if (open_ctx(&e, pc)) {
                    bench_row *r = new_row();
                    if (!r) return 1;
                    row_id(r, o.models[mi], o.ctxs[ci], pc, recompute ? -1 : o.levels[0]);
                    r->skipped = true;
                    snprintf(r->note, sizeof r->note, "unavailable: %.140s", mz_last_error());
                    close_ctx(&e);
                    e.point += recompute ? 1 : o.n_levels;
                    rc = 1;
                    continue;
                }
                /* os-paging: anonymous KV pages go to swap; room for all of them. */
                if (pc->mode == MZ_MODE_OS_PAGING && o.zram)
                    (void)zram_up(mz_harness_kv_bytes(e.c) / 4 * 5 + ((size_t)256 << 20));
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
                    bench_row *r = new_row();
                    if (!r) return 1;
                    row_id(r, o.models[mi], o.ctxs[ci], pc, 100);
                    e.point++;
                    inmem = measure_inmem(&e, r);
                    if (isnan(inmem)) {
                        r->skipped = true;
                        rc = 1;
                    }
                }
                if (recompute) {
                    bench_row *r = new_row();
                    if (!r) return 1;
                    row_id(r, o.models[mi], o.ctxs[ci], pc, -1);
                    e.point++;
                    if (measure_level(&e, pc, 0, o.recompute_runs, inmem, r)) rc = 1;
                    snprintf(r->note + strlen(r->note), sizeof r->note - strlen(r->note),
                             "%sany level: everything is dropped", r->note[0] ? "; " : "");
                } else {
                    for (int li = 0; li < o.n_levels; li++) {
                        bench_row *r = new_row();
                        if (!r) return 1;
                        row_id(r, o.models[mi], o.ctxs[ci], pc, o.levels[li]);
                        e.point++;
                        if (measure_level(&e, pc, o.levels[li], o.runs, inmem, r)) {
                            rc = 1;
                            break;
                        }
                    }
                }
                close_ctx(&e);
                if (pc->mode == MZ_MODE_OS_PAGING) zram_down();
            }
        }
    }
    zram_down();

    char path[PATH_MAX], plots[8192];
    plots[0] = 0;
    snprintf(path, sizeof path, "%s/%s.csv", o.out_dir, o.name);
    if (write_csv(path, stamp)) fprintf(stderr, "mzcache bench: cannot write %s\n", path);
    else fprintf(stderr, "  wrote %s\n", path);
    if (o.plot) write_plots(&o, o.name, plots, sizeof plots);
    snprintf(path, sizeof path, "%s/%s.md", o.out_dir, o.name);
    if (write_md(path, &o, stamp, cmdline, plots)) fprintf(stderr, "mzcache bench: cannot write %s\n", path);
    else fprintf(stderr, "  wrote %s (%.0f s in all)\n", path, now_s() - e.t_start);
    free(g_rows.v);
    g_rows.v = NULL;
    g_rows.n = g_rows.cap = 0;
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "ttft")) return bench_ttft(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: mzcache bench ttft [options]   (mzcache bench ttft --help)\n");
        return 0;
    }
    fprintf(stderr, "usage: mzcache bench ttft [options]   (mzcache bench ttft --help)\n");
    return 2;
}
