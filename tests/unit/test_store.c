/*
 * test_store.c — the session store (include/mzcache.h, "session store").
 *
 *   manifest   encode/decode round trip; every flipped byte and every
 *              truncation of a manifest is refused; well-formed manifests
 *              that break a rule (checksum recomputed) are refused with a
 *              named reason; session ids.
 *   persist    a persistent swap file's records survive close/reopen via
 *              import; an overlapping import and an overwritten record are
 *              refused.
 *   clean      (SmolLM2) a stored session's full chunks are written behind;
 *              evicting everything then writes only the partial chunk
 *              (writes counted through src/io/io.h), the clean chunks'
 *              pages are gone (mincore), and the answer after the restore
 *              equals an unstored session's.
 *   resume     (SmolLM2) the session is freed and resumed by id: the same
 *              tokens, the stored chunks restored (not recomputed), and the
 *              greedy continuation equals the uninterrupted run. A flipped
 *              byte in one chunk's record: truncated to the chunks before
 *              it, named, still the same answer. A corrupt manifest and a
 *              manifest of another model: lost, named, no session.
 *   faults     (tiny model) ENOSPC, EIO and short writes at each write of a
 *              sync: the sync fails or not, and a resume afterwards is
 *              full, truncated or lost by name, never a wrong answer.
 *   admin      list, delete (files removed), size limit (oldest first),
 *              bad ids refused, store directory mode 0700.
 *   index      (tiny model) the prefix index: built from the manifests,
 *              kept by manifest writes, cap, delete, failed resume, limit.
 */
#define _GNU_SOURCE
#include "evict_util.h"
#include "codec/codec.h"
#include "io/io.h"
#include "io/swapfile.h"
#include "store/history.h"
#include "store/manifest.h"
#include "store/store.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *T = "test_store";

/* ---- manifest ------------------------------------------------------------------------- */

static void make_manifest(mz_manifest *m, int32_t *tok, mz_swap_slot_info *recs)
{
    memset(m, 0, sizeof *m);
    m->model_id = 0x1234;
    m->tok_id = 0x5678;
    snprintf(m->codec, sizeof m->codec, "raw");
    m->n_layer = 2;
    m->chunk_bytes = 8192;
    m->created_ns = 1;
    m->updated_ns = 2;
    snprintf(m->name, sizeof m->name, "chat-1");
    m->n_tokens = 300;
    for (int i = 0; i < 300; i++) tok[i] = i * 7;
    m->tokens = tok;
    m->n_chunks = 1;
    for (int l = 0; l < 2; l++)
        recs[l] = (mz_swap_slot_info){.off = (uint64_t)l * 12288, .ext = 12288, .len = 8192,
                                      .tag = (uint64_t)l << 32, .seq = 5 + (uint64_t)l,
                                      .hash = 99, .split = 1};
    m->recs = recs;
}

static void test_manifest(void)
{
    int32_t tok[300];
    mz_swap_slot_info recs[2];
    mz_manifest m;
    make_manifest(&m, tok, recs);
    size_t n = mz_manifest_size(&m);
    unsigned char *buf = malloc(n), *b2 = malloc(n);
    CHECK(mz_manifest_encode(&m, buf, n) == MZ_OK);
    mz_manifest d;
    CHECK(mz_manifest_decode(buf, n, &d) == MZ_OK);
    CHECK(d.n_tokens == 300 && d.n_chunks == 1 && d.n_layer == 2 && d.tokens[299] == 299 * 7);
    CHECK(d.recs[1].off == 12288 && d.recs[1].tag == ((uint64_t)1 << 32) && d.recs[1].seq == 6);
    CHECK(strcmp(d.name, "chat-1") == 0 && d.model_id == 0x1234);
    mz_manifest_clear(&d);
    /* every flipped byte is refused (checksum or a rule) */
    int refused = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(b2, buf, n);
        b2[i] ^= 0x20;
        if (mz_manifest_decode(b2, n, &d) != MZ_OK) refused++;
        else mz_manifest_clear(&d);
    }
    CHECK_EQ_INT(refused, n);
    /* every truncation */
    refused = 0;
    for (size_t k = 0; k < n; k++)
        if (mz_manifest_decode(buf, k, &d) != MZ_OK) refused++;
        else mz_manifest_clear(&d);
    CHECK_EQ_INT(refused, n);
    /* well-formed but breaking a rule (the encoder refuses few; patch fields) */
    struct { const char *what; void (*f)(mz_manifest *); } bad[] = {
        {"overlap", NULL}, {"chunks>=tokens", NULL}, {"codec", NULL}, {"extent", NULL}};
    (void)bad;
    mz_manifest x = m;
    mz_swap_slot_info r2[2] = {recs[0], recs[1]};
    x.recs = r2;
    r2[1].off = 4096; /* overlaps record 0 */
    CHECK(mz_manifest_encode(&x, buf, n) == MZ_OK);
    CHECK(mz_manifest_decode(buf, n, &d) == MZ_E_FORMAT);
    CHECK(strstr(mz_last_error(), "overlap") != NULL);
    r2[1] = recs[1];
    r2[0].len = 4096; /* not a chunk */
    CHECK(mz_manifest_encode(&x, buf, n) == MZ_OK);
    CHECK(mz_manifest_decode(buf, n, &d) == MZ_E_FORMAT);
    CHECK(strstr(mz_last_error(), "KV chunk 0/0") != NULL);
    r2[0] = recs[0];
    x.n_tokens = 256; /* a chunk needs at least one token after it */
    CHECK(mz_manifest_encode(&x, buf, mz_manifest_size(&x)) == MZ_OK);
    CHECK(mz_manifest_decode(buf, mz_manifest_size(&x), &d) == MZ_E_FORMAT);
    x.n_tokens = 300;
    snprintf(x.codec, sizeof x.codec, "q8"); /* q8 records: 1..chunk_bytes */
    CHECK(mz_manifest_encode(&x, buf, n) == MZ_OK);
    CHECK(mz_manifest_decode(buf, n, &d) == MZ_OK);
    mz_manifest_clear(&d);
    snprintf(x.codec, sizeof x.codec, "zstd");
    CHECK(mz_manifest_encode(&x, buf, n) == MZ_OK);
    CHECK(mz_manifest_decode(buf, n, &d) == MZ_E_FORMAT);
    snprintf(x.codec, sizeof x.codec, "raw");
    /* a tail: chunk 1's records for positions 256..298 (token 299 recomputed) */
    {
        mz_swap_slot_info r4[4] = {recs[0], recs[1], recs[0], recs[1]};
        r4[2].off = 2 * 12288;
        r4[3].off = 3 * 12288;
        x.recs = r4;
        x.tail_pos = 43;
        size_t nt = mz_manifest_size(&x);
        unsigned char *bt = malloc(nt);
        CHECK(bt && mz_manifest_encode(&x, bt, nt) == MZ_OK);
        CHECK(bt && mz_manifest_decode(bt, nt, &d) == MZ_OK);
        CHECK(d.tail_pos == 43 && d.recs[3].tag == ((uint64_t)1 << 32 | 1));
        mz_manifest_clear(&d);
        x.tail_pos = 44; /* would leave no token to recompute */
        CHECK(bt && mz_manifest_encode(&x, bt, nt) == MZ_OK);
        CHECK(bt && mz_manifest_decode(bt, nt, &d) == MZ_E_FORMAT);
        x.tail_pos = 43;
        x.n_tokens = 299 + 256; /* the tail is not the last token's chunk */
        free(bt);
        nt = mz_manifest_size(&x);
        bt = malloc(nt);
        int32_t *tk = calloc(x.n_tokens, sizeof *tk);
        x.tokens = tk;
        CHECK(bt && tk && mz_manifest_encode(&x, bt, nt) == MZ_OK);
        CHECK(bt && mz_manifest_decode(bt, nt, &d) == MZ_E_FORMAT);
        free(tk);
        free(bt);
        x.tail_pos = 0;
        x.n_tokens = 300;
        x.tokens = m.tokens;
        x.recs = r2;
    }
    free(buf);
    free(b2);
    /* ids */
    CHECK(mz_session_id_valid("a") && mz_session_id_valid("chat_2.b-c"));
    CHECK(!mz_session_id_valid("") && !mz_session_id_valid("../x") && !mz_session_id_valid("a/b") &&
          !mz_session_id_valid(".hidden") && !mz_session_id_valid("-x") &&
          !mz_session_id_valid("a b") && !mz_session_id_valid(NULL));
    char longid[80];
    memset(longid, 'a', 64);
    longid[64] = 0;
    CHECK(!mz_session_id_valid(longid));
    longid[63] = 0;
    CHECK(mz_session_id_valid(longid));
}

/* ---- persistent swap file ----------------------------------------------------------------- */

