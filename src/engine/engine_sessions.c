/*
 * engine_sessions.c — the way back of the cross-session eviction
 * (include/mzcache.h, "engine and sessions"): mz_engine_restore brings every
 * session's evicted units and the shared weights back, least recently used
 * session first, so the session used last is the last one touched. The
 * engine owns the session list (session.c, under e->lock); this file reads
 * it and restores through each session's own calls.
 *
 * The list is copied under e->lock and the restores run without it: a
 * restore computes (the compute lock, the session's use lock), and
 * mz_engine_evict, which holds e->lock throughout, must not wait for it.
 * The caller keeps the sessions alive meanwhile (its contract: a session is
 * freed by its user thread, never during a call on its engine).
 */
#define _GNU_SOURCE
#include "engine.h"

#include <stdlib.h>
#include <string.h>

typedef struct lru_entry {
    mz_ctx_t *c;
    uint64_t last_use;
} lru_entry;

static int by_last_use(const void *a, const void *b)
{
    uint64_t x = ((const lru_entry *)a)->last_use, y = ((const lru_entry *)b)->last_use;
    return x < y ? -1 : x > y;
}

/* The sessions, least recently used first (*n of them); NULL with *n == 0
 * when there is none, NULL with *n > 0 when out of memory. */
static lru_entry *sessions_lru(mz_engine_t *e, size_t *n)
{
    pthread_mutex_lock(&e->lock);
    size_t k = 0;
    for (mz_ctx_t *c = e->sessions; c; c = c->next) k++;
    lru_entry *v = k ? malloc(k * sizeof *v) : NULL;
    if (v) {
        size_t i = 0;
        for (mz_ctx_t *c = e->sessions; c; c = c->next, i++)
            v[i] = (lru_entry){.c = c, .last_use = atomic_load(&c->last_use_ns)};
    }
    pthread_mutex_unlock(&e->lock);
    *n = k;
    if (v) qsort(v, k, sizeof *v, by_last_use);
    return v;
}

static size_t resident_bytes(mz_engine_t *e)
{
    mz_mem_stats st;
    mz_engine_get_mem_stats(e, &st);
    return st.weights.resident_bytes + st.kv.resident_bytes;
}

mz_status mz_engine_restore(mz_engine_t *e, const mz_engine_restore_params *p, mz_restore_report *report,
                            mz_engine_restore_units *units)
{
    mz_restore_report scratch;
    mz_engine_restore_units uscratch;
    if (!report) report = &scratch;
    if (!units) units = &uscratch;
    memset(report, 0, sizeof *report);
    memset(units, 0, sizeof *units);
    if (!e) return mz_fail(MZ_E_INVAL, "null engine");
    mz_clear_error();
    bool pipelined = p && p->pipelined;
    double t0 = mz_time_ms();
    size_t n = 0;
    lru_entry *v = sessions_lru(e, &n);
    if (!v && n) return mz_fail(MZ_E_NOMEM, "out of memory listing the sessions");
    size_t before = pipelined ? resident_bytes(e) : 0;
    mz_status rc = MZ_OK;
    char first_err[256] = "";
    for (size_t i = 0; i < n; i++) {
        mz_status st;
        if (pipelined) {
            mz_restore_timings tm = {0};
            /* Every unit back before the call returns, and any failure
             * reported (mzcache.h): the memory path does not go on after it. */
            mz_restore_experimental rx = mz_restore_experimental_default();
            rx.wait_all = true;
            mz_restore_params rp = mz_restore_params_default();
            rp.experimental = &rx;
            st = mz_prefill_restore(v[i].c, NULL, 0, &rp, &tm);
            units->n_storage += tm.n_storage_units;
            units->n_memory += tm.n_mem_units;
        } else {
            mz_restore_report r = {0};
            st = mz_restore(v[i].c, &r);
            report->bytes_restored += r.bytes_restored;
            report->n_kv_decoded += r.n_kv_decoded;
            report->n_kv_read_raw += r.n_kv_read_raw;
            report->n_kv_read_compressed += r.n_kv_read_compressed;
            report->n_weights_loaded += r.n_weights_loaded;
        }
        if (st) {
            if (!rc) snprintf(first_err, sizeof first_err, "session %llu: %s",
                              (unsigned long long)mz_ctx_id(v[i].c), mz_ctx_errmsg(v[i].c));
            rc = st;
            units->n_failed++;
        }
    }
    free(v);
    if (pipelined) {
        size_t after = resident_bytes(e);
        report->bytes_restored = after > before ? after - before : 0;
    }
    report->time_ms = mz_time_ms() - t0;
    if (rc) return mz_fail(rc, "restore across sessions: %s", first_err);
    return MZ_OK;
}

/* ---- the memory budget ----------------------------------------------------------- */

static size_t session_kv_footprint(const mz_mem_stats *st)
{
    size_t comp = MZ_MAX(st->kv.compressed_bytes, st->compstack_mapped_bytes);
    return st->kv.resident_bytes + comp;
}

size_t mz_engine_footprint(mz_engine_t *e)
{
    if (!e) return 0;
    /* The weights from the engine's own table: mz_engine_get_mem_stats would
     * also read every session's stats, which the loop below reads anyway. */
    mz_mem_category w;
    mz_engine_weights_stats(e, &w);
    size_t fp = e->model->pinned_bytes + w.resident_bytes + w.compressed_bytes;
    mz_mem_stats st;
    size_t n = 0;
    lru_entry *v = sessions_lru(e, &n);
    for (size_t i = 0; v && i < n; i++) {
        mz_get_mem_stats(v[i].c, &st);
        fp += session_kv_footprint(&st);
    }
    free(v);
    return fp;
}

mz_status mz_engine_keep_budget(mz_engine_t *e, mz_budget_report *report)
{
    mz_budget_report scratch;
    if (!report) report = &scratch;
    memset(report, 0, sizeof *report);
    if (!e) return mz_fail(MZ_E_INVAL, "null engine");
    mz_clear_error();
    size_t budget = e->mem_budget;
    report->budget_bytes = budget;
    if (!budget) return MZ_OK;
    double t0 = mz_time_ms();
    size_t fp = mz_engine_footprint(e);
    report->before_bytes = report->after_bytes = fp;
    if (fp <= budget) return MZ_OK;
    report->evicted = true;
    mz_status s = MZ_OK;
    /* One plan over every session and the weights (the session used last
     * last) per round; a few rounds, as units are whole and a compressed
     * stack may keep a segment mapped. */
    for (int round = 0; round < 16 && fp > budget; round++) {
        mz_evict_report r = {0};
        if ((s = mz_engine_evict(e, fp - budget, &r))) break;
        report->freed_bytes += r.bytes_freed;
        size_t fp2 = mz_engine_footprint(e);
        bool progress = r.bytes_freed > 0 || fp2 < fp;
        fp = fp2;
        if (!progress) break;
    }
    report->after_bytes = fp;
    report->over = fp > budget;
    report->time_ms = mz_time_ms() - t0;
    return s;
}
