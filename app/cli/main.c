/*
 * main.c — the `mzcache` command: run, chat, info, tokenize, gen-model.
 *
 * Everything here goes through the public API in mzcache.h, like any user
 * program would; the CLI adds argument parsing, progress and timing output.
 */
#define _GNU_SOURCE
#include "mzcache.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "harness/harness.h" /* not public: the library's one monotonic clock */

volatile sig_atomic_t cli_interrupted;

/* ---- shared options ----------------------------------------------------------- */

void cli_opts_defaults(cli_opts *o)
{
    memset(o, 0, sizeof *o);
    o->n_predict = 256;
    o->n_ctx = 8192;
    o->n_batch = 64;
    o->sampler = mz_sampler_params_default();
}

bool cli_has_value(const char *opt, const char *v)
{
    if (!v) {
        fprintf(stderr, "mzcache: %s needs a value\n", opt);
        return false;
    }
    /* "-p -n 5": the next word is an option, not the value that is missing
     * ("-1" and "-" are values). */
    if (v[0] == '-' && (v[1] == '-' || (v[1] >= 'a' && v[1] <= 'z') || (v[1] >= 'A' && v[1] <= 'Z'))) {
        fprintf(stderr, "mzcache: %s needs a value (the next word, '%s', is an option)\n", opt, v);
        return false;
    }
    return true;
}

uint64_t cli_random_seed(void)
{
    uint64_t seed = 0;
    if (getentropy(&seed, sizeof seed) != 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40);
    }
    return seed;
}

/* Parses a sampling/runtime option at argv[*i]; returns 1 if consumed,
 * 0 if not ours, -1 on a bad value. */
int cli_parse_common(cli_opts *o, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
#define NEED_VALUE()                                                                 \
    do {                                                                             \
        if (!cli_has_value(a, v)) return -1;                                         \
        (*i)++;                                                                      \
    } while (0)
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED_VALUE(); o->model = v; return 1; }
    if (!strcmp(a, "--chat-template")) { NEED_VALUE(); o->chat_template = v; return 1; }
    /* Ranges: what the engine can do (threads and batch are capped there at
     * 256 and 4096), or what the sampler accepts. */
    if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { NEED_VALUE(); return cli_opt_int(a, v, 0, 256, &o->n_threads) ? -1 : 1; }
    if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
        NEED_VALUE();
        if (cli_opt_int(a, v, 0, CLI_MAX_CTX, &o->n_ctx)) return -1;
        o->ctx_given = true;
        return 1;
    }
    if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) { NEED_VALUE(); return cli_opt_int(a, v, 1, 4096, &o->n_batch) ? -1 : 1; }
    if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { NEED_VALUE(); return cli_opt_int(a, v, -1, 1 << 24, &o->n_predict) ? -1 : 1; }
    if (!strcmp(a, "--temp")) { NEED_VALUE(); return cli_opt_float(a, v, 0, 100, &o->sampler.temperature) ? -1 : 1; }
    if (!strcmp(a, "--top-k")) { NEED_VALUE(); return cli_opt_int(a, v, 0, 1 << 20, &o->sampler.top_k) ? -1 : 1; }
    if (!strcmp(a, "--top-p")) { NEED_VALUE(); return cli_opt_float(a, v, 0, 1, &o->sampler.top_p) ? -1 : 1; }
    if (!strcmp(a, "--min-p")) { NEED_VALUE(); return cli_opt_float(a, v, 0, 1, &o->sampler.min_p) ? -1 : 1; }
    if (!strcmp(a, "--repeat-penalty")) { NEED_VALUE(); return cli_opt_float(a, v, 0.01, 100, &o->sampler.repeat_penalty) ? -1 : 1; }
    if (!strcmp(a, "--repeat-last-n")) { NEED_VALUE(); return cli_opt_int(a, v, 0, 1 << 20, &o->sampler.repeat_last_n) ? -1 : 1; }
    if (!strcmp(a, "-s") || !strcmp(a, "--seed")) {
        NEED_VALUE();
        if (!strcmp(v, "-1")) { /* llama.cpp's "random seed" */
            o->sampler.seed = cli_random_seed();
            o->seed_given = false;
            return 1;
        }
        if (cli_opt_u64(a, v, &o->sampler.seed)) return -1;
        o->seed_given = true;
        return 1;
    }
    if (!strcmp(a, "--greedy")) { o->sampler.temperature = 0.0f; return 1; }
    if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) { o->quiet = true; return 1; }
    if (!strcmp(a, "--no-progress")) { o->no_progress = true; return 1; }
