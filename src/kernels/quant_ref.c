/*
 * quant_ref.c — scalar reference quantizers and dequantizers.
 *
 * Rows of n values, n a multiple of the block length (32 for the Q types).
 * Per 32-value block (formulas chosen to reproduce ggml's *_ref quantizers,
 * because our outputs are compared with llama.cpp's):
 *   Q8_0: amax = max|x|, d = amax/127, q = round(x * (1/d))   x' = d*q
 *   Q8_1: as Q8_0, plus s = d * sum(q)   (d unrounded, s stored as f16)
 *   Q4_0: v = the value of largest magnitude (with its sign), d = v / -8,
 *         q = min(15, (int)(x * (1/d) + 8.5))                   x' = d*(q-8)
 *         (so v maps exactly to level 0 and the opposite extreme clips at 15)
 *   Q4_1: d = (max-min)/15, m = min,
 *         q = min(15, (int)((x-min) * (1/d) + 0.5))             x' = d*q + m
 * d (and m, s) are stored as f16; the quantizer uses the unrounded float d,
 * as ggml does. An all-zero block gets d = 0 and q = 0.
 */
#include "kernels_impl.h"

#include <math.h>
#include <string.h>

static void check_blocks(size_t n)
{
    MZ_ASSERT(n % MZ_QK == 0);
}

/* ---- dequantize ------------------------------------------------------------------ */

void mz_to_float_f32_ref(const void *restrict x, float *restrict y, size_t n)
{
    memcpy(y, x, n * sizeof(float));
}

void mz_to_float_f16_ref(const void *restrict x, float *restrict y, size_t n)
{
    mz_f16_to_f32_row_ref((const mz_f16 *)x, y, n);
}

void mz_to_float_bf16_ref(const void *restrict x, float *restrict y, size_t n)
{
    const mz_bf16 *h = x;
    for (size_t i = 0; i < n; i++) y[i] = mz_bf16_to_f32(h[i]);
}

/* One block of MZ_QK 8-bit codes with scale d (Q8_0 and Q8_1 alike). */
static void q8_block_to_float(mz_f16 d, const int8_t *qs, float *restrict y)
{
    const float s = mz_f16_to_f32(d);
    for (int j = 0; j < MZ_QK; j++) y[j] = s * (float)qs[j];
}

void mz_to_float_q8_0_ref(const void *restrict x, float *restrict y, size_t n)
{
    check_blocks(n);
    const mz_block_q8_0 *b = x;
    for (size_t i = 0; i < n / MZ_QK; i++) q8_block_to_float(b[i].d, b[i].qs, y + i * MZ_QK);
}

void mz_to_float_q8_1_ref(const void *restrict x, float *restrict y, size_t n)
{
    check_blocks(n);
    const mz_block_q8_1 *b = x;
    for (size_t i = 0; i < n / MZ_QK; i++) q8_block_to_float(b[i].d, b[i].qs, y + i * MZ_QK);
}

