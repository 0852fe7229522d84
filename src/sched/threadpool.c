/*
 * threadpool.c — fork-join pool of persistent compute threads.
 *
 * Protocol (all shared state is in struct mz_threadpool):
 *   run():   fn/arg are stored, done = 0, entry = (g, open, 0 entered),
 *            then gen = g (seq_cst). The caller runs ith 0 itself, then
 *            waits for done to reach its target: every worker (n - 1) for
 *            run(); for run_claimed() the workers that entered, read when
 *            the caller closes the entry word after its own call.
 *   worker:  waits for gen to change, enters the job by a CAS of entry from
 *            (g, open, k) to (g, open, k + 1), runs fn(arg, ith, n), then
 *            increments done. A worker that finds entry closed or of a later
 *            generation skips the job without reading fn/arg.
 *   Why this is safe: the caller writes fn/arg for job g + 1 only after done
 *   reached the target of g, and a worker that entered g is in that target
 *   (its CAS precedes the close in entry's modification order), so it has
 *   finished reading them; one that did not enter never reads them. The
 *   entry store publishes fn/arg to the CAS (release/acquire through the
 *   seq_cst atomics); the increment of done publishes the worker's results.
 *   run() never closes the entry word: gen cannot move on before all n - 1
 *   workers entered and finished, so none can miss a job.
 *   Waiting: both sides spin on the atomic with a pause instruction
 *            (back-to-back jobs start in well under a microsecond), then
 *            sleep on a condition variable: see "How long to spin" below.
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
#define _GNU_SOURCE /* RUSAGE_THREAD */

#include "threadpool.h"

#include "../core/core.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sched.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define cpu_relax() ((void)0)
#endif

/*
 * How long to spin. The pool has two regimes. While every thread spins, a
 * job starts in well under a microsecond. Once workers sleep, each job pays
 * a broadcast wake-up of the sleepers (tens of microseconds on a VM, where a
 * halted vCPU is woken through the hypervisor); that makes the join slower
 * than a short spin, so the next wait times out too and the pool stays
 * asleep between jobs. Measured on the 16-vCPU machine (smollm2-135m shape,
 * Q4_0/Q4_1, 16 threads, tg128, 10 runs each, MZ_POOL_STATS=1): with an
 * 80 us spin, 2 runs of 20 fell into that regime (12,000 worker sleeps in
 * 20,000 jobs against about 1,000 in the others) and decoded at 155-321
 * tok/s against 560-660; with 1 ms every run stayed above 469 (max/min
 * 1.18-1.36; 20-60 sleeps). Spinning is harmful when the machine is
 * oversubscribed, though: the spinner takes a core from a thread with work
 * (on a 2-vCPU machine at load 9 a 1 ms spin cut decode from 20-24 to 1-11
 * tok/s). A thread the scheduler preempted is the sign of that case: for
 * CALM_US after its last involuntary context switch it spins only
 * SPIN_US_SHORT, and a preemption seen during a spin ends it. The count is
 * read only inside a spin, every 64 polls, so a wait that ends within a few
 * microseconds (the hot path) makes no system call. Every preemption
 * counts, even on a machine that is not crowded: counting one only when
 * /proc/loadavg showed more runnable threads than CPUs + CPUs / 8 decoded
 * qwen3-0.6b Q8_0 at 16 threads on the 16-vCPU machine at 0.82x (longer
 * spins beside the threads with work) and Q4_1 at 1.04x, and at 0.97-0.99x
 * on 2 vCPUs (docs/BENCHMARKS.md, "Target 1 at 16 threads with the crowding
 * rule").
 * MZ_POOL_SPIN_US (0 .. 100000) overrides the long spin for measurements.
 */
#define SPIN_US_DEFAULT 1000
#define SPIN_US_SHORT 80
#define SPIN_US_MAX 100000
#define CALM_US 50000

#define ENTRY_CLOSED (1ull << 31)
#define ENTRY_COUNT_MASK (ENTRY_CLOSED - 1)

