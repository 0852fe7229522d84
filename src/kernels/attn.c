/*
 * attn.c — causal grouped-query attention over a layer's KV chunks.
 *
 * For query token i (position p_i = pos0 + i) and query head h, with KV head
 * g = h / (n_head / n_head_kv):
 *   s_p   = scale * dot(q[i][h], K[g][p])          for p in [0, p_i]
 *   out   = sum_p softmax(s)_p * V[g][p]
 * K and V live in 256-position chunks (layout in kernels.h), F16.
 *
 * mz_attn (SIMD: attn_avx2.c, built for short queries over long contexts;
 * its top comment has the work split and the segment merge; attn_avx512.c
 * widens its tile steps, same bits). The scalar
 * kernel here: one pass over the chunk-pointer array with an online softmax.
 *   Per query row it keeps a running max m, running sum l and accumulator
 *   acc[head_dim]. Positions go by in tiles of up to ATTN_TILE rows of one
 *   chunk: the tile's scores are computed first, then m is raised to the
 *   tile max once (acc and l rescaled by exp(m_old - m_new)), then the tile's
 *   V rows are accumulated with weights exp(s - m). Out = acc / l.
 *   A K or V row is converted from F16 once and used for every query head of
 *   its GQA group (up to MZ_ATTN_MAX_GROUP at a time).
 *   Work items are (query token, kv head) pairs; thread ith takes items ith,
 *   ith + nth, ... — interleaved because later tokens see more positions
 *   (causal), so contiguous ranges would load the last thread most — or,
 *   with a->work, claims them from that counter in index order.
 * mz_attn_ref: two passes per (token, head) — max, then sum and weighted V —
 *   all in F32, straight from the definition. The tests' oracle.
 *
 * Sliding window (a->window > 0): query p sees (p - window, p] only
 *   (mz_attn_first_pos). Every kernel starts there: a decode step in a
 *   local layer costs O(window) whatever the history, and no kernel reads a
 *   K or V row of a chunk the window has left (the memory manager evicts
 *   those chunks first and may leave them out of memory).
 *
 * No allocation: scratch (acc, scores, a converted row) is on the stack,
 * bounded by MZ_ATTN_MAX_HEAD_DIM and MZ_ATTN_MAX_GROUP.
 */
#include "kernels_impl.h"

#include <math.h>
#include <stdatomic.h>

#define ATTN_TILE 32

size_t mz_kv_chunk_bytes(int n_head_kv, int head_dim)
{
    MZ_ASSERT(n_head_kv > 0 && head_dim > 0);
    return 2 * (size_t)n_head_kv * MZ_KV_CHUNK_TOKENS * (size_t)head_dim * sizeof(mz_f16);
}

void mz_attn_check_args(const mz_attn_args *a)
{
    MZ_ASSERT(a && a->q && a->out && a->chunks);
    MZ_ASSERT(a->n_head > 0 && a->n_head_kv > 0 && a->n_head % a->n_head_kv == 0);
    MZ_ASSERT(a->head_dim > 0 && a->head_dim <= MZ_ATTN_MAX_HEAD_DIM);
}

/* ---- scalar single-pass kernel ------------------------------------------------------ */

