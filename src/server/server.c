/*
 * server.c — the daemon's frame: start and stop (with the drain of
 * admitted requests), the MHD access handler (limits, authentication,
 * routing of a URL to its endpoint) and the dispatch to the handlers:
 * completion.c (completions), control.c (/mz/..., /metrics, /v1/models),
 * relief.c (the pressure monitor's callback), gate.c (the engine gate),
 * sessions.c (which session a request goes to), respond.c (responses).
 *
 * Hardening (issue 10; docs/RELIABILITY.md): loopback by default; the API
 * key compared in constant time (request.c, with the body parsers); bodies
 * over max_body_bytes refused with 413 before they are read when
 * Content-Length says so, and discarded otherwise; idle
 * connections closed after conn_timeout_s; error messages name no file and
 * carry no secret (engine messages, which may name the swap file, go to the
 * log only).
 */
#include "server/server_impl.h"
#include "server/request.h"

#include "core/core.h"
#include "io/swapfile.h"

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

static bool authorized(const mz_server_t *s, struct MHD_Connection *c)
{
    if (!s->api_key) return true;
    const char *h = srv_bearer_token(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"));
    if (!h) h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-API-Key");
    return h && srv_key_matches(s->api_key, s->api_key_len, h);
}

/* ---- the access handler ------------------------------------------------------------------------- */

static srv_endpoint route(const char *url, const char *method, bool *method_ok, srv_request *rq)
{
    if (!strncmp(url, "/mz/sessions/", 13)) {
        *method_ok = !strcmp(method, "DELETE");
        /* Checked by the handler: an over-long or odd id becomes "" (400). */
        if (strlen(url + 13) < sizeof rq->session) snprintf(rq->session, sizeof rq->session, "%s", url + 13);
        return EP_SESSION_DELETE;
    }
    static const struct { const char *url, *method; srv_endpoint ep; } routes[] = {
        {"/health", "GET", EP_HEALTH},          {"/v1/models", "GET", EP_MODELS},
        {"/v1/chat/completions", "POST", EP_CHAT}, {"/v1/completions", "POST", EP_COMPLETIONS},
        {"/mz/evict", "POST", EP_EVICT},        {"/mz/restore", "POST", EP_RESTORE},
        {"/mz/status", "GET", EP_STATUS},       {"/metrics", "GET", EP_METRICS},
        {"/mz/sessions", "GET", EP_SESSIONS},
    };
    /* GET /v1/models/ID (the openai client's models.retrieve): the handler
     * answers the one model or 404. */
    if (!strncmp(url, "/v1/models/", 11)) {
        *method_ok = !strcmp(method, "GET") || !strcmp(method, "HEAD");
        snprintf(rq->model, sizeof rq->model, "%s", url + 11);
        rq->model_given = true;
        return EP_MODELS;
    }
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (!strcmp(url, routes[i].url)) {
            /* HEAD wherever GET is (MHD sends the headers only). */
            *method_ok = !strcmp(method, routes[i].method) ||
                         (!strcmp(routes[i].method, "GET") && !strcmp(method, "HEAD"));
            return routes[i].ep;
        }
    }
    *method_ok = true;
    return EP_OTHER;
}

