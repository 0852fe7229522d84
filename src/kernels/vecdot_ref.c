/*
 * vecdot_ref.c — scalar reference dot products of one weight row with one
 * activation row, n values (n % 32 == 0 for the block types).
 *
 *   F32  x F32 , F16 x F16, BF16 x BF16: sum w[i]*x[i], accumulated in double
 *       (these are references; the SIMD paths accumulate in F32 lanes).
 *   Q8_0 x Q8_0: sum_b dw_b*dx_b * sum_j qw[j]*qx[j]
 *   Q4_0 x Q8_0: sum_b dw_b*dx_b * sum_j (nib[j]-8)*qx[j]
 *   Q4_1 x Q8_1: sum_b dw_b*dx_b * sum_j nib[j]*qx[j] + mw_b*sx_b
 *       (sx = dx*sum(qx), so mw*sx is the min term of every value at once)
 * Integer sums are exact; per-block float scaling follows ggml's order.
 */
#include "kernels_impl.h"

float mz_vec_dot_f32_ref(size_t n, const void *restrict w, const void *restrict x)
{
    const float *a = w, *b = x;
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
    return (float)s;
}

float mz_vec_dot_f16_ref(size_t n, const void *restrict w, const void *restrict x)
{
    const mz_f16 *a = w, *b = x;
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)mz_f16_to_f32(a[i]) * (double)mz_f16_to_f32(b[i]);
    return (float)s;
}

float mz_vec_dot_bf16_ref(size_t n, const void *restrict w, const void *restrict x)
{
    const mz_bf16 *a = w, *b = x;
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)mz_bf16_to_f32(a[i]) * (double)mz_bf16_to_f32(b[i]);
    return (float)s;
}

float mz_vec_dot_q8_0_q8_0_ref(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK == 0);
    const mz_block_q8_0 *a = w;
    const mz_block_q8_0 *b = x;
    float s = 0.0f;
    for (size_t i = 0; i < n / MZ_QK; i++)
        s += (float)mz_block_dot_q8(a[i].qs, b[i].qs) * (mz_f16_to_f32(a[i].d) * mz_f16_to_f32(b[i].d));
    return s;
}

float mz_vec_dot_q4_0_q8_0_ref(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK == 0);
    const mz_block_q4_0 *a = w;
    const mz_block_q8_0 *b = x;
    float s = 0.0f;
    for (size_t i = 0; i < n / MZ_QK; i++)
        s += (float)mz_block_dot_q4(a[i].qs, 8, b[i].qs) * (mz_f16_to_f32(a[i].d) * mz_f16_to_f32(b[i].d));
    return s;
}

float mz_vec_dot_q4_1_q8_1_ref(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK == 0);
    const mz_block_q4_1 *a = w;
    const mz_block_q8_1 *b = x;
    float s = 0.0f;
    for (size_t i = 0; i < n / MZ_QK; i++) {
        s += (mz_f16_to_f32(a[i].d) * mz_f16_to_f32(b[i].d)) * (float)mz_block_dot_q4(a[i].qs, 0, b[i].qs) +
             mz_f16_to_f32(a[i].m) * mz_f16_to_f32(b[i].s);
    }
    return s;
}
