/*
 * test_codec_q4r.c — the q4r codec (q4 of Hadamard-rotated rows, format at
 * the q4r section of codec_q8.c, rotation in codec_rot.c):
 *   - the scalar rotation against the Hadamard matrix written out here in
 *     double precision ((-1)^popcount(i & j)), forward and inverse;
 *   - every rotation kernel the CPU has (AVX2, AVX-512; NEON on AArch64)
 *     equal to the scalar one bit for bit, in place and not, at every d;
 *   - the codec as defined: the payload equals q4's encoding (scalar
 *     reference) of the scalar rotation of the input, and decode equals the
 *     scalar inverse rotation of q4's scalar decode of that payload, bit
 *     for bit, through every kernel set;
 *   - quality: on KV-like rows with outlier channels q4r's error is well
 *     below q4's; the drift over 3 encode/decode cycles stays small;
 *   - errors: inf/NaN, rows that overflow f16 when rotated, bad d, every
 *     truncation, q4 and q4r blobs refused by each other;
 *   - the registry, mz_codec_for_layer and the ratio hint (and q8-q4r's, whose
 *     V half is q4r).
 */
#define _POSIX_C_SOURCE 200809L
#include "codec/codec.h"
#include "codec/codec_f16.h"
#include "testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const g_isas[] = {"scalar", "avx2", "avx512", "neon"};
static unsigned long long g_rng = 0x4a7e11ab5eedULL;

static mz_f16 h(float f) { return mz_float_to_half(f); }
static float fl(mz_f16 x) { return mz_half_to_float(x); }

/* KV-like rows of d values: N(0, 1) with a few channels 20x larger, fixed
 * across rows (outlier channels of K). */
static void kv_rows(mz_f16 *x, size_t rows, unsigned d, float outlier)
{
    for (size_t r = 0; r < rows; r++)
        for (unsigned j = 0; j < d; j++) {
            float v = t_rand_normal(&g_rng) * 0.5f;
            if (j % 16 == 3) v = v * outlier + outlier;
            x[r * d + j] = h(v);
        }
}

/* ---- the rotation ------------------------------------------------------------------ */

static int popcount_u(unsigned v)
{
    int c = 0;
    for (; v; v &= v - 1) c++;
    return c;
}

/* y = (1/sqrt d) H D x (or D (1/sqrt d) H x for the inverse) in double. */
static void rot_double(const mz_f16 *x, double *y, unsigned d, const uint32_t *signs, bool inverse)
{
    for (unsigned i = 0; i < d; i++) {
        double s = 0;
        for (unsigned j = 0; j < d; j++) {
            double v = fl(x[j]);
            if (!inverse && signs[j]) v = -v;
            s += (popcount_u(i & j) & 1) ? -v : v;
        }
        s /= sqrt((double)d);
        y[i] = inverse && signs[i] ? -s : s;
    }
}

static void test_rotation_definition(void)
{
    static const unsigned ds[] = {2, 4, 8, 16, 32, 64, 128, 256};
    uint32_t signs[MZ_ROT_DIM_MAX];
    mz_f16 x[256], y[256], z[256];
    double want[256];
    int n_neg = 0, bad = 0;
    mz_rot_signs(64, signs);
    for (unsigned j = 0; j < 64; j++) {
        CHECK(signs[j] == 0 || signs[j] == 0x80000000u);
        n_neg += signs[j] != 0;
    }
    CHECK_MSG(n_neg > 16 && n_neg < 48, "%d of 64 signs flipped", n_neg); /* not degenerate */
    for (size_t di = 0; di < MZ_ARRAY_LEN(ds); di++) {
        unsigned d = ds[di];
        mz_rot_signs(d, signs);
        for (int rep = 0; rep < 20; rep++) {
            for (unsigned j = 0; j < d; j++) x[j] = h(t_rand_normal(&g_rng) * 3.0f);
            for (int inv = 0; inv < 2; inv++) {
                mz_rot_rows_ref(x, y, 1, d, signs, inv);
                rot_double(x, want, d, signs, inv);
                for (unsigned i = 0; i < d; i++) {
                    /* f16 rounding (half an ulp, 2^-11 relative) plus the f32
                     * sums' error, far smaller */
                    double tol = fabs(want[i]) * 0x1p-11 + 0x1p-24 + 1e-5;
                    if (fabs(fl(y[i]) - want[i]) > tol && bad++ < 3)
                        fprintf(stderr, "d=%u inv=%d i=%u got %g want %g\n", d, inv, i, fl(y[i]),
                                want[i]);
                }
            }
            /* inverse(forward(x)) = x up to the two f16 roundings */
            mz_rot_rows_ref(x, y, 1, d, signs, false);
            mz_rot_rows_ref(y, z, 1, d, signs, true);
            double e = 0, m = 0;
            for (unsigned j = 0; j < d; j++) {
                e = fmax(e, fabs(fl(z[j]) - fl(x[j])));
                m = fmax(m, fabs(fl(x[j])));
            }
            if (e > m * 0x1p-9 && bad++ < 3) fprintf(stderr, "d=%u round trip error %g\n", d, e);
        }
    }
    CHECK_EQ_INT(bad, 0);
}

