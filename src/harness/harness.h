/*
 * harness.h — NOT PUBLIC. The one internal header that benchmarks and tools
 * in app/ and bench/ may use to reach past include/mzcache.h (besides
 * ttft.h, the TTFT evaluation that `mzcache bench ttft` hands its options to).
 *
 * Benchmarks write long synthetic contexts straight into the KV chunks
 * (prefilling 32k tokens on two cores takes hours) and the codec evaluation
 * reads and rewrites them; those need a context's KV layout, which the
 * public API rightly hides. Rather than each program including
 * src/engine/engine.h and writing struct mz_ctx fields, they go through the
 * accessors below and the calibrated KV fill (src/harness/kv_fill.h, included
 * here). Nothing here is installed or promised to library users; tests under
 * tests/ keep their direct access to the internals.
 *
 * Every accessor takes a live context on its owner thread (the contract of
 * the public calls on a context).
 */
#ifndef MZ_HARNESS_H
#define MZ_HARNESS_H

#include "mzcache.h"
#include "kv_fill.h" /* mz_kvfill_*: synthetic KV that compresses like the real one */

#include <stddef.h>
#include <stdint.h>

/* The model c computes with (to make a second context on it, e.g. a
 * calibration context) and its GGUF file's path (borrowed for the model's
 * lifetime). */
mz_model_t *mz_harness_ctx_model(const mz_ctx_t *c);
const char *mz_harness_model_path(const mz_model_t *m);
/* The n_threads c was made with (mz_ctx_params.n_threads: 0 = all cores). */
int mz_harness_ctx_n_threads(const mz_ctx_t *c);

/* KV layout: bytes of the chunks that exist (resident or evicted), layers,
 * bytes of one (layer, 256-token) chunk (K then V, F16). */
size_t mz_harness_kv_bytes(const mz_ctx_t *c);
int mz_harness_kv_n_layer(const mz_ctx_t *c);
size_t mz_harness_kv_chunk_bytes(const mz_ctx_t *c);
/* The memory of KV chunk ci of layer l, for reading or writing in place;
 * NULL when it does not exist. Valid only while the chunk is resident:
 * call after a prefill or mz_restore, before the next mz_evict. */
uint8_t *mz_harness_kv_chunk(mz_ctx_t *c, int l, size_t ci);

/* Name of the kernel ISA picked at run time ("avx512-vnni", "avx2", ...). */
const char *mz_harness_isa(void);
/* Name of the q8 codec ISA picked at run time (MZ_KERNELS=avx2 keeps it off AVX-512 too). */
const char *mz_harness_q8_isa(void);
/* bench_compkv: compresses every KV chunk of c into the compressed stack
 * (untimed), then moves the whole stack to the swap file (CompKV) with
 * write submissions of `batch` items (1 = one write at a time, waited for).
 * *ms = wall time of the move alone; *payload = encoded bytes moved;
 * *n_units = chunks moved. The KV is left stored: mz_restore brings it back. */
mz_status mz_harness_compkv(mz_ctx_t *c, size_t batch, double *ms, double *payload,
                            size_t *n_units);
/* Where c's units are: KV chunks per tier, and the engine's weight blocks
 * dropped (shared by every session of the engine; counted here because a
 * restore of c reads them back). */
typedef struct mz_harness_placement {
    size_t n_kv_resident;
    size_t n_kv_compressed;          /* in c's compressed stack (memory path) */
    size_t n_kv_stored_raw;          /* swap file, raw (storage path) */
    size_t n_kv_stored_compressed;   /* swap file, encoded (storage path: read + decode) */
    size_t n_weights_dropped;        /* engine's blocks to read from the model file */
} mz_harness_placement;
void mz_harness_placement_get(mz_ctx_t *c, mz_harness_placement *out);
/* bench_sessions' same-tiers reference: from an all-resident c (and all
 * weights resident), moves c's units with the engine's own eviction steps
 * (mz_mem_evict_steps: the encode, write and page release mz_evict uses) so
 * that c ends with exactly the tier counts of *want (n_kv_resident is what
 * is left). The chunks are taken in backward-out order, the KV policy's
 * order; the raw ones are spread evenly among them (as Algorithm 1's
 * balancing interleaves the two paths); of the encoded ones the rearmost
 * go to the swap file, the front ones stay in the stack (where CompKV,
 * moving the stack's bottom, leaves them); weight blocks the rearmost
 * first. The weight blocks are the engine's: call only while no other
 * session computes. MZ_E_INVAL when c cannot reach *want (not enough
 * resident chunks or blocks, or a unit another session holds). */
mz_status mz_harness_evict_to_placement(mz_ctx_t *c, const mz_harness_placement *want,
                                        mz_evict_report *r);
/* Monotonic clock in milliseconds. */
double mz_harness_time_ms(void);

#endif /* MZ_HARNESS_H */
