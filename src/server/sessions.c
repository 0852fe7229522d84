/*
 * sessions.c — how a request finds its conversation: up to max_sessions
 * sessions of the daemon's engine, found by id or by the longest prefix
 * (in memory, or stored: the store's prefix index answers), least-recently-
 * used forgetting, and the calls that hand eviction, restore and the budget
 * to the engine (docs/SERVER.md "Sessions").
 *
 * The engine's session list is the one list of conversations: a session's
 * id is its engine name (mz_session_set_name, the one id rule), the order
 * is the engine's list, the LRU the engine's clock; the daemon keeps only
 * its notes on each (srv_session, the session's user data, freed with it)
 * and the number of the last anonymous id (routing policy). The stored
 * sessions, their files and their tokens are the store's: the daemon asks
 * it (mz_store_has, mz_store_find_prefix) and keeps no table of them.
 *
 * Invariants (all under the engine gate):
 *   - every session of s->engine carries its srv_session; the engine has at
 *     most max_sessions between gate holders (a new session is created
 *     before the one it replaces is freed). It may have none: the weights
 *     are the engine's, which outlives every session.
 *   - s->ctx is the current session while the gate is held by a
 *     completion, and the most recently used one otherwise.
 *   - A session's token history is its context's (mz_ctx_tokens); routing
 *     reads it, never a copy, so cached_tokens is always the prefix actually
 *     kept.
 *
 * The sessions are sessions of the daemon's engine (mz_session_create on
 * s->engine, made at start): eviction for the pressure monitor, the
 * API and the budget is one mz_engine_evict plan over every session's KV and
 * the shared weights (least recently used sessions first, the one just used
 * last, weights where dropping them is cheaper than the KV that would go).
 */
#include "server/server_impl.h"
#include "server/request.h"

#include "core/core.h"
#include "store/manifest.h"
#include "store/store.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The engine's sessions are walked with mz_engine_for_each_session: one
 * walk under the engine's lock. The *_visit callbacks below only read the
 * session they are given (its name, user data, tokens, last use), as the
 * walk's locking rule allows; what renames, frees or asks the session's
 * memory runs after the walk. */

/* The engine's last-use clock of a session (one LRU: the engine's). */
static uint64_t last_use(const mz_ctx_t *c) { return mz_ctx_last_use_ns(c); }

/* The most recently used session, and the least recently used one other
 * than except (NULL: none). */
typedef struct lru_walk {
    const mz_ctx_t *except;
    mz_ctx_t *most, *least;
} lru_walk;

static bool lru_visit(mz_ctx_t *c, void *walk)
{
    lru_walk *w = walk;
    if (!w->most || last_use(c) > last_use(w->most)) w->most = c;
    if (c != w->except && (!w->least || last_use(c) < last_use(w->least))) w->least = c;
    return true;
}

static lru_walk lru_of(const mz_server_t *s, const mz_ctx_t *except)
{
    lru_walk w = {.except = except};
    (void)mz_engine_for_each_session(s->engine, lru_visit, &w);
    return w;
}

static mz_ctx_t *most_recent(const mz_server_t *s) { return lru_of(s, NULL).most; }
static mz_ctx_t *least_recent(const mz_server_t *s, const mz_ctx_t *except) { return lru_of(s, except).least; }

static bool is_anon(const char *id) { return !strncmp(id, MZ_SESSION_ANON_PREFIX, sizeof MZ_SESSION_ANON_PREFIX - 1); }

/* Whether the client chose the session's id (X-Session-Id or "user"):
 * every other id is an anonymous one, which no client may choose. */
static bool is_named(const mz_ctx_t *c) { return !is_anon(mz_session_name(c)); }

static bool too_many(const mz_server_t *s, size_t extra)
{
    return mz_engine_n_sessions(s->engine) >= (size_t)s->p.max_sessions + extra;
}

