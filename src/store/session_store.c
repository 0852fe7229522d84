/*
 * session_store.c — a session's place in the store: the write-behind worker
 * that gives full KV chunks their clean copies and keeps the manifest
 * current, and resume (contract: include/mzcache.h, "session store").
 *
 * Consistency. A manifest names tokens [0, n) and the records of chunks
 * [0, k) with k <= (n - 1) / 256. It is assembled under att->mu from the
 * token snapshot and the chunks' clean records: a chunk is clean only while
 * its bytes are current (mz_mem_kv_truncate clears it, and the worker never
 * gives a copy to a chunk at or beyond att->full, which a truncation lowers
 * first), so every chunk it names was computed from exactly the tokens it
 * names. The data file is fsynced before the manifest that names new chunks
 * (batch, always), and the manifest replaces the old one by rename: a kill
 * at any instant leaves the previous or the next consistent manifest.
 * Records it names are never freed while clean, and a record overwritten
 * anyway (after a truncation) fails the read's sequence/checksum check.
 * The serve checkpoint (chunks = false) writes no chunk and fsyncs no
 * chunk record: with chunk records pending an fsync its manifest names only
 * chunks [0, durable_k), whose records were durable at the last fsync.
 */
#define _GNU_SOURCE
#include "store.h"

#include "../codec/codec.h"
#include "../engine/engine.h"
#include "../io/io.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct mz_sstore {
    mz_store_t *st;
    mz_ctx_parts parts;        /* c's memory manager, KV cache and shape */
    char id[MZ_SESSION_ID_MAX + 1];
    mz_swapfile_t *sf;         /* the data file (owned by the session's manager) */
    pthread_mutex_t mu;        /* tok, n_tok, stop, kick */
    pthread_cond_t cv;
    mz_token *tok;             /* [cap] snapshot of the session's tokens */
    size_t cap, n_tok;
    _Atomic size_t full;       /* chunks [0, full) are full and committed */
    bool stop, kick;
    bool rescan;               /* a truncation: clean_upto is void */
    pthread_t th;
    bool th_started;
    pthread_mutex_t pass_lock; /* one pass at a time; the fields below */
    size_t last_k, last_n;
    size_t clean_upto;         /* chunks [0, clean_upto) are clean in every layer */
    bool written_once, data_unsynced;
    /* chunks_unsynced: a full chunk's record was written since the data
     * file's last fsync. durable_k: chunks [0, durable_k) have durable
     * clean records (set at each data fsync, lowered by a truncation), so a
     * manifest may name them without an fsync. */
    bool chunks_unsynced;
    size_t durable_k;
    bool pending;              /* under mu: a manifest is due (timed retry) */
    bool yielded;              /* under mu: the last pass left chunks to a quiet engine */
    double last_write_ms;
    uint64_t created_ns;
    mz_status last_err;        /* under mu: the last pass failed (retry in 1 s) */
    bool no_final;             /* tests: leave the store as a kill would */
    mz_manifest man;           /* scratch */
    size_t man_tok_cap, man_rec_cap;
    /* The tail (manifest.h): records of the partly filled chunk tail_chunk,
     * valid for its first tail_pos positions (0: no tail). Written only by
     * mz_session_sync, mz_session_checkpoint and the final pass, on the
     * owner thread, so no forward pass writes the chunk meanwhile.
     * tail_disk: the manifest on disk names these records, so they stay
     * until one that does not is written. A tail written while the full
     * chunks before it have no clean copy yet is staged (new_tail,
     * stage_chunk, stage_pos; 0: none): no manifest names it until the
     * write-behind has written those chunks; the first manifest that
     * names chunks [0, stage_chunk) names it too, and it becomes the tail.
     * Positions before stage_pos never change but by a truncation, which
     * cuts it like the tail. Under pass_lock. */
    mz_swap_slot *tail_slot, *new_tail; /* [n_layer] */
    size_t tail_chunk, tail_pos;
    size_t stage_chunk, stage_pos;
    bool tail_disk;
    size_t tail_cut;           /* under mu: lowest truncation since the last pass; SIZE_MAX none */
};

/* ---- the session's listener (engine.h; owner thread) ------------------------------------- */

static void on_free(void *ud);
static void on_append(void *ud, const mz_token *tokens, size_t n_tokens);
static void on_truncate(void *ud, size_t n_keep);
static const mz_ctx_listener store_listener = {
    .on_append = on_append, .on_truncate = on_truncate, .on_free = on_free};

/* c's attachment, or NULL when c is not stored. */
static struct mz_sstore *att_of(const mz_ctx_t *c) { return mz_ctx_listener_data(c, &store_listener); }

