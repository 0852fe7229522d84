/*
 * test_gen_model.c — gen-model writes what llama.cpp and our loader expect:
 * the metadata keys, the tokenizer copied verbatim, every tensor with its
 * name, type and GGUF shape; the same params give byte-identical files;
 * values look like weights (matrices ~N(0, 0.02), norms ~1); bad params and
 * a cancelling progress callback fail cleanly. Needs the real model for its
 * vocabulary (skips with 77 without it).
 */
#include "kernels/kernels.h"
#include "gguf/gguf.h"
#include "testutil.h"

#include <string.h>
#include <unistd.h>

static const char *g_vocab;

static mz_status gen(const char *preset, const char *type, uint64_t seed, const char *path)
{
    mz_gen_params p = mz_gen_params_default();
    p.preset = preset;
    p.weight_type = type;
    p.vocab_from = g_vocab;
    p.seed = seed;
    mz_status s = mz_gen_model(path, &p);
    CHECK_MSG(s == MZ_OK, "gen %s %s: %s", preset, type, mz_last_error());
    return s;
}

static void check_u32(const mz_gguf *g, const char *key, uint32_t want)
{
    uint32_t v = 0;
    mz_status s = mz_gguf_get_u32(g, key, &v);
    CHECK_MSG(s == MZ_OK && v == want, "%s = %u (want %u): %s", key, v, want,
              s ? mz_last_error() : "");
    const mz_gguf_kv *kv = mz_gguf_find(g, key);
    CHECK_MSG(kv && kv->type == MZ_GGUF_UINT32, "%s must be uint32 for llama.cpp", key);
}

static void check_f32(const mz_gguf *g, const char *key, float want)
{
    float v = 0;
    mz_status s = mz_gguf_get_f32(g, key, &v);
    CHECK_MSG(s == MZ_OK && v == want, "%s = %g (want %g)", key, (double)v, (double)want);
}

static void check_tensor(const mz_gguf *g, const char *name, int type, uint32_t n_dims,
                         uint64_t ne0, uint64_t ne1)
{
    const mz_gguf_tensor *t = mz_gguf_find_tensor(g, name);
    CHECK_MSG(t != NULL, "tensor %s missing", name);
    if (!t) return;
    CHECK_MSG(t->type == type && t->n_dims == n_dims && t->ne[0] == ne0 && t->ne[1] == ne1,
              "%s: type %d n_dims %u ne [%llu, %llu]; want type %d n_dims %u ne [%llu, %llu]",
              name, t->type, t->n_dims, (unsigned long long)t->ne[0],
              (unsigned long long)t->ne[1], type, n_dims, (unsigned long long)ne0,
              (unsigned long long)ne1);
}

/* Every tokenizer.* key of the vocab file, with the same type and value. */
static void check_tokenizer_copied(const mz_gguf *src, const mz_gguf *g)
{
    int n_tok_keys = 0;
    for (uint64_t i = 0; i < src->n_kv; i++) {
        const mz_gguf_kv *a = &src->kv[i];
        if (strncmp(a->key.ptr, "tokenizer.", 10) != 0) continue;
        n_tok_keys++;
        const mz_gguf_kv *b = mz_gguf_find(g, a->key.ptr);
        CHECK_MSG(b != NULL, "%s not copied", a->key.ptr);
        if (!b) continue;
        CHECK_MSG(a->type == b->type, "%s type", a->key.ptr);
        if (a->type == MZ_GGUF_STRING) {
            CHECK(a->v.str.len == b->v.str.len && memcmp(a->v.str.ptr, b->v.str.ptr, a->v.str.len) == 0);
        } else if (a->type == MZ_GGUF_ARRAY) {
            CHECK(a->arr_type == b->arr_type && a->arr_n == b->arr_n);
            if (a->arr_type == MZ_GGUF_STRING) {
                const mz_gguf_str *x = a->arr_data, *y = b->arr_data;
                int diff = 0;
                for (uint64_t j = 0; j < a->arr_n; j++)
                    diff += x[j].len != y[j].len || memcmp(x[j].ptr, y[j].ptr, x[j].len) != 0;
                CHECK_MSG(diff == 0, "%s: %d strings differ", a->key.ptr, diff);
            } else if (a->arr_type == b->arr_type && a->arr_n == b->arr_n && a->arr_n) {
                static const size_t sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
                CHECK(memcmp(a->arr_data, b->arr_data, (size_t)a->arr_n * sz[a->arr_type]) == 0);
            }
        } else {
            CHECK(memcmp(&a->v, &b->v, sizeof a->v) == 0);
        }
    }
    CHECK(n_tok_keys >= 10);
}

