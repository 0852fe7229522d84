/*
 * policy.h — the seam between eviction *policy* (what goes where, in which
 * order) and the *mechanism* in manager.c (encoding, I/O, page release).
 *
 * A policy looks at a read-only view of the unit table and returns one step
 * at a time: a unit and its destination. It never touches memory, codecs or
 * files; the mechanism carries the step out and reports back through done().
 * That keeps a policy testable without a disk, and lets the next issue plug
 * in the paper's four-stage hybrid swap (Algorithm 1) with a device profile
 * by implementing this same vtable.
 *
 * Thread contract: called by the mechanism with its table lock held; a
 * policy keeps only its own state.
 */
#ifndef MZ_POLICY_H
#define MZ_POLICY_H

#include "unit.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum mz_mem_dest {
    MZ_DEST_NONE = 0,           /* nothing (more) to evict */
    MZ_DEST_COMPRESS,           /* KV, resident: encode into the in-memory compressed stack */
    MZ_DEST_STORE_RAW,          /* KV, resident: write its raw bytes to the swap file */
    MZ_DEST_STORE_COMPRESSED,   /* KV, resident: encode and write to the swap file;
                                 * KV, compressed (must be the stack's bottom): CompKV move */
    MZ_DEST_DROP,               /* weights, resident: release; reload from the model file */
} mz_mem_dest;

typedef struct mz_evict_step {
    mz_unit_kind kind;
    int layer;
    size_t chunk;               /* KV only */
    mz_mem_dest dest;
} mz_evict_step;

/* What a policy may look at. Unit states are read with mz_unit_state_get(). */
typedef struct mz_policy_view {
    int n_layer;
    size_t max_chunks;          /* stride of kv[] */
    size_t n_chunks;            /* chunks per layer that exist */
    const mz_unit *weights;     /* [n_layer] */
    const mz_unit *kv;          /* [n_layer * max_chunks]: (l, c) at l * max_chunks + c */
    bool weights_evictable;     /* false while other contexts share the model */
    bool can_store;             /* false when no swap file can be used */
    int comp_bottom_layer;      /* the compressed stack's bottom item, or -1 when empty */
    size_t comp_bottom_chunk;
    size_t unit_bytes_kv;       /* resident size of one KV chunk */
    size_t enc_bytes_kv_est;    /* expected encoded size of one chunk (codec bound) */
} mz_policy_view;

typedef struct mz_policy mz_policy;
struct mz_policy {
    const char *name;
    /* Picks the next step; returns false (dest NONE) when nothing is left. */
    bool (*next)(mz_policy *p, const mz_policy_view *v, mz_evict_step *out);
    /* The mechanism carried out (ok) or failed to carry out a step. */
    void (*done)(mz_policy *p, const mz_evict_step *s, bool ok);
    /* Units were restored (fully or partly): reset any stage bookkeeping. */
    void (*on_restore)(mz_policy *p);
    void (*free)(mz_policy *p);
};

/* The simple policy of this issue: backward-out (KV chunks first, last
 * layer / last chunk first; then weight blocks, last layer first; then CompKV,
 * the stack's bottom first), every KV chunk to the destination `placement`
 * chooses (mixed: alternating compressed / raw storage). AUTO means mixed
 * until the hybrid-swap policy exists. Returns NULL on allocation failure. */
MZ_INTERNAL mz_policy *mz_policy_backward_init(mz_kv_placement placement);

#endif /* MZ_POLICY_H */
