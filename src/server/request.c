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
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- completion bodies ------------------------------------------------------------- */

void srv_comp_req_free(srv_comp_req *r)
{
    for (size_t i = 0; i < r->n_msgs; i++) free(r->owned[i]);
}

static bool is_int(const cJSON *j, double lo, double hi)
{
    return cJSON_IsNumber(j) && j->valuedouble >= lo && j->valuedouble <= hi &&
           floor(j->valuedouble) == j->valuedouble;
}

/* Fills r from the JSON; returns NULL or a message for a 400. */
const char *srv_parse_completion(const srv_req_limits *lim, const cJSON *root, bool chat, srv_comp_req *r,
                                 int *status)
{
    *status = 400;
    if (!cJSON_IsObject(root)) return "body must be a JSON object";
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
                    if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text") || !cJSON_IsString(tx))
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
    return NULL;
}

/* ---- /mz/evict ---------------------------------------------------------------------------- */

const char *srv_parse_evict(const char *body, size_t len, srv_evict_req *out)
{
    memset(out, 0, sizeof *out);
    cJSON *root = cJSON_ParseWithLength(body ? body : "", body ? len : 0);
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

bool srv_session_id_valid(const char *id, bool allow_anon)
{
    size_t n = 0;
    for (const char *p = id; *p; p++, n++) {
        char c = *p;
        bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
                  c == '_' || c == ':' || c == '@' || c == '+' || c == '-';
        if (!ok || n >= SRV_SESSION_ID_MAX_LEN) return false;
    }
    if (n == 0) return false;
    return allow_anon || strncmp(id, "anon-", 5);
}

const char *srv_session_id(const cJSON *root, const char *header, char *id, size_t cap)
{
    id[0] = '\0';
    const char *v = header && *header ? header : NULL;
    bool from_user = false;
    if (!v) {
        const cJSON *u = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "user") : NULL;
        if (!u || cJSON_IsNull(u)) return NULL;
        if (!cJSON_IsString(u)) return "\"user\" must be a string (it names the session)";
        if (!*u->valuestring) return NULL;
        v = u->valuestring;
        from_user = true;
    }
    if (!srv_session_id_valid(v, false) || strlen(v) >= cap)
        return from_user ? "\"user\" names the session: 1 to 64 characters of A-Z a-z 0-9 . _ : @ + -, not beginning "
                           "with \"anon-\""
                         : "the X-Session-Id header must be 1 to 64 characters of A-Z a-z 0-9 . _ : @ + - and not "
                           "begin with \"anon-\"";
    memcpy(id, v, strlen(v) + 1);
    return NULL;
}
