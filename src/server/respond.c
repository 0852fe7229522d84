/*
 * respond.c — what every part of the daemon writes with: the wall clock, the log
 * line, and the HTTP responses (JSON bodies, OpenAI-shaped errors, counted by
 * status class). Error messages never carry paths or secrets: engine messages,
 * which may name the swap file, go to the log only.
 */
#include "server/server_impl.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double srv_unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct timespec srv_deadline_in(int ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    long long ns = dl.tv_nsec + (long long)ms * 1000000LL;
    dl.tv_sec += (time_t)(ns / 1000000000LL);
    dl.tv_nsec = (long)(ns % 1000000000LL);
    return dl;
}

void srv_iso8601(double t_unix, char *out, size_t cap)
{
    time_t sec = (time_t)t_unix;
    struct tm tm;
    gmtime_r(&sec, &tm);
    size_t n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    int ms = (int)((t_unix - (double)sec) * 1000.0);
    if (n && n < cap) snprintf(out + n, cap - n, ".%03dZ", ms < 0 ? 0 : ms > 999 ? 999 : ms);
}

void srv_log(mz_server_t *s, const char *fmt, ...)
{
    char line[1024];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ mzcache: ", ts.tv_nsec / 1000000);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    FILE *f = s->p.log ? s->p.log : stderr;
    fprintf(f, "%s\n", line);
    fflush(f);
}

bool srv_bytes_append(char **buf, size_t *len, size_t *cap, size_t first_cap, const void *p, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : first_cap;
        while (c < *len + n + 1) c *= 2;
        char *b = realloc(*buf, c);
        if (!b) return false;
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, p, n);
    *len += n;
    (*buf)[*len] = '\0';
    return true;
}

void srv_count_response(mz_server_t *s, int status)
{
    pthread_mutex_lock(&s->snap_mu);
    if (status >= 100 && status < 600) s->n_responses[status / 100]++;
    if (status == 429) s->n_429++;
    pthread_mutex_unlock(&s->snap_mu);
}

enum MHD_Result srv_respond(mz_server_t *s, struct MHD_Connection *c, int status, const char *ctype,
                            const char *body, size_t len, const char *hname, const char *hval)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)(uintptr_t)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    if (hname && hval) MHD_add_response_header(r, hname, hval);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    srv_count_response(s, status);
    return ret;
}

/* Serializes and frees obj; with a header hname: hval (NULL: none). */
static enum MHD_Result respond_json_with(mz_server_t *s, struct MHD_Connection *c, int status, cJSON *obj,
                                         const char *hname, const char *hval)
{
    char *txt = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    if (!txt) return srv_respond(s, c, 500, "application/json", "{\"error\":{\"message\":\"out of memory\"}}", 37, NULL, NULL);
    enum MHD_Result r = srv_respond(s, c, status, "application/json", txt, strlen(txt), hname, hval);
    cJSON_free(txt);
    return r;
}

enum MHD_Result srv_respond_json(mz_server_t *s, struct MHD_Connection *c, int status, cJSON *obj)
{
    return respond_json_with(s, c, status, obj, NULL, NULL);
}

enum MHD_Result srv_error(mz_server_t *s, struct MHD_Connection *c, int status, const char *type,
                          const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *root = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(err, "message", msg);
    cJSON_AddStringToObject(err, "type", type);
    cJSON_AddNumberToObject(err, "code", status);
    if (s->p.verbose || status >= 500) srv_log(s, "HTTP %d: %s", status, msg);
    /* Retry-After for the statuses a client retries; the challenge for 401. */
    const char *hname = NULL, *hval = NULL;
    if (status == 409 || status == 429 || status == 503) hname = "Retry-After", hval = "1";
    else if (status == 401) hname = "WWW-Authenticate", hval = "Bearer";
    return respond_json_with(s, c, status, root, hname, hval);
}
