/*
 * fuzz_http.c — libFuzzer target for the HTTP server's handling of untrusted
 * input (src/server/request.h): everything the server itself interprets in a
 * request; libmicrohttpd parses the HTTP framing.
 *
 * Each input is used, whole, as:
 *   - a POST /v1/chat/completions body and a POST /v1/completions body
 *     (cJSON parse, then srv_parse_completion). A request that passes is
 *     checked against the documented limits (1..1024 messages with a known
 *     role and a content, max_tokens in [1, limit], at most 4 stop strings of
 *     1..64 bytes, sampling values in range); a refused one gets a short
 *     message and 400/404/500. An accepted chat request then goes through
 *     the real model's chat template and tokenizer, as the server does
 *     (model from $MZ_FUZZ_MODEL, default models/SmolLM2-135M-Instruct.Q4_1.gguf;
 *     without it that step is skipped);
 *   - a POST /mz/evict body (srv_parse_evict + srv_evict_amount, the same
 *     conversions the server makes, so UBSan sees any float → size_t overflow);
 *   - header values, split at the first newline: a Content-Length value
 *     (checked against a reference parser) and an Authorization / X-API-Key
 *     value (the constant-time compare must agree with strcmp).
 *
 * Build: clang -fsanitize=fuzzer,address,undefined (CMake MZ_FUZZ=ON).
 */
#include "gguf/gguf.h"
#include "server/request.h"
#include "tokenizer/tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define KEY "k3y-0123456789abcdef"
#define BODY_LIMIT ((size_t)1 << 20)
#define TOKENIZE_MAX 16384 /* longest formatted prompt we tokenize (speed) */

static mz_tokenizer *g_tok;
static bool g_loaded;

static void load_once(void)
{
    if (g_loaded) return;
    g_loaded = true;
    const char *path = getenv("MZ_FUZZ_MODEL");
    if (!path || !*path) path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    mz_gguf *g = NULL;
    if (mz_gguf_open(path, &g) != MZ_OK || mz_tokenizer_init(g, &g_tok) != MZ_OK) {
        fprintf(stderr, "fuzz_http: no tokenizer (%s); chat template + tokenization step skipped\n",
                mz_last_error());
        g_tok = NULL;
    }
    mz_gguf_free(g);
}

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_http: check failed: %s\n", what);
        abort();
    }
}

static void check_refusal(const char *msg, int status)
{
    check(msg && *msg && strlen(msg) < 256, "refusal message present and short");
    check(status == 400 || status == 404 || status == 500, "refusal status");
}

/* What the server does with an accepted chat request before the engine. */
static void format_and_tokenize(const srv_comp_req *r)
{
    if (!g_tok) return;
    size_t need = 0;
    mz_status st = mz_tokenizer_chat_format(g_tok, r->msgs, r->n_msgs, true, NULL, 0, &need);
    check(st == MZ_OK || st == MZ_E_RANGE, "chat format (size query)");
    if (need > TOKENIZE_MAX) return;
    char *buf = malloc(need + 1);
    size_t n = 0;
    check(buf && mz_tokenizer_chat_format(g_tok, r->msgs, r->n_msgs, true, buf, need + 1, &n) == MZ_OK &&
              n == need,
          "chat format");
    size_t nt = 0;
    st = mz_tokenizer_encode(g_tok, buf, n, true, true, NULL, 0, &nt);
    check(st == MZ_OK || st == MZ_E_RANGE, "encode (size query)");
    mz_token *toks = malloc((nt ? nt : 1) * sizeof *toks);
    size_t nt2 = 0;
    check(toks && mz_tokenizer_encode(g_tok, buf, n, true, true, toks, nt, &nt2) == MZ_OK && nt2 == nt,
          "encode");
    for (size_t i = 0; i < nt; i++)
        check(toks[i] >= 0 && toks[i] < mz_tokenizer_n_vocab(g_tok), "token id in range");
    free(toks);
    free(buf);
}

