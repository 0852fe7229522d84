/*
 * The matrix-product work planner (src/engine/work_split.h): every output
 * (op, row, token) lies in exactly one item, piece boundaries respect each
 * op's row group, the item count is a multiple of the thread count where the
 * shape allows, and the pieces' costs are within one row group of equal.
 * Shapes: SmolLM2-135M, qwen3-0.6b and llama3.2-1b products at 1-16 threads
 * for decode and 512-token batches, plus odd sizes.
 */
#include "testutil.h"

#include "engine/work_split.h"

#include <stdlib.h>

static int g_fail_shape;

static void check_plan(const mz_split_op *ops, int n_ops, size_t n_tok, int nth, bool expect_exact)
{
    static mz_split_plan p;
    mz_split_plan_make(&p, ops, n_ops, n_tok, nth);
    CHECK(p.n_pieces >= 1 && p.n_pieces <= MZ_SPLIT_MAX_PIECES && p.n_tb >= 1 && p.n_tb <= n_tok);
    /* coverage: count every (op, row) once per token block */
    size_t total_rows = 0, cost = 0;
    for (int i = 0; i < n_ops; i++) {
        total_rows += ops[i].n_rows;
        cost += ops[i].n_rows * ops[i].n_cols;
    }
    unsigned char *seen = calloc(total_rows, 1);
    size_t max_c = 0, min_c = (size_t)-1, max_group_cost = 0;
    for (int i = 0; i < n_ops; i++)
        if (ops[i].row_group * ops[i].n_cols > max_group_cost) max_group_cost = ops[i].row_group * ops[i].n_cols;
    for (size_t pc = 0; pc < p.n_pieces; pc++) {
        CHECK(p.piece_seg[pc] < p.piece_seg[pc + 1]); /* no empty piece */
        size_t c = 0;
        for (size_t g = p.piece_seg[pc]; g < p.piece_seg[pc + 1]; g++) {
            const mz_split_seg *s = &p.segs[g];
            CHECK(s->op >= 0 && s->op < n_ops && s->r0 < s->r1 && s->r1 <= ops[s->op].n_rows);
            CHECK(s->r0 % ops[s->op].row_group == 0);
            CHECK(s->r1 % ops[s->op].row_group == 0 || s->r1 == ops[s->op].n_rows);
            size_t base = 0;
            for (int i = 0; i < s->op; i++) base += ops[i].n_rows;
            for (size_t r = s->r0; r < s->r1; r++) seen[base + r]++;
            c += (s->r1 - s->r0) * ops[s->op].n_cols;
        }
        max_c = c > max_c ? c : max_c;
        min_c = c < min_c ? c : min_c;
    }
    for (size_t r = 0; r < total_rows; r++) CHECK_MSG(seen[r] == 1, "row %zu covered %d times", r, seen[r]);
    free(seen);
    /* token blocks tile [0, n_tok) */
    size_t next = 0;
    for (size_t b = 0; b < p.n_tb; b++) {
        size_t t0, t1;
        mz_split_tokens(&p, b, &t0, &t1);
        CHECK(t0 == next && t1 > t0);
        next = t1;
    }
    CHECK(next == n_tok);
    /* balance: each piece within one row group of cost / n_pieces */
    const size_t ideal = cost / p.n_pieces;
    CHECK_MSG(max_c <= ideal + max_group_cost && min_c + max_group_cost >= ideal,
              "pieces %zu..%zu, ideal %zu (nth %d, tokens %zu)", min_c, max_c, ideal, nth, n_tok);
    if (expect_exact) {
        const size_t n_items = mz_split_n_items(&p);
        CHECK_MSG(n_items % (size_t)nth == 0 && n_items >= (size_t)nth,
                  "%zu items for %d threads (tokens %zu, rows of op 0 %zu)", n_items, nth, n_tok, ops[0].n_rows);
        if (n_items % (size_t)nth) g_fail_shape++;
    }
}

