/*
 * test_kernels.c — kernels against references, with named error bounds.
 *
 *   f16:      exhaustive over all 65536 halves (decode vs ldexp in double,
 *             encode(decode(h)) == h), every midpoint between neighbours
 *             (ties to even) and random floats vs a double-based nearest
 *             search; F16C rows bit-exact with the scalar code.
 *   bf16:     all 65536 patterns round-trip; rounding and NaN cases.
 *   layouts:  hand-built Q8_0/Q4_0/Q4_1 blocks dequantize as the spec says.
 *   quantize: to_float(quantize(x)) within the per-type bound of each block,
 *             with e(v) = f16 storage error of v = max(|v|*2^-11, 2^-25):
 *               Q8_0 d/2 + 127*e(d)          d = amax/127
 *               Q4_0 |d| + 8*e(d)            d = amax/8 (the side opposite the
 *                                            max clips at level 15: one step)
 *               Q4_1 d/2 + 15*e(d) + e(min)  d = (max-min)/15
 *               F16  e(x), BF16 2^-8 relative, F32 exact.
 *   from_float: every SIMD table vs the reference: same d bits, q within 1
 *             (ties round to even in SIMD), F16 bit-exact.
 *   vec_dot:  every SIMD table vs the reference within 1e-4 * sum|w_i x_i|
 *             (summation order only); the reference vs a double dot of the
 *             dequantized rows within 1e-5 (1e-3 for Q4_1: s is stored as f16).
 *   matmul:   every ISA's tiled gemm vs its own vec_dot per (row, token),
 *             bit-exact, on shapes around the register tiles (1 row, 1 token,
 *             every remainder), 1/2/3 thread slices and token-by-token calls;
 *             every y written once, stride padding untouched; the AVX-512 and
 *             AVX2 tiles of the quantized types give identical bits.
 *   rope/rmsnorm/swiglu/add: vs double formulas; swiglu bit-identical on every ISA.
 */
#include "kernels/kernels_impl.h"
#include "testutil.h"
#include "x8_util.h"

#include <float.h>
#include <stdint.h>

static unsigned long long g_rng = 0x1234abcdULL;

static float rnd(void) { return t_rand_float(&g_rng); }

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- f16 ---------------------------------------------------------------------------- */

static double half_value(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    if (e == 31) return (h & 0x8000) ? -INFINITY : INFINITY; /* NaN patterns are not asked for */
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

/* Nearest half by search over the (monotonic) positive finite halves; ties to even. */
static uint16_t half_nearest(float f)
{
    uint32_t u = fbits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    if (isnan(f)) return (uint16_t)(sign | 0x7e00 | ((u & 0x7fffff) >> 13));
    double v = fabs((double)f);
    if (v >= 65520.0) return (uint16_t)(sign | 0x7c00);
    int lo = 0, hi = 0x7bff; /* largest h with value <= v */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (half_value((uint16_t)mid) <= v) lo = mid;
        else hi = mid - 1;
    }
    if (half_value((uint16_t)lo) == v || lo == 0x7bff) return (uint16_t)(sign | lo);
    double dl = v - half_value((uint16_t)lo), dh = half_value((uint16_t)(lo + 1)) - v;
    int r = dl < dh ? lo : dh < dl ? lo + 1 : ((lo & 1) ? lo + 1 : lo);
    return (uint16_t)(sign | r);
}

