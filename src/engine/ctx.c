/*
 * ctx.c — the session object (struct mz_ctx): owns the KV cache, the memory
 * manager of its units and the scratch buffers, computes on its engine's
 * thread pool, and splits a prefill into forward steps of n_batch tokens.
 * Every public call takes the session's use lock; computing calls take the
 * engine's compute lock too (engine.h).
 */
#include "engine.h"

#include "../baseline/baseline.h" /* mz_baseline_mem_params */
#include "../mem/profile.h"
#include "../kernels/kernels.h"

#include <stdint.h>
#include <string.h>

mz_ctx_params mz_ctx_params_default(void)
{
    mz_ctx_params p = {.n_ctx = 0, .n_threads = 0, .n_batch = 64, .progress = NULL,
                       .progress_user = NULL, .kv_codec = NULL, .swap_dir = NULL,
                       .kv_placement = MZ_KV_PLACE_AUTO, .mode = MZ_MODE_MZCACHE};
    return p;
}

static void scratch_free(mz_scratch *s)
{
    float **fs[] = {&s->x, &s->xn, &s->q, &s->k, &s->v, &s->attn, &s->tmp,
                    &s->gate, &s->up, &s->hb, &s->head_tmp, &s->logits};
    for (size_t i = 0; i < MZ_ARRAY_LEN(fs); i++) {
        mz_aligned_free(*fs[i]);
        *fs[i] = NULL;
    }
    mz_aligned_free(s->xq);
    s->xq = NULL;
}

static mz_status scratch_init(mz_scratch *s, const mz_model_config *cfg, size_t B)
{
    size_t E = (size_t)cfg->n_embd, QD = (size_t)cfg->n_head * (size_t)cfg->head_dim;
    size_t KVD = (size_t)cfg->n_head_kv * (size_t)cfg->head_dim, F = (size_t)cfg->n_ff;
    size_t widest = MZ_MAX(MZ_MAX(E, QD), F);
    struct { float **p; size_t n; } fs[] = {
        {&s->x, B * E},   {&s->xn, B * MZ_MAX(E, QD)}, {&s->q, B * QD},    {&s->k, B * KVD},
        {&s->v, B * KVD}, {&s->attn, B * QD},           {&s->tmp, B * E},   {&s->gate, B * F},
        {&s->up, B * F},  {&s->hb, B * F},              {&s->head_tmp, (size_t)cfg->head_dim},
        {&s->logits, (size_t)cfg->n_vocab},
    };
    for (size_t i = 0; i < MZ_ARRAY_LEN(fs); i++) {
        *fs[i].p = mz_aligned_alloc(fs[i].n * sizeof(float));
        if (!*fs[i].p) goto out_nomem;
    }
    /* Widest activation row in the widest activation format (F32), three
     * slots for products whose weights want different formats. */
    s->xq_row_cap = widest * sizeof(float);
    s->xq = mz_aligned_alloc(3 * s->xq_row_cap * B);
    if (!s->xq) goto out_nomem;
    return MZ_OK;
out_nomem:
    scratch_free(s);
    return MZ_E_NOMEM;
}

static const mz_mode_ops mzcache_ops; /* below, with the mode's functions */

/* Two optional paths name the same file (NULL and "" both: the default). */
static bool same_path(const char *a, const char *b)
{
    bool da = !a || !a[0], db = !b || !b[0];
    return da || db ? da == db : strcmp(a, b) == 0;
}

/* Builds a session of e (a place already reserved: mz_engine_for_ctx /
 * mz_engine_reserve_session). from_ctx_init: the caller's n_threads and
 * profile_path are honoured as mz_ctx_init always did. */
