/*
 * threadpool.c — fork-join pool of persistent compute threads.
 *
 * Protocol (all shared state is in struct mz_threadpool):
 *   run():   fn/arg are stored, pending = n - 1, then gen is incremented
 *            (seq_cst). The caller runs ith 0 itself, then waits for
 *            pending == 0.
 *   worker:  waits for gen to change, runs fn(arg, ith, n), decrements
 *            pending. The gen increment publishes fn/arg (release/acquire
 *            through the seq_cst atomics); the decrement publishes the
 *            worker's results to the caller the same way.
 *   Waiting: both sides spin on the atomic for up to SPIN_US with a pause
 *            instruction (back-to-back jobs start in well under a
 *            microsecond), then sleep on a condition variable.
 *   Lost wake-ups are ruled out Dekker-style with seq_cst atomics: a sleeper
 *   first announces itself (n_sleeping / caller_sleeping) under the mutex,
 *   then re-checks the condition before waiting; a waker first changes the
 *   condition, then reads the announcement and, if set, takes the mutex and
 *   broadcasts. In the single total order of seq_cst operations either the
 *   sleeper sees the change or the waker sees the announcement; and because
 *   the sleeper holds the mutex from announcing until cond_wait releases it,
 *   the waker's broadcast cannot fall in between.
 *   Shutdown: stop is set like a new generation; workers exit their wait.
 *
 * Lock order: one mutex only (tp->mu), never held while running a task.
 * Thread contract: init/run/free from one owner thread; tasks run on all.
 */
#define _POSIX_C_SOURCE 200809L

#include "threadpool.h"

#include "../core/core.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define cpu_relax() ((void)0)
#endif

/* How long a waiting side spins before it sleeps. Long enough to bridge the
 * gap between two kernels of one forward pass, short enough that an idle
 * pool goes quiet at once on a shared machine. */
#define SPIN_US 80

struct mz_threadpool;

typedef struct worker {
    struct mz_threadpool *tp;
    pthread_t thread;
    int ith;
} worker;

struct mz_threadpool {
    int n_threads;          /* including the owner thread */
    int n_started;          /* workers successfully created */
    worker *workers;        /* [n_threads - 1] */

    mz_task_fn fn;          /* current job; written by the owner before gen++ */
    void *arg;

    /* gen (and stop) are read by every spinning worker; pending is written
     * by every worker as it finishes: on one cache line, each finishing
     * worker's decrement would take the line from all the spinners. */
    _Alignas(64) atomic_uint gen; /* job generation; workers run once per increment */
    atomic_bool stop;       /* set once by free() */
    _Alignas(64) atomic_int pending; /* workers still running the current job */
    atomic_int n_sleeping;  /* workers announced as (about to be) in cond_wait */
    atomic_bool caller_sleeping;
    _Alignas(64) char pad_end; /* keeps the mutex off pending's line */

    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* gen changed or stop */
    pthread_cond_t done_cv; /* pending reached 0 */
};

/* Waits until gen != seen or stop; returns false on stop. */
static bool worker_wait(struct mz_threadpool *tp, unsigned seen)
{
    const int64_t t_end = mz_time_us() + SPIN_US;
    for (unsigned k = 0;; k++) {
        if (atomic_load(&tp->stop)) return false;
        if (atomic_load(&tp->gen) != seen) return true;
        cpu_relax();
        if ((k & 63) == 63 && mz_time_us() >= t_end) break;
    }
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add(&tp->n_sleeping, 1);
    while (!atomic_load(&tp->stop) && atomic_load(&tp->gen) == seen)
        pthread_cond_wait(&tp->work_cv, &tp->mu);
    atomic_fetch_sub(&tp->n_sleeping, 1);
    pthread_mutex_unlock(&tp->mu);
    return !atomic_load(&tp->stop);
}

static void *worker_main(void *p)
{
    worker *w = p;
    struct mz_threadpool *tp = w->tp;
    unsigned seen = 0; /* gen starts at 0 and workers start before the first run */
    while (worker_wait(tp, seen)) {
        seen = atomic_load(&tp->gen);
        /* Only one job is in flight: the owner cannot start the next one
         * before pending reaches 0, so gen moved by exactly one. */
        tp->fn(tp->arg, w->ith, tp->n_threads);
        if (atomic_fetch_sub(&tp->pending, 1) == 1 && atomic_load(&tp->caller_sleeping)) {
            pthread_mutex_lock(&tp->mu);
            pthread_cond_broadcast(&tp->done_cv);
            pthread_mutex_unlock(&tp->mu);
        }
    }
    return NULL;
}

