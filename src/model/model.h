/*
 * model.h — a loaded model: architecture configuration from GGUF metadata,
 * the tokenizer, and the weights laid out as memory units.
 *
 * Weight units: every transformer block's tensors live together in one
 * page-aligned buffer of their own (mz_block_weights.buf), the unit the memory
 * manager evicts and restores. Token embeddings, the output norm and the
 * output head are pinned in a separate buffer and never move.
 */
#ifndef MZ_MODEL_H
#define MZ_MODEL_H

#include "../core/core.h"
#include "../tokenizer/tokenizer.h"
#include "../gguf/gguf.h"

typedef enum mz_arch { MZ_ARCH_LLAMA = 0, MZ_ARCH_QWEN3 = 1, MZ_ARCH_QWEN2 = 2, MZ_ARCH_GEMMA3 = 3 } mz_arch;

typedef struct mz_tensor {
    int type;                  /* mz_dtype */
    uint64_t ne[2];            /* ne[0] = row length (columns), ne[1] = rows */
    size_t row_bytes;
    size_t nbytes;
    size_t offset;             /* within its unit buffer */
    uint64_t file_offset;      /* absolute offset in the GGUF file */
    const void *data;          /* points into the unit buffer while resident */
    int layout;                /* MZ_LAYOUT_* of src/kernels/kernels.h: how data is laid out */
} mz_tensor;

typedef struct mz_block_weights {
    mz_tensor attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
    mz_tensor q_norm, k_norm;  /* qwen3, gemma3 (type F32, ne[0] = head_dim) */
    mz_tensor bq, bk, bv;      /* qwen2: q/k/v biases (F32) */
    mz_tensor post_attn_norm, post_ffn_norm; /* gemma3: norms of the attention and FFN outputs */
    uint8_t *buf;              /* the unit's own mapping */
    size_t buf_bytes;
} mz_block_weights;

typedef struct mz_model_config {
    mz_arch arch;
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx_train, n_rot;
    float rope_base, norm_eps;
    bool rope_neox;
    /* [n_rot / 2] divisors of each pair's angle (rope_freqs.weight: Llama
     * 3.1+'s rope scaling), owned by the model; NULL when the file has none. */
    const float *rope_freq_factors;
    bool tied_output;
    /* What the architectures differ in (read_config sets them per arch). */
    bool qk_norm;              /* per-head RMS norms of q and k (qwen3, gemma3) */
    bool qkv_bias;             /* biases on q, k, v (qwen2) */
    bool post_norms;           /* RMS norms of the attention and FFN outputs (gemma3) */
    bool ffn_gelu;             /* GELU(tanh)-gated FFN instead of SiLU (gemma3) */
    float embd_scale;          /* token embeddings times this (gemma3: sqrt(n_embd)), else 1 */
    float attn_scale;          /* score scale (1/sqrt(head_dim), gemma3 27B: 1/sqrt(n_embd/n_head)) */
    float logit_softcap;       /* logits = c * tanh(logits / c) when > 0 */
    /* Sliding-window layers (gemma3): layer l is local when n_swa > 0 and
     * l % swa_pattern < swa_pattern - 1; a local layer's query at position
     * p sees positions (p - n_swa, p] and ropes with rope_base_local. */
    int n_swa, swa_pattern;
    float rope_base_local;
} mz_model_config;

static inline bool mz_layer_is_local(const mz_model_config *c, int layer)
{
    return c->n_swa > 0 && layer % c->swa_pattern < c->swa_pattern - 1;
}

/* The layer's attention window in tokens, 0 for a global layer: what the
 * attention kernel is given (mz_attn_args.window) and what the memory
 * manager's dead-chunk rule reads (src/mem/policy.h), one value for both,
 * since the manager leaves out of a restore what the window hides. */
static inline size_t mz_layer_window(const mz_model_config *c, int layer)
{
    return mz_layer_is_local(c, layer) ? (size_t)c->n_swa : 0;
}

struct mz_model {
    char path[4096];
    mz_model_config cfg;
    mz_model_info info;
    mz_tokenizer *tok;
    mz_tensor tok_embd, output_norm, output;
    uint8_t *pinned_buf;       /* embeddings, output norm, output head */
    float *rope_freqs;         /* cfg.rope_freq_factors' storage, or NULL */
    size_t pinned_bytes;
    mz_block_weights *blocks;  /* [n_layer] */
    struct mz_engine *engine;  /* its engine (one at most; src/engine/session.c sets it) */
};

const mz_tokenizer *mz_model_tokenizer(const mz_model_t *m);

/* Weight layouts. At load, each matrix of a block (and an untied output head)
 * whose type and shape the active kernels prefer repacked gets layout
 * MZ_LAYOUT_X8 and its bytes are converted in place (same size, same
 * offsets). Bytes read again from the model file into a block buffer come
 * in the file's layout: mz_model_block_to_layout converts them to the
 * tensors' layouts (the memory manager's weight reload calls it before
 * checking the hash taken at drop time). Thread-safe for different layers;
 * fails only for lack of memory (8 rows of scratch). */
mz_status mz_model_block_to_layout(const mz_model_t *m, int layer, uint8_t *buf);
/* The tensors block b has (nbytes > 0: its arch's), in the unit buffer's
 * order, into out; returns their number. The one list of a block's tensors
 * (the weight reload of src/mem reads exactly these back). */
enum { MZ_BLOCK_TENSORS_MAX = 16 };
int mz_model_block_tensors(mz_block_weights *b, const mz_tensor *out[MZ_BLOCK_TENSORS_MAX]);
/* Sets every matrix of block `layer` to the file's layout (plain = true:
 * while its tensors point into a mapping of the file) or back to the layout
 * chosen at load (plain = false; the buffer must then be converted with
 * mz_model_block_to_layout). */
void mz_model_block_set_plain(mz_model_t *m, int layer, bool plain);

#endif /* MZ_MODEL_H */
