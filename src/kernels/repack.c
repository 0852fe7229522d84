/*
 * repack.c — the "x8" weight layout (8 rows interleaved per 32-value block)
 * for Q4_0, Q4_1, Q8_0, Q5_0, Q5_1 and IQ4_NL (and per 256-value super-block
 * for Q4_K, Q5_K and Q6_K), its in-place conversion, and the scalar reference
 * of the kernels that read it.
 *
 * Layout. A tensor of n_rows (a multiple of 8) rows keeps its size: the 8
 * rows of group g still occupy bytes [g * 8 * row_bytes, (g + 1) * 8 * row_bytes),
 * now as nb = n_cols / 32 group blocks of 8 * block_bytes each:
 *   Q4_0 (144 B): f16 d[8]; u8 qs[128]
 *   Q4_1 (160 B): f16 d[8]; f16 m[8]; u8 qs[128]
 *   Q8_0 (272 B): f16 d[8]; u8 q[256]
 *   Q5_0 (176 B): f16 d[8]; u32 qh[8]; u8 qs[128]   (qh as stored in the row)
 *   Q5_1 (192 B): f16 d[8]; f16 m[8]; u32 qh[8]; u8 qs[128]
 *   IQ4_NL (144 B): as Q4_0 (its nibbles index the grid)
 * d[r] (and m[r]) belong to row r of the group. The quants are in chunks of
 * 32 bytes, byte 4r + j of a chunk holding row r:
 *   Q4, Q5: chunk c (0..3) = the plain qs[4c .. 4c+3] of row r, i.e. low
 *       nibble = value 4c+j, high nibble = value 16+4c+j (Q5_0: the fifth
 *       bits stay in qh[r], one 32-bit lane per row);
 *   Q8: chunk c (0..7) = value 4c+j of row r, stored as q ^ 0x80 (= q + 128 as u8).
 * So one 32-byte load is 8 lanes of one row each: a u8 x s8 dot instruction
 * (vpdpbusd) against 4 activation bytes broadcast to every lane forms 4
 * products of 8 rows at once, and a block's integer sum ends up whole in
 * the row's lane. The scales are applied once per block for 8 rows.
 *
 * Canonical arithmetic of the x8 kernels (every output, whatever its tile):
 *   isum_b = exact integer dot of block b (Q4_0: sum (nib - 8) * x;
 *            Q8_0: sum q * x; Q4_1: sum nib * x; Q5_0: sum (q5 - 16) * x;
 *            Q5_1: sum q5 * x; IQ4_NL: sum grid[nib] * x)
 *   acc    = fma(f32(dw_b) * f32(dx_b), f32(isum_b), acc)   over b in order
 *   Q4_1, Q5_1: summ = fma(f32(mw_b), f32(sx_b), summ); y = acc + summ
 * isum_b is below 2^24 in magnitude, so f32(isum_b) is exact, and the SIMD
 * versions (gemm_x8_x86.h) give these very bits. It is not the plain
 * kernels' order (8 partial lanes per output, ggml's AVX2 order): logits of
 * a repacked model differ from an unrepacked one in the last bits
 * (test_forward_golden's tolerance covers it; llama.cpp's own repacked
 * Q4_0 path on x86 sums whole blocks the same way).
 *
 * K-quants (Q4_K, Q5_K, Q6_K): a group block is the 8 rows' super-blocks
 * word-interleaved: 4-byte word k of row r's block at byte 32k + 4r, and a
 * block's last bytes past its whole words (Q6_K's f16 d) at the end, row
 * after row. Every field of these blocks starts on a word, so one 32-byte
 * load is one word of a field for all 8 rows, one row per 32-bit lane:
 * d | dmin, the scale words, qh, and 4 quant bytes each (Q4_K qs word k:
 * low nibbles values 64(k/8) + 4(k%8) + 0..3, high nibbles 32 further on).
 * The x8 kernels (kquant_x8_x86.h) compute the plain K-quant arithmetic
 * (kquant.h: exact integer sums per super-block, then its float steps), so a
 * K-quant tensor gives the same bits repacked or not, on every ISA.
 *
 * The conversion is a byte permutation (plus the Q8 sign flip) within each
 * group of 8 rows: reversible, no size change, so the tensor offsets and the
 * memory units are the same as the file's.
 */
