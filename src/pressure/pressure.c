/*
 * pressure.c — the memory-pressure monitor (see pressure.h for the contract).
 *
 * Divisions, in reading order:
 *   1. cgroup discovery   /proc/self/cgroup + /proc/self/mountinfo → directories
 *   2. registration       one function per interface; each either leaves an fd
 *                         to poll or records why it could not
 *   3. the monitor thread one poll() over every fd and a stop eventfd
 *
 * Nothing here allocates after start, and nothing here knows about models:
 * a signal becomes an mz_pressure_event handed to the caller's function.
 */
#define _GNU_SOURCE
#include "pressure/pressure.h"
#include "pressure/evict_size.h"

#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define N_LEVELS 3

struct mz_pressure_monitor {
    mz_pressure_params p;
    mz_pressure_fn fn;
    void *user;
    pthread_t thread;
    bool thread_started;
    int stop_fd;                       /* eventfd: written by mz_pressure_stop */

    int psi_fd;                        /* PSI trigger fd (POLLPRI) */
    char psi_trigger[64];

    int cg2_events_fd;                 /* memory.events (POLLPRI on change) */
    unsigned long long cg2_high, cg2_max;

    int cg1_level_fd[N_LEVELS];        /* eventfds, one per v1 pressure level */
    int cg1_level_target[N_LEVELS];    /* memory.pressure_level fds (kept open) */

    int cg1_usage_efd;                 /* eventfd for all usage thresholds */
    int cg1_usage_target;              /* memory.usage_in_bytes fd */
    size_t cg1_threshold[MZ_PRESSURE_MAX_THRESHOLDS];
    int n_cg1_threshold;
    bool cg1_above;                    /* usage was >= the lowest threshold at the last read */
    bool cg1_pct;                      /* some thresholds are % of the limit: follow it */
    size_t cg1_limit;                  /* limit the thresholds were armed for (0: none) */
    char cg1_dir[512];

    /* Eviction sizing (evict_size.h): where to read the signal, and the state
     * the callback keeps between signals. */
    mz_psig_fds sig_fds;               /* the cgroup files, open from start to stop */
    mz_esize_state esize;
    _Atomic bool relief_wanted;        /* mz_pressure_want_relief */
    double relief_next_ms;             /* monitor thread only */

    pthread_mutex_t state_mu;          /* guards active[] and state[]: the thread re-arms */
    bool active[MZ_PRESSURE_N_SOURCES];
    char state[MZ_PRESSURE_N_SOURCES][200];
    _Atomic size_t n_events[MZ_PRESSURE_N_SOURCES];
};

static const char *const source_names[MZ_PRESSURE_N_SOURCES] = {
    [MZ_PRESSURE_PSI] = "psi",
    [MZ_PRESSURE_CG2_EVENTS] = "cg2-events",
    [MZ_PRESSURE_CG1_LEVEL] = "cg1-level",
    [MZ_PRESSURE_CG1_USAGE] = "cg1-usage",
};
static const char *const level_names[N_LEVELS] = {"low", "medium", "critical"};

const char *mz_pressure_source_name(mz_pressure_source s)
{
    return (unsigned)s < MZ_PRESSURE_N_SOURCES ? source_names[s] : "?";
}

mz_pressure_params mz_pressure_params_default(void)
{
    mz_pressure_params p;
    memset(&p, 0, sizeof p);
    for (int i = 0; i < MZ_PRESSURE_N_SOURCES; i++) p.enable[i] = true;
    p.psi_trigger = "some 100000 2000000";
    p.cg1_thresholds[0] = 90.0;
    p.resignal_ms = 1000;
    p.relief_ms = 250;
    p.size = mz_esize_params_default();
    /* MZCACHE_PRESSURE_HEADROOM: "15%" or a size ("64M", "1G", bytes). */
    const char *e = getenv("MZCACHE_PRESSURE_HEADROOM");
    if (e && *e && mz_esize_parse_headroom(e, &p.size))
        mz_log(MZ_LOG_WARN, "pressure: MZCACHE_PRESSURE_HEADROOM=%s is not a size or a %%; ignored", e);
    return p;
}

/* ---- 1. cgroup discovery ----------------------------------------------------------- */

