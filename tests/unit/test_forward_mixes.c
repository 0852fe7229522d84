/*
 * test_forward_mixes.c — the real SmolLM2 weights in each quantization mix
 * (Q4_K_M, Q5_K_M, Q6_K, Q3_K_M, Q2_K, Q5_0, Q5_1, IQ4_NL, IQ4_XS) against
 * llama.cpp running the very same file (tests/golden/mixes/, made by
 * scripts/golden/make_golden.py --mixes with llama-cpp-python).
 *
 * The files are made here by our own quantizer (mz_quantize_file, the code
 * of `mzcache quantize`: deterministic) from models/SmolLM2 Q4_1 into
 * $MZ_TEST_TMP/mixes/ (kept for the next run and for test_dequant_gguf),
 * and the sha256 of each is checked first against the file the goldens were
 * made on: a different file is a changed quantizer, not a wrong forward pass.
 *
 * Per mix:
 *   positions  a 64-token prompt fed one token at a time: our top-1 at every
 *              position equals llama.cpp's, except where llama.cpp's own gap
 *              between its best and second-best logit is within its noise
 *              there (how far its logits at that position move when it
 *              switches flash attention on); each split is printed with that
 *              gap, next to llama.cpp's own agreement (flash attention on vs
 *              off) over the 64 positions;
 *   greedy     continuations of a few prompts token for token, stopping at
 *              a split, which must likewise be a near-tie: within peer_max,
 *              the largest such move over the prompt (gap printed).
 *
 * tests/golden/arch/ holds cases of the same form on generated shapes of the
 * other architectures (qwen2: Q/K/V biases), "model gen:PRESET:TYPE": the
 * file is made by gen-model (deterministic) and its sha256 checked first.
 *
 * MZ_MIX_GOLDEN_DIR=DIR runs the cases of DIR as well, whose "model file:PATH"
 * lines name files made elsewhere (llama.cpp's own quantizer: the golden
 * script writes such cases); a case whose file is absent is skipped, saying so.
 */
#define _GNU_SOURCE
#include "model/quantize.h"
#include "mzcache.h"
#include "testutil.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIX_DIR "tests/golden/mixes"
#define ARCH_DIR "tests/golden/arch"
#define N_POS 64
#define MAX_GREEDY 8
#define MAX_TOK 256

typedef struct greedy_case {
    char name[32];
    mz_token prompt[MAX_TOK];
    size_t n_prompt;
    mz_token cont[64];
    size_t n_cont;
    float margins[64];
} greedy_case;

typedef struct mix_case {
    char model[512];
    char sha[65];
    double peer_max;
    mz_token pos[N_POS], top1[N_POS];
    float gaps[N_POS], noise[N_POS]; /* llama.cpp's top-2 gap; its FA on/off change */
    mz_token top1_fa[N_POS];         /* llama.cpp's top-1 with flash attention on */
    size_t n_pos, n_top1, n_gaps, n_noise, n_top1_fa;
    greedy_case greedy[MAX_GREEDY];
    int n_greedy;
} mix_case;

/* "greedy NAME | prompt ids | continuation ids | margins" */
static int parse_greedy(char *line, greedy_case *g)
{
    char *f[4];
    for (int i = 0; i < 4; i++) {
        f[i] = strsep(&line, "|");
        if (!f[i]) return -1;
    }
    if (sscanf(f[0], "%31s", g->name) != 1) return -1;
    g->n_prompt = t_parse_ids(f[1], g->prompt, MAX_TOK);
    g->n_cont = t_parse_ids(f[2], g->cont, 64);
    return t_parse_floats(f[3], g->margins, 64) == g->n_cont && g->n_prompt ? 0 : -1;
}

static int read_case(const char *path, mix_case *c)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    memset(c, 0, sizeof *c);
    static char line[1 << 15];
    int bad = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!strncmp(line, "model ", 6)) snprintf(c->model, sizeof c->model, "%.511s", line + 6);
        else if (!strncmp(line, "sha256 ", 7)) snprintf(c->sha, sizeof c->sha, "%.64s", line + 7);
        else if (!strncmp(line, "peer_max ", 9)) c->peer_max = strtod(line + 9, NULL);
        else if (!strncmp(line, "positions ", 10)) c->n_pos = t_parse_ids(line + 10, c->pos, N_POS);
        else if (!strncmp(line, "top1 ", 5)) c->n_top1 = t_parse_ids(line + 5, c->top1, N_POS);
        else if (!strncmp(line, "gaps ", 5)) c->n_gaps = t_parse_floats(line + 5, c->gaps, N_POS);
        else if (!strncmp(line, "noise ", 6)) c->n_noise = t_parse_floats(line + 6, c->noise, N_POS);
        else if (!strncmp(line, "top1_fa ", 8)) c->n_top1_fa = t_parse_ids(line + 8, c->top1_fa, N_POS);
        else if (!strncmp(line, "greedy ", 7) && c->n_greedy < MAX_GREEDY)
            bad |= parse_greedy(line + 7, &c->greedy[c->n_greedy++]);
    }
    fclose(f);
    return !bad && c->n_pos == N_POS && c->n_top1 == N_POS && c->n_gaps == N_POS &&
                   c->n_noise == N_POS && c->n_top1_fa == N_POS && c->sha[0]
               ? 0
               : -1;
}

