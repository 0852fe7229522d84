/*
 * gguf.c — GGUF v3 reader: parses and validates a file's header, metadata and
 * tensor table, keeping copies of everything in an arena owned by the result.
 *
 * Divisions, in reading order:
 *   arena      bump allocator owning every copy (strings, arrays, tables)
 *   cursor     bounded little-endian reads that know what they are reading,
 *              so a truncation message can say "tensor 5 'x' dims at byte N"
 *   metadata   key/value entries, scalars, strings, arrays
 *   tensors    tensor infos, then the layout checks (alignment, bounds, overlap)
 *   entry      mz_gguf_parse / mz_gguf_open, lookups and typed getters
 *
 * Memory rule: nothing is allocated in proportion to a count read from the
 * file. Fixed-size copies are made only after the bytes were seen to be
 * present; tables grow geometrically as entries are actually parsed. So a
 * file claiming 2^60 entries costs what its real bytes justify, no more.
 */
#define _POSIX_C_SOURCE 200809L
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c copies little-endian arrays verbatim; a big-endian host needs byte swaps"
#endif

/* Smallest encodings, used to bound counts by the bytes that remain:
 * a kv is key length (8) + type (4) + at least one value byte; a tensor info
 * is name length (8) + n_dims (4) + one dim (8) + type (4) + offset (8). */
#define MIN_KV_BYTES 13u
#define MIN_TENSOR_INFO_BYTES 32u
#define NAME_SHOW_MAX 64

/* ---- arena ------------------------------------------------------------------- */

typedef struct arena_block {
    struct arena_block *next;
    size_t cap;
    size_t used;                /* header is 24 bytes, so data stays 8-aligned */
} arena_block;

typedef struct arena_owned {
    struct arena_owned *next;
    void *ptr;                  /* a malloc'd table adopted by the arena */
} arena_owned;

typedef struct arena {
    arena_block *head;
    arena_owned *owned;
} arena;

#define ARENA_BLOCK_BYTES ((size_t)64 * 1024)

static void *arena_alloc(arena *a, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    if (n == 0) n = 8;
    arena_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = MZ_MAX(ARENA_BLOCK_BYTES, n);
        size_t total;
        if (!mz_add_ok(cap, sizeof(arena_block), &total)) return mz_malloc(SIZE_MAX);
        b = mz_malloc(total);
        if (!b) return NULL;
        b->cap = cap;
        b->used = 0;
        /* A big one-off block goes behind the current one so the current
         * block's free tail stays usable for the small strings that follow. */
        if (a->head && n > ARENA_BLOCK_BYTES) {
            b->next = a->head->next;
            a->head->next = b;
        } else {
            b->next = a->head;
            a->head = b;
        }
    }
    void *p = (uint8_t *)(b + 1) + b->used;
    b->used += n;
    return p;
}

/* Takes ownership of a malloc'd pointer; frees it on failure too. */
static bool arena_adopt(arena *a, void *ptr)
{
    arena_owned *o = arena_alloc(a, sizeof *o);
    if (!o) {
        free(ptr);
        return false;
    }
    o->ptr = ptr;
    o->next = a->owned;
    a->owned = o;
    return true;
}

static void arena_free(arena *a)
{
    if (!a) return;
    for (arena_owned *o = a->owned; o; o = o->next) free(o->ptr);
    arena_block *b = a->head;
    while (b) {
        arena_block *next = b->next;
        free(b);
        b = next;
    }
    free(a);
}

/* ---- cursor ------------------------------------------------------------------ */

typedef enum owner_kind { OWNER_HEADER, OWNER_KV, OWNER_TENSOR } owner_kind;

typedef struct cursor {
    const uint8_t *buf;
    size_t len;                 /* bytes available in buf */
    uint64_t file_size;         /* bytes the file has (>= len) */
    uint64_t pos;
    bool need_more;             /* failed only because buf is a prefix */
    /* what is being read, for messages */
    const char *field;
    owner_kind owner;
    uint64_t owner_idx;
    const mz_gguf_str *owner_name; /* NULL until the name is read */
    int64_t elem;               /* array element, or -1 */
} cursor;

/* Copies a name from the file into out for a message: at most NAME_SHOW_MAX
 * bytes, with bytes that are not printable ASCII shown as '?'. */
