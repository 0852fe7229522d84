/*
 * kv_cache.c — per-layer chunk-pointer arrays of the KV cache.
 */
#define _GNU_SOURCE
#include "kv_cache.h"

#include "../kernels/kernels.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define THP_BYTES ((size_t)2 << 20)
#define THP_MAX_GROUP 64

static size_t page_round(size_t n)
{
    size_t p = mz_page_size();
    return (n + p - 1) / p * p;
}

size_t mz_kv_thp_group(size_t chunk_bytes, const char *mode)
{
    size_t stride = page_round(chunk_bytes), a = stride, b = THP_BYTES;
    while (b) { /* gcd */
        size_t t = a % b;
        a = b;
        b = t;
    }
    size_t g = THP_BYTES / a;
    if (mode && !strcmp(mode, "0")) return 0;
    if (mode && !strcmp(mode, "1")) return g <= THP_MAX_GROUP ? g : 0;
    return g == 1 ? 1 : 0; /* auto */
}

/* Maps a 2 MiB-aligned slab of g chunks for layer l from chunk c: c's
 * pointer is set, the others go to spare. Returns false when it cannot
 * (the caller maps the chunk on its own). */
static bool map_slab(mz_kv_cache *kv, int l, size_t c)
{
    size_t g = kv->thp_group, stride = page_round(kv->chunk_bytes);
    if (c + g > kv->max_chunks) return false;
    for (size_t i = c; i < c + g; i++)
        if (kv->chunks[l][i] || kv->spare[l][i]) return false;
    size_t len = g * stride;
    uint8_t *raw = mmap(NULL, len + THP_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                        -1, 0);
    if (raw == MAP_FAILED) return false;
    uint8_t *p = (uint8_t *)(((uintptr_t)raw + THP_BYTES - 1) & ~(uintptr_t)(THP_BYTES - 1));
    if (p > raw) munmap(raw, (size_t)(p - raw));
    size_t tail = (size_t)(raw + len + THP_BYTES - (p + len));
    if (tail) munmap(p + len, tail);
    (void)madvise(p, len, MADV_HUGEPAGE); /* advice only: 4 KiB pages work the same */
    kv->chunks[l][c] = p;
    for (size_t i = 1; i < g; i++) kv->spare[l][c + i] = p + i * stride;
    return true;
}

mz_status mz_kv_cache_init(mz_kv_cache *kv, int n_layer, int n_head_kv, int head_dim, size_t n_ctx)
{
    memset(kv, 0, sizeof *kv);
    kv->n_layer = n_layer;
    kv->n_head_kv = n_head_kv;
    kv->head_dim = head_dim;
    kv->chunk_bytes = mz_kv_chunk_bytes(n_head_kv, head_dim);
    kv->max_chunks = (n_ctx + MZ_KV_CHUNK_TOKENS - 1) / MZ_KV_CHUNK_TOKENS;
    kv->thp_group = mz_kv_thp_group(kv->chunk_bytes, getenv("MZCACHE_KV_THP"));
    kv->chunks = mz_calloc((size_t)n_layer, sizeof *kv->chunks);
    kv->spare = mz_calloc((size_t)n_layer, sizeof *kv->spare);
    if (!kv->chunks || !kv->spare) {
        mz_kv_cache_free(kv);
        return MZ_E_NOMEM;
    }
    for (int l = 0; l < n_layer; l++) {
        kv->chunks[l] = mz_calloc(kv->max_chunks, sizeof **kv->chunks);
        kv->spare[l] = mz_calloc(kv->max_chunks, sizeof **kv->spare);
        if (!kv->chunks[l] || !kv->spare[l]) {
            mz_kv_cache_free(kv);
            return MZ_E_NOMEM;
        }
    }
    return MZ_OK;
}

void mz_kv_cache_free(mz_kv_cache *kv)
{
    for (int l = 0; kv->chunks && l < kv->n_layer; l++) {
        if (!kv->chunks[l]) continue;
        for (size_t c = 0; c < kv->max_chunks; c++) mz_pages_free(kv->chunks[l][c], kv->chunk_bytes);
        free(kv->chunks[l]);
    }
    for (int l = 0; kv->spare && l < kv->n_layer; l++) {
        if (!kv->spare[l]) continue;
        for (size_t c = 0; c < kv->max_chunks; c++) mz_pages_free(kv->spare[l][c], kv->chunk_bytes);
        free(kv->spare[l]);
    }
    free(kv->chunks);
    free(kv->spare);
    memset(kv, 0, sizeof *kv);
}

mz_status mz_kv_cache_reserve(mz_kv_cache *kv, size_t n_pos)
{
    size_t need = (n_pos + MZ_KV_CHUNK_TOKENS - 1) / MZ_KV_CHUNK_TOKENS;
    if (need > kv->max_chunks)
        return mz_fail(MZ_E_CONTEXT_FULL, "%zu positions exceed the context of %zu", n_pos,
                       kv->max_chunks * MZ_KV_CHUNK_TOKENS);
    /* Without slabs, the chunks with neither memory nor a spare come from
     * one mapping, carved per chunk (each is still unmapped on its own by
     * mz_pages_free): one mmap instead of one per chunk (3840 for a 32k
     * SmolLM2 resume). A failed mapping falls back to a mapping per chunk. */
    uint8_t *carve = NULL;
    size_t stride = page_round(kv->chunk_bytes), n_carve = 0;
    if (!kv->thp_group) {
        for (size_t c = kv->n_chunks; c < need; c++)
            for (int l = 0; l < kv->n_layer; l++) n_carve += !kv->chunks[l][c] && !kv->spare[l][c];
        if (n_carve > 1) {
            void *p = mmap(NULL, n_carve * stride, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p != MAP_FAILED) carve = p;
        }
    }
    for (size_t c = kv->n_chunks; c < need; c++) {
        for (int l = 0; l < kv->n_layer; l++) {
            if (kv->chunks[l][c]) continue;
            if (kv->spare[l][c]) {
                kv->chunks[l][c] = kv->spare[l][c];
                kv->spare[l][c] = NULL;
                continue;
            }
            if (carve) {
                kv->chunks[l][c] = carve;
                carve += stride;
                continue;
            }
            if (kv->thp_group && map_slab(kv, l, c)) continue;
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
