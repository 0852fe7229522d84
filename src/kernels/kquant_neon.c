/*
 * kquant_neon.c — AArch64 NEON dot products of the K-quants (Q2_K..Q6_K)
 * with Q8_K, baseline ARMv8-A (no dotprod extension needed).
 *
 * Per super-block, the integers of kquant_ref.c, exactly: the codes as
 * signed bytes with the type's offset removed (Q3_K -4..3, Q6_K -32..31),
 * each 16-value group's products formed with vmull_s8 / vmlal_s8 (two
 * products per s16 lane: at most 2 * 63 * 128), widened pairwise to s32
 * (vpaddlq) and multiplied by the group's scale into an s32 accumulator
 * (vmlaq_n_s32); the mins as sum_g m[g] * bsums[g] (vmull_s16). Lanes
 * summed with vaddvq_s32, then the float steps of kquant.h, so the result
 * equals the reference (and AVX2) bit for bit.
 */
#include "kquant.h"

#if defined(__aarch64__) && defined(__ARM_NEON)

#include <arm_neon.h>

static inline float h2f(mz_f16 h)
{
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* acc + scale * (sum of q[l] * q8[l] over 16 values, in 4 s32 lanes). */
static inline int32x4_t dot16(int32x4_t acc, int8x16_t q, const int8_t *q8, int32_t scale)
{
    const int8x16_t y = vld1q_s8(q8);
    int16x8_t p = vmull_s8(vget_low_s8(q), vget_low_s8(y));
    p = vmlal_s8(p, vget_high_s8(q), vget_high_s8(y));
    return vmlaq_n_s32(acc, vpaddlq_s16(p), scale);
}

/* sum_g m[g] * bsums[g] over the 16 groups (m as 16 s16). */
static inline int32_t mins16(int16x8_t m0, int16x8_t m1, const mz_block_q8_K *b)
{
    const int16x8_t b0 = vld1q_s16(b->bsums), b1 = vld1q_s16(b->bsums + 8);
    int32x4_t s = vmull_s16(vget_low_s16(m0), vget_low_s16(b0));
    s = vmlal_s16(s, vget_high_s16(m0), vget_high_s16(b0));
    s = vmlal_s16(s, vget_low_s16(m1), vget_low_s16(b1));
    s = vmlal_s16(s, vget_high_s16(m1), vget_high_s16(b1));
    return vaddvq_s32(s);
}

/* Bits 2j..2j+1 of each byte, as 0..3 (j not a compile-time constant). */
static inline uint8x16_t field2(uint8x16_t q, int j)
{
    return vandq_u8(vshlq_u8(q, vdupq_n_s8((int8_t)(-2 * j))), vdupq_n_u8(3));
}

static inline mz_kq_sums block_q2_K(const mz_block_q2_K *restrict a, const mz_block_q8_K *restrict b)
{
    const uint8x16_t s8 = vld1q_u8(a->scales);
    const uint8x16_t mn = vshrq_n_u8(s8, 4);
    mz_kq_sums r = {.dw = h2f(a->d), .dmin = h2f(a->dmin)};
    r.summs = mins16(vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mn))), vreinterpretq_s16_u16(vmovl_u8(vget_high_u8(mn))), b);
    int32x4_t acc = vdupq_n_s32(0);
    MZ_KQ_UNROLL for (int h = 0; h < 2; h++) {
        const uint8x16_t q0 = vld1q_u8(a->qs + 32 * h), q1 = vld1q_u8(a->qs + 32 * h + 16);
        MZ_KQ_UNROLL for (int j = 0; j < 4; j++) {
            const int g = 8 * h + 2 * j;
            const int8_t *q8 = b->qs + 128 * h + 32 * j;
            acc = dot16(acc, vreinterpretq_s8_u8(field2(q0, j)), q8, a->scales[g] & 15);
            acc = dot16(acc, vreinterpretq_s8_u8(field2(q1, j)), q8 + 16, a->scales[g + 1] & 15);
        }
    }
    r.isum = vaddvq_s32(acc);
    return r;
}

static inline mz_kq_sums block_q3_K(const mz_block_q3_K *restrict a, const mz_block_q8_K *restrict b)
{
    int8_t sc[16];
    mz_kq_scales_q3_K(a->scales, sc);
    const uint8x16_t hm0 = vld1q_u8(a->hmask), hm1 = vld1q_u8(a->hmask + 16);
    const uint8x16_t four = vdupq_n_u8(4);
    const int8x16_t off = vdupq_n_s8(4);
    int32x4_t acc = vdupq_n_s32(0);
    MZ_KQ_UNROLL for (int h = 0; h < 2; h++) {
        const uint8x16_t q0 = vld1q_u8(a->qs + 32 * h), q1 = vld1q_u8(a->qs + 32 * h + 16);
        MZ_KQ_UNROLL for (int j = 0; j < 4; j++) {
            const uint8x16_t bit = vdupq_n_u8((uint8_t)(1u << (4 * h + j)));
            const int g = 8 * h + 2 * j;
            const int8_t *q8 = b->qs + 128 * h + 32 * j;
            /* code = 2-bit field + 4 * high bit - 4 */
            const uint8x16_t c0 = vorrq_u8(field2(q0, j), vandq_u8(vtstq_u8(hm0, bit), four));
            const uint8x16_t c1 = vorrq_u8(field2(q1, j), vandq_u8(vtstq_u8(hm1, bit), four));
            acc = dot16(acc, vsubq_s8(vreinterpretq_s8_u8(c0), off), q8, sc[g]);
            acc = dot16(acc, vsubq_s8(vreinterpretq_s8_u8(c1), off), q8 + 16, sc[g + 1]);
        }
    }
    const mz_kq_sums r = {.dw = h2f(a->d), .isum = vaddvq_s32(acc)};
    return r;
}

