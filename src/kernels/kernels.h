/*
 * kernels.h — compute kernels: type conversion, quantized dot products,
 * matrix multiplication, norms, rope, activations and chunked attention.
 *
 * Kernels take restrict pointers, never allocate, lock, log or do I/O. Work
 * splitting across threads is by (ith, nth): thread ith of nth does its share.
 * Every SIMD path has a scalar reference twin (the *_ref tables) that tests
 * compare it against. The active implementation is chosen once at run time
 * from the CPU's features (mz_kernels_init); MZ_KERNELS=ref forces the
 * reference paths.
 */
#ifndef MZ_KERNELS_H
#define MZ_KERNELS_H

#include "../core/core.h"
#include "../core/dtype.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- scalar conversions ------------------------------------------------------ */

float mz_f16_to_f32(mz_f16 h);
mz_f16 mz_f32_to_f16(float f);      /* round to nearest even; inf/nan preserved */
float mz_bf16_to_f32(mz_bf16 h);
mz_bf16 mz_f32_to_bf16(float f);    /* round to nearest even, as ggml does */

void mz_f16_to_f32_row(const mz_f16 *restrict x, float *restrict y, size_t n);
void mz_f32_to_f16_row(const float *restrict x, mz_f16 *restrict y, size_t n);
/* y = the F16 value of each x (mz_f32_to_f16 rounding) as F32: exact, so
 * y holds what an F16 activation row holds, in the format gemm_xf reads. */
void mz_f32_round_f16_row(const float *restrict x, float *restrict y, size_t n);

/* ---- per-type kernels -------------------------------------------------------- */

/*
 * For weight type T, activations are first converted to vec_dot_type (as ggml
 * does: Q8_0 for Q8_0/Q4_0 weights, Q8_1 for Q4_1, F16 for F16, BF16 for BF16,
 * F32 for F32), then each output is vec_dot(n, weight_row, activation_row).
 */
typedef struct mz_type_kernels {
    int vec_dot_type;
    /* Converts n floats (n % block_len(vec_dot_type) == 0) to vec_dot_type. */
    void (*from_float)(const float *restrict x, void *restrict y, size_t n);
    /* Dot product of n values: one weight row of type T with one activation row. */
    float (*vec_dot)(size_t n, const void *restrict w, const void *restrict x);
    /* Dequantizes n values of type T to floats. */
    void (*to_float)(const void *restrict x, float *restrict y, size_t n);
    /* Quantizes n floats to type T (used by gen-model and tests; may be slow). */
    void (*quantize)(const float *restrict x, void *restrict y, size_t n);
    /* Tiled product of weight rows [r0, r1) with n_tok activation rows:
     *   y[t * y_stride + r] = vec_dot(n, W row r, X row t)   bit for bit,
     * whatever the tile an output falls in (see gemm_x86.h). */
    void (*gemm)(size_t n, const void *restrict w, size_t w_row_bytes, size_t r0, size_t r1,
                 const void *restrict x, size_t x_row_bytes, size_t n_tok, float *restrict y,
                 size_t y_stride);
    /* Optional (NULL: use gemm), F16 weights only: the same product, bit for
     * bit, with the activations given as F32 rows (x_row_bytes apart, a
     * multiple of 4) that hold exactly the F16 values from_float makes
     * (mz_f32_round_f16_row). Many pieces of one product then share one
     * conversion instead of each converting its token chunk again. */
    void (*gemm_xf)(size_t n, const void *restrict w, size_t w_row_bytes, size_t r0, size_t r1,
                    const void *restrict x, size_t x_row_bytes, size_t n_tok, float *restrict y,
                    size_t y_stride);
    /* 0 for the plain layout; 8 for the x8 layout (repack.c), whose gemm
     * needs r0 and r1 multiples of 8 and whose vec_dot computes the x8
     * arithmetic on a plain (unrepacked) row. */
    int row_group;
} mz_type_kernels;

/* ---- weight layouts ---------------------------------------------------------- */

/* MZ_LAYOUT_X8: 8 rows interleaved per block (repack.c), for Q4_0, Q4_1,
 * Q8_0, Q5_0, Q5_1, IQ4_NL, Q4_K, Q5_K and Q6_K where the active ISA has x8
 * kernels; tensors keep their size and offsets. */
enum { MZ_LAYOUT_PLAIN = 0, MZ_LAYOUT_X8 = 1 };
#define MZ_X8_MAX_BLOCKS 512 /* row length limit of the x8 layout: 16384 values */

/* The layout weights of this type and shape should be kept in for the
 * active kernels: MZ_LAYOUT_X8 when there is an x8 gemm for the type, rows
 * % 8 == 0 and the row fits; MZ_LAYOUT_PLAIN otherwise or with MZ_REPACK=0. */
