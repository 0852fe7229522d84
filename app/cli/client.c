/*
 * client.c — `mzcache evict AMOUNT` and `mzcache status`: talk to a running
 * `mzcache serve` over HTTP (POST /mz/evict, GET /mz/status).
 */
#define _GNU_SOURCE
#include "cli.h"

#include "core/parse.h"
#include "server/server.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct client_opts {
    const char *host;
    int port;
    const char *api_key;
    bool json;
    int timeout_ms;
} client_opts;

/* Returns 1 if argv[*i] was a connection option, 0 if not, -1 on error. */
static int parse_client_opt(client_opts *c, int argc, char **argv, int *i)
{
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!strcmp(a, "--json")) { c->json = true; return 1; }
    bool takes = !strcmp(a, "--host") || !strcmp(a, "--port") || !strcmp(a, "--api-key") || !strcmp(a, "--timeout");
    if (!takes) return 0;
    if (!v) {
        fprintf(stderr, "mzcache: %s needs a value\n", a);
        return -1;
    }
    (*i)++;
    if (!strcmp(a, "--host")) c->host = v;
    else if (!strcmp(a, "--port")) return cli_opt_int(a, v, 1, 65535, &c->port) ? -1 : 1;
    else if (!strcmp(a, "--api-key")) c->api_key = v;
    else {
        int s;
        if (cli_opt_int(a, v, 1, 86400, &s)) return -1;
        c->timeout_ms = s * 1000;
    }
    return 1;
}

static const char client_help[] =
    "      --host ADDR         daemon address (default 127.0.0.1)\n"
    "      --port N            daemon port (default 8080)\n"
    "      --api-key KEY       API key (default $MZ_API_KEY)\n"
    "      --timeout S         give up after S seconds (default 120)\n"
    "      --json              print the daemon's JSON answer as is\n";

static void client_defaults(client_opts *c)
{
    c->host = "127.0.0.1";
    c->port = 8080;
    c->api_key = getenv("MZ_API_KEY");
    if (c->api_key && !*c->api_key) c->api_key = NULL;
    c->json = false;
    c->timeout_ms = 120000;
}

static int call(const client_opts *c, const char *method, const char *path, const char *body, cJSON **out,
                mz_http_response *resp)
{
    int rc = mz_http_request(c->host, c->port, method, path, c->api_key, body, body ? strlen(body) : 0,
                             c->timeout_ms, resp);
    if (rc) {
        fprintf(stderr, "mzcache: cannot reach the daemon at %s:%d: %s\n", c->host, c->port, strerror(-rc));
        return 1;
    }
    *out = cJSON_ParseWithLength(resp->body, resp->len);
    if (resp->status != 200) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(*out, "error");
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
        fprintf(stderr, "mzcache: daemon answered %d: %s\n", resp->status,
                cJSON_IsString(m) ? m->valuestring : "(no message)");
        return 1;
    }
    if (!*out) {
        fprintf(stderr, "mzcache: the daemon's answer is not JSON\n");
        return 1;
    }
    return 0;
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(j) ? j->valuedouble : 0;
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(j) ? j->valuestring : "";
}

static void print_memory(const cJSON *m)
{
    const double M = 1024.0 * 1024.0;
    printf("memory (MiB)  total  resident  compressed    stored   dropped   units resident\n");
    const char *cats[] = {"weights", "kv"};
    for (int i = 0; i < 2; i++) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, cats[i]);
        printf("  %-8s %9.1f %9.1f %11.1f %9.1f %9.1f   %.0f/%.0f\n", cats[i], num(c, "total_bytes") / M,
               num(c, "resident_bytes") / M, num(c, "compressed_bytes") / M, num(c, "stored_bytes") / M,
               num(c, "dropped_bytes") / M, num(c, "units_resident"), num(c, "units"));
    }
    printf("remaining %.1f%% (%s) | pinned %.1f MiB | context %.0f/%.0f tokens | codec %s | placement %s\n",
           num(m, "remaining_pct"), str(m, "stage"), num(m, "pinned_bytes") / M, num(m, "context_tokens"),
           num(m, "context_size"), str(m, "codec"), str(m, "placement"));
}

