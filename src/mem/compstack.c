/*
 * compstack.c — segmented LIFO of encoded KV chunks (contract in compstack.h).
 *
 * Layout. Each segment is one mapping; its first 64 bytes hold the segment
 * record, then items packed upward:
 *
 *     [seg record | item | item | ... | item | free space ]
 *                  ^bot                 ^last  ^top
 *
 * An item is a 32-byte header {tag, len, prev, magic} followed by len bytes
 * padded to 16. prev is the offset of the item below it in the same segment
 * (NO_ITEM for the first one pushed there), so dropping the top walks down
 * without an index; dropping the bottom steps up by the item's footprint.
 * Segments form a doubly linked chain from bottom to top.
 *
 * Invariants (checked by mz_compstack_is_valid):
 *   - every live segment holds >= 1 item; an emptied segment is unmapped;
 *   - items of a segment lie in [bot, top), contiguous, last = the top item;
 *   - the totals in the stats equal the sums over the segments.
 */
#define _DEFAULT_SOURCE /* MADV_DONTNEED */
#include "compstack.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define SEG_HDR 64u
#define ITEM_HDR 32u
#define ITEM_MAGIC 0x4d5a435354414b31ull /* "MZCSTAK1" */
#define NO_ITEM SIZE_MAX

typedef struct seg {
    struct seg *below, *above;
    size_t cap;     /* mapping size */
    size_t bot;     /* offset of the bottom item's header */
    size_t top;     /* offset where the next item goes */
    size_t last;    /* offset of the top item's header */
    size_t n_items; /* live items */
} seg;

_Static_assert(sizeof(seg) <= SEG_HDR, "segment record fits its header");

typedef struct item_hdr {
    uint64_t tag;
    uint64_t len;
    uint64_t prev;
    uint64_t magic;
} item_hdr;

_Static_assert(sizeof(item_hdr) == ITEM_HDR, "item header size");

typedef struct retired_seg {
    void *p;
    size_t len;
} retired_seg;

struct mz_compstack {
    seg *bottom, *topseg;
    size_t seg_bytes;
    mz_compstack_stats st;
    /* Deferred unmapping (mz_compstack_defer_unmap): emptied segments'
     * pages are freed at once, their mappings parked here, capacity
     * reserved up front so that parking never allocates. */
    retired_seg *retired;
    size_t n_retired, cap_retired;
};

static size_t footprint(size_t len) { return ITEM_HDR + ((len + 15) & ~(size_t)15); }

static item_hdr *item_at(const seg *g, size_t off)
{
    return (item_hdr *)(void *)((uint8_t *)(uintptr_t)g + off);
}

mz_status mz_compstack_init(size_t segment_bytes, mz_compstack_t **out)
{
    *out = NULL;
    size_t page = mz_page_size();
    if (segment_bytes == 0) segment_bytes = MZ_COMPSTACK_SEGMENT_DEFAULT;
    if (segment_bytes > SIZE_MAX / 4)
        return mz_fail(MZ_E_INVAL, "compstack: segment size %zu too large", segment_bytes);
    segment_bytes = (segment_bytes + page - 1) / page * page;
    mz_compstack_t *s = mz_calloc(1, sizeof *s);
    if (!s) return MZ_E_NOMEM;
    s->seg_bytes = segment_bytes;
    *out = s;
    return MZ_OK;
}

static void seg_release(mz_compstack_t *s, seg *g)
{
    if (g->below) g->below->above = g->above;
    else s->bottom = g->above;
    if (g->above) g->above->below = g->below;
    else s->topseg = g->below;
    s->st.bytes_mapped -= g->cap;
    s->st.n_segments--;
    s->st.n_seg_free++;
    if (s->retired && s->n_retired < s->cap_retired) {
        const size_t len = g->cap;
        int r = madvise(g, len, MADV_DONTNEED);
        MZ_ASSERT(r == 0);
        s->retired[s->n_retired++] = (retired_seg){.p = g, .len = len};
        return;
    }
    mz_pages_free(g, g->cap);
}

void mz_compstack_defer_unmap(mz_compstack_t *s, bool on)
{
    for (size_t i = 0; i < s->n_retired; i++) mz_pages_free(s->retired[i].p, s->retired[i].len);
    free(s->retired);
    s->retired = NULL;
    s->n_retired = s->cap_retired = 0;
    if (!on || s->st.n_segments == 0) return;
    /* Only live segments can retire before the next call (pops and bottom
     * removals do not map new ones). */
    s->retired = malloc(s->st.n_segments * sizeof *s->retired);
    if (s->retired) s->cap_retired = s->st.n_segments;
}

