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

/* The 32 five-bit values of a Q5 block, in value order. */
static void q5_values(const uint8_t qh4[4], const uint8_t qs[MZ_QK / 2], int q[MZ_QK])
{
    const uint32_t qh = mz_get_le32(qh4);
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
    mz_put_le32(qh4, qh);
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

/* Smallest and largest of n values (NaNs past the first are skipped). */
static void min_max(const float *v, int n, float *mn, float *mx)
{
    *mn = *mx = v[0];
    for (int j = 1; j < n; j++) {
        if (v[j] < *mn) *mn = v[j];
        if (v[j] > *mx) *mx = v[j];
    }
}

void mz_quantize_q5_1_ref(const float *restrict x, void *restrict y, size_t n)
{
    MZ_ASSERT(n % MZ_QK == 0);
    mz_block_q5_1 *b = y;
    for (size_t i = 0; i < n / MZ_QK; i++) {
        const float *v = x + i * MZ_QK;
        float vmin, vmax;
        min_max(v, MZ_QK, &vmin, &vmax);
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

/* sum kv[nib] * qx over one 32-value IQ4 block. */
int32_t mz_dot_iq4_block(const uint8_t *qs, const int8_t *qx)
{
    int sumi = 0;
    for (int j = 0; j < MZ_QK / 2; j++) {
        sumi += mz_kvalues_iq4nl[qs[j] & 0x0f] * qx[j];
        sumi += mz_kvalues_iq4nl[qs[j] >> 4] * qx[j + MZ_QK / 2];
    }
    return sumi;
}

/* Block b of a 32-value type's row against block b of its activation row:
 * the exact integer dot, f32(dw) * f32(dx) in *dd, and (Q5_1) the min
 * term's factors f32(mw), f32(sx) in mw[0], mw[1]. */
static int32_t block32(int type, const void *w, const void *x, size_t b, float *dd, float mw[2])
{
    if (type == MZ_DT_Q5_1) {
        const mz_block_q5_1 *a = (const mz_block_q5_1 *)w + b;
        const mz_block_q8_1 *bx = (const mz_block_q8_1 *)x + b;
        int q[MZ_QK], sumi = 0;
        q5_values(a->qh, a->qs, q);
        for (int j = 0; j < MZ_QK; j++) sumi += q[j] * bx->qs[j];
        *dd = mz_f16_to_f32(a->d) * mz_f16_to_f32(bx->d);
        mw[0] = mz_f16_to_f32(a->m);
        mw[1] = mz_f16_to_f32(bx->s);
        return sumi;
    }
    const mz_block_q8_0 *bx = (const mz_block_q8_0 *)x + b;
    mw[0] = mw[1] = 0.0f;
    if (type == MZ_DT_Q5_0) {
        const mz_block_q5_0 *a = (const mz_block_q5_0 *)w + b;
        int q[MZ_QK], sumi = 0;
        q5_values(a->qh, a->qs, q);
        for (int j = 0; j < MZ_QK; j++) sumi += (q[j] - 16) * bx->qs[j];
        *dd = mz_f16_to_f32(a->d) * mz_f16_to_f32(bx->d);
        return sumi;
    }
    const mz_block_iq4_nl *a = (const mz_block_iq4_nl *)w + b;
    *dd = mz_f16_to_f32(a->d) * mz_f16_to_f32(bx->d);
    return mz_dot_iq4_block(a->qs, bx->qs);
}

/* ggml's scalar order: s += (dw * dx) * sumi (+ mw * sx, Q5_1). */
static float vec_dot32(int type, size_t n, const void *w, const void *x)
{
    MZ_ASSERT(n % MZ_QK == 0);
    float s = 0.0f;
    for (size_t b = 0; b < n / MZ_QK; b++) {
        float dd, mw[2];
        const int32_t sumi = block32(type, w, x, b, &dd, mw);
        s += type == MZ_DT_Q5_1 ? dd * (float)sumi + mw[0] * mw[1] : dd * (float)sumi;
    }
    return s;
}

MZ_VEC_DOT_OF_KIND(mz_vec_dot_q5_0_q8_0_ref, vec_dot32, MZ_DT_Q5_0)
MZ_VEC_DOT_OF_KIND(mz_vec_dot_q5_1_q8_1_ref, vec_dot32, MZ_DT_Q5_1)
MZ_VEC_DOT_OF_KIND(mz_vec_dot_iq4_nl_q8_0_ref, vec_dot32, MZ_DT_IQ4_NL)

void mz_x8_blocks_q5_iq4_ref(int type, size_t nb, const void *w, const void *x, float *acc, float *summ)
{
    for (size_t b = 0; b < nb; b++) {
        float dd, mw[2];
        const int32_t sumi = block32(type, w, x, b, &dd, mw);
        *acc = __builtin_fmaf(dd, (float)sumi, *acc);
        if (type == MZ_DT_Q5_1) *summ = __builtin_fmaf(mw[0], mw[1], *summ);
    }
}

/* Sub-blocks in order (8 per super-block): s += (dw * dx * ls_j) * sum. */
float mz_vec_dot_iq4_xs_q8_K_ref(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK_K == 0);
    enum { NSUB = MZ_QK_K / MZ_QK };
    float s = 0.0f;
    for (size_t k = 0; k < n / MZ_QK; k++) {
        const mz_block_iq4_xs *a = (const mz_block_iq4_xs *)w + k / NSUB;
        const mz_block_q8_K *bx = (const mz_block_q8_K *)x + k / NSUB;
        const int j = (int)(k % NSUB);
        const float dd = mz_f16_to_f32(a->d) * bx->d;
        s += (dd * (float)mz_iq4_xs_scale(a, j)) * (float)mz_dot_iq4_block(a->qs + j * MZ_QK / 2, bx->qs + j * MZ_QK);
    }
    return s;
}
