/*
 * gemm_x8_x86.h — matrix kernels on the x8 weight layout (repack.c: 8 rows
 * interleaved per block, one row per 32-bit lane), x86. Included by
 * gemm_avx512.c (vpdpbusd) and gemm_avx2.c (vpmaddubsw + vpmaddwd) after they
 * define GEMM_SUFFIX, X8_T (tokens per tile) and
 *   x8_dot(acc, w, x): acc + per-lane sum of the 4 products u8 w x s8 x
 *                      (exact: no intermediate saturation for the operand
 *                      ranges the includer enables);
 *   X8_HAS_Q8_0: 1 if x8_dot is exact for u8 0..255 x s8 (VNNI only).
 * Arithmetic: repack.c's canonical x8 order, bit for bit, for any tile.
 *
 * Per token tile the activations' block scales (and the Q4_0 / Q8_0 offset
 * corrections -8 * sum(x) / -128 * sum(x), exact integers) are computed once
 * into stack arrays and reused by every row group of the call; per (group of
 * 8 rows, token, block) the work is 8 dot instructions (4 values x 8 rows
 * each), one int->float conversion, one multiply and one FMA.
 */
#ifndef GEMM_SUFFIX
#error "define GEMM_SUFFIX, X8_T and x8_dot before including gemm_x8_x86.h"
#endif

#include <immintrin.h>
#include <string.h>

#define X8_CAT2(a, b) a##_##b
#define X8_CAT(a, b) X8_CAT2(a, b)
#define X8_FN(name) X8_CAT(name, GEMM_SUFFIX)
#define X8_INLINE static inline __attribute__((always_inline))
#define X8_UNROLL _Pragma("GCC unroll 8")

X8_INLINE __m256i x8_bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

X8_INLINE int32_t x8_sum32(const int8_t *q)
{
    /* sum of 32 s8 values: (u8 ones) x (s8 q) pairs, then pairs of s16 */
    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), _mm256_loadu_si256((const __m256i *)q)),
                                        _mm256_set1_epi16(1));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* Activation side of one token tile: per token t and block b, the scale dx
 * (f32), the integer correction added to every lane's dot, and (Q4_1) sx. */
typedef struct {
    float dx[X8_T][MZ_X8_MAX_BLOCKS];
    float sx[X8_T][MZ_X8_MAX_BLOCKS];
    int32_t corr[X8_T][MZ_X8_MAX_BLOCKS];
} X8_FN(x8_act);

/* kind: 0 = Q4_0 (x Q8_0), 1 = Q4_1 (x Q8_1), 2 = Q8_0 (x Q8_0) */
X8_INLINE void x8_prep(X8_FN(x8_act) *a, int kind, size_t nb, const uint8_t *x, size_t xrb, int tn)
{
    for (int t = 0; t < tn; t++) {
        const uint8_t *xt = x + (size_t)t * xrb;
        for (size_t b = 0; b < nb; b++) {
            if (kind == 1) {
                const mz_block_q8_1 *bx = (const mz_block_q8_1 *)xt + b;
                a->dx[t][b] = _cvtsh_ss(bx->d);
                a->sx[t][b] = _cvtsh_ss(bx->s);
                a->corr[t][b] = 0;
            } else {
                const mz_block_q8_0 *bx = (const mz_block_q8_0 *)xt + b;
                a->dx[t][b] = _cvtsh_ss(bx->d);
                a->corr[t][b] = (kind == 0 ? -8 : -128) * x8_sum32(bx->qs);
            }
        }
    }
}

/* x quants of token t, block b (both activation block types end with qs[32]). */
X8_INLINE const int8_t *x8_xqs(int kind, const uint8_t *x, size_t xrb, int t, size_t b)
{
    const uint8_t *xt = x + (size_t)t * xrb;
    return kind == 1 ? ((const mz_block_q8_1 *)xt + b)->qs : ((const mz_block_q8_0 *)xt + b)->qs;
}

