/*
 * codec_split.c — "q8-q4r": a KV chunk's K half through q8, its V half
 * through q4r, in one blob.
 *
 * Why: K carries 90-94 % of a 4-bit codec's damage (docs/CODECS.md, "Where
 * the 4-bit damage comes from"); with K at 8 bits and V at q4r the KL from
 * the uncompressed KV stays within 1.4x of q8's in the cut-point method
 * (eviction's setting) at 6.5 bits a value, 24 % fewer bytes than q8.
 *
 * Blob: header magic "MZKV", param = d (q4r's row length: a power of two,
 * 2 .. MZ_ROT_DIM_MAX), n_values = n; then a whole q8 blob (G = 64, its own
 * header) of values 0 .. n/2 - 1, then a whole q4r blob (rows of d) of
 * values n/2 .. n - 1. A KV chunk holds K then V (kernels.h), each half
 * n/2 values. Both inner lengths are pure functions of (d, n), so the blob's
 * length is too, and decode checks it exactly before reading; each inner
 * blob is then checked by its own codec (magic, count, groups).
 *
 * Not idempotent bit for bit: the V half is q4r (docs/CODECS.md has its
 * drift over cycles, at most an f16 ulp); the K half is q8 and is.
 */
#include "codec.h"

#define SPLIT_MAGIC 0x564b5a4du /* "MZKV" */

static bool split_dim_ok(unsigned d) { return d >= 2 && d <= MZ_ROT_DIM_MAX && !(d & (d - 1)); }

/* The inner codecs of param d (valid d only). */
static mz_codec k_codec(void) { return mz_codec_q8(MZ_Q8_GROUP_DEFAULT); }
static mz_codec v_codec(unsigned d) { return mz_codec_q4r(d); }

/* Bytes of the two inner blobs of n values; false on a bad d or overflow. */
static bool split_parts(unsigned d, uint64_t n, size_t *k_len, size_t *v_len)
{
    if (!split_dim_ok(d) || (uint64_t)(size_t)n != n) return false;
    const mz_codec kc = k_codec(), vc = v_codec(d);
    *k_len = mz_codec_bound(&kc, (size_t)n / 2);
    *v_len = mz_codec_bound(&vc, (size_t)n - (size_t)n / 2);
    return *k_len && *v_len && *k_len <= SIZE_MAX - *v_len;
}

static bool split_payload(unsigned d, uint64_t n, size_t *payload)
{
    size_t k_len, v_len;
    if (!split_parts(d, n, &k_len, &v_len)) return false;
    *payload = k_len + v_len;
    return true;
}

static size_t split_bound(const mz_codec *c, size_t n)
{
    size_t p;
    if (!split_payload(c->param, n, &p) || p > SIZE_MAX - MZ_CODEC_HEADER_BYTES) return 0;
    return MZ_CODEC_HEADER_BYTES + p;
}

static mz_status split_encode(const mz_codec *c, const mz_f16 *src, size_t n, uint8_t *dst,
                              size_t dst_cap, size_t *n_written)
{
    size_t k_len, v_len, wk, wv;
    *n_written = 0;
    MZ_ASSERT(split_dim_ok(c->param)); /* the vtable's or the constructor's d */
    const size_t need = split_bound(c, n);
    if (need == 0) return mz_fail(MZ_E_RANGE, "q8-q4r encode: %zu values is too many", n);
    if (dst_cap < need) return mz_fail(MZ_E_RANGE, "q8-q4r encode: need %zu bytes, have %zu", need, dst_cap);
    MZ_ASSERT(split_parts(c->param, n, &k_len, &v_len)); /* split_bound checked them */
    const mz_codec kc = k_codec(), vc = v_codec(c->param);
    uint8_t *k_blob = dst + MZ_CODEC_HEADER_BYTES, *v_blob = k_blob + k_len;
    mz_status s = mz_codec_encode(&kc, src, n / 2, k_blob, k_len, &wk);
    if (s) return s; /* inf/NaN: q8's message names the value */
    s = mz_codec_encode(&vc, src + n / 2, n - n / 2, v_blob, v_len, &wv);
    if (s) return s;
    MZ_ASSERT(wk == k_len && wv == v_len); /* q8 and q4r blobs are exactly their bound */
    mz_codec_header_write(dst, SPLIT_MAGIC, c->param, n);
    *n_written = need;
    return MZ_OK;
}

/* A blob's outer header, checked (exact length included): its d, n and the
 * lengths of its two inner blobs, which follow the header back to back. */
