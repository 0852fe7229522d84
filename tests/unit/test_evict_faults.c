/*
 * test_evict_faults.c — I/O failures during eviction and restore (tiny model,
 * raw codec, so every good answer must equal a never-evicted context's).
 *
 *   write ENOSPC / EIO      mz_evict fails, the failing chunk stays resident,
 *                           the answer is unchanged
 *   CompKV batches          the whole compressed stack goes to the swap file in
 *                           one call and restores bit-identical; a write that
 *                           fails mid-batch stores the items below it, keeps it
 *                           and every item above it in the stack, loses nothing
 *   read EIO / bad checksum the request fails naming the unit, no logits come
 *                           out, the unit stays evicted; a retry works
 *   swap file damaged or    (through a second fd) the request fails naming the
 *   truncated behind our    unit; restoring the bytes makes the retry work; a
 *   back                    truncated file leaves the context usable after a reset
 */
#define _GNU_SOURCE
#include "evict_util.h"
#include "io/io.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#define N_LAYER 3
#define N_CTX 1024
#define N_BASE 520
#define N_FOLLOW 24

static const char *T = "test_evict_faults";
static mz_model_t *g_m, *g_ref_m;
static int g_vocab;
static mz_token g_base[N_BASE], g_follow[N_FOLLOW];
static float *g_want; /* reference logits of base + follow-up */

static mz_ctx_t *fresh(mz_kv_placement pl)
{
    mz_ctx_t *c = ev_ctx(g_m, "raw", pl, N_CTX, "swap-faults");
    if (c && mz_prefill(c, g_base, N_BASE) != MZ_OK) {
        mz_ctx_free(c);
        c = NULL;
    }
    CHECK(c != NULL);
    return c;
}

static int answer_matches(mz_ctx_t *c)
{
    float *a = malloc((size_t)g_vocab * sizeof(float));
    int ok = a && ev_prefill_logits(c, g_follow, N_FOLLOW, a, g_vocab) == MZ_OK &&
             memcmp(a, g_want, (size_t)g_vocab * sizeof(float)) == 0;
    if (!ok) fprintf(stderr, "answer: %s\n", mz_ctx_errmsg(c));
    free(a);
    return ok;
}

static size_t kv_total(mz_ctx_t *c)
{
    mz_mem_stats st;
    mz_get_mem_stats(c, &st);
    return st.kv.total_bytes;
}

static void test_write_faults(void)
{
    const struct { int err; unsigned nth; mz_kv_placement pl; } cases[] = {
        {ENOSPC, 1, MZ_KV_PLACE_STORAGE},
        {EIO, 3, MZ_KV_PLACE_STORAGE},
        {ENOSPC, 2, MZ_KV_PLACE_STORAGE_COMPRESSED},
        {EIO, 1, MZ_KV_PLACE_COMPRESSED}, /* hits CompKV, after the weights are dropped */
    };
    for (size_t i = 0; i < MZ_ARRAY_LEN(cases); i++) {
        mz_ctx_t *c = fresh(cases[i].pl);
        if (!c) continue;
        if (cases[i].pl != MZ_KV_PLACE_COMPRESSED) {
            /* Create the swap file first (its open writes a probe block). */
            CHECK(mz_evict(c, 1, NULL) == MZ_OK && mz_restore(c, NULL) == MZ_OK);
        }
        mz_mem_stats before, after;
        mz_get_mem_stats(c, &before);
        mz_io_fault f = {.op = MZ_IO_WRITE, .kind = MZ_IO_FAULT_ERRNO, .err = cases[i].err,
                         .nth = cases[i].nth, .count = UINT32_MAX};
        mz_io_fault_set(&f);
        mz_evict_report r;
        mz_status s = mz_evict(c, SIZE_MAX, &r);
        mz_io_fault_set(NULL);
        CHECK_MSG(s == MZ_E_IO, "case %zu: %d", i, s);
        const char *msg = mz_ctx_errmsg(c);
        CHECK_MSG(strstr(msg, "KV chunk (layer") && strstr(msg, strerror(cases[i].err)),
                  "case %zu: %s", i, msg);
        CHECK(mz_mem_is_valid(c->mem));
        mz_get_mem_stats(c, &after);
        size_t moved = r.n_kv_stored_raw + r.n_kv_stored_compressed + r.n_kv_compressed;
        if (cases[i].pl != MZ_KV_PLACE_COMPRESSED) {
            /* The chunks written before the fault are stored; the rest resident. */
            CHECK_EQ_INT(moved, cases[i].nth - 1);
            CHECK_EQ_INT(after.kv.n_resident, before.kv.n_resident - moved);
            CHECK(after.weights.n_resident == before.weights.n_resident);
        } else {
            CHECK(r.n_kv_compkv == 0 && after.kv.compressed_bytes > 0);
        }
        CHECK_MSG(answer_matches(c), "case %zu", i);
        /* And with the fault gone eviction works again. */
        CHECK(mz_ctx_truncate(c, N_BASE) == MZ_OK);
        CHECK(mz_evict(c, SIZE_MAX, NULL) == MZ_OK);
        CHECK(answer_matches(c));
        mz_ctx_free(c);
    }
}