#include "kernels_impl.h"

#include <string.h>

size_t mz_x8_group_block_bytes(int type)
{
    switch (type) {
    case MZ_DT_Q4_0: return 8 * sizeof(mz_block_q4_0);
    case MZ_DT_Q4_1: return 8 * sizeof(mz_block_q4_1);
    case MZ_DT_Q8_0: return 8 * sizeof(mz_block_q8_0);
    case MZ_DT_Q5_0: return 8 * sizeof(mz_block_q5_0);
    case MZ_DT_Q5_1: return 8 * sizeof(mz_block_q5_1);
    case MZ_DT_IQ4_NL: return 8 * sizeof(mz_block_iq4_nl);
    case MZ_DT_Q4_K: return 8 * sizeof(mz_block_q4_K);
    case MZ_DT_Q5_K: return 8 * sizeof(mz_block_q5_K);
    case MZ_DT_Q6_K: return 8 * sizeof(mz_block_q6_K);
    default: return 0;
    }
}

bool mz_x8_shape_ok(int type, size_t n_rows, size_t n_cols)
{
    return mz_x8_group_block_bytes(type) && n_rows > 0 && n_rows % 8 == 0 && n_cols > 0 &&
           n_cols % mz_dtype_block_len(type) == 0 && n_cols <= (size_t)MZ_QK * MZ_X8_MAX_BLOCKS;
}

/* The K-quants' x8 layout: words interleaved (see the header). */
static bool is_kquant_x8(int type) { return type == MZ_DT_Q4_K || type == MZ_DT_Q5_K || type == MZ_DT_Q6_K; }

/* Row r's K-quant block (bs bytes) to or from its group block (to_group:
 * src a plain block, dst the group block; else the reverse): word k at
 * group byte 32k + 4r, the last bs % 4 bytes at 32 (bs / 4) + (bs % 4) r. */
static void kquant_row_block(size_t bs, const uint8_t *src, uint8_t *dst, int r, bool to_group)
{
    const size_t nw = bs / 4, tail = bs % 4;
    for (size_t k = 0; k < nw; k++) {
        const size_t go = 32 * k + 4 * (size_t)r;
        memcpy(dst + (to_group ? go : 4 * k), src + (to_group ? 4 * k : go), 4);
    }
    if (tail) {
        const size_t go = 32 * nw + tail * (size_t)r;
        memcpy(dst + (to_group ? go : 4 * nw), src + (to_group ? 4 * nw : go), tail);
    }
}

/* One group: plain rows in src (8 rows of wrb bytes) -> x8 layout in dst. */
static void pack_group(int type, const uint8_t *src, size_t wrb, uint8_t *dst, size_t nb)
{
    const size_t gbb = mz_x8_group_block_bytes(type);
    if (is_kquant_x8(type)) {
        for (size_t b = 0; b < nb; b++)
            for (int r = 0; r < 8; r++) kquant_row_block(gbb / 8, src + r * wrb + b * (gbb / 8), dst + b * gbb, r, true);
        return;
    }
    for (size_t b = 0; b < nb; b++) {
        uint8_t *g = dst + b * gbb;
        for (int r = 0; r < 8; r++) {
            const uint8_t *row = src + (size_t)r * wrb;
            if (type == MZ_DT_Q4_0 || type == MZ_DT_IQ4_NL) { /* the same block bytes */
                const mz_block_q4_0 *blk = (const mz_block_q4_0 *)row + b;
                memcpy(g + 2 * r, &blk->d, 2);
                for (int c = 0; c < 4; c++) memcpy(g + 16 + 32 * c + 4 * r, blk->qs + 4 * c, 4);
            } else if (type == MZ_DT_Q4_1) {
                const mz_block_q4_1 *blk = (const mz_block_q4_1 *)row + b;
                memcpy(g + 2 * r, &blk->d, 2);
                memcpy(g + 16 + 2 * r, &blk->m, 2);
                for (int c = 0; c < 4; c++) memcpy(g + 32 + 32 * c + 4 * r, blk->qs + 4 * c, 4);
            } else if (type == MZ_DT_Q5_0) {
                const mz_block_q5_0 *blk = (const mz_block_q5_0 *)row + b;
                memcpy(g + 2 * r, &blk->d, 2);
                memcpy(g + 16 + 4 * r, blk->qh, 4);
                for (int c = 0; c < 4; c++) memcpy(g + 48 + 32 * c + 4 * r, blk->qs + 4 * c, 4);
            } else if (type == MZ_DT_Q5_1) {
                const mz_block_q5_1 *blk = (const mz_block_q5_1 *)row + b;
                memcpy(g + 2 * r, &blk->d, 2);
                memcpy(g + 16 + 2 * r, &blk->m, 2);
                memcpy(g + 32 + 4 * r, blk->qh, 4);
                for (int c = 0; c < 4; c++) memcpy(g + 64 + 32 * c + 4 * r, blk->qs + 4 * c, 4);
            } else {
                const mz_block_q8_0 *blk = (const mz_block_q8_0 *)row + b;
                memcpy(g + 2 * r, &blk->d, 2);
                for (int c = 0; c < 8; c++)
                    for (int j = 0; j < 4; j++) g[16 + 32 * c + 4 * r + j] = (uint8_t)blk->qs[4 * c + j] ^ 0x80u;
            }
        }
    }
}

