/*
 * test_session_names.c — the engine's session list as the one list of
 * conversations (include/mzcache.h, "engine and sessions"): names, finding
 * by name, iteration and the caller's data on a session.
 *
 *   names       a name passes the one session-id rule or is refused with
 *               the old name kept; two sessions of an engine never share
 *               one; clearing frees it for another; mz_engine_sessions
 *               reports it
 *   find        by name, the right session; none for unknown, "" or NULL
 *               names, for a freed session's name, or on another engine
 *   walk        mz_engine_for_each_session: creation order; a freed
 *               session is skipped; a callback returning false ends the
 *               walk there; another engine's sessions are its own; a NULL
 *               engine or callback is MZ_E_INVAL, the callback not called
 *   user data   its destructor runs exactly once: when another pointer
 *               replaces it, at mz_ctx_free, at mz_engine_free; never for
 *               the same pointer set again; when it runs, the session is
 *               off the list already (find and the walk do not see it)
 *   threads     (TSan) renames on one thread while another finds, lists and
 *               walks: every name seen is one that was set
 */
#include "evict_util.h"

#include <pthread.h>

static const char *T = "test_session_names";

static mz_ctx_t *session(mz_engine_t *e)
{
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = 256;
    mz_ctx_t *c = NULL;
    if (mz_session_create(e, &cp, &c)) fprintf(stderr, "session: %s\n", mz_last_error());
    return c;
}

static void test_names(mz_engine_t *e)
{
    mz_ctx_t *a = session(e), *b = session(e);
    CHECK(a && b);
    if (!a || !b) return;
    CHECK(!strcmp(mz_session_name(a), ""));
    CHECK(mz_session_set_name(a, "conv-1") == MZ_OK);
    CHECK(!strcmp(mz_session_name(a), "conv-1"));
    /* The id rule: a path, a leading dot, a space, too long. */
    char longname[MZ_SESSION_ID_MAX + 2];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    const char *bad[] = {"../x", ".hidden", "a b", "a/b", longname};
    for (size_t i = 0; i < MZ_ARRAY_LEN(bad); i++) {
        CHECK_MSG(mz_session_set_name(a, bad[i]) == MZ_E_INVAL, "%s", bad[i]);
        CHECK(!strcmp(mz_session_name(a), "conv-1"));
    }
    longname[MZ_SESSION_ID_MAX] = '\0';
    CHECK(mz_session_set_name(b, longname) == MZ_OK);
    /* Unique within the engine; the daemon's anonymous ids are names too. */
    CHECK(mz_session_set_name(b, "conv-1") == MZ_E_INVAL);
    CHECK(!strcmp(mz_session_name(b), longname));
    CHECK(mz_session_set_name(a, "conv-1") == MZ_OK); /* its own name again */
    CHECK(mz_session_set_name(b, MZ_SESSION_ANON_PREFIX "3") == MZ_OK);
    CHECK(mz_session_set_name(a, NULL) == MZ_OK);
    CHECK(!strcmp(mz_session_name(a), ""));
    CHECK(mz_session_set_name(b, "conv-1") == MZ_OK); /* free again */
    CHECK(mz_session_set_name(a, "") == MZ_OK);        /* two unnamed sessions */
    mz_session_info info[4];
    size_t n = mz_engine_sessions(e, info, MZ_ARRAY_LEN(info));
    CHECK_EQ_INT(n, 2);
    bool seen = false;
    for (size_t i = 0; i < n && i < MZ_ARRAY_LEN(info); i++)
        if (info[i].ctx == b) seen = !strcmp(info[i].name, "conv-1");
        else CHECK(!strcmp(info[i].name, ""));
    CHECK(seen);
    mz_ctx_free(a);
    mz_ctx_free(b);
}

/* What a walk saw: the sessions in its order, up to stop_after of them
 * (0: all). */
typedef struct walk {
    mz_ctx_t *seen[8];
    size_t n, stop_after;
} walk;

static bool walk_visit(mz_ctx_t *c, void *p)
{
    walk *w = p;
    if (w->n < MZ_ARRAY_LEN(w->seen)) w->seen[w->n] = c;
    w->n++;
    return w->stop_after == 0 || w->n < w->stop_after;
}

