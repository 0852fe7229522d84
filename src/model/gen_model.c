/*
 * gen_model.c — `gen-model`: writes a GGUF v3 model with deterministic random
 * weights in the shape of a real one (llama, qwen2, qwen3 or gemma3), with the tokenizer
 * copied verbatim from another GGUF file. Paper-sized models for timing and
 * tiny ones for tests, all loadable by mzcache and by llama.cpp.
 *
 * Determinism: every tensor draws from its own splitmix64 stream seeded by
 * (params seed, tensor name), so the same params give a byte-identical file
 * regardless of tensor order or threading. Matrices get roughly N(0, 0.02)
 * values (an Irwin–Hall sum of four uniforms), norms 1 + small noise.
 *
 * Memory: tensors are produced by the writer's fill callback while the file
 * is written, one at a time, so a 2.5 GB model needs one tensor's buffer
 * (the largest, usually token_embd) plus one row of floats.
 */
#include "../core/core.h"
#include "../kernels/kernels.h"
#include "../gguf/gguf.h"
#include "quant_mix.h"

#include <math.h>
#include <string.h>

typedef struct gen_preset {
    const char *name;
    const char *arch;
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_ctx_train;
    float rope_base;
    bool tied;
    int n_swa;                  /* gemma3: attention.sliding_window */
    /* Llama 3.1+ rope scaling ("llama3"): the original context length and
     * the factor of the low frequencies; 0: none. Written as llama.cpp's
     * converter does, a rope_freqs.weight tensor of per-pair divisors. */
    int rope_orig_ctx;
    float rope_factor;
    /* > 0: Q and K weights this many times larger, so that attention scores
     * are O(1) and the rope's angles decide what a query attends to (at
     * weights ~0.02 every score is ~0 and any rope gives the same answer). */
    float qk_scale;
} gen_preset;

static const gen_preset k_presets[] = {
    {"smollm2-135m", "llama", 30, 576, 9, 3, 64, 1536, 8192, 100000.0f, true, 0, 0, 0.0f, 0.0f},
    {"qwen3-0.6b", "qwen3", 28, 1024, 16, 8, 128, 3072, 40960, 1000000.0f, true, 0, 0, 0.0f, 0.0f},
    {"llama3.2-1b", "llama", 16, 2048, 32, 8, 64, 8192, 131072, 500000.0f, true, 0, 8192, 32.0f, 0.0f},
    /* EXAONE-4.0-1.2B's shape (hidden 2048, 30 layers, 32/8 heads of 64, ffn 4096,
     * rope 1e6, tied) in the qwen3 architecture (QK-norm); the real model puts its
     * RMSNorms after attention/MLP (same cost) and has a 102400-token vocabulary. */
    {"exaone4-1.2b", "qwen3", 30, 2048, 32, 8, 64, 4096, 65536, 1000000.0f, true, 0, 0, 0.0f, 0.0f},
    {"tiny-llama", "llama", 2, 64, 4, 2, 16, 128, 2048, 10000.0f, false, 0, 0, 0.0f, 0.0f},
    /* Llama 3.2's rope scaling on tiny-llama, with an original context of 16
     * so that it divides the angle of 7 of its 8 pairs in a short prompt, and
     * Q/K weights 10x larger so that the angles matter to the answer. */
    {"tiny-llama3", "llama", 2, 64, 4, 2, 16, 128, 2048, 10000.0f, false, 0, 16, 8.0f, 10.0f},
    /* head_dim != n_embd / n_head on purpose: catches code that assumes it. */
    {"tiny-qwen3", "qwen3", 2, 64, 4, 2, 32, 160, 2048, 1000000.0f, true, 0, 0, 0.0f, 0.0f},
    /* Qwen 2.5's q/k/v biases. */
    {"tiny-qwen2", "qwen2", 2, 64, 4, 2, 16, 128, 2048, 1000000.0f, false, 0, 0, 0.0f, 0.0f},
    /* Gemma 3 270M's shape (the real file's sliding window 512). */
    {"gemma3-270m", "gemma3", 18, 640, 4, 1, 256, 2048, 32768, 1000000.0f, true, 512, 0, 0.0f, 0.0f},
    /* 7 layers: local 0-4, global 5, local 6; a window of 8 is shorter than
     * the test prompts, so the masking is exercised. */
    {"tiny-gemma3", "gemma3", 7, 64, 4, 1, 32, 128, 2048, 1000000.0f, true, 8, 0, 0.0f, 0.0f},
};