/* Row r of one group: x8 layout in src -> plain block bytes in row. */
static void unpack_row(int type, const uint8_t *src, int r, uint8_t *row, size_t nb)
{
    const size_t gbb = mz_x8_group_block_bytes(type);
    if (is_kquant_x8(type)) {
        for (size_t b = 0; b < nb; b++) kquant_row_block(gbb / 8, src + b * gbb, row + b * (gbb / 8), r, false);
        return;
    }
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *g = src + b * gbb;
        if (type == MZ_DT_Q4_0 || type == MZ_DT_IQ4_NL) {
            mz_block_q4_0 *blk = (mz_block_q4_0 *)row + b;
            memcpy(&blk->d, g + 2 * r, 2);
            for (int c = 0; c < 4; c++) memcpy(blk->qs + 4 * c, g + 16 + 32 * c + 4 * r, 4);
        } else if (type == MZ_DT_Q4_1) {
            mz_block_q4_1 *blk = (mz_block_q4_1 *)row + b;
            memcpy(&blk->d, g + 2 * r, 2);
            memcpy(&blk->m, g + 16 + 2 * r, 2);
            for (int c = 0; c < 4; c++) memcpy(blk->qs + 4 * c, g + 32 + 32 * c + 4 * r, 4);
        } else if (type == MZ_DT_Q5_0) {
            mz_block_q5_0 *blk = (mz_block_q5_0 *)row + b;
            memcpy(&blk->d, g + 2 * r, 2);
            memcpy(blk->qh, g + 16 + 4 * r, 4);
            for (int c = 0; c < 4; c++) memcpy(blk->qs + 4 * c, g + 48 + 32 * c + 4 * r, 4);
        } else if (type == MZ_DT_Q5_1) {
            mz_block_q5_1 *blk = (mz_block_q5_1 *)row + b;
            memcpy(&blk->d, g + 2 * r, 2);
            memcpy(&blk->m, g + 16 + 2 * r, 2);
            memcpy(blk->qh, g + 32 + 4 * r, 4);
            for (int c = 0; c < 4; c++) memcpy(blk->qs + 4 * c, g + 64 + 32 * c + 4 * r, 4);
        } else {
            mz_block_q8_0 *blk = (mz_block_q8_0 *)row + b;
            memcpy(&blk->d, g + 2 * r, 2);
            for (int c = 0; c < 8; c++)
                for (int j = 0; j < 4; j++) blk->qs[4 * c + j] = (int8_t)(g[16 + 32 * c + 4 * r + j] ^ 0x80u);
        }
    }
}

static void unpack_group(int type, const uint8_t *src, uint8_t *dst, size_t wrb, size_t nb)
{
    for (int r = 0; r < 8; r++) unpack_row(type, src, r, dst + (size_t)r * wrb, nb);
}

/* Repacks (pack) or unpacks the tensor in place, one group of 8 rows at a
 * time through scratch (8 rows' bytes). */
