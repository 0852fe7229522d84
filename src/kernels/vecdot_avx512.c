/*
 * vecdot_avx512.c — AVX-512 F/BW/VL + VNNI dot products. Built with the
 * AVX-512 flags (CMakeLists.txt); called only when the CPU has them.
 * Same math as vecdot_ref.c:
 *
 *   quantized: two 32-value blocks per 512-bit register. vpdpbusd (u8 x s8,
 *     four products summed into each s32 lane, no intermediate saturation)
 *     replaces AVX2's vpmaddubsw + vpmaddwd. Lanes 0..7 hold block i, 8..15
 *     block i+1; one FMA with the per-block scales [d_i x8, d_i+1 x8].
 *     Signed x signed (Q8_0, Q4_0-8) uses |w| and x negated where w < 0.
 *   F32 / F16: 16-lane FMAs, two accumulators, masked tail.
 * Activation conversion (from_float) reuses the AVX2 code.
 */
#include "kernels_impl.h"

#if MZ_KERNELS_X86 && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__F16C__)

#include <immintrin.h>

static inline float h2f(mz_f16 h) { return _cvtsh_ss(h); }

/* Two 32-byte rows as one register: a in lanes 0..31, b in 32..63. */
static inline __m512i join256(__m256i a, __m256i b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}

/* Nibbles of a Q4 block in value order (low nibbles then high nibbles). */
static inline __m256i unpack_nibbles(const uint8_t *qs)
{
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

/* s32 partial sums of signed a times signed b. */
static inline __m512i dot_s8(__m512i a, __m512i b)
{
    __mmask64 neg = _mm512_movepi8_mask(a);
    __m512i bs = _mm512_mask_sub_epi8(b, neg, _mm512_setzero_si512(), b);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(a), bs);
}

/* [s0 x8, s1 x8] */
static inline __m512 scales2(float s0, float s1)
{
    return _mm512_mask_blend_ps((__mmask16)0xff00, _mm512_set1_ps(s0), _mm512_set1_ps(s1));
}

float mz_vec_dot_f32_avx512(size_t n, const void *restrict w, const void *restrict x)
{
    const float *a = w, *b = x;
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

float mz_vec_dot_f16_avx512(size_t n, const void *restrict w, const void *restrict x)
{
    const mz_f16 *a = w, *b = x;
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i))),
                             _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i))), s0);
        s1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i + 16))),
                             _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i + 16))), s1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        s0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, a + i)),
                             _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, b + i)), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

float mz_vec_dot_q8_0_q8_0_avx512(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK == 0);
    const mz_block_q8_0 *a = w;
    const mz_block_q8_0 *b = x;
    const size_t nb = n / MZ_QK;
    __m512 acc = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m512i qa = join256(_mm256_loadu_si256((const __m256i *)a[i].qs), _mm256_loadu_si256((const __m256i *)a[i + 1].qs));
        __m512i qb = join256(_mm256_loadu_si256((const __m256i *)b[i].qs), _mm256_loadu_si256((const __m256i *)b[i + 1].qs));
        __m512 s = scales2(h2f(a[i].d) * h2f(b[i].d), h2f(a[i + 1].d) * h2f(b[i + 1].d));
        acc = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(dot_s8(qa, qb)), acc);
    }
    float tail = 0.0f;
    if (i < nb) {
        /* Odd block count: the 256-bit VNNI form does the last block. */
        __m256i qa = _mm256_loadu_si256((const __m256i *)a[i].qs);
        __m256i qb = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __mmask32 neg = _mm256_movepi8_mask(qa);
        __m256i bs = _mm256_mask_sub_epi8(qb, neg, _mm256_setzero_si256(), qb);
        __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(qa), bs);
        __m512 pf = _mm512_castps256_ps512(_mm256_cvtepi32_ps(p));
        tail = h2f(a[i].d) * h2f(b[i].d) * _mm512_mask_reduce_add_ps((__mmask16)0x00ff, pf);
    }
    return _mm512_reduce_add_ps(acc) + tail;
}

float mz_vec_dot_q4_0_q8_0_avx512(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK == 0);
    const mz_block_q4_0 *a = w;
    const mz_block_q8_0 *b = x;
    const size_t nb = n / MZ_QK;
    const __m512i eight = _mm512_set1_epi8(8);
    __m512 acc = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m512i qa = _mm512_sub_epi8(join256(unpack_nibbles(a[i].qs), unpack_nibbles(a[i + 1].qs)), eight);
        __m512i qb = join256(_mm256_loadu_si256((const __m256i *)b[i].qs), _mm256_loadu_si256((const __m256i *)b[i + 1].qs));
        __m512 s = scales2(h2f(a[i].d) * h2f(b[i].d), h2f(a[i + 1].d) * h2f(b[i + 1].d));
        acc = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(dot_s8(qa, qb)), acc);
    }
    float tail = 0.0f;
    if (i < nb) {
        /* nib*y - 8*sum(y): both from vpdpbusd, no sign trick needed. */
        __m256i nib = unpack_nibbles(a[i].qs);
        __m256i qb = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), nib, qb);
        __m256i sy = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), qb);
        p = _mm256_sub_epi32(p, _mm256_slli_epi32(sy, 3));
        __m512 pf = _mm512_castps256_ps512(_mm256_cvtepi32_ps(p));
        tail = h2f(a[i].d) * h2f(b[i].d) * _mm512_mask_reduce_add_ps((__mmask16)0x00ff, pf);
    }
    return _mm512_reduce_add_ps(acc) + tail;
}

float mz_vec_dot_q4_1_q8_1_avx512(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK == 0);
    const mz_block_q4_1 *a = w;
    const mz_block_q8_1 *b = x;
    const size_t nb = n / MZ_QK;
    __m512 acc = _mm512_setzero_ps();
    float summs = 0.0f; /* sum of m_w * s_x */
    size_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m512i qa = join256(unpack_nibbles(a[i].qs), unpack_nibbles(a[i + 1].qs));
        __m512i qb = join256(_mm256_loadu_si256((const __m256i *)b[i].qs), _mm256_loadu_si256((const __m256i *)b[i + 1].qs));
        __m512 s = scales2(h2f(a[i].d) * h2f(b[i].d), h2f(a[i + 1].d) * h2f(b[i + 1].d));
        acc = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), qa, qb)), acc);
        summs += h2f(a[i].m) * h2f(b[i].s) + h2f(a[i + 1].m) * h2f(b[i + 1].s);
    }
    float tail = 0.0f;
    if (i < nb) {
        __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), unpack_nibbles(a[i].qs),
                                        _mm256_loadu_si256((const __m256i *)b[i].qs));
        __m512 pf = _mm512_castps256_ps512(_mm256_cvtepi32_ps(p));
        tail = h2f(a[i].d) * h2f(b[i].d) * _mm512_mask_reduce_add_ps((__mmask16)0x00ff, pf) +
               h2f(a[i].m) * h2f(b[i].s);
    }
    return _mm512_reduce_add_ps(acc) + summs + tail;
}

#else
/* Not an x86-64 build with AVX-512 flags: nothing to compile here. */
typedef int mz_vecdot_avx512_unused;
#endif