static enum MHD_Result dispatch(mz_server_t *s, struct MHD_Connection *c, srv_request *rq);

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    mz_server_t *s = cls;
    srv_request *rq = *con_cls;
    (void)version;
    if (!rq) {
        rq = calloc(1, sizeof *rq);
        if (!rq) return MHD_NO;
        *con_cls = rq;
        bool method_ok;
        rq->ep = route(url, method, &method_ok, rq);
        pthread_mutex_lock(&s->snap_mu);
        s->n_requests[rq->ep]++;
        pthread_mutex_unlock(&s->snap_mu);
        if (s->p.verbose) srv_log(s, "%s %s", method, rq->ep == EP_OTHER ? "(unknown path)" : url);
        /* Everything that can be decided from the headers is decided now,
         * before any body is read. */
        /* Shutting down: admit nothing new; count what is admitted, so the
         * drain knows when every admitted request has been answered. */
        pthread_mutex_lock(&s->mu);
        bool draining = s->draining;
        if (!draining) {
            s->n_inflight++;
            rq->inflight = true;
        }
        pthread_mutex_unlock(&s->mu);
        if (draining) {
            rq->answered = true;
            return srv_error(s, c, 503, "unavailable", "server is shutting down");
        }
        if (rq->ep == EP_OTHER) {
            rq->answered = true;
            return srv_error(s, c, 404, "not_found", "no such endpoint");
        }
        if (!method_ok) {
            rq->answered = true;
            return srv_error(s, c, 405, "method_not_allowed", "method not allowed on this endpoint");
        }
        if (rq->ep != EP_HEALTH && !authorized(s, c)) {
            rq->answered = true;
            return srv_error(s, c, 401, "authentication_error", "missing or wrong API key");
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && !srv_content_length_ok(cl, s->p.max_body_bytes, NULL)) {
            rq->answered = true;
            return srv_error(s, c, 413, "invalid_request_error", "request body too large (limit %zu bytes)",
                             s->p.max_body_bytes);
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (rq->answered || rq->too_big) return MHD_YES;
        if (rq->len + n > s->p.max_body_bytes) {
            rq->too_big = true; /* keep reading (and dropping) until the end, then say 413 */
            free(rq->body);
            rq->body = NULL;
            rq->len = rq->cap = 0;
            return MHD_YES;
        }
        return srv_bytes_append(&rq->body, &rq->len, &rq->cap, 4096, upload_data, n) ? MHD_YES : MHD_NO;
    }
    if (rq->answered) return MHD_YES;
    rq->answered = true;
    if (rq->too_big)
        return srv_error(s, c, 413, "invalid_request_error", "request body too large (limit %zu bytes)",
                         s->p.max_body_bytes);
    /* A handler computes until its response is queued (a stream: until its
     * prefill is done); the drain waits for that without a time limit. */
    pthread_mutex_lock(&s->mu);
    s->n_handling++;
    pthread_mutex_unlock(&s->mu);
    enum MHD_Result ret = dispatch(s, c, rq);
    pthread_mutex_lock(&s->mu);
    s->n_handling--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return ret;
}

static enum MHD_Result dispatch(mz_server_t *s, struct MHD_Connection *c, srv_request *rq)
{
    switch (rq->ep) {
    case EP_HEALTH:
        return srv_respond(s, c, 200, "application/json", "{\"status\":\"ok\"}", 15, NULL, NULL);
    case EP_MODELS: return srv_handle_models(s, c, rq);
    case EP_CHAT: return srv_handle_completion(s, c, rq, true);
    case EP_COMPLETIONS: return srv_handle_completion(s, c, rq, false);
    case EP_EVICT: return srv_handle_evict(s, c, rq);
    case EP_RESTORE: return srv_handle_restore(s, c);
    case EP_STATUS: return srv_handle_status(s, c);
    case EP_METRICS: return srv_handle_metrics(s, c);
    case EP_SESSIONS: return srv_handle_sessions(s, c);
    case EP_SESSION_DELETE: return srv_handle_session_delete(s, c, rq);
    default: return srv_error(s, c, 404, "not_found", "no such endpoint");
    }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    mz_server_t *s = cls;
    (void)c;
    (void)toe;
    srv_request *rq = *con_cls;
    if (!rq) return;
    if (rq->inflight) {
        pthread_mutex_lock(&s->mu);
        s->n_inflight--;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    free(rq->body);
    free(rq);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    mz_server_t *s = cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    msg[strcspn(msg, "\n")] = '\0';
    if (s->p.verbose) srv_log(s, "http: %s", msg);
}

/* ---- start / stop ----------------------------------------------------------------------------------- */

mz_server_params mz_server_params_default(void)
{
    mz_server_params p;
    memset(&p, 0, sizeof p);
    p.host = "127.0.0.1";
    p.port = 8080;
    p.n_ctx = 4096;
    p.sampler = mz_sampler_params_default();
    p.default_max_tokens = 256;
    p.max_tokens_limit = 4096;
    p.max_body_bytes = 1u << 20;
    p.conn_timeout_s = 30;
    p.max_connections = 256;
    p.max_queue = 128;
    p.queue_timeout_ms = 120000;
    p.pressure = true;
    p.pressure_params = mz_pressure_params_default();
    p.evict_step_pct = 2.0;
    p.pressure_min_level = MZ_PRESSURE_MEDIUM;
    p.pressure_interval_ms = 1000;
    p.restore_ahead = true;
    p.restore_ahead_quiet_ms = 1000;
    p.max_sessions = 4;
    p.store_limit_bytes = (uint64_t)2 << 30; /* anonymous conversations are stored too */
    p.shutdown_grace_ms = 30000;
    return p;
}

static void model_id_from_path(const char *path, char *out, size_t cap)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".gguf")) n -= 5;
    if (n >= cap) n = cap - 1;
    memcpy(out, base, n);
    out[n] = '\0';
}

