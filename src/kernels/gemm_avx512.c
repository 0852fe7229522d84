/*
 * gemm_avx512.c — tiled matrix kernels and dot products with AVX-512 VL +
 * VNNI on 256-bit registers. The kernels and their canonical arithmetic are
 * in gemm_x86.h; this file supplies the integer block products with vpdpbusd
 * (u8 x s8, four products summed into each s32 lane, added to an initial
 * value without saturation):
 *   Q8_0 x Q8_0: (w ^ 0x80 = w + 128 as u8) x x, starting from -128 * sum(x)
 *   Q4_0 x Q8_0: nib x x, starting from -8 * sum(x)        (per lane)
 *   Q4_1 x Q8_1: nib x x
 * The lanes equal the AVX2 ones exactly, so results are bit-identical with
 * gemm_avx2.c. 256-bit registers (no 512-bit frequency penalty) but 32 of
 * them: tiles of 4 weight rows x 4 tokens. F16 is the exception: 16-lane
 * zmm FMAs (llama.cpp's F16 GEMM is 512-bit too; 8 lanes measured no faster
 * than its tinyBLAS at pp512).
 */
#include "kernels_impl.h"

#if MZ_KERNELS_X86 && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__F16C__)

#include <immintrin.h>

#define GEMM_SUFFIX avx512
#define GEMM_R 4
#define GEMM_T 4
#define GEMM_F16_ZMM 1

typedef __m256i gemm_wq8;

static inline __m256i gemm_neg_lane_sum(__m256i x, char k)
{
    return _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(k), x));
}

static inline gemm_wq8 gemm_prep_w_s8(__m256i w) { return _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80)); }
static inline __m256i gemm_prep_x_for_s8(__m256i x) { return gemm_neg_lane_sum(x, (char)0x80); }
static inline __m256i gemm_dot_s8s8(gemm_wq8 w, __m256i x, __m256i xc) { return _mm256_dpbusd_epi32(xc, w, x); }

static inline __m256i gemm_prep_x_for_nib8(__m256i x) { return gemm_neg_lane_sum(x, 8); }
static inline __m256i gemm_dot_nib8s8(__m256i nib, __m256i x, __m256i xc) { return _mm256_dpbusd_epi32(xc, nib, x); }

static inline __m256i gemm_dot_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }

#include "gemm_x86.h"

/* x8 layout (gemm_x8_x86.h): vpdpbusd is exact for u8 0..255 x s8. */
#define X8_T 4
#define X8_Q8_CORR (-128)
static inline __m256i x8_dot(__m256i acc, __m256i w, __m256i x) { return _mm256_dpbusd_epi32(acc, w, x); }
static inline __m256i x8_prep_q8(__m256i v) { return v; }
static inline __m256i x8_dot_q8(__m256i acc, __m256i w, __m256i x) { return _mm256_dpbusd_epi32(acc, w, x); }
/* Q5_0 fifth bits (q5_iq4_*.c) */
static inline __m256i x8_fifth(__m256i w, __m256i h, __m256i m)
{
    return _mm256_mask_add_epi8(w, _mm256_test_epi8_mask(h, m), w, _mm256_set1_epi8(0x10));
}
#include "gemm_x8_x86.h"

#else
typedef int mz_gemm_avx512_unused;
#endif