/* "gen:PRESET:TYPE": gen-model's file (seed 1, SmolLM2's vocabulary, as
 * `mzcache gen-model` makes it) at buf. */
static const char *gen_model_file(const mix_case *c, char *buf, size_t cap)
{
    char preset[64], type[32];
    if (sscanf(c->model + 4, "%63[^:]:%31s", preset, type) != 2) {
        CHECK_MSG(0, "bad model line '%s'", c->model);
        return NULL;
    }
    snprintf(buf, cap, "%s/arch-%s-%s.gguf", t_tmp_dir(), preset, type);
    mz_gen_params gp = mz_gen_params_default();
    gp.preset = preset;
    gp.weight_type = type;
    gp.vocab_from = t_real_model_path();
    if (mz_gen_model(buf, &gp) != MZ_OK) {
        CHECK_MSG(0, "gen-model %s %s: %s", preset, type, mz_last_error());
        return NULL;
    }
    return buf;
}

/* The model file of a case: "mix:NAME" is made by our quantizer (again when
 * absent or not the goldens' file), "gen:PRESET:TYPE" by gen-model, and
 * "file:PATH" must exist. NULL: skip. */
static const char *case_model(const mix_case *c, char *buf, size_t cap, bool *skip)
{
    char sha[65];
    *skip = false;
    if (!strncmp(c->model, "file:", 5)) {
        const char *p = c->model + 5;
        if (access(p, R_OK) || t_sha256_file(p, sha) || strcmp(sha, c->sha)) {
            printf("  skip: %s absent or not the file the case was made on\n", p);
            *skip = true;
            return NULL;
        }
        return p;
    }
    if (!strncmp(c->model, "gen:", 4)) {
        const char *p = gen_model_file(c, buf, cap);
        CHECK_MSG(!p || (!t_sha256_file(p, sha) && !strcmp(sha, c->sha)),
                  "%s: gen-model's file is not the one the goldens were made on: re-run "
                  "scripts/golden/make_golden.py --arch", c->model);
        return p && !strcmp(sha, c->sha) ? p : NULL;
    }
    if (strncmp(c->model, "mix:", 4)) return NULL;
    const char *mix = c->model + 4;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/mixes", t_tmp_dir());
    mkdir(dir, 0755);
    snprintf(buf, cap, "%s/SmolLM2-135M-Instruct.%s.gguf", dir, mix);
    if (!t_sha256_file(buf, sha) && !strcmp(sha, c->sha)) return buf;
    mz_quantize_params qp = {.mix = mix};
    if (mz_quantize_file(t_real_model_path(), buf, &qp) != MZ_OK) {
        CHECK_MSG(0, "quantize %s: %s", mix, mz_last_error());
        return NULL;
    }
    CHECK_MSG(!t_sha256_file(buf, sha) && !strcmp(sha, c->sha),
              "%s: our quantizer's %s file (sha256 %s) is not the one the goldens were made on (%s): "
              "the quantizer changed; re-run scripts/golden/make_golden.py --mixes",
              c->model, mix, sha, c->sha);
    return strcmp(sha, c->sha) ? NULL : buf;
}

static mz_token argmax(const float *l, int n)
{
    mz_token best = 0;
    for (int v = 1; v < n; v++)
        if (l[v] > l[best]) best = v;
    return best;
}

static int g_splits, g_near_ties, g_greedy_full, g_greedy_cases;