typedef struct {
    long nivcsw;        /* involuntary switches last seen; -1 if unknown */
    int64_t calm_after; /* long spins allowed from this time on */
} spin_state;

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

    mz_task_fn fn;          /* current job; written by the owner, published by entry */
    void *arg;

    /* gen (and stop) are read by every spinning worker; done is written by
     * every worker as it finishes: on one cache line, each finishing
     * worker's increment would take the line from all the spinners. */
    /* job generation; workers run once per increment. It repeats entry's
     * generation so that spinners read a line the entry CAS never writes. */
    _Alignas(64) atomic_uint gen;
    atomic_bool stop;       /* set once by free() */
    /* The current job's generation (high 32 bits), ENTRY_CLOSED, and the
     * number of workers that entered it (low bits): CAS'd once per worker
     * and job, on a line of its own. */
    _Alignas(64) _Atomic uint64_t entry;
    _Alignas(64) atomic_int done; /* workers that finished the current job */
    atomic_int n_sleeping;  /* workers announced as (about to be) in cond_wait */
    atomic_bool caller_sleeping;
    _Alignas(64) char pad_end; /* keeps the mutex off done's line */

    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* gen changed or stop */
    pthread_cond_t done_cv; /* done reached the caller's target */

    int64_t spin_us;
    spin_state owner_spin; /* the owner thread's (the caller of run) */
    /* MZ_POOL_YIELD=1: a spinning side calls sched_yield() between its polls,
     * so a runnable thread queued on its core (a descheduled worker) gets
     * it; for measurements of the oversubscribed case. */
    bool yield;
    /* MZ_POOL_STATS=1: the slow paths taken, printed by free(). Counted only
     * when asked, so the fast path keeps to the job's own atomics. */
    bool stats;
    /* MZ_POOL_JOIN=all: run_claimed waits for every worker, as run does. */
    bool join_all;
    atomic_llong n_skipped; /* workers that found a claimed job closed */
    atomic_llong n_jobs, n_worker_sleeps, n_caller_sleeps;
    atomic_llong join_us_total, join_us_max, n_joins_over_1ms;
};

/* The calling thread's involuntary context switches so far; -1 where the
 * platform cannot say (then only the time limit ends a spin). */
static long preemptions(void)
{
#ifdef RUSAGE_THREAD
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) == 0) return ru.ru_nivcsw;
#endif
    return -1;
}

static void spin_state_init(spin_state *st)
{
    st->nivcsw = preemptions();
    st->calm_after = 0;
}

/* Called every 64 polls of a wait whose spin began at t0: true when the
 * thread should stop spinning and sleep. */
static bool spin_over(const struct mz_threadpool *tp, spin_state *st, int64_t t0)
{
    const int64_t t = mz_time_us();
    if (st->nivcsw >= 0) {
        const long n = preemptions();
        if (n != st->nivcsw) {
            st->nivcsw = n;
            st->calm_after = t + CALM_US;
            return true;
        }
    }
    const int64_t limit = t >= st->calm_after ? tp->spin_us : MZ_MIN(tp->spin_us, SPIN_US_SHORT);
    return t - t0 >= limit;
}

/* Waits until gen != seen or stop; returns false on stop. */
static bool worker_wait(struct mz_threadpool *tp, spin_state *st, unsigned seen)
{
    int64_t t0 = 0;
    for (unsigned k = 0;; k++) {
        if (atomic_load(&tp->stop)) return false;
        if (atomic_load(&tp->gen) != seen) return true;
        if (tp->yield && (k & 63) == 63) sched_yield();
        else cpu_relax();
        if (k == 63) t0 = mz_time_us();
        else if ((k & 63) == 63 && spin_over(tp, st, t0)) break;
    }
    if (tp->stats) atomic_fetch_add(&tp->n_worker_sleeps, 1);
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add(&tp->n_sleeping, 1);
    while (!atomic_load(&tp->stop) && atomic_load(&tp->gen) == seen)
        pthread_cond_wait(&tp->work_cv, &tp->mu);
    atomic_fetch_sub(&tp->n_sleeping, 1);
    pthread_mutex_unlock(&tp->mu);
    return !atomic_load(&tp->stop);
}

