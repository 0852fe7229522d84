/*
 * test_codec.c — codec registry, raw, q8 and q4: round trips, idempotency
 * (encode(decode(encode(x))) == encode(x) byte for byte, over 3 cycles) on
 * realistic and adversarial inputs, the decode formula against a reference
 * written here, malformed blobs, every kernel set
 * (scalar, AVX2, AVX-512 with and without streaming stores; whichever the
 * CPU has) against the scalar reference for decode and encode, a randomized
 * differential test of the encoders on adversarial groups, and throughput
 * (printed, not asserted).
 */
#define _POSIX_C_SOURCE 200809L
#include "codec/codec.h"
#include "codec/codec_f16.h"
#include "testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Every q8 kernel set; mz_q8_force_isa refuses those the CPU lacks. */
static const char *const g_isas[] = {"scalar", "avx2", "avx512", "neon"};

/* Thread CPU time in ms: throughput on a shared machine is measured per CPU
 * second actually given to this thread, not per wall second. */
static unsigned long long g_rng = 0x5eed1234abcdULL;

static mz_f16 h(float f) { return mz_float_to_half(f); }
static float fl(mz_f16 x) { return mz_half_to_float(x); }

/* Random finite f16 bit pattern. */
static mz_f16 rand_finite_bits(void)
{
    for (;;) {
        mz_f16 b = (mz_f16)t_rand_u64(&g_rng);
        if ((b & 0x7c00u) != 0x7c00u) return b;
    }
}

/* A group's random range min <= max (f16 little-endian, min first) at p:
 * any finite pair, or one less than `narrow` steps wide, a subnormal min,
 * a ±0 end, and with extremes ±65504. */
static void put_rand_range(uint8_t *p, unsigned narrow, bool extremes)
{
    uint64_t r = t_rand_u64(&g_rng);
    mz_f16 a = rand_finite_bits(), z = rand_finite_bits();
    if (r % 4 == 0) z = (mz_f16)(a + (r >> 8) % narrow);            /* narrow ranges */
    if (r % 8 == 1) a = (mz_f16)(a & 0x83ffu);                      /* subnormals */
    if (r % 16 == 2) a = (mz_f16)(((r >> 20) & 1) << 15);           /* ±0 */
    if (r % 16 == 3) z = (mz_f16)(((r >> 21) & 1) << 15);
    if (extremes && r % 32 == 4) a = 0xfbffu, z = 0x7bffu;          /* ±65504 */
    if ((z & 0x7c00u) == 0x7c00u) z = a;
    if (fl(z) < fl(a)) {
        mz_f16 t = a;
        a = z;
        z = t;
    }
    p[0] = (uint8_t)a;
    p[1] = (uint8_t)(a >> 8);
    p[2] = (uint8_t)z;
    p[3] = (uint8_t)(z >> 8);
}

/* lo and hi: x and a random finite f16 value, in order. */
static void rand_ordered(float x, float *lo, float *hi)
{
    float y = fl(rand_finite_bits());
    *lo = y < x ? y : x; /* x == y (+0 and -0 among them): x first, as given */
    *hi = y < x ? x : y;
}

/* Decodes blob with c under every kernel set g_isas can force and compares
 * with want (n values, groups of G); counts differences in *mism, saying
 * the first 3 (WHAT, the set). */
static void decode_each_isa(const mz_codec *c, const uint8_t *blob, size_t len, const mz_f16 *want,
                            mz_f16 *got, size_t n, const char *what, unsigned G, int *mism)
{
    for (size_t i = 0; i < MZ_ARRAY_LEN(g_isas); i++) {
        if (!mz_q8_force_isa(g_isas[i])) continue;
        memset(got, 0xee, n * 2);
        CHECK_EQ_INT(mz_codec_decode(c, blob, len, got, n), MZ_OK);
        if (memcmp(want, got, n * 2) != 0 && (*mism)++ < 3)
            fprintf(stderr, "%s %s G=%u n=%zu differs\n", what, g_isas[i], G, n);
    }
    mz_q8_force_isa(NULL);
}

#if defined(MZ_CODEC_HAVE_AVX512_FILE)
/* An AVX-512 group decoder on payload pl, both store paths (ordinary,
 * streamed), into the 64-byte aligned dst and the misaligned odd_dst;
 * compared with want as decode_each_isa does. */
static void decode_avx512_variants(size_t (*decode)(const uint8_t *, size_t, unsigned, mz_f16 *, bool),
                                   const uint8_t *pl, size_t n, unsigned G, mz_f16 *odd_dst,
                                   mz_f16 *dst, const mz_f16 *want, const char *what, int *mism)
{
    for (int v = 0; v < 4; v++) {
        mz_f16 *d = v & 1 ? odd_dst : dst;
        memset(d, 0xee, n * 2);
        CHECK_EQ_INT(decode(pl, n, G, d, v >= 2), (n + G - 1) / G);
        if (memcmp(want, d, n * 2) != 0 && (*mism)++ < 3)
            fprintf(stderr, "%s G=%u n=%zu variant %d differs\n", what, G, n, v);
    }
}
#endif

/* The group decoders of one codec family called directly on blob's payload
 * (bits 8: q8's, 4: q4's): AVX2, and AVX-512 in its four store variants
 * into al and al + odd; compared with want as decode_each_isa does. */
static void decode_groups_each_kernel(int bits, const uint8_t *blob, size_t n, unsigned G, mz_f16 *al,
                                      size_t odd, const mz_f16 *want, mz_f16 *got, const char *what,
                                      int *mism)
{
    const uint8_t *pl = blob + MZ_CODEC_HEADER_BYTES;
    size_t n_groups = (n + G - 1) / G;
    (void)bits; /* no SIMD kernel file off x86 */
    (void)pl;
    (void)n_groups;
    (void)al;
    (void)odd;
    (void)got;
#if defined(MZ_CODEC_HAVE_AVX2_FILE)
    if (mz_codec_cpu_has_avx2()) {
        memset(got, 0xee, n * 2);
        CHECK_EQ_INT(bits == 4 ? mz_q4_decode_groups_avx2(pl, n, G, got) : mz_q8_decode_groups_avx2(pl, n, G, got),
                     n_groups);
        if (memcmp(want, got, n * 2) != 0 && (*mism)++ < 3)
            fprintf(stderr, "%s avx2 G=%u n=%zu differs\n", what, G, n);
    }
#endif
#if defined(MZ_CODEC_HAVE_AVX512_FILE)
    if (mz_codec_cpu_has_avx512())
        decode_avx512_variants(bits == 4 ? mz_q4_decode_groups_avx512 : mz_q8_decode_groups_avx512, pl, n, G,
                               al + odd, al, want, what, mism);
#else
    (void)what;
    (void)mism;
#endif
}

/* ---- f16 helpers ----------------------------------------------------------------- */

static void test_f16_helpers(void)
{
    int bad = 0;
    for (uint32_t b = 0; b < 0x10000u; b++) {
        mz_f16 x = (mz_f16)b;
        float f = fl(x);
        if ((x & 0x7c00u) == 0x7c00u && (x & 0x3ffu)) {
            bad += !isnan(f);
            continue;
        }
        /* value check against the definition */
        int e = (x >> 10) & 0x1f, mant = x & 0x3ff;
        double want = e == 0 ? ldexp(mant, -24) : e == 31 ? INFINITY : ldexp(1024 + mant, e - 25);
        if (x & 0x8000u) want = -want;
        bad += (double)f != want;
        bad += h(f) != x;
    }
    CHECK_EQ_INT(bad, 0);
    /* the in-float rounding used by the encoder equals the conversion round trip */
    bad = 0;
    for (uint32_t b = 0; b < 0x477ff000u; b += 97) {
        for (int sg = 0; sg < 2; sg++) {
            uint32_t v = b | (uint32_t)sg << 31;
            float f;
            memcpy(&f, &v, 4);
            float r = mz_cdc_round_f16(f), want = fl(h(f));
            if (r != want && bad++ < 5) fprintf(stderr, "round_f16 %a: %a != %a\n", (double)f, (double)r, (double)want);
        }
    }
    CHECK_EQ_INT(bad, 0);
#if defined(MZ_CODEC_HAVE_AVX2_FILE)
    if (mz_codec_cpu_has_avx2()) {
        /* scalar RNE vs F16C over a strided sweep of every f32 bit pattern */
        enum { BATCH = 4096 };
        static float src[BATCH];
        static mz_f16 a[BATCH];
        int mism = 0;
        uint32_t bits = 0;
        unsigned long long total = 0;
        for (int round = 0; round < 2600; round++) {
            for (int i = 0; i < BATCH; i++) {
                uint32_t v = bits;
                bits += 409;
                if (i & 1) v = 0x33000000u + (uint32_t)(t_rand_u64(&g_rng) % 0x14800000u);
                memcpy(&src[i], &v, 4);
            }
            mz_codec_f32_to_f16_avx2(src, a, BATCH);
            for (int i = 0; i < BATCH; i++) {
                mz_f16 s = h(src[i]);
                if (s != a[i] && !(isnan(src[i]) && (s & 0x7fffu) > 0x7c00u &&
                                   (a[i] & 0x7fffu) > 0x7c00u)) {
                    if (mism++ < 5)
                        fprintf(stderr, "f32->f16 %a: scalar %04x f16c %04x\n", (double)src[i], s,
                                a[i]);
                }
            }
            total += BATCH;
        }
        CHECK_EQ_INT(mism, 0);
        printf("f32->f16 scalar vs F16C: %llu values compared\n", total);
    }
#endif
}

