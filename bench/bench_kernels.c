/*
 * bench_kernels — single-thread speed of the matrix kernels per ISA, type and
 * shape: prefill-like (many tokens) and decode-like (one token) products,
 * in GOP/s (2 ops per multiply-add) and weight GB/s.
 *
 * usage: bench_kernels [rows cols tokens] [-r reps] [-t TYPE] [-c 1]
 *        bench_kernels attn      (attention per ISA, qwen3-0.6b shape, 1k/8k/32k context)
 * Default: 1536 x 576 (SmolLM2 ffn), tokens 1 and 64. Quantized types run
 * twice: plain layout, then "x8" (weights repacked, repack.c) where the
 * type has it. -t runs one type only (its name as printed: Q4_1, Q4_0,
 * Q8_0, F16, Q4_K, Q6_K, Q5_K, Q3_K, Q2_K, Q5_0, Q5_1, IQ4_NL, IQ4_XS; the
 * K-quants and IQ4_XS need cols % 256 == 0, e.g. 576 1536 1: SmolLM2's
 * ffn_down). -c 1 times by thread CPU time (see g_cpu_time).
 */
#define _POSIX_C_SOURCE 200809L
#include "kernels/kernels_impl.h"
#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* -c: time the matrix products by this thread's CPU time instead of the
 * wall clock (steadier on a loaded, shared machine; single thread only). */
