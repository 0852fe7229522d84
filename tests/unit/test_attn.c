/*
 * test_attn.c — chunked attention kernels against a naive full softmax.
 *
 * For every n_kv in {1, 255, 256, 257, 700} (positions in the cache, the last
 * n_q of them being the query tokens, so pos0 = n_kv - n_q > 0 whenever it
 * can be), n_q in {1, 3, 8}, GQA ratio in {1, 3, 4} (2 KV heads), head_dim in
 * {64, 128, 32}:
 *   - chunks are separate allocations (with a spacer between, so they are not
 *     contiguous), K/V random F16; rows past n_kv hold NaN, so reading past the
 *     causal limit poisons the output;
 *   - oracle: softmax over positions [0, pos0 + i] in double, from the same
 *     F16 values;
 *   - mz_attn_ref, mz_attn_scalar, mz_attn_avx2 (if the CPU has it and
 *     head_dim % 8 == 0), mz_attn_avx512 (AVX-512, head_dim % 16 == 0; must
 *     give mz_attn_avx2's bits) and the dispatching mz_attn; the last runs as nth =
 *     1, 2 and 3 slices in turn (ith = 0..nth-1 sequentially), each with and
 *     without the partial-state scratch (then mz_attn_merge), the other two
 *     with one nth per case, all within 5e-6 absolute of the oracle (outputs
 *     are convex combinations of V in [-1, 1]); every output written
 *     (prefilled with NaN);
 *   - the active path gives the same bits for every nth, with or without the
 *     scratch, and token by token (n_q = 1 calls) as for the whole batch;
 *   - long contexts: 1030..3000 positions (several 1024-position segments,
 *     split over threads and merged), a GQA group of 34 query heads;
 *   - sliding windows (test_window): the same checks with a window, the
 *     positions no query token sees holding NaN or in unmapped chunks;
 *   - chunks still encoded (check_encoded): with every other chunk and the
 *     last read through a->read_rows instead, every kernel gives the bits
 *     it gives over the chunks in place, and asks only for whole rows of
 *     one KV head inside a chunk.
 */
#include "kernels/kernels_impl.h"
#include "testutil.h"

#include <stdatomic.h>

static unsigned long long g_rng = 0x5eed0a77ULL;

typedef struct {
    int n_head, n_head_kv, head_dim;
    size_t n_kv, n_q, pos0;
    size_t n_chunks;
    uint8_t **chunks;
    void **spacers;
    float *q, *out, *want;
} fixture;

static void fixture_init(fixture *f, int n_head, int n_head_kv, int head_dim, size_t n_kv, size_t n_q)
{
    memset(f, 0, sizeof *f);
    f->n_head = n_head;
    f->n_head_kv = n_head_kv;
    f->head_dim = head_dim;
    f->n_kv = n_kv;
    f->n_q = n_q;
    f->pos0 = n_kv - n_q;
    f->n_chunks = (n_kv + MZ_KV_CHUNK_TOKENS - 1) / MZ_KV_CHUNK_TOKENS;
    f->chunks = calloc(f->n_chunks, sizeof *f->chunks);
    f->spacers = calloc(f->n_chunks, sizeof *f->spacers);
    const size_t cb = mz_kv_chunk_bytes(n_head_kv, head_dim);
    /* Chunks in reverse allocation order with spacers: never one array. */
    for (size_t c = f->n_chunks; c-- > 0;) {
        f->chunks[c] = malloc(cb);
        f->spacers[c] = malloc(4096 + 64 * c);
        for (int kvh = 0; kvh < n_head_kv; kvh++) {
            for (int r = 0; r < MZ_KV_CHUNK_TOKENS; r++) {
                const size_t p = c * MZ_KV_CHUNK_TOKENS + (size_t)r;
                mz_f16 *k = mz_kv_chunk_k(f->chunks[c], n_head_kv, head_dim, kvh, r);
                mz_f16 *v = mz_kv_chunk_v(f->chunks[c], n_head_kv, head_dim, kvh, r);
                for (int d = 0; d < head_dim; d++) {
                    k[d] = p < n_kv ? mz_f32_to_f16(t_rand_float(&g_rng)) : (mz_f16)0x7e00;
                    v[d] = p < n_kv ? mz_f32_to_f16(t_rand_float(&g_rng)) : (mz_f16)0x7e00;
                }
            }
        }
    }
    const size_t nq = n_q * (size_t)n_head * (size_t)head_dim;
    f->q = malloc(nq * sizeof(float));
    f->out = malloc(nq * sizeof(float));
    f->want = malloc(nq * sizeof(float));
    /* Queries scaled so the softmax is neither flat nor one-hot. */
    for (size_t i = 0; i < nq; i++) f->q[i] = 3.0f * t_rand_float(&g_rng);
}