/* Upper bounds that keep every size computation far from overflow. */
#define GEN_MAX_DIM (1 << 20)
#define GEN_MAX_LAYERS 1024

typedef struct gen_cfg {
    const char *preset_name;
    const char *arch;
    bool qk_norm;               /* qwen3, gemma3 */
    int rope_orig_ctx;          /* > 0: llama3 rope scaling (gen_preset) */
    float rope_factor;
    float qk_scale;             /* gen_preset */
    bool qkv_bias;              /* qwen2 */
    bool gemma3;                /* post norms, sliding window */
    int n_swa;
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_ctx_train, n_vocab;
    float rope_base, norm_eps;
    bool tied;
    const mz_qmix *mix;         /* the matrices' types: the mix's rules, or its base when pure */
    bool pure;
    mz_qmix_model qm;
    const char *wtype_name;     /* as asked: a type or a mix name */
    uint32_t file_type;         /* llama.cpp's LLAMA_FTYPE of the mix */
} gen_cfg;

/* Shared by every tensor's fill call. */
typedef struct gen_run {
    const struct gen_cfg *cfg;
    uint64_t seed;
    float *rows;                /* one row of floats per thread */
    size_t row_cap;             /* floats per thread's row */
    int n_threads;
    size_t done_bytes, total_bytes;
    mz_progress_fn progress;
    void *progress_user;
} gen_run;

typedef enum gen_kind { GEN_MATRIX, GEN_NORM, GEN_BIAS, GEN_ROPE_FREQS } gen_kind;

typedef struct gen_tensor {
    char name[64];
    gen_kind kind;
    int type;
    uint32_t n_dims;
    uint64_t ne[2];
    float scale;                /* matrices: values times this when > 0 */
    gen_run *run;
} gen_tensor;

mz_gen_params mz_gen_params_default(void)
{
    mz_gen_params p;
    memset(&p, 0, sizeof p);
    p.preset = "tiny-llama";
    p.weight_type = "F16";
    p.seed = 1;
    return p;
}

/* ---- random values -------------------------------------------------------------- */

#define SPLITMIX64_GAMMA 0x9e3779b97f4a7c15ull

/* The state only ever grows by SPLITMIX64_GAMMA, so the state after k draws
 * is the start plus k * SPLITMIX64_GAMMA (mod 2^64): any row of a tensor can
 * start its draws without drawing the rows before it. */
static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += SPLITMIX64_GAMMA);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t tensor_seed(uint64_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a of the name */
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    uint64_t s = seed ^ h;
    return splitmix64(&s);
}

/* Sum of four 16-bit uniforms from one draw: mean 131070, standard deviation
 * sqrt(4 * (65536^2 - 1) / 12) ~= 37837.7; scaled to a standard deviation of
 * 0.02. Bell-shaped and bounded (|x| < 0.07), which keeps quantization scales
 * sane. */
static float rand_weight(uint64_t *s)
{
    uint64_t r = splitmix64(s);
    uint32_t sum = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) +
                   (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);
    return (float)(((double)sum - 131070.0) * (0.02 / 37837.7));
}

/* 1 + uniform noise in [-0.02, 0.02). */
static float rand_norm(uint64_t *s)
{
    uint64_t r = splitmix64(s) >> 11;
    return (float)(1.0 + 0.02 * ((double)r / 9007199254740992.0 * 2.0 - 1.0));
}

/* Uniform in [-0.5, 0.5): biases large enough that dropping one shows. */
static float rand_bias(uint64_t *s)
{
    uint64_t r = splitmix64(s) >> 11;
    return (float)((double)r / 9007199254740992.0 - 0.5);
}

typedef struct gen_rows {
    const gen_tensor *t;
    uint8_t *dst;
    uint64_t seed;              /* the tensor's stream before its first draw */
} gen_rows;

/* Rows [r0, r1): one draw per element, row after row, so row r starts
 * r * ne[0] draws into the tensor's stream whichever thread makes it. */
