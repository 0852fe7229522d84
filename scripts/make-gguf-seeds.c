/*
 * make-gguf-seeds.c — writes the seed corpus of the GGUF fuzzer
 * (tests/fuzz/corpus/gguf/): small valid files built with our writer, and
 * crafted bad ones (each a valid file with one malformation). Every seed
 * stays under 64 KiB.
 *
 * Build and run from the repository root:
 *   cc -std=c11 -Isrc -Iinclude src/core/core.c src/core/dtype.c src/gguf/gguf.c \
 *      src/gguf/gguf_write.c scripts/make-gguf-seeds.c -o /tmp/make-gguf-seeds && /tmp/make-gguf-seeds
 */
#include "gguf/gguf.h"

#include <stdio.h>
#include <string.h>

#define OUT_DIR "tests/fuzz/corpus/gguf/"

static int g_failed;

static void save(const char *name, const uint8_t *buf, size_t len)
{
    char path[256];
    snprintf(path, sizeof path, OUT_DIR "%s", name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len) {
        fprintf(stderr, "cannot write %s\n", path);
        g_failed = 1;
    }
    if (f) fclose(f);
}

static uint8_t *finish(mz_gguf_writer *w, size_t *len)
{
    uint8_t *buf = NULL;
    if (mz_gguf_writer_write_mem(w, &buf, len) != MZ_OK) {
        fprintf(stderr, "writer: %s\n", mz_last_error());
        g_failed = 1;
    }
    mz_gguf_writer_free(w);
    return buf;
}

static void add_tensor_zero(mz_gguf_writer *w, const char *name, int type, uint32_t nd,
                            uint64_t ne0, uint64_t ne1)
{
    static uint8_t zeros[65536];
    uint64_t ne[2] = {ne0, ne1};
    size_t nb = mz_dtype_row_bytes(type, ne0) * (size_t)(nd > 1 ? ne1 : 1);
    if (mz_gguf_writer_add_tensor(w, name, type, nd, ne, zeros, nb) != MZ_OK) {
        fprintf(stderr, "%s: %s\n", name, mz_last_error());
        g_failed = 1;
    }
}

/* Two kvs, two F32 tensors: the base the bad seeds corrupt. */
static uint8_t *small_file(size_t *len)
{
    mz_gguf_writer *w = mz_gguf_writer_init();
    mz_gguf_writer_add_str(w, "general.architecture", "llama");
    mz_gguf_writer_add_u32(w, "llama.block_count", 1);
    add_tensor_zero(w, "w.a", MZ_DT_F32, 2, 8, 2);
    add_tensor_zero(w, "w.b", MZ_DT_F32, 1, 8, 1);
    return finish(w, len);
}

/* Every value type and array type, tensors of every supported type. */
static uint8_t *all_types_file(size_t *len)
{
    mz_gguf_writer *w = mz_gguf_writer_init();
    mz_gguf_writer_set_alignment(w, 64);
    static const mz_gguf_type scal[] = {MZ_GGUF_UINT8,  MZ_GGUF_INT8,  MZ_GGUF_UINT16,
                                        MZ_GGUF_INT16,  MZ_GGUF_UINT32, MZ_GGUF_INT32,
                                        MZ_GGUF_FLOAT32, MZ_GGUF_BOOL, MZ_GGUF_UINT64,
                                        MZ_GGUF_INT64,  MZ_GGUF_FLOAT64};
    static const uint8_t raw[64] = {1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0};
    static const mz_gguf_str strs[] = {{"a", 1}, {"bc", 2}, {"", 0}};
    for (size_t i = 0; i < sizeof scal / sizeof scal[0]; i++) {
        char key[32];
        mz_gguf_kv kv;
        memset(&kv, 0, sizeof kv);
        snprintf(key, sizeof key, "s.%s", mz_gguf_type_name(scal[i]));
        kv.key.ptr = key;
        kv.key.len = strlen(key);
        kv.type = scal[i];
        kv.v.u64 = 1;
        mz_gguf_writer_add_kv(w, &kv);
        snprintf(key, sizeof key, "a.%s", mz_gguf_type_name(scal[i]));
        kv.key.len = strlen(key);
        kv.type = MZ_GGUF_ARRAY;
        kv.arr_type = scal[i];
        kv.arr_n = 2;
        kv.arr_data = raw;
        mz_gguf_writer_add_kv(w, &kv);
    }
    mz_gguf_kv kv;
    memset(&kv, 0, sizeof kv);
    kv.key.ptr = "a.string";
    kv.key.len = 8;
    kv.type = MZ_GGUF_ARRAY;
    kv.arr_type = MZ_GGUF_STRING;
    kv.arr_n = 3;
    kv.arr_data = strs;
    mz_gguf_writer_add_kv(w, &kv);
    mz_gguf_writer_add_str(w, "s.string", "hello");
    add_tensor_zero(w, "f32", MZ_DT_F32, 1, 4, 1);
    add_tensor_zero(w, "f16", MZ_DT_F16, 2, 4, 2);
    add_tensor_zero(w, "bf16", MZ_DT_BF16, 1, 6, 1);
    add_tensor_zero(w, "q8_0", MZ_DT_Q8_0, 2, 32, 2);
    add_tensor_zero(w, "q4_0", MZ_DT_Q4_0, 1, 64, 1);
    add_tensor_zero(w, "q4_1", MZ_DT_Q4_1, 2, 32, 3);
    return finish(w, len);
}