static void test_persist(void)
{
    const char *path = t_tmp_path("persist.kv");
    unlink(path);
    mz_swapfile_params sp = mz_swapfile_params_default();
    sp.flags = MZ_SWAP_PERSIST;
    sp.path = path;
    mz_swapfile_t *sf = NULL;
    CHECK_MSG(mz_swapfile_open(&sp, &sf) == MZ_OK, "%s", mz_last_error());
    if (!sf) return;
    void *buf = NULL;
    CHECK(posix_memalign(&buf, 4096, 16384) == 0);
    memset(buf, 0x5a, 16384);
    mz_swap_slot s1, s2;
    CHECK(mz_swapfile_write(sf, buf, 16384, 7, &s1) == MZ_OK);
    CHECK(mz_swapfile_write(sf, buf, 100, 8, &s2) == MZ_OK);
    mz_swap_slot_info i1, i2;
    CHECK(mz_swapfile_slot_info(sf, s1, &i1) == MZ_OK && mz_swapfile_slot_info(sf, s2, &i2) == MZ_OK);
    /* a second open of the same file is refused while this one holds it */
    mz_swapfile_t *sf2 = NULL;
    CHECK(mz_swapfile_open(&sp, &sf2) == MZ_E_IO);
    mz_swapfile_close(sf);
    CHECK(access(path, F_OK) == 0); /* kept */
    CHECK(mz_swapfile_open(&sp, &sf) == MZ_OK);
    mz_swap_slot a, b, c;
    CHECK(mz_swapfile_slot_import(sf, &i1, &a) == MZ_OK);
    CHECK(mz_swapfile_slot_import(sf, &i1, &c) == MZ_E_INVAL); /* overlap */
    CHECK(mz_swapfile_slot_import(sf, &i2, &b) == MZ_OK);
    memset(buf, 0, 16384);
    size_t len = 0;
    CHECK(mz_swapfile_read(sf, a, buf, 16384, &len) == MZ_OK && len == 16384 &&
          ((unsigned char *)buf)[16383] == 0x5a);
    /* a new write never lands on imported records */
    mz_swap_slot s3;
    CHECK(mz_swapfile_write(sf, buf, 4096, 9, &s3) == MZ_OK);
    mz_swap_slot_info i3;
    CHECK(mz_swapfile_slot_info(sf, s3, &i3) == MZ_OK);
    CHECK(i3.off >= i2.off + i2.ext || i3.off + i3.ext <= i1.off);
    CHECK(i3.seq > i2.seq);
    mz_swapfile_close(sf);
    /* the record overwritten behind the manifest's back: refused on read */
    int fd = open(path, O_WRONLY);
    unsigned char z = 0x11;
    CHECK(pwrite(fd, &z, 1, (off_t)(i1.off + 4096 + 10)) == 1);
    close(fd);
    CHECK(mz_swapfile_open(&sp, &sf) == MZ_OK);
    CHECK(mz_swapfile_slot_import(sf, &i1, &a) == MZ_OK);
    CHECK(mz_swapfile_read(sf, a, buf, 16384, &len) == MZ_E_CORRUPT);
    mz_swapfile_close(sf);
    free(buf);
}

/* ---- real model: clean eviction and resume --------------------------------------------------- */

static mz_ctx_params sp_params(void)
{
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = 2048;
    cp.n_threads = 2;
    cp.kv_codec = "raw";
    cp.kv_placement = MZ_KV_PLACE_STORAGE;
    cp.swap_dir = t_tmp_path("swap"); /* every engine and session here: a session's must be its engine's */
    return cp;
}

static long chunk_resident_pages(mz_ctx_t *c, int l, size_t ch)
{
    size_t len = c->kv.chunk_bytes, pg = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char vec[1024];
    size_t np = (len + pg - 1) / pg;
    if (np > sizeof vec || mincore(c->kv.chunks[l][ch], len, vec) != 0) return -1;
    long r = 0;
    for (size_t i = 0; i < np; i++) r += vec[i] & 1;
    return r;
}

/* Starts counting I/O writes (a fault table that never fires): set before
 * the write-behind worker starts, cleared (mz_io_fault_set(NULL)) after it
 * is joined, since the table changes only while no thread does I/O. */
static void count_writes_begin(void)
{
    static const mz_io_fault never = {.op = MZ_IO_WRITE, .kind = MZ_IO_FAULT_ERRNO, .err = EIO,
                                      .nth = UINT32_MAX, .count = 1};
    mz_io_fault_set(&never);
}

/* The writes since w0, once they reach want or 30 s have passed (no clock is asserted). */
static unsigned wait_writes(unsigned w0, unsigned want)
{
    unsigned w = 0;
    for (int i = 0; i < 3000 && (w = mz_io_fault_calls(MZ_IO_WRITE) - w0) < want; i++)
        nanosleep(&(struct timespec){.tv_nsec = 10000000L}, NULL);
    return w;
}

/* Counts the writes of f. The session's write-behind worker must be idle
 * (synced, nothing new): the table changes only while no thread does I/O. */
static unsigned count_writes_during(mz_status (*f)(void *), void *arg, mz_status *s)
{
    count_writes_begin();
    *s = f(arg);
    unsigned w = mz_io_fault_calls(MZ_IO_WRITE);
    mz_io_fault_set(NULL);
    return w;
}

static mz_status do_evict_all(void *c)
{
    mz_evict_report r;
    return mz_evict(c, SIZE_MAX, &r);
}

/* The q8 round trip of chunks [0, k) of every layer, in place: what a
 * resume from a q8 store gives those chunks. */
static void q8_round_trip(mz_ctx_t *c, size_t k)
{
    const mz_codec *q8 = mz_codec_find("q8");
    size_t nv = c->kv.chunk_bytes / 2, cap = mz_codec_bound(q8, nv), len = 0;
    uint8_t *buf = malloc(cap);
    CHECK(buf != NULL);
    for (int l = 0; buf && l < c->model->cfg.n_layer; l++)
        for (size_t ch = 0; ch < k; ch++) {
            mz_f16 *p = (mz_f16 *)c->kv.chunks[l][ch];
            CHECK(mz_codec_encode(q8, p, nv, buf, cap, &len) == MZ_OK);
            CHECK(mz_codec_decode(q8, buf, len, p, nv) == MZ_OK);
        }
    free(buf);
}

#define NPROMPT 700
#define NGEN_MAX 24

/* Greedy tokens compared after each SmolLM2 resume: 24, or 8 under the
 * sanitizers (MZ_SANITIZED), where a SmolLM2 token costs about 0.2 s and
 * these continuations (8 of them) were a good part of the test's 154 s
 * under ASan. Every case still runs and compares its continuation with the
 * uninterrupted one; the decode loop, the same code each token, runs fewer
 * times. 700 + 2 x 24 tokens keep the third KV chunk partial either way. */
static size_t real_n_gen(void)
{
    return getenv("MZ_SANITIZED") ? 8 : NGEN_MAX;
}

