/*
 * server.c — the daemon: start/stop, the engine gate, routing, limits and
 * authentication, the control endpoints (/mz/..., /metrics, /health,
 * /v1/models) and the pressure → eviction path.
 *
 * Divisions, in reading order:
 *   1. small helpers (clock, log, responses)
 *   2. the engine gate and the snapshot
 *   3. eviction (shared by /mz/evict and the pressure monitor)
 *   4. control endpoints
 *   5. the MHD access handler (limits, auth, routing)
 *   6. start / stop
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
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- 1. helpers ------------------------------------------------------------------- */

double srv_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

double srv_unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void srv_iso8601(double t_unix, char *out, size_t cap)
{
    time_t sec = (time_t)t_unix;
    struct tm tm;
    gmtime_r(&sec, &tm);
    size_t n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    int ms = (int)((t_unix - (double)sec) * 1000.0);
    if (n && n < cap) snprintf(out + n, cap - n, ".%03dZ", ms < 0 ? 0 : ms > 999 ? 999 : ms);
}

void srv_log(mz_server_t *s, const char *fmt, ...)
{
    char line[1024];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ mzcache: ", ts.tv_nsec / 1000000);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    FILE *f = s->p.log ? s->p.log : stderr;
    fprintf(f, "%s\n", line);
    fflush(f);
}

void srv_count_response(mz_server_t *s, int status)
{
    pthread_mutex_lock(&s->snap_mu);
    if (status >= 100 && status < 600) s->n_responses[status / 100]++;
    if (status == 429) s->n_429++;
    pthread_mutex_unlock(&s->snap_mu);
}

enum MHD_Result srv_respond(mz_server_t *s, struct MHD_Connection *c, int status, const char *ctype,
                            const char *body, size_t len, const char *hname, const char *hval)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)(uintptr_t)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    if (hname && hval) MHD_add_response_header(r, hname, hval);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    srv_count_response(s, status);
    return ret;
}

enum MHD_Result srv_respond_json(mz_server_t *s, struct MHD_Connection *c, int status, cJSON *obj)
{
    char *txt = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    if (!txt) return srv_respond(s, c, 500, "application/json", "{\"error\":{\"message\":\"out of memory\"}}", 37, NULL, NULL);
    enum MHD_Result r = srv_respond(s, c, status, "application/json", txt, strlen(txt), NULL, NULL);
    cJSON_free(txt);
    return r;
}

enum MHD_Result srv_error(mz_server_t *s, struct MHD_Connection *c, int status, const char *type,
                          const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *root = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(err, "message", msg);
    cJSON_AddStringToObject(err, "type", type);
    cJSON_AddNumberToObject(err, "code", status);
    if (s->p.verbose || status >= 500) srv_log(s, "HTTP %d: %s", status, msg);
    if (status == 409 || status == 429 || status == 503) {
        char *txt = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        enum MHD_Result r = srv_respond(s, c, status, "application/json", txt ? txt : "{}",
                                        txt ? strlen(txt) : 2, "Retry-After", "1");
        cJSON_free(txt);
        return r;
    }
    if (status == 401) {
        char *txt = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        enum MHD_Result r = srv_respond(s, c, status, "application/json", txt ? txt : "{}",
                                        txt ? strlen(txt) : 2, "WWW-Authenticate", "Bearer");
        cJSON_free(txt);
        return r;
    }
    return srv_respond_json(s, c, status, root);
}

static bool authorized(const mz_server_t *s, struct MHD_Connection *c)
{
    if (!s->api_key) return true;
    const char *h = srv_bearer_token(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"));
    if (!h) h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-API-Key");
    return h && srv_key_matches(s->api_key, s->api_key_len, h);
}

static size_t rss_bytes(void)
{
    unsigned long long size = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "re");
    if (!f) return 0;
    if (fscanf(f, "%llu %llu", &size, &res) != 2) res = 0;
    fclose(f);
    return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

/* ---- 2. gate and snapshot ------------------------------------------------------------- */

bool srv_client_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = c ? MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD) : NULL;
    if (!ci) return false;
    struct pollfd pfd = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pfd, 1, 0) <= 0) return false;
    if (pfd.revents & (POLLHUP | POLLERR | POLLRDHUP)) return true;
    /* Readable: a pipelined request is data; end of stream is a close. */
    char b;
    return recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

