/*
 * history.c — chat messages beside a stored session (history.h).
 */
#define _GNU_SOURCE
#include "history.h"

#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HIST_MAGIC "MZCHAT1\n"
#define HIST_MAX_MSG ((size_t)16 << 20)
#define HIST_MAX_FILE ((size_t)64 << 20)

static const char *const ROLES[] = {"system", "user", "assistant"};

void mz_history_free(mz_history_msg *msgs, size_t n)
{
    for (size_t i = 0; msgs && i < n; i++) free(msgs[i].content);
    free(msgs);
}

mz_status mz_history_decode(const char *buf, size_t len, mz_history_msg **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    size_t ml = sizeof HIST_MAGIC - 1;
    if (len < ml || memcmp(buf, HIST_MAGIC, ml) != 0)
        return mz_fail(MZ_E_FORMAT, "chat history: bad magic");
    mz_history_msg *v = NULL;
    size_t n = 0, cap = 0, pos = ml;
    mz_status s = MZ_OK;
    while (pos < len && !s) {
        const char *tab = memchr(buf + pos, '\t', len - pos);
        if (!tab) { s = mz_fail(MZ_E_FORMAT, "chat history: message %zu has no role", n); break; }
        size_t rl = (size_t)(tab - (buf + pos));
        const char *role = NULL;
        for (size_t r = 0; r < 3; r++)
            if (strlen(ROLES[r]) == rl && memcmp(buf + pos, ROLES[r], rl) == 0) role = ROLES[r];
        if (!role) { s = mz_fail(MZ_E_FORMAT, "chat history: message %zu: unknown role", n); break; }
        pos += rl + 1;
        size_t digits = 0, mlen = 0;
        while (pos + digits < len && buf[pos + digits] >= '0' && buf[pos + digits] <= '9') {
            if (digits >= 9) break;
            mlen = mlen * 10 + (size_t)(buf[pos + digits] - '0');
            digits++;
        }
        if (digits == 0 || digits >= 9 || pos + digits >= len || buf[pos + digits] != '\n' ||
            mlen > HIST_MAX_MSG || (digits > 1 && buf[pos] == '0')) {
            s = mz_fail(MZ_E_FORMAT, "chat history: message %zu: bad length", n);
            break;
        }
        pos += digits + 1;
        if (len - pos < mlen + 1 || buf[pos + mlen] != '\n') {
            s = mz_fail(MZ_E_FORMAT, "chat history: message %zu truncated", n);
            break;
        }
        if (memchr(buf + pos, '\0', mlen)) {
            s = mz_fail(MZ_E_FORMAT, "chat history: message %zu holds a NUL byte", n);
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            mz_history_msg *nv = realloc(v, cap * sizeof *nv);
            if (!nv) { s = mz_fail(MZ_E_NOMEM, "out of memory (chat history)"); break; }
            v = nv;
        }
        char *c = malloc(mlen + 1);
        if (!c) { s = mz_fail(MZ_E_NOMEM, "out of memory (chat history)"); break; }
        memcpy(c, buf + pos, mlen);
        c[mlen] = '\0';
        v[n++] = (mz_history_msg){role, c};
        pos += mlen + 1;
    }
    if (s) {
        mz_history_free(v, n);
        return s;
    }
    *out = v;
    *n_out = n;
    return MZ_OK;
}

mz_status mz_history_encode(const mz_history_msg *msgs, size_t n, char **out, size_t *out_len)
{
    size_t total = sizeof HIST_MAGIC;
    for (size_t i = 0; i < n; i++) total += strlen(msgs[i].role) + 24 + strlen(msgs[i].content);
    char *b = malloc(total);
    if (!b) return mz_fail(MZ_E_NOMEM, "out of memory (chat history)");
    size_t pos = (size_t)snprintf(b, total, "%s", HIST_MAGIC);
    for (size_t i = 0; i < n; i++) {
        size_t cl = strlen(msgs[i].content);
        if (cl > HIST_MAX_MSG) {
            free(b);
            return mz_fail(MZ_E_RANGE, "chat history: a message over 16 MiB");
        }
        pos += (size_t)snprintf(b + pos, total - pos, "%s\t%zu\n", msgs[i].role, cl);
        memcpy(b + pos, msgs[i].content, cl);
        pos += cl;
        b[pos++] = '\n';
    }
    *out = b;
    *out_len = pos;
    return MZ_OK;
}

mz_status mz_store_history_load(mz_store_t *st, const char *id, mz_history_msg **msgs, size_t *n)
{
    *msgs = NULL;
    *n = 0;
    char path[4200];
    mz_status s = mz_store_path(st, id, ".chat", path, sizeof path);
    if (s) return s;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return errno == ENOENT ? MZ_OK : mz_fail(MZ_E_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat fs;
    char *buf = NULL;
    if (fstat(fd, &fs) != 0 || !S_ISREG(fs.st_mode) || (size_t)fs.st_size > HIST_MAX_FILE ||
        !(buf = malloc((size_t)fs.st_size + 1))) {
        close(fd);
        return mz_fail(MZ_E_FORMAT, "%s: not a readable chat history", path);
    }
    size_t got = 0;
    ssize_t r;
    while (got < (size_t)fs.st_size && (r = read(fd, buf + got, (size_t)fs.st_size - got)) > 0)
        got += (size_t)r;
    close(fd);
    s = mz_history_decode(buf, got, msgs, n);
    free(buf);
    return s;
}

mz_status mz_store_history_save(mz_store_t *st, const char *id, const mz_history_msg *msgs, size_t n)
{
    char path[4200], tmp[4200];
    mz_status s;
    if ((s = mz_store_path(st, id, ".chat", path, sizeof path)) ||
        (s = mz_store_path(st, id, ".chat.tmp", tmp, sizeof tmp)))
        return s;
    char *b;
    size_t len;
    if ((s = mz_history_encode(msgs, n, &b, &len))) return s;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        free(b);
        return mz_fail(MZ_E_IO, "cannot create %s: %s", tmp, strerror(errno));
    }
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, b + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += (size_t)w;
    }
    free(b);
    bool ok = done == len && (st->p.fsync == MZ_FSYNC_NONE || fsync(fd) == 0);
    close(fd);
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return mz_fail(MZ_E_IO, "cannot write %s", path);
    }
    return MZ_OK;
}
