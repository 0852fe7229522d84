/*
 * manager.h — the memory manager of one session: the unit table, eviction
 * (driven by a policy, policy.h) and restore (paper §4.2).
 *
 * The mechanism moves units between tiers through the codec and I/O
 * interfaces only: codec.h (encode/decode), compstack.h (in-memory stack),
 * swapfile.h (KV records, checksummed), direct_read.h (weights from the GGUF
 * file with O_DIRECT). Which unit moves where is the policy's decision.
 *
 * Eviction carries out a *plan*: the policy (policy.h; the hybrid swap of
 * Algorithm 1 unless a fixed KV placement is asked for) turns the unit
 * states, the per-unit times of the device profile (profile.h) and the
 * request into ordered steps, and mz_mem_evict performs them one by one,
 * planning again for the rest if the bytes really freed fall short.
 *
 * Thread contract: the thread holding the session's use lock calls
 * everything here (its user's thread, or mz_engine_evict's, which try-locks
 * it: src/engine/engine.h); between mz_mem_restore_begin and _end the
 * restore workers (restore_job.c) move units concurrently and the owner only
 * waits on them. The weight units are the engine's and move under their own
 * claim protocol and pins (weights.h). Lock order: manager.c's top comment.
 */
#ifndef MZ_MANAGER_H
#define MZ_MANAGER_H

#include "../kv/kv_cache.h"
#include "../model/model.h"
#include "../io/swapfile.h"
#include "policy.h"
#include "unit.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

typedef struct mz_mem mz_mem;
struct mz_device_profile;

/* What an engine's sessions share (src/engine/engine.h): one swap file
 * (opened by the first session that stores; each session frees its own
 * slots when it goes) and one model-file reader. */
typedef struct mz_mem_shared {
    pthread_mutex_t lock;      /* opening them */
    mz_swapfile_t *swap;
    char *swap_dir;            /* the engine's, which every session's is (ctx.c
                                  refuses another) */
    struct mz_dfile *dfile;
} mz_mem_shared;
MZ_INTERNAL void mz_mem_shared_init(mz_mem_shared *sh, const char *swap_dir);
/* After every session's manager is freed. */
MZ_INTERNAL void mz_mem_shared_close(mz_mem_shared *sh);

typedef struct mz_mem_params {
    const char *codec;         /* NULL / "auto": from the profile (codec_choice.h) */
    const char *swap_dir;      /* NULL/"": swapfile default */
    mz_kv_placement placement; /* AUTO: the hybrid policy; others: one fixed destination */
    unsigned swap_flags;       /* MZ_SWAP_* (tests) */
    /* required: the device profile, read by the engine (the manager reads
     * no file); copied */
    const struct mz_device_profile *profile;
    mz_evict_order order;      /* default backward-out */
    uint64_t seed;             /* random-out permutation */
    mz_hybrid_rounding rounding; /* default MZ_HYBRID_EXACT */
    /* NULL: the policy follows placement; else it makes the policy (engine
     * modes: partial-offload's layer-granular one, src/baseline). */
    mz_policy *(*policy_init)(const mz_policy_params *p);
    struct mz_wtable *wt;      /* required: the engine's weight units (weights.h) */
    mz_mem_shared *shared;     /* the engine's swap file and reader; NULL: the session's own */
    /* The session's token count (its field, read by the owner thread's calls
     * and the planners): with it, the chunks of a sliding-window layer that
     * the next token cannot attend to are evicted first and left stored by
     * restores (policy.h, "dead"). NULL: every chunk is live. */
    const size_t *n_pos;
    /* The compute threads beside which the session restores (its pool's
     * count): the policy charges the memory path's decoding over the
     * decoding threads of the profile's split for them
     * (mz_profile_restore_threads, mz_profile_decode_threads), and the
     * default codec is chosen with them; 0: unknown, the profile's rule for
     * that case. */
    int n_compute;
} mz_mem_params;

/* kv must outlive the manager; the model and the weight table too. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_mem_init(mz_model_t *m, mz_kv_cache *kv,
                                               const mz_mem_params *p, mz_mem **out);
/* Releases its weight pins, closes (removes) the swap file and frees the
 * compressed stack at once; the engine restores dropped weights when it goes.
 * NULL is fine. */