static void test_f16(void)
{
    int bad_dec = 0, bad_rt = 0;
    static float all[65536];
    static mz_f16 back[65536];
    for (uint32_t h = 0; h < 65536; h++) {
        float f = mz_f16_to_f32((mz_f16)h);
        all[h] = f;
        bool is_nan = ((h >> 10) & 31) == 31 && (h & 1023);
        if (is_nan) {
            /* quieted, payload kept: F16C's behaviour */
            if (!isnan(f) || ((fbits(f) >> 13) & 1023) != ((h & 1023) | 0x200)) bad_dec++;
            if (mz_f32_to_f16(f) != (mz_f16)(h | 0x200)) bad_rt++;
        } else {
            if ((double)f != half_value((uint16_t)h) || (signbit(f) != 0) != ((h & 0x8000) != 0)) bad_dec++;
            if (mz_f32_to_f16(f) != h) bad_rt++;
        }
    }
    CHECK_EQ_INT(bad_dec, 0);
    CHECK_EQ_INT(bad_rt, 0);

    /* Midpoints and their neighbours, both signs. */
    size_t n_mid = 0;
    static float mids[3 * 2 * 0x7c00];
    for (uint32_t h = 0; h < 0x7bff + 1; h++) {
        double a = half_value((uint16_t)h);
        double b = h == 0x7bff ? 65536.0 : half_value((uint16_t)(h + 1));
        float mid = (float)((a + b) / 2);
        CHECK((double)mid == (a + b) / 2); /* exactly representable */
        float ms[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
        for (int k = 0; k < 3; k++) {
            mids[n_mid++] = ms[k];
            mids[n_mid++] = -ms[k];
        }
    }
    int bad_mid = 0;
    for (size_t i = 0; i < n_mid; i++)
        if (mz_f32_to_f16(mids[i]) != half_nearest(mids[i])) bad_mid++;
    CHECK_EQ_INT(bad_mid, 0);
    CHECK(mz_f32_to_f16(65520.0f) == 0x7c00);               /* tie above 65504 goes to inf */
    CHECK(mz_f32_to_f16(nextafterf(65520.0f, 0)) == 0x7bff);
    CHECK(mz_f32_to_f16(ldexpf(1.0f, -25)) == 0);             /* tie with 0 goes to even 0 */
    CHECK(mz_f32_to_f16(nextafterf(ldexpf(1.0f, -25), 1)) == 1);
    CHECK(mz_f32_to_f16(ldexpf(3.0f, -25)) == 2);             /* 1.5 ulp: tie to even 2 */
    CHECK(mz_f32_to_f16(INFINITY) == 0x7c00 && mz_f32_to_f16(-INFINITY) == 0xfc00);
    CHECK(mz_f32_to_f16(FLT_MIN / 4) == 0 && mz_f32_to_f16(-0.0f) == 0x8000);

    enum { N_RAND = 200003 };
    static float rf[N_RAND];
    int bad_rand = 0;
    for (int i = 0; i < N_RAND; i++) {
        uint32_t u = (uint32_t)t_rand_u64(&g_rng);
        /* Half the draws near the f16 range, where the interesting cases are. */
        if (i & 1) u = (u & 0x807fffffu) | ((uint32_t)(96 + (u >> 23) % 48) << 23);
        rf[i] = bitsf(u);
        if (mz_f32_to_f16(rf[i]) != half_nearest(rf[i])) bad_rand++;
    }
    CHECK_EQ_INT(bad_rand, 0);

#if MZ_KERNELS_X86
    if (mz_kernels_cpu_has(MZ_ISA_AVX2)) {
        static float f2[65536];
        static mz_f16 h1[N_RAND], h2[N_RAND];
        static mz_f16 hs[65536];
        for (uint32_t h = 0; h < 65536; h++) hs[h] = (mz_f16)h;
        mz_f16_to_f32_row_avx2(hs, f2, 65533); /* odd length: scalar tail */
        mz_f16_to_f32_row_avx2(hs + 65533, f2 + 65533, 3);
        CHECK(memcmp(f2, all, sizeof all) == 0);
        mz_f32_to_f16_row_avx2(rf, h1, N_RAND);
        mz_f32_to_f16_row_ref(rf, h2, N_RAND);
        CHECK(memcmp(h1, h2, sizeof h1) == 0);
        mz_f32_to_f16_row_avx2(mids, h1, n_mid);
        mz_f32_to_f16_row_ref(mids, h2, n_mid);
        CHECK(memcmp(h1, h2, n_mid * sizeof(mz_f16)) == 0);
        mz_f32_to_f16_row_avx2(all, back, 65536);
        mz_f32_to_f16_row_ref(all, hs, 65536);
        CHECK(memcmp(back, hs, sizeof back) == 0);
    }
#endif
    /* The dispatching row functions agree too. */
    mz_f16 *hb = malloc(65536 * sizeof(mz_f16));
    mz_f32_to_f16_row(all, hb, 65536);
    mz_f32_to_f16_row_ref(all, back, 65536);
    CHECK(memcmp(hb, back, 65536 * sizeof(mz_f16)) == 0);
    free(hb);
}

static void test_bf16(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = mz_bf16_to_f32((mz_bf16)h);
        if (fbits(f) != h << 16) bad++;
        if (!isnan(f) && mz_f32_to_bf16(f) != h) bad++;
        if (isnan(f) && !isnan(mz_bf16_to_f32(mz_f32_to_bf16(f)))) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(mz_f32_to_bf16(bitsf(0x3f808000u)) == 0x3f80); /* tie, even stays */
    CHECK(mz_f32_to_bf16(bitsf(0x3f818000u)) == 0x3f82); /* tie, odd rounds up */
    CHECK(mz_f32_to_bf16(bitsf(0x3f808001u)) == 0x3f81);
    CHECK(mz_f32_to_bf16(bitsf(0x7f800001u)) == 0x7fc0); /* signalling NaN is quieted */
    CHECK(mz_f32_to_bf16(bitsf(0x7f7fffffu)) == 0x7f80); /* FLT_MAX rounds to inf */
}

/* ---- layouts ------------------------------------------------------------------------ */

static void test_layouts(void)
{
    float y[32];
    mz_block_q8_0 b8 = {.d = mz_f32_to_f16(0.25f)};
    for (int j = 0; j < 32; j++) b8.qs[j] = (int8_t)(j - 16);
    mz_to_float_q8_0_ref(&b8, y, 32);
    for (int j = 0; j < 32; j++) CHECK(y[j] == 0.25f * (float)(j - 16));

    mz_block_q4_0 b4 = {.d = mz_f32_to_f16(1.0f)};
    for (int j = 0; j < 16; j++) b4.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    mz_to_float_q4_0_ref(&b4, y, 32);
    for (int j = 0; j < 16; j++) {
        CHECK(y[j] == (float)(j - 8));
        CHECK(y[j + 16] == (float)(15 - j - 8));
    }

    mz_block_q4_1 b41 = {.d = mz_f32_to_f16(0.5f), .m = mz_f32_to_f16(-1.0f)};
    for (int j = 0; j < 16; j++) b41.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    mz_to_float_q4_1_ref(&b41, y, 32);
    for (int j = 0; j < 16; j++) {
        CHECK(y[j] == 0.5f * (float)j - 1.0f);
        CHECK(y[j + 16] == 0.5f * (float)(15 - j) - 1.0f);
    }

    /* The reference quantizers on inputs with exact answers. */
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)(j % 16) - 8.0f; /* max |v| is -8: d = 1 */
    mz_quantize_q4_0_ref(x, &b4, 32);
    CHECK(mz_f16_to_f32(b4.d) == 1.0f);
    for (int j = 0; j < 16; j++) CHECK(b4.qs[j] == (uint8_t)(j | (j << 4)));
    for (int j = 0; j < 32; j++) x[j] = (float)(j % 16) * 0.5f + 2.0f; /* min 2, d = 0.5 */
    mz_quantize_q4_1_ref(x, &b41, 32);
    CHECK(mz_f16_to_f32(b41.d) == 0.5f && mz_f16_to_f32(b41.m) == 2.0f);
    for (int j = 0; j < 16; j++) CHECK(b41.qs[j] == (uint8_t)(j | (j << 4)));
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16) * 0.5f; /* amax 8: d = 8/127 */
    mz_block_q8_1 b81;
    mz_quantize_q8_1_ref(x, &b81, 32);
    int sum = 0;
    for (int j = 0; j < 32; j++) sum += b81.qs[j];
    CHECK(b81.qs[0] == -127);
    CHECK(b81.d == mz_f32_to_f16(8.0f / 127.0f));
    CHECK(b81.s == mz_f32_to_f16(8.0f / 127.0f * (float)sum));
}

/* ---- test data ---------------------------------------------------------------------- */

/* n floats in blocks of 32 with scales spread over 6 decades, plus special
 * blocks: all zero, constant, one outlier, all negative, all positive. */
static void fill_weights(float *x, size_t n)
{
    for (size_t b = 0; b < n / 32 + (n % 32 != 0); b++) {
        float scale = powf(10.0f, 3.0f * rnd());
        for (size_t j = 0; j < 32 && b * 32 + j < n; j++) {
            float v = rnd() * scale;
            switch (b % 7) {
            case 1: v = 0.0f; break;
            case 2: v = 0.37f * scale; break;
            case 3: v = j == 5 ? 50.0f * scale : v * 0.01f; break;
            case 4: v = -fabsf(v) - 0.1f * scale; break;
            case 5: v = fabsf(v) + 0.1f * scale; break;
            default: break;
            }
            x[b * 32 + j] = v;
        }
    }
}