int mz_read_u64_file(const char *path, unsigned long long *out)
{
    char buf[64];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = '\0';
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (errno || end == buf) return -1;
    *out = v;
    return 0;
}

/* Path of this process's cgroup in the hierarchy whose /proc/self/cgroup line
 * matches: v2 (controllers field empty, id 0) or the v1 one listing `ctrl`. */
static int own_cgroup_path(const char *ctrl, char *buf, size_t cap)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f) return -1;
    char line[1024];
    int rc = -1;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':');
        if (!c1) continue;
        char *c2 = strchr(c1 + 1, ':');
        if (!c2) continue;
        *c1 = '\0';
        *c2 = '\0';
        const char *ctrls = c1 + 1, *path = c2 + 1;
        bool match = false;
        if (!ctrl) {
            match = !strcmp(line, "0") && ctrls[0] == '\0';
        } else {
            char tmp[256];
            snprintf(tmp, sizeof tmp, "%s", ctrls);
            for (char *save = NULL, *tok = strtok_r(tmp, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
                if (!strcmp(tok, ctrl)) match = true;
        }
        if (match && strlen(path) < cap) {
            memcpy(buf, path, strlen(path) + 1);
            rc = 0;
            break;
        }
    }
    fclose(f);
    return rc;
}

/* Mount point and mount root of the cgroup hierarchy: fstype "cgroup2", or
 * "cgroup" whose super options list `ctrl`. */
static int cgroup_mount(const char *ctrl, char *mnt, size_t mnt_cap, char *root, size_t root_cap)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f) return -1;
    char line[2048];
    int rc = -1;
    while (rc && fgets(line, sizeof line, f)) {
        /* id parent maj:min root mountpoint opts [optional...] - fstype source superopts */
        char *fields[6] = {0};
        char *save = NULL, *tok = strtok_r(line, " \n", &save);
        int i = 0;
        for (; tok && i < 6; tok = strtok_r(NULL, " \n", &save)) fields[i++] = tok;
        if (i < 6) continue;
        while (tok && strcmp(tok, "-")) tok = strtok_r(NULL, " \n", &save);
        if (!tok) continue;
        char *fstype = strtok_r(NULL, " \n", &save);
        char *source = strtok_r(NULL, " \n", &save);
        char *super = strtok_r(NULL, " \n", &save);
        (void)source;
        if (!fstype) continue;
        bool match = false;
        if (!ctrl) {
            match = !strcmp(fstype, "cgroup2");
        } else if (!strcmp(fstype, "cgroup") && super) {
            for (char *s2 = NULL, *o = strtok_r(super, ",", &s2); o; o = strtok_r(NULL, ",", &s2))
                if (!strcmp(o, ctrl)) match = true;
        }
        if (match && strlen(fields[4]) < mnt_cap && strlen(fields[3]) < root_cap) {
            memcpy(mnt, fields[4], strlen(fields[4]) + 1);
            memcpy(root, fields[3], strlen(fields[3]) + 1);
            rc = 0;
        }
    }
    fclose(f);
    return rc;
}

static int cgroup_dir(const char *ctrl, char *buf, size_t cap)
{
    char path[1024], mnt[512], root[512];
    if (own_cgroup_path(ctrl, path, sizeof path)) return -1;
    if (cgroup_mount(ctrl, mnt, sizeof mnt, root, sizeof root)) return -1;
    /* Inside a cgroup namespace or bind mount the mount root is a prefix. */
    const char *rel = path;
    size_t rl = strlen(root);
    if (strcmp(root, "/") && !strncmp(path, root, rl)) rel = path + rl;
    if (!strcmp(rel, "/")) rel = "";
    int n = snprintf(buf, cap, "%s%s", mnt, rel);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

int mz_cgroup_v1_memory_dir(char *buf, size_t cap) { return cgroup_dir("memory", buf, cap); }
int mz_cgroup_v2_dir(char *buf, size_t cap) { return cgroup_dir(NULL, buf, cap); }

/* ---- 2. registration ----------------------------------------------------------------- */

static void set_state(mz_pressure_monitor_t *m, mz_pressure_source s, bool active, const char *fmt, ...)
    MZ_PRINTF(4, 5);
static void set_state(mz_pressure_monitor_t *m, mz_pressure_source s, bool active, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char tmp[180];
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&m->state_mu);
    m->active[s] = active;
    snprintf(m->state[s], sizeof m->state[s], "%s (%s)", active ? "active" : "inactive", tmp);
    pthread_mutex_unlock(&m->state_mu);
}