static void convert_groups(int type, void *data, size_t n_rows, size_t n_cols, void *scratch, bool pack)
{
    MZ_ASSERT(mz_x8_shape_ok(type, n_rows, n_cols));
    const size_t wrb = mz_dtype_row_bytes(type, n_cols), nb = n_cols / mz_dtype_block_len(type);
    for (size_t g = 0; g < n_rows / 8; g++) {
        uint8_t *p = (uint8_t *)data + g * 8 * wrb;
        memcpy(scratch, p, 8 * wrb);
        if (pack) pack_group(type, scratch, wrb, p, nb);
        else unpack_group(type, scratch, p, wrb, nb);
    }
}

void mz_repack_x8(int type, void *data, size_t n_rows, size_t n_cols, void *scratch)
{
    convert_groups(type, data, n_rows, n_cols, scratch, true);
}

void mz_unpack_x8(int type, void *data, size_t n_rows, size_t n_cols, void *scratch)
{
    convert_groups(type, data, n_rows, n_cols, scratch, false);
}

void mz_x8_row_to_plain(int type, const void *data, size_t row, size_t n_cols, void *out)
{
    const size_t wrb = mz_dtype_row_bytes(type, n_cols);
    unpack_row(type, (const uint8_t *)data + row / 8 * 8 * wrb, (int)(row % 8), out, n_cols / mz_dtype_block_len(type));
}

#define X8_MAX_ROW_BYTES (MZ_X8_MAX_BLOCKS * 34) /* the largest x8 block per 32 values: Q8_0's 34 bytes */

void mz_weight_row_to_float(int type, int layout, const void *data, size_t row, size_t n_cols, float *y)
{
    const uint8_t *p = (const uint8_t *)data + row * mz_dtype_row_bytes(type, n_cols);
    _Alignas(64) uint8_t plain[X8_MAX_ROW_BYTES];
    if (layout == MZ_LAYOUT_X8) {
        mz_x8_row_to_plain(type, data, row, n_cols, plain);
        p = plain;
    }
    mz_kernels_for(type)->to_float(p, y, n_cols);
}

/* ---- scalar reference ------------------------------------------------------------- */

/* The canonical x8 arithmetic for one output, on a PLAIN weight row: the
 * vec_dot of the x8 tables (tests compare the repacked gemm against it). */
float mz_vec_dot_x8_q4_0_ref(size_t n, const void *restrict w, const void *restrict x)
{
    const mz_block_q4_0 *a = w;
    const mz_block_q8_0 *bx = x;
    float acc = 0.0f;
    for (size_t b = 0; b < n / MZ_QK; b++) {
        const int32_t s = mz_block_dot_q4(a[b].qs, 8, bx[b].qs);
        acc = __builtin_fmaf(mz_f16_to_f32(a[b].d) * mz_f16_to_f32(bx[b].d), (float)s, acc);
    }
    return acc;
}

float mz_vec_dot_x8_q8_0_ref(size_t n, const void *restrict w, const void *restrict x)
{
    const mz_block_q8_0 *a = w;
    const mz_block_q8_0 *bx = x;
    float acc = 0.0f;
    for (size_t b = 0; b < n / MZ_QK; b++) {
        const int32_t s = mz_block_dot_q8(a[b].qs, bx[b].qs);
        acc = __builtin_fmaf(mz_f16_to_f32(a[b].d) * mz_f16_to_f32(bx[b].d), (float)s, acc);
    }
    return acc;
}

float mz_vec_dot_x8_q4_1_ref(size_t n, const void *restrict w, const void *restrict x)
{
    const mz_block_q4_1 *a = w;
    const mz_block_q8_1 *bx = x;
    float acc = 0.0f, summ = 0.0f;
    for (size_t b = 0; b < n / MZ_QK; b++) {
        const int32_t s = mz_block_dot_q4(a[b].qs, 0, bx[b].qs);
        acc = __builtin_fmaf(mz_f16_to_f32(a[b].d) * mz_f16_to_f32(bx[b].d), (float)s, acc);
        summ = __builtin_fmaf(mz_f16_to_f32(a[b].m), mz_f16_to_f32(bx[b].s), summ);
    }
    return acc + summ;
}

/* Reference gemm on the x8 layout: unpacks one group block at a time into
 * plain blocks (8 rows) and runs the canonical arithmetic above. */
