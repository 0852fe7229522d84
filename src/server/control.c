/*
 * control.c — the control endpoints: /mz/status, /mz/sessions (list and
 * DELETE), /mz/evict, /mz/restore, /metrics (Prometheus text) and
 * /v1/models. They read the snapshot (snap_mu) the gate refreshes; evict,
 * restore and delete take the gate ahead of queued completions.
 */
#include "server/server_impl.h"
#include "server/request.h"

#include "core/core.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

static size_t rss_bytes(void)
{
    unsigned long long size = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "re");
    if (!f) return 0;
    if (fscanf(f, "%llu %llu", &size, &res) != 2) res = 0;
    fclose(f);
    return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

/* A run of numeric members, written from a table (name, value). */
typedef struct num_field {
    const char *name;
    double v;
} num_field;

static void add_numbers(cJSON *o, const num_field *f, size_t n)
{
    for (size_t i = 0; i < n; i++) cJSON_AddNumberToObject(o, f[i].name, f[i].v);
}

static cJSON *category_json(const mz_mem_category *c)
{
    cJSON *o = cJSON_CreateObject();
    const num_field f[] = {
        {"total_bytes", (double)c->total_bytes}, {"resident_bytes", (double)c->resident_bytes},
        {"compressed_bytes", (double)c->compressed_bytes}, {"stored_bytes", (double)c->stored_bytes},
        {"dropped_bytes", (double)c->dropped_bytes}, {"units", (double)c->n_units},
        {"units_resident", (double)c->n_resident},
    };
    add_numbers(o, f, sizeof f / sizeof f[0]);
    return o;
}

static cJSON *stats_json(const mz_mem_stats *st, size_t ctx_tokens, int n_ctx)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddItemToObject(m, "weights", category_json(&st->weights));
    cJSON_AddItemToObject(m, "kv", category_json(&st->kv));
    /* A part of kv, not beside it: all zero for a model without sliding-window layers. */
    cJSON_AddItemToObject(m, "kv_out_of_window", category_json(&st->kv_out_of_window));
    cJSON_AddNumberToObject(m, "pinned_bytes", (double)st->pinned_bytes);
    cJSON_AddNumberToObject(m, "remaining_pct", st->remaining_pct);
    /* The policy's stage, named as everywhere else (mz_evict_stage_name). */
    cJSON_AddStringToObject(m, "stage", mz_evict_stage_name(st->stage));
    cJSON_AddNumberToObject(m, "compstack_mapped_bytes", (double)st->compstack_mapped_bytes);
    cJSON_AddNumberToObject(m, "swap_file_bytes", (double)st->swap_file_bytes);
    cJSON_AddStringToObject(m, "codec", st->codec);
    cJSON_AddStringToObject(m, "placement", st->placement);
    cJSON_AddNumberToObject(m, "context_tokens", (double)ctx_tokens);
    cJSON_AddNumberToObject(m, "context_size", n_ctx);
    return m;
}

static void event_to_json(cJSON *arr, const srv_event *e)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "t", e->t_unix);
    cJSON_AddStringToObject(o, "trigger", e->trigger);
    cJSON_AddStringToObject(o, "what", e->what);
    cJSON_AddNumberToObject(o, "requested_bytes", e->requested == SIZE_MAX ? -1.0 : (double)e->requested);
    cJSON_AddNumberToObject(o, "freed_bytes", (double)e->freed);
    cJSON_AddNumberToObject(o, "remaining_pct", e->remaining_pct);
    cJSON_AddNumberToObject(o, "ms", e->ms);
    cJSON_AddBoolToObject(o, "at_floor", e->at_floor);
    cJSON_AddItemToArray(arr, o);
}

static void timings_json(cJSON *o, const srv_timings *t)
{
    cJSON_AddStringToObject(o, "endpoint", t->chat ? "chat" : "completions");
    cJSON_AddBoolToObject(o, "stream", t->stream);
    const num_field f[] = {
        {"prompt_tokens", (double)t->n_prompt}, {"cached_tokens", (double)t->n_cached},
        {"prefilled_tokens", (double)t->n_prefilled}, {"generated_tokens", (double)t->n_generated},
        {"queue_ms", t->queue_ms}, {"tokenize_ms", t->tokenize_ms}, {"prefill_ms", t->prefill_ms},
        {"sample_ms", t->sample_ms}, {"ttft_ms", t->ttft_ms}, {"generate_ms", t->gen_ms},
        {"total_ms", t->total_ms}, {"remaining_pct_before", t->remaining_pct_before},
        {"evicted_bytes_before", (double)t->evicted_bytes_before},
    };
    add_numbers(o, f, sizeof f / sizeof f[0]);
    cJSON_AddStringToObject(o, "finish_reason", t->finish_reason);
}

