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
 * Huge pages. Releasing 4 KiB pages costs the kernel ~0.1 s of CPU per GiB
 * (docs/BENCHMARKS.md, issue 17), a transparent huge page ~3 ms. A chunk
 * can only sit on huge pages when whole 2 MiB pages hold whole chunks, so
 * chunks are then carved from *slabs*: one 2 MiB-aligned mapping
 * (MADV_HUGEPAGE) of thp_group consecutive chunks of one layer, the fewest
 * whose size is a multiple of 2 MiB (32 of SmolLM2's 192 KiB chunks, 2 of
 * qwen3-0.6b's 1 MiB ones). Chunks of a slab not yet in use are kept in
 * spare[][] until reserve hands them out. MZCACHE_KV_THP picks: "auto"
 * (default) slabs only of single chunks that are a 2 MiB multiple, "1" any
 * group of at most 64 chunks, "0" never. With groups above one, evicting
 * part of a huge page leaves that page allocated until the kernel splits it
 * (its deferred-split shrinker, which runs under memory pressure), and up
 * to one huge page per layer beyond the positions in use is resident.
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
    uint8_t ***spare;          /* [n_layer][max_chunks]: slab chunks not handed out, or NULL */
    size_t thp_group;          /* chunks per slab; 0: every chunk its own mapping */
} mz_kv_cache;

/* Chunks per huge-page slab for chunks of chunk_bytes under MZCACHE_KV_THP
 * (value: its text, or NULL for the default); 0: no slabs. */
size_t mz_kv_thp_group(size_t chunk_bytes, const char *mode);

mz_status mz_kv_cache_init(mz_kv_cache *kv, int n_layer, int n_head_kv, int head_dim, size_t n_ctx);
void mz_kv_cache_free(mz_kv_cache *kv);
/* Makes sure positions [0, n_pos) have chunks in every layer. */
mz_status mz_kv_cache_reserve(mz_kv_cache *kv, size_t n_pos);
/* Releases chunks wholly beyond n_pos (after a truncate). */
void mz_kv_cache_shrink(mz_kv_cache *kv, size_t n_pos);
/* Bytes of the chunks that exist (resident or evicted). */
size_t mz_kv_cache_bytes(const mz_kv_cache *kv);

#endif
