/*
 * policy.h — the seam between eviction *policy* (what goes where, in which
 * order) and the *mechanism* in manager.c (encoding, I/O, page release).
 *
 * A policy is a pure function: from a read-only view of the unit table, the
 * per-unit restore times (profile.h) and a request (bytes), it returns a
 * *plan*, an ordered list of steps (unit, destination). It never touches
 * memory, codecs, files or clocks and keeps no state between calls, so the
 * same state and request always give the same plan, and tests run it on
 * hand-made tables without a disk. The mechanism carries the plan out step
 * by step; when the real bytes freed fall short of the estimate (a chunk the
 * codec refused, an entropy coder that beat its bound) it simply asks for a
 * new plan for the rest, from the new state.
 *
 * Divisions:
 *   1. steps, plans and the view
 *   2. the policy vtable and its two implementations
 *        hybrid    the paper's Algorithm 1 (policy_hybrid.c), the default
 *        backward  one fixed KV destination (policy_backward.c), for tests
 *                  and ablations (every restore path on purpose)
 *   3. helpers shared by both (policy.c): eviction orders, the planned
 *      restore time of each path, names
 *
 * Thread contract: called by the mechanism with its table lock held; unit
 * states are read with mz_unit_state_get(). Nothing here is shared.
 */
#ifndef MZ_POLICY_H
#define MZ_POLICY_H

#include "unit.h"
#include "mzcache_experimental.h" /* mz_evict_order: the ablation orders the planner implements */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- 1. steps, plans, the view ----------------------------------------------- */

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
    mz_evict_stage stage;       /* the Algorithm 1 stage that chose it */
    int64_t est_freed;          /* bytes the step is expected to free (< 0: it costs) */
} mz_evict_step;

/* Per-unit restore times in nanoseconds (derived from the device profile by
 * mz_profile_derive, profile.h; every field >= 1). */
typedef struct mz_unit_times {
    int64_t t_d_ns;             /* decode one KV chunk from the compressed stack (memory path) */
    int64_t t_rkv_ns;           /* read one raw KV chunk from the swap file (storage path) */
    int64_t t_rkvc_ns;          /* read one encoded KV chunk and decode it (storage path) */
    int64_t t_rw_ns;            /* read one weight block from the model file (storage path) */
    int64_t t_alloc_kv_ns;      /* fault in fresh pages for one KV chunk */
    int64_t t_alloc_w_ns;       /* fault in fresh pages for one weight block */
} mz_unit_times;

/* What a policy may look at. */
typedef struct mz_policy_view {
    int n_layer;
    size_t max_chunks;          /* stride of kv[] and kv_seq[] */
    size_t n_chunks;            /* chunks per layer that exist */
    const mz_unit *weights;     /* [n_layer]; bytes = block size */
    const mz_unit *kv;          /* [n_layer * max_chunks]: (l, c) at l * max_chunks + c;
                                   enc_bytes valid while COMPRESSED / STORED_COMPRESSED */
    const uint64_t *kv_seq;     /* same layout: push sequence number of each COMPRESSED
                                   chunk; the stack's bottom is the smallest */
    bool weights_evictable;     /* false while other contexts share the model */
    bool can_store;             /* false when no swap file can be used */
    size_t unit_bytes_kv;       /* resident size of one KV chunk */
    size_t enc_bytes_kv_est;    /* expected encoded size of one chunk (the codec's bound) */
    mz_unit_times times;
    /* Sliding-window layers (gemma3): kv_window[l] > 0 is layer l's window,
     * 0 a global layer; NULL: no chunk is ever dead (the baselines, models
     * without windows). n_pos: positions computed, so the next token sits
     * at n_pos. mz_policy_kv_dead below is the rule. */
    const size_t *kv_window;    /* [n_layer] or NULL */
    size_t n_pos;
} mz_policy_view;

