/*
 * kernels_impl.h — internals shared by the files of src/kernels/ (and by the
 * kernel tests): the per-ISA kernel functions and the dispatch state.
 *
 * Naming: mz_<what>_<types>_<isa>, e.g. mz_vec_dot_q4_1_q8_1_avx2. The
 * *_ref functions are the scalar reference every SIMD path is tested
 * against. *_avx2 functions exist only on x86-64 and may be called only when
 * the CPU has AVX2+FMA+F16C (*_avx512: AVX-512 F/BW/VL/VNNI as well).
 */
#ifndef MZ_KERNELS_IMPL_H
#define MZ_KERNELS_IMPL_H

#include "kernels.h"

#include <math.h>
#include <stdint.h>

#if defined(__x86_64__) || defined(_M_X64)
#define MZ_KERNELS_X86 1
#else
#define MZ_KERNELS_X86 0
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#define MZ_KERNELS_NEON 1
#else
#define MZ_KERNELS_NEON 0
#endif

/* Instruction sets; AVX2 < AVX-512 in capability (NEON is another family). */
enum mz_isa { MZ_ISA_SCALAR = 0, MZ_ISA_AVX2 = 1, MZ_ISA_AVX512 = 2, MZ_ISA_NEON = 3, MZ_ISA_COUNT };
/* Names indexed by enum mz_isa: "scalar", "avx2", "avx512", "neon". */
extern const char *const mz_isa_names[MZ_ISA_COUNT];

/* The ISA of the active implementation (initialises the kernels on first use). */
enum mz_isa mz_kernels_active_isa(void);
/* Kernel table of a given ISA, or NULL when the type is unsupported, the ISA
 * was not built in, or this CPU lacks it. Lets tests check every path the CPU
 * can run, not only the active one. */
const mz_type_kernels *mz_kernels_for_isa(enum mz_isa isa, int type);
/* True when this CPU (and build) can run the given ISA's kernels. */
bool mz_kernels_cpu_has(enum mz_isa isa);

/* ---- SwiGLU's activation (ops.c; the vector forms in attn_avx2.c, attn_avx512.c) -- *
 *
 * silu(g) * u with e^x by the attention softmax's polynomial (attn_simd.h,
 * exp_poly) instead of libm's expf: e = e^-|g| (0 below -87), then
 * y = (g >= 0 ? g : g * e) / (1 + e) * u. The scalar form below is the same
 * operations in the same order (fmaf where the vector code fuses), so every
 * ISA, AArch64 included, gives the same bits lane for lane. */
/* The polynomial's constants, one list for attn_simd.h's exp_poly and the
 * scalar form: Cody-Waite reduction by ln 2 (split in a high and a low
 * part), then degree 6. */
#define MZ_EXP_LOG2E 1.44269504088896341f
#define MZ_EXP_LN2_HI 0.693359375f
#define MZ_EXP_LN2_LO -2.12194440e-4f
#define MZ_EXP_P6 1.9875691500e-4f
#define MZ_EXP_P5 1.3981999507e-3f
#define MZ_EXP_P4 8.3334519073e-3f
#define MZ_EXP_P3 4.1665795894e-2f
#define MZ_EXP_P2 1.6666665459e-1f
#define MZ_EXP_P1 5.0000001201e-1f

static inline float mz_silu_exp1(float x) /* e^x, -87 <= x <= 0 */
{
    const float n = nearbyintf(x * MZ_EXP_LOG2E);
    float r = fmaf(-n, MZ_EXP_LN2_HI, x);
    r = fmaf(-n, MZ_EXP_LN2_LO, r);
    float y = MZ_EXP_P6;
    y = fmaf(y, r, MZ_EXP_P5);
    y = fmaf(y, r, MZ_EXP_P4);
    y = fmaf(y, r, MZ_EXP_P3);
    y = fmaf(y, r, MZ_EXP_P2);
    y = fmaf(y, r, MZ_EXP_P1);
    y = fmaf(y, r * r, r + 1.0f);
    union { int32_t i; float f; } e = {.i = (int32_t)((uint32_t)((int32_t)n + 127) << 23)};
    return y * e.f;
}

