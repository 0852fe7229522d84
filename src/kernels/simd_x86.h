/*
 * simd_x86.h — small AVX2 + F16C helpers shared by the x86 kernel
 * templates (gemm_x86.h, q5_iq4_x86.h); compiled into each includer, whose
 * flags provide the ISA.
 */
#ifndef MZ_SIMD_X86_H
#define MZ_SIMD_X86_H

#include "../core/dtype.h"

#include <immintrin.h>

/* ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)): the one horizontal sum order of
 * the canonical arithmetic. */
static inline __attribute__((always_inline)) float mz_x86_hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 32 nibbles of qs[16] as bytes in value order: low nibbles (values 0..15)
 * in the low lane, high nibbles (16..31) in the high lane. */
static inline __attribute__((always_inline)) __m256i mz_x86_nibbles(const uint8_t *qs)
{
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

static inline __attribute__((always_inline)) __m256 mz_x86_bcast_f16(const mz_f16 *p)
{
    return _mm256_set1_ps(_cvtsh_ss(*p));
}

#endif /* MZ_SIMD_X86_H */
