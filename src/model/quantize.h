/*
 * quantize.h — `mzcache quantize`: rewrites a GGUF file in another
 * quantization mix, deterministically (the same input and mix give the same
 * bytes on every machine and thread count).
 *
 * Each tensor gets the type mz_qmix_tensor_type picks (quant_mix.h); a
 * tensor that keeps its type is copied byte for byte, any other is
 * dequantized with the scalar reference (mz_kernels_ref(type)->to_float) and
 * quantized again with the reference quantizer of its new type, one row at
 * a time. Metadata is kept in order (tokenizer, template, everything), with
 * general.file_type and general.quantization_version set for the mix.
 */
#ifndef MZ_QUANTIZE_H
#define MZ_QUANTIZE_H

#include "../core/core.h"

#include <stdbool.h>

typedef struct mz_quantize_params {
    const char *mix;            /* a mix name (mz_qmix_names()) */
    bool pure;                  /* every quantizable tensor takes the mix's base type */
    int n_threads;              /* 0: every CPU; the bytes are the same for any count */
    /* Optional: called after each tensor with its name and chosen type. */
    void (*on_tensor)(void *user, const char *name, int from_type, int to_type);
    void *user;
} mz_quantize_params;

mz_status mz_quantize_file(const char *in_path, const char *out_path, const mz_quantize_params *p);

#endif /* MZ_QUANTIZE_H */