int main(void)
{
    /* { rows, cols, row group } */
    const mz_split_op smol_qkv[3] = {{576, 576, 4}, {192, 576, 4}, {192, 576, 4}};
    const mz_split_op smol_o[1] = {{576, 576, 4}}, smol_gu[2] = {{1536, 576, 4}, {1536, 576, 4}};
    const mz_split_op smol_down[1] = {{576, 1536, 4}}, smol_out[1] = {{49152, 576, 4}};
    const mz_split_op smol_qkv8[3] = {{576, 576, 8}, {192, 576, 8}, {192, 576, 8}};
    const mz_split_op qwen_qkv[3] = {{2048, 1024, 4}, {1024, 1024, 4}, {1024, 1024, 4}};
    const mz_split_op qwen_down[1] = {{1024, 3072, 8}}, llama_down[1] = {{2048, 8192, 4}};
    const struct { const mz_split_op *ops; int n; } shapes[] = {
        {smol_qkv, 3}, {smol_o, 1}, {smol_gu, 2}, {smol_down, 1}, {smol_out, 1},
        {smol_qkv8, 3}, {qwen_qkv, 3}, {qwen_down, 1}, {llama_down, 1},
    };
    const int threads[] = {1, 2, 3, 4, 6, 7, 8, 12, 16};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
            check_plan(shapes[s].ops, shapes[s].n, 512, threads[t], true);
            check_plan(shapes[s].ops, shapes[s].n, 64, threads[t], true);
            check_plan(shapes[s].ops, shapes[s].n, 1, threads[t], false);
            check_plan(shapes[s].ops, shapes[s].n, 7, threads[t], false);
        }

    /* The SmolLM2 output product at 16 threads, 512 tokens: 64 items; of the
     * block counts 4..32 (pieces of at most 18 x 32 rows) 8 pieces of 72 rows
     * x 8 blocks of 64 tokens reuse their reads most (72 * 64 / (72 + 128) =
     * 23.0, against 15.8 for 36 x 128 and 22.2 for 144 x 32). */
    {
        static mz_split_plan p;
        mz_split_plan_make(&p, smol_o, 1, 512, 16);
        CHECK_EQ_INT(p.n_pieces, 8);
        CHECK_EQ_INT(p.n_tb, 8);
        CHECK_EQ_INT(p.segs[0].r1 - p.segs[0].r0, 72);
    }
    /* llama3.2-1b's q/k/v (3,072 rows) at 16 threads, 512 tokens: 16 pieces
     * of 192 rows x 4 blocks of 128 tokens (54.9), not 64 x 1 of 48 rows x
     * 512 tokens (22.9), which read every activation row for 48 rows. */
    {
        static mz_split_plan p;
        const mz_split_op llama_qkv[3] = {{2048, 2048, 4}, {512, 2048, 4}, {512, 2048, 4}};
        mz_split_plan_make(&p, llama_qkv, 3, 512, 16);
        CHECK_EQ_INT(p.n_pieces, 16);
        CHECK_EQ_INT(p.n_tb, 4);
        CHECK_EQ_INT(p.segs[0].r1 - p.segs[0].r0, 192);
    }
    /* A piece spans two ops where the costs cut there: SmolLM2 q/k/v at 7 threads. */
    {
        static mz_split_plan p;
        mz_split_plan_make(&p, smol_qkv, 3, 512, 7);
        size_t spanning = 0;
        for (size_t pc = 0; pc < p.n_pieces; pc++) spanning += p.piece_seg[pc + 1] - p.piece_seg[pc] > 1;
        CHECK(spanning >= 1);
    }
    /* Tiny shapes: fewer rows than threads, ragged last group, one token. */
    {
        const mz_split_op tiny[2] = {{6, 64, 4}, {10, 32, 8}};
        check_plan(tiny, 2, 1, 16, false);
        check_plan(tiny, 2, 300, 16, false);
        check_plan(tiny, 2, 3, 1, false);
        const mz_split_op one[1] = {{1, 8, 4}};
        check_plan(one, 1, 1, 8, false);
        check_plan(one, 1, 100, 8, false);
    }
    CHECK(g_fail_shape == 0);
    return t_done("test_work_split");
}
