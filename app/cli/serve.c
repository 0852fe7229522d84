/*
 * serve.c — `mzcache serve`: the daemon (src/server) with its options.
 *
 * The process blocks SIGINT/SIGTERM/SIGHUP before any thread starts and waits
 * for them with sigwait, so shutdown runs on the main thread: stop accepting,
 * finish running requests, stop the pressure monitor, free the context
 * (which removes the swap file). After SIGKILL the next start removes the
 * dead process's swap file (mz_server_start).
 */
#define _GNU_SOURCE
#include "cli.h"

#include "core/parse.h"
#include "server/server.h"

#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int parse_amount_arg(const char *opt, const char *v, double *pct, size_t *bytes)
{
    double x;
    bool is_pct;
    if (mz_parse_amount(v, &x, &is_pct)) {
        fprintf(stderr, "mzcache serve: %s wants a size (512M, 2G, 300K, bytes) or a percentage (25%%)\n", opt);
        return -1;
    }
    if (is_pct) {
        *pct = x;
        *bytes = 0;
    } else {
        *bytes = (size_t)x;
        *pct = 0;
    }
    return 0;
}

/* --pressure-headroom: the flag wins over MZCACHE_PRESSURE_HEADROOM, which
 * mz_pressure_params_default read; both through mz_esize_parse_headroom. */
static int parse_headroom(const char *opt, const char *v, mz_esize_params *size)
{
    if (mz_esize_parse_headroom(v, size) == 0) return 0;
    fprintf(stderr, "mzcache: %s: '%s' is not a size (64M, 1G, bytes) or a %% of the limit (0%% to 95%%)\n", opt, v);
    return -1;
}

static int parse_thresholds(const char *v, double *out)
{
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", v);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(tmp, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        double x;
        bool is_pct;
        if (n >= MZ_PRESSURE_MAX_THRESHOLDS || mz_parse_amount(tok, &x, &is_pct)) return -1;
        if (is_pct && (x <= 0 || x > 100)) return -1;
        if (!is_pct && x <= 100) return -1; /* bytes must not look like a percentage */
        out[n++] = x;
    }
    for (int i = n; i < MZ_PRESSURE_MAX_THRESHOLDS; i++) out[i] = 0;
    return n ? 0 : -1;
}

static char *read_key_file(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f) return NULL;
    char buf[512];
    char *r = fgets(buf, sizeof buf, f);
    fclose(f);
    if (!r) return NULL;
    buf[strcspn(buf, "\r\n")] = '\0';
    return buf[0] ? strdup(buf) : NULL;
}

static const char serve_help[] =
    "usage: mzcache serve -m MODEL [options]\n\n"
    "Serves an OpenAI-style API over persistent conversations (sessions), and gives memory\n"
    "back when the system is under memory pressure (PSI, cgroup v2 memory.events,\n"
    "cgroup v1 pressure levels and usage thresholds). See docs/SERVER.md.\n\n"
    "  endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models,\n"
    "             GET /health, POST /mz/evict, POST /mz/restore, GET /mz/status, GET /metrics,\n"
    "             GET /mz/sessions, DELETE /mz/sessions/ID\n\n"
    "network:\n"
    "      --host ADDR         address to listen on (default 127.0.0.1: this machine only)\n"
    "      --port N            port (default 8080; 0 = any free port)\n"
    "      --port-file FILE    write the port actually bound to FILE\n"
    "      --api-key KEY       require 'Authorization: Bearer KEY' (also $MZ_API_KEY)\n"
    "      --api-key-file F    read the key from F (keeps it out of the process list)\n"
    "      --alias NAME        model id to report (default: the file name)\n"
    "      --timeout S         close connections idle for S seconds (default 30)\n"
    "      --max-body BYTES    largest request body (default 1M)\n"
    "      --max-tokens N      largest max_tokens a request may ask for (default 4096)\n"
    "      --max-queue N       requests that may wait for the engine; more get 429 (default 128;\n"
    "                          at most 256 connections are open at once)\n"
    "      --queue-timeout MS  longest wait in that queue (default 120000)\n"
    "  -v, --verbose           log every request\n\n";

