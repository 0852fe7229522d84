/*
 * swapfile.h — one per engine: a private file that holds evicted KV chunks and
 * encoded chunks, read back with checksums verified.
 *
 * File: <dir>/mzswap-<pid>-<16 hex random>.swp, created O_EXCL with mode 0600
 * in a directory created with mode 0700 (default dir: $XDG_CACHE_HOME/mzcache,
 * else $HOME/.cache/mzcache). The file is locked (flock) while open and
 * unlinked by mz_swapfile_close. After a crash the file stays behind; its data
 * is useless to anyone (records are only valid for the slot table of the
 * process that wrote them), so mz_swapfile_cleanup_stale(dir) removes files
 * whose pid is dead and whose lock nobody holds. MZ_SWAP_UNLINK_EARLY unlinks
 * the name right after creation, so a crash leaves nothing at all.
 *
 * I/O: O_DIRECT (bypasses the page cache). If the filesystem refuses O_DIRECT
 * (EINVAL at open or at the first aligned write), the file is used with
 * buffered I/O and each write is followed by writeback + POSIX_FADV_DONTNEED;
 * a warning is logged and mz_swapfile_is_direct() returns false. Requests go
 * through io_uring with up to queue_depth in flight, each at most max_io_bytes
 * of payload (plus one 4 KiB header block).
 *
 * Records: a slot is a 4 KiB-aligned extent found first-fit in a free list
 * (freed extents coalesce with their neighbours; the file grows at the end and
 * shrinks when a large free tail builds up). Each record starts with a 64-byte
 * header (magic, version, layout, payload length, caller tag, write sequence,
 * XXH64 of the payload, XXH64 of the header). Two layouts:
 *   SPLIT   buf page-aligned and len a 4 KiB multiple: the header gets its own
 *           4 KiB block and the payload moves straight between the caller's
 *           buffer and the disk (no copy);
 *   INLINE  otherwise: header then payload in one aligned bounce buffer,
 *           rounded up to 4 KiB (small encoded chunks take a single block).
 * Every read checks the header against the slot table and the payload against
 * its checksum; on any mismatch the read fails with MZ_E_CORRUPT naming the
 * slot and tag, and the caller's buffer is zeroed, never left with bad data.
 *
 * Threads: slot allocation/free and the slot table are protected by an
 * internal mutex, so any thread may call these functions; the batch calls
 * share one internal queue (serialized). For overlapped I/O on a worker
 * thread, give it its own mz_swap_aio_t. Reading or freeing a slot while a
 * write of it is in flight, or freeing it during a read, is a caller error.
 */
#ifndef MZ_SWAPFILE_H
#define MZ_SWAPFILE_H

#include "../core/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mz_swapfile mz_swapfile_t;

/* A stored record. 0 = none. Low 32 bits: slot index + 1; high 32 bits: the
 * write's sequence number, so a stale handle (freed, slot reused) is refused. */
typedef uint64_t mz_swap_slot;

enum {
    MZ_SWAP_FORCE_BUFFERED = 1u << 0, /* don't try O_DIRECT (tests, or a known-bad fs) */
    MZ_SWAP_NO_URING = 1u << 1,       /* pread/pwrite one at a time */
    MZ_SWAP_UNLINK_EARLY = 1u << 2,   /* unlink the name right after creation */
    /* Session store (src/store): params.path names the file, which is opened
     * or created (never O_EXCL, never truncated) and kept at close. Its old
     * contents are free space except the records mz_swapfile_slot_import
     * takes back. Implies buffered I/O (no O_DIRECT probe at offset 0). */
    MZ_SWAP_PERSIST = 1u << 3,
};

typedef struct mz_swapfile_params {
    const char *dir;           /* NULL/"": default dir (see top); created with mode 0700 */
    int queue_depth;           /* requests in flight; <= 0: 4 */
    size_t max_io_bytes;       /* payload bytes per request; 0: 1 MiB (rounded to 4 KiB) */
    unsigned flags;            /* MZ_SWAP_* */
    const char *path;          /* MZ_SWAP_PERSIST: the file (its directory must exist) */
} mz_swapfile_params;

MZ_INTERNAL mz_swapfile_params mz_swapfile_params_default(void);

