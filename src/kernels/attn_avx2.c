/*
 * attn_avx2.c — AVX2 + FMA + F16C attention over KV chunks (contract in
 * kernels.h, math in attn.c), built for the long-context case: a short query
 * (a few tokens) over thousands of cached positions.
 *
 * Work item: (KV head, block of query tokens, range of positions). Its rows
 * are every query head of the GQA group for every token of the block (up to
 * ATTN_MAX_ROWS), so each F16 K/V row is read and converted once per item for
 * all of them. Positions go by in tiles of ATTN_TILE rows of one chunk:
 *   Kf  = f32(K tile)                                 [nt][hd]
 *   S   = scale * (Q . Kf^T)                           register tiles: 2 rows x 4 positions
 *   per row: m' = max(m, max S), rescale l and acc by exp(m - m') when m grows,
 *            P = exp(S - m') (8-lane polynomial exp), l += sum P
 *   Vf  = f32(V tile);  acc += P . Vf                 register tiles: 2 rows x 32 dims
 *
 * Segments and merging (canonical arithmetic). Positions are cut into fixed
 * segments of ATTN_SEG_POS (1024); a row's online softmax restarts at every
 * segment, and the segments' states (m, l, acc) are merged in segment order:
 *   M = max(M, m_s); L = L*exp(M_old - M) + l_s*exp(m_s - M);
 *   ACC = ACC*exp(M_old - M) + acc_s*exp(m_s - M);   out = ACC * (1/L).
 * Every output row is computed by exactly this sequence whatever the plan:
 * one thread walking all segments of an item (prefill: many items), or
 * segments spread over threads with their states parked in a->partial and
 * merged by mz_attn_merge (short query, long context: few items). So results
 * do not depend on the thread count, the batch or the token split
 * (test_forward_threads relies on it).
 *
 * The three tile steps (S, the softmax step, acc += P . Vf) are this file's
 * AVX2 ones or attn_avx512.c's, which give the same bits (attn_tiled.h); the
 * rest — plan, segments, merge — is shared.
 *
 * A row attends to positions [lo, pos0 + i], lo = mz_attn_first_pos (0, or
 * where a sliding window starts): in a tile it uses only its valid range
 * [n0, nv) (the weighted-V loops are cut per row; the softmax keeps those
 * lanes, the others give -inf to the max and exactly 0 to P, whatever their
 * score), so positions outside it cannot change a bit. Tiles start at
 * absolute multiples of ATTN_TILE and segments at multiples of ATTN_SEG_POS
 * whatever the item, so a row gets the same sequence of operations in every
 * plan. With a window, an item starts at the tile of its first row's lo and
 * the plan at the segment of the first query's lo: no K or V row of a chunk
 * the window has left is read, and a decode step costs O(window) whatever
 * the history. Needs head_dim % 8 == 0 (else mz_attn uses the scalar
 * kernel).
 */
#include "kernels_impl.h"

#if MZ_KERNELS_X86 && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include "attn_tiled.h"

#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#define AV __m256
#define AV_W 8
#define AV_INT __m256i
#define AV_LOAD _mm256_loadu_ps
#define AV_STORE _mm256_storeu_ps
#define AV_SET1 _mm256_set1_ps
#define AV_BCAST _mm256_broadcast_ss
#define AV_MUL _mm256_mul_ps
#define AV_ADD _mm256_add_ps
#define AV_FMA _mm256_fmadd_ps
#define AV_FNMA _mm256_fnmadd_ps
#define AV_ROUND(x) _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define AV_CVT_I _mm256_cvtps_epi32
#define AV_ADD_I _mm256_add_epi32
#define AV_SET1_I _mm256_set1_epi32
#define AV_SLLI_I _mm256_slli_epi32
#define AV_CAST_I2F _mm256_castsi256_ps
#define AV_SUB _mm256_sub_ps
#define AV_DIV _mm256_div_ps
#define AV_MIN _mm256_min_ps
#define AV_MAX _mm256_max_ps
#define AV_ZERO_BELOW(x, lo, v) _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), v)
#define AV_SELECT_NONNEG(x, a, b) _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ))
#include "attn_simd.h"

