/*
 * q5_iq4_x86.h — register-tiled kernels of Q5_0, Q5_1, IQ4_NL and IQ4_XS
 * (many weight rows x many tokens), x86. Included by q5_iq4_avx2.c
 * (vpmaddubsw + vpmaddwd, 16 registers) and q5_iq4_avx512.c (AVX-512 VL +
 * VNNI vpdpbusd on 256-bit registers, 32 of them); each first defines
 * QX_SUFFIX, QX_R x QX_T (the largest tile: rows x tokens) and the integer
 * primitives:
 *   qx_hbits(qh)          0xff in byte i where bit i of the u32 qh is set
 *   qx_prep_q5_0(x)       per-activation-block term for qx_dot_q5_0
 *   qx_dot_q5_0(u, x, c)  lane i = sum over values 4i..4i+3 of (u - 16) * x
 *   qx_dot_q5_1(u, x)     lane i = sum of u * x                (u in 0..31)
 *   QX_IQ4_BIAS, qx_prep_iq4(x), qx_dot_iq4(w, x, c): w = grid value +
 *                         QX_IQ4_BIAS as a byte; lane i = sum grid * x
 * with u, w, x 32 bytes in value order (x the s8 activations).
 *
 * Canonical arithmetic. Every output is one fixed sequence of float
 * operations, whatever the tile it falls in (vec_dot is the 1 x 1 tile),
 * and the integer lanes are exact, so both ISAs give the same bits:
 *   32-value blocks b (Q5_0, Q5_1, IQ4_NL; ggml's AVX2 order):
 *     acc = fma(f32(dw_b) * f32(dx_b) [broadcast], f32(p_b), acc)   8 lanes
 *     y   = hsum(acc) = ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))
 *     Q5_1: y += summ, summ = fma(f32(mw_b), f32(sx_b), summ) over the
 *           blocks in order (a scalar per output, as ggml's summs)
 *   IQ4_XS (super-blocks of 8 sub-blocks j; Q8_K activations):
 *     acc = fma((f32(dw) * ls_j) * dx, f32(p_j), acc), y = hsum(acc)
 *     with ls_j = the sub-block scale - 32 (dw * ls_j is exact in f32).
 * Per (row, token, block) the work is the integer dot, one conversion, one
 * multiply and one FMA; a tile's weight registers serve QX_T tokens and
 * its activation registers QX_R rows.
 *
 * Loop order (gemm): rows [r0, r1) in blocks whose weights fit half of L1;
 * within a block, tokens in tiles of QX_T, then rows in tiles of QX_R.
 */
#ifndef QX_SUFFIX
#error "define QX_SUFFIX and the primitives before including q5_iq4_x86.h"
#endif

#include <immintrin.h>
#include <string.h>

#define QX_CAT2(a, b) a##_##b
#define QX_CAT(a, b) QX_CAT2(a, b)
#define QX_FN(name) QX_CAT(name, QX_SUFFIX)
#define QX_INLINE static inline __attribute__((always_inline))
#define QX_UNROLL _Pragma("GCC unroll 8")
#define QX_L1_BYTES (16 * 1024)

QX_INLINE float qx_hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The 32 nibbles of qs[16] as bytes in value order (low nibbles, then high). */
QX_INLINE __m256i qx_nibbles(const uint8_t *qs)
{
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

/* Five-bit values of a Q5 block: the nibbles with bit i of qh as bit 4. */
QX_INLINE __m256i qx_q5(const uint8_t *qh, const uint8_t *qs)
{
    uint32_t h;
    memcpy(&h, qh, 4);
    return _mm256_or_si256(qx_nibbles(qs), _mm256_and_si256(qx_hbits(h), _mm256_set1_epi8(0x10)));
}

/* The IQ4 grid + QX_IQ4_BIAS looked up for 32 nibbles. */
QX_INLINE __m256i qx_iq4(const uint8_t *qs)
{
    const __m128i grid = _mm_add_epi8(_mm_loadu_si128((const __m128i *)mz_kvalues_iq4nl),
                                      _mm_set1_epi8((char)QX_IQ4_BIAS));
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(grid), qx_nibbles(qs));
}

QX_INLINE __m256 qx_bcast_f16(const mz_f16 *p) { return _mm256_set1_ps(_cvtsh_ss(*p)); }

/* ---- 32-value blocks: Q5_0 / IQ4_NL x Q8_0, Q5_1 x Q8_1 --------------------------- */

enum { QX_Q5_0 = 0, QX_Q5_1 = 1, QX_IQ4_NL = 2 };

/* Weight block b of a row: the byte vector the dot takes, and the scales. */
QX_INLINE __m256i qx_load_w(int kind, const uint8_t *row, size_t b, __m256 *dw, float *mw)
{
    if (kind == QX_Q5_0) {
        const mz_block_q5_0 *bw = (const mz_block_q5_0 *)row + b;
        *dw = qx_bcast_f16(&bw->d);
        return qx_q5(bw->qh, bw->qs);
    }
    if (kind == QX_Q5_1) {
        const mz_block_q5_1 *bw = (const mz_block_q5_1 *)row + b;
        *dw = qx_bcast_f16(&bw->d);
        *mw = _cvtsh_ss(bw->m);
        return qx_q5(bw->qh, bw->qs);
    }
    const mz_block_iq4_nl *bw = (const mz_block_iq4_nl *)row + b;
    *dw = qx_bcast_f16(&bw->d);
    return qx_iq4(bw->qs);
}

