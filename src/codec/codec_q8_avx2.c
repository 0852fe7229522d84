/*
 * codec_q8_avx2.c — AVX2 + F16C decode kernels for the q8 and q4 codecs and
 * the encoders' code search (compiled with -mavx2 -mfma -mf16c; called only
 * after mz_codec_cpu_has_avx2()).
 *
 * Same arithmetic (and group checks) as mz_q8_decode_groups_ref /
 * mz_q4_decode_groups_ref, lane by lane: f32(q) * step, + min,
 * "v > max ? max : v" (as _mm256_min_ps(max, v), which returns v on
 * equality, so signed zeros match the scalar code), top code (255 / 15) →
 * max, then vcvtps2ph with RNE. q4 computes that once per group for its 16
 * codes and looks values up (see mz_q4_decode_groups_avx2).
 * Output is bit-identical to the scalar reference (tests/unit/test_codec.c).
 */
#include "codec.h"
#include "codec_f16.h"

#if defined(__AVX2__) && defined(__F16C__)
#include "codec_q8_x86.h"

/* dec() of the 8 codes in the low 8 bytes of q (one per byte) as f16 bits,
 * top code `top` (255: q8, 15: q4). */
static inline __m128i dec8_codes(__m128i q, __m256 vmn, __m256 vmx, __m256 vstep, int top)
{
    __m256i qi = _mm256_cvtepu8_epi32(q);
    __m256 v = _mm256_add_ps(vmn, _mm256_mul_ps(_mm256_cvtepi32_ps(qi), vstep));
    v = _mm256_min_ps(vmx, v); /* v > max ? max : v */
    __m256i is_top = _mm256_cmpeq_epi32(qi, _mm256_set1_epi32(top));
    v = _mm256_blendv_ps(v, vmx, _mm256_castsi256_ps(is_top));
    return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

static inline __m128i dec8(const uint8_t *q, __m256 vmn, __m256 vmx, __m256 vstep)
{
    return dec8_codes(_mm_loadl_epi64((const __m128i *)(const void *)q), vmn, vmx, vstep, 255);
}

size_t mz_q8_decode_groups_avx2(const uint8_t *payload, size_t n, unsigned group, mz_f16 *dst)
{
    size_t g = 0;
    for (size_t i0 = 0; i0 < n; i0 += group, g++) {
        size_t k = n - i0 < group ? n - i0 : group;
        float mn, mx, step;
        if (!group_header(payload, 255, &mn, &mx, &step)) break;
        const uint8_t *q = payload + 4;
        mz_f16 *out = dst + i0;
        __m256 vmn = _mm256_set1_ps(mn), vmx = _mm256_set1_ps(mx), vstep = _mm256_set1_ps(step);
        size_t j = 0;
        for (; j + 16 <= k; j += 16) {
            __m128i a = dec8(q + j, vmn, vmx, vstep);
            __m128i b = dec8(q + j + 8, vmn, vmx, vstep);
            _mm_storeu_si128((__m128i *)(void *)(out + j), a);
            _mm_storeu_si128((__m128i *)(void *)(out + j + 8), b);
        }
        for (; j + 8 <= k; j += 8)
            _mm_storeu_si128((__m128i *)(void *)(out + j), dec8(q + j, vmn, vmx, vstep));
        for (; j < k; j++) {
            float v = mn + (float)q[j] * step;
            if (v > mx) v = mx;
            if (q[j] == 255) v = mx;
            out[j] = (mz_f16)_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT);
        }
        payload += 4 + k;
    }
    return g;
}

/* q4 decodes by table: dec() of the 16 codes once per group (dec8_codes:
 * the same arithmetic, hence the same bits), split into its low and its
 * high bytes, and every value two byte lookups (pshufb) of its nibble,
 * 32 values a step. */
