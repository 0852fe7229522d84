/*
 * server.h — `mzcache serve`: an OpenAI-style HTTP API over one persistent
 * conversation, with a memory-pressure monitor that gives memory back.
 *
 * Built as its own static library (libmzcache_server: libmicrohttpd +
 * cJSON), so the engine library does not depend on either.
 *
 * Endpoints (docs/SERVER.md has the details):
 *   GET  /health                      liveness (no API key needed)
 *   GET  /v1/models                   the one model
 *   POST /v1/chat/completions         chat, streaming (SSE) or not
 *   POST /v1/completions              raw text completion, streaming or not
 *   POST /mz/evict                    {"bytes": N} | {"percent": P} | {"all": true}
 *   POST /mz/restore                  bring everything back now
 *   GET  /mz/status                   memory by category, last request's timings, events
 *   GET  /metrics                     Prometheus text format
 *
 * Threads: libmicrohttpd runs one thread per connection. The context is
 * single-threaded, so every use of it (a completion, an eviction, a restore)
 * holds the engine gate: one holder at a time; completions wait in a bounded
 * queue (beyond it: 429), the pressure monitor goes ahead of waiting requests.
 * Status and metrics read a snapshot refreshed whenever the gate is released,
 * so they answer at once even while a long request runs.
 */
#ifndef MZ_SERVER_H
#define MZ_SERVER_H

#include "mzcache.h"
#include "pressure/pressure.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct mz_server mz_server_t;

typedef struct mz_server_params {
    const char *model_path;     /* GGUF file (required) */
    const char *model_alias;    /* id in /v1/models; NULL = file name without directory and .gguf */
    const char *chat_template;  /* NULL: the model's own family; see mz_model_params */
    const char *host;           /* address to bind (default "127.0.0.1": loopback only) */
    int port;                   /* default 8080; 0 = any free port (see mz_server_port) */
    const char *api_key;        /* NULL or "" = no key; else "Authorization: Bearer KEY"
                                   or "X-API-Key: KEY" on every endpoint but /health */
    /* Engine. */
    int n_ctx;                  /* default 4096 */
    int n_threads;              /* 0 = all cores */
    int n_batch;                /* 0 = engine default */
    const char *kv_codec;       /* NULL = q8 */
    const char *swap_dir;       /* NULL = engine default */
    mz_kv_placement kv_placement;
    mz_engine_mode mode;        /* default mzcache; a baseline for comparisons (issue 7/9) */
    mz_sampler_params sampler;  /* defaults for fields a request leaves out */
    bool seed_fixed;            /* sampler.seed serves requests without "seed"; false: each such
                                   request draws a fresh one (OpenAI's and llama.cpp's way) */
    /* Limits. */
    int default_max_tokens;     /* when a request gives none (default 256) */
    int max_tokens_limit;       /* larger max_tokens → 400 (default 4096) */
    size_t max_body_bytes;      /* larger bodies → 413 (default 1 MiB) */
    int conn_timeout_s;         /* idle connection (slow client) timeout (default 30) */
    int max_connections;        /* default 256 (one thread each) */
    int max_queue;              /* completions waiting for the engine; more → 429 (default 128) */
    int queue_timeout_ms;       /* longest wait in that queue, then 503 (default 120000) */
    /* Pressure → eviction. */
    bool pressure;              /* start the monitor (default true) */
    mz_pressure_params pressure_params;
    double evict_step_pct;      /* PSI (and signals without a cgroup limit) step: % of the
                                   evictable total (default 2) */
    size_t evict_step_bytes;    /* per signal, in bytes; overrides the % when nonzero */
    double evict_floor_pct;     /* pressure never takes remaining memory below this % (0) */
    size_t evict_floor_bytes;   /* ... nor resident + compressed below these bytes (0) */
    mz_pressure_level pressure_min_level; /* weaker signals are only counted (default MEDIUM) */
    int pressure_interval_ms;   /* least time between two pressure evictions (default 1000) */
    bool restore_ahead;         /* after pressure evictions, restore once all of it fits below
                                   the cgroup target again and no signal asked for bytes for
                                   restore_ahead_quiet_ms (default true, 1000) */
    int restore_ahead_quiet_ms;
    FILE *log;                  /* timestamped log lines (default stderr; NULL = stderr) */
    bool verbose;               /* log every request */
    int token_delay_ms;         /* artificial pause after each generated token: tests and
                                   demos of concurrency only (default 0) */
    /* Sessions (docs/SERVER.md "Sessions"). */
    int max_sessions;           /* conversations held at once, each its own context
                                   (default 4; 1..64) */
    size_t mem_budget_bytes;    /* 0 = none; else weights + KV + compressed stacks are kept
                                   under it after every request, by evicting the least
                                   recently used sessions first */
    /* Durable sessions (docs/SERVER.md "Durable sessions"). */
    bool store;                 /* keep named sessions in a session store (default false
                                   here; `mzcache serve` turns it on unless --no-store) */
    const char *store_dir;      /* NULL: the store's default directory */
    uint64_t store_limit_bytes; /* 0: no limit; default 2 GiB; enforced at start and whenever a
                                   new anonymous session is stored */
    mz_fsync_policy store_fsync; /* default MZ_FSYNC_BATCH */
    const char *store_codec;    /* "raw" (NULL: default) or "q8" (mz_store_params.codec) */
    int shutdown_grace_ms;      /* mz_server_stop lets running requests finish this long,
                                   then ends their generation (default 30000) */
} mz_server_params;

mz_server_params mz_server_params_default(void);

/* Loads the model, creates the context, starts the pressure monitor and the
 * HTTP daemon. On error *out is NULL and mz_last_error() says why. */
MZ_NODISCARD mz_status mz_server_start(const mz_server_params *p, mz_server_t **out);
/* The port actually bound (useful with port 0). */
int mz_server_port(const mz_server_t *s);
/* The pressure monitor (for its description); NULL if disabled. */
const mz_pressure_monitor_t *mz_server_monitor(const mz_server_t *s);
/* Graceful stop: from now on new requests get 503; running (and queued)
 * requests finish, for at most shutdown_grace_ms; then generations still
 * running end at their next token (finish_reason "length", a stream still
 * gets its final chunk and [DONE]) and get a few more seconds to send it.
 * Then the daemon closes, the monitor stops, and everything is freed. */
void mz_server_stop(mz_server_t *s);

/* ---- a small blocking HTTP/1.1 client (CLI subcommands and tests) ---------------- */

typedef struct mz_http_response {
    int status;                 /* HTTP status, 0 if none was read */
    char *body;                 /* NUL-terminated, de-chunked; caller frees */
    size_t len;
    char content_type[96];
    char retry_after[16];
} mz_http_response;

/* One request on a fresh connection ("Connection: close"). api_key may be
 * NULL. Returns 0 when a response was read, else -errno (-ETIMEDOUT after
 * timeout_ms without progress). */
int mz_http_request(const char *host, int port, const char *method, const char *path,
                    const char *api_key, const char *body, size_t body_len, int timeout_ms,
                    mz_http_response *out);
/* The same with extra header lines ("Name: value\r\n" each; NULL = none). */
int mz_http_request_ex(const char *host, int port, const char *method, const char *path, const char *api_key,
                       const char *extra_headers, const char *body, size_t body_len, int timeout_ms,
                       mz_http_response *out);
void mz_http_response_free(mz_http_response *r);

#endif /* MZ_SERVER_H */
