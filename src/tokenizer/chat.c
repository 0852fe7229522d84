/*
 * chat.c — chat templates. We do not run Jinja: the template text in
 * tokenizer.chat_template only selects one of two fixed formats.
 *
 *   ChatML  (template mentions "<|im_start|>"; also the fallback):
 *       <|im_start|>{role}\n{content}<|im_end|>\n          per message
 *       <|im_start|>assistant\n                            add_assistant
 *     If the template inserts a default system message when the first message
 *     is not "system" (SmolLM2, Qwen2.5), that text is lifted out of the
 *     template's string literal and inserted the same way.
 *
 *   Llama 3 (template mentions "<|start_header_id|>"):
 *       <|begin_of_text|>                                  once
 *       <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>
 *       <|start_header_id|>assistant<|end_header_id|>\n\n  add_assistant
 */
#define _GNU_SOURCE /* memmem */
#include "tokenizer_impl.h"

#include <string.h>

static const char *find_in(const char *s, size_t n, const char *needle)
{
    return memmem(s, n, needle, strlen(needle));
}

/* Finds a literal default system message: the text after
 * "<|im_start|>system" + newline (real or written "\n") up to "<|im_end|>",
 * provided it is plain text (no Jinja syntax, no unescaped quotes).
 * Returns a malloc'd, unescaped copy, or NULL. */
static char *extract_default_system(const char *tmpl, size_t len)
{
    static const char head[] = "<|im_start|>system";
    const char *end = tmpl + len;
    const char *p = tmpl;
    while ((p = find_in(p, (size_t)(end - p), head)) != NULL) {
        p += sizeof head - 1;
        const char *body;
        if (p < end && *p == '\n') body = p + 1;
        else if (end - p >= 2 && p[0] == '\\' && p[1] == 'n') body = p + 2;
        else continue;
        const char *stop = find_in(body, (size_t)(end - body), "<|im_end|>");
        if (!stop || stop == body) continue;
        char *out = malloc((size_t)(stop - body) + 1);
        if (!out) return NULL;
        size_t o = 0;
        bool plain = true;
        for (const char *q = body; q < stop && plain; q++) {
            char c = *q;
            if (c == '{' || c == '}' || c == '\'' || c == '"') {
                plain = false;
            } else if (c == '\\' && q + 1 < stop) {
                char e = *++q;
                out[o++] = e == 'n' ? '\n' : e == 't' ? '\t' : e;
            } else {
                out[o++] = c;
            }
        }
        if (plain) {
            out[o] = '\0';
            return out;
        }
        free(out);
    }
    return NULL;
}

mz_status mz_chat_tmpl_init(const char *tmpl, size_t len, mz_chat_tmpl *out)
{
    out->kind = MZ_CHAT_CHATML;
    out->default_system = NULL;
    if (!tmpl) {
        mz_log(MZ_LOG_INFO, "tokenizer: no tokenizer.chat_template; using ChatML");
        return MZ_OK;
    }
    if (find_in(tmpl, len, "<|start_header_id|>")) {
        out->kind = MZ_CHAT_LLAMA3;
        return MZ_OK;
    }
    if (!find_in(tmpl, len, "<|im_start|>")) {
        mz_log(MZ_LOG_WARN, "tokenizer: unrecognised chat template; using ChatML");
        return MZ_OK;
    }
    /* Only templates that test the first role for "system" insert a default. */
    if (find_in(tmpl, len, "'system'") || find_in(tmpl, len, "\"system\""))
        out->default_system = extract_default_system(tmpl, len);
    return MZ_OK;
}

void mz_chat_tmpl_free(mz_chat_tmpl *c)
{
    if (!c) return;
    free(c->default_system);
    c->default_system = NULL;
}

/* Appends s to buf when it fits; always advances *n (so a first pass with
 * cap 0 measures). */
static void put(char *buf, size_t cap, size_t *n, const char *s)
{
    size_t l = strlen(s);
    if (*n + l < cap) memcpy(buf + *n, s, l);
    *n += l;
}

/* put() of text that is not the template's own: its span is recorded (when
 * spans is given) so that the tokenizer never reads a control token in it. */
static void put_text(char *buf, size_t cap, size_t *n, const char *s, mz_text_span *spans, size_t *n_spans)
{
    size_t start = *n;
    put(buf, cap, n, s);
    if (spans && *n > start) spans[(*n_spans)++] = (mz_text_span){start, *n - start};
}

mz_status mz_chat_tmpl_format(const mz_chat_tmpl *c, const mz_chat_msg *msgs, size_t n_msgs,
                              bool add_assistant, char *buf, size_t cap, size_t *n_out)
{
    return mz_chat_tmpl_format_spans(c, msgs, n_msgs, add_assistant, buf, cap, n_out, NULL, NULL);
}

mz_status mz_chat_tmpl_format_spans(const mz_chat_tmpl *c, const mz_chat_msg *msgs, size_t n_msgs,
                                    bool add_assistant, char *buf, size_t cap, size_t *n_out,
                                    mz_text_span *spans, size_t *n_spans)
{
    if (n_spans) *n_spans = 0;
    if (n_out) *n_out = 0;
    if (!c || (!msgs && n_msgs) || (!buf && cap) || !n_out || (!spans != !n_spans))
        return mz_fail(MZ_E_INVAL, "chat format: bad arguments");
    for (size_t i = 0; i < n_msgs; i++)
        if (!msgs[i].role || !msgs[i].content)
            return mz_fail(MZ_E_INVAL, "chat format: message %zu has no role or content", i);

    size_t n = 0;
    if (c->kind == MZ_CHAT_LLAMA3) {
        put(buf, cap, &n, "<|begin_of_text|>");
        for (size_t i = 0; i < n_msgs; i++) {
            put(buf, cap, &n, "<|start_header_id|>");
            put(buf, cap, &n, msgs[i].role);
            put(buf, cap, &n, "<|end_header_id|>\n\n");
            put_text(buf, cap, &n, msgs[i].content, spans, n_spans);
            put(buf, cap, &n, "<|eot_id|>");
        }
        if (add_assistant) put(buf, cap, &n, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    } else {
        if (c->default_system && n_msgs > 0 && strcmp(msgs[0].role, "system") != 0) {
            put(buf, cap, &n, "<|im_start|>system\n");
            put_text(buf, cap, &n, c->default_system, spans, n_spans);
            put(buf, cap, &n, "<|im_end|>\n");
        }
        for (size_t i = 0; i < n_msgs; i++) {
            put(buf, cap, &n, "<|im_start|>");
            put(buf, cap, &n, msgs[i].role);
            put(buf, cap, &n, "\n");
            put_text(buf, cap, &n, msgs[i].content, spans, n_spans);
            put(buf, cap, &n, "<|im_end|>\n");
        }
        if (add_assistant) put(buf, cap, &n, "<|im_start|>assistant\n");
    }
    *n_out = n;
    if (n >= cap)
        return mz_fail(MZ_E_RANGE, "chat format: %zu bytes (+ NUL) do not fit in %zu", n, cap);
    buf[n] = '\0';
    return MZ_OK;
}
