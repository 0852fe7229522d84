/*
 * model.c — loads a GGUF model: reads the architecture configuration from
 * metadata, builds the tokenizer, and copies the weights into memory units
 * (on several threads: "weights: read and repacked on several threads").
 *
 * Unit layout (what the memory manager moves later):
 *   pinned buffer   token_embd, output_norm, output (when untied)
 *   block l buffer  all tensors of transformer block l, each at a 64-byte
 *                   aligned offset, in the order the forward pass reads them
 * Every buffer is its own anonymous mapping (mz_pages_alloc), so releasing a
 * unit returns its pages to the OS. Matrices the active kernels read faster
 * repacked (src/kernels/repack.c, x8 layout) are converted in place after the
 * read; mz_model_block_to_layout does the same for a block read again.
 */
#define _GNU_SOURCE
#include "model.h"

#include "../kernels/kernels.h"
#include "quant_mix.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MZ_TENSOR_ALIGN 64

/* Bounds on shapes we accept; generous for small on-device models, tight
 * enough that products of them cannot overflow. */
#define MZ_MAX_LAYERS 512
#define MZ_MAX_EMBD 65536
#define MZ_MAX_HEADS 1024
#define MZ_MAX_HEAD_DIM 1024
#define MZ_MAX_FF (1 << 20)

const mz_tokenizer *mz_model_tokenizer(const mz_model_t *m) { return m->tok; }

mz_model_params mz_model_params_default(void)
{
    mz_model_params p = {.n_threads = 0, .verbose = false, .chat_template = NULL};
    return p;
}

/* Reads key "<arch>.<suffix>" into *u32 when u32 is given, else into *f32;
 * MZ_E_INVAL when the key is absent and not required. */
static mz_status get_arch_key(const mz_gguf *g, const char *arch, const char *suffix,
                              uint32_t *u32, float *f32, bool required)
{
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    mz_status s = u32 ? mz_gguf_get_u32(g, key, u32) : mz_gguf_get_f32(g, key, f32);
    if (s == MZ_E_INVAL && required) return mz_fail(MZ_E_FORMAT, "missing required key %s", key);
    return s;
}

static mz_status get_u32_required(const mz_gguf *g, const char *arch, const char *suffix,
                                  uint32_t *out)
{
    return get_arch_key(g, arch, suffix, out, NULL, true);
}

static mz_status get_u32_optional(const mz_gguf *g, const char *arch, const char *suffix,
                                  uint32_t *out, uint32_t dflt)
{
    mz_status s = get_arch_key(g, arch, suffix, out, NULL, false);
    if (s == MZ_E_INVAL) *out = dflt;
    return s == MZ_E_INVAL ? MZ_OK : s;
}

static mz_status get_f32_optional(const mz_gguf *g, const char *arch, const char *suffix,
                                  float *out, float dflt)
{
    mz_status s = get_arch_key(g, arch, suffix, NULL, out, false);
    if (s == MZ_E_INVAL) *out = dflt;
    return s == MZ_E_INVAL ? MZ_OK : s;
}

static mz_status check_range(const char *what, uint32_t v, uint32_t lo, uint32_t hi)
{
    if (v < lo || v > hi)
        return mz_fail(MZ_E_FORMAT, "%s = %u is outside the supported range [%u, %u]", what, v,
                       lo, hi);
    return MZ_OK;
}

/* Gemma 3 (llama.cpp's llm_build_gemma3_iswa and its hparams): the
 * converter stores the norms' weights as 1 + w, so they are plain RMS norm
 * weights here. The file gives the window but not the layer pattern or the
 * local layers' rope base: llama.cpp's defaults for the architecture are 5
 * local : 1 global and 10000. */
static mz_status read_gemma3(const mz_gguf *g, const char *a, mz_model_config *cfg)
{
    uint32_t n_swa;
    mz_status s = get_u32_required(g, a, "attention.sliding_window", &n_swa);
    if (s) return s;
    if ((s = check_range("attention.sliding_window", n_swa, 1, INT32_MAX))) return s;
    cfg->post_norms = true;
    cfg->ffn_gelu = true;
    cfg->embd_scale = sqrtf((float)cfg->n_embd);
    /* gemma_pytorch's query_pre_attn_scalar: n_embd / n_head for the 27B
     * (62 layers), the head dimension for every other size. */
    if (cfg->n_layer == 62) cfg->attn_scale = 1.0f / sqrtf((float)(cfg->n_embd / cfg->n_head));
    cfg->n_swa = (int)n_swa;
    cfg->swa_pattern = 6;
    cfg->rope_base_local = 10000.0f;
    return MZ_OK;
}

