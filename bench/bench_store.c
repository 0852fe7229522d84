/*
 * bench_store.c — durable sessions (include/mzcache.h, "session store").
 *
 *   bench_store ttft MODEL N STORE_DIR
 *       TTFT of an 8-token question after kill -9 and a restart, for a
 *       session of N tokens: a child prefills N tokens into a stored session,
 *       syncs it and kills itself with SIGKILL; the model file and the
 *       store's files are dropped from the page cache (POSIX_FADV_DONTNEED);
 *       then, timed from the restart: model load + store open +
 *       mz_session_resume (the stored chunks restored, the partial one
 *       recomputed) + the question's prefill, vs recompute: model load +
 *       prefill of all N tokens + the question. With MZ_PEER=1 also
 *       llama.cpp's state reload (bench/peer_llamacpp.py) in the same run,
 *       and a table of the three; MZ_PEER_STATE_BIN=path does the same with
 *       bench/peer/peer_state_reload.c (bench/build-peer-state.sh builds it).
 *       MZ_STORE_CODEC=q8 stores the full chunks as q8 records
 *       (`--store-codec q8`; raw by default).
 *   bench_store resume MODEL N STORE_DIR
 *       Where a resume spends its time, page cache dropped: a synthetic
 *       session (as evict-clean's) of N tokens (the last chunk full, so 256
 *       tokens are recomputed: the worst case) and of N + 1 (one token, the
 *       best case): model load, store open, mz_session_resume with its
 *       pipeline's timings, the 8-token question.
 *   bench_store load MODEL N STORE_DIR
 *       The model load alone, cold page cache: one loader thread vs the
 *       default (all CPUs) or MZ_LOAD_THREADS, alternating, medians of 7
 *       (N, STORE_DIR unused).
 *       MZ_RESUME_QUESTION=after (ttft, resume): the question is prefilled
 *       after mz_session_resume returns instead of in its pipelined pass
 *       (mz_session_resume_prefill, the default), for the two on one build.
 *       MZ_LOAD_THREADS=N sets the loader threads of every other command
 *       (mz_model_params.n_threads; default 0: all CPUs).
 *   bench_store recompute MODEL N STORE_DIR
 *       The recompute baseline alone: cold model load + prefill of N tokens
 *       + the question (STORE_DIR unused).
 *   bench_store writebehind MODEL N STORE_DIR
 *       Decode tokens/s with the write-behind running vs off: a synthetic
 *       N-position session (calibrated fill) decodes 48 tokens, once
 *       unstored, once stored just before (the worker writes all N/256 full
 *       chunks meanwhile); alternating, medians of 3, ratio.
 *   bench_store evict-clean MODEL N STORE_DIR
 *       Time to evict all clean KV of an N-token session. The session is
 *       built by writing its chunks (random bytes, real records and
 *       checksums) and manifest straight into the store and resuming it, so
 *       no N-token prefill is needed; the eviction then only releases pages.
 *       Medians of 5 (each time restored through the pipelined restore in
 *       between) of ms per GiB freed, wall and thread CPU, with the KV on
 *       4 KiB pages (MZCACHE_KV_THP=0) and on huge-page slabs (=1), and
 *       their ratio.
 */
#define _GNU_SOURCE
#include "core/core.h"
#include "mzcache.h"
#include "harness/harness.h" /* not public: a context's KV layout */
#include "io/swapfile.h"
#include "kernels/kernels.h"
#include "store/manifest.h"
#include "store/store.h"
#include "bench_util.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

static double now_ms(void) { return mz_time_ms(); }

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void drop_cache(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

static void tokens(mz_token *t, size_t n, int nv)
{
    unsigned long long s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        t[i] = (mz_token)((s >> 33) % (unsigned long long)(nv - 100)) + 50;
    }
}

