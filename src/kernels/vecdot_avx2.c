/*
 * vecdot_avx2.c — AVX2 + FMA + F16C dot products and activation conversions.
 * Built with -mavx2 -mfma -mf16c; called only when the CPU has all three
 * (dispatch.c). Same math as vecdot_ref.c / quant_ref.c:
 *
 *   quantized blocks (32 values): the integer dot of one block is
 *     vpmaddubsw (u8 x s8 -> pairs summed to s16) then vpmaddwd with ones
 *     (-> 8 x s32), converted to float and FMA'd with dw*dx into 8 lanes.
 *   vpmaddubsw needs an unsigned operand: for signed x signed (Q8_0, Q4_0 after
 *     subtracting 8) we use |w| and sign(x, w) (the product is unchanged).
 *     |w| <= 128 and |x| <= 127 keep each pair sum within s16.
 *   Q4_1 nibbles are already unsigned (0..15) and go in as is.
 *   F16 / BF16 / F32: widened to F32, 4 independent FMA accumulators of 8 lanes.
 *
 * Results differ from the reference only by summation order (a relative
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

/* 32 nibbles of a Q4 block as bytes: low nibbles (values 0..15) in the low
 * lane, high nibbles (values 16..31) in the high lane — the Q8 value order. */
static inline __m256i unpack_nibbles(const uint8_t *qs)
{
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

/* 8 x s32 partial sums of a signed x signed 32-byte product. */
static inline __m256i dot_s8(__m256i a, __m256i b)
{
    __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* 8 x s32 partial sums of an unsigned x signed 32-byte product. */
static inline __m256i dot_u8s8(__m256i u, __m256i s)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

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

    /* Same d and 1/d as the reference, so q matches it except on exact ties. */
    const float d = max_abs / 127.0f;
    const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
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

void mz_from_float_q8_0_avx2(const float *restrict x, void *restrict y, size_t n)
{
    MZ_ASSERT(n % MZ_QK == 0);
    mz_block_q8_0 *b = y;
    for (size_t i = 0; i < n / MZ_QK; i++) {
        int sum;
        float d = quantize_block_q8(x + i * MZ_QK, b[i].qs, &sum);
        b[i].d = (mz_f16)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    }
}

void mz_from_float_q8_1_avx2(const float *restrict x, void *restrict y, size_t n)
{
    MZ_ASSERT(n % MZ_QK == 0);
    mz_block_q8_1 *b = y;
    for (size_t i = 0; i < n / MZ_QK; i++) {
        int sum;
        float d = quantize_block_q8(x + i * MZ_QK, b[i].qs, &sum);
        b[i].d = (mz_f16)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        b[i].s = (mz_f16)_cvtss_sh(d * (float)sum, _MM_FROUND_TO_NEAREST_INT);
    }
}

/* ---- float dot products ---------------------------------------------------------- */

float mz_vec_dot_f32_avx2(size_t n, const void *restrict w, const void *restrict x)
{
    const float *a = w, *b = x;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static inline __m256 load_f16x8(const mz_f16 *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

float mz_vec_dot_f16_avx2(size_t n, const void *restrict w, const void *restrict x)
{
    const mz_f16 *a = w, *b = x;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(load_f16x8(a + i), load_f16x8(b + i), s0);
        s1 = _mm256_fmadd_ps(load_f16x8(a + i + 8), load_f16x8(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(load_f16x8(a + i + 16), load_f16x8(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(load_f16x8(a + i + 24), load_f16x8(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(load_f16x8(a + i), load_f16x8(b + i), s0);
    float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) s += h2f(a[i]) * h2f(b[i]);
    return s;
}

/* BF16 -> F32 is a 16-bit left shift of the bits. */
static inline __m256 load_bf16x8(const mz_bf16 *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

float mz_vec_dot_bf16_avx2(size_t n, const void *restrict w, const void *restrict x)
{
    const mz_bf16 *a = w, *b = x;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(load_bf16x8(a + i), load_bf16x8(b + i), s0);
        s1 = _mm256_fmadd_ps(load_bf16x8(a + i + 8), load_bf16x8(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(load_bf16x8(a + i + 16), load_bf16x8(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(load_bf16x8(a + i + 24), load_bf16x8(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(load_bf16x8(a + i), load_bf16x8(b + i), s0);
    float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) s += mz_bf16_to_f32(a[i]) * mz_bf16_to_f32(b[i]);
    return s;
}

/* ---- quantized dot products ------------------------------------------------------- */

float mz_vec_dot_q8_0_q8_0_avx2(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK == 0);
    const mz_block_q8_0 *a = w;
    const mz_block_q8_0 *b = x;
    const size_t nb = n / MZ_QK;
    /* Two accumulators so consecutive blocks' FMAs do not wait on each other. */
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m256i p0 = dot_s8(_mm256_loadu_si256((const __m256i *)a[i].qs), _mm256_loadu_si256((const __m256i *)b[i].qs));
        __m256i p1 = dot_s8(_mm256_loadu_si256((const __m256i *)a[i + 1].qs), _mm256_loadu_si256((const __m256i *)b[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d)), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i + 1].d) * h2f(b[i + 1].d)), _mm256_cvtepi32_ps(p1), acc1);
    }
    if (i < nb) {
        __m256i p0 = dot_s8(_mm256_loadu_si256((const __m256i *)a[i].qs), _mm256_loadu_si256((const __m256i *)b[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d)), _mm256_cvtepi32_ps(p0), acc0);
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

float mz_vec_dot_q4_0_q8_0_avx2(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK == 0);
    const mz_block_q4_0 *a = w;
    const mz_block_q8_0 *b = x;
    const size_t nb = n / MZ_QK;
    const __m256i eight = _mm256_set1_epi8(8);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m256i q0 = _mm256_sub_epi8(unpack_nibbles(a[i].qs), eight);
        __m256i q1 = _mm256_sub_epi8(unpack_nibbles(a[i + 1].qs), eight);
        __m256i p0 = dot_s8(q0, _mm256_loadu_si256((const __m256i *)b[i].qs));
        __m256i p1 = dot_s8(q1, _mm256_loadu_si256((const __m256i *)b[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d)), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i + 1].d) * h2f(b[i + 1].d)), _mm256_cvtepi32_ps(p1), acc1);
    }
    if (i < nb) {
        __m256i q0 = _mm256_sub_epi8(unpack_nibbles(a[i].qs), eight);
        __m256i p0 = dot_s8(q0, _mm256_loadu_si256((const __m256i *)b[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d)), _mm256_cvtepi32_ps(p0), acc0);
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

/* [d, m] of a Q4_1 block or [d, s] of a Q8_1 block: the two f16 fields are
 * adjacent, so one 32-bit load and one vcvtph2ps convert both. */
static inline __m128 load_f16x2(const mz_f16 *p)
{
    uint32_t u;
    memcpy(&u, p, sizeof u);
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)u));
}

float mz_vec_dot_q4_1_q8_1_avx2(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK == 0);
    const mz_block_q4_1 *a = w;
    const mz_block_q8_1 *b = x;
    const size_t nb = n / MZ_QK;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    /* lane 1 accumulates m_w * s_x: the min term of every block at once */
    __m128 summs = _mm_setzero_ps();
    size_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        const __m128 p0 = _mm_mul_ps(load_f16x2(&a[i].d), load_f16x2(&b[i].d));         /* [dd, ms] */
        const __m128 p1 = _mm_mul_ps(load_f16x2(&a[i + 1].d), load_f16x2(&b[i + 1].d));
        __m256i q0 = dot_u8s8(unpack_nibbles(a[i].qs), _mm256_loadu_si256((const __m256i *)b[i].qs));
        __m256i q1 = dot_u8s8(unpack_nibbles(a[i + 1].qs), _mm256_loadu_si256((const __m256i *)b[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_broadcastss_ps(p0), _mm256_cvtepi32_ps(q0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_broadcastss_ps(p1), _mm256_cvtepi32_ps(q1), acc1);
        summs = _mm_add_ps(summs, _mm_add_ps(p0, p1));
    }
    if (i < nb) {
        const __m128 p0 = _mm_mul_ps(load_f16x2(&a[i].d), load_f16x2(&b[i].d));
        __m256i q0 = dot_u8s8(unpack_nibbles(a[i].qs), _mm256_loadu_si256((const __m256i *)b[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_broadcastss_ps(p0), _mm256_cvtepi32_ps(q0), acc0);
        summs = _mm_add_ps(summs, p0);
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1)) + _mm_cvtss_f32(_mm_shuffle_ps(summs, summs, 1));
}

#else
/* Not an x86-64 build with AVX2 flags: nothing to compile here (ISO C wants
 * at least one declaration in a translation unit). */
typedef int mz_vecdot_avx2_unused;
#endif