QX_INLINE void qx_tile32(int kind, size_t nb, const uint8_t *restrict w, size_t wrb, const uint8_t *restrict x,
                         size_t xrb, float *restrict y, size_t ys, const int R, const int T)
{
    __m256 acc[4][4];
    float summ[4][4];
    QX_UNROLL for (int r = 0; r < R; r++) QX_UNROLL for (int t = 0; t < T; t++) {
        acc[r][t] = _mm256_setzero_ps();
        summ[r][t] = 0.0f;
    }
    for (size_t b = 0; b < nb; b++) {
        __m256i wq[4];
        __m256 dw[4];
        float mw[4];
        QX_UNROLL for (int r = 0; r < R; r++) wq[r] = qx_load_w(kind, w + (size_t)r * wrb, b, &dw[r], &mw[r]);
        QX_UNROLL for (int t = 0; t < T; t++) {
            const int8_t *xq;
            __m256 dx;
            float sx = 0.0f;
            if (kind == QX_Q5_1) {
                const mz_block_q8_1 *bx = (const mz_block_q8_1 *)(x + (size_t)t * xrb) + b;
                xq = bx->qs;
                dx = qx_bcast_f16(&bx->d);
                sx = _cvtsh_ss(bx->s);
            } else {
                const mz_block_q8_0 *bx = (const mz_block_q8_0 *)(x + (size_t)t * xrb) + b;
                xq = bx->qs;
                dx = qx_bcast_f16(&bx->d);
            }
            const __m256i xv = _mm256_loadu_si256((const __m256i *)xq);
            const __m256i xc = kind == QX_Q5_0 ? qx_prep_q5_0(xv) : kind == QX_IQ4_NL ? qx_prep_iq4(xv) : xv;
            QX_UNROLL for (int r = 0; r < R; r++) {
                const __m256i p = kind == QX_Q5_0   ? qx_dot_q5_0(wq[r], xv, xc)
                                  : kind == QX_Q5_1 ? qx_dot_q5_1(wq[r], xv)
                                                    : qx_dot_iq4(wq[r], xv, xc);
                acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], dx), _mm256_cvtepi32_ps(p), acc[r][t]);
                if (kind == QX_Q5_1) summ[r][t] = __builtin_fmaf(mw[r], sx, summ[r][t]);
            }
        }
    }
    QX_UNROLL for (int t = 0; t < T; t++) QX_UNROLL for (int r = 0; r < R; r++)
        y[(size_t)t * ys + (size_t)r] = qx_hsum(acc[r][t]) + (kind == QX_Q5_1 ? summ[r][t] : 0.0f);
}

QX_INLINE void qx_tile_q5_0(size_t nb, const uint8_t *restrict w, size_t wrb, const uint8_t *restrict x,
                            size_t xrb, float *restrict y, size_t ys, const int R, const int T)
{
    qx_tile32(QX_Q5_0, nb, w, wrb, x, xrb, y, ys, R, T);
}

QX_INLINE void qx_tile_q5_1(size_t nb, const uint8_t *restrict w, size_t wrb, const uint8_t *restrict x,
                            size_t xrb, float *restrict y, size_t ys, const int R, const int T)
{
    qx_tile32(QX_Q5_1, nb, w, wrb, x, xrb, y, ys, R, T);
}

QX_INLINE void qx_tile_iq4_nl(size_t nb, const uint8_t *restrict w, size_t wrb, const uint8_t *restrict x,
                              size_t xrb, float *restrict y, size_t ys, const int R, const int T)
{
    qx_tile32(QX_IQ4_NL, nb, w, wrb, x, xrb, y, ys, R, T);
}

/* ---- IQ4_XS x Q8_K ----------------------------------------------------------------- */