static const char serve_mem_help[] =
    "memory:\n"
    "      --evict-step X      what a PSI signal (or one without a cgroup limit to size it) evicts:\n"
    "                          a % of the evictable total (default 2%) or a size (64M); signals\n"
    "                          with a limit evict exactly what is over the target\n"
    "      --evict-floor X     pressure never goes below X remaining: a % or a size (default 0)\n"
    "      --pressure-level L  act on signals of level L and above: low, medium (default), critical\n"
    "      --pressure-interval MS  least time between two pressure evictions (default 1000)\n"
    "      --pressure-sources LIST  comma list of psi, cg2-events, cg1-level, cg1-usage (default all)\n"
    "      --no-pressure       no monitor (evict through the API only)\n"
    "      --no-restore-ahead  what pressure evicted waits for the next request (default: it is\n"
    "                          restored once all of it fits below the target again and no signal\n"
    "                          asked for memory for 1 s)\n"
    "      --psi-trigger T     PSI trigger (default 'some 100000 2000000'; windows: multiples of 2 s\n"
    "                          without CAP_SYS_RESOURCE)\n"
    "      --cgroup-v1 DIR     v1 memory cgroup to watch (default: this process's)\n"
    "      --usage-threshold L v1 usage thresholds: 90% of the limit (default) or sizes, comma-separated\n"
    "      --pressure-headroom X  evict until the cgroup's usage is X below its limit (v2 memory.high/max,\n"
    "                          v1 limit): a size (32M, 1G) or a % of the limit (default 15%, or\n"
    "                          $MZCACHE_PRESSURE_HEADROOM); size it to what the other processes can\n"
    "                          grab while one eviction runs\n"
    "      --codec NAME        KV codec: auto (default: q8, or q8-q4r where the device\n"
    "                          profile says fewer bytes restore sooner), q8, q8-g32,\n"
    "                          q8-g128, q4, q4-g32, q4-g128, q4r, q8-q4r (K at 8 bits,\n"
    "                          V at q4r), raw, cachegen, cachegen-layer (docs/CODECS.md)\n"
    "      --swap-dir DIR      where the swap file goes\n"
    "      --kv-placement P    auto (default), compressed, storage, storage-compressed, mixed\n"
    "      --mode M            mzcache (default), or a baseline to compare with: os-paging\n"
    "                          (weights mmap'd from the model file, KV paged out to swap by\n"
    "                          the OS), partial-offload (whole layers to storage, restored\n"
    "                          sequentially), recompute (cold start: reload, prefill again)\n\n"
    "sessions (docs/SERVER.md \"Sessions\"):\n"
    "      --max-sessions N    conversations held at once, each with its own KV cache (default 4,\n"
    "                          at most 64); a request names one with X-Session-Id or \"user\",\n"
    "                          else goes to the one its prompt continues; when full the least\n"
    "                          recently used is forgotten\n"
    "      --mem-budget SIZE   keep weights + KV + compressed stacks under SIZE (512M, 2G),\n"
    "                          evicting the least recently used sessions first (default: none)\n"
    "      --shutdown-grace S  on SIGTERM/SIGINT running requests get S seconds to finish, then\n"
    "                          end at their next token; new ones get 503 (default 30)\n"
    "      --token-delay MS    pause after each generated token (tests and demos; default 0)\n\n";

static const char serve_store_help[] =
    "durable sessions (docs/SERVER.md \"Durable sessions\"):\n"
    "      --store DIR         keep named sessions (X-Session-Id / \"user\") in this session store;\n"
    "                          a restarted daemon resumes them by restoring, not recomputing\n"
    "                          (default $XDG_STATE_HOME/mzcache, else ~/.local/state/mzcache)\n"
    "      --no-store          keep nothing: sessions end with the process\n"
    "      --store-limit SIZE  keep the store under SIZE (default 2G): at start, and whenever a new\n"
    "                          anonymous conversation is stored, the least recently used\n"
    "                          sessions not in use are deleted\n"
    "      --fsync POLICY      none, batch (default: fsync before each manifest) or always\n"
    "      --store-codec C     raw (default: exact) or q8 (about half the bytes on disk; a chunk\n"
    "                          restored from the store holds its q8 round trip)\n\n"
    "engine (-n sets the default max_tokens; --temp etc. the default sampling):\n";

