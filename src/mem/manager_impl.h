/*
 * manager_impl.h — what the memory manager's files share (the contract is
 * manager.h; nothing outside src/mem/manager*.c, evict.c, restore*.c and
 * truncate.c includes this).
 *
 *   manager.c      the tables (struct mz_mem), init/free, statistics and
 *                  test hooks
 *   manager_base.c what the moves share: unit names, KV sync, expected
 *                  encoded size and times, swap file and model reader,
 *                  reading a stored unit
 *   evict.c        carrying out eviction plans (the mechanism's half of
 *                  policy.h)
 *   restore.c      blocking restore: per unit, per layer (acquire), all
 *   truncate.c     giving up evicted chunks beyond a new length
 *   restore_job.c  the pipelined restore (restore_generate)
 *   mem_names.c    public names of placements, orders and stages
 *
 * Lock order and the move protocol: manager.c's top comment.
 */
#ifndef MZ_MANAGER_IMPL_H
#define MZ_MANAGER_IMPL_H

#include "manager.h"

#include "../codec/codec.h"
#include "../io/direct_read.h"
#include "../io/io.h"
#include "compstack.h"
#include "policy.h"
#include "profile.h"
#include "weights.h"

#include <pthread.h>
#include <stdatomic.h>

struct rjob;

struct mz_mem {
    mz_model_t *model;
    mz_kv_cache *kv;
    mz_wtable *wt;             /* the engine's weight units (shared by its sessions) */
    unsigned char *wpinned;    /* [n_layer]: blocks this manager pinned in the current step */
    int n_layer;
    size_t max_chunks;
    size_t n_values;           /* F16 values in one chunk */
    mz_unit *kvu;              /* [n_layer * max_chunks] */
    const mz_codec *codec;
    mz_codec *layer_codec;     /* [n_layer]: the instance that encodes layer l's chunks
                                  (mz_codec_for_layer: cachegen's rows = head_dim and its
                                  layer schedule; q8/raw: *codec) */
    mz_device_profile prof;    /* where the per-unit times come from; re-derived as the */
    mz_profile_units pu;       /*   expected encoded size moves (mm_refresh_times) */
    char codec_name[24];
    uint64_t enc_seed;         /* expected bytes of an encoded chunk before any was measured */
    uint64_t enc_sum, enc_n;   /* bytes and count of chunks encoded by their layer's codec */
    mz_kv_placement placement;
    mz_policy *policy;
    mz_policy_params pprm;     /* order, seed, rounding */
    mz_evict_plan plan;        /* steps of the current eviction (and the planner's scratch) */
    mz_unit_times times;       /* per-unit restore times from the device profile */
    bool profile_measured;     /* false: built-in estimate */
    uint64_t *kv_seq;          /* [n_layer * max_chunks]: push number of each COMPRESSED chunk */
    uint64_t push_seq;         /* last push number handed out */
    pthread_mutex_t lock;
    mz_compstack_t *stack;
    mz_swapfile_t *swap;       /* opened at the first store */
    char *swap_dir;
    unsigned swap_flags;
    mz_dfile_t *dfile;         /* the model file, opened at the first weight reload */
    uint8_t *scratch;          /* page-aligned: encoded chunks on their way to/from storage */
    size_t scratch_cap;
    struct rjob *job;          /* the running pipelined restore (owner thread sets/clears) */
    mz_mem_shared *shared;     /* the engine's swap file and model-file reader (NULL: own) */
    bool shared_swap;          /* this session stores into the engine's swap file */
    _Atomic size_t n_slots;    /* swap slots this manager holds */
    size_t compkv_batch;       /* CompKV items per write submission; 0: the default */
    mz_restore_timings last;   /* breakdown of the last pipelined restore */
    double last_first_compute_ms; /* when acquire_layer(0) returned in the last job */
    double last_ready_ms;      /* when its last unit became ready */
    size_t kv_lost_pos;        /* SIZE_MAX, or the first position whose K/V rows a failed
                                  restore lost: a chunk the pass had written (mm_job_take)
                                  went back to its stack item; acquire refuses every pass
                                  that would read them (one starting past this position)
                                  until a truncation to it (owner thread) */
    _Atomic size_t n_clean_evicted; /* [store] evictions that only released pages */
    bool store_leaked;         /* [store] a truncation left clean records behind */
    size_t n_store_extra;      /* [store] slots held by the store, not by a unit (tails) */
    const mz_codec *store_codec; /* [store] clean records' codec; NULL: raw */
    uint8_t *store_enc;        /* [store] a chunk encoded with store_codec; store_enc_cap bytes */
    size_t store_enc_cap;
    pthread_cond_t store_cv;   /* [store] with lock: a unit's wb_pin was cleared */
    size_t *kv_window;         /* [n_layer]: sliding window of layer l (0: global); NULL:
                                  no chunk is ever dead (policy.h, mz_swa_chunk_dead) */
    const size_t *n_pos;       /* the session's token count (its owner's field, read only);
                                  NULL exactly when kv_window is */
};

static inline mz_unit *kv_unit(mz_mem *mm, int l, size_t c) { return &mm->kvu[(size_t)l * mm->max_chunks + c]; }

static inline uint64_t kv_tag(int l, size_t c) { return (uint64_t)(uint32_t)l << 32 | (uint32_t)c; }

static inline mz_unit *unit_by_tag(mz_mem *mm, uint64_t tag)
{
    int l = (int)(tag >> 32);
    size_t c = (size_t)(uint32_t)tag;
    MZ_ASSERT(l >= 0 && l < mm->n_layer && c < mm->max_chunks);
    return kv_unit(mm, l, c);
}

/* The unit whose item is on top of the compressed stack, which must not be
 * empty. Caller holds mm->lock. */
