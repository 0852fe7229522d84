/*
 * kv_fill.c — synthetic KV that behaves like real KV (see kv_fill.h).
 *
 * Calibration layout: q[((l * 2 + kind) * n_head_kv + h) * head_dim + d][MZ_KVFILL_NQ],
 * kind 0 = K (before RoPE), 1 = V. Quantile i is the order statistic at
 * rank i * (n - 1) / (NQ - 1) of the channel's n recorded values.
 */
#include "kv_fill.h"

#include "../core/core.h"
#include "../engine/engine.h"
#include "../kernels/kernels.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mz_kvfill {
    int n_layer, n_head_kv, head_dim, n_rot;
    float rope_base;
    const float *rope_freq_factors; /* the model's (NULL: none) */
    bool rope_neox, rope;       /* rope: K carries RoPE (every arch we load does) */
    size_t chunk_bytes;
    float *q;                   /* quantiles, layout above */
};

static size_t n_channels(const mz_kvfill *f)
{
    return (size_t)f->n_layer * 2 * (size_t)f->n_head_kv * (size_t)f->head_dim;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

mz_status mz_kvfill_from_ctx(const mz_ctx_t *c, size_t pos0, size_t pos1, mz_kvfill **out)
{
    *out = NULL;
    if (!c || pos1 <= pos0 || pos1 - pos0 < 64 || pos1 > c->n_tokens)
        return mz_fail(MZ_E_INVAL, "kv fill: calibration range [%zu, %zu) of a %zu-token context",
                       pos0, pos1, c ? c->n_tokens : 0);
    const mz_model_config *cfg = &c->model->cfg;
    const mz_kv_cache *kv = &c->kv;
    mz_kvfill *f = calloc(1, sizeof *f);
    if (!f) return mz_fail(MZ_E_NOMEM, "kv fill: calibration");
    f->n_layer = kv->n_layer, f->n_head_kv = kv->n_head_kv, f->head_dim = kv->head_dim;
    f->n_rot = cfg->n_rot, f->rope_base = cfg->rope_base, f->rope_neox = cfg->rope_neox;
    f->rope_freq_factors = cfg->rope_freq_factors;
    f->rope = cfg->n_rot > 0;
    f->chunk_bytes = kv->chunk_bytes;
    const size_t n = pos1 - pos0, hd = (size_t)f->head_dim;
    f->q = malloc(n_channels(f) * MZ_KVFILL_NQ * sizeof *f->q);
    /* vals: one (layer, kind, head) at a time: [head_dim][n] */
    float *vals = malloc(hd * n * sizeof *vals), *row = malloc(hd * sizeof *row);
    if (!f->q || !vals || !row) {
        free(vals), free(row), mz_kvfill_free(f);
        return mz_fail(MZ_E_NOMEM, "kv fill: calibration");
    }
    for (int l = 0; l < f->n_layer; l++)
        for (int kind = 0; kind < 2; kind++)
            for (int h = 0; h < f->n_head_kv; h++) {
                for (size_t i = 0; i < n; i++) {
                    size_t p = pos0 + i;
                    uint8_t *ch = kv->chunks[l][p / MZ_KV_CHUNK_TOKENS];
                    int r = (int)(p % MZ_KV_CHUNK_TOKENS);
                    const mz_f16 *src = kind ? mz_kv_chunk_v(ch, f->n_head_kv, f->head_dim, h, r)
                                             : mz_kv_chunk_k(ch, f->n_head_kv, f->head_dim, h, r);
                    mz_f16_to_f32_row(src, row, hd);
                    if (kind == 0 && f->rope) /* back to the unrotated K */
                        mz_rope(row, 1, f->head_dim, f->n_rot, -(int)p, f->rope_base, f->rope_freq_factors,
                                f->rope_neox);
                    for (size_t d = 0; d < hd; d++) vals[d * n + i] = row[d];
                }
                for (size_t d = 0; d < hd; d++) {
                    float *v = vals + d * n;
                    qsort(v, n, sizeof *v, cmp_float);
                    float *qq = f->q + ((((size_t)l * 2 + (size_t)kind) * (size_t)f->n_head_kv + (size_t)h) * hd + d) *
                                           MZ_KVFILL_NQ;
                    for (int k = 0; k < MZ_KVFILL_NQ; k++) {
                        double rank = (double)k * (double)(n - 1) / (MZ_KVFILL_NQ - 1);
                        size_t i0 = (size_t)rank;
                        size_t i1 = i0 + 1 < n ? i0 + 1 : i0;
                        double t = rank - (double)i0;
                        qq[k] = (float)((1.0 - t) * v[i0] + t * v[i1]);
                    }
                }
            }
    free(vals), free(row);
    *out = f;
    return MZ_OK;
}

mz_status mz_kvfill_calibrate(mz_ctx_t *c, const mz_token *tokens, size_t n, mz_kvfill **out)
{
    *out = NULL;
    if (!c || c->n_tokens != 0) return mz_fail(MZ_E_INVAL, "kv fill: calibrate on an empty context");
    if (n < MZ_KVFILL_SKIP + 64) return mz_fail(MZ_E_INVAL, "kv fill: %zu calibration tokens (need %d)", n,
                                                MZ_KVFILL_SKIP + 64);
    mz_status s = mz_prefill(c, tokens, n);
    if (!s) s = mz_kvfill_from_ctx(c, MZ_KVFILL_SKIP, n, out);
    mz_status s2 = mz_ctx_truncate(c, 0);
    if (s) return s;
    if (s2) {
        mz_kvfill_free(*out), *out = NULL;
        return s2;
    }
    return MZ_OK;
}

/* A passage used when no text file is at hand: real prose, so the KV it gives
 * is a real model's answer to language (it repeats to reach the length). */
static const char k_builtin_text[] =
    "The history of computing is a history of memory. Early machines stored a few "
    "thousand words in delay lines and magnetic drums, and programmers spent much of "
    "their effort deciding what to keep close to the processor and what to leave on "
    "slower devices. Virtual memory made that decision automatic: the operating system "
    "moves pages between main memory and disk as programs touch them, and most programs "
    "never notice. Large language models changed the balance again. A model's weights "
    "are read for every token, and the cache of keys and values that attention keeps "
    "for a conversation grows with every token it has seen. On a phone or a laptop that "
    "cache competes with the browser, the camera and every other application for the "
    "same memory, and when the system runs short it must take memory from someone. ";

size_t mz_kvfill_text_tokens(const mz_model_t *m, const char *path, mz_token *out, size_t cap)
{
    if (!m || !out || cap == 0) return 0;
    char *text = NULL;
    size_t len = 0;
    FILE *fp = fopen(path ? path : "/usr/share/common-licenses/GPL-3", "rb");
    if (fp) {
        /* ~5 bytes a token; read what cap tokens need and a margin. */
        size_t want = cap < SIZE_MAX / 8 ? cap * 8 + 64 : SIZE_MAX / 8;
        text = malloc(want + 1);
        if (text) len = fread(text, 1, want, fp);
        fclose(fp);
    }
    if (!text || len < 1024) {
        free(text);
        size_t one = sizeof k_builtin_text - 1, reps = cap / 100 + 2;
        text = malloc(one * reps + 1);
        if (!text) return 0;
        for (size_t i = 0; i < reps; i++) memcpy(text + i * one, k_builtin_text, one);
        len = one * reps;
    }
    size_t n = 0;
    mz_token *tmp = malloc((len + 2) * sizeof *tmp);
    if (tmp && mz_tokenize(m, text, len, true, false, tmp, len + 2, &n) == MZ_OK) {
        n = n < cap ? n : cap;
        memcpy(out, tmp, n * sizeof *out);
    } else {
        n = 0;
    }
    free(tmp);
    free(text);
    return n;
}

mz_status mz_kvfill_calibrate_default(mz_ctx_t *c, size_t n_calib, mz_kvfill **out)
{
    *out = NULL;
    if (!c) return mz_fail(MZ_E_INVAL, "kv fill: null context");
    if (n_calib > c->n_ctx) n_calib = c->n_ctx;
    mz_token *toks = malloc((n_calib ? n_calib : 1) * sizeof *toks);
    if (!toks) return mz_fail(MZ_E_NOMEM, "kv fill: tokens");
    size_t n = mz_kvfill_text_tokens(c->model, NULL, toks, n_calib);
    mz_status s = mz_kvfill_calibrate(c, toks, n, out);
    free(toks);
    return s;
}

/* ---- the fill ------------------------------------------------------------------------ */

static inline uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Inverse CDF by linear interpolation between the quantiles, for u in [0, 1). */
static inline float draw(const float *qq, uint64_t r)
{
    const double u = (double)(r >> 11) * (1.0 / 9007199254740992.0) * (MZ_KVFILL_NQ - 1);
    const int i = (int)u;
    const float t = (float)(u - i);
    return qq[i] + t * (qq[i + 1] - qq[i]);
}

void mz_kvfill_chunk(const mz_kvfill *f, int l, size_t ci, uint64_t seed, uint8_t *chunk)
{
    const size_t hd = (size_t)f->head_dim;
    float row[512];
    MZ_ASSERT(hd <= 512);
    uint64_t s = seed ^ ((uint64_t)(l + 1) * 0xd1b54a32d192ed03ULL) ^ ((uint64_t)(ci + 1) * 0x8cb92ba72f3d8dd7ULL);
    for (int kind = 0; kind < 2; kind++)
        for (int h = 0; h < f->n_head_kv; h++) {
            const float *qh = f->q + (((size_t)l * 2 + (size_t)kind) * (size_t)f->n_head_kv + (size_t)h) * hd *
                                         MZ_KVFILL_NQ;
            for (int r = 0; r < MZ_KV_CHUNK_TOKENS; r++) {
                for (size_t d = 0; d < hd; d++) row[d] = draw(qh + d * MZ_KVFILL_NQ, splitmix(&s));
                const int pos = (int)(ci * MZ_KV_CHUNK_TOKENS) + r;
                if (kind == 0 && f->rope)
                    mz_rope(row, 1, f->head_dim, f->n_rot, pos, f->rope_base, f->rope_freq_factors, f->rope_neox);
                mz_f16 *dst = kind ? mz_kv_chunk_v(chunk, f->n_head_kv, f->head_dim, h, r)
                                   : mz_kv_chunk_k(chunk, f->n_head_kv, f->head_dim, h, r);
                mz_f32_to_f16_row(row, dst, hd);
            }
        }
}

static mz_status check_shape(const mz_kvfill *f, const mz_ctx_t *c)
{
    if (f->n_layer != c->kv.n_layer || f->n_head_kv != c->kv.n_head_kv || f->head_dim != c->kv.head_dim)
        return mz_fail(MZ_E_INVAL, "kv fill: calibration shape %dx%dx%d, context %dx%dx%d", f->n_layer,
                       f->n_head_kv, f->head_dim, c->kv.n_layer, c->kv.n_head_kv, c->kv.head_dim);
    return MZ_OK;
}

static void set_tokens(mz_ctx_t *c, size_t N)
{
    const int nv = mz_model_n_vocab(c->model);
    for (size_t i = 0; i < N; i++) c->tokens[i] = (mz_token)(i % (size_t)nv);
    c->n_tokens = N;
    c->have_logits = false;
}

mz_status mz_kvfill_write(const mz_kvfill *f, mz_ctx_t *c, size_t N, uint64_t seed)
{
    if (!f || !c) return mz_fail(MZ_E_INVAL, "kv fill: null argument");
    mz_status s = check_shape(f, c);
    if (s) return s;
    if ((s = mz_kv_cache_reserve(&c->kv, N))) return s;
    const size_t n_chunks = (N + MZ_KV_CHUNK_TOKENS - 1) / MZ_KV_CHUNK_TOKENS;
    for (int l = 0; l < c->kv.n_layer; l++)
        for (size_t ci = 0; ci < n_chunks; ci++) mz_kvfill_chunk(f, l, ci, seed, c->kv.chunks[l][ci]);
    set_tokens(c, N);
    return MZ_OK;
}

mz_status mz_kvfill_write_table(mz_ctx_t *c, size_t N)
{
    if (!c) return mz_fail(MZ_E_INVAL, "kv fill: null context");
    mz_status s = mz_kv_cache_reserve(&c->kv, N);
    if (s) return s;
    uint64_t rng = 0x9e3779b97f4a7c15ULL;
    mz_f16 table[4096];
    for (size_t i = 0; i < 4096; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        table[i] = mz_f32_to_f16((float)(rng >> 40) / (float)(1 << 23) - 1.0f);
    }
    const size_t n_chunks = (N + MZ_KV_CHUNK_TOKENS - 1) / MZ_KV_CHUNK_TOKENS;
    const size_t halves = c->kv.chunk_bytes / sizeof(mz_f16);
    for (int l = 0; l < c->kv.n_layer; l++)
        for (size_t ci = 0; ci < n_chunks; ci++) {
            mz_f16 *h = (mz_f16 *)c->kv.chunks[l][ci];
            size_t off = (size_t)(rng & 4095);
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            for (size_t i = 0; i < halves; i += 512) {
                size_t n = halves - i < 512 ? halves - i : 512;
                memcpy(h + i, table + ((off + i * 7) & 3583), n * sizeof *h);
            }
        }
    set_tokens(c, N);
    return MZ_OK;
}

void mz_kvfill_free(mz_kvfill *f)
{
    if (!f) return;
    free(f->q);
    free(f);
}