static void test_real(void)
{
    const size_t ngen = real_n_gen();
    const char *path = t_real_model_path();
    if (!path) {
        printf("%s: real model missing, clean/resume cases skipped\n", T);
        return;
    }
    mz_model_t *m = ev_load(path);
    if (!m) return;
    mz_engine_params ep = mz_engine_params_default();
    ep.n_threads = 2;
    ep.swap_dir = t_tmp_path("swap");
    mz_engine_t *e = NULL;
    CHECK(mz_engine_create(m, &ep, &e) == MZ_OK);
    mz_store_params stp = mz_store_params_default();
    char sdir[512];
    snprintf(sdir, sizeof sdir, "%s/store-real", t_tmp_dir());
    stp.dir = sdir;
    mz_store_t *st = NULL;
    CHECK(mz_store_open(e, &stp, &st) == MZ_OK);
    if (!st) goto out;
    struct stat ds;
    CHECK(stat(sdir, &ds) == 0 && (ds.st_mode & 0777) == 0700);

    mz_token prompt[NPROMPT];
    ev_tokens(prompt, NPROMPT, mz_model_n_vocab(m), 42);
    /* the reference: one uninterrupted, unstored session */
    mz_ctx_params cp = sp_params();
    mz_ctx_t *ref = NULL;
    CHECK(mz_session_create(e, &cp, &ref) == MZ_OK);
    CHECK(mz_prefill(ref, prompt, NPROMPT) == MZ_OK);
    mz_token want[2 * NGEN_MAX];
    CHECK(ev_greedy(ref, 2 * ngen, want) == 2 * ngen);
    mz_ctx_free(ref);

    mz_ctx_t *c = NULL;
    CHECK(mz_session_create(e, &cp, &c) == MZ_OK);
    CHECK(mz_session_store(c, st, "real") == MZ_OK);
    CHECK(mz_prefill(c, prompt, NPROMPT) == MZ_OK);
    CHECK(mz_session_sync(c) == MZ_OK);
    int L = m->cfg.n_layer;
    size_t nclean = 0;
    for (int l = 0; l < L; l++)
        for (size_t ch = 0; ch < 3; ch++) nclean += c->kv.chunks[l][ch] && ch < 2;
    /* evict all: only the partial chunk (2) is written; chunks 0-1 are clean */
    mz_status s;
    size_t clean0 = mz_mem_store_n_clean_evicted(c->mem);
    unsigned w = count_writes_during(do_evict_all, c, &s);
    CHECK(s == MZ_OK);
    CHECK_MSG(w == (unsigned)L, "%u writes for %d partial-chunk units", w, L);
    CHECK_EQ_INT(mz_mem_store_n_clean_evicted(c->mem) - clean0, nclean);
    long res = 0;
    for (int l = 0; l < L; l++) res += chunk_resident_pages(c, l, 0) + chunk_resident_pages(c, l, 1);
    CHECK_EQ_INT(res, 0);
    CHECK(mz_mem_kv_state(c->mem, 3, 1) == MZ_UNIT_STORED_RAW);
    mz_token got[2 * NGEN_MAX];
    CHECK(ev_greedy(c, ngen, got) == ngen);
    CHECK(memcmp(got, want, ngen * sizeof *got) == 0);
    /* a second eviction of the restored clean chunks writes nothing for them */
    CHECK(mz_session_sync(c) == MZ_OK);
    w = count_writes_during(do_evict_all, c, &s);
    CHECK_MSG(w == (unsigned)L, "second eviction: %u writes", w);
    CHECK(mz_mem_is_valid(c->mem));
    mz_ctx_free(c); /* last manifest */

    /* the hybrid planner (placement auto) sends clean chunks to storage for
     * free instead of compressing them */
    {
        mz_ctx_params ap = sp_params();
        ap.kv_placement = MZ_KV_PLACE_AUTO;
        mz_ctx_t *h = NULL;
        CHECK(mz_session_create(e, &ap, &h) == MZ_OK && mz_session_store(h, st, "hybrid") == MZ_OK);
        CHECK(mz_prefill(h, prompt, 600) == MZ_OK && mz_session_sync(h) == MZ_OK);
        mz_evict_report er;
        CHECK(mz_evict(h, SIZE_MAX, &er) == MZ_OK);
        int n_raw = 0;
        for (int l = 0; l < L; l++)
            for (size_t ch = 0; ch < 2; ch++) n_raw += mz_mem_kv_state(h->mem, l, ch) == MZ_UNIT_STORED_RAW;
        CHECK_EQ_INT(n_raw, 2 * L);
        CHECK(er.n_kv_compressed + er.n_kv_stored_compressed <= (size_t)L); /* chunk 2 only */
        mz_ctx_free(h);
        CHECK(mz_store_delete(st, "hybrid") == MZ_OK);
    }
    /* resume by id: same tokens, chunks restored from the store */
    mz_resume_info ri;
    mz_ctx_t *r = NULL;
    CHECK(mz_session_resume(st, "real", &cp, &r, &ri) == MZ_OK);
    if (r) {
        CHECK_EQ_INT(ri.outcome, MZ_RESUME_FULL);
        CHECK_EQ_INT(mz_ctx_n_tokens(r), NPROMPT + ngen);
        CHECK_EQ_INT(ri.n_chunks_restored, 2);
        /* the sync before the last eviction stored the tail: one token recomputed */
        CHECK_EQ_INT(ri.n_tokens_recomputed, 1);
        /* the weight blocks too: evicting the engine's one session dropped them */
        CHECK_MSG(ri.timings.n_storage_units >= (size_t)2 * L, "%zu storage units restored",
                  ri.timings.n_storage_units);
        CHECK(memcmp(mz_ctx_tokens(r), prompt, sizeof prompt) == 0);
        CHECK(ev_greedy(r, ngen, got + ngen) == ngen);
        CHECK_MSG(memcmp(got + ngen, want + ngen, ngen * sizeof *got) == 0,
                  "continuation after resume differs");
        mz_ctx_free(r);
    }
    /* the tail: a sync stores the partly filled chunk too, so a resume after
     * a kill recomputes one token, and answers as the uninterrupted run */
    {
        mz_ctx_t *t = NULL;
        CHECK(mz_session_create(e, &cp, &t) == MZ_OK && mz_session_store(t, st, "tail") == MZ_OK);
        CHECK(mz_prefill(t, prompt, NPROMPT) == MZ_OK && mz_session_sync(t) == MZ_OK);
        CHECK(mz_mem_is_valid(t->mem));
        mz_sstore_test_abandon(t); /* no final pass: the store as a kill leaves it */
        mz_ctx_free(t);
        mz_manifest mf;
        CHECK(mz_store_read_manifest(st, "tail", &mf) == MZ_OK);
        CHECK_EQ_INT(mf.n_chunks, 2);
        CHECK_EQ_INT(mf.tail_pos, NPROMPT - 1 - 512);
        mz_manifest_clear(&mf);
        CHECK(mz_session_resume(st, "tail", &cp, &t, &ri) == MZ_OK);
        if (t) {
            CHECK_EQ_INT(ri.outcome, MZ_RESUME_FULL);
            CHECK_EQ_INT(ri.n_tokens_recomputed, 1);
            CHECK_EQ_INT(mz_ctx_n_tokens(t), NPROMPT);
            mz_token g[NGEN_MAX];
            CHECK(ev_greedy(t, ngen, g) == ngen);
            CHECK_MSG(memcmp(g, want, ngen * sizeof *g) == 0, "continuation after a tail resume differs");
            /* a truncation into the tail cuts it; the next manifest names what is left */
            CHECK(mz_ctx_truncate(t, 600) == MZ_OK && mz_session_sync(t) == MZ_OK);
            CHECK(mz_store_read_manifest(st, "tail", &mf) == MZ_OK);
            CHECK_EQ_INT(mf.n_tokens, 600);
            CHECK_EQ_INT(mf.tail_pos, 600 - 1 - 512);
            mz_manifest_clear(&mf);
            CHECK(mz_mem_is_valid(t->mem));
            mz_ctx_free(t);
        }
        CHECK(mz_store_delete(st, "tail") == MZ_OK);
    }
    /* a q8 store: records of about half the bytes; the resumed session answers
     * as an uninterrupted one whose stored chunks went through the same q8
     * round trip; a store of the other codec refuses the session by name */
    {
        mz_store_params qp = stp;
        char qdir[600];
        snprintf(qdir, sizeof qdir, "%s-q8", sdir);
        qp.dir = qdir;
        qp.codec = "q8";
        mz_store_t *sq = NULL;
        CHECK(mz_store_open(e, &qp, &sq) == MZ_OK);
        mz_ctx_t *t = NULL;
        CHECK(mz_session_create(e, &cp, &t) == MZ_OK && mz_session_store(t, sq, "q") == MZ_OK);
        CHECK(mz_prefill(t, prompt, NPROMPT) == MZ_OK && mz_session_sync(t) == MZ_OK);
        CHECK(mz_mem_is_valid(t->mem));
        /* clean q8 chunks: evicting them writes only the partial chunk */
        w = count_writes_during(do_evict_all, t, &s);
        CHECK(s == MZ_OK);
        CHECK_MSG(w == (unsigned)L, "q8 store: %u writes for %d partial-chunk units", w, L);
        CHECK(mz_mem_kv_state(t->mem, 3, 1) == MZ_UNIT_STORED_COMPRESSED);
        CHECK(mz_mem_is_valid(t->mem));
        mz_sstore_test_abandon(t);
        mz_ctx_free(t);
        mz_manifest mf;
        CHECK(mz_store_read_manifest(sq, "q", &mf) == MZ_OK);
        CHECK(strcmp(mf.codec, "q8") == 0 && mf.n_chunks == 2);
        CHECK(mf.n_chunks == 2 && mf.recs[0].len < mf.chunk_bytes * 6 / 10);
        mz_manifest_clear(&mf);
        /* the reference: the same tokens, the stored chunks q8 round-tripped */
        mz_ctx_t *ref2 = NULL;
        CHECK(mz_session_create(e, &cp, &ref2) == MZ_OK);
        mz_token wq[NGEN_MAX];
        if (ref2) {
            CHECK(mz_prefill(ref2, prompt, NPROMPT - 1) == MZ_OK);
            q8_round_trip(ref2, 2);
            CHECK(mz_prefill(ref2, prompt + NPROMPT - 1, 1) == MZ_OK);
            CHECK(ev_greedy(ref2, ngen, wq) == ngen);
            mz_ctx_free(ref2);
        }
        CHECK(mz_session_resume(sq, "q", &cp, &t, &ri) == MZ_OK);
        if (t) {
            CHECK_EQ_INT(ri.n_chunks_restored, 2);
            CHECK_EQ_INT(ri.n_tokens_recomputed, 1);
            mz_token g[NGEN_MAX];
            CHECK(ev_greedy(t, ngen, g) == ngen);
            CHECK_MSG(memcmp(g, wq, ngen * sizeof *g) == 0, "q8 resume differs from the q8 reference");
            mz_ctx_free(t);
        }
        mz_store_close(sq);
        qp.codec = "raw";
        CHECK(mz_store_open(e, &qp, &sq) == MZ_OK);
        CHECK(mz_session_resume(sq, "q", &cp, &t, &ri) == MZ_E_UNSUPPORTED && t == NULL);
        CHECK_MSG(strstr(ri.reason, "session q") && strstr(ri.reason, "q8 codec"), "reason: %s", ri.reason);
        qp.codec = "zstd";
        mz_store_t *bad = NULL;
        CHECK(mz_store_open(e, &qp, &bad) == MZ_E_INVAL && bad == NULL);
        CHECK(mz_store_delete(sq, "q") == MZ_OK);
        mz_store_close(sq);
    }
    /* one flipped byte in chunk 1's record of layer 4: truncated, named, same answer */
    {
        mz_manifest mf;
        CHECK(mz_store_read_manifest(st, "real", &mf) == MZ_OK);
        size_t ntok = mf.n_tokens;
        CHECK(mf.n_chunks == 2);
        uint64_t off = mf.recs[1 * (size_t)L + 4].off + 4096 + 1000;
        mz_manifest_clear(&mf);
        char kv[1024];
        CHECK(mz_store_path(st, "real", ".kv", kv, sizeof kv) == MZ_OK);
        int fd = open(kv, O_RDWR);
        unsigned char byte = 0;
        CHECK(pread(fd, &byte, 1, (off_t)off) == 1);
        byte ^= 1;
        CHECK(pwrite(fd, &byte, 1, (off_t)off) == 1);
        close(fd);
        CHECK(mz_session_resume(st, "real", &cp, &r, &ri) == MZ_OK);
        if (r) {
            CHECK_EQ_INT(ri.outcome, MZ_RESUME_TRUNCATED);
            CHECK_MSG(strstr(ri.reason, "KV chunk (layer 4, chunk 1)") != NULL && strstr(ri.reason, "checksum"),
                      "reason: %s", ri.reason);
            CHECK_EQ_INT(ri.n_chunks_restored, 1);
            CHECK_EQ_INT(mz_ctx_n_tokens(r), ntok);
            mz_token g2[NGEN_MAX];
            CHECK(ev_greedy(r, ngen, g2) == ngen);
            CHECK(memcmp(g2, want + 2 * ngen - ngen, 0) == 0); /* tokens checked below */
            CHECK(memcmp(mz_ctx_tokens(r) + NPROMPT, want, 2 * ngen * sizeof *g2) == 0);
            mz_ctx_free(r);
        }
    }
    /* a corrupt manifest: lost, named */
    {
        char pm[1024];
        CHECK(mz_store_path(st, "real", ".mzs", pm, sizeof pm) == MZ_OK);
        size_t n = 0;
        char *b = t_read_file(pm, &n);
        CHECK(b != NULL && n > 200);
        if (b) {
            int fd = open(pm, O_WRONLY | O_TRUNC);
            b[180] ^= 4;
            CHECK(write(fd, b, n) == (ssize_t)n);
            close(fd);
            CHECK(mz_session_resume(st, "real", &cp, &r, &ri) == MZ_E_CORRUPT && r == NULL);
            CHECK_EQ_INT(ri.outcome, MZ_RESUME_LOST);
            CHECK_MSG(strstr(ri.reason, "session real") && strstr(ri.reason, "checksum"),
                      "reason: %s", ri.reason);
            /* another model's manifest */
            b[180] ^= 4;
            mz_manifest mf;
            CHECK(mz_manifest_decode(b, n, &mf) == MZ_OK);
            mf.model_id ^= 1;
            CHECK(mz_store_write_manifest(st, &mf) == MZ_OK);
            mz_manifest_clear(&mf);
            CHECK(mz_session_resume(st, "real", &cp, &r, &ri) == MZ_E_UNSUPPORTED && r == NULL);
            CHECK_MSG(strstr(ri.reason, "another model") != NULL, "reason: %s", ri.reason);
            free(b);
        }
    }
    /* admin: list, limit (oldest first), delete */
    {
        mz_ctx_t *a = NULL, *b = NULL;
        CHECK(mz_session_create(e, &cp, &a) == MZ_OK && mz_session_store(a, st, "older") == MZ_OK);
        CHECK(mz_prefill(a, prompt, 300) == MZ_OK);
        mz_ctx_free(a);
        CHECK(mz_session_create(e, &cp, &b) == MZ_OK && mz_session_store(b, st, "newer") == MZ_OK);
        CHECK(mz_prefill(b, prompt, 300) == MZ_OK);
        CHECK(mz_session_sync(b) == MZ_OK);
        mz_stored_session ls[8];
        size_t n = mz_store_list(st, ls, 8);
        CHECK_EQ_INT(n, 3);
        bool saw_other = false;
        for (size_t i = 0; i < n && i < 8; i++)
            if (strcmp(ls[i].id, "real") == 0) saw_other = !ls[i].same_model;
        CHECK(saw_other);
        CHECK(mz_store_delete(st, "newer") == MZ_E_IO); /* in use */
        st->p.limit_bytes = 1;
        size_t nd = 0;
        CHECK(mz_store_enforce_limit(st, &nd) == MZ_OK);
        CHECK_EQ_INT(nd, 2); /* real and older; newer is in use */
        char p1[1024];
        CHECK(mz_store_path(st, "older", ".kv", p1, sizeof p1) == MZ_OK && access(p1, F_OK) != 0);
        mz_ctx_free(b);
        CHECK(mz_store_delete(st, "newer") == MZ_OK);
        CHECK(mz_store_list(st, ls, 8) == 0);
        CHECK(mz_store_delete(st, "../etc") == MZ_E_INVAL);
        CHECK(mz_session_resume(st, "no/such", &cp, &r, &ri) == MZ_E_INVAL);
    }
    /* A session stored afresh under an id replaces its KV and leaves the
     * chat history beside it (`chat --session` after a lost manifest: the
     * history is the conversation until the next turn saves it again); a
     * delete removes both. */
    {
        char pc[1024];
        char asked[] = "hi", answered[] = "hello";
        mz_history_msg turn[2] = {{"user", asked}, {"assistant", answered}};
        CHECK(mz_store_path(st, "hist", ".chat", pc, sizeof pc) == MZ_OK);
        CHECK(mz_store_history_save(st, "hist", turn, 2) == MZ_OK);
        mz_ctx_t *a = NULL;
        CHECK(mz_session_create(e, &cp, &a) == MZ_OK && mz_session_store(a, st, "hist") == MZ_OK);
        CHECK_MSG(access(pc, F_OK) == 0, "%s after mz_session_store", pc);
        CHECK(mz_prefill(a, prompt, 300) == MZ_OK && mz_session_sync(a) == MZ_OK);
        mz_ctx_free(a);
        mz_history_msg *h = NULL;
        size_t nh = 0;
        CHECK(mz_store_history_load(st, "hist", &h, &nh) == MZ_OK);
        CHECK(nh == 2 && !strcmp(h[1].role, "assistant") && !strcmp(h[1].content, "hello"));
        mz_history_free(h, nh);
        CHECK(mz_store_delete(st, "hist") == MZ_OK);
        CHECK_MSG(access(pc, F_OK) != 0, "%s after mz_store_delete", pc);
    }
out:
    mz_store_close(st);
    mz_engine_free(e);
    mz_model_free(m);
}

