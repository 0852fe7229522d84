/*
 * test_codec_range.c — decode_range (codec.h): values [v0, v0 + k) of a blob
 * on their own, which attention uses to read a lent KV chunk a tile at a
 * time (src/engine/forward.c).
 *   - every codec that offers it (raw, q8 / q4 at G = 32, 64, 128, q4r and
 *     q8-q4r at d = 64, 128, and their per-layer instances for head_dim
 *     64 / 128), every kernel set the CPU has: the range equals that slice
 *     of the whole decode bit for bit, for every whole-unit range of a blob
 *     of a few units, for the tile shapes attention asks for in a KV chunk
 *     (one head's 32 rows of K or V), ranges that end the blob on a short
 *     last group, and q8-q4r ranges across its K / V boundary;
 *   - what it reads: a group broken outside the range does not matter, one
 *     inside it is MZ_E_FORMAT; a misaligned or out-of-blob range is
 *     MZ_E_RANGE; a wrong count, a truncated blob and another codec's blob
 *     are refused as decode refuses them;
 *   - which codecs offer it: the cachegen family does not (its payload is
 *     entropy-coded, no group starts at a computable byte).
 */
#define _POSIX_C_SOURCE 200809L
#include "codec/codec.h"
#include "codec/codec_f16.h"
#include "kernels/kernels.h"
#include "testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static unsigned long long g_rng = 0x7a11ce5eedULL;
static const char *const g_isas[] = {"scalar", "avx2", "avx512", "neon"};

/* KV-like values: N(0, 1) with one channel in 16 an outlier. */
static void kv_values(mz_f16 *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float v = t_rand_normal(&g_rng) * 0.5f;
        if (i % 16 == 3) v = v * 6.0f + 6.0f;
        x[i] = mz_float_to_half(v);
    }
}

/* Every range [v0, v0 + k) of c's blob of x (n values) whose ends are whole
 * units (or k ends the blob) against the whole decode, up to max_ranges of
 * them spread over the blob; returns how many were compared. */
static int check_ranges(const mz_codec *c, const mz_f16 *x, size_t n, size_t unit, int max_ranges)
{
    const size_t cap = mz_codec_bound(c, n);
    uint8_t *blob = malloc(cap);
    mz_f16 *whole = malloc((n + 1) * sizeof *whole), *part = malloc((n + 1) * sizeof *part);
    CHECK(blob && whole && part);
    size_t len = 0;
    CHECK_EQ_INT(mz_codec_encode(c, x, n, blob, cap, &len), MZ_OK);
    CHECK_EQ_INT(mz_codec_decode(c, blob, len, whole, n), MZ_OK);
    const size_t units = (n + unit - 1) / unit;
    const size_t stride = units * units / (size_t)max_ranges + 1;
    int compared = 0;
    size_t pick = 0;
    for (size_t a = 0; a <= units; a++)
        for (size_t b = a; b <= units; b++, pick++) {
            if (pick % stride && !(a == 0 && b == units)) continue;
            const size_t v0 = MZ_MIN(a * unit, n), v1 = MZ_MIN(b * unit, n);
            memset(part, 0xa5, (n + 1) * sizeof *part);
            const mz_status s = c->decode_range(c, blob, len, n, v0, part, v1 - v0);
            CHECK_MSG(s == MZ_OK, "%s/%u n %zu [%zu, %zu): %s", c->name, c->param, n, v0, v1, mz_last_error());
            CHECK_MSG(memcmp(part, whole + v0, (v1 - v0) * sizeof *part) == 0,
                      "%s/%u n %zu [%zu, %zu): not the whole decode's values", c->name, c->param, n, v0, v1);
            CHECK_MSG(part[v1 - v0] == 0xa5a5, "%s/%u n %zu [%zu, %zu): wrote past the range", c->name, c->param,
                      n, v0, v1);
            compared++;
        }
    free(blob);
    free(whole);
    free(part);
    return compared;
}