/* The daemon's wall-clock last use, for /mz/sessions; which session is
 * least recently used is the engine's clock (last_use). */
static void touch(srv_session *ss) { ss->last_use_unix = srv_unix_now(); }

/* ---- anonymous ids and the store ----------------------------------------------------------- */

/* The next anonymous id (MZ_SESSION_ANON_PREFIX and a number past every one
 * given or stored: anon_ids_after_stored reads the stored ones). */
static void anon_id_next(mz_server_t *s, char *id, size_t cap)
{
    snprintf(id, cap, MZ_SESSION_ANON_PREFIX "%lu", ++s->next_anon);
}

/* At start: new anonymous ids continue after the largest stored one (the
 * store's listing v[0, k)). */
static void anon_ids_after_stored(mz_server_t *s, const mz_stored_session *v, size_t k)
{
    for (size_t i = 0; i < k; i++) {
        if (!is_anon(v[i].id)) continue;
        char *end = NULL;
        unsigned long num = strtoul(v[i].id + sizeof MZ_SESSION_ANON_PREFIX - 1, &end, 10);
        if (end && !*end && num > s->next_anon) s->next_anon = num;
    }
}

/* Prefix routing passes over the stored sessions in memory. */
static bool in_memory(void *server, const char *id)
{
    return mz_engine_find_session(((mz_server_t *)server)->engine, id) != NULL;
}

/* The store over its limit: the least recently used sessions not in use go
 * (mz_store_enforce_limit; its index forgets them). */
static void store_limit(mz_server_t *s)
{
    size_t n_del = 0;
    if (!s->p.store_limit_bytes || mz_store_enforce_limit(s->store, &n_del) || !n_del) {
        mz_clear_error();
        return;
    }
    srv_log(s, "store: over its limit (%.0f MiB): %zu least recently used sessions deleted",
            (double)s->p.store_limit_bytes / 1048576.0, n_del);
}

/* A new session named id (NULL or "": the next anonymous id) with its
 * notes. ctx: a context made already (a resumed session), or NULL to make
 * one; on failure it is freed. */
static mz_status session_new(mz_server_t *s, const char *id, mz_ctx_t *ctx, mz_ctx_t **out)
{
    *out = NULL;
    mz_ctx_t *c = ctx;
    mz_status st = c ? MZ_OK : mz_session_create(s->engine, &s->ctx_params, &c);
    char anon[SRV_SESSION_ID_MAX + 1];
    if (!st && !(id && *id)) {
        anon_id_next(s, anon, sizeof anon);
        id = anon;
    }
    /* A resumed anonymous session keeps its stored id and stays anonymous. */
    if (!st) st = mz_session_set_name(c, id);
    srv_session *ss = st ? NULL : calloc(1, sizeof *ss);
    if (!st && !ss) st = mz_fail(MZ_E_NOMEM, "out of memory");
    if (st) {
        srv_log(s, "cannot create a session: %s", mz_last_error());
        mz_ctx_free(c);
        return st;
    }
    ss->created_unix = srv_unix_now();
    ss->last_ttft_ms = -1;
    touch(ss);
    mz_session_set_user_data(c, ss, free);
    *out = c;
    pthread_mutex_lock(&s->snap_mu);
    s->n_sessions_created++;
    pthread_mutex_unlock(&s->snap_mu);
    return MZ_OK;
}

/* Frees session c (its swap slots, stack items and KV go at once, its
 * notes with it). */
static void session_remove(mz_server_t *s, mz_ctx_t *c)
{
    /* A stored session's last manifest (written as it is freed) keeps it
     * findable by its tokens in the store's index. */
    if (s->cur == c) s->cur = NULL;
    mz_ctx_free(c);
    s->ctx = s->cur ? s->cur : most_recent(s);
}

