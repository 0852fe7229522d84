/*
 * manager.c — the memory manager of one session (contract in manager.h; the
 * files it is split into: manager_impl.h): tables, init/free, statistics.
 *
 * Tables. A session has one KV unit per (layer, chunk slot) — n_layer x
 * max_chunks, fixed at init — and shares its engine's weight units
 * (weights.h) with the engine's other sessions. Weight blocks carry pin
 * counts: the forward pass pins a block (mz_mem_pin_weights) before
 * acquire_layer looks at it and unpins them all at the end of its step; a
 * pinned block is never dropped.
 *
 * Moves (each one: claim the unit BUSY, do the work, settle it):
 *   evict   RESIDENT -> COMPRESSED         encode into scratch, push on the stack
 *           RESIDENT -> STORED_RAW         write the chunk's own pages (zero copy)
 *           RESIDENT -> STORED_COMPRESSED  encode into scratch, write
 *           COMPRESSED -> STORED_COMPRESSED (CompKV) write the stack's bottom item, drop it
 *           RESIDENT -> DROPPED            hash the block, release
 *   restore the reverse; a compressed chunk that is not on top of the stack is
 *           reached by decoding the items above it back into their chunks
 *           ("pop-through"): never needed under backward-out/forward-in, but it
 *           keeps any other order correct.
 * A unit's pages are released (MADV_DONTNEED + PROT_NONE) only after its bytes
 * are safe elsewhere, so a failed write leaves it resident and intact; a
 * failed read (EIO, checksum mismatch, weights that no longer hash the same)
 * releases the pages again and settles the unit back to its evicted state,
 * with its stored copy untouched — nothing unverified is ever left readable.
 *
 * Lock order (outer first):
 *     (engine locks: src/engine/engine.h)
 *       mm->lock           this session's stack, swap slots, scratch, dfile,
 *                          and the COMPRESSED -> BUSY claim
 *         swapfile mutex   inside mz_swapfile_* (slot table)
 *         wtable lock      session count of the weight table (a leaf)
 *     rjob mu              the pipelined restore's progress (a leaf: never held
 *                          while taking another lock or waiting on a unit)
 * Unit ready events (futex on the state word) are never waited on while
 * holding any of these locks.
 *
 * Accounting. "Freed" is the fall of (resident + compressed) bytes: a chunk
 * encoded into the stack frees its size minus its encoded size. The paper's
 * remaining-memory percentage uses the same sum (mz_mem_get_stats).
 */
#define _GNU_SOURCE
#include "manager_impl.h"

#include "../kernels/kernels.h"
#include "codec_choice.h"

#include <sys/mman.h>
#include <string.h>

static void codec_display_name(const mz_codec *c, char *buf, size_t cap);

