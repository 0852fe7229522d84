/*
 * engine.h — the engine (one model's weights, memory system and compute),
 * its sessions (struct mz_ctx: one conversation each) and the forward pass.
 *
 * Ownership: the engine owns the weight table (src/mem/weights.h), the
 * device profile it read once, the compute thread pool and the list of its
 * sessions; a session owns its tokens, KV cache, memory manager (its KV
 * units, compressed stack, swap file) and scratch.
 *
 * Locks (outer first):
 *     c->use_lock       (recursive) held by every call on the session, and by
 *                       mz_engine_evict (trylock only) while it moves the
 *                       session's units
 *       e->compute_lock (recursive) one session computes / restores at a time
 *         mm->lock ...  (src/mem/manager.c)
 *     e->lock           the session list; mz_engine_evict holds it throughout,
 *                       so a session is never freed under an eviction; taken
 *                       with no session lock held except by mz_ctx_free/create
 *                       (whose use_lock nobody else can be waiting for)
 * mz_engine_evict never blocks on a use_lock or the compute lock: a session
 * it cannot lock is busy and gets its share as c->pending_evict, which the
 * session carries out between two forward steps.
 *
 * The forward pass reads weights through each block's unit buffer and the KV
 * cache through per-layer chunk-pointer arrays; it never assumes one
 * contiguous model or cache.
 */
#ifndef MZ_ENGINE_H
#define MZ_ENGINE_H

#include "../kv/kv_cache.h"
#include "../mem/manager.h"
#include "../model/model.h"
#include "../sched/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>

/* Scratch for one forward step of up to n_batch tokens. */
typedef struct mz_scratch {
    float *x;        /* [B][n_embd]  residual stream */
    float *xn;       /* [B][max(n_embd, q_dim)] normed input / attention output */
    float *q;        /* [B][n_head * head_dim] */
    float *k;        /* [B][n_head_kv * head_dim] */
    float *v;        /* [B][n_head_kv * head_dim] */
    float *attn;     /* [B][n_head * head_dim] */
    float *tmp;      /* [B][n_embd] */
    float *gate;     /* [B][n_ff] */
    float *up;       /* [B][n_ff] */
    float *hb;       /* [B][n_ff] silu(gate) * up */
    float *head_tmp; /* [head_dim] */
    void *xq;        /* activations converted for dot products: [B][row bytes of max(n_embd,q_dim,n_ff)] */
    size_t xq_row_cap;
    float *logits;   /* [n_vocab] */
} mz_scratch;

/* An engine mode: how a session gives memory back and gets it back
 * (mzcache, or a baseline of src/baseline). ctx.c calls these without
 * knowing which mode it is; every mode keeps the public contracts. */
typedef struct mz_mode_ops {
    MZ_NODISCARD mz_status (*evict)(mz_ctx_t *c, size_t nbytes, mz_evict_report *r);
    MZ_NODISCARD mz_status (*restore)(mz_ctx_t *c, mz_restore_report *r);
    void (*get_stats)(const mz_ctx_t *c, mz_mem_stats *out);
    /* Before mz_prefill's forward pass: bring back what the mode restores
     * before computing. NULL: nothing (mzcache restores per unit). */
    MZ_NODISCARD mz_status (*before_prefill)(mz_ctx_t *c);
    /* mz_prefill_restore: restore the mode's way and prefill; fills the
     * breakdown. */
    MZ_NODISCARD mz_status (*prefill_restore)(mz_ctx_t *c, const mz_token *t, size_t n,
                                              const mz_restore_params *rp,
                                              mz_restore_timings *tm, double t0);
    /* mz_ctx_truncate, before the chunks beyond n_keep go. NULL: nothing. */
    void (*kv_truncate)(mz_ctx_t *c, size_t n_keep);
    /* mz_engine_evict may plan this session's units one by one (the
     * mechanism of src/mem); else it calls evict for the session's share. */
    bool unit_plans;
} mz_mode_ops;

/* A listener on one session (SQLite's hooks): the engine tells it what
 * happens to the session's tokens, so that a layer above (the session
 * store) follows a session without reading it. Every call comes from the
 * session's owner thread under its use lock. */
typedef struct mz_ctx_listener {
    /* tokens [0, n) are the session's tokens now, after tokens were added
     * (a prefill, a generated token, adopted ones) */
    void (*on_append)(void *ud, const mz_token *tokens, size_t n);
    /* the session is cut back to n_keep tokens; called before any of its
     * KV beyond n_keep changes */
    void (*on_truncate)(void *ud, size_t n_keep);
    /* the session is being freed: its memory manager and KV still exist
     * during the call and go after it; the listener is unregistered */
    void (*on_free)(void *ud);
} mz_ctx_listener;