#undef NEED_VALUE
    return 0;
}

const char *cli_common_help =
    "  -m, --model FILE        GGUF model file (required)\n"
    "      --chat-template NAME  chatml, gemma, llama3 or mistral instead of the family\n"
    "                          recognised in the model's own template\n"
    "  -t, --threads N         compute threads, 1..256 (default 0: all cores)\n"
    "  -c, --ctx-size N        context length in tokens (default 8192, or the model's trained\n"
    "                          length if shorter; serve: 4096; 0 = the trained length)\n"
    "  -b, --batch-size N      tokens per forward step during prefill (default 64)\n"
    "  -n, --n-predict N       tokens to generate (default 256; -1 = until end of text)\n"
    "      --temp T            sampling temperature (default 0.8; 0 = greedy)\n"
    "      --top-k K           keep the K most likely tokens (default 40; 0 = off)\n"
    "      --top-p P           nucleus sampling (default 0.95; 1 = off)\n"
    "      --min-p P           drop tokens below P x the best one's probability (default 0.05)\n"
    "      --repeat-penalty X  penalise recently seen tokens (default 1.0 = off)\n"
    "      --repeat-last-n N   how many recent tokens the penalty looks at (default 64)\n"
    "  -s, --seed N            random seed (default fixed, so runs repeat; -1: a random one;\n"
    "                          serve: without -s each request without a seed gets a fresh one)\n"
    "      --greedy            always take the most likely token (same as --temp 0)\n"
    "  -q, --quiet             no timings or progress on stderr\n"
    "      --no-progress       no progress indicator during long prefills\n";

mz_status cli_load(cli_opts *o, mz_model_t **model, mz_ctx_t **ctx)
{
    if (!o->model) {
        fprintf(stderr, "mzcache: no model given; use -m FILE (try: make model, then -m "
                        "models/SmolLM2-135M-Instruct.Q4_1.gguf)\n");
        return MZ_E_INVAL;
    }
    mz_model_params mp = mz_model_params_default();
    mp.n_threads = o->n_threads;
    mp.chat_template = o->chat_template;
    mz_status s = mz_model_load(o->model, &mp, model);
    if (s) {
        fprintf(stderr, "mzcache: cannot load model: %s\n", mz_last_error());
        return s;
    }
    cli_fit_ctx(o, *model);
    if (!ctx) return MZ_OK;
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = o->n_ctx;
    cp.n_threads = o->n_threads;
    cp.n_batch = o->n_batch;
    cp.swap_dir = o->swap_dir;
    cp.progress = cli_progress; /* also what lets Ctrl-C stop a long prefill */
    cp.progress_user = cli_progress_shown(o);
    s = mz_ctx_init(*model, &cp, ctx);
    if (s) {
        fprintf(stderr, "mzcache: cannot create context: %s\n", mz_last_error());
        mz_model_free(*model);
        *model = NULL;
    }
    return s;
}

/* Non-NULL (the progress callback's user pointer) when progress is printed. */
void *cli_progress_shown(const cli_opts *o)
{
    static int shown;
    return !o->quiet && !o->no_progress && isatty(STDERR_FILENO) ? &shown : NULL;
}

bool cli_progress(void *user, size_t n_done, size_t n_total)
{
    if (cli_interrupted) return false;
    if (!user || n_total < 256) return true;
    fprintf(stderr, "\rprefill: %zu/%zu tokens (%zu%%)", n_done, n_total, n_done * 100 / n_total);
    if (n_done == n_total) fputs("\r\033[K", stderr);
    return true;
}