/* Rope scaling that changes every angle by a rule of its own (linear, YaRN,
 * LongRoPE; Gemma 3 4B and larger) is refused by name rather than ignored.
 * Llama 3.1's scaling needs no key: its per-pair divisors come as the
 * rope_freqs.weight tensor (load_rope_freqs). */
static mz_status check_rope_scaling(const mz_gguf *g, const char *a)
{
    char key[160];
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    mz_gguf_str type;
    if (mz_gguf_get_str(g, key, &type) == MZ_OK && !(type.len == 4 && memcmp(type.ptr, "none", 4) == 0))
        return mz_fail(MZ_E_UNSUPPORTED, "%s = '%.*s': scaled rope is not supported (plain rope and "
                       "Llama 3's rope_freqs are)", key, (int)MZ_MIN(type.len, 32), type.ptr);
    float factor;
    mz_status s = get_f32_optional(g, a, "rope.scaling.factor", &factor, 1.0f);
    if (s) return s;
    if (factor != 1.0f)
        return mz_fail(MZ_E_UNSUPPORTED, "%s.rope.scaling.factor = %g: scaled rope (Gemma 3 4B and larger, "
                       "long-context variants) is not supported", a, (double)factor);
    return MZ_OK;
}

/* Final logit soft-capping (Gemma 2 has it; Gemma 3 files do not). */
static mz_status read_softcap(const mz_gguf *g, const char *a, mz_model_config *cfg)
{
    mz_status s = get_f32_optional(g, a, "final_logit_softcapping", &cfg->logit_softcap, 0.0f);
    if (s) return s;
    if (!(cfg->logit_softcap >= 0.0f && cfg->logit_softcap < 1e6f))
        return mz_fail(MZ_E_FORMAT, "%s.final_logit_softcapping = %g is not a cap", a,
                       (double)cfg->logit_softcap);
    return MZ_OK;
}