static void on_append(void *ud, const mz_token *tokens, size_t n_tokens)
{
    struct mz_sstore *a = ud;
    pthread_mutex_lock(&a->mu);
    size_t n = MZ_MIN(n_tokens, a->cap);
    if (n > a->n_tok) memcpy(a->tok + a->n_tok, tokens + a->n_tok, (n - a->n_tok) * sizeof *a->tok);
    a->n_tok = n;
    atomic_store(&a->full, n / MZ_KV_CHUNK_TOKENS);
    a->kick = true;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

static void on_truncate(void *ud, size_t n_keep)
{
    struct mz_sstore *a = ud;
    pthread_mutex_lock(&a->mu);
    if (n_keep < a->n_tok) a->n_tok = n_keep;
    if (n_keep < a->tail_cut) a->tail_cut = n_keep;
    atomic_store(&a->full, MZ_MIN(atomic_load(&a->full), n_keep / MZ_KV_CHUNK_TOKENS));
    a->rescan = true;
    a->kick = true;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

/* ---- one pass: write full chunks, then the manifest --------------------------------------- */

static bool grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return true;
    size_t nc = MZ_MAX(need, *cap * 2);
    void *np = realloc(*p, (nc ? nc : 1) * elem);
    if (!np) return false;
    *p = np;
    *cap = nc;
    return true;
}

static void tail_free(struct mz_sstore *a, mz_swap_slot *slots)
{
    for (int l = 0; l < a->parts.n_layer; l++)
        if (slots[l]) {
            mz_mem_store_slot_free(a->parts.mem, slots[l]);
            slots[l] = 0;
        }
}

static void stage_drop(struct mz_sstore *a)
{
    tail_free(a, a->new_tail);
    a->stage_pos = 0;
}

/* Cuts the tail (chunk, *pos) to the positions before token `cut`. */
static void tail_cut_to(size_t chunk, size_t *pos, size_t cut)
{
    size_t base = chunk * MZ_KV_CHUNK_TOKENS;
    if (*pos && cut < base + *pos) *pos = cut > base ? cut - base : 0;
}

/* Stages the tail of the first n tokens (the chunk of token n-1, its
 * positions before n-1) in new_tail, replacing a staged one; true when
 * written. The full chunks before it need no clean copy yet: the manifest
 * names it once they have one. Owner thread. */
static bool tail_write(struct mz_sstore *a, size_t n)
{
    const int L = a->parts.n_layer;
    if (n == 0) return false;
    size_t tc = (n - 1) / MZ_KV_CHUNK_TOKENS, p = n - 1 - tc * MZ_KV_CHUNK_TOKENS;
    if (p == 0) return false; /* nothing to keep */
    if (a->tail_pos && a->tail_chunk == tc && a->tail_pos >= p) return false; /* current */
    if (a->stage_pos && a->stage_chunk == tc && a->stage_pos >= p) return false; /* staged */
    stage_drop(a); /* no manifest names it */
    for (int l = 0; l < L; l++) {
        if (mz_mem_store_tail(a->parts.mem, l, tc, &a->new_tail[l]) != MZ_OK) {
            mz_clear_error(); /* an evicted tail chunk: the manifest goes without a new tail */
            tail_free(a, a->new_tail);
            return false;
        }
    }
    a->data_unsynced = true;
    a->stage_chunk = tc;
    a->stage_pos = p;
    return true;
}

/* Whether every layer of chunk ch has a clean record (written by a pass,
 * or imported at resume). */
static bool chunk_clean(struct mz_sstore *a, size_t ch)
{
    mz_swap_slot_info info;
    bool clean = true;
    for (int l = 0; l < a->parts.n_layer && clean; l++)
        clean = mz_mem_store_clean_info(a->parts.mem, l, ch, &info) == MZ_OK;
    mz_clear_error();
    return clean;
}

/* The engine counts as quiet this long after its last compute section:
 * longer than the gap between two tokens of a decode loop (sampling, a
 * socket write), short next to the pause between two requests. */
#define WB_QUIET_NS 2000000ull

/* A compute that never pauses for WB_QUIET_NS (back-to-back requests, one
 * long generation) would leave full chunks unwritten for as long as it
 * runs, and a kill would recompute them: once chunks have waited this long
 * for a quiet engine, the worker writes them anyway, beside the compute, at
 * its idle priority. Bounds what a kill under sustained load loses; tests
 * shorten it (mz_sstore_test_max_defer_ms). */
#define WB_MAX_DEFER_MS 10000.0
static _Atomic double wb_max_defer_ms = WB_MAX_DEFER_MS;

void mz_sstore_test_max_defer_ms(double ms) { atomic_store(&wb_max_defer_ms, ms); }

/* force: write the manifest even if only tokens changed within the interval.
 * tail: also stage the partly filled last chunk (owner thread only).
 * chunks: write the full chunks that have no clean copy yet; false: the
 * manifest names the chunks clean already and leaves the rest to the
 * worker (mz_session_checkpoint).
 * yield (the worker): stop writing chunks as soon as the engine computes;
 * the pass stays pending and the worker comes back once it is quiet. */
static mz_status pass(struct mz_sstore *a, bool force, bool tail, bool chunks, bool yield)
{
    mz_mem *mm = a->parts.mem;
    const int L = a->parts.n_layer;
    mz_status s = MZ_OK;
    pthread_mutex_lock(&a->pass_lock);
    bool pend = false; /* a manifest is still due */
    size_t full = atomic_load(&a->full);
    pthread_mutex_lock(&a->mu);
    if (a->rescan) a->clean_upto = 0; /* clean flags are only ever cleared by a truncation */
    a->rescan = false;
    size_t cut = a->tail_cut;
    a->tail_cut = SIZE_MAX;
    pthread_mutex_unlock(&a->mu);
    /* positions at and after a truncation point changed: the tails keep
     * only those before it */
    tail_cut_to(a->tail_chunk, &a->tail_pos, cut);
    tail_cut_to(a->stage_chunk, &a->stage_pos, cut);
    if (!a->stage_pos) stage_drop(a);
    if (cut != SIZE_MAX) a->durable_k = MZ_MIN(a->durable_k, cut / MZ_KV_CHUNK_TOKENS);
    size_t k = MZ_MIN(a->clean_upto, full);
    bool prefix = true;
    bool yielded = false;
    /* clean_upto starts at 0 after a resume or a truncation while chunks
     * below it may be clean (restored, or below the cut): the checkpoint,
     * which writes none, names those too; a manifest naming fewer would
     * make a kill recompute them (with a q8 store: raw, not the round trips
     * the session held) */
    while (!chunks && k < full && chunk_clean(a, k)) k++;
    for (size_t ch = k; chunks && ch < full && !s; ch++) {
        if (yield && !mz_engine_quiet(a->parts.engine, WB_QUIET_NS)) {
            yielded = true; /* the chunks from ch on wait for the next pass */
            break;
        }
        bool all = true;
        for (int l = 0; l < L; l++) {
            bool clean = false, wrote = false;
            s = mz_mem_store_chunk(mm, l, ch, &a->full, &clean, &wrote);
            if (s) break;
            if (wrote) a->data_unsynced = a->chunks_unsynced = true;
            all = all && clean;
        }
        if (!s && a->st->p.fsync == MZ_FSYNC_ALWAYS && a->data_unsynced) {
            s = mz_swapfile_sync(a->sf);
            if (!s) a->data_unsynced = a->chunks_unsynced = false;
        }
        if (prefix && all) k = ch + 1;
        else prefix = false;
    }
    if (s) {
        mz_fail_prefix(s, "session %s: write-behind", a->id);
        goto out;
    }
    a->clean_upto = k;
    if (yielded) goto out; /* the manifest too waits for the quiet engine */
    /* The manifest: at once when it names more chunks, else at most every
     * manifest_interval_ms. */
    pthread_mutex_lock(&a->mu);
    size_t n = a->n_tok;
    pthread_mutex_unlock(&a->mu);
    if (n == 0) goto out; /* nothing worth a manifest yet */
    size_t kmax = (n - 1) / MZ_KV_CHUNK_TOKENS;
    k = MZ_MIN(k, kmax);
    bool new_tail = tail && tail_write(a, n);
    /* a staged tail whose chunk filled up since is never named */
    if (a->stage_pos && a->stage_chunk != kmax) stage_drop(a);
    /* The request-side checkpoint (no chunks) does not fsync chunk records
     * the worker wrote since its last manifest: that would make the request
     * thread wait for their writeback. Its manifest then names only what is
     * durable already — chunks [0, durable_k) and the tail on disk — and the
     * worker's next manifest the rest, after its own fsync. */
    bool defer_sync = !chunks && a->chunks_unsynced && a->st->p.fsync != MZ_FSYNC_NONE;
    if (defer_sync) k = MZ_MIN(k, a->durable_k);
    bool stage_fits = !defer_sync && a->stage_pos && a->stage_chunk == k;
    bool tail_changed = new_tail || stage_fits || (a->tail_disk && !a->tail_pos);
    if (a->written_once && k == a->last_k && n == a->last_n && !tail_changed) goto out;
    if (!force && !tail_changed && a->written_once && k <= a->last_k &&
        mz_time_ms() - a->last_write_ms < (double)a->st->p.manifest_interval_ms) {
        pend = true;
        goto out;
    }
    if (!defer_sync && a->data_unsynced && a->st->p.fsync != MZ_FSYNC_NONE) {
        if ((s = mz_swapfile_sync(a->sf))) goto out;
        a->data_unsynced = a->chunks_unsynced = false;
    }
    /* every record written so far is durable (or needs no fsync): every
     * clean chunk's, also those the manifest may not name yet (the chunk of
     * the last token) */
    if (!defer_sync) a->durable_k = a->clean_upto;
    mz_manifest *m = &a->man;
    pthread_mutex_lock(&a->mu);
    n = a->n_tok; /* a truncation since: fewer tokens, and chunks only below it */
    k = MZ_MIN(k, n ? (n - 1) / MZ_KV_CHUNK_TOKENS : 0);
    /* a truncation since the pass began cuts the tails as above (a new
     * tail is written on the owner thread, which truncates) */
    tail_cut_to(a->tail_chunk, &a->tail_pos, a->tail_cut);
    tail_cut_to(a->stage_chunk, &a->stage_pos, a->tail_cut);
    if (!grow((void **)&m->tokens, &a->man_tok_cap, n, sizeof *m->tokens) ||
        !grow((void **)&m->recs, &a->man_rec_cap, (k + 1) * (size_t)L, sizeof *m->recs)) {
        pthread_mutex_unlock(&a->mu);
        s = mz_fail(MZ_E_NOMEM, "out of memory (manifest)");
        goto out;
    }
    memcpy(m->tokens, a->tok, n * sizeof *m->tokens);
    size_t got = 0;
    for (; got < k; got++) {
        bool ok = true;
        for (int l = 0; l < L && ok; l++)
            ok = mz_mem_store_clean_info(mm, l, got, &m->recs[got * (size_t)L + (size_t)l]) == MZ_OK;
        if (!ok) break;
    }
    pthread_mutex_unlock(&a->mu);
    mz_clear_error();
    /* The tail named: the staged one, else the current one, whichever
     * fits (the chunk after the named ones, ending before the last token). */
    size_t last = (n - 1) / MZ_KV_CHUNK_TOKENS;
    bool named_stage = !defer_sync && a->stage_pos && a->stage_chunk == got && got == last;
    const mz_swap_slot *ts = named_stage ? a->new_tail : a->tail_slot;
    size_t tp = named_stage ? a->stage_pos
                : a->tail_pos && a->tail_chunk == got && got == last ? a->tail_pos
                                                                     : 0;
    tp = MZ_MIN(tp, n - 1 - got * MZ_KV_CHUNK_TOKENS); /* the last token is always recomputed */
    for (int l = 0; tp && l < L; l++)
        if (mz_swapfile_slot_info(a->sf, ts[l], &m->recs[got * (size_t)L + (size_t)l]) != MZ_OK) tp = 0;
    mz_clear_error();
    m->n_tokens = n;
    m->n_chunks = got;
    m->tail_pos = tp;
    m->updated_ns = mz_store_now_ns();
    s = mz_store_write_manifest(a->st, m);
    if (!s) {
        a->written_once = true;
        a->last_k = got;
        a->last_n = n;
        pend = false;
        a->last_write_ms = mz_time_ms();
        /* records no manifest names any more go back to the file's free space */
        if (named_stage && tp) {
            tail_free(a, a->tail_slot);
            memcpy(a->tail_slot, a->new_tail, (size_t)L * sizeof *a->tail_slot);
            memset(a->new_tail, 0, (size_t)L * sizeof *a->new_tail);
            a->tail_chunk = a->stage_chunk;
            a->tail_pos = tp;
            a->stage_pos = 0;
        } else if (!tp) {
            tail_free(a, a->tail_slot);
            a->tail_pos = 0;
        }
        a->tail_disk = tp > 0;
        if (!tp) a->tail_pos = 0;
    }
out:
    if (s) {
        pend = true; /* retried at the next pass */

        mz_log(MZ_LOG_WARN, "%s", mz_last_error());
    }
    pthread_mutex_lock(&a->mu); /* the worker's wait reads them */
    a->pending = pend || yielded;
    a->yielded = yielded;
    a->last_err = s;
    pthread_mutex_unlock(&a->mu);
    pthread_mutex_unlock(&a->pass_lock);
    return s;
}

static void lower_priority(void)
{
    /* Write-behind never competes with a request. SCHED_IDLE, not only nice
     * 19: when the compute pool has a thread on every CPU, a nice-19 thread
     * still runs whole time slices on one of them, and every fork-join step
     * then waits for the worker it displaced (measured on 16 vCPUs, 16
     * threads: decode 47 % slower while the worker wrote); a waking thread of
     * any other policy preempts a SCHED_IDLE one at once. Nice 19 stays as
     * the fallback where SCHED_IDLE is refused. The I/O goes in the idle
     * class (ioprio_set; ignored where it is not available). A starved worker
     * delays nothing: mz_session_sync does what is left on the caller's
     * thread. */
    pid_t tid = (pid_t)syscall(SYS_gettid);
    (void)setpriority(PRIO_PROCESS, (id_t)tid, 19);
    struct sched_param none = {.sched_priority = 0};
    (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &none);
#ifdef SYS_ioprio_set
    (void)syscall(SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, tid, 3 << 13 /* IOPRIO_CLASS_IDLE */);
#endif
}

static void *worker_main(void *arg)
{
    struct mz_sstore *a = arg;
    lower_priority();
    double waiting_since_ms = 0; /* chunks have waited for a quiet engine since (0: none wait) */
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->stop && !a->kick) {
            if (a->pending || a->last_err) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                long ms = a->last_err ? 1000 : (long)a->st->p.manifest_interval_ms + 1;
                ts.tv_sec += ms / 1000;
                ts.tv_nsec += (ms % 1000) * 1000000L;
                if (ts.tv_nsec >= 1000000000L) {
                    ts.tv_sec++;
                    ts.tv_nsec -= 1000000000L;
                }
                if (pthread_cond_timedwait(&a->cv, &a->mu, &ts) == ETIMEDOUT) break;
            } else {
                pthread_cond_wait(&a->cv, &a->mu);
            }
        }
        /* Never beside a request: wait until the engine has been quiet for
         * WB_QUIET_NS (kicks meanwhile fold into the pass); a sleep, not the
         * condition, so the owner's per-token kicks do not wake it. */
        bool overdue = false;
        while (!a->stop && !mz_engine_quiet(a->parts.engine, WB_QUIET_NS)) {
            double now = mz_time_ms();
            if (!waiting_since_ms) waiting_since_ms = now;
            if (now - waiting_since_ms >= atomic_load(&wb_max_defer_ms)) {
                overdue = true;
                break;
            }
            pthread_mutex_unlock(&a->mu);
            nanosleep(&(struct timespec){.tv_nsec = 5000000L}, NULL);
            pthread_mutex_lock(&a->mu);
        }
        if (a->stop) break;
        a->kick = false;
        pthread_mutex_unlock(&a->mu);

        (void)pass(a, false, false, true, !overdue);
        pthread_mutex_lock(&a->mu);
        /* a pass that left chunks behind keeps the clock running */
        if (!a->yielded) waiting_since_ms = 0;
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* ---- attach / detach ------------------------------------------------------------------------ */