mz_status mz_mem_init(mz_model_t *m, mz_kv_cache *kv, const mz_mem_params *p, mz_mem **out)
{
    mz_status s;
    *out = NULL;
    MZ_ASSERT(p && p->profile);
    size_t block = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) block = MZ_MAX(block, m->blocks[l].buf_bytes);
    /* The unit sizes and the decoding threads of the session's restore,
     * for the per-unit times and the default codec. */
    mz_profile_units units = {.kv_chunk_bytes = kv->chunk_bytes, .block_bytes = block};
    units.decode_threads =
        mz_profile_decode_threads(p->profile, mz_profile_restore_threads(p->profile, p->n_compute));
    const char *codec_name = p->codec && p->codec[0] ? p->codec : "auto";
    mz_codec_choice choice = {.name = codec_name};
    if (strcmp(codec_name, "auto") == 0) {
        if ((s = mz_codec_choose(p->profile, &units, kv->n_layer, kv->max_chunks, &choice))) return s;
        if (choice.restore_ns[1] < 0)
            mz_log(MZ_LOG_DEBUG, "KV codec auto: %s (the device profile measured no q8-q4r)", choice.name);
        else
            mz_log(MZ_LOG_DEBUG, "KV codec auto: %s (planned restore of half the session: q8 %.3f s, "
                   "q8-q4r %.3f s)", choice.name, (double)choice.restore_ns[0] * 1e-9,
                   (double)choice.restore_ns[1] * 1e-9);
    }
    const mz_codec *codec = mz_codec_find(choice.name);
    if (!codec) return MZ_E_INVAL;
    mz_kv_placement placement = p ? p->placement : MZ_KV_PLACE_AUTO;
    if (!mz_kv_placement_name(placement))
        return mz_fail(MZ_E_INVAL, "unknown KV placement %d", (int)placement);
    mz_policy_params pprm = mz_policy_params_default();
    if (p) {
        pprm.order = p->order;
        pprm.seed = p->seed;
        pprm.rounding = p->rounding;
    }
    if (!mz_evict_order_name(pprm.order))
        return mz_fail(MZ_E_INVAL, "unknown eviction order %d", (int)pprm.order);

    mz_mem *mm = mz_calloc(1, sizeof *mm);
    if (!mm) return MZ_E_NOMEM;
    pthread_mutex_init(&mm->lock, NULL);
    pthread_cond_init(&mm->store_cv, NULL);
    mm->model = m;
    mm->kv = kv;
    mm->n_layer = kv->n_layer;
    mm->max_chunks = kv->max_chunks;
    mm->n_values = kv->chunk_bytes / sizeof(mz_f16);
    mm->kv_lost_pos = SIZE_MAX;
    mm->codec = codec;
    mm->placement = placement;
    mm->swap_flags = p ? p->swap_flags : 0;
    if (p && p->swap_dir && p->swap_dir[0]) {
        mm->swap_dir = strdup(p->swap_dir);
        if (!mm->swap_dir) goto out_nomem;
    }
    mm->kvu = mz_calloc((size_t)mm->n_layer * MZ_MAX(mm->max_chunks, 1), sizeof *mm->kvu);
    mm->kv_seq = mz_calloc((size_t)mm->n_layer * MZ_MAX(mm->max_chunks, 1), sizeof *mm->kv_seq);
    if (!mm->kvu || !mm->kv_seq) goto out_nomem;
    for (int l = 0; l < mm->n_layer; l++) {
        for (size_t c = 0; c < mm->max_chunks; c++) {
            mz_unit *u = kv_unit(mm, l, c);
            u->kind = MZ_UNIT_KV;
            u->layer = l;
            u->chunk = (int)c;
            mz_unit_set(u, MZ_UNIT_ABSENT);
        }
    }
    mm->layer_codec = mz_calloc((size_t)MZ_MAX(mm->n_layer, 1), sizeof *mm->layer_codec);
    if (!mm->layer_codec) goto out_nomem;
    size_t bound = mz_codec_bound(&mz_codec_raw_vt, mm->n_values);
    double ratio = 0;
    for (int l = 0; l < mm->n_layer; l++) {
        mm->layer_codec[l] = mz_codec_for_layer(codec, (unsigned)m->cfg.head_dim, (unsigned)l,
                                                (unsigned)mm->n_layer);
        size_t b = mz_codec_bound(&mm->layer_codec[l], mm->n_values);
        bound = b ? MZ_MAX(bound, b) : 0;
        if (!b) break;
        ratio += mz_codec_ratio_hint(&mm->layer_codec[l]) / mm->n_layer;
    }
    /* The policy plans with the expected size, never more than the bound (q8
     * and raw: the exact size); measured sizes take over as chunks go. */
    if (bound)
        mm->enc_seed = MZ_MIN((uint64_t)bound, (uint64_t)(ratio * (double)kv->chunk_bytes + 0.5) +
                                                   MZ_CODEC_HEADER_BYTES);
    if (bound == 0) {
        s = mz_fail(MZ_E_RANGE, "KV chunk of %zu values is too large for the codec", mm->n_values);
        goto out_fail;
    }
    mm->scratch_cap = (bound + mz_page_size() - 1) / mz_page_size() * mz_page_size();
    mm->scratch = mz_pages_alloc(mm->scratch_cap);
    if (!mm->scratch) goto out_nomem;
    if ((s = mz_compstack_init(0, &mm->stack))) goto out_fail;
    mm->pprm = pprm;
    mm->policy = p && p->policy_init            ? p->policy_init(&pprm)
                 : placement == MZ_KV_PLACE_AUTO ? mz_policy_hybrid_init(&pprm)
                                                 : mz_policy_backward_init(placement, &pprm);
    if (!mm->policy) goto out_nomem;
    if ((s = mz_evict_plan_init(&mm->plan, mm->n_layer, MZ_MAX(mm->max_chunks, 1)))) goto out_fail;
    {
        /* Per-unit times: the device profile (or the built-in estimate)
         * applied to this model's unit sizes. */
        const mz_device_profile prof = *p->profile;
        codec_display_name(codec, mm->codec_name, sizeof mm->codec_name);
        mm->prof = prof;
        mm->pu = units;
        mm->pu.codec = mm->codec_name;
        mm_refresh_times(mm);
        mm->profile_measured = prof.measured;
    }
    MZ_ASSERT(p && p->wt && p->wt->model == m);
    mm->wpinned = mz_calloc((size_t)MZ_MAX(mm->n_layer, 1), 1);
    if (!mm->wpinned) goto out_nomem;
    mm->wt = p->wt;
    mz_wtable_attach(mm->wt);
    mm->shared = p->shared;
    /* The engine's swap file (the engine refuses a session naming another
     * directory), unless test flags ask for a file of the session's own. */
    MZ_ASSERT(!p->shared || (!mm->swap_dir == !p->shared->swap_dir &&
                             (!mm->swap_dir || strcmp(mm->swap_dir, p->shared->swap_dir) == 0)));
    mm->shared_swap = p->shared && !mm->swap_flags;
    /* Dead chunks of sliding-window layers (policy.h). */
    if (p->n_pos && m->cfg.n_swa > 0) {
        mm->kv_window = mz_calloc((size_t)mm->n_layer, sizeof *mm->kv_window);
        if (!mm->kv_window) goto out_nomem;
        for (int l = 0; l < mm->n_layer; l++)
            mm->kv_window[l] = mz_layer_window(&m->cfg, l);
        mm->n_pos = p->n_pos;
    }
    mm_sync_kv(mm);
    *out = mm;
    return MZ_OK;