static void fixture_free(fixture *f)
{
    for (size_t c = 0; c < f->n_chunks; c++) {
        free(f->chunks[c]);
        free(f->spacers[c]);
    }
    free(f->chunks);
    free(f->spacers);
    free(f->q);
    free(f->out);
    free(f->want);
}

static mz_attn_args fixture_args(const fixture *f)
{
    mz_attn_args a = {
        .q = f->q, .out = f->out, .chunks = (const uint8_t *const *)f->chunks,
        .n_head = f->n_head, .n_head_kv = f->n_head_kv, .head_dim = f->head_dim,
        .n_q = f->n_q, .pos0 = f->pos0, .scale = 1.0f / sqrtf((float)f->head_dim),
    };
    return a;
}

static void naive(const fixture *f, const mz_attn_args *a)
{
    const int hd = f->head_dim, group = f->n_head / f->n_head_kv;
    double *s = malloc(f->n_kv * sizeof *s);
    for (size_t i = 0; i < f->n_q; i++) {
        const size_t n_ctx = f->pos0 + i + 1;
        const size_t lo = a->window && n_ctx > a->window ? n_ctx - a->window : 0; /* sliding window */
        for (int h = 0; h < f->n_head; h++) {
            const int kvh = h / group;
            const float *q = f->q + (i * (size_t)f->n_head + (size_t)h) * (size_t)hd;
            double mx = -INFINITY, sum = 0;
            for (size_t p = lo; p < n_ctx; p++) {
                const mz_f16 *k = mz_kv_chunk_k(f->chunks[p / 256], f->n_head_kv, hd, kvh, (int)(p % 256));
                double dot = 0;
                for (int d = 0; d < hd; d++) dot += (double)q[d] * mz_f16_to_f32(k[d]);
                s[p] = dot * a->scale;
                mx = fmax(mx, s[p]);
            }
            for (size_t p = lo; p < n_ctx; p++) sum += (s[p] = exp(s[p] - mx));
            double acc[MZ_ATTN_MAX_HEAD_DIM] = {0};
            for (size_t p = lo; p < n_ctx; p++) {
                const mz_f16 *v = mz_kv_chunk_v(f->chunks[p / 256], f->n_head_kv, hd, kvh, (int)(p % 256));
                for (int d = 0; d < hd; d++) acc[d] += s[p] * mz_f16_to_f32(v[d]);
            }
            float *o = f->want + (i * (size_t)f->n_head + (size_t)h) * (size_t)hd;
            for (int d = 0; d < hd; d++) o[d] = (float)(acc[d] / sum);
        }
    }
    free(s);
}

static double g_worst; /* largest error seen, printed at the end */

static double max_err(const fixture *f)
{
    const size_t n = f->n_q * (size_t)f->n_head * (size_t)f->head_dim;
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(f->out[i])) return INFINITY;
        e = fmax(e, fabs((double)f->out[i] - f->want[i]));
    }
    g_worst = fmax(g_worst, e);
    return e;
}

typedef void (*attn_fn)(const mz_attn_args *a, int ith, int nth);

