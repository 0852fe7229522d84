/*
 * codec.h — KV chunk codecs: a small vtable chosen per engine.
 *
 * A codec turns n F16 values (one KV chunk: K then V, see kernels.h) into a
 * self-describing blob and back. Every blob starts with a 16-byte header,
 * little-endian:
 *
 *     u32 magic      per codec ("MZRW" raw, "MZQ8" q8, "MZQ4" q4, "MZQR" q4r,
 *                    "MZKV" q8-q4r)
 *     u16 version    1
 *     u16 param      codec parameter (q8: group size G >= 1; q4: even G >= 2;
 *                    q4r: rotation length = group size, a power of two
 *                    2 .. MZ_ROT_DIM_MAX; q8-q4r: its q4r half's; raw: 0)
 *     u64 n_values   number of F16 values encoded
 *
 * followed by the codec's payload, whose length is a pure function of
 * (param, n_values); decode checks that the blob length is exactly that, so
 * it never reads or writes out of bounds whatever the bytes.
 *
 * Contract of every codec (all functions: any thread, no allocation, no I/O):
 *   bound(n)    the largest blob encode() can produce for n values
 *               (0 when n is too large to describe).
 *   encode()    writes at most dst_cap bytes; *n_written = blob length.
 *               MZ_E_RANGE if dst_cap < bound(n) (nothing useful written);
 *               MZ_E_FORMAT if the input cannot be encoded (q8, q4: inf/NaN;
 *               dst may then be partly written).
 *   decode()    MZ_E_FORMAT (message via mz_last_error()) for a malformed,
 *               truncated or oversized blob, or one whose n_values != n;
 *               on error dst may be partly written.
 *   peek()      validates the header and exact length, returns n_values.
 *
 * Lossy codecs are idempotent: encode(decode(encode(x))) == encode(x) byte
 * for byte, so chunks can cycle through the compressed stack any number of
 * times without drifting (paper §6.5) — all but q4r (and q8-q4r's V half), whose rotation back to
 * f16 moves each value by up to half an f16 ulp; re-encoding such a row
 * gives the same codes in practice but min/max may move by an f16 ulp
 * (docs/CODECS.md has the measured drift over cycles).
 */
#ifndef MZ_CODEC_H
#define MZ_CODEC_H

#include "../core/core.h"
#include "../core/dtype.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MZ_CODEC_HEADER_BYTES 16
#define MZ_CODEC_VERSION 1
#define MZ_Q8_GROUP_DEFAULT 64
#define MZ_Q8_GROUP_MAX 65535
#define MZ_Q4_GROUP_MAX 65534 /* q4 groups are even: each starts on a byte */
#define MZ_ROT_DIM_MAX 1024   /* q4r: the longest rotated row (a stack buffer) */

typedef struct mz_codec mz_codec;

struct mz_codec {
    const char *name;  /* "raw", "q8" … */
    unsigned param;    /* codec parameter (q8: group size) */
    size_t (*bound)(const mz_codec *c, size_t n_values);
    mz_status (*encode)(const mz_codec *c, const mz_f16 *src, size_t n, uint8_t *dst,
                        size_t dst_cap, size_t *n_written);
    mz_status (*decode)(const mz_codec *c, const uint8_t *src, size_t len, mz_f16 *dst,
                        size_t n);
    mz_status (*peek)(const mz_codec *c, const uint8_t *src, size_t len, size_t *n_values);
    /* Optional (NULL: whole blobs only). Values [v0, v0 + k) of a blob of n
     * values, the same bits as those values of decode()'s output, reading
     * only their part of the payload; v0 and k whole multiples of
     * range_unit (k may also end the blob), else MZ_E_RANGE; header and
     * length checked as decode() does, a bad group of the range is
     * MZ_E_FORMAT. What lets attention read a lent KV chunk a tile at a
     * time (src/engine/forward.c). */
    mz_status (*decode_range)(const mz_codec *c, const uint8_t *src, size_t len, size_t n, size_t v0,
                              mz_f16 *dst, size_t k);
    /* The alignment decode_range needs for blobs this instance encodes. */
    unsigned range_unit;
};

/* Built-in codecs by name: "raw", "q8" (G = 64), "q8-g32", "q8-g128", "q4"
 * (G = 64), "q4-g32", "q4-g128", "q4r" (rows of 64 rotated, then q4 with
 * G = 64), "q8-q4r" (a chunk's K half through q8, its V half through q4r:
 * codec_split.c), the cachegen family (codec_cachegen.h).
 * NULL (with a message) for an unknown name. The result is static. */
