/*
 * eval_codec — what each KV codec does to a real model's answers, and how far
 * each one (and lz4 / zstd, as zRAM would use them) shrinks a real KV cache.
 *
 * usage: eval_codec -m MODEL -f TEXT [-f TEXT ...] [-t 2] [--first-cut 4096]
 *                   [--stride 512] [--max-cuts 4] [--score 256] [--gen 64]
 *                   [--codecs raw,q8,cachegen,cachegen-layer,cachegen-q7]
 *                   [--dump-kv FILE] [--method cut|full|both] [--ctx 512,2048]
 *                   [--max-windows N] [--raw-first N] [--raw-layers L,..]
 *                   [--k-mean oracle|none] [--k-exact LO-HI]
 *
 * For every text: tokenize it; for cut points c = first-cut, +stride, ...
 * (while c + score fits in the text, at most max-cuts of them), prefill the
 * first c - 1 tokens (incrementally, from the previous cut's pristine KV), keep
 * a pristine copy of the KV chunks,
 * then for the uncompressed baseline and for every codec:
 *   1. put the pristine KV back and replace every chunk of the prefix in
 *      place by decode(encode(chunk)) (in the context's KV chunks, through
 *      mz_harness_kv_chunk of src/harness/harness.h);
 *   2. teacher-force tokens c-1 .. c+score-2 one at a time and score the
 *      model's prediction of tokens c .. c+score-1: negative log-likelihood
 *      (perplexity), top-1 agreement with the baseline's argmax, and the
 *      KL divergence from the baseline's distribution;
 *   3. truncate back, feed token c-1 and generate gen tokens greedily:
 *      exact match with the baseline's continuation, and the length of the
 *      common prefix.
 * Then, on the KV of the first cut (full chunks only), space savings of every
 * codec and of lz4 / zstd (per whole 192 KiB chunk and per 4 KiB page, the
 * zRAM granularity), and single-thread encode/decode throughput (thread CPU
 * time, MB of F16 per second; median of 3 passes).
 *
 * --method full (or both): llama.cpp's method (llama-perplexity
 * --kl-divergence with a quantized KV cache), which keeps every KV entry
 * encoded from the start. For each window size W of --ctx: the text's
 * tokens in consecutive windows of W (window i = tokens iW .. iW + W - 1,
 * its first token replaced by BOS, as llama-perplexity does; at most
 * --max-windows of them, 0 = all), each from an empty context, one token at
 * a time; after each token its K and V rows in every layer (one row per KV
 * head) go through decode(encode(.)) in place, so every later token attends
 * over decoded values at every earlier position. Scored, as llama-perplexity
 * does: the predictions of tokens W/2 + 1 .. W - 1 of each window (the
 * second half), against the same steps with no codec: mean KL(base ||
 * codec), top-1 agreement, perplexity ratio. One difference remains:
 * llama.cpp writes a token's entry to the quantized cache before the
 * token's own attention reads it, so a token also sees its own entry
 * decoded; here a token's own entry is still F16 when it attends to itself
 * (1 of p + 1 entries), and is encoded right after.
 * Ablations of --method full, to find where a codec's damage comes from:
 * --raw-first N: positions 0 .. N-1 skip the codec (the attention sink);
 * --raw-layers L,L..: those layers (0-63) skip it; --k-mean oracle: each K
 * row minus its (layer, KV head) channel means over the window (taken from
 * the window's F16 pass, so an upper bound: a codec would have to store
 * or predict them) goes through the codec, the means added back after;
 * --k-exact LO-HI: K channels LO .. HI-1 of every head keep their F16 values.
 *
 * Codec names: any of mz_codec_find's (each built per layer with
 * mz_codec_for_layer, as the memory manager does: "cachegen-layer" is the
 * CacheGen layer schedule, Q = 15 in the first third of the layers, 7 after),
 * plus "cg-kA-vB" (cachegen with Q = A for K and B for V in every layer) and
 * "K/V" (e.g. "q8/q4r": the K values through codec K, the V values through
 * codec V; no size row), where K may be "kivi" (kivi_k_roundtrip: K per
 * channel across a chunk's tokens, a prototype for the cut-point method).
 * Output: "key=value" lines (grep-able) and a Markdown table.
 */
#define _POSIX_C_SOURCE 200809L
#include "mzcache.h"

#include "codec/codec.h"
#include "codec/codec_cachegen.h"
#include "codec/codec_f16.h"
#include "harness/harness.h" /* not public: the KV chunks of a context */
#include "bench_util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(MZ_HAVE_LZ4)
#include <lz4.h>
#endif
#if defined(MZ_HAVE_ZSTD)
#include <zstd.h>
#endif

#define MAX_FILES 8
#define MAX_CODECS 12
#define TOK 256 /* positions per KV chunk */
#define MAX_WINDOW_SIZES 4

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double wall_s(void) { return mz_harness_time_ms() / 1e3; }

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "eval_codec: %s: %s\n", what, msg ? msg : "");
    exit(1);
}

/* ---- codecs under test ------------------------------------------------------------ */

typedef struct codec_eval {
    char name[32];
    bool per_layer;        /* cachegen-layer: one codec per layer */
    mz_codec one;          /* otherwise */
    mz_codec *layer;       /* [n_layer] when per_layer (with layer_v: the K codec) */
    mz_codec *layer_v;     /* "K/V" specs: [n_layer] V codec, K codec in layer; else NULL */
    bool k_per_channel;    /* "kivi/V": K through kivi_k_roundtrip instead of layer's codec */
    /* quality, summed over cut points */
    double nll;            /* sum of -log p(true token) */
    double kl;             /* sum of KL(base || codec) */
    long n_scored, n_agree, n_correct;
    int n_gen_exact, n_cuts;
    long gen_prefix;       /* sum of common-prefix lengths */
} codec_eval;

