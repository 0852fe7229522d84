/*
 * fuzz_grammar.c — libFuzzer target for the byte-level JSON grammar of
 * structured output (src/grammar/jgram.c) on arbitrary documents.
 *
 * Input: a schema up to the first newline (or, when that line is empty or
 * not an accepted schema, json_object mode), then the document bytes. The
 * document is fed whole, byte by byte, and in chunks whose sizes come from
 * the input (as tokens of any length would); all three must agree, and
 * mz_jgram_check must agree with mz_jgram_feed. A refused chunk must leave
 * the state unchanged. A document the grammar accepts as complete must parse
 * (cJSON, nothing after it) and validate against the schema (or be an object
 * in json_object mode), checked by tests/unit/jschema_check.h. From the
 * longest accepted prefix, the shortest completion (mz_jgram_close_len) is
 * checked by its definition and followed to a document that must validate.
 *
 * Build: clang -fsanitize=fuzzer,address,undefined (CMake MZ_FUZZ=ON).
 */
#include "grammar/grammar.h"
#include "../unit/jclose_check.h"
#include "../unit/jschema_check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_grammar: check failed: %s\n", what);
        abort();
    }
}

/* Feeds doc in chunks of 1..8 bytes (sizes from sizes[]); a refused chunk is
 * retried byte by byte. Returns the bytes accepted. */
static size_t feed_chunks(mz_jgram *g, const char *doc, size_t n, const uint8_t *sizes, size_t n_sizes)
{
    size_t off = 0, k = 0;
    while (off < n) {
        size_t len = n_sizes ? (size_t)(sizes[k++ % n_sizes] % 8) + 1 : 1;
        if (len > n - off) len = n - off;
        bool would = mz_jgram_check(g, doc + off, len);
        bool did = mz_jgram_feed(g, doc + off, len);
        check(would == did, "check agrees with feed");
        if (did) {
            off += len;
            continue;
        }
        for (size_t i = 0; i < len; i++, off++)
            if (!mz_jgram_feed(g, doc + off, 1)) return off;
        check(false, "a refused chunk is refused somewhere byte by byte");
    }
    return off;
}

/* The shortest completion from g (the state after doc[0, n)), by its
 * definition (tests/unit/jclose_check.h); the document it completes must
 * parse and validate. Long closes (a schema's large minItems) are skipped. */
static void close_from(mz_jgram *g, const char *doc, size_t n, const cJSON *sj)
{
    size_t d0 = mz_jgram_close_len(g);
    if (d0 > 512) return;
    char *out = malloc(n + d0 + 2);
    check(out != NULL, "out of memory");
    memcpy(out, doc, n);
    size_t len = n;
    const char *why = jclose_walk(g, out, &len, n + d0 + 2);
    check(!why, why ? why : "");
    const char *end = NULL;
    cJSON *d = cJSON_ParseWithLengthOpts(out, len, &end, false);
    check(d != NULL && end == out + len, "a closed document parses");
    check(sj ? jc_valid(d, sj) : cJSON_IsObject(d), "a closed document validates");
    cJSON_Delete(d);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536) return 0;
    const uint8_t *nl = memchr(data, '\n', size);
    size_t schema_len = nl ? (size_t)(nl - data) : 0;
    const char *doc = (const char *)data + (nl ? schema_len + 1 : 0);
    size_t n = size - (size_t)(doc - (const char *)data);
    cJSON *sj = schema_len ? cJSON_ParseWithLength((const char *)data, schema_len) : NULL;
    mz_jschema *s = sj ? mz_jschema_read(sj, NULL, 0) : NULL;
    if (!s) {
        cJSON_Delete(sj);
        sj = NULL;
        s = mz_jschema_any_object();
        check(s != NULL, "json_object schema");
    }
    mz_jgram *whole = mz_jgram_init(s), *bytes = mz_jgram_init(s), *chunks = mz_jgram_init(s);
    check(whole && bytes && chunks, "grammar init");

    bool ok_whole = mz_jgram_feed(whole, doc, n);
    size_t ok_bytes = 0;
    while (ok_bytes < n && mz_jgram_feed(bytes, doc + ok_bytes, 1)) ok_bytes++;
    check(ok_whole == (ok_bytes == n), "whole and byte-wise feeding agree");
    size_t ok_chunks = feed_chunks(chunks, doc, n, data, schema_len < 16 ? schema_len : 16);
    check(ok_chunks == ok_bytes, "chunked and byte-wise feeding agree");
    check(mz_jgram_complete(bytes) == mz_jgram_complete(chunks), "chunked and byte-wise states agree");
    if (!ok_whole) /* refused: the state is still the start, so the good prefix goes in */
        check(mz_jgram_feed(whole, doc, ok_bytes) && mz_jgram_complete(whole) == mz_jgram_complete(bytes),
              "a refused feed leaves the state unchanged");
    if (ok_whole && mz_jgram_complete(whole)) {
        const char *end = NULL;
        cJSON *d = cJSON_ParseWithLengthOpts(doc, n, &end, false);
        check(d != NULL && end == doc + n, "a complete document parses");
        if (sj) check(jc_valid(d, sj), "a complete document validates");
        else check(cJSON_IsObject(d), "json_object: an object");
        cJSON_Delete(d);
    }
    close_from(bytes, doc, ok_bytes, sj);
    mz_jgram_free(whole);
    mz_jgram_free(bytes);
    mz_jgram_free(chunks);
    mz_jschema_free(s);
    cJSON_Delete(sj);
    return 0;
}
