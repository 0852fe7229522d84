/*
 * gemm_x86.h — tiled matrix kernels (many weight rows x many tokens), x86.
 * Included by gemm_avx2.c (AVX2: vpmaddubsw + vpmaddwd, 16 registers) and
 * gemm_avx512.c (AVX-512 VL + VNNI: vpdpbusd, 32 registers); each includer
 * first defines the ISA primitives listed under "ISA contract" below and
 * GEMM_SUFFIX, GEMM_R, GEMM_T (the largest register tile: rows x tokens).
 *
 * Canonical arithmetic. Every output y[t][r] is computed by one fixed
 * sequence of float operations, whatever tile it falls in (full tile, edge
 * tile, the 1 x 1 tile vec_dot uses, a decode step or a prefill batch):
 *   quantized (32-value blocks b):
 *     p_b    = 8 x s32, lane i = exact integer sum of the products of values
 *              4i..4i+3 (vpmaddubsw+vpmaddwd and vpdpbusd give the same lanes)
 *     acc    = fma(f32(dw_b) * f32(dx_b) [broadcast], f32(p_b), acc)   8 lanes
 *     y      = hsum(acc) = ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))
 *     Q4_1:  y += summs, summs = fma(mw_b, sx_b, summs) over the blocks in order
 *   This is ggml's AVX2 order for these types (one accumulator, the Q4_1 min
 *   terms summed apart), so our logits stay as close to llama.cpp's as they
 *   can: a different but equally exact order moved SmolLM2's logits by twice
 *   llama.cpp's own flash-attention-on/off noise on some golden prompts.
 *   F16:  acc = fma(w[8d..8d+8], x[8d..8d+8], acc) over d; y = hsum(acc), then
 *         the n % 8 tail added one product at a time (AVX-512, GEMM_F16_ZMM:
 *         16-lane steps, its own bits).
 * Integer lane sums are exact and identical in both ISAs, so the AVX2 and the
 * AVX-512 kernels return the same bits. This is what keeps logits identical
 * across thread counts, batch sizes and token splits (test_forward_threads):
 * a token's outputs never depend on which other tokens share its tile.
 *
 * Loop order (gemm): rows [r0, r1) in blocks whose weights fit half of L1;
 * within a block, tokens in tiles of GEMM_T, then rows in tiles of GEMM_R
 * (F16 with one token: f16_gemv). A tile's unpacked weight blocks and activation blocks stay in registers
 * while all its R x T pairs are formed.
 */
#ifndef GEMM_SUFFIX
#error "define the ISA primitives and GEMM_SUFFIX before including gemm_x86.h"
#endif

#include <immintrin.h>
#include <string.h>

#define GEMM_CAT2(a, b) a##_##b
#define GEMM_CAT(a, b) GEMM_CAT2(a, b)
#define GEMM_FN(name) GEMM_CAT(name, GEMM_SUFFIX)

#define GEMM_INLINE static inline __attribute__((always_inline))
#ifndef GEMM_BLOCK_BYTES
#define GEMM_BLOCK_BYTES (16 * 1024)
#endif

#include "simd_x86.h"
#define gemm_hsum mz_x86_hsum
#define gemm_nibbles mz_x86_nibbles
#define gemm_bcast_f16 mz_x86_bcast_f16

/* [f32(p[0]), f32(p[1]), 0, 0]: the adjacent f16 pair (d, m) or (d, s). */
GEMM_INLINE __m128 gemm_f16x2(const mz_f16 *p)
{
    uint32_t u;
    memcpy(&u, p, sizeof u);
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)u));
}

#define GEMM_UNROLL _Pragma("GCC unroll 8")

/* ---- Q8_0 x Q8_0 ----------------------------------------------------------------- */

GEMM_INLINE void tile_q8_0(size_t nb, const uint8_t *restrict w, size_t wrb, const uint8_t *restrict x,
                           size_t xrb, float *restrict y, size_t ys, const int R, const int T)
{
    __m256 acc[4][4];
    GEMM_UNROLL for (int r = 0; r < R; r++) GEMM_UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        gemm_wq8 wq[4];
        __m256 dw[4];
        GEMM_UNROLL for (int r = 0; r < R; r++) {
            const mz_block_q8_0 *bw = (const mz_block_q8_0 *)(w + (size_t)r * wrb) + b;
            wq[r] = gemm_prep_w_s8(_mm256_loadu_si256((const __m256i *)bw->qs));
            dw[r] = gemm_bcast_f16(&bw->d);
        }
        GEMM_UNROLL for (int t = 0; t < T; t++) {
            const mz_block_q8_0 *bx = (const mz_block_q8_0 *)(x + (size_t)t * xrb) + b;
            const __m256i xq = _mm256_loadu_si256((const __m256i *)bx->qs);
            const __m256i xc = gemm_prep_x_for_s8(xq);
            const __m256 dx = gemm_bcast_f16(&bx->d);
            GEMM_UNROLL for (int r = 0; r < R; r++) {
                const __m256i p = gemm_dot_s8s8(wq[r], xq, xc);
                acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], dx), _mm256_cvtepi32_ps(p), acc[r][t]);
            }
        }
    }
    GEMM_UNROLL for (int t = 0; t < T; t++) GEMM_UNROLL for (int r = 0; r < R; r++) y[(size_t)t * ys + (size_t)r] = gemm_hsum(acc[r][t]);
}

