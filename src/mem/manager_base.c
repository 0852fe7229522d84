/*
 * manager_base.c — what every move of the memory manager uses (evict.c,
 * restore.c, restore_job.c, truncate.c, store_hooks.c and manager.c):
 * unit names for messages, the KV units brought in line with the cache's
 * mappings, the expected encoded chunk size and the per-unit times that
 * follow it, the swap file and model-file reader opened on first use, and
 * reading a stored unit back (both restore paths: restore.c's blocking one
 * and restore_job.c's lanes). Below the moves (it calls none of them), so
 * the manager's files form no circle: restore.c waits on restore_job.c's
 * job, and restore_job.c calls nothing of restore.c. Lock order and the
 * moves: manager.c's top comment.
 */
#define _GNU_SOURCE
#include "manager_impl.h"

#include <string.h>

const char *mm_unit_name(const mz_unit *u, char *buf, size_t cap)
{
    if (u->kind == MZ_UNIT_KV)
        snprintf(buf, cap, "KV chunk (layer %d, chunk %d)", u->layer, u->chunk);
    else
        snprintf(buf, cap, "weights of layer %d", u->layer);
    return buf;
}

void mm_settle(mz_mem *mm)
{
    mz_mem_restore_finish(mm);
    mm_sync_kv(mm);
}

/* Brings KV unit states in line with the cache's mappings: chunks mapped
 * since the last call become RESIDENT units, chunks unmapped by a truncate
 * become ABSENT. Owner thread. */
void mm_sync_kv(mz_mem *mm)
{
    const mz_kv_cache *kv = mm->kv;
    for (int l = 0; l < mm->n_layer; l++) {
        for (size_t c = 0; c < mm->max_chunks; c++) {
            mz_unit *u = kv_unit(mm, l, c);
            uint8_t *p = kv->chunks[l][c];
            mz_unit_state s = mz_unit_state_get(u);
            if (s == MZ_UNIT_ABSENT && p) {
                u->buf = p;
                u->bytes = kv->chunk_bytes;
                mz_unit_set(u, MZ_UNIT_RESIDENT);
            } else if (s == MZ_UNIT_RESIDENT && !p) {
                u->buf = NULL;
                mz_unit_set(u, MZ_UNIT_ABSENT);
            } else {
                MZ_ASSERT(p || s == MZ_UNIT_ABSENT);
            }
        }
    }
}

/* Expected size of one encoded chunk: the mean of the chunks encoded so far,
 * with the seed (the codec's typical ratio, docs/CODECS.md) counted as
 * ENC_SEED_WEIGHT chunks. bound() is a worst case (cachegen: 1.14x raw
 * where it gives about 0.25x) and only sizes buffers. */
#define ENC_SEED_WEIGHT 8
size_t mm_enc_expected(const mz_mem *mm)
{
    uint64_t w = ENC_SEED_WEIGHT + mm->enc_n;
    return (size_t)((mm->enc_seed * ENC_SEED_WEIGHT + mm->enc_sum + w / 2) / w);
}

/* Per-unit times from the profile at the current expected encoded size (the
 * read half of t_rkvc follows it; decode and the rest do not move). */
void mm_refresh_times(mz_mem *mm)
{
    mm->pu.kv_enc_bytes = mm_enc_expected(mm);
    mz_profile_derive(&mm->prof, &mm->pu, &mm->times);
}

/* ---- storage helpers ------------------------------------------------------------------ */

/* The swap file: the engine's (shared by its sessions, opened by the first
 * that stores) or, for a session with test flags (or a stored session, whose
 * data file is its swap file: store_hooks.c), the session's. */