static const char *show(const char *s, uint64_t len, char *out, size_t cap)
{
    size_t n = 0;
    for (uint64_t i = 0; i < len && n + 4 < cap && i < NAME_SHOW_MAX; i++) {
        unsigned char ch = (unsigned char)s[i];
        out[n++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    if (len > NAME_SHOW_MAX && n + 4 < cap) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
    return out;
}

static const char *show_str(const mz_gguf_str *s, char *out, size_t cap)
{
    return show(s->ptr, s->len, out, cap);
}

/* "metadata entry 3 'general.name'": the entry being read, for messages
 * about its content rather than about a read. */
static const char *describe_owner(const cursor *c, char *out, size_t cap)
{
    char name[NAME_SHOW_MAX + 8] = "";
    if (c->owner_name) show_str(c->owner_name, name, sizeof name);
    snprintf(out, cap, "%s %llu%s%s%s", c->owner == OWNER_TENSOR ? "tensor info" : "metadata entry",
             (unsigned long long)c->owner_idx, c->owner_name ? " '" : "", name,
             c->owner_name ? "'" : "");
    return out;
}

/* "the value type of metadata entry 3 'general.name'" and the like. */
static const char *describe(const cursor *c, char *out, size_t cap)
{
    if (c->owner == OWNER_HEADER) {
        snprintf(out, cap, "the %s", c->field);
        return out;
    }
    char owner[NAME_SHOW_MAX + 64];
    describe_owner(c, owner, sizeof owner);
    if (c->owner == OWNER_KV && c->elem >= 0)
        snprintf(out, cap, "%s of array element %lld of %s", c->field, (long long)c->elem, owner);
    else
        snprintf(out, cap, "%s of %s", c->field, owner);
    return out;
}

static uint64_t remaining(const cursor *c)
{
    return c->pos < c->file_size ? c->file_size - c->pos : 0;
}

/* Checks that n bytes can be read at pos. A read that the file could satisfy
 * but the buffer (a prefix) cannot is reported as MZ_E_RANGE with need_more
 * set, so mz_gguf_open can retry with more bytes. */
static mz_status need(cursor *c, uint64_t n)
{
    if (c->pos <= c->len && n <= c->len - c->pos) return MZ_OK;
    char what[256];
    describe(c, what, sizeof what);
    if (c->len < c->file_size && c->pos <= c->file_size && n <= c->file_size - c->pos) {
        c->need_more = true;
        return mz_fail(MZ_E_RANGE,
                       "reading %s at byte offset %llu needs %llu bytes, beyond the first %zu "
                       "bytes provided",
                       what, (unsigned long long)c->pos, (unsigned long long)n, c->len);
    }
    return mz_fail(MZ_E_FORMAT,
                   "truncated file: reading %s at byte offset %llu needs %llu bytes, only %llu "
                   "remain (file is %llu bytes)",
                   what, (unsigned long long)c->pos, (unsigned long long)n,
                   (unsigned long long)remaining(c), (unsigned long long)c->file_size);
}

static uint64_t load_le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static mz_status read_le(cursor *c, const char *field, unsigned n, uint64_t *out)
{
    c->field = field;
    mz_status s = need(c, n);
    if (s != MZ_OK) return s;
    *out = load_le(c->buf + c->pos, n);
    c->pos += n;
    return MZ_OK;
}

static mz_status read_u32(cursor *c, const char *field, uint32_t *out)
{
    uint64_t v = 0;
    mz_status s = read_le(c, field, 4, &v);
    *out = (uint32_t)v;
    return s;
}

static mz_status read_u64(cursor *c, const char *field, uint64_t *out)
{
    return read_le(c, field, 8, out);
}

/* Reads a length-prefixed string and copies it, NUL-terminated, into the arena. */
static mz_status read_str(cursor *c, arena *a, const char *len_field, const char *field,
                          mz_gguf_str *out)
{
    uint64_t n;
    mz_status s = read_u64(c, len_field, &n);
    if (s != MZ_OK) return s;
    c->field = field;
    if ((s = need(c, n)) != MZ_OK) return s;
    char *p = arena_alloc(a, (size_t)n + 1); /* n <= len, so it fits size_t */
    if (!p) return MZ_E_NOMEM;
    memcpy(p, c->buf + c->pos, (size_t)n);
    p[n] = '\0';
    c->pos += n;
    out->ptr = p;
    out->len = n;
    return MZ_OK;
}

/* ---- metadata ---------------------------------------------------------------- */

static const char *const k_type_names[MZ_GGUF_TYPE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool",  "string", "array", "uint64", "int64", "float64",
};

/* Bytes of one scalar element; 0 for string and array (variable size). */
static const uint8_t k_type_size[MZ_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *mz_gguf_type_name(mz_gguf_type t)
{
    return ((unsigned)t < MZ_GGUF_TYPE_COUNT) ? k_type_names[t] : "unknown";
}

static bool type_is_unsigned(mz_gguf_type t)
{
    return t == MZ_GGUF_UINT8 || t == MZ_GGUF_UINT16 || t == MZ_GGUF_UINT32 ||
           t == MZ_GGUF_UINT64;
}

static bool type_is_signed(mz_gguf_type t)
{
    return t == MZ_GGUF_INT8 || t == MZ_GGUF_INT16 || t == MZ_GGUF_INT32 || t == MZ_GGUF_INT64;
}

/* Two's complement value of a bytes-wide field, written without
 * implementation-defined conversions of out-of-range values. */
static int64_t sign_extend(uint64_t v, unsigned bytes)
{
    uint64_t sign = (uint64_t)1 << (8 * bytes - 1);
    if (!(v & sign)) return (int64_t)v;
    return (int64_t)(v & (sign - 1)) - (int64_t)(sign - 1) - 1;
}

static double f32_bits_to_double(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static mz_status read_scalar(cursor *c, mz_gguf_type t, mz_gguf_kv *kv)
{
    uint64_t raw;
    mz_status s = read_le(c, "value", k_type_size[t], &raw);
    if (s != MZ_OK) return s;
    switch (t) {
    case MZ_GGUF_BOOL:
        if (raw > 1) {
            char what[256];
            return mz_fail(MZ_E_FORMAT, "%s: bad bool value %llu at byte offset %llu (must be 0 or 1)",
                           describe_owner(c, what, sizeof what), (unsigned long long)raw,
                           (unsigned long long)(c->pos - 1));
        }
        kv->v.u64 = raw;
        break;
    case MZ_GGUF_FLOAT32: kv->v.f64 = f32_bits_to_double((uint32_t)raw); break;
    case MZ_GGUF_FLOAT64: memcpy(&kv->v.f64, &raw, 8); break;
    default:
        if (type_is_signed(t))
            kv->v.i64 = sign_extend(raw, k_type_size[t]);
        else
            kv->v.u64 = raw;
        break;
    }
    return MZ_OK;
}

static mz_status read_array(cursor *c, arena *a, mz_gguf_kv *kv)
{
    char what[256];
    uint32_t et;
    mz_status s = read_u32(c, "array element type", &et);
    if (s != MZ_OK) return s;
    if (et == MZ_GGUF_ARRAY)
        return mz_fail(MZ_E_UNSUPPORTED,
                       "%s: nested arrays are not supported (array of arrays at byte offset %llu)",
                       describe_owner(c, what, sizeof what), (unsigned long long)(c->pos - 4));
    if (et >= MZ_GGUF_TYPE_COUNT)
        return mz_fail(MZ_E_FORMAT, "%s: unknown value type %u for array elements at byte offset %llu",
                       describe_owner(c, what, sizeof what), et, (unsigned long long)(c->pos - 4));
    uint64_t n;
    if ((s = read_u64(c, "array length", &n)) != MZ_OK) return s;
    kv->arr_type = (mz_gguf_type)et;
    kv->arr_n = n;
    kv->arr_data = NULL;

    uint64_t min_elem = k_type_size[et] ? k_type_size[et] : 8; /* a string is >= its length */
    if (n > remaining(c) / min_elem)
        return mz_fail(MZ_E_FORMAT,
                       "%s: array length %llu at byte offset %llu is impossible: elements of "
                       "type %s need at least %llu bytes each, only %llu bytes remain",
                       describe_owner(c, what, sizeof what), (unsigned long long)n,
                       (unsigned long long)(c->pos - 8), mz_gguf_type_name((mz_gguf_type)et),
                       (unsigned long long)min_elem, (unsigned long long)remaining(c));
    if (n == 0) return MZ_OK;

    if (k_type_size[et]) {
        uint64_t nbytes = n * k_type_size[et]; /* no overflow: bounded by remaining above */
        c->field = "array data";
        if ((s = need(c, nbytes)) != MZ_OK) return s;
        if (et == MZ_GGUF_BOOL) {
            for (uint64_t i = 0; i < n; i++) {
                if (c->buf[c->pos + i] > 1) {
                    c->elem = (int64_t)i;
                    return mz_fail(MZ_E_FORMAT,
                                   "%s: bad bool value %u in array element %llu at byte offset "
                                   "%llu (must be 0 or 1)",
                                   describe_owner(c, what, sizeof what), c->buf[c->pos + i],
                                   (unsigned long long)i, (unsigned long long)(c->pos + i));
                }
            }
        }
        void *p = arena_alloc(a, (size_t)nbytes);
        if (!p) return MZ_E_NOMEM;
        memcpy(p, c->buf + c->pos, (size_t)nbytes);
        c->pos += nbytes;
        kv->arr_data = p;
        return MZ_OK;
    }

    /* Strings: the table grows as elements are actually read. */
    size_t cap = (size_t)MZ_MIN(n, (uint64_t)1024);
    mz_gguf_str *tab = mz_malloc(cap * sizeof *tab);
    if (!tab) return MZ_E_NOMEM;
    for (uint64_t i = 0; i < n; i++) {
        if (i == cap) {
            size_t ncap = (size_t)MZ_MIN(n, (uint64_t)cap * 2);
            mz_gguf_str *t2 = realloc(tab, ncap * sizeof *tab);
            if (!t2) {
                s = mz_fail(MZ_E_NOMEM, "out of memory growing a string array to %zu entries", ncap);
                goto out_free_tab;
            }
            tab = t2;
            cap = ncap;
        }
        c->elem = (int64_t)i;
        if ((s = read_str(c, a, "string length", "string", &tab[i])) != MZ_OK) goto out_free_tab;
    }
    c->elem = -1;
    if (!arena_adopt(a, tab)) return MZ_E_NOMEM;
    kv->arr_data = tab;
    return MZ_OK;

out_free_tab:
    free(tab);
    return s;
}

/* Reads the key of a metadata entry or the name of a tensor info (field
 * "key" or "name", its length field len_field) into *out and makes it the
 * cursor's owner name. It must not be empty, and must hold no NUL: lookups
 * take C strings, and such a name could never be found. */
static mz_status read_owner_name(cursor *c, arena *a, const char *len_field, const char *field,
                                 mz_gguf_str *out)
{
    char what[256];
    mz_status s = read_str(c, a, len_field, field, out);
    if (s != MZ_OK) return s;
    if (out->len == 0)
        return mz_fail(MZ_E_FORMAT, "%s %llu has an empty %s (at byte offset %llu)",
                       c->owner == OWNER_TENSOR ? "tensor info" : "metadata entry",
                       (unsigned long long)c->owner_idx, field, (unsigned long long)(c->pos - 8));
    c->owner_name = out;
    if (memchr(out->ptr, '\0', (size_t)out->len))
        return mz_fail(MZ_E_FORMAT, "%s: %s contains a NUL byte",
                       describe_owner(c, what, sizeof what), field);
    return MZ_OK;
}

static mz_status read_kv(cursor *c, arena *a, mz_gguf_kv *kv)
{
    char what[256];
    mz_status s = read_owner_name(c, a, "key length", "key", &kv->key);
    if (s != MZ_OK) return s;
    uint32_t t;
    if ((s = read_u32(c, "value type", &t)) != MZ_OK) return s;
    if (t >= MZ_GGUF_TYPE_COUNT)
        return mz_fail(MZ_E_FORMAT, "%s: unknown value type %u at byte offset %llu",
                       describe_owner(c, what, sizeof what), t, (unsigned long long)(c->pos - 4));
    kv->type = (mz_gguf_type)t;
    if (t == MZ_GGUF_ARRAY) return read_array(c, a, kv);
    if (t == MZ_GGUF_STRING) return read_str(c, a, "string length", "string value", &kv->v.str);
    return read_scalar(c, kv->type, kv);
}

/* ---- duplicate detection ------------------------------------------------------ */

static uint64_t hash_bytes(const char *p, uint64_t n)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (uint64_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 0x100000001b3ull;
    return h;
}

/* Finds the first name equal to an earlier one; names[i] for i < n, addressed
 * through a stride so one routine serves kvs and tensors. Sets *dup_a < *dup_b
 * to the two indices, or returns false when all names are distinct. */
static mz_status find_duplicate(const void *base, size_t stride, size_t name_off, uint64_t n,
                                bool *found, uint64_t *dup_a, uint64_t *dup_b)
{
    *found = false;
    if (n < 2) return MZ_OK;
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    uint64_t *slots = mz_calloc(cap, sizeof *slots); /* index + 1; 0 = empty */
    if (!slots) return MZ_E_NOMEM;
    for (uint64_t i = 0; i < n && !*found; i++) {
        const mz_gguf_str *si = (const mz_gguf_str *)((const uint8_t *)base + i * stride + name_off);
        size_t h = (size_t)hash_bytes(si->ptr, si->len) & (cap - 1);
        for (;; h = (h + 1) & (cap - 1)) {
            if (!slots[h]) {
                slots[h] = i + 1;
                break;
            }
            uint64_t j = slots[h] - 1;
            const mz_gguf_str *sj =
                (const mz_gguf_str *)((const uint8_t *)base + j * stride + name_off);
            if (sj->len == si->len && memcmp(sj->ptr, si->ptr, (size_t)si->len) == 0) {
                *found = true;
                *dup_a = j;
                *dup_b = i;
                break;
            }
        }
    }
    free(slots);
    return MZ_OK;
}

/* Fails naming the two entries when two of the n names (see find_duplicate)
 * are equal: "duplicate <what> 'x' (<owners> 1 and 4)". */
static mz_status check_unique(const void *base, size_t stride, size_t name_off, uint64_t n,
                              const char *what, const char *owners)
{
    bool dup;
    uint64_t da, db;
    mz_status s = find_duplicate(base, stride, name_off, n, &dup, &da, &db);
    if (s != MZ_OK || !dup) return s;
    char na[NAME_SHOW_MAX + 8];
    const mz_gguf_str *name = (const mz_gguf_str *)((const uint8_t *)base + db * stride + name_off);
    return mz_fail(MZ_E_FORMAT, "duplicate %s '%s' (%s %llu and %llu)", what,
                   show_str(name, na, sizeof na), owners, (unsigned long long)da,
                   (unsigned long long)db);
}

/* ---- tensors ------------------------------------------------------------------ */

static mz_status read_tensor_info(cursor *c, arena *a, mz_gguf_tensor *t)
{
    char name[NAME_SHOW_MAX + 8];
    mz_status s = read_owner_name(c, a, "name length", "name", &t->name);
    if (s != MZ_OK) return s;
    show_str(&t->name, name, sizeof name);

    if ((s = read_u32(c, "n_dims", &t->n_dims)) != MZ_OK) return s;
    if (t->n_dims == 0 || t->n_dims > MZ_GGUF_MAX_DIMS)
        return mz_fail(MZ_E_FORMAT, "tensor '%s' has n_dims %u at byte offset %llu (must be 1..%d)",
                       name, t->n_dims, (unsigned long long)(c->pos - 4), MZ_GGUF_MAX_DIMS);
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < MZ_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if ((s = read_u64(c, "dimension", &t->ne[d])) != MZ_OK) return s;
        if (t->ne[d] == 0)
            return mz_fail(MZ_E_FORMAT, "tensor '%s' has a zero dimension ne[%u] at byte offset %llu",
                           name, d, (unsigned long long)(c->pos - 8));
        if (t->ne[d] > (uint64_t)INT64_MAX || n_el > (uint64_t)INT64_MAX / t->ne[d])
            return mz_fail(MZ_E_FORMAT,
                           "tensor '%s' dimensions overflow: element count exceeds 2^63 at ne[%u] "
                           "= %llu (byte offset %llu)",
                           name, d, (unsigned long long)t->ne[d], (unsigned long long)(c->pos - 8));
        n_el *= t->ne[d];
    }
    t->n_elements = n_el;

    uint32_t type;
    if ((s = read_u32(c, "type", &type)) != MZ_OK) return s;
    if (!mz_dtype_known((int)type))
        return mz_fail(MZ_E_FORMAT, "tensor '%s' has unknown tensor type %u (at byte offset %llu)",
                       name, type, (unsigned long long)(c->pos - 4));
    t->type = (int)type;
    size_t blk = mz_dtype_block_len(t->type);
    if (t->ne[0] % blk)
        return mz_fail(MZ_E_FORMAT,
                       "tensor '%s': ne[0] = %llu is not a multiple of the block length %zu of "
                       "type %s",
                       name, (unsigned long long)t->ne[0], blk, mz_dtype_name(t->type));
    /* bytes = (n_el / blk) blocks; at most 2^63/1 * 292 could overflow */
    uint64_t blocks = n_el / blk;
    uint64_t bb = mz_dtype_block_bytes(t->type);
    if (blocks > UINT64_MAX / bb)
        return mz_fail(MZ_E_FORMAT, "tensor '%s' byte size overflows", name);
    t->nbytes = blocks * bb;

    return read_u64(c, "data offset", &t->offset);
}

typedef struct span {
    uint64_t start, end;
    uint64_t idx;
} span;

static int span_cmp(const void *pa, const void *pb)
{
    const span *a = pa, *b = pb;
    if (a->start != b->start) return a->start < b->start ? -1 : 1;
    return a->end < b->end ? -1 : (a->end > b->end);
}

/* Alignment, bounds and overlap of tensor data, after all infos are read. */
static mz_status check_layout(const mz_gguf *g)
{
    char na[NAME_SHOW_MAX + 8], nb[NAME_SHOW_MAX + 8];
    mz_status s = MZ_OK;
    if (g->n_tensors == 0) return MZ_OK;
    span *sp = mz_malloc((size_t)g->n_tensors * sizeof *sp);
    if (!sp) return MZ_E_NOMEM;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const mz_gguf_tensor *t = &g->tensors[i];
        show_str(&t->name, na, sizeof na);
        if (t->offset % g->alignment) {
            s = mz_fail(MZ_E_FORMAT, "tensor '%s' data offset %llu is not aligned to %llu", na,
                        (unsigned long long)t->offset, (unsigned long long)g->alignment);
            goto out_free_spans;
        }
        uint64_t avail = g->file_size - g->data_offset; /* data_offset <= file_size checked */
        if (t->offset > avail || t->nbytes > avail - t->offset) {
            s = mz_fail(MZ_E_FORMAT,
                        "tensor '%s' data (%llu bytes at offset %llu from the data section at "
                        "byte %llu) lies outside the file (%llu bytes)",
                        na, (unsigned long long)t->nbytes, (unsigned long long)t->offset,
                        (unsigned long long)g->data_offset, (unsigned long long)g->file_size);
            goto out_free_spans;
        }
        sp[i] = (span){t->offset, t->offset + t->nbytes, i};
    }
    qsort(sp, (size_t)g->n_tensors, sizeof *sp, span_cmp);
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        if (sp[i].start < sp[i - 1].end) {
            const mz_gguf_tensor *a = &g->tensors[sp[i - 1].idx], *b = &g->tensors[sp[i].idx];
            s = mz_fail(MZ_E_FORMAT,
                        "tensor data overlap: '%s' [%llu, %llu) and '%s' [%llu, %llu)",
                        show_str(&a->name, na, sizeof na), (unsigned long long)sp[i - 1].start,
                        (unsigned long long)sp[i - 1].end, show_str(&b->name, nb, sizeof nb),
                        (unsigned long long)sp[i].start, (unsigned long long)sp[i].end);
            goto out_free_spans;
        }
    }
out_free_spans:
    free(sp);
    return s;
}

/* ---- entry ------------------------------------------------------------------- */

static mz_status parse_header(cursor *c, mz_gguf *g)
{
    uint32_t magic;
    mz_status s = read_u32(c, "magic", &magic);
    if (s != MZ_OK) return s;
    if (magic != MZ_GGUF_MAGIC) {
        char shown[8];
        return mz_fail(MZ_E_FORMAT, "not a GGUF file: bad magic '%s' (0x%08x), expected 'GGUF'",
                       show((const char *)c->buf, 4, shown, sizeof shown), magic);
    }
    if ((s = read_u32(c, "version", &g->version)) != MZ_OK) return s;
    if (g->version == 1 || g->version == 2)
        return mz_fail(MZ_E_UNSUPPORTED,
                       "GGUF version %u is not supported (only version 3 is; re-convert the "
                       "model with a current llama.cpp)",
                       g->version);
    if (g->version != 3) {
        if ((g->version & 0xffff) == 0 && (g->version >> 24) == 3)
            return mz_fail(MZ_E_UNSUPPORTED,
                           "GGUF version field 0x%08x looks like a big-endian v3 file, which is "
                           "not supported",
                           g->version);
        return mz_fail(MZ_E_FORMAT, "bad GGUF version %u (only version 3 is supported)",
                       g->version);
    }
    if ((s = read_u64(c, "tensor count", &g->n_tensors)) != MZ_OK) return s;
    if ((s = read_u64(c, "metadata count", &g->n_kv)) != MZ_OK) return s;
    if (g->n_kv > remaining(c) / MIN_KV_BYTES)
        return mz_fail(MZ_E_FORMAT,
                       "metadata count %llu is impossible: each entry needs at least %u bytes "
                       "and only %llu bytes remain after the header (truncated file or corrupt "
                       "count)",
                       (unsigned long long)g->n_kv, MIN_KV_BYTES, (unsigned long long)remaining(c));
    if (g->n_tensors > remaining(c) / MIN_TENSOR_INFO_BYTES)
        return mz_fail(MZ_E_FORMAT,
                       "tensor count %llu is impossible: each tensor info needs at least %u "
                       "bytes and only %llu bytes remain after the header (truncated file or "
                       "corrupt count)",
                       (unsigned long long)g->n_tensors, MIN_TENSOR_INFO_BYTES,
                       (unsigned long long)remaining(c));
    return MZ_OK;
}

/* Grows a malloc'd table geometrically to hold one more element. */
static mz_status grow(void **tab, size_t *cap, size_t have, size_t elem, uint64_t limit)
{
    if (have < *cap) return MZ_OK;
    size_t ncap = *cap ? *cap * 2 : 64;
    if (ncap > limit) ncap = (size_t)limit;
    void *p = realloc(*tab, ncap * elem);
    if (!p) return mz_fail(MZ_E_NOMEM, "out of memory growing a table to %zu entries", ncap);
    *tab = p;
    *cap = ncap;
    return MZ_OK;
}

static mz_status parse_alignment(mz_gguf *g)
{
    g->alignment = MZ_GGUF_DEFAULT_ALIGNMENT;
    const mz_gguf_kv *kv = mz_gguf_find(g, "general.alignment");
    if (!kv) return MZ_OK;
    if (kv->type != MZ_GGUF_UINT32)
        return mz_fail(MZ_E_FORMAT, "general.alignment has type %s, must be uint32",
                       mz_gguf_type_name(kv->type));
    uint64_t a = kv->v.u64;
    if (a == 0 || (a & (a - 1)))
        return mz_fail(MZ_E_FORMAT, "general.alignment %llu is not a nonzero power of two",
                       (unsigned long long)a);
    g->alignment = a;
    return MZ_OK;
}

static mz_status parse_impl(const uint8_t *buf, size_t len, uint64_t file_size, bool any_type,
                            mz_gguf *g, bool *need_more)
{
    char nb[NAME_SHOW_MAX + 8];
    cursor c = {.buf = buf, .len = len, .file_size = file_size, .owner = OWNER_HEADER, .elem = -1};
    mz_status s = parse_header(&c, g);
    if (s != MZ_OK) goto out;

    arena *a = g->arena;
    size_t kv_cap = 0, t_cap = 0;
    c.owner = OWNER_KV;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        if ((s = grow((void **)&g->kv, &kv_cap, (size_t)i, sizeof *g->kv, g->n_kv)) != MZ_OK)
            goto out;
        mz_gguf_kv *kv = &g->kv[i];
        memset(kv, 0, sizeof *kv);
        c.owner_idx = i;
        c.owner_name = NULL;
        c.elem = -1;
        if ((s = read_kv(&c, a, kv)) != MZ_OK) goto out;
    }
    c.owner_name = NULL;
    if ((s = check_unique(g->kv, sizeof *g->kv, offsetof(mz_gguf_kv, key), g->n_kv, "key",
                          "metadata entries")) != MZ_OK)
        goto out;
    if ((s = parse_alignment(g)) != MZ_OK) goto out;

    c.owner = OWNER_TENSOR;
    int64_t first_unsupported = -1;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        if ((s = grow((void **)&g->tensors, &t_cap, (size_t)i, sizeof *g->tensors,
                      g->n_tensors)) != MZ_OK)
            goto out;
        mz_gguf_tensor *t = &g->tensors[i];
        memset(t, 0, sizeof *t);
        c.owner_idx = i;
        c.owner_name = NULL;
        if ((s = read_tensor_info(&c, a, t)) != MZ_OK) goto out;
        if (first_unsupported < 0 && !any_type && !mz_dtype_supported(t->type))
            first_unsupported = (int64_t)i;
    }
    if ((s = check_unique(g->tensors, sizeof *g->tensors, offsetof(mz_gguf_tensor, name),
                          g->n_tensors, "tensor name", "tensor infos")) != MZ_OK)
        goto out;

    /* The data section starts at the next multiple of the alignment. */
    uint64_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
    if (c.pos > UINT64_MAX - pad) {
        s = mz_fail(MZ_E_FORMAT, "data section offset overflows");
        goto out;
    }
    g->data_offset = c.pos + pad;
    g->file_size = file_size;
    if (g->n_tensors && g->data_offset > file_size) {
        s = mz_fail(MZ_E_FORMAT,
                    "truncated file: the tensor data section would start at byte offset %llu, "
                    "past the end of the file (%llu bytes)",
                    (unsigned long long)g->data_offset, (unsigned long long)file_size);
        goto out;
    }
    if ((s = check_layout(g)) != MZ_OK) goto out;

    /* Reported last so that a structurally broken file is called broken. */
    if (first_unsupported >= 0) {
        const mz_gguf_tensor *t = &g->tensors[first_unsupported];
        s = mz_fail(MZ_E_UNSUPPORTED,
                    "tensor %s has type %s which mzcache does not support; supported: %s",
                    show_str(&t->name, nb, sizeof nb), mz_dtype_name(t->type),
                    mz_dtype_supported_names());
        goto out;
    }
