/*
 * test_server_swa.c — the daemon reports the KV out of the sliding window
 * (mz_mem_stats.kv_out_of_window) per session and in total, over a real
 * socket (127.0.0.1, an ephemeral port), in-process.
 *
 * A generated gemma3 (the tiny-gemma3 preset: 7 layers, local 0-4 and 6,
 * global 5) with a window of WINDOW tokens is served one raw prompt of more
 * than WINDOW + one chunk (256) tokens. The next token then cannot attend to
 * the first chunk of the six local layers, so GET /mz/sessions, GET
 * /mz/status (per session and memory.kv_out_of_window) and /metrics must
 * all give exactly 6 x first-live-chunk chunks of KV, the count computed
 * here from the session's token count and its KV per chunk (kv_total_bytes
 * over layers x chunks); the same prompt on a generated llama gives 0
 * everywhere. Both models take the real model's vocabulary (skips without
 * it).
 */
#define _GNU_SOURCE
#include "server/server.h"

#include "server_util.h"
#include "testutil.h"

#include <cjson/cJSON.h>

#define WINDOW 32
#define N_LAYER 7
#define N_LOCAL 6
#define CHUNK_TOKENS 256 /* MZ_KV_CHUNK_TOKENS */
#define N_WORDS 150      /* about 450 tokens: first chunk dead, the second live */
#define SESSION "long"

static int g_port;

static int call(const char *method, const char *path, const char *body, cJSON **json, char **raw)
{
    mz_http_response r;
    int rc = mz_http_request_ex("127.0.0.1", g_port, method, path, NULL, "X-Session-Id: " SESSION "\r\n", body,
                                body ? strlen(body) : 0, 120000, &r);
    if (rc) {
        fprintf(stderr, "request %s %s failed: %s\n", method, path, strerror(-rc));
        return -1;
    }
    if (json) *json = cJSON_ParseWithLength(r.body, r.len);
    if (raw) *raw = r.body ? strndup(r.body, r.len) : NULL;
    int st = r.status;
    mz_http_response_free(&r);
    return st;
}

/* The session SESSION in a JSON array, or NULL. */
static const cJSON *find_session(const cJSON *arr)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, arr)
        if (jstr(e, "id") && !strcmp(jstr(e, "id"), SESSION)) return e;
    return NULL;
}

/* The value of the sample line `name` (labels included) in a /metrics body, or -1. */
static double metric(const char *body, const char *name)
{
    const char *p = body;
    size_t n = strlen(name);
    while ((p = strstr(p, name))) {
        if ((p == body || p[-1] == '\n') && p[n] == ' ') return strtod(p + n + 1, NULL);
        p += n;
    }
    return -1;
}

/* Serves model, sends the long prompt, checks every report against the
 * dead-chunk count (swa: the gemma3 rule; else 0). */