/* ---- registry and raw ------------------------------------------------------------- */

static void test_registry(void)
{
    CHECK(mz_codec_find("raw") == &mz_codec_raw_vt);
    CHECK(mz_codec_find("q8") && mz_codec_find("q8")->param == 64);
    CHECK(mz_codec_find("q8-g32")->param == 32);
    CHECK(mz_codec_find("q8-g128")->param == 128);
    CHECK(mz_codec_find("zstd") == NULL);
    CHECK(strstr(mz_last_error(), "zstd") != NULL);
    mz_codec c = mz_codec_q8(7);
    CHECK(c.param == 7 && c.encode && c.decode);
    /* kernel hook: scalar always, unknown names never; "best" undoes it */
    const char *best = mz_q8_isa();
    CHECK(mz_q8_force_isa("scalar") && strcmp(mz_q8_isa(), "scalar") == 0);
    CHECK(!mz_q8_force_isa("sse9") && strcmp(mz_q8_isa(), "scalar") == 0);
    CHECK(mz_q8_force_isa("best") && strcmp(mz_q8_isa(), best) == 0);
    printf("q8 kernel sets here:");
    for (size_t i = 0; i < MZ_ARRAY_LEN(g_isas); i++)
        if (mz_q8_force_isa(g_isas[i])) printf(" %s", g_isas[i]);
    printf(" (best %s)\n", best);
    mz_q8_force_isa(NULL);
}

static void test_raw(void)
{
    const mz_codec *c = mz_codec_find("raw");
    size_t n = 65536 + 3;
    mz_f16 *x = malloc(n * 2), *y = malloc(n * 2);
    size_t cap = mz_codec_bound(c, n);
    uint8_t *blob = malloc(cap);
    for (size_t i = 0; i < n; i++) x[i] = (mz_f16)i; /* every bit pattern, NaNs included */
    size_t len = 0;
    CHECK_EQ_INT(mz_codec_encode(c, x, n, blob, cap, &len), MZ_OK);
    CHECK_EQ_INT(len, MZ_CODEC_HEADER_BYTES + 2 * n);
    CHECK_EQ_INT(mz_codec_decode(c, blob, len, y, n), MZ_OK);
    CHECK(memcmp(x, y, n * 2) == 0);
    size_t pn = 0;
    CHECK(c->peek(c, blob, len, &pn) == MZ_OK && pn == n);
    /* errors */
    CHECK_EQ_INT(mz_codec_encode(c, x, n, blob, cap - 1, &len), MZ_E_RANGE);
    CHECK_EQ_INT(len, 0);
    CHECK_EQ_INT(mz_codec_encode(c, x, n, blob, cap, &len), MZ_OK);
    CHECK_EQ_INT(mz_codec_decode(c, blob, len - 1, y, n), MZ_E_FORMAT);
    CHECK_EQ_INT(mz_codec_decode(c, blob, len, y, n - 1), MZ_E_FORMAT);
    CHECK_EQ_INT(mz_codec_decode(c, blob, 7, y, n), MZ_E_FORMAT);
    blob[0] ^= 1;
    CHECK_EQ_INT(mz_codec_decode(c, blob, len, y, n), MZ_E_FORMAT);
    CHECK(strstr(mz_last_error(), "magic") != NULL);
    blob[0] ^= 1;
    blob[6] = 1; /* param must be 0 */
    CHECK_EQ_INT(mz_codec_decode(c, blob, len, y, n), MZ_E_FORMAT);
    blob[6] = 0;
    /* zero values */
    CHECK_EQ_INT(mz_codec_encode(c, x, 0, blob, cap, &len), MZ_OK);
    CHECK_EQ_INT(len, MZ_CODEC_HEADER_BYTES);
    CHECK_EQ_INT(mz_codec_decode(c, blob, len, y, 0), MZ_OK);
    free(x);
    free(y);
    free(blob);
}

/* ---- the q8 / q4 definition, written independently of codec_q8.c ------------------- */

/* Top code of a q8 (255) or q4 (15) codec. */
static unsigned t_top(const mz_codec *c) { return strncmp(c->name, "q4", 2) == 0 ? 15 : 255; }

/* Bytes of one group of k values. */
static size_t t_group_bytes(unsigned top, size_t k) { return 4 + (top == 15 ? (k + 1) / 2 : k); }

/* The implied step: f32 (max - min) / top with its significand cut to 16
 * bits (by frexp and floor here, not by masking bits as the codec does). */
static float t_step(float mn, float mx, unsigned top)
{
    float d = (mx - mn) / (float)top;
    if (d == 0.0f) return 0.0f;
    int e;
    float m = frexpf(d, &e); /* d = m 2^e, 0.5 <= m < 1: 24 significant bits */
    return ldexpf(floorf(m * 65536.0f) / 65536.0f, e);
}

/* dec(q) of a group: top → max; else min + q step, capped at max, to f16. */
static mz_f16 t_decq(float mn, float mx, unsigned top, unsigned q)
{
    if (q == top) return h(mx);
    float v = mn + (float)q * t_step(mn, mx, top);
    return h(v > mx ? mx : v);
}

/* ---- q8 / q4 idempotency ------------------------------------------------------------ */

typedef struct {
    uint8_t *e1, *e2, *e3;
    mz_f16 *y1, *y2;
    size_t cap;
} cyc_bufs;

static long long g_values_cycled;
static double g_max_rel_err; /* max |y - x| / ((s + ulp16(x)) / 2 + 2^-24) */

static double ulp16(float v)
{
    v = fabsf(v);
    if (v < 6.103515625e-05f) return ldexp(1, -24);
    int e;
    frexpf(v, &e);
    return ldexp(1, e - 11);
}

/* Encodes x, decodes, re-encodes twice more; checks byte equality and the
 * error bound. Returns 0 on success. */
static int cycle3(const mz_codec *c, const mz_f16 *x, size_t n, cyc_bufs *b)
{
    size_t l1, l2, l3;
    int fail = 0;
    if (mz_codec_encode(c, x, n, b->e1, b->cap, &l1) != MZ_OK) {
        if (getenv("MZ_TEST_VERBOSE")) fprintf(stderr, "encode: %s\n", mz_last_error());
        return 1;
    }
    /* every encoder must match the best one (and so each other) byte for byte */
    for (size_t i = 0; i < MZ_ARRAY_LEN(g_isas); i++) {
        if (!mz_q8_force_isa(g_isas[i])) continue;
        mz_status st = mz_codec_encode(c, x, n, b->e2, b->cap, &l2);
        if (st != MZ_OK || l2 != l1 || memcmp(b->e1, b->e2, l1) != 0) fail = 10;
    }
    mz_q8_force_isa(NULL);
    if (mz_codec_decode(c, b->e1, l1, b->y1, n) != MZ_OK) return 2;
    if (mz_codec_encode(c, b->y1, n, b->e2, b->cap, &l2) != MZ_OK) return 3;
    if (l2 != l1 || memcmp(b->e1, b->e2, l1) != 0) fail = 4;
    if (mz_codec_decode(c, b->e2, l2, b->y2, n) != MZ_OK) return 5;
    if (memcmp(b->y1, b->y2, n * 2) != 0) fail = 6;
    if (mz_codec_encode(c, b->y2, n, b->e3, b->cap, &l3) != MZ_OK) return 7;
    if (l3 != l1 || memcmp(b->e1, b->e3, l1) != 0) fail = 8;
    /* error bound per group: (s (1 + 1/128) + ulp16) / 2, s = (max - min) / top
     * (the truncated step is at most 2^-15 s short, so the last gap is below
     * s (1 + top 2^-15)) */
    unsigned G = c->param, top = t_top(c);
    const uint8_t *p = b->e1 + MZ_CODEC_HEADER_BYTES;
    for (size_t i0 = 0; i0 < n; i0 += G) {
        size_t k = MZ_MIN((size_t)G, n - i0);
        float mn = fl((mz_f16)(p[0] | p[1] << 8)), mx = fl((mz_f16)(p[2] | p[3] << 8));
        double s = ((double)mx - (double)mn) / (double)top;
        for (size_t j = 0; j < k; j++) {
            float xv = fl(x[i0 + j]), yv = fl(b->y1[i0 + j]);
            double err = fabs((double)yv - (double)xv);
            double lim = 0.5 * (s * (1 + 1.0 / 128) + ulp16(fabsf(xv) + (float)s));
            if (err / lim > g_max_rel_err) g_max_rel_err = err / lim;
            if (err > lim) {
                if (!fail && getenv("MZ_TEST_VERBOSE"))
                    fprintf(stderr, "x=%a y=%a s=%a err=%g lim=%g\n", (double)xv, (double)yv,
                            (double)s, err, lim);
                fail = fail ? fail : 9;
            }
        }
        p += t_group_bytes(top, k);
    }
    g_values_cycled += (long long)n;
    return fail;
}

