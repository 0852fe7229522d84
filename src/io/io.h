/*
 * io.h — the I/O contract: an injectable system-call table, a small fault
 * injector for tests, a fast 64-bit checksum, and a request queue that drives
 * io_uring (or plain pread/pwrite) with several requests in flight.
 *
 * Divisions:
 *   1. mz_io            the syscall table (SQLite's aSyscall idea). Every file
 *                       operation in src/io goes through it; tests replace
 *                       entries to inject errors. Default = the real calls.
 *   2. mz_io_fault_*    a ready-made injector: "fail the Nth read with EIO",
 *                       "make the 3rd write short", "flip a byte in the 2nd read".
 *   3. mz_hash64        XXH64-compatible checksum used by the swap records.
 *   4. mz_ioq           the request queue used by swapfile.c and direct_read.c.
 *
 * io_uring and faults: the kernel performs io_uring requests itself, so the
 * table's pread/pwrite are not called on that path. Instead every io_uring
 * completion is passed through mz_io.uring_done(), which may rewrite the result
 * (an -errno, a shorter count) or damage the bytes read. The injector installs
 * a uring_done that counts completions as MZ_IO_READ / MZ_IO_WRITE calls, so a
 * fault plan fires the same way on both paths. Setting mz_io.use_uring = false
 * forces the synchronous pread/pwrite path everywhere.
 *
 * Thread contract: change the table (or call mz_io_fault_set) only while no
 * other thread does I/O through it; calling through it is safe from any thread.
 */
#ifndef MZ_IO_H
#define MZ_IO_H

#include "../core/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* ---- 1. syscall table ------------------------------------------------------ */

/* Every entry has the contract of the system call it is named after:
 * -1 with errno set on failure (uring_done: returns a cqe-style result). */
typedef struct mz_io_ops {
    int (*open)(const char *path, int flags, mode_t mode);
    int (*close)(int fd);
    ssize_t (*pread)(int fd, void *buf, size_t n, off_t off);
    ssize_t (*pwrite)(int fd, const void *buf, size_t n, off_t off);
    int (*fsync)(int fd);
    int (*ftruncate)(int fd, off_t len);
    int (*fallocate)(int fd, int mode, off_t off, off_t len);
    int (*unlink)(const char *path);
    /* Called for every io_uring completion with the request as submitted
     * (iov/niov at file offset off) and the kernel's result res (bytes or
     * -errno). Returns the result the caller should see; may modify the
     * buffers of a read. Default: returns res unchanged. */
    int (*uring_done)(int fd, bool is_write, const struct iovec *iov, int niov, uint64_t off,
                      int res);
    bool use_uring;            /* false: never use io_uring (sync path only) */
} mz_io_ops;

/* The live table. Tests may assign entries directly. */
MZ_INTERNAL extern mz_io_ops mz_io;
/* Restores every entry (and use_uring = true) to the defaults. */
MZ_INTERNAL void mz_io_reset(void);
/* The default (real) table, for wrappers that forward to it. */
MZ_INTERNAL const mz_io_ops *mz_io_default(void);

/* ---- 2. fault injector ------------------------------------------------------ */

enum mz_io_op {
    MZ_IO_OPEN, MZ_IO_CLOSE, MZ_IO_READ, MZ_IO_WRITE, MZ_IO_FSYNC,
    MZ_IO_FTRUNCATE, MZ_IO_FALLOCATE, MZ_IO_UNLINK, MZ_IO_N_OPS
};

enum mz_io_fault_kind {
    MZ_IO_FAULT_ERRNO,         /* the call fails with errno = err (nothing is transferred for
                                * sync reads/writes; io_uring ones may have happened) */
    MZ_IO_FAULT_SHORT,         /* reads/writes of >= 8 KiB: the call happens in full but reports
                                * half, rounded down to 4 KiB (smaller calls are not shortened
                                * but still count as hit) */
    MZ_IO_FAULT_CORRUPT,       /* reads: succeeds, then one byte of the data read is flipped */
};

