/*
 * direct_read.c — unaligned byte ranges read with O_DIRECT (see direct_read.h).
 *
 * A batch is turned into pieces lazily by a cursor (item index, next byte):
 * at most queue_depth pieces exist at a time, each owning one slot of a small
 * bounce pool (max_io + 2 pages). Per piece, for the window starting at the
 * page a = floor(pos) (A = 4096):
 *   zero-copy item:  [a, a+A) -> bounce page 0        if pos is not aligned
 *                    whole pages < floor(end) -> dst  at most max_io bytes
 *                    [floor(end), +A) -> bounce page 1 if the range ends there
 *   bounce item:     [a, min(ceil(end), a+max_io)) -> bounce, copied out
 *   buffered file:   [pos, min(end, pos+max_io)) -> dst directly
 * "need" is the number of bytes up to the last one wanted, so a window that
 * runs past the end of the file (short O_DIRECT read at EOF) still succeeds.
 *
 * The pool (depth x (max_io + 8 KiB): 4 MiB by default) exists only between
 * the first batch that needs it and mz_dfile_idle: a daemon that reloaded a
 * weight block once would otherwise keep it resident for good. It is mapped
 * with mmap, not malloc, so that idle really returns it to the system (glibc
 * keeps a freed block of this size in its heap once its mmap threshold has
 * grown past it).
 */
#define _GNU_SOURCE
#include "direct_read.h"

#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define DR_A ((uint64_t)MZ_IO_ALIGN)

struct mz_dfile {
    int fd;
    bool direct;
    uint64_t size;             /* at open */
    size_t mem_align;          /* O_DIRECT buffer alignment (<= 4096) */
    size_t max_io;             /* bytes per request, multiple of 4096 */
    mz_ioq *q;
    unsigned char *pool;       /* depth slots of slot_bytes, 4096-aligned; NULL while idle */
    size_t slot_bytes, pool_bytes;
    char path[256];            /* for messages (truncated) */
};

typedef struct dr_piece {
    mz_io_piece io;
    size_t item;               /* index into the batch */
    uint64_t a;                /* file offset of the window (io.off) */
    uint64_t pos, cov;         /* bytes [pos, cov) of the item come from this piece */
    unsigned char *slot;       /* bounce slot (NULL for buffered pieces) */
    int kind;                  /* DR_ZERO, DR_BOUNCE, DR_PLAIN */
    size_t head, tail;         /* zero-copy: bytes copied from bounce page 0 / page 1 */
    uint64_t tail_off;         /* zero-copy: file offset of the tail page */
    bool busy;
} dr_piece;

enum { DR_ZERO, DR_BOUNCE, DR_PLAIN };

mz_dfile_params mz_dfile_params_default(void)
{
    return (mz_dfile_params){.queue_depth = 4, .max_io_bytes = 1u << 20, .flags = 0};
}

bool mz_dfile_is_direct(const mz_dfile_t *f) { return f->direct; }
bool mz_dfile_uses_uring(const mz_dfile_t *f) { return mz_ioq_uses_uring(f->q); }
uint64_t mz_dfile_size(const mz_dfile_t *f) { return f->size; }

bool mz_dfile_zero_copy(const mz_dfile_t *f, uint64_t off, const void *dst)
{
    if (!f->direct) return true;
    return (((uintptr_t)dst - (uintptr_t)off) % f->mem_align) == 0;
}