static inline mz_unit *mm_stack_top_unit(mz_mem *mm)
{
    const uint8_t *data;
    size_t len;
    uint64_t tag;
    mz_status s = mz_compstack_peek_top(mm->stack, &data, &len, &tag);
    MZ_ASSERT(s == MZ_OK);
    return unit_by_tag(mm, tag);
}

/* The session's token count; 0 without the sliding-window rule. Read by
 * the thread using the session (the engine's cross-session eviction and
 * statistics hold its use lock), never while it computes. */
static inline size_t mm_n_pos(const mz_mem *mm) { return mm->n_pos ? *mm->n_pos : 0; }

/* The first chunk of layer l that the token at position n_pos attends to. */
static inline size_t mm_first_live_chunk(const mz_mem *mm, int l, size_t n_pos)
{
    return mm->kv_window ? mz_swa_first_live_chunk(n_pos, mm->kv_window[l]) : 0;
}

/* Chunk (l, c) is dead for attention now (policy.h). */
static inline bool mm_kv_dead(const mz_mem *mm, int l, size_t c)
{
    return mz_swa_chunk_dead(mm->kv_window, mm_n_pos(mm), l, c);
}

/* Chunk (l, c) is dead and sits in storage: a restore leaves it there. */
static inline bool mm_kv_stored_dead(const mz_mem *mm, int l, size_t c, mz_unit_state s)
{
    return mz_swa_stored_dead(mm->kv_window, mm_n_pos(mm), l, c, s);
}

/* "KV chunk (layer l, chunk c)" / "weights of layer l". */
MZ_INTERNAL const char *mm_unit_name(const mz_unit *u, char *buf, size_t cap);
/* Brings KV unit states in line with the cache's mappings (owner thread). */
MZ_INTERNAL void mm_sync_kv(mz_mem *mm);
/* Before a call that moves or counts units: a request's restore that went
 * on after it finished (mz_mem_restore_finish), then mm_sync_kv. */
MZ_INTERNAL void mm_settle(mz_mem *mm);
/* Expected encoded size of one chunk (running mean, seeded). */
MZ_INTERNAL size_t mm_enc_expected(const mz_mem *mm);
/* Per-unit times at the current expected encoded size. */
MZ_INTERNAL void mm_refresh_times(mz_mem *mm);
/* The swap file (the engine's or the session's own), opened on first use. */
MZ_INTERNAL MZ_NODISCARD mz_status mm_ensure_swap(mz_mem *mm);
/* Swap-file write / slot free, counting the slots this manager holds. */
MZ_INTERNAL MZ_NODISCARD mz_status mm_swap_write(mz_mem *mm, const void *buf, size_t len,
                                                 uint64_t tag, mz_swap_slot *slot);
MZ_INTERNAL void mm_swap_slot_free(mz_mem *mm, mz_swap_slot slot);
/* The model-file reader (the engine's when shared), opened on first use. */
MZ_INTERNAL MZ_NODISCARD mz_status mm_ensure_dfile(mz_mem *mm);
/* A model-file reader of its own (a restore lane's), requests shaped by the profile. */
MZ_INTERNAL MZ_NODISCARD mz_status mm_open_dfile(mz_mem *mm, mz_dfile_t **out);
/* Fills u (BUSY, mapped) from the swap file or the model file. */
MZ_INTERNAL MZ_NODISCARD mz_status mm_read_stored(mz_mem *mm, mz_unit *u, mz_unit_state from,
                                                  uint8_t *scratch, size_t scratch_cap);
/* The policy's view of the tables. Caller holds mm->lock. */
MZ_INTERNAL void mm_fill_view(mz_mem *mm, bool weights_evictable, mz_policy_view *v);
/* Decodes the stack's top item into u (BUSY, mapped) and pops it. Caller
 * holds mm->lock. */
MZ_INTERNAL MZ_NODISCARD mz_status mm_decode_top_into(mz_mem *mm, mz_unit *u);
/* Makes u resident, waiting for another mover if there is one. */
MZ_INTERNAL MZ_NODISCARD mz_status mm_restore_unit(mz_mem *mm, mz_unit *u, mz_restore_report *r);
/* restore_job.c, for acquire: wait until u is resident or the job failed
 * (its error) or ended (MZ_OK; u may still be evicted, the caller restores
 * it); note when compute got past layer 0. */
MZ_INTERNAL MZ_NODISCARD mz_status mm_job_wait_unit(struct rjob *j, mz_unit *u);
MZ_INTERNAL void mm_job_note_compute(struct rjob *j);
/* The forward pass reads a KV chunk from its compressed copy instead of
 * waiting for the job to decode it: true and *out set (the stack keeps
 * that item and the ones below it until mm_job_end_lending) when u is a
 * chunk of the job's memory path not yet settled RESIDENT; false for any
 * other unit. mm_job_lendable says which units the first would lend. */
MZ_INTERNAL bool mm_job_lendable(const struct rjob *j, const mz_unit *u);
MZ_INTERNAL bool mm_job_lend(struct rjob *j, mz_unit *u, mz_compstack_view *out);
MZ_INTERNAL void mm_job_end_lending(struct rjob *j);
MZ_INTERNAL void mm_job_count_lent(struct rjob *j, size_t n);
/* A chunk of the memory path the pass writes into (the one its new tokens
 * go to, the first at pos0): decoded here into its own pages, out of the
 * stack's order, so the pass need not wait for every item above it. MZ_AGAIN: a lane has it
 * already (wait for it as usual); else the decode's status. The unit stays
 * BUSY until the stack's top reaches it. */
MZ_INTERNAL MZ_NODISCARD mz_status mm_job_take(struct rjob *j, mz_unit *u, size_t pos0);

#endif /* MZ_MANAGER_IMPL_H */
