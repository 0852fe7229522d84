/*
 * test_kernels_q5iq.c — the weight types Q5_0, Q5_1, IQ4_NL and IQ4_XS
 * (src/kernels/q5_iq4_*.c) against their specification and each other.
 *
 *   layouts:   hand-built blocks dequantize as ggml's layouts say (the
 *              expected values are spelled out here from the bit layout,
 *              with the IQ4 grid written out again).
 *   quantize:  to_float(quantize(x)) on random rows of 1, 2, 3, 7 and 64
 *              blocks: Q5_0 within |d| + 16 e(d) (d = amax / 16, the side
 *              opposite the largest value clips at level 31: one step), Q5_1
 *              within d/2 + 31 e(d) + e(min) (d = (max - min) / 31), with
 *              e(v) the f16 storage error of v; IQ4_NL's squared error per
 *              block at most that of the plain scale amax / 127 (the first
 *              candidate of its search) + 1 % + the f16 storage error of
 *              the scale on every value, IQ4_XS's per super-block at most
 *              1.75 x IQ4_NL's on the same values (its sub-block scales are
 *              6-bit) — and the search must gain: IQ4_NL's error below 90 %
 *              of the plain scale's on average over the blocks (those
 *              where the grid, not the f16 scale, makes the error).
 *   odd blocks: all-zero blocks give exact zeros; huge, tiny, inf and NaN
 *              inputs quantize without a trap (UBSan) and finite ones give
 *              finite values.
 *   vec_dot:   the reference vs a double dot of the dequantized rows within
 *              1e-5 of sum |w_i x_i| (1e-3 for Q5_1: its s is an f16);
 *              every SIMD table vs the reference within 1e-4 (order only).
 *   matmul:    every ISA's gemm vs its own vec_dot, bit for bit, for rows of
 *              1, 2, 3, 7 blocks (and long rows), register-tile remainders,
 *              thread slices and one token at a time; AVX-512 and AVX2 give
 *              the same bits.
 *   long rows: the x86 plain vec_dot of every x8-ordered type (Q4_0, Q4_1,
 *              Q8_0 too) on a row past MZ_X8_MAX_BLOCKS, vs the reference.
 *   x8 (Q5_0, Q5_1, IQ4_NL): every ISA's gemm on repacked weights and every x86 plain
 *              gemm equal the x8 reference vec_dot bit for bit (any slicing,
 *              one token at a time); that is within 1e-5 of the plain
 *              reference; unpack(repack(w)) == w.
 */
#include "kernels/kernels_impl.h"
#include "testutil.h"
#include "x8_util.h"

#include <float.h>
#include <stdint.h>

static unsigned long long g_rng = 0x5eed5eedULL;

static float rnd(void) { return t_rand_float(&g_rng); }

static const int k_types[] = {MZ_DT_Q5_0, MZ_DT_Q5_1, MZ_DT_IQ4_NL, MZ_DT_IQ4_XS};
/* The grid of ggml's kvalues_iq4nl, written out again. */
static const int k_grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* ---- layouts ------------------------------------------------------------------------ */

