/*
 * core.h — shared internals: errors, assertions, logging, clocks, page memory,
 * byte order, private directories.
 *
 * Every src/ module includes this. Errors: a failing function records a
 * message with mz_fail() (thread-local, read back by mz_last_error()) and
 * returns the status; callers add context with mz_fail_prefix().
 */
#ifndef MZ_CORE_H
#define MZ_CORE_H

#include "mzcache.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define MZ_INTERNAL __attribute__((visibility("hidden")))

#if defined(__GNUC__)
#define MZ_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define MZ_LIKELY(x) __builtin_expect(!!(x), 1)
#define MZ_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define MZ_PRINTF(a, b)
#define MZ_LIKELY(x) (x)
#define MZ_UNLIKELY(x) (x)
#endif

/* Programmer errors abort with file and line; they are never input errors. */
#define MZ_ASSERT(x)                                                                  \
    do {                                                                              \
        if (MZ_UNLIKELY(!(x))) mz_assert_fail(#x, __FILE__, __LINE__);                \
    } while (0)

#define MZ_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define MZ_MIN(a, b) ((a) < (b) ? (a) : (b))
#define MZ_MAX(a, b) ((a) > (b) ? (a) : (b))

MZ_INTERNAL _Noreturn void mz_assert_fail(const char *expr, const char *file, int line);

/* Records a formatted message as this thread's last error and returns s. */
MZ_INTERNAL mz_status mz_fail(mz_status s, const char *fmt, ...) MZ_PRINTF(2, 3);
/* Prepends "prefix: " to the current last error and returns s. */
MZ_INTERNAL mz_status mz_fail_prefix(mz_status s, const char *fmt, ...) MZ_PRINTF(2, 3);
MZ_INTERNAL void mz_clear_error(void);

enum mz_log_level { MZ_LOG_DEBUG = 0, MZ_LOG_INFO = 1, MZ_LOG_WARN = 2, MZ_LOG_ERROR = 3 };
/* Logs to stderr when level >= the level set by MZ_LOG (env: debug/info/warn/error; default warn). */
MZ_INTERNAL void mz_log(enum mz_log_level level, const char *fmt, ...) MZ_PRINTF(2, 3);

/* Monotonic clock (CLOCK_MONOTONIC): the one clock for intervals, deadlines
 * relative to now and LRU ages; wall-clock dates use CLOCK_REALTIME. */
MZ_INTERNAL double mz_time_ms(void);
MZ_INTERNAL int64_t mz_time_us(void);
MZ_INTERNAL uint64_t mz_time_ns(void);

/* Little-endian fields of the on-disk formats (swap-file records,
 * manifests, codec blobs), whatever the host's byte order. */
static inline void mz_put_le16(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static inline void mz_put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void mz_put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline unsigned mz_get_le16(const unsigned char *p) { return (unsigned)p[0] | (unsigned)p[1] << 8; }
static inline uint32_t mz_get_le32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static inline uint64_t mz_get_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* mkdir -p for directories that hold a user's data (swap files, sessions,
 * profiles): every directory it creates gets mode 0700 exactly, whatever
 * the umask; directories that exist are left as they are. Then `dir` must
 * be a directory (symbolic links to one are followed). MZ_E_INVAL for an
 * empty or over-long path, MZ_E_IO naming the directory that failed. */
MZ_INTERNAL mz_status mz_dir_make_private(const char *dir);

/* The whole file at path in a malloc'd buffer with a NUL after it (*out,
 * the caller frees it; *len counts the bytes without the NUL). Reads to the
 * end of the file, so pipes and /proc files work as regular ones.
 * MZ_E_IO naming the path when it cannot be opened or read, MZ_E_RANGE
 * when it holds more than max_bytes, MZ_E_NOMEM; *out is NULL then. */
MZ_INTERNAL mz_status mz_read_file(const char *path, size_t max_bytes, char **out, size_t *len);

/* Page-aligned anonymous mapping of nbytes (rounded up to the page size).
 * Returns NULL on failure (errno set). Each call is its own mapping, so
 * freeing it returns the pages to the OS. */
MZ_INTERNAL void *mz_pages_alloc(size_t nbytes);
MZ_INTERNAL void mz_pages_free(void *p, size_t nbytes);
MZ_INTERNAL size_t mz_page_size(void);

/* malloc-style helpers that fail with MZ_E_NOMEM message on overflow/OOM. */
MZ_INTERNAL void *mz_malloc(size_t n);
MZ_INTERNAL void *mz_calloc(size_t n, size_t size);
/* 64-byte aligned heap memory; free with mz_aligned_free. */
MZ_INTERNAL void *mz_aligned_alloc(size_t n);
MZ_INTERNAL void mz_aligned_free(void *p);

/* Checked arithmetic: returns false on overflow. */
static inline int mz_mul_ok(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline int mz_add_ok(size_t a, size_t b, size_t *out) { return !__builtin_add_overflow(a, b, out); }

/* Number of online CPUs (at least 1). */
MZ_INTERNAL int mz_n_cpus(void);

/* Runs fn(arg, r0, r1, slice) over [0, n_rows) cut into min(n_threads, n_rows)
 * contiguous slices, one thread each (slice 0 on the caller; a thread that
 * cannot start has its slice run on the caller too), and returns when all
 * are done. For work whose result does not depend on the cut, such as
 * converting rows one at a time. n_threads is clamped to [1, MZ_ROW_SLICES_MAX]. */
#define MZ_ROW_SLICES_MAX 64
typedef void (*mz_row_slice_fn)(void *arg, size_t r0, size_t r1, int slice);
MZ_INTERNAL void mz_run_row_slices(size_t n_rows, int n_threads, mz_row_slice_fn fn, void *arg);

#endif /* MZ_CORE_H */