int srv_gate_enter(mz_server_t *s, bool priority, double *wait_ms)
{
    return srv_gate_enter_for(s, priority, NULL, wait_ms);
}

int srv_gate_enter_for(mz_server_t *s, bool priority, struct MHD_Connection *client, double *wait_ms)
{
    double t0 = srv_now_ms();
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    if (priority) {
        s->n_priority_waiting++;
        while (s->busy && !s->stopping) pthread_cond_wait(&s->cv, &s->mu);
        s->n_priority_waiting--;
        if (s->stopping) rc = 503;
    } else {
        if ((s->busy || s->n_priority_waiting) && s->n_waiting >= s->p.max_queue) {
            rc = 429;
        } else {
            struct timespec dl;
            clock_gettime(CLOCK_REALTIME, &dl);
            long long ns = dl.tv_nsec + (long long)s->p.queue_timeout_ms * 1000000LL;
            dl.tv_sec += (time_t)(ns / 1000000000LL);
            dl.tv_nsec = (long)(ns % 1000000000LL);
            s->n_waiting++;
            while ((s->busy || s->n_priority_waiting) && !s->stopping && !rc && !srv_cut_short(s)) {
                /* With a client: wake every 200 ms to see whether it left. */
                struct timespec wake = dl;
                if (client) {
                    clock_gettime(CLOCK_REALTIME, &wake);
                    long long wn = wake.tv_nsec + 200000000LL;
                    wake.tv_sec += (time_t)(wn / 1000000000LL);
                    wake.tv_nsec = (long)(wn % 1000000000LL);
                    if (wake.tv_sec > dl.tv_sec || (wake.tv_sec == dl.tv_sec && wake.tv_nsec > dl.tv_nsec)) wake = dl;
                }
                if (pthread_cond_timedwait(&s->cv, &s->mu, &wake) == ETIMEDOUT) {
                    struct timespec now;
                    clock_gettime(CLOCK_REALTIME, &now);
                    if (now.tv_sec > dl.tv_sec || (now.tv_sec == dl.tv_sec && now.tv_nsec >= dl.tv_nsec)) rc = 503;
                }
                if (!rc && client && srv_client_gone(client)) rc = SRV_GATE_CLIENT_GONE;
            }
            s->n_waiting--;
            if ((s->stopping || srv_cut_short(s)) && rc != SRV_GATE_CLIENT_GONE) rc = 503;
        }
    }
    if (!rc) s->busy = true;
    pthread_mutex_unlock(&s->mu);
    if (wait_ms) *wait_ms = srv_now_ms() - t0;
    return rc;
}

/* Caller owns the engine. */
static void refresh_snapshot(mz_server_t *s) { srv_sessions_snapshot(s); }