double cli_now_ms(void) { return mz_harness_time_ms(); }

/* Counted here rather than from mz_ctx_get_timings, which files every
 * one-token forward pass under decode (a one-token prompt, the end-of-turn
 * token, the last sampled token): the user asked for n tokens and sees n. */
void cli_print_gen_timings(size_t n_prompt, double prompt_ms, const cli_gen_result *g)
{
    fprintf(stderr, "\nprefill: %zu tokens in %.0f ms (%.1f tok/s) | decode: %zu tokens in %.0f ms (%.1f tok/s)",
            n_prompt, prompt_ms, prompt_ms > 0 ? (double)n_prompt * 1000.0 / prompt_ms : 0.0,
            g->n_tokens, g->ms, g->ms > 0 ? (double)g->n_tokens * 1000.0 / g->ms : 0.0);
    /* Why it stopped, in mz_finish_name's words (eog, length, ...). */
    if (g->finish != MZ_FINISH_NONE) fprintf(stderr, " | finish: %s", mz_finish_name(g->finish));
    fputc('\n', stderr);
}

/* Text (msgs NULL) or chat messages through the template, into a buffer
 * grown to the count the first pass reports. */
static mz_status tokenize_grow(const mz_model_t *m, const char *text, const mz_chat_msg *msgs, size_t n_msgs,
                               bool add_special, bool parse_special, bool add_assistant, mz_token **out,
                               size_t *n_out)
{
    size_t len = text ? strlen(text) : 0, n = 0, cap = len + 256;
    mz_token *toks = NULL;
    mz_status s = MZ_E_RANGE;
    for (int pass = 0; pass < 2 && s == MZ_E_RANGE; pass++) {
        mz_token *bigger = realloc(toks, cap * sizeof *toks);
        if (!bigger) {
            free(toks);
            return MZ_E_NOMEM;
        }
        toks = bigger;
        s = msgs ? mz_chat_tokenize(m, msgs, n_msgs, add_assistant, toks, cap, &n)
                 : mz_tokenize(m, text, len, add_special, parse_special, toks, cap, &n);
        cap = n;
    }
    if (s) {
        free(toks);
        fprintf(stderr, "mzcache: %s failed: %s\n", msgs ? "chat template" : "tokenize", mz_last_error());
        return s;
    }
    *out = toks;
    *n_out = n;
    return MZ_OK;
}

mz_status cli_tokenize(const mz_model_t *m, const char *text, bool add_special, bool parse_special,
                       mz_token **out, size_t *n_out)
{
    return tokenize_grow(m, text, NULL, 0, add_special, parse_special, false, out, n_out);
}

mz_status cli_tokenize_chat(const mz_model_t *m, const mz_chat_msg *msgs, size_t n_msgs, bool add_assistant,
                            mz_token **out, size_t *n_out)
{
    return tokenize_grow(m, NULL, msgs, n_msgs, true, true, add_assistant, out, n_out);
}

/* Printing for cli_generate: each token's text goes out as it comes, and
 * into the answer when one is wanted. */
typedef struct cli_printer {
    FILE *out;
    mz_detok_t *dt;
    bool show_ids;             /* a "token ID lead L" line on stderr per token, "end ID lead L"
                                  for the end of generation */
    const mz_model_t *model;
    const mz_ctx_t *ctx;       /* its logits are those a token is sampled from (on_sample) */
    char *text;                /* NULL: no answer kept */
    size_t len, cap;
    bool nomem;
} cli_printer;

static void printer_put(cli_printer *pr, const char *buf, size_t nb)
{
    fwrite(buf, 1, nb, pr->out);
    fflush(pr->out);
    if (!pr->text || pr->nomem) return;
    if (pr->len + nb + 1 > pr->cap) {
        size_t cap = pr->cap;
        while (pr->len + nb + 1 > cap) cap *= 2;
        char *bigger = realloc(pr->text, cap);
        if (!bigger) {
            pr->nomem = true;
            return;
        }
        pr->text = bigger;
        pr->cap = cap;
    }
    memcpy(pr->text + pr->len, buf, nb);
    pr->len += nb;
    pr->text[pr->len] = '\0';
}

