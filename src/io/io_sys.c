/*
 * io_sys.c — the syscall table, the fault injector, mz_hash64 and the request
 * queue (io_uring with a synchronous fallback). See io.h for the contracts.
 *
 * Divisions, in order:
 *   1. default table and mz_io_reset
 *   2. fault injector (wrappers that count calls and misbehave on cue)
 *   3. mz_hash64 (XXH64)
 *   4. mz_ioq: piece bookkeeping, the sync path, the io_uring path
 */
#define _GNU_SOURCE
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

/* ---- 1. default table --------------------------------------------------------- */

static int sys_open(const char *path, int flags, mode_t mode) { return open(path, flags, mode); }
static int sys_close(int fd) { return close(fd); }
static ssize_t sys_pread(int fd, void *buf, size_t n, off_t off) { return pread(fd, buf, n, off); }
static ssize_t sys_pwrite(int fd, const void *buf, size_t n, off_t off)
{
    return pwrite(fd, buf, n, off);
}
static int sys_fsync(int fd) { return fsync(fd); }
static int sys_ftruncate(int fd, off_t len) { return ftruncate(fd, len); }
static int sys_fallocate(int fd, int mode, off_t off, off_t len)
{
    return fallocate(fd, mode, off, len);
}
static int sys_unlink(const char *path) { return unlink(path); }
static int sys_uring_done(int fd, bool is_write, const struct iovec *iov, int niov, uint64_t off,
                          int res)
{
    return res;
}

/* The system operations, written once for the default table and for the
 * live table that tests may swap entries of (mz_io_reset restores it). */
#define SYS_IO_OPS                                                          \
    {                                                                       \
        .open = sys_open, .close = sys_close, .pread = sys_pread,           \
        .pwrite = sys_pwrite, .fsync = sys_fsync,                           \
        .ftruncate = sys_ftruncate, .fallocate = sys_fallocate,             \
        .unlink = sys_unlink, .uring_done = sys_uring_done,                 \
        .use_uring = true,                                                  \
    }

static const mz_io_ops g_default_ops = SYS_IO_OPS;
mz_io_ops mz_io = SYS_IO_OPS;

void mz_io_reset(void) { mz_io = g_default_ops; }
const mz_io_ops *mz_io_default(void) { return &g_default_ops; }

/* ---- 2. fault injector ---------------------------------------------------------- */

static mz_io_fault g_fault;                    /* the plan; written only by mz_io_fault_set */
static atomic_uint g_calls[MZ_IO_N_OPS];       /* calls seen per op */
static atomic_uint g_fired;                    /* faults fired */

/* Counts a call of op; true when this call is one the plan hits. */
static bool fault_hit(enum mz_io_op op)
{
    unsigned n = atomic_fetch_add(&g_calls[op], 1) + 1;
    if (op != g_fault.op) return false;
    unsigned count = g_fault.count ? g_fault.count : 1;
    if (n < g_fault.nth || n - g_fault.nth >= count) return false;
    atomic_fetch_add(&g_fired, 1);
    return true;
}

/* Requests of 8 KiB or more report half, rounded down to 4 KiB (what a real
 * short O_DIRECT transfer looks like); smaller ones are left alone. */
static size_t short_len(size_t n)
{
    if (n < 2 * MZ_IO_ALIGN) return n;
    size_t s = n / 2;
    return s - s % MZ_IO_ALIGN;
}

/* Flips one byte at position pos of the data spread over iov. */
static void flip_byte(const struct iovec *iov, int niov, size_t pos)
{
    for (int i = 0; i < niov; i++) {
        if (pos < iov[i].iov_len) {
            ((unsigned char *)iov[i].iov_base)[pos] ^= 0x5a;
            return;
        }
        pos -= iov[i].iov_len;
    }
}

