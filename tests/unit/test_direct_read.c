/*
 * test_direct_read.c — O_DIRECT reads of unaligned ranges compared with plain
 * pread, on the bundled model if present (else a generated file); faults,
 * fallbacks, page-cache check; prints throughput.
 */
#define _GNU_SOURCE
#include "io/direct_read.h"
#include "io/io.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static unsigned long long g_rng = 777;
static char g_gen[1200];        /* generated file (removed at the end) */

static void *page_alloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, n ? n : 1) != 0) abort();
    return p;
}

/* Writes a file of n pseudo-random bytes; drops it from the page cache. */
static bool make_file(const char *path, size_t n)
{
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    if (fd < 0) return false;
    unsigned char *b = malloc(1 << 20);
    unsigned long long s = 4242;
    bool ok = b != NULL;
    for (size_t done = 0; ok && done < n;) {
        size_t k = MZ_MIN((size_t)1 << 20, n - done);
        for (size_t i = 0; i < k; i++) b[i] = (unsigned char)(t_rand_u64(&s) >> 7);
        ok = write(fd, b, k) == (ssize_t)k;
        done += k;
    }
    free(b);
    ok = ok && fsync(fd) == 0;
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return ok;
}


static void drop_cache(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

/* A random range of the file: lengths from tiny to a few MiB. */
static void rand_range(uint64_t size, uint64_t *off, size_t *len)
{
    unsigned long long r = t_rand_u64(&g_rng);
    size_t cap;
    switch (r % 4) {
    case 0: cap = 4; break;
    case 1: cap = 9000; break;
    case 2: cap = 300000; break;
    default: cap = 3u << 20; break;
    }
    size_t l = (size_t)(t_rand_u64(&g_rng) % (cap + 1));
    if (l > size) l = (size_t)size;
    uint64_t o = t_rand_u64(&g_rng) % (size - l + 1);
    if (r % 7 == 0) o = size - l;  /* ends exactly at EOF */
    if (r % 11 == 0) o -= o % 4096; /* aligned start */
    *off = o;
    *len = l;
}

/* Compares n random ranges (in batches of up to 8) with pread. */
static void compare_ranges(const char *path, const mz_dfile_params *p, const char *name, int n)
{
    mz_dfile_t *f = NULL;
    if (mz_dfile_open(path, p, &f) != MZ_OK) {
        CHECK_MSG(0, "%s: open: %s", name, mz_last_error());
        return;
    }
    int fd = open(path, O_RDONLY);
    uint64_t size = mz_dfile_size(f);
    int zero_copy = 0, bounced = 0;
    for (int done = 0; done < n;) {
        int k = 1 + (int)(t_rand_u64(&g_rng) % 8);
        mz_dread_item it[8];
        unsigned char *mem[8], *ref[8];
        for (int i = 0; i < k; i++) {
            rand_range(size, &it[i].off, &it[i].len);
            mem[i] = page_alloc(it[i].len + 8192);
            /* Half the time a destination congruent to the offset (zero-copy). */
            size_t shift = (t_rand_u64(&g_rng) & 1) ? (size_t)(it[i].off % 4096)
                                                    : (size_t)(t_rand_u64(&g_rng) % 4096);
            it[i].dst = mem[i] + shift;
            memset(mem[i], 0xcd, it[i].len + 8192);
            if (mz_dfile_zero_copy(f, it[i].off, it[i].dst)) zero_copy++;
            else bounced++;
            ref[i] = malloc(it[i].len + 1);
            CHECK(pread(fd, ref[i], it[i].len, (off_t)it[i].off) == (ssize_t)it[i].len);
        }
        mz_status s = mz_dfile_read_batch(f, it, (size_t)k);
        CHECK_MSG(s == MZ_OK, "%s: %s", name, mz_last_error());
        for (int i = 0; i < k; i++) {
            unsigned char *d = it[i].dst;
            CHECK_MSG(it[i].status == MZ_OK && !memcmp(d, ref[i], it[i].len),
                      "%s: range [%llu, +%zu) differs", name, (unsigned long long)it[i].off, it[i].len);
            /* No byte outside [dst, dst+len) was touched. */
            bool guard = true;
            for (unsigned char *g = mem[i]; g < d; g++) guard &= *g == 0xcd;
            for (unsigned char *g = d + it[i].len; g < mem[i] + it[i].len + 8192; g++) guard &= *g == 0xcd;
            CHECK_MSG(guard, "%s: write outside the destination", name);
            free(mem[i]);
            free(ref[i]);
        }
        done += k;
    }
    if (mz_dfile_is_direct(f)) CHECK(zero_copy > 0 && bounced > 0);
    close(fd);
    mz_dfile_close(f);
}

static void test_edges(const char *path)
{
    mz_dfile_t *f = NULL;
    CHECK(mz_dfile_open(path, NULL, &f) == MZ_OK);
    if (!f) return;
    uint64_t size = mz_dfile_size(f);
    unsigned char *b = page_alloc(3 << 20);
    CHECK(mz_dfile_read(f, 0, 0, b) == MZ_OK);
    CHECK(mz_dfile_read(f, size, 0, b) == MZ_OK);
    CHECK(mz_dfile_read(f, size - 1, 2, b) == MZ_E_RANGE);
    CHECK(mz_dfile_read(f, size + 4096, 1, b) == MZ_E_RANGE);
    CHECK(strstr(mz_last_error(), "outside the file") != NULL);
    /* One bad item does not stop the others. */
    mz_dread_item it[2] = {{.off = size, .len = 10, .dst = b}, {.off = 5, .len = 100, .dst = b + 4096}};
    CHECK(mz_dfile_read_batch(f, it, 2) == MZ_E_RANGE);
    CHECK(it[0].status == MZ_E_RANGE && it[1].status == MZ_OK);
    mz_dfile_close(f);
    CHECK(mz_direct_read(path, 12345, 100000, b) == MZ_OK);
    CHECK(mz_direct_read("/nonexistent/file", 0, 1, b) == MZ_E_IO);
    free(b);
}

/* The bounce pool exists only from a batch to mz_dfile_idle, and a read
 * after idle maps it again and reads the same bytes (a bounce item: dst's
 * phase differs from the file's, so the pool carries the data). */
static void test_idle(const char *path)
{
    mz_dfile_t *f = NULL;
    CHECK(mz_dfile_open(path, NULL, &f) == MZ_OK);
    if (!f) return;
    CHECK_MSG(!mz_dfile_holds_pool(f), "a reader holds its bounce pool before any read");
    size_t n = 3u << 20;
    unsigned char *a = page_alloc(n + 4096), *b = page_alloc(n + 4096);
    CHECK(mz_dfile_read(f, 4096 + 17, n, a + 1) == MZ_OK);
    CHECK(mz_dfile_holds_pool(f) == mz_dfile_is_direct(f));
    mz_dfile_idle(f);
    CHECK_MSG(!mz_dfile_holds_pool(f), "mz_dfile_idle kept the bounce pool");
    mz_dfile_idle(f); /* twice is fine */
    CHECK(mz_dfile_read(f, 4096 + 17, n, b + 1) == MZ_OK);
    CHECK(memcmp(a + 1, b + 1, n) == 0);
    mz_dfile_close(f); /* with the pool held */
    free(a);
    free(b);
}

static void test_faults(const char *path)
{
    unsigned char *b = page_alloc(3 << 20), *ref = malloc(3 << 20);
    int fd = open(path, O_RDONLY);
    CHECK(pread(fd, ref, 3 << 20, 1000) == 3 << 20);
    close(fd);
    for (int sync = 0; sync < 2; sync++) {
        mz_dfile_params p = mz_dfile_params_default();
        p.flags = sync ? MZ_DFILE_NO_URING : 0;
        mz_dfile_t *f = NULL;
        CHECK(mz_dfile_open(path, &p, &f) == MZ_OK);
        if (!f) continue;
        mz_io_fault e = {.op = MZ_IO_READ, .kind = MZ_IO_FAULT_ERRNO, .err = EIO, .nth = 2};
        mz_io_fault_set(&e);
        CHECK(mz_dfile_read(f, 1000, 3 << 20, b) == MZ_E_IO);
        CHECK(strstr(mz_last_error(), "Input/output error") != NULL);
        mz_io_fault s = {.op = MZ_IO_READ, .kind = MZ_IO_FAULT_SHORT, .nth = 1, .count = UINT32_MAX};
        mz_io_fault_set(&s);
        memset(b, 0, 3 << 20);
        CHECK_MSG(mz_dfile_read(f, 1000, 3 << 20, b) == MZ_OK && !memcmp(b, ref, 3 << 20), "%s",
                  mz_last_error());
        CHECK(mz_io_fault_fired() > 3);
        mz_io_fault_set(NULL);
        mz_dfile_close(f);
    }
    /* O_DIRECT refused at open: buffered fallback. */
    mz_io_fault o = {.op = MZ_IO_OPEN, .kind = MZ_IO_FAULT_ERRNO, .err = EINVAL, .nth = 1};
    mz_io_fault_set(&o);
    mz_dfile_t *f = NULL;
    CHECK(mz_dfile_open(path, NULL, &f) == MZ_OK);
    mz_io_fault_set(NULL);
    if (f) {
        CHECK(!mz_dfile_is_direct(f));
        CHECK(mz_dfile_read(f, 1000, 3 << 20, b) == MZ_OK && !memcmp(b, ref, 3 << 20));
        mz_dfile_close(f);
    }
    free(b);
    free(ref);
}

static void test_truncated(void)
{
    const char *path = t_tmp_path("dread-trunc.bin");
    CHECK(make_file(path, 1 << 20));
    mz_dfile_t *f = NULL;
    CHECK(mz_dfile_open(path, NULL, &f) == MZ_OK);
    if (!f) return;
    CHECK(truncate(path, 300000) == 0);
    unsigned char *b = page_alloc(1 << 20);
    mz_status s = mz_dfile_read(f, 200000, 500000, b);
    CHECK_MSG(s == MZ_E_IO && strstr(mz_last_error(), "truncated"), "%d %s", s, mz_last_error());
    CHECK(mz_dfile_read(f, 1000, 200000, b) == MZ_OK);
    free(b);
    mz_dfile_close(f);
    unlink(path);
}

static void test_page_cache_and_speed(const char *path)
{
    drop_cache(path);
    long before = t_resident_pages(path);
    mz_dfile_t *f = NULL;
    CHECK(mz_dfile_open(path, NULL, &f) == MZ_OK);
    if (!f) return;
    size_t total = (size_t)MZ_MIN(mz_dfile_size(f), (uint64_t)32 << 20);
    total -= total % (1 << 20);
    unsigned char *b = page_alloc(total);
    for (int qd = 1; qd <= 4; qd += 3) {
        mz_dfile_params p = mz_dfile_params_default();
        p.queue_depth = qd;
        mz_dfile_t *g = NULL;
        CHECK(mz_dfile_open(path, &p, &g) == MZ_OK);
        if (!g) break;
        enum { MAXN = 64 };
        mz_dread_item it[MAXN];
        size_t n = total >> 20;
        for (size_t i = 0; i < n; i++) it[i] = (mz_dread_item){.off = (uint64_t)i << 20, .len = 1 << 20, .dst = b + (i << 20)};
        double t0 = mz_time_ms();
        CHECK(mz_dfile_read_batch(g, it, n) == MZ_OK);
        double t1 = mz_time_ms();
        printf("  1 MiB reads, QD %d (%s, %s): %.0f MB/s\n", qd,
               mz_dfile_is_direct(g) ? "O_DIRECT" : "buffered", mz_dfile_uses_uring(g) ? "io_uring" : "sync",
               (double)total / 1e6 / ((t1 - t0) / 1e3));
        mz_dfile_close(g);
    }
    if (mz_dfile_is_direct(f) && before == 0) {
        long after = t_resident_pages(path);
        CHECK_MSG(after == 0, "O_DIRECT reads left %ld pages in the page cache", after);
    } else {
        printf("  page-cache check skipped (%s)\n", mz_dfile_is_direct(f) ? "file was cached" : "buffered");
    }
    free(b);
    mz_dfile_close(f);
}

int main(void)
{
    const char *model = t_real_model_path();
    const char *path = model;
    snprintf(g_gen, sizeof g_gen, "%s", t_tmp_path("dread-gen.bin"));
    if (!path) {
        /* Not a multiple of 4096, so the last page is partial. */
        if (!make_file(g_gen, (24u << 20) + 1234)) return t_skip("test_direct_read", "cannot write a test file");
        path = g_gen;
    }
    int fd = open(path, O_RDONLY | O_DIRECT);
    if (fd < 0) {
        unlink(g_gen);
        return t_skip("test_direct_read", "the filesystem refuses O_DIRECT");
    }
    close(fd);
    printf("  reading %s\n", path);

    compare_ranges(path, NULL, "direct+uring", 120);
    mz_dfile_params p = mz_dfile_params_default();
    p.flags = MZ_DFILE_NO_URING;
    compare_ranges(path, &p, "direct+sync", 40);
    p.flags = MZ_DFILE_FORCE_BUFFERED;
    compare_ranges(path, &p, "buffered", 40);
    p = mz_dfile_params_default();
    p.queue_depth = 2;
    p.max_io_bytes = 64 * 1024; /* many pieces per range */
    compare_ranges(path, &p, "direct+uring small pieces", 40);
    test_edges(path);
    test_idle(path);
    test_faults(path);
    test_truncated();
    test_page_cache_and_speed(path);
    unlink(g_gen);
    return t_done("test_direct_read");
}