_Static_assert(ATTN_SEG_POS % MZ_KV_CHUNK_TOKENS == 0, "segments are whole chunks");
_Static_assert(MZ_KV_CHUNK_TOKENS % ATTN_TILE == 0, "tiles do not straddle chunks");

/* ---- plan -------------------------------------------------------------------------- */

typedef struct attn_plan {
    int group;     /* query heads per KV head */
    int hsub;      /* query heads per item (<= group, <= ATTN_MAX_ROWS) */
    int n_hsub;    /* head sub-groups per KV head */
    size_t tb;     /* query tokens per item */
    size_t n_tb;   /* token blocks */
    size_t seg0;   /* first segment any row attends to (a window hides those below) */
    size_t n_seg;  /* segments [seg0, seg0 + n_seg) up to the longest row's end */
    size_t n_grp;  /* (kv head, head sub-group, token block) triples */
} attn_plan;

static attn_plan make_plan(const mz_attn_args *a)
{
    attn_plan p;
    p.group = a->n_head / a->n_head_kv;
    p.hsub = MZ_MIN(p.group, ATTN_MAX_ROWS);
    p.n_hsub = (p.group + p.hsub - 1) / p.hsub;
    p.tb = (size_t)MZ_MAX(1, ATTN_MAX_ROWS / p.hsub);
    p.n_tb = (a->n_q + p.tb - 1) / p.tb;
    const size_t n_ctx = a->pos0 + a->n_q;
    p.seg0 = mz_attn_first_pos(a, 0) / ATTN_SEG_POS;
    p.n_seg = (n_ctx + ATTN_SEG_POS - 1) / ATTN_SEG_POS - p.seg0;
    p.n_grp = (size_t)a->n_head_kv * (size_t)p.n_hsub * p.n_tb;
    return p;
}

/* Split the segments over threads? Only worth it (and only possible with
 * scratch) when there are too few groups to keep the threads busy. */
static size_t plan_partial_floats(const mz_attn_args *a, const attn_plan *p)
{
    if (p->n_seg < 2 || p->n_grp >= 8) return 0;
    return p->n_seg * a->n_q * (size_t)a->n_head * ((size_t)a->head_dim + 2);
}

/* ---- small vector helpers ----------------------------------------------------------- */

/* e^x for x <= 0 (and -inf -> 0), see exp_poly. */
static inline __m256 exp_ps(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.0f);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    return _mm256_andnot_ps(under, exp_poly(_mm256_max_ps(x, lo)));
}

/* Lane i of the result = sum of the 8 lanes of a[i], each summed as
 * ((x0+x1)+(x2+x3)) + ((x4+x5)+(x6+x7)). */
static inline __m256 reduce8(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4, __m256 a5, __m256 a6,
                             __m256 a7)
{
    const __m256 h0 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    const __m256 h1 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));
    return _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20), _mm256_permute2f128_ps(h0, h1, 0x31));
}

static inline void f16_rows(const mz_f16 *restrict x, float *restrict y, size_t n)
{
    for (size_t d = 0; d < n; d += 8)
        _mm256_storeu_ps(y + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + d))));
}

/* ---- one item ----------------------------------------------------------------------- */

typedef attn_row_state row_state;

/* S[r][t] = scale * (Q[r] . Kf[t]) for rows [0, nr), positions [0, nt), with
 * Kf = f32(kb) converted into kf first. */
