/*
 * unit.h — memory units (paper §4.2): the things the memory manager moves.
 *
 * A unit is one transformer block's weights or one (layer, 256-token) KV
 * chunk. Each owns its own page-aligned anonymous mapping whose address never
 * changes while the unit exists: eviction releases the pages (MADV_DONTNEED)
 * and makes the range PROT_NONE, restore makes it writable again and fills
 * it. A stable address means the forward pass's pointers (tensor.data, the
 * per-layer chunk-pointer arrays) stay valid, and any read of an evicted unit
 * faults at once instead of computing on zeros.
 *
 * States (where the unit's bytes live; exactly one place at a time):
 *
 *     ABSENT             KV only: chunk not mapped (beyond the context's length)
 *     RESIDENT           mapped and valid; compute may read it
 *     COMPRESSED         KV only: encoded in the in-memory compressed stack
 *     STORED_RAW         KV only: raw bytes in a swap-file slot
 *     STORED_COMPRESSED  KV only: encoded bytes in a swap-file slot (directly or by CompKV)
 *     DROPPED            weights only: released; the GGUF file is the source
 *     BUSY               transient: one thread owns the unit and is moving it
 *
 * Ready event. The state word is also a futex: whoever takes a unit BUSY (by
 * compare-and-swap from a settled state) is its only mover; when it stores
 * the settled result it wakes every waiter. Compute waits with
 * mz_unit_wait_settled() and then checks for RESIDENT. A failed restore
 * settles back to the evicted state it came from, so waiters wake, see that
 * the unit is still evicted, and report the error (or retry). This is the
 * C analogue of the paper's std::promise; restore workers (next issue) settle
 * units from their own threads with the same calls.
 *
 * Thread contract: state reads/CAS/wait/settle from any thread; the other
 * fields are written only by the thread holding the unit BUSY (or by the
 * owner thread while no worker exists) and read after an acquire load of the
 * state.
 */
#ifndef MZ_UNIT_H
#define MZ_UNIT_H

#include "../core/core.h"
#include "../io/swapfile.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum mz_unit_state {
    MZ_UNIT_ABSENT = 0,
    MZ_UNIT_RESIDENT,
    MZ_UNIT_COMPRESSED,
    MZ_UNIT_STORED_RAW,
    MZ_UNIT_STORED_COMPRESSED,
    MZ_UNIT_DROPPED,
    MZ_UNIT_BUSY,
    MZ_UNIT_N_STATES
} mz_unit_state;

typedef enum mz_unit_kind { MZ_UNIT_WEIGHTS = 0, MZ_UNIT_KV = 1 } mz_unit_kind;

struct mz_codec;

typedef struct mz_unit {
    _Atomic uint32_t state;        /* mz_unit_state; also the futex word */
    uint8_t kind;                  /* mz_unit_kind */
    int layer;
    int chunk;                     /* KV: chunk index in the layer; weights: -1 */
    uint8_t *buf;                  /* the unit's mapping (stable address) */
    size_t bytes;                  /* resident size */
    size_t enc_bytes;              /* COMPRESSED / STORED_COMPRESSED: encoded size */
    const struct mz_codec *enc;    /* codec of the encoded blob (raw when the codec refused) */
    mz_swap_slot slot;             /* STORED_*: the record */
    /* Session store (src/store): a verified-on-read copy of this full KV
     * chunk in the session's store file, current while set (the chunk's
     * bytes never change again; truncation below the chunk clears it).
     * Evicting a unit with a clean copy writes nothing: its pages go and it
     * settles STORED_RAW with slot = clean. Restore keeps the slot. */
    mz_swap_slot clean;
    /* Under the manager's lock: the write-behind is reading this full,
     * resident chunk's pages (no copy): eviction skips it, truncation waits
     * for it (mm->store_cv); the forward pass only reads it too. */
    bool wb_pin;
} mz_unit;

MZ_INTERNAL const char *mz_unit_state_name(mz_unit_state s);

static inline mz_unit_state mz_unit_state_get(const mz_unit *u)
{
    return (mz_unit_state)atomic_load_explicit(&((mz_unit *)(uintptr_t)u)->state,
                                               memory_order_acquire);
}

/* The unit's bytes are in a swap-file slot (raw or encoded). */
static inline bool mz_unit_in_storage(mz_unit_state s)
{
    return s == MZ_UNIT_STORED_RAW || s == MZ_UNIT_STORED_COMPRESSED;
}

/* Takes the unit BUSY if it is in state `from`; true on success. */
static inline bool mz_unit_claim(mz_unit *u, mz_unit_state from)
{
    uint32_t exp = (uint32_t)from;
    return atomic_compare_exchange_strong_explicit(&u->state, &exp, (uint32_t)MZ_UNIT_BUSY,
                                                   memory_order_acq_rel, memory_order_acquire);
}

/* [store] u->clean is written under the manager's lock; the planner reads
 * it without (mz_unit_is_clean), so both go through atomics. */
static inline void mz_unit_set_clean(mz_unit *u, mz_swap_slot s)
{
    __atomic_store_n(&u->clean, s, __ATOMIC_RELAXED);
}
static inline bool mz_unit_is_clean(const mz_unit *u)
{
    return __atomic_load_n(&u->clean, __ATOMIC_RELAXED) != 0;
}

/* Stores a settled state (release) and wakes waiters. Caller holds it BUSY. */
MZ_INTERNAL void mz_unit_settle(mz_unit *u, mz_unit_state to);
/* Sets the state of a unit nobody else can see yet (init, ABSENT <-> RESIDENT by
 * the owner thread); no wake-up needed. */
MZ_INTERNAL void mz_unit_set(mz_unit *u, mz_unit_state to);
/* Blocks while the unit is BUSY; returns the settled state. */
MZ_INTERNAL mz_unit_state mz_unit_wait_settled(mz_unit *u);

/* Releases the unit's pages to the OS and makes the range inaccessible. */
MZ_INTERNAL void mz_unit_release_pages(mz_unit *u);
/* The two halves of mz_unit_release_pages: drop frees the pages and allocates
 * nothing; protect (PROT_NONE) may split a merged mapping, and the kernel
 * object that takes is charged to the memory cgroup. Dropping every unit of
 * an eviction first and protecting afterwards keeps those charges until the
 * cgroup is back below memory.high (a charge above it stalls the thread for
 * up to 2 s). */
MZ_INTERNAL void mz_unit_drop_pages(mz_unit *u);
MZ_INTERNAL void mz_unit_protect_pages(mz_unit *u);
/* mz_unit_release_pages for n units at once (the array is sorted by
 * address): each run of adjacent ranges takes one madvise, then one
 * mprotect, so whole huge pages of a KV slab (kv_cache.h) go without a
 * split. */
MZ_INTERNAL void mz_units_release_pages(mz_unit **u, size_t n);
/* Makes the range readable and writable again (pages fault in as zeros). */
MZ_INTERNAL mz_status mz_unit_map_pages(mz_unit *u);

#endif /* MZ_UNIT_H */
