/*
 * test_codec_split.c — the q8-q4r codec (codec_split.c): a KV chunk's K half
 * through q8, its V half through q4r, in one blob.
 *   - the codec as defined: the blob is the 16-byte header written out here
 *     ("MZKV", version 1, d, n) followed by q8's blob of the first n/2
 *     values and q4r's blob (rows of d) of the rest, byte for byte; decode
 *     equals q8's decode of the first part and q4r's of the second; for n
 *     from 0 to a SmolLM2 chunk, d = 2 .. 1024;
 *   - errors: inf / NaN in either half, a short destination, every
 *     truncation and an extension, a wrong count, bad d in the header, a
 *     broken inner q8 or q4r header, a q8 or q4r blob given as q8-q4r;
 *   - the registry (its per-layer d and ratio hint: test_codec_q4r).
 */
#define _POSIX_C_SOURCE 200809L
#include "codec/codec.h"
#include "codec/codec_f16.h"
#include "testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static unsigned long long g_rng = 0x5b117c0dec5ULL;

/* KV-like values: N(0, 1) with every 16th channel of a 64-wide row an outlier. */
static void kv_values(mz_f16 *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float v = t_rand_normal(&g_rng) * 0.5f;
        if (i % 16 == 3) v = v * 6.0f + 6.0f;
        x[i] = mz_float_to_half(v);
    }
}

static void put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* The blob by definition, from the q8 and q4r codecs on their own. */
static size_t split_by_definition(unsigned d, const mz_f16 *x, size_t n, uint8_t *blob, size_t cap)
{
    const mz_codec q8 = mz_codec_q8(64), q4r = mz_codec_q4r(d);
    size_t lk, lv;
    memcpy(blob, "MZKV", 4);
    put_le(blob + 4, 1, 2);
    put_le(blob + 6, d, 2);
    put_le(blob + 8, n, 8);
    CHECK_EQ_INT(mz_codec_encode(&q8, x, n / 2, blob + 16, cap - 16, &lk), MZ_OK);
    CHECK_EQ_INT(mz_codec_encode(&q4r, x + n / 2, n - n / 2, blob + 16 + lk, cap - 16 - lk, &lv), MZ_OK);
    return 16 + lk + lv;
}

static void test_definition(void)
{
    static const size_t ns[] = {0, 1, 2, 3, 63, 64, 65, 128, 129, 1000, 4096, 4097, 3 * 2 * 256 * 64};
    static const unsigned ds[] = {2, 8, 64, 128, 1024};
    const size_t n_max = 3 * 2 * 256 * 64;
    mz_f16 *x = malloc(n_max * sizeof *x), *out = malloc(n_max * sizeof *out), *want = malloc(n_max * sizeof *want);
    const size_t cap = 2 * n_max + 4096;
    uint8_t *blob = malloc(cap), *def = malloc(cap);
    CHECK(x && out && want && blob && def);
    kv_values(x, n_max);
    int cases = 0;
    for (size_t di = 0; di < MZ_ARRAY_LEN(ds); di++)
        for (size_t ni = 0; ni < MZ_ARRAY_LEN(ns); ni++) {
            const unsigned d = ds[di];
            const size_t n = ns[ni];
            const mz_codec c = mz_codec_q8_q4r(d), q8 = mz_codec_q8(64), q4r = mz_codec_q4r(d);
            size_t len = 0;
            CHECK_EQ_INT(mz_codec_encode(&c, x, n, blob, cap, &len), MZ_OK);
            const size_t dlen = split_by_definition(d, x, n, def, cap);
            CHECK_MSG(len == dlen && memcmp(blob, def, len) == 0, "d %u n %zu: blob differs (%zu vs %zu bytes)",
                      d, n, len, dlen);
            CHECK_EQ_INT(len, mz_codec_bound(&c, n));
            size_t nv = 12345;
            CHECK_EQ_INT(c.peek(&c, blob, len, &nv), MZ_OK);
            CHECK_EQ_INT(nv, n);
            /* decode = q8's decode of part 1, q4r's of part 2 */
            const size_t lk = mz_codec_bound(&q8, n / 2);
            CHECK_EQ_INT(mz_codec_decode(&q8, def + 16, lk, want, n / 2), MZ_OK);
            CHECK_EQ_INT(mz_codec_decode(&q4r, def + 16 + lk, dlen - 16 - lk, want + n / 2, n - n / 2), MZ_OK);
            CHECK_EQ_INT(mz_codec_decode(&c, blob, len, out, n), MZ_OK);
            CHECK_MSG(memcmp(out, want, n * sizeof *out) == 0, "d %u n %zu: decode differs", d, n);
            cases++;
        }
    CHECK_EQ_INT(cases, (long long)(MZ_ARRAY_LEN(ds) * MZ_ARRAY_LEN(ns)));
    /* the K half keeps q8's error, the V half q4r's: K more exact than V */
    const mz_codec c = mz_codec_q8_q4r(64);
    size_t len;
    CHECK_EQ_INT(mz_codec_encode(&c, x, n_max, blob, cap, &len), MZ_OK);
    CHECK_EQ_INT(mz_codec_decode(&c, blob, len, out, n_max), MZ_OK);
    double ek = 0, ev = 0;
    for (size_t i = 0; i < n_max; i++) {
        const double e = (double)mz_half_to_float(out[i]) - (double)mz_half_to_float(x[i]);
        if (i < n_max / 2) ek += e * e;
        else ev += e * e;
    }
    CHECK_MSG(ek * 50 < ev, "K half error %g not far below the V half's %g", ek, ev);
    free(x);
    free(out);
    free(want);
    free(blob);
    free(def);
}