static void scores(const float *restrict qs, const mz_f16 *restrict kb, float *restrict kf, int hd, int nr,
                   int nt, float scale, float s[][ATTN_TILE])
{
    f16_rows(kb, kf, (size_t)nt * (size_t)hd);
    for (int r = 0; r < nr; r += 2) {
        const float *q0 = qs + (size_t)r * (size_t)hd;
        const float *q1 = r + 1 < nr ? q0 + hd : q0; /* odd row count: recompute row r, discarded */
        for (int t = 0; t < nt; t += 4) {
            const float *k0 = kf + (size_t)t * (size_t)hd;
            const float *k1 = t + 1 < nt ? k0 + hd : k0;
            const float *k2 = t + 2 < nt ? k0 + 2 * hd : k0;
            const float *k3 = t + 3 < nt ? k0 + 3 * hd : k0;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
            for (int d = 0; d < hd; d += 8) {
                const __m256 x0 = _mm256_loadu_ps(q0 + d), x1 = _mm256_loadu_ps(q1 + d);
                __m256 k = _mm256_loadu_ps(k0 + d);
                a0 = _mm256_fmadd_ps(x0, k, a0);
                b0 = _mm256_fmadd_ps(x1, k, b0);
                k = _mm256_loadu_ps(k1 + d);
                a1 = _mm256_fmadd_ps(x0, k, a1);
                b1 = _mm256_fmadd_ps(x1, k, b1);
                k = _mm256_loadu_ps(k2 + d);
                a2 = _mm256_fmadd_ps(x0, k, a2);
                b2 = _mm256_fmadd_ps(x1, k, b2);
                k = _mm256_loadu_ps(k3 + d);
                a3 = _mm256_fmadd_ps(x0, k, a3);
                b3 = _mm256_fmadd_ps(x1, k, b3);
            }
            float v[8];
            _mm256_storeu_ps(v, _mm256_mul_ps(_mm256_set1_ps(scale), reduce8(a0, a1, a2, a3, b0, b1, b2, b3)));
            for (int j = 0; j < 4 && t + j < nt; j++) {
                s[r][t + j] = v[j];
                if (r + 1 < nr) s[r + 1][t + j] = v[4 + j];
            }
        }
    }
}

/* acc[r] += sum_{n0[r] <= t < nv[r]} P[r][t] * Vf[t], t ascending, for rows
 * [r0, nr), with Vf = f32(vb) for the nt positions converted into vf first. */
static void accumulate(float *restrict acc, const mz_f16 *restrict vb, float *restrict vf, int hd, int r0,
                       int nr, int nt, const int *n0, const int *nv, float p[][ATTN_TILE])
{
    f16_rows(vb, vf, (size_t)nt * (size_t)hd);
    accumulate_pairs(acc, vf, hd, r0, nr, n0, nv, p);
}

/* ACC = ACC * a1 + acc * a2 (the segment merge). */
static inline void merge_into(float *restrict ACC, const float *restrict acc, float a1, float a2, int n)
{
    const __m256 v1 = _mm256_set1_ps(a1), v2 = _mm256_set1_ps(a2);
    for (int d = 0; d < n; d += 8)
        _mm256_storeu_ps(ACC + d, _mm256_fmadd_ps(_mm256_loadu_ps(acc + d), v2, _mm256_mul_ps(_mm256_loadu_ps(ACC + d), v1)));
}

static inline void merge_state(row_state *S, float *restrict ACC, float m, float l, const float *restrict acc, int hd)
{
    const float M = fmaxf(S->m, m);
    const float a1 = expf(S->m - M), a2 = expf(m - M); /* exp(-inf) = 0 for an empty side */
    S->l = S->l * a1 + l * a2;
    merge_into(ACC, acc, a1, a2, hd);
    S->m = M;
}

/* Per row r in [r0, nr): the tile's max m' over its scores at [n0[r],
 * nv[r]); if it raises the row's m, l and acc are rescaled by exp(m - m');
 * then P = exp(S - m) over those positions (0 elsewhere) replaces S, and l
 * grows by sum P, summed as ((P0+P1)+(P2+P3)) over 8-lane quarters, then
 * halves, pairs, lanes. */
