/*
 * chat.c — `mzcache chat`: a multi-turn conversation on the terminal.
 *
 * Each turn formats the whole conversation with the chat template, tokenizes
 * it, and prefills only what follows the longest common prefix with the
 * tokens already in the context, so earlier turns are never recomputed.
 */
#define _GNU_SOURCE
#include "cli.h"
#include "mzcache_experimental.h" /* --evict-order, --restore-overlap: paper ablations */

#include "lineedit.h"
#include "core/parse.h"
#include "server/server.h"

#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat_store.h" /* [store] --session NAME */

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

static int conv_add_cb(void *u, const char *role, const char *content) /* [store] */
{
    return conv_add(u, role, content);
}

static void conv_free(conversation *c)
{
    for (size_t i = 0; i < c->n; i++) free((char *)(uintptr_t)c->msgs[i].content);
    free(c->msgs);
}

static int parse_overlap(const char *name, mz_restore_overlap *out)
{
    static const char *const names[] = {"all", "none", "alloc-reload", "reload-prefill"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, names[i])) return *out = (mz_restore_overlap)i, 0;
    return -1;
}

static void print_restore_timings(const mz_ctx_t *ctx)
{
    mz_restore_timings t;
    mz_get_last_restore_timings(ctx, &t);
    fprintf(stderr, "restore: %zu units (%zu storage, %zu memory, %d threads) | alloc %.1f ms, "
                    "storage %.1f ms, memory %.1f ms, all ready %.1f ms | prefill %.1f ms, "
                    "stalled %.1f ms | TTFT %.1f ms\n",
            t.n_units, t.n_storage_units, t.n_mem_units, t.n_restore_threads, t.alloc_ms,
            t.storage_ms, t.mem_ms, t.restore_ms, t.prefill_ms, t.stall_ms, t.ttft_ms);
}

/* "40%" (of the evictable total), "300M", "2G", "512K", "12345", "all";
 * the same amount syntax as `mzcache evict` and --evict-step. */
static int parse_amount(const char *arg, const mz_mem_stats *st, size_t *out)
{
    while (*arg == ' ') arg++;
    if (!strcmp(arg, "all")) {
        *out = SIZE_MAX;
        return 0;
    }
    double v;
    bool pct;
    if (mz_parse_amount(arg, &v, &pct) || !isfinite(v)) return -1;
    double total = (double)(st->weights.total_bytes + st->kv.total_bytes);
    double b = pct ? v * total / 100.0 : v;
    *out = b >= (double)SIZE_MAX ? SIZE_MAX : (size_t)(b + 0.5);
    return 0;
}

static void print_mib_row(const char *name, const mz_mem_category *c)
{
    const double M = 1024.0 * 1024.0;
    printf("  %-8s %9.1f %9.1f %11.1f %9.1f %9.1f   %zu/%zu\n", name, c->total_bytes / M,
           c->resident_bytes / M, c->compressed_bytes / M, c->stored_bytes / M,
           c->dropped_bytes / M, c->n_resident, c->n_units);
}

static void print_mem_status(const mz_ctx_t *ctx)
{
    mz_mem_stats st;
    mz_get_mem_stats(ctx, &st);
    printf("memory (MiB)  total  resident  compressed    stored   dropped   units resident\n");
    print_mib_row("weights", &st.weights);
    print_mib_row("kv", &st.kv);
    if (st.kv_out_of_window.n_units) print_mib_row("  window", &st.kv_out_of_window);
    printf("  pinned %10.1f (embeddings, output; never evicted)\n",
           st.pinned_bytes / (1024.0 * 1024.0));
    printf("remaining %.1f%% | codec %s | KV placement %s | stack maps %.1f MiB | swap file "
           "%.1f MiB%s\n",
           st.remaining_pct, st.codec, st.placement, st.compstack_mapped_bytes / (1024.0 * 1024.0),
           st.swap_file_bytes / (1024.0 * 1024.0),
           st.swap_file_bytes ? (st.swap_direct ? " (O_DIRECT)" : " (buffered)") : "");
    printf("policy %s (%s-out) | stage %s | planned restore: memory path %.1f ms, storage path "
           "%.1f ms, allocation %.1f ms\n",
           st.policy, st.evict_order, mz_evict_stage_name(st.stage), st.planned_mem_ms,
           st.planned_storage_ms, st.planned_alloc_ms);
    printf("per unit: t_d %.3f ms, t_rKV %.3f ms, t_rW %.3f ms, alloc %.3f ms | T = %zu%s\n",
           st.unit_t_d_ms, st.unit_t_rkv_ms, st.unit_t_rw_ms, st.unit_t_alloc_ms, st.threshold_T,
           st.profile_measured ? "" : " (built-in estimate: run `mzcache profile`)");
}