static void register_psi(mz_pressure_monitor_t *m)
{
    char path[600];
    if (m->p.psi_path) {
        snprintf(path, sizeof path, "%s", m->p.psi_path);
    } else {
        char dir[512], mnt[512], root[512];
        bool v2_child = !mz_cgroup_v2_dir(dir, sizeof dir) &&
                        !cgroup_mount(NULL, mnt, sizeof mnt, root, sizeof root) && strcmp(dir, mnt);
        if (v2_child) snprintf(path, sizeof path, "%s/memory.pressure", dir);
        if (!v2_child || access(path, F_OK)) snprintf(path, sizeof path, "/proc/pressure/memory");
    }
    snprintf(m->psi_trigger, sizeof m->psi_trigger, "%s", m->p.psi_trigger ? m->p.psi_trigger : "");
    int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        set_state(m, MZ_PRESSURE_PSI, false, "%s: %s", path,
                  errno == ENOENT ? "no PSI (kernel without CONFIG_PSI or psi=0)" : strerror(errno));
        return;
    }
    if (write(fd, m->psi_trigger, strlen(m->psi_trigger) + 1) < 0) {
        int e = errno;
        close(fd);
        set_state(m, MZ_PRESSURE_PSI, false, "trigger '%s' refused: %s%s", m->psi_trigger, strerror(e),
                  e == EINVAL ? "; without CAP_SYS_RESOURCE the window must be a multiple of 2 s" : "");
        return;
    }
    m->psi_fd = fd;
    set_state(m, MZ_PRESSURE_PSI, true, "%s, trigger '%s'", path, m->psi_trigger);
}

static int parse_events(int fd, unsigned long long *high, unsigned long long *max)
{
    char buf[1024];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return -1;
    buf[n] = '\0';
    *high = *max = 0;
    for (char *save = NULL, *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        unsigned long long v;
        if (sscanf(line, "high %llu", &v) == 1) *high = v;
        else if (sscanf(line, "max %llu", &v) == 1) *max = v;
    }
    return 0;
}

static void register_cg2_events(mz_pressure_monitor_t *m)
{
    char dir[512], path[600];
    if (m->p.cg2_dir) snprintf(dir, sizeof dir, "%s", m->p.cg2_dir);
    else if (mz_cgroup_v2_dir(dir, sizeof dir)) {
        set_state(m, MZ_PRESSURE_CG2_EVENTS, false, "no cgroup v2 hierarchy mounted");
        return;
    }
    snprintf(path, sizeof path, "%s/memory.events", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        set_state(m, MZ_PRESSURE_CG2_EVENTS, false, "%s",
                  errno == ENOENT ? "no memory.events: the memory controller is not enabled in cgroup v2 "
                                    "here (v1 only, or the v2 root)"
                                  : strerror(errno));
        return;
    }
    if (parse_events(fd, &m->cg2_high, &m->cg2_max)) {
        close(fd);
        set_state(m, MZ_PRESSURE_CG2_EVENTS, false, "memory.events unreadable");
        return;
    }
    m->cg2_events_fd = fd;
    set_state(m, MZ_PRESSURE_CG2_EVENTS, true, "%s (high %llu, max %llu so far)", path, m->cg2_high,
              m->cg2_max);
}

/* Writes "<efd> <target> <args>" to cgroup.event_control; 0 or errno. */
static int event_control(const char *dir, int efd, int target, const char *args)
{
    char path[600], line[128];
    snprintf(path, sizeof path, "%s/cgroup.event_control", dir);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    int n = snprintf(line, sizeof line, "%d %d %s", efd, target, args);
    int rc = write(fd, line, (size_t)n + 1) < 0 ? errno : 0;
    close(fd);
    return rc;
}

static bool v1_dir(mz_pressure_monitor_t *m, mz_pressure_source s, char *dir, size_t cap)
{
    if (m->p.cg1_dir) {
        snprintf(dir, cap, "%s", m->p.cg1_dir);
        return true;
    }
    if (mz_cgroup_v1_memory_dir(dir, cap)) {
        set_state(m, s, false, "no cgroup-v1 memory controller mounted");
        return false;
    }
    return true;
}