/* MZ_LOAD_THREADS=N: the model's loader threads (default 0: all CPUs). */
static mz_model_t *load(const char *path)
{
    mz_model_params mp = mz_model_params_default();
    const char *lt = getenv("MZ_LOAD_THREADS");
    if (lt) {
        char *end = NULL;
        errno = 0;
        long v = strtol(lt, &end, 10);
        if (errno || end == lt || *end || v < 0 || v > 256) {
            fprintf(stderr, "bad MZ_LOAD_THREADS\n");
            exit(2);
        }
        mp.n_threads = (int)v;
    }
    mz_model_t *m = NULL;
    if (mz_model_load(path, &mp, &m)) {
        fprintf(stderr, "load: %s\n", mz_last_error());
        exit(1);
    }
    return m;
}

/* What a restart that knows its session does first: the store's reads
 * start while the model loads (mz_store_prefetch). MZ_NO_PREFETCH=1: not. */
static void prefetch(const char *dir, const char *id)
{
    mz_store_params sp = mz_store_params_default();
    sp.dir = dir;
    if (!getenv("MZ_NO_PREFETCH") && mz_store_prefetch(&sp, id))
        fprintf(stderr, "prefetch: %s\n", mz_last_error());
}

/* A cold restart: the model and stored session id's two files leave the page cache. */
static void drop_caches(const char *model, const char *dir, const char *id)
{
    char kv[4200], man[4200];
    snprintf(kv, sizeof kv, "%s/%s.kv", dir, id);
    snprintf(man, sizeof man, "%s/%s.mzs", dir, id);
    drop_cache(model);
    drop_cache(kv);
    drop_cache(man);
}

/* An engine on m and the store at dir on it (codec: NULL = the store's default). */
static int open_store(mz_model_t *m, const char *dir, const char *codec, mz_engine_t **e, mz_store_t **st)
{
    mz_store_params sp = mz_store_params_default();
    sp.dir = dir;
    sp.codec = codec;
    return mz_engine_create(m, NULL, e) || mz_store_open(*e, &sp, st) ? -1 : 0;
}

/* Deletes session id from the store, then closes the store, the engine and the model. */
static void close_store(mz_store_t *st, const char *id, mz_engine_t *e, mz_model_t *m)
{
    if (id && mz_store_delete(st, id)) fprintf(stderr, "delete: %s\n", mz_last_error());
    mz_store_close(st);
    mz_engine_free(e);
    mz_model_free(m);
}

static mz_ctx_params cparams(size_t n)
{
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = (int)(n + 512);
    cp.kv_codec = "raw";
    return cp;
}

static int first_token_after(mz_ctx_t *c, const mz_token *q, size_t nq)
{
    if (mz_prefill(c, q, nq)) {
        fprintf(stderr, "question: %s\n", mz_last_error());
        return -1;
    }
    return 0;
}

/* The restart's question: in the resume's pipelined pass
 * (mz_session_resume_prefill) or, with MZ_RESUME_QUESTION=after, prefilled
 * after mz_session_resume returns (the two on one build). *t_resume_ms gets
 * the time to the resume's return (the question included when in the pass). */
static bool question_after(void)
{
    const char *v = getenv("MZ_RESUME_QUESTION");
    return v && !strcmp(v, "after");
}

static int resume_and_ask(mz_store_t *st, const char *id, const mz_ctx_params *cp,
                          const mz_token *q, size_t nq, mz_ctx_t **c, mz_resume_info *ri,
                          double *t_resume_ms)
{
    double t0 = now_ms();
    bool after = question_after();
    mz_status s = after ? mz_session_resume(st, id, cp, c, ri)
                        : mz_session_resume_prefill(st, id, cp, q, nq, c, ri);
    *t_resume_ms = now_ms() - t0;
    if (s) {
        fprintf(stderr, "resume: %s\n", ri->reason[0] ? ri->reason : mz_last_error());
        return -1;
    }
    return after ? first_token_after(*c, q, nq) : 0;
}

/* The table of the three, one row. */
static void peer_table(size_t n, double resume_ms, double peer_ms, double recompute_ms)
{
    printf("| tokens | mzcache resume ms | llama.cpp state reload ms | recompute ms | resume / state "
           "reload | recompute / resume |\n|---|---|---|---|---|---|\n| %zu | %.0f | %.0f | %.0f | "
           "%.2f | %.1fx |\n", n, resume_ms, peer_ms, recompute_ms, resume_ms / peer_ms,
           recompute_ms / resume_ms);
}

