/*
 * test_server_genpaths.c — the three ways to generate give one answer. The
 * same greedy prompt goes through `mzcache run` (a child process), the
 * server (in-process, over a real socket: /v1/chat/completions and
 * /v1/completions) and mz_restore_generate (after every unit was evicted);
 * each must give the same text, the same number of generated tokens and the
 * same finish: end of generation for an answer that ends by itself, the
 * token limit for one that is cut. They share one loop (src/engine/
 * generate.c); a path that handled end of text or the limit its own way, or
 * counted differently, fails here. Model: the real SmolLM2 (skips when
 * models/ lacks it, or when MZ_BIN does not name the mzcache binary).
 */
#define _GNU_SOURCE
#include "server/server.h"

#include "testutil.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define N_CTX 512
#define N_THREADS 2

/* One path's answer. finish: "eog" or "length" (each path's own word mapped:
 * the server's "stop" is end of generation here, no stop strings are sent). */
typedef struct answer {
    char text[4096];
    long n_tokens;
    char finish[16];
} answer;

typedef struct gen_case {
    const char *name;
    const char *prompt;
    bool chat;                 /* a user message in the chat template, else a raw prompt */
    int max_tokens;
    const char *want_finish;   /* what SmolLM2 does with it (the case is meant to cover it) */
} gen_case;

static const gen_case g_cases[] = {
    {"chat, ends by itself", "What is the capital of France? Answer in one word.", true, 64, "eog"},
    {"chat, cut by max_tokens", "What is the capital of France? Answer in one word.", true, 3, "length"},
    {"raw prompt, cut by max_tokens", "The capital of France is", false, 8, "length"},
};

/* Under ThreadSanitizer the real model computes ~15x slower: the first case
 * (the server's generation threads beside the others) is enough there. */
static const bool g_tsan = T_UNDER_TSAN;

static void answer_set(answer *a, const char *text, long n, const char *finish)
{
    snprintf(a->text, sizeof a->text, "%s", text ? text : "");
    a->n_tokens = n;
    snprintf(a->finish, sizeof a->finish, "%s", finish ? finish : "?");
}

/* ---- mz_restore_generate ---------------------------------------------------------- */

typedef struct collect {
    mz_detok_t *dt;
    char text[4096];
    size_t len;
} collect;

static void collect_put(collect *c, const char *p, size_t n)
{
    for (size_t i = 0; i < n && c->len + 1 < sizeof c->text; i++) c->text[c->len++] = p[i];
    c->text[c->len] = '\0';
}

static mz_gen_action on_token(void *user, mz_token t, const float *logits, int n_vocab)
{
    (void)logits;
    (void)n_vocab;
    collect *c = user;
    char buf[256];
    collect_put(c, buf, mz_detok_push(c->dt, t, false, buf, sizeof buf));
    return MZ_GEN_CONTINUE;
}

static mz_status tokenize(const mz_model_t *m, const char *text, mz_token *out, size_t cap, size_t *n)
{
    return mz_tokenize(m, text, strlen(text), true, true, out, cap, n);
}

static bool via_restore_generate(mz_model_t *m, const gen_case *gc, answer *out)
{
    bool ok = false;
    char formatted[2048];
    const char *text = gc->prompt;
    if (gc->chat) {
        mz_chat_msg msg = {"user", gc->prompt};
        size_t need = 0;
        if (mz_chat_format(m, &msg, 1, true, formatted, sizeof formatted, &need)) return false;
        text = formatted;
    }
    mz_token toks[512];
    size_t n = 0;
    if (tokenize(m, text, toks, 512, &n)) return false;
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = N_CTX;
    cp.n_threads = N_THREADS;
    cp.swap_dir = t_tmp_path("genpaths-swap");
    cp.kv_codec = "raw";
    mz_sampler_params sp = mz_sampler_params_default();
    sp.temperature = 0;
    mz_ctx_t *c = NULL;
    mz_sampler_t *smp = NULL;
    collect col = {0};
    if (mz_ctx_init(m, &cp, &c) || mz_sampler_init(&sp, &smp) || mz_detok_init(m, &col.dt)) goto out;
    /* Every weight block out first: the answer comes through the pipelined restore. */
    if (mz_evict(c, SIZE_MAX, NULL)) goto out;
    mz_generate_params gp = mz_generate_params_default();
    gp.max_tokens = (size_t)gc->max_tokens;
    gp.on_token = on_token;
    gp.user = &col;
    mz_generate_result gr;
    if (mz_restore_generate(c, toks, n, NULL, smp, &gp, &gr, NULL)) goto out;
    char buf[16];
    collect_put(&col, buf, mz_detok_flush(col.dt, buf, sizeof buf));
    answer_set(out, col.text, (long)gr.n_tokens, mz_finish_name(gr.finish));
    /* The end of generation joined the context; a cut answer has nothing after it. */
    CHECK_EQ_INT(mz_ctx_n_tokens(c), n + gr.n_tokens + (gr.finish == MZ_FINISH_EOG));
    ok = true;
out:
    if (!ok) fprintf(stderr, "restore_generate: %s\n", mz_last_error());
    mz_detok_free(col.dt);
    mz_sampler_free(smp);
    mz_ctx_free(c);
    return ok;
}

