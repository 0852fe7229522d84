/*
 * convert.c — scalar F16 / BF16 <-> F32 conversions.
 *
 * F16: src/core/f16.h's conversions (round to nearest even, NaN quieted as
 * F16C does) under the kernels' names (kernels.h).
 *
 * BF16 is the upper half of an F32. F32 -> BF16 rounds to nearest even; NaN is
 * quieted (bit 6 of the result set), as ggml does.
 */
#include "kernels_impl.h"

#include "../core/f16.h"

float mz_f16_to_f32(mz_f16 h) { return mz_half_to_float(h); }

mz_f16 mz_f32_to_f16(float f) { return mz_float_to_half(f); }

float mz_bf16_to_f32(mz_bf16 h) { return mz_f32_from_bits((uint32_t)h << 16); }

mz_bf16 mz_f32_to_bf16(float f)
{
    uint32_t u = mz_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (mz_bf16)((u >> 16) | 64u); /* quiet NaN */
    return (mz_bf16)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

void mz_f16_to_f32_row_ref(const mz_f16 *restrict x, float *restrict y, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = mz_f16_to_f32(x[i]);
}

void mz_f32_to_f16_row_ref(const float *restrict x, mz_f16 *restrict y, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = mz_f32_to_f16(x[i]);
}

/* The row conversions sit on hot paths (KV writes, F16 weights): use F16C when
 * the active implementation has it. */
void mz_f16_to_f32_row(const mz_f16 *restrict x, float *restrict y, size_t n)
{
#if MZ_KERNELS_X86
    if (mz_kernels_active_isa() >= MZ_ISA_AVX2) {
        mz_f16_to_f32_row_avx2(x, y, n);
        return;
    }
#endif
    mz_f16_to_f32_row_ref(x, y, n);
}

void mz_f32_to_f16_row(const float *restrict x, mz_f16 *restrict y, size_t n)
{
#if MZ_KERNELS_X86
    if (mz_kernels_active_isa() >= MZ_ISA_AVX2) {
        mz_f32_to_f16_row_avx2(x, y, n);
        return;
    }
#endif
    mz_f32_to_f16_row_ref(x, y, n);
}

void mz_f32_round_f16_row(const float *restrict x, float *restrict y, size_t n)
{
#if MZ_KERNELS_X86
    if (mz_kernels_active_isa() >= MZ_ISA_AVX2) {
        mz_f32_round_f16_row_avx2(x, y, n);
        return;
    }
#endif
    mz_f16 h[256];
    for (size_t i = 0; i < n; i += MZ_ARRAY_LEN(h)) {
        const size_t len = MZ_MIN(n - i, MZ_ARRAY_LEN(h));
        mz_f32_to_f16_row(x + i, h, len);
        mz_f16_to_f32_row(h, y + i, len);
    }
}
