/*
 * test_compstack.c — the compressed stack: LIFO order, bottom removal, views
 * of the lowest items, mixed and oversized items, segment release (counted
 * and seen in RSS), accounting, deferred unmapping (pages freed at once,
 * mappings kept until asked).
 */
#define _DEFAULT_SOURCE /* mincore */
#include "mem/compstack.h"
#include "testutil.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

static unsigned long long g_rng = 0xc0ffee42ULL;

/* Item content is a function of (tag, len), so any copy can be checked. */
static void fill_item(uint8_t *p, size_t len, uint64_t tag)
{
    uint64_t x = tag * 0x9e3779b97f4a7c15ULL + len;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

static int item_ok(const uint8_t *p, size_t len, uint64_t tag, uint8_t *scratch)
{
    fill_item(scratch, len, tag);
    return memcmp(p, scratch, len) == 0;
}

/* Reference model: a deque of (tag, len). */
typedef struct {
    uint64_t tag[4096];
    size_t len[4096];
    size_t lo, hi; /* live items are [lo, hi) */
} model;

static void test_basic(void)
{
    mz_compstack_t *s;
    CHECK_EQ_INT(mz_compstack_init(0, &s), MZ_OK);
    uint8_t buf[64], out[64];
    size_t len;
    uint64_t tag;
    const uint8_t *view;
    CHECK_EQ_INT(mz_compstack_pop(s, out, sizeof out, &len, &tag), MZ_AGAIN);
    CHECK_EQ_INT(mz_compstack_take_bottom(s, out, sizeof out, &len, &tag), MZ_AGAIN);
    CHECK_EQ_INT(mz_compstack_peek_top(s, &view, &len, &tag), MZ_AGAIN);
    CHECK_EQ_INT(mz_compstack_drop_bottom(s), MZ_AGAIN);
    CHECK_EQ_INT(mz_compstack_push(s, buf, 0, 1), MZ_E_INVAL);
    for (int i = 0; i < 3; i++) {
        fill_item(buf, 10u + (size_t)i, (uint64_t)i);
        CHECK_EQ_INT(mz_compstack_push(s, buf, 10u + (size_t)i, (uint64_t)i), MZ_OK);
    }
    CHECK_EQ_INT(mz_compstack_count(s), 3);
    CHECK_EQ_INT(mz_compstack_bytes(s), 33);
    CHECK(mz_compstack_peek_top(s, &view, &len, &tag) == MZ_OK && tag == 2 && len == 12);
    CHECK(((uintptr_t)view & 15) == 0);
    CHECK(mz_compstack_peek_bottom(s, &view, &len, &tag) == MZ_OK && tag == 0 && len == 10);
    /* too small a buffer: error, nothing removed, size reported */
    CHECK_EQ_INT(mz_compstack_pop(s, out, 5, &len, &tag), MZ_E_RANGE);
    CHECK_EQ_INT(len, 12);
    CHECK_EQ_INT(mz_compstack_count(s), 3);
    CHECK_EQ_INT(mz_compstack_pop(s, out, sizeof out, &len, &tag), MZ_OK);
    CHECK(tag == 2 && len == 12 && item_ok(out, len, tag, buf));
    CHECK_EQ_INT(mz_compstack_take_bottom(s, out, sizeof out, &len, &tag), MZ_OK);
    CHECK(tag == 0 && len == 10 && item_ok(out, len, tag, buf));
    CHECK_EQ_INT(mz_compstack_pop(s, out, sizeof out, NULL, &tag), MZ_OK);
    CHECK_EQ_INT(tag, 1);
    mz_compstack_stats st;
    mz_compstack_get_stats(s, &st);
    CHECK(st.n_items == 0 && st.bytes_items == 0 && st.n_segments == 0 && st.bytes_mapped == 0);
    CHECK(st.n_seg_alloc == 1 && st.n_seg_free == 1);
    CHECK(mz_compstack_is_valid(s));
    mz_compstack_free(s);
    mz_compstack_free(NULL);
}

/* Random pushes, pops and bottom removals against the model. */
static void test_random_ops(void)
{
    static model m;
    mz_compstack_t *s;
    size_t seg = 64 * 1024;
    CHECK_EQ_INT(mz_compstack_init(seg, &s), MZ_OK);
    size_t cap = 5 * seg;
    uint8_t *buf = malloc(cap), *out = malloc(cap), *scratch = malloc(cap);
    uint64_t next_tag = 1;
    int bad = 0, ops = 0;
    for (int round = 0; round < 6; round++) {
        int n_ops = 3000;
        for (int k = 0; k < n_ops; k++, ops++) {
            uint64_t r = t_rand_u64(&g_rng);
            int want_push = (int)(r % 100) < (round % 2 == 0 ? 65 : 35);
            size_t live = m.hi - m.lo;
            if ((want_push || live == 0) && m.hi < 4096) {
                size_t len;
                uint64_t kind = (r >> 8) % 100;
                if (kind < 2) len = seg + (r >> 20) % (3 * seg);       /* larger than a segment */
                else if (kind < 30) len = 1 + (r >> 20) % 64;          /* tiny */
                else len = 1 + (r >> 20) % (seg / 3);                   /* chunk-like */
                fill_item(buf, len, next_tag);
                if (mz_compstack_push(s, buf, len, next_tag) != MZ_OK) bad++;
                m.tag[m.hi] = next_tag++;
                m.len[m.hi++] = len;
            } else if (live) {
                size_t len;
                uint64_t tag;
                if ((r >> 8) % 3 == 0) {
                    /* bottom */
                    if (mz_compstack_take_bottom(s, out, cap, &len, &tag) != MZ_OK) bad++;
                    else if (tag != m.tag[m.lo] || len != m.len[m.lo] || !item_ok(out, len, tag, scratch))
                        bad++;
                    m.lo++;
                } else if ((r >> 8) % 3 == 1) {
                    /* top, by view + drop (the restore path's zero-copy use) */
                    const uint8_t *v;
                    if (mz_compstack_peek_top(s, &v, &len, &tag) != MZ_OK) bad++;
                    else if (tag != m.tag[m.hi - 1] || len != m.len[m.hi - 1] ||
                             !item_ok(v, len, tag, scratch))
                        bad++;
                    if (mz_compstack_drop_top(s) != MZ_OK) bad++;
                    m.hi--;
                } else {
                    if (mz_compstack_pop(s, out, cap, &len, &tag) != MZ_OK) bad++;
                    else if (tag != m.tag[m.hi - 1] || len != m.len[m.hi - 1] ||
                             !item_ok(out, len, tag, scratch))
                        bad++;
                    m.hi--;
                }
                if (m.lo == m.hi) m.lo = m.hi = 0;
            }
            mz_compstack_stats st;
            mz_compstack_get_stats(s, &st);
            size_t bytes = 0;
            for (size_t i = m.lo; i < m.hi; i++) bytes += m.len[i];
            if (st.n_items != m.hi - m.lo || st.bytes_items != bytes) bad++;
            if (st.bytes_mapped < st.bytes_items || (st.n_items == 0) != (st.n_segments == 0)) bad++;
            if (ops % 7 == 0 && !mz_compstack_is_valid(s)) bad++;
            if (bad && bad < 3 && !mz_compstack_is_valid(s)) fprintf(stderr, "invalid at op %d\n", ops);
        }
    }
    CHECK_EQ_INT(bad, 0);
    mz_compstack_stats st;
    mz_compstack_get_stats(s, &st);
    printf("random ops: %d operations, peak mapped %zu KiB, %llu segments mapped / %llu unmapped\n",
           ops, st.peak_mapped / 1024, (unsigned long long)st.n_seg_alloc,
           (unsigned long long)st.n_seg_free);
    /* drain: bottom and top alternately */
    while (m.hi > m.lo) {
        size_t len;
        uint64_t tag;
        if ((m.hi - m.lo) % 2) {
            CHECK(mz_compstack_take_bottom(s, out, cap, &len, &tag) == MZ_OK && tag == m.tag[m.lo]);
            m.lo++;
        } else {
            CHECK(mz_compstack_pop(s, out, cap, &len, &tag) == MZ_OK && tag == m.tag[m.hi - 1]);
            m.hi--;
        }
    }
    mz_compstack_get_stats(s, &st);
    CHECK(st.n_segments == 0 && st.bytes_mapped == 0 && st.n_seg_alloc == st.n_seg_free);
    CHECK(mz_compstack_is_valid(s));
    mz_compstack_free(s);
    free(buf);
    free(out);
    free(scratch);
}

/* Segments: sizes, oversized items, release from both ends. */
static void test_segments(void)
{
    mz_compstack_t *s;
    size_t seg = 1 << 20;
    CHECK_EQ_INT(mz_compstack_init(seg, &s), MZ_OK);
    size_t item = 200 * 1024; /* 5 per 1 MiB segment */
    uint8_t *buf = calloc(1, 3 * seg);
    for (int i = 0; i < 20; i++) CHECK_EQ_INT(mz_compstack_push(s, buf, item, (uint64_t)i), MZ_OK);
    mz_compstack_stats st;
    mz_compstack_get_stats(s, &st);
    CHECK_EQ_INT(st.n_segments, 4);
    CHECK_EQ_INT(st.bytes_mapped, 4 * seg);
    /* an item larger than a segment gets a segment of its own size */
    CHECK_EQ_INT(mz_compstack_push(s, buf, 3 * seg - 5000, 100), MZ_OK);
    mz_compstack_get_stats(s, &st);
    CHECK_EQ_INT(st.n_segments, 5);
    CHECK(st.bytes_mapped >= 4 * seg + 3 * seg - 5000);
    /* a small item fits in the oversized segment's tail (page rounding) */
    CHECK_EQ_INT(mz_compstack_push(s, buf, 10, 101), MZ_OK);
    mz_compstack_get_stats(s, &st);
    CHECK_EQ_INT(st.n_segments, 5);
    CHECK(mz_compstack_is_valid(s));
    /* popping the two top items releases the big segment */
    CHECK_EQ_INT(mz_compstack_drop_top(s), MZ_OK);
    CHECK_EQ_INT(mz_compstack_drop_top(s), MZ_OK);
    mz_compstack_get_stats(s, &st);
    CHECK_EQ_INT(st.n_segments, 4);
    CHECK_EQ_INT(st.bytes_mapped, 4 * seg);
    /* take 5 from the bottom: the bottom segment goes */
    for (int i = 0; i < 5; i++) {
        uint64_t tag;
        size_t len;
        CHECK(mz_compstack_take_bottom(s, buf, seg, &len, &tag) == MZ_OK && tag == (uint64_t)i);
        mz_compstack_get_stats(s, &st);
        CHECK_EQ_INT(st.n_segments, i < 4 ? 4 : 3);
    }
    /* pops and bottom removals meet in the middle */
    for (int i = 0; i < 7; i++) CHECK_EQ_INT(mz_compstack_drop_top(s), MZ_OK);
    mz_compstack_get_stats(s, &st);
    CHECK_EQ_INT(st.n_items, 8);
    CHECK_EQ_INT(st.n_segments, 2);
    for (int i = 0; i < 8; i++) {
        uint64_t tag;
        CHECK(mz_compstack_peek_bottom(s, NULL, NULL, &tag) == MZ_OK && tag == (uint64_t)(5 + i));
        CHECK_EQ_INT(mz_compstack_drop_bottom(s), MZ_OK);
        CHECK(mz_compstack_is_valid(s));
    }
    mz_compstack_get_stats(s, &st);
    CHECK(st.n_segments == 0 && st.n_items == 0 && st.bytes_mapped == 0);
    mz_compstack_free(s);
    free(buf);
}

/* Resident set size of this process in KiB, from /proc/self/smaps_rollup; -1 if unknown. */
static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f) return -1;
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Rss: %ld kB", &kib) == 1) break;
    fclose(f);
    return kib;
}

