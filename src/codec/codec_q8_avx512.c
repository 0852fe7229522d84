/*
 * codec_q8_avx512.c — AVX-512 (F, BW, VL) decode and encode kernels for the
 * q8 and q4 codecs (top code L = 255 / 15; q4 decodes by a per-group table
 * of the same arithmetic's results, and packs two codes a byte after the
 * same code search), 16 lanes at a time (compiled with the -mavx512* flags of every
 * *_avx512.c file; called only after mz_codec_cpu_has_avx512()). Nothing
 * here needs AVX512-FP16: vcvtps2ph / vcvtph2ps on zmm are AVX512F.
 *
 * Decode: the arithmetic of mz_q8_decode_groups_ref lane by lane, as in
 * codec_q8_avx2.c: f32(q) * step + min (one FMA: q * step is exact, so fused
 * or not gives the same f32), "v > max ? max : v" as min_ps(max, v) (which
 * returns v on equality, so signed zeros match), code L → max, vcvtps2ph
 * with RNE. Each group's min/max is checked just before the group is decoded
 * (no separate validation pass). With stream set, 64-byte output lines go
 * out as non-temporal stores: a restore writes 1 MiB chunks into freshly
 * mapped pages nobody reads soon, and streaming them skips the read-for-
 * ownership of every line (about 1.5x the store bandwidth to DRAM here).
 *
 * Encode: per group, one pass for min/max (and inf/NaN), then per 16 values
 *   g  = ceil((m - min) / step), m = the midpoint between x and the next f16
 *        value below it: the f32 points at or above m round to x or above,
 *        so g is the first code with dec(g) >= x unless a rounding error or
 *        a plateau says otherwise;
 *   dec(g - 2), dec(g - 1), dec(g) computed exactly as the decoder does;
 *   settled when dec(g-1) < x <= dec(g) (then g is the first code >= x): the
 *   code is g if dec(g) is strictly nearer, else g - 1 provided it starts
 *   its plateau (g == 1 or dec(g-2) < dec(g-1)); g == 0 settles iff x == min.
 * "Strictly nearer" is decided in f32 (the rounded differences order the
 * exact ones except when they come out equal) and, for lanes where they do,
 * exactly in f64. Lanes not settled (true plateaus, the rare off-by-one
 * guess) take the scalar mz_quant_code_ref. Same bytes as the scalar encoder
 * (tests/unit/test_codec.c, tests/fuzz/fuzz_codec.c). g is capped at L;
 * the arguments for the strict-grid and exact-difference fast paths (at
 * codes16 and codes16_strict) hold for any L <= 255.
 */
#include "codec.h"
#include "codec_f16.h"

#include <math.h>
#include <string.h>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__F16C__)
#include "codec_q8_x86.h"

#define RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)


static inline __mmask16 tail_mask(size_t k) { return (__mmask16)((1u << k) - 1u); } /* k < 16 */

/* ---- decode ---------------------------------------------------------------- */

/* dec() of the 16 codes in q (one per byte) as f16 bits, top code `top`
 * (255: q8, 15: q4). */
static inline __m256i dec16(__m128i q, __m512 vmn, __m512 vmx, __m512 vstep, int top)
{
    __m512i qi = _mm512_cvtepu8_epi32(q);
    __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(qi), vstep, vmn);
    v = _mm512_min_ps(vmx, v); /* v > max ? max : v */
    v = _mm512_mask_mov_ps(v, _mm512_cmpeq_epi32_mask(qi, _mm512_set1_epi32(top)), vmx);
    return _mm512_cvtps_ph(v, RNE);
}

static inline __m128i load16(const uint8_t *q) { return _mm_loadu_si128((const __m128i *)(const void *)q); }

/* Whether a decode asked to stream may: only when every group starts a
 * 64-byte line (groups of a multiple of 32 values, dst 64-byte aligned). */
static inline bool stream_ok(bool stream, unsigned group, const mz_f16 *dst)
{
    return stream && group % 32 == 0 && ((uintptr_t)(const void *)dst & 63) == 0;
}

