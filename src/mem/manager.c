/*
 * manager.c — the memory manager of one context (contract in manager.h).
 *
 * Tables. A session has one KV unit per (layer, chunk slot) — n_layer x
 * max_chunks, fixed at init — and shares its engine's weight units
 * (weights.h) with the engine's other sessions. Weight blocks carry pin
 * counts: acquire_layer pins a block before it looks at it and the engine
 * unpins at the end of the forward step; a pinned block is never dropped.
 *
 * Moves (each one: claim the unit BUSY, do the work, settle it):
 *   evict   RESIDENT -> COMPRESSED         encode into scratch, push on the stack
 *           RESIDENT -> STORED_RAW         write the chunk's own pages (zero copy)
 *           RESIDENT -> STORED_COMPRESSED  encode into scratch, write
 *           COMPRESSED -> STORED_COMPRESSED (CompKV) write the stack's bottom item, drop it
 *           RESIDENT -> DROPPED            hash the block, release
 *   restore the reverse; a compressed chunk that is not on top of the stack is
 *           reached by decoding the items above it back into their chunks
 *           ("pop-through"): never needed under backward-out/forward-in, but it
 *           keeps any other order correct.
 * A unit's pages are released (MADV_DONTNEED + PROT_NONE) only after its bytes
 * are safe elsewhere, so a failed write leaves it resident and intact; a
 * failed read (EIO, checksum mismatch, weights that no longer hash the same)
 * releases the pages again and settles the unit back to its evicted state,
 * with its stored copy untouched — nothing unverified is ever left readable.
 *
 * Lock order (outer first):
 *     (engine locks: src/engine/engine.h)
 *       mm->lock           this session's stack, swap slots, scratch, dfile,
 *                          and the COMPRESSED -> BUSY claim
 *         swapfile mutex   inside mz_swapfile_* (slot table)
 *         wtable lock      session count of the weight table (a leaf)
 *     rjob mu              the pipelined restore's progress (a leaf: never held
 *                          while taking another lock or waiting on a unit)
 * Unit ready events (futex on the state word) are never waited on while
 * holding any of these locks.
 *
 * Accounting. "Freed" is the fall of (resident + compressed) bytes: a chunk
 * encoded into the stack frees its size minus its encoded size. The paper's
 * remaining-memory percentage uses the same sum (mz_mem_get_stats).
 */
#define _GNU_SOURCE
#include "manager.h"

#include "../codec/codec.h"
#include "../io/direct_read.h"
#include "../io/io.h"
#include "../kernels/kernels.h"
#include "compstack.h"
#include "policy.h"
#include "profile.h"
#include "weights.h"

#include <pthread.h>
#include <sys/mman.h>
#include <string.h>
#include <time.h>

/* ---- the manager --------------------------------------------------------------------- */

struct mz_mem {
    mz_model_t *model;
    mz_kv_cache *kv;
    mz_wtable *wt;             /* the engine's weight units (shared by its sessions) */
    unsigned char *wpinned;    /* [n_layer]: blocks this manager pinned in the current step */
    int n_layer;
    size_t max_chunks;
    size_t n_values;           /* F16 values in one chunk */
    mz_unit *kvu;              /* [n_layer * max_chunks] */
    const mz_codec *codec;
    mz_codec *layer_codec;     /* [n_layer]: the instance that encodes layer l's chunks
                                  (mz_codec_for_layer: cachegen's rows = head_dim and its
                                  layer schedule; q8/raw: *codec) */
    mz_device_profile prof;    /* where the per-unit times come from; re-derived as the */
    mz_profile_units pu;       /*   expected encoded size moves (refresh_times) */
    char codec_name[24];
    uint64_t enc_seed;         /* expected bytes of an encoded chunk before any was measured */
    uint64_t enc_sum, enc_n;   /* bytes and count of chunks encoded by their layer's codec */
    mz_kv_placement placement;
    mz_policy *policy;
    mz_policy_params pprm;     /* order, seed, rounding */
    mz_evict_plan plan;        /* steps of the current eviction (and the planner's scratch) */
    mz_unit_times times;       /* per-unit restore times from the device profile */
    bool profile_measured;     /* false: built-in estimate */
    uint64_t *kv_seq;          /* [n_layer * max_chunks]: push number of each COMPRESSED chunk */
    uint64_t push_seq;         /* last push number handed out */
    pthread_mutex_t lock;
    mz_compstack_t *stack;
    mz_swapfile_t *swap;       /* opened at the first store */
    char *swap_dir;
    unsigned swap_flags;
    mz_dfile_t *dfile;         /* the model file, opened at the first weight reload */
    uint8_t *scratch;          /* page-aligned: encoded chunks on their way to/from storage */
    size_t scratch_cap;
    struct rjob *job;          /* the running pipelined restore (owner thread sets/clears) */
    mz_mem_shared *shared;     /* the engine's swap file and model-file reader (NULL: own) */
    bool shared_swap;          /* this session stores into the engine's swap file */
    _Atomic size_t n_slots;    /* swap slots this manager holds */
    int restore_threads;       /* default split: restore threads (1..3) from the profile */
    mz_restore_timings last;   /* breakdown of the last pipelined restore */
    double last_first_compute_ms; /* when acquire_layer(0) returned in the last job */
    double last_ready_ms;      /* when its last unit became ready */
    _Atomic size_t n_clean_evicted; /* [store] evictions that only released pages */
    bool store_leaked;         /* [store] a truncation left clean records behind */
};

static mz_unit *kv_unit(mz_mem *mm, int l, size_t c) { return &mm->kvu[(size_t)l * mm->max_chunks + c]; }

static uint64_t kv_tag(int l, size_t c) { return (uint64_t)(uint32_t)l << 32 | (uint32_t)c; }

static mz_unit *unit_by_tag(mz_mem *mm, uint64_t tag)
{
    int l = (int)(tag >> 32);
    size_t c = (size_t)(uint32_t)tag;
    MZ_ASSERT(l >= 0 && l < mm->n_layer && c < mm->max_chunks);
    return kv_unit(mm, l, c);
}

static const char *unit_name(const mz_unit *u, char *buf, size_t cap)
{
    if (u->kind == MZ_UNIT_KV)
        snprintf(buf, cap, "KV chunk (layer %d, chunk %d)", u->layer, u->chunk);
    else
        snprintf(buf, cap, "weights of layer %d", u->layer);
    return buf;
}

/* Brings KV unit states in line with the cache's mappings: chunks mapped
 * since the last call become RESIDENT units, chunks unmapped by a truncate
 * become ABSENT. Owner thread. */
static void sync_kv(mz_mem *mm)
{
    const mz_kv_cache *kv = mm->kv;
    for (int l = 0; l < mm->n_layer; l++) {
        for (size_t c = 0; c < mm->max_chunks; c++) {
            mz_unit *u = kv_unit(mm, l, c);
            uint8_t *p = kv->chunks[l][c];
            mz_unit_state s = mz_unit_state_get(u);
            if (s == MZ_UNIT_ABSENT && p) {
                u->buf = p;
                u->bytes = kv->chunk_bytes;
                mz_unit_set(u, MZ_UNIT_RESIDENT);
            } else if (s == MZ_UNIT_RESIDENT && !p) {
                u->buf = NULL;
                mz_unit_set(u, MZ_UNIT_ABSENT);
            } else {
                MZ_ASSERT(p || s == MZ_UNIT_ABSENT);
            }
        }
    }
}

static void codec_display_name(const mz_codec *c, char *buf, size_t cap);

/* Expected size of one encoded chunk: the mean of the chunks encoded so far,
 * with the seed (the codec's typical ratio, docs/CODECS.md) counted as
 * ENC_SEED_WEIGHT chunks. bound() is a worst case (cachegen: 1.14x raw
 * where it gives about 0.25x) and only sizes buffers. */
#define ENC_SEED_WEIGHT 8
static size_t enc_expected(const mz_mem *mm)
{
    uint64_t w = ENC_SEED_WEIGHT + mm->enc_n;
    return (size_t)((mm->enc_seed * ENC_SEED_WEIGHT + mm->enc_sum + w / 2) / w);
}

/* Per-unit times from the profile at the current expected encoded size (the
 * read half of t_rkvc follows it; decode and the rest do not move). */
static void refresh_times(mz_mem *mm)
{
    mm->pu.kv_enc_bytes = enc_expected(mm);
    mz_profile_derive(&mm->prof, &mm->pu, &mm->times);
}