/* ---- Q4_0 x Q8_0 ----------------------------------------------------------------- */

GEMM_INLINE void tile_q4_0(size_t nb, const uint8_t *restrict w, size_t wrb, const uint8_t *restrict x,
                           size_t xrb, float *restrict y, size_t ys, const int R, const int T)
{
    __m256 acc[4][4];
    GEMM_UNROLL for (int r = 0; r < R; r++) GEMM_UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        __m256i wq[4];
        __m256 dw[4];
        GEMM_UNROLL for (int r = 0; r < R; r++) {
            const mz_block_q4_0 *bw = (const mz_block_q4_0 *)(w + (size_t)r * wrb) + b;
            wq[r] = gemm_nibbles(bw->qs);
            dw[r] = gemm_bcast_f16(&bw->d);
        }
        GEMM_UNROLL for (int t = 0; t < T; t++) {
            const mz_block_q8_0 *bx = (const mz_block_q8_0 *)(x + (size_t)t * xrb) + b;
            const __m256i xq = _mm256_loadu_si256((const __m256i *)bx->qs);
            const __m256i xc = gemm_prep_x_for_nib8(xq);
            const __m256 dx = gemm_bcast_f16(&bx->d);
            GEMM_UNROLL for (int r = 0; r < R; r++) {
                const __m256i p = gemm_dot_nib8s8(wq[r], xq, xc); /* sum (nib - 8) * x */
                acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], dx), _mm256_cvtepi32_ps(p), acc[r][t]);
            }
        }
    }
    GEMM_UNROLL for (int t = 0; t < T; t++) GEMM_UNROLL for (int r = 0; r < R; r++) y[(size_t)t * ys + (size_t)r] = gemm_hsum(acc[r][t]);
}

/* ---- Q4_1 x Q8_1 ----------------------------------------------------------------- */

/* Q4_1 min terms: summs = fma(mw_b, sx_b, summs) per (row, token) pair over
 * the blocks in order (ggml's scalar `summs += m * s`, contracted). One token:
 * a scalar per row. More tokens: pair (r, t) is lane (r % 2) * 4 + t of
 * vector r / 2, built from registers with a few shuffles per block. */
GEMM_INLINE void tile_q4_1(size_t nb, const uint8_t *restrict w, size_t wrb, const uint8_t *restrict x,
                           size_t xrb, float *restrict y, size_t ys, const int R, const int T)
{
    __m256 acc[4][4];
    __m256 summv[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    float summ1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    GEMM_UNROLL for (int r = 0; r < R; r++) GEMM_UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        __m256i wq[4];
        __m256 dw[4];
        __m128 dm[4];
        GEMM_UNROLL for (int r = 0; r < R; r++) {
            const mz_block_q4_1 *bw = (const mz_block_q4_1 *)(w + (size_t)r * wrb) + b;
            wq[r] = gemm_nibbles(bw->qs);
            dm[r] = gemm_f16x2(&bw->d); /* [d, m, 0, 0] */
            dw[r] = _mm256_broadcastss_ps(dm[r]);
        }
        __m128 ds[4];
        GEMM_UNROLL for (int t = 0; t < T; t++) {
            const mz_block_q8_1 *bx = (const mz_block_q8_1 *)(x + (size_t)t * xrb) + b;
            const __m256i xq = _mm256_loadu_si256((const __m256i *)bx->qs);
            ds[t] = gemm_f16x2(&bx->d); /* [d, s, 0, 0] */
            const __m256 dx = _mm256_broadcastss_ps(ds[t]);
            GEMM_UNROLL for (int r = 0; r < R; r++) {
                const __m256i p = gemm_dot_u8s8(wq[r], xq);
                acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], dx), _mm256_cvtepi32_ps(p), acc[r][t]);
            }
        }
        if (T == 1) {
            const float s0 = _mm_cvtss_f32(_mm_movehdup_ps(ds[0]));
            GEMM_UNROLL for (int r = 0; r < R; r++)
                summ1[r] = __builtin_fmaf(_mm_cvtss_f32(_mm_movehdup_ps(dm[r])), s0, summ1[r]);
        } else {
            GEMM_UNROLL for (int t = T; t < 4; t++) ds[t] = _mm_setzero_ps();
            /* [s0, s1, s2, s3] from [d, s, 0, 0] of each token */
            const __m128 s4 = _mm_shuffle_ps(_mm_unpacklo_ps(ds[0], ds[1]), _mm_unpacklo_ps(ds[2], ds[3]), 0xee);
            const __m256 s8 = _mm256_set_m128(s4, s4);
            GEMM_UNROLL for (int v = 0; v < (R + 1) / 2; v++) {
                const __m128 m0 = _mm_permute_ps(dm[2 * v], 0x55);
                const __m128 m1 = 2 * v + 1 < R ? _mm_permute_ps(dm[2 * v + 1], 0x55) : _mm_setzero_ps();
                summv[v] = _mm256_fmadd_ps(_mm256_set_m128(m1, m0), s8, summv[v]);
            }
        }
    }
    float sm[16];
    _mm256_storeu_ps(sm, summv[0]);
    _mm256_storeu_ps(sm + 8, summv[1]);
    GEMM_UNROLL for (int t = 0; t < T; t++) GEMM_UNROLL for (int r = 0; r < R; r++)
        y[(size_t)t * ys + (size_t)r] = gemm_hsum(acc[r][t]) + (T == 1 ? summ1[r] : sm[r * 4 + t]);
}

