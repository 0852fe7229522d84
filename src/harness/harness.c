/*
 * harness.c — the accessors of harness.h (benchmarks and tools only).
 */
#include "harness.h"

#include "../codec/codec.h"
#include "../core/core.h"
#include "../engine/engine.h"
#include "../kernels/kernels.h"

mz_model_t *mz_harness_ctx_model(const mz_ctx_t *c) { return c->model; }

const char *mz_harness_model_path(const mz_model_t *m) { return m->path; }

int mz_harness_ctx_n_threads(const mz_ctx_t *c) { return c->params.n_threads; }

size_t mz_harness_kv_bytes(const mz_ctx_t *c) { return mz_kv_cache_bytes(&c->kv); }

int mz_harness_kv_n_layer(const mz_ctx_t *c) { return c->kv.n_layer; }

size_t mz_harness_kv_chunk_bytes(const mz_ctx_t *c) { return c->kv.chunk_bytes; }

uint8_t *mz_harness_kv_chunk(mz_ctx_t *c, int l, size_t ci)
{
    if (l < 0 || l >= c->kv.n_layer || ci >= c->kv.n_chunks) return NULL;
    return c->kv.chunks[l][ci];
}

const char *mz_harness_isa(void) { return mz_kernels_isa(); }
const char *mz_harness_q8_isa(void) { return mz_q8_isa(); }

double mz_harness_time_ms(void) { return mz_time_ms(); }
