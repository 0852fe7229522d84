/*
 * quant_mix.h — llama.cpp's quantization mixes ("file types": Q4_K_M and
 * co.) and the per-tensor rules that turn a mix into a type for each tensor.
 *
 * A mix is what people download: "Q4_K_M" is not one type but Q4_K for most
 * matrices, Q6_K for the output head, for attn_v and ffn_down on the layers
 * that get more bits, and a 32-value type (Q5_0, Q8_0…) wherever a row is
 * not a whole number of 256-value super-blocks. The rules are those of
 * llama.cpp's llama_tensor_get_type (src/llama-quant.cpp of the llama.cpp
 * that llama-cpp-python 0.3.36 vendors, the peer of scripts/install-peer.sh),
 * restated for dense models: no MoE, no fused attn_qkv, no Falcon or 70B
 * special cases, no importance matrix. `mzcache quantize`, `gen-model` and
 * `mzcache info` (to name a file's mix) all use the one function below.
 */
#ifndef MZ_QUANT_MIX_H
#define MZ_QUANT_MIX_H

#include "../gguf/gguf.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct mz_qmix {
    const char *name;           /* llama.cpp's name: "Q4_K_M" */
    uint32_t ftype;             /* LLAMA_FTYPE_*: the value of general.file_type */
    int base;                   /* mz_dtype of the matrices the rules leave alone */
} mz_qmix;

/* The facts about a model that the rules read. */
typedef struct mz_qmix_model {
    int n_layer;                /* block_count */
    int n_attn_v;               /* attn_v tensors in the file (n_layer for dense models) */
    int n_gqa;                  /* head_count / head_count_kv */
    bool tied;                  /* no output.weight: token_embd is also the output head */
} mz_qmix_model;

/* A mix by name (case-insensitive), or NULL. */
const mz_qmix *mz_qmix_find(const char *name);
/* The mix of a general.file_type value, or NULL. */
const mz_qmix *mz_qmix_for_ftype(uint32_t ftype);
/* Every mix name, space-separated (help and errors); a static string. */
const char *mz_qmix_names(void);
/* The i-th mix (0-based), NULL past the end: for walking the table. */
const mz_qmix *mz_qmix_at(int i);
/* The first mix whose base is type (Q4_K: Q4_K_S), or NULL: the file type
 * of a file whose matrices are all of one type. */
const mz_qmix *mz_qmix_for_base(int type);

/*
 * The type tensor `name` (n_dims dimensions ne[], currently of cur_type) gets
 * in the mix: cur_type for what llama.cpp never quantizes (1-D tensors,
 * names not ending in "weight", norms); pure = every other tensor takes
 * mix->base (llama-quantize --pure); otherwise the mix's rules. Either way a
 * row that is not whole blocks of the chosen type falls back as llama.cpp
 * does (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0,
 * IQ4_XS -> IQ4_NL, then F16).
 */
int mz_qmix_tensor_type(const mz_qmix *mix, bool pure, const mz_qmix_model *m, const char *name,
                        uint32_t n_dims, const uint64_t *ne, int cur_type);

/* The model facts of a parsed file: <arch>.block_count and the head counts
 * (MZ_E_FORMAT naming the key when one is missing), attn_v and output.weight
 * from the tensor table. */
mz_status mz_qmix_model_from_gguf(const mz_gguf *g, mz_qmix_model *out);

/* The mix whose rules give the file's tensor types with the fewest
 * differences (*n_diff; ties: the first in table order). NULL when the file
 * lacks the metadata the rules read. */
const mz_qmix *mz_qmix_infer(const mz_gguf *g, int *n_diff);

/* One line naming a file's mix and counting its tensor types, e.g.
 *   "Q4_K_M: Q5_0 ×81, Q4_K ×27, Q8_0 ×10, Q6_K ×9, F32 ×109"
 * The mix is general.file_type's when the file has one we know, else the
 * closest (mz_qmix_infer) written "Q4_K_M-like"; a type mzcache does not
 * compute with is marked "(does not load)". Quantized types come first, by
 * count. Returns buf. */
char *mz_qmix_describe(const mz_gguf *g, char *buf, size_t cap);

#endif /* MZ_QUANT_MIX_H */