static void test_rss(void)
{
    if (rss_kib() < 0) {
        printf("rss: /proc/self/smaps_rollup unavailable, skipped\n");
        return;
    }
    mz_compstack_t *s;
    CHECK_EQ_INT(mz_compstack_init(0, &s), MZ_OK);
    size_t item = 300 * 1024, n = 64; /* ~19 MiB */
    uint8_t *buf = malloc(item);
    memset(buf, 0x5a, item);
    long before = rss_kib();
    for (size_t i = 0; i < n; i++) CHECK_EQ_INT(mz_compstack_push(s, buf, item, i), MZ_OK);
    long full = rss_kib();
    mz_compstack_stats st;
    mz_compstack_get_stats(s, &st);
    /* pop half from the top and take a quarter from the bottom */
    for (size_t i = 0; i < n / 2; i++) CHECK_EQ_INT(mz_compstack_drop_top(s), MZ_OK);
    for (size_t i = 0; i < n / 4; i++) CHECK_EQ_INT(mz_compstack_drop_bottom(s), MZ_OK);
    long quarter = rss_kib();
    mz_compstack_stats st2;
    mz_compstack_get_stats(s, &st2);
    while (mz_compstack_count(s)) CHECK_EQ_INT(mz_compstack_drop_top(s), MZ_OK);
    long empty = rss_kib();
    long held = (long)(n * item / 1024);
    printf("rss: before %ld KiB, %zu items (%ld KiB) pushed %ld KiB (%zu segments), "
           "a quarter left %ld KiB (%zu segments), empty %ld KiB\n",
           before, n, held, full, st.n_segments, quarter, st2.n_segments, empty);
    CHECK_MSG(full - before >= held * 9 / 10, "grew %ld KiB", full - before);
    CHECK_MSG(full - quarter >= held * 6 / 10, "fell %ld KiB", full - quarter);
    CHECK_MSG(full - empty >= held * 9 / 10, "fell %ld KiB", full - empty);
    mz_compstack_free(s);
    free(buf);
}

