/*
 * chat.c — chat templates. We do not run Jinja: the template text in
 * tokenizer.chat_template is recognised as one of four families by a marker
 * only that family's templates contain, and that family's fixed format is
 * written (llama.cpp's llm_chat_apply_template does the same for its list).
 *
 *   ChatML  ("<|im_start|>": SmolLM2, Qwen 2.5/3):
 *       <|im_start|>{role}\n{content}<|im_end|>\n          per message
 *       <|im_start|>assistant\n                            add_assistant
 *     If the template inserts a default system message when the first message
 *     is not "system" (SmolLM2, Qwen2.5), that text is lifted out of the
 *     template's string literal and inserted the same way.
 *
 *   Llama 3 ("<|start_header_id|>"):
 *       <|begin_of_text|>                                  once
 *       <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>
 *       <|start_header_id|>assistant<|end_header_id|>\n\n  add_assistant
 *
 *   Gemma ("<start_of_turn>"): no system role; system text is joined to the
 *   next user message; "assistant" is "model"; contents are trimmed:
 *       <start_of_turn>{role}\n[{system}\n\n]{content}<end_of_turn>\n
 *       <start_of_turn>model\n                             add_assistant
 *
 *   Mistral ("[INST]", llama.cpp's mistral-v3 form; BOS comes from the
 *   tokenizer):
 *       [INST] [{system}\n\n]{user}[/INST] {assistant, trimmed}</s>
 *
 * A file without a template gets its architecture's family (gemma* → Gemma,
 * anything else ChatML); a template that matches no family is kept as
 * "unknown" and formatting refuses it, naming the override
 * (mz_model_params.chat_template, `--chat-template NAME`).
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

static const char *const g_kind_names[MZ_CHAT_KIND_COUNT] = {
    [MZ_CHAT_CHATML] = "chatml", [MZ_CHAT_LLAMA3] = "llama3", [MZ_CHAT_GEMMA] = "gemma",
    [MZ_CHAT_MISTRAL] = "mistral", [MZ_CHAT_UNKNOWN] = "unknown"};

const char *mz_chat_kind_name(mz_chat_kind k)
{
    return (unsigned)k < MZ_CHAT_KIND_COUNT ? g_kind_names[k] : "unknown";
}

#define KNOWN_NAMES "chatml, gemma, llama3, mistral"

mz_status mz_chat_kind_from_name(const char *name, mz_chat_kind *out)
{
    for (int k = 0; k < MZ_CHAT_UNKNOWN; k++)
        if (name && !strcmp(name, g_kind_names[k])) {
            *out = (mz_chat_kind)k;
            return MZ_OK;
        }
    return mz_fail(MZ_E_INVAL, "unknown chat template '%.64s' (known: " KNOWN_NAMES ")",
                   name ? name : "(null)");
}

/* The family whose marker the template text holds; the order matters only
 * for templates that mention several (Llama 3's can mention "[INST]" in a
 * comment, never the reverse). */
static mz_chat_kind recognise(const char *tmpl, size_t len)
{
    if (find_in(tmpl, len, "<|start_header_id|>")) return MZ_CHAT_LLAMA3;
    if (find_in(tmpl, len, "<start_of_turn>")) return MZ_CHAT_GEMMA;
    if (find_in(tmpl, len, "<|im_start|>")) return MZ_CHAT_CHATML;
    if (find_in(tmpl, len, "[INST]")) return MZ_CHAT_MISTRAL;
    return MZ_CHAT_UNKNOWN;
}

mz_status mz_chat_tmpl_init(const char *tmpl, size_t len, const char *arch, mz_chat_tmpl *out)
{
    out->default_system = NULL;
    out->from_file = tmpl != NULL;
    if (!tmpl) {
        out->kind = arch && !strncmp(arch, "gemma", 5) ? MZ_CHAT_GEMMA : MZ_CHAT_CHATML;
        mz_log(MZ_LOG_INFO, "tokenizer: no tokenizer.chat_template; using %s (architecture %s)",
               mz_chat_kind_name(out->kind), arch ? arch : "unknown");
        return MZ_OK;
    }
    out->kind = recognise(tmpl, len);
    if (out->kind == MZ_CHAT_UNKNOWN)
        mz_log(MZ_LOG_INFO, "tokenizer: the chat template is none of " KNOWN_NAMES
                            "; chat formatting needs --chat-template NAME");
    /* Only ChatML templates that test the first role for "system" insert a default. */
    if (out->kind == MZ_CHAT_CHATML && (find_in(tmpl, len, "'system'") || find_in(tmpl, len, "\"system\"")))
        out->default_system = extract_default_system(tmpl, len);
    return MZ_OK;
}

void mz_chat_tmpl_set_kind(mz_chat_tmpl *c, mz_chat_kind k)
{
    c->kind = k;
    c->from_file = false;
    free(c->default_system); /* the file's default belongs to the file's own template */
    c->default_system = NULL;
}

void mz_chat_tmpl_free(mz_chat_tmpl *c)
{
    if (!c) return;
    free(c->default_system);
    c->default_system = NULL;
}

