/*
 * bench_codec — single-thread encode / decode throughput of the KV codecs on
 * real KV chunks (a dump written by `eval_codec --dump-kv FILE`: the chunks
 * of every layer, layer-major, each chunk_bytes long) or, without one, on
 * synthetic chunks.
 *
 * usage: bench_codec [-k KVDUMP] [-l N_LAYER] [--chunk-bytes B] [--head-dim D]
 *                    [--use N] [--reps 5] [--codecs raw,q8,cachegen,cachegen-layer,...]
 *                    [--dram MIB]
 *
 * --use N: only the first N chunks of every layer (eval_codec's size table
 * uses the full chunks of its first cut: 15 of the 16 it dumps).
 *
 * Times are thread CPU time (so other load on the machine changes them less
 * than wall time would, though not to zero: caches and memory bandwidth are
 * shared); the median of --reps passes over all chunks. GB/s are of F16
 * (the raw chunk's bytes), 1e9 B/s. "cachegen-layer" builds one instance per
 * layer with the CacheGen layer schedule (mz_codec_for_layer). The load
 * average is printed: figures taken while it is high say so.
 *
 * --dram MIB (e.g. 1024; more than the last-level cache): also decode, as a
 * restore does, into freshly mapped memory: each pass mmaps MIB MiB,
 * populates it (MADV_POPULATE_WRITE), then decodes 1 MiB chunks (16
 * synthetic chunks of 8 KV heads x 128 x 256 tokens x K+V, in turn) into it
 * end to end. Printed per codec, and for q8 and q4 per kernel set it can force
 * (mz_q8_force_isa: avx512 streams its stores, avx2 does not); GB/s of F16
 * written per wall second and per thread CPU second, median of --reps.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise */
#include "core/core.h"
#include "codec/codec.h"
#include "codec/codec_cachegen.h"
#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double wall_s(void) { return mz_time_ms() / 1e3; }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "bench_codec: %s: %s\n", what, msg ? msg : "");
    exit(1);
}


/* --dram: decode 1 MiB chunks into dram_mib MiB of fresh, populated pages;
 * one table row per codec (and per forced q8 kernel set). */
