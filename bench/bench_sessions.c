/*
 * bench_sessions — switching between conversations (issue 16's workload):
 * K sessions of N tokens each on one model, round-robin Q-token questions,
 * under memory budgets that hold all, half or an eighth of the sessions' KV
 * (weights always fit). Time to first token of each switch for:
 *
 *   mzcache    one engine, K sessions; after every turn mz_engine_evict keeps
 *              the footprint (resident weights + resident and compressed KV)
 *              under the budget (idle sessions least recently used first),
 *              as `mzcache serve --mem-budget` does after each request; a
 *              switch restores its session through the pipelined restore
 *              (mz_restore_generate);
 *   os-paging  K os-paging sessions (every session's KV in anonymous memory;
 *              the budget is kept the same way, by the mode's own eviction:
 *              MADV_PAGEOUT, restore by page faults);
 *   recompute  what a one-conversation server does: every switch prefills
 *              the conversation's whole history (N + Q tokens). It does not
 *              depend on K or the budget, so it is measured once per run
 *              (-C times, default -R);
 *   single     the reference of the restore target: one session of the same
 *              engine, its KV evicted with mz_evict (its own units only)
 *              until as many KV bytes are out as the median mzcache switch
 *              of that budget found evicted, then restored by the question
 *              (-R times per budget).
 *
 * The sessions' contexts are SYNTHETIC by default: the calibrated KV fill of
 * src/harness/harness.h writes positions [0, N) (values that compress as the
 * model's real KV does; a 512-token real prefill calibrates it), so K = 8
 * sessions of 8k tokens take seconds to set up. A switch's cost (restore,
 * attention over N positions, the question's forward pass) does not depend
 * on the values; the recompute baseline always prefills real (random) tokens.
 * -p prefills every session with random tokens instead.
 *
 * Each budget runs one warm-up round (not counted: it brings the sessions
 * from all-resident to the budget's steady state), then -r counted rounds.
 * Every question is truncated away again, so each session stays at N tokens.
 * TTFT = the first token sampled (greedy) after the question.
 *
 * usage: bench_sessions -m MODEL [-k 4] [-c 2048] [-q 8] [-t 2] [-r 2] [-R 3] [-C R]
 *                       [-b all,half,eighth] [-M mzcache,os-paging,recompute,single] [-p]
 * Prints one line per switch, then per budget "cell ..." lines with the
 * medians, and a markdown table with the ratios to the baselines measured in
 * the same run: recompute / mzcache (target >= 10 at 4k tokens) and
 * mzcache / single (target <= 1.5).
 */
#define _POSIX_C_SOURCE 200809L
#include "mzcache.h"
#include "harness/harness.h" /* not public: the calibrated KV fill, the model's path */

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BUDGETS 3
#define MODE_MZCACHE 1u
#define MODE_OSP 2u
#define MODE_RECOMPUTE 4u
#define MODE_SINGLE 8u

/* A switch is the question and its first token (TTFT). */
static const mz_generate_params g_one_token = {.max_tokens = 1};

static bool parse_long(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !end || *end || end == s || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
    if (!n) return -1;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void rand_tokens(mz_token *t, size_t n, int nv, unsigned long long seed)
{
    unsigned long long s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (mz_token)((s >> 33) % (unsigned long long)(nv - 10)) + 5;
    }
}

static size_t footprint(mz_engine_t *e)
{
    mz_mem_stats st;
    mz_engine_get_mem_stats(e, &st);
    return st.weights.resident_bytes + st.kv.resident_bytes + st.kv.compressed_bytes;
}

/* KV bytes of c not resident (compressed, stored or, os-paging, paged out). */
static size_t kv_evicted(const mz_ctx_t *c)
{
    mz_mem_stats st;
    mz_get_mem_stats(c, &st);
    return st.kv.total_bytes - st.kv.resident_bytes;
}

/* The restore's split as one line: wall time, busy time per activity
 * (summed over the threads running it), the compute thread's wait. */