static void cyc_init(cyc_bufs *b, size_t n_max, unsigned G_min)
{
    mz_codec c = mz_codec_q8(G_min);
    b->cap = mz_codec_bound(&c, n_max);
    b->e1 = malloc(b->cap);
    b->e2 = malloc(b->cap);
    b->e3 = malloc(b->cap);
    b->y1 = malloc(n_max * 2);
    b->y2 = malloc(n_max * 2);
}

static void cyc_free(cyc_bufs *b)
{
    free(b->e1);
    free(b->e2);
    free(b->e3);
    free(b->y1);
    free(b->y2);
}

/* Realistic KV: per-channel scale (keys have outlier channels), normal values,
 * rare large outliers. One chunk = n_head_kv * 256 * head_dim * 2 values. */
static void fill_kv(mz_f16 *x, int n_head_kv, int head_dim, float base)
{
    float chan[256];
    for (int d = 0; d < head_dim; d++)
        chan[d] = base * (t_rand_u64(&g_rng) % 16 == 0 ? 8.0f : 0.5f + fabsf(t_rand_normal(&g_rng)));
    size_t n = (size_t)n_head_kv * 256 * (size_t)head_dim * 2;
    for (size_t i = 0; i < n; i++) {
        float v = t_rand_normal(&g_rng) * chan[i % (size_t)head_dim];
        if (t_rand_u64(&g_rng) % 1000 == 0) v *= 30.0f;
        x[i] = h(fminf(fmaxf(v, -65000.0f), 65000.0f));
    }
}

/* The q8 or q4 codec with groups of G. */
static mz_codec t_codec(unsigned top, unsigned G) { return top == 15 ? mz_codec_q4(G) : mz_codec_q8(G); }

/* family: "q8" or "q4" (G = 64, 32, 128 by name) */
static void test_realistic(const char *family)
{
    const int n_head_kv = 4, head_dim = 64;
    size_t n = (size_t)n_head_kv * 256 * head_dim * 2; /* 131072 values */
    mz_f16 *x = malloc(n * 2);
    cyc_bufs b;
    cyc_init(&b, n, 32);
    char names[3][16];
    snprintf(names[0], sizeof names[0], "%s", family);
    snprintf(names[1], sizeof names[1], "%s-g32", family);
    snprintf(names[2], sizeof names[2], "%s-g128", family);
    int fails = 0;
    for (int t = 0; t < 24; t++) {
        const mz_codec *c = mz_codec_find(names[t % 3]);
        float base = t % 4 == 0 ? 0.02f : t % 4 == 1 ? 1.0f : t % 4 == 2 ? 5.0f : 300.0f;
        fill_kv(x, n_head_kv, head_dim, base);
        int r = cycle3(c, x, n, &b);
        if (r && fails++ < 3) fprintf(stderr, "realistic chunk %d (%s): fail %d\n", t, c->name, r);
    }
    CHECK_EQ_INT(fails, 0);
    cyc_free(&b);
    free(x);
}

/* Adversarial groups: each generator fills one group of k values. */
static void fill_adversarial(mz_f16 *x, size_t k, int kind)
{
    float a = t_rand_normal(&g_rng) * 100.0f;
    mz_f16 lo = rand_finite_bits(), hi = rand_finite_bits();
    for (size_t j = 0; j < k; j++) {
        uint64_t r = t_rand_u64(&g_rng);
        switch (kind) {
        case 0: x[j] = h(a); break;                                      /* constant */
        case 1: x[j] = (r & 1) ? 0x8000u : 0x0000u; break;                /* ±0 */
        case 2: x[j] = (mz_f16)((r & 0x83ffu)); break;                    /* subnormals */
        case 3: x[j] = (mz_f16)(0x6400u + (r % 3)); break;                /* 1024 + tiny range */
        case 4: x[j] = (r & 1) ? 0x7bffu : 0xfbffu; break;                /* ±65504 */
        case 5: x[j] = rand_finite_bits(); break;                         /* any finite */
        case 6: x[j] = (r % 3 == 0) ? lo : (r % 3 == 1) ? hi : rand_finite_bits(); break;
        case 7: x[j] = h(a + (float)(r % 5) * 0.001f); break;             /* dense near a */
        case 8: x[j] = (mz_f16)(0x7bffu - (r % 4)); break;                /* near f16 max */
        case 9: x[j] = (r % 8 == 0) ? h(fminf(fmaxf(t_rand_normal(&g_rng) * 30000.0f, -65504.0f), 65504.0f))
                                    : h(t_rand_normal(&g_rng) * 1e-4f); break;
        case 10: x[j] = (mz_f16)((r & 0x8000u) | (0x0400u + (r % 64))); break; /* around min normal */
        case 11: { /* two neighbouring positive values (below 65504: its successor is inf) */
            mz_f16 base = (mz_f16)MZ_MIN(lo & 0x7fffu, 0x7bfeu);
            x[j] = (r % 2) ? base : (mz_f16)(base + 1u);
            break;
        }
        default: x[j] = h(t_rand_normal(&g_rng) * (float)(1 << (r % 16)) * 1e-3f); break;
        }
    }
}

/* top: 255 (q8) or 15 (q4, whose groups are even) */
static void test_adversarial(unsigned top)
{
    size_t n_max = 1 << 16;
    mz_f16 *x = malloc(n_max * 2);
    cyc_bufs b;
    cyc_init(&b, n_max, 1);
    const unsigned groups8[] = {1, 2, 3, 7, 8, 17, 32, 64, 100, 128, 1000, 4096};
    const unsigned groups4[] = {2, 4, 6, 8, 16, 18, 32, 64, 100, 128, 1000, 4096};
    const unsigned *groups = top == 15 ? groups4 : groups8;
    const size_t n_groups = MZ_ARRAY_LEN(groups8);
    int fails = 0;
    /* odd and edge lengths (a short last group, q4's padding nibble) */
    const size_t lens[] = {0, 1, 2, 15, 17, 63, 64, 65, 4097};
    const unsigned len_groups[] = {2, 32, 64, 128};
    for (size_t li = 0; li < MZ_ARRAY_LEN(lens); li++)
        for (size_t gi = 0; gi < MZ_ARRAY_LEN(len_groups); gi++)
            for (int kind = 0; kind < 13; kind++) {
                unsigned G = len_groups[gi];
                mz_codec c = t_codec(top, G);
                size_t n = lens[li];
                for (size_t i0 = 0; i0 < n; i0 += G)
                    fill_adversarial(x + i0, MZ_MIN((size_t)G, n - i0), (kind + (int)(i0 / G)) % 13);
                int r = cycle3(&c, x, n, &b);
                if (r && fails++ < 3) fprintf(stderr, "length %zu G=%u kind %d: fail %d\n", n, G, kind, r);
            }
    CHECK_EQ_INT(fails, 0);
    for (int t = 0; t < 600; t++) {
        unsigned G = groups[t % n_groups];
        mz_codec c = t_codec(top, G);
        size_t n = 1 + t_rand_u64(&g_rng) % (G <= 8 ? 4096 : 16384);
        for (size_t i0 = 0; i0 < n; i0 += G) {
            size_t k = MZ_MIN((size_t)G, n - i0);
            int kind = (int)(t_rand_u64(&g_rng) % 13);
            if (t % 13 < 12) kind = (t + (int)(i0 / G)) % 13;
            fill_adversarial(x + i0, k, kind);
        }
        int r = cycle3(&c, x, n, &b);
        if (r && fails++ < 3) fprintf(stderr, "adversarial %d (G=%u n=%zu): fail %d\n", t, G, n, r);
    }
    CHECK_EQ_INT(fails, 0);
    /* every pair (min, max) of a small set of interesting values, one group of 64 */
    static const uint16_t special[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00,
                                       0xbc00, 0x3c01, 0x6400, 0x6401, 0x7bfe, 0x7bff, 0xfbff,
                                       0xfbfe, 0x1000, 0x5bff, 0xd800, 0x7800, 0xf800};
    mz_codec c64 = t_codec(top, 64);
    fails = 0;
    for (size_t i = 0; i < MZ_ARRAY_LEN(special); i++)
        for (size_t j = 0; j < MZ_ARRAY_LEN(special); j++)
            for (int rep = 0; rep < 8; rep++) {
                float a = fl(special[i]), z = fl(special[j]);
                x[0] = special[i];
                x[1] = special[j];
                for (int k = 2; k < 64; k++) {
                    float u = 0.5f * (t_rand_float(&g_rng) + 1.0f);
                    x[k] = rep == 0 ? rand_finite_bits() : h(a + (z - a) * u);
                    if ((x[k] & 0x7c00u) == 0x7c00u) x[k] = special[i];
                }
                int r = cycle3(&c64, x, 64, &b);
                if (r && fails++ < 3)
                    fprintf(stderr, "pair %04x %04x rep %d: fail %d\n", special[i], special[j], rep, r);
            }
    CHECK_EQ_INT(fails, 0);
    cyc_free(&b);
    free(x);
}

