/*
 * attn_avx512.c — the tile steps of the tiled attention (attn_tiled.h) with
 * 16-lane vectors: scores, softmax step, weighted V; plan and merge are
 * attn_avx2.c's.
 * Bit-identical to the AVX2 steps, so to mz_attn_avx2.
 *
 * Scores. The AVX2 product keeps, per (row, position), 8 lanes that sum the
 * dims d = e mod 8 in ascending order, then folds them as
 * ((x0+x1)+(x2+x3))+((x4+x5)+(x6+x7)). Here one 16-lane register holds those
 * 8 lanes for two positions at once: K is converted into pairs,
 *   kf[(j * nb + b) * 16 + h * 8 + e] = K[2j + h][8b + e]     (nb = hd / 8)
 * and each query block of 8 dims is broadcast to both halves, so every FMA
 * does the AVX2 kernel's work for two positions. The fold is the AVX2 one
 * lane for lane: two pairwise-add levels inside 128-bit blocks (what hadd
 * does), then the lower and upper 4-lane blocks added.
 * Register tile: 4 rows x 4 position pairs = 16 accumulators.
 *
 * Softmax step: attn_avx2.c's, with the exp polynomial on 16 lanes; the max
 * and sum reductions go quarter by quarter in the AVX2 order.
 *
 * Weighted V: acc[r][d] += P[r][t] * V[t][d], one FMA per position in
 * ascending order, for four (or two) rows x 64 dims at a time — the same
 * sequence per element as AVX2's two rows x 32 dims.
 */
#include "kernels_impl.h"

#if MZ_KERNELS_X86 && defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include "attn_tiled.h"

#include <immintrin.h>
#include <math.h>

#define AV __m512
#define AV_W 16
#define AV_INT __m512i
#define AV_LOAD _mm512_loadu_ps
#define AV_STORE _mm512_storeu_ps
#define AV_SET1 _mm512_set1_ps
#define AV_BCAST(p) _mm512_set1_ps(*(p))
#define AV_MUL _mm512_mul_ps
#define AV_ADD _mm512_add_ps
#define AV_FMA _mm512_fmadd_ps
#define AV_FNMA _mm512_fnmadd_ps
#define AV_ROUND(x) _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define AV_CVT_I _mm512_cvtps_epi32
#define AV_ADD_I _mm512_add_epi32
#define AV_SET1_I _mm512_set1_epi32
#define AV_SLLI_I _mm512_slli_epi32
#define AV_CAST_I2F _mm512_castsi512_ps
#define AV_SUB _mm512_sub_ps
#define AV_DIV _mm512_div_ps
#define AV_MIN _mm512_min_ps
#define AV_MAX _mm512_max_ps
#define AV_ZERO_BELOW(x, lo, v) _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), v)
#define AV_SELECT_NONNEG(x, a, b) _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ), b, a)
#include "attn_simd.h"

/* Per 128-bit block: [a0+a1, a2+a3, b0+b1, b2+b3], as _mm256_hadd_ps. */
static inline __m512 hadd512(__m512 a, __m512 b)
{
    return _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* One row's four pair accumulators -> per 128-bit block k, the four
 * pairs' partial sums of block k (k: even position low/high 4 dims, odd
 * position low/high). */
static inline __m512 fold_row(__m512 p0, __m512 p1, __m512 p2, __m512 p3)
{
    return hadd512(hadd512(p0, p1), hadd512(p2, p3));
}

static void convert_k_pairs(const mz_f16 *restrict kb, float *restrict kf, int hd, int nt)
{
    const int nb = hd / 8;
    for (int j = 0; 2 * j < nt; j++) {
        const mz_f16 *k0 = kb + (size_t)(2 * j) * (size_t)hd;
        const mz_f16 *k1 = 2 * j + 1 < nt ? k0 + hd : k0; /* odd count: a copy, discarded */
        float *dst = kf + (size_t)j * (size_t)nb * 16;
        int b = 0;
        for (; b + 2 <= nb; b += 2) {
            /* 16 dims of each position -> [k0 b, k1 b], [k0 b+1, k1 b+1]. */
            const __m512 x0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k0 + 8 * b)));
            const __m512 x1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k1 + 8 * b)));
            _mm512_storeu_ps(dst + 16 * b, _mm512_shuffle_f32x4(x0, x1, _MM_SHUFFLE(1, 0, 1, 0)));
            _mm512_storeu_ps(dst + 16 * b + 16, _mm512_shuffle_f32x4(x0, x1, _MM_SHUFFLE(3, 2, 3, 2)));
        }
        for (; b < nb; b++) {
            const __m256i h = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(k0 + 8 * b))),
                _mm_loadu_si128((const __m128i *)(k1 + 8 * b)), 1);
            _mm512_storeu_ps(dst + 16 * b, _mm512_cvtph_ps(h));
        }
    }
}