/* Deferred unmapping: an emptied segment's pages go at once (RSS falls, the
 * page is no longer resident) but its mapping stays until the next call;
 * the items left are untouched; segments emptied beyond the reserved count
 * (after a push mapped a new one) are unmapped at once. */
static int page_state(const void *p)
{
    unsigned char v = 0;
    void *page = (void *)((uintptr_t)p & ~(uintptr_t)(mz_page_size() - 1));
    if (mincore(page, 1, &v) != 0) return errno == ENOMEM ? -1 : -2; /* -1: unmapped */
    return v & 1; /* 1 resident, 0 mapped but not resident */
}

static void test_defer_unmap(void)
{
    const size_t seg = 64 * 1024, item = 20000;
    mz_compstack_t *s;
    CHECK_EQ_INT(mz_compstack_init(seg, &s), MZ_OK);
    uint8_t *buf = malloc(item), *scratch = malloc(item);
    for (uint64_t t = 0; t < 12; t++) { /* 3 per segment: 4 segments */
        fill_item(buf, item, t);
        CHECK_EQ_INT(mz_compstack_push(s, buf, item, t), MZ_OK);
    }
    mz_compstack_stats st;
    mz_compstack_get_stats(s, &st);
    CHECK_EQ_INT(st.n_segments, 4);
    const uint8_t *top;
    CHECK_EQ_INT(mz_compstack_peek_top(s, &top, NULL, NULL), MZ_OK);
    CHECK_EQ_INT(page_state(top), 1);

    mz_compstack_defer_unmap(s, true);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(mz_compstack_drop_top(s), MZ_OK);
    mz_compstack_get_stats(s, &st);
    CHECK_EQ_INT(st.n_segments, 3);
    CHECK_EQ_INT(st.bytes_mapped, 3 * seg);
    CHECK_MSG(page_state(top) == 0, "emptied segment: page state %d, want mapped, not resident",
              page_state(top));
    /* A push maps a new segment; emptying it and then all four older ones
     * retires five segments against four reserved: the fifth is unmapped
     * at once (nothing leaks, nothing is unmapped twice). */
    fill_item(buf, item, 99);
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(mz_compstack_push(s, buf, item, 99), MZ_OK);
    CHECK_EQ_INT(mz_compstack_drop_top(s), MZ_OK);
    CHECK_EQ_INT(mz_compstack_drop_top(s), MZ_OK);
    CHECK_EQ_INT(mz_compstack_drop_top(s), MZ_OK);
    CHECK_EQ_INT(mz_compstack_drop_top(s), MZ_OK);
    for (uint64_t t = 9; t-- > 0;) {
        const uint8_t *d;
        size_t len;
        uint64_t tag;
        CHECK(mz_compstack_peek_top(s, &d, &len, &tag) == MZ_OK && tag == t && len == item &&
              item_ok(d, len, t, scratch));
        CHECK_EQ_INT(mz_compstack_drop_top(s), MZ_OK);
    }
    mz_compstack_get_stats(s, &st);
    CHECK_EQ_INT(st.n_segments, 0);
    CHECK_EQ_INT(page_state(top), 0);
    mz_compstack_defer_unmap(s, false);
    CHECK_MSG(page_state(top) == -1, "after defer off: page state %d, want unmapped", page_state(top));
    mz_compstack_free(s);
    free(buf);
    free(scratch);
}

