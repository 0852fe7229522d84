/*
 * swapfile.c — the per-engine swap file (see swapfile.h for the contract).
 *
 * Divisions, in order:
 *   1. record header encode/decode (pure, fuzzed by tests/fuzz/fuzz_swapslot.c)
 *   2. extent allocator (first-fit free list kept sorted by offset, coalescing)
 *   3. slot table (index + sequence number handles)
 *   4. directory, naming, open/close, stale-file cleanup
 *   5. operations: one swap_op per item, split into mz_io_pieces for mz_ioq
 *   6. async queue and the batch / single-item wrappers on top of it
 *
 * Locking: sf->lock guards the allocator, the slot table, file_end, stats and
 * last_errno. It is never held across I/O (only across a fallocate/ftruncate
 * when the file grows or shrinks). sf->batch_lock serializes the batch calls,
 * which share sf->batch_q. Order: batch_lock, then lock.
 */
#define _GNU_SOURCE
#include "swapfile.h"

#include "io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SWAP_BLOCK ((uint64_t)MZ_IO_ALIGN)
#define SWAP_MAX_LEN ((uint64_t)1 << 48)       /* sanity bound for a payload length */
#define SWAP_SHRINK_MIN ((uint64_t)16 << 20)   /* trim a free tail at least this big */
#define SWAP_NAME_PREFIX "mzswap-"
#define SWAP_NAME_SUFFIX ".swp"

/* ---- 1. record header ---------------------------------------------------------------- */

/* Layout: 0 magic u32 | 4 version u16 | 6 flags u16 | 8 len | 16 tag | 24 seq |
 *         32 payload_hash | 40..55 reserved (zero) | 56 hash of bytes 0..55 */
void mz_swap_rec_encode(const mz_swap_rec *r, unsigned char out[MZ_SWAP_REC_HDR_BYTES])
{
    memset(out, 0, MZ_SWAP_REC_HDR_BYTES);
    mz_put_le32(out, MZ_SWAP_REC_MAGIC);
    out[4] = (unsigned char)MZ_SWAP_REC_VERSION;
    out[5] = 0;
    out[6] = (unsigned char)r->flags;
    out[7] = (unsigned char)(r->flags >> 8);
    mz_put_le64(out + 8, r->len);
    mz_put_le64(out + 16, r->tag);
    mz_put_le64(out + 24, r->seq);
    mz_put_le64(out + 32, r->payload_hash);
    mz_put_le64(out + 56, mz_hash64(out, 56, 0));
}

mz_status mz_swap_rec_decode(const void *buf, size_t n, mz_swap_rec *r, const char **why)
{
    const unsigned char *p = buf;
    const char *w = NULL;
    memset(r, 0, sizeof *r);
    if (n < MZ_SWAP_REC_HDR_BYTES) w = "record header truncated";
    else if (mz_get_le32(p) != MZ_SWAP_REC_MAGIC) w = "bad record magic";
    else if (mz_get_le64(p + 56) != mz_hash64(p, 56, 0)) w = "record header checksum mismatch";
    else if ((p[4] | (p[5] << 8)) != MZ_SWAP_REC_VERSION) w = "unknown record version";
    else if (mz_get_le64(p + 40) || mz_get_le64(p + 48)) w = "reserved header bytes not zero";
    else {
        r->flags = (uint32_t)(p[6] | (p[7] << 8));
        r->len = mz_get_le64(p + 8);
        r->tag = mz_get_le64(p + 16);
        r->seq = mz_get_le64(p + 24);
        r->payload_hash = mz_get_le64(p + 32);
        if (r->flags & ~MZ_SWAP_REC_SPLIT) w = "unknown record flags";
        else if (r->len > SWAP_MAX_LEN) w = "record length out of range";
        else if ((r->flags & MZ_SWAP_REC_SPLIT) && (r->len == 0 || r->len % SWAP_BLOCK))
            w = "split record with unaligned length";
    }
    if (why) *why = w ? w : "ok";
    if (w) {
        memset(r, 0, sizeof *r);
        return MZ_E_CORRUPT;
    }
    return MZ_OK;
}

/* ---- 2. extent allocator ---------------------------------------------------------------- */

typedef struct extent {
    uint64_t off, len;         /* bytes, both multiples of SWAP_BLOCK */
} extent;

enum { SLOT_FREE = 0, SLOT_WRITING = 1, SLOT_VALID = 2 };

typedef struct slot_rec {
    uint64_t off;              /* extent offset */
    uint64_t ext;              /* extent bytes */
    uint64_t len;              /* payload bytes */
    uint64_t tag;
    uint64_t seq;              /* write sequence; 0 when free */
    uint64_t hash;             /* payload hash (valid once SLOT_VALID) */
    uint8_t state;             /* SLOT_* */
    uint8_t split;             /* layout */
} slot_rec;

struct mz_swap_aio;

struct mz_swapfile {
    int fd;
    bool direct;               /* O_DIRECT in effect */
    bool uring;                /* batch queue uses io_uring */
    bool unlinked;             /* name already removed */
    unsigned flags;            /* MZ_SWAP_* */
    int depth;                 /* queue depth for batches */
    size_t max_io;             /* payload bytes per request */
    char path[PATH_MAX + 64];  /* dir (< PATH_MAX) + our name */

    pthread_mutex_t lock;      /* guards everything below */
    extent *holes;             /* free extents below file_end, sorted, never adjacent */
    size_t n_holes, cap_holes;
    uint64_t file_end;         /* end of the managed area (= file size we set) */
    slot_rec *slots;
    uint32_t n_slots, cap_slots; /* slots[0..n_slots) ever used */
    uint32_t *free_ids;        /* stack of free slot indices */
    uint32_t n_free_ids;
    uint64_t next_seq;
    int last_errno;
    mz_swapfile_stats st;

    pthread_mutex_t batch_lock;
    struct mz_swap_aio *batch_q; /* created on first batch call */
};