static mz_status ctx_create(mz_engine_t *e, const mz_ctx_params *p, bool from_ctx_init,
                            mz_ctx_t **out)
{
    mz_status s;
    mz_model_t *m = e->model;
    mz_ctx_params prm = p ? *p : mz_ctx_params_default();
    const mz_ctx_experimental xp =
        prm.experimental ? *prm.experimental : mz_ctx_experimental_default();
    const mz_model_config *cfg = &m->cfg;
    size_t n_ctx = prm.n_ctx > 0 ? (size_t)prm.n_ctx : (size_t)cfg->n_ctx_train;
    int n_threads = prm.n_threads ? prm.n_threads : mz_n_cpus();
    int n_batch = prm.n_batch ? prm.n_batch : 64;
    if (n_threads > 256) n_threads = 256;
    if (n_batch > 4096) n_batch = 4096;
    /* An engine owns one swap file, in its swap directory, shared by its
     * sessions (the swap file is part of the engine's memory system, with
     * the weights and the policy); a session naming another directory would
     * need a second file that the engine neither plans nor accounts for. */
    if (prm.swap_dir && prm.swap_dir[0] && !(e->swap_dir && strcmp(prm.swap_dir, e->swap_dir) == 0)) {
        mz_session_detach(&(mz_ctx_t){.engine = e});
        return mz_fail(MZ_E_INVAL,
                       "swap_dir %s: a session's swap file is its engine's, in the engine's "
                       "directory (%s); set mz_engine_params.swap_dir, or leave the session's "
                       "NULL",
                       prm.swap_dir, e->swap_dir ? e->swap_dir : "the default");
    }
    prm.swap_dir = e->swap_dir; /* every mode's files go there (os-paging's KV file too) */

    mz_ctx_t *c = mz_calloc(1, sizeof *c);
    if (!c) {
        mz_session_detach(&(mz_ctx_t){.engine = e});
        return MZ_E_NOMEM;
    }
    mz_session_init_fields(c, e);
    c->model = m;
    c->params = prm;
    c->n_ctx = n_ctx;
    c->n_batch = n_batch;
    if ((s = mz_kv_cache_init(&c->kv, cfg->n_layer, cfg->n_head_kv, cfg->head_dim, n_ctx))) goto out_fail;
    /* The engine's pool computes; a context made by mz_ctx_init that asks
     * for another thread count keeps its own (its answers and timings are
     * those of that count, as before engines existed). The memory manager
     * sizes the restore's split beside it. */
    if (from_ctx_init && prm.n_threads && n_threads != e->n_threads) {
        c->own_pool = mz_threadpool_init(n_threads);
        if (!c->own_pool) {
            s = mz_fail(MZ_E_NOMEM, "cannot start %d compute threads", n_threads);
            goto out_fail;
        }
        c->pool = c->own_pool;
    } else {
        c->pool = e->pool;
    }
    {
        /* The engine read its profile once; a session naming another file
         * (mz_ctx_init's profile_path) gets that one. */
        mz_device_profile own_prof;
        const mz_device_profile *prof = e->prof;
        if (!same_path(prm.profile_path, e->profile_path)) {
            mz_profile_load_or_builtin(prm.profile_path, &own_prof);
            prof = &own_prof;
        }
        mz_mem_params mp = {.codec = prm.kv_codec,
                            .swap_dir = prm.swap_dir,
                            .placement = prm.kv_placement, .profile = prof,
                            .order = xp.evict_order, .seed = xp.evict_seed, .wt = e->wt,
                            .shared = &e->shared,
                            /* the baselines keep every layer's whole history,
                             * as their peers do (ARCHITECTURE.md, sliding-window
                             * layers) */
                            .n_pos = xp.swa_full || prm.mode != MZ_MODE_MZCACHE ? NULL
                                                                                : &c->n_tokens};
        mp.n_compute = mz_threadpool_n_threads(c->pool);
        c->ops = prm.mode == MZ_MODE_MZCACHE ? &mzcache_ops : mz_baseline_ops();
        mz_baseline_mem_params(prm.mode, &mp);
        if ((s = mz_mem_init(m, &c->kv, &mp, &c->mem))) goto out_fail;
        if ((s = mz_ctx_mode_init(c))) goto out_fail; /* engine mode (modes.c) */
        /* The strings were copied; don't keep the caller's pointers. */
        c->params.kv_codec = NULL;
        c->params.swap_dir = NULL;
        c->params.profile_path = NULL;
        c->params.experimental = NULL;
    }
    if ((s = scratch_init(&c->s, cfg, (size_t)n_batch))) goto out_fail;
    c->tokens = mz_calloc(n_ctx, sizeof *c->tokens);
    if (!c->tokens) {
        s = MZ_E_NOMEM;
        goto out_fail;
    }
    (void)mz_session_attach(e, c);
    *out = c;
    return MZ_OK;
out_fail:
    mz_ctx_free(c);
    return s;
}

