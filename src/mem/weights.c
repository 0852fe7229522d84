/*
 * weights.c — the engine's weight units (contract in weights.h).
 */
#include "weights.h"

#include "../core/core.h"
#include "../io/io.h"

#include <stdlib.h>

mz_status mz_wtable_init(mz_model_t *m, mz_wtable **out)
{
    *out = NULL;
    mz_wtable *t = mz_calloc(1, sizeof *t);
    if (!t) return MZ_E_NOMEM;
    t->model = m;
    t->n_layer = m->cfg.n_layer;
    size_t n = (size_t)MZ_MAX(t->n_layer, 1);
    t->units = mz_calloc(n, sizeof *t->units);
    t->hash = mz_calloc(n, sizeof *t->hash);
    t->pins = mz_calloc(n, sizeof *t->pins);
    if (!t->units || !t->hash || !t->pins) {
        free(t->units);
        free(t->hash);
        free((void *)(uintptr_t)t->pins);
        free(t);
        return MZ_E_NOMEM;
    }
    pthread_mutex_init(&t->lock, NULL);
    atomic_init(&t->n_pinned, 0);
    for (int l = 0; l < t->n_layer; l++) {
        mz_unit *u = &t->units[l];
        u->kind = MZ_UNIT_WEIGHTS;
        u->layer = l;
        u->chunk = -1;
        u->buf = m->blocks[l].buf;
        u->bytes = m->blocks[l].buf_bytes;
        atomic_init(&t->pins[l], 0);
        mz_unit_set(u, MZ_UNIT_RESIDENT);
    }
    *out = t;
    return MZ_OK;
}

void mz_wtable_free(mz_wtable *t)
{
    if (!t) return;
    mz_dfile_t *f = NULL;
    for (int l = 0; l < t->n_layer; l++) {
        mz_unit *u = &t->units[l];
        mz_unit_state st = mz_unit_state_get(u);
        if (st != MZ_UNIT_DROPPED) continue;
        mz_status s = MZ_OK;
        if (!f && (s = mz_dfile_open(t->model->path, NULL, &f)))
            mz_fail_prefix(s, "cannot open the model file %s", t->model->path);
        if (!s && !mz_unit_claim(u, MZ_UNIT_DROPPED)) s = mz_fail(MZ_E_INVAL, "busy");
        if (!s) {
            if (!(s = mz_unit_map_pages(u))) s = mz_wtable_read_block(t, f, l);
            if (s) mz_unit_release_pages(u);
            mz_unit_settle(u, s ? MZ_UNIT_DROPPED : MZ_UNIT_RESIDENT);
        }
        if (s)
            mz_log(MZ_LOG_ERROR, "weights of layer %d stay dropped in the model: %s", l,
                   mz_last_error());
    }
    mz_dfile_close(f);
    pthread_mutex_destroy(&t->lock);
    free(t->units);
    free(t->hash);
    free((void *)(uintptr_t)t->pins);
    free(t);
}

void mz_wtable_attach(mz_wtable *t)
{
    pthread_mutex_lock(&t->lock);
    t->refs++;
    pthread_mutex_unlock(&t->lock);
}

void mz_wtable_detach(mz_wtable *t)
{
    pthread_mutex_lock(&t->lock);
    t->refs--;
    pthread_mutex_unlock(&t->lock);
}

int mz_wtable_refs(mz_wtable *t)
{
    pthread_mutex_lock(&t->lock);
    int r = t->refs;
    pthread_mutex_unlock(&t->lock);
    return r;
}

void mz_wtable_pin(mz_wtable *t, int layer)
{
    atomic_fetch_add(&t->pins[layer], 1);
    atomic_fetch_add(&t->n_pinned, 1);
    /* Pairs with the fence in drop_claimed: the caller's state check that
     * follows and the evictor's pin check cannot both miss (weights.h). */
    atomic_thread_fence(memory_order_seq_cst);
}

void mz_wtable_unpin(mz_wtable *t, int layer)
{
    int old = atomic_fetch_sub(&t->pins[layer], 1);
    MZ_ASSERT(old > 0);
    atomic_fetch_sub(&t->n_pinned, 1);
}

bool mz_wtable_any_pinned(const mz_wtable *t)
{
    return atomic_load(&((mz_wtable *)(uintptr_t)t)->n_pinned) > 0;
}

bool mz_wtable_drop_claimed(mz_wtable *t, int layer)
{
    mz_unit *u = &t->units[layer];
    atomic_thread_fence(memory_order_seq_cst); /* pairs with mz_wtable_pin */
    if (atomic_load(&t->pins[layer]) > 0) {
        mz_unit_settle(u, MZ_UNIT_RESIDENT);
        return false;
    }
    /* Reloading from the file must give these very bytes back; the hash
     * catches a model file that changed (or a bad read) at restore. */
    t->hash[layer] = mz_hash64(u->buf, u->bytes, 0);
    mz_unit_drop_pages(u);
    return true;
}

void mz_wtable_drop_finish(mz_wtable *t, int layer)
{
    mz_unit *u = &t->units[layer];
    mz_unit_protect_pages(u);
    mz_unit_settle(u, MZ_UNIT_DROPPED);
}

mz_status mz_wtable_read_block(mz_wtable *t, mz_dfile_t *f, int layer)
{
    mz_unit *u = &t->units[layer];
    const mz_tensor *ts[MZ_BLOCK_TENSORS_MAX];
    mz_dread_item items[MZ_BLOCK_TENSORS_MAX];
    int n = mz_model_block_tensors(&t->model->blocks[layer], ts);
    for (int i = 0; i < n; i++)
        items[i] = (mz_dread_item){.off = ts[i]->file_offset, .len = ts[i]->nbytes,
                                   .dst = u->buf + ts[i]->offset};
    mz_status s = mz_dfile_read_batch(f, items, (size_t)n);
    if (s) return mz_fail_prefix(s, "reloading it from the model file failed");
    /* the file's layout -> the one the kernels read (src/model: repacking) */
    if ((s = mz_model_block_to_layout(t->model, layer, u->buf))) return s;
    if (mz_hash64(u->buf, u->bytes, 0) != t->hash[layer])
        return mz_fail(MZ_E_CORRUPT, "the bytes reloaded from the model file differ from "
                                     "those dropped (did %s change?)", t->model->path);
    return MZ_OK;
}