static mz_status read_config(const mz_gguf *g, mz_model_config *cfg, char *arch_name,
                             size_t arch_cap)
{
    static const struct { const char *name; mz_arch arch; } k_arches[] = {
        {"llama", MZ_ARCH_LLAMA}, {"qwen2", MZ_ARCH_QWEN2}, {"qwen3", MZ_ARCH_QWEN3}, {"gemma3", MZ_ARCH_GEMMA3}};
    mz_gguf_str arch;
    mz_status s = mz_gguf_get_str(g, "general.architecture", &arch);
    if (s == MZ_E_INVAL) return mz_fail(MZ_E_FORMAT, "missing required key general.architecture");
    if (s) return s;
    size_t ai = 0;
    while (ai < MZ_ARRAY_LEN(k_arches) &&
           (arch.len != strlen(k_arches[ai].name) || memcmp(arch.ptr, k_arches[ai].name, arch.len)))
        ai++;
    if (ai == MZ_ARRAY_LEN(k_arches))
        return mz_fail(MZ_E_UNSUPPORTED,
                       "architecture '%.*s' is not supported (supported: llama, qwen2, qwen3, gemma3)",
                       (int)MZ_MIN(arch.len, 64), arch.ptr);
    cfg->arch = k_arches[ai].arch;
    snprintf(arch_name, arch_cap, "%s", k_arches[ai].name);
    const char *a = arch_name;

    uint32_t n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_ctx, n_rot;
    if ((s = get_u32_required(g, a, "block_count", &n_layer)) ||
        (s = get_u32_required(g, a, "embedding_length", &n_embd)) ||
        (s = get_u32_required(g, a, "feed_forward_length", &n_ff)) ||
        (s = get_u32_required(g, a, "attention.head_count", &n_head)))
        return s;
    if ((s = check_range("block_count", n_layer, 1, MZ_MAX_LAYERS)) ||
        (s = check_range("embedding_length", n_embd, 1, MZ_MAX_EMBD)) ||
        (s = check_range("feed_forward_length", n_ff, 1, MZ_MAX_FF)) ||
        (s = check_range("attention.head_count", n_head, 1, MZ_MAX_HEADS)))
        return s;
    if ((s = get_u32_optional(g, a, "attention.head_count_kv", &n_head_kv, n_head)) ||
        (s = get_u32_optional(g, a, "attention.key_length", &head_dim, n_embd / n_head)) ||
        (s = get_u32_optional(g, a, "context_length", &n_ctx, 2048)))
        return s;
    if ((s = check_range("attention.head_count_kv", n_head_kv, 1, n_head)) ||
        (s = check_range("attention.key_length", head_dim, 2, MZ_MAX_HEAD_DIM)))
        return s;
    if (n_head % n_head_kv)
        return mz_fail(MZ_E_FORMAT, "head_count %u is not a multiple of head_count_kv %u", n_head,
                       n_head_kv);
    if (head_dim % 2) return mz_fail(MZ_E_FORMAT, "head dimension %u is odd", head_dim);
    uint32_t v_len;
    if ((s = get_u32_optional(g, a, "attention.value_length", &v_len, head_dim))) return s;
    if (v_len != head_dim)
        return mz_fail(MZ_E_UNSUPPORTED, "value_length %u differs from key_length %u", v_len,
                       head_dim);
    if ((s = get_u32_optional(g, a, "rope.dimension_count", &n_rot, head_dim))) return s;
    if ((s = check_range("rope.dimension_count", n_rot, 2, head_dim))) return s;
    if (n_ctx == 0) n_ctx = 2048;

    float eps;
    char key[160];
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", a);
    s = mz_gguf_get_f32(g, key, &eps);
    if (s == MZ_E_INVAL) return mz_fail(MZ_E_FORMAT, "missing required key %s", key);
    if (s) return s;
    if (!(eps > 0.0f && eps < 1.0f))
        return mz_fail(MZ_E_FORMAT, "%s = %g is not in (0, 1)", key, (double)eps);
    float base;
    if ((s = get_f32_optional(g, a, "rope.freq_base", &base, 10000.0f))) return s;
    if (!(base > 1.0f)) return mz_fail(MZ_E_FORMAT, "rope.freq_base = %g must be > 1", (double)base);

    cfg->n_layer = (int)n_layer;
    cfg->n_embd = (int)n_embd;
    cfg->n_ff = (int)n_ff;
    cfg->n_head = (int)n_head;
    cfg->n_head_kv = (int)n_head_kv;
    cfg->head_dim = (int)head_dim;
    cfg->n_rot = (int)(n_rot & ~1u);
    cfg->n_ctx_train = (int)MZ_MIN(n_ctx, (uint32_t)INT32_MAX);
    cfg->norm_eps = eps;
    cfg->rope_base = base;
    /* llama GGUFs have Q/K permuted by the converter for adjacent-pair rope;
     * qwen2/3 and gemma3 keep the NeoX half-split convention. */
    cfg->rope_neox = cfg->arch != MZ_ARCH_LLAMA;
    cfg->qk_norm = cfg->arch == MZ_ARCH_QWEN3 || cfg->arch == MZ_ARCH_GEMMA3;
    cfg->qkv_bias = cfg->arch == MZ_ARCH_QWEN2;
    cfg->embd_scale = 1.0f;
    cfg->attn_scale = 1.0f / sqrtf((float)head_dim);
    cfg->rope_base_local = base;
    if ((s = check_rope_scaling(g, a))) return s;
    if (cfg->arch == MZ_ARCH_GEMMA3 && (s = read_gemma3(g, a, cfg))) return s;
    return read_softcap(g, a, cfg);
}

