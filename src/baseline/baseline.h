/*
 * baseline.h — the engine modes other than mzcache (paper §6.1, DESIGN.md §5):
 * os-paging, partial-offload and recompute, built into the engine so that the
 * comparisons run in one process. ctx.c hands the elastic-memory calls of a
 * context to this module when its mode is not MZ_MODE_MZCACHE; the public
 * contracts (mzcache.h) are the same in every mode.
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
 * Thread contract: the context's owner thread, like the rest of a context.
 * The per-model registry (which models are file-mapped, how many contexts of
 * each kind use them) has its own lock, a leaf.
 */
#ifndef MZ_BASELINE_H
#define MZ_BASELINE_H

#include "../engine/engine.h"
#include "../mem/manager.h"
#include "../mem/policy.h"

typedef struct mz_baseline mz_baseline;

/* partial-offload: whole layers from the last one backward, KV raw to the swap
 * file, weight blocks dropped. NULL on OOM. */
MZ_INTERNAL mz_policy *mz_policy_layer_init(const mz_policy_params *prm);

/* Sets the manager parameters a mode needs (before mz_mem_init). */
MZ_INTERNAL void mz_baseline_mem_params(mz_engine_mode mode, mz_mem_params *mp);

/* Called for every context once its manager exists (mode mzcache included: a
 * model whose weights are file-mapped for os-paging contexts accepts no
 * context of another mode, and the reverse). p: the caller's parameters
 * (strings still valid). Sets c->base. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_baseline_init(mz_ctx_t *c, const mz_ctx_params *p);
/* Before the KV cache and the manager go; NULL c->base is fine. */
MZ_INTERNAL void mz_baseline_free(mz_ctx_t *c);

/* The elastic-memory calls in the context's mode (not mzcache). */
MZ_INTERNAL MZ_NODISCARD mz_status mz_baseline_evict(mz_ctx_t *c, size_t nbytes,
                                                     mz_evict_report *r);
MZ_INTERNAL MZ_NODISCARD mz_status mz_baseline_restore(mz_ctx_t *c, mz_restore_report *r);
MZ_INTERNAL void mz_baseline_get_stats(const mz_ctx_t *c, mz_mem_stats *out);
/* mz_ctx_truncate calls it before the KV chunks beyond n_keep are freed (any
 * mode; NULL c->base is fine). */
MZ_INTERNAL void mz_baseline_kv_truncate(mz_ctx_t *c, size_t n_keep);
/* Called by mz_prefill before its forward pass: brings back what the mode
 * restores before computing (partial-offload: everything, sequentially;
 * recompute: the weights and the whole context, prefilled again). */
MZ_INTERNAL MZ_NODISCARD mz_status mz_baseline_before_prefill(mz_ctx_t *c);
/* mz_prefill_restore in the mode: restore the mode's way, then prefill; fills
 * the breakdown (restore_ms = time until everything needed was back). */
MZ_INTERNAL MZ_NODISCARD mz_status mz_baseline_prefill_restore(mz_ctx_t *c, const mz_token *t,
                                                               size_t n, mz_restore_timings *tm,
                                                               double t0);

/* ---- os_paging.c (used by baseline.c) ---- */
typedef struct mz_ospage mz_ospage;
MZ_INTERNAL MZ_NODISCARD mz_status mz_ospage_init(mz_ctx_t *c, const char *swap_dir,
                                                  mz_ospage **out);
MZ_INTERNAL void mz_ospage_free(mz_ctx_t *c, mz_ospage *op);
MZ_INTERNAL MZ_NODISCARD mz_status mz_ospage_evict(mz_ctx_t *c, mz_ospage *op, size_t nbytes,
                                                   mz_evict_report *r);
MZ_INTERNAL MZ_NODISCARD mz_status mz_ospage_restore(mz_ctx_t *c, mz_ospage *op,
                                                     mz_restore_report *r);
MZ_INTERNAL void mz_ospage_get_stats(const mz_ctx_t *c, mz_ospage *op, mz_mem_stats *out);
/* Forgets the file-backed state of the chunks that mz_ctx_truncate frees: a
 * chunk mapped again there is anonymous, even at the same address. */
MZ_INTERNAL void mz_ospage_kv_truncate(mz_ctx_t *c, mz_ospage *op, size_t n_keep);
/* Registry of models: check/attach a context of `mode` to model m (maps the
 * file for the first os-paging context), and detach it. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_ospage_model_attach(mz_model_t *m, mz_engine_mode mode);
MZ_INTERNAL void mz_ospage_model_detach(mz_model_t *m, mz_engine_mode mode);

/* Swap the kernel offers now: total bytes, and whether every active swap
 * device is zram. */
MZ_INTERNAL size_t mz_ospage_swap_total(bool *all_zram);

#endif