/* ---- the tiny-model cases' set-up ----------------------------------------------------------- */

/* A generated 2-layer model at tmp/FILE, an engine on it (n_threads, the
 * test's swap directory) and a store in tmp/store-TAG opened with *stp (its
 * dir set to it, so the case can use *stp afterwards; NULL: the defaults). False when a piece is missing (a model that cannot be
 * made is said, naming WHAT is skipped; a failed create or open is a
 * failed check); tiny_rig_close then releases what was made. */
typedef struct tiny_rig {
    mz_model_t *m;
    mz_engine_t *e;
    mz_store_t *st;
    char sdir[512];
} tiny_rig;

static bool tiny_rig_open(tiny_rig *r, const char *file, const char *what, const char *tag, int n_threads,
                          mz_store_params *stp)
{
    memset(r, 0, sizeof *r);
    const char *tiny = t_tmp_path(file);
    if (ev_gen_tiny(tiny, 2) != 0) {
        printf("%s: cannot make the tiny model, %s skipped\n", T, what);
        return false;
    }
    if (!(r->m = ev_load(tiny))) return false;
    mz_engine_params ep = mz_engine_params_default();
    ep.n_threads = n_threads;
    ep.swap_dir = t_tmp_path("swap");
    CHECK(mz_engine_create(r->m, &ep, &r->e) == MZ_OK);
    snprintf(r->sdir, sizeof r->sdir, "%s/store-%s", t_tmp_dir(), tag);
    mz_store_params defaults = mz_store_params_default();
    if (!stp) stp = &defaults;
    stp->dir = r->sdir;
    CHECK(mz_store_open(r->e, stp, &r->st) == MZ_OK);
    return r->st != NULL;
}

static void tiny_rig_close(tiny_rig *r)
{
    mz_store_close(r->st);
    mz_engine_free(r->e);
    mz_model_free(r->m);
}

/* ---- faults at every write of a sync (tiny model) ------------------------------------------- */

