/*
 * codec_raw.c — the identity codec: header + the F16 values, little-endian.
 * Round trip is bit-identical (NaN payloads and -0 included).
 */
#include "codec.h"

#include <string.h>

#define RAW_MAGIC 0x57525a4du /* "MZRW" */

static bool raw_payload(unsigned param, uint64_t n, size_t *payload)
{
    if (param != 0 || n > SIZE_MAX / 2) return false;
    *payload = (size_t)n * 2;
    return true;
}

static size_t raw_bound(const mz_codec *c, size_t n)
{
    size_t p;
    if (!raw_payload(0, n, &p) || p > SIZE_MAX - MZ_CODEC_HEADER_BYTES) return 0;
    return MZ_CODEC_HEADER_BYTES + p;
}

static void copy_le16(uint8_t *dst, const mz_f16 *src, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(dst, src, n * 2);
#else
    for (size_t i = 0; i < n; i++) {
        dst[2 * i] = (uint8_t)src[i];
        dst[2 * i + 1] = (uint8_t)(src[i] >> 8);
    }
#endif
}

static void copy_from_le16(mz_f16 *dst, const uint8_t *src, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(dst, src, n * 2);
#else
    for (size_t i = 0; i < n; i++) dst[i] = (mz_f16)(src[2 * i] | src[2 * i + 1] << 8);
#endif
}

static mz_status raw_encode(const mz_codec *c, const mz_f16 *src, size_t n, uint8_t *dst,
                            size_t dst_cap, size_t *n_written)
{
    size_t need = raw_bound(c, n);
    *n_written = 0;
    if (need == 0) return mz_fail(MZ_E_RANGE, "raw encode: %zu values is too many", n);
    if (dst_cap < need)
        return mz_fail(MZ_E_RANGE, "raw encode: need %zu bytes, have %zu", need, dst_cap);
    mz_codec_header_write(dst, RAW_MAGIC, 0, n);
    if (n) copy_le16(dst + MZ_CODEC_HEADER_BYTES, src, n);
    *n_written = need;
    return MZ_OK;
}

static mz_status raw_peek(const mz_codec *c, const uint8_t *src, size_t len, size_t *n_values)
{
    unsigned param;
    uint64_t n;
    mz_status st = mz_codec_header_parse("raw", src, len, RAW_MAGIC, raw_payload, &param, &n);
    if (st == MZ_OK) *n_values = (size_t)n;
    return st;
}

static mz_status raw_decode_range(const mz_codec *c, const uint8_t *src, size_t len, size_t n, size_t v0,
                                  mz_f16 *dst, size_t k)
{
    size_t got;
    mz_status st = raw_peek(c, src, len, &got);
    if (st != MZ_OK) return st;
    if (got != n)
        return mz_fail(MZ_E_FORMAT, "raw blob: holds %zu values, caller expects %zu", got, n);
    if (v0 > n || k > n - v0) return mz_fail(MZ_E_RANGE, "raw blob: values %zu..%zu of %zu", v0, v0 + k, n);
    if (k) copy_from_le16(dst, src + MZ_CODEC_HEADER_BYTES + 2 * v0, k);
    return MZ_OK;
}

static mz_status raw_decode(const mz_codec *c, const uint8_t *src, size_t len, mz_f16 *dst, size_t n)
{
    return raw_decode_range(c, src, len, n, 0, dst, n);
}

const mz_codec mz_codec_raw_vt = {
    .name = "raw",
    .param = 0,
    .bound = raw_bound,
    .encode = raw_encode,
    .decode = raw_decode,
    .peek = raw_peek,
    .decode_range = raw_decode_range,
    .range_unit = 1,
};