static void gen_rows_fill(void *arg, size_t r0, size_t r1, int slice)
{
    const gen_rows *g = arg;
    const gen_tensor *t = g->t;
    const gen_run *run = t->run;
    float *row = run->rows + (size_t)slice * run->row_cap;
    size_t n0 = (size_t)t->ne[0];
    size_t row_bytes = mz_dtype_row_bytes(t->type, t->ne[0]);
    for (size_t r = r0; r < r1; r++) {
        uint64_t s = g->seed + (uint64_t)r * (uint64_t)n0 * SPLITMIX64_GAMMA;
        for (size_t i = 0; i < n0; i++)
            row[i] = t->kind == GEN_NORM ? rand_norm(&s) : t->kind == GEN_BIAS ? rand_bias(&s) : rand_weight(&s);
        if (t->scale > 0)
            for (size_t i = 0; i < n0; i++) row[i] *= t->scale;
        uint8_t *out = g->dst + r * row_bytes;
        if (t->type == MZ_DT_F32)
            memcpy(out, row, row_bytes);
        else
            mz_kernels_ref(t->type)->quantize(row, out, n0);
    }
}

/* Llama 3.1's rope scaling as llama.cpp's converter writes it: the divisor
 * of pair i's angle, 1 for wavelengths under orig_ctx / 4, the factor above
 * orig_ctx, a smooth blend between. */
static float llama3_rope_divisor(const gen_cfg *c, int i)
{
    const double low = 1.0, high = 4.0, orig = (double)c->rope_orig_ctx, factor = (double)c->rope_factor;
    const double freq = pow((double)c->rope_base, -2.0 * i / (double)c->head_dim);
    const double wavelen = 2.0 * 3.14159265358979323846 / freq;
    if (wavelen < orig / high) return 1.0f;
    if (wavelen > orig / low) return (float)factor;
    const double smooth = (orig / wavelen - low) / (high - low);
    return (float)(1.0 / ((1.0 - smooth) / factor + smooth));
}

static mz_status gen_fill(void *user, void *dst, size_t nbytes)
{
    gen_tensor *t = user;
    gen_run *run = t->run;
    if (t->kind == GEN_ROPE_FREQS) {
        MZ_ASSERT(t->type == MZ_DT_F32 && nbytes == (size_t)t->ne[0] * sizeof(float));
        float *f = dst;
        for (uint64_t i = 0; i < t->ne[0]; i++) f[i] = llama3_rope_divisor(run->cfg, (int)i);
    } else {
        MZ_ASSERT(mz_dtype_row_bytes(t->type, t->ne[0]) * (size_t)t->ne[1] == nbytes);
        gen_rows g = {.t = t, .dst = dst, .seed = tensor_seed(run->seed, t->name)};
        mz_run_row_slices((size_t)t->ne[1], run->n_threads, gen_rows_fill, &g);
    }
    run->done_bytes += nbytes;
    if (run->progress && !run->progress(run->progress_user, run->done_bytes, run->total_bytes))
        return mz_fail(MZ_E_CANCELLED, "cancelled by the progress callback");
    return MZ_OK;
}

/* ---- configuration -------------------------------------------------------------- */

static bool name_eq(const char *a, const char *b)
{
    for (; *a && *b; a++, b++) {
        char ca = (*a >= 'a' && *a <= 'z') ? (char)(*a - 32) : *a;
        char cb = (*b >= 'a' && *b <= 'z') ? (char)(*b - 32) : *b;
        if (ca != cb) return false;
    }
    return *a == *b;
}

/* A tensor type name (Q4_0, Q4_K, ...) makes every matrix that type (as
 * llama-quantize --pure, rows that do not fit falling back as llama.cpp
 * does); a mix name that is no type name (Q4_K_M, Q3_K_S, ...) follows
 * llama.cpp's per-tensor rules (quant_mix.c). */
