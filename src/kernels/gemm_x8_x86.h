/*
 * gemm_x8_x86.h — matrix kernels on the x8 weight layout (repack.c: 8 rows
 * interleaved per block, one row per 32-bit lane), x86. Included by
 * gemm_avx512.c (vpdpbusd) and gemm_avx2.c (vpmaddubsw + vpmaddwd) after they
 * define GEMM_SUFFIX, X8_T (tokens per tile) and
 *   x8_dot(acc, w, x): acc + per-lane sum of the 4 products u8 w (0..15) x s8 x;
 *   x8_fifth(w, h, m): w (Q5_0 nibbles) + 16 in the bytes where h & m == m
 *     (h: the rows' qh bytes, shuffled; m: one bit per byte);
 *   x8_prep_q8(v), x8_dot_q8(acc, w, x), X8_Q8_CORR: the Q8_0 weights as
 *     stored (q + 128 as u8) prepared once per block, their 4-product dot
 *     with s8 x, and the factor of sum(x) that brings it back to sum q * x
 *     (VNNI: u8 as stored, -128; AVX2: q itself through sign tricks, 0).
 * It also gives the plain layout's Q4_0 / Q4_1 / Q8_0 / Q5_0 / Q5_1 / IQ4_NL gemm and vec_dot the
 * same order, transposing 8 plain rows into the x8 registers as it goes:
 * a tensor gives the same bits repacked or not (the os-paging baseline reads
 * the file's plain bytes; every mode must answer alike).
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

/* kind: 0 = Q4_0 (x Q8_0), 1 = Q4_1 (x Q8_1), 2 = Q8_0 (x Q8_0), 3 = Q5_0 (x Q8_0),
 * 4 = Q5_1 (x Q8_1), 5 = IQ4_NL (x Q8_0: its nibbles looked up in the grid, then
 * the s8 weights take Q8_0's path, x8_prep_q8 / x8_dot_q8 / X8_Q8_CORR) */
#define X8_HAS_MIN(kind) ((kind) == 1 || (kind) == 4) /* min terms, Q8_1 activations */
#define X8_IS_Q5(kind) ((kind) == 3 || (kind) == 4)   /* fifth bits in qh */
X8_INLINE void x8_prep(X8_FN(x8_act) *a, int kind, size_t nb, const uint8_t *x, size_t xrb, int tn)
{
    for (int t = 0; t < tn; t++) {
        const uint8_t *xt = x + (size_t)t * xrb;
        for (size_t b = 0; b < nb; b++) {
            if (X8_HAS_MIN(kind)) {
                const mz_block_q8_1 *bx = (const mz_block_q8_1 *)xt + b;
                a->dx[t][b] = _cvtsh_ss(bx->d);
                a->sx[t][b] = _cvtsh_ss(bx->s);
                a->corr[t][b] = 0;
            } else {
                const mz_block_q8_0 *bx = (const mz_block_q8_0 *)xt + b;
                a->dx[t][b] = _cvtsh_ss(bx->d);
                a->corr[t][b] = (kind == 0 ? -8 : kind == 3 ? -16 : X8_Q8_CORR) * x8_sum32(bx->qs);
            }
        }
    }
}

/* x quants of token t, block b (both activation block types end with qs[32]). */
X8_INLINE const int8_t *x8_xqs(int kind, const uint8_t *x, size_t xrb, int t, size_t b)
{
    const uint8_t *xt = x + (size_t)t * xrb;
    return X8_HAS_MIN(kind) ? ((const mz_block_q8_1 *)xt + b)->qs : ((const mz_block_q8_0 *)xt + b)->qs;
}

/* Q5_0: bit 4 of chunk k's bytes (value v = 4k + j, k < 4, or 16 + 4(k - 4) + j)
 * from bit v of the row's qh (lane r of hq): its byte v / 8 shuffled to
 * the 4 bytes of the lane, tested against bit v % 8. */
