/*
 * kquant_x8_x86.h — Q4_K, Q5_K and Q6_K gemm on the x8 layout (repack.c:
 * 8 rows word-interleaved per super-block, one row per 32-bit lane), x86.
 * Included by kquant_avx2.c and kquant_avx512.c (after kquant_x86.h) once
 * they define KQ8_SUFFIX, KQ8_T (tokens per tile), KQ8_DIRECT and
 *   kq8_scale(v):          the s32 lanes of a group's scale (one per row) in
 *                          the form kq8_dot / kq8_apply take;
 *   kq8_dot(acc, w, x, sc): 4 products u8 w x s8 x per lane added to *acc
 *                          (KQ8_DIRECT: times sc, into the super-block sum;
 *                          else unscaled, the group's part for kq8_apply).
 *
 * Arithmetic: per (row, token, super-block) the exact integers of the plain
 * kernels (isum = sum over scale groups of scale * sum code * x, Q6_K's
 * code offset 32 taken back as 32 * sum sc * bsums; summs = sum m * bsums),
 * then kquant.h's float steps in 8 lanes at once (vmulps, vcvtdq2ps,
 * vfmadd / vfnmadd: the rounding of the scalar mul, conversion and fmaf).
 * So every output equals the plain vec_dot bit for bit, whatever the tile.
 *
 * Per (8 rows, super-block, token tile) the scales are unpacked once and
 * each 32-byte quant word is split into codes once for the tile's tokens;
 * per token a code vector costs one dot instruction (vpdpbusd) against 4
 * activation bytes broadcast to every lane.
 */
#ifndef KQ8_SUFFIX
#error "define KQ8_SUFFIX, KQ8_T, KQ8_DIRECT, kq8_scale and kq8_dot first"
#endif

#define KQ8_CAT2(a, b) a##_##b
#define KQ8_CAT(a, b) KQ8_CAT2(a, b)
#define KQ8_FN(name) KQ8_CAT(name, KQ8_SUFFIX)

/* Longest row of the x8 layout in super-blocks. */
#define KQ8_MAX_SB (MZ_QK * MZ_X8_MAX_BLOCKS / MZ_QK_K)

/* Activation side of a token tile: per token t and super-block i, the Q8_K
 * scale and the bsums pairs that meet the weights' s16 pairs in vpmaddwd
 * (Q4_K / Q5_K: the 32-value sums S_j as (S0,S2) (S1,S3) (S4,S6) (S5,S7);
 * Q6_K: the 16-value bsums b as (b0,b2) (b1,b3) (b4,b6) ...). */
typedef struct {
    float dx[KQ8_T][KQ8_MAX_SB];
    uint32_t pw[KQ8_T][KQ8_MAX_SB][8];
} KQ8_FN(kq8_act);