/* Every rotation kernel against the scalar one on rows of every d. */
static void test_rotation_kernels(void)
{
    static const unsigned ds[] = {2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
    enum { ROWS = 9 };
    mz_f16 *x = malloc(ROWS * MZ_ROT_DIM_MAX * sizeof *x), *want = malloc(ROWS * MZ_ROT_DIM_MAX * 2),
           *got = malloc(ROWS * MZ_ROT_DIM_MAX * 2);
    uint32_t signs[MZ_ROT_DIM_MAX];
    long long compared = 0;
    int n_kernels = 0, mism = 0;
    for (size_t di = 0; di < MZ_ARRAY_LEN(ds); di++) {
        unsigned d = ds[di];
        size_t n = (size_t)ROWS * d;
        mz_rot_signs(d, signs);
        for (int family = 0; family < 4; family++) {
            for (size_t i = 0; i < n; i++) {
                switch (family) {
                case 0: x[i] = h(t_rand_normal(&g_rng)); break;
                case 1: /* any finite bits, subnormals and ±0 included */
                    do x[i] = (mz_f16)t_rand_u64(&g_rng);
                    while ((x[i] & 0x7c00u) == 0x7c00u);
                    break;
                case 2: x[i] = h(t_rand_float(&g_rng) * 60000.0f); break; /* sums overflow f16 */
                default: x[i] = (mz_f16)(t_rand_u64(&g_rng) & 0x83ffu); break; /* subnormals */
                }
            }
            for (int inv = 0; inv < 2; inv++) {
                mz_rot_rows_ref(x, want, ROWS, d, signs, inv);
                for (int k = 0; k < 3; k++) {
                    void (*kern)(const mz_f16 *, mz_f16 *, size_t, unsigned, const uint32_t *, bool) = NULL;
#if defined(MZ_CODEC_HAVE_AVX2_FILE)
                    if (k == 0 && mz_codec_cpu_has_avx2()) kern = mz_rot_rows_avx2;
                    if (k == 1 && mz_codec_cpu_has_avx512()) kern = mz_rot_rows_avx512;
#endif
#if defined(__ARM_NEON) && defined(__aarch64__)
                    if (k == 2) kern = mz_rot_rows_neon;
#endif
                    if (!kern) continue;
                    if (di == 0 && family == 0 && inv == 0) n_kernels++;
                    kern(x, got, ROWS, d, signs, inv);
                    if (memcmp(want, got, n * 2) && mism++ < 3)
                        fprintf(stderr, "rotation kernel %d d=%u family %d inv %d differs\n", k, d,
                                family, inv);
                    memcpy(got, x, n * 2); /* in place */
                    kern(got, got, ROWS, d, signs, inv);
                    if (memcmp(want, got, n * 2) && mism++ < 3)
                        fprintf(stderr, "rotation kernel %d in place d=%u differs\n", k, d);
                    compared += 2 * (long long)n;
                }
            }
        }
    }
    CHECK_EQ_INT(mism, 0);
    printf("q4r rotation: %d SIMD kernel set(s), %lld values equal to the scalar kernel\n",
           n_kernels, compared);
    free(x);
    free(want);
    free(got);
}

/* ---- the codec as defined ------------------------------------------------------------ */

/* The q4r blob of x (d, n) built from the scalar pieces: q4's scalar encoder
 * of the scalar rotation, q4r's header. */
static size_t q4r_by_definition(unsigned d, const mz_f16 *x, size_t n, uint8_t *blob)
{
    uint32_t signs[MZ_ROT_DIM_MAX];
    mz_rot_signs(d, signs);
    size_t rows = n / d;
    mz_f16 *rot = malloc((n + 1) * sizeof *rot);
    mz_rot_rows_ref(x, rot, rows, d, signs, false);
    memcpy(rot + rows * d, x + rows * d, (n - rows * d) * sizeof *rot);
    mz_codec_header_write(blob, 0x52515a4du, d, n);
    size_t done = mz_q4_encode_groups_ref(rot, n, d, blob + MZ_CODEC_HEADER_BYTES);
    free(rot);
    mz_codec c = mz_codec_q4r(d);
    return done == n ? mz_codec_bound(&c, n) : 0;
}

/* decode by definition: q4's scalar decode of the payload, then the scalar
 * inverse rotation of the full rows. */
static void q4r_decode_by_definition(const uint8_t *blob, unsigned d, size_t n, mz_f16 *out)
{
    uint32_t signs[MZ_ROT_DIM_MAX];
    mz_rot_signs(d, signs);
    CHECK_EQ_INT(mz_q4_decode_groups_ref(blob + MZ_CODEC_HEADER_BYTES, n, d, out), (n + d - 1) / d);
    mz_rot_rows_ref(out, out, n / d, d, signs, true);
}

static void test_codec_definition(void)
{
    static const unsigned ds[] = {2, 8, 16, 32, 64, 128, 1024};
    static const size_t ns[] = {0, 1, 63, 64, 65, 256, 4097, 3 * 64 * 256};
    long long checked = 0;
    int mism = 0;
    for (size_t di = 0; di < MZ_ARRAY_LEN(ds); di++)
        for (size_t ni = 0; ni < MZ_ARRAY_LEN(ns); ni++) {
            unsigned d = ds[di];
            size_t n = ns[ni];
            mz_codec c = mz_codec_q4r(d);
            size_t cap = mz_codec_bound(&c, n);
            mz_f16 *x = malloc((n + 1) * 2), *want = malloc((n + 1) * 2), *got = malloc((n + 1) * 2);
            uint8_t *ref = malloc(cap), *blob = malloc(cap);
            kv_rows(x, n / d, d, 8.0f);
            for (size_t i = n / d * d; i < n; i++) x[i] = h(t_rand_normal(&g_rng));
            size_t ref_len = q4r_by_definition(d, x, n, ref), len = 0;
            CHECK(ref_len == cap);
            q4r_decode_by_definition(ref, d, n, want);
            CHECK_EQ_INT(mz_q4r_encode_ref(d, x, n, blob, cap, &len), MZ_OK);
            if ((len != ref_len || memcmp(blob, ref, len)) && mism++ < 3)
                fprintf(stderr, "q4r scalar encode d=%u n=%zu differs from the definition\n", d, n);
            CHECK_EQ_INT(mz_q4r_decode_ref(ref, ref_len, got, n), MZ_OK);
            if (memcmp(want, got, n * 2) && mism++ < 3)
                fprintf(stderr, "q4r scalar decode d=%u n=%zu differs\n", d, n);
            for (size_t i = 0; i < MZ_ARRAY_LEN(g_isas); i++) {
                if (!mz_q8_force_isa(g_isas[i])) continue;
                memset(blob, 0xa5, cap);
                CHECK_EQ_INT(mz_codec_encode(&c, x, n, blob, cap, &len), MZ_OK);
                if ((len != ref_len || memcmp(blob, ref, len)) && mism++ < 3)
                    fprintf(stderr, "q4r encode %s d=%u n=%zu differs\n", g_isas[i], d, n);
                memset(got, 0x5a, (n + 1) * 2);
                CHECK_EQ_INT(mz_codec_decode(&c, ref, ref_len, got, n), MZ_OK);
                if (memcmp(want, got, n * 2) && mism++ < 3)
                    fprintf(stderr, "q4r decode %s d=%u n=%zu differs\n", g_isas[i], d, n);
                checked += (long long)n;
            }
            mz_q8_force_isa(NULL);
            free(x);
            free(want);
            free(got);
            free(ref);
            free(blob);
        }
    CHECK_EQ_INT(mism, 0);
    printf("q4r: %lld values encoded and decoded as defined by every kernel set\n", checked);
}

/* ---- quality and cycles ------------------------------------------------------------------ */

static double rms_err(const mz_f16 *a, const mz_f16 *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)fl(a[i]) - fl(b[i]);
        s += e * e;
    }
    return sqrt(s / (double)n);
}

