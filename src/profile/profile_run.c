/*
 * profile_run.c — measuring the device profile (contract in
 * src/mem/profile.h, division 4, mz_profile_run): codecs, storage, memory,
 * and the compute load thread. Kept out of the memory manager: it does
 * I/O, starts threads and reads clocks; the policy only sees its results.
 */
#define _GNU_SOURCE
#include "../mem/profile.h"

#include "../codec/codec.h"
#include "../core/dtype.h"
#include "../io/io.h"
#include "../io/swapfile.h"
#include "../kernels/kernels.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

#ifdef MADV_POPULATE_WRITE
#define PROFILE_POPULATE_WRITE MADV_POPULATE_WRITE
#else
#define PROFILE_POPULATE_WRITE 23
#endif

/* ---- 4. measurement ------------------------------------------------------------------- */

mz_profile_run_params mz_profile_run_params_default(void)
{
    return (mz_profile_run_params){.dir = NULL, .quick = false, .file_bytes = 0, .mem_bytes = 0,
                                   .reclaim_wait_s = -1, .log = NULL};
}

static void logf_(FILE *f, const char *fmt, ...) MZ_PRINTF(2, 3);
static void logf_(FILE *f, const char *fmt, ...)
{
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fflush(f);
}

static double now_s(void) { return mz_time_ms() / 1000.0; }

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* -- compute load: a matrix-vector product over a 16 MiB matrix for 8
 * tokens (the paper's 8-token query), the kind of work prefill does while
 * restore workers run. -- */

typedef struct load_thread {
    pthread_t th;
    atomic_bool stop;
    float *w, *x, *y;
    size_t rows, cols;
    volatile float sink;
    bool running;
} load_thread;

static void *load_main(void *arg)
{
    load_thread *lt = arg;
    while (!atomic_load_explicit(&lt->stop, memory_order_relaxed)) {
        for (size_t r = 0; r < lt->rows; r++) {
            const float *wr = lt->w + r * lt->cols;
            for (int t = 0; t < 8; t++) {
                const float *xt = lt->x + (size_t)t * lt->cols;
                float acc = 0;
                for (size_t c = 0; c < lt->cols; c++) acc += wr[c] * xt[c];
                lt->y[(size_t)t * lt->rows + r] = acc;
            }
        }
        lt->sink = lt->y[0];
    }
    return NULL;
}

static bool load_start(load_thread *lt)
{
    memset(lt, 0, sizeof *lt);
    lt->rows = 2048;
    lt->cols = 2048;
    lt->w = malloc(lt->rows * lt->cols * sizeof(float));
    lt->x = malloc(8 * lt->cols * sizeof(float));
    lt->y = malloc(8 * lt->rows * sizeof(float));
    if (!lt->w || !lt->x || !lt->y) goto out_free;
    for (size_t i = 0; i < lt->rows * lt->cols; i++) lt->w[i] = (float)(i % 7) * 0.01f;
    for (size_t i = 0; i < 8 * lt->cols; i++) lt->x[i] = (float)(i % 5) * 0.1f;
    atomic_init(&lt->stop, false);
    if (pthread_create(&lt->th, NULL, load_main, lt)) goto out_free;
    lt->running = true;
    sleep_s(0.02); /* let it reach its loop */
    return true;
out_free:
    free(lt->w);
    free(lt->x);
    free(lt->y);
    return false;
}

static void load_stop(load_thread *lt)
{
    if (!lt->running) return;
    atomic_store(&lt->stop, true);
    pthread_join(lt->th, NULL);
    free(lt->w);
    free(lt->x);
    free(lt->y);
    lt->running = false;
}

/* -- codecs -- */

/* Names the registry knows: taken from mz_codec_find's "(known: …)" message
 * for an unknown name, so codecs added to the registry are measured without
 * a change here; the fixed list covers a message without that list. */
static int codec_names(char names[][24], int cap)
{
    static const char *fallback[] = {"raw", "q8", "q8-g32", "q8-g128", "q4", "cachegen"};
    int n = 0;
    (void)mz_codec_find("\x01not-a-codec");
    const char *msg = mz_last_error(), *k = strstr(msg, "known: ");
    if (k) {
        k += 7;
        while (*k && *k != ')' && n < cap) {
            size_t len = strcspn(k, ", )");
            if (len > 0 && len < 24) {
                memcpy(names[n], k, len);
                names[n][len] = '\0';
                n++;
            }
            k += len;
            while (*k == ',' || *k == ' ') k++;
        }
    }
    for (size_t i = 0; i < MZ_ARRAY_LEN(fallback) && n < cap; i++) {
        bool have = false;
        for (int j = 0; j < n; j++) have = have || !strcmp(names[j], fallback[i]);
        if (!have) snprintf(names[n++], 24, "%s", fallback[i]);
    }
    mz_clear_error();
    return n;
}

static double time_decode(const mz_codec *c, const uint8_t *blob, size_t len, mz_f16 *out,
                          size_t n, double budget_s)
{
    double rates[3];
    for (int r = 0; r < 3; r++) {
        double t0 = now_s(), t;
        size_t k = 0;
        do {
            if (mz_codec_decode(c, blob, len, out, n)) return 0;
            k++;
            t = now_s() - t0;
        } while (t < budget_s / 3);
        rates[r] = (double)(k * n * sizeof(mz_f16)) / t / 1e9;
    }
    return median(rates, 3);
}

static void measure_codecs(const mz_profile_run_params *rp, mz_device_profile *out)
{
    const size_t n = (size_t)MZ_KV_CHUNK_TOKENS * 8 * 128 * 2;
    double budget = rp->quick ? 0.03 : 0.3;
    char names[MZ_PROFILE_MAX_CODECS][24];
    int nn = codec_names(names, MZ_PROFILE_MAX_CODECS);
    mz_f16 *src = mz_pages_alloc(n * sizeof *src), *dst = mz_pages_alloc(n * sizeof *dst);
    size_t cap = 0;
    for (int i = 0; i < nn; i++) {
        const mz_codec *c = mz_codec_find(names[i]);
        if (c) cap = MZ_MAX(cap, mz_codec_bound(c, n));
    }
    uint8_t *blob = cap ? mz_pages_alloc(cap) : NULL;
    out->n_codecs = 0;
    if (!src || !dst || !blob) goto out_free;
    /* One chunk of the qwen3-0.6b shape (256 tokens x 8 heads x 128, K then
     * V) with the outlier channels of real keys. */
    mz_codec_synth_kv(src, n, 128, 0x243f6a8885a308d3ull);
    for (int i = 0; i < nn && out->n_codecs < MZ_PROFILE_MAX_CODECS; i++) {
        const mz_codec *c = mz_codec_find(names[i]);
        size_t len = 0;
        if (!c) continue;
        double t0 = now_s();
        int reps = 0;
        do {
            if (mz_codec_encode(c, src, n, blob, cap, &len)) break;
            reps++;
        } while (now_s() - t0 < budget / 3);
        double enc_s = now_s() - t0;
        if (!reps) {
            logf_(rp->log, "  codec %-16s cannot encode the test chunk: %s\n", names[i],
                  mz_last_error());
            continue;
        }
        mz_profile_codec *pc = &out->codec[out->n_codecs++];
        memset(pc, 0, sizeof *pc);
        snprintf(pc->name, sizeof pc->name, "%.23s", names[i]);
        pc->encode_gbps = (double)(reps * n * sizeof(mz_f16)) / enc_s / 1e9;
        pc->ratio = (double)len / (double)(n * sizeof(mz_f16));
        pc->decode_gbps = time_decode(c, blob, len, dst, n, budget);
        if (!rp->skip_loaded) {
            load_thread lt;
            if (load_start(&lt)) {
                pc->decode_gbps_loaded = time_decode(c, blob, len, dst, n, budget);
                load_stop(&lt);
            }
        }
        logf_(rp->log, "  codec %-16s decode %6.2f GB/s (beside compute %6.2f), encode %5.2f GB/s, "
                       "size %.3f of raw\n",
              pc->name, pc->decode_gbps, pc->decode_gbps_loaded, pc->encode_gbps, pc->ratio);
    }
out_free:
    mz_pages_free(src, n * sizeof *src);
    mz_pages_free(dst, n * sizeof *dst);
    if (blob) mz_pages_free(blob, cap);
    mz_clear_error();
}

/* -- storage -- */

/* Page-cache pages of the file (mincore on a mapping nobody touches); -1 if unknown. */
static long cached_pages(int fd, uint64_t bytes)
{
    size_t pg = mz_page_size(), np = (size_t)((bytes + pg - 1) / pg);
    void *m = mmap(NULL, (size_t)bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return -1;
    unsigned char *vec = malloc(np);
    long n = -1;
    if (vec && mincore(m, (size_t)bytes, vec) == 0) {
        n = 0;
        for (size_t i = 0; i < np; i++) n += vec[i] & 1;
    }
    free(vec);
    munmap(m, (size_t)bytes);
    return n;
}

/* Reads pass_bytes sequentially from `start` (wrapping) with qd requests of
 * req bytes in flight; returns GB/s, 0 on error. */
static double read_pass(mz_ioq *q, int fd, bool direct, uint8_t *bufs, size_t req, int qd,
                        uint64_t file_bytes, uint64_t start, uint64_t pass_bytes)
{
    mz_io_piece pieces[16];
    uint64_t off = start % file_bytes, issued = 0, done = 0;
    MZ_ASSERT(qd <= 16);
    double t0 = now_s();
    for (int i = 0; i < qd && issued < pass_bytes; i++) {
        mz_io_piece *p = &pieces[i];
        memset(p, 0, sizeof *p);
        *p = (mz_io_piece){.fd = fd, .direct = direct, .niov = 1, .off = off, .need = req};
        p->iov[0] = (struct iovec){bufs + (size_t)i * req, req};
        mz_ioq_push(q, p);
        issued += req;
        off = off + 2 * req > file_bytes ? 0 : off + req;
    }
    mz_io_piece *p;
    bool failed = false;
    while ((p = mz_ioq_next(q, true))) {
        /* On an error stop issuing but drain: the pieces live on this stack. */
        failed = failed || p->err != 0;
        done += p->done;
        if (!failed && issued < pass_bytes) {
            p->off = off;
            mz_ioq_push(q, p);
            issued += req;
            off = off + 2 * req > file_bytes ? 0 : off + req;
        }
    }
    double t = now_s() - t0;
    return !failed && t > 0 ? (double)done / t / 1e9 : 0;
}

static mz_status measure_storage(const mz_profile_run_params *rp, mz_device_profile *out)
{
    static const size_t full_sizes[] = {64 << 10, 128 << 10, 256 << 10, 512 << 10,
                                        1 << 20,  2 << 20,   4 << 20};
    static const int full_qd[] = {1, 2, 4, 8};
    static const size_t quick_sizes[] = {64 << 10, 1 << 20};
    static const int quick_qd[] = {1, 4};
    const size_t *sizes = rp->quick ? quick_sizes : full_sizes;
    const int *qds = rp->quick ? quick_qd : full_qd;
    int ns = rp->quick ? 2 : 7, nq = rp->quick ? 2 : 4, reps = rp->quick ? 1 : 3;
    uint64_t fbytes = rp->file_bytes ? rp->file_bytes : (rp->quick ? 32u << 20 : 256u << 20);
    fbytes = MZ_MAX(fbytes, (uint64_t)8 << 20) / (4u << 20) * (4u << 20);
    uint64_t pass = rp->quick ? fbytes / 4 : MZ_MIN(fbytes / 2, (uint64_t)128 << 20);
    char dir[512], path[600];
    mz_status s = MZ_OK;
    if (rp->dir && rp->dir[0]) snprintf(dir, sizeof dir, "%s", rp->dir);
    else if ((s = mz_swapfile_default_dir(dir, sizeof dir))) return s;
    snprintf(out->dir, sizeof out->dir, "%.255s", dir);
    if ((s = mz_dir_make_private(dir))) return s;
    snprintf(path, sizeof path, "%s/mzprofile-%ld.tmp", dir, (long)getpid());

    bool direct = true;
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL) {
        direct = false;
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    }
    if (fd < 0) return mz_fail(MZ_E_IO, "cannot create %s: %s", path, strerror(errno));
    unlink(path); /* nothing is left behind, whatever happens next */
    size_t wchunk = 4u << 20, bufs_bytes = 8 * (4u << 20);
    uint8_t *bufs = mz_pages_alloc(bufs_bytes);
    mz_ioq *q = NULL;
    if (!bufs) {
        s = mz_fail(MZ_E_NOMEM, "no memory for read buffers");
        goto out_close;
    }
    /* Write the file (random bytes: no compression or dedup below us). */
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (uint64_t off = 0; off < fbytes; off += wchunk) {
        uint64_t *w = (uint64_t *)(void *)bufs;
        for (size_t i = 0; i < wchunk / 8; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            w[i] = x;
        }
        ssize_t n = pwrite(fd, bufs, wchunk, (off_t)off);
        if (n != (ssize_t)wchunk) {
            if (n < 0 && errno == EINVAL && direct) {
                /* O_DIRECT accepted at open, refused at write: go buffered. */
                int fl = fcntl(fd, F_GETFL);
                if (fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_DIRECT) == 0) {
                    direct = false;
                    off -= wchunk;
                    continue;
                }
            }
            s = mz_fail(MZ_E_IO, "cannot write the %llu-byte test file in %s: %s",
                        (unsigned long long)fbytes, dir, n < 0 ? strerror(errno) : "short write");
            goto out_close;
        }
    }
    fdatasync(fd);
    out->direct = direct;
    out->file_bytes = fbytes;
    if ((s = mz_ioq_init(8, true, &q))) goto out_close;
    out->uring = mz_ioq_uses_uring(q);
    out->n_sizes = ns;
    out->n_qd = nq;
    for (int i = 0; i < ns; i++) out->read_size[i] = sizes[i];
    for (int j = 0; j < nq; j++) out->read_qd[j] = qds[j];
    logf_(rp->log, "  storage: %s, %llu MiB test file, %s, %s\n", dir,
          (unsigned long long)(fbytes >> 20), direct ? "O_DIRECT" : "buffered (O_DIRECT refused)",
          out->uring ? "io_uring" : "pread");

    double samples[2][MZ_PROFILE_MAX_SIZES][MZ_PROFILE_MAX_QD][3];
    uint64_t k = 0;
    bool with_load = !rp->skip_loaded;
    for (int rep = 0; rep < reps; rep++) {
        for (int loaded = 0; loaded < (with_load ? 2 : 1); loaded++) {
            load_thread lt;
            if (loaded && !load_start(&lt)) {
                with_load = false;
                break;
            }
            for (int i = 0; i < ns; i++) {
                for (int j = 0; j < nq; j++) {
                    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
                    long cp = cached_pages(fd, fbytes);
                    if (cp > 0) out->cached_pages_max = MZ_MAX(out->cached_pages_max, (size_t)cp);
                    double g = read_pass(q, fd, direct, bufs, sizes[i], qds[j], fbytes,
                                         (k++ * pass) % fbytes, pass);
                    if (g <= 0) {
                        s = mz_fail(MZ_E_IO, "reading the test file failed");
                        if (loaded) load_stop(&lt);
                        goto out_close;
                    }
                    samples[loaded][i][j][rep] = g;
                }
            }
            if (loaded) load_stop(&lt);
        }
    }
    double best = 0;
    for (int i = 0; i < ns; i++) {
        for (int j = 0; j < nq; j++) {
            out->read_gbps[i][j] = median(samples[0][i][j], reps);
            out->read_gbps_loaded[i][j] = with_load ? median(samples[1][i][j], reps) : 0;
            best = MZ_MAX(best, out->read_gbps[i][j]);
        }
    }
    out->sat_size = 0;
    out->sat_qd = 0;
    for (int i = 0; i < ns && !out->sat_size; i++)
        for (int j = 0; j < nq && !out->sat_size; j++)
            if (out->read_gbps[i][j] >= 0.9 * best) {
                out->sat_size = sizes[i];
                out->sat_qd = qds[j];
            }
    for (int pass_l = 0; pass_l < (with_load ? 2 : 1); pass_l++) {
        logf_(rp->log, "  read GB/s%s   size:", pass_l ? " beside compute" : "");
        for (int i = 0; i < ns; i++) logf_(rp->log, " %7zuK", sizes[i] >> 10);
        logf_(rp->log, "\n");
        for (int j = 0; j < nq; j++) {
            logf_(rp->log, "    %s   QD %d:", pass_l ? "               " : "", qds[j]);
            for (int i = 0; i < ns; i++)
                logf_(rp->log, " %8.2f", pass_l ? out->read_gbps_loaded[i][j] : out->read_gbps[i][j]);
            logf_(rp->log, "\n");
        }
    }
    logf_(rp->log, "  reads saturate at %zu KiB x %d in flight (within 10%% of the best %.2f GB/s)\n",
          out->sat_size >> 10, out->sat_qd, best);
out_close:
    mz_ioq_free(q);
    if (bufs) mz_pages_free(bufs, bufs_bytes);
    close(fd);
    return s;
}