static void test_faults(void)
{
    mz_store_params stp = mz_store_params_default();
    stp.manifest_interval_ms = 1000000; /* manifests only from the syncs */
    tiny_rig rig;
    if (!tiny_rig_open(&rig, "tiny.gguf", "faults", "faults", 2, &stp)) goto out;
    mz_model_t *m = rig.m;
    mz_engine_t *e = rig.e;
    mz_store_t *st = rig.st;
    mz_ctx_params cp = sp_params();
    mz_token prompt[600];
    ev_tokens(prompt, 600, mz_model_n_vocab(m), 9);
    mz_token want[8];
    {
        mz_ctx_t *ref = NULL;
        CHECK(mz_session_create(e, &cp, &ref) == MZ_OK);
        CHECK(mz_prefill(ref, prompt, 600) == MZ_OK);
        CHECK(ev_greedy(ref, 8, want) == 8);
        mz_ctx_free(ref);
    }
    const struct { enum mz_io_fault_kind k; int err; } kinds[] = {
        {MZ_IO_FAULT_ERRNO, ENOSPC}, {MZ_IO_FAULT_ERRNO, EIO}, {MZ_IO_FAULT_SHORT, 0}};
    int n_full = 0, n_trunc = 0, n_lost = 0, n_failed_sync = 0;
    for (size_t kd = 0; kd < 3; kd++) {
        for (unsigned nth = 1; nth <= 7; nth++) {
            /* The table changes only while no store thread runs (io.h): the
             * fault window spans the session's whole life, write-behind
             * worker included. */
            mz_io_fault f = {.op = MZ_IO_WRITE, .kind = kinds[kd].k, .err = kinds[kd].err,
                             .nth = nth, .count = 1};
            mz_io.use_uring = false;
            mz_io_fault_set(&f);
            mz_ctx_t *c = NULL;
            CHECK(mz_session_create(e, &cp, &c) == MZ_OK);
            CHECK(mz_session_store(c, st, "f") == MZ_OK);
            mz_status ps = mz_prefill(c, prompt, 600);
            mz_status ss = mz_session_sync(c);
            CHECK(ps == MZ_OK);
            n_failed_sync += ss != MZ_OK;
            /* as if killed now: no last manifest */
            mz_sstore_test_abandon(c);
            mz_ctx_free(c);
            mz_io_fault_set(NULL);
            mz_resume_info ri;
            mz_ctx_t *r = NULL;
            mz_status rs = mz_session_resume(st, "f", &cp, &r, &ri);
            if (rs == MZ_OK) {
                CHECK_EQ_INT(mz_ctx_n_tokens(r), 600);
                mz_token g[8];
                CHECK(ev_greedy(r, 8, g) == 8 && memcmp(g, want, sizeof g) == 0);
                n_full += ri.outcome == MZ_RESUME_FULL;
                n_trunc += ri.outcome == MZ_RESUME_TRUNCATED;
                mz_ctx_free(r);
            } else {
                CHECK(ri.outcome == MZ_RESUME_LOST && strstr(ri.reason, "session f") != NULL);
                n_lost++;
            }
        }
    }
    printf("%s: faults: %d syncs failed; resumed %d full, %d truncated, %d lost\n", T,
           n_failed_sync, n_full, n_trunc, n_lost);
    CHECK(n_failed_sync > 0);
    /* prefetch: only a valid id of a stored session in a store of this user
     * starts; the resume after it answers as the uninterrupted run */
    {
        mz_ctx_t *c = NULL;
        CHECK(mz_session_create(e, &cp, &c) == MZ_OK);
        CHECK(mz_session_store(c, st, "pf") == MZ_OK);
        CHECK(mz_prefill(c, prompt, 600) == MZ_OK && mz_session_sync(c) == MZ_OK);
        mz_sstore_test_abandon(c);
        mz_ctx_free(c);
        CHECK(mz_store_prefetch(&stp, "../pf") == MZ_E_INVAL);
        CHECK(mz_store_prefetch(&stp, NULL) == MZ_E_INVAL);
        CHECK(mz_store_prefetch(&stp, "nosuch") == MZ_E_IO);
        char kv[1024], sym[1024];
        CHECK(mz_store_path(st, "pf", ".kv", kv, sizeof kv) == MZ_OK);
        CHECK(mz_store_path(st, "ln", ".mzs", sym, sizeof sym) == MZ_OK);
        CHECK(symlink(kv, sym) == 0);
        CHECK(mz_store_prefetch(&stp, "ln") == MZ_E_IO); /* symbolic links are not followed */
        CHECK(unlink(sym) == 0);
        char fifo[1024], man[1024];
        CHECK(mz_store_path(st, "ff", ".kv", fifo, sizeof fifo) == MZ_OK);
        CHECK(mz_store_path(st, "ff", ".mzs", man, sizeof man) == MZ_OK);
        CHECK(mkfifo(fifo, 0600) == 0 && link(kv, man) == 0);
        CHECK(mz_store_prefetch(&stp, "ff") == MZ_E_IO); /* only regular files, never blocks */
        CHECK(unlink(fifo) == 0 && unlink(man) == 0);
        mz_store_params other = stp;
        char odir[600];
        snprintf(odir, sizeof odir, "%s/no-store-here", rig.sdir);
        other.dir = odir;
        CHECK(mz_store_prefetch(&other, "pf") == MZ_E_IO);
        CHECK(mz_store_prefetch(&stp, "pf") == MZ_OK);
        mz_resume_info ri;
        mz_ctx_t *r = NULL;
        CHECK(mz_session_resume(st, "pf", &cp, &r, &ri) == MZ_OK);
        if (r) {
            CHECK_EQ_INT(ri.outcome, MZ_RESUME_FULL);
            mz_token g[8];
            CHECK(ev_greedy(r, 8, g) == 8 && memcmp(g, want, sizeof g) == 0);
            mz_ctx_free(r);
        }
        CHECK(mz_store_delete(st, "pf") == MZ_OK);
    }
out:
    tiny_rig_close(&rig);
}

/* Stores session id of the n tokens of prompt, synced, then leaves the
 * store as a kill -9 would (no last manifest). */
static void store_as_killed(mz_engine_t *e, const mz_ctx_params *cp, mz_store_t *st, const char *id,
                            const mz_token *prompt, size_t n)
{
    mz_ctx_t *c = NULL;
    CHECK(mz_session_create(e, cp, &c) == MZ_OK && mz_session_store(c, st, id) == MZ_OK);
    CHECK(mz_prefill(c, prompt, n) == MZ_OK && mz_session_sync(c) == MZ_OK);
    mz_sstore_test_abandon(c);
    mz_ctx_free(c);
}

/* Flips bit `mask` of payload byte `at` of record r in session id's data
 * file under dir (two checks: the byte is read, then written). */
static void flip_payload_bit(const char *dir, const char *id, const mz_swap_slot_info *r, size_t at,
                             unsigned char mask)
{
    char kv[700];
    snprintf(kv, sizeof kv, "%s/%s.kv", dir, id);
    int fd = open(kv, O_RDWR);
    unsigned char b = 0;
    const off_t pos = (off_t)(r->off + (r->split ? 4096 : 64) + at);
    CHECK(fd >= 0 && pread(fd, &b, 1, pos) == 1);
    b ^= mask;
    CHECK(pwrite(fd, &b, 1, pos) == 1);
    if (fd >= 0) close(fd);
}

/* store_as_killed on rig's engine and store, then, if rec >= 0, one bit of
 * record rec's payload flipped (flip_payload_bit); returns the stored
 * manifest's full chunks. */
static size_t store_killed_flipped(const tiny_rig *rig, const mz_ctx_params *cp, const char *id,
                                   const mz_token *prompt, size_t n, long rec, size_t at, unsigned char mask)
{
    store_as_killed(rig->e, cp, rig->st, id, prompt, n);
    mz_manifest mf;
    if (mz_store_read_manifest(rig->st, id, &mf) != MZ_OK) {
        CHECK_MSG(false, "%s: no manifest stored", id);
        return 0;
    }
    size_t n_chunks = mf.n_chunks;
    size_t n_recs = (mf.n_chunks + (mf.tail_pos > 0)) * (size_t)rig->m->cfg.n_layer;
    CHECK(rec < (long)n_recs);
    if (rec >= 0 && rec < (long)n_recs) flip_payload_bit(rig->sdir, id, &mf.recs[rec], at, mask);
    mz_manifest_clear(&mf);
    return n_chunks;
}

/* The resumed session *c continues with want[0, g) (greedy), its memory
 * manager is consistent; then it is freed and id deleted from st. */
static void check_continuation_then_delete(mz_ctx_t **c, mz_store_t *st, const char *id, const mz_token *want,
                                           size_t g, int flip)
{
    mz_token got[16];
    CHECK(g <= MZ_ARRAY_LEN(got));
    CHECK(ev_greedy(*c, g, got) == g);
    CHECK_MSG(memcmp(got, want, g * sizeof *got) == 0, "%s (flip %d): continuation after the resume differs", id,
              flip);
    CHECK(mz_mem_is_valid((*c)->mem));
    mz_ctx_free(*c);
    *c = NULL;
    CHECK(mz_store_delete(st, id) == MZ_OK);
}

/* ---- the write-behind and a busy engine (tiny model) --------------------------------------- */

