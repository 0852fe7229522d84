/*
 * q5_iq4_neon.c — AArch64 NEON dot products of Q5_0, Q5_1, IQ4_NL and
 * IQ4_XS (baseline ARMv8-A: no dotprod extension needed). Same math as
 * q5_iq4_ref.c, with every weight value widened to a signed byte:
 *   Q5_0: (nibble | fifth bit << 4) - 16 in -16..15; Q5_1: 0..31;
 *   IQ4:  the grid value, looked up with vqtbl1q_s8 (-127..113).
 * A block's integer dot is exact: vmull_s8 / vmlal_s8 (two products per s16
 * lane, at most 2 * 127 * 127 = 32258) then vpaddlq / vpadalq (-> 4 x s32).
 * Floats: acc = fma(f32(dw) * f32(dx), f32(p), acc) in 4 lanes over the
 * blocks in order, y = vaddvq(acc) (+ the Q5_1 min terms, summed apart as
 * summ = fma(mw, sx, summ)); IQ4_XS: acc = fma((f32(dw) * ls_j) * dx, f32(p_j),
 * acc) per sub-block j, as on x86. The gemm is one vec_dot per (row, token)
 * (matmul.c), so matmul and vec_dot agree bit for bit.
 */
#include "kernels_impl.h"

#if defined(__aarch64__) && defined(__ARM_NEON)

#include <arm_neon.h>
#include <string.h>

static inline float qn_h2f(mz_f16 h)
{
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* 4 x s32 lane sums of the products of 32 signed bytes (w0:w1 with x0:x1). */
static inline int32x4_t qn_dot32(int8x16_t w0, int8x16_t w1, const int8_t *x)
{
    const int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
    const int16x8_t lo = vmlal_s8(vmull_s8(vget_low_s8(w0), vget_low_s8(x0)), vget_high_s8(w0), vget_high_s8(x0));
    const int16x8_t hi = vmlal_s8(vmull_s8(vget_low_s8(w1), vget_low_s8(x1)), vget_high_s8(w1), vget_high_s8(x1));
    return vpadalq_s16(vpaddlq_s16(lo), hi);
}

/* 0x10 in byte i of 16 where bit i of the 16-bit h is set. */
static inline uint8x16_t qn_fifth_bits(uint32_t h)
{
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t bytes = vcombine_u8(vdup_n_u8((uint8_t)h), vdup_n_u8((uint8_t)(h >> 8)));
    return vandq_u8(vtstq_u8(bytes, vld1q_u8(bit)), vdupq_n_u8(0x10));
}

/* The 32 five-bit values of a Q5 block minus `bias`, as two halves. */
static inline void qn_q5(const uint8_t *qh, const uint8_t *qs, int8_t bias, int8x16_t *lo, int8x16_t *hi)
{
    uint32_t h;
    memcpy(&h, qh, 4);
    const uint8x16_t q = vld1q_u8(qs);
    const uint8x16_t l = vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0f)), qn_fifth_bits(h & 0xffff));
    const uint8x16_t u = vorrq_u8(vshrq_n_u8(q, 4), qn_fifth_bits(h >> 16));
    *lo = vsubq_s8(vreinterpretq_s8_u8(l), vdupq_n_s8(bias));
    *hi = vsubq_s8(vreinterpretq_s8_u8(u), vdupq_n_s8(bias));
}

/* The grid values of 32 IQ4 nibbles, as two halves. */
static inline void qn_iq4(const uint8_t *qs, int8x16_t grid, int8x16_t *lo, int8x16_t *hi)
{
    const uint8x16_t q = vld1q_u8(qs);
    *lo = vqtbl1q_s8(grid, vandq_u8(q, vdupq_n_u8(0x0f)));
    *hi = vqtbl1q_s8(grid, vshrq_n_u8(q, 4));
}

/* The 32-value types, one kind per caller (constant after inlining). */
enum { QN_Q5_0, QN_Q5_1, QN_IQ4_NL };

static inline __attribute__((always_inline)) float qn_vec_dot32(int kind, size_t n, const void *restrict w,
                                                               const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK == 0);
    const size_t wbs = kind == QN_Q5_0 ? sizeof(mz_block_q5_0) : kind == QN_Q5_1 ? sizeof(mz_block_q5_1)
                                                                                 : sizeof(mz_block_iq4_nl);
    const size_t xbs = kind == QN_Q5_1 ? sizeof(mz_block_q8_1) : sizeof(mz_block_q8_0);
    const int8x16_t grid = vld1q_s8(mz_kvalues_iq4nl);
    float32x4_t acc = vdupq_n_f32(0.0f);
    float summ = 0.0f;
    for (size_t i = 0; i < n / MZ_QK; i++) {
        const uint8_t *bw = (const uint8_t *)w + i * wbs, *bx = (const uint8_t *)x + i * xbs;
        mz_f16 dw, dx;
        memcpy(&dw, bw, 2);
        memcpy(&dx, bx, 2);
        int8x16_t lo, hi;
        if (kind == QN_Q5_0) qn_q5(bw + 2, bw + 6, 16, &lo, &hi);
        else if (kind == QN_Q5_1) qn_q5(bw + 4, bw + 8, 0, &lo, &hi);
        else qn_iq4(bw + 2, grid, &lo, &hi);
        const int32x4_t p = qn_dot32(lo, hi, (const int8_t *)bx + (kind == QN_Q5_1 ? 4 : 2));
        acc = vfmaq_f32(acc, vdupq_n_f32(qn_h2f(dw) * qn_h2f(dx)), vcvtq_f32_s32(p));
        if (kind == QN_Q5_1) {
            mz_f16 mw, sx;
            memcpy(&mw, bw + 2, 2);
            memcpy(&sx, bx + 2, 2);
            summ = __builtin_fmaf(qn_h2f(mw), qn_h2f(sx), summ);
        }
    }
    return kind == QN_Q5_1 ? vaddvq_f32(acc) + summ : vaddvq_f32(acc);
}

MZ_VEC_DOT_OF_KIND(mz_vec_dot_q5_0_q8_0_neon, qn_vec_dot32, QN_Q5_0)
MZ_VEC_DOT_OF_KIND(mz_vec_dot_q5_1_q8_1_neon, qn_vec_dot32, QN_Q5_1)
MZ_VEC_DOT_OF_KIND(mz_vec_dot_iq4_nl_q8_0_neon, qn_vec_dot32, QN_IQ4_NL)

float mz_vec_dot_iq4_xs_q8_K_neon(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK_K == 0);
    const mz_block_iq4_xs *a = w;
    const mz_block_q8_K *b = x;
    const int8x16_t grid = vld1q_s8(mz_kvalues_iq4nl);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (size_t i = 0; i < n / MZ_QK_K; i++) {
        const float dw = qn_h2f(a[i].d);
        const float32x4_t dx = vdupq_n_f32(b[i].d);
        for (int j = 0; j < MZ_QK_K / MZ_QK; j++) {
            int8x16_t lo, hi;
            qn_iq4(a[i].qs + j * MZ_QK / 2, grid, &lo, &hi);
            const int32x4_t p = qn_dot32(lo, hi, b[i].qs + j * MZ_QK);
            const float32x4_t dl = vmulq_f32(vdupq_n_f32(dw * (float)mz_iq4_xs_scale(&a[i], j)), dx);
            acc = vfmaq_f32(acc, dl, vcvtq_f32_s32(p));
        }
    }
    return vaddvq_f32(acc);
}

#else
/* Not an AArch64 build: nothing to compile here. */
typedef int mz_q5_iq4_neon_unused;
#endif