size_t mz_q4_decode_groups_avx2(const uint8_t *payload, size_t n, unsigned group, mz_f16 *dst)
{
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m128i codes = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m128i split = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    size_t g = 0;
    for (size_t i0 = 0; i0 < n; i0 += group, g++) {
        size_t k = n - i0 < group ? n - i0 : group;
        float mn, mx, step;
        if (!group_header(payload, 15, &mn, &mx, &step)) break;
        __m256 vmn = _mm256_set1_ps(mn), vmx = _mm256_set1_ps(mx), vstep = _mm256_set1_ps(step);
        /* t0, t1: entries 0..7, 8..15, each as 8 low bytes then 8 high bytes */
        __m128i t0 = _mm_shuffle_epi8(dec8_codes(codes, vmn, vmx, vstep, 15), split);
        __m128i t1 = _mm_shuffle_epi8(dec8_codes(_mm_srli_si128(codes, 8), vmn, vmx, vstep, 15), split);
        const __m128i tlo = _mm_unpacklo_epi64(t0, t1), thi = _mm_unpackhi_epi64(t0, t1);
        const uint8_t *q = payload + 4;
        mz_f16 *out = dst + i0;
        size_t j = 0;
        for (; j + 32 <= k; j += 32) { /* 16 bytes: value 2i in the low nibble of byte i */
            __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(q + j / 2));
            __m128i even = _mm_and_si128(b, m4), odd = _mm_and_si128(_mm_srli_epi16(b, 4), m4);
            __m128i c0 = _mm_unpacklo_epi8(even, odd), c1 = _mm_unpackhi_epi8(even, odd);
            __m128i l0 = _mm_shuffle_epi8(tlo, c0), h0 = _mm_shuffle_epi8(thi, c0);
            __m128i l1 = _mm_shuffle_epi8(tlo, c1), h1 = _mm_shuffle_epi8(thi, c1);
            _mm_storeu_si128((__m128i *)(void *)(out + j), _mm_unpacklo_epi8(l0, h0));
            _mm_storeu_si128((__m128i *)(void *)(out + j + 8), _mm_unpackhi_epi8(l0, h0));
            _mm_storeu_si128((__m128i *)(void *)(out + j + 16), _mm_unpacklo_epi8(l1, h1));
            _mm_storeu_si128((__m128i *)(void *)(out + j + 24), _mm_unpackhi_epi8(l1, h1));
        }
        for (; j < k; j++) {
            unsigned c = (q[j / 2] >> (4 * (j & 1))) & 15u;
            float v = mn + (float)c * step;
            if (v > mx) v = mx;
            if (c == 15) v = mx;
            out[j] = (mz_f16)_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT);
        }
        payload += 4 + (k + 1) / 2;
    }
    return g;
}

/* dec(q) of 8 lanes as floats: the scalar dec_val, lane by lane. */
static inline __m256 grid_dec8(__m256i qi, __m256 vmn, __m256 vmx, __m256 vstep, __m256i vtop)
{
    __m256 v = _mm256_add_ps(vmn, _mm256_mul_ps(_mm256_cvtepi32_ps(qi), vstep));
    v = _mm256_min_ps(vmx, v);
    v = _mm256_blendv_ps(v, vmx, _mm256_castsi256_ps(_mm256_cmpeq_epi32(qi, vtop)));
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* a < b exactly, for f16-valued floats, via doubles: returns an 8-lane mask of
 * (hi + lo < 2 x), the "upper neighbour is strictly nearer" test. */
static inline __m256 nearer_hi8(__m256 vhi, __m256 vlo, __m256 x)
{
    __m256d s0 = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(vhi)),
                               _mm256_cvtps_pd(_mm256_castps256_ps128(vlo)));
    __m256d s1 = _mm256_add_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(vhi, 1)),
                               _mm256_cvtps_pd(_mm256_extractf128_ps(vlo, 1)));
    __m256d x0 = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
    __m256d x1 = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    __m256d m0 = _mm256_cmp_pd(s0, _mm256_add_pd(x0, x0), _CMP_LT_OQ);
    __m256d m1 = _mm256_cmp_pd(s1, _mm256_add_pd(x1, x1), _CMP_LT_OQ);
    __m128 p0 = _mm256_cvtpd_ps(m0); /* all-ones doubles are NaN → NaN floats: nonzero */
    __m128 p1 = _mm256_cvtpd_ps(m1);
    __m256 r = _mm256_insertf128_ps(_mm256_castps128_ps256(p0), p1, 1);
    return _mm256_cmp_ps(r, r, _CMP_UNORD_Q); /* NaN lanes = true */
}

void mz_q8_minmax_avx2(const mz_f16 *x, size_t k, float *mn, float *mx)
{
    float lo = _cvtsh_ss(x[0]), hi = lo;
    size_t j = 0;
    if (k >= 8) {
        __m256 vlo = _mm256_set1_ps(lo), vhi = vlo;
        for (; j + 8 <= k; j += 8) {
            __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(x + j)));
            vlo = _mm256_min_ps(vlo, v);
            vhi = _mm256_max_ps(vhi, v);
        }
        float a[8], b[8];
        _mm256_storeu_ps(a, vlo);
        _mm256_storeu_ps(b, vhi);
        for (int l = 0; l < 8; l++) {
            if (a[l] < lo) lo = a[l];
            if (b[l] > hi) hi = b[l];
        }
    }
    for (; j < k; j++) {
        float v = _cvtsh_ss(x[j]);
        if (v < lo) lo = v;
        if (v > hi) hi = v;
    }
    *mn = lo;
    *mx = hi;
}