void srv_gate_leave(mz_server_t *s)
{
    /* The budget is checked after every use of the engine: a request that
     * brought its session back, a restore, a new session. */
    srv_enforce_budget(s);
    s->cur = -1;
    pthread_mutex_lock(&s->snap_mu);
    s->active_id[0] = '\0';
    pthread_mutex_unlock(&s->snap_mu);
    refresh_snapshot(s);
    pthread_mutex_lock(&s->mu);
    s->busy = false;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void record_event(mz_server_t *s, const srv_event *ev)
{
    pthread_mutex_lock(&s->snap_mu);
    s->events[s->n_events % SRV_N_EVENTS] = *ev;
    s->n_events++;
    pthread_mutex_unlock(&s->snap_mu);
}

/* ---- 3. eviction ------------------------------------------------------------------------ */

static size_t evictable_total(const mz_mem_stats *st)
{
    return st->weights.total_bytes + st->kv.total_bytes;
}

static size_t evictable_held(const mz_mem_stats *st)
{
    return st->weights.resident_bytes + st->weights.compressed_bytes + st->kv.resident_bytes +
           st->kv.compressed_bytes;
}

/* Caller owns the engine. Evicts nbytes (SIZE_MAX: all) over the sessions,
 * least recently used first; fills ev. */
static mz_status do_evict(mz_server_t *s, size_t nbytes, srv_event *ev, mz_evict_report *rep)
{
    mz_status st = srv_evict_sessions(s, nbytes, rep);
#ifdef __GLIBC__
    /* The heap memory the requests, restores and evictions freed goes back
     * too: glibc gives back only the top of its main heap and of each
     * per-thread arena, and only above its trim threshold (which it raises
     * whenever a chunk it had mmapped is freed), so the pages of freed
     * chunks stay resident: the daemon's RSS with everything evicted rose
     * 60 -> 77 MiB over evict / restore / question cycles of a 2.9k-token
     * SmolLM2 conversation, two arenas holding 13 and 14 MB of free chunks.
     * malloc_trim returns the free pages of every arena (1-3 ms). */
    malloc_trim(0);
#endif
    mz_mem_stats after;
    srv_mem_stats(s, &after);
    ev->requested = nbytes;
    ev->freed = rep->bytes_freed;
    ev->remaining_pct = after.remaining_pct;
    ev->ms = rep->time_ms;
    return st;
}

/* The gate if nobody holds it or waits for it, else 1 (the monitor thread
 * must not queue behind requests: signals would wait with it). */
static int gate_try_enter(mz_server_t *s)
{
    int rc = 1;
    pthread_mutex_lock(&s->mu);
    if (!s->busy && !s->stopping && !s->n_waiting && !s->n_priority_waiting) {
        s->busy = true;
        rc = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* A relief check (mz_pressure_want_relief, asked after every pressure
 * eviction): what pressure took is restored before the next request needs it
 * once all of it fits below the cgroup's target (mz_esize_room) and no signal
 * has asked for bytes for restore_ahead_quiet_ms. All or nothing (mz_restore
 * brings a context back whole; the pipelined restore of a request, with no
 * tokens to prefill): a partial fit waits; a request in flight or
 * waiting goes first (it restores what it needs itself). While the restore
 * runs, signals wait on this thread (the kernel coalesces them). */
static void on_relief(mz_server_t *s, const mz_pressure_event *pe)
{
    double now = srv_now_ms();
    pthread_mutex_lock(&s->snap_mu);
    bool quiet = now - s->last_squeeze_ms >= (double)s->p.restore_ahead_quiet_ms;
    pthread_mutex_unlock(&s->snap_mu);
    if (!quiet) return;
    mz_psig sig;
    mz_pressure_read_signal(pe->monitor, pe, &sig);
    if (gate_try_enter(s)) return;
    mz_mem_stats st;
    srv_mem_stats(s, &st);
    size_t back = evictable_total(&st) - st.weights.resident_bytes - st.kv.resident_bytes;
    if (back == 0) {
        mz_pressure_want_relief(pe->monitor, false);
        srv_gate_leave(s);
        return;
    }
    /* What the restore adds: the evicted units' resident size less the
     * compressed stack it pops (its segments are unmapped as they empty). */
    size_t in_stack = st.weights.compressed_bytes + st.kv.compressed_bytes;
    size_t grow = back > in_stack ? back - in_stack : 0;
    if (s->p.mem_budget_bytes && srv_footprint(s) + grow > s->p.mem_budget_bytes) {
        /* The memory budget holds the rest (srv_enforce_budget would evict it
         * again at once): pressure has nothing left to give back. */
        mz_pressure_want_relief(pe->monitor, false);
        srv_gate_leave(s);
        return;
    }
    mz_esize_out o;
    if (!mz_esize_room(mz_pressure_esize_params(pe->monitor), &sig, grow, &o)) {
        srv_gate_leave(s);
        if (s->p.verbose) srv_log(s, "relief: %s: not restoring yet", o.why);
        return;
    }
    mz_restore_report rep = {0};
    size_t n_sto = 0, n_mem = 0;
    mz_status rc = srv_restore_sessions_pipelined(s, &rep, &n_sto, &n_mem);
    mz_mem_stats after;
    srv_mem_stats(s, &after);
    pthread_mutex_lock(&s->snap_mu);
    s->n_restores_ahead++;
    s->restored_ahead_bytes += rep.bytes_restored;
    pthread_mutex_unlock(&s->snap_mu);
    srv_gate_leave(s);
    if (!rc && after.remaining_pct >= 100.0) mz_pressure_want_relief(pe->monitor, false);
    srv_log(s, "relief: %s -> restored %.1f MiB ahead in %.1f ms (%zu units from storage, %zu from memory); "
               "remaining %.1f%%%s",
            o.why, (double)rep.bytes_restored / 1048576.0, rep.time_ms, n_sto, n_mem, after.remaining_pct,
            rc ? " (failed part way; see above)" : "");
}

static void on_pressure(void *user, const mz_pressure_event *pe)
{
    /* How much to evict comes from src/pressure/evict_size.c: the cgroup's
     * need (usage above limit − headroom), or a small PSI step with back-off;
     * nothing once the signal has cleared. */
    mz_server_t *s = user;
    if (pe->relief) {
        on_relief(s, pe);
        return;
    }
    const char *src = mz_pressure_source_name(pe->source);
    double now = srv_now_ms();
    pthread_mutex_lock(&s->snap_mu);
    s->n_signals[pe->source]++;
    bool ignore_level = pe->level < s->p.pressure_min_level;
    if (ignore_level) s->n_ignored_level++;
    bool log_low = ignore_level && now - s->last_low_log_ms > 10000.0;
    if (log_low) s->last_low_log_ms = now;
    pthread_mutex_unlock(&s->snap_mu);
    if (ignore_level) {
        if (log_low)
            srv_log(s, "pressure %s (%s): below the action level, not evicting (counted; logged at most every 10 s)",
                    src, pe->what);
        return;
    }
    /* The cgroup figures are read before waiting for the gate: a request in
     * flight may finish first, and the need is re-read on the next signal. */
    mz_psig sig;
    mz_pressure_read_signal(pe->monitor, pe, &sig);
    if (srv_gate_enter(s, true, NULL)) return; /* shutting down */
    mz_mem_stats st;
    srv_mem_stats(s, &st);
    size_t total = evictable_total(&st), held = evictable_held(&st);
    double floor_b = fmax((double)s->p.evict_floor_bytes, (double)total * s->p.evict_floor_pct / 100.0);
    double allowed = (double)held - floor_b;
    double unit_w = st.weights.n_units ? (double)st.weights.total_bytes / (double)st.weights.n_units : 0;
    double unit_kv = st.kv.n_units ? (double)st.kv.total_bytes / (double)st.kv.n_units : 0;
    double unit_min = unit_w > 0 && unit_kv > 0 ? fmin(unit_w, unit_kv) : fmax(unit_w, unit_kv);
    /* Units are whole and mz_evict frees at least what it is asked: with a
     * floor, less than a unit above it is nothing to give. */
    if ((s->p.evict_floor_bytes || s->p.evict_floor_pct > 0) && allowed < unit_min) allowed = 0;
    mz_esize_params prm = *mz_pressure_esize_params(pe->monitor);
    if (s->p.evict_step_bytes) prm.psi_step_bytes = s->p.evict_step_bytes;
    else if (s->p.evict_step_pct > 0) prm.psi_step_pct = s->p.evict_step_pct;
    if (s->p.pressure_interval_ms > 0) prm.psi_backoff_ms = s->p.pressure_interval_ms;
    mz_esize_held h = {.held = allowed > 0 ? (uint64_t)allowed : 0, .total = total, .unit = (uint64_t)unit_min};
    mz_esize_out o;
    mz_esize(&prm, mz_pressure_esize_state(pe->monitor), &sig, &h, &o);
    if (o.need > 0 && o.basis != MZ_ESIZE_CLEAR && o.basis != MZ_ESIZE_BACKOFF) {
        pthread_mutex_lock(&s->snap_mu);
        s->last_squeeze_ms = srv_now_ms();
        pthread_mutex_unlock(&s->snap_mu);
    }
    srv_event ev = {.t_unix = srv_unix_now()};
    snprintf(ev.trigger, sizeof ev.trigger, "%s", src);
    snprintf(ev.what, sizeof ev.what, "%s", pe->what);
    if (o.bytes == 0) {
        bool empty = o.basis == MZ_ESIZE_EMPTY;
        pthread_mutex_lock(&s->snap_mu);
        if (empty) s->n_ignored_floor++;
        else s->n_ignored_interval++;
        bool first = empty && s->last_pressure_evict_ms >= 0; /* log once per floor episode */
        if (empty) s->last_pressure_evict_ms = -1;
        pthread_mutex_unlock(&s->snap_mu);
        srv_gate_leave(s);
        if (empty) {
            ev.at_floor = true;
            ev.remaining_pct = st.remaining_pct;
            record_event(s, &ev);
            if (first)
                srv_log(s, "pressure %s (%s): %s; at the floor (remaining %.1f%%), nothing more to give", src,
                        pe->what, o.why, st.remaining_pct);
        } else if (s->p.verbose) {
            srv_log(s, "pressure %s (%s): %s, not evicting", src, pe->what, o.why);
        }
        return;
    }
    mz_evict_report rep = {0};
    mz_status rc = do_evict(s, (size_t)o.bytes, &ev, &rep);
    if (s->p.restore_ahead) mz_pressure_want_relief(pe->monitor, true);
    pthread_mutex_lock(&s->snap_mu);
    s->n_evictions[0]++;
    s->evicted_bytes[0] += rep.bytes_freed;
    s->last_pressure_evict_ms = srv_now_ms();
    pthread_mutex_unlock(&s->snap_mu);
    srv_gate_leave(s);
    record_event(s, &ev);
    srv_log(s, "pressure %s (%s): %s [%s] -> evict %.1f MiB%s -> freed %.1f MiB (%.2fx the need) in %.1f ms "
               "(KV %zu compressed, %zu stored, %zu moved; %zu weight blocks dropped); remaining %.1f%%%s",
            src, pe->what, o.why, mz_esize_basis_name(o.basis), (double)o.bytes / 1048576.0,
            o.bytes < o.need ? (floor_b > 0 ? ", limited by the floor" : ", all that is left") : "",
            (double)rep.bytes_freed / 1048576.0, o.need ? (double)rep.bytes_freed / (double)o.need : 0.0,
            rep.time_ms, rep.n_kv_compressed, rep.n_kv_stored_raw + rep.n_kv_stored_compressed,
            rep.n_kv_compkv, rep.n_weights_dropped, ev.remaining_pct, rc ? " (failed part way; see above)" : "");
}

/* ---- 4. control endpoints ----------------------------------------------------------------- */

static cJSON *category_json(const mz_mem_category *c)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "total_bytes", (double)c->total_bytes);
    cJSON_AddNumberToObject(o, "resident_bytes", (double)c->resident_bytes);
    cJSON_AddNumberToObject(o, "compressed_bytes", (double)c->compressed_bytes);
    cJSON_AddNumberToObject(o, "stored_bytes", (double)c->stored_bytes);
    cJSON_AddNumberToObject(o, "dropped_bytes", (double)c->dropped_bytes);
    cJSON_AddNumberToObject(o, "units", (double)c->n_units);
    cJSON_AddNumberToObject(o, "units_resident", (double)c->n_resident);
    return o;
}

static cJSON *stats_json(const mz_mem_stats *st, size_t ctx_tokens, int n_ctx)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddItemToObject(m, "weights", category_json(&st->weights));
    cJSON_AddItemToObject(m, "kv", category_json(&st->kv));
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
    cJSON_AddNumberToObject(o, "prompt_tokens", (double)t->n_prompt);
    cJSON_AddNumberToObject(o, "cached_tokens", (double)t->n_cached);
    cJSON_AddNumberToObject(o, "prefilled_tokens", (double)t->n_prefilled);
    cJSON_AddNumberToObject(o, "generated_tokens", (double)t->n_generated);
    cJSON_AddNumberToObject(o, "queue_ms", t->queue_ms);
    cJSON_AddNumberToObject(o, "tokenize_ms", t->tokenize_ms);
    cJSON_AddNumberToObject(o, "prefill_ms", t->prefill_ms);
    cJSON_AddNumberToObject(o, "sample_ms", t->sample_ms);
    cJSON_AddNumberToObject(o, "ttft_ms", t->ttft_ms);
    cJSON_AddNumberToObject(o, "generate_ms", t->gen_ms);
    cJSON_AddNumberToObject(o, "total_ms", t->total_ms);
    cJSON_AddNumberToObject(o, "remaining_pct_before", t->remaining_pct_before);
    cJSON_AddNumberToObject(o, "evicted_bytes_before", (double)t->evicted_bytes_before);
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
    cJSON_AddNumberToObject(o, "max_sessions", s->p.max_sessions);
    cJSON_AddNumberToObject(o, "sessions", s->n_snap_sess);
    cJSON_AddNumberToObject(o, "sessions_created", (double)s->n_sessions_created);
    cJSON_AddNumberToObject(o, "sessions_forgotten", (double)s->n_sessions_forgotten);
    cJSON_AddNumberToObject(o, "sessions_deleted", (double)s->n_sessions_deleted);
    cJSON_AddNumberToObject(o, "budget_evictions", (double)s->n_budget_evictions);
    cJSON_AddNumberToObject(o, "budget_evicted_bytes", (double)s->budget_evicted_bytes);
    return o;
}