/* A copy of every KV chunk of c (n_layer * n_chunks * chunk_bytes), or NULL. */
static uint8_t *kv_snapshot(mz_ctx_t *c)
{
    size_t cb = c->kv.chunk_bytes, n = c->kv.n_chunks;
    uint8_t *p = malloc((size_t)c->kv.n_layer * n * cb);
    if (!p) return NULL;
    for (int l = 0; l < c->kv.n_layer; l++)
        for (size_t k = 0; k < n; k++) memcpy(p + ((size_t)l * n + k) * cb, c->kv.chunks[l][k], cb);
    return p;
}

static size_t kv_count(mz_ctx_t *c, mz_unit_state want)
{
    size_t n = 0;
    for (int l = 0; l < c->kv.n_layer; l++)
        for (size_t k = 0; k < c->kv.n_chunks; k++) n += mz_mem_kv_state(c->mem, l, k) == want;
    return n;
}

/* Restores everything and compares the KV bytes with the snapshot. */
static int kv_restored_equal(mz_ctx_t *c, const uint8_t *snap)
{
    if (mz_restore(c, NULL) != MZ_OK || !ev_all_resident(c)) return 0;
    size_t cb = c->kv.chunk_bytes, n = c->kv.n_chunks;
    for (int l = 0; l < c->kv.n_layer; l++)
        for (size_t k = 0; k < n; k++)
            if (memcmp(snap + ((size_t)l * n + k) * cb, c->kv.chunks[l][k], cb) != 0) {
                fprintf(stderr, "KV chunk (%d, %zu) differs after the restore\n", l, k);
                return 0;
            }
    return 1;
}

static void test_compkv_batch(void)
{
    /* The whole compressed stack to the swap file in one call. */
    mz_ctx_t *c = fresh(MZ_KV_PLACE_COMPRESSED);
    if (!c) return;
    uint8_t *snap = kv_snapshot(c);
    CHECK(snap != NULL);
    size_t n_units = (size_t)c->kv.n_layer * c->kv.n_chunks;
    CHECK(n_units >= 8); /* several items: more than one per batch in flight */
    mz_evict_report r;
    CHECK(mz_evict(c, SIZE_MAX, &r) == MZ_OK);
    mz_mem_stats st;
    mz_get_mem_stats(c, &st);
    CHECK_EQ_INT(r.n_kv_compressed, n_units);
    CHECK_EQ_INT(r.n_kv_compkv, n_units);
    CHECK(st.kv.compressed_bytes == 0 && st.compstack_mapped_bytes == 0);
    CHECK(mz_mem_is_valid(c->mem));
    CHECK(snap && kv_restored_equal(c, snap));
    CHECK(answer_matches(c));
    mz_ctx_free(c);
    free(snap);

    /* One write of the batch fails (the 3rd to reach the I/O layer; io_uring
     * may process the batch's requests in any order, so which item it is
     * varies): the items below it are stored, it and those above it, written
     * or not, stay in the stack. */
    c = fresh(MZ_KV_PLACE_COMPRESSED);
    if (!c) return;
    /* Open the swap file first (its open writes a probe block). */
    CHECK(mz_evict(c, SIZE_MAX, NULL) == MZ_OK && mz_restore(c, NULL) == MZ_OK);
    snap = kv_snapshot(c);
    CHECK(snap != NULL);
    mz_io_fault f = {.op = MZ_IO_WRITE, .kind = MZ_IO_FAULT_ERRNO, .err = EIO, .nth = 3, .count = 1};
    mz_io_fault_set(&f);
    mz_status s = mz_evict(c, SIZE_MAX, &r);
    unsigned writes = mz_io_fault_calls(MZ_IO_WRITE), fired = mz_io_fault_fired();
    mz_io_fault_set(NULL);
    CHECK_MSG(s == MZ_E_IO, "%d", s);
    CHECK_EQ_INT(fired, 1);
    CHECK_MSG(writes > 3, "%u writes: the batch stopped at the failure", writes);
    CHECK_MSG(strstr(mz_ctx_errmsg(c), "KV chunk (layer") && strstr(mz_ctx_errmsg(c), strerror(EIO)),
              "%s", mz_ctx_errmsg(c));
    CHECK_MSG(r.n_kv_compkv < n_units, "%zu", r.n_kv_compkv);
    CHECK_EQ_INT(kv_count(c, MZ_UNIT_STORED_COMPRESSED), r.n_kv_compkv);
    CHECK_EQ_INT(kv_count(c, MZ_UNIT_COMPRESSED), n_units - r.n_kv_compkv);
    mz_get_mem_stats(c, &st);
    CHECK(st.kv.compressed_bytes > 0 && (r.n_kv_compkv == 0) == (st.kv.stored_bytes == 0));
    CHECK(mz_mem_is_valid(c->mem));
    CHECK(snap && kv_restored_equal(c, snap));
    CHECK(answer_matches(c));
    /* With the fault gone the rest goes out too. */
    CHECK(mz_ctx_truncate(c, N_BASE) == MZ_OK);
    free(snap);
    snap = kv_snapshot(c); /* the answer wrote past N_BASE in the last chunk */
    CHECK(snap != NULL);
    CHECK(mz_evict(c, SIZE_MAX, &r) == MZ_OK && r.n_kv_compkv == n_units);
    CHECK(snap && kv_restored_equal(c, snap));
    CHECK(answer_matches(c));
    mz_ctx_free(c);
    free(snap);
}