static void wake_workers(struct mz_threadpool *tp)
{
    if (atomic_load(&tp->n_sleeping) > 0) {
        pthread_mutex_lock(&tp->mu);
        pthread_cond_broadcast(&tp->work_cv);
        pthread_mutex_unlock(&tp->mu);
    }
}

static void shutdown_workers(struct mz_threadpool *tp)
{
    atomic_store(&tp->stop, true);
    /* Unconditional: a worker may be between its spin and its announcement. */
    pthread_mutex_lock(&tp->mu);
    pthread_cond_broadcast(&tp->work_cv);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 0; i < tp->n_started; i++) pthread_join(tp->workers[i].thread, NULL);
    tp->n_started = 0;
}

mz_threadpool *mz_threadpool_init(int n_threads)
{
    if (n_threads < 1) {
        mz_fail(MZ_E_INVAL, "threadpool: n_threads %d < 1", n_threads);
        return NULL;
    }
    /* 64-byte aligned: the struct has cache-line aligned members */
    void *mem = NULL;
    if (posix_memalign(&mem, 64, sizeof(struct mz_threadpool))) {
        mz_fail(MZ_E_NOMEM, "threadpool: out of memory");
        return NULL;
    }
    struct mz_threadpool *tp = memset(mem, 0, sizeof(struct mz_threadpool));
    tp->n_threads = n_threads;
    atomic_init(&tp->gen, 0u);
    atomic_init(&tp->pending, 0);
    atomic_init(&tp->stop, false);
    atomic_init(&tp->n_sleeping, 0);
    atomic_init(&tp->caller_sleeping, false);

    static const char *const sync_err = "threadpool: cannot initialise a mutex or condition variable";
    if (pthread_mutex_init(&tp->mu, NULL)) {
        mz_fail(MZ_E_NOMEM, "%s", sync_err);
        goto out_free_tp;
    }
    if (pthread_cond_init(&tp->work_cv, NULL)) {
        mz_fail(MZ_E_NOMEM, "%s", sync_err);
        goto out_destroy_mu;
    }
    if (pthread_cond_init(&tp->done_cv, NULL)) {
        mz_fail(MZ_E_NOMEM, "%s", sync_err);
        goto out_destroy_work_cv;
    }

    if (n_threads > 1) {
        tp->workers = mz_calloc((size_t)n_threads - 1, sizeof *tp->workers);
        if (!tp->workers) goto out_destroy_done_cv; /* mz_calloc set the error */
        for (int i = 0; i < n_threads - 1; i++) {
            tp->workers[i].tp = tp;
            tp->workers[i].ith = i + 1;
            if (pthread_create(&tp->workers[i].thread, NULL, worker_main, &tp->workers[i])) {
                mz_fail(MZ_E_NOMEM, "threadpool: cannot create thread %d of %d", i + 1, n_threads);
                goto out_stop_workers;
            }
            tp->n_started++;
        }
    }
    return tp;

out_stop_workers:
    shutdown_workers(tp);
    free(tp->workers);
out_destroy_done_cv:
    pthread_cond_destroy(&tp->done_cv);
out_destroy_work_cv:
    pthread_cond_destroy(&tp->work_cv);
out_destroy_mu:
    pthread_mutex_destroy(&tp->mu);
out_free_tp:
    free(tp);
    return NULL;
}

void mz_threadpool_free(mz_threadpool *tp)
{
    if (!tp) return;
    shutdown_workers(tp);
    free(tp->workers);
    pthread_cond_destroy(&tp->done_cv);
    pthread_cond_destroy(&tp->work_cv);
    pthread_mutex_destroy(&tp->mu);
    free(tp);
}

int mz_threadpool_n_threads(const mz_threadpool *tp) { return tp->n_threads; }

void mz_threadpool_run(mz_threadpool *tp, mz_task_fn fn, void *arg)
{
    MZ_ASSERT(tp && fn);
    if (tp->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    tp->fn = fn;
    tp->arg = arg;
    atomic_store(&tp->pending, tp->n_threads - 1);
    atomic_fetch_add(&tp->gen, 1u); /* publishes fn, arg and pending */
    wake_workers(tp);

    fn(arg, 0, tp->n_threads);

    const int64_t t_end = mz_time_us() + SPIN_US;
    for (unsigned k = 0; atomic_load(&tp->pending) != 0; k++) {
        cpu_relax();
        if ((k & 63) == 63 && mz_time_us() >= t_end) {
            pthread_mutex_lock(&tp->mu);
            atomic_store(&tp->caller_sleeping, true);
            while (atomic_load(&tp->pending) != 0) pthread_cond_wait(&tp->done_cv, &tp->mu);
            atomic_store(&tp->caller_sleeping, false);
            pthread_mutex_unlock(&tp->mu);
            break;
        }
    }
}