static const mz_codec *codec_for(const codec_eval *e, int layer)
{
    return e->per_layer ? &e->layer[layer] : &e->one;
}

/* A scratch size that holds the blob of n values (K half, V half) of layer l. */
static size_t blob_cap_for(const codec_eval *e, int l, size_t n)
{
    size_t cap = mz_codec_bound(codec_for(e, l), n);
    return e->layer_v ? MZ_MAX(cap, mz_codec_bound(&e->layer_v[l], n)) : cap;
}

static void roundtrip_one(const mz_codec *cd, mz_f16 *buf, size_t n, uint8_t *blob, size_t cap)
{
    size_t len;
    if (mz_codec_encode(cd, buf, n, blob, cap, &len) != MZ_OK) die("encode", mz_last_error());
    if (mz_codec_decode(cd, blob, len, buf, n) != MZ_OK) die("decode", mz_last_error());
}

/* A prototype, not a codec (cut-point method only): KIVI's key quantization
 * (Liu et al., 2024) in a chunk: every K channel of every head quantized
 * across the chunk's tokens, groups of KIVI_GROUP tokens, an f16 min and max
 * per group and 15 uniform steps between them (4.5 bits a value, as q4).
 * k: n_kv_heads x TOK x head_dim, the K half of a chunk. */
#define KIVI_GROUP 64
static size_t g_n_head_kv, g_head_dim; /* the model's, for kivi_k_roundtrip */

static void kivi_k_roundtrip(mz_f16 *k, size_t n)
{
    const size_t hd = g_head_dim;
    if (n != g_n_head_kv * TOK * hd) die("kivi", "needs whole chunks (the cut-point method)");
    for (size_t h = 0; h < g_n_head_kv; h++)
        for (size_t j = 0; j < hd; j++)
            for (size_t t0 = 0; t0 < TOK; t0 += KIVI_GROUP) {
                mz_f16 *x = k + (h * TOK + t0) * hd + j;
                float lo = INFINITY, hi = -INFINITY;
                for (size_t t = 0; t < KIVI_GROUP; t++) {
                    const float v = mz_half_to_float(x[t * hd]);
                    lo = v < lo ? v : lo;
                    hi = v > hi ? v : hi;
                }
                lo = mz_half_to_float(mz_float_to_half(lo));
                hi = mz_half_to_float(mz_float_to_half(hi));
                const float step = (hi - lo) / 15.0f;
                for (size_t t = 0; t < KIVI_GROUP; t++) {
                    const float v = mz_half_to_float(x[t * hd]);
                    float q = step > 0 ? roundf((v - lo) / step) : 0;
                    q = q < 0 ? 0 : q > 15 ? 15 : q;
                    x[t * hd] = mz_float_to_half(q == 15 ? hi : fminf(lo + q * step, hi));
                }
            }
}

/* buf[0..n) (K values, then as many V values) replaced by decode(encode(.))
 * with layer l's codec, or its K and V codecs. */
static void roundtrip_values(const codec_eval *e, int l, mz_f16 *buf, size_t n, uint8_t *blob,
                             size_t cap)
{
    if (!e->layer_v) {
        roundtrip_one(codec_for(e, l), buf, n, blob, cap);
        return;
    }
    if (e->k_per_channel) kivi_k_roundtrip(buf, n / 2);
    else roundtrip_one(&e->layer[l], buf, n / 2, blob, cap);
    roundtrip_one(&e->layer_v[l], buf + n / 2, n - n / 2, blob, cap);
}

/* Replaces the first n_chunks chunks of every layer by decode(encode(.)). */
static void roundtrip_kv(mz_ctx_t *c, const codec_eval *e, size_t n_chunks, uint8_t *scratch,
                         size_t scratch_cap)
{
    size_t n = mz_harness_kv_chunk_bytes(c) / 2;
    for (int l = 0; l < mz_harness_kv_n_layer(c); l++)
        for (size_t ci = 0; ci < n_chunks; ci++)
            roundtrip_values(e, l, (mz_f16 *)(void *)mz_harness_kv_chunk(c, l, ci), n, scratch,
                             scratch_cap);
}

static void save_kv(mz_ctx_t *c, size_t n_chunks, uint8_t *copy)
{
    for (int l = 0; l < mz_harness_kv_n_layer(c); l++)
        for (size_t ci = 0; ci < n_chunks; ci++)
            memcpy(copy + ((size_t)l * n_chunks + ci) * mz_harness_kv_chunk_bytes(c), mz_harness_kv_chunk(c, l, ci),
                   mz_harness_kv_chunk_bytes(c));
}

static void load_kv(mz_ctx_t *c, size_t n_chunks, const uint8_t *copy)
{
    for (int l = 0; l < mz_harness_kv_n_layer(c); l++)
        for (size_t ci = 0; ci < n_chunks; ci++)
            memcpy(mz_harness_kv_chunk(c, l, ci), copy + ((size_t)l * n_chunks + ci) * mz_harness_kv_chunk_bytes(c),
                   mz_harness_kv_chunk_bytes(c));
}

/* log-softmax of logits into lp (n floats); returns argmax. */
static int log_softmax(const float *logits, int n, float *lp)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    double mx = logits[best], sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    for (int i = 0; i < n; i++) lp[i] = (float)((double)logits[i] - lse);
    return best;
}

/* KL(base || q) in nats, of two log-softmax outputs over n tokens. */
static double kl_nats(const float *base, const float *q, int n)
{
    double d = 0;
    for (int v = 0; v < n; v++) d += exp((double)base[v]) * ((double)base[v] - (double)q[v]);
    return d;
}

static void step(mz_ctx_t *c, mz_token t)
{
    if (mz_prefill(c, &t, 1) != MZ_OK) die("prefill", mz_ctx_errmsg(c));
}

