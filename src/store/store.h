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
 *   prefix_index.c   the token index of stored sessions (which one a
 *                    request's tokens continue), kept current by the
 *                    store's own manifest writes and deletes
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
#include <pthread.h>
#include <stdint.h>

/* A stored session in the prefix index: the tokens of its last manifest. */
typedef struct mz_store_indexed {
    char id[64];
    mz_token *toks;            /* owned */
    size_t n;                  /* > 0 */
} mz_store_indexed;

struct mz_store {
    mz_engine_t *e;
    mz_store_params p;
    char dir[3968];            /* PATH_MAX less room for "/<id>.mzs.tmp" */
    uint64_t model_id, tok_id;
    int n_vocab;
    char codec[8];             /* "raw" or "q8": full chunks' records (manifest.h) */
    /* The prefix index (prefix_index.c; NULL idx: none opened). idx_mu
     * guards it: write-behind workers write manifests too. Order: least
     * recently written first (a write moves its entry to the end). */
    pthread_mutex_t idx_mu;
    char idx_prefix[64];
    mz_store_indexed *idx;     /* [idx_cap]; [0, n_idx) */
    size_t n_idx, idx_cap;
};

/* ---- the prefix index (prefix_index.c) ----
 *
 * Which stored session a request's tokens continue, answered without
 * reading a manifest per request (the daemon's routing of anonymous
 * requests). The index holds the sessions whose id starts with the prefix
 * it was opened with, each with the tokens of its last manifest: built from
 * the manifests when opened, updated by every manifest the store writes,
 * and forgotten when the store deletes a session (mz_store_delete, the
 * limit, a session stored afresh) or a resume of it fails (it is offered
 * again after its next manifest or the store's next open). At most cap
 * entries: a new one past them replaces the one with the fewest tokens (it
 * saves the least). */

/* Opens the index of the stored sessions (readable, of this model, holding
 * tokens) whose id starts with id_prefix, at most cap of them. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_store_index_open(mz_store_t *st, const char *id_prefix,
                                                       size_t cap);
/* How many sessions the index holds (0 without one). */
MZ_INTERNAL size_t mz_store_index_size(mz_store_t *st);
/* The indexed session whose tokens are the longest prefix of toks[0, n)
 * shorter than n, passing over ids skip (may be NULL) answers true for; on
 * equal lengths the one whose manifest was written first. false: none
 * (id_out ""). skip is called with the index's lock held, so that the
 * candidates need no copy: it must not call into the store (manifest
 * writes, deletes and finds take that lock), and may take only locks that
 * are never held while calling into the store (the daemon's asks the
 * engine's session list). */
MZ_INTERNAL bool mz_store_find_prefix(mz_store_t *st, const mz_token *toks, size_t n,
                                      bool (*skip)(void *user, const char *id), void *user,
                                      char *id_out, size_t cap, size_t *n_match);
/* store.c and session_store.c keep the index current: id's last manifest
 * now holds toks[0, n) (n == 0: it is left out), or id is gone. */
MZ_INTERNAL void mz_store_index_note(mz_store_t *st, const char *id, const mz_token *toks, size_t n);
MZ_INTERNAL void mz_store_index_forget(mz_store_t *st, const char *id);
MZ_INTERNAL void mz_store_index_close(mz_store_t *st);

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
/* Whether stored session id has a manifest (false for a bad id). */
MZ_INTERNAL bool mz_store_has(const mz_store_t *st, const char *id);
/* Every stored session, oldest first (*out malloc'ed): mz_store_list's entries. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_store_list_all(mz_store_t *st, mz_stored_session **out,
                                                     size_t *n_out);
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
