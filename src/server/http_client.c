/*
 * http_client.c — a small blocking HTTP/1.1 client: one request per
 * connection, response read to EOF, chunked bodies decoded. Used by the
 * `mzcache evict` / `mzcache status` subcommands and by the server tests.
 * Not a general client: no redirects, no TLS, no keep-alive.
 */
#define _GNU_SOURCE
#include "server/server.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

static int connect_to(const char *host, int port, int timeout_ms)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    if (getaddrinfo(host, port_s, &hints, &ai) || !ai) return -EHOSTUNREACH;
    int rc = -ECONNREFUSED;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) && errno != EINPROGRESS) {
            rc = -errno;
            close(fd);
            continue;
        }
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int err = 0;
        socklen_t el = sizeof err;
        if (poll(&pf, 1, timeout_ms) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) || err) {
            rc = err ? -err : -ETIMEDOUT;
            close(fd);
            continue;
        }
        rc = fd;
        break;
    }
    freeaddrinfo(ai);
    return rc;
}

static int send_all(int fd, const char *p, size_t n, int timeout_ms)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            if (poll(&pf, 1, timeout_ms) != 1) return -ETIMEDOUT;
            continue;
        }
        if (w < 0) return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Decodes a chunked body in place; returns the decoded length or -1. */
static long dechunk(char *b, size_t n)
{
    size_t in = 0, out = 0;
    for (;;) {
        char *end = NULL;
        if (in >= n) return -1;
        unsigned long sz = strtoul(b + in, &end, 16);
        if (end == b + in) return -1;
        char *nl = memchr(end, '\n', n - (size_t)(end - b));
        if (!nl) return -1;
        in = (size_t)(nl - b) + 1;
        if (sz == 0) break;
        if (sz > n - in) return -1;
        memmove(b + out, b + in, sz);
        out += sz;
        in += sz;
        if (in < n && b[in] == '\r') in++;
        if (in < n && b[in] == '\n') in++;
    }
    b[out] = '\0';
    return (long)out;
}

static void header_value(const char *hdrs, size_t hlen, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    out[0] = '\0';
    for (const char *p = hdrs; p && p < hdrs + hlen;) {
        const char *e = memchr(p, '\n', (size_t)(hdrs + hlen - p));
        if (!e) e = hdrs + hlen;
        if ((size_t)(e - p) > nl + 1 && !strncasecmp(p, name, nl) && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (*v == ' ') v++;
            size_t l = (size_t)(e - v);
            while (l && (v[l - 1] == '\r' || v[l - 1] == ' ')) l--;
            if (l >= cap) l = cap - 1;
            memcpy(out, v, l);
            out[l] = '\0';
            return;
        }
        p = e + 1;
    }
}

int mz_http_request(const char *host, int port, const char *method, const char *path, const char *api_key,
                    const char *body, size_t body_len, int timeout_ms, mz_http_response *out)
{
    return mz_http_request_ex(host, port, method, path, api_key, NULL, body, body_len, timeout_ms, out);
}

int mz_http_request_ex(const char *host, int port, const char *method, const char *path, const char *api_key,
                       const char *extra_headers, const char *body, size_t body_len, int timeout_ms,
                       mz_http_response *out)
{
    memset(out, 0, sizeof *out);
    int fd = connect_to(host, port, timeout_ms);
    if (fd < 0) return fd;
    char head[2048];
    int hn = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\nAccept: */*\r\n%s%s%s%s"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                      method, path, host, port, api_key ? "Authorization: Bearer " : "", api_key ? api_key : "",
                      api_key ? "\r\n" : "", extra_headers ? extra_headers : "", body ? body_len : 0);
    int rc = hn > 0 && (size_t)hn < sizeof head ? send_all(fd, head, (size_t)hn, timeout_ms) : -EINVAL;
    if (!rc && body && body_len) rc = send_all(fd, body, body_len, timeout_ms);
    size_t cap = 8192, len = 0;
    char *buf = rc ? NULL : malloc(cap);
    if (!rc && !buf) rc = -ENOMEM;
    while (!rc) {
        if (len + 4096 + 1 > cap) {
            char *b = realloc(buf, cap * 2);
            if (!b) { rc = -ENOMEM; break; }
            buf = b;
            cap *= 2;
        }
        ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
        if (r > 0) { len += (size_t)r; continue; }
        if (r == 0) break;
        if (errno == EINTR) continue;
        if (errno == EAGAIN) {
            struct pollfd pf = {.fd = fd, .events = POLLIN};
            if (poll(&pf, 1, timeout_ms) != 1) rc = -ETIMEDOUT;
            continue;
        }
        /* A reset after a complete response (server closed early) still counts. */
        if (errno == ECONNRESET && len) break;
        rc = -errno;
    }
    close(fd);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[len] = '\0';
    char *hend = strstr(buf, "\r\n\r\n");
    if (!hend || sscanf(buf, "HTTP/%*d.%*d %d", &out->status) != 1) {
        free(buf);
        return -EPROTO;
    }
    size_t hlen = (size_t)(hend - buf);
    char te[32];
    header_value(buf, hlen, "Content-Type", out->content_type, sizeof out->content_type);
    header_value(buf, hlen, "Retry-After", out->retry_after, sizeof out->retry_after);
    header_value(buf, hlen, "Transfer-Encoding", te, sizeof te);
    size_t blen = len - hlen - 4;
    memmove(buf, hend + 4, blen);
    buf[blen] = '\0';
    if (!strcasecmp(te, "chunked")) {
        long d = dechunk(buf, blen);
        if (d < 0) {
            free(buf);
            return -EPROTO;
        }
        blen = (size_t)d;
    }
    out->body = buf;
    out->len = blen;
    return 0;
}

void mz_http_response_free(mz_http_response *r)
{
    if (!r) return;
    free(r->body);
    r->body = NULL;
    r->len = 0;
}
