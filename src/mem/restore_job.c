/*
 * restore_job.c — the pipelined restore of restore_generate (contract in
 * manager.h, "pipelined restore").
 */
#define _GNU_SOURCE
#include "manager_impl.h"

#include <sys/mman.h>
#include <string.h>
#include <time.h>

/* ---- pipelined restore (restore_generate, paper §4.2 / §6.3) ----------------------------- *
 *
 * Three activities bring every unit that is evicted when the request
 * arrives back in forward order (layer by layer: the weight block, then the
 * layer's KV chunks), while the owner thread computes and waits per unit in
 * mz_mem_acquire_layer. They run on 1..MZ_RESTORE_THREADS_MAX threads (the
 * split: see job_thread_main and mz_mem_restore_begin):
 *
 *   alloc    pre-faults each unit's range (MADV_POPULATE_WRITE; else a
 *            write per page), on the pre-faulting threads (all of them
 *            unless the profile's pre-fault table caps them:
 *            mz_restore_split_plan): each claims the next unit in forward
 *            order — from 4 threads on, the next stored unit instead while
 *            fewer than sto_lead of them are ready ahead of the storage
 *            lanes, so the disk starts at once — and marks it done
 *            (j->mapped, j->n_mapped). A loader needs only its own unit
 *            done. The ranges were all made writable at the start
 *            (mz_unit_map_pages, one pass: see mz_mem_restore_begin). It
 *            runs ahead of the loaders; without alloc||reload overlap the
 *            loaders start only when it has finished.
 *   storage  weight blocks (O_DIRECT batch from the model file, hash check)
 *            and stored chunks (swap file, checksummed), forward order, in
 *            one or more lanes: each lane claims the next stored unit, has
 *            its own read queue (the profile's depth shared among the
 *            lanes) and its own model-file reader, and decodes what it read.
 *   memory   the compressed stack from its top (its head order; forward
 *            order after a backward-out eviction), in one or more lanes:
 *            each claims the next item (views of every item are taken at
 *            the start), decodes it into its unit, and the stack's top is
 *            dropped as the decoded prefix grows, so the stack still
 *            shrinks from its top only. A decoded unit settles RESIDENT
 *            when its item is dropped; after a failure the decoded units
 *            below the failed one go back to COMPRESSED, their items intact.
 *
 * A loader waits until the unit is allocated, claims it BUSY (the COMPRESSED
 * claim under mm->lock, as everywhere), works *without* mm->lock (the stack
 * is not modified by anyone else while the job runs: compute only waits, and
 * eviction/truncate are owner-thread calls that do not run during a
 * request), then takes mm->lock only to pop the stack item or free the swap
 * slot, settles the unit RESIDENT and broadcasts j->cv. Compute waits on
 * j->cv until its unit is RESIDENT or the job failed.
 *
 * Errors: the failing unit releases its pages and settles back to the state
 * it came from, with its copy intact; the job records the first error (its
 * message names the unit) and every worker stops. Units that were allocated
 * but never loaded get their pages released at the end, so the accounting
 * stays exact and nothing unverified stays readable.
 *
 * Lock order: j->mu is a leaf (never held while taking mm->lock, never
 * held while waiting on a unit's futex).
 */

#ifdef MADV_POPULATE_WRITE
#define MZ_MADV_POPULATE_WRITE MADV_POPULATE_WRITE
#else
#define MZ_MADV_POPULATE_WRITE 23
#endif

/* Units in flight per storage lane, at most. */
#define STO_LANE_DEPTH_MAX 16

struct sto_req {
    mz_swap_item item;
    size_t i;                  /* job index of the unit */
    uint8_t *scratch;          /* encoded record (STORED_COMPRESSED), page-aligned */
    bool busy;
};

/* One storage lane: only the thread running it touches it. Stored KV
 * chunks are read asynchronously, up to `depth` units in flight (one
 * O_DIRECT read of a chunk is one or a few requests of the profile's size).
 * NULL aio: one synchronous read at a time. */
typedef struct sto_lane {
    mz_swap_aio_t *aio;
    struct sto_req req[STO_LANE_DEPTH_MAX];
    int depth;
    int n_inflight;
    uint8_t *scratch;          /* synchronous reads (page-aligned) */
    mz_dfile_t *dfile;         /* weight blocks: lane 0 the manager's, the others their own */
    bool own_dfile;
} sto_lane;

typedef struct job_thread {
    struct rjob *j;
    unsigned mask;             /* 1 << ACT_*: the activities this thread runs */
    int lane;                  /* its storage lane (ACT_STORAGE), else -1 */
    bool alloc_first;          /* only allocation until all of it is claimed */
} job_thread;