static bool holes_reserve(mz_swapfile_t *sf, size_t n)
{
    if (n <= sf->cap_holes) return true;
    size_t cap = sf->cap_holes ? sf->cap_holes * 2 : 16;
    while (cap < n) cap *= 2;
    extent *h = realloc(sf->holes, cap * sizeof *h);
    if (!h) return false;
    sf->holes = h;
    sf->cap_holes = cap;
    return true;
}

static void holes_remove(mz_swapfile_t *sf, size_t i)
{
    memmove(&sf->holes[i], &sf->holes[i + 1], (sf->n_holes - i - 1) * sizeof *sf->holes);
    sf->n_holes--;
}

/* Gives back [off, off+len): inserted sorted, merged with its neighbours; a
 * large free tail (or an empty file) is trimmed with ftruncate. Caller holds lock. */
static void ext_free(mz_swapfile_t *sf, uint64_t off, uint64_t len)
{
    size_t i = 0;
    while (i < sf->n_holes && sf->holes[i].off < off) i++;
    bool merge_prev = i > 0 && sf->holes[i - 1].off + sf->holes[i - 1].len == off;
    bool merge_next = i < sf->n_holes && off + len == sf->holes[i].off;
    if (merge_prev && merge_next) {
        sf->holes[i - 1].len += len + sf->holes[i].len;
        holes_remove(sf, i);
    } else if (merge_prev) {
        sf->holes[i - 1].len += len;
    } else if (merge_next) {
        sf->holes[i].off = off;
        sf->holes[i].len += len;
    } else if (holes_reserve(sf, sf->n_holes + 1)) {
        memmove(&sf->holes[i + 1], &sf->holes[i], (sf->n_holes - i) * sizeof *sf->holes);
        sf->holes[i] = (extent){off, len};
        sf->n_holes++;
    } else {
        /* Out of memory for the free list: the space is leaked until close. */
        mz_log(MZ_LOG_WARN, "swap file: out of memory, %llu bytes not reusable",
               (unsigned long long)len);
        return;
    }
    extent *last = sf->n_holes ? &sf->holes[sf->n_holes - 1] : NULL;
    if (last && last->off + last->len == sf->file_end &&
        (last->len >= SWAP_SHRINK_MIN || last->off == 0)) {
        if (mz_io.ftruncate(sf->fd, (off_t)last->off) == 0) {
            sf->file_end = last->off;
            sf->n_holes--;
        }
    }
}

/* First-fit allocation of len bytes; grows the file (fallocate) when no hole
 * fits. Returns 0 or an errno. Caller holds lock. */
static int ext_alloc(mz_swapfile_t *sf, uint64_t len, uint64_t *off_out)
{
    for (size_t i = 0; i < sf->n_holes; i++) {
        extent *h = &sf->holes[i];
        if (h->len < len) continue;
        *off_out = h->off;
        h->off += len;
        h->len -= len;
        if (h->len == 0) holes_remove(sf, i);
        return 0;
    }
    /* Grow: reuse a free tail if there is one. */
    uint64_t off = sf->file_end;
    bool tail = sf->n_holes && sf->holes[sf->n_holes - 1].off + sf->holes[sf->n_holes - 1].len ==
                                   sf->file_end;
    if (tail) off = sf->holes[sf->n_holes - 1].off;
    uint64_t end = off + len;
    if (mz_io.fallocate(sf->fd, 0, (off_t)sf->file_end, (off_t)(end - sf->file_end)) != 0 &&
        errno != EOPNOTSUPP && errno != ENOSYS)
        return errno;
    if (tail) sf->n_holes--;
    sf->file_end = end;
    *off_out = off;
    return 0;
}

/* ---- 3. slot table ------------------------------------------------------------------------- */

static mz_swap_slot slot_handle(uint32_t idx, uint64_t seq)
{
    return ((seq & 0xffffffffu) << 32) | (uint64_t)(idx + 1);
}

/* The live record of handle h, or NULL. Caller holds lock. */
static slot_rec *slot_lookup(mz_swapfile_t *sf, mz_swap_slot h, uint32_t *idx_out)
{
    uint64_t lo = h & 0xffffffffu;
    if (lo == 0 || lo > sf->n_slots) return NULL;
    slot_rec *r = &sf->slots[lo - 1];
    if (r->state != SLOT_VALID || (r->seq & 0xffffffffu) != h >> 32) return NULL;
    if (idx_out) *idx_out = (uint32_t)(lo - 1);
    return r;
}

/* A free slot index, or UINT32_MAX on OOM. Caller holds lock. */
static uint32_t slot_new(mz_swapfile_t *sf)
{
    if (sf->n_free_ids) return sf->free_ids[--sf->n_free_ids];
    if (sf->n_slots == sf->cap_slots) {
        uint32_t cap = sf->cap_slots ? sf->cap_slots * 2 : 64;
        if (cap > UINT32_MAX / 2) return UINT32_MAX;
        slot_rec *s = realloc(sf->slots, cap * sizeof *s);
        if (!s) return UINT32_MAX;
        sf->slots = s;
        uint32_t *f = realloc(sf->free_ids, cap * sizeof *f);
        if (!f) return UINT32_MAX;
        sf->free_ids = f;
        sf->cap_slots = cap;
    }
    memset(&sf->slots[sf->n_slots], 0, sizeof *sf->slots);
    return sf->n_slots++;
}

/* Frees slot idx and its extent. Caller holds lock. */
static void slot_release(mz_swapfile_t *sf, uint32_t idx)
{
    slot_rec *r = &sf->slots[idx];
    if (r->state == SLOT_VALID) {
        sf->st.used_bytes -= r->ext;
        sf->st.payload_bytes -= r->len;
        sf->st.n_slots--;
    }
    ext_free(sf, r->off, r->ext);
    memset(r, 0, sizeof *r);
    sf->free_ids[sf->n_free_ids++] = idx;
}

bool mz_swapfile_slot_free(mz_swapfile_t *sf, mz_swap_slot slot)
{
    uint32_t idx;
    pthread_mutex_lock(&sf->lock);
    bool ok = slot_lookup(sf, slot, &idx) != NULL;
    if (ok) slot_release(sf, idx);
    pthread_mutex_unlock(&sf->lock);
    return ok;
}

