/*
 * codec.c — codec registry, the shared blob header (layout in codec.h) and
 * the synthetic KV that codec timings run on.
 */
#include "codec.h"
#include "codec_cachegen.h"
#include "codec_f16.h"

#include <math.h>
#include <string.h>

void mz_codec_header_write(uint8_t *dst, uint32_t magic, unsigned param, uint64_t n)
{
    mz_put_le32(dst, magic);
    mz_put_le16(dst + 4, MZ_CODEC_VERSION);
    mz_put_le16(dst + 6, param);
    mz_put_le64(dst + 8, n);
}

mz_status mz_codec_header_parse(const char *name, const uint8_t *src, size_t len, uint32_t magic,
                                mz_codec_payload_fn payload, unsigned *param, uint64_t *n)
{
    size_t want;
    if (!src || len < MZ_CODEC_HEADER_BYTES)
        return mz_fail(MZ_E_FORMAT, "%s blob: truncated header (%zu bytes)", name, len);
    if (mz_get_le32(src) != magic)
        return mz_fail(MZ_E_FORMAT, "%s blob: bad magic 0x%08x", name, (unsigned)mz_get_le32(src));
    if (mz_get_le16(src + 4) != MZ_CODEC_VERSION)
        return mz_fail(MZ_E_FORMAT, "%s blob: unsupported version %u", name, mz_get_le16(src + 4));
    *param = mz_get_le16(src + 6);
    *n = mz_get_le64(src + 8);
    if (!payload(*param, *n, &want) || want > SIZE_MAX - MZ_CODEC_HEADER_BYTES)
        return mz_fail(MZ_E_FORMAT, "%s blob: bad parameter %u or value count %llu", name,
                       *param, (unsigned long long)*n);
    if (len != MZ_CODEC_HEADER_BYTES + want)
        return mz_fail(MZ_E_FORMAT, "%s blob: length %zu, expected %zu for %llu values", name,
                       len, MZ_CODEC_HEADER_BYTES + want, (unsigned long long)*n);
    return MZ_OK;
}

/* Built-in codecs, looked up by name. */
static const mz_codec *builtin(const char *name)
{
    if (!strcmp(name, "raw")) return &mz_codec_raw_vt;
    if (!strcmp(name, "q8") || !strcmp(name, "q8-g64")) return &mz_codec_q8_g64_vt;
    if (!strcmp(name, "q8-g32")) return &mz_codec_q8_g32_vt;
    if (!strcmp(name, "q8-g128")) return &mz_codec_q8_g128_vt;
    if (!strcmp(name, "q4") || !strcmp(name, "q4-g64")) return &mz_codec_q4_g64_vt;
    if (!strcmp(name, "q4-g32")) return &mz_codec_q4_g32_vt;
    if (!strcmp(name, "q4-g128")) return &mz_codec_q4_g128_vt;
    if (!strcmp(name, "q4r")) return &mz_codec_q4r_vt;
    if (!strcmp(name, "q8-q4r")) return &mz_codec_q8_q4r_vt;
    if (!strcmp(name, "cachegen")) return &mz_codec_cachegen_vt;
    if (!strcmp(name, "cachegen-q7")) return &mz_codec_cachegen_q7_vt;
    if (!strcmp(name, "cachegen-anchor")) return &mz_codec_cachegen_anchor_vt;
    if (!strcmp(name, "cachegen-layer")) return &mz_codec_cachegen_layer_vt;
    return NULL;
}

mz_codec mz_codec_for_layer(const mz_codec *c, unsigned head_dim, unsigned layer, unsigned n_layer)
{
    if (mz_codec_is_cachegen(c)) return mz_cachegen_for_layer(c, head_dim, layer, n_layer);
    const bool split = c->encode == mz_codec_q8_q4r_vt.encode;
    if ((c->encode == mz_codec_q4r_vt.encode || split) && head_dim > 0) {
        /* the largest power of two dividing head_dim: a rotation never
         * crosses from one head vector into the next */
        unsigned d = head_dim & -head_dim;
        if (d > MZ_ROT_DIM_MAX) d = MZ_ROT_DIM_MAX;
        if (d >= 2) {
            mz_codec r = split ? mz_codec_q8_q4r(d) : mz_codec_q4r(d);
            r.name = c->name;
            return r;
        }
    }
    return *c;
}

double mz_codec_ratio_hint(const mz_codec *c)
{
    if (mz_codec_is_cachegen(c)) return mz_cachegen_ratio_hint(c);
    /* By the encoder, not the name: "q8-g32" is q8 with another group. */
    if (c->encode == mz_codec_q8_g64_vt.encode && c->param >= 1) /* f16 min + max + G codes */
        return (4.0 + (double)c->param) / (2.0 * (double)c->param);
    if ((c->encode == mz_codec_q4_g64_vt.encode || c->encode == mz_codec_q4r_vt.encode) &&
        c->param >= 2) /* 4 + G / 2 bytes per G values */
        return (4.0 + (double)c->param / 2.0) / (2.0 * (double)c->param);
    if (c->encode == mz_codec_q8_q4r_vt.encode && c->param >= 2) /* half q8 (G = 64), half q4r */
        return 0.5 * (4.0 + MZ_Q8_GROUP_DEFAULT) / (2.0 * MZ_Q8_GROUP_DEFAULT) +
               0.5 * (4.0 + (double)c->param / 2.0) / (2.0 * (double)c->param);
    return 1.0;
}

const mz_codec *mz_codec_find(const char *name)
{
    const mz_codec *c = name ? builtin(name) : NULL;
    if (!c)
        mz_fail(MZ_E_INVAL, "unknown codec '%s' (known: raw, q8, q8-g32, q8-g128, q4, q4-g32, "
                "q4-g128, q4r, q8-q4r, cachegen, "
                "cachegen-q7, cachegen-anchor, cachegen-layer)",
                name ? name : "(null)");
    return c;
}

void mz_codec_synth_kv(mz_f16 *dst, size_t n, unsigned head_dim, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        size_t ch = i % head_dim;
        float noise = 0;
        for (int k = 0; k < 4; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            noise += (float)(s >> 40) / (float)(1u << 24);
        }
        float scale = ch % 17 == 3 ? 4.0f : 0.6f;
        dst[i] = mz_float_to_half(0.3f * sinf(0.7f * (float)ch) + (noise - 2.0f) * scale);
    }
}
