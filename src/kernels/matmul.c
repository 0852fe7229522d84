/*
 * matmul.c — weight matrix times a batch of activation rows.
 *
 *   W: [n_rows][n_cols] of type T, rows w_row_bytes apart
 *   X: [n_tok][n_cols] already in vec_dot_type(T), rows x_row_bytes apart
 *   Y: y[t * y_stride + r] = vec_dot(n_cols, W[r], X[t])   (F32)
 *
 * Threads: thread ith of nth takes one contiguous range of rows; the ranges
 * differ in length by at most one row, so the work is balanced and no row is
 * shared (no two threads write the same y). Within its range a thread walks
 * blocks of rows small enough to stay in L1 and, for each block, every token:
 * a weight row then comes from memory once per batch instead of once per
 * token (the weights dominate the bytes moved in decode and small prefills).
 */
#include "kernels_impl.h"

/* Bytes of weight rows kept hot while the tokens go by: about half an L1d. */
#define MATMUL_BLOCK_BYTES (16 * 1024)
#define MATMUL_BLOCK_MAX_ROWS 64

void mz_matmul(const mz_type_kernels *k, const void *restrict w, size_t w_row_bytes,
               size_t n_cols, size_t n_rows, const void *restrict x, size_t x_row_bytes,
               size_t n_tok, float *restrict y, size_t y_stride, int ith, int nth)
{
    MZ_ASSERT(k && k->vec_dot);
    MZ_ASSERT(nth >= 1 && ith >= 0 && ith < nth);
    MZ_ASSERT(n_tok <= 1 || y_stride >= n_rows);
    MZ_ASSERT(w_row_bytes > 0 && x_row_bytes > 0);
    if (n_rows == 0 || n_tok == 0) return;

    const size_t r0 = n_rows * (size_t)ith / (size_t)nth;
    const size_t r1 = n_rows * ((size_t)ith + 1) / (size_t)nth;

    size_t blk = MATMUL_BLOCK_BYTES / w_row_bytes;
    blk = MZ_MAX(blk, (size_t)1);
    blk = MZ_MIN(blk, (size_t)MATMUL_BLOCK_MAX_ROWS);

    const uint8_t *wb = w;
    const uint8_t *xb = x;
    for (size_t rb = r0; rb < r1; rb += blk) {
        const size_t re = MZ_MIN(rb + blk, r1);
        for (size_t t = 0; t < n_tok; t++) {
            const void *xt = xb + t * x_row_bytes;
            float *yt = y + t * y_stride;
            for (size_t r = rb; r < re; r++) yt[r] = k->vec_dot(n_cols, wb + r * w_row_bytes, xt);
        }
    }
}
