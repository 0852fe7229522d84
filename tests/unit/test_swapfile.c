/*
 * test_swapfile.c — swap file: round trips, slot reuse, verification, faults,
 * fallback paths, permissions, cleanup, async API; prints throughput.
 */
#define _GNU_SOURCE
#include "io/io.h"
#include "io/swapfile.h"
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_dir[1024];
static unsigned long long g_rng = 12345;

/* Modes every functional test runs in. */
typedef struct mode {
    const char *name;
    unsigned flags;
} mode;
static const mode k_modes[] = {
    {"direct+uring", 0},
    {"direct+sync", MZ_SWAP_NO_URING},
    {"buffered+uring", MZ_SWAP_FORCE_BUFFERED},
};

static void *page_alloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, n ? n : 1) != 0) abort();
    return p;
}

static void fill(void *buf, size_t n, unsigned long long seed)
{
    unsigned char *b = buf;
    unsigned long long s = seed;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        unsigned long long v = t_rand_u64(&s);
        memcpy(b + i, &v, 8);
    }
    for (; i < n; i++) b[i] = (unsigned char)t_rand_u64(&s);
}

static mz_swapfile_t *open_sf(unsigned flags, int depth)
{
    mz_swapfile_params p = mz_swapfile_params_default();
    p.dir = g_dir;
    p.flags = flags;
    p.queue_depth = depth;
    mz_swapfile_t *sf = NULL;
    mz_status s = mz_swapfile_open(&p, &sf);
    CHECK_MSG(s == MZ_OK, "open: %s", mz_last_error());
    return sf;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Flips one byte of the file at off through a separate descriptor. */
static void flip_file_byte(const char *path, uint64_t off)
{
    int fd = open(path, O_RDWR);
    unsigned char c = 0;
    CHECK(fd >= 0);
    if (fd < 0) return;
    CHECK(pread(fd, &c, 1, (off_t)off) == 1);
    c ^= 0x01;
    CHECK(pwrite(fd, &c, 1, (off_t)off) == 1);
    fsync(fd);
    close(fd);
}

static void test_hash_and_header(void)
{
    CHECK(mz_hash64("", 0, 0) == 0xEF46DB3751D8E999ULL);
    CHECK(mz_hash64("a", 1, 0) == 0xD24EC4F1A98C6E5BULL);
    CHECK(mz_hash64("abc", 3, 0) == 0x44BC2CF5AD770999ULL);
    unsigned char big[100];
    for (int i = 0; i < 100; i++) big[i] = (unsigned char)i;
    CHECK(mz_hash64(big, 100, 0) != mz_hash64(big, 100, 1));
    CHECK(mz_hash64(big, 100, 0) != mz_hash64(big, 99, 0));

    mz_swap_rec r = {.flags = MZ_SWAP_REC_SPLIT, .len = 8192, .tag = 0x1234, .seq = 7,
                     .payload_hash = 99};
    unsigned char h[MZ_SWAP_REC_HDR_BYTES];
    mz_swap_rec_encode(&r, h);
    mz_swap_rec d;
    const char *why = NULL;
    CHECK(mz_swap_rec_decode(h, sizeof h, &d, &why) == MZ_OK);
    CHECK(d.len == 8192 && d.tag == 0x1234 && d.seq == 7 && d.payload_hash == 99 &&
          d.flags == MZ_SWAP_REC_SPLIT);
    for (size_t i = 0; i < sizeof h; i++) {
        h[i] ^= 0x10;
        CHECK_MSG(mz_swap_rec_decode(h, sizeof h, &d, &why) == MZ_E_CORRUPT, "byte %zu", i);
        h[i] ^= 0x10;
    }
    CHECK(mz_swap_rec_decode(h, 63, &d, &why) == MZ_E_CORRUPT);
}

static void test_perms_and_lifetime(void)
{
    char sub[1200];
    snprintf(sub, sizeof sub, "%s/perm/a/b", g_dir);
    mz_swapfile_params p = mz_swapfile_params_default();
    p.dir = sub;
    mz_swapfile_t *sf = NULL;
    CHECK(mz_swapfile_open(&p, &sf) == MZ_OK);
    if (!sf) return;
    struct stat st;
    CHECK(stat(sub, &st) == 0 && (st.st_mode & 07777) == 0700);
    const char *path = mz_swapfile_path(sf);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 07777) == 0600 && S_ISREG(st.st_mode));
    char want[64];
    snprintf(want, sizeof want, "/mzswap-%ld-", (long)getpid());
    CHECK(strstr(path, want) != NULL);
    char saved[2048];
    snprintf(saved, sizeof saved, "%s", path);
    mz_swapfile_close(sf);
    CHECK(!file_exists(saved));

    /* UNLINK_EARLY: no name while open. */
    p.flags = MZ_SWAP_UNLINK_EARLY;
    CHECK(mz_swapfile_open(&p, &sf) == MZ_OK);
    if (sf) {
        CHECK(!file_exists(mz_swapfile_path(sf)));
        unsigned char buf[100];
        fill(buf, sizeof buf, 1);
        mz_swap_slot s;
        CHECK(mz_swapfile_write(sf, buf, sizeof buf, 1, &s) == MZ_OK);
        unsigned char out[100];
        size_t n = 0;
        CHECK(mz_swapfile_read(sf, s, out, sizeof out, &n) == MZ_OK && n == 100 &&
              !memcmp(buf, out, 100));
        mz_swapfile_close(sf);
    }

    /* Default directory follows XDG_CACHE_HOME. */
    char buf[1200], old[1200] = "";
    const char *e = getenv("XDG_CACHE_HOME");
    if (e) snprintf(old, sizeof old, "%s", e);
    setenv("XDG_CACHE_HOME", "/x/y", 1);
    CHECK(mz_swapfile_default_dir(buf, sizeof buf) == MZ_OK && !strcmp(buf, "/x/y/mzcache"));
    if (e) setenv("XDG_CACHE_HOME", old, 1);
    else unsetenv("XDG_CACHE_HOME");
}