/* ---- llama.cpp's method: every KV entry through the codec from the start ------------- */

/* Position p's K and V rows of every layer through decode(encode(.)) in
 * place: the 2 · n_head_kv rows of head_dim values (K rows, then V rows)
 * gathered into one buffer and coded as one blob. For the group-wise codecs
 * a group of 64 values is one row when head_dim is a multiple of 64, as
 * in a chunk; with narrower heads a group spans the heads of one token
 * here, the tokens of one head in a chunk. */
/* Ablations of --method full (header of this file): what part of the KV
 * carries a codec's damage. */
typedef struct full_ablation {
    int raw_first;       /* positions below it skip the codec (attention sink) */
    uint64_t raw_layers; /* bit l: layer l skips the codec */
    bool k_mean_oracle;  /* K minus the window's own per-channel mean through the codec */
    int k_exact_lo, k_exact_hi; /* K channels [lo, hi) of every head keep their F16 values */
    float *k_mean;       /* [layer][kv head][channel] of the window, from its F16 pass */
} full_ablation;

static void roundtrip_position(mz_ctx_t *c, const mz_model_info *mi, const codec_eval *e,
                               const full_ablation *ab, size_t p, mz_f16 *rows, uint8_t *blob,
                               size_t blob_cap)
{
    const size_t hd = (size_t)mi->head_dim, nkv = (size_t)mi->n_head_kv, n = 2 * nkv * hd;
    if ((int)p < ab->raw_first) return;
    for (int l = 0; l < mz_harness_kv_n_layer(c); l++) {
        if (l < 64 && (ab->raw_layers >> l & 1)) continue;
        const float *mu = ab->k_mean_oracle ? ab->k_mean + (size_t)l * nkv * hd : NULL;
        mz_f16 *ch = (mz_f16 *)(void *)mz_harness_kv_chunk(c, l, p / TOK);
        if (!ch) die("roundtrip", "KV chunk not resident");
        for (size_t r = 0; r < 2 * nkv; r++) /* r < nkv: K of head r; else V of head r - nkv */
            memcpy(rows + r * hd, ch + (r * TOK + p % TOK) * hd, hd * sizeof *rows);
        for (size_t i = 0; mu && i < nkv * hd; i++) /* the K rows come first */
            rows[i] = mz_float_to_half(mz_half_to_float(rows[i]) - mu[i]);
        mz_f16 keep[1024];
        const size_t kl = (size_t)ab->k_exact_lo, kh = MZ_MIN((size_t)ab->k_exact_hi, hd);
        if (kh > kl && nkv * (kh - kl) > sizeof keep / sizeof *keep) die("--k-exact", "too many channels");
        for (size_t h = 0; h < nkv && kh > kl; h++)
            memcpy(keep + h * (kh - kl), ch + (h * TOK + p % TOK) * hd + kl, (kh - kl) * sizeof *keep);
        roundtrip_values(e, l, rows, n, blob, blob_cap);
        for (size_t h = 0; h < nkv && kh > kl; h++)
            memcpy(rows + h * hd + kl, keep + h * (kh - kl), (kh - kl) * sizeof *keep);
        for (size_t i = 0; mu && i < nkv * hd; i++)
            rows[i] = mz_float_to_half(mz_half_to_float(rows[i]) + mu[i]);
        for (size_t r = 0; r < 2 * nkv; r++)
            memcpy(ch + (r * TOK + p % TOK) * hd, rows + r * hd, hd * sizeof *rows);
    }
}

/* The mean of every K channel over the positions 0 .. W - 2 now in c's KV. */
static void window_k_mean(mz_ctx_t *c, const mz_model_info *mi, int W, float *mu)
{
    const size_t hd = (size_t)mi->head_dim, nkv = (size_t)mi->n_head_kv;
    for (int l = 0; l < mi->n_layer; l++)
        for (size_t h = 0; h < nkv; h++)
            for (size_t j = 0; j < hd; j++) {
                double sum = 0;
                for (int p = 0; p < W - 1; p++) {
                    const mz_f16 *ch = (const mz_f16 *)(const void *)mz_harness_kv_chunk(c, l, (size_t)p / TOK);
                    sum += mz_half_to_float(ch[(h * TOK + (size_t)p % TOK) * hd + j]);
                }
                mu[((size_t)l * nkv + h) * hd + j] = (float)(sum / (W - 1));
            }
}