/* Prints and frees c->phases (MZ_FORWARD_PHASES=1); nothing when off. */
MZ_INTERNAL void mz_forward_phases_report(mz_ctx_t *c);

/* Registers l with user data ud on c (one listener per session; NULL
 * unregisters). Caller holds c's use lock or owns c alone. */
MZ_INTERNAL void mz_ctx_set_listener(mz_ctx_t *c, const mz_ctx_listener *l, void *ud);
/* ud of the listener l if l is the one registered on c, else NULL. */
MZ_INTERNAL void *mz_ctx_listener_data(const mz_ctx_t *c, const mz_ctx_listener *l);

/* What a layer above the engine (the session store) uses of a session
 * instead of reading struct mz_ctx: its parts below the engine and its
 * shape. The pointers live as long as the session. */
typedef struct mz_ctx_parts {
    mz_engine_t *engine;
    mz_model_t *model;
    mz_mem *mem;               /* its memory manager */
    mz_kv_cache *kv;           /* its KV cache (chunk layout, reserve) */
    int n_layer;
    size_t n_ctx;
    mz_engine_mode mode;
    int n_threads;             /* threads of the pool it computes on */
} mz_ctx_parts;
MZ_INTERNAL mz_ctx_parts mz_ctx_get_parts(mz_ctx_t *c);
/* The session's use lock (recursive; every public call on c takes it). */
MZ_INTERNAL void mz_ctx_use_lock(mz_ctx_t *c);
MZ_INTERNAL void mz_ctx_use_unlock(mz_ctx_t *c);
/* The KV of tokens [0, n) is in c's cache (a resume read it there): they
 * become c's tokens, with no logits; listeners hear an append. Caller
 * holds c's use lock; n <= n_ctx. */
MZ_INTERNAL void mz_ctx_adopt_tokens(mz_ctx_t *c, const mz_token *tokens, size_t n);
/* The engine's model; its compute lock (engine.h's lock order) for work
 * that must not run beside a forward pass outside a compute section. */
MZ_INTERNAL mz_model_t *mz_engine_model(const mz_engine_t *e);
MZ_INTERNAL void mz_engine_compute_lock(mz_engine_t *e);
MZ_INTERNAL void mz_engine_compute_unlock(mz_engine_t *e);

/* modes.c: the baselines' table, and a session's mode state (c->base; every
 * mode, mzcache included, is counted in the engine's registry). */
MZ_INTERNAL const mz_mode_ops *mz_baseline_ops(void);
MZ_INTERNAL MZ_NODISCARD mz_status mz_ctx_mode_init(mz_ctx_t *c);
MZ_INTERNAL void mz_ctx_mode_free(mz_ctx_t *c);

struct mz_engine {
    mz_model_t *model;
    struct mz_wtable *wt;      /* the weight units, shared by the sessions */
    mz_threadpool *pool;
    int n_threads;
    char *swap_dir;            /* default for sessions (NULL: swapfile's default) */
    char *profile_path;
    struct mz_device_profile *prof; /* read once at create */
    size_t mem_budget;         /* mz_engine_params.mem_budget_bytes (0: none) */
    bool implicit;             /* made by mz_ctx_init: freed with its last session */
    mz_mem_shared shared;      /* the swap file and model-file reader of its sessions */
    struct mz_ospage_model *modes; /* which modes its sessions run (src/baseline) */
    pthread_mutex_t compute_lock;
    /* Compute sections open (compute_lock holders, nested ones counted) and
     * when the last one closed (CLOCK_MONOTONIC ns): the store's
     * write-behind waits for a quiet engine (mz_engine_quiet). */
    _Atomic int n_computing;
    _Atomic uint64_t compute_end_ns;
    pthread_mutex_t lock;      /* sessions list and the sessions' names */
    struct mz_ctx *sessions;   /* creation order */
    size_t n_sessions;
};

