/*
 * kquant_x86.h — the x86 K-quant kernels' shared part (included by
 * kquant_avx2.c and kquant_avx512.c, compiled with each file's flags, as
 * gemm_x86.h is): unpacking a weight super-block into 256-bit registers,
 * its integer dot products with Q8_K blocks (see kquant_avx2.c), and the
 * gemm's tile loop.
 */
#ifndef MZ_KQUANT_X86_H
#define MZ_KQUANT_X86_H

#include "kquant.h"

#include <immintrin.h>

/* The lane sums of two s32 vectors at once: *sa = sum(a), *sb = sum(b). */
static inline void hsum2_i32(__m256i a, __m256i b, int32_t *sa, int32_t *sb)
{
    const __m256i p = _mm256_hadd_epi32(a, b); /* a01 a23 b01 b23 | a45 a67 b45 b67 */
    __m128i q = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    q = _mm_hadd_epi32(q, q); /* sum(a) sum(b) .. */
    *sa = _mm_cvtsi128_si32(q);
    *sb = _mm_extract_epi32(q, 1);
}

/* The block functions must inline into their loops (GCC declines on size
 * alone), or vec_dot would pass every unpacked chunk through memory. */
#define KQ_INLINE static inline __attribute__((always_inline))

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
    MZ_KQ_UNROLL for (int k = 0; k < 4; k++) {
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

/*
 * A weight super-block unpacked for the integer dot products: the codes of
 * values 32k..32k+31 as unsigned bytes, the s16 scale of each pair's
 * 16-value group, and v16 = what pairs with the Q8_K bsums: the mins
 * (Q2_K, Q4_K, Q5_K) or the scales (Q3_K, Q6_K, whose codes went in with
 * an offset of 1 << off_shift to be taken back). One unpacking serves every
 * token of a gemm tile.
 */
typedef struct {
    __m256i q[8];
    __m256i sc[8];
    __m256i v16;
    float dw, dmin;
} kq_prep;

/* Chunk k (values 32k..32k+31) of a block being unpacked: stored in p for a
 * gemm tile (acc NULL), or, for one token (vec_dot), its dot product with b
 * added to *acc at once. The branch goes away once inlined (acc is NULL or
 * the address of a local at each call), so vec_dot keeps every chunk in
 * registers. */
KQ_INLINE void emit(kq_prep *restrict p, int k, __m256i q, __m256i sc, const mz_block_q8_K *restrict b,
                        __m256i *acc)
{
    if (acc) {
        *acc = _mm256_add_epi32(*acc, dot32(q, b->qs + 32 * k, sc));
    } else {
        p->q[k] = q;
        p->sc[k] = sc;
    }
}

/* The sums of a block from its chunk products acc and v16 (off_shift 0: mins). */
KQ_INLINE mz_kq_sums finish(const kq_prep *restrict p, __m256i acc, const mz_block_q8_K *restrict b, int off_shift)
{
    mz_kq_sums r = {.dw = p->dw, .dmin = p->dmin};
    int32_t v;
    hsum2_i32(acc, _mm256_madd_epi16(p->v16, load_bsums(b)), &r.isum, &v);
    if (off_shift) r.isum -= v * (1 << off_shift);
    else r.summs = v;
    return r;
}

KQ_INLINE void prep_q2_K(const mz_block_q2_K *restrict a, kq_prep *restrict p, const mz_block_q8_K *restrict b,
                             __m256i *acc)
{
    const __m128i s8 = _mm_loadu_si128((const __m128i *)a->scales);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m256i sc[8], q[8];
    chunk_scales(_mm256_cvtepu8_epi16(_mm_and_si128(s8, m4)), sc);
    p->v16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), m4));
    split2(_mm256_loadu_si256((const __m256i *)a->qs), q);
    split2(_mm256_loadu_si256((const __m256i *)(a->qs + 32)), q + 4);
    MZ_KQ_UNROLL for (int k = 0; k < 8; k++) emit(p, k, q[k], sc[k], b, acc);
    p->dw = h2f(a->d);
    p->dmin = h2f(a->dmin);
}

KQ_INLINE void prep_q3_K(const mz_block_q3_K *restrict a, kq_prep *restrict p, const mz_block_q8_K *restrict b,
                             __m256i *acc)
{
    const __m256i four = _mm256_set1_epi8(4);
    uint32_t o[4];
    mz_kq_scales_q3_K_words(a->scales, o);
    const __m128i codes = _mm_setr_epi32((int)o[0], (int)o[1], (int)o[2], (int)o[3]);
    p->v16 = _mm256_cvtepi8_epi16(_mm_sub_epi8(codes, _mm_set1_epi8(32)));
    __m256i sc[8], q[8];
    chunk_scales(p->v16, sc);
    const __m256i hm = _mm256_loadu_si256((const __m256i *)a->hmask);
    split2(_mm256_loadu_si256((const __m256i *)a->qs), q);
    split2(_mm256_loadu_si256((const __m256i *)(a->qs + 32)), q + 4);
    /* code + 4 = 2-bit field + 4 * high bit, 0..7 */
    MZ_KQ_UNROLL for (int k = 0; k < 8; k++) {
        const __m256i bit = _mm256_set1_epi8((char)(1 << k));
        const __m256i high = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit), four);
        emit(p, k, _mm256_or_si256(q[k], high), sc[k], b, acc);
    }
    p->dw = h2f(a->d);
    p->dmin = 0.0f;
}