/* llama.cpp's method over windows of W tokens (header of this file). */
static void eval_full(mz_model_t *m, const mz_model_info *mi, int threads, const char *file,
                      const mz_token *toks, size_t n_tok, int W, int max_windows,
                      codec_eval *codecs, int n_codecs, full_ablation *ab)
{
    size_t n_win = n_tok / (size_t)W;
    if (max_windows > 0 && n_win > (size_t)max_windows) n_win = (size_t)max_windows;
    const int n_vocab = mz_model_n_vocab(m), first = W / 2;
    printf("\n## %s: llama.cpp's method, every KV entry through the codec, %zu windows of %d "
           "tokens, %zu scored\n\n", file, n_win, W, n_win * (size_t)(W - 1 - first));
    if (ab->raw_first || ab->raw_layers || ab->k_mean_oracle || ab->k_exact_hi > ab->k_exact_lo)
        printf("ablation: raw_first=%d raw_layers=0x%llx k_mean=%s k_exact=%d-%d\n\n", ab->raw_first,
               (unsigned long long)ab->raw_layers, ab->k_mean_oracle ? "oracle" : "none", ab->k_exact_lo,
               ab->k_exact_hi);
    if (!n_win) return;
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_threads = threads;
    cp.n_ctx = W + 16;
    mz_ctx_t *c = NULL;
    if (mz_ctx_init(m, &cp, &c) != MZ_OK) die("ctx", mz_last_error());
    const size_t n_row = 2 * (size_t)mi->n_head_kv * (size_t)mi->head_dim;
    size_t blob_cap = 0;
    for (int k = 1; k <= n_codecs; k++)
        for (int l = 0; l < mi->n_layer; l++)
            blob_cap = MZ_MAX(blob_cap, blob_cap_for(&codecs[k], l, n_row));
    mz_f16 *rows = malloc(n_row * sizeof *rows);
    uint8_t *blob = malloc(blob_cap);
    float *lp = malloc((size_t)n_vocab * sizeof *lp);
    float *lp_base = malloc((size_t)(W - first) * (size_t)n_vocab * sizeof *lp_base);
    mz_token *win = malloc((size_t)W * sizeof *win);
    /* per codec: sum of -log p, sum of KL, agreements, scored positions, seconds */
    double *nll = calloc((size_t)n_codecs + 1, sizeof *nll), *kl = calloc((size_t)n_codecs + 1, sizeof *kl);
    double *secs = calloc((size_t)n_codecs + 1, sizeof *secs);
    long *agree = calloc((size_t)n_codecs + 1, sizeof *agree), n_scored = 0;
    int *base_top = malloc((size_t)(W - first) * sizeof *base_top);
    free(ab->k_mean);
    ab->k_mean = ab->k_mean_oracle ? malloc((size_t)mi->n_layer * n_row / 2 * sizeof *ab->k_mean) : NULL;
    if (!rows || !blob || !lp || !lp_base || !win || !nll || !kl || !secs || !agree || !base_top ||
        (ab->k_mean_oracle && !ab->k_mean))
        die("malloc", "out of memory");
    /* llama-perplexity puts BOS first in every window when the tokenizer adds one */
    const bool add_bos = n_tok > 0 && mi->bos >= 0 && toks[0] == mi->bos;
    for (size_t wi = 0; wi < n_win; wi++) {
        memcpy(win, toks + wi * (size_t)W, (size_t)W * sizeof *win);
        if (add_bos) win[0] = mi->bos;
        for (int k = 0; k <= n_codecs; k++) {
            double t0 = wall_s(), wnll = 0, wkl = 0;
            long wagree = 0;
            if (mz_ctx_truncate(c, 0) != MZ_OK) die("truncate", mz_ctx_errmsg(c));
            for (int p = 0; p < W - 1; p++) {
                step(c, win[p]);
                if (k > 0) roundtrip_position(c, mi, &codecs[k], ab, (size_t)p, rows, blob, blob_cap);
                if (p < first) continue;
                /* the logits at p predict token p + 1 */
                const int s = p - first;
                float *dst = k == 0 ? lp_base + (size_t)s * n_vocab : lp;
                int am = log_softmax(mz_ctx_logits(c), n_vocab, dst);
                wnll -= dst[win[p + 1]];
                if (k == 0) {
                    base_top[s] = am;
                    continue;
                }
                wkl += kl_nats(lp_base + (size_t)s * n_vocab, lp, n_vocab);
                wagree += am == base_top[s];
            }
            if (k == 0 && ab->k_mean_oracle) window_k_mean(c, mi, W, ab->k_mean);
            nll[k] += wnll;
            kl[k] += wkl;
            agree[k] += wagree;
            secs[k] += wall_s() - t0;
            printf("full file=%s ctx=%d window=%zu codec=%s ppl=%.4f kld=%.6f top1_agree=%.4f "
                   "secs=%.1f\n", file, W, wi, codecs[k].name, exp(wnll / (W - 1 - first)),
                   wkl / (W - 1 - first), k ? (double)wagree / (W - 1 - first) : 1.0,
                   wall_s() - t0);
            fflush(stdout);
        }
        n_scored += W - 1 - first;
    }
    double ppl0 = exp(nll[0] / (double)n_scored);
    printf("\n| codec | perplexity | ratio to F16 | mean KLD (nats) | top-1 agreement | "
           "s per window |\n|---|---:|---:|---:|---:|---:|\n");
    for (int k = 0; k <= n_codecs; k++) {
        double ppl = exp(nll[k] / (double)n_scored);
        printf("| %s | %.4f | %.4f (%+.2f %%) | %.5f | %.2f %% | %.1f |\n", codecs[k].name, ppl,
               ppl / ppl0, 100.0 * (ppl / ppl0 - 1.0), kl[k] / (double)n_scored,
               k ? 100.0 * (double)agree[k] / (double)n_scored : 100.0, secs[k] / (double)n_win);
        printf("fullsum file=%s ctx=%d windows=%zu scored=%ld codec=%s ppl=%.5f ppl_ratio=%.5f "
               "kld=%.6f top1_agree=%.5f\n", file, W, n_win, n_scored, codecs[k].name, ppl,
               ppl / ppl0, kl[k] / (double)n_scored, k ? (double)agree[k] / (double)n_scored : 1.0);
    }
    fflush(stdout);
    mz_ctx_free(c);
    free(rows);
    free(blob);
    free(lp);
    free(lp_base);
    free(win);
    free(nll);
    free(kl);
    free(secs);
    free(agree);
    free(base_top);
    free(ab->k_mean);
    ab->k_mean = NULL;
}