size_t mz_q8_decode_groups_avx512(const uint8_t *payload, size_t n, unsigned group, mz_f16 *dst,
                                  bool stream)
{
    size_t g = 0;
    stream = stream_ok(stream, group, dst);
    for (size_t i0 = 0; i0 < n; i0 += group, g++) {
        size_t k = n - i0 < group ? n - i0 : group;
        float mn, mx, step;
        if (!group_header(payload, 255, &mn, &mx, &step)) break;
        const __m512 vmn = _mm512_set1_ps(mn), vmx = _mm512_set1_ps(mx), vstep = _mm512_set1_ps(step);
        const uint8_t *q = payload + 4;
        mz_f16 *out = dst + i0;
        size_t j = 0;
        if (stream) {
            /* every group starts a 64-byte line; only the last may end mid-line */
            for (; j + 32 <= k; j += 32) {
                __m256i a = dec16(load16(q + j), vmn, vmx, vstep, 255);
                __m256i b = dec16(load16(q + j + 16), vmn, vmx, vstep, 255);
                _mm512_stream_si512((void *)(out + j), _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1));
            }
        }
        for (; j + 16 <= k; j += 16)
            _mm256_storeu_si256((__m256i *)(void *)(out + j), dec16(load16(q + j), vmn, vmx, vstep, 255));
        if (j < k) {
            __mmask16 m = tail_mask(k - j);
            _mm256_mask_storeu_epi16(out + j, m, dec16(_mm_maskz_loadu_epi8(m, q + j), vmn, vmx, vstep, 255));
        }
        payload += 4 + k;
    }
    _mm_sfence(); /* order the streamed lines before whoever reads dst next */
    return g;
}

/* The 32 4-bit codes of the 16 bytes b, one per byte in value order (value
 * 2i in the low nibble of byte i): *lo gets values 0..15, *hi 16..31. */
static inline void unpack_nibbles(__m128i b, __m128i *lo, __m128i *hi)
{
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m128i even = _mm_and_si128(b, m4), odd = _mm_and_si128(_mm_srli_epi16(b, 4), m4);
    *lo = _mm_unpacklo_epi8(even, odd);
    *hi = _mm_unpackhi_epi8(even, odd);
}

/* q4 decodes by table: a group has only 16 codes, so dec() of all of them
 * is computed once per group (dec16 of the codes 0..15: the same arithmetic,
 * hence the same bits) and every value is a 16-bit lookup (vpermw) of its
 * nibble, 32 values a step. */
size_t mz_q4_decode_groups_avx512(const uint8_t *payload, size_t n, unsigned group, mz_f16 *dst,
                                  bool stream)
{
    size_t g = 0;
    stream = stream_ok(stream, group, dst);
    const __m128i codes = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (size_t i0 = 0; i0 < n; i0 += group, g++) {
        size_t k = n - i0 < group ? n - i0 : group;
        float mn, mx, step;
        if (!group_header(payload, 15, &mn, &mx, &step)) break;
        __m256i dec = dec16(codes, _mm512_set1_ps(mn), _mm512_set1_ps(mx), _mm512_set1_ps(step), 15);
        const __m512i table = _mm512_inserti64x4(_mm512_setzero_si512(), dec, 0); /* lanes 0..15 */
        const uint8_t *q = payload + 4;
        mz_f16 *out = dst + i0;
        size_t j = 0;
        /* every group starts a 64-byte line when streaming (G a multiple of
         * 32, dst aligned) */
        for (; j + 32 <= k; j += 32) {
            __m128i lo, hi;
            unpack_nibbles(load16(q + j / 2), &lo, &hi);
            __m512i idx = _mm512_cvtepu8_epi16(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
            __m512i v = _mm512_permutexvar_epi16(idx, table);
            if (stream)
                _mm512_stream_si512((void *)(out + j), v);
            else
                _mm512_storeu_si512((void *)(out + j), v);
        }
        if (j < k) { /* 1..31 values in (k - j + 1) / 2 bytes */
            size_t left = k - j;
            __m128i lo, hi;
            unpack_nibbles(_mm_maskz_loadu_epi8(tail_mask((left + 1) / 2), q + j / 2), &lo, &hi);
            __m512i idx = _mm512_cvtepu8_epi16(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
            _mm512_mask_storeu_epi16(out + j, (__mmask32)((1u << left) - 1u),
                                     _mm512_permutexvar_epi16(idx, table));
        }
        payload += 4 + (k + 1) / 2;
    }
    _mm_sfence(); /* order the streamed lines before whoever reads dst next */
    return g;
}

/* ---- encode ---------------------------------------------------------------- */

/* dec(q) as floats for float codes q in [0, top - 1] (no top-code case). */
static inline __m512 grid_dec_lo(__m512 q, __m512 vmn, __m512 vmx, __m512 vstep)
{
    __m512 v = _mm512_min_ps(vmx, _mm512_fmadd_ps(q, vstep, vmn));
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, RNE));
}