mz_status srv_sessions_init(mz_server_t *s)
{
    s->snap_sess = calloc((size_t)s->p.max_sessions + 1, sizeof *s->snap_sess);
    if (!s->snap_sess) return mz_fail(MZ_E_NOMEM, "serve: out of memory");
    s->cur = NULL;
    mz_status st = session_new(s, NULL, NULL, &s->ctx);
    if (st) return st;
    s->n_ctx = mz_ctx_n_ctx(s->ctx);
    return MZ_OK;
}

/* The first session of a walk (the walk's out: mz_ctx_t *). */
static bool first_visit(mz_ctx_t *c, void *out)
{
    *(mz_ctx_t **)out = c;
    return false;
}

void srv_sessions_free(mz_server_t *s)
{
    for (;;) {
        mz_ctx_t *c = NULL;
        if (s->engine) (void)mz_engine_for_each_session(s->engine, first_visit, &c);
        if (!c) break;
        mz_ctx_free(c);
    }
    s->ctx = NULL;
    s->cur = NULL;
    free(s->snap_sess);
    s->snap_sess = NULL;
}

/* ---- the session store ------------------------------------------------------------------ */

mz_status srv_store_open(mz_server_t *s)
{
    mz_store_params sp = mz_store_params_default();
    sp.dir = s->p.store_dir;
    sp.fsync = s->p.store_fsync;
    sp.codec = s->p.store_codec;
    sp.limit_bytes = s->p.store_limit_bytes;
    s->snap_stored = calloc(SRV_MAX_STORED, sizeof *s->snap_stored);
    if (!s->snap_stored) return mz_fail(MZ_E_NOMEM, "serve: out of memory");
    mz_status st = mz_store_open(s->engine, &sp, &s->store);
    if (st) return st;
    /* Anonymous conversations are found again by their tokens (routing);
     * opened before the limit, whose deletes it forgets. */
    if (mz_store_index_open(s->store, MZ_SESSION_ANON_PREFIX, SRV_MAX_STORED))
        srv_log(s, "store: anonymous sessions cannot be found by their tokens: %s", mz_last_error());
    size_t n_del = 0;
    if (mz_store_enforce_limit(s->store, &n_del)) srv_log(s, "store: --store-limit: %s", mz_last_error());
    else if (n_del) srv_log(s, "store: over --store-limit: %zu oldest sessions deleted", n_del);
    mz_stored_session *v = s->snap_stored;
    size_t n = mz_store_list(s->store, v, SRV_MAX_STORED), k = n < SRV_MAX_STORED ? n : SRV_MAX_STORED;
    size_t n_same = 0;
    for (size_t i = 0; i < k; i++) {
        if (!v[i].readable) srv_log(s, "store: session %s refused: its manifest is unreadable (corrupt)", v[i].id);
        else if (!v[i].same_model) srv_log(s, "store: session %s refused: made with another model or tokenizer", v[i].id);
        else {
            srv_log(s, "store: session %s (%zu tokens) can be resumed", v[i].id, v[i].n_tokens);
            n_same++;
        }
    }
    anon_ids_after_stored(s, v, k);
    char limit[48] = "no limit";
    if (s->p.store_limit_bytes >= 1048576)
        snprintf(limit, sizeof limit, "limit %.0f MiB", (double)s->p.store_limit_bytes / 1048576.0);
    else if (s->p.store_limit_bytes)
        snprintf(limit, sizeof limit, "limit %llu bytes", (unsigned long long)s->p.store_limit_bytes);
    srv_log(s, "store: %s, %zu sessions of this model (%zu anonymous, found again by their tokens), %zu refused, "
            "%s, fsync %s, codec %s", mz_store_dir(s->store), n_same, mz_store_index_size(s->store), n - n_same, limit,
            mz_fsync_policy_name(s->p.store_fsync), s->p.store_codec ? s->p.store_codec : "raw");
    return MZ_OK;
}

void srv_store_close(mz_server_t *s)
{
    mz_store_close(s->store); /* after srv_sessions_free: every stored session is detached */
    s->store = NULL;
    free(s->snap_stored);
    s->snap_stored = NULL;
}

