/*
 * kquant_ref.c — scalar reference of the K-quant weight types Q2_K, Q3_K,
 * Q4_K, Q5_K and Q6_K (super-blocks of 256 values, layouts in dtype.h):
 * dequantization, our own quantizer, and the dot product with Q8_K.
 *
 * Every type is read through one unpacked form (kq_unpacked): the 256 codes
 * with the type's offset removed, a scale and a min per 16 values (Q4_K/Q5_K
 * repeat theirs over two 16-value groups) and the super-block's d / dmin.
 * Value v of the block dequantizes, as ggml's dequantize_row_qX_K does (same
 * float operations in the same order, no contraction: -std=c11), to
 *   (d * sc[v/16]) * q[v] - (dmin * m[v/16])    (Q2_K, Q4_K, Q5_K)
 *   (d * sc[v/16]) * q[v]                       (Q3_K, Q6_K)
 * where, per type (ggml's layouts):
 *   Q2_K  q = 2 bits: value 128h + 32j + l is bits 2j..2j+1 of qs[32h + l];
 *         sc = scales[g] & 15, m = scales[g] >> 4
 *   Q3_K  q = that 2-bit field - (bit 4h+j of hmask[l] ? 0 : 4), in -4..3;
 *         sc = 6-bit scale - 32: low 4 bits of scales[g] (g < 8) or
 *         scales[g-8] >> 4, high 2 bits at (scales[8 + g%4] >> 2*(g/4)) & 3
 *   Q4_K  value 64c + l (l < 32) is the low nibble of qs[32c + l], value
 *         64c + 32 + l its high nibble; 32-value sub-block s has a 6-bit
 *         scale and min (s < 4: scales[s] & 63, scales[s+4] & 63; else low
 *         nibble / high nibble of scales[s+4] with the top 2 bits of
 *         scales[s-4] / scales[s])
 *   Q5_K  as Q4_K plus a fifth bit: bit 2c (low nibbles) or 2c+1 (high) of qh[l]
 *   Q6_K  q = 6 bits - 32: value 128h + 32k + l takes 4 bits from
 *         ql[64h + l + 32(k&1)] (low nibble for k < 2, else high) and 2 from
 *         (qh[32h + l] >> 2k) & 3; sc = int8 scales[g]
 *
 * Dot product with Q8_K (weights w, activations x), per super-block, as
 * ggml's integer formulation: exact integer sums
 *   isum  = sum_g sc[g] * sum_{v in g} q[v] * qx[v]
 *   summs = sum_g m[g] * bsums[g]          (types with mins)
 * then s = fmaf(dx*d, isum, s), s = fmaf(-(dx*dmin), summs, s), blocks in
 * order (kquant.h). Every SIMD kernel (kquant_<isa>.c) forms the same
 * integers and the same float steps per block, so all ISAs give these bits
 * exactly.
 *
 * Quantizer (ours, deterministic; ggml's make_qkx2_quants / make_qx_quants
 * in simple form): each sub-block gets the scale (and min) that minimises
 * its squared error over a few candidate grids, each refined by least
 * squares; the super-block scales d / dmin map the largest sub-block scale
 * (min) onto the top scale code, are rounded to f16, and then each
 * sub-block's scale (and min) code is chosen among its rounded value and
 * the neighbours +-1 by the squared error of the values the stored bytes
 * decode to, the codes re-derived for each choice.
 */
#include "kquant.h"

#define KQ_GROUPS (MZ_QK_K / 16) /* 16-value groups per super-block */

typedef struct {
    int8_t q[MZ_QK_K];
    int16_t sc[KQ_GROUPS];
    int16_t m[KQ_GROUPS];
    float d, dmin;
    bool has_min;
} kq_unpacked;

/* ---- unpacking -------------------------------------------------------------------- */

static void unpack_q2_K(const mz_block_q2_K *restrict b, kq_unpacked *restrict u)
{
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) u->q[128 * h + 32 * j + l] = (int8_t)((b->qs[32 * h + l] >> (2 * j)) & 3);
    for (int g = 0; g < KQ_GROUPS; g++) {
        u->sc[g] = b->scales[g] & 15;
        u->m[g] = b->scales[g] >> 4;
    }
    u->d = mz_f16_to_f32(b->d);
    u->dmin = mz_f16_to_f32(b->dmin);
    u->has_min = true;
}