/* (f64) hi - x < x - lo, exactly, for f16-valued lanes (differences of f16
 * values are exact in f64). */
static inline __mmask16 nearer_hi_f64(__m512 hi, __m512 lo, __m512 x)
{
    __mmask8 r[2];
    for (int h = 0; h < 2; h++) {
        __m256 h8 = h ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(hi), 1)) : _mm512_castps512_ps256(hi);
        __m256 l8 = h ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(lo), 1)) : _mm512_castps512_ps256(lo);
        __m256 x8 = h ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)) : _mm512_castps512_ps256(x);
        __m512d hd = _mm512_cvtps_pd(h8), ld = _mm512_cvtps_pd(l8), xd = _mm512_cvtps_pd(x8);
        r[h] = _mm512_cmp_pd_mask(_mm512_sub_pd(hd, xd), _mm512_sub_pd(xd, ld), _CMP_LT_OQ);
    }
    return (__mmask16)(r[0] | (unsigned)r[1] << 8);
}

/* The scalar search for the lanes in `open` (rare: kept out of line). */
static __attribute__((noinline)) void codes_scalar(const mz_f16 *xp, unsigned open,
                                                   const mz_quant_grid *gr, uint8_t *q)
{
    for (; open; open &= open - 1) {
        unsigned l = (unsigned)__builtin_ctz(open);
        q[l] = (uint8_t)mz_quant_code_ref(gr, _cvtsh_ss(xp[l]));
    }
}

/* Codes of the 16 values h (f16 bits of xp[0..16); lanes outside `valid`
 * ignored) into q[0..16) under `valid`, one per byte, for the top code in
 * vtop (255: q8, 15: q4); for grids that are not strict (see
 * codes16_strict), i.e. step < 2 ulp16(M), M = max(|min|, |max|). Such a
 * group spans less than 2 top ulp16(M) <= 510 ulp16(M) <= M / 2, so its
 * values all lie in
 * [M / 2, M] in magnitude with one sign (or are multiples of 2^-24 below
 * 2^-14): f32 differences of them are exact (Sterbenz) and equal
 * differences are true ties. */