/* One group of 8 rows x T tokens; y[t * ys + r] for r < 8. */
X8_INLINE void x8_tile(int kind, size_t nb, const uint8_t *restrict gw, const X8_FN(x8_act) *restrict a,
                       const uint8_t *restrict x, size_t xrb, float *restrict y, size_t ys, const int T)
{
    const size_t gbb = kind == 0 ? 144 : kind == 1 ? 160 : 272;
    __m256 acc[X8_T], summ[X8_T];
    X8_UNROLL for (int t = 0; t < T; t++) acc[t] = summ[t] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *g = gw + b * gbb;
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
        __m256 mw = _mm256_setzero_ps();
        __m256i wq[8];
        if (kind == 2) {
            X8_UNROLL for (int c = 0; c < 8; c++) wq[c] = _mm256_loadu_si256((const __m256i *)(g + 16 + 32 * c));
        } else {
            const uint8_t *q = g + (kind == 1 ? 32 : 16);
            if (kind == 1) mw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16)));
            const __m256i m4 = _mm256_set1_epi8(0x0f);
            X8_UNROLL for (int c = 0; c < 4; c++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * c));
                wq[c] = _mm256_and_si256(v, m4);                         /* values 4c .. 4c+3 */
                wq[4 + c] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4); /* values 16+4c .. */
            }
        }
        X8_UNROLL for (int t = 0; t < T; t++) {
            const int8_t *xq = x8_xqs(kind, x, xrb, t, b);
            __m256i is = _mm256_set1_epi32(a->corr[t][b]);
            if (kind == 2) {
                X8_UNROLL for (int c = 0; c < 8; c++) is = x8_dot(is, wq[c], x8_bcast4(xq + 4 * c));
            } else {
                X8_UNROLL for (int c = 0; c < 4; c++) {
                    is = x8_dot(is, wq[c], x8_bcast4(xq + 4 * c));
                    is = x8_dot(is, wq[4 + c], x8_bcast4(xq + 16 + 4 * c));
                }
            }
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a->dx[t][b])), _mm256_cvtepi32_ps(is), acc[t]);
            if (kind == 1) summ[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(a->sx[t][b]), summ[t]);
        }
    }
    X8_UNROLL for (int t = 0; t < T; t++)
        _mm256_storeu_ps(y + (size_t)t * ys, kind == 1 ? _mm256_add_ps(acc[t], summ[t]) : acc[t]);
}

#define X8_CASE(kind, T_) \
    case T_: x8_tile(kind, nb, gw, a, xt, xrb, yt, ys, T_); break;

#define X8_DRIVER(tname, kind)                                                                          \
    MZ_GEMM_DECL(X8_FN(mz_gemm_x8_##tname))                                                             \
    {                                                                                                   \
        MZ_ASSERT(r0 % 8 == 0 && r1 % 8 == 0 && n / MZ_QK <= MZ_X8_MAX_BLOCKS);                         \
        const size_t nb = n / MZ_QK, xrb = x_row_bytes, ys = y_stride;                                  \
        X8_FN(x8_act) act, *a = &act;                                                                   \
        for (size_t t0 = 0; t0 < n_tok; t0 += X8_T) {                                                   \
            const int tn = (int)(n_tok - t0 < X8_T ? n_tok - t0 : X8_T);                                \
            const uint8_t *xt = (const uint8_t *)x + t0 * xrb;                                          \
            x8_prep(a, kind, nb, xt, xrb, tn);                                                          \
            for (size_t g = r0 / 8; g < r1 / 8; g++) {                                                  \
                const uint8_t *gw = (const uint8_t *)w + g * 8 * w_row_bytes;                           \
                float *yt = y + t0 * ys + g * 8;                                                        \
                switch (tn) {                                                                           \
                    X8_CASE(kind, 1) X8_CASE(kind, 2) X8_CASE(kind, 3) X8_CASE(kind, 4)                 \
                    X8_CASES_5_8(kind)                                                                  \
                default: MZ_ASSERT(0);                                                                  \
                }                                                                                       \
            }                                                                                           \
        }                                                                                               \
    }

#if X8_T == 8
#define X8_CASES_5_8(kind) X8_CASE(kind, 5) X8_CASE(kind, 6) X8_CASE(kind, 7) X8_CASE(kind, 8)
#elif X8_T == 4
#define X8_CASES_5_8(kind)
#else
#error "X8_T must be 4 or 8"
#endif

X8_DRIVER(q4_0_q8_0, 0)
X8_DRIVER(q4_1_q8_1, 1)
#if X8_HAS_Q8_0
X8_DRIVER(q8_0_q8_0, 2)
#endif