mz_status mz_mem_init(mz_model_t *m, mz_kv_cache *kv, const mz_mem_params *p, mz_mem **out)
{
    mz_status s;
    *out = NULL;
    const char *codec_name = p && p->codec && p->codec[0] ? p->codec : "q8";
    const mz_codec *codec = mz_codec_find(codec_name);
    if (!codec) return MZ_E_INVAL;
    mz_kv_placement placement = p ? p->placement : MZ_KV_PLACE_AUTO;
    if (!mz_kv_placement_name(placement))
        return mz_fail(MZ_E_INVAL, "unknown KV placement %d", (int)placement);
    mz_policy_params pprm = mz_policy_params_default();
    if (p) {
        pprm.order = p->order;
        pprm.seed = p->seed;
        pprm.rounding = p->rounding;
    }
    if (!mz_evict_order_name(pprm.order))
        return mz_fail(MZ_E_INVAL, "unknown eviction order %d", (int)pprm.order);

    mz_mem *mm = mz_calloc(1, sizeof *mm);
    if (!mm) return MZ_E_NOMEM;
    pthread_mutex_init(&mm->lock, NULL);
    mm->model = m;
    mm->kv = kv;
    mm->n_layer = kv->n_layer;
    mm->max_chunks = kv->max_chunks;
    mm->n_values = kv->chunk_bytes / sizeof(mz_f16);
    mm->codec = codec;
    mm->placement = placement;
    mm->swap_flags = p ? p->swap_flags : 0;
    if (p && p->swap_dir && p->swap_dir[0]) {
        mm->swap_dir = strdup(p->swap_dir);
        if (!mm->swap_dir) goto out_nomem;
    }
    mm->kvu = mz_calloc((size_t)mm->n_layer * MZ_MAX(mm->max_chunks, 1), sizeof *mm->kvu);
    mm->kv_seq = mz_calloc((size_t)mm->n_layer * MZ_MAX(mm->max_chunks, 1), sizeof *mm->kv_seq);
    if (!mm->kvu || !mm->kv_seq) goto out_nomem;
    for (int l = 0; l < mm->n_layer; l++) {
        for (size_t c = 0; c < mm->max_chunks; c++) {
            mz_unit *u = kv_unit(mm, l, c);
            u->kind = MZ_UNIT_KV;
            u->layer = l;
            u->chunk = (int)c;
            mz_unit_set(u, MZ_UNIT_ABSENT);
        }
    }
    mm->layer_codec = mz_calloc((size_t)MZ_MAX(mm->n_layer, 1), sizeof *mm->layer_codec);
    if (!mm->layer_codec) goto out_nomem;
    size_t bound = mz_codec_bound(&mz_codec_raw_vt, mm->n_values);
    double ratio = 0;
    for (int l = 0; l < mm->n_layer; l++) {
        mm->layer_codec[l] = mz_codec_for_layer(codec, (unsigned)m->cfg.head_dim, (unsigned)l,
                                                (unsigned)mm->n_layer);
        size_t b = mz_codec_bound(&mm->layer_codec[l], mm->n_values);
        bound = b ? MZ_MAX(bound, b) : 0;
        if (!b) break;
        ratio += mz_codec_ratio_hint(&mm->layer_codec[l]) / mm->n_layer;
    }
    /* The policy plans with the expected size, never more than the bound (q8
     * and raw: the exact size); measured sizes take over as chunks go. */
    if (bound)
        mm->enc_seed = MZ_MIN((uint64_t)bound, (uint64_t)(ratio * (double)kv->chunk_bytes + 0.5) +
                                                   MZ_CODEC_HEADER_BYTES);
    if (bound == 0) {
        s = mz_fail(MZ_E_RANGE, "KV chunk of %zu values is too large for the codec", mm->n_values);
        goto out_fail;
    }
    mm->scratch_cap = (bound + mz_page_size() - 1) / mz_page_size() * mz_page_size();
    mm->scratch = mz_pages_alloc(mm->scratch_cap);
    if (!mm->scratch) goto out_nomem;
    if ((s = mz_compstack_init(0, &mm->stack))) goto out_fail;
    mm->pprm = pprm;
    mm->policy = p && p->policy_init            ? p->policy_init(&pprm)
                 : placement == MZ_KV_PLACE_AUTO ? mz_policy_hybrid_init(&pprm)
                                                 : mz_policy_backward_init(placement, &pprm);
    if (!mm->policy) goto out_nomem;
    if ((s = mz_evict_plan_init(&mm->plan, mm->n_layer, MZ_MAX(mm->max_chunks, 1)))) goto out_fail;
    {
        /* Per-unit times: the device profile (or the built-in estimate and a
         * warning) applied to this model's unit sizes. */
        mz_device_profile prof;
        if (p && p->profile) prof = *p->profile;
        else mz_profile_load_or_builtin(p ? p->profile_path : NULL, &prof);
        size_t block = 0;
        for (int l = 0; l < m->cfg.n_layer; l++) block = MZ_MAX(block, m->blocks[l].buf_bytes);
        codec_display_name(codec, mm->codec_name, sizeof mm->codec_name);
        mm->prof = prof;
        mm->pu = (mz_profile_units){.kv_chunk_bytes = kv->chunk_bytes, .block_bytes = block,
                                    .codec = mm->codec_name};
        refresh_times(mm);
        mm->profile_measured = prof.measured;
        mm->restore_threads = mz_profile_restore_threads(&prof);
    }
    MZ_ASSERT(p && p->wt && p->wt->model == m);
    mm->wpinned = mz_calloc((size_t)MZ_MAX(mm->n_layer, 1), 1);
    if (!mm->wpinned) goto out_nomem;
    mm->wt = p->wt;
    mz_wtable_attach(mm->wt);
    mm->shared = p->shared;
    /* The engine's swap file unless the session asked for its own place
     * (another directory) or test flags. */
    mm->shared_swap = p->shared && !mm->swap_flags &&
                      ((!mm->swap_dir && !p->shared->swap_dir) ||
                       (mm->swap_dir && p->shared->swap_dir &&
                        strcmp(mm->swap_dir, p->shared->swap_dir) == 0));
    sync_kv(mm);
    *out = mm;
    return MZ_OK;
out_nomem:
    s = mz_fail(MZ_E_NOMEM, "out of memory creating the memory manager");
out_fail:
    mz_mem_free(mm);
    return s;
}

/* The registry name of a codec ("q8-g32" for q8 with groups of 32). */
static void codec_display_name(const mz_codec *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", c->name);
    if (strcmp(c->name, "q8") == 0 && c->param != MZ_Q8_GROUP_DEFAULT)
        snprintf(buf, cap, "q8-g%u", c->param);
}

/* ---- storage helpers ------------------------------------------------------------------ */

/* The swap file: the engine's (shared by its sessions, opened by the first
 * that stores) or, for a session with a swap directory or flags of its own,
 * the session's. */
static mz_status ensure_swap(mz_mem *mm)
{
    if (mm->swap) return MZ_OK;
    mz_mem_shared *sh = mm->shared_swap ? mm->shared : NULL;
    if (sh) {
        pthread_mutex_lock(&sh->lock);
        if (sh->swap) {
            mm->swap = sh->swap;
            pthread_mutex_unlock(&sh->lock);
            return MZ_OK;
        }
    }
    mz_swapfile_params sp = mz_swapfile_params_default();
    sp.dir = mm->swap_dir;
    sp.flags = mm->swap_flags;
    mz_status s = mz_swapfile_open(&sp, &mm->swap);
    if (!s && sh) sh->swap = mm->swap;
    if (sh) pthread_mutex_unlock(&sh->lock);
    if (s) return mz_fail_prefix(s, "cannot create the swap file");
    if (!mz_swapfile_is_direct(mm->swap))
        mz_log(MZ_LOG_WARN, "swap file %s: O_DIRECT refused; using buffered I/O + fadvise",
               mz_swapfile_path(mm->swap));
    return MZ_OK;
}

static mz_status swap_write(mz_mem *mm, const void *buf, size_t len, uint64_t tag,
                            mz_swap_slot *slot)
{
    mz_status s = mz_swapfile_write(mm->swap, buf, len, tag, slot);
    if (!s) atomic_fetch_add(&mm->n_slots, 1);
    return s;
}

static void swap_slot_free(mz_mem *mm, mz_swap_slot slot)
{
    mz_swapfile_slot_free(mm->swap, slot);
    atomic_fetch_sub(&mm->n_slots, 1);
}

/* The model-file reader: the engine's when there is one. Weight reloads
 * run under the engine's compute lock, one session at a time, and a reader
 * is used by one thread at a time (direct_read.h). */
static mz_status ensure_dfile(mz_mem *mm)
{
    if (mm->dfile) return MZ_OK;
    mz_mem_shared *sh = mm->shared;
    if (sh) pthread_mutex_lock(&sh->lock);
    mz_status s = MZ_OK;
    if (sh && sh->dfile) mm->dfile = sh->dfile;
    else if (!(s = mz_dfile_open(mm->model->path, NULL, &mm->dfile)) && sh) sh->dfile = mm->dfile;
    if (sh) pthread_mutex_unlock(&sh->lock);
    if (s) return mz_fail_prefix(s, "cannot open the model file %s", mm->model->path);
    return MZ_OK;
}

void mz_mem_shared_init(mz_mem_shared *sh, const char *swap_dir)
{
    memset(sh, 0, sizeof *sh);
    pthread_mutex_init(&sh->lock, NULL);
    sh->swap_dir = swap_dir && swap_dir[0] ? strdup(swap_dir) : NULL;
}

void mz_mem_shared_close(mz_mem_shared *sh)
{
    mz_swapfile_close(sh->swap);
    mz_dfile_close(sh->dfile);
    free(sh->swap_dir);
    pthread_mutex_destroy(&sh->lock);
    memset(sh, 0, sizeof *sh);
}

/* Encodes a resident chunk into mm->scratch; falls back to the raw codec for
 * chunks the codec refuses (q8: inf/NaN), so eviction never fails on data. */
static mz_status encode_chunk(mz_mem *mm, const mz_unit *u, const mz_codec **used, size_t *len)
{
    /* the layer's own instance (cachegen: its bit budget); it stays the
     * unit's decoder (u->enc), so it must live as long as the manager */
    *used = &mm->layer_codec[u->layer];
    mz_status s = mz_codec_encode(*used, (const mz_f16 *)u->buf, mm->n_values, mm->scratch,
                                  mm->scratch_cap, len);
    if (s == MZ_OK) {
        mm->enc_sum += *len;
        mm->enc_n++;
    }
    if (s == MZ_E_FORMAT && mm->codec != &mz_codec_raw_vt) {
        *used = &mz_codec_raw_vt;
        s = mz_codec_encode(&mz_codec_raw_vt, (const mz_f16 *)u->buf, mm->n_values, mm->scratch,
                            mm->scratch_cap, len);
    }
    return s;
}

