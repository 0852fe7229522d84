/*
 * codec_rot_avx512.c — the q4r rotation (definition: top of codec_rot.c)
 * with AVX-512 F, sixteen lanes (called only when mz_codec_cpu_has_avx512()).
 * Same operations in the same order as mz_rot_rows_ref, so the same bits:
 * stages h = 1, 2, 4, 8 inside a register (lane i takes x_i + x_{i^h} with
 * bit h of i clear, x_{i^h} - x_i with it set), then h >= 16 across
 * registers; no fused multiply-add anywhere. Rows narrower than 16 values
 * take the AVX2 kernel.
 */
#include "codec.h"

#if defined(__AVX512F__) && defined(__F16C__)
#include <immintrin.h>

/* Stage h of sixteen values: s is x with lane i holding x_{i^h}; hi selects
 * the lanes with bit h set. */
static inline __m512 butterfly(__m512 x, __m512 s, __mmask16 hi)
{
    return _mm512_mask_blend_ps(hi, _mm512_add_ps(x, s), _mm512_sub_ps(s, x));
}

static inline __m512 stages_in_reg(__m512 x)
{
    x = butterfly(x, _mm512_permute_ps(x, 0xb1), 0xaaaa);         /* h = 1 */
    x = butterfly(x, _mm512_permute_ps(x, 0x4e), 0xcccc);         /* h = 2 */
    x = butterfly(x, _mm512_shuffle_f32x4(x, x, 0xb1), 0xf0f0);   /* h = 4: 128-bit lanes 1 0 3 2 */
    return butterfly(x, _mm512_shuffle_f32x4(x, x, 0x4e), 0xff00); /* h = 8: 2 3 0 1 */
}

void mz_rot_rows_avx512(const mz_f16 *src, mz_f16 *dst, size_t rows, unsigned d,
                        const uint32_t *signs, bool inverse)
{
    if (d < 16) {
        mz_rot_rows_avx2(src, dst, rows, d, signs, inverse);
        return;
    }
    float v[MZ_ROT_DIM_MAX] __attribute__((aligned(64)));
    const __m512 vc = _mm512_set1_ps(mz_rot_scale(d));
    for (size_t r = 0; r < rows; r++, src += d, dst += d) {
        for (unsigned j = 0; j < d; j += 16) {
            __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(src + j)));
            if (!inverse)
                x = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x),
                                                         _mm512_loadu_si512(signs + j)));
            _mm512_store_ps(v + j, stages_in_reg(x));
        }
        for (unsigned h = 16; h < d; h <<= 1)
            for (unsigned j0 = 0; j0 < d; j0 += 2 * h)
                for (unsigned j = j0; j < j0 + h; j += 16) {
                    __m512 a = _mm512_load_ps(v + j), b = _mm512_load_ps(v + j + h);
                    _mm512_store_ps(v + j, _mm512_add_ps(a, b));
                    _mm512_store_ps(v + j + h, _mm512_sub_ps(a, b));
                }
        for (unsigned j = 0; j < d; j += 16) {
            __m512 y = _mm512_mul_ps(_mm512_load_ps(v + j), vc);
            if (inverse)
                y = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(y),
                                                         _mm512_loadu_si512(signs + j)));
            _mm256_storeu_si256((__m256i *)(void *)(dst + j),
                                _mm512_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
    }
}
#endif