static void test_layouts(void)
{
    float y[256];
    /* Q5_0: value i = (nibble i | bit i of qh << 4) - 16, times d. */
    mz_block_q5_0 b0 = {.d = mz_f32_to_f16(0.5f), .qh = {0xa5, 0x0f, 0xf0, 0x81}};
    for (int j = 0; j < 16; j++) b0.qs[j] = (uint8_t)(j | (15 - j) << 4);
    mz_to_float_q5_0_ref(&b0, y, 32);
    int bad = 0;
    for (int i = 0; i < 32; i++) {
        const int nib = i < 16 ? i : 15 - (i - 16);
        const int hbit = (b0.qh[i / 8] >> (i % 8)) & 1;
        bad += y[i] != 0.5f * (float)(nib + 16 * hbit - 16);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(y[0] == 0.5f * 16.0f - 8.0f && y[31] == 0.5f * (0 + 16 - 16)); /* bit 0 set; bit 31 set */
    CHECK(y[1] == 0.5f * (1 - 16));                                      /* bit 1 clear */

    mz_block_q5_1 b1 = {.d = mz_f32_to_f16(0.25f), .m = mz_f32_to_f16(-3.0f), .qh = {0xff, 0x00, 0x55, 0xaa}};
    for (int j = 0; j < 16; j++) b1.qs[j] = (uint8_t)((j * 7) % 16 | ((j * 3) % 16) << 4);
    mz_to_float_q5_1_ref(&b1, y, 32);
    bad = 0;
    for (int i = 0; i < 32; i++) {
        const int nib = i < 16 ? (i * 7) % 16 : ((i - 16) * 3) % 16;
        const int hbit = (b1.qh[i / 8] >> (i % 8)) & 1;
        bad += y[i] != 0.25f * (float)(nib + 16 * hbit) - 3.0f;
    }
    CHECK_EQ_INT(bad, 0);

    mz_block_iq4_nl bn = {.d = mz_f32_to_f16(2.0f)};
    for (int j = 0; j < 16; j++) bn.qs[j] = (uint8_t)(j | (15 - j) << 4);
    mz_to_float_iq4_nl_ref(&bn, y, 32);
    bad = 0;
    for (int j = 0; j < 16; j++) bad += (y[j] != 2.0f * (float)k_grid[j]) + (y[16 + j] != 2.0f * (float)k_grid[15 - j]);
    CHECK_EQ_INT(bad, 0);
    for (int j = 0; j < 16; j++) CHECK(mz_kvalues_iq4nl[j] == k_grid[j]);

    /* IQ4_XS: sub-block j's scale is (nibble j of scales_l) | (2 bits j of scales_h) << 4, minus 32. */
    mz_block_iq4_xs bx = {.d = mz_f32_to_f16(0.125f), .scales_h = 0xe41b, .scales_l = {0x10, 0x32, 0xf4, 0x7c}};
    for (int j = 0; j < 128; j++) bx.qs[j] = (uint8_t)(j * 37 + 11);
    static const int ls[8] = {0x00 | 3 << 4, 0x1 | 2 << 4, 0x2 | 1 << 4, 0x3 | 0 << 4,
                              0x4 | 0 << 4, 0xf | 1 << 4, 0xc | 2 << 4, 0x7 | 3 << 4};
    mz_to_float_iq4_xs_ref(&bx, y, 256);
    bad = 0;
    for (int s = 0; s < 8; s++) {
        CHECK(mz_iq4_xs_scale(&bx, s) == ls[s] - 32);
        for (int j = 0; j < 16; j++) {
            const uint8_t q = bx.qs[s * 16 + j];
            const float dl = 0.125f * (float)(ls[s] - 32);
            bad += y[s * 32 + j] != dl * (float)k_grid[q & 15];
            bad += y[s * 32 + 16 + j] != dl * (float)k_grid[q >> 4];
        }
    }
    CHECK_EQ_INT(bad, 0);

    /* Exact answers of the quantizers. */
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)(j % 32) - 16.0f; /* largest is -16: d = 1 */
    mz_quantize_q5_0_ref(x, &b0, 32);
    mz_to_float_q5_0_ref(&b0, y, 32);
    CHECK(mz_f16_to_f32(b0.d) == 1.0f && memcmp(x, y, sizeof x) == 0);
    for (int j = 0; j < 32; j++) x[j] = (float)((j * 13) % 32) * 0.5f + 1.0f; /* min 1, d = 0.5 */
    mz_quantize_q5_1_ref(x, &b1, 32);
    mz_to_float_q5_1_ref(&b1, y, 32);
    CHECK(mz_f16_to_f32(b1.d) == 0.5f && mz_f16_to_f32(b1.m) == 1.0f && memcmp(x, y, sizeof x) == 0);
    for (int j = 0; j < 32; j++) x[j] = 0.25f * (float)k_grid[(j * 5) % 16]; /* on the grid, -127 present */
    mz_quantize_iq4_nl_ref(x, &bn, 32);
    mz_to_float_iq4_nl_ref(&bn, y, 32);
    CHECK(mz_f16_to_f32(bn.d) == 0.25f && memcmp(x, y, sizeof x) == 0);
}