MZ_INTERNAL void mz_mem_free(mz_mem *mm);

/* Makes weight block `layer` and KV chunks [0, n_chunks) of that layer
 * resident (blocking, in that order). The error names the unit; units that
 * could not be restored stay evicted. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_mem_acquire_layer(mz_mem *mm, int layer, size_t n_chunks);
/* The same for a forward step whose first token sits at position pos0: in
 * a sliding-window layer, chunks below the first one that token attends to
 * are left where they are (the kernel never reads them). */
MZ_INTERNAL MZ_NODISCARD mz_status mz_mem_acquire_window(mz_mem *mm, int layer, size_t pos0,
                                                         size_t n_chunks);

/* A KV chunk lent to the forward pass in its compressed form (below). */
typedef struct mz_kv_lent {
    size_t chunk;                 /* chunk index in the layer */
    const uint8_t *data;          /* the encoded chunk, valid until mz_mem_end_lending */
    size_t len;
    const struct mz_codec *enc;
} mz_kv_lent;
/* mz_mem_acquire_window during a pipelined restore, for a pass that can
 * read chunks below `first_written` from their compressed copies: those
 * the job would decode from the compressed stack are not waited for but
 * lent (lent[0 .. *n_lent), at most n_chunks), everything else is made
 * resident as there. A lent chunk's values are mz_mem_decode_lent's, which
 * are the ones the job writes into the chunk: the pass reads the same
 * values either way. Outside a job (or lent == NULL) nothing is lent. The
 * copies stay valid until mz_mem_end_lending, which the pass calls before
 * acquiring its next layer (the job cannot settle them meanwhile). */
MZ_INTERNAL MZ_NODISCARD mz_status mz_mem_acquire_window_lend(mz_mem *mm, int layer, size_t pos0,
                                                              size_t n_chunks, size_t first_written,
                                                              mz_kv_lent *lent, size_t *n_lent);
/* Decodes a lent chunk into dst (the KV cache's chunk_bytes);
 * any thread, concurrently. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_mem_decode_lent(const mz_mem *mm, const mz_kv_lent *l, void *dst);
/* Whether a lent chunk's rows of row_values values (a KV head's row:
 * head_dim) can be read a few at a time (mz_mem_read_lent_rows), which its
 * codec decides. */
MZ_INTERNAL bool mz_mem_lent_rows_readable(const mz_kv_lent *l, size_t row_values);
/* Values [v0, v0 + k) of a lent chunk, whole rows as above: the values
 * mz_mem_decode_lent writes there, reading only their part of the copy;
 * any thread, concurrently. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_mem_read_lent_rows(const mz_mem *mm, const mz_kv_lent *l, size_t v0,
                                                         mz_f16 *dst, size_t k);
MZ_INTERNAL void mz_mem_end_lending(mz_mem *mm);

/* Evicts with the session's policy; weight blocks only while the session is
 * its engine's one session and none is pinned. */
/* The report an eviction fills: r, or *scratch where the caller passed
 * none; zeroed, with the bytes asked for. */
static inline mz_evict_report *mz_evict_report_start(mz_evict_report *r, mz_evict_report *scratch,
                                                     size_t nbytes)
{
    if (!r) r = scratch;
    memset(r, 0, sizeof *r);
    r->bytes_requested = nbytes;
    return r;
}

MZ_INTERNAL MZ_NODISCARD mz_status mz_mem_evict(mz_mem *mm, size_t nbytes, mz_evict_report *r);
/* The same with the weights' eligibility given (the engine's cross-session
 * plan, a session giving up deferred bytes between two steps). Pinned blocks
 * stay whatever the plan says. Ends when a round moves nothing. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_mem_evict_ex(mz_mem *mm, size_t nbytes,
                                                   bool weights_evictable, mz_evict_report *r);

/* ---- for the engine's cross-session plan (src/engine/session.c) ---- */
/* The policy's view of this session's units (times refreshed). The session
 * must be idle (its user lock held by the caller). */
