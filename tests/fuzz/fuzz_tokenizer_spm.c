/*
 * fuzz_tokenizer_spm.c — libFuzzer target for the SentencePiece tokenizer:
 * fuzz_tokenizer.c's checks over Gemma 3's vocabulary (path from
 * $MZ_FUZZ_SPM_MODEL, default models/gemma-3-270m-q4_k_m.gguf, whose
 * add_space_prefix is off, so that text comes back exactly).
 *
 * Two kinds of valid input decode to other text, as in llama.cpp: U+2581
 * (SentencePiece's escaped space) comes back as ' ', and the spelling of a
 * byte token ("<0x41>") can merge into that token and come back as its
 * byte. The round-trip check skips those.
 */
#define _GNU_SOURCE /* memmem */
#include <string.h>

#define FUZZ_TOK_NAME "fuzz_tokenizer_spm"
#define FUZZ_TOK_MODEL_ENV "MZ_FUZZ_SPM_MODEL"
#define FUZZ_TOK_MODEL_DEFAULT "models/gemma-3-270m-q4_k_m.gguf"
#define FUZZ_TOK_NO_ROUNDTRIP(data, size) \
    (memmem((data), (size), "\xe2\x96\x81", 3) != NULL || memmem((data), (size), "<0x", 3) != NULL)

#include "fuzz_tokenizer.c"
