/*
 * kquant_avx512.c — AVX-512 (F/BW/VL/VNNI) dot products of Q4_K, Q5_K and
 * Q6_K with Q8_K: the integers of kquant_avx2.c with 64 values per step
 * (vpmaddubsw on 512-bit registers, then vpdpwssd: the scale product and
 * the sum in one instruction), so the result equals the reference bit for
 * bit. Q2_K, Q3_K and Q4_K use the AVX2 kernels (dispatch.c): for Q4_K the
 * 512-bit form measured slower (bench_kernels, 576 x 1536, one token:
 * 54 against 49 ns a row), its per-block scale work outweighing the wider
 * steps; Q5_K (65 against 80) and Q6_K (50 against 56) gain.
 *
 * Scale vectors: a 512-bit register covers four 16-value groups, one per
 * 128-bit lane (s16 pairs of one group in each lane), so each lane's scale
 * is one s16 broadcast within the lane: a byte shuffle of the scales copied
 * into every lane.
 */
#include "kquant.h"

#if MZ_KERNELS_X86 && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__F16C__)

#include "kquant_x86.h"

/* The 512-bit lanes of a folded onto 256 (the same lane sum). */
static inline __m256i fold512(__m512i a)
{
    return _mm256_add_epi32(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
}

/* Shuffle patterns that put s16 word w[L] of a 128-bit lane into all of
 * lane L, for the lane words (w0, w1, w2, w3) of each use. */
#define LW(w) (int16_t)(0x0100 + 0x0202 * (w))
#define LW8(w) LW(w), LW(w), LW(w), LW(w), LW(w), LW(w), LW(w), LW(w)
#define LANE_WORDS(w0, w1, w2, w3) {LW8(w0), LW8(w1), LW8(w2), LW8(w3)}
static const int16_t k_q45_words[4][32] = {LANE_WORDS(0, 0, 1, 1), LANE_WORDS(2, 2, 3, 3), LANE_WORDS(4, 4, 5, 5),
                                           LANE_WORDS(6, 6, 7, 7)};
static const int16_t k_q6_words[2][32] = {LANE_WORDS(0, 1, 2, 3), LANE_WORDS(4, 5, 6, 7)};
#undef LANE_WORDS
#undef LW8
#undef LW

static inline __m512i lane_words(const int16_t *w) { return _mm512_loadu_si512(w); }

/* acc + sum over 64 values of q * q8 * (the lane's scale). */
static inline __m512i dot64(__m512i acc, __m512i q, const int8_t *q8, __m512i sc)
{
    return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(q, _mm512_loadu_si512(q8)), sc);
}

/* Q4_K and Q5_K (qh NULL for Q4_K). */
static inline mz_kq_sums block_q45(const void *blk, mz_f16 d, mz_f16 dmin, const uint8_t *restrict s12,
                                   const uint8_t *restrict qs, const uint8_t *restrict qh,
                                   const mz_block_q8_K *restrict b)
{
    (void)s12; /* read with d and dmin, through blk */
    __m256i mn16;
    const __m512i sc16 = _mm512_broadcast_i32x4(mz_kq_scales_k4_x86(blk, &mn16)); /* 8 scales in every lane */
    const __m512i m4 = _mm512_set1_epi8(0x0f), sixteen = _mm512_set1_epi8(16);
    const __m512i hbits = qh ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh)) : _mm512_setzero_si512();
    const __m512i nib_shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    /* two accumulators: shorter dependency chains of vpdpwssd */
    __m512i acc[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    MZ_KQ_UNROLL for (int c = 0; c < 4; c++) {
        /* low nibbles (values 64c..64c+31) in the lower half, high nibbles above */
        const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * c)));
        __m512i v = _mm512_and_si512(_mm512_srlv_epi16(q, nib_shift), m4);
        if (qh) {
            const __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * c))),
                                                    _mm256_set1_epi8((char)(2 << (2 * c))), 1);
            v = _mm512_mask_add_epi8(v, _mm512_test_epi8_mask(hbits, bits), v, sixteen);
        }
        acc[c & 1] = dot64(acc[c & 1], v, b->qs + 64 * c, _mm512_shuffle_epi8(sc16, lane_words(k_q45_words[c])));
    }
    mz_kq_sums r = {.dw = h2f(d), .dmin = h2f(dmin)};
    hsum2_i32(fold512(_mm512_add_epi32(acc[0], acc[1])), _mm256_madd_epi16(mn16, _mm256_loadu_si256((const __m256i *)b->bsums)), &r.isum, &r.summs);
    return r;
}

MZ_KQ_Q45_BLOCKS(block_q45)

