/*
 * test_quant_mix.c — llama.cpp's quantization mixes (src/model/quant_mix.c):
 * the per-tensor rules against files llama.cpp's own quantizer made (the
 * real Gemma 3 270M Q4_K_M and SmolLM2 Q4_1, tensor by tensor, when
 * present), against the census of the Gemma file in issue 28 (F32 ×109,
 * Q5_0 ×81, Q4_K ×27, Q8_0 ×10, Q6_K ×9) for its shape, the row-width
 * fallbacks, the layers that get more bits, and the naming of a file's mix
 * (from general.file_type, or inferred).
 */
#include "gguf/gguf.h"
#include "model/quant_mix.h"
#include "testutil.h"

#include <string.h>

/* Every tensor of a file llama.cpp quantized has the type our rules give. */
static void check_real_file(const char *path, const char *mix_name)
{
    mz_gguf *g = NULL;
    if (mz_gguf_open_any_type(path, &g) != MZ_OK) {
        printf("skip: %s absent or unreadable (%s)\n", path, mz_last_error());
        return;
    }
    const mz_qmix *mix = mz_qmix_find(mix_name);
    mz_qmix_model m;
    CHECK(mix != NULL);
    CHECK_MSG(mz_qmix_model_from_gguf(g, &m) == MZ_OK, "%s", mz_last_error());
    int bad = 0;
    for (uint64_t i = 0; mix && i < g->n_tensors; i++) {
        const mz_gguf_tensor *t = &g->tensors[i];
        int want = mz_qmix_tensor_type(mix, false, &m, t->name.ptr, t->n_dims, t->ne, t->type);
        if (want != t->type && bad++ < 5)
            fprintf(stderr, "%s: %s is %s, rules say %s\n", path, t->name.ptr,
                    mz_dtype_name(t->type), mz_dtype_name(want));
    }
    CHECK_EQ_INT(bad, 0);
    uint32_t ft = 0;
    CHECK(mz_gguf_get_u32(g, "general.file_type", &ft) == MZ_OK);
    CHECK_EQ_INT(ft, mix ? mix->ftype : 0);
    int n_diff = -1;
    CHECK(mz_qmix_infer(g, &n_diff) == mix);
    CHECK_EQ_INT(n_diff, 0);
    mz_gguf_free(g);
}

typedef struct shape {
    const char *fmt;            /* name with %d for the layer */
    uint64_t ne0, ne1;          /* ne1 = 0: 1-D */
} shape;

/* Counts the types a mix gives a model of the given block tensors. */
static void census(const mz_qmix *mix, const mz_qmix_model *m, const shape *blk, size_t n_blk,
                   const shape *top, size_t n_top, int count[MZ_DT_COUNT])
{
    memset(count, 0, sizeof(int) * MZ_DT_COUNT);
    char name[96];
    for (int l = -1; l < m->n_layer; l++) {
        const shape *s = l < 0 ? top : blk;
        size_t n = l < 0 ? n_top : n_blk;
        for (size_t i = 0; i < n; i++) {
            snprintf(name, sizeof name, s[i].fmt, l);
            uint64_t ne[2] = {s[i].ne0, s[i].ne1 ? s[i].ne1 : 1};
            count[mz_qmix_tensor_type(mix, false, m, name, s[i].ne1 ? 2 : 1, ne, s[i].ne1 ? MZ_DT_F16 : MZ_DT_F32)]++;
        }
    }
}

static void test_gemma_census(void)
{
    /* Gemma 3 270M: embd 640, 4 heads of 256 (1 kv head), ff 2048, 18 blocks, tied */
    static const shape blk[] = {
        {"blk.%d.attn_norm.weight", 640, 0},   {"blk.%d.attn_q.weight", 640, 1024},
        {"blk.%d.attn_k.weight", 640, 256},    {"blk.%d.attn_v.weight", 640, 256},
        {"blk.%d.attn_q_norm.weight", 256, 0}, {"blk.%d.attn_k_norm.weight", 256, 0},
        {"blk.%d.attn_output.weight", 1024, 640}, {"blk.%d.post_attention_norm.weight", 640, 0},
        {"blk.%d.ffn_norm.weight", 640, 0},    {"blk.%d.ffn_gate.weight", 640, 2048},
        {"blk.%d.ffn_up.weight", 640, 2048},   {"blk.%d.ffn_down.weight", 2048, 640},
        {"blk.%d.post_ffw_norm.weight", 640, 0},
    };
    static const shape top[] = {{"token_embd.weight", 640, 262144}, {"output_norm.weight", 640, 0}};
    mz_qmix_model m = {.n_layer = 18, .n_attn_v = 18, .n_gqa = 4, .tied = true};
    int c[MZ_DT_COUNT];
    census(mz_qmix_find("Q4_K_M"), &m, blk, MZ_ARRAY_LEN(blk), top, MZ_ARRAY_LEN(top), c);
    CHECK_EQ_INT(c[MZ_DT_F32], 109);
    CHECK_EQ_INT(c[MZ_DT_Q5_0], 81);
    CHECK_EQ_INT(c[MZ_DT_Q4_K], 27);
    CHECK_EQ_INT(c[MZ_DT_Q8_0], 10);
    CHECK_EQ_INT(c[MZ_DT_Q6_K], 9);
}

