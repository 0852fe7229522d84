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
    KQ_GEMM_TILED(mz_gemm_##t##_q8_K_avx2, t, mz_vec_dot_##t##_q8_K_avx2, tile_avx2, off_shift, has_min)

KQ_AVX2_TYPE(q2_K, 0, 1)
KQ_AVX2_TYPE(q3_K, 2, 0)
KQ_AVX2_TYPE(q4_K, 0, 1)
KQ_AVX2_TYPE(q5_K, 0, 1)
KQ_AVX2_TYPE(q6_K, 5, 0)

#else
/* Not an x86-64 build with AVX2 flags: nothing to compile here. */
typedef int mz_kquant_avx2_unused;
#endif