/* quiet: while a compute section is open on the engine (another session's
 * request, stood in for by mz_engine_compute_open), the worker writes no
 * chunk; once it closes, the full chunks are written without a sync. The
 * first half can only fail if the worker writes during the window.
 * overdue (never_pauses): a compute that never pauses (a compute section
 * held open throughout) must not keep full chunks off the store
 * indefinitely: once they have waited the maximum deferral (shortened to
 * 100 ms here), the worker writes them beside the compute. Fails if the
 * worker only ever writes on a quiet engine.
 * Both wait up to 30 s for the worker (no clock is asserted). */
typedef struct busy_case {
    const char *model_file, *label, *id;
    unsigned long long seed;
    bool never_pauses;
} busy_case;

static void test_busy_engine(const busy_case *k)
{
    tiny_rig rig;
    if (!tiny_rig_open(&rig, k->model_file, k->label, k->id, 2, NULL)) goto out;
    mz_model_t *m = rig.m;
    mz_engine_t *e = rig.e;
    mz_ctx_params cp = sp_params();
    mz_token prompt[600];
    ev_tokens(prompt, 600, mz_model_n_vocab(m), k->seed);
    mz_ctx_t *c = NULL;
    CHECK(mz_session_create(e, &cp, &c) == MZ_OK);
    if (k->never_pauses) mz_sstore_test_max_defer_ms(100);
    count_writes_begin();
    mz_engine_compute_open(e);
    CHECK(mz_session_store(c, rig.st, k->id) == MZ_OK);
    unsigned w0 = mz_io_fault_calls(MZ_IO_WRITE); /* the attach's own files */
    CHECK(mz_prefill(c, prompt, 600) == MZ_OK); /* 2 full chunks: the worker is kicked */
    const unsigned want = 2 * (unsigned)m->cfg.n_layer;
    if (!k->never_pauses) {
        for (int i = 0; i < 20; i++) nanosleep(&(struct timespec){.tv_nsec = 10000000L}, NULL);
        unsigned busy_writes = mz_io_fault_calls(MZ_IO_WRITE) - w0;
        CHECK_MSG(busy_writes == 0, "%u writes while the engine computed", busy_writes);
        mz_engine_compute_close(e);
    }
    unsigned w = wait_writes(w0, want);
    CHECK_MSG(w >= want, "%u writes %s (want %u)", w,
              k->never_pauses ? "while the engine never paused" : "once the engine was quiet", want);
    if (k->never_pauses) mz_engine_compute_close(e);
    mz_ctx_free(c); /* joins the worker */
    mz_io_fault_set(NULL);
    if (k->never_pauses) mz_sstore_test_max_defer_ms(10000);
out:
    tiny_rig_close(&rig);
}

/* ---- serve's request-side checkpoint writes no full chunk (tiny model) --------------------- */

/* mz_session_checkpoint is what `mzcache serve` runs after each request,
 * before the next one may start. With the engine busy (the next request,
 * stood in for by mz_engine_compute_open, so the worker may not write), it
 * must write the manifest (every token, no chunk) and the staged tail only:
 * at most n_layer tail records and the manifest's own writes, never the
 * 4 x n_layer full-chunk records (counted through the I/O layer; the full
 * sync writes 5 x n_layer records plus the manifest). A kill at that point
 * resumes recomputing all the tokens (the chunks were never written); once
 * the engine is quiet the worker writes the chunks and a manifest naming
 * them and the staged tail, and a kill after it recomputes one token. */
static size_t manifest_chunks(mz_store_t *st, const char *id, size_t *n_tokens, size_t *tail)
{
    mz_manifest m;
    if (mz_store_read_manifest(st, id, &m) != MZ_OK) {
        mz_clear_error();
        *n_tokens = *tail = 0;
        return SIZE_MAX;
    }
    size_t k = m.n_chunks;
    *n_tokens = m.n_tokens;
    *tail = m.tail_pos;
    mz_manifest_clear(&m);
    return k;
}

static void test_checkpoint(void)
{
    enum { N = 1100 }; /* 4 full chunks and a tail of 75 positions (the 76th token recomputed) */
    tiny_rig rig;
    if (!tiny_rig_open(&rig, "tiny-checkpoint.gguf", "checkpoint case", "checkpoint", 2, NULL)) goto out;
    mz_model_t *m = rig.m;
    mz_engine_t *e = rig.e;
    mz_store_t *st = rig.st;
    const unsigned L = (unsigned)m->cfg.n_layer;
    mz_ctx_params cp = sp_params();
    mz_token prompt[N];
    ev_tokens(prompt, N, mz_model_n_vocab(m), 13);
    const char *ids[2] = {"cp-killed", "cp-written"};
    for (int run = 0; run < 2; run++) {
        mz_ctx_t *c = NULL;
        CHECK(mz_session_create(e, &cp, &c) == MZ_OK);
        if (!c) break;
        count_writes_begin();
        mz_engine_compute_open(e);
        CHECK(mz_session_store(c, st, ids[run]) == MZ_OK);
        CHECK(mz_prefill(c, prompt, N) == MZ_OK);
        unsigned w0 = mz_io_fault_calls(MZ_IO_WRITE);
        CHECK(mz_session_checkpoint(c) == MZ_OK);
        unsigned w = mz_io_fault_calls(MZ_IO_WRITE) - w0;
        CHECK_MSG(w < 4 * L, "the checkpoint made %u writes (the 4 full chunks are %u records)", w,
                  4 * L);
        size_t nt = 0, tp = 0, k = manifest_chunks(st, ids[run], &nt, &tp);
        CHECK_MSG(k == 0 && nt == N && tp == 0,
                  "after the checkpoint the manifest names %zu chunks, %zu tokens, tail %zu", k, nt, tp);
        if (run == 1) {
            mz_engine_compute_close(e);
            for (int i = 0; i < 3000 && (k = manifest_chunks(st, ids[run], &nt, &tp)) != 4; i++)
                nanosleep(&(struct timespec){.tv_nsec = 10000000L}, NULL);
            CHECK_MSG(k == 4 && nt == N && tp == N - 1 - 4 * 256,
                      "once quiet the worker's manifest names %zu chunks, %zu tokens, tail %zu", k, nt,
                      tp);
        }
        mz_sstore_test_abandon(c); /* as kill -9: no last manifest */
        mz_ctx_free(c);
        if (run == 0) mz_engine_compute_close(e);
        mz_io_fault_set(NULL);
        mz_resume_info info;
        mz_ctx_t *r = NULL;
        CHECK(mz_session_resume(st, ids[run], &cp, &r, &info) == MZ_OK);
        size_t want_k = run == 0 ? 0 : 4, want_rc = run == 0 ? N : 1;
        CHECK_MSG(info.outcome == MZ_RESUME_FULL && info.n_tokens == N &&
                      info.n_chunks_stored == want_k && info.n_tokens_recomputed == want_rc,
                  "%s: resumed %zu tokens, %zu chunks stored, %zu recomputed (want %zu, %zu)", ids[run],
                  info.n_tokens, info.n_chunks_stored, info.n_tokens_recomputed, want_k, want_rc);
        mz_ctx_free(r);
    }
out:
    tiny_rig_close(&rig);
}

/* ---- a checkpoint after a resume or a truncation names the stored chunks (tiny model) ------ */

/* The chunks a resume restored, and those a truncation leaves below its
 * point, are clean, with records the manifest on disk names. Serve's
 * checkpoint after them, before the write-behind worker has had a pass
 * (the engine busy: mz_engine_compute_open, and no overdue pass), must
 * name them again: a manifest that names fewer would make a kill before
 * the worker's next manifest recompute them, and with a q8 store recompute
 * raw what the session held as q8 round trips, so the resumed session
 * would answer differently from the uninterrupted one (test_store_crash's
 * "BAD logits at 617": the checkpoint 16 tokens after a resume at 601
 * named no chunk). */
