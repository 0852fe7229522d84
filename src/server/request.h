/*
 * request.h — the server's parsing of untrusted input, kept free of sockets,
 * the engine and libmicrohttpd so that it can be fuzzed on its own
 * (tests/fuzz/fuzz_http.c): request bodies (chat/completions, completions,
 * /mz/evict) and the header values the server interprets itself
 * (Content-Length, the API key). libmicrohttpd parses the HTTP framing.
 *
 * Internal to src/server/ and its fuzzer; not part of the public API.
 * Thread contract: every function here is pure (any thread); none keeps state.
 */
#ifndef MZ_SERVER_REQUEST_H
#define MZ_SERVER_REQUEST_H

#include "mzcache.h"
#include "grammar/grammar.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#define SRV_MAX_STOPS 4
#define SRV_MAX_STOP_LEN 64
#define SRV_MAX_MESSAGES 1024
#define SRV_MAX_TOP_LOGPROBS 20         /* chat top_logprobs; completions logprobs: 5 */
#define SRV_MAX_LOGIT_BIAS 1024

/* response_format. */
typedef enum srv_format {
    SRV_FORMAT_TEXT = 0,
    SRV_FORMAT_JSON_OBJECT,         /* any JSON object */
    SRV_FORMAT_JSON_SCHEMA          /* a document valid under schema */
} srv_format;

/* What a completion request may ask for, and the defaults it gets. */
typedef struct srv_req_limits {
    const char *model_id;           /* "model" must be this, "default" or "" */
    int default_max_tokens;         /* when the request gives none */
    int max_tokens_limit;           /* larger max_tokens → 400 */
    mz_sampler_params sampler;      /* defaults for sampling fields left out */
    int n_vocab;                    /* logit_bias ids must be below this (0: not checked) */
} srv_req_limits;

/* A validated completion request. Strings point into the cJSON tree it was
 * parsed from (valid while that tree lives), except the joined multi-part
 * message contents, which it owns (srv_comp_req_free). */
typedef struct srv_comp_req {
    mz_chat_msg msgs[SRV_MAX_MESSAGES];
    char *owned[SRV_MAX_MESSAGES];  /* message contents (copies) */
    size_t n_msgs;
    const char *prompt;             /* /v1/completions */
    bool parse_special;             /* /v1/completions: "<|im_end|>" in the prompt is that control token */
    bool stream;
    int max_tokens;                 /* in [1, max_tokens_limit] */
    mz_sampler_params sp;
    const char *stops[SRV_MAX_STOPS];
    int n_stops;                    /* each 1..SRV_MAX_STOP_LEN bytes */
    bool logprobs;                  /* return the chosen tokens' log-probabilities */
    int top_logprobs;               /* and that many alternatives (0..SRV_MAX_TOP_LOGPROBS) */
    mz_logit_bias *bias;            /* owned; n_bias entries, distinct tokens */
    size_t n_bias;
    srv_format format;
    mz_jschema *schema;             /* owned; set for both JSON formats */
    bool include_usage;             /* stream_options.include_usage */
    bool seed_given;                /* "seed" was in the request */
    char errbuf[256];               /* messages that name a field are written here */
} srv_comp_req;

/* Parses body[0, len) as one strict JSON value: NULL with *err set (a
 * message for a 400) for invalid JSON, anything but whitespace after the
 * value, a NUL byte, or a \u0000 escape (which cJSON would silently end the
 * string at). */
cJSON *srv_parse_json(const char *body, size_t len, const char **err);

/* Fills r (zeroed by the caller) from a parsed body. Every top-level field
 * is either honoured or refused by name (docs/SERVER.md has the table). Returns NULL when the
 * request is valid, else a message for the client (never naming a file),
 * with *status 400, 404 (unknown model) or 500 (out of memory). Call
 * srv_comp_req_free(r) either way. */
const char *srv_parse_completion(const srv_req_limits *lim, const cJSON *root, bool chat, srv_comp_req *r,
                                 int *status);
void srv_comp_req_free(srv_comp_req *r);

/* /mz/evict: {"bytes": N} | {"percent": P} | {"all": true}. */
typedef struct srv_evict_req {
    bool all;                       /* {"all": true} */
    bool by_pct;                    /* {"percent": P} */
    double bytes;                   /* in [0, 1e18] */
    double pct;                     /* in [0, 100] */
} srv_evict_req;

/* Parses and validates body[0, len) (not NUL-terminated). NULL on success,
 * else a message for a 400. */
const char *srv_parse_evict(const char *body, size_t len, srv_evict_req *out);
/* The bytes to ask mz_evict for: SIZE_MAX for all, else the percentage of
 * evictable_total or the byte count, rounded. */
size_t srv_evict_amount(const srv_evict_req *r, size_t evictable_total);

/* A Content-Length value: true when it is a decimal number no larger than
 * limit (*out gets it); false for anything else, which is refused with 413. */
bool srv_content_length_ok(const char *value, size_t limit, unsigned long long *out);

/* The key given in an Authorization ("Bearer KEY", scheme case-insensitive)
 * or X-API-Key header value; NULL when the Authorization value is not a
 * Bearer one. Points into the value. */
const char *srv_bearer_token(const char *authorization);

/* Constant-time comparison of a given key with the configured one: the time
 * depends only on the configured key's length, never on how much matches. */
bool srv_key_matches(const char *key, size_t key_len, const char *given);

/* ---- sessions (docs/SERVER.md "Sessions") ---- */

#define SRV_SESSION_ID_MAX_LEN MZ_SESSION_ID_MAX

/* The session a completion names: the X-Session-Id header value (NULL or
 * empty: none; the body's "user" is an end-user id and never names one), an
 * id mz_session_id_check lets a client choose: never an anonymous one
 * (DELETE /mz/sessions/ID takes those too). Copies it into id[cap] (""
 * when none). NULL on success, else a message for a 400, written into
 * err[err_cap]. */
const char *srv_session_id(const char *header, char *id, size_t cap, char *err, size_t err_cap);

#endif /* MZ_SERVER_REQUEST_H */
