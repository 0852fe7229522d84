/*
 * test_threadpool.c — fork-join pool: every run calls fn once per ith with the
 * right nth, results written by workers are visible after run returns, sums
 * are right, both the spinning and the sleeping hand-offs work, and pools
 * can be created and freed repeatedly (also right after init, with workers
 * not yet waiting). Meant to run under -fsanitize=thread as well.
 */
#define _POSIX_C_SOURCE 200809L

#include "sched/threadpool.h"
#include "testutil.h"

#include <stdatomic.h>
#include <time.h>

#define MAX_T 8

typedef struct {
    int run;                 /* set by the owner before each run */
    int seen_run[MAX_T];     /* written by thread ith only */
    int seen_nth[MAX_T];
    int calls[MAX_T];
    atomic_int total_calls;  /* all threads */
    int sleep_us;            /* workers (ith > 0) sleep this long */
} job_state;

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static void job_mark(void *arg, int ith, int nth)
{
    job_state *s = arg;
    if (ith > 0 && s->sleep_us) sleep_us(s->sleep_us);
    s->seen_run[ith] = s->run;
    s->seen_nth[ith] = nth;
    s->calls[ith]++;
    atomic_fetch_add_explicit(&s->total_calls, 1, memory_order_relaxed);
}

typedef struct {
    const int *v;
    size_t n;
    long long partial[MAX_T];
} sum_state;

static void job_sum(void *arg, int ith, int nth)
{
    sum_state *s = arg;
    const size_t a = s->n * (size_t)ith / (size_t)nth, b = s->n * ((size_t)ith + 1) / (size_t)nth;
    long long acc = 0;
    for (size_t i = a; i < b; i++) acc += s->v[i];
    s->partial[ith] = acc;
}

static void check_runs(mz_threadpool *tp, int n, int runs, int gap_us, int worker_sleep_us)
{
    job_state *s = calloc(1, sizeof *s);
    s->sleep_us = worker_sleep_us;
    int bad = 0;
    for (int r = 1; r <= runs; r++) {
        s->run = r;
        mz_threadpool_run(tp, job_mark, s);
        /* Plain reads of what the workers wrote: run() must order them. */
        for (int i = 0; i < n; i++) bad += s->seen_run[i] != r || s->seen_nth[i] != n || s->calls[i] != r;
        if (gap_us) sleep_us(gap_us);
    }
    CHECK_MSG(bad == 0, "n=%d runs=%d gap=%d: %d bad", n, runs, gap_us, bad);
    CHECK_EQ_INT(atomic_load(&s->total_calls), runs * n);
    free(s);
}

int main(void)
{
    static const int sizes[] = {1, 2, 4};
    enum { N = 100003 };
    int *v = malloc(N * sizeof *v);
    long long want = 0;
    for (int i = 0; i < N; i++) want += v[i] = (i * 7919) % 1000 - 500;

    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int n = sizes[k];
        mz_threadpool *tp = mz_threadpool_init(n);
        CHECK(tp != NULL);
        if (!tp) continue;
        CHECK_EQ_INT(mz_threadpool_n_threads(tp), n);
        check_runs(tp, n, 2000, 0, 0);   /* back to back: workers spinning */
        check_runs(tp, n, 30, 500, 0);   /* gaps past the spin: workers asleep */
        check_runs(tp, n, 10, 0, 1000);  /* slow workers: the owner sleeps */
        sum_state s = {.v = v, .n = N};
        int bad = 0;
        for (int r = 0; r < 200; r++) {
            memset(s.partial, 0, sizeof s.partial);
            mz_threadpool_run(tp, job_sum, &s);
            long long got = 0;
            for (int i = 0; i < n; i++) got += s.partial[i];
            bad += got != want;
        }
        CHECK_EQ_INT(bad, 0);
        mz_threadpool_free(tp);
    }

    /* Init/free repeatedly: with no run, right after a run, and after sleeping. */
    for (int r = 0; r < 60; r++) {
        const int n = 1 + r % 4;
        mz_threadpool *tp = mz_threadpool_init(n);
        CHECK(tp != NULL);
        if (!tp) continue;
        if (r % 3 == 1) check_runs(tp, n, 3, 0, 0);
        if (r % 3 == 2) {
            check_runs(tp, n, 1, 0, 0);
            sleep_us(300);
        }
        mz_threadpool_free(tp);
    }
    mz_threadpool_free(NULL);
    CHECK(mz_threadpool_init(0) == NULL);
    free(v);
    return t_done("test_threadpool");
}
