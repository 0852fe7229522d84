/*
 * request.c — parsing and validation of untrusted request input (see
 * request.h): completion bodies, the /mz/evict body, Content-Length and the
 * API key. Pure functions: no sockets, no engine, no globals, so
 * tests/fuzz/fuzz_http.c drives them directly under ASan/UBSan.
 *
 * Every message returned goes to the client as is: it names a field, never a
 * file, and never echoes a key.
 */
#define _GNU_SOURCE
#include "server/request.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- JSON bodies ------------------------------------------------------------------- */

/* An escape \u0000 at s[i] (the backslash), counting the backslashes before
 * it: an even number of them leaves this one a real escape. */
static bool nul_escape_at(const char *s, size_t i, size_t len)
{
    if (len - i < 6 || memcmp(s + i, "\\u0000", 6)) return false;
    size_t k = 0;
    while (k < i && s[i - 1 - k] == '\\') k++;
    return k % 2 == 0;
}

cJSON *srv_parse_json(const char *body, size_t len, const char **err)
{
    *err = "body is not valid JSON";
    if (!body) body = "";
    for (size_t i = 0; i < len; i++) {
        if (body[i] == '\0') {
            *err = "body is not valid JSON: a NUL byte";
            return NULL;
        }
        /* cJSON would end the string there, silently dropping the rest. */
        if (body[i] == '\\' && nul_escape_at(body, i, len)) {
            *err = "strings must not contain \\u0000";
            return NULL;
        }
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!root) return NULL;
    for (const char *p = end; p < body + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            *err = "body is not valid JSON: something follows the JSON value";
            return NULL;
        }
    *err = NULL;
    return root;
}

/* ---- completion bodies ------------------------------------------------------------- */

void srv_comp_req_free(srv_comp_req *r)
{
    for (size_t i = 0; i < r->n_msgs; i++) free(r->owned[i]);
    free(r->bias);
    r->bias = NULL;
    mz_jschema_free(r->schema);
    r->schema = NULL;
}

static bool is_int(const cJSON *j, double lo, double hi)
{
    return cJSON_IsNumber(j) && j->valuedouble >= lo && j->valuedouble <= hi &&
           floor(j->valuedouble) == j->valuedouble;
}

/* ---- fields: the table of what is honoured, what is refused --------------------------- */

/* Every top-level field a request may carry; anything else is refused by
 * name, so nothing a client asks for is silently ignored. */
static const char *const k_fields_common[] = {
    "model", "stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature", "top_p",
    "top_k", "min_p", "repeat_penalty", "seed", "stop", "n", "logprobs", "logit_bias", "frequency_penalty",
    "presence_penalty", "response_format", "user", "metadata", "store", "service_tier", NULL};
static const char *const k_fields_chat[] = {"messages", "top_logprobs", "modalities", NULL};
static const char *const k_fields_comp[] = {"prompt", "echo", "best_of", "suffix", "parse_special", NULL};

/* OpenAI fields this server does not implement, with the reason given. */
static const struct {
    const char *name, *why;
} k_refused[] = {
    {"tools", "tool calling is not supported"},
    {"tool_choice", "tool calling is not supported"},
    {"parallel_tool_calls", "tool calling is not supported"},
    {"functions", "function calling is not supported"},
    {"function_call", "function calling is not supported"},
    {"audio", "audio output is not supported"},
    {"prediction", "predicted outputs are not supported"},
    {"web_search_options", "web search is not supported"},
    {"reasoning_effort", "this model has no reasoning settings"},
};

static bool name_in(const char *const *list, const char *name)
{
    for (; *list; list++)
        if (!strcmp(*list, name)) return true;
    return false;
}