static inline mz_kq_sums block_q6_K(const mz_block_q6_K *restrict a, const mz_block_q8_K *restrict b)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    /* qh shifts that bring bits 2k..2k+1 to bits 4..5: k = 0 | 1 and 2 | 3 */
    const __m512i shl_lo = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr_hi = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m128i s8 = _mm_loadu_si128((const __m128i *)a->scales);
    __m512i acc[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    MZ_KQ_UNROLL for (int h = 0; h < 2; h++) {
        /* groups 8h..8h+7 as s16, copied into every lane */
        const __m512i sc = _mm512_broadcast_i32x4(_mm_cvtepi8_epi16(h ? _mm_srli_si128(s8, 8) : s8));
        const __m512i ql = _mm512_loadu_si512(a->ql + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(a->qh + 32 * h)));
        /* values 128h + 0..63 (k = 0, 1) and 128h + 64..127 (k = 2, 3) */
        const __m512i q01 = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, shl_lo), m30));
        const __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                            _mm512_and_si512(_mm512_srlv_epi16(qh, shr_hi), m30));
        const int8_t *q8 = b->qs + 128 * h;
        acc[0] = dot64(acc[0], q01, q8, _mm512_shuffle_epi8(sc, lane_words(k_q6_words[0])));
        acc[1] = dot64(acc[1], q23, q8 + 64, _mm512_shuffle_epi8(sc, lane_words(k_q6_words[1])));
    }
    /* codes went in + 32 (0..63): take 32 * sum_g sc[g] * bsums[g] back */
    int32_t off;
    mz_kq_sums r = {.dw = h2f(a->d)};
    hsum2_i32(fold512(_mm512_add_epi32(acc[0], acc[1])), _mm256_madd_epi16(_mm256_cvtepi8_epi16(s8), _mm256_loadu_si256((const __m256i *)b->bsums)), &r.isum,
              &off);
    r.isum -= 32 * off;
    return r;
}

/*
 * gemm tile step: the unpacked block's eight 256-bit chunks joined into
 * four 512-bit registers, then two tokens at a time (the weights loaded
 * once for both), vpmaddubsw + vpdpwssd over 64 values per step; the lane
 * sums equal the AVX2 ones, so the block end (kq_tile_end) is the vec_dot's.
 */
KQ_INLINE void tile_avx512(const kq_prep *restrict p, const mz_block_q8_K *const *xs, size_t nt, float *s, int off_shift,
                           int has_min)
{
    __m512i zq[4], zsc[4];
    MZ_KQ_UNROLL for (int m = 0; m < 4; m++) {
        zq[m] = _mm512_inserti64x4(_mm512_castsi256_si512(p->q[2 * m]), p->q[2 * m + 1], 1);
        zsc[m] = _mm512_inserti64x4(_mm512_castsi256_si512(p->sc[2 * m]), p->sc[2 * m + 1], 1);
    }
    __m256i acc[KQ_TILE_TOKENS];
    for (size_t k = 0; k < nt; k += 2) {
        const mz_block_q8_K *b0 = xs[k], *b1 = xs[k + 1 < nt ? k + 1 : k];
        __m512i a0 = _mm512_setzero_si512(), a1 = _mm512_setzero_si512();
        MZ_KQ_UNROLL for (int m = 0; m < 4; m++) {
            a0 = dot64(a0, zq[m], b0->qs + 64 * m, zsc[m]);
            a1 = dot64(a1, zq[m], b1->qs + 64 * m, zsc[m]);
        }
        acc[k] = fold512(a0);
        if (k + 1 < nt) acc[k + 1] = fold512(a1);
    }
    kq_tile_end(p, acc, xs, nt, s, off_shift, has_min);
}

/* gemm: one token (decode) 8 rows at a time (kquant_x86.h; it measured
 * faster than the 512-bit vec_dots, which serve the last rows and vec_dot
 * calls), several tokens through the tiles above. */
MZ_KQ_VEC_DOT(mz_vec_dot_q5_K_q8_K_avx512, mz_block_q5_K, block_q5_K, 1)
MZ_KQ_VEC_DOT(mz_vec_dot_q6_K_q8_K_avx512, mz_block_q6_K, block_q6_K, 0)
KQ_GEMM_TILED(mz_gemm_q2_K_q8_K_avx512, q2_K, mz_vec_dot_q2_K_q8_K_avx2, tile_avx512, 0, 1, 1)
KQ_GEMM_TILED(mz_gemm_q3_K_q8_K_avx512, q3_K, mz_vec_dot_q3_K_q8_K_avx2, tile_avx512, 2, 0, 1)
KQ_GEMM_TILED(mz_gemm_q4_K_q8_K_avx512, q4_K, mz_vec_dot_q4_K_q8_K_avx2, tile_avx512, 0, 1, 1)
KQ_GEMM_TILED(mz_gemm_q5_K_q8_K_avx512, q5_K, mz_vec_dot_q5_K_q8_K_avx512, tile_avx512, 0, 1, 1)
KQ_GEMM_TILED(mz_gemm_q6_K_q8_K_avx512, q6_K, mz_vec_dot_q6_K_q8_K_avx512, tile_avx512, 5, 0, 1)

/* x8 layout (kquant_x8_x86.h): vpdpbusd sums a scale group's products
 * exactly (at most 63 * 128 * 32 in a lane), one vpmulld by the rows'
 * scales per group. */
#define KQ8_SUFFIX avx512
#define KQ8_T 8
#define KQ8_DIRECT 0
static inline __m256i kq8_scale(__m256i v) { return v; }
static inline void kq8_dot(__m256i *acc, __m256i w, __m256i x, __m256i sc)
{
    (void)sc;
    *acc = _mm256_dpbusd_epi32(*acc, w, x);
}
#include "kquant_x8_x86.h"

#else
/* Not an x86-64 build with AVX-512 flags: nothing to compile here. */
typedef int mz_kquant_avx512_unused;
#endif