void mz_compstack_free(mz_compstack_t *s)
{
    if (!s) return;
    mz_compstack_defer_unmap(s, false);
    while (s->topseg) seg_release(s, s->topseg);
    free(s);
}

mz_status mz_compstack_push(mz_compstack_t *s, const void *data, size_t len, uint64_t tag)
{
    MZ_ASSERT(s && (data || len == 0));
    if (len == 0) return mz_fail(MZ_E_INVAL, "compstack: empty item");
    if (len > SIZE_MAX / 4) return mz_fail(MZ_E_NOMEM, "compstack: item of %zu bytes", len);
    size_t need = footprint(len);
    seg *g = s->topseg;
    if (!g || g->cap - g->top < need) {
        size_t page = mz_page_size();
        size_t cap = SEG_HDR + need > s->seg_bytes ? (SEG_HDR + need + page - 1) / page * page
                                                   : s->seg_bytes;
        seg *ng = mz_pages_alloc(cap);
        if (!ng)
            return mz_fail(MZ_E_NOMEM, "compstack: cannot map a %zu-byte segment (errno %d)",
                           cap, errno);
        ng->below = g;
        ng->above = NULL;
        ng->cap = cap;
        ng->bot = ng->top = SEG_HDR;
        ng->last = NO_ITEM;
        ng->n_items = 0;
        if (g) g->above = ng;
        else s->bottom = ng;
        s->topseg = ng;
        s->st.bytes_mapped += cap;
        s->st.n_segments++;
        s->st.n_seg_alloc++;
        if (s->st.bytes_mapped > s->st.peak_mapped) s->st.peak_mapped = s->st.bytes_mapped;
        g = ng;
    }
    item_hdr *h = item_at(g, g->top);
    h->tag = tag;
    h->len = len;
    h->prev = g->n_items ? g->last : NO_ITEM;
    h->magic = ITEM_MAGIC;
    memcpy(h + 1, data, len);
    g->last = g->top;
    g->top += need;
    g->n_items++;
    s->st.n_items++;
    s->st.bytes_items += len;
    return MZ_OK;
}

static void view(const item_hdr *h, const uint8_t **data, size_t *len, uint64_t *tag)
{
    if (data) *data = (const uint8_t *)(h + 1);
    if (len) *len = (size_t)h->len;
    if (tag) *tag = h->tag;
}

mz_status mz_compstack_peek_top(const mz_compstack_t *s, const uint8_t **data, size_t *len,
                                uint64_t *tag)
{
    if (!s->topseg) return MZ_AGAIN;
    view(item_at(s->topseg, s->topseg->last), data, len, tag);
    return MZ_OK;
}

size_t mz_compstack_peek_from_top(const mz_compstack_t *s, size_t n, mz_compstack_view *out)
{
    size_t k = 0;
    /* A segment's bottom item may keep a stale prev (drop_bottom does not
     * clear it): count the segment's items instead of following it to the end. */
    for (const seg *g = s->topseg; g && k < n; g = g->below) {
        size_t off = g->last;
        for (size_t m = 0; m < g->n_items && k < n; m++, k++) {
            const item_hdr *h = item_at(g, off);
            MZ_ASSERT(h->magic == ITEM_MAGIC);
            view(h, &out[k].data, &out[k].len, &out[k].tag);
            off = (size_t)h->prev;
        }
    }
    return k;
}

mz_status mz_compstack_peek_bottom(const mz_compstack_t *s, const uint8_t **data, size_t *len,
                                   uint64_t *tag)
{
    if (!s->bottom) return MZ_AGAIN;
    view(item_at(s->bottom, s->bottom->bot), data, len, tag);
    return MZ_OK;
}

size_t mz_compstack_peek_bottom_n(const mz_compstack_t *s, size_t n, const uint8_t **data,
                                  size_t *len, uint64_t *tag)
{
    size_t k = 0;
    for (const seg *g = s->bottom; g && k < n; g = g->above)
        for (size_t off = g->bot; off < g->top && k < n; k++) {
            const item_hdr *h = item_at(g, off);
            MZ_ASSERT(h->magic == ITEM_MAGIC);
            view(h, &data[k], &len[k], &tag[k]);
            off += footprint((size_t)h->len);
        }
    return k;
}

