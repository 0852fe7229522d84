/*
 * jclose_check.h — the grammar's shortest completion (mz_jgram_close_len)
 * checked by its definition rather than its formula, for test_grammar and
 * fuzz_grammar: 0 exactly when the document is complete, no byte lowers it by
 * more than one, some byte lowers it by exactly one. Header-only.
 */
#ifndef MZ_JCLOSE_CHECK_H
#define MZ_JCLOSE_CHECK_H

#include "grammar/grammar.h"

#include <stddef.h>

/* From g, checks the definition at every step while following the lowest
 * byte that lowers the close length, appending those bytes to out[*len, cap).
 * NULL when it reached a complete document in exactly close-length bytes (g
 * is then complete), else what failed. */
static const char *jclose_walk(mz_jgram *g, char *out, size_t *len, size_t cap)
{
    const size_t d0 = mz_jgram_close_len(g);
    for (size_t d = d0; d > 0; d--) {
        if (mz_jgram_complete(g)) return "a positive close length is complete";
        if (*len + 1 >= cap) return "the completion does not fit the buffer";
        int next = -1;
        for (int b = 0; b < 256; b++) {
            char c = (char)b;
            size_t a;
            if (!mz_jgram_check_close(g, &c, 1, &a)) continue;
            if (a + 1 < d) return "a byte lowers the close length by more than one";
            if (a + 1 == d && next < 0) next = b;
        }
        if (next < 0) return "no byte lowers the close length by one";
        out[(*len)++] = (char)next;
        if (!mz_jgram_feed(g, out + *len - 1, 1)) return "the closing byte is refused";
        if (mz_jgram_close_len(g) != d - 1) return "the close length did not fall by one";
    }
    if (!mz_jgram_complete(g)) return "close length 0 but not complete";
    return NULL;
}

#endif