static void do_evict(mz_ctx_t *ctx, const char *arg)
{
    mz_mem_stats st;
    mz_get_mem_stats(ctx, &st);
    size_t n;
    if (parse_amount(arg, &st, &n)) {
        printf("usage: /evict 40%% | 300M | 2G | 512K | BYTES | all\n");
        return;
    }
    static bool hinted;
    if (!st.profile_measured && !hinted) {
        hinted = true;
        printf("(no device profile: eviction plans with a built-in estimate of this machine; run "
               "`mzcache profile` once to measure it)\n");
    }
    mz_evict_report r;
    memset(&r, 0, sizeof r);
    mz_status s = mz_evict(ctx, n, &r);
    /* On an error what was moved before it stays evicted: said as such, never
     * as a finished eviction. */
    if (s) printf("evict stopped by an error: %s; before it: ", mz_ctx_errmsg(ctx));
    printf("freed %.1f MiB%s in %.1f ms: KV %zu compressed, %zu stored raw, %zu stored "
           "compressed, %zu moved to storage; %zu weight blocks dropped; stage %s\n",
           r.bytes_freed / (1024.0 * 1024.0), s || r.complete ? "" : " (all it could)", r.time_ms,
           r.n_kv_compressed, r.n_kv_stored_raw, r.n_kv_stored_compressed, r.n_kv_compkv,
           r.n_weights_dropped, mz_evict_stage_name(r.stage));
}

static void do_restore(mz_ctx_t *ctx)
{
    mz_restore_report r;
    memset(&r, 0, sizeof r);
    mz_status s = mz_restore(ctx, &r);
    if (s) printf("restore stopped by an error: %s; before it: ", mz_ctx_errmsg(ctx));
    printf("restored %.1f MiB in %.1f ms: KV %zu decoded, %zu read raw, %zu read compressed; "
           "%zu weight blocks reloaded\n",
           r.bytes_restored / (1024.0 * 1024.0), r.time_ms, r.n_kv_decoded, r.n_kv_read_raw,
           r.n_kv_read_compressed, r.n_weights_loaded);
}

static const char chat_commands_help[] =
    "commands: /help this list | /clear (or /reset) start the conversation over | /status where "
    "the memory is | /evict AMOUNT give memory back (40%, 300M, 2G, all) | /restore bring it all "
    "back | /quit (or /exit, Ctrl-D) leave | //text sends a message that starts with /\n";

/* Handles a /command line: 0 = done, 1 = quit, -1 = fatal error. */
static int chat_command(mz_ctx_t *ctx, const char *line, conversation *conv, const char *system,
                        chat_store *cs)
{
    size_t len = strcspn(line, " ");
    if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) return 1;
    if (!strcmp(line, "/help") || !strcmp(line, "/?")) {
        fputs(chat_commands_help, stdout);
        return 0;
    }
    if (!strcmp(line, "/status")) {
        print_mem_status(ctx);
        return 0;
    }
    if (len == 6 && !strncmp(line, "/evict", 6)) {
        do_evict(ctx, line + 6);
        return 0;
    }
    if (!strcmp(line, "/restore")) {
        do_restore(ctx);
        return 0;
    }
    if (!strcmp(line, "/reset") || !strcmp(line, "/clear")) {
        conv_free(conv);
        memset(conv, 0, sizeof *conv);
        if (system && conv_add(conv, "system", system)) return -1;
        /* [store] the saved conversation first: it is what a resume keeps */
        if (cs->session) chat_store_save(cs, conv->msgs, conv->n);
        if (mz_ctx_truncate(ctx, 0)) return -1;
        printf("(conversation cleared)\n");
        return 0;
    }
    printf("unknown command %.*s (not sent to the model)\n%s", (int)(len < 64 ? len : 64), line,
           chat_commands_help);
    return 0;
}

/* Tokens kept free for the answer when the conversation is fitted. */
static size_t answer_room(const cli_opts *o, size_t n_ctx)
{
    size_t room = n_ctx / 4;
    if (o->n_predict >= 0 && (size_t)o->n_predict < room) room = (size_t)o->n_predict;
    return room ? room : 1;
}

/* Formats and tokenizes the conversation; when it does not leave `room`
 * tokens free in the context, drops the oldest turns after the system
 * message (saying so) until it does. 0 = *toks ready, 1 = the last message
 * alone does not fit (said; nothing changed), -1 = error. */