const mz_pressure_monitor_t *mz_server_monitor(const mz_server_t *s) { return s ? s->mon : NULL; }
int mz_server_port(const mz_server_t *s) { return s ? s->port : 0; }

mz_status mz_server_start(const mz_server_params *p, mz_server_t **out)
{
    *out = NULL;
    if (!p || !p->model_path) return mz_fail(MZ_E_INVAL, "serve: no model");
    mz_server_t *s = calloc(1, sizeof *s);
    if (!s) return mz_fail(MZ_E_NOMEM, "serve: out of memory");
    s->p = *p;
    mz_server_params d = mz_server_params_default();
    if (!s->p.host || !*s->p.host) s->p.host = d.host;
    if (s->p.default_max_tokens <= 0) s->p.default_max_tokens = d.default_max_tokens;
    if (s->p.max_tokens_limit <= 0) s->p.max_tokens_limit = d.max_tokens_limit;
    if (!s->p.max_body_bytes) s->p.max_body_bytes = d.max_body_bytes;
    if (s->p.conn_timeout_s <= 0) s->p.conn_timeout_s = d.conn_timeout_s;
    if (s->p.max_connections <= 0) s->p.max_connections = d.max_connections;
    if (s->p.max_queue < 0) s->p.max_queue = 0;
    if (s->p.queue_timeout_ms <= 0) s->p.queue_timeout_ms = d.queue_timeout_ms;
    if (s->p.pressure_interval_ms < 0) s->p.pressure_interval_ms = 0;
    if (s->p.max_sessions <= 0) s->p.max_sessions = d.max_sessions;
    if (s->p.max_sessions > SRV_MAX_SESSIONS) s->p.max_sessions = SRV_MAX_SESSIONS;
    if (s->p.shutdown_grace_ms < 0) s->p.shutdown_grace_ms = 0;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_init(&s->snap_mu, NULL);
    s->created_unix = (long)srv_unix_now();
    mz_status st = MZ_OK;
    if (s->p.api_key && *s->p.api_key) {
        s->api_key = strdup(s->p.api_key);
        if (!s->api_key) { st = mz_fail(MZ_E_NOMEM, "serve: out of memory"); goto out_free; }
        s->api_key_len = strlen(s->api_key);
        s->p.api_key = NULL; /* only our copy, which is wiped at stop */
    }
    if (s->p.model_alias && *s->p.model_alias) snprintf(s->model_id, sizeof s->model_id, "%s", s->p.model_alias);
    else model_id_from_path(s->p.model_path, s->model_id, sizeof s->model_id);

    {
        /* A daemon killed with SIGKILL (or by the OOM killer) leaves its swap
         * file behind. Its records are meaningless to any other process (a
         * new swap file always gets a fresh name, so none is ever read), but
         * the space and the conversation data in it are not: remove files
         * whose process is gone and whose lock nobody holds. */
        int n_stale = 0;
        if (mz_swapfile_cleanup_stale(s->p.swap_dir, &n_stale) != MZ_OK)
            srv_log(s, "could not look for stale swap files: %s", mz_last_error());
        else if (n_stale)
            srv_log(s, "removed %d stale swap file%s left by a process that died", n_stale, n_stale > 1 ? "s" : "");
    }
    mz_model_params mp = mz_model_params_default();
    mp.n_threads = s->p.n_threads;
    mp.chat_template = s->p.chat_template;
    if ((st = mz_model_load(s->p.model_path, &mp, &s->model))) goto out_free;
    mz_model_get_info(s->model, &s->info);
    /* The engine is made here, once: the weights stay loaded without any
     * session, and the device profile is read once for every session. */
    mz_engine_params ep = mz_engine_params_default();
    ep.n_threads = s->p.n_threads;
    ep.swap_dir = s->p.swap_dir;
    ep.mem_budget_bytes = s->p.mem_budget_bytes; /* the engine keeps it (srv_enforce_budget asks) */
    if ((st = mz_engine_create(s->model, &ep, &s->engine))) goto out_free;
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = s->p.n_ctx;
    cp.n_threads = s->p.n_threads;
    if (s->p.n_batch > 0) cp.n_batch = s->p.n_batch;
    cp.kv_codec = s->p.kv_codec;
    cp.swap_dir = s->p.swap_dir;
    cp.kv_placement = s->p.kv_placement;
    cp.mode = s->p.mode;
    s->ctx_params = cp;
    /* The store first: the first session's anonymous id comes after every
     * stored one (ids are unique among the engine's sessions). */
    if (s->p.store && s->p.mode != MZ_MODE_MZCACHE) {
        srv_log(s, "store: off (--mode %s sessions are not stored; only mzcache mode)", mz_engine_mode_name(s->p.mode));
    } else if (s->p.store && (st = srv_store_open(s))) {
        goto out_free;
    }
    if ((st = srv_sessions_init(s))) goto out_free;
    srv_sessions_snapshot(s);

    /* Bind address: numeric or a name; loopback unless told otherwise. */
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", s->p.port);
    int gai = getaddrinfo(s->p.host, port_s, &hints, &ai);
    if (gai || !ai) {
        st = mz_fail(MZ_E_INVAL, "serve: cannot resolve host '%s': %s", s->p.host, gai_strerror(gai));
        goto out_free;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                     MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->mhd = MHD_start_daemon(flags, (uint16_t)s->p.port, NULL, NULL, on_request, s,
                              MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                              MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)s->p.conn_timeout_s,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned int)s->p.max_connections,
                              MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
                              MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                              MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->mhd) {
        st = mz_fail(MZ_E_IO, "serve: cannot listen on %s:%d (in use, or not permitted)", s->p.host, s->p.port);
        goto out_free;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->p.port;

    if (s->p.pressure) {
        if ((st = mz_pressure_start(&s->p.pressure_params, srv_on_pressure, s, &s->mon))) goto out_free;
        char desc[1024];
        mz_pressure_describe(s->mon, desc, sizeof desc);
        srv_log(s, "pressure monitor: %d of %d interfaces active", mz_pressure_n_active(s->mon), MZ_PRESSURE_N_SOURCES);
        for (char *save = NULL, *line = strtok_r(desc, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
            srv_log(s, "  %s", line);
        const mz_esize_params *sz = &s->p.pressure_params.size;
        if (sz->headroom_bytes)
            srv_log(s, "  eviction target: %.1f MiB below the cgroup limit (--pressure-headroom)",
                    (double)sz->headroom_bytes / 1048576.0);
        else
            srv_log(s, "  eviction target: %.4g%% of the cgroup limit below it (--pressure-headroom)", sz->headroom_pct);
        if (!mz_pressure_n_active(s->mon))
            srv_log(s, "no pressure interface usable: serving anyway; evict with POST /mz/evict or `mzcache evict`");
    } else {
        srv_log(s, "pressure monitor: disabled");
    }
    if (s->p.mem_budget_bytes)
        srv_log(s, "memory budget %.1f MiB (weights + KV + compressed stacks; now %.1f MiB)",
                (double)s->p.mem_budget_bytes / 1048576.0, (double)s->footprint / 1048576.0);
    srv_log(s, "serving %s on %s:%d (context %zu tokens, up to %d sessions, %s)%s", s->model_id, s->p.host, s->port,
            s->n_ctx, s->p.max_sessions, s->api_key ? "API key required" : "no API key",
            strcmp(s->p.host, "127.0.0.1") && strcmp(s->p.host, "::1") && strcmp(s->p.host, "localhost")
                ? " -- WARNING: not loopback; anyone who can reach this address can use it"
                : "");
    *out = s;
    return MZ_OK;
out_free:
    mz_server_stop(s);
    return st;
}

/* Waits until no admitted request is left or deadline (CLOCK_REALTIME);
 * true when none is left. Caller holds mu. */
static bool wait_drained(mz_server_t *s, const struct timespec *dl)
{
    while (s->n_inflight > 0)
        if (pthread_cond_timedwait(&s->cv, &s->mu, dl) == ETIMEDOUT) break;
    return s->n_inflight == 0;
}

bool srv_cut_short(mz_server_t *s) { return atomic_load(&s->cut); }

/* Lets admitted requests finish (new ones get 503 from on_request). */
static void drain(mz_server_t *s)
{
    pthread_mutex_lock(&s->mu);
    s->draining = true;
    int n = s->n_inflight;
    pthread_mutex_unlock(&s->mu);
    if (n == 0) return;
    srv_log(s, "shutdown: waiting up to %.1f s for %d running request%s; new ones get 503",
            s->p.shutdown_grace_ms / 1e3, n, n > 1 ? "s" : "");
    struct timespec dl = srv_deadline_in(s->p.shutdown_grace_ms);
    pthread_mutex_lock(&s->mu);
    bool done = wait_drained(s, &dl);
    pthread_mutex_unlock(&s->mu);
    if (done) return;
    /* Grace over: running generations end at their next token (their
     * answer goes out complete, finish_reason "length"), queued ones get 503. */
    atomic_store(&s->cut, true);
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->cv);
    n = s->n_inflight;
    pthread_mutex_unlock(&s->mu);
    srv_log(s, "shutdown: grace period over; ending %d request%s now", n, n > 1 ? "s" : "");
    /* Handlers still computing (a prefill cannot stop half way) finish their
     * step, however long it takes, and queue their answer; then clients get
     * 5 s to read what is left (a stream that is not read never ends). */
    pthread_mutex_lock(&s->mu);
    while (s->n_handling > 0) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    dl = srv_deadline_in(5000);
    pthread_mutex_lock(&s->mu);
    done = wait_drained(s, &dl);
    n = s->n_inflight;
    pthread_mutex_unlock(&s->mu);
    if (!done) srv_log(s, "shutdown: %d request%s still open (slow clients); closing them", n, n > 1 ? "s" : "");
}

void mz_server_stop(mz_server_t *s)
{
    if (!s) return;
    if (s->mhd) {
        drain(s);
        MHD_stop_daemon(s->mhd); /* closes what is left and joins the connection threads */
        s->mhd = NULL;
    }
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    mz_pressure_stop(s->mon);
    srv_sessions_free(s);
    srv_store_close(s);
    mz_engine_free(s->engine);
    mz_model_free(s->model);
    if (s->api_key) {
        volatile char *k = s->api_key;
        for (size_t i = 0; i < s->api_key_len; i++) k[i] = 0;
        free(s->api_key);
    }
    pthread_mutex_destroy(&s->snap_mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