MZ_INTERNAL const mz_codec *mz_codec_find(const char *name);
/* A q8 codec with any group size in [1, MZ_Q8_GROUP_MAX] (returned by value,
 * nothing allocated); .name is "q8". Asserts on a bad group size. */
MZ_INTERNAL mz_codec mz_codec_q8(unsigned group);
/* A q4 codec with any even group size in [2, MZ_Q4_GROUP_MAX], as
 * mz_codec_q8; .name is "q4". */
MZ_INTERNAL mz_codec mz_codec_q4(unsigned group);

/* A q4r codec rotating rows of d values (a power of two in
 * [2, MZ_ROT_DIM_MAX]), one q4 group per rotated row; .name is "q4r". */
MZ_INTERNAL mz_codec mz_codec_q4r(unsigned d);
/* A q8-q4r codec whose V half rotates rows of d values (as mz_codec_q4r);
 * .name is "q8-q4r". */
MZ_INTERNAL mz_codec mz_codec_q8_q4r(unsigned d);

/* The instance that encodes KV chunks of layer `layer` (of n_layer) for a
 * model whose KV heads are head_dim values wide (by value, nothing
 * allocated). q8, q4 and raw: *c itself. q4r and q8-q4r: rows of the largest
 * power of two dividing head_dim (at most MZ_ROT_DIM_MAX), so each rotation
 * stays inside one head vector. cachegen: c's parameters with the row
 * length set to head_dim (when 1..MZ_CG_ROW_MAX) and, for "cachegen-layer",
 * the CacheGen layer schedule: c's levels in the first third of the layers,
 * at most Q = 7 after. The name stays c's. Any instance of a codec decodes
 * any blob of that codec, so a chunk decodes whichever instance encoded it. */
MZ_INTERNAL mz_codec mz_codec_for_layer(const mz_codec *c, unsigned head_dim, unsigned layer,
                                        unsigned n_layer);
/* Expected encoded size / raw size on real KV (q8, q4, raw: exact; cachegen: the
 * measured bits per value at its level counts, docs/CODECS.md). A seed for
 * the memory manager's running estimate; bound() stays the worst case. */
MZ_INTERNAL double mz_codec_ratio_hint(const mz_codec *c);

/* Convenience wrappers. */
/* Synthetic KV values for timing codecs where no model's KV is at hand (the
 * device profile's codec rates, bench_codec): a per-channel offset (a sine
 * of the channel index mod head_dim), one channel in 17 with a 4x wider
 * spread, and noise (a sum of four uniforms from a 64-bit LCG started at
 * seed). The same (n, head_dim, seed) give the same values. */
MZ_INTERNAL void mz_codec_synth_kv(mz_f16 *dst, size_t n, unsigned head_dim, uint64_t seed);

static inline size_t mz_codec_bound(const mz_codec *c, size_t n) { return c->bound(c, n); }
static inline mz_status mz_codec_encode(const mz_codec *c, const mz_f16 *src, size_t n,
                                        uint8_t *dst, size_t dst_cap, size_t *n_written)
{
    return c->encode(c, src, n, dst, dst_cap, n_written);
}
static inline mz_status mz_codec_decode(const mz_codec *c, const uint8_t *src, size_t len,
                                        mz_f16 *dst, size_t n)
{
    return c->decode(c, src, len, dst, n);
}
/* Whether c decodes ranges of its blobs that start and end on every
 * multiple of `align` values (a KV head row: head_dim). */
static inline bool mz_codec_reads_ranges(const mz_codec *c, size_t align)
{
    return c->decode_range && c->range_unit && align % c->range_unit == 0;
}

/* ---- internals shared by the codec files and their tests --------------------- */

MZ_INTERNAL extern const mz_codec mz_codec_raw_vt;     /* "raw" */
MZ_INTERNAL extern const mz_codec mz_codec_q8_g64_vt;  /* "q8" */
MZ_INTERNAL extern const mz_codec mz_codec_q8_g32_vt;  /* "q8-g32" */
MZ_INTERNAL extern const mz_codec mz_codec_q8_g128_vt; /* "q8-g128" */
MZ_INTERNAL extern const mz_codec mz_codec_q4_g64_vt;  /* "q4" */
MZ_INTERNAL extern const mz_codec mz_codec_q4_g32_vt;  /* "q4-g32" */
MZ_INTERNAL extern const mz_codec mz_codec_q4_g128_vt; /* "q4-g128" */
MZ_INTERNAL extern const mz_codec mz_codec_q4r_vt;      /* "q4r" */
MZ_INTERNAL extern const mz_codec mz_codec_q8_q4r_vt;   /* "q8-q4r" */

