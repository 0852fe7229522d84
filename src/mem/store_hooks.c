/*
 * store_hooks.c — what the session store (src/store/session_store.c) asks of
 * a session's memory manager (contract: manager.h, "[store]").
 *
 * A full KV chunk never changes again, so one copy of it in the session's
 * store file stays current: the unit keeps that record as u->clean, eviction
 * then only releases its pages (evict.c), a restore keeps the record
 * (restore.c, restore_job.c), and a truncation below the chunk clears it
 * (truncate.c).
 */
#define _GNU_SOURCE
#include "manager_impl.h"

#include <stdlib.h>
#include <string.h>

void mz_mem_use_store_file(mz_mem *mm, mz_swapfile_t *sf, const mz_codec *codec)
{
    pthread_mutex_lock(&mm->lock);
    MZ_ASSERT(!mm->swap);
    mm->swap = sf;
    mm->store_codec = codec && strcmp(codec->name, "raw") != 0 ? codec : NULL;
    mm->shared_swap = false; /* the session's own: closed (kept on disk) by mz_mem_free */
    pthread_mutex_unlock(&mm->lock);
}

static bool same_codec(const mz_codec *a, const mz_codec *b)
{
    return a && b && a->encode == b->encode && a->param == b->param;
}

mz_status mz_mem_store_chunk(mz_mem *mm, int layer, size_t chunk, const _Atomic size_t *full,
                             bool *clean, bool *wrote)
{
    MZ_ASSERT(layer >= 0 && layer < mm->n_layer && chunk < mm->max_chunks);
    mz_unit *u = kv_unit(mm, layer, chunk);
    mz_status s = MZ_OK;
    *wrote = false;
    pthread_mutex_lock(&mm->lock);
    /* *full is lowered before a truncation takes mm->lock, so a chunk about
     * to be cut is never given a copy after the truncation cleared it. */
    const mz_codec *sc = mm->store_codec;
    mz_unit_state st = mz_unit_state_get(u);
    if (chunk >= atomic_load(full) || u->clean || !mm->swap) {
        *clean = chunk < atomic_load(full) && u->clean != 0;
        pthread_mutex_unlock(&mm->lock);
        return MZ_OK;
    }
    if ((!sc && st == MZ_UNIT_STORED_RAW) ||
        (sc && st == MZ_UNIT_STORED_COMPRESSED && same_codec(u->enc, sc))) {
        mz_unit_set_clean(u, u->slot); /* evicted into the store file as it would be written */
        *clean = true;
        *wrote = true; /* a new copy all the same: the eviction's write is not synced */
        pthread_mutex_unlock(&mm->lock);
        return MZ_OK;
    }
    *clean = false;
    if (st != MZ_UNIT_RESIDENT) {
        pthread_mutex_unlock(&mm->lock);
        return MZ_OK;
    }
    /* Pinned, the unit is written from its own pages without mm->lock held:
     * neither the forward pass (which only reads a full chunk) nor an
     * eviction (which skips it) waits for this I/O, and a truncation waits
     * for the pin. Only the owner and the worker call this, one at a time
     * (the session store's pass lock), so store_enc is this call's. */
    u->wb_pin = true;
    pthread_mutex_unlock(&mm->lock);

    const void *rec = u->buf;
    size_t len = u->bytes;
    if (sc) {
        size_t cap = mz_codec_bound(sc, mm->n_values);
        if (mm->store_enc_cap < cap) {
            free(mm->store_enc);
            mm->store_enc_cap = 0;
            if ((mm->store_enc = malloc(cap))) mm->store_enc_cap = cap;
        }
        s = mm->store_enc ? mz_codec_encode(sc, (const mz_f16 *)u->buf, mm->n_values, mm->store_enc,
                                            mm->store_enc_cap, &len)
                          : mz_fail(MZ_E_NOMEM, "out of memory (write-behind)");
        rec = mm->store_enc;
        if (s == MZ_E_FORMAT) { /* inf/NaN: q8 refuses; the chunk stays without a copy */
            mz_log(MZ_LOG_WARN, "KV chunk %d/%zu: %s; not stored", layer, chunk, mz_last_error());
            mz_clear_error();
            s = MZ_OK;
            len = 0;
        }
    }
    mz_swap_slot slot = 0;
    if (!s && len) s = mm_swap_write(mm, rec, len, kv_tag(layer, chunk), &slot);
    pthread_mutex_lock(&mm->lock);
    u->wb_pin = false;
    pthread_cond_broadcast(&mm->store_cv);
    if (slot) {
        if (chunk < atomic_load(full)) { /* else cut meanwhile: written again if it fills */
            mz_unit_set_clean(u, slot);
            *wrote = true;
        } else {
            mm_swap_slot_free(mm, slot);
        }
    }
    *clean = u->clean != 0;
    pthread_mutex_unlock(&mm->lock);
    return s;
}