static void unpack_q3_K(const mz_block_q3_K *restrict b, kq_unpacked *restrict u)
{
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                const int lo = (b->qs[32 * h + l] >> (2 * j)) & 3;
                const int high = (b->hmask[l] >> (4 * h + j)) & 1;
                u->q[128 * h + 32 * j + l] = (int8_t)(lo - (high ? 0 : 4));
            }
    int8_t sc[KQ_GROUPS];
    mz_kq_scales_q3_K(b->scales, sc);
    for (int g = 0; g < KQ_GROUPS; g++) {
        u->sc[g] = sc[g];
        u->m[g] = 0;
    }
    u->d = mz_f16_to_f32(b->d);
    u->dmin = 0.0f;
    u->has_min = false;
}

/* Q4_K and Q5_K share the scales and the nibbles; qh is NULL for Q4_K. */
static void unpack_q45_K(mz_f16 d, mz_f16 dmin, const uint8_t *restrict s12, const uint8_t *restrict qs,
                         const uint8_t *restrict qh, kq_unpacked *restrict u)
{
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            int lo = qs[32 * c + l] & 15, hi = qs[32 * c + l] >> 4;
            if (qh) {
                lo |= ((qh[l] >> (2 * c)) & 1) << 4;
                hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
            }
            u->q[64 * c + l] = (int8_t)lo;
            u->q[64 * c + 32 + l] = (int8_t)hi;
        }
    uint8_t sc[8], m[8];
    mz_kq_scales_k4(s12, sc, m);
    for (int s = 0; s < 8; s++) {
        u->sc[2 * s] = u->sc[2 * s + 1] = sc[s];
        u->m[2 * s] = u->m[2 * s + 1] = m[s];
    }
    u->d = mz_f16_to_f32(d);
    u->dmin = mz_f16_to_f32(dmin);
    u->has_min = true;
}

static void unpack_q6_K(const mz_block_q6_K *restrict b, kq_unpacked *restrict u)
{
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) {
                const uint8_t ql = b->ql[64 * h + l + 32 * (k & 1)];
                const int lo = k < 2 ? ql & 15 : ql >> 4;
                const int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
                u->q[128 * h + 32 * k + l] = (int8_t)((lo | (hi << 4)) - 32);
            }
    for (int g = 0; g < KQ_GROUPS; g++) {
        u->sc[g] = b->scales[g];
        u->m[g] = 0;
    }
    u->d = mz_f16_to_f32(b->d);
    u->dmin = 0.0f;
    u->has_min = false;
}

/* Unpacks super-block i of a row of type t. */
static void unpack_block(int t, const void *restrict row, size_t i, kq_unpacked *restrict u)
{
    switch (t) {
    case MZ_DT_Q2_K: unpack_q2_K((const mz_block_q2_K *)row + i, u); break;
    case MZ_DT_Q3_K: unpack_q3_K((const mz_block_q3_K *)row + i, u); break;
    case MZ_DT_Q4_K: {
        const mz_block_q4_K *b = (const mz_block_q4_K *)row + i;
        unpack_q45_K(b->d, b->dmin, b->scales, b->qs, NULL, u);
        break;
    }
    case MZ_DT_Q5_K: {
        const mz_block_q5_K *b = (const mz_block_q5_K *)row + i;
        unpack_q45_K(b->d, b->dmin, b->scales, b->qs, b->qh, u);
        break;
    }
    default: unpack_q6_K((const mz_block_q6_K *)row + i, u); break;
    }
}

/* ---- dequantize -------------------------------------------------------------------- */

