/*
 * attn_avx2.c — AVX2 + FMA + F16C version of mz_attn (contract and math in
 * attn.c / kernels.h). Same single-pass tiled online softmax; vectorized:
 *   - F16 -> F32 of each K and V row (vcvtph2ps), once per row for the whole
 *     GQA group;
 *   - q . k with 8-lane FMAs (two accumulators);
 *   - acc += p * v and the acc rescale with 8-lane FMAs / multiplies.
 * exp() stays scalar (one per score: small next to the head_dim-long dots).
 * head_dim need not be a multiple of 8: scalar tails.
 */
#include "kernels_impl.h"

#if MZ_KERNELS_X86 && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <math.h>

#define ATTN_TILE 32

static inline float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline void f16_row(const mz_f16 *restrict x, float *restrict y, int n)
{
    int d = 0;
    for (; d + 8 <= n; d += 8)
        _mm256_storeu_ps(y + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + d))));
    for (; d < n; d++) y[d] = _cvtsh_ss(x[d]);
}

static inline float dot_f32(const float *restrict a, const float *restrict b, int n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int d = 0;
    for (; d + 16 <= n; d += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d + 8), _mm256_loadu_ps(b + d + 8), s1);
    }
    for (; d + 8 <= n; d += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), s0);
    float s = hsum_ps(_mm256_add_ps(s0, s1));
    for (; d < n; d++) s += a[d] * b[d];
    return s;
}

/* y += p * x */
static inline void axpy(float *restrict y, float p, const float *restrict x, int n)
{
    const __m256 vp = _mm256_set1_ps(p);
    int d = 0;
    for (; d + 8 <= n; d += 8)
        _mm256_storeu_ps(y + d, _mm256_fmadd_ps(vp, _mm256_loadu_ps(x + d), _mm256_loadu_ps(y + d)));
    for (; d < n; d++) y[d] += p * x[d];
}

static inline void scale_row(float *restrict y, float c, int n)
{
    const __m256 vc = _mm256_set1_ps(c);
    int d = 0;
    for (; d + 8 <= n; d += 8) _mm256_storeu_ps(y + d, _mm256_mul_ps(vc, _mm256_loadu_ps(y + d)));
    for (; d < n; d++) y[d] *= c;
}

/* Query heads [h0, h0 + ng) of KV head kvh, query token i. */
static void attn_group(const mz_attn_args *a, size_t i, int kvh, int h0, int ng)
{
    const int hd = a->head_dim;
    const size_t n_ctx = a->pos0 + i + 1;
    const size_t kv_stride = MZ_KV_CHUNK_TOKENS * (size_t)hd; /* elements per head in a chunk */
    const float *q[MZ_ATTN_MAX_GROUP];
    float m[MZ_ATTN_MAX_GROUP], l[MZ_ATTN_MAX_GROUP];
    float acc[MZ_ATTN_MAX_GROUP][MZ_ATTN_MAX_HEAD_DIM] __attribute__((aligned(32)));
    float s[MZ_ATTN_MAX_GROUP][ATTN_TILE];
    float row[MZ_ATTN_MAX_HEAD_DIM] __attribute__((aligned(32)));

    for (int g = 0; g < ng; g++) {
        q[g] = a->q + (i * (size_t)a->n_head + (size_t)(h0 + g)) * (size_t)hd;
        m[g] = -INFINITY;
        l[g] = 0.0f;
        for (int d = 0; d < hd; d++) acc[g][d] = 0.0f;
    }

    for (size_t c = 0; c * MZ_KV_CHUNK_TOKENS < n_ctx; c++) {
        const mz_f16 *kbase = (const mz_f16 *)a->chunks[c] + (size_t)kvh * kv_stride;
        const mz_f16 *vbase = (const mz_f16 *)a->chunks[c] + ((size_t)a->n_head_kv + (size_t)kvh) * kv_stride;
        const size_t rows = MZ_MIN((size_t)MZ_KV_CHUNK_TOKENS, n_ctx - c * MZ_KV_CHUNK_TOKENS);
        for (size_t t0 = 0; t0 < rows; t0 += ATTN_TILE) {
            const int nt = (int)MZ_MIN((size_t)ATTN_TILE, rows - t0);
            for (int t = 0; t < nt; t++) {
                f16_row(kbase + (t0 + (size_t)t) * (size_t)hd, row, hd);
                for (int g = 0; g < ng; g++) s[g][t] = dot_f32(q[g], row, hd) * a->scale;
            }
            for (int g = 0; g < ng; g++) {
                float mt = m[g];
                for (int t = 0; t < nt; t++) mt = fmaxf(mt, s[g][t]);
                if (mt > m[g]) {
                    /* Raise the running max: earlier terms shrink by exp(m_old - m_new)
                     * (0 on the first tile, where m_old = -inf and acc = 0). */
                    const float corr = expf(m[g] - mt);
                    l[g] *= corr;
                    scale_row(acc[g], corr, hd);
                    m[g] = mt;
                }
                for (int t = 0; t < nt; t++) {
                    s[g][t] = expf(s[g][t] - mt);
                    l[g] += s[g][t];
                }
            }
            for (int t = 0; t < nt; t++) {
                f16_row(vbase + (t0 + (size_t)t) * (size_t)hd, row, hd);
                for (int g = 0; g < ng; g++) axpy(acc[g], s[g][t], row, hd);
            }
        }
    }

    for (int g = 0; g < ng; g++) {
        float *o = a->out + (i * (size_t)a->n_head + (size_t)(h0 + g)) * (size_t)hd;
        const float inv = 1.0f / l[g];
        for (int d = 0; d < hd; d++) o[d] = acc[g][d] * inv;
    }
}

void mz_attn_avx2(const mz_attn_args *a, int ith, int nth)
{
    MZ_ASSERT(nth >= 1 && ith >= 0 && ith < nth);
    mz_attn_check_args(a);
    const int group = a->n_head / a->n_head_kv;
    const size_t n_items = a->n_q * (size_t)a->n_head_kv;
    /* Interleaved items: causal rows grow with the token index (see attn.c). */
    for (size_t it = (size_t)ith; it < n_items; it += (size_t)nth) {
        const size_t i = it / (size_t)a->n_head_kv;
        const int kvh = (int)(it % (size_t)a->n_head_kv);
        for (int g0 = 0; g0 < group; g0 += MZ_ATTN_MAX_GROUP)
            attn_group(a, i, kvh, kvh * group + g0, MZ_MIN(MZ_ATTN_MAX_GROUP, group - g0));
    }
}

#else
/* Not an x86-64 build with AVX2 flags: nothing to compile here. */
typedef int mz_attn_avx2_unused;
#endif
