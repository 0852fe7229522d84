/*
 * baseline.c — the engine modes other than mzcache (contract in baseline.h):
 * dispatch, and the partial-offload and recompute baselines, which reuse the
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
    mz_mode_session ms;        /* the session's handles */
    mz_ospage_model *fm;       /* the engine's registry */
    mz_engine_mode mode;
    mz_ospage *op;             /* os-paging */
    bool evicted;              /* partial-offload: something may be evicted */
    bool kv_dropped;           /* recompute: the KV is gone, the tokens must be prefilled again */
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

mz_status mz_baseline_init(const mz_mode_session *ms, mz_ospage_model *fm, mz_engine_mode mode,
                           const char *swap_dir, mz_baseline **out)
{
    *out = NULL;
    if (!mz_engine_mode_name(mode)) return mz_fail(MZ_E_INVAL, "unknown engine mode %d", (int)mode);
    mz_status s = mz_ospage_model_attach(fm, mode);
    if (s) return s;
    mz_baseline *b = mz_calloc(1, sizeof *b);
    if (!b) {
        mz_ospage_model_detach(fm, mode);
        return MZ_E_NOMEM;
    }
    b->ms = *ms;
    b->fm = fm;
    b->mode = mode;
    if (mode == MZ_MODE_OS_PAGING && (s = mz_ospage_init(&b->ms, fm, swap_dir, &b->op))) {
        free(b);
        mz_ospage_model_detach(fm, mode);
        return s;
    }
    *out = b;
    return MZ_OK;
}

void mz_baseline_free(mz_baseline *b)
{
    if (!b) return;
    mz_ospage_free(b->op);
    mz_ospage_model_detach(b->fm, b->mode);
    free(b);
}

/* ---- recompute ---------------------------------------------------------------------- */

static size_t kept_bytes(const mz_mem_stats *st)
{
    return st->weights.resident_bytes + st->weights.compressed_bytes + st->kv.resident_bytes +
           st->kv.compressed_bytes;
}

static mz_status drop_kv(const mz_mode_session *ms)
{
    mz_status s = mz_mem_kv_truncate(ms->mem, 0);
    if (s) return s;
    mz_kv_cache_shrink(ms->kv, 0);
    return MZ_OK;
}