static void register_cg1_level(mz_pressure_monitor_t *m)
{
    char dir[512], path[600];
    if (!v1_dir(m, MZ_PRESSURE_CG1_LEVEL, dir, sizeof dir)) return;
    snprintf(path, sizeof path, "%s/memory.pressure_level", dir);
    for (int l = 0; l < N_LEVELS; l++) {
        int target = open(path, O_RDONLY | O_CLOEXEC);
        int efd = target >= 0 ? eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC) : -1;
        int rc = target < 0 ? errno : efd < 0 ? errno : event_control(dir, efd, target, level_names[l]);
        if (rc) {
            if (efd >= 0) close(efd);
            if (target >= 0) close(target);
            for (int k = 0; k < l; k++) {
                close(m->cg1_level_fd[k]);
                close(m->cg1_level_target[k]);
                m->cg1_level_fd[k] = m->cg1_level_target[k] = -1;
            }
            set_state(m, MZ_PRESSURE_CG1_LEVEL, false, "%s: %s", rc == ENOENT ? "no memory.pressure_level" : "cgroup.event_control refused",
                      strerror(rc));
            return;
        }
        m->cg1_level_fd[l] = efd;
        m->cg1_level_target[l] = target;
    }
    set_state(m, MZ_PRESSURE_CG1_LEVEL, true, "%s, levels low/medium/critical", path);
}

static int read_usage(const mz_pressure_monitor_t *m, unsigned long long *usage)
{
    char buf[64];
    ssize_t n = pread(m->cg1_usage_target, buf, sizeof buf - 1, 0);
    if (n <= 0) return -1;
    buf[n] = '\0';
    *usage = strtoull(buf, NULL, 10);
    return 0;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* Arms the usage thresholds for the current limit: computes them, makes a
 * fresh eventfd and registers each (closing the old eventfd unregisters the
 * old ones). Returns 0, or an errno; *n_armed is 0 when there is nothing to
 * arm (percent thresholds and no limit). */
static int arm_cg1_usage(mz_pressure_monitor_t *m, int *n_armed)
{
    char path[600];
    unsigned long long limit = 0;
    snprintf(path, sizeof path, "%s/memory.limit_in_bytes", m->cg1_dir);
    bool limited = !mz_read_u64_file(path, &limit) && limit < (1ULL << 62);
    m->cg1_limit = limited ? (size_t)limit : 0;
    int n = 0;
    for (int i = 0; i < MZ_PRESSURE_MAX_THRESHOLDS && m->p.cg1_thresholds[i] > 0; i++) {
        double t = m->p.cg1_thresholds[i];
        if (t <= 100.0) {
            if (limited) m->cg1_threshold[n++] = (size_t)((double)limit * t / 100.0);
        } else {
            m->cg1_threshold[n++] = (size_t)t;
        }
    }
    if (m->cg1_usage_efd >= 0) close(m->cg1_usage_efd);
    m->cg1_usage_efd = -1;
    m->n_cg1_threshold = 0;
    m->cg1_above = false;
    *n_armed = n;
    if (!n) return 0;
    qsort(m->cg1_threshold, (size_t)n, sizeof m->cg1_threshold[0], cmp_size);
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd < 0) return errno;
    for (int i = 0; i < n; i++) {
        char arg[32];
        snprintf(arg, sizeof arg, "%zu", m->cg1_threshold[i]);
        int rc = event_control(m->cg1_dir, efd, m->cg1_usage_target, arg);
        if (rc) {
            close(efd);
            return rc;
        }
    }
    m->cg1_usage_efd = efd;
    m->n_cg1_threshold = n;
    unsigned long long usage;
    if (!read_usage(m, &usage)) m->cg1_above = usage >= m->cg1_threshold[0];
    char list[96] = "";
    for (int i = 0; i < n; i++) {
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%.1f MiB", i ? ", " : "", (double)m->cg1_threshold[i] / 1048576.0);
    }
    set_state(m, MZ_PRESSURE_CG1_USAGE, true, "%s/memory.usage_in_bytes, thresholds %s%s", m->cg1_dir, list,
              m->cg1_pct ? ", following the limit" : "");
    return 0;
}