static void att_free(struct mz_sstore *a)
{
    if (!a) return;
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->pass_lock);
    free(a->tok);
    free(a->man.tokens);
    free(a->man.recs);
    free(a->tail_slot);
    free(a->new_tail);
    free(a);
}

/* Opens the data file as the session's swap file and makes the attachment
 * (worker not started). fresh: remove an old session of that id first. */
static mz_status attach(mz_ctx_t *c, mz_store_t *st, const char *id, bool fresh,
                        struct mz_sstore **out)
{
    *out = NULL;
    char pk[PATH_MAX], pm[PATH_MAX];
    mz_status s;
    if ((s = mz_store_path(st, id, ".kv", pk, sizeof pk)) ||
        (s = mz_store_path(st, id, ".mzs", pm, sizeof pm)))
        return s;
    const mz_ctx_parts cp = mz_ctx_get_parts(c);
    if (cp.mode != MZ_MODE_MZCACHE)
        return mz_fail(MZ_E_UNSUPPORTED, "session store: only mzcache-mode sessions are stored");
    if (cp.engine != st->e) return mz_fail(MZ_E_INVAL, "session store: another engine's session");
    if (att_of(c)) return mz_fail(MZ_E_INVAL, "session is stored already");
    if (mz_mem_swapfile(cp.mem))
        return mz_fail(MZ_E_INVAL, "session store: the session already has a swap file (store it "
                       "before its first eviction)");
    if (fresh) {
        s = mz_store_delete_kv(st, id);
        if (s == MZ_E_IO) return s; /* in use */
        mz_clear_error();
    }
    struct mz_sstore *a = mz_calloc(1, sizeof *a);
    if (!a) return MZ_E_NOMEM;
    a->st = st;
    a->parts = cp;
    snprintf(a->id, sizeof a->id, "%s", id);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    pthread_mutex_init(&a->pass_lock, NULL);
    a->cap = cp.n_ctx;
    a->tok = malloc(a->cap * sizeof *a->tok);
    a->tail_slot = calloc((size_t)cp.n_layer, sizeof *a->tail_slot);
    a->new_tail = calloc((size_t)cp.n_layer, sizeof *a->new_tail);
    a->tail_cut = SIZE_MAX;
    if (!a->tok || !a->tail_slot || !a->new_tail) {
        att_free(a);
        return mz_fail(MZ_E_NOMEM, "out of memory (session store)");
    }
    mz_swapfile_params sp = mz_swapfile_params_default();
    sp.flags = MZ_SWAP_PERSIST;
    sp.path = pk;
    if ((s = mz_swapfile_open(&sp, &a->sf))) {
        att_free(a);
        return mz_fail_prefix(s, "session %s", id);
    }
    mz_mem_use_store_file(cp.mem, a->sf, strcmp(st->codec, "raw") ? mz_codec_find(st->codec) : NULL);
    a->created_ns = mz_store_now_ns();
    mz_manifest *m = &a->man;
    m->model_id = st->model_id;
    m->tok_id = st->tok_id;
    snprintf(m->codec, sizeof m->codec, "%s", st->codec);
    m->n_layer = (uint32_t)cp.n_layer;
    m->chunk_bytes = cp.kv->chunk_bytes;
    m->created_ns = a->created_ns;
    snprintf(m->name, sizeof m->name, "%s", id);
    *out = a;
    return MZ_OK;
}