/* Q4_K and Q5_K (qh NULL for Q4_K). */
KQ_INLINE void prep_q45(const void *blk, mz_f16 d, mz_f16 dmin, const uint8_t *restrict qs,
                            const uint8_t *restrict qh, kq_prep *restrict p, const mz_block_q8_K *restrict b,
                            __m256i *acc)
{
    /* the scales as s16 in both halves; scale k is broadcast by a byte shuffle */
    const __m256i sc16 = _mm256_broadcastsi128_si256(mz_kq_scales_k4_x86(blk, &p->v16));
    const __m256i m4 = _mm256_set1_epi8(0x0f), sixteen = _mm256_set1_epi8(16);
    const __m256i hbits = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    MZ_KQ_UNROLL for (int c = 0; c < 4; c++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(q, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (qh) {
            const __m256i bl = _mm256_set1_epi8((char)(1 << (2 * c))), bh = _mm256_set1_epi8((char)(2 << (2 * c)));
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hbits, bl), bl), sixteen));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hbits, bh), bh), sixteen));
        }
        emit(p, 2 * c, lo, _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * c)))), b, acc);
        emit(p, 2 * c + 1, hi, _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * c + 1)))), b,
             acc);
    }
    p->dw = h2f(d);
    p->dmin = h2f(dmin);
}

KQ_INLINE void prep_q4_K(const mz_block_q4_K *restrict a, kq_prep *restrict p, const mz_block_q8_K *restrict b,
                             __m256i *acc)
{
    prep_q45(a, a->d, a->dmin, a->qs, NULL, p, b, acc);
}

KQ_INLINE void prep_q5_K(const mz_block_q5_K *restrict a, kq_prep *restrict p, const mz_block_q8_K *restrict b,
                             __m256i *acc)
{
    prep_q45(a, a->d, a->dmin, a->qs, a->qh, p, b, acc);
}

KQ_INLINE void prep_q6_K(const mz_block_q6_K *restrict a, kq_prep *restrict p, const mz_block_q8_K *restrict b,
                             __m256i *acc)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    p->v16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)a->scales));
    __m256i sc[8];
    chunk_scales(p->v16, sc);
    MZ_KQ_UNROLL for (int h = 0; h < 2; h++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(a->ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(a->ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(a->qh + 32 * h));
        /* code + 32, 0..63: bits 2k..2k+1 of qh moved to bits 4..5 of each byte */
        const __m256i q0 = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
        const __m256i q1 = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
        const __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30));
        const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                           _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
        emit(p, 4 * h, q0, sc[4 * h], b, acc);
        emit(p, 4 * h + 1, q1, sc[4 * h + 1], b, acc);
        emit(p, 4 * h + 2, q2, sc[4 * h + 2], b, acc);
        emit(p, 4 * h + 3, q3, sc[4 * h + 3], b, acc);
    }
    p->dw = h2f(a->d);
    p->dmin = 0.0f;
}

/*
 * The gemm of weight type t: rows one by one, tokens in tiles of up to
 * KQ_TILE_TOKENS (8, the lanes of kq_tile_end); each weight block is
 * unpacked once per tile (prep_<t>) and TILE(p, x blocks of the tile's
 * tokens, nt, s, off_shift, has_min) then adds it to the tile's sums s[]
 * with exactly the vec_dot's steps, so every y equals vec_dot bit for bit. One token goes to vec_dot (decode:
 * the unpacked values stay in registers).
 */