/* ---- test data ---------------------------------------------------------------------- */

/* n values in blocks of 32: scales over 6 decades, and blocks that are all
 * zero, constant, one outlier, one-signed, or uniformly spread. */
static void fill_row(float *x, size_t n)
{
    for (size_t b = 0; b < n / 32; b++) {
        const float scale = powf(10.0f, 3.0f * rnd());
        const int kind = (int)(t_rand_u64(&g_rng) % 8);
        for (size_t j = 0; j < 32; j++) {
            float v = t_rand_normal(&g_rng) * scale;
            if (kind == 1) v = 0.0f;
            else if (kind == 2) v = -0.37f * scale;
            else if (kind == 3) v = j == 9 ? 40.0f * scale : v * 0.02f;
            else if (kind == 4) v = fabsf(v) + 0.1f * scale;
            else if (kind == 5) v = -fabsf(v);
            else if (kind == 6) v = rnd() * scale;
            x[b * 32 + j] = v;
        }
    }
}

static double f16_err(double v) { return fmax(fabs(v) * ldexp(1, -11), ldexp(1, -25)); }

/* Squared error of 32 values coded against the grid with scale f16(amax / -127)
 * (the value of largest magnitude on -127): IQ4_NL's first candidate. */
static double iq4_plain_sse(const float *x)
{
    float v = 0.0f;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > fabsf(v)) v = x[j];
    const double d = mz_f16_to_f32(mz_f32_to_f16(v / -127.0f));
    double sse = 0.0;
    for (int j = 0; j < 32; j++) {
        int best = 0;
        for (int k = 1; k < 16; k++)
            if (fabs(x[j] - d * k_grid[k]) < fabs(x[j] - d * k_grid[best])) best = k;
        sse += (x[j] - d * k_grid[best]) * (x[j] - d * k_grid[best]);
    }
    return sse;
}

/* ---- quantize round trip ------------------------------------------------------------ */