/* Many short random groups: the bulk of the "millions of values" (plus
 * realistic); prints the values cycled and the largest error seen since the
 * last call. */
static void test_random_bulk(const char *name)
{
    size_t n = 1 << 18;
    mz_f16 *x = malloc(n * 2);
    cyc_bufs b;
    cyc_init(&b, n, 64);
    const mz_codec *c = mz_codec_find(name);
    int fails = 0;
    for (int t = 0; t < 8; t++) {
        for (size_t i = 0; i < n; i++) {
            float v = t_rand_normal(&g_rng);
            if (t_rand_u64(&g_rng) % 200 == 0) v *= 50.0f;
            x[i] = h(v * (t & 1 ? 1.0f : 0.05f));
        }
        int r = cycle3(c, x, n - (size_t)t, &b);
        if (r && fails++ < 3) fprintf(stderr, "bulk %d: fail %d\n", t, r);
    }
    CHECK_EQ_INT(fails, 0);
    printf("%s idempotency: %lld values through 3 encode/decode cycles; max error %.3f of bound "
           "(step + ulp16) / 2\n", name, g_values_cycled, g_max_rel_err);
    g_values_cycled = 0;
    g_max_rel_err = 0;
    cyc_free(&b);
    free(x);
}

/* ---- q8 format details and malformed blobs ----------------------------------------------- */

/* A constant group decodes to +0 everywhere (-0 becomes +0). */
static void check_constant_group(const mz_codec *c)
{
    mz_f16 z[3] = {0x8000u, 0x8000u, 0x0000u}, y[3];
    uint8_t blob[64];
    size_t len;
    CHECK_EQ_INT(mz_codec_encode(c, z, 3, blob, sizeof blob, &len), MZ_OK);
    CHECK_EQ_INT(mz_codec_decode(c, blob, len, y, 3), MZ_OK);
    CHECK(y[0] == 0 && y[1] == 0 && y[2] == 0);
}

/* Encodes 100 normal values v into good (256 bytes) and checks its length
 * is want_len; then every truncation and extension of it, and a wrong
 * value count, fail to decode (and to peek, with peek). The length. */
static size_t check_prefixes(const mz_codec *c, mz_f16 v[100], uint8_t good[256], size_t want_len, bool peek)
{
    for (int i = 0; i < 100; i++) v[i] = h(t_rand_normal(&g_rng));
    uint8_t tmp[300];
    size_t glen, pn;
    mz_f16 out[101];
    CHECK_EQ_INT(mz_codec_encode(c, v, 100, good, 256, &glen), MZ_OK);
    CHECK_EQ_INT(glen, want_len);
    int wrong = 0;
    for (size_t l = 0; l < glen + 8; l++) {
        memset(tmp, 0, sizeof tmp);
        memcpy(tmp, good, MZ_MIN(l, glen));
        if (l == glen) continue;
        wrong += mz_codec_decode(c, tmp, l, out, 100) != MZ_E_FORMAT;
        if (peek) wrong += c->peek(c, tmp, l, &pn) != MZ_E_FORMAT;
    }
    CHECK_EQ_INT(wrong, 0);
    CHECK_EQ_INT(mz_codec_decode(c, good, glen, out, 101), MZ_E_FORMAT);
    CHECK_EQ_INT(mz_codec_decode(c, good, glen, out, 99), MZ_E_FORMAT);
    return glen;
}

static void test_q8_format(void)
{
    const mz_codec *c = mz_codec_find("q8");
    CHECK_EQ_INT(mz_codec_bound(c, 128), 16 + 2 * 68);
    CHECK_EQ_INT(mz_codec_bound(c, 65), 16 + 68 + 5);
    CHECK_EQ_INT(mz_codec_bound(c, 0), 16);
    size_t n_chunk = 8 * 256 * 128 * 2;
    double saving = 1.0 - (double)mz_codec_bound(c, n_chunk) / (double)(n_chunk * 2);
    printf("q8 (G=64) space saving vs F16 for an 8x256x128 K+V chunk: %.2f %%\n", 100.0 * saving);
    CHECK(saving > 0.468 && saving < 0.47);

    /* known values: group {0, 1, 2, 255} → min 0, scale 1, exact */
    mz_f16 x[4] = {h(0), h(1), h(2), h(255)}, y[4];
    uint8_t blob[64];
    size_t len;
    CHECK_EQ_INT(mz_codec_encode(c, x, 4, blob, sizeof blob, &len), MZ_OK);
    CHECK_EQ_INT(len, 16 + 4 + 4);
    CHECK_EQ_INT(blob[16] | blob[17] << 8, 0);
    CHECK_EQ_INT(blob[18] | blob[19] << 8, h(255.0f));
    CHECK(blob[20] == 0 && blob[21] == 1 && blob[22] == 2 && blob[23] == 255);
    CHECK_EQ_INT(mz_codec_decode(c, blob, len, y, 4), MZ_OK);
    CHECK(memcmp(x, y, sizeof x) == 0);

    check_constant_group(c); /* scale 0 */

    /* inf / NaN are refused */
    mz_f16 bad[3] = {h(1), 0x7c00u, h(2)};
    CHECK_EQ_INT(mz_codec_encode(c, bad, 3, blob, sizeof blob, &len), MZ_E_FORMAT);
    CHECK(strstr(mz_last_error(), "infinite") != NULL);
    bad[1] = 0xfe01u;
    CHECK_EQ_INT(mz_codec_encode(c, bad, 3, blob, sizeof blob, &len), MZ_E_FORMAT);
    CHECK(strstr(mz_last_error(), "NaN") != NULL);
    CHECK_EQ_INT(mz_codec_encode(c, x, 4, blob, 23, &len), MZ_E_RANGE);

    /* malformed: every truncation / extension of a valid 2-group blob fails */
    mz_f16 v[100];
    uint8_t good[256], tmp[300];
    mz_f16 out[101];
    size_t glen = check_prefixes(c, v, good, 16 + 68 + 40, false);
    struct { size_t off; uint8_t val; const char *what; } muts[] = {
        {0, 'X', "magic"}, {4, 2, "version"}, {6, 0, "parameter"}, {7, 0x01, "length"},
        {15, 0x80, "parameter"}, {17, 0x7c, "min/max"}, {19, 0x7e, "min/max"},
        {19, 0xfb, "max < min"}, {17, 0x7b, "max < min"}, {16 + 68 + 3, 0xfc, "min/max"},
    };
    for (size_t i = 0; i < MZ_ARRAY_LEN(muts); i++) {
        memcpy(tmp, good, glen);
        tmp[muts[i].off] = muts[i].val;
        mz_status st = mz_codec_decode(c, tmp, glen, out, 100);
        CHECK_MSG(st == MZ_E_FORMAT && strstr(mz_last_error(), muts[i].what),
                  "mutation %zu: %d '%s'", i, (int)st, mz_last_error());
    }
    size_t pn;
    CHECK(c->peek(c, good, glen, &pn) == MZ_OK && pn == 100);
    /* a raw blob is not a q8 blob, and the reverse */
    const mz_codec *raw = mz_codec_find("raw");
    CHECK_EQ_INT(raw->decode(raw, good, glen, out, 100), MZ_E_FORMAT);
    /* a blob encoded with G=32 decodes through any q8 vtable (G is in the header) */
    const mz_codec *c32 = mz_codec_find("q8-g32");
    mz_f16 o2[100];
    CHECK_EQ_INT(mz_codec_encode(c32, v, 100, tmp, sizeof tmp, &glen), MZ_OK);
    CHECK_EQ_INT(mz_codec_decode(c, tmp, glen, out, 100), MZ_OK);
    CHECK_EQ_INT(mz_codec_decode(c32, tmp, glen, o2, 100), MZ_OK);
    CHECK(memcmp(out, o2, sizeof o2) == 0);
}