/* ---- eviction --------------------------------------------------------------------------- */

/* Carries out one step; *delta = fall of (resident + compressed) bytes.
 * Caller holds mm->lock. On error the unit keeps its state and data. */
static mz_status evict_step(mz_mem *mm, const mz_evict_step *st, int64_t *delta, mz_evict_report *r)
{
    char nm[64];
    mz_status s = MZ_OK;
    *delta = 0;
    if (st->kind == MZ_UNIT_WEIGHTS) {
        mz_unit *u = &mm->wt->units[st->layer];
        MZ_ASSERT(st->dest == MZ_DEST_DROP);
        /* Shared by the engine's sessions: another one may be moving it or
         * computing on it (pinned). Either way it stays; the step frees
         * nothing and the caller plans again (weights.h, "Pins"). */
        if (!mz_unit_claim(u, MZ_UNIT_RESIDENT)) return MZ_OK;
        if (!mz_wtable_drop_claimed(mm->wt, st->layer)) return MZ_OK;
        (void)nm;
        *delta = (int64_t)u->bytes;
        r->n_weights_dropped++;
        return MZ_OK;
    }

    mz_unit *u = kv_unit(mm, st->layer, st->chunk);
    uint64_t tag = kv_tag(st->layer, st->chunk);
    unit_name(u, nm, sizeof nm);

    if (mz_unit_state_get(u) == MZ_UNIT_COMPRESSED) {
        /* CompKV: the stack's bottom item (the chunk needed last) to storage. */
        const uint8_t *data;
        size_t len;
        uint64_t btag;
        MZ_ASSERT(st->dest == MZ_DEST_STORE_COMPRESSED);
        if (mz_compstack_peek_bottom(mm->stack, &data, &len, &btag) != MZ_OK || btag != tag)
            return mz_fail(MZ_E_INVAL, "%s: not at the bottom of the compressed stack", nm);
        if ((s = ensure_swap(mm)))
            return mz_fail_prefix(s, "%s: moving it from memory to the swap file failed", nm);
        if (!mz_unit_claim(u, MZ_UNIT_COMPRESSED))
            return mz_fail(MZ_E_INVAL, "%s: busy", nm);
        mz_swap_slot slot = 0;
        s = swap_write(mm, data, len, tag, &slot);
        if (s) {
            mz_unit_settle(u, MZ_UNIT_COMPRESSED);
            return mz_fail_prefix(s, "%s: moving it from memory to the swap file failed", nm);
        }
        s = mz_compstack_drop_bottom(mm->stack);
        MZ_ASSERT(s == MZ_OK);
        u->slot = slot;
        mz_unit_settle(u, MZ_UNIT_STORED_COMPRESSED);
        *delta = (int64_t)len;
        r->n_kv_compkv++;
        return MZ_OK;
    }

    if (!mz_unit_claim(u, MZ_UNIT_RESIDENT)) return mz_fail(MZ_E_INVAL, "%s: not resident", nm);
    const mz_codec *used = NULL;
    size_t len = 0;
    mz_unit_state to = MZ_UNIT_RESIDENT;
    if (u->clean) { /* [store] a current copy in the session store: no encode, no write */
        u->slot = u->clean;
        mz_unit_release_pages(u);
        mz_unit_settle(u, MZ_UNIT_STORED_RAW);
        *delta = (int64_t)u->bytes;
        r->n_kv_stored_raw++;
        atomic_fetch_add(&mm->n_clean_evicted, 1);
        return MZ_OK;
    }
    switch (st->dest) {
    case MZ_DEST_COMPRESS:
        if ((s = encode_chunk(mm, u, &used, &len))) break;
        if ((s = mz_compstack_push(mm->stack, mm->scratch, len, tag))) break;
        mm->kv_seq[(size_t)st->layer * mm->max_chunks + st->chunk] = ++mm->push_seq;
        to = MZ_UNIT_COMPRESSED;
        *delta = (int64_t)u->bytes - (int64_t)len;
        r->n_kv_compressed++;
        break;
    case MZ_DEST_STORE_RAW: {
        if ((s = ensure_swap(mm))) break;
        mz_swap_slot slot = 0;
        /* The chunk is page-aligned: the swap file writes it straight from
         * its own pages (no copy) when its size is a 4 KiB multiple. */
        if ((s = swap_write(mm, u->buf, u->bytes, tag, &slot))) break;
        u->slot = slot;
        to = MZ_UNIT_STORED_RAW;
        *delta = (int64_t)u->bytes;
        r->n_kv_stored_raw++;
        break;
    }
    case MZ_DEST_STORE_COMPRESSED: {
        if ((s = ensure_swap(mm))) break;
        if ((s = encode_chunk(mm, u, &used, &len))) break;
        mz_swap_slot slot = 0;
        if ((s = swap_write(mm, mm->scratch, len, tag, &slot))) break;
        u->slot = slot;
        to = MZ_UNIT_STORED_COMPRESSED;
        *delta = (int64_t)u->bytes;
        r->n_kv_stored_compressed++;
        break;
    }
    default:
        s = mz_fail(MZ_E_INVAL, "bad destination %d for a KV chunk", (int)st->dest);
        break;
    }
    if (s) {
        mz_unit_settle(u, MZ_UNIT_RESIDENT);
        *delta = 0;
        return mz_fail_prefix(s, "%s: eviction failed (the chunk stays resident)", nm);
    }
    if (used) {
        u->enc = used;
        u->enc_bytes = len;
        if (used != &mm->layer_codec[u->layer]) r->n_kv_raw_fallback++;
    }
    mz_unit_release_pages(u);
    mz_unit_settle(u, to);
    return MZ_OK;
}

static void fill_view(mz_mem *mm, bool weights_evictable, mz_policy_view *v)
{
    *v = (mz_policy_view){.n_layer = mm->n_layer,
                          .max_chunks = mm->max_chunks,
                          .n_chunks = mm->kv->n_chunks,
                          .weights = mm->wt->units,
                          .kv = mm->kvu,
                          .kv_seq = mm->kv_seq,
                          .weights_evictable = weights_evictable,
                          .can_store = true,
                          .unit_bytes_kv = mm->kv->chunk_bytes,
                          .enc_bytes_kv_est = enc_expected(mm),
                          .times = mm->times};
}

/* Carries out steps in order until freed reaches goal. Caller holds mm->lock. */
static mz_status exec_steps(mz_mem *mm, const mz_evict_step *steps, size_t n, size_t goal,
                            int64_t *freed, size_t *moved, mz_evict_report *r)
{
    for (size_t i = 0; i < n; i++) {
        const mz_evict_step *st = &steps[i];
        int64_t delta = 0;
        mz_unit_state before = st->kind == MZ_UNIT_WEIGHTS
                                   ? mz_unit_state_get(&mm->wt->units[st->layer])
                                   : mz_unit_state_get(kv_unit(mm, st->layer, st->chunk));
        mz_status s = evict_step(mm, st, &delta, r);
        if (s) return s;
        mz_unit_state after = st->kind == MZ_UNIT_WEIGHTS
                                  ? mz_unit_state_get(&mm->wt->units[st->layer])
                                  : mz_unit_state_get(kv_unit(mm, st->layer, st->chunk));
        if (after != before) {
            (*moved)++;
            r->stage = st->stage;
        }
        *freed += delta;
        if (*freed >= 0 && (uint64_t)*freed >= (uint64_t)goal) break;
    }
    return MZ_OK;
}

mz_status mz_mem_evict_steps(mz_mem *mm, const mz_evict_step *steps, size_t n, size_t goal,
                             int64_t *freed, size_t *moved, mz_evict_report *r)
{
    pthread_mutex_lock(&mm->lock);
    mz_status s = exec_steps(mm, steps, n, goal, freed, moved, r);
    pthread_mutex_unlock(&mm->lock);
    return s;
}

void mz_mem_view(mz_mem *mm, bool weights_evictable, mz_policy_view *v)
{
    sync_kv(mm);
    pthread_mutex_lock(&mm->lock);
    refresh_times(mm);
    fill_view(mm, weights_evictable, v);
    pthread_mutex_unlock(&mm->lock);
}

const mz_policy *mz_mem_policy(const mz_mem *mm) { return mm->policy; }
mz_evict_plan *mz_mem_plan_scratch(mz_mem *mm) { return &mm->plan; }
mz_wtable *mz_mem_wtable(const mz_mem *mm) { return mm->wt; }

void mz_mem_pin_weights(mz_mem *mm, int layer)
{
    if (mm->wpinned[layer]) return;
    mm->wpinned[layer] = 1;
    mz_wtable_pin(mm->wt, layer);
}

void mz_mem_unpin_weights(mz_mem *mm)
{
    for (int l = 0; l < mm->n_layer; l++) {
        if (!mm->wpinned[l]) continue;
        mm->wpinned[l] = 0;
        mz_wtable_unpin(mm->wt, l);
    }
}

mz_status mz_mem_evict(mz_mem *mm, size_t nbytes, mz_evict_report *r)
{
    /* Weights only while this is the engine's one session (mzcache.h):
     * several sessions give weights up through mz_engine_evict's plan. */
    bool weights_ok = mz_wtable_refs(mm->wt) == 1 && !mz_wtable_any_pinned(mm->wt);
    return mz_mem_evict_ex(mm, nbytes, weights_ok, r);
}

