/*
 * test_kernels_kquant.c — the K-quant weight types Q2_K..Q6_K (kquant_*.c).
 *
 *   layouts:  to_float of random super-blocks (random bytes, random finite
 *             f16 d / dmin) equals, bit for bit, a dequantizer written here
 *             from ggml's spec in ggml's own loop order (spec_dequant).
 *   vec_dot:  the reference vs a double dot of the dequantized rows within
 *             1e-5 of the sum of |terms| (the scale part and the min part
 *             counted apart, since they cancel); every ISA's vec_dot equals
 *             the reference BIT FOR BIT (tolerance 0: the same integers and
 *             float steps) on 1, 2, 3, 7, 16 and 23 blocks, random and
 *             extreme blocks and activations; every ISA's from_float gives
 *             the reference's Q8_K bytes; mz_matmul equals vec_dot.
 *   x8:       Q4_K, Q5_K, Q6_K repacked (repack.c): every ISA's x8 gemm
 *             (the scalar x8 reference included) equals the plain reference
 *             vec_dot bit for bit on odd shapes (8..136 rows, 1..19 tokens, 1
 *             to 64 super-blocks, random bytes and our quantizer's blocks),
 *             split over 1..3 threads and token by token; unpack(repack)
 *             gives the bytes back; shapes off the layout are refused.
 *   quantize: RMSE / RMS of to_float(quantize(x)) on Gaussian rows with
 *             varying local scale under a bound per type, strictly ordered
 *             Q6_K < Q5_K < Q4_K < Q3_K < Q2_K; all-zero blocks decode to 0;
 *             tiny, huge, constant, one-sign and outlier blocks decode to
 *             finite values within the block's range; inf / NaN input
 *             quantizes without undefined behaviour (run under UBSan).
 */
#include "kernels/kernels_impl.h"
#include "testutil.h"
#include "x8_util.h"

#include <stdint.h>

static unsigned long long g_rng = 0x5eedf00dULL;

static const int k_types[] = {MZ_DT_Q2_K, MZ_DT_Q3_K, MZ_DT_Q4_K, MZ_DT_Q5_K, MZ_DT_Q6_K};
/* Blocks per row in the checks: odd counts and the widths of real models. */
static const size_t k_blocks[] = {1, 2, 3, 7, 16, 23};

static float f16v(const uint8_t *p)
{
    mz_f16 h;
    memcpy(&h, p, 2);
    return mz_f16_to_f32(h);
}

/* ---- dequantization as ggml's spec writes it ------------------------------------------ */

/*
 * One super-block of type t at p to y[256]; a[v] = |scale part| + |min part|
 * of value v (the magnitude its dot-product terms can reach). Written from
 * ggml's dequantize_row_qX_K loops, independently of kquant_ref.c's unpacking.
 */