/* Creates the swap file. On error *out is NULL and nothing is left on disk. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_swapfile_open(const mz_swapfile_params *p,
                                                    mz_swapfile_t **out);
/* Closes and unlinks the file (all slots become invalid). Free every
 * mz_swap_aio_t of sf first. NULL is fine. */
MZ_INTERNAL void mz_swapfile_close(mz_swapfile_t *sf);

/* One request of a batch. */
typedef struct mz_swap_item {
    void *buf;                 /* write: the payload; read: destination. Page-aligned with a
                                * 4 KiB-multiple len gives zero-copy I/O, anything else works
                                * through a bounce buffer. */
    size_t len;                /* write: payload bytes; read: in: capacity of buf (>= the stored
                                * length), out: the stored length */
    uint64_t tag;              /* write: stored with the record; read: out: the stored tag */
    mz_swap_slot slot;         /* write: out (0 on failure); read: in */
    mz_status status;          /* out: this item's result */
} mz_swap_item;

/* Writes each item to a new slot (items[i].slot). Returns MZ_OK if every item
 * succeeded, else the first failing item's status (each item has its own).
 * A failed item (MZ_E_IO with the errno text, e.g. ENOSPC/EIO) holds no slot;
 * other items and existing slots are unaffected. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_swapfile_write_batch(mz_swapfile_t *sf, mz_swap_item *items,
                                                           size_t n);
/* Reads each item's slot into buf after verifying it. Errors per item:
 * MZ_E_INVAL (bad/stale slot), MZ_E_RANGE (buf too small; len = size needed),
 * MZ_E_IO (read failed, file truncated), MZ_E_CORRUPT (checksum/header
 * mismatch). A failed item's buf is zeroed (up to the stored length). The
 * slot stays allocated either way. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_swapfile_read_batch(mz_swapfile_t *sf, mz_swap_item *items,
                                                          size_t n);

/* Single-item forms. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_swapfile_write(mz_swapfile_t *sf, const void *buf, size_t len,
                                                     uint64_t tag, mz_swap_slot *out);
MZ_INTERNAL MZ_NODISCARD mz_status mz_swapfile_read(mz_swapfile_t *sf, mz_swap_slot slot, void *buf,
                                                    size_t cap, size_t *len_out);
/* Releases a slot's space for reuse. 0 or a stale slot is ignored (returns false). */
MZ_INTERNAL bool mz_swapfile_slot_free(mz_swapfile_t *sf, mz_swap_slot slot);
/* Stored payload length, or 0 for an invalid slot. */
MZ_INTERNAL size_t mz_swapfile_slot_len(mz_swapfile_t *sf, mz_swap_slot slot);
/* File offset of the record (for tests and diagnostics); UINT64_MAX if invalid. */
MZ_INTERNAL uint64_t mz_swapfile_slot_offset(mz_swapfile_t *sf, mz_swap_slot slot);

MZ_INTERNAL bool mz_swapfile_is_direct(const mz_swapfile_t *sf); /* false: buffered fallback */
MZ_INTERNAL bool mz_swapfile_uses_uring(const mz_swapfile_t *sf);
/* Path of the file (borrowed for sf's lifetime; still returned after UNLINK_EARLY). */
MZ_INTERNAL const char *mz_swapfile_path(const mz_swapfile_t *sf);
/* The raw errno of the last failed system call on this file (0 if none). */
MZ_INTERNAL int mz_swapfile_last_errno(const mz_swapfile_t *sf);

typedef struct mz_swapfile_stats {
    uint64_t file_bytes;       /* current file size as managed (end of the last extent) */
    uint64_t used_bytes;       /* bytes in live extents (headers and padding included) */
    uint64_t payload_bytes;    /* payload bytes of live records */
    uint64_t n_slots;          /* live records */
    uint64_t n_free_extents;   /* holes in the free list */
    uint64_t bytes_written, bytes_read; /* payload bytes moved since open */
    uint64_t n_corrupt;        /* reads refused by verification */
} mz_swapfile_stats;
MZ_INTERNAL void mz_swapfile_get_stats(mz_swapfile_t *sf, mz_swapfile_stats *out);

