/*
 * threadpool.h — a fixed pool of compute threads that run one function on
 * all threads at once (fork-join), as a forward pass needs per layer.
 *
 * Workers spin briefly after a job, then sleep on a condition variable, so
 * back-to-back jobs start in microseconds while an idle pool costs no CPU.
 * Thread contract: mz_threadpool_run and mz_threadpool_run_claimed are called
 * by the owner thread only.
 */
#ifndef MZ_THREADPOOL_H
#define MZ_THREADPOOL_H

typedef struct mz_threadpool mz_threadpool;
typedef void (*mz_task_fn)(void *arg, int ith, int nth);

/* n_threads includes the calling thread (n_threads - 1 workers). NULL on failure. */
mz_threadpool *mz_threadpool_init(int n_threads);
void mz_threadpool_free(mz_threadpool *tp);
int mz_threadpool_n_threads(const mz_threadpool *tp);
/* Runs fn(arg, ith, nth) for ith in [0, nth) — the caller runs ith 0 — and
 * returns when all have finished. For work split in fixed shares by ith. */
void mz_threadpool_run(mz_threadpool *tp, mz_task_fn fn, void *arg);
/* For a task whose threads claim its work from a shared counter, so that the
 * caller's fn(arg, 0, nth) returns only once every piece is claimed: runs fn
 * on the caller and on each worker that arrives before the caller's call
 * returns, and returns when those have finished, the number of threads that
 * ran it (1 .. nth). A worker the OS has descheduled, or one still waking,
 * is not waited for: it finds the job closed and never calls fn, so arg need
 * not outlive the call. MZ_POOL_JOIN=all makes this mz_threadpool_run (every
 * thread runs fn; returns nth), to measure the two in one run. */
int mz_threadpool_run_claimed(mz_threadpool *tp, mz_task_fn fn, void *arg);

#endif /* MZ_THREADPOOL_H */