static void register_cg1_usage(mz_pressure_monitor_t *m)
{
    char path[600];
    if (!v1_dir(m, MZ_PRESSURE_CG1_USAGE, m->cg1_dir, sizeof m->cg1_dir)) return;
    m->cg1_pct = false;
    bool any = false;
    for (int i = 0; i < MZ_PRESSURE_MAX_THRESHOLDS && m->p.cg1_thresholds[i] > 0; i++) {
        any = true;
        if (m->p.cg1_thresholds[i] <= 100.0) m->cg1_pct = true;
    }
    if (!any) {
        set_state(m, MZ_PRESSURE_CG1_USAGE, false, "no thresholds configured");
        return;
    }
    snprintf(path, sizeof path, "%s/memory.usage_in_bytes", m->cg1_dir);
    m->cg1_usage_target = open(path, O_RDONLY | O_CLOEXEC);
    if (m->cg1_usage_target < 0) {
        set_state(m, MZ_PRESSURE_CG1_USAGE, false, "no memory.usage_in_bytes: %s", strerror(errno));
        return;
    }
    int n = 0, rc = arm_cg1_usage(m, &n);
    if (rc) {
        close(m->cg1_usage_target);
        m->cg1_usage_target = -1;
        set_state(m, MZ_PRESSURE_CG1_USAGE, false, "usage thresholds refused: %s", strerror(rc));
        return;
    }
    if (!n)
        set_state(m, MZ_PRESSURE_CG1_USAGE, true,
                  "%s/memory.usage_in_bytes: waiting for a memory limit (thresholds are %% of it; checked every 2 s)",
                  m->cg1_dir);
}

/* Percent thresholds follow the limit: re-arm when it changes. Returns true
 * if it re-armed (the old eventfd is closed). */
static bool recheck_cg1_limit(mz_pressure_monitor_t *m)
{
    char path[600];
    unsigned long long limit = 0;
    snprintf(path, sizeof path, "%s/memory.limit_in_bytes", m->cg1_dir);
    bool limited = !mz_read_u64_file(path, &limit) && limit < (1ULL << 62);
    size_t now = limited ? (size_t)limit : 0;
    if (now == m->cg1_limit) return false;
    int n = 0, rc = arm_cg1_usage(m, &n);
    if (rc) {
        mz_log(MZ_LOG_WARN, "pressure: re-arming usage thresholds failed: %s", strerror(rc));
        set_state(m, MZ_PRESSURE_CG1_USAGE, false, "re-arming usage thresholds failed: %s", strerror(rc));
    } else if (!n) {
        set_state(m, MZ_PRESSURE_CG1_USAGE, true, "%s/memory.usage_in_bytes: limit removed; waiting for one",
                  m->cg1_dir);
    }
    return true;
}

/* ---- 3. the monitor thread --------------------------------------------------------------- */

static void emit(mz_pressure_monitor_t *m, mz_pressure_event *ev)
{
    ev->t_ms = mz_time_ms();
    ev->monitor = m;
    atomic_fetch_add_explicit(&m->n_events[ev->source], 1, memory_order_relaxed);
    m->fn(m->user, ev);
}

static void check_usage(mz_pressure_monitor_t *m, bool still)
{
    unsigned long long usage;
    if (read_usage(m, &usage)) return;
    size_t lowest = m->cg1_threshold[0];
    m->cg1_above = usage >= lowest;
    if (!m->cg1_above) return;
    mz_pressure_event ev = {.source = MZ_PRESSURE_CG1_USAGE, .level = MZ_PRESSURE_MEDIUM,
                            .usage_bytes = (size_t)usage, .threshold_bytes = lowest};
    /* Above the highest threshold counts as critical. */
    if (m->n_cg1_threshold > 1 && usage >= m->cg1_threshold[m->n_cg1_threshold - 1])
        ev.level = MZ_PRESSURE_CRITICAL;
    snprintf(ev.what, sizeof ev.what, "usage %.1f MiB >= %.1f MiB%s", (double)usage / 1048576.0,
             (double)lowest / 1048576.0, still ? " (still)" : "");
    emit(m, &ev);
}