static const char *check_fields(const cJSON *root, bool chat, srv_comp_req *r)
{
    const cJSON *f;
    cJSON_ArrayForEach(f, root) {
        const char *k = f->string ? f->string : "";
        for (size_t i = 0; i < sizeof k_refused / sizeof k_refused[0]; i++)
            if (!strcmp(k, k_refused[i].name)) {
                snprintf(r->errbuf, sizeof r->errbuf, "\"%s\" is not supported: %s", k, k_refused[i].why);
                return r->errbuf;
            }
        if (name_in(k_fields_common, k) || name_in(chat ? k_fields_chat : k_fields_comp, k)) continue;
        snprintf(r->errbuf, sizeof r->errbuf, "unknown field \"%.64s\" (docs/SERVER.md lists the fields)", k);
        return r->errbuf;
    }
    return NULL;
}

/* A token id written as a JSON object key: decimal digits only. */
static bool parse_token_id(const char *s, int n_vocab, mz_token *out)
{
    if (!*s || strlen(s) > 9) return false;
    long v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return false;
        v = v * 10 + (*p - '0');
    }
    if (n_vocab > 0 && v >= n_vocab) return false;
    *out = (mz_token)v;
    return true;
}

static const char *parse_response_format(const cJSON *j, srv_comp_req *r, int *status)
{
    if (!cJSON_IsObject(j)) return "\"response_format\" must be an object";
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (!cJSON_IsString(ty)) return "\"response_format.type\" must be \"text\", \"json_object\" or \"json_schema\"";
    const cJSON *f;
    cJSON_ArrayForEach(f, j) {
        if (f->string && strcmp(f->string, "type") && strcmp(f->string, "json_schema")) {
            snprintf(r->errbuf, sizeof r->errbuf, "unknown field \"response_format.%.64s\"", f->string);
            return r->errbuf;
        }
    }
    if (!strcmp(ty->valuestring, "text")) return NULL;
    if (!strcmp(ty->valuestring, "json_object")) {
        r->format = SRV_FORMAT_JSON_OBJECT;
        r->schema = mz_jschema_any_object();
        if (!r->schema) {
            *status = 500;
            return "out of memory";
        }
        return NULL;
    }
    if (strcmp(ty->valuestring, "json_schema"))
        return "\"response_format.type\" must be \"text\", \"json_object\" or \"json_schema\"";
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(j, "json_schema");
    if (!cJSON_IsObject(js)) return "\"response_format.json_schema\" must be an object with \"name\" and \"schema\"";
    cJSON_ArrayForEach(f, js) {
        const char *k = f->string ? f->string : "";
        if (strcmp(k, "name") && strcmp(k, "schema") && strcmp(k, "strict") && strcmp(k, "description")) {
            snprintf(r->errbuf, sizeof r->errbuf, "unknown field \"response_format.json_schema.%.64s\"", k);
            return r->errbuf;
        }
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(js, "name");
    if (!cJSON_IsString(name) || !*name->valuestring || strlen(name->valuestring) > 64)
        return "\"response_format.json_schema.name\" must be a string of 1 to 64 characters";
    const cJSON *strict = cJSON_GetObjectItemCaseSensitive(js, "strict");
    if (strict && !cJSON_IsBool(strict) && !cJSON_IsNull(strict))
        return "\"response_format.json_schema.strict\" must be true or false";
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(js, "description");
    if (desc && !cJSON_IsString(desc)) return "\"response_format.json_schema.description\" must be a string";
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
    if (!schema) return "\"response_format.json_schema.schema\" is missing";
    char err[200];
    r->schema = mz_jschema_read(schema, err, sizeof err);
    if (!r->schema) {
        snprintf(r->errbuf, sizeof r->errbuf, "\"response_format.json_schema.schema\": %s", err);
        if (strstr(err, "out of memory")) *status = 500;
        return r->errbuf;
    }
    r->format = SRV_FORMAT_JSON_SCHEMA;
    return NULL;
}

static const char *parse_openai_extras(const srv_req_limits *lim, const cJSON *root, bool chat, srv_comp_req *r,
                                       int *status)
{
    const cJSON *j;
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "frequency_penalty")) && !cJSON_IsNull(j)) {
        if (!cJSON_IsNumber(j) || !(j->valuedouble >= -2 && j->valuedouble <= 2))
            return "\"frequency_penalty\" must be a number in [-2, 2]";
        r->sp.frequency_penalty = (float)j->valuedouble;
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "presence_penalty")) && !cJSON_IsNull(j)) {
        if (!cJSON_IsNumber(j) || !(j->valuedouble >= -2 && j->valuedouble <= 2))
            return "\"presence_penalty\" must be a number in [-2, 2]";
        r->sp.presence_penalty = (float)j->valuedouble;
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "logit_bias")) && !cJSON_IsNull(j)) {
        if (!cJSON_IsObject(j)) return "\"logit_bias\" must be an object {\"token id\": bias}";
        int n = cJSON_GetArraySize(j);
        if (n > SRV_MAX_LOGIT_BIAS) return "\"logit_bias\" has more than 1024 entries";
        if (n > 0) {
            r->bias = calloc((size_t)n, sizeof *r->bias);
            if (!r->bias) {
                *status = 500;
                return "out of memory";
            }
        }
        const cJSON *e;
        cJSON_ArrayForEach(e, j) {
            mz_token t;
            if (!parse_token_id(e->string ? e->string : "", lim->n_vocab, &t)) {
                snprintf(r->errbuf, sizeof r->errbuf, "\"logit_bias\": key \"%.32s\" is not a token id of this model%s",
                         e->string ? e->string : "", lim->n_vocab > 0 ? "" : " (a decimal number)");
                if (lim->n_vocab > 0) {
                    size_t l = strlen(r->errbuf);
                    snprintf(r->errbuf + l, sizeof r->errbuf - l, " (0..%d)", lim->n_vocab - 1);
                }
                return r->errbuf;
            }
            if (!cJSON_IsNumber(e) || !(e->valuedouble >= -100 && e->valuedouble <= 100))
                return "\"logit_bias\" values must be numbers in [-100, 100]";
            for (size_t i = 0; i < r->n_bias; i++)
                if (r->bias[i].token == t) return "\"logit_bias\" names a token twice";
            r->bias[r->n_bias++] = (mz_logit_bias){t, (float)e->valuedouble};
        }
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "logprobs")) && !cJSON_IsNull(j)) {
        if (chat) {
            if (!cJSON_IsBool(j)) return "\"logprobs\" must be true or false";
            r->logprobs = cJSON_IsTrue(j);
        } else {
            /* Legacy completions: an integer, the number of alternatives. */
            if (!is_int(j, 0, 5)) return "\"logprobs\" must be an integer in [0, 5]";
            r->logprobs = true;
            r->top_logprobs = (int)j->valuedouble;
        }
    }
    if (chat && (j = cJSON_GetObjectItemCaseSensitive(root, "top_logprobs")) && !cJSON_IsNull(j)) {
        if (!is_int(j, 0, SRV_MAX_TOP_LOGPROBS)) return "\"top_logprobs\" must be an integer in [0, 20]";
        if (!r->logprobs) return "\"top_logprobs\" needs \"logprobs\": true";
        r->top_logprobs = (int)j->valuedouble;
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "stream_options")) && !cJSON_IsNull(j)) {
        if (!cJSON_IsObject(j)) return "\"stream_options\" must be an object";
        if (!r->stream) return "\"stream_options\" is only allowed with \"stream\": true";
        const cJSON *f;
        cJSON_ArrayForEach(f, j) {
            if (f->string && strcmp(f->string, "include_usage")) {
                snprintf(r->errbuf, sizeof r->errbuf, "unknown field \"stream_options.%.64s\"", f->string);
                return r->errbuf;
            }
            if (!cJSON_IsBool(f)) return "\"stream_options.include_usage\" must be true or false";
            r->include_usage = cJSON_IsTrue(f);
        }
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "response_format")) && !cJSON_IsNull(j)) {
        const char *bad = parse_response_format(j, r, status);
        if (bad) return bad;
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "echo")) && !cJSON_IsNull(j)) {
        if (!cJSON_IsBool(j)) return "\"echo\" must be true or false";
        if (cJSON_IsTrue(j)) return "\"echo\": true is not supported";
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "best_of")) && !cJSON_IsNull(j) && !is_int(j, 1, 1))
        return "\"best_of\" is not supported (only 1)";
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "suffix")) && !cJSON_IsNull(j) &&
        !(cJSON_IsString(j) && !*j->valuestring))
        return "\"suffix\" is not supported";
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "modalities")) && !cJSON_IsNull(j)) {
        const cJSON *e;
        if (!cJSON_IsArray(j)) return "\"modalities\" must be an array";
        cJSON_ArrayForEach(e, j) if (!cJSON_IsString(e) || strcmp(e->valuestring, "text"))
            return "\"modalities\": only \"text\" is supported";
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "user")) && !cJSON_IsNull(j) && !cJSON_IsString(j))
        return "\"user\" must be a string";
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "metadata")) && !cJSON_IsNull(j) && !cJSON_IsObject(j))
        return "\"metadata\" must be an object";
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "store")) && !cJSON_IsNull(j)) {
        if (!cJSON_IsBool(j)) return "\"store\" must be true or false";
        if (cJSON_IsTrue(j)) return "\"store\": true is not supported (nothing is stored)";
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "service_tier")) && !cJSON_IsNull(j) && !cJSON_IsString(j))
        return "\"service_tier\" must be a string";
    return NULL;
}

