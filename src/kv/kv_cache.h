/*
 * kv_cache.h — the chunked KV cache of one context.
 *
 * Per layer, an array of chunk pointers; chunk c of layer l holds positions
 * [256c, 256c+256) as K then V (layout in kernels.h, mz_attn_args). Chunks are
 * separate page-aligned mappings, never one contiguous buffer, so each one is
 * a unit the memory manager can evict and restore on its own. A chunk is
 * mapped when the first position in it is written.
 *
 * Eviction (src/mem/manager.c) never changes a chunk pointer: an evicted
 * chunk keeps its address range, released and PROT_NONE, until it is
 * restored or the cache shrinks past it.
 *
 * Thread contract: owner thread only (the context's).
 */
#ifndef MZ_KV_CACHE_H
#define MZ_KV_CACHE_H

#include "../core/core.h"
#include "../core/dtype.h"

typedef struct mz_kv_cache {
    int n_layer;
    int n_head_kv;
    int head_dim;
    size_t chunk_bytes;
    size_t max_chunks;         /* per layer: ceil(n_ctx / 256) */
    size_t n_chunks;           /* chunks mapped per layer (same for all layers) */
    uint8_t ***chunks;         /* [n_layer][max_chunks] */
} mz_kv_cache;

mz_status mz_kv_cache_init(mz_kv_cache *kv, int n_layer, int n_head_kv, int head_dim, size_t n_ctx);
void mz_kv_cache_free(mz_kv_cache *kv);
/* Makes sure positions [0, n_pos) have chunks in every layer. */
mz_status mz_kv_cache_reserve(mz_kv_cache *kv, size_t n_pos);
/* Releases chunks wholly beyond n_pos (after a truncate). */
void mz_kv_cache_shrink(mz_kv_cache *kv, size_t n_pos);
/* Bytes of the chunks that exist (resident or evicted). */
size_t mz_kv_cache_bytes(const mz_kv_cache *kv);

#endif