static void to_float_k(int t, const void *restrict x, float *restrict y, size_t n)
{
    MZ_ASSERT(n % MZ_QK_K == 0);
    kq_unpacked u;
    for (size_t i = 0; i < n / MZ_QK_K; i++) {
        unpack_block(t, x, i, &u);
        float *o = y + i * MZ_QK_K;
        for (int g = 0; g < KQ_GROUPS; g++) {
            const float dl = u.d * (float)u.sc[g];
            if (u.has_min) {
                const float ml = u.dmin * (float)u.m[g];
                for (int l = 0; l < 16; l++) o[16 * g + l] = dl * (float)u.q[16 * g + l] - ml;
            } else {
                for (int l = 0; l < 16; l++) o[16 * g + l] = dl * (float)u.q[16 * g + l];
            }
        }
    }
}


/* ---- dot product with Q8_K ------------------------------------------------------------ */

static float vec_dot_k(int t, size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK_K == 0);
    const mz_block_q8_K *b = x;
    kq_unpacked u;
    float s = 0.0f;
    for (size_t i = 0; i < n / MZ_QK_K; i++) {
        unpack_block(t, w, i, &u);
        int32_t isum = 0, summs = 0;
        for (int g = 0; g < KQ_GROUPS; g++) {
            int32_t gs = 0;
            for (int l = 0; l < 16; l++) gs += u.q[16 * g + l] * b[i].qs[16 * g + l];
            isum += u.sc[g] * gs;
            summs += u.m[g] * b[i].bsums[g];
        }
        s = u.has_min ? mz_kq_block_end_min(s, b[i].d, u.d, u.dmin, isum, summs)
                      : mz_kq_block_end(s, b[i].d, u.d, isum);
    }
    return s;
}


/* ---- quantizer: sub-block fits ---------------------------------------------------------- */

/* nearest integer to v (ties to even) clamped to [lo, hi]; NaN gives lo, so
 * odd input (inf, NaN) never reaches an undefined conversion. */
static int nearest_in(float v, int lo, int hi)
{
    return (int)rintf(fminf((float)hi, fmaxf((float)lo, v)));
}

/* Codes of x[0..n) for x ~ scale*q - min, q in [0, qmax]; returns the
 * squared error of the values (scale*q - min) they decode to. */
static float codes_affine(const float *restrict x, int n, float scale, float min, int qmax, uint8_t *restrict q)
{
    float err = 0.0f;
    for (int l = 0; l < n; l++) {
        const int c = scale > 0.0f ? nearest_in((x[l] + min) / scale, 0, qmax) : 0;
        if (q) q[l] = (uint8_t)c;
        const float e = scale * (float)c - min - x[l];
        err += e * e;
    }
    return err;
}

/* Codes of x[0..n) for x ~ scale*q, q in [qlo, qhi]; the squared error. */
static float codes_sym(const float *restrict x, int n, float scale, int qlo, int qhi, int8_t *restrict q)
{
    float err = 0.0f;
    for (int l = 0; l < n; l++) {
        const int c = scale != 0.0f ? nearest_in(x[l] / scale, qlo, qhi) : 0;
        if (q) q[l] = (int8_t)c;
        const float e = scale * (float)c - x[l];
        err += e * e;
    }
    return err;
}

/*
 * The scale >= 0 and min >= 0 of x ~ scale*q - min, q in [0, qmax], for one
 * sub-block: candidate grids spanning [min(x, 0), max(x)] with 0.1-step
 * changes of the level count, each grid's codes refitted by least squares
 * (the min kept <= 0 as a value, i.e. >= 0 as stored); the fit of smallest
 * squared error wins.
 */
