/*
 * peer_state_reload.c — llama.cpp's answer to "the process was killed", the
 * peer column of issue 17's benchmark (bench_store ttft, MZ_PEER_STATE_BIN).
 * The same measurement as bench/peer_llamacpp.py's state_reload, in C against
 * llama.cpp's public llama.h, because llama-cpp-python is not available
 * everywhere (it crashes on the device machine, ../shared/DEVICE.md). Not part
 * of the project's build: bench/build-peer-state.sh builds it with libllama.
 *
 *   peer_state_reload save   -m MODEL -n N -s STATE [-t THREADS] [-q 8] [--real]
 *       Loads the model, makes an N-token context state and writes it with
 *       llama_state_save_file. By default the state is SYNTHETIC, as in the
 *       Python peer (bench/bench_ttft.py's trick): a real 2-token state is
 *       parsed (architecture, cells, per-layer K rows and V rows or
 *       transposed V) and the same records are written for N cells of
 *       random F16 values in [-1, 1], then loaded with llama_state_set_data,
 *       so the file has exactly llama.cpp's own layout and size. --real
 *       prefills N token ids instead (minutes per 8k tokens on two cores).
 *   peer_state_reload reload -m MODEL -n N -s STATE [-t THREADS] [-q 8] [-r RUNS]
 *       Each run in a fresh child process: the model and the state file are
 *       dropped from the page cache (POSIX_FADV_DONTNEED, checked with
 *       mincore), then timed: model load + context creation +
 *       llama_state_load_file + the Q-token question evaluated to its first
 *       token (argmax of the last logits). Prints per run to stderr and one
 *       line to stdout, medians over the runs:
 *         state_reload tokens=N runs=R ms=T model_ms=. ctx_ms=. state_ms=.
 *           query_ms=. state_mib=. cached_kib=. threads=. first_token=. omp_wait=.
 *       (cached_kib: the largest number of KiB of model + state still in the
 *       page cache after the drop, over the runs.)
 *
 * Context parameters are llama-cpp-python's as the Python peer sets them:
 * n_ctx = N + Q + 16, n_batch = n_ubatch = 512, flash attention off, the
 * model memory-mapped; the question's ids are (1000 + 37 i) mod n_vocab, as
 * on mzcache's side. libgomp reads OMP_WAIT_POLICY at program start, so it
 * is set by the caller (bench_store: passive unless the environment says).
 */
#define _GNU_SOURCE
#include "llama.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RUNS 32

struct opts {
    const char *model, *state;
    long n, threads, query, runs;
    int real;
};

struct run_result {
    double total_ms, model_ms, ctx_ms, state_ms, query_ms;
    long long cached_bytes;
    int first_token;
    int ok;
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void quiet_log(enum ggml_log_level level, const char *text, void *user)
{
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* Bytes of the file resident in the page cache (mincore over a read-only map). */
static long long cached_bytes(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) || st.st_size == 0) {
        close(fd);
        return 0;
    }
    size_t size = (size_t)st.st_size, page = (size_t)sysconf(_SC_PAGESIZE);
    void *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return -1;
    size_t np = (size + page - 1) / page;
    unsigned char *vec = malloc(np);
    long long n = -1;
    if (vec && mincore(p, size, vec) == 0) {
        n = 0;
        for (size_t i = 0; i < np; i++) n += vec[i] & 1;
        n *= (long long)page;
    }
    free(vec);
    munmap(p, size);
    return n;
}

/* Drops the file from the page cache; returns the bytes still cached. */
static long long drop_cache(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return cached_bytes(path);
}

static struct llama_model *load_model(const char *path)
{
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.load_mode = LLAMA_LOAD_MODE_MMAP;
    return llama_model_load_from_file(path, mp);
}

static struct llama_context *new_context(struct llama_model *m, const struct opts *o)
{
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(o->n + o->query + 16);
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_threads = (int32_t)o->threads;
    cp.n_threads_batch = (int32_t)o->threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.no_perf = true;
    return llama_init_from_model(m, cp);
}

/* A little-endian reader over a state buffer; a read past the end sets bad. */
struct rd {
    const uint8_t *p;
    size_t off, len;
    int bad;
};

static void rd_take(struct rd *r, void *dst, size_t n)
{
    if (r->bad || n > r->len - r->off) {
        r->bad = 1;
        return;
    }
    if (dst) memcpy(dst, r->p + r->off, n);
    r->off += n;
}

struct layer_rec {
    int32_t type;
    uint64_t row;      /* K, or V not transposed: bytes per cell */
    uint32_t el, ne;   /* V transposed: element size, rows (n_embd_v_gqa) */
};

