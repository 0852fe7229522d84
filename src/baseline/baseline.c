/*
 * baseline.c — the engine modes other than mzcache (contract in baseline.h):
 * the engine's mode interface for them (mz_mode_ops, engine.h), dispatch, and
 * the partial-offload and recompute baselines, which reuse the
 * memory manager's mechanism (src/mem/manager.c: raw KV to the swap file,
 * weight blocks dropped and reloaded from the model file with O_DIRECT and a
 * hash check, restore_all: one thread, forward order).
 *
 * partial-offload: mz_evict runs the manager with the layer-granular policy
 * (policy_layer.c); any restore first brings every evicted unit back with
 * mz_mem_restore_all (sequential, no pipelining), then the prefill runs.
 *
 * recompute (cold start): mz_evict drops every KV chunk (the token list and
 * the context's length stay, so callers see the same conversation) and every
 * weight block; a restore reloads the weights from the model file and runs
 * the forward pass over the whole token list again. The forward pass gives a
 * token the same bits whatever batch it is in (ARCHITECTURE.md, "Forward
 * pass"), so the KV and the logits come back identical.
 */
#include "baseline.h"

#include <string.h>

struct mz_baseline {
    mz_engine_mode mode;
    mz_ospage *op;             /* os-paging */
    bool evicted;              /* partial-offload: something may be evicted */
    bool kv_dropped;           /* recompute: the KV is gone, c->tokens must be prefilled again */
    double reload_ms;          /* recompute: weights part of the last restore */
};

void mz_baseline_mem_params(mz_engine_mode mode, mz_mem_params *mp)
{
    if (mode == MZ_MODE_PARTIAL_OFFLOAD) {
        mp->placement = MZ_KV_PLACE_STORAGE;
        mp->policy_init = mz_policy_layer_init;
    } else if (mode == MZ_MODE_RECOMPUTE) {
        /* Only weight blocks ever go through the manager (KV is dropped). */
        mp->placement = MZ_KV_PLACE_STORAGE;
        mp->policy_init = mz_policy_layer_init;
    }
}

mz_status mz_baseline_init(mz_ctx_t *c, const mz_ctx_params *p)
{
    mz_engine_mode mode = p->mode;
    if (!mz_engine_mode_name(mode)) return mz_fail(MZ_E_INVAL, "unknown engine mode %d", (int)mode);
    mz_status s = mz_ospage_model_attach(c->model, mode);
    if (s) return s;
    mz_baseline *b = mz_calloc(1, sizeof *b);
    if (!b) {
        mz_ospage_model_detach(c->model, mode);
        return MZ_E_NOMEM;
    }
    b->mode = mode;
    if (mode == MZ_MODE_OS_PAGING && (s = mz_ospage_init(c, p->swap_dir, &b->op))) {
        free(b);
        mz_ospage_model_detach(c->model, mode);
        return s;
    }
    c->base = b;
    return MZ_OK;
}

void mz_baseline_free(mz_ctx_t *c)
{
    mz_baseline *b = c->base;
    if (!b) return;
    mz_ospage_free(c, b->op);
    mz_ospage_model_detach(c->model, b->mode);
    free(b);
    c->base = NULL;
}

/* ---- recompute ---------------------------------------------------------------------- */

static size_t kept_bytes(const mz_mem_stats *st)
{
    return st->weights.resident_bytes + st->weights.compressed_bytes + st->kv.resident_bytes +
           st->kv.compressed_bytes;
}

static mz_status drop_kv(mz_ctx_t *c)
{
    mz_status s = mz_mem_kv_truncate(c->mem, 0);
    if (s) return s;
    mz_kv_cache_shrink(&c->kv, 0);
    return MZ_OK;
}