/* An event's Unix time as UTC ISO-8601 and how long ago. */
static const char *fmt_when(double t_unix, char *buf, size_t cap)
{
    time_t secs = (time_t)t_unix;
    struct tm tm;
    char iso[32] = "?";
    if (gmtime_r(&secs, &tm)) strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%SZ", &tm);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double ago = (double)now.tv_sec + (double)now.tv_nsec / 1e9 - t_unix;
    if (ago < 0) ago = 0;
    if (ago < 120) snprintf(buf, cap, "%s (%3.0f s ago)", iso, ago);
    else if (ago < 7200) snprintf(buf, cap, "%s (%3.0f min ago)", iso, ago / 60);
    else snprintf(buf, cap, "%s (%3.0f h ago)", iso, ago / 3600);
    return buf;
}

int cmd_evict(int argc, char **argv)
{
    client_opts c;
    client_defaults(&c);
    const char *amount = NULL;
    for (int i = 1; i < argc; i++) {
        int r = parse_client_opt(&c, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: mzcache evict AMOUNT [options]\n\n"
                   "Asks a running `mzcache serve` to give memory back now. AMOUNT: 40%% (of the\n"
                   "evictable total), 512M, 2G, 300K, plain bytes, or all.\n\n%s", client_help);
            return 0;
        }
        if (amount || argv[i][0] == '-') {
            fprintf(stderr, "mzcache evict: unexpected '%s' (see mzcache evict --help)\n", argv[i]);
            return 2;
        }
        amount = argv[i];
    }
    if (!amount) {
        fprintf(stderr, "mzcache evict: give an amount: 40%%, 512M, all (see mzcache evict --help)\n");
        return 2;
    }
    char body[96];
    if (!strcmp(amount, "all")) {
        snprintf(body, sizeof body, "{\"all\":true}");
    } else {
        double v;
        bool pct;
        if (mz_parse_amount(amount, &v, &pct)) {
            fprintf(stderr, "mzcache evict: '%s' is not an amount (40%%, 512M, 2G, 300K, bytes, all)\n", amount);
            return 2;
        }
        if (pct) snprintf(body, sizeof body, "{\"percent\":%.6g}", v);
        else snprintf(body, sizeof body, "{\"bytes\":%.0f}", v);
    }
    mz_http_response resp;
    cJSON *j = NULL;
    int rc = call(&c, "POST", "/mz/evict", body, &j, &resp);
    if (!rc) {
        if (c.json) {
            printf("%s\n", resp.body);
        } else {
            printf("freed %.1f MiB%s in %.1f ms: KV %.0f compressed, %.0f stored raw, %.0f stored compressed, "
                   "%.0f moved to storage; %.0f weight blocks dropped\n",
                   num(j, "freed_bytes") / 1048576.0, cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "complete")) ? "" : " (all it could)",
                   num(j, "ms"), num(j, "kv_compressed"), num(j, "kv_stored_raw"), num(j, "kv_stored_compressed"),
                   num(j, "kv_compkv"), num(j, "weights_dropped"));
            print_memory(cJSON_GetObjectItemCaseSensitive(j, "memory"));
        }
    }
    cJSON_Delete(j);
    mz_http_response_free(&resp);
    return rc;
}

