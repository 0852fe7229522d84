/*
 * gemm_avx2.c — tiled matrix kernels and dot products, AVX2 + FMA + F16C.
 * The kernels and their canonical arithmetic are in gemm_x86.h; this file
 * supplies the integer block products with vpmaddubsw (u8 x s8 -> pairs
 * summed to s16) and vpmaddwd with ones (-> 8 x s32):
 *   Q8_0 x Q8_0: |w| x sign(x, w)   (|w| <= 128, |x| <= 127: no s16 saturation)
 *   Q4_0 x Q8_0: nib x x - 8 * (sum of x per lane)   (nib in 0..15)
 *   Q4_1 x Q8_1: nib x x
 * Tile: 2 weight rows x 4 tokens (8 accumulators of the 16 ymm registers).
 */
#include "kernels_impl.h"

#if MZ_KERNELS_X86 && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#define GEMM_SUFFIX avx2
#define GEMM_R 2
#define GEMM_T 4

static inline __m256i gemm_madd1(__m256i p16) { return _mm256_madd_epi16(p16, _mm256_set1_epi16(1)); }

typedef struct { __m256i abs, raw; } gemm_wq8;

static inline gemm_wq8 gemm_prep_w_s8(__m256i w) { return (gemm_wq8){_mm256_sign_epi8(w, w), w}; }
static inline __m256i gemm_prep_x_for_s8(__m256i x) { (void)x; return _mm256_setzero_si256(); }
static inline __m256i gemm_dot_s8s8(gemm_wq8 w, __m256i x, __m256i xc)
{
    (void)xc;
    return gemm_madd1(_mm256_maddubs_epi16(w.abs, _mm256_sign_epi8(x, w.raw)));
}

/* 8 * (sum of each lane's 4 x values) */
static inline __m256i gemm_prep_x_for_nib8(__m256i x) { return gemm_madd1(_mm256_maddubs_epi16(_mm256_set1_epi8(8), x)); }
static inline __m256i gemm_dot_nib8s8(__m256i nib, __m256i x, __m256i xc)
{
    return _mm256_sub_epi32(gemm_madd1(_mm256_maddubs_epi16(nib, x)), xc);
}

static inline __m256i gemm_dot_u8s8(__m256i u, __m256i s) { return gemm_madd1(_mm256_maddubs_epi16(u, s)); }

#include "gemm_x86.h"

/* x8 layout (gemm_x8_x86.h): vpmaddubsw saturates its s16 pair sums, so
 * Q8_0 goes back to s8 weights and the |w| x sign(x, w) form (as above). */
#define X8_T 4
#define X8_Q8_CORR 0
static inline __m256i x8_dot(__m256i acc, __m256i w, __m256i x)
{
    return _mm256_add_epi32(acc, gemm_madd1(_mm256_maddubs_epi16(w, x)));
}
static inline __m256i x8_prep_q8(__m256i v) { return _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)); }
static inline __m256i x8_dot_q8(__m256i acc, __m256i w, __m256i x)
{
    return _mm256_add_epi32(acc, gemm_madd1(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))));
}
/* Q5_0 fifth bits (q5_iq4_*.c) */
static inline __m256i x8_fifth(__m256i w, __m256i h, __m256i m)
{
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(h, m), m);
    return _mm256_or_si256(w, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
}
#include "gemm_x8_x86.h"

#else
typedef int mz_gemm_avx2_unused;
#endif