static void test_checkpoint_after_resume(void)
{
    enum { N = 600, MORE = 8, CUT = 300 }; /* 2 full chunks and a tail; then chunk 0 and a tail */
    tiny_rig rig;
    if (!tiny_rig_open(&rig, "tiny-cp-resume.gguf", "checkpoint-after-resume case", "cp-resume", 2,
                       NULL))
        goto out;
    mz_engine_t *e = rig.e;
    mz_store_t *st = rig.st;
    mz_ctx_params cp = sp_params();
    mz_token prompt[N + MORE];
    ev_tokens(prompt, N + MORE, mz_model_n_vocab(rig.m), 23);
    store_as_killed(e, &cp, st, "cpr", prompt, N);
    mz_sstore_test_max_defer_ms(1e9);
    mz_engine_compute_open(e);
    mz_resume_info info;
    mz_ctx_t *r = NULL;
    CHECK(mz_session_resume(st, "cpr", &cp, &r, &info) == MZ_OK);
    CHECK_MSG(info.outcome == MZ_RESUME_FULL && info.n_chunks_stored == 2,
              "resumed %zu of %zu chunks", info.n_chunks_restored, info.n_chunks_stored);
    size_t nt = 0, tp = 0, k = 0;
    if (r) {
        CHECK(mz_prefill(r, prompt + N, MORE) == MZ_OK && mz_session_checkpoint(r) == MZ_OK);
        k = manifest_chunks(st, "cpr", &nt, &tp);
        CHECK_MSG(k == 2 && nt == N + MORE,
                  "the checkpoint after the resume names %zu chunks, %zu tokens (want 2, %d)", k, nt,
                  N + MORE);
        CHECK(mz_ctx_truncate(r, CUT) == MZ_OK && mz_session_checkpoint(r) == MZ_OK);
        k = manifest_chunks(st, "cpr", &nt, &tp);
        CHECK_MSG(k == 1 && nt == CUT,
                  "the checkpoint after the truncation names %zu chunks, %zu tokens (want 1, %d)", k,
                  nt, CUT);
        mz_sstore_test_abandon(r); /* as kill -9: no last manifest */
        mz_ctx_free(r);
    }
    mz_engine_compute_close(e);
    mz_sstore_test_max_defer_ms(10000);
    CHECK(mz_session_resume(st, "cpr", &cp, &r, &info) == MZ_OK);
    CHECK_MSG(info.outcome == MZ_RESUME_FULL && info.n_tokens == CUT && info.n_chunks_restored == 1 &&
                  info.n_tokens_recomputed <= CUT - 256,
              "after the kill: %zu tokens, %zu chunks restored, %zu recomputed", info.n_tokens,
              info.n_chunks_restored, info.n_tokens_recomputed);
    mz_ctx_free(r);
out:
    tiny_rig_close(&rig);
}

/* ---- a sync that names chunks an eviction wrote fsyncs them first (tiny model) ------------- */

/* A full chunk evicted before the write-behind gave it a copy goes into the
 * store file as a raw store would write it, and the next pass adopts that
 * record as the chunk's clean copy without writing it again. The data file
 * must still be fsynced before the manifest that names it (the fsync
 * policy's promise: after a power loss that manifest would name bytes that
 * never reached the disk): the first fsync of that sync, failed here, is
 * the data file's, and no manifest names the chunks until one succeeds. */
static void test_sync_after_evict(void)
{
    enum { N = 600 }; /* 2 full chunks */
    tiny_rig rig;
    if (!tiny_rig_open(&rig, "tiny-evict-sync.gguf", "sync-after-evict case", "evict-sync", 2, NULL))
        goto out;
    mz_ctx_params cp = sp_params();
    mz_token prompt[N];
    ev_tokens(prompt, N, mz_model_n_vocab(rig.m), 29);
    mz_sstore_test_max_defer_ms(1e9);
    mz_engine_compute_open(rig.e); /* the worker gives no chunk a copy */
    mz_ctx_t *c = NULL;
    CHECK(mz_session_create(rig.e, &cp, &c) == MZ_OK && mz_session_store(c, rig.st, "es") == MZ_OK);
    mz_evict_report er;
    CHECK(c && mz_prefill(c, prompt, N) == MZ_OK && mz_evict(c, SIZE_MAX, &er) == MZ_OK);
    if (c) {
        mz_io_fault_set(&(mz_io_fault){.op = MZ_IO_FSYNC, .kind = MZ_IO_FAULT_ERRNO, .err = EIO,
                                       .nth = 1, .count = 1});
        mz_status s = mz_session_sync(c);
        CHECK_MSG(s != MZ_OK && strstr(mz_last_error(), "es.kv"), "the sync's first fsync: %s",
                  s ? mz_last_error() : "none failed");
        mz_io_fault_set(NULL);
        size_t nt = 0, tp = 0, k = manifest_chunks(rig.st, "es", &nt, &tp);
        CHECK_MSG(k == SIZE_MAX || k == 0, "a manifest names %zu chunks before their fsync", k);
        CHECK(mz_session_sync(c) == MZ_OK);
        k = manifest_chunks(rig.st, "es", &nt, &tp);
        CHECK_MSG(k == 2 && nt == N, "after the sync the manifest names %zu chunks, %zu tokens", k, nt);
    }
    mz_engine_compute_close(rig.e);
    mz_sstore_test_max_defer_ms(10000);
    mz_ctx_free(c);
out:
    tiny_rig_close(&rig);
}

/* A resume that recomputes one token restores on as many threads as the
 * session computes with (6 here, beside the profile's 2-3), and answers
 * as the uninterrupted session; a flipped byte in a record is still
 * caught by name and the session truncated before it. */
static void test_wide_resume(void)
{
    tiny_rig rig;
    if (!tiny_rig_open(&rig, "tiny-wide.gguf", "wide-resume case", "wide", 6, NULL)) goto out;
    mz_model_t *m = rig.m;
    mz_engine_t *e = rig.e;
    mz_store_t *st = rig.st;
    mz_ctx_params cp = sp_params();
    cp.n_threads = 0;
    enum { N = 1100, G = 8 };
    mz_token prompt[N], want[G];
    ev_tokens(prompt, N, mz_model_n_vocab(m), 23);
    mz_ctx_t *c = NULL;
    CHECK(mz_session_create(e, &cp, &c) == MZ_OK && mz_prefill(c, prompt, N) == MZ_OK);
    CHECK(ev_greedy(c, G, want) == G);
    mz_ctx_free(c);
    c = NULL;
    for (int flip = 0; flip < 2; flip++) {
        char id[16];
        snprintf(id, sizeof id, "wide%d", flip);
        /* flip: one byte of chunk 2, layer 1; the resume keeps chunks 0-1 */
        long rec = flip ? 2L * m->cfg.n_layer + 1 : -1;
        CHECK_EQ_INT(store_killed_flipped(&rig, &cp, id, prompt, N, rec, 77, 0x10), 4);
        mz_resume_info ri;
        CHECK(mz_session_resume(st, id, &cp, &c, &ri) == MZ_OK);
        if (!c) continue;
        if (!flip) {
            CHECK_EQ_INT(ri.outcome, MZ_RESUME_FULL);
            CHECK_EQ_INT(ri.n_tokens_recomputed, 1);
            CHECK_EQ_INT(ri.timings.n_restore_threads, 6);
        } else {
            CHECK_EQ_INT(ri.outcome, MZ_RESUME_TRUNCATED);
            CHECK_EQ_INT(ri.n_chunks_restored, 2);
            CHECK_MSG(strstr(ri.reason, "wide1") != NULL, "reason: %s", ri.reason);
        }
        CHECK_EQ_INT(mz_ctx_n_tokens(c), N);
        check_continuation_then_delete(&c, st, id, want, G, flip);
    }
out:
    tiny_rig_close(&rig);
}

/* mz_session_resume_prefill: the stored session and a question in one
 * pipelined pass give the logits, bit for bit, and the continuation of the
 * uninterrupted session that heard the question; a truncated resume
 * recomputes the lost chunks before the question; a bad question token or a
 * question past the context is refused and the stored session still
 * resumes. */
static void test_resume_prefill(void)
{
    tiny_rig rig;
    float *want_lg = NULL;
    if (!tiny_rig_open(&rig, "tiny-rp.gguf", "resume-prefill case", "rp", 2, NULL)) goto out;
    mz_model_t *m = rig.m;
    mz_engine_t *e = rig.e;
    mz_store_t *st = rig.st;
    mz_ctx_params cp = sp_params();
    const int nv = mz_model_n_vocab(m);
    enum { N = 1100, Q = 8, G = 6 };
    mz_token prompt[N], q[Q], want[G];
    ev_tokens(prompt, N, nv, 29);
    ev_tokens(q, Q, nv, 31);
    want_lg = malloc((size_t)nv * sizeof *want_lg);
    CHECK(want_lg != NULL);
    if (!want_lg) goto out;
    mz_ctx_t *c = NULL;
    CHECK(mz_session_create(e, &cp, &c) == MZ_OK && mz_prefill(c, prompt, N) == MZ_OK &&
          mz_prefill(c, q, Q) == MZ_OK);
    if (c && mz_ctx_logits(c)) memcpy(want_lg, mz_ctx_logits(c), (size_t)nv * sizeof *want_lg);
    CHECK(ev_greedy(c, G, want) == G);
    mz_ctx_free(c);
    c = NULL;
    for (int flip = 0; flip < 2; flip++) {
        char id[16];
        snprintf(id, sizeof id, "rp%d", flip);
        /* flip: one byte of chunk 1, layer 0; the resume keeps chunk 0 */
        store_killed_flipped(&rig, &cp, id, prompt, N, flip ? (long)m->cfg.n_layer : -1, 301, 0x04);
        mz_resume_info ri;
        if (!flip) {
            /* refused before anything is read: the session stays stored */
            mz_token bad[2] = {q[0], (mz_token)nv};
            CHECK(mz_session_resume_prefill(st, id, &cp, bad, 2, &c, &ri) == MZ_E_INVAL && !c);
            CHECK_MSG(strstr(ri.reason, "vocabulary") != NULL, "reason: %s", ri.reason);
            mz_ctx_params small = cp;
            small.n_ctx = N + 2;
            CHECK(mz_session_resume_prefill(st, id, &small, q, Q, &c, &ri) == MZ_E_CONTEXT_FULL &&
                  !c);
            CHECK_MSG(strstr(ri.reason, "new ones") != NULL, "reason: %s", ri.reason);
        }
        CHECK(mz_session_resume_prefill(st, id, &cp, q, Q, &c, &ri) == MZ_OK);
        if (!c) continue;
        if (!flip) {
            CHECK_EQ_INT(ri.outcome, MZ_RESUME_FULL);
            CHECK_EQ_INT(ri.n_chunks_restored, 4);
        } else {
            CHECK_EQ_INT(ri.outcome, MZ_RESUME_TRUNCATED);
            CHECK_EQ_INT(ri.n_chunks_restored, 1);
            CHECK_MSG(strstr(ri.reason, "rp1") != NULL, "reason: %s", ri.reason);
        }
        CHECK_EQ_INT(ri.n_tokens, N + Q);
        CHECK_EQ_INT(mz_ctx_n_tokens(c), N + Q);
        const float *lg = mz_ctx_logits(c);
        CHECK_MSG(lg && memcmp(lg, want_lg, (size_t)nv * sizeof *lg) == 0,
                  "flip %d: the question's logits differ from the uninterrupted session's", flip);
        check_continuation_then_delete(&c, st, id, want, G, flip);
    }
out:
    free(want_lg);
    tiny_rig_close(&rig);
}