/* How far token t's logit is above the best other token's: the margin by
 * which greedy decoding chose it (negative when t was sampled below the top). */
static float logit_lead(mz_token t, const float *logits, int n_vocab)
{
    float other = -INFINITY;
    for (int i = 0; i < n_vocab; i++)
        if (i != t && logits[i] > other) other = logits[i];
    return logits[t] - other;
}

static mz_gen_action printer_token(void *user, mz_token t, const float *logits, int n_vocab)
{
    cli_printer *pr = user;
    if (pr->show_ids) fprintf(stderr, "token %d lead %.4f\n", (int)t, (double)logit_lead(t, logits, n_vocab));
    char buf[256];
    size_t nb = mz_detok_push(pr->dt, t, false, buf, sizeof buf);
    printer_put(pr, buf, nb);
    return pr->nomem ? MZ_GEN_FAIL : MZ_GEN_CONTINUE;
}

/* The end of generation never reaches printer_token (it is not part of the
 * answer); with --show-ids it gets a line of its own, so a greedy answer that
 * stops shows by what margin it chose to. */
static bool printer_sample(void *user, mz_token t)
{
    cli_printer *pr = user;
    if (pr->show_ids && mz_token_is_eog(pr->model, t)) {
        const float *logits = mz_ctx_logits(pr->ctx);
        if (logits)
            fprintf(stderr, "end %d lead %.4f\n", (int)t,
                    (double)logit_lead(t, logits, mz_model_n_vocab(pr->model)));
    }
    return true;
}

static bool printer_cancelled(void *user)
{
    (void)user;
    return cli_interrupted != 0;
}

mz_status cli_generate(const cli_opts *o, mz_model_t *m, mz_ctx_t *ctx, mz_sampler_t *smp,
                       FILE *out, char **text_out, cli_gen_result *res)
{
    if (res) *res = (cli_gen_result){0};
    double t0 = cli_now_ms();
    cli_printer pr = {.out = out, .show_ids = o->show_ids, .model = m, .ctx = ctx};
    mz_status s = mz_detok_init(m, &pr.dt);
    if (s) return s;
    if (text_out) {
        pr.cap = 256;
        pr.text = malloc(pr.cap);
        if (pr.text) pr.text[0] = '\0';
    }
    mz_generate_params gp = mz_generate_params_default();
    if (o->n_predict >= 0) gp.max_tokens = (size_t)o->n_predict;
    gp.on_token = printer_token;
    gp.on_sample = printer_sample;
    gp.cancelled = printer_cancelled;
    gp.user = &pr;
    mz_generate_result g;
    s = mz_generate(ctx, smp, &gp, &g);
    if (pr.nomem) s = MZ_E_NOMEM;
    if (s) fprintf(stderr, "\nmzcache: %s\n", pr.nomem ? "out of memory keeping the answer" : mz_last_error());
    char buf[16];
    size_t nb = mz_detok_flush(pr.dt, buf, sizeof buf);
    printer_put(&pr, buf, nb);
    mz_detok_free(pr.dt);
    if (res)
        *res = (cli_gen_result){
            .n_tokens = g.n_tokens,
            .ms = cli_now_ms() - t0,
            .finish = g.finish,
            .eog = g.finish == MZ_FINISH_EOG,
            .interrupted = g.finish == MZ_FINISH_CANCELLED,
            .ctx_full = g.finish == MZ_FINISH_CTX_FULL,
        };
    if (text_out) *text_out = pr.text;
    else free(pr.text);
    return s;
}

/* ---- run ------------------------------------------------------------------------ */

static char *read_all(FILE *f)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    size_t r;
    while ((r = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += r;
        if (cap - len - 1 == 0) {
            cap *= 2;
            char *bigger = realloc(buf, cap);
            if (!bigger) { free(buf); return NULL; }
            buf = bigger;
        }
    }
    buf[len] = '\0';
    return buf;
}


