/*
 * weights.h — the weight units of one engine: one unit per transformer
 * block, shared by every session of the engine (include/mzcache.h, "engine
 * and sessions"). The engine owns the table; each session's memory manager
 * (manager.h) moves its units with the same claim/settle protocol as its own
 * KV units.
 *
 * Pins. A forward pass pins block l (mz_wtable_pin) before it checks the
 * block's state and keeps the pin until its step ends; eviction claims a
 * RESIDENT block BUSY and then looks at the pin count, settling it back
 * RESIDENT when it is pinned. Both orders use sequentially consistent
 * atomics, so either the computing thread sees BUSY (and waits, then
 * restores the block if it was dropped) or the evictor sees the pin (and
 * leaves the block): a pinned block is never dropped under a computation.
 *
 * Thread contract: pin/unpin and state changes from any thread; attach and
 * detach (session count) under the table's own lock, a leaf.
 */
#ifndef MZ_WEIGHTS_H
#define MZ_WEIGHTS_H

#include "../io/direct_read.h"
#include "../model/model.h"
#include "unit.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct mz_wtable {
    mz_model_t *model;
    int n_layer;
    mz_unit *units;            /* [n_layer] */
    uint64_t *hash;            /* [n_layer]: XXH64 of the block taken when it was dropped */
    _Atomic int *pins;         /* [n_layer]: forward passes computing on the block */
    _Atomic int n_pinned;      /* sum of pins */
    pthread_mutex_t lock;      /* refs */
    int refs;                  /* memory managers (sessions) attached */
} mz_wtable;

MZ_INTERNAL MZ_NODISCARD mz_status mz_wtable_init(mz_model_t *m, mz_wtable **out);
/* Brings every dropped block back into the model (the model outlives its
 * engine), then frees the table; errors are logged. NULL is fine. */
MZ_INTERNAL void mz_wtable_free(mz_wtable *t);

MZ_INTERNAL void mz_wtable_attach(mz_wtable *t);
MZ_INTERNAL void mz_wtable_detach(mz_wtable *t);
MZ_INTERNAL int mz_wtable_refs(mz_wtable *t);

MZ_INTERNAL void mz_wtable_pin(mz_wtable *t, int layer);
MZ_INTERNAL void mz_wtable_unpin(mz_wtable *t, int layer);
MZ_INTERNAL bool mz_wtable_any_pinned(const mz_wtable *t);

/* Drops block `layer` (claimed BUSY from RESIDENT by the caller): records
 * its hash and releases the pages. Returns false (and settles it RESIDENT
 * again) when it is pinned. */
MZ_INTERNAL bool mz_wtable_drop_claimed(mz_wtable *t, int layer);

/* Fills block `layer` (BUSY, pages mapped) from the model file through f,
 * and checks it against the hash taken when it was dropped. Error message
 * set (without the unit's name). */
MZ_INTERNAL MZ_NODISCARD mz_status mz_wtable_read_block(mz_wtable *t, mz_dfile_t *f, int layer);

#endif /* MZ_WEIGHTS_H */
