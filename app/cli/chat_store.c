/*
 * chat_store.c — `mzcache chat --session NAME` (chat_store.h).
 */
#include "chat_store.h"

#include "../../src/store/history.h"
#include "core/parse.h"
#include "server/server.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int chat_store_option(chat_store *cs, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--session") || !strcmp(a, "--store") || !strcmp(a, "--fsync") ||
        !strcmp(a, "--store-limit") || !strcmp(a, "--store-codec")) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "mzcache chat: %s wants a value\n", a);
            return -1;
        }
        const char *v = argv[++*i];
        if (!strcmp(a, "--session")) cs->session = v;
        else if (!strcmp(a, "--store")) cs->dir = v;
        else if (!strcmp(a, "--store-codec")) {
            if (strcmp(v, "raw") != 0 && strcmp(v, "q8") != 0) {
                fprintf(stderr, "mzcache chat: --store-codec wants raw or q8, not '%s'\n", v);
                return -1;
            }
            cs->codec = v;
        }
        else if (!strcmp(a, "--store-limit")) {
            size_t lim;
            if (mz_parse_size(v, &lim)) { /* the parser serve's size options use */
                fprintf(stderr, "mzcache chat: --store-limit wants a size (e.g. 2G)\n");
                return -1;
            }
            cs->limit = (uint64_t)lim;
        }
        else if (mz_fsync_policy_parse(v, &cs->fsync)) {
            fprintf(stderr, "mzcache chat: %s\n", mz_last_error());
            return -1;
        }
        return 1;
    }
    return 0;
}

const char *chat_store_help(void)
{
    return "      --session NAME      keep this conversation in the session store and resume it\n"
           "                          the next time (restored, not recomputed)\n"
           "      --store DIR         session store (default $XDG_STATE_HOME/mzcache, else\n"
           "                          ~/.local/state/mzcache)\n"
           "      --store-limit SIZE  keep the store under SIZE (K/M/G): oldest sessions go\n"
           "      --fsync POLICY      none, batch (default: fsync before each manifest) or always\n"
           "      --store-codec C     raw (default: exact) or q8 (about half the bytes on disk; a\n"
           "                          chunk restored from the store holds its q8 round trip)\n";
}

void chat_store_prefetch(const chat_store *cs)
{
    mz_store_params sp = mz_store_params_default();
    sp.dir = cs->dir;
    /* a hint only: a missing session is started anew by chat_store_open */
    mz_status s = mz_store_prefetch(&sp, cs->session);
    (void)s;
}

int chat_store_open(chat_store *cs, mz_model_t *m, const mz_ctx_params *cp, mz_ctx_t **ctx,
                    int (*add)(void *u, const char *role, const char *content), void *u)
{
    mz_engine_params ep = mz_engine_params_default();
    ep.n_threads = cp->n_threads;
    ep.swap_dir = cp->swap_dir;
    ep.profile_path = cp->profile_path;
    mz_store_params sp = mz_store_params_default();
    sp.dir = cs->dir;
    sp.fsync = cs->fsync;
    sp.limit_bytes = cs->limit;
    sp.codec = cs->codec;
    if (mz_engine_create(m, &ep, &cs->engine) || mz_store_open(cs->engine, &sp, &cs->store)) {
        fprintf(stderr, "mzcache: session store: %s\n", mz_last_error());
        return -1;
    }
    size_t n_del = 0;
    if (cs->limit && mz_store_enforce_limit(cs->store, &n_del) == MZ_OK && n_del)
        fprintf(stderr, "(session store over --store-limit: %zu oldest sessions deleted)\n", n_del);
    mz_resume_info ri;
    if (mz_session_resume(cs->store, cs->session, cp, ctx, &ri) == MZ_OK) {
        fprintf(stderr, "(session %s resumed: %zu tokens, %zu of %zu stored chunks restored in "
                "%.0f ms%s%s)\n", cs->session, ri.n_tokens, ri.n_chunks_restored,
                ri.n_chunks_stored, ri.timings.ttft_ms, ri.reason[0] ? "; " : "", ri.reason);
        mz_history_msg *h = NULL;
        size_t n = 0;
        if (mz_store_history_load(cs->store, cs->session, &h, &n)) {
            fprintf(stderr, "mzcache: %s (starting without the earlier messages)\n", mz_last_error());
        }
        for (size_t i = 0; i < n; i++)
            if (add(u, h[i].role, h[i].content)) {
                mz_history_free(h, n);
                return -1;
            }
        mz_history_free(h, n);
        return 0;
    }
    if (strstr(ri.reason, "No such file") == NULL)
        fprintf(stderr, "mzcache: %s; starting session %s again\n", ri.reason, cs->session);
    if (mz_session_create(cs->engine, cp, ctx) || mz_session_store(*ctx, cs->store, cs->session)) {
        fprintf(stderr, "mzcache: session %s: %s\n", cs->session, mz_last_error());
        return -1;
    }
    return 0;
}

void chat_store_save(chat_store *cs, const mz_chat_msg *msgs, size_t n)
{
    mz_history_msg *h = calloc(n ? n : 1, sizeof *h);
    if (!h) return;
    for (size_t i = 0; i < n; i++) h[i] = (mz_history_msg){msgs[i].role, (char *)(uintptr_t)msgs[i].content};
    if (mz_store_history_save(cs->store, cs->session, h, n))
        fprintf(stderr, "mzcache: %s\n", mz_last_error());
    free(h);
}

void chat_store_close(chat_store *cs)
{
    mz_store_close(cs->store);
    mz_engine_free(cs->engine);
    cs->store = NULL;
    cs->engine = NULL;
}