/* ---- KV size and speed table --------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void size_table(mz_ctx_t *c, codec_eval *codecs, int n_codecs, size_t n_full)
{
    size_t cb = mz_harness_kv_chunk_bytes(c), n = cb / 2, n_ch = (size_t)mz_harness_kv_n_layer(c) * n_full;
    double raw = (double)cb * (double)n_ch;
    printf("\n## KV space savings and throughput: %d layers x %zu full chunks = %.1f MiB of F16 "
           "KV (%zu tokens)\n\n", mz_harness_kv_n_layer(c), n_full, raw / 1048576.0, n_full * TOK);
    printf("| codec | bytes | ratio | space saving | encode MB/s | decode MB/s |\n");
    printf("|---|---:|---:|---:|---:|---:|\n");
    mz_f16 *out = malloc(cb);
    for (int k = 0; k < n_codecs; k++) {
        codec_eval *e = &codecs[k];
        if (e->layer_v) {
            printf("| %s | (K/V split: the sum of its codecs' sizes; not measured here) |\n", e->name);
            continue;
        }
        size_t cap = 0;
        for (int l = 0; l < mz_harness_kv_n_layer(c); l++) cap = MZ_MAX(cap, mz_codec_bound(codec_for(e, l), n));
        uint8_t *blob = malloc(cap * n_ch);
        size_t *len = malloc(n_ch * sizeof *len);
        double te[3], td[3], total = 0;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = cpu_s();
            for (int l = 0; l < mz_harness_kv_n_layer(c); l++)
                for (size_t ci = 0; ci < n_full; ci++) {
                    size_t i = (size_t)l * n_full + ci;
                    if (mz_codec_encode(codec_for(e, l), (const mz_f16 *)(void *)mz_harness_kv_chunk(c, l, ci), n,
                                        blob + i * cap, cap, &len[i]) != MZ_OK)
                        die("encode", mz_last_error());
                }
            double t1 = cpu_s();
            for (int l = 0; l < mz_harness_kv_n_layer(c); l++)
                for (size_t ci = 0; ci < n_full; ci++) {
                    size_t i = (size_t)l * n_full + ci;
                    if (mz_codec_decode(codec_for(e, l), blob + i * cap, len[i], out, n) != MZ_OK)
                        die("decode", mz_last_error());
                }
            double t2 = cpu_s();
            te[rep] = t1 - t0;
            td[rep] = t2 - t1;
        }
        for (size_t i = 0; i < n_ch; i++) total += (double)len[i];
        qsort(te, 3, sizeof *te, cmp_double);
        qsort(td, 3, sizeof *td, cmp_double);
        printf("| %s | %.0f | %.3f | %.2f %% | %.0f | %.0f |\n", e->name, total, raw / total,
               100.0 * (1.0 - total / raw), raw / te[1] / 1e6, raw / td[1] / 1e6);
        printf("size codec=%s bytes=%.0f ratio=%.4f saving_pct=%.3f enc_MBps=%.1f dec_MBps=%.1f\n",
               e->name, total, raw / total, 100.0 * (1.0 - total / raw), raw / te[1] / 1e6,
               raw / td[1] / 1e6);
        free(blob);
        free(len);
    }
    free(out);
#if defined(MZ_HAVE_LZ4) || defined(MZ_HAVE_ZSTD)
    /* general-purpose compressors, per chunk and per 4 KiB page (zRAM) */
    struct {
        const char *name;
        int kind, level;
        size_t unit;
    } gp[] = {
#if defined(MZ_HAVE_LZ4)
        {"lz4 (4 KiB pages)", 0, 1, 4096}, {"lz4 (whole chunk)", 0, 1, 0},
#endif
#if defined(MZ_HAVE_ZSTD)
        {"zstd -3 (4 KiB pages)", 1, 3, 4096}, {"zstd -3 (whole chunk)", 1, 3, 0},
        {"zstd -19 (whole chunk)", 1, 19, 0},
#endif
    };
    size_t cap = cb + cb / 64 + 1024;
    uint8_t *dst = malloc(cap);
    for (size_t g = 0; g < sizeof gp / sizeof gp[0]; g++) {
        double total = 0;
        double t0 = cpu_s();
        for (int l = 0; l < mz_harness_kv_n_layer(c); l++)
            for (size_t ci = 0; ci < n_full; ci++) {
                const uint8_t *src = mz_harness_kv_chunk(c, l, ci);
                size_t unit = gp[g].unit ? gp[g].unit : cb;
                for (size_t off = 0; off < cb; off += unit) {
                    size_t sz = MZ_MIN(unit, cb - off), out_len = 0;
#if defined(MZ_HAVE_LZ4)
                    if (gp[g].kind == 0)
                        out_len = (size_t)LZ4_compress_default((const char *)src + off, (char *)dst,
                                                               (int)sz, (int)cap);
#endif
#if defined(MZ_HAVE_ZSTD)
                    if (gp[g].kind == 1) {
                        out_len = ZSTD_compress(dst, cap, src + off, sz, gp[g].level);
                        if (ZSTD_isError(out_len)) die("zstd", ZSTD_getErrorName(out_len));
                    }
#endif
                    /* zRAM stores a page that does not shrink as it is */
                    total += (double)MZ_MIN(out_len ? out_len : sz, sz);
                }
            }
        double t1 = cpu_s();
        printf("| %s | %.0f | %.3f | %.2f %% | %.0f | — |\n", gp[g].name, total, raw / total,
               100.0 * (1.0 - total / raw), raw / (t1 - t0) / 1e6);
        printf("size codec=%s bytes=%.0f ratio=%.4f saving_pct=%.3f enc_MBps=%.1f\n", gp[g].name,
               total, raw / total, 100.0 * (1.0 - total / raw), raw / (t1 - t0) / 1e6);
    }
    free(dst);
#else
    printf("(lz4/zstd: not built in; install liblz4-dev and libzstd-dev and re-run cmake)\n");
#endif
}

