/*
 * test_server.c — the HTTP server over a real socket (127.0.0.1, an
 * ephemeral port), started in-process: health, models, API key, chat
 * (plain and SSE), context reuse, divergence, stop strings, eviction then
 * the same greedy answer, status and metrics formats, 429 under concurrent
 * requests, bad input (malformed JSON, wrong types, huge bodies), slow
 * clients. Model: a generated tiny llama with the real model's tokenizer
 * (skips when models/SmolLM2 is absent).
 */
#define _GNU_SOURCE
#include "core/core.h"
#include "server/server.h"

#include "server_util.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define KEY "test-key-0123456789"
static int g_port;


static int req(const char *method, const char *path, const char *key, const char *body, mz_http_response *r)
{
    int rc = mz_http_request("127.0.0.1", g_port, method, path, key, body, body ? strlen(body) : 0, 30000, r);
    if (rc) fprintf(stderr, "request %s %s failed: %s\n", method, path, strerror(-rc));
    return rc;
}

/* Status of a request; the body is parsed into *json when asked. */
static int call(const char *method, const char *path, const char *body, cJSON **json)
{
    mz_http_response r;
    if (req(method, path, KEY, body, &r)) return -1;
    if (json) *json = cJSON_ParseWithLength(r.body, r.len);
    int st = r.status;
    mz_http_response_free(&r);
    return st;
}

/* A chat body: pairs of (role, content), then NULL. */
static char *chat_body(bool stream, int max_tokens, const char *extra_key, const char *extra_val, ...)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *msgs = cJSON_AddArrayToObject(root, "messages");
    va_list ap;
    va_start(ap, extra_val);
    for (;;) {
        const char *role = va_arg(ap, const char *);
        if (!role) break;
        const char *content = va_arg(ap, const char *);
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", role);
        cJSON_AddStringToObject(m, "content", content);
        cJSON_AddItemToArray(msgs, m);
    }
    va_end(ap);
    cJSON_AddNumberToObject(root, "temperature", 0);
    cJSON_AddNumberToObject(root, "max_tokens", max_tokens);
    if (stream) cJSON_AddBoolToObject(root, "stream", true);
    if (extra_key) cJSON_AddItemToObject(root, extra_key, cJSON_Parse(extra_val));
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

/* Non-streaming chat; returns the content (caller frees) and the JSON. */
static char *chat(const char *body, cJSON **json_out)
{
    cJSON *j = NULL;
    int st = call("POST", "/v1/chat/completions", body, &j);
    CHECK_MSG(st == 200, "chat status %d", st);
    const char *c = jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "message.content");
    char *out = c ? strdup(c) : NULL;
    if (json_out) *json_out = j;
    else cJSON_Delete(j);
    return out;
}

/* Streams a chat; returns the concatenated deltas; checks the event format. */
static char *chat_stream(const char *body, cJSON **final_out)
{
    mz_http_response r;
    if (req("POST", "/v1/chat/completions", KEY, body, &r)) return NULL;
    CHECK_MSG(r.status == 200, "stream status %d", r.status);
    CHECK_MSG(strstr(r.content_type, "text/event-stream") != NULL, "content type %s", r.content_type);
    size_t cap = r.len + 1, len = 0;
    char *text = calloc(1, cap);
    int n_events = 0;
    bool done = false, role_seen = false;
    cJSON *final = NULL;
    for (char *save = NULL, *ev = strtok_r(r.body, "\n", &save); ev; ev = strtok_r(NULL, "\n", &save)) {
        CHECK_MSG(!strncmp(ev, "data: ", 6), "SSE line without data: '%.40s'", ev);
        if (strncmp(ev, "data: ", 6)) continue;
        CHECK(!done); /* nothing after [DONE] */
        if (!strcmp(ev + 6, "[DONE]")) {
            done = true;
            continue;
        }
        cJSON *j = cJSON_Parse(ev + 6);
        CHECK_MSG(j != NULL, "event is not JSON: %.60s", ev + 6);
        if (!j) continue;
        n_events++;
        CHECK(jstr(j, "object") && !strcmp(jstr(j, "object"), "chat.completion.chunk"));
        const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
        if (jstr(ch, "delta.role")) role_seen = true;
        const char *c = jstr(ch, "delta.content");
        if (c) {
            size_t l = strlen(c);
            memcpy(text + len, c, l);
            len += l;
        }
        if (jstr(ch, "finish_reason")) {
            cJSON_Delete(final);
            final = j;
        } else {
            cJSON_Delete(j);
        }
    }
    CHECK(done);
    CHECK(role_seen);
    CHECK(n_events >= 2);
    CHECK_MSG(final != NULL, "no event with a finish_reason");
    if (final_out) *final_out = final;
    else cJSON_Delete(final);
    mz_http_response_free(&r);
    return text;
}