static void print_split(const mz_restore_timings *tm)
{
    printf(" split: alloc_ms=%.1f storage_ms=%.1f mem_ms=%.1f stall_ms=%.1f prefill_ms=%.1f "
           "threads=%d",
           tm->alloc_ms, tm->storage_ms, tm->mem_ms, tm->stall_ms, tm->prefill_ms,
           tm->n_restore_threads);
}

/* "raw R + enc E stored, C compressed, W blocks" of a placement. */
static void print_place(const char *what, const mz_harness_placement *p)
{
    printf(" %s: stored raw %zu + encoded %zu, compressed %zu, weight blocks %zu", what,
           p->n_kv_stored_raw, p->n_kv_stored_compressed, p->n_kv_compressed, p->n_weights_dropped);
}

/* One line of a single-session reference run (WHAT: single or same). */
static void print_reference_row(const char *what, const char *budget, long rep, const mz_restore_timings *tm,
                                size_t evicted, const mz_harness_placement *pl)
{
    printf("%s %s %ld: ttft_ms=%.1f restore_ms=%.1f units=%zu (storage %zu, memory %zu) evicted_kv=%.1f MB",
           what, budget, rep, tm->ttft_ms, tm->restore_ms, tm->n_units, tm->n_storage_units, tm->n_mem_units,
           evicted / 1e6);
    print_place("placement", pl);
    print_split(tm);
    printf("\n");
    fflush(stdout);
}

static size_t median_size(size_t *v, size_t n)
{
    double *d = malloc(n * sizeof *d);
    if (!d) return 0;
    for (size_t i = 0; i < n; i++) d[i] = (double)v[i];
    size_t m = (size_t)(median(d, n) + 0.5);
    free(d);
    return m;
}

typedef struct bench {
    mz_model_t *m;
    int nv;
    long k, n, q, threads, rounds, reps;
    long recompute_reps;       /* -C (default: reps) */
    bool prefill;              /* -p: real prefill instead of the fill */
    mz_kvfill *fill;
    mz_token *hist;            /* [k][n] random histories (-p, recompute) */
    mz_token *qs;              /* [q] */
    const char *budget_names[MAX_BUDGETS];
    double budget_frac[MAX_BUDGETS];
    int n_budgets;
    /* results per budget */
    double mz_med[MAX_BUDGETS], osp_med[MAX_BUDGETS], single_med[MAX_BUDGETS];
    double same_med[MAX_BUDGETS];  /* single, same tiers (the target's reference) */
    double mz_evicted_mb[MAX_BUDGETS], single_evicted_mb[MAX_BUDGETS];
    double mz_units[MAX_BUDGETS];
    mz_harness_placement mz_place[MAX_BUDGETS]; /* the switches' median placement */
    double recompute_med;
    size_t kv_session_bytes, weight_bytes;
} bench;

static mz_ctx_params session_params(const bench *b, mz_engine_mode mode)
{
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = (int)(b->n + b->q + 8);
    cp.n_threads = (int)b->threads;
    cp.kv_codec = "q8";
    cp.mode = mode;
    return cp;
}

/* Every switch prefills the conversation's whole history (-R times). */
static int run_recompute(bench *b)
{
    mz_ctx_params cp = session_params(b, MZ_MODE_MZCACHE);
    mz_ctx_t *c = NULL;
    if (mz_ctx_init(b->m, &cp, &c)) {
        fprintf(stderr, "recompute: %s\n", mz_last_error());
        return 1;
    }
    const size_t len = (size_t)(b->n + b->q);
    mz_token *all = malloc(len * sizeof *all);
    double *t = calloc((size_t)b->recompute_reps, sizeof *t);
    if (!all || !t) return 1;
    for (long r = 0; r < b->recompute_reps; r++) {
        rand_tokens(all, len, b->nv, 500 + (unsigned long long)r);
        mz_restore_timings tm;
        if (mz_ctx_truncate(c, 0) ||
            mz_restore_generate(c, all, len, NULL, NULL, &g_one_token, NULL, &tm)) {
            fprintf(stderr, "recompute: %s\n", mz_ctx_errmsg(c));
            return 1;
        }
        t[r] = tm.ttft_ms;
        printf("recompute %ld: ttft_ms=%.1f (prefill of %zu tokens)\n", r, tm.ttft_ms, len);
        fflush(stdout);
    }
    b->recompute_med = median(t, (size_t)b->recompute_reps);
    free(t);
    free(all);
    mz_ctx_free(c);
    return 0;
}