size_t mz_swapfile_slot_len(mz_swapfile_t *sf, mz_swap_slot slot)
{
    pthread_mutex_lock(&sf->lock);
    slot_rec *r = slot_lookup(sf, slot, NULL);
    size_t len = r ? (size_t)r->len : 0;
    pthread_mutex_unlock(&sf->lock);
    return len;
}

uint64_t mz_swapfile_slot_offset(mz_swapfile_t *sf, mz_swap_slot slot)
{
    pthread_mutex_lock(&sf->lock);
    slot_rec *r = slot_lookup(sf, slot, NULL);
    uint64_t off = r ? r->off : UINT64_MAX;
    pthread_mutex_unlock(&sf->lock);
    return off;
}

void mz_swapfile_get_stats(mz_swapfile_t *sf, mz_swapfile_stats *out)
{
    pthread_mutex_lock(&sf->lock);
    *out = sf->st;
    out->file_bytes = sf->file_end;
    out->n_free_extents = sf->n_holes;
    pthread_mutex_unlock(&sf->lock);
}

bool mz_swapfile_is_direct(const mz_swapfile_t *sf) { return sf->direct; }
bool mz_swapfile_uses_uring(const mz_swapfile_t *sf) { return sf->uring; }
const char *mz_swapfile_path(const mz_swapfile_t *sf) { return sf->path; }
int mz_swapfile_last_errno(const mz_swapfile_t *sf) { return sf->last_errno; }

/* ---- persistent records (session store) ------------------------------------------------------ */

mz_status mz_swapfile_slot_info(mz_swapfile_t *sf, mz_swap_slot slot, mz_swap_slot_info *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&sf->lock);
    slot_rec *r = slot_lookup(sf, slot, NULL);
    if (r) *out = (mz_swap_slot_info){.off = r->off, .ext = r->ext, .len = r->len, .tag = r->tag,
                                      .seq = r->seq, .hash = r->hash, .split = r->split};
    pthread_mutex_unlock(&sf->lock);
    return r ? MZ_OK : mz_fail(MZ_E_INVAL, "swap slot 0x%llx is not live", (unsigned long long)slot);
}

/* Removes [off, off+len) from the free list; false if any of it is not free. */
static bool ext_carve(mz_swapfile_t *sf, uint64_t off, uint64_t len)
{
    for (size_t i = 0; i < sf->n_holes; i++) {
        extent *h = &sf->holes[i];
        if (off < h->off || off + len > h->off + h->len) continue;
        uint64_t a_len = off - h->off, b_off = off + len, b_len = h->off + h->len - b_off;
        if (a_len && b_len) {
            if (!holes_reserve(sf, sf->n_holes + 1)) return false;
            h = &sf->holes[i];
            memmove(&sf->holes[i + 2], &sf->holes[i + 1], (sf->n_holes - i - 1) * sizeof *h);
            sf->holes[i] = (extent){h->off, a_len};
            sf->holes[i + 1] = (extent){b_off, b_len};
            sf->n_holes++;
        } else if (a_len) {
            h->len = a_len;
        } else if (b_len) {
            *h = (extent){b_off, b_len};
        } else {
            holes_remove(sf, i);
        }
        return true;
    }
    return false;
}

mz_status mz_swapfile_slot_import(mz_swapfile_t *sf, const mz_swap_slot_info *in, mz_swap_slot *out)
{
    *out = 0;
    uint64_t need = in->split ? SWAP_BLOCK + in->len : MZ_SWAP_REC_HDR_BYTES + in->len;
    if (in->off % SWAP_BLOCK || in->ext % SWAP_BLOCK || in->ext == 0 || in->len > SWAP_MAX_LEN ||
        in->ext > SWAP_MAX_LEN || need > in->ext || in->seq == 0 || in->split > 1 ||
        in->off > SWAP_MAX_LEN)
        return mz_fail(MZ_E_INVAL, "malformed record extent (offset %llu, %llu bytes)",
                       (unsigned long long)in->off, (unsigned long long)in->ext);
    pthread_mutex_lock(&sf->lock);
    mz_status s = MZ_OK;
    uint32_t idx = slot_new(sf);
    if (idx == UINT32_MAX) {
        s = mz_fail(MZ_E_NOMEM, "out of memory (swap slot table)");
    } else if (!ext_carve(sf, in->off, in->ext)) {
        sf->free_ids[sf->n_free_ids++] = idx;
        s = mz_fail(MZ_E_INVAL, "record at offset %llu (%llu bytes) is beyond the end of %s or "
                    "overlaps another", (unsigned long long)in->off, (unsigned long long)in->ext,
                    sf->path);
    } else {
        sf->slots[idx] = (slot_rec){.off = in->off, .ext = in->ext, .len = in->len, .tag = in->tag,
                                    .seq = in->seq, .hash = in->hash, .state = SLOT_VALID,
                                    .split = (uint8_t)in->split};
        if (in->seq >= sf->next_seq) sf->next_seq = in->seq + 1;
        sf->st.used_bytes += in->ext;
        sf->st.payload_bytes += in->len;
        sf->st.n_slots++;
        *out = slot_handle(idx, in->seq);
    }
    pthread_mutex_unlock(&sf->lock);
    return s;
}

mz_status mz_swapfile_sync(mz_swapfile_t *sf)
{
    if (mz_io.fsync(sf->fd) != 0)
        return mz_fail(MZ_E_IO, "fsync %s: %s", sf->path, strerror(errno));
    return MZ_OK;
}

/* ---- 4. directory, open, close, cleanup --------------------------------------------------- */

mz_swapfile_params mz_swapfile_params_default(void)
{
    return (mz_swapfile_params){.dir = NULL, .queue_depth = 4, .max_io_bytes = 1u << 20, .flags = 0};
}