/* Evicts only the KV (to storage), so the first read is KV chunk (0, 0). */
static void test_read_faults(void)
{
    const struct { enum mz_io_fault_kind kind; int err; mz_status want; } cases[] = {
        {MZ_IO_FAULT_ERRNO, EIO, MZ_E_IO},
        {MZ_IO_FAULT_CORRUPT, 0, MZ_E_CORRUPT},
    };
    for (size_t i = 0; i < MZ_ARRAY_LEN(cases); i++) {
        for (int pl = 0; pl < 2; pl++) {
            mz_ctx_t *c = fresh(pl ? MZ_KV_PLACE_STORAGE_COMPRESSED : MZ_KV_PLACE_STORAGE);
            if (!c) continue;
            CHECK(mz_evict(c, kv_total(c), NULL) == MZ_OK);
            mz_unit_state was = mz_mem_kv_state(c->mem, 0, 0);
            mz_io_fault f = {.op = MZ_IO_READ, .kind = cases[i].kind, .err = cases[i].err,
                             .nth = 1, .count = UINT32_MAX};
            mz_io_fault_set(&f);
            mz_status s = mz_prefill(c, g_follow, N_FOLLOW);
            mz_io_fault_set(NULL);
            CHECK_MSG(s == cases[i].want, "case %zu/%d: %d %s", i, pl, s, mz_ctx_errmsg(c));
            CHECK_MSG(strstr(mz_ctx_errmsg(c), "KV chunk (layer 0, chunk 0)"), "%s",
                      mz_ctx_errmsg(c));
            CHECK(mz_ctx_logits(c) == NULL);          /* nothing computed from it */
            CHECK(mz_ctx_n_tokens(c) == N_BASE);      /* request undone */
            CHECK(mz_mem_kv_state(c->mem, 0, 0) == was); /* still evicted, copy intact */
            CHECK(mz_mem_is_valid(c->mem));
            /* Same through mz_restore. */
            mz_io_fault_set(&f);
            s = mz_restore(c, NULL);
            mz_io_fault_set(NULL);
            CHECK(s == cases[i].want && strstr(mz_ctx_errmsg(c), "layer 0, chunk 0"));
            CHECK(answer_matches(c)); /* retry with the fault gone */
            mz_ctx_free(c);
        }
    }
    /* Weights: a failed reload from the model file names the layer. */
    mz_ctx_t *c = fresh(MZ_KV_PLACE_STORAGE);
    if (!c) return;
    CHECK(mz_evict(c, SIZE_MAX, NULL) == MZ_OK);
    mz_io_fault f = {.op = MZ_IO_READ, .kind = MZ_IO_FAULT_ERRNO, .err = EIO, .nth = 1,
                     .count = UINT32_MAX};
    mz_io_fault_set(&f);
    mz_status s = mz_prefill(c, g_follow, N_FOLLOW);
    mz_io_fault_set(NULL);
    CHECK(s == MZ_E_IO && strstr(mz_ctx_errmsg(c), "weights of layer 0"));
    CHECK(mz_mem_weights_state(c->mem, 0) == MZ_UNIT_DROPPED);
    CHECK(answer_matches(c));
    mz_ctx_free(c);
}