static mz_status start_worker(struct mz_sstore *a)
{
    if (pthread_create(&a->th, NULL, worker_main, a) != 0)
        return mz_fail(MZ_E_NOMEM, "cannot start the write-behind thread");
    a->th_started = true;
    return MZ_OK;
}

mz_status mz_session_store(mz_ctx_t *c, mz_store_t *st, const char *id)
{
    if (!c || !st) return mz_fail(MZ_E_INVAL, "null argument");
    mz_ctx_use_lock(c);
    struct mz_sstore *a = NULL;
    mz_status s = attach(c, st, id, true, &a);
    if (!s) {
        mz_ctx_set_listener(c, &store_listener, a);
        on_append(a, mz_ctx_tokens(c), mz_ctx_n_tokens(c));
        if ((s = start_worker(a))) {
            mz_ctx_set_listener(c, NULL, NULL);
            att_free(a); /* the data file stays the session's swap file */
        }
    }
    mz_ctx_use_unlock(c);
    return s;
}

void mz_sstore_test_abandon(mz_ctx_t *c)
{
    struct mz_sstore *a = att_of(c);
    if (a) a->no_final = true;
}

mz_status mz_session_sync(mz_ctx_t *c)
{
    struct mz_sstore *a = att_of(c);
    if (!a) return mz_fail(MZ_E_INVAL, "session is not stored");
    return pass(a, true, true, true, false);
}