/* The synthetic N-cell state (see the header comment). Returns its size or 0. */
static size_t synth_state(struct llama_context *ctx, long n, uint8_t **out)
{
    llama_token two[2] = {1, 2};
    if (llama_decode(ctx, llama_batch_get_one(two, 2))) return 0;
    size_t sz = llama_state_get_size(ctx);
    uint8_t *small = malloc(sz);
    if (!small || llama_state_get_data(ctx, small, sz) != sz) return 0;
    struct rd r = {small, 0, sz, 0};
    uint32_t alen = 0, n_stream = 0, cells = 0, v_trans = 0, n_layer = 0;
    rd_take(&r, &alen, 4);
    size_t arch_off = r.off;
    rd_take(&r, NULL, alen);
    rd_take(&r, &n_stream, 4);
    rd_take(&r, &cells, 4);
    if (r.bad || n_stream != 1 || cells != 2) {
        fprintf(stderr, "synthetic state: %u streams, %u cells (want 1, 2)\n", n_stream, cells);
        return 0;
    }
    for (uint32_t c = 0; c < cells; c++) {
        int32_t pos;
        uint32_t nseq = 0;
        rd_take(&r, &pos, 4);
        rd_take(&r, &nseq, 4);
        rd_take(&r, NULL, (size_t)nseq * 4);
    }
    rd_take(&r, &v_trans, 4);
    rd_take(&r, &n_layer, 4);
    if (r.bad || n_layer == 0 || n_layer > 4096) return 0;
    struct layer_rec *k = calloc(n_layer, sizeof *k), *v = calloc(n_layer, sizeof *v);
    for (uint32_t l = 0; l < n_layer && !r.bad; l++) {
        rd_take(&r, &k[l].type, 4);
        rd_take(&r, &k[l].row, 8);
        rd_take(&r, NULL, k[l].row * cells);
    }
    for (uint32_t l = 0; l < n_layer && !r.bad; l++) {
        rd_take(&r, &v[l].type, 4);
        if (v_trans) {
            rd_take(&r, &v[l].el, 4);
            rd_take(&r, &v[l].ne, 4);
            rd_take(&r, NULL, (size_t)v[l].el * v[l].ne * cells);
        } else {
            rd_take(&r, &v[l].row, 8);
            rd_take(&r, NULL, v[l].row * cells);
        }
    }
    /* The whole buffer parsed, F16 K and V: the layout is the one assumed
     * (no per-cell extension records, one V per layer). */
    int f16 = 1;
    for (uint32_t l = 0; l < n_layer; l++)
        f16 &= k[l].type == GGML_TYPE_F16 && v[l].type == GGML_TYPE_F16;
    if (r.bad || r.off != sz || !f16) {
        fprintf(stderr, "synthetic state: layout not recognized (parsed %zu of %zu bytes, F16 %d); "
                "use --real\n", r.off, sz, f16);
        return 0;
    }
    size_t total = 4 + alen + 8 + (size_t)n * 12 + 8;
    for (uint32_t l = 0; l < n_layer; l++) {
        total += 12 + k[l].row * (size_t)n;
        total += v_trans ? 12 + (size_t)v[l].el * v[l].ne * (size_t)n : 12 + v[l].row * (size_t)n;
    }
    /* random F16 in [-1, 1]: one 1 MiB block, repeated */
    enum { BLOCK = 1 << 20 };
    uint16_t *block = malloc(BLOCK);
    uint64_t s = 7;
    for (size_t i = 0; i < BLOCK / 2; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        float f = (float)((double)(s >> 11) / (double)(1ULL << 53)) * 2.0f - 1.0f;
        block[i] = ggml_fp32_to_fp16(f);
    }
    uint8_t *o = malloc(total), *w = o;
    if (!o || !block) return 0;
#define PUT(src, len) (memcpy(w, (src), (len)), w += (len))
    uint32_t one = 1, nc = (uint32_t)n;
    PUT(&alen, 4);
    PUT(small + arch_off, alen);
    PUT(&one, 4);
    PUT(&nc, 4);
    for (long p = 0; p < n; p++) {
        int32_t pos = (int32_t)p, seq = 0;
        PUT(&pos, 4);
        PUT(&one, 4);
        PUT(&seq, 4);
    }
    PUT(&v_trans, 4);
    PUT(&n_layer, 4);
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t l = 0; l < n_layer; l++) {
            const struct layer_rec *e = pass ? &v[l] : &k[l];
            size_t bytes;
            PUT(&e->type, 4);
            if (pass && v_trans) {
                PUT(&e->el, 4);
                PUT(&e->ne, 4);
                bytes = (size_t)e->el * e->ne * (size_t)n;
            } else {
                PUT(&e->row, 8);
                bytes = e->row * (size_t)n;
            }
            for (size_t done = 0; done < bytes;) {
                size_t c = bytes - done < BLOCK ? bytes - done : BLOCK;
                PUT(block, c);
                done += c;
            }
        }