/* kind: 0 = Q4_K, 1 = Q5_K, 2 = Q6_K */
static inline uint32_t kq8_pair(int lo, int hi) { return (uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16; }

static inline void KQ8_FN(kq8_prep_act)(KQ8_FN(kq8_act) *a, int kind, size_t nb, const uint8_t *x, size_t xrb, int tn)
{
    for (int t = 0; t < tn; t++)
        for (size_t i = 0; i < nb; i++) {
            const mz_block_q8_K *b = (const mz_block_q8_K *)(x + (size_t)t * xrb) + i;
            uint32_t *pw = a->pw[t][i];
            a->dx[t][i] = b->d;
            if (kind == 2) {
                for (int w = 0; w < 4; w++) {
                    pw[2 * w] = kq8_pair(b->bsums[4 * w], b->bsums[4 * w + 2]);
                    pw[2 * w + 1] = kq8_pair(b->bsums[4 * w + 1], b->bsums[4 * w + 3]);
                }
            } else {
                int s[8];
                for (int j = 0; j < 8; j++) s[j] = b->bsums[2 * j] + b->bsums[2 * j + 1];
                pw[0] = kq8_pair(s[0], s[2]);
                pw[1] = kq8_pair(s[1], s[3]);
                pw[2] = kq8_pair(s[4], s[6]);
                pw[3] = kq8_pair(s[5], s[7]);
            }
        }
}

/* sum + part * sc: a scale group's unscaled products part (without
 * KQ8_DIRECT) times its rows' scales. */
static inline __m256i kq8_apply(__m256i sum, __m256i part, __m256i sc)
{
    return _mm256_add_epi32(sum, _mm256_mullo_epi32(part, sc));
}

static inline __m256i kq8_load(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

static inline __m256i kq8_bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* Bits shifted left by s (right by -s) in each 32-bit lane. */
KQ_INLINE __m256i kq8_shift(__m256i v, const int s)
{
    return s > 0 ? _mm256_slli_epi32(v, s) : s < 0 ? _mm256_srli_epi32(v, -s) : v;
}

/* The 8 f16 in the low (hi = 0) or high 16 bits of each lane, as F32. */
KQ_INLINE __m256 kq8_f16_lanes(__m256i v, const int hi)
{
    const __m256i h = hi ? _mm256_srli_epi32(v, 16) : _mm256_and_si256(v, _mm256_set1_epi32(0xffff));
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08);
    return _mm256_cvtph_ps(_mm256_castsi256_si128(p));
}

/* The super-block's float steps for token t (lanes = rows). */
KQ_INLINE __m256 kq8_end(__m256 sum, float dx, __m256 dw, __m256 dmin, __m256i isum, __m256i summs, const int has_min)
{
    const __m256 d = _mm256_set1_ps(dx);
    sum = _mm256_fmadd_ps(_mm256_mul_ps(d, dw), _mm256_cvtepi32_ps(isum), sum);
    if (has_min) sum = _mm256_fnmadd_ps(_mm256_mul_ps(d, dmin), _mm256_cvtepi32_ps(summs), sum);
    return sum;
}

/* Super-block i of one Q4_K / Q5_K group (g: its group block) for T tokens
 * (x: the Q8_K rows of the tile, xrb apart), added to sum[]. */
KQ_INLINE void KQ8_FN(kq8_block_q45)(int q5, const uint8_t *restrict g, const uint8_t *restrict x, size_t xrb,
                                     size_t i, const KQ8_FN(kq8_act) *restrict a, __m256 *sum, const int T)
{
    /* mz_kq_scales_k4_words on 8 rows at once: o0 o1 scales 0..7, o2 o3 mins */
    const __m256i w0 = kq8_load(g + 32), w1 = kq8_load(g + 64), w2 = kq8_load(g + 96);
    const __m256i m3f = _mm256_set1_epi32(0x3f3f3f3f), m0f = _mm256_set1_epi32(0x0f0f0f0f),
                  m30 = _mm256_set1_epi32(0x30303030), mff = _mm256_set1_epi32(0xff),
                  m00ff = _mm256_set1_epi32(0x00ff00ff);
    const __m256i o[4] = {_mm256_and_si256(w0, m3f),
                          _mm256_or_si256(_mm256_and_si256(w2, m0f), _mm256_and_si256(_mm256_srli_epi32(w0, 2), m30)),
                          _mm256_and_si256(w1, m3f),
                          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), m0f),
                                          _mm256_and_si256(_mm256_srli_epi32(w1, 2), m30))};
    const __m256i m4 = _mm256_set1_epi8(0x0f), m10 = _mm256_set1_epi8(0x10);
    const uint8_t *qs = g + 32 * (q5 ? 12 : 4), *qh = g + 128;
    __m256i isum[KQ8_T];
    MZ_KQ_UNROLL for (int t = 0; t < T; t++) isum[t] = _mm256_setzero_si256();
    MZ_KQ_UNROLL for (int c = 0; c < 4; c++) {
        /* sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles) */
        const __m256i sl = kq8_scale(_mm256_and_si256(_mm256_srli_epi32(o[c / 2], 16 * (c % 2)), mff));
        const __m256i sh = kq8_scale(_mm256_and_si256(_mm256_srli_epi32(o[c / 2], 16 * (c % 2) + 8), mff));
        __m256i pl[KQ8_T], ph[KQ8_T];
        MZ_KQ_UNROLL for (int t = 0; t < T; t++) pl[t] = ph[t] = _mm256_setzero_si256();
        MZ_KQ_UNROLL for (int j4 = 0; j4 < 8; j4++) {
            const __m256i raw = kq8_load(qs + 32 * (8 * c + j4));
            __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            if (q5) {
                const __m256i h = kq8_load(qh + 32 * j4);
                lo = _mm256_or_si256(lo, _mm256_and_si256(kq8_shift(h, 4 - 2 * c), m10));
                hi = _mm256_or_si256(hi, _mm256_and_si256(kq8_shift(h, 3 - 2 * c), m10));
            }
            MZ_KQ_UNROLL for (int t = 0; t < T; t++) {
                const int8_t *xq = ((const mz_block_q8_K *)(x + (size_t)t * xrb) + i)->qs + 64 * c + 4 * j4;
                kq8_dot(KQ8_DIRECT ? &isum[t] : &pl[t], lo, kq8_bcast4(xq), sl);
                kq8_dot(KQ8_DIRECT ? &isum[t] : &ph[t], hi, kq8_bcast4(xq + 32), sh);
            }
        }
        if (!KQ8_DIRECT)
            MZ_KQ_UNROLL for (int t = 0; t < T; t++) isum[t] = kq8_apply(kq8_apply(isum[t], pl[t], sl), ph[t], sh);
    }
    /* mins as s16 pairs (m0,m2) (m1,m3) (m4,m6) (m5,m7), as kq8_act pairs the sums */
    const __m256i mn[4] = {_mm256_and_si256(o[2], m00ff), _mm256_and_si256(_mm256_srli_epi32(o[2], 8), m00ff),
                           _mm256_and_si256(o[3], m00ff), _mm256_and_si256(_mm256_srli_epi32(o[3], 8), m00ff)};
    const __m256i dd = kq8_load(g);
    const __m256 dw = kq8_f16_lanes(dd, 0), dmin = kq8_f16_lanes(dd, 1);
    MZ_KQ_UNROLL for (int t = 0; t < T; t++) {
        const uint32_t *pw = a->pw[t][i];
        __m256i summs = _mm256_madd_epi16(mn[0], _mm256_set1_epi32((int)pw[0]));
        MZ_KQ_UNROLL for (int k = 1; k < 4; k++)
            summs = _mm256_add_epi32(summs, _mm256_madd_epi16(mn[k], _mm256_set1_epi32((int)pw[k])));
        sum[t] = kq8_end(sum[t], a->dx[t][i], dw, dmin, isum[t], summs, 1);
    }
}