/* Gives session s its N-token history: the fill, or a real prefill (-p). */
static int setup_session(bench *b, mz_ctx_t *c, long s)
{
    mz_status st = b->prefill ? mz_prefill(c, b->hist + s * b->n, (size_t)b->n)
                              : mz_kvfill_write(b->fill, c, (size_t)b->n, 100 + (uint64_t)s);
    if (st) fprintf(stderr, "session %ld: %s\n", s, mz_last_error());
    return st ? 1 : 0;
}

typedef struct fill_job {
    bench *b;
    mz_ctx_t **ss;
    _Atomic long next;
    _Atomic int failed;
} fill_job;

static void *fill_worker(void *arg)
{
    fill_job *j = arg;
    for (long s; (s = j->next++) < j->b->k;)
        if (setup_session(j->b, j->ss[s], s)) j->failed = 1;
    return NULL;
}

/* The fill of K sessions, one session per thread at a time (each session is
 * used by one thread; the fill touches only its own KV). A real prefill
 * (-p) computes on the engine's pool, so it runs on this thread. */
static int setup_sessions(bench *b, mz_ctx_t **ss)
{
    fill_job j = {.b = b, .ss = ss, .next = 0, .failed = 0};
    long n_th = b->prefill ? 1 : (b->threads < b->k ? b->threads : b->k);
    pthread_t th[64];
    long started = 0;
    for (; started < n_th - 1 && started < 64; started++)
        if (pthread_create(&th[started], NULL, fill_worker, &j)) break;
    fill_worker(&j);
    for (long i = 0; i < started; i++) pthread_join(th[i], NULL);
    return j.failed ? 1 : 0;
}

/* One question on c: the pipelined restore of whatever c has out, the
 * question's forward pass and one token; truncated away again. */
static int ask(bench *b, mz_ctx_t *c, unsigned long long seed, mz_restore_timings *tm)
{
    rand_tokens(b->qs, (size_t)b->q, b->nv, seed);
    if (mz_restore_generate(c, b->qs, (size_t)b->q, NULL, NULL, &g_one_token, NULL, tm) ||
        mz_ctx_truncate(c, (size_t)b->n)) {
        fprintf(stderr, "switch: %s\n", mz_ctx_errmsg(c));
        return 1;
    }
    return 0;
}

/* Single-session reference for budget bi: session c alone gives up (its own
 * units, mz_evict) as many KV bytes as a median switch found evicted. */
static int run_single(bench *b, mz_ctx_t *c, int bi, size_t target)
{
    double *t = calloc((size_t)b->reps, sizeof *t), ev_sum = 0;
    if (!t) return 1;
    for (long r = 0; r < b->reps; r++) {
        if (mz_restore(c, NULL)) {
            fprintf(stderr, "single: %s\n", mz_ctx_errmsg(c));
            return 1;
        }
        size_t ev = 0, step = b->kv_session_bytes / 64 + 1;
        while ((ev = kv_evicted(c)) < target) {
            size_t want = (target - ev) / 2;
            mz_evict_report er;
            if (mz_evict(c, want > step ? want : step, &er)) {
                fprintf(stderr, "single evict: %s\n", mz_ctx_errmsg(c));
                return 1;
            }
            if (er.bytes_freed == 0) break;
        }
        mz_harness_placement pl;
        mz_harness_placement_get(c, &pl);
        mz_restore_timings tm;
        if (ask(b, c, 9000 + (unsigned long long)(bi * 100 + r), &tm)) return 1;
        t[r] = tm.ttft_ms;
        ev_sum += (double)ev;
        print_reference_row("single", b->budget_names[bi], r, &tm, ev, &pl);
    }
    b->single_med[bi] = median(t, (size_t)b->reps);
    b->single_evicted_mb[bi] = ev_sum / (double)b->reps / 1e6;
    free(t);
    return 0;
}