static int fi_open(const char *path, int flags, mode_t mode)
{
    if (fault_hit(MZ_IO_OPEN)) return errno = g_fault.err, -1;
    return g_default_ops.open(path, flags, mode);
}
static int fi_close(int fd)
{
    if (fault_hit(MZ_IO_CLOSE)) {
        g_default_ops.close(fd); /* never leak the descriptor */
        return errno = g_fault.err, -1;
    }
    return g_default_ops.close(fd);
}
static ssize_t fi_pread(int fd, void *buf, size_t n, off_t off)
{
    if (!fault_hit(MZ_IO_READ)) return g_default_ops.pread(fd, buf, n, off);
    if (g_fault.kind == MZ_IO_FAULT_ERRNO) return errno = g_fault.err, -1;
    ssize_t r = g_default_ops.pread(fd, buf, n, off);
    if (r <= 0) return r;
    if (g_fault.kind == MZ_IO_FAULT_SHORT) return (ssize_t)MZ_MIN((size_t)r, short_len(n));
    ((unsigned char *)buf)[r / 2] ^= 0x5a; /* MZ_IO_FAULT_CORRUPT */
    return r;
}
static ssize_t fi_pwrite(int fd, const void *buf, size_t n, off_t off)
{
    if (!fault_hit(MZ_IO_WRITE)) return g_default_ops.pwrite(fd, buf, n, off);
    if (g_fault.kind == MZ_IO_FAULT_ERRNO) return errno = g_fault.err, -1;
    ssize_t r = g_default_ops.pwrite(fd, buf, n, off);
    if (r > 0 && g_fault.kind == MZ_IO_FAULT_SHORT) return (ssize_t)MZ_MIN((size_t)r, short_len(n));
    return r;
}
static int fi_fsync(int fd)
{
    if (fault_hit(MZ_IO_FSYNC)) return errno = g_fault.err, -1;
    return g_default_ops.fsync(fd);
}
static int fi_ftruncate(int fd, off_t len)
{
    if (fault_hit(MZ_IO_FTRUNCATE)) return errno = g_fault.err, -1;
    return g_default_ops.ftruncate(fd, len);
}
static int fi_fallocate(int fd, int mode, off_t off, off_t len)
{
    if (fault_hit(MZ_IO_FALLOCATE)) return errno = g_fault.err, -1;
    return g_default_ops.fallocate(fd, mode, off, len);
}
static int fi_unlink(const char *path)
{
    if (fault_hit(MZ_IO_UNLINK)) return errno = g_fault.err, -1;
    return g_default_ops.unlink(path);
}
static int fi_uring_done(int fd, bool is_write, const struct iovec *iov, int niov, uint64_t off,
                         int res)
{
    if (!fault_hit(is_write ? MZ_IO_WRITE : MZ_IO_READ)) return res;
    if (g_fault.kind == MZ_IO_FAULT_ERRNO) return -g_fault.err;
    if (res <= 0) return res;
    if (g_fault.kind == MZ_IO_FAULT_SHORT) {
        size_t n = 0;
        for (int i = 0; i < niov; i++) n += iov[i].iov_len;
        return (int)MZ_MIN((size_t)res, short_len(n));
    }
    if (!is_write) flip_byte(iov, niov, (size_t)res / 2);
    return res;
}

void mz_io_fault_set(const mz_io_fault *f)
{
    mz_io_reset();
    for (int i = 0; i < MZ_IO_N_OPS; i++) atomic_store(&g_calls[i], 0);
    atomic_store(&g_fired, 0);
    if (!f) {
        memset(&g_fault, 0, sizeof g_fault);
        g_fault.op = MZ_IO_N_OPS; /* matches nothing */
        return;
    }
    g_fault = *f;
    mz_io.open = fi_open;
    mz_io.close = fi_close;
    mz_io.pread = fi_pread;
    mz_io.pwrite = fi_pwrite;
    mz_io.fsync = fi_fsync;
    mz_io.ftruncate = fi_ftruncate;
    mz_io.fallocate = fi_fallocate;
    mz_io.unlink = fi_unlink;
    mz_io.uring_done = fi_uring_done;
}

unsigned mz_io_fault_calls(enum mz_io_op op)
{
    return op < MZ_IO_N_OPS ? atomic_load(&g_calls[op]) : 0;
}
unsigned mz_io_fault_fired(void) { return atomic_load(&g_fired); }