mz_status mz_mem_store_clean_info(mz_mem *mm, int layer, size_t chunk, mz_swap_slot_info *out)
{
    mz_unit *u = kv_unit(mm, layer, chunk);
    pthread_mutex_lock(&mm->lock);
    mz_status s = u->clean && mm->swap ? mz_swapfile_slot_info(mm->swap, u->clean, out)
                                       : mz_fail(MZ_E_INVAL, "no stored copy");
    pthread_mutex_unlock(&mm->lock);
    return s;
}

mz_status mz_mem_store_adopt_chunks(mz_mem *mm, size_t n_chunks, const mz_swap_slot *slots)
{
    mm_sync_kv(mm);
    const size_t n = n_chunks * (size_t)mm->n_layer;
    mz_unit **claimed = malloc((n ? n : 1) * sizeof *claimed);
    if (!claimed) return mz_fail(MZ_E_NOMEM, "out of memory (adopting %zu KV units)", n);
    mz_status s = MZ_OK;
    size_t k = 0;
    for (size_t ch = 0; ch < n_chunks && !s; ch++)
        for (int l = 0; l < mm->n_layer; l++) {
            mz_unit *u = kv_unit(mm, l, ch);
            if (!mz_unit_claim(u, MZ_UNIT_RESIDENT)) {
                s = mz_fail(MZ_E_INVAL, "KV chunk %d/%zu is not a fresh resident chunk", l, ch);
                break;
            }
            mz_swap_slot slot = slots[ch * (size_t)mm->n_layer + (size_t)l];
            u->slot = slot;
            mz_unit_set_clean(u, slot);
            atomic_fetch_add(&mm->n_slots, 1);
            if (mm->store_codec) {
                u->enc = mm->store_codec;
                u->enc_bytes = mz_swapfile_slot_len(mm->swap, slot);
            }
            claimed[k++] = u;
        }
    /* Every claimed unit is settled, also after a failure: what was adopted
     * stays adopted, as one unit at a time would have left it. */
    mz_units_release_pages(claimed, k);
    for (size_t i = 0; i < k; i++)
        mz_unit_settle(claimed[i], mm->store_codec ? MZ_UNIT_STORED_COMPRESSED : MZ_UNIT_STORED_RAW);
    free(claimed);
    return s;
}

size_t mz_mem_store_n_clean_evicted(const mz_mem *mm) { return atomic_load(&mm->n_clean_evicted); }

mz_status mz_mem_store_tail(mz_mem *mm, int layer, size_t chunk, mz_swap_slot *slot)
{
    MZ_ASSERT(layer >= 0 && layer < mm->n_layer && chunk < mm->max_chunks);
    mm_sync_kv(mm);
    mz_unit *u = kv_unit(mm, layer, chunk);
    mz_status s;
    pthread_mutex_lock(&mm->lock);
    if (!mm->swap || !mz_unit_claim(u, MZ_UNIT_RESIDENT)) {
        s = mz_fail(MZ_E_INVAL, "KV chunk %d/%zu is not resident", layer, chunk);
    } else {
        s = mm_swap_write(mm, u->buf, u->bytes, kv_tag(layer, chunk), slot);
        if (!s) mm->n_store_extra++;
        mz_unit_settle(u, MZ_UNIT_RESIDENT);
    }
    pthread_mutex_unlock(&mm->lock);
    return s;
}

void mz_mem_store_slot_free(mz_mem *mm, mz_swap_slot slot)
{
    pthread_mutex_lock(&mm->lock);
    MZ_ASSERT(mm->n_store_extra > 0);
    mm_swap_slot_free(mm, slot);
    mm->n_store_extra--;
    pthread_mutex_unlock(&mm->lock);
}

void mz_mem_store_hold(mz_mem *mm)
{
    pthread_mutex_lock(&mm->lock);
    atomic_fetch_add(&mm->n_slots, 1);
    mm->n_store_extra++;
    pthread_mutex_unlock(&mm->lock);
}
