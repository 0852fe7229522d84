/*
 * bench.c — `mzcache bench ttft`: the entry of the paper's TTFT evaluation
 * (section 6). Only the command line lives here: options are checked and
 * split into mz_ttft_opts; the measurement, the page-cache and zram set-up
 * and the reports are the harness's (src/harness/ttft*.c, docs/ARCHITECTURE.md).
 */
#define _GNU_SOURCE

#include "cli.h"
#include "harness/ttft.h" /* not public: the evaluation harness */

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* Splits a comma list into at most MZ_TTFT_MAX_LIST items (the string is modified). */
static int split_list(char *s, const char **out)
{
    int n = 0;
    for (char *save = NULL, *t = strtok_r(s, ",", &save); t && n < MZ_TTFT_MAX_LIST;
         t = strtok_r(NULL, ",", &save))
        out[n++] = t;
    return n;
}

static void help(void)
{
    printf("usage: mzcache bench ttft [options]\n\n"
           "TTFT of a short query over a cached context after eviction to each remaining-memory\n"
           "level, for mzcache and the built-in baselines (engine modes), paper section 6.\n"
           "Contexts are SYNTHETIC: K/V drawn from the model's real per-channel distributions\n"
           "(a 512-token calibration prefill), so zram/q8 compress them as real KV.\n"
           "After each timed query one more token is computed at once and timed (\"next\n"
           "token\", CSV next_token_ms): a restore from memory may go on after the query.\n\n"
           "  --models LIST         aliases or GGUF paths (default smollm2,qwen3-0.6b,exaone-1.2b;\n"
           "                        qwen3-0.6b / exaone-1.2b are generated on first use;\n"
           "                        gemma3-270m is the real Gemma 3 file)\n"
           "  --ctx LIST            context lengths in tokens (default 8192,16384,32768)\n"
           "  --levels LIST         remaining memory %% (default 0,25,50,75); 0 (or 'full') is\n"
           "                        each mode's full eviction: everything asked, each mode\n"
           "                        evicts all it can and its remaining %% is recorded\n"
           "  --modes LIST          mzcache,os-paging,partial-offload,recompute (default all)\n"
           "  --codecs LIST         mzcache KV codecs, one series each (default auto, the engine's)\n"
           "  --orders LIST         mzcache eviction orders: backward,forward,random (default backward)\n"
           "  --overlaps LIST       mzcache restore overlap: all,none,alloc-reload,reload-prefill\n"
           "                        (default all)\n"
           "  --runs N              runs per point, median reported (default 3)\n"
           "  --recompute-runs N    runs of the recompute baseline (default 1; it is minutes each)\n"
           "  --recompute-max-ctx N skip recompute above N tokens (default 8192; 0 = never skip)\n"
           "  --recompute-models L  run recompute only for these models (default every model)\n"
           "  --query N             query tokens (default 8)\n"
           "  --restore-threads N   mzcache restore threads (default 0: the device profile's\n"
           "                        split for the compute threads and CPUs)\n"
           "  --lend auto|on|off    the first forward step reads chunks the restore has not yet\n"
           "                        decoded from their compressed copies (auto: where compute\n"
           "                        and restore threads fit the CPUs)\n"
           "  --lend-whole          decode each lent chunk whole into a buffer first (default:\n"
           "                        attention reads a tile's rows from the compressed copy\n"
           "                        where the codec allows: raw, q8, q4, q4r, q8-q4r)\n"
           "  --wait-all            the request returns only once every unit is restored\n"
           "                        (default: the decoding from memory may go on after it)\n"
           "  -t, --threads N       compute threads (default 2)\n"
           "  --tol PCT             allowed undershoot of the remaining level (default 3)\n"
           "  --no-inmem            skip the in-memory (nothing evicted) TTFT (the bound is then nan)\n"
           "  --swap-dir DIR        swap files (default build/bench-swap; on disk, not tmpfs)\n"
           "  --profile FILE        device profile (default: the engine's default location)\n"
           "  --zram                os-paging: set up a zram swap device for the run (root;\n"
           "                        zstd where the kernel has it, else lz4); its mm_stat is\n"
           "                        recorded after every os-paging eviction\n"
           "  --no-global-drop      only posix_fadvise the files, never /proc/sys/vm/drop_caches\n"
           "  --swa-full            sliding-window layers (gemma3) keep their whole history, as\n"
           "                        llama.cpp --swa-full: the comparison for the default, which\n"
           "                        evicts the chunks out of the window first and leaves them stored\n"
           "  --peer CSV            join bench/peer_llamacpp.py results into the table\n"
           "  -o, --out DIR         output directory (default bench/results)\n"
           "  --name STEM           output file stem (default ttft): STEM.csv, STEM.md, STEM-*.png\n"
           "  --title TEXT          heading of the markdown file\n"
           "  --no-plot             no gnuplot PNGs\n");
}

static int parse_int_list(char *s, int *out)
{
    const char *items[MZ_TTFT_MAX_LIST];
    int n = split_list(s, items);
    for (int i = 0; i < n; i++) {
        if (!strcmp(items[i], "full")) out[i] = 0;
        else if (cli_opt_int("--ctx/--levels item", items[i], 0, INT_MAX, &out[i])) return 0;
    }
    return n;
}