out:
    *need_more = c.need_more;
    return s;
}

static mz_status parse_mem(const uint8_t *buf, size_t len, uint64_t file_size, bool any_type,
                           mz_gguf **out)
{
    mz_status s;
    *out = NULL;
    if ((!buf && len) || len > file_size)
        return mz_fail(MZ_E_INVAL, "mz_gguf_parse: bad buffer (len %zu, file_size %llu)", len,
                       (unsigned long long)file_size);
    mz_gguf *g = mz_calloc(1, sizeof *g);
    if (!g) return MZ_E_NOMEM;
    g->arena = mz_calloc(1, sizeof(arena));
    if (!g->arena) {
        s = MZ_E_NOMEM;
        goto out_free_gguf;
    }
    bool need_more;
    s = parse_impl(buf ? buf : (const uint8_t *)"", len, file_size, any_type, g, &need_more);
    if (s != MZ_OK) goto out_free_gguf;
    *out = g;
    return MZ_OK;

out_free_gguf:
    mz_gguf_free(g);
    return s;
}

mz_status mz_gguf_parse(const uint8_t *buf, size_t len, uint64_t file_size, mz_gguf **out)
{
    return parse_mem(buf, len, file_size, false, out);
}

mz_status mz_gguf_parse_any_type(const uint8_t *buf, size_t len, uint64_t file_size, mz_gguf **out)
{
    return parse_mem(buf, len, file_size, true, out);
}