/* llama.cpp's answer to a kill, in the same run: bench/peer_llamacpp.py
 * --metrics state_reload (model load + llama_state_load_file of a saved
 * state, page cache dropped; its state is synthetic, of llama.cpp's own
 * layout) with as many threads as ours. MZ_PEER=1 turns it on; MZ_PEER_PY
 * names the script (default bench/peer_llamacpp.py). */
static void peer_state_reload(const char *model, size_t n, double resume_ms, double recompute_ms)
{
    const char *py = getenv("MZ_PEER_PY") ? getenv("MZ_PEER_PY") : "bench/peer_llamacpp.py";
    char abs[4096], cmd[9000], csv[] = "/tmp/bench_store_peer_XXXXXX";
    int fd = mkstemp(csv);
    if (fd < 0 || !realpath(model, abs)) {
        printf("llama.cpp state reload: not measured (%s)\n", strerror(errno));
        return;
    }
    close(fd);
    snprintf(cmd, sizeof cmd, "python3 '%s' --models '%s' --ctx %zu --metrics state_reload --runs 3 "
             "--threads %d --out '%s' >&2", py, abs, n, mz_n_cpus(), csv);
    int rc = system(cmd);
    double med = -1;
    FILE *f = fopen(csv, "r");
    char line[1024];
    while (rc == 0 && f && fgets(line, sizeof line, f)) {
        /* date,model,ctx,metric,median_s,... */
        char *fld[6] = {0};
        int k = 0;
        for (char *p = line; k < 6 && p; k++) {
            fld[k] = p;
            p = strchr(p, ',');
            if (p) *p++ = '\0';
        }
        if (k >= 5 && fld[3] && !strcmp(fld[3], "state_reload")) med = strtod(fld[4], NULL) * 1e3;
    }
    if (f) fclose(f);
    unlink(csv);
    if (med <= 0) {
        printf("llama.cpp state reload: not measured (the peer failed: exit %d; is llama-cpp-python "
               "installed? scripts/install-peer.sh)\n", rc);
        return;
    }
    peer_table(n, resume_ms, med, recompute_ms);
}

/* The same column from bench/peer/peer_state_reload.c (llama.h in C; built by
 * bench/build-peer-state.sh), where llama-cpp-python is missing or crashes:
 * MZ_PEER_STATE_BIN=path. Its synthetic state is written next to the store
 * (same disk), then three cold reloads, each in a fresh process, medians,
 * with the OMP_WAIT_POLICY of the environment (passive if unset). */
static void peer_state_reload_c(const char *bin, const char *model, const char *dir, size_t n,
                                double resume_ms, double recompute_ms)
{
    char state[4200], cmd[9000], line[1024];
    /* passive OpenMP waits unless told otherwise: llama.cpp's spinning
     * barriers measure the load of a shared machine, not llama.cpp */
    const char *omp = getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "passive";
    snprintf(state, sizeof state, "%s/peer.state", dir);
    snprintf(cmd, sizeof cmd, "export OMP_WAIT_POLICY='%s'; '%s' save -m '%s' -n %zu -s '%s' -t %d >&2 "
             "&& '%s' reload -m '%s' -n %zu -s '%s' -t %d -r 3", omp, bin, model, n, state,
             mz_n_cpus(), bin, model, n, state, mz_n_cpus());
    fflush(stdout);
    FILE *p = popen(cmd, "r");
    double ms = -1, mod = 0, ctx = 0, st = 0, q = 0;
    while (p && fgets(line, sizeof line, p))
        if (sscanf(line, "state_reload tokens=%*d runs=%*d ms=%lf model_ms=%lf ctx_ms=%lf state_ms=%lf "
                   "query_ms=%lf", &ms, &mod, &ctx, &st, &q) == 5)
            fputs(line, stdout);
    int rc = p ? pclose(p) : -1;
    unlink(state);
    if (rc || ms <= 0) {
        printf("llama.cpp state reload (%s): not measured (exit %d)\n", bin, rc);
        return;
    }
    printf("llama.cpp state reload: %.0f ms = model load %.0f + context %.0f + "
           "llama_state_load_file %.0f + the question %.0f (medians of 3, OMP_WAIT_POLICY=%s)\n",
           ms, mod, ctx, st, q, omp);
    peer_table(n, resume_ms, ms, recompute_ms);
}