/* The request's tokens past the stored ones, when the stored tokens are a
 * prefix of the request's toks[0, n) (NULL otherwise): they go into the
 * resume's pipelined pass, so a restart's first request computes while the
 * stored chunks arrive instead of after the last one. */
static const mz_token *request_past_stored(mz_server_t *s, const char *id, const mz_token *toks,
                                           size_t n, size_t *n_past)
{
    *n_past = 0;
    mz_manifest m;
    if (!toks || mz_store_read_manifest(s->store, id, &m) != MZ_OK) {
        mz_clear_error();
        return NULL;
    }
    size_t k = m.n_tokens;
    bool prefix = k < n && mz_tokens_common_prefix((const mz_token *)m.tokens, k, toks, n) == k;
    mz_manifest_clear(&m);
    if (!prefix) return NULL;
    *n_past = n - k;
    return toks + k;
}

/* A named session not in memory: resume it from the store if it is there.
 * Returns 1 with *out set (resumed, full or truncated), 0 when it is to start
 * empty and be stored, -1 when it is to start empty and NOT be stored (its
 * files belong to another model and are kept). *n_fresh gets the request's
 * tokens the resume prefilled (the end of *out's context). */
static int store_resume(mz_server_t *s, const char *id, const mz_token *toks, size_t n,
                        mz_ctx_t **out, size_t *n_fresh, size_t *n_restored)
{
    *n_fresh = 0;
    *n_restored = 0;
    *out = NULL;
    if (!mz_store_has(s->store, id)) return 0;
    mz_resume_info ri;
    memset(&ri, 0, sizeof ri);
    size_t n_past = 0;
    const mz_token *past = request_past_stored(s, id, toks, n, &n_past);
    mz_status st = MZ_E_INVAL;
    if (past) {
        st = mz_session_resume_prefill(s->store, id, &s->ctx_params, past, n_past, out, &ri);
        if (st == MZ_OK) *n_fresh = n_past;
        /* Whatever failed with the request's tokens (a context too small
         * for them), the plain resume decides what the session is: the
         * request then fails or succeeds as it would without them. */
    }
    if (st != MZ_OK) {
        memset(&ri, 0, sizeof ri);
        st = mz_session_resume(s->store, id, &s->ctx_params, out, &ri);
    }
    if (st == MZ_OK) {
        size_t n_stored = ri.n_tokens - *n_fresh;
        *n_restored = n_stored > ri.n_tokens_recomputed ? n_stored - ri.n_tokens_recomputed : 0;
        if (ri.outcome == MZ_RESUME_TRUNCATED)
            srv_log(s, "session %s resumed TRUNCATED: %zu tokens, %zu of %zu stored chunks restored, %zu tokens "
                    "recomputed, %zu of the request's tokens in the same pass (%s)", id, ri.n_tokens - *n_fresh,
                    ri.n_chunks_restored, ri.n_chunks_stored, ri.n_tokens_recomputed, *n_fresh, ri.reason);
        else
            srv_log(s, "session %s resumed from the store: %zu tokens, %zu chunks restored, %zu tokens recomputed, "
                    "%zu of the request's tokens in the same pass, %.0f ms", id, ri.n_tokens - *n_fresh,
                    ri.n_chunks_restored, ri.n_tokens_recomputed, *n_fresh, ri.timings.ttft_ms);
        return 1;
    }
    *out = NULL;
    if (st == MZ_E_UNSUPPORTED) {
        srv_log(s, "session %s LOST: %s; it starts empty and is not stored (the files stay)", id,
                ri.reason[0] ? ri.reason : mz_last_error());
        return -1;
    }
    srv_log(s, "session %s LOST: %s; it starts empty and replaces the stored one", id,
            ri.reason[0] ? ri.reason : mz_last_error());
    return 0;
}

