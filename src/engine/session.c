/*
 * session.c — the engine object and its sessions (include/mzcache.h,
 * "engine and sessions"; ownership and locks in engine.h): creation and
 * listing, the cross-session eviction (src/mem/policy_engine.h plans it,
 * this file carries it out) and the engine's memory statistics.
 */
#define _GNU_SOURCE
#include "engine.h"

#include "../baseline/baseline.h"
#include "../mem/policy_engine.h"
#include "../mem/profile.h"
#include "../mem/weights.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The model -> engine link is set and cleared under this lock (concurrent
 * mz_ctx_init on one model must find the same implicit engine). */
static pthread_mutex_t g_attach_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t g_next_id = 1;

mz_engine_params mz_engine_params_default(void)
{
    return (mz_engine_params){.n_threads = 0, .swap_dir = NULL, .profile_path = NULL, .mem_budget_bytes = 0};
}

static char *dup_or_null(const char *s, bool *oom)
{
    if (!s || !s[0]) return NULL;
    char *d = strdup(s);
    if (!d) *oom = true;
    return d;
}

static void engine_destroy(mz_engine_t *e)
{
    if (!e) return;
    mz_threadpool_free(e->pool);
    mz_wtable_free(e->wt); /* the model gets its dropped blocks back */
    mz_mem_shared_close(&e->shared);
    mz_ospage_model_free(e->modes);
    free(e->prof);
    free(e->swap_dir);
    free(e->profile_path);
    pthread_mutex_destroy(&e->compute_lock);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

static mz_status engine_new(mz_model_t *m, const mz_engine_params *p, bool implicit,
                            mz_engine_t **out)
{
    *out = NULL;
    mz_engine_params prm = p ? *p : mz_engine_params_default();
    if (prm.n_threads < 0) return mz_fail(MZ_E_INVAL, "negative thread count");
    mz_engine_t *e = mz_calloc(1, sizeof *e);
    if (!e) return mz_fail(MZ_E_NOMEM, "out of memory creating the engine");
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&e->compute_lock, &a);
    pthread_mutexattr_destroy(&a);
    pthread_mutex_init(&e->lock, NULL);
    atomic_init(&e->n_computing, 0);
    atomic_init(&e->compute_end_ns, 0);
    e->model = m;
    e->implicit = implicit;
    bool oom = false;
    e->swap_dir = dup_or_null(prm.swap_dir, &oom);
    e->profile_path = dup_or_null(prm.profile_path, &oom);
    e->mem_budget = prm.mem_budget_bytes;
    mz_status s = MZ_OK;
    if (oom) {
        s = mz_fail(MZ_E_NOMEM, "out of memory creating the engine");
        goto out_fail;
    }
    mz_mem_shared_init(&e->shared, e->swap_dir);
    e->n_threads = prm.n_threads ? prm.n_threads : mz_n_cpus();
    if (e->n_threads > 256) e->n_threads = 256;
    /* The device profile, read once here: the memory manager of every
     * session gets it (a session naming another file gets that one, read
     * by ctx.c). */
    e->prof = mz_calloc(1, sizeof *e->prof);
    if (!e->prof) {
        s = mz_fail(MZ_E_NOMEM, "out of memory creating the engine");
        goto out_fail;
    }
    mz_profile_load_or_builtin(e->profile_path, e->prof);
    if ((s = mz_wtable_init(m, &e->wt))) goto out_fail;
    e->modes = mz_ospage_model_new(m);
    if (!e->modes) {
        s = mz_fail(MZ_E_NOMEM, "out of memory creating the engine");
        goto out_fail;
    }
    e->pool = mz_threadpool_init(e->n_threads);
    if (!e->pool) {
        s = mz_fail(MZ_E_NOMEM, "cannot start %d compute threads", e->n_threads);
        goto out_fail;
    }
    *out = e;
    return MZ_OK;
out_fail:
    engine_destroy(e);
    return s;
}

mz_status mz_engine_create(mz_model_t *m, const mz_engine_params *p, mz_engine_t **out)
{
    if (!out) return mz_fail(MZ_E_INVAL, "null argument");
    *out = NULL;
    mz_clear_error();
    if (!m) return mz_fail(MZ_E_INVAL, "no model given");
    pthread_mutex_lock(&g_attach_lock);
    mz_status s;
    if (m->engine) {
        s = mz_fail(MZ_E_INVAL, "the model already has an engine (one per model: its weights "
                                "are the engine's)");
    } else if ((s = engine_new(m, p, false, out)) == MZ_OK) {
        m->engine = *out;
    }
    pthread_mutex_unlock(&g_attach_lock);
    return s;
}

