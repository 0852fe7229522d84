/*
 * work_split.c — the planner of work_split.h.
 */
#include "work_split.h"

#include "../core/core.h"

static size_t op_units(const mz_split_op *o) { return (o->n_rows + o->row_group - 1) / o->row_group; }

/* How much work an item of r weight rows x t tokens does per byte it reads
 * into its core's caches (the common column count aside): r * t
 * multiply-adds against r weight rows and t activation rows, an activation
 * value taking twice a weight value's bytes (F32 activations against F16
 * weights, q8 activations against q4 weights; against q8 weights it is the
 * same bytes, so there the rule leans to fewer rows than would be best). At
 * 2048 columns an item of 48 rows x 512 tokens reads 4 MiB of activations
 * and 192 KiB of weights; 192 x 128 does the same work on 1 MiB and 768 KiB,
 * 2.4x fewer bytes. */
static double item_reuse(double r, double t) { return r * t / (r + 2 * t); }

/* Pieces and token blocks for a batch: n_items = MZ_SPLIT_ITEMS_PER_THREAD *
 * nth (or one per 64 rows if more) where the shape allows, pieces of at
 * least MZ_SPLIT_MIN_ROWS rows and blocks of at least MZ_SPLIT_MIN_TOKENS
 * tokens, and among the block counts dividing n_items (so that pieces x
 * blocks is exactly n_items: every thread the same number) the one whose
 * items reuse their reads most (item_reuse; the fewest blocks on a tie). */
static void batch_shape(size_t rows, size_t units, size_t n_tok, int nth, size_t *pieces, size_t *n_tb)
{
    /* No coarser than 64-row slices of a large product (gate/up at 2
     * threads: 48 items, not 8), so that a thread the OS deschedules — the
     * restore workers share the cores during mz_prefill_restore — holds
     * little of the job; a multiple of nth either way. */
    size_t want = MZ_MAX((size_t)MZ_SPLIT_ITEMS_PER_THREAD * (size_t)nth, rows / MZ_SPLIT_DECODE_ROWS);
    want = MZ_MIN(want, (size_t)MZ_SPLIT_MAX_PIECES);
    if (want >= (size_t)nth) want -= want % (size_t)nth;
    size_t p_max = rows / MZ_SPLIT_MIN_ROWS;
    p_max = MZ_MAX(p_max, (size_t)1);
    p_max = MZ_MIN(p_max, units);
    p_max = MZ_MIN(p_max, (size_t)MZ_SPLIT_MAX_PIECES);
    size_t tb_max = n_tok / MZ_SPLIT_MIN_TOKENS;
    tb_max = MZ_MAX(tb_max, (size_t)1);
    double best = 0;
    size_t best_tb = 0;
    for (size_t d = 1; d <= tb_max && d <= want; d++) {
        if (want % d || want / d > p_max) continue;
        const double reuse = item_reuse((double)rows / (double)(want / d), (double)n_tok / (double)d);
        if (reuse > best) {
            best = reuse;
            best_tb = d;
        }
    }
    if (best_tb) {
        *pieces = want / best_tb;
        *n_tb = best_tb;
        return;
    }
    /* Too small for want items: as many as the limits allow. */
    *pieces = p_max;
    *n_tb = MZ_MIN(tb_max, (want + p_max - 1) / p_max);
}

void mz_split_plan_make(mz_split_plan *p, const mz_split_op *ops, int n_ops, size_t n_tok, int nth)
{
    MZ_ASSERT(p && ops && n_ops >= 1 && n_ops <= MZ_SPLIT_MAX_OPS && nth >= 1 && n_tok >= 1);
    size_t rows = 0, units = 0, cost = 0;
    for (int i = 0; i < n_ops; i++) {
        MZ_ASSERT(ops[i].row_group >= 1 && ops[i].n_rows >= 1);
        rows += ops[i].n_rows;
        units += op_units(&ops[i]);
        cost += ops[i].n_rows * ops[i].n_cols;
    }
    size_t want_pieces, n_tb;
    if (n_tok < MZ_SPLIT_DECODE_TOKENS) {
        /* At least 2 pieces per thread; a large matrix (the output head) in
         * pieces of about MZ_SPLIT_DECODE_ROWS rows, so a descheduled thread
         * leaves little behind; a multiple of nth so that all get as many. */
        want_pieces = MZ_MAX((size_t)MZ_SPLIT_DECODE_PIECES_PER_THREAD * (size_t)nth, rows / MZ_SPLIT_DECODE_ROWS);
        want_pieces = MZ_MIN(want_pieces, (size_t)MZ_SPLIT_MAX_PIECES);
        if (want_pieces >= (size_t)nth) want_pieces -= want_pieces % (size_t)nth;
        want_pieces = MZ_MIN(want_pieces, units);
        n_tb = 1;
    } else {
        batch_shape(rows, units, n_tok, nth, &want_pieces, &n_tb);
    }
    p->n_tok = n_tok;
    p->n_tb = n_tb;

    /* Cut the concatenated units at costs cost * (j + 1) / want_pieces, each
     * cut on the unit boundary nearest to it (a unit goes to piece j while
     * its midpoint is at or before piece j's end). */
    size_t piece = 0, nseg = 0, cum = 0;
    bool open = false;
    p->piece_seg[0] = 0;
    for (int i = 0; i < n_ops; i++) {
        const mz_split_op *o = &ops[i];
        for (size_t r = 0; r < o->n_rows; r += o->row_group) {
            const size_t r1 = MZ_MIN(r + o->row_group, o->n_rows);
            const size_t c = (r1 - r) * o->n_cols;
            /* 2 * (end of piece) compared with 2 * midpoint, in integers */
            while (open && piece + 1 < want_pieces &&
                   2 * cum + c > 2 * (cost * (piece + 1) / want_pieces)) {
                p->piece_seg[++piece] = nseg;
                open = false;
            }
            if (open && p->segs[nseg - 1].op == i && p->segs[nseg - 1].r1 == r) {
                p->segs[nseg - 1].r1 = r1;
            } else {
                MZ_ASSERT(nseg < MZ_SPLIT_MAX_SEGS);
                p->segs[nseg++] = (mz_split_seg){.op = i, .r0 = r, .r1 = r1};
            }
            open = true;
            cum += c;
        }
    }
    p->n_pieces = piece + 1;
    p->piece_seg[p->n_pieces] = nseg;
}