/* Same-tiers reference for budget bi: session c alone, all resident, has
 * its units moved by the engine's eviction steps to exactly the median
 * switch's placement (KV chunks stored raw, stored encoded and compressed
 * in memory; the engine's weight blocks dropped), then restored by the
 * question (-R times). Same bytes from the same tiers: the ratio of the
 * switch to this is what switching between sessions costs beyond the
 * restore itself. */
static int run_same(bench *b, mz_ctx_t *c, int bi)
{
    const mz_harness_placement *want = &b->mz_place[bi];
    double *t = calloc((size_t)b->reps, sizeof *t);
    if (!t) return 1;
    for (long r = 0; r < b->reps; r++) {
        mz_evict_report er;
        if (mz_restore(c, NULL) || mz_harness_evict_to_placement(c, want, &er)) {
            fprintf(stderr, "same tiers: %s\n", mz_last_error());
            return 1;
        }
        mz_harness_placement pl;
        mz_harness_placement_get(c, &pl);
        const size_t ev = kv_evicted(c);
        mz_restore_timings tm;
        if (ask(b, c, 9500 + (unsigned long long)(bi * 100 + r), &tm)) return 1;
        t[r] = tm.ttft_ms;
        print_reference_row("same", b->budget_names[bi], r, &tm, ev, &pl);
    }
    b->same_med[bi] = median(t, (size_t)b->reps);
    free(t);
    return 0;
}

/* K sessions on one engine, the budgets in the order given (largest first
 * is the natural order: each budget starts from the last one's state). */
