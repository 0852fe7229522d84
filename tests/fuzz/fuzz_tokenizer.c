/*
 * fuzz_tokenizer.c — libFuzzer target for the tokenizer and detokenizer.
 *
 * Loads the real model's tokenizer once (path from $MZ_FUZZ_MODEL, default
 * models/SmolLM2-135M-Instruct.Q4_1.gguf), then for every input:
 *   - encodes the bytes with parse_special off and on; every id is in range;
 *   - decodes the tokens through the streaming detokenizer with a small,
 *     input-dependent output buffer; every chunk and the whole output are
 *     valid UTF-8;
 *   - when the input is valid UTF-8 and every byte has a token, the decoded
 *     text (specials rendered) equals the input exactly;
 *   - formats the input as a chat message and checks the reported length.
 *
 * fuzz_tokenizer_spm.c includes this file with Gemma 3's SentencePiece
 * vocabulary instead (FUZZ_TOK_* below).
 *
 * Build: clang -fsanitize=fuzzer,address,undefined (see CMake MZ_FUZZ).
 */
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

#include <stdint.h>
#include <string.h>

#ifndef FUZZ_TOK_NAME
#define FUZZ_TOK_NAME "fuzz_tokenizer"
#define FUZZ_TOK_MODEL_ENV "MZ_FUZZ_MODEL"
#define FUZZ_TOK_MODEL_DEFAULT "models/SmolLM2-135M-Instruct.Q4_1.gguf"
/* Inputs whose decoded text may differ from them although every byte has a
 * token: none for byte-level BPE. */
#define FUZZ_TOK_NO_ROUNDTRIP(data, size) false
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static mz_tokenizer *g_tok;
static bool g_have_byte[256];

static void load_once(void)
{
    if (g_tok) return;
    const char *path = getenv(FUZZ_TOK_MODEL_ENV);
    if (!path || !*path) path = FUZZ_TOK_MODEL_DEFAULT;
    mz_gguf *g = NULL;
    if (mz_gguf_open(path, &g) != MZ_OK || mz_tokenizer_init(g, &g_tok) != MZ_OK) {
        fprintf(stderr, FUZZ_TOK_NAME ": cannot load %s: %s (set " FUZZ_TOK_MODEL_ENV ")\n", path,
                mz_last_error());
        exit(1);
    }
    mz_gguf_free(g);
    for (mz_token i = 0; i < mz_tokenizer_n_vocab(g_tok); i++) {
        size_t l;
        const char *p = mz_tokenizer_piece(g_tok, i, &l);
        if (p && l == 1) g_have_byte[(unsigned char)p[0]] = true;
    }
}

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, FUZZ_TOK_NAME ": check failed: %s\n", what);
        abort();
    }
}

static void roundtrip(const uint8_t *data, size_t size, bool parse_special)
{
    size_t n = 0;
    mz_status st = mz_tokenizer_encode(g_tok, (const char *)data, size, false, parse_special,
                                       NULL, 0, &n);
    check(st == MZ_OK || st == MZ_E_RANGE, "encode (size query)");
    mz_token *toks = malloc((n ? n : 1) * sizeof *toks);
    size_t n2 = 0;
    st = mz_tokenizer_encode(g_tok, (const char *)data, size, false, parse_special, toks, n, &n2);
    check(st == MZ_OK && n2 == n, "encode");
    for (size_t i = 0; i < n; i++)
        check(toks[i] >= 0 && toks[i] < mz_tokenizer_n_vocab(g_tok), "token id in range");

    mz_detok_t *d = NULL;
    check(mz_detok_init_tok(g_tok, &d) == MZ_OK, "detok init");
    size_t cap = 4 + (size % 13), out_n = 0, out_cap = size * 3 + 64;
    char *out = malloc(out_cap);
    char buf[16];
    for (size_t i = 0; i <= n; i++) {
        size_t k;
        do {
            k = i < n ? mz_detok_push(d, toks[i], true, buf, cap) : mz_detok_flush(d, buf, cap);
            check(k <= cap, "detok within cap");
            check(mz_utf8_valid(buf, k), "detok chunk is valid UTF-8");
            check(out_n + k <= out_cap, "detok output size");
            memcpy(out + out_n, buf, k);
            out_n += k;
        } while (i == n && k > 0);
    }
    check(mz_utf8_valid(out, out_n), "detok output is valid UTF-8");

    bool all_bytes = true;
    for (size_t i = 0; i < size; i++) all_bytes &= g_have_byte[data[i]];
    if (all_bytes && mz_utf8_valid((const char *)data, size) && !FUZZ_TOK_NO_ROUNDTRIP(data, size))
        check(out_n == size && memcmp(out, data, size) == 0, "round trip");
    mz_detok_free(d);
    free(out);
    free(toks);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    load_once();
    if (size > 1 << 16) return 0;
    roundtrip(data, size, false);
    roundtrip(data, size, true);

    char *content = malloc(size + 1);
    memcpy(content, data, size);
    content[size] = '\0';
    mz_chat_msg msg = {"user", content};
    size_t need = 0;
    mz_status st = mz_tokenizer_chat_format(g_tok, &msg, 1, true, NULL, 0, &need);
    check(st == MZ_E_RANGE, "chat size query");
    char *buf = malloc(need + 1);
    size_t n = 0;
    check(mz_tokenizer_chat_format(g_tok, &msg, 1, true, buf, need + 1, &n) == MZ_OK && n == need &&
              strlen(buf) == need,
          "chat format");
    free(buf);
    free(content);
    return 0;
}