/* ---- the server ------------------------------------------------------------------- */

static bool via_server(int port, const gen_case *gc, answer *out)
{
    cJSON *req = cJSON_CreateObject();
    if (gc->chat) {
        cJSON *msgs = cJSON_AddArrayToObject(req, "messages");
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", gc->prompt);
        cJSON_AddItemToArray(msgs, m);
    } else {
        cJSON_AddStringToObject(req, "prompt", gc->prompt);
    }
    cJSON_AddNumberToObject(req, "temperature", 0);
    cJSON_AddNumberToObject(req, "max_tokens", gc->max_tokens);
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    mz_http_response r = {0};
    int rc = body ? mz_http_request("127.0.0.1", port, "POST", gc->chat ? "/v1/chat/completions" : "/v1/completions",
                                    NULL, body, strlen(body), 120000, &r)
                  : -1;
    free(body);
    if (rc || r.status != 200) {
        fprintf(stderr, "server: rc %d, status %d: %.*s\n", rc, r.status, (int)r.len, r.body ? r.body : "");
        mz_http_response_free(&r);
        return false;
    }
    cJSON *j = cJSON_ParseWithLength(r.body, r.len);
    mz_http_response_free(&r);
    cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    cJSON *text = gc->chat ? cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ch, "message"), "content")
                           : cJSON_GetObjectItemCaseSensitive(ch, "text");
    cJSON *fin = cJSON_GetObjectItemCaseSensitive(ch, "finish_reason");
    cJSON *n = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "usage"), "completion_tokens");
    bool ok = cJSON_IsString(text) && cJSON_IsString(fin) && cJSON_IsNumber(n);
    if (ok)
        answer_set(out, text->valuestring, (long)n->valuedouble,
                   !strcmp(fin->valuestring, "stop") ? "eog" : fin->valuestring);
    else
        fprintf(stderr, "server: unexpected response\n");
    cJSON_Delete(j);
    return ok;
}

/* ---- mzcache run -------------------------------------------------------------------- */

