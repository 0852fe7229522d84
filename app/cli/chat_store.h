/*
 * chat_store.h — `mzcache chat --session NAME`: the conversation lives in the
 * session store (include/mzcache.h, "session store") and a later `chat
 * --session NAME` resumes it: restored KV, not recomputed.
 */
#ifndef MZ_CLI_CHAT_STORE_H
#define MZ_CLI_CHAT_STORE_H

#include "mzcache.h"

typedef struct chat_store {
    const char *session;       /* --session NAME (NULL: no store) */
    const char *dir;           /* --store DIR */
    mz_fsync_policy fsync;     /* --fsync */
    uint64_t limit;            /* --store-limit (0: none) */
    const char *codec;         /* --store-codec (NULL: raw) */
    mz_engine_t *engine;
    mz_store_t *store;
} chat_store;

/* Consumes a store option at argv[*i]: 1 consumed, 0 not ours, -1 bad value. */
int chat_store_option(chat_store *cs, int argc, char **argv, int *i);
/* Help lines for the options. */
const char *chat_store_help(void);
/* Before the model load: starts reading the stored session's files into the
 * page cache (mz_store_prefetch); a session that is not stored yet is fine. */
void chat_store_prefetch(const chat_store *cs);
/* Resumes (or creates) the session: *ctx; the stored messages go to add(). */
int chat_store_open(chat_store *cs, mz_model_t *m, const mz_ctx_params *cp, mz_ctx_t **ctx,
                    int (*add)(void *u, const char *role, const char *content), void *u);
/* After each turn. */
void chat_store_save(chat_store *cs, const mz_chat_msg *msgs, size_t n);
/* After mz_ctx_free. */
void chat_store_close(chat_store *cs);

#endif
