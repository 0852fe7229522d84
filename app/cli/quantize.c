/*
 * quantize.c — `mzcache quantize`: a GGUF file rewritten in a quantization
 * mix (src/model/quantize.c does the work, src/model/quant_mix.c the rules).
 */
#include "cli.h"
#include "cli_num.h"

#include "model/quant_mix.h"
#include "model/quantize.h"

#include <string.h>

static void print_tensor(void *user, const char *name, int from, int to)
{
    (void)user;
    if (from != to) printf("  %-36s %-7s -> %s\n", name, mz_dtype_name(from), mz_dtype_name(to));
}

int cmd_quantize(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    mz_quantize_params p = {0};
    bool verbose = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: mzcache quantize -m IN.gguf -o OUT.gguf --type MIX [--pure] [-v]\n\n"
                   "Rewrites a GGUF model in a quantization mix, as llama.cpp's llama-quantize\n"
                   "picks each tensor's type (Q4_K_M: Q4_K, with Q6_K for the output head and for\n"
                   "attn_v/ffn_down on some layers; rows that are not whole 256-value blocks fall\n"
                   "back to Q5_0/Q5_1/Q8_0/Q4_0). Deterministic: the same input and mix give the\n"
                   "same bytes. Metadata (tokenizer, template) is kept.\n\n"
                   "  --type MIX   %s\n"
                   "  --pure       every quantizable tensor in the mix's base type (still falling\n"
                   "               back where a row does not fit it)\n"
                   "  -t N         threads (default: every CPU; the file is the same for any N)\n"
                   "  -v           list each tensor whose type changes\n",
                   mz_qmix_names());
            return 0;
        }
        if (!strcmp(a, "--pure")) { p.pure = true; continue; }
        if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) { verbose = true; continue; }
        if (i + 1 >= argc) {
            fprintf(stderr, "mzcache quantize: %s needs a value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) in = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) out = v;
        else if (!strcmp(a, "--type")) p.mix = v;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (cli_opt_int(a, v, 1, 64, &p.n_threads)) return 2;
        }
        else {
            fprintf(stderr, "mzcache quantize: unknown option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!in || !out || !p.mix) {
        fprintf(stderr, "mzcache quantize: need -m IN, -o OUT and --type MIX (see --help)\n");
        return 2;
    }
    if (verbose) p.on_tensor = print_tensor;
    if (mz_quantize_file(in, out, &p)) {
        fprintf(stderr, "mzcache %s\n", mz_last_error());
        return 1;
    }
    fprintf(stderr, "mzcache: wrote %s\n", out);
    return 0;
}