static int cmd_run(int argc, char **argv)
{
    cli_opts o;
    cli_opts_defaults(&o);
    const char *prompt = NULL, *prompt_file = NULL;
    bool chat = false;
    const char *system = NULL;
    char *prompt_read = NULL;
    for (int i = 1; i < argc; i++) {
        int r = cli_parse_common(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes_value = !strcmp(a, "-p") || !strcmp(a, "--prompt") || !strcmp(a, "-f") || !strcmp(a, "--file") ||
                           !strcmp(a, "--system");
        if (takes_value) {
            /* A prompt may begin with '-'; "-p" followed by another option is
             * still a missing value. */
            if (!v || ((!strcmp(a, "-f") || !strcmp(a, "--file")) && !cli_has_value(a, v))) {
                if (!v) fprintf(stderr, "mzcache run: %s needs a value\n", a);
                return 2;
            }
            i++;
            if (!strcmp(a, "--system")) system = v;
            else if (!strcmp(a, "-f") || !strcmp(a, "--file")) prompt_file = v;
            else prompt = v;
        } else if (!strcmp(a, "--chat")) chat = true;
        else if (!strcmp(a, "--show-ids")) o.show_ids = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: mzcache run -m MODEL (-p PROMPT | -f FILE) [options]\n\n"
                   "Generates text after PROMPT and prints it, then the speed on stderr.\n\n"
                   "  -p, --prompt TEXT       the prompt (-p - reads it from standard input)\n"
                   "  -f, --file FILE         read the prompt from FILE\n"
                   "      --chat              wrap the prompt as a user message in the model's chat template\n"
                   "      --system TEXT       system message (with --chat)\n"
                   "      --show-ids          each generated token as \"token ID lead L\" on stderr: its id and\n"
                   "                          how far its logit is above the runner-up's (greedy: the margin);\n"
                   "                          the end of generation, when sampled, as \"end ID lead L\"\n%s",
                   cli_common_help);
            return 0;
        } else {
            fprintf(stderr, "mzcache run: unknown option '%s' (see mzcache run --help)\n", a);
            return 2;
        }
    }
    if (prompt && prompt_file) {
        fprintf(stderr, "mzcache run: give the prompt once: -p TEXT or -f FILE\n");
        return 2;
    }
    if (system && !chat) {
        fprintf(stderr, "mzcache run: --system needs --chat (a system message belongs to the chat template)\n");
        return 2;
    }
    if (prompt_file || (prompt && !strcmp(prompt, "-"))) {
        FILE *f = prompt_file ? fopen(prompt_file, "re") : stdin;
        if (!f) {
            fprintf(stderr, "mzcache run: cannot read %s: %s\n", prompt_file, strerror(errno));
            return 2;
        }
        prompt_read = read_all(f);
        if (f != stdin) fclose(f);
        if (!prompt_read) {
            fprintf(stderr, "mzcache run: cannot read the prompt from %s\n", prompt_file ? prompt_file : "stdin");
            return 1;
        }
        prompt = prompt_read;
    }
    if (!prompt) {
        fprintf(stderr, "mzcache run: no prompt; use -p TEXT, -p - (stdin) or -f FILE (see mzcache run --help)\n");
        return 2;
    }
    mz_model_t *m = NULL;
    mz_ctx_t *ctx = NULL;
    mz_sampler_t *smp = NULL;
    mz_token *toks = NULL;
    size_t n = 0;
    int rc = 1;
    if (cli_load(&o, &m, &ctx)) {
        free(prompt_read);
        return 1;
    }
    if (chat) {
        mz_chat_msg msgs[2];
        size_t nm = 0;
        if (system) msgs[nm++] = (mz_chat_msg){"system", system};
        msgs[nm++] = (mz_chat_msg){"user", prompt};
        if (cli_tokenize_chat(m, msgs, nm, true, &toks, &n)) goto out;
    } else if (cli_tokenize(m, prompt, true, false, &toks, &n)) {
        goto out;
    }
    if (n == 0) {
        /* The sampler needs the logits of at least one token. */
        fprintf(stderr, "mzcache run: the prompt is empty (no tokens); give some text with -p\n");
        rc = 2;
        goto out;
    }    if (mz_sampler_init(&o.sampler, &smp)) {
        fprintf(stderr, "mzcache: %s\n", mz_last_error());
        goto out;
    }
    for (size_t i = 0; i < n; i++) mz_sampler_accept(smp, toks[i]);
    if (n >= mz_ctx_n_ctx(ctx)) {
        if (n == mz_ctx_n_ctx(ctx))
            fprintf(stderr, "mzcache run: the prompt has %zu tokens and fills the context (%zu): no room is left "
                    "for an answer (raise -c)\n", n, mz_ctx_n_ctx(ctx));
        else
            fprintf(stderr, "mzcache run: the prompt has %zu tokens; the context holds %zu (raise -c)\n", n,
                    mz_ctx_n_ctx(ctx));
        goto out;
    }
    if (!chat) fputs(prompt, stdout);
    double t0 = cli_now_ms();
    if (mz_prefill(ctx, toks, n)) {
        fprintf(stderr, "mzcache: prefill failed: %s\n", mz_ctx_errmsg(ctx));
        goto out;
    }
    double prompt_ms = cli_now_ms() - t0;
    cli_gen_result g;
    if (cli_generate(&o, m, ctx, smp, stdout, NULL, &g)) goto out;
    fputc('\n', stdout);
    fflush(stdout); /* the notice on stderr goes after the answer's line, never inside it */
    if (g.ctx_full) fprintf(stderr, "mzcache run: stopped: the context (%zu tokens) is full\n", mz_ctx_n_ctx(ctx));
    if (!o.quiet) cli_print_gen_timings(n, prompt_ms, &g);
    rc = 0;