/* Enters job gen if it is still the current one and open. */
static bool enter_job(struct mz_threadpool *tp, unsigned gen)
{
    uint64_t e = atomic_load(&tp->entry);
    for (;;) {
        if ((unsigned)(e >> 32) != gen || (e & ENTRY_CLOSED)) return false;
        if (atomic_compare_exchange_weak(&tp->entry, &e, e + 1)) return true;
    }
}

/* The number of workers the caller of the current job waits for, as far
 * as the entry word says: its count once closed, else every worker. */
static int job_target(struct mz_threadpool *tp)
{
    const uint64_t e = atomic_load(&tp->entry);
    return (e & ENTRY_CLOSED) ? (int)(e & ENTRY_COUNT_MASK) : tp->n_threads - 1;
}

static void *worker_main(void *p)
{
    worker *w = p;
    struct mz_threadpool *tp = w->tp;
    unsigned seen = 0; /* gen starts at 0 and workers start before the first run */
    spin_state st;
    spin_state_init(&st);
    while (worker_wait(tp, &st, seen)) {
        seen = atomic_load(&tp->gen);
        if (!enter_job(tp, seen)) {
            if (tp->stats) atomic_fetch_add(&tp->n_skipped, 1);
            continue;
        }
        tp->fn(tp->arg, w->ith, tp->n_threads);
        const int done = atomic_fetch_add(&tp->done, 1) + 1;
        /* Only the worker that completes the target wakes a sleeping
         * caller. The caller sleeps only after closing a claimed job, so
         * once it is seen asleep the entry word holds the final count; a
         * plain run's is never closed and its target is every worker. */
        if (atomic_load(&tp->caller_sleeping) && done == job_target(tp)) {
            pthread_mutex_lock(&tp->mu);
            pthread_cond_broadcast(&tp->done_cv);
            pthread_mutex_unlock(&tp->mu);
        }
    }
    return NULL;
}

/* The caller's side of two store-then-load hand-offs (gen against a
 * worker's n_sleeping, caller_sleeping against the workers' done): each side
 * writes its flag, then loads the other's, so at least one sees the other.
 * Seq_cst atomics promise that; the caller's writes are also exchanges (a
 * read-modify-write, as the workers' side already is), because qemu-user
 * runs AArch64's STLR;LDAR on x86 as a store and a load that may pass each
 * other, and test_threadpool then lost a wake-up about one run in 50 (every
 * thread asleep for good; docs/RELIABILITY.md). A read-modify-write is a
 * full barrier on every host; a fence would do too, but ThreadSanitizer
 * does not take atomic_thread_fence. */
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

static int64_t spin_us_from_env(void)
{
    const char *e = getenv("MZ_POOL_SPIN_US");
    if (!e || !*e) return SPIN_US_DEFAULT;
    char *end;
    errno = 0;
    long v = strtol(e, &end, 10);
    if (errno || *end || v < 0 || v > SPIN_US_MAX) {
        mz_log(MZ_LOG_WARN, "MZ_POOL_SPIN_US='%s' is not a whole number of microseconds in [0, %d]; "
               "using %d", e, SPIN_US_MAX, SPIN_US_DEFAULT);
        return SPIN_US_DEFAULT;
    }
    return v;
}

