/*
 * attn_tiled.h — the tiled attention of attn_avx2.c, shared with
 * attn_avx512.c (x86-64 only).
 *
 * attn_avx2.c owns the plan, the work items, the segments and their merge;
 * an ISA supplies the three steps of a tile, where the time goes. Both ISAs'
 * steps follow the same per-element arithmetic (score lanes: d mod 8, summed
 * as ((x0+x1)+(x2+x3))+((x4+x5)+(x6+x7)), then times scale; softmax: the same
 * exp polynomial, max and sum reduced in one order; weighted V: one FMA per
 * position, ascending), so AVX-512 gives the AVX2 kernel's bits and every
 * invariance the forward pass relies on (thread count, batch, token split)
 * holds across both.
 */
#ifndef MZ_ATTN_TILED_H
#define MZ_ATTN_TILED_H

#include "kernels_impl.h"

#define ATTN_TILE 32        /* positions per tile (one chunk's rows) */
#define ATTN_MAX_ROWS 32    /* query rows per work item */
#define ATTN_SEG_POS 1024   /* positions per segment of the online softmax */

/* A query row's online-softmax state: running max and sum of exp. */
typedef struct attn_row_state {
    float m, l;
} attn_row_state;

typedef struct attn_tile_kernels {
    /* S[r][t] = scale * (Q[r] . f32(K[t])) for r < nr, t < nt; K[t] is the
     * F16 row kb + t * hd; kf is scratch for ATTN_TILE * hd floats. */
    void (*scores)(const float *restrict qs, const mz_f16 *restrict kb, float *restrict kf, int hd, int nr,
                   int nt, float scale, float s[][ATTN_TILE]);
    /* acc[r] += sum over n0[r] <= t < nv[r], ascending, of P[r][t] *
     * f32(V[t]) for rows r0 <= r < nr; V[t] is vb + t * hd for t < nt (the
     * rows below every n0 may hold anything: converted, never used); vf is
     * scratch for ATTN_TILE * hd floats. */
    void (*accumulate)(float *restrict acc, const mz_f16 *restrict vb, float *restrict vf, int hd, int r0,
                       int nr, int nt, const int *n0, const int *nv, float p[][ATTN_TILE]);
    /* For rows r0 <= r < nr: the tile's online-softmax step (attn_avx2.c's
     * softmax_rows has the exact arithmetic every ISA must repeat): may
     * raise st[r].m (rescaling st[r].l and acc row r), turns s[r] into
     * P = exp(s - m) on the row's valid positions [n0[r], nv[r]) (0 outside
     * them, whatever s holds there) and adds sum P to st[r].l. */
    void (*softmax)(float s[][ATTN_TILE], const int *n0, const int *nv, int r0, int nr, attn_row_state *st,
                    float *restrict acc, int hd);
} attn_tile_kernels;

/* mz_attn's contract, with the given tile steps (head_dim % 8 == 0 and
 * whatever more the steps need). Merge: mz_attn_merge_avx2; scratch
 * size: mz_attn_partial_floats_avx2. */
void mz_attn_tiled(const mz_attn_args *a, int ith, int nth, const attn_tile_kernels *kk);

#endif /* MZ_ATTN_TILED_H */