/* -- memory -- */

typedef struct touch_arg { uint8_t *p; size_t n; } touch_arg;

static void *touch_main(void *arg)
{
    touch_arg *a = arg;
    size_t pg = mz_page_size();
    for (size_t i = 0; i < a->n; i += pg) ((volatile uint8_t *)a->p)[i] = 1;
    return NULL;
}

/* Seconds per GiB to write one byte to every page of [p, p+n) with nth threads. */
static double touch_cost(uint8_t *p, size_t n, int nth)
{
    pthread_t th[2];
    touch_arg a[2];
    size_t half = n / 2 / mz_page_size() * mz_page_size();
    double t0 = now_s();
    if (nth == 2) {
        a[0] = (touch_arg){p, half};
        a[1] = (touch_arg){p + half, n - half};
        bool started = pthread_create(&th[1], NULL, touch_main, &a[1]) == 0;
        touch_main(&a[0]);
        if (started) pthread_join(th[1], NULL);
        else touch_main(&a[1]);
    } else {
        a[0] = (touch_arg){p, n};
        touch_main(&a[0]);
    }
    return (now_s() - t0) * GIB / (double)n;
}

/* Pre-faulting as the restore does it: threads claim 2 MiB pieces in turn
 * and populate each with one MADV_POPULATE_WRITE (a write per page where
 * the kernel lacks it). */