int mz_kernels_pick_layout(int type, size_t n_rows, size_t n_cols);
/* Kernels for a weight type in a layout; NULL if unsupported. */
const mz_type_kernels *mz_kernels_for_layout(int type, int layout);
bool mz_x8_shape_ok(int type, size_t n_rows, size_t n_cols);
size_t mz_x8_group_block_bytes(int type);
/* In-place conversion plain -> x8 and back; scratch holds 8 rows. */
void mz_repack_x8(int type, void *data, size_t n_rows, size_t n_cols, void *scratch);
void mz_unpack_x8(int type, void *data, size_t n_rows, size_t n_cols, void *scratch);
/* Row `row` of an x8 tensor (n_cols values per row) in the plain layout, into
 * out (mz_dtype_row_bytes(type, n_cols) bytes): a tied embedding stays
 * repacked for the output product and is looked up row by row. */
void mz_x8_row_to_plain(int type, const void *data, size_t row, size_t n_cols, void *out);
/* Row `row` of a weight matrix of n_cols values per row, kept in `layout`
 * (MZ_LAYOUT_*), as n_cols floats into y: the embedding lookup, whichever
 * layout the embedding takes. */
void mz_weight_row_to_float(int type, int layout, const void *data, size_t row, size_t n_cols, float *y);

/* Selects implementations for this CPU. Safe to call more than once. */
void mz_kernels_init(void);
/* How the AVX-512 one-token F16 product walks its rows (gemm_x86.h,
 * f16_gemv; the same bits either way): a row at a time on AMD CPUs, tiles
 * of 8 rows with the next tile prefetched elsewhere (measured: Zen 4 and
 * the Xeon of the 16-vCPU machine prefer opposite walks); MZ_F16_GEMV=rows
 * or tiles overrides it, and tests set it. */
bool mz_kernels_f16_gemv_rows(void);
void mz_kernels_set_f16_gemv_rows(bool rows);
/* Name of the active implementation: "avx512", "avx2", "neon" or "scalar". */
const char *mz_kernels_isa(void);
/* Active / reference kernels for a weight type; NULL if the type is unsupported. */
const mz_type_kernels *mz_kernels_for(int type);
const mz_type_kernels *mz_kernels_ref(int type);

/*
 * Matrix multiplication of a weight matrix with a batch of activation rows:
 *   y[t * y_stride + r] = vec_dot(n_cols, W row r, X row t)   (bit-identical)
 * for r in [0, n_rows), t in [0, n_tok). X is already converted to
 * k->vec_dot_type with rows of x_row_bytes. Thread ith computes its share
 * of rows (through k->gemm: register tiles of rows x tokens).
 */
void mz_matmul(const mz_type_kernels *k, const void *restrict w, size_t w_row_bytes,
               size_t n_cols, size_t n_rows, const void *restrict x, size_t x_row_bytes,
               size_t n_tok, float *restrict y, size_t y_stride, int ith, int nth);
/* The same for rows [r0, r1) only (r0 a multiple of 4): callers that hand
 * out row slices dynamically. The values do not depend on the slicing. */
void mz_matmul_rows(const mz_type_kernels *k, const void *restrict w, size_t w_row_bytes,
                    size_t n_cols, size_t n_rows, const void *restrict x, size_t x_row_bytes,
                    size_t n_tok, float *restrict y, size_t y_stride, size_t r0, size_t r1);

/* mz_matmul_rows through k->gemm_xf (non-NULL): x holds F32 rows of exactly
 * the F16 values (mz_f32_round_f16_row); the same bits as mz_matmul_rows on
 * the F16 rows. */
void mz_matmul_rows_xf(const mz_type_kernels *k, const void *restrict w, size_t w_row_bytes,
                       size_t n_cols, size_t n_rows, const float *restrict x, size_t x_row_bytes,
                       size_t n_tok, float *restrict y, size_t y_stride, size_t r0, size_t r1);

/* ---- element-wise and row ops (F32) ----------------------------------------- */

/* y = x / sqrt(mean(x^2) + eps) * w   (w may be NULL: no scale) */
void mz_rmsnorm(const float *restrict x, const float *restrict w, float *restrict y, size_t n,
                float eps);
/* Rotary embedding applied in place to n_head heads of head_dim at position pos.
 * neox = false: pairs (2i, 2i+1) (llama); neox = true: pairs (i, i + head_dim/2) (qwen3).
 * Frequencies theta_i = pos * base^(-2i/n_rot) for i < n_rot/2, divided by
 * freq_factors[i] when given (Llama 3.1+'s rope_freqs); dims past n_rot untouched. */
void mz_rope(float *restrict x, int n_head, int head_dim, int n_rot, int pos, float base,
             const float *freq_factors, bool neox);
/* y[i] = silu(g[i]) * u[i] */
void mz_swiglu(const float *restrict g, const float *restrict u, float *restrict y, size_t n);
/* y = gelu(g) * u with GELU's tanh form, as ggml computes it on the CPU: g is
 * rounded to F16, GELU of that value is rounded to F16 (ggml's table), and
 * |g| >= 10 takes the limits 0 and g. */
void mz_geglu(const float *restrict g, const float *restrict u, float *restrict y, size_t n);
/* y[i] += x[i] */
void mz_add_inplace(float *restrict y, const float *restrict x, size_t n);