static void fit_affine(const float *restrict x, int n, int qmax, float *scale, float *min)
{
    float lo = x[0], hi = x[0];
    for (int l = 1; l < n; l++) {
        lo = fminf(lo, x[l]);
        hi = fmaxf(hi, x[l]);
    }
    lo = fminf(lo, 0.0f);
    *scale = 0.0f;
    *min = -lo;
    if (!(hi > lo) || !isfinite(hi - lo)) {
        if (!isfinite(*min)) *min = 0.0f;
        return;
    }
    float best = codes_affine(x, n, 0.0f, -lo, qmax, NULL);
    uint8_t q[32];
    for (int step = -10; step <= 10; step++) {
        const float iscale = ((float)qmax + 0.1f * (float)step) / (hi - lo);
        float sl = 0, sl2 = 0, sx = 0, sxl = 0;
        for (int l = 0; l < n; l++) {
            q[l] = (uint8_t)nearest_in(iscale * (x[l] - lo), 0, qmax);
            sl += q[l];
            sl2 += (float)q[l] * q[l];
            sx += x[l];
            sxl += x[l] * q[l];
        }
        const float det = (float)n * sl2 - sl * sl;
        if (!(det > 0.0f)) continue;
        float s = ((float)n * sxl - sl * sx) / det;
        float off = (sl2 * sx - sl * sxl) / det; /* x ~ s*q + off */
        if (off > 0.0f) {
            off = 0.0f;
            s = sxl / sl2;
        }
        if (!(s > 0.0f)) continue;
        const float err = codes_affine(x, n, s, -off, qmax, NULL);
        if (err < best) {
            best = err;
            *scale = s;
            *min = -off;
        }
    }
}

/*
 * The signed scale of x ~ scale*q, q in [-nmax, nmax-1]: the value of
 * largest magnitude is put on (or near) the wide end -nmax over a few
 * candidate scales, each refitted by least squares and iterated twice
 * (codes for the fitted scale, refit); the smallest squared error wins.
 */
static float fit_sym(const float *restrict x, int n, int nmax)
{
    float amax = 0.0f, vmax = 0.0f;
    for (int l = 0; l < n; l++)
        if (fabsf(x[l]) > amax) {
            amax = fabsf(x[l]);
            vmax = x[l];
        }
    if (!(amax > 0.0f) || !isfinite(amax)) return 0.0f;
    float best_scale = 0.0f, best = codes_sym(x, n, 0.0f, -nmax, nmax - 1, NULL);
    int8_t q[16];
    for (int step = -9; step <= 9; step++) {
        float s = vmax / -((float)nmax + 0.1f * (float)step);
        for (int iter = 0; iter < 3; iter++) {
            codes_sym(x, n, s, -nmax, nmax - 1, q);
            float sxl = 0, sl2 = 0;
            for (int l = 0; l < n; l++) {
                sxl += x[l] * q[l];
                sl2 += (float)q[l] * q[l];
            }
            if (!(sl2 > 0.0f)) break;
            s = sxl / sl2;
            const float err = codes_sym(x, n, s, -nmax, nmax - 1, NULL);
            if (err < best) {
                best = err;
                best_scale = s;
            }
        }
    }
    return best_scale;
}

/* ---- quantizer: super-blocks ------------------------------------------------------------- */

/*
 * Affine super-block (Q2_K: 16 x 16 values, Q4_K/Q5_K: 8 x 32): fills
 * codes[256] in [0, qmax], the scale and min codes ls/lm in [0, smax] per
 * sub-block, and d / dmin (f16). Value v decodes to
 * (d*ls[s]) * codes[v] - (dmin*lm[s]), s = v / sub_len.
 */
static void quantize_affine(const float *restrict x, int sub_len, int qmax, int smax, uint8_t *restrict codes,
                            uint8_t *restrict ls, uint8_t *restrict lm, mz_f16 *d16, mz_f16 *dmin16)
{
    const int n_sub = MZ_QK_K / sub_len;
    float scale[16], min[16], max_scale = 0.0f, max_min = 0.0f;
    for (int s = 0; s < n_sub; s++) {
        fit_affine(x + s * sub_len, sub_len, qmax, &scale[s], &min[s]);
        max_scale = fmaxf(max_scale, scale[s]);
        max_min = fmaxf(max_min, min[s]);
    }
    *d16 = mz_f32_to_f16(max_scale / (float)smax);
    *dmin16 = mz_f32_to_f16(max_min / (float)smax);
    const float d = mz_f16_to_f32(*d16), dmin = mz_f16_to_f32(*dmin16);
    for (int s = 0; s < n_sub; s++) {
        const float *xs = x + s * sub_len;
        const int l0 = d > 0.0f ? nearest_in(scale[s] / d, 0, smax) : 0;
        const int m0 = dmin > 0.0f ? nearest_in(min[s] / dmin, 0, smax) : 0;
        float best = INFINITY;
        int bl = l0, bm = m0;
        for (int l = MZ_MAX(l0 - 1, 0); l <= MZ_MIN(l0 + 1, smax); l++)
            for (int m = MZ_MAX(m0 - 1, 0); m <= MZ_MIN(m0 + 1, smax); m++) {
                const float err = codes_affine(xs, sub_len, d * (float)l, dmin * (float)m, qmax, NULL);
                if (err < best) {
                    best = err;
                    bl = l;
                    bm = m;
                }
            }
        ls[s] = (uint8_t)bl;
        lm[s] = (uint8_t)bm;
        codes_affine(xs, sub_len, d * (float)bl, dmin * (float)bm, qmax, codes + s * sub_len);
    }
}