/* Looks up a tensor and checks its type and shape; ne1 == 0 means 1-D. */
static mz_status bind_tensor(const mz_gguf *g, const char *name, uint64_t ne0, uint64_t ne1,
                             bool required, mz_tensor *out, bool *found)
{
    const mz_gguf_tensor *t = mz_gguf_find_tensor(g, name);
    if (found) *found = t != NULL;
    if (!t) {
        if (required) return mz_fail(MZ_E_FORMAT, "missing required tensor %s", name);
        return MZ_OK;
    }
    if (!mz_dtype_supported(t->type))
        return mz_fail(MZ_E_UNSUPPORTED,
                       "tensor %s has type %s which mzcache does not support; supported: %s",
                       name, mz_dtype_name(t->type) ? mz_dtype_name(t->type) : "unknown",
                       mz_dtype_supported_names());
    uint64_t want1 = ne1 ? ne1 : 1;
    bool ok = t->ne[0] == ne0 && t->ne[1] == want1 && t->ne[2] == 1 && t->ne[3] == 1 &&
              (ne1 ? t->n_dims <= 2 : t->n_dims <= 1);
    if (!ok)
        return mz_fail(MZ_E_FORMAT,
                       "tensor %s has shape [%llu, %llu, %llu, %llu], expected [%llu, %llu]",
                       name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                       (unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
                       (unsigned long long)ne0, (unsigned long long)want1);
    if (!ne1 && t->type != MZ_DT_F32)
        return mz_fail(MZ_E_UNSUPPORTED, "1-D tensor %s (a norm or bias) must be F32, found %s", name,
                       mz_dtype_name(t->type));
    out->type = t->type;
    out->ne[0] = t->ne[0];
    out->ne[1] = want1;
    out->row_bytes = mz_dtype_row_bytes(t->type, t->ne[0]);
    out->nbytes = (size_t)t->nbytes;
    out->file_offset = 0; /* set by the caller, which knows data_offset */
    out->data = NULL;
    return MZ_OK;
}

static void place(mz_tensor *t, size_t *cursor, uint64_t data_offset, const mz_gguf *g,
                  const char *name)
{
    if (!t->nbytes) return;
    const mz_gguf_tensor *gt = mz_gguf_find_tensor(g, name);
    *cursor = (*cursor + MZ_TENSOR_ALIGN - 1) & ~(size_t)(MZ_TENSOR_ALIGN - 1);
    t->offset = *cursor;
    t->file_offset = data_offset + gt->offset;
    *cursor += t->nbytes;
}

/* Reads every placed tensor of a unit into buf. */
static mz_status load_tensors(int fd, uint8_t *buf, mz_tensor *const *ts, const char *const *names,
                              size_t n)
{
    for (size_t i = 0; i < n; i++) {
        mz_tensor *t = ts[i];
        if (!t->nbytes) continue;
        mz_status s = mz_file_read_at(fd, buf + t->offset, t->nbytes, t->file_offset, names[i]);
        if (s) return s;
        t->data = buf + t->offset;
    }
    return MZ_OK;
}

enum { BLOCK_TENSORS = MZ_BLOCK_TENSORS_MAX };

/* ---- weight layouts ------------------------------------------------------------------- */

/* Converts t's bytes at buf + t->offset from the file's layout to t->layout
 * (choose = true: picks t->layout first). */
static mz_status to_layout(mz_tensor *t, uint8_t *buf, bool choose)
{
    if (choose) t->layout = mz_kernels_pick_layout(t->type, (size_t)t->ne[1], (size_t)t->ne[0]);
    if (t->layout == MZ_LAYOUT_PLAIN || !t->nbytes) return MZ_OK;
    void *scratch = malloc(8 * t->row_bytes);
    if (!scratch) return mz_fail(MZ_E_NOMEM, "no memory to repack weights");
    mz_repack_x8(t->type, buf + t->offset, (size_t)t->ne[1], (size_t)t->ne[0], scratch);
    free(scratch);
    return MZ_OK;
}

static int block_matrices(mz_block_weights *b, mz_tensor *out[7])
{
    mz_tensor *all[7] = {&b->wq, &b->wk, &b->wv, &b->wo, &b->w_gate, &b->w_up, &b->w_down};
    for (int i = 0; i < 7; i++) out[i] = all[i];
    return 7;
}

mz_status mz_model_block_to_layout(const mz_model_t *m, int layer, uint8_t *buf)
{
    mz_tensor *ts[7];
    int n = block_matrices(&m->blocks[layer], ts);
    for (int i = 0; i < n; i++) {
        mz_status s = to_layout(ts[i], buf, false);
        if (s) return s;
    }
    return MZ_OK;
}

void mz_model_block_set_plain(mz_model_t *m, int layer, bool plain)
{
    mz_tensor *ts[7];
    int n = block_matrices(&m->blocks[layer], ts);
    for (int i = 0; i < n; i++)
        ts[i]->layout = plain ? MZ_LAYOUT_PLAIN
                              : mz_kernels_pick_layout(ts[i]->type, (size_t)ts[i]->ne[1], (size_t)ts[i]->ne[0]);
}

/* A block's tensors in the order the forward pass reads them (the order of
 * the unit buffer); an arch that lacks one leaves it empty (nbytes 0). */
static void block_tensor_list(mz_block_weights *b, int layer, mz_tensor *ts[BLOCK_TENSORS],
                              char names[BLOCK_TENSORS][64])
{
    static const char *suffix[BLOCK_TENSORS] = {
        "attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q.bias",
        "attn_k.bias", "attn_v.bias", "attn_q_norm.weight", "attn_k_norm.weight",
        "attn_output.weight", "post_attention_norm.weight", "ffn_norm.weight", "ffn_gate.weight",
        "ffn_up.weight", "ffn_down.weight", "post_ffw_norm.weight"};
    mz_tensor *list[BLOCK_TENSORS] = {&b->attn_norm, &b->wq, &b->wk, &b->wv, &b->bq, &b->bk, &b->bv,
                                      &b->q_norm, &b->k_norm, &b->wo, &b->post_attn_norm,
                                      &b->ffn_norm, &b->w_gate, &b->w_up, &b->w_down, &b->post_ffn_norm};
    for (int i = 0; i < BLOCK_TENSORS; i++) {
        ts[i] = list[i];
        snprintf(names[i], 64, "blk.%d.%s", layer, suffix[i]);
    }
}

int mz_model_block_tensors(mz_block_weights *b, const mz_tensor *out[MZ_BLOCK_TENSORS_MAX])
{
    mz_tensor *ts[BLOCK_TENSORS];
    char names[BLOCK_TENSORS][64];
    block_tensor_list(b, 0, ts, names);
    int n = 0;
    for (int i = 0; i < BLOCK_TENSORS; i++)
        if (ts[i]->nbytes) out[n++] = ts[i];
    return n;
}

static mz_status bind_block(const mz_gguf *g, const mz_model_config *c, int l, mz_block_weights *b)
{
    mz_tensor *ts[BLOCK_TENSORS];
    char names[BLOCK_TENSORS][64];
    block_tensor_list(b, l, ts, names);
    uint64_t E = (uint64_t)c->n_embd, Q = (uint64_t)c->n_head * (uint64_t)c->head_dim;
    uint64_t KV = (uint64_t)c->n_head_kv * (uint64_t)c->head_dim, F = (uint64_t)c->n_ff;
    uint64_t HD = (uint64_t)c->head_dim;
    const struct { uint64_t ne0, ne1; bool used; } want[BLOCK_TENSORS] = {
        {E, 0, true},        {E, Q, true},          {E, KV, true},        {E, KV, true},
        {Q, 0, c->qkv_bias}, {KV, 0, c->qkv_bias},  {KV, 0, c->qkv_bias}, {HD, 0, c->qk_norm},
        {HD, 0, c->qk_norm}, {Q, E, true},          {E, 0, c->post_norms}, {E, 0, true},
        {E, F, true},        {E, F, true},          {F, E, true},         {E, 0, c->post_norms}};
    for (int i = 0; i < BLOCK_TENSORS; i++) {
        if (!want[i].used) continue;
        mz_status s = bind_tensor(g, names[i], want[i].ne0, want[i].ne1, true, ts[i], NULL);
        if (s) return s;
    }
    return MZ_OK;
}

/* What info and the server call the weights: the one type of every block
 * matrix when they share it; else the file's mix when general.file_type
 * names one (a Q4_K_M file is Q4_K, Q6_K and Q5_0/Q8_0 on rows that do not
 * fit 256-value blocks); else the type holding the most bytes. */
static const char *weights_name(const mz_model_t *m, const mz_gguf *g)
{
    size_t bytes[MZ_DT_COUNT] = {0};
    int n_types = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const mz_block_weights *b = &m->blocks[l];
        const mz_tensor *ts[] = {&b->wq, &b->wk, &b->wv, &b->wo, &b->w_gate, &b->w_up, &b->w_down};
        for (size_t i = 0; i < MZ_ARRAY_LEN(ts); i++) {
            n_types += !bytes[ts[i]->type];
            bytes[ts[i]->type] += ts[i]->nbytes;
        }
    }
    uint32_t ft;
    const mz_qmix *mix;
    if (n_types > 1 && mz_gguf_get_u32(g, "general.file_type", &ft) == MZ_OK &&
        (mix = mz_qmix_for_ftype(ft)))
        return mix->name;
    mz_clear_error();
    int best = 0;
    for (int t = 0; t < MZ_DT_COUNT; t++)
        if (bytes[t] > bytes[best]) best = t;
    return mz_dtype_name(best);
}