static mz_status recompute_evict(mz_baseline *b, size_t nbytes, mz_evict_report *r)
{
    const mz_mode_session *ms = &b->ms;
    mz_status s;
    mz_mem_stats st0, st1;
    mz_mem_get_stats(ms->mem, &st0);
    if (!b->kv_dropped && ms->n_tokens(ms->ud) > 0) {
        if ((s = drop_kv(ms))) return s;
        b->kv_dropped = true;
    }
    mz_evict_report wr;
    if ((s = mz_mem_evict(ms->mem, SIZE_MAX, &wr))) return s;
    mz_mem_get_stats(ms->mem, &st1);
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
static mz_status recompute_kv(mz_baseline *b)
{
    const mz_mode_session *ms = &b->ms;
    size_t n = ms->n_tokens(ms->ud);
    if (n == 0) {
        b->kv_dropped = false;
        return MZ_OK;
    }
    mz_status s = ms->prefill_again(ms->ud);
    if (s) {
        /* Back to "evicted": the length stays, the partial KV goes. */
        mz_status s2 = drop_kv(ms);
        (void)s2;
        return mz_fail_prefix(s, "recompute: prefilling the %zu-token context again failed", n);
    }
    b->kv_dropped = false;
    return MZ_OK;
}

/* ---- dispatch ------------------------------------------------------------------------- */

mz_status mz_baseline_evict(mz_baseline *b, size_t nbytes, mz_evict_report *r)
{
    mz_evict_report scratch;
    r = mz_evict_report_start(r, &scratch, nbytes);
    if (nbytes == 0) {
        r->complete = true;
        return MZ_OK;
    }
    double t0 = mz_time_ms();
    mz_status s = MZ_OK;
    switch (b->mode) {
    case MZ_MODE_OS_PAGING: return mz_ospage_evict(&b->ms, b->op, nbytes, r);
    case MZ_MODE_PARTIAL_OFFLOAD:
        s = mz_mem_evict(b->ms.mem, nbytes, r);
        b->evicted = true;
        return s;
    case MZ_MODE_RECOMPUTE: s = recompute_evict(b, nbytes, r); break;
    default: s = mz_fail(MZ_E_INVAL, "unknown engine mode %d", (int)b->mode); break;
    }
    r->complete = r->bytes_freed >= nbytes;
    r->time_ms = mz_time_ms() - t0;
    return s;
}

mz_status mz_baseline_restore(mz_baseline *b, mz_restore_report *r)
{
    const mz_mode_session *ms = &b->ms;
    mz_restore_report dummy;
    if (!r) r = &dummy;
    memset(r, 0, sizeof *r);
    mz_status s;
    switch (b->mode) {
    case MZ_MODE_OS_PAGING: return mz_ospage_restore(ms, b->op, r);
    case MZ_MODE_PARTIAL_OFFLOAD:
        if ((s = mz_mem_restore_all(ms->mem, r)) == MZ_OK) b->evicted = false;
        return s;
    case MZ_MODE_RECOMPUTE: {
        double t0 = mz_time_ms();
        if ((s = mz_mem_restore_all(ms->mem, r))) return s;
        b->reload_ms = mz_time_ms() - t0;
        if (b->kv_dropped) {
            size_t n0 = ms->kv->n_chunks;
            if ((s = recompute_kv(b))) return s;
            r->bytes_restored += (ms->kv->n_chunks - n0) * (size_t)ms->kv->n_layer * ms->kv->chunk_bytes;
        }
        r->time_ms = mz_time_ms() - t0;
        return MZ_OK;
    }
    default: return mz_fail(MZ_E_INVAL, "unknown engine mode %d", (int)b->mode);
    }
}

mz_status mz_baseline_before_prefill(mz_baseline *b)
{
    if (!b) return MZ_OK;
    if ((b->mode == MZ_MODE_PARTIAL_OFFLOAD && b->evicted) ||
        (b->mode == MZ_MODE_RECOMPUTE && b->kv_dropped))
        return mz_baseline_restore(b, NULL);
    return MZ_OK;
}

mz_status mz_baseline_prefill_restore(mz_baseline *b, const mz_token *t, size_t n,
                                      mz_restore_timings *tm, double t0)
{
    memset(tm, 0, sizeof *tm);
    mz_restore_report rr = {0};
    mz_status s = MZ_OK;
    /* os-paging restores by page faults during the prefill: nothing before it. */
    if (b->mode != MZ_MODE_OS_PAGING) s = mz_baseline_restore(b, &rr);
    double tr = mz_time_ms();
    tm->restore_ms = tr - t0;
    tm->n_units = rr.n_kv_decoded + rr.n_kv_read_raw + rr.n_kv_read_compressed + rr.n_weights_loaded;
    tm->n_storage_units = tm->n_units;
    tm->n_ready = tm->n_units;
    tm->storage_ms = b->mode == MZ_MODE_RECOMPUTE ? b->reload_ms : rr.time_ms;
    if (!s) s = b->ms.prefill(b->ms.ud, t, n);
    double t1 = mz_time_ms();
    tm->prefill_ms = t1 - tr;
    tm->ttft_ms = t1 - t0;
    return s;
}

void mz_baseline_kv_truncate(mz_baseline *b, size_t n_keep)
{
    if (b && b->mode == MZ_MODE_OS_PAGING) mz_ospage_kv_truncate(&b->ms, b->op, n_keep);
}

void mz_baseline_get_stats(const mz_baseline *b, mz_mem_stats *out)
{
    const mz_mode_session *ms = &b->ms;
    if (b->mode == MZ_MODE_OS_PAGING) {
        mz_ospage_get_stats(ms, b->op, out);
        return;
    }
    mz_mem_get_stats(ms->mem, out);
    if (b->mode == MZ_MODE_RECOMPUTE && b->kv_dropped) {
        /* The KV that exists only as tokens to prefill again. */
        size_t chunks = (ms->n_tokens(ms->ud) + MZ_KV_CHUNK_TOKENS - 1) / MZ_KV_CHUNK_TOKENS;
        size_t units = chunks * (size_t)ms->kv->n_layer;
        out->kv.total_bytes += units * ms->kv->chunk_bytes;
        out->kv.dropped_bytes += units * ms->kv->chunk_bytes;
        out->kv.n_units += units;
        size_t total = out->weights.total_bytes + out->kv.total_bytes;
        out->remaining_pct = total ? 100.0 * (double)kept_bytes(out) / (double)total : 100.0;
    }
    snprintf(out->policy, sizeof out->policy, "%s", mz_engine_mode_name(b->mode));
}
