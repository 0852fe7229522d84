/*
 * ops.c — row and element-wise F32 ops of the transformer block.
 *
 *   rmsnorm: y = x * 1/sqrt(mean(x^2) + eps) [* w]   (sum of squares in double,
 *            then scaled as ggml does: (x * scale) * w)
 *   rope:    for pair i < n_rot/2 at position pos, theta_i = pos * base^(-2i/n_rot),
 *            divided by freq_factors[i] when the model has them (llama.cpp's
 *            rope cache divides its float theta the same way):
 *              (a, b) -> (a cos - b sin, a sin + b cos)
 *            pairs are (2i, 2i+1) (llama, "normal") or (i, i + n_rot/2)
 *            (neox: qwen3; with n_rot == head_dim this is i, i + head_dim/2).
 *            theta is computed exactly as llama.cpp's rope cache does it: in
 *            float, starting at pos and multiplied by theta_scale =
 *            powf(base, -2/n_rot) once per pair, so the rounding matches.
 *   swiglu:  y = silu(g) * u = g / (1 + exp(-g)) * u, exp by a polynomial that
 *            gives the same bits on every ISA (kernels_impl.h, mz_swiglu1)
 *   geglu:   y = gelu(g) * u, gelu by the tanh formula on g rounded to F16,
 *            the result rounded to F16 (ggml's GELU_FP16 table), for
 *            -10 < g < 10; 0 below, g above. The 65536 F16 inputs are
 *            tabulated once: tanhf per element was a quarter of a Gemma
 *            prefill.
 *   add:     y += x
 * Shapes: x is [n_head][head_dim] for rope, flat rows otherwise.
 */
#include "kernels_impl.h"

#include <math.h>
#include <pthread.h>

void mz_rmsnorm(const float *restrict x, const float *restrict w, float *restrict y, size_t n,
                float eps)
{
    MZ_ASSERT(n > 0);
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    const float mean = (float)(ss / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    if (w) {
        for (size_t i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
    } else {
        for (size_t i = 0; i < n; i++) y[i] = x[i] * scale;
    }
}

void mz_rope(float *restrict x, int n_head, int head_dim, int n_rot, int pos, float base,
             const float *freq_factors, bool neox)
{
    MZ_ASSERT(n_head > 0 && head_dim > 0);
    MZ_ASSERT(n_rot > 0 && n_rot % 2 == 0 && n_rot <= head_dim);
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    const int half = n_rot / 2;
    float theta = (float)pos;
    /* Pair-major: each (cos, sin) is computed once and applied to every head,
     * which needs no scratch array. */
    for (int i = 0; i < half; i++) {
        const float th = freq_factors ? theta / freq_factors[i] : theta;
        const float c = cosf(th), s = sinf(th);
        const int i0 = neox ? i : 2 * i;
        const int i1 = neox ? i + half : 2 * i + 1;
        for (int h = 0; h < n_head; h++) {
            float *v = x + (size_t)h * (size_t)head_dim;
            const float a = v[i0], b = v[i1];
            v[i0] = a * c - b * s;
            v[i1] = a * s + b * c;
        }
        theta *= theta_scale;
    }
}

void mz_swiglu_ref(const float *restrict g, const float *restrict u, float *restrict y, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = mz_swiglu1(g[i], u[i]);
}

void mz_swiglu(const float *restrict g, const float *restrict u, float *restrict y, size_t n)
{
#if MZ_KERNELS_X86
    const enum mz_isa isa = mz_kernels_active_isa();
    if (isa == MZ_ISA_AVX512) {
        mz_swiglu_avx512(g, u, y, n);
        return;
    }
    if (isa == MZ_ISA_AVX2) {
        mz_swiglu_avx2(g, u, y, n);
        return;
    }
#endif
    mz_swiglu_ref(g, u, y, n);
}

static float gelu_f16_table[1 << 16]; /* gelu(x) rounded to F16, by x's F16 bits */
static pthread_once_t gelu_f16_once = PTHREAD_ONCE_INIT;

static void gelu_f16_table_init(void)
{
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876f, coef_a = 0.044715f;
    for (uint32_t h = 0; h < (1u << 16); h++) {
        const float x = mz_f16_to_f32((mz_f16)h);
        gelu_f16_table[h] = mz_f16_to_f32(
            mz_f32_to_f16(0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + coef_a * x * x)))));
    }
}

void mz_geglu(const float *restrict g, const float *restrict u, float *restrict y, size_t n)
{
    pthread_once(&gelu_f16_once, gelu_f16_table_init);
    mz_f16 gh[256]; /* g rounded to F16 by the row converter (F16C where present) */
    for (size_t i0 = 0; i0 < n; i0 += 256) {
        const size_t m = n - i0 < 256 ? n - i0 : 256;
        mz_f32_to_f16_row(g + i0, gh, m);
        for (size_t j = 0; j < m; j++) {
            const float x = g[i0 + j];
            const float a = x <= -10.0f ? 0.0f : x >= 10.0f ? x : gelu_f16_table[gh[j]];
            y[i0 + j] = a * u[i0 + j];
        }
    }
}

void mz_add_inplace(float *restrict y, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}