static void softmax_rows(float s[][ATTN_TILE], const int *n0, const int *nv, int r0, int nr, row_state *st,
                         float *restrict acc, int hd)
{
    for (int r = r0; r < nr; r++) {
        __m256 mx = _mm256_set1_ps(-INFINITY);
        for (int t = 0; t < ATTN_TILE; t += 8)
            mx = _mm256_max_ps(mx, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_loadu_ps(&s[r][t]),
                                                    tile_keep8(t, n0[r], nv[r])));
        raise_max(&st[r], acc + (size_t)r * (size_t)hd, hmax8(mx), hd);
        const __m256 mv = _mm256_set1_ps(st[r].m);
        __m256 ps[ATTN_TILE / 8];
        for (int t = 0; t < ATTN_TILE; t += 8) {
            const __m256 keep = tile_keep8(t, n0[r], nv[r]);
            ps[t / 8] = _mm256_and_ps(keep, exp_ps(_mm256_sub_ps(_mm256_loadu_ps(&s[r][t]), mv)));
            _mm256_storeu_ps(&s[r][t], ps[t / 8]);
        }
        const __m256 sum = _mm256_add_ps(_mm256_add_ps(ps[0], ps[1]), _mm256_add_ps(ps[2], ps[3]));
        st[r].l += hsum8(sum);
    }
}

/* Item description: rows r = ti * hsub + g for tokens i0 + ti (ti < nq) and
 * query heads h0 + g (g < hsub). */
typedef struct item {
    int kvh, h0, hsub;
    size_t i0, nq;
} item;

/* One segment for the item's rows: fresh online softmax over positions
 * [seg * ATTN_SEG_POS, ...) from each row's lo up to its limit. State in
 * st/acc (l = 0: the row has no position in the segment). kt, vt: a tile's
 * K and V rows read from a chunk still encoded (ATTN_TILE * head_dim values
 * each). */
static void run_segment(const mz_attn_args *a, const attn_tile_kernels *kk, const item *it,
                        const float *restrict qs, size_t seg, row_state *st, float *restrict acc,
                        float *restrict kf, float *restrict vf, mz_f16 *restrict kt, mz_f16 *restrict vt)
{
    const int hd = a->head_dim;
    const int nr = (int)it->nq * it->hsub;
    const size_t p_end = a->pos0 + it->i0 + it->nq; /* one past the last row's limit */
    float s[ATTN_MAX_ROWS][ATTN_TILE];
    int n0[ATTN_MAX_ROWS], nv[ATTN_MAX_ROWS];
    size_t lo[ATTN_MAX_ROWS]; /* each row's first position (non-decreasing: tokens ascend) */
    for (int r = 0; r < nr; r++) lo[r] = mz_attn_first_pos(a, it->i0 + (size_t)(r / it->hsub));

    for (int r = 0; r < nr; r++) {
        st[r].m = -INFINITY;
        st[r].l = 0.0f;
    }
    for (size_t d = 0; d < (size_t)nr * (size_t)hd; d++) acc[d] = 0.0f;

    const size_t s1 = MZ_MIN((seg + 1) * ATTN_SEG_POS, p_end);
    const size_t s0 = MZ_MAX(seg * ATTN_SEG_POS, lo[0] / ATTN_TILE * ATTN_TILE);
    for (size_t p0 = s0; p0 < s1; p0 += ATTN_TILE) {
        const int nt = (int)MZ_MIN((size_t)ATTN_TILE, s1 - p0);
        const size_t c = p0 / MZ_KV_CHUNK_TOKENS, row = p0 % MZ_KV_CHUNK_TOKENS;
        /* The next tile's K and V rows (contiguous within a chunk) are fetched
         * while this one computes: KV of a long context streams from DRAM. */
        if (p0 + ATTN_TILE < s1 && a->chunks[(p0 + ATTN_TILE) / MZ_KV_CHUNK_TOKENS]) {
            const size_t pn = p0 + ATTN_TILE, cn = pn / MZ_KV_CHUNK_TOKENS, rn = pn % MZ_KV_CHUNK_TOKENS;
            const mz_f16 *base = (const mz_f16 *)a->chunks[cn];
            const char *kn = (const char *)(base + mz_kv_chunk_offset(a->n_head_kv, hd, false, it->kvh, rn));
            const char *vn = (const char *)(base + mz_kv_chunk_offset(a->n_head_kv, hd, true, it->kvh, rn));
            const size_t bytes = (size_t)MZ_MIN((size_t)ATTN_TILE, s1 - pn) * (size_t)hd * sizeof(mz_f16);
            for (size_t off = 0; off < bytes; off += 64) {
                _mm_prefetch(kn + off, _MM_HINT_T0);
                _mm_prefetch(vn + off, _MM_HINT_T0);
            }
        }
        /* Rows with a position in this tile, [r_first, r_end): tokens are in
         * ascending order, so the rows whose limit is at or before the tile
         * are a prefix and those whose window starts past it a suffix. */
        int r_first = 0, r_end = nr;
        for (int r = 0; r < nr; r++) {
            const size_t lim = a->pos0 + it->i0 + (size_t)(r / it->hsub) + 1; /* positions < lim */
            nv[r] = lim > p0 ? (int)MZ_MIN((size_t)nt, lim - p0) : 0;
            n0[r] = lo[r] > p0 ? (int)MZ_MIN((size_t)nt, lo[r] - p0) : 0;
            if (nv[r] == 0) r_first = r + 1;
            if (n0[r] >= nt && r_end == nr) r_end = r;
        }
        if (r_first >= r_end) continue;
        const mz_f16 *kb = mz_attn_kv_rows(a, c, false, it->kvh, row, (size_t)nt, kt);
        const mz_f16 *vb = mz_attn_kv_rows(a, c, true, it->kvh, row, (size_t)nt, vt);
        kk->scores(qs + (size_t)r_first * (size_t)hd, kb, kf, hd, r_end - r_first, nt, a->scale, s + r_first);
        kk->softmax(s, n0, nv, r_first, r_end, st, acc, hd);
        kk->accumulate(acc, vb, vf, hd, r_first, r_end, nt, n0, nv, s);
    }
}

