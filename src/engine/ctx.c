/*
 * ctx.c — the context object: owns the KV cache, the thread pool and the
 * scratch buffers, and splits a prefill into forward steps of n_batch tokens.
 */
#include "engine.h"

#include "../baseline/baseline.h"
#include "../kernels/kernels.h"

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

mz_status mz_ctx_init(mz_model_t *m, const mz_ctx_params *p, mz_ctx_t **out)
{
    mz_status s;
    *out = NULL;
    mz_clear_error();
    if (!m) return mz_fail(MZ_E_INVAL, "no model given");
    mz_ctx_params prm = p ? *p : mz_ctx_params_default();
    const mz_model_config *cfg = &m->cfg;
    if (prm.n_ctx < 0 || prm.n_batch < 0 || prm.n_threads < 0)
        return mz_fail(MZ_E_INVAL, "negative context parameter");
    size_t n_ctx = prm.n_ctx ? (size_t)prm.n_ctx : (size_t)cfg->n_ctx_train;
    int n_threads = prm.n_threads ? prm.n_threads : mz_n_cpus();
    int n_batch = prm.n_batch ? prm.n_batch : 64;
    if (n_threads > 256) n_threads = 256;
    if (n_batch > 4096) n_batch = 4096;

    mz_ctx_t *c = mz_calloc(1, sizeof *c);
    if (!c) return MZ_E_NOMEM;
    c->model = m;
    c->params = prm;
    c->n_ctx = n_ctx;
    c->n_batch = n_batch;
    if ((s = mz_kv_cache_init(&c->kv, cfg->n_layer, cfg->n_head_kv, cfg->head_dim, n_ctx))) goto out_fail;
    {
        mz_mem_params mp = {.codec = prm.kv_codec, .swap_dir = prm.swap_dir,
                            .placement = prm.kv_placement, .profile_path = prm.profile_path,
                            .order = prm.evict_order, .seed = prm.evict_seed};
        mz_baseline_mem_params(prm.mode, &mp);
        if ((s = mz_mem_init(m, &c->kv, &mp, &c->mem))) goto out_fail;
        if ((s = mz_baseline_init(c, &prm))) goto out_fail; /* engine mode (src/baseline) */
        /* The strings were copied; don't keep the caller's pointers. */
        c->params.kv_codec = NULL;
        c->params.swap_dir = NULL;
        c->params.profile_path = NULL;
    }
    if ((s = scratch_init(&c->s, cfg, (size_t)n_batch))) goto out_fail;
    c->tokens = mz_calloc(n_ctx, sizeof *c->tokens);
    if (!c->tokens) {
        s = MZ_E_NOMEM;
        goto out_fail;
    }
    c->pool = mz_threadpool_init(n_threads);
    if (!c->pool) {
        s = mz_fail(MZ_E_NOMEM, "cannot start %d compute threads", n_threads);
        goto out_fail;
    }
    *out = c;
    return MZ_OK;
out_fail:
    mz_ctx_free(c);
    return s;
}

void mz_ctx_free(mz_ctx_t *c)
{
    if (!c) return;
    mz_threadpool_free(c->pool);
    mz_baseline_free(c);
    mz_mem_free(c->mem);
    mz_kv_cache_free(&c->kv);
    scratch_free(&c->s);
    free(c->tokens);
    free(c);
}

const char *mz_ctx_errmsg(const mz_ctx_t *c) { return c ? c->errmsg : mz_last_error(); }

static mz_status ctx_fail(mz_ctx_t *c, mz_status s)
{
    snprintf(c->errmsg, sizeof c->errmsg, "%s", mz_last_error());
    return s;
}