/* Header helpers (codec.c). parse checks magic, version and that len equals
 * MZ_CODEC_HEADER_BYTES + payload_bytes(param, n) exactly; payload_bytes
 * returns false when the size overflows. */
typedef bool (*mz_codec_payload_fn)(unsigned param, uint64_t n, size_t *payload);
MZ_INTERNAL void mz_codec_header_write(uint8_t *dst, uint32_t magic, unsigned param, uint64_t n);
MZ_INTERNAL mz_status mz_codec_header_parse(const char *name, const uint8_t *src, size_t len,
                                            uint32_t magic, mz_codec_payload_fn payload,
                                            unsigned *param, uint64_t *n);

/* q8 kernels (format and arithmetic: top of codec_q8.c). decode_groups: n
 * values from the payload of groups of G values, each = f16 min, f16 max,
 * G codes (last group short). Each kernel checks a group's min/max (finite,
 * max >= min) before decoding it and returns the number of groups decoded:
 * ceil(n / G), or the index of the first invalid group (dst then holds the
 * groups before it). Every kernel gives the same bits as the _ref one. */
MZ_INTERNAL size_t mz_q8_decode_groups_ref(const uint8_t *payload, size_t n, unsigned group,
                                           mz_f16 *dst);
/* Scalar-only decode of a whole blob (the reference the SIMD paths are tested
 * against). */
MZ_INTERNAL mz_status mz_q8_decode_ref(const uint8_t *src, size_t len, mz_f16 *dst, size_t n);
/* Scalar encoder of the payload (groups of G, as above) of n values; returns
 * n, or the index of the first inf/NaN value (the payload may then be
 * partly written). The reference every SIMD encoder matches byte for byte. */
MZ_INTERNAL size_t mz_q8_encode_groups_ref(const mz_f16 *src, size_t n, unsigned group,
                                           uint8_t *payload);
/* One q8 / q4 group's decode grid, and the scalar search for a value's
 * code: the smallest q in [0, top] whose dec(q) is nearest x (mn <= x <= mx);
 * the SIMD encoders call it for the lanes they cannot settle. */
typedef struct {
    /* step = mz_quant_step(mn, mx, top); inv_step = 1 / step, 0 when step is 0 */
    float mn, mx, step, inv_step;
    unsigned top;                 /* top code: 255 (q8) or 15 (q4) */
} mz_quant_grid;
MZ_INTERNAL unsigned mz_quant_code_ref(const mz_quant_grid *g, float x);
/* q4 kernels (format: top of codec_q8.c): as the q8 ones, groups of G
 * values (G even) each = f16 min, f16 max, ceil(k / 2) bytes of 4-bit codes,
 * value 2i in the low nibble of byte i, value 2i + 1 in its high nibble. */
MZ_INTERNAL size_t mz_q4_decode_groups_ref(const uint8_t *payload, size_t n, unsigned group,
                                           mz_f16 *dst);
MZ_INTERNAL mz_status mz_q4_decode_ref(const uint8_t *src, size_t len, mz_f16 *dst, size_t n);
MZ_INTERNAL size_t mz_q4_encode_groups_ref(const mz_f16 *src, size_t n, unsigned group,
                                           uint8_t *payload);
/* Which kernels mz_codec_q8 and the q4 decoder use: "avx512", "avx2", "neon"
 * (decode only: both encoders are scalar there) or "scalar". */
MZ_INTERNAL const char *mz_q8_isa(void);
/* Test hooks, process-wide: use at most the named kernels ("scalar", "avx2",
 * "avx512", "neon"; NULL or "best": the best the CPU has). force_isa returns
 * false, changing nothing, when the CPU or the build lacks them. */
MZ_INTERNAL bool mz_q8_force_isa(const char *isa);
/* mz_q8_force_isa(on ? "scalar" : NULL). */
MZ_INTERNAL void mz_q8_force_scalar(bool on);

/* q4r's rotation (codec_rot.c; definition there). signs: d sign masks
 * (0 or 0x80000000) from mz_rot_signs. rows: rows of d values, src == dst
 * allowed. Forward: f16 row -> rotated f16 row; inverse: back. Every kernel
 * gives the bits of the _ref one. */
MZ_INTERNAL void mz_rot_signs(unsigned d, uint32_t *signs);
MZ_INTERNAL float mz_rot_scale(unsigned d); /* f32(1 / sqrt(d)) */
MZ_INTERNAL void mz_rot_fwht_ref(float *v, unsigned d, unsigned from);
MZ_INTERNAL void mz_rot_rows_ref(const mz_f16 *src, mz_f16 *dst, size_t rows, unsigned d,
                                 const uint32_t *signs, bool inverse);