static void test_quantize_roundtrip(void)
{
    static const size_t n_blocks[] = {8, 16, 24, 56, 512}; /* 1, 2, 3, 7, 64 super-blocks */
    double ratio_sum = 0.0;
    int n_ratio = 0;
    for (size_t si = 0; si < MZ_ARRAY_LEN(n_blocks); si++) {
        const size_t n = n_blocks[si] * 32;
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *ynl = malloc(n * sizeof *ynl);
        uint8_t *q = malloc(mz_dtype_row_bytes(MZ_DT_Q5_1, n) * 2);
        fill_row(x, n);
        for (size_t ti = 0; ti < MZ_ARRAY_LEN(k_types); ti++) {
            const int t = k_types[ti];
            const mz_type_kernels *k = mz_kernels_ref(t);
            CHECK(k != NULL && mz_dtype_supported(t));
            if (!k) continue;
            k->quantize(x, q, n);
            k->to_float(q, y, n);
            if (t == MZ_DT_IQ4_NL) memcpy(ynl, y, n * sizeof *y);
            int bad = 0;
            for (size_t b = 0; b < n / 32; b++) {
                const float *xb = x + b * 32, *yb = y + b * 32;
                float amax = 0, mn = xb[0], mx = xb[0];
                double sse = 0.0;
                /* (separate loops: one mixed reduction crashed aarch64 GCC 12's vectorizer) */
                for (int j = 0; j < 32; j++) {
                    amax = fmaxf(amax, fabsf(xb[j]));
                    mn = fminf(mn, xb[j]);
                    mx = fmaxf(mx, xb[j]);
                }
                for (int j = 0; j < 32; j++) sse += ((double)xb[j] - yb[j]) * ((double)xb[j] - yb[j]);
                for (int j = 0; j < 32; j++) bad += !isfinite(yb[j]);
                if (amax == 0.0f)
                    for (int j = 0; j < 32; j++) bad += yb[j] != 0.0f;
                if (t == MZ_DT_Q5_0 || t == MZ_DT_Q5_1) {
                    const double d = t == MZ_DT_Q5_0 ? amax / 16.0 : (mx - mn) / 31.0;
                    const double bound = (t == MZ_DT_Q5_0 ? d + 16 * f16_err(d) : 0.5 * d + 31 * f16_err(d) + f16_err(mn)) *
                                         (1.0 + 1e-5);
                    for (int j = 0; j < 32; j++) bad += fabs((double)xb[j] - yb[j]) > bound;
                } else if (t == MZ_DT_IQ4_NL) {
                    const double plain = iq4_plain_sse(xb);
                    /* + the f16 storage error of a scale up to amax / 113 on every value */
                    const double e = 128.0 * f16_err(amax / 113.0);
                    bad += sse > plain * 1.01 + 32.0 * e * e;
                    if (plain > 100.0 * 32.0 * e * e) { /* the grid's error, not the f16 scale's */
                        ratio_sum += sse / plain;
                        n_ratio++;
                    }
                } /* IQ4_XS: per super-block below */
            }
            if (t == MZ_DT_IQ4_XS) {
                for (size_t s = 0; s < n / 256; s++) {
                    double e_xs = 0.0, e_nl = 0.0;
                    for (size_t j = s * 256; j < (s + 1) * 256; j++) {
                        e_xs += ((double)x[j] - y[j]) * ((double)x[j] - y[j]);
                        e_nl += ((double)x[j] - ynl[j]) * ((double)x[j] - ynl[j]);
                    }
                    bad += e_xs > 1.75 * e_nl + 1e-30;
                }
            }
            CHECK_MSG(bad == 0, "%s round trip n=%zu: %d values or blocks out of bound", mz_dtype_name(t), n, bad);
        }
        free(x);
        free(y);
        free(ynl);
        free(q);
    }
    printf("test_kernels_q5iq: IQ4_NL squared error %.4g of the plain scale's (mean over blocks)\n",
           ratio_sum / n_ratio);
    CHECK(n_ratio > 0 && ratio_sum < 0.9 * n_ratio);
}

/* Blocks that are all zero, huge, tiny, or not finite. */
static void test_odd_blocks(void)
{
    enum { N = 256 };
    float x[N], y[N];
    uint8_t q[N * 2];
    const float specials[] = {0.0f, 1e30f, -1e30f, 1e-40f, -3e-39f, 60000.0f, INFINITY, -INFINITY, NAN};
    for (size_t ti = 0; ti < MZ_ARRAY_LEN(k_types); ti++) {
        const mz_type_kernels *k = mz_kernels_ref(k_types[ti]);
        for (size_t s = 0; s < MZ_ARRAY_LEN(specials); s++) {
            for (int mode = 0; mode < 3; mode++) {
                for (int j = 0; j < N; j++)
                    x[j] = mode == 0 ? specials[s] : mode == 1 ? (j == 7 ? specials[s] : rnd()) : specials[s] * (j % 3 - 1.0f);
                k->quantize(x, q, N);
                k->to_float(q, y, N);
                bool finite_in = true;
                for (int j = 0; j < N; j++) finite_in &= isfinite(x[j]) && fabsf(x[j]) <= 60000.0f;
                int bad = 0;
                if (finite_in)
                    for (int j = 0; j < N; j++) bad += !isfinite(y[j]);
                if (specials[s] == 0.0f && mode != 1)
                    for (int j = 0; j < N; j++) bad += y[j] != 0.0f;
                CHECK_MSG(bad == 0, "%s special %g mode %d: %d bad values", mz_dtype_name(k_types[ti]),
                          (double)specials[s], mode, bad);
            }
        }
    }
}

