/*
 * compstack.h — the in-memory compressed stack (paper §4.4).
 *
 * A LIFO of encoded KV chunks. Backward-out eviction pushes chunks in tail
 * order; forward-in restore pops them in head order; CompKV moves the chunk
 * needed last — the bottom — to storage with take_bottom / drop_bottom.
 *
 * Memory: a chain of segments, each its own page-aligned anonymous mapping
 * (mz_pages_alloc) of segment_bytes (default 1 MiB), or larger when one item
 * needs more. An item never spans segments. A segment is mapped when a push
 * does not fit the top segment and unmapped as soon as pops (top) or bottom
 * removals leave it empty, so resident memory really falls as the stack
 * shrinks. Payloads are 16-byte aligned.
 *
 * Items carry a caller tag (uint64, e.g. layer << 32 | chunk index); the stack
 * does not interpret it.
 *
 * Thread contract: one owner thread. Every call on a stack, including the
 * read-only ones, must come from that thread or be serialized by the caller
 * (the memory manager holds its table lock). Views returned by the peek
 * functions are borrowed until the next mutating call on the same stack.
 */
#ifndef MZ_COMPSTACK_H
#define MZ_COMPSTACK_H

#include "../core/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MZ_COMPSTACK_SEGMENT_DEFAULT ((size_t)1 << 20)

typedef struct mz_compstack mz_compstack_t;

typedef struct mz_compstack_stats {
    size_t n_items;        /* items held */
    size_t bytes_items;    /* sum of item lengths (payload bytes, as pushed) */
    size_t bytes_mapped;   /* sum of live segment mapping sizes */
    size_t n_segments;     /* live segments */
    size_t peak_mapped;    /* high-water mark of bytes_mapped */
    uint64_t n_seg_alloc;  /* segments mapped over the stack's life */
    uint64_t n_seg_free;   /* segments unmapped over the stack's life */
} mz_compstack_stats;

/* segment_bytes: 0 for the default; rounded up to the page size. */
MZ_INTERNAL mz_status mz_compstack_init(size_t segment_bytes, mz_compstack_t **out);
/* Unmaps every segment. NULL is fine. */
MZ_INTERNAL void mz_compstack_free(mz_compstack_t *s);

/* Copies len bytes (len >= 1) in as the new top. MZ_E_NOMEM if a segment
 * cannot be mapped; the stack is then unchanged. */
MZ_INTERNAL mz_status mz_compstack_push(mz_compstack_t *s, const void *data, size_t len,
                                        uint64_t tag);

/* View of the top / bottom item without removing it; MZ_AGAIN when empty. */
MZ_INTERNAL mz_status mz_compstack_peek_top(const mz_compstack_t *s, const uint8_t **data,
                                            size_t *len, uint64_t *tag);
MZ_INTERNAL mz_status mz_compstack_peek_bottom(const mz_compstack_t *s, const uint8_t **data,
                                               size_t *len, uint64_t *tag);
/* Views of up to n items from the top down (out[0] = the top); returns how
 * many were filled. Each view stays valid until its own item is removed
 * (removing the items above it does not move it), which lets several
 * threads decode items below the top while the top ones are dropped. */
typedef struct mz_compstack_view {
    const uint8_t *data;
    size_t len;
    uint64_t tag;
} mz_compstack_view;
MZ_INTERNAL size_t mz_compstack_peek_from_top(const mz_compstack_t *s, size_t n,
                                              mz_compstack_view *out);
/* Views of the n lowest items, bottom first (data[0] is the bottom), for
 * writing several at once; returns how many there are (<= n). Same borrow
 * as the peek functions: valid until the next mutating call. */
MZ_INTERNAL size_t mz_compstack_peek_bottom_n(const mz_compstack_t *s, size_t n,
                                              const uint8_t **data, size_t *len, uint64_t *tag);
/* Removes the top / bottom item (e.g. after decoding or writing it from the
 * peeked view). MZ_AGAIN when empty. Empty segments are unmapped at once. */
MZ_INTERNAL mz_status mz_compstack_drop_top(mz_compstack_t *s);
MZ_INTERNAL mz_status mz_compstack_drop_bottom(mz_compstack_t *s);

/* Copies the top item into dst and removes it. MZ_AGAIN when empty;
 * MZ_E_RANGE when cap < the item's length (*len tells the size; the stack is
 * unchanged). len and tag may be NULL. */
MZ_INTERNAL mz_status mz_compstack_pop(mz_compstack_t *s, void *dst, size_t cap, size_t *len,
                                       uint64_t *tag);
/* Same for the bottom item (the oldest: the chunk needed last on restore). */
MZ_INTERNAL mz_status mz_compstack_take_bottom(mz_compstack_t *s, void *dst, size_t cap,
                                               size_t *len, uint64_t *tag);

/* Deferred unmapping, for when other threads are faulting pages in: an
 * emptied segment's pages are still freed at once (MADV_DONTNEED: resident
 * memory falls as before) but its mapping is kept until the next call,
 * because unmapping takes the process's mmap lock for writing and stalls
 * every concurrent page fault (the restore workers pre-faulting units).
 * Each call unmaps what the previous one deferred; on = defer from now on
 * (falls back to unmapping at once if the bookkeeping cannot be reserved). */
MZ_INTERNAL void mz_compstack_defer_unmap(mz_compstack_t *s, bool on);

MZ_INTERNAL size_t mz_compstack_count(const mz_compstack_t *s);
MZ_INTERNAL size_t mz_compstack_bytes(const mz_compstack_t *s);  /* bytes_items */
MZ_INTERNAL void mz_compstack_get_stats(const mz_compstack_t *s, mz_compstack_stats *out);

/* Walks every segment and item and checks the accounting; true if consistent. */
MZ_INTERNAL bool mz_compstack_is_valid(const mz_compstack_t *s);

#endif /* MZ_COMPSTACK_H */