mz_status mz_mem_evict_ex(mz_mem *mm, size_t nbytes, bool weights_evictable, mz_evict_report *r)
{
    mz_evict_report dummy;
    if (!r) r = &dummy;
    memset(r, 0, sizeof *r);
    r->bytes_requested = nbytes;
    double t0 = mz_time_ms();
    mz_status s = MZ_OK;
    int64_t freed = 0;
    if (nbytes == 0) goto out;

    sync_kv(mm);
    pthread_mutex_lock(&mm->lock);
    refresh_times(mm); /* the sizes measured by earlier evictions */
    /* Plan, carry out, and plan again for the rest when the real bytes fell
     * short of the estimate (a chunk the codec refused, a codec that beat its
     * bound the other way). Every round moves at least one unit one tier
     * down, so this ends. */
    while (s == MZ_OK && (freed < 0 || (uint64_t)freed < (uint64_t)nbytes)) {
        mz_policy_view v;
        fill_view(mm, weights_evictable, &v);
        /* Still to free (freed < nbytes here; freed < 0 when compressing cost bytes). */
        uint64_t left = freed >= 0 ? (uint64_t)nbytes - (uint64_t)freed
                        : (uint64_t)nbytes > UINT64_MAX - (uint64_t)-freed
                            ? UINT64_MAX
                            : (uint64_t)nbytes + (uint64_t)-freed;
        mm->policy->plan(mm->policy, &v, (size_t)MZ_MIN(left, (uint64_t)SIZE_MAX), &mm->plan);
        if (mm->plan.n == 0) break;
        size_t moved = 0;
        s = exec_steps(mm, mm->plan.steps, mm->plan.n, nbytes, &freed, &moved, r);
        /* A round where no step moved anything (a shared weight block that
         * another session holds) ends the eviction: planning again would
         * give the same steps. */
        if (moved == 0) break;
    }
    pthread_mutex_unlock(&mm->lock);
out:
    r->bytes_freed = freed > 0 ? (size_t)freed : 0;
    r->complete = r->bytes_freed >= nbytes;
    r->time_ms = mz_time_ms() - t0;
    if (s == MZ_OK)
        mz_log(MZ_LOG_DEBUG, "evict %zu: freed %zu (compressed %zu, raw %zu, stored-comp %zu, "
                             "compkv %zu, weights %zu) in %.1f ms", nbytes, r->bytes_freed,
               r->n_kv_compressed, r->n_kv_stored_raw, r->n_kv_stored_compressed, r->n_kv_compkv,
               r->n_weights_dropped, r->time_ms);
    return s;
}

/* ---- restore -------------------------------------------------------------------------------- */

/* Decodes the stack's top item into its chunk and pops it. u is BUSY (claimed
 * by the caller) and its pages are mapped. Caller holds mm->lock. */
static mz_status decode_top_into(mz_mem *mm, mz_unit *u)
{
    const uint8_t *data;
    size_t len;
    uint64_t tag;
    mz_status s = mz_compstack_peek_top(mm->stack, &data, &len, &tag);
    MZ_ASSERT(s == MZ_OK && unit_by_tag(mm, tag) == u);
    s = mz_codec_decode(u->enc, data, len, (mz_f16 *)u->buf, mm->n_values);
    if (s) return mz_fail_prefix(s, "decoding from the compressed stack failed");
    s = mz_compstack_drop_top(mm->stack);
    MZ_ASSERT(s == MZ_OK);
    return MZ_OK;
}

static void count_restore(mz_restore_report *r, const mz_unit *u, mz_unit_state from)
{
    if (!r) return;
    r->bytes_restored += u->bytes;
    switch (from) {
    case MZ_UNIT_COMPRESSED: r->n_kv_decoded++; break;
    case MZ_UNIT_STORED_RAW: r->n_kv_read_raw++; break;
    case MZ_UNIT_STORED_COMPRESSED: r->n_kv_read_compressed++; break;
    case MZ_UNIT_DROPPED: r->n_weights_loaded++; break;
    default: break;
    }
}

/* Fills u (BUSY, pages mapped) from the swap file or the model file, using
 * scratch for encoded records. Needs no manager lock: the swap file has its
 * own, mm->dfile is opened before any concurrent use, and only u's mover
 * writes u->buf. Error message set (without the unit's name). */
static mz_status read_stored(mz_mem *mm, mz_unit *u, mz_unit_state from, uint8_t *scratch,
                             size_t scratch_cap)
{
    mz_status s = MZ_OK;
    switch (from) {
    case MZ_UNIT_STORED_RAW: {
        size_t len = 0;
        s = mz_swapfile_read(mm->swap, u->slot, u->buf, u->bytes, &len);
        if (s) {
            mz_fail_prefix(s, "reading it from the swap file failed");
        } else if (len != u->bytes) {
            s = mz_fail(MZ_E_CORRUPT, "the swap file holds %zu bytes for it, expected %zu", len,
                        u->bytes);
        }
        break;
    }
    case MZ_UNIT_STORED_COMPRESSED: {
        size_t len = 0;
        s = mz_swapfile_read(mm->swap, u->slot, scratch, scratch_cap, &len);
        if (s) {
            mz_fail_prefix(s, "reading it from the swap file failed");
            break;
        }
        s = mz_codec_decode(u->enc, scratch, len, (mz_f16 *)u->buf, mm->n_values);
        if (s) mz_fail_prefix(s, "decoding it after reading it from the swap file failed");
        break;
    }
    case MZ_UNIT_DROPPED:
        if ((s = ensure_dfile(mm))) break;
        s = mz_wtable_read_block(mm->wt, mm->dfile, u->layer);
        break;
    default:
        MZ_ASSERT(!"read_stored from a state that is not stored");
    }
    return s;
}

/* Restores a unit claimed BUSY from state `from`. Caller holds mm->lock.
 * Settles the unit: RESIDENT, or `from` again on error. */
static mz_status restore_claimed(mz_mem *mm, mz_unit *u, mz_unit_state from, mz_restore_report *r)
{
    char nm[64];
    mz_status s = mz_unit_map_pages(u);
    if (s) goto out_fail;
    switch (from) {
    case MZ_UNIT_COMPRESSED:
        /* Pop-through: decode the items above u back into their own chunks. */
        for (;;) {
            const uint8_t *data;
            size_t len;
            uint64_t tag;
            s = mz_compstack_peek_top(mm->stack, &data, &len, &tag);
            MZ_ASSERT(s == MZ_OK);
            mz_unit *t = unit_by_tag(mm, tag);
            if (t == u) break;
            MZ_ASSERT(mz_unit_claim(t, MZ_UNIT_COMPRESSED));
            if ((s = mz_unit_map_pages(t)) || (s = decode_top_into(mm, t))) {
                mz_unit_release_pages(t);
                mz_unit_settle(t, MZ_UNIT_COMPRESSED);
                mz_fail_prefix(s, "%s", unit_name(t, nm, sizeof nm));
                goto out_fail;
            }
            mz_unit_settle(t, MZ_UNIT_RESIDENT);
            count_restore(r, t, MZ_UNIT_COMPRESSED);
        }
        s = decode_top_into(mm, u);
        break;
    case MZ_UNIT_STORED_RAW:
    case MZ_UNIT_STORED_COMPRESSED:
    case MZ_UNIT_DROPPED:
        s = read_stored(mm, u, from, mm->scratch, mm->scratch_cap);
        break;
    default:
        MZ_ASSERT(!"restore from a settled, evicted state");
    }
    if (s) goto out_fail;
    if ((from == MZ_UNIT_STORED_RAW || from == MZ_UNIT_STORED_COMPRESSED) &&
        u->slot != u->clean) { /* [store] a clean copy stays */
        swap_slot_free(mm, u->slot);
    }
    if (from == MZ_UNIT_STORED_RAW || from == MZ_UNIT_STORED_COMPRESSED) u->slot = 0;
    mz_unit_settle(u, MZ_UNIT_RESIDENT);
    count_restore(r, u, from);
    return MZ_OK;
out_fail:
    /* Nothing unverified stays readable: the pages go back and the unit stays
     * evicted, its stored copy (slot, stack item, file) untouched. */
    mz_unit_release_pages(u);
    mz_unit_settle(u, from);
    return mz_fail_prefix(s, "cannot restore %s", unit_name(u, nm, sizeof nm));
}

/* Makes u resident, waiting for another mover if there is one. */
static mz_status restore_unit(mz_mem *mm, mz_unit *u, mz_restore_report *r)
{
    for (int attempt = 0;; attempt++) {
        mz_unit_state s = mz_unit_state_get(u);
        if (s == MZ_UNIT_RESIDENT) return MZ_OK;
        if (s == MZ_UNIT_BUSY) {
            s = mz_unit_wait_settled(u);
            if (s == MZ_UNIT_RESIDENT) return MZ_OK;
            /* The other mover failed; try once ourselves to get our own error. */
        }
        MZ_ASSERT(s != MZ_UNIT_ABSENT);
        MZ_ASSERT(attempt < 1000);
        pthread_mutex_lock(&mm->lock);
        mz_status st = MZ_AGAIN;
        if (mz_unit_claim(u, s)) st = restore_claimed(mm, u, s, r);
        pthread_mutex_unlock(&mm->lock);
        if (st != MZ_AGAIN) {
            return st;
        }
    }
}

static mz_status job_wait_unit(mz_mem *mm, struct rjob *j, mz_unit *u);
static void job_note_compute(struct rjob *j);