/* The codecs with decode_range, as the engine makes them. */
static int codecs_with_ranges(mz_codec *out)
{
    int k = 0;
    out[k++] = mz_codec_raw_vt;
    out[k++] = mz_codec_q8_g32_vt;
    out[k++] = mz_codec_q8_g64_vt;
    out[k++] = mz_codec_q8_g128_vt;
    out[k++] = mz_codec_q4_g32_vt;
    out[k++] = mz_codec_q4_g64_vt;
    out[k++] = mz_codec_q4_g128_vt;
    out[k++] = mz_codec_q4r(64);
    out[k++] = mz_codec_q4r(128);
    out[k++] = mz_codec_q8_q4r(64);
    out[k++] = mz_codec_q8_q4r(128);
    out[k++] = mz_codec_for_layer(mz_codec_find("q8-q4r"), 128, 3, 28);
    out[k++] = mz_codec_for_layer(mz_codec_find("q4r"), 64, 0, 16);
    return k;
}

static void test_equals_whole_decode(void)
{
    /* a KV chunk of 2 KV heads x 128 dims, and blob sizes that end on a
     * short group (n not a multiple of the unit; q8-q4r's halves too) */
    const size_t chunk = mz_kv_chunk_bytes(2, 128) / sizeof(mz_f16);
    static const size_t odd_ns[] = {1, 63, 64, 65, 130, 1000, 4097};
    mz_f16 *x = malloc(chunk * sizeof *x);
    CHECK(x);
    kv_values(x, chunk);
    mz_codec cs[16];
    const int nc = codecs_with_ranges(cs);
    int isas = 0, total = 0;
    for (size_t i = 0; i < MZ_ARRAY_LEN(g_isas); i++) {
        if (!mz_q8_force_isa(g_isas[i])) continue;
        isas++;
        for (int ci = 0; ci < nc; ci++) {
            const mz_codec *c = &cs[ci];
            CHECK_MSG(c->decode_range && c->range_unit, "%s offers no ranges", c->name);
            if (!c->decode_range) continue;
            total += check_ranges(c, x, chunk, c->range_unit, 400);
            for (size_t ni = 0; ni < MZ_ARRAY_LEN(odd_ns); ni++) {
                const size_t n = odd_ns[ni];
                /* q8-q4r: its K half ends at n / 2, a unit boundary only when
                 * n / 2 is; ranges are then whole units of each half */
                const bool split = c->decode == mz_codec_q8_q4r_vt.decode;
                if (split && (n / 2) % c->range_unit) continue;
                total += check_ranges(c, x, n, c->range_unit, 200);
            }
            /* attention's tiles: one KV head's 32 rows of K, then of V */
            const mz_codec *cc = c;
            size_t len = 0;
            const size_t cap = mz_codec_bound(cc, chunk);
            uint8_t *blob = malloc(cap);
            mz_f16 *whole = malloc(chunk * sizeof *whole), tile[32 * 128];
            CHECK(blob && whole);
            CHECK_EQ_INT(mz_codec_encode(cc, x, chunk, blob, cap, &len), MZ_OK);
            CHECK_EQ_INT(mz_codec_decode(cc, blob, len, whole, chunk), MZ_OK);
            for (int kv = 0; kv < 2; kv++)
                for (int h = 0; h < 2; h++)
                    for (size_t row = 0; row < MZ_KV_CHUNK_TOKENS; row += 32) {
                        const size_t v0 = (((size_t)kv * 2 + (size_t)h) * MZ_KV_CHUNK_TOKENS + row) * 128;
                        CHECK_EQ_INT(cc->decode_range(cc, blob, len, chunk, v0, tile, 32 * 128), MZ_OK);
                        CHECK_MSG(memcmp(tile, whole + v0, sizeof tile) == 0, "%s: tile kv %d head %d row %zu",
                                  cc->name, kv, h, row);
                        total++;
                    }
            free(blob);
            free(whole);
        }
    }
    mz_q8_force_isa(NULL);
    CHECK(isas >= 1);
    CHECK(total > 1000);
    free(x);
}

