/*
 * restore.c — blocking restore: one unit, a layer before the forward pass
 * reads it (acquire), or everything (mz_mem_restore_all).
 */
#define _GNU_SOURCE
#include "manager_impl.h"

#include <string.h>

/* ---- restore -------------------------------------------------------------------------------- */

/* Decodes the stack's top item into its chunk and pops it. u is BUSY (claimed
 * by the caller) and its pages are mapped. Caller holds mm->lock. */
mz_status mm_decode_top_into(mz_mem *mm, mz_unit *u)
{
    const uint8_t *data;
    size_t len;
    uint64_t tag;
    mz_status s = mz_compstack_peek_top(mm->stack, &data, &len, &tag);
    MZ_ASSERT(s == MZ_OK && unit_by_tag(mm, tag) == u);
    s = mz_codec_decode(u->enc, data, len, (mz_f16 *)u->buf, mm->n_values);
    if (s) return mz_fail_prefix(s, "decoding from the compressed stack failed");
    s = mz_compstack_drop_top(mm->stack);
    MZ_ASSERT(s == MZ_OK);
    return MZ_OK;
}

static void count_restore(mz_restore_report *r, const mz_unit *u, mz_unit_state from)
{
    if (!r) return;
    r->bytes_restored += u->bytes;
    switch (from) {
    case MZ_UNIT_COMPRESSED: r->n_kv_decoded++; break;
    case MZ_UNIT_STORED_RAW: r->n_kv_read_raw++; break;
    case MZ_UNIT_STORED_COMPRESSED: r->n_kv_read_compressed++; break;
    case MZ_UNIT_DROPPED: r->n_weights_loaded++; break;
    default: break;
    }
}

/* Restores a unit claimed BUSY from state `from`. Caller holds mm->lock.
 * Settles the unit: RESIDENT, or `from` again on error. */
static mz_status restore_claimed(mz_mem *mm, mz_unit *u, mz_unit_state from, mz_restore_report *r)
{
    char nm[64];
    mz_status s = mz_unit_map_pages(u);
    if (s) goto out_fail;
    switch (from) {
    case MZ_UNIT_COMPRESSED:
        /* Pop-through: decode the items above u back into their own chunks. */
        for (;;) {
            mz_unit *t = mm_stack_top_unit(mm);
            if (t == u) break;
            MZ_ASSERT(mz_unit_claim(t, MZ_UNIT_COMPRESSED));
            if ((s = mz_unit_map_pages(t)) || (s = mm_decode_top_into(mm, t))) {
                mz_unit_release_pages(t);
                mz_unit_settle(t, MZ_UNIT_COMPRESSED);
                mz_fail_prefix(s, "%s", mm_unit_name(t, nm, sizeof nm));
                goto out_fail;
            }
            mz_unit_settle(t, MZ_UNIT_RESIDENT);
            count_restore(r, t, MZ_UNIT_COMPRESSED);
        }
        s = mm_decode_top_into(mm, u);
        break;
    case MZ_UNIT_STORED_RAW:
    case MZ_UNIT_STORED_COMPRESSED:
    case MZ_UNIT_DROPPED:
        s = mm_read_stored(mm, u, from, mm->scratch, mm->scratch_cap);
        break;
    default:
        MZ_ASSERT(!"restore from a settled, evicted state");
    }
    if (s) goto out_fail;
    if (mz_unit_in_storage(from)) {
        if (u->slot != u->clean) mm_swap_slot_free(mm, u->slot); /* [store] a clean copy stays */
        u->slot = 0;
    }
    mz_unit_settle(u, MZ_UNIT_RESIDENT);
    count_restore(r, u, from);
    return MZ_OK;
out_fail:
    /* Nothing unverified stays readable: the pages go back and the unit stays
     * evicted, its stored copy (slot, stack item, file) untouched. */
    mz_unit_release_pages(u);
    mz_unit_settle(u, from);
    return mz_fail_prefix(s, "cannot restore %s", mm_unit_name(u, nm, sizeof nm));
}

/* Makes u resident, waiting for another mover if there is one. */
mz_status mm_restore_unit(mz_mem *mm, mz_unit *u, mz_restore_report *r)
{
    for (int attempt = 0;; attempt++) {
        mz_unit_state s = mz_unit_state_get(u);
        if (s == MZ_UNIT_RESIDENT) return MZ_OK;
        if (s == MZ_UNIT_BUSY) {
            s = mz_unit_wait_settled(u);
            if (s == MZ_UNIT_RESIDENT) return MZ_OK;
            /* The other mover failed; try once ourselves to get our own error. */
        }
        MZ_ASSERT(s != MZ_UNIT_ABSENT);
        MZ_ASSERT(attempt < 1000);
        pthread_mutex_lock(&mm->lock);
        mz_status st = MZ_AGAIN;
        if (mz_unit_claim(u, s)) st = restore_claimed(mm, u, s, r);
        pthread_mutex_unlock(&mm->lock);
        if (st != MZ_AGAIN) {
            return st;
        }
    }
}

/* Makes u resident before the forward pass reads it: the running job's
 * work when there is one (waited for), else, or when the job ended
 * without it, restored here. */
static mz_status acquire_unit(mz_mem *mm, struct rjob *j, mz_unit *u)
{
    mz_status s;
    if (j && (s = mm_job_wait_unit(j, u))) return s;
    return mm_restore_unit(mm, u, NULL);
}

mz_status mz_mem_acquire_layer(mz_mem *mm, int layer, size_t n_chunks)
{
    return mz_mem_acquire_window(mm, layer, 0, n_chunks);
}