mz_status mz_mem_acquire_layer(mz_mem *mm, int layer, size_t n_chunks)
{
    MZ_ASSERT(layer >= 0 && layer < mm->n_layer && n_chunks <= mm->max_chunks);
    mz_status s;
    struct rjob *j = mm->job;
    mz_unit *w = &mm->wt->units[layer];
    if (mz_unit_state_get(w) != MZ_UNIT_RESIDENT &&
        (s = j ? job_wait_unit(mm, j, w) : restore_unit(mm, w, NULL)))
        return s;
    for (size_t c = 0; c < n_chunks; c++) {
        mz_unit *u = kv_unit(mm, layer, c);
        mz_unit_state st = mz_unit_state_get(u);
        if (st == MZ_UNIT_RESIDENT) continue;
        if (st == MZ_UNIT_ABSENT) {
            sync_kv(mm); /* mapped by a reserve since the last sync */
            if (mz_unit_state_get(u) == MZ_UNIT_RESIDENT) continue;
        }
        if ((s = j ? job_wait_unit(mm, j, u) : restore_unit(mm, u, NULL))) return s;
    }
    if (j && layer == 0) job_note_compute(j);
    return MZ_OK;
}

mz_status mz_mem_restore_all(mz_mem *mm, mz_restore_report *r)
{
    mz_restore_report dummy;
    if (!r) r = &dummy;
    memset(r, 0, sizeof *r);
    double t0 = mz_time_ms();
    mz_status s = MZ_OK;
    sync_kv(mm);
    /* Forward-in: layer by layer, the weights and then the chunks in order,
     * which pops the compressed stack from its top. */
    for (int l = 0; l < mm->n_layer && !s; l++) {
        mz_unit *w = &mm->wt->units[l];
        if (mz_unit_state_get(w) != MZ_UNIT_RESIDENT) s = restore_unit(mm, w, r);
        for (size_t c = 0; c < mm->kv->n_chunks && !s; c++) {
            mz_unit *u = kv_unit(mm, l, c);
            if (mz_unit_state_get(u) != MZ_UNIT_RESIDENT) s = restore_unit(mm, u, r);
        }
    }
    r->time_ms = mz_time_ms() - t0;
    return s;
}

mz_status mz_mem_kv_truncate(mz_mem *mm, size_t n_pos)
{
    size_t keep = (n_pos + MZ_KV_CHUNK_TOKENS - 1) / MZ_KV_CHUNK_TOKENS;
    size_t n_drop_stack = 0;
    mz_status s = MZ_OK;
    sync_kv(mm);
    pthread_mutex_lock(&mm->lock);
    /* [store] chunks from the one n_pos falls in will be written again: their
     * stored copies are no longer current (the store file keeps the record
     * until the next manifest stops naming it). */
    for (int l = 0; l < mm->n_layer; l++)
        for (size_t c = n_pos / MZ_KV_CHUNK_TOKENS; c < mm->max_chunks; c++) {
            mz_unit *u = kv_unit(mm, l, c);
            mz_unit_state st = mz_unit_state_get(u);
            /* A kept chunk stored at its clean slot keeps it as an ordinary
             * slot; a dropped one's clean slot is left to the loop below. */
            if (c < keep || (st != MZ_UNIT_STORED_RAW && st != MZ_UNIT_STORED_COMPRESSED)) {
                if (u->clean && u->slot != u->clean) mm->store_leaked = true;
                u->clean = 0;
            }
        }
    for (int l = 0; l < mm->n_layer; l++) {
        for (size_t c = keep; c < mm->kv->n_chunks; c++) {
            mz_unit *u = kv_unit(mm, l, c);
            mz_unit_state st = mz_unit_state_get(u);
            if (st == MZ_UNIT_COMPRESSED) n_drop_stack++;
            if (st != MZ_UNIT_STORED_RAW && st != MZ_UNIT_STORED_COMPRESSED) continue;
            MZ_ASSERT(mz_unit_claim(u, st));
            if (u->slot != u->clean) swap_slot_free(mm, u->slot); /* [store] kept for the manifest */
            else mm->store_leaked = true;
            u->clean = 0;
            u->slot = 0;
            /* Back to a plain mapping that the cache is about to unmap. */
            if ((s = mz_unit_map_pages(u))) {
                mz_unit_settle(u, st);
                goto out;
            }
            mz_unit_settle(u, MZ_UNIT_RESIDENT);
        }
    }
    /* Remove the truncated chunks' stack items; items above them that are
     * kept are decoded back into their chunks (the stack is LIFO). */
    while (n_drop_stack) {
        const uint8_t *data;
        size_t len;
        uint64_t tag;
        s = mz_compstack_peek_top(mm->stack, &data, &len, &tag);
        MZ_ASSERT(s == MZ_OK);
        mz_unit *t = unit_by_tag(mm, tag);
        MZ_ASSERT(mz_unit_claim(t, MZ_UNIT_COMPRESSED));
        if ((s = mz_unit_map_pages(t))) {
            mz_unit_settle(t, MZ_UNIT_COMPRESSED);
            goto out;
        }
        if ((size_t)t->chunk >= keep) {
            s = mz_compstack_drop_top(mm->stack);
            MZ_ASSERT(s == MZ_OK);
            n_drop_stack--;
        } else if ((s = decode_top_into(mm, t))) {
            mz_unit_release_pages(t);
            mz_unit_settle(t, MZ_UNIT_COMPRESSED);
            goto out;
        }
        mz_unit_settle(t, MZ_UNIT_RESIDENT);
    }
out:
    pthread_mutex_unlock(&mm->lock);
    return s;
}

/* ---- pipelined restore (restore_generate, paper §4.2 / §6.3) ----------------------------- *
 *
 * Three activities bring every unit that is evicted when the request
 * arrives back in forward order (layer by layer: the weight block, then the
 * layer's KV chunks), while the owner thread computes and waits per unit in
 * mz_mem_acquire_layer. They run on 1-3 threads (the split: see
 * job_thread_main and mz_mem_restore_begin):
 *
 *   alloc    pre-faults each unit's range (MADV_POPULATE_WRITE; else a
 *            write per page), on every restore thread: each claims the
 *            next unit in forward order, and the prefix of units done is
 *            published (j->n_alloc). The ranges were all made writable
 *            at the start (mz_unit_map_pages, one pass: see
 *            mz_mem_restore_begin). It runs ahead of the loaders; without
 *            alloc||reload overlap the loaders start only when it has
 *            finished.
 *   storage  weight blocks (O_DIRECT batch from the model file, hash check)
 *            and stored chunks (swap file, checksummed), forward order.
 *   memory   the compressed stack from its top (its head order; forward
 *            order after a backward-out eviction), one item at a time; the
 *            stack shrinks item by item.
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

#define STO_DEPTH 4

typedef struct job_thread {
    struct rjob *j;
    unsigned mask;             /* 1 << ACT_*: the activities this thread runs */
} job_thread;

