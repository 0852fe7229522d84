/*
 * test_server_sessions.c — `mzcache serve` with several sessions, over a real
 * socket (127.0.0.1, an ephemeral port), in-process, with the real model
 * (models/SmolLM2-135M-Instruct.Q4_1.gguf; skips without it), greedy
 * decoding and the lossless raw KV codec.
 *
 * Server A (3 sessions, no budget):
 *   - routing by id: X-Session-Id ("user" is an end-user id, no session); a follow-up
 *     reuses the whole first prompt and prefills only the new tokens;
 *   - cached_tokens is exactly the common token prefix (computed here with
 *     the model's own tokenizer) after an edit inside a named session;
 *   - bad ids (charset, length, reserved prefix, wrong type) get 400;
 *   - routing by prefix: two anonymous conversations with the same system
 *     prompt, alternating three turns each, never re-prefill their history;
 *   - LRU forgetting at --max-sessions; per-session status (ISO-8601 last use,
 *     TTFT, bytes) and metrics; GET /mz/sessions; DELETE (404 unknown, 400
 *     bad id, 409 "busy, retry" at once for a session that is generating,
 *     whose request gets its whole answer, then 200).
 * Server B (budget below the sum of three sessions): three named
 * conversations alternate; after every request the footprint computed here
 * from the status numbers is within the budget, the idle sessions' KV was
 * evicted, every switch prefills only the new tokens, and every answer is
 * identical to the same conversation on server A.
 *
 * Threads: a client thread runs a request while the main thread deletes its
 * session and reads status (label concurrency, run under TSan).
 */
#define _GNU_SOURCE
#include "core/core.h"
#include "server/server.h"

#include "server_util.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <regex.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <time.h>
#include <unistd.h>

static int g_port;


/* Status of a request with optional extra headers; the body parsed into *json. */
static int call_h(const char *method, const char *path, const char *headers, const char *body, cJSON **json)
{
    mz_http_response r;
    int rc = mz_http_request_ex("127.0.0.1", g_port, method, path, NULL, headers, body, body ? strlen(body) : 0,
                                120000, &r);
    if (rc) {
        fprintf(stderr, "request %s %s failed: %s\n", method, path, strerror(-rc));
        if (json) *json = NULL;
        return -1;
    }
    if (json) *json = cJSON_ParseWithLength(r.body, r.len);
    int st = r.status;
    mz_http_response_free(&r);
    return st;
}

/* A conversation: system + alternating user/assistant messages. */
typedef struct conv {
    const char *msgs[16][2];
    int n;
    char *owned[16];
} conv;

static void conv_add(conv *c, const char *role, const char *text)
{
    c->owned[c->n] = strdup(text);
    c->msgs[c->n][0] = role;
    c->msgs[c->n][1] = c->owned[c->n];
    c->n++;
}

static void conv_free(conv *c)
{
    for (int i = 0; i < c->n; i++) free(c->owned[i]);
    c->n = 0;
}

typedef struct turn {
    int status;
    char *content;
    double prompt, cached, prefilled, completion, ttft;
    char finish[16];
} turn;

/* Sends the conversation (+ "user" field when user != NULL, + header when
 * sid != NULL, + logit_bias when bias != NULL); appends the answer to it. */
