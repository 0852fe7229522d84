/*
 * attn_simd.h — the parts of the attention tile steps (attn_tiled.h) that do
 * not depend on the vector width, written once for attn_avx2.c (8 lanes) and
 * attn_avx512.c (16 lanes). Each includes it after defining:
 *   AV, AV_W             the float vector type and its lane count;
 *   AV_INT               the matching integer vector type;
 *   AV_LOAD(p), AV_STORE(p, v), AV_SET1(x), AV_BCAST(p) (*p in every lane);
 *   AV_MUL, AV_ADD, AV_FMA(a, b, c) = a * b + c, AV_FNMA(a, b, c) = c - a * b;
 *   AV_ROUND(x)          to nearest integer, no exceptions;
 *   AV_CVT_I(x), AV_ADD_I, AV_SET1_I, AV_SLLI_I(x, n), AV_CAST_I2F(x);
 *   AV_SUB, AV_DIV, AV_MIN, AV_MAX; AV_ZERO_BELOW(x, lo, v): v, 0 where x < lo;
 *   AV_SELECT_NONNEG(x, a, b): a where x >= 0, else b.
 * Every function here is the same sequence of operations on either width, so
 * the two ISAs keep giving the same bits per lane (attn_tiled.h).
 */
#ifndef AV_W
#error "define AV, AV_W and the AV_ operations before including attn_simd.h"
#endif

#include "kernels_impl.h"

#include <immintrin.h>
#include <math.h>

#define AV_INLINE static inline __attribute__((always_inline))

/* e^x for -87 <= x <= 0: Cody-Waite reduction by ln 2, degree-6 polynomial
 * (constants in kernels_impl.h, shared with the scalar mz_silu_exp1),
 * relative error ~2 ulp. The caller clamps x and zeroes lanes below -87. */
AV_INLINE AV exp_poly(AV x)
{
    const AV n = AV_ROUND(AV_MUL(x, AV_SET1(MZ_EXP_LOG2E)));
    AV r = AV_FNMA(n, AV_SET1(MZ_EXP_LN2_HI), x);
    r = AV_FNMA(n, AV_SET1(MZ_EXP_LN2_LO), r);
    AV y = AV_SET1(MZ_EXP_P6);
    y = AV_FMA(y, r, AV_SET1(MZ_EXP_P5));
    y = AV_FMA(y, r, AV_SET1(MZ_EXP_P4));
    y = AV_FMA(y, r, AV_SET1(MZ_EXP_P3));
    y = AV_FMA(y, r, AV_SET1(MZ_EXP_P2));
    y = AV_FMA(y, r, AV_SET1(MZ_EXP_P1));
    y = AV_FMA(y, AV_MUL(r, r), AV_ADD(r, AV_SET1(1.0f)));
    const AV_INT e = AV_SLLI_I(AV_ADD_I(AV_CVT_I(n), AV_SET1_I(127)), 23);
    return AV_MUL(y, AV_CAST_I2F(e));
}

/* SwiGLU (kernels_impl.h, mz_swiglu1) on AV_W lanes: the activation's e^x
 * is this polynomial too. */
AV_INLINE AV swiglu_lanes(AV g, AV u)
{
    const AV a = AV_MIN(g, AV_SUB(AV_SET1(0.0f), g)); /* -|g| */
    const AV e = AV_ZERO_BELOW(a, AV_SET1(-87.0f), exp_poly(AV_MAX(a, AV_SET1(-87.0f))));
    const AV num = AV_SELECT_NONNEG(g, g, AV_MUL(g, e));
    return AV_MUL(AV_DIV(num, AV_ADD(AV_SET1(1.0f), e)), u);
}

AV_INLINE void swiglu_rows(const float *restrict g, const float *restrict u, float *restrict y, size_t n)
{
    size_t i = 0;
    for (; i + AV_W <= n; i += AV_W) AV_STORE(y + i, swiglu_lanes(AV_LOAD(g + i), AV_LOAD(u + i)));
    for (; i < n; i++) y[i] = mz_swiglu1(g[i], u[i]);
}

/* The max and the sum of 8 lanes, reduced halves, pairs, lanes (the order
 * both ISAs' softmax steps use). */
AV_INLINE float hmax8(__m256 v)
{
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    return _mm_cvtss_f32(m4);
}

AV_INLINE float hsum8(__m256 v)
{
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
    return _mm_cvtss_f32(s4);
}

/* y[0, n) *= c; n % AV_W == 0. */
AV_INLINE void scale_row(float *restrict y, float c, int n)
{
    const AV vc = AV_SET1(c);
    for (int d = 0; d < n; d += AV_W) AV_STORE(y + d, AV_MUL(vc, AV_LOAD(y + d)));
}

/* The online-softmax step's rescale: when the tile's max mt raises the
 * row's m, its l and acc row are scaled by exp(m - mt) (0 on the first tile). */
AV_INLINE void raise_max(attn_row_state *st, float *restrict acc_row, float mt, int hd)
{
    if (mt > st->m) {
        const float corr = expf(st->m - mt);
        st->l *= corr;
        scale_row(acc_row, corr, hd);
        st->m = mt;
    }
}

/* Four accumulators over dims [d, d + 4 * AV_W) of row a, in and out. */
#define AV_LOAD4(a, c0, c1, c2, c3)                                                                     \
    AV c0 = AV_LOAD((a) + d), c1 = AV_LOAD((a) + d + AV_W), c2 = AV_LOAD((a) + d + 2 * AV_W),        \
       c3 = AV_LOAD((a) + d + 3 * AV_W)
