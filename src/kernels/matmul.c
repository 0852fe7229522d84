/*
 * matmul.c — weight matrix times a batch of activation rows.
 *
 *   W: [n_rows][n_cols] of type T, rows w_row_bytes apart
 *   X: [n_tok][n_cols] already in vec_dot_type(T), rows x_row_bytes apart
 *   Y: y[t * y_stride + r] = vec_dot(n_cols, W[r], X[t])   (F32)
 *
 * Threads: thread ith of nth takes one contiguous range of rows (multiples
 * of 4 rows, balanced to within 4), so no row is shared (no two threads
 * write the same y). Within its range the type's gemm walks blocks of rows
 * small enough to stay in L1 and, for each block, every token: a weight row
 * then comes from memory once per batch instead of once per token (the
 * weights dominate the bytes moved in decode and small prefills). The
 * quantized and F16 types have register-tiled kernels (gemm_x86.h) whose
 * outputs equal vec_dot bit for bit; the others loop over vec_dot.
 */
#include "kernels_impl.h"

/* Bytes of weight rows kept hot while the tokens go by: about half an L1d. */
#define MATMUL_BLOCK_BYTES (16 * 1024)
#define MATMUL_BLOCK_MAX_ROWS 64

/* gemm for types without a tiled kernel: one vec_dot per (row, token), rows
 * in L1-sized blocks, every token per block. */
#define MZ_GEMM_FROM_VEC_DOT(name, dot)                                                     \
    MZ_GEMM_DECL(name)                                                                      \
    {                                                                                       \
        size_t blk = MATMUL_BLOCK_BYTES / w_row_bytes;                                      \
        blk = MZ_MIN(MZ_MAX(blk, (size_t)1), (size_t)MATMUL_BLOCK_MAX_ROWS);                \
        const uint8_t *wb = w, *xb = x;                                                     \
        for (size_t rb = r0; rb < r1; rb += blk) {                                          \
            const size_t re = MZ_MIN(rb + blk, r1);                                         \
            for (size_t t = 0; t < n_tok; t++) {                                            \
                const void *xt = xb + t * x_row_bytes;                                      \
                float *yt = y + t * y_stride;                                               \
                for (size_t r = rb; r < re; r++) yt[r] = dot(n, wb + r * w_row_bytes, xt);  \
            }                                                                               \
        }                                                                                   \
    }

MZ_GEMM_FROM_VEC_DOT(mz_gemm_f32_ref, mz_vec_dot_f32_ref)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_f16_ref, mz_vec_dot_f16_ref)
/* mz_vec_dot_f16_ref with the activations as F32 holding F16 values (gemm_xf). */
static float vec_dot_f16_xf_ref(size_t n, const void *restrict w, const void *restrict x)
{
    const mz_f16 *a = w;
    const float *b = x;
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)mz_f16_to_f32(a[i]) * (double)b[i];
    return (float)s;
}
MZ_GEMM_FROM_VEC_DOT(mz_gemm_f16_xf_ref, vec_dot_f16_xf_ref)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_bf16_ref, mz_vec_dot_bf16_ref)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_q8_0_q8_0_ref, mz_vec_dot_q8_0_q8_0_ref)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_q4_0_q8_0_ref, mz_vec_dot_q4_0_q8_0_ref)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_q4_1_q8_1_ref, mz_vec_dot_q4_1_q8_1_ref)
/* K-quants (kquant_*.c): one vec_dot per (row, token). */
MZ_GEMM_FROM_VEC_DOT(mz_gemm_q2_K_q8_K_ref, mz_vec_dot_q2_K_q8_K_ref)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_q3_K_q8_K_ref, mz_vec_dot_q3_K_q8_K_ref)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_q4_K_q8_K_ref, mz_vec_dot_q4_K_q8_K_ref)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_q5_K_q8_K_ref, mz_vec_dot_q5_K_q8_K_ref)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_q6_K_q8_K_ref, mz_vec_dot_q6_K_q8_K_ref)
#if MZ_KERNELS_X86
MZ_GEMM_FROM_VEC_DOT(mz_gemm_q2_K_q8_K_avx2, mz_vec_dot_q2_K_q8_K_avx2)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_q3_K_q8_K_avx2, mz_vec_dot_q3_K_q8_K_avx2)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_q4_K_q8_K_avx2, mz_vec_dot_q4_K_q8_K_avx2)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_q5_K_q8_K_avx2, mz_vec_dot_q5_K_q8_K_avx2)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_q6_K_q8_K_avx2, mz_vec_dot_q6_K_q8_K_avx2)
#endif
/* end of K-quants */
/* Q5_0, Q5_1, IQ4_NL, IQ4_XS (q5_iq4_*.c) */
MZ_GEMM_FROM_VEC_DOT(mz_gemm_q5_0_q8_0_ref, mz_vec_dot_q5_0_q8_0_ref)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_q5_1_q8_1_ref, mz_vec_dot_q5_1_q8_1_ref)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_iq4_nl_q8_0_ref, mz_vec_dot_iq4_nl_q8_0_ref)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_iq4_xs_q8_K_ref, mz_vec_dot_iq4_xs_q8_K_ref)
#if MZ_KERNELS_X86
MZ_GEMM_FROM_VEC_DOT(mz_gemm_f32_avx2, mz_vec_dot_f32_avx2)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_bf16_avx2, mz_vec_dot_bf16_avx2)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_f32_avx512, mz_vec_dot_f32_avx512)
#endif
#if MZ_KERNELS_NEON
MZ_GEMM_FROM_VEC_DOT(mz_gemm_f16_neon, mz_vec_dot_f16_neon)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_q8_0_q8_0_neon, mz_vec_dot_q8_0_q8_0_neon)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_q4_0_q8_0_neon, mz_vec_dot_q4_0_q8_0_neon)
MZ_GEMM_FROM_VEC_DOT(mz_gemm_q4_1_q8_1_neon, mz_vec_dot_q4_1_q8_1_neon)
#endif

