/*
 * kquant_avx2.c — AVX2 dot products of the K-quants (Q2_K..Q6_K) with Q8_K.
 * Built with -mavx2 -mfma -mf16c; called only when the CPU has them.
 *
 * Per super-block, the integers of kquant_ref.c, exactly:
 *   codes as unsigned bytes (Q3_K: code + 4 in 0..7, Q6_K: code + 32 in
 *   0..63, the others as stored), times the Q8_K bytes with vpmaddubsw
 *   (pairs of u8*s8 into s16: at most 2 * 63 * 128, no saturation), times
 *   the 16-bit scale of each 16 values with vpmaddwd (-> s32); the offset
 *   of Q3_K / Q6_K comes back as off * sum_g sc[g] * bsums[g], the mins of
 *   Q2_K / Q4_K / Q5_K as sum_g m[g] * bsums[g] (vpmaddwd on the bsums).
 *   Lanes are summed to one int32 per block, then the float steps of
 *   kquant.h — so the result equals the reference bit for bit.
 */
#include "kquant.h"

#if MZ_KERNELS_X86 && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

static inline int32_t hsum_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

static inline float h2f(mz_f16 h) { return _cvtsh_ss(h); }

/* 8 s32 lanes of sum(q[v] * q8[v]) * scale over 32 values: q unsigned bytes,
 * sc16 the scale of each pair's 16-value group in its s16 lane. */
static inline __m256i dot32(__m256i q, const int8_t *q8, __m256i sc16)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)q8)), sc16);
}

/* The s16 scale vectors of the eight 32-value chunks from sixteen s16 group
 * scales (lanes 0..7 of chunk k: group 2k, lanes 8..15: group 2k+1). */
static inline void chunk_scales(__m256i sc16, __m256i out[8])
{
    const __m256i lo = _mm256_permute2x128_si256(sc16, sc16, 0x00);
    const __m256i hi = _mm256_permute2x128_si256(sc16, sc16, 0x11);
    for (int k = 0; k < 4; k++) {
        const char a = (char)(4 * k), b = (char)(4 * k + 1), c = (char)(4 * k + 2), d = (char)(4 * k + 3);
        const __m256i m = _mm256_setr_epi8(a, b, a, b, a, b, a, b, a, b, a, b, a, b, a, b,
                                           c, d, c, d, c, d, c, d, c, d, c, d, c, d, c, d);
        out[k] = _mm256_shuffle_epi8(lo, m);
        out[k + 4] = _mm256_shuffle_epi8(hi, m);
    }
}

static inline __m256i load_bsums(const mz_block_q8_K *b)
{
    return _mm256_loadu_si256((const __m256i *)b->bsums);
}

/* The four 2-bit fields of one 32-byte row, as unsigned bytes 0..3. */
static inline void split2(__m256i q, __m256i out[4])
{
    const __m256i m3 = _mm256_set1_epi8(3);
    out[0] = _mm256_and_si256(q, m3);
    out[1] = _mm256_and_si256(_mm256_srli_epi16(q, 2), m3);
    out[2] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m3);
    out[3] = _mm256_and_si256(_mm256_srli_epi16(q, 6), m3);
}

float mz_vec_dot_q2_K_q8_K_avx2(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK_K == 0);
    const mz_block_q2_K *a = w;
    const mz_block_q8_K *b = x;
    float s = 0.0f;
    for (size_t i = 0; i < n / MZ_QK_K; i++) {
        const __m128i s8 = _mm_loadu_si128((const __m128i *)a[i].scales);
        const __m128i m4 = _mm_set1_epi8(0x0f);
        const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(s8, m4));
        const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), m4));
        const int32_t summs = hsum_i32(_mm256_madd_epi16(mn16, load_bsums(&b[i])));
        __m256i sc[8];
        chunk_scales(sc16, sc);
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i q[4];
            split2(_mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * h)), q);
            for (int j = 0; j < 4; j++)
                acc = _mm256_add_epi32(acc, dot32(q[j], b[i].qs + 128 * h + 32 * j, sc[4 * h + j]));
        }
        s = mz_kq_block_end_min(s, b[i].d, h2f(a[i].d), h2f(a[i].dmin), hsum_i32(acc), summs);
    }
    return s;
}

float mz_vec_dot_q3_K_q8_K_avx2(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK_K == 0);
    const mz_block_q3_K *a = w;
    const mz_block_q8_K *b = x;
    const __m256i four = _mm256_set1_epi8(4);
    float s = 0.0f;
    for (size_t i = 0; i < n / MZ_QK_K; i++) {
        int8_t scs[16];
        mz_kq_scales_q3_K(a[i].scales, scs);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)scs));
        /* codes are stored + 4 (0..7): take 4 * sum_g sc[g] * bsums[g] back */
        const __m256i off = _mm256_madd_epi16(sc16, load_bsums(&b[i]));
        __m256i sc[8];
        chunk_scales(sc16, sc);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)a[i].hmask);
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i q[4];
            split2(_mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * h)), q);
            for (int j = 0; j < 4; j++) {
                const __m256i bit = _mm256_set1_epi8((char)(1 << (4 * h + j)));
                const __m256i high = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit), four);
                acc = _mm256_add_epi32(acc, dot32(_mm256_or_si256(q[j], high), b[i].qs + 128 * h + 32 * j, sc[4 * h + j]));
            }
        }
        acc = _mm256_sub_epi32(acc, _mm256_slli_epi32(off, 2));
        s = mz_kq_block_end(s, b[i].d, h2f(a[i].d), hsum_i32(acc));
    }
    return s;
}

