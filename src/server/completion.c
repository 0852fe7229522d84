/*
 * completion.c — POST /v1/chat/completions and POST /v1/completions.
 *
 * One conversation: the context's KV cache persists between requests. A
 * request's prompt (the chat template applied to all its messages, or the
 * raw prompt) is tokenized and compared with the tokens in the context; the
 * longest common prefix is kept, anything after it is truncated away
 * (mz_ctx_truncate), and only the new tokens are prefilled. The last prompt
 * token is always recomputed when the whole prompt is cached, so its logits
 * are fresh. Evicted units come back on demand inside the prefill.
 *
 * Generation is the library's loop (mz_generator_step, src/engine/generate.c):
 * it samples a token, appends it to the context (so the cache holds exactly
 * what was generated, the end-of-turn token included) and stops at end of
 * generation, max_tokens, a stop string (gen_on_token says so), a full
 * context, or the shutdown grace running out (gen_cancelled).
 *
 * OpenAI extras (gen_setup_openai): logit_bias and the penalties go to the
 * sampler; response_format runs the JSON grammar (src/grammar/) as the
 * sampler's filter, advanced by every sampled token; logprobs are recorded
 * per token with the text offset where the token starts, so tokens cut off by
 * a stop string, or still held back in a stream, are not sent early.
 *
 * Streaming: the request is validated, tokenized, queued and prefilled in
 * the handler (so errors still get a proper status), then a callback
 * response generates one token per call and sends Server-Sent Events. The
 * engine stays owned by the stream until generation ends or the client goes
 * away (the response's free callback).
 */
#include "server/server_impl.h"
#include "server/completion.h"
#include "server/request.h"

#include "core/core.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* ---- prompt → tokens ------------------------------------------------------------------- */

/* Tokenizes with a growing buffer: chat messages through the template
 * (control tokens only from the template), or the raw prompt, whose control
 * tokens are read only when the request opts in ("parse_special"). */
static mz_status build_tokens(mz_server_t *s, const srv_comp_req *r, bool chat, mz_token **out, size_t *n_out)
{
    size_t len = chat ? 0 : strlen(r->prompt), n = 0, cap = len + 256;
    mz_token *toks = NULL;
    mz_status st = MZ_E_RANGE;
    for (int pass = 0; pass < 2 && st == MZ_E_RANGE; pass++) {
        mz_token *b = realloc(toks, cap * sizeof *toks);
        if (!b) {
            st = MZ_E_NOMEM;
            break;
        }
        toks = b;
        st = chat ? mz_chat_tokenize(s->model, r->msgs, r->n_msgs, true, toks, cap, &n)
                  : mz_tokenize(s->model, r->prompt, len, true, r->parse_special, toks, cap, &n);
        cap = n;
    }
    if (st) {
        free(toks);
        return st;
    }
    *out = toks;
    *n_out = n;
    return MZ_OK;
}

/* ---- generation ------------------------------------------------------------------------ */

static bool text_append(gen_state *g, const char *p, size_t n)
{
    return srv_bytes_append(&g->text, &g->len, &g->cap, 256, p, n);
}

/* Cuts the text at the first stop string that appears; true if one did. */
static bool check_stops(gen_state *g, size_t from)
{
    size_t best = SIZE_MAX;
    for (int i = 0; i < g->n_stops; i++) {
        size_t sl = strlen(g->stops[i]);
        size_t start = from > sl ? from - sl : 0;
        const char *hit = g->len >= sl ? memmem(g->text + start, g->len - start, g->stops[i], sl) : NULL;
        if (hit && (size_t)(hit - g->text) < best) best = (size_t)(hit - g->text);
    }
    if (best == SIZE_MAX) return false;
    g->len = best;
    g->text[g->len] = '\0';
    if (g->emitted > g->len) g->emitted = g->len;
    return true;
}

/* Bytes that may be sent now: all when done, else all but a tail that could
 * still become a stop string. */