/*
 * Symmetric super-block (Q3_K, Q6_K: 16 x 16 values): codes[256] in
 * [-nmax, nmax-1], scale codes ls in [-smax, smax-1], d (f16); value v
 * decodes to (d*ls[v/16]) * codes[v].
 */
static void quantize_sym(const float *restrict x, int nmax, int smax, int8_t *restrict codes, int8_t *restrict ls,
                         mz_f16 *d16)
{
    float scale[KQ_GROUPS], amax = 0.0f, vmax = 0.0f;
    for (int g = 0; g < KQ_GROUPS; g++) {
        scale[g] = fit_sym(x + 16 * g, 16, nmax);
        if (fabsf(scale[g]) > amax) {
            amax = fabsf(scale[g]);
            vmax = scale[g];
        }
    }
    /* the largest sub-block scale takes the wide end -smax */
    *d16 = mz_f32_to_f16(amax > 0.0f ? vmax / -(float)smax : 0.0f);
    const float d = mz_f16_to_f32(*d16);
    for (int g = 0; g < KQ_GROUPS; g++) {
        const float *xs = x + 16 * g;
        const int l0 = d != 0.0f ? nearest_in(scale[g] / d, -smax, smax - 1) : 0;
        float best = INFINITY;
        int bl = l0;
        for (int l = MZ_MAX(l0 - 1, -smax); l <= MZ_MIN(l0 + 1, smax - 1); l++) {
            const float err = codes_sym(xs, 16, d * (float)l, -nmax, nmax - 1, NULL);
            if (err < best) {
                best = err;
                bl = l;
            }
        }
        ls[g] = (int8_t)bl;
        codes_sym(xs, 16, d * (float)bl, -nmax, nmax - 1, codes + 16 * g);
    }
}

/* ---- quantizer: packing -------------------------------------------------------------------- */

static void quantize_block_q2_K(const float *restrict x, mz_block_q2_K *restrict b)
{
    uint8_t codes[MZ_QK_K], ls[16], lm[16];
    quantize_affine(x, 16, 3, 15, codes, ls, lm, &b->d, &b->dmin);
    for (int g = 0; g < 16; g++) b->scales[g] = (uint8_t)(ls[g] | (lm[g] << 4));
    memset(b->qs, 0, sizeof b->qs);
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) b->qs[32 * h + l] |= (uint8_t)(codes[128 * h + 32 * j + l] << (2 * j));
}

static void quantize_block_q3_K(const float *restrict x, mz_block_q3_K *restrict b)
{
    int8_t codes[MZ_QK_K], ls[KQ_GROUPS];
    quantize_sym(x, 4, 32, codes, ls, &b->d);
    memset(b->scales, 0, sizeof b->scales);
    for (int g = 0; g < KQ_GROUPS; g++) {
        const int v = ls[g] + 32; /* 0..63 */
        b->scales[g < 8 ? g : g - 8] |= (uint8_t)((v & 15) << (g < 8 ? 0 : 4));
        b->scales[8 + g % 4] |= (uint8_t)((v >> 4) << (2 * (g / 4)));
    }
    memset(b->qs, 0, sizeof b->qs);
    memset(b->hmask, 0, sizeof b->hmask);
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                const int c = codes[128 * h + 32 * j + l] + 4; /* 0..7 */
                b->qs[32 * h + l] |= (uint8_t)((c & 3) << (2 * j));
                b->hmask[l] |= (uint8_t)((c >> 2) << (4 * h + j));
            }
}