mz_status mz_swapfile_default_dir(char *buf, size_t cap)
{
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int n;
    if (xdg && xdg[0] == '/') n = snprintf(buf, cap, "%s/mzcache", xdg);
    else if (home && home[0] == '/') n = snprintf(buf, cap, "%s/.cache/mzcache", home);
    else n = snprintf(buf, cap, "/tmp/mzcache-%u", (unsigned)getuid());
    if (n < 0 || (size_t)n >= cap) return mz_fail(MZ_E_RANGE, "swap directory path too long");
    return MZ_OK;
}

static uint64_t random_u64(void)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        static uint64_t counter;
        r = (uint64_t)mz_time_us() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&r ^
            ++counter * 0x9e3779b97f4a7c15ULL;
    }
    return r;
}

/* Writes one aligned block at offset 0 to find out whether O_DIRECT writes
 * work; falls back to buffered I/O on EINVAL. */
static mz_status probe_direct(mz_swapfile_t *sf)
{
    void *blk = NULL;
    if (posix_memalign(&blk, SWAP_BLOCK, SWAP_BLOCK) != 0)
        return mz_fail(MZ_E_NOMEM, "out of memory (swap probe block)");
    memset(blk, 0, SWAP_BLOCK);
    mz_status s = MZ_OK;
    ssize_t w = mz_io.pwrite(sf->fd, blk, SWAP_BLOCK, 0);
    if (w < 0 && errno == EINVAL) {
        mz_log(MZ_LOG_WARN, "swap file %s: O_DIRECT write refused (%s); using buffered I/O + "
               "POSIX_FADV_DONTNEED", sf->path, strerror(errno));
        int fl = fcntl(sf->fd, F_GETFL);
        if (fl < 0 || fcntl(sf->fd, F_SETFL, fl & ~O_DIRECT) != 0)
            s = mz_fail(MZ_E_IO, "swap file %s: cannot clear O_DIRECT: %s", sf->path, strerror(errno));
        sf->direct = false;
    } else if (w != (ssize_t)SWAP_BLOCK) {
        sf->last_errno = w < 0 ? errno : EIO;
        s = mz_fail(MZ_E_IO, "swap file %s: first write failed: %s", sf->path,
                    w < 0 ? strerror(errno) : "short write");
    }
    if (s == MZ_OK && mz_io.ftruncate(sf->fd, 0) != 0)
        s = mz_fail(MZ_E_IO, "swap file %s: ftruncate: %s", sf->path, strerror(errno));
    free(blk);
    return s;
}

mz_status mz_swapfile_open(const mz_swapfile_params *p, mz_swapfile_t **out)
{
    *out = NULL;
    mz_swapfile_params d = mz_swapfile_params_default();
    if (!p) p = &d;
    char dir[PATH_MAX];
    mz_status s;
    if (p->dir && p->dir[0]) {
        if (strlen(p->dir) >= sizeof dir - 64)
            return mz_fail(MZ_E_RANGE, "swap directory path too long");
        snprintf(dir, sizeof dir, "%s", p->dir);
    } else if ((s = mz_swapfile_default_dir(dir, sizeof dir - 64)) != MZ_OK) {
        return s;
    }
    if ((s = mz_dir_make_private(dir)) != MZ_OK) return mz_fail_prefix(s, "swap directory");

    mz_swapfile_t *sf = mz_calloc(1, sizeof *sf);
    if (!sf) return MZ_E_NOMEM;
    sf->fd = -1;
    sf->flags = p->flags;
    sf->depth = p->queue_depth > 0 ? p->queue_depth : 4;
    size_t mio = p->max_io_bytes ? p->max_io_bytes : (1u << 20);
    sf->max_io = MZ_MAX((size_t)SWAP_BLOCK, mio - mio % SWAP_BLOCK);
    sf->next_seq = 1;
    pthread_mutex_init(&sf->lock, NULL);
    pthread_mutex_init(&sf->batch_lock, NULL);
    snprintf(sf->path, sizeof sf->path, "%s/" SWAP_NAME_PREFIX "%ld-%016llx" SWAP_NAME_SUFFIX, dir,
             (long)getpid(), (unsigned long long)random_u64());

    int base = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
    sf->direct = !(p->flags & MZ_SWAP_FORCE_BUFFERED);
    if (p->flags & MZ_SWAP_PERSIST) {
        /* Session store: a named file that outlives the process. */
        if (!p->path || strlen(p->path) >= sizeof sf->path) {
            s = mz_fail(MZ_E_INVAL, "persistent swap file: bad path");
            sf->unlinked = true;
            goto out_close;
        }
        snprintf(sf->path, sizeof sf->path, "%s", p->path);
        base = O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW;
        sf->direct = false;
        sf->unlinked = true; /* kept at close */
    }
    sf->fd = mz_io.open(sf->path, base | (sf->direct ? O_DIRECT : 0), 0600);
    if (sf->fd < 0 && sf->direct && errno == EINVAL) {
        /* Some filesystems create the file and then refuse O_DIRECT. */
        mz_log(MZ_LOG_WARN, "swap file %s: O_DIRECT open refused (%s); using buffered I/O + "
               "POSIX_FADV_DONTNEED", sf->path, strerror(errno));
        unlink(sf->path);
        sf->direct = false;
        sf->fd = mz_io.open(sf->path, base, 0600);
    }
    if (sf->fd < 0) {
        s = mz_fail(MZ_E_IO, "cannot create swap file %s: %s", sf->path, strerror(errno));
        sf->unlinked = true; /* nothing to remove */
        goto out_close;
    }
    /* A process killed with io_uring requests in flight releases its files
     * (and so the lock) only when the kernel has torn its rings down, a
     * moment after it is reaped: a persistent file waits up to 2 s for that. */
    for (int tries = 0; (p->flags & MZ_SWAP_PERSIST) && tries < 100; tries++) {
        if (flock(sf->fd, LOCK_EX | LOCK_NB) == 0) break;
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (flock(sf->fd, LOCK_EX | LOCK_NB) != 0) {
        if (p->flags & MZ_SWAP_PERSIST) {
            s = mz_fail(MZ_E_IO, "%s is in use by another process", sf->path);
            goto out_close;
        }
        mz_log(MZ_LOG_DEBUG, "swap file %s: flock: %s", sf->path, strerror(errno));
    }
    if (p->flags & MZ_SWAP_PERSIST) {
        /* The old contents are one free extent until records are imported. */
        struct stat fst;
        if (fstat(sf->fd, &fst) != 0 || !S_ISREG(fst.st_mode)) {
            s = mz_fail(MZ_E_IO, "%s is not a regular file", sf->path);
            goto out_close;
        }
        uint64_t end = (uint64_t)fst.st_size / SWAP_BLOCK * SWAP_BLOCK;
        sf->file_end = end;
        if (end && holes_reserve(sf, 1)) sf->holes[sf->n_holes++] = (extent){0, end};
    }
    if (sf->direct && (s = probe_direct(sf)) != MZ_OK) goto out_close;
    if (p->flags & MZ_SWAP_UNLINK_EARLY) {
        if (mz_io.unlink(sf->path) == 0) sf->unlinked = true;
    }
    {
        /* Find out now whether batches will run on io_uring. */
        mz_ioq *probe = NULL;
        s = mz_ioq_init(1, !(p->flags & MZ_SWAP_NO_URING), &probe);
        if (s != MZ_OK) goto out_close;
        sf->uring = mz_ioq_uses_uring(probe);
        mz_ioq_free(probe);
    }
    mz_log(MZ_LOG_DEBUG, "swap file %s (%s, %s, depth %d)", sf->path,
           sf->direct ? "O_DIRECT" : "buffered", sf->uring ? "io_uring" : "sync", sf->depth);
    *out = sf;
    return MZ_OK;

out_close:
    mz_swapfile_close(sf);
    return s;
}

void mz_swap_aio_free(mz_swap_aio_t *q);

void mz_swapfile_close(mz_swapfile_t *sf)
{
    if (!sf) return;
    mz_swap_aio_free(sf->batch_q);
    if (sf->fd >= 0) mz_io.close(sf->fd);
    if (!sf->unlinked && mz_io.unlink(sf->path) != 0 && errno != ENOENT)
        mz_log(MZ_LOG_WARN, "cannot remove swap file %s: %s", sf->path, strerror(errno));
    pthread_mutex_destroy(&sf->lock);
    pthread_mutex_destroy(&sf->batch_lock);
    free(sf->holes);
    free(sf->slots);
    free(sf->free_ids);
    free(sf);
}

/* The lock of a file whose process is dead and reaped can still be held for
 * a moment: the kernel drops the last reference to the open file (and with it
 * the flock) only when the process's in-flight io_uring reads have finished
 * and their deferred file release has run, which under load comes after the
 * parent's wait() returned. A supervisor that restarts the server at once
 * would then leave the file behind until the next start, so the lock is
 * retried for a short while; *wait_ns is what is left of the whole scan's
 * wait (STALE_LOCK_WAIT_NS), which keeps start-up bounded whatever the
 * directory holds. A lock still held after that belongs to a live holder
 * (another pid namespace, or a descriptor passed on) and the file stays. */
#ifndef STALE_LOCK_WAIT_NS
#define STALE_LOCK_WAIT_NS (2 * 1000 * 1000 * 1000LL)
#endif
#define STALE_LOCK_STEP_NS (10 * 1000 * 1000LL)

static bool lock_dead_owners_file(int fd, long long *wait_ns)
{
    for (;;) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
        if (errno != EWOULDBLOCK || *wait_ns <= 0) return false;
        struct timespec step = {0, STALE_LOCK_STEP_NS};
        nanosleep(&step, NULL);
        *wait_ns -= STALE_LOCK_STEP_NS;
    }
}