/* ---- the prefix index (tiny model) ----------------------------------------------------------- */

static const char *g_skip_id;
static int g_skip_unlocked; /* skip calls that found the index's lock free */
static bool skip_one(void *user, const char *id)
{
    mz_store_t *st = user;
    if (pthread_mutex_trylock(&st->idx_mu) == 0) { /* store.h: skip runs under it */
        pthread_mutex_unlock(&st->idx_mu);
        g_skip_unlocked++;
    }
    return g_skip_id && !strcmp(id, g_skip_id);
}

/* The stored session of the prefix index that prompt[0, n) continues ("" none). */
static const char *find_for(mz_store_t *st, const mz_token *prompt, size_t n, size_t *n_match)
{
    static char id[64];
    size_t dummy;
    bool found = mz_store_find_prefix(st, prompt, n, skip_one, st, id, sizeof id, n_match ? n_match : &dummy);
    CHECK_MSG(found == (id[0] != '\0'), "found %d, id \"%s\"", found, id);
    return id;
}

/* A write-behind worker's manifests beside the finds: anon-9's entry
 * written (230 tokens) and taken out, again and again. */
typedef struct index_writer {
    mz_store_t *st;
    const mz_token *toks;
    _Atomic bool stop;
} index_writer;

static void *index_writer_run(void *p)
{
    index_writer *w = p;
    for (int i = 0; !atomic_load(&w->stop); i++) mz_store_index_note(w->st, "anon-9", w->toks, i % 2 ? 0 : 230);
    mz_store_index_forget(w->st, "anon-9");
    return NULL;
}

/* The index built at open from the manifests (prefix, model), kept by the
 * store's manifest writes, its cap (the fewest tokens go), delete, a failed
 * resume and the limit; the longest stored prefix shorter than the request,
 * skip honoured (called under the index's lock); finds beside a writer
 * thread see each entry whole. */
static void test_prefix_index(void)
{
    tiny_rig rig;
    if (!tiny_rig_open(&rig, "tiny-pi.gguf", "prefix-index case", "pi", 2, NULL)) goto out;
    mz_store_t *st = rig.st;
    mz_ctx_params cp = sp_params();
    enum { N = 400 };
    mz_token prompt[N], other[N];
    ev_tokens(prompt, N, mz_model_n_vocab(rig.m), 41);
    ev_tokens(other, N, mz_model_n_vocab(rig.m), 43);
    CHECK(!mz_store_find_prefix(st, prompt, N, NULL, NULL, NULL, 0, NULL)); /* no index opened */
    store_as_killed(rig.e, &cp, st, "anon-1", prompt, 100);
    store_as_killed(rig.e, &cp, st, "anon-2", prompt, 200);
    store_as_killed(rig.e, &cp, st, "named", prompt, 300);
    CHECK(mz_store_index_open(st, "anon-", 3) == MZ_OK);
    CHECK(mz_store_index_open(st, "anon-", 3) == MZ_E_INVAL); /* once */
    mz_clear_error();
    CHECK_EQ_INT(mz_store_index_size(st), 2);
    size_t nm = 0;
    CHECK_MSG(!strcmp(find_for(st, prompt, 250, &nm), "anon-2") && nm == 200, "got %zu", nm);
    CHECK(!strcmp(find_for(st, prompt, N, NULL), "anon-2")); /* "named" is not indexed */
    CHECK(!strcmp(find_for(st, prompt, 200, NULL), "anon-1")); /* shorter than the request only */
    CHECK(!strcmp(find_for(st, prompt, 100, NULL), ""));
    CHECK(!strcmp(find_for(st, other, N, NULL), ""));
    g_skip_id = "anon-2";
    CHECK(!strcmp(find_for(st, prompt, N, NULL), "anon-1"));
    g_skip_id = NULL;
    CHECK_EQ_INT(g_skip_unlocked, 0);
    /* beside a writer: anon-9 (230) when it is in, else anon-2 (200) */
    index_writer w = {.st = st, .toks = prompt};
    atomic_init(&w.stop, false);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, index_writer_run, &w) == 0);
    int n_torn = 0;
    for (int i = 0; i < 2000; i++) {
        size_t m = 0;
        const char *id = find_for(st, prompt, 250, &m);
        if (!(!strcmp(id, "anon-9") && m == 230) && !(!strcmp(id, "anon-2") && m == 200)) n_torn++;
    }
    atomic_store(&w.stop, true);
    pthread_join(th, NULL);
    CHECK_EQ_INT(n_torn, 0);
    CHECK_EQ_INT(mz_store_index_size(st), 2);
    /* a manifest written while the index is open */
    store_as_killed(rig.e, &cp, st, "anon-3", prompt, 260);
    CHECK(!strcmp(find_for(st, prompt, 270, NULL), "anon-3"));
    /* full (3): a fourth replaces the one with the fewest tokens, anon-1 */
    store_as_killed(rig.e, &cp, st, "anon-4", prompt, 150);
    CHECK_EQ_INT(mz_store_index_size(st), 3);
    CHECK(!strcmp(find_for(st, prompt, 120, NULL), ""));
    CHECK(!strcmp(find_for(st, prompt, 170, NULL), "anon-4"));
    CHECK(mz_store_delete(st, "anon-3") == MZ_OK);
    CHECK(!strcmp(find_for(st, prompt, 270, NULL), "anon-2"));
    /* a resume that fails (the context cannot hold the session) leaves the index */
    mz_ctx_params small = cp;
    small.n_ctx = 160;
    mz_ctx_t *c = NULL;
    CHECK(mz_session_resume(st, "anon-2", &small, &c, NULL) != MZ_OK && !c);
    mz_clear_error();
    CHECK(!strcmp(find_for(st, prompt, 270, NULL), "anon-4"));
    /* reopened: built again from the manifests on disk (anon-2's too) */
    mz_store_close(rig.st);
    mz_store_params stp = mz_store_params_default();
    stp.dir = rig.sdir;
    CHECK(mz_store_open(rig.e, &stp, &rig.st) == MZ_OK);
    st = rig.st;
    if (!st) goto out;
    CHECK(mz_store_index_open(st, "anon-", 3) == MZ_OK);
    CHECK(!strcmp(find_for(st, prompt, 270, NULL), "anon-2"));
    CHECK(mz_store_has(st, "anon-2") && mz_store_has(st, "named") && !mz_store_has(st, "anon-3") &&
          !mz_store_has(st, "../x"));
    /* the limit deletes every session (none in use): none is found */
    st->p.limit_bytes = 1;
    size_t nd = 0;
    CHECK(mz_store_enforce_limit(st, &nd) == MZ_OK && nd == 4);
    CHECK_EQ_INT(mz_store_index_size(st), 0);
    CHECK(!strcmp(find_for(st, prompt, N, NULL), ""));
out:
    tiny_rig_close(&rig);
}

int main(void)
{
    test_manifest();
    test_prefix_index();
    test_busy_engine(&(busy_case){"tiny-quiet.gguf", "quiet case", "quiet", 11, false});
    test_busy_engine(&(busy_case){"tiny-overdue.gguf", "overdue case", "overdue", 17, true});
    test_checkpoint();
    test_checkpoint_after_resume();
    test_sync_after_evict();
    test_wide_resume();
    test_resume_prefill();
    test_persist();
    test_faults();
    /* The SmolLM2 cases take over 25 minutes under TSan; the write-behind
     * worker's races are covered by the cases above (they start it too).
     * MZ_STORE_NO_REAL=1 skips them in any build. */
    const bool tsan = T_UNDER_TSAN;
    if (!getenv("MZ_STORE_NO_REAL") && !tsan) test_real();
    else printf("%s: %s, clean/resume cases on SmolLM2 skipped\n", T,
                tsan ? "ThreadSanitizer build" : "MZ_STORE_NO_REAL set");
    return t_done(T);
}