static inline float mz_swiglu1(float g, float u)
{
    const float a = -fabsf(g);
    const float e = a < -87.0f ? 0.0f : mz_silu_exp1(a);
    return (g >= 0.0f ? g : g * e) / (1.0f + e) * u;
}

/* The vector forms (n any; the tail through mz_swiglu1). */
void mz_swiglu_avx2(const float *restrict g, const float *restrict u, float *restrict y, size_t n);
void mz_swiglu_avx512(const float *restrict g, const float *restrict u, float *restrict y, size_t n);
/* The scalar form, for the tests' comparisons. */
void mz_swiglu_ref(const float *restrict g, const float *restrict u, float *restrict y, size_t n);

/* ---- scalar reference (convert.c, quant_ref.c, vecdot_ref.c) -------------------- */

void mz_f16_to_f32_row_ref(const mz_f16 *restrict x, float *restrict y, size_t n);
void mz_f32_to_f16_row_ref(const float *restrict x, mz_f16 *restrict y, size_t n);

void mz_to_float_f32_ref(const void *restrict x, float *restrict y, size_t n);
void mz_to_float_f16_ref(const void *restrict x, float *restrict y, size_t n);
void mz_to_float_bf16_ref(const void *restrict x, float *restrict y, size_t n);
void mz_to_float_q8_0_ref(const void *restrict x, float *restrict y, size_t n);
void mz_to_float_q8_1_ref(const void *restrict x, float *restrict y, size_t n);
void mz_to_float_q4_0_ref(const void *restrict x, float *restrict y, size_t n);
void mz_to_float_q4_1_ref(const void *restrict x, float *restrict y, size_t n);

/* Quantizers double as the reference from_float of the activation types. */
void mz_quantize_f32_ref(const float *restrict x, void *restrict y, size_t n);
void mz_quantize_f16_ref(const float *restrict x, void *restrict y, size_t n);
void mz_quantize_bf16_ref(const float *restrict x, void *restrict y, size_t n);
void mz_quantize_q8_0_ref(const float *restrict x, void *restrict y, size_t n);
void mz_quantize_q8_1_ref(const float *restrict x, void *restrict y, size_t n);
void mz_quantize_q4_0_ref(const float *restrict x, void *restrict y, size_t n);
void mz_quantize_q4_1_ref(const float *restrict x, void *restrict y, size_t n);
/* Q8_K (quant_ref.c): the activation side of the K-quants and IQ4_XS. */
void mz_quantize_q8_K_ref(const float *restrict x, void *restrict y, size_t n);
void mz_to_float_q8_K_ref(const void *restrict x, float *restrict y, size_t n);

/* The integer dot of one weight block's codes with a Q8 activation block's
 * (exact, so any order gives the same value): Q8_0 codes, or 4-bit codes
 * minus off (Q4_0: 8, Q4_1: 0; value j in the low nibble of byte j, value
 * j + 16 in its high nibble). */
static inline int32_t mz_block_dot_q8(const int8_t *w, const int8_t *x)
{
    int32_t s = 0;
    for (int j = 0; j < MZ_QK; j++) s += w[j] * x[j];
    return s;
}

static inline int32_t mz_block_dot_q4(const uint8_t *qs, int off, const int8_t *x)
{
    int32_t s = 0;
    for (int j = 0; j < MZ_QK / 2; j++) s += ((qs[j] & 0x0f) - off) * x[j] + ((qs[j] >> 4) - off) * x[j + MZ_QK / 2];
    return s;
}

#define MZ_VEC_DOT_DECL(name) float name(size_t n, const void *restrict w, const void *restrict x)
MZ_VEC_DOT_DECL(mz_vec_dot_f32_ref);
MZ_VEC_DOT_DECL(mz_vec_dot_bf16_ref);

/* A gemm made of one vec_dot per (row, token), for the types without tiles
 * (and the reference table): defined per vec_dot by MZ_GEMM_FROM_VEC_DOT. */
#define MZ_GEMM_DECL(name)                                                                      \
    void name(size_t n, const void *restrict w, size_t w_row_bytes, size_t r0, size_t r1,       \
              const void *restrict x, size_t x_row_bytes, size_t n_tok, float *restrict y,      \
              size_t y_stride)