void mz_engine_free(mz_engine_t *e)
{
    if (!e) return;
    for (;;) {
        pthread_mutex_lock(&e->lock);
        mz_ctx_t *c = e->sessions;
        pthread_mutex_unlock(&e->lock);
        if (!c) break;
        mz_ctx_free(c);
    }
    pthread_mutex_lock(&g_attach_lock);
    if (e->model->engine == e) e->model->engine = NULL;
    pthread_mutex_unlock(&g_attach_lock);
    engine_destroy(e);
}

/* The engine a new mz_ctx_init context joins: the model's, or a new
 * implicit one. Takes a session slot under g_attach_lock so that the
 * implicit engine cannot go away in between (see mz_session_detach). */
mz_status mz_engine_for_ctx(mz_model_t *m, const mz_ctx_params *p, mz_engine_t **out)
{
    pthread_mutex_lock(&g_attach_lock);
    mz_status s = MZ_OK;
    mz_engine_t *e = m->engine;
    if (!e) {
        mz_engine_params ep = {.n_threads = p->n_threads, .swap_dir = p->swap_dir,
                               .profile_path = p->profile_path};
        if ((s = engine_new(m, &ep, true, &e)) == MZ_OK) m->engine = e;
    }
    if (!s) {
        pthread_mutex_lock(&e->lock);
        e->n_sessions++; /* reserved; mz_session_attach links it */
        pthread_mutex_unlock(&e->lock);
    }
    pthread_mutex_unlock(&g_attach_lock);
    *out = s ? NULL : e;
    return s;
}

mz_status mz_session_attach(mz_engine_t *e, mz_ctx_t *c)
{
    pthread_mutex_lock(&e->lock);
    mz_ctx_t **pp = &e->sessions;
    while (*pp) pp = &(*pp)->next;
    *pp = c;
    c->next = NULL;
    pthread_mutex_unlock(&e->lock);
    return MZ_OK;
}

void mz_session_init_fields(mz_ctx_t *c, mz_engine_t *e)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&c->use_lock, &a);
    pthread_mutexattr_destroy(&a);
    c->engine = e;
    c->id = atomic_fetch_add(&g_next_id, 1);
    atomic_init(&c->last_use_ns, mz_time_ns());
    atomic_init(&c->pending_evict, 0);
    atomic_init(&c->busy, false);
    atomic_init(&c->deferred_freed, 0);
}

mz_status mz_engine_reserve_session(mz_engine_t *e)
{
    pthread_mutex_lock(&e->lock);
    e->n_sessions++;
    pthread_mutex_unlock(&e->lock);
    return MZ_OK;
}

/* Unlinks c (waiting for a running mz_engine_evict, which holds e->lock);
 * an implicit engine goes with its last session. Returns with c unreachable
 * from the engine (whether it was linked or only reserved). */