/* Fills r from the JSON; returns NULL or a message for a 400. */
const char *srv_parse_completion(const srv_req_limits *lim, const cJSON *root, bool chat, srv_comp_req *r,
                                 int *status)
{
    *status = 400;
    if (!cJSON_IsObject(root)) return "body must be a JSON object";
    const char *bad_field = check_fields(root, chat, r);
    if (bad_field) return bad_field;
    const cJSON *j;
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "model")) && !cJSON_IsNull(j)) {
        if (!cJSON_IsString(j)) return "\"model\" must be a string";
        if (*j->valuestring && strcmp(j->valuestring, lim->model_id) && strcmp(j->valuestring, "default")) {
            *status = 404;
            return "model not found (GET /v1/models lists the one this server has)";
        }
    }
    if (chat) {
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
        if (!cJSON_IsArray(msgs)) return "\"messages\" must be an array of {role, content}";
        int n = cJSON_GetArraySize(msgs);
        if (n < 1) return "\"messages\" is empty";
        if (n > SRV_MAX_MESSAGES) return "too many messages";
        const cJSON *m;
        cJSON_ArrayForEach(m, msgs) {
            if (!cJSON_IsObject(m)) return "each message must be an object";
            const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
            const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
            if (!cJSON_IsString(role)) return "message \"role\" must be a string";
            const char *rs = role->valuestring;
            if (!strcmp(rs, "developer")) rs = "system";
            if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant"))
                return "message \"role\" must be system, user or assistant";
            char *text = NULL;
            if (cJSON_IsString(content)) {
                text = strdup(content->valuestring);
            } else if (cJSON_IsArray(content)) {
                size_t total = 0;
                const cJSON *part;
                cJSON_ArrayForEach(part, content) {
                    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(part, "type");
                    const cJSON *tx = cJSON_GetObjectItemCaseSensitive(part, "text");
                    if (cJSON_IsString(ty) && strcmp(ty->valuestring, "text")) {
                        snprintf(r->errbuf, sizeof r->errbuf,
                                 "message content part type \"%.64s\" is not supported (text parts only)", ty->valuestring);
                        return r->errbuf;
                    }
                    if (!cJSON_IsString(ty) || !cJSON_IsString(tx))
                        return "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported";
                    total += strlen(tx->valuestring);
                }
                text = malloc(total + 1);
                if (text) {
                    size_t o = 0;
                    cJSON_ArrayForEach(part, content) {
                        const char *tx = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
                        memcpy(text + o, tx, strlen(tx));
                        o += strlen(tx);
                    }
                    text[o] = '\0';
                }
            } else if (cJSON_IsNull(content) && !strcmp(rs, "assistant")) {
                text = strdup("");
            } else {
                return "message \"content\" must be a string or an array of text parts";
            }
            if (!text) {
                *status = 500;
                return "out of memory";
            }
            r->owned[r->n_msgs] = text;
            r->msgs[r->n_msgs++] = (mz_chat_msg){rs, text};
        }
    } else {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
        if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(cJSON_GetArrayItem(p, 0)))
            p = cJSON_GetArrayItem(p, 0);
        if (!cJSON_IsString(p)) return "\"prompt\" must be a string";
        if (!*p->valuestring) return "\"prompt\" is empty";
        r->prompt = p->valuestring;
        /* An extension: control-token text in a raw prompt is text unless
         * the client says it writes the template itself. */
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(root, "parse_special");
        if (ps && !cJSON_IsNull(ps)) {
            if (!cJSON_IsBool(ps)) return "\"parse_special\" must be true or false";
            r->parse_special = cJSON_IsTrue(ps);
        }
    }
    r->stream = false;
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "stream")) && !cJSON_IsNull(j)) {
        if (!cJSON_IsBool(j)) return "\"stream\" must be true or false";
        r->stream = cJSON_IsTrue(j);
    }
    r->max_tokens = lim->default_max_tokens;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "max_completion_tokens");
    if (!mt || cJSON_IsNull(mt)) mt = cJSON_GetObjectItemCaseSensitive(root, "max_tokens");
    if (mt && !cJSON_IsNull(mt)) {
        if (!is_int(mt, 1, 1e9)) return "\"max_tokens\" must be a positive integer";
        if (mt->valuedouble > lim->max_tokens_limit) return "\"max_tokens\" is above this server's limit";
        r->max_tokens = (int)mt->valuedouble;
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "n")) && !cJSON_IsNull(j)) {
        if (!is_int(j, 1, 1)) return "only \"n\": 1 is supported";
    }
    r->sp = lim->sampler;
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "temperature")) && !cJSON_IsNull(j)) {
        if (!cJSON_IsNumber(j) || !(j->valuedouble >= 0 && j->valuedouble <= 2)) return "\"temperature\" must be a number in [0, 2]";
        r->sp.temperature = (float)j->valuedouble;
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "top_p")) && !cJSON_IsNull(j)) {
        if (!cJSON_IsNumber(j) || !(j->valuedouble > 0 && j->valuedouble <= 1)) return "\"top_p\" must be a number in (0, 1]";
        r->sp.top_p = (float)j->valuedouble;
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "top_k")) && !cJSON_IsNull(j)) {
        if (!is_int(j, 0, 1e6)) return "\"top_k\" must be an integer >= 0";
        r->sp.top_k = (int)j->valuedouble;
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "min_p")) && !cJSON_IsNull(j)) {
        if (!cJSON_IsNumber(j) || !(j->valuedouble >= 0 && j->valuedouble <= 1)) return "\"min_p\" must be a number in [0, 1]";
        r->sp.min_p = (float)j->valuedouble;
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "repeat_penalty")) && !cJSON_IsNull(j)) {
        if (!cJSON_IsNumber(j) || !(j->valuedouble > 0 && j->valuedouble <= 10)) return "\"repeat_penalty\" must be a number in (0, 10]";
        r->sp.repeat_penalty = (float)j->valuedouble;
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "seed")) && !cJSON_IsNull(j)) {
        if (!is_int(j, 0, 9007199254740991.0)) return "\"seed\" must be an integer >= 0";
        r->sp.seed = (uint64_t)j->valuedouble;
        r->seed_given = true;
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "stop")) && !cJSON_IsNull(j)) {
        if (cJSON_IsString(j)) {
            r->stops[r->n_stops++] = j->valuestring;
        } else if (cJSON_IsArray(j)) {
            if (cJSON_GetArraySize(j) > SRV_MAX_STOPS) return "at most 4 stop strings";
            const cJSON *e;
            cJSON_ArrayForEach(e, j) {
                if (!cJSON_IsString(e)) return "\"stop\" must be a string or an array of strings";
                r->stops[r->n_stops++] = e->valuestring;
            }
        } else {
            return "\"stop\" must be a string or an array of strings";
        }
        for (int i = 0; i < r->n_stops; i++) {
            size_t l = strlen(r->stops[i]);
            if (l == 0 || l > SRV_MAX_STOP_LEN) return "stop strings must be 1 to 64 bytes";
        }
    }
    return parse_openai_extras(lim, root, chat, r, status);
}

