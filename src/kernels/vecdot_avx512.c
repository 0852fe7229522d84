/*
 * vecdot_avx512.c — AVX-512 F32 dot product (16-lane FMAs, two accumulators,
 * masked tail). Built with the AVX-512 flags (CMakeLists.txt); called only
 * when the CPU has them. The quantized and F16 kernels of the AVX-512 table
 * are in gemm_avx512.c; activation conversion (from_float) reuses AVX2 code.
 */
#include "kernels_impl.h"

#if MZ_KERNELS_X86 && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__F16C__)

#include <immintrin.h>

float mz_vec_dot_f32_avx512(size_t n, const void *restrict w, const void *restrict x)
{
    const float *a = w, *b = x;
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

#else
/* Not an x86-64 build with AVX-512 flags: nothing to compile here. */
typedef int mz_vecdot_avx512_unused;
#endif