X8_INLINE void x8_q5_fifth(__m256i wq[8], __m256i hq)
{
    X8_UNROLL for (int k = 0; k < 8; k++) {
        const int v = k < 4 ? 4 * k : 16 + 4 * (k - 4);
        const char i = (char)(v / 8), m0 = (char)(1 << (v % 8)), m1 = (char)(2 << (v % 8)),
                   m2 = (char)(4 << (v % 8)), m3 = (char)(8 << (v % 8));
        const __m256i sel = _mm256_setr_epi8(i, i, i, i, (char)(4 + i), (char)(4 + i), (char)(4 + i), (char)(4 + i),
                                             (char)(8 + i), (char)(8 + i), (char)(8 + i), (char)(8 + i), (char)(12 + i),
                                             (char)(12 + i), (char)(12 + i), (char)(12 + i), i, i, i, i, (char)(4 + i),
                                             (char)(4 + i), (char)(4 + i), (char)(4 + i), (char)(8 + i), (char)(8 + i),
                                             (char)(8 + i), (char)(8 + i), (char)(12 + i), (char)(12 + i), (char)(12 + i),
                                             (char)(12 + i));
        const __m256i m = _mm256_setr_epi8(m0, m1, m2, m3, m0, m1, m2, m3, m0, m1, m2, m3, m0, m1, m2, m3, m0, m1, m2,
                                           m3, m0, m1, m2, m3, m0, m1, m2, m3, m0, m1, m2, m3);
        wq[k] = x8_fifth(wq[k], _mm256_shuffle_epi8(hq, sel), m);
    }
}

/* IQ4_NL: nibbles -> grid values in Q8_0's stored form (q + 128 as u8), prepared. */
X8_INLINE void x8_iq4_grid(__m256i wq[8])
{
    const __m128i g = _mm_xor_si128(_mm_loadu_si128((const __m128i *)mz_kvalues_iq4nl), _mm_set1_epi8((char)0x80));
    const __m256i grid = _mm256_broadcastsi128_si256(g);
    X8_UNROLL for (int k = 0; k < 8; k++) wq[k] = x8_prep_q8(_mm256_shuffle_epi8(grid, wq[k]));
}

/* Block b of 8 plain rows (rows past `rows` repeat row 0): the registers
 * the x8 layout would load, built by 4 x 4 / 8 x 8 transposes of 32-bit
 * groups (the weights of a row stay in their lane). */
X8_INLINE __m128i x8_f16x8(const uint8_t *const p[8], size_t off)
{
    uint16_t h[8];
    X8_UNROLL for (int r = 0; r < 8; r++) memcpy(&h[r], p[r] + off, 2);
    return _mm_loadu_si128((const __m128i *)h);
}

X8_INLINE void x8_load_plain(int kind, const uint8_t *restrict w, size_t wrb, int rows, size_t b, __m256 *dw,
                             __m256 *mw, __m256i wq[8])
{
    const size_t bs = kind == 0 || kind == 5 ? 18 : kind == 1 ? 20 : kind == 3 ? 22 : kind == 4 ? 24 : 34;
    const uint8_t *p[8];
    X8_UNROLL for (int r = 0; r < 8; r++) p[r] = w + (size_t)(r < rows ? r : 0) * wrb + b * bs;
    *dw = _mm256_cvtph_ps(x8_f16x8(p, 0));
    if (X8_HAS_MIN(kind)) *mw = _mm256_cvtph_ps(x8_f16x8(p, 2));
    if (kind != 2) {
        const size_t qo = kind == 0 || kind == 5 ? 2 : kind == 1 ? 4 : kind == 3 ? 6 : 8;
        __m256i a[4];
        X8_UNROLL for (int r = 0; r < 4; r++)
            a[r] = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(p[r + 4] + qo)),
                                    _mm_loadu_si128((const __m128i *)(p[r] + qo)));
        const __m256i t0 = _mm256_unpacklo_epi32(a[0], a[1]), t1 = _mm256_unpackhi_epi32(a[0], a[1]);
        const __m256i t2 = _mm256_unpacklo_epi32(a[2], a[3]), t3 = _mm256_unpackhi_epi32(a[2], a[3]);
        const __m256i c[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                              _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3)};
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        X8_UNROLL for (int k = 0; k < 4; k++) {
            wq[k] = _mm256_and_si256(c[k], m4);
            wq[4 + k] = _mm256_and_si256(_mm256_srli_epi16(c[k], 4), m4);
        }
        if (kind == 5) x8_iq4_grid(wq);
        if (X8_IS_Q5(kind)) {
            int32_t h[8];
            X8_UNROLL for (int r = 0; r < 8; r++) memcpy(&h[r], p[r] + qo - 4, 4); /* qh precedes qs */
            x8_q5_fifth(wq, _mm256_loadu_si256((const __m256i *)h));
        }
    } else {
        __m256i v[8], s[8], u[8];
        X8_UNROLL for (int r = 0; r < 8; r++) v[r] = _mm256_loadu_si256((const __m256i *)(p[r] + 2));
        X8_UNROLL for (int r = 0; r < 8; r += 2) {
            s[r] = _mm256_unpacklo_epi32(v[r], v[r + 1]);
            s[r + 1] = _mm256_unpackhi_epi32(v[r], v[r + 1]);
        }
        X8_UNROLL for (int h = 0; h < 8; h += 4) {
            u[h + 0] = _mm256_unpacklo_epi64(s[h + 0], s[h + 2]);
            u[h + 1] = _mm256_unpackhi_epi64(s[h + 0], s[h + 2]);
            u[h + 2] = _mm256_unpacklo_epi64(s[h + 1], s[h + 3]);
            u[h + 3] = _mm256_unpackhi_epi64(s[h + 1], s[h + 3]);
        }
        const __m256i flip = _mm256_set1_epi8((char)0x80);
        X8_UNROLL for (int k = 0; k < 4; k++) {
            wq[k] = x8_prep_q8(_mm256_xor_si256(_mm256_permute2x128_si256(u[k], u[4 + k], 0x20), flip));
            wq[4 + k] = x8_prep_q8(_mm256_xor_si256(_mm256_permute2x128_si256(u[k], u[4 + k], 0x31), flip));
        }
    }
}