/* A pass from pos0 on reads the rows below pos0: refused while some of
 * them are lost. A forward pass that starts exactly at the lost position
 * follows a cut back to it (the failed request's own, or a truncation) and
 * rewrites the rows from there, which ends the loss; acquire_layer's
 * pos0 = 0 lies below any lost position (a request at position 0 has no
 * chunk to take). */
static mz_status kv_lost_check(mz_mem *mm, size_t pos0)
{
    if (mm->kv_lost_pos == SIZE_MAX || pos0 < mm->kv_lost_pos) return MZ_OK;
    if (pos0 == mm->kv_lost_pos) {
        mm->kv_lost_pos = SIZE_MAX;
        return MZ_OK;
    }
    return mz_fail(MZ_E_CORRUPT, "a failed restore lost the K/V of positions %zu and later: "
                   "cut the conversation back to %zu tokens (mz_ctx_truncate) before computing on it",
                   mm->kv_lost_pos, mm->kv_lost_pos);
}

mz_status mz_mem_acquire_window(mz_mem *mm, int layer, size_t pos0, size_t n_chunks)
{
    size_t n_lent;
    return mz_mem_acquire_window_lend(mm, layer, pos0, n_chunks, 0, NULL, &n_lent);
}

mz_status mz_mem_acquire_window_lend(mz_mem *mm, int layer, size_t pos0, size_t n_chunks,
                                     size_t first_written, mz_kv_lent *lent, size_t *n_lent)
{
    MZ_ASSERT(layer >= 0 && layer < mm->n_layer && n_chunks <= mm->max_chunks);
    *n_lent = 0;
    struct rjob *j = mm->job;
    const bool lending = j && lent;
    mz_status s;
    if ((s = kv_lost_check(mm, pos0))) return s;
    if ((s = acquire_unit(mm, j, &mm->wt->units[layer]))) return s;
    /* Everything not lent first: waiting for a unit of the memory path
     * needs the stack's items above it dropped, which lending stops. */
    const size_t c0 = mm_first_live_chunk(mm, layer, pos0);
    for (size_t c = c0; c < n_chunks; c++) {
        mz_unit *u = kv_unit(mm, layer, c);
        mz_unit_state st = mz_unit_state_get(u);
        if (st == MZ_UNIT_RESIDENT) continue;
        if (st == MZ_UNIT_ABSENT) {
            mm_sync_kv(mm); /* mapped by a reserve since the last sync */
            if (mz_unit_state_get(u) == MZ_UNIT_RESIDENT) continue;
        }
        if (lending && mm_job_lendable(j, u)) {
            if (c < first_written) continue;
            s = mm_job_take(j, u, pos0);
            if (s == MZ_OK) continue;
            if (s != MZ_AGAIN) return s;
        }
        if ((s = acquire_unit(mm, j, u))) return s;
    }
    for (size_t c = c0; lending && c < MZ_MIN(first_written, n_chunks); c++) {
        mz_unit *u = kv_unit(mm, layer, c);
        mz_compstack_view v;
        if (mz_unit_state_get(u) == MZ_UNIT_RESIDENT || !mm_job_lend(j, u, &v)) continue;
        lent[(*n_lent)++] = (mz_kv_lent){.chunk = c, .data = v.data, .len = v.len, .enc = u->enc};
    }
    if (lending) mm_job_count_lent(j, *n_lent);
    if (j && layer == 0) mm_job_note_compute(j);
    return MZ_OK;
}

mz_status mz_mem_decode_lent(const mz_mem *mm, const mz_kv_lent *l, void *dst)
{
    mz_status s = mz_codec_decode(l->enc, l->data, l->len, (mz_f16 *)dst, mm->n_values);
    return s ? mz_fail_prefix(s, "decoding KV chunk %zu from the compressed stack failed", l->chunk) : MZ_OK;
}

bool mz_mem_lent_rows_readable(const mz_kv_lent *l, size_t row_values)
{
    return mz_codec_reads_ranges(l->enc, row_values);
}

mz_status mz_mem_read_lent_rows(const mz_mem *mm, const mz_kv_lent *l, size_t v0, mz_f16 *dst, size_t k)
{
    mz_status s = l->enc->decode_range(l->enc, l->data, l->len, mm->n_values, v0, dst, k);
    return s ? mz_fail_prefix(s, "reading KV chunk %zu from the compressed stack failed", l->chunk) : MZ_OK;
}

void mz_mem_end_lending(mz_mem *mm)
{
    if (mm->job) mm_job_end_lending(mm->job);
}

mz_status mz_mem_restore_all(mz_mem *mm, mz_restore_report *r)
{
    mz_restore_report dummy;
    if (!r) r = &dummy;
    memset(r, 0, sizeof *r);
    mz_mem_restore_finish(mm); /* a request's restore that went on after it: done first */
    double t0 = mz_time_ms();
    mz_status s = MZ_OK;
    mm_sync_kv(mm);
    /* Forward-in: layer by layer, the weights and then the chunks in order,
     * which pops the compressed stack from its top. */
    for (int l = 0; l < mm->n_layer && !s; l++) {
        mz_unit *w = &mm->wt->units[l];
        if (mz_unit_state_get(w) != MZ_UNIT_RESIDENT) s = mm_restore_unit(mm, w, r);
        for (size_t c = 0; c < mm->kv->n_chunks && !s; c++) {
            mz_unit *u = kv_unit(mm, l, c);
            mz_unit_state st = mz_unit_state_get(u);
            if (st != MZ_UNIT_RESIDENT && !mm_kv_stored_dead(mm, l, c, st))
                s = mm_restore_unit(mm, u, r);
        }
    }
    r->time_ms = mz_time_ms() - t0;
    return s;
}