static void *monitor_main(void *arg)
{
    mz_pressure_monitor_t *m = arg;
    double next_limit_check = mz_time_ms() + 2000.0;
    for (;;) {
        struct pollfd pf[8];
        int src[8], n = 0;
        pf[n] = (struct pollfd){.fd = m->stop_fd, .events = POLLIN}; src[n++] = -1;
        if (m->psi_fd >= 0) { pf[n] = (struct pollfd){.fd = m->psi_fd, .events = POLLPRI}; src[n++] = 0; }
        if (m->cg2_events_fd >= 0) { pf[n] = (struct pollfd){.fd = m->cg2_events_fd, .events = POLLPRI}; src[n++] = 1; }
        for (int l = 0; l < N_LEVELS; l++)
            if (m->cg1_level_fd[l] >= 0) { pf[n] = (struct pollfd){.fd = m->cg1_level_fd[l], .events = POLLIN}; src[n++] = 10 + l; }
        if (m->cg1_usage_efd >= 0) { pf[n] = (struct pollfd){.fd = m->cg1_usage_efd, .events = POLLIN}; src[n++] = 3; }
        /* Timers: re-signal while above a threshold; follow the limit. */
        double now = mz_time_ms();
        int timeout = -1;
        bool follow = m->cg1_usage_target >= 0 && m->cg1_pct;
        if (m->cg1_usage_efd >= 0 && m->cg1_above) timeout = m->p.resignal_ms;
        if (follow) {
            int left = (int)(next_limit_check - now);
            if (left < 0) left = 0;
            if (timeout < 0 || left < timeout) timeout = left;
        }
        /* Relief checks, while the callback wants them, with a cgroup to measure against. */
        const bool relief = m->p.relief_ms > 0 && atomic_load(&m->relief_wanted) &&
                            (m->sig_fds.fd[0] >= 0 || m->sig_fds.fd[4] >= 0);
        if (relief) {
            int left = (int)(m->relief_next_ms - now);
            if (left < 0) left = 0;
            if (timeout < 0 || left < timeout) timeout = left;
        }
        int r = poll(pf, (nfds_t)n, timeout);
        if (r < 0) {
            if (errno == EINTR) continue;
            mz_log(MZ_LOG_ERROR, "pressure: poll failed: %s", strerror(errno));
            break;
        }
        if (follow && mz_time_ms() >= next_limit_check) {
            next_limit_check = mz_time_ms() + 2000.0;
            if (recheck_cg1_limit(m)) continue; /* fds changed: poll again */
        }
        if (relief && mz_time_ms() >= m->relief_next_ms) {
            m->relief_next_ms = mz_time_ms() + m->p.relief_ms;
            mz_pressure_event ev = {.source = m->cg2_events_fd >= 0 ? MZ_PRESSURE_CG2_EVENTS : MZ_PRESSURE_CG1_USAGE,
                                    .level = MZ_PRESSURE_LOW, .relief = true, .t_ms = mz_time_ms(), .monitor = m};
            snprintf(ev.what, sizeof ev.what, "relief check");
            m->fn(m->user, &ev); /* not counted as a signal */
        }
        if (r == 0) {
            if (m->cg1_usage_efd >= 0 && m->cg1_above) check_usage(m, true);
            continue;
        }
        if (pf[0].revents) break;
        int top_level = -1;
        for (int i = 1; i < n; i++) {
            if (!pf[i].revents) continue;
            if (src[i] == 0) {
                if (pf[i].revents & (POLLERR | POLLNVAL)) {
                    /* The trigger is gone (cgroup removed): stop polling it. */
                    close(m->psi_fd);
                    m->psi_fd = -1;
                    set_state(m, MZ_PRESSURE_PSI, false, "trigger removed by the kernel");
                    continue;
                }
                mz_pressure_event ev = {.source = MZ_PRESSURE_PSI, .level = MZ_PRESSURE_MEDIUM};
                snprintf(ev.what, sizeof ev.what, "psi %.56s", m->psi_trigger);
                emit(m, &ev);
            } else if (src[i] == 1) {
                unsigned long long high, max;
                if (parse_events(m->cg2_events_fd, &high, &max)) {
                    close(m->cg2_events_fd);
                    m->cg2_events_fd = -1;
                    set_state(m, MZ_PRESSURE_CG2_EVENTS, false, "memory.events went away");
                    continue;
                }
                if (max > m->cg2_max || high > m->cg2_high) {
                    mz_pressure_event ev = {.source = MZ_PRESSURE_CG2_EVENTS,
                                            .level = max > m->cg2_max ? MZ_PRESSURE_CRITICAL : MZ_PRESSURE_MEDIUM};
                    snprintf(ev.what, sizeof ev.what, "cg2 %s +%llu", max > m->cg2_max ? "max" : "high",
                             max > m->cg2_max ? max - m->cg2_max : high - m->cg2_high);
                    m->cg2_high = high;
                    m->cg2_max = max;
                    emit(m, &ev);
                }
            } else if (src[i] >= 10) {
                uint64_t v;
                if (read(pf[i].fd, &v, sizeof v) == (ssize_t)sizeof v && src[i] - 10 > top_level)
                    top_level = src[i] - 10;
            } else if (src[i] == 3) {
                uint64_t v;
                if (read(pf[i].fd, &v, sizeof v) == (ssize_t)sizeof v) check_usage(m, false);
            }
        }
        if (top_level >= 0) {
            mz_pressure_event ev = {.source = MZ_PRESSURE_CG1_LEVEL, .level = (mz_pressure_level)top_level};
            snprintf(ev.what, sizeof ev.what, "cg1 %s", level_names[top_level]);
            emit(m, &ev);
        }
    }
    return NULL;
}

