/*
 * core.c — errors, logging, clocks and page memory shared by every module.
 */
#define _GNU_SOURCE
#include "core.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MZ_ERRMSG_CAP 1024

static _Thread_local char g_errmsg[MZ_ERRMSG_CAP];

void mz_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "mzcache: assertion failed: %s (%s:%d)\n", expr, file, line);
    abort();
}

mz_status mz_fail(mz_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_errmsg, sizeof g_errmsg, fmt, ap);
    va_end(ap);
    return s;
}

mz_status mz_fail_prefix(mz_status s, const char *fmt, ...)
{
    char prefix[512];
    char old[MZ_ERRMSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_errmsg, sizeof old);
    /* Built by hand: the message is cut at the buffer's end on purpose. */
    size_t n = strnlen(prefix, sizeof prefix);
    memcpy(g_errmsg, prefix, n);
    if (old[0] && n + 2 < sizeof g_errmsg) {
        memcpy(g_errmsg + n, ": ", 2);
        n += 2;
        size_t rest = MZ_MIN(strnlen(old, sizeof old), sizeof g_errmsg - 1 - n);
        memcpy(g_errmsg + n, old, rest);
        n += rest;
    }
    g_errmsg[n] = '\0';
    return s;
}

void mz_clear_error(void) { g_errmsg[0] = '\0'; }

const char *mz_last_error(void) { return g_errmsg; }

const char *mz_status_str(mz_status s)
{
    switch (s) {
    case MZ_OK: return "ok";
    case MZ_AGAIN: return "try again";
    case MZ_E_INVAL: return "invalid argument";
    case MZ_E_NOMEM: return "out of memory";
    case MZ_E_IO: return "I/O error";
    case MZ_E_FORMAT: return "malformed data";
    case MZ_E_UNSUPPORTED: return "unsupported";
    case MZ_E_CORRUPT: return "corrupt data (checksum mismatch)";
    case MZ_E_CONTEXT_FULL: return "context full";
    case MZ_E_CANCELLED: return "cancelled";
    case MZ_E_RANGE: return "out of range";
    }
    return "unknown status";
}

static int log_threshold(void)
{
    static int level = -1;
    if (level < 0) {
        const char *e = getenv("MZ_LOG");
        level = MZ_LOG_WARN;
        if (e) {
            if (!strcmp(e, "debug")) level = MZ_LOG_DEBUG;
            else if (!strcmp(e, "info")) level = MZ_LOG_INFO;
            else if (!strcmp(e, "error")) level = MZ_LOG_ERROR;
        }
    }
    return level;
}

void mz_log(enum mz_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"debug", "info", "warning", "error"};
    if ((int)level < log_threshold()) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mzcache: %s: ", names[level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int64_t mz_time_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

uint64_t mz_time_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

