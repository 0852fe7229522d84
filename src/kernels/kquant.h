/*
 * kquant.h — what the K-quant kernels of every ISA share (kquant_ref.c,
 * kquant_avx2.c, kquant_avx512.c, kquant_neon.c): the scale unpacking of
 * the packed 12-byte scale fields and the float steps that close a
 * super-block of a dot product. Keeping these in one place is what makes
 * every ISA's dot product equal the reference bit for bit.
 * Little-endian only (x86-64, AArch64), like the block layouts themselves.
 */
#ifndef MZ_KQUANT_H
#define MZ_KQUANT_H

#include "kernels_impl.h"

#include <math.h>
#include <string.h>

/* The eight 6-bit scales and mins of Q4_K / Q5_K (32-value sub-blocks). */
static inline void mz_kq_scales_k4(const uint8_t *restrict s12, uint8_t sc[8], uint8_t mn[8])
{
    uint32_t w[3], o[4];
    memcpy(w, s12, 12);
    o[0] = w[0] & 0x3f3f3f3fu;                                          /* scales 0..3 */
    o[1] = (w[2] & 0x0f0f0f0fu) | ((w[0] >> 2) & 0x30303030u);          /* scales 4..7 */
    o[2] = w[1] & 0x3f3f3f3fu;                                          /* mins 0..3 */
    o[3] = ((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u);   /* mins 4..7 */
    memcpy(sc, o, 8);
    memcpy(mn, o + 2, 8);
}

/* The sixteen scales of Q3_K (16-value groups), 6-bit codes minus 32. */
static inline void mz_kq_scales_q3_K(const uint8_t *restrict s12, int8_t sc[16])
{
    uint32_t w[3], o[4];
    memcpy(w, s12, 12);
    o[0] = (w[0] & 0x0f0f0f0fu) | ((w[2] & 0x03030303u) << 4);
    o[1] = (w[1] & 0x0f0f0f0fu) | (((w[2] >> 2) & 0x03030303u) << 4);
    o[2] = ((w[0] >> 4) & 0x0f0f0f0fu) | (((w[2] >> 4) & 0x03030303u) << 4);
    o[3] = ((w[1] >> 4) & 0x0f0f0f0fu) | (((w[2] >> 6) & 0x03030303u) << 4);
    uint8_t u[16];
    memcpy(u, o, 16);
    for (int g = 0; g < 16; g++) sc[g] = (int8_t)(u[g] - 32);
}

/* Adds one super-block to a dot product: dx = the Q8_K block's d, dw / dmin
 * the weight block's scales as F32, isum / summs its exact integer sums
 * (summs unused without mins). The reference order; fmaf is exact-rounded
 * on every target, so these bits do not depend on the ISA. */
static inline float mz_kq_block_end(float s, float dx, float dw, int32_t isum)
{
    return fmaf(dx * dw, (float)isum, s);
}
static inline float mz_kq_block_end_min(float s, float dx, float dw, float dmin, int32_t isum, int32_t summs)
{
    return fmaf(-(dx * dmin), (float)summs, fmaf(dx * dw, (float)isum, s));
}

#endif /* MZ_KQUANT_H */