/* ---- 3. mz_hash64: XXH64 ---------------------------------------------------------- */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#define MZ_LE64(x) __builtin_bswap64(x)
#define MZ_LE32(x) __builtin_bswap32(x)
#else
#define MZ_LE64(x) (x)
#define MZ_LE32(x) (x)
#endif

static const uint64_t P1 = 11400714785074694791ULL;
static const uint64_t P2 = 14029467366897019727ULL;
static const uint64_t P3 = 1609587929392839161ULL;
static const uint64_t P4 = 9650029242287828579ULL;
static const uint64_t P5 = 2870177450012600261ULL;

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t rd64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return MZ_LE64(v);
}
static inline uint32_t rd32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return MZ_LE32(v);
}
static inline uint64_t xx_round(uint64_t acc, uint64_t in)
{
    acc += in * P2;
    acc = rotl64(acc, 31);
    return acc * P1;
}
static inline uint64_t xx_merge(uint64_t acc, uint64_t v)
{
    acc ^= xx_round(0, v);
    return acc * P1 + P4;
}

uint64_t mz_hash64(const void *buf, size_t n, uint64_t seed)
{
    const unsigned char *p = buf;
    const unsigned char *end = p + n;
    uint64_t h;
    if (n >= 32) {
        uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
        const unsigned char *limit = end - 32;
        do {
            v1 = xx_round(v1, rd64(p));
            v2 = xx_round(v2, rd64(p + 8));
            v3 = xx_round(v3, rd64(p + 16));
            v4 = xx_round(v4, rd64(p + 24));
            p += 32;
        } while (p <= limit);
        h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
        h = xx_merge(h, v1);
        h = xx_merge(h, v2);
        h = xx_merge(h, v3);
        h = xx_merge(h, v4);
    } else {
        h = seed + P5;
    }
    h += (uint64_t)n;
    while (end - p >= 8) {
        h ^= xx_round(0, rd64(p));
        h = rotl64(h, 27) * P1 + P4;
        p += 8;
    }
    if (end - p >= 4) {
        h ^= (uint64_t)rd32(p) * P1;
        h = rotl64(h, 23) * P2 + P3;
        p += 4;
    }
    while (p < end) {
        h ^= (uint64_t)*p * P5;
        h = rotl64(h, 11) * P1;
        p++;
    }
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}

/* ---- 4. mz_ioq ----------------------------------------------------------------------- */

#define MZ_IO_MAX_STALLS 3       /* retries of a request that makes no (aligned) progress */
#define MZ_IO_MAX_AGAIN 1000     /* EINTR/EAGAIN retries of one request */

struct mz_ioq {
    struct io_uring ring;      /* valid when uring */
    bool uring;
    int depth;                 /* max requests in flight */
    int inflight;              /* submitted, not yet completed */
    mz_io_piece *q_head;       /* queued, not started (FIFO; retries go to the front) */
    mz_io_piece *q_tail;
    mz_io_piece *d_head;       /* finished, not yet returned */
    mz_io_piece *d_tail;
    size_t n_pending;          /* queued + in flight + finished-not-returned */
};

size_t mz_io_piece_total(const mz_io_piece *p)
{
    size_t t = 0;
    for (int i = 0; i < p->niov; i++) t += p->iov[i].iov_len;
    return t;
}

const char *mz_io_piece_strerror(const mz_io_piece *p)
{
    if (p->err == MZ_IO_ERR_EOF) return "unexpected end of file (file truncated?)";
    return strerror(p->err);
}

/* Fills p->cur with the part of the iovecs after the first p->done bytes. */
static void piece_remaining(mz_io_piece *p)
{
    size_t skip = p->done;
    p->ncur = 0;
    for (int i = 0; i < p->niov; i++) {
        size_t l = p->iov[i].iov_len;
        if (skip >= l) {
            skip -= l;
            continue;
        }
        p->cur[p->ncur].iov_base = (char *)p->iov[i].iov_base + skip;
        p->cur[p->ncur].iov_len = l - skip;
        p->ncur++;
        skip = 0;
    }
}