/* A miniature of what gen-model writes: llama keys, a tokenizer, one block. */
static uint8_t *mini_model_file(size_t *len)
{
    mz_gguf_writer *w = mz_gguf_writer_init();
    mz_gguf_writer_add_str(w, "general.architecture", "llama");
    mz_gguf_writer_add_str(w, "general.name", "seed");
    mz_gguf_writer_add_u32(w, "llama.block_count", 1);
    mz_gguf_writer_add_u32(w, "llama.embedding_length", 32);
    mz_gguf_writer_add_u32(w, "llama.attention.head_count", 2);
    mz_gguf_writer_add_f32(w, "llama.rope.freq_base", 10000.0f);
    mz_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
    mz_gguf_str toks[40];
    char tok_text[40][16];
    int32_t types[40];
    for (int i = 0; i < 40; i++) {
        snprintf(tok_text[i], sizeof tok_text[i], "t%d", i);
        toks[i].ptr = tok_text[i];
        toks[i].len = strlen(tok_text[i]);
        types[i] = 1;
    }
    mz_gguf_kv kv;
    memset(&kv, 0, sizeof kv);
    kv.key.ptr = "tokenizer.ggml.tokens";
    kv.key.len = strlen(kv.key.ptr);
    kv.type = MZ_GGUF_ARRAY;
    kv.arr_type = MZ_GGUF_STRING;
    kv.arr_n = 40;
    kv.arr_data = toks;
    mz_gguf_writer_add_kv(w, &kv);
    kv.key.ptr = "tokenizer.ggml.token_type";
    kv.key.len = strlen(kv.key.ptr);
    kv.arr_type = MZ_GGUF_INT32;
    kv.arr_data = types;
    mz_gguf_writer_add_kv(w, &kv);
    mz_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", false);
    add_tensor_zero(w, "token_embd.weight", MZ_DT_Q8_0, 2, 32, 40);
    add_tensor_zero(w, "output_norm.weight", MZ_DT_F32, 1, 32, 1);
    add_tensor_zero(w, "blk.0.attn_q.weight", MZ_DT_F16, 2, 32, 32);
    add_tensor_zero(w, "blk.0.ffn_down.weight", MZ_DT_Q4_0, 2, 64, 32);
    return finish(w, len);
}

static size_t find_bytes(const uint8_t *buf, size_t len, const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(buf + i, s, n) == 0) return i;
    return 0;
}