/* The vec_dot and gemm every ISA has: F16 and the legacy types against
 * their activation type. */
#define MZ_LEGACY_DECLS(isa)                     \
    MZ_VEC_DOT_DECL(mz_vec_dot_f16_##isa);       \
    MZ_VEC_DOT_DECL(mz_vec_dot_q8_0_q8_0_##isa); \
    MZ_VEC_DOT_DECL(mz_vec_dot_q4_0_q8_0_##isa); \
    MZ_VEC_DOT_DECL(mz_vec_dot_q4_1_q8_1_##isa); \
    MZ_GEMM_DECL(mz_gemm_f16_##isa);             \
    MZ_GEMM_DECL(mz_gemm_q8_0_q8_0_##isa);       \
    MZ_GEMM_DECL(mz_gemm_q4_0_q8_0_##isa);       \
    MZ_GEMM_DECL(mz_gemm_q4_1_q8_1_##isa)
MZ_LEGACY_DECLS(ref);
MZ_GEMM_DECL(mz_gemm_f32_ref);
MZ_GEMM_DECL(mz_gemm_f16_xf_ref);
MZ_GEMM_DECL(mz_gemm_bf16_ref);
/* The x8 layout's gemm (gemm_x8_x86.h). */
#define MZ_X8_GEMM_DECLS(isa)                     \
    MZ_GEMM_DECL(mz_gemm_x8_q4_0_q8_0_##isa);     \
    MZ_GEMM_DECL(mz_gemm_x8_q4_1_q8_1_##isa);     \
    MZ_GEMM_DECL(mz_gemm_x8_q8_0_q8_0_##isa)

/* x8 layout (repack.c): reference gemm and the canonical x8 arithmetic of
 * one output on a plain row. */
MZ_X8_GEMM_DECLS(ref);
float mz_vec_dot_x8_q4_0_ref(size_t n, const void *restrict w, const void *restrict x);
float mz_vec_dot_x8_q4_1_ref(size_t n, const void *restrict w, const void *restrict x);
float mz_vec_dot_x8_q8_0_ref(size_t n, const void *restrict w, const void *restrict x);
/* x8 kernel table of a given ISA (NULL as mz_kernels_for_isa). */
const mz_type_kernels *mz_kernels_x8_for_isa(enum mz_isa isa, int type);

/* ---- K-quants: Q2_K..Q6_K x Q8_K (kquant_ref.c, kquant_<isa>.c) ------------------------ */

/* Scalar reference of type t (q2_K .. q6_K); every ISA's vec_dot gives
 * these bits exactly (the same per-block integers and float steps, see
 * kquant_ref.c). */
#define MZ_KQUANT_REF_DECL(t)                                                                  \
    void mz_to_float_##t##_ref(const void *restrict x, float *restrict y, size_t n);          \
    void mz_quantize_##t##_ref(const float *restrict x, void *restrict y, size_t n);          \
    float mz_vec_dot_##t##_q8_K_ref(size_t n, const void *restrict w, const void *restrict x); \
    MZ_GEMM_DECL(mz_gemm_##t##_q8_K_ref)
MZ_KQUANT_REF_DECL(q2_K);
MZ_KQUANT_REF_DECL(q3_K);
MZ_KQUANT_REF_DECL(q4_K);
MZ_KQUANT_REF_DECL(q5_K);
MZ_KQUANT_REF_DECL(q6_K);
/* SIMD vec_dot of type t for an ISA, and its gemm (MZ_GEMM_FROM_VEC_DOT). */
#define MZ_KQUANT_ISA_DECL(t, isa)                                                             \
    float mz_vec_dot_##t##_q8_K_##isa(size_t n, const void *restrict w, const void *restrict x); \
    MZ_GEMM_DECL(mz_gemm_##t##_q8_K_##isa)
#if MZ_KERNELS_X86
MZ_KQUANT_ISA_DECL(q2_K, avx2);
MZ_KQUANT_ISA_DECL(q3_K, avx2);
MZ_KQUANT_ISA_DECL(q4_K, avx2);
MZ_KQUANT_ISA_DECL(q5_K, avx2);
MZ_KQUANT_ISA_DECL(q6_K, avx2);
/* mz_quantize_q8_K_ref's bytes, vectorised (kquant_avx2.c) */
void mz_from_float_q8_K_avx2(const float *restrict x, void *restrict y, size_t n);
MZ_KQUANT_ISA_DECL(q5_K, avx512);
MZ_KQUANT_ISA_DECL(q6_K, avx512);
/* AVX-512 tiles of the types whose vec_dot stays AVX2 */
MZ_GEMM_DECL(mz_gemm_q2_K_q8_K_avx512);
MZ_GEMM_DECL(mz_gemm_q3_K_q8_K_avx512);
MZ_GEMM_DECL(mz_gemm_q4_K_q8_K_avx512);
#endif
#if MZ_KERNELS_NEON
MZ_KQUANT_ISA_DECL(q2_K, neon);
MZ_KQUANT_ISA_DECL(q3_K, neon);
MZ_KQUANT_ISA_DECL(q4_K, neon);
MZ_KQUANT_ISA_DECL(q5_K, neon);
MZ_KQUANT_ISA_DECL(q6_K, neon);
#endif

/* x8 layout of Q4_K, Q5_K, Q6_K (repack.c; kquant_x8_x86.h): the plain arithmetic */
#define MZ_KQUANT_X8_DECLS(isa)              \
    MZ_GEMM_DECL(mz_gemm_x8_q4_K_q8_K_##isa); \
    MZ_GEMM_DECL(mz_gemm_x8_q5_K_q8_K_##isa); \
    MZ_GEMM_DECL(mz_gemm_x8_q6_K_q8_K_##isa)
MZ_KQUANT_X8_DECLS(ref);
#if MZ_KERNELS_X86
MZ_KQUANT_X8_DECLS(avx2);
MZ_KQUANT_X8_DECLS(avx512);
#endif

/* ---- end of K-quants ----------------------------------------------------------------- */

/* ---- Q5_0, Q5_1, IQ4_NL, IQ4_XS (q5_iq4_*.c) ------------------------------------ */

/* A vec_dot that is fn(kind, n, w, x) for one constant kind. */
#define MZ_VEC_DOT_OF_KIND(name, fn, kind) \
    float name(size_t n, const void *restrict w, const void *restrict x) { return fn(kind, n, w, x); }
/* The non-linear grid of IQ4_NL and IQ4_XS, ascending. */
extern const int8_t mz_kvalues_iq4nl[16];
/* Scale of IQ4_XS sub-block j (0..7) minus 32: -32..31. */
static inline int mz_iq4_xs_scale(const mz_block_iq4_xs *b, int j)
{
    const int lo = (b->scales_l[j / 2] >> (4 * (j % 2))) & 0x0f;
    const int hi = (b->scales_h >> (2 * j)) & 3;
    return (lo | hi << 4) - 32;
}
/* mz_to_float_<t>_ref and mz_quantize_<t>_ref of weight type t. */
#define MZ_CONVERT_REF_DECLS(t)                                                      \
    void mz_to_float_##t##_ref(const void *restrict x, float *restrict y, size_t n); \
    void mz_quantize_##t##_ref(const float *restrict x, void *restrict y, size_t n)
MZ_CONVERT_REF_DECLS(q5_0);
MZ_CONVERT_REF_DECLS(q5_1);
MZ_CONVERT_REF_DECLS(iq4_nl);
MZ_CONVERT_REF_DECLS(iq4_xs);
/* mz_vec_dot_<name> and mz_gemm_<name> of each (weight, activation) pair. */
#define MZ_Q5_IQ4_DOT_DECLS(isa)                                                                   \
    float mz_vec_dot_q5_0_q8_0_##isa(size_t n, const void *restrict w, const void *restrict x);    \
    float mz_vec_dot_q5_1_q8_1_##isa(size_t n, const void *restrict w, const void *restrict x);    \
    float mz_vec_dot_iq4_nl_q8_0_##isa(size_t n, const void *restrict w, const void *restrict x);  \
    float mz_vec_dot_iq4_xs_q8_K_##isa(size_t n, const void *restrict w, const void *restrict x);  \
    MZ_GEMM_DECL(mz_gemm_q5_0_q8_0_##isa);                                                         \
    MZ_GEMM_DECL(mz_gemm_q5_1_q8_1_##isa);                                                         \
    MZ_GEMM_DECL(mz_gemm_iq4_nl_q8_0_##isa);                                                       \
    MZ_GEMM_DECL(mz_gemm_iq4_xs_q8_K_##isa)
MZ_Q5_IQ4_DOT_DECLS(ref);
/* sum grid[nib] * qx over the 32 values of IQ4 nibbles qs[16]: exact. */
int32_t mz_dot_iq4_block(const uint8_t *qs, const int8_t *qx);
/* The x8 order (repack.c) over nb blocks of a Q5_0 / Q5_1 / IQ4_NL row:
 * acc = fma(dw * dx, f32(block integer dot), acc), and for Q5_1
 * summ = fma(mw, sx, summ). */
void mz_x8_blocks_q5_iq4_ref(int type, size_t nb, const void *w, const void *x, float *acc, float *summ);
/* Q5_0, Q5_1 and IQ4_NL in the x8 layout (repack.c, gemm_x8_x86.h): as Q4_0's / Q4_1's. */
#define MZ_X8_REF_DECLS(pair, t)          \
    MZ_GEMM_DECL(mz_gemm_x8_##pair##_ref); \
    float mz_vec_dot_x8_##t##_ref(size_t n, const void *restrict w, const void *restrict x)
MZ_X8_REF_DECLS(q5_0_q8_0, q5_0);
MZ_X8_REF_DECLS(q5_1_q8_1, q5_1);
MZ_X8_REF_DECLS(iq4_nl_q8_0, iq4_nl);
#if MZ_KERNELS_X86
/* q5_iq4_avx2.c / q5_iq4_avx512.c: tiles of q5_iq4_x86.h (the two ISAs give
 * the same bits); vec_dot is the 1 x 1 tile. Q5_0's, Q5_1's and IQ4_NL's
 * plain gemm and vec_dot are gemm_x8_x86.h's (the x8 order, as Q4_0), in gemm_avx2.c /
 * gemm_avx512.c, with the tiles for rows longer than MZ_X8_MAX_BLOCKS. */
#define MZ_TILES_X8_DECLS(name, isa)                                                                  \
    MZ_GEMM_DECL(mz_gemm_##name##_tiles_##isa);                                                        \
    float mz_vec_dot_##name##_tiles_##isa(size_t n, const void *restrict w, const void *restrict x);   \
    MZ_GEMM_DECL(mz_gemm_x8_##name##_##isa)
#define MZ_Q5_IQ4_ISA_DECLS(isa)                                                                      \
    MZ_Q5_IQ4_DOT_DECLS(isa);                                                                         \
    MZ_TILES_X8_DECLS(q5_0_q8_0, isa);                                                                \
    MZ_TILES_X8_DECLS(q5_1_q8_1, isa);                                                                \
    MZ_TILES_X8_DECLS(iq4_nl_q8_0, isa)
MZ_Q5_IQ4_ISA_DECLS(avx2);
MZ_Q5_IQ4_ISA_DECLS(avx512);
#endif
#if MZ_KERNELS_NEON
/* q5_iq4_neon.c; the gemm is one vec_dot per (row, token). */
MZ_Q5_IQ4_DOT_DECLS(neon);
#endif

/* ---- AVX2 + FMA + F16C (vecdot_avx2.c, gemm_avx2.c) ------------------------------------------ */

#if MZ_KERNELS_X86
void mz_f16_to_f32_row_avx2(const mz_f16 *restrict x, float *restrict y, size_t n);
void mz_f32_to_f16_row_avx2(const float *restrict x, mz_f16 *restrict y, size_t n);
void mz_f32_round_f16_row_avx2(const float *restrict x, float *restrict y, size_t n);
void mz_from_float_q8_0_avx2(const float *restrict x, void *restrict y, size_t n);
void mz_from_float_q8_1_avx2(const float *restrict x, void *restrict y, size_t n);
void mz_from_float_f16_avx2(const float *restrict x, void *restrict y, size_t n);

MZ_VEC_DOT_DECL(mz_vec_dot_f32_avx2);
MZ_VEC_DOT_DECL(mz_vec_dot_bf16_avx2);
MZ_LEGACY_DECLS(avx2);
/* gemm_avx2.c: tiled kernels (canonical arithmetic in gemm_x86.h); the vec_dot
 * of F16/Q8_0/Q4_0/Q4_1 above are their 1 x 1 tiles. */
MZ_GEMM_DECL(mz_gemm_f16_xf_avx2);
MZ_GEMM_DECL(mz_gemm_f32_avx2);
MZ_GEMM_DECL(mz_gemm_bf16_avx2);
MZ_X8_GEMM_DECLS(avx2);

/* attn_avx2.c: same contract as mz_attn / mz_attn_merge (head_dim % 8 == 0). */
void mz_attn_avx2(const mz_attn_args *a, int ith, int nth);
void mz_attn_merge_avx2(const mz_attn_args *a, int ith, int nth);
size_t mz_attn_partial_floats_avx2(const mz_attn_args *a);

/* ---- AVX-512 F/BW/VL/VNNI (vecdot_avx512.c, gemm_avx512.c) ------------------------------------- */

MZ_VEC_DOT_DECL(mz_vec_dot_f32_avx512);
MZ_LEGACY_DECLS(avx512);
/* gemm_avx512.c: the same tiles with VNNI and 32 registers (bit-identical to AVX2). */
MZ_GEMM_DECL(mz_gemm_f16_xf_avx512);
MZ_GEMM_DECL(mz_gemm_f32_avx512);
MZ_X8_GEMM_DECLS(avx512);
/* attn_avx512.c: mz_attn_avx2 with 16-lane tile steps, bit-identical to it
 * (head_dim % 16 == 0; merge and scratch size are mz_attn_avx2's). */
void mz_attn_avx512(const mz_attn_args *a, int ith, int nth);
#endif

/* ---- AArch64 NEON (vecdot_neon.c) ------------------------------------------------ */

#if MZ_KERNELS_NEON
MZ_LEGACY_DECLS(neon);
void mz_f16_to_f32_row_neon(const mz_f16 *restrict x, float *restrict y, size_t n);
#endif

/* ---- attention (attn.c) ---------------------------------------------------------- */

/* Largest head_dim the attention kernels accept (their scratch lives on the stack). */
#define MZ_ATTN_MAX_HEAD_DIM 256
/* Query heads of one GQA group processed together per pass over K/V. */
#define MZ_ATTN_MAX_GROUP 8

/* Checks the shape of an mz_attn_args (aborts on a programmer error). */
void mz_attn_check_args(const mz_attn_args *a);
/* First position query token i of a attends to: pos0 + i + 1 - window when
 * a sliding window hides any position, else 0. Every kernel starts there and
 * reads nothing below it (the memory manager may have evicted those chunks). */
static inline size_t mz_attn_first_pos(const mz_attn_args *a, size_t i)
{
    const size_t n_ctx = a->pos0 + i + 1;
    return a->window && n_ctx > a->window ? n_ctx - a->window : 0;
}
/* Rows [row, row + nt) of KV head kvh's K (v false) or V in chunk c: in
 * place, or read into buf (nt * head_dim values) when the chunk is still
 * encoded (a->read_rows). */
static inline const mz_f16 *mz_attn_kv_rows(const mz_attn_args *a, size_t c, bool v, int kvh, size_t row, size_t nt,
                                            mz_f16 *buf)
{
    const size_t v0 = mz_kv_chunk_offset(a->n_head_kv, a->head_dim, v, kvh, row);
    if (a->chunks[c]) return (const mz_f16 *)a->chunks[c] + v0;
    a->read_rows(a->read_ctx, c, v0, buf, nt * (size_t)a->head_dim);
    return buf;
}
/* The scalar single-pass kernel mz_attn uses when no SIMD path is active. */
void mz_attn_scalar(const mz_attn_args *a, int ith, int nth);

#endif /* MZ_KERNELS_IMPL_H */
