/*
 * q5_iq4_ref.c — scalar reference of the weight types Q5_0, Q5_1, IQ4_NL
 * and IQ4_XS: dequantization (exactly ggml's), our own deterministic
 * quantizers, and dot products with the activation types ggml pairs them
 * with, in ggml's integer formulation.
 *
 * Layouts (dtype.h). Value i (0..31) of a Q5 block has the low nibble of
 * qs[i % 16] (low half for i < 16, high half for i >= 16) and bit i of qh
 * (read as a little-endian u32) as its fifth bit. IQ4 nibbles are placed as
 * Q4_0's and index kvalues_iq4nl. IQ4_XS sub-block j (32 values) has the
 * 6-bit scale ls_j = (nibble j of scales_l) | (bits 2j..2j+1 of scales_h) << 4,
 * its values d * (ls_j - 32) * kvalues_iq4nl[nib].
 *
 * Dequantization:
 *   Q5_0   x = d * (q - 16)            Q5_1  x = d * q + m        (q in 0..31)
 *   IQ4_NL x = d * kv[nib]             IQ4_XS x = (d * (ls - 32)) * kv[nib]
 * Dot products (the block integer sums are exact; the float steps follow
 * ggml's scalar kernels):
 *   Q5_0   x Q8_0: s += (dw * dx) * sum (q - 16) * qx
 *   Q5_1   x Q8_1: s += (dw * dx) * sum q * qx + mw * sx
 *   IQ4_NL x Q8_0: s += (dw * dx) * sum kv[nib] * qx
 *   IQ4_XS x Q8_K: per super-block, dd = dw * dx; per sub-block j:
 *                  s += (dd * (ls_j - 32)) * sum kv[nib] * qx
 * Quantizers:
 *   Q5_0: v = the value of largest magnitude (with its sign), d = v / -16,
 *         q = min(31, (int)(x * (1/d) + 16.5))      (ggml's reference formula)
 *   Q5_1: d = (max - min) / 31, m = min, q = min(31, (int)((x - min) / d + 0.5))
 *   IQ4_NL: a small search over scales: with v as above, each candidate
 *         d_c = v / k (k in k_scale_steps) assigns every value the grid
 *         point nearest to x / d_c; those codes get their least-squares
 *         scale (sum x*kv / sum kv^2); the candidate of least squared
 *         error wins, and the codes are re-picked against the f16-rounded
 *         winning scale.
 *   IQ4_XS: each sub-block's scale is found as IQ4_NL's (unrounded); d =
 *         s_max / -32 for the sub-block scale s_max of largest magnitude,
 *         l = nearest(s_j / d) clamped to [-32, 31]; of l - 1, l, l + 1
 *         (within the range) the one whose codes (the nearest grid points
 *         against f16(d) * l) fit the sub-block best is stored as ls = l + 32.
 * All of them leave an all-zero block (or one with a non-finite maximum)
 * with d = 0; non-finite input never reaches an undefined float-to-int cast.
 */
#include "kernels_impl.h"

#include <math.h>
#include <string.h>

const int8_t mz_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static uint32_t load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The 32 five-bit values of a Q5 block, in value order. */
static void q5_values(const uint8_t qh4[4], const uint8_t qs[MZ_QK / 2], int q[MZ_QK])
{
    const uint32_t qh = load_u32le(qh4);
    for (int j = 0; j < MZ_QK / 2; j++) {
        q[j] = (qs[j] & 0x0f) | (int)((qh >> j) & 1u) << 4;
        q[j + MZ_QK / 2] = (qs[j] >> 4) | (int)((qh >> (j + MZ_QK / 2)) & 1u) << 4;
    }
}

/* The inverse: 32 values in 0..31 into qh and qs. */
static void q5_pack(const int q[MZ_QK], uint8_t qh4[4], uint8_t qs[MZ_QK / 2])
{
    uint32_t qh = 0;
    for (int j = 0; j < MZ_QK / 2; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0f) | (q[j + MZ_QK / 2] & 0x0f) << 4);
        qh |= (uint32_t)(q[j] >> 4 & 1) << j | (uint32_t)(q[j + MZ_QK / 2] >> 4 & 1) << (j + MZ_QK / 2);
    }
    for (int i = 0; i < 4; i++) qh4[i] = (uint8_t)(qh >> (8 * i));
}

/* ---- dequantize ------------------------------------------------------------------ */