static void print_stats(struct mz_threadpool *tp)
{
    long long jobs = atomic_load(&tp->n_jobs);
    fprintf(stderr,
            "threadpool: %d threads, spin %lld us: %lld jobs, %lld worker sleeps, %lld caller "
            "sleeps, %lld late arrivals not waited for, join wait %.1f us mean, %lld us max, "
            "%lld over 1 ms\n",
            tp->n_threads, (long long)tp->spin_us, jobs, (long long)atomic_load(&tp->n_worker_sleeps),
            (long long)atomic_load(&tp->n_caller_sleeps), (long long)atomic_load(&tp->n_skipped),
            jobs ? (double)atomic_load(&tp->join_us_total) / (double)jobs : 0.0,
            (long long)atomic_load(&tp->join_us_max), (long long)atomic_load(&tp->n_joins_over_1ms));
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
    atomic_init(&tp->entry, 0);
    atomic_init(&tp->done, 0);
    atomic_init(&tp->stop, false);
    atomic_init(&tp->n_sleeping, 0);
    atomic_init(&tp->caller_sleeping, false);
    tp->spin_us = spin_us_from_env();
    spin_state_init(&tp->owner_spin);
    const char *st = getenv("MZ_POOL_STATS");
    tp->stats = st && *st && strcmp(st, "0") != 0;
    const char *yl = getenv("MZ_POOL_YIELD");
    tp->yield = yl && *yl && strcmp(yl, "0") != 0;
    const char *jn = getenv("MZ_POOL_JOIN");
    tp->join_all = jn && !strcmp(jn, "all");

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
    if (tp->stats) print_stats(tp);
    shutdown_workers(tp);
    free(tp->workers);
    pthread_cond_destroy(&tp->done_cv);
    pthread_cond_destroy(&tp->work_cv);
    pthread_mutex_destroy(&tp->mu);
    free(tp);
}

int mz_threadpool_n_threads(const mz_threadpool *tp) { return tp->n_threads; }

/* Starts a job on the workers and runs ith 0 on the caller; returns when the
 * caller's call is done and every worker that entered has finished; the
 * number of workers waited for. */
static int run_job(mz_threadpool *tp, mz_task_fn fn, void *arg, bool claimed)
{
    tp->fn = fn;
    tp->arg = arg;
    const unsigned g = atomic_load_explicit(&tp->gen, memory_order_relaxed) + 1u; /* only the owner writes gen */
    atomic_store(&tp->done, 0);
    atomic_store(&tp->entry, (uint64_t)g << 32); /* publishes fn, arg and done */
    (void)atomic_exchange(&tp->gen, g); /* before n_sleeping is read (comment above wake_workers) */
    wake_workers(tp);

    fn(arg, 0, tp->n_threads);

    if (claimed) atomic_fetch_or(&tp->entry, ENTRY_CLOSED);
    const int target = job_target(tp);
    const int64_t t_join = tp->stats ? mz_time_us() : 0;
    int64_t t0 = 0;
    for (unsigned k = 0; atomic_load(&tp->done) != target; k++) {
        if (tp->yield && (k & 63) == 62) sched_yield();
        else cpu_relax();
        if (k == 63) t0 = mz_time_us();
        else if ((k & 63) == 63 && spin_over(tp, &tp->owner_spin, t0)) {
            if (tp->stats) atomic_fetch_add(&tp->n_caller_sleeps, 1);
            pthread_mutex_lock(&tp->mu);
            (void)atomic_exchange(&tp->caller_sleeping, true); /* before done is read (comment above wake_workers) */
            while (atomic_load(&tp->done) != target) pthread_cond_wait(&tp->done_cv, &tp->mu);
            atomic_store(&tp->caller_sleeping, false);
            pthread_mutex_unlock(&tp->mu);
            break;
        }
    }
    if (tp->stats) {
        /* the caller's wait for the slowest worker: where a descheduled or
         * sleeping worker shows */
        const long long w = (long long)(mz_time_us() - t_join);
        atomic_fetch_add(&tp->n_jobs, 1);
        atomic_fetch_add(&tp->join_us_total, w);
        if (w > atomic_load(&tp->join_us_max)) atomic_store(&tp->join_us_max, w);
        if (w > 1000) atomic_fetch_add(&tp->n_joins_over_1ms, 1);
    }
    return target;
}

void mz_threadpool_run(mz_threadpool *tp, mz_task_fn fn, void *arg)
{
    MZ_ASSERT(tp && fn);
    if (tp->n_threads == 1) fn(arg, 0, 1);
    else run_job(tp, fn, arg, false);
}

int mz_threadpool_run_claimed(mz_threadpool *tp, mz_task_fn fn, void *arg)
{
    MZ_ASSERT(tp && fn);
    if (tp->n_threads == 1) {
        fn(arg, 0, 1);
        return 1;
    }
    return 1 + run_job(tp, fn, arg, !tp->join_all);
}