static void spec_dequant(int t, const uint8_t *p, float *y, float *a)
{
    switch (t) {
    case MZ_DT_Q2_K: { /* scales[16] qs[64] d dmin */
        const uint8_t *sc = p, *q = p + 16;
        const float d = f16v(p + 80), dmin = f16v(p + 82);
        int is = 0;
        for (int n = 0; n < 2; n++, q += 32)
            for (int j = 0, shift = 0; j < 4; j++, shift += 2)
                for (int half = 0; half < 2; half++, is++) {
                    const float dl = d * (float)(sc[is] & 15), ml = dmin * (float)(sc[is] >> 4);
                    for (int l = 0; l < 16; l++) {
                        const int c = (q[l + 16 * half] >> shift) & 3;
                        *y++ = dl * (float)c - ml;
                        *a++ = fabsf(dl * (float)c) + fabsf(ml);
                    }
                }
        break;
    }
    case MZ_DT_Q3_K: { /* hmask[32] qs[64] scales[12] d */
        const uint8_t *hm = p, *q = p + 32, *s = p + 96;
        const float d = f16v(p + 108);
        int8_t scales[16];
        for (int i = 0; i < 4; i++) {
            scales[i] = (int8_t)((s[i] & 15) | (((s[8 + i] >> 0) & 3) << 4));
            scales[4 + i] = (int8_t)((s[4 + i] & 15) | (((s[8 + i] >> 2) & 3) << 4));
            scales[8 + i] = (int8_t)((s[i] >> 4) | (((s[8 + i] >> 4) & 3) << 4));
            scales[12 + i] = (int8_t)((s[4 + i] >> 4) | (((s[8 + i] >> 6) & 3) << 4));
        }
        int is = 0;
        uint8_t m = 1;
        for (int n = 0; n < 2; n++, q += 32)
            for (int j = 0, shift = 0; j < 4; j++, shift += 2, m = (uint8_t)(m << 1))
                for (int half = 0; half < 2; half++, is++) {
                    const float dl = d * (float)(scales[is] - 32);
                    for (int l = 16 * half; l < 16 * half + 16; l++) {
                        const int c = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
                        *y++ = dl * (float)c;
                        *a++ = fabsf(dl * (float)c);
                    }
                }
        break;
    }
    case MZ_DT_Q4_K:
    case MZ_DT_Q5_K: { /* d dmin scales[12] (qh[32]) qs[128] */
        const float d = f16v(p), dmin = f16v(p + 2);
        const uint8_t *s = p + 4, *qh = p + 16;
        const uint8_t *q = t == MZ_DT_Q5_K ? p + 48 : p + 16;
        for (int j = 0; j < 4; j++, q += 32) {
            for (int k = 0; k < 2; k++) {
                const int is = 2 * j + k;
                int sc, mn;
                if (is < 4) {
                    sc = s[is] & 63;
                    mn = s[is + 4] & 63;
                } else {
                    sc = (s[is + 4] & 15) | ((s[is - 4] >> 6) << 4);
                    mn = (s[is + 4] >> 4) | ((s[is] >> 6) << 4);
                }
                const float d1 = d * (float)sc, m1 = dmin * (float)mn;
                for (int l = 0; l < 32; l++) {
                    int c = k ? q[l] >> 4 : q[l] & 15;
                    if (t == MZ_DT_Q5_K && (qh[l] & (1u << is))) c += 16;
                    *y++ = d1 * (float)c - m1;
                    *a++ = fabsf(d1 * (float)c) + fabsf(m1);
                }
            }
        }
        break;
    }
    default: { /* Q6_K: ql[128] qh[64] scales[16] d */
        const uint8_t *ql = p, *qh = p + 128;
        const int8_t *sc = (const int8_t *)(p + 192);
        const float d = f16v(p + 208);
        for (int n = 0; n < 2; n++, ql += 64, qh += 32, sc += 8) {
            float out[128], ab[128];
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = (int8_t)((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = (int8_t)((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = (int8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                out[l] = d * (float)sc[is] * (float)q1;
                out[l + 32] = d * (float)sc[is + 2] * (float)q2;
                out[l + 64] = d * (float)sc[is + 4] * (float)q3;
                out[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
            for (int l = 0; l < 128; l++) ab[l] = fabsf(out[l]);
            memcpy(y, out, sizeof out);
            memcpy(a, ab, sizeof ab);
            y += 128;
            a += 128;
        }
        break;
    }
    }
}

/* Offsets of the f16 scales in each block layout (for random blocks). */
static void f16_fields(int t, size_t *off, int *n_off)
{
    switch (t) {
    case MZ_DT_Q2_K: off[0] = 80, off[1] = 82, *n_off = 2; break;
    case MZ_DT_Q3_K: off[0] = 108, *n_off = 1; break;
    case MZ_DT_Q4_K:
    case MZ_DT_Q5_K: off[0] = 0, off[1] = 2, *n_off = 2; break;
    default: off[0] = 208, *n_off = 1; break;
    }
}

/* Random bytes with finite f16 scales of random size (2^-14 .. 2^1, either
 * sign: a file may hold a negative d). */
static void random_blocks(int t, uint8_t *w, size_t nb)
{
    const size_t bs = mz_dtype_block_bytes(t);
    for (size_t i = 0; i < nb * bs; i++) w[i] = (uint8_t)t_rand_u64(&g_rng);
    size_t off[2];
    int n_off;
    f16_fields(t, off, &n_off);
    for (size_t b = 0; b < nb; b++)
        for (int k = 0; k < n_off; k++) {
            const float v = ldexpf(1.0f + t_rand_float(&g_rng) * 0.5f, -14 + (int)(t_rand_u64(&g_rng) % 16));
            const mz_f16 h = mz_f32_to_f16((t_rand_u64(&g_rng) & 7) == 0 ? -v : v);
            memcpy(w + b * bs + off[k], &h, 2);
        }
}

static void test_layouts(void)
{
    enum { NB = 64 };
    for (size_t ti = 0; ti < MZ_ARRAY_LEN(k_types); ti++) {
        const int t = k_types[ti];
        const mz_type_kernels *r = mz_kernels_ref(t);
        CHECK(r != NULL && r->vec_dot_type == MZ_DT_Q8_K);
        CHECK(mz_dtype_supported(t));
        if (!r) continue;
        const size_t bs = mz_dtype_block_bytes(t);
        uint8_t *w = malloc(NB * bs);
        float *y = malloc(NB * MZ_QK_K * sizeof *y), *ys = malloc(NB * MZ_QK_K * sizeof *ys);
        float *a = malloc(MZ_QK_K * sizeof *a);
        random_blocks(t, w, NB);
        r->to_float(w, y, NB * MZ_QK_K);
        for (size_t b = 0; b < NB; b++) spec_dequant(t, w + b * bs, ys + b * MZ_QK_K, a);
        int bad = 0;
        for (size_t i = 0; i < NB * MZ_QK_K; i++) bad += memcmp(&y[i], &ys[i], 4) != 0;
        CHECK_MSG(bad == 0, "%s to_float: %d of %d values differ from the spec", mz_dtype_name(t), bad, NB * MZ_QK_K);
        free(w);
        free(y);
        free(ys);
        free(a);
    }
}

/* ---- test rows ------------------------------------------------------------------------- */

/* Weights: Gaussian with a local scale that changes every 16 values
 * (0.2 .. 5x) and a slowly drifting offset, as in real weight rows. */
static void gaussian_row(float *x, size_t n)
{
    float scale = 1.0f;
    for (size_t i = 0; i < n; i++) {
        if (i % 16 == 0) scale = expf(1.6f * t_rand_float(&g_rng));
        x[i] = scale * t_rand_normal(&g_rng) + 0.3f * sinf((float)i * 0.01f);
    }
}

/* Activations of kind k: 0 Gaussian, 1 large, 2 one block all zero and one
 * block of +-1 with a single outlier, 3 all positive. */
static void activations(float *x, size_t n, int kind)
{
    for (size_t i = 0; i < n; i++) {
        float v = t_rand_normal(&g_rng);
        if (kind == 1) v *= 1e4f;
        if (kind == 3) v = fabsf(v) + 0.1f;
        if (kind == 2) {
            const size_t b = i / MZ_QK_K;
            if (b % 3 == 0) v = 0.0f;
            else if (b % 3 == 1) v = (i % MZ_QK_K == 77) ? -1000.0f : ((i & 1) ? 1.0f : -1.0f);
        }
        x[i] = v;
    }
}

/* ---- vec_dot ------------------------------------------------------------------------------ */

static void test_vec_dot(void)
{
    for (size_t ti = 0; ti < MZ_ARRAY_LEN(k_types); ti++) {
        const int t = k_types[ti];
        const mz_type_kernels *r = mz_kernels_ref(t);
        if (!r) continue;
        const size_t bs = mz_dtype_block_bytes(t);
        for (size_t bi = 0; bi < MZ_ARRAY_LEN(k_blocks); bi++) {
            const size_t nb = k_blocks[bi], n = nb * MZ_QK_K;
            uint8_t *w = malloc(nb * bs), *xq = malloc(mz_dtype_row_bytes(MZ_DT_Q8_K, n));
            uint8_t *xq2 = malloc(mz_dtype_row_bytes(MZ_DT_Q8_K, n));
            float *wf = malloc(n * sizeof *wf), *wd = malloc(n * sizeof *wd), *wa = malloc(n * sizeof *wa);
            float *xf = malloc(n * sizeof *xf), *xd = malloc(n * sizeof *xd);
            for (int rep = 0; rep < 8; rep++) {
                /* even reps: our quantizer's blocks; odd: random bytes */
                if (rep % 2 == 0) {
                    gaussian_row(wf, n);
                    r->quantize(wf, w, n);
                } else {
                    random_blocks(t, w, nb);
                }
                activations(xf, n, rep / 2);
                r->from_float(xf, xq, n);
                for (size_t b = 0; b < nb; b++) spec_dequant(t, w + b * bs, wd + b * MZ_QK_K, wa + b * MZ_QK_K);
                mz_to_float_q8_K_ref(xq, xd, n);
                double exact = 0, mag = 0;
                for (size_t i = 0; i < n; i++) {
                    exact += (double)wd[i] * xd[i];
                    mag += (double)wa[i] * fabs((double)xd[i]);
                }
                const float vr = r->vec_dot(n, w, xq);
                CHECK_MSG(fabs((double)vr - exact) <= 1e-5 * mag + 1e-30, "ref vec_dot %s %zu blocks rep %d: %.9g vs %.9g (mag %.3g)",
                          mz_dtype_name(t), nb, rep, vr, exact, mag);
                for (int isa = 0; isa < MZ_ISA_COUNT; isa++) {
                    const mz_type_kernels *k = mz_kernels_for_isa((enum mz_isa)isa, t);
                    if (!k) continue;
                    CHECK(k->vec_dot_type == MZ_DT_Q8_K);
                    k->from_float(xf, xq2, n);
                    CHECK_MSG(memcmp(xq, xq2, mz_dtype_row_bytes(MZ_DT_Q8_K, n)) == 0, "%s from_float for %s differs",
                              mz_isa_names[isa], mz_dtype_name(t));
                    const float vk = k->vec_dot(n, w, xq);
                    CHECK_MSG(memcmp(&vk, &vr, 4) == 0, "%s vec_dot %s %zu blocks rep %d: %.9g vs ref %.9g",
                              mz_isa_names[isa], mz_dtype_name(t), nb, rep, vk, vr);
                }
            }
            free(w);
            free(xq);
            free(xq2);
            free(wf);
            free(wd);
            free(wa);
            free(xf);
            free(xd);
        }
    }
}

/* ---- matmul ------------------------------------------------------------------------------- */

static void test_matmul(void)
{
    static const size_t shapes[][3] = {{1, 1, 256},  {5, 3, 768},  {67, 2, 512},  {13, 7, 1536},
                                       {4, 1, 5888}, {19, 1, 768}, {64, 1, 1536}, {9, 17, 256}};
    for (int isa = 0; isa < MZ_ISA_COUNT; isa++)
        for (size_t ti = 0; ti < MZ_ARRAY_LEN(k_types); ti++) {
            const int t = k_types[ti];
            const mz_type_kernels *k = mz_kernels_for_isa((enum mz_isa)isa, t);
            if (!k) continue;
            for (size_t s = 0; s < MZ_ARRAY_LEN(shapes); s++) {
                const size_t n_rows = shapes[s][0], n_tok = shapes[s][1], n_cols = shapes[s][2];
                const size_t wrb = mz_dtype_row_bytes(t, n_cols), xrb = mz_dtype_row_bytes(MZ_DT_Q8_K, n_cols);
                const size_t ys = n_rows + 2;
                float *f = malloc(n_cols * sizeof *f);
                uint8_t *w = malloc(n_rows * wrb), *x = malloc(n_tok * xrb);
                float *y = malloc(n_tok * ys * sizeof *y);
                for (size_t r = 0; r < n_rows; r++) {
                    gaussian_row(f, n_cols);
                    k->quantize(f, w + r * wrb, n_cols);
                }
                for (size_t i = 0; i < n_tok; i++) {
                    activations(f, n_cols, (int)(i % 4));
                    k->from_float(f, x + i * xrb, n_cols);
                }
                for (int nth = 1; nth <= 3; nth++) {
                    for (size_t i = 0; i < n_tok * ys; i++) y[i] = NAN;
                    for (int ith = 0; ith < nth; ith++) mz_matmul(k, w, wrb, n_cols, n_rows, x, xrb, n_tok, y, ys, ith, nth);
                    int bad = 0;
                    for (size_t i = 0; i < n_tok; i++) {
                        for (size_t r = 0; r < n_rows; r++) {
                            const float v = k->vec_dot(n_cols, w + r * wrb, x + i * xrb);
                            bad += memcmp(&v, &y[i * ys + r], 4) != 0;
                        }
                        bad += !isnan(y[i * ys + n_rows]);
                    }
                    CHECK_MSG(bad == 0, "%s matmul %s %zux%zu tok %zu nth %d: %d differ from vec_dot", mz_isa_names[isa],
                              mz_dtype_name(t), n_rows, n_cols, n_tok, nth, bad);
                }
                free(f);
                free(w);
                free(x);
                free(y);
            }
        }
}

/* ---- x8 layout ------------------------------------------------------------------------------ */

/* Runs the x8 product split over nth threads' shares (nth 4: one token at
 * a time) into y (rows ys apart, one spare column that must stay NaN);
 * returns how many outputs differ from want, bit for bit. */
static int x8_mismatches(const mz_type_kernels *k, const uint8_t *wp, size_t wrb, size_t n_cols, size_t n_rows,
                         const uint8_t *x, size_t xrb, size_t n_tok, float *y, const float *want, size_t ys, int nth)
{
    for (size_t i = 0; i < n_tok * ys; i++) y[i] = NAN;
    for (int ith = 0; ith < (nth == 4 ? (int)n_tok : nth); ith++) {
        if (nth == 4) mz_matmul(k, wp, wrb, n_cols, n_rows, x + ith * xrb, xrb, 1, y + ith * ys, ys, 0, 1);
        else mz_matmul(k, wp, wrb, n_cols, n_rows, x, xrb, n_tok, y, ys, ith, nth);
    }
    int bad = 0;
    for (size_t i = 0; i < n_tok * ys; i++) bad += i % ys == n_rows ? !isnan(y[i]) : memcmp(&y[i], &want[i], 4) != 0;
    return bad;
}

static void test_x8(void)
{
    static const int types[] = {MZ_DT_Q4_K, MZ_DT_Q5_K, MZ_DT_Q6_K};
    static const size_t shapes[][3] = {/* rows, tokens, super-blocks */
                                       {8, 1, 1}, {16, 3, 2}, {24, 9, 3}, {8, 19, 7}, {136, 5, 11}, {40, 8, 64}, {72, 17, 4}};
    int n_checked = 0;
    for (size_t ti = 0; ti < MZ_ARRAY_LEN(types); ti++) {
        const int t = types[ti];
        const mz_type_kernels *kp = mz_kernels_ref(t);
        CHECK(mz_x8_group_block_bytes(t) == 8 * mz_dtype_block_bytes(t));
        CHECK(!mz_x8_shape_ok(t, 12, 256) && !mz_x8_shape_ok(t, 8, 288) && !mz_x8_shape_ok(t, 8, 256 * 65) &&
              mz_x8_shape_ok(t, 8, 256 * 64));
        for (size_t s = 0; s < MZ_ARRAY_LEN(shapes); s++) {
            const size_t n_rows = shapes[s][0], n_tok = shapes[s][1], n_cols = shapes[s][2] * MZ_QK_K;
            const size_t wrb = mz_dtype_row_bytes(t, n_cols), xrb = mz_dtype_row_bytes(MZ_DT_Q8_K, n_cols);
            const size_t ys = n_rows + 1;
            float *f = malloc(n_cols * sizeof *f), *y = malloc(n_tok * ys * sizeof *y), *yr = malloc(n_tok * ys * sizeof *yr);
            uint8_t *w = malloc(n_rows * wrb), *wp = malloc(n_rows * wrb), *x = malloc(n_tok * xrb), *scratch = malloc(8 * wrb);
            for (size_t r = 0; r < n_rows; r++) {
                if (r % 3 == 2) {
                    random_blocks(t, w + r * wrb, n_cols / MZ_QK_K);
                } else {
                    gaussian_row(f, n_cols);
                    kp->quantize(f, w + r * wrb, n_cols);
                }
            }
            for (size_t i = 0; i < n_tok; i++) {
                activations(f, n_cols, (int)(i % 4));
                kp->from_float(f, x + i * xrb, n_cols);
            }
            for (size_t i = 0; i < n_tok; i++)
                for (size_t r = 0; r < n_rows; r++) yr[i * ys + r] = kp->vec_dot(n_cols, w + r * wrb, x + i * xrb);
            CHECK(mz_x8_shape_ok(t, n_rows, n_cols));
            memcpy(wp, w, n_rows * wrb);
            mz_repack_x8(t, wp, n_rows, n_cols, scratch);
            CHECK_MSG(memcmp(wp, w, n_rows * wrb) != 0, "repack %s changed nothing",
                      mz_dtype_name(t));
            for (int isa = 0; isa < MZ_ISA_COUNT; isa++) {
                const mz_type_kernels *k = mz_kernels_x8_for_isa((enum mz_isa)isa, t);
                if (!k) continue;
                CHECK(k->row_group == 8 && k->vec_dot_type == MZ_DT_Q8_K);
                for (int nth = 1; nth <= 4; nth++) {
                    const int bad = x8_mismatches(k, wp, wrb, n_cols, n_rows, x, xrb, n_tok, y, yr, ys, nth);
                    CHECK_MSG(bad == 0, "%s x8 matmul %s %zux%zu tok %zu nth %d: %d not bit-equal to the plain reference",
                              mz_isa_names[isa], mz_dtype_name(t), n_rows, n_cols, n_tok, nth, bad);
                    n_checked++;
                }
            }
            CHECK_MSG(x8_row_lookup_mismatches(t, wp, w, n_rows, n_cols) == 0, /* a tied embedding's lookup */
                      "x8 row lookup %s: rows differ from the plain rows", mz_dtype_name(t));
            mz_unpack_x8(t, wp, n_rows, n_cols, scratch);
            CHECK_MSG(memcmp(wp, w, n_rows * wrb) == 0, "unpack(repack(%s)) differs", mz_dtype_name(t));
            void *bufs[] = {f, y, yr, w, wp, x, scratch};
            for (size_t i = 0; i < MZ_ARRAY_LEN(bufs); i++) free(bufs[i]);
        }
    }
    CHECK(n_checked > 0);
}

/* ---- quantize ----------------------------------------------------------------------------- */

/* RMSE / RMS bounds on gaussian_row data, measured (x86-64) 0.0169 Q6_K,
 * 0.0388 Q5_K, 0.0785 Q4_K, 0.1422 Q3_K, 0.2619 Q2_K (on a plain Gaussian:
 * 0.0172, 0.0346, 0.0699, 0.1431, 0.2627; Q4_1 0.0782, Q4_0 0.0859): each
 * bound sits about 15% above its type's figure, below the next coarser one. */
static double rmse_bound(int t)
{
    switch (t) {
    case MZ_DT_Q6_K: return 0.020;
    case MZ_DT_Q5_K: return 0.045;
    case MZ_DT_Q4_K: return 0.090;
    case MZ_DT_Q3_K: return 0.165;
    default: return 0.300;
    }
}

static void test_quantize_quality(void)
{
    enum { N = 256 * 64 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    gaussian_row(x, N);
    double prev = 0;
    for (int ti = (int)MZ_ARRAY_LEN(k_types) - 1; ti >= 0; ti--) { /* finest first */
        const int t = k_types[ti];
        const mz_type_kernels *r = mz_kernels_ref(t);
        if (!r) continue;
        void *q = malloc(mz_dtype_row_bytes(t, N));
        r->quantize(x, q, N);
        r->to_float(q, y, N);
        double se = 0, ss = 0;
        for (size_t i = 0; i < N; i++) {
            se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
            ss += (double)x[i] * x[i];
        }
        const double rel = sqrt(se / ss);
        printf("test_kernels_kquant: %s quantize RMSE/RMS %.4f (bound %.3f)\n", mz_dtype_name(t), rel, rmse_bound(t));
        CHECK_MSG(rel < rmse_bound(t), "%s RMSE/RMS %.4f over %.3f", mz_dtype_name(t), rel, rmse_bound(t));
        CHECK_MSG(rel > prev, "%s RMSE/RMS %.4f not above the finer type's %.4f", mz_dtype_name(t), rel, prev);
        prev = rel;
        free(q);
    }
    free(x);
    free(y);
}

/* Special blocks: each 256 values of one kind. */
static void special_block(float *x, int kind)
{
    for (int i = 0; i < MZ_QK_K; i++) {
        const float g = t_rand_normal(&g_rng);
        float v;
        switch (kind) {
        case 0: v = 0.0f; break;
        case 1: v = 0.37f; break;                         /* constant */
        case 2: v = -3.0f; break;                         /* constant negative */
        case 3: v = g * 1e-6f; break;                     /* tiny: d near f16's subnormals */
        case 4: v = g * 1e-9f; break;                     /* below f16's range: d becomes 0 */
        case 5: v = g * 300.0f; break;                    /* huge values, d within f16 */
        case 6: v = i == 100 ? 1000.0f : g * 0.01f; break; /* one outlier */
        case 7: v = fabsf(g) + 1.0f; break;               /* all positive */
        case 8: v = -fabsf(g) - 1.0f; break;              /* all negative */
        case 9: v = i < 128 ? 0.0f : g; break;            /* half zero */
        default: v = (i % 16 == 0) ? g * 50.0f : 0.0f; break; /* sparse */
        }
        x[i] = v;
    }
}

static void test_quantize_special(void)
{
    enum { KINDS = 11 };
    float x[MZ_QK_K], y[MZ_QK_K];
    uint8_t q[512];
    for (size_t ti = 0; ti < MZ_ARRAY_LEN(k_types); ti++) {
        const int t = k_types[ti];
        const mz_type_kernels *r = mz_kernels_ref(t);
        if (!r) continue;
        for (int kind = 0; kind < KINDS; kind++) {
            special_block(x, kind);
            r->quantize(x, q, MZ_QK_K);
            r->to_float(q, y, MZ_QK_K);
            float lo = 0.0f, hi = 0.0f, amax = 0.0f;
            for (int i = 0; i < MZ_QK_K; i++) {
                lo = fminf(lo, x[i]);
                hi = fmaxf(hi, x[i]);
                amax = fmaxf(amax, fabsf(x[i]));
            }
            int bad = 0;
            for (int i = 0; i < MZ_QK_K; i++) {
                if (kind == 0) bad += y[i] != 0.0f;
                /* within [min(x,0), max(x,0)] widened by one coarse step */
                const float slack = (hi - lo) * 0.6f + 1e-7f;
                bad += !isfinite(y[i]) || y[i] < lo - slack || y[i] > hi + slack;
            }
            CHECK_MSG(bad == 0, "%s special block kind %d: %d values non-finite or out of range", mz_dtype_name(t), kind, bad);
            /* the dot product of such blocks is finite too */
            uint8_t xq[sizeof(mz_block_q8_K)];
            for (int i = 0; i < MZ_QK_K; i++) y[i] = t_rand_normal(&g_rng);
            mz_quantize_q8_K_ref(y, xq, MZ_QK_K);
            for (int isa = 0; isa < MZ_ISA_COUNT; isa++) {
                const mz_type_kernels *k = mz_kernels_for_isa((enum mz_isa)isa, t);
                if (k) CHECK_MSG(isfinite(k->vec_dot(MZ_QK_K, q, xq)), "%s %s kind %d", mz_isa_names[isa], mz_dtype_name(t), kind);
            }
        }
        /* inf / NaN input: no undefined behaviour (UBSan), whatever the bytes */
        for (int i = 0; i < MZ_QK_K; i++) x[i] = t_rand_normal(&g_rng);
        x[3] = INFINITY;
        x[40] = NAN;
        r->quantize(x, q, MZ_QK_K);
        r->to_float(q, y, MZ_QK_K);
        for (int i = 0; i < MZ_QK_K; i++) x[i] = i % 2 ? -INFINITY : NAN;
        r->quantize(x, q, MZ_QK_K);
        r->to_float(q, y, MZ_QK_K);
    }
}

/* Every ISA's Q8_K from_float on odd activations (special weight-like
 * blocks, exact rounding ties, +-inf and NaN, the extreme value twice with
 * both signs) gives the reference's bytes. */
static void test_from_float_special(void)
{
    enum { KINDS = 15 };
    float x[MZ_QK_K];
    mz_block_q8_K a, r;
    for (int kind = 0; kind < KINDS; kind++) {
        if (kind < 11) {
            special_block(x, kind);
        } else {
            for (int i = 0; i < MZ_QK_K; i++) x[i] = (float)(i % 7) - 3.0f; /* amax 3: x * 127/3 */
            if (kind == 11) for (int i = 0; i < MZ_QK_K; i++) x[i] = (float)(i % 255 - 127) * 0.5f; /* ties */
            if (kind == 12) x[9] = INFINITY, x[70] = -INFINITY;
            if (kind == 13) x[3] = NAN, x[200] = NAN;
            if (kind == 14) x[6] = 3.5f, x[2] = -3.5f; /* the first of the two extremes sets the sign */
        }
        mz_quantize_q8_K_ref(x, &r, MZ_QK_K);
        for (int isa = 0; isa < MZ_ISA_COUNT; isa++) {
            const mz_type_kernels *k = mz_kernels_for_isa((enum mz_isa)isa, MZ_DT_Q4_K);
            if (!k) continue;
            k->from_float(x, &a, MZ_QK_K);
            CHECK_MSG(memcmp(&a, &r, sizeof a) == 0, "%s Q8_K from_float, input kind %d, differs from the reference",
                      mz_isa_names[isa], kind);
        }
    }
}

int main(void)
{
    mz_kernels_init();
    printf("test_kernels_kquant: active isa %s\n", mz_kernels_isa());
    for (int isa = 0; isa < MZ_ISA_COUNT; isa++)
        if (!mz_kernels_cpu_has((enum mz_isa)isa))
            printf("test_kernels_kquant: %s not available here, not tested\n", mz_isa_names[isa]);
    for (size_t ti = 0; ti < MZ_ARRAY_LEN(k_types); ti++) {
        CHECK(mz_kernels_for(k_types[ti]) != NULL);
        CHECK(mz_dtype_block_len(k_types[ti]) == MZ_QK_K);
    }
    test_layouts();
    test_vec_dot();
    test_matmul();
    test_x8();
    test_quantize_quality();
    test_quantize_special();
    test_from_float_special();
    return t_done("test_kernels_kquant");
}