MZ_INTERNAL void mz_mem_view(mz_mem *mm, bool weights_evictable, mz_policy_view *v);
MZ_INTERNAL const mz_policy *mz_mem_policy(const mz_mem *mm);
/* The session's plan buffer (sized for its table): the planner's scratch. */
MZ_INTERNAL mz_evict_plan *mz_mem_plan_scratch(mz_mem *mm);
MZ_INTERNAL struct mz_wtable *mz_mem_wtable(const mz_mem *mm);
/* Carries out planned steps in order until *freed reaches goal; *moved
 * counts the units that changed state (a shared block held elsewhere is
 * skipped). On error the unit being moved stays where it was. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_mem_evict_steps(mz_mem *mm, const mz_evict_step *steps,
                                                      size_t n, size_t goal, int64_t *freed,
                                                      size_t *moved, mz_evict_report *r);
/* CompKV items per write submission (1..32; 0: the default, 8): 1 writes
 * them one at a time, waiting for each (bench/bench_compkv.c's baseline). */
MZ_INTERNAL void mz_mem_set_compkv_batch(mz_mem *mm, size_t n);
/* The forward pass pins block `layer` before mz_mem_acquire_layer looks at
 * it (weights.h, "Pins") and releases all its pins at the end of the step. */
MZ_INTERNAL void mz_mem_pin_weights(mz_mem *mm, int layer);
MZ_INTERNAL void mz_mem_unpin_weights(mz_mem *mm);
/* No weight reload is in flight: the model-file reader gives its bounce
 * pool back (mz_dfile_idle; the next reload maps it again). Called at the
 * end of every compute section, under the engine's compute lock (weight
 * reloads run under it, so the engine's shared reader is not in use);
 * nothing while a restore job runs. NULL is fine. */
MZ_INTERNAL void mz_mem_reader_idle(mz_mem *mm);
MZ_INTERNAL MZ_NODISCARD mz_status mz_mem_restore_all(mz_mem *mm, mz_restore_report *r);
MZ_INTERNAL void mz_mem_get_stats(mz_mem *mm, mz_mem_stats *out);

/* Called before the KV cache drops chunks wholly beyond n_pos (truncate):
 * frees their swap slots and removes their compressed-stack entries (items
 * above them in the stack are decoded back into their chunks). After the
 * shrink, the next call on the manager notices the unmapped chunks. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_mem_kv_truncate(mz_mem *mm, size_t n_pos);

/* Per-unit restore times derived from the device profile at init (for the
 * restore workers' planning and for stats). */
MZ_INTERNAL const mz_unit_times *mz_mem_unit_times(const mz_mem *mm);

/* ---- pipelined restore (restore_generate) ------------------------------------------ *
 * begin: starts the allocation, storage and memory workers on every unit
 * evicted now (no threads when none is); while the job runs,
 * mz_mem_acquire_layer waits per unit for the workers instead of restoring.
 * wait: blocks until every unit is back (the no-overlap modes) or the job
 * failed. end: joins the workers, releases pages allocated for units that
 * were not loaded, records the breakdown (kept for mz_mem_last_restore) and
 * returns the job's error if any. Owner thread only; no eviction or truncate
 * between begin and end. */
/* The thread split of one restore job (a pure function of its inputs, so
 * tests check it on hand-made numbers). Activities per thread: bit
 * MZ_RESTORE_ACT_* of mask[t]; lane[t] is the storage lane of a thread that
 * reads (else -1). alloc_first[t]: the thread runs only allocation until
 * every unit's allocation is claimed, then its lane; the others interleave
 * their activities step by step.
 *   1..3 threads: 1 = all three on one thread; 2 = alloc+decoding,
 *     alloc+storage; 3 = alloc, alloc+storage, alloc+decoding; with 2 or 3,
 *     when the job has units of one path only, both loader threads run
 *     lanes of that path (two storage lanes, or two decoding). Every thread
 *     pre-faults (n_prefault is ignored: a thread that pre-faults is one
 *     that would otherwise wait for it).
 *   4+ threads, n_prefault >= n_threads: thread 0 only allocates, every
 *     other one allocates and runs one lane of storage or decoding, the
 *     lanes divided by the bytes of the stored and the compressed units.
 *   4+ threads, n_prefault < n_threads: threads 0..n_prefault-1 pre-fault
 *     first and then run a lane each; the other n_threads - n_prefault run
 *     a lane from the start and never pre-fault. The storage lanes (by
 *     bytes over all the threads) go to the early group first, which keeps
 *     at least one decoding lane when the job has both kinds (an early
 *     group of one thread runs both); the rest decode.
 * Storage lanes are numbered 0..n_sto_lanes-1 in thread order. */