mz_status mz_prefill(mz_ctx_t *c, const mz_token *tokens, size_t n_tokens)
{
    if (!c || (!tokens && n_tokens)) return mz_fail(MZ_E_INVAL, "null argument");
    if (n_tokens == 0) return MZ_OK;
    mz_clear_error();
    if (n_tokens > c->n_ctx - c->n_tokens) {
        mz_fail(MZ_E_CONTEXT_FULL,
                "%zu new tokens do not fit: %zu of %zu context positions are used",
                n_tokens, c->n_tokens, c->n_ctx);
        return ctx_fail(c, MZ_E_CONTEXT_FULL);
    }
    if (c->params.mode != MZ_MODE_MZCACHE) {
        /* Baselines that restore before computing (recompute: the context again). */
        mz_status sb = mz_baseline_before_prefill(c);
        if (sb) return ctx_fail(c, sb);
    }
    const size_t n0 = c->n_tokens;
    double t0 = mz_time_ms();
    mz_status s = MZ_OK;
    for (size_t done = 0; done < n_tokens;) {
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

mz_status mz_ctx_truncate(mz_ctx_t *c, size_t n_keep)
{
    if (n_keep > c->n_tokens) return mz_fail(MZ_E_RANGE, "cannot keep %zu of %zu tokens", n_keep, c->n_tokens);
    mz_clear_error();
    /* Evicted chunks beyond n_keep give up their stored copies first. */
    mz_status s = mz_mem_kv_truncate(c->mem, n_keep);
    if (s) return ctx_fail(c, s);
    if (n_keep < c->n_tokens) c->have_logits = false;
    c->n_tokens = n_keep;
    mz_baseline_kv_truncate(c, n_keep); /* before the chunks go (os-paging's file-backed ones) */
    mz_kv_cache_shrink(&c->kv, n_keep);
    return MZ_OK;
}

void mz_ctx_get_timings(const mz_ctx_t *c, mz_ctx_timings *out) { *out = c->timings; }
void mz_ctx_reset_timings(mz_ctx_t *c) { memset(&c->timings, 0, sizeof c->timings); }

/* ---- elastic memory ------------------------------------------------------------- */

mz_status mz_evict(mz_ctx_t *c, size_t nbytes, mz_evict_report *report)
{
    if (!c) return mz_fail(MZ_E_INVAL, "null context");
    mz_clear_error();
    mz_status s = c->params.mode != MZ_MODE_MZCACHE ? mz_baseline_evict(c, nbytes, report)
                                                    : mz_mem_evict(c->mem, nbytes, report);
    return s ? ctx_fail(c, s) : MZ_OK;
}

mz_status mz_restore(mz_ctx_t *c, mz_restore_report *report)
{
    if (!c) return mz_fail(MZ_E_INVAL, "null context");
    mz_clear_error();
    mz_status s = c->params.mode != MZ_MODE_MZCACHE ? mz_baseline_restore(c, report)
                                                    : mz_mem_restore_all(c->mem, report);
    return s ? ctx_fail(c, s) : MZ_OK;
}

void mz_get_mem_stats(const mz_ctx_t *c, mz_mem_stats *out)
{
    if (c->params.mode != MZ_MODE_MZCACHE) mz_baseline_get_stats(c, out);
    else mz_mem_get_stats(c->mem, out);
}

/* ---- restore_generate (pipelined restore; manager.c has the workers) -------------- */

mz_restore_params mz_restore_params_default(void)
{
    return (mz_restore_params){.overlap = MZ_OVERLAP_ALL, .n_restore_threads = 0};
}

static mz_status prefill_restore(mz_ctx_t *c, const mz_token *tokens, size_t n,
                                 const mz_restore_params *p, mz_restore_timings *tm, double t0)
{
    mz_restore_params rp = p ? *p : mz_restore_params_default();
    if ((unsigned)rp.overlap > (unsigned)MZ_OVERLAP_RELOAD_PREFILL)
        return ctx_fail(c, mz_fail(MZ_E_INVAL, "unknown restore overlap mode %d", (int)rp.overlap));
    if (rp.n_restore_threads < 0 || rp.n_restore_threads > 3)
        return ctx_fail(c, mz_fail(MZ_E_INVAL, "n_restore_threads %d: use 0 (profile) or 1..3",
                                   rp.n_restore_threads));
    mz_clear_error();
    if (c->params.mode != MZ_MODE_MZCACHE) {
        /* Baselines: restore the mode's way, then prefill (src/baseline). */
        mz_status sb = mz_baseline_prefill_restore(c, tokens, n, tm, t0);
        mz_mem_set_last_restore(c->mem, tm);
        return sb;
    }
    mz_restore_job_params jp = {
        .overlap_alloc = rp.overlap == MZ_OVERLAP_ALL || rp.overlap == MZ_OVERLAP_ALLOC_RELOAD,
        .delay_us_max = rp.debug_delay_us,
        .seed = rp.seed,
        .n_threads = rp.n_restore_threads,
    };
    bool overlap_prefill = rp.overlap == MZ_OVERLAP_ALL || rp.overlap == MZ_OVERLAP_RELOAD_PREFILL;
    mz_status s = mz_mem_restore_begin(c->mem, &jp);
    if (s) return ctx_fail(c, s);
    if (!overlap_prefill) s = mz_mem_restore_wait(c->mem);
    double tp = mz_time_ms();
    if (!s) s = mz_prefill(c, tokens, n);
    double t1 = mz_time_ms();
    mz_status s2 = mz_mem_restore_end(c->mem, tm);
    if (!s) s = s2;
    tm->prefill_ms = t1 - tp;
    tm->ttft_ms = t1 - t0;
    mz_mem_set_last_restore(c->mem, tm);
    if (s) {
        snprintf(c->errmsg, sizeof c->errmsg, "%s", mz_last_error());
        return s;
    }
    return MZ_OK;
}

mz_status mz_prefill_restore(mz_ctx_t *c, const mz_token *tokens, size_t n,
                             const mz_restore_params *p, mz_restore_timings *out)
{
    if (!c || (!tokens && n)) return mz_fail(MZ_E_INVAL, "null argument");
    mz_restore_timings tm;
    mz_status s = prefill_restore(c, tokens, n, p, &tm, mz_time_ms());
    if (out) *out = tm;
    return s;
}

mz_status mz_restore_generate(mz_ctx_t *c, const mz_token *tokens, size_t n,
                              const mz_restore_params *p, mz_sampler_t *smp, size_t max_tokens,
                              mz_token_fn cb, void *user, size_t *n_generated,
                              mz_restore_timings *out)
{
    if (n_generated) *n_generated = 0;
    if (!c || (!tokens && n)) return mz_fail(MZ_E_INVAL, "null argument");
    double t0 = mz_time_ms();
    mz_restore_timings tm;
    mz_status s = prefill_restore(c, tokens, n, p, &tm, t0);
    if (out) *out = tm;
    if (s) return s;
    const int nv = c->model->cfg.n_vocab;
    size_t ng = 0;
    for (size_t i = 0; i < max_tokens; i++) {
        const float *lg = mz_ctx_logits(c);
        if (!lg) break;
        mz_token t = 0;
        if (smp) {
            t = mz_sampler_sample(smp, lg, nv);
        } else {
            for (int v = 1; v < nv; v++)
                if (lg[v] > lg[t]) t = v;
        }
        if (i == 0) {
            tm.ttft_ms = mz_time_ms() - t0;
            mz_mem_set_last_restore(c->mem, &tm);
            if (out) *out = tm;
        }
        if (mz_token_is_eog(c->model, t)) break;
        if (smp) mz_sampler_accept(smp, t);
        ng++;
        if (n_generated) *n_generated = ng;
        if (cb && !cb(user, t)) break;
        if ((s = mz_prefill(c, &t, 1))) return s;
    }
    return MZ_OK;
}

void mz_get_last_restore_timings(const mz_ctx_t *c, mz_restore_timings *out)
{
    mz_mem_last_restore(c->mem, out);
}