/* The same for Q6_K: ql words 0..31, qh words 32..47, scale words 48..51,
 * then the 8 rows' f16 d. Value 128h + 64u + 32p + 4j + 0..3 (j < 8) is the
 * nibble u of ql word 16h + 8p + j with bits 4u + 2p of qh word 8h + j on
 * top, in 16-value scale group 8h + 4u + 2p + j / 4. */
KQ_INLINE void KQ8_FN(kq8_block_q6)(const uint8_t *restrict g, const uint8_t *restrict x, size_t xrb, size_t i,
                                    const KQ8_FN(kq8_act) *restrict a, __m256 *sum, const int T)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    __m256i sw[4];
    MZ_KQ_UNROLL for (int w = 0; w < 4; w++) sw[w] = kq8_load(g + 32 * (48 + w));
    __m256i isum[KQ8_T];
    MZ_KQ_UNROLL for (int t = 0; t < T; t++) isum[t] = _mm256_setzero_si256();
    MZ_KQ_UNROLL for (int h = 0; h < 2; h++)
        MZ_KQ_UNROLL for (int p = 0; p < 2; p++)
            MZ_KQ_UNROLL for (int half = 0; half < 2; half++) {
                /* groups gl (u = 0) and gh (u = 1): sign-extended scale byte of each row */
                const int gl = 8 * h + 2 * p + half, gh = gl + 4;
                const __m256i sl = kq8_scale(_mm256_srai_epi32(_mm256_slli_epi32(sw[gl / 4], 24 - 8 * (gl % 4)), 24));
                const __m256i sh = kq8_scale(_mm256_srai_epi32(_mm256_slli_epi32(sw[gh / 4], 24 - 8 * (gh % 4)), 24));
                __m256i pl[KQ8_T], ph[KQ8_T];
                MZ_KQ_UNROLL for (int t = 0; t < T; t++) pl[t] = ph[t] = _mm256_setzero_si256();
                MZ_KQ_UNROLL for (int jj = 0; jj < 4; jj++) {
                    const int j = 4 * half + jj;
                    const __m256i raw = kq8_load(g + 32 * (16 * h + 8 * p + j)), hb = kq8_load(g + 32 * (32 + 8 * h + j));
                    const __m256i lo = _mm256_or_si256(_mm256_and_si256(raw, m4), _mm256_and_si256(kq8_shift(hb, 4 - 2 * p), m30));
                    const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4),
                                                       _mm256_and_si256(kq8_shift(hb, -2 * p), m30));
                    MZ_KQ_UNROLL for (int t = 0; t < T; t++) {
                        const int8_t *xq = ((const mz_block_q8_K *)(x + (size_t)t * xrb) + i)->qs + 128 * h + 32 * p + 4 * j;
                        kq8_dot(KQ8_DIRECT ? &isum[t] : &pl[t], lo, kq8_bcast4(xq), sl);
                        kq8_dot(KQ8_DIRECT ? &isum[t] : &ph[t], hi, kq8_bcast4(xq + 64), sh);
                    }
                }
                if (!KQ8_DIRECT)
                    MZ_KQ_UNROLL for (int t = 0; t < T; t++) isum[t] = kq8_apply(kq8_apply(isum[t], pl[t], sl), ph[t], sh);
            }
    /* the codes went in + 32: take 32 * sum_g sc[g] * bsums[g] back, scales
     * as s16 pairs (s0,s2) (s1,s3) of each scale word */
    __m256i sp[8];
    MZ_KQ_UNROLL for (int w = 0; w < 4; w++) {
        sp[2 * w] = _mm256_srai_epi16(_mm256_slli_epi16(sw[w], 8), 8);
        sp[2 * w + 1] = _mm256_srai_epi16(sw[w], 8);
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 32 * 52)));
    MZ_KQ_UNROLL for (int t = 0; t < T; t++) {
        const uint32_t *pw = a->pw[t][i];
        __m256i off = _mm256_madd_epi16(sp[0], _mm256_set1_epi32((int)pw[0]));
        MZ_KQ_UNROLL for (int k = 1; k < 8; k++) off = _mm256_add_epi32(off, _mm256_madd_epi16(sp[k], _mm256_set1_epi32((int)pw[k])));
        sum[t] = kq8_end(sum[t], a->dx[t][i], dw, dw, _mm256_sub_epi32(isum[t], _mm256_slli_epi32(off, 5)), off, 0);
    }
}