static void close_all(mz_pressure_monitor_t *m)
{
    if (m->psi_fd >= 0) close(m->psi_fd);
    if (m->cg2_events_fd >= 0) close(m->cg2_events_fd);
    for (int l = 0; l < N_LEVELS; l++) {
        if (m->cg1_level_fd[l] >= 0) close(m->cg1_level_fd[l]);
        if (m->cg1_level_target[l] >= 0) close(m->cg1_level_target[l]);
    }
    if (m->cg1_usage_efd >= 0) close(m->cg1_usage_efd);
    if (m->cg1_usage_target >= 0) close(m->cg1_usage_target);
    if (m->stop_fd >= 0) close(m->stop_fd);
    mz_psig_fds_close(&m->sig_fds);
}

mz_status mz_pressure_start(const mz_pressure_params *p, mz_pressure_fn fn, void *user,
                            mz_pressure_monitor_t **out)
{
    *out = NULL;
    if (!fn) return mz_fail(MZ_E_INVAL, "pressure: no callback");
    mz_pressure_monitor_t *m = calloc(1, sizeof *m);
    if (!m) return mz_fail(MZ_E_NOMEM, "pressure: out of memory");
    m->p = p ? *p : mz_pressure_params_default();
    if (m->p.resignal_ms <= 0) m->p.resignal_ms = 1000;
    m->fn = fn;
    m->user = user;
    pthread_mutex_init(&m->state_mu, NULL);
    m->psi_fd = m->cg2_events_fd = m->cg1_usage_efd = m->cg1_usage_target = -1;
    for (int l = 0; l < N_LEVELS; l++) m->cg1_level_fd[l] = m->cg1_level_target[l] = -1;
    m->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (m->stop_fd < 0) {
        free(m);
        return mz_fail(MZ_E_NOMEM, "pressure: eventfd: %s", strerror(errno));
    }
    mz_esize_state_init(&m->esize, &m->p.size);
    {
        char v2[512], v1[512], path[600];
        if (m->p.cg2_dir) snprintf(v2, sizeof v2, "%s", m->p.cg2_dir);
        else if (mz_cgroup_v2_dir(v2, sizeof v2)) v2[0] = '\0';
        snprintf(path, sizeof path, "%s/memory.current", v2);
        if (v2[0] && access(path, R_OK) != 0) v2[0] = '\0'; /* no v2 memory controller here */
        if (m->p.cg1_dir) snprintf(v1, sizeof v1, "%s", m->p.cg1_dir);
        else if (mz_cgroup_v1_memory_dir(v1, sizeof v1)) v1[0] = '\0';
        mz_psig_fds_open(&m->sig_fds, v2, v1);
    }
    typedef void (*reg_fn)(mz_pressure_monitor_t *);
    static const reg_fn regs[MZ_PRESSURE_N_SOURCES] = {register_psi, register_cg2_events,
                                                       register_cg1_level, register_cg1_usage};
    for (int s = 0; s < MZ_PRESSURE_N_SOURCES; s++) {
        if (m->p.enable[s]) regs[s](m);
        else set_state(m, (mz_pressure_source)s, false, "disabled by configuration");
    }
    if (mz_pressure_n_active(m) > 0) {
        int rc = pthread_create(&m->thread, NULL, monitor_main, m);
        if (rc) {
            close_all(m);
            free(m);
            return mz_fail(MZ_E_NOMEM, "pressure: cannot start thread: %s", strerror(rc));
        }
        m->thread_started = true;
    }
    *out = m;
    return MZ_OK;
}