/* Query heads [h0, h0 + ng) of KV head kvh, query token i. */
static void attn_group_scalar(const mz_attn_args *a, size_t i, int kvh, int h0, int ng)
{
    const int hd = a->head_dim;
    const size_t n_ctx = a->pos0 + i + 1;
    const float *q[MZ_ATTN_MAX_GROUP];
    float m[MZ_ATTN_MAX_GROUP], l[MZ_ATTN_MAX_GROUP];
    float acc[MZ_ATTN_MAX_GROUP][MZ_ATTN_MAX_HEAD_DIM];
    float s[MZ_ATTN_MAX_GROUP][ATTN_TILE];
    float row[MZ_ATTN_MAX_HEAD_DIM];
    mz_f16 kt[ATTN_TILE * MZ_ATTN_MAX_HEAD_DIM], vt[ATTN_TILE * MZ_ATTN_MAX_HEAD_DIM]; /* rows of an encoded chunk */

    for (int g = 0; g < ng; g++) {
        q[g] = a->q + (i * (size_t)a->n_head + (size_t)(h0 + g)) * (size_t)hd;
        m[g] = -INFINITY;
        l[g] = 0.0f;
        for (int d = 0; d < hd; d++) acc[g][d] = 0.0f;
    }

    const size_t lo = mz_attn_first_pos(a, i);
    for (size_t c = lo / MZ_KV_CHUNK_TOKENS; c * MZ_KV_CHUNK_TOKENS < n_ctx; c++) {
        const size_t rows = MZ_MIN((size_t)MZ_KV_CHUNK_TOKENS, n_ctx - c * MZ_KV_CHUNK_TOKENS);
        const size_t row0 = c == lo / MZ_KV_CHUNK_TOKENS ? lo % MZ_KV_CHUNK_TOKENS : 0;
        for (size_t t0 = row0; t0 < rows; t0 += ATTN_TILE) {
            const int nt = (int)MZ_MIN((size_t)ATTN_TILE, rows - t0);
            const mz_f16 *kb = mz_attn_kv_rows(a, c, false, kvh, t0, (size_t)nt, kt);
            const mz_f16 *vb = mz_attn_kv_rows(a, c, true, kvh, t0, (size_t)nt, vt);
            for (int t = 0; t < nt; t++) {
                mz_f16_to_f32_row_ref(kb + (size_t)t * (size_t)hd, row, (size_t)hd);
                for (int g = 0; g < ng; g++) {
                    float dot = 0.0f;
                    for (int d = 0; d < hd; d++) dot += q[g][d] * row[d];
                    s[g][t] = dot * a->scale;
                }
            }
            for (int g = 0; g < ng; g++) {
                float mt = m[g];
                for (int t = 0; t < nt; t++) mt = fmaxf(mt, s[g][t]);
                const float corr = expf(m[g] - mt); /* 0 on the first tile (m = -inf) */
                l[g] *= corr;
                for (int d = 0; d < hd; d++) acc[g][d] *= corr;
                for (int t = 0; t < nt; t++) {
                    s[g][t] = expf(s[g][t] - mt);
                    l[g] += s[g][t];
                }
                m[g] = mt;
            }
            for (int t = 0; t < nt; t++) {
                mz_f16_to_f32_row_ref(vb + (size_t)t * (size_t)hd, row, (size_t)hd);
                for (int g = 0; g < ng; g++) {
                    const float p = s[g][t];
                    for (int d = 0; d < hd; d++) acc[g][d] += p * row[d];
                }
            }
        }
    }

    for (int g = 0; g < ng; g++) {
        float *o = a->out + (i * (size_t)a->n_head + (size_t)(h0 + g)) * (size_t)hd;
        const float inv = 1.0f / l[g];
        for (int d = 0; d < hd; d++) o[d] = acc[g][d] * inv;
    }
}

/* The SIMD kernel takes head_dim % 8 == 0; other calls use the scalar one. */
static bool use_avx2(const mz_attn_args *a)
{
    return MZ_KERNELS_X86 && mz_kernels_active_isa() >= MZ_ISA_AVX2 && a->head_dim % 8 == 0;
}

void mz_attn(const mz_attn_args *a, int ith, int nth)
{
    if (use_avx2(a)) {
#if MZ_KERNELS_X86
        /* Same bits either way. AVX-512 does each FMA for two positions; it
         * pays when a work item has at least 4 query rows (prefill, larger
         * GQA groups), not for a 2-row decode step (bench_kernels attn). */
        if (mz_kernels_active_isa() >= MZ_ISA_AVX512 && a->head_dim % 16 == 0 &&
            a->n_q * (size_t)(a->n_head / a->n_head_kv) >= 4)
            mz_attn_avx512(a, ith, nth);
        else
            mz_attn_avx2(a, ith, nth);
        return;
#endif
    }
    mz_attn_scalar(a, ith, nth);
}