/* Sliding-window attention as free memory. In a layer of window w the token
 * at position p attends to (p - w, p] (src/kernels/attn.c), so every chunk
 * wholly below p + 1 - w is read again only if the conversation is cut back
 * under it (a truncation: keep_prefix, a sync to a shorter prefix, a
 * regenerate). Such a chunk is *dead*: the planners evict it before any
 * other unit, raw to storage (never through a codec: it may never be read,
 * and when it is, nothing lossy may have touched it), and the restore paths
 * (acquire, restore_all, the pipelined job) leave it stored. A truncation
 * lowers n_pos and makes it live again, and the next forward pass reads it
 * back. The chunk's state stays in the unit table (one owner); deadness is
 * derived from n_pos and the window, never stored.
 * First chunk the token at position n_pos attends to in a layer of window
 * `window` (0: global, chunk 0). */
static inline size_t mz_swa_first_live_chunk(size_t n_pos, size_t window)
{
    if (!window || n_pos + 1 <= window) return 0;
    return (n_pos + 1 - window) / MZ_KV_CHUNK_TOKENS;
}

/* Chunk c of layer l is dead at n_pos, kv_window[l] being the layer's
 * window (0: global); kv_window NULL: no chunk is. The rule for the view
 * below and for the manager's tables (manager_impl.h) alike. */
static inline bool mz_swa_chunk_dead(const size_t *kv_window, size_t n_pos, int l, size_t c)
{
    return kv_window && c < mz_swa_first_live_chunk(n_pos, kv_window[l]);
}

/* A dead chunk in storage: off both restore paths, so it weighs on neither
 * in the planners' balance nor in the planned restore times. (A dead chunk
 * in the compressed stack is decoded with the stack, restore_job.c.) */
static inline bool mz_swa_stored_dead(const size_t *kv_window, size_t n_pos, int l, size_t c,
                                      mz_unit_state s)
{
    return mz_unit_in_storage(s) && mz_swa_chunk_dead(kv_window, n_pos, l, c);
}

static inline bool mz_policy_kv_dead(const mz_policy_view *v, int l, size_t c)
{
    return mz_swa_chunk_dead(v->kv_window, v->n_pos, l, c);
}

static inline bool mz_policy_kv_stored_dead(const mz_policy_view *v, int l, size_t c,
                                            mz_unit_state s)
{
    return mz_swa_stored_dead(v->kv_window, v->n_pos, l, c, s);
}

/* A plan: ordered steps plus the planners' scratch, sized once for a table
 * of n_layer x max_chunks (no allocation while planning). */
typedef struct mz_evict_plan {
    mz_evict_step *steps;
    size_t n, cap;
    int64_t bytes_planned;      /* sum of est_freed */
    bool exhausted;             /* true: after the steps nothing evictable is left */
    /* scratch (planners only) */
    int n_layer;
    size_t max_chunks;
    uint8_t *sim_w;             /* [n_layer] simulated weight states */
    uint8_t *sim_kv;            /* [n_layer * max_chunks] simulated KV states */
    uint32_t *ord_kv;           /* [n_layer * max_chunks] eviction order of the KV chunks */
    uint32_t *ord_w;            /* [n_layer] eviction order of the weight blocks */
    uint32_t *stack;            /* [n_layer * max_chunks] simulated stack, bottom first */
    struct mz_sort_pair { uint64_t key; uint32_t idx; } *sort_tmp; /* [n_layer * max_chunks] */
} mz_evict_plan;

MZ_INTERNAL MZ_NODISCARD mz_status mz_evict_plan_init(mz_evict_plan *p, int n_layer,
                                                      size_t max_chunks);
MZ_INTERNAL void mz_evict_plan_free(mz_evict_plan *p); /* zeroed or initialised */

/* ---- 2. policies ---------------------------------------------------------------- */