static inline __attribute__((always_inline)) void codes16(__m256i h, const mz_f16 *xp, __mmask16 valid, const mz_quant_grid *gr, __m512 vmn,
                           __m512 vmx, __m512 vstep, __m512 vinv, __m512 vtop, uint8_t *q)
{
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    __m512 x = _mm512_cvtph_ps(h);
    /* the f16 value below x: bits - 1 when x > 0, bits + 1 when x < 0, -2^-24
     * for ±0; -65504 has none (capped at itself: x = min there) */
    __m256i pred = _mm256_sub_epi16(_mm256_sub_epi16(h, _mm256_set1_epi16(1)),
                                    _mm256_add_epi16(_mm256_srai_epi16(h, 15), _mm256_srai_epi16(h, 15)));
    pred = _mm256_mask_mov_epi16(pred, _mm256_cmpeq_epi16_mask(h, _mm256_setzero_si256()),
                                 _mm256_set1_epi16((short)0x8001));
    pred = _mm256_min_epu16(pred, _mm256_set1_epi16((short)0xfbff));
    __m512 m = _mm512_mul_ps(_mm512_add_ps(x, _mm512_cvtph_ps(pred)), _mm512_set1_ps(0.5f));
    __m512 t = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_sub_ps(m, vmn), vinv),
                                    _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
    __m512 g = _mm512_min_ps(_mm512_max_ps(t, zero), vtop);
    __m512 g1 = _mm512_max_ps(_mm512_sub_ps(g, one), zero);
    __m512 g2 = _mm512_max_ps(_mm512_sub_ps(g, _mm512_set1_ps(2.0f)), zero);

    __m512 vhi = _mm512_min_ps(vmx, _mm512_fmadd_ps(g, vstep, vmn));
    vhi = _mm512_mask_mov_ps(vhi, _mm512_cmp_ps_mask(g, vtop, _CMP_EQ_OQ), vmx);
    vhi = _mm512_cvtph_ps(_mm512_cvtps_ph(vhi, RNE));
    __m512 vlo = grid_dec_lo(g1, vmn, vmx, vstep);
    __m512 vlo2 = grid_dec_lo(g2, vmn, vmx, vstep);

    __mmask16 pos = _mm512_cmp_ps_mask(g, one, _CMP_GE_OQ);
    __mmask16 brk = pos & _mm512_cmp_ps_mask(vlo, x, _CMP_LT_OQ) & _mm512_cmp_ps_mask(x, vhi, _CMP_LE_OQ);
    __m512 dh = _mm512_sub_ps(vhi, x), dl = _mm512_sub_ps(x, vlo);
    __mmask16 take_hi = brk & _mm512_cmp_ps_mask(dh, dl, _CMP_LT_OQ);
    __mmask16 lo_ok = _mm512_cmp_ps_mask(g, one, _CMP_EQ_OQ) | _mm512_cmp_ps_mask(vlo2, vlo, _CMP_LT_OQ);
    __mmask16 take_lo = brk & (__mmask16)~take_hi & lo_ok;
    __mmask16 at_min = (__mmask16)~pos & _mm512_cmp_ps_mask(vhi, x, _CMP_GE_OQ);
    __mmask16 open = valid & (__mmask16)~(take_hi | take_lo | at_min);
    __m512i code = _mm512_cvttps_epi32(_mm512_mask_mov_ps(g1, take_hi, g)); /* g == 0: g1 == 0 */
    _mm512_mask_cvtepi32_storeu_epi8(q, valid, code);
    if (open) codes_scalar(xp, open, gr, q);
}

/* codes16 for a strict grid: dec(0) < dec(1) < ... < dec(top), which holds
 * when step >= 2 ulp16(max |value|) (consecutive f32 points then lie more
 * than one f16 spacing apart, and the clamp to max never acts below top:
 * min + (top - 1) step <= max - step, step being truncated from
 * (max - min) / top).
 * Every code is then its value's only one, and x is settled from the plain
 * guess g = ceil((x - min) / step) with two decodes:
 *   dec(g-1) < x <= dec(g): g if dec(g) is strictly nearer, else g - 1;
 *   dec(g-1) == x: g - 1;   g == 0 and dec(0) >= x: 0 (x is min).
 * exact: f32 differences of f16 values in the group are exact (values one
 * step plus one spacing apart, < 0.5, are multiples of 2^-24 below 2^0), so
 * equal differences are a true tie (the lower value wins); otherwise tied
 * lanes are decided in f64. */