mz_status mz_swapfile_cleanup_stale(const char *dir_in, int *n_removed)
{
    char dir[PATH_MAX];
    int removed = 0;
    long long lock_wait_ns = STALE_LOCK_WAIT_NS;
    if (n_removed) *n_removed = 0;
    if (dir_in && dir_in[0]) snprintf(dir, sizeof dir, "%s", dir_in);
    else {
        mz_status s = mz_swapfile_default_dir(dir, sizeof dir);
        if (s != MZ_OK) return s;
    }
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return MZ_OK;
        return mz_fail(MZ_E_IO, "cannot open %s: %s", dir, strerror(errno));
    }
    struct dirent *e;
    const size_t plen = strlen(SWAP_NAME_PREFIX), slen = strlen(SWAP_NAME_SUFFIX);
    while ((e = readdir(d)) != NULL) {
        const char *name = e->d_name;
        size_t n = strlen(name);
        if (n <= plen + slen || strncmp(name, SWAP_NAME_PREFIX, plen) != 0 ||
            strcmp(name + n - slen, SWAP_NAME_SUFFIX) != 0)
            continue;
        char *endp;
        long pid = strtol(name + plen, &endp, 10);
        if (pid <= 0 || *endp != '-' || pid > INT_MAX || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive (or not ours to ask) */
        int fd = openat(dirfd(d), name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0) continue;
        struct stat st;
        bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == getuid() &&
                  lock_dead_owners_file(fd, &lock_wait_ns);
        if (ok) {
            char path[PATH_MAX + 256];
            snprintf(path, sizeof path, "%s/%s", dir, name);
            if (mz_io.unlink(path) == 0) {
                removed++;
                mz_log(MZ_LOG_INFO, "removed stale swap file %s", path);
            }
        }
        close(fd);
    }
    closedir(d);
    if (n_removed) *n_removed = removed;
    return MZ_OK;
}

/* ---- 5. operations ---------------------------------------------------------------------------- */

typedef struct swap_op {
    mz_swap_item *item;
    bool is_write;
    bool zero_copy;            /* payload moves straight to/from item->buf */
    uint32_t idx;              /* slot index (UINT32_MAX: none) */
    slot_rec rec;              /* reads: snapshot of the slot at submit time */
    uint64_t hash;             /* writes: payload hash */
    unsigned char *bounce;     /* aligned: header block (zero-copy) or whole record */
    int n_pieces, n_left;
    int err;                   /* first piece error */
    uint64_t err_off;          /* its file offset */
    struct swap_op *next;      /* finished list */
    char msg[320];             /* error message of a failed item */
    mz_io_piece pieces[];      /* n_pieces */
} swap_op;