/* ---- q4 format details and malformed blobs ----------------------------------------------- */

static void test_q4_format(void)
{
    const mz_codec *c = mz_codec_find("q4");
    CHECK(c && c->param == 64 && mz_codec_find("q4-g64") == c);
    CHECK(mz_codec_find("q4-g32")->param == 32 && mz_codec_find("q4-g128")->param == 128);
    CHECK_EQ_INT(mz_codec_bound(c, 128), 16 + 2 * 36);
    CHECK_EQ_INT(mz_codec_bound(c, 65), 16 + 36 + 4 + 1);
    CHECK_EQ_INT(mz_codec_bound(c, 1), 16 + 4 + 1);
    CHECK_EQ_INT(mz_codec_bound(c, 0), 16);
    size_t n_chunk = 8 * 256 * 128 * 2;
    double saving = 1.0 - (double)mz_codec_bound(c, n_chunk) / (double)(n_chunk * 2);
    printf("q4 (G=64) space saving vs F16 for an 8x256x128 K+V chunk: %.2f %%\n", 100.0 * saving);
    CHECK(saving > 0.718 && saving < 0.719); /* 1 - 36 / 128 = 71.875 % */
    CHECK(fabs(mz_codec_ratio_hint(c) - 36.0 / 128.0) < 1e-12);
    CHECK(fabs(mz_codec_ratio_hint(mz_codec_find("q4-g32")) - 20.0 / 64.0) < 1e-12);

    /* known values: 0..15 → min 0, max 15, step 1, codes = values, two a
     * byte with the even value in the low nibble */
    mz_f16 x[16], y[16];
    for (int i = 0; i < 16; i++) x[i] = h((float)i);
    uint8_t blob[128];
    size_t len;
    CHECK_EQ_INT(mz_codec_encode(c, x, 16, blob, sizeof blob, &len), MZ_OK);
    CHECK_EQ_INT(len, 16 + 4 + 8);
    CHECK(blob[0] == 'M' && blob[1] == 'Z' && blob[2] == 'Q' && blob[3] == '4');
    CHECK_EQ_INT(blob[16] | blob[17] << 8, 0);
    CHECK_EQ_INT(blob[18] | blob[19] << 8, h(15.0f));
    static const uint8_t packed[8] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe};
    CHECK(memcmp(blob + 20, packed, 8) == 0);
    CHECK_EQ_INT(mz_codec_decode(c, blob, len, y, 16), MZ_OK);
    CHECK(memcmp(x, y, sizeof x) == 0);
    /* an odd count: the last byte's high nibble is padding, written 0 */
    mz_f16 o[3] = {h(0), h(15), h(7)};
    CHECK_EQ_INT(mz_codec_encode(c, o, 3, blob, sizeof blob, &len), MZ_OK);
    CHECK_EQ_INT(len, 16 + 4 + 2);
    CHECK(blob[20] == 0xf0 && blob[21] == 0x07);
    CHECK_EQ_INT(mz_codec_decode(c, blob, len, y, 3), MZ_OK);
    CHECK(memcmp(o, y, sizeof o) == 0);
    blob[21] = 0x17;
    CHECK_EQ_INT(mz_codec_decode(c, blob, len, y, 3), MZ_E_FORMAT);
    CHECK(strstr(mz_last_error(), "padding") != NULL);
    size_t pn;
    CHECK_EQ_INT(c->peek(c, blob, len, &pn), MZ_E_FORMAT);

    check_constant_group(c); /* step 0 */

    /* inf / NaN are refused by every kernel set */
    mz_f16 bad[3] = {h(1), 0x7c00u, h(2)};
    for (size_t i = 0; i < MZ_ARRAY_LEN(g_isas); i++) {
        if (!mz_q8_force_isa(g_isas[i])) continue;
        bad[1] = 0x7c00u;
        CHECK_EQ_INT(mz_codec_encode(c, bad, 3, blob, sizeof blob, &len), MZ_E_FORMAT);
        CHECK(strstr(mz_last_error(), "infinite") != NULL);
        bad[1] = 0xfe01u;
        CHECK_EQ_INT(mz_codec_encode(c, bad, 3, blob, sizeof blob, &len), MZ_E_FORMAT);
        CHECK(strstr(mz_last_error(), "NaN") != NULL);
    }
    mz_q8_force_isa(NULL);
    CHECK_EQ_INT(mz_codec_encode(c, x, 16, blob, 27, &len), MZ_E_RANGE);

    /* malformed: every truncation / extension of a valid 2-group blob fails */
    mz_f16 v[100];
    uint8_t good[256], tmp[300];
    mz_f16 out[101];
    size_t glen = check_prefixes(c, v, good, 16 + 36 + 4 + 18, true);
    struct { size_t off; uint8_t val; const char *what; } muts[] = {
        {3, '8', "magic"}, {4, 2, "version"}, {6, 0, "parameter"}, {6, 63, "parameter"},
        {6, 1, "parameter"}, {7, 0x01, "length"}, {8, 101, "length"}, {15, 0x80, "parameter"},
        {17, 0x7c, "min/max"}, {19, 0x7e, "min/max"}, {19, 0xfb, "max < min"},
        {17, 0x7b, "max < min"}, {16 + 36 + 3, 0xfc, "min/max"}, {16 + 36 + 1, 0x7b, "max < min"},
    };
    for (size_t i = 0; i < MZ_ARRAY_LEN(muts); i++) {
        for (size_t k = 0; k < MZ_ARRAY_LEN(g_isas); k++) {
            if (!mz_q8_force_isa(g_isas[k])) continue;
            memcpy(tmp, good, glen);
            tmp[muts[i].off] = muts[i].val;
            mz_status st = mz_codec_decode(c, tmp, glen, out, 100);
            CHECK_MSG(st == MZ_E_FORMAT && strstr(mz_last_error(), muts[i].what),
                      "mutation %zu (%s): %d '%s'", i, g_isas[k], (int)st, mz_last_error());
            st = c->peek(c, tmp, glen, &pn);
            CHECK_MSG(st == MZ_E_FORMAT && strstr(mz_last_error(), muts[i].what),
                      "peek mutation %zu: %d '%s'", i, (int)st, mz_last_error());
        }
        mz_q8_force_isa(NULL);
    }
    CHECK(c->peek(c, good, glen, &pn) == MZ_OK && pn == 100);
    /* random byte pokes anywhere: an error or a finite decode, never a crash */
    int wrong = 0;
    for (int t = 0; t < 2000; t++) {
        memcpy(tmp, good, glen);
        for (int k = 0; k < 1 + t % 3; k++) tmp[t_rand_u64(&g_rng) % glen] = (uint8_t)t_rand_u64(&g_rng);
        if (mz_codec_decode(c, tmp, glen, out, 100) == MZ_OK)
            for (int i = 0; i < 100; i++) wrong += (out[i] & 0x7c00u) == 0x7c00u;
    }
    CHECK_EQ_INT(wrong, 0);
    /* a q8 blob is not a q4 blob, and the reverse */
    const mz_codec *q8 = mz_codec_find("q8");
    CHECK_EQ_INT(mz_codec_decode(q8, good, glen, out, 100), MZ_E_FORMAT);
    CHECK_EQ_INT(mz_codec_encode(q8, v, 100, tmp, sizeof tmp, &len), MZ_OK);
    CHECK_EQ_INT(mz_codec_decode(c, tmp, len, out, 100), MZ_E_FORMAT);
    CHECK(strstr(mz_last_error(), "magic") != NULL);
    /* a blob encoded with G=32 decodes through any q4 vtable (G is in the header) */
    const mz_codec *c32 = mz_codec_find("q4-g32");
    mz_f16 o2[100];
    CHECK_EQ_INT(mz_codec_encode(c32, v, 100, tmp, sizeof tmp, &glen), MZ_OK);
    CHECK_EQ_INT(glen, 16 + 4 * 4 + 50);
    CHECK_EQ_INT(mz_codec_decode(c, tmp, glen, out, 100), MZ_OK);
    CHECK_EQ_INT(mz_codec_decode(c32, tmp, glen, o2, 100), MZ_OK);
    CHECK(memcmp(out, o2, sizeof o2) == 0);
}