enum { MZ_RESTORE_ACT_ALLOC, MZ_RESTORE_ACT_STORAGE, MZ_RESTORE_ACT_MEM, MZ_RESTORE_ACT_COUNT };
typedef struct mz_restore_split {
    int n_threads, n_prefault, n_sto_lanes;
    unsigned char mask[MZ_RESTORE_THREADS_MAX];
    signed char lane[MZ_RESTORE_THREADS_MAX];
    bool alloc_first[MZ_RESTORE_THREADS_MAX];
} mz_restore_split;
/* n_threads 1..MZ_RESTORE_THREADS_MAX, n_prefault 1..n_threads (clamped);
 * sto_bytes / mem_bytes: bytes of the units the storage path / the
 * decoding path restore (either may be 0, not both). */
MZ_INTERNAL void mz_restore_split_plan(int n_threads, int n_prefault, double sto_bytes,
                                       double mem_bytes, mz_restore_split *out);

typedef struct mz_restore_job_params {
    bool overlap_alloc;        /* allocation runs ahead of the loaders (else: all first) */
    int n_threads;             /* restore threads 1..MZ_RESTORE_THREADS_MAX (activities
                                  share them); else the device profile's split */
    int n_compute;             /* compute threads beside them (the split's input; 0: unknown) */
    int n_prefault;            /* of them, threads that pre-fault (1..n_threads); else the
                                  device profile's (mz_profile_prefault_threads) */
    unsigned delay_us_max;     /* tests: random delay before each worker step */
    uint64_t seed;
    size_t fail_mem_item;      /* tests: the decoding lanes fail on the stack's item
                                  fail_mem_item - 1 from the top (0: none) */
} mz_restore_job_params;
MZ_INTERNAL MZ_NODISCARD mz_status mz_mem_restore_begin(mz_mem *mm, const mz_restore_job_params *p);
MZ_INTERNAL MZ_NODISCARD mz_status mz_mem_restore_wait(mz_mem *mm);
MZ_INTERNAL MZ_NODISCARD mz_status mz_mem_restore_end(mz_mem *mm, mz_restore_timings *out);
MZ_INTERNAL void mz_mem_last_restore(const mz_mem *mm, mz_restore_timings *out);
/* Between begin and end (owner thread). */
MZ_INTERNAL bool mz_mem_restore_running(const mz_mem *mm);
/* A job that went on after its request (mz_mem_restore_detach). */
MZ_INTERNAL bool mz_mem_restore_detached(const mz_mem *mm);
/* Threads the running job started (0: none). */
MZ_INTERNAL int mz_mem_restore_threads(const mz_mem *mm);
/* The request's pass is done: when only the memory path is left (every
 * stored unit and weight block loaded, no failure), the job goes on
 * decoding on its threads after the request returns; true then, with *out
 * the timings so far (restore_ms 0). Afterwards forward passes wait per
 * unit as during the request, and every other call on the manager first
 * finishes the job (mz_mem_restore_finish). False: the caller ends it. */
MZ_INTERNAL bool mz_mem_restore_detach(mz_mem *mm, mz_restore_timings *out);
/* Waits for a detached job and completes its timings; nothing if none.
 * Callers hold the session's use lock (the owner, or mz_engine_evict), as
 * for every call that moves units. */
MZ_INTERNAL void mz_mem_restore_finish(mz_mem *mm);
/* The same without waiting: only a detached job whose threads are done. */
MZ_INTERNAL void mz_mem_restore_reap(mz_mem *mm);
/* The engine completes the breakdown (prefill, TTFT). */
MZ_INTERNAL void mz_mem_set_last_restore(mz_mem *mm, const mz_restore_timings *t);
/* Tests: when the last job's compute first got past layer 0, and when its
 * last unit became ready (mz_time_ms clock; first < 0 if never). */