static void store_attach(mz_server_t *s, mz_ctx_t *c)
{
    if (mz_session_store(c, s->store, mz_session_name(c))) {
        srv_log(s, "session %s is not stored: %s", mz_session_name(c), mz_last_error());
        return;
    }
    srv_session_of(c)->stored = true;
}

/* A session a named request may take over (the walk's out: mz_ctx_t *):
 * anonymous, never stored and without tokens (the one made at start). */
static bool unused_visit(mz_ctx_t *c, void *out)
{
    if (is_named(c) || srv_session_of(c)->stored || mz_ctx_n_tokens(c) != 0) return true;
    *(mz_ctx_t **)out = c;
    return false;
}

/* The anonymous session a request's tokens continue: its whole history is
 * a prefix of them, or they keep at least the prompt of its last turn.
 * Of those, the one sharing the longest prefix (best tokens), the most
 * recently used among equals. */
typedef struct continue_walk {
    const mz_token *toks;
    size_t n;
    mz_ctx_t *pick;
    size_t best;
} continue_walk;

static bool continue_visit(mz_ctx_t *c, void *walk)
{
    continue_walk *w = walk;
    if (is_named(c)) return true;
    const srv_session *ss = srv_session_of(c);
    size_t nh = mz_ctx_n_tokens(c);
    size_t common = mz_ctx_common_prefix(c, w->toks, w->n);
    bool continues = common == nh || (ss->n_prompt_last > 0 && common >= ss->n_prompt_last);
    if (continues && (!w->pick || common > w->best || (common == w->best && last_use(c) > last_use(w->pick)))) {
        w->pick = c;
        w->best = common;
    }
    return true;
}