#define AV_STORE4(a, c0, c1, c2, c3)                                                                    \
    do {                                                                                                \
        AV_STORE((a) + d, c0);                                                                          \
        AV_STORE((a) + d + AV_W, c1);                                                                   \
        AV_STORE((a) + d + 2 * AV_W, c2);                                                               \
        AV_STORE((a) + d + 3 * AV_W, c3);                                                               \
    } while (0)
/* c0..c3 += p[t] * Vf[t][d, d + 4 * AV_W) for t in [from, n), ascending. */
#define AV_ACC4(c0, c1, c2, c3, p, from, n)                                                             \
    for (int t_ = (from); t_ < (n); t_++) {                                                             \
        const float *v_ = vf + (size_t)t_ * (size_t)hd + d;                                             \
        const AV w_ = AV_BCAST((p) + t_);                                                               \
        c0 = AV_FMA(w_, AV_LOAD(v_), c0);                                                               \
        c1 = AV_FMA(w_, AV_LOAD(v_ + AV_W), c1);                                                        \
        c2 = AV_FMA(w_, AV_LOAD(v_ + 2 * AV_W), c2);                                                    \
        c3 = AV_FMA(w_, AV_LOAD(v_ + 3 * AV_W), c3);                                                    \
    }

/* acc rows a0 (positions [from, n0)) and a1 (positions [from, n1), may be
 * NULL) += P . Vf, t ascending: each row's own sequence of FMAs is the same
 * either way. */
AV_INLINE void accumulate_rows(float *restrict a0, float *restrict a1, const float *restrict vf, int hd,
                               const float *restrict p0, const float *restrict p1, int from, int n0, int n1)
{
    const int nboth = a1 ? MZ_MIN(n0, n1) : 0;
    int d = 0;
    for (; d + 4 * AV_W <= hd; d += 4 * AV_W) {
        AV_LOAD4(a0, c0, c1, c2, c3);
        int t = from;
        if (a1) {
            AV_LOAD4(a1, e0, e1, e2, e3);
            for (; t < nboth; t++) {
                const float *v = vf + (size_t)t * (size_t)hd + d;
                const AV v0 = AV_LOAD(v), v1 = AV_LOAD(v + AV_W);
                const AV v2 = AV_LOAD(v + 2 * AV_W), v3 = AV_LOAD(v + 3 * AV_W);
                const AV pa = AV_BCAST(p0 + t), pb = AV_BCAST(p1 + t);
                c0 = AV_FMA(pa, v0, c0);
                c1 = AV_FMA(pa, v1, c1);
                c2 = AV_FMA(pa, v2, c2);
                c3 = AV_FMA(pa, v3, c3);
                e0 = AV_FMA(pb, v0, e0);
                e1 = AV_FMA(pb, v1, e1);
                e2 = AV_FMA(pb, v2, e2);
                e3 = AV_FMA(pb, v3, e3);
            }
            AV_ACC4(e0, e1, e2, e3, p1, t, n1)
            AV_STORE4(a1, e0, e1, e2, e3);
        }
        AV_ACC4(c0, c1, c2, c3, p0, t, n0)
        AV_STORE4(a0, c0, c1, c2, c3);
    }
    for (; d < hd; d += AV_W) {
        AV c0 = AV_LOAD(a0 + d);
        for (int t = from; t < n0; t++) c0 = AV_FMA(AV_BCAST(p0 + t), AV_LOAD(vf + (size_t)t * (size_t)hd + d), c0);
        AV_STORE(a0 + d, c0);
        if (a1) {
            AV e0 = AV_LOAD(a1 + d);
            for (int t = from; t < n1; t++) e0 = AV_FMA(AV_BCAST(p1 + t), AV_LOAD(vf + (size_t)t * (size_t)hd + d), e0);
            AV_STORE(a1 + d, e0);
        }
    }
}

/* The weighted-V step for rows [r, nr), each over its positions
 * [n0[r], nv[r]): two at a time where both start at one position (a pair of
 * query heads of one token), else one by one. */
AV_INLINE void accumulate_pairs(float *restrict acc, const float *restrict vf, int hd, int r, int nr,
                                const int *n0, const int *nv, float p[][ATTN_TILE])
{
    while (r < nr) {
        float *a0 = acc + (size_t)r * (size_t)hd;
        if (r + 1 < nr && n0[r] == n0[r + 1]) {
            accumulate_rows(a0, a0 + hd, vf, hd, p[r], p[r + 1], n0[r], nv[r], nv[r + 1]);
            r += 2;
        } else {
            accumulate_rows(a0, NULL, vf, hd, p[r], NULL, n0[r], nv[r], 0);
            r++;
        }
    }
}

/* Lanes [t, t + 8) of a tile row that lie in [n0, nv): all ones where kept. */
AV_INLINE __m256 tile_keep8(int t, int n0, int nv)
{
    const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(t), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i below_end = _mm256_cmpgt_epi32(_mm256_set1_epi32(nv), idx);
    const __m256i below_start = _mm256_cmpgt_epi32(_mm256_set1_epi32(n0), idx);
    return _mm256_castsi256_ps(_mm256_andnot_si256(below_start, below_end));
}
