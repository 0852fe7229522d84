/* cli.h — pieces shared by the mzcache subcommands. */
#ifndef MZ_CLI_H
#define MZ_CLI_H

#include "mzcache.h"

#include <stdbool.h>
#include <stdio.h>

typedef struct cli_opts {
    const char *model;
    int n_threads;
    int n_ctx;
    int n_batch;
    int n_predict;
    bool quiet;
    bool no_progress;
    mz_sampler_params sampler;
} cli_opts;

extern const char *cli_common_help;

void cli_opts_defaults(cli_opts *o);
int cli_parse_common(cli_opts *o, int argc, char **argv, int *i);
mz_status cli_load(const cli_opts *o, mz_model_t **model, mz_ctx_t **ctx);
bool cli_progress(void *user, size_t n_done, size_t n_total);
void cli_print_timings(const mz_ctx_t *ctx);
mz_status cli_tokenize(const mz_model_t *m, const char *text, bool add_special, bool parse_special,
                       mz_token **out, size_t *n_out);
mz_status cli_generate(const cli_opts *o, mz_model_t *m, mz_ctx_t *ctx, mz_sampler_t *smp,
                       FILE *out, char **text_out);
mz_status cli_format_chat(const mz_model_t *m, const mz_chat_msg *msgs, size_t n, char **out);

int cmd_chat(int argc, char **argv);
int cmd_gen_model(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_evict(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_sessions(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cli_info(const cli_opts *o);

#endif