static int type_of(const char *mix, bool pure, const mz_qmix_model *m, const char *name,
                   uint64_t ne0, uint64_t ne1)
{
    uint64_t ne[2] = {ne0, ne1};
    return mz_qmix_tensor_type(mz_qmix_find(mix), pure, m, name, 2, ne, MZ_DT_F16);
}

static void test_rules(void)
{
    /* SmolLM2-135M: 30 blocks, 9 heads / 3 kv heads, embd 576, ff 1536, tied */
    mz_qmix_model m = {.n_layer = 30, .n_attn_v = 30, .n_gqa = 3, .tied = true};
    /* Fallbacks of 576-value rows, per base type (pure: the base itself). */
    static const struct { const char *mix; int want; } fb[] = {
        {"Q4_K_S", MZ_DT_Q5_0}, {"Q5_K_S", MZ_DT_Q5_1}, {"Q6_K", MZ_DT_Q8_0}, {"Q2_K", MZ_DT_Q4_0},
        {"Q3_K_M", MZ_DT_Q4_0}, {"IQ4_XS", MZ_DT_IQ4_NL}, {"Q4_0", MZ_DT_Q4_0}, {"F16", MZ_DT_F16},
    };
    for (size_t i = 0; i < MZ_ARRAY_LEN(fb); i++)
        CHECK_MSG(type_of(fb[i].mix, true, &m, "blk.3.attn_q.weight", 576, 576) == fb[i].want, "%s",
                  fb[i].mix);
    /* ...and 100-value rows fit nothing quantized: F16. */
    CHECK_EQ_INT(type_of("Q8_0", false, &m, "blk.0.ffn_down.weight", 100, 576), MZ_DT_F16);
    /* Q4_K_M: ffn_down (1536-value rows) Q6_K on the first/last eighth and
     * every third layer between, Q4_K elsewhere. */
    static const int more[] = {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29};
    for (int l = 0; l < 30; l++) {
        bool want6 = false;
        for (size_t k = 0; k < MZ_ARRAY_LEN(more); k++) want6 |= more[k] == l;
        char name[64];
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l);
        CHECK_MSG(type_of("Q4_K_M", false, &m, name, 1536, 576) == (want6 ? MZ_DT_Q6_K : MZ_DT_Q4_K),
                  "layer %d", l);
        CHECK_EQ_INT(type_of("Q4_K_M", true, &m, name, 1536, 576), MZ_DT_Q4_K);
        /* attn_v: Q6_K there too, which does not fit 576: Q8_0; else Q4_K -> Q5_0 */
        snprintf(name, sizeof name, "blk.%d.attn_v.weight", l);
        CHECK_EQ_INT(type_of("Q4_K_M", false, &m, name, 576, 192), want6 ? MZ_DT_Q8_0 : MZ_DT_Q5_0);
        /* Q3_K_M: attn_v Q5_K on the first two layers, ffn_down Q5_K below n/16 */
        CHECK_EQ_INT(type_of("Q3_K_M", false, &m, name, 768, 192), l < 2 ? MZ_DT_Q5_K : MZ_DT_Q4_K);
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l);
        CHECK_EQ_INT(type_of("Q3_K_M", false, &m, name, 1536, 576), l < 1 ? MZ_DT_Q5_K : MZ_DT_Q4_K);
        CHECK_EQ_INT(type_of("IQ4_NL", false, &m, name, 1536, 576), l < 3 ? MZ_DT_Q5_K : MZ_DT_IQ4_NL);
    }
    /* The output head, and token_embd when tied: Q6_K, or Q8_0 where it does not fit. */
    CHECK_EQ_INT(type_of("Q4_K_M", false, &m, "token_embd.weight", 576, 49152), MZ_DT_Q8_0);
    CHECK_EQ_INT(type_of("Q4_0", false, &m, "token_embd.weight", 768, 49152), MZ_DT_Q6_K);
    CHECK_EQ_INT(type_of("Q8_0", false, &m, "token_embd.weight", 768, 49152), MZ_DT_Q8_0);
    mz_qmix_model untied = m;
    untied.tied = false;
    CHECK_EQ_INT(type_of("Q4_K_M", false, &untied, "token_embd.weight", 768, 49152), MZ_DT_Q4_K);
    CHECK_EQ_INT(type_of("Q4_K_M", false, &untied, "output.weight", 768, 49152), MZ_DT_Q6_K);
    /* Q2_K: attn_v Q3_K (Q4_K from 4 query heads per kv head), attn_output Q3_K */
    CHECK_EQ_INT(type_of("Q2_K", false, &m, "blk.4.attn_v.weight", 768, 192), MZ_DT_Q3_K);
    untied.n_gqa = 4;
    CHECK_EQ_INT(type_of("Q2_K", false, &untied, "blk.4.attn_v.weight", 768, 192), MZ_DT_Q4_K);
    CHECK_EQ_INT(type_of("Q2_K", false, &m, "blk.4.attn_output.weight", 768, 768), MZ_DT_Q3_K);
    CHECK_EQ_INT(type_of("Q2_K", false, &m, "blk.4.ffn_up.weight", 768, 768), MZ_DT_Q2_K);
    /* Never quantized: 1-D tensors and norms, whatever the mix. */
    uint64_t ne1d[2] = {576, 1};
    CHECK_EQ_INT(mz_qmix_tensor_type(mz_qmix_find("Q4_K_M"), false, &m, "blk.0.attn_norm.weight", 1,
                                     ne1d, MZ_DT_F32), MZ_DT_F32);
    CHECK_EQ_INT(type_of("Q4_K_M", false, &m, "blk.0.attn_q_norm.weight", 64, 4), MZ_DT_F16);
    /* Names: case-insensitive, unknown ones NULL, every name in the list. */
    CHECK(mz_qmix_find("q4_k_m") == mz_qmix_find("Q4_K_M"));
    CHECK(mz_qmix_find("Q4_K") == NULL);
    CHECK(mz_qmix_for_ftype(15) == mz_qmix_find("Q4_K_M"));
    CHECK(mz_qmix_for_base(MZ_DT_Q4_K) == mz_qmix_find("Q4_K_S"));
    CHECK(strstr(mz_qmix_names(), "Q3_K_M") != NULL && strstr(mz_qmix_names(), "IQ4_NL") != NULL);
}

