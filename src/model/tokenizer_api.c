/*
 * tokenizer_api.c — the public tokenizer, detokenizer and chat functions of
 * mzcache.h, as thin wrappers over the model's tokenizer (the model owns it,
 * so these live with the model, above src/tokenizer).
 */
#include "model.h"
#include "../tokenizer/tokenizer.h"

static const mz_tokenizer *model_tok(const mz_model_t *m)
{
    return m ? mz_model_tokenizer(m) : NULL;
}

mz_status mz_tokenize(const mz_model_t *m, const char *text, size_t len, bool add_special,
                      bool parse_special, mz_token *out, size_t cap, size_t *n_out)
{
    const mz_tokenizer *t = model_tok(m);
    if (!t) {
        if (n_out) *n_out = 0;
        return mz_fail(MZ_E_INVAL, "tokenize: model has no tokenizer");
    }
    return mz_tokenizer_encode(t, text, len, add_special, parse_special, out, cap, n_out);
}

const char *mz_token_piece(const mz_model_t *m, mz_token tok, size_t *len)
{
    const mz_tokenizer *t = model_tok(m);
    if (!t) {
        if (len) *len = 0;
        return NULL;
    }
    return mz_tokenizer_piece(t, tok, len);
}

int mz_model_n_vocab(const mz_model_t *m)
{
    const mz_tokenizer *t = model_tok(m);
    return t ? mz_tokenizer_n_vocab(t) : 0;
}

bool mz_token_is_eog(const mz_model_t *m, mz_token tok)
{
    const mz_tokenizer *t = model_tok(m);
    return t && mz_tokenizer_is_eog(t, tok);
}

mz_status mz_detok_init(const mz_model_t *m, mz_detok_t **out)
{
    const mz_tokenizer *t = model_tok(m);
    if (!t) {
        if (out) *out = NULL;
        return mz_fail(MZ_E_INVAL, "detok: model has no tokenizer");
    }
    return mz_detok_init_tok(t, out);
}

mz_status mz_chat_format(const mz_model_t *m, const mz_chat_msg *msgs, size_t n_msgs,
                         bool add_assistant, char *buf, size_t cap, size_t *n_out)
{
    const mz_tokenizer *t = model_tok(m);
    if (!t) {
        if (n_out) *n_out = 0;
        return mz_fail(MZ_E_INVAL, "chat format: model has no tokenizer");
    }
    return mz_tokenizer_chat_format(t, msgs, n_msgs, add_assistant, buf, cap, n_out);
}

mz_status mz_chat_tokenize(const mz_model_t *m, const mz_chat_msg *msgs, size_t n_msgs, bool add_assistant,
                           mz_token *out, size_t cap, size_t *n_out)
{
    const mz_tokenizer *t = model_tok(m);
    if (!t) {
        if (n_out) *n_out = 0;
        return mz_fail(MZ_E_INVAL, "tokenize chat: model has no tokenizer");
    }
    return mz_tokenizer_encode_chat(t, msgs, n_msgs, add_assistant, true, out, cap, n_out);
}

const char *mz_model_chat_template(const mz_model_t *m, bool *from_file)
{
    const mz_tokenizer *t = model_tok(m);
    if (!t) {
        if (from_file) *from_file = false;
        return "unknown";
    }
    return mz_tokenizer_chat_name(t, from_file);
}