out_nomem:
    s = mz_fail(MZ_E_NOMEM, "out of memory creating the memory manager");
out_fail:
    mz_mem_free(mm);
    return s;
}

/* The registry name of a codec ("q8-g32" for q8 with groups of 32; q4 the
 * same way). */
static void codec_display_name(const mz_codec *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", c->name);
    if ((strcmp(c->name, "q8") == 0 || strcmp(c->name, "q4") == 0) &&
        c->param != MZ_Q8_GROUP_DEFAULT)
        snprintf(buf, cap, "%s-g%u", c->name, c->param);
}

void mz_mem_reader_idle(mz_mem *mm)
{
    /* A detached job reads nothing more from the model file. */
    if (mm && mm->dfile && (!mm->job || mz_mem_restore_detached(mm))) mz_dfile_idle(mm->dfile);
}

void mz_mem_shared_init(mz_mem_shared *sh, const char *swap_dir)
{
    memset(sh, 0, sizeof *sh);
    pthread_mutex_init(&sh->lock, NULL);
    sh->swap_dir = swap_dir && swap_dir[0] ? strdup(swap_dir) : NULL;
}

void mz_mem_shared_close(mz_mem_shared *sh)
{
    mz_swapfile_close(sh->swap);
    mz_dfile_close(sh->dfile);
    free(sh->swap_dir);
    pthread_mutex_destroy(&sh->lock);
    memset(sh, 0, sizeof *sh);
}

/* ---- stats, teardown, test hooks ------------------------------------------------------ */

static void count_unit(mz_mem_category *cat, const mz_unit *u)
{
    cat->total_bytes += u->bytes;
    cat->n_units++;
    switch (mz_unit_state_get(u)) {
    case MZ_UNIT_RESIDENT:
    case MZ_UNIT_BUSY: /* moving right now: counted where it came from, approximately */
        cat->resident_bytes += u->bytes;
        cat->n_resident++;
        break;
    case MZ_UNIT_COMPRESSED: cat->compressed_bytes += u->enc_bytes; break;
    case MZ_UNIT_STORED_RAW: cat->stored_bytes += u->bytes; break;
    case MZ_UNIT_STORED_COMPRESSED: cat->stored_bytes += u->enc_bytes; break;
    case MZ_UNIT_DROPPED: cat->dropped_bytes += u->bytes; break;
    default: break;
    }
}