/* The n lowest items, bottom first, across segments (CompKV batches). */
static void test_peek_bottom_n(void)
{
    mz_compstack_t *s = NULL;
    CHECK(mz_compstack_init(4096, &s) == MZ_OK); /* a few items per segment */
    if (!s) return;
    enum { N = 40 };
    uint8_t buf[1000];
    for (int i = 0; i < N; i++) {
        memset(buf, i + 1, sizeof buf);
        CHECK(mz_compstack_push(s, buf, 300 + 17 * (size_t)i, (uint64_t)i) == MZ_OK);
    }
    const uint8_t *d[64];
    size_t len[64];
    uint64_t tag[64];
    CHECK_EQ_INT(mz_compstack_peek_bottom_n(s, 0, d, len, tag), 0);
    for (int dropped = 0; dropped < 3; dropped++) {
        size_t got = mz_compstack_peek_bottom_n(s, 64, d, len, tag);
        CHECK_EQ_INT(got, N - dropped);
        for (size_t k = 0; k < got; k++) {
            int i = dropped + (int)k;
            CHECK_EQ_INT(tag[k], i);
            CHECK_EQ_INT(len[k], 300 + 17 * i);
            CHECK(d[k][0] == (uint8_t)(i + 1) && d[k][len[k] - 1] == (uint8_t)(i + 1));
        }
        CHECK_EQ_INT(mz_compstack_peek_bottom_n(s, 5, d, len, tag), 5);
        CHECK_EQ_INT(tag[4], dropped + 4);
        CHECK(mz_compstack_drop_bottom(s) == MZ_OK);
    }
    CHECK(mz_compstack_is_valid(s));
    mz_compstack_free(s);
}

int main(void)
{
    test_basic();
    test_segments();
    test_random_ops();
    test_rss();
    test_defer_unmap();
    test_peek_bottom_n();
    return t_done("test_compstack");
}