/* Runs fn as nth slices (ith = 0..nth-1 in turn), then merge the same way
 * when a scratch is given, as the forward pass does with its thread pool. */
static void run_sliced(attn_fn fn, attn_fn merge, mz_attn_args a, float *partial, size_t partial_floats, int nth)
{
    a.partial = partial;
    a.partial_floats = partial_floats;
    for (int ith = 0; ith < nth; ith++) fn(&a, ith, nth);
    if (merge)
        for (int ith = 0; ith < nth; ith++) merge(&a, ith, nth);
}

/* With a sliding window: what no query token can see is made unreadable.
 * Rows below the first token's window start hold NaN (counting one poisons
 * the output), and chunks wholly below it are freed and their pointers set
 * to NULL (reading one crashes), as the memory manager may leave them
 * evicted. */
static void hide_out_of_window(fixture *f, const mz_attn_args *a)
{
    const size_t lo = mz_attn_first_pos(a, 0);
    for (size_t c = 0; c * MZ_KV_CHUNK_TOKENS < lo; c++) {
        if ((c + 1) * MZ_KV_CHUNK_TOKENS <= lo) {
            free(f->chunks[c]);
            f->chunks[c] = NULL;
            continue;
        }
        for (int kvh = 0; kvh < f->n_head_kv; kvh++)
            for (size_t p = c * MZ_KV_CHUNK_TOKENS; p < lo; p++) {
                const int row = (int)(p % MZ_KV_CHUNK_TOKENS);
                mz_f16 *k = mz_kv_chunk_k(f->chunks[c], f->n_head_kv, f->head_dim, kvh, row);
                mz_f16 *v = mz_kv_chunk_v(f->chunks[c], f->n_head_kv, f->head_dim, kvh, row);
                for (int d = 0; d < f->head_dim; d++) k[d] = v[d] = (mz_f16)0x7e00;
            }
    }
}

/* Chunks still encoded (a->read_rows): the kernels read a chunk whose
 * pointer is NULL through the callback, which here copies from the chunk
 * kept aside and checks every request is whole rows of one KV head's K or
 * V inside the chunk. */
typedef struct {
    const fixture *f;
    const uint8_t *const *kept;
    _Atomic size_t reads;
    _Atomic int bad;
} encoded_store;

static void store_read_rows(void *ctx, size_t chunk, size_t v0, mz_f16 *dst, size_t k)
{
    encoded_store *es = ctx;
    const size_t hd = (size_t)es->f->head_dim, rows = MZ_KV_CHUNK_TOKENS;
    const size_t values = 2 * (size_t)es->f->n_head_kv * rows * hd;
    const bool ok = chunk < es->f->n_chunks && es->kept[chunk] && v0 % hd == 0 && k % hd == 0 && k > 0 &&
                    v0 + k <= values && (v0 / hd) % rows + k / hd <= rows && k / hd <= 32;
    if (!ok) {
        atomic_store(&es->bad, 1);
        return;
    }
    memcpy(dst, (const mz_f16 *)es->kept[chunk] + v0, k * sizeof *dst);
    atomic_fetch_add(&es->reads, 1);
}

/* fn over a with every other chunk (and the last) encoded gives the bits it
 * gives over the chunks in place. */