static void roundtrip(const mz_codec *c, const mz_f16 *x, size_t n, mz_f16 *out)
{
    size_t cap = mz_codec_bound(c, n), len;
    uint8_t *blob = malloc(cap);
    CHECK_EQ_INT(mz_codec_encode(c, x, n, blob, cap, &len), MZ_OK);
    CHECK_EQ_INT(mz_codec_decode(c, blob, len, out, n), MZ_OK);
    free(blob);
}

static void test_quality_and_cycles(void)
{
    enum { D = 64, ROWS = 3 * 256 };
    const size_t n = (size_t)D * ROWS;
    mz_f16 *x = malloc(n * 2), *a = malloc(n * 2), *b = malloc(n * 2), *cyc = malloc(n * 2);
    const mz_codec *q4 = mz_codec_find("q4"), *q4r = mz_codec_find("q4r");
    CHECK(q4 && q4r);
    for (int outliers = 0; outliers < 2; outliers++) {
        kv_rows(x, ROWS, D, outliers ? 20.0f : 1.0f);
        roundtrip(q4, x, n, a);
        roundtrip(q4r, x, n, b);
        double e4 = rms_err(x, a, n), e4r = rms_err(x, b, n);
        printf("q4r quality (%s outlier channels): rms error q4 %.4f, q4r %.4f\n",
               outliers ? "with" : "without", e4, e4r);
        /* with outliers the rotation must pay: q4's range is set by the
         * outlier channels; without, it must not hurt much */
        if (outliers)
            CHECK_MSG(e4r < 0.75 * e4, "q4r %.4f vs q4 %.4f", e4r, e4);
        else
            CHECK_MSG(e4r < 1.3 * e4, "q4r %.4f vs q4 %.4f", e4r, e4);
        /* three more cycles move the values far less than the first */
        memcpy(cyc, b, n * 2);
        for (int k = 0; k < 3; k++) roundtrip(q4r, cyc, n, cyc);
        double drift = rms_err(b, cyc, n), err3 = rms_err(x, cyc, n);
        printf("q4r after 3 more cycles: drift rms %.5f, error rms %.4f\n", drift, err3);
        CHECK_MSG(drift < 0.1 * e4r, "drift %.5f vs first error %.4f", drift, e4r);
        CHECK_MSG(err3 < 1.1 * e4r, "error after cycles %.4f vs %.4f", err3, e4r);
    }
    free(x);
    free(a);
    free(b);
    free(cyc);
}