static size_t emittable_end(const gen_state *g)
{
    if (g->done) return g->len;
    size_t hold = 0;
    for (int i = 0; i < g->n_stops; i++) {
        size_t sl = strlen(g->stops[i]);
        for (size_t k = MZ_MIN(sl - 1, g->len); k > hold; k--)
            if (!memcmp(g->text + g->len - k, g->stops[i], k)) {
                hold = k;
                break;
            }
    }
    size_t end = g->len - hold;
    return end > g->emitted ? end : g->emitted;
}

static void gen_finish_text(gen_state *g)
{
    char buf[16];
    size_t nb = mz_detok_flush(g->dt, buf, sizeof buf);
    if (nb && strcmp(g->finish, "stop_string")) text_append(g, buf, nb);
}

/* Every sampled token, the end of generation included: the first one's
 * timings, and the grammar's step (which may refuse it). */
static bool gen_on_sample(void *user, mz_token t)
{
    gen_state *g = user;
    if (g->tm.n_generated == 0 && g->tm.ttft_ms == 0) {
        double now = mz_time_ms();
        g->tm.sample_ms = now - g->t_gen0;
        g->tm.ttft_ms = now - g->t0;
    }
    if (g->jf.g && !mz_jfilter_accept(&g->jf, t)) {
        mz_fail(MZ_E_INVAL, "token %d outside the grammar", (int)t);
        return false;
    }
    return true;
}