/* ---- F16 x F16 ------------------------------------------------------------------- */

GEMM_INLINE __m256 gemm_load_f16x8(const mz_f16 *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* Rows of the one-token tile (f16_gemv): arrays of tile_f16 are sized for it. */
#define F16GV_R 8

/* In the one-token tile, after `done` columns of each of its R rows, the
 * same share of the next tile's R rows (contiguous, R * wrb bytes from w):
 * `step` columns of every row are consumed per step, so R * step * 2 bytes
 * of the next tile are fetched per step and it is in cache when its turn
 * comes. The hardware prefetchers, following R interleaved streams, left
 * single-thread AVX2 decode at 8.0-8.3 GB/s of weights against 8.6-9.8
 * with this (49152 x 576 from DRAM, bench_kernels -c 1, loaded machine).
 * Into L2, not L1: a tile is R * wrb bytes, 32 KiB for 2048-wide rows (an
 * L1d), so fetching the next one into L1 evicted the current one before its
 * use. Zen 4, 2 threads, 1 GiB of 2048-wide rows: 21-24 GB/s into L1, 29-33
 * into L2, 25-31 with no prefetch; the 8192 x 2048 bench_kernels product
 * (one thread) 19 -> 29 GB/s. At 576 wide (a 9 KiB tile) L2 is not slower.
 * Past the last row it only touches lines nobody reads: a prefetch never
 * faults. */
GEMM_INLINE void f16gv_prefetch_next(const uint8_t *w, size_t wrb, const int R, size_t done, const int step)
{
    const char *p = (const char *)w + (size_t)R * wrb + done * sizeof(mz_f16) * (size_t)R;
    GEMM_UNROLL for (int o = 0; o < R * step * (int)sizeof(mz_f16); o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
}

#ifndef GEMM_F16_ZMM
GEMM_INLINE void tile_f16(size_t n, const uint8_t *restrict w, size_t wrb, const uint8_t *restrict x,
                          size_t xrb, float *restrict y, size_t ys, const int R, const int T)
{
    __m256 acc[F16GV_R][4];
    GEMM_UNROLL for (int r = 0; r < R; r++) GEMM_UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    size_t d = 0;
    for (; d + 8 <= n; d += 8) {
        __m256 wv[F16GV_R];
        if (T == 1 && R == F16GV_R) f16gv_prefetch_next(w, wrb, R, d, 8);
        GEMM_UNROLL for (int r = 0; r < R; r++) wv[r] = gemm_load_f16x8((const mz_f16 *)(w + (size_t)r * wrb) + d);
        GEMM_UNROLL for (int t = 0; t < T; t++) {
            const __m256 xv = gemm_load_f16x8((const mz_f16 *)(x + (size_t)t * xrb) + d);
            GEMM_UNROLL for (int r = 0; r < R; r++) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    GEMM_UNROLL for (int t = 0; t < T; t++) {
        GEMM_UNROLL for (int r = 0; r < R; r++) {
            float s = gemm_hsum(acc[r][t]);
            const mz_f16 *wr = (const mz_f16 *)(w + (size_t)r * wrb), *xr = (const mz_f16 *)(x + (size_t)t * xrb);
            for (size_t e = d; e < n; e++) s += _cvtsh_ss(wr[e]) * _cvtsh_ss(xr[e]);
            y[(size_t)t * ys + (size_t)r] = s;
        }
    }
}
#else
/* AVX-512: 16-lane accumulators (16 values per step); y = hsum8(lo + hi),
 * then the n % 16 tail one product at a time. Not the AVX2 bits (F16 is the
 * one type whose AVX-512 tiles use the full 512-bit width). */
GEMM_INLINE void tile_f16(size_t n, const uint8_t *restrict w, size_t wrb, const uint8_t *restrict x,
                          size_t xrb, float *restrict y, size_t ys, const int R, const int T)
{
    __m512 acc[F16GV_R][4];
    GEMM_UNROLL for (int r = 0; r < R; r++) GEMM_UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    size_t d = 0;
    for (; d + 16 <= n; d += 16) {
        __m512 wv[F16GV_R];
        if (T == 1 && R == F16GV_R) f16gv_prefetch_next(w, wrb, R, d, 16);
        GEMM_UNROLL for (int r = 0; r < R; r++)
            wv[r] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const mz_f16 *)(w + (size_t)r * wrb) + d)));
        GEMM_UNROLL for (int t = 0; t < T; t++) {
            const __m512 xv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const mz_f16 *)(x + (size_t)t * xrb) + d)));
            GEMM_UNROLL for (int r = 0; r < R; r++) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    GEMM_UNROLL for (int t = 0; t < T; t++) {
        GEMM_UNROLL for (int r = 0; r < R; r++) {
            const __m512 a = acc[r][t];
            float s = gemm_hsum(_mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1))));
            const mz_f16 *wr = (const mz_f16 *)(w + (size_t)r * wrb), *xr = (const mz_f16 *)(x + (size_t)t * xrb);
            for (size_t e = d; e < n; e++) s += _cvtsh_ss(wr[e]) * _cvtsh_ss(xr[e]);
            y[(size_t)t * ys + (size_t)r] = s;
        }
    }
}
#endif