_Static_assert(ATTN_TILE == 32, "softmax_rows assumes 4 vectors per tile");

/* Queries of an item, row r = token-major: Q[r] = q[i0 + r / hsub][h0 + r % hsub]. */
static void load_queries(const mz_attn_args *a, const item *it, float *restrict qs)
{
    const int hd = a->head_dim;
    for (size_t ti = 0; ti < it->nq; ti++)
        for (int g = 0; g < it->hsub; g++) {
            const float *q = a->q + ((it->i0 + ti) * (size_t)a->n_head + (size_t)(it->h0 + g)) * (size_t)hd;
            memcpy(qs + (ti * (size_t)it->hsub + (size_t)g) * (size_t)hd, q, (size_t)hd * sizeof(float));
        }
}

/* The item's segments: [item_seg0, item_n_seg). */
static size_t item_seg0(const mz_attn_args *a, const item *it)
{
    return mz_attn_first_pos(a, it->i0) / ATTN_SEG_POS;
}

static size_t item_n_seg(const mz_attn_args *a, const item *it)
{
    return (a->pos0 + it->i0 + it->nq + ATTN_SEG_POS - 1) / ATTN_SEG_POS;
}

static item group_item(const mz_attn_args *a, const attn_plan *p, size_t gi)
{
    /* gi = (kvh * n_hsub + hs) * n_tb + tb */
    item it;
    const size_t tb = gi % p->n_tb, kh = gi / p->n_tb;
    it.kvh = (int)(kh / (size_t)p->n_hsub);
    const int hs = (int)(kh % (size_t)p->n_hsub);
    it.h0 = it.kvh * p->group + hs * p->hsub;
    it.hsub = MZ_MIN(p->hsub, p->group - hs * p->hsub);
    it.i0 = tb * p->tb;
    it.nq = MZ_MIN(p->tb, a->n_q - it.i0);
    return it;
}

/* The k-th claim's group, heaviest first: the last token block of every
 * (kv head, head sub-group), then the one before, ... (a bijection on
 * [0, n_grp): gi = kh * n_tb + tb). */
static size_t heaviest_first(const attn_plan *p, size_t k)
{
    const size_t n_kh = p->n_grp / p->n_tb;
    return (k % n_kh) * p->n_tb + (p->n_tb - 1 - k / n_kh);
}