static int bench_ttft(int argc, char **argv)
{
    mz_ttft_opts o;
    memset(&o, 0, sizeof o);
    static char def_models[] = "smollm2,qwen3-0.6b,exaone-1.2b", def_ctx[] = "8192,16384,32768",
                def_levels[] = "0,25,50,75", def_modes[] = "mzcache,os-paging,partial-offload,recompute",
                def_codecs[] = "auto", def_orders[] = "backward", def_overlaps[] = "all";
    char *l_models = def_models, *l_ctx = def_ctx, *l_levels = def_levels, *l_modes = def_modes,
         *l_codecs = def_codecs, *l_orders = def_orders, *l_overlaps = def_overlaps;
    o.runs = 3, o.recompute_runs = 1, o.recompute_max_ctx = 8192, o.query = 8, o.threads = 2;
    o.tol = 3, o.swap_dir = "build/bench-swap", o.out_dir = "bench/results", o.name = "ttft";
    o.plot = true, o.drop_global = true, o.inmem = true;
    char cmdline[2048];
    size_t cl = (size_t)snprintf(cmdline, sizeof cmdline, "mzcache bench ttft");
    for (int i = 1; i < argc && cl < sizeof cmdline; i++)
        cl += (size_t)snprintf(cmdline + cl, sizeof cmdline - cl, " %s", argv[i]);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(name) (!strcmp(a, name) && v && ++i)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { help(); return 0; }
        else if (OPT("--models")) l_models = v;
        else if (OPT("--ctx")) l_ctx = v;
        else if (OPT("--levels")) l_levels = v;
        else if (OPT("--modes")) l_modes = v;
        else if (OPT("--codecs")) l_codecs = v;
        else if (OPT("--orders")) l_orders = v;
        else if (OPT("--overlaps")) l_overlaps = v;
        else if (OPT("--runs")) { if (cli_opt_int(a, v, 1, MZ_TTFT_MAX_RUNS, &o.runs)) return 2; }
        else if (OPT("--recompute-runs")) { if (cli_opt_int(a, v, 1, MZ_TTFT_MAX_RUNS, &o.recompute_runs)) return 2; }
        else if (OPT("--recompute-max-ctx")) { if (cli_opt_int(a, v, 0, INT_MAX, &o.recompute_max_ctx)) return 2; }
        else if (OPT("--recompute-models")) o.n_recompute_models = split_list(v, o.recompute_models);
        else if (OPT("--query")) { if (cli_opt_int(a, v, 1, 1 << 20, &o.query)) return 2; }
        else if (OPT("--restore-threads")) {
            if (cli_opt_int(a, v, 0, MZ_RESTORE_THREADS_MAX, &o.restore_threads)) return 2;
        }
        else if (OPT("--lend")) {
            if (!strcmp(v, "auto")) o.lend_kv = 0;
            else if (!strcmp(v, "on")) o.lend_kv = 1;
            else if (!strcmp(v, "off")) o.lend_kv = -1;
            else {
                fprintf(stderr, "mzcache bench ttft: --lend %s: use auto, on or off\n", v);
                return 2;
            }
        }
        else if (!strcmp(a, "--wait-all")) o.wait_all = true;
        else if (!strcmp(a, "--lend-whole")) o.lend_whole = true;
        else if (OPT("-t") || OPT("--threads")) { if (cli_opt_int(a, v, 1, 256, &o.threads)) return 2; }
        else if (OPT("--tol")) { if (cli_opt_double(a, v, 0, 1e6, &o.tol)) return 2; }
        else if (OPT("--swap-dir")) o.swap_dir = v;
        else if (OPT("--profile")) o.profile = v;
        else if (OPT("--peer")) o.peer_csv = v;
        else if (OPT("-o") || OPT("--out")) o.out_dir = v;
        else if (OPT("--name")) o.name = v;
        else if (OPT("--title")) o.title = v;
        else if (!strcmp(a, "--no-inmem")) o.inmem = false;
        else if (!strcmp(a, "--zram")) o.zram = true;
        else if (!strcmp(a, "--no-global-drop")) o.drop_global = false;
        else if (!strcmp(a, "--no-plot")) o.plot = false;
        else if (!strcmp(a, "--swa-full")) o.swa_full = true;
        else {
            fprintf(stderr, "mzcache bench ttft: unknown or incomplete option '%s' (--help)\n", a);
            return 2;
        }
#undef OPT
    }
    o.n_models = split_list(l_models, o.models);
    o.n_ctxs = parse_int_list(l_ctx, o.ctxs);
    o.n_levels = parse_int_list(l_levels, o.levels);
    o.n_modes = split_list(l_modes, o.modes);
    o.n_codecs = split_list(l_codecs, o.codecs);
    o.n_orders = split_list(l_orders, o.orders);
    o.n_overlaps = split_list(l_overlaps, o.overlaps);
    if (o.runs < 1 || o.runs > MZ_TTFT_MAX_RUNS || o.recompute_runs < 1 ||
        o.recompute_runs > MZ_TTFT_MAX_RUNS || o.query < 1 || o.threads < 1 || !o.n_models || !o.n_ctxs || !o.n_levels || !o.n_modes ||
        !o.n_codecs || !o.n_orders || !o.n_overlaps) {
        fprintf(stderr, "mzcache bench ttft: bad option value (--help)\n");
        return 2;
    }
    return mz_ttft_run(&o, cmdline);
}

int cmd_bench(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "ttft")) return bench_ttft(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: mzcache bench ttft [options]   (mzcache bench ttft --help)\n");
        return 0;
    }
    fprintf(stderr, "usage: mzcache bench ttft [options]   (mzcache bench ttft --help)\n");
    return 2;
}