static void test_round_trips(const mode *m)
{
    static const size_t sizes[] = {0, 1, 63, 4095, 4096, 8192, 192 * 1024, (1u << 20),
                                   (1u << 20) + 7, 3 * (1u << 20) + 4096};
    enum { N = MZ_ARRAY_LEN(sizes) };
    mz_swapfile_t *sf = open_sf(m->flags, 0);
    if (!sf) return;
    if (!(m->flags & MZ_SWAP_FORCE_BUFFERED)) CHECK(mz_swapfile_is_direct(sf));
    else CHECK(!mz_swapfile_is_direct(sf));
    /* Aligned and unaligned sources: (i % 2) picks an offset of 1 byte. */
    mz_swap_item w[2 * N];
    unsigned char *src[2 * N];
    for (size_t i = 0; i < 2 * N; i++) {
        size_t len = sizes[i % N];
        size_t mis = i >= N ? 1 : 0;
        src[i] = page_alloc(len + 1);
        fill(src[i] + mis, len, 100 + i);
        w[i] = (mz_swap_item){.buf = src[i] + mis, .len = len, .tag = 0xabc000 + i};
    }
    mz_status s = mz_swapfile_write_batch(sf, w, 2 * N);
    CHECK_MSG(s == MZ_OK, "%s: write batch: %s", m->name, mz_last_error());
    for (size_t i = 0; i < 2 * N; i++) {
        CHECK(w[i].status == MZ_OK && w[i].slot != 0);
        CHECK(mz_swapfile_slot_len(sf, w[i].slot) == sizes[i % N]);
        CHECK(mz_swapfile_slot_offset(sf, w[i].slot) % 4096 == 0);
    }
    /* Read back into aligned buffers (batch), then unaligned ones (singles). */
    mz_swap_item r[2 * N];
    unsigned char *dst[2 * N];
    for (size_t i = 0; i < 2 * N; i++) {
        dst[i] = page_alloc(sizes[i % N] + 4096 + 1);
        memset(dst[i], 0xee, sizes[i % N] + 4096 + 1);
        r[i] = (mz_swap_item){.buf = dst[i], .len = sizes[i % N] + 4096, .slot = w[i].slot};
    }
    s = mz_swapfile_read_batch(sf, r, 2 * N);
    CHECK_MSG(s == MZ_OK, "%s: read batch: %s", m->name, mz_last_error());
    for (size_t i = 0; i < 2 * N; i++) {
        size_t len = sizes[i % N];
        CHECK(r[i].status == MZ_OK && r[i].len == len && r[i].tag == 0xabc000 + i);
        CHECK_MSG(!memcmp(dst[i], w[i].buf, len), "%s: item %zu (%zu bytes) differs", m->name, i, len);
        CHECK(dst[i][len + 4095] == 0xee); /* nothing written past the record */
    }
    for (size_t i = 0; i < 2 * N; i++) {
        size_t len = sizes[i % N], got = 0;
        memset(dst[i], 0, len + 1);
        s = mz_swapfile_read(sf, w[i].slot, dst[i] + 1, len, &got);
        CHECK_MSG(s == MZ_OK && got == len && !memcmp(dst[i] + 1, w[i].buf, len),
                  "%s: unaligned read %zu: %s", m->name, i, mz_last_error());
    }
    /* Too small a buffer: MZ_E_RANGE with the size needed. */
    size_t got = 0;
    CHECK(mz_swapfile_read(sf, w[6].slot, dst[6], 100, &got) == MZ_E_RANGE && got == sizes[6]);
    mz_swapfile_stats st;
    mz_swapfile_get_stats(sf, &st);
    CHECK(st.n_slots == 2 * N);
    for (size_t i = 0; i < 2 * N; i++) {
        free(src[i]);
        free(dst[i]);
    }
    mz_swapfile_close(sf);
}