size_t mz_quant_codes_avx2(const mz_f16 *x, size_t k, float mn, float mx, float step,
                           float inv_step, unsigned top, uint8_t *codes, uint8_t *unresolved)
{
    const __m256i vtop = _mm256_set1_epi32((int)top);
    const __m256 vmn = _mm256_set1_ps(mn), vmx = _mm256_set1_ps(mx), vstep = _mm256_set1_ps(step);
    const __m256 vinv = _mm256_set1_ps(inv_step);
    const __m256i one = _mm256_set1_epi32(1), two = _mm256_set1_epi32(2);
    size_t n_unres = 0, j = 0;
    for (; j + 8 <= k; j += 8) {
        __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(x + j)));
        __m256 t = _mm256_mul_ps(_mm256_sub_ps(xv, vmn), vinv);
        t = _mm256_min_ps(_mm256_max_ps(_mm256_ceil_ps(t), _mm256_setzero_ps()),
                          _mm256_cvtepi32_ps(vtop));
        __m256i g = _mm256_cvttps_epi32(t);
        __m256i g1 = _mm256_max_epi32(_mm256_sub_epi32(g, one), _mm256_setzero_si256());
        __m256i g2 = _mm256_max_epi32(_mm256_sub_epi32(g, two), _mm256_setzero_si256());
        __m256 vhi = grid_dec8(g, vmn, vmx, vstep, vtop);
        __m256 vlo = grid_dec8(g1, vmn, vmx, vstep, vtop);
        __m256 vlo2 = grid_dec8(g2, vmn, vmx, vstep, vtop);
        __m256 g_pos = _mm256_castsi256_ps(_mm256_cmpgt_epi32(g, _mm256_setzero_si256()));
        __m256 g_gt1 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(g, one));
        /* g >= 1: vlo < x <= vhi brackets x */
        __m256 brk = _mm256_and_ps(_mm256_cmp_ps(vlo, xv, _CMP_LT_OQ),
                                   _mm256_cmp_ps(xv, vhi, _CMP_LE_OQ));
        brk = _mm256_and_ps(brk, g_pos);
        __m256 take_hi = _mm256_and_ps(brk, nearer_hi8(vhi, vlo, xv));
        /* lower value: g - 1 is its smallest code if g == 1 or dec(g-2) < vlo */
        __m256 lo_ok = _mm256_or_ps(_mm256_andnot_ps(g_gt1, g_pos),
                                    _mm256_cmp_ps(vlo2, vlo, _CMP_LT_OQ));
        __m256 take_lo = _mm256_and_ps(_mm256_andnot_ps(take_hi, brk), lo_ok);
        /* g == 0: resolved iff dec(0) >= x (then x == min) */
        __m256 zero_ok = _mm256_andnot_ps(g_pos, _mm256_cmp_ps(vhi, xv, _CMP_GE_OQ));
        __m256i code = _mm256_blendv_epi8(g1, g, _mm256_castps_si256(take_hi));
        __m256 done = _mm256_or_ps(_mm256_or_ps(take_hi, take_lo), zero_ok);
        int dm = _mm256_movemask_ps(done);
        int32_t c32[8];
        _mm256_storeu_si256((__m256i *)(void *)c32, code);
        for (int l = 0; l < 8; l++) {
            codes[j + (size_t)l] = (uint8_t)c32[l]; /* g == 0 lanes: g1 = 0 */
            unresolved[j + (size_t)l] = (uint8_t)!((dm >> l) & 1);
            n_unres += !((dm >> l) & 1);
        }
    }
    for (; j < k; j++) {
        unresolved[j] = 1;
        n_unres++;
    }
    return n_unres;
}

void mz_codec_f32_to_f16_avx2(const float *src, mz_f16 *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(src + i);
        _mm_storeu_si128((__m128i *)(void *)(dst + i),
                         _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; i++) dst[i] = (mz_f16)_cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

#elif defined(MZ_CODEC_HAVE_AVX2_FILE)
/* Built without -mavx2 -mf16c (not through CMake): the scalar kernel stands in
 * so the program still links; the dispatcher's CPU check is unaffected. */
size_t mz_q8_decode_groups_avx2(const uint8_t *payload, size_t n, unsigned group, mz_f16 *dst)
{
    return mz_q8_decode_groups_ref(payload, n, group, dst);
}

size_t mz_q4_decode_groups_avx2(const uint8_t *payload, size_t n, unsigned group, mz_f16 *dst)
{
    return mz_q4_decode_groups_ref(payload, n, group, dst);
}

void mz_codec_f32_to_f16_avx2(const float *src, mz_f16 *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = mz_float_to_half(src[i]);
}

void mz_q8_minmax_avx2(const mz_f16 *x, size_t k, float *mn, float *mx)
{
    float lo = mz_half_to_float(x[0]), hi = lo;
    for (size_t j = 1; j < k; j++) {
        float v = mz_half_to_float(x[j]);
        if (v < lo) lo = v;
        if (v > hi) hi = v;
    }
    *mn = lo;
    *mx = hi;
}

size_t mz_quant_codes_avx2(const mz_f16 *x, size_t k, float mn, float mx, float step,
                           float inv_step, unsigned top, uint8_t *codes, uint8_t *unresolved)
{
    (void)top;
    (void)x;
    (void)mn;
    (void)mx;
    (void)step;
    (void)inv_step;
    (void)codes;
    memset(unresolved, 1, k);
    return k;
}
#else
typedef int mz_codec_q8_avx2_empty; /* not x86: nothing here (ISO C wants a declaration) */
#endif