mz_status srv_session_route(mz_server_t *s, const char *id, const mz_token *toks, size_t n)
{
    mz_ctx_t *pick = NULL;
    mz_ctx_t *resumed = NULL;
    int in_store = 0; /* store_resume's answer for a named session not in memory */
    size_t n_fresh = 0, n_restored = 0;
    char anon_id[SRV_SESSION_ID_MAX + 1];
    if (id && *id) {
        pick = mz_engine_find_session(s->engine, id);
        if (pick && !is_named(pick)) pick = NULL;
        if (!pick && s->store) in_store = store_resume(s, id, toks, n, &resumed, &n_fresh, &n_restored);
        /* An unused anonymous session (the one made at start) is taken
         * over. The id is a client's (never anonymous) and no session's
         * name (mz_engine_find_session said so): the first one takes it. */
        if (!pick && !resumed) {
            mz_ctx_t *unused = NULL;
            (void)mz_engine_for_each_session(s->engine, unused_visit, &unused);
            if (unused && mz_session_set_name(unused, id) == MZ_OK) pick = unused;
            else mz_clear_error();
        }
    } else {
        /* The anonymous session this request continues: its whole history is
         * a prefix of the request, or the request keeps at least the prompt
         * of its last turn (a regenerated or re-rendered answer). A request
         * that would cut deeper into someone's history starts its own
         * session instead, so two conversations that share only a system
         * prompt never truncate each other. */
        continue_walk cw = {.toks = toks, .n = n};
        (void)mz_engine_for_each_session(s->engine, continue_visit, &cw);
        pick = cw.pick;
        size_t best = cw.best;
        /* A stored anonymous conversation (one that left memory, or one of
         * a daemon before a restart) that the request continues further:
         * its whole history a prefix of the request's tokens, and longer than
         * the one in memory. Found through the store's index, never by
         * reading manifests per request; a failed resume leaves the index. */
        size_t n_hit = 0;
        if (s->store && mz_store_find_prefix(s->store, toks, n, in_memory, s, anon_id, sizeof anon_id, &n_hit) &&
            n_hit > best) {
            if (store_resume(s, anon_id, toks, n, &resumed, &n_fresh, &n_restored) == 1) {
                pick = NULL;
                in_store = 1;
                id = anon_id;
            }
        }
    }
    /* Not with a store: each anonymous session is stored under its id. */
    if (!pick && !(id && *id) && !s->store && too_many(s, 0)) {
        /* Full, and the least recently used session is anonymous: it is
         * forgotten, but its context serves the new conversation, which keeps
         * whatever prefix the two share (with --max-sessions 1 this is the
         * single conversation of earlier versions). Named sessions are never
         * reused this way: cached_tokens would tell one client about
         * another's conversation. */
        mz_ctx_t *lru = least_recent(s, NULL);
        char old[SRV_SESSION_ID_MAX + 1], fresh[SRV_SESSION_ID_MAX + 1];
        snprintf(old, sizeof old, "%s", mz_session_name(lru));
        if (!is_named(lru)) anon_id_next(s, fresh, sizeof fresh);
        if (!is_named(lru) && mz_session_set_name(lru, fresh) == MZ_OK) {
            srv_session *ss = srv_session_of(lru);
            ss->created_unix = srv_unix_now();
            ss->n_prompt_last = 0;
            ss->last_ttft_ms = -1;
            ss->n_requests = 0;
            srv_log(s, "session %s forgotten (least recently used; %d sessions at most); its context starts %s",
                    old, s->p.max_sessions, fresh);
            pthread_mutex_lock(&s->snap_mu);
            s->n_sessions_forgotten++;
            s->n_sessions_created++;
            pthread_mutex_unlock(&s->snap_mu);
            pick = lru;
        }
    }
    if (!pick) {
        mz_status st = session_new(s, id, resumed, &pick);
        if (st) return st;
        if (resumed) srv_session_of(pick)->stored = true; /* mz_session_resume stores it again */
        if (too_many(s, 1)) {
            mz_ctx_t *lru = least_recent(s, pick);
            srv_log(s, "session %s forgotten (least recently used; %d sessions at most) for %s",
                    mz_session_name(lru), s->p.max_sessions, mz_session_name(pick));
            session_remove(s, lru);
            pthread_mutex_lock(&s->snap_mu);
            s->n_sessions_forgotten++;
            pthread_mutex_unlock(&s->snap_mu);
        }
    }
    srv_session *ss = srv_session_of(pick);
    if (s->store && !ss->stored && in_store == 0 && !resumed) {
        /* Anonymous conversations are stored too (within the store's limit),
         * so an unmodified client finds its conversation after a restart. */
        store_attach(s, pick);
        if (!is_named(pick)) store_limit(s);
    }
    ss->n_fresh = resumed ? n_fresh : 0;
    ss->resumed_now = resumed != NULL;
    ss->n_restored = resumed ? n_restored : 0;
    touch(ss);
    s->cur = pick;
    s->ctx = pick;
    pthread_mutex_lock(&s->snap_mu);
    snprintf(s->active_id, sizeof s->active_id, "%s", mz_session_name(pick));
    pthread_mutex_unlock(&s->snap_mu);
    return MZ_OK;
}

void srv_session_done(mz_server_t *s, const srv_timings *tm)
{
    if (!s->cur) return;
    srv_session *ss = srv_session_of(s->cur);
    ss->n_prompt_last = tm->n_prompt;
    if (tm->ttft_ms > 0) ss->last_ttft_ms = tm->ttft_ms;
    ss->n_requests++;
    touch(ss);
    /* A stored session's manifest (every token) and tail (the partly filled
     * chunk) now, under the gate (no request computes on it); its full
     * chunks are the write-behind's, written while the engine is quiet, so
     * the next request never waits for them. A daemon killed after the
     * worker's manifest resumes recomputing one token; one killed before it
     * recomputes the tokens after the chunks already written (ARCHITECTURE.md,
     * "Session store"). */
    if (s->store) {
        mz_status st = mz_session_checkpoint(s->cur);
        if (st && st != MZ_E_INVAL) srv_log(s, "session %s: sync: %s", mz_session_name(s->cur), mz_last_error());
        mz_clear_error();
    }
}

