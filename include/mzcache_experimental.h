/*
 * mzcache_experimental.h — knobs for the paper's ablations. NOT A STABLE API.
 *
 * Everything here exists so that the experiments of the paper (the eviction
 * order ablation of Fig. 11b, the restore overlap breakdown of §6.3) and the
 * tests that stress the restore pipeline can run in one process. A program
 * that only wants the engine never needs this header: the defaults (what a
 * NULL `experimental` pointer in mz_ctx_params / mz_restore_params gives) are
 * the engine's behaviour. Names, fields and values may change or go away in
 * any release without notice.
 *
 * Use: fill an mz_ctx_experimental / mz_restore_experimental (start from the
 * _default() value) and point the `experimental` field of the public params
 * at it. mz_ctx_init / mz_session_create read it at init only (the context
 * keeps no pointer to it); mz_prefill_restore / mz_restore_generate read it
 * during the call.
 */
#ifndef MZCACHE_EXPERIMENTAL_H
#define MZCACHE_EXPERIMENTAL_H

#include "mzcache.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- eviction order (paper §4.4, Fig. 11b) ----------------------------------------
 * Which unit eviction takes first; restore is always forward-in (first layer
 * first). Backward-out is the engine's order; the other two exist for the
 * ablation. */
typedef enum mz_evict_order {
    MZ_EVICT_BACKWARD = 0,              /* backward-out: last layer first, and within a layer
                                           the last chunk first (the engine's order) */
    MZ_EVICT_FORWARD = 1,               /* forward-out: first layer first (LRU-like) */
    MZ_EVICT_RANDOM = 2,                /* random-out: a fixed permutation of evict_seed */
} mz_evict_order;

typedef struct mz_ctx_experimental {
    mz_evict_order evict_order; /* default MZ_EVICT_BACKWARD */
    uint64_t evict_seed;        /* MZ_EVICT_RANDOM: seed of the permutation (default 0) */
    bool swa_full;              /* sliding-window layers (gemma3) plan and restore their whole
                                   history like a global layer's, as llama.cpp --swa-full
                                   keeps it (default false: chunks the next token cannot
                                   attend to go first and stay stored; docs/ARCHITECTURE.md) */
} mz_ctx_experimental;

MZ_API mz_ctx_experimental mz_ctx_experimental_default(void);
/* "backward", "forward", "random"; NULL if unknown. */
MZ_API const char *mz_evict_order_name(mz_evict_order o);
/* Parses those names; MZ_E_INVAL for anything else. */
MZ_API MZ_NODISCARD mz_status mz_evict_order_parse(const char *name, mz_evict_order *out);

/* ---- restore overlap (paper §6.3) and pipeline stress ------------------------------
 * Which of the pipelined restore's activities (allocation, reload, prefill;
 * see mz_prefill_restore) run at the same time. ALL is the engine's
 * behaviour; the others take overlap away for the breakdown. */
typedef enum mz_restore_overlap {
    MZ_OVERLAP_ALL = 0,            /* allocation || reload || prefill (the engine's) */
    MZ_OVERLAP_NONE = 1,           /* allocate all, then reload all, then prefill */
    MZ_OVERLAP_ALLOC_RELOAD = 2,   /* allocation || reload, then prefill */
    MZ_OVERLAP_RELOAD_PREFILL = 3  /* allocate all, then reload || prefill */
} mz_restore_overlap;

typedef struct mz_restore_experimental {
    mz_restore_overlap overlap; /* default MZ_OVERLAP_ALL; others: MZ_E_INVAL if unknown */
    unsigned debug_delay_us;    /* tests: random delay (0..this) before each worker step */
    uint64_t seed;              /* seed of those delays */
    int n_prefault_threads;     /* of the restore threads, how many pre-fault (from 4 restore
                                   threads on; fewer share every activity): 0 = the device
                                   profile's (its pre-fault table), 1..MZ_RESTORE_THREADS_MAX
                                   (more than the restore threads = all of them); else
                                   MZ_E_INVAL */
    int lend_kv;                /* KV chunks the memory path would decode are read by the
                                   request's first forward step from their compressed copies
                                   instead of waited for: 0 = when the compute and restore
                                   threads fit the CPUs, 1 = always, -1 = never */
    bool lend_whole;            /* lent chunks are decoded whole into a buffer of the step
                                   even where their codec reads a tile's rows on their own
                                   (attention then reads the compressed copy in place) */
    bool wait_all;              /* return only once every unit is restored; false: the
                                   memory path may go on after the request returns */
    size_t debug_fail_mem_item; /* tests: the restore threads' decoding of the compressed
                                   stack's item debug_fail_mem_item - 1 from its top
                                   fails (MZ_E_CORRUPT); 0: none */
} mz_restore_experimental;

MZ_API mz_restore_experimental mz_restore_experimental_default(void);

#ifdef __cplusplus
}
#endif
#endif /* MZCACHE_EXPERIMENTAL_H */