static void bench_dram(const char *list, size_t dram_mib, int reps)
{
    enum { N_SRC = 16 };
    const size_t chunk = 1u << 20, n = chunk / 2;
    size_t n_chunks = dram_mib;
    mz_f16 *raw = malloc(N_SRC * chunk);
    if (!raw) die("malloc", "");
    for (size_t i = 0; i < N_SRC; i++) mz_codec_synth_kv(raw + i * n, n, 128, 0x9e3779b9u + i);
    printf("\ndecode into fresh memory: %zu MiB mmap'd + MADV_POPULATE_WRITE per pass, "
           "1 MiB chunks (%d distinct), median of %d passes\n\n", dram_mib, N_SRC, reps);
    printf("| codec | kernels | decode GB/s (wall) | decode GB/s (thread CPU) |\n");
    printf("|---|---|---:|---:|\n");
    char names[512];
    snprintf(names, sizeof names, "%s", list);
    for (char *save = NULL, *nm = strtok_r(names, ",", &save); nm; nm = strtok_r(NULL, ",", &save)) {
        const mz_codec *c = mz_codec_find(nm);
        if (!c) die(nm, mz_last_error());
        size_t cap = mz_codec_bound(c, n), len[N_SRC];
        uint8_t *blob = malloc(N_SRC * cap);
        if (!blob) die("malloc", "");
        for (size_t i = 0; i < N_SRC; i++)
            if (mz_codec_encode(c, raw + i * n, n, blob + i * cap, cap, &len[i]) != MZ_OK)
                die("encode", mz_last_error());
        /* q8, q4: the best kernels, then AVX2 forced if it is not that (scalar is
         * too slow for a GiB pass) */
        /* q8 and q4: kernels chosen by mz_q8_force_isa */
        bool is_quant = !strncmp(nm, "q8", 2) || !strncmp(nm, "q4", 2);
        const char *sets[2] = {"best", "avx2"};
        for (int si = 0; si < (is_quant ? 2 : 1); si++) {
            char isa[16] = "-";
            if (is_quant) {
                mz_q8_force_isa(NULL);
                bool same = si && !strcmp(mz_q8_isa(), sets[si]);
                if (same || !mz_q8_force_isa(sets[si])) continue;
                snprintf(isa, sizeof isa, "%s", mz_q8_isa());
            }
            double *tw = malloc((size_t)reps * sizeof *tw), *tc = malloc((size_t)reps * sizeof *tc);
            if (!tw || !tc) die("malloc", "");
            for (int r = 0; r < reps; r++) {
                uint8_t *dst = mmap(NULL, n_chunks * chunk, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (dst == MAP_FAILED) die("mmap", "");
                if (madvise(dst, n_chunks * chunk, MADV_POPULATE_WRITE) != 0)
                    memset(dst, 0, n_chunks * chunk); /* older kernel: fault the pages in */
                double w0 = wall_s(), c0 = cpu_s();
                for (size_t i = 0; i < n_chunks; i++)
                    if (mz_codec_decode(c, blob + (i % N_SRC) * cap, len[i % N_SRC],
                                        (mz_f16 *)(void *)(dst + i * chunk), n) != MZ_OK)
                        die("decode", mz_last_error());
                tw[r] = wall_s() - w0;
                tc[r] = cpu_s() - c0;
                munmap(dst, n_chunks * chunk);
            }
            qsort(tw, (size_t)reps, sizeof *tw, cmp_double);
            qsort(tc, (size_t)reps, sizeof *tc, cmp_double);
            double bytes = (double)n_chunks * (double)chunk;
            printf("| %s | %s | %.3f | %.3f |\n", nm, isa, bytes / tw[reps / 2] / 1e9,
                   bytes / tc[reps / 2] / 1e9);
            free(tw);
            free(tc);
        }
        if (is_quant) mz_q8_force_isa(NULL);
        free(blob);
    }
    free(raw);
}

int main(int argc, char **argv)
{
    const char *kv_path = NULL;
    const char *list = "raw,q8,cachegen,cachegen-layer,cachegen-q7";
    unsigned n_layer = 30, head_dim = 64;
    size_t chunk_bytes = 256 * 2 * 3 * 64 * 2; /* SmolLM2-135M: 3 KV heads x 64 */
    int reps = 5;
    size_t use = 0, dram_mib = 0;
    /* every option takes a value: step over both */
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) die("usage", "bench_codec [-k KVDUMP] [-l N_LAYER] [--chunk-bytes B] "
                             "[--head-dim D] [--reps N] [--codecs a,b,..]");
        if (!strcmp(a, "-k")) kv_path = v;
        else if (!strcmp(a, "-l")) n_layer = (unsigned)bench_arg_int("bench_codec", a, v, 1, 4096);
        else if (!strcmp(a, "--chunk-bytes")) chunk_bytes = (size_t)bench_arg_ll("bench_codec", a, v, 2, 1LL << 30);
        else if (!strcmp(a, "--head-dim")) head_dim = (unsigned)bench_arg_int("bench_codec", a, v, 1, MZ_CG_ROW_MAX);
        else if (!strcmp(a, "--reps")) reps = bench_arg_int("bench_codec", a, v, 1, 99);
        else if (!strcmp(a, "--use")) use = (size_t)bench_arg_ll("bench_codec", a, v, 0, 1LL << 40);
        else if (!strcmp(a, "--codecs")) list = v;
        else if (!strcmp(a, "--dram")) dram_mib = (size_t)bench_arg_ll("bench_codec", a, v, 0, 1LL << 24);
        else die("unknown option", a);
    }
    if (n_layer < 1 || chunk_bytes < 2 || chunk_bytes % 2 || reps < 1 || reps > 99 ||
        head_dim < 1 || head_dim > MZ_CG_ROW_MAX)
        die("usage", "bad numbers");

    size_t n_ch, per_layer;
    uint8_t *kv;
    if (kv_path) {
        FILE *f = fopen(kv_path, "rb");
        if (!f) die(kv_path, "cannot open");
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        if (len <= 0 || (size_t)len % (chunk_bytes * n_layer)) die(kv_path, "size is not n_layer x k chunks");
        n_ch = (size_t)len / chunk_bytes;
        kv = malloc((size_t)len);
        if (!kv || fread(kv, 1, (size_t)len, f) != (size_t)len) die(kv_path, "cannot read");
        fclose(f);
    } else {
        n_ch = (size_t)n_layer * 4;
        kv = malloc(n_ch * chunk_bytes);
        if (!kv) die("malloc", "");
        for (size_t i = 0; i < n_ch; i++)
            mz_codec_synth_kv((mz_f16 *)(void *)(kv + i * chunk_bytes), chunk_bytes / 2, head_dim,
                              0x243f6a88u + i);
    }
    per_layer = n_ch / n_layer;
    if (use && use < per_layer) {
        /* keep the first `use` chunks of every layer, layer-major */
        for (size_t l = 0; l < n_layer; l++)
            memmove(kv + l * use * chunk_bytes, kv + l * per_layer * chunk_bytes, use * chunk_bytes);
        per_layer = use;
        n_ch = per_layer * n_layer;
    }
    size_t n = chunk_bytes / 2;
    double raw = (double)chunk_bytes * (double)n_ch;
    double la[3] = {0};
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (fscanf(lf, "%lf %lf %lf", &la[0], &la[1], &la[2]) != 3) la[0] = la[1] = la[2] = -1;
        fclose(lf);
    }
    printf("input %s: %zu chunks (%u layers x %zu) of %zu bytes, %.1f MiB; head_dim %u\n",
           kv_path ? kv_path : "synthetic", n_ch, n_layer, per_layer, chunk_bytes,
           raw / 1048576.0, head_dim);
    printf("load average %.2f %.2f %.2f; cachegen dequant %s; median of %d passes, thread CPU time\n\n",
           la[0], la[1], la[2], mz_cachegen_isa(), reps);
    printf("| codec | ratio | bytes/raw | encode GB/s | decode GB/s | decode ms/chunk |\n");
    printf("|---|---:|---:|---:|---:|---:|\n");

    mz_f16 *out = malloc(chunk_bytes);
    char names[512];
    snprintf(names, sizeof names, "%s", list);
    for (char *save = NULL, *nm = strtok_r(names, ",", &save); nm; nm = strtok_r(NULL, ",", &save)) {
        const mz_codec *base = mz_codec_find(nm);
        if (!base) die(nm, mz_last_error());
        mz_codec *lc = malloc(n_layer * sizeof *lc);
        size_t cap = 0;
        for (unsigned l = 0; l < n_layer; l++) {
            lc[l] = mz_codec_for_layer(base, head_dim, l, n_layer);
            cap = MZ_MAX(cap, mz_codec_bound(&lc[l], n));
        }
        uint8_t *blob = malloc(cap * n_ch);
        size_t *len = malloc(n_ch * sizeof *len);
        double *te = malloc((size_t)reps * sizeof *te), *td = malloc((size_t)reps * sizeof *td);
        double total = 0;
        if (!blob || !len || !te || !td) die("malloc", "");
        for (int r = 0; r < reps; r++) {
            double t0 = cpu_s();
            for (size_t i = 0; i < n_ch; i++)
                if (mz_codec_encode(&lc[i / per_layer], (const mz_f16 *)(void *)(kv + i * chunk_bytes),
                                    n, blob + i * cap, cap, &len[i]) != MZ_OK)
                    die("encode", mz_last_error());
            double t1 = cpu_s();
            for (size_t i = 0; i < n_ch; i++)
                if (mz_codec_decode(&lc[i / per_layer], blob + i * cap, len[i], out, n) != MZ_OK)
                    die("decode", mz_last_error());
            double t2 = cpu_s();
            te[r] = t1 - t0;
            td[r] = t2 - t1;
        }
        for (size_t i = 0; i < n_ch; i++) total += (double)len[i];
        qsort(te, (size_t)reps, sizeof *te, cmp_double);
        qsort(td, (size_t)reps, sizeof *td, cmp_double);
        double tem = te[reps / 2], tdm = td[reps / 2];
        printf("| %s | %.3f | %.4f | %.3f | %.3f | %.3f |\n", nm, raw / total, total / raw,
               raw / tem / 1e9, raw / tdm / 1e9, tdm * 1e3 / (double)n_ch);
        printf("bytes codec=%s total=%.0f\n", nm, total);
        free(lc);
        free(blob);
        free(len);
        free(te);
        free(td);
    }
    free(out);
    free(kv);
    if (dram_mib) bench_dram(list, dram_mib, reps);
    return 0;
}
