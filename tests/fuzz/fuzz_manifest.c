/*
 * fuzz_manifest.c — libFuzzer target for the session manifest reader
 * (mz_manifest_decode, src/store/manifest.c). Invariants: never crashes or
 * leaks; whatever it accepts re-encodes to exactly the same bytes (nothing
 * is ignored or guessed), names a valid session id, and names chunks that
 * leave at least one token to recompute (a tail included); a refusal leaves
 * the manifest empty.
 */
#include "store/manifest.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mz_manifest m;
    mz_status s = mz_manifest_decode(data, size, &m);
    if (s != MZ_OK) {
        if (m.tokens || m.recs || m.n_tokens || m.n_chunks) __builtin_trap();
        if (s != MZ_E_CORRUPT && s != MZ_E_FORMAT && s != MZ_E_NOMEM) __builtin_trap();
        return 0;
    }
    if (!mz_session_id_valid(m.name)) __builtin_trap();
    if (m.n_chunks && m.n_chunks * 256 >= m.n_tokens) __builtin_trap();
    if (m.tail_pos && (m.tail_pos > 255 || m.n_chunks * 256 + m.tail_pos >= m.n_tokens))
        __builtin_trap();
    size_t n = mz_manifest_size(&m);
    if (n != size) __builtin_trap();
    unsigned char *again = malloc(n);
    if (!again) __builtin_trap();
    if (mz_manifest_encode(&m, again, n) != MZ_OK) __builtin_trap();
    if (memcmp(again, data, n) != 0) __builtin_trap();
    free(again);
    mz_manifest_clear(&m);
    return 0;
}
