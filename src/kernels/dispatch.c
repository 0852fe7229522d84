/*
 * dispatch.c — the per-type kernel tables and the run-time choice among them.
 *
 * One designated-initialiser table per ISA, indexed by weight type. A SIMD
 * table only overrides what that ISA speeds up (vec_dot, from_float) and keeps
 * the reference to_float/quantize, which are off the hot path.
 *
 * Choice (mz_kernels_init, once per process, repeated calls are no-ops):
 *   MZ_KERNELS=ref|scalar -> scalar; MZ_KERNELS=avx2 -> AVX2; otherwise the
 *   best the CPU has (__builtin_cpu_supports): AVX-512 (F/BW/VL/VNNI), AVX2,
 *   scalar; on AArch64, NEON (baseline there).
 * The AVX-512 table runs the register-tiled kernels of gemm_x86.h with VNNI
 * on 256-bit registers (32 of them, so 4 x 4 tiles) and gives the same bits
 * as AVX2 for the quantized types; single thread, SmolLM2 ffn shape
 * 1536 x 576 (bench_kernels) it measured 1.0-1.6x the AVX2 tiles for 1 and
 * 64 tokens (Q4_1 1.2x / 1.4x, Q8_0 64 tokens about equal).
 * The active ISA is an atomic so a lazy first use from several threads is
 * race-free (every thread computes the same answer).
 */
#include "kernels_impl.h"

#include <stdatomic.h>
#include <string.h>

#if MZ_KERNELS_X86
#include <cpuid.h>

/* F16C straight from CPUID (leaf 1, ECX bit 29): clang's
 * __builtin_cpu_supports does not know "f16c". */
static bool cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

/* ---- tables ---------------------------------------------------------------------- */

/* A K-quant entry (kquant_*.c): activations in Q8_K, the reference
 * dequantizer and quantizer, vec_dot and its gemm of the given ISA
 * (KQ_ENTRY2: vec_dot of one ISA, gemm of another; the same bits). */