typedef struct mt_touch {
    uint8_t *p;
    size_t n;
    atomic_size_t next;
} mt_touch;

#define MT_PIECE ((size_t)2 << 20)

static void *mt_touch_main(void *arg)
{
    mt_touch *t = arg;
    size_t pg = mz_page_size();
    for (;;) {
        size_t off = atomic_fetch_add(&t->next, MT_PIECE);
        if (off >= t->n) break;
        size_t len = MZ_MIN(MT_PIECE, t->n - off);
        if (madvise(t->p + off, len, PROFILE_POPULATE_WRITE) != 0)
            for (size_t i = 0; i < len; i += pg) ((volatile uint8_t *)t->p)[off + i] = 1;
    }
    return NULL;
}

static double mt_touch_cost(uint8_t *p, size_t n, int nth)
{
    pthread_t th[MZ_RESTORE_THREADS_MAX];
    mt_touch t = {.p = p, .n = n};
    atomic_init(&t.next, 0);
    int started = 0;
    double t0 = now_s();
    for (int i = 1; i < nth; i++, started++)
        if (pthread_create(&th[i - 1], NULL, mt_touch_main, &t) != 0) break;
    mt_touch_main(&t);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    return (now_s() - t0) * GIB / (double)n;
}

/* Cold pre-fault cost at 1, 2, 4, ... threads up to the CPU count (the
 * last point is the CPU count itself), each after the reclaim wait. */