/* Reads a tensor's bytes from the file written at path. */
static uint8_t *read_tensor(const char *path, const mz_gguf *g, const char *name,
                            const mz_gguf_tensor **tp)
{
    const mz_gguf_tensor *t = mz_gguf_find_tensor(g, name);
    *tp = t;
    if (!t) return NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *buf = malloc((size_t)t->nbytes);
    fseek(f, (long)(g->data_offset + t->offset), SEEK_SET);
    if (fread(buf, 1, (size_t)t->nbytes, f) != t->nbytes) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

/* gen's file for preset and type at path, opened; NULL (a failed check)
 * when either fails. */
static mz_gguf *gen_open(const char *preset, const char *type, uint64_t seed, const char *path)
{
    if (gen(preset, type, seed, path) != MZ_OK) return NULL;
    mz_gguf *g = NULL;
    mz_status s = mz_gguf_open(path, &g);
    CHECK_MSG(s == MZ_OK, "%s", mz_last_error());
    return s == MZ_OK ? g : NULL;
}

/* An architecture key (after "<arch>.") and its uint32 value. */
typedef struct arch_u32 {
    const char *key;
    uint32_t want;
} arch_u32;

/* The header gen writes for arch: general.architecture, general.name and
 * general.file_type, the uint32 keys v[0, n) and the two float ones. */
static void check_header(const mz_gguf *g, const char *arch, const char *name, uint32_t ftype, const arch_u32 *v,
                         size_t n, float rms_eps, float freq_base)
{
    mz_gguf_str str;
    CHECK(mz_gguf_get_str(g, "general.architecture", &str) == MZ_OK && strcmp(str.ptr, arch) == 0);
    CHECK_MSG(mz_gguf_get_str(g, "general.name", &str) == MZ_OK && strcmp(str.ptr, name) == 0, "name, want %s", name);
    check_u32(g, "general.file_type", ftype);
    char key[128];
    for (size_t i = 0; i < n; i++) {
        snprintf(key, sizeof key, "%s.%s", arch, v[i].key);
        check_u32(g, key, v[i].want);
    }
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    check_f32(g, key, rms_eps);
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    check_f32(g, key, freq_base);
}

/* A tensor's name (after a prefix), type and GGUF shape. */
typedef struct tensor_want {
    const char *name;
    int type;
    uint32_t n_dims;
    uint64_t ne0, ne1;
} tensor_want;

static void check_tensors(const mz_gguf *g, const char *prefix, const tensor_want *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char name[128];
        snprintf(name, sizeof name, "%s%s", prefix, v[i].name);
        check_tensor(g, name, v[i].type, v[i].n_dims, v[i].ne0, v[i].ne1);
    }
}