void mz_session_detach(mz_ctx_t *c)
{
    mz_engine_t *e = c->engine;
    if (!e) return;
    pthread_mutex_lock(&g_attach_lock);
    pthread_mutex_lock(&e->lock);
    for (mz_ctx_t **pp = &e->sessions; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    bool last = --e->n_sessions == 0;
    pthread_mutex_unlock(&e->lock);
    bool destroy = last && e->implicit;
    if (destroy && e->model->engine == e) e->model->engine = NULL;
    pthread_mutex_unlock(&g_attach_lock);
    c->engine = NULL;
    if (destroy) engine_destroy(e);
}

mz_engine_t *mz_ctx_engine(const mz_ctx_t *c) { return c ? c->engine : NULL; }
mz_model_t *mz_engine_model(const mz_engine_t *e) { return e->model; }
void mz_engine_compute_lock(mz_engine_t *e) { pthread_mutex_lock(&e->compute_lock); }
void mz_engine_compute_unlock(mz_engine_t *e) { pthread_mutex_unlock(&e->compute_lock); }
uint64_t mz_ctx_id(const mz_ctx_t *c) { return c ? c->id : 0; }
uint64_t mz_ctx_last_use_ns(const mz_ctx_t *c) { return c ? atomic_load(&c->last_use_ns) : 0; }

void mz_session_touch(mz_ctx_t *c) { atomic_store(&c->last_use_ns, mz_time_ns()); }

void mz_engine_compute_open(mz_engine_t *e) { atomic_fetch_add(&e->n_computing, 1); }

void mz_engine_compute_close(mz_engine_t *e)
{
    atomic_store(&e->compute_end_ns, mz_time_ns());
    atomic_fetch_sub(&e->n_computing, 1);
}

bool mz_engine_quiet(mz_engine_t *e, uint64_t quiet_ns)
{
    if (atomic_load(&e->n_computing) > 0) return false;
    return mz_time_ns() - atomic_load(&e->compute_end_ns) >= quiet_ns;
}

void mz_session_pay_deferred(mz_ctx_t *c)
{
    size_t n = atomic_exchange(&c->pending_evict, 0);
    if (!n || !c->ops->unit_plans) return;
    mz_evict_report r;
    /* Between two steps nothing of this session is pinned; other sessions
     * do not compute now (the compute lock is ours), so the weights may go
     * as its own Algorithm 1 says. */
    bool weights_ok = !mz_wtable_any_pinned(c->engine->wt);
    mz_status s = mz_mem_evict_ex(c->mem, n, weights_ok, &r);
    atomic_fetch_add(&c->deferred_freed, r.bytes_freed);
    if (s) mz_log(MZ_LOG_WARN, "deferred eviction of session %llu: %s",
                  (unsigned long long)c->id, mz_last_error());
}

/* ---- cross-session eviction ---------------------------------------------------- */

mz_status mz_engine_evict(mz_engine_t *e, size_t nbytes, mz_evict_report *r)
{
    mz_evict_report scratch;
    r = mz_evict_report_start(r, &scratch, nbytes);
    if (!e) return mz_fail(MZ_E_INVAL, "null engine");
    mz_clear_error();
    if (nbytes == 0) {
        r->complete = true;
        return MZ_OK;
    }
    double t0 = mz_time_ms();
    mz_status s = MZ_OK;
    pthread_mutex_lock(&e->lock);
    size_t n = 0;
    for (mz_ctx_t *c = e->sessions; c; c = c->next) n++;
    mz_ctx_t **cs = mz_calloc(MZ_MAX(n, 1), sizeof *cs);
    mz_session_view *sv = mz_calloc(MZ_MAX(n, 1), sizeof *sv);
    bool *locked = mz_calloc(MZ_MAX(n, 1), sizeof *locked);
    bool *touched = mz_calloc(MZ_MAX(n, 1), sizeof *touched);
    bool *done_opaque = mz_calloc(MZ_MAX(n, 1), sizeof *done_opaque);
    bool deferred_once = false;
    mz_xplan xp = {0};
    int64_t freed = 0;
    if (!cs || !sv || !locked || !touched || !done_opaque) {
        s = mz_fail(MZ_E_NOMEM, "out of memory planning an eviction");
        goto out;
    }
    {
        size_t i = 0;
        for (mz_ctx_t *c = e->sessions; c; c = c->next) cs[i++] = c;
    }
    /* Never wait: a session we cannot lock is computing. */
    for (size_t i = 0; i < n; i++) locked[i] = pthread_mutex_trylock(&cs[i]->use_lock) == 0;
    for (size_t round = 0; s == MZ_OK && (freed < 0 || (uint64_t)freed < nbytes); round++) {
        for (size_t i = 0; i < n; i++) {
            mz_ctx_t *c = cs[i];
            sv[i] = (mz_session_view){.id = c->id, .last_use = atomic_load(&c->last_use_ns),
                                      .busy = !locked[i],
                                      .opaque = locked[i] && !c->ops->unit_plans};
            if (!locked[i] || !c->ops->unit_plans) continue;
            sv[i].policy = mz_mem_policy(c->mem);
            sv[i].scratch = mz_mem_plan_scratch(c->mem);
            mz_mem_view(c->mem, false, &sv[i].view);
        }
        if ((s = mz_xplan_reserve(&xp, sv, n))) {
            mz_fail(s, "out of memory planning an eviction");
            break;
        }
        uint64_t left = freed >= 0 ? nbytes - (uint64_t)freed : nbytes + (uint64_t)-freed;
        mz_plan_sessions(sv, n, (size_t)MZ_MIN(left, (uint64_t)SIZE_MAX),
                         !mz_wtable_any_pinned(e->wt), &xp);
        size_t moved = 0;
        for (size_t k = 0; k < xp.n && s == MZ_OK;) {
            uint32_t i = xp.steps[k].session;
            mz_ctx_t *c = cs[i];
            if (freed >= 0 && (uint64_t)freed >= nbytes) break;
            uint64_t now_left = freed >= 0 ? nbytes - (uint64_t)freed : nbytes + (uint64_t)-freed;
            size_t want = (size_t)MZ_MIN(now_left, (uint64_t)SIZE_MAX);
            if (xp.steps[k].opaque) {
                /* A baseline session: its own mode's eviction, once per call. */
                if (!done_opaque[i]) {
                    done_opaque[i] = true;
                    mz_evict_report br;
                    s = mz_evict(c, want, &br);
                    if (!s && br.bytes_freed) {
                        freed += (int64_t)br.bytes_freed;
                        moved++;
                        touched[i] = true;
                        r->n_kv_compressed += br.n_kv_compressed;
                        r->n_kv_stored_raw += br.n_kv_stored_raw;
                        r->n_kv_stored_compressed += br.n_kv_stored_compressed;
                        r->n_kv_compkv += br.n_kv_compkv;
                        r->n_weights_dropped += br.n_weights_dropped;
                        if (br.stage) r->stage = br.stage;
                    }
                }
                k++;
                continue;
            }
            if (xp.steps[k].deferred) {
                /* Computing: its share waits for its next step boundary. */
                if (!deferred_once) {
                    atomic_fetch_add(&c->pending_evict, want);
                    r->bytes_deferred += want;
                    deferred_once = true;
                }
                k++;
                continue;
            }
            /* The run of steps of this session. */
            size_t k1 = k;
            mz_evict_step *run = mz_calloc(xp.n - k, sizeof *run);
            if (!run) {
                s = mz_fail(MZ_E_NOMEM, "out of memory carrying out an eviction");
                break;
            }
            while (k1 < xp.n && !xp.steps[k1].deferred && !xp.steps[k1].opaque &&
                   xp.steps[k1].session == i) {
                run[k1 - k] = xp.steps[k1].step;
                k1++;
            }
            size_t m0 = moved;
            s = mz_mem_evict_steps(c->mem, run, k1 - k, nbytes, &freed, &moved, r);
            free(run);
            if (moved > m0) touched[i] = true;
            if (freed >= 0 && (uint64_t)freed >= nbytes) break;
            k = k1;
        }
        if (moved == 0) break; /* nothing movable left (or only deferred shares) */
    }
out:
    for (size_t i = 0; i < n; i++) {
        if (touched[i]) r->n_sessions++;
        if (locked[i]) pthread_mutex_unlock(&cs[i]->use_lock);
    }
    pthread_mutex_unlock(&e->lock);
    mz_xplan_free(&xp);
    free(cs);
    free(sv);
    free(locked);
    free(touched);
    free(done_opaque);
    r->bytes_freed = freed > 0 ? (size_t)freed : 0;
    r->complete = r->bytes_freed >= nbytes;
    r->time_ms = mz_time_ms() - t0;
    return s;
}

/* ---- statistics and listing ------------------------------------------------------- */

static void add_cat(mz_mem_category *to, const mz_mem_category *from)
{
    to->total_bytes += from->total_bytes;
    to->resident_bytes += from->resident_bytes;
    to->compressed_bytes += from->compressed_bytes;
    to->stored_bytes += from->stored_bytes;
    to->dropped_bytes += from->dropped_bytes;
    to->n_units += from->n_units;
    to->n_resident += from->n_resident;
}

void mz_engine_weights_stats(const mz_engine_t *e, mz_mem_category *w)
{
    memset(w, 0, sizeof *w);
    for (int l = 0; l < e->wt->n_layer; l++) {
        const mz_unit *u = &e->wt->units[l];
        w->total_bytes += u->bytes;
        w->n_units++;
        mz_unit_state st = mz_unit_state_get(u);
        if (st == MZ_UNIT_RESIDENT || st == MZ_UNIT_BUSY) {
            w->resident_bytes += u->bytes;
            w->n_resident++;
        } else if (st == MZ_UNIT_DROPPED) {
            w->dropped_bytes += u->bytes;
        }
    }
}

void mz_engine_get_mem_stats(mz_engine_t *e, mz_mem_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!e) return;
    pthread_mutex_lock(&e->shared.lock);
    const mz_swapfile_t *shared_swap = e->shared.swap;
    pthread_mutex_unlock(&e->shared.lock);
    pthread_mutex_lock(&e->lock);
    uint64_t best = 0;
    bool any = false;
    mz_mem_category kv = {0}, kv_dead = {0};
    size_t stack = 0, swap = 0;
    for (mz_ctx_t *c = e->sessions; c; c = c->next) {
        if (pthread_mutex_trylock(&c->use_lock) != 0) continue; /* computing: skipped */
        mz_mem_stats st;
        mz_get_mem_stats(c, &st);
        pthread_mutex_unlock(&c->use_lock);
        add_cat(&kv, &st.kv);
        add_cat(&kv_dead, &st.kv_out_of_window);
        stack += st.compstack_mapped_bytes;
        if (!shared_swap || mz_mem_swapfile(c->mem) != shared_swap)
            swap += st.swap_file_bytes; /* a file of its own */
        uint64_t lu = atomic_load(&c->last_use_ns);
        if (!any || lu >= best) {
            *out = st; /* policy fields of the session used last */
            best = lu;
            any = true;
        }
    }
    pthread_mutex_unlock(&e->lock);
    pthread_mutex_lock(&e->shared.lock);
    if (e->shared.swap) {
        mz_swapfile_stats ss;
        mz_swapfile_get_stats(e->shared.swap, &ss);
        swap += ss.file_bytes; /* the shared file once */
    }
    pthread_mutex_unlock(&e->shared.lock);
    out->kv = kv;
    out->kv_out_of_window = kv_dead;
    out->compstack_mapped_bytes = stack;
    out->swap_file_bytes = swap;
    mz_engine_weights_stats(e, &out->weights);
    out->pinned_bytes = e->model->pinned_bytes;
    size_t total = out->weights.total_bytes + out->kv.total_bytes;
    size_t kept = out->weights.resident_bytes + out->kv.resident_bytes + out->kv.compressed_bytes;
    out->remaining_pct = total ? 100.0 * (double)kept / (double)total : 100.0;
}

