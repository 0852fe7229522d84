/*
 * test_codec_cachegen.c — the CacheGen-style codec: round-trip error bounds
 * per level setting (and the layer schedule), idempotency over 3 cycles on
 * realistic and adversarial inputs, bound() respected exactly (buffers of
 * bound() bytes, so ASan sees any overrun), determinism, SIMD vs scalar
 * decode, malformed and truncated blobs, and throughput (printed only).
 */
#define _POSIX_C_SOURCE 200809L
#include "codec/codec.h"
#include "codec/codec_cachegen.h"
#include "codec/codec_f16.h"
#include "testutil.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

static unsigned long long g_rng = 0xc0dec0de1234ULL;

static mz_f16 h(float f) { return mz_float_to_half(f); }
static float fl(mz_f16 x) { return mz_half_to_float(x); }

/* A KV chunk shaped like a real one: K then V, [heads][256][hd]; K rows have
 * a few outlier channels (large, mostly one sign), V rows are plain normals,
 * per-token magnitudes vary. */
static void fill_kv(mz_f16 *x, unsigned heads, unsigned hd)
{
    size_t per = (size_t)heads * 256 * hd;
    for (unsigned kv = 0; kv < 2; kv++)
        for (unsigned hh = 0; hh < heads; hh++)
            for (unsigned t = 0; t < 256; t++) {
                float tok_scale = 0.5f + 1.5f * (0.5f * (t_rand_float(&g_rng) + 1.0f));
                for (unsigned d = 0; d < hd; d++) {
                    float v = t_rand_normal(&g_rng) * tok_scale;
                    if (kv == 0 && (d % 16) == 3) v = 8.0f + 2.0f * v; /* outlier channel */
                    x[kv * per + ((size_t)hh * 256 + t) * hd + d] = h(v);
                }
            }
}

/* encode → decode → encode → decode → encode → decode: every blob identical,
 * every decode identical; returns the first blob's length (0 on failure). */
static size_t check_cycles(const mz_codec *c, const mz_f16 *x, size_t n, const char *what)
{
    size_t cap = mz_codec_bound(c, n);
    uint8_t *e1 = malloc(cap), *e2 = malloc(cap);
    mz_f16 *y1 = malloc(n * 2 + 2), *y2 = malloc(n * 2 + 2);
    size_t l1 = 0, l2 = 0;
    int ok = mz_codec_encode(c, x, n, e1, cap, &l1) == MZ_OK;
    CHECK_MSG(ok, "%s: encode: %s", what, mz_last_error());
    if (ok) {
        CHECK_MSG(l1 <= cap, "%s: %zu > bound %zu", what, l1, cap);
        ok = mz_codec_decode(c, e1, l1, y1, n) == MZ_OK;
        CHECK_MSG(ok, "%s: decode: %s", what, mz_last_error());
    }
    for (int cycle = 0; ok && cycle < 3; cycle++) {
        ok = mz_codec_encode(c, y1, n, e2, cap, &l2) == MZ_OK;
        CHECK_MSG(ok && l2 == l1 && memcmp(e1, e2, l1) == 0, "%s: cycle %d not idempotent "
                  "(%zu vs %zu bytes)", what, cycle, l1, l2);
        ok = ok && l2 == l1 && memcmp(e1, e2, l1) == 0;
        if (ok) ok = mz_codec_decode(c, e2, l2, y2, n) == MZ_OK && memcmp(y1, y2, n * 2) == 0;
        CHECK_MSG(ok, "%s: cycle %d decode differs", what, cycle);
    }
    if (ok && n) {
        /* the scalar reference decodes the same bits */
        CHECK_EQ_INT(mz_cachegen_decode_ref(e1, l1, y2, n), MZ_OK);
        CHECK_MSG(memcmp(y1, y2, n * 2) == 0, "%s: SIMD and scalar decodes differ", what);
        /* a second encode of the same input gives the same bytes */
        CHECK(mz_codec_encode(c, x, n, e2, cap, &l2) == MZ_OK && l2 == l1 &&
              memcmp(e1, e2, l1) == 0);
    }
    free(e1);
    free(e2);
    free(y1);
    free(y2);
    return ok ? l1 : 0;
}

/* ---- parameters and registry --------------------------------------------------------- */