/* ---- vec_dot ------------------------------------------------------------------------- */

static void act_to_float(int at, const void *x, float *y, size_t n)
{
    if (at == MZ_DT_Q8_0) mz_to_float_q8_0_ref(x, y, n);
    else if (at == MZ_DT_Q8_1) mz_to_float_q8_1_ref(x, y, n);
    else mz_to_float_q8_K_ref(x, y, n);
}

/* One product: n_rows weight rows of type t (quantized by kq) and n_tok
 * activation rows (kq->from_float), outputs y_stride apart with padding. */
typedef struct {
    int type;
    size_t n_rows, n_tok, n_cols, wrb, xrb, y_stride;
    float *wf, *xf, *y, *expect;
    uint8_t *w, *x;
} product;

static void product_init(product *p, const mz_type_kernels *kq, int t, size_t n_rows, size_t n_tok, size_t n_cols);
static void product_free(product *p);

static void check_vec_dot(enum mz_isa isa, int t)
{
    const mz_type_kernels *k = mz_kernels_for_isa(isa, t), *r = mz_kernels_ref(t);
    CHECK(k != NULL && k->vec_dot_type == r->vec_dot_type);
    if (!k) return;
    static const size_t n_blocks[] = {1, 2, 3, 7, 64};
    for (size_t si = 0; si < MZ_ARRAY_LEN(n_blocks) * 4; si++) {
        /* one row and one token; activations plain, offset, or large */
        const int rep = (int)(si % 4);
        const size_t n = n_blocks[si / 4] * mz_dtype_block_len(t);
        product p;
        product_init(&p, r, t, 1, 1, n);
        for (size_t i = 0; i < n && rep >= 2; i++) p.xf[i] = rep == 2 ? p.xf[i] + 0.5f : p.xf[i] * 100.0f;
        r->from_float(p.xf, p.x, n);
        float *wd = malloc(n * sizeof *wd), *xd = malloc(n * sizeof *xd);
        r->to_float(p.w, wd, n);
        act_to_float(r->vec_dot_type, p.x, xd, n);
        double exact = 0, mag = 0;
        for (size_t i = 0; i < n; i++) exact += (double)wd[i] * xd[i];
        for (size_t i = 0; i < n; i++) mag += fabs((double)wd[i] * xd[i]);
        const float vr = r->vec_dot(n, p.w, p.x), vk = k->vec_dot(n, p.w, p.x);
        CHECK_MSG(fabs((double)vk - vr) <= 1e-4 * mag + 1e-30, "%s vec_dot %s n=%zu: %.9g vs ref %.9g (mag %.3g)",
                  mz_isa_names[isa], mz_dtype_name(t), n, vk, vr, mag);
        if (isa == MZ_ISA_SCALAR) {
            const double tol = (t == MZ_DT_Q5_1 ? 1e-3 : 1e-5) * mag + 1e-30;
            CHECK_MSG(fabs((double)vr - exact) <= tol, "ref vec_dot %s n=%zu: %.9g vs exact %.9g", mz_dtype_name(t), n, vr,
                      exact);
        }
        free(wd);
        free(xd);
        product_free(&p);
    }
}

/* ---- matmul ------------------------------------------------------------------------- */


