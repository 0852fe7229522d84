/*
 * direct_read.h — read byte ranges of a file (the GGUF model) with O_DIRECT,
 * bypassing the page cache, with several io_uring requests in flight.
 *
 * Ranges need not be aligned. The file is read in aligned 4 KiB windows:
 *   - when ((uintptr_t)dst - off) is a multiple of the device's memory
 *     alignment (statx STATX_DIOALIGN; 4096 if unknown), the whole pages
 *     inside the range are read straight into dst and only the partial first
 *     and last pages go through a small bounce buffer (one request per
 *     <= max_io bytes: [head page | dst middle | tail page] as one readv).
 *     Allocate dst as pages + (off % 4096) to always get this path;
 *     mz_dfile_zero_copy() says whether a given (off, dst) pair qualifies;
 *   - otherwise windows of <= max_io bytes go through bounce buffers and are
 *     copied out (one extra copy).
 * If the filesystem refuses O_DIRECT, reads are buffered straight into dst and
 * followed by POSIX_FADV_DONTNEED on the range (mz_dfile_is_direct() = false).
 *
 * Threads: an mz_dfile_t is used by one thread at a time (it owns a request
 * queue); open one per reader thread — they may share the path.
 */
#ifndef MZ_DIRECT_READ_H
#define MZ_DIRECT_READ_H

#include "../core/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mz_dfile mz_dfile_t;

enum {
    MZ_DFILE_FORCE_BUFFERED = 1u << 0, /* don't try O_DIRECT */
    MZ_DFILE_NO_URING = 1u << 1,       /* pread one request at a time */
};

typedef struct mz_dfile_params {
    int queue_depth;           /* requests in flight; <= 0: 4 */
    size_t max_io_bytes;       /* bytes per request; 0: 1 MiB */
    unsigned flags;            /* MZ_DFILE_* */
} mz_dfile_params;

MZ_INTERNAL mz_dfile_params mz_dfile_params_default(void);
/* Opens path read-only (O_DIRECT if the filesystem allows). p may be NULL. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_dfile_open(const char *path, const mz_dfile_params *p,
                                                 mz_dfile_t **out);
MZ_INTERNAL void mz_dfile_close(mz_dfile_t *f); /* NULL is fine */
/* No read until the next batch: gives the bounce pool (depth x (max_io +
 * 8 KiB)) back to the system; the next batch maps it again. Call it when no
 * batch of f is in flight, once a burst of reads has ended (the memory
 * manager: after a forward step or a restore job that reloaded weights).
 * NULL is fine. */
MZ_INTERNAL void mz_dfile_idle(mz_dfile_t *f);
/* Whether f holds its bounce pool now (tests). */
MZ_INTERNAL bool mz_dfile_holds_pool(const mz_dfile_t *f);

MZ_INTERNAL bool mz_dfile_is_direct(const mz_dfile_t *f);
MZ_INTERNAL bool mz_dfile_uses_uring(const mz_dfile_t *f);
MZ_INTERNAL uint64_t mz_dfile_size(const mz_dfile_t *f); /* size at open */
/* True when reading [off, ...) into dst avoids the full bounce copy. */
MZ_INTERNAL bool mz_dfile_zero_copy(const mz_dfile_t *f, uint64_t off, const void *dst);

typedef struct mz_dread_item {
    uint64_t off;              /* file offset of the first byte */
    size_t len;                /* bytes */
    void *dst;                 /* len bytes of destination, any alignment */
    mz_status status;          /* out */
} mz_dread_item;

/* Reads every item. Returns MZ_OK or the first failing item's status (each
 * item has its own): MZ_E_RANGE (range past the end of the file), MZ_E_IO
 * (read failed or the file shrank; errno text in the message). A failed
 * item's dst contents are unspecified. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_dfile_read_batch(mz_dfile_t *f, mz_dread_item *items, size_t n);
MZ_INTERNAL MZ_NODISCARD mz_status mz_dfile_read(mz_dfile_t *f, uint64_t off, size_t len, void *dst);

/* One-shot: open path, read [off, off+len) into dst, close. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_direct_read(const char *path, uint64_t off, size_t len, void *dst);

#endif /* MZ_DIRECT_READ_H */