static void test_errors(void)
{
    const mz_codec *c = mz_codec_find("q8-q4r");
    enum { N = 512 };
    mz_f16 x[N], y[N], out[N];
    uint8_t blob[2048], other[2048];
    size_t len, l2, nv;
    CHECK(c != NULL);
    kv_values(x, N);
    CHECK_EQ_INT(mz_codec_encode(c, x, N, blob, sizeof blob, &len), MZ_OK);
    CHECK_EQ_INT(mz_codec_encode(c, x, N, other, len - 1, &l2), MZ_E_RANGE);
    /* inf in the K half, NaN in the V half */
    memcpy(y, x, sizeof y);
    y[10] = 0x7c00u;
    CHECK_EQ_INT(mz_codec_encode(c, y, N, other, sizeof other, &l2), MZ_E_FORMAT);
    memcpy(y, x, sizeof y);
    y[N / 2 + 10] = 0x7e01u;
    CHECK_EQ_INT(mz_codec_encode(c, y, N, other, sizeof other, &l2), MZ_E_FORMAT);
    /* every truncation, an extension, a wrong count */
    int refused = 0;
    for (size_t l = 0; l < len; l++) {
        refused += mz_codec_decode(c, blob, l, out, N) == MZ_E_FORMAT;
        refused += c->peek(c, blob, l, &nv) == MZ_E_FORMAT;
    }
    CHECK_EQ_INT(refused, 2 * (long long)len);
    CHECK_EQ_INT(mz_codec_decode(c, blob, len + 1, out, N), MZ_E_FORMAT);
    CHECK_EQ_INT(mz_codec_decode(c, blob, len, out, N - 1), MZ_E_FORMAT);
    /* bad d in the header */
    static const unsigned bad_d[] = {0, 1, 3, 96, 2048};
    for (size_t i = 0; i < MZ_ARRAY_LEN(bad_d); i++) {
        memcpy(other, blob, len);
        put_le(other + 6, bad_d[i], 2);
        CHECK_EQ_INT(mz_codec_decode(c, other, len, out, N), MZ_E_FORMAT);
        CHECK_EQ_INT(c->peek(c, other, len, &nv), MZ_E_FORMAT);
    }
    /* a broken inner header: the q8 part's magic, the q4r part's count */
    const mz_codec q8 = mz_codec_q8(64);
    const size_t lk = mz_codec_bound(&q8, N / 2);
    memcpy(other, blob, len);
    other[16] ^= 0xff;
    CHECK_EQ_INT(mz_codec_decode(c, other, len, out, N), MZ_E_FORMAT);
    CHECK_EQ_INT(c->peek(c, other, len, &nv), MZ_E_FORMAT);
    memcpy(other, blob, len);
    put_le(other + 16 + lk + 8, N / 2 + 1, 8);
    CHECK_EQ_INT(mz_codec_decode(c, other, len, out, N), MZ_E_FORMAT);
    CHECK_EQ_INT(c->peek(c, other, len, &nv), MZ_E_FORMAT);
    /* q8 and q4r blobs are not q8-q4r's, nor the other way round */
    const mz_codec *q4r = mz_codec_find("q4r");
    CHECK_EQ_INT(mz_codec_encode(&q8, x, N, other, sizeof other, &l2), MZ_OK);
    CHECK_EQ_INT(mz_codec_decode(c, other, l2, out, N), MZ_E_FORMAT);
    CHECK_EQ_INT(mz_codec_encode(q4r, x, N, other, sizeof other, &l2), MZ_OK);
    CHECK_EQ_INT(mz_codec_decode(c, other, l2, out, N), MZ_E_FORMAT);
    CHECK_EQ_INT(mz_codec_decode(&q8, blob, len, out, N), MZ_E_FORMAT);
    CHECK_EQ_INT(mz_codec_decode(q4r, blob, len, out, N), MZ_E_FORMAT);
}

/* The registry names it (its per-layer rotation length and ratio hint are
 * checked with q4r's in test_codec_q4r). */
static void test_registry(void)
{
    const mz_codec *c = mz_codec_find("q8-q4r");
    CHECK(c && c->param == 64 && strcmp(c->name, "q8-q4r") == 0);
    CHECK(strstr((mz_codec_find("nope"), mz_last_error()), "q8-q4r") != NULL);
}

int main(void)
{
    test_registry();
    test_definition();
    test_errors();
    return t_done("test_codec_split");
}