MZ_INTERNAL void mz_mem_restore_order_probe(const mz_mem *mm, double *first_compute_ms,
                                            double *ready_ms);

/* ---- for tests and diagnostics --------------------------------------------------- */
MZ_INTERNAL mz_unit_state mz_mem_kv_state(mz_mem *mm, int layer, size_t chunk);
MZ_INTERNAL mz_unit_state mz_mem_weights_state(mz_mem *mm, int layer);
/* NULL until the first eviction to storage. */
MZ_INTERNAL mz_swapfile_t *mz_mem_swapfile(mz_mem *mm);
/* Codec used for compressed KV. */
MZ_INTERNAL const struct mz_codec *mz_mem_codec(const mz_mem *mm);
/* The instance that encodes layer `layer`'s chunks (mz_codec_for_layer of it). */
MZ_INTERNAL const struct mz_codec *mz_mem_layer_codec(const mz_mem *mm, int layer);
/* Encoded size of one chunk the policy plans with: the running mean of the
 * chunks encoded so far, seeded with the codec's typical ratio. */
MZ_INTERNAL size_t mz_mem_enc_expected(const mz_mem *mm);
/* Full consistency walk (stack items vs unit states, slots, counts). */
MZ_INTERNAL bool mz_mem_is_valid(mz_mem *mm);

/* ---- [store] session store hooks (src/store/session_store.c) ------------------------- *
 * The session's swap file is its store file (given before the first store).
 * mz_mem_store_chunk gives KV unit (layer, chunk) a clean copy: written from
 * its resident pages (claimed BUSY meanwhile, so no eviction moves it), or
 * adopted when it already sits raw in the file; *clean says whether it has
 * one now, *wrote whether this call gave it one (written, or adopted: an
 * eviction's write, which the store has not synced). Only chunks below
 * *full (the committed full chunks, read under mm->lock) are considered.
 * Any thread; takes mm->lock. adopt_chunks: chunks just reserved by the
 * owner become STORED_RAW at imported records, clean. With a store codec
 * (q8; NULL: raw) clean records are encoded with it, and a clean chunk is
 * STORED_COMPRESSED when evicted or adopted. */
MZ_INTERNAL void mz_mem_use_store_file(mz_mem *mm, mz_swapfile_t *sf, const struct mz_codec *codec);
MZ_INTERNAL MZ_NODISCARD mz_status mz_mem_store_chunk(mz_mem *mm, int layer, size_t chunk,
                                                      const _Atomic size_t *full, bool *clean,
                                                      bool *wrote);
MZ_INTERNAL MZ_NODISCARD mz_status mz_mem_store_clean_info(mz_mem *mm, int layer, size_t chunk,
                                                           mz_swap_slot_info *out);
/* adopt_chunks: chunks [0, n_chunks) of every layer, just reserved by the
 * owner (slots chunk-major: [chunk * n_layer + layer]); their pages go in one
 * madvise and one mprotect per run of adjacent chunks, not two system calls
 * per unit (7680 for a 32k-token SmolLM2 session). */
MZ_INTERNAL MZ_NODISCARD mz_status mz_mem_store_adopt_chunks(mz_mem *mm, size_t n_chunks,
                                                             const mz_swap_slot *slots);
MZ_INTERNAL size_t mz_mem_store_n_clean_evicted(const mz_mem *mm);
/* The tail: a copy of the partly filled KV unit (layer, chunk) as it is now,
 * written to a new record of the store file (*slot). It gets no clean
 * mark (the chunk still changes); MZ_E_INVAL when the unit is not resident.
 * Owner thread only (no forward pass may write the chunk meanwhile); takes
 * mm->lock. slot_free releases a record no manifest names any more. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_mem_store_tail(mz_mem *mm, int layer, size_t chunk,
                                                     mz_swap_slot *slot);
MZ_INTERNAL void mz_mem_store_slot_free(mz_mem *mm, mz_swap_slot slot);
/* Counts a tail record imported into the store file at resume as held. */
MZ_INTERNAL void mz_mem_store_hold(mz_mem *mm);

#endif /* MZ_MANAGER_H */
