/*
 * evict.c — carrying out eviction plans: each step moves one unit one tier
 * down (manager.c's top comment has the moves and the lock order).
 */
#define _GNU_SOURCE
#include "manager_impl.h"

#include <stdlib.h>
#include <string.h>

/* Encodes a resident chunk into mm->scratch; falls back to the raw codec for
 * chunks the codec refuses (q8: inf/NaN), so eviction never fails on data. */
static mz_status encode_chunk(mz_mem *mm, const mz_unit *u, const mz_codec **used, size_t *len)
{
    /* the layer's own instance (cachegen: its bit budget); it stays the
     * unit's decoder (u->enc), so it must live as long as the manager */
    *used = &mm->layer_codec[u->layer];
    mz_status s = mz_codec_encode(*used, (const mz_f16 *)u->buf, mm->n_values, mm->scratch,
                                  mm->scratch_cap, len);
    if (s == MZ_OK) {
        mm->enc_sum += *len;
        mm->enc_n++;
    }
    if (s == MZ_E_FORMAT && mm->codec != &mz_codec_raw_vt) {
        *used = &mz_codec_raw_vt;
        s = mz_codec_encode(&mz_codec_raw_vt, (const mz_f16 *)u->buf, mm->n_values, mm->scratch,
                            mm->scratch_cap, len);
    }
    return s;
}

/* ---- eviction --------------------------------------------------------------------------- */

/* Carries out one step; *delta = fall of (resident + compressed) bytes.
 * Caller holds mm->lock. On error the unit keeps its state and data. */
/* Weight blocks dropped by one exec_steps, finished (PROT_NONE, DROPPED) at
 * its end: mz_wtable_drop_finish says why. */
typedef struct drop_later {
    int layer[64];
    size_t n;
} drop_later;

/* Clean KV chunks claimed by one exec_steps, released together at its end:
 * one madvise per run of adjacent chunks instead of one per chunk, and the
 * whole huge pages of a KV slab freed without a split (kv_cache.h). They
 * stay BUSY until then; cap 0 (no array): each is released at once. */
typedef struct clean_later {
    mz_unit **u;
    size_t n, cap;
    mz_unit_state to;          /* STORED_RAW, or STORED_COMPRESSED with a store codec */
} clean_later;

static void finish_clean(clean_later *cl)
{
    if (cl->n == 0) return;
    mz_units_release_pages(cl->u, cl->n);
    for (size_t i = 0; i < cl->n; i++) mz_unit_settle(cl->u[i], cl->to);
    cl->n = 0;
}

static void finish_drops(mz_mem *mm, drop_later *dl)
{
    for (size_t i = 0; i < dl->n; i++) mz_wtable_drop_finish(mm->wt, dl->layer[i]);
    dl->n = 0;
}