/* ---- drivers ---------------------------------------------------------------------- */

/* Every (rows, tokens) shape up to 4 x 4 is its own instantiation so that the
 * accumulators live in registers; the driver only asks for shapes up to
 * GEMM_R x GEMM_T. (Arrays are sized 4 x 4 so every instantiation is in bounds.) */
#define GEMM_CASE(tile, R_, T_) \
    case R_ * 8 + T_: tile(len, w, wrb, x, xrb, y, ys, R_, T_); break;
#define GEMM_CASES_T(tile, R_) GEMM_CASE(tile, R_, 1) GEMM_CASE(tile, R_, 2) GEMM_CASE(tile, R_, 3) GEMM_CASE(tile, R_, 4)

#define GEMM_DRIVER(type, tile, len_of_n, sfx, storage)                                                 \
    static void GEMM_FN(run_##type)(int rn, int tn, size_t len, const uint8_t *restrict w, size_t wrb,  \
                                    const uint8_t *restrict x, size_t xrb, float *restrict y, size_t ys) \
    {                                                                                                   \
        switch (rn * 8 + tn) {                                                                          \
            GEMM_CASES_T(tile, 1) GEMM_CASES_T(tile, 2) GEMM_CASES_T(tile, 3) GEMM_CASES_T(tile, 4)     \
        default: MZ_ASSERT(0);                                                                          \
        }                                                                                               \
    }                                                                                                   \
    storage void GEMM_FN(mz_gemm_##type##sfx)(size_t n, const void *restrict w, size_t wrb, size_t r0,  \
                                 size_t r1,                                                             \
                                 const void *restrict x, size_t xrb, size_t n_tok, float *restrict y,   \
                                 size_t ys)                                                             \
    {                                                                                                   \
        const size_t len = len_of_n;                                                                    \
        size_t blk = wrb ? GEMM_BLOCK_BYTES / wrb : GEMM_R; /* wrb = 0: one row (x8 vec_dot) */         \
        blk = blk < GEMM_R ? GEMM_R : blk - blk % GEMM_R;                                               \
        for (size_t rb = r0; rb < r1; rb += blk) {                                                      \
            const size_t re = rb + blk < r1 ? rb + blk : r1;                                            \
            for (size_t t0 = 0; t0 < n_tok; t0 += GEMM_T) {                                             \
                const int tn = (int)(n_tok - t0 < GEMM_T ? n_tok - t0 : GEMM_T);                        \
                for (size_t ra = rb; ra < re; ra += GEMM_R) {                                           \
                    const int rn = (int)(re - ra < GEMM_R ? re - ra : GEMM_R);                          \
                    GEMM_FN(run_##type)(rn, tn, len, (const uint8_t *)w + ra * wrb, wrb,                \
                                        (const uint8_t *)x + t0 * xrb, xrb, y + t0 * ys + ra, ys);      \
                }                                                                                       \
            }                                                                                           \
        }                                                                                               \
    }                                                                                                   \
    storage float GEMM_FN(mz_vec_dot_##type##sfx)(size_t n, const void *restrict w, const void *restrict x) \
    {                                                                                                   \
        float out;                                                                                      \
        const size_t len = len_of_n;                                                                    \
        tile(len, (const uint8_t *)w, 0, (const uint8_t *)x, 0, &out, 0, 1, 1);                         \
        return out;                                                                                     \
    }

/* The quantized types' public gemm / vec_dot are in gemm_x8_x86.h (the x8
 * order, on plain rows too); these tiles serve rows longer than the x8
 * kernels take (MZ_X8_MAX_BLOCKS). */
#define GEMM_STATIC static __attribute__((unused))
#define GEMM_PUBLIC
GEMM_DRIVER(q8_0_q8_0, tile_q8_0, n / MZ_QK, _tiles, GEMM_STATIC)
GEMM_DRIVER(q4_0_q8_0, tile_q4_0, n / MZ_QK, _tiles, GEMM_STATIC)
GEMM_DRIVER(q4_1_q8_1, tile_q4_1, n / MZ_QK, _tiles, GEMM_STATIC)
GEMM_DRIVER(f16, tile_f16, n, _direct, GEMM_STATIC)

/* ---- F16 x F16, many tokens: activations converted once -------------------------------- *
 *
 * In tile_f16 every step converts R weight vectors and T activation vectors
 * (vcvtph2ps shares the FMA ports), so a 4 x 4 tile spends as many port
 * slots converting as multiplying. With several tokens, gemm_f16 converts a
 * chunk of activation rows to F32 once (on the stack, F16GX_BUF floats) and
 * runs wider tiles that convert only the weights: F16GX_R x F16GX_T FMAs per
 * F16GX_R conversions. The F32 values are exactly the F16 ones and every
 * output keeps tile_f16's sequence (same lane width, steps, hsum and scalar
 * tail), so the bits equal tile_f16's (and vec_dot's) for every shape.
 * gemm_f16_xf runs the same tiles on F32 rows converted once by the caller
 * for all the pieces of a product (kernels.h, gemm_xf), reading them in
 * place: the same bits again. There the buffer is free for rows of one
 * panel, so with F16GX_WCONV it takes a super-block's weights as F32,
 * converted once for all the chunks of tokens, and the tiles only load and
 * multiply (no conversion shares their FMA ports). AVX2: on, +13-14 % pp512
 * for the smollm2-135m and qwen3-0.6b F16 shapes at 2 threads (EPYC), 74 ->
 * 78 GOP/s for 2048 x 2048 at 512 tokens on one thread (bench_kernels, the
 * xf line). AVX-512: off. One thread gained 34-48 % there (2048 columns,
 * Xeon), but 16 threads lost 3 % (llama3.2-1b F16 pp512, median of 20
 * alternating rounds, 15 of them slower; a 256 KiB buffer lost 5 %): with
 * every core busy, reading the F32 weights costs more than the conversions
 * they save.
 *
 * Rows longer than F16GX_MAX_N are cut into column panels of at most
 * F16GX_PANEL columns, each a multiple of 16 (whole steps of either lane
 * width) but the last. A tile runs one panel at a time and carries its
 * vector accumulators to the next panel through memory (stored and loaded
 * whole, so exact); the hsum and the scalar tail come once, after the last
 * panel. Each lane therefore sees the same FMAs in the same order as in
 * tile_f16, and the bits stay tile_f16's.
 *
 * The AVX-512 tile shape (F16GX_R of 3, 4 or 6 x F16GX_T of 4, 6 or 8: the
 * cases below), the super-block (F16GX_SB_BYTES), the panels (F16GX_MAX_N,
 * F16GX_PANEL, F16GX_PANEL_TOK), F16GX_WCONV (0 or 1, both ISAs) and
 * GEMM_BLOCK_BYTES may be set with -D at
 * build time, for sweeps of builds on a machine of another kind (the
 * defaults are the measured choice; the bits stay tile_f16's for any). */
#ifdef GEMM_F16_ZMM
#ifndef F16GX_R
#define F16GX_R 4
#define F16GX_T 6
#endif
#define F16GX_LANES 16
#ifndef F16GX_WCONV
#define F16GX_WCONV 0
#endif
#else
#undef F16GX_R
#undef F16GX_T
#define F16GX_R 3
#define F16GX_T 4
#define F16GX_LANES 8
#ifndef F16GX_WCONV
#define F16GX_WCONV 1
#endif
#endif
#define F16GX_BUF (48 * 1024)
#ifndef F16GX_SB_BYTES
#define F16GX_SB_BYTES (128 * 1024)
#endif
/* Rows up to this many columns are one panel: a chunk of whole F32 rows
 * (F16GX_BUF / n tokens) in the buffer. Longer whole rows left too few tokens
 * per chunk (6 at 8192 columns, in super-blocks of 8 rows), so each chunk's
 * conversion served few weight rows: measured 10 % slower than tile_f16 at
 * 4096 columns and half as fast at 8192 (Zen 4). In panels, 2048 x 8192 at
 * 512 tokens runs 10-25 % faster than tile_f16 (bench_kernels, Zen 4, 1 thread). */
#ifndef F16GX_MAX_N
#define F16GX_MAX_N 3072
#endif
/* Longer rows: panels of at most F16GX_PANEL columns and F16GX_PANEL_TOK tokens
 * per chunk (whole tiles of both ISAs); the rest of the buffer holds one
 * accumulator vector per (row, token) of a super-block x the chunk, which
 * bounds the super-block (128 rows AVX-512, 255 AVX2, in 2048-column panels).
 * More tokens per chunk (18, 24, 36) or narrower panels (768, 1024, 1536)
 * measured no faster. */
#ifndef F16GX_PANEL
#define F16GX_PANEL 2048
#endif
#ifndef F16GX_PANEL_TOK
#define F16GX_PANEL_TOK 12
#endif

/* Columns [d0, d1) of activation rows [c0, c0 + cn) as F32, xs apart (exact). */
GEMM_INLINE void f16gx_convert(const void *restrict x, size_t xrb, size_t c0, size_t cn, size_t d0, size_t d1,
                               size_t xs, float *restrict xf)
{
    const size_t len = d1 - d0;
    for (size_t t = 0; t < cn; t++) {
        const mz_f16 *xr = (const mz_f16 *)((const uint8_t *)x + (c0 + t) * xrb) + d0;
        float *dst = xf + t * xs;
        size_t e = 0;
        for (; e + 8 <= len; e += 8) _mm256_storeu_ps(dst + e, gemm_load_f16x8(xr + e));
        for (; e < len; e++) dst[e] = _cvtsh_ss(xr[e]);
    }
}

#ifdef GEMM_F16_ZMM
typedef __m512 f16gx_vec;
#define f16gx_zero _mm512_setzero_ps
#define f16gx_load _mm512_loadu_ps
#define f16gx_store _mm512_storeu_ps
#define f16gx_fmadd _mm512_fmadd_ps
GEMM_INLINE f16gx_vec f16gx_load_f16(const mz_f16 *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
GEMM_INLINE float f16gx_hsum(f16gx_vec a)
{
    return gemm_hsum(_mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1))));
}
#else
typedef __m256 f16gx_vec;
#define f16gx_zero _mm256_setzero_ps
#define f16gx_load _mm256_loadu_ps
#define f16gx_store _mm256_storeu_ps
#define f16gx_fmadd _mm256_fmadd_ps
#define f16gx_load_f16 gemm_load_f16x8
#define f16gx_hsum gemm_hsum
#endif