static void test_params(void)
{
    const mz_codec *c = mz_codec_find("cachegen");
    CHECK(c && !strcmp(c->name, "cachegen"));
    mz_cachegen_params p = mz_cachegen_params_of(c);
    CHECK(p.row == 64 && p.levels_k == 15 && p.levels_v == 15 && p.k_chans_log2 == 0 &&
          p.v_chans_log2 == 3 && p.anchor == 0);
    CHECK(mz_cachegen_params_of(mz_codec_find("cachegen-q7")).levels_v == 7);
    CHECK(mz_cachegen_params_of(mz_codec_find("cachegen-anchor")).anchor == 8);
    /* the layer schedule: more levels early */
    mz_cachegen_params l0 = mz_cachegen_params_layer(128, 0, 30);
    mz_cachegen_params l9 = mz_cachegen_params_layer(128, 9, 30);
    mz_cachegen_params l10 = mz_cachegen_params_layer(128, 10, 30);
    mz_cachegen_params l29 = mz_cachegen_params_layer(128, 29, 30);
    CHECK(l0.levels_k == 15 && l9.levels_k == 15 && l10.levels_k == 7 && l29.levels_v == 7);
    CHECK(l0.row == 128);
    /* pack / unpack round trip over the whole range */
    mz_cachegen_params q = {.row = 1024, .levels_k = 31, .levels_v = 1, .k_chans_log2 = 7,
                            .v_chans_log2 = 5, .anchor = 128};
    mz_codec cq = mz_codec_cachegen(&q);
    mz_cachegen_params r = mz_cachegen_params_of(&cq);
    CHECK(memcmp(&q, &r, sizeof q) == 0);
}

/* ---- round-trip error bounds ------------------------------------------------------------- */

static double ulp16(float a)
{
    if (a < 6.103515625e-05f) return ldexp(1.0, -24);
    int e;
    frexp(a, &e);
    return ldexp(1.0, e - 11);
}

static void test_error_bounds(void)
{
    const unsigned heads = 2, hd = 64;
    size_t n = 2 * (size_t)heads * 256 * hd;
    mz_f16 *x = malloc(n * 2), *y = malloc(n * 2);
    fill_kv(x, heads, hd);
    const unsigned levels[] = {1, 3, 7, 15, 31};
    double prev_rms = 1e30;
    for (size_t li = 0; li < MZ_ARRAY_LEN(levels); li++) {
        mz_cachegen_params p = mz_cachegen_params_default(hd);
        p.levels_k = p.levels_v = levels[li];
        mz_codec c = mz_codec_cachegen(&p);
        size_t cap = mz_codec_bound(&c, n), len = 0;
        uint8_t *blob = malloc(cap);
        CHECK_EQ_INT(mz_codec_encode(&c, x, n, blob, cap, &len), MZ_OK);
        CHECK_EQ_INT(mz_codec_decode(&c, blob, len, y, n), MZ_OK);
        int bad = 0, bad_scale = 0;
        double se = 0, sp = 0;
        for (size_t r = 0; r < n / hd; r++) {
            float s = 0, sy = 0;
            for (unsigned j = 0; j < hd; j++) {
                s = fmaxf(s, fabsf(fl(x[r * hd + j])));
                sy = fmaxf(sy, fabsf(fl(y[r * hd + j])));
            }
            bad_scale += s != sy; /* the row's max magnitude is kept exactly */
            double step = (double)s / levels[li];
            for (unsigned j = 0; j < hd; j++) {
                double a = fl(x[r * hd + j]), b = fl(y[r * hd + j]);
                double err = fabs(a - b);
                if (err > step / 2 + ulp16(s) / 2 + 1e-12 && bad++ < 3)
                    fprintf(stderr, "Q=%u row %zu: |%g - %g| > %g\n", levels[li], r, a, b, step / 2);
                se += (a - b) * (a - b);
                sp += a * a;
            }
        }
        CHECK_EQ_INT(bad, 0);
        CHECK_EQ_INT(bad_scale, 0);
        double rms = sqrt(se / sp);
        printf("  Q=%-2u: %6.3f bits/value, ratio %.2fx, relative RMS error %.4f\n", levels[li],
               8.0 * (double)len / (double)n, 2.0 * (double)n / (double)len, rms);
        CHECK(rms < prev_rms); /* more levels, less error */
        prev_rms = rms;
        if (levels[li] == 15) CHECK(2.0 * (double)n / (double)len > 3.0); /* >= 3x at Q = 15 */
        free(blob);
    }
    free(x);
    free(y);
}