/* One group of 8 rows x T tokens; y[t * ys + r] for r < rows. gw: the x8
 * group (plain = 0), or the first of `rows` plain rows of wrb bytes (plain =
 * 1: transposed into the x8 registers block by block). */
X8_INLINE void x8_tile(int kind, int plain, size_t nb, const uint8_t *restrict gw, size_t wrb, int rows,
                       const X8_FN(x8_act) *restrict a, const uint8_t *restrict x, size_t xrb, float *restrict y,
                       size_t ys, const int T)
{
    const size_t gbb = kind == 0 || kind == 5 ? 144 : kind == 1 ? 160 : kind == 3 ? 176 : kind == 4 ? 192 : 272;
    __m256 acc[X8_T], summ[X8_T];
    X8_UNROLL for (int t = 0; t < T; t++) acc[t] = summ[t] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        __m256 dw, mw = _mm256_setzero_ps();
        __m256i wq[8];
        if (plain) {
            x8_load_plain(kind, gw, wrb, rows, b, &dw, &mw, wq);
        } else {
            const uint8_t *g = gw + b * gbb;
            dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
            if (kind == 2) {
                X8_UNROLL for (int c = 0; c < 8; c++) wq[c] = x8_prep_q8(_mm256_loadu_si256((const __m256i *)(g + 16 + 32 * c)));
            } else {
                const uint8_t *q = g + (kind == 1 ? 32 : kind == 3 ? 48 : kind == 4 ? 64 : 16);
                if (X8_HAS_MIN(kind)) mw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16)));
                const __m256i m4 = _mm256_set1_epi8(0x0f);
                X8_UNROLL for (int c = 0; c < 4; c++) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * c));
                    wq[c] = _mm256_and_si256(v, m4);                         /* values 4c .. 4c+3 */
                    wq[4 + c] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4); /* values 16+4c .. */
                }
                if (X8_IS_Q5(kind)) x8_q5_fifth(wq, _mm256_loadu_si256((const __m256i *)(g + (kind == 3 ? 16 : 32))));
                if (kind == 5) x8_iq4_grid(wq);
            }
        }
        X8_UNROLL for (int t = 0; t < T; t++) {
            const int8_t *xq = x8_xqs(kind, x, xrb, t, b);
            __m256i is = _mm256_set1_epi32(a->corr[t][b]);
            if (kind == 2 || kind == 5) {
                X8_UNROLL for (int c = 0; c < 8; c++) is = x8_dot_q8(is, wq[c], x8_bcast4(xq + 4 * c));
            } else {
                X8_UNROLL for (int c = 0; c < 4; c++) {
                    is = x8_dot(is, wq[c], x8_bcast4(xq + 4 * c));
                    is = x8_dot(is, wq[4 + c], x8_bcast4(xq + 16 + 4 * c));
                }
            }
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a->dx[t][b])), _mm256_cvtepi32_ps(is), acc[t]);
            if (X8_HAS_MIN(kind)) summ[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(a->sx[t][b]), summ[t]);
        }
    }
    X8_UNROLL for (int t = 0; t < T; t++) {
        const __m256 v = X8_HAS_MIN(kind) ? _mm256_add_ps(acc[t], summ[t]) : acc[t];
        if (rows == 8) {
            _mm256_storeu_ps(y + (size_t)t * ys, v);
        } else {
            float tmp[8];
            _mm256_storeu_ps(tmp, v);
            memcpy(y + (size_t)t * ys, tmp, (size_t)rows * sizeof(float));
        }
    }
}

#define X8_CASE(kind, plain, T_) \
    case T_: x8_tile(kind, plain, nb, gw, w_row_bytes, rows, a, xt, xrb, yt, ys, T_); break;