void mz_to_float_q5_0_ref(const void *restrict x, float *restrict y, size_t n)
{
    MZ_ASSERT(n % MZ_QK == 0);
    const mz_block_q5_0 *b = x;
    for (size_t i = 0; i < n / MZ_QK; i++) {
        const float d = mz_f16_to_f32(b[i].d);
        int q[MZ_QK];
        q5_values(b[i].qh, b[i].qs, q);
        for (int j = 0; j < MZ_QK; j++) y[i * MZ_QK + j] = d * (float)(q[j] - 16);
    }
}

void mz_to_float_q5_1_ref(const void *restrict x, float *restrict y, size_t n)
{
    MZ_ASSERT(n % MZ_QK == 0);
    const mz_block_q5_1 *b = x;
    for (size_t i = 0; i < n / MZ_QK; i++) {
        const float d = mz_f16_to_f32(b[i].d), m = mz_f16_to_f32(b[i].m);
        int q[MZ_QK];
        q5_values(b[i].qh, b[i].qs, q);
        for (int j = 0; j < MZ_QK; j++) y[i * MZ_QK + j] = d * (float)q[j] + m;
    }
}

/* 32 values of IQ4 nibbles qs[16] times the scale d. */
static void iq4_block_to_float(const uint8_t *qs, float d, float *y)
{
    for (int j = 0; j < MZ_QK / 2; j++) {
        y[j] = d * (float)mz_kvalues_iq4nl[qs[j] & 0x0f];
        y[j + MZ_QK / 2] = d * (float)mz_kvalues_iq4nl[qs[j] >> 4];
    }
}

void mz_to_float_iq4_nl_ref(const void *restrict x, float *restrict y, size_t n)
{
    MZ_ASSERT(n % MZ_QK == 0);
    const mz_block_iq4_nl *b = x;
    for (size_t i = 0; i < n / MZ_QK; i++) iq4_block_to_float(b[i].qs, mz_f16_to_f32(b[i].d), y + i * MZ_QK);
}

void mz_to_float_iq4_xs_ref(const void *restrict x, float *restrict y, size_t n)
{
    MZ_ASSERT(n % MZ_QK_K == 0);
    const mz_block_iq4_xs *b = x;
    for (size_t i = 0; i < n / MZ_QK_K; i++) {
        const float d = mz_f16_to_f32(b[i].d);
        for (int j = 0; j < MZ_QK_K / MZ_QK; j++)
            iq4_block_to_float(b[i].qs + j * MZ_QK / 2, d * (float)mz_iq4_xs_scale(&b[i], j),
                               y + i * MZ_QK_K + (size_t)j * MZ_QK);
    }
}

/* ---- quantize ------------------------------------------------------------------- */

/* The value of largest magnitude, with its sign (the first of equals). */
static float signed_amax(const float *x, int n)
{
    float amax = 0.0f, v = 0.0f;
    for (int j = 0; j < n; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            v = x[j];
        }
    return v;
}

/* min(hi, (int)t) for t >= 0, 0 for NaN or negative: a defined cast. */
static int trunc_clamp(float t, int hi)
{
    return t >= 0.0f ? (int)fminf((float)hi, t) : 0;
}

void mz_quantize_q5_0_ref(const float *restrict x, void *restrict y, size_t n)
{
    MZ_ASSERT(n % MZ_QK == 0);
    mz_block_q5_0 *b = y;
    for (size_t i = 0; i < n / MZ_QK; i++) {
        const float *v = x + i * MZ_QK;
        const float d = signed_amax(v, MZ_QK) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int q[MZ_QK];
        for (int j = 0; j < MZ_QK; j++) q[j] = trunc_clamp(v[j] * id + 16.5f, 31);
        b[i].d = mz_f32_to_f16(d);
        q5_pack(q, b[i].qh, b[i].qs);
    }
}

void mz_quantize_q5_1_ref(const float *restrict x, void *restrict y, size_t n)
{
    MZ_ASSERT(n % MZ_QK == 0);
    mz_block_q5_1 *b = y;
    for (size_t i = 0; i < n / MZ_QK; i++) {
        const float *v = x + i * MZ_QK;
        float vmin = v[0], vmax = v[0];
        for (int j = 1; j < MZ_QK; j++) {
            vmin = fminf(vmin, v[j]);
            vmax = fmaxf(vmax, v[j]);
        }
        const float d = (vmax - vmin) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int q[MZ_QK];
        for (int j = 0; j < MZ_QK; j++) q[j] = trunc_clamp((v[j] - vmin) * id + 0.5f, 31);
        b[i].d = mz_f32_to_f16(d);
        b[i].m = mz_f32_to_f16(vmin);
        q5_pack(q, b[i].qh, b[i].qs);
    }
}