/* ---- idempotency ---------------------------------------------------------------------- */

static void test_idempotent_realistic(void)
{
    const unsigned heads = 3, hd = 64;
    size_t n = 2 * (size_t)heads * 256 * hd;
    mz_f16 *x = malloc(n * 2);
    fill_kv(x, heads, hd);
    const char *names[] = {"cachegen", "cachegen-q7", "cachegen-anchor"};
    size_t len[3];
    for (int i = 0; i < 3; i++) len[i] = check_cycles(mz_codec_find(names[i]), x, n, names[i]);
    CHECK(len[1] < len[0]);
    /* the layer schedule, every layer of a 30-layer model */
    for (unsigned l = 0; l < 30; l += 7) {
        mz_cachegen_params p = mz_cachegen_params_layer(hd, l, 30);
        mz_codec c = mz_codec_cachegen(&p);
        CHECK(check_cycles(&c, x, n, "layer schedule") > 0);
    }
    /* other groupings, anchors and odd row lengths */
    const mz_cachegen_params ps[] = {
        {.row = 64, .levels_k = 31, .levels_v = 31, .k_chans_log2 = 7, .v_chans_log2 = 0, .anchor = 2},
        {.row = 48, .levels_k = 1, .levels_v = 2, .k_chans_log2 = 2, .v_chans_log2 = 1, .anchor = 128},
        {.row = 1000, .levels_k = 5, .levels_v = 9, .k_chans_log2 = 3, .v_chans_log2 = 3, .anchor = 0},
        {.row = 1, .levels_k = 15, .levels_v = 7, .k_chans_log2 = 0, .v_chans_log2 = 0, .anchor = 4},
    };
    for (size_t i = 0; i < MZ_ARRAY_LEN(ps); i++) {
        mz_codec c = mz_codec_cachegen(&ps[i]);
        CHECK(check_cycles(&c, x, i == 3 ? 3000 : n, "parameter set") > 0);
    }
    free(x);
}

/* Inputs built to break the fixed point: zero rows, constant rows,
 * subnormals, extremes, -0, plateaus where several codes round to one f16. */
static void test_idempotent_adversarial(void)
{
    const size_t n = 2 * 2 * 256 * 16; /* G 16 below */
    mz_f16 *x = malloc(n * 2);
    mz_cachegen_params p = {.row = 16, .levels_k = 15, .levels_v = 7, .k_chans_log2 = 0,
                            .v_chans_log2 = 2, .anchor = 0};
    for (int kind = 0; kind < 12; kind++) {
        for (size_t i = 0; i < n; i++) {
            mz_f16 v = 0;
            switch (kind) {
            case 0: v = 0; break;                                       /* all zero */
            case 1: v = (i & 1) ? 0x8000 : 0; break;                    /* ±0 */
            case 2: v = h(1.0f); break;                                  /* constant */
            case 3: v = (mz_f16)(t_rand_u64(&g_rng) & 0x83ffu); break;   /* subnormals */
            case 4: v = (i % 16 == 0) ? 0x7bff : (mz_f16)(t_rand_u64(&g_rng) & 0x80ffu); break;
            case 5: v = (i % 16 == 5) ? h(-65504.0f) : h(t_rand_normal(&g_rng)); break;
            case 6: v = (mz_f16)(0x3c00u + (t_rand_u64(&g_rng) & 0x7u)); break; /* plateaus */
            case 7: v = (i % 16 == 0) ? 0x0001 : 0; break;               /* smallest subnormal */
            case 8: { /* random finite bit patterns */
                do v = (mz_f16)t_rand_u64(&g_rng); while ((v & 0x7c00u) == 0x7c00u);
                break;
            }
            case 9: v = h(ldexpf(t_rand_normal(&g_rng), (int)(i % 36) - 24)); break; /* wide ranges */
            case 10: v = (i % 16 == 7) ? h(1000.0f) : h(1e-3f * t_rand_normal(&g_rng)); break;
            default: v = h((float)((int)(i % 31) - 15) * 0.1f); break;   /* exact grid values */
            }
            x[i] = v;
        }
        char what[64];
        for (unsigned q = 1; q <= 31; q += (q < 3 ? 1 : 7)) {
            p.levels_k = q;
            p.levels_v = q > 1 ? q - 1 : 1;
            p.anchor = (kind & 1) ? 4 : 0;
            mz_codec c = mz_codec_cachegen(&p);
            snprintf(what, sizeof what, "adversarial kind %d Q %u", kind, q);
            CHECK(check_cycles(&c, x, n, what) > 0);
            /* odd lengths: short last row and segment, fewer values than a row */
            size_t odd[] = {0, 1, 15, 17, 4095, 4097, n - 5};
            for (size_t k = 0; k < MZ_ARRAY_LEN(odd); k++) check_cycles(&c, x, odd[k], what);
        }
    }
    free(x);
}