static void fill_info(mz_model_t *m, const mz_gguf *g, const char *arch)
{
    mz_model_info *in = &m->info;
    const mz_model_config *c = &m->cfg;
    memset(in, 0, sizeof *in);
    snprintf(in->arch, sizeof in->arch, "%s", arch);
    mz_gguf_str name;
    if (mz_gguf_get_str(g, "general.name", &name) == MZ_OK)
        snprintf(in->name, sizeof in->name, "%.*s", (int)MZ_MIN(name.len, 127), name.ptr);
    snprintf(in->weight_type, sizeof in->weight_type, "%s", weights_name(m, g));
    in->n_layer = c->n_layer;
    in->n_embd = c->n_embd;
    in->n_head = c->n_head;
    in->n_head_kv = c->n_head_kv;
    in->head_dim = c->head_dim;
    in->n_ff = c->n_ff;
    in->n_vocab = c->n_vocab;
    in->n_ctx_train = c->n_ctx_train;
    in->rope_freq_base = c->rope_base;
    in->norm_eps = c->norm_eps;
    in->tied_output = c->tied_output;
    size_t params = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) params += (size_t)g->tensors[i].n_elements;
    in->n_params = params;
    in->weight_bytes = m->pinned_bytes;
    for (int l = 0; l < c->n_layer; l++) {
        in->weight_bytes += m->blocks[l].buf_bytes;
        in->block_bytes = MZ_MAX(in->block_bytes, m->blocks[l].buf_bytes);
    }
    in->kv_bytes_per_token = (size_t)2 * (size_t)c->n_layer * (size_t)c->n_head_kv *
                             (size_t)c->head_dim * sizeof(mz_f16);
    in->bos = mz_tokenizer_bos(m->tok);
    in->eos = mz_tokenizer_eos(m->tok);
    in->eot = mz_tokenizer_eot(m->tok);
}