static void measure_touch_threads(uint8_t *p, size_t n, double wait, const mz_profile_run_params *rp,
                                  mz_device_profile *out)
{
    int ncpu = MZ_MIN(MZ_MAX(out->n_cpus, 1), MZ_RESTORE_THREADS_MAX);
    out->n_touch = 0;
    for (int k = 1; out->n_touch < MZ_PROFILE_MAX_TOUCH; k *= 2) {
        int nth = MZ_MIN(k, ncpu);
        madvise(p, n, MADV_DONTNEED);
        sleep_s(wait);
        out->touch_threads[out->n_touch] = nth;
        out->touch_mt_s_per_gib[out->n_touch++] = mt_touch_cost(p, n, nth);
        if (nth >= ncpu) break;
    }
    logf_(rp->log, "  pre-fault (restore's way) per GiB by threads:");
    for (int i = 0; i < out->n_touch; i++)
        logf_(rp->log, " %d: %.3f s", out->touch_threads[i], out->touch_mt_s_per_gib[i]);
    logf_(rp->log, "\n");
}

static mz_status measure_memory(const mz_profile_run_params *rp, mz_device_profile *out)
{
    size_t n = rp->mem_bytes ? rp->mem_bytes : (rp->quick ? 16u << 20 : 256u << 20);
    double wait = rp->reclaim_wait_s >= 0 ? rp->reclaim_wait_s : (rp->quick ? 0.2 : 3.0);
    n = MZ_MAX(n / mz_page_size(), (size_t)2) * mz_page_size();
    uint8_t *p = mz_pages_alloc(n);
    if (!p) return mz_fail(MZ_E_NOMEM, "cannot map %zu bytes for the first-touch test", n);
    /* memcpy between two halves. */
    double best = 0;
    touch_cost(p, n, 1);
    for (int r = 0; r < 3; r++) {
        double t0 = now_s();
        memcpy(p, p + n / 2, n / 2);
        double t = now_s() - t0;
        if (t > 0) best = MZ_MAX(best, (double)(n / 2) / t / 1e9);
    }
    out->memcpy_gbps = best;
    madvise(p, n, MADV_DONTNEED);
    out->touch_hot_s_per_gib = touch_cost(p, n, 1);
    madvise(p, n, MADV_DONTNEED);
    sleep_s(wait);
    out->touch_cold_s_per_gib = touch_cost(p, n, 1);
    madvise(p, n, MADV_DONTNEED);
    sleep_s(wait);
    out->touch_cold2_s_per_gib = touch_cost(p, n, 2);
    out->reclaim_wait_s = wait;
    measure_touch_threads(p, n, wait, rp, out);
    mz_pages_free(p, n);
    logf_(rp->log, "  memory: memcpy %.1f GB/s; first touch per GiB (%zu MiB): %.3f s right after "
                   "release, %.3f s after %.1f s (%.3f s with 2 threads)\n",
          out->memcpy_gbps, n >> 20, out->touch_hot_s_per_gib, out->touch_cold_s_per_gib, wait,
          out->touch_cold2_s_per_gib);
    return MZ_OK;
}