size_t mz_attn_partial_floats(const mz_attn_args *a)
{
    mz_attn_check_args(a);
    if (use_avx2(a)) {
#if MZ_KERNELS_X86
        return mz_attn_partial_floats_avx2(a);
#endif
    }
    return 0;
}

void mz_attn_merge(const mz_attn_args *a, int ith, int nth)
{
    if (use_avx2(a)) {
#if MZ_KERNELS_X86
        mz_attn_merge_avx2(a, ith, nth);
#endif
    }
    (void)ith;
    (void)nth;
}

void mz_attn_scalar(const mz_attn_args *a, int ith, int nth)
{
    MZ_ASSERT(nth >= 1 && ith >= 0 && ith < nth);
    mz_attn_check_args(a);
    const int group = a->n_head / a->n_head_kv;
    const size_t n_items = a->n_q * (size_t)a->n_head_kv;
    for (size_t it = (size_t)ith;; it += (size_t)nth) {
        if (a->work) it = atomic_fetch_add_explicit(a->work, 1, memory_order_relaxed);
        if (it >= n_items) break;
        const size_t i = it / (size_t)a->n_head_kv;
        const int kvh = (int)(it % (size_t)a->n_head_kv);
        for (int g0 = 0; g0 < group; g0 += MZ_ATTN_MAX_GROUP)
            attn_group_scalar(a, i, kvh, kvh * group + g0, MZ_MIN(MZ_ATTN_MAX_GROUP, group - g0));
    }
}

/* ---- two-pass reference ------------------------------------------------------------ */

static float ref_score(const mz_attn_args *a, const float *q, int kvh, size_t p)
{
    mz_f16 buf[MZ_ATTN_MAX_HEAD_DIM];
    const mz_f16 *k = mz_attn_kv_rows(a, p / MZ_KV_CHUNK_TOKENS, false, kvh, p % MZ_KV_CHUNK_TOKENS, 1, buf);
    float dot = 0.0f;
    for (int d = 0; d < a->head_dim; d++) dot += q[d] * mz_f16_to_f32(k[d]);
    return dot * a->scale;
}

void mz_attn_ref(const mz_attn_args *a)
{
    mz_attn_check_args(a);
    const int hd = a->head_dim;
    const int group = a->n_head / a->n_head_kv;
    for (size_t i = 0; i < a->n_q; i++) {
        const size_t n_ctx = a->pos0 + i + 1;
        for (int h = 0; h < a->n_head; h++) {
            const int kvh = h / group;
            const float *q = a->q + (i * (size_t)a->n_head + (size_t)h) * (size_t)hd;
            float *o = a->out + (i * (size_t)a->n_head + (size_t)h) * (size_t)hd;

            const size_t lo = mz_attn_first_pos(a, i);
            float mx = -INFINITY;
            for (size_t p = lo; p < n_ctx; p++) mx = fmaxf(mx, ref_score(a, q, kvh, p));

            float sum = 0.0f;
            for (int d = 0; d < hd; d++) o[d] = 0.0f;
            for (size_t p = lo; p < n_ctx; p++) {
                const float e = expf(ref_score(a, q, kvh, p) - mx);
                mz_f16 buf[MZ_ATTN_MAX_HEAD_DIM];
                const mz_f16 *v = mz_attn_kv_rows(a, p / MZ_KV_CHUNK_TOKENS, true, kvh, p % MZ_KV_CHUNK_TOKENS, 1, buf);
                sum += e;
                for (int d = 0; d < hd; d++) o[d] += e * mz_f16_to_f32(v[d]);
            }
            for (int d = 0; d < hd; d++) o[d] /= sum;
        }
    }
}