void mz_gguf_free(mz_gguf *g)
{
    if (!g) return;
    arena_free(g->arena);
    free(g->kv);
    free(g->tensors);
    free(g);
}

mz_status mz_file_read_at(int fd, void *dst, size_t n, uint64_t off, const char *what)
{
    uint8_t *p = dst;
    while (n) {
        ssize_t r = pread(fd, p, n > (1u << 30) ? (1u << 30) : n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return mz_fail(MZ_E_IO, "reading %s: %s", what, strerror(errno));
        if (r == 0) return mz_fail(MZ_E_IO, "reading %s: unexpected end of file", what);
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return MZ_OK;
}

/* Reads [have, want) of the file into buf. */
static mz_status read_range(int fd, uint8_t *buf, size_t have, size_t want)
{
    while (have < want) {
        ssize_t r = pread(fd, buf + have, want - have, (off_t)have);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return mz_fail(MZ_E_IO, "read failed at byte %zu: %s", have, strerror(errno));
        if (r == 0) return mz_fail(MZ_E_IO, "file shrank while reading (at byte %zu)", have);
        have += (size_t)r;
    }
    return MZ_OK;
}

static mz_status open_file(const char *path, bool any_type, mz_gguf **out)
{
    mz_status s;
    uint8_t *buf = NULL;
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        s = mz_fail(MZ_E_IO, "cannot open: %s", strerror(errno));
        goto out_prefix;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        s = mz_fail(MZ_E_IO, "cannot stat: %s", strerror(errno));
        goto out_close_fd;
    }
    if (!S_ISREG(st.st_mode)) {
        s = mz_fail(MZ_E_IO, "not a regular file");
        goto out_close_fd;
    }
    uint64_t size = (uint64_t)st.st_size;

    /* Metadata is usually a few MB at the front of a file that may be many
     * GB: read a prefix and grow it only if the parser runs past it. */
    size_t cap = (size_t)MZ_MIN(size, (uint64_t)8 << 20), have = 0;
    for (;;) {
        uint8_t *nbuf = realloc(buf, cap ? cap : 1);
        if (!nbuf) {
            s = mz_fail(MZ_E_NOMEM, "out of memory reading %zu bytes of metadata", cap);
            goto out_free_buf;
        }
        buf = nbuf;
        if ((s = read_range(fd, buf, have, cap)) != MZ_OK) goto out_free_buf;
        have = cap;
        mz_gguf *g = mz_calloc(1, sizeof *g);
        if (!g) {
            s = MZ_E_NOMEM;
            goto out_free_buf;
        }
        g->arena = mz_calloc(1, sizeof(arena));
        bool need_more = false;
        s = g->arena ? parse_impl(buf, have, size, any_type, g, &need_more) : MZ_E_NOMEM;
        if (s == MZ_OK) {
            *out = g;
            break;
        }
        mz_gguf_free(g);
        if (!need_more || have >= size) goto out_free_buf;
        cap = (size_t)MZ_MIN(size, (uint64_t)have * 4);
    }
out_free_buf:
    free(buf);
out_close_fd:
    close(fd);
out_prefix:
    if (s != MZ_OK) mz_fail_prefix(s, "%s", path);
    return s;
}

mz_status mz_gguf_open(const char *path, mz_gguf **out) { return open_file(path, false, out); }

mz_status mz_gguf_open_any_type(const char *path, mz_gguf **out)
{
    return open_file(path, true, out);
}

/* ---- lookups and getters ------------------------------------------------------ */

const mz_gguf_kv *mz_gguf_find(const mz_gguf *g, const char *key)
{
    size_t n = strlen(key);
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (g->kv[i].key.len == n && memcmp(g->kv[i].key.ptr, key, n) == 0) return &g->kv[i];
    return NULL;
}

const mz_gguf_tensor *mz_gguf_find_tensor(const mz_gguf *g, const char *name)
{
    size_t n = strlen(name);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].name.len == n && memcmp(g->tensors[i].name.ptr, name, n) == 0)
            return &g->tensors[i];
    return NULL;
}