/* ---- errors, registry ----------------------------------------------------------------------- */

static void test_errors(void)
{
    const mz_codec *c = mz_codec_find("q4r"), *q4 = mz_codec_find("q4");
    enum { N = 256 };
    mz_f16 x[N], out[N];
    uint8_t blob[512], other[512];
    size_t len, len4;
    kv_rows(x, N / 64, 64, 4.0f);
    CHECK_EQ_INT(mz_codec_encode(c, x, N, blob, sizeof blob, &len), MZ_OK);
    CHECK_EQ_INT(len, mz_codec_bound(c, N));
    CHECK_EQ_INT(mz_codec_encode(c, x, N, blob, len - 1, &len4), MZ_E_RANGE);
    CHECK_EQ_INT(mz_codec_encode(c, x, N, blob, sizeof blob, &len), MZ_OK);
    size_t nv = 0;
    CHECK_EQ_INT(c->peek(c, blob, len, &nv), MZ_OK);
    CHECK_EQ_INT(nv, N);
    /* inf / NaN / a row whose rotation overflows f16 */
    mz_f16 y[N];
    memcpy(y, x, sizeof y);
    y[70] = 0x7c00u;
    CHECK_EQ_INT(mz_codec_encode(c, y, N, other, sizeof other, &len4), MZ_E_FORMAT);
    y[70] = 0x7e01u;
    CHECK_EQ_INT(mz_codec_encode(c, y, N, other, sizeof other, &len4), MZ_E_FORMAT);
    memcpy(y, x, sizeof y);
    for (int j = 64; j < 128; j++) y[j] = h(j == 64 ? 60000.0f : 30000.0f); /* row 1 sums past 65504 */
    CHECK_EQ_INT(mz_codec_encode(c, y, N, other, sizeof other, &len4), MZ_E_FORMAT);
    CHECK(strstr(mz_last_error(), "row 1") != NULL);
    /* every truncation and an extension */
    int refused = 0;
    for (size_t l = 0; l < len; l++) refused += mz_codec_decode(c, blob, l, out, N) == MZ_E_FORMAT;
    CHECK_EQ_INT(refused, (long long)len);
    CHECK_EQ_INT(mz_codec_decode(c, blob, len + 1, out, N), MZ_E_FORMAT);
    CHECK_EQ_INT(mz_codec_decode(c, blob, len, out, N - 1), MZ_E_FORMAT);
    /* bad d in the header: 0, 3 (not a power of two), 2048 (> max) */
    static const unsigned bad_d[] = {0, 1, 3, 96, 2048};
    for (size_t i = 0; i < MZ_ARRAY_LEN(bad_d); i++) {
        memcpy(other, blob, len);
        other[6] = (uint8_t)bad_d[i];
        other[7] = (uint8_t)(bad_d[i] >> 8);
        CHECK_EQ_INT(mz_codec_decode(c, other, len, out, N), MZ_E_FORMAT);
        CHECK_EQ_INT(c->peek(c, other, len, &nv), MZ_E_FORMAT);
    }
    /* a bad group (max < min) in row 2: error, rows before it decoded */
    memcpy(other, blob, len);
    size_t g2 = MZ_CODEC_HEADER_BYTES + 2 * (4 + 32);
    other[g2] = 0x00;
    other[g2 + 1] = 0x3c; /* min = 1.0 */
    other[g2 + 2] = 0x00;
    other[g2 + 3] = 0x38; /* max = 0.5 */
    CHECK_EQ_INT(mz_codec_decode(c, other, len, out, N), MZ_E_FORMAT);
    CHECK(strstr(mz_last_error(), "group 2") != NULL);
    /* q4 and q4r blobs are not each other's */
    CHECK_EQ_INT(mz_codec_encode(q4, x, N, other, sizeof other, &len4), MZ_OK);
    CHECK_EQ_INT(len4, len); /* same size */
    CHECK_EQ_INT(mz_codec_decode(c, other, len4, out, N), MZ_E_FORMAT);
    CHECK_EQ_INT(mz_codec_decode(q4, blob, len, out, N), MZ_E_FORMAT);
}