/* The integer sums of one Q4_K / Q5_K block (qh NULL for Q4_K): returns
 * isum, sets *summs. */
static inline int32_t dot_q45_block(const uint8_t *restrict s12, const uint8_t *restrict qs, const uint8_t *restrict qh,
                                  const mz_block_q8_K *restrict b, int32_t *summs)
{
    uint8_t scs[8], mns[8];
    mz_kq_scales_k4(s12, scs, mns);
    /* mins: each covers two 16-value groups of bsums */
    const __m128i m8 = _mm_loadl_epi64((const __m128i *)mns);
    const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
    *summs = hsum_i32(_mm256_madd_epi16(mn16, load_bsums(b)));
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i hbits = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    const __m256i sixteen = _mm256_set1_epi8(16);
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(q, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (qh) {
            const __m256i bl = _mm256_set1_epi8((char)(1 << (2 * c))), bh = _mm256_set1_epi8((char)(2 << (2 * c)));
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hbits, bl), bl), sixteen));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hbits, bh), bh), sixteen));
        }
        acc = _mm256_add_epi32(acc, dot32(lo, b->qs + 64 * c, _mm256_set1_epi16(scs[2 * c])));
        acc = _mm256_add_epi32(acc, dot32(hi, b->qs + 64 * c + 32, _mm256_set1_epi16(scs[2 * c + 1])));
    }
    return hsum_i32(acc);
}

float mz_vec_dot_q4_K_q8_K_avx2(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK_K == 0);
    const mz_block_q4_K *a = w;
    const mz_block_q8_K *b = x;
    float s = 0.0f;
    for (size_t i = 0; i < n / MZ_QK_K; i++) {
        int32_t summs;
        const int32_t isum = dot_q45_block(a[i].scales, a[i].qs, NULL, &b[i], &summs);
        s = mz_kq_block_end_min(s, b[i].d, h2f(a[i].d), h2f(a[i].dmin), isum, summs);
    }
    return s;
}

float mz_vec_dot_q5_K_q8_K_avx2(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK_K == 0);
    const mz_block_q5_K *a = w;
    const mz_block_q8_K *b = x;
    float s = 0.0f;
    for (size_t i = 0; i < n / MZ_QK_K; i++) {
        int32_t summs;
        const int32_t isum = dot_q45_block(a[i].scales, a[i].qs, a[i].qh, &b[i], &summs);
        s = mz_kq_block_end_min(s, b[i].d, h2f(a[i].d), h2f(a[i].dmin), isum, summs);
    }
    return s;
}

float mz_vec_dot_q6_K_q8_K_avx2(size_t n, const void *restrict w, const void *restrict x)
{
    MZ_ASSERT(n % MZ_QK_K == 0);
    const mz_block_q6_K *a = w;
    const mz_block_q8_K *b = x;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    float s = 0.0f;
    for (size_t i = 0; i < n / MZ_QK_K; i++) {
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)a[i].scales));
        /* codes are stored + 32 (0..63): take 32 * sum_g sc[g] * bsums[g] back */
        const __m256i off = _mm256_madd_epi16(sc16, load_bsums(&b[i]));
        __m256i sc[8];
        chunk_scales(sc16, sc);
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(a[i].ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(a[i].ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(a[i].qh + 32 * h));
            /* bits 2k..2k+1 of qh moved to bits 4..5 of each byte */
            const __m256i q0 = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
            const __m256i q1 = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
            const __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30));
            const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                               _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
            const int8_t *q8 = b[i].qs + 128 * h;
            acc = _mm256_add_epi32(acc, dot32(q0, q8, sc[4 * h]));
            acc = _mm256_add_epi32(acc, dot32(q1, q8 + 32, sc[4 * h + 1]));
            acc = _mm256_add_epi32(acc, dot32(q2, q8 + 64, sc[4 * h + 2]));
            acc = _mm256_add_epi32(acc, dot32(q3, q8 + 96, sc[4 * h + 3]));
        }
        acc = _mm256_sub_epi32(acc, _mm256_slli_epi32(off, 5));
        s = mz_kq_block_end(s, b[i].d, h2f(a[i].d), hsum_i32(acc));
    }
    return s;
}

#else
/* Not an x86-64 build with AVX2 flags: nothing to compile here. */
typedef int mz_kquant_avx2_unused;
#endif