typedef struct mz_io_fault {
    enum mz_io_op op;          /* which call to hit (io_uring reads/writes count as READ/WRITE) */
    enum mz_io_fault_kind kind;
    int err;                   /* errno for MZ_IO_FAULT_ERRNO (e.g. ENOSPC, EIO, EINVAL) */
    unsigned nth;              /* first call to hit, 1-based, counted from mz_io_fault_set */
    unsigned count;            /* how many calls to hit from there (0 means 1; UINT32_MAX = all) */
} mz_io_fault;

/* Installs injecting wrappers around the current defaults and resets the call
 * counters; f == NULL removes them (same as mz_io_reset()). */
MZ_INTERNAL void mz_io_fault_set(const mz_io_fault *f);
/* Calls of op seen since the last mz_io_fault_set, and faults fired so far. */
MZ_INTERNAL unsigned mz_io_fault_calls(enum mz_io_op op);
MZ_INTERNAL unsigned mz_io_fault_fired(void);

/* ---- 3. checksum ------------------------------------------------------------- */

/* XXH64 of buf (same values as the reference xxHash XXH64). ~10+ GB/s. */
MZ_INTERNAL uint64_t mz_hash64(const void *buf, size_t n, uint64_t seed);

/* ---- 4. request queue ---------------------------------------------------------- */

#define MZ_IO_ALIGN 4096u          /* file offset / length unit for O_DIRECT requests */
#define MZ_IO_MAX_IOV 3
#define MZ_IO_ERR_EOF (-1)         /* mz_io_piece.err: the file ended before `need` bytes */

/* One request: up to 3 buffers laid out back to back in the file from off.
 * The queue fills done/err; the owner fills the rest. With direct = true the
 * buffers, off and every iov_len must be MZ_IO_ALIGN-aligned (the queue keeps
 * retries aligned). A piece is finished when done >= need (need <= total:
 * reads may stop early at the end of the file) or err != 0. */
typedef struct mz_io_piece {
    int fd;
    bool is_write;
    bool direct;
    int niov;
    struct iovec iov[MZ_IO_MAX_IOV];
    uint64_t off;              /* file offset of iov[0] */
    size_t need;               /* bytes that must be transferred for success */
    size_t done;               /* out: bytes transferred (from the start) */
    int err;                   /* out: 0, a positive errno, or MZ_IO_ERR_EOF */
    int stalls;                /* internal: retries without progress */
    int ncur;                  /* internal: the part still to transfer */
    struct iovec cur[MZ_IO_MAX_IOV];
    void *owner;               /* for the caller */
    struct mz_io_piece *next;  /* internal queue link */
} mz_io_piece;

typedef struct mz_ioq mz_ioq;

/* Creates a queue with up to depth requests in flight (depth <= 0: 4). Uses
 * io_uring when allow_uring and mz_io.use_uring are true and
 * io_uring_queue_init succeeds; otherwise requests run one at a time with
 * pread/pwrite. A queue is used by one thread at a time. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_ioq_init(int depth, bool allow_uring, mz_ioq **out);
/* Waits for requests in flight, then frees. NULL is fine. */
MZ_INTERNAL void mz_ioq_free(mz_ioq *q);
MZ_INTERNAL bool mz_ioq_uses_uring(const mz_ioq *q);
MZ_INTERNAL int mz_ioq_depth(const mz_ioq *q);
/* Queues p (not yet started). p must stay valid until mz_ioq_next returns it. */
MZ_INTERNAL void mz_ioq_push(mz_ioq *q, mz_io_piece *p);
/* Starts queued requests (up to depth in flight) and returns one finished
 * piece. wait = false: returns NULL when none has finished yet. Returns NULL
 * when nothing is queued or in flight. Short transfers and EINTR/EAGAIN are
 * retried internally; a piece comes back with err set only on a real error. */
MZ_INTERNAL mz_io_piece *mz_ioq_next(mz_ioq *q, bool wait);
/* Pieces queued or in flight. */
MZ_INTERNAL size_t mz_ioq_pending(const mz_ioq *q);

/* Bytes of the pieces' iovecs (sum of iov_len). */
MZ_INTERNAL size_t mz_io_piece_total(const mz_io_piece *p);
/* Human text for a piece's err. */
MZ_INTERNAL const char *mz_io_piece_strerror(const mz_io_piece *p);

#endif /* MZ_IO_H */