/* One R x T tile over the panel [d0, d1) of n columns: w points at column 0
 * of the tile's first row (F16, or F32 when wf32), x at column d0 of its
 * first token (tokens xs apart). d0 is a multiple of F16GX_LANES; so is d1
 * unless d1 == n. The accumulators start at zero when d0 == 0, else from
 * accb (vector (r, t) at accb + r * accs + t * F16GX_LANES); when d1 < n they
 * go back there, else they are reduced (hsum, scalar tail) into y. */
GEMM_INLINE void tile_f16x(size_t d0, size_t d1, size_t n, const uint8_t *restrict w, size_t wrb,
                           const float *restrict x, size_t xs, float *restrict y, size_t ys, float *restrict accb,
                           size_t accs, const int R, const int T, const bool wf32)
{
    f16gx_vec acc[F16GX_R][F16GX_T];
    if (d0 == 0) {
        GEMM_UNROLL for (int r = 0; r < R; r++) GEMM_UNROLL for (int t = 0; t < T; t++) acc[r][t] = f16gx_zero();
    } else {
        GEMM_UNROLL for (int r = 0; r < R; r++) GEMM_UNROLL for (int t = 0; t < T; t++)
            acc[r][t] = f16gx_load(accb + (size_t)r * accs + (size_t)t * F16GX_LANES);
    }
    size_t d = d0;
    for (; d + F16GX_LANES <= d1; d += F16GX_LANES) {
        f16gx_vec wv[F16GX_R];
        GEMM_UNROLL for (int r = 0; r < R; r++)
            wv[r] = wf32 ? f16gx_load((const float *)(w + (size_t)r * wrb) + d)
                         : f16gx_load_f16((const mz_f16 *)(w + (size_t)r * wrb) + d);
        GEMM_UNROLL for (int t = 0; t < T; t++) {
            const f16gx_vec xv = f16gx_load(x + (size_t)t * xs + (d - d0));
            GEMM_UNROLL for (int r = 0; r < R; r++) acc[r][t] = f16gx_fmadd(wv[r], xv, acc[r][t]);
        }
    }
    if (d1 < n) {
        GEMM_UNROLL for (int r = 0; r < R; r++) GEMM_UNROLL for (int t = 0; t < T; t++)
            f16gx_store(accb + (size_t)r * accs + (size_t)t * F16GX_LANES, acc[r][t]);
        return;
    }
    GEMM_UNROLL for (int t = 0; t < T; t++) {
        GEMM_UNROLL for (int r = 0; r < R; r++) {
            float s = f16gx_hsum(acc[r][t]);
            const float *xr = x + (size_t)t * xs;
            for (size_t e = d; e < n; e++) {
                const float wv1 = wf32 ? ((const float *)(w + (size_t)r * wrb))[e]
                                       : _cvtsh_ss(((const mz_f16 *)(w + (size_t)r * wrb))[e]);
                s += wv1 * xr[e - d0];
            }
            y[(size_t)t * ys + (size_t)r] = s;
        }
    }
}

