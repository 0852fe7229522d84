/*
 * work_split.h — how a fused group of matrix products (up to 3 weight
 * matrices sharing the same activation rows) is cut into work items that the
 * compute threads claim from one counter. A pure planner: sizes in, plan out.
 *
 * An item is (row piece, token block). The row pieces cut the ops' rows,
 * concatenated in op order, at equal cost (rows x columns), on multiples of
 * each op's row granularity; a piece may span the end of one op and the start
 * of the next (it is then several segments). Token blocks split the batch
 * evenly. Items are numbered piece-major (item i: piece i / n_tb, block
 * i % n_tb), so the threads that run at the same moment mostly share weight
 * pieces, read once from memory into the shared L3.
 *
 * Sizes (MZ_SPLIT_*): decode (few tokens): one token block, 2 pieces per
 * thread or pieces of about 64 rows if that gives more (up to 256 pieces,
 * a multiple of the thread count); forward.c runs decode on its row slices
 * instead (measured faster on the 16-vCPU device), these sizes remain for
 * bench_split's comparison and the planner's invariants. A batch: MZ_SPLIT_ITEMS_PER_THREAD items per thread
 * or one per 64 rows if that gives more (a multiple of the thread count), pieces no
 * smaller than MZ_SPLIT_MIN_ROWS rows where the rows allow, the tokens split
 * into a number of blocks dividing the item count (so it is a multiple of
 * the thread count) chosen for the items' reuse of what they read
 * (work_split.c, item_reuse).
 * Example, SmolLM2 (576 x 576 output product, 512 tokens, 16 threads): 8
 * pieces of 72 rows x 8 blocks of 64 tokens = 64 items, 4 per thread; the
 * row slices of 64 this replaces gave 9 items, so 7 of 16 threads waited.
 *
 * The plan does not change any value: every output (row, token) is in
 * exactly one item, and the kernels compute it the same way in any tile.
 */
#ifndef MZ_WORK_SPLIT_H
#define MZ_WORK_SPLIT_H

#include <stdbool.h>
#include <stddef.h>

#define MZ_SPLIT_MAX_OPS 3
#define MZ_SPLIT_MAX_PIECES 256
#define MZ_SPLIT_MAX_SEGS (MZ_SPLIT_MAX_PIECES + MZ_SPLIT_MAX_OPS)
#define MZ_SPLIT_ITEMS_PER_THREAD 4
#define MZ_SPLIT_DECODE_PIECES_PER_THREAD 2
#define MZ_SPLIT_MIN_ROWS 32    /* rows per piece (batch), where the rows allow */
#define MZ_SPLIT_MIN_TOKENS 16  /* tokens per block */
#define MZ_SPLIT_DECODE_TOKENS 8 /* fewer tokens: decode sizes */
#define MZ_SPLIT_DECODE_ROWS 64  /* rows per piece (decode) / per item (batch) where that gives more */

typedef struct mz_split_op {
    size_t n_rows, n_cols;
    size_t row_group; /* piece boundaries within this op are multiples of it (>= 1) */
} mz_split_op;

typedef struct mz_split_seg {
    int op;
    size_t r0, r1;
} mz_split_seg;

typedef struct mz_split_plan {
    size_t n_pieces, n_tb, n_tok;
    size_t piece_seg[MZ_SPLIT_MAX_PIECES + 1]; /* piece p: segs[piece_seg[p] .. piece_seg[p+1]) */
    mz_split_seg segs[MZ_SPLIT_MAX_SEGS];
} mz_split_plan;

/* Plans ops[0..n_ops) (1..MZ_SPLIT_MAX_OPS, each n_rows a multiple of its
 * row_group or its last group ragged) for n_tok tokens on nth threads. */
void mz_split_plan_make(mz_split_plan *p, const mz_split_op *ops, int n_ops, size_t n_tok, int nth);

static inline size_t mz_split_n_items(const mz_split_plan *p) { return p->n_pieces * p->n_tb; }

/* Token block b of the plan: [*t0, *t1). */
static inline void mz_split_tokens(const mz_split_plan *p, size_t b, size_t *t0, size_t *t1)
{
    *t0 = p->n_tok * b / p->n_tb;
    *t1 = p->n_tok * (b + 1) / p->n_tb;
}

#endif /* MZ_WORK_SPLIT_H */
