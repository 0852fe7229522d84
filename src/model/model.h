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
#include "gguf.h"

typedef enum mz_arch { MZ_ARCH_LLAMA = 0, MZ_ARCH_QWEN3 = 1 } mz_arch;

typedef struct mz_tensor {
    int type;                  /* mz_dtype */
    uint64_t ne[2];            /* ne[0] = row length (columns), ne[1] = rows */
    size_t row_bytes;
    size_t nbytes;
    size_t offset;             /* within its unit buffer */
    uint64_t file_offset;      /* absolute offset in the GGUF file */
    const void *data;          /* points into the unit buffer while resident */
} mz_tensor;

typedef struct mz_block_weights {
    mz_tensor attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
    mz_tensor q_norm, k_norm;  /* qwen3 only (type F32, ne[0] = head_dim) */
    uint8_t *buf;              /* the unit's own mapping */
    size_t buf_bytes;
} mz_block_weights;

typedef struct mz_model_config {
    mz_arch arch;
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx_train, n_rot;
    float rope_base, norm_eps;
    bool rope_neox;
    bool tied_output;
} mz_model_config;

struct mz_model {
    char path[4096];
    mz_model_config cfg;
    mz_model_info info;
    mz_tokenizer *tok;
    mz_tensor tok_embd, output_norm, output;
    uint8_t *pinned_buf;       /* embeddings, output norm, output head */
    size_t pinned_bytes;
    mz_block_weights *blocks;  /* [n_layer] */
    struct mz_engine *engine;  /* its engine (one at most; src/engine/session.c sets it) */
};

const mz_tokenizer *mz_model_tokenizer(const mz_model_t *m);

#endif /* MZ_MODEL_H */