static bool cgroup_usage(size_t *usage, size_t *limit)
{
    char dir[512], path[600];
    unsigned long long u = 0, l = 0;
    if (mz_cgroup_v1_memory_dir(dir, sizeof dir)) return false;
    snprintf(path, sizeof path, "%s/memory.usage_in_bytes", dir);
    if (mz_read_u64_file(path, &u)) return false;
    snprintf(path, sizeof path, "%s/memory.limit_in_bytes", dir);
    if (mz_read_u64_file(path, &l)) l = 0;
    *usage = (size_t)u;
    *limit = l >= (1ULL << 62) ? 0 : (size_t)l;
    return true;
}

/* Caller holds snap_mu. */
static cJSON *session_json(const mz_server_t *s, const srv_session_snap *ss)
{
    char t[40];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", ss->id);
    cJSON_AddBoolToObject(o, "named", ss->named);
    cJSON_AddBoolToObject(o, "active", s->active_id[0] && !strcmp(s->active_id, ss->id));
    cJSON_AddBoolToObject(o, "loaded", true);
    cJSON_AddBoolToObject(o, "stored", ss->stored);
    if (ss->stored_tokens >= 0) cJSON_AddNumberToObject(o, "stored_tokens", (double)ss->stored_tokens);
    cJSON_AddNumberToObject(o, "tokens", (double)ss->n_tokens);
    cJSON_AddNumberToObject(o, "kv_total_bytes", (double)ss->kv.total_bytes);
    cJSON_AddNumberToObject(o, "resident_bytes", (double)ss->kv.resident_bytes);
    cJSON_AddNumberToObject(o, "compressed_bytes", (double)ss->kv.compressed_bytes);
    cJSON_AddNumberToObject(o, "stored_bytes", (double)ss->kv.stored_bytes);
    cJSON_AddNumberToObject(o, "kv_out_of_window_bytes", (double)ss->kv_out_of_window.total_bytes);
    cJSON_AddNumberToObject(o, "kv_out_of_window_resident_bytes", (double)ss->kv_out_of_window.resident_bytes);
    cJSON_AddNumberToObject(o, "compstack_mapped_bytes", (double)ss->compstack_mapped_bytes);
    cJSON_AddNumberToObject(o, "swap_file_bytes", (double)ss->swap_file_bytes);
    srv_iso8601(ss->created_unix, t, sizeof t);
    cJSON_AddStringToObject(o, "created", t);
    srv_iso8601(ss->last_use_unix, t, sizeof t);
    cJSON_AddStringToObject(o, "last_use", t);
    cJSON_AddNumberToObject(o, "last_use_unix", ss->last_use_unix);
    if (ss->last_ttft_ms >= 0) cJSON_AddNumberToObject(o, "last_ttft_ms", ss->last_ttft_ms);
    else cJSON_AddNullToObject(o, "last_ttft_ms");
    cJSON_AddNumberToObject(o, "requests", (double)ss->n_requests);
    return o;
}

