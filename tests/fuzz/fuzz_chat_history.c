/*
 * fuzz_chat_history.c — libFuzzer target for the chat history reader of
 * stored sessions (mz_history_decode, src/store/history.c). Invariants:
 * never crashes or leaks; whatever it accepts re-encodes to the same bytes.
 */
#include "store/history.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mz_history_msg *m = NULL;
    size_t n = 0;
    if (mz_history_decode((const char *)data, size, &m, &n) != MZ_OK) {
        if (m || n) __builtin_trap();
        return 0;
    }
    char *again = NULL;
    size_t len = 0;
    if (mz_history_encode(m, n, &again, &len) != MZ_OK) __builtin_trap();
    if (len != size || memcmp(again, data, size) != 0) __builtin_trap();
    free(again);
    mz_history_free(m, n);
    return 0;
}