/* ---- weights: read and repacked on several threads ------------------------------------ *
 *
 * A cold load is disk reads (the file's pages), first touches of the
 * units' fresh anonymous pages, a copy out of the page cache and the
 * repacking, in that order per block; on one thread the disk idles while
 * the CPU works and the other way round. The blocks are independent, so
 * loader threads claim them in file order (the main thread builds the
 * tokenizer and reads the pinned unit meanwhile, then claims blocks too):
 * several reads are in flight and the CPU work of one block overlaps the
 * reads of the next. The result is the same bytes in the same places
 * whatever the thread count. Errors: the lowest failing layer's message
 * is reported (what the one-thread load would report), after every loader
 * has stopped. */

#define MZ_LOAD_THREADS_MAX 8

typedef struct {
    mz_model_t *m;
    int fd;
    pthread_mutex_t mu;
    int next;                  /* under mu: the next layer to claim */
    int err_layer;             /* under mu: lowest failed layer; INT_MAX none */
    mz_status err;
    char msg[512];
} load_job;

/* Weight units are asked for transparent huge pages (MZCACHE_WEIGHTS_THP=0:
 * not), so that a decode step streaming every block misses the TLB once per
 * 2 MiB instead of once per 4 KiB, and releasing or faulting a unit back
 * costs a page operation per 2 MiB. Where THP is "never" the request does
 * nothing; units stay whole (a unit is evicted and restored whole), so no
 * huge page is ever half released. */
static void weights_thp(void *p, size_t n)
{
    const char *e = getenv("MZCACHE_WEIGHTS_THP");
    if (!e || strcmp(e, "0")) (void)madvise(p, n, MADV_HUGEPAGE);
}

static mz_status load_block(mz_model_t *m, int fd, int l)
{
    mz_block_weights *b = &m->blocks[l];
    b->buf = mz_pages_alloc(b->buf_bytes);
    if (!b->buf) return mz_fail(MZ_E_NOMEM, "cannot map %zu bytes for block %d", b->buf_bytes, l);
    weights_thp(b->buf, b->buf_bytes);
    mz_tensor *ts[BLOCK_TENSORS];
    char names[BLOCK_TENSORS][64];
    const char *name_ptrs[BLOCK_TENSORS];
    block_tensor_list(b, l, ts, names);
    for (int i = 0; i < BLOCK_TENSORS; i++) name_ptrs[i] = names[i];
    mz_status s = load_tensors(fd, b->buf, ts, name_ptrs, BLOCK_TENSORS);
    if (s) return s;
    mz_model_block_set_plain(m, l, false);
    return mz_model_block_to_layout(m, l, b->buf);
}

/* Claims and loads blocks (reading through fd) until none is left or a
 * lower layer failed. */
static void load_blocks_fd(load_job *j, int fd)
{
    for (;;) {
        pthread_mutex_lock(&j->mu);
        int l = j->next < j->m->cfg.n_layer && j->next < j->err_layer ? j->next++ : -1;
        pthread_mutex_unlock(&j->mu);
        if (l < 0) return;
        mz_status s = load_block(j->m, fd, l);
        if (!s) continue;
        pthread_mutex_lock(&j->mu);
        if (l < j->err_layer) {
            j->err_layer = l;
            j->err = s;
            snprintf(j->msg, sizeof j->msg, "%s", mz_last_error());
        }
        pthread_mutex_unlock(&j->mu);
    }
}

static void *load_thread_main(void *arg)
{
    load_job *j = arg;
    /* its own open file: the kernel keeps one readahead state per open file */
    int fd = open(j->m->path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        load_blocks_fd(j, fd);
        close(fd);
    } else {
        load_blocks_fd(j, j->fd);
    }
    return NULL;
}