static int fit_conversation(const mz_model_t *m, conversation *conv, size_t n_ctx, size_t room,
                            mz_token **toks, size_t *n)
{
    size_t first = conv->n && !strcmp(conv->msgs[0].role, "system") ? 1 : 0;
    size_t dropped = 0;
    for (;;) {
        if (cli_tokenize_chat(m, conv->msgs, conv->n, true, toks, n)) return -1;
        if (*n + room <= n_ctx || (*n < n_ctx && conv->n - first <= 1)) break;
        if (conv->n - first <= 1) {
            printf("(your message is %zu tokens with the template; the context holds %zu: not sent. "
                   "Use a shorter message or a larger --ctx-size)\n",
                   *n, n_ctx);
            free(*toks);
            *toks = NULL;
            return 1;
        }
        free(*toks);
        *toks = NULL;
        /* The oldest message after the system one; then the conversation
         * starts with a user turn again. */
        do {
            free((char *)(uintptr_t)conv->msgs[first].content);
            memmove(&conv->msgs[first], &conv->msgs[first + 1], (conv->n - first - 1) * sizeof *conv->msgs);
            conv->n--;
            dropped++;
        } while (conv->n - first > 1 && strcmp(conv->msgs[first].role, "user"));
    }
    if (dropped)
        printf("(the context is full: dropped the oldest %zu message%s of the conversation to make room; "
               "/clear starts over)\n",
               dropped, dropped == 1 ? "" : "s");
    return 0;
}