static turn send_turn_bias(conv *c, const char *sid, const char *user, int max_tokens, const cJSON *bias)
{
    turn t = {0};
    cJSON *root = cJSON_CreateObject();
    cJSON *msgs = cJSON_AddArrayToObject(root, "messages");
    for (int i = 0; i < c->n; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", c->msgs[i][0]);
        cJSON_AddStringToObject(m, "content", c->msgs[i][1]);
        cJSON_AddItemToArray(msgs, m);
    }
    cJSON_AddNumberToObject(root, "temperature", 0);
    cJSON_AddNumberToObject(root, "max_tokens", max_tokens);
    if (user) cJSON_AddStringToObject(root, "user", user);
    if (bias) cJSON_AddItemToObject(root, "logit_bias", cJSON_Duplicate(bias, true));
    char *body = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    char hdr[160] = "";
    if (sid) snprintf(hdr, sizeof hdr, "X-Session-Id: %s\r\n", sid);
    cJSON *j = NULL;
    t.status = call_h("POST", "/v1/chat/completions", sid ? hdr : NULL, body, &j);
    free(body);
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const char *content = jstr(ch, "message.content");
    t.content = strdup(content ? content : "");
    snprintf(t.finish, sizeof t.finish, "%s", jstr(ch, "finish_reason") ? jstr(ch, "finish_reason") : "");
    t.prompt = jnum(j, "usage.prompt_tokens");
    t.cached = jnum(j, "usage.prompt_tokens_details.cached_tokens");
    t.prefilled = jnum(j, "timings.prompt_n");
    t.completion = jnum(j, "usage.completion_tokens");
    t.ttft = jnum(j, "timings.ttft_ms");
    cJSON_Delete(j);
    if (t.status == 200) conv_add(c, "assistant", t.content);
    return t;
}

/* Under ThreadSanitizer (T_UNDER_TSAN) the answers are at most 2 tokens: a
 * SmolLM2 token costs about 0.5 s there, and the checks that run there
 * (routing, cached prefixes, bad ids, LRU, prompt + generated = the
 * session's tokens) hold for any answer length; the decode loop is the same
 * code each token. The DELETE-while-generating request (send_turn_bias, its
 * own length) is unchanged. The plain and ASan builds keep the lengths. */
static turn send_turn(conv *c, const char *sid, const char *user, int max_tokens)
{
    return send_turn_bias(c, sid, user, T_UNDER_TSAN && max_tokens > 2 ? 2 : max_tokens, NULL);
}

/* send_turn when only the status matters. */
static int send_turn_st(conv *c, const char *sid, const char *user, int max_tokens)
{
    turn t = send_turn(c, sid, user, max_tokens);
    free(t.content);
    return t.status;
}

/* The session with this id in GET /mz/sessions (a copy), or NULL. */
static cJSON *session_info(const char *id, cJSON **list_out)
{
    cJSON *j = NULL;
    if (call_h("GET", "/mz/sessions", NULL, NULL, &j) != 200) {
        cJSON_Delete(j);
        return NULL;
    }
    cJSON *found = NULL, *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "data")) {
        if (jstr(e, "id") && !strcmp(jstr(e, "id"), id)) found = cJSON_Duplicate(e, true);
    }
    if (list_out) *list_out = j;
    else cJSON_Delete(j);
    return found;
}

static int n_sessions(void)
{
    cJSON *j = NULL;
    call_h("GET", "/mz/sessions", NULL, NULL, &j);
    int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "data"));
    cJSON_Delete(j);
    return n;
}

static void delete_all(void)
{
    cJSON *j = NULL;
    call_h("GET", "/mz/sessions", NULL, NULL, &j);
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "data")) {
        char path[128];
        snprintf(path, sizeof path, "/mz/sessions/%s", jstr(e, "id"));
        CHECK_EQ_INT(call_h("DELETE", path, NULL, NULL, NULL), 200);
    }
    cJSON_Delete(j);
}

/* Footprint from /mz/status numbers, computed here (what --mem-budget bounds:
 * pinned + weights resident/compressed once + each session's KV resident and
 * compressed, or its stack's mapped bytes where larger). */
static double footprint_from_status(double *reported)
{
    cJSON *j = NULL;
    if (call_h("GET", "/mz/status", NULL, NULL, &j) != 200) return -1;
    double fp = jnum(j, "memory.pinned_bytes") + jnum(j, "memory.weights.resident_bytes") +
                jnum(j, "memory.weights.compressed_bytes");
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "sessions")) {
        double comp = jnum(e, "compressed_bytes"), mapped = jnum(e, "compstack_mapped_bytes");
        fp += jnum(e, "resident_bytes") + (comp > mapped ? comp : mapped);
    }
    if (reported) *reported = jnum(j, "budget.footprint_bytes");
    cJSON_Delete(j);
    return fp;
}