struct mz_swap_aio {
    mz_swapfile_t *sf;
    mz_ioq *ioq;
    swap_op *d_head, *d_tail;  /* finished, not yet reaped */
    size_t n_ops;              /* submitted, not yet reaped */
};

static bool is_aligned(const void *p) { return ((uintptr_t)p % SWAP_BLOCK) == 0; }
static uint64_t round_up(uint64_t n) { return (n + SWAP_BLOCK - 1) / SWAP_BLOCK * SWAP_BLOCK; }

static swap_op *op_new(mz_swap_aio_t *q, mz_swap_item *item, bool is_write, uint64_t ext)
{
    int n = (int)(ext / q->sf->max_io) + 2;
    swap_op *op = calloc(1, sizeof *op + (size_t)n * sizeof(mz_io_piece));
    if (!op) return NULL;
    op->item = item;
    op->is_write = is_write;
    op->idx = UINT32_MAX;
    return op;
}

/* Splits the record (segments laid out back to back from off) into pieces of
 * at most max_io bytes, the first one max_io + header block, and queues them. */
static void op_queue(mz_swap_aio_t *q, swap_op *op, const struct iovec *seg, int nseg, uint64_t off,
                     size_t first_extra)
{
    mz_swapfile_t *sf = q->sf;
    size_t limit = sf->max_io + first_extra, in_p = 0;
    uint64_t pos = off;
    mz_io_piece *p = NULL;
    for (int s = 0; s < nseg; s++) {
        char *b = seg[s].iov_base;
        size_t left = seg[s].iov_len;
        while (left) {
            if (!p || in_p == limit) {
                if (p) limit = sf->max_io;
                p = &op->pieces[op->n_pieces++];
                memset(p, 0, sizeof *p);
                p->fd = sf->fd;
                p->is_write = op->is_write;
                p->direct = sf->direct;
                p->off = pos;
                p->owner = op;
                in_p = 0;
            }
            size_t take = MZ_MIN(left, limit - in_p);
            p->iov[p->niov].iov_base = b;
            p->iov[p->niov].iov_len = take;
            p->niov++;
            p->need += take;
            in_p += take;
            b += take;
            left -= take;
            pos += take;
        }
    }
    op->n_left = op->n_pieces;
    for (int i = 0; i < op->n_pieces; i++) mz_ioq_push(q->ioq, &op->pieces[i]);
}

static void done_push(mz_swap_aio_t *q, swap_op *op)
{
    op->next = NULL;
    if (q->d_tail) q->d_tail->next = op;
    else q->d_head = op;
    q->d_tail = op;
}

/* Sets the item's status and keeps the message for the reaper. */
static mz_status op_fail(swap_op *op, mz_status s, const char *fmt, ...) MZ_PRINTF(3, 4);
static mz_status op_fail(swap_op *op, mz_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(op->msg, sizeof op->msg, fmt, ap);
    va_end(ap);
    op->item->status = s;
    return mz_fail(s, "%s", op->msg);
}

/* Queues an early failure (already recorded with op_fail): reaped without I/O. */
static mz_status op_reject(mz_swap_aio_t *q, swap_op *op, mz_status s)
{
    done_push(q, op);
    return s;
}

mz_status mz_swap_aio_submit_write(mz_swap_aio_t *q, mz_swap_item *item)
{
    mz_swapfile_t *sf = q->sf;
    item->slot = 0;
    item->status = MZ_OK;
    bool split = item->len > 0 && item->buf && is_aligned(item->buf) && item->len % SWAP_BLOCK == 0;
    uint64_t ext = split ? SWAP_BLOCK + item->len : round_up(MZ_SWAP_REC_HDR_BYTES + (uint64_t)item->len);
    swap_op *op = op_new(q, item, true, ext);
    if (!op) {
        item->status = mz_fail(MZ_E_NOMEM, "out of memory (swap write)");
        return item->status;  /* nothing queued: not reaped */
    }
    q->n_ops++;
    if ((!item->buf && item->len) || item->len > SWAP_MAX_LEN)
        return op_reject(q, op, op_fail(op, MZ_E_INVAL, "swap write: bad buffer/length (%zu)", item->len));
    op->zero_copy = split;
    if (posix_memalign((void **)&op->bounce, SWAP_BLOCK, split ? SWAP_BLOCK : ext) != 0) {
        op->bounce = NULL;
        return op_reject(q, op, op_fail(op, MZ_E_NOMEM, "out of memory (swap bounce buffer)"));
    }

    pthread_mutex_lock(&sf->lock);
    uint64_t off = 0;
    uint32_t idx = slot_new(sf);
    int e = idx == UINT32_MAX ? ENOMEM : ext_alloc(sf, ext, &off);
    if (e) {
        if (idx != UINT32_MAX) sf->free_ids[sf->n_free_ids++] = idx;
        sf->last_errno = e;
        pthread_mutex_unlock(&sf->lock);
        return op_reject(q, op, op_fail(op, MZ_E_IO, "swap file %s: cannot grow by %llu bytes: %s",
                                        sf->path, (unsigned long long)ext, strerror(e)));
    }
    slot_rec *r = &sf->slots[idx];
    *r = (slot_rec){.off = off, .ext = ext, .len = item->len, .tag = item->tag,
                    .seq = sf->next_seq++, .state = SLOT_WRITING, .split = split};
    op->rec = *r;
    op->idx = idx;
    pthread_mutex_unlock(&sf->lock);

    op->hash = mz_hash64(item->buf ? item->buf : "", item->len, op->rec.seq);
    mz_swap_rec hdr = {.flags = split ? MZ_SWAP_REC_SPLIT : 0, .len = item->len, .tag = item->tag,
                       .seq = op->rec.seq, .payload_hash = op->hash};
    if (split) {
        memset(op->bounce, 0, SWAP_BLOCK);
        mz_swap_rec_encode(&hdr, op->bounce);
        struct iovec seg[2] = {{op->bounce, SWAP_BLOCK}, {item->buf, item->len}};
        op_queue(q, op, seg, 2, off, SWAP_BLOCK);
    } else {
        mz_swap_rec_encode(&hdr, op->bounce);
        if (item->len) memcpy(op->bounce + MZ_SWAP_REC_HDR_BYTES, item->buf, item->len);
        memset(op->bounce + MZ_SWAP_REC_HDR_BYTES + item->len, 0,
               ext - MZ_SWAP_REC_HDR_BYTES - item->len);
        struct iovec seg[1] = {{op->bounce, ext}};
        op_queue(q, op, seg, 1, off, 0);
    }
    return MZ_OK;
}

