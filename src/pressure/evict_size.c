/*
 * evict_size.c — eviction sizing from the pressure signal (rules in evict_size.h).
 */
#define _GNU_SOURCE
#include "evict_size.h"

#include "core/parse.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

mz_esize_params mz_esize_params_default(void)
{
    return (mz_esize_params){.headroom_pct = 15.0,
                             .headroom_bytes = 0,
                             .psi_step_pct = 2.0,
                             .psi_step_bytes = 0,
                             .psi_backoff_ms = 2000.0,
                             .psi_backoff_max_ms = 32000.0};
}

void mz_esize_state_init(mz_esize_state *st, const mz_esize_params *p)
{
    st->psi_last_ms = -1.0;
    st->psi_wait_ms = p->psi_backoff_ms;
}

const char *mz_esize_basis_name(mz_esize_basis b)
{
    static const char *const n[] = {"cgroup", "psi", "clear", "backoff", "empty"};
    return (unsigned)b < sizeof n / sizeof n[0] ? n[b] : "?";
}

static bool limited(uint64_t v) { return v != 0 && v != MZ_PSIG_NOLIMIT; }

/* The limit and usage of the reading: v2 first (the lower of high and max),
 * else v1. False when no limit is set or no usage was read. */
static bool cgroup_figures(const mz_psig *s, uint64_t *limit, uint64_t *usage)
{
    uint64_t lim = 0, use = 0;
    if (s->v2_current && (limited(s->v2_high) || limited(s->v2_max))) {
        lim = limited(s->v2_high) ? s->v2_high : s->v2_max;
        if (limited(s->v2_max) && s->v2_max < lim) lim = s->v2_max;
        use = s->v2_current;
    } else if (s->v1_usage && limited(s->v1_limit)) {
        lim = s->v1_limit;
        use = s->v1_usage;
    } else {
        return false;
    }
    /* Inactive file pages are the kernel's to drop; they are not ours to evict
     * for. (Never below zero: the counters are read one after another.) */
    use = s->inactive_file < use ? use - s->inactive_file : 0;
    *limit = lim, *usage = use;
    return true;
}

static double mib(uint64_t b) { return (double)b / 1048576.0; }

/* limit − headroom, headroom = max(headroom_bytes, headroom_pct % of the limit). */
static uint64_t target_of(const mz_esize_params *p, uint64_t limit)
{
    uint64_t head = (uint64_t)((double)limit * p->headroom_pct / 100.0);
    if (p->headroom_bytes > head) head = p->headroom_bytes;
    return head < limit ? limit - head : 0;
}

bool mz_esize_room(const mz_esize_params *p, const mz_psig *sig, uint64_t bytes, mz_esize_out *out)
{
    memset(out, 0, sizeof *out);
    uint64_t limit = 0, usage = 0;
    if (!cgroup_figures(sig, &limit, &usage)) {
        snprintf(out->why, sizeof out->why, "no cgroup limit to measure the room against");
        return false;
    }
    out->limit = limit, out->usage = usage, out->target = target_of(p, limit);
    out->need = bytes;
    const uint64_t room = out->target > usage ? out->target - usage : 0;
    const bool fits = bytes <= room;
    out->basis = fits ? MZ_ESIZE_CLEAR : MZ_ESIZE_CGROUP;
    snprintf(out->why, sizeof out->why, "usage %.1f MiB, target %.1f MiB (limit %.1f MiB): room %.1f MiB %s %.1f MiB",
             mib(usage), mib(out->target), mib(limit), mib(room), fits ? ">=" : "<", mib(bytes));
    return fits;
}

void mz_esize(const mz_esize_params *p, mz_esize_state *st, const mz_psig *sig, const mz_esize_held *h,
              mz_esize_out *out)
{
    memset(out, 0, sizeof *out);
    uint64_t limit = 0, usage = 0, need_cg = 0;
    const bool have_cg = cgroup_figures(sig, &limit, &usage);
    if (have_cg) {
        out->target = target_of(p, limit);
        out->limit = limit, out->usage = usage;
        need_cg = usage > out->target ? usage - out->target : 0;
    }
    const bool psi_like = sig->source == MZ_PRESSURE_PSI || !have_cg;
    uint64_t step = p->psi_step_bytes ? p->psi_step_bytes : (uint64_t)((double)h->total * p->psi_step_pct / 100.0);
    if (step < h->unit) step = h->unit;

    if (!psi_like || need_cg > step) {
        out->basis = MZ_ESIZE_CGROUP;
        out->need = need_cg;
        if (need_cg == 0) {
            out->basis = MZ_ESIZE_CLEAR;
            snprintf(out->why, sizeof out->why, "usage %.1f MiB <= target %.1f MiB (limit %.1f MiB): clear",
                     mib(usage), mib(out->target), mib(limit));
            return;
        }
        snprintf(out->why, sizeof out->why, "usage %.1f MiB > target %.1f MiB (limit %.1f MiB): need %.1f MiB",
                 mib(usage), mib(out->target), mib(limit), mib(need_cg));
    } else {
        /* A stall signal: a small step, then back off while it keeps firing. */
        const double t = sig->t_ms;
        if (st->psi_last_ms >= 0 && t - st->psi_last_ms < st->psi_wait_ms) {
            out->basis = MZ_ESIZE_BACKOFF;
            snprintf(out->why, sizeof out->why, "psi step %.1f s ago, backing off %.1f s",
                     (t - st->psi_last_ms) / 1000.0, st->psi_wait_ms / 1000.0);
            return;
        }
        if (st->psi_last_ms >= 0 && t - st->psi_last_ms < 2.0 * st->psi_wait_ms) {
            st->psi_wait_ms *= 2.0;
            if (st->psi_wait_ms > p->psi_backoff_max_ms) st->psi_wait_ms = p->psi_backoff_max_ms;
        } else {
            st->psi_wait_ms = p->psi_backoff_ms;
        }
        st->psi_last_ms = t;
        out->basis = MZ_ESIZE_PSI;
        out->need = step;
        snprintf(out->why, sizeof out->why, "%s step %.1f MiB (next not before %.1f s)",
                 sig->source == MZ_PRESSURE_PSI ? "psi" : "no limit to measure against:",
                 mib(step), st->psi_wait_ms / 1000.0);
    }
    if (h->held == 0) {
        out->basis = MZ_ESIZE_EMPTY;
        size_t n = strlen(out->why);
        snprintf(out->why + n, sizeof out->why - n, "; nothing held above the floor");
        return;
    }
    out->bytes = out->need < h->held ? out->need : h->held;
}

