/*
 * session_names.c — what makes the engine's session list the one list of
 * conversations (include/mzcache.h, "engine and sessions"): the session-id
 * rule, a session's name (unique among its engine's sessions), finding a
 * session by name, walking the list (one walk under e->lock; the caller's
 * callback must not take it again), and a caller's data hung on a session
 * (the daemon's per-request annotations), freed when the session goes.
 *
 * Names are written and compared under e->lock, so mz_engine_find_session
 * and mz_engine_sessions (any thread) never see a half-written one. The
 * user data belongs to the session's user thread; the engine only keeps it
 * and calls its destructor.
 */
#define _GNU_SOURCE
#include "engine.h"

#include <string.h>

bool mz_session_id_valid(const char *id)
{
    if (!id || !id[0] || id[0] == '.' || id[0] == '-') return false;
    size_t n = 0;
    for (; id[n]; n++) {
        char ch = id[n];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                  ch == '_' || ch == '-' || ch == '.' || ch == ':' || ch == '@' || ch == '+';
        if (!ok || n >= MZ_SESSION_ID_MAX) return false;
    }
    return true;
}

const char *mz_session_id_check(const char *id, bool allow_anon)
{
    if (!mz_session_id_valid(id))
        return "a session id is 1 to 63 characters of A-Z a-z 0-9 _ . - : @ +, not starting with . or -";
    if (!allow_anon && !strncmp(id, MZ_SESSION_ANON_PREFIX, sizeof MZ_SESSION_ANON_PREFIX - 1))
        return "session ids beginning with \"anon-\" are the daemon's anonymous conversations";
    return NULL;
}

/* The session named name on e's list (caller holds e->lock). */
static mz_ctx_t *named_locked(mz_engine_t *e, const char *name)
{
    for (mz_ctx_t *c = e->sessions; c; c = c->next)
        if (!strcmp(c->name, name)) return c;
    return NULL;
}

mz_status mz_session_set_name(mz_ctx_t *c, const char *name)
{
    if (!c || !c->engine) return mz_fail(MZ_E_INVAL, "null session");
    if (!name) name = "";
    if (name[0] && !mz_session_id_valid(name))
        return mz_fail(MZ_E_INVAL, "bad session name \"%.80s\" (%s)", name, mz_session_id_check(name, true));
    mz_engine_t *e = c->engine;
    mz_status s = MZ_OK;
    pthread_mutex_lock(&e->lock);
    mz_ctx_t *other = name[0] ? named_locked(e, name) : NULL;
    if (other && other != c)
        s = mz_fail(MZ_E_INVAL, "another session of the engine is named \"%s\"", name);
    else
        memcpy(c->name, name, strlen(name) + 1);
    pthread_mutex_unlock(&e->lock);
    return s;
}

const char *mz_session_name(const mz_ctx_t *c) { return c ? c->name : ""; }

mz_ctx_t *mz_engine_find_session(mz_engine_t *e, const char *name)
{
    if (!e || !name || !name[0]) return NULL;
    pthread_mutex_lock(&e->lock);
    mz_ctx_t *c = named_locked(e, name);
    pthread_mutex_unlock(&e->lock);
    return c;
}

mz_status mz_engine_for_each_session(mz_engine_t *e, mz_session_visit_fn fn, void *user)
{
    if (!e || !fn) return mz_fail(MZ_E_INVAL, "for each session: null %s", e ? "callback" : "engine");
    pthread_mutex_lock(&e->lock);
    for (mz_ctx_t *c = e->sessions; c && fn(c, user); c = c->next) {}
    pthread_mutex_unlock(&e->lock);
    return MZ_OK;
}

void mz_session_set_user_data(mz_ctx_t *c, void *data, void (*free_data)(void *))
{
    if (!c) return;
    void *old = c->user_data;
    void (*old_free)(void *) = c->user_data_free;
    c->user_data = data;
    c->user_data_free = free_data;
    if (old_free && old && old != data) old_free(old);
}

void *mz_session_user_data(const mz_ctx_t *c) { return c ? c->user_data : NULL; }

void mz_session_free_user_data(mz_ctx_t *c)
{
    void *data = c->user_data;
    void (*free_data)(void *) = c->user_data_free;
    c->user_data = NULL;
    c->user_data_free = NULL;
    if (free_data && data) free_data(data);
}
