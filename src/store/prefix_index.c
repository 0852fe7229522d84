/*
 * prefix_index.c — the store's token index of stored sessions (store.h,
 * "the prefix index"): which stored session a request's tokens continue.
 *
 * The store owns the stored sessions and their manifests, so it keeps the
 * index itself: every manifest it writes (mz_store_write_manifest) puts the
 * tokens it wrote, every delete takes the session out. Entries stay in the
 * order their manifests were written (least recently written first), which
 * decides between equal lengths and, among the entries with the fewest
 * tokens, which one a full index replaces.
 *
 * Invariants (under st->idx_mu): ids unique; every entry's id starts with
 * idx_prefix and holds n > 0 tokens; n_idx <= idx_cap.
 *
 * idx_mu is held only inside this file, around work on the index and the
 * find's skip callback; skip never calls into the store, and nothing holds
 * a lock skip may take (the engine's session list) while it calls into the
 * store, so idx_mu comes first and no cycle can form.
 */
#include "store.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(mz_token) == sizeof(int32_t), "a manifest's tokens are mz_tokens");

static bool indexed_id(const mz_store_t *st, const char *id)
{
    return st->idx && id && !strncmp(id, st->idx_prefix, strlen(st->idx_prefix));
}

/* Removes entry i, keeping the order of the rest; returns its tokens. */
static mz_token *take_locked(mz_store_t *st, size_t i)
{
    mz_token *toks = st->idx[i].toks;
    memmove(&st->idx[i], &st->idx[i + 1], (st->n_idx - i - 1) * sizeof *st->idx);
    st->n_idx--;
    return toks;
}

static long find_locked(const mz_store_t *st, const char *id)
{
    for (size_t i = 0; i < st->n_idx; i++)
        if (!strcmp(st->idx[i].id, id)) return (long)i;
    return -1;
}

/* id's entry becomes toks[0, n), written last; n == 0 removes it. Out of
 * memory leaves the session out: routing then misses it, nothing breaks. */
static void note_locked(mz_store_t *st, const char *id, const mz_token *toks, size_t n)
{
    long at = find_locked(st, id);
    mz_token *buf = at >= 0 ? take_locked(st, (size_t)at) : NULL;
    mz_token *copy = n ? realloc(buf, n * sizeof *copy) : NULL;
    if (!copy) {
        free(buf);
        return;
    }
    memcpy(copy, toks, n * sizeof *copy);
    if (st->n_idx == st->idx_cap) {
        size_t small = 0;
        for (size_t i = 1; i < st->n_idx; i++)
            if (st->idx[i].n < st->idx[small].n) small = i;
        free(take_locked(st, small));
    }
    mz_store_indexed *e = &st->idx[st->n_idx++];
    snprintf(e->id, sizeof e->id, "%s", id);
    e->toks = copy;
    e->n = n;
}

void mz_store_index_note(mz_store_t *st, const char *id, const mz_token *toks, size_t n)
{
    if (!st) return;
    pthread_mutex_lock(&st->idx_mu);
    if (indexed_id(st, id)) note_locked(st, id, toks, n);
    pthread_mutex_unlock(&st->idx_mu);
}

void mz_store_index_forget(mz_store_t *st, const char *id) { mz_store_index_note(st, id, NULL, 0); }

mz_status mz_store_index_open(mz_store_t *st, const char *id_prefix, size_t cap)
{
    if (!st || !id_prefix || !cap || strlen(id_prefix) >= sizeof st->idx_prefix)
        return mz_fail(MZ_E_INVAL, "store index: bad prefix or size");
    mz_stored_session *v = NULL;
    size_t n = 0;
    mz_status s = mz_store_list_all(st, &v, &n);
    if (s) return s;
    mz_store_indexed *idx = calloc(cap, sizeof *idx);
    if (!idx) {
        free(v);
        return mz_fail(MZ_E_NOMEM, "out of memory (store index)");
    }
    pthread_mutex_lock(&st->idx_mu);
    if (st->idx) {
        pthread_mutex_unlock(&st->idx_mu);
        free(idx);
        free(v);
        return mz_fail(MZ_E_INVAL, "store index: open already");
    }
    st->idx = idx;
    st->idx_cap = cap;
    st->n_idx = 0;
    snprintf(st->idx_prefix, sizeof st->idx_prefix, "%s", id_prefix);
    /* oldest first: the order their manifests were written */
    for (size_t i = 0; i < n; i++) {
        if (!indexed_id(st, v[i].id) || !v[i].readable || !v[i].same_model) continue;
        mz_manifest m;
        if (mz_store_read_manifest(st, v[i].id, &m) != MZ_OK) {
            mz_clear_error(); /* gone or replaced since the listing: its next manifest puts it */
            continue;
        }
        note_locked(st, v[i].id, (const mz_token *)m.tokens, m.n_tokens);
        mz_manifest_clear(&m);
    }
    pthread_mutex_unlock(&st->idx_mu);
    free(v);
    return MZ_OK;
}

size_t mz_store_index_size(mz_store_t *st)
{
    if (!st) return 0;
    pthread_mutex_lock(&st->idx_mu);
    size_t n = st->n_idx;
    pthread_mutex_unlock(&st->idx_mu);
    return n;
}

bool mz_store_find_prefix(mz_store_t *st, const mz_token *toks, size_t n,
                          bool (*skip)(void *user, const char *id), void *user,
                          char *id_out, size_t cap, size_t *n_match)
{
    if (id_out && cap) id_out[0] = '\0';
    if (n_match) *n_match = 0;
    if (!st || !toks || !n) return false;
    /* skip runs under the lock (store.h: it must not call into the store),
     * so the candidates are read in place, never copied per request. */
    pthread_mutex_lock(&st->idx_mu);
    /* the longest; on equal lengths the first (written first) */
    const mz_store_indexed *best = NULL;
    for (size_t i = 0; i < st->n_idx; i++) {
        const mz_store_indexed *e = &st->idx[i];
        if (e->n < n && (!best || e->n > best->n) && mz_tokens_common_prefix(e->toks, e->n, toks, n) == e->n &&
            !(skip && skip(user, e->id)))
            best = e;
    }
    if (best) {
        if (id_out && cap) snprintf(id_out, cap, "%s", best->id);
        if (n_match) *n_match = best->n;
    }
    pthread_mutex_unlock(&st->idx_mu);
    return best != NULL;
}

void mz_store_index_close(mz_store_t *st)
{
    pthread_mutex_lock(&st->idx_mu);
    while (st->n_idx) free(take_locked(st, st->n_idx - 1));
    free(st->idx);
    st->idx = NULL;
    st->idx_cap = 0;
    pthread_mutex_unlock(&st->idx_mu);
}