static void test_reuse(const mode *m)
{
    mz_swapfile_t *sf = open_sf(m->flags, 0);
    if (!sf) return;
    enum { K = 64 * 1024 };
    unsigned char *b = page_alloc(4 * K), *o = page_alloc(4 * K);
    fill(b, 4 * K, 5);
    mz_swap_slot a, bb, c, d, e;
    CHECK(mz_swapfile_write(sf, b, K, 1, &a) == MZ_OK);
    CHECK(mz_swapfile_write(sf, b + K, K, 2, &bb) == MZ_OK);
    CHECK(mz_swapfile_write(sf, b + 2 * K, K, 3, &c) == MZ_OK);
    uint64_t off_b = mz_swapfile_slot_offset(sf, bb);
    mz_swapfile_stats st;
    mz_swapfile_get_stats(sf, &st);
    uint64_t size3 = st.file_bytes;
    CHECK(mz_swapfile_slot_free(sf, bb));
    CHECK(!mz_swapfile_slot_free(sf, bb)); /* stale handle */
    size_t n;
    CHECK(mz_swapfile_read(sf, bb, o, K, &n) == MZ_E_INVAL);
    CHECK(mz_swapfile_write(sf, b + 3 * K, K, 4, &d) == MZ_OK);
    CHECK(mz_swapfile_slot_offset(sf, d) == off_b); /* the hole is reused */
    CHECK(d != bb);                                 /* but the handle is new */
    CHECK(mz_swapfile_read(sf, bb, o, K, &n) == MZ_E_INVAL);
    mz_swapfile_get_stats(sf, &st);
    CHECK(st.file_bytes == size3);
    /* Coalescing: free a and d (neighbours) -> one hole that fits 2 records. */
    CHECK(mz_swapfile_slot_free(sf, a));
    CHECK(mz_swapfile_slot_free(sf, d));
    mz_swapfile_get_stats(sf, &st);
    CHECK_EQ_INT(st.n_free_extents, 1);
    CHECK(mz_swapfile_write(sf, b, 2 * K, 5, &e) == MZ_OK);
    CHECK_EQ_INT(mz_swapfile_slot_offset(sf, e), 0);
    CHECK(mz_swapfile_read(sf, c, o, K, &n) == MZ_OK && n == K && !memcmp(o, b + 2 * K, K));
    CHECK(mz_swapfile_read(sf, e, o, 2 * K, &n) == MZ_OK && n == 2 * K && !memcmp(o, b, 2 * K));
    /* Freeing everything trims the file to 0. */
    CHECK(mz_swapfile_slot_free(sf, c));
    CHECK(mz_swapfile_slot_free(sf, e));
    mz_swapfile_get_stats(sf, &st);
    CHECK_EQ_INT(st.file_bytes, 0);
    CHECK_EQ_INT(st.n_slots, 0);
    CHECK_EQ_INT(st.used_bytes, 0);
    struct stat fst;
    CHECK(stat(mz_swapfile_path(sf), &fst) == 0 && fst.st_size == 0);
    /* Many random alloc/free cycles keep the space bounded and data intact. */
    mz_swap_slot live[32] = {0};
    size_t lens[32] = {0};
    for (int it = 0; it < 300; it++) {
        int k = (int)(t_rand_u64(&g_rng) % 32);
        if (live[k]) {
            CHECK(mz_swapfile_read(sf, live[k], o, 4 * K, &n) == MZ_OK && n == lens[k]);
            CHECK(!memcmp(o, b + (size_t)k, n));
            CHECK(mz_swapfile_slot_free(sf, live[k]));
            live[k] = 0;
        } else {
            lens[k] = (size_t)(t_rand_u64(&g_rng) % (3 * K));
            CHECK(mz_swapfile_write(sf, b + (size_t)k, lens[k], (uint64_t)k, &live[k]) == MZ_OK);
        }
    }
    mz_swapfile_get_stats(sf, &st);
    CHECK(st.file_bytes <= 32 * (3 * K + 8192) * 2);
    free(b);
    free(o);
    mz_swapfile_close(sf);
}