/* ---- concurrency -------------------------------------------------------------------- */

typedef struct par_req {
    const char *body;
    int status;
    char *text;
    double queue_ms;
} par_req;

static void *par_main(void *arg)
{
    par_req *p = arg;
    cJSON *j = NULL;
    p->status = call("POST", "/v1/chat/completions", p->body, &j);
    const char *c = jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "message.content");
    p->text = c ? strdup(c) : NULL;
    p->queue_ms = jnum(j, "timings.queue_ms");
    cJSON_Delete(j);
    return NULL;
}

static bool wait_status(const char *field, double want, double timeout_ms)
{
    double t0 = mz_time_ms();
    while (mz_time_ms() - t0 < timeout_ms) {
        cJSON *j = NULL;
        if (call("GET", "/mz/status", NULL, &j) == 200) {
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, field);
            double v = cJSON_IsBool(f) ? (cJSON_IsTrue(f) ? 1 : 0) : cJSON_IsNumber(f) ? f->valuedouble : -1;
            cJSON_Delete(j);
            if (v == want) return true;
        }
        usleep(5000);
    }
    return false;
}

/* ---- raw sockets ---------------------------------------------------------------------- */

static int raw_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) {
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

/* Reads until EOF or timeout; returns bytes read, -1 on timeout. */
static long raw_read_all(int fd, char *buf, size_t cap, int timeout_ms)
{
    size_t len = 0;
    double t0 = mz_time_ms();
    for (;;) {
        int left = timeout_ms - (int)(mz_time_ms() - t0);
        if (left <= 0) return -1;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, left) != 1) return -1;
        ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
        if (r <= 0) break;
        len += (size_t)r;
        if (len + 1 >= cap) break;
    }
    buf[len] = '\0';
    return (long)len;
}

/* ---- main --------------------------------------------------------------------------------- */