static int run_engine(bench *b, mz_engine_mode mode, bool with_single)
{
    const bool osp = mode == MZ_MODE_OS_PAGING;
    mz_engine_params ep = mz_engine_params_default();
    ep.n_threads = (int)b->threads;
    mz_engine_t *e = NULL;
    if (mz_engine_create(b->m, &ep, &e)) {
        fprintf(stderr, "engine: %s\n", mz_last_error());
        return 1;
    }
    mz_ctx_params cp = session_params(b, mode);
    mz_ctx_t **ss = calloc((size_t)b->k, sizeof *ss);
    const size_t n_sw = (size_t)(b->k * b->rounds);
    double *ttft = calloc(n_sw, sizeof *ttft), *evb = calloc(n_sw, sizeof *evb),
           *units = calloc(n_sw, sizeof *units);
    size_t *pl_raw = calloc(n_sw, sizeof *pl_raw), *pl_enc = calloc(n_sw, sizeof *pl_enc),
           *pl_comp = calloc(n_sw, sizeof *pl_comp), *pl_w = calloc(n_sw, sizeof *pl_w);
    if (!ss || !ttft || !evb || !units || !pl_raw || !pl_enc || !pl_comp || !pl_w) return 1;
    double t0 = mz_harness_time_ms();
    for (long s = 0; s < b->k; s++) {
        if (mz_session_create(e, &cp, &ss[s])) {
            fprintf(stderr, "session %ld: %s\n", s, mz_last_error());
            return 1;
        }
    }
    if (setup_sessions(b, ss)) return 1;
    mz_mem_stats st;
    mz_engine_get_mem_stats(e, &st);
    b->kv_session_bytes = st.kv.total_bytes / (size_t)b->k;
    b->weight_bytes = st.weights.total_bytes;
    printf("%s: %ld sessions of %ld tokens set up in %.1f s (%s); weights %.1f MB, kv %.1f MB\n",
           mz_engine_mode_name(mode), b->k, b->n, (mz_harness_time_ms() - t0) / 1000,
           b->prefill ? "prefill" : "calibrated fill", st.weights.total_bytes / 1e6,
           st.kv.total_bytes / 1e6);
    for (int bi = 0; bi < b->n_budgets; bi++) {
        const size_t budget =
            st.weights.total_bytes + (size_t)(b->budget_frac[bi] * (double)st.kv.total_bytes);
        size_t sw = 0;
        for (long r = -1; r < b->rounds; r++) { /* round -1: warm-up */
            for (long s = 0; s < b->k; s++) {
                size_t fp = footprint(e);
                if (fp > budget) {
                    mz_evict_report er;
                    if (mz_engine_evict(e, fp - budget, &er)) {
                        fprintf(stderr, "evict: %s\n", mz_last_error());
                        return 1;
                    }
                }
                size_t ev = kv_evicted(ss[s]);
                mz_harness_placement pl;
                if (!osp) mz_harness_placement_get(ss[s], &pl);
                mz_restore_timings tm;
                if (ask(b, ss[s], 1000 + (unsigned long long)((r + 1) * b->k + s), &tm)) return 1;
                if (r < 0) continue;
                ttft[sw] = tm.ttft_ms;
                evb[sw] = (double)ev;
                units[sw] = (double)tm.n_units;
                printf("%s %s switch %zu session %ld: ttft_ms=%.1f restore_ms=%.1f units=%zu "
                       "(storage %zu, memory %zu) evicted_kv=%.1f MB",
                       mz_engine_mode_name(mode), b->budget_names[bi], sw, s, tm.ttft_ms,
                       tm.restore_ms, tm.n_units, tm.n_storage_units, tm.n_mem_units, ev / 1e6);
                if (!osp) {
                    pl_raw[sw] = pl.n_kv_stored_raw;
                    pl_enc[sw] = pl.n_kv_stored_compressed;
                    pl_comp[sw] = pl.n_kv_compressed;
                    pl_w[sw] = pl.n_weights_dropped;
                    print_place("placement", &pl);
                    print_split(&tm);
                }
                printf("\n");
                fflush(stdout);
                sw++;
            }
        }
        const double med = median(ttft, n_sw);
        const double ev_med = median(evb, n_sw);
        if (osp) {
            b->osp_med[bi] = med;
        } else {
            b->mz_med[bi] = med;
            b->mz_evicted_mb[bi] = ev_med / 1e6;
            b->mz_units[bi] = median(units, n_sw);
            b->mz_place[bi] = (mz_harness_placement){
                .n_kv_stored_raw = median_size(pl_raw, n_sw),
                .n_kv_stored_compressed = median_size(pl_enc, n_sw),
                .n_kv_compressed = median_size(pl_comp, n_sw),
                .n_weights_dropped = median_size(pl_w, n_sw)};
        }
        printf("cell mode=%s k=%ld n=%ld budget=%s: median ttft_ms=%.1f over %zu switches, "
               "median evicted kv %.1f MB\n",
               mz_engine_mode_name(mode), b->k, b->n, b->budget_names[bi], med, n_sw, ev_med / 1e6);
        if (with_single) {
            /* The reference runs on session 0 of the same engine: mz_evict on
             * one of several sessions moves only its KV, never the weights. */
            const mz_harness_placement *p = &b->mz_place[bi];
            if (ev_med < 1 && p->n_weights_dropped == 0) {
                b->single_med[bi] = b->same_med[bi] = -1; /* nothing out: no restore to compare */
            } else if (run_same(b, ss[0], bi) ||
                       (ev_med >= 1 && run_single(b, ss[0], bi, (size_t)ev_med))) {
                return 1;
            }
        }
    }
    for (long s = 0; s < b->k; s++) mz_ctx_free(ss[s]);
    mz_engine_free(e);
    free(ss);
    free(ttft);
    free(evb);
    free(units);
    free(pl_raw);
    free(pl_enc);
    free(pl_comp);
    free(pl_w);
    return 0;
}