static mz_status evict_step(mz_mem *mm, const mz_evict_step *st, int64_t *delta, mz_evict_report *r,
                            drop_later *dl, clean_later *cl)
{
    char nm[64];
    mz_status s = MZ_OK;
    *delta = 0;
    if (st->kind == MZ_UNIT_WEIGHTS) {
        mz_unit *u = &mm->wt->units[st->layer];
        MZ_ASSERT(st->dest == MZ_DEST_DROP);
        /* Shared by the engine's sessions: another one may be moving it or
         * computing on it (pinned). Either way it stays; the step frees
         * nothing and the caller plans again (weights.h, "Pins"). */
        if (!mz_unit_claim(u, MZ_UNIT_RESIDENT)) return MZ_OK;
        if (dl->n == sizeof dl->layer / sizeof dl->layer[0]) finish_drops(mm, dl);
        if (!mz_wtable_drop_claimed(mm->wt, st->layer)) return MZ_OK;
        dl->layer[dl->n++] = st->layer;
        (void)nm;
        *delta = (int64_t)u->bytes;
        r->n_weights_dropped++;
        return MZ_OK;
    }

    mz_unit *u = kv_unit(mm, st->layer, st->chunk);
    uint64_t tag = kv_tag(st->layer, st->chunk);
    mm_unit_name(u, nm, sizeof nm);
    /* a chunk this plan released clean is BUSY until finish_clean */
    if (cl->n && mz_unit_state_get(u) == MZ_UNIT_BUSY) finish_clean(cl);

    /* CompKV steps (the unit COMPRESSED) go through compkv_batch. */
    MZ_ASSERT(mz_unit_state_get(u) != MZ_UNIT_COMPRESSED);

    {
        /* [store] a clean chunk that an earlier step of this plan meant to
         * compress went to storage instead (it cost no write): a later
         * step that moves it from memory to storage has nothing to do. */
        mz_unit_state cur = mz_unit_state_get(u);
        if (mz_unit_in_storage(cur) && u->clean && u->slot == u->clean)
            return MZ_OK;
    }
    if (u->wb_pin) return MZ_OK; /* [store] being written behind: it stays this time */
    if (!mz_unit_claim(u, MZ_UNIT_RESIDENT)) return mz_fail(MZ_E_INVAL, "%s: not resident", nm);
    const mz_codec *used = NULL;
    size_t len = 0;
    mz_unit_state to = MZ_UNIT_RESIDENT;
    if (u->clean) { /* [store] a current copy in the session store: no encode, no write */
        u->slot = u->clean;
        if (mm->store_codec) {
            u->enc = mm->store_codec;
            u->enc_bytes = mz_swapfile_slot_len(mm->swap, u->clean);
        }
        if (cl->n < cl->cap) {
            cl->u[cl->n++] = u;
        } else {
            mz_unit_release_pages(u);
            mz_unit_settle(u, cl->to);
        }
        *delta = (int64_t)u->bytes;
        r->n_kv_stored_raw++;
        atomic_fetch_add(&mm->n_clean_evicted, 1);
        return MZ_OK;
    }
    switch (st->dest) {
    case MZ_DEST_COMPRESS:
        if ((s = encode_chunk(mm, u, &used, &len))) break;
        if ((s = mz_compstack_push(mm->stack, mm->scratch, len, tag))) break;
        mm->kv_seq[(size_t)st->layer * mm->max_chunks + st->chunk] = ++mm->push_seq;
        to = MZ_UNIT_COMPRESSED;
        *delta = (int64_t)u->bytes - (int64_t)len;
        r->n_kv_compressed++;
        break;
    case MZ_DEST_STORE_RAW: {
        if ((s = mm_ensure_swap(mm))) break;
        mz_swap_slot slot = 0;
        /* The chunk is page-aligned: the swap file writes it straight from
         * its own pages (no copy) when its size is a 4 KiB multiple. */
        if ((s = mm_swap_write(mm, u->buf, u->bytes, tag, &slot))) break;
        u->slot = slot;
        to = MZ_UNIT_STORED_RAW;
        *delta = (int64_t)u->bytes;
        r->n_kv_stored_raw++;
        break;
    }
    case MZ_DEST_STORE_COMPRESSED: {
        if ((s = mm_ensure_swap(mm))) break;
        if ((s = encode_chunk(mm, u, &used, &len))) break;
        mz_swap_slot slot = 0;
        if ((s = mm_swap_write(mm, mm->scratch, len, tag, &slot))) break;
        u->slot = slot;
        to = MZ_UNIT_STORED_COMPRESSED;
        *delta = (int64_t)u->bytes;
        r->n_kv_stored_compressed++;
        break;
    }
    default:
        s = mz_fail(MZ_E_INVAL, "bad destination %d for a KV chunk", (int)st->dest);
        break;
    }
    if (s) {
        mz_unit_settle(u, MZ_UNIT_RESIDENT);
        *delta = 0;
        return mz_fail_prefix(s, "%s: eviction failed (the chunk stays resident)", nm);
    }
    if (used) {
        u->enc = used;
        u->enc_bytes = len;
        if (used != &mm->layer_codec[u->layer]) r->n_kv_raw_fallback++;
    }
    mz_unit_release_pages(u);
    mz_unit_settle(u, to);
    return MZ_OK;
}

/* CompKV items per write submission. The swap file keeps up to twice its
 * queue depth (8 at the default depth of 4) of them in flight through
 * io_uring where one write at a time waited for each; a batch of one full
 * queue lets memory fall every ~0.8 MiB of q8 chunks (bench/bench_compkv.c:
 * batches of 8 were 1.5-2.1x one at a time on the shared VM, batches of 32
 * 0.6-1.5x, noisy). mz_mem_set_compkv_batch changes it up to the maximum. */