/* Applies one transfer result (bytes or -errno). Returns true when p is finished. */
static bool piece_result(mz_io_piece *p, long res)
{
    if (res == -EINTR || res == -EAGAIN) {
        if (++p->stalls > MZ_IO_MAX_AGAIN) p->err = -(int)res;
        return p->err != 0;
    }
    if (res < 0) {
        p->err = (int)-res;
        return true;
    }
    if (res == 0) {
        if (!p->is_write) {
            p->err = MZ_IO_ERR_EOF;
            return true;
        }
        if (++p->stalls > MZ_IO_MAX_STALLS) p->err = EIO;
        return p->err != 0;
    }
    size_t prev = p->done;
    p->done += (size_t)res;
    if (p->done >= p->need) return true;
    if (p->direct) p->done -= p->done % MZ_IO_ALIGN; /* keep the retry aligned */
    if (p->done > prev) {
        p->stalls = 0;
    } else if (++p->stalls > MZ_IO_MAX_STALLS) {
        p->err = p->is_write ? EIO : MZ_IO_ERR_EOF;
        return true;
    }
    return false;
}

/* Runs p to completion with the table's pread/pwrite. */
static void piece_run_sync(mz_io_piece *p)
{
    for (;;) {
        piece_remaining(p);
        MZ_ASSERT(p->ncur > 0);
        uint64_t off = p->off + p->done;
        ssize_t r = p->is_write ? mz_io.pwrite(p->fd, p->cur[0].iov_base, p->cur[0].iov_len, (off_t)off)
                                : mz_io.pread(p->fd, p->cur[0].iov_base, p->cur[0].iov_len, (off_t)off);
        if (piece_result(p, r < 0 ? -(long)errno : (long)r)) return;
    }
}

mz_status mz_ioq_init(int depth, bool allow_uring, mz_ioq **out)
{
    *out = NULL;
    mz_ioq *q = mz_calloc(1, sizeof *q);
    if (!q) return MZ_E_NOMEM;
    q->depth = depth > 0 ? depth : 4;
    if (allow_uring && mz_io.use_uring) {
        int e = io_uring_queue_init((unsigned)q->depth, &q->ring, 0);
        if (e == 0) {
            q->uring = true;
        } else {
            static atomic_bool warned;
            if (!atomic_exchange(&warned, true))
                mz_log(MZ_LOG_WARN, "io_uring unavailable (%s); using synchronous pread/pwrite",
                       strerror(-e));
        }
    }
    *out = q;
    return MZ_OK;
}

bool mz_ioq_uses_uring(const mz_ioq *q) { return q->uring; }
int mz_ioq_depth(const mz_ioq *q) { return q->depth; }
size_t mz_ioq_pending(const mz_ioq *q) { return q->n_pending; }

/* The queue's two singly linked lists (queued, done): head and tail. */
static void list_push_back(mz_io_piece **head, mz_io_piece **tail, mz_io_piece *p)
{
    p->next = NULL;
    if (*tail) (*tail)->next = p;
    else *head = p;
    *tail = p;
}

static mz_io_piece *list_pop_front(mz_io_piece **head, mz_io_piece **tail)
{
    mz_io_piece *p = *head;
    if (p) {
        *head = p->next;
        if (!*head) *tail = NULL;
        p->next = NULL;
    }
    return p;
}

void mz_ioq_push(mz_ioq *q, mz_io_piece *p)
{
    MZ_ASSERT(p->niov > 0 && p->niov <= MZ_IO_MAX_IOV);
    MZ_ASSERT(p->need <= mz_io_piece_total(p));
    p->done = 0;
    p->err = 0;
    p->stalls = 0;
    list_push_back(&q->q_head, &q->q_tail, p);
    q->n_pending++;
}

static void push_front(mz_ioq *q, mz_io_piece *p)
{
    p->next = q->q_head;
    q->q_head = p;
    if (!q->q_tail) q->q_tail = p;
}

static mz_io_piece *pop_queued(mz_ioq *q) { return list_pop_front(&q->q_head, &q->q_tail); }