/* A random valid q4 blob written byte by byte here (not by the encoder):
 * any finite min <= max, any codes, padding nibble 0. */
static size_t make_random_q4_blob(uint8_t *blob, size_t n, unsigned G)
{
    static const uint8_t head[8] = {'M', 'Z', 'Q', '4', 1, 0};
    memcpy(blob, head, 6);
    blob[6] = (uint8_t)G;
    blob[7] = (uint8_t)(G >> 8);
    for (int i = 0; i < 8; i++) blob[8 + i] = (uint8_t)((uint64_t)n >> (8 * i));
    uint8_t *p = blob + 16;
    for (size_t i0 = 0; i0 < n; i0 += G) {
        size_t k = MZ_MIN((size_t)G, n - i0);
        put_rand_range(p, 40, true); /* narrow ranges: plateaus */
        for (size_t j = 0; j < (k + 1) / 2; j++) p[4 + j] = (uint8_t)t_rand_u64(&g_rng);
        if (k % 2) p[4 + k / 2] &= 0x0f;
        p += 4 + (k + 1) / 2;
    }
    return (size_t)(p - blob);
}

/* q * step is exact for every code q of a group's grid (top 255: q8, 15:
 * q4), so a fused multiply-add (any compiler, any ISA) gives the same f32 as
 * mul + add; and the codec's step is the one written out in this test.
 * Returns the number of cases where that fails, over 20000 random grids. */
static int inexact_steps(unsigned top)
{
    int bad = 0;
    for (int t = 0; t < 20000; t++) {
        float lo, hi;
        rand_ordered(fl(rand_finite_bits()), &lo, &hi);
        const float step = top == 255 ? mz_q8_step(lo, hi) : mz_q4_step(lo, hi);
        bad += step != t_step(lo, hi, top);
        for (unsigned q = 0; q <= top; q += top == 255 ? 1 + (unsigned)(t % 7) : 1) {
            volatile float prod = (float)q * step;
            bad += fmaf((float)q, step, lo) != lo + prod;
            bad += (double)prod != (double)q * (double)step;
        }
    }
    return bad;
}

/* Decode of random q4 blobs by every kernel set (and each SIMD kernel
 * directly, streaming or not, aligned or not) against t_decq. */
static void test_q4_decode_formula(void)
{
    size_t n_max = 70001;
    uint8_t *blob = malloc(16 + n_max * 3 + 64);
    mz_f16 *want = malloc(n_max * 2), *got = malloc(n_max * 2);
    mz_f16 *al = aligned_alloc(64, ((n_max + 64) * 2 + 63) / 64 * 64);
    const unsigned groups[] = {2, 4, 16, 18, 30, 32, 34, 64, 96, 128, 1000, 4096};
    long long compared = 0;
    int mism = 0;
    for (int t = 0; t < 240; t++) {
        unsigned G = groups[t % MZ_ARRAY_LEN(groups)];
        size_t n = t_rand_u64(&g_rng) % (t < 120 ? 1000 : n_max);
        size_t len = make_random_q4_blob(blob, n, G);
        const uint8_t *p = blob + 16;
        for (size_t i0 = 0; i0 < n; i0 += G) {
            size_t k = MZ_MIN((size_t)G, n - i0);
            float mn = fl((mz_f16)(p[0] | p[1] << 8)), mx = fl((mz_f16)(p[2] | p[3] << 8));
            for (size_t j = 0; j < k; j++)
                want[i0 + j] = t_decq(mn, mx, 15, (p[4 + j / 2] >> (j % 2 ? 4 : 0)) & 15u);
            p += 4 + (k + 1) / 2;
        }
        mz_codec c = mz_codec_q4(G);
        size_t pn = 0;
        CHECK(c.peek(&c, blob, len, &pn) == MZ_OK && pn == n);
        memset(got, 0xee, n * 2);
        CHECK_EQ_INT(mz_q4_decode_ref(blob, len, got, n), MZ_OK);
        if (memcmp(want, got, n * 2) != 0 && mism++ < 3) fprintf(stderr, "q4 scalar G=%u n=%zu differs\n", G, n);
        decode_each_isa(&c, blob, len, want, got, n, "q4 decode", G, &mism);
        decode_groups_each_kernel(4, blob, n, G, al, 1 + (size_t)(t % 31), want, got, "q4 decode", &mism);
        compared += (long long)n;
    }
    CHECK_EQ_INT(mism, 0);
    CHECK_EQ_INT(inexact_steps(15), 0); /* for every 4-bit code too */
    printf("q4 decode, every kernel set: %lld values equal to the formula\n", compared);
    free(al);
    free(blob);
    free(want);
    free(got);
}

/* ---- SIMD vs scalar ---------------------------------------------------------------------- */

/* Random valid blob: any finite min <= max, any codes. */
static size_t make_random_blob(uint8_t *blob, size_t cap, size_t n, unsigned G)
{
    mz_codec c = mz_codec_q8(G);
    mz_f16 *x = calloc(n ? n : 1, 2);
    size_t len = 0;
    mz_status st = mz_codec_encode(&c, x, n, blob, cap, &len);
    free(x);
    if (st != MZ_OK) return 0;
    uint8_t *p = blob + MZ_CODEC_HEADER_BYTES;
    for (size_t i0 = 0; i0 < n; i0 += G) {
        size_t k = MZ_MIN((size_t)G, n - i0);
        put_rand_range(p, 300, false);
        for (size_t j = 0; j < k; j++) p[4 + j] = (uint8_t)t_rand_u64(&g_rng);
        p += 4 + k;
    }
    return len;
}

static void test_simd_vs_scalar(void)
{
    printf("q8 decode kernel: %s\n", mz_q8_isa());
    size_t n_max = 70000;
    size_t cap = n_max * 5 + 4096;
    uint8_t *blob = malloc(cap);
    mz_f16 *a = malloc(n_max * 2), *b = malloc(n_max * 2);
    const unsigned groups[] = {1, 5, 8, 15, 16, 17, 31, 32, 64, 128, 333};
    /* Streaming stores want 64-byte lines; C11 wants the size a multiple of the alignment. */
    mz_f16 *al = aligned_alloc(64, ((n_max + 64) * 2 + 63) / 64 * 64);
    long long compared = 0;
    int mism = 0;
    for (int t = 0; t < 200; t++) {
        unsigned G = groups[t % MZ_ARRAY_LEN(groups)];
        size_t n = t_rand_u64(&g_rng) % (t < 100 ? 1000 : n_max);
        size_t len = make_random_blob(blob, cap, n, G);
        mz_codec c = mz_codec_q8(G);
        CHECK(len > 0);
        if (!len) continue;
        mz_status s1 = mz_q8_decode_ref(blob, len, a, n);
        mz_status s2 = mz_codec_decode(&c, blob, len, b, n);
        CHECK(s1 == MZ_OK && s2 == MZ_OK);
        if (memcmp(a, b, n * 2) != 0) mism++;
        decode_each_isa(&c, blob, len, a, b, n, "decode", G, &mism);
        decode_groups_each_kernel(8, blob, n, G, al, 1 + (size_t)(t % 31), a, b, "q8 decode", &mism);
        for (size_t i = 0; i < n; i++) mism += (a[i] & 0x7c00u) == 0x7c00u; /* always finite */
        compared += (long long)n;
    }
    CHECK_EQ_INT(mism, 0);
    CHECK_EQ_INT(inexact_steps(255), 0);
    printf("q8 decode %s vs scalar: %lld values bit-identical\n", mz_q8_isa(), compared);
    free(al);
    free(blob);
    free(a);
    free(b);
}

/* An invalid group in the middle of a blob: every kernel set fails with the
 * scalar message and leaves the groups before it decoded; a large aligned
 * destination (the streaming-store path of the dispatcher) decodes the same. */