static void check_encoded(const fixture *f, const mz_attn_args *a, attn_fn fn, attn_fn merge, float *partial,
                          size_t np, const char *name)
{
    const size_t n_out = f->n_q * (size_t)f->n_head * (size_t)f->head_dim;
    float *plain = malloc(n_out * sizeof *plain);
    const uint8_t **table = malloc(f->n_chunks * sizeof *table);
    for (size_t i = 0; i < n_out; i++) f->out[i] = NAN;
    run_sliced(fn, merge, *a, partial, np, 2);
    memcpy(plain, f->out, n_out * sizeof *plain);
    size_t n_encoded = 0;
    for (size_t c = 0; c < f->n_chunks; c++) {
        const bool enc = c % 2 == 1 || c + 1 == f->n_chunks;
        table[c] = enc ? NULL : f->chunks[c];
        n_encoded += enc && f->chunks[c];
    }
    encoded_store es = {.f = f, .kept = (const uint8_t *const *)f->chunks};
    mz_attn_args b = *a;
    b.chunks = table;
    b.read_rows = store_read_rows;
    b.read_ctx = &es;
    for (size_t i = 0; i < n_out; i++) f->out[i] = NAN;
    run_sliced(fn, merge, b, partial, np, 2);
    CHECK_MSG(!atomic_load(&es.bad), "%s: a read of encoded rows outside one head's rows of a chunk", name);
    CHECK_MSG(n_encoded == 0 || atomic_load(&es.reads) > 0, "%s: no encoded chunk read", name);
    CHECK_MSG(!memcmp(plain, f->out, n_out * sizeof *plain),
              "%s: hd %d n_kv %zu n_q %zu window %zu: encoded chunks change the bits", name, f->head_dim, f->n_kv,
              f->n_q, a->window);
    free(table);
    free(plain);
}