#define F16GX_CASE(R_, T_) \
    case R_ * 16 + T_: tile_f16x(d0, d1, n, w, wrb, x, xs, y, ys, accb, accs, R_, T_, wf32); break;
#if F16GX_T > 6
#define F16GX_CASES_T(R_) \
    F16GX_CASE(R_, 1) F16GX_CASE(R_, 2) F16GX_CASE(R_, 3) F16GX_CASE(R_, 4) F16GX_CASE(R_, 5) F16GX_CASE(R_, 6) \
    F16GX_CASE(R_, 7) F16GX_CASE(R_, 8)
#elif F16GX_T > 4
#define F16GX_CASES_T(R_) \
    F16GX_CASE(R_, 1) F16GX_CASE(R_, 2) F16GX_CASE(R_, 3) F16GX_CASE(R_, 4) F16GX_CASE(R_, 5) F16GX_CASE(R_, 6)
#else
#define F16GX_CASES_T(R_) F16GX_CASE(R_, 1) F16GX_CASE(R_, 2) F16GX_CASE(R_, 3) F16GX_CASE(R_, 4)
#endif
#if F16GX_R > 4
#define F16GX_CASES F16GX_CASES_T(1) F16GX_CASES_T(2) F16GX_CASES_T(3) F16GX_CASES_T(4) F16GX_CASES_T(5) F16GX_CASES_T(6)
#elif F16GX_R > 3
#define F16GX_CASES F16GX_CASES_T(1) F16GX_CASES_T(2) F16GX_CASES_T(3) F16GX_CASES_T(4)
#else
#define F16GX_CASES F16GX_CASES_T(1) F16GX_CASES_T(2) F16GX_CASES_T(3)
#endif

/* Panel [d0, d1) of a tile whose accumulators carry over in accb. */
static void GEMM_FN(run_f16x_panel)(int rn, int tn, size_t d0, size_t d1, size_t n, const uint8_t *restrict w,
                                    size_t wrb, const float *restrict x, size_t xs, float *restrict y, size_t ys,
                                    float *restrict accb, size_t accs)
{
    const bool wf32 = false;
    switch (rn * 16 + tn) {
        F16GX_CASES
    default: MZ_ASSERT(0);
    }
}