static int cmd_ttft(const char *model, size_t n, const char *dir)
{
    mz_token *t = malloc((n + 8) * sizeof *t);
    pid_t pid = fork();
    if (pid == 0) {
        mz_model_t *m = load(model);
        tokens(t, n + 8, mz_model_n_vocab(m));
        mz_engine_t *e = NULL;
        mz_store_t *st = NULL;
        mz_ctx_t *c = NULL;
        mz_ctx_params cp = cparams(n);
        if (open_store(m, dir, getenv("MZ_STORE_CODEC"), &e, &st) || mz_session_create(e, &cp, &c) ||
            mz_session_store(c, st, "bench"))
            _exit(2);
        double t0 = now_ms();
        if (mz_prefill(c, t, n) || mz_session_sync(c)) _exit(3);
        fprintf(stderr, "child: prefilled and stored %zu tokens in %.0f ms; kill -9\n", n,
                now_ms() - t0);
        raise(SIGKILL);
        _exit(4);
    }
    int status;
    waitpid(pid, &status, 0);
    if (!WIFSIGNALED(status)) {
        fprintf(stderr, "child did not die by SIGKILL (status %d)\n", status);
        return 1;
    }
    drop_caches(model, dir, "bench");
    /* restart: resume */
    double t0 = now_ms();
    prefetch(dir, "bench");
    mz_model_t *m = load(model);
    tokens(t, n + 8, mz_model_n_vocab(m));
    mz_engine_t *e = NULL;
    mz_store_t *st = NULL;
    if (open_store(m, dir, getenv("MZ_STORE_CODEC"), &e, &st)) return 1;
    double t_load = now_ms() - t0;
    mz_ctx_params cp = cparams(n);
    mz_ctx_t *c = NULL;
    mz_resume_info ri;
    double t_resume = 0;
    if (resume_and_ask(st, "bench", &cp, t + n, 8, &c, &ri, &t_resume)) return 1;
    double ttft_resume = now_ms() - t0;
    printf("resume:    TTFT %.0f ms (model load + store open %.0f ms, resume %.0f ms%s: %zu chunks "
           "restored, %zu tokens recomputed, restore pipeline %.0f ms)\n", ttft_resume, t_load,
           t_resume, question_after() ? ", then the question" : " with the question in its pass",
           ri.n_chunks_restored, ri.n_tokens_recomputed, ri.timings.ttft_ms);
    mz_ctx_free(c);
    close_store(st, "bench", e, m);
    /* restart: recompute */
    drop_cache(model);
    t0 = now_ms();
    m = load(model);
    c = NULL;
    if (mz_ctx_init(m, &cp, &c) || mz_prefill(c, t, n) || first_token_after(c, t + n, 8)) return 1;
    double ttft_re = now_ms() - t0;
    printf("recompute: TTFT %.0f ms\n", ttft_re);
    printf("tokens %zu: resume %.0f ms, recompute %.0f ms, speed-up %.1fx\n", n, ttft_resume,
           ttft_re, ttft_re / ttft_resume);
    mz_ctx_free(c);
    mz_model_free(m);
    free(t);
    /* after the model is unmapped: a file mapped here would stay cached */
    if (getenv("MZ_PEER")) peer_state_reload(model, n, ttft_resume, ttft_re);
    if (getenv("MZ_PEER_STATE_BIN"))
        peer_state_reload_c(getenv("MZ_PEER_STATE_BIN"), model, dir, n, ttft_resume, ttft_re);
    return 0;
}