mz_status srv_session_delete(mz_server_t *s, const char *id)
{
    mz_ctx_t *loaded = mz_engine_find_session(s->engine, id);
    bool files = s->store && mz_store_has(s->store, id);
    if (!loaded && !files) return MZ_E_INVAL;
    /* The context goes first: it holds the data file's lock (in use). */
    if (loaded) session_remove(s, loaded);
    if (files) {
        mz_status st = mz_store_delete(s->store, id);
        if (st && st != MZ_E_INVAL) {
            srv_log(s, "session %s: its stored files could not be deleted: %s", id, mz_last_error());
            return st;
        }
    }
    pthread_mutex_lock(&s->snap_mu);
    s->n_sessions_deleted++;
    pthread_mutex_unlock(&s->snap_mu);
    return MZ_OK;
}

/* ---- memory ----------------------------------------------------------------------------- */

void srv_mem_stats(mz_server_t *s, mz_mem_stats *out)
{
    mz_engine_get_mem_stats(s->engine, out); /* weights once, KV and swap files summed */
}

size_t srv_footprint(mz_server_t *s) { return mz_engine_footprint(s->engine); }

mz_status srv_evict_sessions(mz_server_t *s, size_t nbytes, mz_evict_report *rep)
{
    memset(rep, 0, sizeof *rep);
    rep->bytes_requested = nbytes;
    mz_status st = mz_engine_evict(s->engine, nbytes, rep);
    if (st) srv_log(s, "eviction failed: %s", mz_last_error());
    return st;
}

mz_status srv_restore_sessions(mz_server_t *s, bool pipelined, mz_restore_report *rep,
                               mz_engine_restore_units *units)
{
    mz_engine_restore_params rp = {.pipelined = pipelined};
    mz_status st = mz_engine_restore(s->engine, &rp, rep, units);
    if (st) srv_log(s, "restore failed: %s", mz_last_error());
    return st;
}

void srv_enforce_budget(mz_server_t *s)
{
    mz_budget_report br;
    if (mz_engine_keep_budget(s->engine, &br)) srv_log(s, "budget: eviction failed: %s", mz_last_error());
    if (!br.evicted) {
        s->over_budget = false;
        return;
    }
    const double mib = 1048576.0, budget = (double)br.budget_bytes, fp = (double)br.after_bytes;
    if (br.over && !s->over_budget)
        srv_log(s, "budget %.1f MiB not reachable: %.1f MiB after evicting all it could", budget / mib, fp / mib);
    s->over_budget = br.over;
    srv_event ev = {.t_unix = srv_unix_now(), .requested = br.before_bytes - br.budget_bytes,
                    .freed = br.before_bytes > br.after_bytes ? br.before_bytes - br.after_bytes : 0,
                    .ms = br.time_ms};
    snprintf(ev.trigger, sizeof ev.trigger, "budget");
    snprintf(ev.what, sizeof ev.what, "%.1f of %.1f MiB", fp / mib, budget / mib);
    mz_mem_stats st;
    srv_mem_stats(s, &st);
    ev.remaining_pct = st.remaining_pct;
    pthread_mutex_lock(&s->snap_mu);
    s->n_budget_evictions++;
    s->budget_evicted_bytes += br.freed_bytes;
    pthread_mutex_unlock(&s->snap_mu);
    srv_record_event(s, &ev);
    if (s->p.verbose)
        srv_log(s, "budget: footprint %.1f -> %.1f MiB (budget %.1f MiB) in %.1f ms", (double)br.before_bytes / mib,
                fp / mib, budget / mib, br.time_ms);
}

/* Up to cap of the engine's sessions, in its order. */
typedef struct collect_walk {
    mz_ctx_t *v[SRV_MAX_SESSIONS + 1];
    size_t n, cap;
} collect_walk;