void mz_mem_get_stats(mz_mem *mm, mz_mem_stats *out)
{
    memset(out, 0, sizeof *out);
    mm_settle(mm);
    pthread_mutex_lock(&mm->lock);
    for (int l = 0; l < mm->n_layer; l++) count_unit(&out->weights, &mm->wt->units[l]);
    for (int l = 0; l < mm->n_layer; l++)
        for (size_t c = 0; c < mm->max_chunks; c++)
            if (mz_unit_state_get(kv_unit(mm, l, c)) != MZ_UNIT_ABSENT) {
                count_unit(&out->kv, kv_unit(mm, l, c));
                if (mm_kv_dead(mm, l, c)) count_unit(&out->kv_out_of_window, kv_unit(mm, l, c));
            }
    mz_compstack_stats cs;
    mz_compstack_get_stats(mm->stack, &cs);
    out->compstack_mapped_bytes = cs.bytes_mapped;
    if (mm->swap) {
        mz_swapfile_stats ss;
        mz_swapfile_get_stats(mm->swap, &ss);
        out->swap_file_bytes = ss.file_bytes;
        out->swap_direct = mz_swapfile_is_direct(mm->swap);
    }
    pthread_mutex_unlock(&mm->lock);
    out->pinned_bytes = mm->model->pinned_bytes;
    size_t total = out->weights.total_bytes + out->kv.total_bytes;
    size_t kept = out->weights.resident_bytes + out->weights.compressed_bytes +
                  out->kv.resident_bytes + out->kv.compressed_bytes;
    out->remaining_pct = total ? 100.0 * (double)kept / (double)total : 100.0;
    codec_display_name(mm->codec, out->codec, sizeof out->codec);
    snprintf(out->placement, sizeof out->placement, "%s", mz_kv_placement_name(mm->placement));

    /* Policy: stage and planned restore time of each path, from the units'
     * states and the profile's per-unit times. */
    bool weights_evictable = mz_wtable_refs(mm->wt) == 1;
    mz_policy_view v;
    mz_restore_plan_times rt;
    pthread_mutex_lock(&mm->lock);
    mm_fill_view(mm, weights_evictable, &v);
    out->stage = mm->policy->stage(mm->policy, &v);
    mz_policy_restore_times(&v, &rt);
    pthread_mutex_unlock(&mm->lock);
    out->planned_mem_ms = (double)rt.mem_ns / 1e6;
    out->planned_storage_ms = (double)rt.storage_ns / 1e6;
    out->planned_alloc_ms = (double)rt.alloc_ns / 1e6;
    out->unit_t_d_ms = (double)mm->times.t_d_ns / 1e6;
    out->unit_t_rkv_ms = (double)mm->times.t_rkv_ns / 1e6;
    out->unit_t_rw_ms = (double)mm->times.t_rw_ns / 1e6;
    out->unit_t_alloc_ms = (double)mm->times.t_alloc_kv_ns / 1e6;
    out->threshold_T = (size_t)mz_profile_threshold(&mm->times, mm->n_layer);
    out->profile_measured = mm->profile_measured;
    snprintf(out->policy, sizeof out->policy, "%s", mm->policy->name);
    snprintf(out->evict_order, sizeof out->evict_order, "%s", mz_evict_order_name(mm->pprm.order));
}

