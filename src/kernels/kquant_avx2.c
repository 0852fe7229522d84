/*
 * kquant_avx2.c — AVX2 dot products of the K-quants (Q2_K..Q6_K) with Q8_K.
 * Built with -mavx2 -mfma -mf16c; called only when the CPU has them.
 *
 * Per super-block, the integers of kquant_ref.c, exactly:
 *   codes as unsigned bytes (Q3_K: code + 4 in 0..7, Q6_K: code + 32 in
 *   0..63, the others as stored), times the Q8_K bytes with vpmaddubsw
 *   (pairs of u8*s8 into s16: at most 2 * 63 * 128, no saturation), times
 *   the 16-bit scale of each 16 values with vpmaddwd (-> s32); the offset
 *   of Q3_K / Q6_K comes back as off * sum_g sc[g] * bsums[g], the mins of
 *   Q2_K / Q4_K / Q5_K as sum_g m[g] * bsums[g] (vpmaddwd on the bsums).
 *   Lanes are summed to one int32 per block, then the float steps of
 *   kquant.h — so the result equals the reference bit for bit.
 */
#include "kquant.h"

#if MZ_KERNELS_X86 && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include "kquant_x86.h"

/* AVX2 tile step: the 256-bit dot products token by token, then the block
 * end of all the tile's tokens at once. */
KQ_INLINE void tile_avx2(const kq_prep *restrict p, const mz_block_q8_K *const *xs, size_t nt, float *s, int off_shift,
                         int has_min)
{
    __m256i acc[KQ_TILE_TOKENS];
    for (size_t k = 0; k < nt; k++) {
        acc[k] = _mm256_setzero_si256();
        MZ_KQ_UNROLL for (int c = 0; c < 8; c++)
            acc[k] = _mm256_add_epi32(acc[k], dot32(p->q[c], xs[k]->qs + 32 * c, p->sc[c]));
    }
    kq_tile_end(p, acc, xs, nt, s, off_shift, has_min);
}

/* Per type: the block function of MZ_KQ_VEC_DOT (unpacking straight into
 * the dot products) and the tiled gemm. */
#define KQ_AVX2_TYPE(t, off_shift, has_min)                                                              \
    KQ_INLINE mz_kq_sums block_##t(const mz_block_##t *restrict a, const mz_block_q8_K *restrict b)       \
    {                                                                                                     \
        kq_prep p;                                                                                        \
        __m256i acc = _mm256_setzero_si256();                                                             \
        prep_##t(a, &p, b, &acc);                                                                         \
        return finish(&p, acc, b, off_shift);                                                             \
    }                                                                                                     \
    MZ_KQ_VEC_DOT(mz_vec_dot_##t##_q8_K_avx2, mz_block_##t, block_##t, has_min)                          \
    KQ_GEMM_TILED(mz_gemm_##t##_q8_K_avx2, t, mz_vec_dot_##t##_q8_K_avx2, tile_avx2, off_shift, has_min, 0)

KQ_AVX2_TYPE(q2_K, 0, 1)
KQ_AVX2_TYPE(q3_K, 2, 0)
KQ_AVX2_TYPE(q4_K, 0, 1)
KQ_AVX2_TYPE(q5_K, 0, 1)
KQ_AVX2_TYPE(q6_K, 5, 0)

/* x8 layout (kquant_x8_x86.h): vpmaddubsw pairs (at most 2 * 63 * 128, no
 * saturation) times each row's scale in both s16 halves of its lane
 * (vpmaddwd), added straight into the super-block sum. */
#define KQ8_SUFFIX avx2
#define KQ8_T 8
#define KQ8_DIRECT 1
static inline __m256i kq8_scale(__m256i v) { return _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(v, 16)); }
static inline void kq8_dot(__m256i *acc, __m256i w, __m256i x, __m256i sc)
{
    *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), sc));
}
#include "kquant_x8_x86.h"

/*
 * Q8_K activations (mz_quantize_q8_K_ref's bytes exactly): the first value
 * of largest magnitude v (NaN ignored, as the reference's strict '>'),
 * iscale = -127 / v, q = max(-128, min(127, rint(iscale * x))) (vroundps to
 * nearest even is rintf in the default rounding mode; vminps returns its
 * second operand, 127, for NaN as fminf(127, NaN) does), d = 1 / iscale,
 * bsums the sums of each 16 q.
 */
void mz_from_float_q8_K_avx2(const float *restrict x, void *restrict y, size_t n)
{
    MZ_ASSERT(n % MZ_QK_K == 0);
    mz_block_q8_K *b = y;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (size_t i = 0; i < n / MZ_QK_K; i++) {
        const float *v = x + i * MZ_QK_K;
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < MZ_QK_K; j += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(v + j)), m);
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        if (amax == 0.0f) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        float vmax = 0.0f;
        for (int j = 0; j < MZ_QK_K; j += 8) {
            const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(v + j));
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (hit) {
                vmax = v[j + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -127.0f / vmax;
        const __m256 is = _mm256_set1_ps(iscale), hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-128.0f);
        for (int j = 0; j < MZ_QK_K; j += 32) {
            __m256i q[4];
            MZ_KQ_UNROLL for (int k = 0; k < 4; k++) {
                const __m256 t = _mm256_round_ps(_mm256_mul_ps(is, _mm256_loadu_ps(v + j + 8 * k)),
                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                q[k] = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(t, hi), lo));
            }
            /* sums of the two 16-value groups, in lanes 0 and 1 after hsum8 below */
            const __m256i g[8] = {_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])};
            const __m256i sums = hsum8_i32(g);
            const int32_t s0 = _mm256_extract_epi32(sums, 0), s1 = _mm256_extract_epi32(sums, 1);
            b[i].bsums[j / 16] = (int16_t)s0;
            b[i].bsums[j / 16 + 1] = (int16_t)s1;
            /* packs work per 128-bit lane; one permute restores the order */
            const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
            _mm256_storeu_si256((__m256i *)(b[i].qs + j),
                                _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
        }
        b[i].d = 1.0f / iscale;
    }
}

#else
/* Not an x86-64 build with AVX2 flags: nothing to compile here. */
typedef int mz_kquant_avx2_unused;
#endif