static const int k_types[] = {MZ_DT_F32, MZ_DT_F16, MZ_DT_BF16, MZ_DT_Q8_0, MZ_DT_Q4_0, MZ_DT_Q4_1};
static const size_t k_sizes[] = {32, 64, 96, 160, 4096 + 32};

/* Dequantizes a row of activation type t (the vec_dot_type side). */
static void act_to_float(int t, const void *x, float *y, size_t n)
{
    switch (t) {
    case MZ_DT_F32: mz_to_float_f32_ref(x, y, n); break;
    case MZ_DT_F16: mz_to_float_f16_ref(x, y, n); break;
    case MZ_DT_BF16: mz_to_float_bf16_ref(x, y, n); break;
    case MZ_DT_Q8_0: mz_to_float_q8_0_ref(x, y, n); break;
    case MZ_DT_Q8_1: mz_to_float_q8_1_ref(x, y, n); break;
    default: MZ_ASSERT(0);
    }
}

/* ---- quantize round trip ------------------------------------------------------------ */

/* Largest error of storing v as f16: half an ulp, 2^-25 in the subnormal range. */
static double f16_err(double v) { return fmax(fabs(v) * ldexp(1, -11), ldexp(1, -25)); }

static void test_quantize_roundtrip(void)
{
    for (size_t ti = 0; ti < MZ_ARRAY_LEN(k_types); ti++) {
        const int t = k_types[ti];
        const mz_type_kernels *k = mz_kernels_ref(t);
        CHECK(k != NULL);
        if (!k) continue;
        for (size_t si = 0; si < MZ_ARRAY_LEN(k_sizes); si++) {
            const size_t n = k_sizes[si];
            float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
            void *q = malloc(mz_dtype_row_bytes(t, n));
            fill_weights(x, n);
            k->quantize(x, q, n);
            k->to_float(q, y, n);
            int bad = 0;
            double worst = 0;
            for (size_t b = 0; b < n / 32; b++) {
                const float *xb = x + b * 32, *yb = y + b * 32;
                float amax = 0, mn = xb[0], mx = xb[0];
                for (int j = 0; j < 32; j++) {
                    amax = fmaxf(amax, fabsf(xb[j]));
                    mn = fminf(mn, xb[j]);
                    mx = fmaxf(mx, xb[j]);
                }
                for (int j = 0; j < 32; j++) {
                    double err = fabs((double)xb[j] - (double)yb[j]), bound;
                    switch (t) {
                    case MZ_DT_F32: bound = 0; break;
                    case MZ_DT_F16: bound = f16_err(xb[j]); break;
                    case MZ_DT_BF16: bound = fabs(xb[j]) * ldexp(1, -8); break;
                    case MZ_DT_Q8_0: bound = 0.5 * amax / 127 + 127 * f16_err(amax / 127); break;
                    case MZ_DT_Q4_0: bound = amax / 8 + 8 * f16_err(amax / 8); break;
                    default: bound = 0.5 * (mx - mn) / 15 + 15 * f16_err((mx - mn) / 15) + f16_err(mn); break;
                    }
                    bound *= 1.0 + 1e-5; /* float arithmetic in the quantizer */
                    if (err > bound) bad++;
                    if (bound > 0) worst = fmax(worst, err / bound);
                }
                if (amax == 0.0f)
                    for (int j = 0; j < 32; j++) bad += yb[j] != 0.0f;
            }
            CHECK_MSG(bad == 0, "%s n=%zu: %d values out of bound (worst %.3f of bound)",
                      mz_dtype_name(t), n, bad, worst);
            free(x);
            free(y);
            free(q);
        }
    }
}

/* ---- from_float ---------------------------------------------------------------------- */

static void check_from_float(const char *isa, int t, const mz_type_kernels *k, const mz_type_kernels *r)
{
    const int at = k->vec_dot_type;
    for (size_t si = 0; si < MZ_ARRAY_LEN(k_sizes); si++) {
        const size_t n = k_sizes[si];
        const size_t nbytes = mz_dtype_row_bytes(at, n);
        float *x = malloc(n * sizeof *x);
        uint8_t *a = malloc(nbytes), *b = malloc(nbytes);
        for (size_t i = 0; i < n; i++) x[i] = rnd() * (i % 64 < 32 ? 3.0f : 0.001f);
        /* Exact ties in x/d: a block with amax 127 has d = 1 and x*(1/d) = x. */
        for (size_t i = 0; i < 32; i++) x[i] = i == 0 ? 127.0f : (float)(i % 9) - 4.5f;
        k->from_float(x, a, n);
        r->from_float(x, b, n);
        if (at == MZ_DT_Q8_0 || at == MZ_DT_Q8_1) {
            const size_t bs = mz_dtype_block_bytes(at), off = at == MZ_DT_Q8_0 ? 2 : 4;
            int bad = 0;
            for (size_t i = 0; i < n / 32; i++) {
                const uint8_t *pa = a + i * bs, *pb = b + i * bs;
                bad += memcmp(pa, pb, 2) != 0; /* d */
                int diff = 0;
                for (int j = 0; j < 32; j++) {
                    int qa = (int8_t)pa[off + (size_t)j], qb = (int8_t)pb[off + (size_t)j];
                    bad += abs(qa - qb) > 1;
                    diff += qa - qb;
                }
                if (at == MZ_DT_Q8_1) {
                    mz_f16 sa, sb, d;
                    memcpy(&sa, pa + 2, 2);
                    memcpy(&sb, pb + 2, 2);
                    memcpy(&d, pa, 2);
                    double tol = fabs(mz_f16_to_f32(d)) * (abs(diff) + 0.5) + fabs(mz_f16_to_f32(sb)) * ldexp(1, -10);
                    bad += fabs((double)mz_f16_to_f32(sa) - (double)mz_f16_to_f32(sb)) > tol;
                }
            }
            CHECK_MSG(bad == 0, "%s from_float for %s n=%zu: %d mismatches", isa, mz_dtype_name(t), n, bad);
        } else {
            CHECK_MSG(memcmp(a, b, nbytes) == 0, "%s from_float for %s n=%zu differs", isa, mz_dtype_name(t), n);
        }
        free(x);
        free(a);
        free(b);
    }
}

/* ---- vec_dot ------------------------------------------------------------------------- */