mz_status mz_session_checkpoint(mz_ctx_t *c)
{
    struct mz_sstore *a = att_of(c);
    if (!a) return mz_fail(MZ_E_INVAL, "session is not stored");
    mz_status s = pass(a, true, true, false, false);
    /* the full chunks left: the worker writes them once the engine is quiet */
    pthread_mutex_lock(&a->mu);
    a->kick = true;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return s;
}

/* The session goes (the engine has unregistered the listener): the worker
 * stops and the last manifest is written while the data file is still
 * open; the file closes with the session's memory manager. */
static void on_free(void *ud)
{
    struct mz_sstore *a = ud;
    if (a->th_started) {
        pthread_mutex_lock(&a->mu);
        a->stop = true;
        pthread_cond_signal(&a->cv);
        pthread_mutex_unlock(&a->mu);
        pthread_join(a->th, NULL);
    }
    if (!a->no_final) (void)pass(a, true, true, true, false);
    att_free(a);
}

/* ---- resume ------------------------------------------------------------------------------------ */

static mz_status lost(mz_resume_info *info, mz_status s)
{
    info->outcome = MZ_RESUME_LOST;
    snprintf(info->reason, sizeof info->reason, "%s", mz_last_error());
    return s;
}

/* After a failed restore: every stored chunk is read (and verified) layer by
 * layer in order; the first chunk of any layer that fails bounds what is
 * kept. Returns the number of chunks [0, good) whose every layer restored;
 * *why gets the first failure's message. */