/* Writes an N-token session of random KV bytes straight into the store. */
static int synth_session(mz_store_t *st, mz_ctx_t *probe, size_t n)
{
    size_t L = (size_t)mz_harness_kv_n_layer(probe), cb = mz_harness_kv_chunk_bytes(probe);
    size_t k = (n - 1) / 256;
    char kv[4200];
    snprintf(kv, sizeof kv, "%s/synth.kv", mz_store_dir(st));
    unlink(kv);
    mz_swapfile_params sp = mz_swapfile_params_default();
    sp.flags = MZ_SWAP_PERSIST;
    sp.path = kv;
    mz_swapfile_t *sf = NULL;
    if (mz_swapfile_open(&sp, &sf)) return 1;
    void *buf = NULL;
    if (posix_memalign(&buf, 4096, cb)) return 1;
    unsigned long long s = 1;
    mz_manifest m = {0};
    m.model_id = st->model_id;
    m.tok_id = st->tok_id;
    snprintf(m.codec, sizeof m.codec, "raw");
    m.n_layer = (uint32_t)L;
    m.chunk_bytes = cb;
    snprintf(m.name, sizeof m.name, "synth");
    m.n_tokens = n;
    m.tokens = malloc(n * sizeof *m.tokens);
    tokens(m.tokens, n, st->n_vocab);
    m.n_chunks = k;
    m.recs = calloc(k * L, sizeof *m.recs);
    for (size_t ch = 0; ch < k; ch++)
        for (size_t l = 0; l < L; l++) {
            uint16_t *h = buf;
            for (size_t i = 0; i < cb / 2; i++) {
                s = s * 6364136223846793005ULL + 1;
                h[i] = (uint16_t)(0x3000 + ((s >> 40) & 0x7ff)); /* small finite F16 */
            }
            mz_swap_slot slot;
            if (mz_swapfile_write(sf, buf, cb, (uint64_t)l << 32 | ch, &slot) ||
                mz_swapfile_slot_info(sf, slot, &m.recs[ch * L + l]))
                return 1;
        }
    if (mz_swapfile_sync(sf)) return 1;
    mz_swapfile_close(sf);
    m.created_ns = m.updated_ns = mz_store_now_ns();
    if (mz_store_write_manifest(st, &m)) return 1;
    free(m.tokens);
    free(m.recs);
    free(buf);
    return 0;
}

/* CPU time of this process (all its threads), ms. */
static double proc_cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/* AnonHugePages of this process, KiB (/proc/self/smaps_rollup). */
static long anon_huge_kib(void)
{
    return (long)bench_smaps_kib("AnonHugePages");
}

#define EVICT_REPS 5

/* One series of evict-clean under MZCACHE_KV_THP=thp: *ms_gib = median wall
 * ms per GiB freed, *cpu_gib = median thread-CPU ms per GiB. */
static int evict_series(mz_store_t *st, const mz_ctx_params *cp, size_t n, const char *thp,
                        double *ms_gib, double *cpu_gib)
{
    setenv("MZCACHE_KV_THP", thp, 1);
    char kv[4200];
    snprintf(kv, sizeof kv, "%s/synth.kv", mz_store_dir(st));
    drop_cache(kv);
    mz_ctx_t *c = NULL;
    mz_resume_info ri;
    double t0 = now_ms();
    if (mz_session_resume(st, "synth", cp, &c, &ri)) {
        fprintf(stderr, "resume: %s\n", ri.reason);
        return 1;
    }
    double t_resume = now_ms() - t0;
    double wall[EVICT_REPS], cpu[EVICT_REPS], gib = 0;
    long huge = 0;
    size_t released = 0, written = 0;
    mz_token q = 100;
    for (int rep = 0; rep < EVICT_REPS; rep++) {
        /* only full chunks, each with its clean copy written */
        if (mz_ctx_truncate(c, n) || mz_session_sync(c)) return 1;
        mz_mem_stats ms;
        mz_get_mem_stats(c, &ms);
        size_t before = ms.kv.resident_bytes;
        huge = anon_huge_kib();
        mz_evict_report r;
        t0 = now_ms();
        double c0 = cpu_ms();
        if (mz_evict(c, SIZE_MAX, &r)) return 1;
        wall[rep] = now_ms() - t0;
        cpu[rep] = cpu_ms() - c0;
        mz_get_mem_stats(c, &ms);
        gib = (double)(before - ms.kv.resident_bytes) / (1024.0 * 1024 * 1024);
        wall[rep] /= gib;
        cpu[rep] /= gib;
        released = r.n_kv_stored_raw;
        written = r.n_kv_compressed + r.n_kv_stored_compressed;
        /* back through the pipelined restore (a one-token request), as a
         * request would bring it back */
        if (mz_prefill_restore(c, &q, 1, NULL, NULL)) return 1;
    }
    *ms_gib = bench_median(wall, EVICT_REPS);
    *cpu_gib = bench_median(cpu, EVICT_REPS);
    printf("MZCACHE_KV_THP=%s: resume %.0f ms (%zu chunks restored, %zu tokens recomputed); "
           "evict all clean KV (%.3f GiB, %zu units released, %zu written, AnonHugePages before "
           "%ld KiB): median of %d %.1f ms/GiB wall, %.1f ms/GiB CPU\n", thp, t_resume,
           ri.n_chunks_restored, ri.n_tokens_recomputed, gib, released, written, huge, EVICT_REPS,
           *ms_gib, *cpu_gib);
    mz_ctx_free(c);
    return 0;
}