#define COMPKV_BATCH_DEFAULT 8
#define COMPKV_BATCH 32

/* A step that moves a compressed-stack item to the swap file (evict_step's
 * CompKV branch). */
static bool is_compkv(mz_mem *mm, const mz_evict_step *st)
{
    return st->kind != MZ_UNIT_WEIGHTS &&
           mz_unit_state_get(kv_unit(mm, st->layer, st->chunk)) == MZ_UNIT_COMPRESSED;
}

/* Carries out the CompKV steps at the head of steps[0..n) with one batch
 * write: the longest run, up to the batch size, whose units are the stack's
 * lowest items in order, stopping at the item that brings the bytes to
 * `want` (where the steps one at a time would stop; at least one item).
 * The items' bytes are written as they sit in the stack (same records as a
 * single write). Written items leave the stack from the bottom, up to the
 * first failed one; the written items above a failure give their slots
 * back and stay in the stack with their units COMPRESSED (only the bottom
 * can leave it), so a failure loses nothing. *n_done = steps carried out;
 * *delta = bytes freed. Caller holds mm->lock. */
static mz_status compkv_batch(mz_mem *mm, const mz_evict_step *steps, size_t n, uint64_t want,
                              size_t *n_done, int64_t *delta, mz_evict_report *r)
{
    const uint8_t *data[COMPKV_BATCH];
    size_t len[COMPKV_BATCH];
    uint64_t btag[COMPKV_BATCH];
    mz_swap_item it[COMPKV_BATCH];
    char nm[64];
    *n_done = 0;
    *delta = 0;
    mm_unit_name(kv_unit(mm, steps[0].layer, steps[0].chunk), nm, sizeof nm);
    MZ_ASSERT(steps[0].dest == MZ_DEST_STORE_COMPRESSED);
    size_t cap = mm->compkv_batch ? mm->compkv_batch : COMPKV_BATCH_DEFAULT;
    size_t have = mz_compstack_peek_bottom_n(mm->stack, MZ_MIN(n, cap), data, len, btag);
    if (have == 0 || btag[0] != kv_tag(steps[0].layer, steps[0].chunk))
        return mz_fail(MZ_E_INVAL, "%s: not at the bottom of the compressed stack", nm);
    mz_status s = mm_ensure_swap(mm);
    if (s) return mz_fail_prefix(s, "%s: moving it from memory to the swap file failed", nm);
    size_t k = 0;
    uint64_t sum = 0;
    while (k < have && (k == 0 || sum < want)) {
        const mz_evict_step *st = &steps[k];
        if (k > 0 && (!is_compkv(mm, st) || st->dest != MZ_DEST_STORE_COMPRESSED ||
                      btag[k] != kv_tag(st->layer, st->chunk)))
            break;
        if (!mz_unit_claim(kv_unit(mm, st->layer, st->chunk), MZ_UNIT_COMPRESSED)) break;
        /* buf is not const because reads share the struct; writes never modify it */
        it[k] = (mz_swap_item){.buf = (void *)(uintptr_t)data[k], .len = len[k], .tag = btag[k]};
        sum += len[k];
        k++;
    }
    if (k == 0) return mz_fail(MZ_E_INVAL, "%s: busy", nm);
    s = mz_swapfile_write_batch(mm->swap, it, k);
    size_t done = 0;
    while (done < k && it[done].status == MZ_OK) done++;
    for (size_t i = 0; i < k; i++) {
        mz_unit *u = kv_unit(mm, steps[i].layer, steps[i].chunk);
        if (i < done) {
            mz_status d = mz_compstack_drop_bottom(mm->stack);
            MZ_ASSERT(d == MZ_OK);
            (void)d;
            u->slot = it[i].slot;
            atomic_fetch_add(&mm->n_slots, 1);
            mz_unit_settle(u, MZ_UNIT_STORED_COMPRESSED);
            *delta += (int64_t)len[i];
            r->n_kv_compkv++;
        } else {
            if (it[i].status == MZ_OK) mz_swapfile_slot_free(mm->swap, it[i].slot);
            mz_unit_settle(u, MZ_UNIT_COMPRESSED);
        }
    }
    *n_done = done;
    if (done < k) {
        mm_unit_name(kv_unit(mm, steps[done].layer, steps[done].chunk), nm, sizeof nm);
        return mz_fail_prefix(s ? s : it[done].status,
                              "%s: moving it from memory to the swap file failed", nm);
    }
    return MZ_OK;
}