static void test_tiny_llama(const mz_gguf *src, uint32_t n_vocab)
{
    const char *path = t_tmp_path("gen-tiny-llama-f32.gguf");
    mz_gguf *g = gen_open("tiny-llama", "F32", 7, path);
    if (!g) return;
    const arch_u32 keys[] = {{"context_length", 2048},         {"embedding_length", 64},
                             {"block_count", 2},               {"feed_forward_length", 128},
                             {"attention.head_count", 4},      {"attention.head_count_kv", 2},
                             {"rope.dimension_count", 16},     {"vocab_size", n_vocab}};
    check_header(g, "llama", "mzcache gen-model tiny-llama F32", 0, keys, MZ_ARRAY_LEN(keys), 1e-5f, 10000.0f);
    CHECK(mz_gguf_find(g, "llama.attention.key_length") == NULL); /* head_dim = embd / heads */
    check_tokenizer_copied(src, g);

    CHECK_EQ_INT(g->n_tensors, 3 + 9 * 2);
    const tensor_want top[] = {{"token_embd.weight", MZ_DT_F32, 2, 64, n_vocab},
                               {"output.weight", MZ_DT_F32, 2, 64, n_vocab},
                               {"output_norm.weight", MZ_DT_F32, 1, 64, 1}};
    check_tensors(g, "", top, MZ_ARRAY_LEN(top));
    static const tensor_want block[] = {
        {"attn_norm.weight", MZ_DT_F32, 1, 64, 1},    {"attn_q.weight", MZ_DT_F32, 2, 64, 64},
        {"attn_k.weight", MZ_DT_F32, 2, 64, 32},      {"attn_v.weight", MZ_DT_F32, 2, 64, 32},
        {"attn_output.weight", MZ_DT_F32, 2, 64, 64}, {"ffn_norm.weight", MZ_DT_F32, 1, 64, 1},
        {"ffn_gate.weight", MZ_DT_F32, 2, 64, 128},   {"ffn_up.weight", MZ_DT_F32, 2, 64, 128},
        {"ffn_down.weight", MZ_DT_F32, 2, 128, 64}};
    check_tensors(g, "blk.0.", block, MZ_ARRAY_LEN(block));
    check_tensors(g, "blk.1.", block, MZ_ARRAY_LEN(block));
    CHECK(mz_gguf_find_tensor(g, "blk.0.attn_q_norm.weight") == NULL);

    /* value statistics */
    const mz_gguf_tensor *t;
    float *w = (float *)read_tensor(path, g, "token_embd.weight", &t);
    CHECK(w != NULL);
    if (w) {
        double sum = 0, sq = 0, mx = 0;
        size_t n = (size_t)t->n_elements;
        for (size_t i = 0; i < n; i++) {
            sum += w[i];
            sq += (double)w[i] * w[i];
            mx = fmax(mx, fabs(w[i]));
        }
        double mean = sum / (double)n, sd = sqrt(sq / (double)n - mean * mean);
        CHECK_MSG(fabs(mean) < 1e-3 && fabs(sd - 0.02) < 1e-3 && mx < 0.08, "mean %g sd %g max %g",
                  mean, sd, mx);
        free(w);
    }
    float *nw = (float *)read_tensor(path, g, "blk.1.ffn_norm.weight", &t);
    CHECK(nw != NULL);
    if (nw) {
        int out = 0, ones = 0;
        for (size_t i = 0; i < 64; i++) {
            out += nw[i] < 0.98f || nw[i] > 1.02f;
            ones += nw[i] == 1.0f;
        }
        CHECK_EQ_INT(out, 0);
        CHECK(ones < 4); /* noisy, not constant */
        free(nw);
    }
    mz_gguf_free(g);
    remove(path);
}

