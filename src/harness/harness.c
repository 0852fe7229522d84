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

void mz_harness_placement_get(mz_ctx_t *c, mz_harness_placement *out)
{
    memset(out, 0, sizeof *out);
    mz_policy_view v; /* takes in the chunks the fill or a prefill made */
    mz_mem_view(c->mem, false, &v);
    for (int l = 0; l < v.n_layer; l++) {
        if (mz_unit_state_get(&v.weights[l]) == MZ_UNIT_DROPPED) out->n_weights_dropped++;
        for (size_t k = 0; k < v.n_chunks; k++) {
            switch (mz_unit_state_get(&v.kv[(size_t)l * v.max_chunks + k])) {
            case MZ_UNIT_RESIDENT: out->n_kv_resident++; break;
            case MZ_UNIT_COMPRESSED: out->n_kv_compressed++; break;
            case MZ_UNIT_STORED_RAW: out->n_kv_stored_raw++; break;
            case MZ_UNIT_STORED_COMPRESSED: out->n_kv_stored_compressed++; break;
            default: break;
            }
        }
    }
}

mz_status mz_harness_evict_to_placement(mz_ctx_t *c, const mz_harness_placement *want,
                                        mz_evict_report *r)
{
    mz_evict_report dummy;
    if (!r) r = &dummy;
    memset(r, 0, sizeof *r);
    mz_policy_view v;
    mz_mem_view(c->mem, false, &v);
    const size_t n_kv = (size_t)v.n_layer * v.n_chunks;
    const size_t n_raw = want->n_kv_stored_raw, n_sc = want->n_kv_stored_compressed,
                 n_c = want->n_kv_compressed, n_out = n_raw + n_sc + n_c;
    size_t n_res_w = 0, n_res_kv = 0;
    for (int l = 0; l < v.n_layer; l++) {
        n_res_w += mz_unit_state_get(&v.weights[l]) == MZ_UNIT_RESIDENT;
        for (size_t k = 0; k < v.n_chunks; k++)
            n_res_kv += mz_unit_state_get(&v.kv[(size_t)l * v.max_chunks + k]) == MZ_UNIT_RESIDENT;
    }
    if (n_res_kv != n_kv || n_res_w != (size_t)v.n_layer || n_out > n_kv ||
        want->n_weights_dropped > (size_t)v.n_layer)
        return mz_fail(MZ_E_INVAL, "placement: want %zu KV chunks and %zu blocks out of %zu "
                       "(%zu resident) and %d (%zu resident); the context must start all resident",
                       n_out, want->n_weights_dropped, n_kv, n_res_kv, v.n_layer, n_res_w);
    mz_evict_step *steps = calloc(n_out + want->n_weights_dropped + 1, sizeof *steps);
    if (!steps) return mz_fail(MZ_E_NOMEM, "placement: no memory for the steps");
    /* Backward-out: the last layer's last chunk first. The i-th chunk taken
     * is raw when the raw count so far falls behind i * n_raw / n_out
     * (Bresenham), else encoded: the first n_sc encoded ones to the swap
     * file, the rest into the stack. */
    size_t n = 0, raw = 0, enc = 0;
    for (size_t i = 0; i < n_out; i++) {
        size_t idx = n_kv - 1 - i;
        int l = (int)(idx / v.n_chunks);
        size_t k = idx % v.n_chunks;
        mz_mem_dest d;
        if (raw < n_raw && (raw * n_out <= i * n_raw || enc == n_sc + n_c)) {
            d = MZ_DEST_STORE_RAW;
            raw++;
        } else {
            d = enc < n_sc ? MZ_DEST_STORE_COMPRESSED : MZ_DEST_COMPRESS;
            enc++;
        }
        steps[n++] = (mz_evict_step){.kind = MZ_UNIT_KV, .layer = l, .chunk = k, .dest = d,
                                     .stage = MZ_EVICT_STAGE_KV_ONLY};
    }
    for (size_t w = 0; w < want->n_weights_dropped; w++)
        steps[n++] = (mz_evict_step){.kind = MZ_UNIT_WEIGHTS, .layer = v.n_layer - 1 - (int)w,
                                     .dest = MZ_DEST_DROP, .stage = MZ_EVICT_STAGE_KV_AND_W};
    int64_t freed = 0;
    size_t moved = 0;
    double t0 = mz_time_ms();
    mz_status s = mz_mem_evict_steps(c->mem, steps, n, SIZE_MAX, &freed, &moved, r);
    r->time_ms = mz_time_ms() - t0;
    r->bytes_freed = freed > 0 ? (size_t)freed : 0;
    free(steps);
    if (s) return s;
    mz_harness_placement got;
    mz_harness_placement_get(c, &got);
    if (got.n_kv_stored_raw != n_raw || got.n_kv_stored_compressed != n_sc ||
        got.n_kv_compressed != n_c || got.n_weights_dropped != want->n_weights_dropped)
        return mz_fail(MZ_E_INVAL, "placement: got raw %zu / stored-compressed %zu / "
                       "compressed %zu / blocks %zu, wanted %zu / %zu / %zu / %zu",
                       got.n_kv_stored_raw, got.n_kv_stored_compressed, got.n_kv_compressed,
                       got.n_weights_dropped, n_raw, n_sc, n_c, want->n_weights_dropped);
    return MZ_OK;
}