static mz_server_t *start(const char *model, const char *swap, int max_sessions, size_t budget, int delay_ms)
{
    mz_server_params sp = srv_params(model, swap);
    sp.pressure = false;
    sp.max_queue = 4;
    sp.max_sessions = max_sessions;
    sp.mem_budget_bytes = budget;
    sp.token_delay_ms = delay_ms;
    mz_server_t *srv = NULL;
    if (mz_server_start(&sp, &srv)) {
        fprintf(stderr, "server start: %s\n", mz_last_error());
        return NULL;
    }
    g_port = mz_server_port(srv);
    return srv;
}

/* Tokens of a raw prompt, as the server makes them (BOS added, specials parsed). */
static size_t tokenize(mz_model_t *m, const char *text, mz_token *out, size_t cap)
{
    size_t n = 0;
    if (mz_tokenize(m, text, strlen(text), true, true, out, cap, &n)) return 0;
    return n;
}

typedef struct bg_req {
    const char *sid;
    int max_tokens;            /* 0: 40 */
    const cJSON *bias;         /* logit_bias, or NULL */
    turn t;
    conv c;
    atomic_bool done;          /* the answer came back */
} bg_req;

static void *bg_main(void *arg)
{
    bg_req *b = arg;
    b->t = send_turn_bias(&b->c, b->sid, NULL, b->max_tokens ? b->max_tokens : 40, b->bias);
    atomic_store(&b->done, true);
    return NULL;
}

/* Waits until GET /mz/sessions shows session id with a request running on it. */
static bool wait_active(const char *id, double timeout_ms)
{
    double t0 = mz_time_ms();
    while (mz_time_ms() - t0 < timeout_ms) {
        cJSON *e = session_info(id, NULL);
        bool active = e && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "active"));
        cJSON_Delete(e);
        if (active) return true;
        usleep(2000);
    }
    return false;
}

static const char *SYS = "You are a terse assistant.";

/* Under ThreadSanitizer the real model computes ~15x slower: the phases that
 * add no thread interplay (alternation, the budget server) run in the plain
 * and ASan builds only. */
static const bool g_tsan = T_UNDER_TSAN;