static mz_status find_typed(const mz_gguf *g, const char *key, const mz_gguf_kv **kv)
{
    *kv = mz_gguf_find(g, key);
    if (!*kv) return mz_fail(MZ_E_INVAL, "metadata key '%s' not found", key);
    return MZ_OK;
}

static mz_status wrong_type(const mz_gguf_kv *kv, const char *key, const char *expected)
{
    return mz_fail(MZ_E_FORMAT, "metadata key '%s' has type %s, expected %s", key,
                   mz_gguf_type_name(kv->type), expected);
}

mz_status mz_gguf_get_u32(const mz_gguf *g, const char *key, uint32_t *out)
{
    const mz_gguf_kv *kv;
    mz_status s = find_typed(g, key, &kv);
    if (s != MZ_OK) return s;
    if (type_is_unsigned(kv->type)) {
        if (kv->v.u64 > UINT32_MAX)
            return mz_fail(MZ_E_FORMAT, "metadata key '%s' value %llu does not fit in uint32",
                           key, (unsigned long long)kv->v.u64);
        *out = (uint32_t)kv->v.u64;
        return MZ_OK;
    }
    if (type_is_signed(kv->type)) {
        if (kv->v.i64 < 0 || kv->v.i64 > (int64_t)UINT32_MAX)
            return mz_fail(MZ_E_FORMAT, "metadata key '%s' value %lld does not fit in uint32",
                           key, (long long)kv->v.i64);
        *out = (uint32_t)kv->v.i64;
        return MZ_OK;
    }
    return wrong_type(kv, key, "an integer");
}