typedef struct rjob {
    mz_mem *mm;
    size_t n;                  /* units in the job */
    mz_unit **units;           /* forward order */
    mz_unit_state *from;       /* state at the start */
    size_t *kv_idx;            /* [n_layer * max_chunks]: job index of a KV unit, SIZE_MAX if none */
    bool overlap_alloc;
    unsigned delay_us_max;
    uint64_t seed;
    uint8_t *scratch;          /* storage worker's (page-aligned) */
    /* Storage path: stored KV chunks are read asynchronously, up to
     * STO_DEPTH units in flight (one O_DIRECT read of a chunk is one or two
     * requests; the disk needs about four to reach its throughput). Only
     * the thread running the storage activity touches these. NULL aio:
     * one synchronous read at a time. */
    mz_swap_aio_t *aio;
    struct sto_req {
        mz_swap_item item;
        size_t i;              /* job index of the unit */
        uint8_t *scratch;      /* encoded record (STORED_COMPRESSED), page-aligned */
        bool busy;
    } req[STO_DEPTH];
    int n_inflight;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t n_opened;           /* prefix of units made readable and writable */
    size_t alloc_next;         /* next unit an allocating thread claims */
    unsigned char *mapped;     /* [n]: mapped and pre-faulted (any order) */
    size_t n_alloc;            /* prefix of units mapped and pre-faulted */
    size_t n_ready;            /* units made RESIDENT */
    int n_running;             /* workers still running */
    bool failed;
    mz_status err;
    char errmsg[512];
    unsigned char *loaded;     /* [n]: made resident by a loader */
    pthread_t th[3];
    int n_th;
    int n_threads;             /* the split: restore threads started */
    job_thread thr[3];         /* each thread's activities */
    double act_ms[3];          /* busy time per activity (ACT_*) */
    size_t n_storage, n_mem;   /* units each loader handles */
    double t_begin, t_ready;
    double stall_ms;           /* owner: time waiting in acquire_layer */
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
    return j->n_alloc >= (j->overlap_alloc ? i + 1 : j->n);
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
enum { ACT_ALLOC, ACT_STORAGE, ACT_MEM, ACT_COUNT };

typedef struct job_act {
    int kind;
    size_t next;               /* alloc/storage: next unit index; memory: items popped */
    uint64_t rng;
    double busy;
    bool done;
} job_act;

static int job_alloc_step(rjob *j, job_act *a, size_t *seen_alloc)
{
    (void)seen_alloc;
    pthread_mutex_lock(&j->mu);
    const bool done = j->failed || j->alloc_next >= j->n;
    const size_t i = done ? 0 : j->alloc_next++;
    pthread_mutex_unlock(&j->mu);
    if (done) return JOB_DONE;
    double t0 = mz_time_ms();
    job_delay(j, &a->rng);
    mz_unit *u = j->units[i];
    /* Nobody else touches u before n_alloc passes i (the loaders wait
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
    j->mapped[i] = 1;
    while (j->n_alloc < j->n && j->mapped[j->n_alloc]) j->n_alloc++;
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
    snprintf(msg, sizeof msg, "cannot restore %s: %s", unit_name(u, nm, sizeof nm), mz_last_error());
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
    if (u->slot != u->clean) swap_slot_free(mm, u->slot); /* [store] a clean copy stays */
    u->slot = 0;
    pthread_mutex_unlock(&mm->lock);
    job_settled(j, i, u);
    return MZ_OK;
}

/* Waits for one read in flight and finishes its unit. */
static mz_status storage_reap_one(rjob *j, bool wait)
{
    mz_swap_item *it = mz_swap_aio_reap(j->aio, wait);
    if (!it) return MZ_AGAIN;
    struct sto_req *r = (struct sto_req *)(void *)it; /* item is the first member */
    r->busy = false;
    j->n_inflight--;
    return storage_unit_finish(j, r->i, it->status, it->len, r->scratch);
}

/* After a failure: wait for every read in flight (their buffers must stay
 * valid until the kernel is done) and put those units back. */
static void storage_drain(rjob *j)
{
    while (j->n_inflight > 0) {
        mz_swap_item *it = mz_swap_aio_reap(j->aio, true);
        if (!it) break;
        struct sto_req *r = (struct sto_req *)(void *)it;
        r->busy = false;
        j->n_inflight--;
        mz_unit_release_pages(j->units[r->i]);
        mz_unit_settle(j->units[r->i], j->from[r->i]);
    }
}

static int job_storage_step(rjob *j, job_act *a, size_t *seen_alloc)
{
    mz_mem *mm = j->mm;
    double t0 = mz_time_ms();
    /* Finished reads first: they free a place in the queue. */
    if (j->n_inflight > 0) {
        mz_status st = storage_reap_one(j, false);
        if (st != MZ_AGAIN) {
            if (st) storage_drain(j);
            a->busy += mz_time_ms() - t0;
            return st ? JOB_DONE : JOB_PROGRESS;
        }
    }
    while (a->next < j->n && j->from[a->next] != MZ_UNIT_DROPPED &&
           j->from[a->next] != MZ_UNIT_STORED_RAW && j->from[a->next] != MZ_UNIT_STORED_COMPRESSED)
        a->next++;
    bool failed = false, ready = false;
    size_t i = a->next;
    if (i < j->n) {
        pthread_mutex_lock(&j->mu);
        failed = j->failed;
        ready = job_allocated(j, i);
        *seen_alloc = j->n_alloc;
        pthread_mutex_unlock(&j->mu);
    } else {
        pthread_mutex_lock(&j->mu);
        failed = j->failed;
        pthread_mutex_unlock(&j->mu);
    }
    if (failed) {
        storage_drain(j);
        return JOB_DONE;
    }
    bool queue_full = j->n_inflight >= STO_DEPTH;
    bool is_kv = i < j->n && j->from[i] != MZ_UNIT_DROPPED;
    if (i >= j->n || !ready || (queue_full && is_kv)) {
        /* Nothing to start now: wait for a read in flight, if any. (A weight
         * block is read synchronously through the model file's own queue;
         * chunk reads in flight go on meanwhile.) */
        if (j->n_inflight == 0) return i >= j->n ? JOB_DONE : JOB_BLOCKED;
        mz_status st = storage_reap_one(j, true);
        if (st) storage_drain(j);
        a->busy += mz_time_ms() - t0;
        return st ? JOB_DONE : JOB_PROGRESS;
    }
    a->next++;
    mz_unit_state from = j->from[i];
    job_delay(j, &a->rng);
    mz_unit *u = j->units[i];
    char nm[64];
    if (!mz_unit_claim(u, from)) {
        char msg[200];
        snprintf(msg, sizeof msg, "cannot restore %s: it is busy", unit_name(u, nm, sizeof nm));
        job_fail(j, MZ_E_INVAL, msg);
        storage_drain(j);
        return JOB_DONE;
    }
    if (is_kv && j->aio) {
        struct sto_req *r = NULL;
        for (int q = 0; q < STO_DEPTH && !r; q++)
            if (!j->req[q].busy) r = &j->req[q];
        MZ_ASSERT(r);
        r->busy = true;
        r->i = i;
        bool raw = from == MZ_UNIT_STORED_RAW;
        r->item = (mz_swap_item){.buf = raw ? u->buf : r->scratch,
                                 .len = raw ? u->bytes : mm->scratch_cap,
                                 .slot = u->slot};
        j->n_inflight++;
        /* A request refused up front is still reaped, with its error. */
        (void)mz_swap_aio_submit_read(j->aio, &r->item);
        a->busy += mz_time_ms() - t0;
        return JOB_PROGRESS;
    }
    mz_status s = read_stored(mm, u, from, j->scratch, mm->scratch_cap);
    if (s) {
        char msg[512];
        snprintf(msg, sizeof msg, "cannot restore %s: %s", unit_name(u, nm, sizeof nm),
                 mz_last_error());
        mz_unit_release_pages(u);
        mz_unit_settle(u, from);
        job_fail(j, s, msg);
        storage_drain(j);
        return JOB_DONE;
    }
    if (from != MZ_UNIT_DROPPED) {
        pthread_mutex_lock(&mm->lock);
        swap_slot_free(mm, u->slot);
        u->slot = 0;
        pthread_mutex_unlock(&mm->lock);
    }
    job_settled(j, i, u);
    a->busy += mz_time_ms() - t0;
    return JOB_PROGRESS;
}

static int job_mem_step(rjob *j, job_act *a, size_t *seen_alloc)
{
    mz_mem *mm = j->mm;
    if (a->next >= j->n_mem) return JOB_DONE;
    const uint8_t *data;
    size_t len;
    uint64_t tag;
    pthread_mutex_lock(&mm->lock);
    mz_status s = mz_compstack_peek_top(mm->stack, &data, &len, &tag);
    pthread_mutex_unlock(&mm->lock);
    if (s) return JOB_DONE; /* empty */
    mz_unit *u = unit_by_tag(mm, tag);
    size_t i = j->kv_idx[(size_t)u->layer * mm->max_chunks + (size_t)u->chunk];
    MZ_ASSERT(i != SIZE_MAX);
    pthread_mutex_lock(&j->mu);
    bool failed = j->failed, ready = job_allocated(j, i);
    *seen_alloc = j->n_alloc;
    pthread_mutex_unlock(&j->mu);
    if (failed) return JOB_DONE;
    if (!ready) return JOB_BLOCKED;
    double t0 = mz_time_ms();
    job_delay(j, &a->rng);
    char nm[64];
    pthread_mutex_lock(&mm->lock);
    bool claimed = mz_unit_claim(u, MZ_UNIT_COMPRESSED);
    pthread_mutex_unlock(&mm->lock);
    if (!claimed) {
        char msg[200];
        snprintf(msg, sizeof msg, "cannot restore %s: it is busy", unit_name(u, nm, sizeof nm));
        job_fail(j, MZ_E_INVAL, msg);
        return JOB_DONE;
    }
    /* data stays valid: only this activity pops the stack during the job. */
    s = mz_codec_decode(u->enc, data, len, (mz_f16 *)u->buf, mm->n_values);
    if (s) {
        char msg[512];
        snprintf(msg, sizeof msg, "cannot restore %s: decoding from the compressed stack "
                 "failed: %s", unit_name(u, nm, sizeof nm), mz_last_error());
        mz_unit_release_pages(u);
        mz_unit_settle(u, MZ_UNIT_COMPRESSED);
        job_fail(j, s, msg);
        return JOB_DONE;
    }
    pthread_mutex_lock(&mm->lock);
    s = mz_compstack_drop_top(mm->stack);
    pthread_mutex_unlock(&mm->lock);
    MZ_ASSERT(s == MZ_OK);
    a->next++;
    job_settled(j, i, u);
    a->busy += mz_time_ms() - t0;
    return JOB_PROGRESS;
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
        acts[k] = (job_act){.kind = k, .rng = j->seed ^ salt[k], .done = !(t->mask & (1u << k))};
    for (;;) {
        bool progress = false, pending = false;
        size_t seen = SIZE_MAX;
        for (int k = 0; k < ACT_COUNT; k++) {
            if (acts[k].done) continue;
            size_t sa = SIZE_MAX;
            int r = steps[k](j, &acts[k], &sa);
            if (r == JOB_DONE) acts[k].done = true;
            else if (r == JOB_PROGRESS) progress = true;
            else seen = MZ_MIN(seen, sa);
            pending |= !acts[k].done;
        }
        if (!pending) break;
        if (progress) continue;
        /* Every unfinished activity waits for the allocation thread. */
        pthread_mutex_lock(&j->mu);
        while (j->n_alloc == seen && !j->failed) pthread_cond_wait(&j->cv, &j->mu);
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
    if (j->scratch) mz_pages_free(j->scratch, j->mm->scratch_cap);
    for (int q = 0; q < STO_DEPTH; q++)
        if (j->req[q].scratch) mz_pages_free(j->req[q].scratch, j->mm->scratch_cap);
    if (j->aio) mz_swap_aio_free(j->aio);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

mz_status mz_mem_restore_begin(mz_mem *mm, const mz_restore_job_params *p)
{
    MZ_ASSERT(!mm->job);
    memset(&mm->last, 0, sizeof mm->last);
    mm->last_first_compute_ms = mm->last_ready_ms = 0;
    sync_kv(mm);
    rjob *j = mz_calloc(1, sizeof *j);
    if (!j) return mz_fail(MZ_E_NOMEM, "out of memory starting the restore workers");
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->mm = mm;
    j->overlap_alloc = p ? p->overlap_alloc : true;
    j->delay_us_max = p ? p->delay_us_max : 0;
    j->seed = p ? p->seed : 0;
    j->t_begin = mz_time_ms();
    j->first_compute_ms = -1;
    size_t cap = (size_t)mm->n_layer * (1 + mm->max_chunks);
    j->units = mz_calloc(MZ_MAX(cap, 1), sizeof *j->units);
    j->from = mz_calloc(MZ_MAX(cap, 1), sizeof *j->from);
    j->loaded = mz_calloc(MZ_MAX(cap, 1), 1);
    j->mapped = mz_calloc(MZ_MAX(cap, 1), 1);
    j->kv_idx = mz_calloc(MZ_MAX((size_t)mm->n_layer * mm->max_chunks, 1), sizeof *j->kv_idx);
    if (!j->units || !j->from || !j->loaded || !j->mapped || !j->kv_idx) {
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
    mz_status s = MZ_OK;
    if (any_dropped) {
        pthread_mutex_lock(&mm->lock);
        s = ensure_dfile(mm);
        pthread_mutex_unlock(&mm->lock);
    }
    if (!s && any_stored) {
        j->scratch = mz_pages_alloc(mm->scratch_cap);
        if (!j->scratch) s = mz_fail(MZ_E_NOMEM, "out of memory starting the restore workers");
        /* Reads in flight need their own buffers; without them (or without
         * the queue) the storage path reads one unit at a time. */
        bool ok = !s && mz_swap_aio_init(mm->swap, STO_DEPTH, &j->aio) == MZ_OK;
        for (int q = 0; ok && q < STO_DEPTH; q++)
            ok = (j->req[q].scratch = mz_pages_alloc(mm->scratch_cap)) != NULL;
        if (!ok && j->aio) {
            mz_swap_aio_free(j->aio);
            j->aio = NULL;
        }
    }
    if (s) {
        job_free(j);
        return s;
    }
    mm->last.n_units = j->n;
    mm->last.n_storage_units = j->n_storage;
    mm->last.n_mem_units = j->n_mem;
    if (j->n == 0) {
        job_free(j);
        return MZ_OK; /* nothing to do: acquire_layer sees no job */
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
        mz_fail_prefix(s, "cannot restore %s", unit_name(j->units[j->n_opened], nm, sizeof nm));
        for (size_t i = 0; i < j->n_opened; i++) mz_unit_release_pages(j->units[i]);
        job_free(j);
        return s;
    }
    /* The split (n_restore_threads). Allocation is the costliest activity
     * (faulting in pages the hypervisor reclaimed) and runs on every
     * restore thread, each claiming the next unit; besides it: 3 = storage
     * and decoding on threads of their own; 2 = decoding shares the first
     * thread and the storage path, which mostly waits on reads, the
     * second; 1 = everything in turn on one thread. */
    /* The memory path empties stack segments while the others fault pages
     * in: their unmapping waits for restore_end. */
    pthread_mutex_lock(&mm->lock);
    mz_compstack_defer_unmap(mm->stack, true);
    pthread_mutex_unlock(&mm->lock);
    int nt = p && p->n_threads >= 1 && p->n_threads <= 3 ? p->n_threads : mm->restore_threads;
    static const unsigned masks[3][3] = {
        {1u << ACT_ALLOC | 1u << ACT_STORAGE | 1u << ACT_MEM, 0, 0},
        {1u << ACT_ALLOC | 1u << ACT_MEM, 1u << ACT_ALLOC | 1u << ACT_STORAGE, 0},
        {1u << ACT_ALLOC, 1u << ACT_ALLOC | 1u << ACT_STORAGE, 1u << ACT_ALLOC | 1u << ACT_MEM}};
    j->n_threads = nt;
    j->n_running = nt;
    for (int t = 0; t < nt; t++) {
        j->thr[t] = (job_thread){.j = j, .mask = masks[nt - 1][t]};
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
    mm->job = j;
    return MZ_OK;
}

/* Owner thread: waits until u is RESIDENT or the job failed / ended. */
static mz_status job_wait_unit(mz_mem *mm, rjob *j, mz_unit *u)
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
    if (failed) return mz_fail(j->err, "%s", j->errmsg);
    /* Not in the job (or the job ended without it): restore it here. */
    return restore_unit(mm, u, NULL);
}

static void job_note_compute(rjob *j)
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
        mm->last_first_compute_ms = j->first_compute_ms;
        mm->last_ready_ms = j->t_ready;
        mm->job = NULL;
        job_free(j);
    }
    if (out) *out = mm->last;
    return s;
}

bool mz_mem_restore_running(const mz_mem *mm) { return mm->job != NULL; }
void mz_mem_last_restore(const mz_mem *mm, mz_restore_timings *out) { *out = mm->last; }
void mz_mem_set_last_restore(mz_mem *mm, const mz_restore_timings *t) { mm->last = *t; }

void mz_mem_restore_order_probe(const mz_mem *mm, double *first_compute_ms, double *ready_ms)
{
    *first_compute_ms = mm->last_first_compute_ms;
    *ready_ms = mm->last_ready_ms;
}

/* ---- stats, teardown, test hooks ------------------------------------------------------ */

static void count_unit(mz_mem_category *cat, const mz_unit *u)
{
    cat->total_bytes += u->bytes;
    cat->n_units++;
    switch (mz_unit_state_get(u)) {
    case MZ_UNIT_RESIDENT:
    case MZ_UNIT_BUSY: /* moving right now: counted where it came from, approximately */
        cat->resident_bytes += u->bytes;
        cat->n_resident++;
        break;
    case MZ_UNIT_COMPRESSED: cat->compressed_bytes += u->enc_bytes; break;
    case MZ_UNIT_STORED_RAW: cat->stored_bytes += u->bytes; break;
    case MZ_UNIT_STORED_COMPRESSED: cat->stored_bytes += u->enc_bytes; break;
    case MZ_UNIT_DROPPED: cat->dropped_bytes += u->bytes; break;
    default: break;
    }
}

void mz_mem_get_stats(mz_mem *mm, mz_mem_stats *out)
{
    memset(out, 0, sizeof *out);
    sync_kv(mm);
    pthread_mutex_lock(&mm->lock);
    for (int l = 0; l < mm->n_layer; l++) count_unit(&out->weights, &mm->wt->units[l]);
    for (int l = 0; l < mm->n_layer; l++)
        for (size_t c = 0; c < mm->max_chunks; c++)
            if (mz_unit_state_get(kv_unit(mm, l, c)) != MZ_UNIT_ABSENT)
                count_unit(&out->kv, kv_unit(mm, l, c));
    mz_compstack_stats cs;
    mz_compstack_get_stats(mm->stack, &cs);
    out->compstack_mapped_bytes = cs.bytes_mapped;
    if (mm->swap) {
        mz_swapfile_stats ss;
        mz_swapfile_get_stats(mm->swap, &ss);
        out->swap_file_bytes = ss.file_bytes;
        out->swap_direct = mz_swapfile_is_direct(mm->swap);
    }
    pthread_mutex_unlock(&mm->lock);
    out->pinned_bytes = mm->model->pinned_bytes;
    size_t total = out->weights.total_bytes + out->kv.total_bytes;
    size_t kept = out->weights.resident_bytes + out->weights.compressed_bytes +
                  out->kv.resident_bytes + out->kv.compressed_bytes;
    out->remaining_pct = total ? 100.0 * (double)kept / (double)total : 100.0;
    codec_display_name(mm->codec, out->codec, sizeof out->codec);
    snprintf(out->placement, sizeof out->placement, "%s", mz_kv_placement_name(mm->placement));

    /* Policy: stage and planned restore time of each path, from the units'
     * states and the profile's per-unit times. */
    bool weights_evictable = mz_wtable_refs(mm->wt) == 1;
    mz_policy_view v;
    mz_restore_plan_times rt;
    pthread_mutex_lock(&mm->lock);
    fill_view(mm, weights_evictable, &v);
    out->stage = mm->policy->stage(mm->policy, &v);
    mz_policy_restore_times(&v, &rt);
    pthread_mutex_unlock(&mm->lock);
    out->planned_mem_ms = (double)rt.mem_ns / 1e6;
    out->planned_storage_ms = (double)rt.storage_ns / 1e6;
    out->planned_alloc_ms = (double)rt.alloc_ns / 1e6;
    out->unit_t_d_ms = (double)mm->times.t_d_ns / 1e6;
    out->unit_t_rkv_ms = (double)mm->times.t_rkv_ns / 1e6;
    out->unit_t_rw_ms = (double)mm->times.t_rw_ns / 1e6;
    out->unit_t_alloc_ms = (double)mm->times.t_alloc_kv_ns / 1e6;
    out->threshold_T = (size_t)mz_profile_threshold(&mm->times, mm->n_layer);
    out->profile_measured = mm->profile_measured;
    snprintf(out->policy, sizeof out->policy, "%s", mm->policy->name);
    snprintf(out->evict_order, sizeof out->evict_order, "%s", mz_evict_order_name(mm->pprm.order));
}

void mz_mem_free(mz_mem *mm)
{
    if (!mm) return;
    if (mm->job) {
        mz_status s0 = mz_mem_restore_end(mm, NULL);
        (void)s0;
    }
    if (mm->wt) {
        /* Weights belong to the engine, which restores them when it goes. */
        if (mm->wpinned) mz_mem_unpin_weights(mm);
        mz_wtable_detach(mm->wt);
    }
    free(mm->wpinned);
    if (mm->policy) mm->policy->free(mm->policy);
    mz_evict_plan_free(&mm->plan);
    free(mm->kv_seq);
    if (mm->shared_swap && mm->swap) {
        /* The engine's file: give this session's slots back at once. */
        for (size_t i = 0; i < (size_t)mm->n_layer * mm->max_chunks; i++) {
            mz_unit_state st = mz_unit_state_get(&mm->kvu[i]);
            if (st == MZ_UNIT_STORED_RAW || st == MZ_UNIT_STORED_COMPRESSED)
                swap_slot_free(mm, mm->kvu[i].slot);
        }
    } else {
        mz_swapfile_close(mm->swap);
    }
    if (!mm->shared) mz_dfile_close(mm->dfile);
    mz_compstack_free(mm->stack);
    mz_pages_free(mm->scratch, mm->scratch_cap);
    free(mm->kvu);
    free(mm->layer_codec);
    free(mm->swap_dir);
    pthread_mutex_destroy(&mm->lock);
    free(mm);
}

mz_unit_state mz_mem_kv_state(mz_mem *mm, int layer, size_t chunk)
{
    sync_kv(mm);
    return mz_unit_state_get(kv_unit(mm, layer, chunk));
}

const mz_unit_times *mz_mem_unit_times(const mz_mem *mm) { return &mm->times; }

mz_unit_state mz_mem_weights_state(mz_mem *mm, int layer)
{
    return mz_unit_state_get(&mm->wt->units[layer]);
}

mz_swapfile_t *mz_mem_swapfile(mz_mem *mm) { return mm->swap; }
const mz_codec *mz_mem_codec(const mz_mem *mm) { return mm->codec; }
const mz_codec *mz_mem_layer_codec(const mz_mem *mm, int layer) { return &mm->layer_codec[layer]; }
size_t mz_mem_enc_expected(const mz_mem *mm) { return enc_expected(mm); }

bool mz_mem_is_valid(mz_mem *mm)
{
    bool ok = mz_compstack_is_valid(mm->stack);
    size_t n_comp = 0, n_stored = 0;
    sync_kv(mm);
    for (int l = 0; l < mm->n_layer; l++) {
        for (size_t c = 0; c < mm->max_chunks; c++) {
            const mz_unit *u = kv_unit(mm, l, c);
            mz_unit_state s = mz_unit_state_get(u);
            if (s == MZ_UNIT_COMPRESSED) n_comp++;
            if (s == MZ_UNIT_STORED_RAW || s == MZ_UNIT_STORED_COMPRESSED) {
                n_stored++;
                ok = ok && mm->swap && mz_swapfile_slot_len(mm->swap, u->slot) ==
                                           (s == MZ_UNIT_STORED_RAW ? u->bytes : u->enc_bytes);
            }
            if (c >= mm->kv->n_chunks) ok = ok && s == MZ_UNIT_ABSENT;
            ok = ok && s != MZ_UNIT_BUSY && s != MZ_UNIT_DROPPED;
            if (u->clean) { /* [store] a resident chunk's clean copy holds a slot too */
                ok = ok && mm->swap && mz_swapfile_slot_len(mm->swap, u->clean) == u->bytes;
                if (s != MZ_UNIT_STORED_RAW) n_stored++;
                else ok = ok && u->slot == u->clean;
            }
        }
    }
    ok = ok && n_comp == mz_compstack_count(mm->stack);
    /* [store] truncation leaves dropped chunks' clean records for the manifest */
    ok = ok && (atomic_load(&mm->n_slots) == n_stored || mm->store_leaked);
    if (mm->swap) {
        mz_swapfile_stats ss;
        mz_swapfile_get_stats(mm->swap, &ss);
        /* A shared file also holds the other sessions' slots. */
        ok = ok && (mm->shared_swap || mm->store_leaked ? ss.n_slots >= n_stored
                                                        : ss.n_slots == n_stored);
    }
    return ok;
}

/* ---- public names ---------------------------------------------------------------------- */

static const char *const placement_names[] = {
    [MZ_KV_PLACE_AUTO] = "auto",
    [MZ_KV_PLACE_COMPRESSED] = "compressed",
    [MZ_KV_PLACE_STORAGE] = "storage",
    [MZ_KV_PLACE_STORAGE_COMPRESSED] = "storage-compressed",
    [MZ_KV_PLACE_MIXED] = "mixed",
};

const char *mz_kv_placement_name(mz_kv_placement p)
{
    return (unsigned)p < MZ_ARRAY_LEN(placement_names) ? placement_names[p] : NULL;
}

mz_status mz_kv_placement_parse(const char *name, mz_kv_placement *out)
{
    for (size_t i = 0; name && i < MZ_ARRAY_LEN(placement_names); i++) {
        if (strcmp(name, placement_names[i]) == 0) {
            *out = (mz_kv_placement)i;
            return MZ_OK;
        }
    }
    return mz_fail(MZ_E_INVAL, "unknown KV placement '%s' (known: auto, compressed, storage, "
                               "storage-compressed, mixed)", name ? name : "(null)");
}

static const char *const order_names[] = {
    [MZ_EVICT_BACKWARD] = "backward",
    [MZ_EVICT_FORWARD] = "forward",
    [MZ_EVICT_RANDOM] = "random",
};

const char *mz_evict_order_name(mz_evict_order o)
{
    return (unsigned)o < MZ_ARRAY_LEN(order_names) ? order_names[o] : NULL;
}

mz_status mz_evict_order_parse(const char *name, mz_evict_order *out)
{
    for (size_t i = 0; name && i < MZ_ARRAY_LEN(order_names); i++) {
        if (strcmp(name, order_names[i]) == 0) {
            *out = (mz_evict_order)i;
            return MZ_OK;
        }
    }
    return mz_fail(MZ_E_INVAL, "unknown eviction order '%s' (known: backward, forward, random)",
                   name ? name : "(null)");
}

const char *mz_evict_stage_name(mz_evict_stage st)
{
    static const char *const names[] = {
        [MZ_EVICT_STAGE_NONE] = "-",           [MZ_EVICT_STAGE_KV_ONLY] = "kv-only",
        [MZ_EVICT_STAGE_KV_AND_W] = "kv-and-w", [MZ_EVICT_STAGE_W_ONLY] = "w-only",
        [MZ_EVICT_STAGE_COMP_KV] = "comp-kv",   [MZ_EVICT_STAGE_DONE] = "done",
    };
    return (unsigned)st < MZ_ARRAY_LEN(names) ? names[st] : NULL;
}

/* ---- [store] hooks for the session store (src/store/session_store.c) ------------------------ */

void mz_mem_use_store_file(mz_mem *mm, mz_swapfile_t *sf)
{
    pthread_mutex_lock(&mm->lock);
    MZ_ASSERT(!mm->swap);
    mm->swap = sf;
    mm->shared_swap = false; /* ours: closed (kept on disk) by mz_mem_free */
    pthread_mutex_unlock(&mm->lock);
}

mz_status mz_mem_store_chunk(mz_mem *mm, int layer, size_t chunk, const _Atomic size_t *full,
                             bool *clean, bool *wrote)
{
    MZ_ASSERT(layer >= 0 && layer < mm->n_layer && chunk < mm->max_chunks);
    mz_unit *u = kv_unit(mm, layer, chunk);
    mz_status s = MZ_OK;
    *wrote = false;
    pthread_mutex_lock(&mm->lock);
    /* *full is lowered before a truncation takes mm->lock, so a chunk about
     * to be cut is never given a copy after the truncation cleared it. */
    if (chunk >= atomic_load(full)) {
        *clean = false;
        pthread_mutex_unlock(&mm->lock);
        return MZ_OK;
    }
    if (!u->clean && mm->swap) {
        mz_unit_state st = mz_unit_state_get(u);
        if (st == MZ_UNIT_STORED_RAW) {
            u->clean = u->slot; /* evicted raw into the store file: already a copy */
        } else if (st == MZ_UNIT_RESIDENT && mz_unit_claim(u, MZ_UNIT_RESIDENT)) {
            mz_swap_slot slot = 0;
            s = swap_write(mm, u->buf, u->bytes, kv_tag(layer, chunk), &slot);
            if (!s) u->clean = slot;
            *wrote = !s;
            mz_unit_settle(u, MZ_UNIT_RESIDENT);
        }
    }
    *clean = u->clean != 0;
    pthread_mutex_unlock(&mm->lock);
    return s;
}

mz_status mz_mem_store_clean_info(mz_mem *mm, int layer, size_t chunk, mz_swap_slot_info *out)
{
    mz_unit *u = kv_unit(mm, layer, chunk);
    pthread_mutex_lock(&mm->lock);
    mz_status s = u->clean && mm->swap ? mz_swapfile_slot_info(mm->swap, u->clean, out)
                                       : mz_fail(MZ_E_INVAL, "no stored copy");
    pthread_mutex_unlock(&mm->lock);
    return s;
}

mz_status mz_mem_store_adopt(mz_mem *mm, int layer, size_t chunk, mz_swap_slot slot)
{
    sync_kv(mm);
    mz_unit *u = kv_unit(mm, layer, chunk);
    if (!mz_unit_claim(u, MZ_UNIT_RESIDENT))
        return mz_fail(MZ_E_INVAL, "KV chunk %d/%zu is not a fresh resident chunk", layer, chunk);
    u->slot = u->clean = slot;
    atomic_fetch_add(&mm->n_slots, 1);
    mz_unit_release_pages(u);
    mz_unit_settle(u, MZ_UNIT_STORED_RAW);
    return MZ_OK;
}

size_t mz_mem_store_n_clean_evicted(const mz_mem *mm) { return atomic_load(&mm->n_clean_evicted); }
