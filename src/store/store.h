/*
 * store.h — the session store (public contract in include/mzcache.h,
 * "session store"): a per-user directory of stored sessions, each a manifest
 * (manifest.h) and a data file that is also the session's swap file.
 *
 * Files here:
 *   store.c          directory (0700, owner checked), model and tokenizer
 *                    identity, atomic manifest writes, list / delete / limit
 *   session_store.c  a session's attachment: write-behind worker, sync,
 *                    checkpoint, resume
 *
 * The store follows a session as its listener (mz_ctx_listener,
 * src/engine/engine.h: appends, truncations, free) and reaches it only
 * through the engine's narrow accessors (mz_ctx_get_parts ...); the engine
 * names nothing of the store. Hooks below the engine (marked [store]): the
 * clean-copy field of mz_unit and the mz_mem_store_* calls in
 * src/mem/manager.c; MZ_SWAP_PERSIST and slot import/info in
 * src/io/swapfile.c.
 *
 * Lock order: pass_lock (one write-behind pass at a time) -> att->mu (token
 * snapshot) -> mm->lock (inside mz_mem_store_*) -> swapfile lock.
 */
#ifndef MZ_STORE_H
#define MZ_STORE_H

#include "../core/core.h"
#include "manifest.h"

#include <limits.h>
#include <stdint.h>

struct mz_store {
    mz_engine_t *e;
    mz_store_params p;
    char dir[3968];            /* PATH_MAX less room for "/<id>.mzs.tmp" */
    uint64_t model_id, tok_id;
    int n_vocab;
    char codec[8];             /* "raw" or "q8": full chunks' records (manifest.h) */
};

/* Tests: the session's free will not write a last manifest (as after kill -9). */
MZ_INTERNAL void mz_sstore_test_abandon(mz_ctx_t *c);
/* Tests: how long full chunks may wait for a quiet engine before the
 * write-behind writes them beside the compute (default 10 s). */
MZ_INTERNAL void mz_sstore_test_max_defer_ms(double ms);
/* The request-side sync of `mzcache serve` (owner thread, between two
 * requests): writes the manifest now (every token; the full chunks that
 * have a clean copy already) and stages the partly filled last chunk, and
 * leaves the full chunks without a copy to the write-behind worker, which
 * writes them once the engine is quiet and then names them and the staged
 * tail in the next manifest. So the next request never waits for chunk
 * writes; a kill before the worker's manifest resumes from the chunks the
 * manifest on disk names and recomputes the tokens after them. Writes no
 * full chunk (test_store's checkpoint case counts the writes). */
MZ_INTERNAL MZ_NODISCARD mz_status mz_session_checkpoint(mz_ctx_t *c);

/* store.c, for session_store.c */
/* <dir>/<id><suffix> into buf; MZ_E_INVAL for a bad id. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_store_path(const mz_store_t *st, const char *id,
                                                 const char *suffix, char *buf, size_t cap);
/* Writes m to <id>.mzs atomically with the store's fsync policy. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_store_write_manifest(mz_store_t *st, const mz_manifest *m);
/* Reads and decodes <id>.mzs (strict). */
MZ_INTERNAL MZ_NODISCARD mz_status mz_store_read_manifest(mz_store_t *st, const char *id,
                                                          mz_manifest *m);
/* Removes <id>'s stored KV (manifest, data file) and leaves its chat
 * history (history.h): a session stored afresh under an id whose KV was
 * lost replaces that KV, while the history stays the conversation a kill
 * before the next turn's save must still find. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_store_delete_kv(mz_store_t *st, const char *id);
/* XXH64-chained hash of a file's bytes (8 MiB blocks); tests use it. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_store_hash_file(const char *path, uint64_t *out);
MZ_INTERNAL uint64_t mz_store_now_ns(void);

#endif /* MZ_STORE_H */