typedef struct rjob {
    mz_mem *mm;
    size_t n;                  /* units in the job */
    mz_unit **units;           /* forward order */
    mz_unit_state *from;       /* state at the start */
    size_t *kv_idx;            /* [n_layer * max_chunks]: job index of a KV unit, SIZE_MAX if none */
    bool overlap_alloc;
    unsigned delay_us_max;
    size_t fail_mem_item;      /* tests: mz_restore_job_params.fail_mem_item */
    uint64_t seed;
    sto_lane *lanes;
    int n_lanes;
    size_t *sto_list;          /* [n_storage]: job indices of the stored units, forward order */
    size_t sto_next;           /* next of them a lane claims (j->mu) */
    mz_compstack_view *mem_items; /* [n_mem]: the stack from its top, taken at the start */
    size_t *mem_unit;          /* [n_mem]: job index of each item's unit */
    unsigned char *mem_done;   /* [n_mem]: decoded (mm->lock) */
    size_t mem_next;           /* next item a lane claims (j->mu) */
    size_t mem_dropped;        /* items dropped from the stack (mm->lock) */
    size_t mem_pin;            /* items from here down stay on the stack: the forward pass
                                  reads them (mm_job_lend); SIZE_MAX: none (mm->lock) */
    size_t *mem_item;          /* [n]: item index of a unit in the stack, SIZE_MAX if stored */
    unsigned char *mem_taken;  /* [n_mem]: decoded by the forward pass (mm_job_take); the
                                  lanes skip it (j->mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t n_opened;           /* prefix of units made readable and writable */
    size_t alloc_next;         /* next unit in forward order an allocating thread claims */
    unsigned char *alloc_claimed; /* [n]: claimed by a pre-faulting thread */
    unsigned char *mapped;     /* [n]: mapped and pre-faulted (any order) */
    size_t n_mapped;           /* units mapped and pre-faulted */
    size_t sto_alloc_next;     /* next of sto_list the storage lead allocates */
    size_t sto_lead;           /* stored units allocated ahead of the storage lanes' claim
                                  (0: forward order only) */
    int sto_allocating;        /*   of them being pre-faulted now */
    int sto_allocating_max;
    size_t n_ready;            /* units made RESIDENT */
    int n_running;             /* workers still running */
    bool failed;
    mz_status err;
    char errmsg[512];
    unsigned char *loaded;     /* [n]: made resident by a loader */
    pthread_t *th;
    int n_th;
    int n_threads;             /* the split: restore threads started */
    int n_prefault;            /*   of them, threads that pre-fault */
    job_thread *thr;           /* [n_threads]: each thread's activities */
    double act_ms[3];          /* busy time per activity (ACT_*) */
    size_t n_storage, n_mem;   /* units each loader handles */
    double t_begin, t_ready;
    double stall_ms;           /* owner: time waiting in acquire_layer */
    size_t n_lent;             /* chunks lent to the forward pass (owner thread) */
    size_t take_pos;           /* first position the pass wrote into a taken chunk
                                  (owner thread; SIZE_MAX: none taken) */
    bool detached;             /* the request returned; only the memory path is left
                                  (mz_mem_restore_detach) */
    bool started;              /* every thread is created: they may start (j->mu) */
    double first_compute_ms;
} rjob;