static mz_status recompute_evict(mz_ctx_t *c, mz_baseline *b, size_t nbytes, mz_evict_report *r)
{
    mz_status s;
    mz_mem_stats st0, st1;
    mz_mem_get_stats(c->mem, &st0);
    if (!b->kv_dropped && c->n_tokens > 0) {
        if ((s = drop_kv(c))) return s;
        b->kv_dropped = true;
    }
    mz_evict_report wr;
    if ((s = mz_mem_evict(c->mem, SIZE_MAX, &wr))) return s;
    mz_mem_get_stats(c->mem, &st1);
    size_t k0 = kept_bytes(&st0), k1 = kept_bytes(&st1);
    r->bytes_freed = k0 > k1 ? k0 - k1 : 0;
    r->n_weights_dropped = wr.n_weights_dropped;
    r->stage = wr.n_weights_dropped ? MZ_EVICT_STAGE_W_ONLY
               : b->kv_dropped     ? MZ_EVICT_STAGE_KV_ONLY
                                   : MZ_EVICT_STAGE_NONE;
    (void)nbytes;
    return MZ_OK;
}

/* Prefills the whole token list again (the KV was dropped). */
static mz_status recompute_kv(mz_ctx_t *c, mz_baseline *b)
{
    size_t n = c->n_tokens;
    if (n == 0) {
        b->kv_dropped = false;
        return MZ_OK;
    }
    mz_token *copy = malloc(n * sizeof *copy);
    if (!copy) return mz_fail(MZ_E_NOMEM, "recompute: out of memory");
    memcpy(copy, c->tokens, n * sizeof *copy);
    c->n_tokens = 0;
    mz_status s = mz_ctx_prefill_internal(c, copy, n); /* no mode hook: no re-entry */
    free(copy);
    if (s) {
        /* Back to "evicted": the length stays, the partial KV goes. */
        c->n_tokens = n;
        mz_status s2 = drop_kv(c);
        (void)s2;
        return mz_fail_prefix(s, "recompute: prefilling the %zu-token context again failed", n);
    }
    b->kv_dropped = false;
    return MZ_OK;
}

/* ---- dispatch ------------------------------------------------------------------------- */

mz_status mz_baseline_evict(mz_ctx_t *c, size_t nbytes, mz_evict_report *r)
{
    mz_baseline *b = c->base;
    mz_evict_report dummy;
    if (!r) r = &dummy;
    memset(r, 0, sizeof *r);
    r->bytes_requested = nbytes;
    if (nbytes == 0) {
        r->complete = true;
        return MZ_OK;
    }
    double t0 = mz_time_ms();
    mz_status s = MZ_OK;
    switch (b->mode) {
    case MZ_MODE_OS_PAGING: return mz_ospage_evict(c, b->op, nbytes, r);
    case MZ_MODE_PARTIAL_OFFLOAD:
        s = mz_mem_evict(c->mem, nbytes, r);
        b->evicted = true;
        return s;
    case MZ_MODE_RECOMPUTE: s = recompute_evict(c, b, nbytes, r); break;
    default: s = mz_fail(MZ_E_INVAL, "unknown engine mode %d", (int)b->mode); break;
    }
    r->complete = r->bytes_freed >= nbytes;
    r->time_ms = mz_time_ms() - t0;
    return s;
}

mz_status mz_baseline_restore(mz_ctx_t *c, mz_restore_report *r)
{
    mz_baseline *b = c->base;
    mz_restore_report dummy;
    if (!r) r = &dummy;
    memset(r, 0, sizeof *r);
    mz_status s;
    switch (b->mode) {
    case MZ_MODE_OS_PAGING: return mz_ospage_restore(c, b->op, r);
    case MZ_MODE_PARTIAL_OFFLOAD:
        if ((s = mz_mem_restore_all(c->mem, r)) == MZ_OK) b->evicted = false;
        return s;
    case MZ_MODE_RECOMPUTE: {
        double t0 = mz_time_ms();
        if ((s = mz_mem_restore_all(c->mem, r))) return s;
        b->reload_ms = mz_time_ms() - t0;
        if (b->kv_dropped) {
            size_t n0 = c->kv.n_chunks;
            if ((s = recompute_kv(c, b))) return s;
            r->bytes_restored += (c->kv.n_chunks - n0) * (size_t)c->kv.n_layer * c->kv.chunk_bytes;
        }
        r->time_ms = mz_time_ms() - t0;
        return MZ_OK;
    }
    default: return mz_fail(MZ_E_INVAL, "unknown engine mode %d", (int)b->mode);
    }
}