/* Damage the swap file through a second descriptor. */
static void test_file_damage(void)
{
    mz_ctx_t *c = fresh(MZ_KV_PLACE_STORAGE);
    if (!c) return;
    CHECK(mz_evict(c, kv_total(c), NULL) == MZ_OK);
    mz_swapfile_t *sf = mz_mem_swapfile(c->mem);
    CHECK(sf != NULL);
    if (!sf) goto out;
    int fd = open(mz_swapfile_path(sf), O_RDWR);
    CHECK(fd >= 0);
    if (fd < 0) goto out;
    /* Flip one payload byte in the middle of the file. */
    off_t len = lseek(fd, 0, SEEK_END);
    off_t at = len / 2 + 123;
    unsigned char byte = 0, bad;
    CHECK(pread(fd, &byte, 1, at) == 1);
    bad = (unsigned char)(byte ^ 0x5a);
    CHECK(pwrite(fd, &bad, 1, at) == 1 && fsync(fd) == 0);
    mz_status s = mz_prefill(c, g_follow, N_FOLLOW);
    CHECK_MSG(s == MZ_E_CORRUPT, "%d %s", s, mz_ctx_errmsg(c));
    CHECK(strstr(mz_ctx_errmsg(c), "KV chunk (layer ") != NULL);
    CHECK(mz_ctx_logits(c) == NULL);
    s = mz_prefill(c, g_follow, N_FOLLOW); /* still damaged: still refused */
    CHECK(s == MZ_E_CORRUPT);
    CHECK(pwrite(fd, &byte, 1, at) == 1 && fsync(fd) == 0);
    CHECK(answer_matches(c)); /* data intact again: the retry works */

    /* Truncated file: the data is gone; the request fails naming a unit, and
     * the context recovers after dropping the lost part. */
    CHECK(mz_ctx_truncate(c, N_BASE) == MZ_OK);
    CHECK(mz_evict(c, kv_total(c), NULL) == MZ_OK);
    CHECK(ftruncate(fd, 0) == 0);
    s = mz_prefill(c, g_follow, N_FOLLOW);
    CHECK_MSG(s == MZ_E_IO || s == MZ_E_CORRUPT, "%d", s);
    CHECK(strstr(mz_ctx_errmsg(c), "KV chunk (layer 0, chunk 0)") != NULL);
    CHECK(mz_ctx_logits(c) == NULL);
    CHECK(mz_mem_is_valid(c->mem));
    CHECK(mz_ctx_truncate(c, 0) == MZ_OK);
    CHECK(mz_prefill(c, g_base, N_BASE) == MZ_OK);
    CHECK(answer_matches(c));
    close(fd);
out:
    mz_ctx_free(c);
}

int main(void)
{
    int setup = ev_pair_setup(T, "evict-faults.gguf", N_LAYER, &g_m, &g_ref_m, &g_vocab, g_base, N_BASE, g_follow,
                              N_FOLLOW, 5);
    if (setup >= 0) return setup;
    g_want = malloc((size_t)g_vocab * sizeof(float));
    mz_ctx_t *ref = ev_ctx(g_ref_m, "raw", MZ_KV_PLACE_AUTO, N_CTX, "swap-faults-ref");
    if (!g_want || !ref || mz_prefill(ref, g_base, N_BASE) ||
        ev_prefill_logits(ref, g_follow, N_FOLLOW, g_want, g_vocab))
        return 1;
    mz_ctx_free(ref);

    test_write_faults();
    test_compkv_batch();
    test_read_faults();
    test_file_damage();

    free(g_want);
    mz_model_free(g_m);
    mz_model_free(g_ref_m);
    return t_done(T);
}