static void test_corruption(const mode *m)
{
    mz_swapfile_t *sf = open_sf(m->flags, 0);
    if (!sf) return;
    size_t len = 192 * 1024;
    unsigned char *b = page_alloc(len), *o = page_alloc(len);
    fill(b, len, 9);
    mz_swap_slot s1, s2, s3;
    CHECK(mz_swapfile_write(sf, b, len, 0x7001, &s1) == MZ_OK);          /* split layout */
    CHECK(mz_swapfile_write(sf, b + 1, 5000, 0x7002, &s2) == MZ_OK);     /* inline layout */
    CHECK(mz_swapfile_write(sf, b, len, 0x7003, &s3) == MZ_OK);
    size_t n;
    /* Payload byte of the split record. */
    flip_file_byte(mz_swapfile_path(sf), mz_swapfile_slot_offset(sf, s1) + 4096 + 1000);
    memset(o, 0xaa, len);
    mz_status s = mz_swapfile_read(sf, s1, o, len, &n);
    CHECK_EQ_INT(s, MZ_E_CORRUPT);
    CHECK_MSG(strstr(mz_last_error(), "0x7001") && strstr(mz_last_error(), "checksum"), "%s",
              mz_last_error());
    bool zeroed = true;
    for (size_t i = 0; i < len; i++) zeroed &= o[i] == 0;
    CHECK(zeroed); /* unverified bytes are not handed out */
    /* Header byte (tag) of the inline record. */
    flip_file_byte(mz_swapfile_path(sf), mz_swapfile_slot_offset(sf, s2) + 16);
    CHECK(mz_swapfile_read(sf, s2, o, len, &n) == MZ_E_CORRUPT);
    CHECK(strstr(mz_last_error(), "0x7002") != NULL);
    /* The untouched record still verifies; the damaged ones stay refused. */
    CHECK(mz_swapfile_read(sf, s3, o, len, &n) == MZ_OK && !memcmp(o, b, len));
    CHECK(mz_swapfile_read(sf, s1, o, len, &n) == MZ_E_CORRUPT);
    /* Stale data: copy s3's record over s1's extent -> header does not match the slot. */
    int fd = open(mz_swapfile_path(sf), O_RDWR);
    unsigned char *tmp = malloc(len + 4096);
    CHECK(pread(fd, tmp, len + 4096, (off_t)mz_swapfile_slot_offset(sf, s3)) == (ssize_t)(len + 4096));
    CHECK(pwrite(fd, tmp, len + 4096, (off_t)mz_swapfile_slot_offset(sf, s1)) == (ssize_t)(len + 4096));
    close(fd);
    free(tmp);
    CHECK(mz_swapfile_read(sf, s1, o, len, &n) == MZ_E_CORRUPT);
    CHECK(strstr(mz_last_error(), "does not match") != NULL);
    mz_swapfile_stats st;
    mz_swapfile_get_stats(sf, &st);
    CHECK(st.n_corrupt >= 4);
    free(b);
    free(o);
    mz_swapfile_close(sf);
}

static void test_truncate_unlink(const mode *m)
{
    mz_swapfile_t *sf = open_sf(m->flags, 0);
    if (!sf) return;
    size_t len = 256 * 1024;
    unsigned char *b = page_alloc(len), *o = page_alloc(len);
    fill(b, len, 11);
    mz_swap_slot s1, s2;
    CHECK(mz_swapfile_write(sf, b, len, 0x51, &s1) == MZ_OK);
    CHECK(mz_swapfile_write(sf, b, len, 0x52, &s2) == MZ_OK);
    /* Truncate behind our back: to mid-record of s2, then to 0. */
    CHECK(truncate(mz_swapfile_path(sf), (off_t)(mz_swapfile_slot_offset(sf, s2) + 4096 + 1000)) == 0);
    size_t n;
    mz_status s = mz_swapfile_read(sf, s2, o, len, &n);
    CHECK_MSG(s == MZ_E_IO && strstr(mz_last_error(), "truncated"), "%d %s", s, mz_last_error());
    CHECK(mz_swapfile_read(sf, s1, o, len, &n) == MZ_OK && !memcmp(o, b, len));
    CHECK(truncate(mz_swapfile_path(sf), 0) == 0);
    s = mz_swapfile_read(sf, s1, o, len, &n);
    CHECK_MSG(s == MZ_E_IO && strstr(mz_last_error(), "0x51"), "%d %s", s, mz_last_error());
    /* New records still work. */
    mz_swap_slot s3;
    CHECK(mz_swapfile_write(sf, b, len, 0x53, &s3) == MZ_OK);
    CHECK(mz_swapfile_read(sf, s3, o, len, &n) == MZ_OK && !memcmp(o, b, len));
    /* Unlinked behind our back: the open descriptor keeps the data. */
    CHECK(unlink(mz_swapfile_path(sf)) == 0);
    CHECK(mz_swapfile_read(sf, s3, o, len, &n) == MZ_OK && !memcmp(o, b, len));
    mz_swap_slot s4;
    CHECK(mz_swapfile_write(sf, b + 3, 777, 0x54, &s4) == MZ_OK);
    CHECK(mz_swapfile_read(sf, s4, o, len, &n) == MZ_OK && n == 777 && !memcmp(o, b + 3, 777));
    free(b);
    free(o);
    mz_swapfile_close(sf); /* must not fail although the name is gone */
}