out:
    free(toks);
    free(prompt_read);
    mz_sampler_free(smp);
    mz_ctx_free(ctx);
    mz_model_free(m);
    return rc;
}

mz_status cli_format_chat(const mz_model_t *m, const mz_chat_msg *msgs, size_t n, char **out)
{
    size_t need = 0;
    mz_status s = mz_chat_format(m, msgs, n, true, NULL, 0, &need);
    if (s && s != MZ_E_RANGE) {
        fprintf(stderr, "mzcache: chat template: %s\n", mz_last_error());
        return s;
    }
    char *buf = malloc(need + 1);
    if (!buf) return MZ_E_NOMEM;
    s = mz_chat_format(m, msgs, n, true, buf, need + 1, &need);
    if (s) {
        free(buf);
        fprintf(stderr, "mzcache: chat template: %s\n", mz_last_error());
        return s;
    }
    *out = buf;
    return MZ_OK;
}

/* ---- info ------------------------------------------------------------------------- */

static int cmd_info(int argc, char **argv)
{
    cli_opts o;
    cli_opts_defaults(&o);
    for (int i = 1; i < argc; i++) {
        int r = cli_parse_common(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: mzcache info -m MODEL\n\n"
                   "Prints the model's metadata, its tensor table, its quantization mix (\"types:\n"
                   "Q4_K_M: Q4_K ×…, Q6_K ×…\") and the memory of each unit (the pieces mzcache can\n"
                   "evict: one per transformer block, one per KV chunk). A file mzcache cannot\n"
                   "load is still shown, with the reason, and the exit status is 1.\n");
            return 0;
        }
        fprintf(stderr, "mzcache info: unknown option '%s'\n", argv[i]);
        return 2;
    }
    return cli_info(&o);
}

/* ---- tokenize ----------------------------------------------------------------------- */