/* Threads that load blocks: n_threads (0: all CPUs), at most
 * MZ_LOAD_THREADS_MAX (the disk's queue is full well before) and one per
 * block. */
static int load_threads(const mz_model_params *p, int n_layer)
{
    int n = p && p->n_threads > 0 ? p->n_threads : mz_n_cpus();
    int cap = MZ_MIN(MZ_LOAD_THREADS_MAX, MZ_MAX(n_layer, 1));
    return n < 1 ? 1 : n > cap ? cap : n;
}

/* Binds and places every block's tensors (no I/O). */
static mz_status bind_blocks(mz_model_t *m, const mz_gguf *g)
{
    mz_model_config *c = &m->cfg;
    m->blocks = mz_calloc((size_t)c->n_layer, sizeof *m->blocks);
    if (!m->blocks) return MZ_E_NOMEM;
    for (int l = 0; l < c->n_layer; l++) {
        mz_block_weights *b = &m->blocks[l];
        mz_status s = bind_block(g, c, l, b);
        if (s) return s;
        mz_tensor *ts[BLOCK_TENSORS];
        char names[BLOCK_TENSORS][64];
        block_tensor_list(b, l, ts, names);
        size_t bc = 0;
        for (int i = 0; i < BLOCK_TENSORS; i++) place(ts[i], &bc, g->data_offset, g, names[i]);
        b->buf_bytes = bc;
    }
    return MZ_OK;
}

/* Llama 3.1+ files carry rope_freqs.weight, F32 [n_rot / 2]: pair i's
 * angle is divided by entry i (llama.cpp's freq_factors). Optional; read
 * whole into the model, which the forward pass and the KV fill ask for it
 * through cfg.rope_freq_factors. */
static mz_status load_rope_freqs(mz_model_t *m, const mz_gguf *g, int fd)
{
    static const char name[] = "rope_freqs.weight";
    const mz_gguf_tensor *t = mz_gguf_find_tensor(g, name);
    if (!t) return MZ_OK;
    const uint64_t half = (uint64_t)m->cfg.n_rot / 2;
    if (t->type != MZ_DT_F32 || t->n_dims != 1 || t->ne[0] != half)
        return mz_fail(MZ_E_FORMAT, "%s must be F32 with %llu values (rope dimensions / 2); it is %s with %llu",
                       name, (unsigned long long)half, mz_dtype_name(t->type) ? mz_dtype_name(t->type) : "?",
                       (unsigned long long)t->n_elements);
    float *f = mz_malloc((size_t)half * sizeof *f);
    if (!f) return MZ_E_NOMEM;
    mz_status s = mz_file_read_at(fd, f, (size_t)t->nbytes, g->data_offset + t->offset, name);
    for (uint64_t i = 0; i < half && !s; i++)
        if (!(isfinite(f[i]) && f[i] > 0.0f))
            s = mz_fail(MZ_E_FORMAT, "%s[%llu] = %g is not a positive divisor", name, (unsigned long long)i,
                        (double)f[i]);
    if (s) {
        free(f);
        return s;
    }
    m->rope_freqs = f;
    m->cfg.rope_freq_factors = f;
    return MZ_OK;
}

/* The pinned unit (needs the vocabulary size: after the tokenizer). */
static mz_status load_pinned(mz_model_t *m, const mz_gguf *g, int fd)
{
    mz_model_config *c = &m->cfg;
    mz_status s;
    uint64_t E = (uint64_t)c->n_embd;
    if ((s = bind_tensor(g, "token_embd.weight", E, (uint64_t)c->n_vocab, true, &m->tok_embd, NULL)))
        return s;
    if ((s = bind_tensor(g, "output_norm.weight", E, 0, true, &m->output_norm, NULL))) return s;
    bool has_output = false;
    if ((s = bind_tensor(g, "output.weight", E, (uint64_t)c->n_vocab, false, &m->output,
                         &has_output)))
        return s;
    c->tied_output = !has_output;
    size_t cursor = 0;
    place(&m->tok_embd, &cursor, g->data_offset, g, "token_embd.weight");
    place(&m->output_norm, &cursor, g->data_offset, g, "output_norm.weight");
    if (has_output) place(&m->output, &cursor, g->data_offset, g, "output.weight");
    m->pinned_bytes = cursor;
    m->pinned_buf = mz_pages_alloc(m->pinned_bytes);
    if (!m->pinned_buf)
        return mz_fail(MZ_E_NOMEM, "cannot map %zu bytes for embeddings", m->pinned_bytes);
    weights_thp(m->pinned_buf, m->pinned_bytes);
    mz_tensor *ts[] = {&m->tok_embd, &m->output_norm, &m->output};
    const char *names[] = {"token_embd.weight", "output_norm.weight", "output.weight"};
    if ((s = load_tensors(fd, m->pinned_buf, ts, names, MZ_ARRAY_LEN(ts)))) return s;
    /* A tied embedding takes the output product's layout too: the lookup
     * reads one row back out of it (mz_x8_row_to_plain), so the product over
     * the whole vocabulary, the largest of a decode step, runs repacked. */
    mz_tensor *product = has_output ? &m->output : &m->tok_embd;
    if ((s = to_layout(product, m->pinned_buf, true))) return s;
    if (!has_output) m->output = m->tok_embd;
    return MZ_OK;
}