static size_t verified_prefix(const mz_ctx_parts *cp, size_t k, char *why, size_t cap)
{
    size_t good = k;
    why[0] = '\0';
    mz_engine_compute_lock(cp->engine);
    for (int l = 0; l < cp->n_layer; l++) {
        if (mz_mem_acquire_layer(cp->mem, l, MZ_MIN(k, good)) == MZ_OK) continue;
        if (!why[0]) snprintf(why, cap, "%s", mz_last_error());
        for (size_t ch = 0; ch < good; ch++)
            if (mz_mem_kv_state(cp->mem, l, ch) != MZ_UNIT_RESIDENT) {
                good = ch;
                break;
            }
    }
    mz_engine_compute_unlock(cp->engine);
    return good;
}

/* Restore threads of a resume that recomputes n tokens. The profile's
 * split leaves the compute threads their CPUs (on 16 CPUs with 16 compute
 * threads: 3 restore threads), but a resume's forward pass of a few tokens
 * only waits, layer by layer, for the restore: then the restore gets as
 * many threads as the session computes with (the pre-faulting among them
 * still capped by the profile's pre-fault table). 0: the profile's split. */
#define RESUME_WIDE_MAX_TOKENS 32
static int resume_restore_threads(const mz_ctx_parts *cp, size_t n)
{
    /* MZCACHE_RESUME_THREADS=N (0..MZ_RESTORE_THREADS_MAX; 0: the profile's
     * split) overrides, for benchmarks comparing the two on one build */
    const char *env = getenv("MZCACHE_RESUME_THREADS");
    if (env && *env) {
        char *end = NULL;
        errno = 0;
        long v = strtol(env, &end, 10);
        if (!errno && end != env && !*end && v >= 0 && v <= MZ_RESTORE_THREADS_MAX) return (int)v;
        mz_log(MZ_LOG_WARN, "MZCACHE_RESUME_THREADS=%s ignored: use 0..%d", env,
               MZ_RESTORE_THREADS_MAX);
    }
    int nc = cp->n_threads;
    if (n > RESUME_WIDE_MAX_TOKENS || nc < 4) return 0;
    return MZ_MIN(nc, MZ_RESTORE_THREADS_MAX);
}

static mz_status resume_stored(mz_store_t *st, const char *id, const mz_ctx_params *p,
                               const mz_token *then, size_t n_then, mz_ctx_t **out,
                               mz_resume_info *info);

/* Resumes `id` and prefills then[0, n_then) in the same pipelined pass. */
static mz_status resume(mz_store_t *st, const char *id, const mz_ctx_params *p, const mz_token *then,
                        size_t n_then, mz_ctx_t **out, mz_resume_info *info_out)
{
    mz_resume_info dummy;
    mz_resume_info *info = info_out ? info_out : &dummy;
    memset(info, 0, sizeof *info);
    *out = NULL;
    if (!st) return mz_fail(MZ_E_INVAL, "null store");
    mz_clear_error();
    /* A bad new token is refused before anything is read or made. */
    if (n_then && !then) return lost(info, mz_fail(MZ_E_INVAL, "null tokens"));
    for (size_t i = 0; i < n_then; i++)
        if (then[i] < 0 || then[i] >= st->n_vocab)
            return lost(info, mz_fail(MZ_E_INVAL, "new token %zu (%d) is outside the vocabulary "
                                      "of %d", i, (int)then[i], st->n_vocab));
    mz_status s = resume_stored(st, id, p, then, n_then, out, info);
    /* a session that cannot be resumed is not offered by the prefix index
     * again until its next manifest (or the store's next open) */
    if (s) mz_store_index_forget(st, id);
    return s;
}