static int cmd_tokenize(int argc, char **argv)
{
    cli_opts o;
    cli_opts_defaults(&o);
    const char *prompt = NULL;
    bool from_stdin = false, pieces = false, add_special = false, parse_special = true;
    for (int i = 1; i < argc; i++) {
        int r = cli_parse_common(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "-p") || !strcmp(argv[i], "--prompt")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "mzcache tokenize: %s needs a value\n", argv[i]);
                return 2;
            }
            prompt = argv[++i];
        } else if (!strcmp(argv[i], "--stdin")) from_stdin = true;
        else if (!strcmp(argv[i], "--show-pieces")) pieces = true;
        else if (!strcmp(argv[i], "--add-special")) add_special = true;
        else if (!strcmp(argv[i], "--no-parse-special")) parse_special = false;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: mzcache tokenize -m MODEL (-p TEXT | --stdin) [options]\n\n"
                   "Prints the token ids of TEXT, one per line.\n\n"
                   "  -p, --prompt TEXT       text to tokenize\n"
                   "      --stdin             read the text from standard input\n"
                   "      --show-pieces       print 'id -> 'piece'' lines instead of bare ids\n"
                   "      --add-special       add BOS if the model asks for it\n"
                   "      --no-parse-special  treat text like <|im_start|> as plain text\n");
            return 0;
        } else {
            fprintf(stderr, "mzcache tokenize: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    char *text = NULL;
    if (from_stdin) {
        text = read_all(stdin);
        if (!text) return 1;
    } else if (!prompt) {
        fprintf(stderr, "mzcache tokenize: give -p TEXT or --stdin\n");
        return 2;
    }
    mz_model_t *m = NULL;
    int rc = 1;
    mz_token *toks = NULL;
    size_t n = 0;
    if (cli_load(&o, &m, NULL)) goto out;
    if (cli_tokenize(m, text ? text : prompt, add_special, parse_special, &toks, &n)) goto out;
    for (size_t i = 0; i < n; i++) {
        if (pieces) {
            size_t len;
            const char *p = mz_token_piece(m, toks[i], &len);
            printf("%6d -> '%.*s'\n", toks[i], (int)len, p ? p : "");
        } else {
            printf("%d\n", toks[i]);
        }
    }
    rc = 0;
out:
    free(toks);
    free(text);
    mz_model_free(m);
    return rc;
}

/* ---- main ---------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "mzcache %s — LLM inference that gives memory back and gets it back fast\n\n"
            "usage: mzcache COMMAND [options]   (mzcache COMMAND --help for details)\n\n"
            "commands:\n"
            "  run        generate text from a prompt\n"
            "  chat       talk with the model; the conversation's context is kept\n"
            "  info       show a model's metadata, tensors and memory units\n"
            "  tokenize   print the token ids of a text\n"
            "  gen-model  write a random-weight GGUF model of a given shape\n"
            "  quantize   rewrite a GGUF model in a quantization mix (Q4_K_M, Q8_0, ...)\n"
            "  profile    measure this machine once for the eviction policy\n"
            "  serve      OpenAI-style HTTP server that gives memory back under pressure\n"
            "  evict      ask a running server to give memory back (512M, 40%%, all)\n"
            "  status     show a running server's memory and recent evictions\n"
            "  sessions   list a running server's conversations, or --delete ID\n"
            "  bench      benchmarks: `bench ttft` = TTFT after eviction vs the baselines\n"
            "  demo       evict a long conversation and answer again: TTFT vs recompute\n\n"
            "example:\n"
            "  mzcache run -m models/SmolLM2-135M-Instruct.Q4_1.gguf --chat -p \"Hello!\"\n",
            MZ_VERSION_STRING);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("mzcache %s\n", MZ_VERSION_STRING);
        return 0;
    }
    static const struct {
        const char *name;
        int (*run)(int argc, char **argv);
    } commands[] = {
        {"run", cmd_run},           {"chat", cmd_chat},         {"info", cmd_info},
        {"tokenize", cmd_tokenize}, {"gen-model", cmd_gen_model}, {"quantize", cmd_quantize},
        {"profile", cmd_profile},   {"serve", cmd_serve},       {"evict", cmd_evict},
        {"status", cmd_status},     {"sessions", cmd_sessions}, {"bench", cmd_bench},
        {"demo", cmd_demo},
    };
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(cmd, commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "mzcache: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
