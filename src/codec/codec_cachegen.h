/*
 * codec_cachegen.h — the CacheGen-style KV codec (format and proofs at the
 * top of codec_cachegen.c): per-(token, head) symmetric quantization to
 * 2Q+1 levels, per-chunk probability tables per channel group, and a
 * 4-way interleaved rANS entropy coder. Private to src/codec and its tests.
 *
 * A codec instance carries its whole configuration in mz_codec.param (packed
 * by mz_codec_cachegen()), so it is returned by value and nothing is
 * allocated. Blobs are self-describing: any cachegen instance decodes any
 * cachegen blob, whatever configuration encoded it.
 */
#ifndef MZ_CODEC_CACHEGEN_H
#define MZ_CODEC_CACHEGEN_H

#include "codec.h"

#define MZ_CG_ROW_MAX 1024     /* longest row (head_dim) a blob may describe */
#define MZ_CG_LEVELS_MAX 31    /* Q: symbols -Q..Q, so at most 63 of them */
#define MZ_CG_SEG_ROWS 256     /* rows per segment when encoding: one KV chunk's tokens */

typedef struct mz_cachegen_params {
    unsigned row;          /* values per quantization row = head_dim (1..1024); one scale each */
    unsigned levels_k;     /* Q of the K half: symbols -Q..Q (1..31; 15 ≈ CacheGen's 32 bins) */
    unsigned levels_v;     /* Q of the V half (1..31; 7 ≈ 16 bins) */
    unsigned k_chans_log2; /* K: one probability table per 2^x adjacent channels (0..7) */
    unsigned v_chans_log2; /* V: likewise */
    unsigned anchor;       /* 0 = off; else 2,4,..,128: rows (tokens) per anchor group, symbols
                              coded as deltas (mod 2Q+1) from the group's first row */
} mz_cachegen_params;

/* Defaults for a model with this head_dim: Q = 15 for K and V (31 symbols),
 * a table per K channel and per 8 V channels, no anchor step. */
MZ_INTERNAL mz_cachegen_params mz_cachegen_params_default(unsigned head_dim);
/* The CacheGen layer schedule: more levels in early layers. Layers in the
 * first third keep Q = 15, later ones Q = 7 (K and V alike). */
MZ_INTERNAL mz_cachegen_params mz_cachegen_params_layer(unsigned head_dim, unsigned layer,
                                                        unsigned n_layer);
/* A codec instance with these parameters (by value, .name "cachegen").
 * Asserts that the parameters are in range. */
MZ_INTERNAL mz_codec mz_codec_cachegen(const mz_cachegen_params *p);
/* Unpacks an instance's parameters. */
MZ_INTERNAL mz_cachegen_params mz_cachegen_params_of(const mz_codec *c);

/* Registry entries (head_dim 64): "cachegen" (Q 15/15), "cachegen-q7" (Q 7/7),
 * "cachegen-anchor" (Q 15/15, anchor groups of 8 tokens), "cachegen-layer"
 * (Q 15/15 as it stands; mz_codec_for_layer() applies the layer schedule). */
MZ_INTERNAL extern const mz_codec mz_codec_cachegen_vt;
MZ_INTERNAL extern const mz_codec mz_codec_cachegen_q7_vt;
MZ_INTERNAL extern const mz_codec mz_codec_cachegen_anchor_vt;
MZ_INTERNAL extern const mz_codec mz_codec_cachegen_layer_vt;

/* True for every cachegen instance (registry entries and mz_codec_cachegen()). */
MZ_INTERNAL bool mz_codec_is_cachegen(const mz_codec *c);
/* True when c carries the layer schedule ("cachegen-layer"). */
MZ_INTERNAL bool mz_cachegen_has_schedule(const mz_codec *c);
/* mz_codec_for_layer() for a cachegen instance. */
MZ_INTERNAL mz_codec mz_cachegen_for_layer(const mz_codec *c, unsigned head_dim, unsigned layer,
                                           unsigned n_layer);
/* mz_codec_ratio_hint() for a cachegen instance. */
MZ_INTERNAL double mz_cachegen_ratio_hint(const mz_codec *c);

/* Scalar-only decode, one segment at a time (the reference the SIMD and
 * paired decode are tested against). */
MZ_INTERNAL mz_status mz_cachegen_decode_ref(const uint8_t *src, size_t len, mz_f16 *dst,
                                             size_t n);
/* Which dequantization kernel decode uses: "avx2" or "scalar". */
MZ_INTERNAL const char *mz_cachegen_isa(void);
/* Test hook: force the scalar kernels and the unpaired decode (process-wide). */
MZ_INTERNAL void mz_cachegen_force_scalar(bool on);

#endif /* MZ_CODEC_CACHEGEN_H */
