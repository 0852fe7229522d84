/*
 * Model loading: the real model's configuration and units, and a clear error
 * (never a crash) for every kind of bad model file: a missing file, a file
 * cut short, an unknown architecture, missing keys, nonsense hyperparameters,
 * missing tensors, tensors of the wrong shape or an unsupported type.
 */
#define _GNU_SOURCE
#include "mzcache.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "testutil.h"

#include <fcntl.h>
#include <unistd.h>

/* Loads path with n_threads loader threads; true when every unit's bytes
 * and every tensor's layout equal ref's (ref NULL: only loads). */
static bool same_as(const mz_model_t *ref, const char *path, int n_threads)
{
    mz_model_params p = mz_model_params_default();
    p.n_threads = n_threads;
    mz_model_t *m = NULL;
    if (mz_model_load(path, &p, &m) != MZ_OK) {
        CHECK_MSG(0, "n_threads %d: %s", n_threads, mz_last_error());
        return false;
    }
    bool same = m->pinned_bytes == ref->pinned_bytes &&
                memcmp(m->pinned_buf, ref->pinned_buf, m->pinned_bytes) == 0 &&
                m->output.layout == ref->output.layout;
    for (int l = 0; same && l < m->cfg.n_layer; l++) {
        const mz_block_weights *a = &m->blocks[l], *b = &ref->blocks[l];
        same = a->buf_bytes == b->buf_bytes && memcmp(a->buf, b->buf, a->buf_bytes) == 0 &&
               a->wq.layout == b->wq.layout && a->w_down.layout == b->w_down.layout;
        CHECK_MSG(same, "n_threads %d: block %d differs from the one-thread load", n_threads, l);
    }
    mz_model_free(m);
    return same;
}

/* How a rewrite changes the source file. */
typedef struct edit {
    const char *drop_key;      /* leave this key out */
    const char *set_key;       /* replace (or add) this key ... */
    int set_kind;              /* 0 u32, 1 str, 2 f32 */
    uint32_t set_u32;
    const char *set_str;
    float set_f32;
    const char *drop_tensor;   /* leave this tensor out */
    const char *reshape_tensor;/* give this tensor ne[0] = 2*ne[0], ne[1] = ne[1]/2 */
} edit;

static void add_set_key(mz_gguf_writer *w, const edit *e)
{
    if (e->set_kind == 0) mz_gguf_writer_add_u32(w, e->set_key, e->set_u32);
    else if (e->set_kind == 1) mz_gguf_writer_add_str(w, e->set_key, e->set_str);
    else mz_gguf_writer_add_f32(w, e->set_key, e->set_f32);
}

/* Rewrites src into dst with one edit applied, reading tensor data from src. */
static int rewrite(const char *src, const char *dst, const edit *e)
{
    mz_gguf *g = NULL;
    if (mz_gguf_open(src, &g)) return -1;
    mz_gguf_writer *w = mz_gguf_writer_init();
    int fd = open(src, O_RDONLY);
    int rc = -1;
    bool set_done = false;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const char *key = g->kv[i].key.ptr;
        if (e->drop_key && !strcmp(key, e->drop_key)) continue;
        if (e->set_key && !strcmp(key, e->set_key)) {
            set_done = true;
            add_set_key(w, e);
            continue;
        }
        if (mz_gguf_writer_add_kv(w, &g->kv[i])) goto out;
    }
    if (e->set_key && !set_done) add_set_key(w, e);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const mz_gguf_tensor *t = &g->tensors[i];
        if (e->drop_tensor && !strcmp(t->name.ptr, e->drop_tensor)) continue;
        void *data = malloc(t->nbytes);
        if (pread(fd, data, t->nbytes, (off_t)(g->data_offset + t->offset)) != (ssize_t)t->nbytes) {
            free(data);
            goto out;
        }
        uint64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (e->reshape_tensor && !strcmp(t->name.ptr, e->reshape_tensor)) {
            ne[0] *= 2;
            ne[1] /= 2;
        }
        mz_status s = mz_gguf_writer_add_tensor(w, t->name.ptr, t->type, t->n_dims, ne, data, t->nbytes);
        free(data);
        if (s) goto out;
    }
    rc = mz_gguf_writer_write(w, dst) == MZ_OK ? 0 : -1;
out:
    close(fd);
    mz_gguf_writer_free(w);
    mz_gguf_free(g);
    return rc;
}