static void test_faults(const mode *m)
{
    mz_swapfile_t *sf = open_sf(m->flags, 0);
    if (!sf) return;
    size_t len = 128 * 1024;
    unsigned char *b = page_alloc(8 * len), *o = page_alloc(len);
    fill(b, 8 * len, 13);
    mz_swap_slot keep;
    CHECK(mz_swapfile_write(sf, b, len, 0x900, &keep) == MZ_OK);
    mz_swapfile_stats before, after;

    static const int errs[] = {ENOSPC, EIO};
    for (size_t e = 0; e < 2; e++) {
        mz_swapfile_get_stats(sf, &before);
        mz_io_fault f = {.op = MZ_IO_WRITE, .kind = MZ_IO_FAULT_ERRNO, .err = errs[e], .nth = 2};
        mz_io_fault_set(&f);
        mz_swap_item w[4];
        for (int i = 0; i < 4; i++)
            w[i] = (mz_swap_item){.buf = b + (size_t)(i + 1) * len, .len = len - (i & 1), .tag = (uint64_t)i};
        mz_status s = mz_swapfile_write_batch(sf, w, 4);
        mz_io_fault_set(NULL);
        CHECK(mz_io_fault_fired() == 0); /* counters reset by the clear above */
        CHECK_EQ_INT(s, MZ_E_IO);
        CHECK_MSG(strstr(mz_last_error(), strerror(errs[e])) != NULL, "%s", mz_last_error());
        int failed = 0;
        for (int i = 0; i < 4; i++) {
            if (w[i].status != MZ_OK) {
                failed++;
                CHECK(w[i].status == MZ_E_IO && w[i].slot == 0);
                continue;
            }
            size_t n;
            CHECK(mz_swapfile_read(sf, w[i].slot, o, len, &n) == MZ_OK && n == w[i].len &&
                  !memcmp(o, w[i].buf, n));
            CHECK(mz_swapfile_slot_free(sf, w[i].slot));
        }
        CHECK_EQ_INT(failed, 1);
        mz_swapfile_get_stats(sf, &after);
        CHECK(after.n_slots == before.n_slots && after.used_bytes == before.used_bytes);
        size_t n;
        CHECK(mz_swapfile_read(sf, keep, o, len, &n) == MZ_OK && !memcmp(o, b, len));
    }

    /* The file cannot grow (fallocate ENOSPC). */
    mz_io_fault ff = {.op = MZ_IO_FALLOCATE, .kind = MZ_IO_FAULT_ERRNO, .err = ENOSPC, .nth = 1,
                      .count = UINT32_MAX};
    mz_io_fault_set(&ff);
    mz_swap_slot s0 = 1;
    CHECK(mz_swapfile_write(sf, b, 8 * len, 1, &s0) == MZ_E_IO && s0 == 0); /* must grow */
    CHECK(strstr(mz_last_error(), "No space") != NULL);
    mz_io_fault_set(NULL);

    /* Read errors: EIO, then corruption in flight; the slot survives both. */
    size_t n;
    mz_io_fault rf = {.op = MZ_IO_READ, .kind = MZ_IO_FAULT_ERRNO, .err = EIO, .nth = 1};
    mz_io_fault_set(&rf);
    CHECK(mz_swapfile_read(sf, keep, o, len, &n) == MZ_E_IO);
    CHECK(strstr(mz_last_error(), "Input/output error") != NULL);
    rf.kind = MZ_IO_FAULT_CORRUPT;
    rf.count = UINT32_MAX; /* sync mode reads header block and payload separately */
    mz_io_fault_set(&rf);
    CHECK(mz_swapfile_read(sf, keep, o, len, &n) == MZ_E_CORRUPT);
    mz_io_fault_set(NULL);
    CHECK(mz_swapfile_read(sf, keep, o, len, &n) == MZ_OK && !memcmp(o, b, len));

    /* Every read and write short: retried to completion. */
    mz_io_fault sf_ = {.op = MZ_IO_WRITE, .kind = MZ_IO_FAULT_SHORT, .nth = 1, .count = UINT32_MAX};
    mz_io_fault_set(&sf_);
    mz_swap_item w[3] = {{.buf = b, .len = 3 * len, .tag = 1},
                         {.buf = b + 5, .len = len + 5, .tag = 2},
                         {.buf = b + 4096, .len = 4096, .tag = 3}};
    CHECK_MSG(mz_swapfile_write_batch(sf, w, 3) == MZ_OK, "%s", mz_last_error());
    CHECK(mz_io_fault_fired() > 3);
    sf_.op = MZ_IO_READ;
    mz_io_fault_set(&sf_);
    unsigned char *big = page_alloc(3 * len);
    for (int i = 0; i < 3; i++) {
        CHECK_MSG(mz_swapfile_read(sf, w[i].slot, big, 3 * len, &n) == MZ_OK && n == w[i].len &&
                  !memcmp(big, w[i].buf, n), "%s short item %d: %s", m->name, i, mz_last_error());
    }
    CHECK(mz_io_fault_fired() > 3);
    mz_io_fault_set(NULL);
    free(big);
    free(b);
    free(o);
    mz_swapfile_close(sf);
}

