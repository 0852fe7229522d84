/*
 * q5_iq4_avx512.c — Q5_0, Q5_1, IQ4_NL and IQ4_XS tiles and dot products
 * with AVX-512 BW/VL + VNNI on 256-bit registers (kernels and canonical
 * arithmetic in q5_iq4_x86.h). vpdpbusd forms u8 x s8 products, four per
 * s32 lane, added to a start value without saturation:
 *   Q5_0: q5 x x starting from -16 * (sum of x per lane)
 *   Q5_1: q5 x x
 *   IQ4:  (grid + 128 as u8) x x starting from -128 * (sum of x per lane)
 * The lanes equal the AVX2 ones exactly, so the results are bit-identical
 * with q5_iq4_avx2.c. The fifth bits come from a mask register (vpmovm2b).
 * Tile: 4 weight rows x 4 tokens (32 registers).
 */
#include "kernels_impl.h"

#if MZ_KERNELS_X86 && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__F16C__)

#include <immintrin.h>

#define QX_SUFFIX avx512
#define QX_R 4
#define QX_T 4
#define QX_IQ4_BIAS 128

static inline __m256i qx_hbits(uint32_t qh) { return _mm256_movm_epi8((__mmask32)qh); }

/* -k * (sum of each lane's 4 x values) */
static inline __m256i qx_neg_lane_sum(__m256i x, char k)
{
    return _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(k), x));
}

static inline __m256i qx_prep_q5_0(__m256i x) { return qx_neg_lane_sum(x, 16); }
static inline __m256i qx_dot_q5_0(__m256i u, __m256i x, __m256i c) { return _mm256_dpbusd_epi32(c, u, x); }
static inline __m256i qx_dot_q5_1(__m256i u, __m256i x) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, x); }
static inline __m256i qx_prep_iq4(__m256i x) { return qx_neg_lane_sum(x, (char)0x80); }
static inline __m256i qx_dot_iq4(__m256i w, __m256i x, __m256i c) { return _mm256_dpbusd_epi32(c, w, x); }

#include "q5_iq4_x86.h"

#else
typedef int mz_q5_iq4_avx512_unused;
#endif