static int cmd_evict_clean(const char *model, size_t n, const char *dir)
{
    n = n / 256 * 256;
    mz_model_t *m = load(model);
    mz_engine_t *e = NULL;
    mz_store_t *st = NULL;
    mz_ctx_params cp = cparams(n);
    mz_ctx_t *probe = NULL;
    if (open_store(m, dir, NULL, &e, &st) || mz_session_create(e, &cp, &probe)) {
        fprintf(stderr, "%s\n", mz_last_error());
        return 1;
    }
    /* n + 1 tokens: all n/256 chunks stored, one token recomputed at resume */
    if (synth_session(st, probe, n + 1)) {
        fprintf(stderr, "synth: %s\n", mz_last_error());
        return 1;
    }
    /* probe stays: with two sessions, mz_evict on one moves only its KV (no weights) */
    double ms4k, cpu4k, msthp, cputhp;
    if (evict_series(st, &cp, n, "0", &ms4k, &cpu4k) || evict_series(st, &cp, n, "1", &msthp, &cputhp))
        return 1;
    printf("tokens %zu: evict all clean KV, ms per GiB freed (median of %d): 4 KiB pages %.1f wall "
           "/ %.1f CPU; huge-page slabs %.1f wall / %.1f CPU; ratio slabs/4K %.3f wall, %.3f CPU\n",
           n, EVICT_REPS, ms4k, cpu4k, msthp, cputhp, msthp / ms4k, cputhp / cpu4k);
    mz_ctx_free(probe);
    close_store(st, "synth", e, m);
    return 0;
}

/* Resume of a synthetic N-token session after the page cache is dropped,
 * with where the time goes; no recompute baseline (the ttft command has
 * it). Two points: N (the last chunk full: 256 tokens recomputed, the
 * worst case) and N + 1 (one token recomputed, the best case). */