/* ---- /mz/evict ---------------------------------------------------------------------------- */

const char *srv_parse_evict(const char *body, size_t len, srv_evict_req *out)
{
    memset(out, 0, sizeof *out);
    const char *bad_json;
    cJSON *root = srv_parse_json(body, body ? len : 0, &bad_json); /* bad_json: the generic message below */
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return "body must be a JSON object: {\"bytes\": N}, {\"percent\": P} or {\"all\": true}";
    }
    const cJSON *jb = cJSON_GetObjectItemCaseSensitive(root, "bytes");
    const cJSON *jp = cJSON_GetObjectItemCaseSensitive(root, "percent");
    const cJSON *ja = cJSON_GetObjectItemCaseSensitive(root, "all");
    int given = (jb != NULL) + (jp != NULL) + (ja != NULL);
    const char *bad = NULL;
    if (given != 1) bad = "give exactly one of \"bytes\", \"percent\" or \"all\"";
    else if (jb && (!cJSON_IsNumber(jb) || !(jb->valuedouble >= 0) || jb->valuedouble > 1e18)) bad = "\"bytes\" must be a number >= 0";
    else if (jp && (!cJSON_IsNumber(jp) || !(jp->valuedouble >= 0 && jp->valuedouble <= 100))) bad = "\"percent\" must be a number in [0, 100]";
    else if (ja && !cJSON_IsBool(ja)) bad = "\"all\" must be true or false";
    if (!bad) {
        out->bytes = jb ? jb->valuedouble : 0;
        out->pct = jp ? jp->valuedouble : 0;
        out->by_pct = jp != NULL;
        out->all = ja && cJSON_IsTrue(ja);
    }
    cJSON_Delete(root);
    return bad;
}

