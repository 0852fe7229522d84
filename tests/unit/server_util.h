/*
 * server_util.h — what the tests of the daemon share (test_server.c,
 * test_server_sessions.c, test_pressure.c): the tiny model they serve, the
 * common server parameters, reading a parsed JSON answer by a dotted path
 * ("a.b.c"), and the check of a /metrics body. Header-only (static inline
 * functions).
 */
#ifndef MZ_TEST_SERVER_UTIL_H
#define MZ_TEST_SERVER_UTIL_H

#include "mzcache.h"
#include "server/server.h"
#include "testutil.h"

#include <regex.h>
#include <stdbool.h>

/* strtok_r is POSIX: the includer defines _GNU_SOURCE or _POSIX_C_SOURCE first. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

/* The member at path (keys separated by '.', at most 127 characters in
 * all), or NULL when any step is missing. */
static inline const cJSON *jget(const cJSON *o, const char *path)
{
    char tmp[128];
    snprintf(tmp, sizeof tmp, "%s", path);
    const cJSON *cur = o;
    for (char *save = NULL, *k = strtok_r(tmp, ".", &save); k && cur; k = strtok_r(NULL, ".", &save))
        cur = cJSON_GetObjectItemCaseSensitive(cur, k);
    return cur;
}

/* The number at path; -1e300 (no answer could hold it) when absent or not a number. */
static inline double jnum(const cJSON *o, const char *path)
{
    const cJSON *j = jget(o, path);
    return cJSON_IsNumber(j) ? j->valuedouble : -1e300;
}

/* The string at path; NULL when absent or not a string. */
static inline const char *jstr(const cJSON *o, const char *path)
{
    const cJSON *j = jget(o, path);
    return cJSON_IsString(j) ? j->valuestring : NULL;
}

/* Generates the served model at path: tiny-llama, 4 layers, Q8_0, the
 * vocabulary of the real model at real (the chat template needs it). */
static inline mz_status srv_gen_tiny(const char *path, const char *real)
{
    mz_gen_params gp = mz_gen_params_default();
    gp.preset = "tiny-llama";
    gp.n_layer = 4;
    gp.weight_type = "Q8_0";
    gp.vocab_from = real;
    return mz_gen_model(path, &gp);
}

/* The defaults, on an ephemeral port with 1024 positions, 2 threads, the
 * given model and swap directory, and the lossless raw KV codec (answers
 * after an eviction must match bit for bit). */
static inline mz_server_params srv_params(const char *model, const char *swap_dir)
{
    mz_server_params sp = mz_server_params_default();
    sp.model_path = model;
    sp.port = 0;
    sp.n_ctx = 1024;
    sp.n_threads = 2;
    sp.swap_dir = swap_dir;
    sp.kv_codec = "raw";
    return sp;
}

/* Checks every sample line of a /metrics body against the Prometheus text
 * format (a check each) and, with check_comments, that every '#' line is
 * HELP or TYPE (a check each); the number of sample lines. Splits body into
 * lines in place. */
static inline int srv_check_metrics(char *body, bool check_comments)
{
    regex_t re;
    regcomp(&re, "^[a-zA-Z_:][a-zA-Z0-9_:]*(\\{[a-z_]+=\"[^\"]*\"(,[a-z_]+=\"[^\"]*\")*\\})? -?[0-9.e+-]+$",
            REG_EXTENDED | REG_NOSUB);
    int n_samples = 0;
    for (char *save = NULL, *line = strtok_r(body, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#') {
            if (check_comments)
                CHECK_MSG(!strncmp(line, "# HELP ", 7) || !strncmp(line, "# TYPE ", 7), "comment '%s'", line);
            continue;
        }
        n_samples++;
        CHECK_MSG(regexec(&re, line, 0, NULL, 0) == 0, "metrics line '%s'", line);
    }
    regfree(&re);
    return n_samples;
}

#endif