#define X8_REF_GEMM(tname, TYPE, WBLK, dotfn)                                                         \
    MZ_GEMM_DECL(mz_gemm_x8_##tname##_ref)                                                            \
    {                                                                                                 \
        MZ_ASSERT(r0 % 8 == 0 && r1 % 8 == 0 && n / MZ_QK <= MZ_X8_MAX_BLOCKS);                       \
        const size_t nb = n / MZ_QK;                                                                  \
        WBLK rows[8][64];                                                                             \
        for (size_t g = r0 / 8; g < r1 / 8; g++) {                                                    \
            const uint8_t *gp = (const uint8_t *)w + g * 8 * w_row_bytes;                             \
            for (size_t t = 0; t < n_tok; t++) {                                                      \
                float acc[8] = {0}, summ[8] = {0};                                                    \
                for (size_t b0 = 0; b0 < nb; b0 += 64) {                                              \
                    const size_t bn = nb - b0 < 64 ? nb - b0 : 64;                                    \
                    /* plain copies of blocks [b0, b0 + bn) of the 8 rows */                          \
                    unpack_group(TYPE, gp + b0 * mz_x8_group_block_bytes(TYPE), (uint8_t *)rows,      \
                                 sizeof rows[0], bn);                                                 \
                    for (int r = 0; r < 8; r++)                                                       \
                        dotfn(bn, rows[r], (const uint8_t *)x + t * x_row_bytes, b0, &acc[r], &summ[r]); \
                }                                                                                     \
                for (int r = 0; r < 8; r++)                                                           \
                    y[t * y_stride + g * 8 + r] = TYPE == MZ_DT_Q4_1 || TYPE == MZ_DT_Q5_1 ? acc[r] + summ[r] : acc[r]; \
            }                                                                                         \
        }                                                                                             \
    }

/* Blocks [b0, b0 + bn) of one output, continuing acc (and summ for Q4_1). */
static void part_q4_0(size_t bn, const mz_block_q4_0 *a, const void *x, size_t b0, float *acc, float *summ)
{
    (void)summ;
    const mz_block_q8_0 *bx = (const mz_block_q8_0 *)x + b0;
    for (size_t b = 0; b < bn; b++) {
        int32_t s = 0;
        for (int j = 0; j < MZ_QK / 2; j++)
            s += ((a[b].qs[j] & 0x0f) - 8) * bx[b].qs[j] + ((a[b].qs[j] >> 4) - 8) * bx[b].qs[j + MZ_QK / 2];
        *acc = __builtin_fmaf(mz_f16_to_f32(a[b].d) * mz_f16_to_f32(bx[b].d), (float)s, *acc);
    }
}
static void part_q8_0(size_t bn, const mz_block_q8_0 *a, const void *x, size_t b0, float *acc, float *summ)
{
    (void)summ;
    const mz_block_q8_0 *bx = (const mz_block_q8_0 *)x + b0;
    for (size_t b = 0; b < bn; b++) {
        int32_t s = 0;
        for (int j = 0; j < MZ_QK; j++) s += a[b].qs[j] * bx[b].qs[j];
        *acc = __builtin_fmaf(mz_f16_to_f32(a[b].d) * mz_f16_to_f32(bx[b].d), (float)s, *acc);
    }
}
static void part_q4_1(size_t bn, const mz_block_q4_1 *a, const void *x, size_t b0, float *acc, float *summ)
{
    const mz_block_q8_1 *bx = (const mz_block_q8_1 *)x + b0;
    for (size_t b = 0; b < bn; b++) {
        int32_t s = 0;
        for (int j = 0; j < MZ_QK / 2; j++)
            s += (a[b].qs[j] & 0x0f) * bx[b].qs[j] + (a[b].qs[j] >> 4) * bx[b].qs[j + MZ_QK / 2];
        *acc = __builtin_fmaf(mz_f16_to_f32(a[b].d) * mz_f16_to_f32(bx[b].d), (float)s, *acc);
        *summ = __builtin_fmaf(mz_f16_to_f32(a[b].m), mz_f16_to_f32(bx[b].s), *summ);
    }
}

X8_REF_GEMM(q4_0_q8_0, MZ_DT_Q4_0, mz_block_q4_0, part_q4_0)
X8_REF_GEMM(q8_0_q8_0, MZ_DT_Q8_0, mz_block_q8_0, part_q8_0)
X8_REF_GEMM(q4_1_q8_1, MZ_DT_Q4_1, mz_block_q4_1, part_q4_1)

/* Q5_0, Q5_1, IQ4_NL: the canonical order of q5_iq4_ref.c's blocks. */
#define X8_Q5_IQ4_REF(tname, TYPE, WBLK)                                                               \
    static void part_##tname(size_t bn, const WBLK *a, const void *x, size_t b0, float *acc, float *summ) \
    {                                                                                                 \
        const size_t xbs = mz_dtype_block_bytes(TYPE == MZ_DT_Q5_1 ? MZ_DT_Q8_1 : MZ_DT_Q8_0);       \
        mz_x8_blocks_q5_iq4_ref(TYPE, bn, a, (const uint8_t *)x + b0 * xbs, acc, summ);              \
    }                                                                                                 \
    X8_REF_GEMM(tname, TYPE, WBLK, part_##tname)
X8_Q5_IQ4_REF(q5_0_q8_0, MZ_DT_Q5_0, mz_block_q5_0)
X8_Q5_IQ4_REF(q5_1_q8_1, MZ_DT_Q5_1, mz_block_q5_1)
X8_Q5_IQ4_REF(iq4_nl_q8_0, MZ_DT_IQ4_NL, mz_block_iq4_nl)

/* The x8 vec_dot of a plain Q5_0 / Q5_1 / IQ4_NL row. */
#define X8_Q5_IQ4_VEC_DOT(name, TYPE)                                                                   \
    float mz_vec_dot_x8_##name##_ref(size_t n, const void *restrict w, const void *restrict x)        \
    {                                                                                                 \
        float acc = 0.0f, summ = 0.0f;                                                                \
        mz_x8_blocks_q5_iq4_ref(TYPE, n / MZ_QK, w, x, &acc, &summ);                                  \
        return TYPE == MZ_DT_Q5_1 ? acc + summ : acc;                                                 \
    }
X8_Q5_IQ4_VEC_DOT(q5_0, MZ_DT_Q5_0)
X8_Q5_IQ4_VEC_DOT(q5_1, MZ_DT_Q5_1)
X8_Q5_IQ4_VEC_DOT(iq4_nl, MZ_DT_IQ4_NL)

/* K-quants on the x8 layout: the plain arithmetic (kquant_ref.c), so the
 * reference gemm unpacks one row of a group at a time (unpack_row, as the
 * single-row lookup does) and runs the plain reference vec_dot on it. */
#define X8_KQUANT_REF(tq, TYPE)                                                                       \
    MZ_GEMM_DECL(mz_gemm_x8_##tq##_q8_K_ref)                                                          \
    {                                                                                                 \
        MZ_ASSERT(r0 % 8 == 0 && r1 % 8 == 0 && n % MZ_QK_K == 0 && n <= (size_t)MZ_QK * MZ_X8_MAX_BLOCKS); \
        const size_t nb = n / MZ_QK_K;                                                                \
        mz_block_##tq row[MZ_QK * MZ_X8_MAX_BLOCKS / MZ_QK_K];                                        \
        for (size_t g = r0 / 8; g < r1 / 8; g++) {                                                    \
            const uint8_t *gp = (const uint8_t *)w + g * 8 * w_row_bytes;                             \
            for (int r = 0; r < 8; r++) {                                                             \
                unpack_row(TYPE, gp, r, (uint8_t *)row, nb);                                          \
                for (size_t t = 0; t < n_tok; t++)                                                    \
                    y[t * y_stride + g * 8 + (size_t)r] =                                              \
                        mz_vec_dot_##tq##_q8_K_ref(n, row, (const uint8_t *)x + t * x_row_bytes);      \
            }                                                                                         \
        }                                                                                             \
    }
X8_KQUANT_REF(q4_K, MZ_DT_Q4_K)
X8_KQUANT_REF(q5_K, MZ_DT_Q5_K)
X8_KQUANT_REF(q6_K, MZ_DT_Q6_K)