static void run_case(const char *label, const mix_case *mc)
{
    char buf[1024];
    bool skip;
    const char *model = case_model(mc, buf, sizeof buf, &skip);
    if (!model) return;
    mz_model_t *m = NULL;
    mz_ctx_t *c = NULL;
    CHECK_MSG(mz_model_load(model, NULL, &m) == MZ_OK, "%s: %s", model, mz_last_error());
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = 512;
    cp.n_threads = 2;
    if (!m || mz_ctx_init(m, &cp, &c) != MZ_OK) {
        CHECK_MSG(0, "%s: no context: %s", label, mz_last_error());
        mz_model_free(m);
        return;
    }
    int n_vocab = mz_model_n_vocab(m);
    /* every position of the prompt, one token at a time */
    int same = 0;
    for (int i = 0; i < N_POS; i++) {
        if (mz_prefill(c, &mc->pos[i], 1) != MZ_OK) {
            CHECK_MSG(0, "%s: prefill: %s", label, mz_ctx_errmsg(c));
            break;
        }
        const float *l = mz_ctx_logits(c);
        mz_token t = argmax(l, n_vocab);
        if (t == mc->top1[i]) {
            same++;
            continue;
        }
        g_splits++;
        printf("  %-22s position %2d: ours %d, llama.cpp %d (its top-2 gap %.4f, its noise there %.4f; "
               "our logits for the two differ by %.4f)\n", label, i, t, mc->top1[i], mc->gaps[i],
               mc->noise[i], l[t] - l[mc->top1[i]]);
        g_near_ties += mc->gaps[i] <= mc->noise[i];
        CHECK_MSG(mc->gaps[i] <= mc->noise[i], "%s: top-1 differs at position %d where llama.cpp was sure",
                  label, i);
    }
    int peer_same = 0;
    for (int i = 0; i < N_POS; i++) peer_same += mc->top1_fa[i] == mc->top1[i];
    printf("  %-22s top-1 at %d of %d positions identical (llama.cpp, flash attention on vs off: %d)\n",
           label, same, N_POS, peer_same);
    /* greedy continuations */
    for (int k = 0; k < mc->n_greedy; k++) {
        const greedy_case *g = &mc->greedy[k];
        size_t ok = 0;
        if (mz_ctx_truncate(c, 0) != MZ_OK || mz_prefill(c, g->prompt, g->n_prompt) != MZ_OK) {
            CHECK_MSG(0, "%s %s: prefill: %s", label, g->name, mz_ctx_errmsg(c));
            continue;
        }
        for (size_t i = 0; i < g->n_cont; i++) {
            const float *l = mz_ctx_logits(c);
            mz_token t = argmax(l, n_vocab);
            if (t != g->cont[i]) {
                printf("  %-22s greedy %-8s token %zu: ours %d, llama.cpp %d (its top-2 gap %.4f, its "
                       "noise %.4f)\n", label, g->name, i, t, g->cont[i], g->margins[i], mc->peer_max);
                CHECK_MSG(g->margins[i] <= mc->peer_max, "%s %s: greedy split at %zu where llama.cpp was sure",
                          label, g->name, i);
                break;
            }
            ok++;
            if (mz_prefill(c, &t, 1) != MZ_OK) break;
        }
        g_greedy_cases++;
        g_greedy_full += ok == g->n_cont;
        printf("  %-22s greedy %-8s %zu/%zu tokens identical\n", label, g->name, ok, g->n_cont);
    }
    mz_ctx_free(c);
    mz_model_free(m);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Under sanitizers (MZ_SANITIZED) the quantizers run several times slower:
 * two mixes only, a K-quant mix and a 32-block one. */
static bool wanted(const char *name)
{
    if (!getenv("MZ_SANITIZED")) return true;
    return strstr(name, "Q4_K_M") || strstr(name, "Q5_0") || !strncmp(name, "tiny-", 5);
}

static int run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    char *names[64];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 64) {
        size_t len = strlen(e->d_name);
        if (len > 4 && !strcmp(e->d_name + len - 4, ".txt") && wanted(e->d_name)) names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    static mix_case mc;
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (read_case(path, &mc)) CHECK_MSG(0, "cannot read %s", path);
        else run_case(names[i], &mc);
        free(names[i]);
    }
    return n;
}

int main(void)
{
    if (!t_real_model_path()) return t_skip("test_forward_mixes", "models/ has no SmolLM2 (run make model)");
    int n = run_dir(MIX_DIR);
    if (getenv("MZ_SANITIZED")) printf("test_forward_mixes: MZ_SANITIZED: the Q4_K_M and Q5_0 mixes only\n");
    CHECK_MSG(n >= (getenv("MZ_SANITIZED") ? 2 : 9), "only %d mix cases in %s", n, MIX_DIR);
    int n_arch = run_dir(ARCH_DIR);
    CHECK_MSG(n_arch >= 2, "only %d cases in %s", n_arch, ARCH_DIR);
    const char *extra = getenv("MZ_MIX_GOLDEN_DIR");
    if (extra) run_dir(extra);
    printf("top-1 splits: %d, all at llama.cpp near-ties: %s; greedy continuations identical: %d of %d\n",
           g_splits, g_near_ties == g_splits ? "yes" : "no", g_greedy_full, g_greedy_cases);
    return t_done("test_forward_mixes");
}