static void check_model(const char *model, const char *swap, bool swa)
{
    mz_server_params sp = srv_params(model, swap);
    sp.pressure = false;
    sp.max_sessions = 1;
    mz_server_t *srv = NULL;
    if (mz_server_start(&sp, &srv)) {
        fprintf(stderr, "server start (%s): %s\n", model, mz_last_error());
        CHECK(0);
        return;
    }
    g_port = mz_server_port(srv);

    char body[N_WORDS * 16 + 128];
    size_t len = (size_t)snprintf(body, sizeof body, "{\"prompt\": \"");
    for (int i = 0; i < N_WORDS; i++) len += (size_t)snprintf(body + len, sizeof body - len, "tree %d ", i % 10);
    snprintf(body + len, sizeof body - len, "\", \"max_tokens\": 4, \"temperature\": 0}");
    cJSON *j = NULL;
    CHECK_EQ_INT(call("POST", "/v1/completions", body, &j, NULL), 200);
    cJSON_Delete(j);

    CHECK_EQ_INT(call("GET", "/mz/sessions", NULL, &j, NULL), 200);
    const cJSON *e = find_session(cJSON_GetObjectItemCaseSensitive(j, "data"));
    CHECK_MSG(e, "session %s not listed", SESSION);
    double n_tokens = e ? jnum(e, "tokens") : 0, kv_total = e ? jnum(e, "kv_total_bytes") : 0;
    double dead = e ? jnum(e, "kv_out_of_window_bytes") : -1;
    double dead_resident = e ? jnum(e, "kv_out_of_window_resident_bytes") : -1;
    cJSON_Delete(j);
    /* The prompt must reach past the window by more than one chunk. */
    CHECK_MSG(n_tokens > WINDOW + CHUNK_TOKENS, "%.0f tokens", n_tokens);
    size_t n_chunks = ((size_t)n_tokens + CHUNK_TOKENS - 1) / CHUNK_TOKENS;
    double chunk_bytes = kv_total / (double)(N_LAYER * n_chunks);
    size_t first_live = ((size_t)n_tokens + 1 - WINDOW) / CHUNK_TOKENS;
    double want = swa ? (double)(N_LOCAL * first_live) * chunk_bytes : 0;
    CHECK(kv_total > 0);
    CHECK_MSG(dead == want, "%s: kv_out_of_window_bytes %.0f, want %.0f", model, dead, want);
    CHECK_MSG(dead_resident == want, "nothing evicted: resident %.0f, want %.0f", dead_resident, want);
    if (swa) CHECK(dead > 0);

    char *raw = NULL;
    CHECK_EQ_INT(call("GET", "/mz/status", NULL, &j, NULL), 200);
    e = find_session(cJSON_GetObjectItemCaseSensitive(j, "sessions"));
    CHECK(e && jnum(e, "kv_out_of_window_bytes") == want);
    CHECK_EQ_INT((long long)jnum(j, "memory.kv_out_of_window.total_bytes"), (long long)want);
    CHECK_EQ_INT((long long)jnum(j, "memory.kv_out_of_window.units"), swa ? (long long)(N_LOCAL * first_live) : 0);
    CHECK(jnum(j, "memory.kv_out_of_window.total_bytes") <= jnum(j, "memory.kv.total_bytes"));
    cJSON_Delete(j);

    CHECK_EQ_INT(call("GET", "/metrics", NULL, NULL, &raw), 200);
    CHECK(raw);
    if (raw) {
        CHECK_EQ_INT((long long)metric(raw, "mzcache_kv_out_of_window_bytes{state=\"total\"}"), (long long)want);
        CHECK_EQ_INT((long long)metric(raw, "mzcache_session_kv_out_of_window_bytes{session=\"" SESSION
                                            "\",state=\"total\"}"),
                     (long long)want);
        CHECK(srv_check_metrics(raw, true) > 0);
        free(raw);
    }
    mz_server_stop(srv);
}

int main(void)
{
    const char *real = t_real_model_path();
    if (!real) return t_skip("test_server_swa", "no models/SmolLM2 (run make model); its vocabulary is needed");
    char gemma[512], llama[512];
    snprintf(gemma, sizeof gemma, "%s", t_tmp_path("server-swa-gemma3.gguf"));
    snprintf(llama, sizeof llama, "%s", t_tmp_path("server-swa-llama.gguf"));
    mz_gen_params gp = mz_gen_params_default();
    gp.preset = "tiny-gemma3";
    gp.n_swa = WINDOW;
    gp.weight_type = "Q8_0";
    gp.vocab_from = real;
    if (mz_gen_model(gemma, &gp) || srv_gen_tiny(llama, real)) {
        fprintf(stderr, "gen-model: %s\n", mz_last_error());
        return 1;
    }
    check_model(gemma, t_tmp_path("server-swa-swap-g"), true);
    check_model(llama, t_tmp_path("server-swa-swap-l"), false);
    return t_done("test_server_swa");
}