void mz_matmul(const mz_type_kernels *k, const void *restrict w, size_t w_row_bytes,
               size_t n_cols, size_t n_rows, const void *restrict x, size_t x_row_bytes,
               size_t n_tok, float *restrict y, size_t y_stride, int ith, int nth)
{
    MZ_ASSERT(k && k->gemm);
    MZ_ASSERT(nth >= 1 && ith >= 0 && ith < nth);
    MZ_ASSERT(n_tok <= 1 || y_stride >= n_rows);
    MZ_ASSERT(w_row_bytes > 0 && x_row_bytes > 0);
    if (n_rows == 0 || n_tok == 0) return;

    /* Row ranges rounded to multiples of 4 (the widest register tile; 8 for
     * the x8 layout, whose row count is a multiple of 8) so that only the
     * last range has a ragged edge. */
    const size_t g = k->row_group > 4 ? (size_t)k->row_group : 4;
    const size_t n4 = (n_rows + g - 1) / g;
    const size_t r0 = MZ_MIN(n4 * (size_t)ith / (size_t)nth * g, n_rows);
    const size_t r1 = MZ_MIN(n4 * ((size_t)ith + 1) / (size_t)nth * g, n_rows);
    if (r0 < r1) k->gemm(n_cols, w, w_row_bytes, r0, r1, x, x_row_bytes, n_tok, y, y_stride);
}

/* The checks and call of mz_matmul_rows / mz_matmul_rows_xf: gemm is k's
 * gemm or gemm_xf (the same contract, another activation format). */
static void matmul_rows_with(const mz_type_kernels *k,
                             void (*gemm)(size_t, const void *restrict, size_t, size_t, size_t,
                                          const void *restrict, size_t, size_t, float *restrict,
                                          size_t),
                             const void *restrict w, size_t w_row_bytes, size_t n_cols,
                             size_t n_rows, const void *restrict x, size_t x_row_bytes,
                             size_t n_tok, float *restrict y, size_t y_stride, size_t r0, size_t r1)
{
    MZ_ASSERT(gemm);
    MZ_ASSERT(r0 % 4 == 0 && r0 <= r1 && r1 <= n_rows);
    MZ_ASSERT(!k->row_group || (r0 % (size_t)k->row_group == 0 && r1 % (size_t)k->row_group == 0));
    MZ_ASSERT(n_tok <= 1 || y_stride >= n_rows);
    if (r0 < r1 && n_tok > 0) gemm(n_cols, w, w_row_bytes, r0, r1, x, x_row_bytes, n_tok, y, y_stride);
}

void mz_matmul_rows(const mz_type_kernels *k, const void *restrict w, size_t w_row_bytes,
                    size_t n_cols, size_t n_rows, const void *restrict x, size_t x_row_bytes,
                    size_t n_tok, float *restrict y, size_t y_stride, size_t r0, size_t r1)
{
    MZ_ASSERT(k);
    matmul_rows_with(k, k->gemm, w, w_row_bytes, n_cols, n_rows, x, x_row_bytes, n_tok, y, y_stride,
                     r0, r1);
}

void mz_matmul_rows_xf(const mz_type_kernels *k, const void *restrict w, size_t w_row_bytes,
                       size_t n_cols, size_t n_rows, const float *restrict x, size_t x_row_bytes,
                       size_t n_tok, float *restrict y, size_t y_stride, size_t r0, size_t r1)
{
    MZ_ASSERT(k && !k->row_group);
    matmul_rows_with(k, k->gemm_xf, w, w_row_bytes, n_cols, n_rows, x, x_row_bytes, n_tok, y,
                     y_stride, r0, r1);
}