/* Default directory into buf (not created). MZ_E_RANGE if cap is too small. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_swapfile_default_dir(char *buf, size_t cap);
/* Removes mzswap-* files in dir (NULL: default) left by dead processes: the
 * pid in the name no longer exists and nobody holds the file's lock (a busy
 * lock is retried for up to 2 s in all: a killed process's lock can outlive
 * it briefly). Never touches this process's files or other names.
 * *n_removed may be NULL. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_swapfile_cleanup_stale(const char *dir, int *n_removed);

/* ---- persistent records (session store, src/store) ---------------------------------------
 * A record's place and identity, as a manifest keeps it. Importing one into
 * a freshly opened MZ_SWAP_PERSIST file makes it a live slot again without
 * any I/O; every later read verifies it against these values (header,
 * sequence, tag, payload checksum) as for any slot, so a record that was
 * overwritten or damaged since is refused (MZ_E_CORRUPT), never returned. */
typedef struct mz_swap_slot_info {
    uint64_t off, ext;         /* extent (4 KiB multiples) */
    uint64_t len, tag, seq, hash;
    uint32_t split;            /* layout: 1 = payload at +4096 */
} mz_swap_slot_info;
MZ_INTERNAL MZ_NODISCARD mz_status mz_swapfile_slot_info(mz_swapfile_t *sf, mz_swap_slot slot,
                                                         mz_swap_slot_info *out);
/* MZ_E_INVAL when the extent is malformed or overlaps a live one. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_swapfile_slot_import(mz_swapfile_t *sf,
                                                           const mz_swap_slot_info *in,
                                                           mz_swap_slot *out);
/* fsync of the file (through mz_io). */
MZ_INTERNAL MZ_NODISCARD mz_status mz_swapfile_sync(mz_swapfile_t *sf);

/* ---- asynchronous form (for a restore worker) ----------------------------------------
 * A queue belongs to one thread. Submit items (they must stay valid, buffers
 * included, until reaped); mz_swap_aio_reap returns finished items one at a
 * time, with the same per-item results as the batch calls. Freeing the queue
 * waits for requests in flight (their items are not reported). */
typedef struct mz_swap_aio mz_swap_aio_t;

MZ_INTERNAL MZ_NODISCARD mz_status mz_swap_aio_init(mz_swapfile_t *sf, int queue_depth,
                                                    mz_swap_aio_t **out);
MZ_INTERNAL void mz_swap_aio_free(mz_swap_aio_t *q);
/* Start a read/write of *item. Returns MZ_OK, or an error for items rejected
 * up front (also stored in item->status; such an item is still reaped). */
MZ_INTERNAL mz_status mz_swap_aio_submit_read(mz_swap_aio_t *q, mz_swap_item *item);
MZ_INTERNAL mz_status mz_swap_aio_submit_write(mz_swap_aio_t *q, mz_swap_item *item);
/* Returns the next finished item, or NULL: wait = false and none is finished
 * yet, or nothing is pending at all. */
MZ_INTERNAL mz_swap_item *mz_swap_aio_reap(mz_swap_aio_t *q, bool wait);
MZ_INTERNAL size_t mz_swap_aio_pending(const mz_swap_aio_t *q);

/* ---- record header (separate so it can be fuzzed) ------------------------------------- */

#define MZ_SWAP_REC_MAGIC 0x57535a4du  /* "MZSW" */
#define MZ_SWAP_REC_VERSION 1u
#define MZ_SWAP_REC_HDR_BYTES 64u
#define MZ_SWAP_REC_SPLIT 1u           /* layout flag: payload starts at +4096 */

typedef struct mz_swap_rec {
    uint32_t flags;            /* MZ_SWAP_REC_SPLIT or 0 (inline: payload at +64) */
    uint64_t len;              /* payload bytes */
    uint64_t tag;
    uint64_t seq;
    uint64_t payload_hash;     /* mz_hash64(payload, len, seq) */
} mz_swap_rec;

/* Serializes r into 64 bytes (little endian, header hash included). */
MZ_INTERNAL void mz_swap_rec_encode(const mz_swap_rec *r, unsigned char out[MZ_SWAP_REC_HDR_BYTES]);
/* Parses and checks magic, version, known flags and the header hash. Returns
 * MZ_OK, or MZ_E_CORRUPT with *why set to a static reason. n < 64 is corrupt. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_swap_rec_decode(const void *buf, size_t n, mz_swap_rec *r,
                                                      const char **why);

#endif /* MZ_SWAPFILE_H */