static void check_vec_dot(const char *isa, int t, const mz_type_kernels *k, const mz_type_kernels *r)
{
    const int at = r->vec_dot_type;
    size_t sizes[MZ_ARRAY_LEN(k_sizes) + 4];
    size_t n_sizes = 0;
    for (size_t i = 0; i < MZ_ARRAY_LEN(k_sizes); i++) sizes[n_sizes++] = k_sizes[i];
    if (mz_dtype_block_len(t) == 1) { /* float rows of any length: SIMD tails */
        sizes[n_sizes++] = 1;
        sizes[n_sizes++] = 7;
        sizes[n_sizes++] = 33;
        sizes[n_sizes++] = 100;
    }
    for (size_t si = 0; si < n_sizes; si++) {
        const size_t n = sizes[si];
        float *w = malloc(n * sizeof *w), *x = malloc(n * sizeof *x);
        float *wd = malloc(n * sizeof *wd), *xd = malloc(n * sizeof *xd);
        void *wq = malloc(mz_dtype_row_bytes(t, n)), *xq = malloc(mz_dtype_row_bytes(at, n));
        for (int rep = 0; rep < 4; rep++) {
            fill_weights(w, n);
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
            const float vr = r->vec_dot(n, wq, xq);
            const float vk = k->vec_dot(n, wq, xq);
            CHECK_MSG(fabs((double)vk - vr) <= 1e-4 * mag + 1e-30,
                      "%s vec_dot %s n=%zu: %.9g vs ref %.9g (mag %.3g)", isa, mz_dtype_name(t), n, vk, vr, mag);
            if (k == r) {
                double tol = (t == MZ_DT_Q4_1 ? 1e-3 : 1e-5) * mag + 1e-30;
                CHECK_MSG(fabs((double)vr - exact) <= tol, "ref vec_dot %s n=%zu: %.9g vs exact %.9g",
                          mz_dtype_name(t), n, vr, exact);
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

static void test_tables(void)
{
    const char *isa = mz_kernels_isa();
    CHECK(!strcmp(isa, "scalar") || !strcmp(isa, "avx2") || !strcmp(isa, "avx512") || !strcmp(isa, "neon"));
    printf("test_kernels: active isa %s\n", isa);
    for (size_t ti = 0; ti < MZ_ARRAY_LEN(k_types); ti++) {
        CHECK(mz_kernels_for(k_types[ti]) != NULL);
        CHECK(mz_kernels_ref(k_types[ti]) != NULL);
    }
    CHECK(mz_kernels_for(MZ_DT_Q8_1) == NULL); /* activation-only type */
    CHECK(mz_kernels_for(16) == NULL);         /* IQ2_XXS: unsupported */
    CHECK(mz_kernels_for(-1) == NULL && mz_kernels_for(1000) == NULL);
    CHECK(mz_kernels_ref(MZ_DT_Q4_1)->vec_dot_type == MZ_DT_Q8_1);
    CHECK(mz_kernels_ref(MZ_DT_Q4_0)->vec_dot_type == MZ_DT_Q8_0);
    CHECK(mz_kernels_ref(MZ_DT_F16)->vec_dot_type == MZ_DT_F16);

    const char *const *names = mz_isa_names;
    for (int i = 0; i < MZ_ISA_COUNT; i++) {
        if (!mz_kernels_cpu_has((enum mz_isa)i)) {
            printf("test_kernels: %s not available here, not tested\n", names[i]);
            continue;
        }
        for (size_t ti = 0; ti < MZ_ARRAY_LEN(k_types); ti++) {
            const int t = k_types[ti];
            const mz_type_kernels *k = mz_kernels_for_isa((enum mz_isa)i, t), *r = mz_kernels_ref(t);
            CHECK(k != NULL && k->vec_dot_type == r->vec_dot_type);
            if (!k) continue;
            check_from_float(names[i], t, k, r);
            check_vec_dot(names[i], t, k, r);
        }
    }
}

/* ---- matmul ------------------------------------------------------------------------- */

/* The sizes of one mz_matmul check: weight rows of wrb bytes (n_cols
 * values, n_rows of them), activation rows of xrb bytes (n_tok of them),
 * output rows y_stride floats apart. */
typedef struct matmul_shape {
    size_t wrb, n_cols, n_rows, xrb, n_tok, y_stride;
} matmul_shape;

/* y = W x through mz_matmul in nth slices (nth 1..3), or one call per token
 * (nth 4), into y first set to NaN; the outputs not bit-equal to want, plus
 * the entries past the rows up to pad_end in each output row left not NaN. */
static int matmul_mismatches(const mz_type_kernels *k, const void *w, const uint8_t *x, const matmul_shape *s,
                             int nth, float *y, const float *want, size_t pad_end)
{
    for (size_t i = 0; i < s->n_tok * s->y_stride; i++) y[i] = NAN;
    if (nth == 4) {
        for (size_t i = 0; i < s->n_tok; i++)
            mz_matmul(k, w, s->wrb, s->n_cols, s->n_rows, x + i * s->xrb, s->xrb, 1, y + i * s->y_stride,
                      s->y_stride, 0, 1);
    } else {
        for (int ith = 0; ith < nth; ith++)
            mz_matmul(k, w, s->wrb, s->n_cols, s->n_rows, x, s->xrb, s->n_tok, y, s->y_stride, ith, nth);
    }
    int bad = 0;
    for (size_t i = 0; i < s->n_tok; i++) {
        for (size_t r = 0; r < s->n_rows; r++)
            bad += memcmp(&y[i * s->y_stride + r], &want[i * s->y_stride + r], 4) != 0;
        for (size_t r = s->n_rows; r < pad_end; r++) bad += !isnan(y[i * s->y_stride + r]);
    }
    return bad;
}

static void test_matmul_isa(enum mz_isa isa, const char *isa_name)
{
    /* Edge shapes around the register tiles (up to 4 rows x 6 tokens; F16
     * with one token, 8 rows): one row, one token, every remainder, blocks
     * of rows larger than L1. */
    static const size_t shapes[][3] = {/* rows, tokens, cols */
        {1, 1, 32}, {7, 1, 64}, {67, 5, 96}, {33, 3, 4128}, {130, 2, 64}, {3, 9, 32},
        {5, 7, 160}, {9, 4, 64}, {4, 8, 96}, {2, 6, 32}, {17, 13, 128}, {600, 3, 64},
        /* F16, one token: two 8-row tiles, a 4-row one and a single row. */
        {21, 1, 576},
        /* F16 with several tokens converts chunks of activation rows (tokens
         * per chunk = 48K floats / cols, rounded to whole tiles) and walks the
         * rows in 128 KiB super-blocks (gemm_xf on AVX2: as many rows as 48K
         * floats hold, converted to F32 once): two chunks and three super-blocks,
         * column tails (float types only), the widest one-panel row (3072). */
        {150, 70, 1000}, {70, 11, 3000}, {5, 50, 1001}, {9, 17, 3072},
        /* Longer F16 rows go in column panels (at most 2048 columns, 12
         * tokens per chunk) whose vector accumulators carry over: one column
         * past the one-panel limit, two panels with three chunks and more
         * rows than one super-block (128 rows AVX-512, 256 AVX2), five
         * panels with the llama3.2-1b down product's width plus a scalar tail
         * in both lane widths (8203 % 16 = 11, % 8 = 3) or in AVX-512 only
         * (8200), token counts 1, 2, 7, 64. */
        {5, 7, 3073}, {300, 25, 4096}, {13, 64, 8203}, {7, 2, 8200}, {6, 1, 8192}, {11, 7, 8192}};
    for (size_t ti = 0; ti < MZ_ARRAY_LEN(k_types); ti++) {
        const int t = k_types[ti];
        const mz_type_kernels *k = mz_kernels_for_isa(isa, t);
        if (!k) continue;
        for (size_t s = 0; s < MZ_ARRAY_LEN(shapes); s++) {
            const size_t n_rows = shapes[s][0], n_tok = shapes[s][1], n_cols = shapes[s][2];
            if (n_cols % mz_dtype_block_len(t)) continue; /* the float types' tails */
            const size_t wrb = mz_dtype_row_bytes(t, n_cols), xrb = mz_dtype_row_bytes(k->vec_dot_type, n_cols);
            const size_t y_stride = n_rows + 3;
            float *wf = malloc(n_rows * n_cols * sizeof *wf), *xf = malloc(n_tok * n_cols * sizeof *xf);
            uint8_t *w = malloc(n_rows * wrb), *x = malloc(n_tok * xrb);
            float *y = malloc(n_tok * y_stride * sizeof *y), *yn = malloc(n_tok * y_stride * sizeof *yn);
            fill_weights(wf, n_rows * n_cols);
            for (size_t i = 0; i < n_tok * n_cols; i++) xf[i] = rnd() * (i % 3 == 0 ? 10.0f : 1.0f);
            for (size_t r = 0; r < n_rows; r++) k->quantize(wf + r * n_cols, w + r * wrb, n_cols);
            for (size_t i = 0; i < n_tok; i++) k->from_float(xf + i * n_cols, x + i * xrb, n_cols);
            for (size_t i = 0; i < n_tok; i++)
                for (size_t r = 0; r < n_rows; r++) yn[i * y_stride + r] = k->vec_dot(n_cols, w + r * wrb, x + i * xrb);
            /* 1..3 thread slices, and the tokens one call at a time (decode). */
            for (int nth = 1; nth <= 4; nth++) {
                const matmul_shape sh = {wrb, n_cols, n_rows, xrb, n_tok, y_stride};
                int bad = matmul_mismatches(k, w, x, &sh, nth, y, yn, y_stride);
                CHECK_MSG(bad == 0, "%s matmul %s %zux%zu tok %zu nth %d: %d not bit-equal to vec_dot", isa_name,
                          mz_dtype_name(t), n_rows, n_cols, n_tok, nth, bad);
            }
            /* gemm_xf (F16): the activations as F32 rows of the F16 values,
             * shared by all slices (rows a few floats longer than needed, as
             * any stride may come), give gemm's bits: whole, in 4-row-aligned
             * slices, and one token at a time. */
            if (k->gemm_xf) {
                CHECK(t == MZ_DT_F16 && k->vec_dot_type == MZ_DT_F16);
                const size_t xs = n_cols + 5;
                float *x32 = malloc(n_tok * xs * sizeof *x32), *x32r = malloc(n_cols * sizeof *x32r);
                float *yg = malloc(n_tok * y_stride * sizeof *yg);
                int bad_round = 0;
                for (size_t i = 0; i < n_tok; i++) {
                    mz_f16_to_f32_row_ref((const mz_f16 *)(x + i * xrb), x32 + i * xs, n_cols);
                    mz_f32_round_f16_row(xf + i * n_cols, x32r, n_cols);
                    bad_round += memcmp(x32r, x32 + i * xs, n_cols * sizeof *x32r) != 0;
                }
                CHECK_MSG(bad_round == 0, "%s mz_f32_round_f16_row %zu cols: %d rows differ from F16 -> F32", isa_name,
                          n_cols, bad_round);
                for (size_t i = 0; i < n_tok * y_stride; i++) yg[i] = NAN;
                k->gemm(n_cols, w, wrb, 0, n_rows, x, xrb, n_tok, yg, y_stride);
                for (int mode = 0; mode < 3; mode++) {
                    for (size_t i = 0; i < n_tok * y_stride; i++) y[i] = NAN;
                    if (mode == 0) {
                        k->gemm_xf(n_cols, w, wrb, 0, n_rows, x32, xs * sizeof(float), n_tok, y, y_stride);
                    } else if (mode == 1) {
                        for (size_t r0 = 0; r0 < n_rows; r0 += 8)
                            mz_matmul_rows_xf(k, w, wrb, n_cols, n_rows, x32, xs * sizeof(float), n_tok, y, y_stride,
                                              r0, r0 + 8 < n_rows ? r0 + 8 : n_rows);
                    } else {
                        for (size_t i = 0; i < n_tok; i++)
                            mz_matmul_rows_xf(k, w, wrb, n_cols, n_rows, x32 + i * xs, xs * sizeof(float), 1,
                                              y + i * y_stride, y_stride, 0, n_rows);
                    }
                    int bad = 0;
                    for (size_t i = 0; i < n_tok; i++) {
                        for (size_t r = 0; r < n_rows; r++) {
                            bad += memcmp(&y[i * y_stride + r], &yg[i * y_stride + r], 4) != 0;
                            bad += memcmp(&y[i * y_stride + r], &yn[i * y_stride + r], 4) != 0;
                        }
                        for (size_t r = n_rows; r < y_stride; r++) bad += !isnan(y[i * y_stride + r]);
                    }
                    CHECK_MSG(bad == 0, "%s gemm_xf %zux%zu tok %zu mode %d: %d not bit-equal to gemm", isa_name, n_rows,
                              n_cols, n_tok, mode, bad);
                }
                free(x32);
                free(x32r);
                free(yg);
            }
            /* Tiled kernels of the SIMD ISAs give the same bits as each other
             * (exact integer lanes, same float sequence: gemm_x86.h). */
            const mz_type_kernels *k2 = mz_kernels_for_isa(MZ_ISA_AVX2, t);
            if (isa == MZ_ISA_AVX512 && k2 && t != MZ_DT_F32 && t != MZ_DT_F16) {
                int bad = 0;
                for (size_t i = 0; i < n_tok; i++)
                    for (size_t r = 0; r < n_rows; r++) {
                        float v2 = k2->vec_dot(n_cols, w + r * wrb, x + i * xrb);
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
}

/* Both walks of the AVX-512 one-token F16 product (mz_kernels_f16_gemv_rows:
 * the CPU picks one) give the same bits, checked on whichever CPU runs this. */
static void test_matmul(void)
{
    const char *const *names = mz_isa_names;
    const bool rows = mz_kernels_f16_gemv_rows();
    for (int walk = 0; walk < 2; walk++) {
        mz_kernels_set_f16_gemv_rows(walk == 1);
        for (int i = 0; i < MZ_ISA_COUNT; i++)
            if (mz_kernels_cpu_has((enum mz_isa)i)) test_matmul_isa((enum mz_isa)i, names[i]);
    }
    mz_kernels_set_f16_gemv_rows(rows);
}

/* ---- x8 layout (repack.c) -------------------------------------------------------------- */

/* Every ISA's x8 gemm on repacked weights (the scalar one included) gives,
 * bit for bit, the x8 vec_dot of the plain row, for any slicing and token
 * count; the x8 arithmetic stays within the plain reference's tolerance;
 * repack then unpack gives the original bytes back. */
static void test_x8(void)
{
    static const size_t shapes[][3] = {/* rows, tokens, cols */
        {8, 1, 32}, {16, 5, 64}, {72, 9, 576}, {8, 3, 4128}, {24, 4, 16384}, {136, 13, 96}, {64, 512, 64}};
    static const int types[] = {MZ_DT_Q4_0, MZ_DT_Q4_1, MZ_DT_Q8_0};
    int n_checked = 0;
    for (size_t ti = 0; ti < MZ_ARRAY_LEN(types); ti++) {
        const int t = types[ti];
        const mz_type_kernels *kr = mz_kernels_x8_for_isa(MZ_ISA_SCALAR, t), *kp = mz_kernels_ref(t);
        CHECK(kr != NULL && kr->row_group == 8 && kr->vec_dot_type == kp->vec_dot_type);
        CHECK(!mz_x8_shape_ok(t, 12, 64) && !mz_x8_shape_ok(t, 8, 48) && !mz_x8_shape_ok(t, 8, 32 * (MZ_X8_MAX_BLOCKS + 1)));
        for (size_t s = 0; s < MZ_ARRAY_LEN(shapes); s++) {
            const size_t n_rows = shapes[s][0], n_tok = shapes[s][1], n_cols = shapes[s][2];
            CHECK(mz_x8_shape_ok(t, n_rows, n_cols));
            const size_t wrb = mz_dtype_row_bytes(t, n_cols), xrb = mz_dtype_row_bytes(kr->vec_dot_type, n_cols);
            const size_t y_stride = n_rows + 1;
            float *wf = malloc(n_rows * n_cols * sizeof *wf), *xf = malloc(n_tok * n_cols * sizeof *xf);
            uint8_t *w = malloc(n_rows * wrb), *wp = malloc(n_rows * wrb), *x = malloc(n_tok * xrb);
            uint8_t *scratch = malloc(8 * wrb);
            float *y = malloc(n_tok * y_stride * sizeof *y), *yn = malloc(n_tok * y_stride * sizeof *yn);
            fill_weights(wf, n_rows * n_cols);
            for (size_t i = 0; i < n_tok * n_cols; i++) xf[i] = rnd() * (i % 3 == 0 ? 10.0f : 1.0f);
            for (size_t r = 0; r < n_rows; r++) kp->quantize(wf + r * n_cols, w + r * wrb, n_cols);
            for (size_t i = 0; i < n_tok; i++) kp->from_float(xf + i * n_cols, x + i * xrb, n_cols);
            memcpy(wp, w, n_rows * wrb);
            mz_repack_x8(t, wp, n_rows, n_cols, scratch);
            CHECK_MSG(memcmp(wp, w, n_rows * wrb) != 0, "repack %s changed nothing", mz_dtype_name(t));
            int bad_ref = 0;
            for (size_t i = 0; i < n_tok; i++)
                for (size_t r = 0; r < n_rows; r++) {
                    const float v = kr->vec_dot(n_cols, w + r * wrb, x + i * xrb);
                    const float vp = kp->vec_dot(n_cols, w + r * wrb, x + i * xrb);
                    yn[i * y_stride + r] = v;
                    /* same exact block integers, another float order: relative
                     * to the magnitude of the terms (the plain ref's tolerance) */
                    double mag = 0;
                    for (size_t c = 0; c < n_cols; c++) mag += fabs((double)wf[r * n_cols + c] * xf[i * n_cols + c]);
                    bad_ref += fabs((double)v - (double)vp) > 1e-5 * mag + 1e-6;
                }
            CHECK_MSG(bad_ref == 0, "x8 ref %s %zux%zu: %d outputs off the plain reference", mz_dtype_name(t),
                      n_rows, n_cols, bad_ref);
            for (int isa = 0; isa < MZ_ISA_COUNT; isa++) {
                const mz_type_kernels *k = mz_kernels_x8_for_isa((enum mz_isa)isa, t);
                if (!k) continue;
                for (int nth = 1; nth <= 4; nth++) {
                    const matmul_shape sh = {wrb, n_cols, n_rows, xrb, n_tok, y_stride};
                    int bad = matmul_mismatches(k, wp, x, &sh, nth, y, yn, n_rows + 1);
                    CHECK_MSG(bad == 0, "%s x8 matmul %s %zux%zu tok %zu nth %d: %d not bit-equal to the x8 reference",
                              mz_isa_names[isa], mz_dtype_name(t), n_rows, n_cols, n_tok, nth, bad);
                    n_checked++;
                }
            }
            /* The plain layout's SIMD kernels give the x8 order too (gathering
             * rows), so a tensor answers alike repacked or not. */
            for (int isa = MZ_ISA_AVX2; isa < MZ_ISA_COUNT; isa++) {
                const mz_type_kernels *k = mz_kernels_for_isa((enum mz_isa)isa, t);
                if (!k || isa == MZ_ISA_NEON) continue;
                for (size_t i = 0; i < n_tok * y_stride; i++) y[i] = NAN;
                for (int ith = 0; ith < 3; ith++) mz_matmul(k, w, wrb, n_cols, n_rows, x, xrb, n_tok, y, y_stride, ith, 3);
                int bad = 0;
                for (size_t i = 0; i < n_tok; i++)
                    for (size_t r = 0; r < n_rows; r++) bad += memcmp(&y[i * y_stride + r], &yn[i * y_stride + r], 4) != 0;
                CHECK_MSG(bad == 0, "%s plain matmul %s %zux%zu tok %zu: %d not bit-equal to the x8 reference",
                          mz_isa_names[isa], mz_dtype_name(t), n_rows, n_cols, n_tok, bad);
                n_checked++;
            }
            CHECK_MSG(x8_row_lookup_mismatches(t, wp, w, n_rows, n_cols) == 0, /* a tied embedding's lookup */
                      "x8 row lookup %s: rows differ from the plain rows", mz_dtype_name(t));
            mz_unpack_x8(t, wp, n_rows, n_cols, scratch);
            CHECK_MSG(memcmp(wp, w, n_rows * wrb) == 0, "unpack(repack(%s)) differs", mz_dtype_name(t));
            free(wf);
            free(xf);
            free(w);
            free(wp);
            free(x);
            free(scratch);
            free(y);
            free(yn);
        }
    }
    CHECK(n_checked > 0);
    /* The layout choice follows the active kernels and the shape. */
    const int l = mz_kernels_pick_layout(MZ_DT_Q4_0, 64, 576);
    CHECK(l == MZ_LAYOUT_PLAIN || (l == MZ_LAYOUT_X8 && mz_kernels_for_layout(MZ_DT_Q4_0, l)->row_group == 8));
    CHECK(mz_kernels_pick_layout(MZ_DT_Q4_0, 60, 576) == MZ_LAYOUT_PLAIN);
    CHECK(mz_kernels_pick_layout(MZ_DT_F16, 64, 576) == MZ_LAYOUT_PLAIN);
    CHECK(mz_kernels_for_layout(MZ_DT_F16, MZ_LAYOUT_PLAIN) == mz_kernels_for(MZ_DT_F16));
}

/* ---- ops ---------------------------------------------------------------------------- */

static void test_rope(void)
{
    static const int rots[][2] = {{64, 64}, {64, 32}, {128, 128}, {32, 32}}; /* head_dim, n_rot */
    static const int poss[] = {0, 1, 17, 300, 4000};
    static const float bases[] = {10000.0f, 1000000.0f};
    const int n_head = 3;
    float x[3 * 128], y[3 * 128], z[3 * 128];
    /* Llama 3.1+'s divisors (rope_freqs): 1 for the high frequencies, up to
     * 32 for the low ones, odd values between. */
    float factors[64];
    for (int i = 0; i < 64; i++) factors[i] = i < 8 ? 1.0f : i < 16 ? 1.0f + 3.7f * (float)(i - 7) : 32.0f;
    for (int ff = 0; ff < 2; ff++) {
        for (size_t ri = 0; ri < MZ_ARRAY_LEN(rots); ri++) {
            const int hd = rots[ri][0], n_rot = rots[ri][1];
            for (size_t pi = 0; pi < MZ_ARRAY_LEN(poss); pi++) {
                for (size_t bi = 0; bi < MZ_ARRAY_LEN(bases); bi++) {
                    for (int neox = 0; neox < 2; neox++) {
                        const int pos = poss[pi];
                        for (int i = 0; i < n_head * hd; i++) x[i] = y[i] = z[i] = rnd();
                        const float *fac = ff ? factors : NULL;
                        mz_rope(y, n_head, hd, n_rot, pos, bases[bi], fac, neox);
                        /* Bit-exact replica of llama.cpp's float theta recurrence. */
                        const float ts = powf(bases[bi], -2.0f / (float)n_rot);
                        float theta = (float)pos;
                        for (int i = 0; i < n_rot / 2; i++, theta *= ts) {
                            const int i0 = neox ? i : 2 * i, i1 = neox ? i + n_rot / 2 : 2 * i + 1;
                            const float t = fac ? theta / fac[i] : theta; /* rope_yarn(theta / ff) */
                            for (int h = 0; h < n_head; h++) {
                                float a = z[h * hd + i0], b = z[h * hd + i1];
                                z[h * hd + i0] = a * cosf(t) - b * sinf(t);
                                z[h * hd + i1] = a * sinf(t) + b * cosf(t);
                            }
                        }
                        CHECK(memcmp(y, z, (size_t)(n_head * hd) * sizeof(float)) == 0);
                        /* The formula in double: float theta rounding grows with pos and i. */
                        const double bound = 1e-5 + 3e-7 * pos * (n_rot / 2);
                        int bad = 0;
                        for (int h = 0; h < n_head; h++) {
                            for (int i = 0; i < n_rot / 2; i++) {
                                const double th = pos * pow(bases[bi], -2.0 * i / n_rot) / (fac ? fac[i] : 1.0);
                                const int i0 = neox ? i : 2 * i, i1 = neox ? i + n_rot / 2 : 2 * i + 1;
                                const double a = x[h * hd + i0], b = x[h * hd + i1];
                                bad += fabs(y[h * hd + i0] - (a * cos(th) - b * sin(th))) > bound;
                                bad += fabs(y[h * hd + i1] - (a * sin(th) + b * cos(th))) > bound;
                            }
                            for (int d = n_rot; d < hd; d++) bad += y[h * hd + d] != x[h * hd + d];
                        }
                        CHECK_MSG(bad == 0, "rope hd %d n_rot %d pos %d base %g neox %d factors %d: %d bad", hd, n_rot,
                                  pos, (double)bases[bi], neox, ff, bad);
                    }
                }
            }
        }
    }
}

static void test_rows(void)
{
    static const size_t ns[] = {1, 7, 576, 4096};
    for (size_t ni = 0; ni < MZ_ARRAY_LEN(ns); ni++) {
        const size_t n = ns[ni];
        float *x = malloc(n * 4), *w = malloc(n * 4), *y = malloc(n * 4), *u = malloc(n * 4);
        for (size_t i = 0; i < n; i++) {
            x[i] = rnd() * 10.0f;
            w[i] = rnd();
            u[i] = rnd();
        }
        double ss = 0;
        for (size_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
        const double sc = 1.0 / sqrt(ss / (double)n + 1e-5);
        int bad = 0;
        mz_rmsnorm(x, w, y, n, 1e-5f);
        for (size_t i = 0; i < n; i++) bad += fabs(y[i] - x[i] * sc * w[i]) > 1e-5 * fabs(x[i] * sc) + 1e-7;
        mz_rmsnorm(x, NULL, y, n, 1e-5f);
        for (size_t i = 0; i < n; i++) bad += fabs(y[i] - x[i] * sc) > 1e-5 * fabs(x[i] * sc) + 1e-7;
        CHECK_MSG(bad == 0, "rmsnorm n=%zu: %d bad", n, bad);

        bad = 0;
        mz_swiglu(x, u, y, n);
        for (size_t i = 0; i < n; i++) {
            double s = x[i] / (1.0 + exp(-(double)x[i])) * u[i];
            bad += fabs(y[i] - s) > 1e-6 * fabs(s) + 1e-7;
        }
        CHECK_MSG(bad == 0, "swiglu n=%zu: %d bad", n, bad);

        memcpy(y, x, n * 4);
        mz_add_inplace(y, w, n);
        bad = 0;
        for (size_t i = 0; i < n; i++) bad += y[i] != x[i] + w[i];
        CHECK_EQ_INT(bad, 0);
        free(x);
        free(w);
        free(y);
        free(u);
    }
    /* Large swiglu inputs stay finite (exp(-x) overflow gives 0, not NaN). */
    float g[2] = {-100.0f, 100.0f}, uu[2] = {1.0f, 1.0f}, o[2];
    mz_swiglu(g, uu, o, 2);
    CHECK(o[0] == 0.0f || fabsf(o[0]) < 1e-30f);
    CHECK(o[1] == 100.0f);
}

/* SwiGLU gives the same bits on every ISA (kernels_impl.h, mz_swiglu1): the
 * vector forms against the scalar one over random inputs, the edges of the
 * exp polynomial's range (-87), signed zeros, huge and tiny values and
 * tails of every length; and the scalar form within 1e-6 of the double
 * formula over [-100, 100]. */
static void test_swiglu_isas(void)
{
    enum { N = 4096 + 15 };
    float *g = malloc(N * 4), *u = malloc(N * 4), *ref = malloc(N * 4), *y = malloc(N * 4);
    static const float edge[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 86.9f, -86.9f, 87.0f, -87.0f, 87.1f, -87.1f,
                                 88.7f, -88.7f, 100.0f, -100.0f, 1e30f, -1e30f, 0.5f, -0.5f, 1.0f, -1.0f};
    for (size_t i = 0; i < N; i++) {
        g[i] = i < MZ_ARRAY_LEN(edge) ? edge[i] : rnd() * (i % 3 == 0 ? 100.0f : 8.0f);
        u[i] = rnd() * 2.0f;
    }
    mz_swiglu_ref(g, u, ref, N);
    int bad = 0;
    for (size_t i = 0; i < N; i++) {
        const double x = g[i], s = fabs(x) > 100.0 ? 0.0 : x / (1.0 + exp(-x)) * u[i];
        if (fabs(x) <= 100.0) bad += fabs(ref[i] - s) > 1e-6 * fabs(s) + 1e-7;
    }
    CHECK_MSG(bad == 0, "swiglu (scalar form) vs double: %d bad", bad);
#if MZ_KERNELS_X86
    static const struct { enum mz_isa isa; void (*fn)(const float *, const float *, float *, size_t); } v[] = {
        {MZ_ISA_AVX2, mz_swiglu_avx2}, {MZ_ISA_AVX512, mz_swiglu_avx512}};
    for (size_t k = 0; k < MZ_ARRAY_LEN(v); k++) {
        if (!mz_kernels_cpu_has(v[k].isa)) {
            t_skip_part(mz_isa_names[v[k].isa], "swiglu: this CPU lacks the ISA");
            continue;
        }
        for (size_t n = N - 15; n <= N; n++) { /* every tail length */
            memset(y, 0xff, N * 4);
            v[k].fn(g, u, y, n);
            bad = 0;
            for (size_t i = 0; i < n; i++) bad += memcmp(&y[i], &ref[i], 4) != 0;
            CHECK_MSG(bad == 0, "swiglu %s n=%zu: %d values differ from the scalar form", mz_isa_names[v[k].isa],
                      n, bad);
        }
    }
#endif
    free(g);
    free(u);
    free(ref);
    free(y);
}

/* GELU as ggml's GELU_FP16 path computes it, element by element: the input
 * rounded to F16, the tanh formula, the result rounded to F16; exact 0 at or
 * below -10 and the input itself at or above 10. */
static float gelu_f16_direct(float x)
{
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    const float xh = mz_f16_to_f32(mz_f32_to_f16(x));
    return mz_f16_to_f32(mz_f32_to_f16(
        0.5f * xh * (1.0f + tanhf(0.79788456080286535587989211986876f * xh * (1.0f + 0.044715f * xh * xh)))));
}

static void test_geglu(void)
{
    enum { N = 4099 };
    static float g[N], u[N], y[N];
    for (int i = 0; i < N; i++) {
        g[i] = i < 8 ? (float[]){-10.0f, -9.999f, 10.0f, 9.999f, 0.0f, -0.0f, 1e-8f, 250.0f}[i] : 24.0f * rnd();
        u[i] = i % 7 == 0 ? 1.0f : rnd();
    }
    mz_geglu(g, u, y, N);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += y[i] != gelu_f16_direct(g[i]) * u[i];
    CHECK_MSG(bad == 0, "geglu: %d of %d outputs differ from the element-wise formula", bad, N);
}

int main(void)
{
    mz_kernels_init();
    mz_kernels_init(); /* idempotent */
    test_f16();
    test_bf16();
    test_layouts();
    test_quantize_roundtrip();
    test_tables();
    test_matmul();
    test_x8();
    test_rope();
    test_rows();
    test_swiglu_isas();
    test_geglu();
    return t_done("test_kernels");
}