mz_status mm_ensure_swap(mz_mem *mm)
{
    if (mm->swap) return MZ_OK;
    mz_mem_shared *sh = mm->shared_swap ? mm->shared : NULL;
    if (sh) {
        pthread_mutex_lock(&sh->lock);
        if (sh->swap) {
            mm->swap = sh->swap;
            pthread_mutex_unlock(&sh->lock);
            return MZ_OK;
        }
    }
    mz_swapfile_params sp = mz_swapfile_params_default();
    sp.dir = mm->swap_dir;
    sp.flags = mm->swap_flags;
    mz_profile_io_shape(&mm->prof, &sp.max_io_bytes, &sp.queue_depth);
    mz_status s = mz_swapfile_open(&sp, &mm->swap);
    if (!s && sh) sh->swap = mm->swap;
    if (sh) pthread_mutex_unlock(&sh->lock);
    if (s) return mz_fail_prefix(s, "cannot create the swap file");
    if (!mz_swapfile_is_direct(mm->swap))
        mz_log(MZ_LOG_WARN, "swap file %s: O_DIRECT refused; using buffered I/O + fadvise",
               mz_swapfile_path(mm->swap));
    return MZ_OK;
}

mz_status mm_swap_write(mz_mem *mm, const void *buf, size_t len, uint64_t tag,
                            mz_swap_slot *slot)
{
    mz_status s = mz_swapfile_write(mm->swap, buf, len, tag, slot);
    if (!s) atomic_fetch_add(&mm->n_slots, 1);
    return s;
}

void mm_swap_slot_free(mz_mem *mm, mz_swap_slot slot)
{
    mz_swapfile_slot_free(mm->swap, slot);
    atomic_fetch_sub(&mm->n_slots, 1);
}

/* The model-file reader: the engine's when there is one. Weight reloads
 * run under the engine's compute lock, one session at a time, and a reader
 * is used by one thread at a time (direct_read.h). */
mz_status mm_open_dfile(mz_mem *mm, mz_dfile_t **out)
{
    mz_dfile_params dp = mz_dfile_params_default();
    mz_profile_io_shape(&mm->prof, &dp.max_io_bytes, &dp.queue_depth);
    return mz_dfile_open(mm->model->path, &dp, out);
}

mz_status mm_ensure_dfile(mz_mem *mm)
{
    if (mm->dfile) return MZ_OK;
    mz_mem_shared *sh = mm->shared;
    if (sh) pthread_mutex_lock(&sh->lock);
    mz_status s = MZ_OK;
    if (sh && sh->dfile) mm->dfile = sh->dfile;
    else if (!(s = mm_open_dfile(mm, &mm->dfile)) && sh) sh->dfile = mm->dfile;
    if (sh) pthread_mutex_unlock(&sh->lock);
    if (s) return mz_fail_prefix(s, "cannot open the model file %s", mm->model->path);
    return MZ_OK;
}

/* Fills u (BUSY, pages mapped) from the swap file or the model file, using
 * scratch for encoded records. Needs no manager lock: the swap file has its
 * own, mm->dfile is opened before any concurrent use, and only u's mover
 * writes u->buf. Error message set (without the unit's name). */
mz_status mm_read_stored(mz_mem *mm, mz_unit *u, mz_unit_state from, uint8_t *scratch,
                             size_t scratch_cap)
{
    mz_status s = MZ_OK;
    switch (from) {
    case MZ_UNIT_STORED_RAW: {
        size_t len = 0;
        s = mz_swapfile_read(mm->swap, u->slot, u->buf, u->bytes, &len);
        if (s) {
            mz_fail_prefix(s, "reading it from the swap file failed");
        } else if (len != u->bytes) {
            s = mz_fail(MZ_E_CORRUPT, "the swap file holds %zu bytes for it, expected %zu", len,
                        u->bytes);
        }
        break;
    }
    case MZ_UNIT_STORED_COMPRESSED: {
        size_t len = 0;
        s = mz_swapfile_read(mm->swap, u->slot, scratch, scratch_cap, &len);
        if (s) {
            mz_fail_prefix(s, "reading it from the swap file failed");
            break;
        }
        s = mz_codec_decode(u->enc, scratch, len, (mz_f16 *)u->buf, mm->n_values);
        if (s) mz_fail_prefix(s, "decoding it after reading it from the swap file failed");
        break;
    }
    case MZ_UNIT_DROPPED:
        if ((s = mm_ensure_dfile(mm))) break;
        s = mz_wtable_read_block(mm->wt, mm->dfile, u->layer);
        break;
    default:
        MZ_ASSERT(!"mm_read_stored from a state that is not stored");
    }
    return s;
}