static void cpu_name(char *dst, size_t cap)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    dst[0] = '\0';
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *v = strchr(line, ':');
        if (v) {
            v++;
            while (*v == ' ') v++;
            snprintf(dst, cap, "%.*s", (int)strcspn(v, "\n"), v);
        }
        break;
    }
    fclose(f);
}

mz_status mz_profile_run(const mz_profile_run_params *rp_in, mz_device_profile *out)
{
    mz_profile_run_params rp = rp_in ? *rp_in : mz_profile_run_params_default();
    mz_status s = MZ_OK;
    double t0 = now_s();
    /* Start from the estimate so a skipped part keeps sensible figures. */
    mz_profile_builtin(out);
    out->measured = true;
    cpu_name(out->cpu, sizeof out->cpu);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(out->created, sizeof out->created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    logf_(rp.log, "mzcache profile: %s, %d CPUs%s\n", out->cpu[0] ? out->cpu : "unknown CPU",
          out->n_cpus, rp.quick ? " (quick)" : "");
    measure_codecs(&rp, out);
    if (out->n_codecs == 0) {
        mz_device_profile b;
        mz_profile_builtin(&b);
        out->n_codecs = b.n_codecs;
        memcpy(out->codec, b.codec, sizeof b.codec);
    }
    if (!rp.skip_storage && (s = measure_storage(&rp, out))) return s;
    if (!rp.skip_memory && (s = measure_memory(&rp, out))) return s;
    logf_(rp.log, "  done in %.1f s\n", now_s() - t0);
    return MZ_OK;
}