static void push_done(mz_ioq *q, mz_io_piece *p) { list_push_back(&q->d_head, &q->d_tail, p); }

static mz_io_piece *pop_done(mz_ioq *q)
{
    mz_io_piece *p = list_pop_front(&q->d_head, &q->d_tail);
    if (p) q->n_pending--;
    return p;
}

/* Handles one completion: a finished piece goes to the done list, a retry to the front of the queue. */
static void uring_complete(mz_ioq *q, struct io_uring_cqe *cqe);

/* Moves queued pieces into the ring while there is room; submits them. */
static void uring_fill(mz_ioq *q)
{
    int added = 0;
    while (q->inflight < q->depth && q->q_head) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);
        if (!sqe) break;
        mz_io_piece *p = pop_queued(q);
        piece_remaining(p);
        uint64_t off = p->off + p->done;
        if (p->is_write) io_uring_prep_writev(sqe, p->fd, p->cur, (unsigned)p->ncur, off);
        else io_uring_prep_readv(sqe, p->fd, p->cur, (unsigned)p->ncur, off);
        io_uring_sqe_set_data(sqe, p);
        q->inflight++;
        added++;
    }
    if (added) {
        /* Failure here means a broken ring (bad fd, no memory for the kernel's
         * request state). The SQEs are already published to the kernel and
         * cannot be taken back, so we retry transient errors and treat a
         * persistent one as fatal rather than hand out pieces the kernel may
         * still write into later. */
        int r, tries = 0;
        do {
            r = io_uring_submit(&q->ring);
            if (r >= 0) break;
            if (r == -EBUSY && q->inflight > added) {
                struct io_uring_cqe *cqe = NULL; /* CQ full: reap one, then retry */
                if (io_uring_wait_cqe(&q->ring, &cqe) == 0) uring_complete(q, cqe);
            }
        } while ((r == -EINTR || r == -EAGAIN || r == -EBUSY) && ++tries < 10000);
        if (r < 0) {
            mz_log(MZ_LOG_ERROR, "io_uring_submit failed: %s", strerror(-r));
            MZ_ASSERT(!"io_uring_submit failed");
        }
    }
}

static void uring_complete(mz_ioq *q, struct io_uring_cqe *cqe)
{
    mz_io_piece *p = io_uring_cqe_get_data(cqe);
    int res = mz_io.uring_done(p->fd, p->is_write, p->cur, p->ncur, p->off + p->done, cqe->res);
    io_uring_cqe_seen(&q->ring, cqe);
    q->inflight--;
    if (piece_result(p, res)) push_done(q, p);
    else push_front(q, p);
}

mz_io_piece *mz_ioq_next(mz_ioq *q, bool wait)
{
    if (!q->uring) {
        mz_io_piece *p = pop_done(q);
        if (p) return p;
        p = pop_queued(q);
        if (!p) return NULL;
        piece_run_sync(p);
        q->n_pending--;
        return p;
    }
    for (;;) {
        mz_io_piece *p = pop_done(q);
        if (p) return p;
        uring_fill(q);
        if (q->inflight == 0) return NULL;
        struct io_uring_cqe *cqe = NULL;
        int e = wait ? io_uring_wait_cqe(&q->ring, &cqe) : io_uring_peek_cqe(&q->ring, &cqe);
        if (e == -EINTR) continue;
        if (e == -EAGAIN && !wait) return NULL;
        MZ_ASSERT(e == 0 && cqe);
        uring_complete(q, cqe);
        /* Reap whatever else is already there without waiting. */
        while (io_uring_peek_cqe(&q->ring, &cqe) == 0) uring_complete(q, cqe);
    }
}

void mz_ioq_free(mz_ioq *q)
{
    if (!q) return;
    if (q->uring) {
        while (q->inflight > 0) {
            struct io_uring_cqe *cqe = NULL;
            int e = io_uring_wait_cqe(&q->ring, &cqe);
            if (e == -EINTR) continue;
            if (e < 0) break;
            io_uring_cqe_seen(&q->ring, cqe);
            q->inflight--;
        }
        io_uring_queue_exit(&q->ring);
    }
    free(q);
}