int cmd_status(int argc, char **argv)
{
    client_opts c;
    client_defaults(&c);
    for (int i = 1; i < argc; i++) {
        int r = parse_client_opt(&c, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: mzcache status [options]\n\n"
                   "Shows a running `mzcache serve`'s memory, pressure interfaces, last request\n"
                   "and recent evictions.\n\n%s", client_help);
            return 0;
        }
        fprintf(stderr, "mzcache status: unexpected '%s' (see mzcache status --help)\n", argv[i]);
        return 2;
    }
    mz_http_response resp;
    cJSON *j = NULL;
    int rc = call(&c, "GET", "/mz/status", NULL, &j, &resp);
    if (!rc) {
        if (c.json) {
            printf("%s\n", resp.body);
        } else {
            printf("model %s | %s | %.0f queued | RSS %.1f MiB\n", str(j, "model"),
                   cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "busy")) ? "busy" : "idle", num(j, "queued"),
                   num(cJSON_GetObjectItemCaseSensitive(j, "process"), "rss_bytes") / 1048576.0);
            print_memory(cJSON_GetObjectItemCaseSensitive(j, "memory"));
            const cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, "pressure");
            printf("pressure:");
            const char *srcs[] = {"psi", "cg2-events", "cg1-level", "cg1-usage"};
            for (int i = 0; i < 4; i++) {
                const cJSON *s = cJSON_GetObjectItemCaseSensitive(pr, srcs[i]);
                printf(" %s %s (%.0f signals)%s", srcs[i],
                       cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "active")) ? "on" : "off",
                       num(s, "signals"), i < 3 ? "," : "\n");
            }
            printf("  %.0f pressure evictions, %.1f MiB freed\n", num(pr, "evictions"), num(pr, "evicted_bytes") / 1048576.0);
            const cJSON *lr = cJSON_GetObjectItemCaseSensitive(j, "last_request");
            if (cJSON_GetObjectItemCaseSensitive(lr, "ttft_ms"))
                printf("last request: %.0f prompt tokens (%.0f cached, %.0f computed), %.0f generated; "
                       "TTFT %.1f ms (queue %.1f, prefill+restore %.1f); remaining before %.1f%%\n",
                       num(lr, "prompt_tokens"), num(lr, "cached_tokens"), num(lr, "prefilled_tokens"),
                       num(lr, "generated_tokens"), num(lr, "ttft_ms"), num(lr, "queue_ms"), num(lr, "prefill_ms"),
                       num(lr, "remaining_pct_before"));
            const cJSON *evs = cJSON_GetObjectItemCaseSensitive(j, "events"), *e;
            int n = cJSON_GetArraySize(evs), k = 0;
            if (n) printf("recent evictions:\n");
            cJSON_ArrayForEach(e, evs) {
                if (k++ < n - 10) continue;
                char when[64];
                printf("  %s %-10s %-32s freed %7.1f MiB in %6.1f ms -> remaining %5.1f%%%s\n",
                       fmt_when(num(e, "t"), when, sizeof when),
                       str(e, "trigger"), str(e, "what"), num(e, "freed_bytes") / 1048576.0, num(e, "ms"),
                       num(e, "remaining_pct"), cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "at_floor")) ? " (at floor)" : "");
            }
        }
    }
    cJSON_Delete(j);
    mz_http_response_free(&resp);
    return rc;
}

/* ---- mzcache sessions ------------------------------------------------------------------ */

/* DELETE /mz/sessions/ID, waiting while the session is generating (409
 * with Retry-After) up to the client timeout; with no daemon to ask, the
 * session is deleted from the store directly. */
static int sessions_delete(const client_opts *c, const char *del, const char *store_dir)
{
    char path[96];
    snprintf(path, sizeof path, "/mz/sessions/%s", del);
    double waited_ms = 0;
    bool said = false;
    for (;;) {
        mz_http_response resp;
        int rc = mz_http_request(c->host, c->port, "DELETE", path, c->api_key, NULL, 0, c->timeout_ms, &resp);
        if (rc == -ECONNREFUSED) {
            mz_store_params sp = mz_store_params_default();
            sp.dir = store_dir;
            if (mz_store_delete_id(&sp, del)) {
                fprintf(stderr, "mzcache sessions: no daemon at %s:%d, and the store: %s\n", c->host, c->port,
                        mz_last_error());
                return 1;
            }
            printf("deleted %s from the session store (no daemon at %s:%d)\n", del, c->host, c->port);
            return 0;
        }
        if (rc) {
            fprintf(stderr, "mzcache: cannot reach the daemon at %s:%d: %s\n", c->host, c->port, strerror(-rc));
            return 1;
        }
        cJSON *j = cJSON_ParseWithLength(resp.body, resp.len);
        int status = resp.status;
        if (status == 409 && waited_ms < c->timeout_ms) {
            if (!said) fprintf(stderr, "(session %s is generating an answer: waiting for it to end)\n", del);
            said = true;
            cJSON_Delete(j);
            mz_http_response_free(&resp);
            struct timespec ts = {0, 250 * 1000000L};
            nanosleep(&ts, NULL);
            waited_ms += 250;
            continue;
        }
        if (status == 200) {
            printf("%s\n", c->json ? resp.body : "deleted");
        } else {
            const cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "error"), "message");
            fprintf(stderr, "mzcache: daemon answered %d: %s\n", status, cJSON_IsString(m) ? m->valuestring : "(no message)");
        }
        cJSON_Delete(j);
        mz_http_response_free(&resp);
        return status == 200 ? 0 : 1;
    }
}