/* Caller holds snap_mu. Most recently used first. */
static cJSON *sessions_json(const mz_server_t *s)
{
    int order[SRV_MAX_SESSIONS + 1], n = s->n_snap_sess;
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && s->snap_sess[order[j - 1]].last_use_unix < s->snap_sess[order[j]].last_use_unix; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(arr, session_json(s, &s->snap_sess[order[i]]));
    /* Then the stored sessions not in memory (newest first): a request naming
     * one resumes it. */
    for (int i = s->n_snap_stored - 1; i >= 0; i--) {
        const mz_stored_session *v = &s->snap_stored[i];
        cJSON *o = cJSON_CreateObject();
        char t[40];
        cJSON_AddStringToObject(o, "id", v->id);
        cJSON_AddBoolToObject(o, "named", true);
        cJSON_AddBoolToObject(o, "active", false);
        cJSON_AddBoolToObject(o, "loaded", false);
        cJSON_AddBoolToObject(o, "stored", true);
        cJSON_AddNumberToObject(o, "stored_tokens", (double)v->n_tokens);
        cJSON_AddNumberToObject(o, "stored_file_bytes", (double)v->bytes);
        cJSON_AddBoolToObject(o, "resumable", v->readable && v->same_model);
        if (!v->readable) cJSON_AddStringToObject(o, "refused", "corrupt manifest");
        else if (!v->same_model) cJSON_AddStringToObject(o, "refused", "another model or tokenizer");
        srv_iso8601((double)v->updated_ns / 1e9, t, sizeof t);
        cJSON_AddStringToObject(o, "last_use", t);
        cJSON_AddNumberToObject(o, "last_use_unix", (double)v->updated_ns / 1e9);
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

/* Caller holds snap_mu. */
static cJSON *budget_json(const mz_server_t *s)
{
    cJSON *o = cJSON_CreateObject();
    if (s->p.mem_budget_bytes) cJSON_AddNumberToObject(o, "budget_bytes", (double)s->p.mem_budget_bytes);
    else cJSON_AddNullToObject(o, "budget_bytes");
    cJSON_AddNumberToObject(o, "footprint_bytes", (double)s->footprint);
    cJSON_AddBoolToObject(o, "over_budget", s->p.mem_budget_bytes && s->footprint > s->p.mem_budget_bytes);
    const num_field f[] = {
        {"max_sessions", s->p.max_sessions}, {"sessions", s->n_snap_sess},
        {"sessions_created", (double)s->n_sessions_created},
        {"sessions_forgotten", (double)s->n_sessions_forgotten},
        {"sessions_deleted", (double)s->n_sessions_deleted},
        {"budget_evictions", (double)s->n_budget_evictions},
        {"budget_evicted_bytes", (double)s->budget_evicted_bytes},
    };
    add_numbers(o, f, sizeof f / sizeof f[0]);
    return o;
}

enum MHD_Result srv_handle_sessions(mz_server_t *s, struct MHD_Connection *c)
{
    srv_store_snapshot(s); /* the manifests as write-behind left them now */
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    pthread_mutex_lock(&s->snap_mu);
    cJSON_AddItemToObject(root, "data", sessions_json(s));
    cJSON_AddItemToObject(root, "budget", budget_json(s));
    pthread_mutex_unlock(&s->snap_mu);
    return srv_respond_json(s, c, 200, root);
}

/* DELETE /mz/sessions/ID: 409 at once for the session a running request
 * generates on (its answer goes on; the client retries), else waits for the
 * engine (ahead of queued completions, like an eviction): a session another
 * session's request keeps waiting, or one a queued request will use, is
 * deleted in between. */
enum MHD_Result srv_handle_session_delete(mz_server_t *s, struct MHD_Connection *c, const srv_request *rq)
{
    const char *bad_id = mz_session_id_check(rq->session, true);
    if (bad_id) return srv_error(s, c, 400, "invalid_request_error", "%s", bad_id);
    pthread_mutex_lock(&s->snap_mu);
    bool generating = s->active_id[0] && !strcmp(s->active_id, rq->session);
    pthread_mutex_unlock(&s->snap_mu);
    if (generating)
        return srv_error(s, c, 409, "conflict_error",
                         "session %s is busy generating an answer; retry the DELETE when it is done", rq->session);
    if (srv_gate_enter(s, true, NULL)) return srv_error(s, c, 503, "unavailable", "server is shutting down");
    mz_status st = srv_session_delete(s, rq->session);
    srv_gate_leave(s);
    if (st == MZ_E_INVAL) return srv_error(s, c, 404, "not_found", "no such session");
    if (st) return srv_error(s, c, 500, "server_error", "cannot delete the session (%s)", mz_status_str(st));
    srv_log(s, "session %s deleted", rq->session);
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "id", rq->session);
    cJSON_AddBoolToObject(out, "deleted", true);
    return srv_respond_json(s, c, 200, out);
}

enum MHD_Result srv_handle_status(mz_server_t *s, struct MHD_Connection *c)
{
    srv_store_snapshot(s);
    pthread_mutex_lock(&s->mu);
    bool busy = s->busy;
    int queued = s->n_waiting;
    pthread_mutex_unlock(&s->mu);
    cJSON *root = cJSON_CreateObject();
    pthread_mutex_lock(&s->snap_mu);
    cJSON_AddStringToObject(root, "model", s->model_id);
    cJSON_AddBoolToObject(root, "busy", busy);
    cJSON_AddNumberToObject(root, "queued", queued);
    cJSON *gone = cJSON_AddObjectToObject(root, "client_gone");
    cJSON_AddNumberToObject(gone, "queued", (double)s->n_client_gone_queued);
    cJSON_AddNumberToObject(gone, "generating", (double)s->n_client_gone_running);
    cJSON_AddItemToObject(root, "memory", stats_json(&s->stats, s->ctx_tokens, (int)s->n_ctx));
    cJSON_AddItemToObject(root, "sessions", sessions_json(s));
    cJSON_AddItemToObject(root, "budget", budget_json(s));
    cJSON *last = cJSON_AddObjectToObject(root, "last_request");
    if (s->last.valid) timings_json(last, &s->last);
    {
        const mz_restore_timings *rt = &s->restore;
        const num_field f[] = {
            {"units", (double)rt->n_units}, {"storage_units", (double)rt->n_storage_units},
            {"memory_units", (double)rt->n_mem_units}, {"alloc_ms", rt->alloc_ms},
            {"storage_ms", rt->storage_ms}, {"memory_ms", rt->mem_ms}, {"all_ready_ms", rt->restore_ms},
            {"prefill_ms", rt->prefill_ms}, {"stall_ms", rt->stall_ms}, {"ttft_ms", rt->ttft_ms},
        };
        add_numbers(cJSON_AddObjectToObject(root, "last_restore"), f, sizeof f / sizeof f[0]);
    }
    cJSON *evs = cJSON_AddArrayToObject(root, "events");
    size_t first = s->n_events > SRV_N_EVENTS ? s->n_events - SRV_N_EVENTS : 0;
    for (size_t i = first; i < s->n_events; i++) event_to_json(evs, &s->events[i % SRV_N_EVENTS]);
    cJSON_AddNumberToObject(root, "events_total", (double)s->n_events);
    cJSON *pr = cJSON_AddObjectToObject(root, "pressure");
    for (int i = 0; i < MZ_PRESSURE_N_SOURCES; i++) {
        cJSON *o = cJSON_AddObjectToObject(pr, mz_pressure_source_name((mz_pressure_source)i));
        cJSON_AddBoolToObject(o, "active", mz_pressure_active(s->mon, (mz_pressure_source)i));
        cJSON_AddNumberToObject(o, "signals", (double)s->n_signals[i]);
    }
    cJSON_AddNumberToObject(pr, "evictions", (double)s->n_evictions[0]);
    cJSON_AddNumberToObject(pr, "evicted_bytes", (double)s->evicted_bytes[0]);
    cJSON_AddNumberToObject(pr, "ignored_below_level", (double)s->n_ignored_level);
    cJSON_AddNumberToObject(pr, "coalesced", (double)s->n_ignored_interval);
    cJSON_AddNumberToObject(pr, "at_floor", (double)s->n_ignored_floor);
    cJSON_AddNumberToObject(pr, "restores_ahead", (double)s->n_restores_ahead);
    cJSON_AddNumberToObject(pr, "restored_ahead_bytes", (double)s->restored_ahead_bytes);
    pthread_mutex_unlock(&s->snap_mu);
    cJSON *pol = cJSON_AddObjectToObject(root, "evict_policy");
    cJSON_AddNumberToObject(pol, "step_pct", s->p.evict_step_pct);
    cJSON_AddNumberToObject(pol, "step_bytes", (double)s->p.evict_step_bytes);
    cJSON_AddNumberToObject(pol, "floor_pct", s->p.evict_floor_pct);
    cJSON_AddNumberToObject(pol, "floor_bytes", (double)s->p.evict_floor_bytes);
    cJSON_AddStringToObject(pol, "min_level", s->p.pressure_min_level == MZ_PRESSURE_LOW ? "low"
                                              : s->p.pressure_min_level == MZ_PRESSURE_MEDIUM ? "medium"
                                                                                              : "critical");
    cJSON_AddNumberToObject(pol, "interval_ms", s->p.pressure_interval_ms);
    cJSON *proc = cJSON_AddObjectToObject(root, "process");
    cJSON_AddNumberToObject(proc, "rss_bytes", (double)rss_bytes());
    size_t u, l;
    if (cgroup_usage(&u, &l)) {
        cJSON_AddNumberToObject(proc, "cgroup_usage_bytes", (double)u);
        cJSON_AddNumberToObject(proc, "cgroup_limit_bytes", (double)l);
    }
    return srv_respond_json(s, c, 200, root);
}

enum MHD_Result srv_handle_metrics(mz_server_t *s, struct MHD_Connection *c)
{
    size_t cap = 16384 + (size_t)SRV_MAX_SESSIONS * 2048, len = 0;
    char *buf = malloc(cap);
    if (!buf) return srv_error(s, c, 500, "server_error", "out of memory");
#define P(...)                                                                             \
    do {                                                                                   \
        int n_ = snprintf(buf + len, cap - len, __VA_ARGS__);                              \
        if (n_ > 0) len = MZ_MIN(cap - 1, len + (size_t)n_);                               \
    } while (0)
    pthread_mutex_lock(&s->mu);
    bool busy = s->busy;
    int queued = s->n_waiting;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&s->snap_mu);
    const mz_mem_stats *st = &s->stats;
    P("# HELP mzcache_memory_bytes Evictable LLM memory by category and state.\n"
      "# TYPE mzcache_memory_bytes gauge\n");
    const struct { const char *name; const mz_mem_category *c; } cats[] = {{"weights", &st->weights}, {"kv", &st->kv}};
    for (int i = 0; i < 2; i++) {
        const mz_mem_category *cc = cats[i].c;
        P("mzcache_memory_bytes{category=\"%s\",state=\"total\"} %zu\n", cats[i].name, cc->total_bytes);
        P("mzcache_memory_bytes{category=\"%s\",state=\"resident\"} %zu\n", cats[i].name, cc->resident_bytes);
        P("mzcache_memory_bytes{category=\"%s\",state=\"compressed\"} %zu\n", cats[i].name, cc->compressed_bytes);
        P("mzcache_memory_bytes{category=\"%s\",state=\"stored\"} %zu\n", cats[i].name, cc->stored_bytes);
        P("mzcache_memory_bytes{category=\"%s\",state=\"dropped\"} %zu\n", cats[i].name, cc->dropped_bytes);
    }
    /* Its own name: summing mzcache_memory_bytes over category must not count these twice. */
    P("# HELP mzcache_kv_out_of_window_bytes KV of sliding-window layers no next token can attend to (part of "
      "category kv).\n# TYPE mzcache_kv_out_of_window_bytes gauge\n"
      "mzcache_kv_out_of_window_bytes{state=\"total\"} %zu\nmzcache_kv_out_of_window_bytes{state=\"resident\"} %zu\n"
      "mzcache_kv_out_of_window_bytes{state=\"stored\"} %zu\n",
      st->kv_out_of_window.total_bytes, st->kv_out_of_window.resident_bytes, st->kv_out_of_window.stored_bytes);
    P("# HELP mzcache_pinned_bytes Embeddings and output head (never evicted).\n"
      "# TYPE mzcache_pinned_bytes gauge\nmzcache_pinned_bytes %zu\n", st->pinned_bytes);
    P("# HELP mzcache_remaining_ratio Resident+compressed share of the evictable total.\n"
      "# TYPE mzcache_remaining_ratio gauge\nmzcache_remaining_ratio %.6f\n", st->remaining_pct / 100.0);
    P("# HELP mzcache_swap_file_bytes Size of the swap file.\n"
      "# TYPE mzcache_swap_file_bytes gauge\nmzcache_swap_file_bytes %zu\n", st->swap_file_bytes);
    P("# HELP mzcache_context_tokens Tokens in the conversation's KV cache.\n"
      "# TYPE mzcache_context_tokens gauge\nmzcache_context_tokens %zu\n", s->ctx_tokens);
    P("# HELP mzcache_busy 1 while a request or eviction owns the engine.\n"
      "# TYPE mzcache_busy gauge\nmzcache_busy %d\n", busy ? 1 : 0);
    P("# HELP mzcache_queue_length Completions waiting for the engine.\n"
      "# TYPE mzcache_queue_length gauge\nmzcache_queue_length %d\n", queued);
    static const char *const ep_names[EP_COUNT] = {"health", "models", "chat", "completions", "evict",
                                                   "restore", "status", "metrics", "other", "sessions",
                                                   "session_delete"};
    P("# HELP mzcache_requests_total HTTP requests by endpoint.\n# TYPE mzcache_requests_total counter\n");
    for (int i = 0; i < EP_COUNT; i++) P("mzcache_requests_total{endpoint=\"%s\"} %zu\n", ep_names[i], s->n_requests[i]);
    P("# HELP mzcache_responses_total HTTP responses by status class.\n# TYPE mzcache_responses_total counter\n");
    for (int i = 2; i < 6; i++) P("mzcache_responses_total{class=\"%dxx\"} %zu\n", i, s->n_responses[i]);
    P("# HELP mzcache_rejected_busy_total Requests refused with 429.\n# TYPE mzcache_rejected_busy_total counter\n"
      "mzcache_rejected_busy_total %zu\n", s->n_429);
    P("# HELP mzcache_client_gone_total Requests whose client closed the connection: dropped from the queue, or "
      "stopped while generating.\n# TYPE mzcache_client_gone_total counter\n"
      "mzcache_client_gone_total{where=\"queued\"} %zu\nmzcache_client_gone_total{where=\"generating\"} %zu\n",
      s->n_client_gone_queued, s->n_client_gone_running);
    P("# HELP mzcache_tokens_total Tokens by kind: prompt (all), prefilled (computed), cached (reused), generated.\n"
      "# TYPE mzcache_tokens_total counter\n"
      "mzcache_tokens_total{kind=\"prompt\"} %zu\nmzcache_tokens_total{kind=\"prefilled\"} %zu\n"
      "mzcache_tokens_total{kind=\"cached\"} %zu\nmzcache_tokens_total{kind=\"generated\"} %zu\n",
      s->n_prompt_tokens, s->n_prefilled_tokens, s->n_cached_tokens, s->n_generated_tokens);
    P("# HELP mzcache_evictions_total Evictions by trigger.\n# TYPE mzcache_evictions_total counter\n"
      "mzcache_evictions_total{trigger=\"pressure\"} %zu\nmzcache_evictions_total{trigger=\"api\"} %zu\n",
      s->n_evictions[0], s->n_evictions[1]);
    P("# HELP mzcache_evicted_bytes_total Bytes freed by trigger.\n# TYPE mzcache_evicted_bytes_total counter\n"
      "mzcache_evicted_bytes_total{trigger=\"pressure\"} %zu\nmzcache_evicted_bytes_total{trigger=\"api\"} %zu\n",
      s->evicted_bytes[0], s->evicted_bytes[1]);
    P("# HELP mzcache_pressure_signals_total Pressure signals by source.\n# TYPE mzcache_pressure_signals_total counter\n");
    for (int i = 0; i < MZ_PRESSURE_N_SOURCES; i++)
        P("mzcache_pressure_signals_total{source=\"%s\"} %zu\n", mz_pressure_source_name((mz_pressure_source)i), s->n_signals[i]);
    P("# HELP mzcache_pressure_source_active 1 if the interface is registered.\n# TYPE mzcache_pressure_source_active gauge\n");
    for (int i = 0; i < MZ_PRESSURE_N_SOURCES; i++)
        P("mzcache_pressure_source_active{source=\"%s\"} %d\n", mz_pressure_source_name((mz_pressure_source)i),
          mz_pressure_active(s->mon, (mz_pressure_source)i) ? 1 : 0);
    P("# HELP mzcache_pressure_ignored_total Signals not acted on, by reason.\n# TYPE mzcache_pressure_ignored_total counter\n"
      "mzcache_pressure_ignored_total{reason=\"below_level\"} %zu\nmzcache_pressure_ignored_total{reason=\"interval\"} %zu\n"
      "mzcache_pressure_ignored_total{reason=\"floor\"} %zu\n",
      s->n_ignored_level, s->n_ignored_interval, s->n_ignored_floor);
    if (s->last.valid) {
        P("# HELP mzcache_last_ttft_seconds Time to first token of the last completion.\n"
          "# TYPE mzcache_last_ttft_seconds gauge\nmzcache_last_ttft_seconds %.6f\n", s->last.ttft_ms / 1e3);
        P("# HELP mzcache_last_prefill_seconds Prefill (with on-demand restore) of the last completion.\n"
          "# TYPE mzcache_last_prefill_seconds gauge\nmzcache_last_prefill_seconds %.6f\n", s->last.prefill_ms / 1e3);
    }
    P("# HELP mzcache_sessions Conversations held.\n# TYPE mzcache_sessions gauge\nmzcache_sessions %d\n"
      "# HELP mzcache_sessions_max --max-sessions.\n# TYPE mzcache_sessions_max gauge\nmzcache_sessions_max %d\n",
      s->n_snap_sess, s->p.max_sessions);
    P("# HELP mzcache_sessions_total Sessions created, forgotten (LRU) and deleted.\n"
      "# TYPE mzcache_sessions_total counter\n"
      "mzcache_sessions_total{event=\"created\"} %zu\nmzcache_sessions_total{event=\"forgotten\"} %zu\n"
      "mzcache_sessions_total{event=\"deleted\"} %zu\n",
      s->n_sessions_created, s->n_sessions_forgotten, s->n_sessions_deleted);
    P("# HELP mzcache_footprint_bytes Pinned + weights + every session's KV and compressed stack.\n"
      "# TYPE mzcache_footprint_bytes gauge\nmzcache_footprint_bytes %zu\n", s->footprint);
    if (s->p.mem_budget_bytes)
        P("# HELP mzcache_budget_bytes --mem-budget.\n# TYPE mzcache_budget_bytes gauge\nmzcache_budget_bytes %zu\n",
          s->p.mem_budget_bytes);
    P("# HELP mzcache_budget_evictions_total Evictions made to keep the memory budget.\n"
      "# TYPE mzcache_budget_evictions_total counter\nmzcache_budget_evictions_total %zu\n"
      "# HELP mzcache_budget_evicted_bytes_total Bytes freed to keep the memory budget.\n"
      "# TYPE mzcache_budget_evicted_bytes_total counter\nmzcache_budget_evicted_bytes_total %zu\n",
      s->n_budget_evictions, s->budget_evicted_bytes);
    P("# HELP mzcache_session_tokens Tokens in a session's context.\n# TYPE mzcache_session_tokens gauge\n");
    for (int i = 0; i < s->n_snap_sess; i++)
        P("mzcache_session_tokens{session=\"%s\"} %zu\n", s->snap_sess[i].id, s->snap_sess[i].n_tokens);
    P("# HELP mzcache_session_kv_bytes A session's KV by state.\n# TYPE mzcache_session_kv_bytes gauge\n");
    for (int i = 0; i < s->n_snap_sess; i++) {
        const srv_session_snap *ss = &s->snap_sess[i];
        P("mzcache_session_kv_bytes{session=\"%s\",state=\"resident\"} %zu\n", ss->id, ss->kv.resident_bytes);
        P("mzcache_session_kv_bytes{session=\"%s\",state=\"compressed\"} %zu\n", ss->id, ss->kv.compressed_bytes);
        P("mzcache_session_kv_bytes{session=\"%s\",state=\"stored\"} %zu\n", ss->id, ss->kv.stored_bytes);
    }
    P("# HELP mzcache_session_kv_out_of_window_bytes A session's KV out of the sliding window (part of "
      "mzcache_session_kv_bytes).\n# TYPE mzcache_session_kv_out_of_window_bytes gauge\n");
    for (int i = 0; i < s->n_snap_sess; i++) {
        const srv_session_snap *ss = &s->snap_sess[i];
        P("mzcache_session_kv_out_of_window_bytes{session=\"%s\",state=\"total\"} %zu\n", ss->id,
          ss->kv_out_of_window.total_bytes);
        P("mzcache_session_kv_out_of_window_bytes{session=\"%s\",state=\"resident\"} %zu\n", ss->id,
          ss->kv_out_of_window.resident_bytes);
    }
    P("# HELP mzcache_session_last_use_timestamp_seconds Last use of a session (Unix time).\n"
      "# TYPE mzcache_session_last_use_timestamp_seconds gauge\n");
    for (int i = 0; i < s->n_snap_sess; i++)
        P("mzcache_session_last_use_timestamp_seconds{session=\"%s\"} %.3f\n", s->snap_sess[i].id,
          s->snap_sess[i].last_use_unix);
    P("# HELP mzcache_session_last_ttft_seconds Time to first token of a session's last request.\n"
      "# TYPE mzcache_session_last_ttft_seconds gauge\n");
    for (int i = 0; i < s->n_snap_sess; i++)
        if (s->snap_sess[i].last_ttft_ms >= 0)
            P("mzcache_session_last_ttft_seconds{session=\"%s\"} %.6f\n", s->snap_sess[i].id,
              s->snap_sess[i].last_ttft_ms / 1e3);
    pthread_mutex_unlock(&s->snap_mu);
    P("# HELP process_resident_memory_bytes Resident set size.\n# TYPE process_resident_memory_bytes gauge\n"
      "process_resident_memory_bytes %zu\n", rss_bytes());
#undef P
    enum MHD_Result r = srv_respond(s, c, 200, "text/plain; version=0.0.4; charset=utf-8", buf, len, NULL, NULL);
    free(buf);
    return r;
}