int main(void)
{
    const char *real = t_real_model_path();
    if (!real) return t_skip("test_server", "no models/SmolLM2 (run make model); its tokenizer is needed");
    const char *model = t_tmp_path("server-tiny.gguf");
    if (srv_gen_tiny(model, real)) {
        fprintf(stderr, "gen-model: %s\n", mz_last_error());
        return 1;
    }
    char model_path[512], swap_dir[512];
    snprintf(model_path, sizeof model_path, "%s", model);
    snprintf(swap_dir, sizeof swap_dir, "%s", t_tmp_path("server-swap"));

    mz_server_params sp = srv_params(model_path, swap_dir);
    sp.api_key = KEY;
    sp.pressure = false;
    sp.default_max_tokens = 16;
    sp.max_tokens_limit = 512;
    sp.max_body_bytes = 64 * 1024;
    sp.conn_timeout_s = 2;
    sp.max_queue = 1;
    sp.queue_timeout_ms = 30000;
    sp.token_delay_ms = 2;
    sp.max_sessions = 1; /* one conversation: divergence truncates it, eviction drops weights
                            (sessions: test_server_sessions.c) */
    mz_server_t *srv = NULL;
    if (mz_server_start(&sp, &srv)) {
        fprintf(stderr, "server start: %s\n", mz_last_error());
        return 1;
    }
    g_port = mz_server_port(srv);
    CHECK(g_port > 0);

    /* health (no key) and models (key) */
    {
        mz_http_response r;
        CHECK(!req("GET", "/health", NULL, NULL, &r));
        CHECK_EQ_INT(r.status, 200);
        CHECK(r.body && strstr(r.body, "\"ok\""));
        mz_http_response_free(&r);
        cJSON *j = NULL;
        CHECK_EQ_INT(call("GET", "/v1/models", NULL, &j), 200);
        CHECK(jstr(j, "object") && !strcmp(jstr(j, "object"), "list"));
        CHECK(jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "data"), 0), "id") &&
              !strcmp(jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "data"), 0), "id"), "server-tiny"));
        cJSON_Delete(j);
    }
    /* API key: missing, wrong, prefix, longer, other header */
    {
        const char *bad[] = {NULL, "wrong", "test-key-012345678", KEY "9", ""};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            mz_http_response r;
            CHECK(!req("GET", "/v1/models", bad[i], NULL, &r));
            CHECK_MSG(r.status == 401, "key case %zu: status %d", i, r.status);
            CHECK(r.body && strstr(r.body, "\"error\"") && !strstr(r.body, KEY));
            mz_http_response_free(&r);
        }
        int fd = raw_connect();
        char buf[4096];
        const char *rq = "GET /mz/status HTTP/1.1\r\nHost: x\r\nX-API-Key: " KEY "\r\nConnection: close\r\n\r\n";
        CHECK(fd >= 0 && send(fd, rq, strlen(rq), MSG_NOSIGNAL) == (ssize_t)strlen(rq));
        CHECK(raw_read_all(fd, buf, sizeof buf, 5000) > 0 && !strncmp(buf, "HTTP/1.1 200", 12));
        close(fd);
    }

    /* chat, then context reuse */
    const char *sys = "You are terse.";
    char *b1 = chat_body(false, 12, NULL, NULL, "system", sys, "user", "Name three colours.", NULL);
    cJSON *j1 = NULL;
    char *a1 = chat(b1, &j1);
    CHECK(a1 != NULL);
    double n1 = jnum(j1, "usage.prompt_tokens");
    CHECK(n1 > 5);
    CHECK(jnum(j1, "usage.completion_tokens") >= 1);
    CHECK(jnum(j1, "timings.ttft_ms") > 0);
    CHECK(jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j1, "choices"), 0), "finish_reason") != NULL);
    cJSON_Delete(j1);

    char *b2 = chat_body(false, 12, NULL, NULL, "system", sys, "user", "Name three colours.", "assistant",
                         a1 ? a1 : "", "user", "And three animals?", NULL);
    cJSON *j2 = NULL;
    char *a2 = chat(b2, &j2);
    double n2 = jnum(j2, "usage.prompt_tokens"), cached2 = jnum(j2, "usage.prompt_tokens_details.cached_tokens");
    double pn2 = jnum(j2, "timings.prompt_n");
    fprintf(stderr, "reuse: first prompt %.0f tokens; second %.0f tokens, %.0f cached, %.0f computed\n", n1, n2,
            cached2, pn2);
    CHECK_MSG(cached2 >= n1, "second request reused %.0f tokens, first prompt had %.0f", cached2, n1);
    CHECK(pn2 == n2 - cached2);
    CHECK_MSG(pn2 <= n2 - n1, "computed %.0f, more than the new part %.0f", pn2, n2 - n1);
    cJSON_Delete(j2);

    /* streaming gives the same greedy text as non-streaming for the same request */
    char *b3 = chat_body(true, 12, NULL, NULL, "system", sys, "user", "Name three colours.", "assistant",
                         a1 ? a1 : "", "user", "And three animals?", NULL);
    cJSON *fin = NULL;
    char *a3 = chat_stream(b3, &fin);
    CHECK_MSG(a3 && a2 && !strcmp(a3, a2), "stream '%s' vs plain '%s'", a3 ? a3 : "(null)", a2 ? a2 : "(null)");
    CHECK(jnum(fin, "usage.prompt_tokens") == n2);
    CHECK_MSG(jnum(fin, "usage.prompt_tokens_details.cached_tokens") == n2 - 1, "whole prompt cached: %.0f",
              jnum(fin, "usage.prompt_tokens_details.cached_tokens"));
    cJSON_Delete(fin);

    /* divergence: a different first message truncates to the common prefix;
     * then the first request again gives its first answer */
    char *bd = chat_body(false, 12, NULL, NULL, "system", sys, "user", "Say something else entirely.", NULL);
    cJSON *jd = NULL;
    char *ad = chat(bd, &jd);
    double cd = jnum(jd, "usage.prompt_tokens_details.cached_tokens");
    CHECK_MSG(cd > 0 && cd < n1, "divergent request reused %.0f tokens (first prompt %.0f)", cd, n1);
    cJSON_Delete(jd);
    char *a1b = chat(b1, NULL);
    CHECK_MSG(a1 && a1b && !strcmp(a1, a1b), "after divergence: '%s' vs '%s'", a1b ? a1b : "", a1 ? a1 : "");

    /* stop strings cut the answer (plain and streaming) */
    if (a1 && strlen(a1) > 6) {
        char stop[4];
        memcpy(stop, a1 + 3, 3);
        stop[3] = '\0';
        char *cut = strstr(a1, stop);
        size_t want = (size_t)(cut - a1);
        char stops[32];
        cJSON *sj = cJSON_CreateString(stop);
        char *sjs = cJSON_PrintUnformatted(sj);
        snprintf(stops, sizeof stops, "[%s]", sjs);
        cJSON_free(sjs);
        cJSON_Delete(sj);
        char *bs = chat_body(false, 12, "stop", stops, "system", sys, "user", "Name three colours.", NULL);
        cJSON *js = NULL;
        char *as = chat(bs, &js);
        CHECK_MSG(as && strlen(as) == want && !strncmp(as, a1, want), "stop: '%s' (want %zu bytes of '%s')",
                  as ? as : "", want, a1);
        CHECK(jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(js, "choices"), 0), "finish_reason") &&
              !strcmp(jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(js, "choices"), 0), "finish_reason"), "stop"));
        cJSON_Delete(js);
        free(bs);
        free(as);
        bs = chat_body(true, 12, "stop", stops, "system", sys, "user", "Name three colours.", NULL);
        as = chat_stream(bs, NULL);
        CHECK_MSG(as && strlen(as) == want, "stream stop: '%s'", as ? as : "");
        free(bs);
        free(as);
    }

    /* eviction, then the same greedy answer; evict body errors */
    {
        cJSON *e = NULL;
        CHECK_EQ_INT(call("POST", "/mz/evict", "{\"percent\": 30}", &e), 200);
        CHECK(jnum(e, "freed_bytes") > 0);
        cJSON_Delete(e);
        CHECK_EQ_INT(call("POST", "/mz/evict", "{\"all\": true}", &e), 200);
        CHECK(jnum(e, "memory.remaining_pct") < 50);
        CHECK(jnum(e, "memory.weights.dropped_bytes") > 0);
        cJSON_Delete(e);
        cJSON *je = NULL;
        char *ae = chat(b1, &je);
        CHECK_MSG(a1 && ae && !strcmp(a1, ae), "after eviction: '%s' vs '%s'", ae ? ae : "", a1 ? a1 : "");
        CHECK(jnum(je, "timings.remaining_pct_before") < 50);
        CHECK(jnum(je, "timings.evicted_bytes_before") > 0);
        cJSON_Delete(je);
        free(ae);
        const char *bad[] = {"{}", "{\"bytes\": \"x\"}", "{\"percent\": 200}", "{\"bytes\": -1}",
                             "{\"bytes\": 1, \"percent\": 2}", "[1]", "not json", "{\"all\": 1}"};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            int st = call("POST", "/mz/evict", bad[i], &e);
            CHECK_MSG(st == 400 && jstr(e, "error.message"), "evict body '%s': %d", bad[i], st);
            cJSON_Delete(e);
        }
        CHECK_EQ_INT(call("POST", "/mz/restore", "", &e), 200);
        CHECK(jnum(e, "memory.remaining_pct") == 100);
        cJSON_Delete(e);
    }

    /* /v1/completions */
    {
        cJSON *j = NULL;
        CHECK_EQ_INT(call("POST", "/v1/completions", "{\"prompt\": \"Once upon a time\", \"max_tokens\": 5, \"temperature\": 0}", &j), 200);
        CHECK(jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "text") != NULL);
        CHECK(jnum(j, "usage.completion_tokens") >= 1 && jnum(j, "usage.completion_tokens") <= 5);
        cJSON_Delete(j);
    }

    /* status and metrics formats */
    {
        cJSON *j = NULL;
        CHECK_EQ_INT(call("GET", "/mz/status", NULL, &j), 200);
        CHECK(jnum(j, "memory.weights.total_bytes") > 0);
        CHECK(jnum(j, "memory.kv.resident_bytes") >= 0);
        CHECK(jnum(j, "memory.remaining_pct") >= 0);
        CHECK(jstr(j, "memory.stage") != NULL);
        CHECK(jnum(j, "last_request.ttft_ms") > 0);
        CHECK(jnum(j, "last_request.prompt_tokens") > 0);
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "events")) >= 2);
        CHECK(jnum(j, "process.rss_bytes") > 0);
        cJSON_Delete(j);
        mz_http_response r;
        CHECK(!req("GET", "/metrics", KEY, NULL, &r));
        CHECK_EQ_INT(r.status, 200);
        CHECK(strstr(r.content_type, "text/plain") != NULL);
        CHECK(r.body && strstr(r.body, "# TYPE mzcache_memory_bytes gauge\n"));
        CHECK(r.body && strstr(r.body, "mzcache_memory_bytes{category=\"kv\",state=\"resident\"} "));
        CHECK(r.body && strstr(r.body, "mzcache_evictions_total{trigger=\"api\"} 2\n"));
        CHECK(r.body && srv_check_metrics(r.body, true) > 20);
        mz_http_response_free(&r);
    }

    /* concurrent requests: one runs, one waits (queue of 1), the third gets 429 */
    {
        char *bl = chat_body(false, 150, NULL, NULL, "user", "Tell me a long story.", NULL);
        char *bq = chat_body(false, 8, NULL, NULL, "user", "Short one.", NULL);
        par_req pa = {.body = bl}, pb = {.body = bq};
        pthread_t ta, tb;
        pthread_create(&ta, NULL, par_main, &pa);
        CHECK_MSG(wait_status("busy", 1, 20000), "first request never became busy");
        pthread_create(&tb, NULL, par_main, &pb);
        CHECK_MSG(wait_status("queued", 1, 20000), "second request never queued");
        mz_http_response r;
        CHECK(!req("POST", "/v1/chat/completions", KEY, bq, &r));
        CHECK_MSG(r.status == 429, "third concurrent request: %d", r.status);
        CHECK(!strcmp(r.retry_after, "1"));
        CHECK(r.body && strstr(r.body, "\"error\""));
        mz_http_response_free(&r);
        /* status answers at once while busy */
        double t0 = mz_time_ms();
        CHECK_EQ_INT(call("GET", "/mz/status", NULL, NULL), 200);
        CHECK_MSG(mz_time_ms() - t0 < 2000, "status took %.0f ms while busy", mz_time_ms() - t0);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        CHECK_EQ_INT(pa.status, 200);
        CHECK_EQ_INT(pb.status, 200);
        CHECK_MSG(pb.queue_ms > 0, "queued request waited %.1f ms", pb.queue_ms);
        /* Serialized, never interleaved: the queued answer is what it is alone. */
        char *again = chat(bq, NULL);
        CHECK_MSG(pb.text && again && !strcmp(pb.text, again), "queued '%s' vs alone '%s'", pb.text ? pb.text : "",
                  again ? again : "");
        free(again);
        free(pa.text);
        free(pb.text);
        free(bl);
        free(bq);
    }

    /* bad input: 4xx with a JSON message, no paths or secrets */
    {
        struct { const char *path, *method, *body; int want; } cases[] = {
            {"/v1/chat/completions", "POST", "{not json", 400},
            {"/v1/chat/completions", "POST", "", 400},
            {"/v1/chat/completions", "POST", "[]", 400},
            {"/v1/chat/completions", "POST", "{\"messages\": \"hi\"}", 400},
            {"/v1/chat/completions", "POST", "{\"messages\": []}", 400},
            {"/v1/chat/completions", "POST", "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", 400},
            {"/v1/chat/completions", "POST", "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", 400},
            {"/v1/chat/completions", "POST", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": \"5\"}", 400},
            {"/v1/chat/completions", "POST", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": 100000}", 400},
            {"/v1/chat/completions", "POST", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": 1.5}", 400},
            {"/v1/chat/completions", "POST", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"temperature\": -1}", 400},
            {"/v1/chat/completions", "POST", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stream\": \"yes\"}", 400},
            {"/v1/chat/completions", "POST", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stop\": [1]}", 400},
            {"/v1/chat/completions", "POST", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"n\": 2}", 400},
            {"/v1/chat/completions", "POST", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"model\": \"nope\"}", 404},
            {"/v1/completions", "POST", "{\"prompt\": 42}", 400},
            {"/v1/completions", "POST", "{\"prompt\": \"\"}", 400},
            {"/v1/nothing", "GET", NULL, 404},
            {"/v1/chat/completions", "GET", NULL, 405},
            {"/mz/status", "POST", "{}", 405},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            mz_http_response r;
            if (req(cases[i].method, cases[i].path, KEY, cases[i].body, &r)) {
                CHECK(0);
                continue;
            }
            CHECK_MSG(r.status == cases[i].want, "case %zu (%s %s): %d, want %d: %s", i, cases[i].method,
                      cases[i].path, r.status, cases[i].want, r.body ? r.body : "");
            cJSON *j = cJSON_ParseWithLength(r.body, r.len);
            CHECK_MSG(jstr(j, "error.message") != NULL, "case %zu: no JSON error message", i);
            CHECK_MSG(!strstr(r.body, t_tmp_dir()) && !strstr(r.body, KEY) && !strstr(r.body, ".gguf"),
                      "case %zu leaks a path or the key: %s", i, r.body);
            cJSON_Delete(j);
            mz_http_response_free(&r);
        }
        /* a prompt longer than the context */
        size_t big_n = 60000;
        char *big = malloc(big_n + 128);
        int o = sprintf(big, "{\"messages\": [{\"role\": \"user\", \"content\": \"");
        for (size_t i = 0; i < (big_n - 100) / 4; i++) o += sprintf(big + o, "cat ");
        sprintf(big + o, "\"}]}");
        cJSON *j = NULL;
        CHECK_EQ_INT(call("POST", "/v1/chat/completions", big, &j), 400);
        CHECK(jstr(j, "error.type") && !strcmp(jstr(j, "error.type"), "context_length_exceeded"));
        cJSON_Delete(j);
        free(big);
        /* a body over the limit, announced by Content-Length: refused before it is sent */
        size_t huge_n = 200 * 1024;
        char *huge = malloc(huge_n + 1);
        memset(huge, 'x', huge_n);
        huge[huge_n] = '\0';
        mz_http_response r;
        int rc = mz_http_request("127.0.0.1", g_port, "POST", "/v1/chat/completions", KEY, huge, huge_n, 10000, &r);
        CHECK_MSG(rc == 0 || rc == -EPIPE || rc == -ECONNRESET, "huge body: %s", strerror(-rc));
        if (!rc) {
            CHECK_MSG(r.status == 413, "huge body: %d", r.status);
            mz_http_response_free(&r);
        }
        /* the same without Content-Length (chunked): read, dropped, 413 */
        int fd = raw_connect();
        const char *head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY
                           "\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
        CHECK(fd >= 0 && send(fd, head, strlen(head), MSG_NOSIGNAL) > 0);
        char chunk[16 * 1024 + 32];
        int hl = sprintf(chunk, "%x\r\n", 16 * 1024);
        memset(chunk + hl, 'y', 16 * 1024);
        memcpy(chunk + hl + 16 * 1024, "\r\n", 2);
        for (int i = 0; i < 8; i++) send(fd, chunk, (size_t)hl + 16 * 1024 + 2, MSG_NOSIGNAL);
        send(fd, "0\r\n\r\n", 5, MSG_NOSIGNAL);
        char buf[4096];
        long n = raw_read_all(fd, buf, sizeof buf, 10000);
        CHECK_MSG(n > 12 && !strncmp(buf, "HTTP/1.1 413", 12), "chunked huge body: %.40s", n > 0 ? buf : "(nothing)");
        close(fd);
        free(huge);
    }

    /* a streaming client that goes away mid-answer releases the conversation */
    {
        char *bl = chat_body(true, 200, NULL, NULL, "user", "Go on and on.", NULL);
        char head[512];
        int fd = raw_connect();
        int hl = snprintf(head, sizeof head,
                          "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY
                          "\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                          strlen(bl));
        CHECK(fd >= 0 && send(fd, head, (size_t)hl, MSG_NOSIGNAL) == hl);
        CHECK(send(fd, bl, strlen(bl), MSG_NOSIGNAL) == (ssize_t)strlen(bl));
        char buf[512];
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        CHECK(poll(&pf, 1, 10000) == 1 && recv(fd, buf, sizeof buf, 0) > 0); /* the stream started */
        CHECK(wait_status("busy", 1, 5000));
        close(fd);
        CHECK_MSG(wait_status("busy", 0, 20000), "the conversation stayed busy after the client left");
        char *again = chat(b1, NULL);
        CHECK_MSG(again && a1 && !strcmp(again, a1), "after a dropped stream: '%s'", again ? again : "");
        free(again);
        free(bl);
    }

    /* slow client: a request that never finishes its headers is dropped */
    {
        int fd = raw_connect();
        const char *part = "GET /health HTTP/1.1\r\nHost: x\r\n";
        CHECK(fd >= 0 && send(fd, part, strlen(part), MSG_NOSIGNAL) > 0);
        double t0 = mz_time_ms();
        char buf[256];
        long n = raw_read_all(fd, buf, sizeof buf, 10000);
        double dt = mz_time_ms() - t0;
        CHECK_MSG(n >= 0 && dt < 8000, "idle connection not closed (%.0f ms, n=%ld)", dt, n);
        close(fd);
        /* the server still serves */
        CHECK_EQ_INT(call("GET", "/health", NULL, NULL), 200);
    }

    free(b1);
    free(b2);
    free(b3);
    free(bd);
    free(a1);
    free(a1b);
    free(a2);
    free(a3);
    free(ad);
    mz_server_stop(srv);
    return t_done("test_server");
}