#define KQ_TILE_TOKENS 8
#define KQ_GEMM_TILED(name, t, vec_dot, TILE, off_shift, has_min, rows8)                                 \
    MZ_GEMM_DECL(name)                                                                                    \
    {                                                                                                     \
        MZ_ASSERT(n % MZ_QK_K == 0);                                                                      \
        const uint8_t *wb = w, *xb = x;                                                                   \
        if (n_tok == 1) {                                                                                 \
            size_t r = r0;                                                                                \
            for (; (rows8) && r + 8 <= r1; r += 8) {                                                      \
                float s[8] = {0};                                                                         \
                for (size_t i = 0; i < n / MZ_QK_K; i++) {                                                \
                    const mz_block_q8_K *xb1 = (const mz_block_q8_K *)x + i;                              \
                    kq_prep p[8];                                                                         \
                    __m256i acc[8];                                                                       \
                    MZ_KQ_UNROLL for (int k = 0; k < 8; k++) {                                            \
                        acc[k] = _mm256_setzero_si256();                                                  \
                        prep_##t((const mz_block_##t *)(wb + (r + (size_t)k) * w_row_bytes) + i, &p[k], xb1, &acc[k]); \
                    }                                                                                     \
                    kq_rows_end(p, acc, xb1, s, off_shift, has_min);                                      \
                }                                                                                         \
                memcpy(y + r, s, sizeof s);                                                               \
            }                                                                                             \
            for (; r < r1; r++) y[r] = vec_dot(n, wb + r * w_row_bytes, x);                               \
            return;                                                                                       \
        }                                                                                                 \
        for (size_t r = r0; r < r1; r++) {                                                                \
            const mz_block_##t *wr = (const mz_block_##t *)(wb + r * w_row_bytes);                        \
            for (size_t t0 = 0; t0 < n_tok; t0 += KQ_TILE_TOKENS) {                                       \
                const size_t nt = MZ_MIN((size_t)KQ_TILE_TOKENS, n_tok - t0);                             \
                float s[KQ_TILE_TOKENS] = {0};                                                            \
                for (size_t i = 0; i < n / MZ_QK_K; i++) {                                                \
                    const mz_block_q8_K *xs[KQ_TILE_TOKENS];                                              \
                    for (size_t k = 0; k < nt; k++)                                                       \
                        xs[k] = (const mz_block_q8_K *)(xb + (t0 + k) * x_row_bytes) + i;                  \
                    kq_prep p;                                                                            \
                    prep_##t(&wr[i], &p, NULL, NULL);                                                     \
                    TILE(&p, xs, nt, s, off_shift, has_min);                                              \
                }                                                                                         \
                for (size_t k = 0; k < nt; k++) y[(t0 + k) * y_stride + r] = s[k];                        \
            }                                                                                             \
        }                                                                                                 \
    }

/* Lane k of the result = the sum of the 8 s32 lanes of v[k]. */
KQ_INLINE __m256i hsum8_i32(const __m256i v[8])
{
    const __m256i t0 = _mm256_hadd_epi32(v[0], v[1]), t1 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i t2 = _mm256_hadd_epi32(v[4], v[5]), t3 = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i u0 = _mm256_hadd_epi32(t0, t1), u1 = _mm256_hadd_epi32(t2, t3); /* low | high lane halves */
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

/* The end of block b for 8 rows at once (decode), row k in lane k: p[k]
 * its unpacked block (v16, dw, dmin), acc[k] its chunk products; as
 * kq_tile_end below, lane by lane the vec_dot's operations. */
KQ_INLINE void kq_rows_end(const kq_prep *restrict p, const __m256i acc[8], const mz_block_q8_K *restrict b, float *s,
                           int off_shift, int has_min)
{
    const __m256i bs = load_bsums(b);
    __m256i v[8];
    float dw[8], dmin[8];
    for (int k = 0; k < 8; k++) {
        v[k] = _mm256_madd_epi16(p[k].v16, bs);
        dw[k] = p[k].dw;
        dmin[k] = p[k].dmin;
    }
    __m256i isum = hsum8_i32(acc);
    const __m256i vsum = hsum8_i32(v);
    const __m256 d = _mm256_set1_ps(b->d);
    __m256 sum = _mm256_loadu_ps(s);
    if (off_shift) isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(vsum, off_shift));
    sum = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_loadu_ps(dw)), _mm256_cvtepi32_ps(isum), sum);
    if (has_min) sum = _mm256_fnmadd_ps(_mm256_mul_ps(d, _mm256_loadu_ps(dmin)), _mm256_cvtepi32_ps(vsum), sum);
    _mm256_storeu_ps(s, sum);
}

/*
 * The end of a block for the nt (<= 8) tokens of a tile at once, token k in
 * lane k: acc[k] its chunk products, xs[k] its Q8_K block, s[0..8) the
 * running sums. Lane by lane the very operations of finish() and kquant.h's
 * block end (exact integer sums; then vmulps, vcvtdq2ps and vfmadd / vfnmadd,
 * which round as the scalar mul, conversion and fmaf do), so each lane
 * equals the vec_dot's value. Lanes >= nt are computed on zeros and unused.
 */
KQ_INLINE void kq_tile_end(const kq_prep *restrict p, __m256i acc[8], const mz_block_q8_K *const *xs, size_t nt, float *s,
                           int off_shift, int has_min)
{
    __m256i v[8];
    float dx[8];
    for (size_t k = 0; k < 8; k++) {
        if (k < nt) {
            v[k] = _mm256_madd_epi16(p->v16, load_bsums(xs[k]));
            dx[k] = xs[k]->d;
        } else {
            acc[k] = v[k] = _mm256_setzero_si256();
            dx[k] = 0.0f;
        }
    }
    __m256i isum = hsum8_i32(acc);
    const __m256i vsum = hsum8_i32(v);
    const __m256 d = _mm256_loadu_ps(dx);
    __m256 sum = _mm256_loadu_ps(s);
    if (off_shift) isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(vsum, off_shift));
    sum = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(p->dw)), _mm256_cvtepi32_ps(isum), sum);
    if (has_min) sum = _mm256_fnmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(p->dmin)), _mm256_cvtepi32_ps(vsum), sum);
    _mm256_storeu_ps(s, sum);
}

#endif /* MZ_KQUANT_X86_H */
