/*
 * quant_mix.c — llama.cpp's quantization mixes and their per-tensor rules
 * (see quant_mix.h for what is and is not covered).
 */
#include "quant_mix.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* LLAMA_FTYPE_* values (llama.h) and the type each mix starts from. Q2_K_S
 * and the IQ1/IQ2/IQ3 mixes need an importance matrix and types we do not
 * have; they are not here. The last three rows are not llama.cpp names:
 * gen-model's pure K-quant types, recorded under the mostly-that-type
 * ("_S") file type. */
static const mz_qmix k_mixes[] = {
    {"F32", 0, MZ_DT_F32},       {"F16", 1, MZ_DT_F16},        {"BF16", 32, MZ_DT_BF16},
    {"Q8_0", 7, MZ_DT_Q8_0},     {"Q4_0", 2, MZ_DT_Q4_0},      {"Q4_1", 3, MZ_DT_Q4_1},
    {"Q5_0", 8, MZ_DT_Q5_0},     {"Q5_1", 9, MZ_DT_Q5_1},      {"IQ4_NL", 25, MZ_DT_IQ4_NL},
    {"IQ4_XS", 30, MZ_DT_IQ4_XS}, {"Q2_K", 10, MZ_DT_Q2_K},    {"Q3_K_S", 11, MZ_DT_Q3_K},
    {"Q3_K_M", 12, MZ_DT_Q3_K},  {"Q3_K_L", 13, MZ_DT_Q3_K},   {"Q4_K_S", 14, MZ_DT_Q4_K},
    {"Q4_K_M", 15, MZ_DT_Q4_K},  {"Q5_K_S", 16, MZ_DT_Q5_K},   {"Q5_K_M", 17, MZ_DT_Q5_K},
    {"Q6_K", 18, MZ_DT_Q6_K},
};
enum {
    FT_Q2_K = 10, FT_Q3_K_M = 12, FT_Q3_K_L = 13, FT_Q4_K_S = 14, FT_Q4_K_M = 15,
    FT_Q5_K_M = 17, FT_IQ4_NL = 25, FT_IQ4_XS = 30,
};

const mz_qmix *mz_qmix_at(int i)
{
    return i >= 0 && (size_t)i < MZ_ARRAY_LEN(k_mixes) ? &k_mixes[i] : NULL;
}

const mz_qmix *mz_qmix_find(const char *name)
{
    for (size_t i = 0; name && i < MZ_ARRAY_LEN(k_mixes); i++)
        if (!strcasecmp(k_mixes[i].name, name)) return &k_mixes[i];
    return NULL;
}

const mz_qmix *mz_qmix_for_ftype(uint32_t ftype)
{
    for (size_t i = 0; i < MZ_ARRAY_LEN(k_mixes); i++)
        if (k_mixes[i].ftype == ftype) return &k_mixes[i];
    return NULL;
}

const mz_qmix *mz_qmix_for_base(int type)
{
    for (size_t i = 0; i < MZ_ARRAY_LEN(k_mixes); i++)
        if (k_mixes[i].base == type) return &k_mixes[i];
    return NULL;
}

const char *mz_qmix_names(void)
{
    /* Built once from a constant table: racing first callers write the same bytes. */
    static char names[256];
    static _Atomic int built;
    if (!built) {
        size_t len = 0;
        for (size_t i = 0; i < MZ_ARRAY_LEN(k_mixes); i++) {
            int w = snprintf(names + len, sizeof names - len, "%s%s", len ? " " : "", k_mixes[i].name);
            if (w < 0 || (size_t)w >= sizeof names - len) break;
            len += (size_t)w;
        }
        built = 1;
    }
    return names;
}

/* ---- the rules -------------------------------------------------------------------- */

typedef enum role {
    ROLE_OTHER, ROLE_TOKEN_EMBD, ROLE_OUTPUT, ROLE_ATTN_V, ROLE_ATTN_OUTPUT, ROLE_FFN_DOWN,
} role;

static bool has(const char *s, const char *part) { return strstr(s, part) != NULL; }

/* llama.cpp's tensor categories, the ones whose rules reach our mixes. */
static role role_of(const char *name)
{
    if (!strcmp(name, "output.weight")) return ROLE_OUTPUT;
    if (!strcmp(name, "token_embd.weight")) return ROLE_TOKEN_EMBD;
    /* a fused attn_qkv is an attn_v for the rules, as in llama.cpp */
    if (has(name, "attn_qkv.weight") || has(name, "attn_kv_b.weight") || has(name, "attn_v.weight"))
        return ROLE_ATTN_V;
    if (has(name, "attn_k.weight") || has(name, "attn_q.weight")) return ROLE_OTHER;
    if (has(name, "attn_output.weight")) return ROLE_ATTN_OUTPUT;
    if (has(name, "ffn_up") || has(name, "ffn_gate")) return ROLE_OTHER;
    if (has(name, "ffn_down")) return ROLE_FFN_DOWN;
    return ROLE_OTHER;
}