/* q4r, and q8-q4r whose V half is q4r: the rotation length follows head_dim
 * the same way for both. */
static void test_registry(void)
{
    static const struct {
        const char *name;
        double ratio;
    } codecs[] = {{"q4r", 36.0 / 128.0}, {"q8-q4r", (68.0 + 36.0) / 256.0}};
    for (size_t k = 0; k < MZ_ARRAY_LEN(codecs); k++) {
        const mz_codec *c = mz_codec_find(codecs[k].name);
        CHECK(c && c->param == 64 && strcmp(c->name, codecs[k].name) == 0);
        CHECK_MSG(fabs(mz_codec_ratio_hint(c) - codecs[k].ratio) < 1e-12, "%s: ratio hint %g",
                  codecs[k].name, mz_codec_ratio_hint(c));
        static const unsigned hd[][2] = {{64, 64}, {128, 128}, {96, 32}, {80, 16}, {256, 256}, {2048, 1024}};
        for (size_t i = 0; i < MZ_ARRAY_LEN(hd); i++) {
            mz_codec l = mz_codec_for_layer(c, hd[i][0], 3, 30);
            CHECK_MSG(l.param == hd[i][1] && strcmp(l.name, codecs[k].name) == 0, "%s: head_dim %u -> %u",
                      codecs[k].name, hd[i][0], l.param);
            CHECK(l.encode == c->encode);
        }
        CHECK_EQ_INT(mz_codec_for_layer(c, 1, 0, 1).param, 64); /* no power of two >= 2: unchanged */
    }
}

int main(void)
{
    test_registry();
    test_rotation_definition();
    test_rotation_kernels();
    test_codec_definition();
    test_quality_and_cycles();
    test_errors();
    return t_done("test_codec_q4r");
}
