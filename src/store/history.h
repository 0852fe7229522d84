/*
 * history.h — the chat messages of a stored session (`mzcache chat
 * --session NAME`), kept beside its manifest as <store>/<id>.chat so the
 * CLI can format the conversation again and reuse the restored tokens.
 *
 * Format: "MZCHAT1\n", then per message "<role>\t<bytes>\n<content>\n" with
 * role system|user|assistant and bytes a decimal length (<= 16 MiB). The
 * reader is strict (fuzzed: tests/fuzz/fuzz_chat_history.c).
 */
#ifndef MZ_HISTORY_H
#define MZ_HISTORY_H

#include "../core/core.h"

#include <stddef.h>

typedef struct mz_history_msg {
    const char *role;          /* static string */
    char *content;             /* malloc'ed, NUL-terminated */
} mz_history_msg;

/* Parses buf; on success *msgs (malloc'ed) holds *n messages. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_history_decode(const char *buf, size_t len,
                                                     mz_history_msg **msgs, size_t *n);
MZ_INTERNAL void mz_history_free(mz_history_msg *msgs, size_t n);
/* Encodes into a malloc'ed buffer. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_history_encode(const mz_history_msg *msgs, size_t n,
                                                     char **out, size_t *out_len);

/* Reads / writes (atomically) <store>/<id>.chat. Reading a missing file
 * gives zero messages. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_store_history_load(mz_store_t *st, const char *id,
                                                         mz_history_msg **msgs, size_t *n);
MZ_INTERNAL MZ_NODISCARD mz_status mz_store_history_save(mz_store_t *st, const char *id,
                                                         const mz_history_msg *msgs, size_t n);

#endif /* MZ_HISTORY_H */