static void product_init(product *p, const mz_type_kernels *kq, int t, size_t n_rows, size_t n_tok, size_t n_cols)
{
    *p = (product){.type = t, .n_rows = n_rows, .n_tok = n_tok, .n_cols = n_cols, .y_stride = n_rows + 3,
                   .wrb = mz_dtype_row_bytes(t, n_cols), .xrb = mz_dtype_row_bytes(kq->vec_dot_type, n_cols)};
    p->wf = malloc(n_rows * n_cols * sizeof *p->wf);
    p->xf = malloc(n_tok * n_cols * sizeof *p->xf);
    p->w = malloc(n_rows * p->wrb);
    p->x = malloc(n_tok * p->xrb);
    p->y = malloc(n_tok * p->y_stride * sizeof *p->y);
    p->expect = malloc(n_tok * p->y_stride * sizeof *p->expect);
    fill_row(p->wf, n_rows * n_cols);
    for (size_t i = 0; i < n_tok * n_cols; i++) p->xf[i] = rnd() * (i % 3 == 0 ? 10.0f : 1.0f);
    for (size_t r = 0; r < n_rows; r++) kq->quantize(p->wf + r * n_cols, p->w + r * p->wrb, n_cols);
    for (size_t i = 0; i < n_tok; i++) kq->from_float(p->xf + i * n_cols, p->x + i * p->xrb, n_cols);
}

static void product_free(product *p)
{
    void *const owned[] = {p->wf, p->xf, p->w, p->x, p->y, p->expect};
    for (size_t i = 0; i < MZ_ARRAY_LEN(owned); i++) free(owned[i]);
}

/* Output (t, r) of p through vec_dot vd on weights w. */
static float product_dot(const product *p, float (*vd)(size_t, const void *restrict, const void *restrict),
                         const uint8_t *w, size_t t, size_t r)
{
    return vd(p->n_cols, w + r * p->wrb, p->x + t * p->xrb);
}

/* mz_matmul with k on weights w, in 1..3 thread slices and one token per
 * call: CHECKs every output equals p->expect bit for bit and the padding
 * stays untouched. */
static void product_check_slices(product *p, const mz_type_kernels *k, const uint8_t *w, const char *what)
{
    const size_t ys = p->y_stride;
    for (int nth = 1; nth <= 4; nth++) {
        for (size_t i = 0; i < p->n_tok * ys; i++) p->y[i] = NAN;
        for (size_t t0 = 0; t0 < p->n_tok; t0 += nth == 4 ? 1 : p->n_tok) {
            const size_t tn = nth == 4 ? 1 : p->n_tok;
            for (int ith = 0; ith < (nth == 4 ? 1 : nth); ith++)
                mz_matmul(k, w, p->wrb, p->n_cols, p->n_rows, p->x + t0 * p->xrb, p->xrb, tn, p->y + t0 * ys, ys, ith,
                          nth == 4 ? 1 : nth);
        }
        int bad = 0;
        for (size_t i = 0; i < p->n_tok * ys; i++)
            bad += i % ys < p->n_rows ? memcmp(&p->y[i], &p->expect[i], 4) != 0 : !isnan(p->y[i]);
        CHECK_MSG(bad == 0, "%s matmul %s %zux%zu tok %zu nth %d: %d not bit-equal", what, mz_dtype_name(p->type),
                  p->n_rows, p->n_cols, p->n_tok, nth, bad);
    }
}

static void check_matmul(enum mz_isa isa, int t)
{
    const mz_type_kernels *k = mz_kernels_for_isa(isa, t), *k2 = mz_kernels_for_isa(MZ_ISA_AVX2, t);
    if (!k) return;
    static const size_t shapes[][3] = {/* rows, tokens, blocks per row */
        {1, 1, 1}, {7, 1, 2}, {5, 7, 3}, {9, 4, 7}, {67, 5, 3}, {3, 9, 1}, {17, 13, 2}, {130, 2, 7},
        {4, 8, 18}, {2, 6, 129}, {300, 3, 1}, {33, 64, 18}, {3, 5, 520} /* past MZ_X8_MAX_BLOCKS */};
    for (size_t s = 0; s < MZ_ARRAY_LEN(shapes); s++) {
        product p;
        product_init(&p, k, t, shapes[s][0], shapes[s][1], shapes[s][2] * mz_dtype_block_len(t));
        int bad_isa = 0;
        for (size_t i = 0; i < p.n_tok; i++)
            for (size_t r = 0; r < p.n_rows; r++) {
                const float v = product_dot(&p, k->vec_dot, p.w, i, r);
                p.expect[i * p.y_stride + r] = v;
                /* the AVX-512 tiles give the AVX2 bits */
                if (isa == MZ_ISA_AVX512 && k2) {
                    const float v2 = product_dot(&p, k2->vec_dot, p.w, i, r);
                    bad_isa += memcmp(&v, &v2, 4) != 0;
                }
            }
        CHECK_MSG(bad_isa == 0, "avx512 vs avx2 %s %zux%zu: %d differ", mz_dtype_name(t), p.n_rows, p.n_cols, bad_isa);
        product_check_slices(&p, k, p.w, mz_isa_names[isa]);
        product_free(&p);
    }
}

