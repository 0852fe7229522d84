/*
 * codec_rot.c — the rotation of the q4r codec (format: top of codec_q8.c):
 * a normalized fast Walsh–Hadamard transform of each row of d values (d a
 * power of two, 2 .. MZ_ROT_DIM_MAX) after a fixed pseudo-random sign flip
 * of each of its d positions. An outlier channel, which would stretch a
 * group's min/max and waste most of its 15 steps, is spread over all d
 * rotated values; the inverse gives it back.
 *
 * With D = diag(s_0 .. s_{d-1}), s_j = ±1 (mz_rot_signs), H the unnormalized
 * d × d Hadamard matrix (H·H = d·I) and c = f32(1 / sqrt(d)):
 *     forward  y = f16_rne(c · H · (D x))     (x: a row of f16 values)
 *     inverse  x = f16_rne(D · (c · H y))
 * H runs as log2(d) butterfly stages h = 1, 2, 4, … d/2, each mapping the
 * pair (v[j], v[j + h]) (j with bit h clear) to (v[j] + v[j + h],
 * v[j] − v[j + h]) in f32. The sign flip and the f16 conversions are exact
 * or correctly rounded, the butterflies and the one multiply by c are single
 * rounded f32 operations with no operation fused, so every kernel that keeps
 * this order (scalar here, NEON here, AVX2 and AVX-512 in their files) gives
 * the same bits (tests/unit/test_codec_q4r.c).
 *
 * c is exact for d = 4^k; for the other powers of two c·c·d differs from 1
 * by at most an f32 ulp or two, far below the f16 rounding that follows.
 *
 * Thread contract: stateless, any thread; rows may be converted in place
 * (src == dst): each row is read whole before it is written.
 */
#include "codec.h"
#include "codec_f16.h"

#include <math.h>
#include <string.h>

#if defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#endif

void mz_rot_signs(unsigned d, uint32_t *signs)
{
    for (unsigned j = 0; j < d; j++) {
        /* a fixed integer hash of the position (murmur3's finalizer): a
         * sign pattern with no structure a channel layout could line up with */
        uint32_t h = j * 0x9e3779b1u;
        h ^= h >> 16;
        h *= 0x85ebca6bu;
        h ^= h >> 13;
        h *= 0xc2b2ae35u;
        h ^= h >> 16;
        signs[j] = h & 0x80000000u;
    }
}

float mz_rot_scale(unsigned d) { return (float)(1.0 / sqrt((double)d)); }

static inline float flip(float v, uint32_t sign)
{
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    b ^= sign;
    memcpy(&v, &b, sizeof v);
    return v;
}

/* The butterfly stages h = from, 2·from, … d/2 of one row, in f32. */
void mz_rot_fwht_ref(float *v, unsigned d, unsigned from)
{
    for (unsigned h = from; h < d; h <<= 1)
        for (unsigned j0 = 0; j0 < d; j0 += 2 * h)
            for (unsigned j = j0; j < j0 + h; j++) {
                float a = v[j], b = v[j + h];
                v[j] = a + b;
                v[j + h] = a - b;
            }
}

void mz_rot_rows_ref(const mz_f16 *src, mz_f16 *dst, size_t rows, unsigned d,
                     const uint32_t *signs, bool inverse)
{
    float v[MZ_ROT_DIM_MAX];
    const float c = mz_rot_scale(d);
    for (size_t r = 0; r < rows; r++, src += d, dst += d) {
        for (unsigned j = 0; j < d; j++) {
            float x = mz_half_to_float(src[j]);
            v[j] = inverse ? x : flip(x, signs[j]);
        }
        mz_rot_fwht_ref(v, d, 1);
        for (unsigned j = 0; j < d; j++) {
            float y = v[j] * c;
            dst[j] = mz_float_to_half(inverse ? flip(y, signs[j]) : y);
        }
    }
}

#if defined(__ARM_NEON) && defined(__aarch64__)
/* In-register stage h (1 or 2) of 4 lanes: lane i takes x_i + x_{i^h} when
 * bit h of i is clear, x_{i^h} - x_i when set — the scalar pair's a + b and
 * a - b. */
static inline float32x4_t neon_stage(float32x4_t x, unsigned h)
{
    static const uint32_t hi1[4] = {0, ~0u, 0, ~0u}, hi2[4] = {0, 0, ~0u, ~0u};
    float32x4_t s = h == 1 ? vrev64q_f32(x) : vextq_f32(x, x, 2);
    return vbslq_f32(vld1q_u32(h == 1 ? hi1 : hi2), vsubq_f32(s, x), vaddq_f32(x, s));
}

void mz_rot_rows_neon(const mz_f16 *src, mz_f16 *dst, size_t rows, unsigned d,
                      const uint32_t *signs, bool inverse)
{
    if (d < 4) {
        mz_rot_rows_ref(src, dst, rows, d, signs, inverse);
        return;
    }
    float v[MZ_ROT_DIM_MAX] __attribute__((aligned(16)));
    const float32x4_t vc = vdupq_n_f32(mz_rot_scale(d));
    for (size_t r = 0; r < rows; r++, src += d, dst += d) {
        for (unsigned j = 0; j < d; j += 4) {
            float32x4_t x = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(src + j)));
            if (!inverse)
                x = vreinterpretq_f32_u32(veorq_u32(vreinterpretq_u32_f32(x), vld1q_u32(signs + j)));
            x = neon_stage(neon_stage(x, 1), 2);
            vst1q_f32(v + j, x);
        }
        for (unsigned h = 4; h < d; h <<= 1)
            for (unsigned j0 = 0; j0 < d; j0 += 2 * h)
                for (unsigned j = j0; j < j0 + h; j += 4) {
                    float32x4_t a = vld1q_f32(v + j), b = vld1q_f32(v + j + h);
                    vst1q_f32(v + j, vaddq_f32(a, b));
                    vst1q_f32(v + j + h, vsubq_f32(a, b));
                }
        for (unsigned j = 0; j < d; j += 4) {
            float32x4_t y = vmulq_f32(vld1q_f32(v + j), vc);
            if (inverse)
                y = vreinterpretq_f32_u32(veorq_u32(vreinterpretq_u32_f32(y), vld1q_u32(signs + j)));
            vst1_u16(dst + j, vreinterpret_u16_f16(vcvt_f16_f32(y)));
        }
    }
}
#endif