mz_status mz_ctx_init(mz_model_t *m, const mz_ctx_params *p, mz_ctx_t **out)
{
    *out = NULL;
    mz_clear_error();
    if (!m) return mz_fail(MZ_E_INVAL, "no model given");
    mz_ctx_params prm = p ? *p : mz_ctx_params_default();
    if (prm.n_ctx < 0 || prm.n_batch < 0 || prm.n_threads < 0)
        return mz_fail(MZ_E_INVAL, "negative context parameter");
    mz_engine_t *e;
    mz_status s = mz_engine_for_ctx(m, &prm, &e);
    if (s) return s;
    return ctx_create(e, &prm, true, out);
}

mz_status mz_session_create(mz_engine_t *e, const mz_ctx_params *p, mz_ctx_t **out)
{
    if (!out) return mz_fail(MZ_E_INVAL, "null argument");
    *out = NULL;
    mz_clear_error();
    if (!e) return mz_fail(MZ_E_INVAL, "no engine given");
    mz_ctx_params prm = p ? *p : mz_ctx_params_default();
    if (prm.n_ctx < 0 || prm.n_batch < 0 || prm.n_threads < 0)
        return mz_fail(MZ_E_INVAL, "negative context parameter");
    (void)mz_engine_reserve_session(e);
    return ctx_create(e, &prm, false, out);
}

void mz_ctx_free(mz_ctx_t *c)
{
    if (!c) return;
    /* Unlinked first: no mz_engine_evict can reach it afterwards (detach
     * waits for a running one). The implicit engine of mz_ctx_init goes
     * with its last session, after the session's own parts. */
    mz_engine_t *e = c->engine;
    if (e) {
        pthread_mutex_lock(&e->lock);
        for (mz_ctx_t **pp = &e->sessions; *pp; pp = &(*pp)->next) {
            if (*pp == c) {
                *pp = c->next;
                break;
            }
        }
        pthread_mutex_unlock(&e->lock);
    }
    mz_session_free_user_data(c); /* off the list: nobody finds it any more */
    mz_threadpool_free(c->own_pool);
    mz_ctx_mode_free(c);
    if (c->listener) { /* before the memory manager and its files go */
        const mz_ctx_listener *l = c->listener;
        c->listener = NULL;
        l->on_free(c->listener_ud);
    }
    mz_forward_phases_report(c);
    mz_mem_free(c->mem);
    mz_kv_cache_free(&c->kv);
    scratch_free(&c->s);
    free(c->tokens);
    mz_session_detach(c); /* the reservation; may free an implicit engine */
    if (e) pthread_mutex_destroy(&c->use_lock);
    free(c);
}

const char *mz_ctx_errmsg(const mz_ctx_t *c) { return c ? c->errmsg : mz_last_error(); }

static mz_status ctx_fail(mz_ctx_t *c, mz_status s)
{
    snprintf(c->errmsg, sizeof c->errmsg, "%s", mz_last_error());
    return s;
}

/* The session's use lock (every call) and the engine's compute lock
 * (calls that compute or restore). Both recursive: restore_generate and the
 * baselines call mz_prefill inside. */
