/*
 * codec_f16.h — what the KV codecs' files share about F16: the scalar
 * conversions are src/core/f16.h's (the kernels use the same ones, so a
 * codec and the forward pass round alike), plus the q8 / q4 step shared by
 * every kernel of those codecs.
 */
#ifndef MZ_CODEC_F16_H
#define MZ_CODEC_F16_H

#include "../core/f16.h"

#include <stdint.h>
#include <string.h>

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