int cmd_chat(int argc, char **argv)
{
    const char *codec = NULL, *swap_dir = NULL, *profile = NULL;
    chat_store cs = {.fsync = MZ_FSYNC_BATCH}; /* [store] */
    mz_kv_placement placement = MZ_KV_PLACE_AUTO;
    mz_evict_order order = MZ_EVICT_BACKWARD;
    mz_engine_mode mode = MZ_MODE_MZCACHE;
    cli_opts o;
    cli_opts_defaults(&o);
    const char *system = NULL;
    bool show_timings = false;
    mz_restore_params rp = mz_restore_params_default();
    mz_restore_experimental rx = mz_restore_experimental_default(); /* --restore-overlap */
    rp.experimental = &rx;
    for (int i = 1; i < argc; i++) {
        int r = cli_parse_common(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        int so = chat_store_option(&cs, argc, argv, &i); /* [store] */
        if (so < 0) return 2;
        if (so > 0) continue;
        static const char *const value_opts[] = {"--system", "--restore-overlap", "--restore-threads", "--codec",
                                                 "--swap-dir", "--profile", "--evict-order", "--mode",
                                                 "--kv-placement"};
        for (size_t k = 0; k < sizeof value_opts / sizeof value_opts[0]; k++)
            if (!strcmp(argv[i], value_opts[k]) && i + 1 >= argc) {
                fprintf(stderr, "mzcache chat: %s needs a value\n", argv[i]);
                return 2;
            }
        if (!strcmp(argv[i], "--system") && i + 1 < argc) system = argv[++i];
        else if (!strcmp(argv[i], "--timings")) show_timings = true;
        else if (!strcmp(argv[i], "--restore-overlap") && i + 1 < argc) {
            if (parse_overlap(argv[++i], &rx.overlap)) {
                fprintf(stderr, "mzcache chat: unknown overlap mode '%s' (all, none, "
                                "alloc-reload, reload-prefill)\n", argv[i]);
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--restore-threads") && i + 1 < argc) {
            if (cli_opt_int(argv[i], argv[i + 1], 0, MZ_RESTORE_THREADS_MAX,
                            &rp.n_restore_threads))
                return 2;
            i++;
        }
        else if (!strcmp(argv[i], "--codec") && i + 1 < argc) codec = argv[++i];
        else if (!strcmp(argv[i], "--swap-dir") && i + 1 < argc) swap_dir = argv[++i];
        else if (!strcmp(argv[i], "--profile") && i + 1 < argc) profile = argv[++i];
        else if (!strcmp(argv[i], "--evict-order") && i + 1 < argc) {
            if (mz_evict_order_parse(argv[++i], &order)) {
                fprintf(stderr, "mzcache chat: %s\n", mz_last_error());
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
            if (mz_engine_mode_parse(argv[++i], &mode)) {
                fprintf(stderr, "mzcache chat: %s\n", mz_last_error());
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--kv-placement") && i + 1 < argc) {
            if (mz_kv_placement_parse(argv[++i], &placement)) {
                fprintf(stderr, "mzcache chat: %s\n", mz_last_error());
                return 2;
            }
        }
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: mzcache chat -m MODEL [options]\n\n"
                   "Talk with the model. Type a message and press Enter; the conversation's\n"
                   "context is kept, and only the new tokens of each turn are computed.\n"
                   "Commands: /help lists them, /clear (or /reset) starts over, /quit (or\n"
                   "Ctrl-D) leaves, /evict AMOUNT gives memory back (40%% of the evictable\n"
                   "total, 300M, 2G, 512K, plain bytes, or all), /restore brings everything\n"
                   "back, /status shows where the memory is, the eviction stage and the\n"
                   "planned restore time of each path. Evicted parts come back by themselves\n"
                   "when the next message needs them. Other /words are refused, not sent;\n"
                   "//text sends a message that starts with /.\n"
                   "Ctrl-C stops an answer and keeps what it said so far; Ctrl-C at the\n"
                   "prompt leaves. When the context is full, the answer is cut and the next\n"
                   "message drops the oldest turns (it says how many). On a terminal, lines\n"
                   "can be edited and the up arrow brings earlier ones back (libedit).\n\n"
                   "      --system TEXT       system message\n"
                   "      --timings           print speed and the restore breakdown after every\n"
                   "                          answer\n"
                   "      --restore-overlap M all (default: allocation, reload and prefill overlap),\n"
                   "                          none, alloc-reload, reload-prefill (paper Fig. 11a)\n"
                   "      --restore-threads N threads the restore workers run on beside the\n"
                   "                          compute threads: 1..64 (default: the device\n"
                   "                          profile's split for the compute threads)\n"
                   "      --codec NAME        KV codec for compressed chunks: auto (default: q8, or\n"
                   "                          q8-q4r where the device profile says fewer bytes\n"
                   "                          restore sooner), q8, q8-g32,\n"
                   "                          q8-g128, q4 (4-bit groups, 3.6x smaller than F16),\n"
                   "                          q4-g32, q4-g128, q4r, q8-q4r (K at 8 bits, V at q4r:\n"
                   "                          2.5x smaller), raw, cachegen (about 4x smaller,\n"
                   "                          slower to decode), cachegen-layer (CacheGen's layer\n"
                   "                          schedule: fewer bits after the first third of the\n"
                   "                          layers)\n"
                   "      --swap-dir DIR      where the swap file goes (default\n"
                   "                          $XDG_CACHE_HOME/mzcache or ~/.cache/mzcache)\n"
                   "      --kv-placement P    where evicted KV goes: auto (default: the hybrid\n"
                   "                          swap policy balances both restore paths),\n"
                   "                          compressed, storage, storage-compressed, mixed\n"
                   "      --evict-order O     backward (default: last layer first), forward, random\n"
                   "      --mode M            mzcache (default), or a baseline to compare with:\n"
                   "                          os-paging (weights mmap'd from the model file, KV\n"
                   "                          paged out to swap by the OS, back by page faults),\n"
                   "                          partial-offload (whole layers to storage, restored\n"
                   "                          sequentially before the prefill), recompute (cold\n"
                   "                          start: reload the weights, prefill it all again)\n"
                   "      --profile FILE      device profile from `mzcache profile` (default\n"
                   "                          $XDG_CACHE_HOME/mzcache/profile.json)\n%s%s",
                   chat_store_help(), cli_common_help);
            return 0;
        } else {
            fprintf(stderr, "mzcache chat: unknown option '%s' (see mzcache chat --help)\n", argv[i]);
            return 2;
        }
    }
    if (cli_check_swap_dir("chat", swap_dir)) return 2;
    mz_model_t *m = NULL;
    mz_ctx_t *ctx = NULL;
    mz_sampler_t *smp = NULL;
    cli_lines *lines = NULL;
    conversation conv = {0};
    int rc = 1;
    /* Ctrl-C stops an answer (and, at the prompt, quits); SIGTERM and SIGHUP
     * (the terminal went away) quit at the next step. Either way the context
     * is freed, which removes the swap file. */
    cli_signals_catch();
    /* The model through the common loader; the context here, because chat
     * has the memory options. */
    if (cs.session) chat_store_prefetch(&cs); /* [store] its reads overlap the model load */
    if (cli_load(&o, &m, NULL)) goto out;
    {
        mz_ctx_params cp = mz_ctx_params_default();
        cp.n_ctx = o.n_ctx;
        cp.n_threads = o.n_threads;
        cp.n_batch = o.n_batch;
        cp.kv_codec = codec;
        cp.swap_dir = swap_dir;
        cp.kv_placement = placement;
        cp.profile_path = profile;
        const mz_ctx_experimental xp = {.evict_order = order, .evict_seed = 0};
        cp.experimental = &xp;
        cp.mode = mode;
        cp.progress = cli_progress;
        cp.progress_user = cli_progress_shown(&o);
        if (cs.session) { /* [store] resume or start the named session */
            if (chat_store_open(&cs, m, &cp, &ctx, conv_add_cb, &conv)) goto out;
        } else if (mz_ctx_init(m, &cp, &ctx)) {
            fprintf(stderr, "mzcache: cannot create context: %s\n", mz_last_error());
            goto out;
        }
    }
    cli_signals_unblock();
    if (mz_sampler_init(&o.sampler, &smp)) {
        fprintf(stderr, "mzcache chat: %s\n", mz_last_error());
        goto out;
    }
    if (system && conv.n == 0 && conv_add(&conv, "system", system)) goto out;
    lines = cli_lines_open("> ");
    if (!lines) goto out;
    if (isatty(STDIN_FILENO))
        printf("mzcache chat: type a message and press Enter. /help lists the commands; Ctrl-C stops "
               "an answer; Ctrl-D, /quit or Ctrl-C at the prompt leaves.%s\n",
               cli_lines_editing(lines) ? "" : " (no line editing: built without libedit)");

    size_t n_ctx = mz_ctx_n_ctx(ctx);
    for (;;) {
        if (cli_quit) break;
        cli_interrupted = 0; /* a Ctrl-C during a command was for that command */
        char *line = cli_lines_read(lines);
        if (!line) break; /* end of input, or Ctrl-C / SIGTERM at the prompt */
        cli_lines_remember(lines, line);
        const char *msg = line;
        if (line[0] == '/' && line[1] == '/') {
            msg = line + 1; /* "//text" sends "/text" */
        } else if (line[0] == '/') {
            int r = chat_command(ctx, line, &conv, system, &cs);
            free(line);
            if (r < 0) goto out;
            if (r == 1) break;
            continue;
        }
        if (!msg[0]) {
            free(line);
            continue;
        }
        int added = conv_add(&conv, "user", msg);
        free(line);
        if (added) goto out;
        mz_token *toks = NULL;
        size_t n = 0, reused = 0;
        int fit = fit_conversation(m, &conv, n_ctx, answer_room(&o, n_ctx), &toks, &n);
        if (fit < 0) goto out;
        if (fit > 0) {
            conv.n--;
            free((char *)(uintptr_t)conv.msgs[conv.n].content);
            continue;
        }
        mz_ctx_reset_timings(ctx);
        double t0 = cli_now_ms();
        mz_status s = mz_ctx_sync(ctx, toks, n, &rp, NULL, &reused);
        double prompt_ms = cli_now_ms() - t0;
        free(toks);
        if (s) {
            if (s == MZ_E_CANCELLED && cli_interrupted)
                printf("\n(interrupted before the answer started: your message was not sent; the "
                       "conversation is as it was)\n");
            else
                fprintf(stderr, "mzcache chat: %s (your message was not sent)\n", mz_ctx_errmsg(ctx));
            conv.n--;
            free((char *)(uintptr_t)conv.msgs[conv.n].content);
            continue;
        }
        char *answer = NULL;
        cli_gen_result g;
        s = cli_generate(&o, m, ctx, smp, stdout, &answer, &g);
        fputc('\n', stdout);
        /* What was printed stays, in the conversation and in the context
         * (cli_generate prefilled every printed token). */
        if (answer && conv_add(&conv, "assistant", answer)) {
            free(answer);
            goto out;
        }
        free(answer);
        if (g.interrupted && !cli_quit)
            printf("(answer stopped; what it said so far is kept in the conversation. Ctrl-C again "
                   "at the prompt or Ctrl-D leaves)\n");
        if (g.ctx_full)
            printf("(the context is full: %zu of %zu tokens; the answer was cut here. Your next "
                   "message drops the oldest turns to make room, and says so; /clear starts over)\n",
                   mz_ctx_n_tokens(ctx), n_ctx);
        fflush(stdout);
        if (cs.session) chat_store_save(&cs, conv.msgs, conv.n); /* [store] */
        if (show_timings && !o.quiet) {
            fprintf(stderr, "(reused %zu cached tokens)", reused);
            cli_print_gen_timings(n - reused, prompt_ms, &g);
            print_restore_timings(ctx);
        }
        if (s) goto out;
    }
    rc = 0;
out:
    cli_signals_unblock();
    cli_lines_close(lines);
    conv_free(&conv);
    mz_sampler_free(smp);
    mz_ctx_free(ctx); /* removes the swap file (a stored session's data file stays) */
    chat_store_close(&cs); /* [store] */
    mz_model_free(m);
    return rc;
}