int cmd_sessions(int argc, char **argv)
{
    client_opts c;
    client_defaults(&c);
    const char *del = NULL, *store_dir = NULL;
    for (int i = 1; i < argc; i++) {
        int r = parse_client_opt(&c, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: mzcache sessions [--delete ID [--store DIR]] [options]\n\n"
                   "Lists a running `mzcache serve`'s conversations (most recent first): tokens,\n"
                   "where their KV is, last use and last time to first token; stored sessions not\n"
                   "in memory show their stored tokens and file size. --delete ID forgets one,\n"
                   "waiting while it is generating an answer; with no daemon running, it deletes\n"
                   "the session (`chat --session` ones too) from the store: --store DIR, default\n"
                   "$XDG_STATE_HOME/mzcache or ~/.local/state/mzcache.\n\n%s", client_help);
            return 0;
        }
        if (!strcmp(argv[i], "--delete") || !strcmp(argv[i], "--store")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "mzcache sessions: %s needs a value\n", argv[i]);
                return 2;
            }
            if (!strcmp(argv[i], "--delete")) del = argv[++i];
            else store_dir = argv[++i];
            continue;
        }
        fprintf(stderr, "mzcache sessions: unexpected '%s' (see mzcache sessions --help)\n", argv[i]);
        return 2;
    }
    if (del) {
        /* The id goes into the path and names files: the one rule. */
        const char *why = mz_session_id_check(del, true);
        if (why) {
            fprintf(stderr, "mzcache sessions: '%s' is not a session id: %s\n", del, why);
            return 2;
        }
        return sessions_delete(&c, del, store_dir);
    }
    if (store_dir) {
        fprintf(stderr, "mzcache sessions: --store goes with --delete (the list is the daemon's)\n");
        return 2;
    }
    mz_http_response resp;
    cJSON *j = NULL;
    int rc = call(&c, "GET", "/mz/sessions", NULL, &j, &resp);
    if (!rc && c.json) {
        printf("%s\n", resp.body);
    } else if (!rc) {
        const double M = 1024.0 * 1024.0;
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "budget"), *e;
        int n_stored_only = 0;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "data"))
            if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(e, "loaded"))) n_stored_only++;
        printf("%.0f of %.0f sessions in memory, %d more stored | footprint %.1f MiB", num(b, "sessions"),
               num(b, "max_sessions"), n_stored_only, num(b, "footprint_bytes") / M);
        if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(b, "budget_bytes")))
            printf(" of a %.1f MiB budget%s", num(b, "budget_bytes") / M,
                   cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "over_budget")) ? " (over)" : "");
        printf("\n%-24s %7s %10s %11s %9s  %-24s %9s\n", "session", "tokens", "resident", "compressed", "stored",
               "last use (UTC)", "TTFT ms");
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "data")) {
            if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(e, "loaded"))) {
                /* Stored, not in memory: what its files hold. */
                printf("%-24s %7.0f %10s %11s %8.1fM  %-24s %9s  (stored%s)\n", str(e, "id"), num(e, "stored_tokens"),
                       "-", "-", num(e, "stored_file_bytes") / M, str(e, "last_use"), "-",
                       cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(e, "resumable")) ? ", not resumable" : "");
                continue;
            }
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "last_ttft_ms");
            char ttft[32] = "-";
            if (cJSON_IsNumber(t)) snprintf(ttft, sizeof ttft, "%.1f", t->valuedouble);
            printf("%-24s %7.0f %9.1fM %10.1fM %8.1fM  %-24s %9s%s\n", str(e, "id"), num(e, "tokens"),
                   num(e, "resident_bytes") / M, num(e, "compressed_bytes") / M, num(e, "stored_bytes") / M,
                   str(e, "last_use"), ttft,
                   cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "active")) ? "  (in use)" : "");
        }
    }
    cJSON_Delete(j);
    mz_http_response_free(&resp);
    return rc;
}