/* q4r payload: the q4 payload of the rotated rows (the last n mod d values
 * unrotated), scalar only: the reference the q4r SIMD paths are tested
 * against. */
MZ_INTERNAL mz_status mz_q4r_decode_ref(const uint8_t *src, size_t len, mz_f16 *dst, size_t n);
MZ_INTERNAL mz_status mz_q4r_encode_ref(unsigned d, const mz_f16 *src, size_t n, uint8_t *dst,
                                        size_t dst_cap, size_t *n_written);
#if defined(__ARM_NEON) && defined(__aarch64__)
MZ_INTERNAL void mz_rot_rows_neon(const mz_f16 *src, mz_f16 *dst, size_t rows, unsigned d,
                                  const uint32_t *signs, bool inverse);
#endif

#if defined(__x86_64__) || defined(__i386__)
#define MZ_CODEC_HAVE_AVX2_FILE 1
#define MZ_CODEC_HAVE_AVX512_FILE 1
/* codec_q8_avx2.c: call only when the CPU has AVX2+FMA+F16C. */
MZ_INTERNAL size_t mz_q8_decode_groups_avx2(const uint8_t *payload, size_t n, unsigned group,
                                            mz_f16 *dst);
/* Encoder fast path: codes (one a byte) of k values of one group (grid as in
 * codec_q8.c, top code 255 or 15); lanes it cannot settle cheaply get
 * unresolved[j] = 1 for the scalar code. Returns the number of unresolved
 * lanes. */
MZ_INTERNAL size_t mz_quant_codes_avx2(const mz_f16 *x, size_t k, float mn, float mx, float step,
                                       float inv_step, unsigned top, uint8_t *codes,
                                       uint8_t *unresolved);
/* Min and max of k >= 1 finite F16 values (a zero may come out either sign). */
MZ_INTERNAL void mz_q8_minmax_avx2(const mz_f16 *x, size_t k, float *mn, float *mx);
/* q4: decode_groups as mz_q4_decode_groups_ref. */
MZ_INTERNAL size_t mz_q4_decode_groups_avx2(const uint8_t *payload, size_t n, unsigned group,
                                            mz_f16 *dst);
/* q4r rotation, as mz_rot_rows_ref (d < 8: the scalar kernel). */
MZ_INTERNAL void mz_rot_rows_avx2(const mz_f16 *src, mz_f16 *dst, size_t rows, unsigned d,
                                  const uint32_t *signs, bool inverse);
/* F16C conversion of n floats (RNE); test hook for the scalar helper. */
MZ_INTERNAL void mz_codec_f32_to_f16_avx2(const float *src, mz_f16 *dst, size_t n);
MZ_INTERNAL bool mz_codec_cpu_has_avx2(void);

/* codec_q8_avx512.c: call only when mz_codec_cpu_has_avx512() (F, BW, VL,
 * with AVX2+FMA+F16C). decode_groups as the _ref kernel; stream: use
 * non-temporal 64-byte stores where it can (dst 64-byte aligned and G a
 * multiple of 32; otherwise ordinary stores), for destinations not worth
 * caching. Ends with an sfence either way. */
MZ_INTERNAL size_t mz_q8_decode_groups_avx512(const uint8_t *payload, size_t n, unsigned group,
                                              mz_f16 *dst, bool stream);
/* encode_groups as the _ref kernel, 16 lanes at a time; same bytes. */
MZ_INTERNAL size_t mz_q8_encode_groups_avx512(const mz_f16 *src, size_t n, unsigned group,
                                              uint8_t *payload);
/* q4: decode_groups as mz_q4_decode_groups_ref; stream as for q8; encode as
 * mz_q4_encode_groups_ref, same bytes. */
MZ_INTERNAL size_t mz_q4_encode_groups_avx512(const mz_f16 *src, size_t n, unsigned group,
                                              uint8_t *payload);
MZ_INTERNAL size_t mz_q4_decode_groups_avx512(const uint8_t *payload, size_t n, unsigned group,
                                              mz_f16 *dst, bool stream);
MZ_INTERNAL bool mz_codec_cpu_has_avx512(void);
/* q4r rotation, as mz_rot_rows_ref (d < 16: the AVX2 kernel). */
MZ_INTERNAL void mz_rot_rows_avx512(const mz_f16 *src, mz_f16 *dst, size_t rows, unsigned d,
                                    const uint32_t *signs, bool inverse);
#endif

#endif /* MZ_CODEC_H */