static void scores_avx512(const float *restrict qs, const mz_f16 *restrict kb, float *restrict kf, int hd,
                          int nr, int nt, float scale, float s[][ATTN_TILE])
{
    convert_k_pairs(kb, kf, hd, nt);
    const int nb = hd / 8, np = (nt + 1) / 2;
    const size_t pair_floats = (size_t)nb * 16;
    const __m512 vscale = _mm512_set1_ps(scale);
    /* Lanes after the fold: [r even | r odd | r+1 even | r+1 odd] x 4
     * pairs; this puts each row's 8 positions in order. */
    const __m512i order = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
    for (int r = 0; r < nr; r += 4) {
        const float *q[4];
        for (int i = 0; i < 4; i++) q[i] = qs + (size_t)MZ_MIN(r + i, nr - 1) * (size_t)hd; /* padding rows: copies */
        for (int j0 = 0; j0 < np; j0 += 4) {
            const float *k[4];
            for (int i = 0; i < 4; i++) k[i] = kf + (size_t)MZ_MIN(j0 + i, np - 1) * pair_floats;
            /* Named accumulators: an array here ends up in memory. */
            __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00,
                   c13 = c00, c20 = c00, c21 = c00, c22 = c00, c23 = c00, c30 = c00, c31 = c00, c32 = c00, c33 = c00;
            for (int b = 0; b < nb; b++) {
                const __m512 k0 = _mm512_loadu_ps(k[0] + 16 * b), k1 = _mm512_loadu_ps(k[1] + 16 * b);
                const __m512 k2 = _mm512_loadu_ps(k[2] + 16 * b), k3 = _mm512_loadu_ps(k[3] + 16 * b);
#define MZ_ROW(i, a0, a1, a2, a3)                                                                            \
    do {                                                                                                    \
        const __m512 x = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd((const double *)(q[i] + 8 * b)))); \
        a0 = _mm512_fmadd_ps(x, k0, a0);                                                                    \
        a1 = _mm512_fmadd_ps(x, k1, a1);                                                                    \
        a2 = _mm512_fmadd_ps(x, k2, a2);                                                                    \
        a3 = _mm512_fmadd_ps(x, k3, a3);                                                                    \
    } while (0)
                MZ_ROW(0, c00, c01, c02, c03);
                MZ_ROW(1, c10, c11, c12, c13);
                MZ_ROW(2, c20, c21, c22, c23);
                MZ_ROW(3, c30, c31, c32, c33);
#undef MZ_ROW
            }
            const __m512 g[4] = {fold_row(c00, c01, c02, c03), fold_row(c10, c11, c12, c13),
                                 fold_row(c20, c21, c22, c23), fold_row(c30, c31, c32, c33)};
            const int t0 = 2 * j0, n_pos = MZ_MIN(8, nt - t0);
            const __mmask8 keep = (__mmask8)((1u << n_pos) - 1);
            for (int i = 0; i < 4 && r + i < nr; i += 2) {
                const __m512 sum = _mm512_add_ps(_mm512_shuffle_f32x4(g[i], g[i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                                                 _mm512_shuffle_f32x4(g[i], g[i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
                const __m512 v = _mm512_permutexvar_ps(order, _mm512_mul_ps(vscale, sum));
                _mm256_mask_storeu_ps(&s[r + i][t0], keep, _mm512_castps512_ps256(v));
                if (r + i + 1 < nr)
                    _mm256_mask_storeu_ps(&s[r + i + 1][t0], keep, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
            }
        }
    }
}

/* Four rows that all take the same positions [from, n), 64 dims at a time
 * (each V load serves four rows); hd % 64 == 0. */
static inline void accumulate_4rows(float *restrict acc, const float *restrict vf, int hd, float p[][ATTN_TILE],
                                    int r, int from, int n)
{
    float *a0 = acc + (size_t)r * (size_t)hd, *a1 = a0 + hd, *a2 = a1 + hd, *a3 = a2 + hd;
    const float *p0 = p[r], *p1 = p[r + 1], *p2 = p[r + 2], *p3 = p[r + 3];
    for (int d = 0; d < hd; d += 64) {
        __m512 c00 = _mm512_loadu_ps(a0 + d), c01 = _mm512_loadu_ps(a0 + d + 16);
        __m512 c02 = _mm512_loadu_ps(a0 + d + 32), c03 = _mm512_loadu_ps(a0 + d + 48);
        __m512 c10 = _mm512_loadu_ps(a1 + d), c11 = _mm512_loadu_ps(a1 + d + 16);
        __m512 c12 = _mm512_loadu_ps(a1 + d + 32), c13 = _mm512_loadu_ps(a1 + d + 48);
        __m512 c20 = _mm512_loadu_ps(a2 + d), c21 = _mm512_loadu_ps(a2 + d + 16);
        __m512 c22 = _mm512_loadu_ps(a2 + d + 32), c23 = _mm512_loadu_ps(a2 + d + 48);
        __m512 c30 = _mm512_loadu_ps(a3 + d), c31 = _mm512_loadu_ps(a3 + d + 16);
        __m512 c32 = _mm512_loadu_ps(a3 + d + 32), c33 = _mm512_loadu_ps(a3 + d + 48);
        for (int t = from; t < n; t++) {
            const float *v = vf + (size_t)t * (size_t)hd + d;
            const __m512 v0 = _mm512_loadu_ps(v), v1 = _mm512_loadu_ps(v + 16);
            const __m512 v2 = _mm512_loadu_ps(v + 32), v3 = _mm512_loadu_ps(v + 48);
            __m512 w = _mm512_set1_ps(p0[t]);
            c00 = _mm512_fmadd_ps(w, v0, c00), c01 = _mm512_fmadd_ps(w, v1, c01);
            c02 = _mm512_fmadd_ps(w, v2, c02), c03 = _mm512_fmadd_ps(w, v3, c03);
            w = _mm512_set1_ps(p1[t]);
            c10 = _mm512_fmadd_ps(w, v0, c10), c11 = _mm512_fmadd_ps(w, v1, c11);
            c12 = _mm512_fmadd_ps(w, v2, c12), c13 = _mm512_fmadd_ps(w, v3, c13);
            w = _mm512_set1_ps(p2[t]);
            c20 = _mm512_fmadd_ps(w, v0, c20), c21 = _mm512_fmadd_ps(w, v1, c21);
            c22 = _mm512_fmadd_ps(w, v2, c22), c23 = _mm512_fmadd_ps(w, v3, c23);
            w = _mm512_set1_ps(p3[t]);
            c30 = _mm512_fmadd_ps(w, v0, c30), c31 = _mm512_fmadd_ps(w, v1, c31);
            c32 = _mm512_fmadd_ps(w, v2, c32), c33 = _mm512_fmadd_ps(w, v3, c33);
        }
        _mm512_storeu_ps(a0 + d, c00), _mm512_storeu_ps(a0 + d + 16, c01);
        _mm512_storeu_ps(a0 + d + 32, c02), _mm512_storeu_ps(a0 + d + 48, c03);
        _mm512_storeu_ps(a1 + d, c10), _mm512_storeu_ps(a1 + d + 16, c11);
        _mm512_storeu_ps(a1 + d + 32, c12), _mm512_storeu_ps(a1 + d + 48, c13);
        _mm512_storeu_ps(a2 + d, c20), _mm512_storeu_ps(a2 + d + 16, c21);
        _mm512_storeu_ps(a2 + d + 32, c22), _mm512_storeu_ps(a2 + d + 48, c23);
        _mm512_storeu_ps(a3 + d, c30), _mm512_storeu_ps(a3 + d + 16, c31);
        _mm512_storeu_ps(a3 + d + 32, c32), _mm512_storeu_ps(a3 + d + 48, c33);
    }
}

static void accumulate_avx512(float *restrict acc, const mz_f16 *restrict vb, float *restrict vf, int hd, int r0,
                              int nr, int nt, const int *n0, const int *nv, float p[][ATTN_TILE])
{
    for (size_t e = 0; e < (size_t)nt * (size_t)hd; e += 16)
        _mm512_storeu_ps(vf + e, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vb + e))));
    int r = r0;
    /* n0 and nv are non-decreasing: equal at r and r + 3, all four are. */
    if (hd % 64 == 0)
        for (; r + 3 < nr && nv[r] == nv[r + 3] && n0[r] == n0[r + 3]; r += 4)
            accumulate_4rows(acc, vf, hd, p, r, n0[r], nv[r]);
    accumulate_pairs(acc, vf, hd, r, nr, n0, nv, p);
}

/* attn_avx2.c's exp_ps, lane for lane (exp_poly on 16 lanes). */
static inline __m512 exp512(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(-87.0f);
    const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    return _mm512_maskz_mov_ps((__mmask16)~under, exp_poly(_mm512_max_ps(x, lo)));
}

static inline __m256 lo256(__m512 v) { return _mm512_castps512_ps256(v); }
static inline __m256 hi256(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

/* Lanes [0, n) of a 16-lane block (n may be <= 0 or >= 16). */
static inline __mmask16 first_lanes(int n)
{
    return n <= 0 ? 0 : n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

/* attn_avx2.c's softmax_rows with 16-lane exp; the max and the sum are
 * reduced in the AVX2 order, quarter by quarter. */
static void softmax_avx512(float s[][ATTN_TILE], const int *n0, const int *nv, int r0, int nr, attn_row_state *st,
                           float *restrict acc, int hd)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int r = r0; r < nr; r++) {
        const int n = nv[r], from = n0[r];
        const __mmask16 k0 = first_lanes(n) & (__mmask16)~first_lanes(from);
        const __mmask16 k1 = first_lanes(n - 16) & (__mmask16)~first_lanes(from - 16);
        const __m512 s0 = _mm512_loadu_ps(&s[r][0]), s1 = _mm512_loadu_ps(&s[r][16]);
        const __m512 b0 = _mm512_mask_blend_ps(k0, ninf, s0), b1 = _mm512_mask_blend_ps(k1, ninf, s1);
        __m256 mx = _mm256_set1_ps(-INFINITY);
        mx = _mm256_max_ps(mx, lo256(b0));
        mx = _mm256_max_ps(mx, hi256(b0));
        mx = _mm256_max_ps(mx, lo256(b1));
        mx = _mm256_max_ps(mx, hi256(b1));
        raise_max(&st[r], acc + (size_t)r * (size_t)hd, hmax8(mx), hd);
        const __m512 mv = _mm512_set1_ps(st[r].m);
        const __m512 p0 = _mm512_maskz_mov_ps(k0, exp512(_mm512_sub_ps(s0, mv)));
        const __m512 p1 = _mm512_maskz_mov_ps(k1, exp512(_mm512_sub_ps(s1, mv)));
        _mm512_storeu_ps(&s[r][0], p0);
        _mm512_storeu_ps(&s[r][16], p1);
        const __m256 sum = _mm256_add_ps(_mm256_add_ps(lo256(p0), hi256(p0)), _mm256_add_ps(lo256(p1), hi256(p1)));
        st[r].l += hsum8(sum);
    }
}

_Static_assert(ATTN_TILE == 32, "softmax_avx512 handles a tile as two 16-lane blocks");

static const attn_tile_kernels avx512_tiles = {scores_avx512, accumulate_avx512, softmax_avx512};

void mz_attn_avx512(const mz_attn_args *a, int ith, int nth)
{
    MZ_ASSERT(a->head_dim % 16 == 0);
    mz_attn_tiled(a, ith, nth, &avx512_tiles);
}

/* mz_swiglu_avx2 on 16 lanes, the same bits. */
void mz_swiglu_avx512(const float *restrict g, const float *restrict u, float *restrict y, size_t n)
{
    swiglu_rows(g, u, y, n);
}

#else
/* Not an x86-64 build with AVX-512 flags: nothing to compile here. */
typedef int mz_attn_avx512_unused;
#endif