static void put_le(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Saves a copy of base with one patch applied: n bytes of v at off. */
static void save_patched(const char *name, const uint8_t *base, size_t len, size_t off,
                         uint64_t v, unsigned n)
{
    uint8_t copy[65536];
    memcpy(copy, base, len);
    put_le(copy + off, v, n);
    save(name, copy, len);
}

int main(void)
{
    size_t len, len2, len3;
    uint8_t *small = small_file(&len);
    uint8_t *all = all_types_file(&len2);
    uint8_t *mini = mini_model_file(&len3);
    if (!small || !all || !mini) return 1;
    save("valid-small.gguf", small, len);
    save("valid-all-types.gguf", all, len2);
    save("valid-mini-model.gguf", mini, len3);

    size_t wb = find_bytes(small, len, "w.b") + 3; /* after the name: n_dims, ne[0], type, offset */
    size_t bc = find_bytes(small, len, "llama.block_count") + 17; /* value type */
    save_patched("bad-magic.gguf", small, len, 0, 0x4c4d4747, 4);
    save_patched("bad-version2.gguf", small, len, 4, 2, 4);
    save_patched("bad-huge-n_kv.gguf", small, len, 16, (uint64_t)1 << 40, 8);
    save_patched("bad-huge-n_tensors.gguf", small, len, 8, UINT64_MAX, 8);
    save_patched("bad-n_dims.gguf", small, len, wb, 5, 4);
    save_patched("bad-zero-dim.gguf", small, len, wb + 4, 0, 8);
    save_patched("bad-tensor-type.gguf", small, len, wb + 12, 4, 4);
    save_patched("bad-q6_k-shape.gguf", small, len, wb + 12, 14, 4);
    save_patched("bad-unaligned.gguf", small, len, wb + 16, 4, 8);
    save_patched("bad-overlap.gguf", small, len, wb + 16, 0, 8);
    save_patched("bad-outside.gguf", small, len, wb + 16, 1u << 20, 8);
    save_patched("bad-value-type.gguf", small, len, bc, 13, 4);
    save_patched("bad-nested-array.gguf", small, len, bc, MZ_GGUF_ARRAY, 4);
    save_patched("bad-dup-key.gguf", all, len2, find_bytes(all, len2, "s.uint16") + 6,
                 '3' | ('2' << 8), 2); /* s.uint16 becomes a second s.uint32 */
    save("bad-truncated.gguf", mini, len3 / 2);

    /* Every block type a downloaded file holds (Q4_K_M & co.): one tensor
     * of each, rows of 1, 2 and 3 blocks, as the last tensor a K-quant so
     * that cutting the file cuts a super-block. */
    static const struct { int type; uint64_t ne0, ne1; } kinds[] = {
        {MZ_DT_Q5_0, 64, 2},  {MZ_DT_Q5_1, 96, 1},  {MZ_DT_IQ4_NL, 32, 3}, {MZ_DT_Q2_K, 256, 2},
        {MZ_DT_Q3_K, 512, 1}, {MZ_DT_Q4_K, 768, 1}, {MZ_DT_Q5_K, 256, 3},  {MZ_DT_IQ4_XS, 512, 1},
        {MZ_DT_Q6_K, 256, 2},
    };
    mz_gguf_writer *w = mz_gguf_writer_init();
    mz_gguf_writer_add_str(w, "general.architecture", "llama");
    mz_gguf_writer_add_u32(w, "general.file_type", 15);
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        add_tensor_zero(w, mz_dtype_name(kinds[i].type), kinds[i].type, 2, kinds[i].ne0, kinds[i].ne1);
    size_t len4;
    uint8_t *kq = finish(w, &len4);
    if (kq) {
        save("valid-kquants.gguf", kq, len4);
        size_t q4 = find_bytes(kq, len4, "Q4_K") + 4; /* after the name: n_dims, ne[0] */
        save_patched("bad-q4_k-row-640.gguf", kq, len4, q4 + 4, 640, 8);
        save_patched("bad-q5_0-row-48.gguf", kq, len4, find_bytes(kq, len4, "Q5_0") + 8, 48, 8);
        save("bad-truncated-superblock.gguf", kq, len4 - 100);
    }
    free(kq);
    /* Well formed but with a known type mzcache does not compute with. */
    w = mz_gguf_writer_init();
    mz_gguf_writer_add_str(w, "general.architecture", "llama");
    add_tensor_zero(w, "iq2", 16, 1, 256, 1);
    size_t len5;
    uint8_t *iq2 = finish(w, &len5);
    if (iq2) save("bad-iq2_xxs.gguf", iq2, len5);
    free(iq2);
    save("bad-truncated-header.gguf", small, 20);

    free(small);
    free(all);
    free(mini);
    return g_failed;
}
