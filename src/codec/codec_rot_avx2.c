/*
 * codec_rot_avx2.c — the q4r rotation (definition: top of codec_rot.c) with
 * AVX2 + F16C, eight lanes (compiled with -mavx2 -mfma -mf16c; called only
 * after mz_codec_cpu_has_avx2()). Same operations in the same order as
 * mz_rot_rows_ref, so the same bits: stages h = 1, 2, 4 inside a register
 * (lane i takes x_i + x_{i^h} with bit h of i clear, x_{i^h} - x_i with it
 * set), then h >= 8 across registers; no fused multiply-add anywhere.
 */
#include "codec.h"

#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>

/* Stages 1, 2, 4 of eight values. */
static inline __m256 stages_in_reg(__m256 x)
{
    __m256 s = _mm256_permute_ps(x, 0xb1); /* lanes 1 0 3 2 … */
    x = _mm256_blend_ps(_mm256_add_ps(x, s), _mm256_sub_ps(s, x), 0xaa);
    s = _mm256_permute_ps(x, 0x4e); /* lanes 2 3 0 1 … */
    x = _mm256_blend_ps(_mm256_add_ps(x, s), _mm256_sub_ps(s, x), 0xcc);
    s = _mm256_permute2f128_ps(x, x, 0x01); /* the two halves swapped */
    return _mm256_blend_ps(_mm256_add_ps(x, s), _mm256_sub_ps(s, x), 0xf0);
}

void mz_rot_rows_avx2(const mz_f16 *src, mz_f16 *dst, size_t rows, unsigned d,
                      const uint32_t *signs, bool inverse)
{
    if (d < 8) {
        mz_rot_rows_ref(src, dst, rows, d, signs, inverse);
        return;
    }
    float v[MZ_ROT_DIM_MAX] __attribute__((aligned(32)));
    const __m256 vc = _mm256_set1_ps(mz_rot_scale(d));
    for (size_t r = 0; r < rows; r++, src += d, dst += d) {
        for (unsigned j = 0; j < d; j += 8) {
            __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + j)));
            if (!inverse)
                x = _mm256_xor_ps(x, _mm256_loadu_ps((const float *)(const void *)(signs + j)));
            _mm256_store_ps(v + j, stages_in_reg(x));
        }
        for (unsigned h = 8; h < d; h <<= 1)
            for (unsigned j0 = 0; j0 < d; j0 += 2 * h)
                for (unsigned j = j0; j < j0 + h; j += 8) {
                    __m256 a = _mm256_load_ps(v + j), b = _mm256_load_ps(v + j + h);
                    _mm256_store_ps(v + j, _mm256_add_ps(a, b));
                    _mm256_store_ps(v + j + h, _mm256_sub_ps(a, b));
                }
        for (unsigned j = 0; j < d; j += 8) {
            __m256 y = _mm256_mul_ps(_mm256_load_ps(v + j), vc);
            if (inverse)
                y = _mm256_xor_ps(y, _mm256_loadu_ps((const float *)(const void *)(signs + j)));
            _mm_storeu_si128((__m128i *)(void *)(dst + j),
                             _mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
    }
}
#endif