/* Forget the item at offset off of segment g in the counts; releases g and
 * returns NULL when it was g's last item, else returns the item's header so
 * the caller can move g's top or bottom past it. */
static const item_hdr *drop_item(mz_compstack_t *s, seg *g, size_t off)
{
    const item_hdr *h = item_at(g, off);
    MZ_ASSERT(h->magic == ITEM_MAGIC);
    s->st.n_items--;
    s->st.bytes_items -= (size_t)h->len;
    if (--g->n_items == 0) {
        seg_release(s, g);
        return NULL;
    }
    return h;
}

mz_status mz_compstack_drop_top(mz_compstack_t *s)
{
    seg *g = s->topseg;
    if (!g) return MZ_AGAIN;
    const item_hdr *h = drop_item(s, g, g->last);
    if (h) {
        g->top = g->last;
        g->last = (size_t)h->prev;
    }
    return MZ_OK;
}

mz_status mz_compstack_drop_bottom(mz_compstack_t *s)
{
    seg *g = s->bottom;
    if (!g) return MZ_AGAIN;
    const item_hdr *h = drop_item(s, g, g->bot);
    if (h) g->bot += footprint((size_t)h->len);
    return MZ_OK;
}

static mz_status copy_out(const uint8_t *p, size_t n, uint64_t t, void *dst, size_t cap,
                          size_t *len, uint64_t *tag)
{
    if (len) *len = n;
    if (cap < n)
        return mz_fail(MZ_E_RANGE, "compstack: item of %zu bytes, buffer of %zu", n, cap);
    memcpy(dst, p, n);
    if (tag) *tag = t;
    return MZ_OK;
}

/* Copy out and drop the top item (from_top) or the bottom one. */
static mz_status take_item(mz_compstack_t *s, bool from_top, void *dst, size_t cap,
                           size_t *len, uint64_t *tag)
{
    const uint8_t *p;
    size_t n;
    uint64_t t;
    mz_status st = from_top ? mz_compstack_peek_top(s, &p, &n, &t)
                            : mz_compstack_peek_bottom(s, &p, &n, &t);
    if (st != MZ_OK) return st;
    st = copy_out(p, n, t, dst, cap, len, tag);
    if (st != MZ_OK) return st;
    return from_top ? mz_compstack_drop_top(s) : mz_compstack_drop_bottom(s);
}

mz_status mz_compstack_pop(mz_compstack_t *s, void *dst, size_t cap, size_t *len, uint64_t *tag)
{
    return take_item(s, true, dst, cap, len, tag);
}

mz_status mz_compstack_take_bottom(mz_compstack_t *s, void *dst, size_t cap, size_t *len,
                                   uint64_t *tag)
{
    return take_item(s, false, dst, cap, len, tag);
}

size_t mz_compstack_count(const mz_compstack_t *s) { return s->st.n_items; }

size_t mz_compstack_bytes(const mz_compstack_t *s) { return s->st.bytes_items; }

void mz_compstack_get_stats(const mz_compstack_t *s, mz_compstack_stats *out) { *out = s->st; }

bool mz_compstack_is_valid(const mz_compstack_t *s)
{
    size_t n_items = 0, bytes = 0, mapped = 0, n_segs = 0;
    const seg *below = NULL;
    for (const seg *g = s->bottom; g; below = g, g = g->above) {
        if (g->below != below || g->n_items == 0) return false;
        if (g->bot < SEG_HDR || g->bot > g->top || g->top > g->cap) return false;
        size_t off = g->bot, cnt = 0, prev = NO_ITEM;
        while (off < g->top) {
            const item_hdr *h = item_at(g, off);
            if (h->magic != ITEM_MAGIC || h->len == 0 || h->len > g->cap) return false;
            if (cnt > 0 && h->prev != prev) return false;
            size_t fp = footprint((size_t)h->len);
            if (fp > g->top - off) return false;
            bytes += (size_t)h->len;
            prev = off;
            off += fp;
            cnt++;
        }
        if (off != g->top || cnt != g->n_items || prev != g->last) return false;
        n_items += cnt;
        mapped += g->cap;
        n_segs++;
    }
    if (below != s->topseg) return false;
    return n_items == s->st.n_items && bytes == s->st.bytes_items &&
           mapped == s->st.bytes_mapped && n_segs == s->st.n_segments &&
           s->st.n_seg_alloc - s->st.n_seg_free == n_segs;
}