static bool via_cli(const char *bin, const char *model, const gen_case *gc, answer *out)
{
    char n_pred[16], n_ctx[16], n_thr[16];
    snprintf(n_pred, sizeof n_pred, "%d", gc->max_tokens);
    snprintf(n_ctx, sizeof n_ctx, "%d", N_CTX);
    snprintf(n_thr, sizeof n_thr, "%d", N_THREADS);
    char out_path[1024], err_path[1024];
    snprintf(out_path, sizeof out_path, "%s", t_tmp_path("genpaths-run.out"));
    snprintf(err_path, sizeof err_path, "%s", t_tmp_path("genpaths-run.err"));
    const char *argv[] = {bin, "run", "-m", model, "-p", gc->prompt, "--greedy", "-n", n_pred, "-c", n_ctx,
                          "-t", n_thr, gc->chat ? "--chat" : NULL,
                          NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    int rc = posix_spawn(&pid, bin, &fa, NULL, (char *const *)(uintptr_t)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    int st = 0;
    if (rc || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        char *err = t_read_file(err_path, NULL);
        fprintf(stderr, "mzcache run: spawn %d, status %d: %s\n", rc, st, err ? err : "");
        free(err);
        return false;
    }
    size_t len = 0;
    char *text = t_read_file(out_path, &len), *err = t_read_file(err_path, NULL);
    bool ok = false;
    const char *dec = err ? strstr(err, "decode: ") : NULL, *fin = err ? strstr(err, "finish: ") : NULL;
    long n = -1;
    char finish[16] = "";
    if (text && dec && fin && sscanf(dec, "decode: %ld tokens", &n) == 1 && sscanf(fin, "finish: %15s", finish) == 1) {
        /* stdout: the prompt (raw prompts only), the answer, then one newline. */
        size_t skip = gc->chat ? 0 : strlen(gc->prompt);
        if (len > skip && text[len - 1] == '\n' && !strncmp(text, gc->prompt, skip)) {
            text[len - 1] = '\0';
            answer_set(out, text + skip, n, finish);
            ok = true;
        }
    }
    if (!ok) fprintf(stderr, "mzcache run: unexpected output:\n%s\n%s\n", text ? text : "", err ? err : "");
    free(text);
    free(err);
    return ok;
}

int main(void)
{
    const char *model = t_real_model_path();
    if (!model) return t_skip("test_server_genpaths", "no models/SmolLM2 (run make model)");
    const char *bin = getenv("MZ_BIN");
    if (!bin || access(bin, X_OK) != 0)
        return t_skip("test_server_genpaths", "MZ_BIN does not name the mzcache binary (ctest sets it)");
    mz_model_t *m = NULL;
    mz_model_params mp = mz_model_params_default();
    if (mz_model_load(model, &mp, &m)) {
        fprintf(stderr, "load: %s\n", mz_last_error());
        return 1;
    }
    mz_server_params sp = mz_server_params_default();
    sp.model_path = model;
    sp.port = 0;
    sp.n_ctx = N_CTX;
    sp.n_threads = N_THREADS;
    sp.swap_dir = t_tmp_path("genpaths-swap");
    sp.kv_codec = "raw";
    sp.pressure = false;
    sp.max_tokens_limit = 512;
    sp.max_sessions = 1;
    mz_server_t *srv = NULL;
    if (mz_server_start(&sp, &srv)) {
        fprintf(stderr, "server start: %s\n", mz_last_error());
        mz_model_free(m);
        return 1;
    }
    int port = mz_server_port(srv);
    size_t n_cases = g_tsan ? 1 : sizeof g_cases / sizeof g_cases[0];
    for (size_t i = 0; i < n_cases; i++) {
        const gen_case *gc = &g_cases[i];
        answer a_rg, a_srv, a_cli;
        bool ok_rg = via_restore_generate(m, gc, &a_rg), ok_srv = via_server(port, gc, &a_srv),
             ok_cli = via_cli(bin, model, gc, &a_cli);
        CHECK_MSG(ok_rg && ok_srv && ok_cli, "%s: a path failed (restore_generate %d, server %d, run %d)", gc->name,
                  ok_rg, ok_srv, ok_cli);
        if (!ok_rg || !ok_srv || !ok_cli) continue;
        printf("%s: %ld tokens, %s: \"%s\"\n", gc->name, a_rg.n_tokens, a_rg.finish, a_rg.text);
        CHECK_MSG(!strcmp(a_rg.finish, gc->want_finish), "%s: restore_generate finished with %s, the case needs %s",
                  gc->name, a_rg.finish, gc->want_finish);
        const answer *others[] = {&a_srv, &a_cli};
        const char *names[] = {"server", "mzcache run"};
        for (int k = 0; k < 2; k++) {
            const answer *o = others[k];
            CHECK_MSG(!strcmp(o->text, a_rg.text), "%s: %s said \"%s\", restore_generate \"%s\"", gc->name,
                      names[k], o->text, a_rg.text);
            CHECK_MSG(o->n_tokens == a_rg.n_tokens, "%s: %s generated %ld tokens, restore_generate %ld", gc->name,
                      names[k], o->n_tokens, a_rg.n_tokens);
            CHECK_MSG(!strcmp(o->finish, a_rg.finish), "%s: %s finished with %s, restore_generate with %s", gc->name,
                      names[k], o->finish, a_rg.finish);
        }
        if (!strcmp(gc->want_finish, "length"))
            CHECK_EQ_INT(a_rg.n_tokens, gc->max_tokens);
        else
            CHECK(a_rg.n_tokens < gc->max_tokens);
    }
    mz_server_stop(srv);
    mz_model_free(m);
    return t_done("test_server_genpaths");
}