static void test_tiny_qwen3(const char *type, int dt, uint32_t ftype, uint32_t n_vocab)
{
    char path[1200];
    snprintf(path, sizeof path, "%s", t_tmp_path("gen-tiny-qwen3.gguf"));
    mz_gguf *g = gen_open("tiny-qwen3", type, 1, path);
    if (!g) return;
    char name[64];
    snprintf(name, sizeof name, "mzcache gen-model tiny-qwen3 %s", type);
    const arch_u32 keys[] = {{"block_count", 2},           {"embedding_length", 64},
                             {"feed_forward_length", 160}, {"attention.head_count", 4},
                             {"attention.head_count_kv", 2}, {"attention.key_length", 32},
                             {"attention.value_length", 32}, {"rope.dimension_count", 32},
                             {"vocab_size", n_vocab}};
    check_header(g, "qwen3", name, ftype, keys, MZ_ARRAY_LEN(keys), 1e-6f, 1000000.0f);

    CHECK_EQ_INT(g->n_tensors, 2 + 11 * 2); /* tied: no output.weight */
    CHECK(mz_gguf_find_tensor(g, "output.weight") == NULL);
    const tensor_want tensors[] = {
        {"token_embd.weight", dt, 2, 64, n_vocab},           {"output_norm.weight", MZ_DT_F32, 1, 64, 1},
        {"blk.1.attn_q.weight", dt, 2, 64, 128},             {"blk.1.attn_k.weight", dt, 2, 64, 64},
        {"blk.1.attn_v.weight", dt, 2, 64, 64},              {"blk.1.attn_output.weight", dt, 2, 128, 64},
        {"blk.1.attn_q_norm.weight", MZ_DT_F32, 1, 32, 1},   {"blk.1.attn_k_norm.weight", MZ_DT_F32, 1, 32, 1},
        {"blk.0.ffn_gate.weight", dt, 2, 64, 160},           {"blk.0.ffn_down.weight", dt, 2, 160, 64}};
    check_tensors(g, "", tensors, MZ_ARRAY_LEN(tensors));

    /* Quantized weights dequantize to weight-like values. */
    const mz_gguf_tensor *t;
    uint8_t *q = read_tensor(path, g, "blk.0.ffn_down.weight", &t);
    const mz_type_kernels *k = mz_kernels_ref(dt);
    CHECK(q && k && k->to_float);
    if (q && k && k->to_float) {
        size_t n = (size_t)t->n_elements;
        float *x = malloc(n * sizeof *x);
        k->to_float(q, x, n);
        double sq = 0;
        for (size_t i = 0; i < n; i++) sq += (double)x[i] * x[i];
        double sd = sqrt(sq / (double)n);
        CHECK_MSG(sd > 0.015 && sd < 0.025, "%s: sd %g", type, sd);
        free(x);
    }
    free(q);
    mz_gguf_free(g);
    remove(path);
}

