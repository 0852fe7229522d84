/*
 * server_impl.h — internals shared by the server's files (server.c: daemon,
 * routing, control endpoints, pressure; completion.c: the completion
 * endpoints and generation). Not for use outside src/server/.
 *
 * Lock order (outer first):
 *   gate (mu/cv: who owns the engine; never held while computing)
 *     snap_mu (snapshot, counters, event ring; held only to copy)
 * The engine (model + context) itself is owned by whoever holds the gate
 * token (busy == true): a request, an eviction, or a restore.
 */
#ifndef MZ_SERVER_IMPL_H
#define MZ_SERVER_IMPL_H

#define _GNU_SOURCE
#include "server/server.h"

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>

#define SRV_N_EVENTS 64

typedef enum srv_endpoint {
    EP_HEALTH, EP_MODELS, EP_CHAT, EP_COMPLETIONS, EP_EVICT, EP_RESTORE, EP_STATUS, EP_METRICS,
    EP_OTHER, EP_COUNT
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

struct mz_server {
    mz_server_params p;
    char model_id[128];
    char *api_key;
    size_t api_key_len;
    mz_model_t *model;
    mz_ctx_t *ctx;
    mz_model_info info;
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
    int n_waiting;               /* completions in the queue */
    int n_priority_waiting;      /* evictions/restores waiting: they go first */

    /* Snapshot and counters (snap_mu). */
    pthread_mutex_t snap_mu;
    mz_mem_stats stats;
    mz_restore_timings restore;  /* breakdown of the last pipelined restore */
    size_t ctx_tokens;
    srv_timings last;
    srv_event events[SRV_N_EVENTS];
    size_t n_events;             /* ever recorded; the ring holds the last SRV_N_EVENTS */
    size_t n_requests[EP_COUNT];
    size_t n_responses[6];       /* by status class: [2] = 2xx ... [5] = 5xx */
    size_t n_429;
    size_t n_prompt_tokens, n_prefilled_tokens, n_cached_tokens, n_generated_tokens;
    size_t n_evictions[2], evicted_bytes[2]; /* [0] pressure, [1] api */
    size_t n_signals[MZ_PRESSURE_N_SOURCES];
    size_t n_ignored_level, n_ignored_interval, n_ignored_floor;
    double last_pressure_evict_ms;
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
} srv_request;

/* Logging with a UTC timestamp, one line per call. */
void srv_log(mz_server_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Engine gate. priority: evictions/restores (ahead of queued completions,
 * never refused). Returns 0 when the caller owns the engine, 429 when the
 * queue is full, 503 on timeout or shutdown. *wait_ms: time waited. */
int srv_gate_enter(mz_server_t *s, bool priority, double *wait_ms);
/* Refreshes the snapshot from the context (the caller still owns it), then
 * releases the engine. */
void srv_gate_leave(mz_server_t *s);

/* Responses. All return what MHD_queue_response returned. */
enum MHD_Result srv_respond(mz_server_t *s, struct MHD_Connection *c, int status, const char *ctype,
                            const char *body, size_t len, const char *hname, const char *hval);
/* Serializes and frees obj. */
enum MHD_Result srv_respond_json(mz_server_t *s, struct MHD_Connection *c, int status, cJSON *obj);
/* {"error": {"message", "type", "code"}}. Messages never carry paths or secrets. */
enum MHD_Result srv_error(mz_server_t *s, struct MHD_Connection *c, int status, const char *type,
                          const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void srv_count_response(mz_server_t *s, int status);

/* completion.c */
enum MHD_Result srv_handle_completion(mz_server_t *s, struct MHD_Connection *c, srv_request *rq,
                                      bool chat);

double srv_now_ms(void);
double srv_unix_now(void);

#endif /* MZ_SERVER_IMPL_H */