static void test_decode_errors_and_large(unsigned top)
{
    mz_status (*decode_ref)(const uint8_t *, size_t, mz_f16 *, size_t) =
        top == 15 ? mz_q4_decode_ref : mz_q8_decode_ref;
    size_t n = 300000; /* 600 kB of F16: above the streaming threshold */
    const unsigned groups[] = {32, 64, 128, 100};
    mz_f16 *x = malloc(n * 2), *a = malloc(n * 2);
    mz_f16 *b = aligned_alloc(4096, (n * 2 + 4095) / 4096 * 4096);
    for (size_t i = 0; i < n; i++) x[i] = h(t_rand_normal(&g_rng) * (i % 7 == 0 ? 9.0f : 1.0f));
    int bad = 0;
    for (size_t gi = 0; gi < MZ_ARRAY_LEN(groups); gi++) {
        mz_codec c = t_codec(top, groups[gi]);
        size_t cap = mz_codec_bound(&c, n), len;
        uint8_t *blob = malloc(cap);
        size_t nn = n - gi * 13; /* ragged last group */
        CHECK_EQ_INT(mz_codec_encode(&c, x, nn, blob, cap, &len), MZ_OK);
        CHECK_EQ_INT(decode_ref(blob, len, a, nn), MZ_OK);
        for (size_t i = 0; i < MZ_ARRAY_LEN(g_isas); i++) {
            if (!mz_q8_force_isa(g_isas[i])) continue;
            memset(b, 0xee, nn * 2);
            CHECK_EQ_INT(mz_codec_decode(&c, blob, len, b, nn), MZ_OK);
            bad += memcmp(a, b, nn * 2) != 0;
            CHECK_EQ_INT(mz_codec_decode(&c, blob, len, b + 1, nn), MZ_OK); /* misaligned */
            bad += memcmp(a, b + 1, nn * 2) != 0;
        }
        /* break group 1000: max < min, then a non-finite min */
        size_t g = 1000, off = MZ_CODEC_HEADER_BYTES + g * t_group_bytes(top, groups[gi]);
        uint8_t keep[4];
        memcpy(keep, blob + off, 4);
        for (int kind = 0; kind < 2; kind++) {
            if (kind == 0) { /* swap a distinct min and max */
                blob[off] = keep[2], blob[off + 1] = keep[3], blob[off + 2] = keep[0], blob[off + 3] = keep[1];
            } else {
                blob[off + 1] = 0x7c; /* inf */
            }
            char want[256];
            CHECK_EQ_INT(decode_ref(blob, len, a, nn), MZ_E_FORMAT);
            snprintf(want, sizeof want, "%s", mz_last_error());
            CHECK(strstr(want, "group 1000 ") != NULL);
            for (size_t i = 0; i < MZ_ARRAY_LEN(g_isas); i++) {
                if (!mz_q8_force_isa(g_isas[i])) continue;
                memset(b, 0xee, nn * 2);
                CHECK_EQ_INT(mz_codec_decode(&c, blob, len, b, nn), MZ_E_FORMAT);
                CHECK_MSG(strcmp(mz_last_error(), want) == 0, "%s: '%s' vs '%s'", g_isas[i],
                          mz_last_error(), want);
                bad += memcmp(a, b, g * groups[gi] * 2) != 0; /* the groups before it */
            }
        }
        memcpy(blob + off, keep, 4);
        mz_q8_force_isa(NULL);
        free(blob);
    }
    CHECK_EQ_INT(bad, 0);
    free(x);
    free(a);
    free(b);
}

/* ---- encoders: randomized differential test ------------------------------------------ */

static mz_f16 t_clamp_finite(float v)
{
    return h(fminf(fmaxf(v, -65504.0f), 65504.0f));
}

/* f16 spacing at magnitude a */
static float t_ulp16(float a)
{
    a = fabsf(a);
    if (a < 0x1p-14f) return 0x1p-24f;
    int e;
    frexpf(a, &e);
    return ldexpf(1.0f, e - 11);
}

/* One adversarial group of k values for the grid of top code `top`. */
static void fill_diff_group(mz_f16 *x, size_t k, int kind, unsigned top)
{
    uint64_t r0 = t_rand_u64(&g_rng);
    mz_f16 a = rand_finite_bits();
    float lo = 0, hi = 0;
    switch (kind) {
    case 0: { /* a few f16 ulps wide, anywhere: plateaus */
        mz_f16 base = (mz_f16)(a & 0x7fffu) > 0x7bc0u ? (mz_f16)(a - 0x40u) : a;
        unsigned w = 1 + (unsigned)(r0 % 40);
        for (size_t j = 0; j < k; j++) {
            unsigned d = (unsigned)(t_rand_u64(&g_rng) % (w + 1));
            x[j] = (mz_f16)((base & 0x8000u) ? base - (d > (base & 0x7fffu) ? 0 : d) : base + d);
        }
        return;
    }
    case 1: /* around and across the subnormals */
        for (size_t j = 0; j < k; j++) {
            uint64_t r = t_rand_u64(&g_rng);
            x[j] = (mz_f16)((r & 0x8000u) | ((r >> 16) % (r0 % 2 ? 0x0480u : 0x0040u)));
        }
        return;
    case 2: /* huge ranges */
        for (size_t j = 0; j < k; j++) {
            uint64_t r = t_rand_u64(&g_rng);
            x[j] = r % 5 == 0 ? (r & 8 ? 0x7bffu : 0xfbffu) : rand_finite_bits();
        }
        return;
    case 3: /* constant, or ±0 with the odd subnormal */
        for (size_t j = 0; j < k; j++) {
            uint64_t r = t_rand_u64(&g_rng);
            x[j] = r0 % 2 ? a : (r % 9 == 0 ? (mz_f16)(r & 0x8001u) : (mz_f16)(r & 0x8000u));
        }
        return;
    case 4: /* strict-grid threshold: step near 2 ulp16(max |x|) */
    case 5: { /* exact-f32 threshold: step + ulp16 near 0.5 */
        float M = ldexpf(1.0f + t_rand_float(&g_rng) * 0.5f, (int)(r0 % 24) - 12);
        float step = kind == 4 ? 2.0f * t_ulp16(M) : 0.5f - t_ulp16(M);
        step *= 1.0f + 0.02f * t_rand_float(&g_rng);
        if (kind == 5) M = fmaxf(M, 140.0f * (1.0f + (float)(r0 % 100)));
        hi = (r0 & 64) ? M : -M + (float)top * step;
        lo = hi - (float)top * step;
        break;
    }
    case 7: /* symmetric ±M, values near 0: dec(127) == -dec(128) for some M, and
             * differences like 3.9 - 2^-24 vs 3.9 + 2^-24 round to the same f32 */
        hi = 300.0f + (float)(r0 % 65000);
        for (size_t j = 0; j < k; j++) {
            uint64_t r = t_rand_u64(&g_rng);
            x[j] = r % 4 == 0 ? rand_finite_bits() : (mz_f16)((r & 0x8000u) | ((r >> 16) % 8));
            if (fabsf(fl(x[j])) > hi) x[j] = 0;
        }
        x[r0 % k] = h(-hi);
        x[(r0 >> 20) % k] = h(hi);
        return;
    case 8: { /* negative range across -2^e with ulp16(2^e) / 2 < step < ulp16(2^e):
               * plateaus below -2^e, gaps above it, so the lower neighbour of x
               * may sit on a plateau (the mirror image has none; tried too) */
        float p2 = ldexpf(1.0f, (int)(r0 % 28) - 13);
        float step = t_ulp16(p2) * (0.55f + 0.4f * (t_rand_float(&g_rng) + 1.0f) * 0.5f);
        float below = (float)top * step * (0.1f + 0.8f * (t_rand_float(&g_rng) + 1.0f) * 0.5f);
        lo = -p2 - below;
        hi = lo + (float)top * step;
        if (r0 & 128) {
            float tmp = lo;
            lo = -hi;
            hi = -tmp;
        }
        for (size_t j = 0; j < k; j++) x[j] = h(lo + (hi - lo) * 0.5f * (t_rand_float(&g_rng) + 1.0f));
        x[r0 % k] = h(lo);
        x[(r0 >> 20) % k] = h(hi);
        return;
    }
    case 6: /* realistic spread */
        lo = -fabsf(t_rand_normal(&g_rng)) * ldexpf(1.0f, (int)(r0 % 12) - 6);
        hi = fabsf(t_rand_normal(&g_rng)) * ldexpf(1.0f, (int)(r0 % 12) - 6);
        break;
    default: { /* any two endpoints */
        rand_ordered(fl(a), &lo, &hi);
        break;
    }
    }
    /* values on the grid of (lo, hi), the f16 values next to them, and those
     * nearest the midpoints between neighbours (ties), with lo and hi present */
    mz_f16 hlo = t_clamp_finite(lo), hhi = t_clamp_finite(hi);
    if (fl(hhi) < fl(hlo)) hhi = hlo;
    float mn = fl(hlo), mx = fl(hhi);
    for (size_t j = 0; j < k; j++) {
        uint64_t r = t_rand_u64(&g_rng);
        unsigned q = (unsigned)(r % (top + 1));
        mz_f16 d = t_decq(mn, mx, top, q), e = t_decq(mn, mx, top, q < top ? q + 1 : q);
        switch ((r >> 8) % 5) {
        case 0: x[j] = d; break;
        case 1: x[j] = h(0.5f * (fl(d) + fl(e))); break; /* RNE picks a side or hits the tie */
        case 2: x[j] = (mz_f16)(d + ((r >> 16) & 1 ? 1 : -1)); break;
        case 3: x[j] = h(mn + (mx - mn) * 0.5f * (t_rand_float(&g_rng) + 1.0f)); break;
        default: x[j] = e; break;
        }
        if ((x[j] & 0x7c00u) == 0x7c00u || fl(x[j]) < mn || fl(x[j]) > mx) x[j] = d;
    }
    x[r0 % k] = hlo;
    x[(r0 >> 20) % k] = hhi;
}