static bool g_cpu_time;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(g_cpu_time ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void bench(enum mz_isa isa, const char *isa_name, int type, size_t rows, size_t cols, size_t ntok, int reps,
                  bool x8)
{
    const mz_type_kernels *k = x8 ? mz_kernels_x8_for_isa(isa, type) : mz_kernels_for_isa(isa, type);
    if (!k || (x8 && !mz_x8_shape_ok(type, rows, cols)) || cols % mz_dtype_block_len(type)) return;
    const size_t wrb = mz_dtype_row_bytes(type, cols), xrb = mz_dtype_row_bytes(k->vec_dot_type, cols);
    float *wf = malloc(cols * sizeof *wf), *xf = malloc(cols * sizeof *xf);
    uint8_t *w = malloc(rows * wrb), *x = malloc(ntok * xrb);
    float *y = malloc(rows * ntok * sizeof *y);
    unsigned s = 1;
    for (size_t r = 0; r < rows; r++) {
        for (size_t c = 0; c < cols; c++) wf[c] = (float)((s = s * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
        k->quantize(wf, w + r * wrb, cols);
    }
    for (size_t t = 0; t < ntok; t++) {
        for (size_t c = 0; c < cols; c++) xf[c] = (float)((s = s * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
        k->from_float(xf, x + t * xrb, cols);
    }
    if (x8) {
        void *scratch = malloc(8 * wrb);
        mz_repack_x8(type, w, rows, cols, scratch);
        free(scratch);
    }
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = now_s();
        int inner = 0;
        do {
            mz_matmul(k, w, wrb, cols, rows, x, xrb, ntok, y, rows, 0, 1);
            inner++;
        } while (now_s() - t0 < 0.05);
        best = MZ_MIN(best, (now_s() - t0) / inner);
    }
    printf("%-7s %-6s%s %5zux%-5zu tok %4zu: %7.2f GOP/s  %6.2f GB/s weights  %8.1f us\n", isa_name,
           mz_dtype_name(type), x8 ? "x8" : "  ", rows, cols, ntok, 2.0 * rows * cols * ntok / best / 1e9,
           (double)rows * wrb / best / 1e9, best * 1e6);
    if (k->gemm_xf && ntok > 1) {
        /* The prefill's path for F16 weights: the activations converted to
         * F32 once for the whole product (mz_matmul_rows_xf). */
        float *x32 = malloc(ntok * cols * sizeof *x32);
        for (size_t t = 0; t < ntok; t++)
            for (size_t c = 0; c < cols; c++) x32[t * cols + c] = mz_f16_to_f32(((const mz_f16 *)(x + t * xrb))[c]);
        best = 1e30;
        for (int rep = 0; rep < reps; rep++) {
            double t0 = now_s();
            int inner = 0;
            do {
                mz_matmul_rows_xf(k, w, wrb, cols, rows, x32, cols * sizeof(float), ntok, y, rows, 0, rows);
                inner++;
            } while (now_s() - t0 < 0.05);
            best = MZ_MIN(best, (now_s() - t0) / inner);
        }
        printf("%-7s %-6sxf %5zux%-5zu tok %4zu: %7.2f GOP/s  %6.2f GB/s weights  %8.1f us\n", isa_name,
               mz_dtype_name(type), rows, cols, ntok, 2.0 * rows * cols * ntok / best / 1e9,
               (double)rows * wrb / best / 1e9, best * 1e6);
        free(x32);
    }
    free(wf);
    free(xf);
    free(w);
    free(x);
    free(y);
}

/* Attention of n_q query tokens over n_ctx cached positions (qwen3-0.6b
 * shape: 16 query heads, 8 KV heads, head_dim 128), one layer, nth slices
 * run one after the other on this thread (so the time is the total work).
 * Each ISA's kernel in turn, median of reps; the AVX-512 kernel must give
 * the AVX2 kernel's bits (checked here too), so its ratio is a pure speedup. */
typedef void (*attn_fn)(const mz_attn_args *a, int ith, int nth);

static double median(double *t, int n)
{
    for (int i = 1; i < n; i++)
        for (int k = i; k > 0 && t[k] < t[k - 1]; k--) {
            double x = t[k];
            t[k] = t[k - 1];
            t[k - 1] = x;
        }
    return t[n / 2];
}

static double time_attn_once(attn_fn fn, mz_attn_args *a, int nth)
{
    double t0 = now_s();
    for (int ith = 0; ith < nth; ith++) fn(a, ith, nth);
    for (int ith = 0; ith < nth; ith++) mz_attn_merge(a, ith, nth);
    return now_s() - t0;
}

static int bench_attn(size_t n_ctx, size_t n_q, int nth)
{
    const int n_head = 16, n_kv = 8, hd = 128;
    const size_t n_chunks = (n_ctx + MZ_KV_CHUNK_TOKENS - 1) / MZ_KV_CHUNK_TOKENS;
    const size_t cb = mz_kv_chunk_bytes(n_kv, hd);
    uint8_t **chunks = malloc(n_chunks * sizeof *chunks);
    unsigned s = 3;
    for (size_t c = 0; c < n_chunks; c++) {
        chunks[c] = malloc(cb);
        mz_f16 *h = (mz_f16 *)chunks[c];
        for (size_t i = 0; i < cb / 2; i++) h[i] = mz_f32_to_f16((float)((s = s * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f);
    }
    const size_t n_out = n_q * n_head * hd;
    float *q = malloc(n_out * sizeof *q), *out = malloc(n_out * sizeof *out), *first = malloc(n_out * sizeof *first);
    for (size_t i = 0; i < n_out; i++) q[i] = (float)((s = s * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
    mz_attn_args a = {.q = q, .out = out, .chunks = (const uint8_t *const *)chunks, .n_head = n_head,
                      .n_head_kv = n_kv, .head_dim = hd, .n_q = n_q, .pos0 = n_ctx - n_q, .scale = 0.088f};
    const size_t np = mz_attn_partial_floats(&a);
    a.partial = np ? malloc(np * sizeof(float)) : NULL;
    a.partial_floats = np;
    struct { const char *name; attn_fn fn; bool ok; } impls[] = {
        {"scalar", mz_attn_scalar, true},
#if MZ_KERNELS_X86
        {"avx2", mz_attn_avx2, mz_kernels_cpu_has(MZ_ISA_AVX2)},
        {"avx512", mz_attn_avx512, mz_kernels_cpu_has(MZ_ISA_AVX512)},
#endif
    };
    /* The SIMD kernels take turns rep by rep, so a change in the machine's
     * speed during the run (a shared VM) falls on both. */
    enum { N_IMPL = MZ_ARRAY_LEN(impls), REPS = 9 };
    double t[N_IMPL][REPS], med[N_IMPL];
    int bad = 0;
    for (size_t k = 0; k < N_IMPL; k++)
        if (impls[k].ok && k == 0) t[k][0] = time_attn_once(impls[k].fn, &a, nth);
    for (int rep = 0; rep < REPS; rep++)
        for (size_t k = 1; k < N_IMPL; k++) {
            if (!impls[k].ok) continue;
            t[k][rep] = time_attn_once(impls[k].fn, &a, nth);
            if (k == 1 && rep == 0) memcpy(first, out, n_out * sizeof *first);
            if (k > 1 && memcmp(first, out, n_out * sizeof *first)) bad = 1;
        }
    const double kv_bytes = 2.0 * (double)n_ctx * n_kv * hd * 2;
    for (size_t k = 0; k < N_IMPL; k++) {
        if (!impls[k].ok) continue;
        med[k] = k == 0 ? t[0][0] : median(t[k], REPS);
        printf("attn %-6s ctx %6zu  n_q %2zu  nth %d: %8.2f ms/layer  %6.2f GB/s of K/V  %6.2f GFLOP/s", impls[k].name,
               n_ctx, n_q, nth, med[k] * 1e3, kv_bytes / med[k] / 1e9, 4.0 * n_ctx * n_q * n_head * hd / med[k] / 1e9);
        if (k > 1) printf("  %.2fx avx2%s", med[1] / med[k], bad ? "  BITS DIFFER FROM AVX2" : "");
        printf("\n");
    }
    for (size_t c = 0; c < n_chunks; c++) free(chunks[c]);
    free(chunks);
    free(q);
    free(out);
    free(first);
    free(a.partial);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "attn")) {
        static const size_t ctxs[] = {1024, 8192, 32768};
        int bad = 0;
        for (size_t i = 0; i < 3; i++) {
            bad |= bench_attn(ctxs[i], 8, 1);
            bad |= bench_attn(ctxs[i], 1, 1);
        }
        return bad;
    }
    size_t rows = 1536, cols = 576, toks[2] = {1, 64};
    int n_toks = 2, reps = 5;
    const char *only_type = NULL;
    int a = 1;
    if (argc >= 4 && argv[1][0] != '-') {
        rows = (size_t)bench_arg_ll("bench_kernels", "rows", argv[1], 1, 1 << 20);
        cols = (size_t)bench_arg_ll("bench_kernels", "cols", argv[2], 1, 1 << 20);
        toks[0] = (size_t)bench_arg_ll("bench_kernels", "tokens", argv[3], 1, 4096);
        n_toks = 1;
        a = 4;
    }
    for (; a + 1 < argc; a += 2)
        if (!strcmp(argv[a], "-r")) reps = bench_arg_int("bench_kernels", "-r", argv[a + 1], 1, 100000);
        else if (!strcmp(argv[a], "-t")) only_type = argv[a + 1];
        else if (!strcmp(argv[a], "-c")) g_cpu_time = !strcmp(argv[a + 1], "1");
    static const int types[] = {MZ_DT_Q4_1, MZ_DT_Q4_0, MZ_DT_Q8_0, MZ_DT_F16, MZ_DT_Q4_K,
                                MZ_DT_Q6_K, MZ_DT_Q5_K, MZ_DT_Q3_K, MZ_DT_Q2_K,
                                /* q5_iq4_*.c (IQ4_XS needs cols % 256 == 0) */
                                MZ_DT_Q5_0, MZ_DT_Q5_1, MZ_DT_IQ4_NL, MZ_DT_IQ4_XS};
    const char *const *names = mz_isa_names;
    for (size_t ti = 0; ti < MZ_ARRAY_LEN(types); ti++) {
        if (only_type && strcmp(only_type, mz_dtype_name(types[ti]))) continue;
        if (cols % mz_dtype_block_len(types[ti])) continue; /* K-quants: cols % 256 */
        for (int i = 0; i < n_toks; i++)
            for (int isa = MZ_ISA_AVX2; isa < MZ_ISA_COUNT; isa++)
                for (int x8 = 0; x8 < 2; x8++)
                    bench((enum mz_isa)isa, names[isa], types[ti], rows, cols, toks[i], reps, x8);
    }
    return 0;
}