/* Where a format is written: buf (cap bytes) up to n, which advances even
 * past cap so that a first pass with cap 0 measures; and, when spans is
 * given, the byte ranges of text that is not the template's own (message
 * content, a default system prompt), so that the tokenizer never reads a
 * control token in them. spans holds n_msgs + 1 entries: every format
 * records at most one span per message plus ChatML's default system. */
typedef struct {
    char *buf;
    size_t cap, n;
    mz_text_span *spans;
    size_t *n_spans;
} chat_out;

static void put_n(chat_out *o, const char *s, size_t l)
{
    if (o->n + l < o->cap) memcpy(o->buf + o->n, s, l);
    o->n += l;
}

static void put(chat_out *o, const char *s) { put_n(o, s, strlen(s)); }

static void put_text_n(chat_out *o, const char *s, size_t l)
{
    size_t start = o->n;
    put_n(o, s, l);
    if (o->spans && o->n > start) o->spans[(*o->n_spans)++] = (mz_text_span){start, o->n - start};
}

static void put_text(chat_out *o, const char *s) { put_text_n(o, s, strlen(s)); }

/* s without leading and trailing ASCII whitespace (llama.cpp's trim), as text. */
static void put_text_trimmed(chat_out *o, const char *s)
{
    size_t l = strlen(s);
    while (l && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')) s++, l--;
    while (l && (s[l - 1] == ' ' || s[l - 1] == '\t' || s[l - 1] == '\n' || s[l - 1] == '\r')) l--;
    put_text_n(o, s, l);
}

static void format_gemma(const mz_chat_msg *msgs, size_t n_msgs, bool add_assistant, chat_out *o)
{
    const char *system = NULL; /* waiting for the next user turn */
    for (size_t i = 0; i < n_msgs; i++) {
        if (!strcmp(msgs[i].role, "system")) {
            system = msgs[i].content;
            continue;
        }
        bool model = !strcmp(msgs[i].role, "assistant");
        put(o, "<start_of_turn>");
        put(o, model ? "model" : msgs[i].role);
        put(o, "\n");
        if (system && !model) {
            put_text_trimmed(o, system);
            put(o, "\n\n");
            system = NULL;
        }
        put_text_trimmed(o, msgs[i].content);
        put(o, "<end_of_turn>\n");
    }
    if (add_assistant) put(o, "<start_of_turn>model\n");
}

static void format_mistral(const mz_chat_msg *msgs, size_t n_msgs, chat_out *o)
{
    bool in_turn = false;
    for (size_t i = 0; i < n_msgs; i++) {
        if (!in_turn) {
            put(o, "[INST] ");
            in_turn = true;
        }
        if (!strcmp(msgs[i].role, "system")) {
            put_text(o, msgs[i].content);
            put(o, "\n\n");
        } else if (!strcmp(msgs[i].role, "user")) {
            put_text(o, msgs[i].content);
            put(o, "[/INST]");
        } else {
            put(o, " ");
            put_text_trimmed(o, msgs[i].content);
            put(o, "</s>");
            in_turn = false;
        }
    }
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

    if (c->kind == MZ_CHAT_UNKNOWN)
        return mz_fail(MZ_E_UNSUPPORTED,
                       "chat format: the model's chat template (tokenizer.chat_template) is none of "
                       "the families mzcache writes (" KNOWN_NAMES "); choose one with "
                       "--chat-template NAME (mz_model_params.chat_template)");
    chat_out o = {.buf = buf, .cap = cap, .n = 0, .spans = spans, .n_spans = n_spans};
    if (c->kind == MZ_CHAT_GEMMA) {
        format_gemma(msgs, n_msgs, add_assistant, &o);
    } else if (c->kind == MZ_CHAT_MISTRAL) {
        format_mistral(msgs, n_msgs, &o);
    } else if (c->kind == MZ_CHAT_LLAMA3) {
        put(&o, "<|begin_of_text|>");
        for (size_t i = 0; i < n_msgs; i++) {
            put(&o, "<|start_header_id|>");
            put(&o, msgs[i].role);
            put(&o, "<|end_header_id|>\n\n");
            put_text(&o, msgs[i].content);
            put(&o, "<|eot_id|>");
        }
        if (add_assistant) put(&o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    } else {
        if (c->default_system && n_msgs > 0 && strcmp(msgs[0].role, "system") != 0) {
            put(&o, "<|im_start|>system\n");
            put_text(&o, c->default_system);
            put(&o, "<|im_end|>\n");
        }
        for (size_t i = 0; i < n_msgs; i++) {
            put(&o, "<|im_start|>");
            put(&o, msgs[i].role);
            put(&o, "\n");
            put_text(&o, msgs[i].content);
            put(&o, "<|im_end|>\n");
        }
        if (add_assistant) put(&o, "<|im_start|>assistant\n");
    }
    const size_t n = o.n;
    *n_out = n;
    if (n >= cap)
        return mz_fail(MZ_E_RANGE, "chat format: %zu bytes (+ NUL) do not fit in %zu", n, cap);
    buf[n] = '\0';
    return MZ_OK;
}