static mz_status resolve_type(const char *wt, gen_cfg *c)
{
    for (int t = 0; t < MZ_DT_COUNT && !c->mix; t++) {
        const char *n = mz_dtype_name(t);
        if (n && name_eq(n, wt) && mz_qmix_for_base(t)) {
            c->mix = mz_qmix_for_base(t);
            c->pure = true;
            c->wtype_name = n;
        }
    }
    if (!c->mix && (c->mix = mz_qmix_find(wt))) c->wtype_name = c->mix->name;
    if (!c->mix)
        return mz_fail(MZ_E_INVAL,
                       "weight type '%s' not available (types: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 "
                       "IQ4_NL IQ4_XS Q2_K Q3_K Q4_K Q5_K Q6_K; mixes: %s)",
                       wt, mz_qmix_names());
    c->file_type = c->mix->ftype;
    c->qm = (mz_qmix_model){.n_layer = c->n_layer, .n_attn_v = c->n_layer,
                            .n_gqa = c->n_head / c->n_head_kv, .tied = c->tied};
    return MZ_OK;
}

static mz_status resolve_cfg(const mz_gen_params *p, gen_cfg *c)
{
    memset(c, 0, sizeof *c);
    const gen_preset *pr = NULL;
    if (p->preset) {
        for (size_t i = 0; i < MZ_ARRAY_LEN(k_presets); i++)
            if (strcmp(k_presets[i].name, p->preset) == 0) pr = &k_presets[i];
        if (!pr)
            return mz_fail(MZ_E_INVAL,
                           "unknown preset '%s' (known: smollm2-135m qwen3-0.6b llama3.2-1b exaone4-1.2b "
                           "gemma3-270m tiny-llama tiny-llama3 tiny-qwen3 tiny-qwen2 tiny-gemma3)",
                           p->preset);
    }
    c->preset_name = pr ? pr->name : "custom";
    c->arch = p->arch ? p->arch : pr ? pr->arch : NULL;
    if (!c->arch) return mz_fail(MZ_E_INVAL, "no preset and no arch: set one of them");
    if (strcmp(c->arch, "llama") != 0 && strcmp(c->arch, "qwen2") != 0 && strcmp(c->arch, "qwen3") != 0 &&
        strcmp(c->arch, "gemma3") != 0)
        return mz_fail(MZ_E_INVAL, "unknown arch '%s' (known: llama qwen2 qwen3 gemma3)", c->arch);
    c->gemma3 = strcmp(c->arch, "gemma3") == 0;
    c->qk_norm = c->gemma3 || strcmp(c->arch, "qwen3") == 0;
    c->qkv_bias = strcmp(c->arch, "qwen2") == 0;
    c->n_swa = p->n_swa > 0 ? p->n_swa : pr && pr->n_swa ? pr->n_swa : 512;

#define PICK(field) c->field = p->field > 0 ? p->field : pr ? pr->field : 0
    PICK(n_layer);
    PICK(n_embd);
    PICK(n_head);
    PICK(n_head_kv);
    PICK(head_dim);
    PICK(n_ff);
    PICK(n_ctx_train);
#undef PICK
    if (!c->head_dim && c->n_head > 0) c->head_dim = c->n_embd / c->n_head;
    const bool llama = strcmp(c->arch, "llama") == 0;
    c->rope_base = pr ? pr->rope_base : llama ? 10000.0f : 1000000.0f;
    c->norm_eps = llama ? 1e-5f : 1e-6f;
    /* A bool cannot say "unset", so the field can tie an untied preset but
     * not untie a tied one. */
    c->tied = (pr && pr->tied) || p->tied_output;
    c->rope_orig_ctx = pr ? pr->rope_orig_ctx : 0;
    c->rope_factor = pr ? pr->rope_factor : 0;
    c->qk_scale = pr ? pr->qk_scale : 0;

    struct { const char *name; int v; int max; } dims[] = {
        {"n_layer", c->n_layer, GEN_MAX_LAYERS}, {"n_embd", c->n_embd, GEN_MAX_DIM},
        {"n_head", c->n_head, GEN_MAX_DIM},      {"n_head_kv", c->n_head_kv, GEN_MAX_DIM},
        {"head_dim", c->head_dim, GEN_MAX_DIM},  {"n_ff", c->n_ff, GEN_MAX_DIM},
        {"n_ctx_train", c->n_ctx_train, 1 << 30},
    };
    for (size_t i = 0; i < MZ_ARRAY_LEN(dims); i++)
        if (dims[i].v <= 0 || dims[i].v > dims[i].max)
            return mz_fail(MZ_E_INVAL, "%s = %d is out of range (1..%d)%s", dims[i].name,
                           dims[i].v, dims[i].max, pr ? "" : "; without a preset every shape field must be set");
    if (c->n_head % c->n_head_kv)
        return mz_fail(MZ_E_INVAL, "n_head %d is not a multiple of n_head_kv %d", c->n_head,
                       c->n_head_kv);
    if (c->head_dim % 2) return mz_fail(MZ_E_INVAL, "head_dim %d must be even (rope)", c->head_dim);
    if ((int64_t)c->n_head * c->head_dim > GEN_MAX_DIM)
        return mz_fail(MZ_E_INVAL, "n_head * head_dim is too large");

    const char *wt = p->weight_type ? p->weight_type : "F16";
    return resolve_type(wt, c);
}