/* ---- errors and malformed blobs ------------------------------------------------------------ */

static void test_errors(void)
{
    const mz_codec *c = mz_codec_find("cachegen");
    size_t n = 2 * 256 * 64;
    mz_f16 *x = malloc(n * 2), *y = malloc(n * 2);
    for (size_t i = 0; i < n; i++) x[i] = h(t_rand_normal(&g_rng));
    size_t cap = mz_codec_bound(c, n), len = 0;
    uint8_t *blob = malloc(cap);
    /* bound respected: a buffer one byte short is refused, nothing written past it */
    CHECK_EQ_INT(mz_codec_encode(c, x, n, blob, cap - 1, &len), MZ_E_RANGE);
    CHECK_EQ_INT(len, 0);
    /* inf / NaN are refused (the caller falls back to raw) */
    x[77] = 0x7c00;
    CHECK_EQ_INT(mz_codec_encode(c, x, n, blob, cap, &len), MZ_E_FORMAT);
    x[77] = 0xfe01;
    CHECK_EQ_INT(mz_codec_encode(c, x, n, blob, cap, &len), MZ_E_FORMAT);
    x[77] = h(0.5f);
    CHECK_EQ_INT(mz_codec_encode(c, x, n, blob, cap, &len), MZ_OK);
    CHECK(len < n); /* about 4 bits a value */
    /* wrong count, wrong codec */
    CHECK_EQ_INT(mz_codec_decode(c, blob, len, y, n - 1), MZ_E_FORMAT);
    CHECK_EQ_INT(mz_codec_decode(mz_codec_find("q8"), blob, len, y, n), MZ_E_FORMAT);
    size_t got = 0;
    CHECK_EQ_INT(c->peek(c, blob, len, &got), MZ_OK);
    CHECK_EQ_INT(got, n);
    /* any cachegen instance decodes any cachegen blob */
    mz_cachegen_params p = {.row = 7, .levels_k = 2, .levels_v = 3, .k_chans_log2 = 1,
                            .v_chans_log2 = 1, .anchor = 0};
    mz_codec other = mz_codec_cachegen(&p);
    CHECK_EQ_INT(mz_codec_decode(&other, blob, len, y, n), MZ_OK);
    /* every truncation fails cleanly; so do trailing bytes */
    uint8_t *cut = malloc(len + 1);
    int bad = 0;
    for (size_t l = 0; l < len; l += (l < 200 ? 1 : 37)) {
        memcpy(cut, blob, l);
        bad += mz_codec_decode(c, cut, l, y, n) != MZ_E_FORMAT;
        bad += c->peek(c, cut, l, &got) != MZ_E_FORMAT;
    }
    CHECK_EQ_INT(bad, 0);
    memcpy(cut, blob, len);
    cut[len] = 0;
    CHECK_EQ_INT(mz_codec_decode(c, cut, len + 1, y, n), MZ_E_FORMAT);
    /* header fields */
    struct {
        size_t off;
        uint8_t val;
    } pokes[] = {{0, 'X'}, {4, 2}, {6, 1}, {16, 0}, {17, 5}, {19, 0}, {20, 0},
                 {20, 32}, {21, 40}, {22, 11}, {24, 1}, {25, 1}, {26, 1}, {8, 0xff}, {15, 1}};
    for (size_t i = 0; i < MZ_ARRAY_LEN(pokes); i++) {
        memcpy(cut, blob, len);
        cut[pokes[i].off] = pokes[i].val;
        mz_status st = mz_codec_decode(c, cut, len, y, n);
        CHECK_MSG(st == MZ_E_FORMAT, "poke %zu (byte %zu = %u): %d", i, pokes[i].off,
                  pokes[i].val, (int)st);
    }
    /* flipped bits anywhere: decode fails cleanly or yields values; never a crash
     * (ASan) — and most stream damage is caught by the end-state check */
    int caught = 0, tried = 0;
    for (size_t i = 0; i < len; i += 13) {
        memcpy(cut, blob, len);
        cut[i] ^= (uint8_t)(1u << (i % 8));
        mz_status st = mz_codec_decode(c, cut, len, y, n);
        CHECK(st == MZ_OK || st == MZ_E_FORMAT);
        caught += st == MZ_E_FORMAT;
        tried++;
    }
    printf("  bit flips: %d of %d caught as MZ_E_FORMAT\n", caught, tried);
    CHECK(caught * 2 > tried);
    /* a bad scale (sign bit, inf) is refused */
    memcpy(cut, blob, len);
    size_t seg0 = 16 + 12 + 4 * 2; /* 2 segments: n = 2 * 256 * 64 */
    cut[seg0 + 1] |= 0x80;
    CHECK_EQ_INT(mz_codec_decode(c, cut, len, y, n), MZ_E_FORMAT);
    memcpy(cut, blob, len);
    cut[seg0 + 1] = 0x7c;
    CHECK_EQ_INT(mz_codec_decode(c, cut, len, y, n), MZ_E_FORMAT);
    /* a table out of range for the segment's Q */
    memcpy(cut, blob, len);
    cut[seg0 + 2 * 256 + 1] = 31; /* hi of the first table > 2Q = 30 */
    CHECK_EQ_INT(mz_codec_decode(c, cut, len, y, n), MZ_E_FORMAT);
    /* random garbage with a valid header */
    for (int k = 0; k < 200; k++) {
        size_t l = 16 + 12 + (size_t)(t_rand_u64(&g_rng) % 2000);
        memcpy(cut, blob, 28);
        for (size_t i = 28; i < l; i++) cut[i] = (uint8_t)t_rand_u64(&g_rng);
        mz_status st = mz_codec_decode(c, cut, l, y, n);
        CHECK(st == MZ_E_FORMAT);
    }
    CHECK_EQ_INT(mz_codec_decode(c, NULL, 0, y, n), MZ_E_FORMAT);
    free(cut);
    free(blob);
    free(x);
    free(y);
}