static int compare_files(const char *a, const char *b)
{
    size_t na, nb;
    char *x = t_read_file(a, &na), *y = t_read_file(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static void test_deterministic(void)
{
    char a[1200], b[1200], c[1200];
    snprintf(a, sizeof a, "%s", t_tmp_path("gen-det-a.gguf"));
    snprintf(b, sizeof b, "%s", t_tmp_path("gen-det-b.gguf"));
    snprintf(c, sizeof c, "%s", t_tmp_path("gen-det-c.gguf"));
    gen("tiny-qwen3", "Q4_0", 99, a);
    gen("tiny-qwen3", "Q4_0", 99, b);
    gen("tiny-qwen3", "Q4_0", 100, c);
    CHECK_MSG(compare_files(a, b), "same params, different bytes");
    CHECK_MSG(!compare_files(a, c), "different seeds, same bytes");
    remove(a);
    remove(b);
    remove(c);
}

/* The generator as its comment defines it, one draw after another through a
 * tensor's whole stream: splitmix64 seeded from (seed, FNV-1a of the name),
 * each matrix value a sum of four 16-bit uniforms scaled to sd 0.02. */
static uint64_t ref_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float ref_weight(uint64_t *s)
{
    uint64_t r = ref_splitmix64(s);
    uint32_t sum = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) + (uint32_t)((r >> 32) & 0xffff) +
                   (uint32_t)(r >> 48);
    return (float)(((double)sum - 131070.0) * (0.02 / 37837.7));
}

/* The rows of a matrix are made on several threads, each starting its rows
 * part-way into the tensor's stream: every value of an F32 file must still be
 * the one the sequential stream gives at its place. */
static void test_rows_follow_one_stream(void)
{
    char path[1200];
    snprintf(path, sizeof path, "%s", t_tmp_path("gen-stream.gguf"));
    const uint64_t seed = 5;
    mz_gguf *g = gen_open("tiny-llama", "F32", seed, path);
    if (!g) return;
    const char *names[] = {"token_embd.weight", "blk.0.ffn_down.weight", "blk.1.attn_q.weight"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        const mz_gguf_tensor *t;
        float *v = (float *)read_tensor(path, g, names[k], &t);
        CHECK_MSG(v && t && t->type == MZ_DT_F32, "%s: F32 tensor", names[k]);
        if (!v || !t) {
            free(v);
            continue;
        }
        uint64_t h = 0xcbf29ce484222325ull;
        for (const char *p = names[k]; *p; p++) h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
        uint64_t st = seed ^ h;
        st = ref_splitmix64(&st);
        uint64_t n = t->ne[0] * t->ne[1], bad = 0, first_bad = 0;
        for (uint64_t i = 0; i < n; i++) {
            float want = ref_weight(&st);
            if (memcmp(&v[i], &want, sizeof want) != 0 && bad++ == 0) first_bad = i;
        }
        CHECK_MSG(bad == 0, "%s: %llu of %llu values off the stream (first at row %llu)", names[k],
                  (unsigned long long)bad, (unsigned long long)n, (unsigned long long)(first_bad / t->ne[0]));
        free(v);
    }
    mz_gguf_free(g);
    remove(path);
}

typedef struct progress_log {
    size_t calls, last_done, total;
    size_t cancel_after;        /* 0: never */
} progress_log;

static bool on_progress(void *user, size_t done, size_t total)
{
    progress_log *l = user;
    l->calls++;
    CHECK(done > l->last_done && done <= total);
    l->last_done = done;
    l->total = total;
    return !(l->cancel_after && l->calls >= l->cancel_after);
}

static void test_params(void)
{
    const char *path = t_tmp_path("gen-params.gguf");
    mz_gen_params p = mz_gen_params_default();
    p.vocab_from = g_vocab;

    progress_log log = {0};
    p.progress = on_progress;
    p.progress_user = &log;
    p.preset = "tiny-llama";
    p.tied_output = true; /* ties the untied preset */
    p.n_layer = 1;
    CHECK_MSG(mz_gen_model(path, &p) == MZ_OK, "%s", mz_last_error());
    CHECK(log.calls > 0 && log.last_done == log.total);
    mz_gguf *g;
    if (mz_gguf_open(path, &g) == MZ_OK) {
        CHECK_EQ_INT(g->n_tensors, 2 + 9);
        CHECK(mz_gguf_find_tensor(g, "output.weight") == NULL);
        mz_gguf_free(g);
    }

    log = (progress_log){.cancel_after = 3};
    remove(path);
    CHECK(mz_gen_model(path, &p) == MZ_E_CANCELLED);
    CHECK(strstr(mz_last_error(), "cancelled") != NULL);
    CHECK(access(path, F_OK) != 0); /* no partial file left */
    p.progress = NULL;

    mz_gen_params q = p;
    q.vocab_from = NULL;
    CHECK(mz_gen_model(path, &q) == MZ_E_INVAL);
    CHECK(strstr(mz_last_error(), "vocab_from is required") != NULL);
    q = p;
    q.preset = "gpt-5";
    CHECK(mz_gen_model(path, &q) == MZ_E_INVAL);
    CHECK(strstr(mz_last_error(), "unknown preset 'gpt-5'") != NULL);
    q = p;
    q.weight_type = "IQ2_XXS";
    CHECK(mz_gen_model(path, &q) == MZ_E_INVAL);
    CHECK(strstr(mz_last_error(), "weight type 'IQ2_XXS' not available") != NULL);
    CHECK(strstr(mz_last_error(), "Q4_K_M") != NULL);
    /* A row that is not whole blocks falls back as llama.cpp's quantizer
     * does: 100-value rows of Q8_0 are F16. */
    q = p;
    q.weight_type = "Q8_0";
    q.n_ff = 100;
    CHECK(mz_gen_model(path, &q) == MZ_OK);
    {
        mz_gguf *fb = NULL;
        if (mz_gguf_open(path, &fb) == MZ_OK) {
            CHECK_EQ_INT(mz_gguf_find_tensor(fb, "blk.0.ffn_down.weight")->type, MZ_DT_F16);
            CHECK_EQ_INT(mz_gguf_find_tensor(fb, "blk.0.ffn_up.weight")->type, MZ_DT_Q8_0);
            mz_gguf_free(fb);
        } else {
            CHECK_MSG(0, "%s", mz_last_error());
        }
    }
    q = p;
    q.n_head_kv = 3;
    CHECK(mz_gen_model(path, &q) == MZ_E_INVAL);
    CHECK(strstr(mz_last_error(), "not a multiple of n_head_kv") != NULL);
    q = p;
    q.arch = "gpt2";
    CHECK(mz_gen_model(path, &q) == MZ_E_INVAL);
    q = p;
    q.preset = NULL;
    q.arch = "llama";
    CHECK(mz_gen_model(path, &q) == MZ_E_INVAL);
    CHECK(strstr(mz_last_error(), "every shape field must be set") != NULL);
    q = p;
    q.vocab_from = "/nonexistent.gguf";
    CHECK(mz_gen_model(path, &q) == MZ_E_IO);
    CHECK(strstr(mz_last_error(), "vocab_from: /nonexistent.gguf") != NULL);

    /* A custom shape, no preset: llama with head_dim != embd / heads gets key_length. */
    q = p;
    q.preset = NULL;
    q.arch = "llama";
    q.n_layer = 1, q.n_embd = 32, q.n_head = 2, q.n_head_kv = 1, q.head_dim = 32, q.n_ff = 64;
    q.n_ctx_train = 512;
    q.weight_type = "q8_0";
    CHECK_MSG(mz_gen_model(path, &q) == MZ_OK, "%s", mz_last_error());
    if (mz_gguf_open(path, &g) == MZ_OK) {
        check_u32(g, "llama.attention.key_length", 32);
        check_tensor(g, "blk.0.attn_q.weight", MZ_DT_Q8_0, 2, 32, 64);
        mz_gguf_str str;
        CHECK(mz_gguf_get_str(g, "general.name", &str) == MZ_OK &&
              strcmp(str.ptr, "mzcache gen-model custom Q8_0") == 0);
        mz_gguf_free(g);
    }
    remove(path);
}

int main(void)
{
    g_vocab = t_real_model_path();
    if (!g_vocab) return t_skip("test_gen_model", "models/SmolLM2-135M-Instruct.Q4_1.gguf absent");
    mz_kernels_init();
    mz_gguf *src;
    if (mz_gguf_open(g_vocab, &src) != MZ_OK) {
        fprintf(stderr, "%s\n", mz_last_error());
        return 1;
    }
    const void *tok;
    uint64_t n_vocab = 0;
    CHECK(mz_gguf_get_arr(src, "tokenizer.ggml.tokens", MZ_GGUF_STRING, &tok, &n_vocab) == MZ_OK);
    test_tiny_llama(src, (uint32_t)n_vocab);
    test_tiny_qwen3("Q8_0", MZ_DT_Q8_0, 7, (uint32_t)n_vocab);
    test_tiny_qwen3("Q4_0", MZ_DT_Q4_0, 2, (uint32_t)n_vocab);
    test_tiny_qwen3("F16", MZ_DT_F16, 1, (uint32_t)n_vocab);
    test_deterministic();
    test_rows_follow_one_stream();
    test_params();
    mz_gguf_free(src);
    return t_done("test_gen_model");
}