/* ---- Q5_0, Q5_1 and IQ4_NL in the x8 layout ------------------------------------------- */

/* Every ISA's x8 gemm on repacked weights of type t (the scalar one included)
 * and every x86 plain-layout gemm give, bit for bit, the x8 vec_dot of the
 * plain rows, for any slicing and token count; the x8 arithmetic stays
 * within the plain reference's tolerance; repack then unpack gives the
 * original bytes back. */
static void check_x8(int t)
{
    static const size_t shapes[][3] = {/* rows, tokens, cols */
        {8, 1, 32}, {16, 5, 64}, {72, 9, 576}, {8, 3, 4128}, {24, 4, 16384}, {136, 13, 96}, {64, 70, 64}};
    const mz_type_kernels *kr = mz_kernels_x8_for_isa(MZ_ISA_SCALAR, t), *kp = mz_kernels_ref(t);
    CHECK(kr != NULL && kr->row_group == 8 && kr->vec_dot_type == kp->vec_dot_type);
    if (!kr) return;
    CHECK(mz_x8_group_block_bytes(t) == 8 * mz_dtype_block_bytes(t) && !mz_x8_shape_ok(t, 12, 64) &&
          mz_x8_shape_ok(t, 1536, 576));
    int n_checked = 0;
    for (size_t s = 0; s < MZ_ARRAY_LEN(shapes); s++) {
        product p;
        product_init(&p, kp, t, shapes[s][0], shapes[s][1], shapes[s][2]);
        uint8_t *wp = malloc(p.n_rows * p.wrb), *scratch = malloc(8 * p.wrb);
        memcpy(wp, p.w, p.n_rows * p.wrb);
        mz_repack_x8(t, wp, p.n_rows, p.n_cols, scratch);
        CHECK(memcmp(wp, p.w, p.n_rows * p.wrb) != 0);
        int bad_ref = 0;
        for (size_t i = 0; i < p.n_tok; i++)
            for (size_t r = 0; r < p.n_rows; r++) {
                const float v = product_dot(&p, kr->vec_dot, p.w, i, r), vp = product_dot(&p, kp->vec_dot, p.w, i, r);
                p.expect[i * p.y_stride + r] = v;
                double mag = 0;
                for (size_t c = 0; c < p.n_cols; c++) mag += fabs((double)p.wf[r * p.n_cols + c] * p.xf[i * p.n_cols + c]);
                bad_ref += fabs((double)v - (double)vp) > 1e-5 * mag + 1e-6;
            }
        CHECK_MSG(bad_ref == 0, "x8 ref %s %zux%zu: %d outputs off the plain reference", mz_dtype_name(t), p.n_rows,
                  p.n_cols, bad_ref);
        for (int isa = 0; isa < MZ_ISA_COUNT; isa++) {
            const mz_type_kernels *kx = mz_kernels_x8_for_isa((enum mz_isa)isa, t);
            const mz_type_kernels *kn = mz_kernels_for_isa((enum mz_isa)isa, t);
            char what[32];
            if (kx) {
                snprintf(what, sizeof what, "%s x8", mz_isa_names[isa]);
                product_check_slices(&p, kx, wp, what);
                n_checked++;
            }
            if (kn && (isa == MZ_ISA_AVX2 || isa == MZ_ISA_AVX512)) {
                snprintf(what, sizeof what, "%s plain", mz_isa_names[isa]);
                product_check_slices(&p, kn, p.w, what);
                n_checked++;
            }
        }
        CHECK_MSG(x8_row_lookup_mismatches(t, wp, p.w, p.n_rows, p.n_cols) == 0, /* a tied embedding's lookup */
                  "x8 row lookup %s: rows differ from the plain rows", mz_dtype_name(t));
        mz_unpack_x8(t, wp, p.n_rows, p.n_cols, scratch);
        CHECK(memcmp(wp, p.w, p.n_rows * p.wrb) == 0);
        free(wp);
        free(scratch);
        product_free(&p);
    }
    CHECK(n_checked > 0);
}