void mz_pressure_stop(mz_pressure_monitor_t *m)
{
    if (!m) return;
    if (m->thread_started) {
        uint64_t one = 1;
        if (write(m->stop_fd, &one, sizeof one) != (ssize_t)sizeof one)
            mz_log(MZ_LOG_WARN, "pressure: stop signal failed: %s", strerror(errno));
        pthread_join(m->thread, NULL);
    }
    close_all(m);
    pthread_mutex_destroy(&m->state_mu);
    free(m);
}

/* The accessors lock a monitor that is logically const: the lock is not state. */
static pthread_mutex_t *state_lock(const mz_pressure_monitor_t *m)
{
    return &((mz_pressure_monitor_t *)(uintptr_t)m)->state_mu;
}

bool mz_pressure_active(const mz_pressure_monitor_t *m, mz_pressure_source s)
{
    if (!m || (unsigned)s >= MZ_PRESSURE_N_SOURCES) return false;
    pthread_mutex_lock(state_lock(m));
    bool a = m->active[s];
    pthread_mutex_unlock(state_lock(m));
    return a;
}

int mz_pressure_n_active(const mz_pressure_monitor_t *m)
{
    int n = 0;
    for (int s = 0; m && s < MZ_PRESSURE_N_SOURCES; s++) n += mz_pressure_active(m, (mz_pressure_source)s);
    return n;
}

size_t mz_pressure_source_state(const mz_pressure_monitor_t *m, mz_pressure_source s, char *buf, size_t cap)
{
    if (!cap) return 0;
    buf[0] = '\0';
    if (!m || (unsigned)s >= MZ_PRESSURE_N_SOURCES) return 0;
    pthread_mutex_lock(state_lock(m));
    int n = snprintf(buf, cap, "%s", m->state[s]);
    pthread_mutex_unlock(state_lock(m));
    return n < 0 ? 0 : (size_t)n >= cap ? cap - 1 : (size_t)n;
}

size_t mz_pressure_n_events(const mz_pressure_monitor_t *m, mz_pressure_source s)
{
    if (!m || (unsigned)s >= MZ_PRESSURE_N_SOURCES) return 0;
    return atomic_load_explicit(&((mz_pressure_monitor_t *)(uintptr_t)m)->n_events[s], memory_order_relaxed);
}

size_t mz_pressure_describe(const mz_pressure_monitor_t *m, char *buf, size_t cap)
{
    size_t len = 0;
    if (cap) buf[0] = '\0';
    for (int s = 0; m && s < MZ_PRESSURE_N_SOURCES; s++) {
        char st[200];
        mz_pressure_source_state(m, (mz_pressure_source)s, st, sizeof st);
        int n = snprintf(buf + len, cap > len ? cap - len : 0, "%s: %s\n", source_names[s], st);
        if (n > 0) len += (size_t)n;
        if (len >= cap) {
            len = cap ? cap - 1 : 0;
            break;
        }
    }
    return len;
}

/* ---- 4. the signal for eviction sizing ------------------------------------------------------ */

void mz_pressure_read_signal(const mz_pressure_monitor_t *m, const mz_pressure_event *ev, mz_psig *sig)
{
    memset(sig, 0, sizeof *sig);
    sig->source = ev->source;
    sig->level = ev->level;
    sig->t_ms = ev->t_ms;
    if (m) mz_psig_read_fds(&m->sig_fds, sig);
}

void mz_pressure_want_relief(mz_pressure_monitor_t *m, bool on)
{
    if (m) atomic_store(&m->relief_wanted, on);
}

mz_esize_state *mz_pressure_esize_state(mz_pressure_monitor_t *m) { return &m->esize; }
const mz_esize_params *mz_pressure_esize_params(const mz_pressure_monitor_t *m) { return &m->p.size; }
