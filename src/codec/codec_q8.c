/*
 * codec_q8.c — group-wise asymmetric quantization of F16 values (FlexGen
 * style) at 8 bits (q8) and 4 bits (q4), idempotent bit for bit. Both share
 * one definition of the step, the decode and the code search, over the top
 * code L (q8: L = 255, q4: L = 15).
 *
 * q8 blob: the 16-byte header of codec.h (magic "MZQ8", param = group size
 * G >= 1), then ceil(n / G) groups, each
 *
 *     f16 min     (finite)
 *     f16 max     (finite, >= min)
 *     u8  code[G] (the last group holds n mod G codes when G does not divide n)
 *
 * so a group of 64 takes 68 bytes instead of 128 (46.9 % saved).
 *
 * q4 blob: header magic "MZQ4", param = G, even (2 .. 65534), then groups of
 *
 *     f16 min, f16 max (as q8)
 *     u8  nib[ceil(k / 2)]  code of value 2i in the low nibble of nib[i],
 *                           of value 2i + 1 in its high nibble
 *
 * (k = G, or n mod G for a short last group). An even G keeps every group
 * byte-aligned; when n is odd the high nibble of the blob's last byte is
 * padding and must be 0 (decode and peek refuse anything else, so a blob has
 * exactly one encoding). A group of 64 takes 36 bytes (71.9 % saved).
 *
 * The group's scale is implied: step = f32((max - min) / L) truncated to 16
 * significant bits (mz_quant_step), which makes q * step exact in f32 for
 * every q <= 255.
 *
 * Decoding, for q in 0..L:
 *     dec(q) = max                                         if q == L
 *            = f16_rne(v > max ? max : v), v = f32(min + f32(q * step))  otherwise
 * Every ISA path computes exactly this (an exact f32 multiply, one rounded
 * f32 add — fused or not, the same —, the compare-select, RNE to f16), so
 * SIMD output is bit-identical to scalar.
 * Properties: dec(0) = min, dec(L) = max, min <= dec(q) <= max, and dec is
 * monotone non-decreasing in q. It never yields -0 when min and max are
 * canonical (a zero min or max is stored as +0).
 *
 * Encoding a group x[0..k) (all finite; inf or NaN anywhere → MZ_E_FORMAT, so
 * the caller can fall back to the raw codec):
 *     min = min x, max = max x (exact: they are f16 values; ±0 stored as +0)
 *     code(x) = the smallest q in 0..L whose dec(q) is nearest x
 *               (dec is monotone, so ties go to the lower value)
 *
 * Why encode(decode(encode(x))) == encode(x), byte for byte, for any L. Let
 * y be the decoded group.
 *   - min y = min: the min element gets code 0 and dec(0) = min; all
 *     dec(q) >= min.
 *   - max y = max: the max element is at distance 0 from dec(L) = max, so
 *     its code decodes to max; all dec(q) <= max.
 *   So the header and the implied step are unchanged, hence so is dec.
 *   - codes: let c = code(x_i), y_i = dec(c). Every code decoding to y_i is
 *     as near x_i as c, so c, the smallest of all nearest codes, is also the
 *     smallest code decoding to y_i, which is exactly code(y_i).
 * The parameters and codes are a fixed point; later cycles repeat it. No
 * special case for constant groups (step = 0), subnormals or huge ranges.
 * (q4's padding nibble is always written 0, so its bytes repeat as well.)
 *
 * Error: |dec(code(x)) - x| <= (step + ulp16 of the neighbouring grid
 * values) / 2; min and max are exact.
 *
 * Kernels, picked at run time (mz_q8_isa; mz_q8_force_isa for tests), the
 * same choice for both codecs: AVX-512 F/BW/VL (codec_q8_avx512.c: decode
 * 16 lanes, streaming stores into large aligned destinations; encode 16
 * lanes), else AVX2+F16C (codec_q8_avx2.c), NEON decode on AArch64 (q4's
 * nibbles unpacked 16 at a time, then q8's arithmetic lane for lane),
 * scalar otherwise. q4's x86 decoders compute dec() of the 16 codes once
 * per group with q8's vector arithmetic (L = 15), then unpack 16 bytes into
 * 32 codes and look each value up in that table (vpermw on AVX-512, two
 * pshufb on AVX2); its encoders run q8's code search with L = 15 and pack
 * the codes. The SIMD encoders compute min/max and settle most codes a
 * vector at a time (guess, decode the neighbours exactly as the decoder
 * does, check the bracket); lanes they cannot settle (plateaus where
 * several codes decode to one f16 value) take the scalar search,
 * mz_quant_code_ref. Decode checks each group's min/max
 * as it reaches it (peek checks them all up front). Every kernel gives the
 * same bytes (tests/unit/test_codec.c).
 *
 * Thread contract: stateless, any thread.
 */
#include "codec.h"
#include "codec_f16.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#define Q8_MAGIC 0x38515a4du /* "MZQ8" */

/* ---- layout --------------------------------------------------------------- */

static bool q8_payload(unsigned group, uint64_t n, size_t *payload)
{
    if (group < 1 || group > MZ_Q8_GROUP_MAX || n > SIZE_MAX / 8) return false; /* 5n must not overflow */
    uint64_t n_groups = (n + group - 1) / group;
    *payload = (size_t)(n_groups * 4 + n);
    return true;
}

/* What q8 and q4 differ in. Validation, encode and decode are written once
 * and take one of these (Q8_FMT here, Q4_FMT with q4's payload below). */
typedef struct quant_fmt {
    const char *name; /* in messages */
    uint32_t magic;
    unsigned top;     /* top code: 255 (q8, a code a byte) or 15 (q4, two a byte) */
    bool (*payload)(unsigned group, uint64_t n, size_t *payload);
} quant_fmt;

static const quant_fmt Q8_FMT = {"q8", Q8_MAGIC, 255, q8_payload};

