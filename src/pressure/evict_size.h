/*
 * evict_size.h — how many bytes one pressure signal should evict.
 *
 * Pure: a reading of the signal (which source fired, the cgroup's limits and
 * usage at that moment) and what the daemon holds go in, a byte count comes
 * out. No file, clock or model is touched here (pressure.c reads the cgroup
 * files into an mz_psig; the server calls mz_esize and then mz_evict), so the
 * tests can drive it with recorded sequences of readings.
 *
 * Rules:
 *   - With a cgroup limit known (v2: the lower of memory.high and memory.max;
 *     v1: memory.limit_in_bytes) the target is limit − headroom (headroom =
 *     max(headroom_bytes, headroom_pct % of the limit)), usage is the
 *     cgroup's usage minus its inactive file pages (the kernel drops those by
 *     itself), and the need is usage − target. A cgroup signal (cg2-events,
 *     cg1-usage, cg1-level) asks exactly the need; no need = the signal has
 *     cleared and nothing is evicted.
 *   - PSI (and any signal without a limit to measure against) says that
 *     someone stalls, not how much is missing: a small step (psi_step_bytes,
 *     or psi_step_pct % of the evictable total, at least one unit), then a
 *     back-off: no further PSI step for psi_backoff_ms, doubling (up to
 *     psi_backoff_max_ms) while PSI keeps firing, back to the start after a
 *     quiet spell of twice the current wait. A PSI event that comes with a
 *     cgroup need above the step uses the need (the cgroup is the cause).
 *   - Never more than what is held (above the floor), and never more than
 *     the larger of the need and one unit (mz_evict frees whole units).
 *
 * Thread contract: mz_esize updates *st; one caller at a time per state (the
 * pressure monitor's thread).
 */
#ifndef MZ_EVICT_SIZE_H
#define MZ_EVICT_SIZE_H

#include "pressure.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* "No limit" in a reading ("max" in cgroup v2, the huge v1 default). */
#define MZ_PSIG_NOLIMIT UINT64_MAX

/* One reading of the signal; 0 in a field = not read / not available. */
typedef struct mz_psig {
    mz_pressure_source source;
    mz_pressure_level level;
    double t_ms;                 /* monotonic ms of the reading */
    uint64_t v2_high, v2_max;    /* memory.high, memory.max (MZ_PSIG_NOLIMIT: "max") */
    uint64_t v2_current;         /* memory.current */
    uint64_t v1_limit;           /* memory.limit_in_bytes (MZ_PSIG_NOLIMIT when unlimited) */
    uint64_t v1_usage;           /* memory.usage_in_bytes */
    uint64_t inactive_file;      /* memory.stat inactive_file (v2) / total_inactive_file (v1) */
} mz_psig;

/* mz_esize_params (the rules' knobs) is in pressure.h, inside mz_pressure_params. */

mz_esize_params mz_esize_params_default(void);

typedef struct mz_esize_state {
    double psi_last_ms;          /* time of the last PSI step; < 0: none yet */
    double psi_wait_ms;          /* current back-off */
} mz_esize_state;

void mz_esize_state_init(mz_esize_state *st, const mz_esize_params *p);

/* What the daemon holds. */
typedef struct mz_esize_held {
    uint64_t held;               /* evictable bytes still held (resident + compressed) above the floor */
    uint64_t total;              /* the evictable total (weights + KV), for the PSI step */
    uint64_t unit;               /* bytes of one unit (the smaller average of a weight block / KV chunk) */
} mz_esize_held;

typedef enum mz_esize_basis {
    MZ_ESIZE_CGROUP = 0,         /* need = usage − target */
    MZ_ESIZE_PSI = 1,            /* a PSI (or limitless) step */
    MZ_ESIZE_CLEAR = 2,          /* usage at or below the target: nothing to do */
    MZ_ESIZE_BACKOFF = 3,        /* a PSI step is due only later */
    MZ_ESIZE_EMPTY = 4,          /* nothing held above the floor */
} mz_esize_basis;

typedef struct mz_esize_out {
    mz_esize_basis basis;
    uint64_t need;               /* what the signal asked (cgroup need or the PSI step) */
    uint64_t bytes;              /* what to ask mz_evict for (0: nothing) */
    uint64_t limit, usage, target; /* the cgroup figures used (0 when none) */
    char why[160];               /* one line for the log */
} mz_esize_out;

/* Sizes one eviction for the reading sig. */
void mz_esize(const mz_esize_params *p, mz_esize_state *st, const mz_psig *sig, const mz_esize_held *h,
              mz_esize_out *out);

const char *mz_esize_basis_name(mz_esize_basis b);

/* Restore ahead: whether bytes more fit below the target of the reading
 * (usage less inactive file + bytes <= limit − headroom, the figures of
 * mz_esize). Fills out's limit, usage, target, need (= bytes), basis
 * (CLEAR: fits, CGROUP: does not) and why. False without a cgroup limit:
 * with nothing to measure the room against the daemon waits for a request. */
bool mz_esize_room(const mz_esize_params *p, const mz_psig *sig, uint64_t bytes, mz_esize_out *out);

/* The cgroup files a reading needs, opened once: reading them again with
 * pread allocates nothing in the kernel, where a fresh open() would charge a
 * file object to the very cgroup that is over its memory.high (and stall the
 * reader for up to 2 s). fd -1 = absent. */
#define MZ_PSIG_N_FILES 7
typedef struct mz_psig_fds {
    int fd[MZ_PSIG_N_FILES]; /* v2 current, high, max, stat; v1 usage, limit, stat */
} mz_psig_fds;
void mz_psig_fds_open(mz_psig_fds *f, const char *v2_dir, const char *v1_dir);
void mz_psig_fds_close(mz_psig_fds *f);
void mz_psig_read_fds(const mz_psig_fds *f, mz_psig *sig);

/* Parsers (fuzzed by tests/fuzz/fuzz_pressure.c). A cgroup value file's
 * text: digits (and an optional newline) → the number, "max" →
 * MZ_PSIG_NOLIMIT, anything else → 0. memory.stat text: the value of the
 * line "key N", 0 when absent or malformed. A headroom: a percentage of the
 * limit from 0 to MZ_ESIZE_HEADROOM_MAX_PCT ("15%") or a size
 * (mz_parse_size: "64M", "1G", "4096"); sets headroom_pct or headroom_bytes
 * (the other to 0) and returns 0, or -1 leaving *p as it was. Serve's
 * --pressure-headroom and MZCACHE_PRESSURE_HEADROOM both go through it. */
#define MZ_ESIZE_HEADROOM_MAX_PCT 95.0
uint64_t mz_psig_parse_value(const char *buf);
uint64_t mz_psig_parse_stat(const char *buf, const char *key);
int mz_esize_parse_headroom(const char *s, mz_esize_params *p);

/* Reads the cgroup figures of the monitor's cgroups into sig (source, level
 * and time from ev). Fields it cannot read stay 0. Any thread. */
void mz_pressure_read_signal(const mz_pressure_monitor_t *m, const mz_pressure_event *ev, mz_psig *sig);
/* The same from explicit directories (either may be NULL); opens and closes
 * the files (for tests and tools; the monitor keeps its own open). */
void mz_psig_read_dirs(const char *v2_dir, const char *v1_dir, mz_psig *sig);

/* The sizing state and parameters the monitor keeps for its callback (the
 * monitor thread is the only caller of the callback, so no lock). */
mz_esize_state *mz_pressure_esize_state(mz_pressure_monitor_t *m);
const mz_esize_params *mz_pressure_esize_params(const mz_pressure_monitor_t *m);

#endif /* MZ_EVICT_SIZE_H */