/* Each generated token: its text, its logprobs, the stop strings. */
static mz_gen_action gen_on_token(void *user, mz_token t, const float *logits, int n_vocab)
{
    gen_state *g = user;
    (void)n_vocab;
    char buf[256];
    size_t nb = mz_detok_push(g->dt, t, false, buf, sizeof buf);
    size_t before = g->len;
    if (!text_append(g, buf, nb) || (g->want_lp && !srv_lp_record(g, logits, t, before))) {
        mz_fail(MZ_E_NOMEM, "out of memory recording the answer");
        return MZ_GEN_FAIL;
    }
    g->tm.n_generated++;
    if (g->srv->p.token_delay_ms > 0) {
        int d = g->srv->p.token_delay_ms;
        struct timespec ts = {d / 1000, (long)(d % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (g->n_stops && check_stops(g, before)) return MZ_GEN_STOP;
    return MZ_GEN_CONTINUE;
}

/* Shutdown: the grace period ran out; the answer ends here ("length").
 * A non-streamed request whose client closed its connection ends too:
 * nobody would read the answer (a stream notices through MHD's writes). */
static bool gen_cancelled(void *user)
{
    gen_state *g = user;
    if (!g->stream && srv_client_gone(g->conn)) {
        g->client_gone = true;
        return true;
    }
    return srv_cut_short(g->srv);
}

/* One token. Caller owns the engine. */
static void gen_step(gen_state *g)
{
    mz_server_t *s = g->srv;
    if (g->done) return;
    mz_status st = mz_generator_step(g->gen);
    mz_finish f = mz_generator_finish(g->gen);
    if (f == MZ_FINISH_NONE) return;
    g->done = true;
    switch (f) {
    case MZ_FINISH_EOG:
        /* A document closed early to fit max_tokens ends by its length. */
        g->finish = g->jf.budget_bound ? "length" : "stop";
        break;
    case MZ_FINISH_STOP:
        g->finish = "stop_string"; /* the text is already cut; nothing held back is sent */
        return;
    case MZ_FINISH_ERROR:
        srv_log(s, "generation failed after %zu tokens: %s", g->tm.n_generated,
                st ? mz_last_error() : "unknown error");
        g->failed = true;
        g->finish = "error";
        return;
    default: /* max_tokens, a full context, the shutdown grace over */
        g->finish = "length";
        break;
    }
    gen_finish_text(g);
}

static const char *finish_reason(const gen_state *g)
{
    if (!strcmp(g->finish, "stop_string")) return "stop";
    return g->finish;
}

/* Records timings and counters, releases the engine. */
static void gen_release(gen_state *g)
{
    if (!g->holds_gate) return;
    mz_server_t *s = g->srv;
    double now = mz_time_ms();
    g->tm.gen_ms = now - g->t_gen0;
    g->tm.total_ms = now - g->t0;
    snprintf(g->tm.finish_reason, sizeof g->tm.finish_reason, "%s",
             g->done && !g->client_gone ? finish_reason(g) : "client_gone");
    g->tm.valid = true;
    pthread_mutex_lock(&s->snap_mu);
    s->last = g->tm;
    if (g->client_gone) s->n_client_gone_running++;
    s->n_prompt_tokens += g->tm.n_prompt;
    s->n_prefilled_tokens += g->tm.n_prefilled;
    s->n_cached_tokens += g->tm.n_cached;
    s->n_generated_tokens += g->tm.n_generated;
    pthread_mutex_unlock(&s->snap_mu);
    srv_session_done(s, &g->tm);
    g->holds_gate = false;
    srv_gate_leave(s);
    if (s->p.verbose)
        srv_log(s, "%s: prompt %zu tokens (%zu cached, %zu computed), %zu generated, TTFT %.1f ms, total %.1f ms (%s)",
                g->chat ? "chat" : "completion", g->tm.n_prompt, g->tm.n_cached, g->tm.n_prefilled,
                g->tm.n_generated, g->tm.ttft_ms, g->tm.total_ms, g->tm.finish_reason);
}

static void gen_free(gen_state *g)
{
    if (!g) return;
    gen_release(g);
    mz_generator_free(g->gen);
    mz_sampler_free(g->smp);
    mz_detok_free(g->dt);
    for (int i = 0; i < g->n_stops; i++) free(g->stops[i]);
    free(g->lp);
    mz_jgram_free(g->jf.g);
    mz_jvocab_free(g->vocab);
    mz_jschema_free(g->schema);
    free(g->text);
    free(g->out);
    free(g);
}

/* ---- responses ----------------------------------------------------------------------------- */

static void add_usage(cJSON *o, const gen_state *g)
{
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)g->tm.n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)g->tm.n_generated);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(g->tm.n_prompt + g->tm.n_generated));
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", (double)g->tm.n_cached);
    cJSON *t = cJSON_AddObjectToObject(o, "timings");
    cJSON_AddNumberToObject(t, "cached_n", (double)g->tm.n_cached);
    cJSON_AddNumberToObject(t, "prompt_n", (double)g->tm.n_prefilled);
    cJSON_AddNumberToObject(t, "prompt_ms", g->tm.prefill_ms);
    cJSON_AddNumberToObject(t, "predicted_n", (double)g->tm.n_generated);
    cJSON_AddNumberToObject(t, "predicted_ms", mz_time_ms() - g->t_gen0);
    cJSON_AddNumberToObject(t, "queue_ms", g->tm.queue_ms);
    cJSON_AddNumberToObject(t, "tokenize_ms", g->tm.tokenize_ms);
    cJSON_AddNumberToObject(t, "ttft_ms", g->tm.ttft_ms);
    cJSON_AddNumberToObject(t, "remaining_pct_before", g->tm.remaining_pct_before);
    cJSON_AddNumberToObject(t, "evicted_bytes_before", (double)g->tm.evicted_bytes_before);
}

static cJSON *response_head(const gen_state *g, const char *object)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", g->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)g->created);
    cJSON_AddStringToObject(o, "model", g->srv->model_id);
    return o;
}

static bool out_append(gen_state *g, const char *p, size_t n)
{
    return srv_bytes_append(&g->out, &g->out_len, &g->out_cap, 1024, p, n);
}

