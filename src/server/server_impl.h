/*
 * server_impl.h — internals shared by the server's files (server.c: start,
 * stop, the access handler and dispatch; respond.c: the wall clock, log, responses;
 * gate.c: the engine gate and its queue; control.c: the control endpoints;
 * relief.c: pressure → eviction and relief; sessions.c: the conversations,
 * their routing and the memory budget; completion.c: the completion
 * endpoints and generation). Not for use outside src/server/.
 *
 * Lock order (outer first):
 *   gate (mu/cv: who owns the engine; never held while computing)
 *     snap_mu (snapshot, counters, event ring; held only to copy)
 * The engine (model + every session's context) itself is owned by whoever
 * holds the gate token (busy == true): a request, an eviction, a restore, a
 * session deletion. The engine's sessions (made, named, freed), their
 * annotations (srv_session) and s->ctx, s->cur change only under the gate.
 */
#ifndef MZ_SERVER_IMPL_H
#define MZ_SERVER_IMPL_H

#define _GNU_SOURCE
#include "server/server.h"

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define SRV_N_EVENTS 64
#define SRV_SESSION_ID_MAX MZ_SESSION_ID_MAX
#define SRV_MAX_SESSIONS 64   /* --max-sessions limit */
#define SRV_MAX_STORED 256    /* stored-but-not-loaded sessions /mz/sessions lists; the
                                 store's index of anonymous ones holds as many */

typedef enum srv_endpoint {
    EP_HEALTH, EP_MODELS, EP_CHAT, EP_COMPLETIONS, EP_EVICT, EP_RESTORE, EP_STATUS, EP_METRICS,
    EP_OTHER, EP_SESSIONS, EP_SESSION_DELETE, EP_COUNT
} srv_endpoint;

/* One eviction (pressure or API), kept in a ring for /mz/status. */
typedef struct srv_event {
    double t_unix;               /* wall clock, seconds */
    char trigger[16];            /* "psi", "cg1-usage", ..., "api" */
    char what[64];
    size_t requested, freed;
    double remaining_pct;        /* after */
    double ms;
    bool at_floor;               /* nothing done: the floor was reached */
} srv_event;

/* Timings of the last completion. */
typedef struct srv_timings {
    bool valid;
    bool chat, stream;
    size_t n_prompt, n_cached, n_prefilled, n_generated;
    double queue_ms, tokenize_ms, prefill_ms, sample_ms, ttft_ms, gen_ms, total_ms;
    double remaining_pct_before;
    size_t evicted_bytes_before;  /* evictable bytes not resident when the request started */
    char finish_reason[16];
} srv_timings;

/* What the daemon notes of one conversation, hung on the engine's session
 * (mz_session_set_user_data; freed with the session). The session list,
 * its order, the ids (mz_session_name: an anonymous one starts with
 * MZ_SESSION_ANON_PREFIX, any other came from the client) and which session
 * is least recently used (mz_ctx_last_use_ns) are the engine's. */
typedef struct srv_session {
    bool stored;                 /* attached to s->store (write-behind, manifest) */
    double created_unix, last_use_unix;
    size_t n_prompt_last;        /* prompt tokens of its last request (prefix routing) */
    double last_ttft_ms;         /* < 0: no request finished yet */
    size_t n_requests;
    size_t n_fresh;              /* tokens at the end of its context prefilled for the request
                                    being routed (by a resume), their logits current: that
                                    request counts them as computed, not cached */
    bool resumed_now;            /* resumed from the store for the request being routed */
    size_t n_restored;           /* with resumed_now: the tokens at the start of its context
                                    whose KV came back from storage; the rest of the stored
                                    tokens were recomputed, so that request counts only these
                                    as cached */
} srv_session;