/* Whole rows (one panel): d0 = 0 and d1 = n are known here, so the tiles
 * compile without the accumulator loads and stores. run_f16x reads F16
 * weights, run_f16x_wf the same weights converted to F32 (wrb = n floats). */
#define F16GX_RUN_WHOLE(NAME, WF32)                                                                     \
    static void GEMM_FN(NAME)(int rn, int tn, size_t n, const uint8_t *restrict w, size_t wrb,          \
                              const float *restrict x, size_t xs, float *restrict y, size_t ys)         \
    {                                                                                                   \
        const size_t d0 = 0, d1 = n, accs = 0;                                                          \
        float *const accb = NULL;                                                                       \
        const bool wf32 = WF32;                                                                         \
        switch (rn * 16 + tn) {                                                                         \
            F16GX_CASES                                                                                 \
        default: MZ_ASSERT(0);                                                                          \
        }                                                                                               \
    }
F16GX_RUN_WHOLE(run_f16x, false)
F16GX_RUN_WHOLE(run_f16x_wf, true)

/* The tiled product of many tokens. xs == NULL: x holds F16 activation rows
 * (xrb bytes apart), converted chunk by chunk into the stack buffer. Else xs
 * holds the same activations already as F32 (exactly the F16 values), xss
 * floats apart, shared by every caller: the tiles read them in place and the
 * buffer serves only the long rows' carried accumulators. The tiles, their
 * order and so the bits are the same either way. */
GEMM_INLINE void f16x_gemm(size_t n, const void *restrict w, size_t wrb, size_t r0, size_t r1,
                           const void *restrict x, size_t xrb, const float *restrict xs, size_t xss,
                           size_t n_tok, float *restrict y, size_t ys)
{
    float xf[F16GX_BUF] __attribute__((aligned(64)));
    /* Panel width pw (xs of the converted chunk) and tokens per chunk tc:
     * short rows are one panel with as many tokens as the buffer holds,
     * whole tiles when it can; long rows are cut into equal panels rounded
     * up to whole 16-column steps. */
    size_t pw, tc;
    if (n <= F16GX_MAX_N) {
        pw = n;
        tc = F16GX_BUF / n;
        if (tc > F16GX_T) tc -= tc % F16GX_T;
    } else {
        const size_t np = (n + F16GX_PANEL - 1) / F16GX_PANEL;
        pw = ((n + np - 1) / np + 15) / 16 * 16;
        tc = F16GX_PANEL_TOK;
    }
    const bool one_panel = pw >= n;
    /* Activations given as F32 and rows in one panel leave the buffer free:
     * it then holds a super-block's weights as F32, converted once and read
     * by every chunk of tokens, so the tiles convert nothing (wconv). */
    const bool wconv = F16GX_WCONV && xs && one_panel;
    /* Rows in super-blocks, in blocks whose panel of weights (as the tiles
     * read them) fits GEMM_BLOCK_BYTES (L1) within. One panel: super-blocks
     * of F16GX_SB_BYTES of F16 weights, which stay in L2 while the chunks go
     * by; with wconv no more than the buffer holds as F32. Several: as many
     * rows as the buffer after the chunk holds accumulators for (one vector
     * per row x token of the chunk); a chunk's panel is converted once per
     * super-block and serves all its rows. */
    const size_t pwb = wconv ? n * sizeof(float) : one_panel ? wrb : pw * sizeof(mz_f16);
    size_t blk = GEMM_BLOCK_BYTES / pwb;
    blk = blk < F16GX_R ? F16GX_R : blk - blk % F16GX_R;
    float *const accb = xf + tc * pw; /* several panels only */
    const size_t accs = tc * F16GX_LANES;
    size_t sb;
    if (one_panel) {
        sb = F16GX_SB_BYTES / wrb;
        if (wconv && sb > F16GX_BUF / n) sb = F16GX_BUF / n;
    } else {
        MZ_ASSERT(tc * pw < F16GX_BUF);
        sb = (F16GX_BUF - tc * pw) / accs;
        MZ_ASSERT(sb >= blk);
    }
    sb = sb < blk ? blk : sb - sb % blk;
    MZ_ASSERT(!wconv || sb * n <= F16GX_BUF);
    const bool one_chunk = one_panel && n_tok <= tc;
    if (!xs && one_chunk) f16gx_convert(x, xrb, 0, n_tok, 0, n, pw, xf);
    for (size_t sa = r0; sa < r1; sa += sb) {
        const size_t se = sa + sb < r1 ? sa + sb : r1;
        if (wconv) f16gx_convert(w, wrb, sa, se - sa, 0, n, n, xf);
        for (size_t c0 = 0; c0 < n_tok; c0 += tc) {
            const size_t cn = n_tok - c0 < tc ? n_tok - c0 : tc;
            for (size_t d0 = 0; d0 < n; d0 += pw) {
                const size_t d1 = d0 + pw < n ? d0 + pw : n;
                /* The chunk's panel: column d0 of token c0, tokens cs floats apart. */
                const float *xc;
                size_t cs;
                if (xs) {
                    xc = xs + c0 * xss + d0;
                    cs = xss;
                } else {
                    if (!one_chunk) f16gx_convert(x, xrb, c0, cn, d0, d1, pw, xf);
                    xc = xf;
                    cs = pw;
                }
                for (size_t rb = sa; rb < se; rb += blk) {
                    const size_t re = rb + blk < se ? rb + blk : se;
                    for (size_t t0 = 0; t0 < cn; t0 += F16GX_T) {
                        const int tn = (int)(cn - t0 < F16GX_T ? cn - t0 : F16GX_T);
                        for (size_t ra = rb; ra < re; ra += F16GX_R) {
                            const int rn = (int)(re - ra < F16GX_R ? re - ra : F16GX_R);
                            const uint8_t *wt = (const uint8_t *)w + ra * wrb;
                            float *yt = y + (c0 + t0) * ys + ra;
                            if (wconv)
                                GEMM_FN(run_f16x_wf)(rn, tn, n, (const uint8_t *)(xf + (ra - sa) * n),
                                                     n * sizeof(float), xc + t0 * cs, cs, yt, ys);
                            else if (one_panel)
                                GEMM_FN(run_f16x)(rn, tn, n, wt, wrb, xc + t0 * cs, cs, yt, ys);
                            else
                                GEMM_FN(run_f16x_panel)(rn, tn, d0, d1, n, wt, wrb, xc + t0 * cs, cs, yt, ys,
                                                        accb + (ra - sa) * accs + t0 * F16GX_LANES, accs);
                        }
                    }
                }
            }
        }
    }
}