/* "data: {json}\n\n"; frees obj. */
static bool sse_event(gen_state *g, cJSON *obj)
{
    char *txt = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!txt) return false;
    bool ok = out_append(g, "data: ", 6) && out_append(g, txt, strlen(txt)) && out_append(g, "\n\n", 2);
    cJSON_free(txt);
    return ok;
}

/* A chunk carrying text (or the role, or the end). */
static bool sse_chunk(gen_state *g, const char *text, size_t n, bool role, const char *finish, bool usage)
{
    cJSON *o = response_head(g, g->chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    char *copy = malloc(n + 1);
    if (!copy) {
        cJSON_Delete(o);
        cJSON_Delete(c);
        return false;
    }
    memcpy(copy, text ? text : "", n);
    copy[n] = '\0';
    if (g->chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (role) cJSON_AddStringToObject(d, "role", "assistant");
        if (role || n) cJSON_AddStringToObject(d, "content", copy);
    } else {
        cJSON_AddStringToObject(c, "text", copy);
    }
    free(copy);
    if (g->want_lp && !role) srv_add_logprobs(c, g, text ? (size_t)(text - g->text) + n : g->len);
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    if (usage) add_usage(o, g);
    return sse_event(g, o);
}

/* stream_options.include_usage: a last chunk with no choices and the usage. */
static bool sse_usage_chunk(gen_state *g)
{
    cJSON *o = response_head(g, g->chat ? "chat.completion.chunk" : "text_completion");
    cJSON_AddArrayToObject(o, "choices");
    add_usage(o, g);
    return sse_event(g, o);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    gen_state *g = cls;
    (void)pos;
    while (g->out_off == g->out_len) {
        g->out_off = g->out_len = 0;
        if (g->done_sent) return MHD_CONTENT_READER_END_OF_STREAM;
        if (g->chat && !g->role_sent) {
            g->role_sent = true;
            if (!sse_chunk(g, "", 0, true, NULL, false)) return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        if (!g->done) {
            gen_step(g);
            size_t end = emittable_end(g);
            if (end > g->emitted) {
                if (!sse_chunk(g, g->text + g->emitted, end - g->emitted, false, NULL, false))
                    return MHD_CONTENT_READER_END_WITH_ERROR;
                g->emitted = end;
            }
            /* A long generation is activity: keep the idle timer from firing. */
            MHD_set_connection_option(g->conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned int)g->srv->p.conn_timeout_s);
            continue;
        }
        if (!g->final_sent) {
            g->final_sent = true;
            if (g->len > g->emitted) {
                if (!sse_chunk(g, g->text + g->emitted, g->len - g->emitted, false, NULL, false))
                    return MHD_CONTENT_READER_END_WITH_ERROR;
                g->emitted = g->len;
            }
            if (g->failed) {
                cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
                cJSON_AddStringToObject(e, "message", "generation failed; the conversation is kept up to here");
                cJSON_AddStringToObject(e, "type", "server_error");
                sse_event(g, o);
            }
            if (!sse_chunk(g, NULL, 0, false, finish_reason(g), true)) return MHD_CONTENT_READER_END_WITH_ERROR;
            if (g->include_usage && !sse_usage_chunk(g)) return MHD_CONTENT_READER_END_WITH_ERROR;
            gen_release(g); /* the next request may start while [DONE] goes out */
            continue;
        }
        g->done_sent = true;
        if (!out_append(g, "data: [DONE]\n\n", 14)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = MZ_MIN(max, g->out_len - g->out_off);
    memcpy(buf, g->out + g->out_off, n);
    g->out_off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) { gen_free(cls); }

/* logit_bias, logprobs, include_usage and structured output of a validated
 * request; the grammar (schema taken over from r) filters the sampler. */
static bool gen_setup_openai(gen_state *g, srv_comp_req *r)
{
    if (r->n_bias && mz_sampler_set_logit_bias(g->smp, r->bias, r->n_bias)) return false;
    g->want_lp = r->logprobs;
    g->n_top = r->top_logprobs;
    g->include_usage = r->include_usage;
    if (!r->schema) return true;
    g->schema = r->schema;
    r->schema = NULL;
    g->vocab = mz_jvocab_init(g->srv->model);
    g->jf = mz_jfilter_make(mz_jgram_init(g->schema), g->vocab);
    if (!g->vocab || !g->jf.g) return false;
    mz_sampler_set_filter(g->smp, mz_jfilter_token_ok, &g->jf);
    return true;
}

/* 64 bits for a request's sampler: the clock mixed with a counter
 * (splitmix64), so two requests in one nanosecond still differ. */
static uint64_t srv_fresh_seed(mz_server_t *s)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t z = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec +
                 0x9E3779B97F4A7C15ull * (uint64_t)atomic_fetch_add(&s->next_id, 0);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- the handler ---------------------------------------------------------------------------------- */

/* Brings the context to exactly toks, keeping the longest common prefix.
 * Caller owns the engine. */
static mz_status sync_context(mz_server_t *s, const mz_token *toks, size_t n, size_t *n_cached,
                              bool *in_resume)
{
    *in_resume = false;
    srv_session *ss = srv_session_of(s->cur);
    size_t fresh = ss->n_fresh;
    /* Cached means not computed for this request: after a resume only the
     * tokens restored from storage count, not those it recomputed. */
    size_t not_computed = ss->resumed_now ? ss->n_restored : SIZE_MAX;
    ss->n_fresh = 0;
    ss->resumed_now = false;
    /* The resume that routed this request prefilled its tokens: the context
     * is toks with the last one's logits current. */
    if (fresh && fresh <= n && mz_ctx_n_tokens(s->ctx) == n && mz_ctx_common_prefix(s->ctx, toks, n) == n &&
        mz_ctx_logits(s->ctx)) {
        *n_cached = MZ_MIN(n - fresh, not_computed);
        *in_resume = true;
        return MZ_OK;
    }
    mz_status st = mz_ctx_sync(s->ctx, toks, n, NULL, NULL, n_cached);
    if (st == MZ_OK) *n_cached = MZ_MIN(*n_cached, not_computed);
    return st;
}

enum MHD_Result srv_handle_completion(mz_server_t *s, struct MHD_Connection *c, srv_request *rq, bool chat)
{
    double t0 = mz_time_ms();
    const char *bad_json;
    cJSON *root = srv_parse_json(rq->body, rq->len, &bad_json);
    if (!root) return srv_error(s, c, 400, "invalid_request_error", "%s", bad_json);
    srv_comp_req *r = calloc(1, sizeof *r);
    if (!r) {
        cJSON_Delete(root);
        return srv_error(s, c, 500, "server_error", "out of memory");
    }
    int status;
    srv_req_limits lim = {s->model_id, s->p.default_max_tokens, s->p.max_tokens_limit, s->p.sampler,
                          mz_model_n_vocab(s->model)};
    const char *bad = srv_parse_completion(&lim, root, chat, r, &status);
    if (bad) {
        enum MHD_Result ret = srv_error(s, c, status, status == 404 ? "not_found" : "invalid_request_error", "%s", bad);
        srv_comp_req_free(r);
        free(r);
        cJSON_Delete(root);
        return ret;
    }
    char sid[SRV_SESSION_ID_MAX + 1];
    char sid_err[200];
    const char *bad_sid = srv_session_id(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Session-Id"), sid, sizeof sid,
                                         sid_err, sizeof sid_err);
    gen_state *g = bad_sid ? NULL : calloc(1, sizeof *g);
    mz_token *toks = NULL;
    size_t n = 0;
    enum MHD_Result ret;
    if (bad_sid) {
        ret = srv_error(s, c, 400, "invalid_request_error", "%s", bad_sid);
        goto out_req;
    }
    if (!g) {
        ret = srv_error(s, c, 500, "server_error", "out of memory");
        goto out_req;
    }
    g->srv = s;
    g->conn = c;
    g->chat = chat;
    g->stream = r->stream;
    g->t0 = t0;
    g->created = (long)srv_unix_now();
    snprintf(g->id, sizeof g->id, "%s-%lu", chat ? "chatcmpl" : "cmpl", atomic_fetch_add(&s->next_id, 1) + 1);
    g->max_tokens = r->max_tokens;
    g->n_vocab = mz_model_n_vocab(s->model);
    g->tm.chat = chat;
    g->tm.stream = r->stream;
    for (int i = 0; i < r->n_stops; i++) {
        g->stops[i] = strdup(r->stops[i]);
        if (!g->stops[i]) {
            ret = srv_error(s, c, 500, "server_error", "out of memory");
            goto out_gen;
        }
        g->n_stops = i + 1;
        g->max_stop = MZ_MAX(g->max_stop, strlen(r->stops[i]));
    }
    /* Without a seed (and none fixed by serve -s), each request samples anew. */
    if (!r->seed_given && !s->p.seed_fixed) r->sp.seed = srv_fresh_seed(s);
    if (mz_sampler_init(&r->sp, &g->smp) || mz_detok_init(s->model, &g->dt) || !gen_setup_openai(g, r)) {
        ret = srv_error(s, c, 500, "server_error", "cannot set up sampling");
        goto out_gen;
    }
    mz_status st = build_tokens(s, r, chat, &toks, &n);
    g->tm.tokenize_ms = mz_time_ms() - t0;
    if (st) {
        ret = st == MZ_E_NOMEM ? srv_error(s, c, 500, "server_error", "out of memory")
                               : srv_error(s, c, 400, "invalid_request_error", "cannot tokenize the prompt (%s)", mz_status_str(st));
        goto out_gen;
    }
    g->tm.n_prompt = n;
    size_t n_ctx = s->n_ctx; /* every session's, fixed at start */
    if (n == 0) {
        ret = srv_error(s, c, 400, "invalid_request_error", "the prompt has no tokens");
        goto out_gen;
    }
    if (n >= n_ctx) {
        ret = srv_error(s, c, 400, "context_length_exceeded",
                        "the prompt has %zu tokens; this server's context holds %zu", n, n_ctx);
        goto out_gen;
    }
    double wait_ms = 0;
    int gate = srv_gate_enter_for(s, false, c, &wait_ms);
    g->tm.queue_ms = wait_ms;
    if (gate == SRV_GATE_CLIENT_GONE) {
        pthread_mutex_lock(&s->snap_mu);
        s->n_client_gone_queued++;
        pthread_mutex_unlock(&s->snap_mu);
        srv_log(s, "request dropped from the queue after %.0f ms: its client closed the connection", wait_ms);
        ret = MHD_NO; /* close it: nobody is there to answer */
        goto out_gen;
    }
    if (gate == 429) {
        ret = srv_error(s, c, 429, "rate_limit_error", "busy: another request is using the conversation and the queue is full; retry");
        goto out_gen;
    }
    if (gate) {
        ret = srv_error(s, c, 503, "unavailable", "timed out waiting for the conversation (or shutting down)");
        goto out_gen;
    }
    g->holds_gate = true;
    double t_route = mz_time_ms();
    if ((st = srv_session_route(s, sid, toks, n))) {
        ret = srv_error(s, c, 503, "unavailable", "cannot open a session (%s)", mz_status_str(st));
        goto out_gen;
    }
    {
        mz_mem_stats before;
        mz_get_mem_stats(s->ctx, &before);
        size_t held = before.weights.resident_bytes + before.kv.resident_bytes;
        size_t total = before.weights.total_bytes + before.kv.total_bytes;
        g->tm.remaining_pct_before = before.remaining_pct;
        g->tm.evicted_bytes_before = total > held ? total - held : 0;
    }
    double tp = mz_time_ms();
    bool in_resume = false;
    st = sync_context(s, toks, n, &g->tm.n_cached, &in_resume);
    g->t_gen0 = mz_time_ms();
    /* A resume that computed the new tokens in its pass did the prefill. */
    g->tm.prefill_ms = g->t_gen0 - (in_resume ? t_route : tp);
    g->tm.n_prefilled = n - g->tm.n_cached;
    if (st) {
        srv_log(s, "prefill failed: %s", mz_ctx_errmsg(s->ctx));
        g->tm.n_prefilled = 0;
        ret = st == MZ_E_CONTEXT_FULL
                  ? srv_error(s, c, 400, "context_length_exceeded", "the conversation does not fit in the context")
                  : srv_error(s, c, 500, "server_error", "prefill failed (%s); the conversation was kept as before",
                              mz_status_str(st));
        goto out_gen;
    }
    {
        /* The penalty window sees the end of the prompt, as in `mzcache run`. */
        const mz_token *all = mz_ctx_tokens(s->ctx);
        size_t nt = mz_ctx_n_tokens(s->ctx);
        size_t from = nt > 256 ? nt - 256 : 0;
        for (size_t i = from; i < nt; i++) mz_sampler_accept_prompt(g->smp, all[i]);
    }
    {
        mz_generate_params gp = mz_generate_params_default();
        gp.max_tokens = (size_t)MZ_MAX(g->max_tokens, 1);
        /* Structured output closes its document within what the answer may
         * still take: max_tokens and the context's room. */
        size_t room = mz_ctx_n_ctx(s->ctx) - mz_ctx_n_tokens(s->ctx);
        if (g->jf.g) mz_jfilter_set_budget(&g->jf, MZ_MIN(gp.max_tokens, room));
        gp.on_sample = gen_on_sample;
        gp.on_token = gen_on_token;
        gp.cancelled = gen_cancelled;
        gp.user = g;
        if (mz_generator_init(s->ctx, g->smp, &gp, &g->gen)) {
            ret = srv_error(s, c, 500, "server_error", "out of memory");
            goto out_gen;
        }
    }
    if (r->stream) {
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, g, stream_free);
        if (!resp) {
            ret = srv_error(s, c, 500, "server_error", "out of memory");
            goto out_gen;
        }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned int)s->p.conn_timeout_s);
        ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp); /* the stream owns g from here (stream_free) */
        srv_count_response(s, 200);
        g = NULL;
        goto out_req;
    }
    while (!g->done) gen_step(g);
    g->emitted = g->len;
    {
        cJSON *o = response_head(g, chat ? "chat.completion" : "text_completion");
        cJSON *choices = cJSON_AddArrayToObject(o, "choices");
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddNumberToObject(ch, "index", 0);
        if (chat) {
            cJSON *m = cJSON_AddObjectToObject(ch, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            cJSON_AddStringToObject(m, "content", g->text ? g->text : "");
            srv_add_logprobs(ch, g, g->len);
        } else {
            cJSON_AddStringToObject(ch, "text", g->text ? g->text : "");
            srv_add_logprobs(ch, g, g->len);
        }
        cJSON_AddStringToObject(ch, "finish_reason", finish_reason(g));
        cJSON_AddItemToArray(choices, ch);
        add_usage(o, g);
        bool failed = g->failed, gone = g->client_gone;
        gen_release(g);
        if (gone) {
            srv_log(s, "generation stopped after %zu tokens: its client closed the connection", g->tm.n_generated);
            cJSON_Delete(o);
            ret = MHD_NO;
            goto out_gen;
        }
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned int)s->p.conn_timeout_s);
        if (failed) {
            cJSON_Delete(o);
            ret = srv_error(s, c, 500, "server_error", "generation failed; the conversation is kept up to the failure");
        } else {
            ret = srv_respond_json(s, c, 200, o);
        }
    }
out_gen:
    gen_free(g);
out_req:
    free(toks);
    srv_comp_req_free(r);
    free(r);
    cJSON_Delete(root);
    return ret;
}