mz_status mz_dfile_open(const char *path, const mz_dfile_params *p, mz_dfile_t **out)
{
    *out = NULL;
    mz_dfile_params d = mz_dfile_params_default();
    if (!p) p = &d;
    mz_dfile_t *f = mz_calloc(1, sizeof *f);
    if (!f) return MZ_E_NOMEM;
    mz_status s = MZ_OK;
    snprintf(f->path, sizeof f->path, "%s", path);
    size_t mio = p->max_io_bytes ? p->max_io_bytes : (1u << 20);
    f->max_io = MZ_MAX((size_t)DR_A, mio - mio % DR_A);
    f->mem_align = DR_A;
    f->direct = !(p->flags & MZ_DFILE_FORCE_BUFFERED);
    f->fd = mz_io.open(path, O_RDONLY | O_CLOEXEC | (f->direct ? O_DIRECT : 0), 0);
    if (f->fd < 0 && f->direct && errno == EINVAL) {
        mz_log(MZ_LOG_WARN, "%s: O_DIRECT refused; reading buffered + POSIX_FADV_DONTNEED", path);
        f->direct = false;
        f->fd = mz_io.open(path, O_RDONLY | O_CLOEXEC, 0);
    }
    if (f->fd < 0) {
        s = mz_fail(MZ_E_IO, "cannot open %s: %s", path, strerror(errno));
        goto out_free;
    }
    struct stat st;
    if (fstat(f->fd, &st) != 0) {
        s = mz_fail(MZ_E_IO, "cannot stat %s: %s", path, strerror(errno));
        goto out_free;
    }
    f->size = (uint64_t)st.st_size;
#ifdef STATX_DIOALIGN
    if (f->direct) {
        struct statx sx;
        if (statx(f->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
            (sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_mem_align > 0 &&
            sx.stx_dio_mem_align <= DR_A && DR_A % sx.stx_dio_offset_align == 0 &&
            (sx.stx_dio_mem_align & (sx.stx_dio_mem_align - 1)) == 0)
            f->mem_align = sx.stx_dio_mem_align;
    }
#endif
    s = mz_ioq_init(MZ_MIN(p->queue_depth, 64), !(p->flags & MZ_DFILE_NO_URING), &f->q);
    if (s != MZ_OK) goto out_free;
    f->slot_bytes = f->max_io + 2 * DR_A;
    f->pool_bytes = f->slot_bytes * (size_t)mz_ioq_depth(f->q);
    *out = f;
    return MZ_OK;

out_free:
    mz_dfile_close(f);
    return s;
}

void mz_dfile_close(mz_dfile_t *f)
{
    if (!f) return;
    mz_ioq_free(f->q);
    if (f->fd >= 0) mz_io.close(f->fd);
    mz_dfile_idle(f);
    free(f);
}

void mz_dfile_idle(mz_dfile_t *f)
{
    if (!f || !f->pool) return;
    munmap(f->pool, f->pool_bytes);
    f->pool = NULL;
}

bool mz_dfile_holds_pool(const mz_dfile_t *f) { return f && f->pool; }

/* Maps the bounce pool for a batch (direct files only: buffered pieces read
 * straight into dst). Pages are touched only as pieces use them. */
static mz_status pool_map(mz_dfile_t *f)
{
    if (f->pool || !f->direct) return MZ_OK;
    void *p = mmap(NULL, f->pool_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return mz_fail(MZ_E_NOMEM, "out of memory (direct read bounce pool)");
    f->pool = p;
    return MZ_OK;
}

static uint64_t floor_a(uint64_t x) { return x - x % DR_A; }
static uint64_t ceil_a(uint64_t x) { return floor_a(x + DR_A - 1); }

static void add_iov(mz_io_piece *io, void *base, size_t len)
{
    io->iov[io->niov].iov_base = base;
    io->iov[io->niov].iov_len = len;
    io->niov++;
}

/* Builds into dp the next piece of item it, starting at byte pos; dp->cov is
 * the end of the bytes it covers. */
static void build_piece(mz_dfile_t *f, dr_piece *dp, const mz_dread_item *it, uint64_t pos)
{
    mz_io_piece *io = &dp->io;
    uint64_t end = it->off + it->len;
    unsigned char *dst = it->dst;
    memset(io, 0, sizeof *io);
    io->fd = f->fd;
    io->direct = f->direct;
    io->owner = dp;
    dp->pos = pos;
    dp->head = dp->tail = 0;
    if (!f->direct) {
        dp->kind = DR_PLAIN;
        dp->a = pos;
        dp->cov = MZ_MIN(end, pos + f->max_io);
        add_iov(io, dst + (pos - it->off), (size_t)(dp->cov - pos));
        io->off = pos;
        io->need = (size_t)(dp->cov - pos);
        return;
    }
    uint64_t a = floor_a(pos);
    dp->a = a;
    io->off = a;
    if (mz_dfile_zero_copy(f, it->off, it->dst)) {
        dp->kind = DR_ZERO;
        uint64_t b = a, cov = pos;
        if (pos % DR_A) {               /* partial first page */
            add_iov(io, dp->slot, DR_A);
            b = a + DR_A;
            cov = MZ_MIN(b, end);
            dp->head = (size_t)(cov - pos);
        }
        uint64_t mid_end = MZ_MIN(floor_a(end), b + f->max_io);
        if (mid_end > b) {              /* whole pages straight into dst */
            add_iov(io, dst + (b - it->off), (size_t)(mid_end - b));
            b = mid_end;
            cov = b;
        }
        if (b == floor_a(end) && end % DR_A && cov < end) { /* partial last page */
            add_iov(io, dp->slot + DR_A, DR_A);
            dp->tail_off = b;
            dp->tail = (size_t)(end - b);
            b += DR_A;
            cov = end;
        }
        dp->cov = cov;
    } else {
        dp->kind = DR_BOUNCE;
        uint64_t b = MZ_MIN(ceil_a(end), a + f->max_io);
        add_iov(io, dp->slot, (size_t)(b - a));
        dp->cov = MZ_MIN(b, end);
    }
    io->need = (size_t)(dp->cov - a);
}

/* Copies the bounced bytes of a finished piece into dst. */
static void finish_piece(const dr_piece *dp, const mz_dread_item *it)
{
    unsigned char *dst = it->dst;
    if (dp->kind == DR_BOUNCE) {
        memcpy(dst + (dp->pos - it->off), dp->slot + (dp->pos - dp->a), (size_t)(dp->cov - dp->pos));
    } else if (dp->kind == DR_ZERO) {
        if (dp->head) memcpy(dst + (dp->pos - it->off), dp->slot + (dp->pos - dp->a), dp->head);
        if (dp->tail) memcpy(dst + (dp->tail_off - it->off), dp->slot + DR_A, dp->tail);
    }
}

mz_status mz_dfile_read_batch(mz_dfile_t *f, mz_dread_item *items, size_t n)
{
    int depth = mz_ioq_depth(f->q);
    dr_piece pieces[64];
    MZ_ASSERT(depth <= (int)MZ_ARRAY_LEN(pieces));
    if (n) {
        mz_status ps = pool_map(f);
        if (ps) {
            for (size_t i = 0; i < n; i++) items[i].status = ps;
            return ps;
        }
    }
    size_t first_bad = SIZE_MAX;
    mz_status first_status = MZ_OK;
    char msg[512] = "";

    for (size_t i = 0; i < n; i++) {
        mz_dread_item *it = &items[i];
        it->status = MZ_OK;
        if ((!it->dst && it->len) || it->off > f->size || it->len > f->size - it->off) {
            it->status = mz_fail(MZ_E_RANGE, "%s: range [%llu, +%zu) outside the file (%llu bytes)",
                                 f->path, (unsigned long long)it->off, it->len,
                                 (unsigned long long)f->size);
            if (i < first_bad) {
                first_bad = i;
                first_status = it->status;
                snprintf(msg, sizeof msg, "%s", mz_last_error());
            }
        }
    }
    for (int k = 0; k < depth; k++) {
        pieces[k].busy = false;
        pieces[k].slot = f->pool ? f->pool + (size_t)k * f->slot_bytes : NULL;
    }

    size_t cur = 0;           /* cursor: item index */
    uint64_t pos = n ? items[0].off : 0;
    int busy = 0;
    for (;;) {
        /* Fill free piece slots from the cursor. */
        for (int k = 0; k < depth; k++) {
            if (pieces[k].busy) continue;
            while (cur < n && (items[cur].status != MZ_OK || pos >= items[cur].off + items[cur].len)) {
                cur++;
                if (cur < n) pos = items[cur].off;
            }
            if (cur >= n) break;
            dr_piece *dp = &pieces[k];
            build_piece(f, dp, &items[cur], pos);
            dp->item = cur;
            dp->busy = true;
            busy++;
            pos = dp->cov;
            mz_ioq_push(f->q, &dp->io);
        }
        if (busy == 0) break;
        mz_io_piece *io = mz_ioq_next(f->q, true);
        MZ_ASSERT(io != NULL);
        dr_piece *dp = io->owner;
        mz_dread_item *it = &items[dp->item];
        dp->busy = false;
        busy--;
        if (io->err) {
            if (it->status == MZ_OK) {
                it->status = mz_fail(MZ_E_IO, "%s: read of [%llu, +%zu) failed at offset %llu: %s",
                                     f->path, (unsigned long long)it->off, it->len,
                                     (unsigned long long)(io->off + io->done), mz_io_piece_strerror(io));
                if (dp->item < first_bad) {
                    first_bad = dp->item;
                    first_status = it->status;
                    snprintf(msg, sizeof msg, "%s", mz_last_error());
                }
            }
            continue;
        }
        if (it->status == MZ_OK) finish_piece(dp, it);
        if (!f->direct)
            posix_fadvise(f->fd, (off_t)io->off, (off_t)io->need, POSIX_FADV_DONTNEED);
    }
    if (first_status != MZ_OK) mz_fail(first_status, "%s", msg);
    return first_status;
}

mz_status mz_dfile_read(mz_dfile_t *f, uint64_t off, size_t len, void *dst)
{
    mz_dread_item it = {.off = off, .len = len, .dst = dst};
    return mz_dfile_read_batch(f, &it, 1);
}

mz_status mz_direct_read(const char *path, uint64_t off, size_t len, void *dst)
{
    mz_dfile_t *f = NULL;
    mz_status s = mz_dfile_open(path, NULL, &f);
    if (s != MZ_OK) return s;
    s = mz_dfile_read(f, off, len, dst);
    mz_dfile_close(f);
    return s;
}
