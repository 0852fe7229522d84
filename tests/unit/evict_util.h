/*
 * evict_util.h — helpers shared by the test_evict*.c programs (static, header
 * only): model and context set-up, logits comparison, the q8 reference
 * transform, RSS.
 */
#ifndef MZ_EVICT_UTIL_H
#define MZ_EVICT_UTIL_H

#include "codec/codec.h"
#include "engine/engine.h"
#include "kernels/kernels.h"
#include "mem/manager.h"
#include "mzcache.h"
#include "testutil.h"

#include <stdint.h>
#include <string.h>

/* Generates a model of a preset with weights of type or mix wtype (vocab
 * copied from the real model; n_layer, n_swa: 0 = the preset's). */
static inline int ev_gen_type(const char *path, const char *preset, int n_layer, int n_swa, const char *wtype)
{
    const char *real = t_real_model_path();
    if (!real) return -1;
    mz_gen_params gp = mz_gen_params_default();
    gp.preset = preset;
    gp.n_layer = n_layer;
    gp.n_swa = n_swa;
    gp.weight_type = wtype;
    gp.vocab_from = real;
    gp.seed = 7;
    return mz_gen_model(path, &gp) == MZ_OK ? 0 : -1;
}

/* The same with Q8_0 weights. */
static inline int ev_gen(const char *path, const char *preset, int n_layer, int n_swa)
{
    return ev_gen_type(path, preset, n_layer, n_swa, "Q8_0");
}

/* Generates the tiny test model. */
static inline int ev_gen_tiny(const char *path, int n_layer)
{
    return ev_gen(path, "tiny-llama", n_layer, 0);
}

static inline mz_model_t *ev_load(const char *path)
{
    mz_model_params mp = mz_model_params_default();
    mp.n_threads = 2;
    mz_model_t *m = NULL;
    if (mz_model_load(path, &mp, &m)) {
        fprintf(stderr, "load %s: %s\n", path, mz_last_error());
        return NULL;
    }
    return m;
}

/* Two loads of one file: one to evict, one never evicted (the reference). */
static inline int ev_load_pair(const char *path, mz_model_t **m, mz_model_t **ref)
{
    *m = ev_load(path);
    *ref = ev_load(path);
    return *m && *ref ? 0 : -1;
}

static inline mz_ctx_t *ev_ctx(mz_model_t *m, const char *codec, mz_kv_placement pl, int n_ctx,
                               const char *swap_name)
{
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = n_ctx;
    cp.n_threads = 2;
    cp.kv_codec = codec;
    cp.kv_placement = pl;
    cp.swap_dir = t_tmp_path(swap_name);
    mz_ctx_t *c = NULL;
    if (mz_ctx_init(m, &cp, &c)) {
        fprintf(stderr, "ctx: %s\n", mz_last_error());
        return NULL;
    }
    return c;
}

/* A context of engine mode `mode` (the baseline tests); mzcache itself with
 * the lossless destination (q8 is not), so that every mode can be held to
 * the same exact check. */
static inline mz_ctx_t *ev_mode_ctx(mz_model_t *m, mz_engine_mode mode, int n_ctx, const char *swap)
{
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = n_ctx;
    cp.n_threads = 2;
    cp.swap_dir = t_tmp_path(swap);
    cp.mode = mode;
    if (mode == MZ_MODE_MZCACHE) cp.kv_placement = MZ_KV_PLACE_STORAGE;
    mz_ctx_t *c = NULL;
    if (mz_ctx_init(m, &cp, &c)) {
        fprintf(stderr, "ctx (%s): %s\n", mz_engine_mode_name(mode), mz_last_error());
        return NULL;
    }
    return c;
}

static inline void ev_tokens(mz_token *t, size_t n, int n_vocab, unsigned long long seed)
{
    unsigned long long s = seed;
    for (size_t i = 0; i < n; i++) t[i] = (mz_token)(t_rand_u64(&s) % (unsigned long long)n_vocab);
}

/* The set-up of the tests that compare contexts on an evicting model with
 * contexts on a reference (separate weights): a generated n_layer model at
 * tmp/FILE loaded twice into *m and *ref, its vocabulary size in *n_vocab,
 * n_base base tokens drawn with seed and n_follow follow-up tokens with
 * seed + 1. Returns -1 when all is ready, else the test's exit status: a
 * skip without the real model (whose vocabulary the model takes), 1 when
 * the model cannot be made or loaded. */
