/*
 * codec_f16.h — private bit-exact IEEE binary16 <-> binary32 conversions for
 * the codec files (kept here so the codecs do not depend on src/kernels), and
 * the q8 / q4 step shared by every kernel of those codecs.
 *
 * mz_cdc_f32_to_f16 rounds to nearest, ties to even, exactly as the F16C
 * instruction vcvtps2ph with rounding mode 0 (and NEON vcvt_f16_f32 under the
 * default FPCR): overflow gives ±inf, NaN stays NaN (quieted), f32 values
 * below half the smallest f16 subnormal give ±0.
 */
#ifndef MZ_CODEC_F16_H
#define MZ_CODEC_F16_H

#include <stdint.h>
#include <string.h>

static inline float mz_cdc_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13); /* inf / NaN */
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else {
        /* subnormal: mant * 2^-24, normalize */
        int shift = 0;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            shift++;
        }
        mant &= 0x3ffu;
        bits = sign | ((uint32_t)(113 - shift) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint16_t mz_cdc_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) { /* inf or NaN */
        if (ax == 0x7f800000u) return (uint16_t)(sign | 0x7c00u);
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    }
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520: inf */
    if (ax >= 0x38800000u) {                                  /* normal f16 range */
        uint32_t r = ax - 0x38000000u;                         /* rebias 127 -> 15 */
        r += 0xfffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (ax <= 0x33000000u) return sign; /* <= 2^-25: rounds to zero (tie to even) */
    uint32_t e = ax >> 23;
    uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

/* f16_to_f32(f32_to_f16(f)) for finite |f| < 65520, except that a result of
 * zero may have either sign; no conversion round trip, no loops. Normal f16
 * range: round the f32 significand to 10 bits (RNE) in place; subnormal
 * range: adding and removing 0.75 rounds to a multiple of 2^-24 (the ulp of
 * [0.5, 1)) with the FPU's own RNE. Needs strict IEEE f32 arithmetic (no
 * -ffast-math). */
static inline float mz_cdc_round_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) >= 0x38800000u) {
        x += 0xfffu + ((x >> 13) & 1u);
        x &= ~0x1fffu;
        memcpy(&f, &x, sizeof f);
        return f;
    }
    float t = f + 0.75f;
    return t - 0.75f;
}

/* The implied step of a q8 / q4 group with the given min and max (both
 * finite, max >= min) and top code `top` (255 for q8, 15 for q4):
 * (max - min) / top in f32, truncated to 16 significant bits. The truncation
 * makes q * step exact in f32 for every code q <= 255 (8 + 16 bits), so
 * min + q * step rounds once whether or not a compiler or ISA fuses the
 * multiply-add; every decode path then produces the same bits. */
static inline float mz_quant_step(float mn, float mx, unsigned top)
{
    float d = (mx - mn) / (float)top;
    uint32_t b;
    memcpy(&b, &d, sizeof b);
    b &= ~0xffu;
    memcpy(&d, &b, sizeof d);
    return d;
}

/* The q8 step: mz_quant_step with top code 255. */
static inline float mz_q8_step(float mn, float mx) { return mz_quant_step(mn, mx, 255); }

/* The q4 step: mz_quant_step with top code 15. */
static inline float mz_q4_step(float mn, float mx) { return mz_quant_step(mn, mx, 15); }

#endif /* MZ_CODEC_F16_H */