static int resume_once(const char *model, size_t n, const char *dir)
{
    /* the store: written by a process that then exits, as a killed one would leave it */
    pid_t pid = fork();
    if (pid == 0) {
        mz_model_t *m = load(model);
        mz_engine_t *e = NULL;
        mz_store_t *st = NULL;
        mz_ctx_t *probe = NULL;
        mz_ctx_params cp = cparams(n);
        if (open_store(m, dir, NULL, &e, &st) || mz_session_create(e, &cp, &probe) ||
            synth_session(st, probe, n))
            _exit(2);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status)) return 1;
    drop_caches(model, dir, "synth");
    double cpu0 = proc_cpu_ms();
    double t0 = now_ms();
    prefetch(dir, "synth");
    mz_model_t *m = load(model);
    double t_model = now_ms() - t0;
    mz_engine_t *e = NULL;
    mz_store_t *st = NULL;
    if (open_store(m, dir, NULL, &e, &st)) return 1;
    double t_open = now_ms() - t0 - t_model;
    mz_ctx_params cp = cparams(n);
    mz_ctx_t *c = NULL;
    mz_resume_info ri;
    mz_token q[8];
    tokens(q, 8, mz_model_n_vocab(m));
    double t1 = now_ms(), t_resume = 0;
    if (resume_and_ask(st, "synth", &cp, q, 8, &c, &ri, &t_resume)) return 1;
    double t_q = now_ms() - t1 - t_resume, ttft = now_ms() - t0, cpu = proc_cpu_ms() - cpu0;
    const mz_restore_timings *tm = &ri.timings;
    printf("tokens %zu: TTFT %.0f ms = model load %.0f + store open (model identity) %.0f + resume "
           "%.0f%s (%zu chunks restored, %zu tokens recomputed; pipeline: prefill %.0f, stall %.0f, "
           "all units ready %.0f, storage worker %.0f, alloc worker %.0f, %d restore threads) + "
           "question %.0f\n", n, ttft, t_model, t_open, t_resume,
           question_after() ? "" : " with the question in its pass", ri.n_chunks_restored,
           ri.n_tokens_recomputed, tm->prefill_ms, tm->stall_ms, tm->restore_ms, tm->storage_ms,
           tm->alloc_ms, tm->n_restore_threads, t_q);
    printf("tokens %zu: process CPU time over the TTFT %.0f ms (%.2f CPUs busy on average)\n", n,
           cpu, cpu / ttft);
    mz_ctx_free(c);
    close_store(st, "synth", e, m);
    return 0;
}

static int cmd_resume(const char *model, size_t n, const char *dir)
{
    n = n / 256 * 256;
    return resume_once(model, n, dir) || resume_once(model, n + 1, dir);
}

/* Decode speed with the write-behind running vs off. A session of N
 * positions (the calibrated synthetic fill, src/harness/kv_fill.h) decodes T
 * tokens, one forward pass each; "on": the session is stored just before,
 * so the worker writes all its N/256 full chunks while the decode runs.
 * Alternating off/on, medians of R. */
static int cmd_writebehind(const char *model, size_t n, const char *dir)
{
    enum { T = 48, R = 3 };
    mz_model_t *m = load(model);
    mz_engine_t *e = NULL;
    mz_store_t *st = NULL;
    if (open_store(m, dir, NULL, &e, &st)) {
        fprintf(stderr, "%s\n", mz_last_error());
        return 1;
    }
    mz_ctx_params cp = cparams(n + T + 8);
    mz_ctx_params calp = mz_ctx_params_default();
    calp.n_ctx = 512;
    mz_ctx_t *cal = NULL;
    mz_kvfill *f = NULL;
    if (mz_ctx_init(m, &calp, &cal) || mz_kvfill_calibrate_default(cal, 512, &f)) return 1;
    mz_ctx_free(cal);
    double tps[2][R], left[R];
    for (int rep = 0; rep < R; rep++)
        for (int on = 0; on < 2; on++) {
            mz_ctx_t *c = NULL;
            if (mz_session_create(e, &cp, &c) || mz_kvfill_write(f, c, n, 0x9e3779b97f4a7c15ULL))
                return 1;
            mz_token t = 1000;
            if (mz_prefill(c, &t, 1)) return 1;
            if (on && mz_session_store(c, st, "wb")) {
                fprintf(stderr, "store: %s\n", mz_last_error());
                return 1;
            }
            double t0 = now_ms();
            for (int i = 0; i < T; i++) {
                t = (mz_token)(1000 + 37 * i);
                if (mz_prefill(c, &t, 1)) return 1;
            }
            double dt = now_ms() - t0;
            tps[on][rep] = T / (dt / 1e3);
            if (on) {
                /* what the worker still had to do when the decode ended */
                t0 = now_ms();
                if (mz_session_sync(c)) return 1;
                left[rep] = now_ms() - t0;
            }
            mz_ctx_free(c);
            if (on && mz_store_delete(st, "wb")) fprintf(stderr, "delete: %s\n", mz_last_error());
        }
    mz_kvfill_free(f);
    double off = bench_median(tps[0], R), on = bench_median(tps[1], R), l = bench_median(left, R);
    mz_model_info mi;
    mz_model_get_info(m, &mi);
    printf("tokens %zu, decode of %d tokens: write-behind off %.2f tok/s, on %.2f tok/s (median of "
           "%d), ratio on/off %.3f (cost %.1f %%); the worker writes %zu chunks x %d layers (%.0f "
           "MiB); the sync after the decode took %.0f ms (median)\n", n, T, off, on, R, on / off,
           100.0 * (1.0 - on / off), n / 256, mi.n_layer,
           (double)(n / 256 * 256) * (double)mi.kv_bytes_per_token / 1048576.0, l);
    close_store(st, NULL, e, m);
    return 0;
}