/* The layer of "blk.N.…", or -1. llama.cpp counts attn_v and ffn_down
 * tensors in file order sorted by layer; for a dense model (one of each per
 * block) the count is the layer. */
static int layer_of(const char *name)
{
    if (strncmp(name, "blk.", 4)) return -1;
    int v = 0;
    const char *p = name + 4;
    if (*p < '0' || *p > '9') return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > 100000) return -1;
        v = v * 10 + (*p - '0');
    }
    return *p == '.' ? v : -1;
}

/* The layers that get more bits: the first and last eighth, and every third between. */
static bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static bool quantizable(const char *name, uint32_t n_dims, const uint64_t *ne)
{
    uint32_t dims = n_dims; /* trailing 1s do not count, as ggml_n_dims */
    while (dims > 1 && ne[dims - 1] == 1) dims--;
    size_t n = strlen(name);
    return dims >= 2 && n >= 6 && !strcmp(name + n - 6, "weight") && !has(name, "_norm.weight") &&
           !has(name, "ffn_gate_inp.weight");
}

static int mix_rules(const mz_qmix *mix, const mz_qmix_model *m, const char *name, uint64_t ne0)
{
    int t = mix->base;
    uint32_t ft = mix->ftype;
    role r = role_of(name);
    int layer = layer_of(name);
    if (r == ROLE_OUTPUT || (m->tied && r == ROLE_TOKEN_EMBD)) {
        if (ne0 % mz_dtype_block_len(t)) return MZ_DT_Q8_0;
        return t == MZ_DT_Q8_0 ? t : MZ_DT_Q6_K;
    }
    if (r == ROLE_ATTN_V) {
        int i = layer < 0 ? 0 : layer;
        if (ft == FT_Q2_K) return m->n_gqa >= 4 ? MZ_DT_Q4_K : MZ_DT_Q3_K;
        if (ft == FT_Q3_K_M) return i < 2 ? MZ_DT_Q5_K : MZ_DT_Q4_K;
        if (ft == FT_Q3_K_L) return MZ_DT_Q5_K;
        if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && m->n_gqa >= 4) return MZ_DT_Q5_K;
        if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && more_bits(i, m->n_attn_v)) return MZ_DT_Q6_K;
        if (ft == FT_Q4_K_S && i < 4) return MZ_DT_Q5_K;
        return t;
    }
    if (r == ROLE_FFN_DOWN) {
        int i = layer < 0 ? 0 : layer, n = m->n_layer;
        if (ft == FT_Q2_K) return MZ_DT_Q3_K;
        if (ft == FT_Q3_K_M) return i < n / 16 ? MZ_DT_Q5_K : MZ_DT_Q4_K;
        if (ft == FT_Q3_K_L) return MZ_DT_Q5_K;
        if (ft == FT_Q4_K_M) return more_bits(i, n) ? MZ_DT_Q6_K : t;
        if (i < n / 8 && (ft == FT_IQ4_NL || ft == FT_IQ4_XS)) return MZ_DT_Q5_K;
        if (ft == FT_Q5_K_M && more_bits(i, n)) return MZ_DT_Q6_K;
        if (ft == FT_Q4_K_S && i < n / 8) return MZ_DT_Q5_K;
        return t;
    }
    if (r == ROLE_ATTN_OUTPUT) {
        if (ft == FT_Q2_K) return MZ_DT_Q3_K;
        if (ft == FT_Q3_K_M) return MZ_DT_Q4_K;
        if (ft == FT_Q3_K_L) return MZ_DT_Q5_K;
    }
    return t;
}

/* A row of ne0 values that is not whole blocks of t: the type llama.cpp takes instead. */
static int fallback(int t, uint64_t ne0)
{
    if (ne0 % mz_dtype_block_len(t) == 0) return t;
    switch (t) {
    case MZ_DT_IQ4_XS: t = MZ_DT_IQ4_NL; break;
    case MZ_DT_Q2_K:
    case MZ_DT_Q3_K: t = MZ_DT_Q4_0; break;
    case MZ_DT_Q4_K: t = MZ_DT_Q5_0; break;
    case MZ_DT_Q5_K: t = MZ_DT_Q5_1; break;
    case MZ_DT_Q6_K: t = MZ_DT_Q8_0; break;
    default: break;
    }
    return ne0 % mz_dtype_block_len(t) ? MZ_DT_F16 : t;
}

static bool is_quantized(int t) { return mz_dtype_block_len(t) > 1; }