#define KQ_ENTRY2(t, isa, gemm_isa, ff)                                                         \
    {.vec_dot_type = MZ_DT_Q8_K, .from_float = ff, .vec_dot = mz_vec_dot_##t##_q8_K_##isa,   \
     .to_float = mz_to_float_##t##_ref, .quantize = mz_quantize_##t##_ref,                      \
     .gemm = mz_gemm_##t##_q8_K_##gemm_isa}
#define KQ_ENTRY(t, isa, ff) KQ_ENTRY2(t, isa, isa, ff)
/* Q5_0, Q5_1, IQ4_NL, IQ4_XS (q5_iq4_*.c) in a table of ISA `isa`, given that
 * ISA's Q8_0 / Q8_1 activation conversions; Q8_K's is the reference. */
#define Q5_IQ4_ENTRIES(ff_q8_0, ff_q8_1, isa)                                                        \
    [MZ_DT_Q5_0] = {.vec_dot_type = MZ_DT_Q8_0, .from_float = ff_q8_0,                                \
                    .vec_dot = mz_vec_dot_q5_0_q8_0_##isa, .to_float = mz_to_float_q5_0_ref,          \
                    .quantize = mz_quantize_q5_0_ref, .gemm = mz_gemm_q5_0_q8_0_##isa},               \
    [MZ_DT_Q5_1] = {.vec_dot_type = MZ_DT_Q8_1, .from_float = ff_q8_1,                                \
                    .vec_dot = mz_vec_dot_q5_1_q8_1_##isa, .to_float = mz_to_float_q5_1_ref,          \
                    .quantize = mz_quantize_q5_1_ref, .gemm = mz_gemm_q5_1_q8_1_##isa},               \
    [MZ_DT_IQ4_NL] = {.vec_dot_type = MZ_DT_Q8_0, .from_float = ff_q8_0,                              \
                      .vec_dot = mz_vec_dot_iq4_nl_q8_0_##isa, .to_float = mz_to_float_iq4_nl_ref,    \
                      .quantize = mz_quantize_iq4_nl_ref, .gemm = mz_gemm_iq4_nl_q8_0_##isa},         \
    [MZ_DT_IQ4_XS] = {.vec_dot_type = MZ_DT_Q8_K, .from_float = mz_quantize_q8_K_ref,                 \
                      .vec_dot = mz_vec_dot_iq4_xs_q8_K_##isa, .to_float = mz_to_float_iq4_xs_ref,    \
                      .quantize = mz_quantize_iq4_xs_ref, .gemm = mz_gemm_iq4_xs_q8_K_##isa}

static const mz_type_kernels k_ref[MZ_DT_COUNT] = {
    [MZ_DT_F32] = {.vec_dot_type = MZ_DT_F32, .from_float = mz_quantize_f32_ref,
                   .vec_dot = mz_vec_dot_f32_ref, .to_float = mz_to_float_f32_ref,
                   .quantize = mz_quantize_f32_ref,
                   .gemm = mz_gemm_f32_ref},
    [MZ_DT_F16] = {.vec_dot_type = MZ_DT_F16, .from_float = mz_quantize_f16_ref,
                   .vec_dot = mz_vec_dot_f16_ref, .to_float = mz_to_float_f16_ref,
                   .quantize = mz_quantize_f16_ref,
                   .gemm = mz_gemm_f16_ref, .gemm_xf = mz_gemm_f16_xf_ref},
    [MZ_DT_BF16] = {.vec_dot_type = MZ_DT_BF16, .from_float = mz_quantize_bf16_ref,
                    .vec_dot = mz_vec_dot_bf16_ref, .to_float = mz_to_float_bf16_ref,
                    .quantize = mz_quantize_bf16_ref,
                   .gemm = mz_gemm_bf16_ref},
    [MZ_DT_Q8_0] = {.vec_dot_type = MZ_DT_Q8_0, .from_float = mz_quantize_q8_0_ref,
                    .vec_dot = mz_vec_dot_q8_0_q8_0_ref, .to_float = mz_to_float_q8_0_ref,
                    .quantize = mz_quantize_q8_0_ref,
                   .gemm = mz_gemm_q8_0_q8_0_ref},
    [MZ_DT_Q4_0] = {.vec_dot_type = MZ_DT_Q8_0, .from_float = mz_quantize_q8_0_ref,
                    .vec_dot = mz_vec_dot_q4_0_q8_0_ref, .to_float = mz_to_float_q4_0_ref,
                    .quantize = mz_quantize_q4_0_ref,
                   .gemm = mz_gemm_q4_0_q8_0_ref},
    [MZ_DT_Q4_1] = {.vec_dot_type = MZ_DT_Q8_1, .from_float = mz_quantize_q8_1_ref,
                    .vec_dot = mz_vec_dot_q4_1_q8_1_ref, .to_float = mz_to_float_q4_1_ref,
                    .quantize = mz_quantize_q4_1_ref,
                   .gemm = mz_gemm_q4_1_q8_1_ref},
    /* ---- K-quants (kquant_ref.c) ---- */
    [MZ_DT_Q2_K] = KQ_ENTRY(q2_K, ref, mz_quantize_q8_K_ref),
    [MZ_DT_Q3_K] = KQ_ENTRY(q3_K, ref, mz_quantize_q8_K_ref),
    [MZ_DT_Q4_K] = KQ_ENTRY(q4_K, ref, mz_quantize_q8_K_ref),
    [MZ_DT_Q5_K] = KQ_ENTRY(q5_K, ref, mz_quantize_q8_K_ref),
    [MZ_DT_Q6_K] = KQ_ENTRY(q6_K, ref, mz_quantize_q8_K_ref),
    /* ---- end of K-quants ---- */
    Q5_IQ4_ENTRIES(mz_quantize_q8_0_ref, mz_quantize_q8_1_ref, ref),
};

#if MZ_KERNELS_X86
static const mz_type_kernels k_avx2[MZ_DT_COUNT] = {
    [MZ_DT_F32] = {.vec_dot_type = MZ_DT_F32, .from_float = mz_quantize_f32_ref,
                   .vec_dot = mz_vec_dot_f32_avx2, .to_float = mz_to_float_f32_ref,
                   .quantize = mz_quantize_f32_ref,
                   .gemm = mz_gemm_f32_avx2},
    [MZ_DT_F16] = {.vec_dot_type = MZ_DT_F16, .from_float = mz_from_float_f16_avx2,
                   .vec_dot = mz_vec_dot_f16_avx2, .to_float = mz_to_float_f16_ref,
                   .quantize = mz_quantize_f16_ref,
                   .gemm = mz_gemm_f16_avx2, .gemm_xf = mz_gemm_f16_xf_avx2},
    [MZ_DT_BF16] = {.vec_dot_type = MZ_DT_BF16, .from_float = mz_quantize_bf16_ref,
                    .vec_dot = mz_vec_dot_bf16_avx2, .to_float = mz_to_float_bf16_ref,
                    .quantize = mz_quantize_bf16_ref,
                   .gemm = mz_gemm_bf16_avx2},
    [MZ_DT_Q8_0] = {.vec_dot_type = MZ_DT_Q8_0, .from_float = mz_from_float_q8_0_avx2,
                    .vec_dot = mz_vec_dot_q8_0_q8_0_avx2, .to_float = mz_to_float_q8_0_ref,
                    .quantize = mz_quantize_q8_0_ref,
                   .gemm = mz_gemm_q8_0_q8_0_avx2},
    [MZ_DT_Q4_0] = {.vec_dot_type = MZ_DT_Q8_0, .from_float = mz_from_float_q8_0_avx2,
                    .vec_dot = mz_vec_dot_q4_0_q8_0_avx2, .to_float = mz_to_float_q4_0_ref,
                    .quantize = mz_quantize_q4_0_ref,
                   .gemm = mz_gemm_q4_0_q8_0_avx2},
    [MZ_DT_Q4_1] = {.vec_dot_type = MZ_DT_Q8_1, .from_float = mz_from_float_q8_1_avx2,
                    .vec_dot = mz_vec_dot_q4_1_q8_1_avx2, .to_float = mz_to_float_q4_1_ref,
                    .quantize = mz_quantize_q4_1_ref,
                   .gemm = mz_gemm_q4_1_q8_1_avx2},
    /* ---- K-quants (kquant_avx2.c) ---- */
    [MZ_DT_Q2_K] = KQ_ENTRY(q2_K, avx2, mz_from_float_q8_K_avx2),
    [MZ_DT_Q3_K] = KQ_ENTRY(q3_K, avx2, mz_from_float_q8_K_avx2),
    [MZ_DT_Q4_K] = KQ_ENTRY(q4_K, avx2, mz_from_float_q8_K_avx2),
    [MZ_DT_Q5_K] = KQ_ENTRY(q5_K, avx2, mz_from_float_q8_K_avx2),
    [MZ_DT_Q6_K] = KQ_ENTRY(q6_K, avx2, mz_from_float_q8_K_avx2),
    /* ---- end of K-quants ---- */
    Q5_IQ4_ENTRIES(mz_from_float_q8_0_avx2, mz_from_float_q8_1_avx2, avx2),
};

static const mz_type_kernels k_avx512[MZ_DT_COUNT] = {
    [MZ_DT_F32] = {.vec_dot_type = MZ_DT_F32, .from_float = mz_quantize_f32_ref,
                   .vec_dot = mz_vec_dot_f32_avx512, .to_float = mz_to_float_f32_ref,
                   .quantize = mz_quantize_f32_ref,
                   .gemm = mz_gemm_f32_avx512},
    [MZ_DT_F16] = {.vec_dot_type = MZ_DT_F16, .from_float = mz_from_float_f16_avx2,
                   .vec_dot = mz_vec_dot_f16_avx512, .to_float = mz_to_float_f16_ref,
                   .quantize = mz_quantize_f16_ref,
                   .gemm = mz_gemm_f16_avx512, .gemm_xf = mz_gemm_f16_xf_avx512},
    [MZ_DT_BF16] = {.vec_dot_type = MZ_DT_BF16, .from_float = mz_quantize_bf16_ref,
                    .vec_dot = mz_vec_dot_bf16_avx2, .to_float = mz_to_float_bf16_ref,
                    .quantize = mz_quantize_bf16_ref,
                   .gemm = mz_gemm_bf16_avx2},
    [MZ_DT_Q8_0] = {.vec_dot_type = MZ_DT_Q8_0, .from_float = mz_from_float_q8_0_avx2,
                    .vec_dot = mz_vec_dot_q8_0_q8_0_avx512, .to_float = mz_to_float_q8_0_ref,
                    .quantize = mz_quantize_q8_0_ref,
                   .gemm = mz_gemm_q8_0_q8_0_avx512},
    [MZ_DT_Q4_0] = {.vec_dot_type = MZ_DT_Q8_0, .from_float = mz_from_float_q8_0_avx2,
                    .vec_dot = mz_vec_dot_q4_0_q8_0_avx512, .to_float = mz_to_float_q4_0_ref,
                    .quantize = mz_quantize_q4_0_ref,
                   .gemm = mz_gemm_q4_0_q8_0_avx512},
    [MZ_DT_Q4_1] = {.vec_dot_type = MZ_DT_Q8_1, .from_float = mz_from_float_q8_1_avx2,
                    .vec_dot = mz_vec_dot_q4_1_q8_1_avx512, .to_float = mz_to_float_q4_1_ref,
                    .quantize = mz_quantize_q4_1_ref,
                   .gemm = mz_gemm_q4_1_q8_1_avx512},
    /* ---- K-quants (kquant_avx512.c; Q2_K, Q3_K, Q4_K: kquant_avx2.c) ---- */
    [MZ_DT_Q2_K] = KQ_ENTRY2(q2_K, avx2, avx512, mz_from_float_q8_K_avx2),
    [MZ_DT_Q3_K] = KQ_ENTRY2(q3_K, avx2, avx512, mz_from_float_q8_K_avx2),
    [MZ_DT_Q4_K] = KQ_ENTRY2(q4_K, avx2, avx512, mz_from_float_q8_K_avx2),
    [MZ_DT_Q5_K] = KQ_ENTRY(q5_K, avx512, mz_from_float_q8_K_avx2),
    [MZ_DT_Q6_K] = KQ_ENTRY(q6_K, avx512, mz_from_float_q8_K_avx2),
    /* ---- end of K-quants ---- */
    Q5_IQ4_ENTRIES(mz_from_float_q8_0_avx2, mz_from_float_q8_1_avx2, avx512),
};
#endif

#if MZ_KERNELS_NEON
/* NEON is baseline on AArch64: no run-time check needed. Activation
 * conversion and dequantization stay on the reference code. */
static const mz_type_kernels k_neon[MZ_DT_COUNT] = {
    [MZ_DT_F32] = {.vec_dot_type = MZ_DT_F32, .from_float = mz_quantize_f32_ref,
                   .vec_dot = mz_vec_dot_f32_ref, .to_float = mz_to_float_f32_ref,
                   .quantize = mz_quantize_f32_ref, .gemm = mz_gemm_f32_ref},
    [MZ_DT_F16] = {.vec_dot_type = MZ_DT_F16, .from_float = mz_quantize_f16_ref,
                   .vec_dot = mz_vec_dot_f16_neon, .to_float = mz_to_float_f16_ref,
                   .quantize = mz_quantize_f16_ref, .gemm = mz_gemm_f16_neon},
    [MZ_DT_BF16] = {.vec_dot_type = MZ_DT_BF16, .from_float = mz_quantize_bf16_ref,
                    .vec_dot = mz_vec_dot_bf16_ref, .to_float = mz_to_float_bf16_ref,
                    .quantize = mz_quantize_bf16_ref, .gemm = mz_gemm_bf16_ref},
    [MZ_DT_Q8_0] = {.vec_dot_type = MZ_DT_Q8_0, .from_float = mz_quantize_q8_0_ref,
                    .vec_dot = mz_vec_dot_q8_0_q8_0_neon, .to_float = mz_to_float_q8_0_ref,
                    .quantize = mz_quantize_q8_0_ref, .gemm = mz_gemm_q8_0_q8_0_neon},
    [MZ_DT_Q4_0] = {.vec_dot_type = MZ_DT_Q8_0, .from_float = mz_quantize_q8_0_ref,
                    .vec_dot = mz_vec_dot_q4_0_q8_0_neon, .to_float = mz_to_float_q4_0_ref,
                    .quantize = mz_quantize_q4_0_ref, .gemm = mz_gemm_q4_0_q8_0_neon},
    [MZ_DT_Q4_1] = {.vec_dot_type = MZ_DT_Q8_1, .from_float = mz_quantize_q8_1_ref,
                    .vec_dot = mz_vec_dot_q4_1_q8_1_neon, .to_float = mz_to_float_q4_1_ref,
                    .quantize = mz_quantize_q4_1_ref, .gemm = mz_gemm_q4_1_q8_1_neon},
    /* ---- K-quants (kquant_neon.c) ---- */
    [MZ_DT_Q2_K] = KQ_ENTRY(q2_K, neon, mz_quantize_q8_K_ref),
    [MZ_DT_Q3_K] = KQ_ENTRY(q3_K, neon, mz_quantize_q8_K_ref),
    [MZ_DT_Q4_K] = KQ_ENTRY(q4_K, neon, mz_quantize_q8_K_ref),
    [MZ_DT_Q5_K] = KQ_ENTRY(q5_K, neon, mz_quantize_q8_K_ref),
    [MZ_DT_Q6_K] = KQ_ENTRY(q6_K, neon, mz_quantize_q8_K_ref),
    /* ---- end of K-quants ---- */
    Q5_IQ4_ENTRIES(mz_quantize_q8_0_ref, mz_quantize_q8_1_ref, neon),
};
#endif

/* x8 layout tables (repack.c): the activation conversion of the plain
 * table, the x8 gemm, and as vec_dot the x8 arithmetic on a plain row. */
#define X8_ENTRY(vdt, ff, vd, tf, q, g) \
    {.vec_dot_type = vdt, .from_float = ff, .vec_dot = vd, .to_float = tf, .quantize = q, .gemm = g, .row_group = 8}
/* Q4_K, Q5_K, Q6_K (kquant_x8_x86.h): the plain vec_dot of the table (the
 * same arithmetic); vd4: the ISA of Q4_K's vec_dot, vd56: Q5_K's and Q6_K's. */
#define KQ_X8_ENTRY(t, vd_isa, isa, ff)                                                                    \
    X8_ENTRY(MZ_DT_Q8_K, ff, mz_vec_dot_##t##_q8_K_##vd_isa, mz_to_float_##t##_ref, mz_quantize_##t##_ref, \
             mz_gemm_x8_##t##_q8_K_##isa)
#define KQ_X8_ENTRIES(vd4, vd56, isa, ff)                   \
    [MZ_DT_Q4_K] = KQ_X8_ENTRY(q4_K, vd4, isa, ff),         \
    [MZ_DT_Q5_K] = KQ_X8_ENTRY(q5_K, vd56, isa, ff),        \
    [MZ_DT_Q6_K] = KQ_X8_ENTRY(q6_K, vd56, isa, ff)
static const mz_type_kernels k_x8_ref[MZ_DT_COUNT] = {
    [MZ_DT_Q8_0] = X8_ENTRY(MZ_DT_Q8_0, mz_quantize_q8_0_ref, mz_vec_dot_x8_q8_0_ref, mz_to_float_q8_0_ref,
                            mz_quantize_q8_0_ref, mz_gemm_x8_q8_0_q8_0_ref),
    [MZ_DT_Q4_0] = X8_ENTRY(MZ_DT_Q8_0, mz_quantize_q8_0_ref, mz_vec_dot_x8_q4_0_ref, mz_to_float_q4_0_ref,
                            mz_quantize_q4_0_ref, mz_gemm_x8_q4_0_q8_0_ref),
    [MZ_DT_Q4_1] = X8_ENTRY(MZ_DT_Q8_1, mz_quantize_q8_1_ref, mz_vec_dot_x8_q4_1_ref, mz_to_float_q4_1_ref,
                            mz_quantize_q4_1_ref, mz_gemm_x8_q4_1_q8_1_ref),
    /* q5_iq4_*.c */
    [MZ_DT_Q5_0] = X8_ENTRY(MZ_DT_Q8_0, mz_quantize_q8_0_ref, mz_vec_dot_x8_q5_0_ref, mz_to_float_q5_0_ref,
                            mz_quantize_q5_0_ref, mz_gemm_x8_q5_0_q8_0_ref),
    [MZ_DT_IQ4_NL] = X8_ENTRY(MZ_DT_Q8_0, mz_quantize_q8_0_ref, mz_vec_dot_x8_iq4_nl_ref, mz_to_float_iq4_nl_ref,
                              mz_quantize_iq4_nl_ref, mz_gemm_x8_iq4_nl_q8_0_ref),
    [MZ_DT_Q5_1] = X8_ENTRY(MZ_DT_Q8_1, mz_quantize_q8_1_ref, mz_vec_dot_x8_q5_1_ref, mz_to_float_q5_1_ref,
                            mz_quantize_q5_1_ref, mz_gemm_x8_q5_1_q8_1_ref),
    KQ_X8_ENTRIES(ref, ref, ref, mz_quantize_q8_K_ref),
};
#if MZ_KERNELS_X86
static const mz_type_kernels k_x8_avx2[MZ_DT_COUNT] = {
    [MZ_DT_Q8_0] = X8_ENTRY(MZ_DT_Q8_0, mz_from_float_q8_0_avx2, mz_vec_dot_x8_q8_0_ref, mz_to_float_q8_0_ref,
                            mz_quantize_q8_0_ref, mz_gemm_x8_q8_0_q8_0_avx2),
    [MZ_DT_Q4_0] = X8_ENTRY(MZ_DT_Q8_0, mz_from_float_q8_0_avx2, mz_vec_dot_x8_q4_0_ref, mz_to_float_q4_0_ref,
                            mz_quantize_q4_0_ref, mz_gemm_x8_q4_0_q8_0_avx2),
    [MZ_DT_Q4_1] = X8_ENTRY(MZ_DT_Q8_1, mz_from_float_q8_1_avx2, mz_vec_dot_x8_q4_1_ref, mz_to_float_q4_1_ref,
                            mz_quantize_q4_1_ref, mz_gemm_x8_q4_1_q8_1_avx2),
    /* q5_iq4_*.c */
    [MZ_DT_Q5_0] = X8_ENTRY(MZ_DT_Q8_0, mz_from_float_q8_0_avx2, mz_vec_dot_x8_q5_0_ref, mz_to_float_q5_0_ref,
                            mz_quantize_q5_0_ref, mz_gemm_x8_q5_0_q8_0_avx2),
    [MZ_DT_IQ4_NL] = X8_ENTRY(MZ_DT_Q8_0, mz_from_float_q8_0_avx2, mz_vec_dot_x8_iq4_nl_ref, mz_to_float_iq4_nl_ref,
                              mz_quantize_iq4_nl_ref, mz_gemm_x8_iq4_nl_q8_0_avx2),
    [MZ_DT_Q5_1] = X8_ENTRY(MZ_DT_Q8_1, mz_from_float_q8_1_avx2, mz_vec_dot_x8_q5_1_ref, mz_to_float_q5_1_ref,
                            mz_quantize_q5_1_ref, mz_gemm_x8_q5_1_q8_1_avx2),
    KQ_X8_ENTRIES(avx2, avx2, avx2, mz_from_float_q8_K_avx2),
};
static const mz_type_kernels k_x8_avx512[MZ_DT_COUNT] = {
    [MZ_DT_Q8_0] = X8_ENTRY(MZ_DT_Q8_0, mz_from_float_q8_0_avx2, mz_vec_dot_x8_q8_0_ref, mz_to_float_q8_0_ref,
                            mz_quantize_q8_0_ref, mz_gemm_x8_q8_0_q8_0_avx512),
    [MZ_DT_Q4_0] = X8_ENTRY(MZ_DT_Q8_0, mz_from_float_q8_0_avx2, mz_vec_dot_x8_q4_0_ref, mz_to_float_q4_0_ref,
                            mz_quantize_q4_0_ref, mz_gemm_x8_q4_0_q8_0_avx512),
    [MZ_DT_Q4_1] = X8_ENTRY(MZ_DT_Q8_1, mz_from_float_q8_1_avx2, mz_vec_dot_x8_q4_1_ref, mz_to_float_q4_1_ref,
                            mz_quantize_q4_1_ref, mz_gemm_x8_q4_1_q8_1_avx512),
    /* q5_iq4_*.c */
    [MZ_DT_Q5_0] = X8_ENTRY(MZ_DT_Q8_0, mz_from_float_q8_0_avx2, mz_vec_dot_x8_q5_0_ref, mz_to_float_q5_0_ref,
                            mz_quantize_q5_0_ref, mz_gemm_x8_q5_0_q8_0_avx512),
    [MZ_DT_IQ4_NL] = X8_ENTRY(MZ_DT_Q8_0, mz_from_float_q8_0_avx2, mz_vec_dot_x8_iq4_nl_ref, mz_to_float_iq4_nl_ref,
                              mz_quantize_iq4_nl_ref, mz_gemm_x8_iq4_nl_q8_0_avx512),
    [MZ_DT_Q5_1] = X8_ENTRY(MZ_DT_Q8_1, mz_from_float_q8_1_avx2, mz_vec_dot_x8_q5_1_ref, mz_to_float_q5_1_ref,
                            mz_quantize_q5_1_ref, mz_gemm_x8_q5_1_q8_1_avx512),
    KQ_X8_ENTRIES(avx2, avx512, avx512, mz_from_float_q8_K_avx2),
};
#endif

/* The scalar table has no x8 entries of its own in the active choice
 * (MZ_KERNELS=ref keeps the plain layout); k_x8_ref serves the tests. */
static const mz_type_kernels *const k_x8_tables[MZ_ISA_COUNT] = {
    [MZ_ISA_SCALAR] = NULL, /* C11 forbids an empty initializer (AArch64 builds) */
#if MZ_KERNELS_X86
    [MZ_ISA_AVX2] = k_x8_avx2,
    [MZ_ISA_AVX512] = k_x8_avx512,
#endif
};

static const mz_type_kernels *const k_tables[MZ_ISA_COUNT] = {
    [MZ_ISA_SCALAR] = k_ref,
#if MZ_KERNELS_X86
    [MZ_ISA_AVX2] = k_avx2,
    [MZ_ISA_AVX512] = k_avx512,
#endif
#if MZ_KERNELS_NEON
    [MZ_ISA_NEON] = k_neon,
#endif
};

const char *const mz_isa_names[MZ_ISA_COUNT] = {
    [MZ_ISA_SCALAR] = "scalar", [MZ_ISA_AVX2] = "avx2", [MZ_ISA_AVX512] = "avx512", [MZ_ISA_NEON] = "neon",
};

/* -1 until mz_kernels_init has run, then an enum mz_isa. */
static atomic_int g_isa = -1;
/* mz_kernels_f16_gemv_rows: set by mz_kernels_init (or a test). */
static atomic_bool g_f16_gemv_rows;

bool mz_kernels_f16_gemv_rows(void) { return atomic_load_explicit(&g_f16_gemv_rows, memory_order_relaxed); }
void mz_kernels_set_f16_gemv_rows(bool rows) { atomic_store_explicit(&g_f16_gemv_rows, rows, memory_order_relaxed); }

/* ---- CPU features ------------------------------------------------------------------ */

bool mz_kernels_cpu_has(enum mz_isa isa)
{
    switch (isa) {
    case MZ_ISA_SCALAR: return true;
#if MZ_KERNELS_X86
    case MZ_ISA_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    case MZ_ISA_AVX512:
        /* libgcc also checks that the OS saves the ZMM state (XCR0). */
        return mz_kernels_cpu_has(MZ_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512vnni");
#endif
#if MZ_KERNELS_NEON
    case MZ_ISA_NEON: return true;
#endif
    default: return false;
    }
}

void mz_kernels_init(void)
{
    if (atomic_load_explicit(&g_isa, memory_order_acquire) >= 0) return;
    enum mz_isa best = mz_kernels_cpu_has(MZ_ISA_AVX512) ? MZ_ISA_AVX512
                       : mz_kernels_cpu_has(MZ_ISA_AVX2) ? MZ_ISA_AVX2
                       : mz_kernels_cpu_has(MZ_ISA_NEON) ? MZ_ISA_NEON
                                                         : MZ_ISA_SCALAR;
    const char *env = getenv("MZ_KERNELS");
    if (env && (!strcmp(env, "ref") || !strcmp(env, "scalar"))) best = MZ_ISA_SCALAR;
    else if (env && !strcmp(env, "avx2") && best == MZ_ISA_AVX512) best = MZ_ISA_AVX2;

    bool rows = false;
#if MZ_KERNELS_X86
    __builtin_cpu_init();
    rows = __builtin_cpu_is("amd");
#endif
    const char *walk = getenv("MZ_F16_GEMV");
    if (walk && !strcmp(walk, "rows")) rows = true;
    else if (walk && !strcmp(walk, "tiles")) rows = false;
    mz_kernels_set_f16_gemv_rows(rows);

    /* Concurrent first calls all store the same value. */
    atomic_store_explicit(&g_isa, (int)best, memory_order_release);
}

enum mz_isa mz_kernels_active_isa(void)
{
    int isa = atomic_load_explicit(&g_isa, memory_order_acquire);
    if (MZ_UNLIKELY(isa < 0)) {
        mz_kernels_init();
        isa = atomic_load_explicit(&g_isa, memory_order_acquire);
    }
    return (enum mz_isa)isa;
}

const char *mz_kernels_isa(void) { return mz_isa_names[mz_kernels_active_isa()]; }

static const mz_type_kernels *table_entry(const mz_type_kernels *t, int type)
{
    if (!t || type < 0 || type >= MZ_DT_COUNT || !t[type].vec_dot) return NULL;
    return &t[type];
}

const mz_type_kernels *mz_kernels_for_isa(enum mz_isa isa, int type)
{
    if ((int)isa < 0 || isa >= MZ_ISA_COUNT || !mz_kernels_cpu_has(isa)) return NULL;
    return table_entry(k_tables[isa], type);
}

const mz_type_kernels *mz_kernels_for(int type)
{
    return table_entry(k_tables[mz_kernels_active_isa()], type);
}

const mz_type_kernels *mz_kernels_ref(int type) { return table_entry(k_ref, type); }

const mz_type_kernels *mz_kernels_x8_for_isa(enum mz_isa isa, int type)
{
    if ((int)isa < 0 || isa >= MZ_ISA_COUNT || !mz_kernels_cpu_has(isa)) return NULL;
    return table_entry(isa == MZ_ISA_SCALAR ? k_x8_ref : k_x8_tables[isa], type);
}

int mz_kernels_pick_layout(int type, size_t n_rows, size_t n_cols)
{
    const char *env = getenv("MZ_REPACK");
    if (env && !strcmp(env, "0")) return MZ_LAYOUT_PLAIN;
    if (!table_entry(k_x8_tables[mz_kernels_active_isa()], type)) return MZ_LAYOUT_PLAIN;
    return mz_x8_shape_ok(type, n_rows, n_cols) ? MZ_LAYOUT_X8 : MZ_LAYOUT_PLAIN;
}

const mz_type_kernels *mz_kernels_for_layout(int type, int layout)
{
    if (layout == MZ_LAYOUT_PLAIN) return mz_kernels_for(type);
    if (layout != MZ_LAYOUT_X8) return NULL;
    return table_entry(k_x8_tables[mz_kernels_active_isa()], type);
}