static void test_fallbacks(void)
{
    unsigned char *b = page_alloc(65536), *o = page_alloc(65536);
    fill(b, 65536, 17);
    size_t n;
    mz_swap_slot s;
    /* O_DIRECT refused at open. */
    mz_io_fault f = {.op = MZ_IO_OPEN, .kind = MZ_IO_FAULT_ERRNO, .err = EINVAL, .nth = 1};
    mz_io_fault_set(&f);
    mz_swapfile_t *sf = open_sf(0, 0);
    mz_io_fault_set(NULL);
    if (sf) {
        CHECK(!mz_swapfile_is_direct(sf));
        CHECK(mz_swapfile_write(sf, b, 65536, 1, &s) == MZ_OK);
        CHECK(mz_swapfile_read(sf, s, o, 65536, &n) == MZ_OK && !memcmp(o, b, 65536));
        mz_swapfile_close(sf);
    }
    /* O_DIRECT accepted at open but the first aligned write says EINVAL. */
    f.op = MZ_IO_WRITE;
    mz_io_fault_set(&f);
    sf = open_sf(0, 0);
    mz_io_fault_set(NULL);
    if (sf) {
        CHECK(!mz_swapfile_is_direct(sf));
        CHECK(mz_swapfile_write(sf, b + 1, 60000, 1, &s) == MZ_OK);
        CHECK(mz_swapfile_read(sf, s, o, 65536, &n) == MZ_OK && n == 60000 && !memcmp(o, b + 1, n));
        /* buffered mode drops what it wrote from the page cache */
        mz_swapfile_close(sf);
    }
    /* A directory on tmpfs (may or may not take O_DIRECT: both must work). */
    mz_swapfile_params p = mz_swapfile_params_default();
    char shm[256];
    snprintf(shm, sizeof shm, "/dev/shm/mzcache-test-%ld", (long)getpid());
    p.dir = shm;
    if (mz_swapfile_open(&p, &sf) == MZ_OK) {
        CHECK(mz_swapfile_write(sf, b, 65536, 1, &s) == MZ_OK);
        CHECK(mz_swapfile_read(sf, s, o, 65536, &n) == MZ_OK && !memcmp(o, b, 65536));
        printf("  tmpfs swap file: %s\n", mz_swapfile_is_direct(sf) ? "O_DIRECT accepted" : "buffered");
        mz_swapfile_close(sf);
        rmdir(shm);
    }
    /* Open fails cleanly (nothing left behind) when the file cannot be created. */
    f.op = MZ_IO_OPEN;
    f.err = EACCES;
    mz_io_fault_set(&f);
    sf = (mz_swapfile_t *)1;
    CHECK(mz_swapfile_open(&p, &sf) == MZ_E_IO && sf == NULL);
    mz_io_fault_set(NULL);
    rmdir(shm);
    free(b);
    free(o);
}

/* A pid that is dead and reaped (a child that exited at once). */
static pid_t dead_pid(void)
{
    fflush(stdout);
    fflush(stderr);
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0);
    return child;
}

static void test_cleanup_stale(void)
{
    const pid_t child = dead_pid();
    char stale[1200], other[1200];
    snprintf(stale, sizeof stale, "%s/mzswap-%ld-0123456789abcdef.swp", g_dir, (long)child);
    snprintf(other, sizeof other, "%s/unrelated.swp", g_dir);
    int fd = open(stale, O_CREAT | O_WRONLY, 0600);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    fd = open(other, O_CREAT | O_WRONLY, 0600);
    if (fd >= 0) close(fd);
    mz_swapfile_t *sf = open_sf(0, 0);
    int removed = -1;
    CHECK(mz_swapfile_cleanup_stale(g_dir, &removed) == MZ_OK);
    CHECK_EQ_INT(removed, 1);
    CHECK(!file_exists(stale));
    CHECK(file_exists(other));
    if (sf) CHECK(file_exists(mz_swapfile_path(sf)));
    mz_swapfile_close(sf);
    unlink(other);
}

typedef struct {
    int fd;
    int hold_ms;
} lock_holder;