/* One group of 8 rows x T tokens over all nb super-blocks; y[t * ys + r]. */
KQ_INLINE void KQ8_FN(kq8_tile)(int kind, size_t nb, const uint8_t *restrict gw, size_t gbb,
                                const KQ8_FN(kq8_act) *restrict a, const uint8_t *restrict x, size_t xrb,
                                float *restrict y, size_t ys, const int T)
{
    __m256 sum[KQ8_T];
    MZ_KQ_UNROLL for (int t = 0; t < T; t++) sum[t] = _mm256_setzero_ps();
    for (size_t i = 0; i < nb; i++) {
        if (kind == 2) KQ8_FN(kq8_block_q6)(gw + i * gbb, x, xrb, i, a, sum, T);
        else KQ8_FN(kq8_block_q45)(kind, gw + i * gbb, x, xrb, i, a, sum, T);
    }
    MZ_KQ_UNROLL for (int t = 0; t < T; t++) _mm256_storeu_ps(y + (size_t)t * ys, sum[t]);
}

#define KQ8_CASE(kind, T_) \
    case T_: KQ8_FN(kq8_tile)(kind, nb, gw, gbb, &act, xt, x_row_bytes, y + t0 * y_stride + ra, y_stride, T_); break;
#if KQ8_T == 4
#define KQ8_CASES(kind) KQ8_CASE(kind, 1) KQ8_CASE(kind, 2) KQ8_CASE(kind, 3) KQ8_CASE(kind, 4)
#elif KQ8_T == 8
#define KQ8_CASES(kind) KQ8_CASE(kind, 1) KQ8_CASE(kind, 2) KQ8_CASE(kind, 3) KQ8_CASE(kind, 4) \
    KQ8_CASE(kind, 5) KQ8_CASE(kind, 6) KQ8_CASE(kind, 7) KQ8_CASE(kind, 8)
#else
#error "KQ8_T must be 4 or 8"
#endif

/* Rows [r0, r1) (multiples of 8) of an x8 K-quant tensor, tokens in tiles of KQ8_T. */
#define KQ8_DRIVER(tname, kind)                                                                          \
    MZ_GEMM_DECL(KQ8_FN(mz_gemm_x8_##tname##_q8_K))                                                      \
    {                                                                                                    \
        MZ_ASSERT(n % MZ_QK_K == 0 && n / MZ_QK_K <= KQ8_MAX_SB && r0 % 8 == 0 && r1 % 8 == 0);          \
        const size_t nb = n / MZ_QK_K, gbb = 8 * sizeof(mz_block_##tname);                               \
        KQ8_FN(kq8_act) act;                                                                             \
        for (size_t t0 = 0; t0 < n_tok; t0 += KQ8_T) {                                                   \
            const int tn = (int)MZ_MIN((size_t)KQ8_T, n_tok - t0);                                       \
            const uint8_t *xt = (const uint8_t *)x + t0 * x_row_bytes;                                   \
            KQ8_FN(kq8_prep_act)(&act, kind, nb, xt, x_row_bytes, tn);                                   \
            for (size_t ra = r0; ra < r1; ra += 8) {                                                     \
                const uint8_t *gw = (const uint8_t *)w + ra * w_row_bytes;                               \
                switch (tn) {                                                                            \
                    KQ8_CASES(kind)                                                                      \
                default: MZ_ASSERT(0);                                                                   \
                }                                                                                        \
            }                                                                                            \
        }                                                                                                \
    }

KQ8_DRIVER(q4_K, 0)
KQ8_DRIVER(q5_K, 1)
KQ8_DRIVER(q6_K, 2)