mz_status mz_baseline_before_prefill(mz_ctx_t *c)
{
    mz_baseline *b = c->base;
    if (!b) return MZ_OK;
    if ((b->mode == MZ_MODE_PARTIAL_OFFLOAD && b->evicted) ||
        (b->mode == MZ_MODE_RECOMPUTE && b->kv_dropped))
        return mz_baseline_restore(c, NULL);
    return MZ_OK;
}

mz_status mz_baseline_prefill_restore(mz_ctx_t *c, const mz_token *t, size_t n,
                                      mz_restore_timings *tm, double t0)
{
    mz_baseline *b = c->base;
    memset(tm, 0, sizeof *tm);
    mz_restore_report rr = {0};
    mz_status s = MZ_OK;
    /* os-paging restores by page faults during the prefill: nothing before it. */
    if (b->mode != MZ_MODE_OS_PAGING) s = mz_baseline_restore(c, &rr);
    double tr = mz_time_ms();
    tm->restore_ms = tr - t0;
    tm->n_units = rr.n_kv_decoded + rr.n_kv_read_raw + rr.n_kv_read_compressed + rr.n_weights_loaded;
    tm->n_storage_units = tm->n_units;
    tm->n_ready = tm->n_units;
    tm->storage_ms = b->mode == MZ_MODE_RECOMPUTE ? b->reload_ms : rr.time_ms;
    if (!s) s = mz_ctx_prefill_internal(c, t, n);
    double t1 = mz_time_ms();
    tm->prefill_ms = t1 - tr;
    tm->ttft_ms = t1 - t0;
    if (s) snprintf(c->errmsg, sizeof c->errmsg, "%s", mz_last_error());
    return s;
}

void mz_baseline_kv_truncate(mz_ctx_t *c, size_t n_keep)
{
    mz_baseline *b = c->base;
    if (b && b->mode == MZ_MODE_OS_PAGING) mz_ospage_kv_truncate(c, b->op, n_keep);
}

void mz_baseline_get_stats(const mz_ctx_t *c, mz_mem_stats *out)
{
    mz_baseline *b = c->base;
    if (b->mode == MZ_MODE_OS_PAGING) {
        mz_ospage_get_stats(c, b->op, out);
        return;
    }
    mz_mem_get_stats(c->mem, out);
    if (b->mode == MZ_MODE_RECOMPUTE && b->kv_dropped) {
        /* The KV that exists only as tokens to prefill again. */
        size_t chunks = (c->n_tokens + MZ_KV_CHUNK_TOKENS - 1) / MZ_KV_CHUNK_TOKENS;
        size_t units = chunks * (size_t)c->kv.n_layer;
        out->kv.total_bytes += units * c->kv.chunk_bytes;
        out->kv.dropped_bytes += units * c->kv.chunk_bytes;
        out->kv.n_units += units;
        size_t total = out->weights.total_bytes + out->kv.total_bytes;
        out->remaining_pct = total ? 100.0 * (double)kept_bytes(out) / (double)total : 100.0;
    }
    snprintf(out->policy, sizeof out->policy, "%s", mz_engine_mode_name(b->mode));
}

/* ---- the baselines behind the engine's mode interface (engine.h) ---------------------- */

static mz_status ops_prefill_restore(mz_ctx_t *c, const mz_token *t, size_t n,
                                     const mz_restore_params *rp, mz_restore_timings *tm,
                                     double t0)
{
    (void)rp; /* the baselines restore sequentially, without the pipeline's knobs */
    return mz_baseline_prefill_restore(c, t, n, tm, t0);
}

static const mz_mode_ops baseline_ops = {
    .name = "baseline",
    .evict = mz_baseline_evict,
    .restore = mz_baseline_restore,
    .get_stats = mz_baseline_get_stats,
    .before_prefill = mz_baseline_before_prefill,
    .prefill_restore = ops_prefill_restore,
    .kv_truncate = mz_baseline_kv_truncate,
    .unit_plans = false,
};

const mz_mode_ops *mz_baseline_ops(void) { return &baseline_ops; }