int cmd_serve(int argc, char **argv)
{
    cli_opts o;
    cli_opts_defaults(&o);
    o.n_ctx = 4096;
    mz_server_params sp = mz_server_params_default();
    const char *port_file = NULL, *key_file = NULL;
    char *key_owned = NULL;
    bool n_given = false, no_store = false;
    sp.store = true; /* write-behind on by default in serve */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) n_given = true;
        int r = cli_parse_common(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("%s%s%s%s", serve_help, serve_mem_help, serve_store_help, cli_common_help);
            return 0;
        }
        if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) { sp.verbose = true; continue; }
        if (!strcmp(a, "--no-pressure")) { sp.pressure = false; continue; }
        if (!strcmp(a, "--no-restore-ahead")) { sp.restore_ahead = false; continue; }
        if (!strcmp(a, "--no-store")) { no_store = true; continue; }
        if (!v) {
            fprintf(stderr, "mzcache serve: unknown option '%s' or missing value (see mzcache serve --help)\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--host")) sp.host = v;
        else if (!strcmp(a, "--port")) { if (cli_opt_int(a, v, 0, 65535, &sp.port)) return 2; }
        else if (!strcmp(a, "--port-file")) port_file = v;
        else if (!strcmp(a, "--api-key")) sp.api_key = v;
        else if (!strcmp(a, "--api-key-file")) key_file = v;
        else if (!strcmp(a, "--alias")) sp.model_alias = v;
        else if (!strcmp(a, "--timeout")) { if (cli_opt_int(a, v, 1, 86400, &sp.conn_timeout_s)) return 2; }
        else if (!strcmp(a, "--max-tokens")) { if (cli_opt_int(a, v, 1, 1 << 24, &sp.max_tokens_limit)) return 2; }
        else if (!strcmp(a, "--max-queue")) { if (cli_opt_int(a, v, 0, 1024, &sp.max_queue)) return 2; }
        else if (!strcmp(a, "--queue-timeout")) { if (cli_opt_int(a, v, 0, 86400000, &sp.queue_timeout_ms)) return 2; }
        else if (!strcmp(a, "--pressure-interval")) { if (cli_opt_int(a, v, 0, 3600000, &sp.pressure_interval_ms)) return 2; }
        else if (!strcmp(a, "--psi-trigger")) sp.pressure_params.psi_trigger = v;
        else if (!strcmp(a, "--cgroup-v1")) sp.pressure_params.cg1_dir = v;
        else if (!strcmp(a, "--codec")) sp.kv_codec = v;
        else if (!strcmp(a, "--swap-dir")) sp.swap_dir = v;
        else if (!strcmp(a, "--store")) sp.store_dir = v;
        else if (!strcmp(a, "--store-limit")) {
            size_t lim;
            if (mz_parse_size(v, &lim)) {
                fprintf(stderr, "mzcache serve: --store-limit wants a size such as 512M or 2G, not '%s'\n", v);
                return 2;
            }
            sp.store_limit_bytes = lim;
        } else if (!strcmp(a, "--fsync")) {
            if (mz_fsync_policy_parse(v, &sp.store_fsync)) {
                fprintf(stderr, "mzcache serve: %s\n", mz_last_error());
                return 2;
            }
        } else if (!strcmp(a, "--store-codec")) {
            if (strcmp(v, "raw") != 0 && strcmp(v, "q8") != 0) {
                fprintf(stderr, "mzcache serve: --store-codec wants raw or q8, not '%s'\n", v);
                return 2;
            }
            sp.store_codec = v;
        }
        else if (!strcmp(a, "--max-sessions")) {
            if (cli_opt_int(a, v, 1, 64, &sp.max_sessions)) return 2;
        } else if (!strcmp(a, "--shutdown-grace")) {
            int g;
            if (cli_opt_int(a, v, 0, 3600, &g)) return 2;
            sp.shutdown_grace_ms = g * 1000;
        } else if (!strcmp(a, "--token-delay")) {
            if (cli_opt_int(a, v, 0, 10000, &sp.token_delay_ms)) return 2;
        } else if (!strcmp(a, "--mem-budget")) {
            if (mz_parse_size(v, &sp.mem_budget_bytes)) {
                fprintf(stderr, "mzcache serve: --mem-budget wants a size such as 512M or 2G, not '%s'\n", v);
                return 2;
            }
        }
        else if (!strcmp(a, "--max-body")) {
            double x;
            bool pct;
            if (mz_parse_amount(v, &x, &pct) || pct || x < 1) {
                fprintf(stderr, "mzcache serve: --max-body wants a size\n");
                return 2;
            }
            sp.max_body_bytes = (size_t)x;
        } else if (!strcmp(a, "--evict-step")) {
            if (parse_amount_arg(a, v, &sp.evict_step_pct, &sp.evict_step_bytes)) return 2;
        } else if (!strcmp(a, "--evict-floor")) {
            if (parse_amount_arg(a, v, &sp.evict_floor_pct, &sp.evict_floor_bytes)) return 2;
        } else if (!strcmp(a, "--usage-threshold")) {
            if (parse_thresholds(v, sp.pressure_params.cg1_thresholds)) {
                fprintf(stderr, "mzcache serve: --usage-threshold wants up to 4 of: a %% of the limit or a size\n");
                return 2;
            }
        } else if (!strcmp(a, "--pressure-headroom")) {
            if (parse_headroom(a, v, &sp.pressure_params.size)) return 2;
        } else if (!strcmp(a, "--pressure-level")) {
            if (!strcmp(v, "low")) sp.pressure_min_level = MZ_PRESSURE_LOW;
            else if (!strcmp(v, "medium")) sp.pressure_min_level = MZ_PRESSURE_MEDIUM;
            else if (!strcmp(v, "critical")) sp.pressure_min_level = MZ_PRESSURE_CRITICAL;
            else {
                fprintf(stderr, "mzcache serve: --pressure-level is low, medium or critical\n");
                return 2;
            }
        } else if (!strcmp(a, "--pressure-sources")) {
            for (int s = 0; s < MZ_PRESSURE_N_SOURCES; s++) sp.pressure_params.enable[s] = false;
            char tmp[128];
            snprintf(tmp, sizeof tmp, "%s", v);
            for (char *save = NULL, *tok = strtok_r(tmp, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                int found = -1;
                for (int s = 0; s < MZ_PRESSURE_N_SOURCES; s++)
                    if (!strcmp(tok, mz_pressure_source_name((mz_pressure_source)s))) found = s;
                if (found < 0) {
                    fprintf(stderr, "mzcache serve: unknown pressure source '%s' (psi, cg2-events, cg1-level, cg1-usage)\n", tok);
                    return 2;
                }
                sp.pressure_params.enable[found] = true;
            }
        } else if (!strcmp(a, "--mode")) {
            if (mz_engine_mode_parse(v, &sp.mode)) {
                fprintf(stderr, "mzcache serve: %s\n", mz_last_error());
                return 2;
            }
        } else if (!strcmp(a, "--kv-placement")) {
            if (mz_kv_placement_parse(v, &sp.kv_placement)) {
                fprintf(stderr, "mzcache serve: %s\n", mz_last_error());
                return 2;
            }
        } else {
            fprintf(stderr, "mzcache serve: unknown option '%s' (see mzcache serve --help)\n", a);
            return 2;
        }
    }
    if (no_store) sp.store = false;
    if (!o.model) {
        fprintf(stderr, "mzcache serve: no model; use -m FILE\n");
        return 2;
    }
    if (cli_check_swap_dir("serve", sp.swap_dir)) return 2;
    cli_fit_ctx_file(&o);
    cli_note_profile("serve");
    if (sp.port < 0 || sp.port > 65535) {
        fprintf(stderr, "mzcache serve: --port must be 0..65535\n");
        return 2;
    }
    if (key_file) {
        key_owned = read_key_file(key_file);
        if (!key_owned) {
            fprintf(stderr, "mzcache serve: cannot read an API key from --api-key-file\n");
            return 2;
        }
        sp.api_key = key_owned;
    } else if (!sp.api_key && getenv("MZ_API_KEY") && *getenv("MZ_API_KEY")) {
        sp.api_key = getenv("MZ_API_KEY");
    }
    sp.model_path = o.model;
    sp.chat_template = o.chat_template;
    sp.n_ctx = o.n_ctx;
    sp.n_threads = o.n_threads;
    sp.n_batch = o.n_batch;
    sp.sampler = o.sampler;
    sp.seed_fixed = o.seed_given;
    if (n_given && o.n_predict > 0) sp.default_max_tokens = o.n_predict;

    /* Signals go to sigwait below, never to a server thread. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP); /* the terminal went away: still clean up */
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    mz_server_t *srv = NULL;
    if (mz_server_start(&sp, &srv)) {
        fprintf(stderr, "mzcache serve: %s\n", mz_last_error());
        free(key_owned);
        return 1;
    }
    if (port_file) {
        FILE *f = fopen(port_file, "we");
        if (f) {
            fprintf(f, "%d\n", mz_server_port(srv));
            fclose(f);
        } else {
            fprintf(stderr, "mzcache serve: cannot write --port-file\n");
        }
    }
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "mzcache: %s: shutting down\n", sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "SIGTERM");
    mz_server_stop(srv);
    if (port_file) unlink(port_file); /* the port is free again: no stale file for supervisors */
    free(key_owned);
    return 0;
}
