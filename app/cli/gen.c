/*
 * gen.c — `mzcache gen-model`: writes a deterministic random-weight GGUF.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

int cmd_gen_model(int argc, char **argv)
{
    mz_gen_params p = mz_gen_params_default();
    const char *out = NULL;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *intp = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: mzcache gen-model --preset NAME --vocab-from GGUF -o OUT.gguf [options]\n\n"
                   "Writes a GGUF model with deterministic random weights, loadable by mzcache\n"
                   "and llama.cpp, with the tokenizer copied from another GGUF file.\n\n"
                   "  --preset NAME         smollm2-135m, qwen3-0.6b, llama3.2-1b, exaone4-1.2b,\n"
                   "                        gemma3-270m, tiny-llama, tiny-llama3 (Llama 3's\n"
                   "                        rope scaling), tiny-qwen3, tiny-qwen2, tiny-gemma3\n"
                   "  --type T              weight type of every matrix: F16 (default), F32, BF16, Q8_0,\n"
                   "                        Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K..Q6_K; or a\n"
                   "                        llama.cpp mix with its per-tensor rules: Q4_K_M, Q5_K_M,\n"
                   "                        Q3_K_M, Q4_K_S, ... (see mzcache quantize --help)\n"
                   "  --vocab-from GGUF     copy the tokenizer from this file (required)\n"
                   "  -o, --output FILE     where to write (required)\n"
                   "  --arch A              llama, qwen2, qwen3 or gemma3 (overrides the preset)\n"
                   "  --layers N --embd N --heads N --kv-heads N --head-dim N --ff N --ctx N\n"
                   "                        override the preset's shape\n"
                   "  --seed N              weights seed (default 1)\n");
            return 0;
        }
        if (!v) {
            fprintf(stderr, "mzcache gen-model: %s needs a value (see --help)\n", a);
            return 2;
        }
        if (!strcmp(a, "--preset")) p.preset = v;
        else if (!strcmp(a, "--type")) p.weight_type = v;
        else if (!strcmp(a, "--vocab-from")) p.vocab_from = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) out = v;
        else if (!strcmp(a, "--arch")) p.arch = v;
        else if (!strcmp(a, "--seed")) {
            if (cli_opt_u64(a, v, &p.seed)) return 2;
        }
        else if (!strcmp(a, "--layers")) intp = &p.n_layer;
        else if (!strcmp(a, "--embd")) intp = &p.n_embd;
        else if (!strcmp(a, "--heads")) intp = &p.n_head;
        else if (!strcmp(a, "--kv-heads")) intp = &p.n_head_kv;
        else if (!strcmp(a, "--head-dim")) intp = &p.head_dim;
        else if (!strcmp(a, "--ff")) intp = &p.n_ff;
        else if (!strcmp(a, "--ctx")) intp = &p.n_ctx_train;
        else {
            fprintf(stderr, "mzcache gen-model: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        /* 0 = the preset's value; the generator checks the shape itself. */
        if (intp && cli_opt_int(a, v, 0, 1 << 20, intp)) return 2;
    }
    if (!out || !p.vocab_from) {
        fprintf(stderr, "mzcache gen-model: need -o OUT and --vocab-from GGUF (see --help)\n");
        return 2;
    }
    mz_status s = mz_gen_model(out, &p);
    if (s) {
        /* the library's message already names gen-model */
        fprintf(stderr, "mzcache: %s\n", mz_last_error());
        return 1;
    }
    fprintf(stderr, "mzcache: wrote %s\n", out);
    return 0;
}