/* ---- attention over KV chunks ------------------------------------------------ */

/*
 * One KV chunk of a layer holds MZ_KV_CHUNK_TOKENS positions:
 *   K: [n_head_kv][MZ_KV_CHUNK_TOKENS][head_dim] F16, then
 *   V: [n_head_kv][MZ_KV_CHUNK_TOKENS][head_dim] F16 (starting right after K).
 * Positions p live in chunk p / 256 at row p % 256. Chunks need not be
 * contiguous: the kernel walks the chunk-pointer array once, keeping an online
 * softmax (running max m, running sum l, accumulator) per query row.
 *
 * Query token i (0 <= i < n_q) is at position pos0 + i and attends causally to
 * positions [0, pos0 + i]; the K/V of all those positions must already be
 * written. Grouped-query attention: query head h uses KV head h / (n_head /
 * n_head_kv); a K/V row is loaded once for all query heads of its group.
 *
 *   q:   [n_q][n_head][head_dim] F32
 *   out: [n_q][n_head][head_dim] F32
 */
typedef struct mz_attn_args {
    const float *q;
    float *out;
    const uint8_t *const *chunks; /* chunk base pointers (K then V) */
    int n_head;
    int n_head_kv;
    int head_dim;
    size_t n_q;
    size_t pos0;
    float scale;                  /* usually 1/sqrt(head_dim) */
    size_t window;                /* > 0: a sliding-window layer, query at p sees (p - window, p] */
    /* Optional scratch that lets a short query over a long context spread its
     * positions over threads (then mz_attn_merge must run after mz_attn):
     * mz_attn_partial_floats() floats, or NULL / too small for no split. */
    float *partial;
    size_t partial_floats;
    /* Optional shared counter (set to 0 before each mz_attn / mz_attn_merge
     * job): the threads then claim work items from it instead of taking
     * fixed shares, so a thread the OS deschedules (restore workers share the
     * cores) does not hold up the job. Same bits either way. With it, every
     * kernel (and mz_attn_merge) claims all of its items from it, so the
     * first thread's call returns only when all are claimed: the contract
     * of mz_threadpool_run_claimed. */
    _Atomic size_t *work;
    /* With work: the claims take the (head group, token block) groups
     * heaviest first — a causal batch's last token blocks see the most
     * positions, and claimed last they left one thread finishing alone —
     * unless this asks for index order (MZ_WORK_SPLIT=slices, to compare). */
    bool work_in_index_order;
    /* Optional: a chunk whose pointer is NULL is still encoded (lent by a
     * restore: src/engine/forward.c). The kernels then read the rows they
     * use through read_rows(read_ctx, c, v0, dst, k): values [v0, v0 + k)
     * of chunk c in the layout above (whole K or V rows of one KV head),
     * the values the chunk would hold, so the bits do not change. Any
     * thread, concurrently. */
    void (*read_rows)(void *read_ctx, size_t chunk, size_t v0, mz_f16 *dst, size_t k);
    void *read_ctx;
} mz_attn_args;

/* Bytes of one chunk (K and V). */
size_t mz_kv_chunk_bytes(int n_head_kv, int head_dim);
/* Where the K (v false) or V row of (kv head, row within chunk) starts, in
 * F16 values from the chunk's base. */
static inline size_t mz_kv_chunk_offset(int n_head_kv, int head_dim, bool v, int kvh, size_t row)
{
    return (((v ? (size_t)n_head_kv : 0) + (size_t)kvh) * MZ_KV_CHUNK_TOKENS + row) * (size_t)head_dim;
}
/* Pointers to K / V row of (kv head, row within chunk). */
static inline mz_f16 *mz_kv_chunk_k(uint8_t *chunk, int n_head_kv, int head_dim, int kvh, int row)
{
    return (mz_f16 *)chunk + mz_kv_chunk_offset(n_head_kv, head_dim, false, kvh, (size_t)row);
}
static inline mz_f16 *mz_kv_chunk_v(uint8_t *chunk, int n_head_kv, int head_dim, int kvh, int row)
{
    return (mz_f16 *)chunk + mz_kv_chunk_offset(n_head_kv, head_dim, true, kvh, (size_t)row);
}

/*
 * Computes attention; thread ith of nth takes its share of the work. The
 * result does not depend on nth (bit for bit). When a->partial holds at least
 * mz_attn_partial_floats(a) floats (and that is > 0), mz_attn may leave
 * per-segment states there instead of writing out; the caller then runs
 * mz_attn_merge on all threads after every mz_attn slice has finished.
 */
void mz_attn(const mz_attn_args *a, int ith, int nth);
size_t mz_attn_partial_floats(const mz_attn_args *a);
void mz_attn_merge(const mz_attn_args *a, int ith, int nth);
/* Scalar reference of the same contract (two-pass softmax, F32 throughout). */
void mz_attn_ref(const mz_attn_args *a);

#endif /* MZ_KERNELS_H */