static cJSON *model_object(const mz_server_t *s)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->created_unix);
    cJSON_AddStringToObject(m, "owned_by", "mzcache");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddStringToObject(meta, "arch", s->info.arch);
    cJSON_AddStringToObject(meta, "weight_type", s->info.weight_type);
    cJSON_AddNumberToObject(meta, "n_params", (double)s->info.n_params);
    cJSON_AddNumberToObject(meta, "n_ctx", (double)s->n_ctx);
    cJSON_AddNumberToObject(meta, "n_ctx_train", s->info.n_ctx_train);
    return m;
}

/* GET /v1/models: the list of one; GET /v1/models/ID: that model ("default"
 * names it too) or 404. */
enum MHD_Result srv_handle_models(mz_server_t *s, struct MHD_Connection *c, const srv_request *rq)
{
    if (rq->model_given) {
        if (strcmp(rq->model, s->model_id) && strcmp(rq->model, "default"))
            return srv_error(s, c, 404, "not_found", "model not found (GET /v1/models lists the one this server has)");
        return srv_respond_json(s, c, 200, model_object(s));
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    cJSON_AddItemToArray(data, model_object(s));
    return srv_respond_json(s, c, 200, root);
}

/* Body: {"bytes": N} | {"percent": P} | {"all": true}. */
enum MHD_Result srv_handle_evict(mz_server_t *s, struct MHD_Connection *c, const srv_request *rq)
{
    srv_evict_req er;
    const char *bad = srv_parse_evict(rq->body, rq->len, &er);
    const bool all = er.all;
    const double pct = er.pct;
    if (bad) return srv_error(s, c, 400, "invalid_request_error", "%s", bad);
    if (srv_gate_enter(s, true, NULL)) return srv_error(s, c, 503, "unavailable", "server is shutting down");
    mz_mem_stats st;
    srv_mem_stats(s, &st);
    size_t n = srv_evict_amount(&er, srv_evictable_total(&st));
    srv_event ev = {.t_unix = srv_unix_now()};
    snprintf(ev.trigger, sizeof ev.trigger, "api");
    if (all) snprintf(ev.what, sizeof ev.what, "all");
    else if (er.by_pct) snprintf(ev.what, sizeof ev.what, "%.1f%%", pct);
    else snprintf(ev.what, sizeof ev.what, "%zu bytes", n);
    mz_evict_report rep = {0};
    mz_status rc = n ? srv_evict_event(s, n, &ev, &rep) : MZ_OK;
    if (!n) ev.remaining_pct = st.remaining_pct;
    mz_mem_stats after;
    srv_mem_stats(s, &after);
    size_t ctx_tokens = s->ctx ? mz_ctx_n_tokens(s->ctx) : 0;
    pthread_mutex_lock(&s->snap_mu);
    s->n_evictions[1]++;
    s->evicted_bytes[1] += rep.bytes_freed;
    pthread_mutex_unlock(&s->snap_mu);
    srv_gate_leave(s);
    srv_record_event(s, &ev);
    srv_log(s, "api evict %s: freed %.1f MiB in %.1f ms; remaining %.1f%%", ev.what,
            (double)rep.bytes_freed / 1048576.0, rep.time_ms, ev.remaining_pct);
    if (rc) return srv_error(s, c, 500, "server_error", "eviction failed part way (%s); the conversation is intact",
                             mz_status_str(rc));
    cJSON *out = cJSON_CreateObject();
    cJSON_AddNumberToObject(out, "requested_bytes", all ? -1.0 : (double)n);
    cJSON_AddNumberToObject(out, "freed_bytes", (double)rep.bytes_freed);
    cJSON_AddBoolToObject(out, "complete", all || rep.complete || !n);
    cJSON_AddNumberToObject(out, "ms", rep.time_ms);
    cJSON_AddNumberToObject(out, "kv_compressed", (double)rep.n_kv_compressed);
    cJSON_AddNumberToObject(out, "kv_stored_raw", (double)rep.n_kv_stored_raw);
    cJSON_AddNumberToObject(out, "kv_stored_compressed", (double)rep.n_kv_stored_compressed);
    cJSON_AddNumberToObject(out, "kv_compkv", (double)rep.n_kv_compkv);
    cJSON_AddNumberToObject(out, "weights_dropped", (double)rep.n_weights_dropped);
    cJSON_AddItemToObject(out, "memory", stats_json(&after, ctx_tokens, (int)s->n_ctx));
    return srv_respond_json(s, c, 200, out);
}

enum MHD_Result srv_handle_restore(mz_server_t *s, struct MHD_Connection *c)
{
    if (srv_gate_enter(s, true, NULL)) return srv_error(s, c, 503, "unavailable", "server is shutting down");
    mz_restore_report rep = {0};
    mz_status rc = srv_restore_sessions(s, false, &rep, NULL);
    mz_mem_stats after;
    srv_mem_stats(s, &after);
    size_t ctx_tokens = s->ctx ? mz_ctx_n_tokens(s->ctx) : 0;
    srv_gate_leave(s);
    srv_log(s, "api restore: %.1f MiB in %.1f ms; remaining %.1f%%", (double)rep.bytes_restored / 1048576.0,
            rep.time_ms, after.remaining_pct);
    if (rc) return srv_error(s, c, 500, "server_error", "restore failed (%s); evicted parts stay evicted and intact",
                             mz_status_str(rc));
    cJSON *out = cJSON_CreateObject();
    cJSON_AddNumberToObject(out, "restored_bytes", (double)rep.bytes_restored);
    cJSON_AddNumberToObject(out, "ms", rep.time_ms);
    cJSON_AddItemToObject(out, "memory", stats_json(&after, ctx_tokens, (int)s->n_ctx));
    return srv_respond_json(s, c, 200, out);
}
