/*
 * chat.c — `mzcache chat`: a multi-turn conversation on the terminal.
 *
 * Each turn formats the whole conversation with the chat template, tokenizes
 * it, and prefills only what follows the longest common prefix with the
 * tokens already in the context, so earlier turns are never recomputed.
 */
#define _GNU_SOURCE
#include "cli.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct conversation {
    mz_chat_msg *msgs;
    size_t n, cap;
} conversation;

static int conv_add(conversation *c, const char *role, const char *content)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        mz_chat_msg *bigger = realloc(c->msgs, cap * sizeof *bigger);
        if (!bigger) return -1;
        c->msgs = bigger;
        c->cap = cap;
    }
    char *copy = strdup(content);
    if (!copy) return -1;
    c->msgs[c->n++] = (mz_chat_msg){role, copy};
    return 0;
}

static void conv_free(conversation *c)
{
    for (size_t i = 0; i < c->n; i++) free((char *)(uintptr_t)c->msgs[i].content);
    free(c->msgs);
}

/* Brings the context to exactly `toks`, reusing the common prefix. The
 * last token is always re-run so its logits are fresh. */
static mz_status sync_context(mz_ctx_t *ctx, const mz_token *toks, size_t n, size_t *n_reused)
{
    const mz_token *have = mz_ctx_tokens(ctx);
    size_t n_have = mz_ctx_n_tokens(ctx), common = 0;
    while (common < n_have && common < n && have[common] == toks[common]) common++;
    if (common == n) common = n - 1;
    mz_status s = mz_ctx_truncate(ctx, common);
    if (s) return s;
    *n_reused = common;
    return mz_prefill(ctx, toks + common, n - common);
}

int cmd_chat(int argc, char **argv)
{
    cli_opts o;
    cli_opts_defaults(&o);
    const char *system = NULL;
    bool show_timings = false;
    for (int i = 1; i < argc; i++) {
        int r = cli_parse_common(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "--system") && i + 1 < argc) system = argv[++i];
        else if (!strcmp(argv[i], "--timings")) show_timings = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: mzcache chat -m MODEL [options]\n\n"
                   "Talk with the model. Type a message and press Enter; the conversation's\n"
                   "context is kept, and only the new tokens of each turn are computed.\n"
                   "Commands: /reset starts over, /quit (or end of input) leaves.\n\n"
                   "      --system TEXT       system message\n"
                   "      --timings           print speed after every answer\n%s",
                   cli_common_help);
            return 0;
        } else {
            fprintf(stderr, "mzcache chat: unknown option '%s' (see mzcache chat --help)\n", argv[i]);
            return 2;
        }
    }
    mz_model_t *m = NULL;
    mz_ctx_t *ctx = NULL;
    mz_sampler_t *smp = NULL;
    conversation conv = {0};
    int rc = 1;
    if (cli_load(&o, &m, &ctx)) return 1;
    if (mz_sampler_init(&o.sampler, &smp)) goto out;
    if (system && conv_add(&conv, "system", system)) goto out;

    bool tty = isatty(STDIN_FILENO);
    char line[8192];
    for (;;) {
        if (tty) {
            fputs("\n> ", stdout);
            fflush(stdout);
        }
        if (!fgets(line, sizeof line, stdin)) break;
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0]) continue;
        if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) break;
        if (!strcmp(line, "/reset")) {
            conv_free(&conv);
            memset(&conv, 0, sizeof conv);
            if (system && conv_add(&conv, "system", system)) goto out;
            if (mz_ctx_truncate(ctx, 0)) goto out;
            printf("(conversation reset)\n");
            continue;
        }
        if (conv_add(&conv, "user", line)) goto out;
        char *formatted = NULL;
        mz_token *toks = NULL;
        size_t n = 0, reused = 0;
        if (cli_format_chat(m, conv.msgs, conv.n, &formatted)) goto out;
        mz_status s = cli_tokenize(m, formatted, true, true, &toks, &n);
        free(formatted);
        if (s) goto out;
        mz_ctx_reset_timings(ctx);
        s = sync_context(ctx, toks, n, &reused);
        free(toks);
        if (s) {
            fprintf(stderr, "mzcache: %s\n", mz_ctx_errmsg(ctx));
            if (s == MZ_E_CONTEXT_FULL) fprintf(stderr, "mzcache: use /reset or a larger --ctx-size\n");
            conv.n--;
            continue;
        }
        char *answer = NULL;
        s = cli_generate(&o, m, ctx, smp, stdout, &answer);
        fputc('\n', stdout);
        if (answer && conv_add(&conv, "assistant", answer)) {
            free(answer);
            goto out;
        }
        free(answer);
        if (show_timings && !o.quiet) {
            fprintf(stderr, "(reused %zu cached tokens)", reused);
            cli_print_timings(ctx);
        }
        if (s) goto out;
    }
    rc = 0;
out:
    conv_free(&conv);
    mz_sampler_free(smp);
    mz_ctx_free(ctx);
    mz_model_free(m);
    return rc;
}