/* ---- main ---------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    const char *model = NULL, *files[MAX_FILES], *codec_list = "raw,q8,cachegen,cachegen-layer,cachegen-q7";
    const char *dump = NULL;
    bool method_cut = true, method_full = false;
    int window_sizes[MAX_WINDOW_SIZES] = {512}, n_windows_sizes = 1, max_windows = 0;
    full_ablation ablation = {0};
    int n_files = 0, threads = 2, first_cut = 4096, stride = 512, max_cuts = 4, n_score = 256,
        n_gen = 64;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) die("missing value for", a);
        if (!strcmp(a, "-m")) model = v;
        else if (!strcmp(a, "-f") && n_files < MAX_FILES) files[n_files++] = v;
        else if (!strcmp(a, "-t")) threads = bench_arg_int("eval_codec", a, v, 0, 1 << 24);
        else if (!strcmp(a, "--first-cut")) first_cut = bench_arg_int("eval_codec", a, v, 0, 1 << 24);
        else if (!strcmp(a, "--stride")) stride = bench_arg_int("eval_codec", a, v, 0, 1 << 24);
        else if (!strcmp(a, "--max-cuts")) max_cuts = bench_arg_int("eval_codec", a, v, 0, 1 << 24);
        else if (!strcmp(a, "--score")) n_score = bench_arg_int("eval_codec", a, v, 0, 1 << 24);
        else if (!strcmp(a, "--gen")) n_gen = bench_arg_int("eval_codec", a, v, 0, 1 << 24);
        else if (!strcmp(a, "--codecs")) codec_list = v;
        else if (!strcmp(a, "--dump-kv")) dump = v;
        else if (!strcmp(a, "--method")) {
            if (strcmp(v, "cut") && strcmp(v, "full") && strcmp(v, "both"))
                die("--method (want cut, full or both)", v);
            method_cut = strcmp(v, "full") != 0;
            method_full = strcmp(v, "cut") != 0;
        } else if (!strcmp(a, "--ctx")) {
            char buf[128];
            snprintf(buf, sizeof buf, "%s", v);
            n_windows_sizes = 0;
            for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                if (n_windows_sizes == MAX_WINDOW_SIZES) die("--ctx: too many sizes", v);
                /* even, so the scored half is W / 2 positions */
                int w = bench_arg_int("eval_codec", "--ctx", t, 4, 1 << 20);
                if (w % 2) die("--ctx: window sizes must be even", t);
                window_sizes[n_windows_sizes++] = w;
            }
        } else if (!strcmp(a, "--max-windows")) max_windows = bench_arg_int("eval_codec", a, v, 0, 1 << 20);
        else if (!strcmp(a, "--raw-first")) ablation.raw_first = bench_arg_int("eval_codec", a, v, 0, 1 << 20);
        else if (!strcmp(a, "--raw-layers")) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *t = strtok(buf, ","); t; t = strtok(NULL, ","))
                ablation.raw_layers |= 1ull << bench_arg_int("eval_codec", "--raw-layers", t, 0, 63);
        } else if (!strcmp(a, "--k-exact")) {
            char *dash = strchr(v, '-'), lo[16];
            if (!dash || dash - v >= (long)sizeof lo) die("--k-exact (want LO-HI channels)", v);
            snprintf(lo, sizeof lo, "%.*s", (int)(dash - v), v);
            ablation.k_exact_lo = bench_arg_int("eval_codec", "--k-exact", lo, 0, 1024);
            ablation.k_exact_hi = bench_arg_int("eval_codec", "--k-exact", dash + 1, ablation.k_exact_lo, 1024);
        } else if (!strcmp(a, "--k-mean")) {
            if (strcmp(v, "oracle") && strcmp(v, "none")) die("--k-mean (want oracle or none)", v);
            ablation.k_mean_oracle = !strcmp(v, "oracle");
        }
        else die("unknown option", a);
    }
    if (!model || !n_files || first_cut < 2 || stride < 1 || n_score < 1 || threads < 1)
        die("usage", "eval_codec -m MODEL -f TEXT [-f TEXT..] [-t N] [--first-cut N] [--stride N] "
                     "[--max-cuts N] [--score N] [--gen N] [--codecs a,b,..] [--dump-kv FILE] "
                     "[--method cut|full|both] [--ctx W[,W..]] [--max-windows N] [--raw-first N] "
                     "[--raw-layers L[,L..]] [--k-mean oracle|none] [--k-exact LO-HI]");

    mz_model_t *m = NULL;
    if (mz_model_load(model, NULL, &m) != MZ_OK) die(model, mz_last_error());
    mz_model_info mi;
    mz_model_get_info(m, &mi);
    int n_vocab = mz_model_n_vocab(m);
    g_n_head_kv = (size_t)mi.n_head_kv;
    g_head_dim = (size_t)mi.head_dim;

    /* codecs */
    codec_eval codecs[MAX_CODECS + 1];
    int n_codecs = 0;
    memset(codecs, 0, sizeof codecs);
    snprintf(codecs[0].name, sizeof codecs[0].name, "baseline (F16)");
    char list[256];
    snprintf(list, sizeof list, "%s", codec_list);
    for (char *tok = strtok(list, ","); tok && n_codecs < MAX_CODECS; tok = strtok(NULL, ",")) {
        codec_eval *e = &codecs[1 + n_codecs];
        snprintf(e->name, sizeof e->name, "%s", tok);
        char *slash = strchr(tok, '/');
        const mz_codec *reg = strncmp(tok, "cg-k", 4) && !slash ? mz_codec_find(tok) : NULL;
        if (slash) {
            /* "K/V": K values through codec K, V values through codec V,
             * each built per layer as below */
            *slash = 0;
            e->k_per_channel = !strcmp(tok, "kivi");
            const mz_codec *ck = mz_codec_find(e->k_per_channel ? "q8" : tok), *cv = mz_codec_find(slash + 1);
            if (!ck || !cv) die(e->name, mz_last_error());
            e->per_layer = true;
            e->layer = calloc((size_t)mi.n_layer, sizeof *e->layer);
            e->layer_v = calloc((size_t)mi.n_layer, sizeof *e->layer_v);
            if (!e->layer || !e->layer_v) die("calloc", "");
            for (int l = 0; l < mi.n_layer; l++) {
                e->layer[l] = mz_codec_for_layer(ck, (unsigned)mi.head_dim, (unsigned)l,
                                                 (unsigned)mi.n_layer);
                e->layer_v[l] = mz_codec_for_layer(cv, (unsigned)mi.head_dim, (unsigned)l,
                                                   (unsigned)mi.n_layer);
            }
        } else if (reg) {
            /* every registry codec as the memory manager uses it: one instance
             * per layer (cachegen: rows = this model's head_dim; cachegen-layer:
             * the CacheGen layer schedule) */
            e->per_layer = true;
            e->layer = calloc((size_t)mi.n_layer, sizeof *e->layer);
            if (!e->layer) die("calloc", "");
            for (int l = 0; l < mi.n_layer; l++)
                e->layer[l] = mz_codec_for_layer(reg, (unsigned)mi.head_dim, (unsigned)l,
                                                 (unsigned)mi.n_layer);
        } else if (!strncmp(tok, "cg-k", 4)) {
            /* cg-kA-vB: cachegen with Q = A for K and B for V in every layer */
            unsigned qk = 0, qv = 0;
            if (sscanf(tok, "cg-k%u-v%u", &qk, &qv) != 2 || qk < 1 || qk > MZ_CG_LEVELS_MAX ||
                qv < 1 || qv > MZ_CG_LEVELS_MAX)
                die("bad codec spec (want cg-kA-vB, 1 <= A, B <= 31)", tok);
            mz_cachegen_params p = mz_cachegen_params_default((unsigned)mi.head_dim);
            p.levels_k = qk;
            p.levels_v = qv;
            e->one = mz_codec_cachegen(&p);
        } else {
            die(tok, mz_last_error());
        }
        n_codecs++;
    }

    printf("# eval_codec: model %s (%s, %d layers, %d KV heads x %d), %d threads\n", model,
           mi.name, mi.n_layer, mi.n_head_kv, mi.head_dim, threads);
    {
        /* speeds taken on a loaded machine must say so */
        char la[64] = "?";
        FILE *lf = fopen("/proc/loadavg", "r");
        if (lf) {
            if (!fgets(la, sizeof la, lf)) snprintf(la, sizeof la, "?");
            fclose(lf);
        }
        printf("# load average at start: %s", la);
    }
    double t_start = wall_s();
    float *lp_base = NULL, *lp = malloc((size_t)n_vocab * sizeof *lp);
    mz_token *gen_base = malloc((size_t)(n_gen + 1) * sizeof *gen_base);
    bool sized = false;

    for (int fi = 0; fi < n_files; fi++) {
        size_t tlen;
        char *text;
        if (mz_read_file(files[fi], (size_t)1 << 30, &text, &tlen)) die("-f", mz_last_error());
        size_t n_tok = 0, cap_tok = tlen + 16; /* a token covers at least one byte */
        mz_token *toks = malloc(cap_tok * sizeof *toks);
        if (!toks || mz_tokenize(m, text, tlen, true, false, toks, cap_tok, &n_tok) != MZ_OK)
            die(files[fi], mz_last_error());
        int cuts[64], n_cuts = 0;
        for (long cpos = first_cut; cpos + n_score <= (long)n_tok && n_cuts < max_cuts && n_cuts < 64;
             cpos += stride)
            cuts[n_cuts++] = (int)cpos;
        printf("text file=%s bytes=%zu tokens=%zu cuts=%d\n", files[fi], tlen, n_tok,
               method_cut ? n_cuts : 0);
        fflush(stdout);
        for (int wi = 0; method_full && wi < n_windows_sizes; wi++)
            eval_full(m, &mi, threads, files[fi], toks, n_tok, window_sizes[wi], max_windows,
                      codecs, n_codecs, &ablation);
        if (!n_cuts || !method_cut) {
            free(toks);
            free(text);
            continue;
        }

        mz_ctx_params cp = mz_ctx_params_default();
        cp.n_threads = threads;
        cp.n_ctx = cuts[n_cuts - 1] + n_score + n_gen + 16;
        mz_ctx_t *c = NULL;
        if (mz_ctx_init(m, &cp, &c) != MZ_OK) die("ctx", mz_last_error());
        size_t scratch_cap = 0;
        for (int k = 1; k <= n_codecs; k++)
            for (int l = 0; l < mi.n_layer; l++)
                scratch_cap = MZ_MAX(scratch_cap, blob_cap_for(&codecs[k], l,
                                                               mz_harness_kv_chunk_bytes(c) / 2));
        uint8_t *scratch = malloc(scratch_cap);
        size_t max_chunks = (size_t)(cuts[n_cuts - 1] + TOK - 1) / TOK;
        uint8_t *pristine = malloc(max_chunks * (size_t)mi.n_layer * mz_harness_kv_chunk_bytes(c));
        if (!lp_base) lp_base = malloc((size_t)n_score * (size_t)n_vocab * sizeof *lp_base);
        if (!scratch || !pristine || !lp_base) die("malloc", "out of memory");

        size_t prev_P = 0, prev_ch = 0; /* the previous cut's prefix, saved in pristine */
        for (int ki = 0; ki < n_cuts; ki++) {
            size_t cut = (size_t)cuts[ki], P = cut - 1;
            double t0 = wall_s();
            /* Extend the previous cut's pristine prefix: the context now holds
             * the last codec's round trip of it and that codec's greedy
             * continuation after it, neither of which the next cut may see. */
            if (prev_P) {
                if (mz_ctx_truncate(c, MZ_MIN(prev_P, P)) != MZ_OK)
                    die("truncate", mz_ctx_errmsg(c));
                load_kv(c, prev_ch, pristine);
            }
            size_t have = mz_ctx_n_tokens(c);
            if (have > P && mz_ctx_truncate(c, P) != MZ_OK) die("truncate", mz_ctx_errmsg(c));
            have = mz_ctx_n_tokens(c);
            if (have < P && mz_prefill(c, toks + have, P - have) != MZ_OK)
                die("prefill", mz_ctx_errmsg(c));
            size_t n_ch = (P + TOK - 1) / TOK;
            save_kv(c, n_ch, pristine);
            prev_P = P;
            prev_ch = n_ch;
            if (!sized) {
                if (dump) {
                    FILE *df = fopen(dump, "wb");
                    if (!df || fwrite(pristine, mz_harness_kv_chunk_bytes(c), n_ch * (size_t)mi.n_layer, df) !=
                                   n_ch * (size_t)mi.n_layer)
                        die(dump, "cannot write");
                    fclose(df);
                    printf("dumped %zu chunks per layer (layer-major) to %s\n", n_ch, dump);
                }
                size_table(c, codecs + 1, n_codecs, P / TOK);
                sized = true;
                printf("\n");
            }
            printf("cut file=%s cut=%zu prefill_s=%.1f\n", files[fi], cut, wall_s() - t0);
            fflush(stdout);
            for (int k = 0; k <= n_codecs; k++) {
                codec_eval *e = &codecs[k];
                double t1 = wall_s();
                if (mz_ctx_truncate(c, P) != MZ_OK) die("truncate", mz_ctx_errmsg(c));
                load_kv(c, n_ch, pristine);
                if (k > 0) roundtrip_kv(c, e, n_ch, scratch, scratch_cap);
                /* teacher-forced scoring of tokens cut .. cut+score-1 */
                double nll = 0, kl = 0;
                long agree = 0, correct = 0;
                for (int s = 0; s < n_score; s++) {
                    step(c, toks[P + (size_t)s]);
                    mz_token want = toks[cut + (size_t)s];
                    float *dstp = k == 0 ? lp_base + (size_t)s * n_vocab : lp;
                    int am = log_softmax(mz_ctx_logits(c), n_vocab, dstp);
                    nll -= dstp[want];
                    correct += am == want;
                    if (k > 0) {
                        const float *b = lp_base + (size_t)s * n_vocab;
                        int bm = 0;
                        for (int v = 1; v < n_vocab; v++)
                            if (b[v] > b[bm]) bm = v;
                        kl += kl_nats(b, lp, n_vocab);
                        agree += am == bm;
                    } else {
                        agree++;
                    }
                }
                /* greedy continuation */
                if (mz_ctx_truncate(c, P) != MZ_OK) die("truncate", mz_ctx_errmsg(c));
                step(c, toks[P]);
                int prefix = -1;
                bool exact = true;
                for (int g = 0; g < n_gen; g++) {
                    const float *lg = mz_ctx_logits(c);
                    mz_token best = 0;
                    for (int v = 1; v < n_vocab; v++)
                        if (lg[v] > lg[best]) best = v;
                    if (k == 0) gen_base[g] = best;
                    else if (best != gen_base[g]) {
                        if (prefix < 0) prefix = g;
                        exact = false;
                    }
                    if (g + 1 < n_gen) step(c, best);
                }
                if (prefix < 0) prefix = n_gen;
                e->nll += nll;
                e->kl += kl;
                e->n_scored += n_score;
                e->n_agree += agree;
                e->n_correct += correct;
                e->n_gen_exact += exact;
                e->gen_prefix += prefix;
                e->n_cuts++;
                printf("quality file=%s cut=%zu codec=%s ppl=%.4f top1_agree=%.4f top1_acc=%.4f "
                       "kl=%.5f gen_exact=%d gen_prefix=%d secs=%.1f\n", files[fi], cut, e->name,
                       exp(nll / n_score), (double)agree / n_score, (double)correct / n_score,
                       kl / n_score, exact, prefix, wall_s() - t1);
                fflush(stdout);
            }
        }
        mz_ctx_free(c);
        free(scratch);
        free(pristine);
        free(toks);
        free(text);
    }

    if (method_cut) {
    printf("\n## Quality against the uncompressed KV (%d scored tokens and one %d-token greedy "
           "continuation per cut point)\n\n", codecs[0].n_cuts ? (int)(codecs[0].n_scored / codecs[0].n_cuts) : 0, n_gen);
    printf("| codec | perplexity | change | top-1 agreement | top-1 accuracy | mean KL (nats) | "
           "greedy %d exact | mean common prefix |\n|---|---:|---:|---:|---:|---:|---:|---:|\n", n_gen);
    double ppl0 = codecs[0].n_scored ? exp(codecs[0].nll / (double)codecs[0].n_scored) : 0;
    for (int k = 0; k <= n_codecs; k++) {
        codec_eval *e = &codecs[k];
        if (!e->n_scored) continue;
        double ppl = exp(e->nll / (double)e->n_scored);
        printf("| %s | %.4f | %+.2f %% | %.2f %% | %.2f %% | %.5f | %d / %d | %.1f |\n", e->name, ppl,
               100.0 * (ppl / ppl0 - 1.0), 100.0 * (double)e->n_agree / (double)e->n_scored,
               100.0 * (double)e->n_correct / (double)e->n_scored, e->kl / (double)e->n_scored,
               e->n_gen_exact, e->n_cuts, (double)e->gen_prefix / e->n_cuts);
    }
    }
    printf("\ntotal_wall_s=%.0f\n", wall_s() - t_start);
    free(lp);
    free(lp_base);
    free(gen_base);
    mz_model_free(m);
    return 0;
}