#undef PUT
    free(block);
    free(small);
    free(k);
    free(v);
    if ((size_t)(w - o) != total) abort();
    *out = o;
    return total;
}

static int cmd_save(const struct opts *o)
{
    struct llama_model *m = load_model(o->model);
    struct llama_context *ctx = m ? new_context(m, o) : NULL;
    if (!ctx) {
        fprintf(stderr, "save: cannot load %s\n", o->model);
        return 1;
    }
    int nv = llama_vocab_n_tokens(llama_model_get_vocab(m));
    llama_token *toks = malloc((size_t)o->n * sizeof *toks);
    for (long i = 0; i < o->n; i++) toks[i] = (llama_token)(i % nv);
    double t0 = now_ms();
    if (o->real) {
        /* a real prefill of varied ids, in batches of n_batch */
        llama_token *p = malloc((size_t)o->n * sizeof *p);
        for (long i = 0; i < o->n; i++) p[i] = (llama_token)((i * 7919 + 13) % nv);
        for (long i = 0; i < o->n; i += 512) {
            int32_t c = (int32_t)(o->n - i < 512 ? o->n - i : 512);
            if (llama_decode(ctx, llama_batch_get_one(p + i, c))) {
                fprintf(stderr, "save: prefill failed at %ld\n", i);
                return 1;
            }
        }
        memcpy(toks, p, (size_t)o->n * sizeof *toks);
        free(p);
    } else {
        uint8_t *state = NULL;
        size_t sz = synth_state(ctx, o->n, &state);
        if (!sz) return 1;
        llama_memory_clear(llama_get_memory(ctx), true);
        size_t got = llama_state_set_data(ctx, state, sz);
        free(state);
        if (got != sz) {
            fprintf(stderr, "save: llama_state_set_data read %zu of %zu bytes\n", got, sz);
            return 1;
        }
    }
    double t1 = now_ms();
    if (!llama_state_save_file(ctx, o->state, toks, (size_t)o->n)) {
        fprintf(stderr, "save: llama_state_save_file %s failed\n", o->state);
        return 1;
    }
    struct stat st;
    stat(o->state, &st);
    fprintf(stderr, "peer save: %ld tokens (%s state in %.0f ms), %s: %.1f MiB in %.0f ms\n", o->n,
            o->real ? "real prefill" : "synthetic", t1 - t0, o->state,
            (double)st.st_size / 1048576.0, now_ms() - t1);
    free(toks);
    llama_free(ctx);
    llama_model_free(m);
    return 0;
}

/* One cold reload, in the calling (fresh) process. */
static struct run_result reload_once(const struct opts *o)
{
    struct run_result r = {0};
    long long a = drop_cache(o->model), b = drop_cache(o->state);
    r.cached_bytes = (a > 0 ? a : 0) + (b > 0 ? b : 0);
    double t0 = now_ms();
    struct llama_model *m = load_model(o->model);
    if (!m) return r;
    double t1 = now_ms();
    struct llama_context *ctx = new_context(m, o);
    if (!ctx) return r;
    double t2 = now_ms();
    size_t cap = (size_t)(o->n + o->query + 16), n_out = 0;
    llama_token *toks = malloc(cap * sizeof *toks);
    if (!llama_state_load_file(ctx, o->state, toks, cap, &n_out) || n_out != (size_t)o->n) {
        fprintf(stderr, "reload: llama_state_load_file failed (%zu tokens)\n", n_out);
        return r;
    }
    double t3 = now_ms();
    const struct llama_vocab *vocab = llama_model_get_vocab(m);
    int nv = llama_vocab_n_tokens(vocab);
    llama_token q[64];
    for (long i = 0; i < o->query; i++) q[i] = (llama_token)((1000 + 37 * i) % nv);
    if (llama_decode(ctx, llama_batch_get_one(q, (int32_t)o->query))) {
        fprintf(stderr, "reload: the question's decode failed\n");
        return r;
    }
    const float *lg = llama_get_logits_ith(ctx, -1);
    int best = 0;
    for (int i = 1; i < nv; i++)
        if (lg[i] > lg[best]) best = i;
    double t4 = now_ms();
    r.total_ms = t4 - t0;
    r.model_ms = t1 - t0;
    r.ctx_ms = t2 - t1;
    r.state_ms = t3 - t2;
    r.query_ms = t4 - t3;
    r.first_token = best;
    r.ok = 1;
    free(toks);
    llama_free(ctx);
    llama_model_free(m);
    return r;
}