/* Rows past MZ_X8_MAX_BLOCKS: the plain vec_dot of every type with an x8
 * order (Q4_0, Q4_1 and Q8_0 as well) hands them to its tiles, one row at
 * a time (row stride 0), and must agree with the reference. */
static void test_long_rows(void)
{
    static const int types[] = {MZ_DT_Q4_0, MZ_DT_Q4_1, MZ_DT_Q8_0, MZ_DT_Q5_0, MZ_DT_Q5_1, MZ_DT_IQ4_NL};
    for (int isa = MZ_ISA_AVX2; isa <= MZ_ISA_AVX512; isa++) {
        for (size_t ti = 0; ti < MZ_ARRAY_LEN(types); ti++) {
            const mz_type_kernels *k = mz_kernels_for_isa((enum mz_isa)isa, types[ti]), *r = mz_kernels_ref(types[ti]);
            if (!k) continue;
            product p;
            product_init(&p, r, types[ti], 1, 1, (MZ_X8_MAX_BLOCKS + 3) * MZ_QK);
            double mag = 0;
            for (size_t c = 0; c < p.n_cols; c++) mag += fabs((double)p.wf[c] * p.xf[c]);
            const float vk = product_dot(&p, k->vec_dot, p.w, 0, 0), vr = product_dot(&p, r->vec_dot, p.w, 0, 0);
            CHECK_MSG(fabs((double)vk - vr) <= 1e-4 * mag, "%s long-row vec_dot %s: %.9g vs ref %.9g", mz_isa_names[isa],
                      mz_dtype_name(types[ti]), vk, vr);
            product_free(&p);
        }
    }
}

static void test_isas(void)
{
    for (int i = 0; i < MZ_ISA_COUNT; i++) {
        if (!mz_kernels_cpu_has((enum mz_isa)i)) {
            printf("test_kernels_q5iq: %s not available here, not tested\n", mz_isa_names[i]);
            continue;
        }
        for (size_t ti = 0; ti < MZ_ARRAY_LEN(k_types); ti++) {
            check_vec_dot((enum mz_isa)i, k_types[ti]);
            check_matmul((enum mz_isa)i, k_types[ti]);
        }
    }
    for (size_t ti = 0; ti < MZ_ARRAY_LEN(k_types); ti++) CHECK(mz_kernels_for(k_types[ti]) != NULL);
    CHECK(mz_kernels_ref(MZ_DT_Q5_1)->vec_dot_type == MZ_DT_Q8_1);
    CHECK(mz_kernels_ref(MZ_DT_IQ4_XS)->vec_dot_type == MZ_DT_Q8_K);
    CHECK(mz_kernels_for(MZ_DT_Q8_K) == NULL); /* activation-only type */
}

int main(void)
{
    mz_kernels_init();
    printf("test_kernels_q5iq: active isa %s\n", mz_kernels_isa());
    test_layouts();
    test_quantize_roundtrip();
    test_odd_blocks();
    test_isas();
    check_x8(MZ_DT_Q5_0);
    check_x8(MZ_DT_Q5_1);
    check_x8(MZ_DT_IQ4_NL);
    test_long_rows();
    return t_done("test_kernels_q5iq");
}