/* The 12 scale bytes of Q4_K / Q5_K from eight 6-bit scales and mins. */
static void pack_scales_k4(const uint8_t *restrict ls, const uint8_t *restrict lm, uint8_t *restrict s12)
{
    for (int s = 0; s < 4; s++) {
        s12[s] = (uint8_t)(ls[s] | ((ls[s + 4] >> 4) << 6));
        s12[s + 4] = (uint8_t)(lm[s] | ((lm[s + 4] >> 4) << 6));
        s12[s + 8] = (uint8_t)((ls[s + 4] & 15) | ((lm[s + 4] & 15) << 4));
    }
}

/* Q4_K and Q5_K: qh is NULL for Q4_K (codes 0..15), else codes are 0..31. */
static void quantize_q45_K(const float *restrict x, mz_f16 *d, mz_f16 *dmin, uint8_t *restrict s12,
                           uint8_t *restrict qs, uint8_t *restrict qh)
{
    uint8_t codes[MZ_QK_K], ls[8], lm[8];
    quantize_affine(x, 32, qh ? 31 : 15, 63, codes, ls, lm, d, dmin);
    pack_scales_k4(ls, lm, s12);
    if (qh) memset(qh, 0, MZ_QK_K / 8);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            const int lo = codes[64 * c + l], hi = codes[64 * c + 32 + l];
            qs[32 * c + l] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
            if (qh) qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
        }
}

static void quantize_block_q4_K(const float *restrict x, mz_block_q4_K *restrict b)
{
    quantize_q45_K(x, &b->d, &b->dmin, b->scales, b->qs, NULL);
}

static void quantize_block_q5_K(const float *restrict x, mz_block_q5_K *restrict b)
{
    quantize_q45_K(x, &b->d, &b->dmin, b->scales, b->qs, b->qh);
}

static void quantize_block_q6_K(const float *restrict x, mz_block_q6_K *restrict b)
{
    int8_t codes[MZ_QK_K], ls[KQ_GROUPS];
    quantize_sym(x, 32, 128, codes, ls, &b->d);
    memcpy(b->scales, ls, sizeof ls);
    memset(b->ql, 0, sizeof b->ql);
    memset(b->qh, 0, sizeof b->qh);
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) {
                const int c = codes[128 * h + 32 * k + l] + 32; /* 0..63 */
                b->ql[64 * h + l + 32 * (k & 1)] |= (uint8_t)((c & 15) << (k < 2 ? 0 : 4));
                b->qh[32 * h + l] |= (uint8_t)((c >> 4) << (2 * k));
            }
}

/* ---- the row functions of the kernel tables ------------------------------------------------- */

#define KQ_ROW_FUNCS(t, T)                                                                         \
    void mz_to_float_##t##_ref(const void *restrict x, float *restrict y, size_t n)               \
    {                                                                                              \
        to_float_k(T, x, y, n);                                                                    \
    }                                                                                              \
    float mz_vec_dot_##t##_q8_K_ref(size_t n, const void *restrict w, const void *restrict x)     \
    {                                                                                              \
        return vec_dot_k(T, n, w, x);                                                              \
    }                                                                                              \
    void mz_quantize_##t##_ref(const float *restrict x, void *restrict y, size_t n)               \
    {                                                                                              \
        MZ_ASSERT(n % MZ_QK_K == 0);                                                               \
        mz_block_##t *b = y;                                                                       \
        for (size_t i = 0; i < n / MZ_QK_K; i++) quantize_block_##t(x + i * MZ_QK_K, &b[i]);       \
    }
KQ_ROW_FUNCS(q2_K, MZ_DT_Q2_K)
KQ_ROW_FUNCS(q3_K, MZ_DT_Q3_K)
KQ_ROW_FUNCS(q4_K, MZ_DT_Q4_K)
KQ_ROW_FUNCS(q5_K, MZ_DT_Q5_K)
KQ_ROW_FUNCS(q6_K, MZ_DT_Q6_K)