mz_status mz_dir_make_private(const char *dir)
{
    char tmp[PATH_MAX];
    size_t n = dir ? strlen(dir) : 0;
    if (n == 0 || n >= sizeof tmp) return mz_fail(MZ_E_INVAL, "bad directory \"%.200s\"", dir ? dir : "");
    memcpy(tmp, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (tmp[i] != '/' && tmp[i] != '\0') continue;
        char c = tmp[i];
        tmp[i] = '\0';
        if (mkdir(tmp, 0700) == 0) {
            if (chmod(tmp, 0700)) { /* best effort: mkdir already masked the mode down */ }
        } else if (errno != EEXIST) {
            return mz_fail(MZ_E_IO, "cannot create directory %s: %s", tmp, strerror(errno));
        }
        tmp[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return mz_fail(MZ_E_IO, "%s is not a directory", dir);
    return MZ_OK;
}

mz_status mz_read_file(const char *path, size_t max_bytes, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return mz_fail(MZ_E_IO, "cannot open %s: %s", path, strerror(errno));
    /* Room for one byte past max_bytes at the most: reading it tells a file
     * longer than max_bytes from one of exactly that length. */
    const size_t limit = max_bytes < SIZE_MAX / 4 ? max_bytes + 1 : SIZE_MAX / 4;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    mz_status s = MZ_OK;
    for (;;) {
        if (n == cap) {
            if (cap == limit) {
                s = mz_fail(MZ_E_RANGE, "%s: larger than %zu bytes", path, max_bytes);
                break;
            }
            size_t grow = cap ? cap * 2 : 8192;
            if (grow > limit) grow = limit;
            char *bigger = realloc(buf, grow + 1);
            if (!bigger) {
                s = mz_fail(MZ_E_NOMEM, "out of memory reading %s", path);
                break;
            }
            buf = bigger;
            cap = grow;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) s = mz_fail(MZ_E_IO, "cannot read %s: %s", path, strerror(errno));
            break;
        }
    }
    fclose(f);
    if (s) {
        free(buf);
        return s;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return MZ_OK;
}

double mz_time_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

size_t mz_page_size(void)
{
    /* threads may make the first call together (the model's loader
     * threads do): they all store the same value */
    static _Atomic size_t page;
    size_t p = atomic_load_explicit(&page, memory_order_relaxed);
    if (!p) {
        p = (size_t)sysconf(_SC_PAGESIZE);
        atomic_store_explicit(&page, p, memory_order_relaxed);
    }
    return p;
}

static size_t round_to_pages(size_t n)
{
    size_t p = mz_page_size();
    return (n + p - 1) / p * p;
}

void *mz_pages_alloc(size_t nbytes)
{
    if (nbytes == 0 || nbytes > SIZE_MAX / 2) {
        errno = EINVAL;
        return NULL;
    }
    void *p = mmap(NULL, round_to_pages(nbytes), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void mz_pages_free(void *p, size_t nbytes)
{
    if (p) munmap(p, round_to_pages(nbytes));
}

void *mz_malloc(size_t n)
{
    void *p = (n && n < SIZE_MAX / 2) ? malloc(n) : NULL;
    if (!p) mz_fail(MZ_E_NOMEM, "out of memory allocating %zu bytes", n);
    return p;
}

void *mz_calloc(size_t n, size_t size)
{
    size_t total;
    void *p = NULL;
    if (mz_mul_ok(n, size, &total) && total && total < SIZE_MAX / 2) p = calloc(n, size);
    if (!p) mz_fail(MZ_E_NOMEM, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *mz_aligned_alloc(size_t n)
{
    void *p = NULL;
    if (n == 0 || n > SIZE_MAX / 2 || posix_memalign(&p, 64, (n + 63) & ~(size_t)63) != 0) {
        mz_fail(MZ_E_NOMEM, "out of memory allocating %zu aligned bytes", n);
        return NULL;
    }
    return p;
}

void mz_aligned_free(void *p) { free(p); }

int mz_n_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

typedef struct row_slice {
    mz_row_slice_fn fn;
    void *arg;
    size_t r0, r1;
    int slice;
} row_slice;

static void *run_row_slice(void *p)
{
    const row_slice *sl = p;
    sl->fn(sl->arg, sl->r0, sl->r1, sl->slice);
    return NULL;
}

void mz_run_row_slices(size_t n_rows, int n_threads, mz_row_slice_fn fn, void *arg)
{
    if (n_rows == 0) return;
    size_t nth = (size_t)MZ_MAX(1, MZ_MIN(n_threads, MZ_ROW_SLICES_MAX));
    nth = MZ_MIN(nth, n_rows);
    row_slice sl[MZ_ROW_SLICES_MAX];
    pthread_t th[MZ_ROW_SLICES_MAX];
    bool started[MZ_ROW_SLICES_MAX] = {false};
    for (size_t i = 0; i < nth; i++)
        sl[i] = (row_slice){.fn = fn, .arg = arg, .r0 = n_rows * i / nth, .r1 = n_rows * (i + 1) / nth, .slice = (int)i};
    for (size_t i = 1; i < nth; i++) {
        started[i] = pthread_create(&th[i], NULL, run_row_slice, &sl[i]) == 0;
        if (!started[i]) run_row_slice(&sl[i]);
    }
    run_row_slice(&sl[0]);
    for (size_t i = 1; i < nth; i++)
        if (started[i]) pthread_join(th[i], NULL);
}