/* ---- metadata ------------------------------------------------------------------- */

/* Opens the vocab file and takes n_vocab from its token list. */
static mz_status open_vocab(const char *path, gen_cfg *c, mz_gguf **out)
{
    mz_gguf *v;
    mz_status s = mz_gguf_open(path, &v);
    if (s != MZ_OK) return mz_fail_prefix(s, "vocab_from");
    const void *tokens;
    uint64_t n;
    if ((s = mz_gguf_get_arr(v, "tokenizer.ggml.tokens", MZ_GGUF_STRING, &tokens, &n)) != MZ_OK) {
        mz_fail_prefix(s, "vocab_from %s", path);
        goto out_free_vocab;
    }
    if (n == 0 || n > (uint64_t)INT32_MAX) {
        s = mz_fail(MZ_E_FORMAT, "vocab_from %s: %llu tokens", path, (unsigned long long)n);
        goto out_free_vocab;
    }
    c->n_vocab = (int)n;
    *out = v;
    return MZ_OK;

out_free_vocab:
    mz_gguf_free(v);
    return s;
}

/* Every tokenizer.* key, verbatim and in the source's order. */
static mz_status copy_tokenizer(mz_gguf_writer *w, const mz_gguf *v)
{
    mz_status s = MZ_OK;
    for (uint64_t i = 0; i < v->n_kv && s == MZ_OK; i++)
        if (strncmp(v->kv[i].key.ptr, "tokenizer.", 10) == 0) s = mz_gguf_writer_add_kv(w, &v->kv[i]);
    return s;
}

static mz_status add_arch_kv(mz_gguf_writer *w, const gen_cfg *c, const char *suffix, uint32_t v)
{
    char key[96];
    snprintf(key, sizeof key, "%s.%s", c->arch, suffix);
    return mz_gguf_writer_add_u32(w, key, v);
}

static mz_status add_arch_f32(mz_gguf_writer *w, const gen_cfg *c, const char *suffix, float v)
{
    char key[96];
    snprintf(key, sizeof key, "%s.%s", c->arch, suffix);
    return mz_gguf_writer_add_f32(w, key, v);
}

static mz_status add_metadata(mz_gguf_writer *w, const gen_cfg *c)
{
    char name[128];
    snprintf(name, sizeof name, "mzcache gen-model %s %s", c->preset_name, c->wtype_name);
    mz_status s = mz_gguf_writer_add_str(w, "general.architecture", c->arch);
    if (!s) s = mz_gguf_writer_add_str(w, "general.name", name);
    if (!s) s = mz_gguf_writer_add_u32(w, "general.file_type", c->file_type);
    if (!s && mz_dtype_block_len(c->mix->base) > 1)
        s = mz_gguf_writer_add_u32(w, "general.quantization_version", 2);
    if (!s) s = add_arch_kv(w, c, "context_length", (uint32_t)c->n_ctx_train);
    if (!s) s = add_arch_kv(w, c, "embedding_length", (uint32_t)c->n_embd);
    if (!s) s = add_arch_kv(w, c, "block_count", (uint32_t)c->n_layer);
    if (!s) s = add_arch_kv(w, c, "feed_forward_length", (uint32_t)c->n_ff);
    if (!s) s = add_arch_kv(w, c, "attention.head_count", (uint32_t)c->n_head);
    if (!s) s = add_arch_kv(w, c, "attention.head_count_kv", (uint32_t)c->n_head_kv);
    if (!s) s = add_arch_f32(w, c, "rope.freq_base", c->rope_base);
    if (!s) s = add_arch_f32(w, c, "attention.layer_norm_rms_epsilon", c->norm_eps);
    if (!s) s = add_arch_kv(w, c, "rope.dimension_count", (uint32_t)c->head_dim);
    if (!s) s = add_arch_kv(w, c, "vocab_size", (uint32_t)c->n_vocab);
    /* llama.cpp derives head_dim as n_embd / n_head unless these say otherwise. */
    if (!s && (c->qk_norm || c->head_dim * c->n_head != c->n_embd)) {
        s = add_arch_kv(w, c, "attention.key_length", (uint32_t)c->head_dim);
        if (!s) s = add_arch_kv(w, c, "attention.value_length", (uint32_t)c->head_dim);
    }
    if (!s && c->gemma3) s = add_arch_kv(w, c, "attention.sliding_window", (uint32_t)c->n_swa);
    return s;
}