static void completion(const cJSON *root, bool chat)
{
    srv_req_limits lim = {.model_id = "SmolLM2-135M-Instruct.Q4_1", .default_max_tokens = 256,
                          .max_tokens_limit = 4096, .sampler = mz_sampler_params_default(), .n_vocab = 49152};
    srv_comp_req *r = calloc(1, sizeof *r);
    check(r != NULL, "calloc");
    int status = 0;
    const char *bad = srv_parse_completion(&lim, root, chat, r, &status);
    if (bad) {
        check_refusal(bad, status);
    } else {
        if (chat) {
            check(r->n_msgs >= 1 && r->n_msgs <= SRV_MAX_MESSAGES, "message count");
            for (size_t i = 0; i < r->n_msgs; i++) {
                const char *role = r->msgs[i].role;
                check(role && (!strcmp(role, "system") || !strcmp(role, "user") || !strcmp(role, "assistant")),
                      "role");
                check(r->msgs[i].content != NULL, "content");
            }
        } else {
            check(r->prompt && *r->prompt, "prompt");
        }
        check(r->max_tokens >= 1 && r->max_tokens <= lim.max_tokens_limit, "max_tokens in range");
        check(r->n_stops >= 0 && r->n_stops <= SRV_MAX_STOPS, "stop count");
        for (int i = 0; i < r->n_stops; i++) {
            size_t l = strlen(r->stops[i]);
            check(l >= 1 && l <= SRV_MAX_STOP_LEN, "stop length");
        }
        check(r->sp.temperature >= 0 && r->sp.temperature <= 2, "temperature");
        check(r->sp.top_p > 0 && r->sp.top_p <= 1, "top_p");
        check(r->sp.top_k >= 0, "top_k");
        check(r->sp.min_p >= 0 && r->sp.min_p <= 1, "min_p");
        check(r->sp.repeat_penalty > 0 && r->sp.repeat_penalty <= 10, "repeat_penalty");
        check(r->sp.frequency_penalty >= -2 && r->sp.frequency_penalty <= 2, "frequency_penalty");
        check(r->sp.presence_penalty >= -2 && r->sp.presence_penalty <= 2, "presence_penalty");
        check(r->top_logprobs >= 0 && r->top_logprobs <= SRV_MAX_TOP_LOGPROBS, "top_logprobs");
        check(r->logprobs || r->top_logprobs == 0, "top_logprobs only with logprobs");
        check(r->n_bias <= SRV_MAX_LOGIT_BIAS, "logit_bias count");
        for (size_t i = 0; i < r->n_bias; i++)
            check(r->bias[i].token >= 0 && r->bias[i].token < lim.n_vocab && r->bias[i].bias >= -100 &&
                      r->bias[i].bias <= 100,
                  "logit_bias entry");
        check((r->format == SRV_FORMAT_TEXT) == (r->schema == NULL), "a schema exactly for the JSON formats");
        if (r->schema) {
            mz_jgram *g = mz_jgram_init(r->schema);
            check(g != NULL && !mz_jgram_complete(g), "grammar at the start of a document");
            mz_jgram_free(g);
        }
        if (chat) format_and_tokenize(r);
    }
    srv_comp_req_free(r);
    free(r);
}

static void evict(const uint8_t *data, size_t size)
{
    srv_evict_req er;
    const char *bad = srv_parse_evict((const char *)data, size, &er);
    if (bad) {
        check(strlen(bad) < 256, "evict refusal message");
        return;
    }
    check(er.bytes >= 0 && er.bytes <= 1e18, "bytes in range");
    check(er.pct >= 0 && er.pct <= 100, "percent in range");
    check(!(er.all && er.by_pct), "one kind");
    const size_t totals[] = {0, 1, (size_t)1 << 30, SIZE_MAX / 2};
    for (size_t i = 0; i < sizeof totals / sizeof totals[0]; i++) {
        size_t n = srv_evict_amount(&er, totals[i]);
        if (er.by_pct) check((double)n <= (double)totals[i] + 1.0, "percent amount within the total");
        if (!er.all && !er.by_pct) check((double)n <= er.bytes && (double)n >= er.bytes - 1.0, "byte amount");
        if (er.all) check(n == SIZE_MAX, "all");
    }
}

/* Reference: optional blanks, digits, optional blanks; saturating. */
static bool ref_content_length(const char *v, size_t limit, unsigned long long *out)
{
    while (*v == ' ' || *v == '\t') v++;
    if (*v < '0' || *v > '9') return false;
    unsigned long long x = 0;
    bool big = false;
    for (; *v >= '0' && *v <= '9'; v++) {
        unsigned d = (unsigned)(*v - '0');
        if (x > (~0ULL - d) / 10) big = true;
        else x = x * 10 + d;
    }
    while (*v == ' ' || *v == '\t') v++;
    if (*v || big || x > limit) return false;
    *out = x;
    return true;
}

static void headers(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    check(s != NULL, "malloc");
    memcpy(s, data, size);
    s[size] = '\0';
    char *nl = memchr(s, '\n', size);
    const char *cl = s, *auth = nl ? nl + 1 : s;
    if (nl) *nl = '\0';
    const size_t limits[] = {0, 65536, BODY_LIMIT};
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        unsigned long long got = 0, want = 0;
        bool ok = srv_content_length_ok(cl, limits[i], &got);
        bool ref = ref_content_length(cl, limits[i], &want);
        check(ok == ref, "Content-Length accepted iff the reference accepts it");
        if (ok) check(got == want && got <= limits[i], "Content-Length value");
    }
    const char *tok = srv_bearer_token(auth);
    if (tok) check(tok >= auth && tok <= auth + strlen(auth), "bearer token within the header");
    const char *given[] = {auth, tok ? tok : ""};
    for (size_t i = 0; i < 2; i++)
        check(srv_key_matches(KEY, strlen(KEY), given[i]) == !strcmp(KEY, given[i]), "key compare agrees with strcmp");
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    load_once();
    if (size > BODY_LIMIT) return 0; /* the server refuses these with 413 */
    const char *bad_json = NULL;
    cJSON *root = srv_parse_json((const char *)data, size, &bad_json);
    check(!root == (bad_json != NULL), "a strict JSON parse either succeeds or says why");
    if (root) {
        check(memchr(data, '\0', size) == NULL, "no accepted body holds a NUL byte");
        completion(root, true);
        completion(root, false);
        cJSON_Delete(root);
    }
    evict(data, size);
    headers(data, size);
    return 0;
}