/* Tokenizer and weights: the blocks' loaders start first, the tokenizer
 * and the pinned unit are built on this thread while they read. */
static mz_status load_tokenizer_and_weights(mz_model_t *m, const mz_gguf *g,
                                            const mz_model_params *p)
{
    mz_status s = bind_blocks(m, g);
    if (s) return s;
    load_job j = {.m = m, .err_layer = INT_MAX};
    j.fd = open(m->path, O_RDONLY | O_CLOEXEC);
    if (j.fd < 0) return mz_fail(MZ_E_IO, "cannot open: %s", strerror(errno));
    pthread_mutex_init(&j.mu, NULL);
    pthread_t th[MZ_LOAD_THREADS_MAX];
    int n_th = 0, want = load_threads(p, m->cfg.n_layer) - 1;
    while (n_th < want && pthread_create(&th[n_th], NULL, load_thread_main, &j) == 0) n_th++;

    if (!(s = mz_tokenizer_init(g, &m->tok)) &&
        !(s = p && p->chat_template ? mz_tokenizer_set_chat(m->tok, p->chat_template) : MZ_OK)) {
        m->cfg.n_vocab = mz_tokenizer_n_vocab(m->tok);
        s = load_pinned(m, g, j.fd);
        if (!s) s = load_rope_freqs(m, g, j.fd);
    }
    if (s) { /* stop the loaders: nothing further is claimed */
        pthread_mutex_lock(&j.mu);
        j.next = m->cfg.n_layer;
        pthread_mutex_unlock(&j.mu);
    } else {
        load_blocks_fd(&j, j.fd);
    }
    for (int i = 0; i < n_th; i++) pthread_join(th[i], NULL);
    if (!s && j.err) s = mz_fail(j.err, "%s", j.msg);
    pthread_mutex_destroy(&j.mu);
    close(j.fd);
    return s;
}

mz_status mz_model_load(const char *path, const mz_model_params *p, mz_model_t **out)
{
    mz_status s;
    mz_gguf *g = NULL;
    mz_model_t *m = NULL;
    char arch[32];
    *out = NULL;
    mz_clear_error();
    mz_kernels_init();
    if (!path) return mz_fail(MZ_E_INVAL, "no model path given");
    if (strlen(path) >= sizeof m->path) return mz_fail(MZ_E_INVAL, "model path too long");

    if ((s = mz_gguf_open(path, &g))) return s;
    m = mz_calloc(1, sizeof *m);
    if (!m) {
        s = MZ_E_NOMEM;
        goto out_free_gguf;
    }
    snprintf(m->path, sizeof m->path, "%s", path);
    if ((s = read_config(g, &m->cfg, arch, sizeof arch))) goto out_fail;
    if ((s = load_tokenizer_and_weights(m, g, p))) goto out_fail;
    fill_info(m, g, arch);
    if (p && p->verbose)
        fprintf(stderr, "mzcache: loaded %s: %s, %d layers, %.1f MiB of weights\n", path,
                m->info.arch, m->cfg.n_layer, (double)m->info.weight_bytes / (1 << 20));
    *out = m;
    m = NULL;
    goto out_free_gguf;

out_fail:
    mz_fail_prefix(s, "%s", path);
    mz_model_free(m);
out_free_gguf:
    mz_gguf_free(g);
    return s;
}

void mz_model_free(mz_model_t *m)
{
    if (!m) return;
    if (m->blocks) {
        for (int l = 0; l < m->cfg.n_layer; l++) mz_pages_free(m->blocks[l].buf, m->blocks[l].buf_bytes);
        free(m->blocks);
    }
    mz_pages_free(m->pinned_buf, m->pinned_bytes);
    free(m->rope_freqs);
    mz_tokenizer_free(m->tok);
    free(m);
}

void mz_model_get_info(const mz_model_t *m, mz_model_info *out) { *out = m->info; }