size_t srv_evict_amount(const srv_evict_req *r, size_t evictable_total)
{
    if (r->all) return SIZE_MAX;
    if (r->by_pct) return (size_t)((double)evictable_total * r->pct / 100.0 + 0.5);
    return (size_t)r->bytes;
}

/* ---- headers ------------------------------------------------------------------------------- */

bool srv_content_length_ok(const char *value, size_t limit, unsigned long long *out)
{
    const char *p = value;
    while (*p == ' ' || *p == '\t') p++;
    if (*p < '0' || *p > '9') return false; /* strtoull would take "-1" as a huge number */
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    while (*end == ' ' || *end == '\t') end++;
    if (errno || *end || v > limit) return false;
    if (out) *out = v;
    return true;
}

const char *srv_bearer_token(const char *h)
{
    if (!h || strncasecmp(h, "Bearer ", 7)) return NULL;
    h += 7;
    while (*h == ' ') h++;
    return h;
}

bool srv_key_matches(const char *key, size_t key_len, const char *given)
{
    size_t glen = strlen(given);
    volatile unsigned char diff = (unsigned char)(glen != key_len);
    for (size_t i = 0; i < key_len; i++) {
        unsigned char g = i < glen ? (unsigned char)given[i] : 0;
        diff |= (unsigned char)(g ^ (unsigned char)key[i]);
    }
    return diff == 0;
}

/* ---- sessions ------------------------------------------------------------------------------- */

const char *srv_session_id(const char *header, char *id, size_t cap, char *err, size_t err_cap)
{
    id[0] = '\0';
    if (!header || !*header) return NULL;
    const char *why = mz_session_id_check(header, false);
    if (why || strlen(header) >= cap) {
        snprintf(err, err_cap, "the X-Session-Id header: %s", why ? why : "too long");
        return err;
    }
    memcpy(id, header, strlen(header) + 1);
    return NULL;
}