mz_status mz_swap_aio_submit_read(mz_swap_aio_t *q, mz_swap_item *item)
{
    mz_swapfile_t *sf = q->sf;
    item->status = MZ_OK;
    pthread_mutex_lock(&sf->lock);
    uint32_t idx = 0;
    slot_rec *r = slot_lookup(sf, item->slot, &idx);
    slot_rec rec = r ? *r : (slot_rec){0};
    pthread_mutex_unlock(&sf->lock);
    swap_op *op = op_new(q, item, false, r ? rec.ext : 0);
    if (!op) {
        item->status = mz_fail(MZ_E_NOMEM, "out of memory (swap read)");
        return item->status;
    }
    q->n_ops++;
    if (!r)
        return op_reject(q, op, op_fail(op, MZ_E_INVAL, "swap slot 0x%llx is not valid (never written, "
                                        "freed, or its write failed)", (unsigned long long)item->slot));
    op->idx = idx;
    op->rec = rec;
    if (item->len < rec.len || (!item->buf && rec.len)) {
        size_t cap = item->len;
        item->len = (size_t)rec.len;
        return op_reject(q, op, op_fail(op, MZ_E_RANGE, "swap slot %u (tag 0x%llx): buffer of %zu bytes "
                                        "for a %llu-byte record", idx, (unsigned long long)rec.tag,
                                        cap, (unsigned long long)rec.len));
    }
    op->zero_copy = rec.split && is_aligned(item->buf);
    if (posix_memalign((void **)&op->bounce, SWAP_BLOCK, op->zero_copy ? SWAP_BLOCK : rec.ext) != 0) {
        op->bounce = NULL;
        return op_reject(q, op, op_fail(op, MZ_E_NOMEM, "out of memory (swap bounce buffer)"));
    }
    if (op->zero_copy) {
        struct iovec seg[2] = {{op->bounce, SWAP_BLOCK}, {item->buf, rec.len}};
        op_queue(q, op, seg, 2, rec.off, SWAP_BLOCK);
    } else {
        struct iovec seg[1] = {{op->bounce, rec.ext}};
        op_queue(q, op, seg, 1, rec.off, rec.split ? SWAP_BLOCK : 0);
    }
    return MZ_OK;
}

