/*
 * fuzz_session.c — libFuzzer target for what the server reads to pick and
 * size sessions (src/server/request.h, src/server/server.h):
 *   - the input as an X-Session-Id header value (srv_session_id): an
 *     accepted id must pass mz_session_id_check, be 1..63 bytes of the
 *     documented charset, never start with "anon-", and be the header;
 *   - the input as a --mem-budget value (mz_parse_size): an accepted size is
 *     in [1, 1 PiB] and the text has only digits, '.', ' ' and K/M/G/i/B.
 *
 * Build: clang -fsanitize=fuzzer,address,undefined (CMake MZ_FUZZ=ON).
 */
#include "server/request.h"
#include "core/parse.h"
#include "server/server.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_session: check failed: %s\n", what);
        abort();
    }
}

static bool charset_ok(const char *id)
{
    size_t n = strlen(id);
    if (n < 1 || n > 63 || !strncmp(id, "anon-", 5) || id[0] == '.' || id[0] == '-') return false;
    for (size_t i = 0; i < n; i++)
        if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:@+-", id[i])) return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';

    char id[SRV_SESSION_ID_MAX_LEN + 1];
    char err[200];
    const char *bad = srv_session_id(text, id, sizeof id, err, sizeof err);
    if (!bad) {
        check(!id[0] || !mz_session_id_check(id, false), "accepted id is valid");
        check(!id[0] || charset_ok(id), "accepted id matches the documented charset");
        check(!strcmp(id, text), "the id is the header");
    } else {
        check(strlen(bad) > 0 && strlen(bad) < 200, "short message");
    }
    if (!mz_session_id_check(text, true)) check(strlen(text) <= 63 && strlen(text) >= 1, "DELETE id length");

    size_t v = 0;
    if (!mz_parse_size(text, &v)) {
        check(v >= 1 && v <= ((size_t)1 << 50), "size in range");
        for (const char *p = text; *p; p++) check(strchr("0123456789. kKmMgGiIbB", *p) != NULL, "size charset");
    }
    free(text);
    return 0;
}