static void expect_load_error(const char *what, const char *base, const edit *e, mz_status want,
                              const char *phrase)
{
    char bad[1024]; /* t_tmp_path's buffer is shared: copy it */
    snprintf(bad, sizeof bad, "%s", t_tmp_path("bad-model.gguf"));
    CHECK_MSG(rewrite(base, bad, e) == 0, "%s: cannot craft file", what);
    mz_model_t *m = NULL;
    mz_status s = mz_model_load(bad, NULL, &m);
    CHECK_MSG(s == want && m == NULL, "%s: status %d (%s), want %d", what, s, mz_last_error(), want);
    CHECK_MSG(strstr(mz_last_error(), phrase) != NULL, "%s: message '%s' lacks '%s'", what,
              mz_last_error(), phrase);
    mz_model_free(m);
    unlink(bad);
}

int main(void)
{
    const char *real = t_real_model_path();
    if (!real) return t_skip("test_model_load", "no models/SmolLM2 (run make model)");

    /* the real model */
    mz_model_t *m = NULL;
    CHECK_MSG(mz_model_load(real, NULL, &m) == MZ_OK, "%s", mz_last_error());
    if (m) {
        mz_model_info in;
        mz_model_get_info(m, &in);
        CHECK(!strcmp(in.arch, "llama"));
        CHECK(!strcmp(in.weight_type, "Q4_1"));
        CHECK_EQ_INT(in.n_layer, 30);
        CHECK_EQ_INT(in.n_embd, 576);
        CHECK_EQ_INT(in.n_head, 9);
        CHECK_EQ_INT(in.n_head_kv, 3);
        CHECK_EQ_INT(in.head_dim, 64);
        CHECK_EQ_INT(in.n_ff, 1536);
        CHECK_EQ_INT(in.n_vocab, 49152);
        CHECK_EQ_INT(in.n_ctx_train, 8192);
        CHECK(in.tied_output);
        CHECK_EQ_INT(in.bos, 1);
        CHECK_EQ_INT(in.eos, 2);
        /* 30 blocks of Q4_1 + F32 norms, 64-byte aligned tensors */
        size_t q4_1_block = (576 * 576 * 2 + 576 * 192 * 2 + 576 * 1536 * 3) / 32 * 20;
        CHECK_MSG(in.block_bytes >= q4_1_block + 2 * 576 * 4 && in.block_bytes < q4_1_block + 2 * 576 * 4 + 4096,
                  "block bytes %zu", in.block_bytes);
        CHECK_EQ_INT(in.kv_bytes_per_token, 2 * 30 * 3 * 64 * 2);
        CHECK(in.n_params > 134000000 && in.n_params < 136000000);
        mz_model_free(m);
    }

    /* the blocks are read and repacked on several threads: the same bytes
     * and layouts as one thread, for a thread count below, at and above
     * the loader cap (8) and the default (all CPUs) */
    {
        mz_model_params p1 = mz_model_params_default();
        p1.n_threads = 1;
        mz_model_t *ref = NULL;
        CHECK_MSG(mz_model_load(real, &p1, &ref) == MZ_OK, "%s", mz_last_error());
        if (ref) {
            int counts[] = {2, 3, 8, 64, 0};
            for (size_t i = 0; i < MZ_ARRAY_LEN(counts); i++)
                CHECK_MSG(same_as(ref, real, counts[i]), "n_threads %d", counts[i]);
            mz_model_free(ref);
        }
    }

    /* missing file */
    CHECK(mz_model_load("models/no-such-model.gguf", NULL, &m) == MZ_E_IO && m == NULL);
    CHECK_MSG(strstr(mz_last_error(), "no-such-model.gguf") != NULL, "%s", mz_last_error());

    /* a copy cut short in the middle of the tensor data */
    {
        const char *cut = t_tmp_path("truncated.gguf");
        size_t len = 0;
        char *bytes = t_read_file(real, &len);
        FILE *f = fopen(cut, "wb");
        CHECK(bytes && f && fwrite(bytes, 1, len / 2, f) == len / 2);
        if (f) fclose(f);
        free(bytes);
        mz_status s = mz_model_load(cut, NULL, &m);
        CHECK_MSG(s == MZ_E_FORMAT && m == NULL, "truncated: %d %s", s, mz_last_error());
        CHECK_MSG(strstr(mz_last_error(), "truncated.gguf") != NULL, "%s", mz_last_error());
        unlink(cut);
    }

    /* crafted files from a small generated model */
    char base[1024];
    snprintf(base, sizeof base, "%s", t_tmp_path("load-base.gguf"));
    mz_gen_params gp = mz_gen_params_default();
    gp.preset = "tiny-qwen3";
    gp.weight_type = "Q8_0";
    gp.vocab_from = real;
    CHECK_MSG(mz_gen_model(base, &gp) == MZ_OK, "%s", mz_last_error());
    CHECK_MSG(mz_model_load(base, NULL, &m) == MZ_OK, "base: %s", mz_last_error());
    mz_model_free(m);

    expect_load_error("unknown arch", base,
                      &(edit){.set_key = "general.architecture", .set_kind = 1, .set_str = "gptx"},
                      MZ_E_UNSUPPORTED, "architecture 'gptx' is not supported");
    expect_load_error("no arch", base, &(edit){.drop_key = "general.architecture"}, MZ_E_FORMAT,
                      "general.architecture");
    expect_load_error("no block count", base, &(edit){.drop_key = "qwen3.block_count"},
                      MZ_E_FORMAT, "missing required key qwen3.block_count");
    expect_load_error("no eps", base, &(edit){.drop_key = "qwen3.attention.layer_norm_rms_epsilon"},
                      MZ_E_FORMAT, "layer_norm_rms_epsilon");
    expect_load_error("huge layer count", base,
                      &(edit){.set_key = "qwen3.block_count", .set_u32 = 4000000000u}, MZ_E_FORMAT,
                      "outside the supported range");
    expect_load_error("zero heads", base,
                      &(edit){.set_key = "qwen3.attention.head_count", .set_u32 = 0}, MZ_E_FORMAT,
                      "head_count");
    expect_load_error("heads not a multiple of kv heads", base,
                      &(edit){.set_key = "qwen3.attention.head_count_kv", .set_u32 = 3},
                      MZ_E_FORMAT, "not a multiple");
    expect_load_error("negative eps", base,
                      &(edit){.set_key = "qwen3.attention.layer_norm_rms_epsilon", .set_kind = 2,
                              .set_f32 = -1.0f},
                      MZ_E_FORMAT, "epsilon");
    expect_load_error("more layers than tensors", base,
                      &(edit){.set_key = "qwen3.block_count", .set_u32 = 3}, MZ_E_FORMAT,
                      "missing required tensor blk.2.attn_norm.weight");
    expect_load_error("missing tensor", base, &(edit){.drop_tensor = "blk.1.ffn_down.weight"},
                      MZ_E_FORMAT, "missing required tensor blk.1.ffn_down.weight");
    expect_load_error("missing qk norm", base, &(edit){.drop_tensor = "blk.0.attn_k_norm.weight"},
                      MZ_E_FORMAT, "blk.0.attn_k_norm.weight");
    expect_load_error("wrong shape", base, &(edit){.reshape_tensor = "blk.0.attn_q.weight"},
                      MZ_E_FORMAT, "tensor blk.0.attn_q.weight has shape");
    expect_load_error("no tokenizer", base, &(edit){.drop_key = "tokenizer.ggml.tokens"},
                      MZ_E_FORMAT, "tokenizer.ggml.tokens");
    expect_load_error("yarn rope", base,
                      &(edit){.set_key = "qwen3.rope.scaling.type", .set_kind = 1, .set_str = "yarn"},
                      MZ_E_UNSUPPORTED, "qwen3.rope.scaling.type = 'yarn': scaled rope is not supported");
    expect_load_error("linear rope factor", base,
                      &(edit){.set_key = "qwen3.rope.scaling.factor", .set_kind = 2, .set_f32 = 4.0f},
                      MZ_E_UNSUPPORTED, "rope.scaling.factor = 4");
    unlink(base);

    /* Llama 3.1+'s rope scaling: rope_freqs.weight, one divisor per rotated
     * pair (gen-model writes it as llama.cpp's converter does). */
    gp.preset = "tiny-llama3";
    CHECK_MSG(mz_gen_model(base, &gp) == MZ_OK, "%s", mz_last_error());
    m = NULL;
    CHECK_MSG(mz_model_load(base, NULL, &m) == MZ_OK, "tiny-llama3: %s", mz_last_error());
    if (m) {
        const float *f = m->cfg.rope_freq_factors;
        CHECK_MSG(f != NULL && m->cfg.n_rot == 16, "rope_freqs read: %p, n_rot %d", (const void *)f, m->cfg.n_rot);
        /* tiny-llama3: base 1e4, original context 16, factor 8: pair 0's
         * wavelength 2 pi lies between 16 / 4 and 16 (blended), every longer
         * one above 16 (the whole factor). */
        if (f) {
            CHECK_MSG(f[0] > 1.0f && f[0] < 8.0f, "pair 0 blended: %g", (double)f[0]);
            for (int i = 1; i < 8; i++) CHECK_MSG(f[i] == 8.0f, "pair %d: %g", i, (double)f[i]);
        }
        mz_model_free(m);
    }
    expect_load_error("rope_freqs of another length", base,
                      &(edit){.set_key = "llama.rope.dimension_count", .set_u32 = 8}, MZ_E_FORMAT,
                      "rope_freqs.weight must be F32 with 4 values (rope dimensions / 2); it is F32 with 8");
    unlink(base);
    return t_done("test_model_load");
}