void mz_to_float_q4_0_ref(const void *restrict x, float *restrict y, size_t n)
{
    check_blocks(n);
    const mz_block_q4_0 *b = x;
    for (size_t i = 0; i < n / MZ_QK; i++) {
        float d = mz_f16_to_f32(b[i].d);
        float *o = y + i * MZ_QK;
        for (int j = 0; j < MZ_QK / 2; j++) {
            o[j] = d * (float)((b[i].qs[j] & 0x0f) - 8);
            o[j + MZ_QK / 2] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

void mz_to_float_q4_1_ref(const void *restrict x, float *restrict y, size_t n)
{
    check_blocks(n);
    const mz_block_q4_1 *b = x;
    for (size_t i = 0; i < n / MZ_QK; i++) {
        float d = mz_f16_to_f32(b[i].d);
        float m = mz_f16_to_f32(b[i].m);
        float *o = y + i * MZ_QK;
        for (int j = 0; j < MZ_QK / 2; j++) {
            o[j] = d * (float)(b[i].qs[j] & 0x0f) + m;
            o[j + MZ_QK / 2] = d * (float)(b[i].qs[j] >> 4) + m;
        }
    }
}

/* ---- quantize ------------------------------------------------------------------- */

void mz_quantize_f32_ref(const float *restrict x, void *restrict y, size_t n)
{
    memcpy(y, x, n * sizeof(float));
}

void mz_quantize_f16_ref(const float *restrict x, void *restrict y, size_t n)
{
    mz_f32_to_f16_row_ref(x, (mz_f16 *)y, n);
}

void mz_quantize_bf16_ref(const float *restrict x, void *restrict y, size_t n)
{
    mz_bf16 *h = y;
    for (size_t i = 0; i < n; i++) h[i] = mz_f32_to_bf16(x[i]);
}

/* Shared by Q8_0 and Q8_1: fills q, stores f16(d) in *d_out and, when s_out
 * is not NULL (Q8_1), f16(d * sum of q) in *s_out. */
static void quantize_block_q8(const float *restrict x, int8_t *restrict q, mz_f16 *d_out, mz_f16 *s_out)
{
    float amax = 0.0f;
    for (int j = 0; j < MZ_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int s = 0;
    for (int j = 0; j < MZ_QK; j++) {
        /* The clamp changes nothing for finite input; it keeps inf/NaN (or a
         * subnormal amax whose 1/d overflows) from being an undefined cast. */
        q[j] = (int8_t)fmaxf(-127.0f, fminf(127.0f, roundf(x[j] * id)));
        s += q[j];
    }
    *d_out = mz_f32_to_f16(d);
    if (s_out) *s_out = mz_f32_to_f16(d * (float)s);
}

void mz_quantize_q8_0_ref(const float *restrict x, void *restrict y, size_t n)
{
    check_blocks(n);
    mz_block_q8_0 *b = y;
    for (size_t i = 0; i < n / MZ_QK; i++) quantize_block_q8(x + i * MZ_QK, b[i].qs, &b[i].d, NULL);
}

void mz_quantize_q8_1_ref(const float *restrict x, void *restrict y, size_t n)
{
    check_blocks(n);
    mz_block_q8_1 *b = y;
    for (size_t i = 0; i < n / MZ_QK; i++) quantize_block_q8(x + i * MZ_QK, b[i].qs, &b[i].d, &b[i].s);
}

void mz_quantize_q4_0_ref(const float *restrict x, void *restrict y, size_t n)
{
    check_blocks(n);
    mz_block_q4_0 *b = y;
    for (size_t i = 0; i < n / MZ_QK; i++) {
        const float *v = x + i * MZ_QK;
        float amax = 0.0f, vmax = 0.0f; /* vmax keeps the sign of the largest magnitude */
        for (int j = 0; j < MZ_QK; j++) {
            if (fabsf(v[j]) > amax) {
                amax = fabsf(v[j]);
                vmax = v[j];
            }
        }
        const float d = vmax / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = mz_f32_to_f16(d);
        for (int j = 0; j < MZ_QK / 2; j++) {
            /* min(15, (int)t) for t in [0.5, 16.5]; clamped below too so odd
             * input (inf/NaN, overflowing 1/d) never makes an undefined cast */
            int q0 = (int)fminf(15.0f, fmaxf(0.0f, v[j] * id + 8.5f));
            int q1 = (int)fminf(15.0f, fmaxf(0.0f, v[j + MZ_QK / 2] * id + 8.5f));
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void mz_quantize_q4_1_ref(const float *restrict x, void *restrict y, size_t n)
{
    check_blocks(n);
    mz_block_q4_1 *b = y;
    for (size_t i = 0; i < n / MZ_QK; i++) {
        const float *v = x + i * MZ_QK;
        float vmin = v[0], vmax = v[0];
        for (int j = 1; j < MZ_QK; j++) {
            vmin = fminf(vmin, v[j]);
            vmax = fmaxf(vmax, v[j]);
        }
        const float d = (vmax - vmin) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = mz_f32_to_f16(d);
        b[i].m = mz_f32_to_f16(vmin);
        for (int j = 0; j < MZ_QK / 2; j++) {
            int q0 = (int)fminf(15.0f, fmaxf(0.0f, (v[j] - vmin) * id + 0.5f));
            int q1 = (int)fminf(15.0f, fmaxf(0.0f, (v[j + MZ_QK / 2] - vmin) * id + 0.5f));
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* ---- Q8_K: the activation type of the K-quants and IQ4_XS ------------------------- */

/*
 * Per 256-value block, as ggml's quantize_row_q8_K_ref: v = the value of
 * largest magnitude (with its sign), iscale = -127/v, q = min(127,
 * nearest(x * iscale)) (so v maps to -127 exactly), d = 1/iscale stored as
 * F32, bsums = the sums of each 16 q. An all-zero block gets d = 0, q = 0.
 */
void mz_quantize_q8_K_ref(const float *restrict x, void *restrict y, size_t n)
{
    MZ_ASSERT(n % MZ_QK_K == 0);
    mz_block_q8_K *b = y;
    for (size_t i = 0; i < n / MZ_QK_K; i++) {
        const float *v = x + i * MZ_QK_K;
        float amax = 0.0f, vmax = 0.0f;
        for (int j = 0; j < MZ_QK_K; j++) {
            if (fabsf(v[j]) > amax) {
                amax = fabsf(v[j]);
                vmax = v[j];
            }
        }
        if (amax == 0.0f) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        const float iscale = -127.0f / vmax;
        for (int j = 0; j < MZ_QK_K; j++) {
            /* nearest, ties to even (ggml's nearest_int); the clamp keeps
             * inf/NaN input defined */
            float t = fmaxf(-128.0f, fminf(127.0f, rintf(iscale * v[j])));
            b[i].qs[j] = (int8_t)(t == t ? t : 0.0f);
        }
        for (int g = 0; g < MZ_QK_K / 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += b[i].qs[g * 16 + j];
            b[i].bsums[g] = (int16_t)sum;
        }
        b[i].d = 1.0f / iscale;
    }
}

void mz_to_float_q8_K_ref(const void *restrict x, float *restrict y, size_t n)
{
    MZ_ASSERT(n % MZ_QK_K == 0);
    const mz_block_q8_K *b = x;
    for (size_t i = 0; i < n / MZ_QK_K; i++)
        for (int j = 0; j < MZ_QK_K; j++) y[i * MZ_QK_K + j] = b[i].d * (float)b[i].qs[j];
}
