/*
 * info.c — `mzcache info`: metadata, tensor table and memory units of a model.
 */
#include "cli.h"

#include "gguf/gguf.h"
#include "model/quant_mix.h"

#include <inttypes.h>
#include <string.h>

static void print_kv(const mz_gguf_kv *kv)
{
    printf("  %-44.*s ", (int)kv->key.len, kv->key.ptr);
    switch (kv->type) {
    case MZ_GGUF_STRING: {
        /* Long values (chat templates) are cut to one line. */
        size_t n = kv->v.str.len, shown = 0;
        putchar('"');
        for (size_t i = 0; i < n && shown < 60; i++, shown++) {
            char ch = kv->v.str.ptr[i];
            if (ch == '\n') fputs("\\n", stdout);
            else putchar(ch);
        }
        printf("\"%s\n", n > 60 ? "…" : "");
        break;
    }
    case MZ_GGUF_ARRAY:
        printf("[%s × %" PRIu64 "]\n", mz_gguf_type_name(kv->arr_type), kv->arr_n);
        break;
    case MZ_GGUF_FLOAT32:
    case MZ_GGUF_FLOAT64: printf("%g\n", kv->v.f64); break;
    case MZ_GGUF_BOOL: printf("%s\n", kv->v.u64 ? "true" : "false"); break;
    case MZ_GGUF_INT8:
    case MZ_GGUF_INT16:
    case MZ_GGUF_INT32:
    case MZ_GGUF_INT64: printf("%" PRId64 "\n", kv->v.i64); break;
    default: printf("%" PRIu64 "\n", kv->v.u64); break;
    }
}

static const char *human(double bytes, char *buf, size_t cap)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB"};
    int u = 0;
    while (bytes >= 1024 && u < 3) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}

int cli_info(cli_opts *o)
{
    mz_model_t *m = NULL;
    mz_gguf *g = NULL;
    if (!o->model) return cli_load(o, &m, NULL) ? 1 : 0; /* says how to give one */
    /* The file is shown even when it does not load (an architecture or a
     * type mzcache lacks): its tensor table says why. */
    if (mz_gguf_open_any_type(o->model, &g)) {
        fprintf(stderr, "mzcache: %s\n", mz_last_error());
        return 1;
    }
    bool loads = cli_load(o, &m, NULL) == MZ_OK;
    mz_model_info in;
    char b1[32], b2[32], b3[32];
    printf("model: %s\n", o->model);
    if (loads) {
        mz_model_get_info(m, &in);
        printf("  name %s | arch %s | weights %s | %.1fM parameters\n", in.name, in.arch,
               in.weight_type, (double)in.n_params / 1e6);
        printf("  layers %d | embd %d | heads %d (kv %d) | head dim %d | ff %d | vocab %d | ctx %d\n",
               in.n_layer, in.n_embd, in.n_head, in.n_head_kv, in.head_dim, in.n_ff, in.n_vocab,
               in.n_ctx_train);
        printf("  output head %s\n", in.tied_output ? "tied to token embeddings" : "separate");
        bool tmpl_from_file = false;
        const char *tmpl = mz_model_chat_template(m, &tmpl_from_file);
        printf("  chat template %s (%s)\n", tmpl,
               o->chat_template           ? "--chat-template"
               : !strcmp(tmpl, "unknown") ? "the file's template is of no known family: use --chat-template NAME"
               : tmpl_from_file           ? "recognised in the file's template"
                                          : "the file has none: its architecture's");
    } else {
        printf("  does not load in mzcache (see the message above); what the file holds:\n");
    }
    char mix[512];
    printf("  types: %s\n\n", mz_qmix_describe(g, mix, sizeof mix));

    printf("metadata (%" PRIu64 " keys, GGUF v%u):\n", g->n_kv, g->version);
    for (uint64_t i = 0; i < g->n_kv; i++) print_kv(&g->kv[i]);

    printf("\ntensors (%" PRIu64 "):\n", g->n_tensors);
    printf("  %-32s %-7s %-22s %12s\n", "name", "type", "shape", "bytes");
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const mz_gguf_tensor *t = &g->tensors[i];
        char shape[64] = "";
        size_t off = 0;
        for (uint32_t d = 0; d < t->n_dims && off < sizeof shape; d++)
            off += (size_t)snprintf(shape + off, sizeof shape - off, d ? " x %" PRIu64 : "%" PRIu64, t->ne[d]);
        printf("  %-32.*s %-7s %-22s %12" PRIu64 "\n", (int)t->name.len, t->name.ptr,
               mz_dtype_name(t->type), shape, t->nbytes);
    }

    if (!loads) {
        mz_gguf_free(g);
        return 1;
    }
    size_t chunk_bytes = in.kv_bytes_per_token / (size_t)in.n_layer * MZ_KV_CHUNK_TOKENS;
    printf("\nmemory units (what mzcache can evict and restore):\n");
    printf("  pinned (embeddings, output norm%s)   %s\n", in.tied_output ? "" : ", output head",
           human((double)(in.weight_bytes - (size_t)in.n_layer * in.block_bytes), b1, sizeof b1));
    printf("  weight unit: one per block, %d units  %s each (largest)\n", in.n_layer,
           human((double)in.block_bytes, b2, sizeof b2));
    printf("  KV chunk: %d tokens of one layer      %s each; %s per token over all layers\n",
           MZ_KV_CHUNK_TOKENS, human((double)chunk_bytes, b3, sizeof b3),
           human((double)in.kv_bytes_per_token, b1, sizeof b1));
    printf("  all weights                          %s\n", human((double)in.weight_bytes, b2, sizeof b2));
    mz_gguf_free(g);
    mz_model_free(m);
    return 0;
}
