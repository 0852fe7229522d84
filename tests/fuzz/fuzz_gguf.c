/*
 * fuzz_gguf.c — libFuzzer target for the GGUF reader: parses the input as a
 * whole file and frees the result (and with the any-type reader when the
 * strict one refuses only a type). Anything but a clean status is a bug:
 * the reader must refuse every malformed input without crashing, reading
 * out of bounds or allocating more than the input justifies.
 *
 * Seeds: tests/fuzz/corpus/gguf (built by scripts/make-gguf-seeds.c).
 */
#include "gguf/gguf.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mz_gguf *g = NULL;
    mz_status s = mz_gguf_parse(data, size, size, &g);
    /* A well-formed file of a type we do not compute with: what the
     * any-type reader (info, quantize) hands on must hold as well. */
    if (s == MZ_E_UNSUPPORTED) s = mz_gguf_parse_any_type(data, size, size, &g);
    if (s == MZ_OK) {
        /* Touch what a loader would: every name, and the lookups. */
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const mz_gguf_tensor *t = &g->tensors[i];
            MZ_ASSERT(t->name.ptr[t->name.len] == '\0');
            MZ_ASSERT(g->data_offset + t->offset + t->nbytes <= size);
            MZ_ASSERT(mz_gguf_find_tensor(g, t->name.ptr) != NULL);
        }
        for (uint64_t i = 0; i < g->n_kv; i++) {
            const mz_gguf_kv *kv = &g->kv[i];
            MZ_ASSERT(kv->key.ptr[kv->key.len] == '\0');
            if (kv->type == MZ_GGUF_ARRAY && kv->arr_type == MZ_GGUF_STRING) {
                const mz_gguf_str *a = kv->arr_data;
                for (uint64_t j = 0; j < kv->arr_n; j++) MZ_ASSERT(a[j].ptr[a[j].len] == '\0');
            }
        }
        uint32_t u;
        float f;
        mz_gguf_str str;
        (void)mz_gguf_get_u32(g, "general.alignment", &u);
        (void)mz_gguf_get_f32(g, "llama.rope.freq_base", &f);
        (void)mz_gguf_get_str(g, "general.architecture", &str);
        mz_gguf_free(g);
    } else {
        MZ_ASSERT(g == NULL);
        MZ_ASSERT(mz_last_error()[0] != '\0');
    }
    return 0;
}