int main(void)
{
    const char *model = t_real_model_path();
    if (!model) return t_skip("test_server_sessions", "no models/SmolLM2 (run make model)");
    char swap[512];
    snprintf(swap, sizeof swap, "%s", t_tmp_path("sessions-swap"));
    mz_model_t *tm = NULL; /* the model's tokenizer, for exact prefix checks */
    mz_model_params mp = mz_model_params_default();
    if (mz_model_load(model, &mp, &tm)) {
        fprintf(stderr, "load: %s\n", mz_last_error());
        return 1;
    }

    /* ---------------- server A: 3 sessions, no budget ---------------- */
    mz_server_t *srv = start(model, swap, 3, 0, 0);
    if (!srv) return 1;

    /* routing by id (header), follow-up reuses the first prompt */
    conv alice = {0};
    conv_add(&alice, "system", SYS);
    conv_add(&alice, "user", "Name three colours.");
    turn a1 = send_turn(&alice, "alice", NULL, 10);
    CHECK_EQ_INT(a1.status, 200);
    CHECK_MSG(a1.cached == 0, "first request of a new session reused %.0f tokens", a1.cached);
    conv_add(&alice, "user", "And three animals?");
    turn a2 = send_turn(&alice, "alice", NULL, 10);
    CHECK_EQ_INT(a2.status, 200);
    fprintf(stderr, "id routing: first prompt %.0f; second %.0f, %.0f cached, %.0f computed\n", a1.prompt, a2.prompt,
            a2.cached, a2.prefilled);
    CHECK_MSG(a2.cached >= a1.prompt, "follow-up reused %.0f tokens, first prompt had %.0f", a2.cached, a1.prompt);
    CHECK(a2.prefilled == a2.prompt - a2.cached);
    CHECK_MSG(a2.prefilled <= a2.prompt - a1.prompt, "computed %.0f, more than the new part", a2.prefilled);

    /* "user" is an end-user id, never a session: the header names it */
    conv bob = {0};
    conv_add(&bob, "system", SYS);
    conv_add(&bob, "user", "Say hello.");
    turn b1 = send_turn(&bob, "bob@example.com", NULL, 8);
    CHECK_EQ_INT(b1.status, 200);
    cJSON *bi = session_info("bob@example.com", NULL);
    CHECK_MSG(bi != NULL, "no session named by the header");
    double bob_tokens = jnum(bi, "tokens");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(bi, "named")));
    cJSON_Delete(bi);
    conv_add(&bob, "user", "Again.");
    turn b2 = send_turn(&bob, "bob@example.com", "Bob Smith", 8);
    CHECK_MSG(b2.cached >= b1.prompt, "header follow-up reused %.0f of %.0f", b2.cached, b1.prompt);
    CHECK_MSG(session_info("Bob Smith", NULL) == NULL, "\"user\" made a session");
    bi = session_info("bob@example.com", NULL);
    bob_tokens = bi ? jnum(bi, "tokens") : 0;
    cJSON_Delete(bi);
    conv carol = {0};
    conv_add(&carol, "system", SYS);
    conv_add(&carol, "user", "Say hello.");
    turn c1 = send_turn(&carol, "carol", "bob@example.com", 8);
    CHECK_EQ_INT(c1.status, 200);
    CHECK_MSG(c1.cached == 0, "header+user went to an existing session (cached %.0f)", c1.cached);
    bi = session_info("bob@example.com", NULL);
    cJSON *ci = session_info("carol", NULL);
    CHECK_MSG(ci != NULL, "the X-Session-Id session does not exist");
    CHECK_MSG(bi && jnum(bi, "tokens") == bob_tokens, "bob's session changed by carol's request");
    cJSON_Delete(bi);
    cJSON_Delete(ci);

    /* bad ids: 400, and no session made */
    {
        char long_id[80];
        memset(long_id, 'x', 65);
        long_id[65] = '\0';
        char hdr_long[128];
        snprintf(hdr_long, sizeof hdr_long, "X-Session-Id: %s\r\n", long_id);
        const char *body = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 2}";
        struct { const char *hdr, *body; } cases[] = {
            {"X-Session-Id: a/b\r\n", body},
            {"X-Session-Id: a b\r\n", body},
            {"X-Session-Id: anon-7\r\n", body},
            {"X-Session-Id: caf\xc3\xa9\r\n", body},
            {hdr_long, body},
            {NULL, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"user\": 5}"},
        };
        int before = n_sessions();
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            cJSON *j = NULL;
            int st = call_h("POST", "/v1/chat/completions", cases[i].hdr, cases[i].body, &j);
            CHECK_MSG(st == 400 && jstr(j, "error.message"), "bad id case %zu: %d", i, st);
            cJSON_Delete(j);
        }
        CHECK_EQ_INT(n_sessions(), before);
        CHECK_EQ_INT(call_h("DELETE", "/mz/sessions/nobody", NULL, NULL, NULL), 404);
        CHECK_EQ_INT(call_h("DELETE", "/mz/sessions/a%2Fb", NULL, NULL, NULL), 400);
        char path[128];
        snprintf(path, sizeof path, "/mz/sessions/%s", long_id);
        CHECK_EQ_INT(call_h("DELETE", path, NULL, NULL, NULL), 400);
        CHECK_EQ_INT(call_h("GET", "/mz/sessions/alice", NULL, NULL, NULL), 405);
    }

    /* per-session status, sessions list and metrics */
    {
        cJSON *j = NULL;
        CHECK_EQ_INT(call_h("GET", "/mz/status", NULL, NULL, &j), 200);
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "sessions"), *e;
        CHECK_EQ_INT(cJSON_GetArraySize(arr), 3);
        regex_t iso;
        regcomp(&iso, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$", REG_EXTENDED | REG_NOSUB);
        double prev_use = 1e300;
        cJSON_ArrayForEach(e, arr) {
            const char *id = jstr(e, "id");
            CHECK(id != NULL);
            CHECK_MSG(jstr(e, "last_use") && regexec(&iso, jstr(e, "last_use"), 0, NULL, 0) == 0, "last_use '%s'",
                      jstr(e, "last_use") ? jstr(e, "last_use") : "(none)");
            CHECK(jnum(e, "tokens") > 0);
            CHECK(jnum(e, "resident_bytes") > 0);
            CHECK(jnum(e, "compressed_bytes") == 0 && jnum(e, "stored_bytes") == 0);
            CHECK_MSG(jnum(e, "last_ttft_ms") > 0, "session %s: last TTFT %.3f", id ? id : "", jnum(e, "last_ttft_ms"));
            CHECK_MSG(jnum(e, "last_use_unix") <= prev_use, "sessions not most recent first");
            prev_use = jnum(e, "last_use_unix");
        }
        regfree(&iso);
        /* alice's tokens: her last prompt plus what was generated (and the end-of-turn token, if any) */
        cJSON *ai = session_info("alice", NULL);
        double at = jnum(ai, "tokens");
        CHECK_MSG(at >= a2.prompt + a2.completion && at <= a2.prompt + a2.completion + 1,
                  "alice holds %.0f tokens; prompt %.0f + %.0f generated", at, a2.prompt, a2.completion);
        CHECK_EQ_INT((long long)jnum(ai, "requests"), 2);
        cJSON_Delete(ai);
        cJSON_Delete(j);
        mz_http_response r;
        CHECK(!mz_http_request("127.0.0.1", g_port, "GET", "/metrics", NULL, NULL, 0, 10000, &r));
        CHECK(r.body && strstr(r.body, "mzcache_session_tokens{session=\"alice\"} "));
        CHECK(r.body && strstr(r.body, "mzcache_session_kv_bytes{session=\"carol\",state=\"resident\"} "));
        CHECK(r.body && strstr(r.body, "mzcache_session_last_ttft_seconds{session=\"bob@example.com\"} "));
        CHECK(r.body && strstr(r.body, "mzcache_sessions 3\n"));
        if (r.body) srv_check_metrics(r.body, false);
        mz_http_response_free(&r);
    }

    /* LRU forgetting: alice, bob, carol held; touch alice and carol; a new
     * one forgets bob (least recently used) */
    {
        conv_add(&alice, "user", "One more?");
        CHECK_EQ_INT(send_turn_st(&alice, "alice", NULL, 6), 200);
        conv_add(&carol, "user", "Again.");
        CHECK_EQ_INT(send_turn_st(&carol, "carol", NULL, 6), 200);
        conv dave = {0};
        conv_add(&dave, "system", SYS);
        conv_add(&dave, "user", "Hi.");
        CHECK_EQ_INT(send_turn_st(&dave, "dave", NULL, 6), 200);
        cJSON *list = NULL, *gone = session_info("bob@example.com", &list);
        CHECK_MSG(gone == NULL, "bob was not forgotten");
        CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(list, "data")), 3);
        CHECK(jnum(list, "budget.sessions_forgotten") >= 1);
        cJSON *x;
        CHECK((x = session_info("alice", NULL)) != NULL);
        cJSON_Delete(x);
        CHECK((x = session_info("dave", NULL)) != NULL);
        cJSON_Delete(x);
        cJSON_Delete(gone);
        cJSON_Delete(list);
        /* bob comes back: a new session, everything computed again */
        conv_add(&bob, "user", "Still there?");
        turn b3 = send_turn(&bob, NULL, "bob@example.com", 6);
        CHECK_EQ_INT(b3.status, 200);
        CHECK_MSG(b3.cached == 0, "a forgotten session reused %.0f tokens", b3.cached);
        free(b3.content);
        conv_free(&dave);
    }

    /* cached_tokens is exactly the kept prefix: a raw prompt, the same prompt,
     * then an edit near its end, in one named session */
    {
        const char *p1 = "The quick brown fox jumps over the lazy dog and runs into the forest";
        const char *p2 = "The quick brown fox jumps over the lazy dog and walks into the forest";
        mz_token t1[128], t2[128];
        size_t n1 = tokenize(tm, p1, t1, 128), n2 = tokenize(tm, p2, t2, 128), lcp = 0;
        while (lcp < n1 && lcp < n2 && t1[lcp] == t2[lcp]) lcp++;
        CHECK(n1 > 8 && lcp > 4 && lcp < n2);
        char body[512];
        cJSON *j = NULL;
        snprintf(body, sizeof body, "{\"prompt\": \"%s\", \"max_tokens\": 4, \"temperature\": 0}", p1);
        CHECK_EQ_INT(call_h("POST", "/v1/completions", "X-Session-Id: raw\r\n", body, &j), 200);
        CHECK_EQ_INT((long long)jnum(j, "usage.prompt_tokens"), (long long)n1);
        cJSON_Delete(j);
        CHECK_EQ_INT(call_h("POST", "/v1/completions", "X-Session-Id: raw\r\n", body, &j), 200);
        CHECK_MSG(jnum(j, "usage.prompt_tokens_details.cached_tokens") == (double)(n1 - 1),
                  "same prompt: cached %.0f, want %zu (all but the last)", jnum(j, "usage.prompt_tokens_details.cached_tokens"), n1 - 1);
        cJSON_Delete(j);
        snprintf(body, sizeof body, "{\"prompt\": \"%s\", \"max_tokens\": 4, \"temperature\": 0}", p2);
        CHECK_EQ_INT(call_h("POST", "/v1/completions", "X-Session-Id: raw\r\n", body, &j), 200);
        CHECK_MSG(jnum(j, "usage.prompt_tokens_details.cached_tokens") == (double)lcp,
                  "edited prompt: cached %.0f, common prefix %zu", jnum(j, "usage.prompt_tokens_details.cached_tokens"), lcp);
        CHECK(jnum(j, "timings.prompt_n") == (double)(n2 - lcp));
        cJSON_Delete(j);
    }

    /* routing by prefix: two anonymous conversations with the same system
     * prompt alternate three turns each; none re-prefills its history */
    delete_all();
    if (g_tsan) {
        fprintf(stderr, "ThreadSanitizer build: alternation and budget phases skipped (no threads involved)\n");
    } else {
        conv x = {0}, y = {0};
        conv_add(&x, "system", SYS);
        conv_add(&y, "system", SYS);
        const char *qx[3] = {"What is the capital of France?", "And of Spain?", "And of Italy?"};
        const char *qy[3] = {"Give me a fruit.", "Another one.", "One more."};
        double prev_x = 0, prev_y = 0;
        for (int k = 0; k < 3; k++) {
            conv_add(&x, "user", qx[k]);
            turn tx = send_turn(&x, NULL, NULL, 8);
            conv_add(&y, "user", qy[k]);
            turn ty = send_turn(&y, NULL, NULL, 8);
            CHECK_EQ_INT(tx.status, 200);
            CHECK_EQ_INT(ty.status, 200);
            fprintf(stderr, "alternating turn %d: x %.0f tokens %.0f cached; y %.0f tokens %.0f cached\n", k + 1,
                    tx.prompt, tx.cached, ty.prompt, ty.cached);
            if (k > 0) {
                CHECK_MSG(tx.cached >= prev_x, "x turn %d reused %.0f, its previous prompt had %.0f", k + 1, tx.cached, prev_x);
                CHECK_MSG(ty.cached >= prev_y, "y turn %d reused %.0f, its previous prompt had %.0f", k + 1, ty.cached, prev_y);
            }
            CHECK(tx.prefilled == tx.prompt - tx.cached && ty.prefilled == ty.prompt - ty.cached);
            prev_x = tx.prompt;
            prev_y = ty.prompt;
            free(tx.content);
            free(ty.content);
        }
        CHECK_EQ_INT(n_sessions(), 2);
        conv_free(&x);
        conv_free(&y);
    }

    /* DELETE of a session that is generating: 409 at once, saying it is busy,
     * while its request goes on to the whole answer; after it, DELETE deletes.
     * The end-of-generation tokens are banned, so the answer is max_tokens
     * long and the request still runs when the 409 comes (checked, not timed). */
    {
        cJSON *no_eog = cJSON_CreateObject();
        for (int t = 0; t < mz_model_n_vocab(tm); t++) {
            if (!mz_token_is_eog(tm, t)) continue;
            char k[16];
            snprintf(k, sizeof k, "%d", t);
            cJSON_AddNumberToObject(no_eog, k, -100);
        }
        const int n_answer = g_tsan ? 12 : 100; /* long enough to DELETE during it */
        bg_req b = {.sid = "busy", .max_tokens = n_answer, .bias = no_eog};
        conv_add(&b.c, "system", SYS);
        /* A first turn lists the session in GET /mz/sessions, where "active"
         * shows the second one running (the list is refreshed between requests). */
        conv_add(&b.c, "user", "Hi.");
        CHECK_EQ_INT(send_turn_st(&b.c, "busy", NULL, 1), 200);
        conv_add(&b.c, "user", "Tell me a long story about a cat.");
        pthread_t th;
        pthread_create(&th, NULL, bg_main, &b);
        CHECK_MSG(wait_active("busy", 60000), "the request never reached its session");
        cJSON *j = NULL;
        int st = call_h("DELETE", "/mz/sessions/busy", NULL, NULL, &j);
        bool running = !atomic_load(&b.done);
        const char *msg = jstr(j, "error.message");
        CHECK_MSG(st == 409 && msg && strstr(msg, "busy") && strstr(msg, "retry") &&
                      jstr(j, "error.type") && !strcmp(jstr(j, "error.type"), "conflict_error"),
                  "DELETE while generating: %d (%s)", st, msg ? msg : "no message");
        CHECK_MSG(running, "the DELETE came back only after the request ended");
        cJSON_Delete(j);
        pthread_join(th, NULL);
        cJSON_Delete(no_eog);
        CHECK_EQ_INT(b.t.status, 200);
        CHECK_MSG(b.t.completion == n_answer && !strcmp(b.t.finish, "length"), "the request's answer: %.0f tokens, finish '%s'",
                  b.t.completion, b.t.finish);
        j = NULL;
        st = call_h("DELETE", "/mz/sessions/busy", NULL, NULL, &j);
        CHECK_MSG(st == 200 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "deleted")), "DELETE after: %d", st);
        cJSON_Delete(j);
        cJSON *x = session_info("busy", NULL);
        CHECK(x == NULL);
        cJSON_Delete(x);
        free(b.t.content);
        conv_free(&b.c);
    }

    if (g_tsan) {
        mz_server_stop(srv);
        goto out;
    }
    /* reference answers for server B: three conversations, each alone */
    const char *names[3] = {"c1", "c2", "c3"};
    const char *q[3][2] = {{"Name a planet.", "Is it big?"}, {"Name a river.", "Is it long?"}, {"Name a tree.", "Is it tall?"}};
    char *ref[3][2];
    double kv_one = 0;
    delete_all();
    for (int i = 0; i < 3; i++) {
        conv c = {0};
        conv_add(&c, "system", SYS);
        for (int k = 0; k < 2; k++) {
            conv_add(&c, "user", q[i][k]);
            turn t = send_turn(&c, names[i], NULL, 8);
            CHECK_EQ_INT(t.status, 200);
            ref[i][k] = t.content;
        }
        cJSON *si = session_info(names[i], NULL);
        kv_one = jnum(si, "kv_total_bytes");
        cJSON_Delete(si);
        conv_free(&c);
    }
    double fixed = 0, pinned = 0;
    {
        cJSON *j = NULL;
        call_h("GET", "/mz/status", NULL, NULL, &j);
        pinned = jnum(j, "memory.pinned_bytes");
        fixed = pinned + jnum(j, "memory.weights.total_bytes");
        cJSON_Delete(j);
    }
    mz_server_stop(srv);

    /* ---------------- server B: a budget below three sessions' KV ---------------- */
    CHECK(kv_one > 0 && fixed > 0);
    size_t budget = (size_t)(fixed + 1.5 * kv_one);
    fprintf(stderr, "budget: weights+pinned %.1f MiB + 1.5 x %.1f MiB of KV = %.1f MiB\n", fixed / 1048576.0,
            kv_one / 1048576.0, (double)budget / 1048576.0);
    for (int phase = 0; phase < 2; phase++) {
        if (phase == 1) {
            /* Server C: below the weights alone, with three sessions: the engine's
             * one plan drops weight blocks too (they come back for each request). */
            budget = (size_t)(pinned + 0.5 * (fixed - pinned) + kv_one);
            fprintf(stderr, "budget below the weights: pinned %.1f + half the weights %.1f + %.1f MiB of KV = %.1f MiB\n",
                    pinned / 1048576.0, (fixed - pinned) / 2097152.0, kv_one / 1048576.0, (double)budget / 1048576.0);
        }
        srv = start(model, swap, 4, budget, 0);
        if (!srv) return 1;
        {
            conv c[3];
            memset(c, 0, sizeof c);
            double prev[3] = {0};
            for (int i = 0; i < 3; i++) conv_add(&c[i], "system", SYS);
            for (int k = 0; k < 2; k++) {
                for (int i = 0; i < 3; i++) {
                    conv_add(&c[i], "user", q[i][k]);
                    turn t = send_turn(&c[i], names[i], NULL, 8);
                    CHECK_EQ_INT(t.status, 200);
                    CHECK_MSG(!strcmp(t.content, ref[i][k]), "%s turn %d under the budget: '%s', alone: '%s'", names[i],
                              k + 1, t.content, ref[i][k]);
                    if (k > 0) {
                        CHECK_MSG(t.cached >= prev[i], "%s turn %d: reused %.0f, previous prompt %.0f (re-prefilled)",
                                  names[i], k + 1, t.cached, prev[i]);
                        CHECK(t.prefilled == t.prompt - t.cached);
                    }
                    prev[i] = t.prompt;
                    double reported = 0, fp = footprint_from_status(&reported);
                    CHECK_MSG(fp > 0 && fp <= (double)budget, "after %s turn %d: footprint %.0f > budget %zu", names[i],
                              k + 1, fp, budget);
                    CHECK_MSG(reported == fp, "reported footprint %.0f, computed %.0f", reported, fp);
                    free(t.content);
                }
                /* the least recently used conversation's KV is no longer all resident */
                cJSON *si = session_info("c1", NULL);
                CHECK_MSG(si && jnum(si, "resident_bytes") < jnum(si, "kv_total_bytes"),
                          "c1 (least recent) kept all its KV resident: %.0f of %.0f", jnum(si, "resident_bytes"),
                          jnum(si, "kv_total_bytes"));
                CHECK(si && jnum(si, "stored_bytes") + jnum(si, "compressed_bytes") > 0);
                cJSON_Delete(si);
            }
            cJSON *j = NULL;
            CHECK_EQ_INT(call_h("GET", "/mz/sessions", NULL, NULL, &j), 200);
            CHECK(jnum(j, "budget.budget_evictions") >= 1);
            CHECK(jnum(j, "budget.budget_evicted_bytes") > 0);
            CHECK(!cJSON_IsTrue(jget(j, "budget.over_budget")));
            cJSON_Delete(j);
            if (phase == 1) {
                CHECK_EQ_INT(call_h("GET", "/mz/status", NULL, NULL, &j), 200);
                CHECK_MSG(jnum(j, "memory.weights.dropped_bytes") > 0, "below the weights, none were dropped");
                cJSON_Delete(j);
            }
            for (int i = 0; i < 3; i++) conv_free(&c[i]);
        }
        mz_server_stop(srv);
    }

    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 2; k++) free(ref[i][k]);
out:
    free(a1.content);
    free(a2.content);
    free(b1.content);
    free(b2.content);
    free(c1.content);
    conv_free(&alice);
    conv_free(&bob);
    conv_free(&carol);
    mz_model_free(tm);
    return t_done("test_server_sessions");
}