/* ---- reading the signal ------------------------------------------------------------ */

/* The files a reading takes, in mz_psig_fds order. */
static const char *const k_files[MZ_PSIG_N_FILES] = {
    "memory.current", "memory.high", "memory.max", "memory.stat",         /* v2 */
    "memory.usage_in_bytes", "memory.limit_in_bytes", "memory.stat",     /* v1 */
};

/* Reads a whole small file at offset 0 (pread: an fd kept open costs the
 * kernel no new allocation per reading). Returns the length, or -1. */
static ssize_t read_fd(int fd, char *buf, size_t cap)
{
    if (fd < 0) return -1;
    ssize_t n = pread(fd, buf, cap - 1, 0);
    if (n <= 0) return -1;
    buf[n] = '\0';
    return n;
}

uint64_t mz_psig_parse_value(const char *buf)
{
    if (!strncmp(buf, "max", 3)) return MZ_PSIG_NOLIMIT;
    if (*buf < '0' || *buf > '9') return 0; /* strtoull would take a sign or spaces */
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (errno || end == buf || (*end && *end != '\n')) return 0;
    return (uint64_t)v;
}

uint64_t mz_psig_parse_stat(const char *buf, const char *key)
{
    size_t kl = strlen(key);
    for (const char *line = buf; line && *line;) {
        const char *nl = strchr(line, '\n');
        if (!strncmp(line, key, kl) && line[kl] == ' ') {
            const char *v = line + kl + 1;
            if (*v < '0' || *v > '9') return 0;
            char *end = NULL;
            errno = 0;
            unsigned long long x = strtoull(v, &end, 10);
            return errno || (*end && *end != '\n') ? 0 : (uint64_t)x;
        }
        line = nl ? nl + 1 : NULL;
    }
    return 0;
}

int mz_esize_parse_headroom(const char *s, mz_esize_params *p)
{
    if (!s) return -1;
    size_t n = strlen(s);
    if (n && s[n - 1] == '%') { /* a percentage: mz_parse_amount's number, at most 95 */
        double v;
        bool pct;
        if (mz_parse_amount(s, &v, &pct) || !pct || v > MZ_ESIZE_HEADROOM_MAX_PCT) return -1;
        p->headroom_pct = v, p->headroom_bytes = 0;
        return 0;
    }
    size_t bytes;
    if (mz_parse_size(s, &bytes)) return -1;
    p->headroom_bytes = bytes, p->headroom_pct = 0;
    return 0;
}

/* A cgroup value file (see mz_psig_parse_value); 0 when unreadable. */
static uint64_t read_value(int fd)
{
    char buf[64];
    return read_fd(fd, buf, sizeof buf) < 0 ? 0 : mz_psig_parse_value(buf);
}

/* One key of memory.stat; 0 if absent or unreadable. */
static uint64_t read_stat(int fd, const char *key)
{
    char buf[8192];
    return read_fd(fd, buf, sizeof buf) < 0 ? 0 : mz_psig_parse_stat(buf, key);
}

void mz_psig_fds_open(mz_psig_fds *f, const char *v2_dir, const char *v1_dir)
{
    char path[700];
    for (int i = 0; i < MZ_PSIG_N_FILES; i++) {
        const char *dir = i < 4 ? v2_dir : v1_dir;
        f->fd[i] = -1;
        if (!dir || !dir[0]) continue;
        snprintf(path, sizeof path, "%s/%s", dir, k_files[i]);
        f->fd[i] = open(path, O_RDONLY | O_CLOEXEC);
    }
}

void mz_psig_fds_close(mz_psig_fds *f)
{
    for (int i = 0; i < MZ_PSIG_N_FILES; i++) {
        if (f->fd[i] >= 0) close(f->fd[i]);
        f->fd[i] = -1;
    }
}

void mz_psig_read_fds(const mz_psig_fds *f, mz_psig *sig)
{
    sig->v2_current = read_value(f->fd[0]);
    if (sig->v2_current) {
        sig->v2_high = read_value(f->fd[1]);
        sig->v2_max = read_value(f->fd[2]);
        sig->inactive_file = read_stat(f->fd[3], "inactive_file");
        return;
    }
    sig->v1_usage = read_value(f->fd[4]);
    if (sig->v1_usage) {
        uint64_t lim = read_value(f->fd[5]);
        /* v1 says "no limit" with a huge page-rounded number. */
        sig->v1_limit = lim >= (1ULL << 62) ? MZ_PSIG_NOLIMIT : lim;
        sig->inactive_file = read_stat(f->fd[6], "total_inactive_file");
    }
}

void mz_psig_read_dirs(const char *v2_dir, const char *v1_dir, mz_psig *sig)
{
    mz_psig_fds f;
    mz_psig_fds_open(&f, v2_dir, v1_dir);
    mz_psig_read_fds(&f, sig);
    mz_psig_fds_close(&f);
}