static void write_out(const mz_attn_args *a, const item *it, const row_state *S, const float *ACC)
{
    const int hd = a->head_dim;
    for (size_t ti = 0; ti < it->nq; ti++)
        for (int g = 0; g < it->hsub; g++) {
            const size_t r = ti * (size_t)it->hsub + (size_t)g;
            float *o = a->out + ((it->i0 + ti) * (size_t)a->n_head + (size_t)(it->h0 + g)) * (size_t)hd;
            const __m256 inv = _mm256_set1_ps(1.0f / S[r].l);
            for (int e = 0; e < hd; e += 8) _mm256_storeu_ps(o + e, _mm256_mul_ps(inv, _mm256_loadu_ps(ACC + r * (size_t)hd + e)));
        }
}

/* Partial state of (group gi, segment seg >= p->seg0, row r): [m, l, acc[hd]]. */
static float *partial_row(const mz_attn_args *a, const attn_plan *p, size_t gi, size_t seg, int r)
{
    const size_t row_floats = (size_t)a->head_dim + 2;
    const size_t rows_per_grp = p->tb * (size_t)p->hsub;
    return a->partial + ((gi * p->n_seg + (seg - p->seg0)) * rows_per_grp + (size_t)r) * row_floats;
}

size_t mz_attn_partial_floats_avx2(const mz_attn_args *a)
{
    const attn_plan p = make_plan(a);
    const size_t need = plan_partial_floats(a, &p);
    /* The layout uses full token blocks; size for that. */
    return need ? p.n_grp * p.n_seg * p.tb * (size_t)p.hsub * ((size_t)a->head_dim + 2) : 0;
}

static bool use_split(const mz_attn_args *a, const attn_plan *p)
{
    (void)p;
    const size_t need = mz_attn_partial_floats_avx2(a);
    return need > 0 && a->partial && a->partial_floats >= need;
}

void mz_attn_tiled(const mz_attn_args *a, int ith, int nth, const attn_tile_kernels *kk)
{
    MZ_ASSERT(nth >= 1 && ith >= 0 && ith < nth);
    mz_attn_check_args(a);
    MZ_ASSERT(a->head_dim % 8 == 0);
    const int hd = a->head_dim;
    const attn_plan p = make_plan(a);
    float qs[ATTN_MAX_ROWS * MZ_ATTN_MAX_HEAD_DIM];
    float acc[ATTN_MAX_ROWS * MZ_ATTN_MAX_HEAD_DIM];
    float kf[ATTN_TILE * MZ_ATTN_MAX_HEAD_DIM], vf[ATTN_TILE * MZ_ATTN_MAX_HEAD_DIM];
    mz_f16 kt[ATTN_TILE * MZ_ATTN_MAX_HEAD_DIM], vt[ATTN_TILE * MZ_ATTN_MAX_HEAD_DIM];
    row_state st[ATTN_MAX_ROWS];

    if (use_split(a, &p)) {
        /* Items (group, segment), contiguous ranges per thread. Segments past
         * a group's last row, or below its first row's window, do not exist
         * for it. */
        const size_t n_items = p.n_grp * p.n_seg;
        const size_t b = n_items * (size_t)ith / (size_t)nth, e = n_items * ((size_t)ith + 1) / (size_t)nth;
        size_t loaded = SIZE_MAX;
        for (size_t k = b;; k++) {
            if (a->work) {
                k = atomic_fetch_add_explicit(a->work, 1, memory_order_relaxed);
                if (k >= n_items) break;
            } else if (k >= e) {
                break;
            }
            const size_t gi = k / p.n_seg, seg = p.seg0 + k % p.n_seg;
            const item it = group_item(a, &p, gi);
            if (seg < item_seg0(a, &it) || seg >= item_n_seg(a, &it)) continue;
            if (loaded != gi) {
                load_queries(a, &it, qs);
                loaded = gi;
            }
            run_segment(a, kk, &it, qs, seg, st, acc, kf, vf, kt, vt);
            const int nr = (int)it.nq * it.hsub;
            for (int r = 0; r < nr; r++) {
                float *pr = partial_row(a, &p, gi, seg, r);
                pr[0] = st[r].m;
                pr[1] = st[r].l;
                memcpy(pr + 2, acc + (size_t)r * (size_t)hd, (size_t)hd * sizeof(float));
            }
        }
        return;
    }

    float ACC[ATTN_MAX_ROWS * MZ_ATTN_MAX_HEAD_DIM];
    row_state S[ATTN_MAX_ROWS];
    /* Interleaved groups: later token blocks see more positions (causal). */
    for (size_t gi = (size_t)ith;; gi += (size_t)nth) {
        if (a->work) {
            gi = atomic_fetch_add_explicit(a->work, 1, memory_order_relaxed);
            if (gi >= p.n_grp) break;
            if (!a->work_in_index_order) gi = heaviest_first(&p, gi);
        }
        if (gi >= p.n_grp) break;
        const item it = group_item(a, &p, gi);
        const int nr = (int)it.nq * it.hsub;
        load_queries(a, &it, qs);
        for (int r = 0; r < nr; r++) {
            S[r].m = -INFINITY;
            S[r].l = 0.0f;
        }
        for (size_t d = 0; d < (size_t)nr * (size_t)hd; d++) ACC[d] = 0.0f;
        const size_t ns = item_n_seg(a, &it);
        for (size_t seg = item_seg0(a, &it); seg < ns; seg++) {
            run_segment(a, kk, &it, qs, seg, st, acc, kf, vf, kt, vt);
            for (int r = 0; r < nr; r++)
                if (st[r].l > 0.0f)
                    merge_state(&S[r], ACC + (size_t)r * (size_t)hd, st[r].m, st[r].l, acc + (size_t)r * (size_t)hd, hd);
        }
        write_out(a, &it, S, ACC);
    }
}

