/*
 * kv_cache.c — per-layer chunk-pointer arrays of the KV cache.
 */
#include "kv_cache.h"

#include "../kernels/kernels.h"

#include <errno.h>
#include <string.h>

mz_status mz_kv_cache_init(mz_kv_cache *kv, int n_layer, int n_head_kv, int head_dim, size_t n_ctx)
{
    memset(kv, 0, sizeof *kv);
    kv->n_layer = n_layer;
    kv->n_head_kv = n_head_kv;
    kv->head_dim = head_dim;
    kv->chunk_bytes = mz_kv_chunk_bytes(n_head_kv, head_dim);
    kv->max_chunks = (n_ctx + MZ_KV_CHUNK_TOKENS - 1) / MZ_KV_CHUNK_TOKENS;
    kv->chunks = mz_calloc((size_t)n_layer, sizeof *kv->chunks);
    if (!kv->chunks) return MZ_E_NOMEM;
    for (int l = 0; l < n_layer; l++) {
        kv->chunks[l] = mz_calloc(kv->max_chunks, sizeof **kv->chunks);
        if (!kv->chunks[l]) {
            mz_kv_cache_free(kv);
            return MZ_E_NOMEM;
        }
    }
    return MZ_OK;
}

void mz_kv_cache_free(mz_kv_cache *kv)
{
    if (!kv->chunks) return;
    for (int l = 0; l < kv->n_layer; l++) {
        if (!kv->chunks[l]) continue;
        for (size_t c = 0; c < kv->max_chunks; c++) mz_pages_free(kv->chunks[l][c], kv->chunk_bytes);
        free(kv->chunks[l]);
    }
    free(kv->chunks);
    memset(kv, 0, sizeof *kv);
}

mz_status mz_kv_cache_reserve(mz_kv_cache *kv, size_t n_pos)
{
    size_t need = (n_pos + MZ_KV_CHUNK_TOKENS - 1) / MZ_KV_CHUNK_TOKENS;
    if (need > kv->max_chunks)
        return mz_fail(MZ_E_CONTEXT_FULL, "%zu positions exceed the context of %zu", n_pos,
                       kv->max_chunks * MZ_KV_CHUNK_TOKENS);
    for (size_t c = kv->n_chunks; c < need; c++) {
        for (int l = 0; l < kv->n_layer; l++) {
            if (kv->chunks[l][c]) continue;
            kv->chunks[l][c] = mz_pages_alloc(kv->chunk_bytes);
            if (!kv->chunks[l][c])
                return mz_fail(MZ_E_NOMEM, "cannot map a %zu-byte KV chunk: %s", kv->chunk_bytes,
                               strerror(errno));
        }
        kv->n_chunks = c + 1;
    }
    return MZ_OK;
}

void mz_kv_cache_shrink(mz_kv_cache *kv, size_t n_pos)
{
    size_t keep = (n_pos + MZ_KV_CHUNK_TOKENS - 1) / MZ_KV_CHUNK_TOKENS;
    for (size_t c = keep; c < kv->n_chunks; c++) {
        for (int l = 0; l < kv->n_layer; l++) {
            mz_pages_free(kv->chunks[l][c], kv->chunk_bytes);
            kv->chunks[l][c] = NULL;
        }
    }
    if (keep < kv->n_chunks) kv->n_chunks = keep;
}

size_t mz_kv_cache_bytes(const mz_kv_cache *kv)
{
    return kv->n_chunks * (size_t)kv->n_layer * kv->chunk_bytes;
}
