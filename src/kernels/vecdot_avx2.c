/*
 * vecdot_avx2.c — AVX2 + FMA + F16C activation conversions and the F32/BF16
 * dot products (the quantized and F16 dot products and tiled kernels are in
 * gemm_avx2.c / gemm_x86.h).
 * Built with -mavx2 -mfma -mf16c; called only when the CPU has all three
 * (dispatch.c). Same math as vecdot_ref.c / quant_ref.c; F32 / BF16 rows are
 * widened to F32 with 4 independent FMA accumulators of 8 lanes.
 *
 * Dot products differ from the reference only by summation order (a relative
 * error around 1e-6 of the sum of |terms|). from_float Q8 rounds x*(1/d) to
 * nearest even (vroundps) where the reference rounds half away from zero:
 * a q may differ by one on exact ties, as between ggml's own SIMD and
 * reference quantizers. F16 conversion (vcvtps2ph) is bit-exact with the
 * scalar mz_f32_to_f16.
 */
#include "kernels_impl.h"

#if MZ_KERNELS_X86 && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <string.h>

static inline float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int hsum_epi32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

static inline float h2f(mz_f16 h) { return _cvtsh_ss(h); }

/* ---- conversions ----------------------------------------------------------------- */

void mz_f16_to_f32_row_avx2(const mz_f16 *restrict x, float *restrict y, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = h2f(x[i]);
}

void mz_f32_to_f16_row_avx2(const float *restrict x, mz_f16 *restrict y, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = (mz_f16)_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

/* mz_f32_to_f16_row_avx2 then mz_f16_to_f32_row_avx2, in registers: the same
 * F16 values, one pass over the rows. */
void mz_f32_round_f16_row_avx2(const float *restrict x, float *restrict y, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++) y[i] = h2f((mz_f16)_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

void mz_from_float_f16_avx2(const float *restrict x, void *restrict y, size_t n)
{
    mz_f32_to_f16_row_avx2(x, (mz_f16 *)y, n);
}

/* Quantizes one 32-value block to int8 (32 bytes at q); returns d, sets *sum. */
static inline float quantize_block_q8(const float *restrict x, int8_t *restrict q, int *sum)
{
    const __m256 sign_bit = _mm256_set1_ps(-0.0f);
    __m256 v0 = _mm256_loadu_ps(x);
    __m256 v1 = _mm256_loadu_ps(x + 8);
    __m256 v2 = _mm256_loadu_ps(x + 16);
    __m256 v3 = _mm256_loadu_ps(x + 24);

    __m256 amax = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign_bit, v0), _mm256_andnot_ps(sign_bit, v1)),
                                _mm256_max_ps(_mm256_andnot_ps(sign_bit, v2), _mm256_andnot_ps(sign_bit, v3)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float max_abs = _mm_cvtss_f32(m4);

    /* Same d as the reference; the multiplier is 127/amax as in ggml's SIMD
     * quantizer (the reference, like ggml's, uses 1/d: they can differ in the
     * last bit, moving a q by one near a tie). Matching llama.cpp's own
     * activations keeps our logits within its noise (test_forward_golden). */
    const float d = max_abs / 127.0f;
    const __m256 id = _mm256_set1_ps(max_abs != 0.0f ? 127.0f / max_abs : 0.0f);
    const __m256 hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
    /* Clamped like the reference: only inf/NaN or an overflowing 1/d reach the
     * bounds. (A macro: the rounding mode must be an immediate even at -O0.) */
#define Q8_ROUND(v) \
    _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_round_ps(_mm256_mul_ps((v), id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)))
    v0 = Q8_ROUND(v0);
    v1 = Q8_ROUND(v1);
    v2 = Q8_ROUND(v2);
    v3 = Q8_ROUND(v3);
#undef Q8_ROUND

    __m256i i0 = _mm256_cvtps_epi32(v0);
    __m256i i1 = _mm256_cvtps_epi32(v1);
    __m256i i2 = _mm256_cvtps_epi32(v2);
    __m256i i3 = _mm256_cvtps_epi32(v3);
    *sum = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));

    /* The packs work per 128-bit lane, leaving dwords in the order
     * i0[0:4] i1[0:4] i2[0:4] i3[0:4] i0[4:8] i1[4:8] i2[4:8] i3[4:8]; one
     * cross-lane permute restores 0..31. */
    i0 = _mm256_packs_epi32(i0, i1);
    i2 = _mm256_packs_epi32(i2, i3);
    i0 = _mm256_packs_epi16(i0, i2);
    i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, i0);
    return d;
}

/* The activation quantizers: per block of 32 the scale d (f16) and, for
 * Q8_1 (`set_s`), s = d * sum of the codes. */
#define FROM_FLOAT_Q8_AVX2(name, block_t, set_s)                                    \
    void name(const float *restrict x, void *restrict y, size_t n)                  \
    {                                                                               \
        MZ_ASSERT(n % MZ_QK == 0);                                                  \
        block_t *b = y;                                                             \
        for (size_t i = 0; i < n / MZ_QK; i++) {                                    \
            int sum;                                                                \
            float d = quantize_block_q8(x + i * MZ_QK, b[i].qs, &sum);              \
            b[i].d = (mz_f16)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);               \
            set_s;                                                                  \
        }                                                                           \
    }

FROM_FLOAT_Q8_AVX2(mz_from_float_q8_0_avx2, mz_block_q8_0, (void)sum)
FROM_FLOAT_Q8_AVX2(mz_from_float_q8_1_avx2, mz_block_q8_1,
                   b[i].s = (mz_f16)_cvtss_sh(d * (float)sum, _MM_FROUND_TO_NEAREST_INT))

/* ---- float dot products ---------------------------------------------------------- */

/* The dot product of n values of type T (load8: 8 of them as f32 lanes,
 * to_f32: one): four accumulators over 32 values, then 8, then the scalar
 * tail. */
#define FLOAT_DOT_AVX2(name, T, load8, to_f32)                                                  \
    float name(size_t n, const void *restrict w, const void *restrict x)                        \
    {                                                                                           \
        const T *a = w, *b = x;                                                                 \
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;                             \
        size_t i = 0;                                                                           \
        for (; i + 32 <= n; i += 32) {                                                          \
            s0 = _mm256_fmadd_ps(load8(a + i), load8(b + i), s0);                               \
            s1 = _mm256_fmadd_ps(load8(a + i + 8), load8(b + i + 8), s1);                       \
            s2 = _mm256_fmadd_ps(load8(a + i + 16), load8(b + i + 16), s2);                     \
            s3 = _mm256_fmadd_ps(load8(a + i + 24), load8(b + i + 24), s3);                     \
        }                                                                                       \
        for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(load8(a + i), load8(b + i), s0);        \
        float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));        \
        for (; i < n; i++) s += to_f32(a[i]) * to_f32(b[i]);                                    \
        return s;                                                                               \
    }

#define F32_AS_IS(v) (v)
FLOAT_DOT_AVX2(mz_vec_dot_f32_avx2, float, _mm256_loadu_ps, F32_AS_IS)

/* BF16 -> F32 is a 16-bit left shift of the bits. */
static inline __m256 load_bf16x8(const mz_bf16 *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

FLOAT_DOT_AVX2(mz_vec_dot_bf16_avx2, mz_bf16, load_bf16x8, mz_bf16_to_f32)

#else
/* Not an x86-64 build with AVX2 flags: nothing to compile here (ISO C wants
 * at least one declaration in a translation unit). */
typedef int mz_vecdot_avx2_unused;
#endif
