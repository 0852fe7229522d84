/*
 * truncate.c — evicted chunks beyond a new context length give up their
 * swap slots and compressed-stack items.
 */
#define _GNU_SOURCE
#include "manager_impl.h"

#include <string.h>

mz_status mz_mem_kv_truncate(mz_mem *mm, size_t n_pos)
{
    size_t keep = (n_pos + MZ_KV_CHUNK_TOKENS - 1) / MZ_KV_CHUNK_TOKENS;
    size_t n_drop_stack = 0;
    mz_status s = MZ_OK;
    mm_settle(mm);
    pthread_mutex_lock(&mm->lock);
    /* [store] the write-behind may be reading a chunk this cuts (pinned): it
     * is done first; it gives no copy to a chunk at or past the lowered
     * count of full chunks, so none starts again. */
    for (int l = 0; l < mm->n_layer; l++)
        for (size_t c = n_pos / MZ_KV_CHUNK_TOKENS; c < mm->max_chunks; c++)
            while (kv_unit(mm, l, c)->wb_pin) pthread_cond_wait(&mm->store_cv, &mm->lock);
    /* [store] chunks from the one n_pos falls in will be written again: their
     * stored copies are no longer current. A kept chunk stored at its clean
     * slot keeps it as an ordinary slot; a dropped chunk's clean record stays
     * in the file (the current manifest may name it) and is left behind. */
    for (int l = 0; l < mm->n_layer; l++)
        for (size_t c = n_pos / MZ_KV_CHUNK_TOKENS; c < mm->max_chunks; c++) {
            mz_unit *u = kv_unit(mm, l, c);
            mz_unit_state st = mz_unit_state_get(u);
            if (c < keep || (st != MZ_UNIT_STORED_RAW && st != MZ_UNIT_STORED_COMPRESSED)) {
                if (u->clean && u->slot != u->clean) mm->store_leaked = true;
                mz_unit_set_clean(u, 0);
            }
        }
    for (int l = 0; l < mm->n_layer; l++) {
        for (size_t c = keep; c < mm->kv->n_chunks; c++) {
            mz_unit *u = kv_unit(mm, l, c);
            mz_unit_state st = mz_unit_state_get(u);
            if (st == MZ_UNIT_COMPRESSED) n_drop_stack++;
            if (st != MZ_UNIT_STORED_RAW && st != MZ_UNIT_STORED_COMPRESSED) continue;
            MZ_ASSERT(mz_unit_claim(u, st));
            if (u->slot != u->clean) mm_swap_slot_free(mm, u->slot); /* [store] kept for the manifest */
            else mm->store_leaked = true;
            mz_unit_set_clean(u, 0);
            u->slot = 0;
            /* Back to a plain mapping that the cache is about to unmap. */
            if ((s = mz_unit_map_pages(u))) {
                mz_unit_settle(u, st);
                goto out;
            }
            mz_unit_settle(u, MZ_UNIT_RESIDENT);
        }
    }
    /* Remove the truncated chunks' stack items; items above them that are
     * kept are decoded back into their chunks (the stack is LIFO). */
    while (n_drop_stack) {
        mz_unit *t = mm_stack_top_unit(mm);
        MZ_ASSERT(mz_unit_claim(t, MZ_UNIT_COMPRESSED));
        if ((s = mz_unit_map_pages(t))) {
            mz_unit_settle(t, MZ_UNIT_COMPRESSED);
            goto out;
        }
        if ((size_t)t->chunk >= keep) {
            s = mz_compstack_drop_top(mm->stack);
            MZ_ASSERT(s == MZ_OK);
            n_drop_stack--;
        } else if ((s = mm_decode_top_into(mm, t))) {
            mz_unit_release_pages(t);
            mz_unit_settle(t, MZ_UNIT_COMPRESSED);
            goto out;
        }
        mz_unit_settle(t, MZ_UNIT_RESIDENT);
    }
    if (n_pos <= mm->kv_lost_pos) mm->kv_lost_pos = SIZE_MAX; /* the lost rows are gone */
out:
    pthread_mutex_unlock(&mm->lock);
    return s;
}