static walk walk_of(mz_engine_t *e, size_t stop_after)
{
    walk w = {.stop_after = stop_after};
    CHECK(mz_engine_for_each_session(e, walk_visit, &w) == MZ_OK);
    return w;
}

static void test_find_and_iterate(mz_engine_t *e, mz_engine_t *other)
{
    mz_ctx_t *s[3];
    const char *names[3] = {"one", "two", "three"};
    for (int i = 0; i < 3; i++) {
        s[i] = session(e);
        CHECK(s[i] && mz_session_set_name(s[i], names[i]) == MZ_OK);
        if (!s[i]) return;
    }
    mz_ctx_t *o = session(other);
    CHECK(o && mz_session_set_name(o, "two") == MZ_OK); /* another engine: its own names */
    for (int i = 0; i < 3; i++) CHECK(mz_engine_find_session(e, names[i]) == s[i]);
    CHECK(mz_engine_find_session(other, "two") == o);
    CHECK(mz_engine_find_session(other, "one") == NULL);
    CHECK(mz_engine_find_session(e, "four") == NULL);
    CHECK(mz_engine_find_session(e, "") == NULL);
    CHECK(mz_engine_find_session(e, NULL) == NULL);
    CHECK(mz_engine_find_session(NULL, "one") == NULL);
    /* Creation order, each once. */
    walk w = walk_of(e, 0);
    CHECK_EQ_INT(w.n, 3);
    for (int i = 0; i < 3; i++) CHECK(w.seen[i] == s[i]);
    w = walk_of(other, 0);
    CHECK(w.n == 1 && w.seen[0] == o); /* another engine: its own list */
    /* A callback returning false ends the walk there. */
    w = walk_of(e, 1);
    CHECK(w.n == 1 && w.seen[0] == s[0]);
    w = walk_of(e, 2);
    CHECK(w.n == 2 && w.seen[0] == s[0] && w.seen[1] == s[1]);
    /* Bad arguments: an error, the callback not called. */
    w = (walk){0};
    CHECK(mz_engine_for_each_session(NULL, walk_visit, &w) == MZ_E_INVAL);
    CHECK(mz_engine_for_each_session(e, NULL, &w) == MZ_E_INVAL);
    CHECK_EQ_INT(w.n, 0);
    mz_clear_error();
    mz_ctx_free(s[1]);
    CHECK(mz_engine_find_session(e, "two") == NULL);
    w = walk_of(e, 0);
    CHECK(w.n == 2 && w.seen[0] == s[0] && w.seen[1] == s[2]);
    /* A freed session's name may be given again; the new session is last. */
    mz_ctx_t *again = session(e);
    CHECK(again && mz_session_set_name(again, "two") == MZ_OK);
    CHECK(mz_engine_find_session(e, "two") == again);
    w = walk_of(e, 0);
    CHECK(w.n == 3 && w.seen[0] == s[0] && w.seen[1] == s[2] && w.seen[2] == again);
    mz_ctx_free(again);
    mz_ctx_free(s[0]);
    mz_ctx_free(s[2]);
    mz_ctx_free(o);
    CHECK_EQ_INT(walk_of(e, 0).n, 0);
}

/* What a destructor saw: how often it ran, and whether its session was
 * still findable at that moment. */
typedef struct note {
    mz_engine_t *e;
    char name[16];
    int n_freed;
    bool listed_when_freed;
} note;

static bool note_visit(mz_ctx_t *c, void *p)
{
    note *n = p;
    if (!strcmp(mz_session_name(c), n->name)) n->listed_when_freed = true;
    return true;
}

static void note_free(void *p)
{
    note *n = p;
    n->n_freed++;
    n->listed_when_freed = mz_engine_find_session(n->e, n->name) != NULL;
    CHECK(mz_engine_for_each_session(n->e, note_visit, n) == MZ_OK);
}