/* Index of the grid value nearest to t (ties to the lower one; NaN -> 0):
 * a binary search over the midpoints between neighbours. */
static int iq4_nearest(float t)
{
    int lo = 0, hi = 15;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        const float edge = 0.5f * (float)(mz_kvalues_iq4nl[mid] + mz_kvalues_iq4nl[mid + 1]);
        if (t > edge) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Divisors k of the candidate scales v / k: the largest magnitude v lands
 * on (or near) the negative end of the grid (-127) or the positive end
 * (113), the ends where it loses least. */
static const float k_scale_steps[] = {-127.0f, -124.0f, -121.0f, -118.0f, -115.0f, -112.0f, -109.0f,
                                      -133.0f, 113.0f, 110.0f, 107.0f, 117.0f};

/* Best IQ4 scale of n values (see the file comment); fills codes[n] for
 * that unrounded scale. Returns 0 for an all-zero or non-finite block. */
static float iq4_best_scale(const float *x, int n, uint8_t *codes)
{
    const float v = signed_amax(x, n);
    if (v == 0.0f || !isfinite(v)) {
        memset(codes, 8, (size_t)n); /* grid value 1: times d = 0 */
        return 0.0f;
    }
    float best_d = 0.0f, best_err = INFINITY;
    uint8_t tmp[MZ_QK];
    for (size_t c = 0; c < MZ_ARRAY_LEN(k_scale_steps); c++) {
        const float id = k_scale_steps[c] / v;
        double sxq = 0.0, sqq = 0.0, sxx = 0.0;
        for (int j = 0; j < n; j++) {
            tmp[j] = (uint8_t)iq4_nearest(x[j] * id);
            const double q = mz_kvalues_iq4nl[tmp[j]];
            sxq += (double)x[j] * q;
            sqq += q * q;
            sxx += (double)x[j] * x[j];
        }
        /* a later candidate must gain more than rounding noise: equal
         * fits (a constant block fits several) keep the first */
        const float err = (float)(sxx - sxq * sxq / sqq);
        if (err < best_err - 1e-6f * fabsf(best_err) || c == 0) {
            best_err = err;
            best_d = (float)(sxq / sqq);
            memcpy(codes, tmp, (size_t)n);
        }
    }
    return best_d;
}

/* Codes of n values against the scale d (d != 0). */
static void iq4_codes(const float *x, int n, float d, uint8_t *codes)
{
    const float id = 1.0f / d;
    for (int j = 0; j < n; j++) codes[j] = (uint8_t)iq4_nearest(x[j] * id);
}

static void iq4_pack(const uint8_t codes[MZ_QK], uint8_t qs[MZ_QK / 2])
{
    for (int j = 0; j < MZ_QK / 2; j++) qs[j] = (uint8_t)(codes[j] | codes[j + MZ_QK / 2] << 4);
}

void mz_quantize_iq4_nl_ref(const float *restrict x, void *restrict y, size_t n)
{
    MZ_ASSERT(n % MZ_QK == 0);
    mz_block_iq4_nl *b = y;
    for (size_t i = 0; i < n / MZ_QK; i++) {
        const float *v = x + i * MZ_QK;
        uint8_t codes[MZ_QK];
        const float d = iq4_best_scale(v, MZ_QK, codes);
        b[i].d = mz_f32_to_f16(d);
        const float dr = mz_f16_to_f32(b[i].d);
        if (dr != 0.0f && isfinite(dr)) iq4_codes(v, MZ_QK, dr, codes);
        iq4_pack(codes, b[i].qs);
    }
}

void mz_quantize_iq4_xs_ref(const float *restrict x, void *restrict y, size_t n)
{
    MZ_ASSERT(n % MZ_QK_K == 0);
    enum { NSUB = MZ_QK_K / MZ_QK };
    mz_block_iq4_xs *b = y;
    for (size_t i = 0; i < n / MZ_QK_K; i++) {
        const float *v = x + i * MZ_QK_K;
        uint8_t codes[MZ_QK_K];
        float s[NSUB];
        for (int j = 0; j < NSUB; j++) s[j] = iq4_best_scale(v + j * MZ_QK, MZ_QK, codes + j * MZ_QK);
        const float d = signed_amax(s, NSUB) / -32.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        memset(&b[i], 0, sizeof b[i]);
        b[i].d = mz_f32_to_f16(d);
        const float dr = mz_f16_to_f32(b[i].d);
        for (int j = 0; j < NSUB; j++) {
            /* nearest, clamped to [-32, 31] by comparisons (defined for NaN);
             * then the neighbours l - 1, l + 1 if they fit the sub-block better */
            const float t = rintf(s[j] * id);
            const int l0 = t >= 31.0f ? 31 : t > -32.0f ? (int)t : -32;
            const float *vj = v + j * MZ_QK;
            uint8_t *cj = codes + j * MZ_QK;
            int l = l0;
            float best = INFINITY;
            memset(cj, 8, MZ_QK); /* kept with l0 if no candidate is finite */
            for (int c = l0 - 1; c <= l0 + 1; c++) {
                const float dl = dr * (float)c;
                if (c < -32 || c > 31 || !isfinite(dl)) continue;
                uint8_t tmp[MZ_QK];
                if (dl != 0.0f) iq4_codes(vj, MZ_QK, dl, tmp);
                else memset(tmp, 8, sizeof tmp);
                float err = 0.0f;
                for (int k = 0; k < MZ_QK; k++) {
                    const float e = vj[k] - dl * (float)mz_kvalues_iq4nl[tmp[k]];
                    err += e * e;
                }
                if (err < best) {
                    best = err;
                    l = c;
                    memcpy(cj, tmp, MZ_QK);
                }
            }
            const int u = l + 32;
            b[i].scales_l[j / 2] |= (uint8_t)((u & 0x0f) << (4 * (j % 2)));
            b[i].scales_h |= (uint16_t)((u >> 4) << (2 * j));
            iq4_pack(cj, b[i].qs + j * MZ_QK / 2);
        }
    }
}

/* ---- dot products ---------------------------------------------------------------- */

float mz_vec_dot_q5_0_q8_0_ref(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK == 0);
    const mz_block_q5_0 *a = w;
    const mz_block_q8_0 *b = x;
    float s = 0.0f;
    for (size_t i = 0; i < n / MZ_QK; i++) {
        int q[MZ_QK], sumi = 0;
        q5_values(a[i].qh, a[i].qs, q);
        for (int j = 0; j < MZ_QK; j++) sumi += (q[j] - 16) * b[i].qs[j];
        s += (mz_f16_to_f32(a[i].d) * mz_f16_to_f32(b[i].d)) * (float)sumi;
    }
    return s;
}

