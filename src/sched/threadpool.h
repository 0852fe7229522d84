/*
 * threadpool.h — a fixed pool of compute threads that run one function on
 * all threads at once (fork-join), as a forward pass needs per layer.
 *
 * Workers spin briefly after a job, then sleep on a condition variable, so
 * back-to-back jobs start in microseconds while an idle pool costs no CPU.
 * Thread contract: mz_threadpool_run is called by the owner thread only.
 */
#ifndef MZ_THREADPOOL_H
#define MZ_THREADPOOL_H

#include <stdbool.h>

typedef struct mz_threadpool mz_threadpool;
typedef void (*mz_task_fn)(void *arg, int ith, int nth);

/* n_threads includes the calling thread (n_threads - 1 workers). NULL on failure. */
mz_threadpool *mz_threadpool_init(int n_threads);
void mz_threadpool_free(mz_threadpool *tp);
int mz_threadpool_n_threads(const mz_threadpool *tp);
/* Runs fn(arg, ith, nth) for ith in [0, nth) — the caller runs ith 0 — and
 * returns when all have finished. */
void mz_threadpool_run(mz_threadpool *tp, mz_task_fn fn, void *arg);

/* For the spin rule's crowding variant (MZ_POOL_PREEMPT=crowded, "How long to
 * spin", threadpool.c) and its tests: the
 * running count of a /proc/loadavg text ("0.52 0.58 0.59 3/1024 12345" -> 3),
 * -1 if the text is not of that form; the same of this machine's
 * /proc/loadavg (-1 where it cannot be read); and whether `runnable` threads
 * crowd `n_cpus` CPUs (true when either is unknown: runnable < 0 or
 * n_cpus < 1). */
long mz_loadavg_runnable(const char *text);
long mz_loadavg_runnable_now(void);
bool mz_pool_crowded(long runnable, long n_cpus);

#endif /* MZ_THREADPOOL_H */