static void use_begin(mz_ctx_t *c) { pthread_mutex_lock(&c->use_lock); }
static void use_end(mz_ctx_t *c) { pthread_mutex_unlock(&c->use_lock); }
void mz_ctx_use_lock(mz_ctx_t *c) { use_begin(c); }
void mz_ctx_use_unlock(mz_ctx_t *c) { use_end(c); }
/* A compute section: the engine's compute lock, counted open for the
 * store's write-behind (mz_engine_quiet); at its end the section's weight
 * reloads are over, so the model-file reader gives its bounce pool back. */
static void section_open(mz_ctx_t *c)
{
    pthread_mutex_lock(&c->engine->compute_lock);
    mz_engine_compute_open(c->engine);
}
static void section_close(mz_ctx_t *c)
{
    mz_mem_reader_idle(c->mem);
    mz_engine_compute_close(c->engine);
    pthread_mutex_unlock(&c->engine->compute_lock);
}
static void compute_begin(mz_ctx_t *c)
{
    use_begin(c);
    section_open(c);
    atomic_store(&c->busy, true);
}
static void compute_end(mz_ctx_t *c)
{
    mz_session_touch(c);
    atomic_store(&c->busy, false);
    section_close(c);
    use_end(c);
}

static mz_status prefill_locked(mz_ctx_t *c, const mz_token *tokens, size_t n_tokens,
                                bool mode_hook);

mz_status mz_prefill(mz_ctx_t *c, const mz_token *tokens, size_t n_tokens)
{
    if (!c || (!tokens && n_tokens)) return mz_fail(MZ_E_INVAL, "null argument");
    if (n_tokens == 0) return MZ_OK;
    compute_begin(c);
    mz_status s = prefill_locked(c, tokens, n_tokens, true);
    compute_end(c);
    return s;
}

mz_status mz_ctx_prefill_internal(mz_ctx_t *c, const mz_token *t, size_t n)
{
    if (n == 0) return MZ_OK;
    return prefill_locked(c, t, n, false);
}

static mz_status prefill_locked(mz_ctx_t *c, const mz_token *tokens, size_t n_tokens,
                                bool mode_hook)
{
    mz_clear_error();
    if (n_tokens > c->n_ctx - c->n_tokens) {
        mz_fail(MZ_E_CONTEXT_FULL,
                "%zu new tokens do not fit: %zu of %zu context positions are used",
                n_tokens, c->n_tokens, c->n_ctx);
        return ctx_fail(c, MZ_E_CONTEXT_FULL);
    }
    if (mode_hook && c->ops->before_prefill) {
        /* Modes that restore before computing (recompute: the context again). */
        mz_status sb = c->ops->before_prefill(c);
        if (sb) return ctx_fail(c, sb);
    }
    const size_t n0 = c->n_tokens;
    double t0 = mz_time_ms();
    mz_status s = MZ_OK;
    for (size_t done = 0; done < n_tokens;) {
        /* Between two forward steps: bytes mz_engine_evict asked of this
         * session while it computed (not while a restore job runs). */
        mz_mem_restore_reap(c->mem);
        if (atomic_load(&c->pending_evict) && !mz_mem_restore_running(c->mem))
            mz_session_pay_deferred(c);
        size_t n = MZ_MIN((size_t)c->n_batch, n_tokens - done);
        bool last = done + n == n_tokens;
        s = mz_forward(c, tokens + done, n, last);
        if (s) break;
        memcpy(c->tokens + c->n_tokens, tokens + done, n * sizeof *tokens);
        c->n_tokens += n;
        done += n;
        if (c->params.progress && !c->params.progress(c->params.progress_user, done, n_tokens)) {
            s = mz_fail(MZ_E_CANCELLED, "prefill cancelled after %zu of %zu tokens", done, n_tokens);
            break;
        }
    }
    if (s) {
        c->n_tokens = n0;
        c->have_logits = false;
        return ctx_fail(c, s);
    }
    c->have_logits = true;
    if (c->listener) c->listener->on_append(c->listener_ud, c->tokens, c->n_tokens);
    double dt = mz_time_ms() - t0;
    if (n_tokens == 1) {
        c->timings.decode_ms += dt;
        c->timings.n_decode_tokens++;
    } else {
        c->timings.prefill_ms += dt;
        c->timings.n_prefill_tokens += n_tokens;
    }
    return MZ_OK;
}

