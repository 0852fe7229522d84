/*
 * kquant.h — what the K-quant kernels of every ISA share (kquant_ref.c,
 * kquant_avx2.c, kquant_avx512.c, kquant_neon.c): the scale unpacking of
 * the packed 12-byte scale fields and the float steps that close a
 * super-block of a dot product. Keeping these in one place is what makes
 * every ISA's dot product equal the reference bit for bit.
 * Little-endian only (x86-64, AArch64), like the block layouts themselves.
 */
#ifndef MZ_KQUANT_H
#define MZ_KQUANT_H

#include "kernels_impl.h"

#include <math.h>
#include <string.h>

/* Fully unrolls the short fixed loops over a super-block's chunks, so that
 * their shifts, masks and shuffle patterns become constants. */
#define MZ_KQ_UNROLL _Pragma("GCC unroll 8")

/* The eight 6-bit scales and mins of Q4_K / Q5_K (32-value sub-blocks) as
 * four little-endian words of bytes: o[0..1] scales 0..7, o[2..3] mins 0..7
 * (SIMD code moves the words straight into a register). */
static inline void mz_kq_scales_k4_words(const uint8_t *restrict s12, uint32_t o[4])
{
    uint32_t w[3];
    memcpy(w, s12, 12);
    o[0] = w[0] & 0x3f3f3f3fu;
    o[1] = (w[2] & 0x0f0f0f0fu) | ((w[0] >> 2) & 0x30303030u);
    o[2] = w[1] & 0x3f3f3f3fu;
    o[3] = ((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u);
}

static inline void mz_kq_scales_k4(const uint8_t *restrict s12, uint8_t sc[8], uint8_t mn[8])
{
    uint32_t o[4];
    mz_kq_scales_k4_words(s12, o);
    memcpy(sc, o, 8);
    memcpy(mn, o + 2, 8);
}

#if MZ_KERNELS_X86 && defined(__AVX2__)
#include <immintrin.h>
/* The scales and mins of a Q4_K / Q5_K block in registers: returns the
 * eight scales as s16; *mins16 = the eight mins as s16, each twice (one per
 * 16-value group, to pair with the Q8_K bsums). p = the start of the block:
 * its 16 first bytes are read, d and dmin then the 12 scale bytes (the
 * words of mz_kq_scales_k4_words, formed in one register). */
static inline __m128i mz_kq_scales_k4_x86(const void *p, __m256i *mins16)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)p);           /* . w0 w1 w2 */
    const __m128i a = _mm_shuffle_epi32(v, _MM_SHUFFLE(3, 2, 3, 1));  /* w0 w2 w1 w2 */
    const __m128i b = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 1, 1));  /* w0 w0 w1 w1 */
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)),
                                     _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i hi = _mm_and_si128(_mm_srli_epi32(b, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    const __m128i scm = _mm_or_si128(lo, hi); /* bytes: 8 scales, 8 mins */
    *mins16 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(scm, scm));
    return _mm_cvtepu8_epi16(scm);
}
#endif

/* The sixteen 6-bit scale codes of Q3_K (16-value groups; the scale is the
 * code minus 32) as four words of bytes, groups 0..15 in order. */
static inline void mz_kq_scales_q3_K_words(const uint8_t *restrict s12, uint32_t o[4])
{
    uint32_t w[3];
    memcpy(w, s12, 12);
    o[0] = (w[0] & 0x0f0f0f0fu) | ((w[2] & 0x03030303u) << 4);
    o[1] = (w[1] & 0x0f0f0f0fu) | (((w[2] >> 2) & 0x03030303u) << 4);
    o[2] = ((w[0] >> 4) & 0x0f0f0f0fu) | (((w[2] >> 4) & 0x03030303u) << 4);
    o[3] = ((w[1] >> 4) & 0x0f0f0f0fu) | (((w[2] >> 6) & 0x03030303u) << 4);
}

/* The sixteen scales of Q3_K, codes minus 32. */
static inline void mz_kq_scales_q3_K(const uint8_t *restrict s12, int8_t sc[16])
{
    uint32_t o[4];
    uint8_t u[16];
    mz_kq_scales_q3_K_words(s12, o);
    memcpy(u, o, 16);
    for (int g = 0; g < 16; g++) sc[g] = (int8_t)(u[g] - 32);
}

/* Adds one super-block to a dot product: dx = the Q8_K block's d, dw / dmin
 * the weight block's scales as F32, isum / summs its exact integer sums
 * (summs unused without mins). The reference order; fmaf is exact-rounded
 * on every target, so these bits do not depend on the ISA. */
static inline float mz_kq_block_end(float s, float dx, float dw, int32_t isum)
{
    return fmaf(dx * dw, (float)isum, s);
}
static inline float mz_kq_block_end_min(float s, float dx, float dw, float dmin, int32_t isum, int32_t summs)
{
    return fmaf(-(dx * dmin), (float)summs, fmaf(dx * dw, (float)isum, s));
}

/* What one super-block of a dot product contributes: the weight block's
 * scales as F32 and its exact integer sums (summs: the min term, 0 for the
 * types without mins). */
typedef struct {
    float dw, dmin;
    int32_t isum, summs;
} mz_kq_sums;

/* Defines the row dot product `name` (n values, n % 256 == 0) of a weight
 * block type over Q8_K from a per-block function
 *   mz_kq_sums block_fn(const block_t *w, const mz_block_q8_K *x)
 * and the float steps above: the one loop every ISA shares. */
#define MZ_KQ_VEC_DOT(name, block_t, block_fn, has_min)                                             \
    float name(size_t n, const void *restrict w, const void *restrict x)                            \
    {                                                                                               \
        MZ_ASSERT(n % MZ_QK_K == 0);                                                                \
        const block_t *a = w;                                                                       \
        const mz_block_q8_K *b = x;                                                                 \
        float s = 0.0f;                                                                             \
        for (size_t i = 0; i < n / MZ_QK_K; i++) {                                                  \
            const mz_kq_sums q = block_fn(&a[i], &b[i]);                                            \
            s = (has_min) ? mz_kq_block_end_min(s, b[i].d, q.dw, q.dmin, q.isum, q.summs)           \
                          : mz_kq_block_end(s, b[i].d, q.dw, q.isum);                               \
        }                                                                                           \
        return s;                                                                                   \
    }

/* Defines block_q4_K and block_q5_K (MZ_KQ_VEC_DOT's block functions) from
 * one function for both layouts (blk: the block itself; a file may use only
 * one of the two, hence 'unused'):
 *   mz_kq_sums q45(const void *blk, mz_f16 d, mz_f16 dmin, const uint8_t *scales12,
 *                  const uint8_t *qs, const uint8_t *qh (NULL: Q4_K), const mz_block_q8_K *x) */
#define MZ_KQ_Q45_BLOCKS(q45)                                                                       \
    __attribute__((unused)) static inline mz_kq_sums block_q4_K(const mz_block_q4_K *restrict a,     \
                                                                const mz_block_q8_K *restrict b)     \
    {                                                                                               \
        return q45(a, a->d, a->dmin, a->scales, a->qs, NULL, b);                                       \
    }                                                                                               \
    __attribute__((unused)) static inline mz_kq_sums block_q5_K(const mz_block_q5_K *restrict a,     \
                                                                const mz_block_q8_K *restrict b)     \
    {                                                                                               \
        return q45(a, a->d, a->dmin, a->scales, a->qs, a->qh, b);                                      \
    }

#endif /* MZ_KQUANT_H */
