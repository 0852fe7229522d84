/*
 * baseline.h — the engine modes other than mzcache (paper §6.1, DESIGN.md §5):
 * os-paging, partial-offload and recompute, built into the engine so that the
 * comparisons run in one process. The engine (src/engine/modes.c) hands the
 * elastic-memory calls of a session to this module when its mode is not
 * MZ_MODE_MZCACHE; the public contracts (mzcache.h) are the same in every
 * mode. A mode works on handles (mz_mode_session: the model, the KV cache,
 * the memory manager and a prefill callback), never on the session: it
 * neither calls into the engine nor writes the session's fields
 * (llama.cpp's memory interface).
 *
 *   os_paging.c     weights read from a read-only mapping of the GGUF file
 *                   (per model, while it has os-paging contexts), KV chunks in
 *                   anonymous memory paged out to swap (zram) or, with no swap,
 *                   moved to a file-backed shared mapping; eviction by
 *                   MADV_PAGEOUT / MADV_DONTNEED + POSIX_FADV_DONTNEED, restore
 *                   by page faults, residency measured with mincore
 *   policy_layer.c  partial-offload's layer-granular policy for the memory
 *                   manager (src/mem: its mechanism, raw storage, sequential
 *                   restore_all)
 *   baseline.c      dispatch, partial-offload and recompute
 *
 * Thread contract: the session's owner thread, like the rest of a session.
 * The engine's registry of modes (mz_ospage_model: whether its model is
 * file-mapped, how many sessions of each kind use it) has its own lock, a
 * leaf.
 */
#ifndef MZ_BASELINE_H
#define MZ_BASELINE_H

#include "../kv/kv_cache.h"
#include "../mem/manager.h"
#include "../mem/policy.h"
#include "../model/model.h"

typedef struct mz_baseline mz_baseline;

/* What a mode works on: one session's handles and callbacks, given by the
 * engine; valid as long as the mode's state (mz_baseline_init .. free). */
typedef struct mz_mode_session {
    mz_model_t *model;
    mz_kv_cache *kv;
    mz_mem *mem;
    void *ud;                  /* the engine's, passed to the callbacks */
    /* Tokens in the session now (recompute: their KV may be dropped). */
    size_t (*n_tokens)(void *ud);
    /* The forward pass over t[0, n) after the session's tokens, which they
     * join; the mode's own hooks are not called again. */
    MZ_NODISCARD mz_status (*prefill)(void *ud, const mz_token *t, size_t n);
    /* Computes the KV of the session's tokens again from position 0 (the
     * mode dropped it). On failure the session keeps its token count and
     * the KV computed so far is the mode's to drop. */
    MZ_NODISCARD mz_status (*prefill_again)(void *ud);
} mz_mode_session;

/* The engine's registry of its model's modes: os-paging maps the model
 * file and points the weights into it, so a model serves os-paging
 * sessions or sessions of the other modes, never both at once. One per
 * engine; freed once every session has detached. NULL on OOM. */
typedef struct mz_ospage_model mz_ospage_model;
MZ_INTERNAL mz_ospage_model *mz_ospage_model_new(mz_model_t *m);
MZ_INTERNAL void mz_ospage_model_free(mz_ospage_model *f);

/* partial-offload: whole layers from the last one backward, KV raw to the swap
 * file, weight blocks dropped. NULL on OOM. */
MZ_INTERNAL mz_policy *mz_policy_layer_init(const mz_policy_params *prm);

/* Sets the manager parameters a mode needs (before mz_mem_init). */
MZ_INTERNAL void mz_baseline_mem_params(mz_engine_mode mode, mz_mem_params *mp);

/* Called for every session once its manager exists (mode mzcache included: a
 * model whose weights are file-mapped for os-paging sessions accepts no
 * session of another mode, and the reverse). *ms is copied; swap_dir: where
 * os-paging's KV file goes (NULL: the default). */
MZ_INTERNAL MZ_NODISCARD mz_status mz_baseline_init(const mz_mode_session *ms, mz_ospage_model *fm,
                                                    mz_engine_mode mode, const char *swap_dir,
                                                    mz_baseline **out);
/* Before the KV cache and the manager go; NULL is fine. */
MZ_INTERNAL void mz_baseline_free(mz_baseline *b);

/* The elastic-memory calls in the session's mode (not mzcache). */
MZ_INTERNAL MZ_NODISCARD mz_status mz_baseline_evict(mz_baseline *b, size_t nbytes,
                                                     mz_evict_report *r);
MZ_INTERNAL MZ_NODISCARD mz_status mz_baseline_restore(mz_baseline *b, mz_restore_report *r);
MZ_INTERNAL void mz_baseline_get_stats(const mz_baseline *b, mz_mem_stats *out);
/* Before the KV chunks beyond n_keep are freed (any mode; NULL is fine). */
MZ_INTERNAL void mz_baseline_kv_truncate(mz_baseline *b, size_t n_keep);
/* Before a prefill's forward pass: brings back what the mode restores
 * before computing (partial-offload: everything, sequentially; recompute:
 * the weights and the whole context, prefilled again). NULL is fine. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_baseline_before_prefill(mz_baseline *b);
/* mz_prefill_restore in the mode: restore the mode's way, then prefill; fills
 * the breakdown (restore_ms = time until everything needed was back). */
MZ_INTERNAL MZ_NODISCARD mz_status mz_baseline_prefill_restore(mz_baseline *b, const mz_token *t,
                                                               size_t n, mz_restore_timings *tm,
                                                               double t0);

/* ---- os_paging.c (used by baseline.c) ---- */
typedef struct mz_ospage mz_ospage;
MZ_INTERNAL MZ_NODISCARD mz_status mz_ospage_init(const mz_mode_session *ms, mz_ospage_model *fm,
                                                  const char *swap_dir, mz_ospage **out);
MZ_INTERNAL void mz_ospage_free(mz_ospage *op);
MZ_INTERNAL MZ_NODISCARD mz_status mz_ospage_evict(const mz_mode_session *ms, mz_ospage *op,
                                                   size_t nbytes, mz_evict_report *r);
MZ_INTERNAL MZ_NODISCARD mz_status mz_ospage_restore(const mz_mode_session *ms, mz_ospage *op,
                                                     mz_restore_report *r);
MZ_INTERNAL void mz_ospage_get_stats(const mz_mode_session *ms, mz_ospage *op, mz_mem_stats *out);
/* Forgets the file-backed state of the chunks that a truncation frees: a
 * chunk mapped again there is anonymous, even at the same address. */
MZ_INTERNAL void mz_ospage_kv_truncate(const mz_mode_session *ms, mz_ospage *op, size_t n_keep);
/* Checks and counts a session of `mode` on the registry's model (maps the
 * file for the first os-paging session), and uncounts it. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_ospage_model_attach(mz_ospage_model *f, mz_engine_mode mode);
MZ_INTERNAL void mz_ospage_model_detach(mz_ospage_model *f, mz_engine_mode mode);

/* Swap the kernel offers now: total bytes, and whether every active swap
 * device is zram. */
MZ_INTERNAL size_t mz_ospage_swap_total(bool *all_zram);

#endif