static enum MHD_Result handle_sessions(mz_server_t *s, struct MHD_Connection *c)
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
static enum MHD_Result handle_session_delete(mz_server_t *s, struct MHD_Connection *c, const srv_request *rq)
{
    if (!srv_session_id_valid(rq->session, true))
        return srv_error(s, c, 400, "invalid_request_error",
                         "a session id is 1 to 64 characters of A-Z a-z 0-9 . _ : @ + -");
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

static enum MHD_Result handle_status(mz_server_t *s, struct MHD_Connection *c)
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
        cJSON *r = cJSON_AddObjectToObject(root, "last_restore");
        cJSON_AddNumberToObject(r, "units", (double)rt->n_units);
        cJSON_AddNumberToObject(r, "storage_units", (double)rt->n_storage_units);
        cJSON_AddNumberToObject(r, "memory_units", (double)rt->n_mem_units);
        cJSON_AddNumberToObject(r, "alloc_ms", rt->alloc_ms);
        cJSON_AddNumberToObject(r, "storage_ms", rt->storage_ms);
        cJSON_AddNumberToObject(r, "memory_ms", rt->mem_ms);
        cJSON_AddNumberToObject(r, "all_ready_ms", rt->restore_ms);
        cJSON_AddNumberToObject(r, "prefill_ms", rt->prefill_ms);
        cJSON_AddNumberToObject(r, "stall_ms", rt->stall_ms);
        cJSON_AddNumberToObject(r, "ttft_ms", rt->ttft_ms);
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

static enum MHD_Result handle_metrics(mz_server_t *s, struct MHD_Connection *c)
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
static enum MHD_Result handle_models(mz_server_t *s, struct MHD_Connection *c, const srv_request *rq)
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
static enum MHD_Result handle_evict(mz_server_t *s, struct MHD_Connection *c, const srv_request *rq)
{
    srv_evict_req er;
    const char *bad = srv_parse_evict(rq->body, rq->len, &er);
    const bool all = er.all;
    const double pct = er.pct;
    if (bad) return srv_error(s, c, 400, "invalid_request_error", "%s", bad);
    if (srv_gate_enter(s, true, NULL)) return srv_error(s, c, 503, "unavailable", "server is shutting down");
    mz_mem_stats st;
    srv_mem_stats(s, &st);
    size_t n = srv_evict_amount(&er, evictable_total(&st));
    srv_event ev = {.t_unix = srv_unix_now()};
    snprintf(ev.trigger, sizeof ev.trigger, "api");
    if (all) snprintf(ev.what, sizeof ev.what, "all");
    else if (er.by_pct) snprintf(ev.what, sizeof ev.what, "%.1f%%", pct);
    else snprintf(ev.what, sizeof ev.what, "%zu bytes", n);
    mz_evict_report rep = {0};
    mz_status rc = n ? do_evict(s, n, &ev, &rep) : MZ_OK;
    if (!n) ev.remaining_pct = st.remaining_pct;
    mz_mem_stats after;
    srv_mem_stats(s, &after);
    size_t ctx_tokens = s->ctx ? mz_ctx_n_tokens(s->ctx) : 0;
    pthread_mutex_lock(&s->snap_mu);
    s->n_evictions[1]++;
    s->evicted_bytes[1] += rep.bytes_freed;
    pthread_mutex_unlock(&s->snap_mu);
    srv_gate_leave(s);
    record_event(s, &ev);
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

static enum MHD_Result handle_restore(mz_server_t *s, struct MHD_Connection *c)
{
    if (srv_gate_enter(s, true, NULL)) return srv_error(s, c, 503, "unavailable", "server is shutting down");
    mz_restore_report rep = {0};
    mz_status rc = srv_restore_sessions(s, &rep);
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

/* ---- 5. the access handler ------------------------------------------------------------------ */

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
        if (rq->len + n + 1 > rq->cap) {
            size_t cap = rq->cap ? rq->cap : 4096;
            while (cap < rq->len + n + 1) cap *= 2;
            char *b = realloc(rq->body, cap);
            if (!b) return MHD_NO;
            rq->body = b;
            rq->cap = cap;
        }
        memcpy(rq->body + rq->len, upload_data, n);
        rq->len += n;
        rq->body[rq->len] = '\0';
        return MHD_YES;
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
    case EP_MODELS: return handle_models(s, c, rq);
    case EP_CHAT: return srv_handle_completion(s, c, rq, true);
    case EP_COMPLETIONS: return srv_handle_completion(s, c, rq, false);
    case EP_EVICT: return handle_evict(s, c, rq);
    case EP_RESTORE: return handle_restore(s, c);
    case EP_STATUS: return handle_status(s, c);
    case EP_METRICS: return handle_metrics(s, c);
    case EP_SESSIONS: return handle_sessions(s, c);
    case EP_SESSION_DELETE: return handle_session_delete(s, c, rq);
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

/* ---- 6. start / stop ---------------------------------------------------------------------------- */

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
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = s->p.n_ctx;
    cp.n_threads = s->p.n_threads;
    if (s->p.n_batch > 0) cp.n_batch = s->p.n_batch;
    cp.kv_codec = s->p.kv_codec;
    cp.swap_dir = s->p.swap_dir;
    cp.kv_placement = s->p.kv_placement;
    cp.mode = s->p.mode;
    s->ctx_params = cp;
    if ((st = srv_sessions_init(s))) goto out_free;
    if (s->p.store && s->p.mode != MZ_MODE_MZCACHE) {
        srv_log(s, "store: off (--mode %s sessions are not stored; only mzcache mode)", mz_engine_mode_name(s->p.mode));
    } else if (s->p.store && (st = srv_store_open(s))) {
        goto out_free;
    }
    refresh_snapshot(s);

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
        if ((st = mz_pressure_start(&s->p.pressure_params, on_pressure, s, &s->mon))) goto out_free;
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

static struct timespec deadline_in(int ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    long long ns = dl.tv_nsec + (long long)ms * 1000000LL;
    dl.tv_sec += (time_t)(ns / 1000000000LL);
    dl.tv_nsec = (long)(ns % 1000000000LL);
    return dl;
}

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
    struct timespec dl = deadline_in(s->p.shutdown_grace_ms);
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
    dl = deadline_in(5000);
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