void mz_mem_free(mz_mem *mm)
{
    if (!mm) return;
    if (mm->job) {
        mz_status s0 = mz_mem_restore_end(mm, NULL);
        (void)s0;
    }
    if (mm->wt) {
        /* Weights belong to the engine, which restores them when it goes. */
        if (mm->wpinned) mz_mem_unpin_weights(mm);
        mz_wtable_detach(mm->wt);
    }
    free(mm->wpinned);
    free(mm->kv_window);
    if (mm->policy) mm->policy->free(mm->policy);
    mz_evict_plan_free(&mm->plan);
    free(mm->kv_seq);
    if (mm->shared_swap && mm->swap) {
        /* The engine's file: give this session's slots back at once. */
        for (size_t i = 0; i < (size_t)mm->n_layer * mm->max_chunks; i++) {
            mz_unit_state st = mz_unit_state_get(&mm->kvu[i]);
            if (mz_unit_in_storage(st)) mm_swap_slot_free(mm, mm->kvu[i].slot);
        }
    } else {
        mz_swapfile_close(mm->swap);
    }
    if (!mm->shared) mz_dfile_close(mm->dfile);
    mz_compstack_free(mm->stack);
    mz_pages_free(mm->scratch, mm->scratch_cap);
    free(mm->store_enc);
    free(mm->kvu);
    free(mm->layer_codec);
    free(mm->swap_dir);
    pthread_mutex_destroy(&mm->lock);
    pthread_cond_destroy(&mm->store_cv);
    free(mm);
}

mz_unit_state mz_mem_kv_state(mz_mem *mm, int layer, size_t chunk)
{
    mm_settle(mm);
    return mz_unit_state_get(kv_unit(mm, layer, chunk));
}

const mz_unit_times *mz_mem_unit_times(const mz_mem *mm) { return &mm->times; }


mz_unit_state mz_mem_weights_state(mz_mem *mm, int layer)
{
    return mz_unit_state_get(&mm->wt->units[layer]);
}

mz_swapfile_t *mz_mem_swapfile(mz_mem *mm) { return mm->swap; }
const mz_codec *mz_mem_codec(const mz_mem *mm) { return mm->codec; }
const mz_codec *mz_mem_layer_codec(const mz_mem *mm, int layer) { return &mm->layer_codec[layer]; }
size_t mz_mem_enc_expected(const mz_mem *mm) { return mm_enc_expected(mm); }

bool mz_mem_is_valid(mz_mem *mm)
{
    mm_settle(mm);
    /* Under the manager's lock: a session's store worker (write-behind)
     * changes clean copies, slots and counts under it, at any time. */
    pthread_mutex_lock(&mm->lock);
    bool ok = mz_compstack_is_valid(mm->stack);
    size_t n_comp = 0, n_stored = 0;
    for (int l = 0; l < mm->n_layer; l++) {
        for (size_t c = 0; c < mm->max_chunks; c++) {
            const mz_unit *u = kv_unit(mm, l, c);
            mz_unit_state s = mz_unit_state_get(u);
            if (s == MZ_UNIT_COMPRESSED) n_comp++;
            if (mz_unit_in_storage(s)) {
                n_stored++;
                ok = ok && mm->swap && mz_swapfile_slot_len(mm->swap, u->slot) ==
                                           (s == MZ_UNIT_STORED_RAW ? u->bytes : u->enc_bytes);
            }
            if (c >= mm->kv->n_chunks) ok = ok && s == MZ_UNIT_ABSENT;
            ok = ok && s != MZ_UNIT_BUSY && s != MZ_UNIT_DROPPED;
            if (u->clean) { /* [store] a resident chunk's clean copy holds a slot too */
                size_t cl = mm->swap ? mz_swapfile_slot_len(mm->swap, u->clean) : 0;
                ok = ok && (mm->store_codec ? cl > 0 && cl <= u->bytes : cl == u->bytes);
                if (s != MZ_UNIT_STORED_RAW && s != MZ_UNIT_STORED_COMPRESSED) n_stored++;
                else ok = ok && u->slot == u->clean;
            }
        }
    }
    ok = ok && n_comp == mz_compstack_count(mm->stack);
    /* [store] a truncation may leave clean records behind for the manifest */
    n_stored += mm->n_store_extra; /* [store] tail records */
    ok = ok && (atomic_load(&mm->n_slots) == n_stored || mm->store_leaked);
    if (mm->swap) {
        mz_swapfile_stats ss;
        mz_swapfile_get_stats(mm->swap, &ss);
        /* A shared file also holds the other sessions' slots. */
        ok = ok && (mm->shared_swap || mm->store_leaked ? ss.n_slots >= n_stored
                                                        : ss.n_slots == n_stored);
    }
    pthread_mutex_unlock(&mm->lock);
    return ok;
}