static mz_status split_open(const uint8_t *src, size_t len, unsigned *d, uint64_t *n, size_t *k_len,
                            size_t *v_len)
{
    mz_status s = mz_codec_header_parse("q8-q4r", src, len, SPLIT_MAGIC, split_payload, d, n);
    if (s) return s;
    MZ_ASSERT(split_parts(*d, *n, k_len, v_len)); /* the header parse checked them */
    return MZ_OK;
}

/* split_open for a caller that expects n values. */
static mz_status split_open_n(const uint8_t *src, size_t len, size_t n, unsigned *d, size_t *k_len, size_t *v_len)
{
    uint64_t n_blob;
    mz_status s = split_open(src, len, d, &n_blob, k_len, v_len);
    if (s) return s;
    if (n_blob != n)
        return mz_fail(MZ_E_FORMAT, "q8-q4r blob: holds %llu values, caller expects %zu",
                       (unsigned long long)n_blob, n);
    return MZ_OK;
}

static mz_status split_decode(const mz_codec *c, const uint8_t *src, size_t len, mz_f16 *dst,
                              size_t n)
{
    (void)c; /* any instance decodes any q8-q4r blob: d is in the header */
    unsigned d;
    size_t k_len, v_len;
    mz_status s = split_open_n(src, len, n, &d, &k_len, &v_len);
    if (s) return s;
    const mz_codec kc = k_codec(), vc = v_codec(d);
    const uint8_t *k_blob = src + MZ_CODEC_HEADER_BYTES;
    if ((s = mz_codec_decode(&kc, k_blob, k_len, dst, n / 2))) return s;
    return mz_codec_decode(&vc, k_blob + k_len, v_len, dst + n / 2, n - n / 2);
}

/* The range's K part through q8's decode_range, its V part through q4r's
 * (a range may hold both). */
static mz_status split_decode_range(const mz_codec *c, const uint8_t *src, size_t len, size_t n, size_t v0,
                                    mz_f16 *dst, size_t k)
{
    (void)c;
    unsigned d;
    size_t k_len, v_len;
    mz_status s = split_open_n(src, len, n, &d, &k_len, &v_len);
    if (s) return s;
    if (v0 > n || k > n - v0)
        return mz_fail(MZ_E_RANGE, "q8-q4r blob: values %zu..%zu of %zu", v0, v0 + k, n);
    const mz_codec kc = k_codec(), vc = v_codec(d);
    const uint8_t *k_blob = src + MZ_CODEC_HEADER_BYTES;
    const size_t half = n / 2;
    if (v0 < half) {
        const size_t kk = MZ_MIN(k, half - v0);
        if ((s = kc.decode_range(&kc, k_blob, k_len, half, v0, dst, kk))) return s;
        v0 += kk;
        dst += kk;
        k -= kk;
        if (k == 0) return MZ_OK;
    }
    return vc.decode_range(&vc, k_blob + k_len, v_len, n - half, v0 - half, dst, k);
}

/* The inner blobs' own peeks check their headers and groups; each must hold
 * its half of n (implied by the exact lengths, checked again by name). */
static mz_status split_peek(const mz_codec *c, const uint8_t *src, size_t len, size_t *n_values)
{
    (void)c;
    unsigned d;
    uint64_t n;
    size_t k_len, v_len, inner;
    mz_status s = split_open(src, len, &d, &n, &k_len, &v_len);
    if (s) return s;
    const mz_codec kc = k_codec(), vc = v_codec(d);
    const uint8_t *k_blob = src + MZ_CODEC_HEADER_BYTES;
    if ((s = kc.peek(&kc, k_blob, k_len, &inner))) return s;
    if (inner != (size_t)n / 2)
        return mz_fail(MZ_E_FORMAT, "q8-q4r blob: K part holds %zu values, expected %zu", inner,
                       (size_t)n / 2);
    if ((s = vc.peek(&vc, k_blob + k_len, v_len, &inner))) return s;
    if (inner != (size_t)n - (size_t)n / 2)
        return mz_fail(MZ_E_FORMAT, "q8-q4r blob: V part holds %zu values, expected %zu", inner,
                       (size_t)n - (size_t)n / 2);
    *n_values = (size_t)n;
    return MZ_OK;
}

#define SPLIT_VT(d) \
    {.name = "q8-q4r", .param = (d), .bound = split_bound, .encode = split_encode, \
     .decode = split_decode, .peek = split_peek, .decode_range = split_decode_range, \
     .range_unit = (d) > MZ_Q8_GROUP_DEFAULT ? (d) : MZ_Q8_GROUP_DEFAULT}

const mz_codec mz_codec_q8_q4r_vt = SPLIT_VT(64);

mz_codec mz_codec_q8_q4r(unsigned d)
{
    MZ_ASSERT(split_dim_ok(d));
    return (mz_codec)SPLIT_VT(d);
}
