/*
 * demo.c — `mzcache demo`: what mzcache is for, on one screen.
 *
 * Builds a conversation of a few thousand tokens (a license text from
 * /usr/share/common-licenses fed as chat turns), then asks four questions:
 *
 *   1. from scratch: the whole conversation is prefilled — what a server
 *      that dropped the conversation would pay again (recompute);
 *   2. with everything in memory;
 *   3. after evicting to 50 % remaining, as a memory-pressure event would
 *      (mz_evict: the hybrid swap policy, compressed stack + swap file);
 *   4. after evicting everything (0 % remaining).
 *
 * Questions 2-4 go through mz_restore_generate: the evicted weights and KV
 * come back through the restore workers while the forward pass runs. The
 * summary prints each case's time to first token next to the recompute time.
 */
#define _GNU_SOURCE
#include "cli.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEMO_ANSWER_TOKENS 40

/* Used when the license text is not there (non-Debian systems). */
static const char *const demo_fallback_text =
    "Permission is hereby granted, free of charge, to any person obtaining a copy of this "
    "software and associated documentation files (the \"Software\"), to deal in the Software "
    "without restriction, including without limitation the rights to use, copy, modify, merge, "
    "publish, distribute, sublicense, and/or sell copies of the Software, and to permit persons "
    "to whom the Software is furnished to do so, subject to the following conditions: The above "
    "copyright notice and this permission notice shall be included in all copies or substantial "
    "portions of the Software. THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, "
    "EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS "
    "FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT.\n\n";

/* The first max_bytes of PATH; a text shorter than half of that is followed
 * by the built-in paragraph (repeated; *padded set). A missing PATH is the
 * built-in text only when `required` is false (the default file is
 * Debian's). NULL on error, said. */