/* A small model file in a mix's types, with or without general.file_type. */
static mz_gguf *mix_file(const char *mix_name, bool with_ftype)
{
    mz_gguf_writer *w = mz_gguf_writer_init();
    CHECK(mz_gguf_writer_add_str(w, "general.architecture", "llama") == MZ_OK);
    CHECK(mz_gguf_writer_add_u32(w, "llama.block_count", 8) == MZ_OK);
    CHECK(mz_gguf_writer_add_u32(w, "llama.attention.head_count", 8) == MZ_OK);
    CHECK(mz_gguf_writer_add_u32(w, "llama.attention.head_count_kv", 2) == MZ_OK);
    if (with_ftype) CHECK(mz_gguf_writer_add_u32(w, "general.file_type", mz_qmix_find(mix_name)->ftype) == MZ_OK);
    mz_qmix_model m = {.n_layer = 8, .n_attn_v = 8, .n_gqa = 4, .tied = false};
    static uint8_t zeros[1 << 20];
    static const char *names[] = {"token_embd.weight", "output.weight", "blk.%d.attn_q.weight",
                                  "blk.%d.attn_v.weight", "blk.%d.attn_output.weight",
                                  "blk.%d.ffn_down.weight", "blk.%d.attn_norm.weight"};
    for (int l = 0; l < 8; l++) {
        for (size_t i = l ? 2 : 0; i < MZ_ARRAY_LEN(names); i++) {
            char name[64];
            snprintf(name, sizeof name, names[i], l);
            bool norm = strstr(name, "norm") != NULL;
            uint64_t ne[2] = {512, norm ? 1 : 64};
            int t = mz_qmix_tensor_type(mz_qmix_find(mix_name), false, &m, name, norm ? 1 : 2, ne, MZ_DT_F32);
            CHECK(mz_gguf_writer_add_tensor(w, name, t, norm ? 1 : 2, ne, zeros,
                                            mz_dtype_row_bytes(t, 512) * ne[1]) == MZ_OK);
        }
    }
    uint8_t *buf = NULL;
    size_t len = 0;
    CHECK(mz_gguf_writer_write_mem(w, &buf, &len) == MZ_OK);
    mz_gguf_writer_free(w);
    mz_gguf *g = NULL;
    CHECK_MSG(mz_gguf_parse_any_type(buf, len, len, &g) == MZ_OK, "%s", mz_last_error());
    free(buf);
    return g;
}

static void test_describe(void)
{
    char line[512];
    mz_gguf *g = mix_file("Q5_K_M", false);
    if (g) {
        mz_qmix_describe(g, line, sizeof line);
        CHECK_MSG(!strncmp(line, "Q5_K_M-like: Q5_K ×", 19), "%s", line);
        CHECK_MSG(strstr(line, ", Q6_K ×") && strstr(line, ", F32 ×8"), "%s", line);
        mz_gguf_free(g);
    }
    g = mix_file("Q3_K_L", true);
    if (g) {
        mz_qmix_describe(g, line, sizeof line);
        CHECK_MSG(!strncmp(line, "Q3_K_L: ", 8), "%s", line);
        mz_gguf_free(g);
    }
}

int main(void)
{
    test_rules();
    test_gemma_census();
    test_describe();
    check_real_file("models/gemma-3-270m-q4_k_m.gguf", "Q4_K_M");
    check_real_file("models/SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1");
    return t_done("test_quant_mix");
}
