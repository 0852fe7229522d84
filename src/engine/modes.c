/*
 * modes.c — the engine's side of the baseline modes (src/baseline): the
 * mode interface (mz_mode_ops, engine.h) over a session's mz_baseline, and
 * the handles and callbacks a mode works on (mz_mode_session). The session's
 * fields are written here, by the engine; a mode only asks.
 */
#include "engine.h"

#include "../baseline/baseline.h"

#include <string.h>

static size_t ms_n_tokens(void *ud) { return ((mz_ctx_t *)ud)->n_tokens; }

static mz_status ms_prefill(void *ud, const mz_token *t, size_t n)
{
    return mz_ctx_prefill_internal(ud, t, n); /* no mode hook: no re-entry */
}

/* The KV of every token again, from position 0: the tokens are fed back
 * through the forward pass; on failure the count stays (the mode drops the
 * partial KV). */
static mz_status ms_prefill_again(void *ud)
{
    mz_ctx_t *c = ud;
    size_t n = c->n_tokens;
    mz_token *copy = malloc(n * sizeof *copy);
    if (!copy) return mz_fail(MZ_E_NOMEM, "recompute: out of memory");
    memcpy(copy, c->tokens, n * sizeof *copy);
    c->n_tokens = 0;
    mz_status s = mz_ctx_prefill_internal(c, copy, n);
    free(copy);
    if (s) c->n_tokens = n;
    return s;
}

mz_status mz_ctx_mode_init(mz_ctx_t *c)
{
    const mz_mode_session ms = {.model = c->model, .kv = &c->kv, .mem = c->mem, .ud = c,
                                .n_tokens = ms_n_tokens, .prefill = ms_prefill,
                                .prefill_again = ms_prefill_again};
    return mz_baseline_init(&ms, c->engine->modes, c->params.mode, c->params.swap_dir, &c->base);
}

void mz_ctx_mode_free(mz_ctx_t *c)
{
    mz_baseline_free(c->base);
    c->base = NULL;
}

static mz_status ops_evict(mz_ctx_t *c, size_t nbytes, mz_evict_report *r)
{
    return mz_baseline_evict(c->base, nbytes, r);
}
static mz_status ops_restore(mz_ctx_t *c, mz_restore_report *r) { return mz_baseline_restore(c->base, r); }
static void ops_get_stats(const mz_ctx_t *c, mz_mem_stats *out) { mz_baseline_get_stats(c->base, out); }
static mz_status ops_before_prefill(mz_ctx_t *c) { return mz_baseline_before_prefill(c->base); }
static void ops_kv_truncate(mz_ctx_t *c, size_t n_keep) { mz_baseline_kv_truncate(c->base, n_keep); }

static mz_status ops_prefill_restore(mz_ctx_t *c, const mz_token *t, size_t n,
                                     const mz_restore_params *rp, mz_restore_timings *tm,
                                     double t0)
{
    (void)rp; /* the baselines restore sequentially, without the pipeline's knobs */
    mz_status s = mz_baseline_prefill_restore(c->base, t, n, tm, t0);
    if (s) snprintf(c->errmsg, sizeof c->errmsg, "%s", mz_last_error());
    return s;
}

static const mz_mode_ops baseline_ops = {.evict = ops_evict, .restore = ops_restore, .get_stats = ops_get_stats,
                                         .before_prefill = ops_before_prefill, .prefill_restore = ops_prefill_restore,
                                         .kv_truncate = ops_kv_truncate, .unit_plans = false};

const mz_mode_ops *mz_baseline_ops(void) { return &baseline_ops; }
