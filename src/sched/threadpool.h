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

typedef struct mz_threadpool mz_threadpool;
typedef void (*mz_task_fn)(void *arg, int ith, int nth);

/* n_threads includes the calling thread (n_threads - 1 workers). NULL on failure. */
mz_threadpool *mz_threadpool_init(int n_threads);
void mz_threadpool_free(mz_threadpool *tp);
int mz_threadpool_n_threads(const mz_threadpool *tp);
/* Runs fn(arg, ith, nth) for ith in [0, nth) — the caller runs ith 0 — and
 * returns when all have finished. */
void mz_threadpool_run(mz_threadpool *tp, mz_task_fn fn, void *arg);

#endif /* MZ_THREADPOOL_H */