/* Recompute alone: model load from a cold page cache + prefill of N tokens
 * + the 8-token question (the baseline of ttft, without its child). */
static int cmd_recompute(const char *model, size_t n)
{
    mz_token *t = malloc((n + 8) * sizeof *t);
    drop_cache(model);
    double t0 = now_ms();
    mz_model_t *m = load(model);
    tokens(t, n + 8, mz_model_n_vocab(m));
    mz_ctx_params cp = cparams(n);
    mz_ctx_t *c = NULL;
    if (mz_ctx_init(m, &cp, &c) || mz_prefill(c, t, n) || first_token_after(c, t + n, 8)) return 1;
    printf("tokens %zu: recompute TTFT %.0f ms\n", n, now_ms() - t0);
    mz_ctx_free(c);
    mz_model_free(m);
    free(t);
    return 0;
}

/* The model load alone from a cold page cache, one loader thread vs the
 * default (all CPUs, mz_model_params.n_threads = 0), alternating, medians
 * of LOAD_REPS; N and the store directory are not used. */
#define LOAD_REPS 7
static int cmd_load(const char *model)
{
    double one[LOAD_REPS], all[LOAD_REPS];
    char keep[16] = "";
    const char *lt = getenv("MZ_LOAD_THREADS") ? strncpy(keep, getenv("MZ_LOAD_THREADS"), 15) : NULL;
    for (int r = 0; r < LOAD_REPS; r++)
        for (int k = 0; k < 2; k++) {
            if (!k) setenv("MZ_LOAD_THREADS", "1", 1);
            else if (lt) setenv("MZ_LOAD_THREADS", lt, 1);
            else unsetenv("MZ_LOAD_THREADS");
            drop_cache(model);
            double t0 = now_ms();
            mz_model_t *m = load(model);
            (k ? all : one)[r] = now_ms() - t0;
            mz_model_free(m);
        }
    double a = bench_median(one, LOAD_REPS), b = bench_median(all, LOAD_REPS);
    printf("model load, cold page cache, median of %d alternating: 1 thread %.1f ms, n_threads %s "
           "(%d CPUs) %.1f ms, ratio %.2f\n", LOAD_REPS, a, lt ? lt : "0, all CPUs",
           (int)sysconf(_SC_NPROCESSORS_ONLN), b, b / a);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: bench_store ttft|evict-clean|resume|writebehind|recompute|load MODEL N_TOKENS STORE_DIR\n");
        return 2;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long n = strtoull(argv[3], &end, 10);
    if (errno || *end || n < 257 || n > (1u << 20)) {
        fprintf(stderr, "bad N_TOKENS\n");
        return 2;
    }
    if (!strcmp(argv[1], "ttft")) return cmd_ttft(argv[2], (size_t)n, argv[4]);
    if (!strcmp(argv[1], "evict-clean")) return cmd_evict_clean(argv[2], (size_t)n, argv[4]);
    if (!strcmp(argv[1], "resume")) return cmd_resume(argv[2], (size_t)n, argv[4]);
    if (!strcmp(argv[1], "recompute")) return cmd_recompute(argv[2], (size_t)n);
    if (!strcmp(argv[1], "load")) return cmd_load(argv[2]);
    if (!strcmp(argv[1], "writebehind")) return cmd_writebehind(argv[2], (size_t)n, argv[4]);
    fprintf(stderr, "unknown command %s\n", argv[1]);
    return 2;
}
