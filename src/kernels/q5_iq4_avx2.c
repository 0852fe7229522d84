/*
 * q5_iq4_avx2.c — Q5_0, Q5_1, IQ4_NL and IQ4_XS tiles and dot products,
 * AVX2 + FMA + F16C (kernels and canonical arithmetic in q5_iq4_x86.h).
 * Integer block products with vpmaddubsw (u8 x s8, adjacent pairs summed to
 * s16) and vpmaddwd with ones (-> 8 x s32), all exact:
 *   Q5_0: q5 x x - 16 * (sum of x per lane)    (q5 in 0..31: pairs <= 7874)
 *   Q5_1: q5 x x
 *   IQ4:  |w| x sign(x, w)                      (|w| <= 127, |x| <= 127)
 * Tile: 2 weight rows x 4 tokens (8 accumulators of the 16 ymm registers).
 */
#include "kernels_impl.h"

#if MZ_KERNELS_X86 && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#define QX_SUFFIX avx2
#define QX_R 2
#define QX_T 4
#define QX_IQ4_BIAS 0

static inline __m256i qx_madd1(__m256i p16) { return _mm256_madd_epi16(p16, _mm256_set1_epi16(1)); }

/* Byte i takes byte i / 8 of qh (pshufb works per 128-bit lane, and each
 * lane holds all 4 bytes), then is all ones iff bit i % 8 is set. */
static inline __m256i qx_hbits(uint32_t qh)
{
    const __m256i shuf = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
    const __m256i others = _mm256_set1_epi64x((long long)0x7fbfdfeff7fbfdfeULL); /* all bits but i % 8 */
    return _mm256_cmpeq_epi8(_mm256_or_si256(bytes, others), _mm256_set1_epi8(-1));
}

static inline __m256i qx_prep_q5_0(__m256i x) { return qx_madd1(_mm256_maddubs_epi16(_mm256_set1_epi8(16), x)); }
static inline __m256i qx_dot_q5_0(__m256i u, __m256i x, __m256i c)
{
    return _mm256_sub_epi32(qx_madd1(_mm256_maddubs_epi16(u, x)), c);
}
static inline __m256i qx_dot_q5_1(__m256i u, __m256i x) { return qx_madd1(_mm256_maddubs_epi16(u, x)); }
static inline __m256i qx_prep_iq4(__m256i x) { return x; }
static inline __m256i qx_dot_iq4(__m256i w, __m256i x, __m256i c)
{
    (void)c;
    return qx_madd1(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)));
}

#include "q5_iq4_x86.h"

#else
typedef int mz_q5_iq4_avx2_unused;
#endif
