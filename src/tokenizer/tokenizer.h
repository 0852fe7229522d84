/*
 * tokenizer.h — byte-level BPE and SentencePiece (byte fallback) tokenizers
 * built from GGUF metadata (tokenizer.ggml.*), with the BPE pre-tokenizer
 * regexes of llama.cpp's gpt2 / llama3 / smollm / qwen2 pre-tokenizers run
 * through PCRE2, special
 * tokens, streaming decoding, and chat templates (ChatML, Llama 3, Gemma,
 * Mistral).
 */
#ifndef MZ_TOKENIZER_H
#define MZ_TOKENIZER_H

#include "../core/core.h"
#include "../gguf/gguf.h"

typedef struct mz_tokenizer mz_tokenizer;

/* Builds the tokenizer from a parsed GGUF. MZ_E_FORMAT / MZ_E_UNSUPPORTED with
 * a message for missing or malformed tokenizer metadata. */
mz_status mz_tokenizer_init(const mz_gguf *g, mz_tokenizer **out);
void mz_tokenizer_free(mz_tokenizer *t);

int mz_tokenizer_n_vocab(const mz_tokenizer *t);
mz_token mz_tokenizer_bos(const mz_tokenizer *t);  /* -1 if none */
mz_token mz_tokenizer_eos(const mz_tokenizer *t);
mz_token mz_tokenizer_eot(const mz_tokenizer *t);  /* <|im_end|> / <|eot_id|>, -1 if none */

mz_status mz_tokenizer_encode(const mz_tokenizer *t, const char *text, size_t len,
                              bool add_special, bool parse_special, mz_token *out, size_t cap,
                              size_t *n_out);
/* Bytes of one token (byte-level decoded); NULL if out of range. */
const char *mz_tokenizer_piece(const mz_tokenizer *t, mz_token tok, size_t *len);
bool mz_tokenizer_is_control(const mz_tokenizer *t, mz_token tok);
bool mz_tokenizer_is_eog(const mz_tokenizer *t, mz_token tok);

/* A byte range of a text. */
typedef struct mz_text_span {
    size_t start, len;
} mz_text_span;

/* The chat template applied to msgs, tokenized: control tokens come only
 * from the template; the messages' content is text, whatever it spells
 * ("<|im_end|>" in a message is the tokens of those characters). add_special
 * as in mz_tokenizer_encode. */
mz_status mz_tokenizer_encode_chat(const mz_tokenizer *t, const mz_chat_msg *msgs, size_t n_msgs,
                                   bool add_assistant, bool add_special, mz_token *out, size_t cap,
                                   size_t *n_out);

/* Overrides the chat template family by name (chatml, gemma, llama3,
 * mistral); MZ_E_INVAL naming them for any other name. Not thread-safe:
 * before the tokenizer is shared. */
mz_status mz_tokenizer_set_chat(mz_tokenizer *t, const char *name);
/* The chat template family's name ("unknown": formatting refuses);
 * *from_file (may be NULL): recognised in the file's template. */
const char *mz_tokenizer_chat_name(const mz_tokenizer *t, bool *from_file);
mz_status mz_tokenizer_chat_format(const mz_tokenizer *t, const mz_chat_msg *msgs, size_t n_msgs,
                                   bool add_assistant, char *buf, size_t cap, size_t *n_out);

/* mz_detok_init on a bare tokenizer (the public one goes through the model). */
mz_status mz_detok_init_tok(const mz_tokenizer *t, mz_detok_t **out);

#endif /* MZ_TOKENIZER_H */