/* ---- tensors -------------------------------------------------------------------- */

/* Matrices take their type from the mix (wt = -1), norms are F32. */
static void set_tensor(gen_tensor *t, gen_run *run, gen_kind kind, int wt, uint64_t ne0,
                       uint64_t ne1, const char *fmt, int layer)
{
    snprintf(t->name, sizeof t->name, fmt, layer);
    t->kind = kind;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->n_dims = ne1 > 1 || kind == GEN_MATRIX ? 2 : 1;
    t->run = run;
    const gen_cfg *c = run->cfg;
    t->type = wt >= 0 ? wt
                      : mz_qmix_tensor_type(c->mix, c->pure, &c->qm, t->name, t->n_dims, t->ne, MZ_DT_F32);
}

/* Fills tab (room for 3 + 16 * n_layer) and returns the count. */
static size_t plan_tensors(const gen_cfg *c, gen_run *run, gen_tensor *tab)
{
    size_t n = 0;
    uint64_t E = (uint64_t)c->n_embd, V = (uint64_t)c->n_vocab, F = (uint64_t)c->n_ff;
    uint64_t Q = (uint64_t)c->n_head * (uint64_t)c->head_dim;
    uint64_t K = (uint64_t)c->n_head_kv * (uint64_t)c->head_dim;
    uint64_t D = (uint64_t)c->head_dim;
    int wt = -1;
    set_tensor(&tab[n++], run, GEN_MATRIX, wt, E, V, "token_embd.weight", 0);
    set_tensor(&tab[n++], run, GEN_NORM, MZ_DT_F32, E, 1, "output_norm.weight", 0);
    if (c->rope_orig_ctx > 0)
        set_tensor(&tab[n++], run, GEN_ROPE_FREQS, MZ_DT_F32, D / 2, 1, "rope_freqs.weight", 0);
    if (!c->tied) set_tensor(&tab[n++], run, GEN_MATRIX, wt, E, V, "output.weight", 0);
    for (int l = 0; l < c->n_layer; l++) {
        set_tensor(&tab[n++], run, GEN_NORM, MZ_DT_F32, E, 1, "blk.%d.attn_norm.weight", l);
        set_tensor(&tab[n++], run, GEN_MATRIX, wt, E, Q, "blk.%d.attn_q.weight", l);
        tab[n - 1].scale = c->qk_scale;
        set_tensor(&tab[n++], run, GEN_MATRIX, wt, E, K, "blk.%d.attn_k.weight", l);
        tab[n - 1].scale = c->qk_scale;
        set_tensor(&tab[n++], run, GEN_MATRIX, wt, E, K, "blk.%d.attn_v.weight", l);
        if (c->qkv_bias) {
            set_tensor(&tab[n++], run, GEN_BIAS, MZ_DT_F32, Q, 1, "blk.%d.attn_q.bias", l);
            set_tensor(&tab[n++], run, GEN_BIAS, MZ_DT_F32, K, 1, "blk.%d.attn_k.bias", l);
            set_tensor(&tab[n++], run, GEN_BIAS, MZ_DT_F32, K, 1, "blk.%d.attn_v.bias", l);
        }
        set_tensor(&tab[n++], run, GEN_MATRIX, wt, Q, E, "blk.%d.attn_output.weight", l);
        if (c->qk_norm) {
            set_tensor(&tab[n++], run, GEN_NORM, MZ_DT_F32, D, 1, "blk.%d.attn_q_norm.weight", l);
            set_tensor(&tab[n++], run, GEN_NORM, MZ_DT_F32, D, 1, "blk.%d.attn_k_norm.weight", l);
        }
        if (c->gemma3) {
            set_tensor(&tab[n++], run, GEN_NORM, MZ_DT_F32, E, 1, "blk.%d.post_attention_norm.weight", l);
            set_tensor(&tab[n++], run, GEN_NORM, MZ_DT_F32, E, 1, "blk.%d.post_ffw_norm.weight", l);
        }
        set_tensor(&tab[n++], run, GEN_NORM, MZ_DT_F32, E, 1, "blk.%d.ffn_norm.weight", l);
        set_tensor(&tab[n++], run, GEN_MATRIX, wt, E, F, "blk.%d.ffn_gate.weight", l);
        set_tensor(&tab[n++], run, GEN_MATRIX, wt, E, F, "blk.%d.ffn_up.weight", l);
        set_tensor(&tab[n++], run, GEN_MATRIX, wt, F, E, "blk.%d.ffn_down.weight", l);
    }
    return n;
}