/* resume() once the arguments are checked: info is the caller's or resume's. */
static mz_status resume_stored(mz_store_t *st, const char *id, const mz_ctx_params *p,
                               const mz_token *then, size_t n_then, mz_ctx_t **out,
                               mz_resume_info *info)
{
    mz_manifest m;
    mz_status s = mz_store_read_manifest(st, id, &m);
    if (s) return lost(info, s);
    if (m.model_id != st->model_id) {
        s = mz_fail(MZ_E_UNSUPPORTED, "session %s was made with another model (id %016llx, this "
                    "model %016llx)", id, (unsigned long long)m.model_id,
                    (unsigned long long)st->model_id);
    } else if (strcmp(m.codec, st->codec) != 0) {
        s = mz_fail(MZ_E_UNSUPPORTED, "session %s was stored with the %s codec; this store writes "
                    "%s (--store-codec %s resumes it)", id, m.codec, st->codec, m.codec);
    } else if (m.tok_id != st->tok_id) {
        s = mz_fail(MZ_E_UNSUPPORTED, "session %s was made with another tokenizer", id);
    } else if (m.n_layer != (uint32_t)mz_engine_model(st->e)->cfg.n_layer) {
        s = mz_fail(MZ_E_FORMAT, "session %s: %u layers, the model has %d", id, m.n_layer,
                    mz_engine_model(st->e)->cfg.n_layer);
    } else if (m.n_tokens == 0) {
        s = mz_fail(MZ_E_FORMAT, "session %s holds no tokens", id);
    }
    for (size_t i = 0; !s && i < m.n_tokens; i++)
        if (m.tokens[i] >= st->n_vocab)
            s = mz_fail(MZ_E_FORMAT, "session %s: token %zu is outside the vocabulary", id, i);
    if (s) {
        mz_manifest_clear(&m);
        return lost(info, s);
    }
    info->n_chunks_stored = m.n_chunks;
    /* What the resume's pass computes: the stored tokens past the restored
     * ones, then the caller's. */
    const size_t n_feed = m.n_tokens + n_then;
    mz_token *feed = malloc(n_feed * sizeof *feed);
    if (!feed) {
        mz_manifest_clear(&m);
        return lost(info, mz_fail(MZ_E_NOMEM, "out of memory (resume)"));
    }
    memcpy(feed, m.tokens, m.n_tokens * sizeof *feed);
    if (n_then) memcpy(feed + m.n_tokens, then, n_then * sizeof *feed);

    mz_ctx_t *c = NULL;
    mz_swap_slot *slots = NULL;
    if ((s = mz_session_create(st->e, p, &c))) {
        free(feed);
        mz_manifest_clear(&m);
        return lost(info, s);
    }
    const mz_ctx_parts cp = mz_ctx_get_parts(c);
    const int L = cp.n_layer;
    if (n_feed >= cp.n_ctx) {
        s = n_then ? mz_fail(MZ_E_CONTEXT_FULL, "session %s: %zu tokens and %zu new ones do not fit "
                             "a context of %zu", id, m.n_tokens, n_then, cp.n_ctx)
                   : mz_fail(MZ_E_CONTEXT_FULL, "session %s: %zu tokens do not fit a context of %zu",
                             id, m.n_tokens, cp.n_ctx);
        goto fail;
    }
    if (cp.kv->chunk_bytes != m.chunk_bytes) {
        s = mz_fail(MZ_E_FORMAT, "session %s: its chunk size differs from this model's", id);
        goto fail;
    }
    slots = calloc(m.n_chunks * (size_t)L + 1, sizeof *slots);
    if (!slots) {
        s = mz_fail(MZ_E_NOMEM, "out of memory (resume)");
        goto fail;
    }
    mz_ctx_use_lock(c);
    struct mz_sstore *a = NULL;
    if ((s = attach(c, st, id, false, &a))) {
        mz_ctx_use_unlock(c);
        goto fail;
    }
    a->man.created_ns = m.created_ns;
    mz_ctx_set_listener(c, &store_listener, a);
    /* Take the named records back: chunks [0, k) become stored, clean units,
     * checked as the restore reads them. */
    size_t k = m.n_chunks;
    for (size_t ch = 0; ch < k; ch++)
        for (int l = 0; l < L; l++) {
            size_t i = ch * (size_t)L + (size_t)l;
            if (mz_swapfile_slot_import(a->sf, &m.recs[i], &slots[i]) != MZ_OK) {
                snprintf(info->reason, sizeof info->reason,
                         "session %s: KV chunk %d/%zu: %s; truncated to %zu chunks", id, l, ch,
                         mz_last_error(), ch);
                k = ch;
                break;
            }
        }
    /* The tail's records are held by the attachment (named by the manifest
     * on disk until the next one), read and verified straight into the
     * fresh chunk below. */
    size_t tail = k == m.n_chunks ? m.tail_pos : 0;
    for (int l = 0; tail && l < L; l++) {
        if (mz_swapfile_slot_import(a->sf, &m.recs[k * (size_t)L + (size_t)l], &a->tail_slot[l]) ==
            MZ_OK) {
            mz_mem_store_hold(cp.mem);
            continue;
        }
        mz_log(MZ_LOG_WARN, "session %s: the tail of layer %d: %s; its tokens are recomputed", id, l,
               mz_last_error());
        tail_free(a, a->tail_slot);
        tail = 0;
    }
    size_t n0 = k * MZ_KV_CHUNK_TOKENS + tail;
    s = mz_kv_cache_reserve(cp.kv, n0);
    if (!s) s = mz_mem_store_adopt_chunks(cp.mem, k, slots);
    for (int l = 0; !s && tail && l < L; l++) {
        size_t len = 0;
        if (mz_swapfile_read(a->sf, a->tail_slot[l], cp.kv->chunks[l][k], cp.kv->chunk_bytes, &len) ==
                MZ_OK &&
            len == cp.kv->chunk_bytes)
            continue;
        mz_log(MZ_LOG_WARN, "session %s: the tail of layer %d: %s; its tokens are recomputed", id, l,
               mz_last_error());
        tail = 0; /* the failed read left zeros; those positions are computed again */
        n0 = k * MZ_KV_CHUNK_TOKENS;
    }
    /* the adopted records are named by the manifest on disk: durable */
    a->durable_k = k;
    if (tail) {
        a->tail_chunk = k;
        a->tail_pos = tail;
        a->tail_disk = true;
    }
    if (!s) mz_ctx_adopt_tokens(c, m.tokens, n0); /* the listener takes them too */
    mz_ctx_use_unlock(c);
    if (s) goto fail;
    /* Restore the stored chunks through the pipelined restore while the
     * partial last chunk is recomputed. A chunk that fails verification
     * (its name is in the message) cuts the session back to the chunks
     * before it; the rest of the stored tokens are computed again. */
    for (int attempt = 0;; attempt++) {
        size_t have = mz_ctx_n_tokens(c);
        mz_restore_params rp = mz_restore_params_default();
        rp.n_restore_threads = resume_restore_threads(&cp, n_feed - have);
        s = mz_prefill_restore(c, feed + have, n_feed - have, &rp, &info->timings);
        if (!s) break;
        if ((s != MZ_E_CORRUPT && s != MZ_E_IO) || attempt >= 3) goto fail;
        char first[400];
        snprintf(first, sizeof first, "%s", mz_last_error());
        char why[400];
        size_t good = verified_prefix(&cp, MZ_MIN(k, cp.kv->n_chunks), why, sizeof why);
        snprintf(info->reason, sizeof info->reason, "session %s: %s; truncated to %zu chunks (%zu "
                 "tokens)", id, why[0] ? why : first, good, good * MZ_KV_CHUNK_TOKENS);
        mz_log(MZ_LOG_WARN, "%s", info->reason);
        if ((s = mz_ctx_truncate(c, MZ_MIN(mz_ctx_n_tokens(c), good * MZ_KV_CHUNK_TOKENS)))) goto fail;
        k = good;
        n0 = MZ_MIN(n0, good * MZ_KV_CHUNK_TOKENS);
    }
    info->n_chunks_restored = k;
    info->n_tokens = mz_ctx_n_tokens(c);
    info->n_tokens_recomputed = m.n_tokens - n0;
    info->outcome = k == m.n_chunks ? MZ_RESUME_FULL : MZ_RESUME_TRUNCATED;
    if (info->outcome == MZ_RESUME_FULL) info->reason[0] = '\0';
    free(feed);
    free(slots);
    mz_manifest_clear(&m);
    if ((s = start_worker(a))) {
        mz_ctx_free(c);
        return lost(info, s);
    }
    *out = c;
    return MZ_OK;
fail:
    info->n_tokens = 0;
    {
        mz_resume_info keep = *info;
        (void)lost(info, s);
        if (keep.reason[0] && strcmp(keep.reason, info->reason) != 0) {
            char tmp[sizeof info->reason];
            snprintf(tmp, sizeof tmp, "%s", info->reason);
            snprintf(info->reason, sizeof info->reason, "%.250s; %.250s", keep.reason, tmp);
        }
    }
    /* No manifest update from a session that never resumed. */
    struct mz_sstore *att = att_of(c);
    if (att) {
        mz_ctx_set_listener(c, NULL, NULL);
        att_free(att);
    }
    mz_ctx_free(c);
    free(feed);
    free(slots);
    mz_manifest_clear(&m);
    return s;
}

mz_status mz_session_resume(mz_store_t *st, const char *id, const mz_ctx_params *p, mz_ctx_t **out,
                            mz_resume_info *info)
{
    return resume(st, id, p, NULL, 0, out, info);
}

mz_status mz_session_resume_prefill(mz_store_t *st, const char *id, const mz_ctx_params *p,
                                    const mz_token *tokens, size_t n, mz_ctx_t **out,
                                    mz_resume_info *info)
{
    return resume(st, id, p, tokens, n, out, info);
}