static void test_errors(void)
{
    const size_t n = 4096;
    mz_f16 x[4096], out[4096];
    kv_values(x, n);
    const mz_codec q8 = mz_codec_q8(64), q4r = mz_codec_q4r(64), split = mz_codec_q8_q4r(64);
    const mz_codec *cs[] = {&q8, &q4r, &split};
    for (size_t ci = 0; ci < MZ_ARRAY_LEN(cs); ci++) {
        const mz_codec *c = cs[ci];
        uint8_t blob[16 + 2 * 4096 + 1024];
        size_t len = 0;
        CHECK_EQ_INT(mz_codec_encode(c, x, n, blob, sizeof blob, &len), MZ_OK);
        /* misaligned, past the end, a wrong count, truncated */
        CHECK_EQ_INT(c->decode_range(c, blob, len, n, 1, out, 64), MZ_E_RANGE);
        CHECK_EQ_INT(c->decode_range(c, blob, len, n, 64, out, 63), MZ_E_RANGE);
        CHECK_EQ_INT(c->decode_range(c, blob, len, n, n - 64, out, 128), MZ_E_RANGE);
        CHECK_EQ_INT(c->decode_range(c, blob, len, n, n + 64, out, 0), MZ_E_RANGE);
        CHECK_EQ_INT(c->decode_range(c, blob, len, n - 64, 0, out, 64), MZ_E_FORMAT);
        CHECK_EQ_INT(c->decode_range(c, blob, len - 1, n, 0, out, 64), MZ_E_FORMAT);
        CHECK_EQ_INT(c->decode_range(c, blob, len, n, n, out, 0), MZ_OK);
        /* a group broken in the first 64 values: a range past it decodes, one over it does not */
        uint8_t bad[sizeof blob];
        memcpy(bad, blob, len);
        const size_t g0 = c == &split ? 32 : 16; /* the inner q8 blob's first group in q8-q4r */
        bad[g0] = 0x00;
        bad[g0 + 1] = 0x7c; /* min = +inf */
        CHECK_EQ_INT(c->decode_range(c, bad, len, n, 64, out, 64), MZ_OK);
        CHECK_EQ_INT(c->decode_range(c, bad, len, n, 0, out, 128), MZ_E_FORMAT);
        CHECK_EQ_INT(mz_codec_decode(c, bad, len, out, n), MZ_E_FORMAT);
    }
    /* another codec's blob */
    uint8_t blob[16 + 2 * 4096 + 1024];
    size_t len = 0;
    CHECK_EQ_INT(mz_codec_encode(&q8, x, n, blob, sizeof blob, &len), MZ_OK);
    CHECK_EQ_INT(q4r.decode_range(&q4r, blob, len, n, 0, out, 64), MZ_E_FORMAT);
    CHECK_EQ_INT(split.decode_range(&split, blob, len, n, 0, out, 64), MZ_E_FORMAT);
    const mz_codec raw = mz_codec_raw_vt;
    CHECK_EQ_INT(raw.decode_range(&raw, blob, len, n, 0, out, 64), MZ_E_FORMAT);
}

static void test_which_codecs(void)
{
    static const char *const none[] = {"cachegen", "cachegen-anchor", "cachegen-layer"};
    for (size_t i = 0; i < MZ_ARRAY_LEN(none); i++) {
        const mz_codec *c = mz_codec_find(none[i]);
        CHECK_MSG(c != NULL, "%s", none[i]);
        if (!c) continue;
        const mz_codec l = mz_codec_for_layer(c, 64, 0, 16);
        CHECK_MSG(!mz_codec_reads_ranges(c, 64) && !mz_codec_reads_ranges(&l, 64), "%s reads ranges", none[i]);
    }
    /* the alignment: a head row must be whole units */
    const mz_codec s128 = mz_codec_for_layer(mz_codec_find("q8-q4r"), 128, 0, 28);
    CHECK(mz_codec_reads_ranges(&s128, 128));
    CHECK(!mz_codec_reads_ranges(&s128, 64));
    const mz_codec s64 = mz_codec_for_layer(mz_codec_find("q8-q4r"), 64, 0, 16);
    CHECK(mz_codec_reads_ranges(&s64, 64));
    CHECK(!mz_codec_reads_ranges(mz_codec_find("q8"), 96));
    CHECK(mz_codec_reads_ranges(mz_codec_find("q8-g32"), 96));
    CHECK(mz_codec_reads_ranges(mz_codec_find("raw"), 1));
}

int main(void)
{
    test_equals_whole_decode();
    test_errors();
    test_which_codecs();
    return t_done("test_codec_range");
}