static void fmt_ms(char *buf, size_t cap, double v)
{
    if (v < 0) snprintf(buf, cap, "-");
    else snprintf(buf, cap, "%.1f", v);
}

static void fmt_ratio(char *buf, size_t cap, double num, double den)
{
    if (num < 0 || den <= 0) snprintf(buf, cap, "-");
    else snprintf(buf, cap, "%.2f", num / den);
}

static int parse_budgets(bench *b, const char *list)
{
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%s", list);
    b->n_budgets = 0;
    for (char *sv = NULL, *tok = strtok_r(tmp, ",", &sv); tok; tok = strtok_r(NULL, ",", &sv)) {
        if (b->n_budgets == MAX_BUDGETS) return -1;
        double f = !strcmp(tok, "all") ? 1.0 : !strcmp(tok, "half") ? 0.5
                   : !strcmp(tok, "eighth")                           ? 0.125
                                                                      : -1;
        if (f < 0) return -1;
        b->budget_names[b->n_budgets] = !strcmp(tok, "all") ? "all" : f == 0.5 ? "half" : "eighth";
        b->budget_frac[b->n_budgets++] = f;
    }
    return b->n_budgets ? 0 : -1;
}

static int parse_modes(const char *list, unsigned *out)
{
    char tmp[96];
    snprintf(tmp, sizeof tmp, "%s", list);
    *out = 0;
    for (char *sv = NULL, *tok = strtok_r(tmp, ",", &sv); tok; tok = strtok_r(NULL, ",", &sv)) {
        if (!strcmp(tok, "mzcache")) *out |= MODE_MZCACHE;
        else if (!strcmp(tok, "os-paging")) *out |= MODE_OSP;
        else if (!strcmp(tok, "recompute")) *out |= MODE_RECOMPUTE;
        else if (!strcmp(tok, "single")) *out |= MODE_SINGLE;
        else return -1;
    }
    return *out ? 0 : -1;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *budgets_s = "all,half,eighth",
               *modes_s = "mzcache,os-paging,recompute,single";
    bench b = {.k = 4, .n = 2048, .q = 8, .threads = 2, .rounds = 2, .reps = 3};
    bool ok = true;
    for (int i = 1; i < argc && ok; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-p")) {
            b.prefill = true;
            continue;
        }
        if (i + 1 >= argc) {
            ok = false;
            break;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "-m")) model = v;
        else if (!strcmp(a, "-k")) ok = parse_long(v, 1, 64, &b.k);
        else if (!strcmp(a, "-c")) ok = parse_long(v, 16, 1 << 17, &b.n);
        else if (!strcmp(a, "-q")) ok = parse_long(v, 1, 256, &b.q);
        else if (!strcmp(a, "-t")) ok = parse_long(v, 1, 256, &b.threads);
        else if (!strcmp(a, "-r")) ok = parse_long(v, 1, 100, &b.rounds);
        else if (!strcmp(a, "-R")) ok = parse_long(v, 1, 100, &b.reps);
        else if (!strcmp(a, "-C")) ok = parse_long(v, 1, 100, &b.recompute_reps);
        else if (!strcmp(a, "-b")) ok = parse_budgets(&b, v) == 0;
        else if (!strcmp(a, "-M")) modes_s = v;
        else ok = false;
    }
    unsigned modes = 0;
    if (!b.recompute_reps) b.recompute_reps = b.reps;
    if (ok && !b.n_budgets) ok = parse_budgets(&b, budgets_s) == 0;
    if (!ok || !model || parse_modes(modes_s, &modes)) {
        fprintf(stderr, "usage: bench_sessions -m MODEL [-k 4] [-c 2048] [-q 8] [-t 2] [-r 2] [-R 3] [-C R]\n"
                        "       [-b all,half,eighth] [-M mzcache,os-paging,recompute,single] [-p]\n");
        return 2;
    }
    for (int i = 0; i < b.n_budgets; i++)
        b.mz_med[i] = b.osp_med[i] = b.single_med[i] = b.same_med[i] = -1;
    b.recompute_med = -1;
    mz_model_params mp = mz_model_params_default();
    mp.n_threads = (int)b.threads;
    if (mz_model_load(model, &mp, &b.m)) {
        fprintf(stderr, "load: %s\n", mz_last_error());
        return 1;
    }
    b.nv = mz_model_n_vocab(b.m);
    b.hist = malloc((size_t)(b.k * b.n) * sizeof *b.hist);
    b.qs = malloc((size_t)b.q * sizeof *b.qs);
    if (!b.hist || !b.qs) return 1;
    for (long s = 0; s < b.k; s++)
        rand_tokens(b.hist + s * b.n, (size_t)b.n, b.nv, 100 + (unsigned long long)s);
    if (!b.prefill && (modes & (MODE_MZCACHE | MODE_OSP | MODE_SINGLE))) {
        mz_ctx_params cp = session_params(&b, MZ_MODE_MZCACHE);
        cp.n_ctx = 512;
        mz_ctx_t *cal = NULL;
        if (mz_ctx_init(b.m, &cp, &cal) || mz_kvfill_calibrate_default(cal, 512, &b.fill)) {
            fprintf(stderr, "calibration: %s\n", mz_last_error());
            return 1;
        }
        mz_ctx_free(cal);
    }
    printf("model %s, k=%ld n=%ld q=%ld threads=%ld rounds=%ld reps=%ld recompute reps=%ld isa=%s\n",
           model, b.k, b.n, b.q, b.threads, b.rounds, b.reps, b.recompute_reps, mz_harness_isa());
    if ((modes & MODE_RECOMPUTE) && run_recompute(&b)) return 1;
    if ((modes & (MODE_MZCACHE | MODE_SINGLE)) &&
        run_engine(&b, MZ_MODE_MZCACHE, (modes & MODE_SINGLE) != 0))
        return 1;
    if ((modes & MODE_OSP) && run_engine(&b, MZ_MODE_OS_PAGING, false)) return 1;

    printf("\n| model | K | N | budget | evicted KV per switch | switch placement: stored "
           "raw+enc / compressed / weight blocks | mzcache TTFT ms | os-paging ms | recompute ms | "
           "single ms (same tiers) | single ms (same bytes, own eviction) | recompute / mzcache | "
           "mzcache / single same tiers | mzcache / single own eviction |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    const char *base = strrchr(model, '/');
    base = base ? base + 1 : model;
    for (int i = 0; i < b.n_budgets; i++) {
        char a[32], o[32], rc[32], sg[32], sm[32], r1[32], r2[32], r3[32];
        fmt_ms(a, sizeof a, b.mz_med[i]);
        fmt_ms(o, sizeof o, b.osp_med[i]);
        fmt_ms(rc, sizeof rc, b.recompute_med);
        fmt_ms(sg, sizeof sg, b.single_med[i]);
        fmt_ratio(r1, sizeof r1, b.recompute_med, b.mz_med[i]);
        fmt_ms(sm, sizeof sm, b.same_med[i]);
        fmt_ratio(r2, sizeof r2, b.same_med[i] < 0 ? -1 : b.mz_med[i], b.same_med[i]);
        fmt_ratio(r3, sizeof r3, b.single_med[i] < 0 ? -1 : b.mz_med[i], b.single_med[i]);
        const mz_harness_placement *p = &b.mz_place[i];
        printf("| %s | %ld | %ld | %s | %.1f MB (%.0f units) | %zu+%zu / %zu / %zu | "
               "%s | %s | %s | %s | %s | %s | %s | %s |\n",
               base, b.k, b.n, b.budget_names[i], b.mz_evicted_mb[i], b.mz_units[i],
               p->n_kv_stored_raw, p->n_kv_stored_compressed, p->n_kv_compressed,
               p->n_weights_dropped, a, o, rc, sm, sg, r1, r2, r3);
    }
    mz_kvfill_free(b.fill);
    free(b.hist);
    free(b.qs);
    mz_model_free(b.m);
    return 0;
}