typedef struct mz_policy mz_policy;
struct mz_policy {
    const char *name;
    /* Plans steps until their estimated freed bytes reach nbytes, or nothing
     * evictable is left. Pure: depends only on the view, nbytes and the
     * policy's parameters. nbytes = 0 gives an empty plan. */
    void (*plan)(const mz_policy *p, const mz_policy_view *v, size_t nbytes, mz_evict_plan *out);
    /* The stage the next step would be in (MZ_EVICT_STAGE_DONE: nothing left). */
    mz_evict_stage (*stage)(const mz_policy *p, const mz_policy_view *v);
    void (*free)(mz_policy *p);
};

/* How KVandW charges a dropped weight block when balancing (policy_hybrid.c). */
typedef enum mz_hybrid_rounding {
    MZ_HYBRID_EXACT = 0,        /* t_rW itself: the paths stay within one unit's time of each
                                   other; T (fresh table) = floor(N_W_total * t_rW / t_d) */
    MZ_HYBRID_PAPER = 1,        /* floor(t_rW / t_d) * t_d, the paper's integer form:
                                   T = N_W_total * floor(t_rW / t_d) and exactly that many
                                   chunks per block; the storage path drifts ahead by
                                   t_rW mod t_d per block dropped */
} mz_hybrid_rounding;

typedef struct mz_policy_params {
    mz_evict_order order;       /* default backward-out */
    uint64_t seed;              /* random-out: the order is a fixed permutation of the seed */
    mz_hybrid_rounding rounding;
} mz_policy_params;

MZ_INTERNAL mz_policy_params mz_policy_params_default(void);

/* The four-stage hybrid swap of paper §4.3 (Algorithm 1). NULL on OOM. */
MZ_INTERNAL mz_policy *mz_policy_hybrid_init(const mz_policy_params *p);
/* Every KV chunk to the destination `placement` names (mixed: alternating
 * compressed / raw storage), then weight blocks, then CompKV. AUTO is not
 * accepted here (it means the hybrid policy). NULL on OOM. */
MZ_INTERNAL mz_policy *mz_policy_backward_init(mz_kv_placement placement,
                                               const mz_policy_params *p);

/* ---- 3. shared helpers ------------------------------------------------------------ */

/* Planned restore work of the current state (policy.c). */
typedef struct mz_restore_plan_times {
    int64_t mem_ns;             /* memory path: decode every COMPRESSED chunk */
    int64_t storage_ns;         /* storage path: every STORED_RAW / STORED_COMPRESSED chunk
                                   and DROPPED weight block */
    int64_t alloc_ns;           /* fresh pages for every evicted unit */
} mz_restore_plan_times;

MZ_INTERNAL void mz_policy_restore_times(const mz_policy_view *v, mz_restore_plan_times *out);

/* Fills p->ord_kv (n_layer * n_chunks entries, as l * max_chunks + c) and
 * p->ord_w (n_layer) with the order in which units are taken: backward-out
 * (rearmost first), forward-out, or a seeded permutation (random-out). */
MZ_INTERNAL void mz_policy_fill_orders(const mz_policy_view *v, mz_evict_order order,
                                       uint64_t seed, mz_evict_plan *p);

/* Copies the view's states into p->sim_*, and the COMPRESSED chunks into
 * p->stack sorted by push sequence (bottom first); returns their number. */
MZ_INTERNAL size_t mz_policy_sim_load(const mz_policy_view *v, mz_evict_plan *p);

/* The planners' first steps (after mz_policy_sim_load): every dead chunk
 * still resident in the simulation, oldest first (a truncation reaches the
 * newest first), raw to storage, until the planned bytes reach nbytes.
 * Nothing when the view cannot store (they are then chunks like any other).
 * Returns the number of chunks planned, which the caller takes out of its
 * count of resident KV; they do not weigh on the restore paths' balance,
 * since no restore reads them. */
MZ_INTERNAL size_t mz_policy_plan_dead(const mz_policy_view *v, size_t nbytes, mz_evict_plan *p);

/* Appends a step; asserts that the capacity holds. */
MZ_INTERNAL void mz_evict_plan_push(mz_evict_plan *p, const mz_evict_step *s);

#endif /* MZ_POLICY_H */