static inline int ev_pair_setup(const char *test, const char *file, int n_layer, mz_model_t **m,
                                mz_model_t **ref, int *n_vocab, mz_token *base, size_t n_base,
                                mz_token *follow, size_t n_follow, unsigned long long seed)
{
    const char *path = t_tmp_path(file);
    if (!t_real_model_path()) return t_skip(test, "real model absent (make model)");
    if (ev_gen_tiny(path, n_layer)) {
        fprintf(stderr, "gen: %s\n", mz_last_error());
        return 1;
    }
    if (ev_load_pair(path, m, ref)) return 1;
    *n_vocab = mz_model_n_vocab(*m);
    ev_tokens(base, n_base, *n_vocab, seed);
    ev_tokens(follow, n_follow, *n_vocab, seed + 1);
    return -1;
}

/* Prefills and copies the logits into out (n_vocab floats); status returned. */
static inline mz_status ev_prefill_logits(mz_ctx_t *c, const mz_token *t, size_t n, float *out,
                                          int n_vocab)
{
    mz_status s = mz_prefill(c, t, n);
    if (s == MZ_OK) memcpy(out, mz_ctx_logits(c), (size_t)n_vocab * sizeof(float));
    return s;
}

static inline size_t ev_evictable_total(const mz_ctx_t *c)
{
    mz_mem_stats st;
    mz_get_mem_stats(c, &st);
    return st.weights.total_bytes + st.kv.total_bytes;
}

/* Replaces chunk (l, c) of a reference context by decode(encode(chunk)). */
static inline int ev_roundtrip_chunk(mz_ctx_t *ref, const mz_codec *codec, int l, size_t c)
{
    size_t n = ref->kv.chunk_bytes / sizeof(mz_f16);
    size_t cap = mz_codec_bound(codec, n), len = 0;
    uint8_t *buf = malloc(cap);
    int rc = -1;
    mz_f16 *chunk = (mz_f16 *)(void *)ref->kv.chunks[l][c];
    if (!buf) return -1;
    if (mz_codec_encode(codec, chunk, n, buf, cap, &len) == MZ_OK &&
        mz_codec_decode(codec, buf, len, chunk, n) == MZ_OK)
        rc = 0;
    free(buf);
    return rc;
}

/* Marks (in went[l * max_chunks + c]) the chunks of c whose state says they went
 * through the codec. */
static inline void ev_mark_encoded(mz_ctx_t *c, unsigned char *went)
{
    for (int l = 0; l < c->kv.n_layer; l++)
        for (size_t k = 0; k < c->kv.n_chunks; k++) {
            mz_unit_state s = mz_mem_kv_state(c->mem, l, k);
            if (s == MZ_UNIT_COMPRESSED || s == MZ_UNIT_STORED_COMPRESSED)
                went[(size_t)l * c->kv.max_chunks + k] = 1;
        }
}

/* Applies the codec round trip to the marked chunks of ref. */
static inline int ev_apply_marks(mz_ctx_t *ref, const mz_codec *codec, const unsigned char *went)
{
    for (int l = 0; l < ref->kv.n_layer; l++)
        for (size_t k = 0; k < ref->kv.n_chunks; k++)
            if (went[(size_t)l * ref->kv.max_chunks + k] &&
                ev_roundtrip_chunk(ref, codec, l, k))
                return -1;
    return 0;
}

/* The greedy choice: the first token of the highest logit of nv. */
static inline mz_token ev_argmax(const float *lg, int nv)
{
    mz_token best = 0;
    for (int i = 1; i < nv; i++)
        if (lg[i] > lg[best]) best = i;
    return best;
}

/* Greedy decoding of n tokens from c's logits (each prefilled); returns how
 * many were produced before an error. */
static inline size_t ev_greedy(mz_ctx_t *c, size_t n, mz_token *out)
{
    size_t k = 0;
    int nv = mz_model_n_vocab(c->model);
    for (; k < n; k++) {
        const float *lg = mz_ctx_logits(c);
        if (!lg) break;
        mz_token best = ev_argmax(lg, nv);
        out[k] = best;
        if (mz_prefill(c, &best, 1)) break;
    }
    return k;
}

/* Rss of this process in bytes, from /proc/self/smaps_rollup (0 if unreadable). */
static inline size_t ev_rss(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Rss: %zu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

static inline int ev_all_resident(const mz_ctx_t *c)
{
    mz_mem_stats st;
    mz_get_mem_stats(c, &st);
    return st.weights.n_resident == st.weights.n_units && st.kv.n_resident == st.kv.n_units &&
           st.remaining_pct == 100.0 && st.compstack_mapped_bytes == 0;
}

#endif