/* ---- throughput (printed, not asserted) ------------------------------------------------------ */

static void test_throughput(void)
{
    const unsigned heads = 3, hd = 64;
    size_t n = 2 * (size_t)heads * 256 * hd;
    mz_f16 *x = malloc(n * 2), *y = malloc(n * 2);
    fill_kv(x, heads, hd);
    const char *names[] = {"q8", "q4", "cachegen", "cachegen-q7"};
    for (size_t k = 0; k < MZ_ARRAY_LEN(names); k++) {
        const mz_codec *c = mz_codec_find(names[k]);
        size_t cap = mz_codec_bound(c, n), len = 0;
        uint8_t *blob = malloc(cap);
        int reps = 5;
        double t0 = t_cpu_ms();
        for (int r = 0; r < reps; r++) CHECK(mz_codec_encode(c, x, n, blob, cap, &len) == MZ_OK);
        double t1 = t_cpu_ms();
        for (int r = 0; r < reps; r++) CHECK(mz_codec_decode(c, blob, len, y, n) == MZ_OK);
        double t2 = t_cpu_ms();
        double mb = 2.0 * (double)n * reps / 1e6;
        printf("  %-12s ratio %.2fx  encode %.0f MB/s  decode %.0f MB/s (%s, synthetic chunk)\n",
               names[k], 2.0 * (double)n / (double)len, mb / ((t1 - t0) / 1e3),
               mb / ((t2 - t1) / 1e3), k ? mz_cachegen_isa() : mz_q8_isa());
        free(blob);
    }
    free(x);
    free(y);
}

/* The decoder runs two same-shaped segments in lockstep (SIMD builds); the
 * reference never pairs. They must agree on every shape — 1..5 heads (odd
 * counts leave one segment unpaired), row lengths 16/64/128, a short last
 * segment — and on corrupt blobs: a byte changed in either lane's stream, or
 * a pair whose second lane is cut short (lengths moved between the
 * directory entries), gives the same status from both, and the same bytes
 * when it decodes. */