void mz_mem_set_compkv_batch(mz_mem *mm, size_t n)
{
    pthread_mutex_lock(&mm->lock);
    mm->compkv_batch = MZ_MIN(n, (size_t)COMPKV_BATCH);
    pthread_mutex_unlock(&mm->lock);
}

void mm_fill_view(mz_mem *mm, bool weights_evictable, mz_policy_view *v)
{
    *v = (mz_policy_view){.n_layer = mm->n_layer,
                          .max_chunks = mm->max_chunks,
                          .n_chunks = mm->kv->n_chunks,
                          .weights = mm->wt->units,
                          .kv = mm->kvu,
                          .kv_seq = mm->kv_seq,
                          .weights_evictable = weights_evictable,
                          .can_store = true,
                          .unit_bytes_kv = mm->kv->chunk_bytes,
                          .enc_bytes_kv_est = mm_enc_expected(mm),
                          .times = mm->times,
                          .kv_window = mm->kv_window,
                          .n_pos = mm_n_pos(mm)};
}

/* Carries out steps in order until freed reaches goal. Caller holds mm->lock. */
static mz_status exec_steps(mz_mem *mm, const mz_evict_step *steps, size_t n, size_t goal,
                            int64_t *freed, size_t *moved, mz_evict_report *r)
{
    drop_later dl = {.n = 0};
    clean_later cl = {.u = malloc(n * sizeof *cl.u), .n = 0, .cap = 0,
                      .to = mm->store_codec ? MZ_UNIT_STORED_COMPRESSED : MZ_UNIT_STORED_RAW};
    if (cl.u) cl.cap = n;
    mz_status s = MZ_OK;
    for (size_t i = 0; i < n; i++) {
        const mz_evict_step *st = &steps[i];
        int64_t delta = 0;
        if (is_compkv(mm, st)) {
            uint64_t want = *freed < 0 ? (uint64_t)goal + (uint64_t)-*freed
                                       : (uint64_t)goal - MZ_MIN((uint64_t)*freed, (uint64_t)goal);
            size_t done = 0;
            s = compkv_batch(mm, st, n - i, want, &done, &delta, r);
            *freed += delta;
            if (done > 0) {
                *moved += done;
                r->stage = steps[i + done - 1].stage;
                i += done - 1;
            }
            if (s) break;
            if (*freed >= 0 && (uint64_t)*freed >= (uint64_t)goal) break;
            continue;
        }
        mz_unit_state before = st->kind == MZ_UNIT_WEIGHTS
                                   ? mz_unit_state_get(&mm->wt->units[st->layer])
                                   : mz_unit_state_get(kv_unit(mm, st->layer, st->chunk));
        if ((s = evict_step(mm, st, &delta, r, &dl, &cl))) break;
        mz_unit_state after = st->kind == MZ_UNIT_WEIGHTS
                                  ? mz_unit_state_get(&mm->wt->units[st->layer])
                                  : mz_unit_state_get(kv_unit(mm, st->layer, st->chunk));
        if (after != before) {
            (*moved)++;
            r->stage = st->stage;
        }
        *freed += delta;
        if (*freed >= 0 && (uint64_t)*freed >= (uint64_t)goal) break;
    }
    finish_clean(&cl);
    free(cl.u);
    finish_drops(mm, &dl);
    return s;
}

mz_status mz_mem_evict_steps(mz_mem *mm, const mz_evict_step *steps, size_t n, size_t goal,
                             int64_t *freed, size_t *moved, mz_evict_report *r)
{
    mz_mem_restore_finish(mm); /* a request's restore that went on after it: done first */
    pthread_mutex_lock(&mm->lock);
    mz_status s = exec_steps(mm, steps, n, goal, freed, moved, r);
    pthread_mutex_unlock(&mm->lock);
    return s;
}

