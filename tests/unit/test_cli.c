/*
 * The `mzcache` command as a user runs it: help texts, tokenize output
 * against the llama.cpp golden tokens, info, run, chat keeping its context,
 * gen-model, and clear errors (exit status and message) for bad input.
 */
#define _GNU_SOURCE
#include "testutil.h"

#include <stdarg.h>

#include <sys/wait.h>
#include <unistd.h>

static char g_out[1 << 16];

/* Runs a shell command, captures stdout+stderr into g_out, returns the exit status. */
static int sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char full[4200];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    size_t n = fread(g_out, 1, sizeof g_out - 1, p);
    g_out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(void)
{
    const char *bin = getenv("MZ_BIN");
    if (!bin || access(bin, X_OK)) return t_skip("test_cli", "MZ_BIN does not name the mzcache binary");
    const char *model = t_real_model_path();
    if (!model) return t_skip("test_cli", "no models/SmolLM2 (run make model)");

    /* help: every command explains itself and exits 0 */
    const char *cmds[] = {"run", "chat", "info", "tokenize", "gen-model", "quantize"};
    CHECK_EQ_INT(sh("%s --help", bin), 0);
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        CHECK(strstr(g_out, cmds[i]) != NULL);
    }
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        CHECK_EQ_INT(sh("%s %s --help", bin, cmds[i]), 0);
        CHECK_MSG(strstr(g_out, "usage: mzcache") != NULL, "%s --help: %s", cmds[i], g_out);
    }
    CHECK_EQ_INT(sh("%s frobnicate", bin), 2);
    CHECK(strstr(g_out, "unknown command 'frobnicate'") != NULL);
    CHECK_EQ_INT(sh("%s run -m %s", bin, model), 2);
    CHECK(strstr(g_out, "no prompt") != NULL);
    CHECK_EQ_INT(sh("%s run --bogus", bin), 2);
    CHECK(strstr(g_out, "unknown option '--bogus'") != NULL);

    /* tokenize: one id per line, the ids llama.cpp gives (tests/golden/tokenizer.txt case) */
    CHECK_EQ_INT(sh("%s tokenize -m %s -p 'The capital of France is'", bin, model), 0);
    CHECK_MSG(!strcmp(g_out, "504\n3575\n282\n4649\n314\n"), "got: %s", g_out);
    CHECK_EQ_INT(sh("printf 'The capital of France is' | %s tokenize -m %s --stdin", bin, model), 0);
    CHECK_MSG(!strcmp(g_out, "504\n3575\n282\n4649\n314\n"), "stdin got: %s", g_out);
    CHECK_EQ_INT(sh("%s tokenize -m %s -p '<|im_start|>hi' --show-pieces", bin, model), 0);
    CHECK_MSG(strstr(g_out, "     1 -> '<|im_start|>'") != NULL, "%s", g_out);

    /* info: config, tensors, units */
    CHECK_EQ_INT(sh("%s info -m %s", bin, model), 0);
    CHECK(strstr(g_out, "layers 30") != NULL);
    CHECK(strstr(g_out, "blk.29.ffn_down.weight") != NULL);
    CHECK(strstr(g_out, "memory units") != NULL);
    /* ...and the file's mix: llama.cpp's Q4_1 keeps the tied embeddings in Q8_0 */
    CHECK_MSG(strstr(g_out, "  types: Q4_1: Q4_1 ×210, Q8_0 ×1, F32 ×61\n") != NULL, "%s", g_out);
    /* A file that does not load (yet) is still shown, with why. */
    if (access("models/gemma-3-270m-q4_k_m.gguf", R_OK) == 0) {
        int rc = sh("%s info -m models/gemma-3-270m-q4_k_m.gguf", bin);
        CHECK_MSG(rc == 0 || (rc == 1 && strstr(g_out, "cannot load model")), "rc %d: %s", rc, g_out);
        CHECK_MSG(strstr(g_out, "types: Q4_K_M: Q5_0 ×81") && strstr(g_out, "Q4_K ×27") &&
                      strstr(g_out, "Q8_0 ×10") && strstr(g_out, "Q6_K ×9") && strstr(g_out, "F32 ×109"),
                  "%s", g_out);
        CHECK(strstr(g_out, "blk.17.ffn_down.weight") != NULL);
    }

    /* quantize: a mix of the real weights that still answers */
    {
        char q8[1024];
        snprintf(q8, sizeof q8, "%s", t_tmp_path("cli-q8_0.gguf"));
        CHECK_EQ_INT(sh("%s quantize -m %s -o %s --type Q8_0", bin, model, q8), 0);
        CHECK_EQ_INT(sh("%s info -m %s", bin, q8), 0);
        CHECK_MSG(strstr(g_out, "  types: Q8_0: Q8_0 ×211, F32 ×61\n") != NULL, "%s", g_out);
        CHECK_EQ_INT(sh("%s run -m %s -p 'The capital of France is' -n 4 --greedy -t 2", bin, q8), 0);
        CHECK_MSG(strstr(g_out, "The capital of France is Paris") != NULL, "%s", g_out);
        CHECK_EQ_INT(sh("%s quantize -m %s -o %s --type Q9_K", bin, model, q8), 1);
        CHECK_MSG(strstr(g_out, "unknown mix 'Q9_K'") && strstr(g_out, "Q4_K_M"), "%s", g_out);
        CHECK_EQ_INT(sh("%s quantize -m %s --type Q8_0", bin, model), 2);
        unlink(q8);
    }

    /* run: greedy is deterministic and says how fast it was */
    CHECK_EQ_INT(sh("%s run -m %s -p 'The capital of France is' -n 4 --greedy -t 2", bin, model), 0);
    CHECK_MSG(strstr(g_out, "The capital of France is Paris") != NULL, "%s", g_out);
    CHECK(strstr(g_out, "tok/s") != NULL);

    /* chat: the second turn reuses the first turn's tokens */
    CHECK_EQ_INT(sh("printf 'Hi!\\nWhat did I just say?\\n' | %s chat -m %s -n 8 --greedy -t 2 --timings",
                    bin, model), 0);
    {
        const char *first = strstr(g_out, "reused ");
        const char *second = first ? strstr(first + 1, "reused ") : NULL;
        CHECK_MSG(first && second, "%s", g_out);
        if (first && second) {
            CHECK_EQ_INT(atoi(first + 7), 0);
            CHECK_MSG(atoi(second + 7) > 20, "second turn reused only %d tokens", atoi(second + 7));
        }
    }

    /* bad model files: a clear message and a failing exit status */
    CHECK_EQ_INT(sh("%s run -m /nonexistent.gguf -p hi", bin), 1);
    CHECK_MSG(strstr(g_out, "cannot load model") && strstr(g_out, "/nonexistent.gguf"), "%s", g_out);
    {
        const char *junk = t_tmp_path("junk.gguf");
        FILE *f = fopen(junk, "w");
        fputs("this is not a model", f);
        fclose(f);
        CHECK_EQ_INT(sh("%s info -m %s", bin, junk), 1);
        CHECK_MSG(strstr(g_out, "magic") != NULL, "%s", g_out);
        unlink(junk);
    }

    /* gen-model writes a model that runs */
    {
        char out[1024];
        snprintf(out, sizeof out, "%s", t_tmp_path("cli-tiny.gguf"));
        CHECK_EQ_INT(sh("%s gen-model --preset tiny-llama --type Q4_0 --vocab-from %s -o %s", bin,
                        model, out), 0);
        CHECK_EQ_INT(sh("%s run -m %s -p 'Hello' -n 3 -q", bin, out), 0);
        /* a mix: llama.cpp's rules for 8 blocks of 256-wide rows (untied:
         * output Q6_K; attn_v and ffn_down Q6_K on layers 0, 3, 6, 7) */
        CHECK_EQ_INT(sh("%s gen-model --preset tiny-llama --embd 256 --ff 512 --heads 4 --kv-heads 2 "
                        "--head-dim 64 --layers 8 --type q4_k_m --vocab-from %s -o %s", bin, model, out), 0);
        CHECK_EQ_INT(sh("%s info -m %s", bin, out), 0);
        CHECK_MSG(strstr(g_out, "  types: Q4_K_M: Q4_K ×49, Q6_K ×9, F32 ×17\n") != NULL, "%s", g_out);
        CHECK_EQ_INT(sh("%s run -m %s -p 'Hello' -n 3 -q", bin, out), 0);
        CHECK_EQ_INT(sh("%s gen-model --preset no-such-preset --vocab-from %s -o %s", bin, model, out), 1);
        CHECK_MSG(strstr(g_out, "no-such-preset") != NULL, "%s", g_out);
        unlink(out);
    }
    return t_done("test_cli");
}