/* One shape through every kernel; window 0: full causal attention. */
static void run_case_window(int ratio, int head_dim, size_t n_kv, size_t n_q, int case_no, size_t window)
{
    const double tol = 5e-6;
    fixture f;
    fixture_init(&f, 2 * ratio, 2, head_dim, n_kv, n_q);
    mz_attn_args a = fixture_args(&f);
    a.window = window;
    hide_out_of_window(&f, &a);
    naive(&f, &a);
    const size_t n_out = n_q * (size_t)f.n_head * (size_t)head_dim;
    float *first = malloc(n_out * sizeof *first), *avx2_out = malloc(n_out * sizeof *avx2_out);
    bool have_avx2 = false;

    for (size_t i = 0; i < n_out; i++) f.out[i] = NAN;
    mz_attn_ref(&a);
    double e = max_err(&f);
    CHECK_MSG(e <= tol, "ref: ratio %d hd %d n_kv %zu n_q %zu: err %g", ratio, head_dim, n_kv, n_q, e);

    const size_t np = mz_attn_partial_floats(&a);
    float *partial = np ? malloc(np * sizeof *partial) : NULL;
    struct { const char *name; attn_fn fn, merge; bool ok; } impls[] = {
        {"scalar", mz_attn_scalar, NULL, true},
#if MZ_KERNELS_X86
        {"avx2", mz_attn_avx2, mz_attn_merge_avx2, mz_kernels_cpu_has(MZ_ISA_AVX2) && head_dim % 8 == 0},
        {"avx512", mz_attn_avx512, mz_attn_merge_avx2, mz_kernels_cpu_has(MZ_ISA_AVX512) && head_dim % 16 == 0},
#endif
        {"active", mz_attn, mz_attn_merge, true},
    };
    for (size_t k = 0; k < MZ_ARRAY_LEN(impls); k++) {
        if (!impls[k].ok) continue;
        check_encoded(&f, &a, impls[k].fn, impls[k].merge, case_no % 2 ? partial : NULL, case_no % 2 ? np : 0,
                      impls[k].name);
        /* The active path runs every split, with and without the scratch that
         * spreads positions over threads, and must give the same bits each
         * time; the others one split per case, in turn (keeps the test short
         * under sanitizers). */
        const bool all = k == MZ_ARRAY_LEN(impls) - 1;
        int runs = 0;
        for (int nth = all ? 1 : 1 + case_no % 3; nth <= (all ? 3 : 1 + case_no % 3); nth++) {
            for (int with_partial = 0; with_partial <= (all ? 1 : 0); with_partial++) {
                const bool use_p = all ? with_partial : (case_no % 2 == 0);
                for (size_t i = 0; i < n_out; i++) f.out[i] = NAN;
                run_sliced(impls[k].fn, impls[k].merge, a, use_p ? partial : NULL, use_p ? np : 0, nth);
                e = max_err(&f);
                CHECK_MSG(e <= tol, "%s: ratio %d hd %d n_kv %zu n_q %zu nth %d partial %d: err %g", impls[k].name,
                          ratio, head_dim, n_kv, n_q, nth, use_p, e);
                /* AVX-512 is the AVX2 kernel with wider tile products: same bits. */
                if (!strcmp(impls[k].name, "avx2")) memcpy(avx2_out, f.out, n_out * sizeof *avx2_out), have_avx2 = true;
                if (!strcmp(impls[k].name, "avx512") && have_avx2)
                    CHECK_MSG(!memcmp(avx2_out, f.out, n_out * sizeof *avx2_out),
                              "avx512: ratio %d hd %d n_kv %zu n_q %zu: not bit-identical to avx2", ratio, head_dim,
                              n_kv, n_q);
                if (all && runs++ == 0) memcpy(first, f.out, n_out * sizeof *first);
                else if (all)
                    CHECK_MSG(!memcmp(first, f.out, n_out * sizeof *first),
                              "active: ratio %d hd %d n_kv %zu n_q %zu: nth %d partial %d not bit-identical to nth 1",
                              ratio, head_dim, n_kv, n_q, nth, use_p);
            }
        }
        if (all && n_q > 1) {
            /* Token by token (a decode loop, or a prefill split across calls)
             * gives the same bits as the whole batch. */
            for (size_t i = 0; i < n_out; i++) f.out[i] = NAN;
            for (size_t i = 0; i < n_q; i++) {
                mz_attn_args b = a;
                b.n_q = 1;
                b.pos0 = a.pos0 + i;
                b.q = a.q + i * (size_t)f.n_head * (size_t)head_dim;
                b.out = f.out + i * (size_t)f.n_head * (size_t)head_dim;
                const size_t nb = mz_attn_partial_floats(&b);
                float *pb = nb ? malloc(nb * sizeof *pb) : NULL;
                run_sliced(mz_attn, mz_attn_merge, b, pb, nb, 2);
                free(pb);
            }
            CHECK_MSG(!memcmp(first, f.out, n_out * sizeof *first),
                      "active: ratio %d hd %d n_kv %zu n_q %zu: token-by-token differs from the batch", ratio,
                      head_dim, n_kv, n_q);
        }
    }
    /* Claimed from a shared counter, heaviest group first or in index order
     * (the forward pass's way; every output written once, same bits). */
    for (int order = 0; order <= 1; order++)
        for (int with_partial = 0; with_partial <= 1; with_partial++) {
            _Atomic size_t work;
            mz_attn_args b = a;
            b.work = &work;
            b.work_in_index_order = order;
            b.partial = with_partial ? partial : NULL;
            b.partial_floats = with_partial ? np : 0;
            for (size_t i = 0; i < n_out; i++) f.out[i] = NAN;
            atomic_store(&work, 0);
            for (int ith = 0; ith < 3; ith++) mz_attn(&b, ith, 3);
            atomic_store(&work, 0);
            for (int ith = 0; ith < 3; ith++) mz_attn_merge(&b, ith, 3);
            CHECK_MSG(!memcmp(first, f.out, n_out * sizeof *first),
                      "active, claimed (index order %d, partial %d): ratio %d hd %d n_kv %zu n_q %zu differs", order,
                      with_partial, ratio, head_dim, n_kv, n_q);
            /* mz_threadpool_run_claimed's contract: thread 0's call alone
             * claims everything when no other thread arrives (active and
             * scalar kernels; the scalar one writes out directly). */
            for (int scalar = 0; scalar <= 1; scalar++) {
                for (size_t i = 0; i < n_out; i++) f.out[i] = NAN;
                atomic_store(&work, 0);
                if (scalar) {
                    mz_attn_scalar(&b, 0, 3);
                } else {
                    mz_attn(&b, 0, 3);
                    atomic_store(&work, 0);
                    mz_attn_merge(&b, 0, 3);
                }
                e = max_err(&f);
                CHECK_MSG(e <= tol && (scalar || !memcmp(first, f.out, n_out * sizeof *first)),
                          "%s, claimed by thread 0 of 3 alone (partial %d): ratio %d hd %d n_kv %zu n_q %zu: err %g",
                          scalar ? "scalar" : "active", with_partial, ratio, head_dim, n_kv, n_q, e);
            }
        }
    free(partial);
    free(first);
    free(avx2_out);
    fixture_free(&f);
}