static size_t fmt_bound(const quant_fmt *f, unsigned group, size_t n)
{
    size_t p;
    if (!f->payload(group, n, &p) || p > SIZE_MAX - MZ_CODEC_HEADER_BYTES) return 0;
    return MZ_CODEC_HEADER_BYTES + p;
}


/* Bytes of one group of k values (k <= G): min, max, the codes. */
static inline size_t group_bytes(const quant_fmt *f, size_t k)
{
    return 4 + (f->top == 15 ? (k + 1) / 2 : k);
}

/* ---- decode ---------------------------------------------------------------- */

/* dec(q) of a group with top code `top` (255: q8, 15: q4) and its implied
 * step (mz_quant_step); the one definition every kernel of both codecs
 * follows. */
static inline uint16_t dec_bits(float mn, float mx, float step, unsigned top, unsigned q)
{
    if (q == top) return mz_float_to_half(mx);
    float v = mn + (float)q * step;
    if (v > mx) v = mx;
    return mz_float_to_half(v);
}

/* The value of dec_bits as a float (a zero may come out as either sign, which
 * no comparison below can tell apart). */
static inline float dec_val(float mn, float mx, float step, unsigned top, unsigned q)
{
    if (q == top) return mx;
    float v = mn + (float)q * step;
    if (v > mx) v = mx;
    return mz_cdc_round_f16(v);
}

/* A group header every kernel refuses: min or max not finite, or max < min. */
static inline bool q8_header_bad(unsigned bmn, unsigned bmx, float mn, float mx)
{
    return (bmn & 0x7c00u) == 0x7c00u || (bmx & 0x7c00u) == 0x7c00u || mx < mn;
}

/* The min and max of the group header at p; false for a header every
 * kernel refuses (q8_header_bad). */
static inline bool group_header(const uint8_t *p, float *mn, float *mx)
{
    unsigned bmn = mz_get_le16(p), bmx = mz_get_le16(p + 2);
    *mn = mz_half_to_float((uint16_t)bmn);
    *mx = mz_half_to_float((uint16_t)bmx);
    return !q8_header_bad(bmn, bmx, *mn, *mx);
}

/* dec_bits of codes [j0, k) of one group whose codes start at q (q4: two a
 * byte, low nibble first) into dst[j0..k). */
static inline void dec_codes(unsigned top, float mn, float mx, float step, const uint8_t *q, size_t j0, size_t k,
                             mz_f16 *dst)
{
    if (top == 15)
        for (size_t j = j0; j < k; j++) dst[j] = dec_bits(mn, mx, step, 15, (q[j / 2] >> (4 * (j & 1))) & 15u);
    else
        for (size_t j = j0; j < k; j++) dst[j] = dec_bits(mn, mx, step, 255, q[j]);
}

/* A kernel's share of one group: decodes a prefix of its k codes into dst
 * and returns its length; dec_codes does the rest. */
typedef size_t (*group_prefix_fn)(unsigned top, const uint8_t *q, size_t k, float mn, float mx, float step,
                                  mz_f16 *dst);

/* The decode of q8 (top 255) or q4 (top 15) groups, each group's prefix by
 * `prefix` (NULL: none) and the rest scalar; returns the number of groups
 * decoded before the first bad header. Inlined into each caller with top
 * and prefix constant. */
static inline size_t decode_groups_with(unsigned top, const uint8_t *payload, size_t n, unsigned group,
                                        mz_f16 *dst, group_prefix_fn prefix)
{
    size_t g = 0;
    for (size_t i0 = 0; i0 < n; i0 += group, g++) {
        size_t k = MZ_MIN((size_t)group, n - i0);
        float mn, mx;
        if (!group_header(payload, &mn, &mx)) break;
        float step = mz_quant_step(mn, mx, top);
        const uint8_t *q = payload + 4;
        const size_t j0 = prefix ? prefix(top, q, k, mn, mx, step, dst + i0) : 0;
        dec_codes(top, mn, mx, step, q, j0, k, dst + i0);
        payload += 4 + (top == 15 ? (k + 1) / 2 : k);
    }
    return g;
}

/* The scalar decode of q8 or q4 groups (decode_groups_with, no prefix). */
static inline size_t decode_groups_ref(unsigned top, const uint8_t *payload, size_t n, unsigned group,
                                       mz_f16 *dst)
{
    return decode_groups_with(top, payload, n, group, dst, NULL);
}

#if defined(__ARM_NEON) && defined(__aarch64__)
/* dec() of four codes: dec_bits's arithmetic, lane for lane. */
static inline uint16x4_t neon_dec4(uint32x4_t q, uint32x4_t vtop, float32x4_t vmn, float32x4_t vmx,
                                   float32x4_t vstep)
{
    float32x4_t v = vaddq_f32(vmn, vmulq_f32(vcvtq_f32_u32(q), vstep));
    v = vbslq_f32(vcgtq_f32(v, vmx), vmx, v);     /* v > max ? max : v */
    v = vbslq_f32(vceqq_u32(q, vtop), vmx, v);    /* the top code is max */
    return vreinterpret_u16_f16(vcvt_f16_f32(v));
}

/* dec() of eight codes, one a byte, into dst[0..7]. */
static inline void neon_dec8(uint8x8_t q, uint32x4_t vtop, float32x4_t vmn, float32x4_t vmx, float32x4_t vstep,
                             mz_f16 *dst)
{
    const uint16x8_t q16 = vmovl_u8(q);
    vst1_u16(dst, neon_dec4(vmovl_u16(vget_low_u16(q16)), vtop, vmn, vmx, vstep));
    vst1_u16(dst + 4, neon_dec4(vmovl_u16(vget_high_u16(q16)), vtop, vmn, vmx, vstep));
}

/* The NEON share of a group: q8 (top 255) 8 codes a step, q4 (top 15) 8
 * bytes unpacked into 16 codes, low nibble first, a step. */
