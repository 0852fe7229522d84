/*
 * f16.h — IEEE binary16 <-> binary32, scalar and bit-exact, for every layer
 * (the kernels' row converters and tiles, the KV codecs).
 *
 * F16 is IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
 *   normal:    (-1)^s * 2^(e-15) * (1 + m/1024)      e in [1, 30]
 *   subnormal: (-1)^s * 2^-14    * (m/1024)          e = 0
 *   e = 31: inf (m = 0) or NaN.
 * F32 -> F16 rounds to nearest, ties to even, including into the subnormal
 * range and up to inf (|x| >= 65520 rounds to inf). NaN stays NaN in both
 * directions: it is quieted and keeps the top payload bits, which is what
 * F16C's vcvtps2ph / vcvtph2ps (and NEON's vcvt under the default FPCR) do,
 * so the scalar and SIMD paths agree bit for bit.
 */
#ifndef MZ_CORE_F16_H
#define MZ_CORE_F16_H

#include "dtype.h"

#include <stdint.h>
#include <string.h>

/* The bits of an F32 and back (memcpy: no aliasing rule is broken). */
static inline uint32_t mz_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float mz_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float mz_half_to_float(mz_f16 h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;

    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {
            /* Subnormal half: normalise; every one is a normal float. */
            uint32_t e = 127 - 15 + 1;
            while (!(mant & 0x400u)) {
                mant <<= 1;
                e--;
            }
            bits = sign | (e << 23) | ((mant & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        /* inf, or NaN: quieted, payload kept (as vcvtph2ps does) */
        bits = sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    return mz_f32_from_bits(bits);
}

static inline mz_f16 mz_float_to_half(float f)
{
    uint32_t u = mz_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;

    if (a >= 0x7f800000u) {
        if (a == 0x7f800000u) return (mz_f16)(sign | 0x7c00u);
        return (mz_f16)(sign | 0x7e00u | ((a & 0x7fffffu) >> 13)); /* quiet NaN */
    }
    /* 65520 is halfway between 65504 (largest half, odd mantissa) and 2^16:
     * ties-to-even sends it, and everything above, to inf. */
    if (a >= 0x477ff000u) return (mz_f16)(sign | 0x7c00u);

    uint32_t e = a >> 23;
    if (e < 113) {
        /* Result is subnormal (or zero): value in units of 2^-24 is
         * mant24 * 2^(e - 126), i.e. mant24 >> (126 - e) with rounding. */
        uint32_t shift = 126 - e;
        if (shift > 24) return (mz_f16)sign; /* below half the smallest subnormal */
        uint32_t mant24 = (a & 0x7fffffu) | 0x800000u;
        uint32_t r = mant24 >> shift;
        uint32_t rem = mant24 & ((1u << shift) - 1);
        uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (r & 1))) r++; /* may carry into the normal range: still right */
        return (mz_f16)(sign | r);
    }
    uint32_t r = ((e - 112) << 10) | ((a >> 13) & 0x3ffu);
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++; /* carry into the exponent is correct */
    return (mz_f16)(sign | r);
}

#endif /* MZ_CORE_F16_H */