static void run_case(int ratio, int head_dim, size_t n_kv, size_t n_q, int case_no)
{
    run_case_window(ratio, head_dim, n_kv, n_q, case_no, 0);
}

/* Sliding windows (gemma3's local layers): query p sees (p - window, p].
 * Windows of one position, that start inside a chunk or a tile, at a chunk
 * boundary, hide whole chunks or whole 1024-position segments, or hide
 * nothing; a batch whose tokens' windows start in different tiles; every
 * kernel (the SIMD ones included) with every split, against the double
 * oracle, with the positions no token sees poisoned or unmapped
 * (hide_out_of_window). Last: gemma-3-270m's local layer (4 query heads
 * of 256 dims per KV head, window 512) decoding at 3000 positions. */
static void test_window(void)
{
    static const size_t windows[] = {1, 100, 256, 300, 600, 5000};
    int case_no = 0;
    for (size_t w = 0; w < MZ_ARRAY_LEN(windows); w++) {
        run_case_window(2, 64, 700, 8, case_no++, windows[w]);
        run_case_window(4, 64, 700, 1, case_no++, windows[w]);
        run_case_window(1, 128, 3000, 8, case_no++, windows[w]);
        run_case_window(3, 32, 2100, 3, case_no++, windows[w]);
    }
    run_case_window(17, 64, 1500, 3, case_no++, 40); /* a GQA group in parts, rows in several tiles */
    run_case_window(4, 256, 3000, 1, case_no++, 512);
}

int main(void)
{
    mz_kernels_init();
    printf("test_attn: active isa %s\n", mz_kernels_isa());
    static const size_t n_kvs[] = {1, 255, 256, 257, 700};
    static const size_t n_qs[] = {1, 3, 8};
    static const int ratios[] = {1, 3, 4};
    static const int hds[] = {64, 128, 32};
    int case_no = 0;
    for (size_t a = 0; a < MZ_ARRAY_LEN(n_kvs); a++)
        for (size_t b = 0; b < MZ_ARRAY_LEN(n_qs); b++) {
            if (n_qs[b] > n_kvs[a]) continue;
            for (size_t c = 0; c < MZ_ARRAY_LEN(ratios); c++)
                for (size_t d = 0; d < MZ_ARRAY_LEN(hds); d++) run_case(ratios[c], hds[d], n_kvs[a], n_qs[b], case_no++);
        }
    /* A GQA group larger than MZ_ATTN_MAX_GROUP (processed in parts) and an
     * odd head_dim (SIMD tails). */
    run_case(MZ_ATTN_MAX_GROUP + 3, 64, 300, 2, 0);
    run_case(2, 40, 257, 3, 1);
    run_case(1, 36, 20, 4, 2);
    /* Long contexts (several 1024-position segments, split over threads and
     * merged), a group of more than 32 query heads (rows split in parts) and
     * a short query whose tokens straddle a segment boundary. */
    run_case(2, 128, 2100, 8, 3);
    run_case(4, 64, 3000, 1, 4);
    run_case(3, 64, 1030, 8, 5);
    run_case(17, 64, 1500, 3, 6);
    test_window();
    CHECK_EQ_INT(mz_kv_chunk_bytes(3, 64), 2 * 3 * 256 * 64 * 2);
    printf("test_attn: largest error vs double oracle %.3g (bound 5e-6)\n", g_worst);
    return t_done("test_attn");
}