static int cmp_dbl(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static double median_of(const struct run_result *rs, int n, size_t field)
{
    double v[MAX_RUNS];
    for (int i = 0; i < n; i++) v[i] = *(const double *)((const char *)&rs[i] + field);
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int cmd_reload(const struct opts *o)
{
    struct run_result rs[MAX_RUNS];
    long long cached_max = 0;
    for (int i = 0; i < o->runs; i++) {
        int fds[2];
        if (pipe(fds)) return 1;
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) {
            /* a fresh process per run: nothing of llama.cpp is initialized
             * in the parent, as after a kill and a restart */
            close(fds[0]);
            llama_log_set(quiet_log, NULL);
            llama_backend_init();
            struct run_result r = reload_once(o);
            ssize_t wr = write(fds[1], &r, sizeof r);
            _exit(wr == (ssize_t)sizeof r && r.ok ? 0 : 1);
        }
        close(fds[1]);
        ssize_t got = read(fds[0], &rs[i], sizeof rs[i]);
        close(fds[0]);
        int status;
        waitpid(pid, &status, 0);
        if (got != (ssize_t)sizeof rs[i] || !rs[i].ok || !WIFEXITED(status) || WEXITSTATUS(status)) {
            fprintf(stderr, "reload: run %d failed\n", i + 1);
            return 1;
        }
        if (rs[i].cached_bytes > cached_max) cached_max = rs[i].cached_bytes;
        fprintf(stderr, "peer reload run %d/%ld: %.0f ms = model %.0f + context %.0f + state %.0f + "
                "question %.0f (cached after the drop: %lld KiB)\n", i + 1, o->runs, rs[i].total_ms,
                rs[i].model_ms, rs[i].ctx_ms, rs[i].state_ms, rs[i].query_ms, rs[i].cached_bytes >> 10);
    }
    struct stat st;
    if (stat(o->state, &st)) return 1;
    int nr = (int)o->runs;
    printf("state_reload tokens=%ld runs=%d ms=%.1f model_ms=%.1f ctx_ms=%.1f state_ms=%.1f "
           "query_ms=%.1f state_mib=%.1f cached_kib=%lld threads=%ld first_token=%d omp_wait=%s\n", o->n, nr,
           median_of(rs, nr, offsetof(struct run_result, total_ms)),
           median_of(rs, nr, offsetof(struct run_result, model_ms)),
           median_of(rs, nr, offsetof(struct run_result, ctx_ms)),
           median_of(rs, nr, offsetof(struct run_result, state_ms)),
           median_of(rs, nr, offsetof(struct run_result, query_ms)),
           (double)st.st_size / 1048576.0, cached_max >> 10, o->threads, rs[0].first_token,
           getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "unset");
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: peer_state_reload save|reload -m MODEL -n N_TOKENS -s STATE_FILE "
            "[-t THREADS] [-q QUERY_TOKENS] [-r RUNS] [--real]\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2) return usage();
    struct opts o = {.threads = sysconf(_SC_NPROCESSORS_ONLN), .query = 8, .runs = 3};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--real")) {
            o.real = 1;
            continue;
        }
        if (!v) return usage();
        i++;
        if (!strcmp(a, "-m")) o.model = v;
        else if (!strcmp(a, "-s")) o.state = v;
        else if (!strcmp(a, "-n")) { if (parse_long(v, 2, 1L << 22, &o.n)) return usage(); }
        else if (!strcmp(a, "-t")) { if (parse_long(v, 1, 1024, &o.threads)) return usage(); }
        else if (!strcmp(a, "-q")) { if (parse_long(v, 1, 64, &o.query)) return usage(); }
        else if (!strcmp(a, "-r")) { if (parse_long(v, 1, MAX_RUNS, &o.runs)) return usage(); }
        else return usage();
    }
    if (!o.model || !o.state || !o.n) return usage();
    if (!strcmp(argv[1], "save")) {
        llama_log_set(quiet_log, NULL);
        llama_backend_init();
        return cmd_save(&o);
    }
    if (!strcmp(argv[1], "reload")) return cmd_reload(&o);
    return usage();
}