float mz_vec_dot_q5_1_q8_1_ref(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK == 0);
    const mz_block_q5_1 *a = w;
    const mz_block_q8_1 *b = x;
    float s = 0.0f;
    for (size_t i = 0; i < n / MZ_QK; i++) {
        int q[MZ_QK], sumi = 0;
        q5_values(a[i].qh, a[i].qs, q);
        for (int j = 0; j < MZ_QK; j++) sumi += q[j] * b[i].qs[j];
        s += (mz_f16_to_f32(a[i].d) * mz_f16_to_f32(b[i].d)) * (float)sumi +
             mz_f16_to_f32(a[i].m) * mz_f16_to_f32(b[i].s);
    }
    return s;
}

/* sum kv[nib] * qx over one 32-value IQ4 block. */
static int iq4_block_dot(const uint8_t *qs, const int8_t *qx)
{
    int sumi = 0;
    for (int j = 0; j < MZ_QK / 2; j++) {
        sumi += mz_kvalues_iq4nl[qs[j] & 0x0f] * qx[j];
        sumi += mz_kvalues_iq4nl[qs[j] >> 4] * qx[j + MZ_QK / 2];
    }
    return sumi;
}

float mz_vec_dot_iq4_nl_q8_0_ref(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK == 0);
    const mz_block_iq4_nl *a = w;
    const mz_block_q8_0 *b = x;
    float s = 0.0f;
    for (size_t i = 0; i < n / MZ_QK; i++)
        s += (mz_f16_to_f32(a[i].d) * mz_f16_to_f32(b[i].d)) * (float)iq4_block_dot(a[i].qs, b[i].qs);
    return s;
}

float mz_vec_dot_iq4_xs_q8_K_ref(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK_K == 0);
    const mz_block_iq4_xs *a = w;
    const mz_block_q8_K *b = x;
    float s = 0.0f;
    for (size_t i = 0; i < n / MZ_QK_K; i++) {
        const float dd = mz_f16_to_f32(a[i].d) * b[i].d;
        for (int j = 0; j < MZ_QK_K / MZ_QK; j++)
            s += (dd * (float)mz_iq4_xs_scale(&a[i], j)) *
                 (float)iq4_block_dot(a[i].qs + j * MZ_QK / 2, b[i].qs + j * MZ_QK);
    }
    return s;
}