void mz_mem_view(mz_mem *mm, bool weights_evictable, mz_policy_view *v)
{
    mm_settle(mm);
    pthread_mutex_lock(&mm->lock);
    mm_refresh_times(mm);
    mm_fill_view(mm, weights_evictable, v);
    pthread_mutex_unlock(&mm->lock);
}

const mz_policy *mz_mem_policy(const mz_mem *mm) { return mm->policy; }
mz_evict_plan *mz_mem_plan_scratch(mz_mem *mm) { return &mm->plan; }
mz_wtable *mz_mem_wtable(const mz_mem *mm) { return mm->wt; }

void mz_mem_pin_weights(mz_mem *mm, int layer)
{
    if (mm->wpinned[layer]) return;
    mm->wpinned[layer] = 1;
    mz_wtable_pin(mm->wt, layer);
}

void mz_mem_unpin_weights(mz_mem *mm)
{
    for (int l = 0; l < mm->n_layer; l++) {
        if (!mm->wpinned[l]) continue;
        mm->wpinned[l] = 0;
        mz_wtable_unpin(mm->wt, l);
    }
}

mz_status mz_mem_evict(mz_mem *mm, size_t nbytes, mz_evict_report *r)
{
    /* Weights only while this is the engine's one session (mzcache.h):
     * several sessions give weights up through mz_engine_evict's plan. */
    bool weights_ok = mz_wtable_refs(mm->wt) == 1 && !mz_wtable_any_pinned(mm->wt);
    return mz_mem_evict_ex(mm, nbytes, weights_ok, r);
}

mz_status mz_mem_evict_ex(mz_mem *mm, size_t nbytes, bool weights_evictable, mz_evict_report *r)
{
    mz_evict_report scratch;
    r = mz_evict_report_start(r, &scratch, nbytes);
    double t0 = mz_time_ms();
    mz_status s = MZ_OK;
    int64_t freed = 0;
    if (nbytes == 0) goto out;

    mm_settle(mm);
    pthread_mutex_lock(&mm->lock);
    mm_refresh_times(mm); /* the sizes measured by earlier evictions */
    /* Plan, carry out, and plan again for the rest when the real bytes fell
     * short of the estimate (a chunk the codec refused, a codec that beat its
     * bound the other way). Every round moves at least one unit one tier
     * down, so this ends. */
    while (s == MZ_OK && (freed < 0 || (uint64_t)freed < (uint64_t)nbytes)) {
        mz_policy_view v;
        mm_fill_view(mm, weights_evictable, &v);
        /* Still to free (freed < nbytes here; freed < 0 when compressing cost bytes). */
        uint64_t left = freed >= 0 ? (uint64_t)nbytes - (uint64_t)freed
                        : (uint64_t)nbytes > UINT64_MAX - (uint64_t)-freed
                            ? UINT64_MAX
                            : (uint64_t)nbytes + (uint64_t)-freed;
        mm->policy->plan(mm->policy, &v, (size_t)MZ_MIN(left, (uint64_t)SIZE_MAX), &mm->plan);
        if (mm->plan.n == 0) break;
        size_t moved = 0;
        s = exec_steps(mm, mm->plan.steps, mm->plan.n, nbytes, &freed, &moved, r);
        /* A round where no step moved anything (a shared weight block that
         * another session holds) ends the eviction: planning again would
         * give the same steps. */
        if (moved == 0) break;
    }
    pthread_mutex_unlock(&mm->lock);
out:
    r->bytes_freed = freed > 0 ? (size_t)freed : 0;
    r->complete = r->bytes_freed >= nbytes;
    r->time_ms = mz_time_ms() - t0;
    if (s == MZ_OK)
        mz_log(MZ_LOG_DEBUG, "evict %zu: freed %zu (compressed %zu, raw %zu, stored-comp %zu, "
                             "compkv %zu, weights %zu) in %.1f ms", nbytes, r->bytes_freed,
               r->n_kv_compressed, r->n_kv_stored_raw, r->n_kv_stored_compressed, r->n_kv_compkv,
               r->n_weights_dropped, r->time_ms);
    return s;
}