static void *release_lock_later(void *arg)
{
    lock_holder *h = arg;
    struct timespec t = {h->hold_ms / 1000, (long)(h->hold_ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
    close(h->fd);
    return NULL;
}

/* A killed process's flock can outlive its reaping for a moment (its
 * io_uring reads release the file late): a dead pid's file whose lock frees
 * within the scan's wait is removed; one whose lock stays held is left. */
static void test_cleanup_stale_lock_held(void)
{
    const pid_t child = dead_pid();
    char late[1200], held[1200];
    snprintf(late, sizeof late, "%s/mzswap-%ld-1111111111111111.swp", g_dir, (long)child);
    snprintf(held, sizeof held, "%s/mzswap-%ld-2222222222222222.swp", g_dir, (long)child);

    lock_holder h = {.fd = open(late, O_CREAT | O_RDWR, 0600), .hold_ms = 150};
    CHECK(h.fd >= 0 && flock(h.fd, LOCK_EX | LOCK_NB) == 0);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, release_lock_later, &h) == 0);
    int removed = -1;
    CHECK(mz_swapfile_cleanup_stale(g_dir, &removed) == MZ_OK);
    pthread_join(th, NULL);
    CHECK_EQ_INT(removed, 1);
    CHECK_MSG(!file_exists(late), "a lock released 150 ms into the scan still kept %s", late);

    int fd = open(held, O_CREAT | O_RDWR, 0600);
    CHECK(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0);
    removed = -1;
    CHECK(mz_swapfile_cleanup_stale(g_dir, &removed) == MZ_OK);
    CHECK_EQ_INT(removed, 0);
    CHECK_MSG(file_exists(held), "a file whose lock is held was removed");
    if (fd >= 0) close(fd);
    unlink(held);
}

static void test_async(void)
{
    mz_swapfile_t *sf = open_sf(0, 0);
    if (!sf) return;
    enum { N = 12 };
    size_t len = 96 * 1024;
    unsigned char *b = page_alloc(N * len), *o = page_alloc(N * len);
    fill(b, N * len, 21);
    mz_swap_aio_t *q = NULL;
    CHECK(mz_swap_aio_init(sf, 3, &q) == MZ_OK);
    if (!q) return;
    mz_swap_item it[N];
    for (int i = 0; i < N; i++) {
        it[i] = (mz_swap_item){.buf = b + (size_t)i * len, .len = len - (size_t)i * 100, .tag = (uint64_t)i};
        CHECK(mz_swap_aio_submit_write(q, &it[i]) == MZ_OK);
    }
    CHECK(mz_swap_aio_pending(q) == N);
    int got = 0, polls = 0;
    while (got < N) {
        mz_swap_item *d = mz_swap_aio_reap(q, (polls++ & 1) != 0);
        if (!d) continue;
        CHECK(d->status == MZ_OK && d->slot);
        got++;
    }
    CHECK(mz_swap_aio_reap(q, true) == NULL);
    mz_swap_item r[N + 1];
    for (int i = 0; i < N; i++) {
        r[i] = (mz_swap_item){.buf = o + (size_t)i * len, .len = len, .slot = it[i].slot};
        CHECK(mz_swap_aio_submit_read(q, &r[i]) == MZ_OK);
    }
    r[N] = (mz_swap_item){.buf = o, .len = len, .slot = 0xdead00000001ULL};
    CHECK(mz_swap_aio_submit_read(q, &r[N]) == MZ_E_INVAL);
    got = 0;
    mz_swap_item *d;
    while ((d = mz_swap_aio_reap(q, true)) != NULL) {
        got++;
        if (d == &r[N]) {
            CHECK(d->status == MZ_E_INVAL);
            continue;
        }
        int i = (int)(d - r);
        CHECK(d->status == MZ_OK && d->len == it[i].len && d->tag == (uint64_t)i &&
              !memcmp(d->buf, it[i].buf, d->len));
    }
    CHECK_EQ_INT(got, N + 1);
    mz_swap_aio_free(q);
    free(b);
    free(o);
    mz_swapfile_close(sf);
}

/* Two threads share one swap file: batch calls, single calls, frees. */
typedef struct thr_arg {
    mz_swapfile_t *sf;
    int id;
    int bad;
} thr_arg;

static void *thr_main(void *p)
{
    thr_arg *a = p;
    enum { L = 20000 };
    unsigned char *b = page_alloc(4 * L), *o = page_alloc(4 * L);
    fill(b, 4 * L, (unsigned long long)a->id);
    for (int it = 0; it < 40; it++) {
        mz_swap_item w[4];
        for (int i = 0; i < 4; i++) w[i] = (mz_swap_item){.buf = b + i * L, .len = L, .tag = (uint64_t)a->id};
        if (mz_swapfile_write_batch(a->sf, w, 4) != MZ_OK) a->bad++;
        for (int i = 0; i < 4; i++) {
            size_t n = 0;
            if (mz_swapfile_read(a->sf, w[i].slot, o, L, &n) != MZ_OK || n != L || memcmp(o, b + i * L, L))
                a->bad++;
            if (!mz_swapfile_slot_free(a->sf, w[i].slot)) a->bad++;
        }
    }
    free(b);
    free(o);
    return NULL;
}