static void job_delay(rjob *j, uint64_t *rng)
{
    if (!j->delay_us_max) return;
    *rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
    unsigned us = (unsigned)(*rng >> 33) % (j->delay_us_max + 1);
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* First error wins; wakes everyone. */
static void job_fail(rjob *j, mz_status s, const char *msg)
{
    pthread_mutex_lock(&j->mu);
    if (!j->failed) {
        j->failed = true;
        j->err = s;
        snprintf(j->errmsg, sizeof j->errmsg, "%s", msg);
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void job_worker_exit(rjob *j)
{
    pthread_mutex_lock(&j->mu);
    if (--j->n_running == 0) j->t_ready = mz_time_ms();
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* Unit i may be loaded: it is allocated (or, without alloc overlap, all
 * are). Caller holds j->mu. */
static bool job_allocated(const rjob *j, size_t i)
{
    return j->overlap_alloc ? j->mapped[i] != 0 : j->n_mapped >= j->n;
}

static void job_settled(rjob *j, size_t i, mz_unit *u)
{
    j->loaded[i] = 1;
    mz_unit_settle(u, MZ_UNIT_RESIDENT);
    pthread_mutex_lock(&j->mu);
    j->n_ready++;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* The three activities are step functions, so that a restore thread can run
 * one of them or several in turn (n_restore_threads < 3). A step does one
 * unit (JOB_PROGRESS), finds its next unit not yet allocated (JOB_BLOCKED:
 * *seen_alloc is the allocation count it saw), or has nothing left or the
 * job failed (JOB_DONE). */
enum { JOB_DONE, JOB_PROGRESS, JOB_BLOCKED };
enum {
    ACT_ALLOC = MZ_RESTORE_ACT_ALLOC,
    ACT_STORAGE = MZ_RESTORE_ACT_STORAGE,
    ACT_MEM = MZ_RESTORE_ACT_MEM,
    ACT_COUNT = MZ_RESTORE_ACT_COUNT,
};

typedef struct job_act {
    int kind;
    sto_lane *lane;            /* ACT_STORAGE: the thread's lane */
    uint64_t rng;
    double busy;
    bool done;
} job_act;

static int job_alloc_step(rjob *j, job_act *a, size_t *seen_alloc)
{
    (void)seen_alloc;
    pthread_mutex_lock(&j->mu);
    size_t i = SIZE_MAX;
    bool sto_lead = false;
    if (!j->failed) {
        /* The storage lead: a stored unit (a dropped weight block is tens
         * of MB from the disk) is pre-faulted up to sto_lead units ahead of
         * the storage lanes' claim, on at most sto_allocating_max threads at
         * once, so the disk starts at once and never waits for the forward
         * order to reach the next block; the rest goes in forward order,
         * the order in which the compute needs the units. */
        if (j->sto_lead && j->sto_allocating < j->sto_allocating_max) {
            while (j->sto_alloc_next < j->n_storage &&
                   j->alloc_claimed[j->sto_list[j->sto_alloc_next]])
                j->sto_alloc_next++;
            if (j->sto_alloc_next < j->n_storage && j->sto_alloc_next < j->sto_next + j->sto_lead) {
                i = j->sto_list[j->sto_alloc_next++];
                sto_lead = true;
                j->sto_allocating++;
            }
        }
        if (i == SIZE_MAX) {
            while (j->alloc_next < j->n && j->alloc_claimed[j->alloc_next]) j->alloc_next++;
            if (j->alloc_next < j->n) i = j->alloc_next++;
        }
        if (i != SIZE_MAX) j->alloc_claimed[i] = 1;
    }
    pthread_mutex_unlock(&j->mu);
    if (i == SIZE_MAX) return JOB_DONE;
    double t0 = mz_time_ms();
    job_delay(j, &a->rng);
    mz_unit *u = j->units[i];
    /* Nobody else touches u before mapped[i] is set (the loaders wait
     * for it, compute waits for RESIDENT; each index is claimed once).
     * Its range is already readable and writable (restore_begin). Pre-fault: one MADV_POPULATE_WRITE (Linux 5.14+) populates the
     * range in one call, about twice as fast as a write per page on memory
     * the hypervisor has reclaimed (docs/BENCHMARKS.md, bench_reserve);
     * older kernels: a write per page. */
    if (madvise(u->buf, u->bytes, MZ_MADV_POPULATE_WRITE) != 0) {
        size_t pg = mz_page_size();
        volatile uint8_t *p = u->buf;
        for (size_t off = 0; off < u->bytes; off += pg) p[off] = 0;
    }
    pthread_mutex_lock(&j->mu);
    MZ_ASSERT(!j->mapped[i]); /* claimed once: alloc_claimed */
    j->mapped[i] = 1;
    j->n_mapped++;
    if (sto_lead) j->sto_allocating--;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    a->busy += mz_time_ms() - t0;
    return JOB_PROGRESS;
}

/* Stops the job on unit i's failure: its pages go back, it returns to the
 * state it came from with its stored copy intact. */
static void storage_unit_failed(rjob *j, size_t i, mz_status s)
{
    mz_unit *u = j->units[i];
    char nm[64], msg[512];
    snprintf(msg, sizeof msg, "cannot restore %s: %s", mm_unit_name(u, nm, sizeof nm), mz_last_error());
    mz_unit_release_pages(u);
    mz_unit_settle(u, j->from[i]);
    job_fail(j, s, msg);
}

/* Unit i's record is in (raw: in u->buf, compressed: in scratch): check,
 * decode, free the slot, settle. */
static mz_status storage_unit_finish(rjob *j, size_t i, mz_status st, size_t len,
                                     const uint8_t *scratch)
{
    mz_mem *mm = j->mm;
    mz_unit *u = j->units[i];
    if (st) {
        mz_fail_prefix(st, "reading it from the swap file failed");
    } else if (j->from[i] == MZ_UNIT_STORED_RAW) {
        if (len != u->bytes)
            st = mz_fail(MZ_E_CORRUPT, "the swap file holds %zu bytes for it, expected %zu", len,
                         u->bytes);
    } else {
        st = mz_codec_decode(u->enc, scratch, len, (mz_f16 *)u->buf, mm->n_values);
        if (st) mz_fail_prefix(st, "decoding it after reading it from the swap file failed");
    }
    if (st) {
        storage_unit_failed(j, i, st);
        return st;
    }
    pthread_mutex_lock(&mm->lock);
    if (u->slot != u->clean) mm_swap_slot_free(mm, u->slot); /* [store] a clean copy stays */
    u->slot = 0;
    pthread_mutex_unlock(&mm->lock);
    job_settled(j, i, u);
    return MZ_OK;
}

/* Waits for one read in flight and finishes its unit. */
static mz_status storage_reap_one(rjob *j, sto_lane *L, bool wait)
{
    mz_swap_item *it = mz_swap_aio_reap(L->aio, wait);
    if (!it) return MZ_AGAIN;
    struct sto_req *r = (struct sto_req *)(void *)it; /* item is the first member */
    r->busy = false;
    L->n_inflight--;
    return storage_unit_finish(j, r->i, it->status, it->len, r->scratch);
}

/* After a failure: wait for every read in flight (their buffers must stay
 * valid until the kernel is done) and put those units back. */
static void storage_drain(rjob *j, sto_lane *L)
{
    while (L->n_inflight > 0) {
        mz_swap_item *it = mz_swap_aio_reap(L->aio, true);
        if (!it) break;
        struct sto_req *r = (struct sto_req *)(void *)it;
        r->busy = false;
        L->n_inflight--;
        mz_unit_release_pages(j->units[r->i]);
        mz_unit_settle(j->units[r->i], j->from[r->i]);
    }
}

/* One unit read synchronously into u (weight block: the lane's model-file
 * reader; stored chunk: the lane's scratch). */
static mz_status storage_read_sync(rjob *j, sto_lane *L, mz_unit *u, mz_unit_state from)
{
    mz_mem *mm = j->mm;
    if (from != MZ_UNIT_DROPPED) return mm_read_stored(mm, u, from, L->scratch, mm->scratch_cap);
    return mz_wtable_read_block(mm->wt, L->dfile, u->layer);
}

static int job_storage_step(rjob *j, job_act *a, size_t *seen_alloc)
{
    mz_mem *mm = j->mm;
    sto_lane *L = a->lane;
    double t0 = mz_time_ms();
    /* Finished reads first: they free a place in the queue. */
    if (L->n_inflight > 0) {
        mz_status st = storage_reap_one(j, L, false);
        if (st != MZ_AGAIN) {
            if (st) storage_drain(j, L);
            a->busy += mz_time_ms() - t0;
            return st ? JOB_DONE : JOB_PROGRESS;
        }
    }
    /* Claim the next stored unit once it is allocated (and, for a chunk
     * read asynchronously, once the queue has room). */
    pthread_mutex_lock(&j->mu);
    const bool failed = j->failed, have = j->sto_next < j->n_storage;
    const size_t i = have ? j->sto_list[j->sto_next] : 0;
    const bool ready = have && job_allocated(j, i);
    const bool is_kv = have && j->from[i] != MZ_UNIT_DROPPED;
    const bool queue_full = L->aio && L->n_inflight >= L->depth;
    const bool take = !failed && ready && !(queue_full && is_kv);
    if (take) j->sto_next++;
    *seen_alloc = j->n_mapped;
    pthread_mutex_unlock(&j->mu);
    if (failed) {
        storage_drain(j, L);
        return JOB_DONE;
    }
    if (!take) {
        /* Nothing to start now: wait for a read in flight, if any. (A weight
         * block is read synchronously through the lane's model-file reader;
         * chunk reads in flight go on meanwhile.) */
        if (L->n_inflight == 0) return have ? JOB_BLOCKED : JOB_DONE;
        mz_status st = storage_reap_one(j, L, true);
        if (st) storage_drain(j, L);
        a->busy += mz_time_ms() - t0;
        return st ? JOB_DONE : JOB_PROGRESS;
    }
    mz_unit_state from = j->from[i];
    job_delay(j, &a->rng);
    mz_unit *u = j->units[i];
    char nm[64];
    if (!mz_unit_claim(u, from)) {
        char msg[200];
        snprintf(msg, sizeof msg, "cannot restore %s: it is busy", mm_unit_name(u, nm, sizeof nm));
        job_fail(j, MZ_E_INVAL, msg);
        storage_drain(j, L);
        return JOB_DONE;
    }
    if (is_kv && L->aio) {
        struct sto_req *r = NULL;
        for (int q = 0; q < L->depth && !r; q++)
            if (!L->req[q].busy) r = &L->req[q];
        MZ_ASSERT(r);
        r->busy = true;
        r->i = i;
        bool raw = from == MZ_UNIT_STORED_RAW;
        r->item = (mz_swap_item){.buf = raw ? u->buf : r->scratch,
                                 .len = raw ? u->bytes : mm->scratch_cap,
                                 .slot = u->slot};
        L->n_inflight++;
        /* A request refused up front is still reaped, with its error. */
        (void)mz_swap_aio_submit_read(L->aio, &r->item);
        a->busy += mz_time_ms() - t0;
        return JOB_PROGRESS;
    }
    mz_status s = storage_read_sync(j, L, u, from);
    if (s) {
        char msg[512];
        snprintf(msg, sizeof msg, "cannot restore %s: %s", mm_unit_name(u, nm, sizeof nm),
                 mz_last_error());
        mz_unit_release_pages(u);
        mz_unit_settle(u, from);
        job_fail(j, s, msg);
        storage_drain(j, L);
        return JOB_DONE;
    }
    if (from != MZ_UNIT_DROPPED) {
        pthread_mutex_lock(&mm->lock);
        if (u->slot != u->clean) mm_swap_slot_free(mm, u->slot); /* [store] a clean copy stays */
        u->slot = 0;
        pthread_mutex_unlock(&mm->lock);
    }
    job_settled(j, i, u);
    a->busy += mz_time_ms() - t0;
    return JOB_PROGRESS;
}

/* Drops the decoded prefix of the stack's items from its top and settles
 * their units. Caller holds mm->lock. */
static void mem_drop_decoded(rjob *j)
{
    mz_mem *mm = j->mm;
    while (j->mem_dropped < j->n_mem && j->mem_dropped < j->mem_pin && j->mem_done[j->mem_dropped]) {
        mz_status s = mz_compstack_drop_top(mm->stack);
        MZ_ASSERT(s == MZ_OK);
        (void)s;
        size_t i = j->mem_unit[j->mem_dropped++];
        job_settled(j, i, j->units[i]);
    }
}

/* Item k was decoded into its claimed unit u with status s (a lane's or the
 * pass's, mm_job_take): on success it joins the decoded prefix and the
 * stack drops what it can; on failure the unit goes back, its item intact,
 * the job stops, and msg (cap bytes) says why. */
static mz_status mem_item_decoded(rjob *j, size_t k, mz_unit *u, mz_status s, char *msg, size_t cap)
{
    mz_mem *mm = j->mm;
    if (s) {
        char nm[64];
        snprintf(msg, cap, "cannot restore %s: decoding from the compressed stack failed: %s",
                 mm_unit_name(u, nm, sizeof nm), mz_last_error());
        mz_unit_release_pages(u);
        mz_unit_settle(u, MZ_UNIT_COMPRESSED);
        job_fail(j, s, msg);
        return s;
    }
    pthread_mutex_lock(&mm->lock);
    j->mem_done[k] = 1;
    mem_drop_decoded(j);
    pthread_mutex_unlock(&mm->lock);
    return MZ_OK;
}

static int job_mem_step(rjob *j, job_act *a, size_t *seen_alloc)
{
    mz_mem *mm = j->mm;
    pthread_mutex_lock(&j->mu);
    if (!j->failed && j->mem_next < j->n_mem && j->mem_taken[j->mem_next]) {
        j->mem_next++; /* the forward pass decodes it (mm_job_take) */
        pthread_mutex_unlock(&j->mu);
        return JOB_PROGRESS;
    }
    const bool failed = j->failed, have = j->mem_next < j->n_mem;
    const size_t k = j->mem_next;
    const size_t i = have ? j->mem_unit[k] : 0;
    const bool ready = have && job_allocated(j, i);
    if (!failed && ready) j->mem_next++;
    *seen_alloc = j->n_mapped;
    pthread_mutex_unlock(&j->mu);
    if (failed || !have) return JOB_DONE;
    if (!ready) return JOB_BLOCKED;
    double t0 = mz_time_ms();
    job_delay(j, &a->rng);
    mz_unit *u = j->units[i];
    char nm[64];
    pthread_mutex_lock(&mm->lock);
    bool claimed = mz_unit_claim(u, MZ_UNIT_COMPRESSED);
    pthread_mutex_unlock(&mm->lock);
    if (!claimed) {
        char msg[200];
        snprintf(msg, sizeof msg, "cannot restore %s: it is busy", mm_unit_name(u, nm, sizeof nm));
        job_fail(j, MZ_E_INVAL, msg);
        return JOB_DONE;
    }
    /* The item's view stays valid: only the memory lanes drop items during
     * the job, and only after their item was decoded (mem_drop_decoded). */
    const mz_compstack_view *v = &j->mem_items[k];
    mz_status s = j->fail_mem_item == k + 1
                      ? mz_fail(MZ_E_CORRUPT, "test: item %zu fails", k)
                      : mz_codec_decode(u->enc, v->data, v->len, (mz_f16 *)u->buf, mm->n_values);
    char msg[512];
    if (mem_item_decoded(j, k, u, s, msg, sizeof msg)) return JOB_DONE;
    a->busy += mz_time_ms() - t0;
    return JOB_PROGRESS;
}

/* A storage lane's buffers, read queue and model-file reader; at the end of
 * its activity (a job that goes on after its request keeps none). */
static void lane_release(rjob *j, sto_lane *L)
{
    MZ_ASSERT(L->n_inflight == 0);
    if (L->scratch) mz_pages_free(L->scratch, j->mm->scratch_cap);
    L->scratch = NULL;
    for (int q = 0; q < STO_LANE_DEPTH_MAX; q++) {
        if (L->req[q].scratch) mz_pages_free(L->req[q].scratch, j->mm->scratch_cap);
        L->req[q].scratch = NULL;
    }
    if (L->aio) mz_swap_aio_free(L->aio);
    L->aio = NULL;
    if (L->own_dfile) mz_dfile_close(L->dfile);
    L->dfile = NULL;
    L->own_dfile = false;
}

/* One restore thread: runs the activities of its mask in turn, one step
 * each, and sleeps only when every unfinished one is blocked on
 * allocation (which then runs on another thread). */

static void *job_thread_main(void *arg)
{
    job_thread *t = arg;
    rjob *j = t->j;
    static int (*const steps[ACT_COUNT])(rjob *, job_act *, size_t *) = {
        job_alloc_step, job_storage_step, job_mem_step};
    static const uint64_t salt[ACT_COUNT] = {0xa11c, 0x5707, 0x3e3};
    job_act acts[ACT_COUNT];
    for (int k = 0; k < ACT_COUNT; k++)
        acts[k] = (job_act){.kind = k, .rng = j->seed ^ salt[k] ^ ((uint64_t)(t - j->thr) << 20),
                            .done = !(t->mask & (1u << k))};
    acts[ACT_STORAGE].lane = t->lane >= 0 ? &j->lanes[t->lane] : NULL;
    MZ_ASSERT(acts[ACT_STORAGE].done || acts[ACT_STORAGE].lane);
    /* Not before the last thread is created: creating one maps its stack,
     * which takes the process's mmap lock for writing and would queue
     * behind every pre-fault in flight (MADV_POPULATE_WRITE holds it for
     * reading), a few ms for each thread. */
    pthread_mutex_lock(&j->mu);
    while (!j->started) pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
    for (;;) {
        bool progress = false, pending = false;
        size_t seen = SIZE_MAX;
        for (int k = 0; k < ACT_COUNT; k++) {
            if (acts[k].done) continue;
            /* A pre-faulting thread of a capped split keeps to allocation
             * (which never blocks) until every unit's allocation is
             * claimed: the loaders on the other threads wait for it. */
            if (k != ACT_ALLOC && t->alloc_first && !acts[ACT_ALLOC].done) {
                pending = true;
                continue;
            }
            size_t sa = SIZE_MAX;
            int r = steps[k](j, &acts[k], &sa);
            if (r == JOB_DONE) {
                acts[k].done = true;
                if (k == ACT_STORAGE) lane_release(j, acts[k].lane);
            }
            else if (r == JOB_PROGRESS) progress = true;
            else seen = MZ_MIN(seen, sa);
            pending |= !acts[k].done;
        }
        if (!pending) break;
        if (progress) continue;
        /* Every unfinished activity waits for the allocation thread. */
        pthread_mutex_lock(&j->mu);
        while (j->n_mapped == seen && !j->failed) pthread_cond_wait(&j->cv, &j->mu);
        pthread_mutex_unlock(&j->mu);
    }
    pthread_mutex_lock(&j->mu);
    for (int k = 0; k < ACT_COUNT; k++)
        if (t->mask & (1u << k)) j->act_ms[k] += acts[k].busy;
    pthread_mutex_unlock(&j->mu);
    job_worker_exit(j);
    return NULL;
}

static void job_free(rjob *j)
{
    if (!j) return;
    free(j->units);
    free(j->from);
    free(j->kv_idx);
    free(j->loaded);
    free(j->mapped);
    free(j->alloc_claimed);
    free(j->sto_list);
    free(j->mem_item);
    free(j->mem_taken);
    free(j->mem_items);
    free(j->mem_unit);
    free(j->mem_done);
    free(j->th);
    free(j->thr);
    for (int l = 0; j->lanes && l < j->n_lanes; l++) lane_release(j, &j->lanes[l]);
    free(j->lanes);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

mz_status mz_mem_restore_begin(mz_mem *mm, const mz_restore_job_params *p)
{
    mz_mem_restore_finish(mm);
    MZ_ASSERT(!mm->job);
    memset(&mm->last, 0, sizeof mm->last);
    mm->last_first_compute_ms = mm->last_ready_ms = 0;
    mm_sync_kv(mm);
    rjob *j = mz_calloc(1, sizeof *j);
    if (!j) return mz_fail(MZ_E_NOMEM, "out of memory starting the restore workers");
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->mm = mm;
    j->overlap_alloc = p ? p->overlap_alloc : true;
    j->delay_us_max = p ? p->delay_us_max : 0;
    j->fail_mem_item = p ? p->fail_mem_item : 0;
    j->seed = p ? p->seed : 0;
    j->t_begin = mz_time_ms();
    j->first_compute_ms = -1;
    j->take_pos = SIZE_MAX;
    size_t cap = (size_t)mm->n_layer * (1 + mm->max_chunks);
    j->units = mz_calloc(MZ_MAX(cap, 1), sizeof *j->units);
    j->from = mz_calloc(MZ_MAX(cap, 1), sizeof *j->from);
    j->loaded = mz_calloc(MZ_MAX(cap, 1), 1);
    j->mapped = mz_calloc(MZ_MAX(cap, 1), 1);
    j->alloc_claimed = mz_calloc(MZ_MAX(cap, 1), 1);
    j->kv_idx = mz_calloc(MZ_MAX((size_t)mm->n_layer * mm->max_chunks, 1), sizeof *j->kv_idx);
    if (!j->units || !j->from || !j->loaded || !j->mapped || !j->alloc_claimed || !j->kv_idx) {
        job_free(j);
        return mz_fail(MZ_E_NOMEM, "out of memory starting the restore workers");
    }
    bool any_dropped = false, any_stored = false;
    for (size_t k = 0; k < (size_t)mm->n_layer * mm->max_chunks; k++) j->kv_idx[k] = SIZE_MAX;
    for (int l = 0; l < mm->n_layer; l++) {
        mz_unit *w = &mm->wt->units[l];
        mz_unit_state st = mz_unit_state_get(w);
        if (st == MZ_UNIT_DROPPED) {
            j->units[j->n] = w;
            j->from[j->n++] = st;
            any_dropped = true;
            j->n_storage++;
        }
        for (size_t c = 0; c < mm->kv->n_chunks; c++) {
            mz_unit *u = kv_unit(mm, l, c);
            st = mz_unit_state_get(u);
            if (st == MZ_UNIT_RESIDENT || st == MZ_UNIT_ABSENT) continue;
            MZ_ASSERT(st != MZ_UNIT_BUSY);
            /* Dead for attention (policy.h): stays stored, and no step of
             * this request waits for it (acquire starts at the window). */
            if (mm_kv_stored_dead(mm, l, c, st)) continue;
            j->kv_idx[(size_t)l * mm->max_chunks + c] = j->n;
            j->units[j->n] = u;
            j->from[j->n++] = st;
            if (st == MZ_UNIT_COMPRESSED) j->n_mem++;
            else {
                j->n_storage++;
                any_stored = true;
            }
        }
    }
    mm->last.n_units = j->n;
    mm->last.n_storage_units = j->n_storage;
    mm->last.n_mem_units = j->n_mem;
    if (j->n == 0) {
        job_free(j);
        return MZ_OK; /* nothing to do: acquire_layer sees no job */
    }
    /* The split (n_restore_threads): the request's, else the profile's for
     * this many compute threads and CPUs; of them, as many pre-fault as the
     * profile's pre-fault table says still helps (the request's count in
     * tests and ablations). Who runs what: mz_restore_split_plan. Lanes
     * are divided by bytes: a dropped weight block is tens of MB to read
     * and hash, a KV chunk well under one. */
    int nt = p && p->n_threads >= 1 && p->n_threads <= MZ_RESTORE_THREADS_MAX
                 ? p->n_threads
                 : mz_profile_restore_threads(&mm->prof, p ? p->n_compute : 0);
    int npf = p && p->n_prefault >= 1 ? MZ_MIN(p->n_prefault, nt)
                                      : mz_profile_prefault_threads(&mm->prof, nt);
    double sto_bytes = 0, mem_bytes = 0;
    for (size_t i = 0; i < j->n; i++) {
        if (j->from[i] != MZ_UNIT_COMPRESSED) sto_bytes += (double)j->units[i]->bytes;
        else mem_bytes += (double)j->units[i]->bytes;
    }
    mz_restore_split split;
    mz_restore_split_plan(nt, npf, sto_bytes, mem_bytes, &split);
    int n_sto_lanes = split.n_sto_lanes;
    j->n_lanes = MZ_MAX(n_sto_lanes, 1);
    j->lanes = mz_calloc((size_t)j->n_lanes, sizeof *j->lanes);
    j->th = mz_calloc((size_t)nt, sizeof *j->th);
    j->thr = mz_calloc((size_t)nt, sizeof *j->thr);
    j->sto_list = mz_calloc(MZ_MAX(j->n_storage, 1), sizeof *j->sto_list);
    j->mem_items = mz_calloc(MZ_MAX(j->n_mem, 1), sizeof *j->mem_items);
    j->mem_unit = mz_calloc(MZ_MAX(j->n_mem, 1), sizeof *j->mem_unit);
    j->mem_done = mz_calloc(MZ_MAX(j->n_mem, 1), 1);
    j->mem_item = mz_calloc(j->n, sizeof *j->mem_item);
    j->mem_taken = mz_calloc(MZ_MAX(j->n_mem, 1), 1);
    j->mem_pin = SIZE_MAX;
    if (!j->lanes || !j->th || !j->thr || !j->sto_list || !j->mem_items || !j->mem_unit ||
        !j->mem_done || !j->mem_item || !j->mem_taken) {
        job_free(j);
        return mz_fail(MZ_E_NOMEM, "out of memory starting the restore workers");
    }
    for (size_t i = 0, k = 0; i < j->n; i++)
        if (j->from[i] != MZ_UNIT_COMPRESSED) j->sto_list[k++] = i;
    /* Views of the stack's items from its top: every compressed unit is in
     * the job, so the stack holds exactly n_mem items. */
    pthread_mutex_lock(&mm->lock);
    for (size_t i = 0; i < j->n; i++) j->mem_item[i] = SIZE_MAX;
    size_t n_items = mz_compstack_peek_from_top(mm->stack, j->n_mem, j->mem_items);
    MZ_ASSERT(n_items == j->n_mem && mz_compstack_count(mm->stack) == j->n_mem);
    (void)n_items;
    for (size_t k = 0; k < j->n_mem; k++) {
        mz_unit *u = unit_by_tag(mm, j->mem_items[k].tag);
        size_t i = j->kv_idx[(size_t)u->layer * mm->max_chunks + (size_t)u->chunk];
        MZ_ASSERT(i != SIZE_MAX && j->from[i] == MZ_UNIT_COMPRESSED);
        j->mem_unit[k] = i;
        j->mem_item[i] = k;
    }
    pthread_mutex_unlock(&mm->lock);

    mz_status s = MZ_OK;
    if (any_dropped) {
        pthread_mutex_lock(&mm->lock);
        s = mm_ensure_dfile(mm);
        pthread_mutex_unlock(&mm->lock);
        j->lanes[0].dfile = mm->dfile;
        for (int l = 1; l < j->n_lanes && !s; l++) {
            if ((s = mm_open_dfile(mm, &j->lanes[l].dfile)))
                mz_fail_prefix(s, "cannot open the model file %s", mm->model->path);
            j->lanes[l].own_dfile = !s;
        }
    }
    if (!s && any_stored) {
        /* The profile's requests in flight, shared among the lanes; a unit
         * is one or a few requests. */
        size_t io_bytes;
        int qd;
        mz_profile_io_shape(&mm->prof, &io_bytes, &qd);
        int lane_qd = MZ_MAX(1, (qd + j->n_lanes - 1) / j->n_lanes);
        for (int l = 0; l < j->n_lanes && !s; l++) {
            sto_lane *L = &j->lanes[l];
            L->depth = MZ_MIN(MZ_MAX(lane_qd, 2), STO_LANE_DEPTH_MAX);
            L->scratch = mz_pages_alloc(mm->scratch_cap);
            if (!L->scratch) {
                s = mz_fail(MZ_E_NOMEM, "out of memory starting the restore workers");
                break;
            }
            /* Reads in flight need their own buffers; without them (or
             * without the queue) the lane reads one unit at a time. */
            bool ok = mz_swap_aio_init(mm->swap, lane_qd, &L->aio) == MZ_OK;
            for (int q = 0; ok && q < L->depth; q++)
                ok = (L->req[q].scratch = mz_pages_alloc(mm->scratch_cap)) != NULL;
            if (!ok && L->aio) {
                mz_swap_aio_free(L->aio);
                L->aio = NULL;
            }
        }
    }
    if (s) {
        job_free(j);
        return s;
    }
    /* Every unit's range is made writable here, in one pass, rather than
     * by the allocating threads: a protection change takes the process's
     * mmap lock for writing and would stall every concurrent page fault —
     * with it, two threads pre-faulted no faster than one. The ranges stay
     * unpopulated (the allocating threads' work) and unread: compute waits
     * for RESIDENT, and restore_end closes those that were not loaded. */
    for (; j->n_opened < j->n; j->n_opened++)
        if ((s = mz_unit_map_pages(j->units[j->n_opened]))) break;
    if (s) {
        char nm[64];
        mz_fail_prefix(s, "cannot restore %s", mm_unit_name(j->units[j->n_opened], nm, sizeof nm));
        for (size_t i = 0; i < j->n_opened; i++) mz_unit_release_pages(j->units[i]);
        job_free(j);
        return s;
    }
    /* The memory path empties stack segments while the others fault pages
     * in: their unmapping waits for restore_end. */
    pthread_mutex_lock(&mm->lock);
    mz_compstack_defer_unmap(mm->stack, true);
    pthread_mutex_unlock(&mm->lock);
    for (int t = 0; t < nt; t++)
        j->thr[t] = (job_thread){.j = j, .mask = split.mask[t], .lane = split.lane[t],
                                 .alloc_first = split.alloc_first[t]};
    j->n_threads = nt;
    j->n_prefault = split.n_prefault;
    /* The storage lead from 4 threads on (lanes): twice the storage lanes'
     * units ahead, on up to half the pre-faulting threads. Below 4 threads
     * allocation stays in forward order. */
    if (nt >= 4 && split.n_sto_lanes > 0) {
        j->sto_lead = 2 * (size_t)split.n_sto_lanes;
        j->sto_allocating_max = MZ_MAX(1, split.n_prefault / 2);
    }
    j->n_running = nt;
    for (int t = 0; t < nt; t++) {
        int rc = pthread_create(&j->th[t], NULL, job_thread_main, &j->thr[t]);
        if (rc) {
            job_fail(j, MZ_E_NOMEM, "cannot start a restore worker thread");
            pthread_mutex_lock(&j->mu);
            j->n_running -= nt - t;
            pthread_mutex_unlock(&j->mu);
            break;
        }
        j->n_th++;
    }
    pthread_mutex_lock(&j->mu);
    j->started = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    mm->job = j;
    return MZ_OK;
}

/* Owner thread: waits until u is RESIDENT or the job failed / ended. */
mz_status mm_job_wait_unit(struct rjob *j, mz_unit *u)
{
    if (mz_unit_state_get(u) == MZ_UNIT_RESIDENT) return MZ_OK;
    double t0 = mz_time_ms();
    pthread_mutex_lock(&j->mu);
    while (mz_unit_state_get(u) != MZ_UNIT_RESIDENT && !j->failed && j->n_running > 0)
        pthread_cond_wait(&j->cv, &j->mu);
    bool failed = j->failed;
    pthread_mutex_unlock(&j->mu);
    j->stall_ms += mz_time_ms() - t0;
    if (mz_unit_state_get(u) == MZ_UNIT_RESIDENT) return MZ_OK;
    return failed ? mz_fail(j->err, "%s", j->errmsg) : MZ_OK;
}

static size_t job_mem_item_of(const rjob *j, const mz_unit *u)
{
    if (u->kind != MZ_UNIT_KV) return SIZE_MAX;
    size_t i = j->kv_idx[(size_t)u->layer * j->mm->max_chunks + (size_t)u->chunk];
    return i == SIZE_MAX ? SIZE_MAX : j->mem_item[i];
}

void mm_job_count_lent(struct rjob *j, size_t n) { j->n_lent += n; }

bool mm_job_lendable(const struct rjob *j, const mz_unit *u) { return job_mem_item_of(j, u) != SIZE_MAX; }

bool mm_job_lend(struct rjob *j, mz_unit *u, mz_compstack_view *out)
{
    mz_mem *mm = j->mm;
    const size_t k = job_mem_item_of(j, u);
    if (k == SIZE_MAX) return false;
    pthread_mutex_lock(&mm->lock);
    /* Not yet settled RESIDENT means not yet dropped: both happen under
     * mm->lock (mem_drop_decoded), so the item is still on the stack. */
    bool lent = mz_unit_state_get(u) != MZ_UNIT_RESIDENT;
    if (lent) {
        MZ_ASSERT(k >= j->mem_dropped);
        *out = j->mem_items[k];
        if (k < j->mem_pin) j->mem_pin = k;
    }
    pthread_mutex_unlock(&mm->lock);
    return lent;
}

mz_status mm_job_take(struct rjob *j, mz_unit *u, size_t pos0)
{
    mz_mem *mm = j->mm;
    const size_t k = job_mem_item_of(j, u);
    if (k == SIZE_MAX) return MZ_AGAIN;
    const size_t i = j->mem_unit[k];
    pthread_mutex_lock(&j->mu);
    if (j->failed || k < j->mem_next || j->mem_taken[k]) {
        pthread_mutex_unlock(&j->mu);
        return MZ_AGAIN; /* a lane has it: wait for it as usual */
    }
    j->mem_taken[k] = 1;
    j->take_pos = MZ_MIN(j->take_pos, pos0);
    /* Its pages: faulted here unless a pre-faulting thread has them (then
     * wait for it: its fallback writes every page). */
    const bool alloc_here = !j->alloc_claimed[i];
    if (alloc_here) j->alloc_claimed[i] = 1;
    while (!alloc_here && !j->mapped[i]) pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_lock(&mm->lock);
    bool claimed = mz_unit_claim(u, MZ_UNIT_COMPRESSED);
    pthread_mutex_unlock(&mm->lock);
    MZ_ASSERT(claimed); /* no lane claims a taken item; eviction waits for the request */
    (void)claimed;
    const mz_compstack_view *v = &j->mem_items[k];
    mz_status s = mz_codec_decode(u->enc, v->data, v->len, (mz_f16 *)u->buf, mm->n_values);
    pthread_mutex_lock(&j->mu);
    if (alloc_here) {
        j->mapped[i] = 1;
        j->n_mapped++;
        pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
    /* Decoded, not yet settled: RESIDENT when the stack's top reaches its
     * item (mem_drop_decoded). Until then it stays BUSY, which only this
     * pass (its writer) touches and later passes wait for. */
    char msg[512];
    if (mem_item_decoded(j, k, u, s, msg, sizeof msg)) return mz_fail(s, "%s", msg);
    return MZ_OK;
}

void mm_job_end_lending(struct rjob *j)
{
    mz_mem *mm = j->mm;
    pthread_mutex_lock(&mm->lock);
    if (j->mem_pin != SIZE_MAX) {
        j->mem_pin = SIZE_MAX;
        mem_drop_decoded(j);
    }
    pthread_mutex_unlock(&mm->lock);
}

void mm_job_note_compute(struct rjob *j)
{
    if (j->first_compute_ms < 0) j->first_compute_ms = mz_time_ms();
}

mz_status mz_mem_restore_wait(mz_mem *mm)
{
    rjob *j = mm->job;
    if (!j) return MZ_OK;
    double t0 = mz_time_ms();
    pthread_mutex_lock(&j->mu);
    while (j->n_running > 0 && !j->failed) pthread_cond_wait(&j->cv, &j->mu);
    bool failed = j->failed;
    pthread_mutex_unlock(&j->mu);
    j->stall_ms += mz_time_ms() - t0;
    return failed ? mz_fail(j->err, "%s", j->errmsg) : MZ_OK;
}

mz_status mz_mem_restore_end(mz_mem *mm, mz_restore_timings *out)
{
    rjob *j = mm->job;
    mz_status s = MZ_OK;
    if (j) {
        for (int t = 0; t < j->n_th; t++) pthread_join(j->th[t], NULL);
        /* Decoded but not yet dropped from the stack (a failed item above
         * them): back to COMPRESSED, their items intact. */
        for (size_t k = j->mem_dropped; k < j->n_mem; k++) {
            if (!j->mem_done[k]) continue;
            mz_unit_settle(j->units[j->mem_unit[k]], MZ_UNIT_COMPRESSED);
            /* A chunk the pass wrote its tokens into goes back to its item,
             * which lacks them: every item above it was decoded by the pass
             * or a lane already, so this takes a failure the pass did not
             * see — never silent: the context must be cut back. */
            if (j->mem_taken[k]) mm->kv_lost_pos = MZ_MIN(mm->kv_lost_pos, j->take_pos);
        }
        /* Allocated but never loaded (a failure stopped the loaders): give
         * the pages back; the unit is still in its evicted state. */
        for (size_t i = 0; i < j->n_opened; i++)
            if (!j->loaded[i] && mz_unit_state_get(j->units[i]) == j->from[i])
                mz_unit_release_pages(j->units[i]);
        if (j->failed) s = mz_fail(j->err, "%s", j->errmsg);
        pthread_mutex_lock(&mm->lock);
        mz_compstack_defer_unmap(mm->stack, false);
        pthread_mutex_unlock(&mm->lock);
        mm->last.alloc_ms = j->act_ms[ACT_ALLOC];
        mm->last.storage_ms = j->act_ms[ACT_STORAGE];
        mm->last.mem_ms = j->act_ms[ACT_MEM];
        mm->last.n_restore_threads = j->n_threads;
        mm->last.stall_ms = j->stall_ms;
        mm->last.restore_ms = j->t_ready - j->t_begin;
        mm->last.n_ready = j->n_ready;
        mm->last.n_lent = j->n_lent;
        mm->last_first_compute_ms = j->first_compute_ms;
        mm->last_ready_ms = j->t_ready;
        mm->job = NULL;
        job_free(j);
    }
    if (out) *out = mm->last;
    return s;
}

bool mz_mem_restore_detach(mz_mem *mm, mz_restore_timings *out)
{
    rjob *j = mm->job;
    if (!j) return false;
    pthread_mutex_lock(&j->mu);
    /* Only the memory path may outlive the request: it touches this
     * session's units and stack alone, whereas the storage lanes use the
     * engine's model-file reader and swap file, which the next session's
     * request may use as soon as this one's compute section closes. The
     * pass waited for every stored unit, so they are loaded unless the job
     * failed. */
    bool ok = !j->failed && j->n_running > 0 && j->n_ready < j->n;
    for (size_t k = 0; ok && k < j->n_storage; k++)
        ok = mz_unit_state_get(j->units[j->sto_list[k]]) == MZ_UNIT_RESIDENT;
    pthread_mutex_unlock(&j->mu);
    if (!ok) return false;
    j->detached = true;
    mm->last.n_restore_threads = j->n_threads;
    mm->last.stall_ms = j->stall_ms;
    mm->last.restore_ms = 0; /* not yet: mz_mem_restore_finish */
    mm->last.n_lent = j->n_lent;
    mm->last_first_compute_ms = j->first_compute_ms;
    if (out) *out = mm->last;
    return true;
}

void mz_mem_restore_finish(mz_mem *mm)
{
    if (!mm->job || !mm->job->detached) return;
    /* A failure leaves the failed unit (and those after it) evicted with
     * their stack items intact: the next pass that needs them restores
     * them itself and reports it. */
    mz_restore_timings keep = mm->last;
    mz_status s = mz_mem_restore_end(mm, NULL);
    (void)s;
    mm->last.prefill_ms = keep.prefill_ms;
    mm->last.ttft_ms = keep.ttft_ms;
}

void mz_mem_restore_reap(mz_mem *mm)
{
    rjob *j = mm->job;
    if (!j || !j->detached) return;
    pthread_mutex_lock(&j->mu);
    bool done = j->n_running == 0;
    pthread_mutex_unlock(&j->mu);
    if (done) mz_mem_restore_finish(mm);
}

bool mz_mem_restore_running(const mz_mem *mm) { return mm->job != NULL; }
bool mz_mem_restore_detached(const mz_mem *mm) { return mm->job && mm->job->detached; }
int mz_mem_restore_threads(const mz_mem *mm) { return mm->job ? mm->job->n_threads : 0; }
void mz_mem_last_restore(const mz_mem *mm, mz_restore_timings *out) { *out = mm->last; }
void mz_mem_set_last_restore(mz_mem *mm, const mz_restore_timings *t) { mm->last = *t; }

void mz_mem_restore_order_probe(const mz_mem *mm, double *first_compute_ms, double *ready_ms)
{
    *first_compute_ms = mm->last_first_compute_ms;
    *ready_ms = mm->last_ready_ms;
}