int mz_qmix_tensor_type(const mz_qmix *mix, bool pure, const mz_qmix_model *m, const char *name,
                        uint32_t n_dims, const uint64_t *ne, int cur_type)
{
    if (!quantizable(name, n_dims, ne)) return cur_type;
    /* Unquantized mixes (F32, F16, BF16) take their type whole. */
    if (!is_quantized(mix->base)) return mix->base;
    int t = pure ? mix->base : mix_rules(mix, m, name, ne[0]);
    return fallback(t, ne[0]);
}

/* ---- model facts and inference ----------------------------------------------------- */

mz_status mz_qmix_model_from_gguf(const mz_gguf *g, mz_qmix_model *out)
{
    memset(out, 0, sizeof *out);
    mz_gguf_str arch;
    mz_status s = mz_gguf_get_str(g, "general.architecture", &arch);
    if (s == MZ_E_INVAL) return mz_fail(MZ_E_FORMAT, "missing required key general.architecture");
    if (s) return s;
    char key[160];
    uint32_t n_layer, n_head, n_head_kv;
    const char *what[] = {"block_count", "attention.head_count", "attention.head_count_kv"};
    uint32_t *dst[] = {&n_layer, &n_head, &n_head_kv};
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof key, "%.*s.%s", (int)MZ_MIN(arch.len, 64), arch.ptr, what[i]);
        s = mz_gguf_get_u32(g, key, dst[i]);
        if (s == MZ_E_INVAL && i == 2) {
            n_head_kv = n_head; /* llama.cpp's default: no grouping */
            s = MZ_OK;
        }
        if (s == MZ_E_INVAL) return mz_fail(MZ_E_FORMAT, "missing required key %s", key);
        if (s) return s;
    }
    if (n_layer < 1 || n_layer > 100000 || n_head_kv == 0)
        return mz_fail(MZ_E_FORMAT, "block_count %u / head_count_kv %u out of range", n_layer, n_head_kv);
    out->n_layer = (int)n_layer;
    out->n_gqa = (int)(n_head / n_head_kv);
    out->tied = true;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const char *n = g->tensors[i].name.ptr;
        if (role_of(n) == ROLE_ATTN_V) out->n_attn_v++;
        if (role_of(n) == ROLE_OUTPUT) out->tied = false;
    }
    return MZ_OK;
}

const mz_qmix *mz_qmix_infer(const mz_gguf *g, int *n_diff)
{
    mz_qmix_model m;
    if (mz_qmix_model_from_gguf(g, &m)) return NULL;
    const mz_qmix *best = NULL;
    int best_diff = 0;
    for (size_t k = 0; k < MZ_ARRAY_LEN(k_mixes); k++) {
        int diff = 0;
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const mz_gguf_tensor *t = &g->tensors[i];
            if (mz_qmix_tensor_type(&k_mixes[k], false, &m, t->name.ptr, t->n_dims, t->ne, t->type) !=
                t->type)
                diff++;
        }
        if (!best || diff < best_diff) {
            best = &k_mixes[k];
            best_diff = diff;
        }
    }
    if (n_diff) *n_diff = best_diff;
    return best;
}

char *mz_qmix_describe(const mz_gguf *g, char *buf, size_t cap)
{
    uint64_t count[MZ_DT_COUNT] = {0};
    for (uint64_t i = 0; i < g->n_tensors; i++) count[g->tensors[i].type]++;
    size_t len = 0;
#define PUT(...)                                                                     \
    do {                                                                             \
        int w_ = snprintf(buf + len, cap - len, __VA_ARGS__);                        \
        if (w_ < 0 || (size_t)w_ >= cap - len) return buf;                           \
        len += (size_t)w_;                                                           \
    } while (0)
    buf[0] = '\0';
    uint32_t ft;
    const mz_qmix *mix = NULL;
    if (mz_gguf_get_u32(g, "general.file_type", &ft) == MZ_OK && (mix = mz_qmix_for_ftype(ft))) {
        PUT("%s", mix->name);
    } else if ((mix = mz_qmix_infer(g, NULL))) {
        PUT("%s-like", mix->name);
    } else {
        PUT("no known mix");
    }
    mz_clear_error(); /* an absent key is no error of the caller's */
    /* quantized types by count, then the plain ones (F32, F16, BF16) */
    bool first = true;
    for (int pass = 0; pass < 2; pass++) {
        bool done[MZ_DT_COUNT] = {false};
        for (;;) {
            int best = -1;
            for (int t = 0; t < MZ_DT_COUNT; t++) {
                if (!count[t] || done[t] || (mz_dtype_block_len(t) > 1) != (pass == 0)) continue;
                if (best < 0 || count[t] > count[best]) best = t;
            }
            if (best < 0) break;
            done[best] = true;
            PUT("%s %s ×%llu%s", first ? ":" : ",", mz_dtype_name(best),
                (unsigned long long)count[best], mz_dtype_supported(best) ? "" : " (does not load)");
            first = false;
        }
    }
#undef PUT
    return buf;
}