/* Drops the written/read range from the page cache (buffered fallback only). */
static void drop_cache(mz_swapfile_t *sf, uint64_t off, uint64_t len, bool written)
{
    if (sf->direct) return;
    if (written)
        sync_file_range(sf->fd, (off_t)off, (off_t)len,
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    posix_fadvise(sf->fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
}

static void op_finish_write(mz_swapfile_t *sf, swap_op *op)
{
    mz_swap_item *it = op->item;
    pthread_mutex_lock(&sf->lock);
    slot_rec *r = &sf->slots[op->idx];
    if (op->err) {
        sf->last_errno = op->err > 0 ? op->err : EIO;
        slot_release(sf, op->idx);
        pthread_mutex_unlock(&sf->lock);
        mz_io_piece tmp = {.err = op->err};
        op_fail(op, MZ_E_IO, "swap write (tag 0x%llx, %zu bytes) failed at offset %llu of %s: %s",
                             (unsigned long long)it->tag, it->len, (unsigned long long)op->err_off,
                             sf->path, mz_io_piece_strerror(&tmp));
        return;
    }
    r->hash = op->hash;
    r->state = SLOT_VALID;
    sf->st.used_bytes += r->ext;
    sf->st.payload_bytes += r->len;
    sf->st.n_slots++;
    sf->st.bytes_written += r->len;
    it->slot = slot_handle(op->idx, r->seq);
    pthread_mutex_unlock(&sf->lock);
    drop_cache(sf, op->rec.off, op->rec.ext, true);
}

static void op_finish_read(mz_swapfile_t *sf, swap_op *op)
{
    mz_swap_item *it = op->item;
    const slot_rec *rec = &op->rec;
    drop_cache(sf, rec->off, rec->ext, false);
    if (op->err) {
        mz_io_piece tmp = {.err = op->err};
        pthread_mutex_lock(&sf->lock);
        sf->last_errno = op->err > 0 ? op->err : EIO;
        pthread_mutex_unlock(&sf->lock);
        op_fail(op, MZ_E_IO, "swap slot %u (tag 0x%llx): read at offset %llu of %s failed: %s",
                             op->idx, (unsigned long long)rec->tag, (unsigned long long)op->err_off,
                             sf->path, mz_io_piece_strerror(&tmp));
        goto out_scrub;
    }
    mz_swap_rec h;
    const char *why = NULL;
    const unsigned char *payload = op->zero_copy ? it->buf
                                   : op->bounce + (rec->split ? SWAP_BLOCK : MZ_SWAP_REC_HDR_BYTES);
    if (mz_swap_rec_decode(op->bounce, MZ_SWAP_REC_HDR_BYTES, &h, &why) != MZ_OK) {
        /* why is set */
    } else if (h.seq != rec->seq || h.len != rec->len || h.tag != rec->tag ||
               (h.flags & MZ_SWAP_REC_SPLIT) != (rec->split ? MZ_SWAP_REC_SPLIT : 0u)) {
        why = "record header does not match the slot (stale or misplaced data)";
    } else if (h.payload_hash != rec->hash ||
               mz_hash64(payload, (size_t)rec->len, rec->seq) != rec->hash) {
        why = "payload checksum mismatch";
    } else {
        why = NULL;
    }
    if (why) {
        pthread_mutex_lock(&sf->lock);
        sf->st.n_corrupt++;
        pthread_mutex_unlock(&sf->lock);
        op_fail(op, MZ_E_CORRUPT, "swap slot %u (tag 0x%llx, offset %llu of %s): %s",
                             op->idx, (unsigned long long)rec->tag, (unsigned long long)rec->off,
                             sf->path, why);
        goto out_scrub;
    }
    if (!op->zero_copy && rec->len) memcpy(it->buf, payload, (size_t)rec->len);
    it->len = (size_t)rec->len;
    it->tag = rec->tag;
    pthread_mutex_lock(&sf->lock);
    sf->st.bytes_read += rec->len;
    pthread_mutex_unlock(&sf->lock);
    return;

out_scrub:
    /* Never leave unverified bytes in the caller's buffer. */
    if (it->buf && rec->len) memset(it->buf, 0, (size_t)rec->len);
}

/* ---- 6. async queue and batches ---------------------------------------------------------------- */

mz_status mz_swap_aio_init(mz_swapfile_t *sf, int queue_depth, mz_swap_aio_t **out)
{
    *out = NULL;
    mz_swap_aio_t *q = mz_calloc(1, sizeof *q);
    if (!q) return MZ_E_NOMEM;
    q->sf = sf;
    mz_status s = mz_ioq_init(queue_depth > 0 ? queue_depth : sf->depth,
                              !(sf->flags & MZ_SWAP_NO_URING), &q->ioq);
    if (s != MZ_OK) {
        free(q);
        return s;
    }
    *out = q;
    return MZ_OK;
}

static void op_free(swap_op *op)
{
    free(op->bounce);
    free(op);
}

mz_swap_item *mz_swap_aio_reap(mz_swap_aio_t *q, bool wait)
{
    for (;;) {
        swap_op *op = q->d_head;
        if (op) {
            q->d_head = op->next;
            if (!q->d_head) q->d_tail = NULL;
            q->n_ops--;
            mz_swap_item *it = op->item;
            if (it->status != MZ_OK) mz_fail(it->status, "%s", op->msg);
            op_free(op);
            return it;
        }
        mz_io_piece *p = mz_ioq_next(q->ioq, wait);
        if (!p) return NULL;
        op = p->owner;
        if (p->err && !op->err) {
            op->err = p->err;
            op->err_off = p->off + p->done;
        }
        if (--op->n_left > 0) continue;
        if (op->is_write) op_finish_write(q->sf, op);
        else op_finish_read(q->sf, op);
        done_push(q, op);
    }
}

size_t mz_swap_aio_pending(const mz_swap_aio_t *q) { return q->n_ops; }

void mz_swap_aio_free(mz_swap_aio_t *q)
{
    if (!q) return;
    /* Drain: writes in flight must release or publish their slots. */
    while (mz_swap_aio_reap(q, true)) {
    }
    mz_ioq_free(q->ioq);
    free(q);
}

static mz_status run_batch(mz_swapfile_t *sf, mz_swap_item *items, size_t n, bool is_write)
{
    char msg[512] = "";
    size_t first_bad = SIZE_MAX;
    mz_status first_status = MZ_OK;
    pthread_mutex_lock(&sf->batch_lock);
    if (!sf->batch_q) {
        mz_status s = mz_swap_aio_init(sf, sf->depth, &sf->batch_q);
        if (s != MZ_OK) {
            for (size_t i = 0; i < n; i++) items[i].status = s;
            pthread_mutex_unlock(&sf->batch_lock);
            return s;
        }
    }
    mz_swap_aio_t *q = sf->batch_q;
    /* Keep a bounded number of records (and bounce buffers) in flight. */
    size_t max_ops = (size_t)MZ_MAX(2 * sf->depth, 8), next = 0, finished = 0;
    while (finished < n) {
        while (next < n && mz_swap_aio_pending(q) < max_ops) {
            mz_swap_item *it = &items[next++];
            size_t before = mz_swap_aio_pending(q);
            mz_status s = is_write ? mz_swap_aio_submit_write(q, it) : mz_swap_aio_submit_read(q, it);
            if (mz_swap_aio_pending(q) == before) { /* not even queued (out of memory) */
                finished++;
                if (next - 1 < first_bad) {
                    first_bad = next - 1;
                    first_status = s;
                    snprintf(msg, sizeof msg, "%s", mz_last_error());
                }
            }
        }
        if (finished >= n) break;
        mz_swap_item *it = mz_swap_aio_reap(q, true);
        MZ_ASSERT(it != NULL);
        finished++;
        size_t i = (size_t)(it - items);
        if (it->status != MZ_OK && i < first_bad) {
            first_bad = i;
            first_status = it->status;
            snprintf(msg, sizeof msg, "%s", mz_last_error());
        }
    }
    pthread_mutex_unlock(&sf->batch_lock);
    if (first_status != MZ_OK) mz_fail(first_status, "%s", msg);
    return first_status;
}

mz_status mz_swapfile_write_batch(mz_swapfile_t *sf, mz_swap_item *items, size_t n)
{
    return run_batch(sf, items, n, true);
}

mz_status mz_swapfile_read_batch(mz_swapfile_t *sf, mz_swap_item *items, size_t n)
{
    return run_batch(sf, items, n, false);
}

mz_status mz_swapfile_write(mz_swapfile_t *sf, const void *buf, size_t len, uint64_t tag,
                            mz_swap_slot *out)
{
    /* The item's buf is not const because reads share the struct; writes never modify it. */
    mz_swap_item it = {.buf = (void *)(uintptr_t)buf, .len = len, .tag = tag};
    mz_status s = run_batch(sf, &it, 1, true);
    *out = it.slot;
    return s;
}

mz_status mz_swapfile_read(mz_swapfile_t *sf, mz_swap_slot slot, void *buf, size_t cap,
                           size_t *len_out)
{
    mz_swap_item it = {.buf = buf, .len = cap, .slot = slot};
    mz_status s = run_batch(sf, &it, 1, false);
    if (len_out) *len_out = it.len;
    return s;
}
