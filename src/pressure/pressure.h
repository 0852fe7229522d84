/*
 * pressure.h — the memory-pressure monitor: Linux signals → callbacks.
 *
 * One thread polls every interface that this machine offers and the
 * process may use, and calls back once per signal. It never touches a
 * model or a context: the caller (the server) decides what a signal costs
 * (an mz_evict step) and serializes that with its own work.
 *
 * Interfaces (each optional; mz_pressure_describe() says which are active
 * and why the others are not):
 *
 *   psi          a PSI trigger ("some 100000 2000000") written to the process's
 *                cgroup-v2 memory.pressure, or /proc/pressure/memory when the
 *                process sits in the v2 root; POLLPRI when it fires. Without
 *                CAP_SYS_RESOURCE the kernel only accepts windows that are
 *                multiples of 2 s (EINVAL otherwise), so the default is 2 s.
 *   cg2-events   cgroup-v2 memory.events: kernfs wakes poll() (POLLPRI) when a
 *                counter changes; the "high" and "max" counters are compared
 *                with the last values read.
 *   cg1-level    cgroup-v1 memory.pressure_level through cgroup.event_control:
 *                one eventfd per level (low, medium, critical); a listener of
 *                a level is also woken for higher levels, so when several fire
 *                together the highest wins.
 *   cg1-usage    cgroup-v1 usage thresholds (memory.usage_in_bytes through
 *                cgroup.event_control): the eventfd fires when usage crosses a
 *                threshold either way; the monitor reads the usage and signals
 *                only while it is at or above the lowest threshold, and then
 *                again every resignal_ms while it stays there (a crossing is
 *                an edge; the pressure is a level).
 *
 * Thread contract: mz_pressure_start / mz_pressure_stop from one thread;
 * the callback runs on the monitor thread and may block (signals that arrive
 * meanwhile coalesce in the kernel: eventfd counters, PSI edges).
 */
#ifndef MZ_PRESSURE_H
#define MZ_PRESSURE_H

#include "mzcache.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct mz_pressure_monitor mz_pressure_monitor_t;

typedef enum mz_pressure_source {
    MZ_PRESSURE_PSI = 0,
    MZ_PRESSURE_CG2_EVENTS = 1,
    MZ_PRESSURE_CG1_LEVEL = 2,
    MZ_PRESSURE_CG1_USAGE = 3,
    MZ_PRESSURE_N_SOURCES = 4,
} mz_pressure_source;

/* Severity of a signal; the server maps it to a number of eviction steps. */
typedef enum mz_pressure_level {
    MZ_PRESSURE_LOW = 0,      /* v1 "low": the kernel is reclaiming (page cache) */
    MZ_PRESSURE_MEDIUM = 1,   /* v1 "medium", PSI trigger, v2 "high", v1 usage threshold */
    MZ_PRESSURE_CRITICAL = 2, /* v1 "critical", v2 "max" (the limit was hit) */
} mz_pressure_level;

typedef struct mz_pressure_event {
    mz_pressure_source source;
    mz_pressure_level level;
    double t_ms;              /* monotonic (CLOCK_MONOTONIC), when read */
    size_t usage_bytes;       /* cg1-usage: usage when read; else 0 */
    size_t threshold_bytes;   /* cg1-usage: the lowest threshold; else 0 */
    char what[64];            /* short description: "psi some 100000 2000000", "cg1 medium",
                                 "cg2 max +1", "usage 301 MiB >= 280 MiB", "...(still)" */
    mz_pressure_monitor_t *monitor; /* the monitor that fired (for mz_pressure_read_signal
                                       and the sizing state; valid during the callback) */
    bool relief;              /* not a signal: the periodic check the callback asked for with
                                 mz_pressure_want_relief (source: a cgroup source, level LOW) */
} mz_pressure_event;

typedef void (*mz_pressure_fn)(void *user, const mz_pressure_event *ev);

#define MZ_PRESSURE_MAX_THRESHOLDS 4

/* How much one signal evicts (src/pressure/evict_size.h has the rules). */
typedef struct mz_esize_params {
    double headroom_pct;         /* target headroom below the cgroup limit, % of it (default 15) */
    unsigned long long headroom_bytes; /* ... or at least these bytes (default 0) */
    double psi_step_pct;         /* PSI step, % of the evictable total (default 2) */
    unsigned long long psi_step_bytes; /* PSI step in bytes; overrides the % when nonzero */
    double psi_backoff_ms;       /* first back-off after a PSI step (default 2000) */
    double psi_backoff_max_ms;   /* longest back-off (default 32000) */
} mz_esize_params;