const float *mz_ctx_logits(const mz_ctx_t *c) { return c && c->have_logits ? c->s.logits : NULL; }
size_t mz_ctx_n_tokens(const mz_ctx_t *c) { return c->n_tokens; }
size_t mz_ctx_n_ctx(const mz_ctx_t *c) { return c->n_ctx; }
const mz_token *mz_ctx_tokens(const mz_ctx_t *c) { return c->tokens; }

void mz_ctx_set_listener(mz_ctx_t *c, const mz_ctx_listener *l, void *ud)
{
    c->listener = l;
    c->listener_ud = l ? ud : NULL;
}

void *mz_ctx_listener_data(const mz_ctx_t *c, const mz_ctx_listener *l)
{
    return c && l && c->listener == l ? c->listener_ud : NULL;
}

mz_ctx_parts mz_ctx_get_parts(mz_ctx_t *c)
{
    return (mz_ctx_parts){.engine = c->engine, .model = c->model, .mem = c->mem, .kv = &c->kv,
                          .n_layer = c->model->cfg.n_layer, .n_ctx = c->n_ctx,
                          .mode = c->params.mode, .n_threads = mz_threadpool_n_threads(c->pool)};
}

void mz_ctx_adopt_tokens(mz_ctx_t *c, const mz_token *tokens, size_t n)
{
    MZ_ASSERT(n <= c->n_ctx);
    memcpy(c->tokens, tokens, n * sizeof *c->tokens);
    c->n_tokens = n;
    c->have_logits = false;
    if (c->listener) c->listener->on_append(c->listener_ud, c->tokens, c->n_tokens);
}

static mz_status truncate_locked(mz_ctx_t *c, size_t n_keep);

mz_status mz_ctx_truncate(mz_ctx_t *c, size_t n_keep)
{
    use_begin(c);
    mz_status s = truncate_locked(c, n_keep);
    use_end(c);
    return s;
}

static mz_status truncate_locked(mz_ctx_t *c, size_t n_keep)
{
    if (n_keep > c->n_tokens) return mz_fail(MZ_E_RANGE, "cannot keep %zu of %zu tokens", n_keep, c->n_tokens);
    mz_clear_error();
    /* listeners first (the store's write-behind stops treating the cut
     * chunks as full) */
    if (c->listener) c->listener->on_truncate(c->listener_ud, n_keep);
    /* Evicted chunks beyond n_keep give up their stored copies first. */
    mz_status s = mz_mem_kv_truncate(c->mem, n_keep);
    if (s) return ctx_fail(c, s);
    if (n_keep < c->n_tokens) c->have_logits = false;
    c->n_tokens = n_keep;
    if (c->ops->kv_truncate) c->ops->kv_truncate(c, n_keep); /* before the chunks go */
    mz_kv_cache_shrink(&c->kv, n_keep);
    return MZ_OK;
}

