/*
 * kv_fill.h — synthetic KV contexts whose values behave like real KV.
 *
 * Benchmarks write long contexts straight into the KV chunks (prefilling 32k
 * tokens on two cores takes hours). What the values are does not change the
 * cost of attention or of a restore, but it decides what a compressor makes
 * of them: zram's lz4, the q8 and cachegen codecs. A fill from a small table
 * of repeated values compresses (lz4 kept 62.8 % of it) where real KV does not
 * (lz4 saves 0.2 %), so it must look like real KV to the byte.
 *
 * The model here: a short real prefill of the same model (the calibration)
 * gives, for every (layer, K or V, KV head, channel), the inverse CDF of the
 * channel's values as 65 quantiles. K is measured before RoPE (the recorded K
 * is rotated back by its position), so its statistics do not depend on the
 * position; the fill draws every value independently from its channel's
 * quantiles (linear interpolation between them: continuous values, so the F16
 * mantissas are as random as real ones), then rotates K to its position. That
 * keeps per-channel offsets, scales and outlier channels (what q8's per-row
 * range and zstd's exponent statistics see) and no byte-level repeats (what
 * lz4 would find). tests/unit/test_kv_fill.c checks lz4, zstd and q8 on the
 * fill against real KV of another stretch of the same prefill.
 *
 * Thread contract: a calibration is immutable once built and may be shared;
 * mz_kvfill_write runs on the context's owner thread.
 */
#ifndef MZ_KV_FILL_H
#define MZ_KV_FILL_H

#include "mzcache.h"

#include <stddef.h>
#include <stdint.h>

typedef struct mz_kvfill mz_kvfill;

/* Quantiles kept per channel (inverse CDF at i / (MZ_KVFILL_NQ - 1)). */
#define MZ_KVFILL_NQ 65
/* Positions at the start that calibration skips: the first tokens act as an
 * attention sink and their K/V are far from the rest (and from any later
 * position the fill writes). */
#define MZ_KVFILL_SKIP 4

/* Builds a calibration from the KV that c holds at positions [pos0, pos1)
 * (resident chunks; pos1 - pos0 >= 64). MZ_E_INVAL for a short range. */
MZ_NODISCARD mz_status mz_kvfill_from_ctx(const mz_ctx_t *c, size_t pos0, size_t pos1, mz_kvfill **out);

/* Prefills the n tokens into c (which must be empty), calibrates from
 * positions [MZ_KVFILL_SKIP, n) and truncates c back to empty. */
MZ_NODISCARD mz_status mz_kvfill_calibrate(mz_ctx_t *c, const mz_token *tokens, size_t n,
                                           mz_kvfill **out);

/* Tokens of real English text for calibration: the file at path (NULL: the
 * GPL-3 text Debian ships in base-files), else a built-in passage repeated.
 * Writes at most cap tokens (BOS first); returns the count (0 on failure). */
size_t mz_kvfill_text_tokens(const mz_model_t *m, const char *path, mz_token *out, size_t cap);

/* One call for harnesses: tokens of the default text (up to n_calib, at most
 * the context's size), calibrate on c, and return the calibration. */
MZ_NODISCARD mz_status mz_kvfill_calibrate_default(mz_ctx_t *c, size_t n_calib, mz_kvfill **out);

/* Writes positions [0, N) of c's KV (reserving the chunks) from the
 * calibration, deterministic for a seed; sets c's tokens to placeholders
 * (i mod n_vocab) and n_tokens = N, no logits. c must use the calibration's
 * model shape (MZ_E_INVAL otherwise). */
MZ_NODISCARD mz_status mz_kvfill_write(const mz_kvfill *f, mz_ctx_t *c, size_t N, uint64_t seed);

/* Writes one chunk's worth (K then V, kernels.h layout) for chunk index ci of
 * layer l: what mz_kvfill_write does per chunk, for tests and tools. */
void mz_kvfill_chunk(const mz_kvfill *f, int l, size_t ci, uint64_t seed, uint8_t *chunk);

void mz_kvfill_free(mz_kvfill *f);

/* The old table fill (4096 random F16 values copied in 512-value runs), kept
 * only so the tests can show it fails what the calibrated fill passes. */
MZ_NODISCARD mz_status mz_kvfill_write_table(mz_ctx_t *c, size_t N);

#endif /* MZ_KV_FILL_H */
