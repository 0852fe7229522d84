/*
 * tokenizer_impl.h — internals shared by the files of src/tokenizer/ only.
 *
 *   pretok.c        UTF-8 sanitising, the GPT-2 byte↔unicode map, and the
 *                   pre-tokenizer regex sets (PCRE2) that split text into words
 *   tokenizer.c     vocabulary/merges/scores from GGUF, special-token partition,
 *                   BPE and SentencePiece merging
 *   chat.c          chat templates (ChatML, Llama 3)
 *   detok.c         streaming UTF-8 assembly (mz_detok_*)
 *
 * Nothing outside src/tokenizer/ includes this file; use tokenizer.h.
 */
#ifndef MZ_TOKENIZER_IMPL_H
#define MZ_TOKENIZER_IMPL_H

#include "tokenizer.h"

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
enum mz_tok_type {
    MZ_TOK_UNDEFINED = 0,
    MZ_TOK_NORMAL = 1,
    MZ_TOK_UNKNOWN = 2,
    MZ_TOK_CONTROL = 3,
    MZ_TOK_USER_DEFINED = 4,
    MZ_TOK_UNUSED = 5,
    MZ_TOK_BYTE = 6,
};

/* ---- pretok.c ------------------------------------------------------------ */

/* A compiled pre-tokenizer: one or more regexes applied in sequence, each one
 * splitting every fragment the previous one produced (llama.cpp's
 * unicode_regex_split: a match and the unmatched text between matches both
 * become fragments; a fragment's ends are hard boundaries for lookarounds). */
typedef struct mz_pretok mz_pretok;

/* Builds the pre-tokenizer named by tokenizer.ggml.pre (NULL: gpt2). Unknown
 * names fall back to gpt2 with a warning. *ignore_merges is set for the
 * llama3 family (a word that is itself a token skips BPE). */
mz_status mz_pretok_init(const char *name, mz_pretok **out, bool *ignore_merges);
void mz_pretok_free(mz_pretok *p);
const char *mz_pretok_name(const mz_pretok *p);

/* A [start, start+len) byte range of some text. */
typedef struct mz_span {
    size_t start;
    size_t len;
} mz_span;

/* Growable array of spans; free with free(v->a). */
typedef struct mz_span_vec {
    mz_span *a;
    size_t n, cap;
} mz_span_vec;

/* Splits text[0..len) (valid UTF-8) into words, appended to *out in order;
 * the words tile the text exactly. Thread-safe (per-call match data). */
mz_status mz_pretok_split(const mz_pretok *p, const char *text, size_t len, mz_span_vec *out);

/* Copies src[0..len) to a new buffer as valid UTF-8: each byte that does not
 * start a well-formed sequence becomes U+FFFD (as llama.cpp's
 * unicode_cpts_from_utf8 does); surrogates and code points past U+10FFFF also
 * become U+FFFD. *out is malloc'd (NUL-terminated), *out_len its length. */
mz_status mz_utf8_sanitize(const char *src, size_t len, char **out, size_t *out_len);

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if s does not start
 * with one (strict: no overlongs, surrogates or values past U+10FFFF). */
size_t mz_utf8_seq_len(const unsigned char *s, size_t n);
bool mz_utf8_valid(const char *s, size_t n);

/* GPT-2 byte-level map: byte b is written as code point mz_byte_to_cpt(b);
 * mz_cpt_to_byte returns -1 for a code point outside the map. */
uint32_t mz_byte_to_cpt(uint8_t b);
int mz_cpt_to_byte(uint32_t cpt);
/* Encodes cpt as UTF-8 into out[4]; returns the length (1..4). */
size_t mz_utf8_put(uint32_t cpt, char *out);

/* ---- chat.c ------------------------------------------------------------- */

typedef enum mz_chat_kind {
    MZ_CHAT_CHATML = 0,
    MZ_CHAT_LLAMA3 = 1,
    MZ_CHAT_GEMMA = 2,
    MZ_CHAT_MISTRAL = 3,
    MZ_CHAT_UNKNOWN = 4,       /* a template of no known family: formatting refuses */
    MZ_CHAT_KIND_COUNT
} mz_chat_kind;

typedef struct mz_chat_tmpl {
    mz_chat_kind kind;
    bool from_file;            /* recognised in tokenizer.chat_template (else: arch or override) */
    char *default_system;      /* malloc'd; NULL when the template inserts none */
} mz_chat_tmpl;

/* Recognises the family of tokenizer.chat_template text (NULL: absent; then
 * arch, general.architecture or NULL, picks it). Never fails on odd text. */
mz_status mz_chat_tmpl_init(const char *tmpl, size_t len, const char *arch, mz_chat_tmpl *out);
/* Replaces the family (an override). */
void mz_chat_tmpl_set_kind(mz_chat_tmpl *c, mz_chat_kind k);
const char *mz_chat_kind_name(mz_chat_kind k);
/* MZ_E_INVAL naming the known families when name is none of them. */
mz_status mz_chat_kind_from_name(const char *name, mz_chat_kind *out);
void mz_chat_tmpl_free(mz_chat_tmpl *c);
mz_status mz_chat_tmpl_format(const mz_chat_tmpl *c, const mz_chat_msg *msgs, size_t n_msgs,
                              bool add_assistant, char *buf, size_t cap, size_t *n_out);
/* The same, and where the messages' text lies in the result: spans[] (room
 * for n_msgs + 1: the messages and a default system message) gets each
 * non-empty text's byte range, in order; *n_spans their count. Everything
 * outside the spans is the template's own. */
mz_status mz_chat_tmpl_format_spans(const mz_chat_tmpl *c, const mz_chat_msg *msgs, size_t n_msgs,
                                    bool add_assistant, char *buf, size_t cap, size_t *n_out,
                                    mz_text_span *spans, size_t *n_spans);

/* ---- detok.c -------------------------------------------------------------- */


/* ---- tokenizer.c --------------------------------------------------------- */

/* The tokenizer's chat template (tokenizer.c owns it). */
const mz_chat_tmpl *mz_tokenizer_chat(const mz_tokenizer *t);
/* tokenizer.ggml.token_type of tok (MZ_TOK_*), or -1 if out of range. */
int mz_tokenizer_type(const mz_tokenizer *t, mz_token tok);

#endif /* MZ_TOKENIZER_IMPL_H */
