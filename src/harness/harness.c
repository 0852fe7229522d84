/*
 * harness.c — the accessors of harness.h (benchmarks and tools only).
 */
#include "harness.h"

#include "../codec/codec.h"
#include "../core/core.h"
#include "../engine/engine.h"
#include "../kernels/kernels.h"
#include "../mem/manager.h"
#include "../mem/policy.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

mz_status mz_harness_compkv(mz_ctx_t *c, size_t batch, double *ms, double *payload,
                            size_t *n_units)
{
    size_t n = (size_t)c->kv.n_layer * c->kv.n_chunks;
    *n_units = n;
    mz_evict_step *comp = calloc(n, sizeof *comp), *move = calloc(n, sizeof *move);
    if (!comp || !move) {
        free(comp);
        free(move);
        return mz_fail(MZ_E_NOMEM, "bench_compkv: no memory for %zu steps", n);
    }
    for (int l = 0, i = 0; l < c->kv.n_layer; l++)
        for (size_t k = 0; k < c->kv.n_chunks; k++, i++) {
            comp[i] = (mz_evict_step){.kind = MZ_UNIT_KV, .layer = l, .chunk = k,
                                      .dest = MZ_DEST_COMPRESS, .stage = MZ_EVICT_STAGE_KV_ONLY};
            /* the stack's bottom is the first item pushed */
            move[i] = comp[i];
            move[i].dest = MZ_DEST_STORE_COMPRESSED;
            move[i].stage = MZ_EVICT_STAGE_COMP_KV;
        }
    int64_t freed = 0;
    size_t moved = 0;
    mz_evict_report rep;
    memset(&rep, 0, sizeof rep);
    mz_policy_view v; /* takes in the chunks the fill or the restore made */
    mz_mem_view(c->mem, false, &v);
    mz_status s = mz_mem_evict_steps(c->mem, comp, n, SIZE_MAX, &freed, &moved, &rep);
    if (!s && moved != n) s = mz_fail(MZ_E_INVAL, "compress: %zu of %zu chunks moved", moved, n);
    if (!s) {
        mz_mem_stats st;
        mz_get_mem_stats(c, &st);
        *payload = (double)st.kv.compressed_bytes;
        mz_mem_set_compkv_batch(c->mem, batch);
        freed = 0;
        moved = 0;
        double t0 = mz_time_ms();
        s = mz_mem_evict_steps(c->mem, move, n, SIZE_MAX, &freed, &moved, &rep);
        *ms = mz_time_ms() - t0;
        if (!s && moved != n) s = mz_fail(MZ_E_INVAL, "compkv: %zu of %zu items moved", moved, n);
    }
    free(comp);
    free(move);
    return s;
}