/* top: 255 (q8) or 15 (q4) */
static void test_encode_differential(unsigned top)
{
    size_t n_max = 20000;
    mz_f16 *x = malloc(n_max * 2);
    uint8_t *ref = malloc(n_max * 5 + 64), *got = malloc(n_max * 5 + 64);
    const unsigned groups8[] = {32, 64, 128, 1, 7, 16, 17, 100, 255, 1000};
    const unsigned groups4[] = {32, 64, 128, 2, 8, 16, 18, 100, 254, 1000};
    const unsigned *groups = top == 15 ? groups4 : groups8;
    const bool q4 = top == 15;
    long long groups_done = 0;
    int mism = 0, n_isas = 0;
    for (int t = 0; t < 1500; t++) {
        unsigned G = groups[t % MZ_ARRAY_LEN(groups8)];
        size_t n = 1 + t_rand_u64(&g_rng) % (t % 3 ? 4 * (size_t)G + 40 : n_max);
        if (n > n_max) n = n_max;
        for (size_t i0 = 0; i0 < n; i0 += G) {
            size_t k = MZ_MIN((size_t)G, n - i0);
            fill_diff_group(x + i0, k, (int)(t_rand_u64(&g_rng) % 10), top);
            for (size_t j = 0; j < k; j++) /* the odd generator overshoot */
                if ((x[i0 + j] & 0x7c00u) == 0x7c00u) x[i0 + j] = 0x7bffu;
            groups_done++;
        }
        size_t pay = (n + G - 1) / G * 4 + (q4 ? (n + 1) / 2 : n);
        CHECK_EQ_INT((q4 ? mz_q4_encode_groups_ref : mz_q8_encode_groups_ref)(x, n, G, ref), n);
#if defined(MZ_CODEC_HAVE_AVX512_FILE)
        if (mz_codec_cpu_has_avx512()) {
            memset(got, 0xee, pay);
            CHECK_EQ_INT((q4 ? mz_q4_encode_groups_avx512 : mz_q8_encode_groups_avx512)(x, n, G, got), n);
            if (memcmp(ref, got, pay) != 0 && mism++ < 5) {
                size_t i = 0;
                while (ref[i] == got[i]) i++;
                fprintf(stderr, "avx512 encode G=%u n=%zu: byte %zu is %u, scalar %u\n", G, n, i,
                        got[i], ref[i]);
            }
        }
#endif
        /* through the codec, every kernel set */
        mz_codec c = t_codec(top, G);
        size_t cap = mz_codec_bound(&c, n), len;
        n_isas = 0;
        for (size_t i = 0; i < MZ_ARRAY_LEN(g_isas); i++) {
            if (!mz_q8_force_isa(g_isas[i])) continue;
            n_isas++;
            CHECK_EQ_INT(mz_codec_encode(&c, x, n, got, cap, &len), MZ_OK);
            if (memcmp(ref, got + MZ_CODEC_HEADER_BYTES, pay) != 0 && mism++ < 5)
                fprintf(stderr, "%s encode G=%u n=%zu differs from scalar\n", g_isas[i], G, n);
        }
        mz_q8_force_isa(NULL);
        /* inf/NaN anywhere: the same error, naming the same value, from every kernel set */
        if (t % 5 == 0) {
            size_t at = t_rand_u64(&g_rng) % n;
            mz_f16 keep = x[at];
            x[at] = t % 2 ? 0x7c00u : 0xfe01u;
            char want[256] = "";
            for (size_t i = 0; i < MZ_ARRAY_LEN(g_isas); i++) {
                if (!mz_q8_force_isa(g_isas[i])) continue;
                CHECK_EQ_INT(mz_codec_encode(&c, x, n, got, cap, &len), MZ_E_FORMAT);
                CHECK_EQ_INT(len, 0);
                if (!want[0]) snprintf(want, sizeof want, "%s", mz_last_error());
                CHECK_MSG(strcmp(want, mz_last_error()) == 0, "%s: '%s' vs '%s'", g_isas[i],
                          mz_last_error(), want);
            }
            mz_q8_force_isa(NULL);
            x[at] = keep;
        }
    }
    CHECK_EQ_INT(mism, 0);
    printf("%s encode differential: %lld adversarial groups, %d kernel sets, byte-identical to "
           "scalar\n", q4 ? "q4" : "q8", groups_done, n_isas);
    free(x);
    free(ref);
    free(got);
}

/* ---- throughput (printed only) ---------------------------------------------------------------- */

static double decode_gbps(const mz_codec *c, const uint8_t *blob, size_t len, mz_f16 *out,
                          size_t n)
{
    double t0 = t_cpu_ms(), t;
    long iters = 0;
    do {
        if (mz_codec_decode(c, blob, len, out, n) != MZ_OK) return -1;
        iters++;
        t = t_cpu_ms() - t0;
    } while (t < 200.0);
    return (double)iters * (double)n * 2.0 / (t * 1e6);
}

/* GB/s of F16 input per CPU second over 200 ms of encodes; -1 if one fails
 * (the blob of the last one in blob[0, *len)). */
static double encode_gbps(const mz_codec *c, const mz_f16 *x, size_t n, uint8_t *blob, size_t cap,
                          size_t *len)
{
    double t0 = t_cpu_ms(), t;
    long iters = 0;
    do {
        if (mz_codec_encode(c, x, n, blob, cap, len) != MZ_OK) return -1;
        iters++;
        t = t_cpu_ms() - t0;
    } while (t < 200.0);
    return (double)iters * (double)n * 2.0 / (t * 1e6);
}

static void test_throughput(const char *name)
{
    const int n_head_kv = 8, head_dim = 128;
    size_t n = (size_t)n_head_kv * 256 * head_dim * 2; /* 1 MiB of F16 */
    mz_f16 *x = malloc(n * 2), *y = malloc(n * 2);
    const mz_codec *c = mz_codec_find(name);
    size_t cap = mz_codec_bound(c, n), len;
    uint8_t *blob = malloc(cap);
    fill_kv(x, n_head_kv, head_dim, 1.0f);
    double enc = encode_gbps(c, x, n, blob, cap, &len);
    mz_q8_force_scalar(true);
    double scalar = decode_gbps(c, blob, len, y, n);
    double enc_scalar = encode_gbps(c, x, n, blob, cap, &len);
    mz_q8_force_scalar(false);
    CHECK(enc > 0 && enc_scalar > 0);
    double best = decode_gbps(c, blob, len, y, n);
    const mz_codec *raw = mz_codec_find("raw");
    uint8_t *rblob = malloc(mz_codec_bound(raw, n));
    size_t rlen;
    CHECK_EQ_INT(mz_codec_encode(raw, x, n, rblob, mz_codec_bound(raw, n), &rlen), MZ_OK);
    double rawr = decode_gbps(raw, rblob, rlen, y, n);
#if defined(__SANITIZE_ADDRESS__)
    const char *note = " (sanitizer build: not representative)";
#else
    const char *note = "";
#endif
    printf("throughput, 1 thread, GB/s of F16 per CPU second%s: %s encode scalar %.2f, %s %.2f"
           " | %s decode scalar %.2f, %s %.2f | raw decode %.2f\n", note, name, enc_scalar,
           mz_q8_isa(), enc, name, scalar, mz_q8_isa(), best, rawr);
    free(x);
    free(y);
    free(blob);
    free(rblob);
}

int main(void)
{
    test_f16_helpers();
    test_registry();
    test_raw();
    test_q8_format();
    test_realistic("q8");
    test_adversarial(255);
    test_random_bulk("q8");
    test_simd_vs_scalar();
    test_decode_errors_and_large(255);
    test_encode_differential(255);
    test_q4_format();
    test_q4_decode_formula();
    test_realistic("q4");
    test_adversarial(15);
    test_random_bulk("q4");
    test_decode_errors_and_large(15);
    test_encode_differential(15);
    test_throughput("q8");
    test_throughput("q4");
    return t_done("test_codec");
}