mz_status mz_gen_model(const char *out_path, const mz_gen_params *p)
{
    mz_status s;
    gen_cfg c;
    gen_run run = {0};
    gen_tensor *tab = NULL;
    mz_gguf_writer *w = NULL;
    mz_gguf *vocab = NULL;

    if (!out_path || !p) return mz_fail(MZ_E_INVAL, "gen-model: out_path and params are required");
    if (!p->vocab_from)
        return mz_fail(MZ_E_INVAL, "gen-model: vocab_from is required (a GGUF file whose "
                                   "tokenizer is copied)");
    if ((s = resolve_cfg(p, &c)) != MZ_OK) return mz_fail_prefix(s, "gen-model");

    if ((s = open_vocab(p->vocab_from, &c, &vocab)) != MZ_OK) goto out_prefix;
    if (!(w = mz_gguf_writer_init())) {
        s = MZ_E_NOMEM;
        goto out_free_vocab;
    }
    if ((s = add_metadata(w, &c)) != MZ_OK) goto out_free_writer;
    if ((s = copy_tokenizer(w, vocab)) != MZ_OK) goto out_free_writer;
    /* The tokenizer is serialized into the writer: drop the source's copy
     * before the weights need memory. */
    mz_gguf_free(vocab);
    vocab = NULL;

    size_t max_tensors = 4 + 16 * (size_t)c.n_layer;
    if (!(tab = mz_calloc(max_tensors, sizeof *tab))) {
        s = MZ_E_NOMEM;
        goto out_free_writer;
    }
    run.row_cap = (size_t)MZ_MAX(MZ_MAX(c.n_embd, c.n_ff), c.n_head * c.head_dim);
    run.n_threads = MZ_MIN(mz_n_cpus(), MZ_ROW_SLICES_MAX);
    if (!(run.rows = mz_malloc((size_t)run.n_threads * run.row_cap * sizeof *run.rows))) {
        s = MZ_E_NOMEM;
        goto out_free_tab;
    }
    run.cfg = &c;
    run.seed = p->seed;
    run.progress = p->progress;
    run.progress_user = p->progress_user;
    size_t n = plan_tensors(&c, &run, tab);
    for (size_t i = 0; i < n && s == MZ_OK; i++) {
        gen_tensor *t = &tab[i];
        if (t->type != MZ_DT_F32 && !(mz_kernels_ref(t->type) && mz_kernels_ref(t->type)->quantize)) {
            s = mz_fail(MZ_E_UNSUPPORTED, "no quantizer for %s (tensor %s; types mzcache computes with: %s)",
                        mz_dtype_name(t->type), t->name, mz_dtype_supported_names());
            break;
        }
        run.total_bytes += mz_dtype_row_bytes(t->type, t->ne[0]) * (size_t)t->ne[1];
        s = mz_gguf_writer_add_tensor_fill(w, t->name, t->type, t->n_dims, t->ne, gen_fill, t);
    }
    if (s == MZ_OK) s = mz_gguf_writer_write(w, out_path);

    free(run.rows);
out_free_tab:
    free(tab);
out_free_writer:
    mz_gguf_writer_free(w);
out_free_vocab:
    mz_gguf_free(vocab);
out_prefix:
    if (s != MZ_OK) mz_fail_prefix(s, "gen-model");
    return s;
}