static void test_user_data(mz_model_t *m)
{
    mz_engine_t *e = NULL;
    CHECK(mz_engine_create(m, NULL, &e) == MZ_OK);
    if (!e) return;
    note n1 = {.e = e, .name = "u1"}, n2 = {.e = e, .name = "u1"}, n3 = {.e = e, .name = "u3"};
    mz_ctx_t *a = session(e), *b = session(e);
    CHECK(a && b);
    if (!a || !b) {
        mz_engine_free(e);
        return;
    }
    CHECK(mz_session_user_data(a) == NULL);
    CHECK(mz_session_set_name(a, "u1") == MZ_OK && mz_session_set_name(b, "u3") == MZ_OK);
    mz_session_set_user_data(a, &n1, note_free);
    CHECK(mz_session_user_data(a) == &n1);
    mz_session_set_user_data(a, &n1, note_free); /* the same pointer: kept, not freed */
    CHECK_EQ_INT(n1.n_freed, 0);
    mz_session_set_user_data(a, &n2, note_free); /* replaced: the old one's destructor */
    CHECK_EQ_INT(n1.n_freed, 1);
    CHECK(n1.listed_when_freed); /* replaced, not freed with its session */
    CHECK(mz_session_user_data(a) == &n2);
    mz_ctx_free(a);
    CHECK_EQ_INT(n2.n_freed, 1);
    CHECK(!n2.listed_when_freed);
    CHECK_EQ_INT(n1.n_freed, 1);
    /* mz_engine_free frees the sessions left, data and all. */
    mz_session_set_user_data(b, &n3, note_free);
    mz_engine_free(e);
    CHECK_EQ_INT(n3.n_freed, 1);
    CHECK(!n3.listed_when_freed);
}

/* ---- threads: renames beside finds and listings --------------------------------- */

typedef struct race {
    mz_engine_t *e;
    mz_ctx_t *c;
    _Atomic bool stop;
    int bad;
} race;

/* A walk's callback: reads each name under the engine's lock. */
static bool race_visit(mz_ctx_t *c, void *p)
{
    race *r = p;
    if (strcmp(mz_session_name(c), "left") && strcmp(mz_session_name(c), "right")) r->bad++;
    return true;
}

static void *finder(void *p)
{
    race *r = p;
    while (!atomic_load(&r->stop)) {
        mz_ctx_t *c = mz_engine_find_session(r->e, "left");
        if (c && c != r->c) r->bad++;
        mz_session_info in[2];
        size_t n = mz_engine_sessions(r->e, in, 2);
        for (size_t i = 0; i < n && i < 2; i++)
            if (strcmp(in[i].name, "left") && strcmp(in[i].name, "right")) r->bad++;
        if (mz_engine_for_each_session(r->e, race_visit, r) != MZ_OK) r->bad++;
    }
    return NULL;
}

static void test_threads(mz_engine_t *e)
{
    race r = {.e = e, .c = session(e)};
    CHECK(r.c && mz_session_set_name(r.c, "left") == MZ_OK);
    if (!r.c) return;
    atomic_init(&r.stop, false);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, finder, &r) == 0);
    for (int i = 0; i < 2000; i++) CHECK(mz_session_set_name(r.c, i % 2 ? "left" : "right") == MZ_OK);
    atomic_store(&r.stop, true);
    pthread_join(th, NULL);
    CHECK_EQ_INT(r.bad, 0);
    mz_ctx_free(r.c);
}

int main(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s", t_tmp_path("session_names.gguf"));
    if (ev_gen_tiny(path, 2)) return t_skip(T, "cannot generate the tiny model (the real model's vocabulary is missing)");
    mz_model_t *m = ev_load(path), *m2 = ev_load(path);
    if (!m || !m2) return 1;
    mz_engine_t *e = NULL, *e2 = NULL;
    CHECK(mz_engine_create(m, NULL, &e) == MZ_OK);
    CHECK(mz_engine_create(m2, NULL, &e2) == MZ_OK);
    if (e && e2) {
        test_names(e);
        test_find_and_iterate(e, e2);
        test_threads(e);
    }
    mz_engine_free(e);
    mz_engine_free(e2);
    test_user_data(m);
    mz_model_free(m);
    mz_model_free(m2);
    return t_done(T);
}