typedef struct mz_pressure_params {
    bool enable[MZ_PRESSURE_N_SOURCES]; /* default: all true */
    const char *psi_trigger;  /* default "some 100000 2000000" (100 ms stalled in 2 s) */
    const char *psi_path;     /* NULL: own v2 cgroup's memory.pressure, else /proc/pressure/memory */
    const char *cg2_dir;      /* NULL: the process's own v2 cgroup (needs memory.events) */
    const char *cg1_dir;      /* NULL: the process's own v1 memory cgroup */
    /* cg1-usage thresholds: absolute bytes (> 100) or, when <= 100, percent of
     * the cgroup's memory.limit_in_bytes (then inactive without a limit).
     * Zero-terminated; default { 90 } (90 % of the limit). */
    double cg1_thresholds[MZ_PRESSURE_MAX_THRESHOLDS];
    int resignal_ms;          /* cg1-usage re-signal period while above (default 1000) */
    int relief_ms;            /* period of the relief checks while wanted (default 250; 0: none) */
    /* Eviction sizing. Defaults from mz_esize_params_default(); the
     * environment variable MZCACHE_PRESSURE_HEADROOM ("64M", "15%") sets the
     * headroom for daemons started without a flag for it. */
    mz_esize_params size;
} mz_pressure_params;

mz_pressure_params mz_pressure_params_default(void);

/* Registers what it can and starts the monitor thread. Interfaces that are
 * missing or refused are recorded (see mz_pressure_describe), not errors: a
 * monitor with nothing active is still returned (and its thread not
 * started). Errors: MZ_E_NOMEM, or a thread that cannot start. */
MZ_NODISCARD mz_status mz_pressure_start(const mz_pressure_params *p, mz_pressure_fn fn,
                                         void *user, mz_pressure_monitor_t **out);
/* Stops the thread (waits for a running callback) and closes everything. NULL is fine. */
void mz_pressure_stop(mz_pressure_monitor_t *m);

/* Relief checks: while on, the monitor thread calls back every relief_ms
 * with an event whose relief is true (between and besides the signals), so
 * that the callback can see whether memory it gave back fits again; the
 * callback turns them off when there is nothing left to bring back. Only
 * with a cgroup source active (the room is measured against its limit).
 * Any thread (an atomic flag; the callback may call it). */
void mz_pressure_want_relief(mz_pressure_monitor_t *m, bool on);

/* Whether a source was registered. */
bool mz_pressure_active(const mz_pressure_monitor_t *m, mz_pressure_source s);
/* Number of active sources. */
int mz_pressure_n_active(const mz_pressure_monitor_t *m);
/* One line per source: "psi: active (/proc/pressure/memory, some 100000 2000000)"
 * or "cg2-events: inactive (no memory controller in cgroup v2)". Never holds
 * a secret; paths are kernel interface paths. Returns the length written. */
size_t mz_pressure_describe(const mz_pressure_monitor_t *m, char *buf, size_t cap);
/* Copies one source's state line ("active (...)" / "inactive (why)") into buf;
 * returns its length. Any thread (the monitor re-arms and updates it). */
size_t mz_pressure_source_state(const mz_pressure_monitor_t *m, mz_pressure_source s, char *buf, size_t cap);
const char *mz_pressure_source_name(mz_pressure_source s);
/* Signals delivered so far by source (any thread; relaxed). */
size_t mz_pressure_n_events(const mz_pressure_monitor_t *m, mz_pressure_source s);

/* Helpers, shared with the server and the tests. */
/* The process's v1 memory cgroup directory ("/sys/fs/cgroup/memory/a/b"); 0 on success. */
int mz_cgroup_v1_memory_dir(char *buf, size_t cap);
/* The process's v2 cgroup directory (may be the v2 root); 0 on success. */
int mz_cgroup_v2_dir(char *buf, size_t cap);
/* Reads one unsigned number from a file; 0 on success. */
int mz_read_u64_file(const char *path, unsigned long long *out);

/* How much a signal should evict: the sizing that goes with the monitor
 * (included last: it uses the types above). */
#include "evict_size.h"

#endif /* MZ_PRESSURE_H */