/* What /mz/status, /mz/sessions and /metrics show of a session (snap_mu). */
typedef struct srv_session_snap {
    char id[SRV_SESSION_ID_MAX + 1];
    bool named, stored;
    long stored_tokens;          /* tokens its manifest on storage holds (-1: not stored) */
    size_t n_tokens;
    mz_mem_category kv;
    mz_mem_category kv_out_of_window; /* of kv: sliding-window chunks no token can attend to */
    size_t compstack_mapped_bytes, swap_file_bytes;
    double created_unix, last_use_unix, last_ttft_ms;
    size_t n_requests;
} srv_session_snap;

struct mz_server {
    mz_server_params p;
    char model_id[128];
    char *api_key;
    size_t api_key_len;
    mz_model_t *model;
    /* The model's engine (mz_engine_create at start): the weights, the device
     * profile, the swap file and every session; it outlives the sessions. */
    mz_engine_t *engine;
    /* The session in use: set by srv_session_route while the gate is held;
     * between gate holders the most recently used session, never a freed
     * one (NULL: the engine has none). */
    mz_ctx_t *ctx;
    mz_model_info info;
    size_t n_ctx;                /* tokens per session context */
    mz_ctx_params ctx_params;    /* for new sessions */
    mz_store_t *store;           /* NULL: --no-store (nothing outlives the process) */
    unsigned long next_anon;     /* the last anonymous id's number (routing policy) */
    mz_ctx_t *cur;               /* the session a completion uses, NULL none (gate) */
    bool over_budget;            /* the last budget check could not get under it */
    struct MHD_Daemon *mhd;
    int port;
    mz_pressure_monitor_t *mon;
    long created_unix;
    atomic_ulong next_id;

    /* The engine gate. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool busy;
    bool stopping;
    bool draining;               /* shutdown started: new requests get 503 */
    int n_inflight;              /* admitted requests not yet completed */
    int n_handling;              /* handlers running (computing until their response is queued) */
    atomic_bool cut;             /* the grace period ran out: generations end now */
    int n_waiting;               /* completions in the queue */
    int n_priority_waiting;      /* evictions/restores waiting: they go first */

    /* Snapshot and counters (snap_mu). */
    pthread_mutex_t snap_mu;
    mz_mem_stats stats;
    mz_restore_timings restore;  /* breakdown of the last pipelined restore */
    size_t ctx_tokens;
    srv_session_snap *snap_sess; /* [p.max_sessions + 1]: a copy of the engine's sessions */
    int n_snap_sess;
    mz_stored_session *snap_stored; /* [SRV_MAX_STORED]: stored sessions not loaded */
    int n_snap_stored;
    char active_id[SRV_SESSION_ID_MAX + 1]; /* session of the running completion ("" none) */
    size_t footprint;            /* srv_footprint at the last snapshot */
    size_t n_sessions_created, n_sessions_forgotten, n_sessions_deleted;
    size_t n_budget_evictions, budget_evicted_bytes;
    srv_timings last;
    srv_event events[SRV_N_EVENTS];
    size_t n_events;             /* ever recorded; the ring holds the last SRV_N_EVENTS */
    size_t n_requests[EP_COUNT];
    size_t n_responses[6];       /* by status class: [2] = 2xx ... [5] = 5xx */
    size_t n_429;
    size_t n_client_gone_queued;   /* requests dropped from the queue: their client left */
    size_t n_client_gone_running;  /* generations stopped: their client left */
    size_t n_prompt_tokens, n_prefilled_tokens, n_cached_tokens, n_generated_tokens;
    size_t n_evictions[2], evicted_bytes[2]; /* [0] pressure, [1] api */
    size_t n_signals[MZ_PRESSURE_N_SOURCES];
    size_t n_ignored_level, n_ignored_interval, n_ignored_floor;
    double last_pressure_evict_ms;
    double last_squeeze_ms;      /* last pressure signal that asked for bytes (monotonic ms) */
    size_t n_restores_ahead, restored_ahead_bytes;
    double last_low_log_ms;
};