static void test_threads(void)
{
    mz_swapfile_t *sf = open_sf(0, 0);
    if (!sf) return;
    pthread_t t[2];
    thr_arg a[2] = {{sf, 1, 0}, {sf, 2, 0}};
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, thr_main, &a[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    CHECK_EQ_INT(a[0].bad + a[1].bad, 0);
    mz_swapfile_stats st;
    mz_swapfile_get_stats(sf, &st);
    CHECK_EQ_INT(st.n_slots, 0);
    CHECK_EQ_INT(st.file_bytes, 0);
    mz_swapfile_close(sf);
}


static void test_page_cache_and_speed(void)
{
    enum { REC = 1 << 20, N = 24 };
    unsigned char *b = page_alloc((size_t)N * REC);
    fill(b, (size_t)N * REC, 33);
    for (int qd = 1; qd <= 4; qd += 3) {
        mz_swapfile_t *sf = open_sf(0, qd);
        if (!sf) break;
        mz_swap_item it[N];
        for (int i = 0; i < N; i++) it[i] = (mz_swap_item){.buf = b + (size_t)i * REC, .len = REC};
        double t0 = mz_time_ms();
        CHECK(mz_swapfile_write_batch(sf, it, N) == MZ_OK);
        double t1 = mz_time_ms();
        for (int i = 0; i < N; i++) it[i].len = REC;
        CHECK(mz_swapfile_read_batch(sf, it, N) == MZ_OK);
        double t2 = mz_time_ms();
        double mb = (double)N * REC / 1e6;
        printf("  1 MiB records, QD %d (%s, %s): write %.0f MB/s, read+verify %.0f MB/s\n", qd,
               mz_swapfile_is_direct(sf) ? "O_DIRECT" : "buffered",
               mz_swapfile_uses_uring(sf) ? "io_uring" : "sync", mb / ((t1 - t0) / 1e3),
               mb / ((t2 - t1) / 1e3));
        if (mz_swapfile_is_direct(sf)) {
            long res = t_resident_pages(mz_swapfile_path(sf));
            CHECK_MSG(res == 0, "O_DIRECT swap file has %ld pages in the page cache", res);
        }
        mz_swapfile_close(sf);
    }
    /* Buffered fallback also leaves (almost) nothing cached after writes + reads. */
    mz_swapfile_t *sf = open_sf(MZ_SWAP_FORCE_BUFFERED, 4);
    if (sf) {
        mz_swap_item it[8];
        for (int i = 0; i < 8; i++) it[i] = (mz_swap_item){.buf = b + (size_t)i * REC, .len = REC};
        CHECK(mz_swapfile_write_batch(sf, it, 8) == MZ_OK);
        CHECK(mz_swapfile_read_batch(sf, it, 8) == MZ_OK);
        long res = t_resident_pages(mz_swapfile_path(sf));
        CHECK_MSG(res >= 0 && res < 64, "buffered swap file keeps %ld pages cached", res);
        mz_swapfile_close(sf);
    }
    free(b);
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "%s/swap-%ld", t_tmp_dir(), (long)getpid());
    if (mkdir(g_dir, 0700) != 0 && errno != EEXIST) return t_skip("test_swapfile", "cannot create tmp dir");
    /* Does this filesystem take O_DIRECT at all? (STYLE: skip if not.) */
    char probe[1200];
    snprintf(probe, sizeof probe, "%s/probe", g_dir);
    int fd = open(probe, O_CREAT | O_RDWR | O_DIRECT, 0600);
    if (fd < 0) {
        rmdir(g_dir);
        return t_skip("test_swapfile", "the test directory's filesystem refuses O_DIRECT");
    }
    close(fd);
    unlink(probe);

    test_hash_and_header();
    test_perms_and_lifetime();
    for (size_t i = 0; i < MZ_ARRAY_LEN(k_modes); i++) {
        const mode *m = &k_modes[i];
        test_round_trips(m);
        test_reuse(m);
        test_corruption(m);
        test_truncate_unlink(m);
        test_faults(m);
    }
    test_fallbacks();
    test_cleanup_stale();
    test_cleanup_stale_lock_held();
    test_async();
    test_threads();
    test_page_cache_and_speed();

    /* Nothing of ours is left behind. */
    char sub[1300];
    snprintf(sub, sizeof sub, "%s/perm/a/b", g_dir);
    rmdir(sub);
    snprintf(sub, sizeof sub, "%s/perm/a", g_dir);
    rmdir(sub);
    snprintf(sub, sizeof sub, "%s/perm", g_dir);
    rmdir(sub);
    CHECK_MSG(rmdir(g_dir) == 0, "%s not empty after the tests", g_dir);
    return t_done("test_swapfile");
}