static inline __attribute__((always_inline)) void codes16_strict(
    __m256i h, const mz_f16 *xp, __mmask16 valid, const mz_quant_grid *gr, __m512 vmn, __m512 vmx,
    __m512 vstep, __m512 vinv, __m512 vtop, uint8_t *q, bool exact)
{
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    __m512 x = _mm512_cvtph_ps(h);
    __m512 t = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_sub_ps(x, vmn), vinv),
                                    _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
    __m512 g = _mm512_min_ps(_mm512_max_ps(t, zero), vtop);
    __m512 g1 = _mm512_max_ps(_mm512_sub_ps(g, one), zero);
    __m512 vhi = _mm512_min_ps(vmx, _mm512_fmadd_ps(g, vstep, vmn));
    vhi = _mm512_mask_mov_ps(vhi, _mm512_cmp_ps_mask(g, vtop, _CMP_EQ_OQ), vmx);
    vhi = _mm512_cvtph_ps(_mm512_cvtps_ph(vhi, RNE));
    __m512 vlo = grid_dec_lo(g1, vmn, vmx, vstep);
    __mmask16 pos = _mm512_cmp_ps_mask(g, one, _CMP_GE_OQ);
    __mmask16 below = pos & _mm512_cmp_ps_mask(vlo, x, _CMP_LT_OQ);
    __mmask16 brk = below & _mm512_cmp_ps_mask(x, vhi, _CMP_LE_OQ);
    __m512 dh = _mm512_sub_ps(vhi, x), dl = _mm512_sub_ps(x, vlo);
    __mmask16 take_hi = brk & _mm512_cmp_ps_mask(dh, dl, _CMP_LT_OQ);
    if (!exact) {
        __mmask16 tie = brk & _mm512_cmp_ps_mask(dh, dl, _CMP_EQ_OQ);
        if (tie) take_hi = (__mmask16)(take_hi | (tie & nearer_hi_f64(vhi, vlo, x)));
    }
    __mmask16 lo_eq = pos & _mm512_cmp_ps_mask(vlo, x, _CMP_EQ_OQ);
    __mmask16 at_min = (__mmask16)~pos & _mm512_cmp_ps_mask(vhi, x, _CMP_GE_OQ);
    __mmask16 open = valid & (__mmask16)~(brk | lo_eq | at_min);
    __m512i code = _mm512_cvttps_epi32(_mm512_mask_mov_ps(g1, take_hi, g)); /* g == 0: g1 == 0 */
    _mm512_mask_cvtepi32_storeu_epi8(q, valid, code);
    if (open) codes_scalar(xp, open, gr, q);
}

/* The spacing of f16 values at magnitude a (finite, < 65520). */
static inline float ulp16(float a)
{
    if (a < 0x1p-14f) return 0x1p-24f;
    uint32_t b;
    memcpy(&b, &a, sizeof b);
    b &= 0x7f800000u;
    float e;
    memcpy(&e, &b, sizeof e);
    return e * 0x1p-10f;
}

static inline __m256i loadh(const mz_f16 *x) { return _mm256_loadu_si256((const __m256i *)(const void *)x); }

/* 16 codes (one per byte, < 16) as 8 bytes of nibbles, value 2i low. */
static inline __m128i pack_nibbles(const uint8_t c16[16])
{
    __m128i c = _mm_loadu_si128((const __m128i *)(const void *)c16);
    __m128i pairs = _mm_maddubs_epi16(c, _mm_set1_epi16(0x1001)); /* c[2i] + 16 c[2i+1] */
    return _mm_packus_epi16(pairs, pairs);
}

/* The q8 (top 255: one code a byte) or q4 (top 15: two a byte) encoder,
 * inlined into each so that `top` is a constant there (q8's encoder lost 5-7 %
 * to a run-time top code on the 2-vCPU VM). */