/* Per-connection state (MHD's con_cls). */
typedef struct srv_request {
    srv_endpoint ep;
    char *body;
    size_t len, cap;
    bool started;
    bool too_big;
    bool answered;               /* a response was queued early */
    bool inflight;               /* counted in n_inflight */
    char session[SRV_SESSION_ID_MAX + 1]; /* DELETE /mz/sessions/ID */
    char model[128];             /* GET /v1/models/ID (model_given) */
    bool model_given;
} srv_request;

/* Logging with a UTC timestamp, one line per call. */
void srv_log(mz_server_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Engine gate. priority: evictions/restores (ahead of queued completions,
 * never refused). Returns 0 when the caller owns the engine, 429 when the
 * queue is full, 503 on timeout or shutdown. *wait_ms: time waited. */
int srv_gate_enter(mz_server_t *s, bool priority, double *wait_ms);
/* The same for a request of client (NULL: none): while it waits in the
 * queue, a client that closed its connection is noticed within 200 ms and
 * the wait ends with SRV_GATE_CLIENT_GONE (the request is dropped). */
#define SRV_GATE_CLIENT_GONE 499
int srv_gate_enter_for(mz_server_t *s, bool priority, struct MHD_Connection *client, double *wait_ms);
/* True when the client closed the connection (end of stream, hang-up or
 * error on its socket); a pipelined request is not a close. Any thread. */
bool srv_client_gone(struct MHD_Connection *c);
/* Refreshes the snapshot from the context (the caller still owns it), then
 * releases the engine. */
void srv_gate_leave(mz_server_t *s);
/* The gate if nobody holds it or waits for it: 0, else 1 (the monitor
 * thread must not queue behind requests: signals would wait with it). */
int srv_gate_try_enter(mz_server_t *s);
/* server.c: the grace period ran out: generation stops at the next token
 * (any thread). */
bool srv_cut_short(mz_server_t *s);

/* Responses. All return what MHD_queue_response returned. */
enum MHD_Result srv_respond(mz_server_t *s, struct MHD_Connection *c, int status, const char *ctype,
                            const char *body, size_t len, const char *hname, const char *hval);
/* Serializes and frees obj. */
enum MHD_Result srv_respond_json(mz_server_t *s, struct MHD_Connection *c, int status, cJSON *obj);
/* {"error": {"message", "type", "code"}}. Messages never carry paths or secrets. */
enum MHD_Result srv_error(mz_server_t *s, struct MHD_Connection *c, int status, const char *type,
                          const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void srv_count_response(mz_server_t *s, int status);
/* Appends p[0, n) to the growing buffer *buf (length *len, capacity *cap;
 * first_cap when it is first made), kept NUL-terminated after its bytes;
 * false when out of memory (the buffer as it was). */
bool srv_bytes_append(char **buf, size_t *len, size_t *cap, size_t first_cap, const void *p, size_t n);

/* ---- relief.c ---- */

/* Appends to the event ring /mz/status shows (takes snap_mu). */
void srv_record_event(mz_server_t *s, const srv_event *ev);
/* Weights and KV, all of it: what a percentage of an eviction is of. */
size_t srv_evictable_total(const mz_mem_stats *st);
/* Caller owns the engine. Evicts nbytes (SIZE_MAX: all) over the sessions,
 * least recently used first, gives freed heap pages back; fills ev
 * (requested, freed, remaining, ms) and rep. */
mz_status srv_evict_event(mz_server_t *s, size_t nbytes, srv_event *ev, mz_evict_report *rep);
/* The pressure monitor's callback (mz_pressure_cb): sizes and runs an
 * eviction, or with pe->relief a restore ahead. */
void srv_on_pressure(void *user, const mz_pressure_event *pe);

/* ---- control.c: the control endpoints ---- */
enum MHD_Result srv_handle_models(mz_server_t *s, struct MHD_Connection *c, const srv_request *rq);
enum MHD_Result srv_handle_evict(mz_server_t *s, struct MHD_Connection *c, const srv_request *rq);
enum MHD_Result srv_handle_restore(mz_server_t *s, struct MHD_Connection *c);
enum MHD_Result srv_handle_status(mz_server_t *s, struct MHD_Connection *c);
enum MHD_Result srv_handle_metrics(mz_server_t *s, struct MHD_Connection *c);
enum MHD_Result srv_handle_sessions(mz_server_t *s, struct MHD_Connection *c);
enum MHD_Result srv_handle_session_delete(mz_server_t *s, struct MHD_Connection *c, const srv_request *rq);

/* completion.c */
enum MHD_Result srv_handle_completion(mz_server_t *s, struct MHD_Connection *c, srv_request *rq,
                                      bool chat);

double srv_unix_now(void);
/* CLOCK_REALTIME ms from now: a pthread_cond_timedwait deadline. */
struct timespec srv_deadline_in(int ms);
/* "2026-12-01T23:10:45.123Z" */
void srv_iso8601(double t_unix, char *out, size_t cap);

/* ---- sessions.c (every function: the caller owns the engine, unless noted) ---- */

/* Creates the first (empty, anonymous) session of s->engine. Called once by
 * start, after srv_store_open (its id comes after the stored anonymous ones). */
mz_status srv_sessions_init(mz_server_t *s);
/* Opens the session store (p.store), enforces its limit, logs what it holds. */
mz_status srv_store_open(mz_server_t *s);
/* Re-reads the store's list into the snapshot (any thread; takes snap_mu). */
void srv_store_snapshot(mz_server_t *s);
/* After srv_sessions_free. */
void srv_store_close(mz_server_t *s);
void srv_sessions_free(mz_server_t *s);
/* The daemon's notes on session c of s->engine (gate). */
static inline srv_session *srv_session_of(const mz_ctx_t *c) { return (srv_session *)mz_session_user_data(c); }
/* Picks the session for a completion and makes it current (s->ctx, s->cur):
 * id non-empty: that named session, created if new; else the anonymous
 * session the tokens continue (see docs/SERVER.md "Sessions"), else a new one.
 * A new session when the engine has --max-sessions forgets the least
 * recently used one. */
mz_status srv_session_route(mz_server_t *s, const char *id, const mz_token *toks, size_t n);
/* The current session's request ended: its TTFT and prompt length. */
void srv_session_done(mz_server_t *s, const srv_timings *tm);
/* Deletes a session by id: MZ_OK, or MZ_E_INVAL when no session has it. */
mz_status srv_session_delete(mz_server_t *s, const char *id);
/* Memory over every session, shared weights counted once. */
void srv_mem_stats(mz_server_t *s, mz_mem_stats *out);
/* What --mem-budget limits: mz_engine_footprint (pinned + weights once +
 * every session's KV and compressed stack). */
size_t srv_footprint(mz_server_t *s);
/* Evicts nbytes (SIZE_MAX: all) over the sessions and the weights: the
 * engine's one plan (mz_engine_evict; least recently used first). */
mz_status srv_evict_sessions(mz_server_t *s, size_t nbytes, mz_evict_report *rep);
/* Restores every session (mz_engine_restore: least recent first), logging
 * a failure. pipelined: the pipelined restore of a request (mz_prefill_restore
 * of no tokens: storage, memory and allocation paths in parallel workers),
 * for restores ahead; rep->bytes_restored is then the resident bytes gained
 * and units (may be NULL) counts the units by path. */
mz_status srv_restore_sessions(mz_server_t *s, bool pipelined, mz_restore_report *rep,
                               mz_engine_restore_units *units);
/* The engine keeps the budget (mz_engine_keep_budget); this counts, logs
 * and records what it did (no-op without one). */
void srv_enforce_budget(mz_server_t *s);
/* Copies the sessions' state into the snapshot; takes snap_mu itself. */
void srv_sessions_snapshot(mz_server_t *s);

#endif /* MZ_SERVER_IMPL_H */
