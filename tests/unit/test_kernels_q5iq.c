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
 */
#include "kernels/kernels_impl.h"
#include "testutil.h"

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

static void check_vec_dot(enum mz_isa isa, int t)
{
    const mz_type_kernels *k = mz_kernels_for_isa(isa, t), *r = mz_kernels_ref(t);
    CHECK(k != NULL && k->vec_dot_type == r->vec_dot_type);
    if (!k) return;
    const int at = r->vec_dot_type;
    const size_t bl = mz_dtype_block_len(t);
    static const size_t n_blocks[] = {1, 2, 3, 7, 64};
    for (size_t si = 0; si < MZ_ARRAY_LEN(n_blocks); si++) {
        const size_t n = n_blocks[si] * bl;
        float *w = malloc(n * sizeof *w), *x = malloc(n * sizeof *x);
        float *wd = malloc(n * sizeof *wd), *xd = malloc(n * sizeof *xd);
        void *wq = malloc(mz_dtype_row_bytes(t, n)), *xq = malloc(mz_dtype_row_bytes(at, n));
        for (int rep = 0; rep < 4; rep++) {
            fill_row(w, n);
            for (size_t i = 0; i < n; i++) x[i] = rnd() * (rep == 3 ? 100.0f : 1.0f) + (rep == 2 ? 0.5f : 0.0f);
            r->quantize(w, wq, n);
            r->from_float(x, xq, n);
            r->to_float(wq, wd, n);
            act_to_float(at, xq, xd, n);
            double exact = 0, mag = 0;
            for (size_t i = 0; i < n; i++) {
                exact += (double)wd[i] * xd[i];
                mag += fabs((double)wd[i] * xd[i]);
            }
            const float vr = r->vec_dot(n, wq, xq), vk = k->vec_dot(n, wq, xq);
            CHECK_MSG(fabs((double)vk - vr) <= 1e-4 * mag + 1e-30, "%s vec_dot %s n=%zu: %.9g vs ref %.9g (mag %.3g)",
                      mz_isa_names[isa], mz_dtype_name(t), n, vk, vr, mag);
            if (isa == MZ_ISA_SCALAR) {
                const double tol = (t == MZ_DT_Q5_1 ? 1e-3 : 1e-5) * mag + 1e-30;
                CHECK_MSG(fabs((double)vr - exact) <= tol, "ref vec_dot %s n=%zu: %.9g vs exact %.9g", mz_dtype_name(t), n,
                          vr, exact);
            }
        }
        free(w);
        free(x);
        free(wd);
        free(xd);
        free(wq);
        free(xq);
    }
}

/* ---- matmul ------------------------------------------------------------------------- */

static void check_matmul(enum mz_isa isa, int t)
{
    const mz_type_kernels *k = mz_kernels_for_isa(isa, t);
    if (!k) return;
    const size_t bl = mz_dtype_block_len(t);
    static const size_t shapes[][3] = {/* rows, tokens, blocks per row */
        {1, 1, 1}, {7, 1, 2}, {5, 7, 3}, {9, 4, 7}, {67, 5, 3}, {3, 9, 1}, {17, 13, 2}, {130, 2, 7},
        {4, 8, 18}, {2, 6, 129}, {300, 3, 1}, {33, 64, 18}};
    for (size_t s = 0; s < MZ_ARRAY_LEN(shapes); s++) {
        const size_t n_rows = shapes[s][0], n_tok = shapes[s][1], n_cols = shapes[s][2] * bl;
        const size_t wrb = mz_dtype_row_bytes(t, n_cols), xrb = mz_dtype_row_bytes(k->vec_dot_type, n_cols);
        const size_t y_stride = n_rows + 3;
        float *wf = malloc(n_rows * n_cols * sizeof *wf), *xf = malloc(n_tok * n_cols * sizeof *xf);
        uint8_t *w = malloc(n_rows * wrb), *x = malloc(n_tok * xrb);
        float *y = malloc(n_tok * y_stride * sizeof *y), *yn = malloc(n_tok * y_stride * sizeof *yn);
        fill_row(wf, n_rows * n_cols);
        for (size_t i = 0; i < n_tok * n_cols; i++) xf[i] = rnd() * (i % 3 == 0 ? 10.0f : 1.0f);
        for (size_t r = 0; r < n_rows; r++) k->quantize(wf + r * n_cols, w + r * wrb, n_cols);
        for (size_t i = 0; i < n_tok; i++) k->from_float(xf + i * n_cols, x + i * xrb, n_cols);
        for (size_t i = 0; i < n_tok; i++)
            for (size_t r = 0; r < n_rows; r++) yn[i * y_stride + r] = k->vec_dot(n_cols, w + r * wrb, x + i * xrb);
        for (int nth = 1; nth <= 4; nth++) {
            for (size_t i = 0; i < n_tok * y_stride; i++) y[i] = NAN;
            if (nth == 4) {
                for (size_t i = 0; i < n_tok; i++)
                    mz_matmul(k, w, wrb, n_cols, n_rows, x + i * xrb, xrb, 1, y + i * y_stride, y_stride, 0, 1);
            } else {
                for (int ith = 0; ith < nth; ith++) mz_matmul(k, w, wrb, n_cols, n_rows, x, xrb, n_tok, y, y_stride, ith, nth);
            }
            int bad = 0;
            for (size_t i = 0; i < n_tok; i++) {
                for (size_t r = 0; r < n_rows; r++) bad += memcmp(&y[i * y_stride + r], &yn[i * y_stride + r], 4) != 0;
                for (size_t r = n_rows; r < y_stride; r++) bad += !isnan(y[i * y_stride + r]);
            }
            CHECK_MSG(bad == 0, "%s matmul %s %zux%zu tok %zu nth %d: %d not bit-equal to vec_dot", mz_isa_names[isa],
                      mz_dtype_name(t), n_rows, n_cols, n_tok, nth, bad);
        }
        const mz_type_kernels *k2 = mz_kernels_for_isa(MZ_ISA_AVX2, t);
        if (isa == MZ_ISA_AVX512 && k2) {
            int bad = 0;
            for (size_t i = 0; i < n_tok; i++)
                for (size_t r = 0; r < n_rows; r++) {
                    const float v2 = k2->vec_dot(n_cols, w + r * wrb, x + i * xrb);
                    bad += memcmp(&v2, &yn[i * y_stride + r], 4) != 0;
                }
            CHECK_MSG(bad == 0, "avx512 vs avx2 %s %zux%zu: %d differ", mz_dtype_name(t), n_rows, n_cols, bad);
        }
        free(wf);
        free(xf);
        free(w);
        free(x);
        free(y);
        free(yn);
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
    return t_done("test_kernels_q5iq");
}