size_t mz_tokens_common_prefix(const mz_token *a, size_t na, const mz_token *b, size_t nb)
{
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

size_t mz_ctx_common_prefix(const mz_ctx_t *c, const mz_token *tokens, size_t n)
{
    return mz_tokens_common_prefix(c->tokens, c->n_tokens, tokens, n);
}

mz_status mz_ctx_keep_prefix(mz_ctx_t *c, const mz_token *tokens, size_t n, size_t *n_kept)
{
    if (!c || !tokens || n == 0) return mz_fail(MZ_E_INVAL, "prefix sync: no tokens");
    use_begin(c);
    size_t k = mz_ctx_common_prefix(c, tokens, n);
    if (k == n) k = n - 1; /* the last token runs again: its logits come fresh */
    mz_status s = truncate_locked(c, k);
    use_end(c);
    if (!s && n_kept) *n_kept = k;
    return s;
}

void mz_ctx_get_timings(const mz_ctx_t *c, mz_ctx_timings *out) { *out = c->timings; }
void mz_ctx_reset_timings(mz_ctx_t *c) { memset(&c->timings, 0, sizeof c->timings); }

/* ---- elastic memory ------------------------------------------------------------- */

mz_status mz_evict(mz_ctx_t *c, size_t nbytes, mz_evict_report *report)
{
    if (!c) return mz_fail(MZ_E_INVAL, "null context");
    mz_clear_error();
    use_begin(c);
    mz_status s = c->ops->evict(c, nbytes, report);
    use_end(c);
    return s ? ctx_fail(c, s) : MZ_OK;
}

mz_status mz_restore(mz_ctx_t *c, mz_restore_report *report)
{
    if (!c) return mz_fail(MZ_E_INVAL, "null context");
    mz_clear_error();
    compute_begin(c);
    mz_status s = c->ops->restore(c, report);
    compute_end(c);
    return s ? ctx_fail(c, s) : MZ_OK;
}

void mz_get_mem_stats(const mz_ctx_t *c, mz_mem_stats *out)
{
    mz_ctx_t *w = (mz_ctx_t *)(uintptr_t)c; /* the lock, not the session, changes */
    use_begin(w);
    c->ops->get_stats(c, out);
    use_end(w);
}

/* ---- restore_generate (pipelined restore; manager.c has the workers) -------------- */

mz_restore_params mz_restore_params_default(void)
{
    return (mz_restore_params){.n_restore_threads = 0, .experimental = NULL};
}

mz_restore_experimental mz_restore_experimental_default(void)
{
    return (mz_restore_experimental){.overlap = MZ_OVERLAP_ALL, .debug_delay_us = 0, .seed = 0,
                                     .n_prefault_threads = 0, .lend_kv = 0, .lend_whole = false, .wait_all = false,
                                     .debug_fail_mem_item = 0};
}

static mz_status prefill_restore(mz_ctx_t *c, const mz_token *tokens, size_t n,
                                 const mz_restore_params *p, mz_restore_timings *tm, double t0)
{
    mz_restore_params rp = p ? *p : mz_restore_params_default();
    if (rp.experimental && (unsigned)rp.experimental->overlap > (unsigned)MZ_OVERLAP_RELOAD_PREFILL)
        return ctx_fail(c, mz_fail(MZ_E_INVAL, "unknown restore overlap mode %d",
                                   (int)rp.experimental->overlap));
    if (rp.experimental && (rp.experimental->n_prefault_threads < 0 ||
                            rp.experimental->n_prefault_threads > MZ_RESTORE_THREADS_MAX))
        return ctx_fail(c, mz_fail(MZ_E_INVAL, "n_prefault_threads %d: use 0 (profile) or 1..%d",
                                   rp.experimental->n_prefault_threads, MZ_RESTORE_THREADS_MAX));
    if (rp.n_restore_threads < 0 || rp.n_restore_threads > MZ_RESTORE_THREADS_MAX)
        return ctx_fail(c, mz_fail(MZ_E_INVAL, "n_restore_threads %d: use 0 (profile) or 1..%d",
                                   rp.n_restore_threads, MZ_RESTORE_THREADS_MAX));
    mz_clear_error();
    mz_status s = c->ops->prefill_restore(c, tokens, n, &rp, tm, t0);
    mz_mem_set_last_restore(c->mem, tm);
    if (s) snprintf(c->errmsg, sizeof c->errmsg, "%s", mz_last_error());
    return s;
}

/* ---- the mzcache mode: the memory manager of src/mem ---------------------------------- */

static mz_status mzc_evict(mz_ctx_t *c, size_t nbytes, mz_evict_report *r)
{
    return mz_mem_evict(c->mem, nbytes, r);
}

static mz_status mzc_restore(mz_ctx_t *c, mz_restore_report *r)
{
    return mz_mem_restore_all(c->mem, r);
}

static void mzc_get_stats(const mz_ctx_t *c, mz_mem_stats *out) { mz_mem_get_stats(c->mem, out); }

/* The pipelined restore: the workers start on every evicted unit and the
 * prefill begins at once, waiting per unit (src/mem/restore_job.c). */
static mz_status mzc_prefill_restore(mz_ctx_t *c, const mz_token *tokens, size_t n,
                                     const mz_restore_params *p, mz_restore_timings *tm,
                                     double t0)
{
    const mz_restore_experimental x =
        p->experimental ? *p->experimental : mz_restore_experimental_default();
    mz_restore_job_params jp = {
        .overlap_alloc = x.overlap == MZ_OVERLAP_ALL || x.overlap == MZ_OVERLAP_ALLOC_RELOAD,
        .delay_us_max = x.debug_delay_us,
        .fail_mem_item = x.debug_fail_mem_item,
        .seed = x.seed,
        .n_threads = p->n_restore_threads,
        .n_compute = mz_threadpool_n_threads(c->pool),
        .n_prefault = x.n_prefault_threads,
    };
    bool overlap_prefill = x.overlap == MZ_OVERLAP_ALL || x.overlap == MZ_OVERLAP_RELOAD_PREFILL;
    mz_status s = mz_mem_restore_begin(c->mem, &jp);
    if (s) {
        memset(tm, 0, sizeof *tm);
        return s;
    }
    if (!overlap_prefill) s = mz_mem_restore_wait(c->mem);
    /* Lending makes the compute threads decode what the restore threads
     * decode too: a gain only where they do not share cores. */
    c->lend_kv = overlap_prefill &&
                 (x.lend_kv > 0 || (x.lend_kv == 0 && mz_threadpool_n_threads(c->pool) +
                                                              mz_mem_restore_threads(c->mem) <=
                                                          mz_n_cpus()));
    c->lend_whole = x.lend_whole;
    double tp = mz_time_ms();
    if (!s) s = mz_ctx_prefill_internal(c, tokens, n);
    c->lend_kv = false;
    double t1 = mz_time_ms();
    /* The logits are out: what is left of a restore from memory goes on
     * after the request (the next call on the session waits for it). */
    if (s || x.wait_all || !mz_mem_restore_detach(c->mem, tm)) {
        mz_status s2 = mz_mem_restore_end(c->mem, tm);
        if (!s) s = s2;
    }
    tm->prefill_ms = t1 - tp;
    tm->ttft_ms = t1 - t0;
    return s;
}

/* No before_prefill (restores per unit as the pass needs it), no
 * kv_truncate (the chunks go with the chunk table). */
static const mz_mode_ops mzcache_ops = {.evict = mzc_evict, .restore = mzc_restore, .get_stats = mzc_get_stats,
                                        .prefill_restore = mzc_prefill_restore, .unit_plans = true};

mz_status mz_prefill_restore(mz_ctx_t *c, const mz_token *tokens, size_t n,
                             const mz_restore_params *p, mz_restore_timings *out)
{
    if (!c || (!tokens && n)) return mz_fail(MZ_E_INVAL, "null argument");
    mz_restore_timings tm;
    compute_begin(c);
    mz_status s = prefill_restore(c, tokens, n, p, &tm, mz_time_ms());
    compute_end(c);
    if (out) *out = tm;
    return s;
}

/* First token sampled: the request's TTFT; then the caller's hook. */
typedef struct rg_hooks {
    mz_ctx_t *c;
    const mz_generate_params *user;
    mz_restore_timings *tm, *out;
    double t0;
    bool sampled;
} rg_hooks;

static bool rg_on_sample(void *user, mz_token t)
{
    rg_hooks *h = user;
    if (!h->sampled) {
        h->sampled = true;
        h->tm->ttft_ms = mz_time_ms() - h->t0;
        mz_mem_set_last_restore(h->c->mem, h->tm);
        if (h->out) *h->out = *h->tm;
    }
    return !h->user->on_sample || h->user->on_sample(h->user->user, t);
}

static mz_gen_action rg_on_token(void *user, mz_token t, const float *logits, int n_vocab)
{
    rg_hooks *h = user;
    return h->user->on_token ? h->user->on_token(h->user->user, t, logits, n_vocab) : MZ_GEN_CONTINUE;
}

static bool rg_cancelled(void *user)
{
    rg_hooks *h = user;
    return h->user->cancelled && h->user->cancelled(h->user->user);
}

static mz_status restore_generate_locked(mz_ctx_t *c, const mz_token *tokens, size_t n,
                                         const mz_restore_params *p, mz_sampler_t *smp,
                                         const mz_generate_params *gp, mz_generate_result *res,
                                         mz_restore_timings *out)
{
    double t0 = mz_time_ms();
    mz_restore_timings tm;
    section_open(c);
    mz_status s = prefill_restore(c, tokens, n, p, &tm, t0);
    section_close(c);
    if (out) *out = tm;
    if (s) return s;
    const mz_generate_params dflt = mz_generate_params_default();
    rg_hooks h = {.c = c, .user = gp ? gp : &dflt, .tm = &tm, .out = out, .t0 = t0};
    mz_generate_params wp = *h.user;
    wp.on_sample = rg_on_sample;
    wp.on_token = rg_on_token;
    wp.cancelled = rg_cancelled;
    wp.user = &h;
    s = mz_generate(c, smp, &wp, res);
    /* A restore that went on after the prompt's pass is long done by now:
     * its full breakdown for the caller. */
    mz_mem_restore_finish(c->mem);
    if (out) mz_mem_last_restore(c->mem, out);
    return s;
}

mz_status mz_restore_generate(mz_ctx_t *c, const mz_token *tokens, size_t n,
                              const mz_restore_params *p, mz_sampler_t *smp,
                              const mz_generate_params *gp, mz_generate_result *res,
                              mz_restore_timings *out)
{
    if (res) *res = (mz_generate_result){0};
    if (!c || (!tokens && n)) return mz_fail(MZ_E_INVAL, "null argument");
    /* The session stays in use (busy for mz_engine_evict) for the whole
     * generation; the compute lock is taken per forward call, so other
     * sessions' requests interleave with the decode steps. */
    use_begin(c);
    atomic_store(&c->busy, true);
    mz_status s = restore_generate_locked(c, tokens, n, p, smp, gp, res, out);
    atomic_store(&c->busy, false);
    mz_session_touch(c);
    use_end(c);
    return s;
}

mz_status mz_ctx_sync(mz_ctx_t *c, const mz_token *tokens, size_t n, const mz_restore_params *p,
                      mz_restore_timings *out, size_t *n_kept)
{
    size_t k = 0;
    mz_status s = mz_ctx_keep_prefix(c, tokens, n, &k);
    if (s) return s;
    if (n_kept) *n_kept = k;
    return mz_prefill_restore(c, tokens + k, n - k, p, out);
}

void mz_get_last_restore_timings(const mz_ctx_t *c, mz_restore_timings *out)
{
    mz_ctx_t *w = (mz_ctx_t *)(uintptr_t)c;
    use_begin(w);
    mz_mem_restore_finish(w->mem);
    mz_mem_last_restore(c->mem, out);
    use_end(w);
}