static inline __attribute__((always_inline)) size_t encode_groups(const mz_f16 *src, size_t n,
                                                                  unsigned group, unsigned top,
                                                                  uint8_t *payload)
{
    const __m256i exp_mask = _mm256_set1_epi16(0x7c00);
    const __m512 vtop = _mm512_set1_ps((float)top);
    const bool nibbles = top == 15;
    for (size_t i0 = 0; i0 < n; i0 += group) {
        size_t k = n - i0 < group ? n - i0 : group, j;
        const mz_f16 *x = src + i0;
        /* min, max and inf/NaN; the tail's dead lanes repeat x[0] */
        __m256i fill = _mm256_set1_epi16((short)x[0]);
        __m512 vlo = _mm512_cvtph_ps(fill), vhi = vlo;
        __mmask16 bad = 0;
        for (j = 0; j < k; j += 16) {
            __m256i h = k - j >= 16 ? loadh(x + j) : _mm256_mask_loadu_epi16(fill, tail_mask(k - j), x + j);
            bad |= _mm256_cmpeq_epi16_mask(_mm256_and_si256(h, exp_mask), exp_mask);
            __m512 v = _mm512_cvtph_ps(h);
            vlo = _mm512_min_ps(vlo, v);
            vhi = _mm512_max_ps(vhi, v);
        }
        if (bad) {
            for (j = 0; (x[j] & 0x7c00u) != 0x7c00u; j++) {}
            return i0 + j;
        }
        float mn = _mm512_reduce_min_ps(vlo), mx = _mm512_reduce_max_ps(vhi);
        if (mn == 0.0f) mn = 0.0f; /* canonical +0 */
        if (mx == 0.0f) mx = 0.0f;
        mz_quant_grid gr = {.mn = mn, .mx = mx, .step = mz_quant_step(mn, mx, top), .top = top};
        gr.inv_step = gr.step > 0.0f ? 1.0f / gr.step : 0.0f;
        unsigned bmn = _cvtss_sh(mn, RNE), bmx = _cvtss_sh(mx, RNE);
        payload[0] = (uint8_t)bmn;
        payload[1] = (uint8_t)(bmn >> 8);
        payload[2] = (uint8_t)bmx;
        payload[3] = (uint8_t)(bmx >> 8);
        uint8_t *q = payload + 4;
        const __m512 vmn = _mm512_set1_ps(mn), vmx = _mm512_set1_ps(mx);
        const __m512 vstep = _mm512_set1_ps(gr.step), vinv = _mm512_set1_ps(gr.inv_step);
        float u = ulp16(fmaxf(-mn, mx));
        int kind = gr.step >= 2.0f * u ? (gr.step + u < 0.5f ? 2 : 1) : 0;
        __mmask16 m = 0xffff;
        for (j = 0; j < k; j += 16) {
            __m256i h;
            if (k - j >= 16) {
                h = loadh(x + j);
            } else {
                m = tail_mask(k - j);
                h = _mm256_mask_loadu_epi16(fill, m, x + j);
            }
            uint8_t c16[16] = {0}; /* dead lanes stay 0: q4's padding nibble */
            uint8_t *c = nibbles ? c16 : q + j;
            if (kind == 2)
                codes16_strict(h, x + j, m, &gr, vmn, vmx, vstep, vinv, vtop, c, true);
            else if (kind == 1)
                codes16_strict(h, x + j, m, &gr, vmn, vmx, vstep, vinv, vtop, c, false);
            else
                codes16(h, x + j, m, &gr, vmn, vmx, vstep, vinv, vtop, c);
            if (nibbles)
                _mm_mask_storeu_epi8(q + j / 2, (__mmask16)(m == 0xffff ? 0xff : tail_mask((k - j + 1) / 2)),
                                     pack_nibbles(c16));
        }
        payload += 4 + (nibbles ? (k + 1) / 2 : k);
    }
    return n;
}

size_t mz_q8_encode_groups_avx512(const mz_f16 *src, size_t n, unsigned group, uint8_t *payload)
{
    return encode_groups(src, n, group, 255, payload);
}

size_t mz_q4_encode_groups_avx512(const mz_f16 *src, size_t n, unsigned group, uint8_t *payload)
{
    return encode_groups(src, n, group, 15, payload);
}

#elif defined(MZ_CODEC_HAVE_AVX512_FILE)
/* Built without the AVX-512 flags (not through CMake): the scalar kernels
 * stand in so the program still links. */
#define REF_STAND_INS(p)                                                                        \
    size_t mz_##p##_decode_groups_avx512(const uint8_t *payload, size_t n, unsigned group, mz_f16 *dst, \
                                         bool stream)                                               \
    {                                                                                               \
        (void)stream;                                                                               \
        return mz_##p##_decode_groups_ref(payload, n, group, dst);                                  \
    }                                                                                               \
    size_t mz_##p##_encode_groups_avx512(const mz_f16 *src, size_t n, unsigned group, uint8_t *payload) \
    {                                                                                               \
        return mz_##p##_encode_groups_ref(src, n, group, payload);                                  \
    }
REF_STAND_INS(q8)
REF_STAND_INS(q4)
#else
typedef int mz_codec_q8_avx512_empty; /* not x86: nothing here (ISO C wants a declaration) */
#endif
