/*
 * bench_compkv.c — moving the in-memory compressed stack to the swap file
 * (CompKV, the last tier an eviction has left once weights and KV are
 * compressed): one write submission per item, waited for (batch 1), against
 * batches of up to 32 items in flight through io_uring (the default).
 *
 * A context of N positions of the calibrated KV fill (src/harness/kv_fill.h: what
 * q8 makes of it is what it makes of real KV) is compressed whole into the
 * stack (untimed), then each repetition moves the whole stack to the swap
 * file with one mz_mem_evict_steps call (timed) and restores it (untimed).
 * The batch sizes alternate per repetition so that both see the same load.
 * Prints per batch size the median wall time, MB/s of encoded payload and the
 * ratio to batch 1 measured in the same run.
 *
 *   bench_compkv [-m MODEL] [-c TOKENS (8192)] [-r REPS (5)] [-b BATCH (32)] [--codec q8]
 *                [--swap DIR]
 */
#define _GNU_SOURCE
#include "harness/harness.h" /* not public: the KV fill and the CompKV step */
#include "mzcache.h"
#include "bench_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* Rss of this process in MiB, from /proc/self/smaps_rollup (0 if unreadable). */
static double rss_mib(void)
{
    long long kib = bench_smaps_kib("Rss");
    return kib < 0 ? 0 : kib / 1024.0;
}

int main(int argc, char **argv)
{
    const char *model = "models/SmolLM2-135M-Instruct.Q4_1.gguf", *codec = "q8";
    const char *swap = "/tmp/bench-compkv";
    int n_tok = 8192, reps = 5, batch = 32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "-c") && i + 1 < argc) {
            if (parse_int(argv[++i], 64, 1 << 20, &n_tok)) return fprintf(stderr, "bad -c\n"), 2;
        } else if (!strcmp(argv[i], "-r") && i + 1 < argc) {
            if (parse_int(argv[++i], 1, 1000, &reps)) return fprintf(stderr, "bad -r\n"), 2;
        } else if (!strcmp(argv[i], "-b") && i + 1 < argc) {
            if (parse_int(argv[++i], 2, 32, &batch)) return fprintf(stderr, "bad -b\n"), 2;
        } else if (!strcmp(argv[i], "--codec") && i + 1 < argc) codec = argv[++i];
        else if (!strcmp(argv[i], "--swap") && i + 1 < argc) swap = argv[++i];
        else return fprintf(stderr, "usage: %s [-m MODEL] [-c TOKENS] [-r REPS] [-b BATCH] [--codec C] [--swap DIR]\n", argv[0]), 2;
    }
    mz_model_params mp = mz_model_params_default();
    mp.n_threads = 2;
    mz_model_t *m = NULL;
    if (mz_model_load(model, &mp, &m)) return fprintf(stderr, "%s\n", mz_last_error()), 1;
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = n_tok;
    cp.n_threads = 2;
    cp.kv_codec = codec;
    cp.kv_placement = MZ_KV_PLACE_COMPRESSED;
    cp.swap_dir = swap;
    mz_ctx_t *c = NULL, *cal = NULL;
    mz_kvfill *f = NULL;
    mz_ctx_params cc = cp;
    cc.n_ctx = 512;
    if (mz_ctx_init(m, &cp, &c) || mz_ctx_init(m, &cc, &cal) ||
        mz_kvfill_calibrate_default(cal, 512, &f) || mz_kvfill_write(f, c, (size_t)n_tok, 0x9e3779b97f4a7c15ULL))
        return fprintf(stderr, "set-up: %s\n", mz_last_error()), 1;
    mz_kvfill_free(f);
    mz_ctx_free(cal);

    size_t n_units = 0;
    const size_t batches[] = {1, (size_t)batch};
    double *ms[2], payload = 0;
    ms[0] = calloc((size_t)reps, sizeof(double));
    ms[1] = calloc((size_t)reps, sizeof(double));
    bench_print_loadavg("at start");
    printf("%d tokens, %d layers of KV chunks of %zu bytes, codec %s, swap dir %s\n", n_tok,
           mz_harness_kv_n_layer(c), mz_harness_kv_chunk_bytes(c), codec, swap);
    for (int r = 0; r < reps; r++)
        for (int b = 0; b < 2; b++) {
            int bi = r % 2 ? 1 - b : b; /* ABBA: both orders equally often */
            if (mz_harness_compkv(c, batches[bi], &ms[bi][r], &payload, &n_units))
                return fprintf(stderr, "compkv: %s\n", mz_last_error()), 1;
            printf("rep %d batch %2zu: %8.1f ms  %7.1f MB/s\n", r, batches[bi], ms[bi][r],
                   payload / 1e3 / ms[bi][r]);
            if (mz_restore(c, NULL)) return fprintf(stderr, "restore: %s\n", mz_ctx_errmsg(c)), 1;
            /* what stays behind a cycle (swap-file buffers the allocator keeps) */
            printf("        RSS after the restore: %.1f MiB\n", rss_mib());
        }
    bench_print_loadavg("at end");
    double base = bench_median(ms[0], reps);
    printf("\nCompKV of %.1f MiB (%zu items), median of %d:\n", payload / 1048576.0, n_units, reps);
    for (int b = 0; b < 2; b++) {
        double med = b ? bench_median(ms[1], reps) : base;
        printf("  batch %2zu: %8.1f ms  %7.1f MB/s  %.2fx batch 1\n", batches[b], med,
               payload / 1e3 / med, base / med);
    }
    free(ms[0]);
    free(ms[1]);
    mz_ctx_free(c);
    mz_model_free(m);
    return 0;
}
