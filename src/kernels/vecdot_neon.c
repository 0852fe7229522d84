/*
 * vecdot_neon.c — AArch64 NEON dot products (baseline ARMv8-A: no dotprod
 * or fp16-arithmetic extensions needed). Same math as vecdot_ref.c:
 *
 *   quantized blocks (32 values): the integer dot of a block is formed with
 *     vmull_s8 / vmlal_s8 (s8 x s8 -> s16; two products per s16 lane, at
 *     most 2 * 128 * 127 = 32512) and vpaddlq / vpadalq (-> 4 x s32), exact;
 *     then acc = fma(f32(dw) * f32(dx), f32(p), acc) in 4 lanes, one
 *     accumulator over the blocks in order; y = vaddvq(acc) (+ the Q4_1 min
 *     terms, summed apart as summs = fma(mw, sx, summs)).
 *   Q4_0 nibbles minus 8 and Q4_1 nibbles (0..15) fit in s8 as they are.
 *   F16: widened with vcvt_f32_f16 (FCVTL), two 4-lane accumulators per 8
 *     values, scalar tail.
 * The NEON gemm is one vec_dot per (row, token) (matmul.c), so matmul and
 * vec_dot agree bit for bit as on x86. Tiled NEON kernels are future work.
 */
#include "kernels_impl.h"

#if defined(__aarch64__) && defined(__ARM_NEON)

#include <arm_neon.h>

static inline float h2f(mz_f16 h)
{
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* 4 x s32 lane sums of w[0..32) * x[0..32) (signed bytes). */
static inline int32x4_t dot32_s8(int8x16_t w0, int8x16_t w1, int8x16_t x0, int8x16_t x1)
{
    int16x8_t p0 = vmull_s8(vget_low_s8(w0), vget_low_s8(x0));
    p0 = vmlal_s8(p0, vget_high_s8(w0), vget_high_s8(x0));
    int16x8_t p1 = vmull_s8(vget_low_s8(w1), vget_low_s8(x1));
    p1 = vmlal_s8(p1, vget_high_s8(w1), vget_high_s8(x1));
    return vpadalq_s16(vpaddlq_s16(p0), p1);
}

float mz_vec_dot_q8_0_q8_0_neon(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK == 0);
    const mz_block_q8_0 *a = w;
    const mz_block_q8_0 *b = x;
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (size_t i = 0; i < n / MZ_QK; i++) {
        const int32x4_t p = dot32_s8(vld1q_s8(a[i].qs), vld1q_s8(a[i].qs + 16), vld1q_s8(b[i].qs), vld1q_s8(b[i].qs + 16));
        acc = vfmaq_f32(acc, vdupq_n_f32(h2f(a[i].d) * h2f(b[i].d)), vcvtq_f32_s32(p));
    }
    return vaddvq_f32(acc);
}

float mz_vec_dot_q4_0_q8_0_neon(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK == 0);
    const mz_block_q4_0 *a = w;
    const mz_block_q8_0 *b = x;
    const int8x16_t eight = vdupq_n_s8(8);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (size_t i = 0; i < n / MZ_QK; i++) {
        const uint8x16_t q = vld1q_u8(a[i].qs);
        const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), eight);
        const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), eight);
        const int32x4_t p = dot32_s8(lo, hi, vld1q_s8(b[i].qs), vld1q_s8(b[i].qs + 16));
        acc = vfmaq_f32(acc, vdupq_n_f32(h2f(a[i].d) * h2f(b[i].d)), vcvtq_f32_s32(p));
    }
    return vaddvq_f32(acc);
}

float mz_vec_dot_q4_1_q8_1_neon(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK == 0);
    const mz_block_q4_1 *a = w;
    const mz_block_q8_1 *b = x;
    float32x4_t acc = vdupq_n_f32(0.0f);
    float summs = 0.0f;
    for (size_t i = 0; i < n / MZ_QK; i++) {
        const uint8x16_t q = vld1q_u8(a[i].qs);
        const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f)));
        const int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(q, 4));
        const int32x4_t p = dot32_s8(lo, hi, vld1q_s8(b[i].qs), vld1q_s8(b[i].qs + 16));
        acc = vfmaq_f32(acc, vdupq_n_f32(h2f(a[i].d) * h2f(b[i].d)), vcvtq_f32_s32(p));
        summs = __builtin_fmaf(h2f(a[i].m), h2f(b[i].s), summs);
    }
    return vaddvq_f32(acc) + summs;
}

static inline float32x4_t load_f16x4(const mz_f16 *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }

float mz_vec_dot_f16_neon(size_t n, const void *restrict w, const void *restrict x)
{
    const mz_f16 *a = w, *b = x;
    float32x4_t s0 = vdupq_n_f32(0.0f), s1 = vdupq_n_f32(0.0f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 = vfmaq_f32(s0, load_f16x4(a + i), load_f16x4(b + i));
        s1 = vfmaq_f32(s1, load_f16x4(a + i + 4), load_f16x4(b + i + 4));
    }
    float s = vaddvq_f32(vaddq_f32(s0, s1));
    for (; i < n; i++) s += h2f(a[i]) * h2f(b[i]);
    return s;
}

void mz_f16_to_f32_row_neon(const mz_f16 *restrict x, float *restrict y, size_t n)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, load_f16x4(x + i));
    for (; i < n; i++) y[i] = h2f(x[i]);
}

#else
/* Not an AArch64 build: nothing to compile here. */
typedef int mz_vecdot_neon_unused;
#endif