static bool collect_visit(mz_ctx_t *c, void *walk)
{
    collect_walk *w = walk;
    w->v[w->n++] = c;
    return w->n < w->cap;
}

void srv_sessions_snapshot(mz_server_t *s)
{
    mz_mem_stats agg;
    srv_mem_stats(s, &agg);
    mz_restore_timings rt;
    memset(&rt, 0, sizeof rt);
    if (s->ctx) mz_get_last_restore_timings(s->ctx, &rt);
    size_t n_tok = s->ctx ? mz_ctx_n_tokens(s->ctx) : 0;
    size_t fp = srv_footprint(s);
    /* The sessions first (their memory is asked after the walk: it waits
     * for each session, which the walk's rule forbids). */
    collect_walk cw = {.cap = (size_t)s->p.max_sessions + 1}; /* snap_sess's size; never more between gate holders */
    (void)mz_engine_for_each_session(s->engine, collect_visit, &cw);
    srv_session_snap tmp[SRV_MAX_SESSIONS + 1];
    int n = 0;
    for (size_t i = 0; i < cw.n; i++) {
        mz_ctx_t *c = cw.v[i];
        const srv_session *ss = srv_session_of(c);
        srv_session_snap *o = &tmp[n++];
        mz_mem_stats st;
        mz_get_mem_stats(c, &st);
        snprintf(o->id, sizeof o->id, "%s", mz_session_name(c));
        o->named = is_named(c);
        o->stored = ss->stored;
        o->stored_tokens = -1;
        o->n_tokens = mz_ctx_n_tokens(c);
        o->kv = st.kv;
        o->kv_out_of_window = st.kv_out_of_window;
        o->compstack_mapped_bytes = st.compstack_mapped_bytes;
        o->swap_file_bytes = st.swap_file_bytes;
        o->created_unix = ss->created_unix;
        o->last_use_unix = ss->last_use_unix;
        o->last_ttft_ms = ss->last_ttft_ms;
        o->n_requests = ss->n_requests;
    }
    pthread_mutex_lock(&s->snap_mu);
    s->stats = agg;
    s->restore = rt;
    s->ctx_tokens = n_tok;
    s->footprint = fp;
    memcpy(s->snap_sess, tmp, (size_t)n * sizeof *tmp);
    s->n_snap_sess = n;
    pthread_mutex_unlock(&s->snap_mu);
    /* The stored list is not re-read here: reading every manifest would
     * delay the next request; GET /mz/sessions and /mz/status re-read it. */
}

void srv_store_snapshot(mz_server_t *s)
{
    if (!s->store) return;
    /* The directory is read without any lock (manifests are replaced by
     * rename, so each is read whole or not at all); then merged under snap_mu
     * with the loaded sessions' snapshot. */
    mz_stored_session *v = malloc(SRV_MAX_STORED * sizeof *v);
    if (!v) return;
    size_t ns = mz_store_list(s->store, v, SRV_MAX_STORED);
    int n = (int)(ns < SRV_MAX_STORED ? ns : SRV_MAX_STORED), k = 0;
    pthread_mutex_lock(&s->snap_mu);
    for (int i = 0; i < s->n_snap_sess; i++) s->snap_sess[i].stored_tokens = -1;
    for (int j = 0; j < n; j++) {
        int loaded = -1;
        for (int i = 0; i < s->n_snap_sess && loaded < 0; i++)
            if (s->snap_sess[i].stored && !strcmp(s->snap_sess[i].id, v[j].id)) loaded = i;
        if (loaded >= 0) s->snap_sess[loaded].stored_tokens = (long)v[j].n_tokens;
        else s->snap_stored[k++] = v[j];
    }
    s->n_snap_stored = k;
    pthread_mutex_unlock(&s->snap_mu);
    free(v);
}