/* One token (decode): rows r0..r1, each output one accumulator chain in
 * tile_f16's order, so the bits are tile_f16's. The weights stream from
 * memory once and each activation vector serves every row it meets, so
 * converting it first gains nothing.
 *
 * Tiles of F16GV_R rows keep F16GV_R independent FMA chains in flight where
 * GEMM_R rows (2 on AVX2: two chains) left each step waiting on the FMA
 * latency (single thread, 1536 x 576 in L2, bench_kernels -c 1: AVX2 25.6
 * GB/s of weights with 2 rows, 48-50 with 8; AVX-512 34 with one row, 54
 * with 8), the next tile prefetched into L2 (f16gv_prefetch_next). AVX2
 * always walks them.
 *
 * AVX-512 on AMD (mz_kernels_f16_gemv_rows): one row at a time, one 16-lane
 * chain. A decode streams every weight from memory, and on Zen 4 one
 * sequential stream per thread, left to the hardware prefetchers, beat the
 * tiles' eight interleaved ones: qwen3-0.6b F16 decode at 2 threads 45 tok/s
 * against 35 (llama.cpp, which also reads a row at a time, 43); 2- and
 * 4-row tiles without the prefetch gave 23-25. On the Xeon of the 16-vCPU
 * machine it was the other way round at every thread count: the tiles 20-23
 * tok/s at 2 threads against 14-15, 91-102 at 16 against 67-73
 * (docs/BENCHMARKS.md, issue 32). */
static void GEMM_FN(f16_gemv)(size_t n, const uint8_t *restrict w, size_t wrb, size_t r0, size_t r1,
                              const uint8_t *restrict x, float *restrict y)
{
    size_t r = r0;
#ifdef GEMM_F16_ZMM
    if (!mz_kernels_f16_gemv_rows())
#endif
    {
        for (; r + F16GV_R <= r1; r += F16GV_R) tile_f16(n, w + r * wrb, wrb, x, 0, y + r, 0, F16GV_R, 1);
        for (; r + 4 <= r1; r += 4) tile_f16(n, w + r * wrb, wrb, x, 0, y + r, 0, 4, 1);
    }
    for (; r < r1; r++) tile_f16(n, w + r * wrb, wrb, x, 0, y + r, 0, 1, 1);
}

void GEMM_FN(mz_gemm_f16)(size_t n, const void *restrict w, size_t wrb, size_t r0, size_t r1,
                          const void *restrict x, size_t xrb, size_t n_tok, float *restrict y, size_t ys)
{
    if (n_tok == 1) {
        GEMM_FN(f16_gemv)(n, (const uint8_t *)w, wrb, r0, r1, (const uint8_t *)x, y);
        return;
    }
    if (n_tok == 0) return;
    f16x_gemm(n, w, wrb, r0, r1, x, xrb, NULL, 0, n_tok, y, ys);
}

/* x: F32 rows (xrb bytes apart, a multiple of 4) holding exactly F16 values,
 * converted once for all the pieces of a product (kernels.h, gemm_xf). */
void GEMM_FN(mz_gemm_f16_xf)(size_t n, const void *restrict w, size_t wrb, size_t r0, size_t r1,
                             const void *restrict x, size_t xrb, size_t n_tok, float *restrict y, size_t ys)
{
    MZ_ASSERT(xrb % sizeof(float) == 0);
    f16x_gemm(n, w, wrb, r0, r1, NULL, 0, (const float *)x, xrb / sizeof(float), n_tok, y, ys);
}

float GEMM_FN(mz_vec_dot_f16)(size_t n, const void *restrict w, const void *restrict x)
{
    return GEMM_FN(mz_vec_dot_f16_direct)(n, w, x);
}
