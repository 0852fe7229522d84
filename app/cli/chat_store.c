/*
 * chat_store.c — `mzcache chat --session NAME` (chat_store.h).
 */
#include "chat_store.h"

#include "cli.h"

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
        if (!strcmp(a, "--session")) {
            const char *why = mz_session_id_check(v, false);
            if (why) {
                fprintf(stderr, "mzcache chat: --session '%s': %s\n", v, why);
                return -1;
            }
            cs->session = v;
        }
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

/* The stored KV against the saved conversation (the history is what a turn
 * commits: it is written before the prompt comes back, the manifest follows
 * behind). Stored tokens past the history's (an answer whose turn was not
 * saved, a /clear) are dropped; history the KV lacks is recomputed with the
 * next message. Either is said, with its size. */
static int reconcile(const chat_store *cs, const mz_model_t *m, mz_ctx_t *ctx, const mz_history_msg *h, size_t n,
                     bool resumed)
{
    mz_chat_msg *msgs = calloc(n ? n : 1, sizeof *msgs);
    if (!msgs) return -1;
    for (size_t i = 0; i < n; i++) msgs[i] = (mz_chat_msg){h[i].role, h[i].content};
    mz_token *toks = NULL;
    size_t nt = 0;
    mz_status st = n ? cli_tokenize_chat(m, msgs, n, false, &toks, &nt) : MZ_OK;
    free(msgs);
    if (st) return -1;
    const mz_token *have = mz_ctx_tokens(ctx);
    size_t n_have = mz_ctx_n_tokens(ctx), common = 0;
    while (common < n_have && common < nt && have[common] == toks[common]) common++;
    free(toks);
    if (common < n_have) {
        if (mz_ctx_truncate(ctx, common)) {
            fprintf(stderr, "mzcache: session %s: %s\n", cs->session, mz_last_error());
            return -1;
        }
        fprintf(stderr, "(session %s: dropped %zu stored tokens that the saved conversation does not have: "
                "an answer whose turn was not saved, or a /clear)\n", cs->session, n_have - common);
    }
    /* A complete KV ends at the last answer's end-of-turn token; the
     * template's newline after it is the next turn's first token. */
    if (resumed && nt > common + 1)
        fprintf(stderr, "(session %s: %zu tokens of the saved conversation are not in the stored KV; they are "
                "recomputed with your next message)\n", cs->session, nt - common);
    return 0;
}

/* The earlier turns, as the user saw them. */
static void print_history(const mz_history_msg *h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(h[i].role, "user")) printf("> %s\n", h[i].content);
        else if (!strcmp(h[i].role, "assistant")) printf("%s\n", h[i].content);
        else printf("(system: %s)\n", h[i].content);
    }
    fflush(stdout);
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
    /* The history is the conversation; the stored KV is what saves
     * recomputing it. */
    mz_history_msg *h = NULL;
    size_t nh = 0;
    if (mz_store_history_load(cs->store, cs->session, &h, &nh)) {
        fprintf(stderr, "mzcache: session %s: its saved conversation is unreadable (%s); starting without it\n",
                cs->session, mz_last_error());
        nh = 0;
    }
    mz_resume_info ri;
    memset(&ri, 0, sizeof ri);
    int rc = 0;
    bool resumed = mz_session_resume(cs->store, cs->session, cp, ctx, &ri) == MZ_OK;
    if (resumed) {
        fprintf(stderr, "(session %s resumed: %zu tokens, %zu of %zu stored chunks restored in "
                "%.0f ms%s%s)\n", cs->session, ri.n_tokens, ri.n_chunks_restored,
                ri.n_chunks_stored, ri.timings.ttft_ms, ri.reason[0] ? "; " : "", ri.reason);
    } else {
        bool none = strstr(ri.reason, "No such file") != NULL;
        if (nh)
            fprintf(stderr, "(session %s: %zu saved messages, but %s: the conversation is recomputed with your "
                    "next message)\n", cs->session, nh, none ? "no stored KV" : ri.reason);
        else if (!none)
            fprintf(stderr, "mzcache: %s; starting session %s again\n", ri.reason, cs->session);
        if (mz_session_create(cs->engine, cp, ctx) || mz_session_store(*ctx, cs->store, cs->session)) {
            fprintf(stderr, "mzcache: session %s: %s\n", cs->session, mz_last_error());
            rc = -1;
        }
    }
    if (!rc && reconcile(cs, m, *ctx, h, nh, resumed)) rc = -1;
    if (!rc) print_history(h, nh);
    for (size_t i = 0; i < nh && !rc; i++)
        if (add(u, h[i].role, h[i].content)) rc = -1;
    mz_history_free(h, nh);
    return rc;
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
