/* cli.h — pieces shared by the mzcache subcommands. */
#ifndef MZ_CLI_H
#define MZ_CLI_H

#include "mzcache.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>

#include "cli_num.h"

/* Largest -c accepted (tokens); beyond the model's trained length is only
 * warned about. */
#define CLI_MAX_CTX (1 << 20)

typedef struct cli_opts {
    const char *model;
    const char *chat_template; /* --chat-template NAME; NULL: the model's own */
    int n_threads;
    int n_ctx;
    bool ctx_given;            /* -c was on the command line */
    int n_batch;
    int n_predict;
    const char *swap_dir;      /* NULL: the library's default */
    bool quiet;
    bool no_progress;
    mz_sampler_params sampler;
    bool seed_given;           /* -s N (N >= 0) was on the command line; -s -1 asks for a random one */
    bool show_ids;             /* run --show-ids: each generated token's id and logit lead on stderr */
} cli_opts;

extern const char *cli_common_help;

void cli_opts_defaults(cli_opts *o);
/* True when an option's value v is there and is not the next option
 * ("-p -n 5"); else says so on stderr. */
bool cli_has_value(const char *opt, const char *v);
/* 64 random bits (getentropy; the clock and pid where it fails). */
uint64_t cli_random_seed(void);
int cli_parse_common(cli_opts *o, int argc, char **argv, int *i);
mz_status cli_load(cli_opts *o, mz_model_t **model, mz_ctx_t **ctx);
/* Progress callback: prints when user is cli_progress_shown(o), and cancels
 * the prefill once Ctrl-C was pressed (cli_interrupted). */
bool cli_progress(void *user, size_t n_done, size_t n_total);
void *cli_progress_shown(const cli_opts *o);
mz_status cli_tokenize(const mz_model_t *m, const char *text, bool add_special, bool parse_special,
                       mz_token **out, size_t *n_out);

/* What one cli_generate call did. */
typedef struct cli_gen_result {
    size_t n_tokens;    /* tokens sampled (an end-of-generation token is not counted) */
    double ms;          /* wall time of the generation loop */
    bool eog;           /* stopped at an end-of-generation token */
    bool interrupted;   /* stopped by Ctrl-C (cli_interrupted) */
    bool ctx_full;      /* stopped because the context has no room for the next token */
    mz_finish finish;   /* why it stopped (the three flags above say it too) */
} cli_gen_result;
/* Samples and prints up to n_predict tokens after the context's current
 * logits through mz_generate (the library's one generation loop): every
 * printed token is in the context afterwards, and so is the end-of-generation
 * token that ended the answer, so a later turn can follow it. */
mz_status cli_generate(const cli_opts *o, mz_model_t *m, mz_ctx_t *ctx, mz_sampler_t *smp,
                       FILE *out, char **text_out, cli_gen_result *res);
void cli_print_gen_timings(size_t n_prompt, double prompt_ms, const cli_gen_result *g);
double cli_now_ms(void);

/* Set by cli_signals_catch's handler: any of SIGINT, SIGTERM, SIGHUP sets
 * cli_interrupted (the work in progress stops: a prefill through
 * cli_progress, a generation at the next token); SIGTERM and SIGHUP also set
 * cli_quit (leave, through the normal clean-up that removes the swap file). */
extern volatile sig_atomic_t cli_interrupted, cli_quit;
/* Installs that handler (no SA_RESTART: a blocking read returns EINTR) and
 * blocks the three signals in this thread, so that threads started before
 * cli_signals_unblock (the context's compute threads) never take them. */
void cli_signals_catch(void);
void cli_signals_unblock(void);

/* cli_env.c: checks made before the work starts. */
/* Makes sure the swap directory (DIR, or the default one when NULL or "")
 * exists (created 0700) and a file can be created in it; prints why not,
 * naming CMD and the directory, and returns -1. Removes swap files that dead
 * processes left there (saying how many). */
int cli_check_swap_dir(const char *cmd, const char *dir);
/* The context length against the model's trained one: without -c the
 * default is cut to the trained length; a -c beyond it is warned about. */
void cli_fit_ctx(cli_opts *o, const mz_model_t *m);
/* For commands that evict (serve, demo): says so when `mzcache profile` has
 * not been run (the library warns only when a profile was asked for). */
void cli_note_profile(const char *cmd);
/* The same from the model file's metadata (for serve, which loads it later). */
void cli_fit_ctx_file(cli_opts *o);
/* The chat template over msgs, tokenized: control tokens only from the
 * template (mz_chat_tokenize); add_assistant ends with the assistant's
 * header. *out is malloc'd. Says what failed. */
mz_status cli_tokenize_chat(const mz_model_t *m, const mz_chat_msg *msgs, size_t n_msgs, bool add_assistant,
                            mz_token **out, size_t *n_out);
mz_status cli_format_chat(const mz_model_t *m, const mz_chat_msg *msgs, size_t n, char **out);

int cmd_chat(int argc, char **argv);
int cmd_gen_model(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_evict(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_sessions(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cli_info(cli_opts *o);

#endif