QX_INLINE void qx_tile_iq4_xs(size_t nb, const uint8_t *restrict w, size_t wrb, const uint8_t *restrict x,
                              size_t xrb, float *restrict y, size_t ys, const int R, const int T)
{
    __m256 acc[4][4];
    QX_UNROLL for (int r = 0; r < R; r++) QX_UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        float dw[4];
        QX_UNROLL for (int r = 0; r < R; r++) dw[r] = _cvtsh_ss(((const mz_block_iq4_xs *)(w + (size_t)r * wrb) + b)->d);
        __m256 dx[4];
        QX_UNROLL for (int t = 0; t < T; t++) dx[t] = _mm256_set1_ps(((const mz_block_q8_K *)(x + (size_t)t * xrb) + b)->d);
        for (int j = 0; j < MZ_QK_K / MZ_QK; j++) {
            __m256i wq[4];
            __m256 dl[4];
            QX_UNROLL for (int r = 0; r < R; r++) {
                const mz_block_iq4_xs *bw = (const mz_block_iq4_xs *)(w + (size_t)r * wrb) + b;
                wq[r] = qx_iq4(bw->qs + j * MZ_QK / 2);
                dl[r] = _mm256_set1_ps(dw[r] * (float)mz_iq4_xs_scale(bw, j));
            }
            QX_UNROLL for (int t = 0; t < T; t++) {
                const mz_block_q8_K *bx = (const mz_block_q8_K *)(x + (size_t)t * xrb) + b;
                const __m256i xv = _mm256_loadu_si256((const __m256i *)(bx->qs + j * MZ_QK));
                const __m256i xc = qx_prep_iq4(xv);
                QX_UNROLL for (int r = 0; r < R; r++) {
                    const __m256i p = qx_dot_iq4(wq[r], xv, xc);
                    acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dl[r], dx[t]), _mm256_cvtepi32_ps(p), acc[r][t]);
                }
            }
        }
    }
    QX_UNROLL for (int t = 0; t < T; t++) QX_UNROLL for (int r = 0; r < R; r++)
        y[(size_t)t * ys + (size_t)r] = qx_hsum(acc[r][t]);
}

/* ---- drivers ------------------------------------------------------------------------ */

/* Each (rows, tokens) shape up to 4 x 4 is its own instantiation so that the
 * accumulators live in registers; only shapes up to QX_R x QX_T are asked for. */
#define QX_SHAPE(tile, R_, T_) \
    case (R_) * 8 + (T_): tile(nb, w, wrb, x, xrb, y, ys, R_, T_); return;
#define QX_SHAPES_OF_ROWS(tile, R_) \
    QX_SHAPE(tile, R_, 1) QX_SHAPE(tile, R_, 2) QX_SHAPE(tile, R_, 3) QX_SHAPE(tile, R_, 4)

/* gemm and vec_dot of one type: name is the kernels' infix (q5_0_q8_0),
 * block_len the values per weight block. */
#define QX_KERNELS(name, tile, block_len)                                                               \
    static void QX_FN(qx_run_##name)(int rn, int tn, size_t nb, const uint8_t *restrict w, size_t wrb,  \
                                     const uint8_t *restrict x, size_t xrb, float *restrict y, size_t ys) \
    {                                                                                                   \
        switch (rn * 8 + tn) {                                                                          \
            QX_SHAPES_OF_ROWS(tile, 1) QX_SHAPES_OF_ROWS(tile, 2)                                       \
            QX_SHAPES_OF_ROWS(tile, 3) QX_SHAPES_OF_ROWS(tile, 4)                                       \
        }                                                                                               \
        MZ_ASSERT(0);                                                                                   \
    }                                                                                                   \
    MZ_GEMM_DECL(QX_FN(mz_gemm_##name))                                                                 \
    {                                                                                                   \
        MZ_ASSERT(n % (block_len) == 0);                                                                \
        const size_t nb = n / (block_len);                                                              \
        size_t rows_per_l1 = QX_L1_BYTES / w_row_bytes;                                                 \
        rows_per_l1 = rows_per_l1 < QX_R ? QX_R : rows_per_l1 - rows_per_l1 % QX_R;                     \
        for (size_t rb = r0; rb < r1; rb += rows_per_l1) {                                              \
            const size_t re = r1 - rb < rows_per_l1 ? r1 : rb + rows_per_l1;                            \
            for (size_t t0 = 0; t0 < n_tok; t0 += QX_T) {                                               \
                const int tn = (int)(n_tok - t0 < QX_T ? n_tok - t0 : QX_T);                            \
                for (size_t ra = rb; ra < re; ra += QX_R) {                                             \
                    const int rn = (int)(re - ra < QX_R ? re - ra : QX_R);                              \
                    QX_FN(qx_run_##name)(rn, tn, nb, (const uint8_t *)w + ra * w_row_bytes, w_row_bytes, \
                                         (const uint8_t *)x + t0 * x_row_bytes, x_row_bytes,            \
                                         y + t0 * y_stride + ra, y_stride);                             \
                }                                                                                       \
            }                                                                                           \
        }                                                                                               \
    }                                                                                                   \
    float QX_FN(mz_vec_dot_##name)(size_t n, const void *restrict w, const void *restrict x)           \
    {                                                                                                   \
        MZ_ASSERT(n % (block_len) == 0);                                                                \
        float out;                                                                                      \
        tile(n / (block_len), (const uint8_t *)w, 0, (const uint8_t *)x, 0, &out, 0, 1, 1);             \
        return out;                                                                                     \
    }

QX_KERNELS(q5_0_q8_0, qx_tile_q5_0, MZ_QK)
QX_KERNELS(q5_1_q8_1, qx_tile_q5_1, MZ_QK)
QX_KERNELS(iq4_nl_q8_0, qx_tile_iq4_nl, MZ_QK)
QX_KERNELS(iq4_xs_q8_K, qx_tile_iq4_xs, MZ_QK_K)