static inline size_t neon_group_prefix(unsigned top, const uint8_t *q, size_t k, float mn, float mx, float step,
                                       mz_f16 *dst)
{
    const uint32x4_t vtop = vdupq_n_u32(top);
    const float32x4_t vmn = vdupq_n_f32(mn), vmx = vdupq_n_f32(mx), vstep = vdupq_n_f32(step);
    size_t j = 0;
    if (top == 15) {
        for (; j + 16 <= k; j += 16) {
            const uint8x8_t b = vld1_u8(q + j / 2);
            const uint8x8x2_t z = vzip_u8(vand_u8(b, vdup_n_u8(15)), vshr_n_u8(b, 4));
            neon_dec8(z.val[0], vtop, vmn, vmx, vstep, dst + j);
            neon_dec8(z.val[1], vtop, vmn, vmx, vstep, dst + j + 8);
        }
    } else {
        for (; j + 8 <= k; j += 8) neon_dec8(vld1_u8(q + j), vtop, vmn, vmx, vstep, dst + j);
    }
    return j;
}

/* The NEON decode of q8 or q4 groups: same bits as decode_groups_ref. */
static inline size_t decode_groups_neon(unsigned top, const uint8_t *payload, size_t n, unsigned group,
                                        mz_f16 *dst)
{
    return decode_groups_with(top, payload, n, group, dst, neon_group_prefix);
}
#endif

/* ---- kernel choice ----------------------------------------------------------- */

enum q8_isa { Q8_SCALAR, Q8_NEON, Q8_AVX2, Q8_AVX512, Q8_BEST };

static const char *const q8_isa_names[] = {
    [Q8_SCALAR] = "scalar", [Q8_NEON] = "neon", [Q8_AVX2] = "avx2", [Q8_AVX512] = "avx512",
};

static _Atomic int g_isa_cap = Q8_BEST; /* test hook: the best kernels allowed */

#if defined(MZ_CODEC_HAVE_AVX2_FILE)
/* AVX2 + FMA + F16C with YMM state enabled by the OS. cpuid directly, since
 * not every compiler's __builtin_cpu_supports knows "f16c"; the answer is
 * cached (racing first calls store the same value). */