/* Rows [r0, r1) in groups of 8 starting at r0 (x8 layout: r0, r1 multiples
 * of 8, groups at multiples of 8 in the tensor; plain: any r0, last group
 * ragged). */
#define X8_DRIVER(fname, kind, plain)                                                                   \
    MZ_GEMM_DECL(fname)                                                                                 \
    {                                                                                                   \
        MZ_ASSERT(n / MZ_QK <= MZ_X8_MAX_BLOCKS);                                                       \
        MZ_ASSERT(plain || (r0 % 8 == 0 && r1 % 8 == 0));                                               \
        const size_t nb = n / MZ_QK, xrb = x_row_bytes, ys = y_stride;                                  \
        X8_FN(x8_act) act, *a = &act;                                                                   \
        for (size_t t0 = 0; t0 < n_tok; t0 += X8_T) {                                                   \
            const int tn = (int)(n_tok - t0 < X8_T ? n_tok - t0 : X8_T);                                \
            const uint8_t *xt = (const uint8_t *)x + t0 * xrb;                                          \
            x8_prep(a, kind, nb, xt, xrb, tn);                                                          \
            for (size_t ra = r0; ra < r1; ra += 8) {                                                    \
                const int rows = (int)(r1 - ra < 8 ? r1 - ra : 8);                                      \
                const uint8_t *gw = (const uint8_t *)w + ra * w_row_bytes;                              \
                float *yt = y + t0 * ys + ra;                                                           \
                switch (tn) {                                                                           \
                    X8_CASE(kind, plain, 1) X8_CASE(kind, plain, 2) X8_CASE(kind, plain, 3)             \
                    X8_CASE(kind, plain, 4) X8_CASES_5_8(kind, plain)                                   \
                default: MZ_ASSERT(0);                                                                  \
                }                                                                                       \
            }                                                                                           \
        }                                                                                               \
    }

/* Plain-layout gemm and vec_dot of a quantized type: the x8 order (so a
 * tensor gives the same bits repacked or not), or gemm_x86.h's tiles for
 * rows longer than MZ_X8_MAX_BLOCKS blocks. */
#define X8_PLAIN(tname, kind)                                                                           \
    static X8_DRIVER(X8_FN(x8_plain_##tname), kind, 1)                                                   \
    MZ_GEMM_DECL(X8_FN(mz_gemm_##tname))                                                                \
    {                                                                                                   \
        if (n / MZ_QK > MZ_X8_MAX_BLOCKS)                                                               \
            GEMM_FN(mz_gemm_##tname##_tiles)(n, w, w_row_bytes, r0, r1, x, x_row_bytes, n_tok, y, y_stride); \
        else                                                                                            \
            X8_FN(x8_plain_##tname)(n, w, w_row_bytes, r0, r1, x, x_row_bytes, n_tok, y, y_stride);     \
    }                                                                                                   \
    float X8_FN(mz_vec_dot_##tname)(size_t n, const void *restrict w, const void *restrict x)           \
    {                                                                                                   \
        float out;                                                                                      \
        X8_FN(mz_gemm_##tname)(n, w, 0, 0, 1, x, 0, 1, &out, 0);                                        \
        return out;                                                                                     \
    }

#if X8_T == 8
#define X8_CASES_5_8(kind, plain) X8_CASE(kind, plain, 5) X8_CASE(kind, plain, 6) X8_CASE(kind, plain, 7) X8_CASE(kind, plain, 8)
#elif X8_T == 4
#define X8_CASES_5_8(kind, plain)
#else
#error "X8_T must be 4 or 8"
#endif

X8_DRIVER(X8_FN(mz_gemm_x8_q4_0_q8_0), 0, 0)
X8_DRIVER(X8_FN(mz_gemm_x8_q4_1_q8_1), 1, 0)
X8_DRIVER(X8_FN(mz_gemm_x8_q8_0_q8_0), 2, 0)
X8_PLAIN(q4_0_q8_0, 0)
X8_PLAIN(q4_1_q8_1, 1)
X8_PLAIN(q8_0_q8_0, 2)
/* Q5_0, Q5_1, IQ4_NL (q5_iq4_*.c): their tiles for long rows are q5_iq4_x86.h's. */
X8_DRIVER(X8_FN(mz_gemm_x8_q5_0_q8_0), 3, 0)
X8_PLAIN(q5_0_q8_0, 3)
X8_DRIVER(X8_FN(mz_gemm_x8_q5_1_q8_1), 4, 0)
X8_PLAIN(q5_1_q8_1, 4)
X8_DRIVER(X8_FN(mz_gemm_x8_iq4_nl_q8_0), 5, 0)
X8_PLAIN(iq4_nl_q8_0, 5)