static void test_paired_decode(void)
{
    static const unsigned hds[] = {16, 64, 128};
    for (unsigned hi = 0; hi < MZ_ARRAY_LEN(hds); hi++)
        for (unsigned heads = 1; heads <= 5; heads++)
            for (int shorten = 0; shorten < 2; shorten++) {
                unsigned hd = hds[hi];
                size_t n = (size_t)2 * heads * 256 * hd - (shorten ? 3 * (size_t)hd + 5 : 0);
                mz_f16 *x = malloc(2 * heads * 256 * (size_t)hd * sizeof *x);
                mz_f16 *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
                fill_kv(x, heads, hd);
                mz_cachegen_params p = mz_cachegen_params_default(hd);
                if (heads == 2) p.levels_k = 31, p.levels_v = 7;
                mz_codec c = mz_codec_cachegen(&p);
                size_t cap = mz_codec_bound(&c, n), len = 0;
                uint8_t *blob = malloc(cap);
                CHECK(x && a && b && blob);
                if (!x || !a || !b || !blob) goto next;
                CHECK(mz_codec_encode(&c, x, n, blob, cap, &len) == MZ_OK);
                CHECK(mz_codec_decode(&c, blob, len, a, n) == MZ_OK);
                CHECK(mz_cachegen_decode_ref(blob, len, b, n) == MZ_OK);
                CHECK_MSG(!memcmp(a, b, n * sizeof *a), "paired decode differs: %u heads of %u%s",
                          heads, hd, shorten ? ", short" : "");
                size_t n_seg = (n / hd + (n % hd != 0) + 255) / 256;
                const size_t dir = 16 + 12;
                for (size_t k = 0; k < n_seg; k++) {
                    /* the segment's last stream byte, then one in its middle */
                    size_t end = dir + 4 * n_seg;
                    for (size_t j = 0; j <= k; j++)
                        end += (size_t)blob[dir + 4 * j] | (size_t)blob[dir + 4 * j + 1] << 8 |
                               (size_t)blob[dir + 4 * j + 2] << 16 |
                               (size_t)blob[dir + 4 * j + 3] << 24;
                    size_t seg_len = (size_t)blob[dir + 4 * k] | (size_t)blob[dir + 4 * k + 1] << 8 |
                                     (size_t)blob[dir + 4 * k + 2] << 16;
                    size_t pos[2] = {end - 1, end - seg_len / 4};
                    for (int q = 0; q < 2; q++) {
                        blob[pos[q]] ^= 0x5a;
                        mz_status sa = mz_codec_decode(&c, blob, len, a, n);
                        mz_status sb = mz_cachegen_decode_ref(blob, len, b, n);
                        CHECK_MSG(sa == sb && (sa != MZ_OK || !memcmp(a, b, n * sizeof *a)),
                                  "corrupt segment %zu of %zu (%u heads of %u): paired %d, ref %d",
                                  k, n_seg, heads, hd, (int)sa, (int)sb);
                        blob[pos[q]] ^= 0x5a;
                    }
                    if (k + 1 < n_seg) {
                        /* move 2 bytes of segment k+1 into segment k: both
                         * streams end where they should not */
                        uint32_t lk, lk1;
                        memcpy(&lk, blob + dir + 4 * k, 4);
                        memcpy(&lk1, blob + dir + 4 * (k + 1), 4);
                        uint32_t mk = lk + 2, mk1 = lk1 - 2;
                        memcpy(blob + dir + 4 * k, &mk, 4);
                        memcpy(blob + dir + 4 * (k + 1), &mk1, 4);
                        mz_status sa = mz_codec_decode(&c, blob, len, a, n);
                        mz_status sb = mz_cachegen_decode_ref(blob, len, b, n);
                        CHECK_MSG(sa == MZ_E_FORMAT && sb == MZ_E_FORMAT,
                                  "shifted segments %zu/%zu: paired %d, ref %d", k, k + 1,
                                  (int)sa, (int)sb);
                        memcpy(blob + dir + 4 * k, &lk, 4);
                        memcpy(blob + dir + 4 * (k + 1), &lk1, 4);
                    }
                }
                CHECK(mz_codec_decode(&c, blob, len, a, n) == MZ_OK); /* restored intact */
            next:
                free(x);
                free(a);
                free(b);
                free(blob);
            }
}

int main(void)
{
    test_params();
    test_paired_decode();
    test_error_bounds();
    test_idempotent_realistic();
    test_idempotent_adversarial();
    mz_cachegen_force_scalar(true); /* the scalar paths on their own */
    test_idempotent_realistic();
    mz_cachegen_force_scalar(false);
    test_errors();
    test_throughput();
    return t_done("test_codec_cachegen");
}