static bool detect_avx2(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    const unsigned need = (1u << 12) | (1u << 27) | (1u << 28) | (1u << 29); /* fma osxsave avx f16c */
    if ((c & need) != need) return false;
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    if ((xlo & 6u) != 6u) return false; /* XMM and YMM state */
    if (__get_cpuid_max(0, NULL) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    return (b & (1u << 5)) != 0; /* avx2 */
}

/* AVX2 as above plus AVX512 F, BW and VL, with opmask and ZMM state enabled. */
static bool detect_avx512(void)
{
    if (!detect_avx2()) return false;
    unsigned a, b, c, d, xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    if ((xlo & 0xe6u) != 0xe6u) return false; /* XMM, YMM, opmask, ZMM_Hi256, Hi16_ZMM */
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned need = (1u << 16) | (1u << 30) | (1u << 31); /* avx512f avx512bw avx512vl */
    return (b & need) == need;
}

/* detect() run once and its answer kept in *cached (0 unknown, 1 no, 2 yes). */
static bool cpu_has_cached(_Atomic int *cached, bool (*detect)(void))
{
    int v = atomic_load_explicit(cached, memory_order_relaxed);
    if (!v) {
        v = detect() ? 2 : 1;
        atomic_store_explicit(cached, v, memory_order_relaxed);
    }
    return v == 2;
}

bool mz_codec_cpu_has_avx2(void)
{
    static _Atomic int cached;
    return cpu_has_cached(&cached, detect_avx2);
}

bool mz_codec_cpu_has_avx512(void)
{
    static _Atomic int cached;
    return cpu_has_cached(&cached, detect_avx512);
}
#endif

/* The best kernels this CPU and build have, lowered as the compute kernels
 * are by MZ_KERNELS (scalar/ref: scalar; avx2: no AVX-512), so that a
 * forced-AVX2 run on an AVX-512 machine stands for an AVX2-only one. */
static int q8_env_limit(void) /* 0: none, 1: no AVX-512, 2: scalar; read once */
{
    static atomic_int limit = -1;
    int v = atomic_load_explicit(&limit, memory_order_relaxed);
    if (v < 0) {
        const char *env = getenv("MZ_KERNELS");
        v = !env ? 0 : !strcmp(env, "ref") || !strcmp(env, "scalar") ? 2 : !strcmp(env, "avx2");
        atomic_store_explicit(&limit, v, memory_order_relaxed);
    }
    return v;
}

static enum q8_isa q8_isa_best(void)
{
    const int lim = q8_env_limit();
    if (lim == 2) return Q8_SCALAR;
    const bool no512 = lim == 1;
#if defined(MZ_CODEC_HAVE_AVX512_FILE)
    if (!no512 && mz_codec_cpu_has_avx512()) return Q8_AVX512;
#else
    (void)no512;
#endif
#if defined(MZ_CODEC_HAVE_AVX2_FILE)
    if (mz_codec_cpu_has_avx2()) return Q8_AVX2;
#elif defined(__ARM_NEON) && defined(__aarch64__)
    return Q8_NEON;
#endif
    return Q8_SCALAR;
}

/* The kernels to use now: the best ones, or the test hook's choice. */
static enum q8_isa q8_isa_now(void)
{
    int cap = atomic_load_explicit(&g_isa_cap, memory_order_relaxed);
    return cap == Q8_BEST ? q8_isa_best() : (enum q8_isa)cap;
}

const char *mz_q8_isa(void) { return q8_isa_names[q8_isa_now()]; }

bool mz_q8_force_isa(const char *isa)
{
    int want = Q8_BEST;
    if (isa && strcmp(isa, "best") != 0) {
        want = -1;
        for (int i = 0; i < (int)MZ_ARRAY_LEN(q8_isa_names); i++)
            if (!strcmp(isa, q8_isa_names[i])) want = i;
        if (want < 0) return false;
        enum q8_isa best = q8_isa_best();
        bool ok = want == Q8_SCALAR || want == (int)best ||
                  (want == Q8_AVX2 && best == Q8_AVX512); /* AVX-512 CPUs have AVX2 */
        if (!ok) return false;
    }
    atomic_store_explicit(&g_isa_cap, want, memory_order_relaxed);
    return true;
}

void mz_q8_force_scalar(bool on) { (void)mz_q8_force_isa(on ? "scalar" : NULL); }

/* ---- validation and decode --------------------------------------------------- */

/* The MZ_E_FORMAT of group g, whose header (at p) is invalid. */
static mz_status group_fail(const quant_fmt *f, const uint8_t *p, uint64_t g)
{
    unsigned mn = mz_get_le16(p), mx = mz_get_le16(p + 2);
    if ((mn & 0x7c00u) == 0x7c00u || (mx & 0x7c00u) == 0x7c00u)
        return mz_fail(MZ_E_FORMAT, "%s blob: group %llu has a non-finite min/max "
                       "(0x%04x, 0x%04x)", f->name, (unsigned long long)g, mn, mx);
    return mz_fail(MZ_E_FORMAT, "%s blob: group %llu has max < min (0x%04x < 0x%04x)", f->name,
                   (unsigned long long)g, mx, mn);
}

/* Header and exact length; for q4 also the unused high nibble of an odd
 * count's last byte, which must be 0 (so every blob decodes from exactly one
 * encoding). */
static mz_status fmt_parse(const quant_fmt *f, const uint8_t *src, size_t len, unsigned *group,
                           uint64_t *n)
{
    mz_status st = mz_codec_header_parse(f->name, src, len, f->magic, f->payload, group, n);
    if (st != MZ_OK) return st;
    if (f->top == 15 && (*n & 1) && (src[len - 1] & 0xf0u))
        return mz_fail(MZ_E_FORMAT, "%s blob: padding nibble of the last byte is 0x%x, not 0",
                       f->name, src[len - 1] >> 4);
    return MZ_OK;
}

/* peek: fmt_parse and every group's min/max (decode checks the groups as it
 * goes). */
static mz_status fmt_peek(const quant_fmt *f, const uint8_t *src, size_t len, size_t *n_values)
{
    unsigned group;
    uint64_t n;
    mz_status st = fmt_parse(f, src, len, &group, &n);
    if (st != MZ_OK) return st;
    const uint8_t *p = src + MZ_CODEC_HEADER_BYTES;
    for (uint64_t i0 = 0, g = 0; i0 < n; i0 += group, g++) {
        float mn, mx;
        if (!group_header(p, &mn, &mx)) return group_fail(f, p, g);
        p += group_bytes(f, (size_t)MZ_MIN((uint64_t)group, n - i0));
    }
    *n_values = (size_t)n;
    return MZ_OK;
}

/* Destinations at least this large are written with streaming stores by the
 * AVX-512 kernels (when 64-byte aligned): a restore decodes whole chunks into
 * fresh pages, which the stores would otherwise first read for ownership,
 * and a chunk this size would push other data out of L1/L2 anyway. */
#define Q8_STREAM_MIN_BYTES (256u << 10)

/* The groups decoded by the kernels of isa for top code `top`. */
static size_t decode_groups(unsigned top, enum q8_isa isa, const uint8_t *payload, size_t n,
                            unsigned group, mz_f16 *dst)
{
    const bool q4 = top == 15;
    switch (isa) {
#if defined(MZ_CODEC_HAVE_AVX512_FILE)
    case Q8_AVX512: {
        const bool stream = n * sizeof *dst >= Q8_STREAM_MIN_BYTES;
        return q4 ? mz_q4_decode_groups_avx512(payload, n, group, dst, stream)
                  : mz_q8_decode_groups_avx512(payload, n, group, dst, stream);
    }
#endif
#if defined(MZ_CODEC_HAVE_AVX2_FILE)
    case Q8_AVX2:
        return q4 ? mz_q4_decode_groups_avx2(payload, n, group, dst)
                  : mz_q8_decode_groups_avx2(payload, n, group, dst);
#endif
#if defined(__ARM_NEON) && defined(__aarch64__)
    case Q8_NEON: return decode_groups_neon(top, payload, n, group, dst);
#endif
    default: break;
    }
    return q4 ? mz_q4_decode_groups_ref(payload, n, group, dst)
              : mz_q8_decode_groups_ref(payload, n, group, dst);
}

/* Where values [v0, v0 + k) of a parsed blob of n values in groups of
 * `group` start in its payload, when they are whole groups (k may end the
 * blob); else MZ_E_RANGE. */
static mz_status fmt_range(const quant_fmt *f, const uint8_t *src, unsigned group, uint64_t n, size_t v0,
                           size_t k, const uint8_t **at)
{
    if (v0 > n || k > n - v0 || (v0 % group && v0 != n) || (k % group && v0 + k != n))
        return mz_fail(MZ_E_RANGE, "%s blob: values %zu..%zu of %llu are not whole groups of %u", f->name, v0,
                       v0 + k, (unsigned long long)n, group);
    *at = src + MZ_CODEC_HEADER_BYTES + v0 / group * group_bytes(f, group);
    return MZ_OK;
}

/* decode_range of q8 and q4: the groups of the range, by the kernels of a
 * whole decode (each group decodes alone, so the bits are a whole decode's
 * slice). */
static mz_status fmt_decode_range(const quant_fmt *f, const uint8_t *src, size_t len, size_t n_want, size_t v0,
                                  mz_f16 *dst, size_t k, enum q8_isa isa)
{
    unsigned group;
    uint64_t n;
    const uint8_t *at = NULL;
    mz_status st = fmt_parse(f, src, len, &group, &n);
    if (st != MZ_OK) return st;
    if (n != n_want)
        return mz_fail(MZ_E_FORMAT, "%s blob: holds %llu values, caller expects %zu", f->name,
                       (unsigned long long)n, n_want);
    if ((st = fmt_range(f, src, group, n, v0, k, &at))) return st;
    const size_t n_groups = (k + group - 1) / group;
    const size_t done = decode_groups(f->top, isa, at, k, group, dst);
    if (done < n_groups) return group_fail(f, at + done * group_bytes(f, group), v0 / group + done);
    return MZ_OK;
}

/* A whole blob: the range of all its values. */
static mz_status fmt_decode(const quant_fmt *f, const uint8_t *src, size_t len, mz_f16 *dst, size_t n_want,
                            enum q8_isa isa)
{
    return fmt_decode_range(f, src, len, n_want, 0, dst, n_want, isa);
}

/* ---- encode ---------------------------------------------------------------- */

static inline float grid_dec(const mz_quant_grid *g, unsigned q)
{
    return dec_val(g->mn, g->mx, g->step, g->top, q);
}

/* Smallest q in [0, top] with dec(q) >= t, or top + 1 if none; guess is a hint.
 * Gallops from the guess, then bisects, so a good guess costs two decodes. */
static unsigned first_ge(const mz_quant_grid *g, float t, unsigned guess)
{
    unsigned lo, hi;
    if (grid_dec(g, guess) >= t) {
        hi = guess;
        lo = 0;
        for (unsigned step = 1; hi >= step; step <<= 1) {
            unsigned c = hi - step;
            if (grid_dec(g, c) >= t) {
                hi = c;
            } else {
                lo = c + 1;
                break;
            }
        }
    } else {
        lo = guess + 1;
        hi = g->top + 1;
        for (unsigned step = 1; guess + step <= g->top; step <<= 1) {
            unsigned c = guess + step;
            if (grid_dec(g, c) >= t) {
                hi = c;
                break;
            }
            lo = c + 1;
        }
    }
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        if (grid_dec(g, mid) >= t)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Smallest q whose dec(q) is nearest x (min <= x <= max); ties to the lower value. */
unsigned mz_quant_code_ref(const mz_quant_grid *g, float x)
{
    unsigned guess = 0;
    float t = (x - g->mn) * g->inv_step;
    if (t >= (float)g->top)
        guess = g->top;
    else if (t > 0.0f)
        guess = (unsigned)ceilf(t);
    /* Fast path: the guess brackets x and the lower neighbour starts its plateau. */
    if (guess >= 1) {
        float vhi = grid_dec(g, guess), vlo = grid_dec(g, guess - 1);
        if (vlo < x && x <= vhi) {
            if ((double)vhi - (double)x < (double)x - (double)vlo) return guess;
            if (guess == 1 || grid_dec(g, guess - 2) < vlo) return guess - 1;
        }
    } else if (grid_dec(g, 0) >= x) {
        return 0;
    }
    unsigned hi = first_ge(g, x, guess);
    if (hi == 0) return 0;
    if (hi > g->top) hi = g->top; /* cannot happen: dec(top) = max >= x */
    float vlo = grid_dec(g, hi - 1), vhi = grid_dec(g, hi);
    if ((double)vhi - (double)x < (double)x - (double)vlo) return hi;
    return first_ge(g, vlo, hi - 1);
}

/* Min and max of the k >= 1 values x (the scalar encoders' group header). */
static void minmax_ref(const mz_f16 *x, size_t k, float *mn_out, float *mx_out)
{
    float mn = mz_half_to_float(x[0]), mx = mn;
    for (size_t j = 1; j < k; j++) {
        float v = mz_half_to_float(x[j]);
        if (v < mn) mn = v;
        if (v > mx) mx = v;
    }
    *mn_out = mn;
    *mx_out = mx;
}

typedef void minmax_fn(const mz_f16 *x, size_t k, float *mn, float *mx);

/* Opens the group of the k values x: their min and max (by minmax; any zero
 * sign), written as the header at out, and the grid of the top code in g.
 * Returns where the group's codes go. */
static inline __attribute__((always_inline)) uint8_t *group_start(const mz_f16 *x, size_t k, unsigned top,
                                                                  minmax_fn *minmax, uint8_t *out,
                                                                  mz_quant_grid *g)
{
    float mn, mx;
    minmax(x, k, &mn, &mx);
    if (mn == 0.0f) mn = 0.0f; /* canonical +0 */
    if (mx == 0.0f) mx = 0.0f;
    *g = (mz_quant_grid){.mn = mn, .mx = mx, .step = mz_quant_step(mn, mx, top), .top = top};
    g->inv_step = g->step > 0.0f ? 1.0f / g->step : 0.0f;
    mz_put_le16(out, mz_float_to_half(mn));
    mz_put_le16(out + 2, mz_float_to_half(mx));
    return out + 4;
}

/* Index of the first inf or NaN in src[0..n), or n. */
static size_t first_nonfinite(const mz_f16 *src, size_t n)
{
    size_t i = 0;
    for (; i < n; i++)
        if ((src[i] & 0x7c00u) == 0x7c00u) break;
    return i;
}

/* The scalar encode of q8 (top 255) or q4 (top 15) groups; returns n, or
 * the index of the first inf or NaN (nothing written then). Inlined into each
 * wrapper with top constant. */
static inline size_t encode_groups_ref(unsigned top, const mz_f16 *src, size_t n, unsigned group,
                                       uint8_t *payload)
{
    size_t bad = first_nonfinite(src, n);
    if (bad < n) return bad;
    for (size_t i0 = 0; i0 < n; i0 += group) {
        size_t k = MZ_MIN((size_t)group, n - i0);
        const mz_f16 *x = src + i0;
        mz_quant_grid g;
        uint8_t *q = group_start(x, k, top, minmax_ref, payload, &g);
        if (top == 15)
            for (size_t j = 0; j < k; j += 2) {
                unsigned lo = mz_quant_code_ref(&g, mz_half_to_float(x[j]));
                unsigned hi = j + 1 < k ? mz_quant_code_ref(&g, mz_half_to_float(x[j + 1])) : 0;
                q[j / 2] = (uint8_t)(lo | hi << 4);
            }
        else
            for (size_t j = 0; j < k; j++) q[j] = (uint8_t)mz_quant_code_ref(&g, mz_half_to_float(x[j]));
        payload += 4 + (top == 15 ? (k + 1) / 2 : k);
    }
    return n;
}

#if defined(MZ_CODEC_HAVE_AVX2_FILE)
/* AVX2, q8 (top 255) or q4 (top 15): min/max and most codes eight at a
 * time, the rest scalar; q4's codes are then packed two a byte. */
static size_t encode_groups_avx2(const mz_f16 *src, size_t n, unsigned group, unsigned top,
                                 uint8_t *payload)
{
    size_t bad = first_nonfinite(src, n);
    if (bad < n) return bad;
    const bool nibbles = top == 15;
    for (size_t i0 = 0; i0 < n; i0 += group) {
        size_t k = MZ_MIN((size_t)group, n - i0);
        const mz_f16 *x = src + i0;
        mz_quant_grid g;
        uint8_t *q = group_start(x, k, top, mz_q8_minmax_avx2, payload, &g);
        uint8_t unres[256], c4[256];
        for (size_t j0 = 0; j0 < k; j0 += sizeof unres) { /* j0 even: a byte boundary for q4 */
            size_t kk = MZ_MIN(sizeof unres, k - j0);
            uint8_t *c = nibbles ? c4 : q + j0;
            if (mz_quant_codes_avx2(x + j0, kk, g.mn, g.mx, g.step, g.inv_step, top, c, unres) != 0)
                for (size_t j = 0; j < kk; j++)
                    if (unres[j]) c[j] = (uint8_t)mz_quant_code_ref(&g, mz_half_to_float(x[j0 + j]));
            if (nibbles)
                for (size_t j = 0; j < kk; j += 2)
                    q[(j0 + j) / 2] = (uint8_t)(c[j] | (j + 1 < kk ? c[j + 1] : 0u) << 4);
        }
        payload += 4 + (nibbles ? (k + 1) / 2 : k);
    }
    return n;
}
#endif

/* The groups encoded by the kernels of isa for top code `top`: n, or the
 * index of the first inf/NaN. */
static size_t encode_groups(unsigned top, enum q8_isa isa, const mz_f16 *src, size_t n,
                            unsigned group, uint8_t *payload)
{
    const bool q4 = top == 15;
    switch (isa) {
#if defined(MZ_CODEC_HAVE_AVX512_FILE)
    case Q8_AVX512:
        return q4 ? mz_q4_encode_groups_avx512(src, n, group, payload)
                  : mz_q8_encode_groups_avx512(src, n, group, payload);
#endif
#if defined(MZ_CODEC_HAVE_AVX2_FILE)
    case Q8_AVX2: return encode_groups_avx2(src, n, group, top, payload);
#endif
    default: break;
    }
    return q4 ? mz_q4_encode_groups_ref(src, n, group, payload)
              : mz_q8_encode_groups_ref(src, n, group, payload);
}

static mz_status fmt_encode(const quant_fmt *f, unsigned group, const mz_f16 *src, size_t n,
                            uint8_t *dst, size_t dst_cap, size_t *n_written)
{
    size_t need = fmt_bound(f, group, n), group_ok;
    *n_written = 0;
    MZ_ASSERT(f->payload(group, 0, &group_ok)); /* the vtable's or the constructor's group */
    if (need == 0) return mz_fail(MZ_E_RANGE, "%s encode: %zu values is too many", f->name, n);
    if (dst_cap < need)
        return mz_fail(MZ_E_RANGE, "%s encode: need %zu bytes, have %zu", f->name, need, dst_cap);
    mz_codec_header_write(dst, f->magic, group, n);
    size_t done = encode_groups(f->top, q8_isa_now(), src, n, group, dst + MZ_CODEC_HEADER_BYTES);
    if (done < n)
        return mz_fail(MZ_E_FORMAT, "%s encode: value %zu is %s (0x%04x); use the raw codec",
                       f->name, done, (src[done] & 0x3ffu) ? "NaN" : "infinite", src[done]);
    *n_written = need;
    return MZ_OK;
}

/* ---- vtables ------------------------------------------------------------------ */

/* A codec's vtable initializer from its functions p_bound, p_encode, p_decode
 * and p_peek. */
#define FMT_VT(p, nm, g)                                                               \
    {                                                                                  \
        .name = nm, .param = g, .bound = p##_bound, .encode = p##_encode,              \
        .decode = p##_decode, .peek = p##_peek, .decode_range = p##_decode_range,      \
        .range_unit = g                                                                \
    }

/* The entry points of the group codec on quant_fmt FMT: p_bound, p_peek,
 * p_decode and p_encode (kernels of the ISA now allowed) for its vtable, and
 * the scalar references of codec.h: mz_<p>_decode_ref,
 * mz_<p>_decode_groups_ref and mz_<p>_encode_groups_ref (FMT.top is a
 * constant there, so each gets its own copy of the group loops). */
#define FMT_CODEC(p, FMT)                                                                          \
    size_t mz_##p##_decode_groups_ref(const uint8_t *payload, size_t n, unsigned group, mz_f16 *dst) \
    {                                                                                              \
        return decode_groups_ref(FMT.top, payload, n, group, dst);                                 \
    }                                                                                              \
    size_t mz_##p##_encode_groups_ref(const mz_f16 *src, size_t n, unsigned group, uint8_t *payload) \
    {                                                                                              \
        return encode_groups_ref(FMT.top, src, n, group, payload);                                 \
    }                                                                                              \
    static size_t p##_bound(const mz_codec *c, size_t n) { return fmt_bound(&FMT, c->param, n); } \
    static mz_status p##_peek(const mz_codec *c, const uint8_t *src, size_t len, size_t *n_values) \
    {                                                                                              \
        (void)c;                                                                                   \
        return fmt_peek(&FMT, src, len, n_values);                                                 \
    }                                                                                              \
    mz_status mz_##p##_decode_ref(const uint8_t *src, size_t len, mz_f16 *dst, size_t n)           \
    {                                                                                              \
        return fmt_decode(&FMT, src, len, dst, n, Q8_SCALAR);                                      \
    }                                                                                              \
    static mz_status p##_decode(const mz_codec *c, const uint8_t *src, size_t len, mz_f16 *dst,    \
                                size_t n)                                                          \
    {                                                                                              \
        (void)c;                                                                                   \
        return fmt_decode(&FMT, src, len, dst, n, q8_isa_now());                                   \
    }                                                                                              \
    static mz_status p##_decode_range(const mz_codec *c, const uint8_t *src, size_t len, size_t n,  \
                                      size_t v0, mz_f16 *dst, size_t k)                            \
    {                                                                                              \
        (void)c;                                                                                   \
        return fmt_decode_range(&FMT, src, len, n, v0, dst, k, q8_isa_now());                      \
    }                                                                                              \
    static mz_status p##_encode(const mz_codec *c, const mz_f16 *src, size_t n, uint8_t *dst,      \
                                size_t dst_cap, size_t *n_written)                                 \
    {                                                                                              \
        return fmt_encode(&FMT, c->param, src, n, dst, dst_cap, n_written);                        \
    }                                                                                              \
    const mz_codec mz_codec_##p##_g64_vt = FMT_VT(p, #p, 64);                                      \
    const mz_codec mz_codec_##p##_g32_vt = FMT_VT(p, #p "-g32", 32);                               \
    const mz_codec mz_codec_##p##_g128_vt = FMT_VT(p, #p "-g128", 128);                            \
    mz_codec mz_codec_##p(unsigned group)                                                          \
    {                                                                                              \
        size_t unused;                                                                             \
        MZ_ASSERT(FMT.payload(group, 0, &unused));                                                 \
        return (mz_codec)FMT_VT(p, #p, group);                                                     \
    }

/* q8: mz_codec_q8_g64_vt, _g32_vt, _g128_vt and mz_codec_q8(group). */
FMT_CODEC(q8, Q8_FMT)

/* ---- q4 ----------------------------------------------------------------------- */

#define Q4_MAGIC 0x34515a4du /* "MZQ4" */

/* Payload of n values in groups of G (even): 4 header bytes per group and
 * ceil(n / 2) code bytes (every group but the last has G / 2; an even G keeps
 * each group byte-aligned). */
static bool q4_payload(unsigned group, uint64_t n, size_t *payload)
{
    if (group < 2 || group > MZ_Q4_GROUP_MAX || group % 2 || n > SIZE_MAX / 8) return false;
    uint64_t n_groups = (n + group - 1) / group;
    *payload = (size_t)(n_groups * 4 + (n + 1) / 2);
    return true;
}

static const quant_fmt Q4_FMT = {"q4", Q4_MAGIC, 15, q4_payload};

/* q4: mz_codec_q4_g64_vt, _g32_vt, _g128_vt and mz_codec_q4(group). */
FMT_CODEC(q4, Q4_FMT)

/* ---- q4r: q4 of rotated rows -------------------------------------------------- */

/* q4r blob: header magic "MZQR", param = d (a power of two, 2 ..
 * MZ_ROT_DIM_MAX), then exactly q4's payload with G = d: group r holds row
 * r of the input, values r·d .. r·d + d − 1, rotated (codec_rot.c: sign
 * flip, normalized Walsh–Hadamard, RNE to f16) before q4 quantizes it; a
 * last group of n mod d values, if any, holds them unrotated. Decode is q4's
 * decode followed by the inverse rotation of every full row.
 *
 * Why: q4 spends its 15 steps on a group's range, and one outlier channel
 * of a K head (a few channels of K are 10–50× the others) stretches that
 * range for the whole row; the rotation spreads it over the row, so the
 * rotated values are close to Gaussian and the range shrinks relative to
 * the typical value. In the KV chunk layout a row of head_dim values is one
 * head of one token, so the rotation never mixes tokens or heads.
 *
 * Costs and limits: rotated values can reach sqrt(d)·max|x|, so a row whose
 * rotation leaves the f16 range is refused (MZ_E_FORMAT, as inf/NaN input:
 * the caller keeps the raw chunk). decode(encode(x)) is the same bits from
 * every kernel set, but the codec is not idempotent bit for bit as q8 and q4
 * are: the inverse rotation rounds to f16 again, so re-encoding a decoded
 * row can move a group's min/max (and rarely a code) by an f16 ulp. */

#define Q4R_MAGIC 0x52515a4du /* "MZQR" */
#define ROT_BATCH 4096u        /* values rotated per step: 8 KiB of stack, L1-resident */

static bool q4r_payload(unsigned d, uint64_t n, size_t *payload)
{
    if (d < 2 || d > MZ_ROT_DIM_MAX || (d & (d - 1))) return false;
    return q4_payload(d, n, payload);
}

static const quant_fmt Q4R_FMT = {"q4r", Q4R_MAGIC, 15, q4r_payload};

static size_t q4r_bound(const mz_codec *c, size_t n) { return fmt_bound(&Q4R_FMT, c->param, n); }

/* rows rows of d values rotated (or back) by the kernels of isa. */
static void rot_rows(enum q8_isa isa, const mz_f16 *src, mz_f16 *dst, size_t rows, unsigned d,
                     const uint32_t *signs, bool inverse)
{
    switch (isa) {
#if defined(MZ_CODEC_HAVE_AVX512_FILE)
    case Q8_AVX512: mz_rot_rows_avx512(src, dst, rows, d, signs, inverse); return;
#endif
#if defined(MZ_CODEC_HAVE_AVX2_FILE)
    case Q8_AVX2: mz_rot_rows_avx2(src, dst, rows, d, signs, inverse); return;
#endif
#if defined(__ARM_NEON) && defined(__aarch64__)
    case Q8_NEON: mz_rot_rows_neon(src, dst, rows, d, signs, inverse); return;
#endif
    default: mz_rot_rows_ref(src, dst, rows, d, signs, inverse); return;
    }
}

static mz_status q4r_encode_isa(unsigned d, enum q8_isa isa, const mz_f16 *src, size_t n,
                                uint8_t *dst, size_t dst_cap, size_t *n_written)
{
    size_t need = fmt_bound(&Q4R_FMT, d, n), d_ok;
    *n_written = 0;
    MZ_ASSERT(q4r_payload(d, 0, &d_ok)); /* the vtable's or the constructor's d */
    if (need == 0) return mz_fail(MZ_E_RANGE, "q4r encode: %zu values is too many", n);
    if (dst_cap < need)
        return mz_fail(MZ_E_RANGE, "q4r encode: need %zu bytes, have %zu", need, dst_cap);
    size_t bad = first_nonfinite(src, n);
    if (bad < n)
        return mz_fail(MZ_E_FORMAT, "q4r encode: value %zu is %s (0x%04x); use the raw codec",
                       bad, (src[bad] & 0x3ffu) ? "NaN" : "infinite", src[bad]);
    mz_codec_header_write(dst, Q4R_MAGIC, d, n);
    uint32_t signs[MZ_ROT_DIM_MAX];
    mz_f16 rot[ROT_BATCH];
    mz_rot_signs(d, signs);
    const size_t per = ROT_BATCH / d, rows = n / d, gb = group_bytes(&Q4R_FMT, d);
    uint8_t *payload = dst + MZ_CODEC_HEADER_BYTES;
    for (size_t r0 = 0; r0 < rows; r0 += per) {
        size_t k = MZ_MIN(per, rows - r0);
        rot_rows(isa, src + r0 * d, rot, k, d, signs, false);
        size_t done = encode_groups(15, isa, rot, k * d, d, payload + r0 * gb);
        if (done < k * d)
            return mz_fail(MZ_E_FORMAT, "q4r encode: row %zu leaves the f16 range when rotated; "
                           "use the raw codec", r0 + done / d);
    }
    if (n % d) (void)encode_groups(15, isa, src + rows * d, n % d, d, payload + rows * gb);
    *n_written = need;
    return MZ_OK;
}

static mz_status q4r_decode_isa(enum q8_isa isa, const uint8_t *src, size_t len, mz_f16 *dst,
                                size_t n_want)
{
    unsigned d;
    uint64_t n;
    mz_status st = fmt_parse(&Q4R_FMT, src, len, &d, &n);
    if (st != MZ_OK) return st;
    if (n != n_want)
        return mz_fail(MZ_E_FORMAT, "q4r blob: holds %llu values, caller expects %zu",
                       (unsigned long long)n, n_want);
    uint32_t signs[MZ_ROT_DIM_MAX];
    mz_rot_signs(d, signs);
    const size_t per = ROT_BATCH / d, rows = (size_t)n / d, gb = group_bytes(&Q4R_FMT, d);
    const uint8_t *payload = src + MZ_CODEC_HEADER_BYTES;
    /* a batch at a time, so the rotation finds the decoded rows in L1 */
    for (size_t r0 = 0; r0 < rows; r0 += per) {
        size_t k = MZ_MIN(per, rows - r0);
        size_t done = decode_groups(15, isa, payload + r0 * gb, k * d, d, dst + r0 * d);
        if (done < k) return group_fail(&Q4R_FMT, payload + (r0 + done) * gb, r0 + done);
        rot_rows(isa, dst + r0 * d, dst + r0 * d, k, d, signs, true);
    }
    if (n % d && decode_groups(15, isa, payload + rows * gb, (size_t)n % d, d, dst + rows * d) == 0)
        return group_fail(&Q4R_FMT, payload + rows * gb, rows);
    return MZ_OK;
}

mz_status mz_q4r_encode_ref(unsigned d, const mz_f16 *src, size_t n, uint8_t *dst, size_t dst_cap,
                            size_t *n_written)
{
    return q4r_encode_isa(d, Q8_SCALAR, src, n, dst, dst_cap, n_written);
}

mz_status mz_q4r_decode_ref(const uint8_t *src, size_t len, mz_f16 *dst, size_t n)
{
    return q4r_decode_isa(Q8_SCALAR, src, len, dst, n);
}

static mz_status q4r_encode(const mz_codec *c, const mz_f16 *src, size_t n, uint8_t *dst,
                            size_t dst_cap, size_t *n_written)
{
    return q4r_encode_isa(c->param, q8_isa_now(), src, n, dst, dst_cap, n_written);
}

static mz_status q4r_decode(const mz_codec *c, const uint8_t *src, size_t len, mz_f16 *dst,
                            size_t n)
{
    return q4r_decode_isa(q8_isa_now(), src, len, dst, n);
}

/* Whole rows of the range, then their inverse rotation (a last group of
 * n mod d values stays unrotated, as in a whole decode). */
static mz_status q4r_decode_range(const mz_codec *c, const uint8_t *src, size_t len, size_t n, size_t v0,
                                  mz_f16 *dst, size_t k)
{
    (void)c;
    const enum q8_isa isa = q8_isa_now();
    mz_status st = fmt_decode_range(&Q4R_FMT, src, len, n, v0, dst, k, isa);
    if (st) return st;
    const unsigned d = mz_get_le16(src + 6); /* the header's param, checked by the parse */
    uint32_t signs[MZ_ROT_DIM_MAX];
    mz_rot_signs(d, signs);
    rot_rows(isa, dst, dst, k / d, d, signs, true);
    return MZ_OK;
}

static mz_status q4r_peek(const mz_codec *c, const uint8_t *src, size_t len, size_t *n_values)
{
    return fmt_peek(&Q4R_FMT, src, len, n_values);
}

#define Q4R_VT(nm, d) FMT_VT(q4r, nm, d)

const mz_codec mz_codec_q4r_vt = Q4R_VT("q4r", 64);

mz_codec mz_codec_q4r(unsigned d)
{
    size_t unused;
    MZ_ASSERT(q4r_payload(d, 0, &unused));
    mz_codec c = Q4R_VT("q4r", d);
    return c;
}