static const attn_tile_kernels avx2_tiles = {scores, accumulate, softmax_rows};

void mz_attn_avx2(const mz_attn_args *a, int ith, int nth) { mz_attn_tiled(a, ith, nth, &avx2_tiles); }

/* SwiGLU shares the softmax's e^x (attn_simd.h), so it is compiled here. */
void mz_swiglu_avx2(const float *restrict g, const float *restrict u, float *restrict y, size_t n)
{
    swiglu_rows(g, u, y, n);
}

void mz_attn_merge_avx2(const mz_attn_args *a, int ith, int nth)
{
    MZ_ASSERT(nth >= 1 && ith >= 0 && ith < nth);
    const attn_plan p = make_plan(a);
    if (!use_split(a, &p)) return;
    const int hd = a->head_dim;
    float ACC[ATTN_MAX_ROWS * MZ_ATTN_MAX_HEAD_DIM];
    row_state S[ATTN_MAX_ROWS];
    for (size_t gi = (size_t)ith;; gi += (size_t)nth) {
        if (a->work) gi = atomic_fetch_add_explicit(a->work, 1, memory_order_relaxed);
        if (gi >= p.n_grp) break;
        const item it = group_item(a, &p, gi);
        const int nr = (int)it.nq * it.hsub;
        for (int r = 0; r < nr; r++) {
            S[r].m = -INFINITY;
            S[r].l = 0.0f;
        }
        for (size_t d = 0; d < (size_t)nr * (size_t)hd; d++) ACC[d] = 0.0f;
        const size_t ns = item_n_seg(a, &it);
        for (size_t seg = item_seg0(a, &it); seg < ns; seg++)
            for (int r = 0; r < nr; r++) {
                const float *pr = partial_row(a, &p, gi, seg, r);
                if (pr[1] > 0.0f) merge_state(&S[r], ACC + (size_t)r * (size_t)hd, pr[0], pr[1], pr + 2, hd);
            }
        write_out(a, &it, S, ACC);
    }
}

#else
/* Not an x86-64 build with AVX2 flags: nothing to compile here. */
typedef int mz_attn_avx2_unused;
#endif