static char *demo_read_text(const char *path, size_t max_bytes, bool required, bool *padded)
{
    FILE *f = fopen(path, "rb");
    if (!f && required) {
        fprintf(stderr, "mzcache demo: --text %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(max_bytes + 1);
    if (!buf) {
        if (f) fclose(f);
        return NULL;
    }
    size_t len = 0;
    if (f) {
        len = fread(buf, 1, max_bytes, f);
        bool bad = ferror(f);
        fclose(f);
        if (bad) {
            fprintf(stderr, "mzcache demo: --text %s: read error\n", path);
            free(buf);
            return NULL;
        }
    }
    /* Missing or short: repeat the fallback paragraph. */
    size_t fl = strlen(demo_fallback_text);
    *padded = false;
    while (len < max_bytes / 2 && len + fl <= max_bytes) {
        memcpy(buf + len, demo_fallback_text, fl);
        len += fl;
        *padded = true;
    }
    buf[len] = '\0';
    return buf;
}

typedef struct demo_conv {
    mz_chat_msg msgs[32];
    char *owned[32];
    size_t n;
} demo_conv;

static int demo_add(demo_conv *c, const char *role, const char *content)
{
    if (c->n == sizeof c->msgs / sizeof c->msgs[0]) return -1;
    char *copy = strdup(content);
    if (!copy) return -1;
    c->owned[c->n] = copy;
    c->msgs[c->n++] = (mz_chat_msg){role, copy};
    return 0;
}

typedef struct demo_answer {
    mz_detok_t *dt;
    char text[1024];
    size_t len;
} demo_answer;

static mz_gen_action demo_on_token(void *user, mz_token t, const float *logits, int n_vocab)
{
    (void)logits;
    (void)n_vocab;
    demo_answer *a = user;
    char buf[256];
    size_t nb = mz_detok_push(a->dt, t, false, buf, sizeof buf);
    for (size_t i = 0; i < nb && a->len + 1 < sizeof a->text; i++)
        a->text[a->len++] = buf[i] == '\n' ? ' ' : buf[i];
    a->text[a->len] = '\0';
    return MZ_GEN_CONTINUE;
}

/* Ctrl-C: stop, clean up (the swap file). */
static bool demo_cancelled(void *user)
{
    (void)user;
    return cli_interrupted != 0;
}

typedef struct demo_case {
    const char *name;
    double held_pct, held_mib, ttft_ms, restore_ms, stall_ms;
    size_t n_units, n_tokens;
} demo_case;

static double demo_held_mib(const mz_mem_stats *st)
{
    return (double)(st->weights.resident_bytes + st->weights.compressed_bytes +
                    st->kv.resident_bytes + st->kv.compressed_bytes) / (1024.0 * 1024.0);
}

/* Formats the conversation, prefills what is new (mz_restore_generate brings
 * evicted units back meanwhile) and generates the answer, which joins the
 * conversation. */
static int demo_ask(mz_model_t *m, mz_ctx_t *ctx, demo_conv *conv, const char *question,
                    const mz_restore_params *rp, demo_case *out, bool print)
{
    if (demo_add(conv, "user", question)) return -1;
    char *text = NULL;
    mz_token *toks = NULL;
    size_t n = 0;
    int rc = -1;
    demo_answer ans = {0};
    if (cli_format_chat(m, conv->msgs, conv->n, &text)) goto out;
    if (cli_tokenize(m, text, true, true, &toks, &n)) goto out;
    size_t common = 0;
    if (mz_ctx_keep_prefix(ctx, toks, n, &common) || mz_detok_init(m, &ans.dt)) {
        fprintf(stderr, "mzcache demo: %s\n", mz_ctx_errmsg(ctx));
        goto out;
    }
    mz_mem_stats st;
    mz_get_mem_stats(ctx, &st);
    out->held_pct = st.remaining_pct;
    out->held_mib = demo_held_mib(&st);
    mz_restore_timings tm;
    mz_generate_params gp = mz_generate_params_default();
    gp.max_tokens = DEMO_ANSWER_TOKENS;
    gp.on_token = demo_on_token;
    gp.cancelled = demo_cancelled;
    gp.user = &ans;
    mz_generate_result gr;
    mz_status s = mz_restore_generate(ctx, toks + common, n - common, rp, NULL, &gp, &gr, &tm);
    if (cli_interrupted) {
        fprintf(stderr, "\nmzcache demo: interrupted\n");
        goto out;
    }
    if (s) {
        fprintf(stderr, "mzcache demo: %s\n", mz_ctx_errmsg(ctx));
        goto out;
    }
    out->ttft_ms = tm.ttft_ms;
    out->restore_ms = tm.restore_ms;
    out->stall_ms = tm.stall_ms;
    out->n_units = tm.n_units;
    out->n_tokens = n;
    if (print)
        printf("  Q: %s\n  A: %s%s\n", question, ans.text, gr.finish == MZ_FINISH_LENGTH ? "..." : "");
    if (demo_add(conv, "assistant", ans.text)) goto out;
    rc = 0;
out:
    mz_detok_free(ans.dt);
    free(text);
    free(toks);
    return rc;
}

static int demo_evict_to(mz_ctx_t *ctx, int remaining_pct)
{
    mz_mem_stats st;
    mz_get_mem_stats(ctx, &st);
    size_t total = st.weights.total_bytes + st.kv.total_bytes;
    size_t amount = remaining_pct <= 0 ? SIZE_MAX
                                       : (size_t)((double)total * (100 - remaining_pct) / 100.0);
    mz_evict_report r;
    if (mz_evict(ctx, amount, &r)) {
        fprintf(stderr, "mzcache demo: evict: %s\n", mz_ctx_errmsg(ctx));
        return -1;
    }
    mz_get_mem_stats(ctx, &st);
    printf("  evicted %.1f MiB in %.0f ms (%zu KV chunks compressed, %zu stored, %zu weight "
           "blocks dropped) -> %.0f %% remaining\n",
           (double)r.bytes_freed / (1024.0 * 1024.0), r.time_ms, r.n_kv_compressed,
           r.n_kv_stored_raw + r.n_kv_stored_compressed, r.n_weights_dropped, st.remaining_pct);
    return 0;
}

int cmd_demo(int argc, char **argv)
{
    cli_opts o;
    cli_opts_defaults(&o);
    const char *text_path = "/usr/share/common-licenses/Apache-2.0";
    bool text_given = false, padded = false;
    size_t max_bytes = 11000;
    int turns = 4;
    mz_restore_params rp = mz_restore_params_default();
    for (int i = 1; i < argc; i++) {
        int r = cli_parse_common(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--text") && v) text_path = argv[++i], text_given = true;
        else if (!strcmp(a, "--swap-dir") && v) o.swap_dir = argv[++i];
        else if (!strcmp(a, "--bytes") && v) {
            if (cli_opt_size(a, v, 256, 1u << 20, &max_bytes)) return 2;
            i++;
        } else if (!strcmp(a, "--turns") && v) {
            if (cli_opt_int(a, v, 1, 12, &turns)) return 2;
            i++;
        } else if (!strcmp(a, "--restore-threads") && v) {
            if (cli_opt_int(a, v, 0, MZ_RESTORE_THREADS_MAX, &rp.n_restore_threads)) return 2;
            i++;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: mzcache demo -m MODEL [options]\n\n"
                   "Builds a conversation of a few thousand tokens from a text file, answers,\n"
                   "evicts to 50 %% and to 0 %% remaining as memory pressure would, answers again,\n"
                   "and prints the time to first token of each case next to the recompute time.\n\n"
                   "      --text FILE         text fed as chat turns (default\n"
                   "                          /usr/share/common-licenses/Apache-2.0)\n"
                   "      --bytes N           at most N bytes of it (default 11000)\n"
                   "      --turns N           split into N user turns (default 4)\n"
                   "      --swap-dir DIR      where the swap file goes (default\n"
                   "                          $XDG_CACHE_HOME/mzcache or ~/.cache/mzcache)\n"
                   "      --restore-threads N restore worker threads (default: device profile)\n%s",
                   cli_common_help);
            return 0;
        } else {
            fprintf(stderr, "mzcache demo: unknown option '%s' (see mzcache demo --help)\n", argv[i]);
            return 2;
        }
    }
    mz_model_t *m = NULL;
    mz_ctx_t *ctx = NULL;
    char *text = NULL;
    demo_conv conv = {0};
    int rc = 1;
    text = demo_read_text(text_path, max_bytes, text_given, &padded);
    if (!text) goto out;
    if (cli_check_swap_dir("demo", o.swap_dir)) {
        rc = 2;
        goto out;
    }
    /* Ctrl-C or SIGTERM ends the demo through the clean-up below, which
     * removes the swap file its evictions made. */
    cli_note_profile("demo");
    cli_signals_catch();
    mz_status ls = cli_load(&o, &m, &ctx);
    cli_signals_unblock();
    if (ls) goto out;

    mz_model_info mi;
    mz_model_get_info(m, &mi);
    bool f_exists = access(text_path, R_OK) == 0;
    const char *base = strrchr(text_path, '/');
    base = base ? base + 1 : text_path;
    if (demo_add(&conv, "system", "You are a helpful assistant who answers briefly.")) goto out;
    /* The text as `turns` user turns, cut at paragraph ends where possible. */
    size_t len = strlen(text), pos = 0;
    for (int t = 0; t < turns && pos < len; t++) {
        size_t end = t + 1 == turns ? len : pos + (len - pos) / (size_t)(turns - t);
        if (t + 1 < turns) {
            char *para = strstr(text + end, "\n\n");
            if (para && (size_t)(para - text) < len) end = (size_t)(para - text) + 2;
        }
        if (end > len) end = len;
        size_t part_len = end - pos;
        char *msg = malloc(part_len + 64);
        if (!msg) goto out;
        snprintf(msg, part_len + 64, "Here is part %d of a document:\n\n%.*s", t + 1,
                 (int)part_len, text + pos);
        int e = demo_add(&conv, "user", msg);
        free(msg);
        char ack[64];
        snprintf(ack, sizeof ack, "I have read part %d.", t + 1);
        if (e || demo_add(&conv, "assistant", ack)) goto out;
        pos = end;
    }

    static const char *const questions[] = {
        "Which license is this document? Answer in one sentence.",
        "Can I use software under this license in a commercial product?",
        "What must I do when I change a file and redistribute it?",
        "What happens to my patent license if I sue a contributor?",
    };
    demo_case cases[4] = {{.name = "recompute (prefill from scratch)"},
                          {.name = "all in memory"},
                          {.name = "evicted to 50 % remaining"},
                          {.name = "evicted to 0 % remaining"}};
    const char *mname = strrchr(o.model, '/');
    mname = mname ? mname + 1 : o.model;
    printf("mzcache demo: %s (%s, %d layers), %d compute threads\n", mname, mi.weight_type,
           mi.n_layer, o.n_threads ? o.n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN));
    printf("conversation: %s (%zu bytes%s) as %d chat turns\n\n", f_exists ? base : "built-in text", len,
           padded && f_exists ? ", padded with a built-in paragraph" : "", turns);
    fflush(stdout);

    printf("[1] the whole conversation from scratch\n");
    if (demo_ask(m, ctx, &conv, questions[0], &rp, &cases[0], true)) goto out;
    printf("[2] everything in memory\n");
    if (demo_ask(m, ctx, &conv, questions[1], &rp, &cases[1], true)) goto out;
    printf("[3] memory pressure: evict to 50 %% remaining\n");
    if (demo_evict_to(ctx, 50) || demo_ask(m, ctx, &conv, questions[2], &rp, &cases[2], true))
        goto out;
    printf("[4] memory pressure: evict everything (0 %% remaining)\n");
    if (demo_evict_to(ctx, 0) || demo_ask(m, ctx, &conv, questions[3], &rp, &cases[3], true))
        goto out;

    double rec = cases[0].ttft_ms;
    printf("\n%-34s %18s %12s %14s\n", "time to first token", "memory held", "TTFT",
           "vs recompute");
    printf("%-34s %18s %9.0f ms %13s\n", cases[0].name, "weights only", rec, "1x");
    for (int k = 1; k < 4; k++) {
        char restore[64] = "";
        if (cases[k].n_units)
            snprintf(restore, sizeof restore, "  (%zu units back; stalled %.0f ms)",
                     cases[k].n_units, cases[k].stall_ms);
        printf("%-34s %5.0f %% %7.1f MiB %9.0f ms %11.0fx faster%s\n", cases[k].name,
               cases[k].held_pct, cases[k].held_mib, cases[k].ttft_ms,
               cases[k].ttft_ms > 0 ? rec / cases[k].ttft_ms : 0.0, restore);
    }
    printf("(recompute: %zu tokens prefilled; memory held: weights + KV, embeddings excluded)\n",
           cases[0].n_tokens);
    rc = 0;
out:
    for (size_t i = 0; i < conv.n; i++) free(conv.owned[i]);
    free(text);
    mz_ctx_free(ctx);
    mz_model_free(m);
    return rc;
}