size_t mz_engine_n_sessions(mz_engine_t *e)
{
    if (!e) return 0;
    pthread_mutex_lock(&e->lock);
    size_t n = 0;
    for (mz_ctx_t *c = e->sessions; c; c = c->next) n++;
    pthread_mutex_unlock(&e->lock);
    return n;
}

size_t mz_engine_sessions(mz_engine_t *e, mz_session_info *out, size_t cap)
{
    if (!e) return 0;
    pthread_mutex_lock(&e->lock);
    size_t n = 0;
    for (mz_ctx_t *c = e->sessions; c; c = c->next, n++) {
        if (n >= cap || !out) continue;
        mz_session_info *in = &out[n];
        memset(in, 0, sizeof *in);
        in->ctx = c;
        in->id = c->id;
        memcpy(in->name, c->name, sizeof in->name);
        in->last_use_ns = atomic_load(&c->last_use_ns);
        in->deferred_freed_bytes = atomic_load(&c->deferred_freed);
        if (pthread_mutex_trylock(&c->use_lock) != 0) {
            in->busy = true; /* its tables are changing: counts left at 0 */
            continue;
        }
        in->busy = atomic_load(&c->busy);
        in->n_tokens = c->n_tokens;
        mz_mem_stats st;
        mz_get_mem_stats(c, &st);
        mz_restore_timings rt;
        mz_get_last_restore_timings(c, &rt);
        pthread_mutex_unlock(&c->use_lock);
        in->kv_resident_bytes = st.kv.resident_bytes;
        in->kv_compressed_bytes = st.kv.compressed_bytes;
        in->kv_stored_bytes = st.kv.stored_bytes;
        in->last_ttft_ms = rt.ttft_ms;
    }
    pthread_mutex_unlock(&e->lock);
    return n;
}
