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
 *       prefill of all N tokens + the question.
 *   bench_store evict-clean MODEL N STORE_DIR
 *       Time to evict all clean KV of an N-token session. The session is
 *       built by writing its chunks (random bytes, real records and
 *       checksums) and manifest straight into the store and resuming it, so
 *       no N-token prefill is needed; the eviction then only releases pages.
 *       Prints ms, GiB freed and ms per GiB, and the resume (restore) time.
 */
#define _GNU_SOURCE
#include "mzcache.h"
#include "harness/harness.h" /* not public: a context's KV layout */
#include "io/swapfile.h"
#include "store/manifest.h"
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

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

static mz_model_t *load(const char *path)
{
    mz_model_params mp = mz_model_params_default();
    mz_model_t *m = NULL;
    if (mz_model_load(path, &mp, &m)) {
        fprintf(stderr, "load: %s\n", mz_last_error());
        exit(1);
    }
    return m;
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
        mz_store_params sp = mz_store_params_default();
        sp.dir = dir;
        mz_ctx_params cp = cparams(n);
        if (mz_engine_create(m, NULL, &e) || mz_store_open(e, &sp, &st) ||
            mz_session_create(e, &cp, &c) || mz_session_store(c, st, "bench"))
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
    char kv[4200], man[4200];
    snprintf(kv, sizeof kv, "%s/bench.kv", dir);
    snprintf(man, sizeof man, "%s/bench.mzs", dir);
    drop_cache(model);
    drop_cache(kv);
    drop_cache(man);
    /* restart: resume */
    double t0 = now_ms();
    mz_model_t *m = load(model);
    tokens(t, n + 8, mz_model_n_vocab(m));
    mz_engine_t *e = NULL;
    mz_store_t *st = NULL;
    mz_store_params sp = mz_store_params_default();
    sp.dir = dir;
    if (mz_engine_create(m, NULL, &e) || mz_store_open(e, &sp, &st)) return 1;
    double t_load = now_ms() - t0;
    mz_ctx_params cp = cparams(n);
    mz_ctx_t *c = NULL;
    mz_resume_info ri;
    if (mz_session_resume(st, "bench", &cp, &c, &ri)) {
        fprintf(stderr, "resume: %s\n", ri.reason);
        return 1;
    }
    double t_resume = now_ms() - t0;
    if (first_token_after(c, t + n, 8)) return 1;
    double ttft_resume = now_ms() - t0;
    printf("resume:    TTFT %.0f ms (model load + store open %.0f ms, resume %.0f ms: %zu chunks "
           "restored, %zu tokens recomputed, restore pipeline %.0f ms)\n", ttft_resume, t_load,
           t_resume - t_load, ri.n_chunks_restored, ri.n_tokens_recomputed, ri.timings.ttft_ms);
    mz_ctx_free(c);
    if (mz_store_delete(st, "bench")) fprintf(stderr, "delete: %s\n", mz_last_error());
    mz_store_close(st);
    mz_engine_free(e);
    mz_model_free(m);
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

static int cmd_evict_clean(const char *model, size_t n, const char *dir)
{
    mz_model_t *m = load(model);
    mz_engine_t *e = NULL;
    mz_store_t *st = NULL;
    mz_store_params sp = mz_store_params_default();
    sp.dir = dir;
    mz_ctx_params cp = cparams(n);
    mz_ctx_t *probe = NULL;
    if (mz_engine_create(m, NULL, &e) || mz_store_open(e, &sp, &st) ||
        mz_session_create(e, &cp, &probe)) {
        fprintf(stderr, "%s\n", mz_last_error());
        return 1;
    }
    if (synth_session(st, probe, n)) {
        fprintf(stderr, "synth: %s\n", mz_last_error());
        return 1;
    }
    /* probe stays: with two sessions, mz_evict on one moves only its KV (no weights) */
    char kv[4200];
    snprintf(kv, sizeof kv, "%s/synth.kv", dir);
    drop_cache(kv);
    mz_ctx_t *c = NULL;
    mz_resume_info ri;
    double t0 = now_ms();
    if (mz_session_resume(st, "synth", &cp, &c, &ri)) {
        fprintf(stderr, "resume: %s\n", ri.reason);
        return 1;
    }
    double t_resume = now_ms() - t0;
    /* only full chunks, each with its clean copy written (the partial one goes) */
    if (mz_ctx_truncate(c, mz_ctx_n_tokens(c) / 256 * 256) || mz_session_sync(c)) return 1;
    mz_mem_stats ms;
    mz_get_mem_stats(c, &ms);
    size_t before = ms.kv.resident_bytes;
    mz_evict_report r;
    t0 = now_ms();
    double c0 = cpu_ms();
    if (mz_evict(c, SIZE_MAX, &r)) return 1;
    double t_evict = now_ms() - t0, c_evict = cpu_ms() - c0;
    mz_get_mem_stats(c, &ms);
    double gib = (double)(before - ms.kv.resident_bytes) / (1024.0 * 1024 * 1024);
    printf("tokens %zu: resume (restore %zu chunks from a cold file + recompute %zu tokens) %.0f ms; "
           "evict all clean KV: %.2f ms wall, %.2f ms CPU for %.3f GiB (%.2f ms/GiB wall, %.2f "
           "CPU), %zu chunks released, %zu written, %zu weight blocks dropped\n", n,
           ri.n_chunks_restored, ri.n_tokens_recomputed, t_resume, t_evict, c_evict, gib,
           t_evict / gib, c_evict / gib, r.n_kv_stored_raw,
           r.n_kv_compressed + r.n_kv_stored_compressed, r.n_weights_dropped);
    mz_ctx_free(c);
    mz_ctx_free(probe);
    if (mz_store_delete(st, "synth")) fprintf(stderr, "delete: %s\n", mz_last_error());
    mz_store_close(st);
    mz_engine_free(e);
    mz_model_free(m);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: bench_store ttft|evict-clean MODEL N_TOKENS STORE_DIR\n");
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
    fprintf(stderr, "unknown command %s\n", argv[1]);
    return 2;
}