/* Getters of one scalar kind: the entry must have type t1 or t2 (named
 * `expected` in the error); `value` reads it from kv. */
#define GGUF_SCALAR_GETTER(name, T, t1, t2, expected, value)                       \
    mz_status name(const mz_gguf *g, const char *key, T *out)                      \
    {                                                                              \
        const mz_gguf_kv *kv;                                                      \
        mz_status s = find_typed(g, key, &kv);                                     \
        if (s != MZ_OK) return s;                                                  \
        if (kv->type != (t1) && kv->type != (t2)) return wrong_type(kv, key, expected); \
        *out = (value);                                                            \
        return MZ_OK;                                                              \
    }

GGUF_SCALAR_GETTER(mz_gguf_get_f32, float, MZ_GGUF_FLOAT32, MZ_GGUF_FLOAT64, "float32",
                   (float)kv->v.f64)
GGUF_SCALAR_GETTER(mz_gguf_get_bool, bool, MZ_GGUF_BOOL, MZ_GGUF_BOOL, "bool", kv->v.u64 != 0)
GGUF_SCALAR_GETTER(mz_gguf_get_str, mz_gguf_str, MZ_GGUF_STRING, MZ_GGUF_STRING, "string",
                   kv->v.str)

mz_status mz_gguf_get_arr(const mz_gguf *g, const char *key, mz_gguf_type elem_type,
                          const void **data, uint64_t *n)
{
    const mz_gguf_kv *kv;
    mz_status s = find_typed(g, key, &kv);
    if (s != MZ_OK) return s;
    if (kv->type != MZ_GGUF_ARRAY || kv->arr_type != elem_type) {
        char expected[32];
        snprintf(expected, sizeof expected, "array of %s", mz_gguf_type_name(elem_type));
        if (kv->type == MZ_GGUF_ARRAY)
            return mz_fail(MZ_E_FORMAT, "metadata key '%s' is an array of %s, expected %s", key,
                           mz_gguf_type_name(kv->arr_type), expected);
        return wrong_type(kv, key, expected);
    }
    *data = kv->arr_data;
    *n = kv->arr_n;
    return MZ_OK;
}