/* Q4_K and Q5_K (qh NULL for Q4_K). */
static inline mz_kq_sums block_q45(const void *blk, mz_f16 d, mz_f16 dmin, const uint8_t *restrict s12,
                                   const uint8_t *restrict qs, const uint8_t *restrict qh,
                                   const mz_block_q8_K *restrict b)
{
    (void)blk;
    uint8_t sc[8], mn[8];
    mz_kq_scales_k4(s12, sc, mn);
    /* each min covers two 16-value groups: pair the bsums first */
    const int16x8_t bs = vpaddq_s16(vld1q_s16(b->bsums), vld1q_s16(b->bsums + 8));
    const int16x8_t m = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn)));
    int32x4_t ms = vmull_s16(vget_low_s16(m), vget_low_s16(bs));
    ms = vmlal_s16(ms, vget_high_s16(m), vget_high_s16(bs));
    mz_kq_sums r = {.dw = h2f(d), .dmin = h2f(dmin), .summs = vaddvq_s32(ms)};
    const uint8x16_t m4 = vdupq_n_u8(0x0f), sixteen = vdupq_n_u8(16);
    const uint8x16_t h0 = qh ? vld1q_u8(qh) : vdupq_n_u8(0), h1 = qh ? vld1q_u8(qh + 16) : vdupq_n_u8(0);
    int32x4_t acc = vdupq_n_s32(0);
    MZ_KQ_UNROLL for (int c = 0; c < 4; c++) {
        const uint8x16_t q0 = vld1q_u8(qs + 32 * c), q1 = vld1q_u8(qs + 32 * c + 16);
        uint8x16_t lo0 = vandq_u8(q0, m4), lo1 = vandq_u8(q1, m4);
        uint8x16_t hi0 = vshrq_n_u8(q0, 4), hi1 = vshrq_n_u8(q1, 4);
        if (qh) {
            const uint8x16_t bl = vdupq_n_u8((uint8_t)(1u << (2 * c))), bh = vdupq_n_u8((uint8_t)(2u << (2 * c)));
            lo0 = vorrq_u8(lo0, vandq_u8(vtstq_u8(h0, bl), sixteen));
            lo1 = vorrq_u8(lo1, vandq_u8(vtstq_u8(h1, bl), sixteen));
            hi0 = vorrq_u8(hi0, vandq_u8(vtstq_u8(h0, bh), sixteen));
            hi1 = vorrq_u8(hi1, vandq_u8(vtstq_u8(h1, bh), sixteen));
        }
        const int8_t *q8 = b->qs + 64 * c;
        acc = dot16(acc, vreinterpretq_s8_u8(lo0), q8, sc[2 * c]);
        acc = dot16(acc, vreinterpretq_s8_u8(lo1), q8 + 16, sc[2 * c]);
        acc = dot16(acc, vreinterpretq_s8_u8(hi0), q8 + 32, sc[2 * c + 1]);
        acc = dot16(acc, vreinterpretq_s8_u8(hi1), q8 + 48, sc[2 * c + 1]);
    }
    r.isum = vaddvq_s32(acc);
    return r;
}

MZ_KQ_Q45_BLOCKS(block_q45)

static inline mz_kq_sums block_q6_K(const mz_block_q6_K *restrict a, const mz_block_q8_K *restrict b)
{
    const uint8x16_t m4 = vdupq_n_u8(0x0f), m3 = vdupq_n_u8(3);
    const int8x16_t off = vdupq_n_s8(32);
    int32x4_t acc = vdupq_n_s32(0);
    MZ_KQ_UNROLL for (int h = 0; h < 2; h++)
        MZ_KQ_UNROLL for (int k = 0; k < 4; k++)
            MZ_KQ_UNROLL for (int half = 0; half < 2; half++) {
                const uint8x16_t ql = vld1q_u8(a->ql + 64 * h + 32 * (k & 1) + 16 * half);
                const uint8x16_t qh = vld1q_u8(a->qh + 32 * h + 16 * half);
                const uint8x16_t lo = k < 2 ? vandq_u8(ql, m4) : vshrq_n_u8(ql, 4);
                const uint8x16_t hi = vandq_u8(vshlq_u8(qh, vdupq_n_s8((int8_t)(-2 * k))), m3);
                const int8x16_t q = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, vshlq_n_u8(hi, 4))), off);
                const int g = 8 * h + 2 * k + half;
                acc = dot16(acc, q, b->qs + 16 * g, a->scales[g]);
            }
    const mz_kq_sums r = {.dw = h2f(a->d), .isum = vaddvq_s32(acc)};
    return r;
}

MZ_KQ_VEC_DOT(mz_vec_dot_q2_K_q8_K_neon, mz_block_q2_K, block_q2_K, 1)
MZ_KQ_VEC_DOT(mz_vec_dot_q3_K_q8_K_neon, mz_block_q3_K, block_q3_K, 0)
MZ_KQ_VEC_DOT(mz_vec_dot_q4_K_q8_K_neon, mz_block_q4_K, block_q4_K, 1)
MZ_KQ_VEC_DOT(mz_vec_dot_q5_K_q8_K_neon, mz_block_q5_K, block_q5_K, 1)
MZ_KQ_VEC_DOT(mz_vec_dot_q6_K_q8_K_neon, mz_block_q6_K, block_q6_K, 0)

#else
/* Not an AArch64 build: nothing to compile here. */
typedef int mz_kquant_neon_unused;
#endif