struct mz_ctx {
    mz_engine_t *engine;
    struct mz_ctx *next;       /* engine's list */
    uint64_t id;
    pthread_mutex_t use_lock;
    _Atomic uint64_t last_use_ns;
    _Atomic size_t pending_evict; /* bytes mz_engine_evict asked while it computed */
    _Atomic bool busy;         /* computing (for listings) */
    bool lend_kv;              /* the next forward step may read KV chunks from the restore
                                  job's compressed copies (mz_prefill_restore sets it) */
    bool lend_whole;           /* ... each lent chunk decoded whole into a buffer of the step
                                  (mz_restore_experimental.lend_whole) */
    _Atomic size_t deferred_freed; /* bytes freed paying pending_evict (total) */
    mz_threadpool *own_pool;   /* mz_ctx_init with n_threads other than the engine's */
    mz_model_t *model;
    mz_ctx_params params;
    size_t n_ctx;
    int n_batch;
    mz_kv_cache kv;
    mz_mem *mem;           /* units, eviction and restore of kv and the model's blocks */
    mz_threadpool *pool;       /* the engine's (or own_pool) */
    mz_scratch s;
    mz_token *tokens;      /* [n_ctx] tokens whose KV is in the cache */
    size_t n_tokens;
    bool have_logits;
    mz_ctx_timings timings;
    /* MZ_FORWARD_PHASES=1 (diagnostics): wall time of each stage of the
     * forward pass, summed over the session's steps, printed by mz_ctx_free
     * (forward.c); NULL when off. */
    struct mz_forward_phases *phases;
    char errmsg[1024];
    const mz_mode_ops *ops;   /* the engine mode (params.mode) */
    struct mz_baseline *base; /* its mode's state (src/baseline; modes.c) */
    const mz_ctx_listener *listener; /* NULL: none (mz_ctx_set_listener) */
    void *listener_ud;
    /* Its name (mz_session_set_name): written under engine->lock, unique
     * among the engine's sessions; "" none. */
    char name[MZ_SESSION_ID_MAX + 1];
    void *user_data;           /* mz_session_set_user_data; the engine never reads it */
    void (*user_data_free)(void *);
};

/* Runs the forward pass for n tokens at positions [c->n_tokens, c->n_tokens + n)
 * (n <= n_batch); writes their K/V into the cache, and the logits of the last
 * token into c->s.logits when want_logits. Does not update c->n_tokens. */
mz_status mz_forward(mz_ctx_t *c, const mz_token *tokens, size_t n, bool want_logits);

/* mz_prefill without the mode's before_prefill hook and without taking the
 * locks (the caller, a mode's op, already holds them). */
MZ_INTERNAL MZ_NODISCARD mz_status mz_ctx_prefill_internal(mz_ctx_t *c, const mz_token *t,
                                                           size_t n);

/* session.c: the engine side of a session. */
MZ_INTERNAL void mz_session_touch(mz_ctx_t *c); /* last use = now */
/* The shared weight blocks' memory (mz_mem_stats.weights of the engine). */
MZ_INTERNAL void mz_engine_weights_stats(const mz_engine_t *e, mz_mem_category *w);
/* Compute sections of the engine: open/close around every forward pass or
 * restore (under compute_lock). mz_engine_quiet: none open now, and none
 * closed within the last quiet_ns — between the tokens of a decode loop the
 * engine is never quiet. */
MZ_INTERNAL void mz_engine_compute_open(mz_engine_t *e);
MZ_INTERNAL void mz_engine_compute_close(mz_engine_t *e);
MZ_INTERNAL bool mz_engine_quiet(mz_engine_t *e, uint64_t quiet_ns);
/* Gives up bytes mz_engine_evict deferred to this session (between steps;
 * caller holds c->use_lock and no restore job runs). */
MZ_INTERNAL void mz_session_pay_deferred(mz_ctx_t *c);
/* Creating a session: reserve a place (the engine cannot go away), init its
 * lock and id, build it, attach (link it: visible to mz_engine_evict).
 * mz_session_detach undoes the reservation and the link. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_engine_for_ctx(mz_model_t *m, const mz_ctx_params *p,
                                                     mz_engine_t **out);
MZ_INTERNAL mz_status mz_engine_reserve_session(mz_engine_t *e);
MZ_INTERNAL void mz_session_init_fields(mz_ctx_t *c, mz_engine_t *e);
MZ_INTERNAL mz_status mz_session_attach(mz_engine_t *e, mz_ctx_t *c);
MZ_INTERNAL void mz_session_detach(mz_ctx_t *c);
/* session_names.c: the caller's data of a session leaves with it (called
 * by mz_ctx_free once the session is off the engine's list). */
MZ_INTERNAL void mz_session_free_user_data(mz_ctx_t *c);

#endif
